//! A Datalog stratum kept between commits (incremental maintenance, §9 and issue 49): its
//! stores and their indexes stay alive, and a commit's changes to the relations it reads are
//! carried through it, with work proportional to what changes.
//!
//! - Insertions continue semi-naive evaluation: the first round runs each rule once per
//!   atom over a changed relation, that atom reading only the inserted tuples; later rounds
//!   are the stratum's own.
//! - Removals delete and re-derive (DRed): every tuple with a derivation through a removed
//!   one is deleted (over-deletion, semi-naive over the old relations), those that still
//!   have a derivation from what remains are derived again (each rule with its head bound to
//!   a deleted tuple), and insertion goes on from them.
//!
//! The stratum declines (its caller evaluates it again from scratch) where this would be
//! wrong or not worth it: a relation it reads under `not` or in a value check changed, a
//! removal meets a rule that computes its head positions, or over-deletion reaches more than
//! a quarter of the stratum's tuples.

use super::join::prepare;
use super::{
    halted, load_atoms, run_rule, run_rule_reading, settle, Derived, Earlier, Halt, Run, Store,
};
use crate::diagnostics::Diagnostics;
use crate::eval::nest::Checker;
use crate::eval::{Delta, EvalOptions};
use crate::plan::datalog::{Atom, Rule};
use crate::semantics::{Checked, Stratum, TensorId};
use crate::tensor::Tensor;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::{BTreeMap, BTreeSet};

/// Over-deletions smaller than this are carried through whatever share of the stratum
/// they reach: evaluating again would cost as little.
const OVER_DELETION_FLOOR: u64 = 1 << 12;

/// A stratum's rules and live stores.
pub(crate) struct Kept {
    rules: Vec<Rule>,
    full: HashMap<TensorId, Store>,
    members: Vec<TensorId>,
    /// Relations that only positive atoms read: changes to them are carried through.
    positive: BTreeSet<TensorId>,
    /// Whether every rule's head is its variables and constants, so that a deleted tuple's
    /// derivations can be asked for by binding the head.
    rederivable: bool,
    /// The round cap of a recursive stratum (`None`: one round).
    rounds: Option<usize>,
}

/// What [`Kept::update`] did.
pub(crate) enum Update {
    /// The members' changes (those that changed).
    Done(BTreeMap<TensorId, Delta>),
    /// It could not carry the changes through, and why: evaluate the stratum again.
    Declined(&'static str),
}

/// Tuples of one relation, in the order found, with a table of their numbers to ask
/// membership (each tuple held once: a million deleted tuples are a million allocations,
/// not two million).
#[derive(Default)]
struct Tuples {
    list: Vec<Vec<u32>>,
    set: hashbrown::HashTable<u32>,
}

fn hash(t: &[u32]) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(t)
}

impl Tuples {
    fn contains(&self, t: &[u32]) -> bool {
        let list = &self.list;
        self.set.find(hash(t), |&i| list[i as usize] == t).is_some()
    }

    fn add(&mut self, t: &[u32]) -> bool {
        if self.contains(t) {
            return false;
        }
        let Tuples { list, set } = self;
        list.push(t.to_vec());
        let number = (list.len() - 1) as u32;
        set.insert_unique(hash(t), number, |&i| hash(&list[i as usize]));
        true
    }

    fn store(&self, arity: usize) -> Store {
        let mut s = Store::new(arity);
        self.list.iter().for_each(|t| s.push(t));
        s
    }
}

impl Kept {
    /// The stratum's stores built from its evaluated `values`, for its `rules` (planned
    /// `Maintenance::Kept`, with `rederive` as planned).
    pub(crate) fn new(
        p: &Checked,
        st: &Stratum,
        (rules, rederivable): (&[Rule], bool),
        values: &[Tensor],
        max_iters: usize,
    ) -> Kept {
        let mut full: HashMap<TensorId, Store> = HashMap::default();
        for &t in &st.tensors {
            full.insert(t, Store::from_tensor(&values[t]));
        }
        load_atoms(rules, values, &mut full);
        let mut negative = BTreeSet::new();
        for r in rules {
            negative.extend(r.negated.iter().map(|a| a.tensor));
            negative.extend(r.absent.iter().map(|a| a.tensor));
        }
        let positive = rules
            .iter()
            .flat_map(|r| r.atoms.iter().map(|a| a.tensor))
            .filter(|t| !negative.contains(t))
            .collect();
        warm(rules, &mut full, values, p.tensors.len());
        let rounds = st
            .recursive
            .then(|| crate::eval::fixpoint::join_round_cap(p, st, max_iters));
        Kept {
            rules: rules.to_vec(),
            full,
            members: st.tensors.clone(),
            positive,
            rederivable,
            rounds,
        }
    }

    /// Carries `changes` (of relations of lower strata, each tuple once, removals present
    /// before and insertions absent) through the stratum.
    pub(crate) fn update(
        &mut self,
        (p, st): (&Checked, &Stratum),
        changes: &BTreeMap<TensorId, Delta>,
        values: &[Tensor],
        (o, pool): (&EvalOptions, Option<&rayon::ThreadPool>),
    ) -> Result<Update, Diagnostics> {
        let open = crate::eval::open::Open::of(p);
        let checker = Checker {
            values,
            o,
            open: open.as_ref(),
        };
        let update = self.carry(p, changes, (checker, pool));
        if let Some(d) = open.as_ref().and_then(|o| o.overflow()) {
            return Err(d.into());
        }
        update.map_err(|h| halted(p, st, o, h))
    }

    fn carry(
        &mut self,
        p: &Checked,
        changes: &BTreeMap<TensorId, Delta>,
        run: Run,
    ) -> Result<Update, Halt> {
        if changes.keys().any(|t| !self.positive.contains(t)) {
            return Ok(Update::Declined(
                "a relation it reads under `not` or in a value changed",
            ));
        }
        let removing = changes.values().any(|d| !d.removed.is_empty());
        if removing && !self.rederivable {
            return Ok(Update::Declined(
                "a removal reaches a rule that computes its head's positions",
            ));
        }
        let deleted = match removing {
            true => match self.over_delete(p, changes, run)? {
                Some(d) => d,
                None => {
                    return Ok(Update::Declined(
                        "the removal reaches more than a quarter of the stratum's tuples",
                    ))
                }
            },
            false => HashMap::default(),
        };
        self.remove(changes, &deleted);
        let counts: HashMap<TensorId, u32> =
            self.members.iter().map(|&t| (t, self.count(t))).collect();
        let mut new = self.rederive(p, &deleted, run)?;
        self.insert(changes, &mut new, run)?;
        settle(
            &self.rules,
            &mut self.full,
            new,
            (self.rounds, &|_| false),
            run,
        )?;
        Ok(Update::Done(self.net(&counts, deleted)))
    }

    fn count(&self, t: TensorId) -> u32 {
        self.full.get(&t).map_or(0, |s| s.count)
    }

    /// The member tuples with a derivation through a removed tuple, not given as facts;
    /// `None` past a quarter of the members' tuples.
    fn over_delete(
        &mut self,
        p: &Checked,
        changes: &BTreeMap<TensorId, Delta>,
        run: Run,
    ) -> Result<Option<HashMap<TensorId, Tuples>>, Halt> {
        let base = p.tensors.len();
        // Each rule with its head renamed, so the join keeps the tuples its head already
        // holds (it drops known tuples otherwise).
        let renamed: Vec<Rule> = self
            .rules
            .iter()
            .map(|r| Rule {
                head: base + r.head,
                ..r.clone()
            })
            .collect();
        let total: u64 = self.members.iter().map(|&t| self.count(t) as u64).sum();
        let mut deleted: HashMap<TensorId, Tuples> = HashMap::default();
        let mut delta: HashMap<TensorId, Store> = changes
            .iter()
            .filter(|(_, d)| !d.removed.is_empty())
            .map(|(&t, d)| {
                let mut s = Store::new(self.full.get(&t).map_or(0, |s| s.arity));
                d.removed.iter().for_each(|x| s.push(x));
                (t, s)
            })
            .collect();
        let mut found = 0u64;
        while !delta.is_empty() {
            let mut derived: HashMap<TensorId, Derived> = HashMap::default();
            for r in &renamed {
                for (i, a) in r.atoms.iter().enumerate() {
                    if delta.contains_key(&a.tensor) {
                        // The deleted tuples are not the stores' last rows: the other
                        // atoms read their relations whole.
                        let at = (Some(i), Earlier::Full);
                        run_rule_reading(r, at, (&mut self.full, &mut delta), &mut derived, run)?;
                    }
                }
            }
            delta.clear();
            for (fake, d) in derived {
                let h = fake - base;
                let Some(store) = self.full.get(&h) else {
                    continue;
                };
                let arity = store.arity;
                let mut next = Store::new(arity);
                let gone = deleted.entry(h).or_default();
                for k in 0..d.count {
                    let t = &d.values[k * arity..(k + 1) * arity];
                    if store.contains(t) && !given(p, h, t) && gone.add(t) {
                        next.push(t);
                        found += 1;
                    }
                }
                if next.count > 0 {
                    delta.insert(h, next);
                }
            }
            if found * 4 > total && found > OVER_DELETION_FLOOR {
                return Ok(None);
            }
        }
        Ok(Some(deleted))
    }

    /// Takes the removed tuples of lower relations and the deleted member tuples out of
    /// the stores.
    fn remove(&mut self, changes: &BTreeMap<TensorId, Delta>, deleted: &HashMap<TensorId, Tuples>) {
        let take = |s: &mut Store, list: &[Vec<u32>]| {
            if !s.remove_in_place(list) {
                let gone: HashSet<&[u32]> = list.iter().map(Vec::as_slice).collect();
                *s = s.retained(|x| gone.contains(x));
            }
        };
        for (t, d) in changes.iter().filter(|(_, d)| !d.removed.is_empty()) {
            if let Some(s) = self.full.get_mut(t) {
                take(s, &d.removed);
            }
        }
        for (t, d) in deleted.iter().filter(|(_, d)| !d.list.is_empty()) {
            if let Some(s) = self.full.get_mut(t) {
                take(s, &d.list);
            }
        }
    }

    /// The deleted tuples that still have a derivation from what remains: each rule run
    /// with an atom over its head's deleted tuples in front, binding the head.
    fn rederive(
        &mut self,
        p: &Checked,
        deleted: &HashMap<TensorId, Tuples>,
        run: Run,
    ) -> Result<HashMap<TensorId, Derived>, Halt> {
        let base = p.tensors.len();
        let mut out: HashMap<TensorId, Derived> = HashMap::default();
        for (&h, d) in deleted.iter().filter(|(_, d)| !d.list.is_empty()) {
            let arity = self.full.get(&h).map_or(0, |s| s.arity);
            self.full.insert(base + h, d.store(arity));
        }
        for r in &self.rules {
            if deleted.get(&r.head).is_none_or(|d| d.list.is_empty()) {
                continue;
            }
            let bound = bound_rule(r, base);
            run_rule(
                &bound,
                None,
                (&mut self.full, &mut HashMap::default()),
                &mut out,
                run,
            )?;
        }
        for &h in deleted.keys() {
            self.full.remove(&(base + h));
        }
        Ok(out)
    }

    /// Adds the inserted tuples of lower relations to their stores and runs the first round
    /// over them, adding what it derives to `new`.
    fn insert(
        &mut self,
        changes: &BTreeMap<TensorId, Delta>,
        new: &mut HashMap<TensorId, Derived>,
        run: Run,
    ) -> Result<(), Halt> {
        let mut delta: HashMap<TensorId, Store> = HashMap::default();
        for (&t, d) in changes.iter().filter(|(_, d)| !d.added.is_empty()) {
            let Some(s) = self.full.get_mut(&t) else {
                continue;
            };
            let mut fresh = Store::new(s.arity);
            for x in &d.added {
                if s.insert(x) {
                    fresh.push(x);
                }
            }
            if fresh.count > 0 {
                delta.insert(t, fresh);
            }
        }
        for r in &self.rules {
            for (i, a) in r.atoms.iter().enumerate() {
                if delta.contains_key(&a.tensor) {
                    run_rule(r, Some(i), (&mut self.full, &mut delta), new, run)?;
                }
            }
        }
        Ok(())
    }

    /// Each member's net change: the tuples added since the removals that were not deleted
    /// before, and the deleted tuples not derived again.
    fn net(
        &self,
        counts: &HashMap<TensorId, u32>,
        mut deleted: HashMap<TensorId, Tuples>,
    ) -> BTreeMap<TensorId, Delta> {
        let mut out = BTreeMap::new();
        for &t in &self.members {
            let Some(store) = self.full.get(&t) else {
                continue;
            };
            let gone = deleted.remove(&t).unwrap_or_default();
            let from = counts.get(&t).copied().unwrap_or(store.count);
            let added: Vec<Vec<u32>> = store
                .rows_from(from)
                .filter(|x| !gone.contains(x))
                .map(<[u32]>::to_vec)
                .collect();
            let removed: Vec<Vec<u32>> = gone
                .list
                .into_iter()
                .filter(|x| !store.contains(x))
                .collect();
            if !added.is_empty() || !removed.is_empty() {
                out.insert(t, Delta { added, removed });
            }
        }
        out
    }
}

/// Rule `r` with an atom in front over its head's deleted tuples (relation `base + head`),
/// binding the head. It runs as a binary join from those few tuples: a worst-case-optimal
/// join would index the other relations on orders no other run uses.
fn bound_rule(r: &Rule, base: usize) -> Rule {
    let mut bound = r.clone();
    bound.atoms.insert(
        0,
        Atom {
            tensor: base + r.head,
            terms: r.head_terms.clone(),
        },
    );
    bound.cyclic = false;
    bound
}

/// Builds the indexes each run of a commit looks up (each rule with each atom reading a
/// few changed tuples, and each rule bound to deleted tuples), so that the first commit
/// does not build them over whole relations.
fn warm(rules: &[Rule], full: &mut HashMap<TensorId, Store>, values: &[Tensor], base: usize) {
    let mut delta: HashMap<TensorId, Store> = HashMap::default();
    for r in rules {
        for (i, a) in r.atoms.iter().enumerate() {
            let arity = a.terms.len();
            delta.insert(a.tensor, Store::new(arity));
            prepare(r, (Some(i), Earlier::Old), (full, &mut delta), values);
        }
        if !r.lets.is_empty() {
            continue;
        }
        full.insert(base + r.head, Store::new(r.head_terms.len()));
        prepare(
            &bound_rule(r, base),
            (None, Earlier::Old),
            (full, &mut delta),
            values,
        );
        full.remove(&(base + r.head));
    }
}

/// Whether `t` is one of the facts the program gives relation `h` (never deleted).
fn given(p: &Checked, h: TensorId, t: &[u32]) -> bool {
    p.data[h]
        .as_ref()
        .and_then(|d| d.get_at(t))
        .is_some_and(|v| v != 0.0)
}
