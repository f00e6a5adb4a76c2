//! Softmax and layer normalisation of rows whose results are stored as f32, vectorised:
//! the reference's order (libm's `exp` per element, sums from left to right) does not
//! vectorise, and it was most of an attention layer's time. Here the exponential is
//! branch-free arithmetic accurate to about 1e-15 relative, sums run in eight lanes combined
//! in a fixed order, and the loops are compiled for the widest vectors the processor has
//! (chosen at run time; every instruction set gives the same bits, as each operation is
//! rounded once and none is fused). A row's result never depends on the other rows (§9);
//! it can differ from the reference's in the last f32 bit when a value lies within about
//! 1e-15 of a rounding boundary. Rows stored in f64 keep the reference's operations.

use crate::functions::Structural;

/// 1.5·2⁵²: adding it rounds a double of magnitude below 2⁵¹ to an integer, which then
/// sits in the low bits of the sum's mantissa.
const SHIFT: f64 = 6_755_399_441_055_744.0;
/// ln 2 split so that `k · LN2_HI` is exact for the `k` that occur (Cody and Waite).
const LN2_HI: f64 = 0.693_147_180_369_123_8;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;

/// Softmax (or, for any other kind, layer normalisation) of `row`, in place.
pub(super) fn normalize_row(kind: Structural, row: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the processor has AVX-512F, checked just above.
            return unsafe { row_avx512(kind, row) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the processor has AVX2, checked just above.
            return unsafe { row_avx2(kind, row) };
        }
    }
    row_loops(kind, row);
}

/// [`row_loops`] in AVX-512 registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn row_avx512(kind: Structural, row: &mut [f64]) {
    row_loops(kind, row);
}

/// [`row_loops`] in AVX2 registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn row_avx2(kind: Structural, row: &mut [f64]) {
    row_loops(kind, row);
}

/// The row's operations, written so that the compiler vectorises each loop.
#[inline(always)]
fn row_loops(kind: Structural, row: &mut [f64]) {
    match kind {
        Structural::Softmax => {
            let m = lanes(row, f64::NEG_INFINITY, f64::max, f64::max);
            for x in row.iter_mut() {
                *x = exp(*x - m);
            }
            let s = lanes(row, 0.0, |a, b| a + b, |a, b| a + b);
            for x in row.iter_mut() {
                *x /= s;
            }
        }
        _ => {
            let len = row.len() as f64;
            let mean = lanes(row, 0.0, |a, b| a + b, |a, b| a + b) / len;
            for x in row.iter_mut() {
                *x -= mean;
            }
            let var = lanes(row, 0.0, |a, b| a + b * b, |a, b| a + b) / len;
            let sd = (var + 1e-5).sqrt();
            for x in row.iter_mut() {
                *x /= sd;
            }
        }
    }
}

/// `step` folded over the row in eight interleaved lanes, which `join` then combines
/// pairwise before the leftover elements are folded in, always in the same order.
#[inline(always)]
fn lanes(
    row: &[f64],
    init: f64,
    step: impl Fn(f64, f64) -> f64,
    join: impl Fn(f64, f64) -> f64,
) -> f64 {
    let mut acc = [init; 8];
    let chunks = row.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = step(*a, x);
        }
    }
    let mut total = join(
        join(join(acc[0], acc[4]), join(acc[1], acc[5])),
        join(join(acc[2], acc[6]), join(acc[3], acc[7])),
    );
    for &x in rest {
        total = step(total, x);
    }
    total
}

/// `exp(x)`: `x = k ln 2 + r` with |r| ≤ ln 2 / 2, `exp(r)` by its Taylor series to degree
/// 13 (truncation error below 1e-17), then scaled by 2ᵏ through the exponent bits.
#[inline(always)]
fn exp(x: f64) -> f64 {
    let t = x * std::f64::consts::LOG2_E + SHIFT;
    let k = t - SHIFT;
    let r = x - k * LN2_HI - k * LN2_LO;
    let mut p = 1.0 / 6_227_020_800.0;
    for c in [
        1.0 / 479_001_600.0,
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
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
    // The low bits of t's mantissa hold k (two's complement); k + 1023 shifted into the
    // exponent field is 2ᵏ for -1022 ≤ k ≤ 1023.
    let scale = f64::from_bits(t.to_bits().wrapping_add(1023) << 52);
    let y = p * scale;
    if x < -708.0 {
        0.0
    } else if x > 709.0 {
        f64::INFINITY
    } else if x.is_nan() {
        x
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within 1e-15 relative of libm's exp over the range softmax uses, exact at the ends.
    #[test]
    fn exp_matches_libm() {
        let mut xs: Vec<f64> = (0..200_000).map(|i| -750.0 + i as f64 * 0.00376).collect();
        xs.extend([0.0, -0.0, 1e-300, -1e-300, 0.5, -0.5, 700.0, 709.0]);
        let ys: Vec<f64> = xs.iter().map(|&x| exp(x)).collect();
        for (&x, &y) in xs.iter().zip(&ys) {
            let want = x.exp();
            if want < 1e-300 {
                assert!(y <= 1e-300, "exp({x}) = {y}, libm {want}");
            } else {
                assert!(
                    ((y - want) / want).abs() < 1e-15,
                    "exp({x}) = {y}, libm {want}"
                );
            }
        }
        let special = [f64::NEG_INFINITY, f64::INFINITY, f64::NAN, 1000.0].map(exp);
        assert_eq!(special[0], 0.0);
        assert_eq!(special[1], f64::INFINITY);
        assert!(special[2].is_nan());
        assert_eq!(special[3], f64::INFINITY);
    }
}

#[cfg(test)]
mod row_tests {
    use super::*;

    /// Rows agree with the reference's operations to 1e-14 relative, at lengths around the
    /// lane count.
    #[test]
    fn rows_match_the_reference_order() {
        for n in [1usize, 2, 7, 8, 9, 17, 64, 513] {
            let row: Vec<f64> = (0..n).map(|i| ((i * 37) % 23) as f64 / 3.0 - 4.0).collect();
            for kind in [Structural::Softmax, Structural::Lnorm] {
                let mut fast = row.clone();
                normalize_row(kind, &mut fast);
                let mut exact = row.clone();
                crate::eval::dense::exact_row(kind, &mut exact);
                for (a, b) in fast.iter().zip(&exact) {
                    assert!(
                        (a - b).abs() <= 1e-14 * (1.0 + b.abs()),
                        "{kind:?} n={n}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
