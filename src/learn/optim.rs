//! Optimizers (§12): SGD with momentum, Adam and AdamW, with global-norm clipping and a
//! warmup + cosine learning-rate schedule. Updates run in a fixed order, so training with
//! one seed is bit-reproducible: Adam's update of an f32 parameter in f32 arithmetic, as
//! PyTorch's is, every other update in f64; each leaves its parameter rounded to its type.

use crate::eval::dense::split;
use crate::tensor::ElemType;

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

    /// Applies one update to `params` from `grads` (clipped in place), leaving each parameter
    /// rounded to its type in `elems` (f64 where none is given); with `--clip`, returns the
    /// gradient norm before clipping (a sum over every element, made only then). With
    /// `threads` above 1, inside a pool of workers, Adam's elementwise update runs in blocks
    /// on the workers (each element's operations are the same).
    pub fn update(
        &self,
        state: &mut State,
        (params, elems): (&mut [Vec<f64>], &[ElemType]),
        grads: &mut [Vec<f64>],
        threads: usize,
    ) -> Option<f64> {
        let elem = |i: usize| elems.get(i).copied().unwrap_or(ElemType::F64);
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
            for (i, ((p, g), (m, v))) in
                params.iter_mut().zip(grads.iter()).zip(moments).enumerate()
            {
                let (m, v) = (m.chunks_mut(ADAM_BLOCK), v.chunks_mut(ADAM_BLOCK));
                let wg = p.chunks_mut(ADAM_BLOCK).zip(g.chunks(ADAM_BLOCK));
                blocks.extend(wg.zip(m.zip(v)).map(|b| (b, elem(i))));
            }
            let step =
                |(((w, g), (m, v)), elem): (AdamBlock, ElemType)| adam.apply(w, g, (m, v), elem);
            if split::splits_from(threads, total, crate::plan::schedule::UPDATE_ELEMENTS.at) {
                use rayon::prelude::*;
                blocks.into_par_iter().for_each(step);
            } else {
                blocks.into_iter().for_each(step);
            }
            return clip;
        }
        for (i, (p, (g, m))) in params
            .iter_mut()
            .zip(grads.iter().zip(state.m.iter_mut()))
            .enumerate()
        {
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
            elem(i).round_all(p);
        }
        clip
    }
}

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
    /// In f32 arithmetic (an f32 parameter), else in f64.
    narrow: bool,
}

impl crate::functions::widest::Vectorised for Update<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        match self.narrow {
            true => self.step.elements_f32(self.w, self.g, self.moments),
            false => self.step.elements(self.w, self.g, self.moments),
        }
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
    /// fused), and rounds `w` to `elem`. An f32 parameter's update runs in f32, its moments
    /// held as f32 values, as PyTorch's are: half the width per element, and its square roots
    /// and divisions (most of the update's time) twice as many per instruction.
    fn apply(&self, w: &mut [f64], g: &[f64], moments: (&mut [f64], &mut [f64]), elem: ElemType) {
        let narrow = elem == ElemType::F32;
        crate::functions::widest::widest(Update {
            step: self,
            w,
            g,
            moments,
            narrow,
        });
        if !narrow {
            elem.round_all(w);
        }
    }

    #[inline(always)]
    fn elements(&self, w: &mut [f64], g: &[f64], (m, v): (&mut [f64], &mut [f64])) {
        let ((b1, b2), (c1, c2)) = (self.betas, self.corrections);
        let (lr, decay, eps) = (self.lr, self.weight_decay, self.eps);
        // PyTorch's arrangement, with its two divisions by constants made products: one
        // square root and one division an element (they are most of the update's time).
        let (step, root) = (lr / c1, 1.0 / c2.sqrt());
        let update = |w: f64, gi: f64, mi: &mut f64, vi: &mut f64| {
            *mi = b1 * *mi + (1.0 - b1) * gi;
            *vi = b2 * *vi + (1.0 - b2) * gi * gi;
            w - step * *mi / (vi.sqrt() * root + eps)
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

    /// [`AdamStep::elements`] in f32: the gradient rounded to f32, every operation in f32,
    /// the moments and the weight left as f32 values.
    #[inline(always)]
    fn elements_f32(&self, w: &mut [f64], g: &[f64], (m, v): (&mut [f64], &mut [f64])) {
        let ((b1, b2), (c1, c2)) = (self.betas, self.corrections);
        let (lr, decay, eps) = (self.lr as f32, self.weight_decay as f32, self.eps as f32);
        let (step, root) = ((self.lr / c1) as f32, (1.0 / c2.sqrt()) as f32);
        let (b1, b2, a1, a2) = (b1 as f32, b2 as f32, (1.0 - b1) as f32, (1.0 - b2) as f32);
        let all = w.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut());
        for (((w, &gi), mi), vi) in all {
            let (mut wf, mut gf) = (*w as f32, gi as f32);
            if self.decoupled {
                wf -= lr * decay * wf;
            } else {
                gf += decay * wf;
            }
            let mf = b1 * (*mi as f32) + a1 * gf;
            let vf = b2 * (*vi as f32) + a2 * gf * gf;
            wf -= step * mf / (vf.sqrt() * root + eps);
            (*w, *mi, *vi) = (wf as f64, mf as f64, vf as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dispatched Adam loop gives the plain loop's bits, for Adam and AdamW, in f64
    /// and in f32.
    #[test]
    fn adam_steps_agree_across_instruction_sets() {
        for (decoupled, elem) in [false, true]
            .into_iter()
            .flat_map(|d| [ElemType::F64, ElemType::F32].map(|e| (d, e)))
        {
            let step = AdamStep {
                decoupled,
                lr: 0.003,
                weight_decay: 0.01,
                betas: (0.9, 0.999),
                corrections: (0.19, 0.002997),
                eps: 1e-8,
            };
            let mut w: Vec<f64> = (0..301).map(|i| (i as f64 * 0.37).sin()).collect();
            elem.round_all(&mut w);
            let g: Vec<f64> = (0..301).map(|i| (i as f64 * 0.11).cos() * 0.1).collect();
            let mut plain = (w.clone(), vec![0.01; 301], vec![0.001; 301]);
            let moments = (plain.1.as_mut_slice(), plain.2.as_mut_slice());
            match elem {
                ElemType::F32 => step.elements_f32(&mut plain.0, &g, moments),
                _ => step.elements(&mut plain.0, &g, moments),
            }
            let mut fast = (w.clone(), vec![0.01; 301], vec![0.001; 301]);
            step.apply(&mut fast.0, &g, (&mut fast.1, &mut fast.2), elem);
            if elem == ElemType::F32 {
                let narrow = |x: &f64| *x == (*x as f32) as f64;
                assert!(fast.0.iter().chain(&fast.1).chain(&fast.2).all(narrow));
            }
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
                    c.update(&mut s, (&mut p, &[]), &mut grads.clone(), threads);
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
                c.update(&mut s, (&mut p, &[]), &mut g, 1);
            }
            assert!(p[0].iter().all(|w| w.abs() < 1e-2), "{kind:?}: {p:?}");
        }
    }

    #[test]
    fn adam_first_step_moves_each_weight_by_the_learning_rate() {
        let c = config(Kind::Adam);
        let mut s = State::default();
        let mut p = vec![vec![1.0, 1.0]];
        c.update(&mut s, (&mut p, &[]), &mut [vec![5.0, -0.01]], 1);
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
        let norm = c.update(&mut s, (&mut p, &[]), &mut [vec![3.0], vec![4.0]], 1);
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
