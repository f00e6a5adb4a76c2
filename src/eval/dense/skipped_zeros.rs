//! The run-time half of multiplying by a tensor stored as its non-zeros: its tuples stand
//! for the whole product only where the dense factors beside it are finite (its zeros are
//! numbers, and 0 · inf is NaN; docs/language.md, "skipping zeros").

use super::{Declined, DenseEquation, Tensor};

/// Declines, naming the tensors, where a term would leave out a stored zero beside an
/// infinite or NaN factor ([`crate::plan::einsum::Contraction::finite`]); the loop nests then
/// read that zero.
pub(super) fn zeros_skippable(d: &DenseEquation, values: &[Tensor]) -> Result<(), Declined> {
    for c in &d.terms {
        let (Some(stored), false) = (&c.sparse, c.finite.is_empty()) else {
            continue;
        };
        let infinite = match c.finite.iter().find(|&&t| !values[t].finite()) {
            Some(&t) => Some(t),
            None if !c.scale.is_finite() => None,
            None => continue,
        };
        return Err(Declined::NotFinite {
            stored: stored.tensor,
            factor: infinite,
        });
    }
    Ok(())
}
