//! Softmax and layer normalisation of f32 rows, vectorised. The reference's order (libm's
//! `exp` per element, sums from left to right, in f64) does not vectorise, and it was most
//! of an attention layer's time.
//!
//! - Softmax runs in f32, as PyTorch's does: a branch-free exponential accurate to about
//!   1 ulp, sums in sixteen lanes combined in a fixed order. An element differs from the
//!   reference's f64 result by a few f32 ulps (about 1e-6 relative where its value is above
//!   1e-6 of the row's largest).
//! - Layer normalisation reads f32 and computes in f64 (its mean and variance lose too much
//!   in f32 when the mean is large beside the spread), in eight lanes.
//!
//! The loops are compiled for the widest vectors the processor has, chosen at run time;
//! every instruction set gives the same bits, as each operation is rounded once and none is
//! fused. A row's result never depends on the other rows (§9). f64 rows keep the reference's
//! operations.

use super::lanes::lanes;
use crate::functions::Structural;

/// 1.5·2²³: adding it rounds an f32 of magnitude below 2²² to an integer, which then sits
/// in the low bits of the sum's mantissa.
const SHIFT: f32 = 12_582_912.0;
/// ln 2 split so that `k · LN2_HI` is exact for the `k` that occur (Cody and Waite).
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// Softmax (or, for any other kind, layer normalisation) of `scale · row`, in place.
pub(crate) fn normalize_row(kind: Structural, row: &mut [f32], scale: f64) {
    super::widest::widest(Row { kind, row, scale });
}

/// One row's normalisation, as a loop for [`super::widest`].
struct Row<'a> {
    kind: Structural,
    row: &'a mut [f32],
    scale: f64,
}

impl super::widest::Vectorised for Row<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        row_loops(self.kind, self.row, self.scale);
    }
}

/// The row's operations, written so that the compiler vectorises each loop.
#[inline(always)]
fn row_loops(kind: Structural, row: &mut [f32], scale: f64) {
    match kind {
        Structural::Softmax => {
            if scale != 1.0 {
                let scale = scale as f32;
                row.iter_mut().for_each(|x| *x *= scale);
            }
            let m = lanes::<f32, f32, 16>(row, f32::NEG_INFINITY, f32::max, f32::max);
            for x in row.iter_mut() {
                *x = exp(*x - m);
            }
            let s = lanes::<f32, f32, 16>(row, 0.0, |a, b| a + b, |a, b| a + b);
            for x in row.iter_mut() {
                *x /= s;
            }
        }
        _ => {
            let len = row.len() as f64;
            let wide = |x: f32| f64::from(x) * scale;
            let mean = lanes::<f32, f64, 8>(row, 0.0, |a: f64, b| a + wide(b), |a, b| a + b) / len;
            let dev = |x: f32| wide(x) - mean;
            let var =
                lanes::<f32, f64, 8>(row, 0.0, |a: f64, b| a + dev(b) * dev(b), |a, b| a + b) / len;
            let sd = (var + crate::functions::LNORM_EPSILON).sqrt();
            for x in row.iter_mut() {
                *x = (dev(*x) / sd) as f32;
            }
        }
    }
}

/// `exp(x)` in f32: `x = k ln 2 + r` with |r| ≤ ln 2 / 2, `exp(r)` by its Taylor series to
/// degree 7 (truncation error below 1e-8), then scaled by 2ᵏ through the exponent bits.
/// Results near or below 2⁻¹²⁶ (x < -87.33) are 0, and above 2¹²⁷·√2 (x > 88.37, never a
/// softmax's argument, which is at most 0) infinite.
#[inline(always)]
fn exp(x: f32) -> f32 {
    let t = x * std::f32::consts::LOG2_E + SHIFT;
    let k = t - SHIFT;
    let r = x - k * LN2_HI - k * LN2_LO;
    let mut p = 1.0 / 5_040.0;
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p * r + c;
    }
    // The low bits of t's mantissa hold k (two's complement); k + 127 shifted into the
    // exponent field is 2ᵏ for -126 ≤ k ≤ 127.
    let scale = f32::from_bits(t.to_bits().wrapping_add(127) << 23);
    let y = p * scale;
    if x < -87.33 {
        0.0
    } else if x > 88.37 {
        f32::INFINITY
    } else if x.is_nan() {
        x
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within 2 ulps of the correctly rounded exponential over the range softmax uses, and
    /// right at the ends.
    #[test]
    fn exp_is_within_two_ulps() {
        let mut xs: Vec<f32> = (0..400_000)
            .map(|i| -90.0 + i as f32 * 0.000_227_5)
            .collect();
        xs.extend([0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 88.0, 88.3, -87.0]);
        for &x in &xs {
            let y = exp(x);
            let want = f64::from(x).exp();
            if want < 1.2e-38 {
                assert!(y < 1.2e-38, "exp({x}) = {y}, want {want}");
            } else {
                let ulp = f64::from(f32::EPSILON) * (want as f32).abs() as f64;
                assert!(
                    (f64::from(y) - want).abs() <= 2.0 * ulp,
                    "exp({x}) = {y}, want {want}"
                );
            }
        }
        let special = [f32::NEG_INFINITY, f32::INFINITY, f32::NAN, 1000.0].map(exp);
        assert_eq!(special[0], 0.0);
        assert_eq!(special[1], f32::INFINITY);
        assert!(special[2].is_nan());
        assert_eq!(special[3], f32::INFINITY);
    }

    /// Rows agree with the reference's f64 operations to a few f32 ulps, at lengths around
    /// the lane counts, with and without a scale.
    #[test]
    fn rows_match_the_reference() {
        for n in [1usize, 2, 7, 8, 9, 15, 16, 17, 33, 64, 513] {
            let row: Vec<f32> = (0..n).map(|i| ((i * 37) % 23) as f32 / 3.0 - 4.0).collect();
            for kind in [Structural::Softmax, Structural::Lnorm] {
                for scale in [1.0, 0.125, 3.0] {
                    let mut fast = row.clone();
                    normalize_row(kind, &mut fast, scale);
                    let mut exact: Vec<f64> = row.iter().map(|&x| f64::from(x) * scale).collect();
                    crate::functions::normalize_row(kind, &mut exact);
                    for (a, b) in fast.iter().zip(&exact) {
                        assert!(
                            (f64::from(*a) - b).abs() <= 1e-6 * (1e-3 + b.abs()),
                            "{kind:?} n={n} scale={scale}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    /// The same bits whichever instruction set runs the row.
    #[test]
    fn instruction_sets_agree() {
        let row: Vec<f32> = (0..301)
            .map(|i| ((i * 53) % 41) as f32 / 7.0 - 3.0)
            .collect();
        for kind in [Structural::Softmax, Structural::Lnorm] {
            let mut plain = row.clone();
            row_loops(kind, &mut plain, 0.5);
            let mut dispatched = row.clone();
            normalize_row(kind, &mut dispatched, 0.5);
            assert_eq!(
                plain.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                dispatched.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
        }
    }
}
