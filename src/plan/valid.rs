//! Valid ranges: an iteration point at which a read leaves its tensor contributes nothing
//! (§5.1), so a variable that a read shifts (`X[i - 1, k]`, `A[2 * i + 1]`) takes part
//! only over the interval that keeps every such read in bounds. Rewriting the equation over
//! that interval (`i = i' + 1`, `i'` over one fewer values) leaves reads that stay inside
//! their tensors, which the dense path gathers as windows, and a left-hand side that is
//! index arithmetic, which it scatters. `X[i, j] = sig(W[i, j, k] X[i - 1, k])` becomes
//! `X[i' + 1, j] = sig(W[i' + 1, j, k] X[i', k])`.

use crate::semantics::{Checked, Equation, IndexFn, Node, VarId};
use crate::syntax::ast::{ArithOp, BinOp, Num};
use std::borrow::Cow;

/// The equation over the valid interval of each variable that reads shift; the equation
/// itself when every variable's whole range is valid, or when a variable this would
/// restrict is also normalised or concatenated over (a row would lose elements), or its
/// interval is empty.
pub(crate) fn restricted<'e>(p: &Checked, eq: &'e Equation) -> Option<Cow<'e, Equation>> {
    let mut bounds: Vec<(i64, i64)> = eq.vars.iter().map(|v| (0, v.range as i64 - 1)).collect();
    reads(&eq.rhs, &mut |tensor, index| {
        for (f, &n) in index.iter().zip(&p.tensors[tensor].shape) {
            if let Some((v, k, c)) = single(f) {
                let (lo, hi) = &mut bounds[v];
                // 0 ≤ k·v + c ≤ n - 1.
                let (a, b) = (-c, n as i64 - 1 - c);
                let (from, to) = if k > 0 {
                    (
                        a.div_euclid(k) + i64::from(a.rem_euclid(k) != 0),
                        b.div_euclid(k),
                    )
                } else {
                    let k = -k;
                    (
                        (-b).div_euclid(k) + i64::from((-b).rem_euclid(k) != 0),
                        (-a).div_euclid(k),
                    )
                };
                *lo = (*lo).max(from);
                *hi = (*hi).min(to);
            }
        }
    });
    let shifts: Vec<(VarId, i64, usize)> = bounds
        .iter()
        .enumerate()
        .filter(|&(v, &(lo, hi))| lo > 0 || hi < eq.vars[v].range as i64 - 1)
        .map(|(v, &(lo, hi))| (v, lo, (hi - lo + 1).max(0) as usize))
        .collect();
    if shifts.is_empty() {
        return Some(Cow::Borrowed(eq));
    }
    let structural = |v: VarId| grouped(&eq.rhs, v) || eq.virtual_var == Some(v);
    if shifts.iter().any(|&(v, _, n)| n == 0 || structural(v)) {
        return None;
    }
    let mut out = eq.clone();
    for &(v, lo, n) in &shifts {
        out.vars[v].range = n;
        out.lhs = out.lhs.iter().map(|f| shift_index(f, v, lo)).collect();
        out.rhs = shift_node(&out.rhs, v, lo);
    }
    Some(Cow::Owned(out))
}

/// Calls `f` with every read's tensor and index, except under `not` (whose operand is
/// read totally).
fn reads(n: &Node, f: &mut dyn FnMut(usize, &[IndexFn])) {
    match n {
        Node::Read { tensor, index, .. } => f(*tensor, index),
        Node::Not(_) => {}
        _ => n.children().into_iter().for_each(|c| reads(c, f)),
    }
}

/// `k · v + c` when the position is affine in one variable only (`k ≠ 0`).
pub(super) fn single(f: &IndexFn) -> Option<(VarId, i64, i64)> {
    let (coefs, c) = super::einsum::affine(f)?;
    match coefs.as_slice() {
        [(v, k)] if *k != 0 => Some((*v, *k, c)),
        _ => None,
    }
}

/// Whether `v` is a `softmax`/`lnorm` axis or a `concat`'s variable in `n`.
fn grouped(n: &Node, v: VarId) -> bool {
    match n {
        Node::Normalize(_, x, _) if *x == v => true,
        Node::Concat { out, parts, .. } if *out == v || parts.contains(&v) => true,
        _ => n.children().into_iter().any(|c| grouped(c, v)),
    }
}

/// `f` with `v` replaced by `v + lo`.
pub(super) fn shift_index(f: &IndexFn, v: VarId, lo: i64) -> IndexFn {
    match f {
        IndexFn::Var(x) if *x == v => IndexFn::Arith(
            Box::new(IndexFn::Var(v)),
            ArithOp::Add,
            Box::new(IndexFn::Const(lo)),
        ),
        IndexFn::Var(_) | IndexFn::Const(_) => f.clone(),
        IndexFn::Arith(a, op, b) => IndexFn::Arith(
            Box::new(shift_index(a, v, lo)),
            *op,
            Box::new(shift_index(b, v, lo)),
        ),
    }
}

/// `n` with `v` replaced by `v + lo` in every index and value.
pub(super) fn shift_node(n: &Node, v: VarId, lo: i64) -> Node {
    let sub = |x: &Node| Box::new(shift_node(x, v, lo));
    match n {
        Node::Const(_) => n.clone(),
        Node::Var(x) if *x == v => Node::Binary(
            BinOp::Add,
            Box::new(Node::Var(v)),
            Box::new(Node::Const(Num::Int(lo))),
        ),
        Node::Var(_) => n.clone(),
        Node::Read {
            tensor,
            index,
            slice,
        } => Node::Read {
            tensor: *tensor,
            index: index.iter().map(|f| shift_index(f, v, lo)).collect(),
            slice: *slice,
        },
        Node::Sum { vars, body } => Node::Sum {
            vars: vars.clone(),
            body: sub(body),
        },
        Node::Product(fs) => Node::Product(
            fs.iter()
                .map(|(div, f)| (*div, shift_node(f, v, lo)))
                .collect(),
        ),
        Node::Neg(x) => Node::Neg(sub(x)),
        Node::Not(x) => Node::Not(sub(x)),
        Node::Binary(op, a, b) => Node::Binary(*op, sub(a), sub(b)),
        Node::Compare(op, a, b) => Node::Compare(*op, sub(a), sub(b)),
        Node::Call(f, args) => Node::Call(
            f.clone(),
            args.iter().map(|a| shift_node(a, v, lo)).collect(),
        ),
        Node::Normalize(kind, x, body) => Node::Normalize(*kind, *x, sub(body)),
        Node::Concat { out, parts, arg } => Node::Concat {
            out: *out,
            parts: parts.clone(),
            arg: sub(arg),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    /// The ranges of the last equation's variables after restriction (`None`: not dense).
    fn ranges(src: &str) -> Option<Vec<(String, usize)>> {
        let p = checked(src);
        let eq = p.equations.last()?;
        let r = restricted(&p, eq)?;
        Some(r.vars.iter().map(|v| (v.name.clone(), v.range)).collect())
    }

    #[test]
    fn shifted_reads_restrict_their_variable_to_the_valid_interval() {
        let named = |v: &[(&str, usize)]| {
            Some(
                v.iter()
                    .map(|&(n, r)| (n.to_string(), r))
                    .collect::<Vec<_>>(),
            )
        };
        // i - 1 ≥ 0: i from 1, one value fewer.
        assert_eq!(
            ranges("X : real[5]\nY : real[5]\nY[i] = X[i - 1]\n"),
            named(&[("i", 4)])
        );
        // 2 i + 1 ≤ 11 and 10 - i ≥ 0 over i in 0..6: no restriction needed.
        assert_eq!(
            ranges("A : real[12]\nY : real[6]\nY[i] = A[2 * i + 1] A[10 - i]\n"),
            named(&[("i", 6)])
        );
        // A summed variable: j - 1 ≥ 0.
        assert_eq!(
            ranges("X : real[6]\nA : real[4, 6]\nY[i] = X[j - 1] A[i, j]\n"),
            named(&[("i", 4), ("j", 5)])
        );
        // No valid value: left to the reference loops.
        assert_eq!(ranges("X : real[6]\nY : real[2]\nY[i] = X[i + 7]\n"), None);
        // A softmax axis would lose elements of its rows.
        assert_eq!(
            ranges("X : real[5]\nY : real[5]\nY[i.] = softmax(X[i - 1])\n"),
            None
        );
    }

    #[test]
    fn the_rewritten_equation_reads_and_writes_shifted_positions() {
        let p = checked("X : real[5]\nY[i] = X[i - 1] + i\n");
        let r = restricted(&p, &p.equations[0]).unwrap();
        let at = |f: &IndexFn| f.eval(&[0]);
        assert_eq!(r.lhs.iter().map(at).collect::<Vec<_>>(), vec![Some(1)]);
        let mut read = Vec::new();
        reads(&r.rhs, &mut |_, index| read.extend(index.iter().map(at)));
        assert_eq!(read, vec![Some(0)]);
    }
}
