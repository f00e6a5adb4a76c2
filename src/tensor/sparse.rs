//! The defined elements of a real or integer tensor (element facts, valued files,
//! `max=`/`min=` results): their positions as a [`Relation`] (sorted, distinct, flat) and
//! one value per position beside it. Memory is 4 bytes per position plus 8 per value, with
//! no allocation per element, and the positions can be walked by every kernel that walks a
//! relation's tuples. The same layout holds a result of `=` equations that is mostly zeros
//! (a count over relations): every element is then defined, and those not stored are 0.

use super::Relation;

/// Elements a tensor needs at least before its data may be stored as its non-zeros: below
/// it a dense array is small, and every kernel reads it directly.
pub const SPARSE_DATA_ELEMENTS: u128 = 1 << 20;

/// Whether a tensor of `elements` elements, `stored` of them given by its data (the others
/// 0), is best held as those `stored`: a large tensor at most 1/32 full. A stored element
/// costs 4 bytes per axis plus 8 against 1–8 dense bytes, and a product reads it by
/// scatter, several times slower per element than a GEMM; 1/32 keeps both below the dense
/// array's cost.
pub fn worth_storing_sparsely(elements: u128, stored: usize) -> bool {
    elements >= SPARSE_DATA_ELEMENTS && (stored as u128).saturating_mul(32) <= elements
}

/// Defined elements: sorted positions and their values.
#[derive(Clone, Debug, Default)]
pub struct Sparse {
    positions: Relation,
    values: Vec<f64>,
    /// An `int` tensor's values exactly (§8), beside `values` (which are these as f64, for
    /// the kernels that read every tensor in floating point); `None` for other types.
    ints: Option<Vec<i64>>,
    /// Elements not stored are 0 (every element is defined) rather than undefined.
    zeros: bool,
}

/// Equal elements, however they are held: an `int` tensor's elements built without `ints`
/// (their f64 image only) equal the same elements with it when the integers agree.
impl PartialEq for Sparse {
    fn eq(&self, other: &Sparse) -> bool {
        self.positions == other.positions
            && self.zeros == other.zeros
            && self.values == other.values
            && (self.ints.is_none() && other.ints.is_none()
                || (0..self.len()).all(|i| self.int_of(i) == other.int_of(i)))
    }
}

impl Sparse {
    /// No defined elements, over `arity` axes.
    pub fn new(arity: usize) -> Sparse {
        Sparse {
            positions: Relation::from_sorted(arity, Vec::new()),
            values: Vec::new(),
            ints: None,
            zeros: false,
        }
    }

    /// Elements given in any order (`keys` flat, `arity` positions each); values at the same
    /// position are added in the order given.
    pub fn from_entries(arity: usize, keys: Vec<u32>, values: Vec<f64>) -> Sparse {
        Sparse::from_entries_by(arity, keys, values, |a, v| a.map_or(v, |a| a + v))
    }

    /// [`Sparse::from_entries`] with the values at one position combined by `add` in the
    /// order given (`None` before the first): a dense tensor's data rounds after each
    /// addition, and the same data stored sparsely must give the same elements.
    pub fn from_entries_by(
        arity: usize,
        keys: Vec<u32>,
        values: Vec<f64>,
        add: impl Fn(Option<f64>, f64) -> f64,
    ) -> Sparse {
        let count = values.len();
        if arity == 0 {
            let total = values.iter().fold(None, |a, &v| Some(add(a, v)));
            return Sparse {
                positions: Relation::from_flat(0, Vec::new(), usize::from(total.is_some())),
                values: total.into_iter().collect(),
                ints: None,
                zeros: false,
            };
        }
        let key = |i: usize| &keys[i * arity..(i + 1) * arity];
        let mut order: Vec<usize> = (0..count).collect();
        // Stable: equal positions keep their order, so their values add in it.
        order.sort_by(|&a, &b| key(a).cmp(key(b)));
        let mut flat = Vec::with_capacity(keys.len());
        let mut vals: Vec<f64> = Vec::with_capacity(count);
        let mut last: Option<usize> = None;
        for i in order {
            match last {
                Some(l) if key(l) == key(i) => {
                    if let Some(v) = vals.last_mut() {
                        *v = add(Some(*v), values[i]);
                    }
                }
                _ => {
                    flat.extend_from_slice(key(i));
                    vals.push(add(None, values[i]));
                }
            }
            last = Some(i);
        }
        Sparse {
            positions: Relation::from_sorted(arity, flat),
            values: vals,
            ints: None,
            zeros: false,
        }
    }

    /// Elements already sorted by position, without repeats.
    pub fn from_sorted(positions: Relation, values: Vec<f64>) -> Sparse {
        debug_assert_eq!(positions.len(), values.len());
        Sparse {
            positions,
            values,
            ints: None,
            zeros: false,
        }
    }

    /// Integers already sorted by position, without repeats: an `int` tensor's exact
    /// elements.
    pub fn from_sorted_ints(positions: Relation, ints: Vec<i64>) -> Sparse {
        debug_assert_eq!(positions.len(), ints.len());
        Sparse {
            positions,
            values: ints.iter().map(|&i| i as f64).collect(),
            ints: Some(ints),
            zeros: false,
        }
    }

    /// The same elements held exactly as integers from now on (an `int` tensor's): values
    /// given as f64 are taken toward zero.
    pub fn as_ints(mut self) -> Sparse {
        if self.ints.is_none() {
            self.ints = Some(self.values.iter().map(|&v| v as i64).collect());
            self.values = self.ints.iter().flatten().map(|&i| i as f64).collect();
        }
        self
    }

    /// The integer values in position order, where the elements are an `int` tensor's.
    pub fn ints(&self) -> Option<&[i64]> {
        self.ints.as_deref()
    }

    /// The same elements, the others 0 (defined) rather than undefined.
    pub fn with_zeros(self) -> Sparse {
        Sparse {
            zeros: true,
            ..self
        }
    }

    /// Whether the elements not stored are 0 rather than undefined.
    pub fn zeros(&self) -> bool {
        self.zeros
    }

    /// The defined positions, as a relation.
    pub fn positions(&self) -> &Relation {
        &self.positions
    }

    /// The values, in position order.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// Number of defined elements.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no element is defined.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// [`Sparse::get`] as an integer: exact where the elements are an `int` tensor's.
    pub fn get_int(&self, key: &[u32]) -> Option<i64> {
        match self.positions.find(key) {
            Some(i) => Some(self.int_of(i)),
            None => self.zeros.then_some(0),
        }
    }

    /// The `i`th stored element as an integer: exact where `ints` holds it.
    fn int_of(&self, i: usize) -> i64 {
        match &self.ints {
            Some(ints) => ints[i],
            None => self.values[i] as i64,
        }
    }

    /// The value at `key`, if it is defined (0 where not stored, [`Sparse::zeros`]).
    pub fn get(&self, key: &[u32]) -> Option<f64> {
        match self.positions.find(key) {
            Some(i) => Some(self.values[i]),
            None => self.zeros.then_some(0.0),
        }
    }

    /// [`Sparse::get`] for keys visited in ascending order: `at` is where the search
    /// starts (the element after the last one found), so a run of stored elements costs a
    /// comparison each instead of a binary search.
    pub fn get_after(&self, key: &[u32], at: &mut usize) -> Option<f64> {
        if *at < self.positions.len() && self.positions.tuple(*at) == key {
            *at += 1;
            return Some(self.values[*at - 1]);
        }
        match self.positions.find(key) {
            Some(i) => {
                *at = i + 1;
                Some(self.values[i])
            }
            None => self.zeros.then_some(0.0),
        }
    }

    /// Defines one element after every stored one (its position sorts after theirs), in
    /// constant time; `false`, with nothing changed, when it does not sort after them.
    pub fn push_last(&mut self, key: &[u32], v: f64) -> bool {
        let last = self.positions.len().checked_sub(1);
        if last.is_some_and(|l| self.positions.tuple(l) >= key)
            || key.len() != self.positions.arity()
        {
            return false;
        }
        self.positions.push_last(key);
        self.values.push(v);
        if let Some(ints) = &mut self.ints {
            ints.push(v as i64);
        }
        true
    }

    /// Defines (or redefines) one element. Linear in the size; build large tensors with
    /// [`Sparse::from_entries`].
    pub fn set(&mut self, key: &[u32], v: f64) {
        self.set_exact(key, v, v as i64);
    }

    /// [`Sparse::set`] of an integer, exact where the elements are an `int` tensor's.
    pub fn set_int(&mut self, key: &[u32], v: i64) {
        self.set_exact(key, v as f64, v);
    }

    fn set_exact(&mut self, key: &[u32], v: f64, int: i64) {
        match self.positions.find(key) {
            Some(i) => {
                self.values[i] = v;
                if let Some(ints) = &mut self.ints {
                    ints[i] = int;
                }
            }
            None => {
                let at = self.positions.insert(key);
                self.values.insert(at, v);
                if let Some(ints) = &mut self.ints {
                    ints.insert(at, int);
                }
            }
        }
    }

    /// These elements with `changes` applied by one walk along them: each change, in
    /// ascending position order without repeats, sets its element (`Some`) or removes it
    /// (`None`). What an incremental commit does to a tensor of element facts.
    pub fn changed<'a>(
        &self,
        changes: impl IntoIterator<Item = (&'a [u32], Option<f64>)>,
    ) -> Sparse {
        let arity = self.positions.arity();
        // Positions, values and (for an `int` tensor) the integers, as the walk writes them.
        let mut out = (
            Vec::new(),
            Vec::new(),
            self.ints.as_ref().map(|_| Vec::new()),
        );
        let keep = |out: &mut (Vec<u32>, Vec<f64>, Option<Vec<i64>>), k: &[u32], i: usize| {
            out.0.extend_from_slice(k);
            out.1.push(self.values[i]);
            if let (Some(to), Some(held)) = (&mut out.2, &self.ints) {
                to.push(held[i]);
            }
        };
        let mut stored = self.positions.iter().enumerate().peekable();
        for (idx, v) in changes {
            while let Some((i, k)) = stored.next_if(|(_, k)| *k < idx) {
                keep(&mut out, k, i);
            }
            stored.next_if(|(_, k)| *k == idx);
            if let Some(v) = v {
                out.0.extend_from_slice(idx);
                out.1.push(v);
                if let Some(to) = &mut out.2 {
                    to.push(v as i64);
                }
            }
        }
        for (i, k) in stored {
            keep(&mut out, k, i);
        }
        let (keys, values, ints) = out;
        // The walk keeps positions sorted and distinct; a scalar's one element has none.
        let positions = match arity {
            0 => Relation::from_flat(0, keys, values.len()),
            _ => Relation::from_sorted(arity, keys),
        };
        Sparse {
            positions,
            values: match &ints {
                Some(ints) => ints.iter().map(|&i| i as f64).collect(),
                None => values,
            },
            ints,
            zeros: self.zeros,
        }
    }

    /// [`Sparse::changed`] in place: setting the value of a stored element moves nothing,
    /// and taking elements out or putting them in moves the others once, so a commit that
    /// sets one weight of a large tensor costs a search, or one move of it, and allocates
    /// nothing.
    pub fn apply<'a>(&mut self, changes: impl IntoIterator<Item = (&'a [u32], Option<f64>)>) {
        if self.positions.arity() == 0 || self.ints.is_some() {
            *self = self.changed(changes);
            return;
        }
        // Elements to take out (their places), and to put in (place, positions, value).
        let mut gone: Vec<usize> = Vec::new();
        let mut new: Vec<(usize, &[u32], f64)> = Vec::new();
        let mut from = 0;
        for (idx, v) in changes {
            let at = self.positions.search_from(from, idx);
            from = at.unwrap_or_else(|e| e);
            match (at, v) {
                (Ok(i), Some(v)) => self.values[i] = v,
                (Ok(i), None) => gone.push(i),
                (Err(i), Some(v)) => new.push((i, idx, v)),
                (Err(_), None) => {}
            }
        }
        if gone.is_empty() && new.is_empty() {
            return;
        }
        let removed: Vec<Vec<u32>> = gone
            .iter()
            .map(|&i| self.positions.tuple(i).to_vec())
            .collect();
        let added: Vec<Vec<u32>> = new.iter().map(|(_, idx, _)| idx.to_vec()).collect();
        self.positions.patch(&added, &removed);
        let values = &mut self.values;
        let (len, mut write, mut read) = (values.len(), 0usize, 0usize);
        for &i in &gone {
            values.copy_within(read..i, write);
            write += i - read;
            read = i + 1;
        }
        values.copy_within(read..len, write);
        values.truncate(len - gone.len());
        // Each new element's place among the elements left: its place before, less the
        // elements taken out before it.
        let mut before = 0;
        let places: Vec<(usize, f64)> = new
            .iter()
            .map(|&(i, _, v)| {
                while before < gone.len() && gone[before] < i {
                    before += 1;
                }
                (i - before, v)
            })
            .collect();
        let old = values.len();
        values.resize(old + places.len(), 0.0);
        let mut end = old;
        for (j, &(at, v)) in places.iter().enumerate().rev() {
            values.copy_within(at..end, at + j + 1);
            values[at + j] = v;
            end = at;
        }
    }

    /// The stored elements in ascending position order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u32], f64)> + '_ {
        self.positions.iter().zip(self.values.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In place or by a walk into new buffers, changes give the same elements: values set
    /// on stored elements, elements taken out, put in, or both near each other.
    #[test]
    fn changes_applied_in_place_match_a_walk() {
        let mut state = 5u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as u32
        };
        for _ in 0..200 {
            let n = next(30) as usize;
            let keys: Vec<u32> = (0..2 * n).map(|_| next(6)).collect();
            let values: Vec<f64> = (0..n).map(|k| k as f64).collect();
            let s = Sparse::from_entries(2, keys, values);
            let mut changes: std::collections::BTreeMap<Vec<u32>, Option<f64>> = Default::default();
            for k in 0..next(8) {
                let v = (next(2) == 0).then_some(100.0 + k as f64);
                changes.insert(vec![next(6), next(6)], v);
            }
            let list = || changes.iter().map(|(k, v)| (k.as_slice(), *v));
            let mut in_place = s.clone();
            in_place.apply(list());
            assert_eq!(in_place, s.changed(list()));
        }
    }

    /// Elements compare by what they are: integers held beside the f64 image, or not held
    /// where the image is exact, are the same elements; an image that rounded is not.
    #[test]
    fn elements_compare_by_value_however_held() {
        assert_eq!(Sparse::new(2).as_ints(), Sparse::new(2));
        let one = Relation::from_sorted(1, vec![3]);
        let image = Sparse::from_sorted(one.clone(), vec![7.0]);
        assert_eq!(Sparse::from_sorted_ints(one.clone(), vec![7]), image);
        let big = (1i64 << 53) + 1;
        let rounded = Sparse::from_sorted(one.clone(), vec![big as f64]);
        assert_ne!(Sparse::from_sorted_ints(one, vec![big]), rounded);
    }

    #[test]
    fn entries_sort_and_add_in_the_order_given() {
        let s = Sparse::from_entries(2, vec![3, 1, 0, 2, 3, 1], vec![0.1, 5.0, 0.2]);
        let got: Vec<(Vec<u32>, f64)> = s.iter().map(|(k, v)| (k.to_vec(), v)).collect();
        assert_eq!(got, vec![(vec![0, 2], 5.0), (vec![3, 1], 0.1 + 0.2)]);
        assert_eq!(s.get(&[3, 1]), Some(0.1 + 0.2));
        assert_eq!(s.get(&[1, 3]), None);
        let mut s = s;
        s.set(&[1, 0], 7.0);
        s.set(&[0, 2], 4.0);
        let keys: Vec<Vec<u32>> = s.iter().map(|(k, _)| k.to_vec()).collect();
        assert_eq!(keys, vec![vec![0, 2], vec![1, 0], vec![3, 1]]);
        assert_eq!(s.get(&[0, 2]), Some(4.0));
        let scalar = Sparse::from_entries(0, Vec::new(), vec![1.0, 2.0]);
        assert_eq!((scalar.len(), scalar.get(&[])), (1, Some(3.0)));
    }
}
