//! Execution. An [`Engine`] turns a checked program into tensor values; the reference
//! evaluator is the oracle every faster engine is tested against.

mod accumulate;
mod dense;
mod reference;
mod relational;

use crate::diagnostics::Diagnostics;
use crate::functions::UserFunction;
use crate::plan::{Plan, StratumPlan};
use crate::semantics::{Checked, Query, Stratum};
use crate::tensor::Tensor;
use std::collections::BTreeMap;

pub(crate) use dense::backward_dense;
pub use dense::KeptTerms;
pub(crate) use reference::{assignments, points, Cx};
pub use reference::{Record, Reference};

/// Options that affect evaluation but not meaning.
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// Convergence tolerance for real recursive components (§9).
    pub tol: f64,
    /// Iteration cap for recursive components (§9).
    pub max_iters: usize,
    /// Largest dense tensor, in bytes (§15).
    pub max_memory: u64,
    /// Registered functions (§16).
    pub functions: BTreeMap<String, UserFunction>,
    /// Worker threads; results are identical for every count (§9).
    pub threads: usize,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            tol: 1e-6,
            max_iters: 10_000,
            max_memory: crate::semantics::default_max_memory(),
            functions: BTreeMap::new(),
            threads: 1,
        }
    }
}

/// The default engine: each stratum by the fastest evaluator that handles it. Datalog-shaped
/// strata (`plan::datalog`) are evaluated semi-naively by joins, counts over relations by
/// enumerating joins, `min=`/`max=` path problems semi-naively over improved elements, dense
/// contractions (einsums) as planned trees of matrix products; every other stratum by the
/// reference evaluator's loops.
#[derive(Clone, Copy, Debug, Default)]
pub struct Standard;

impl Engine for Standard {
    fn name(&self) -> &'static str {
        "standard"
    }

    fn evaluate(&self, p: &Checked, o: &EvalOptions) -> Result<Vec<Tensor>, Diagnostics> {
        self.evaluate_planned(p, &crate::plan::plan(p), o)
    }

    fn evaluate_planned(
        &self,
        p: &Checked,
        plan: &Plan,
        o: &EvalOptions,
    ) -> Result<Vec<Tensor>, Diagnostics> {
        let mut pending = pending(p, plan);
        let mut values = reference::initial_values_pending(p, o, &pending)?;
        let pool = thread_pool(o);
        for (st, sp) in p.strata.iter().zip(&plan.strata) {
            standard_stratum(p, st, sp, (&mut values, &mut pending), o, pool.as_deref())?;
        }
        Ok(values)
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
        let mut pending = pending(p, &plan);
        let mut values = reference::initial_values_pending(p, o, &pending)?;
        let pool = thread_pool(o);
        let mut done = vec![false; p.strata.len()];
        let mut run_for = |values: &mut [Tensor],
                           pending: &mut [bool],
                           needed: std::collections::BTreeSet<usize>| {
            for ((st, sp), done) in p.strata.iter().zip(&plan.strata).zip(done.iter_mut()) {
                if !*done && st.tensors.iter().any(|t| needed.contains(t)) {
                    standard_stratum(p, st, sp, (values, pending), o, pool.as_deref())?;
                    *done = true;
                }
            }
            Ok::<(), Diagnostics>(())
        };
        let all: Vec<usize> = (0..p.tensors.len()).collect();
        if let Some(plan) = plan_demand(p, q) {
            run_for(
                &mut values,
                &mut pending,
                closure(p, plan.full.iter().copied()),
            )?;
            if relational::evaluate_demand(p, &plan, q.tensor, &mut values, o, pool.as_deref()) {
                reference::fill_pending(p, &all, &mut values, &mut pending);
                return Ok(values);
            }
        }
        run_for(&mut values, &mut pending, closure(p, [q.tensor]))?;
        reference::fill_pending(p, &all, &mut values, &mut pending);
        Ok(values)
    }
}

/// Evaluates the strata marked in `needed` like [`Standard`], except that those marked in
/// `record` run the reference loops and keep what backpropagation through them needs (their
/// fixpoint iterates and virtual slices, §12); one [`Record`] per recorded stratum.
pub fn evaluate_recorded(
    p: &Checked,
    plan: &Plan,
    o: &EvalOptions,
    needed: &[bool],
    record: &[bool],
) -> Result<(Vec<Tensor>, Vec<Option<Record>>), Diagnostics> {
    let mut pending = pending(p, plan);
    let mut values = reference::initial_values_pending(p, o, &pending)?;
    let pool = thread_pool(o);
    let mut records = Vec::with_capacity(p.strata.len());
    for (i, (st, sp)) in p.strata.iter().zip(&plan.strata).enumerate() {
        if !needed.get(i).copied().unwrap_or(true) {
            reference::fill_pending(p, &st.tensors, &mut values, &mut pending);
            records.push(None);
        } else if let (false, StratumPlan::Dense(plans)) =
            (record.get(i).copied().unwrap_or(false), sp)
        {
            // Dense strata keep the terms they computed, so the backward pass need not
            // compute them again.
            let mut r = Record::default();
            if dense::evaluate_dense(
                p,
                st,
                plans,
                &mut values,
                o,
                pool.as_deref(),
                Some(&mut r.terms),
            ) {
                st.tensors.iter().for_each(|&t| pending[t] = false);
                records.push(Some(r));
            } else {
                reference::fill_pending(p, &st.tensors, &mut values, &mut pending);
                reference::evaluate_stratum(p, st, &mut values, o)?;
                records.push(None);
            }
        } else if record.get(i).copied().unwrap_or(false) {
            reference::fill_pending(p, &st.tensors, &mut values, &mut pending);
            let mut r = Record::default();
            reference::evaluate_stratum_recorded(p, st, &mut values, o, Some(&mut r))?;
            records.push(Some(r));
        } else {
            let state = (values.as_mut_slice(), pending.as_mut_slice());
            standard_stratum(p, st, sp, state, o, pool.as_deref())?;
            records.push(None);
        }
    }
    let all: Vec<usize> = (0..p.tensors.len()).collect();
    reference::fill_pending(p, &all, &mut values, &mut pending);
    Ok((values, records))
}

/// A pool of `--threads` workers, or none for one thread. Pools are built once per thread
/// count and reused, so repeated evaluations (`tl bench`, training steps) do not pay for
/// starting threads.
fn thread_pool(o: &EvalOptions) -> Option<std::sync::Arc<rayon::ThreadPool>> {
    use std::sync::{Arc, Mutex, OnceLock};
    type Pools = Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>>;
    static POOLS: OnceLock<Pools> = OnceLock::new();
    if o.threads <= 1 {
        return None;
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
        if let (StratumPlan::Dense(_), false) = (sp, st.recursive) {
            for &t in &st.tensors {
                pending[t] = p.data[t].is_none();
            }
        }
    }
    pending
}

/// Evaluates one stratum as planned, giving its pending tensors (see [`pending`]) their
/// zeros unless the dense path defines them.
fn standard_stratum(
    p: &Checked,
    st: &Stratum,
    plan: &StratumPlan,
    (values, pending): (&mut [Tensor], &mut [bool]),
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
) -> Result<(), Diagnostics> {
    if let StratumPlan::Dense(plans) = plan {
        if dense::evaluate_dense(p, st, plans, values, o, pool, None) {
            st.tensors.iter().for_each(|&t| pending[t] = false);
            return Ok(());
        }
    }
    reference::fill_pending(p, &st.tensors, values, pending);
    match plan {
        StratumPlan::Datalog(rules) => {
            return relational::evaluate_stratum(p, st, rules, values, o, pool)
        }
        StratumPlan::Counts(rules) => {
            relational::evaluate_counts(p, st, rules, values);
            return Ok(());
        }
        // These two may decline at run time (inputs not as planned, or a case whose outcome
        // the reference evaluator defines); the reference loops then run.
        StratumPlan::Extremum(rules) => {
            if relational::evaluate_extremum(p, st, rules, values, o) {
                return Ok(());
            }
        }
        StratumPlan::Dense(_) | StratumPlan::Loops => {}
    }
    reference::evaluate_stratum(p, st, values, o)
}

/// The error for a recursive component still changing after `--max-iters` iterations (§9),
/// pointing at its equations; each engine adds a note on what it saw.
fn not_converged(
    p: &Checked,
    st: &crate::semantics::Stratum,
    max_iters: usize,
) -> crate::diagnostics::Diagnostic {
    let names: Vec<String> = st
        .tensors
        .iter()
        .map(|&t| format!("`{}`", p.tensors[t].name))
        .collect();
    let mut d = crate::diagnostics::Diagnostic::error(
        crate::diagnostics::codes::DIVERGED,
        p.equations[st.equations[0]].span,
        format!(
            "{} did not converge after {max_iters} iterations",
            names.join(", ")
        ),
    )
    .with_label("in this recursive equation");
    for &e in &st.equations[1..] {
        d = d.with_secondary(p.equations[e].span, "also part of the recursion");
    }
    d
}

/// Something that evaluates checked programs. Implementations must agree with [`Reference`].
pub trait Engine {
    /// A short name for messages and `--verify` reports.
    fn name(&self) -> &'static str;
    /// Values of every tensor, indexed like [`Checked::tensors`].
    fn evaluate(
        &self,
        program: &Checked,
        options: &EvalOptions,
    ) -> Result<Vec<Tensor>, Diagnostics>;
    /// Values from which `query` can be answered (§9: backward chaining is allowed). Only
    /// the queried tensor's elements that match the query are meaningful; by default,
    /// everything is evaluated.
    fn evaluate_for(
        &self,
        program: &Checked,
        options: &EvalOptions,
        _query: &Query,
    ) -> Result<Vec<Tensor>, Diagnostics> {
        self.evaluate(program, options)
    }
    /// Values of every tensor, with the strata planned beforehand by [`crate::plan::plan`]
    /// (engines that do not plan ignore it).
    fn evaluate_planned(
        &self,
        program: &Checked,
        _plan: &Plan,
        options: &EvalOptions,
    ) -> Result<Vec<Tensor>, Diagnostics> {
        self.evaluate(program, options)
    }
}
