//! Counts that are products of two binary relations (`plan::datalog::product`),
//! `C[a, c] = A(a, b) B(b, c)`, as sparse matrix products: for each row `a` of A (its tuples
//! are sorted, so a row is a run), the rows of B that its `b`s name are added into one
//! accumulator over `c`, whose touched positions are then emitted in order. Work is the
//! number of products, memory one accumulator and the result's non-zeros; nothing is sorted.

use crate::plan::schedule::PRODUCT_TUPLES;
use crate::tensor::Relation;

/// Accumulators over `c` up to this extent are dense arrays; wider ones sort what they got.
const DENSE_ROW: usize = 1 << 24;

/// The non-zero counts of `A·B` (`a` over A's first position, `c` over B's second, both
/// binary), in ascending (a, c) order: positions flat, two per count. With `pool`, A's
/// rows are split into blocks of whole rows whose results are concatenated in order: the
/// same counts for every thread count.
pub(super) fn product(
    a: &Relation,
    b: &Relation,
    c_extent: usize,
    pool: Option<&rayon::ThreadPool>,
) -> (Vec<u32>, Vec<f64>) {
    use rayon::prelude::*;
    let rows = Rows::new(b);
    let fa = a.flat();
    let blocks = match pool {
        Some(pool) if a.len() >= PRODUCT_TUPLES.at => {
            row_blocks(fa, pool.current_num_threads() * 4)
        }
        _ => std::iter::once(0..a.len()).collect(),
    };
    let run =
        |r: &std::ops::Range<usize>| rows_product(&fa[2 * r.start..2 * r.end], b, &rows, c_extent);
    let parts: Vec<(Vec<u32>, Vec<f64>)> = match pool {
        Some(pool) if blocks.len() > 1 => pool.install(|| blocks.par_iter().map(run).collect()),
        _ => blocks.iter().map(run).collect(),
    };
    if parts.len() == 1 {
        return parts.into_iter().next().unwrap_or_default();
    }
    let (keys, counts): (Vec<Vec<u32>>, Vec<Vec<f64>>) = parts.into_iter().unzip();
    (keys.concat(), counts.concat())
}

/// About `n` ranges of A's tuples, each starting at a new first position.
fn row_blocks(fa: &[u32], n: usize) -> Vec<std::ops::Range<usize>> {
    let len = fa.len() / 2;
    let size = len.div_ceil(n.max(1)).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    while start < len {
        let mut end = (start + size).min(len);
        while end < len && fa[2 * end] == fa[2 * (end - 1)] {
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// The counts of the rows of A whose tuples are `fa` (flat, whole rows).
fn rows_product(fa: &[u32], b: &Relation, rows: &Rows, c_extent: usize) -> (Vec<u32>, Vec<f64>) {
    let fb = b.flat();
    let tuples = fa.len() / 2;
    // The products bound the non-zeros: reserving for them spares the copies of growing.
    let products: usize = fa
        .chunks_exact(2)
        .map(|t| {
            let (lo, hi) = rows.of(b, t[1]);
            hi - lo
        })
        .sum();
    let mut keys = Vec::with_capacity(2 * products);
    let mut counts = Vec::with_capacity(products);
    let dense = c_extent <= DENSE_ROW;
    let mut acc = vec![0u32; if dense { c_extent } else { 0 }];
    let mut touched: Vec<u32> = Vec::new();
    let mut i = 0;
    while i < tuples {
        let row = fa[2 * i];
        let mut j = i;
        while j < tuples && fa[2 * j] == row {
            let (lo, hi) = rows.of(b, fa[2 * j + 1]);
            let gathered = fb[2 * lo..2 * hi].chunks_exact(2).map(|t| t[1]);
            if dense {
                for c in gathered {
                    if let Some(slot) = acc.get_mut(c as usize) {
                        if *slot == 0 {
                            touched.push(c);
                        }
                        *slot += 1;
                    }
                }
            } else {
                touched.extend(gathered);
            }
            j += 1;
        }
        touched.sort_unstable();
        let mut k = 0;
        while k < touched.len() {
            let c = touched[k];
            let n;
            if dense {
                n = f64::from(acc[c as usize]);
                acc[c as usize] = 0;
                k += 1;
            } else {
                let mut e = k + 1;
                while e < touched.len() && touched[e] == c {
                    e += 1;
                }
                n = (e - k) as f64;
                k = e;
            }
            keys.extend([row, c]);
            counts.push(n);
        }
        touched.clear();
        i = j;
    }
    (keys, counts)
}

/// Where each row of a sorted binary relation starts: an offset per first position when
/// they are few beside the tuples, otherwise found by binary search.
struct Rows {
    starts: Option<Vec<u32>>,
}

impl Rows {
    fn new(b: &Relation) -> Rows {
        let last = (0..b.len()).last().map_or(0, |i| b.tuple(i)[0] as usize);
        if last > 4 * b.len() + 1024 {
            return Rows { starts: None };
        }
        let mut starts = vec![0u32; last + 2];
        for i in 0..b.len() {
            starts[b.tuple(i)[0] as usize + 1] += 1;
        }
        for k in 1..starts.len() {
            starts[k] += starts[k - 1];
        }
        Rows {
            starts: Some(starts),
        }
    }

    /// The tuples of `b` whose first position is `x`: a range of its sorted tuples.
    fn of(&self, b: &Relation, x: u32) -> (usize, usize) {
        if let Some(s) = &self.starts {
            let x = x as usize;
            return match (s.get(x), s.get(x + 1)) {
                (Some(&lo), Some(&hi)) => (lo as usize, hi as usize),
                _ => (0, 0),
            };
        }
        let first = |i: usize| b.tuple(i)[0];
        let bound = |past: &dyn Fn(u32) -> bool| {
            let (mut lo, mut hi) = (0, b.len());
            while lo < hi {
                let mid = (lo + hi) / 2;
                if past(first(mid)) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        (bound(&|v| v < x), bound(&|v| v <= x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_split_rows_without_changing_the_counts() {
        let mut pairs = std::collections::BTreeSet::new();
        let mut x = 12345u64;
        while pairs.len() < 3 * PRODUCT_TUPLES.at {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            pairs.insert(((x >> 33) as u32 % 3000, (x >> 17) as u32 % 3000));
        }
        let flat: Vec<u32> = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        let r = Relation::from_flat(2, flat, pairs.len());
        let alone = product(&r, &r, 3000, None);
        for threads in [2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            assert_eq!(product(&r, &r, 3000, Some(&pool)), alone);
        }
    }

    #[test]
    fn counts_paths_of_two_steps() {
        // 0→1, 0→2, 1→3, 2→3, 2→0: two-step paths 0→0, 0→3 (twice), 2→1, 2→2.
        let r = Relation::from_flat(2, vec![0, 1, 0, 2, 1, 3, 2, 3, 2, 0], 5);
        for extent in [4, DENSE_ROW + 1] {
            let (keys, counts) = product(&r, &r, extent, None);
            assert_eq!(keys, vec![0, 0, 0, 3, 2, 1, 2, 2]);
            assert_eq!(counts, vec![1.0, 2.0, 1.0, 1.0]);
        }
    }
}
