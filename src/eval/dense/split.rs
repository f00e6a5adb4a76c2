//! Splitting a memory-bound pass (a gather, a permutation, a row's Jacobian) into blocks
//! for the `--threads` pool. Each block computes what one thread computes for those
//! elements, so the bits do not depend on the split.

/// Whether a pass over `elements` independent elements is split: only where more than one
/// thread was asked for and the caller is inside a pool of workers (never rayon's global
/// pool).
pub(crate) fn splits(threads: usize, elements: usize) -> bool {
    splits_from(threads, elements, crate::plan::schedule::PASS_ELEMENTS.at)
}

/// [`splits`] for a pass that is worth splitting from `least` elements on.
pub(crate) fn splits_from(threads: usize, elements: usize, least: usize) -> bool {
    threads > 1
        && elements >= least
        && rayon::current_thread_index().is_some()
        && rayon::current_num_threads() > 1
}

/// Calls `f(first, block)` for `out` in consecutive blocks of `per` elements (`first`: the
/// index of the block's first element), on the pool's workers when `split`.
pub(crate) fn each_block<T: Send>(
    out: &mut [T],
    per: usize,
    split: bool,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    let per = per.max(1);
    if split {
        use rayon::prelude::*;
        out.par_chunks_mut(per)
            .enumerate()
            .for_each(|(i, block)| f(i * per, block));
    } else {
        out.chunks_mut(per)
            .enumerate()
            .for_each(|(i, block)| f(i * per, block));
    }
}

/// `len` values made in consecutive blocks, each block's values the items of
/// `block(range)` for its range of indices (as one thread would make them, so the bits do
/// not depend on the split), on the pool's workers when `split`. An iterator that ends
/// early leaves `pad` in the rest of its block.
pub(crate) fn filled<T: Copy + Send + Sync, I: Iterator<Item = T>>(
    (len, pad): (usize, T),
    split: bool,
    block: impl Fn(std::ops::Range<usize>) -> I + Sync + Send,
) -> Vec<T> {
    use std::mem::MaybeUninit;
    let fill = |first: usize, part: &mut [MaybeUninit<T>]| {
        let mut written = 0;
        let items = block(first..first + part.len());
        for (o, v) in part.iter_mut().zip(items) {
            o.write(v);
            written += 1;
        }
        for o in &mut part[written..] {
            o.write(pad);
        }
    };
    let mut out = Vec::with_capacity(len);
    each_block(
        &mut out.spare_capacity_mut()[..len],
        crate::plan::schedule::FILL_BLOCK.at,
        split,
        fill,
    );
    // SAFETY: `fill` wrote every element of every block, and the blocks cover the first
    // `len` elements.
    unsafe { out.set_len(len) };
    out
}

/// `f` of each element, on the pool's workers where [`splits`] says so (each element's
/// value does not depend on the split).
pub(crate) fn mapped<S: Sync, T: Copy + Default + Send + Sync>(
    xs: &[S],
    f: impl Fn(&S) -> T + Sync + Send,
    threads: usize,
) -> Vec<T> {
    match splits(threads, xs.len()) {
        true => filled((xs.len(), T::default()), true, |r| xs[r].iter().map(&f)),
        false => xs.iter().map(f).collect(),
    }
}

/// `len` zeros, written in blocks on the pool's workers where [`splits`] says so: zeroing a
/// buffer of adjoints or a product's output is a pass over memory like any other.
pub(crate) fn zeros<T: Copy + Default + Send + Sync>(len: usize, threads: usize) -> Vec<T> {
    zeros_of(len, T::default(), threads)
}

/// [`zeros`] of the type's `zero`.
pub(crate) fn zeros_of<T: Copy + Send + Sync>(len: usize, zero: T, threads: usize) -> Vec<T> {
    if !splits(threads, len) {
        return vec![zero; len];
    }
    filled((len, zero), true, |r| std::iter::repeat_n(zero, r.len()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn zeros_split_across_threads_are_all_there() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let len = (1 << 17) + 3;
        let z: Vec<f64> = pool.install(|| super::zeros(len, 2));
        assert_eq!(z.len(), len);
        assert!(z.iter().all(|&x| x.to_bits() == 0));
    }

    /// Blocks made on two threads hold what one thread makes, and an iterator that ends
    /// early leaves the pad in the rest of its block.
    #[test]
    fn filled_blocks_split_across_threads_match_one_thread() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let len = 5 * crate::plan::schedule::FILL_BLOCK.at + 7;
        let xs: Vec<f64> = (0..len).map(|i| (i as f64).sin()).collect();
        let make = |split| {
            super::filled((len, 0.0f32), split, |r| {
                xs[r].iter().map(|&x| (x * 3.0) as f32)
            })
        };
        let one = make(false);
        let two = pool.install(|| make(true));
        assert_eq!(one.len(), len);
        assert!(one
            .iter()
            .zip(&two)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        let short = super::filled((5, 0.5), false, |_| [1.0, 2.0].into_iter());
        assert_eq!(short, [1.0, 2.0, 0.5, 0.5, 0.5]);
    }
}
