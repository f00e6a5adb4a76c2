//! Softmax and layer normalisation of rows along an output axis: f64 rows with the
//! reference's operations, f32 rows by `functions::fast_rows`.

use super::*;

/// Softmax or layer normalisation of every row along `axis` of `scale · buf`, in place
/// (by `functions::normalize_row` for f64, by vectorised rows for f32). With `split`, rows along the last
/// axis are shared among the current rayon pool's workers, each row whole (so results do
/// not depend on the thread count).
pub(super) fn normalize<T: Num>(
    buf: &mut [T],
    dims: &[usize],
    axis: usize,
    kind: Structural,
    (scale, split): (f64, bool),
) {
    let n = dims[axis];
    let stride: usize = dims[axis + 1..].iter().product();
    if n == 0 {
        return;
    }
    if stride == 1 {
        let rows = |chunk: &mut [T]| {
            chunk
                .chunks_exact_mut(n)
                .for_each(|row| T::normalize_row(kind, row, scale))
        };
        if split {
            use rayon::prelude::*;
            buf.par_chunks_mut(n * 64).for_each(rows);
        } else {
            rows(buf);
        }
        return;
    }
    let outer: usize = dims[..axis].iter().product();
    let mut row = vec![T::default(); n];
    for o in 0..outer {
        for inner in 0..stride {
            let base = o * n * stride + inner;
            for (q, r) in row.iter_mut().enumerate() {
                *r = buf[base + q * stride];
            }
            T::normalize_row(kind, &mut row, scale);
            for (q, &v) in row.iter().enumerate() {
                buf[base + q * stride] = v;
            }
        }
    }
}

/// [`normalize`] of f64 values that `d` stores: for an f32 (or narrower) target, on the
/// values rounded to f32, by the f32 rows (the same results as a product normalised in its
/// own f32 buffer); otherwise by the reference's operations. Rows are shared among the
/// `--threads` pool's workers where [`split::splits`] says so.
pub(crate) fn normalize_for(
    d: &DenseEquation,
    buf: &mut [f64],
    (dims, axis): (&[usize], usize),
    (kind, threads): (Structural, usize),
) {
    let split = split::splits(threads, buf.len());
    if !d.narrow {
        return normalize(buf, dims, axis, kind, (1.0, split));
    }
    let mut narrow: Vec<f32> = buf.iter().map(|&x| x as f32).collect();
    normalize(&mut narrow, dims, axis, kind, (1.0, split));
    for (b, x) in buf.iter_mut().zip(narrow) {
        *b = f64::from(x);
    }
}
