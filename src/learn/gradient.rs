//! The backward sweep over the strata (§12), along the routes the backward plan chose
//! (`plan::backward`), logging where a route declined at run time and why.
//!
//! The sweep visits strata in reverse evaluation order. A non-recursive stratum passes each
//! tensor's adjoint back through its equations once; a recursive one through every iteration
//! its fixpoint actually ran, newest first, each with the iterate it read; an equation with a
//! virtual index through every step, each with the slice it read (backpropagation through
//! time). Boolean and integer tensors carry no gradient: `step` has derivative 0.

use super::backprop::{self, Head, Sink};
use super::dense_backward::{backward_dense, covers, Upstream};
use super::steps_backward;
use crate::eval::{EvalOptions, KeptTerms, Record, StratumRecord};
use crate::plan::backward::{Backward, Route};
use crate::plan::einsum::DenseEquation;
use crate::plan::{Kernel, Plan};
use crate::semantics::{Checked, Family, Kind, Stratum};
use crate::tensor::Tensor;

/// Where one stratum's adjoints went at run time: the route that ran, and why it is not
/// the planned one where it is not (`tl train --decisions`).
#[derive(Clone, Debug, PartialEq)]
pub struct Routed {
    /// Index into `Checked::strata`.
    pub stratum: usize,
    /// The route that ran.
    pub ran: Route,
    /// Why it differs from the planned route, where it does.
    pub reason: Option<&'static str>,
}

/// What a sweep runs along: the program, its plan (the stratum's dense and step plans), and
/// the options.
struct Sweep<'a> {
    p: &'a Checked,
    plan: &'a Plan,
    o: &'a EvalOptions,
}

/// Adjoints of every active tensor for d(loss)/d(·), the loss being a scalar, and the log
/// of the routes taken; `values` are the forward values and `records` what the backward
/// plan asked the forward pass to keep.
pub(crate) fn backward(
    (p, plan, b): (&Checked, &Plan, &Backward),
    values: &mut [Tensor],
    records: &[Option<StratumRecord>],
    o: &EvalOptions,
) -> (Vec<Option<Vec<f64>>>, Vec<Routed>) {
    // An active tensor's adjoint starts empty, standing for zeros: the first gradient that
    // covers it whole is written rather than added to zeros made for it, and one that
    // receives none passes none back.
    let mut adj: Vec<Option<Vec<f64>>> = b.active.iter().map(|&a| a.then(Vec::new)).collect();
    if let Some(Some(l)) = adj.get_mut(b.loss) {
        *l = vec![1.0; values[b.loss].shape.iter().product()];
    }
    let sweep = Sweep { p, plan, o };
    let mut log = Vec::new();
    for (i, st) in p.strata.iter().enumerate().rev() {
        let planned = b.routes.get(i).unwrap_or(&Route::Idle);
        if *planned == Route::Idle {
            continue;
        }
        let record = records.get(i).and_then(Option::as_ref);
        let (ran, reason) = sweep.stratum((i, st, planned), values, record, &mut adj);
        log.push(Routed {
            stratum: i,
            ran,
            reason,
        });
    }
    (adj, log)
}

impl Sweep<'_> {
    /// Passes stratum `i`'s adjoints back by the route its record allows: the planned one
    /// unless the forward pass declined it.
    fn stratum(
        &self,
        (i, st, planned): (usize, &Stratum, &Route),
        values: &mut [Tensor],
        record: Option<&StratumRecord>,
        adj: &mut [Option<Vec<f64>>],
    ) -> (Route, Option<&'static str>) {
        let steps = match &self.plan.strata.get(i).map(|s| &s.kernel) {
            Some(Kernel::Steps(s)) if *planned == Route::Steps => Some(s),
            _ => None,
        };
        if let (Some(steps), None | Some(StratumRecord::Steps(_))) = (steps, record) {
            let kept = match record {
                Some(StratumRecord::Steps(terms)) => Some(terms),
                _ => None,
            };
            steps_backward::backward(steps, values, self.o, adj, kept);
            return (Route::Steps, None);
        }
        let upstream: Vec<Vec<f64>> = st
            .tensors
            .iter()
            .map(|&t| adj[t].take().unwrap_or_default())
            .collect();
        let mut sink = Sink { adj, slice: None };
        let ran = match record {
            Some(StratumRecord::Reference(r)) if st.recursive => {
                self.through_iterations(st, values, r, upstream, sink.adj);
                Route::Iterations
            }
            Some(StratumRecord::Reference(r)) => {
                let produced = produced(st, values);
                let pass = self.pass(st, values, &upstream, &produced);
                pass.reverse(Some((r, 0)), &mut sink, &|_| true);
                Route::Reference { through_time: true }
            }
            Some(StratumRecord::Dense(terms)) => {
                let dense = match self.plan.strata.get(i).map(|s| &s.kernel) {
                    Some(Kernel::Dense(plans)) => plans.as_slice(),
                    _ => &[],
                };
                let planned_rest = match planned {
                    Route::Dense(rest) => rest.as_slice(),
                    _ => &[],
                };
                let rest = self.one_pass(
                    (st, planned_rest),
                    values,
                    (dense, terms),
                    &upstream,
                    &mut sink,
                );
                Route::Dense(rest)
            }
            None | Some(StratumRecord::Steps(_)) => {
                let produced = produced(st, values);
                let pass = self.pass(st, values, &upstream, &produced);
                pass.reverse(None, &mut sink, &|_| true);
                Route::Reference {
                    through_time: false,
                }
            }
        };
        let reason = (ran != *planned).then_some(match (planned, &ran) {
            (Route::Steps, _) => "the dense kernels do not take its inputs as they are",
            (Route::Dense(_), Route::Dense(_)) => {
                "the dense kernels declined some equations' inputs, each below"
            }
            (Route::Dense(_), _) => "its forward pass declined the dense kernels",
            _ => "its forward pass ran otherwise than planned",
        });
        (ran, reason)
    }

    fn pass<'v>(
        &'v self,
        st: &'v Stratum,
        values: &'v [Tensor],
        upstream: &'v [Vec<f64>],
        produced: &'v [Tensor],
    ) -> Pass<'v> {
        Pass {
            p: self.p,
            o: self.o,
            st,
            values,
            upstream,
            produced,
        }
    }

    /// Backpropagates through the iterations a fixpoint ran: iteration k read iterate k and
    /// produced iterate k + 1 (the last one produced the final value).
    fn through_iterations(
        &self,
        st: &Stratum,
        values: &mut [Tensor],
        r: &Record,
        mut upstream: Vec<Vec<f64>>,
        adj: &mut [Option<Vec<f64>>],
    ) {
        let finals: Vec<Tensor> = produced(st, values);
        for k in (0..r.iterates.len()).rev() {
            let produced: Vec<Tensor> = match r.iterates.get(k + 1) {
                Some(next) => next.clone(),
                None => finals.clone(),
            };
            for (j, &t) in st.tensors.iter().enumerate() {
                values[t] = r.iterates[k][j].clone();
                adj[t] = Some(vec![0.0; values[t].shape.iter().product()]);
            }
            let mut sink = Sink { adj, slice: None };
            let pass = self.pass(st, values, &upstream, &produced);
            pass.reverse(Some((r, k)), &mut sink, &|_| true);
            upstream = st
                .tensors
                .iter()
                .map(|&t| adj[t].take().unwrap_or_default())
                .collect();
        }
        for (j, &t) in st.tensors.iter().enumerate() {
            values[t] = finals[j].clone();
        }
    }

    /// One evaluation of a non-recursive stratum's equations, backwards: the planned dense
    /// equations by their kernels (`backward_dense`), the rest by the reference loops, which
    /// it returns with why.
    fn one_pass(
        &self,
        (st, planned_rest): (&Stratum, &[(usize, &'static str)]),
        values: &[Tensor],
        (dense, kept): (&[DenseEquation], &KeptTerms),
        upstream: &[Vec<f64>],
        sink: &mut Sink,
    ) -> Vec<(usize, &'static str)> {
        let p = self.p;
        // An equation planned in parts is done by its kernels only if every part is: each
        // part is checked before any adds its gradients.
        let mut done = vec![false; p.equations.len()];
        let mut declined: Vec<Option<&'static str>> = vec![None; p.equations.len()];
        for &(e, why) in planned_rest {
            declined[e] = Some(why);
        }
        for d in dense {
            if declined[d.equation].is_some() {
                continue;
            }
            if let Err(why) = covers(d, values, self.o) {
                declined[d.equation].get_or_insert(why);
            }
        }
        for (j, &t) in st.tensors.iter().enumerate() {
            if upstream[j].is_empty() {
                continue;
            }
            for (i, d) in dense.iter().enumerate().filter(|(_, d)| d.target == t) {
                if declined[d.equation].is_some() {
                    continue;
                }
                let kept = kept.get(&i).map(Vec::as_slice);
                let up = Upstream::Target(&upstream[j]);
                done[d.equation] = backward_dense(d, values, up, self.o, (sink.adj, None), kept);
            }
        }
        let carries = |e: usize| {
            let t = p.equations[e].target;
            p.tensors[t].kind == Kind::Real
                && st
                    .tensors
                    .iter()
                    .position(|&s| s == t)
                    .is_some_and(|j| !upstream[j].is_empty())
        };
        let rest: Vec<(usize, &'static str)> = st
            .equations
            .iter()
            .filter(|&&e| !done[e] && carries(e))
            .map(|&e| {
                let why = match (dense.iter().any(|d| d.equation == e), declined[e]) {
                    (false, _) => "no dense plan",
                    (true, Some(why)) => why,
                    (true, None) => "its normalizations could not be lifted",
                };
                (e, why)
            })
            .collect();
        if !rest.is_empty() {
            let produced = produced(st, values);
            let pass = self.pass(st, values, upstream, &produced);
            pass.reverse(None, sink, &|e| !done[e]);
        }
        rest
    }
}

/// The stratum's tensors as its evaluation left them.
fn produced(st: &Stratum, values: &[Tensor]) -> Vec<Tensor> {
    st.tensors.iter().map(|&t| values[t].clone()).collect()
}

/// One backward pass over a stratum's equations by the reference loops: the values read,
/// the adjoints of its tensors (`upstream`) and what it computed (`produced`, needed where
/// `max=`/`min=` pick a winner).
struct Pass<'a> {
    p: &'a Checked,
    o: &'a EvalOptions,
    st: &'a Stratum,
    values: &'a [Tensor],
    upstream: &'a [Vec<f64>],
    produced: &'a [Tensor],
}

impl Pass<'_> {
    /// The equations `include` accepts, backwards; `record` holds the slices of their
    /// virtual indices, read at fixpoint iteration `iteration`.
    fn reverse(
        &self,
        record: Option<(&Record, usize)>,
        sink: &mut Sink,
        include: &dyn Fn(usize) -> bool,
    ) {
        let (p, o, values) = (self.p, self.o, self.values);
        for (j, &t) in self.st.tensors.iter().enumerate() {
            let info = &p.tensors[t];
            let upstream = &self.upstream[j];
            if info.kind != Kind::Real || upstream.is_empty() {
                continue;
            }
            let produced = &self.produced[j];
            let mut claimed = claimed_by_data(p.data[t].as_ref(), produced, info.family);
            for (e, eq) in p
                .equations
                .iter()
                .enumerate()
                .filter(|&(e, eq)| eq.target == t && include(e))
            {
                let slices = record.and_then(|(r, k)| r.slices.get(&(k, e)));
                if let (Some(_), Some(slices)) = (eq.virtual_var, slices) {
                    through_time(p, eq, values, slices, o, upstream, sink);
                    continue;
                }
                let head = match info.family {
                    Family::Sum => Head::Sum,
                    Family::Avg => Head::Avg,
                    Family::Max | Family::Min => Head::Extremum {
                        value: produced,
                        claimed: &mut claimed,
                    },
                };
                let shape = &info.shape;
                backprop::equation(p, eq, values, None, o, shape, upstream, head, sink);
            }
        }
    }
}

/// Elements of a `max=`/`min=` tensor whose final value came from its data (they pass no
/// gradient to the equations).
fn claimed_by_data(data: Option<&Tensor>, value: &Tensor, family: Family) -> Vec<bool> {
    let n: usize = value.shape.iter().product();
    let mut claimed = vec![false; if family == Family::Sum { 0 } else { n }];
    if let (Some(d), false) = (data, claimed.is_empty()) {
        for (idx, v) in d.entries() {
            let off = idx
                .iter()
                .zip(&value.shape)
                .fold(0usize, |off, (&i, &n)| off * n + i);
            if value.get(&idx) == Some(v) && off < claimed.len() {
                claimed[off] = true;
            }
        }
    }
    claimed
}

/// Backpropagation through time: step s read slice s and produced slice s + 1; the final
/// slice is the tensor's value.
fn through_time(
    p: &Checked,
    eq: &crate::semantics::Equation,
    values: &[Tensor],
    slices: &[Tensor],
    o: &EvalOptions,
    upstream: &[f64],
    sink: &mut Sink,
) {
    let shape = &p.tensors[eq.target].shape;
    let mut lambda = upstream.to_vec();
    for step in (0..slices.len().saturating_sub(1)).rev() {
        let mut previous = vec![0.0; lambda.len()];
        let mut claimed = vec![false; lambda.len()];
        let head = match eq.family {
            Family::Sum => Head::Sum,
            Family::Avg => Head::Avg,
            Family::Max | Family::Min => Head::Extremum {
                value: &slices[step + 1],
                claimed: &mut claimed,
            },
        };
        let mut step_sink = Sink {
            adj: sink.adj,
            slice: Some(&mut previous),
        };
        backprop::equation(
            p,
            eq,
            values,
            Some((&slices[step], step)),
            o,
            shape,
            &lambda,
            head,
            &mut step_sink,
        );
        lambda = previous;
    }
}
