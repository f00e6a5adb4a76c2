//! opt_einsum's `greedy` path (`paths.ssa_greedy_optimize` of opt_einsum 3.4, its default
//! chooser), step for step, so that a planned path is never worse than the one a NumPy user
//! gets: [`super::contraction_path`] keeps whichever of this and its own greedy path has
//! fewer FLOPs.
//!
//! What it does, as opt_einsum does it: a variable every factor holds counts as an output
//! one; factors over the same variables are multiplied first; every factor offers its best
//! pair with a later factor sharing a summed variable, and every new part its best pair with
//! any part sharing one; a pair is scored once, when offered (the size of what it keeps less
//! its operands' sizes; ties to the pair whose later part is older), and a pair with a part
//! already used is passed over. What no pair joined is multiplied last, smallest first.

use super::contraction_path::partners;
use super::einsum::{kept, Contraction, FactorSet, Path};
use crate::semantics::VarId;
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

/// A pair offered for contraction: ordered by its score, then its later part, then its
/// earlier one (opt_einsum's `(cost, id2, id1)`).
struct Offer {
    grown: f64,
    later: usize,
    earlier: usize,
    keeps: Vec<VarId>,
}

impl Offer {
    fn order(&self, other: &Offer) -> Ordering {
        self.grown
            .total_cmp(&other.grown)
            .then(self.later.cmp(&other.later))
            .then(self.earlier.cmp(&other.earlier))
    }
}

impl PartialEq for Offer {
    fn eq(&self, other: &Offer) -> bool {
        self.order(other) == Ordering::Equal
    }
}
impl Eq for Offer {}
impl PartialOrd for Offer {
    fn partial_cmp(&self, other: &Offer) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Offer {
    fn cmp(&self, other: &Offer) -> Ordering {
        self.order(other)
    }
}

/// The state of the search: parts by id (factors first), each with its variables (sorted),
/// and per summed variable the live parts holding it.
struct State<'a> {
    c: &'a Contraction,
    parts: Vec<Option<(Vec<VarId>, Path)>>,
    output: Vec<bool>,
    holders: Vec<Vec<usize>>,
    /// The live part over each set of variables.
    by_vars: BTreeMap<Vec<VarId>, usize>,
}

/// opt_einsum's greedy path over the factors of `c`.
pub(super) fn opt_einsum_greedy(c: &Contraction) -> Path {
    let n = c.factors.len();
    let vars: Vec<Vec<VarId>> = (0..n)
        .map(|k| {
            let mut v = kept(c, &FactorSet::one(k));
            v.sort_unstable();
            v
        })
        .collect();
    let mut output: Vec<bool> = (0..c.extents.len()).map(|v| c.keep.contains(&v)).collect();
    for (v, out) in output.iter_mut().enumerate() {
        *out |= vars.iter().all(|f| f.contains(&v));
    }
    let mut s = State {
        c,
        parts: Vec::new(),
        output,
        holders: vec![Vec::new(); c.extents.len()],
        by_vars: BTreeMap::new(),
    };
    for (k, v) in vars.iter().enumerate() {
        s.parts.push(Some((v.clone(), Path::Leaf(k))));
    }
    for (k, v) in vars.into_iter().enumerate() {
        match s.by_vars.get(&v) {
            Some(&same) => {
                if let Some(made) = s.merge(same, k, v) {
                    s.add(made);
                }
            }
            None => s.add(k),
        }
    }
    let mut offers = BinaryHeap::new();
    for v in 0..c.extents.len() {
        let held = s.holders[v].clone();
        for (x, &first) in held.iter().enumerate() {
            if let Some(best) = s.best_offer(first, &held[x + 1..]) {
                offers.push(Reverse(best));
            }
        }
    }
    while let Some(Reverse(offer)) = offers.pop() {
        // An offer with a part already used is passed over.
        let Some(made) = s.contract(offer) else {
            continue;
        };
        let partners = partners(s.vars(made), &s.holders, made);
        if let Some(best) = s.best_offer(made, &partners) {
            offers.push(Reverse(best));
        }
    }
    s.outer_products()
}

impl State<'_> {
    fn vars(&self, k: usize) -> &[VarId] {
        self.parts[k].as_ref().map_or(&[], |p| &p.0)
    }

    /// Registers live part `k` as the holder of its summed variables.
    fn add(&mut self, k: usize) {
        let vars = self.vars(k).to_vec();
        for &v in &vars {
            if !self.output[v] {
                self.holders[v].push(k);
            }
        }
        self.by_vars.insert(vars, k);
    }

    /// Replaces parts `i` and `j` by their contraction, which keeps `keeps`; returns its id,
    /// `None` (changing nothing) where either part is used already.
    fn merge(&mut self, i: usize, j: usize, keeps: Vec<VarId>) -> Option<usize> {
        if self.parts[i].is_none() || self.parts[j].is_none() {
            return None;
        }
        let (a, b) = (self.parts[i].take()?, self.parts[j].take()?);
        for v in a.0.iter().chain(&b.0) {
            self.holders[*v].retain(|&h| h != i && h != j);
        }
        for vars in [&a.0, &b.0] {
            if self.by_vars.get(vars).is_some_and(|&h| h == i || h == j) {
                self.by_vars.remove(vars);
            }
        }
        self.parts
            .push(Some((keeps, Path::Pair(Box::new(a.1), Box::new(b.1)))));
        Some(self.parts.len() - 1)
    }

    /// Takes an offer; a result over the variables of a live part is multiplied into it at
    /// once. Returns the id of what holds the result, `None` where a part of the offer is
    /// used already.
    fn contract(&mut self, offer: Offer) -> Option<usize> {
        let keeps = offer.keeps.clone();
        let made = self.merge(offer.earlier, offer.later, offer.keeps)?;
        let held = match self.by_vars.get(&keeps) {
            Some(&same) => self.merge(same, made, keeps)?,
            None => made,
        };
        self.add(held);
        Some(held)
    }

    /// The best of the pairs of `k` with each of `others`.
    fn best_offer(&self, k: usize, others: &[usize]) -> Option<Offer> {
        others
            .iter()
            .map(|&o| self.offer(k, o))
            .min_by(|a, b| a.order(b))
    }

    /// The pair `(i, j)` scored against the holders now.
    fn offer(&self, i: usize, j: usize) -> Offer {
        let (a, b) = (self.vars(i), self.vars(j));
        let mut keeps: Vec<VarId> = a.iter().chain(b).copied().collect();
        keeps.sort_unstable();
        keeps.dedup();
        keeps.retain(|v| {
            let here = usize::from(a.contains(v)) + usize::from(b.contains(v));
            self.output[*v] || self.holders[*v].len() > here
        });
        let size = |vs: &[VarId]| super::contraction_path::volume(self.c, vs);
        Offer {
            grown: size(&keeps) - size(a) - size(b),
            later: i.max(j),
            earlier: i.min(j),
            keeps,
        }
    }

    /// Joins the parts left, two smallest (by their output variables) at a time.
    fn outer_products(mut self) -> Path {
        let size = |s: &State, vs: &[VarId]| {
            let out: Vec<VarId> = vs.iter().copied().filter(|&v| s.output[v]).collect();
            super::contraction_path::volume(s.c, &out)
        };
        let mut left: Vec<(f64, usize)> = (0..self.parts.len())
            .filter(|&k| self.parts[k].is_some())
            .map(|k| (size(&self, self.vars(k)), k))
            .collect();
        loop {
            left.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let (first, second) = match left.as_slice() {
                [] => return Path::Leaf(0),
                [(_, only)] => {
                    return self.parts[*only].take().map_or(Path::Leaf(0), |p| p.1);
                }
                [a, b, ..] => (a.1, b.1),
            };
            let mut keeps: Vec<VarId> = self.vars(first).to_vec();
            keeps.extend_from_slice(self.vars(second));
            keeps.sort_unstable();
            keeps.dedup();
            keeps.retain(|&v| self.output[v]);
            let Some(made) = self.merge(first.min(second), first.max(second), keeps) else {
                return Path::Leaf(0);
            };
            left.drain(..2);
            left.push((size(&self, self.vars(made)), made));
        }
    }
}
