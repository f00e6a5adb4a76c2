//! Learning (§12): exact gradients of a program's scalar loss with respect to its
//! parameters, finite-difference checks of them, optimizers and the training loop.
//!
//! Gradients are reverse-mode derivatives of the program itself. [`gradients`] evaluates the
//! program forward (recording fixpoint iterates and virtual slices where the gradient needs
//! them) and then sweeps backward over the strata (`gradient`), each equation passing its
//! adjoint to the tensors it reads (`backprop`).

mod backprop;
pub mod batch;
pub mod checkpoint;
mod dense_backward;
pub mod gradcheck;
mod gradient;
pub use gradient::Routed;
mod lifted;
pub mod optim;
mod pending;
mod steps_backward;
mod term_adjoints;
mod terms;
pub mod train;

use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::eval::{evaluate_recorded, EvalOptions};
use crate::plan::backward::{Backward, Route};
use crate::plan::{Kernel, Plan};
use crate::semantics::{Checked, Kind, TensorId};
use crate::tensor::Tensor;

/// The loss, every tensor's value and the gradient of each trainable parameter.
#[derive(Clone, Debug)]
pub struct Gradients {
    /// The loss's value.
    pub loss: f64,
    /// Every tensor's value from the forward pass.
    pub values: Vec<Tensor>,
    /// d(loss)/d(parameter), row-major, one per entry of `trainable`.
    pub grads: Vec<Vec<f64>>,
    /// The route each stratum's adjoints took, in the order the sweep ran them.
    pub routes: Vec<Routed>,
}

/// The id of the loss tensor `name`, which must be a real scalar.
pub fn loss_tensor(p: &Checked, name: &str) -> Result<TensorId, Diagnostics> {
    let Some(t) = p.tensor_id(name) else {
        return Err(Diagnostic::global(
            codes::TRAIN,
            format!("the loss `{name}` is not a tensor of this program"),
        )
        .with_note("define it with an equation, e.g. `Loss = (Y[e] - T[e])^2`, or name another tensor with --loss")
        .into());
    };
    let info = &p.tensors[t];
    if !info.shape.is_empty() || info.kind != Kind::Real {
        let what = if info.kind != Kind::Real {
            "is not real-valued".to_string()
        } else {
            format!("has shape {:?}", info.shape)
        };
        return Err(Diagnostic::error(
            codes::TRAIN,
            info.span,
            format!("the loss `{name}` must be a real scalar, but it {what}"),
        )
        .with_note("sum it over its indices: `Loss = L[i, j]` sums every element")
        .into());
    }
    Ok(t)
}

/// Evaluates `p` and differentiates its scalar `loss` with respect to `trainable`: dense
/// equations forward and backward by their kernels, everything else by the reference loops.
pub fn gradients(
    p: &Checked,
    plan: &Plan,
    o: &EvalOptions,
    loss: TensorId,
    trainable: &[TensorId],
) -> Result<Gradients, Diagnostics> {
    let backward = Backward::new(p, plan, loss, trainable);
    fits_step(p, plan, o, (loss, trainable))?;
    differentiate((p, plan, &backward), o, trainable)
}

/// As [`gradients`], along a backward plan made once for many steps
/// ([`Backward::new`] of the same plan, loss and parameters).
pub fn planned_gradients(
    (p, plan, backward): (&Checked, &Plan, &Backward),
    o: &EvalOptions,
    trainable: &[TensorId],
) -> Result<Gradients, Diagnostics> {
    fits_step(p, plan, o, (backward.loss, trainable))?;
    differentiate((p, plan, backward), o, trainable)
}

/// As [`gradients`], entirely by the reference evaluator's loops: the oracle the fast path is
/// tested against.
pub fn reference_gradients(
    p: &Checked,
    o: &EvalOptions,
    loss: TensorId,
    trainable: &[TensorId],
) -> Result<Gradients, Diagnostics> {
    let plan = Plan::reference(p);
    let backward = Backward::reference(p, &plan, loss, trainable);
    differentiate((p, &plan, &backward), o, trainable)
}

/// Bytes a training step holds beside the forward pass's tensors (§15), an upper estimate:
/// per parameter element its f64 copy, gradient, two moments and the update's scratch; per
/// element of a dense tensor on the gradient's route its f64 adjoint and the terms and masks
/// the backward pass keeps for it. Measured peaks (`tests/budget.rs`) stay below it.
fn step_bytes(p: &Checked, active: &[bool], trainable: &[TensorId]) -> u128 {
    const PER_PARAMETER: u128 = 6 * 8;
    const PER_ROUTED: u128 = 6 * 8;
    p.tensors
        .iter()
        .enumerate()
        .filter(|&(t, info)| active[t] && crate::semantics::budget::is_dense(info))
        .map(|(t, info)| {
            let n = info.elements();
            let per = match trainable.contains(&t) {
                true => PER_PARAMETER,
                false => PER_ROUTED,
            };
            n.saturating_mul(per)
        })
        .fold(0u128, u128::saturating_add)
}

/// E0601 where the forward pass's tensors and a training step's state (`step_bytes`)
/// would not fit `--max-memory` together (§15).
pub(crate) fn fits_step(
    p: &Checked,
    plan: &Plan,
    o: &EvalOptions,
    (loss, trainable): (TensorId, &[TensorId]),
) -> Result<(), Diagnostics> {
    let active = crate::plan::backward::active(p, loss, trainable);
    crate::eval::fits_budget(p, plan, step_bytes(p, &active, trainable), o)
}

fn differentiate(
    (p, plan, b): (&Checked, &Plan, &Backward),
    o: &EvalOptions,
    trainable: &[TensorId],
) -> Result<Gradients, Diagnostics> {
    let mut record = b.record();
    let (values, records) = evaluate_recorded(p, plan, o, &b.needed, &record)?;
    // A recursion along an index whose inputs the dense backward pass does not take (checked
    // before it adds anything) is evaluated again, recorded, for the reference loops.
    let mut again = false;
    for (i, r) in b.routes.iter().enumerate() {
        if let (Route::Steps, Some(Kernel::Steps(s))) = (r, plan.strata.get(i).map(|s| &s.kernel)) {
            if !steps_backward::covered(s, &values, o) {
                record[i] = true;
                again = true;
            }
        }
    }
    let (mut values, records) = match again {
        true => evaluate_recorded(p, plan, o, &b.needed, &record)?,
        false => (values, records),
    };
    let loss_value = values[b.loss].get(&[]).unwrap_or(0.0);
    // Work the backward pass splits goes to the `--threads` pool, as the forward pass's does.
    let mut sweep = || gradient::backward((p, plan, b), &mut values, &records, o);
    let (mut adj, routes) = match crate::eval::thread_pool(o) {
        Some(pool) => pool.install(sweep),
        None => sweep(),
    };
    // Each gradient moves out of its adjoint (a copy only for a tensor named again later).
    let grads = trainable
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let slot = adj.get_mut(t);
            match trainable[i + 1..].contains(&t) {
                true => slot.and_then(|a| a.clone()),
                false => slot.and_then(Option::take),
            }
            .filter(|g| !g.is_empty())
            .unwrap_or_else(|| vec![0.0; values[t].shape.iter().product()])
        })
        .collect();
    Ok(Gradients {
        loss: loss_value,
        values,
        grads,
        routes,
    })
}
