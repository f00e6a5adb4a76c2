//! The number an evaluator computes an element in: f64 for real and Boolean tensors, an
//! exact i64 for an `int` tensor (§8: integer aggregates, counts and sums are exact over all
//! of i64, and a value that leaves it is an error, never a wrap). The reference and the
//! loop nests each evaluate an expression once, generically over this trait, so the two
//! types cannot disagree on what an expression means.

use crate::functions::Builtin;
use crate::semantics::Family;
use crate::syntax::ast::{BinOp, CmpOp, Num};
use crate::tensor::{Dense, Sparse, Tensor};

/// An element as a read finds it.
pub(crate) enum Element<S> {
    /// A position outside the tensor.
    Outside,
    /// No element there.
    Undefined,
    /// Its value.
    Defined(S),
}

impl<S: Scalar> Element<S> {
    /// The value an expression reads: outside the tensor the point is nothing (false under
    /// `not`, `total`); an undefined element is 0, or nothing under `max=`/`min=`
    /// (`relational`, §7) outside `not`. A mask's undefined element is the product's 0
    /// instead (the evaluators' products see to it).
    pub(crate) fn resolve(self, total: bool, relational: bool) -> Option<S> {
        match self {
            Element::Defined(v) => Some(v),
            Element::Outside if total => Some(S::truth(false)),
            Element::Outside => None,
            Element::Undefined if relational && !total => None,
            Element::Undefined => Some(S::truth(false)),
        }
    }
}

/// The element of `t` at positions computed from the point `env` (every axis closed: an
/// open column's values go through its table, `eval/open.rs`). Read by the reference and
/// the loop nests alike, so the two find the same element.
pub(crate) fn element_at<S: Scalar>(
    t: &Tensor,
    index: &[crate::semantics::IndexFn],
    env: &[i64],
) -> Element<S> {
    let mut key = [0u32; 8];
    let mut heap = Vec::new();
    let key: &mut [u32] = if index.len() <= key.len() {
        &mut key[..index.len()]
    } else {
        heap.resize(index.len(), 0);
        &mut heap
    };
    for ((f, &n), k) in index.iter().zip(&t.shape).zip(key.iter_mut()) {
        match f.eval(env) {
            Some(i) if i >= 0 && (i as u64) < n as u64 => *k = i as u32,
            _ => return Element::Outside,
        }
    }
    S::read(t, key).map_or(Element::Undefined, Element::Defined)
}

/// What an element is computed in.
pub(crate) trait Scalar: Copy {
    /// Whether this is the exact integer type (a comparison of reals in an integer equation
    /// is then made in f64).
    const EXACT: bool;
    /// A constant of the program.
    fn constant(c: f64) -> Self;
    /// A variable's value (its position, or an integer column's value).
    fn var(v: i64) -> Self;
    /// 0 or 1.
    fn truth(b: bool) -> Self;
    /// The element of `t` at an in-bounds `key`, if it is defined.
    fn read(t: &Tensor, key: &[u32]) -> Option<Self>;
    /// Element `offset` of a dense buffer.
    fn dense(d: &Dense, offset: usize) -> Option<Self>;
    /// Stored element `row` of a sparse tensor.
    fn row(s: &Sparse, row: usize) -> Option<Self>;
    /// `self * b` (or `self / b`).
    fn mul(self, b: Self, div: bool) -> Self;
    /// `-self`.
    fn neg(self) -> Self;
    /// `1 - self` (`not`).
    fn not(self) -> Self;
    /// `self op b`; `None` for `%` or integer division of integers by zero, where the point
    /// is nothing (a rule derives nothing there, as in an index and a value binding).
    fn binary(self, op: BinOp, b: Self) -> Option<Self>;
    /// `self op b` as 0 or 1.
    fn compare(self, op: CmpOp, b: Self) -> Self;
    /// A built-in function of the arguments (integer ones only take integer arguments).
    fn builtin(b: Builtin, xs: &[Self]) -> Self;
    /// `self` and `b` combined by an accumulation family.
    fn fold(self, family: Family, b: Self) -> Self;
    /// The value as f64 (what a real function or a normalisation takes).
    fn real(self) -> f64;
    /// A value computed in f64.
    fn of_real(x: f64) -> Self;
}

impl Scalar for f64 {
    const EXACT: bool = false;
    #[inline]
    fn constant(c: f64) -> f64 {
        c
    }
    #[inline]
    fn var(v: i64) -> f64 {
        v as f64
    }
    #[inline]
    fn truth(b: bool) -> f64 {
        if b {
            1.0
        } else {
            0.0
        }
    }
    #[inline]
    fn read(t: &Tensor, key: &[u32]) -> Option<f64> {
        t.get_at(key)
    }
    #[inline]
    fn dense(d: &Dense, offset: usize) -> Option<f64> {
        d.get(offset)
    }
    #[inline]
    fn row(s: &Sparse, row: usize) -> Option<f64> {
        s.values().get(row).copied()
    }
    #[inline]
    fn mul(self, b: f64, div: bool) -> f64 {
        if div {
            self / b
        } else {
            self * b
        }
    }
    #[inline]
    fn neg(self) -> f64 {
        -self
    }
    #[inline]
    fn not(self) -> f64 {
        1.0 - self
    }
    #[inline]
    fn binary(self, op: BinOp, b: f64) -> Option<f64> {
        Some(op.apply(self, b))
    }
    #[inline]
    fn compare(self, op: CmpOp, b: f64) -> f64 {
        f64::truth(op.holds(self, b))
    }
    fn builtin(b: Builtin, xs: &[f64]) -> f64 {
        b.apply(xs)
    }
    #[inline]
    fn fold(self, family: Family, b: f64) -> f64 {
        match family {
            Family::Sum | Family::Avg => self + b,
            Family::Max => self.max(b),
            Family::Min => self.min(b),
        }
    }
    #[inline]
    fn real(self) -> f64 {
        self
    }
    #[inline]
    fn of_real(x: f64) -> f64 {
        x
    }
}

/// An `int` tensor's element as it is computed: `None` once it is no i64 (it left the
/// range, or divided by zero), which stays so through every later operation and is E0406
/// where it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Exact(pub Option<i64>);

impl Exact {
    fn with(self, b: Exact, f: impl Fn(i64, i64) -> Option<i64>) -> Exact {
        Exact(self.0.zip(b.0).and_then(|(a, b)| f(a, b)))
    }
}

impl Scalar for Exact {
    const EXACT: bool = true;
    fn constant(c: f64) -> Exact {
        // A constant of an integer equation is an integer f64 holds (E0407 otherwise).
        Exact(Num::of(c).as_int())
    }
    fn var(v: i64) -> Exact {
        Exact(Some(v))
    }
    fn truth(b: bool) -> Exact {
        Exact(Some(i64::from(b)))
    }
    fn read(t: &Tensor, key: &[u32]) -> Option<Exact> {
        t.get_int_at(key).map(|v| Exact(Some(v)))
    }
    fn dense(d: &Dense, offset: usize) -> Option<Exact> {
        d.get_int(offset).map(|v| Exact(Some(v)))
    }
    fn row(s: &Sparse, row: usize) -> Option<Exact> {
        match s.ints() {
            Some(ints) => ints.get(row).map(|&v| Exact(Some(v))),
            None => s.values().get(row).map(|&v| Exact(Some(v as i64))),
        }
    }
    fn mul(self, b: Exact, div: bool) -> Exact {
        match div {
            // An integer equation divides nowhere (`/` makes it real); exact where it does.
            true => self.with(b, |a, b| (b != 0 && a % b == 0).then(|| a / b)),
            false => self.with(b, i64::checked_mul),
        }
    }
    fn neg(self) -> Exact {
        Exact(self.0.and_then(i64::checked_neg))
    }
    fn not(self) -> Exact {
        Exact(self.0.and_then(|a| 1i64.checked_sub(a)))
    }
    fn binary(self, op: BinOp, b: Exact) -> Option<Exact> {
        if matches!(op, BinOp::Rem | BinOp::Quot) && b.0 == Some(0) {
            return None;
        }
        Some(match op {
            BinOp::Add => self.with(b, i64::checked_add),
            BinOp::Sub => self.with(b, i64::checked_sub),
            BinOp::Rem => self.with(b, i64::checked_rem),
            BinOp::Quot => self.with(b, i64::checked_div),
            BinOp::Pow => self.with(b, |a, b| a.checked_pow(u32::try_from(b).ok()?)),
        })
    }
    fn compare(self, op: CmpOp, b: Exact) -> Exact {
        match self.0.zip(b.0) {
            Some((a, b)) => Exact::truth(op.holds_num(Num::Int(a), Num::Int(b))),
            None => Exact(None),
        }
    }
    fn builtin(b: Builtin, xs: &[Exact]) -> Exact {
        let x = xs.first().copied().unwrap_or(Exact(Some(0)));
        let y = xs.get(1).copied().unwrap_or(x);
        match b {
            Builtin::Step => Exact(x.0.map(|a| i64::from(a > 0))),
            Builtin::Relu => Exact(x.0.map(|a| a.max(0))),
            Builtin::Abs => Exact(x.0.and_then(i64::checked_abs)),
            Builtin::Max => x.with(y, |a, b| Some(a.max(b))),
            Builtin::Min => x.with(y, |a, b| Some(a.min(b))),
            // Other functions make an equation real; exact where their value is an integer.
            other => {
                let real: Vec<f64> = xs.iter().map(|x| x.real()).collect();
                Exact::of_real(other.apply(&real))
            }
        }
    }
    fn fold(self, family: Family, b: Exact) -> Exact {
        match family {
            Family::Sum | Family::Avg => self.with(b, i64::checked_add),
            Family::Max => self.with(b, |a, b| Some(a.max(b))),
            Family::Min => self.with(b, |a, b| Some(a.min(b))),
        }
    }
    fn real(self) -> f64 {
        self.0.map_or(f64::NAN, |v| v as f64)
    }
    fn of_real(x: f64) -> Exact {
        Exact(Num::of(x).as_int())
    }
}
