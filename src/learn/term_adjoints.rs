//! The adjoint each term of a dense equation's expression gets from the adjoint of its
//! value: in one pass where the expression is linear in terms laid out as the grid or one
//! function of one term (written in f32 where that is what the term's products read and no
//! other adjoint reaches it), otherwise through the row interpreter.

use super::dense_backward::ADD_BLOCK;
use super::terms::{operands, Term, Values};
use crate::eval::dense::rows::{self, Program};
use crate::eval::dense::{split, Num};
use crate::functions::Builtin;
use crate::plan::einsum::{Contraction, DenseEquation};
use crate::plan::rows::{RowOp, RowProgram};

/// Adds to `g` (each term's adjoint, laid out as the term; an empty one stands for zeros)
/// the adjoint each term of `program` gets from `up`, the adjoint of its value at every grid
/// element. Where the program is linear in terms laid out as the grid (`Q K / 8 - 1e9 (q >
/// p)`, `W H + X`), that is `cₖ · up`, written (or added) in one pass; otherwise the rows
/// pass back through each operation. With `narrow` (no other adjoint will reach the terms),
/// an f32 term's one-pass adjoint is written there instead, scaled and rounded to f32 as its
/// products read it, in the same pass.
pub(super) fn term_adjoints(
    (planned, program): (&RowProgram, &Program),
    (d, terms): (&DenseEquation, &[Term]),
    up: &Values,
    (g, mut narrow): (&mut [Vec<f64>], Option<&mut [Vec<f32>]>),
    threads: usize,
) {
    let grid: usize = d.out.iter().map(|&v| d.extents[v]).product();
    let on_grid = |k: usize| {
        terms.get(k).is_some_and(|t| {
            t.vars[..] == d.out[..]
                && t.vars.iter().map(|&v| d.extents[v]).product::<usize>() == grid
        })
    };
    let split = split::splits(threads, grid);
    let direct = d.mask.is_none() && up.len() == grid;
    let linear = planned
        .linear()
        .filter(|ks| direct && ks.iter().all(|&(k, _)| on_grid(k)));
    if let Some(coefficients) = linear {
        for &(k, c) in &coefficients {
            let once = coefficients.iter().filter(|&&(j, _)| j == k).count() == 1;
            match (up, sink(d, (k, once), g, narrow.as_deref_mut())) {
                (Values::F64(u), Some(s)) => s.pass((u, u), split, |u, _| u * c),
                (Values::F32(u), Some(s)) => s.pass((u, u), split, |u, _| f64::from(u) * c),
                (_, None) => {}
            }
        }
        return;
    }
    // One function of one term laid out as the grid (`relu(W X)`): `f'(x) · a`, one pass.
    if let [RowOp::Term(k), RowOp::Builtin(f, args)] = &planned.ops[..] {
        let x = terms.get(*k).map(|t| &t.values);
        if direct && args[..] == [0] && on_grid(*k) && x.is_some_and(|x| x.len() == grid) {
            if let (Some(x), Some(s)) = (x, sink(d, (*k, true), g, narrow)) {
                match (up, x) {
                    (Values::F64(u), Values::F64(x)) => one_function(f, s, (u, x), split),
                    (Values::F64(u), Values::F32(x)) => one_function(f, s, (u, x), split),
                    (Values::F32(u), Values::F64(x)) => one_function(f, s, (u, x), split),
                    (Values::F32(u), Values::F32(x)) => one_function(f, s, (u, x), split),
                }
            }
            return;
        }
    }
    // The rows add into every term they read.
    for op in &planned.ops {
        if let RowOp::Term(k) = *op {
            if let (Some(gk), Some(t)) = (g.get_mut(k), terms.get(k)) {
                if gk.is_empty() {
                    *gk = split::zeros(t.vars.iter().map(|&v| d.extents[v]).product(), threads);
                }
            }
        }
    }
    rows::backward(program, d, &operands(terms, threads), &up.wide(threads), g);
}

/// The adjoint `f'(x) · a` of the one term `x` of `f(x)`, `a` = `up`, into `sink`.
fn one_function<U: Num, T: Num>(f: &Builtin, sink: Sink, (up, x): (&[U], &[T]), split: bool) {
    match f {
        Builtin::Relu => sink.pass((up, x), split, |u, x| {
            u.into() * crate::functions::step(x.into())
        }),
        _ => sink.pass((up, x), split, |u, x| u.into() * f.partial(&[x.into()], 0)),
    }
}

/// Where a term's one-pass adjoint goes.
enum Sink<'g> {
    /// Its f64 adjoint, added to.
    Wide(&'g mut Vec<f64>),
    /// Its f32 adjoint as its products read it (its only one), and the term's scale.
    Narrow(&'g mut Vec<f32>, f64),
}

impl Sink<'_> {
    /// `a(up[j], x[j])` at every grid element into the sink, in one pass.
    fn pass<U: Copy + Sync, T: Copy + Sync>(
        self,
        (up, x): (&[U], &[T]),
        split: bool,
        a: impl Fn(U, T) -> f64 + Sync + Send,
    ) {
        match self {
            Sink::Wide(gk) => accumulate(gk, (up, x), split, a),
            Sink::Narrow(nk, scale) => *nk = made((up, x), split, |u, x| (a(u, x) * scale) as f32),
        }
    }
}

/// Term `k`'s sink: its f32 adjoint where `narrow` is given, the term is read by f32
/// products, no adjoint has reached it yet and this one reaches it `once`; else its f64
/// adjoint.
fn sink<'g>(
    d: &DenseEquation,
    (k, once): (usize, bool),
    g: &'g mut [Vec<f64>],
    narrow: Option<&'g mut [Vec<f32>]>,
) -> Option<Sink<'g>> {
    let gk = g.get_mut(k)?;
    match (narrow.and_then(|n| n.get_mut(k)), f32_products(d, k)) {
        (Some(nk), Some(c)) if once && gk.is_empty() && nk.is_empty() => {
            Some(Sink::Narrow(nk, c.scale))
        }
        _ => Some(Sink::Wide(gk)),
    }
}

/// Term `k`'s plan where its products read its adjoint in f32 (an f32 product of dense
/// factors, not a relation's scatter).
pub(super) fn f32_products(d: &DenseEquation, k: usize) -> Option<&Contraction> {
    d.terms.get(k).filter(|c| c.single && c.sparse.is_none())
}

/// `a(up[j], x[j])` at every grid element, in blocks on the pool's workers when `split`.
fn made<U: Copy + Sync, T: Copy + Sync, V: Copy + Default + Send + Sync>(
    (up, x): (&[U], &[T]),
    split: bool,
    a: impl Fn(U, T) -> V + Sync + Send,
) -> Vec<V> {
    let len = up.len().min(x.len());
    split::filled((len, V::default()), split, |r| {
        let (up, x) = (&up[r.clone()], &x[r]);
        up.iter().zip(x).map(|(&u, &x)| a(u, x))
    })
}

/// `gₖ[j] += a(up[j], x[j])` at every grid element, or `gₖ[j] = a(up[j], x[j])` where `gₖ`
/// is still empty (zeros): one pass, in blocks on the pool's workers when `split`.
fn accumulate<U: Copy + Sync, T: Copy + Sync>(
    gk: &mut Vec<f64>,
    (up, x): (&[U], &[T]),
    split: bool,
    a: impl Fn(U, T) -> f64 + Sync + Send,
) {
    if gk.is_empty() {
        *gk = made((up, x), split, a);
        return;
    }
    split::each_block(gk, ADD_BLOCK, split, |first, block| {
        let (up, x) = (&up[first..], &x[first..]);
        for ((g, &u), &x) in block.iter_mut().zip(up).zip(x) {
            *g += a(u, x);
        }
    });
}
