//! Relations as flat tuple arrays with hash indexes, built for the column lists that joins
//! look up and maintained as tuples arrive.

use crate::tensor::{Storage, Tensor};
use hashbrown::HashTable;
use rustc_hash::FxHasher;
use std::hash::Hasher;

/// Marks the end of an index chain.
const NONE: u32 = u32::MAX;

fn hash_of(values: impl Iterator<Item = u32>) -> u64 {
    let mut h = FxHasher::default();
    for v in values {
        h.write_u32(v);
    }
    h.finish()
}

/// Tuple equality as a plain loop: tuples are a few values long, too short for `memcmp`
/// (which slice `==` calls) to pay for its call.
fn same(a: &[u32], b: &[u32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Row `r` of flat storage with `arity` columns.
pub(super) fn row(data: &[u32], arity: usize, r: u32) -> &[u32] {
    &data[r as usize * arity..(r as usize + 1) * arity]
}

/// A set of tuples stored flat (`arity` u32s per row, no allocation per tuple), with a hash
/// table of row ids for membership and hash indexes on the column lists that joins look up.
pub(super) struct Store {
    pub(super) arity: usize,
    pub(super) count: u32,
    pub(super) data: Vec<u32>,
    /// Per row, its value: for tensors with defined elements under `min=`/`max=`; empty for
    /// relations, whose rows are worth 1.
    pub(super) values: Vec<f64>,
    members: HashTable<u32>,
    indexes: Vec<Index>,
}

/// Rows grouped by the values of some columns: a hash table from each key to the newest row
/// with it and the number of rows with it, and a `next` link from every row to the previous
/// one with the same key.
struct Index {
    cols: Vec<usize>,
    heads: HashTable<(u32, u32, u32)>,
    next: Vec<u32>,
}

impl Index {
    fn add(&mut self, data: &[u32], arity: usize, r: u32) {
        let Index { cols, heads, next } = self;
        let this = row(data, arity, r);
        let h = hash_of(cols.iter().map(|&c| this[c]));
        next.push(NONE);
        let same =
            |&(k, _, _): &(u32, u32, u32)| cols.iter().all(|&c| row(data, arity, k)[c] == this[c]);
        match heads.find_mut(h, same) {
            Some((_, head, len)) => {
                next[r as usize] = *head;
                *head = r;
                *len += 1;
            }
            None => {
                heads.insert_unique(h, (r, r, 1), |&(k, _, _)| {
                    hash_of(cols.iter().map(|&c| row(data, arity, k)[c]))
                });
            }
        }
    }

    /// The newest row whose key columns equal `key` (`NONE` if there is none; follow `next`
    /// for the others), and how many rows have that key.
    fn first(&self, data: &[u32], arity: usize, key: &[u32]) -> (u32, u32) {
        let h = hash_of(key.iter().copied());
        let same = |&(k, _, _): &(u32, u32, u32)| {
            self.cols
                .iter()
                .zip(key)
                .all(|(&c, &v)| row(data, arity, k)[c] == v)
        };
        self.heads
            .find(h, same)
            .map(|&(_, head, len)| (head, len))
            .unwrap_or((NONE, 0))
    }
}

impl Store {
    pub(super) fn new(arity: usize) -> Store {
        Store {
            arity,
            count: 0,
            data: Vec::new(),
            values: Vec::new(),
            members: HashTable::new(),
            indexes: Vec::new(),
        }
    }

    pub(super) fn from_tensor(t: &Tensor) -> Store {
        let mut s = Store::new(t.rank());
        if let Storage::Relation(r) = &t.storage {
            for tuple in r.iter() {
                s.insert(tuple);
            }
        }
        s
    }

    /// Rows with values: a relation's tuples (worth 1), or a tensor's defined elements.
    pub(super) fn from_valued(t: &Tensor) -> Store {
        let Storage::Sparse(m) = &t.storage else {
            return Store::from_tensor(t);
        };
        let mut s = Store::new(t.rank());
        for (k, v) in m.iter() {
            s.insert(k);
            s.values.push(v);
        }
        s
    }

    /// The value of row `r`.
    pub(super) fn value(&self, r: u32) -> f64 {
        self.values.get(r as usize).copied().unwrap_or(1.0)
    }

    /// The row holding tuple `t`.
    pub(super) fn position(&self, t: &[u32]) -> Option<u32> {
        let h = hash_of(t.iter().copied());
        self.members
            .find(h, |&r| same(row(&self.data, self.arity, r), t))
            .copied()
    }

    pub(super) fn contains(&self, t: &[u32]) -> bool {
        self.position(t).is_some()
    }

    /// Adds a tuple, updating every index; false if it was already there.
    pub(super) fn insert(&mut self, t: &[u32]) -> bool {
        let h = hash_of(t.iter().copied());
        let Store {
            arity,
            count,
            data,
            members,
            ..
        } = self;
        if members
            .find(h, |&r| same(row(data, *arity, r), t))
            .is_some()
        {
            return false;
        }
        members.insert_unique(h, *count, |&x| {
            hash_of(row(data, *arity, x).iter().copied())
        });
        self.push(t);
        true
    }

    /// Appends a tuple known to be new, without the membership table: for the last round's
    /// new tuples, which are only scanned or looked up through an index.
    pub(super) fn push(&mut self, t: &[u32]) {
        let r = self.count;
        self.count += 1;
        self.data.extend_from_slice(t);
        for ix in self.indexes.iter_mut() {
            ix.add(&self.data, self.arity, r);
        }
    }

    /// Makes sure an index on `cols` exists.
    pub(super) fn ensure_index(&mut self, cols: &[usize]) {
        if cols.is_empty() || self.index(cols).is_some() {
            return;
        }
        let mut ix = Index {
            cols: cols.to_vec(),
            heads: HashTable::new(),
            next: Vec::with_capacity(self.count as usize),
        };
        for r in 0..self.count {
            ix.add(&self.data, self.arity, r);
        }
        self.indexes.push(ix);
    }

    fn index(&self, cols: &[usize]) -> Option<&Index> {
        self.indexes.iter().find(|ix| ix.cols == cols)
    }

    /// How many rows have `key` in columns `cols` (0 without an index on `cols`).
    pub(super) fn lookup_len(&self, cols: &[usize], key: &[u32]) -> usize {
        self.index(cols)
            .map_or(0, |ix| ix.first(&self.data, self.arity, key).1 as usize)
    }

    /// The rows whose columns `cols` hold `key`, newest first; none without an index on
    /// `cols` (see [`Store::ensure_index`]).
    pub(super) fn lookup<'s>(
        &'s self,
        cols: &[usize],
        key: &[u32],
    ) -> impl Iterator<Item = u32> + 's {
        let ix = self.index(cols);
        let first = ix.map_or(NONE, |ix| ix.first(&self.data, self.arity, key).0);
        std::iter::successors((first != NONE).then_some(first), move |&r| {
            let next = ix?.next[r as usize];
            (next != NONE).then_some(next)
        })
    }
}
