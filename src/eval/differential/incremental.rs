//! A program kept evaluated as its facts change: the strata before the dataflow run once,
//! the dataflow stays alive and takes each commit's changes to the relations it reads, and
//! the strata after it run again on its results. A commit returns the changes of every
//! relation and counting tensor the program derives.

use super::live::{Failure, Live};
use super::{relation, snapshot, Job, Row, Values};
use crate::diagnostics::Diagnostics;
use crate::eval::standard::State;
use crate::eval::{Decision, EvalOptions, Ran, Stop};
use crate::plan::dataflow::{plan_dataflow, DataflowPlan, Placement};
use crate::plan::Plan;
use crate::semantics::{Checked, TensorId};
use crate::tensor::{Relation, Storage, Tensor};
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
        let bits = row.get(k..).map_or(0, |w| {
            (u64::from(w[0]) << 32) | u64::from(*w.get(1).unwrap_or(&0))
        });
        (&row[..k], f64::from_bits(bits))
    }
}

/// An element's positions followed by its value's bits.
fn with_value(idx: &[u32], v: f64) -> Vec<u32> {
    let bits = v.to_bits();
    let mut row = idx.to_vec();
    row.push((bits >> 32) as u32);
    row.push(bits as u32);
    row
}

/// A program evaluated once and kept up to date by [`Incremental::update`].
pub struct Incremental {
    live: Live,
    flow: DataflowPlan,
    values: Vec<Tensor>,
    log: Vec<Decision>,
}

impl Incremental {
    /// Evaluates the program with the dataflow on `workers` threads of this process, which
    /// then stay up for updates.
    pub fn start(
        p: &Checked,
        plan: &Plan,
        o: &EvalOptions,
        workers: usize,
    ) -> Result<Incremental, Diagnostics> {
        let flow = plan_dataflow(p, plan);
        let mut state = State::new(p, plan, o)?;
        for (i, st) in p.strata.iter().enumerate() {
            if flow.placement[i] == Placement::Before {
                state.stratum(i, st)?;
            }
        }
        let initial: Vec<(usize, Row, isize)> = flow
            .inputs
            .iter()
            .enumerate()
            .flat_map(|(k, &t)| super::rows(&state.values[t]).map(move |r| (k, r, 1)))
            .collect();
        let job = Job {
            values: std::sync::Arc::new(Values {
                tensors: snapshot(&state.values, &flow.read_by_values),
                options: o.clone(),
            }),
            plan: flow.clone(),
        };
        // Rounds end on Ctrl-C; a `--timeout` bounds the first evaluation only.
        let stop = Stop::new(None, o.stop.flag.clone());
        let mut live = Live::start(job, workers, stop).map_err(|e| super::failed(&e))?;
        let changes = live.round(initial).map_err(|f| failure(p, &flow, o, f))?;
        for fs in &flow.strata {
            state.fill_pending(&fs.tensors);
            for &t in &fs.tensors {
                let rows = changes.iter().filter(|(u, _, d)| *u == t && *d > 0);
                state.values[t] = match fs.counts {
                    true => super::counts(p, t, plan.sparse[t], rows.map(|(_, r, _)| r.as_slice())),
                    false => relation(p, t, rows.map(|(_, r, _)| r.as_slice())),
                };
            }
            state.log(fs.stratum, Ran::Differential, None);
        }
        let mut inc = Incremental {
            live,
            flow,
            values: Vec::new(),
            log: Vec::new(),
        };
        inc.after(p, &mut state)?;
        let done = state.finish();
        inc.values = done.values;
        inc.log = done.log;
        Ok(inc)
    }

    /// Every tensor's current value.
    pub fn values(&self) -> &[Tensor] {
        &self.values
    }

    /// Which kernel evaluated each stratum.
    pub fn log(&self) -> &[Decision] {
        &self.log
    }

    /// Whether `t` can change by [`Incremental::update`]: a relation of facts (or a file) that
    /// the dataflow reads, which no stratum before the dataflow and no value check reads.
    pub fn updatable(&self, p: &Checked, t: TensorId) -> bool {
        let defined = p
            .strata
            .iter()
            .any(|s| s.tensors.contains(&t) && !s.equations.is_empty());
        let read_before = p.strata.iter().enumerate().any(|(i, s)| {
            self.flow.placement[i] == Placement::Before
                && s.equations.iter().any(|&e| {
                    let mut reads = false;
                    p.equations[e].rhs.reads(&mut |u, _| reads |= u == t);
                    reads
                })
        });
        self.flow.inputs.contains(&t)
            && !defined
            && !read_before
            && !self.flow.read_by_values.contains(&t)
    }

    /// Applies changes to relations that [`Incremental::updatable`] allows, in order (a
    /// tuple with +1 is inserted, with −1 removed; inserting a tuple that holds, or removing
    /// one that does not, changes nothing) and returns the changes of every derived tensor.
    pub fn update(
        &mut self,
        p: &Checked,
        plan: &Plan,
        o: &EvalOptions,
        changes: &[(TensorId, Vec<u32>, isize)],
    ) -> Result<BTreeMap<TensorId, Delta>, Diagnostics> {
        // Changes apply in order: a tuple holds after the commit if its last change
        // inserts it.
        let mut net: BTreeMap<(TensorId, Vec<u32>), isize> = BTreeMap::new();
        for (t, row, d) in changes {
            net.insert((*t, row.clone()), d.signum());
        }
        let mut inputs = Vec::new();
        let mut facts: BTreeMap<TensorId, Delta> = BTreeMap::new();
        for ((t, row), d) in net {
            let holds = match &self.values[t].storage {
                Storage::Relation(r) => r.contains(&row),
                _ => false,
            };
            let Some(k) = self.flow.inputs.iter().position(|&u| u == t) else {
                continue;
            };
            match (d > 0, holds) {
                (true, false) => {
                    inputs.push((k, Row::from_slice(&row), 1));
                    facts.entry(t).or_default().added.push(row);
                }
                (false, true) if d < 0 => {
                    inputs.push((k, Row::from_slice(&row), -1));
                    facts.entry(t).or_default().removed.push(row);
                }
                _ => {}
            }
        }
        for (&t, delta) in &facts {
            self.values[t] = patched(&self.values[t], delta);
        }
        let out = self
            .live
            .round(inputs)
            .map_err(|f| failure(p, &self.flow, o, f))?;
        // Leaving a fixpoint scope keeps a tuple derived at another iteration than before
        // as a retraction and an addition: they net out here.
        let mut out: Vec<((TensorId, Row), isize)> =
            out.into_iter().map(|(t, r, d)| ((t, r), d)).collect();
        differential_dataflow::consolidation::consolidate(&mut out);
        let mut deltas: BTreeMap<TensorId, Delta> = BTreeMap::new();
        for ((t, row), d) in out {
            let delta = deltas.entry(t).or_default();
            match d > 0 {
                true => delta.added.push(row.to_vec()),
                false => delta.removed.push(row.to_vec()),
            }
        }
        for fs in &self.flow.strata {
            for &t in &fs.tensors {
                let Some(delta) = deltas.get(&t).cloned() else {
                    continue;
                };
                let delta = &delta;
                if fs.counts {
                    let (value, changed) = recounted(p, &self.values[t], t, delta);
                    self.values[t] = value;
                    deltas.insert(t, changed);
                } else {
                    self.values[t] = patched(&self.values[t], delta);
                }
            }
        }
        if self
            .flow
            .placement
            .iter()
            .any(|x| matches!(x, Placement::After(_)))
        {
            let before = self.values.clone();
            let mut state = State::new(p, plan, o)?;
            for (t, v) in self.values.iter().enumerate() {
                state.values[t] = v.clone();
            }
            let mut fresh = State::new(p, plan, o)?;
            for (i, st) in p.strata.iter().enumerate() {
                if let Placement::After(_) = self.flow.placement[i] {
                    for &t in &st.tensors {
                        state.values[t] = std::mem::replace(
                            &mut fresh.values[t],
                            Tensor::relation(Vec::new(), std::iter::empty()),
                        );
                    }
                }
            }
            self.after(p, &mut state)?;
            self.values = state.finish().values;
            for (i, st) in p.strata.iter().enumerate() {
                if let Placement::After(_) = self.flow.placement[i] {
                    for &t in &st.tensors {
                        let d = difference(&before[t], &self.values[t]);
                        if !d.added.is_empty() || !d.removed.is_empty() {
                            deltas.insert(t, d);
                        }
                    }
                }
            }
        }
        for d in deltas.values_mut() {
            d.added.sort_unstable();
            d.removed.sort_unstable();
        }
        Ok(deltas)
    }

    /// Runs the strata after the dataflow, logging why each is there.
    fn after(&self, p: &Checked, state: &mut State) -> Result<(), Diagnostics> {
        for (i, st) in p.strata.iter().enumerate() {
            if let Placement::After(why) = &self.flow.placement[i] {
                state.stratum(i, st)?;
                if let Some(d) = state.last_decision() {
                    d.reason = d.reason.take().or(Some(why.clone()));
                }
            }
        }
        Ok(())
    }
}

fn failure(p: &Checked, flow: &DataflowPlan, o: &EvalOptions, f: Failure) -> Diagnostics {
    match f {
        Failure::Failed(why) => super::failed(&why),
        Failure::Stopped => {
            let span = flow
                .strata
                .first()
                .and_then(|fs| fs.rules.first())
                .map_or(crate::diagnostics::Span::new(0, 0), |r| {
                    p.equations[r.rule.equation].span
                });
            Diagnostics(vec![o.stop.error(span)])
        }
    }
}

/// A relation with `delta` applied, by one merge of sorted tuples.
fn patched(t: &Tensor, delta: &Delta) -> Tensor {
    let Storage::Relation(r) = &t.storage else {
        return t.clone();
    };
    let arity = r.arity();
    let mut removed: Vec<&[u32]> = delta.removed.iter().map(Vec::as_slice).collect();
    removed.sort_unstable();
    let mut added: Vec<&[u32]> = delta.added.iter().map(Vec::as_slice).collect();
    added.sort_unstable();
    let (mut flat, mut count) = (Vec::with_capacity(r.flat().len() + arity * added.len()), 0);
    let (mut i, mut a) = (0usize, 0usize);
    let mut push = |row: &[u32], flat: &mut Vec<u32>| {
        flat.extend_from_slice(row);
        count += 1;
    };
    for row in r.iter() {
        while a < added.len() && added[a] < row {
            push(added[a], &mut flat);
            a += 1;
        }
        while i < removed.len() && removed[i] < row {
            i += 1;
        }
        if i < removed.len() && removed[i] == row {
            continue;
        }
        if a < added.len() && added[a] == row {
            a += 1;
        }
        push(row, &mut flat);
    }
    for row in &added[a..] {
        push(row, &mut flat);
    }
    let rel = match arity {
        0 => Relation::from_flat(0, Vec::new(), count),
        _ => Relation::from_sorted(arity, flat),
    };
    Tensor {
        elem: t.elem,
        shape: t.shape.clone(),
        storage: Storage::Relation(rel),
    }
}

/// A counting tensor with its heads' counts changed (the dataflow's rows: a head, then its
/// count's high and low words): a removed count returns the element to its facts' value, an
/// added one sets it to the facts' value plus the count. Also the change, as each touched
/// element's old and new value where it is defined (a dense element always is).
fn recounted(p: &Checked, t: &Tensor, id: TensorId, delta: &Delta) -> (Tensor, Delta) {
    fn split(r: &[u32]) -> (Vec<usize>, u64) {
        let k = r.len().saturating_sub(2);
        let n = (u64::from(r[k]) << 32) | u64::from(r[k + 1]);
        (r[..k].iter().map(|&i| i as usize).collect(), n)
    }
    let old = t;
    let mut t = t.clone();
    let base = |idx: &[usize]| p.data[id].as_ref().map_or(0.0, |d| d.value(idx));
    let mut touched = std::collections::BTreeSet::new();
    for r in &delta.removed {
        let (idx, _) = split(r);
        t.set(&idx, base(&idx));
        touched.insert(idx);
    }
    for r in &delta.added {
        let (idx, n) = split(r);
        t.set(&idx, base(&idx) + n as f64);
        touched.insert(idx);
    }
    let mut changed = Delta::default();
    for idx in touched {
        let (before, after) = (old.get(&idx), t.get(&idx));
        if before == after {
            continue;
        }
        let head: Vec<u32> = idx.iter().map(|&i| i as u32).collect();
        if let Some(v) = before {
            changed.removed.push(with_value(&head, v));
        }
        if let Some(v) = after {
            changed.added.push(with_value(&head, v));
        }
    }
    (t, changed)
}

/// The tuples (or elements, as positions then value bits) of `new` not in `old`, and the
/// reverse.
fn difference(old: &Tensor, new: &Tensor) -> Delta {
    let tuples = |t: &Tensor| -> Vec<Vec<u32>> {
        match &t.storage {
            Storage::Relation(r) => r.iter().map(<[u32]>::to_vec).collect(),
            _ => t
                .entries()
                .into_iter()
                .map(|(idx, v)| {
                    let idx: Vec<u32> = idx.into_iter().map(|i| i as u32).collect();
                    with_value(&idx, v)
                })
                .collect(),
        }
    };
    let (a, b) = (tuples(old), tuples(new));
    let sa: std::collections::BTreeSet<&Vec<u32>> = a.iter().collect();
    let sb: std::collections::BTreeSet<&Vec<u32>> = b.iter().collect();
    Delta {
        added: b.iter().filter(|r| !sa.contains(r)).cloned().collect(),
        removed: a.iter().filter(|r| !sb.contains(r)).cloned().collect(),
    }
}
