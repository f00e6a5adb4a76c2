//! Reference backpropagation: exact reverse-mode derivatives computed by the reference
//! evaluator's own loops (§12).
//!
//! At every left-hand-side point of an equation the right-hand side is walked from the root
//! down, each node passing `adjoint × ∂node/∂child` to its children, and every tensor read
//! adds its share to that tensor's adjoint. Values a derivative needs (a sibling factor, a
//! function's argument, a softmax row) are recomputed with [`Cx::eval`], so this follows the
//! forward semantics exactly, including points skipped by out-of-range reads and undefined
//! elements under `max=`/`min=`. Like the reference evaluator it is simple rather than fast;
//! the gradient equations of `learn::symbolic` must agree with it.

use crate::eval::{assignments, points, Cx, EvalOptions};
use crate::functions::{RowStats, Structural};
use crate::semantics::{Equation, Family, Func, IndexFn, Node};
use crate::syntax::ast::BinOp;
use crate::tensor::Tensor;

/// Where adjoints accumulate: one dense row-major buffer per tensor that takes gradients
/// (`None` for the rest), and one for the previous virtual slice when there is one.
pub(crate) struct Sink<'b> {
    /// Adjoint of each tensor's value.
    pub adj: &'b mut [Option<Vec<f64>>],
    /// Adjoint of the previous virtual slice.
    pub slice: Option<&'b mut Vec<f64>>,
}

/// How the left-hand side combined the points that land on one element.
pub(crate) enum Head<'a> {
    /// Sums: every point receives the element's adjoint.
    Sum,
    /// `avg=`: each point receives its share.
    Avg,
    /// `max=`/`min=`: only the first point (in evaluation order) whose value is the element's
    /// final value receives it; `claimed` marks elements already taken (by data or an earlier
    /// equation).
    Extremum {
        /// The tensor's final value.
        value: &'a Tensor,
        /// Elements whose winner was already found, row-major.
        claimed: &'a mut [bool],
    },
}

/// Backpropagates `upstream` (the adjoint of `eq`'s target, row-major) through one
/// evaluation of `eq` over `values` (`slice`: the previous virtual slice, with the virtual
/// variable at `step`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn equation(
    p: &crate::semantics::Checked,
    eq: &Equation,
    values: &[Tensor],
    slice: Option<(&Tensor, usize)>,
    o: &EvalOptions,
    target_shape: &[usize],
    upstream: &[f64],
    mut head: Head,
    sink: &mut Sink,
) {
    let cx = Cx::new(p, eq, values, slice.map(|s| s.0), o);
    let mut env = vec![0i64; eq.vars.len()];
    if let (Some(tv), Some((_, step))) = (eq.virtual_var, slice) {
        env[tv] = step as i64;
    }
    let counts = matches!(head, Head::Avg).then(|| {
        let mut counts = vec![0u32; upstream.len()];
        let _ = points(eq, &mut env, &mut |env| {
            if let Some(off) = offset(&eq.lhs, env, target_shape) {
                if cx.eval(&eq.rhs, env, false).is_some() {
                    counts[off] += 1;
                }
            }
            Ok(())
        });
        counts
    });
    let mut back = Back {
        cx: &cx,
        eq,
        values,
        slice: slice.map(|s| s.0),
        sink,
    };
    let _ = points(eq, &mut env, &mut |env| {
        let Some(off) = offset(&eq.lhs, env, target_shape) else {
            return Ok(());
        };
        let mut g = upstream[off];
        match &mut head {
            Head::Sum => {}
            Head::Avg => g /= counts.as_ref().map_or(1, |c| c[off].max(1)) as f64,
            Head::Extremum { value, claimed } => {
                if claimed[off] {
                    return Ok(());
                }
                let idx: Vec<u32> = eq
                    .lhs
                    .iter()
                    .filter_map(|f| f.eval(env))
                    .map(|i| i as u32)
                    .collect();
                match (cx.eval(&eq.rhs, env, false), value.get_at(&idx)) {
                    (Some(v), Some(best)) if v == best => claimed[off] = true,
                    _ => return Ok(()),
                }
            }
        }
        if g != 0.0 {
            back.node(&eq.rhs, env, g, false);
        }
        Ok(())
    });
}

/// Row-major offset of an access, or `None` when it falls outside `shape`.
fn offset(index: &[IndexFn], env: &[i64], shape: &[usize]) -> Option<usize> {
    let mut off = 0usize;
    for (f, &n) in index.iter().zip(shape) {
        let i = f.eval(env)?;
        if i < 0 || i as usize >= n {
            return None;
        }
        off = off * n + i as usize;
    }
    Some(off)
}

/// The walk over one equation's right-hand side.
struct Back<'a, 'b, 'c> {
    cx: &'a Cx<'a>,
    eq: &'a Equation,
    values: &'a [Tensor],
    slice: Option<&'a Tensor>,
    sink: &'c mut Sink<'b>,
}

impl Back<'_, '_, '_> {
    /// Whether any read below `n` takes a gradient (so the walk can skip constant subtrees).
    fn wants(&self, n: &Node) -> bool {
        match n {
            Node::Read { tensor, slice, .. } => {
                if *slice {
                    self.sink.slice.is_some()
                } else {
                    self.sink.adj[*tensor].is_some()
                }
            }
            Node::Const(_) | Node::Var(_) | Node::Compare(..) => false,
            Node::Sum { body, .. }
            | Node::Neg(body)
            | Node::Not(body)
            | Node::Normalize(_, _, body)
            | Node::Concat { arg: body, .. } => self.wants(body),
            Node::Product(fs) => fs.iter().any(|(_, f)| self.wants(f)),
            Node::Binary(_, a, b) => self.wants(a) || self.wants(b),
            Node::Call(_, args) => args.iter().any(|a| self.wants(a)),
        }
    }

    /// Passes adjoint `a` of node `n` (at the point `env`) down to the reads below it.
    fn node(&mut self, n: &Node, env: &mut [i64], a: f64, total: bool) {
        if a == 0.0 || !self.wants(n) {
            return;
        }
        match n {
            Node::Const(_) | Node::Var(_) | Node::Compare(..) => {}
            Node::Read {
                tensor,
                index,
                slice,
            } => {
                let (shape, buf) = if *slice {
                    match (self.slice, self.sink.slice.as_deref_mut()) {
                        (Some(s), Some(buf)) => (&s.shape, buf),
                        _ => return,
                    }
                } else {
                    match self.sink.adj[*tensor].as_mut() {
                        Some(buf) => {
                            let shape = &self.values[*tensor].shape;
                            if buf.is_empty() {
                                buf.resize(shape.iter().product(), 0.0);
                            }
                            (shape, buf)
                        }
                        None => return,
                    }
                };
                if let Some(off) = offset(index, env, shape) {
                    buf[off] += a;
                }
            }
            Node::Sum { vars, body } => self.sum(vars, body, env, a, total),
            Node::Product(fs) => self.product(fs, env, a, total),
            Node::Neg(x) => self.node(x, env, -a, total),
            Node::Not(x) => self.node(x, env, -a, true),
            Node::Binary(op, x, y) => {
                let (Some(u), Some(v)) = (self.cx.eval(x, env, total), self.cx.eval(y, env, total))
                else {
                    return;
                };
                let (dx, dy) = match op {
                    BinOp::Add => (1.0, 1.0),
                    BinOp::Sub => (1.0, -1.0),
                    BinOp::Pow => {
                        let dy = if u > 0.0 { u.powf(v) * u.ln() } else { 0.0 };
                        (v * u.powf(v - 1.0), dy)
                    }
                    // x % y = x - trunc(x / y) y, whose quotient is locally constant.
                    BinOp::Rem => (1.0, -(u / v).trunc()),
                    // A quotient is locally constant.
                    BinOp::Quot => (0.0, 0.0),
                };
                self.node(x, env, a * dx, total);
                self.node(y, env, a * dy, total);
            }
            Node::Call(f, args) => {
                let mut xs = Vec::with_capacity(args.len());
                for arg in args {
                    match self.cx.eval(arg, env, total) {
                        Some(v) => xs.push(v),
                        None => return,
                    }
                }
                for (i, arg) in args.iter().enumerate() {
                    let d = match f {
                        Func::Builtin(b) => b.partial(&xs, i),
                        Func::User(name) => self
                            .cx
                            .functions()
                            .get(name)
                            .map_or(0.0, |uf| (uf.df)(xs[0])),
                    };
                    self.node(arg, env, a * d, total);
                }
            }
            Node::Normalize(kind, var, arg) => self.normalize(*kind, *var, arg, env, a, total),
            Node::Concat { out, parts, arg } => {
                self.cx.split_concat(*out, parts, env);
                self.node(arg, env, a, total);
            }
        }
    }

    /// A product: each wanted factor receives `a` times the others' product (divided, for a
    /// divisor).
    fn product(&mut self, fs: &[(bool, Node)], env: &mut [i64], a: f64, total: bool) {
        // A constant factor that is 0 (a false relation element) zeroes every other
        // factor's derivative: nothing to pass back, and the others need no evaluation.
        for (div, f) in fs {
            if !*div && !self.wants(f) && self.cx.eval(f, env, total) == Some(0.0) {
                return;
            }
        }
        let mut vals = Vec::with_capacity(fs.len());
        for (_, f) in fs {
            match self.cx.eval(f, env, total) {
                Some(v) => vals.push(v),
                None => return,
            }
        }
        for (i, (div, f)) in fs.iter().enumerate() {
            if !self.wants(f) {
                continue;
            }
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
            self.node(f, env, a * d, total);
        }
    }

    /// A summation point: every defined point for sums, shares for `avg=`, the first best
    /// point for `max=`/`min=`.
    fn sum(&mut self, vars: &[usize], body: &Node, env: &mut [i64], a: f64, total: bool) {
        if vars.is_empty() {
            return self.node(body, env, a, total);
        }
        let family = self.eq.family;
        if family == Family::Sum {
            // A point whose body is undefined (an out-of-range read) passes nothing back, so
            // every point can be walked directly.
            let eq = self.eq;
            let _ = assignments(eq, vars, env, &mut |env| {
                self.node(body, env, a, total);
                Ok(())
            });
            return;
        }
        let mut defined = Vec::new();
        let mut best: Option<(f64, Vec<i64>)> = None;
        let _ = assignments(self.eq, vars, env, &mut |env| {
            if let Some(x) = self.cx.eval(body, env, total) {
                let here: Vec<i64> = vars.iter().map(|&v| env[v]).collect();
                let better = match (&best, family) {
                    (None, _) => true,
                    (Some((b, _)), Family::Max) => x > *b,
                    (Some((b, _)), Family::Min) => x < *b,
                    _ => false,
                };
                if better && matches!(family, Family::Max | Family::Min) {
                    best = Some((x, here.clone()));
                }
                defined.push(here);
            }
            Ok(())
        });
        let chosen = match family {
            Family::Max | Family::Min => best.map(|(_, p)| vec![p]).unwrap_or_default(),
            _ => defined,
        };
        let share = match family {
            Family::Avg => a / chosen.len().max(1) as f64,
            _ => a,
        };
        for point in chosen {
            for (&v, &i) in vars.iter().zip(&point) {
                env[v] = i;
            }
            self.node(body, env, share, total);
        }
    }

    /// `softmax`/`lnorm` over `var`: the output at this point depends on the whole row.
    fn normalize(
        &mut self,
        kind: Structural,
        var: usize,
        arg: &Node,
        env: &mut [i64],
        a: f64,
        total: bool,
    ) {
        let here = env[var];
        let range = self.eq.vars[var].range;
        let mut row = Vec::with_capacity(range);
        for q in 0..range {
            env[var] = q as i64;
            row.push(self.cx.eval(arg, env, total));
        }
        env[var] = here;
        // Nothing flows back from a point that is itself undefined.
        if row.get(here as usize).copied().flatten().is_none() {
            return;
        }
        // The defined points of the row, the adjoint `a` at this point's, passed back through
        // the row's Jacobian to each.
        let at: Vec<usize> = (0..row.len()).filter(|&q| row[q].is_some()).collect();
        let defined: Vec<f64> = row.iter().copied().flatten().collect();
        let stats = RowStats::of(kind, &defined);
        let y: Vec<f64> = defined.iter().map(|&v| stats.apply(v)).collect();
        let g: Vec<f64> = at
            .iter()
            .map(|&q| if q as i64 == here { a } else { 0.0 })
            .collect();
        let mut grads = vec![0.0; at.len()];
        stats.backward(&y, &g, &mut grads);
        for (&q, gq) in at.iter().zip(grads) {
            env[var] = q as i64;
            self.node(arg, env, gq, total);
        }
        env[var] = here;
    }
}
