//! Values in integer columns (§8): a relation's integer column holds values, negative ones
//! included (`Temp(-3).`), while the engines index every axis by positions `0..n`. Each
//! integer domain gets an *offset*, the value at position 0: the smallest value its data
//! holds or its equations write, and 0 when none is negative. Axes of relations and of
//! derived tensors count from their domain's offset; axes of dense data (literals, arrays,
//! declared tensors) always count from 0, so an index into a dense tensor still falls in
//! `0..n` (a read at a negative value is out of range, hence nothing).
//!
//! Lowering writes index functions over values; [`Ctx::shift_equations`] rewrites them
//! over positions (`v ↦ p + o_v` for each variable, `f ↦ f − o_axis` for each axis), which
//! is the identity where every offset is 0, so programs of naturals run exactly as before.
//! Where an equation would write below its domain's offset the checker lowers the offset
//! and checks again ([`Offsets`]); a rule that joins a relation at a bare variable writes no
//! lower than that relation holds (`extents.rs`), and one that would take a column past the
//! widest span it can hold is an error naming the rule, not its data.

use super::lower::Lowered;
use super::{Ctx, IndexFn, Kind, Node, TensorId, TensorInfo};
use crate::diagnostics::{codes, Diagnostic, Span};
use crate::io::RawData;
use crate::syntax::ast::{ArithOp, BinOp, Num};
use std::collections::HashMap;

/// How far below its data each integer domain's offset was lowered, by the domain's root
/// slot (integer domains share one [`DomainId`]; their roots tell them apart, and are the
/// same from one check of a program to the next), carried to the next check when an
/// equation wrote below it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Offsets(HashMap<usize, i64>);

impl Offsets {
    /// Lowers domain `d`'s offset so that `below` more positions fit under it, at least
    /// doubling how far it lies below the data, so that a recursion counting down settles
    /// in a few checks rather than one per value.
    pub(crate) fn lower(&mut self, d: usize, below: i64) {
        let now = self.0.get(&d).copied().unwrap_or(0);
        let want = now.saturating_add(below.max(1)).max(now.saturating_mul(2));
        self.0.insert(d, want);
    }
}

/// The smallest and largest value that data gives each integer domain, by root.
pub(crate) type DataSpans = HashMap<usize, (i64, i64)>;

impl Ctx<'_> {
    /// Whether tensor `t`'s integer axes are indexed by value: it is neither declared nor
    /// given as dense data. Known once files are read ([`Ctx::find_offsets`]).
    pub(super) fn value_indexed(&self, t: TensorId) -> bool {
        self.by_value.get(t).copied().unwrap_or(false)
    }

    fn counts_by_value(&self, t: TensorId) -> bool {
        let d = &self.tensors[t];
        if d.declared.is_some() {
            return false;
        }
        !self.given_arrays(t)
    }

    /// The value at position 0 of axis `ax` of tensor `t`.
    pub(super) fn axis_offset(&self, t: TensorId, ax: usize) -> i64 {
        let d = self.axis_domain(t, ax);
        if self.domains[d].symbolic || self.domains[d].is_open() || !self.value_indexed(t) {
            return 0;
        }
        self.offsets
            .get(&self.axis_root(t, ax))
            .copied()
            .unwrap_or(0)
    }

    /// The union-find root of axis `ax` of tensor `t`: its integer domain's identity.
    pub(super) fn axis_root(&self, t: TensorId, ax: usize) -> usize {
        self.uf.root(self.axis_base[t] + ax)
    }

    /// Fixes each integer domain's offset: the smallest value that data gives any
    /// value-indexed axis of it, or what an earlier check found its equations write.
    pub(super) fn find_offsets(&mut self, found: &Offsets) {
        self.by_value = (0..self.tensors.len())
            .map(|t| self.counts_by_value(t))
            .collect();
        let mut spans: DataSpans = HashMap::new();
        let mut lows: Vec<Vec<Option<i64>>> = Vec::with_capacity(self.tensors.len());
        for t in 0..self.tensors.len() {
            let rank = self.tensors[t].rank();
            let mut low = vec![None; rank];
            if !self.value_indexed(t) {
                lows.push(low);
                continue;
            }
            let roots: Vec<usize> = (0..rank).map(|ax| self.axis_root(t, ax)).collect();
            // Symbols and open columns (`open.rs`) have no offset.
            let offset: Vec<bool> = (0..rank)
                .map(|ax| {
                    let d = self.axis_domain(t, ax);
                    !self.domains[d].symbolic && !self.domains[d].is_open()
                })
                .collect();
            if offset.contains(&true) {
                let mut note = |ax: usize, v: i64| {
                    let s = spans.entry(roots[ax]).or_insert((v, v));
                    *s = (s.0.min(v), s.1.max(v));
                    low[ax] = Some(low[ax].map_or(v, |l: i64| l.min(v)));
                };
                for idx in self.constant_indices(t) {
                    for (ax, i) in idx.iter().enumerate().take(rank) {
                        if offset[ax] {
                            if let Ok(v) = self.const_position(t, ax, i) {
                                note(ax, v);
                            }
                        }
                    }
                }
                for s in self.sources.iter().filter(|s| s.tensor == t) {
                    if let RawData::Table(rows) = &*s.raw {
                        for r in rows.rows() {
                            for (ax, f) in r.fields().enumerate().take(rank) {
                                if offset[ax] {
                                    if let Ok(v) = f.parse::<i64>() {
                                        note(ax, v);
                                    }
                                }
                            }
                        }
                    }
                }
            }
            lows.push(low);
        }
        let mut offsets: HashMap<usize, i64> = spans
            .iter()
            .filter(|(_, s)| s.0 < 0)
            .map(|(&r, s)| (r, s.0))
            .collect();
        self.data_offsets = offsets.keys().copied().collect();
        for (&r, &extra) in &found.0 {
            let x = offsets.entry(r).or_insert(0);
            *x = x.saturating_sub(extra);
        }
        self.offsets = offsets;
        self.data_spans = spans;
        self.data_lows = lows;
    }

    /// The smallest position tensor `t` holds on each axis by its data (facts, rows), where
    /// it has any: where a rule that joins it at a bare variable can write no lower.
    pub(super) fn data_low_positions(&self, t: TensorId) -> Vec<Option<i64>> {
        let uncounted = self
            .sources
            .iter()
            .any(|s| s.tensor == t && !matches!(*s.raw, RawData::Table(_)));
        if uncounted {
            return vec![Some(i64::MIN); self.tensors[t].rank()];
        }
        let lows = self.data_lows.get(t).cloned().unwrap_or_default();
        lows.iter()
            .enumerate()
            .map(|(ax, l)| l.map(|v| v.saturating_sub(self.axis_offset(t, ax))))
            .collect()
    }

    /// The error for a recursion that keeps writing below an integer column's offset where
    /// lowering it once more would take the column past the widest span one can hold: a
    /// column that a dense tensor indexes has an extent, fixed before evaluation (§8), so
    /// the recursion needs a guard.
    pub(super) fn falls_too_far(
        &self,
        found: &Offsets,
        root: usize,
        by: i64,
        span: Span,
    ) -> Option<Diagnostic> {
        let mut next = found.clone();
        next.lower(root, by);
        let (lo, hi) = self.data_spans.get(&root).copied().unwrap_or((0, 0));
        let offset = lo
            .min(0)
            .saturating_sub(next.0.get(&root).copied().unwrap_or(0));
        let width = i128::from(hi.max(0)) - i128::from(offset) + 1;
        if width <= crate::tensor::MAX_EXTENT as i128 {
            return None;
        }
        let dense = (0..self.tensors.len())
            .find(|&t| {
                !self.holds_tuples(t)
                    && (0..self.tensors[t].rank()).any(|ax| self.axis_root(t, ax) == root)
            })
            .map_or_else(
                || "a dense tensor".to_string(),
                |t| format!("`{}`", self.tensors[t].name),
            );
        Some(
            Diagnostic::error(
                codes::UNBOUNDED_GROWTH,
                span,
                "this rule keeps writing lower values into an integer column that a dense tensor indexes",
            )
            .with_label("nothing bounds how low it counts")
            .with_note(format!(
                "{dense} indexes this column, so the column needs an extent before evaluation; bound the recursion with a guard (`x > -100`)"
            )),
        )
    }
    /// Rewrites lowered equations from values to positions.
    pub(super) fn shift_equations(&self, eqs: &mut [Lowered]) {
        if self.offsets.is_empty() {
            return;
        }
        for (eq, meta) in eqs.iter_mut() {
            let vars: Vec<i64> = eq
                .vars
                .iter()
                .map(|v| {
                    self.root_of_var(meta.stmt, &v.name)
                        .and_then(|r| self.offsets.get(&r).copied())
                        .unwrap_or(0)
                })
                .collect();
            if vars.iter().all(|&o| o == 0) && !self.writes_offset_axes(eq.target) {
                let mut touched = false;
                reads_offset_axes(&eq.rhs, self, &mut touched);
                if !touched {
                    continue;
                }
            }
            let target = eq.target;
            for (ax, f) in eq.lhs.iter_mut().enumerate() {
                *f = shifted(f, &vars, self.axis_offset(target, ax));
            }
            shift_node(&mut eq.rhs, &vars, self);
        }
    }

    /// A dense real tensor counts from 0 (§8): an equation that writes one at a negative
    /// index is an error, as it always was, unless data holds negative values there (a real
    /// tensor over a relation's column, `Score[x] = Temp(x) * 1.5`).
    pub(super) fn check_dense_offsets(&mut self, tensors: &[TensorInfo], eqs: &[Lowered]) {
        for (t, info) in tensors.iter().enumerate() {
            if info.kind != Kind::Real || info.sparse_values {
                continue;
            }
            let written = |ax: usize| {
                info.offsets[ax] != 0 && !self.data_offsets.contains(&self.axis_root(t, ax))
            };
            let Some(ax) = (0..info.offsets.len()).find(|&ax| written(ax)) else {
                continue;
            };
            let span = eqs
                .iter()
                .find(|(e, _)| e.target == t)
                .map_or(info.span, |(e, _)| e.span);
            self.diags.push(Diagnostic::error(
                codes::OUT_OF_DOMAIN,
                span,
                format!(
                    "this equation writes `{}` at a negative index on axis {}",
                    info.name,
                    ax + 1
                ),
            ).with_note("a real tensor's axes count from 0; relations and integer columns hold negative values"));
        }
    }

    fn writes_offset_axes(&self, t: TensorId) -> bool {
        (0..self.tensors[t].rank()).any(|ax| self.axis_offset(t, ax) != 0)
    }

    /// The union-find root of variable `name` of statement `stmt` (that of the axes it
    /// indexes bare).
    fn root_of_var(&self, stmt: usize, name: &str) -> Option<usize> {
        let node = *self.var_nodes.get(&(stmt, name.to_string()))?;
        Some(self.uf.root(node))
    }
}

fn reads_offset_axes(n: &Node, ctx: &Ctx, touched: &mut bool) {
    if let Node::Read { tensor, index, .. } = n {
        *touched |= (0..index.len()).any(|ax| ctx.axis_offset(*tensor, ax) != 0);
    }
    n.children()
        .into_iter()
        .for_each(|c| reads_offset_axes(c, ctx, touched));
}

/// `f` over values, as a position on an axis whose position 0 is value `axis`.
fn shifted(f: &IndexFn, vars: &[i64], axis: i64) -> IndexFn {
    simplified(plus(values_of(f, vars), -axis))
}

/// `f` with each variable replaced by its value (its position plus its offset).
fn values_of(f: &IndexFn, vars: &[i64]) -> IndexFn {
    match f {
        IndexFn::Var(v) => plus(IndexFn::Var(*v), vars.get(*v).copied().unwrap_or(0)),
        IndexFn::Const(c) => IndexFn::Const(*c),
        IndexFn::Arith(a, op, b) => IndexFn::Arith(
            Box::new(values_of(a, vars)),
            *op,
            Box::new(values_of(b, vars)),
        ),
    }
}

fn plus(f: IndexFn, c: i64) -> IndexFn {
    match c {
        0 => f,
        _ => IndexFn::Arith(Box::new(f), ArithOp::Add, Box::new(IndexFn::Const(c))),
    }
}

/// Folds constants of sums: `(p + 3) + -3` is `p`, `(p + 3) - 1` is `p + 2`.
fn simplified(f: IndexFn) -> IndexFn {
    let IndexFn::Arith(a, op, b) = f else {
        return f;
    };
    let (a, b) = (simplified(*a), simplified(*b));
    match (a, op, b) {
        (IndexFn::Const(x), op @ (ArithOp::Add | ArithOp::Sub), IndexFn::Const(y))
            if IndexFn::Arith(Box::new(IndexFn::Const(x)), op, Box::new(IndexFn::Const(y)))
                .eval(&[])
                .is_some() =>
        {
            let c = if op == ArithOp::Add { x + y } else { x - y };
            IndexFn::Const(c)
        }
        (a, ArithOp::Add | ArithOp::Sub, IndexFn::Const(0)) => a,
        (
            IndexFn::Arith(inner, ArithOp::Add, k),
            op @ (ArithOp::Add | ArithOp::Sub),
            IndexFn::Const(y),
        ) => match *k {
            IndexFn::Const(x) => match if op == ArithOp::Add {
                x.checked_add(y)
            } else {
                x.checked_sub(y)
            } {
                Some(c) => simplified(plus(*inner, c)),
                None => IndexFn::Arith(
                    Box::new(IndexFn::Arith(
                        inner,
                        ArithOp::Add,
                        Box::new(IndexFn::Const(x)),
                    )),
                    op,
                    Box::new(IndexFn::Const(y)),
                ),
            },
            k => IndexFn::Arith(
                Box::new(IndexFn::Arith(inner, ArithOp::Add, Box::new(k))),
                op,
                Box::new(IndexFn::Const(y)),
            ),
        },
        (a, op, b) => IndexFn::Arith(Box::new(a), op, Box::new(b)),
    }
}

/// Rewrites reads and variables used as values inside a right-hand side.
fn shift_node(n: &mut Node, vars: &[i64], ctx: &Ctx) {
    match n {
        Node::Read { tensor, index, .. } => {
            for (ax, f) in index.iter_mut().enumerate() {
                *f = shifted(f, vars, ctx.axis_offset(*tensor, ax));
            }
        }
        Node::Var(v) => {
            let o = vars.get(*v).copied().unwrap_or(0);
            if o != 0 {
                *n = Node::Binary(
                    BinOp::Add,
                    Box::new(Node::Var(*v)),
                    Box::new(Node::Const(Num::Int(o))),
                );
            }
        }
        Node::Compare(_, a, b) => {
            shift_node(a, vars, ctx);
            shift_node(b, vars, ctx);
            // `p + o < c` is `p < c - o`, a guard the joins run as a filter.
            let moved = |x: &Node, c: &Node| match (x.inside_empty_sums(), c.inside_empty_sums()) {
                (Node::Binary(BinOp::Add, v, k), Node::Const(c)) => match (&**v, &**k) {
                    (Node::Var(v), Node::Const(k)) => Some((*v, c.minus(*k))),
                    _ => None,
                },
                _ => None,
            };
            if let Some((v, c)) = moved(a, b) {
                **a = Node::Var(v);
                **b = Node::Const(c);
            } else if let Some((v, c)) = moved(b, a) {
                **b = Node::Var(v);
                **a = Node::Const(c);
            }
        }
        other => other
            .children_mut()
            .into_iter()
            .for_each(|c| shift_node(c, vars, ctx)),
    }
}
