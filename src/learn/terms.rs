//! A dense equation's terms as its backward pass holds them: f64, or f32 as an f32 forward
//! pass kept them, widened only where a pass reads every term in f64.

use crate::eval::dense::{widened, Grid, Operand, Vars};
use crate::semantics::VarId;
use std::borrow::Cow;

/// A term's values as the backward pass reads them: f64, or f32 as an f32 forward pass kept
/// them, widened only for a pass that reads every term in f64 ([`operands`]).
pub(super) enum Values<'a> {
    F64(Cow<'a, [f64]>),
    F32(&'a [f32]),
}

impl<'a> Values<'a> {
    pub(super) fn len(&self) -> usize {
        match self {
            Values::F64(v) => v.len(),
            Values::F32(v) => v.len(),
        }
    }

    /// The values in f64, widened (on the pool's workers) if they are f32.
    pub(super) fn wide(&self, threads: usize) -> Cow<'_, [f64]> {
        match self {
            Values::F64(v) => Cow::Borrowed(v),
            Values::F32(v) => Cow::Owned(widened(v, 1.0, threads)),
        }
    }

    /// Elements `range`, widened, into `out`.
    #[inline]
    pub(super) fn widen_into(&self, range: std::ops::Range<usize>, out: &mut [f64]) {
        match self {
            Values::F64(v) => out.copy_from_slice(&v[range]),
            Values::F32(v) => out
                .iter_mut()
                .zip(&v[range])
                .for_each(|(o, &x)| *o = x.into()),
        }
    }

    /// [`Values::wide`], owned.
    pub(super) fn into_wide(self, threads: usize) -> Vec<f64> {
        match self {
            Values::F64(v) => v.into_owned(),
            Values::F32(v) => widened(v, 1.0, threads),
        }
    }
}

impl<'a> From<&'a Grid> for Values<'a> {
    fn from(g: &'a Grid) -> Values<'a> {
        match g {
            Grid::F64(v) => Values::F64(Cow::Borrowed(v)),
            Grid::F32(v) => Values::F32(v),
        }
    }
}

/// One term of the expression: its variables and values.
pub(super) struct Term<'a> {
    pub(super) vars: Vars,
    pub(super) values: Values<'a>,
}

impl<'a> Term<'a> {
    /// A term the forward pass kept.
    pub(super) fn kept(vars: &[VarId], values: &'a Grid) -> Term<'a> {
        Term {
            vars: Vars::from_slice(vars),
            values: Values::from(values),
        }
    }
}

impl<'a> From<Operand<'a>> for Term<'a> {
    fn from(o: Operand<'a>) -> Term<'a> {
        Term {
            vars: o.vars,
            values: Values::F64(o.data),
        }
    }
}

/// The terms as f64 operands for the row interpreter (f32 ones widened).
pub(super) fn operands<'t>(terms: &'t [Term], threads: usize) -> Vec<Operand<'t>> {
    let operand = |t: &'t Term| Operand {
        vars: t.vars.clone(),
        data: t.values.wide(threads),
    };
    terms.iter().map(operand).collect()
}
