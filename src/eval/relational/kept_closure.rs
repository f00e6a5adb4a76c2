//! A transitive closure kept between commits as bit rows (incremental maintenance, issue 49):
//! the stratum `R = G⁺` of `plan::maintenance::Closure`. Row `x` of `R` is the set of nodes
//! `x` reaches, so a change to one edge `u → v` touches only the rows that reach `u`, and
//! each is a few word operations per node rather than a tuple join per pair:
//!
//! - an inserted edge adds `{v} ∪ R[v]` to `R[u]` and to every row that holds `u` (a new
//!   path takes the new edge first after an old path to `u`);
//! - a removed edge changes nothing when `u` has another successor `w` that reaches `v`
//!   without reaching `u` (every path through the edge detours through `w`: the closure of
//!   a chain with forward edges loses none of them);
//! - otherwise the rows that reached `u` are computed again as the least fixpoint of
//!   `R[x] = ⋃ {y} ∪ R[y]` over `x`'s successors `y`, from empty rows, the other rows fixed
//!   (they never reached `u`, so no path of theirs used the edge).
//!
//! Each step leaves `R` exactly the closure of the edges so far, so a commit's edges are
//! taken one at a time, removals first. The commit's change is read off the rows it touched.

use super::bitset::ones;
use crate::eval::Delta;
use crate::plan::maintenance::Closure;
use crate::semantics::TensorId;
use crate::tensor::{Storage, Tensor};
use rustc_hash::FxHashMap as HashMap;
use std::collections::{BTreeMap, VecDeque};

/// Largest total size of a kept closure's three matrices, within the memory budget too.
const MAX_BYTES: u64 = 512 << 20;

/// An `n × n` bit matrix, every row stored.
#[derive(Clone, Debug, PartialEq)]
struct Bits {
    words: usize,
    data: Vec<u64>,
}

impl Bits {
    fn new(n: usize) -> Bits {
        let words = n.div_ceil(64);
        Bits {
            words,
            data: vec![0; n * words],
        }
    }

    fn row(&self, x: usize) -> &[u64] {
        &self.data[x * self.words..(x + 1) * self.words]
    }

    fn row_mut(&mut self, x: usize) -> &mut [u64] {
        &mut self.data[x * self.words..(x + 1) * self.words]
    }

    fn get(&self, x: usize, y: usize) -> bool {
        self.data[x * self.words + y / 64] & (1 << (y % 64)) != 0
    }

    fn set(&mut self, x: usize, y: usize, on: bool) {
        let (w, bit) = (x * self.words + y / 64, 1u64 << (y % 64));
        match on {
            true => self.data[w] |= bit,
            false => self.data[w] &= !bit,
        }
    }

    /// The same bits in a matrix of side `n` (at least the current one).
    fn widened(&self, n: usize) -> Bits {
        let mut out = Bits::new(n);
        let rows = self.data.len().checked_div(self.words).unwrap_or(0);
        for x in 0..rows {
            out.row_mut(x)[..self.words].copy_from_slice(self.row(x));
        }
        out
    }
}

fn subset(a: &[u64], b: &[u64]) -> bool {
    a.iter().zip(b).all(|(x, y)| x & !y == 0)
}

/// The closure's edges, both ways, and its rows.
pub(crate) struct KeptClosure {
    shape: Closure,
    n: usize,
    /// Largest side the memory allows.
    most: usize,
    /// Bit `y` of row `x` when `x → y`.
    succ: Bits,
    /// Bit `x` of row `y` when `x → y`: the rows to visit again when row `y` grows.
    pred: Bits,
    /// Bit `z` of row `x` when `x` reaches `z`.
    reach: Bits,
}

/// The side of a square bit matrix whose three copies fit in `budget` bytes.
fn most_side(budget: u64) -> usize {
    let bytes = budget.min(MAX_BYTES) / 3;
    // n · ⌈n/64⌉ · 8 ≤ bytes, so n² ≤ 8 · bytes is close enough from below.
    ((bytes as f64 * 8.0).sqrt() as usize).saturating_sub(64)
}

/// The pairs of a Boolean tensor held as a relation (one held otherwise has no tuples, as in
/// the stores of the tuple joins).
fn pairs(t: &Tensor) -> impl Iterator<Item = (usize, usize)> + '_ {
    let rel = match &t.storage {
        Storage::Relation(r) if r.arity() == 2 => Some(r),
        _ => None,
    };
    rel.into_iter()
        .flat_map(|r| r.iter())
        .map(|p| (p[0] as usize, p[1] as usize))
}

impl KeptClosure {
    /// The closure of `shape` as evaluated in `values`, over nodes below `n`; `None` when
    /// its matrices would not fit `budget` bytes or a tuple lies outside.
    pub(crate) fn new(shape: Closure, values: &[Tensor], n: usize, budget: u64) -> Option<Self> {
        let most = most_side(budget);
        if n > most {
            return None;
        }
        let mut k = KeptClosure {
            shape,
            n,
            most,
            succ: Bits::new(n),
            pred: Bits::new(n),
            reach: Bits::new(n),
        };
        for (a, b) in pairs(&values[shape.edge]) {
            let (u, v) = k.oriented(a, b);
            (u < n && v < n).then_some(())?;
            k.succ.set(u, v, true);
            k.pred.set(v, u, true);
        }
        for (x, z) in pairs(&values[shape.head]) {
            (x < n && z < n).then_some(())?;
            k.reach.set(x, z, true);
        }
        Some(k)
    }

    fn oriented(&self, a: usize, b: usize) -> (usize, usize) {
        match self.shape.transposed {
            true => (b, a),
            false => (a, b),
        }
    }

    /// Carries the change of the closed relation through; the closure's change, or `None`
    /// when a node lies beyond what the memory allows (then it is evaluated again).
    pub(crate) fn update(
        &mut self,
        changes: &BTreeMap<TensorId, Delta>,
    ) -> Option<BTreeMap<TensorId, Delta>> {
        let Some(d) = changes.get(&self.shape.edge) else {
            return Some(BTreeMap::new());
        };
        let edges = |list: &[Vec<u32>]| -> Option<Vec<(usize, usize)>> {
            list.iter()
                .map(|t| match t[..] {
                    [a, b] => Some(self.oriented(a as usize, b as usize)),
                    _ => None,
                })
                .collect()
        };
        let (removed, added) = (edges(&d.removed)?, edges(&d.added)?);
        let side = removed
            .iter()
            .chain(&added)
            .map(|&(u, v)| u.max(v) + 1)
            .max();
        if let Some(side) = side.filter(|&s| s > self.n) {
            self.widen(side)?;
        }
        let mut saved: HashMap<usize, Vec<u64>> = HashMap::default();
        for (u, v) in removed {
            self.remove(u, v, &mut saved);
        }
        for (u, v) in added {
            self.insert(u, v, &mut saved);
        }
        let delta = self.changed(saved);
        let mut out = BTreeMap::new();
        if !delta.added.is_empty() || !delta.removed.is_empty() {
            out.insert(self.shape.head, delta);
        }
        Some(out)
    }

    /// Grows the matrices to side `n` (nodes new to an open column or a domain).
    fn widen(&mut self, n: usize) -> Option<()> {
        if n > self.most {
            return None;
        }
        // Some room ahead, so a run of new nodes widens rarely.
        let n = n.next_multiple_of(64).min(self.most);
        self.succ = self.succ.widened(n);
        self.pred = self.pred.widened(n);
        self.reach = self.reach.widened(n);
        self.n = n;
        Some(())
    }

    /// Keeps row `x` as it was before the commit, the first time it changes.
    fn save(&self, x: usize, saved: &mut HashMap<usize, Vec<u64>>) {
        saved.entry(x).or_insert_with(|| self.reach.row(x).to_vec());
    }

    /// The rows that reach `u`, and `u`.
    fn reaching(&self, u: usize) -> Vec<usize> {
        (0..self.n)
            .filter(|&x| x == u || self.reach.get(x, u))
            .collect()
    }

    fn insert(&mut self, u: usize, v: usize, saved: &mut HashMap<usize, Vec<u64>>) {
        if self.succ.get(u, v) {
            return;
        }
        self.succ.set(u, v, true);
        self.pred.set(v, u, true);
        let mut add = self.reach.row(v).to_vec();
        add[v / 64] |= 1 << (v % 64);
        // Every row that reaches `u` holds `u`'s row: if that has it all, so do they.
        if subset(&add, self.reach.row(u)) {
            return;
        }
        for x in self.reaching(u) {
            if !subset(&add, self.reach.row(x)) {
                self.save(x, saved);
                for (r, a) in self.reach.row_mut(x).iter_mut().zip(&add) {
                    *r |= a;
                }
            }
        }
    }

    fn remove(&mut self, u: usize, v: usize, saved: &mut HashMap<usize, Vec<u64>>) {
        if !self.succ.get(u, v) {
            return;
        }
        self.succ.set(u, v, false);
        self.pred.set(v, u, false);
        let detour = ones(self.succ.row(u)).any(|w| self.reach.get(w, v) && !self.reach.get(w, u));
        if detour {
            return;
        }
        let rows = self.reaching(u);
        self.recompute(rows, saved);
    }

    /// Computes `rows` again as the least fixpoint of `R[x] = ⋃ {y} ∪ R[y]` over `x`'s
    /// successors, the other rows fixed: from empty rows, each row is recomputed from the
    /// current ones and, when it grows, its predecessors among `rows` are visited again.
    /// Rows only grow and stay within the fixpoint, and at the end each equals its right
    /// side, so it is the least fixpoint. Fewest-bits first is the order of a DAG's sinks
    /// first (a row holds the rows it reaches), where one visit each suffices.
    fn recompute(&mut self, mut rows: Vec<usize>, saved: &mut HashMap<usize, Vec<u64>>) {
        let count = |row: &[u64]| row.iter().map(|w| w.count_ones()).sum::<u32>();
        rows.sort_by_key(|&x| (count(self.reach.row(x)), x));
        let mut member = vec![false; self.n];
        for &x in &rows {
            self.save(x, saved);
            self.reach.row_mut(x).fill(0);
            member[x] = true;
        }
        let mut queued = member.clone();
        let mut queue: VecDeque<usize> = rows.into();
        let mut next = vec![0u64; self.reach.words];
        while let Some(x) = queue.pop_front() {
            queued[x] = false;
            next.fill(0);
            for y in ones(self.succ.row(x)) {
                for (n, r) in next.iter_mut().zip(self.reach.row(y)) {
                    *n |= r;
                }
                next[y / 64] |= 1 << (y % 64);
            }
            if next == self.reach.row(x) {
                continue;
            }
            self.reach.row_mut(x).copy_from_slice(&next);
            for p in ones(self.pred.row(x)) {
                if member[p] && !queued[p] {
                    queued[p] = true;
                    queue.push_back(p);
                }
            }
        }
    }

    /// The pairs the touched rows gained and lost since they were saved.
    fn changed(&self, saved: HashMap<usize, Vec<u64>>) -> Delta {
        let mut rows: Vec<(usize, Vec<u64>)> = saved.into_iter().collect();
        rows.sort_unstable_by_key(|(x, _)| *x);
        let mut delta = Delta::default();
        for (x, old) in rows {
            let now = self.reach.row(x);
            let old = &old[..];
            let words = |f: &dyn Fn(u64, u64) -> u64| -> Vec<u64> {
                now.iter()
                    .zip(old.iter().chain(std::iter::repeat(&0)))
                    .map(|(&a, &b)| f(a, b))
                    .collect()
            };
            let pair = |z: usize| vec![x as u32, z as u32];
            delta.added.extend(ones(&words(&|a, b| a & !b)).map(pair));
            delta.removed.extend(ones(&words(&|a, b| b & !a)).map(pair));
        }
        delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Relation;

    fn relation(n: usize, pairs: &[(usize, usize)]) -> Tensor {
        let mut flat: Vec<u32> = Vec::new();
        let mut sorted = pairs.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        for (a, b) in sorted {
            flat.extend([a as u32, b as u32]);
        }
        Tensor {
            elem: crate::tensor::ElemType::Bool,
            shape: vec![n, n],
            storage: Storage::Relation(Relation::from_sorted(2, flat)),
        }
    }

    /// The closure by a search from every node.
    fn closure(n: usize, edges: &[(usize, usize)]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for x in 0..n {
            let mut seen = vec![false; n];
            let mut stack: Vec<usize> = edges.iter().filter(|e| e.0 == x).map(|e| e.1).collect();
            while let Some(y) = stack.pop() {
                if !std::mem::replace(&mut seen[y], true) {
                    stack.extend(edges.iter().filter(|e| e.0 == y).map(|e| e.1));
                }
            }
            out.extend((0..n).filter(|&z| seen[z]).map(|z| (x, z)));
        }
        out
    }

    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// Random graphs with cycles, commits of random insertions and removals (some of edges
    /// not there, some of nodes new): the rows equal the closure computed by search, and
    /// the change reported is exactly the difference.
    #[test]
    fn commits_keep_the_rows_the_closure_of_the_edges() {
        let shape = Closure {
            head: 1,
            edge: 0,
            transposed: false,
        };
        for seed in 1..200u64 {
            let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let n = 3 + (next(&mut state) % 10) as usize;
            let grown = n + 2;
            let mut edges: Vec<(usize, usize)> = (0..n + next(&mut state) as usize % (2 * n))
                .map(|_| (next(&mut state) as usize % n, next(&mut state) as usize % n))
                .collect();
            edges.sort_unstable();
            edges.dedup();
            let values = [relation(n, &edges), relation(n, &closure(n, &edges))];
            let mut k = KeptClosure::new(shape, &values, n, 1 << 30).unwrap();
            for _ in 0..6 {
                let mut delta = Delta::default();
                for _ in 0..1 + next(&mut state) % 4 {
                    let e = (
                        next(&mut state) as usize % grown,
                        next(&mut state) as usize % grown,
                    );
                    let (present, add) = (edges.contains(&e), next(&mut state).is_multiple_of(2));
                    let pair = vec![e.0 as u32, e.1 as u32];
                    if add && !present && !delta.added.contains(&pair) {
                        delta.added.push(pair);
                    } else if !add && present && !delta.removed.contains(&pair) {
                        delta.removed.push(pair);
                    }
                }
                let before = closure(grown, &edges);
                edges.retain(|e| !delta.removed.contains(&vec![e.0 as u32, e.1 as u32]));
                edges.extend(delta.added.iter().map(|p| (p[0] as usize, p[1] as usize)));
                let after = closure(grown, &edges);
                let changes = BTreeMap::from([(0, delta)]);
                let out = k.update(&changes).unwrap();
                let got = out.get(&1).cloned().unwrap_or_default();
                let pairs = |l: &[Vec<u32>]| -> Vec<(usize, usize)> {
                    let mut v: Vec<_> = l.iter().map(|p| (p[0] as usize, p[1] as usize)).collect();
                    v.sort_unstable();
                    v
                };
                let want_added: Vec<_> = after
                    .iter()
                    .filter(|p| !before.contains(p))
                    .copied()
                    .collect();
                let want_removed: Vec<_> = before
                    .iter()
                    .filter(|p| !after.contains(p))
                    .copied()
                    .collect();
                assert_eq!(pairs(&got.added), want_added, "seed {seed}: added");
                assert_eq!(pairs(&got.removed), want_removed, "seed {seed}: removed");
                let rows: Vec<(usize, usize)> = (0..k.n)
                    .flat_map(|x| {
                        ones(k.reach.row(x))
                            .map(move |z| (x, z))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                assert_eq!(rows, after, "seed {seed}: rows");
            }
        }
    }
}
