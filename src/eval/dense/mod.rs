//! Dense equations (`plan::einsum`): each term's contraction tree runs as matrix products
//! by the `gemm` crate, operands read in place through strides (loops around the products
//! where an operand's own variables are split) or permuted where they cannot be; then one
//! pass over the output evaluates the equation's elementwise expression, reading each term
//! in place, or, for an f32 tensor over one f32 product, over the product's own buffer.
//!
//! Products of f32 tensors run in f32, others in f64; elementwise expressions run in f64 as
//! in the reference evaluator, and results are rounded to the target's type when stored
//! (f32 softmax rows excepted: `fast_rows`). Threads split output rows or tiles only, so
//! each element is summed in the same order for every thread count. Recursive strata of one
//! tensor iterate to their fixpoint as the reference does.

mod backward;
mod fast_rows;
mod rows;

pub(crate) use backward::backward_dense;

use super::EvalOptions;
use crate::functions::Structural;
use crate::plan::einsum::{kept, Contraction, DenseEquation, Expr, Factor, Path};
use crate::semantics::{Checked, Family, Stratum, VarId};
use crate::tensor::{Dense, ElemType, Storage, Tensor};
use std::borrow::Cow;

/// A tensor being contracted: row-major values over `vars`, borrowed from an input until an
/// operation has to write. Contractions of f32 tensors run in f32 (`Contraction::single`);
/// everything else, and every elementwise expression, in f64.
struct Operand<'a, T: Clone = f64> {
    vars: Vec<VarId>,
    data: Cow<'a, [T]>,
}

/// An element type contractions run in: f32 or f64.
trait Num: Copy + Default + Send + Sync + 'static + Into<f64> {
    /// The type's 1.
    const ONE: Self;
    /// The sum, rounded to the type.
    fn add(self, other: Self) -> Self;
    /// The product, rounded to the type.
    fn mul(self, other: Self) -> Self;
    /// The value nearest `v`.
    fn from_f64(v: f64) -> Self;
    /// A dense tensor's elements in this type: borrowed when it is stored in it.
    fn elements(d: &Dense) -> Cow<'_, [Self]>;
    /// f64 values in this type: borrowed when it is f64.
    fn cast(v: &[f64]) -> Cow<'_, [Self]>;
    /// Softmax or layer normalisation of `scale ·` a row, in place.
    fn normalize_row(kind: Structural, row: &mut [Self], scale: f64);
}

impl Num for f64 {
    const ONE: f64 = 1.0;
    fn add(self, other: f64) -> f64 {
        self + other
    }
    fn mul(self, other: f64) -> f64 {
        self * other
    }
    fn from_f64(v: f64) -> f64 {
        v
    }
    fn elements(d: &Dense) -> Cow<'_, [f64]> {
        d.to_f64()
    }
    fn cast(v: &[f64]) -> Cow<'_, [f64]> {
        Cow::Borrowed(v)
    }
    fn normalize_row(kind: Structural, row: &mut [f64], scale: f64) {
        if scale != 1.0 {
            row.iter_mut().for_each(|r| *r *= scale);
        }
        exact_row(kind, row);
    }
}

impl Num for f32 {
    const ONE: f32 = 1.0;
    fn add(self, other: f32) -> f32 {
        self + other
    }
    fn mul(self, other: f32) -> f32 {
        self * other
    }
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
    fn elements(d: &Dense) -> Cow<'_, [f32]> {
        d.to_f32()
    }
    fn cast(v: &[f64]) -> Cow<'_, [f32]> {
        Cow::Owned(v.iter().map(|&x| x as f32).collect())
    }
    fn normalize_row(kind: Structural, row: &mut [f32], scale: f64) {
        fast_rows::normalize_row(kind, row, scale);
    }
}

/// An operand's values as f64, for the elementwise pass.
fn widen<'a, T: Num>(op: Operand<'a, T>) -> Operand<'a> {
    Operand {
        vars: op.vars,
        data: Cow::Owned(op.data.iter().map(|&x| x.into()).collect()),
    }
}

/// Evaluates the stratum's contractions in place; `false` (with `values` untouched) when its
/// inputs are not all dense arrays of the planned shapes, or its intermediates would not fit
/// `--max-memory`, for the caller to use the reference loops. With `keep`, the terms it
/// computed (not those it only read) are kept per equation for the backward pass.
pub(super) fn evaluate_dense(
    p: &Checked,
    st: &Stratum,
    plans: &[DenseEquation],
    values: &mut [Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
    keep: Option<&mut KeptTerms>,
) -> bool {
    match (st.recursive, keep) {
        (false, keep) => evaluate_once(p, st, plans, values, o, pool, keep),
        // Backpropagation through a recursion follows the reference's recorded iterates.
        (true, Some(_)) => false,
        (true, None) => fixpoint(p, st, plans, values, o, pool),
    }
}

/// A recursive stratum of one tensor (`X[i, j] = sig(W[i, j, k] X[i - 1, k])`,
/// `R[i] = 0.15 + 0.85 M[i, j] R[j]`) iterated to its fixpoint as the reference does: each
/// iteration computes the tensor afresh from the last one, until no element changes by more
/// than `--tol` (exactly, for integers). `false`, with `values` as they were, when an
/// iteration declines, an element blows up or `--max-iters` runs out: the reference loops
/// then run and report what they find.
fn fixpoint(
    p: &Checked,
    st: &Stratum,
    plans: &[DenseEquation],
    values: &mut [Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
) -> bool {
    let [t] = st.tensors[..] else {
        return false;
    };
    let initial = values[t].clone();
    let tol = match p.tensors[t].kind {
        crate::semantics::Kind::Real => o.tol,
        _ => 0.0,
    };
    for _ in 0..o.max_iters {
        let last = values[t].clone();
        if !evaluate_once(p, st, plans, values, o, pool, None)
            || super::fixpoint::blew_up(&last, &values[t]).is_some()
        {
            break;
        }
        if super::fixpoint::change(&last, &values[t]).is_some_and(|c| c <= tol) {
            return true;
        }
    }
    values[t] = initial;
    false
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
) -> bool {
    if !plans.iter().all(|d| fits(p, d, values, o.max_memory)) {
        return false;
    }
    let threads = o.threads.max(1);
    for &t in &st.tensors {
        let info = &p.tensors[t];
        if matches!(info.family, Family::Max | Family::Min) {
            // Backpropagation through an extreme follows the reference's recorded points.
            match keep
                .is_none()
                .then(|| extreme(p, t, plans, values, o))
                .flatten()
            {
                Some(v) => values[t] = v,
                None => return false,
            }
            continue;
        }
        let Storage::Dense(start) = &values[t].storage else {
            return false;
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
        for d in plans.iter().filter(|d| d.target == t) {
            // Small equations stay on the calling thread: moving them to the pool costs more
            // than their work (and scatters their allocations across threads). Work is split
            // only inside the pool of `--threads` workers, never on rayon's global one.
            let big = pool.is_some() && work(d, values) >= (1u64 << 25) as f64;
            let workers = if big { threads } else { 1 };
            let mut run = || {
                let mut terms: Vec<Operand> =
                    d.terms.iter().map(|c| term(c, values, workers)).collect();
                let done = fused(d, &mut terms, o, &mut acc);
                terms.truncate(d.terms.len());
                let owned = terms
                    .into_iter()
                    .map(|t| match t.data {
                        Cow::Owned(v) => Some((t.vars, v)),
                        Cow::Borrowed(_) => None,
                    })
                    .collect::<Vec<_>>();
                (done, owned)
            };
            let (done, owned) = match pool {
                Some(pool) if big => pool.install(run),
                _ => run(),
            };
            if !done {
                return false;
            }
            if let Some(k) = keep.as_deref_mut() {
                k.insert(d.equation, owned);
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
    true
}

/// The values one dense equation adds to its target, each with its offset there (`None`
/// where a left-hand-side position falls outside the target), as `grid` and `at`: one step
/// of an index recursion (`eval::steps`). `None` when its inputs are not as planned or a
/// function is not registered.
pub(super) fn contributions(
    p: &Checked,
    d: &DenseEquation,
    values: &[Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
) -> Option<(Vec<f64>, Placement)> {
    if !fits(p, d, values, o.max_memory) {
        return None;
    }
    let big = pool.is_some() && work(d, values) >= (1u64 << 25) as f64;
    let workers = if big { o.threads.max(1) } else { 1 };
    let run = || {
        let mut terms: Vec<Operand> = d.terms.iter().map(|c| term(c, values, workers)).collect();
        grid_values(d, &mut terms, o)
    };
    let grid = match pool {
        Some(pool) if big => pool.install(run),
        _ => run(),
    }?;
    let dims: Vec<usize> = d.out.iter().map(|&v| d.extents[v]).collect();
    let at = match &d.scatter {
        None => Placement::Same,
        Some(at) => match affine_layout(d, at, &dims) {
            Some((base, steps)) => Placement::Strided { base, steps, dims },
            None => Placement::Listed(targets(d)),
        },
    };
    Some((grid, at))
}

/// Where each element of an equation's grid lands in its target.
pub(super) enum Placement {
    /// At the same offset (the grid is laid out as the target).
    Same,
    /// At `base` plus, per grid axis, its index times its step.
    Strided {
        /// The offset of the grid's first element.
        base: i64,
        /// Per grid axis, the offset's change per index.
        steps: Vec<i64>,
        /// The grid's extents.
        dims: Vec<usize>,
    },
    /// At the listed offsets (`None`: outside the target).
    Listed(Vec<Option<usize>>),
}

impl Placement {
    /// Calls `f(grid index, target offset)` for every grid element inside the target, in
    /// grid order.
    pub(super) fn each(&self, len: usize, f: &mut dyn FnMut(usize, usize)) {
        match self {
            Placement::Same => (0..len).for_each(|i| f(i, i)),
            Placement::Listed(at) => at
                .iter()
                .enumerate()
                .filter_map(|(i, a)| Some((i, (*a)?)))
                .for_each(|(i, a)| f(i, a)),
            Placement::Strided { base, steps, dims } => {
                let mut idx = vec![0usize; dims.len()];
                let mut at = *base;
                for i in 0..len {
                    if let Ok(a) = usize::try_from(at) {
                        f(i, a);
                    }
                    for ax in (0..dims.len()).rev() {
                        idx[ax] += 1;
                        at += steps[ax];
                        if idx[ax] < dims[ax] {
                            break;
                        }
                        at -= steps[ax] * dims[ax] as i64;
                        idx[ax] = 0;
                    }
                }
            }
        }
    }
}

/// The value of a `max=`/`min=` tensor without data whose equations have no summation
/// points (`Pool[x / 2, y / 2] max= F[x, y]`): each equation's expression over its grid,
/// each element combined at its left-hand-side position, equations and grid elements in the
/// reference's order. Stored dense when every element was written, otherwise as its defined
/// elements. `None` when the tensor has data or a function is not registered.
fn extreme(
    p: &Checked,
    t: usize,
    plans: &[DenseEquation],
    values: &[Tensor],
    o: &EvalOptions,
) -> Option<Tensor> {
    let info = &p.tensors[t];
    if p.data[t].is_some() {
        return None;
    }
    let max = info.family == Family::Max;
    let n: usize = info.shape.iter().product();
    let mut acc = vec![0.0; n];
    let mut hit = vec![false; n];
    for d in plans.iter().filter(|d| d.target == t) {
        let mut terms: Vec<Operand> = d.terms.iter().map(|c| term(c, values, 1)).collect();
        let grid = grid_values(d, &mut terms, o)?;
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
        return Some(Tensor {
            elem: info.elem,
            shape: info.shape.clone(),
            storage: Storage::Dense(Dense::from_f64(info.elem, acc)),
        });
    }
    let mut out = Tensor::sparse(info.elem, info.shape.clone());
    let mut idx = vec![0usize; info.shape.len()];
    for (i, v) in acc.into_iter().enumerate().filter(|&(i, _)| hit[i]) {
        let mut rest = i;
        for (slot, &extent) in idx.iter_mut().zip(&info.shape).rev() {
            *slot = rest % extent;
            rest /= extent;
        }
        out.set(&idx, v);
    }
    Some(out)
}

/// What an f32 product's buffer becomes when it is stored as computed.
enum Epilogue {
    /// The product itself, scaled.
    Bare,
    /// Softmax or layer normalisation along an output axis.
    Normalize(Structural, usize),
    /// The equation's elementwise expression, evaluated over the buffer a row at a time.
    Rows(rows::Program),
}

/// The value of an f32 tensor with no data of its own, defined by one equation over an f32
/// contraction laid out like the output (`C[i, k] = A[i, j] B[j, k]`,
/// `S[p, q.] = softmax(Q[p, d] K[q, d] / 8)`, `H[b, h] = relu(W[h, i] X[b, i] + B[h])`):
/// the product's f32 result becomes its storage, and the rest of the equation is applied to
/// it in place, a row at a time, with no whole pass in f64. `None` for any other equation.
fn stored_as_computed(
    p: &Checked,
    t: usize,
    plans: &[DenseEquation],
    values: &[Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
) -> Option<Dense> {
    let mut defining = plans.iter().filter(|d| d.target == t);
    let (d, None) = (defining.next()?, defining.next()) else {
        return None;
    };
    let (true, true, ElemType::F32, None) = (
        d.summed.is_empty(),
        p.data[t].is_none(),
        p.tensors[t].elem,
        &d.scatter,
    ) else {
        return None;
    };
    // The product laid out like the output that does the most work.
    let (main, c) = d
        .terms
        .iter()
        .enumerate()
        .filter(|(_, c)| c.single && c.out == d.out && (c.path.is_some() || c.sparse.is_some()))
        .max_by(|a, b| a.1.flops.total_cmp(&b.1.flops))?;
    let epilogue = match &d.expr {
        Expr::Term(k) if *k == main => Epilogue::Bare,
        Expr::Normalize(kind, var, arg) if matches!(**arg, Expr::Term(k) if k == main) => {
            Epilogue::Normalize(*kind, d.out.iter().position(|v| v == var)?)
        }
        e if !has_normalize(e) => Epilogue::Rows(rows::Program::compile(e, o)?),
        _ => return None,
    };
    let split = pool.is_some() && work(d, values) >= (1u64 << 25) as f64;
    // Work is split only inside the pool of `--threads` workers, never on rayon's global one.
    let workers = if split { o.threads.max(1) } else { 1 };
    let run = || {
        let mut data = unscaled::<f32>(c, values, workers).data.into_owned();
        let dims: Vec<usize> = d.out.iter().map(|&v| d.extents[v]).collect();
        match &epilogue {
            Epilogue::Bare if c.scale != 1.0 => {
                // In f64, as the general path scales, then rounded once.
                data.iter_mut()
                    .for_each(|x| *x = (f64::from(*x) * c.scale) as f32);
            }
            Epilogue::Bare => {}
            Epilogue::Normalize(kind, axis) => {
                normalize(&mut data, &dims, *axis, *kind, (c.scale, split));
            }
            Epilogue::Rows(program) => {
                let terms: Vec<Operand> = d
                    .terms
                    .iter()
                    .enumerate()
                    .map(|(k, c)| match k == main {
                        true => Operand {
                            vars: c.out.clone(),
                            data: Cow::Owned(Vec::new()),
                        },
                        false => term(c, values, 1),
                    })
                    .collect();
                rows::in_place(program, d, &terms, (main, c.scale), &mut data, split);
            }
        }
        data
    };
    let data = match pool {
        Some(pool) if split => pool.install(run),
        _ => run(),
    };
    Some(Dense::from_f32(data))
}

/// Whether the expression holds a `softmax` or `lnorm`.
fn has_normalize(e: &Expr) -> bool {
    let mut found = false;
    replace_normalize(e, &mut |_, _, _| {
        found = true;
        None
    });
    found
}

/// An equation's work, in FLOPs: its plan's estimate plus, for each term a relation
/// multiplies, its tuples times the slice each adds (weighted 16: a scatter is bound by
/// memory, not arithmetic). Equations of less than 2²⁵ stay on the calling thread.
fn work(d: &DenseEquation, values: &[Tensor]) -> f64 {
    let scatters: f64 = d
        .terms
        .iter()
        .filter_map(|c| {
            let f = c.sparse.as_ref()?;
            let (r, _) = tuples(&values.get(f.tensor)?.storage)?;
            let slice: f64 = c
                .out
                .iter()
                .filter(|v| !f.vars.contains(v))
                .map(|&v| c.extents[v] as f64)
                .product();
            Some(16.0 * r.len() as f64 * slice)
        })
        .sum();
    d.flops + scatters
}

/// A term a dense evaluation computed: its variables and values.
pub type KeptTerm = (Vec<VarId>, Vec<f64>);

/// Terms a dense evaluation computed, per equation (`None` for a term that only read a
/// tensor).
pub type KeptTerms = std::collections::BTreeMap<usize, Vec<Option<KeptTerm>>>;

/// Whether every factor is a dense array whose extents are the variables', the target's
/// shape is the output variables', and the intermediates fit in `max_memory`.
fn fits(p: &Checked, d: &DenseEquation, values: &[Tensor], max_memory: u64) -> bool {
    let shaped = d.terms.iter().flat_map(|c| &c.factors).all(|f| {
        let v = &values[f.tensor];
        if let Some(w) = &f.window {
            return matches!(v.storage, Storage::Dense(_)) && v.shape == w.shape;
        }
        matches!(v.storage, Storage::Dense(_))
            && v.shape.len() == f.vars.len()
            && v.shape
                .iter()
                .zip(&f.vars)
                .all(|(&n, &x)| n == d.extents[x])
    });
    // A shifted relation is seen through its tuples inside the variables' extents.
    let relations = d.terms.iter().flat_map(|c| &c.sparse).all(|f| {
        let v = &values[f.tensor];
        tuples(&v.storage).is_some()
            && v.rank() == f.vars.len()
            && (!f.shift.is_empty()
                || v.shape
                    .iter()
                    .zip(&f.vars)
                    .all(|(&n, &x)| n == d.extents[x]))
    });
    let out_ok = p.tensors[d.target].shape == d.target_shape;
    let grid: f64 = d.out.iter().map(|&v| d.extents[v] as f64).product();
    let elements: f64 = d
        .terms
        .iter()
        .filter_map(|c| {
            let path = c.path.as_ref()?;
            Some(match (c.chunk, c.out.first()) {
                // A block's intermediates, and the whole result.
                (Some(rows), Some(&first)) => {
                    let mut block = c.clone();
                    block.extents[first] = rows;
                    let out: f64 = c.out.iter().map(|&v| c.extents[v] as f64).product();
                    intermediates(&block, path) + out
                }
                _ => intermediates(c, path),
            })
        })
        .sum();
    shaped && relations && out_ok && 8.0 * (elements + grid) <= max_memory as f64
}

/// Adds the equation's value at every output element to `acc` (row-major over `d.out`; when
/// `acc` is `None`, the values become it); `false` when the expression calls a function that
/// is not registered.
fn fused<'a>(
    d: &DenseEquation,
    terms: &mut Vec<Operand<'a>>,
    o: &EvalOptions,
    acc: &mut Option<Vec<f64>>,
) -> bool {
    if d.scatter.is_some() {
        let Some(values) = grid_values(d, terms, o) else {
            return false;
        };
        let elements = d.target_shape.iter().product();
        let acc = acc.get_or_insert_with(|| vec![0.0; elements]);
        for (at, v) in targets(d).into_iter().zip(values) {
            if let Some(slot) = at.and_then(|at| acc.get_mut(at)) {
                *slot += v;
            }
        }
        return true;
    }
    // A bare contraction laid out like the output: one vectorised pass.
    if let (Expr::Term(k), true) = (&d.expr, d.summed.is_empty()) {
        let k = *k;
        if terms[k].vars == d.out {
            match acc {
                None => {
                    *acc = Some(terms[k].data.to_vec());
                    return true;
                }
                Some(acc) if terms[k].data.len() == acc.len() => {
                    for (a, &x) in acc.iter_mut().zip(terms[k].data.iter()) {
                        *a += x;
                    }
                    return true;
                }
                // Otherwise the general pass below lays the term out.
                Some(_) => {}
            }
        }
    }
    let Some(expr) = materialize(&d.expr, d, terms, o) else {
        return false;
    };
    let Some(program) = rows::Program::compile(&expr, o) else {
        return false;
    };
    let values = rows::values(&program, d, terms);
    // Variables summed after the expression are innermost: each output element sums one
    // contiguous block, in row-major order as the reference does.
    let block: usize = d.summed.iter().map(|&v| d.extents[v]).product();
    if block == 0 {
        return true;
    }
    match acc {
        None if block == 1 => *acc = Some(values),
        _ => {
            let acc = acc.get_or_insert_with(|| vec![0.0; values.len() / block]);
            for (a, b) in acc.iter_mut().zip(values.chunks_exact(block)) {
                *a += b.iter().sum::<f64>();
            }
        }
    }
    true
}

/// The expression's value at every element of the grid; `None` when it calls a function that
/// is not registered.
fn grid_values(d: &DenseEquation, terms: &mut Vec<Operand>, o: &EvalOptions) -> Option<Vec<f64>> {
    let expr = materialize(&d.expr, d, terms, o)?;
    let program = rows::Program::compile(&expr, o)?;
    Some(rows::values(&program, d, terms))
}

/// For each element of the grid (row-major over `d.out`), the target offset its left-hand-side
/// positions name (`d.scatter`), or `None` where one falls outside the target.
fn targets(d: &DenseEquation) -> Vec<Option<usize>> {
    let Some(at) = &d.scatter else {
        return Vec::new();
    };
    let dims: Vec<usize> = d.out.iter().map(|&v| d.extents[v]).collect();
    let total: usize = dims.iter().product();
    if let Some((base, steps)) = affine_layout(d, at, &dims) {
        let mut out = Vec::with_capacity(total);
        let strided = Placement::Strided { base, steps, dims };
        strided.each(total, &mut |_, a| out.push(Some(a)));
        return out;
    }
    let mut env = vec![0i64; d.extents.len()];
    let mut idx = vec![0usize; dims.len()];
    let mut out = Vec::with_capacity(total);
    for _ in 0..total {
        for (&v, &i) in d.out.iter().zip(&idx) {
            env[v] = i as i64;
        }
        let mut offset = Some(0usize);
        for (f, &n) in at.iter().zip(&d.target_shape) {
            offset = match (offset, f.eval(&env)) {
                (Some(o), Some(p)) if (0..n as i64).contains(&p) => Some(o * n + p as usize),
                _ => None,
            };
        }
        out.push(offset);
        for ax in (0..dims.len()).rev() {
            idx[ax] += 1;
            if idx[ax] < dims[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    out
}

/// When each position is `c + Σ k·v` over the grid's variables and stays inside the target
/// at every grid element (`State[i, t + 1]` at a step), the target offset of the grid's
/// first element and its step per grid axis: no expression is then evaluated per element.
fn affine_layout(
    d: &DenseEquation,
    at: &[crate::semantics::IndexFn],
    dims: &[usize],
) -> Option<(i64, Vec<i64>)> {
    let mut base = 0i64;
    let mut steps = vec![0i64; dims.len()];
    for (f, &n) in at.iter().zip(&d.target_shape) {
        let (coefs, c) = crate::plan::einsum::affine(f)?;
        let (mut lo, mut hi) = (c, c);
        for &(v, k) in &coefs {
            let g = d.out.iter().position(|&x| x == v)?;
            let reach = k.checked_mul(dims[g] as i64 - 1)?;
            if reach < 0 {
                lo += reach;
            } else {
                hi += reach;
            }
        }
        if lo < 0 || hi >= n as i64 {
            return None;
        }
        // Row-major: earlier positions scale by the later extents.
        base = base.checked_mul(n as i64)?.checked_add(c)?;
        for s in steps.iter_mut() {
            *s = s.checked_mul(n as i64)?;
        }
        for (v, k) in coefs {
            let g = d.out.iter().position(|&x| x == v)?;
            steps[g] = steps[g].checked_add(k)?;
        }
    }
    Some((base, steps))
}

/// `e` with every `softmax`/`lnorm` node replaced by what `f` makes of it (its kind,
/// variable and argument); `None` where `f` gives none.
fn replace_normalize(
    e: &Expr,
    f: &mut dyn FnMut(Structural, VarId, &Expr) -> Option<Expr>,
) -> Option<Expr> {
    let mut sub = |x: &Expr| replace_normalize(x, &mut *f);
    Some(match e {
        Expr::Term(_) | Expr::Const(_) | Expr::Var(_) => e.clone(),
        Expr::Neg(x) => Expr::Neg(Box::new(sub(x)?)),
        Expr::Not(x) => Expr::Not(Box::new(sub(x)?)),
        Expr::Product(fs) => Expr::Product(
            fs.iter()
                .map(|(div, x)| Some((*div, sub(x)?)))
                .collect::<Option<_>>()?,
        ),
        Expr::Binary(op, a, b) => Expr::Binary(*op, Box::new(sub(a)?), Box::new(sub(b)?)),
        Expr::Compare(op, a, b) => Expr::Compare(*op, Box::new(sub(a)?), Box::new(sub(b)?)),
        Expr::Call(c, args) => Expr::Call(c.clone(), args.iter().map(sub).collect::<Option<_>>()?),
        Expr::Normalize(kind, var, x) => return f(*kind, *var, x),
    })
}

/// The expression with every `softmax`/`lnorm` replaced by a term holding its value over
/// the whole output (it needs a whole row of its argument at each element).
fn materialize<'a>(
    e: &Expr,
    d: &DenseEquation,
    terms: &mut Vec<Operand<'a>>,
    o: &EvalOptions,
) -> Option<Expr> {
    replace_normalize(e, &mut |kind, var, x| {
        let inner = materialize(x, d, terms, o)?;
        let dims: Vec<usize> = d.out.iter().map(|&v| d.extents[v]).collect();
        let total: usize = dims.iter().product();
        let mut buf = match inner {
            // A term laid out like the output (`softmax(Q K / 8)`) is copied as it is.
            Expr::Term(k) if terms[k].vars == d.out && terms[k].data.len() == total => {
                terms[k].data.to_vec()
            }
            _ => rows::values(&rows::Program::compile(&inner, o)?, d, terms),
        };
        if let Some(axis) = d.out.iter().position(|v| *v == var) {
            normalize_for(d, &mut buf, (&dims, axis), kind);
        }
        terms.push(Operand {
            vars: d.out.clone(),
            data: buf.into(),
        });
        Some(Expr::Term(terms.len() - 1))
    })
}

/// Softmax or layer normalisation of every row along `axis` of `scale · buf`, in place
/// (by [`exact_row`] for f64, by vectorised rows for f32). With `split`, rows along the last
/// axis are shared among the current rayon pool's workers, each row whole (so results do
/// not depend on the thread count).
fn normalize<T: Num>(
    buf: &mut [T],
    dims: &[usize],
    axis: usize,
    kind: Structural,
    (scale, split): (f64, bool),
) {
    let n = dims[axis];
    let stride: usize = dims[axis + 1..].iter().product();
    if n == 0 {
        return;
    }
    if stride == 1 {
        let rows = |chunk: &mut [T]| {
            chunk
                .chunks_exact_mut(n)
                .for_each(|row| T::normalize_row(kind, row, scale))
        };
        if split {
            use rayon::prelude::*;
            buf.par_chunks_mut(n * 64).for_each(rows);
        } else {
            rows(buf);
        }
        return;
    }
    let outer: usize = dims[..axis].iter().product();
    let mut row = vec![T::default(); n];
    for o in 0..outer {
        for inner in 0..stride {
            let base = o * n * stride + inner;
            for (q, r) in row.iter_mut().enumerate() {
                *r = buf[base + q * stride];
            }
            T::normalize_row(kind, &mut row, scale);
            for (q, &v) in row.iter().enumerate() {
                buf[base + q * stride] = v;
            }
        }
    }
}

/// [`normalize`] of f64 values that `d` stores: for an f32 (or narrower) target, on the
/// values rounded to f32, by the f32 rows (the same results as a product normalised in its
/// own f32 buffer); otherwise by the reference's operations.
fn normalize_for(
    d: &DenseEquation,
    buf: &mut [f64],
    (dims, axis): (&[usize], usize),
    kind: Structural,
) {
    if !d.narrow {
        return normalize(buf, dims, axis, kind, (1.0, false));
    }
    let mut narrow: Vec<f32> = buf.iter().map(|&x| x as f32).collect();
    normalize(&mut narrow, dims, axis, kind, (1.0, false));
    for (b, x) in buf.iter_mut().zip(narrow) {
        *b = f64::from(x);
    }
}

/// Softmax or layer normalisation of one row with the same operations as the reference, in
/// its order (statistics summed in index order); each exponential is computed once and
/// reused (the same value the reference computes twice).
fn exact_row(kind: Structural, row: &mut [f64]) {
    match kind {
        Structural::Softmax => {
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            for r in row.iter_mut() {
                *r = (*r - m).exp();
            }
            let s: f64 = row.iter().sum();
            for r in row.iter_mut() {
                *r /= s;
            }
        }
        _ => {
            let len = row.len() as f64;
            let mean = row.iter().sum::<f64>() / len;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / len;
            let sd = (var + crate::functions::LNORM_EPSILON).sqrt();
            for r in row.iter_mut() {
                *r = (*r - mean) / sd;
            }
        }
    }
}

/// Elements of all intermediates of a subtree: each pairwise result, plus each factor's
/// permuted copy.
fn intermediates(c: &Contraction, path: &Path) -> f64 {
    let volume = |vars: &[VarId]| vars.iter().map(|&v| c.extents[v] as f64).product::<f64>();
    let size = volume(&kept(c, path.factors()));
    match path {
        Path::Leaf(k) => volume(&c.factors[*k].vars) + size,
        Path::Pair(a, b) => intermediates(c, a) + intermediates(c, b) + size,
    }
}

/// A term's value over its free variables (in left-hand-side order), scaled.
fn term<'a>(c: &Contraction, values: &'a [Tensor], threads: usize) -> Operand<'a> {
    let mut root = match (c.single, &c.path) {
        (_, None) if c.sparse.is_none() => Operand {
            vars: Vec::new(),
            data: Cow::Owned(vec![1.0]),
        },
        (true, _) => widen(unscaled::<f32>(c, values, threads)),
        (false, _) => unscaled::<f64>(c, values, threads),
    };
    if c.scale != 1.0 {
        for x in root.data.to_mut().iter_mut() {
            *x *= c.scale;
        }
    }
    root
}

/// A term with factors, over its free variables in left-hand-side order, unscaled, in `T`.
fn unscaled<'a, T: Num>(c: &Contraction, values: &'a [Tensor], threads: usize) -> Operand<'a, T> {
    match (&c.sparse, &c.path) {
        (Some(f), _) => match tuples(&values[f.tensor].storage) {
            Some(r) if !f.shift.is_empty() => {
                let (rel, weights) = shifted_view(r, &f.shift, &f.vars, &c.extents);
                scatter(
                    c,
                    (&f.vars, (&rel, weights.as_deref())),
                    &sparse_operands(c, values, threads),
                    threads,
                )
            }
            Some(r) => scatter(
                c,
                (&f.vars, r),
                &sparse_operands(c, values, threads),
                threads,
            ),
            None => Operand {
                vars: c.out.clone(),
                data: Cow::Owned(vec![
                    T::default();
                    c.out.iter().map(|&v| c.extents[v]).product()
                ]),
            },
        },
        (None, Some(path)) => contracted(c, path, values, threads),
        (None, None) => Operand {
            vars: Vec::new(),
            data: Cow::Owned(vec![T::ONE]),
        },
    }
}

/// A term without a relation, over its free variables in left-hand-side order, unscaled;
/// in blocks of rows of its first variable when the plan says so (`Contraction::chunk`).
fn contracted<'a, T: Num>(
    c: &Contraction,
    path: &Path,
    values: &'a [Tensor],
    threads: usize,
) -> Operand<'a, T> {
    let (Some(rows), Some(&first)) = (c.chunk, c.out.first()) else {
        let dense = reduce(subtree(c, path, values, threads), &c.keep, &c.extents);
        return permute(dense, &c.out, &c.extents);
    };
    let total: usize = c.out.iter().map(|&v| c.extents[v]).product();
    let mut data = Vec::with_capacity(total);
    for start in (0..c.extents[first]).step_by(rows.max(1)) {
        let block = rows_block(
            c,
            first,
            start..(start + rows).min(c.extents[first]),
            values,
        );
        let dense = reduce(
            subtree(&block, path, values, threads),
            &block.keep,
            &block.extents,
        );
        data.extend_from_slice(&permute(dense, &block.out, &block.extents).data);
    }
    data.resize(total, T::default());
    Operand {
        vars: c.out.clone(),
        data: data.into(),
    }
}

/// The term restricted to rows `range` of the variable `first`: every factor that reads
/// it becomes a window starting at the block's first row.
fn rows_block(
    c: &Contraction,
    first: VarId,
    range: std::ops::Range<usize>,
    values: &[Tensor],
) -> Contraction {
    let mut block = c.clone();
    block.chunk = None;
    block.extents[first] = range.len();
    for f in block.factors.iter_mut() {
        let Some(at) = f.vars.iter().position(|&v| v == first) else {
            continue;
        };
        let window = match f.window.take() {
            Some(w) => w,
            None => {
                let shape = values
                    .get(f.tensor)
                    .map(|t| t.shape.clone())
                    .unwrap_or_default();
                let own = strides(&f.vars, &c.extents);
                crate::plan::einsum::Window {
                    shape,
                    offset: 0,
                    strides: own.iter().map(|&s| s as i64).collect(),
                }
            }
        };
        let step = window.strides[at];
        f.window = Some(crate::plan::einsum::Window {
            offset: (window.offset as i64 + step * range.start as i64) as usize,
            ..window
        });
    }
    block
}

/// A relation's tuples, or a tensor of defined elements' positions with their values (each
/// tuple's weight); `None` for a dense tensor.
fn tuples(s: &Storage) -> Option<Tuples<'_>> {
    match s {
        Storage::Relation(r) => Some((r, None)),
        Storage::Sparse(s) => Some((s.positions(), Some(s.values()))),
        Storage::Dense(_) => None,
    }
}

/// The tuples of a relation read at shifted positions (`Obs(t + 1, o)`), as the variables
/// see them: those whose every position minus its shift lies in its variable's extent, so
/// shifted (subtracting constants per axis keeps them sorted). The first axis's are a run
/// of the sorted tuples, found by binary search.
fn shifted_view(
    (rel, weights): Tuples,
    shift: &[i64],
    vars: &[VarId],
    extents: &[usize],
) -> (crate::tensor::Relation, Option<Vec<f64>>) {
    let arity = shift.len();
    let first = |i: usize| i64::from(rel.tuple(i)[0]);
    let (lo, hi) = match (shift.first(), vars.first()) {
        (Some(&s0), Some(&v0)) => {
            let bound = |limit: i64| {
                let (mut a, mut b) = (0, rel.len());
                while a < b {
                    let mid = (a + b) / 2;
                    if first(mid) < limit {
                        a = mid + 1;
                    } else {
                        b = mid;
                    }
                }
                a
            };
            (bound(s0), bound(s0 + extents[v0] as i64))
        }
        _ => (0, rel.len()),
    };
    let mut data = Vec::with_capacity((hi - lo) * arity);
    let mut kept = Vec::new();
    for i in lo..hi {
        let t = rel.tuple(i);
        let inside = t
            .iter()
            .zip(shift.iter().zip(vars))
            .all(|(&p, (&s, &v))| (0..extents[v] as i64).contains(&(i64::from(p) - s)));
        if inside {
            data.extend(
                t.iter()
                    .zip(shift)
                    .map(|(&p, &s)| (i64::from(p) - s) as u32),
            );
            kept.push(i);
        }
    }
    let view = crate::tensor::Relation::from_sorted(arity, data);
    let weights = weights.map(|w| kept.iter().map(|&i| w[i]).collect());
    (view, weights)
}

/// Tuples and, for a tensor of defined elements, the value at each (a relation's are 1).
type Tuples<'t> = (&'t crate::tensor::Relation, Option<&'t [f64]>);

/// The term's value over `c.out` when a relation multiplies dense operands: for every
/// tuple, the product of the operands' values at the tuple's positions (times the tuple's
/// value, for a tensor of defined elements) is added to the result there (variables the
/// tuple does not fix run over their extents). Time is linear in the tuples times that
/// slice; the relation is never made dense.
fn scatter<'a, T: Num>(
    c: &Contraction,
    (rel_vars, (rel, weights)): (&[VarId], Tuples),
    parts: &[Operand<T>],
    threads: usize,
) -> Operand<'a, T> {
    let walk = TupleWalk::new(c, rel_vars, parts);
    let total: usize = c.out.iter().map(|&v| c.extents[v]).product();
    let mut data = vec![T::default(); total];
    // Tuples are sorted, so when the relation's first variable is the result's first axis,
    // runs of tuples write disjoint slabs of rows: workers take whole slabs, and each
    // element is summed in tuple order whatever the thread count.
    let rows = c.out.first().map_or(0, |&v| c.extents[v]);
    if threads > 1 && rows > 0 && rel.len() >= 1 << 12 && c.out.first() == rel_vars.first() {
        use rayon::prelude::*;
        let row = total / rows;
        let first = |i: usize| (rel.tuple(i)[0] as usize).min(rows);
        let step = rel.len().div_ceil(threads * 8);
        let mut cuts = vec![0usize];
        let mut i = step;
        while i < rel.len() {
            while i < rel.len() && first(i) == first(i - 1) {
                i += 1;
            }
            if i < rel.len() {
                cuts.push(i);
            }
            i += step;
        }
        cuts.push(rel.len());
        let mut slabs = Vec::new();
        let mut rest = data.as_mut_slice();
        for (k, w) in cuts.windows(2).enumerate() {
            let end = if k + 2 == cuts.len() {
                rows
            } else {
                first(w[1])
            };
            let start = if k == 0 { 0 } else { first(w[0]) };
            let (slab, tail) = rest.split_at_mut((end - start) * row);
            rest = tail;
            slabs.push((w[0]..w[1], start * row, slab));
        }
        slabs.into_par_iter().for_each(|(tuples, base, slab)| {
            add_tuples(&walk, (rel, weights, tuples), parts, (slab, base));
        });
    } else {
        add_tuples(&walk, (rel, weights, 0..rel.len()), parts, (&mut data, 0));
    }
    Operand {
        vars: c.out.clone(),
        data: data.into(),
    }
}

/// Adds the products of `tuples` (times their `weights`, if any) into `out`, which holds the
/// result from offset `base` on.
fn add_tuples<T: Num>(
    walk: &TupleWalk,
    (rel, weights, tuples): (
        &crate::tensor::Relation,
        Option<&[f64]>,
        std::ops::Range<usize>,
    ),
    parts: &[Operand<T>],
    (out, base): (&mut [T], usize),
) {
    let row = match (parts, walk.free.as_slice()) {
        ([part], [(n, 1, steps)]) if steps[0] == 1 => Some((part, *n)),
        _ => None,
    };
    if let Some((part, n)) = row {
        if walk.runs() {
            return sum_rows(walk, (rel, weights, tuples), (&part.data, n), (out, base));
        }
    }
    let weight = |i: usize| weights.and_then(|w| w.get(i)).copied().unwrap_or(1.0);
    walk.run(rel, tuples, &mut |i, at_out, at, whole| {
        let at_out = at_out.wrapping_sub(base);
        match (row, whole) {
            // The common case, one operand whose free slice is contiguous like the result's
            // (`Neig(n, m) Z[m, d]`): add a row (times the tuple's value) to a row.
            (Some((part, n)), true) => {
                if let (Some(src), Some(dst)) = (
                    part.data.get(at[0]..at[0] + n),
                    out.get_mut(at_out..at_out.wrapping_add(n)),
                ) {
                    match weights {
                        None => dst.iter_mut().zip(src).for_each(|(d, &x)| *d = d.add(x)),
                        Some(_) => {
                            let w = T::from_f64(weight(i));
                            dst.iter_mut()
                                .zip(src)
                                .for_each(|(d, &x)| *d = d.add(x.mul(w)));
                        }
                    }
                }
                true
            }
            (None, true) => false,
            (_, false) => {
                let product = parts
                    .iter()
                    .zip(at)
                    .map(|(o, &k)| o.data[k].into())
                    .product::<f64>();
                if let Some(slot) = out.get_mut(at_out) {
                    *slot = T::from_f64((*slot).into() + weight(i) * product);
                }
                true
            }
        }
    });
}

/// [`add_tuples`] for one operand whose rows are added whole (`Neig(n, m) Z[m, d]`) when
/// only the tuple's first position moves the result ([`TupleWalk::runs`]): the sorted
/// tuples of one result row are consecutive, so their operand rows are summed in a local
/// row, in tuple order from zero, and stored once. The sums are the same as adding each
/// into the zeroed result.
fn sum_rows<T: Num>(
    walk: &TupleWalk,
    (rel, weights, tuples): (
        &crate::tensor::Relation,
        Option<&[f64]>,
        std::ops::Range<usize>,
    ),
    (part, n): (&[T], usize),
    (out, base): (&mut [T], usize),
) {
    let mut acc = vec![T::default(); n];
    let mut current: Option<usize> = None;
    let mut flush = |at: Option<usize>, acc: &mut [T]| {
        let dst = at.and_then(|at| out.get_mut(at.wrapping_sub(base)..at.wrapping_sub(base) + n));
        if let Some(dst) = dst {
            for (d, a) in dst.iter_mut().zip(acc.iter_mut()) {
                *d = d.add(*a);
                *a = T::default();
            }
        }
    };
    for i in tuples {
        let tuple = rel.tuple(i);
        let mut at_out = 0usize;
        let mut at = 0usize;
        let mut inside = true;
        for (&x, (extent, so, sp)) in tuple.iter().zip(&walk.fixed) {
            inside &= (x as usize) < *extent;
            at_out += x as usize * so;
            at += x as usize * sp[0];
        }
        let Some(src) = part.get(at..at + n).filter(|_| inside) else {
            continue;
        };
        if current != Some(at_out) {
            flush(current, &mut acc);
            current = Some(at_out);
        }
        match weights.and_then(|w| w.get(i)) {
            None => acc.iter_mut().zip(src).for_each(|(a, &x)| *a = a.add(x)),
            Some(&w) => {
                let w = T::from_f64(w);
                acc.iter_mut()
                    .zip(src)
                    .for_each(|(a, &x)| *a = a.add(x.mul(w)));
            }
        }
    }
    flush(current, &mut acc);
}

/// One axis of a relation-times-operands term: its extent, its stride in the result, and
/// its stride in each operand.
type Axis = (usize, usize, Vec<usize>);

/// What [`TupleWalk::run`] calls: tuple index, result offset, operand offsets, and whether
/// the call stands for the tuple's whole slice.
type TupleVisitor<'f> = dyn FnMut(usize, usize, &[usize], bool) -> bool + 'f;

/// How a relation-times-operands term is walked: the relation's variables, fixed by each
/// tuple, and the free ones (the result's and the operands' other variables) that run over
/// their extents at each tuple.
struct TupleWalk {
    fixed: Vec<Axis>,
    free: Vec<Axis>,
    operands: usize,
}

impl TupleWalk {
    fn new<T: Num>(c: &Contraction, rel_vars: &[VarId], parts: &[Operand<T>]) -> TupleWalk {
        let out_strides = strides(&c.out, &c.extents);
        let part_strides: Vec<Vec<usize>> =
            parts.iter().map(|o| strides(&o.vars, &c.extents)).collect();
        let axis = |v: VarId| {
            let within =
                |vars: &[VarId], s: &[usize]| vars.iter().position(|&x| x == v).map_or(0, |k| s[k]);
            let steps: Vec<usize> = parts
                .iter()
                .zip(&part_strides)
                .map(|(o, s)| within(&o.vars, s))
                .collect();
            (c.extents[v], within(&c.out, &out_strides), steps)
        };
        // Variables of one value (a step's index, a window's fixed row) move nothing.
        let mut free_vars: Vec<VarId> = Vec::new();
        for &v in c.out.iter().chain(parts.iter().flat_map(|p| p.vars.iter())) {
            if !rel_vars.contains(&v) && !free_vars.contains(&v) && c.extents[v] != 1 {
                free_vars.push(v);
            }
        }
        TupleWalk {
            fixed: rel_vars.iter().map(|&v| axis(v)).collect(),
            free: free_vars.into_iter().map(axis).collect(),
            operands: parts.len(),
        }
    }

    /// Whether only the tuple's first position moves the result: then the (sorted) tuples
    /// that add to one result element are consecutive.
    fn runs(&self) -> bool {
        self.fixed.first().is_some_and(|a| a.1 > 0) && self.fixed[1..].iter().all(|a| a.1 == 0)
    }

    /// For each tuple `i` inside the extents, calls `f(i, result offset, operand offsets,
    /// true)` at the start of its slice; unless that returns `true` (it handled the whole
    /// slice), then `f(…, false)` at every point of the slice, in row-major order of the free
    /// variables.
    fn run(
        &self,
        rel: &crate::tensor::Relation,
        tuples: std::ops::Range<usize>,
        f: &mut TupleVisitor,
    ) {
        let slice: usize = self.free.iter().map(|a| a.0).product();
        let mut idx = vec![0usize; self.free.len()];
        let mut at = vec![0usize; self.operands];
        for i in tuples {
            let tuple = rel.tuple(i);
            if tuple
                .iter()
                .zip(&self.fixed)
                .any(|(&x, a)| x as usize >= a.0)
            {
                continue;
            }
            let mut at_out = 0usize;
            at.iter_mut().for_each(|a| *a = 0);
            for (&x, (_, so, sp)) in tuple.iter().zip(&self.fixed) {
                at_out += x as usize * so;
                for (a, s) in at.iter_mut().zip(sp) {
                    *a += x as usize * s;
                }
            }
            if f(i, at_out, &at, true) {
                continue;
            }
            idx.iter_mut().for_each(|i| *i = 0);
            for _ in 0..slice {
                f(i, at_out, &at, false);
                for (ax, (n, so, sp)) in self.free.iter().enumerate().rev() {
                    idx[ax] += 1;
                    at_out += so;
                    for (a, s) in at.iter_mut().zip(sp) {
                        *a += s;
                    }
                    if idx[ax] < *n {
                        break;
                    }
                    at_out -= so * n;
                    for (a, s) in at.iter_mut().zip(sp) {
                        *a -= s * n;
                    }
                    idx[ax] = 0;
                }
            }
        }
    }
}

/// The dense operands a relation multiplies: each factor alone, summed over the variables
/// only it has, when no two factors share a summed variable (then each tuple needs only a
/// product of slices, as in `R(x, y) Emb[x, i] Emb[y, j]`); otherwise their planned product.
fn sparse_operands<'a, T: Num>(
    c: &Contraction,
    values: &'a [Tensor],
    threads: usize,
) -> Vec<Operand<'a, T>> {
    let shared = c.factors.iter().enumerate().any(|(i, f)| {
        f.vars.iter().any(|v| {
            !c.keep.contains(v)
                && c.factors
                    .iter()
                    .enumerate()
                    .any(|(j, g)| i != j && g.vars.contains(v))
        })
    });
    match &c.path {
        Some(path) if shared => vec![reduce(
            subtree(c, path, values, threads),
            &c.keep,
            &c.extents,
        )],
        Some(_) => (0..c.factors.len())
            .map(|k| {
                reduce(
                    subtree(c, &Path::Leaf(k), values, threads),
                    &c.keep,
                    &c.extents,
                )
            })
            .collect(),
        None => Vec::new(),
    }
}

/// Evaluates a subtree, keeping the variables needed outside it.
fn subtree<'a, T: Num>(
    c: &Contraction,
    path: &Path,
    values: &'a [Tensor],
    threads: usize,
) -> Operand<'a, T> {
    let leaf = |k: usize| {
        let f = &c.factors[k];
        Operand {
            vars: f.vars.clone(),
            data: factor_values(f, values, &c.extents),
        }
    };
    subtree_from(c, path, &leaf, threads)
}

/// A factor's values over its variables: the tensor as stored, or its window gathered.
fn factor_values<'a, T: Num>(f: &Factor, values: &'a [Tensor], extents: &[usize]) -> Cow<'a, [T]> {
    let Some(Storage::Dense(d)) = values.get(f.tensor).map(|t| &t.storage) else {
        return Cow::Owned(Vec::new());
    };
    let all = T::elements(d);
    match &f.window {
        None => all,
        Some(w) => {
            let dims: Vec<usize> = f.vars.iter().map(|&v| extents[v]).collect();
            Cow::Owned(strided_copy(&all, w.offset as i64, &w.strides, &dims))
        }
    }
}

/// Copies the elements at `offset + Σ strides[a] · idx[a]` for every index of `dims`, in
/// row-major order (a window's gather, and a permutation): the innermost axis in a tight
/// loop (a slice copy when it is contiguous), an odometer over the others. Positions outside
/// `data` read as the type's zero (planning keeps them from occurring).
fn strided_copy<T: Num>(data: &[T], offset: i64, strides: &[i64], dims: &[usize]) -> Vec<T> {
    let total: usize = dims.iter().product();
    if let Some(out) = transposed_copy(data, offset, strides, dims) {
        return out;
    }
    let mut out = Vec::with_capacity(total);
    let (inner, step) = match (dims.last(), strides.last()) {
        (Some(&n), Some(&s)) => (n, s),
        _ => (1, 0),
    };
    let outer = dims.len().saturating_sub(1);
    let mut idx = vec![0usize; outer];
    let mut at = offset;
    let read = |p: i64| {
        usize::try_from(p)
            .ok()
            .and_then(|p| data.get(p))
            .copied()
            .unwrap_or_default()
    };
    for _ in 0..total.checked_div(inner).unwrap_or(0) {
        let run = usize::try_from(at)
            .ok()
            .and_then(|a| data.get(a..a + inner));
        match run {
            Some(run) if step == 1 => out.extend_from_slice(run),
            _ => out.extend((0..inner as i64).map(|i| read(at + i * step))),
        }
        for ax in (0..outer).rev() {
            idx[ax] += 1;
            at += strides[ax];
            if idx[ax] < dims[ax] {
                break;
            }
            at -= strides[ax] * dims[ax] as i64;
            idx[ax] = 0;
        }
    }
    out
}

/// [`strided_copy`] when the innermost axis is strided and another axis is contiguous in
/// `data` (a transposition, as in `[r, s, p, q]` to `[p, q, r, s]`): 16×16 tiles of those
/// two axes are copied at a time, so each cache line read is used whole. `None` for other
/// layouts, or when a position would fall outside `data`.
fn transposed_copy<T: Num>(
    data: &[T],
    offset: i64,
    strides: &[i64],
    dims: &[usize],
) -> Option<Vec<T>> {
    const TILE: usize = 16;
    let last = dims.len().checked_sub(1)?;
    let a = strides[..last].iter().position(|&s| s == 1)?;
    let (na, nl, step) = (dims[a], dims[last], usize::try_from(strides[last]).ok()?);
    if step <= 1 || na < TILE || nl < TILE || offset < 0 || strides.iter().any(|&s| s < 0) {
        return None;
    }
    let reach: i64 = offset
        + strides
            .iter()
            .zip(dims)
            .map(|(&s, &n)| s * (n as i64 - 1))
            .sum::<i64>();
    if reach as usize >= data.len() || dims.contains(&0) {
        return None;
    }
    let total: usize = dims.iter().product();
    let out_strides = row_major(dims);
    let da = out_strides[a];
    let mut out = vec![T::default(); total];
    // An odometer over every axis but `a` and the last.
    let others: Vec<usize> = (0..last).filter(|&k| k != a).collect();
    let mut idx = vec![0usize; others.len()];
    let planes = total / (na * nl);
    let (mut src, mut dst) = (offset as usize, 0usize);
    for _ in 0..planes {
        for a0 in (0..na).step_by(TILE) {
            for l0 in (0..nl).step_by(TILE) {
                for ia in a0..(a0 + TILE).min(na) {
                    let row = dst + ia * da;
                    let from = src + ia;
                    for il in l0..(l0 + TILE).min(nl) {
                        out[row + il] = data[from + il * step];
                    }
                }
            }
        }
        for (k, &ax) in others.iter().enumerate().rev() {
            idx[k] += 1;
            src += strides[ax] as usize;
            dst += out_strides[ax];
            if idx[k] < dims[ax] {
                break;
            }
            src -= strides[ax] as usize * dims[ax];
            dst -= out_strides[ax] * dims[ax];
            idx[k] = 0;
        }
    }
    Some(out)
}

/// Evaluates a subtree whose leaves `leaf` supplies.
fn subtree_from<'a, T: Num>(
    c: &Contraction,
    path: &Path,
    leaf: &dyn Fn(usize) -> Operand<'a, T>,
    threads: usize,
) -> Operand<'a, T> {
    node(c, path, leaf, threads, &[])
}

/// [`subtree_from`] for a node whose parent sums `next` out of its result.
fn node<'a, T: Num>(
    c: &Contraction,
    path: &Path,
    leaf: &dyn Fn(usize) -> Operand<'a, T>,
    threads: usize,
    next: &[VarId],
) -> Operand<'a, T> {
    match path {
        Path::Leaf(k) => leaf(*k),
        Path::Pair(a, b) => {
            let keep = kept(c, path.factors());
            let (in_a, in_b) = (kept(c, a.factors()), kept(c, b.factors()));
            let summed: Vec<VarId> = in_a
                .iter()
                .filter(|v| in_b.contains(v) && !keep.contains(v))
                .copied()
                .collect();
            let x = node(c, a, leaf, threads, &summed);
            let y = node(c, b, leaf, threads, &summed);
            contract(x, y, (&keep, &c.out, next), &c.extents, threads)
        }
    }
}

/// Row-major strides of `vars`.
fn strides(vars: &[VarId], extents: &[usize]) -> Vec<usize> {
    row_major(&vars.iter().map(|&v| extents[v]).collect::<Vec<_>>())
}

/// Row-major strides of an array of extents `dims`.
fn row_major(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * dims[k + 1];
    }
    s
}

/// The operand with its axes in `order` (a permutation of its variables).
fn permute<'a, T: Num>(op: Operand<'a, T>, order: &[VarId], extents: &[usize]) -> Operand<'a, T> {
    if op.vars == order {
        return op;
    }
    let src = strides(&op.vars, extents);
    let from: Vec<i64> = order
        .iter()
        .map(|v| {
            op.vars
                .iter()
                .position(|x| x == v)
                .map_or(0, |k| src[k] as i64)
        })
        .collect();
    let dims: Vec<usize> = order.iter().map(|&v| extents[v]).collect();
    let data = strided_copy(&op.data, 0, &from, &dims);
    Operand {
        vars: order.to_vec(),
        data: data.into(),
    }
}

/// Sums out every variable not in `keep`, in row-major order of the summed ones (in f64,
/// then rounded to the operand's type).
fn reduce<'a, T: Num>(op: Operand<'a, T>, keep: &[VarId], extents: &[usize]) -> Operand<'a, T> {
    let (kept, summed): (Vec<VarId>, Vec<VarId>) = op.vars.iter().partition(|v| keep.contains(v));
    if summed.is_empty() {
        return op;
    }
    let block: usize = summed.iter().map(|&v| extents[v]).product();
    let order = [kept.clone(), summed].concat();
    let op = permute(op, &order, extents);
    let data = if block == 0 {
        vec![T::default(); kept.iter().map(|&v| extents[v]).product()]
    } else {
        op.data
            .chunks_exact(block)
            .map(|b| T::from_f64(b.iter().map(|&x| x.into()).sum()))
            .collect()
    };
    Operand {
        vars: kept,
        data: data.into(),
    }
}

/// The contraction of two operands over their shared variables not in `keep`. The result's
/// rows come from the operand whose own variables come first in `order` (the term's output
/// order), so that a product like `W[h, i] X[b, i]` onto `[b, h]` is computed as `X Wᵀ`
/// and needs no permutation afterwards.
fn contract<'a, T: Num>(
    x: Operand<'a, T>,
    y: Operand<'a, T>,
    (keep, order, next): (&[VarId], &[VarId], &[VarId]),
    extents: &[usize],
    threads: usize,
) -> Operand<'a, T> {
    let rank = |v: &VarId| order.iter().position(|o| o == v).unwrap_or(usize::MAX);
    let first_own = |a: &Operand<T>, b: &Operand<T>| {
        a.vars
            .iter()
            .filter(|v| keep.contains(v) && !b.vars.contains(v))
            .map(rank)
            .min()
    };
    // The result is laid out [batch, rows, columns]. When the parent contraction sums
    // `next` out of it, the orientation that puts those variables at one end lets the
    // parent read it in place (a chain `C[p, i] I[i, j, k, l] C[q, j] …` then never
    // permutes); otherwise the output order decides.
    let ends = |a: &Operand<T>, b: &Operand<T>| {
        let layout: Vec<VarId> = a
            .vars
            .iter()
            .filter(|v| keep.contains(v))
            .chain(
                b.vars
                    .iter()
                    .filter(|v| keep.contains(v) && !a.vars.contains(v)),
            )
            .copied()
            .collect();
        let n = next.len();
        n > 0
            && layout.len() >= n
            && (layout[..n].iter().all(|v| next.contains(v))
                || layout[layout.len() - n..].iter().all(|v| next.contains(v)))
    };
    let swap = match (ends(&x, &y), ends(&y, &x)) {
        (false, true) => true,
        (true, false) => false,
        _ => matches!((first_own(&x, &y), first_own(&y, &x)), (Some(r), Some(c)) if c < r),
    };
    let (x, y) = if swap { (y, x) } else { (x, y) };
    let with = |other: &Operand<T>| -> Vec<VarId> {
        keep.iter()
            .chain(&other.vars)
            .copied()
            .collect::<Vec<VarId>>()
    };
    let (keep_x, keep_y) = (with(&y), with(&x));
    let x = reduce(x, &keep_x, extents);
    let y = reduce(y, &keep_y, extents);
    let pick = |vars: &[VarId], test: &dyn Fn(&VarId) -> bool| -> Vec<VarId> {
        vars.iter().copied().filter(|v| test(v)).collect()
    };
    let batch = pick(&x.vars, &|v| y.vars.contains(v) && keep.contains(v));
    let inner = pick(&x.vars, &|v| y.vars.contains(v) && !keep.contains(v));
    let rows = pick(&x.vars, &|v| !y.vars.contains(v));
    let cols = pick(&y.vars, &|v| !x.vars.contains(v));
    let size = |vs: &[VarId]| -> usize { vs.iter().map(|&v| extents[v]).product() };
    let (m, k, n) = (size(&rows), size(&inner), size(&cols));
    // Operands are read in place through strides: the summed variables must lie together,
    // in the same order, in both; of each side's own variables, the largest run that lies
    // together gives the matrix's rows (or columns), and the rest are looped over with the
    // batch variables, each GEMM writing its block of the result. Where that fails, or would
    // make GEMMs so small that calls cost more than copying, operands are permuted into
    // `[batch, rows, inner]` and `[batch, inner, columns]` first.
    let (tail_x, tail_y) = (
        widest_run(&x.vars, &rows, extents),
        widest_run(&y.vars, &cols, extents),
    );
    let in_place = run_at(&x.vars, &inner).is_some()
        && run_at(&y.vars, &inner).is_some()
        && (size(&tail_x) == m && size(&tail_y) == n
            || size(&tail_x) * size(&tail_y) * k >= 1 << 13);
    let (x, y, tail_x, tail_y) = if in_place {
        (x, y, tail_x, tail_y)
    } else {
        let x = permute(
            x,
            &[batch.clone(), rows.clone(), inner.clone()].concat(),
            extents,
        );
        let y = permute(
            y,
            &[batch.clone(), inner.clone(), cols.clone()].concat(),
            extents,
        );
        (x, y, rows.clone(), cols.clone())
    };
    let (own_x, own_y) = (strides(&x.vars, extents), strides(&y.vars, extents));
    let stride = |vars: &[VarId], own: &[usize], v: Option<&VarId>| {
        v.and_then(|v| vars.iter().position(|x| x == v))
            .map_or(0, |p| own[p])
    };
    let loops: Vec<Loop> = batch
        .iter()
        .chain(rows.iter().filter(|v| !tail_x.contains(v)))
        .chain(cols.iter().filter(|v| !tail_y.contains(v)))
        .map(|v| {
            let (sx, sy) = (
                stride(&x.vars, &own_x, Some(v)),
                stride(&y.vars, &own_y, Some(v)),
            );
            (extents[*v], sx, sy)
        })
        .collect();
    let lhs = [
        stride(&x.vars, &own_x, tail_x.last()),
        stride(&x.vars, &own_x, inner.last()),
    ];
    let rhs = [
        stride(&y.vars, &own_y, inner.last()),
        stride(&y.vars, &own_y, tail_y.last()),
    ];
    let data = looped(
        &loops,
        (size(&tail_x), size(&tail_y), k),
        (&x.data, lhs),
        (&y.data, rhs),
        (T::default(), T::ONE),
        threads,
    );
    let looped_vars = batch
        .iter()
        .chain(rows.iter().filter(|v| !tail_x.contains(v)))
        .chain(cols.iter().filter(|v| !tail_y.contains(v)));
    Operand {
        vars: looped_vars.chain(&tail_x).chain(&tail_y).copied().collect(),
        data: data.into(),
    }
}

/// Where `group` lies in `vars` as consecutive axes in its own order (`Some(0)` for an
/// empty group).
fn run_at(vars: &[VarId], group: &[VarId]) -> Option<usize> {
    if group.is_empty() {
        return Some(0);
    }
    vars.windows(group.len()).position(|w| w == group)
}

/// Of the maximal runs of consecutive axes of `vars` that belong to `group`, the one with
/// the most elements (the later one on a tie), in `vars` order.
fn widest_run(vars: &[VarId], group: &[VarId], extents: &[usize]) -> Vec<VarId> {
    let mut best: Vec<VarId> = Vec::new();
    let mut best_size = 0usize;
    let mut run: Vec<VarId> = Vec::new();
    for v in vars.iter().map(Some).chain([None]) {
        match v {
            Some(v) if group.contains(v) => run.push(*v),
            _ => {
                let size: usize = run.iter().map(|&v| extents[v]).product();
                if !run.is_empty() && size >= best_size {
                    best_size = size;
                    best = std::mem::take(&mut run);
                }
                run.clear();
            }
        }
    }
    best
}

/// One loop around a contraction's matrix products: its extent and its stride in each
/// operand (0 where the operand does not vary along it).
type Loop = (usize, usize, usize);

/// A matrix operand: its elements and the strides of its row and column axes.
type Strided<'s, T> = (&'s [T], [usize; 2]);

/// An `m×k` times `k×n` product for every index of `loops` (row-major), stacked row-major
/// in the result: the loops move each operand's first element by its strides.
fn looped<T: Copy + Send + Sync + 'static>(
    loops: &[Loop],
    (m, n, k): (usize, usize, usize),
    lhs: Strided<T>,
    rhs: Strided<T>,
    unit: (T, T),
    threads: usize,
) -> Vec<T> {
    let padded;
    let (rhs, loops) = match unaliased(rhs, loops, (k, n)) {
        Some((copy, strides, moved)) => {
            padded = (copy, moved);
            ((padded.0.as_slice(), strides), padded.1.as_slice())
        }
        None => (rhs, loops),
    };
    let count: usize = loops.iter().map(|l| l.0).product();
    let mut out = vec![unit.0; count * m * n];
    let mut idx = vec![0usize; loops.len()];
    let (mut ox, mut oy) = (0usize, 0usize);
    for block in out.chunks_exact_mut((m * n).max(1)).take(count) {
        matmul(
            (m, n, k),
            (lhs.0, ox, lhs.1),
            (rhs.0, oy, rhs.1),
            block,
            unit,
            threads,
        );
        for (ax, &(extent, sx, sy)) in loops.iter().enumerate().rev() {
            idx[ax] += 1;
            ox += sx;
            oy += sy;
            if idx[ax] < extent {
                break;
            }
            ox -= sx * extent;
            oy -= sy * extent;
            idx[ax] = 0;
        }
    }
    out
}

/// A right-hand matrix stored transposed (`W[h, i]` read as `[i, h]`: contiguous down its
/// columns) whose column stride is a multiple of 2 KiB, copied with its columns 64 bytes
/// apart further: gemm packs such a matrix by reading many columns at once, and columns a
/// power of two apart fall into the same cache sets (a 512×512 f32 product took 1.4× as
/// long). Only when at most one loop moves it; the copy's strides and the loops with its
/// new stride, or `None` for any other layout.
fn unaliased<T: Copy>(
    (data, [sr, sc]): Strided<T>,
    loops: &[Loop],
    (k, n): (usize, usize),
) -> Option<(Vec<T>, [usize; 2], Vec<Loop>)> {
    let size = std::mem::size_of::<T>();
    let moving: Vec<usize> = (0..loops.len()).filter(|&i| loops[i].2 != 0).collect();
    if sr != 1 || k < 2 || n < 2 || !(sc * size).is_multiple_of(2048) || moving.len() > 1 {
        return None;
    }
    let (b, sb) = moving.first().map_or((1, 0), |&i| (loops[i].0, loops[i].2));
    let mut ld = k + 64 / size;
    if (ld * size).is_multiple_of(2048) {
        ld += 64 / size;
    }
    let mut out = Vec::with_capacity(b * n * ld);
    for i in 0..b {
        for j in 0..n {
            let at = i * sb + j * sc;
            out.extend_from_slice(data.get(at..at + k)?);
            out.extend(std::iter::repeat_n(data[at], ld - k));
        }
    }
    let mut loops = loops.to_vec();
    if let Some(&i) = moving.first() {
        loops[i].2 = n * ld;
    }
    Some((out, [1, ld], loops))
}

/// `dst = lhs · rhs` for an `m×k` and a `k×n` matrix of f32 or f64, each given as its
/// elements, the offset of its first one and its row and column strides (`unit` is the type's
/// 0 and 1); `dst` is row-major.
fn matmul<T: Copy + Send + Sync + 'static>(
    (m, n, k): (usize, usize, usize),
    (lhs, lo, [lr, lc]): (&[T], usize, [usize; 2]),
    (rhs, ro, [rr, rc]): (&[T], usize, [usize; 2]),
    dst: &mut [T],
    (zero, one): (T, T),
    threads: usize,
) {
    if m == 0 || n == 0 || k == 0 || dst.len() < m * n {
        return;
    }
    let last = |o: usize, r: usize, c: usize, rows: usize, cols: usize| {
        o + (rows - 1) * r + (cols - 1) * c
    };
    if last(lo, lr, lc, m, k) >= lhs.len() || last(ro, rr, rc, k, n) >= rhs.len() {
        return;
    }
    // A single row or column would take gemm's matrix-vector kernels, which sum in another
    // order than its matrix kernels: a row computed alone would differ from the same row in
    // a batch (§9). Padding it with a zero row or column keeps every product on the matrix
    // kernels.
    // Both operands are given to gemm row-major and contiguous, as they would be in a batch:
    // an operand already laid out so (a layer's weights) is read in place, the others (the
    // single row or column, and any strided operand) copied.
    if m == 1 || n == 1 {
        let (m2, n2) = (m.max(2), n.max(2));
        let a;
        let lhs = if m > 1 && lc == 1 && lr == k {
            (lhs, lo, [lr, lc])
        } else {
            let mut pad = vec![zero; m2 * k];
            for i in 0..m {
                for j in 0..k {
                    pad[i * k + j] = lhs[lo + i * lr + j * lc];
                }
            }
            a = pad;
            (a.as_slice(), 0, [k, 1])
        };
        let b;
        let rhs = if n > 1 && rc == 1 && rr == n {
            (rhs, ro, [rr, rc])
        } else {
            let mut pad = vec![zero; k * n2];
            for i in 0..k {
                for j in 0..n {
                    pad[i * n2 + j] = rhs[ro + i * rr + j * rc];
                }
            }
            b = pad;
            (b.as_slice(), 0, [n2, 1])
        };
        let mut out = vec![zero; m2 * n2];
        matmul((m2, n2, k), lhs, rhs, &mut out, (zero, one), threads);
        for i in 0..m {
            dst[i * n..(i + 1) * n].copy_from_slice(&out[i * n2..i * n2 + n]);
        }
        return;
    }
    // With threads, blocks of rows go to workers, each a whole product on one thread: a
    // row's sums never depend on the other rows (§9), so the result is the same, and one
    // fork per product beats gemm's own splitting on the moderate shapes of layers.
    if threads > 1 && m * n * k >= 1 << 24 && m >= 64 * threads {
        use rayon::prelude::*;
        let per = m.div_ceil(threads).next_multiple_of(16);
        dst[..m * n]
            .par_chunks_mut(per * n)
            .enumerate()
            .for_each(|(i, block)| {
                let lhs = (lhs, lo + i * per * lr, [lr, lc]);
                let rhs = (rhs, ro, [rr, rc]);
                matmul((block.len() / n, n, k), lhs, rhs, block, (zero, one), 1);
            });
        return;
    }
    // Below ~16M multiply-adds splitting costs more than it saves (thread wake-ups and
    // per-thread packing buffers); results are the same either way (tiles only are split).
    let parallelism = if threads > 1 && m * n * k >= 1 << 24 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // gemm splits the inner dimension into blocks whose size depends on m and n, and sums the
    // blocks into dst one after another; fixed blocks of KC (within which it never splits)
    // make that order the same for every batch size (§9).
    const KC: usize = 512;
    for k0 in (0..k).step_by(KC) {
        let kb = KC.min(k - k0);
        // SAFETY: every element the strides reach lies inside its slice (the largest offset
        // of each operand was checked above; a block starts inside it and reaches no
        // further), `dst` holds m·n row-major elements and does not alias the inputs, and T
        // is f32 or f64 (the callers), which gemm supports.
        unsafe {
            gemm::gemm(
                m,
                n,
                kb,
                dst.as_mut_ptr(),
                1,
                n as isize,
                k0 > 0,
                lhs.as_ptr().add(lo + k0 * lc),
                lc as isize,
                lr as isize,
                rhs.as_ptr().add(ro + k0 * rr),
                rc as isize,
                rr as isize,
                if k0 > 0 { one } else { zero },
                one,
                false,
                false,
                false,
                parallelism,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ordering of `n` axes.
    fn orders(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![Vec::new()];
        }
        let mut out = Vec::new();
        for rest in orders(n - 1) {
            for at in 0..=rest.len() {
                let mut o = rest.clone();
                o.insert(at, n - 1);
                out.push(o);
            }
        }
        out
    }

    /// Every permutation copies the element each position names, whether or not it takes
    /// the tiled path (extents below, at and above the tile, uneven ones).
    #[test]
    fn permutations_copy_each_element() {
        for dims in [vec![17usize, 33, 20], vec![5, 16, 3, 18], vec![40, 2, 16]] {
            let total: usize = dims.iter().product();
            let data: Vec<f32> = (0..total).map(|i| i as f32).collect();
            let own: Vec<usize> = (0..dims.len())
                .map(|a| dims[a + 1..].iter().product())
                .collect();
            for order in orders(dims.len()) {
                let d: Vec<usize> = order.iter().map(|&a| dims[a]).collect();
                let s: Vec<i64> = order.iter().map(|&a| own[a] as i64).collect();
                let got = strided_copy(&data, 0, &s, &d);
                let mut idx = vec![0usize; d.len()];
                for (at, &x) in got.iter().enumerate() {
                    let mut rest = at;
                    for ax in (0..d.len()).rev() {
                        idx[ax] = rest % d[ax];
                        rest /= d[ax];
                    }
                    let want: i64 = idx.iter().zip(&s).map(|(&i, &s)| i as i64 * s).sum();
                    assert_eq!(x, want as f32, "{dims:?} as {order:?} at {at}");
                }
            }
        }
    }
}
