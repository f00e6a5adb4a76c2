//! Which tensors a gradient flows through, and the backward sweep over the strata (§12).
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
use crate::plan::einsum::DenseEquation;
use crate::plan::steps::Steps;
use crate::plan::{Kernel, Plan};
use crate::semantics::{Checked, Family, Kind, Node, TensorId};
use crate::tensor::Tensor;

/// Which tensors lie on a path from a trainable parameter to the loss.
pub(crate) fn active(p: &Checked, loss: TensorId, trainable: &[TensorId]) -> Vec<bool> {
    let n = p.tensors.len();
    let mut from_param = vec![false; n];
    for &t in trainable {
        from_param[t] = true;
    }
    let reads: Vec<Vec<TensorId>> = (0..n)
        .map(|t| {
            let mut r = Vec::new();
            for eq in p.equations.iter().filter(|e| e.target == t) {
                collect_reads(&eq.rhs, &mut r);
            }
            r
        })
        .collect();
    let real = |t: usize| p.tensors[t].kind == Kind::Real;
    loop {
        let mut changed = false;
        for t in 0..n {
            if !from_param[t] && real(t) && reads[t].iter().any(|&r| from_param[r]) {
                from_param[t] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut to_loss = vec![false; n];
    let mut stack = vec![loss];
    while let Some(t) = stack.pop() {
        if to_loss[t] || !from_param[t] {
            continue;
        }
        to_loss[t] = true;
        stack.extend(reads[t].iter().copied());
    }
    to_loss
}

fn collect_reads(n: &Node, out: &mut Vec<TensorId>) {
    if let Node::Read { tensor, .. } = n {
        out.push(*tensor);
    }
    for c in n.children() {
        collect_reads(c, out);
    }
}

/// Strata the loss reads, directly or not: the only ones a training step evaluates.
pub(crate) fn needed(p: &Checked, loss: TensorId) -> Vec<bool> {
    let reads = crate::plan::demand::closure(p, [loss]);
    p.strata
        .iter()
        .map(|st| st.tensors.iter().any(|t| reads.contains(t)))
        .collect()
}

/// Strata whose evaluation must be recorded for the backward sweep: recursive ones and those
/// with a virtual index, when they carry a gradient, except recursion along an index that
/// the dense kernels differentiate step by step (`steps_backward`; `skip` says where their
/// inputs turned out not to allow it).
pub(crate) fn strata_to_record(
    p: &Checked,
    plan: &Plan,
    active: &[bool],
    skip: &[bool],
) -> Vec<bool> {
    p.strata
        .iter()
        .enumerate()
        .map(|(i, st)| {
            st.tensors.iter().any(|&t| active[t])
                && (st.recursive
                    || st
                        .equations
                        .iter()
                        .any(|&e| p.equations[e].virtual_var.is_some()))
                && (skip.get(i).copied().unwrap_or(false) || steps_of(plan, i).is_none())
        })
        .collect()
}

/// The stratum's index-order plan, when the dense kernels can differentiate it.
pub(crate) fn steps_of(plan: &Plan, i: usize) -> Option<&Steps> {
    match plan.strata.get(i).map(|s| &s.kernel) {
        Some(Kernel::Steps(s)) if s.differentiable => Some(s),
        _ => None,
    }
}

/// Adjoints of every active tensor for d(loss)/d(·), the loss being a scalar; `values` are
/// the forward values and `records` what [`strata_to_record`] asked to keep.
pub(crate) fn backward(
    p: &Checked,
    plan: Option<&Plan>,
    values: &mut [Tensor],
    records: &[Option<StratumRecord>],
    o: &EvalOptions,
    loss: TensorId,
    active: &[bool],
) -> Vec<Option<Vec<f64>>> {
    // An active tensor's adjoint starts empty, standing for zeros: the first gradient that
    // covers it whole is written rather than added to zeros made for it, and one that
    // receives none passes none back.
    let mut adj: Vec<Option<Vec<f64>>> = active.iter().map(|&a| a.then(Vec::new)).collect();
    if let Some(Some(l)) = adj.get_mut(loss) {
        *l = vec![1.0; values[loss].shape.iter().product()];
    }
    for (i, st) in p.strata.iter().enumerate().rev() {
        if !st.tensors.iter().any(|&t| active[t]) || st.equations.is_empty() {
            continue;
        }
        let record = records.get(i).and_then(Option::as_ref);
        let kept = match record {
            Some(StratumRecord::Steps(terms)) => Some(terms),
            _ => None,
        };
        if let (None | Some(StratumRecord::Steps(_)), Some(steps)) =
            (record, plan.and_then(|pl| steps_of(pl, i)))
        {
            steps_backward::backward(steps, values, o, &mut adj, kept);
            continue;
        }
        let upstream: Vec<Vec<f64>> = st
            .tensors
            .iter()
            .map(|&t| adj[t].take().unwrap_or_default())
            .collect();
        let reference = match record {
            Some(StratumRecord::Reference(r)) => Some(r),
            _ => None,
        };
        match record {
            Some(StratumRecord::Reference(r)) if st.recursive => {
                through_iterations(p, st, values, r, o, upstream, &mut adj);
            }
            Some(StratumRecord::Dense(terms)) => {
                let dense = match plan.map(|pl| &pl.strata[i].kernel) {
                    Some(Kernel::Dense(plans)) => plans.as_slice(),
                    _ => &[],
                };
                let mut sink = Sink {
                    adj: &mut adj,
                    slice: None,
                };
                one_pass(p, st, values, (dense, terms), o, &upstream, &mut sink);
            }
            None | Some(StratumRecord::Steps(_)) => {
                let mut sink = Sink {
                    adj: &mut adj,
                    slice: None,
                };
                one_pass(
                    p,
                    st,
                    values,
                    (&[], &KeptTerms::new()),
                    o,
                    &upstream,
                    &mut sink,
                );
            }
            Some(StratumRecord::Reference(_)) => {
                let mut sink = Sink {
                    adj: &mut adj,
                    slice: None,
                };
                let produced: Vec<Tensor> = st.tensors.iter().map(|&t| values[t].clone()).collect();
                reverse_pass(
                    p,
                    st,
                    values,
                    reference,
                    0,
                    o,
                    &upstream,
                    &produced,
                    &mut sink,
                    &|_| true,
                );
            }
        }
    }
    adj
}

/// Backpropagates through the iterations a fixpoint ran: iteration k read iterate k and
/// produced iterate k + 1 (the last one produced the final value).
fn through_iterations(
    p: &Checked,
    st: &crate::semantics::Stratum,
    values: &mut [Tensor],
    r: &Record,
    o: &EvalOptions,
    mut upstream: Vec<Vec<f64>>,
    adj: &mut [Option<Vec<f64>>],
) {
    let finals: Vec<Tensor> = st.tensors.iter().map(|&t| values[t].clone()).collect();
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
        reverse_pass(
            p,
            st,
            values,
            Some(r),
            k,
            o,
            &upstream,
            &produced,
            &mut sink,
            &|_| true,
        );
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
/// equations by their kernels (`eval::backward_dense`), the rest by the reference loops.
fn one_pass(
    p: &Checked,
    st: &crate::semantics::Stratum,
    values: &[Tensor],
    (dense, kept): (&[DenseEquation], &KeptTerms),
    o: &EvalOptions,
    upstream: &[Vec<f64>],
    sink: &mut Sink,
) {
    // An equation planned in parts is done by its kernels only if every part is: each part
    // is checked before any adds its gradients.
    let mut done = vec![false; p.equations.len()];
    let mut declined = vec![false; p.equations.len()];
    for d in dense {
        declined[d.equation] |= !covers(d, values, o);
    }
    for (j, &t) in st.tensors.iter().enumerate() {
        if upstream[j].is_empty() {
            continue;
        }
        for (i, d) in dense.iter().enumerate().filter(|(_, d)| d.target == t) {
            if declined[d.equation] {
                continue;
            }
            let kept = kept.get(&i).map(Vec::as_slice);
            let up = Upstream::Target(&upstream[j]);
            done[d.equation] = backward_dense(d, values, up, o, (sink.adj, None), kept);
        }
    }
    if st.equations.iter().all(|&e| done[e]) {
        return;
    }
    let produced: Vec<Tensor> = st.tensors.iter().map(|&t| values[t].clone()).collect();
    let rest = |e: usize| !done[e];
    reverse_pass(p, st, values, None, 0, o, upstream, &produced, sink, &rest);
}

/// One evaluation of a stratum's equations that `include` accepts, backwards; `produced`
/// holds what it computed (needed where `max=`/`min=` pick a winner), `record` the slices of
/// its virtual indices in fixpoint iteration `iteration`.
#[allow(clippy::too_many_arguments)]
fn reverse_pass(
    p: &Checked,
    st: &crate::semantics::Stratum,
    values: &[Tensor],
    record: Option<&Record>,
    iteration: usize,
    o: &EvalOptions,
    upstream: &[Vec<f64>],
    produced: &[Tensor],
    sink: &mut Sink,
    include: &dyn Fn(usize) -> bool,
) {
    for (j, &t) in st.tensors.iter().enumerate() {
        let info = &p.tensors[t];
        if info.kind != Kind::Real || upstream[j].is_empty() {
            continue;
        }
        let mut claimed = claimed_by_data(p.data[t].as_ref(), &produced[j], info.family);
        for (e, eq) in p
            .equations
            .iter()
            .enumerate()
            .filter(|&(e, eq)| eq.target == t && include(e))
        {
            let slices = record.and_then(|r| r.slices.get(&(iteration, e)));
            match (eq.virtual_var, slices) {
                (Some(_), Some(slices)) => {
                    through_time(p, eq, values, slices, o, &upstream[j], sink)
                }
                _ => {
                    let head = match info.family {
                        Family::Sum => Head::Sum,
                        Family::Avg => Head::Avg,
                        Family::Max | Family::Min => Head::Extremum {
                            value: &produced[j],
                            claimed: &mut claimed,
                        },
                    };
                    backprop::equation(
                        p,
                        eq,
                        values,
                        None,
                        o,
                        &info.shape,
                        &upstream[j],
                        head,
                        sink,
                    );
                }
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
