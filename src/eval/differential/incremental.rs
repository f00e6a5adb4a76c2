//! A program kept evaluated as its facts change: the strata before the dataflow run once,
//! the dataflow stays alive and takes each commit's changes to the relations it reads, and
//! the strata after it run again on its results. A commit returns the changes of every
//! relation and counting tensor the program derives.

use super::live::{self, Failure, InputChanges, Live};
use super::{snapshot, tensor_of, trouble, Cluster, Job, Row, Values};
use crate::diagnostics::Diagnostics;
use crate::eval::delta::{difference, patched, revalued, with_value, Delta};
use crate::eval::standard::State;
use crate::eval::{Decision, EvalOptions, Ran, Stop};
use crate::plan::dataflow::{plan_dataflow, DataflowPlan, Heads, Placement};
use crate::plan::Plan;
use crate::semantics::{Checked, Kind, TensorId};
use crate::tensor::{Storage, Tensor};
use std::collections::{BTreeMap, BTreeSet};

/// A program evaluated once and kept up to date by [`Incremental::update`].
pub struct Incremental {
    live: Live,
    flow: DataflowPlan,
    values: Vec<Tensor>,
    log: Vec<Decision>,
    /// The facts given to each relation that rules also derive (its value holds both).
    given: BTreeMap<TensorId, BTreeSet<Vec<u32>>>,
    /// What `min=`/`max=` fixpoints still change past `--max-iters`, summed over rounds:
    /// while any is left, commits fail with E0401.
    late: BTreeMap<(TensorId, Row), isize>,
    /// The values of the last commit that succeeded, while commits fail: the next one that
    /// succeeds reports its changes from them.
    last_good: Option<Vec<Tensor>>,
}

/// A dataflow input's change: the input's number, the tuple, +1 or −1.
type Input = (usize, Row, isize);

/// Each changed element's last change (its sign, and the value of a tensor with values).
type NetChanges = BTreeMap<(TensorId, Vec<u32>), (isize, Option<f64>)>;

/// Changes apply in order: a tuple holds after the commit if its last change inserts it. An
/// element of a tensor with values is keyed by its positions: its last change sets (or
/// removes) it.
fn net_changes(p: &Checked, changes: &[(TensorId, Vec<u32>, isize)]) -> NetChanges {
    let mut net = NetChanges::new();
    for (t, row, d) in changes {
        let rank = p.tensors[*t].shape.len();
        match p.tensors[*t].kind != Kind::Bool && row.len() == rank + 2 {
            true => {
                let (pos, v) = Delta::value(row);
                net.insert((*t, pos.to_vec()), (d.signum(), Some(v)));
            }
            false => {
                net.insert((*t, row.clone()), (d.signum(), None));
            }
        }
    }
    net
}

/// What every process of an incremental run computes before its dataflow starts.
struct Prepared<'a> {
    flow: DataflowPlan,
    state: State<'a>,
    job: Job,
    initial: InputChanges,
    fingerprint: u64,
}

/// Runs the strata before the dataflow and collects the dataflow's initial inputs.
fn prepare<'a>(
    p: &'a Checked,
    plan: &'a Plan,
    o: &'a EvalOptions,
) -> Result<Prepared<'a>, Diagnostics> {
    let flow = plan_dataflow(p, plan);
    let mut state = State::new(p, plan, o)?;
    for (i, st) in p.strata.iter().enumerate() {
        if flow.placement[i] == Placement::Before {
            state.stratum(i, st)?;
        }
    }
    let initial: InputChanges = flow
        .inputs
        .iter()
        .enumerate()
        .flat_map(|(k, &t)| {
            let value = super::input(p, &flow, &state.values, t);
            super::rows(&value, flow.valued.contains(&t))
                .map(move |r| (k, r, 1))
                .collect::<Vec<_>>()
        })
        .collect();
    let sizes = (0..flow.inputs.len()).map(|k| initial.iter().filter(|c| c.0 == k).count());
    let fingerprint = super::fingerprint(&flow, sizes);
    let job = Job {
        values: std::sync::Arc::new(Values {
            tensors: snapshot(&state.values, &flow.read_by_values),
            options: o.clone(),
        }),
        plan: flow.clone(),
    };
    Ok(Prepared {
        flow,
        state,
        job,
        initial,
        fingerprint,
    })
}

impl Incremental {
    /// Evaluates the program with the dataflow on `cluster` (this being its process 0, or
    /// its only process), whose workers then stay up for updates. Every other process of the
    /// cluster runs [`Incremental::serve`].
    pub fn start(
        p: &Checked,
        plan: &Plan,
        o: &EvalOptions,
        cluster: &Cluster,
    ) -> Result<Incremental, Diagnostics> {
        let Prepared {
            flow,
            mut state,
            job,
            initial,
            fingerprint,
        } = prepare(p, plan, o)?;
        let mut given: BTreeMap<TensorId, BTreeSet<Vec<u32>>> = flow
            .inputs
            .iter()
            .filter(|&&t| flow.outputs().any(|u| u == t))
            .map(|&t| (t, BTreeSet::new()))
            .collect();
        for (k, row, _) in &initial {
            if let Some(facts) = given.get_mut(&flow.inputs[*k]) {
                facts.insert(row.to_vec());
            }
        }
        // Rounds end on Ctrl-C; a `--timeout` bounds the first evaluation only.
        let stop = Stop::new(None, o.stop.flag.clone());
        let mut live = Live::start(job, initial, (cluster, fingerprint), stop)
            .map_err(|e| super::failed(&e))?;
        let (changes, late) = live
            .round(Vec::new())
            .map_err(|f| failure(p, &flow, o, f))?;
        // A `min=`/`max=` element's value found early and retracted later nets out here.
        let (changes, late) = (super::consolidated(changes), super::consolidated(late));
        for fs in &flow.strata {
            state.fill_pending(&fs.tensors);
            for &t in &fs.tensors {
                let rows = changes.iter().filter(|(u, _, d)| *u == t && *d > 0);
                state.values[t] = tensor_of(p, plan, (fs, t), rows.map(|(_, r, _)| r.as_slice()));
            }
            state.log(fs.stratum, Ran::Differential, None);
        }
        let late_tensors = late.iter().map(|(t, _, _)| *t);
        if let Some(d) = trouble(p, (&flow, o), late_tensors, &state.values) {
            return Err(d.into());
        }
        let mut inc = Incremental {
            live,
            flow,
            values: Vec::new(),
            log: Vec::new(),
            given,
            late: BTreeMap::new(),
            last_good: None,
        };
        inc.run_placed(p, &mut state, &|x| matches!(x, Placement::After(_)))?;
        let done = state.finish();
        inc.values = done.values;
        inc.log = done.log;
        Ok(inc)
    }

    /// Takes part in the incremental run that process 0 of `cluster` drives, as process
    /// `cluster.processes.index`: builds the same dataflow from the same program and files,
    /// and serves it until process 0 ends the run. Returns what process 0 announced before
    /// ending it ([`Incremental::announce`]): then every process starts again.
    pub fn serve(
        p: &Checked,
        plan: &Plan,
        o: &EvalOptions,
        cluster: &Cluster,
    ) -> Result<Option<Vec<Vec<u32>>>, Diagnostics> {
        let Prepared {
            flow,
            job,
            initial,
            fingerprint,
            ..
        } = prepare(p, plan, o)?;
        let stop = Stop::new(None, o.stop.flag.clone());
        live::serve(job, initial, (cluster, fingerprint), stop).map_err(|f| failure(p, &flow, o, f))
    }

    /// Sends `message` (rows of words) to every other process of the run, whose
    /// [`Incremental::serve`] returns it when this run ends: how process 0 has them start
    /// again with the facts of a commit that needs a fresh evaluation.
    pub fn announce(
        &mut self,
        p: &Checked,
        o: &EvalOptions,
        message: Vec<Vec<u32>>,
    ) -> Result<(), Diagnostics> {
        self.live
            .announce(message)
            .map_err(|f| failure(p, &self.flow, o, f))
    }

    /// Every tensor's current value.
    pub fn values(&self) -> &[Tensor] {
        &self.values
    }

    /// Which kernel evaluated each stratum.
    pub fn log(&self) -> &[Decision] {
        &self.log
    }

    /// Whether `t` can change by [`Incremental::update`]: a relation of facts (or a file)
    /// that no rule defines, or that the dataflow defines (its facts are an input of it); and
    /// that no value check reads, directly or through the strata run before the dataflow
    /// (what value checks read is fixed when the dataflow is built).
    pub fn updatable(&self, p: &Checked, t: TensorId) -> bool {
        let defined = p
            .strata
            .iter()
            .any(|s| s.tensors.contains(&t) && !s.equations.is_empty());
        if defined && !self.given.contains_key(&t) {
            return false;
        }
        let mut affected = vec![t];
        for (i, s) in p.strata.iter().enumerate() {
            if self.flow.placement[i] == Placement::Before && reads_any(p, s, &affected) {
                affected.extend(&s.tensors);
            }
        }
        !affected
            .iter()
            .any(|u| self.flow.read_by_values.contains(u))
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
        // A commit may fail (a `min=`/`max=` fixpoint that does not settle) after the
        // dataflow took it: the values then follow the dataflow, and the next commit that
        // succeeds reports its changes from these.
        let kept = match self.may_fail() && self.last_good.is_none() {
            true => Some(self.derived_values(p)),
            false => None,
        };
        let (mut inputs, facts) = self.take_facts(p, net_changes(p, changes));
        let mut deltas = self.rerun_before(p, (plan, o), &facts, &mut inputs)?;
        self.take_dataflow(p, o, inputs, &mut deltas)?;
        self.rerun_after(p, (plan, o), &mut deltas)?;
        let late = self.late.keys().map(|(t, _)| *t);
        if let Some(d) = trouble(p, (&self.flow, o), late, &self.values) {
            if let Some(kept) = kept {
                self.last_good = Some(kept);
            }
            return Err(d.into());
        }
        if let Some(good) = self.last_good.take() {
            deltas = self
                .derived(p)
                .map(|t| (t, difference(&good[t], &self.values[t])))
                .filter(|(_, d)| !d.added.is_empty() || !d.removed.is_empty())
                .collect();
        }
        for d in deltas.values_mut() {
            d.added.sort_unstable();
            d.removed.sort_unstable();
        }
        Ok(deltas)
    }

    /// Applies the net changes to the facts they change (the given tuples, or the tensors'
    /// values) and returns what the dataflow's inputs receive and each tensor's change of
    /// facts. A tuple that already holds, or an element set to the value it has, is no
    /// change.
    fn take_facts(
        &mut self,
        p: &Checked,
        net: NetChanges,
    ) -> (Vec<Input>, BTreeMap<TensorId, Delta>) {
        let mut inputs = Vec::new();
        let mut facts: BTreeMap<TensorId, Delta> = BTreeMap::new();
        for ((t, row), (d, value)) in net {
            let input = self.flow.inputs.iter().position(|&u| u == t);
            if p.tensors[t].kind != Kind::Bool {
                let old = self.element(t, &row);
                let new = value.filter(|_| d > 0);
                if old.map(f64::to_bits) == new.map(f64::to_bits) {
                    continue;
                }
                let delta = facts.entry(t).or_default();
                for (v, sign) in [(old, -1), (new, 1)] {
                    let Some(v) = v else { continue };
                    let r = with_value(&row, v);
                    inputs.extend(input.map(|k| (k, Row::from_slice(&r), sign)));
                    match sign > 0 {
                        true => delta.added.push(r),
                        false => delta.removed.push(r),
                    }
                }
                continue;
            }
            let holds = match (self.given.get(&t), &self.values[t].storage) {
                (Some(given), _) => given.contains(&row),
                (None, Storage::Relation(r)) => r.contains(&row),
                _ => false,
            };
            // A relation only strata after the dataflow read changes outside it.
            match (d > 0, holds) {
                (true, false) => {
                    inputs.extend(input.map(|k| (k, Row::from_slice(&row), 1)));
                    facts.entry(t).or_default().added.push(row);
                }
                (false, true) if d < 0 => {
                    inputs.extend(input.map(|k| (k, Row::from_slice(&row), -1)));
                    facts.entry(t).or_default().removed.push(row);
                }
                _ => {}
            }
        }
        for (&t, delta) in &facts {
            match self.given.get_mut(&t) {
                // The dataflow's changes to the relation carry these facts' effect.
                Some(given) => {
                    given.extend(delta.added.iter().cloned());
                    delta.removed.iter().for_each(|r| {
                        given.remove(r);
                    });
                }
                None if p.tensors[t].kind != Kind::Bool => {
                    self.values[t] = revalued(&self.values[t], delta)
                }
                None => self.values[t] = patched(&self.values[t], delta),
            }
        }
        (inputs, facts)
    }

    /// Runs again the strata before the dataflow that read changed facts; what changes in
    /// the relations they give the dataflow joins `inputs`. Returns their tensors' changes.
    fn rerun_before(
        &mut self,
        p: &Checked,
        (plan, o): (&Plan, &EvalOptions),
        facts: &BTreeMap<TensorId, Delta>,
        inputs: &mut Vec<Input>,
    ) -> Result<BTreeMap<TensorId, Delta>, Diagnostics> {
        let mut deltas: BTreeMap<TensorId, Delta> = BTreeMap::new();
        let changed: Vec<TensorId> = facts.keys().copied().collect();
        let before = |i: usize| self.flow.placement[i] == Placement::Before;
        let rerun = p
            .strata
            .iter()
            .enumerate()
            .any(|(i, s)| before(i) && reads_any(p, s, &changed));
        if !rerun {
            return Ok(deltas);
        }
        let old = self.rerun(p, plan, o, &|x: &Placement| *x == Placement::Before)?;
        for (i, st) in p.strata.iter().enumerate() {
            if self.flow.placement[i] != Placement::Before || st.equations.is_empty() {
                continue;
            }
            for &t in &st.tensors {
                if let Some(k) = self.flow.inputs.iter().position(|&u| u == t) {
                    let valued = self.flow.valued.contains(&t);
                    let (added, removed) = row_changes(&old[t], &self.values[t], valued);
                    inputs.extend(added.into_iter().map(|r| (k, r, 1)));
                    inputs.extend(removed.into_iter().map(|r| (k, r, -1)));
                }
                let d = difference(&old[t], &self.values[t]);
                if !d.added.is_empty() || !d.removed.is_empty() {
                    deltas.insert(t, d);
                }
            }
        }
        Ok(deltas)
    }

    /// Runs the dataflow's round on `inputs` and applies what it derives to the tensors of
    /// its strata, adding their changes to `deltas`.
    fn take_dataflow(
        &mut self,
        p: &Checked,
        o: &EvalOptions,
        inputs: Vec<Input>,
        deltas: &mut BTreeMap<TensorId, Delta>,
    ) -> Result<(), Diagnostics> {
        let (out, late) = self
            .live
            .round(inputs)
            .map_err(|f| failure(p, &self.flow, o, f))?;
        for (t, row, d) in super::consolidated(late) {
            *self.late.entry((t, row)).or_default() += d;
        }
        self.late.retain(|_, d| *d != 0);
        // Leaving a fixpoint scope keeps a tuple derived at another iteration than before
        // as a retraction and an addition: they net out here.
        for (t, row, d) in super::consolidated(out) {
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
                match fs.heads {
                    Heads::Count => {
                        let (value, changed) = recounted(p, &self.values[t], t, delta);
                        self.values[t] = value;
                        deltas.insert(t, changed);
                    }
                    Heads::Distinct => self.values[t] = patched(&self.values[t], delta),
                    Heads::Extreme(_) => self.values[t] = revalued(&self.values[t], delta),
                }
            }
        }
        Ok(())
    }

    /// Runs again the strata after the dataflow, adding their tensors' changes to `deltas`.
    fn rerun_after(
        &mut self,
        p: &Checked,
        (plan, o): (&Plan, &EvalOptions),
        deltas: &mut BTreeMap<TensorId, Delta>,
    ) -> Result<(), Diagnostics> {
        let after = |x: &Placement| matches!(x, Placement::After(_));
        if !self.flow.placement.iter().any(after) {
            return Ok(());
        }
        let before = self.rerun(p, plan, o, &after)?;
        for (i, st) in p.strata.iter().enumerate() {
            if after(&self.flow.placement[i]) {
                for &t in &st.tensors {
                    let d = difference(&before[t], &self.values[t]);
                    if !d.added.is_empty() || !d.removed.is_empty() {
                        deltas.insert(t, d);
                    }
                }
            }
        }
        Ok(())
    }

    /// The value of element `pos` of tensor `t` with values, among its facts (if the
    /// dataflow defines it) or in its value.
    fn element(&self, t: TensorId, pos: &[u32]) -> Option<f64> {
        if let Some(given) = self.given.get(&t) {
            let row = given.range(pos.to_vec()..).next()?;
            return (row.get(..pos.len()) == Some(pos)).then(|| Delta::value(row).1);
        }
        let idx: Vec<usize> = pos.iter().map(|&i| i as usize).collect();
        self.values[t].get(&idx)
    }

    /// Whether a commit can fail after the dataflow took it: a `min=`/`max=` fixpoint in
    /// the dataflow may not settle.
    fn may_fail(&self) -> bool {
        let extreme = |fs: &crate::plan::dataflow::FlowStratum| {
            fs.recursive && matches!(fs.heads, Heads::Extreme(_))
        };
        self.flow.strata.iter().any(extreme)
    }

    /// The values of the tensors rules define (the others empty): what a failed commit
    /// keeps to report the next one's changes from.
    fn derived_values(&self, p: &Checked) -> Vec<Tensor> {
        let derived: Vec<TensorId> = self.derived(p).collect();
        snapshot(&self.values, &derived)
    }

    /// The tensors that rules (or equations) define.
    fn derived<'a>(&self, p: &'a Checked) -> impl Iterator<Item = TensorId> + 'a {
        p.strata
            .iter()
            .filter(|st| !st.equations.is_empty())
            .flat_map(|st| st.tensors.iter().copied())
    }

    /// Evaluates again the strata with equations placed where `which` says, on the current
    /// values of every other tensor; returns the values before.
    fn rerun(
        &mut self,
        p: &Checked,
        plan: &Plan,
        o: &EvalOptions,
        which: &dyn Fn(&Placement) -> bool,
    ) -> Result<Vec<Tensor>, Diagnostics> {
        let old = self.values.clone();
        let mut state = State::new(p, plan, o)?;
        let again: Vec<TensorId> = p
            .strata
            .iter()
            .enumerate()
            .filter(|(i, st)| which(&self.flow.placement[*i]) && !st.equations.is_empty())
            .flat_map(|(_, st)| st.tensors.iter().copied())
            .collect();
        for (t, v) in self.values.iter().enumerate() {
            if !again.contains(&t) {
                state.set(t, v.clone());
            }
        }
        self.run_placed(p, &mut state, which)?;
        self.values = state.finish().values;
        Ok(old)
    }

    /// Runs the strata with equations placed where `which` says, logging why each that runs
    /// after the dataflow is there.
    fn run_placed(
        &self,
        p: &Checked,
        state: &mut State,
        which: &dyn Fn(&Placement) -> bool,
    ) -> Result<(), Diagnostics> {
        for (i, st) in p.strata.iter().enumerate() {
            let place = &self.flow.placement[i];
            if which(place) && !st.equations.is_empty() {
                state.stratum(i, st)?;
                if let (Placement::After(why), Some(d)) = (place, state.last_decision()) {
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

/// Whether stratum `s` reads any of `tensors`.
fn reads_any(p: &Checked, s: &crate::semantics::Stratum, tensors: &[TensorId]) -> bool {
    s.equations.iter().any(|&e| {
        let mut reads = false;
        p.equations[e]
            .rhs
            .reads(&mut |u, _| reads |= tensors.contains(&u));
        reads
    })
}

/// The dataflow rows of `new` not in `old`, and the reverse.
fn row_changes(old: &Tensor, new: &Tensor, valued: bool) -> (Vec<Row>, Vec<Row>) {
    let a: BTreeSet<Row> = super::rows(old, valued).collect();
    let b: BTreeSet<Row> = super::rows(new, valued).collect();
    (
        b.difference(&a).cloned().collect(),
        a.difference(&b).cloned().collect(),
    )
}
