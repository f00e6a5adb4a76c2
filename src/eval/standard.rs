//! The standard engine: executes a [`Plan`] stratum by stratum, each on the kernel the plan
//! chose, and logs which kernel ran. A kernel that declines at run time (its inputs are not
//! as planned: a tensor stored sparse that the plan expected dense, intermediates over
//! `--max-memory`, a recursion the dense iteration cannot settle) hands the stratum to its
//! loop nests, which evaluate any equation; only a stratum without loop nests (a virtual
//! index) runs the reference loops, and the log says why.

use super::dense::StepTerms;
use super::{dense, initial, nest, reference, relational};
use super::{Decision, Declined, Engine, EvalOptions, Evaluation, KeptTerms, Ran, Record};
use crate::diagnostics::Diagnostics;
use crate::plan::{Kernel, Plan, StratumPlan};
use crate::semantics::{Checked, Query, Stratum, TensorId};
use crate::tensor::{Dense, ElemType, Sparse, Storage, Tensor};

/// The default engine: each stratum on the kernel its plan names — semi-naive joins for
/// Datalog, counting joins, `min=`/`max=` path joins, dense contractions, loop nests.
#[derive(Clone, Copy, Debug, Default)]
pub struct Standard;

impl Engine for Standard {
    fn name(&self) -> &'static str {
        "standard"
    }

    fn run(&self, p: &Checked, plan: &Plan, o: &EvalOptions) -> Result<Evaluation, Diagnostics> {
        let mut state = State::new(p, plan, o)?;
        for (i, st) in p.strata.iter().enumerate() {
            state.stratum(i, st)?;
        }
        Ok(state.finish())
    }

    /// Chains backward: only the strata the query reads, and for a query that binds a
    /// position of a relation evaluated by joins, the magic-sets rewrite (`plan::demand`).
    fn evaluate_for(
        &self,
        p: &Checked,
        o: &EvalOptions,
        q: &Query,
    ) -> Result<Vec<Tensor>, Diagnostics> {
        use crate::plan::demand::{closure, plan_demand};
        let plan = crate::plan::plan(p);
        let mut state = State::new(p, &plan, o)?;
        let mut done = vec![false; p.strata.len()];
        let run_for = |state: &mut State, done: &mut [bool], needed: &[usize]| {
            let needed: std::collections::BTreeSet<usize> = needed.iter().copied().collect();
            for (i, st) in p.strata.iter().enumerate() {
                if !done[i] && st.tensors.iter().any(|t| needed.contains(t)) {
                    state.stratum(i, st)?;
                    done[i] = true;
                }
            }
            Ok::<(), Diagnostics>(())
        };
        if let Some(demand) = plan_demand(p, q) {
            let full: Vec<usize> = closure(p, demand.full.iter().copied())
                .into_iter()
                .collect();
            run_for(&mut state, &mut done, &full)?;
            // Relations read only under `not` with constants: their own demand first.
            for sub in &demand.negated {
                let values = self.evaluate_for(p, o, sub)?;
                if let Some(v) = values.into_iter().nth(sub.tensor) {
                    state.values[sub.tensor] = v;
                }
            }
            let pool = state.pool.clone();
            if relational::evaluate_demand(
                p,
                &demand,
                q.tensor,
                &mut state.values,
                o,
                pool.as_deref(),
            ) {
                return Ok(state.finish().values);
            }
        }
        let needed: Vec<usize> = closure(p, [q.tensor]).into_iter().collect();
        run_for(&mut state, &mut done, &needed)?;
        Ok(state.finish().values)
    }
}

/// What a stratum's evaluation kept for the backward pass (§12).
#[derive(Clone, Debug)]
pub enum StratumRecord {
    /// The reference loops' fixpoint iterates and virtual slices.
    Reference(Record),
    /// The terms a dense stratum computed, per equation.
    Dense(KeptTerms),
    /// The terms an index-order stratum's dense plans computed, per step and equation.
    Steps(StepTerms),
}

/// Evaluates the strata marked in `needed` like [`Standard`], except that those marked in
/// `record` run the reference loops and keep what backpropagation through them needs (their
/// fixpoint iterates and virtual slices, §12), and dense strata keep the terms they computed,
/// so the backward pass need not compute them again.
pub fn evaluate_recorded(
    p: &Checked,
    plan: &Plan,
    o: &EvalOptions,
    needed: &[bool],
    record: &[bool],
) -> Result<(Vec<Tensor>, Vec<Option<StratumRecord>>), Diagnostics> {
    let mut state = State::new(p, plan, o)?;
    let mut records = Vec::with_capacity(p.strata.len());
    for (i, st) in p.strata.iter().enumerate() {
        let recorded = record.get(i).copied().unwrap_or(false);
        if !needed.get(i).copied().unwrap_or(true) {
            state.fill_pending(&st.tensors);
            state.log(i, Ran::Skipped, None);
            records.push(None);
        } else if recorded {
            state.fill_pending(&st.tensors);
            let mut r = Record::default();
            reference::evaluate_stratum_recorded(p, st, &mut state.values, o, Some(&mut r))?;
            let why = "recorded by the reference loops for backpropagation";
            state.log(i, Ran::Reference, Some(why.into()));
            records.push(Some(StratumRecord::Reference(r)));
        } else if let Kernel::Dense(plans) = &plan.strata[i].kernel {
            let mut terms = KeptTerms::new();
            let pool = state.pool.clone();
            let values = &mut state.values;
            let kept = Some(&mut terms);
            match dense::evaluate_dense(p, st, plans, values, o, pool.as_deref(), kept) {
                Ok(()) => {
                    st.tensors.iter().for_each(|&t| state.pending[t] = false);
                    state.log(i, Ran::Dense, None);
                    records.push(Some(StratumRecord::Dense(terms)));
                }
                Err(why) => {
                    state.fallback(i, st, Some(why))?;
                    records.push(None);
                }
            }
        } else if let Kernel::Steps(steps) = &plan.strata[i].kernel {
            state.fill_pending(&st.tensors);
            let mut terms = StepTerms::new();
            let pool = state.pool.clone();
            let at = (o, pool.as_deref());
            super::steps::evaluate(p, st, steps, &mut state.values, at, Some(&mut terms))?;
            state.log(i, Ran::Steps, None);
            records.push(Some(StratumRecord::Steps(terms)));
        } else {
            state.stratum(i, st)?;
            records.push(None);
        }
    }
    Ok((state.finish().values, records))
}

/// Bytes the largest dense equation of the plan allocates while it runs (its intermediates
/// and grid, `DenseEquation::scratch`, 8 bytes each): alive beside every tensor (§15).
/// E0601 when the plan's dense tensors and scratch, with `training` bytes held beside them
/// (a training step's gradients, adjoints and optimizer state), need more than the budget.
pub(crate) fn fits_budget(
    p: &Checked,
    plan: &Plan,
    training: u128,
    o: &EvalOptions,
) -> Result<(), Diagnostics> {
    let stored_dense = |t: usize| !plan.sparse.get(t).copied().unwrap_or(false);
    let beside = crate::semantics::budget::Beside {
        equation_scratch: equation_scratch(plan),
        training,
    };
    initial::fits_budget(p, &stored_dense, beside, o)
}

fn equation_scratch(plan: &Plan) -> u128 {
    let elements = plan
        .strata
        .iter()
        .filter_map(|sp| match &sp.kernel {
            Kernel::Dense(ds) => Some(ds.iter().map(|d| d.scratch).fold(0.0, f64::max)),
            _ => None,
        })
        .fold(0.0, f64::max);
    (8.0 * elements) as u128
}

/// Evaluates stratum `i` again over `values`, whose other tensors are current: its own
/// tensors start from their data, as in a first evaluation. What incremental maintenance
/// does with a stratum it cannot carry a change through. `values` are left as they were
/// when it fails.
pub(super) fn evaluate_again(
    p: &Checked,
    plan: &Plan,
    o: &EvalOptions,
    i: usize,
    values: &mut Vec<Tensor>,
) -> Result<Decision, Diagnostics> {
    let st = &p.strata[i];
    let mut fresh = Vec::with_capacity(st.tensors.len());
    for &t in &st.tensors {
        fresh.push(match &p.data[t] {
            Some(d) => d.clone(),
            None if plan.sparse[t] => Tensor::of_sparse(
                p.tensors[t].elem,
                p.tensors[t].shape.clone(),
                Sparse::new(p.tensors[t].shape.len()).with_zeros(),
            ),
            None => initial::empty(&p.tensors[t], o)?,
        });
    }
    let mut state = State {
        p,
        plan,
        o,
        values: std::mem::take(values),
        pending: vec![false; p.tensors.len()],
        pool: thread_pool(o),
        log: Vec::with_capacity(1),
    };
    let old: Vec<Tensor> = st
        .tensors
        .iter()
        .zip(fresh)
        .map(|(&t, v)| std::mem::replace(&mut state.values[t], v))
        .collect();
    let done = state.stratum(i, st);
    *values = state.values;
    if let Err(d) = done {
        for (&t, v) in st.tensors.iter().zip(old) {
            values[t] = v;
        }
        return Err(d);
    }
    let mut log = state.log;
    Ok(log.pop().unwrap_or(Decision {
        stratum: i,
        ran: Ran::Skipped,
        reason: None,
    }))
}

/// The values as evaluation proceeds, and the log (also driven stratum by stratum by the
/// differential engine, for the strata outside its dataflow).
pub(super) struct State<'a> {
    p: &'a Checked,
    plan: &'a Plan,
    o: &'a EvalOptions,
    pub(super) values: Vec<Tensor>,
    /// Dense tensors without data whose zeros have not been made: a dense stratum defines
    /// them whole without reading them, so zeros are made only where another kernel needs
    /// them (clearing a large buffer every evaluation costs as much as a layer).
    pending: Vec<bool>,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    log: Vec<Decision>,
}

impl<'a> State<'a> {
    pub(super) fn new(
        p: &'a Checked,
        plan: &'a Plan,
        o: &'a EvalOptions,
    ) -> Result<State<'a>, Diagnostics> {
        super::functions_registered(&plan.user_functions, o)?;
        let pending = pending(p, plan);
        let mut values = Vec::with_capacity(p.tensors.len());
        // Pending tensors share one empty buffer per element type.
        let mut empties: Vec<(crate::tensor::ElemType, Dense)> = Vec::new();
        let mut empty = |elem| match empties.iter().find(|(e, _)| *e == elem) {
            Some((_, d)) => d.clone(),
            None => {
                let d = Dense::zeros(elem, 0);
                empties.push((elem, d.clone()));
                d
            }
        };
        fits_budget(p, plan, 0, o)?;
        for (t, info) in p.tensors.iter().enumerate() {
            values.push(match &p.data[t] {
                Some(d) => d.clone(),
                None if plan.sparse[t] => Tensor::of_sparse(
                    info.elem,
                    info.shape.clone(),
                    Sparse::new(info.shape.len()).with_zeros(),
                ),
                None if pending[t] => {
                    initial::fits_dense(info, o)?;
                    Tensor {
                        elem: info.elem,
                        shape: info.shape.clone(),
                        storage: Storage::Dense(empty(info.elem)),
                    }
                }
                // A dense f32 tensor's zeros (a layer-indexed one's are large) are a pass
                // over memory like any other, split on the pool.
                None if info.elem == ElemType::F32
                    && !initial::is_sparse(info)
                    && dense::split::splits(o.threads, info.shape.iter().product()) =>
                {
                    initial::fits_dense(info, o)?;
                    let n = info.shape.iter().product();
                    Tensor {
                        elem: info.elem,
                        shape: info.shape.clone(),
                        storage: Storage::Dense(Dense::from_f32(dense::split::zeros(n, o.threads))),
                    }
                }
                None => initial::empty(info, o)?,
            });
        }
        Ok(State {
            p,
            plan,
            o,
            values,
            pending,
            pool: thread_pool(o),
            log: Vec::with_capacity(p.strata.len()),
        })
    }

    pub(super) fn log(&mut self, stratum: usize, ran: Ran, reason: Option<String>) {
        self.log.push(Decision {
            stratum,
            ran,
            reason,
        });
    }

    /// The decision logged last.
    pub(super) fn last_decision(&mut self) -> Option<&mut Decision> {
        self.log.last_mut()
    }

    /// Gives tensor `t` a value computed elsewhere (no longer pending).
    pub(super) fn set(&mut self, t: TensorId, value: Tensor) {
        self.values[t] = value;
        if let Some(flag) = self.pending.get_mut(t) {
            *flag = false;
        }
    }

    /// Gives the still pending tensors of `tensors` their zeros.
    pub(super) fn fill_pending(&mut self, tensors: &[usize]) {
        for &t in tensors {
            if let Some(flag @ true) = self.pending.get_mut(t) {
                *flag = false;
                let info = &self.p.tensors[t];
                self.values[t] = Tensor::zeros(info.elem, info.shape.clone());
            }
        }
    }

    /// The values, every pending tensor given its zeros, and the log.
    pub(super) fn finish(mut self) -> Evaluation {
        let all: Vec<usize> = (0..self.p.tensors.len()).collect();
        self.fill_pending(&all);
        Evaluation {
            values: self.values,
            log: self.log,
        }
    }

    /// Evaluates stratum `i` on its planned kernel.
    pub(super) fn stratum(&mut self, i: usize, st: &Stratum) -> Result<(), Diagnostics> {
        let (p, o) = (self.p, self.o);
        super::stop::check(p, st, &o.stop)?;
        let pool = self.pool.clone();
        let pool = pool.as_deref();
        let sp: &StratumPlan = &self.plan.strata[i];
        match &sp.kernel {
            Kernel::Data => {
                self.log(i, Ran::Data, None);
                Ok(())
            }
            Kernel::Dense(plans) => {
                match dense::evaluate_dense(p, st, plans, &mut self.values, o, pool, None) {
                    Ok(()) => {
                        st.tensors.iter().for_each(|&t| self.pending[t] = false);
                        self.log(i, Ran::Dense, None);
                        Ok(())
                    }
                    Err(why) => self.fallback(i, st, Some(why)),
                }
            }
            Kernel::Virtual(plan) => {
                self.fill_pending(&st.tensors);
                if super::steps::evaluate_virtual(p, plan, &mut self.values, o, pool)? {
                    self.log(i, Ran::Steps, None);
                    return Ok(());
                }
                let why = "the virtual index met a case only the loop nests define";
                self.fallback(i, st, Some(Declined::Unsupported(why)))
            }
            Kernel::Steps(plan) => {
                self.fill_pending(&st.tensors);
                super::steps::evaluate(p, st, plan, &mut self.values, (o, pool), None)?;
                self.log(i, Ran::Steps, None);
                Ok(())
            }
            Kernel::Datalog(rules, chains) => {
                self.fill_pending(&st.tensors);
                if let Some((_, demand)) = &self.plan.strata[i].demand {
                    let values = &mut self.values;
                    let t = st.tensors[0];
                    if relational::evaluate_demand(p, demand, t, values, o, pool) {
                        let why = "on demand: only the tuples the program's readers ask for";
                        self.log(i, Ran::Joins, Some(why.into()));
                        return Ok(());
                    }
                }
                relational::evaluate_stratum(p, st, (rules, chains), &mut self.values, o, pool)?;
                self.log(i, Ran::Joins, None);
                Ok(())
            }
            Kernel::Counts(rules) => {
                self.fill_pending(&st.tensors);
                relational::evaluate_counts(
                    p,
                    st,
                    rules,
                    &mut self.values,
                    &self.plan.sparse,
                    (o, pool),
                )?;
                self.log(i, Ran::Counts, None);
                Ok(())
            }
            Kernel::Extremum(rules) => {
                self.fill_pending(&st.tensors);
                match relational::evaluate_extremum(p, st, rules, &mut self.values, o)? {
                    Ok(()) => {
                        self.log(i, Ran::Extremum, None);
                        Ok(())
                    }
                    Err(why) => self.fallback(i, st, Some(Declined::Unsupported(why))),
                }
            }
            Kernel::Nest | Kernel::Reference => self.fallback(i, st, None),
        }
    }

    /// Evaluates stratum `i` by its loop nests (logging why its planned kernel declined,
    /// where it did); by the reference loops only under [`Plan::reference`].
    fn fallback(
        &mut self,
        i: usize,
        st: &Stratum,
        declined: Option<Declined>,
    ) -> Result<(), Diagnostics> {
        self.fill_pending(&st.tensors);
        let sp: &StratumPlan = &self.plan.strata[i];
        if let Kernel::Reference = sp.kernel {
            reference::evaluate_stratum(self.p, st, &mut self.values, self.o)?;
            let why = "the reference plan was asked for";
            self.log(i, Ran::Reference, Some(why.into()));
        } else {
            let sparse = &self.plan.sparse;
            let read_zeros =
                nest::evaluate_stratum(self.p, st, (&sp.nests, sparse), &mut self.values, self.o)?;
            let declined =
                declined.map(|d| format!("the planned kernel declined: {}", d.describe(self.p)));
            let why = match (declined, read_zeros) {
                (Some(a), Some(b)) => Some(format!("{a}; {b}")),
                (a, b) => a.or(b),
            };
            self.log(i, Ran::Nest, why);
        }
        Ok(())
    }
}

/// A pool of `--threads` workers, or none for one thread. Pools are built once per thread
/// count and reused, so repeated evaluations (`tl bench`, training steps) do not pay for
/// starting threads. The first pool a thread asks for counts that thread as one of its
/// workers (it builds `threads - 1` more): running work in it then needs no hand-off to a
/// worker and back, which on small steps cost more than the second thread gained.
pub(crate) fn thread_pool(o: &EvalOptions) -> Option<std::sync::Arc<rayon::ThreadPool>> {
    use std::cell::RefCell;
    use std::sync::{Arc, Mutex, OnceLock};
    type Pools = Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>>;
    static POOLS: OnceLock<Pools> = OnceLock::new();
    thread_local! {
        static JOINED: RefCell<Option<(usize, Arc<rayon::ThreadPool>)>> = const { RefCell::new(None) };
    }
    if o.threads <= 1 {
        return None;
    }
    let joined = JOINED.with_borrow_mut(|own| match own {
        Some((n, pool)) => (*n == o.threads).then(|| pool.clone()),
        None if rayon::current_thread_index().is_none() => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(o.threads)
                .use_current_thread()
                .build()
                .ok()
                .map(Arc::new)?;
            *own = Some((o.threads, pool.clone()));
            Some(pool)
        }
        None => None,
    });
    if joined.is_some() {
        return joined;
    }
    let mut pools = POOLS.get_or_init(|| Mutex::new(Vec::new())).lock().ok()?;
    if let Some((_, p)) = pools.iter().find(|(n, _)| *n == o.threads) {
        return Some(p.clone());
    }
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(o.threads)
            .build()
            .ok()?,
    );
    pools.push((o.threads, pool.clone()));
    Some(pool)
}

/// The tensors whose zeros need not be made before evaluation: those without data that a
/// non-recursive dense stratum defines (it replaces them whole, unless it declines at run
/// time).
fn pending(p: &Checked, plan: &Plan) -> Vec<bool> {
    let mut pending = vec![false; p.tensors.len()];
    for (st, sp) in p.strata.iter().zip(&plan.strata) {
        if let (Kernel::Dense(_), false) = (&sp.kernel, st.recursive) {
            for &t in &st.tensors {
                pending[t] = p.data[t].is_none();
            }
        }
    }
    pending
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread's first pool counts it as worker 0 (no hand-off to run in it); a pool of
    /// another size is shared and separate; one thread gets no pool.
    #[test]
    fn a_thread_joins_its_first_pool() {
        let run = || {
            let with = |threads| EvalOptions {
                threads,
                ..EvalOptions::default()
            };
            let two = thread_pool(&with(2)).ok_or("no pool of two")?;
            if rayon::current_thread_index() != Some(0) || two.current_num_threads() != 2 {
                return Err("the thread is not the first of its pool of two");
            }
            let again = thread_pool(&with(2)).ok_or("no pool of two the second time")?;
            let four = thread_pool(&with(4)).ok_or("no pool of four")?;
            match (
                std::sync::Arc::ptr_eq(&two, &again),
                four.current_num_threads(),
                thread_pool(&with(1)).is_none(),
            ) {
                (true, 4, true) => Ok(()),
                _ => Err("pools not reused, sized or skipped as asked"),
            }
        };
        assert_eq!(std::thread::spawn(run).join().ok(), Some(Ok(())));
    }
}
