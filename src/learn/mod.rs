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
mod lifted;
pub mod optim;
mod pending;
mod steps_backward;
mod term_adjoints;
mod terms;
pub mod train;

use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::eval::{evaluate_recorded, EvalOptions};
use crate::plan::Plan;
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
    differentiate(p, Some(plan), o, loss, trainable)
}

/// As [`gradients`], entirely by the reference evaluator's loops: the oracle the fast path is
/// tested against.
pub fn reference_gradients(
    p: &Checked,
    o: &EvalOptions,
    loss: TensorId,
    trainable: &[TensorId],
) -> Result<Gradients, Diagnostics> {
    differentiate(p, None, o, loss, trainable)
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
            let n: u128 = info.shape.iter().map(|&d| d as u128).product();
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
    let active = gradient::active(p, loss, trainable);
    crate::eval::fits_budget(p, plan, step_bytes(p, &active, trainable), o)
}

fn differentiate(
    p: &Checked,
    plan: Option<&Plan>,
    o: &EvalOptions,
    loss: TensorId,
    trainable: &[TensorId],
) -> Result<Gradients, Diagnostics> {
    let active = gradient::active(p, loss, trainable);
    let needed = gradient::needed(p, loss);
    let (mut values, records) = match plan {
        Some(plan) => {
            fits_step(p, plan, o, (loss, trainable))?;
            let mut skip = vec![false; p.strata.len()];
            let record = gradient::strata_to_record(p, plan, &active, &skip);
            let (values, records) = evaluate_recorded(p, plan, o, &needed, &record)?;
            // Recursion along an index whose inputs the dense backward pass does not take
            // (checked before it adds anything) is evaluated again, recorded.
            for (i, st) in p.strata.iter().enumerate() {
                skip[i] = needed[i]
                    && st.tensors.iter().any(|&t| active[t])
                    && gradient::steps_of(plan, i)
                        .is_some_and(|s| !steps_backward::covered(s, &values, o));
            }
            match skip.contains(&true) {
                true => {
                    let record = gradient::strata_to_record(p, plan, &active, &skip);
                    evaluate_recorded(p, plan, o, &needed, &record)?
                }
                false => (values, records),
            }
        }
        None => {
            let all = vec![true; p.strata.len()];
            evaluate_recorded(p, &Plan::reference(p), o, &needed, &all)?
        }
    };
    let loss_value = values[loss].get(&[]).unwrap_or(0.0);
    // Work the backward pass splits goes to the `--threads` pool, as the forward pass's does.
    let mut sweep = || gradient::backward(p, plan, &mut values, &records, o, loss, &active);
    let mut adj = match crate::eval::thread_pool(o) {
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
    })
}
