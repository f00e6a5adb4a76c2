//! The elementwise expression of a dense equation, evaluated a row at a time.
//!
//! The expression is compiled once into a list of operations in postorder; each operation
//! then runs over a whole row of the output (its innermost axis) in a tight loop, so the
//! interpretation costs once per row rather than once per element. Each element goes through
//! the same f64 operations in the same order as the reference evaluator's, so values are
//! identical. The backward pass keeps every operation's row and walks the list in reverse,
//! giving each term's adjoint.

use super::{strides, Operand};
use crate::eval::EvalOptions;
use crate::functions::{Builtin, UserFunction};
use crate::plan::einsum::{DenseEquation, Expr};
use crate::semantics::Func;
use crate::syntax::ast::{BinOp, CmpOp};

/// One operation; inputs are indices of earlier operations.
#[derive(Clone)]
enum Op {
    Term(usize),
    Const(f64),
    Var(usize),
    Neg(usize),
    Not(usize),
    Mul(usize, usize),
    Div(usize, usize),
    Add(usize, usize),
    Sub(usize, usize),
    Pow(usize, usize),
    Compare(CmpOp, usize, usize),
    Builtin(crate::functions::Builtin, Vec<usize>),
    User(UserFunction, usize),
}

/// A compiled expression: operations in postorder, the last one its value.
pub(crate) struct Program {
    ops: Vec<Op>,
}

impl Program {
    /// Compiles `e`; `None` when it calls an unregistered function or still holds a
    /// `softmax`/`lnorm` (those are made terms first).
    pub(crate) fn compile(e: &Expr, o: &EvalOptions) -> Option<Program> {
        let mut ops = Vec::new();
        push(e, o, &mut ops)?;
        Some(Program { ops })
    }
}

fn push(e: &Expr, o: &EvalOptions, ops: &mut Vec<Op>) -> Option<usize> {
    let op = match e {
        Expr::Term(k) => Op::Term(*k),
        Expr::Const(c) => Op::Const(*c),
        Expr::Var(v) => Op::Var(*v),
        Expr::Neg(x) => Op::Neg(push(x, o, ops)?),
        Expr::Not(x) => Op::Not(push(x, o, ops)?),
        Expr::Product(fs) => {
            // acc = 1; acc *= f or acc /= f, left to right, as the reference multiplies.
            let mut acc: Option<usize> = None;
            for (div, f) in fs {
                let x = push(f, o, ops)?;
                let left = match acc {
                    Some(a) => a,
                    None if !*div => {
                        acc = Some(x);
                        continue;
                    }
                    None => {
                        ops.push(Op::Const(1.0));
                        ops.len() - 1
                    }
                };
                ops.push(if *div {
                    Op::Div(left, x)
                } else {
                    Op::Mul(left, x)
                });
                acc = Some(ops.len() - 1);
            }
            match acc {
                Some(a) => return Some(a),
                None => Op::Const(1.0),
            }
        }
        Expr::Binary(op, a, b) => {
            let (a, b) = (push(a, o, ops)?, push(b, o, ops)?);
            match op {
                BinOp::Add => Op::Add(a, b),
                BinOp::Sub => Op::Sub(a, b),
                BinOp::Pow => Op::Pow(a, b),
            }
        }
        Expr::Compare(op, a, b) => {
            let (a, b) = (push(a, o, ops)?, push(b, o, ops)?);
            Op::Compare(*op, a, b)
        }
        Expr::Call(f, args) => {
            let xs = args
                .iter()
                .map(|a| push(a, o, ops))
                .collect::<Option<Vec<usize>>>()?;
            match f {
                Func::Builtin(b) => Op::Builtin(*b, xs),
                Func::User(name) => Op::User(o.functions.get(name)?.clone(), *xs.first()?),
            }
        }
        Expr::Normalize(..) => return None,
    };
    ops.push(op);
    Some(ops.len() - 1)
}

/// What [`Rows::each`] calls per row: its index, each term's offset at its start, and the
/// output variables' positions.
type RowVisitor<'f> = dyn FnMut(usize, &[usize], &[usize]) + 'f;

/// Where one row of the output lies in each term: the offset of its first element and the
/// step along the row (0 where the term does not vary along it).
struct Rows {
    /// Elements per row.
    len: usize,
    /// Rows.
    count: usize,
    /// Per term, its stride along each output axis.
    steps: Vec<Vec<usize>>,
    /// Extents of the output axes.
    dims: Vec<usize>,
}

impl Rows {
    fn new(d: &DenseEquation, terms: &[Operand]) -> Rows {
        let dims: Vec<usize> = d.out.iter().map(|&v| d.extents[v]).collect();
        let len = dims.last().copied().unwrap_or(1);
        let total: usize = dims.iter().product();
        let steps = terms
            .iter()
            .map(|t| {
                let own = strides(&t.vars, &d.extents);
                d.out
                    .iter()
                    .map(|v| t.vars.iter().position(|x| x == v).map_or(0, |k| own[k]))
                    .collect()
            })
            .collect();
        Rows {
            len,
            count: total.checked_div(len).unwrap_or(0),
            steps,
            dims,
        }
    }

    /// Calls `f` for each row of `range` with its index, each term's offset at its start,
    /// and the positions of the output variables there.
    fn each(&self, d: &DenseEquation, range: std::ops::Range<usize>, f: &mut RowVisitor) {
        let outer = self.dims.len().saturating_sub(1);
        let mut idx = vec![0usize; outer];
        let mut rest = range.start;
        for ax in (0..outer).rev() {
            idx[ax] = rest % self.dims[ax].max(1);
            rest /= self.dims[ax].max(1);
        }
        let mut at: Vec<usize> = self
            .steps
            .iter()
            .map(|s| idx.iter().zip(s).map(|(i, s)| i * s).sum())
            .collect();
        let mut env = vec![0usize; d.extents.len()];
        for row in range.start..range.end.min(self.count) {
            for (&v, &x) in d.out.iter().zip(&idx) {
                env[v] = x;
            }
            f(row, &at, &env);
            for ax in (0..outer).rev() {
                idx[ax] += 1;
                for (a, s) in at.iter_mut().zip(&self.steps) {
                    *a += s[ax];
                }
                if idx[ax] < self.dims[ax] {
                    break;
                }
                for (a, s) in at.iter_mut().zip(&self.steps) {
                    *a -= s[ax] * self.dims[ax];
                }
                idx[ax] = 0;
            }
        }
    }

    /// The step of term `k` along the row.
    fn inner_step(&self, k: usize) -> usize {
        self.steps[k].last().copied().unwrap_or(0)
    }
}

/// A term read from an f32 row rather than from its operand: the row of a product the
/// equation's value is written over ([`in_place`]), and the term's scale.
struct Main<'r> {
    term: usize,
    row: &'r [f32],
    scale: f64,
}

/// Computes every operation's row into `vals` (operation i at `i·len..(i+1)·len`).
fn forward_row(
    p: &Program,
    (d, rows, terms): (&DenseEquation, &Rows, &[Operand]),
    at: &[usize],
    env: &[usize],
    main: Option<Main>,
    vals: &mut [f64],
) {
    let n = rows.len;
    let inner_var = d.out.last().copied();
    for (i, op) in p.ops.iter().enumerate() {
        let (done, rest) = vals.split_at_mut(i * n);
        let out = &mut rest[..n];
        let row = |a: usize| &done[a * n..(a + 1) * n];
        let un = |a: usize, out: &mut [f64], f: fn(f64) -> f64| map1(row(a), out, f);
        let bin = |a: usize, b: usize, out: &mut [f64], f: fn(f64, f64) -> f64| {
            map2((row(a), row(b)), out, f)
        };
        match op {
            Op::Term(k) if main.as_ref().is_some_and(|m| m.term == *k) => {
                if let Some(m) = &main {
                    for (o, &x) in out.iter_mut().zip(m.row) {
                        *o = f64::from(x) * m.scale;
                    }
                }
            }
            Op::Term(k) => {
                let (base, step, data) = (at[*k], rows.inner_step(*k), &terms[*k].data);
                if step == 1 {
                    out.copy_from_slice(&data[base..base + n]);
                } else {
                    for (j, o) in out.iter_mut().enumerate() {
                        *o = data[base + j * step];
                    }
                }
            }
            Op::Const(c) => out.fill(*c),
            Op::Var(v) => {
                if Some(*v) == inner_var {
                    for (j, o) in out.iter_mut().enumerate() {
                        *o = j as f64;
                    }
                } else {
                    out.fill(env[*v] as f64);
                }
            }
            Op::Neg(a) => un(*a, out, |x| -x),
            Op::Not(a) => un(*a, out, |x| 1.0 - x),
            Op::Mul(a, b) => bin(*a, *b, out, |x, y| x * y),
            Op::Div(a, b) => bin(*a, *b, out, |x, y| x / y),
            Op::Add(a, b) => bin(*a, *b, out, |x, y| x + y),
            Op::Sub(a, b) => bin(*a, *b, out, |x, y| x - y),
            Op::Pow(a, b) => bin(*a, *b, out, f64::powf),
            Op::Compare(c, a, b) => map2((row(*a), row(*b)), out, |x, y| {
                if c.holds(x, y) {
                    1.0
                } else {
                    0.0
                }
            }),
            Op::Builtin(Builtin::Relu, args) if args.len() == 1 => un(args[0], out, |x| x.max(0.0)),
            Op::Builtin(f, args) => match args.as_slice() {
                [a] => map1(row(*a), out, |x| f.apply(&[x])),
                [a, b] => map2((row(*a), row(*b)), out, |x, y| f.apply(&[x, y])),
                _ => out.fill(f64::NAN),
            },
            Op::User(uf, a) => map1(row(*a), out, |x| (uf.f)(x)),
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

/// `out[j] = f(a[j], b[j])`, monomorphised so that simple functions vectorise.
#[inline(always)]
fn map2((a, b): (&[f64], &[f64]), out: &mut [f64], f: impl Fn(f64, f64) -> f64) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = f(x, y);
    }
}

/// The expression's value at every output element, row-major over `d.out`.
pub(crate) fn values(p: &Program, d: &DenseEquation, terms: &[Operand]) -> Vec<f64> {
    let rows = Rows::new(d, terms);
    let mut out = vec![0.0; rows.len * rows.count];
    let n = rows.len;
    let mut vals = vec![0.0; n * p.ops.len()];
    let Some(root) = p.ops.len().checked_sub(1) else {
        return out;
    };
    rows.each(d, 0..rows.count, &mut |row, at, env| {
        forward_row(p, (d, &rows, terms), at, env, None, &mut vals);
        out[row * n..(row + 1) * n].copy_from_slice(&vals[root * n..(root + 1) * n]);
    });
    out
}

/// The expression's value at every output element, written over `buf`, which holds term
/// `main` (laid out like the output) unscaled in f32: each row is read, evaluated in f64 as
/// [`values`] would, and rounded back in place, so an f32 product and the functions and
/// sums around it (`relu(W X + B)`) make one pass over memory. With `split`, blocks of rows
/// go to the current rayon pool's workers; each element's operations are the same.
pub(super) fn in_place(
    p: &Program,
    d: &DenseEquation,
    terms: &[Operand],
    (main, scale): (usize, f64),
    buf: &mut [f32],
    split: bool,
) {
    let rows = Rows::new(d, terms);
    let n = rows.len;
    let Some(root) = p.ops.len().checked_sub(1) else {
        return;
    };
    if n == 0 || buf.len() != n * rows.count {
        return;
    }
    let block = |first: usize, chunk: &mut [f32]| {
        let mut vals = vec![0.0; n * p.ops.len()];
        let range = first..first + chunk.len() / n;
        rows.each(d, range, &mut |row, at, env| {
            let mine = &mut chunk[(row - first) * n..(row - first + 1) * n];
            let main = Main {
                term: main,
                row: mine,
                scale,
            };
            forward_row(p, (d, &rows, terms), at, env, Some(main), &mut vals);
            for (o, &v) in mine.iter_mut().zip(&vals[root * n..(root + 1) * n]) {
                *o = v as f32;
            }
        });
    };
    let per = n * 64;
    if split {
        use rayon::prelude::*;
        buf.par_chunks_mut(per)
            .enumerate()
            .for_each(|(i, chunk)| block(i * 64, chunk));
    } else {
        block(0, buf);
    }
}

/// Adds to `g[k]` (laid out like term `k`) the adjoint of each term, given the adjoint of
/// the expression at every output element.
pub(crate) fn backward(
    p: &Program,
    d: &DenseEquation,
    terms: &[Operand],
    upstream: &[f64],
    g: &mut [Vec<f64>],
) {
    let rows = Rows::new(d, terms);
    let n = rows.len;
    let mut vals = vec![0.0; n * p.ops.len()];
    let mut adj = vec![vec![0.0; n]; p.ops.len()];
    let Some(root) = p.ops.len().checked_sub(1) else {
        return;
    };
    rows.each(d, 0..rows.count, &mut |row, at, env| {
        let up = &upstream[row * n..(row + 1) * n];
        if up.iter().all(|&a| a == 0.0) {
            return;
        }
        forward_row(p, (d, &rows, terms), at, env, None, &mut vals);
        for a in adj.iter_mut() {
            a.fill(0.0);
        }
        adj[root].copy_from_slice(up);
        for (i, op) in p.ops.iter().enumerate().rev() {
            let (before, rest) = adj.split_at_mut(i);
            let a = &rest[0];
            let v = |x: usize| &vals[x * n..(x + 1) * n];
            match op {
                Op::Term(k) => {
                    let (base, step) = (at[*k], rows.inner_step(*k));
                    for (j, &x) in a.iter().enumerate() {
                        g[*k][base + j * step] += x;
                    }
                }
                Op::Const(_) | Op::Var(_) | Op::Compare(..) => {}
                Op::Neg(x) | Op::Not(x) => add_scaled(&mut before[*x][..n], a, |_| -1.0),
                Op::Add(x, y) => {
                    add_scaled(&mut before[*x][..n], a, |_| 1.0);
                    add_scaled(&mut before[*y][..n], a, |_| 1.0);
                }
                Op::Sub(x, y) => {
                    add_scaled(&mut before[*x][..n], a, |_| 1.0);
                    add_scaled(&mut before[*y][..n], a, |_| -1.0);
                }
                Op::Mul(x, y) => {
                    let (vx, vy) = (v(*x), v(*y));
                    add_scaled(&mut before[*x][..n], a, |j| vy[j]);
                    add_scaled(&mut before[*y][..n], a, |j| vx[j]);
                }
                Op::Div(x, y) => {
                    let (vx, vy) = (v(*x), v(*y));
                    add_scaled(&mut before[*x][..n], a, |j| 1.0 / vy[j]);
                    add_scaled(&mut before[*y][..n], a, |j| -vx[j] / (vy[j] * vy[j]));
                }
                Op::Pow(x, y) => {
                    let (vx, vy) = (v(*x), v(*y));
                    add_scaled(&mut before[*x][..n], a, |j| vy[j] * vx[j].powf(vy[j] - 1.0));
                    add_scaled(&mut before[*y][..n], a, |j| {
                        if vx[j] > 0.0 {
                            vx[j].powf(vy[j]) * vx[j].ln()
                        } else {
                            0.0
                        }
                    });
                }
                Op::Builtin(Builtin::Relu, args) if args.len() == 1 => {
                    let vx = v(args[0]);
                    add_scaled(&mut before[args[0]][..n], a, |j| {
                        crate::functions::step(vx[j])
                    });
                }
                Op::Builtin(f, args) => match args.as_slice() {
                    [x] => {
                        let vx = v(*x);
                        add_scaled(&mut before[*x][..n], a, |j| f.partial(&[vx[j]], 0));
                    }
                    [x, y] => {
                        let (vx, vy) = (v(*x), v(*y));
                        add_scaled(&mut before[*x][..n], a, |j| f.partial(&[vx[j], vy[j]], 0));
                        add_scaled(&mut before[*y][..n], a, |j| f.partial(&[vx[j], vy[j]], 1));
                    }
                    _ => {}
                },
                Op::User(uf, x) => {
                    let vx = v(*x);
                    add_scaled(&mut before[*x][..n], a, |j| (uf.df)(vx[j]));
                }
            }
        }
    });
}
