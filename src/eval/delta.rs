//! What a commit changed in a tensor ([`Delta`]), and applying or finding one: shared by
//! the dataflow (`differential`) and the standard engine's maintenance (`maintained`).

use crate::tensor::{Relation, Storage, Tensor};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The changes of one derived tensor in a commit, as tuples of positions; for a tensor with
/// values (a count, a dense result), an element's positions followed by the 64 bits of its
/// value as two words, high first ([`Delta::value`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Tuples (or head and count) that hold now and did not before.
    pub added: Vec<Vec<u32>>,
    /// Tuples (or head and count) that held before and do not now.
    pub removed: Vec<Vec<u32>>,
}

impl Delta {
    /// An element's positions and value, from a row of a tensor with values.
    pub fn value(row: &[u32]) -> (&[u32], f64) {
        let k = row.len().saturating_sub(2);
        let word = |i: usize| u64::from(row.get(k + i).copied().unwrap_or(0));
        let bits = (word(0) << 32) | word(1);
        (&row[..k], f64::from_bits(bits))
    }

    /// This change followed by `later`, as one change: what `later` removes of what this
    /// added was never there, and what it adds back of what this removed never left.
    pub fn then(self, later: Delta) -> Delta {
        // Most commits follow one that was reported: nothing to reconcile.
        if self.added.is_empty() && self.removed.is_empty() {
            return later;
        }
        use rustc_hash::FxHashSet as HashSet;
        let (a1, r1): (HashSet<&Vec<u32>>, HashSet<&Vec<u32>>) =
            (self.added.iter().collect(), self.removed.iter().collect());
        let (a2, r2): (HashSet<&Vec<u32>>, HashSet<&Vec<u32>>) =
            (later.added.iter().collect(), later.removed.iter().collect());
        let added = (self.added.iter().filter(|x| !r2.contains(x)))
            .chain(later.added.iter().filter(|x| !r1.contains(x)))
            .cloned()
            .collect();
        let removed = (self.removed.iter().filter(|x| !a2.contains(x)))
            .chain(later.removed.iter().filter(|x| !a1.contains(x)))
            .cloned()
            .collect();
        Delta { added, removed }
    }

    /// The two words a value ends a row with: the inverse of [`Delta::value`].
    pub fn words(v: f64) -> [u32; 2] {
        let bits = v.to_bits();
        [(bits >> 32) as u32, bits as u32]
    }
}

/// An element's positions followed by its value's bits.
pub(crate) fn with_value(idx: &[u32], v: f64) -> Vec<u32> {
    let mut row = idx.to_vec();
    row.extend(Delta::words(v));
    row
}

/// A relation with `delta` applied, by one merge of sorted tuples.
pub(crate) fn patched(t: &Tensor, delta: &Delta) -> Tensor {
    let Storage::Relation(r) = &t.storage else {
        // A relation without facts may be held as zeros: patch its tuples.
        let mut flat = Vec::new();
        let mut count = 0;
        for row in super::differential::rows(t, false) {
            flat.extend_from_slice(&row);
            count += 1;
        }
        let relation = Tensor {
            elem: t.elem,
            shape: t.shape.clone(),
            storage: Storage::Relation(Relation::from_flat(t.shape.len(), flat, count)),
        };
        return patched(&relation, delta);
    };
    let arity = r.arity();
    let rel = match arity {
        0 => {
            let holds = (!r.is_empty() || !delta.added.is_empty()) && delta.removed.is_empty();
            Relation::from_flat(0, Vec::new(), usize::from(holds))
        }
        _ => Relation::from_sorted(arity, merged(r, delta)),
    };
    Tensor {
        elem: t.elem,
        shape: t.shape.clone(),
        storage: Storage::Relation(rel),
    }
}

/// [`patched`] in place, where `t` holds its tuples as a relation.
pub(crate) fn patch(t: &mut Tensor, delta: &Delta) {
    match &mut t.storage {
        Storage::Relation(r) => r.patch(&delta.added, &delta.removed),
        _ => *t = patched(t, delta),
    }
}

/// The flat tuples of `r` with `delta` applied: the runs between changed tuples are found
/// by galloping search and copied whole, so a small change to a large relation costs little
/// more than one copy of it, and a large one about a merge.
fn merged(r: &Relation, delta: &Delta) -> Vec<u32> {
    let (arity, rows, all) = (r.arity(), r.len(), r.flat());
    let mut changes: Vec<(&[u32], bool)> = delta
        .removed
        .iter()
        .map(|x| (x.as_slice(), false))
        .chain(delta.added.iter().map(|x| (x.as_slice(), true)))
        .collect();
    changes.sort_unstable();
    changes.dedup();
    let mut flat = Vec::with_capacity(all.len() + arity * delta.added.len());
    let mut from = 0usize;
    for (row, add) in changes {
        // Gallop from the last change, then bisect: changes close together cost little.
        let (mut lo, mut step) = (from, 1);
        while lo + step <= rows && r.tuple(lo + step - 1) < row {
            lo += step;
            step *= 2;
        }
        let mut hi = (lo + step - 1).min(rows);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match r.tuple(mid) < row {
                true => lo = mid + 1,
                false => hi = mid,
            }
        }
        flat.extend_from_slice(&all[from * arity..lo * arity]);
        from = lo;
        let present = lo < rows && r.tuple(lo) == row;
        match (add, present) {
            (true, false) => flat.extend_from_slice(row),
            (false, true) => from = lo + 1,
            _ => {}
        }
    }
    flat.extend_from_slice(&all[from * arity..]);
    flat
}

/// A `min=`/`max=` tensor (or one of element facts) with `delta` applied: its removed
/// elements (positions and old value) taken out, then its added ones (positions and new
/// value) set, by one walk along its sorted elements.
pub(crate) fn revalued(t: &Tensor, delta: &Delta) -> Tensor {
    let changes = element_changes(delta);
    let sparse = match &t.storage {
        Storage::Sparse(m) => m.changed(changes),
        _ => crate::tensor::Sparse::new(t.shape.len()).changed(changes),
    };
    Tensor::of_sparse(t.elem, t.shape.clone(), sparse)
}

/// [`revalued`] in place where `t` holds its elements sparsely (what a commit does to a
/// tensor of element facts, or a `min=`/`max=` tensor, that it keeps).
pub(crate) fn revalue(t: &mut Tensor, delta: &Delta) {
    match &mut t.storage {
        Storage::Sparse(m) => m.apply(element_changes(delta)),
        _ => *t = revalued(t, delta),
    }
}

/// Each element `delta` changes, in position order: its new value, or `None` where it goes.
fn element_changes(delta: &Delta) -> BTreeMap<&[u32], Option<f64>> {
    let mut changes: BTreeMap<&[u32], Option<f64>> = BTreeMap::new();
    for r in &delta.removed {
        changes.insert(Delta::value(r).0, None);
    }
    for r in &delta.added {
        let (idx, v) = Delta::value(r);
        changes.insert(idx, Some(v));
    }
    changes
}

/// The tuples (or elements, as positions then value bits) of `new` not in `old`, and the
/// reverse.
pub(crate) fn difference(old: &Tensor, new: &Tensor) -> Delta {
    use std::cmp::Ordering;
    let row = |(k, bits): Row<'_>| -> Vec<u32> {
        match bits {
            Some(b) => with_value(&k, f64::from_bits(b)),
            None => k.into_owned(),
        }
    };
    // Both sides come in ascending order of their positions: one merge, allocating only for
    // the rows that differ (a 2M-tuple relation compared with itself allocates nothing).
    let (mut a, mut b) = (rows(old).peekable(), rows(new).peekable());
    let mut delta = Delta::default();
    loop {
        let order = match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(x), Some(y)) => x.0.cmp(&y.0),
        };
        match (
            order,
            a.next_if(|_| order != Ordering::Greater),
            b.next_if(|_| order != Ordering::Less),
        ) {
            (Ordering::Equal, Some(x), Some(y)) if x.1 != y.1 => {
                delta.removed.push(row(x));
                delta.added.push(row(y));
            }
            (Ordering::Less, Some(x), _) => delta.removed.push(row(x)),
            (Ordering::Greater, _, Some(y)) => delta.added.push(row(y)),
            _ => {}
        }
    }
    delta
}

/// A row of [`rows`]: positions, and the value's bits where the tensor has values.
type Row<'a> = (Cow<'a, [u32]>, Option<u64>);

/// A tensor's rows in ascending order of their positions: a relation's tuples, or every
/// defined element's positions with its value's bits.
fn rows(t: &Tensor) -> Box<dyn Iterator<Item = Row<'_>> + '_> {
    match &t.storage {
        Storage::Relation(r) => Box::new(r.iter().map(|k| (Cow::Borrowed(k), None))),
        _ => Box::new(t.entries().into_iter().map(|(idx, v)| {
            let k: Vec<u32> = idx.into_iter().map(|i| i as u32).collect();
            (Cow::Owned(k), Some(v.to_bits()))
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn pairs(t: &Tensor) -> Vec<Vec<u32>> {
        match &t.storage {
            Storage::Relation(r) => r.iter().map(<[u32]>::to_vec).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn revaluing_sets_and_removes_elements_in_order_at_any_arity() {
        use crate::tensor::{ElemType, Sparse};
        let sparse = |arity: usize, keys: Vec<u32>, values: Vec<f64>| Tensor {
            elem: ElemType::F64,
            shape: vec![4; arity],
            storage: Storage::Sparse(Sparse::from_entries(arity, keys, values)),
        };
        let t = sparse(2, vec![0, 1, 2, 2, 3, 0], vec![5.0, 7.0, 1.0]);
        // (2, 2) changes value, (0, 1) goes, (1, 3) and (3, 3) come.
        let delta = Delta {
            removed: vec![with_value(&[2, 2], 7.0), with_value(&[0, 1], 5.0)],
            added: vec![
                with_value(&[2, 2], 4.0),
                with_value(&[3, 3], 2.0),
                with_value(&[1, 3], 9.0),
            ],
        };
        let want = sparse(2, vec![1, 3, 2, 2, 3, 0, 3, 3], vec![9.0, 4.0, 1.0, 2.0]);
        assert_eq!(revalued(&t, &delta), want);
        let mut in_place = t.clone();
        revalue(&mut in_place, &delta);
        assert_eq!(in_place, want);
        let scalar = sparse(0, Vec::new(), vec![3.0]);
        let delta = Delta {
            removed: vec![with_value(&[], 3.0)],
            added: vec![with_value(&[], 2.0)],
        };
        assert_eq!(revalued(&scalar, &delta), sparse(0, Vec::new(), vec![2.0]));
    }

    #[test]
    fn two_changes_make_one() {
        let d = |added: &[u32], removed: &[u32]| Delta {
            added: added.iter().map(|&x| vec![x]).collect(),
            removed: removed.iter().map(|&x| vec![x]).collect(),
        };
        // 1 added then removed, 2 removed then added back: neither changed; 3 and 4 did.
        let mut got = d(&[1, 3], &[2]).then(d(&[2], &[1, 4]));
        got.added.sort();
        got.removed.sort();
        assert_eq!(got, d(&[3], &[4]));
    }

    #[test]
    fn patching_adds_and_removes_tuples_anywhere_and_ignores_no_ops() {
        let rows: Vec<Vec<u32>> = (0..50).map(|i| vec![i / 7, i % 7]).collect();
        let t = Tensor::relation(vec![8, 7], rows.clone());
        let delta = Delta {
            added: vec![vec![0, 0], vec![9, 9], vec![3, 9], vec![0, 8]],
            removed: vec![vec![0, 1], vec![7, 0], vec![5, 5], vec![6, 9]],
        };
        let mut want: BTreeSet<Vec<u32>> = rows.into_iter().collect();
        for r in &delta.removed {
            want.remove(r);
        }
        want.extend(delta.added.iter().cloned());
        let got = pairs(&patched(&t, &delta));
        assert_eq!(got, want.into_iter().collect::<Vec<_>>());
        // Many changes, close together and far apart.
        let rows: Vec<Vec<u32>> = (0..1000).map(|i| vec![i / 40, i % 40]).collect();
        let t = Tensor::relation(vec![30, 40], rows.clone());
        let delta = Delta {
            added: (0..300).map(|i| vec![i % 30, 40 + i / 30]).collect(),
            removed: (0..1000)
                .filter(|i| i % 3 == 0 || (400..700).contains(i))
                .map(|i| vec![i / 40, i % 40])
                .collect(),
        };
        let mut want: BTreeSet<Vec<u32>> = rows.into_iter().collect();
        for r in &delta.removed {
            want.remove(r);
        }
        want.extend(delta.added.iter().cloned());
        assert_eq!(
            pairs(&patched(&t, &delta)),
            want.into_iter().collect::<Vec<_>>()
        );
        let empty = Tensor::relation(vec![8, 7], Vec::<Vec<u32>>::new());
        assert_eq!(pairs(&patched(&empty, &delta)), {
            let mut a = delta.added.clone();
            a.sort();
            a
        });
    }
}
