//! `softmax` and `lnorm` (§6.4) in f64, the one definition every evaluator uses: the row
//! statistics each element is normalised by, and the Jacobian-vector product of the
//! backward pass. (f32 rows are `fast_rows`, the vectorised kernels.)

use super::lanes::{lanes, lanes2};
use super::widest::{widest, Vectorised};
use super::{Structural, LNORM_EPSILON};

/// Lanes of the rows' sums (eight f64: one AVX-512 vector).
const LANES: usize = 8;

/// What one row's elements are normalised by: softmax subtracts the row's largest value and
/// divides the exponential by the sum of the row's; `lnorm` subtracts the mean and divides
/// by `sqrt(var + ε)`, the population variance. Sums run in eight interleaved lanes
/// (`functions::lanes`), always in the same order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowStats {
    kind: Structural,
    shift: f64,
    scale: f64,
}

impl RowStats {
    /// The statistics of a row's defined values (a point that contributes nothing is left
    /// out, §6.4 as implemented).
    pub(crate) fn of(kind: Structural, row: &[f64]) -> RowStats {
        let sum = |a: f64, b: f64| a + b;
        match kind {
            Structural::Softmax => {
                let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let s = lanes::<f64, f64, LANES>(row, 0.0, |a, v| a + (v - m).exp(), sum);
                RowStats {
                    kind,
                    shift: m,
                    scale: s,
                }
            }
            _ => {
                let n = row.len() as f64;
                let mean = lanes::<f64, f64, LANES>(row, 0.0, sum, sum) / n;
                let square = |a: f64, v: f64| a + (v - mean) * (v - mean);
                let var = lanes::<f64, f64, LANES>(row, 0.0, square, sum) / n;
                RowStats {
                    kind,
                    shift: mean,
                    scale: (var + LNORM_EPSILON).sqrt(),
                }
            }
        }
    }

    /// What [`RowStats::backward`] needs of a row's inputs: for softmax nothing (its
    /// Jacobian is in the outputs alone), for `lnorm` the divisor.
    pub(crate) fn for_backward(kind: Structural, row: &[f64]) -> RowStats {
        match kind {
            Structural::Softmax => RowStats {
                kind,
                shift: 0.0,
                scale: 1.0,
            },
            _ => RowStats::of(kind, row),
        }
    }

    /// `lnorm`'s statistics for its backward pass from the divisor alone (what
    /// [`RowStats::for_backward`] found, kept by the forward pass).
    pub(crate) fn lnorm_dividing_by(divisor: f64) -> RowStats {
        RowStats {
            kind: Structural::Lnorm,
            shift: 0.0,
            scale: divisor,
        }
    }

    /// The divisor `lnorm` applies (`sqrt(var + ε)`), all its backward pass needs of the
    /// row's inputs.
    pub(crate) fn divisor(&self) -> f64 {
        self.scale
    }

    /// The normalised value of the row's element `x`.
    #[inline]
    pub(crate) fn apply(&self, x: f64) -> f64 {
        match self.kind {
            Structural::Softmax => (x - self.shift).exp() / self.scale,
            _ => (x - self.shift) / self.scale,
        }
    }

    /// The gradient with respect to a row's inputs of `Σ g_q y_q`, where `y` is the
    /// normalised row these statistics made and `g` the adjoint of each of its elements:
    /// softmax's `y_p (g_p − Σ g y)`, `lnorm`'s `(g_p − mean g − y_p · mean g·y) / sd`.
    pub(crate) fn backward(&self, y: &[f64], g: &[f64], out: &mut [f64]) {
        out.copy_from_slice(g);
        self.backward_in_place(y, out);
    }

    /// [`RowStats::backward`] with the row's adjoint `g` replaced by the result (each element
    /// reads only its own adjoint and sums taken before any is written), on the widest
    /// vectors the processor has.
    pub(crate) fn backward_in_place(&self, y: &[f64], g: &mut [f64]) {
        widest(Backward { stats: self, y, g });
    }
}

/// [`RowStats::backward_in_place`]'s arguments, as a loop for [`widest`].
struct Backward<'a> {
    stats: &'a RowStats,
    y: &'a [f64],
    g: &'a mut [f64],
}

impl Vectorised for Backward<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let Backward { stats, y, g } = self;
        let n = y.len() as f64;
        let pair = |(a, b): (f64, f64), (c, d): (f64, f64)| (a + c, b + d);
        match stats.kind {
            Structural::Softmax => {
                let dot =
                    lanes2::<f64, f64, f64, LANES>((g, y), 0.0, |a, x, y| a + x * y, |a, b| a + b);
                for (o, &yq) in g.iter_mut().zip(y) {
                    *o = yq * (*o - dot);
                }
            }
            _ => {
                let both = |(s, d): (f64, f64), x: f64, y: f64| (s + x, d + x * y);
                let (sum_g, dot) = lanes2::<f64, f64, _, LANES>((g, y), (0.0, 0.0), both, pair);
                let (mean_g, mean_gy) = (sum_g / n, dot / n);
                for (o, &yq) in g.iter_mut().zip(y) {
                    *o = (*o - mean_g - yq * mean_gy) / stats.scale;
                }
            }
        }
    }
}

/// Softmax or layer normalisation of a whole row in place, as [`RowStats`] defines it.
pub(crate) fn normalize_row(kind: Structural, row: &mut [f64]) {
    let stats = RowStats::of(kind, row);
    row.iter_mut().for_each(|x| *x = stats.apply(*x));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backward_pass_matches_finite_differences() {
        for kind in [Structural::Softmax, Structural::Lnorm] {
            let x = [0.3, -1.2, 2.0, 0.5];
            let g = [1.0, -0.5, 0.25, 2.0];
            let loss = |x: &[f64]| {
                let mut y = x.to_vec();
                normalize_row(kind, &mut y);
                y.iter().zip(&g).map(|(a, b)| a * b).sum::<f64>()
            };
            let mut y = x.to_vec();
            normalize_row(kind, &mut y);
            let mut got = [0.0; 4];
            RowStats::of(kind, &x).backward(&y, &g, &mut got);
            for p in 0..4 {
                let (mut up, mut down) = (x, x);
                up[p] += 1e-6;
                down[p] -= 1e-6;
                let want = (loss(&up) - loss(&down)) / 2e-6;
                assert!(
                    (got[p] - want).abs() < 1e-6,
                    "{kind:?} {p}: {} vs {want}",
                    got[p]
                );
            }
        }
    }
}
