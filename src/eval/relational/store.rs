//! Relations as flat tuple arrays, with a membership table ([`Members`]) and indexes on the
//! column lists that joins look up ([`Index`]), maintained as tuples arrive.

use super::index::{Index, IndexId};
use super::members::Members;
use crate::tensor::{Storage, Tensor};

/// Row `r` of flat storage with `arity` columns.
pub(super) fn row(data: &[u32], arity: usize, r: u32) -> &[u32] {
    &data[r as usize * arity..(r as usize + 1) * arity]
}

/// A set of tuples stored flat (`arity` u32s per row, no allocation per tuple), with a
/// membership table and indexes on the column lists that joins look up.
pub(super) struct Store {
    pub(super) arity: usize,
    pub(super) count: u32,
    pub(super) data: Vec<u32>,
    /// Per row, its value: for tensors with defined elements under `min=`/`max=`; empty for
    /// relations, whose rows are worth 1.
    pub(super) values: Vec<f64>,
    members: Members,
    indexes: Vec<Index>,
    /// With `--provenance`: the row count before the first round and at the end of each
    /// round since (`eval/provenance.rs`).
    pub(super) marks: Option<Vec<u32>>,
}

impl Store {
    /// About the bytes it holds: its rows, their membership table and each index (a row's
    /// worth of `u32`s apiece, and a slot), counted against the memory budget (§15).
    pub(super) fn bytes(&self) -> u64 {
        let row = (self.arity.max(1) * 4) as u64;
        let tables = 1 + self.indexes.len() as u64;
        (self.count as u64).saturating_mul(row + tables * (row + 8)) + self.values.len() as u64 * 8
    }

    pub(super) fn new(arity: usize) -> Store {
        Store::with_members(arity, Members::new(arity, false))
    }

    /// An empty store whose membership table also finds each tuple's row
    /// ([`Store::position`]): for rows with values.
    fn with_positions(arity: usize) -> Store {
        Store::with_members(arity, Members::new(arity, true))
    }

    fn with_members(arity: usize, members: Members) -> Store {
        Store {
            arity,
            count: 0,
            data: Vec::new(),
            values: Vec::new(),
            members,
            indexes: Vec::new(),
            marks: None,
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

    /// Rows with values: a relation's tuples (worth 1), or a tensor's defined elements. Its
    /// tuples' rows can be found ([`Store::position`]), to update their values.
    pub(super) fn from_valued(t: &Tensor) -> Store {
        let mut s = Store::with_positions(t.rank());
        match &t.storage {
            Storage::Sparse(m) => {
                for (k, v) in m.iter() {
                    s.insert(k);
                    s.values.push(v);
                }
            }
            Storage::Relation(r) => {
                for tuple in r.iter() {
                    s.insert(tuple);
                }
            }
            _ => {}
        }
        s
    }

    /// The value of row `r`.
    pub(super) fn value(&self, r: u32) -> f64 {
        self.values.get(r as usize).copied().unwrap_or(1.0)
    }

    /// The row holding tuple `t`.
    pub(super) fn position(&self, t: &[u32]) -> Option<u32> {
        self.members.find(t, &self.data)
    }

    pub(super) fn contains(&self, t: &[u32]) -> bool {
        self.members.contains(t, &self.data)
    }

    /// Keeps, of the tuples laid flat in `tuples`, those the store does not hold, in order;
    /// returns how many values remain.
    pub(super) fn retain_unknown(&self, tuples: &mut [u32]) -> usize {
        self.members.retain_unknown(tuples, &self.data)
    }

    /// Starts noting the rows each round adds (`--provenance`): those held now are given.
    pub(super) fn note_rounds(&mut self) {
        self.marks = Some(vec![self.count]);
    }

    /// Ends a round, if rounds are noted.
    pub(super) fn end_round(&mut self) {
        if let Some(m) = &mut self.marks {
            m.push(self.count);
        }
    }

    /// Each tuple's round in the order of the sorted relation, if rounds were noted.
    pub(super) fn rounds(&self) -> Option<Vec<u32>> {
        let marks = self.marks.as_ref()?;
        let count = self.count as usize;
        Some(crate::eval::provenance::sorted_rounds(
            &self.data, self.arity, count, marks,
        ))
    }

    /// Adds a tuple, updating every index; false if it was already there.
    pub(super) fn insert(&mut self, t: &[u32]) -> bool {
        if !self.members.insert(t, self.count, &self.data) {
            return false;
        }
        self.append(t);
        true
    }

    /// Appends a tuple known to be new (the last round's new tuples are, and so need no
    /// check).
    pub(super) fn push(&mut self, t: &[u32]) {
        self.members.insert(t, self.count, &self.data);
        self.append(t);
    }

    fn append(&mut self, t: &[u32]) {
        let r = self.count;
        self.count += 1;
        self.data.extend_from_slice(t);
        for ix in self.indexes.iter_mut() {
            ix.add(&self.data, self.arity, r);
        }
    }

    /// The store without the tuples `gone` picks, with indexes on the same columns: how
    /// maintenance removes tuples (rows are never removed in place, so joins need not skip
    /// dead rows). Only for relations (rows without values).
    pub(super) fn retained(&self, gone: impl Fn(&[u32]) -> bool) -> Store {
        let mut s = Store::new(self.arity);
        for ix in &self.indexes {
            s.indexes.push(Index::new(&ix.cols, self.arity));
        }
        for r in 0..self.count {
            let t = row(&self.data, self.arity, r);
            if !gone(t) {
                s.push(t);
            }
        }
        s
    }

    /// Takes the tuples `gone` out in place, each row's place taken by the last row, with
    /// work proportional to them and their index groups; `false`, changing nothing, where
    /// the store cannot (its membership table keeps rows, its rows have values, or no index
    /// finds their rows), for the caller to use [`Store::retained`].
    pub(super) fn remove_in_place(&mut self, gone: &[Vec<u32>]) -> bool {
        let arity = self.arity;
        if arity == 0 || !self.members.removable() || !self.values.is_empty() {
            return false;
        }
        // The index on the most columns finds a row among the fewest others.
        let Some(id) = (0..self.indexes.len()).max_by_key(|&i| self.indexes[i].cols.len()) else {
            return false;
        };
        let (cols, stride) = (self.indexes[id].cols.clone(), self.indexes[id].stride());
        let mut rows: Vec<u32> = gone
            .iter()
            .filter_map(|t| {
                let key: Vec<u32> = cols.iter().map(|&c| t[c]).collect();
                let entries = self.entries(IndexId(id), &key);
                // Recent rows, the likeliest to go, are at the end of their group.
                let k = entries
                    .chunks_exact(stride)
                    .rposition(|e| row(&self.data, arity, e[0]) == t.as_slice())?;
                Some(entries[k * stride])
            })
            .collect();
        // Last rows first: a removed row that is the last one moves nothing, and the rows
        // still to remove keep their ids (only rows above the one removed move).
        rows.sort_unstable_by(|a, b| b.cmp(a));
        rows.dedup();
        for r in rows {
            let t = row(&self.data, arity, r).to_vec();
            self.members.remove(&t, &self.data);
            for ix in self.indexes.iter_mut() {
                ix.remove(&self.data, arity, r);
            }
            let last = self.count - 1;
            if r != last {
                let (head, tail) = self.data.split_at_mut(last as usize * arity);
                head[r as usize * arity..(r as usize + 1) * arity].copy_from_slice(&tail[..arity]);
                for ix in self.indexes.iter_mut() {
                    ix.renumber(&self.data, arity, last, r);
                }
            }
            self.count = last;
            self.data.truncate(last as usize * arity);
        }
        true
    }

    /// The tuples from row `from` on (those added since the store held `from` rows).
    pub(super) fn rows_from(&self, from: u32) -> impl Iterator<Item = &[u32]> + '_ {
        (from..self.count).map(move |r| row(&self.data, self.arity, r))
    }

    /// The index on `cols`, built now if there is none; `None` for no columns (a scan).
    pub(super) fn ensure_index(&mut self, cols: &[usize]) -> Option<IndexId> {
        if cols.is_empty() {
            return None;
        }
        if let Some(id) = self.index_id(cols) {
            return Some(id);
        }
        let mut ix = Index::new(cols, self.arity);
        for r in 0..self.count {
            ix.add(&self.data, self.arity, r);
        }
        self.indexes.push(ix);
        Some(IndexId(self.indexes.len() - 1))
    }

    pub(super) fn index_id(&self, cols: &[usize]) -> Option<IndexId> {
        self.indexes
            .iter()
            .position(|ix| ix.cols == cols)
            .map(IndexId)
    }

    pub(super) fn index(&self, id: IndexId) -> &Index {
        &self.indexes[id.0]
    }

    /// The entries (row id, then the other columns) of the rows whose index `id`'s columns
    /// hold `key`.
    pub(super) fn entries(&self, id: IndexId, key: &[u32]) -> &[u32] {
        self.indexes[id.0].entries(&self.data, self.arity, key)
    }

    /// The entries of the rows whose columns `cols` hold `key`, and their stride; none
    /// without an index on `cols` (see [`Store::ensure_index`]).
    fn entries_on(&self, cols: &[usize], key: &[u32]) -> (&[u32], usize) {
        match self.index_id(cols) {
            Some(id) => (self.entries(id, key), self.index(id).stride()),
            None => (&[], 1),
        }
    }

    /// How many distinct values columns `cols` hold together, where an index on them says.
    pub(super) fn distinct(&self, cols: &[usize]) -> Option<usize> {
        self.index_id(cols).map(|id| self.index(id).keys())
    }

    /// How many rows have `key` in columns `cols` (0 without an index on `cols`).
    pub(super) fn lookup_len(&self, cols: &[usize], key: &[u32]) -> usize {
        let (entries, stride) = self.entries_on(cols, key);
        entries.len() / stride
    }

    /// The rows whose columns `cols` hold `key`, oldest first; none without an index on
    /// `cols` (see [`Store::ensure_index`]).
    pub(super) fn lookup<'s>(
        &'s self,
        cols: &[usize],
        key: &[u32],
    ) -> impl Iterator<Item = u32> + 's {
        let (entries, stride) = self.entries_on(cols, key);
        entries.chunks_exact(stride).map(|e| e[0])
    }
}
