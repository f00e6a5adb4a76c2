//! `tl train --check-grad`: analytic gradients against central finite differences (§12).
//!
//! Run it on a program checked at `--precision f64`: in f32 the differences drown in
//! rounding.

use super::gradients;
use crate::diagnostics::Diagnostics;
use crate::eval::EvalOptions;
use crate::semantics::{Checked, TensorId};

/// The worst relative error a correct gradient shows in f64 with this step: correct programs
/// stay below 1e-4; a kink (relu at 0, `max=` ties) or a wrong gradient goes far above.
pub const TOLERANCE: f64 = 1e-3;

/// The magnitude below which a gradient is compared absolutely: within [`TOLERANCE`] then
/// means |a − n| ≤ 1e-5, PyTorch gradcheck's `atol` beside its `rtol` of 1e-3. A loss summed
/// over thousands of examples leaves about 1e-6 of rounding in a central difference, which a
/// smaller floor would read as a large relative error of a small, correct gradient.
pub const FLOOR: f64 = 1e-2;

/// The central-difference steps tried, relative to max(1, |θ|). A small step drowns in the
/// rounding of a large loss (about ε·|L|/h); a large one crosses kinks near the point (a ReLU
/// input close to 0). No single step suits both, so each element takes the step whose
/// difference agrees best: a wrong gradient disagrees at every step.
const STEPS: [f64; 2] = [1e-5, 1e-4];

/// How well one parameter's analytic gradient matched finite differences.
#[derive(Clone, Debug)]
pub struct ParamCheck {
    /// The parameter.
    pub name: String,
    /// Elements compared.
    pub checked: usize,
    /// Of those, the ones whose analytic gradient is not 0: a check that saw only zeros
    /// (the weights of blank pixels) has tested nothing but that they are 0.
    pub nonzero: usize,
    /// Worst relative error |a − n| / max(|a|, |n|, [`FLOOR`]) over them.
    pub worst: f64,
    /// Largest analytic gradient magnitude among them, for scale.
    pub largest: f64,
    /// The element where it occurred, row-major.
    pub at: usize,
}

impl ParamCheck {
    /// Whether its worst relative error is within [`TOLERANCE`].
    pub fn passes(&self) -> bool {
        self.worst <= TOLERANCE
    }
}

/// Up to `per_param` elements to compare, evenly spaced among those whose analytic gradient
/// is not 0 (where a wrong gradient shows), then, if there are fewer, evenly spaced among the
/// rest (a gradient that is 0 where it should not be shows there).
fn picks(analytic: &[f64], per_param: usize) -> Vec<usize> {
    let spread = |of: Vec<usize>, k: usize| -> Vec<usize> {
        match of.len() <= k {
            true => of,
            false => (0..k).map(|j| of[j * of.len() / k]).collect(),
        }
    };
    let (nonzero, zero): (Vec<usize>, Vec<usize>) =
        (0..analytic.len()).partition(|&i| analytic[i] != 0.0);
    let mut out = spread(nonzero, per_param);
    let rest = per_param - out.len();
    out.extend(spread(zero, rest));
    out.sort_unstable();
    out
}

/// Compares d(loss)/d(θ) with (L(θ + h) − L(θ − h)) / 2h for each of [`STEPS`], on up to
/// `per_param` elements of each trainable parameter ([`picks`]). Each evaluation runs only
/// the strata the loss reads.
pub fn check(
    p: &Checked,
    o: &EvalOptions,
    loss: TensorId,
    trainable: &[TensorId],
    per_param: usize,
) -> Result<Vec<ParamCheck>, Diagnostics> {
    let plan = crate::plan::plan(p);
    let g = gradients(p, &plan, o, loss, trainable)?;
    let mut q = p.clone();
    let mut out = Vec::new();
    for (&t, analytic) in trainable.iter().zip(&g.grads) {
        let picks = picks(analytic, per_param);
        let nonzero = picks.iter().filter(|&&i| analytic[i] != 0.0).count();
        let mut worst = (0.0f64, 0usize);
        let mut largest = 0.0f64;
        for &i in &picks {
            let Some(base) = q.data[t].as_ref().map(|d| d.to_dense_values()) else {
                continue;
            };
            let w = base[i];
            let mut at = |x: f64| -> Result<f64, Diagnostics> {
                let mut v = base.clone();
                v[i] = x;
                q.data[t] =
                    crate::tensor::Tensor::dense(p.tensors[t].elem, p.tensors[t].shape.clone(), v)
                        .ok();
                Ok(gradients(&q, &plan, o, loss, &[])?.loss)
            };
            let a = analytic[i];
            let mut err = f64::INFINITY;
            for step in STEPS {
                let h = step * w.abs().max(1.0);
                let numeric = (at(w + h)? - at(w - h)?) / (2.0 * h);
                let e = (a - numeric).abs() / a.abs().max(numeric.abs()).max(FLOOR);
                err = if e.is_nan() || err.is_nan() {
                    f64::NAN
                } else {
                    err.min(e)
                };
            }
            q.data[t] = p.data[t].clone();
            largest = largest.max(a.abs());
            if err > worst.0 || err.is_nan() {
                worst = (err, i);
            }
        }
        out.push(ParamCheck {
            name: p.tensors[t].name.clone(),
            checked: picks.len(),
            nonzero,
            worst: worst.0,
            largest,
            at: worst.1,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::picks;

    #[test]
    fn elements_with_a_gradient_are_picked_first() {
        // Blank pixels: most gradients are 0, and evenly spaced picks would see only those.
        let mut g = vec![0.0; 100];
        for i in [7, 13, 55, 91] {
            g[i] = 0.5;
        }
        assert_eq!(picks(&g, 3), [7, 13, 55]);
        assert_eq!(picks(&g, 6), [0, 7, 13, 50, 55, 91]);
        assert_eq!(picks(&[0.0; 4], 2), [0, 2]);
    }
}
