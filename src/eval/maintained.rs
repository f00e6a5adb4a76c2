//! The standard engine kept up to date (incremental maintenance): a program evaluated
//! once, whose input relations then change by commits. A commit goes through the strata in
//! order; a stratum that reads nothing that changed is left alone, a Datalog stratum carries
//! the changes through its kept stores ([`relational::Kept`]: continued semi-naive for
//! insertions, delete and re-derive for removals), and any other stratum — or one that
//! declines — is evaluated again on its planned kernel from the current values of the strata
//! below, its change found by comparing its tensors before and after.
//!
//! The answers after a commit are those of a run from scratch on the changed facts: each
//! step computes its strata's fixpoint on current inputs (the maintenance property tests
//! check it against the standard engine's own runs).

use super::delta::{difference, patch, revalue, Delta};
use super::relational::{Kept, KeptClosure, KeptExtremum, Update};
use super::standard::{evaluate_again, thread_pool, Standard};
use super::{Decision, Engine, EvalOptions, Ran};
use crate::diagnostics::Diagnostics;
use crate::plan::maintenance::Maintenance;
use crate::plan::{Kernel, Plan};
use crate::semantics::{Checked, Kind, TensorId};
use crate::tensor::Tensor;
use std::collections::{BTreeMap, BTreeSet};

/// A program evaluated once and kept up to date by [`Maintained::update`]. It holds no
/// values: the caller keeps them and hands them to each update.
pub struct Maintained {
    /// Per stratum, its kept stores where it is a Datalog stratum that can keep them.
    kept: Vec<Option<Keeping>>,
    /// Per stratum, the tensors its equations read.
    reads: Vec<BTreeSet<TensorId>>,
    log: Vec<Decision>,
    /// The first stratum a failed commit did not bring up to date: it and every later one
    /// are evaluated again by the next commit.
    stale_from: Option<usize>,
    /// The changes a failed commit made to derived tensors, reported by the next commit
    /// that succeeds.
    unreported: BTreeMap<TensorId, Delta>,
}

/// One change of a commit: a tensor, a row (positions, then a value's two words for a
/// tensor with values), and +1 to insert or −1 to remove.
pub type Change = (TensorId, Vec<u32>, isize);

impl Maintained {
    /// Evaluates the program on the standard engine and keeps its Datalog strata's stores.
    pub fn start(
        p: &Checked,
        plan: &Plan,
        o: &EvalOptions,
    ) -> Result<(Maintained, Vec<Tensor>), Diagnostics> {
        let evaluation = Standard.run(p, plan, o)?;
        let values = evaluation.values;
        let kept = (0..p.strata.len())
            .map(|i| keep(p, plan, i, &values, o))
            .collect();
        let reads = p
            .strata
            .iter()
            .map(|st| {
                let mut r = BTreeSet::new();
                for &e in &st.equations {
                    p.equations[e].rhs.reads(&mut |t, _| {
                        r.insert(t);
                    });
                }
                r
            })
            .collect();
        let m = Maintained {
            kept,
            reads,
            log: evaluation.log,
            stale_from: None,
            unreported: BTreeMap::new(),
        };
        Ok((m, values))
    }

    /// What ran for each stratum in the last evaluation or commit.
    pub fn log(&self) -> &[Decision] {
        &self.log
    }

    /// Whether `t` can change by [`Maintained::update`]: a tensor no equation defines
    /// (facts, a file, bound data).
    pub fn updatable(&self, p: &Checked, t: TensorId) -> bool {
        !p.equations.iter().any(|e| e.target == t)
    }

    /// Applies `changes` to the input tensors in `values` and carries them through every
    /// stratum that reads them; returns the change of every derived tensor that changed.
    /// When a stratum fails, the commit's facts stay and every derived tensor from that
    /// stratum on keeps its last values, until a commit succeeds: that commit evaluates them
    /// again and reports the changes of both.
    pub fn update(
        &mut self,
        (p, plan): (&Checked, &Plan),
        o: &EvalOptions,
        values: &mut Vec<Tensor>,
        changes: &[Change],
    ) -> Result<BTreeMap<TensorId, Delta>, Diagnostics> {
        let mut changed = apply_inputs(p, values, changes);
        let inputs: BTreeSet<TensorId> = changed.keys().copied().collect();
        // The derived tensors' changes, out of everything that changed (never copied: a
        // commit can change a million tuples).
        let derived = |mut changed: BTreeMap<TensorId, Delta>| {
            changed.retain(|t, _| !inputs.contains(t));
            changed
        };
        self.log.clear();
        for i in 0..p.strata.len() {
            match self.stratum(i, (p, plan), o, values, &changed) {
                Ok(deltas) => changed.extend(deltas),
                Err(e) => {
                    self.stale_from = Some(self.stale_from.map_or(i, |s| s.min(i)));
                    self.report_later(derived(changed));
                    return Err(e);
                }
            }
        }
        self.stale_from = None;
        self.report_later(derived(changed));
        Ok(std::mem::take(&mut self.unreported))
    }

    /// Adds `derived` after the changes not reported yet.
    fn report_later(&mut self, derived: BTreeMap<TensorId, Delta>) {
        for (t, d) in derived {
            let before = self.unreported.remove(&t).unwrap_or_default();
            let both = before.then(d);
            if !both.added.is_empty() || !both.removed.is_empty() {
                self.unreported.insert(t, both);
            }
        }
    }

    /// Brings stratum `i` up to date with the changes so far; returns its tensors' changes.
    fn stratum(
        &mut self,
        i: usize,
        (p, plan): (&Checked, &Plan),
        o: &EvalOptions,
        values: &mut Vec<Tensor>,
        changed: &BTreeMap<TensorId, Delta>,
    ) -> Result<BTreeMap<TensorId, Delta>, Diagnostics> {
        let st = &p.strata[i];
        let reads: BTreeMap<TensorId, Delta> = changed
            .iter()
            .filter(|(t, _)| self.reads[i].contains(t))
            .map(|(&t, d)| (t, d.clone()))
            .collect();
        let stale = self.stale_from.is_some_and(|s| i >= s);
        if st.equations.is_empty() || (reads.is_empty() && !stale) {
            return Ok(BTreeMap::new());
        }
        let pool = thread_pool(o);
        // A failure leaves the stores part-way: they are built again when next kept.
        let carried = match (&mut self.kept[i], &plan.strata[i].kernel) {
            _ if stale => Update::Declined("an earlier commit failed at or before it"),
            (Some(Keeping::Joins(k)), _)
                if reads.keys().all(|&t| p.tensors[t].kind == Kind::Bool) =>
            {
                let kept = k.update((p, st), &reads, values, (o, pool.as_deref()));
                kept.inspect_err(|_| self.kept[i] = None)?
            }
            (Some(Keeping::Closure(k)), _) => match k.update(&reads) {
                Some(deltas) => Update::Done(deltas),
                None => {
                    self.kept[i] = None;
                    Update::Declined("a node lies beyond the bit rows the memory allows")
                }
            },
            (Some(Keeping::Extremum(k)), Kernel::Extremum(rules)) => {
                let kept = k.update((p, st, rules), &reads, values, o);
                kept.inspect_err(|_| self.kept[i] = None)?
            }
            (Some(_), _) => Update::Declined("a tensor with values that it reads changed"),
            (None, _) => match plan.strata[i].maintenance {
                Maintenance::Again(why) => Update::Declined(why),
                _ => Update::Declined("its relations are not kept"),
            },
        };
        match carried {
            Update::Done(deltas) => {
                for (&t, d) in &deltas {
                    match p.tensors[t].kind {
                        Kind::Bool => patch(&mut values[t], d),
                        _ => revalue(&mut values[t], d),
                    }
                }
                self.log.push(Decision {
                    stratum: i,
                    ran: Ran::Maintained,
                    reason: None,
                });
                Ok(deltas)
            }
            Update::Declined(why) => {
                let old: Vec<Tensor> = st.tensors.iter().map(|&t| values[t].clone()).collect();
                let mut decision = evaluate_again(p, plan, o, i, values)?;
                decision.reason = Some(format!("evaluated again: {why}"));
                self.log.push(decision);
                self.kept[i] = keep(p, plan, i, values, o);
                Ok(st
                    .tensors
                    .iter()
                    .zip(&old)
                    .map(|(&t, before)| (t, difference(before, &values[t])))
                    .filter(|(_, d)| !d.added.is_empty() || !d.removed.is_empty())
                    .collect())
            }
        }
    }
}

/// A stratum's kept stores.
enum Keeping {
    /// Of a Datalog stratum.
    Joins(Kept),
    /// Of a transitive closure.
    Closure(KeptClosure),
    /// Of a `min=`/`max=` stratum.
    Extremum(KeptExtremum),
}

/// The kept stores of stratum `i`, where its plan says to keep them.
fn keep(p: &Checked, plan: &Plan, i: usize, values: &[Tensor], o: &EvalOptions) -> Option<Keeping> {
    let (sp, st) = (&plan.strata[i], &p.strata[i]);
    match (&sp.kernel, sp.maintenance) {
        (Kernel::Datalog(rules, _), Maintenance::Kept { rederive }) => Some(Keeping::Joins(
            Kept::new(p, st, (rules, rederive), values, o.max_iters),
        )),
        (Kernel::Datalog(rules, _), Maintenance::Closure(c)) => {
            let n = [c.head, c.edge]
                .iter()
                .flat_map(|&t| (0..2).map(move |ax| super::open::extent_now(p, t, ax)))
                .max()
                .unwrap_or(0);
            match KeptClosure::new(c, values, n, o.max_memory) {
                Some(k) => Some(Keeping::Closure(k)),
                None => Some(Keeping::Joins(Kept::new(
                    p,
                    st,
                    (rules, true),
                    values,
                    o.max_iters,
                ))),
            }
        }
        // Elements held as a dense array came from the loop nests (the kernel declined):
        // their stores would not hold them.
        (Kernel::Extremum(rules), Maintenance::Improved)
            if st
                .tensors
                .iter()
                .all(|&t| !matches!(values[t].storage, crate::tensor::Storage::Dense(_))) =>
        {
            Some(Keeping::Extremum(KeptExtremum::new(st, rules, values)))
        }
        _ => None,
    }
}

/// Applies the commit's changes to the input tensors, each row's last change counting, and
/// returns each input's net change (a row inserted that held already, or removed that did
/// not, changes nothing).
fn apply_inputs(
    p: &Checked,
    values: &mut [Tensor],
    changes: &[Change],
) -> BTreeMap<TensorId, Delta> {
    let mut last: BTreeMap<TensorId, BTreeMap<Vec<u32>, Option<Vec<u32>>>> = BTreeMap::new();
    for (t, row, sign) in changes {
        let rank = p.tensors[*t].shape.len();
        let key = row[..rank.min(row.len())].to_vec();
        let value = (*sign > 0).then(|| row.clone());
        last.entry(*t).or_default().insert(key, value);
    }
    let mut out = BTreeMap::new();
    for (t, rows) in last {
        let valued = p.tensors[t].kind != Kind::Bool;
        let mut delta = Delta::default();
        for (key, row) in rows {
            let before = values[t].get_at(&key).filter(|&v| valued || v != 0.0);
            match (before, row) {
                (Some(v), None) => delta.removed.push(with_value(&key, v, valued)),
                (None, Some(row)) => delta.added.push(row),
                (Some(v), Some(row)) if valued && with_value(&key, v, true) != row => {
                    delta.removed.push(with_value(&key, v, true));
                    delta.added.push(row);
                }
                _ => {}
            }
        }
        if delta.added.is_empty() && delta.removed.is_empty() {
            continue;
        }
        match valued {
            true => revalue(&mut values[t], &delta),
            false => patch(&mut values[t], &delta),
        }
        out.insert(t, delta);
    }
    out
}

/// A row of a change: the positions, then for a tensor with values its value's words.
fn with_value(key: &[u32], v: f64, valued: bool) -> Vec<u32> {
    match valued {
        true => super::delta::with_value(key, v),
        false => key.to_vec(),
    }
}
