//! Dense equations (`plan::einsum`): each term's contraction tree runs as matrix products
//! by the `gemm` crate, then one pass over the output evaluates the equation's elementwise
//! expression. This file drives a stratum (once, or to its fixpoint for one recursive sum
//! tensor) and gives one step's contributions (`eval::steps`); the jobs are in their own
//! files:
//!
//! - `operand` — operands, their f32/f64 element type, gathers and permutations;
//! - `contract` — a term's contraction tree, operands read in place or permuted;
//! - `products` — loops of GEMMs and the one `unsafe` call into `gemm`;
//! - `scatter` — a relation or weighted tuples times dense operands;
//! - `epilogue` — the elementwise expression over the grid, in place over an f32 product,
//!   and where each element lands;
//! - `normalize` — softmax and layer normalisation of rows along an axis (the row
//!   kernels themselves are `functions::normalize` in f64 and `functions::fast_rows` in f32);
//! - `rows` — the expression compiled to operations run a row at a time, and its adjoint;
//! - `budget` — memory before allocating, and the work that decides a thread split.
//!
//! Their backward pass is `learn::dense_backward`.
//!
//! Products of f32 tensors run in f32, others in f64; elementwise expressions run in f64 as
//! in the reference evaluator, and results are rounded to the target's type when stored
//! (f32 softmax rows excepted: `functions::fast_rows`). Threads split output rows or tiles only, so
//! each element is summed in the same order for every thread count.

mod budget;
mod contract;
mod epilogue;

mod normalize;
mod operand;
mod products;
pub(crate) mod rows;
mod scatter;
mod skipped_zeros;
pub(crate) mod split;

use budget::*;
use contract::*;
use epilogue::*;
use normalize::*;
use operand::*;
use products::*;
use scatter::*;
use skipped_zeros::zeros_skippable;

pub(crate) use epilogue::{keep_grid, Placement};

/// What the backward pass of these kernels (`learn::dense_backward`) computes with.
pub(crate) use self::{
    budget::fits,
    contract::{subtree_from, term},
    epilogue::{replace_normalize, targets},
    normalize::normalize_for,
    operand::{factor_operand, permute, reduce, widened, Num, Operand, Vars},
    scatter::{sparse_operands, TupleWalk},
};

use super::{Declined, EvalOptions};
use crate::functions::Structural;
use crate::plan::einsum::{kept, Contraction, DenseEquation, Expr, Factor, Path};
use crate::semantics::{Checked, Family, Stratum, VarId};
use crate::tensor::{Dense, Storage, Tensor};
use std::borrow::Cow;

/// Evaluates the stratum's contractions in place; why not (with `values` untouched) when its
/// inputs are not all dense arrays of the planned shapes, or its intermediates would not fit
/// `--max-memory`, for the caller to log and run the loop nests. With `keep`, the terms it
/// computed (not those it only read) are kept per equation for the backward pass.
pub(super) fn evaluate_dense(
    p: &Checked,
    st: &Stratum,
    plans: &[DenseEquation],
    values: &mut [Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
    keep: Option<&mut KeptTerms>,
) -> Result<(), Declined> {
    match (st.recursive, keep) {
        (false, keep) => evaluate_once(p, st, plans, values, o, pool, keep),
        // Backpropagation through a recursion follows the reference's recorded iterates.
        (true, Some(_)) => Err(Declined::Recorded),
        (true, None) => fixpoint(p, st, plans, values, o, pool),
    }
}

/// A recursive stratum of one tensor (`X[i, j] = sig(W[i, j, k] X[i - 1, k])`,
/// `R[i] = 0.15 + 0.85 M[i, j] R[j]`) iterated to its fixpoint as the reference does: each
/// iteration computes the tensor afresh from the last one, until no element changes by more
/// than `--tol` (exactly, for integers). Declined, with `values` as they were, when an
/// iteration declines, an element blows up or `--max-iters` runs out: the loop nests then
/// run and report what they find.
fn fixpoint(
    p: &Checked,
    st: &Stratum,
    plans: &[DenseEquation],
    values: &mut [Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
) -> Result<(), Declined> {
    let [t] = st.tensors[..] else {
        return Err(Declined::NotSettled);
    };
    let initial = values[t].clone();
    let tol = match p.tensors[t].kind {
        crate::semantics::Kind::Real => o.tol,
        _ => 0.0,
    };
    let mut why = Declined::NotSettled;
    for _ in 0..o.max_iters {
        let last = values[t].clone();
        if let Err(declined) = evaluate_once(p, st, plans, values, o, pool, None) {
            why = declined;
            break;
        }
        if super::fixpoint::blew_up(&last, &values[t]).is_some() {
            break;
        }
        if super::fixpoint::change(&last, &values[t]).is_some_and(|c| c <= tol) {
            return Ok(());
        }
    }
    values[t] = initial;
    Err(why)
}

/// One evaluation of a stratum's dense equations from the current values.
fn evaluate_once(
    p: &Checked,
    st: &Stratum,
    plans: &[DenseEquation],
    values: &mut [Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
    mut keep: Option<&mut KeptTerms>,
) -> Result<(), Declined> {
    for d in plans {
        fits(d, values, o.max_memory)?;
        zeros_skippable(d, values)?;
    }
    let threads = o.threads.max(1);
    for &t in &st.tensors {
        let info = &p.tensors[t];
        if matches!(info.family, Family::Max | Family::Min) {
            // Backpropagation through an extreme follows the reference's recorded points.
            match keep {
                None => values[t] = extreme(p, t, plans, values, o)?,
                Some(_) => return Err(Declined::Recorded),
            }
            continue;
        }
        let Storage::Dense(start) = &values[t].storage else {
            return Err(Declined::NotAsPlanned(t));
        };
        if keep.is_none() {
            if let Some(direct) = stored_as_computed(p, t, plans, values, o, pool) {
                values[t].storage = Storage::Dense(direct);
                continue;
            }
        }
        // A tensor without data starts from zeros: its first equation's values are taken as
        // they are rather than added to a buffer of zeros.
        let elements = info.shape.iter().product();
        let mut acc = p.data[t].as_ref().map(|_| start.to_f64().into_owned());
        for (i, d) in plans.iter().enumerate().filter(|(_, d)| d.target == t) {
            // Small equations stay on the calling thread: moving them to the pool costs more
            // than their work (and scatters their allocations across threads). Work is split
            // only inside the pool of `--threads` workers, never on rayon's global one.
            let big = split(d, values, pool);
            let workers = if big { threads } else { 1 };
            let mut run = || {
                let mut terms: Vec<Operand> =
                    d.terms.iter().map(|c| term(c, values, workers)).collect();
                let done = fused(d, &mut terms, o, &mut acc);
                (done, owned_terms(d, terms))
            };
            let (done, owned) = match pool {
                Some(pool) if big => pool.install(run),
                _ => run(),
            };
            if !done {
                return Err(Declined::Unregistered);
            }
            if let Some(k) = keep.as_deref_mut() {
                k.insert(i, owned);
            }
        }
        values[t] = Tensor {
            elem: info.elem,
            shape: info.shape.clone(),
            storage: Storage::Dense(Dense::from_f64(
                info.elem,
                acc.unwrap_or_else(|| vec![0.0; elements]),
            )),
        };
    }
    Ok(())
}

/// The values one dense equation adds to its target, each with its offset there (`None`
/// where a left-hand-side position falls outside the target), as `grid` and `at`: one step
/// of an index recursion (`eval::steps`). `None` when its inputs are not as planned or a
/// function is not registered.
/// With `keep`, the terms it computed (not those it only read) are kept there for the
/// backward pass, as [`evaluate_dense`] keeps them.
pub(super) fn contributions(
    p: &Checked,
    d: &DenseEquation,
    values: &[Tensor],
    (o, pool): (&EvalOptions, Option<&rayon::ThreadPool>),
    mut keep: Option<&mut Vec<Option<KeptTerm>>>,
) -> Option<(Grid, Placement)> {
    fits(d, values, o.max_memory).ok()?;
    zeros_skippable(d, values).ok()?;
    // Into a target without data of its own, an f32 grid is added as computed (it fills
    // `keep` only when it gives a grid).
    let f32_grid = match p.data[d.target] {
        None => f32_grid(d, values, (o, pool), keep.as_deref_mut()),
        Some(_) => None,
    };
    let grid = match f32_grid {
        Some(g) => Grid::F32(g),
        None => {
            let big = split(d, values, pool);
            let workers = if big { o.threads.max(1) } else { 1 };
            let run = || {
                let mut terms: Vec<Operand> =
                    d.terms.iter().map(|c| term(c, values, workers)).collect();
                let grid = grid_values(d, &mut terms, o);
                (grid, owned_terms(d, terms))
            };
            let (grid, owned) = match pool {
                Some(pool) if big => pool.install(run),
                _ => run(),
            };
            if let Some(k) = keep {
                *k = owned;
            }
            Grid::F64(grid?)
        }
    };
    Some((grid, placement(d)))
}

/// The terms an evaluation computed, to keep (then the values of its `softmax`/`lnorm`
/// nodes); `None` for those that only read a tensor or whose values the backward pass does
/// not read.
fn owned_terms(d: &DenseEquation, terms: Vec<Operand>) -> Vec<Option<KeptTerm>> {
    terms
        .into_iter()
        .enumerate()
        .map(|(k, t)| match (t.data, d.read_back.get(k)) {
            (Cow::Owned(v), None | Some(true)) => Some((t.vars.to_vec(), Grid::F64(v))),
            _ => None,
        })
        .collect()
}

/// Where each element of the equation's grid lands in its target.
pub(crate) fn placement(d: &DenseEquation) -> Placement {
    let dims: Vec<usize> = d.out.iter().map(|&v| d.extents[v]).collect();
    match &d.scatter {
        None => Placement::Same,
        Some(at) => match affine_layout(d, at, &dims) {
            Some((base, steps)) => Placement::Strided { base, steps, dims },
            None => Placement::Listed(targets(d)),
        },
    }
}

/// An equation's values over its grid: in f64, or in f32 as an f32 product computed them.
#[derive(Clone, Debug)]
pub enum Grid {
    /// f64 values.
    F64(Vec<f64>),
    /// f32 values.
    F32(Vec<f32>),
}

impl Grid {
    /// Number of grid elements.
    pub(crate) fn len(&self) -> usize {
        match self {
            Grid::F64(v) => v.len(),
            Grid::F32(v) => v.len(),
        }
    }

    /// Element `i`, as f64.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> f64 {
        match self {
            Grid::F64(v) => v[i],
            Grid::F32(v) => f64::from(v[i]),
        }
    }

    /// The values as f64.
    pub(crate) fn into_f64(self) -> Vec<f64> {
        match self {
            Grid::F64(v) => v,
            Grid::F32(v) => v.into_iter().map(f64::from).collect(),
        }
    }
}

/// The value of a `max=`/`min=` tensor without data whose equations have no summation
/// points (`Pool[x / 2, y / 2] max= F[x, y]`): each equation's expression over its grid,
/// each element combined at its left-hand-side position, equations and grid elements in the
/// reference's order. Stored dense when every element was written, otherwise as its defined
/// elements. Declined when the tensor has data or a function is not registered.
fn extreme(
    p: &Checked,
    t: usize,
    plans: &[DenseEquation],
    values: &[Tensor],
    o: &EvalOptions,
) -> Result<Tensor, Declined> {
    let info = &p.tensors[t];
    if p.data[t].is_some() {
        return Err(Declined::ExtremeWithData);
    }
    let max = info.family == Family::Max;
    let n: usize = info.shape.iter().product();
    let mut acc = vec![0.0; n];
    let mut hit = vec![false; n];
    for d in plans.iter().filter(|d| d.target == t) {
        let mut terms: Vec<Operand> = d.terms.iter().map(|c| term(c, values, 1)).collect();
        let grid = grid_values(d, &mut terms, o).ok_or(Declined::Unregistered)?;
        let at = match d.scatter {
            Some(_) => targets(d),
            None => (0..grid.len()).map(Some).collect(),
        };
        for (v, at) in grid.into_iter().zip(at) {
            let Some(i) = at.filter(|&i| i < n) else {
                continue;
            };
            acc[i] = match (hit[i], max) {
                (false, _) => v,
                (true, true) => acc[i].max(v),
                (true, false) => acc[i].min(v),
            };
            hit[i] = true;
        }
    }
    if hit.iter().all(|&h| h) {
        return Ok(Tensor {
            elem: info.elem,
            shape: info.shape.clone(),
            storage: Storage::Dense(Dense::from_f64(info.elem, acc)),
        });
    }
    let mut out = Tensor::sparse(info.elem, info.shape.clone());
    let mut idx = vec![0usize; info.shape.len()];
    for (i, v) in acc.into_iter().enumerate().filter(|&(i, _)| hit[i]) {
        crate::tensor::odometer::unflatten(i, &info.shape, |ax, x| idx[ax] = x);
        out.set(&idx, v);
    }
    Ok(out)
}

/// A term a dense evaluation computed: its variables and values (f32 where an f32 product
/// computed them and the backward pass reads them as they were).
pub(crate) type KeptTerm = (Vec<VarId>, Grid);

/// Terms a dense evaluation computed, by the index of their plan among the stratum's (an
/// equation split into parts has one plan per part; `None` for a term that only read a
/// tensor). After the plan's terms come the values of its `softmax`/`lnorm` nodes, in the
/// order `replace_normalize` meets them, where the evaluation computed them.
pub type KeptTerms = std::collections::BTreeMap<usize, Vec<Option<KeptTerm>>>;

/// Terms an index-order stratum computed, by step and by the index of the equation among
/// the stratum's (`plan::steps`): what its backward pass reads instead of computing again.
pub type StepTerms = std::collections::BTreeMap<(usize, usize), Vec<Option<KeptTerm>>>;
