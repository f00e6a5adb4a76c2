//! Whether a tensor's values are all finite, or all nonzero: what a loop nest or a sparse
//! product checks before it leaves out the zeros of a tensor stored as its non-zeros. Those
//! zeros are numbers (0 · inf is NaN), so skipping them is exact only beside factors that
//! are finite there, and beside divisors that are not 0 (docs/language.md, "skipping
//! zeros").

use super::{Dense, Storage, Tensor};

impl Tensor {
    /// Whether no element is infinite or NaN (integers and relations never are). A pass
    /// over the values without an early exit (`&`, not `&&`), which the compiler vectorises.
    pub fn finite(&self) -> bool {
        match &self.storage {
            Storage::Dense(Dense::F32(v)) => v.iter().fold(true, |ok, x| ok & x.is_finite()),
            Storage::Dense(Dense::F64(v)) => v.iter().fold(true, |ok, x| ok & x.is_finite()),
            Storage::Dense(Dense::I64(_) | Dense::I8(_)) | Storage::Relation(_) => true,
            Storage::Dense(other) => other.values().all(f64::is_finite),
            Storage::Sparse(s) => s.ints().is_some() || s.values().iter().all(|x| x.is_finite()),
        }
    }

    /// Whether no element is 0 (an element not stored, false or undefined, counts as 0:
    /// a divisor never masks).
    pub fn nowhere_zero(&self) -> bool {
        let elements = self.shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
        match &self.storage {
            Storage::Dense(d) => d.values().all(|x| x != 0.0),
            Storage::Sparse(s) => Some(s.len()) == elements && s.values().iter().all(|&x| x != 0.0),
            Storage::Relation(r) => Some(r.len()) == elements,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tensor::{Dense, ElemType, Storage, Tensor};

    fn dense(values: Vec<f64>) -> Tensor {
        Tensor {
            elem: ElemType::F32,
            shape: vec![values.len()],
            storage: Storage::Dense(Dense::from_f64(ElemType::F32, values)),
        }
    }

    #[test]
    fn infinities_and_nan_are_not_finite_and_zeros_are_zero() {
        assert!(dense(vec![1.0, -2.0, 0.0]).finite());
        assert!(!dense(vec![1.0, f64::INFINITY, 0.0]).finite());
        assert!(!dense(vec![f64::NAN, 1.0]).finite());
        assert!(!dense(vec![1.0, f64::NEG_INFINITY]).finite());
        assert!(dense(vec![1.0, -2.0]).nowhere_zero());
        assert!(!dense(vec![1.0, 0.0]).nowhere_zero());
    }
}
