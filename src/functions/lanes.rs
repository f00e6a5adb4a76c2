//! Sums (and other folds) over a row in interleaved lanes: one dependent chain per lane
//! instead of one for the whole row, so that a row's sum costs its length divided by the
//! lanes rather than its length times an addition's latency. The order is fixed, so the
//! result is the same on every run, thread count and instruction set.

/// `step` folded over the row in `L` interleaved lanes, which `join` then combines (lane i
/// with lane i + L/2, halving until one is left) before the leftover elements are folded
/// in: always the same order.
#[inline(always)]
pub(crate) fn lanes<X: Copy, A: Copy, const L: usize>(
    row: &[X],
    init: A,
    step: impl Fn(A, X) -> A,
    join: impl Fn(A, A) -> A,
) -> A {
    let mut acc = [init; L];
    let chunks = row.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = step(*a, x);
        }
    }
    rest.iter().fold(joined(acc, join), |a, &x| step(a, x))
}

/// [`lanes`] over two rows of the same length at once (`step` gets an element of each).
#[inline(always)]
pub(crate) fn lanes2<X: Copy, Y: Copy, A: Copy, const L: usize>(
    (xs, ys): (&[X], &[Y]),
    init: A,
    step: impl Fn(A, X, Y) -> A,
    join: impl Fn(A, A) -> A,
) -> A {
    let n = xs.len().min(ys.len());
    let (xs, ys) = (&xs[..n], &ys[..n]);
    let mut acc = [init; L];
    let (xc, yc) = (xs.chunks_exact(L), ys.chunks_exact(L));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (cx, cy) in xc.zip(yc) {
        for ((a, &x), &y) in acc.iter_mut().zip(cx).zip(cy) {
            *a = step(*a, x, y);
        }
    }
    let first = joined(acc, join);
    xr.iter().zip(yr).fold(first, |a, (&x, &y)| step(a, x, y))
}

/// The lanes combined by `join`, lane i with lane i + L/2, halving until one is left.
#[inline(always)]
fn joined<A: Copy, const L: usize>(mut acc: [A; L], join: impl Fn(A, A) -> A) -> A {
    let mut width = L;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            acc[i] = join(acc[i], acc[i + width]);
        }
    }
    acc[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both folds give the row's sum (exact here: small integers), at lengths around the
    /// lane count, and two rows fold as one row of pairs.
    #[test]
    fn lanes_sum_every_element_once() {
        for n in [0usize, 1, 7, 8, 9, 16, 17, 100] {
            let xs: Vec<f64> = (0..n).map(|i| i as f64).collect();
            let ys: Vec<f64> = (0..n).map(|i| (2 * i + 1) as f64).collect();
            let want: f64 = xs.iter().sum();
            assert_eq!(
                lanes::<f64, f64, 8>(&xs, 0.0, |a, x| a + x, |a, b| a + b),
                want
            );
            let dot: f64 = xs.iter().zip(&ys).map(|(x, y)| x * y).sum();
            let got =
                lanes2::<f64, f64, f64, 8>((&xs, &ys), 0.0, |a, x, y| a + x * y, |a, b| a + b);
            assert_eq!(got, dot);
        }
    }
}
