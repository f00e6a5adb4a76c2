//! `softmax`/`lnorm` nodes lifted out of a dense equation's expression for its backward
//! pass: each becomes a term holding its values (the forward pass's, where it kept them),
//! and its adjoint passes through each row's Jacobian to its argument.

use super::term_adjoints::f32_products;
use super::terms::{operands, Term, Values};
use crate::eval::dense::rows::{self, Program};
use crate::eval::dense::{normalize_for, replace_normalize, split, Grid, KeptTerm, Num, Vars};
use crate::eval::EvalOptions;
use crate::functions::widest::{widest, Inlined};
use crate::functions::{RowStats, Structural};
use crate::plan::einsum::{DenseEquation, Expr};
use crate::plan::rows::RowProgram;
use crate::plan::schedule::JACOBIAN_BLOCK;
use std::borrow::Cow;

/// A `softmax`/`lnorm` lifted out of the expression: the term holding its value, and what
/// its Jacobian needs.
pub(super) struct Row {
    pub(super) term: usize,
    kind: Structural,
    axis: Option<usize>,
    pub(super) arg: RowProgram,
    input: Input,
}

/// What a lifted node's Jacobian reads of its argument: `lnorm`'s divisors.
enum Input {
    /// Nothing: softmax's Jacobian is in its values alone.
    None,
    /// The argument's values over the output, each row's divisor computed from them.
    Values(Vec<f64>),
    /// Each row's divisor as the forward pass computed it (from the same values).
    Divisors(Vec<f64>),
}

impl Row {
    /// The statistics the normalised row `index` is backpropagated with (`xs`: its
    /// argument's values, where [`Row::values`] holds them).
    fn stats(&self, index: usize, xs: &[f64]) -> RowStats {
        match &self.input {
            Input::Divisors(d) => {
                RowStats::lnorm_dividing_by(d.get(index).copied().unwrap_or(f64::NAN))
            }
            Input::Values(_) | Input::None => RowStats::for_backward(self.kind, xs),
        }
    }

    /// The argument's values over the output, where they were computed again (else empty).
    fn values(&self) -> &[f64] {
        match &self.input {
            Input::Values(v) => v,
            Input::Divisors(_) | Input::None => &[],
        }
    }
}

/// `e` with every `softmax`/`lnorm` replaced by a new term holding its value (the forward
/// pass's, where it kept it, else computed again as it computed it); `None` when it calls
/// an unregistered function.
pub(super) fn lift_normalize<'a>(
    d: &DenseEquation,
    e: &Expr,
    (terms, kept): (&mut Vec<Term<'a>>, Option<&'a [Option<KeptTerm>]>),
    rows: &mut Vec<Row>,
    o: &EvalOptions,
) -> Option<Expr> {
    let dims: Vec<usize> = d.out.iter().map(|&v| d.extents[v]).collect();
    let grid: usize = dims.iter().product();
    replace_normalize(e, &mut |kind, var, arg| {
        let arg = RowProgram::compile(arg)?;
        let axis = d.out.iter().position(|v| *v == var);
        let forward = kept
            .and_then(|k| k.get(terms.len()))
            .and_then(Option::as_ref)
            .filter(|(vars, data)| vars[..] == d.out[..] && data.len() == grid);
        // Softmax's Jacobian needs only its values; lnorm's needs its argument's too, or
        // the divisors the forward pass kept after its value.
        let needs_input = kind != Structural::Softmax;
        let divisors = kept
            .filter(|_| terms.len() == d.terms.len())
            .and_then(|k| k.get(terms.len() + 1))
            .and_then(Option::as_ref)
            .and_then(|(_, g)| match g {
                Grid::F64(v) if axis == d.out.len().checked_sub(1) => Some(v),
                _ => None,
            })
            .filter(|v| v.len() * dims.last().copied().unwrap_or(1) == grid);
        let (value, input) = match (forward, divisors) {
            (Some((_, y)), Some(divisors)) if needs_input => {
                (Values::from(y), Input::Divisors(divisors.clone()))
            }
            (Some((_, y)), _) if needs_input => (
                Values::from(y),
                Input::Values(rows::values(
                    &Program::bind(&arg, d, o)?,
                    d,
                    &operands(terms, o.threads),
                )),
            ),
            (Some((_, y)), _) => (Values::from(y), Input::None),
            (None, _) => {
                let operands = operands(terms, o.threads);
                let mut value = rows::values(&Program::bind(&arg, d, o)?, d, &operands);
                let input = if needs_input {
                    Input::Values(value.clone())
                } else {
                    Input::None
                };
                if let Some(axis) = axis {
                    normalize_for(d, &mut value, (&dims, axis), (kind, o.threads));
                }
                (Values::F64(Cow::Owned(value)), input)
            }
        };
        terms.push(Term {
            vars: Vars::from_slice(&d.out),
            values: value,
        });
        rows.push(Row {
            term: terms.len() - 1,
            kind,
            axis,
            arg,
            input,
        });
        Some(Expr::Term(terms.len() - 1))
    })
}

/// The adjoint of a lifted node's argument from the adjoint `g` of its value `y`, row by
/// row, in place of `g`: softmax `yᵩ(gᵩ − Σ g·y)`, lnorm `(gᵩ − mean g − yᵩ mean(g·y)) / σ`.
pub(super) fn row_adjoint(
    d: &DenseEquation,
    r: &Row,
    (y, g): (&Values, &mut [f64]),
    threads: usize,
) {
    match y {
        Values::F64(y) => rows_adjoint(d, r, (y, g), threads),
        Values::F32(y) => rows_adjoint(d, r, (y, g), threads),
    }
}

/// [`row_adjoint`] for values `y` of either type, each row read in f64.
fn rows_adjoint<T: Num>(d: &DenseEquation, r: &Row, (y, g): (&[T], &mut [f64]), threads: usize) {
    let Some(axis) = r.axis else {
        return;
    };
    let dims: Vec<usize> = d.out.iter().map(|&v| d.extents[v]).collect();
    let n = dims[axis].max(1);
    let stride: usize = dims[axis + 1..].iter().product::<usize>().max(1);
    let split = split::splits(threads, g.len());
    // Blocks of whole rows (each block's first element starts a group of `n · stride`).
    let per = (JACOBIAN_BLOCK.at * n * stride).min(g.len().max(1));
    if stride == 1 {
        // Rows are contiguous: read and written in place.
        split::each_block(g, per, split, |first, block| {
            let mut ys = vec![0.0; n];
            for (o, back) in block.chunks_exact_mut(n).enumerate() {
                let row = first + o * n..first + (o + 1) * n;
                let xs = r.values().get(row.clone()).unwrap_or(&[]);
                ys.iter_mut().zip(&y[row]).for_each(|(a, &b)| *a = b.into());
                r.stats(first / n + o, xs).backward_in_place(&ys, back);
            }
        });
        return;
    }
    let input = r.values();
    split::each_block(g, per, split, |first, block| {
        let (mut xs, mut ys, mut gs) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        for (o, group) in block.chunks_exact_mut(n * stride).enumerate() {
            let base = first + o * n * stride;
            for inner in 0..stride {
                for q in 0..n {
                    let at = base + inner + q * stride;
                    (ys[q], gs[q]) = (y[at].into(), group[inner + q * stride]);
                    if let Some(&x) = input.get(at) {
                        xs[q] = x;
                    }
                }
                let index = base / (n * stride) * stride + inner;
                r.stats(index, &xs).backward_in_place(&ys, &mut gs);
                for (q, &b) in gs.iter().enumerate() {
                    group[inner + q * stride] = b;
                }
            }
        }
    });
}

/// The plan's terms' f32 adjoints (empty for those none reaches) when the expression is
/// one lifted normalisation along the grid's last axis whose argument is linear in f32
/// terms laid out as the grid, each read once: each row's Jacobian applied to the upstream
/// row, then `((a · cₖ) · sₖ) as f32` for each term, in one pass over the rows instead of
/// [`row_adjoint`]'s and then [`term_adjoints`](super::term_adjoints::term_adjoints)' (the same operations in the same order).
/// `None` where that does not hold.
pub(super) fn one_pass(
    d: &DenseEquation,
    r: &Row,
    terms: &[Term],
    up: &Values,
    threads: usize,
) -> Option<Vec<Vec<f32>>> {
    let grid: usize = d.out.iter().map(|&v| d.extents[v]).product();
    let n = d.extents[*d.out.last()?].max(1);
    let y = &terms.get(r.term)?.values;
    let last = r.axis == Some(d.out.len() - 1);
    if !last || d.mask.is_some() || up.len() != grid || y.len() != grid || !grid.is_multiple_of(n) {
        return None;
    }
    let coefficients = r.arg.linear()?;
    let scales = coefficients
        .iter()
        .map(|&(k, _)| {
            let once = coefficients.iter().filter(|&&(j, _)| j == k).count() == 1;
            let c = f32_products(d, k).filter(|_| once)?;
            let t = terms.get(k).filter(|t| t.vars[..] == d.out[..])?;
            (t.vars.iter().map(|&v| d.extents[v]).product::<usize>() == grid).then_some(c.scale)
        })
        .collect::<Option<Vec<f64>>>()?;
    // Row `at`'s adjoint of the argument, into `back` (`ys`: room for its values), its
    // loops on the widest vectors.
    let adjoint = |at: usize, (ys, back): (&mut [f64], &mut [f64])| {
        widest(Inlined(|| {
            let row = at * n..(at + 1) * n;
            y.widen_into(row.clone(), ys);
            up.widen_into(row.clone(), back);
            let xs = r.values().get(row).unwrap_or(&[]);
            r.stats(at, xs).backward_in_place(ys, back);
        }))
    };
    let narrowed = |b: f64, c: f64, s: f64| ((b * c) * s) as f32;
    let mut outs: Vec<Vec<f32>> = vec![Vec::new(); d.terms.len()];
    let (mut ys, mut back) = (vec![0.0; n], vec![0.0; n]);
    if !split::splits(threads, grid) {
        for &(k, _) in &coefficients {
            outs[k].reserve_exact(grid);
        }
        for at in 0..grid / n {
            adjoint(at, (&mut ys, &mut back));
            for (&(k, c), &s) in coefficients.iter().zip(&scales) {
                let out = &mut outs[k];
                widest(Inlined(|| {
                    out.extend(back.iter().map(|&b| narrowed(b, c, s)))
                }));
            }
        }
        return Some(outs);
    }
    for &(k, _) in &coefficients {
        outs[k] = split::zeros(grid, threads);
    }
    // Blocks of rows, each with its piece of every term's adjoint, on the pool's workers.
    let per = JACOBIAN_BLOCK.at * n;
    let mut blocks: Vec<Vec<&mut [f32]>> = (0..grid.div_ceil(per)).map(|_| Vec::new()).collect();
    let mut by_term: Vec<Option<&mut Vec<f32>>> = outs.iter_mut().map(Some).collect();
    for &(k, _) in &coefficients {
        let out = by_term.get_mut(k).and_then(Option::take)?;
        for (b, chunk) in blocks.iter_mut().zip(out.chunks_mut(per)) {
            b.push(chunk);
        }
    }
    use rayon::prelude::*;
    blocks
        .into_par_iter()
        .enumerate()
        .for_each(|(i, mut block)| {
            let (mut ys, mut back) = (vec![0.0; n], vec![0.0; n]);
            for o in 0..block.first().map_or(0, |b| b.len() / n) {
                adjoint(i * JACOBIAN_BLOCK.at + o, (&mut ys, &mut back));
                for ((out, &(_, c)), &s) in block.iter_mut().zip(&coefficients).zip(&scales) {
                    let out = &mut out[o * n..(o + 1) * n];
                    widest(Inlined(|| {
                        for (x, &b) in out.iter_mut().zip(&back) {
                            *x = narrowed(b, c, s);
                        }
                    }));
                }
            }
        });
    Some(outs)
}
