//! The differential engine: a program's Datalog strata as one timely + differential-dataflow
//! computation ([`crate::plan::dataflow`] lowers them), on `workers` threads of this process
//! or of several processes, with every other stratum on the standard engine before or after
//! it. Its answers equal the standard engine's for any worker or process count: relations
//! are sets, gathered at worker 0 and sorted.

mod hosts;
mod incremental;
mod live;
mod network;
mod quiet;
mod render;

pub use hosts::parse_hosts;
pub use incremental::Incremental;

use super::delta::Delta;
use super::standard::State;
use super::{Engine, EvalOptions, Evaluation, Ran};
use crate::diagnostics::{codes, Diagnostic, Diagnostics, Span};
use crate::plan::dataflow::{plan_dataflow, DataflowPlan, Heads, Placement};
use crate::plan::Plan;
use crate::semantics::{Checked, TensorId};
use crate::tensor::{Sparse, Storage, Tensor};
use std::sync::Arc;

/// A tuple in the dataflow: its positions, inline up to four (no allocation per tuple for
/// the relations most programs have).
type Row = smallvec::SmallVec<[u32; 4]>;

/// Where the dataflow's workers run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// Worker threads in each process.
    pub workers: usize,
    /// The processes, when more than this one take part.
    pub processes: Option<Processes>,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            workers: 1,
            processes: None,
        }
    }
}

/// The processes of a run over several machines (or several processes of one): each runs
/// the same program with the same inputs and `workers` threads, and process 0 gathers the
/// answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Processes {
    /// This process's index into `hosts`.
    pub index: usize,
    /// `host:port` of every process, in index order.
    pub hosts: Vec<String>,
}

impl Cluster {
    /// Whether this process gathers the answers (process 0, or the only one).
    pub fn gathers(&self) -> bool {
        self.processes.as_ref().is_none_or(|p| p.index == 0)
    }

    /// The workers' communication: threads of this process, or sockets to the other
    /// processes, connected (and checked against `me`) within `within`.
    fn allocators(
        &self,
        fingerprint: u64,
        within: std::time::Duration,
    ) -> Result<Allocators, String> {
        use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
        use timely::communication::allocator::{AllocatorBuilder, ProcessBuilder};
        use timely::communication::{Config, Hooks};
        let threads = self.workers.max(1);
        let Some(p) = self.processes.as_ref().filter(|p| p.hosts.len() > 1) else {
            let config = match threads {
                1 => Config::Thread,
                n => Config::Process(n),
            };
            return config.try_build();
        };
        let me = network::Handshake {
            index: p.index as u64,
            workers: threads as u64,
            fingerprint,
        };
        let sockets = network::connect(p, me, within)?;
        let hooks = Hooks::default();
        let local =
            ProcessBuilder::new_typed_vector(threads, hooks.refill.clone(), hooks.spill.clone());
        let (builders, guard) =
            initialize_networking_from_sockets(local, sockets, p.index, threads, hooks)
                .map_err(|e| format!("the connections to the other processes failed: {e}"))?;
        let builders = builders.into_iter().map(AllocatorBuilder::Tcp).collect();
        Ok((builders, Box::new(guard)))
    }
}

/// What timely's workers are built from, and what keeps the network threads alive.
type Allocators = (
    Vec<timely::communication::allocator::AllocatorBuilder>,
    Box<dyn std::any::Any + Send>,
);

/// How long the processes of a run wait for each other to connect.
const CONNECT_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// The engine that runs Datalog strata as a differential dataflow.
#[derive(Clone, Debug, Default)]
pub struct Differential {
    /// Where its workers run.
    pub cluster: Cluster,
}

/// What the rules' value checks read, shared by every worker.
struct Values {
    tensors: Vec<Tensor>,
    options: EvalOptions,
}

/// What every worker builds its dataflow from.
struct Job {
    plan: DataflowPlan,
    values: Arc<Values>,
}

impl Engine for Differential {
    fn name(&self) -> &'static str {
        "differential"
    }

    fn run(&self, p: &Checked, plan: &Plan, o: &EvalOptions) -> Result<Evaluation, Diagnostics> {
        let flow = plan_dataflow(p, plan);
        let mut state = State::new(p, plan, o)?;
        for (i, st) in p.strata.iter().enumerate() {
            if flow.placement[i] == Placement::Before {
                state.stratum(i, st)?;
            }
        }
        let inputs: Vec<Tensor> = flow
            .inputs
            .iter()
            .map(|&t| input(p, &flow, &state.values, t))
            .collect();
        let job = Job {
            values: Arc::new(Values {
                tensors: snapshot(&state.values, &flow.read_by_values),
                options: o.clone(),
            }),
            plan: flow,
        };
        let flow = job.plan.clone();
        // A stop names the first equation of the dataflow.
        let span = flow
            .strata
            .first()
            .and_then(|fs| fs.rules.first())
            .map_or(Span::new(0, 0), |r| p.equations[r.rule.equation].span);
        let (changes, unsettled) = run_once(job, inputs, (&self.cluster, o), span)?;
        for fs in &flow.strata {
            state.fill_pending(&fs.tensors);
            for &t in &fs.tensors {
                let rows = changes.iter().filter(|(u, _, d)| *u == t && *d > 0);
                state.values[t] = tensor_of(p, plan, (fs, t), rows.map(|(_, r, _)| r.as_slice()));
            }
            state.log(fs.stratum, Ran::Differential, None);
        }
        let late = unsettled.iter().map(|(t, _, _)| *t);
        if let Some(d) = trouble(p, (&flow, o), late, &state.values) {
            return Err(d.into());
        }
        for (i, st) in p.strata.iter().enumerate() {
            if let Placement::After(why) = &flow.placement[i] {
                state.stratum(i, st)?;
                if let Some(d) = state.last_decision() {
                    d.reason = d.reason.take().or(Some(why.clone()));
                }
            }
        }
        Ok(state.finish())
    }
}

/// Tensor `t` of flow stratum `fs` from the rows the dataflow gives it.
fn tensor_of<'a>(
    p: &Checked,
    plan: &Plan,
    (fs, t): (&crate::plan::dataflow::FlowStratum, TensorId),
    rows: impl Iterator<Item = &'a [u32]>,
) -> Tensor {
    match fs.heads {
        Heads::Count => counts(p, t, plan.sparse[t], rows),
        Heads::Distinct => relation(p, t, rows),
        Heads::Extreme(_) => extremes(p, t, rows),
    }
}

/// E0401 where a `min=`/`max=` fixpoint of the dataflow has no answer: it still changed
/// after `--max-iters` iterations (`late` names the tensors that did), or an element is not
/// a finite number (the recursion grew without bound).
fn trouble(
    p: &Checked,
    (flow, o): (&DataflowPlan, &EvalOptions),
    mut late: impl Iterator<Item = TensorId>,
    values: &[Tensor],
) -> Option<Diagnostic> {
    let stratum = |t: TensorId| {
        let fs = flow.strata.iter().find(|fs| fs.tensors.contains(&t))?;
        p.strata.get(fs.stratum)
    };
    if let Some(st) = late.next().and_then(stratum) {
        return Some(
            super::fixpoint::recursion_unsettled(p, st, o.max_iters)
                .with_note("the dataflow still found better values at the last iteration allowed")
                .with_note("raise --max-iters, or check that the recursion has no cycle that keeps improving (a negative cycle under `min=`, a positive one under `max=`)"),
        );
    }
    let extremes = flow
        .strata
        .iter()
        .filter(|fs| matches!(fs.heads, Heads::Extreme(_)));
    for &t in extremes.flat_map(|fs| &fs.tensors) {
        let Storage::Sparse(m) = &values[t].storage else {
            continue;
        };
        if let Some((_, bad)) = m.iter().find(|(_, v)| !v.is_finite()) {
            if values[t].elem == crate::tensor::ElemType::Int {
                return Some(inexact(&p.tensors[t]));
            }
            return Some(super::fixpoint::diverged(p, stratum(t)?, t, bad));
        }
    }
    None
}

/// E0407 for an `int` `min=`/`max=` tensor whose candidates f64 may not have held exactly.
fn inexact(info: &crate::semantics::TensorInfo) -> Diagnostic {
    Diagnostic::error(
        codes::INEXACT_INTEGER,
        info.span,
        format!(
            "an element of `{}` reached an integer past 2⁵³, which the dataflow's f64 values do not hold exactly",
            info.name
        ),
    )
    .with_label("an integer tensor")
    .with_note("the differential engine computes `min=`/`max=` in f64; the standard engine computes this tensor exactly (--engine standard)")
}

/// What input `t` of the dataflow starts with: the facts of a relation it defines, the value
/// of one it reads.
fn input(p: &Checked, flow: &DataflowPlan, values: &[Tensor], t: TensorId) -> Tensor {
    match (flow.outputs().any(|u| u == t), &p.data[t]) {
        (false, _) => values[t].clone(),
        (true, Some(facts)) => facts.clone(),
        (true, None) => Tensor::relation(p.tensors[t].shape.clone(), std::iter::empty()),
    }
}

/// The values of tensors `read` (those the dataflow's value checks read, say); the others
/// left empty.
fn snapshot(values: &[Tensor], read: &[TensorId]) -> Vec<Tensor> {
    values
        .iter()
        .enumerate()
        .map(|(t, v)| match read.contains(&t) {
            true => v.clone(),
            false => Tensor::relation(Vec::new(), std::iter::empty()),
        })
        .collect()
}

/// Results of a dataflow: changes per tensor, and those a `min=`/`max=` fixpoint made past
/// `--max-iters` (nothing for one that settled).
type Changes = (Vec<(TensorId, Row, isize)>, Vec<(TensorId, Row, isize)>);

/// Runs the dataflow over `inputs` once, on the cluster's workers, and returns every result
/// tuple (at process 0; nothing elsewhere).
fn run_once(
    job: Job,
    inputs: Vec<Tensor>,
    (cluster, o): (&Cluster, &EvalOptions),
    span: Span,
) -> Result<Changes, Diagnostics> {
    let valued: Vec<bool> = job
        .plan
        .inputs
        .iter()
        .map(|t| job.plan.valued.contains(t))
        .collect();
    let sizes = inputs.iter().zip(&valued).map(|(t, &v)| rows(t, v).count());
    let fingerprint = fingerprint(&job.plan, sizes);
    let job = Arc::new(job);
    let inputs = Arc::new(inputs);
    let stop = o.stop.clone();
    let (builders, others) = cluster
        .allocators(fingerprint, CONNECT_WITHIN)
        .map_err(|e| failed(&e))?;
    let work = move |worker: &mut timely::worker::Worker| {
        let mut r = render::render(worker, &job);
        let (index, peers) = (worker.index(), worker.peers());
        for ((input, t), &v) in r.inputs.iter_mut().zip(inputs.iter()).zip(&valued) {
            for (i, row) in rows(t, v).enumerate() {
                if i % peers == index {
                    input.insert(row);
                }
            }
            input.advance_to(1);
            input.flush();
        }
        r.notice.advance_to(1);
        r.notice.flush();
        while r.probe.less_than(&1) {
            worker.step();
            if stop.requested() {
                return Err(());
            }
        }
        Ok((r.captured.take(), r.unsettled.take()))
    };
    let config = timely::WorkerConfig::default();
    // A peer process that ends mid-run makes timely's network threads and workers panic;
    // that becomes E0404 here, its message kept from standard error.
    let results = quiet::catching(move || {
        let guards = timely::execute::execute_from(builders, others, config, work)?;
        Ok(guards.join())
    })
    .map_err(|e| failed(&e))?;
    let (mut all, mut late) = (Vec::new(), Vec::new());
    for result in results {
        match result {
            Ok(Ok((changes, unsettled))) => {
                all.extend(changes);
                late.extend(unsettled);
            }
            Ok(Err(())) => return Err(Diagnostics(vec![o.stop.error(span)])),
            Err(e) => return Err(failed(&format!("a worker failed: {e}"))),
        }
    }
    Ok((consolidated(all), consolidated(late)))
}

/// Changes with each tuple's netted: the same tuple may be added and retracted within a
/// round (an iteration deriving it through a tuple later found not to hold).
fn consolidated(changes: Vec<(TensorId, Row, isize)>) -> Vec<(TensorId, Row, isize)> {
    let mut all: Vec<((TensorId, Row), isize)> =
        changes.into_iter().map(|(t, r, d)| ((t, r), d)).collect();
    differential_dataflow::consolidation::consolidate(&mut all);
    all.into_iter().map(|((t, r), d)| (t, r, d)).collect()
}

/// A hash of the dataflow and of its inputs' sizes (tuples per input), which every process
/// of a run must share.
fn fingerprint(plan: &DataflowPlan, sizes: impl Iterator<Item = usize>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    format!("{plan:?}").hash(&mut h);
    for n in sizes {
        n.hash(&mut h);
    }
    h.finish()
}

/// E0404 with `message`.
fn failed(message: &str) -> Diagnostics {
    Diagnostics(vec![Diagnostic::global(
        codes::DATAFLOW,
        format!("the differential dataflow failed: {message}"),
    )])
}

/// The rows of a tensor as the dataflow holds it: a relation's tuples, or (`valued`) every
/// defined element's positions and value (1 for a relation's tuple) as two more words.
pub(super) fn rows(t: &Tensor, valued: bool) -> Box<dyn Iterator<Item = Row> + '_> {
    if valued {
        let elements: Box<dyn Iterator<Item = (Row, f64)> + '_> = match &t.storage {
            Storage::Relation(r) => Box::new(r.iter().map(|k| (Row::from_slice(k), 1.0))),
            Storage::Sparse(m) => Box::new(m.iter().map(|(k, v)| (Row::from_slice(k), v))),
            Storage::Dense(_) => Box::new(
                t.entries()
                    .into_iter()
                    .map(|(idx, v)| (idx.into_iter().map(|i| i as u32).collect(), v)),
            ),
        };
        return Box::new(elements.map(|(mut row, v)| {
            row.extend(Delta::words(v));
            row
        }));
    }
    match &t.storage {
        Storage::Relation(r) => Box::new(r.iter().map(Row::from_slice)),
        _ => Box::new(
            t.entries()
                .into_iter()
                .filter(|(_, v)| *v != 0.0)
                .map(|(idx, _)| idx.into_iter().map(|i| i as u32).collect()),
        ),
    }
}

/// Relation `t` holding `rows`.
fn relation<'a>(p: &Checked, t: TensorId, rows: impl Iterator<Item = &'a [u32]>) -> Tensor {
    let shape = p.tensors[t].shape.clone();
    let (mut flat, mut count) = (Vec::new(), 0);
    for r in rows {
        flat.extend_from_slice(r);
        count += 1;
    }
    Tensor::relation_flat(shape, flat, count)
}

/// `min=`/`max=` tensor `t` from its elements' rows (positions, then the value's words).
fn extremes<'a>(p: &Checked, t: TensorId, rows: impl Iterator<Item = &'a [u32]>) -> Tensor {
    let info = &p.tensors[t];
    let arity = info.shape.len();
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    for r in rows {
        let (idx, v) = Delta::value(r);
        keys.extend_from_slice(idx);
        values.push(v);
    }
    let elements = Sparse::from_entries(arity, keys, values);
    if elements.values().iter().any(|v| v.is_infinite()) {
        // Kept as they came, for `trouble` to find (an `int` one is E0407 there).
        return Tensor {
            elem: info.elem,
            shape: info.shape.clone(),
            storage: Storage::Sparse(elements),
        };
    }
    Tensor::of_sparse(info.elem, info.shape.clone(), elements)
}

/// Count tensor `t`: its facts plus each head's count (the last two positions of a row).
fn counts<'a>(
    p: &Checked,
    t: TensorId,
    sparse: bool,
    rows: impl Iterator<Item = &'a [u32]>,
) -> Tensor {
    use super::accumulate::Accumulator;
    let info = &p.tensors[t];
    let mut acc = match sparse {
        true => Accumulator::entries(info),
        false => Accumulator::new(info),
    };
    if let Some(d) = &p.data[t] {
        acc.combine_tensor(d);
    }
    for r in rows {
        let k = r.len().saturating_sub(2);
        let n = (u64::from(r[k]) << 32) | u64::from(r[k + 1]);
        let idx: Vec<usize> = r[..k].iter().map(|&i| i as usize).collect();
        acc.combine(&idx, n as f64);
    }
    acc.finish(info)
}
