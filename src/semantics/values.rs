//! Bounds on the values tensors hold, so that a variable bound to a value (`Deg(x, n) :-
//! Node(x), n = Kids[x]`) gets a range (§8): a count over relations is at most the number
//! of points it sums, data holds what it holds, a Boolean is 0 or 1. Unknown where an
//! equation is real-valued in ways no interval follows (`exp`, division) or recursive.

use super::{Equation, Family, Func, IndexFn, Kind, Node, Stratum, TensorInfo, VarId};
use crate::diagnostics::{codes, Diagnostic};
use crate::functions::Builtin;
use crate::syntax::ast::BinOp;

/// A closed interval of values, or `None` where nothing bounds them.
pub(crate) type Bounds = Option<(f64, f64)>;

/// The interval of a right-hand side `n` when each variable `v`'s position lies in
/// `range(v)` (a variable used as a value is its position; `offsets.rs` adds the offset in
/// the expression) and each tensor's values in `tensor(t)`.
pub(crate) fn node_bounds(
    n: &Node,
    range: &dyn Fn(VarId) -> Option<(f64, f64)>,
    tensor: &dyn Fn(usize) -> Bounds,
) -> Bounds {
    let hull = |xs: [f64; 4]| {
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
    };
    match n {
        Node::Const(c) => Some((c.value(), c.value())),
        Node::Var(v) => range(*v),
        Node::Read { tensor: t, .. } => tensor(*t),
        Node::Sum { vars, body } => {
            let (lo, hi) = node_bounds(body, range, tensor)?;
            let points = vars.iter().try_fold(1f64, |acc, v| {
                let (lo, hi) = range(*v)?;
                Some(acc * (hi - lo + 1.0).max(0.0))
            })?;
            match vars.is_empty() {
                true => Some((lo, hi)),
                false => Some((lo.min(0.0) * points, hi.max(0.0) * points)),
            }
        }
        Node::Product(fs) => fs.iter().try_fold(Some((1.0, 1.0)), |acc, (div, f)| {
            let (a, b) = (acc?, node_bounds(f, range, tensor)?);
            if *div {
                return None;
            }
            Some(hull([a.0 * b.0, a.0 * b.1, a.1 * b.0, a.1 * b.1]))
        })?,
        Node::Neg(x) => node_bounds(x, range, tensor).map(|(lo, hi)| (-hi, -lo)),
        Node::Not(_) | Node::Compare(..) => Some((0.0, 1.0)),
        Node::Binary(op, a, b) => {
            let (a, b) = (
                node_bounds(a, range, tensor)?,
                node_bounds(b, range, tensor)?,
            );
            match op {
                BinOp::Add => Some((a.0 + b.0, a.1 + b.1)),
                BinOp::Sub => Some((a.0 - b.1, a.1 - b.0)),
                BinOp::Rem => {
                    let m = b.0.abs().max(b.1.abs());
                    Some((a.0.min(0.0).max(-m), a.1.max(0.0).min(m)))
                }
                BinOp::Pow | BinOp::Quot => None,
            }
        }
        Node::Call(Func::Builtin(f), args) => match args.as_slice() {
            [a, b] => call_bounds(
                *f,
                node_bounds(a, range, tensor)?,
                node_bounds(b, range, tensor)?,
            ),
            _ => None,
        },
        _ => None,
    }
}

/// Bounds of a two-argument integer function (`min`, `max`, the bitwise ones).
fn call_bounds(f: Builtin, a: (f64, f64), b: (f64, f64)) -> Bounds {
    // Every integer of magnitude below `2^k` for the smallest such power above both.
    let span = |m: f64| {
        let p = (m.abs().max(1.0) + 1.0).log2().ceil().exp2();
        (p.is_finite() && p < 9.0e15).then_some(p)
    };
    let largest = a.0.abs().max(a.1.abs()).max(b.0.abs()).max(b.1.abs());
    let natural = a.0 >= 0.0 && b.0 >= 0.0;
    match f {
        Builtin::Min => Some((a.0.min(b.0), a.1.min(b.1))),
        Builtin::Max => Some((a.0.max(b.0), a.1.max(b.1))),
        // `a & b` with one side non-negative lies between 0 and that side.
        Builtin::Band if natural => Some((0.0, a.1.min(b.1))),
        Builtin::Band if a.0 >= 0.0 => Some((0.0, a.1)),
        Builtin::Band if b.0 >= 0.0 => Some((0.0, b.1)),
        Builtin::Band | Builtin::Bor | Builtin::Bxor => {
            let p = span(largest)?;
            Some(if natural {
                (0.0, p - 1.0)
            } else {
                (-p, p - 1.0)
            })
        }
        Builtin::Bshl | Builtin::Bshr => {
            let (s0, s1) = (b.0.clamp(0.0, 63.0), b.1.clamp(0.0, 63.0));
            let corners = [(a.0, s0), (a.0, s1), (a.1, s0), (a.1, s1)].map(|(x, s)| {
                let k = s.exp2();
                if f == Builtin::Bshl {
                    x * k
                } else {
                    (x / k).floor()
                }
            });
            let lo = corners.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = corners.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lo > -9.0e15 && hi < 9.0e15).then_some((lo, hi))
        }
        _ => None,
    }
}

/// Joins what one more equation contributes to a tensor's bounds: equations of one tensor
/// are added (§7), or combined by their `max=`/`min=`.
pub(crate) fn combine(info: &TensorInfo, so_far: Bounds, more: Bounds) -> Bounds {
    let ((a0, a1), (b0, b1)) = (so_far?, more?);
    match info.family {
        Family::Sum => Some((a0 + b0, a1 + b1)),
        _ => Some((a0.min(b0), a1.max(b1))),
    }
}

/// What a tensor holds before its equations: a Boolean is 0 or 1 whatever its data.
pub(crate) fn start(info: &TensorInfo, data: Bounds) -> Bounds {
    match info.kind {
        Kind::Bool => Some((0.0, 1.0)),
        _ => data,
    }
}

impl super::Ctx<'_> {
    /// The values data gives tensor `t` (literals, scalars, element facts, files): `(0, 0)`
    /// without any, as its elements are then 0 (§4).
    pub(super) fn data_bounds(&self, t: usize) -> Bounds {
        use crate::io::RawData;
        use crate::syntax::ast::StmtKind;
        let mut lo = 0f64;
        let mut hi = 0f64;
        let mut see = |v: f64| {
            lo = lo.min(v);
            hi = hi.max(v);
        };
        let d = &self.tensors[t];
        for &si in d.sources.iter().chain(&d.elements) {
            match &self.program.statements[si].kind {
                StmtKind::Literal { value, .. } => value.values.iter().for_each(|&v| see(v)),
                StmtKind::Scalar { value, .. } => see(*value),
                StmtKind::Equation { rhs, .. } => see(super::names::element_value(rhs)?),
                _ => {}
            }
        }
        if !d.facts.is_empty() {
            see(1.0);
        }
        let rank = d.rank();
        for s in self.sources.iter().filter(|s| s.tensor == t) {
            match &*s.raw {
                RawData::Dense { values, .. } => values.values().for_each(&mut see),
                RawData::Table(rows) => {
                    for r in rows.rows() {
                        match r.len() > rank {
                            true => see(r.field(rank)?.parse::<f64>().ok()?),
                            false => see(1.0),
                        }
                    }
                }
                RawData::Words(_) => see(1.0),
            }
        }
        (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
    }
}

/// The range of a variable bound to a value (`n = Kids[x]`, §8): the positions the value
/// can take, from the bounds of what it reads; `None` when `v` is bound so nowhere, or the
/// value is unbounded (then it has no range, E0202).
pub(super) fn bound_by_value(
    eq: &Equation,
    v: VarId,
    vars: &dyn Fn(VarId) -> Option<(f64, f64)>,
    bounds: &[Bounds],
    below: &mut dyn FnMut(i64) -> bool,
    errors: &mut Vec<Diagnostic>,
) -> Option<usize> {
    let mut found = None;
    equalities(&eq.rhs, v, &mut |shift, value| {
        let tensor = |t: usize| bounds.get(t).copied().flatten();
        let Some((lo, hi)) = node_bounds(value, vars, &tensor) else {
            return;
        };
        let (lo, hi) = (lo.ceil() - shift as f64, hi.floor() - shift as f64);
        // The column's offset is lowered and the program checked again (`offsets.rs`).
        if lo < 0.0 && lo > -9.0e15 && below(-lo as i64) {
            return;
        }
        if lo < 0.0 {
            errors.push(
                Diagnostic::error(
                    codes::OUT_OF_DOMAIN,
                    eq.vars[v].span,
                    format!(
                        "`{}` may be bound to a negative value here",
                        eq.vars[v].name
                    ),
                )
                .with_note(
                    "only a variable written in the head may hold a computed negative value",
                ),
            );
            return;
        }
        if hi >= crate::tensor::MAX_EXTENT as f64 {
            return;
        }
        let r = hi.max(-1.0) as usize + 1;
        found = Some(found.map_or(r, |f: usize| f.min(r)));
    });
    found
}

/// Calls `f` with `(shift, value)` for each equality `v + shift == value` that multiplies
/// the right-hand side's value, `v` not being mentioned by `value`.
fn equalities<'n>(n: &'n Node, v: VarId, f: &mut dyn FnMut(i64, &'n Node)) {
    use crate::syntax::ast::CmpOp;
    match n {
        Node::Sum { body, .. } => equalities(body, v, f),
        Node::Product(fs) => fs
            .iter()
            .filter(|(div, _)| !div)
            .for_each(|(_, x)| equalities(x, v, f)),
        Node::Compare(CmpOp::Eq, a, b) => {
            for (var, value) in [(a, b), (b, a)] {
                let shift = match var.inside_empty_sums() {
                    Node::Var(x) if *x == v => 0,
                    Node::Binary(BinOp::Add, x, k) => {
                        match (x.inside_empty_sums(), k.inside_empty_sums()) {
                            (Node::Var(x), Node::Const(k)) if *x == v => match k.as_int() {
                                Some(k) => k,
                                None => continue,
                            },
                            _ => continue,
                        }
                    }
                    _ => continue,
                };
                let mut mentioned = Vec::new();
                value.mentioned_vars(&mut mentioned);
                if !mentioned.contains(&v) {
                    f(shift, value);
                }
            }
        }
        _ => {}
    }
}

/// The bounds of the tensors of a stratum whose extents have settled: what their data holds
/// combined with what each equation writes. Unknown for a recursion over values (it could
/// grow without bound) and where an equation's left-hand side sums several points into one
/// element through arithmetic.
pub(super) fn value_bounds(
    st: &Stratum,
    eqs: &[&Equation],
    (tensors, open): (&[TensorInfo], &[Bounds]),
    bounds: &mut [Bounds],
) {
    for &t in &st.tensors {
        let info = &tensors[t];
        let known = info.kind == Kind::Bool || !st.recursive;
        let mut b = start(info, bounds[t]);
        for eq in eqs.iter().filter(|e| e.target == t) {
            let injective = eq
                .lhs
                .iter()
                .all(|f| matches!(f, IndexFn::Var(_) | IndexFn::Const(_)));
            // A variable of an open domain (§8) holds its table's values, which bound it
            // where no rule adds to them (`open`).
            let vars = |u: VarId| match eq.vars.get(u)?.open {
                Some(d) => open.get(d).copied().flatten(),
                None => {
                    let r = eq.vars.get(u)?.range;
                    Some((0.0, r.checked_sub(1)? as f64))
                }
            };
            let tensor = |u: usize| bounds.get(u).copied().flatten();
            let more = match injective {
                true => node_bounds(&eq.rhs, &vars, &tensor),
                false => None,
            };
            b = combine(info, b, more);
        }
        bounds[t] = if info.kind == Kind::Bool {
            Some((0.0, 1.0))
        } else if known {
            b
        } else {
            None
        };
    }
}
