//! Splitting a memory-bound pass (a gather, a permutation, a row's Jacobian) into blocks
//! for the `--threads` pool. Each block computes what one thread computes for those
//! elements, so the bits do not depend on the split.

/// Elements under which a pass stays on the calling thread: a worker's wake-up costs more
/// than copying fewer.
const SPLIT_ELEMENTS: usize = 1 << 17;

/// Whether a pass over `elements` independent elements is split: only where more than one
/// thread was asked for and the caller is inside a pool of workers (never rayon's global
/// pool).
pub(crate) fn splits(threads: usize, elements: usize) -> bool {
    splits_from(threads, elements, SPLIT_ELEMENTS)
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

/// `f` of each element, on the pool's workers where [`splits`] says so (each element's
/// value does not depend on the split).
pub(crate) fn mapped<S: Sync, T: Send>(
    xs: &[S],
    f: impl Fn(&S) -> T + Sync + Send,
    threads: usize,
) -> Vec<T> {
    match splits(threads, xs.len()) {
        true => {
            use rayon::prelude::*;
            xs.par_iter().map(f).collect()
        }
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
    use rayon::prelude::*;
    let mut out = Vec::with_capacity(len);
    out.par_extend(rayon::iter::repeat_n(zero, len));
    out
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
}
