//! Gradients of a dense equation (§12), by the same kernels as its forward pass.
//!
//! For `Y[out] = expr(T₁, …, Tₙ)` with each term `Tₖ = s · Σ Π factors`, the adjoint of
//! each term is `Gₖ = dY · ∂expr/∂Tₖ`, one pass over the output; the gradient of a factor is
//! then the einsum of `s · Gₖ` with the term's other factors onto that factor's variables
//! (`dW[h, i] = Σₑ dPre[e, h] X[e, i]`), run as the same batched matrix products.

use super::pending::Pending;
use crate::eval::dense::rows::{self, Program};
use crate::eval::dense::split;
use crate::eval::dense::{
    factor_operand, fits, normalize_for, permute, placement, reduce, replace_normalize,
    sparse_operands, subtree_from, term, widened, Grid, KeptTerm, Num, Operand, Placement,
    TupleWalk, Vars,
};
use crate::eval::EvalOptions;
use crate::functions::{Builtin, Structural};
use crate::plan::einsum::{gradient_term, Contraction, DenseEquation, Expr, Factor, Path};
use crate::plan::rows::{RowOp, RowProgram};
use crate::semantics::VarId;
use crate::tensor::Tensor;
use std::borrow::Cow;

/// The adjoint of an equation's target, as its backward pass reads it.
pub(crate) enum Upstream<'a> {
    /// The whole target's adjoint, row-major over the target.
    Target(&'a [f64]),
    /// Only the elements the equation's grid writes, in grid order: a window's gradient as
    /// it came ([`Pending`]), for an equation that writes a window and sums nothing after
    /// its expression.
    Grid(&'a Grid),
}

/// A term's values as the backward pass reads them: f64, or f32 as an f32 forward pass kept
/// them, widened only for a pass that reads every term in f64 ([`operands`]).
enum Values<'a> {
    F64(Cow<'a, [f64]>),
    F32(&'a [f32]),
}

impl<'a> Values<'a> {
    fn len(&self) -> usize {
        match self {
            Values::F64(v) => v.len(),
            Values::F32(v) => v.len(),
        }
    }

    /// The values in f64, widened (on the pool's workers) if they are f32.
    fn wide(&self, threads: usize) -> Cow<'_, [f64]> {
        match self {
            Values::F64(v) => Cow::Borrowed(v),
            Values::F32(v) => Cow::Owned(widened(v, 1.0, threads)),
        }
    }

    /// Elements `range`, widened, into `out`.
    fn widen_into(&self, range: std::ops::Range<usize>, out: &mut [f64]) {
        match self {
            Values::F64(v) => out.copy_from_slice(&v[range]),
            Values::F32(v) => out
                .iter_mut()
                .zip(&v[range])
                .for_each(|(o, &x)| *o = x.into()),
        }
    }

    /// [`Values::wide`], owned.
    fn into_wide(self, threads: usize) -> Vec<f64> {
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
struct Term<'a> {
    vars: Vars,
    values: Values<'a>,
}

impl<'a> Term<'a> {
    /// A term the forward pass kept.
    fn kept(vars: &[VarId], values: &'a Grid) -> Term<'a> {
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
fn operands<'t>(terms: &'t [Term], threads: usize) -> Vec<Operand<'t>> {
    let operand = |t: &'t Term| Operand {
        vars: t.vars.clone(),
        data: t.values.wide(threads),
    };
    terms.iter().map(operand).collect()
}

/// Adds d(loss)/d(factor) to `adj` for every dense factor whose tensor has a buffer there,
/// given `upstream` = d(loss)/d(target) and the terms the forward pass kept, if it did;
/// gradients of windows of still empty adjoints go to `pending` where there is one. The
/// caller has asked [`covers`] first, once for every step of an index recursion or for every
/// part of an equation before any part adds: this path does not take softmax/lnorm nested
/// in each other, a relation factor taking a gradient, a tensor of defined elements or a
/// shifted relation as a factor, or inputs not as planned, and the caller then uses the
/// reference loops. `false`, with nothing added, if the normalizations cannot be lifted
/// after all.
pub(crate) fn backward_dense(
    d: &DenseEquation,
    values: &[Tensor],
    upstream: Upstream,
    o: &EvalOptions,
    (adj, mut pending): (&mut [Option<Vec<f64>>], Option<&mut Pending>),
    kept: Option<&[Option<KeptTerm>]>,
) -> bool {
    let threads = o.threads.max(1);
    // Terms the forward pass kept are read back; the others (reads of a tensor) are cheap,
    // and those whose values the backward pass does not read are not computed, unless a
    // normalisation's value must be computed again from them (the forward pass kept none).
    let normalized = kept
        .and_then(|t| t.get(d.terms.len()))
        .is_some_and(Option::is_some);
    let skips =
        |k: usize| d.read_back.get(k) == Some(&false) && (normalized || !d.expr.normalizes());
    let mut terms: Vec<Term> = d
        .terms
        .iter()
        .enumerate()
        .map(
            |(k, c)| match kept.and_then(|t| t.get(k)).and_then(Option::as_ref) {
                Some((vars, data)) => Term::kept(vars, data),
                None if skips(k) => Term {
                    vars: Vars::from_slice(&c.out),
                    values: Values::F64(Cow::Borrowed(&[])),
                },
                None => Term::from(term(c, values, threads)),
            },
        )
        .collect();
    // softmax/lnorm nodes become terms holding their values; their adjoints are then passed
    // through each row's Jacobian to their arguments.
    let mut lifted: Vec<Row> = Vec::new();
    let Some(expr) = lift_normalize(d, &d.expr, (&mut terms, kept), &mut lifted, o) else {
        return false;
    };
    let compiled = match &d.program {
        Some(planned) => Cow::Borrowed(planned),
        None => match RowProgram::compile(&expr) {
            Some(c) => Cow::Owned(c),
            None => return false,
        },
    };
    let Some(program) = Program::bind(&compiled, o) else {
        return false;
    };
    // Variables summed after the expression: every element of a block gets its sum's adjoint.
    let block: usize = d.summed.iter().map(|&v| d.extents[v]).product();
    let grid: usize = d.out.iter().map(|&v| d.extents[v]).product();
    // Each term's length over its variables (its values may not have been computed).
    let len = |t: &Term| t.vars.iter().map(|&v| d.extents[v]).product::<usize>();
    // An expression that is one term laid out as the grid (`Q[…] = WQ[…] X[…]`, or a
    // softmax once lifted) passes the adjoint on as it is.
    let whole = match compiled.ops[..] {
        [RowOp::Term(k)] => terms
            .get(k)
            .filter(|t| d.mask.is_none() && t.vars[..] == d.out[..] && len(t) == grid)
            .map(|_| k),
        _ => None,
    };
    // Of an f32 term, the products read it rounded to f32: it is gathered, scaled and
    // rounded in one pass, the other terms (which the expression does not read) adding
    // nothing.
    let single = whole.and_then(|k| d.terms.get(k).map(|c| (k, c)));
    if let Some((k, c)) = single.filter(|(_, c)| c.single && c.sparse.is_none() && block == 1) {
        let narrow = |x: f64| (x * c.scale) as f32;
        let g: Option<Cow<[f32]>> = match upstream {
            // A window's gradient held as it came is already what the products read.
            Upstream::Grid(Grid::F32(u)) if c.scale == 1.0 => Some(Cow::Borrowed(u)),
            Upstream::Grid(Grid::F32(u)) => {
                Some(split::mapped(u, |&x| narrow(x.into()), threads).into())
            }
            Upstream::Grid(Grid::F64(u)) => Some(split::mapped(u, |&x| narrow(x), threads).into()),
            Upstream::Target(u) => {
                let at = match d.scatter {
                    Some(_) => Some(placement(d)),
                    None => (u.len() == grid).then_some(Placement::Same),
                };
                at.map(|at| Cow::Owned(at.gather_as(grid, u, 0.0, narrow, threads)))
            }
        };
        if let Some(g) = g {
            let sums = (adj, pending);
            factor_gradients(c, &terms[k].vars, (&[], Some(g)), values, threads, sums);
            return true;
        }
    }
    let upstream: Values = match upstream {
        Upstream::Grid(g) => Values::from(g),
        // Each grid element was added at its left-hand-side position: it gets that
        // position's adjoint (none where it was skipped).
        Upstream::Target(u) if d.scatter.is_some() => {
            Values::F64(Cow::Owned(placement(d).gather(grid, u, 0.0, threads)))
        }
        Upstream::Target(u) if block == 1 => Values::F64(Cow::Borrowed(u)),
        Upstream::Target(u) => Values::F64(Cow::Owned(
            u.iter()
                .flat_map(|&a| std::iter::repeat_n(a, block))
                .collect(),
        )),
    };
    let whole = whole.filter(|_| upstream.len() == grid);
    // Each term's adjoint: empty, standing for zeros, until an adjoint reaches it.
    let mut g: Vec<Vec<f64>> = vec![Vec::new(); terms.len()];
    // An f32 term's adjoint made in the pass that gives it, where that pass is the only
    // one that reaches the plan's terms: the expression's own when nothing was lifted, the
    // lifted node's argument when the expression is that node alone.
    let mut narrow: Vec<Vec<f32>> = vec![Vec::new(); d.terms.len()];
    let only = whole.is_some_and(|k| k >= d.terms.len()) && lifted.len() == 1;
    let at_once = match (only, lifted.first()) {
        (true, Some(r)) => one_pass(d, r, &terms, &upstream, threads),
        _ => None,
    };
    match whole {
        Some(_) if at_once.is_some() => {
            narrow = at_once.unwrap_or_default();
            lifted.clear();
        }
        Some(k) => g[k] = upstream.into_wide(threads),
        None => {
            let narrow = lifted.is_empty().then_some(&mut narrow[..]);
            let program = (&*compiled, &program);
            term_adjoints(program, (d, &terms), &upstream, (&mut g, narrow), threads);
        }
    }
    for r in lifted {
        // The lifted term's adjoint is read only here: it becomes its argument's in place.
        let mut adjoint = std::mem::take(&mut g[r.term]);
        if adjoint.is_empty() {
            continue;
        }
        row_adjoint(d, &r, (&terms[r.term].values, &mut adjoint), threads);
        let Some(arg) = Program::bind(&r.arg, o) else {
            return false;
        };
        let narrow = only.then_some(&mut narrow[..]);
        term_adjoints(
            (&r.arg, &arg),
            (d, &terms),
            &Values::F64(Cow::Borrowed(&adjoint)),
            (&mut g, narrow),
            threads,
        );
    }
    for (((c, gk), nk), t) in d.terms.iter().zip(g).zip(narrow).zip(&terms) {
        if !nk.is_empty() {
            let sums = (&mut *adj, pending.as_deref_mut());
            factor_gradients(c, &t.vars, (&[], Some(nk.into())), values, threads, sums);
            continue;
        }
        // No adjoint reached the term: it passes nothing on.
        if gk.is_empty() {
            continue;
        }
        // The products of an f32 term read its adjoint scaled and rounded, made in one pass.
        if c.single && c.sparse.is_none() {
            let g = split::mapped(&gk, |&x| (x * c.scale) as f32, threads).into();
            let sums = (&mut *adj, pending.as_deref_mut());
            factor_gradients(c, &t.vars, (&[], Some(g)), values, threads, sums);
            continue;
        }
        let mut gk = gk;
        if c.scale != 1.0 {
            gk.iter_mut().for_each(|x| *x *= c.scale);
        }
        match &c.sparse {
            None => {
                let sums = (&mut *adj, pending.as_deref_mut());
                factor_gradients(c, &t.vars, (&gk, None), values, threads, sums);
            }
            Some(r) => {
                let crate::tensor::Storage::Relation(rel) = &values[r.tensor].storage else {
                    continue;
                };
                let parts = sparse_operands::<f64>(c, values, threads);
                let gparts = scatter_back(c, &r.vars, rel, &parts, &gk);
                if parts.len() == c.factors.len() {
                    // One operand per factor, each the factor summed over what only it
                    // reads: its gradient spreads back over those variables.
                    for ((f, part), gp) in c.factors.iter().zip(&parts).zip(gparts) {
                        let grad = Operand {
                            vars: Vars::from_slice(&part.vars),
                            data: gp.into(),
                        };
                        let (order, onto) = f.memory_order();
                        let grad = permute(grad, &onto, &c.extents, threads);
                        let sums = (&mut *adj, pending.as_deref_mut());
                        add_factor(sums, f, (&order, &c.extents, values), &grad.data, threads);
                    }
                } else if let (Some(part), Some(gp)) = (parts.first(), gparts.into_iter().next()) {
                    let sums = (&mut *adj, pending.as_deref_mut());
                    factor_gradients(c, &part.vars, (&gp, None), values, threads, sums);
                }
            }
        }
    }
    true
}

/// Adds to `g` (each term's adjoint, laid out as the term; an empty one stands for zeros)
/// the adjoint each term of `program` gets from `up`, the adjoint of its value at every grid
/// element. Where the program is linear in terms laid out as the grid (`Q K / 8 - 1e9 (q >
/// p)`, `W H + X`), that is `cₖ · up`, written (or added) in one pass; otherwise the rows
/// pass back through each operation. With `narrow` (no other adjoint will reach the terms),
/// an f32 term's one-pass adjoint is written there instead, scaled and rounded to f32 as its
/// products read it, in the same pass.
fn term_adjoints(
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
        a: impl Fn(U, T) -> f64 + Sync,
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
    let f32_term = d.terms.get(k).filter(|c| c.single && c.sparse.is_none());
    match (narrow.and_then(|n| n.get_mut(k)), f32_term) {
        (Some(nk), Some(c)) if once && gk.is_empty() && nk.is_empty() => {
            Some(Sink::Narrow(nk, c.scale))
        }
        _ => Some(Sink::Wide(gk)),
    }
}

/// `a(up[j], x[j])` at every grid element, in blocks on the pool's workers when `split`.
fn made<U: Copy + Sync, T: Copy + Sync, V: Send>(
    (up, x): (&[U], &[T]),
    split: bool,
    a: impl Fn(U, T) -> V + Sync,
) -> Vec<V> {
    match split {
        true => {
            use rayon::prelude::*;
            let pairs = up.par_iter().zip(x.par_iter());
            pairs.map(|(&u, &x)| a(u, x)).collect()
        }
        false => up.iter().zip(x).map(|(&u, &x)| a(u, x)).collect(),
    }
}

/// `gₖ[j] += a(up[j], x[j])` at every grid element, or `gₖ[j] = a(up[j], x[j])` where `gₖ`
/// is still empty (zeros): one pass, in blocks on the pool's workers when `split`.
fn accumulate<U: Copy + Sync, T: Copy + Sync>(
    gk: &mut Vec<f64>,
    (up, x): (&[U], &[T]),
    split: bool,
    a: impl Fn(U, T) -> f64 + Sync,
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

/// Whether [`backward_dense`] takes `d` with these values (it then returns `true`): the
/// checks it makes before adding anything, so a caller can choose another path first. They
/// do not depend on where windows lie, so one step of an index recursion answers for all.
pub(crate) fn covers(d: &DenseEquation, values: &[Tensor], o: &EvalOptions) -> bool {
    // The tuples of a tensor of defined elements weigh by their values, which the scatter's
    // backward pass does not apply.
    let weighted = d.terms.iter().flat_map(|c| &c.sparse).any(|f| {
        !f.shift.is_empty()
            || !matches!(
                values[f.tensor].storage,
                crate::tensor::Storage::Relation(_)
            )
    });
    if weighted || nested_normalize(&d.expr, false) || !fits(d, values, o.max_memory) {
        return false;
    }
    let binds = |p: &RowProgram| Program::bind(p, o).is_some();
    let mut lifted = d.terms.len();
    let mut arguments = true;
    let expr = replace_normalize(&d.expr, &mut |_, _, arg| {
        arguments &= RowProgram::compile(arg).is_some_and(|a| binds(&a));
        lifted += 1;
        Some(Expr::Term(lifted - 1))
    });
    let whole = match (&d.program, expr) {
        (Some(planned), _) => binds(planned),
        (None, Some(e)) => RowProgram::compile(&e).is_some_and(|c| binds(&c)),
        (None, None) => false,
    };
    arguments && whole
}

/// Adds to each factor's adjoint the einsum of the term's adjoint `g` (over `vars`) with
/// the term's other factors, onto that factor's variables. An f32 term's adjoint may come
/// already rounded to f32 (`narrow`; `g` is then not read).
fn factor_gradients(
    c: &Contraction,
    vars: &[VarId],
    (g, mut narrow): (&[f64], Option<Cow<[f32]>>),
    values: &[Tensor],
    threads: usize,
    (adj, mut pending): (&mut [Option<Vec<f64>>], Option<&mut Pending>),
) {
    for (j, f) in c.factors.iter().enumerate() {
        if adj[f.tensor].is_none() {
            continue;
        }
        // Planned once for the term's own adjoint; over other variables (a relation's
        // operands), planned here.
        let planned = c.gradients.get(j).filter(|_| vars == c.out.as_slice());
        let fresh;
        let grad = match planned {
            Some(g) => g,
            None => {
                fresh = gradient_term(c, j, vars);
                &fresh
            }
        };
        let Some(path) = &grad.path else {
            continue;
        };
        let (order, onto) = f.memory_order();
        let sums = (&mut *adj, pending.as_deref_mut());
        if grad.single {
            let g = narrow.get_or_insert_with(|| g.iter().map(|&x| x as f32).collect());
            let acc = gradient::<f32>(grad, path, &onto, g, values, threads);
            add_factor(sums, f, (&order, &c.extents, values), &acc.data, threads);
        } else {
            let acc = gradient::<f64>(grad, path, &onto, g, values, threads);
            add_factor(sums, f, (&order, &c.extents, values), &acc.data, threads);
        }
    }
}

/// Adds a factor's gradient (over its variables in `order`, positions in `f.vars`) to its
/// tensor's adjoint: element for element, or for a window each element at the position it
/// was read from, overlapping windows adding up (col2im), in row-major order of `g`. An
/// adjoint still empty (zeros no gradient has reached) that the gradient covers whole is
/// written from it, in one pass; a window of one is held as it came where `pending` can
/// hold it; otherwise its zeros (and the windows held) are made first.
fn add_factor<T: Num>(
    (adj, pending): (&mut [Option<Vec<f64>>], Option<&mut Pending>),
    f: &Factor,
    (order, extents, values): (&[usize], &[usize], &[Tensor]),
    g: &[T],
    threads: usize,
) {
    let Some(buf) = adj.get_mut(f.tensor).and_then(Option::as_mut) else {
        return;
    };
    let at = match &f.window {
        None => Placement::Same,
        Some(w) => Placement::Strided {
            base: w.offset as i64,
            steps: order.iter().map(|&i| w.strides[i]).collect(),
            dims: order.iter().map(|&i| extents[f.vars[i]]).collect(),
        },
    };
    if buf.is_empty() {
        let len = values[f.tensor].shape.iter().product();
        if let Some(pending) = pending {
            if pending.hold(f.tensor, &at, len, g, threads) {
                return;
            }
            pending.settle(f.tensor, buf, len, threads);
        }
    }
    if buf.is_empty() {
        let len = values[f.tensor].shape.iter().product();
        if matches!(at, Placement::Same) && g.len() == len {
            *buf = widened(g, 1.0, threads);
            return;
        }
        *buf = split::zeros(len, threads);
    }
    add_placed(buf, &at, g, threads);
}

/// Adds `g` (in grid order) to `buf` where `at` places each element, skipping those
/// outside it. Runs that lie apart and in order (a layer's window) are added on the pool's
/// workers when large: each element then receives one addition, as on one thread; others
/// (overlapping windows) are added in grid order.
pub(crate) fn add_placed<T: Num>(buf: &mut [f64], at: &Placement, g: &[T], threads: usize) {
    fn add<T: Num>(dst: &mut [f64], src: &[T]) {
        dst.iter_mut().zip(src).for_each(|(b, &x)| *b += x.into());
    }
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    if at
        .runs(g.len(), &mut |i, a, n| runs.push((i, a, n)))
        .is_none()
    {
        at.each(g.len(), &mut |i, a| {
            if let (Some(b), Some(&x)) = (buf.get_mut(a), g.get(i)) {
                *b += x.into();
            }
        });
        return;
    }
    // Each run's own slice of `buf` where they lie apart; long runs in blocks.
    let spans = runs.iter().map(|&(_, a, n)| (a, n));
    let split = split::splits(threads, g.len());
    if let Some(slices) = crate::tensor::spans_mut(buf, spans).filter(|_| split) {
        let mut pieces: Vec<(&mut [f64], &[T])> = Vec::with_capacity(runs.len());
        for (piece, &(i, _, _)) in slices.into_iter().zip(&runs) {
            if let Some(src) = g.get(i..i + piece.len()) {
                for (d, s) in piece.chunks_mut(ADD_BLOCK).zip(src.chunks(ADD_BLOCK)) {
                    pieces.push((d, s));
                }
            }
        }
        // Short runs go to a worker several at a time.
        let per = (ADD_BLOCK / (g.len() / pieces.len().max(1)).max(1)).max(1);
        use rayon::prelude::*;
        pieces
            .into_par_iter()
            .with_min_len(per)
            .for_each(|(d, s)| add(d, s));
        return;
    }
    for (i, a, n) in runs {
        if let (Some(dst), Some(src)) = (buf.get_mut(a..), g.get(i..i + n)) {
            let take = n.min(dst.len());
            add(&mut dst[..take], &src[..take]);
        }
    }
}

/// Elements of a block of [`add_placed`] split across threads.
const ADD_BLOCK: usize = 1 << 14;

/// A factor's gradient einsum (`gradient_term`: the adjoint `g` as factor 0, then the
/// term's other factors) onto `onto`, in `T`.
fn gradient<'a, T: Num>(
    grad: &Contraction,
    path: &Path,
    onto: &[VarId],
    g: &'a [T],
    values: &'a [Tensor],
    threads: usize,
) -> Operand<'a, T> {
    let leaf = |k: usize| {
        let f = &grad.factors[k];
        match k {
            0 => Operand {
                vars: Vars::from_slice(&f.vars),
                data: Cow::Borrowed(g),
            },
            _ => factor_operand(f, values, &grad.extents, threads),
        }
    };
    let acc = subtree_from(grad, path, &leaf, threads);
    permute(
        reduce(acc, onto, &grad.extents),
        onto,
        &grad.extents,
        threads,
    )
}

/// The transpose of `scatter`: given the adjoint `g` of the term (over `c.out`), the
/// adjoint of each operand, tuple by tuple.
fn scatter_back(
    c: &Contraction,
    rel_vars: &[VarId],
    rel: &crate::tensor::Relation,
    parts: &[Operand],
    g: &[f64],
) -> Vec<Vec<f64>> {
    let mut grads: Vec<Vec<f64>> = parts.iter().map(|p| vec![0.0; p.data.len()]).collect();
    TupleWalk::new(c, rel_vars, parts).run(rel, 0..rel.len(), &mut |_, at_out, at, whole| {
        if whole {
            return false;
        }
        let up = g[at_out];
        if up != 0.0 {
            for (k, grad) in grads.iter_mut().enumerate() {
                let others: f64 = parts
                    .iter()
                    .zip(at)
                    .enumerate()
                    .filter(|&(j, _)| j != k)
                    .map(|(_, (o, &i))| o.data[i])
                    .product();
                grad[at[k]] += up * others;
            }
        }
        true
    });
    grads
}

/// Whether a `softmax`/`lnorm` lies inside another (this path handles one level).
fn nested_normalize(e: &Expr, inside: bool) -> bool {
    match e {
        Expr::Normalize(_, _, x) => inside || nested_normalize(x, true),
        Expr::Term(_) | Expr::Const(_) | Expr::Var(_) => false,
        Expr::Neg(x) | Expr::Not(x) => nested_normalize(x, inside),
        Expr::Product(fs) => fs.iter().any(|(_, f)| nested_normalize(f, inside)),
        Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => {
            nested_normalize(a, inside) || nested_normalize(b, inside)
        }
        Expr::Call(_, args) => args.iter().any(|a| nested_normalize(a, inside)),
    }
}

/// A `softmax`/`lnorm` lifted out of the expression: the term holding its value, and what
/// its Jacobian needs.
struct Row {
    term: usize,
    kind: Structural,
    axis: Option<usize>,
    arg: RowProgram,
    /// The argument's values over the output, where the Jacobian needs them (`lnorm`'s
    /// divisor); empty for softmax, whose Jacobian is in its values alone.
    input: Vec<f64>,
}

/// `e` with every `softmax`/`lnorm` replaced by a new term holding its value (the forward
/// pass's, where it kept it, else computed again as it computed it); `None` when it calls
/// an unregistered function.
fn lift_normalize<'a>(
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
        // Softmax's Jacobian needs only its values; lnorm's needs its argument's too.
        let needs_input = kind != Structural::Softmax;
        let (value, input) = match forward {
            Some((_, y)) if needs_input => (
                Values::from(y),
                rows::values(&Program::bind(&arg, o)?, d, &operands(terms, o.threads)),
            ),
            Some((_, y)) => (Values::from(y), Vec::new()),
            None => {
                let operands = operands(terms, o.threads);
                let mut value = rows::values(&Program::bind(&arg, o)?, d, &operands);
                let input = if needs_input {
                    value.clone()
                } else {
                    Vec::new()
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
fn row_adjoint(d: &DenseEquation, r: &Row, (y, g): (&Values, &mut [f64]), threads: usize) {
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
    let stats = |xs: &[f64]| crate::functions::RowStats::for_backward(r.kind, xs);
    let split = split::splits(threads, g.len());
    // Blocks of whole rows (each block's first element starts a group of `n · stride`).
    let per = (ROWS_PER_BLOCK * n * stride).min(g.len().max(1));
    if stride == 1 {
        // Rows are contiguous: read and written in place.
        split::each_block(g, per, split, |first, block| {
            let mut ys = vec![0.0; n];
            for (o, back) in block.chunks_exact_mut(n).enumerate() {
                let row = first + o * n..first + (o + 1) * n;
                let xs = r.input.get(row.clone()).unwrap_or(&[]);
                ys.iter_mut().zip(&y[row]).for_each(|(a, &b)| *a = b.into());
                stats(xs).backward_in_place(&ys, back);
            }
        });
        return;
    }
    let input = !r.input.is_empty();
    split::each_block(g, per, split, |first, block| {
        let (mut xs, mut ys, mut gs) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        for (o, group) in block.chunks_exact_mut(n * stride).enumerate() {
            let base = first + o * n * stride;
            for inner in 0..stride {
                for q in 0..n {
                    let at = base + inner + q * stride;
                    (ys[q], gs[q]) = (y[at].into(), group[inner + q * stride]);
                    if input {
                        xs[q] = r.input[at];
                    }
                }
                stats(&xs).backward_in_place(&ys, &mut gs);
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
/// [`row_adjoint`]'s and then [`term_adjoints`]' (the same operations in the same order).
/// `None` where that does not hold.
fn one_pass(
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
            let c = d
                .terms
                .get(k)
                .filter(|c| c.single && c.sparse.is_none() && once)?;
            let t = terms.get(k).filter(|t| t.vars[..] == d.out[..])?;
            (t.vars.iter().map(|&v| d.extents[v]).product::<usize>() == grid).then_some(c.scale)
        })
        .collect::<Option<Vec<f64>>>()?;
    // Row `at`'s adjoint of the argument, into `back` (`ys`: room for its values).
    let adjoint = |at: usize, (ys, back): (&mut [f64], &mut [f64])| {
        let row = at * n..(at + 1) * n;
        y.widen_into(row.clone(), ys);
        up.widen_into(row.clone(), back);
        let xs = r.input.get(row).unwrap_or(&[]);
        crate::functions::RowStats::for_backward(r.kind, xs).backward_in_place(ys, back);
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
                outs[k].extend(back.iter().map(|&b| narrowed(b, c, s)));
            }
        }
        return Some(outs);
    }
    for &(k, _) in &coefficients {
        outs[k] = split::zeros(grid, threads);
    }
    // Blocks of rows, each with its piece of every term's adjoint, on the pool's workers.
    let per = ROWS_PER_BLOCK * n;
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
                adjoint(i * ROWS_PER_BLOCK + o, (&mut ys, &mut back));
                for ((out, &(_, c)), &s) in block.iter_mut().zip(&coefficients).zip(&scales) {
                    let out = &mut out[o * n..(o + 1) * n];
                    for (x, &b) in out.iter_mut().zip(&back) {
                        *x = narrowed(b, c, s);
                    }
                }
            }
        });
    Some(outs)
}

/// Groups of rows a block of [`row_adjoint`] takes.
const ROWS_PER_BLOCK: usize = 64;

#[cfg(test)]
mod tests {
    use super::{add_placed, Placement};

    /// Runs that lie apart are added on two threads with the bits of one; overlapping ones
    /// (a window read twice) add up in grid order.
    #[test]
    fn a_split_add_into_a_window_matches_one_thread() {
        let (rows, run) = (64, 4096);
        let g: Vec<f32> = (0..rows * run).map(|i| (i % 97) as f32 / 7.0).collect();
        let at = Placement::Strided {
            base: 5,
            steps: vec![2 * run as i64, 1],
            dims: vec![rows, run],
        };
        let start: Vec<f64> = (0..2 * rows * run + 5).map(|i| i as f64 / 3.0).collect();
        let mut one = start.clone();
        add_placed(&mut one, &at, &g, 1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let mut two = start.clone();
        pool.install(|| add_placed(&mut two, &at, &g, 2));
        assert!(one
            .iter()
            .zip(&two)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!(one[5], start[5] + f64::from(g[0]));
        assert_eq!(one[5 + run], start[5 + run]);

        // Two rows of 3 overlapping by one element, the second partly past the end.
        let overlap = Placement::Strided {
            base: 0,
            steps: vec![2, 1],
            dims: vec![2, 3],
        };
        let mut buf = vec![0.0; 4];
        add_placed(&mut buf, &overlap, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], 2);
        assert_eq!(buf, vec![1.0, 2.0, 7.0, 5.0]);
    }
}
