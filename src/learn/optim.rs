//! Optimizers (§12): SGD with momentum, Adam and AdamW, with global-norm clipping and a
//! warmup + cosine learning-rate schedule. Updates run in f64 in a fixed order, so training
//! with one seed is bit-reproducible.

use crate::eval::dense::split;

/// Which update rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Stochastic gradient descent, with momentum when `momentum > 0` (PyTorch's form:
    /// `b ← μ·b + g`, `θ ← θ − lr·b`); weight decay adds `wd·θ` to the gradient.
    Sgd,
    /// Adam (β = 0.9, 0.999, ε = 1e-8); weight decay adds `wd·θ` to the gradient.
    Adam,
    /// AdamW: Adam with decoupled weight decay, `θ ← θ − lr·wd·θ`.
    AdamW,
}

/// How the learning rate changes over the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// The same rate throughout (after warmup).
    Constant,
    /// From the full rate down to 0 along half a cosine (after warmup).
    Cosine,
}

/// Everything that shapes an update.
#[derive(Clone, Debug)]
pub struct Config {
    /// Update rule.
    pub kind: Kind,
    /// Peak learning rate.
    pub lr: f64,
    /// SGD momentum.
    pub momentum: f64,
    /// Weight decay.
    pub weight_decay: f64,
    /// Largest global gradient norm; larger gradients are scaled down to it.
    pub clip: Option<f64>,
    /// Learning-rate schedule.
    pub schedule: Schedule,
    /// Steps of linear warmup from 0.
    pub warmup: u64,
    /// Steps in the whole run (for the cosine schedule).
    pub total_steps: u64,
}

/// Per-parameter moments and the step count: what a checkpoint must keep to resume exactly.
#[derive(Clone, Debug, Default)]
pub struct State {
    /// Steps taken.
    pub step: u64,
    /// First moments (momentum buffers), one per parameter.
    pub m: Vec<Vec<f64>>,
    /// Second moments (Adam), one per parameter.
    pub v: Vec<Vec<f64>>,
}

/// `tl train`'s defaults: Adam at 1e-3, no momentum, decay, clipping or warmup, a constant
/// rate.
impl Default for Config {
    fn default() -> Config {
        Config {
            kind: Kind::Adam,
            lr: 1e-3,
            momentum: 0.0,
            weight_decay: 0.0,
            clip: None,
            schedule: Schedule::Constant,
            warmup: 0,
            total_steps: 0,
        }
    }
}

impl Config {
    /// The learning rate at step `step` (counting from 0).
    pub fn lr_at(&self, step: u64) -> f64 {
        let warm = if self.warmup > 0 && step < self.warmup {
            (step + 1) as f64 / self.warmup as f64
        } else {
            1.0
        };
        let decay = match self.schedule {
            Schedule::Constant => 1.0,
            Schedule::Cosine => {
                let span = self.total_steps.saturating_sub(self.warmup).max(1) as f64;
                let t = (step.saturating_sub(self.warmup) as f64 / span).min(1.0);
                0.5 * (1.0 + (std::f64::consts::PI * t).cos())
            }
        };
        self.lr * warm * decay
    }

    /// Applies one update to `params` from `grads` (clipped in place); with `--clip`, returns
    /// the gradient norm before clipping (a sum over every element, made only then). With
    /// `threads` above 1, inside a pool of workers, Adam's elementwise update runs in blocks
    /// on the workers (each element's operations are the same).
    pub fn update(
        &self,
        state: &mut State,
        params: &mut [Vec<f64>],
        grads: &mut [Vec<f64>],
        threads: usize,
    ) -> Option<f64> {
        let clip = self.clip.map(|c| {
            let norm = grads
                .iter()
                .flat_map(|g| g.iter())
                .map(|x| x * x)
                .sum::<f64>()
                .sqrt();
            if norm > c && norm > 0.0 {
                let s = c / norm;
                grads.iter_mut().flatten().for_each(|x| *x *= s);
            }
            norm
        });
        if state.m.len() != params.len() {
            state.m = params.iter().map(|p| vec![0.0; p.len()]).collect();
        }
        if state.v.len() != params.len() && self.kind != Kind::Sgd {
            state.v = params.iter().map(|p| vec![0.0; p.len()]).collect();
        }
        let lr = self.lr_at(state.step);
        state.step += 1;
        let t = state.step as f64;
        let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8);
        let adam = AdamStep {
            decoupled: self.kind == Kind::AdamW,
            lr,
            weight_decay: self.weight_decay,
            betas: (b1, b2),
            corrections: (1.0 - b1.powf(t), 1.0 - b2.powf(t)),
            eps,
        };
        if self.kind != Kind::Sgd {
            // In blocks, on the pool's workers where there are enough elements to split;
            // each element's operations are the same either way.
            let total: usize = params.iter().map(Vec::len).sum();
            let mut blocks = Vec::new();
            let moments = state.m.iter_mut().zip(state.v.iter_mut());
            for ((p, g), (m, v)) in params.iter_mut().zip(grads.iter()).zip(moments) {
                let (m, v) = (m.chunks_mut(ADAM_BLOCK), v.chunks_mut(ADAM_BLOCK));
                let wg = p.chunks_mut(ADAM_BLOCK).zip(g.chunks(ADAM_BLOCK));
                blocks.extend(wg.zip(m.zip(v)));
            }
            let step = |((w, g), (m, v)): AdamBlock| adam.apply(w, g, (m, v));
            if split::splits_from(threads, total, ADAM_SPLIT) {
                use rayon::prelude::*;
                blocks.into_par_iter().for_each(step);
            } else {
                blocks.into_iter().for_each(step);
            }
            return clip;
        }
        for (p, (g, m)) in params.iter_mut().zip(grads.iter().zip(state.m.iter_mut())) {
            for ((w, &gi), mi) in p.iter_mut().zip(g).zip(m.iter_mut()) {
                let gi = gi + self.weight_decay * *w;
                let step = if self.momentum > 0.0 {
                    *mi = self.momentum * *mi + gi;
                    *mi
                } else {
                    gi
                };
                *w -= lr * step;
            }
        }
        clip
    }
}

/// Parameter elements under which Adam's update stays on the calling thread (each element
/// costs a square root and three divisions, so fewer are worth splitting than for a copy).
const ADAM_SPLIT: usize = 1 << 15;

/// Elements of a block of an Adam update.
const ADAM_BLOCK: usize = 1 << 13;

/// A block of an Adam update: weights and gradients, first and second moments.
type AdamBlock<'a> = ((&'a mut [f64], &'a [f64]), (&'a mut [f64], &'a mut [f64]));

/// One parameter's Adam update, as a loop for `functions::widest`.
struct Update<'a> {
    step: &'a AdamStep,
    w: &'a mut [f64],
    g: &'a [f64],
    moments: (&'a mut [f64], &'a mut [f64]),
}

impl crate::functions::widest::Vectorised for Update<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        self.step.elements(self.w, self.g, self.moments);
    }
}

/// One Adam (or AdamW) update of a parameter's elements, with everything that is the same
/// for all of them.
struct AdamStep {
    /// AdamW: weight decay applied to the weight, not added to the gradient.
    decoupled: bool,
    lr: f64,
    weight_decay: f64,
    betas: (f64, f64),
    /// `1 - β₁ᵗ` and `1 - β₂ᵗ`.
    corrections: (f64, f64),
    eps: f64,
}

impl AdamStep {
    /// Updates `w` and its moments in place, on the widest vectors the processor has
    /// (every instruction set gives the same bits: each operation is rounded once, none is
    /// fused).
    fn apply(&self, w: &mut [f64], g: &[f64], moments: (&mut [f64], &mut [f64])) {
        crate::functions::widest::widest(Update {
            step: self,
            w,
            g,
            moments,
        });
    }

    #[inline(always)]
    fn elements(&self, w: &mut [f64], g: &[f64], (m, v): (&mut [f64], &mut [f64])) {
        let ((b1, b2), (c1, c2)) = (self.betas, self.corrections);
        let (lr, decay, eps) = (self.lr, self.weight_decay, self.eps);
        let update = |w: f64, gi: f64, mi: &mut f64, vi: &mut f64| {
            *mi = b1 * *mi + (1.0 - b1) * gi;
            *vi = b2 * *vi + (1.0 - b2) * gi * gi;
            w - lr * (*mi / c1) / ((*vi / c2).sqrt() + eps)
        };
        let all = w.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut());
        if self.decoupled {
            for (((w, &gi), mi), vi) in all {
                *w -= lr * decay * *w;
                *w = update(*w, gi, mi, vi);
            }
        } else {
            for (((w, &gi), mi), vi) in all {
                *w = update(*w, gi + decay * *w, mi, vi);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dispatched Adam loop gives the plain loop's bits, for Adam and AdamW.
    #[test]
    fn adam_steps_agree_across_instruction_sets() {
        for decoupled in [false, true] {
            let step = AdamStep {
                decoupled,
                lr: 0.003,
                weight_decay: 0.01,
                betas: (0.9, 0.999),
                corrections: (0.19, 0.002997),
                eps: 1e-8,
            };
            let w: Vec<f64> = (0..301).map(|i| (i as f64 * 0.37).sin()).collect();
            let g: Vec<f64> = (0..301).map(|i| (i as f64 * 0.11).cos() * 0.1).collect();
            let mut plain = (w.clone(), vec![0.01; 301], vec![0.001; 301]);
            step.elements(&mut plain.0, &g, (&mut plain.1, &mut plain.2));
            let mut fast = (w.clone(), vec![0.01; 301], vec![0.001; 301]);
            step.apply(&mut fast.0, &g, (&mut fast.1, &mut fast.2));
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&plain.0), bits(&fast.0));
            assert_eq!(bits(&plain.1), bits(&fast.1));
            assert_eq!(bits(&plain.2), bits(&fast.2));
        }
    }

    fn config(kind: Kind) -> Config {
        Config {
            kind,
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 0.0,
            clip: None,
            schedule: Schedule::Constant,
            warmup: 0,
            total_steps: 100,
        }
    }

    /// Adam's update split across a pool's two workers gives one thread's bits, over
    /// parameters large enough to split and one too small to fill a block.
    #[test]
    fn a_split_adam_update_matches_one_thread() {
        for kind in [Kind::Adam, Kind::AdamW] {
            let c = Config {
                weight_decay: 0.01,
                ..config(kind)
            };
            let params: Vec<Vec<f64>> = [50_000usize, 7, 20_000]
                .iter()
                .map(|&n| (0..n).map(|i| (i as f64 * 0.37).sin()).collect())
                .collect();
            let grads: Vec<Vec<f64>> = params
                .iter()
                .map(|p| p.iter().map(|w| (w * 3.1).cos() * 0.1).collect())
                .collect();
            let run = |threads: usize| {
                let (mut s, mut p) = (State::default(), params.clone());
                for _ in 0..3 {
                    c.update(&mut s, &mut p, &mut grads.clone(), threads);
                }
                (p, s)
            };
            let (one, s1) = run(1);
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            let (two, s2) = pool.install(|| run(2));
            let bits =
                |v: &[Vec<f64>]| -> Vec<u64> { v.iter().flatten().map(|x| x.to_bits()).collect() };
            assert_eq!(bits(&one), bits(&two));
            assert_eq!(bits(&s1.m), bits(&s2.m));
            assert_eq!(bits(&s1.v), bits(&s2.v));
        }
    }

    #[test]
    fn every_optimizer_minimises_a_quadratic() {
        for kind in [Kind::Sgd, Kind::Adam, Kind::AdamW] {
            let c = config(kind);
            let mut s = State::default();
            let mut p = vec![vec![3.0, -2.0]];
            for _ in 0..300 {
                let mut g = vec![p[0].iter().map(|w| 2.0 * w).collect()];
                c.update(&mut s, &mut p, &mut g, 1);
            }
            assert!(p[0].iter().all(|w| w.abs() < 1e-2), "{kind:?}: {p:?}");
        }
    }

    #[test]
    fn adam_first_step_moves_each_weight_by_the_learning_rate() {
        let c = config(Kind::Adam);
        let mut s = State::default();
        let mut p = vec![vec![1.0, 1.0]];
        c.update(&mut s, &mut p, &mut [vec![5.0, -0.01]], 1);
        assert!((p[0][0] - 0.9).abs() < 1e-6 && (p[0][1] - 1.1).abs() < 1e-6);
    }

    #[test]
    fn clipping_scales_to_the_global_norm() {
        let mut c = config(Kind::Sgd);
        c.momentum = 0.0;
        c.lr = 1.0;
        c.clip = Some(1.0);
        let mut s = State::default();
        let mut p = vec![vec![0.0], vec![0.0]];
        let norm = c.update(&mut s, &mut p, &mut [vec![3.0], vec![4.0]], 1);
        assert_eq!(norm, Some(5.0));
        assert!((p[0][0] + 0.6).abs() < 1e-12 && (p[1][0] + 0.8).abs() < 1e-12);
    }

    #[test]
    fn warmup_then_cosine_reaches_zero() {
        let mut c = config(Kind::Sgd);
        c.schedule = Schedule::Cosine;
        c.warmup = 10;
        assert!((c.lr_at(0) - 0.01).abs() < 1e-12);
        assert!((c.lr_at(9) - 0.1).abs() < 1e-12);
        assert!(c.lr_at(100) < 1e-12);
        assert!((c.lr_at(55) - 0.05).abs() < 1e-12);
    }
}
