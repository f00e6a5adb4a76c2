//! What becomes of a dense equation's terms: its elementwise expression evaluated over the
//! output grid a row at a time (or in place over an f32 product's own buffer), summed
//! after the expression where the equation says so, and written where the left-hand side
//! places each element.

use super::*;
use crate::plan::einsum::InPlaceEpilogue;
use crate::plan::rows::RowProgram;
use crate::tensor::odometer::{advance, carries};

/// Where each element of an equation's grid lands in its target.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Placement {
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
    pub(crate) fn each(&self, len: usize, f: &mut dyn FnMut(usize, usize)) {
        match self {
            Placement::Same => (0..len).for_each(|i| f(i, i)),
            Placement::Listed(at) => at
                .iter()
                .enumerate()
                .filter_map(|(i, a)| Some((i, (*a)?)))
                .for_each(|(i, a)| f(i, a)),
            Placement::Strided { base, steps, dims } => {
                let mut idx = vec![0usize; dims.len()];
                let carry = carries(steps, dims);
                let mut at = *base;
                for i in 0..len {
                    if let Ok(a) = usize::try_from(at) {
                        f(i, a);
                    }
                    at = advance(&mut idx, dims).map_or(*base, |ax| at + carry[ax]);
                }
            }
        }
    }
}

impl Placement {
    /// The target's values at the grid's elements (`zero` where an element lies outside
    /// it): what a backward pass reads where the forward pass wrote.
    pub(crate) fn gather<T: Copy + Send + Sync>(
        &self,
        len: usize,
        target: &[T],
        zero: T,
        threads: usize,
    ) -> Vec<T> {
        self.gather_as(len, target, zero, |x| x, threads)
    }

    /// [`Placement::gather`] with `f` converting each value as it is read (an adjoint
    /// rounded to the f32 of the products it feeds, in the same pass); runs are converted on
    /// the pool's workers where the grid is large.
    pub(crate) fn gather_as<S: Copy + Sync, T: Copy + Send + Sync>(
        &self,
        len: usize,
        target: &[S],
        zero: T,
        f: impl Fn(S) -> T + Sync,
        threads: usize,
    ) -> Vec<T> {
        let mut runs: Vec<(usize, usize, usize)> = Vec::new();
        if self
            .runs(len, &mut |i, a, n| runs.push((i, a, n)))
            .is_none()
        {
            let mut out = vec![zero; len];
            self.each(len, &mut |i, a| {
                if let (Some(dst), Some(&v)) = (out.get_mut(i), target.get(a)) {
                    *dst = f(v);
                }
            });
            return out;
        }
        // A run partly outside the target gives zeros.
        let source = |a: usize, n: usize| target.get(a..a + n);
        if split::splits(threads, len) {
            let mut out = split::zeros_of(len, zero, threads);
            let spans = runs.iter().map(|&(i, _, n)| (i, n));
            if let Some(slices) = crate::tensor::spans_mut(&mut out, spans) {
                let pieces: Vec<(&mut [T], &[S])> = slices
                    .into_iter()
                    .zip(&runs)
                    .filter(|(piece, &(_, _, n))| piece.len() == n)
                    .filter_map(|(piece, &(_, a, n))| Some((piece, source(a, n)?)))
                    .collect();
                use rayon::prelude::*;
                pieces.into_par_iter().for_each(|(dst, src)| {
                    dst.iter_mut().zip(src).for_each(|(d, &x)| *d = f(x));
                });
                return out;
            }
        }
        // Runs come in grid order: each is appended, so no element is written twice.
        let mut out = Vec::with_capacity(len);
        for (i, a, n) in runs {
            out.resize(i.min(len), zero);
            match source(a, n).filter(|_| i + n <= len) {
                Some(src) => out.extend(src.iter().map(|&x| f(x))),
                None => out.resize((i + n).min(len), zero),
            }
        }
        out.resize(len, zero);
        out
    }

    /// Whether [`Placement::runs`] can place the grid: it lands in runs of consecutive
    /// target offsets.
    pub(crate) fn in_runs(&self) -> bool {
        match self {
            Placement::Same => true,
            Placement::Listed(_) => false,
            Placement::Strided { steps, dims, .. } => steps.last() == Some(&1) && !dims.is_empty(),
        }
    }

    /// Calls `f(grid index, target offset, count)` for runs of grid elements that land on
    /// consecutive target offsets (rows of a strided placement whose last step is 1, the
    /// whole grid when it is laid out as the target), in grid order; `None`, calling
    /// nothing, where [`Placement::in_runs`] is false (use [`Placement::each`]).
    pub(crate) fn runs(&self, len: usize, f: &mut dyn FnMut(usize, usize, usize)) -> Option<()> {
        match self {
            Placement::Same => f(0, 0, len),
            Placement::Listed(_) => return None,
            Placement::Strided { base, steps, dims } => {
                if steps.last() != Some(&1) || dims.is_empty() {
                    return None;
                }
                // Trailing axes that lie together in the target make one longer run.
                let mut outer = dims.len() - 1;
                let mut row = dims[outer];
                while outer > 0 && steps[outer - 1] == row as i64 {
                    outer -= 1;
                    row *= dims[outer];
                }
                let mut idx = vec![0usize; outer];
                let carry = carries(&steps[..outer], &dims[..outer]);
                let mut at = *base;
                let mut i = 0;
                while i < len {
                    let n = row.min(len - i);
                    // A row starting before offset 0 is cut at the front.
                    match usize::try_from(at) {
                        Ok(a) => f(i, a, n),
                        Err(_) => {
                            let skip = at.unsigned_abs() as usize;
                            if skip < n {
                                f(i + skip, 0, n - skip);
                            }
                        }
                    }
                    i += row.max(1);
                    at = advance(&mut idx, &dims[..outer]).map_or(*base, |ax| at + carry[ax]);
                    if outer == 0 {
                        break;
                    }
                }
            }
        }
        Some(())
    }
}

/// What an f32 product's buffer becomes when it is stored as computed.
pub(super) enum Epilogue<'p> {
    /// The product itself, scaled.
    Bare,
    /// Softmax or layer normalisation along an output axis.
    Normalize(Structural, usize),
    /// The equation's elementwise expression, evaluated over the buffer a row at a time.
    Rows(rows::Program<'p>),
    /// The argument of a softmax or layer normalisation along an output axis, evaluated
    /// over the buffer a row at a time, then normalised there.
    NormalizeRows(Structural, usize, rows::Program<'p>),
}

/// The value of an f32 tensor with no data of its own, defined by one equation over an f32
/// contraction laid out like the output (`C[i, k] = A[i, j] B[j, k]`,
/// `S[p, q.] = softmax(Q[p, d] K[q, d] / 8)`, `H[b, h] = relu(W[h, i] X[b, i] + B[h])`):
/// the product's f32 result becomes its storage, and the rest of the equation is applied to
/// it in place, a row at a time, with no whole pass in f64. `None` for any other equation.
pub(super) fn stored_as_computed(
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
    let (true, None) = (p.data[t].is_none(), &d.scatter) else {
        return None;
    };
    f32_grid(d, values, (o, pool), None).map(Dense::from_f32)
}

/// The equation's value over its grid in f32, computed over its largest f32 product's own
/// buffer (the rest of the expression applied in place, a row at a time), when its target
/// holds f32 and it sums nothing after the expression; `None` otherwise.
/// With `keep`, the main term's product (in f32 as computed, or where it has a scale
/// widened and scaled as [`term`] gives it), the other terms it computed and the
/// normalisation's values are kept there for the backward pass (only when it gives a grid).
pub(super) fn f32_grid(
    d: &DenseEquation,
    values: &[Tensor],
    (o, pool): (&EvalOptions, Option<&rayon::ThreadPool>),
    keep: Option<&mut Vec<Option<KeptTerm>>>,
) -> Option<Vec<f32>> {
    let planned = d.in_place.as_ref()?;
    let main = planned.main;
    let c = d.terms.get(main)?;
    let epilogue = match &planned.epilogue {
        InPlaceEpilogue::Bare => Epilogue::Bare,
        InPlaceEpilogue::Normalize(kind, axis) => Epilogue::Normalize(*kind, *axis),
        InPlaceEpilogue::Rows => Epilogue::Rows(rows::Program::bind(d.program.as_ref()?, d, o)?),
        InPlaceEpilogue::NormalizeRows(kind, axis, arg) => {
            Epilogue::NormalizeRows(*kind, *axis, rows::Program::bind(arg, d, o)?)
        }
    };
    let split = split(d, values, pool);
    // Work is split only inside the pool of `--threads` workers, never on rayon's global one.
    let workers = if split { o.threads.max(1) } else { 1 };
    let keeping = keep.is_some();
    let run = || {
        let mut data = unscaled::<f32>(c, values, workers).data.into_owned();
        let mut kept: Vec<Option<KeptTerm>> = Vec::new();
        let mut divisors = None;
        if keeping {
            kept = vec![None; d.terms.len()];
            // What the backward pass would compute again and reads (a product of f64
            // factors it computes in f64, so that one is not kept).
            if c.single && d.read_back.get(main) == Some(&true) {
                let values = match c.scale {
                    // `relu`'s derivative is 1 exactly where its value is positive: the
                    // grid (moved here once written, [`keep_grid`]) serves as the product.
                    1.0 if relu_of(d, main) => Grid::F32(Vec::new()),
                    1.0 => Grid::F32(split::mapped(&data, |&x| x, o.threads)),
                    scale => Grid::F64(widened(&data, scale, o.threads)),
                };
                kept[main] = Some((c.out.to_vec(), values));
            }
        }
        match &epilogue {
            Epilogue::Bare if c.scale != 1.0 => {
                // In f64, as the general path scales, then rounded once.
                data.iter_mut()
                    .for_each(|x| *x = (f64::from(*x) * c.scale) as f32);
            }
            Epilogue::Bare | Epilogue::Normalize(..) => {}
            // `relu` of the product alone: in f32, the same bits as widened, taken and
            // rounded back (an f32 is exact in f64 and `max` rounds nothing).
            Epilogue::Rows(_) if c.scale == 1.0 && relu_of(d, main) => {
                relu_in_place(&mut data, workers > 1)
            }
            Epilogue::Rows(program) | Epilogue::NormalizeRows(_, _, program) => {
                let at = (main, c.scale, workers);
                let keep = keeping.then_some(&mut kept);
                divisors = rows_in_place(d, values, (program, at), &mut data, keep);
            }
        }
        // A normalisation reads the product scaled, or the expression's values.
        let normalization = match &epilogue {
            Epilogue::Normalize(kind, axis) => Some((*kind, *axis, c.scale)),
            Epilogue::NormalizeRows(kind, axis, _) => Some((*kind, *axis, 1.0)),
            Epilogue::Bare | Epilogue::Rows(_) => None,
        };
        if let Some((kind, axis, scale)) = normalization {
            let dims: Vec<usize> = d.out.iter().map(|&v| d.extents[v]).collect();
            normalize(&mut data, &dims, axis, kind, (scale, split));
            // The backward pass reads the normalisation's value as the term after the
            // equation's own: the grid itself, which the caller moves there once it has
            // written it ([`keep_grid`]).
            if keeping {
                kept.push(Some((d.out.to_vec(), Grid::F32(Vec::new()))));
                if let Some(divisors) = divisors {
                    kept.push(Some((Vec::new(), Grid::F64(divisors))));
                }
            }
        }
        (data, kept)
    };
    let (data, kept) = match pool {
        Some(pool) if split => pool.install(run),
        _ => run(),
    };
    if let Some(k) = keep {
        *k = kept;
    }
    Some(data)
}

/// Moves an equation's f32 grid, once written, into the slot [`f32_grid`] left empty for
/// it: its normalisation's value (the grid is that value), or the product under a bare
/// `relu` (whose derivative the grid gives as well); nothing where it left none.
pub(crate) fn keep_grid(d: &DenseEquation, kept: &mut [Option<KeptTerm>], grid: Grid) {
    let len = grid.len();
    let left = kept
        .iter_mut()
        .take(d.terms.len() + 1)
        .flatten()
        .find(|(_, g)| matches!(g, Grid::F32(v) if v.is_empty()));
    if let (Some((_, slot)), Grid::F32(_), true) = (left, &grid, len > 0) {
        *slot = grid;
    }
}

/// `relu` of every element of `buf`, on the widest vectors; with `split`, in blocks on the
/// current pool's workers.
fn relu_in_place(buf: &mut [f32], split: bool) {
    use crate::functions::widest::{widest, Inlined};
    split::each_block(buf, RELU_BLOCK, split, |_, xs| {
        widest(Inlined(|| {
            xs.iter_mut()
                .for_each(|x| *x = crate::functions::relu32(*x))
        }))
    });
}

/// Elements per block of a split [`relu_in_place`].
const RELU_BLOCK: usize = 1 << 15;

/// Whether the expression is `relu` of term `main` alone.
fn relu_of(d: &DenseEquation, main: usize) -> bool {
    use crate::functions::Builtin;
    use crate::plan::rows::RowOp;
    d.program.as_ref().is_some_and(|p| {
        matches!(&p.ops[..], [RowOp::Term(k), RowOp::Builtin(Builtin::Relu, args)]
            if *k == main && args[..] == [0])
    })
}

/// `program` evaluated over `buf`, which holds term `main` (scaled by `scale` as it is
/// read), a row at a time (`rows::in_place`), split among `workers` as the other terms are
/// computed; the other terms it computed (not those it only read) that the backward pass
/// reads are kept in `keep`. When keeping for an `lnorm` along the grid's last axis, its
/// rows' divisors, which the backward pass reads instead of computing the argument again.
fn rows_in_place(
    d: &DenseEquation,
    values: &[Tensor],
    (program, (main, scale, workers)): (&rows::Program, (usize, f64, usize)),
    buf: &mut [f32],
    keep: Option<&mut Vec<Option<KeptTerm>>>,
) -> Option<Vec<f64>> {
    let terms: smallvec::SmallVec<[Operand; 4]> = d
        .terms
        .iter()
        .enumerate()
        .map(|(k, c)| match k == main {
            true => Operand {
                vars: Vars::from_slice(&c.out),
                data: Cow::Owned(Vec::new()),
            },
            false => term(c, values, workers),
        })
        .collect();
    let split = workers > 1;
    let rows = match (keep.is_some() && d.divides_rows(), d.out.last()) {
        (true, Some(&v)) => buf.len() / d.extents[v].max(1),
        _ => 0,
    };
    let mut divisors = (rows > 0).then(|| vec![0.0; rows]);
    let at = (main, scale);
    rows::in_place(program, d, &terms, at, buf, split, divisors.as_deref_mut());
    if let Some(kept) = keep {
        for (k, t) in terms.into_iter().enumerate() {
            let read = d.read_back.get(k) != Some(&false);
            if let (false, true, Cow::Owned(v), Some(slot)) =
                (k == main, read, t.data, kept.get_mut(k))
            {
                *slot = Some((t.vars.to_vec(), Grid::F64(v)));
            }
        }
    }
    divisors
}

/// Adds the equation's value at every output element to `acc` (row-major over `d.out`; when
/// `acc` is `None`, the values become it); `false` when the expression calls a function that
/// is not registered.
pub(super) fn fused<'a>(
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
        if terms[k].vars[..] == d.out[..] {
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
    let Some(values) = grid_values(d, terms, o) else {
        return false;
    };
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
pub(super) fn grid_values(
    d: &DenseEquation,
    terms: &mut Vec<Operand>,
    o: &EvalOptions,
) -> Option<Vec<f64>> {
    if let Some(planned) = &d.program {
        return Some(rows::values(&rows::Program::bind(planned, d, o)?, d, terms));
    }
    let expr = materialize(&d.expr, d, terms, o)?;
    let compiled = RowProgram::compile(&expr)?;
    Some(rows::values(
        &rows::Program::bind(&compiled, d, o)?,
        d,
        terms,
    ))
}

/// For each element of the grid (row-major over `d.out`), the target offset its left-hand-side
/// positions name (`d.scatter`), or `None` where one falls outside the target.
pub(crate) fn targets(d: &DenseEquation) -> Vec<Option<usize>> {
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
        advance(&mut idx, &dims);
    }
    out
}

/// When each position is `c + Σ k·v` over the grid's variables and stays inside the target
/// at every grid element (`State[i, t + 1]` at a step), the target offset of the grid's
/// first element and its step per grid axis: no expression is then evaluated per element.
pub(super) fn affine_layout(
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
pub(crate) fn replace_normalize(
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
pub(super) fn materialize<'a>(
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
            Expr::Term(k) if terms[k].vars[..] == d.out[..] && terms[k].data.len() == total => {
                terms[k].data.to_vec()
            }
            _ => {
                let compiled = RowProgram::compile(&inner)?;
                rows::values(&rows::Program::bind(&compiled, d, o)?, d, terms)
            }
        };
        if let Some(axis) = d.out.iter().position(|v| *v == var) {
            normalize_for(d, &mut buf, (&dims, axis), (kind, o.threads));
        }
        terms.push(Operand {
            vars: Vars::from_slice(&d.out),
            data: buf.into(),
        });
        Some(Expr::Term(terms.len() - 1))
    })
}

#[cfg(test)]
mod tests {
    use super::Placement;

    /// `relu` in f32 gives the bits of `relu` of the widened value rounded back, for zeros of
    /// either sign, NaN, infinities and subnormals, split or not.
    #[test]
    fn relu_in_f32_matches_relu_in_f64() {
        let xs: Vec<f32> = [
            0.0,
            -0.0,
            1.5,
            -2.5,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ]
        .into_iter()
        .chain([1e-45, -1e-45, f32::MIN_POSITIVE, -f32::MIN_POSITIVE])
        .cycle()
        .take(70_000)
        .collect();
        let want: Vec<u32> = xs
            .iter()
            .map(|&x| (crate::functions::relu(f64::from(x)) as f32).to_bits())
            .collect();
        for split in [false, true] {
            let mut got = xs.clone();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            pool.install(|| super::relu_in_place(&mut got, split));
            assert_eq!(got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want);
        }
    }

    #[test]
    fn a_gather_gives_zeros_where_rows_lie_outside_the_target() {
        // A 3×2 grid whose rows start at -1, 2 and 5 of a target of 6: the first row is cut
        // at the front, the last lies partly past the end.
        let at = Placement::Strided {
            base: -1,
            steps: vec![3, 1],
            dims: vec![3, 2],
        };
        let target = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0];
        assert_eq!(
            at.gather(6, &target, 0.0, 1),
            vec![0.0, 10.0, 12.0, 13.0, 0.0, 0.0]
        );
        assert_eq!(
            Placement::Same.gather(3, &target, 0.0, 1),
            vec![10.0, 11.0, 12.0]
        );
    }

    #[test]
    fn a_gather_split_across_threads_matches_one_thread() {
        // Rows of 1024 every 2048 elements, the last one past the end of the target.
        let (rows, run) = (256, 1024);
        let at = Placement::Strided {
            base: 0,
            steps: vec![2 * run as i64, 1],
            dims: vec![rows, run],
        };
        let target: Vec<f64> = (0..2 * run * (rows - 1)).map(|i| i as f64).collect();
        let round = |x: f64| (x / 3.0) as f32;
        let one = at.gather_as(rows * run, &target, 0.0, round, 1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let two = pool.install(|| at.gather_as(rows * run, &target, 0.0, round, 2));
        assert_eq!(one, two);
        assert_eq!(one[run + 1], round(target[2 * run + 1]));
        assert!(one[(rows - 1) * run..].iter().all(|&x| x == 0.0));
    }
}
