//! The matrix products: loops of `m×k · k×n` GEMMs over strided operands, and the one call
//! into the `gemm` crate (with the outputs it writes, one of the engine's three homes of
//! `unsafe`, docs/design.md), in fixed blocks of the inner dimension with a lone row or
//! column padded, so every element sums in the same order for every batch size and thread
//! count (§9).

use super::operand::Num;
use crate::plan::schedule::{INNER_BLOCKS, INNER_OUTPUT, INNER_RATIO, PRODUCT_WORK};
use crate::tensor::odometer;
use std::mem::MaybeUninit;

/// One loop around a contraction's matrix products: its extent and its stride in each
/// operand (0 where the operand does not vary along it).
pub(super) type Loop = (usize, usize, usize);

/// The `rows × cols` matrix at `offset` with strides `[row, col]`, row-major in a buffer of
/// `size` (at least as large), the rest zeros.
fn padded<T: Num>(
    (data, offset, [row, col]): (&[T], usize, [usize; 2]),
    (rows, cols): (usize, usize),
    size: (usize, usize),
    zero: T,
) -> Vec<T> {
    let mut pad = vec![zero; size.0 * size.1];
    for i in 0..rows {
        for j in 0..cols {
            pad[i * size.1 + j] = data[offset + i * row + j * col];
        }
    }
    pad
}

/// A matrix operand: its elements and the strides of its row and column axes.
pub(super) type Strided<'s, T> = (&'s [T], [usize; 2]);

/// An `m×k` times `k×n` product for every index of `loops` (row-major), stacked row-major
/// in the result: the loops move each operand's first element by its strides.
pub(super) fn looped<T: Num>(
    loops: &[Loop],
    (m, n, k): (usize, usize, usize),
    lhs: Strided<T>,
    rhs: Strided<T>,
    unit: (T, T),
    threads: usize,
) -> Vec<T> {
    let padded;
    let (rhs, loops) = match unaliased(rhs, loops, (k, n)) {
        Some((copy, strides, moved)) => {
            padded = (copy, moved);
            ((padded.0.as_slice(), strides), padded.1.as_slice())
        }
        None => (rhs, loops),
    };
    let extents: Vec<usize> = loops.iter().map(|l| l.0).collect();
    let count: usize = extents.iter().product();
    let len = count * m * n;
    // The output is written once, by the products, and never zeroed first (a pass over
    // memory as long as the products' own writes).
    let mut out: Vec<T> = Vec::with_capacity(len);
    if m * n == 0 {
        return out;
    }
    // Product `b` of the batch reads its operands at these offsets (`b` row-major over the
    // loops).
    let one = |(b, block): (usize, &mut [MaybeUninit<T>]), threads: usize| {
        let (mut ox, mut oy) = (0usize, 0usize);
        odometer::unflatten(b, &extents, |ax, i| {
            ox += i * loops[ax].1;
            oy += i * loops[ax].2;
        });
        let (lhs, rhs) = ((lhs.0, ox, lhs.1), (rhs.0, oy, rhs.1));
        matmul((m, n, k), lhs, rhs, block, unit, threads);
    };
    // With threads, whole products go to workers (each product is its own output, computed
    // as on one thread): a batch of small products (attention's per-head scores, a layer's
    // rows read through a window) is split where no single product is big enough to be.
    let spare = &mut out.spare_capacity_mut()[..len];
    if threads > 1 && count > 1 && count * m * n * k >= PRODUCT_WORK.at {
        use rayon::prelude::*;
        spare
            .par_chunks_exact_mut(m * n)
            .enumerate()
            .for_each(|b| one(b, 1));
    } else {
        spare
            .chunks_exact_mut(m * n)
            .enumerate()
            .for_each(|b| one(b, threads));
    }
    // SAFETY: the chunks cover the first `len` elements, and `matmul` writes every element
    // of the `m×n` block it is given, on every path.
    unsafe { out.set_len(len) };
    out
}

/// A right-hand matrix stored transposed (`W[h, i]` read as `[i, h]`: contiguous down its
/// columns) whose column stride is a multiple of 2 KiB, copied with its columns 64 bytes
/// apart further: gemm packs such a matrix by reading many columns at once, and columns a
/// power of two apart fall into the same cache sets (a 512×512 f32 product took 1.4× as
/// long). Only when at most one loop moves it; the copy's strides and the loops with its
/// new stride, or `None` for any other layout.
pub(super) fn unaliased<T: Copy>(
    (data, [sr, sc]): Strided<T>,
    loops: &[Loop],
    (k, n): (usize, usize),
) -> Option<(Vec<T>, [usize; 2], Vec<Loop>)> {
    let size = std::mem::size_of::<T>();
    let moving: Vec<usize> = (0..loops.len()).filter(|&i| loops[i].2 != 0).collect();
    if sr != 1 || k < 2 || n < 2 || !(sc * size).is_multiple_of(2048) || moving.len() > 1 {
        return None;
    }
    let (b, sb) = moving.first().map_or((1, 0), |&i| (loops[i].0, loops[i].2));
    let mut ld = k + 64 / size;
    if (ld * size).is_multiple_of(2048) {
        ld += 64 / size;
    }
    let mut out = Vec::with_capacity(b * n * ld);
    for i in 0..b {
        for j in 0..n {
            let at = i * sb + j * sc;
            out.extend_from_slice(data.get(at..at + k)?);
            out.extend(std::iter::repeat_n(data[at], ld - k));
        }
    }
    let mut loops = loops.to_vec();
    if let Some(&i) = moving.first() {
        loops[i].2 = n * ld;
    }
    Some((out, [1, ld], loops))
}

/// `dst = lhs · rhs` for an `m×k` and a `k×n` matrix of f32 or f64, each given as its
/// elements, the offset of its first one and its row and column strides (`unit` is the type's
/// 0 and 1); `dst` is row-major, and its first `m·n` elements are all written (it need not
/// hold values before).
pub(super) fn matmul<T: Num>(
    (m, n, k): (usize, usize, usize),
    (lhs, lo, [lr, lc]): (&[T], usize, [usize; 2]),
    (rhs, ro, [rr, rc]): (&[T], usize, [usize; 2]),
    dst: &mut [MaybeUninit<T>],
    (zero, one): (T, T),
    threads: usize,
) {
    if m == 0 || n == 0 || dst.len() < m * n {
        return;
    }
    if k == 0 {
        dst[..m * n].iter_mut().for_each(|d| _ = d.write(zero));
        return;
    }
    // Operands and results outside their buffers cannot occur (the contraction sizes them):
    // debug builds stop there, release builds write zeros rather than read out of bounds.
    let last = |o: usize, r: usize, c: usize, rows: usize, cols: usize| {
        o + (rows - 1) * r + (cols - 1) * c
    };
    let inside = last(lo, lr, lc, m, k) < lhs.len() && last(ro, rr, rc, k, n) < rhs.len();
    debug_assert!(inside, "a {m}×{k}·{k}×{n} product outside its buffers");
    if !inside {
        dst[..m * n].iter_mut().for_each(|d| _ = d.write(zero));
        return;
    }
    // A single row or column is padded to a matrix (`padded_product`), an outer product
    // computed here (`outer`).
    if k == 1 {
        return outer((m, n), (lhs, lo, lr), (rhs, ro, rc), dst);
    }
    if n == 1 && m > 1 && lr == 1 && lc == m {
        // A column-major matrix times a column: the same product as the row times the
        // transposed matrix, which is then read in place (row-major) instead of copied.
        let lhs_t = (lhs, lo, [lc, lr]);
        return matmul(
            (1, m, k),
            (rhs, ro, [rc, rr]),
            lhs_t,
            dst,
            (zero, one),
            threads,
        );
    }
    if m == 1 || n == 1 {
        let operands = Operands {
            lhs: (lhs, lo, [lr, lc]),
            rhs: (rhs, ro, [rr, rc]),
        };
        return padded_product((m, n, k), operands, dst, (zero, one), threads);
    }
    let operands = Operands {
        lhs: (lhs, lo, [lr, lc]),
        rhs: (rhs, ro, [rr, rc]),
    };
    if threads > 1
        && m * n * k >= PRODUCT_WORK.at
        && (threads..=INNER_BLOCKS.at).contains(&k.div_ceil(KC))
        && m * n <= INNER_OUTPUT.at
        && k >= INNER_RATIO.at * m.max(n)
    {
        return by_inner_blocks((m, n, k), operands, dst, (zero, one), threads);
    }
    // With threads, blocks of rows go to workers, each a whole product on one thread: a
    // row's sums never depend on the other rows (§9), so the result is the same, and one
    // fork per product beats gemm's own splitting on the moderate shapes of layers.
    if threads > 1 && m * n * k >= PRODUCT_WORK.at && m >= 64 * threads {
        use rayon::prelude::*;
        let per = m.div_ceil(threads).next_multiple_of(16);
        dst[..m * n]
            .par_chunks_mut(per * n)
            .enumerate()
            .for_each(|(i, block)| {
                let lhs = (lhs, lo + i * per * lr, [lr, lc]);
                let rhs = (rhs, ro, [rr, rc]);
                matmul((block.len() / n, n, k), lhs, rhs, block, (zero, one), 1);
            });
        return;
    }
    // Below ~4M multiply-adds splitting costs more than it saves (thread wake-ups and
    // per-thread packing buffers); results are the same either way (tiles only are split).
    let parallelism = if threads > 1 && m * n * k >= PRODUCT_WORK.at {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    inner_blocks((m, n), 0..k, operands, dst, (zero, one), parallelism);
}

/// An outer product (`k` = 1): each element is one multiplication, which gemm rounds once
/// too (0 + a·b), so computing it here gives the same bits without a call.
fn outer<T: Num>(
    (m, n): (usize, usize),
    (lhs, lo, lr): (&[T], usize, usize),
    (rhs, ro, rc): (&[T], usize, usize),
    dst: &mut [MaybeUninit<T>],
) {
    for (i, row) in dst[..m * n].chunks_exact_mut(n).enumerate() {
        let a = lhs[lo + i * lr];
        for (j, d) in row.iter_mut().enumerate() {
            d.write(a.mul(rhs[ro + j * rc]));
        }
    }
}

/// A product with a single row or column, padded with a zero row or column so that it takes
/// gemm's matrix kernels (its matrix-vector kernels sum in another order, and a row computed
/// alone would differ from the same row in a batch, §9). An operand already row-major and
/// contiguous is read in place.
fn padded_product<T: Num>(
    (m, n, k): (usize, usize, usize),
    operands: Operands<T>,
    dst: &mut [MaybeUninit<T>],
    (zero, one): (T, T),
    threads: usize,
) {
    let Operands {
        lhs: (lhs, lo, [lr, lc]),
        rhs: (rhs, ro, [rr, rc]),
    } = operands;
    let (m2, n2) = (m.max(2), n.max(2));
    let a;
    let lhs = if m > 1 && lc == 1 && lr == k {
        (lhs, lo, [lr, lc])
    } else {
        a = padded((lhs, lo, [lr, lc]), (m, k), (m2, k), zero);
        (a.as_slice(), 0, [k, 1])
    };
    let b;
    let rhs = if n > 1 && rc == 1 && rr == n {
        (rhs, ro, [rr, rc])
    } else {
        b = padded((rhs, ro, [rr, rc]), (k, n), (k, n2), zero);
        (b.as_slice(), 0, [n2, 1])
    };
    let mut out = vec![MaybeUninit::new(zero); m2 * n2];
    matmul((m2, n2, k), lhs, rhs, &mut out, (zero, one), threads);
    for i in 0..m {
        dst[i * n..(i + 1) * n].copy_from_slice(&out[i * n2..i * n2 + n]);
    }
}

/// gemm splits the inner dimension into blocks whose size depends on m and n, and sums the
/// blocks into dst one after another; fixed blocks of KC (within which it never splits: its
/// own blocks are at least 512 long) make that order the same for every batch size (§9).
const KC: usize = 512;

/// A matrix product's two operands: each its elements, the offset of its first one and
/// its row and column strides.
#[derive(Clone, Copy)]
struct Operands<'a, T> {
    lhs: (&'a [T], usize, [usize; 2]),
    rhs: (&'a [T], usize, [usize; 2]),
}

/// `dst = lhs[.., ks] · rhs[ks, ..]`, an `m×n` product over the inner indices `ks` (starting
/// at a multiple of KC) in KC blocks, each added to `dst` after the first by gemm with one
/// rounding an element.
fn inner_blocks<T: Num>(
    (m, n): (usize, usize),
    ks: std::ops::Range<usize>,
    Operands {
        lhs: (lhs, lo, [lr, lc]),
        rhs: (rhs, ro, [rr, rc]),
    }: Operands<T>,
    dst: &mut [MaybeUninit<T>],
    (zero, one): (T, T),
    parallelism: gemm::Parallelism,
) {
    let start = ks.start;
    for k0 in ks.clone().step_by(KC) {
        let kb = KC.min(ks.end - k0);
        let first = k0 == start;
        // SAFETY: every element the strides reach lies inside its slice (`matmul` checked
        // the largest offset of each operand over the whole inner dimension; a block starts
        // inside it and reaches no further), `dst` holds m·n row-major elements and does not
        // alias the inputs (the first block does not read it, `read_dst` false, and writes
        // every one; the others read what it wrote), and T is f32 or f64 (the callers),
        // which gemm supports.
        unsafe {
            gemm::gemm(
                m,
                n,
                kb,
                dst.as_mut_ptr().cast::<T>(),
                1,
                n as isize,
                !first,
                lhs.as_ptr().add(lo + k0 * lc),
                lc as isize,
                lr as isize,
                rhs.as_ptr().add(ro + k0 * rr),
                rc as isize,
                rr as isize,
                if first { zero } else { one },
                one,
                false,
                false,
                false,
                parallelism,
            );
        }
    }
}

/// A long reduction into a small output (a weight's gradient summed over a batch's rows)
/// split by its KC blocks: the first worker's blocks go into `dst` as on one thread, every
/// later block into a buffer of its own, and those are added to `dst` in block order
/// afterwards. gemm adds each block's sum to `dst` with one rounding, so these are the
/// same additions in the same order: the bits of one thread.
fn by_inner_blocks<T: Num>(
    (m, n, k): (usize, usize, usize),
    operands: Operands<T>,
    dst: &mut [MaybeUninit<T>],
    unit: (T, T),
    threads: usize,
) {
    use rayon::prelude::*;
    let none = gemm::Parallelism::None;
    let leading = k.div_ceil(KC).div_ceil(threads) * KC;
    let (_, later) = rayon::join(
        || inner_blocks((m, n), 0..leading, operands, dst, unit, none),
        || {
            (leading..k)
                .step_by(KC)
                .collect::<Vec<_>>()
                .into_par_iter()
                .map(|k0| {
                    let mut block = Vec::with_capacity(m * n);
                    let spare = &mut block.spare_capacity_mut()[..m * n];
                    inner_blocks((m, n), k0..(k0 + KC).min(k), operands, spare, unit, none);
                    // SAFETY: `inner_blocks` writes all m·n elements (its first block does
                    // not read them).
                    unsafe { block.set_len(m * n) };
                    block
                })
                .collect::<Vec<Vec<T>>>()
        },
    );
    // SAFETY: the first worker's blocks wrote all m·n elements of `dst`, which holds at
    // least that many.
    let dst = unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<T>(), m * n) };
    super::split::each_block(dst, (m * n).div_ceil(threads), true, |first, part| {
        for block in &later {
            for (d, b) in part.iter_mut().zip(&block[first..]) {
                *d = d.add(*b);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of products split across threads gives the bits of the batch on one thread.
    #[test]
    fn a_batch_split_across_threads_matches_one_thread() {
        let (b, m, n, k) = (64, 64, 64, 64);
        let lhs: Vec<f32> = (0..b * m * k)
            .map(|i| ((i * 7919) % 113) as f32 / 37.0)
            .collect();
        let rhs: Vec<f32> = (0..b * k * n)
            .map(|i| ((i * 104_729) % 97) as f32 / 29.0)
            .collect();
        let loops = [(b, m * k, k * n)];
        let run = |threads| {
            let lhs = (lhs.as_slice(), [k, 1]);
            let rhs = (rhs.as_slice(), [n, 1]);
            looped(&loops, (m, n, k), lhs, rhs, (0.0, 1.0), threads)
        };
        let one = run(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let two = pool.install(|| run(2));
        assert!(one
            .iter()
            .zip(&two)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!(one.len(), b * m * n);
    }

    /// A long reduction split by its inner blocks across threads (a weight's gradient) gives
    /// the bits of one thread, in f32 and f64, with a last block shorter than the others
    /// and a column-major left operand.
    #[test]
    fn an_inner_split_matches_one_thread() {
        fn check<T: Num>(of: impl Fn(f64) -> T) {
            let (m, n, k) = (48, 80, 1700);
            let lhs: Vec<T> = (0..m * k)
                .map(|i| of(((i * 7919) % 113) as f64 / 37.0 - 1.0))
                .collect();
            let rhs: Vec<T> = (0..k * n)
                .map(|i| of(((i * 104_729) % 97) as f64 / 29.0 - 1.5))
                .collect();
            let run = |threads| {
                let mut out = vec![MaybeUninit::new(T::default()); m * n];
                let (lhs, rhs) = ((lhs.as_slice(), 0, [1, m]), (rhs.as_slice(), 0, [n, 1]));
                matmul(
                    (m, n, k),
                    lhs,
                    rhs,
                    &mut out,
                    (T::default(), T::ONE),
                    threads,
                );
                // SAFETY: `matmul` wrote every element.
                out.into_iter()
                    .map(|v| unsafe { v.assume_init() }.into().to_bits())
                    .collect::<Vec<u64>>()
            };
            let one = run(1);
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            assert_eq!(one, pool.install(|| run(2)));
            assert_eq!(one, pool.install(|| run(3)));
        }
        check(|v| v as f32);
        check(|v| v);
    }
}
