//! Gradients of a dense equation (§12), by the same kernels as its forward pass.
//!
//! For `Y[out] = expr(T₁, …, Tₙ)` with each term `Tₖ = s · Σ Π factors`, the adjoint of
//! each term is `Gₖ = dY · ∂expr/∂Tₖ`, one pass over the output; the gradient of a factor is
//! then the einsum of `s · Gₖ` with the term's other factors onto that factor's variables
//! (`dW[h, i] = Σₑ dPre[e, h] X[e, i]`), run as the same batched matrix products.

use super::{contract, each_step, fits, permute, reduce, term, Element, Operand};
use crate::eval::EvalOptions;
use crate::plan::einsum::{DenseEquation, Expr};
use crate::semantics::{Checked, Func, VarId};
use crate::syntax::ast::BinOp;
use crate::tensor::Tensor;
use std::borrow::Cow;

/// Adds d(loss)/d(factor) to `adj` for every dense factor whose tensor has a buffer there,
/// given `upstream` = d(loss)/d(target) (row-major over `d.out`). `false`, with nothing
/// added, for what this path does not cover (softmax/lnorm, a relation factor taking a
/// gradient, inputs not as planned): the caller then uses the reference loops.
pub(crate) fn backward_dense(
    p: &Checked,
    d: &DenseEquation,
    values: &[Tensor],
    upstream: &[f64],
    o: &EvalOptions,
    adj: &mut [Option<Vec<f64>>],
) -> bool {
    let relation_free = d.terms.iter().all(|c| c.sparse.is_none());
    if has_normalize(&d.expr) || !relation_free || !fits(p, d, values, o.max_memory) {
        return false;
    }
    let threads = o.threads.max(1);
    let terms: Vec<Operand> = d.terms.iter().map(|c| term(c, values, threads)).collect();
    let mut g: Vec<Vec<f64>> = terms.iter().map(|t| vec![0.0; t.data.len()]).collect();
    each_step(d, &terms, &mut |i, at, env| {
        let a = upstream[i];
        if a != 0.0 {
            let cx = Element {
                terms: &terms,
                at,
                env,
                o,
            };
            back(&cx, &d.expr, a, &mut g);
        }
    });
    for ((c, gk), t) in d.terms.iter().zip(g).zip(&terms) {
        for (j, f) in c.factors.iter().enumerate() {
            if adj[f.tensor].is_none() {
                continue;
            }
            let mut acc = Operand {
                vars: t.vars.clone(),
                data: Cow::Owned(gk.iter().map(|x| x * c.scale).collect()),
            };
            let others: Vec<usize> = (0..c.factors.len()).filter(|&k| k != j).collect();
            for (n, &k) in others.iter().enumerate() {
                let mut keep: Vec<VarId> = f.vars.clone();
                for &later in &others[n + 1..] {
                    keep.extend(&c.factors[later].vars);
                }
                let other = Operand {
                    vars: c.factors[k].vars.clone(),
                    data: match &values[c.factors[k].tensor].storage {
                        crate::tensor::Storage::Dense(v) => Cow::Borrowed(v),
                        _ => return false,
                    },
                };
                acc = contract(acc, other, &keep, &c.extents, (threads, false));
            }
            let acc = permute(reduce(acc, &f.vars, &c.extents), &f.vars, &c.extents);
            if let Some(buf) = adj[f.tensor].as_mut() {
                for (b, x) in buf.iter_mut().zip(acc.data.iter()) {
                    *b += x;
                }
            }
        }
    }
    true
}

fn has_normalize(e: &Expr) -> bool {
    match e {
        Expr::Normalize(..) => true,
        Expr::Term(_) | Expr::Const(_) | Expr::Var(_) => false,
        Expr::Neg(x) | Expr::Not(x) => has_normalize(x),
        Expr::Product(fs) => fs.iter().any(|(_, f)| has_normalize(f)),
        Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => has_normalize(a) || has_normalize(b),
        Expr::Call(_, args) => args.iter().any(has_normalize),
    }
}

/// Passes adjoint `a` of `e` (at one output element) down to the terms it reads.
fn back(cx: &Element, e: &Expr, a: f64, g: &mut [Vec<f64>]) {
    match e {
        Expr::Term(k) => g[*k][cx.at[*k]] += a,
        Expr::Const(_) | Expr::Var(_) | Expr::Compare(..) | Expr::Normalize(..) => {}
        Expr::Neg(x) | Expr::Not(x) => back(cx, x, -a, g),
        Expr::Product(fs) => {
            let Some(vals) = fs
                .iter()
                .map(|(_, f)| cx.eval(f))
                .collect::<Option<Vec<f64>>>()
            else {
                return;
            };
            for (i, (div, f)) in fs.iter().enumerate() {
                let mut others = 1.0;
                for (j, ((dj, _), &v)) in fs.iter().zip(&vals).enumerate() {
                    if j != i {
                        others = if *dj { others / v } else { others * v };
                    }
                }
                let d = if *div {
                    -others / (vals[i] * vals[i])
                } else {
                    others
                };
                back(cx, f, a * d, g);
            }
        }
        Expr::Binary(op, x, y) => {
            let (Some(u), Some(v)) = (cx.eval(x), cx.eval(y)) else {
                return;
            };
            let (dx, dy) = match op {
                BinOp::Add => (1.0, 1.0),
                BinOp::Sub => (1.0, -1.0),
                BinOp::Pow => {
                    let dy = if u > 0.0 { u.powf(v) * u.ln() } else { 0.0 };
                    (v * u.powf(v - 1.0), dy)
                }
            };
            back(cx, x, a * dx, g);
            back(cx, y, a * dy, g);
        }
        Expr::Call(f, args) => {
            let Some(xs) = args
                .iter()
                .map(|x| cx.eval(x))
                .collect::<Option<Vec<f64>>>()
            else {
                return;
            };
            for (i, arg) in args.iter().enumerate() {
                let d = match f {
                    Func::Builtin(b) => b.partial(&xs, i),
                    Func::User(name) => cx.o.functions.get(name).map_or(0.0, |uf| (uf.df)(xs[0])),
                };
                back(cx, arg, a * d, g);
            }
        }
    }
}
