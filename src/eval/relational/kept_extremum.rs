//! A `min=`/`max=` stratum kept between commits: its elements' stores stay alive, and a
//! commit that only adds elements or tuples to what its rules read improves its elements
//! from the new ones, round by round (a new candidate can only improve a minimum or a
//! maximum, and every old candidate keeps its value). A removal or a changed value can make
//! an element worse, which this cannot undo: the stratum is then evaluated again.

use super::extremum::{stores, Improving};
use super::join::prepare;
use super::kept::Update;
use super::store::row;
use super::Earlier;
use super::Store;
use crate::diagnostics::Diagnostics;
use crate::eval::delta::with_value;
use crate::eval::{Delta, EvalOptions};
use crate::plan::datalog::ValuedRule;
use crate::semantics::{Checked, Kind, Stratum, TensorId};
use crate::tensor::Tensor;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;

/// A `min=`/`max=` stratum's live stores.
pub(crate) struct KeptExtremum {
    full: HashMap<TensorId, Store>,
}

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
        KeptExtremum { full }
    }

    /// Improves the stratum's elements from `changes` to what its rules read; declines
    /// (the stores then part-way, for the caller to build again) where a change removes or
    /// revalues an element, or the rounds do not settle.
    pub(crate) fn update(
        &mut self,
        (p, st, rules): (&Checked, &Stratum, &[ValuedRule]),
        changes: &BTreeMap<TensorId, Delta>,
        values: &[Tensor],
        o: &EvalOptions,
    ) -> Result<Update, Diagnostics> {
        if changes.values().any(|d| !d.removed.is_empty()) {
            return Ok(Update::Declined(
                "a removal or a changed value can make an element worse",
            ));
        }
        if changes
            .keys()
            .any(|t| !self.full.contains_key(t) || st.tensors.contains(t))
        {
            return Ok(Update::Declined("a tensor it reads in a value changed"));
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
                if !store.insert(idx) {
                    return Ok(Update::Declined("an element it reads was set again"));
                }
                fresh.push(idx);
                if valued {
                    store.values.push(v);
                    fresh.values.push(v);
                }
            }
            delta.insert(t, fresh);
        }
        let improving = Improving { p, st, rules };
        let mut before: BTreeMap<(TensorId, u32), Option<f64>> = BTreeMap::new();
        let mut record = |t: TensorId, r: u32, old: Option<f64>| {
            before.entry((t, r)).or_insert(old);
        };
        if !improving.rounds((&mut self.full, delta), (values, o), &mut record)? {
            return Ok(Update::Declined("its rounds did not settle"));
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
            d.added.push(with_value(tuple, new));
        }
        Ok(Update::Done(out))
    }
}
