//! The elementwise expression of a dense equation, evaluated a row at a time.
//!
//! The plan compiles the expression into a list of operations in postorder
//! (`plan::rows`); each operation
//! then runs over a whole row of the output (its innermost axis) in a tight loop, so the
//! interpretation costs once per row rather than once per element. Each element goes through
//! the same f64 operations in the same order as the reference evaluator's, so values are
//! identical. The backward pass keeps every operation's row and walks the list in reverse,
//! giving each term's adjoint.

use super::{split, Operand};
use crate::eval::EvalOptions;
use crate::functions::widest::{widest, Vectorised};
use crate::functions::{Builtin, RowStats, Structural, UserFunction};
use crate::plan::einsum::DenseEquation;
use crate::plan::rows::{RowLayout, RowOp, RowProgram, Table};
use crate::plan::schedule::{ROW_BLOCK, ROW_WORK};
use crate::semantics::VarId;
use crate::syntax::ast::CmpOp;
use crate::tensor::odometer::{self, advance, carries};
use smallvec::{smallvec, SmallVec};
use std::borrow::Cow;

/// Positions and offsets of one row, on the stack for grids of up to eight axes.
type Small<T> = SmallVec<[T; 8]>;

/// A compiled expression with the registered functions it calls found and its tables
/// computed.
pub(crate) struct Program<'p> {
    ops: &'p [RowOp],
    live: &'p [bool],
    needed: &'p [bool],
    users: Vec<&'p UserFunction>,
    tables: Vec<Tabulated>,
    /// `--threads`: a thread that joined a pool stays in it, so one thread must be asked
    /// for, not read off the pool.
    threads: usize,
}

impl<'p> Program<'p> {
    /// Whether every function `p` calls is registered in `--functions` (what [`Program::bind`]
    /// needs, without computing its tables).
    pub(crate) fn binds(p: &RowProgram, o: &EvalOptions) -> bool {
        p.users.iter().all(|name| o.functions.contains_key(name))
    }

    /// `p` with its functions looked up in `--functions` and its tables computed over
    /// `d`'s extents; `None` when a function is not registered.
    pub(crate) fn bind(
        p: &'p RowProgram,
        d: &DenseEquation,
        o: &'p EvalOptions,
    ) -> Option<Program<'p>> {
        let users = p
            .users
            .iter()
            .map(|name| o.functions.get(name))
            .collect::<Option<Vec<_>>>()?;
        let tables = p.tables.iter().map(|t| Tabulated::new(t, d)).collect();
        Some(Program {
            ops: &p.ops,
            live: &p.live,
            needed: &p.needed,
            users,
            tables,
            threads: o.threads,
        })
    }
}

/// A [`Table`]'s values, and where a row of the output reads them.
struct Tabulated {
    values: Vec<f64>,
    /// Each outer output variable the table varies along, with its stride there.
    outer: Vec<(VarId, usize)>,
    /// Its stride along the row (0 where it does not vary along it).
    inner: usize,
}

impl Tabulated {
    /// The table's value at every position of its variables (row-major), each computed by
    /// the operations, in the order, of [`forward_row`].
    fn new(t: &Table, d: &DenseEquation) -> Tabulated {
        let dims: Vec<usize> = t.vars.iter().map(|&v| d.extents[v]).collect();
        let strides = odometer::row_major(&dims);
        let total: usize = dims.iter().product();
        let mut env = vec![0usize; d.extents.len()];
        let mut vals = vec![0.0; t.ops.len()];
        let mut values = Vec::with_capacity(total);
        for at in 0..total {
            for ((&v, &n), &s) in t.vars.iter().zip(&dims).zip(&strides) {
                env[v] = at / s % n.max(1);
            }
            for (i, op) in t.ops.iter().enumerate() {
                vals[i] = scalar(op, &vals, &env);
            }
            values.push(vals.last().copied().unwrap_or(f64::NAN));
        }
        let inner_var = d.out.last().copied();
        let stride_of = |v: VarId| t.vars.iter().position(|&x| x == v).map(|k| strides[k]);
        Tabulated {
            values,
            outer: t
                .vars
                .iter()
                .filter(|&&v| Some(v) != inner_var)
                .filter_map(|&v| Some((v, stride_of(v)?)))
                .collect(),
            inner: inner_var.and_then(stride_of).unwrap_or(0),
        }
    }

    /// Where the row at output positions `env` starts.
    fn base(&self, env: &[usize]) -> usize {
        self.outer.iter().map(|&(v, s)| env[v] * s).sum()
    }
}

/// One operation of a table at one point, as [`forward_row`]'s loops compute it there
/// (a table holds no term and no registered function).
fn scalar(op: &RowOp, vals: &[f64], env: &[usize]) -> f64 {
    let one = |holds: bool| f64::from(u8::from(holds));
    match *op {
        RowOp::Const(c) => c,
        RowOp::Var(v) => env[v] as f64,
        RowOp::Neg(a) => -vals[a],
        RowOp::Not(a) => 1.0 - vals[a],
        RowOp::Mul(a, b) => vals[a] * vals[b],
        RowOp::Mask(a, m) => masked(vals[a], vals[m]),
        RowOp::Div(a, b) => vals[a] / vals[b],
        RowOp::Add(a, b) => vals[a] + vals[b],
        RowOp::Sub(a, b) => vals[a] - vals[b],
        RowOp::Pow(a, b) => vals[a].powf(vals[b]),
        RowOp::Rem(a, b) => vals[a] % vals[b],
        RowOp::Quot(a, b) => (vals[a] / vals[b]).trunc(),
        RowOp::Compare(c, a, b) => {
            let (x, y) = (vals[a], vals[b]);
            one(match c {
                CmpOp::Eq => x == y,
                CmpOp::Ne => x != y,
                CmpOp::Lt => x < y,
                CmpOp::Le => x <= y,
                CmpOp::Gt => x > y,
                CmpOp::Ge => x >= y,
            })
        }
        RowOp::Builtin(Builtin::Relu, ref args) if args.len() == 1 => {
            crate::functions::relu(vals[args[0]])
        }
        RowOp::Builtin(f, ref args) => match args.as_slice() {
            [a] => f.apply(&[vals[*a]]),
            [a, b] => f.apply(&[vals[*a], vals[*b]]),
            _ => f64::NAN,
        },
        RowOp::Term(_) | RowOp::User(..) | RowOp::Table(_) => f64::NAN,
    }
}

/// What [`Rows::each`] calls per row: its index, each term's offset at its start, and the
/// output variables' positions.
type RowVisitor<'f> = dyn FnMut(usize, &[usize], &[usize]) + 'f;

/// The grid's rows in each term: the plan's layout where the terms are the planned ones,
/// otherwise (a normalisation made a term at run time) one made for these terms.
struct Rows<'d>(Cow<'d, RowLayout>);

impl<'d> Rows<'d> {
    fn new(d: &'d DenseEquation, terms: &[Operand]) -> Rows<'d> {
        let planned = terms.len() == d.terms.len()
            && terms
                .iter()
                .zip(&d.terms)
                .all(|(t, c)| t.vars.iter().eq(&c.out));
        Rows(match planned {
            true => Cow::Borrowed(&d.layout),
            false => Cow::Owned(RowLayout::new(d, terms.iter().map(|t| t.vars.as_slice()))),
        })
    }

    /// The plan's mask term ([`DenseEquation::mask`]) where the terms are the planned ones.
    fn mask(&self, d: &DenseEquation) -> Option<usize> {
        d.mask.filter(|_| matches!(self.0, Cow::Borrowed(_)))
    }

    /// The positions along the row at `at` where term `k` is nonzero, into `out`.
    fn picks(&self, k: usize, terms: &[Operand], at: &[usize], out: &mut Vec<usize>) {
        out.clear();
        let (base, step, data) = (at[k], self.inner_step(k), &terms[k].data);
        out.extend((0..self.0.len).filter(|&j| data[base + j * step] != 0.0));
    }

    /// The elements a pass evaluates: the grid's, or under a mask its nonzero ones (each
    /// repeated along the grid's axes the mask term does not have).
    fn elements(&self, d: &DenseEquation, terms: &[Operand]) -> usize {
        let grid = self.0.len * self.0.count;
        match self.mask(d) {
            Some(k) => {
                let data = &terms[k].data;
                let nonzero = data.iter().filter(|&&x| x != 0.0).count();
                nonzero * (grid / data.len().max(1))
            }
            None => grid,
        }
    }

    fn inner_step(&self, k: usize) -> usize {
        self.0.inner_step(k)
    }

    /// Calls `f` for each row of `range` with its index, each term's offset at its start,
    /// and the positions of the output variables there.
    fn each(&self, d: &DenseEquation, range: std::ops::Range<usize>, f: &mut RowVisitor) {
        let l = &*self.0;
        let outer = l.dims.len().saturating_sub(1);
        let mut idx: Small<usize> = smallvec![0; outer];
        odometer::unflatten(range.start, &l.dims[..outer], |ax, i| idx[ax] = i);
        let mut at: Small<usize> = smallvec![0; l.steps.len()];
        if outer > 0 {
            for (a, s) in at.iter_mut().zip(&l.steps) {
                *a = idx.iter().zip(s).map(|(i, s)| i * s).sum();
            }
        }
        let dims = &l.dims[..outer];
        // Each term's offset change when an axis advances.
        let carry: Vec<Vec<i64>> = l
            .steps
            .iter()
            .map(|s| {
                let s: Vec<i64> = s[..outer].iter().map(|&x| x as i64).collect();
                carries(&s, dims)
            })
            .collect();
        let mut env: Small<usize> = smallvec![0; d.extents.len()];
        for row in range.start..range.end.min(l.count) {
            for (&v, &x) in d.out.iter().zip(&idx) {
                env[v] = x;
            }
            f(row, &at, &env);
            if let Some(ax) = advance(&mut idx, dims) {
                for (a, c) in at.iter_mut().zip(&carry) {
                    *a = a.wrapping_add_signed(c[ax] as isize);
                }
            }
        }
    }
}

/// A term read from an f32 row rather than from its operand: the row of a product the
/// equation's value is written over ([`in_place`]), and the term's scale.
struct Main<'r> {
    term: usize,
    row: &'r [f32],
    scale: f64,
}

/// Computes every operation's row into `vals` (operation i at `i·len..(i+1)·len`), or, with
/// `picks`, only at those positions along the row (operation i at `i·m..(i+1)·m`, m picks);
/// with `only`, only the operations it marks. The operations' loops run on the widest
/// vectors the processor has (each is rounded once, so every width gives the same bits).
fn forward_row(
    p: &Program,
    eq: (&DenseEquation, &Rows, &[Operand]),
    pos: (&[usize], &[usize]),
    how: (Option<Main>, Option<&[usize]>, Option<&[bool]>),
    vals: &mut [f64],
) {
    widest(Forward {
        p,
        eq,
        pos,
        how,
        vals,
    });
}

/// [`forward_row`]'s arguments, as a loop for `functions::widest`.
struct Forward<'a> {
    p: &'a Program<'a>,
    eq: (&'a DenseEquation, &'a Rows<'a>, &'a [Operand<'a>]),
    pos: (&'a [usize], &'a [usize]),
    how: (Option<Main<'a>>, Option<&'a [usize]>, Option<&'a [bool]>),
    vals: &'a mut [f64],
}

impl Vectorised for Forward<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        forward_loops(self.p, self.eq, self.pos, self.how, self.vals);
    }
}

/// [`forward_row`]'s loops, inlined into each vector width's copy.
#[inline(always)]
fn forward_loops(
    p: &Program,
    (d, rows, terms): (&DenseEquation, &Rows, &[Operand]),
    (at, env): (&[usize], &[usize]),
    (main, picks, only): (Option<Main>, Option<&[usize]>, Option<&[bool]>),
    vals: &mut [f64],
) {
    let n = picks.map_or(rows.0.len, <[usize]>::len);
    let inner_var = d.out.last().copied();
    let last = p.ops.len().saturating_sub(1);
    // Where only the root is read afterwards (a forward pass), a term read contiguously
    // along the row is read where it lies rather than copied into `vals` first.
    let in_place = |i: usize| -> Option<&[f64]> {
        if only.is_some() || picks.is_some() || i == last {
            return None;
        }
        match p.ops.get(i)? {
            RowOp::Table(t) => {
                let t = p.tables.get(*t).filter(|t| t.inner == 1)?;
                let base = t.base(env);
                t.values.get(base..base + n)
            }
            RowOp::Term(k) => {
                let own = main.as_ref().is_some_and(|m| m.term == *k);
                if own || rows.inner_step(*k) != 1 {
                    return None;
                }
                terms[*k].data.get(at[*k]..at[*k] + n)
            }
            _ => None,
        }
    };
    for (i, op) in p.ops.iter().enumerate() {
        if only.is_some_and(|o| !o[i]) || in_place(i).is_some() {
            continue;
        }
        let (done, rest) = vals.split_at_mut(i * n);
        let out = &mut rest[..n];
        let row = |a: usize| in_place(a).unwrap_or(&done[a * n..(a + 1) * n]);
        let un = |a: usize, out: &mut [f64], f: fn(f64) -> f64| map1(row(a), out, f);
        match op {
            RowOp::Term(k) if main.as_ref().is_some_and(|m| m.term == *k) => {
                if let Some(m) = &main {
                    for (o, &x) in out.iter_mut().zip(m.row) {
                        *o = f64::from(x) * m.scale;
                    }
                }
            }
            RowOp::Term(k) => {
                let strided = (&terms[*k].data[..], at[*k], rows.inner_step(*k));
                gather_row(strided, picks, out);
            }
            RowOp::Const(c) => out.fill(*c),
            RowOp::Table(t) => match p.tables.get(*t) {
                Some(t) => gather_row((&t.values[..], t.base(env), t.inner), picks, out),
                None => out.fill(f64::NAN),
            },
            RowOp::Var(v) => {
                if Some(*v) == inner_var {
                    for (j, o) in out.iter_mut().enumerate() {
                        *o = picks.map_or(j, |js| js[j]) as f64;
                    }
                } else {
                    out.fill(env[*v] as f64);
                }
            }
            RowOp::Neg(a) => un(*a, out, |x| -x),
            RowOp::Not(a) => un(*a, out, |x| 1.0 - x),
            RowOp::Mul(a, b) => map2((row(*a), row(*b)), out, |x, y| x * y),
            RowOp::Mask(a, m) => map2((row(*a), row(*m)), out, masked),
            RowOp::Div(a, b) => map2((row(*a), row(*b)), out, |x, y| x / y),
            RowOp::Add(a, b) => map2((row(*a), row(*b)), out, |x, y| x + y),
            RowOp::Sub(a, b) => map2((row(*a), row(*b)), out, |x, y| x - y),
            RowOp::Pow(a, b) => map2((row(*a), row(*b)), out, f64::powf),
            RowOp::Rem(a, b) => map2((row(*a), row(*b)), out, |x, y| x % y),
            RowOp::Quot(a, b) => map2((row(*a), row(*b)), out, |x, y| (x / y).trunc()),
            RowOp::Compare(c, a, b) => compare(*c, (row(*a), row(*b)), out),
            RowOp::Builtin(Builtin::Relu, args) if args.len() == 1 => {
                un(args[0], out, crate::functions::relu)
            }
            RowOp::Builtin(f, args) => match args.as_slice() {
                [a] => map1(row(*a), out, |x| f.apply(&[x])),
                [a, b] => map2((row(*a), row(*b)), out, |x, y| f.apply(&[x, y])),
                _ => out.fill(f64::NAN),
            },
            RowOp::User(slot, a) => map1(row(*a), out, |x| (p.users[*slot].f)(x)),
        }
    }
}

/// A row of a strided operand (`data` from `base`, `step` apart): at the picked positions, or
/// the whole row (copied where it lies together); NaN past the data.
#[inline]
fn gather_row(
    (data, base, step): (&[f64], usize, usize),
    picks: Option<&[usize]>,
    out: &mut [f64],
) {
    let n = out.len();
    match picks {
        None if step == 1 && base + n <= data.len() => out.copy_from_slice(&data[base..base + n]),
        _ => {
            for (j, o) in out.iter_mut().enumerate() {
                let j = picks.map_or(j, |js| js[j]);
                *o = data.get(base + j * step).copied().unwrap_or(f64::NAN);
            }
        }
    }
}

/// `dst[j] += a[j] · f(j)`: an adjoint passed back through a local derivative,
/// monomorphised so that simple derivatives vectorise.
#[inline(always)]
fn add_scaled(dst: &mut [f64], a: &[f64], f: impl Fn(usize) -> f64) {
    for (j, (t, &aj)) in dst.iter_mut().zip(a).enumerate() {
        *t += aj * f(j);
    }
}

/// `out[j] = f(src[j])`, monomorphised so that simple functions vectorise.
#[inline(always)]
fn map1(src: &[f64], out: &mut [f64], f: impl Fn(f64) -> f64) {
    for (o, &x) in out.iter_mut().zip(src) {
        *o = f(x);
    }
}

/// `out[j]` = 1 where `a[j] c b[j]` holds, else 0: one loop per operator, so that each
/// vectorises.
fn compare(c: CmpOp, ab: (&[f64], &[f64]), out: &mut [f64]) {
    let one = |holds: bool| f64::from(u8::from(holds));
    match c {
        CmpOp::Eq => map2(ab, out, |x, y| one(x == y)),
        CmpOp::Ne => map2(ab, out, |x, y| one(x != y)),
        CmpOp::Lt => map2(ab, out, |x, y| one(x < y)),
        CmpOp::Le => map2(ab, out, |x, y| one(x <= y)),
        CmpOp::Gt => map2(ab, out, |x, y| one(x > y)),
        CmpOp::Ge => map2(ab, out, |x, y| one(x >= y)),
    }
}

/// `out[j] = f(a[j], b[j])`, monomorphised so that simple functions vectorise.
#[inline(always)]
/// `x · m`, but 0 where the mask `m` is 0 (0 · inf is 0 there: [`RowOp::Mask`]).
fn masked(x: f64, m: f64) -> f64 {
    if m == 0.0 {
        0.0
    } else {
        x * m
    }
}

fn map2((a, b): (&[f64], &[f64]), out: &mut [f64], f: impl Fn(f64, f64) -> f64) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = f(x, y);
    }
}

/// The expression's value at every output element, row-major over `d.out`.
pub(crate) fn values(p: &Program, d: &DenseEquation, terms: &[Operand]) -> Vec<f64> {
    let rows = Rows::new(d, terms);
    let n = rows.0.len;
    let grid = n * rows.0.count;
    let (Some(root), false) = (p.ops.len().checked_sub(1), n == 0) else {
        return vec![0.0; grid];
    };
    let mask = rows.mask(d);
    if mask.is_none() && !worth_splitting(p, || grid) {
        // Each row is appended as it is computed: nothing is written twice.
        let mut out = Vec::with_capacity(grid);
        let mut vals: SmallVec<[f64; 32]> = smallvec![0.0; n * p.ops.len()];
        rows.each(d, 0..rows.0.count, &mut |_, at, env| {
            let only = (None, None, None);
            forward_row(p, (d, &rows, terms), (at, env), only, &mut vals);
            out.extend_from_slice(&vals[root * n..(root + 1) * n]);
        });
        out.resize(grid, 0.0);
        return out;
    }
    let mut out = split::zeros(grid, p.threads);
    let block = |first: usize, chunk: &mut [f64]| {
        let mut vals: SmallVec<[f64; 32]> = smallvec![0.0; n * p.ops.len()];
        let mut js = Vec::new();
        let range = first..first + chunk.len() / n;
        rows.each(d, range, &mut |row, at, env| {
            let mine = &mut chunk[(row - first) * n..(row - first + 1) * n];
            let Some(k) = mask else {
                forward_row(
                    p,
                    (d, &rows, terms),
                    (at, env),
                    (None, None, None),
                    &mut vals,
                );
                mine.copy_from_slice(&vals[root * n..(root + 1) * n]);
                return;
            };
            // Elsewhere the value is zero, as `mine` already is.
            rows.picks(k, terms, at, &mut js);
            let m = js.len();
            forward_row(
                p,
                (d, &rows, terms),
                (at, env),
                (None, Some(&js), None),
                &mut vals,
            );
            for (&j, &v) in js.iter().zip(&vals[root * m..(root + 1) * m]) {
                mine[j] = v;
            }
        });
    };
    if worth_splitting(p, || rows.elements(d, terms)) {
        use rayon::prelude::*;
        out.par_chunks_mut(ROW_BLOCK.at * n)
            .enumerate()
            .for_each(|(i, chunk)| block(i * ROW_BLOCK.at, chunk));
    } else {
        block(0, &mut out);
    }
    out
}

/// The expression's value at every output element, written over `buf`, which holds term
/// `main` (laid out like the output) unscaled in f32: each row is read, evaluated in f64 as
/// [`values`] would, and rounded back in place, so an f32 product and the functions and
/// sums around it (`relu(W X + B)`) make one pass over memory. With `split`, blocks of rows
/// go to the current rayon pool's workers; each element's operations are the same. With
/// `divisors` (one per row), each row's `lnorm` divisor, from its f64 values before
/// rounding, as the backward pass of `lnorm` along the row would compute it from them.
pub(super) fn in_place(
    p: &Program,
    d: &DenseEquation,
    terms: &[Operand],
    (main, scale): (usize, f64),
    buf: &mut [f32],
    split: bool,
    divisors: Option<&mut [f64]>,
) {
    let rows = Rows::new(d, terms);
    let n = rows.0.len;
    let Some(root) = p.ops.len().checked_sub(1) else {
        return;
    };
    if n == 0 || buf.len() != n * rows.0.count {
        return;
    }
    let block = |first: usize, chunk: &mut [f32], mut divisors: Option<&mut [f64]>| {
        let mut vals: SmallVec<[f64; 32]> = smallvec![0.0; n * p.ops.len()];
        let range = first..first + chunk.len() / n;
        rows.each(d, range, &mut |row, at, env| {
            let mine = &mut chunk[(row - first) * n..(row - first + 1) * n];
            let main = Main {
                term: main,
                row: mine,
                scale,
            };
            forward_row(
                p,
                (d, &rows, terms),
                (at, env),
                (Some(main), None, None),
                &mut vals,
            );
            let value = &vals[root * n..(root + 1) * n];
            for (o, &v) in mine.iter_mut().zip(value) {
                *o = v as f32;
            }
            if let Some(slot) = divisors.as_deref_mut().and_then(|d| d.get_mut(row - first)) {
                *slot = RowStats::for_backward(Structural::Lnorm, value).divisor();
            }
        });
    };
    let divisors = divisors.filter(|d| d.len() == rows.0.count);
    if split {
        use rayon::prelude::*;
        let chunks = buf.par_chunks_mut(ROW_BLOCK.at * n).enumerate();
        match divisors {
            Some(divisors) => chunks
                .zip(divisors.par_chunks_mut(ROW_BLOCK.at))
                .for_each(|((i, chunk), ds)| block(i * ROW_BLOCK.at, chunk, Some(ds))),
            None => chunks.for_each(|(i, chunk)| block(i * ROW_BLOCK.at, chunk, None)),
        }
    } else {
        block(0, buf, divisors);
    }
}

/// Adds to `g[k]` (laid out like term `k`) the adjoint of each term, given the adjoint of
/// the expression at every output element. Where [`worth_splitting`], blocks of rows go to
/// the current rayon pool's workers, and the sums come out bit for bit as on one thread: a term laid
/// out like the grid gets each block's rows in place (they are its own elements); any other
/// (broadcast, or permuted) gets them through a grid-sized buffer per use, added afterwards
/// in the order one thread adds them.
pub(crate) fn backward(
    p: &Program,
    d: &DenseEquation,
    terms: &[Operand],
    upstream: &[f64],
    g: &mut [Vec<f64>],
) {
    let rows = Rows::new(d, terms);
    let n = rows.0.len;
    if p.ops.is_empty() || n == 0 {
        return;
    }
    if worth_splitting(p, || rows.elements(d, terms)) {
        return backward_split(p, (d, &rows, terms), upstream, g);
    }
    let mut scratch = Scratch::new(p, n);
    rows.each(d, 0..rows.0.count, &mut |row, at, env| {
        let up = &upstream[row * n..(row + 1) * n];
        backward_row(
            p,
            (d, &rows, terms),
            (at, env),
            up,
            &mut scratch,
            &mut |_, k, a, picks| add_along(&mut g[k], (at[k], rows.inner_step(k)), a, picks),
        );
    });
}

/// Whether a pass of `p` over `elements` grid elements (counted only when the rest allows
/// a split: under a mask that is a scan of its term) is worth splitting: only where more
/// than one thread was asked for and inside a pool of workers, never on rayon's global pool.
fn worth_splitting(p: &Program, elements: impl FnOnce() -> usize) -> bool {
    p.threads > 1
        && rayon::current_thread_index().is_some()
        && rayon::current_num_threads() > 1
        && elements().saturating_mul(p.ops.len()) >= ROW_WORK.at
}

/// [`backward`] with blocks of rows on the current pool's workers.
fn backward_split(
    p: &Program,
    (d, rows, terms): (&DenseEquation, &Rows, &[Operand]),
    upstream: &[f64],
    g: &mut [Vec<f64>],
) {
    use rayon::prelude::*;
    let (n, count) = (rows.0.len, rows.0.count);
    let grid = n * count;
    let direct: Vec<bool> = (0..terms.len())
        .map(|k| rows.0.is_grid(k) && g[k].len() == grid)
        .collect();
    // Each use of a term not laid out like the grid: (its operation, the term, a buffer).
    let mut deferred: Vec<(usize, usize, Vec<f64>)> = p
        .ops
        .iter()
        .enumerate()
        .filter_map(|(i, op)| match op {
            RowOp::Term(k) if !direct[*k] => Some((i, *k, vec![0.0; grid])),
            _ => None,
        })
        .collect();
    let per = ROW_BLOCK.at * n;
    let mut own: Vec<(usize, std::slice::ChunksMut<f64>)> = g
        .iter_mut()
        .enumerate()
        .filter(|(k, _)| direct[*k])
        .map(|(k, gk)| (k, gk.chunks_mut(per)))
        .collect();
    let mut later: Vec<(usize, std::slice::ChunksMut<f64>)> = deferred
        .iter_mut()
        .map(|(i, _, buf)| (*i, buf.chunks_mut(per)))
        .collect();
    let blocks: Vec<(usize, Slices, Slices)> = (0..count.div_ceil(ROW_BLOCK.at))
        .map(|b| {
            (
                b * ROW_BLOCK.at,
                next_block(&mut own),
                next_block(&mut later),
            )
        })
        .collect();
    blocks
        .into_par_iter()
        .for_each(|(first, mut own, mut later)| {
            let mut scratch = Scratch::new(p, n);
            let last = (first + ROW_BLOCK.at).min(count);
            rows.each(d, first..last, &mut |row, at, env| {
                let up = &upstream[row * n..(row + 1) * n];
                let at_row = (row - first) * n;
                backward_row(
                    p,
                    (d, rows, terms),
                    (at, env),
                    up,
                    &mut scratch,
                    &mut |i, k, a, picks| {
                        let slot = match direct[k] {
                            true => own.iter_mut().find(|(x, _)| *x == k),
                            false => later.iter_mut().find(|(x, _)| *x == i),
                        };
                        if let Some((_, s)) = slot {
                            add_along(s, (at_row, 1), a, picks);
                        }
                    },
                );
            });
        });
    if deferred.is_empty() {
        return;
    }
    // In the order one thread adds them: row by row, each row's uses last operation first.
    deferred.sort_by_key(|(i, _, _)| std::cmp::Reverse(*i));
    rows.each(d, 0..count, &mut |row, at, _| {
        let up = &upstream[row * n..(row + 1) * n];
        if up.iter().all(|&a| a == 0.0) {
            return;
        }
        for (_, k, buf) in &deferred {
            let along = (at[*k], rows.inner_step(*k));
            add_along(&mut g[*k], along, &buf[row * n..(row + 1) * n], None);
        }
    });
}

/// Adds `a` to `g` at `base`, `base + step`, …: a contiguous slice at a time when `step` is
/// 1 (the same additions in the same order); with `picks`, `a[i]` at `base + picks[i]·step`.
fn add_along(g: &mut [f64], (base, step): (usize, usize), a: &[f64], picks: Option<&[usize]>) {
    if let Some(js) = picks {
        for (&j, &x) in js.iter().zip(a) {
            g[base + j * step] += x;
        }
        return;
    }
    match g.get_mut(base..base + a.len()) {
        Some(run) if step == 1 => run.iter_mut().zip(a).for_each(|(t, &x)| *t += x),
        _ => {
            for (j, &x) in a.iter().enumerate() {
                g[base + j * step] += x;
            }
        }
    }
}

/// A block's slices of several buffers, each with what it belongs to.
type Slices<'a> = SmallVec<[(usize, &'a mut [f64]); 4]>;

/// The next block of each buffer.
fn next_block<'a>(buffers: &mut [(usize, std::slice::ChunksMut<'a, f64>)]) -> Slices<'a> {
    buffers
        .iter_mut()
        .filter_map(|(x, it)| Some((*x, it.next()?)))
        .collect()
}

/// One row's operation values and adjoints, and the positions a mask picks.
struct Scratch {
    vals: Vec<f64>,
    adj: Vec<Vec<f64>>,
    picks: Vec<usize>,
}

impl Scratch {
    fn new(p: &Program, n: usize) -> Scratch {
        Scratch {
            vals: vec![0.0; n * p.ops.len()],
            adj: vec![vec![0.0; n]; p.ops.len()],
            picks: Vec::new(),
        }
    }
}

/// What [`backward_row`] calls with each term's adjoint: the operation reading it, the
/// term, the adjoint along the row, and the positions it is at (all of the row's, or the
/// mask's picks).
type TermAdjoint<'f> = dyn FnMut(usize, usize, &[f64], Option<&[usize]>) + 'f;

/// One row backwards: `up` is the expression's adjoint along the row; `term` gets each
/// term's adjoint. Rows whose adjoint is all zero give nothing; under a mask
/// ([`DenseEquation::mask`]) only its nonzero positions do. The loops run on the widest
/// vectors, as [`forward_row`]'s do.
fn backward_row(
    p: &Program,
    eq: (&DenseEquation, &Rows, &[Operand]),
    pos: (&[usize], &[usize]),
    up: &[f64],
    scratch: &mut Scratch,
    term: &mut TermAdjoint,
) {
    widest(Backward {
        p,
        eq,
        pos,
        up,
        scratch,
        term,
    });
}

/// [`backward_row`]'s arguments, as a loop for `functions::widest`.
struct Backward<'a, 'f> {
    p: &'a Program<'a>,
    eq: (&'a DenseEquation, &'a Rows<'a>, &'a [Operand<'a>]),
    pos: (&'a [usize], &'a [usize]),
    up: &'a [f64],
    scratch: &'a mut Scratch,
    term: &'a mut TermAdjoint<'f>,
}

impl Vectorised for Backward<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        backward_loops(self.p, self.eq, self.pos, self.up, self.scratch, self.term);
    }
}

/// The elements of a masked row that its pass computes (`Some(None)`: the row is not
/// masked, every element; `None`: none, nothing to do).
#[inline(always)]
fn masked_picks<'s>(
    (d, rows, terms): (&DenseEquation, &Rows, &[Operand]),
    at: &[usize],
    picks: &'s mut Vec<usize>,
) -> Option<Option<&'s [usize]>> {
    match rows.mask(d) {
        Some(k) => {
            rows.picks(k, terms, at, picks);
            (!picks.is_empty()).then_some(Some(picks.as_slice()))
        }
        None => Some(None),
    }
}

/// Zeroes the adjoints of the live operations over a row's `n` elements and seeds the
/// root's with the row's upstream adjoint (at the picked elements of a masked row).
#[inline(always)]
fn seed(
    adj: &mut [Vec<f64>],
    (live, root, n): (&[bool], usize, usize),
    picks: Option<&[usize]>,
    up: &[f64],
) {
    for (a, _) in adj.iter_mut().zip(live).filter(|(_, &l)| l) {
        a[..n].fill(0.0);
    }
    match picks {
        Some(js) => {
            for (a, &j) in adj[root].iter_mut().zip(js) {
                *a = up[j];
            }
        }
        None => adj[root].copy_from_slice(up),
    }
}

/// d(x^y)/dy: x^y ln x, taken as 0 where x ≤ 0 (as the reference's backward pass does).
#[inline(always)]
fn exponent_partial(x: f64, y: f64) -> f64 {
    if x > 0.0 {
        x.powf(y) * x.ln()
    } else {
        0.0
    }
}

/// [`backward_row`]'s loops, inlined into each vector width's copy.
#[inline(always)]
fn backward_loops(
    p: &Program,
    (d, rows, terms): (&DenseEquation, &Rows, &[Operand]),
    (at, env): (&[usize], &[usize]),
    up: &[f64],
    scratch: &mut Scratch,
    term: &mut TermAdjoint,
) {
    let Scratch { vals, adj, picks } = scratch;
    // A row whose adjoints are all 0 passes nothing back.
    let nonzero = up.iter().any(|&a| a != 0.0);
    let Some(root) = p.ops.len().checked_sub(1).filter(|_| nonzero) else {
        return;
    };
    let Some(picks) = masked_picks((d, rows, terms), at, picks) else {
        return;
    };
    let n = picks.map_or(rows.0.len, <[usize]>::len);
    if p.needed.contains(&true) {
        let only = Some(p.needed);
        forward_loops(p, (d, rows, terms), (at, env), (None, picks, only), vals);
    }
    seed(adj, (p.live, root, n), picks, up);
    for (i, op) in p.ops.iter().enumerate().rev() {
        if !p.live[i] {
            continue;
        }
        let (before, rest) = adj.split_at_mut(i);
        let a = &rest[0][..n];
        let v = |x: usize| &vals[x * n..(x + 1) * n];
        // `a · f(j)` into input `x`'s adjoint, where an adjoint passes through it (a macro, so
        // that each derivative is monomorphised into `add_scaled`).
        macro_rules! pass {
            ($x:expr, $f:expr) => {
                if p.live[$x] {
                    add_scaled(&mut before[$x][..n], a, $f)
                }
            };
        }
        match op {
            RowOp::Term(k) => term(i, *k, a, picks),
            RowOp::Const(_) | RowOp::Var(_) | RowOp::Table(_) => {}
            RowOp::Compare(..) | RowOp::Quot(..) => {}
            RowOp::Neg(x) | RowOp::Not(x) => pass!(*x, |_| -1.0),
            RowOp::Add(x, y) => {
                pass!(*x, |_| 1.0);
                pass!(*y, |_| 1.0);
            }
            RowOp::Sub(x, y) => {
                pass!(*x, |_| 1.0);
                pass!(*y, |_| -1.0);
            }
            RowOp::Mul(x, y) => {
                let (vx, vy) = (v(*x), v(*y));
                pass!(*x, |j| vy[j]);
                pass!(*y, |j| vx[j]);
            }
            RowOp::Mask(x, m) => {
                // The mask is a comparison: nothing passes back through it.
                let vm = v(*m);
                pass!(*x, |j| masked(1.0, vm[j]));
            }
            RowOp::Div(x, y) => {
                let (vx, vy) = (v(*x), v(*y));
                pass!(*x, |j| 1.0 / vy[j]);
                pass!(*y, |j| -vx[j] / (vy[j] * vy[j]));
            }
            RowOp::Rem(x, y) => {
                let (vx, vy) = (v(*x), v(*y));
                pass!(*x, |_| 1.0);
                pass!(*y, |j| -(vx[j] / vy[j]).trunc());
            }
            RowOp::Pow(x, y) => {
                let (vx, vy) = (v(*x), v(*y));
                pass!(*x, |j| vy[j] * vx[j].powf(vy[j] - 1.0));
                pass!(*y, |j| exponent_partial(vx[j], vy[j]));
            }
            RowOp::Builtin(Builtin::Relu, args) if args.len() == 1 => {
                let vx = v(args[0]);
                pass!(args[0], |j| crate::functions::step(vx[j]));
            }
            RowOp::Builtin(f, args) => match args.as_slice() {
                [x] => {
                    let vx = v(*x);
                    pass!(*x, |j| f.partial(&[vx[j]], 0));
                }
                [x, y] => {
                    let (vx, vy) = (v(*x), v(*y));
                    pass!(*x, |j| f.partial(&[vx[j], vy[j]], 0));
                    pass!(*y, |j| f.partial(&[vx[j], vy[j]], 1));
                }
                _ => {}
            },
            RowOp::User(slot, x) => {
                let vx = v(*x);
                pass!(*x, |j| (p.users[*slot].df)(vx[j]));
            }
        }
    }
}
