//! Gradients of recursion along an index (a layer axis, `X[s, l + 1, p, d] = …`) by the
//! dense kernels, step by step in reverse (§12).
//!
//! The forward pass ran each equation once per step on its one-step dense plan, its windows
//! moved to that step (`plan::steps`); every step's values stay in the stratum's tensors.
//! So the backward pass needs no record of values (only, when the forward pass kept them,
//! the terms each step computed, which it then need not compute again): it walks the steps
//! from the last to the first, the equations of a step in reverse order, moves each
//! one-step plan to its step again and runs its dense backward pass (`backward_dense`)
//! with its target's adjoint, which by then holds
//! every contribution from later steps and from the same step's readers. This is the exact
//! derivative of what the fixpoint computes, as the reference's backpropagation through its
//! iterations is, in one pass instead of one per iteration.
//!
//! A gradient that reaches one window of an adjoint still empty (a layer's `Q[s, l, …]`) is
//! held as it came (`Pending`) and read as it is by the equation that wrote the window; an
//! adjoint needed whole has its held windows added to zeros first. When the sweep ends, the
//! stratum's own tensors' held windows are dropped (no earlier stratum reads their adjoints)
//! and every other tensor's are made whole.

use super::dense_backward::{backward_dense, covers, Upstream};
use super::pending::Pending;
use crate::eval::dense::placement;
use crate::eval::{EvalOptions, StepTerms};
use crate::plan::einsum::DenseEquation;
use crate::plan::steps::Steps;
use crate::tensor::Tensor;

/// Whether the dense backward pass takes every equation with these values (checked once
/// per evaluation, before anything is added: the answer is the same at every step).
pub(crate) fn covered(steps: &Steps, values: &[Tensor], o: &EvalOptions) -> bool {
    steps.equations.iter().all(|eq| {
        eq.dense
            .as_ref()
            .is_some_and(|d| covers(d, values, o).is_ok())
    })
}

/// Adds the stratum's contributions to `adj`, whose entries for the stratum's own tensors
/// hold the adjoints that later strata gave them (and receive those of earlier steps).
/// Adds nothing unless [`covered`]: the caller then evaluates the stratum recorded, for
/// the reference loops to go backwards through it.
/// `kept` holds the terms the forward pass computed at each step, if it kept them.
pub(crate) fn backward(
    steps: &Steps,
    values: &[Tensor],
    o: &EvalOptions,
    adj: &mut [Option<Vec<f64>>],
    kept: Option<&StepTerms>,
) {
    if !covered(steps, values, o) {
        return;
    }
    let threads = o.threads.max(1);
    let mut moved: Vec<Option<DenseEquation>> =
        steps.equations.iter().map(|e| e.dense.clone()).collect();
    let mut pending = Pending::new(adj.len());
    let len = |t: usize| values.get(t).map_or(0, |v| v.shape.iter().product());
    for s in (0..steps.count).rev() {
        for (j, (eq, dense)) in steps.equations.iter().zip(&mut moved).enumerate().rev() {
            let (Some(x), Some(d)) = (eq.at_step(s), dense.as_mut()) else {
                continue;
            };
            if !eq.move_to(x, d) {
                continue;
            }
            let Some(mut upstream) = adj.get_mut(eq.target).and_then(Option::take) else {
                continue;
            };
            // An equation that reads its own target at an earlier step (`Emb[n, l, e]` in
            // `Emb[n, l + 1, d]`) adds to that adjoint while reading it.
            let reads_itself = d
                .terms
                .iter()
                .flat_map(|c| &c.factors)
                .any(|f| f.tensor == eq.target);
            let terms = kept.and_then(|k| k.get(&(s, j))).map(Vec::as_slice);
            // The gradient held for exactly the window this equation writes is read as it is
            // (nothing adds to the target meanwhile: the equation does not read it).
            let windowed = d.scatter.is_some() && d.summed.is_empty() && !reads_itself;
            if upstream.is_empty() && windowed {
                if let Some(lent) = pending.lend(eq.target, &placement(d)) {
                    adj[eq.target] = Some(upstream);
                    let sums = (&mut *adj, Some(&mut pending));
                    backward_dense(d, values, Upstream::Grid(&lent.values), o, sums, terms);
                    pending.give_back(lent);
                    continue;
                }
            }
            if upstream.is_empty() {
                pending.settle(eq.target, &mut upstream, len(eq.target), threads);
            }
            // Still empty: no gradient reached the target, so none passes back.
            if upstream.is_empty() {
                adj[eq.target] = Some(upstream);
                continue;
            }
            if reads_itself {
                adj[eq.target] = Some(vec![0.0; upstream.len()]);
            }
            let sums = (&mut *adj, Some(&mut pending));
            backward_dense(d, values, Upstream::Target(&upstream), o, sums, terms);
            if let Some(own) = adj[eq.target].take() {
                upstream.iter_mut().zip(own).for_each(|(u, g)| *u += g);
            }
            adj[eq.target] = Some(upstream);
        }
    }
    for (t, buf) in adj.iter_mut().enumerate() {
        if !pending.holds(t) {
            continue;
        }
        match (steps.equations.iter().any(|e| e.target == t), buf) {
            (true, _) | (false, None) => pending.drop_held(t),
            (false, Some(buf)) => pending.settle(t, buf, len(t), threads),
        }
    }
}
