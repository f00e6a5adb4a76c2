//! Gradients of a dense equation (§12), by the same kernels as its forward pass.
//!
//! For `Y[out] = expr(T₁, …, Tₙ)` with each term `Tₖ = s · Σ Π factors`, the adjoint of
//! each term is `Gₖ = dY · ∂expr/∂Tₖ`, one pass over the output; the gradient of a factor is
//! then the einsum of `s · Gₖ` with the term's other factors onto that factor's variables
//! (`dW[h, i] = Σₑ dPre[e, h] X[e, i]`), run as the same batched matrix products.

use super::lifted::{lift_normalize, one_pass, row_adjoint, Row};
use super::pending::Pending;
use super::term_adjoints::term_adjoints;
use super::terms::{Term, Values};
use crate::eval::dense::rows::Program;
use crate::eval::dense::split;
use crate::eval::dense::{
    factor_operand, fits, permute, placement, reduce, replace_normalize, sparse_operands,
    subtree_from, term, widened, Grid, KeptTerm, Num, Operand, Placement, TupleWalk, Vars,
};
use crate::eval::EvalOptions;
use crate::functions::Structural;
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
    let mut terms = kept_terms(d, values, kept, threads);
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
    let Some(program) = Program::bind(&compiled, d, o) else {
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
    let single = whole.and_then(|k| d.terms.get(k).map(|c| (k, c)));
    if let Some((k, c)) = single.filter(|(_, c)| c.single && c.sparse.is_none() && block == 1) {
        if let Some(g) = rounded_upstream(d, c, &upstream, grid, threads) {
            let sums = (adj, pending);
            factor_gradients(c, &terms[k].vars, (&[], Some(g)), values, threads, sums);
            return true;
        }
    }
    let upstream = grid_upstream(d, upstream, (block, grid), threads);
    let whole = whole.filter(|_| upstream.len() == grid);
    let at = Adjoints {
        d,
        o,
        terms: &terms,
        program: (&*compiled, &program),
    };
    let Some((g, narrow)) = at.of_terms(whole, lifted, upstream) else {
        return false;
    };
    for (((c, gk), nk), t) in d.terms.iter().zip(g).zip(narrow).zip(&terms) {
        let sums = (&mut *adj, pending.as_deref_mut());
        to_factors(c, (&t.vars, gk, nk), values, threads, sums);
    }
    true
}

/// The equation's terms as the backward pass reads them. Terms the forward pass kept are
/// read back; the others (reads of a tensor) are cheap, and those whose values the backward
/// pass does not read are not computed, unless a normalisation's value must be computed
/// again from them: the forward pass kept none, or for an `lnorm`, kept no divisors (which
/// its Jacobian reads otherwise).
fn kept_terms<'a>(
    d: &'a DenseEquation,
    values: &'a [Tensor],
    kept: Option<&'a [Option<KeptTerm>]>,
    threads: usize,
) -> Vec<Term<'a>> {
    let after = |i: usize| {
        kept.and_then(|t| t.get(d.terms.len() + i))
            .is_some_and(Option::is_some)
    };
    let softmax = matches!(d.expr, Expr::Normalize(Structural::Softmax, ..));
    let normalized = after(0) && (softmax || after(1));
    let skips =
        |k: usize| d.read_back.get(k) == Some(&false) && (normalized || !d.expr.normalizes());
    d.terms
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
        .collect()
}

/// Of an f32 term that is the whole expression, the adjoint its products read, rounded to
/// f32 and scaled, gathered in one pass (the other terms, which the expression does not
/// read, adding nothing); `None` where the upstream does not cover the grid.
fn rounded_upstream<'u>(
    d: &DenseEquation,
    c: &Contraction,
    upstream: &Upstream<'u>,
    grid: usize,
    threads: usize,
) -> Option<Cow<'u, [f32]>> {
    let narrow = |x: f64| (x * c.scale) as f32;
    match *upstream {
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
    }
}

/// The adjoint of every grid element: each one added at its left-hand-side position gets
/// that position's adjoint (none where it was skipped), and every element of a summed
/// block its sum's.
fn grid_upstream<'u>(
    d: &DenseEquation,
    upstream: Upstream<'u>,
    (block, grid): (usize, usize),
    threads: usize,
) -> Values<'u> {
    match upstream {
        Upstream::Grid(g) => Values::from(g),
        Upstream::Target(u) if d.scatter.is_some() => {
            Values::F64(Cow::Owned(placement(d).gather(grid, u, 0.0, threads)))
        }
        Upstream::Target(u) if block == 1 => Values::F64(Cow::Borrowed(u)),
        Upstream::Target(u) => Values::F64(Cow::Owned(
            u.iter()
                .flat_map(|&a| std::iter::repeat_n(a, block))
                .collect(),
        )),
    }
}

/// What the terms' adjoints are computed from: the equation, its terms and its compiled
/// row program, bound.
struct Adjoints<'a> {
    d: &'a DenseEquation,
    o: &'a EvalOptions,
    terms: &'a [Term<'a>],
    program: (&'a RowProgram, &'a Program<'a>),
}

/// Per term of the plan, its adjoint in f64 and, where the pass that gives it is the only
/// one reaching it, already rounded to f32; each empty where no adjoint reached it.
type TermAdjoints = (Vec<Vec<f64>>, Vec<Vec<f32>>);

impl Adjoints<'_> {
    /// Each term's adjoint given the grid's (`None` if a lifted node's argument does not
    /// bind after all): `whole` is the term that is the whole expression, if one is, and
    /// `lifted` the normalizations lifted out as terms, whose adjoints pass through their
    /// rows' Jacobians to their arguments.
    fn of_terms(
        &self,
        whole: Option<usize>,
        mut lifted: Vec<Row>,
        upstream: Values,
    ) -> Option<TermAdjoints> {
        let (d, terms, threads) = (self.d, self.terms, self.o.threads.max(1));
        let mut g: Vec<Vec<f64>> = vec![Vec::new(); terms.len()];
        // An f32 term's adjoint made in the pass that gives it, where that pass is the only
        // one that reaches the plan's terms: the expression's own when nothing was lifted,
        // the lifted node's argument when the expression is that node alone.
        let mut narrow: Vec<Vec<f32>> = vec![Vec::new(); d.terms.len()];
        let only = whole.is_some_and(|k| k >= d.terms.len()) && lifted.len() == 1;
        let at_once = match (only, lifted.first()) {
            (true, Some(r)) => one_pass(d, r, terms, &upstream, threads),
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
                term_adjoints(
                    self.program,
                    (d, terms),
                    &upstream,
                    (&mut g, narrow),
                    threads,
                );
            }
        }
        for r in lifted {
            // The lifted term's adjoint is read only here: it becomes its argument's in place.
            let mut adjoint = std::mem::take(&mut g[r.term]);
            if adjoint.is_empty() {
                continue;
            }
            row_adjoint(d, &r, (&terms[r.term].values, &mut adjoint), threads);
            let arg = Program::bind(&r.arg, d, self.o)?;
            let narrow = only.then_some(&mut narrow[..]);
            term_adjoints(
                (&r.arg, &arg),
                (d, terms),
                &Values::F64(Cow::Borrowed(&adjoint)),
                (&mut g, narrow),
                threads,
            );
        }
        g.truncate(d.terms.len());
        Some((g, narrow))
    }
}

/// Passes one term's adjoint (`gk` over `vars`, or `nk` already rounded to f32) on to its
/// factors, scaled by the term's constant: by the einsums of the other factors, or for a
/// term a relation multiplies, back through the relation's tuples.
fn to_factors(
    c: &Contraction,
    (vars, gk, nk): (&[VarId], Vec<f64>, Vec<f32>),
    values: &[Tensor],
    threads: usize,
    (adj, mut pending): (&mut [Option<Vec<f64>>], Option<&mut Pending>),
) {
    if !nk.is_empty() {
        factor_gradients(
            c,
            vars,
            (&[], Some(nk.into())),
            values,
            threads,
            (adj, pending),
        );
        return;
    }
    // No adjoint reached the term: it passes nothing on.
    if gk.is_empty() {
        return;
    }
    // The products of an f32 term read its adjoint scaled and rounded, made in one pass.
    if c.single && c.sparse.is_none() {
        let g = split::mapped(&gk, |&x| (x * c.scale) as f32, threads).into();
        factor_gradients(c, vars, (&[], Some(g)), values, threads, (adj, pending));
        return;
    }
    let mut gk = gk;
    if c.scale != 1.0 {
        gk.iter_mut().for_each(|x| *x *= c.scale);
    }
    let Some(r) = &c.sparse else {
        factor_gradients(c, vars, (&gk, None), values, threads, (adj, pending));
        return;
    };
    let crate::tensor::Storage::Relation(rel) = &values[r.tensor].storage else {
        return;
    };
    let parts = sparse_operands::<f64>(c, values, threads);
    let gparts = scatter_back(c, &r.vars, rel, &parts, &gk);
    if parts.len() == c.factors.len() {
        // One operand per factor, each the factor summed over what only it reads: its
        // gradient spreads back over those variables.
        for ((f, part), gp) in c.factors.iter().zip(&parts).zip(gparts) {
            let grad = Operand {
                vars: Vars::from_slice(&part.vars),
                data: gp.into(),
            };
            let (order, onto) = f.memory_order();
            let grad = permute(grad, &onto, &c.extents, threads);
            let sums = (&mut *adj, pending.as_deref_mut());
            add_factor(sums, f, (&order, &c.extents, values), grad.data, threads);
        }
    } else if let (Some(part), Some(gp)) = (parts.first(), gparts.into_iter().next()) {
        factor_gradients(c, &part.vars, (&gp, None), values, threads, (adj, pending));
    }
}

/// Whether [`backward_dense`] takes `d` with these values (it then returns `true`): the
/// checks it makes before adding anything, so a caller can choose another path first. Only
/// the inputs are checked here; what the program alone decides is the plan's
/// ([`crate::plan::backward::declines`]). They do not depend on where windows lie, so one
/// step of an index recursion answers for all.
pub(crate) fn covers(
    d: &DenseEquation,
    values: &[Tensor],
    o: &EvalOptions,
) -> Result<(), &'static str> {
    // The scatter's backward pass takes a relation's tuples, not a dense copy of it.
    let relation = |t: usize| matches!(values[t].storage, crate::tensor::Storage::Relation(_));
    if d.terms
        .iter()
        .flat_map(|c| &c.sparse)
        .any(|f| !relation(f.tensor))
    {
        return Err("a relation not stored as its tuples");
    }
    if fits(d, values, o.max_memory).is_err() {
        return Err("its gradients' intermediates over --max-memory");
    }
    let binds = |p: &RowProgram| Program::binds(p, o);
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
    match arguments && whole {
        true => Ok(()),
        false => Err("an elementwise expression the row programs do not take"),
    }
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
            add_factor(sums, f, (&order, &c.extents, values), acc.data, threads);
        } else {
            let acc = gradient::<f64>(grad, path, &onto, g, values, threads);
            add_factor(sums, f, (&order, &c.extents, values), acc.data, threads);
        }
    }
}

/// Adds a factor's gradient (over its variables in `order`, positions in `f.vars`) to its
/// tensor's adjoint: element for element, or for a window each element at the position it
/// was read from, overlapping windows adding up (col2im), in row-major order of `g`. An
/// adjoint still empty (zeros no gradient has reached) that the gradient covers whole is
/// written from it, in one pass; a window of one is held as it came (moved, when owned)
/// where `pending` can hold it; otherwise its zeros (and the windows held) are made first.
fn add_factor<T: Num>(
    (adj, pending): (&mut [Option<Vec<f64>>], Option<&mut Pending>),
    f: &Factor,
    (order, extents, values): (&[usize], &[usize], &[Tensor]),
    g: Cow<[T]>,
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
    let mut g = g;
    if buf.is_empty() {
        let len = values[f.tensor].shape.iter().product();
        if let Some(pending) = pending {
            match pending.hold(f.tensor, &at, len, g, threads) {
                None => return,
                Some(back) => g = back,
            }
            pending.settle(f.tensor, buf, len, threads);
        }
    }
    if buf.is_empty() {
        let len = values[f.tensor].shape.iter().product();
        if matches!(at, Placement::Same) && g.len() == len {
            *buf = widened(&g, 1.0, threads);
            return;
        }
        *buf = split::zeros(len, threads);
    }
    add_placed(buf, &at, &g, threads);
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
pub(super) const ADD_BLOCK: usize = 1 << 14;

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
    let walk = TupleWalk::new(c, rel_vars, parts);
    // One operand whose free slice is contiguous like the term's (`Tok(s, p, c) Emb[c, d]`):
    // a tuple's adjoint row is added to the operand's row (its other factors' product is
    // 1), in the order the elements would be.
    let row = match (parts, walk.free.as_slice()) {
        ([_], [(n, 1, steps)]) if steps[..] == [1] => Some(*n),
        _ => None,
    };
    walk.run(rel, 0..rel.len(), &mut |_, at_out, at, whole| {
        if let (true, Some(n), [grad]) = (whole, row, grads.as_mut_slice()) {
            let up = g.get(at_out..at_out + n);
            if let (Some(up), Some(dst)) = (up, grad.get_mut(at[0]..at[0] + n)) {
                for (d, &u) in dst.iter_mut().zip(up) {
                    if u != 0.0 {
                        *d += u;
                    }
                }
                return true;
            }
        }
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
