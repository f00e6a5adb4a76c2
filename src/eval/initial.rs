//! Every tensor's value before evaluation: its data, or no elements yet (zeros for a dense
//! tensor, no tuples or defined elements for a sparse one), within `--max-memory` (§15).

use super::EvalOptions;
use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::semantics::TensorInfo;
use crate::tensor::Tensor;

/// A tensor with no elements yet: zeros, or no defined elements.
pub(crate) fn empty(info: &TensorInfo, o: &EvalOptions) -> Result<Tensor, Diagnostics> {
    if is_sparse(info) {
        return Ok(Tensor::sparse(info.elem, info.shape.clone()));
    }
    fits_dense(info, o)?;
    Tensor::try_zeros(info.elem, info.shape.clone())
        .map_err(|e| crate::semantics::budget::not_given(info, e, o.max_memory).into())
}

/// E0601 when the dense tensors `dense` keeps (all that are not sparse by kind, less those a
/// plan stores sparsely) need more than `--max-memory` together (§15), before any is
/// allocated.
pub(crate) fn fits_budget(
    p: &crate::semantics::Checked,
    dense: &dyn Fn(usize) -> bool,
    beside: crate::semantics::budget::Beside,
    o: &EvalOptions,
) -> Result<(), Diagnostics> {
    match crate::semantics::budget::check(&p.tensors, dense, beside, o.max_memory) {
        Some(d) => Err(d.into()),
        None => Ok(()),
    }
}

/// Whether the tensor holds only its defined elements (relations, `max=`-style tensors).
pub(crate) fn is_sparse(info: &TensorInfo) -> bool {
    !crate::semantics::budget::is_dense(info)
}

/// An error when the tensor would not fit `--max-memory` as a dense array.
pub(crate) fn fits_dense(info: &TensorInfo, o: &EvalOptions) -> Result<(), Diagnostics> {
    let n = info.elements();
    let bytes = n.saturating_mul(info.elem.dense_bytes());
    if bytes > o.max_memory as u128 {
        return Err(Diagnostic::error(
            codes::MEMORY,
            info.span,
            format!("`{}` would need {} bytes as a dense {:?} tensor, over --max-memory ({} bytes)", info.name, bytes, info.shape, o.max_memory),
        )
        .with_note("use a sparse formulation: a Boolean relation written with parentheses, or `max=`/`min=` over defined elements")
        .into());
    }
    Ok(())
}
