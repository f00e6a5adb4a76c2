//! A `min=`/`max=` stratum kept between commits: its elements' stores stay alive, and a
//! commit that only adds elements or tuples to what its rules read improves its elements
//! from the new ones, round by round (a new candidate can only improve a minimum or a
//! maximum, and every old candidate keeps its value).
//!
//! A removal (or a changed value, a removal then an insertion) can make an element worse,
//! which improving cannot undo, unless no removed row is a witness: where every candidate
//! an instance over the removed rows gives is strictly worse than its element's value, every
//! element keeps its value. The rules add the stratum's own values with coefficient one, so
//! on exact integers a best derivation is best at every step, and a best derivation that
//! stepped through a removed row would make that row's candidate the element's value. The
//! rows are then marked dead (a store of values cannot take rows out) and joins pass over
//! them. Otherwise, where some value is not an integer (then rounding can tie sums that
//! differ), or once dead rows pile up, the stratum is evaluated again.

use super::extremum::{stores, Dead, Improving};
use super::join::prepare;
use super::kept::Update;
use super::store::row;
use super::{Earlier, Store};
use crate::diagnostics::Diagnostics;
use crate::eval::delta::with_value;
use crate::eval::{Delta, EvalOptions};
use crate::plan::datalog::ValuedRule;
use crate::semantics::{Checked, Family, Kind, Stratum, TensorId};
use crate::tensor::Tensor;
use rustc_hash::FxHashMap as HashMap;
use std::collections::{BTreeMap, BTreeSet};

/// Dead rows past this many, and past a quarter of their store, have the stratum evaluated
/// again (its stores then built afresh).
const DEAD_FLOOR: usize = 1 << 12;

/// A `min=`/`max=` stratum's live stores.
pub(crate) struct KeptExtremum {
    full: HashMap<TensorId, Store>,
    /// Rows of `full` whose tuples commits removed.
    dead: Dead,
    /// Tensors read under `not` or in an absent atom: a change to one can make an element
    /// worse, and their stores are not the joins' to skip.
    negated: BTreeSet<TensorId>,
    /// Whether every value in `full` is an integer of at most 2⁵³: then sums are exact, and
    /// a worse derivation is strictly worse.
    integral: bool,
}

/// What the rules read: the stratum, its rules, and the evaluation's settings and values.
type Reading<'a> = (&'a Checked, &'a Stratum, &'a [ValuedRule]);

impl KeptExtremum {
    /// The stores of the stratum's elements and of what its rules read, from `values`.
    pub(crate) fn new(st: &Stratum, rules: &[ValuedRule], values: &[Tensor]) -> KeptExtremum {
        let mut full = stores(st, rules, values);
        // The indexes a commit's rounds look up (each rule with each atom reading a few
        // changed elements), built now rather than by the first commit after each start.
        for vr in rules {
            for (i, a) in vr.rule.atoms.iter().enumerate() {
                let mut delta: HashMap<TensorId, Store> = HashMap::default();
                delta.insert(a.tensor, Store::new(a.terms.len()));
                prepare(
                    &vr.rule,
                    (Some(i), Earlier::Full),
                    (&mut full, &mut delta),
                    values,
                );
            }
        }
        let negated = rules
            .iter()
            .flat_map(|vr| {
                let r = &vr.rule;
                r.negated
                    .iter()
                    .map(|a| a.tensor)
                    .chain(r.absent.iter().map(|a| a.tensor))
            })
            .collect();
        let integral = full
            .values()
            .all(|s| s.values.iter().all(|&v| crate::tensor::sums_exactly(v)));
        KeptExtremum {
            full,
            dead: Dead::default(),
            negated,
            integral,
        }
    }

    pub(crate) fn update(
        &mut self,
        (p, st, rules): (&Checked, &Stratum, &[ValuedRule]),
        changes: &BTreeMap<TensorId, Delta>,
        values: &[Tensor],
        o: &EvalOptions,
    ) -> Result<Update, Diagnostics> {
        if changes.keys().any(|t| {
            !self.full.contains_key(t) || st.tensors.contains(t) || self.negated.contains(t)
        }) {
            return Ok(Update::Declined("a tensor it reads in a value changed"));
        }
        if changes.values().any(|d| !d.removed.is_empty()) {
            if let Some(why) = self.take_out((p, st, rules), changes, (values, o))? {
                return Ok(Update::Declined(why));
            }
        }
        let mut delta: HashMap<TensorId, Store> = HashMap::default();
        for (&t, d) in changes {
            let Some(store) = self.full.get_mut(&t) else {
                continue;
            };
            let valued = p.tensors[t].kind != Kind::Bool;
            let mut fresh = Store::new(store.arity);
            for r in &d.added {
                let (idx, v) = match valued {
                    true => Delta::value(r),
                    false => (r.as_slice(), 1.0),
                };
                match store.position(idx) {
                    // A removed row back, maybe with another value.
                    Some(r) if self.dead.get_mut(&t).is_some_and(|d| d.remove(&r)) => {
                        if valued {
                            store.values[r as usize] = v;
                        }
                    }
                    Some(_) => return Ok(Update::Declined("an element it reads was set again")),
                    None => {
                        store.insert(idx);
                        if valued {
                            store.values.push(v);
                        }
                    }
                }
                fresh.push(idx);
                if valued {
                    self.integral &= crate::tensor::sums_exactly(v);
                    fresh.values.push(v);
                }
            }
            if fresh.count > 0 {
                delta.insert(t, fresh);
            }
        }
        // Rounds from no change would run every rule whole.
        if delta.is_empty() {
            return Ok(Update::Done(BTreeMap::new()));
        }
        let improving = Improving {
            p,
            st,
            rules,
            dead: Some(&self.dead),
        };
        let mut before: BTreeMap<(TensorId, u32), Option<f64>> = BTreeMap::new();
        let mut record = |t: TensorId, r: u32, old: Option<f64>| {
            before.entry((t, r)).or_insert(old);
        };
        if let Err(why) = improving.rounds((&mut self.full, delta), (values, o), &mut record)? {
            return Ok(Update::Declined(why));
        }
        let mut out: BTreeMap<TensorId, Delta> = BTreeMap::new();
        for ((t, r), old) in before {
            let Some(store) = self.full.get(&t) else {
                continue;
            };
            let (tuple, new) = (row(&store.data, store.arity, r), store.value(r));
            let d = out.entry(t).or_default();
            if let Some(old) = old {
                d.removed.push(with_value(tuple, old));
            }
            self.integral &= crate::tensor::sums_exactly(new);
            d.added.push(with_value(tuple, new));
        }
        Ok(Update::Done(out))
    }

    /// Marks the rows `changes` removes dead where none of them is a witness (see the
    /// module's text); why not otherwise.
    fn take_out(
        &mut self,
        (p, st, rules): Reading,
        changes: &BTreeMap<TensorId, Delta>,
        (values, o): (&[Tensor], &EvalOptions),
    ) -> Result<Option<&'static str>, Diagnostics> {
        if !self.integral {
            return Ok(Some(
                "a removal or a changed value can make an element worse (values not integers)",
            ));
        }
        let mut delta: HashMap<TensorId, Store> = HashMap::default();
        let mut rows: Vec<(TensorId, u32)> = Vec::new();
        for (&t, d) in changes.iter().filter(|(_, d)| !d.removed.is_empty()) {
            let Some(store) = self.full.get(&t) else {
                continue;
            };
            let dead = self.dead.get(&t);
            let valued = p.tensors[t].kind != Kind::Bool;
            let mut gone = Store::new(store.arity);
            for x in &d.removed {
                let idx = if valued {
                    Delta::value(x).0
                } else {
                    x.as_slice()
                };
                let Some(r) = store
                    .position(idx)
                    .filter(|r| dead.is_none_or(|d| !d.contains(r)))
                else {
                    continue;
                };
                gone.push(idx);
                if valued {
                    gone.values.push(store.value(r));
                }
                rows.push((t, r));
            }
            if dead.map_or(0, |d| d.len()) + gone.count as usize
                > DEAD_FLOOR.max(store.count as usize / 4)
            {
                return Ok(Some("removed rows of what it reads piled up"));
            }
            delta.insert(t, gone);
        }
        let improving = Improving {
            p,
            st,
            rules,
            dead: Some(&self.dead),
        };
        let candidates = match improving.candidates((&mut self.full, delta), (values, o))? {
            Ok(candidates) => candidates,
            Err(why) => return Ok(Some(why)),
        };
        let family = p.tensors[st.tensors[0]].family;
        let worse = |candidate: f64, now: f64| match family {
            Family::Min => candidate > now,
            _ => candidate < now,
        };
        for (t, tuple, v) in candidates {
            let now = self
                .full
                .get(&t)
                .and_then(|s| Some(s.value(s.position(&tuple)?)));
            if !now.is_some_and(|now| worse(v, now)) {
                return Ok(Some("a removed row gave an element its value"));
            }
        }
        for (t, r) in rows {
            self.dead.entry(t).or_default().insert(r);
        }
        Ok(None)
    }
}
