//! Recursion along an index, evaluated in index order in one pass (§9).
//!
//! A recursive stratum whose tensors each have a *step axis* — every equation writes its
//! target's step axis at `v + c` (or a constant), and reads the stratum's tensors along
//! theirs at `v + c'` with `c' ≤ c` — is a triangular system: step `s` of every tensor
//! depends only on earlier steps and, where `c' = c`, on other tensors' step `s`. Evaluating
//! step 0, 1, 2, … in turn, the tensors of one step in dependency order, gives the fixpoint
//! the naive iteration converges to, with each step's equations evaluated once: linear in the
//! number of steps instead of quadratic (`State[i, t + 1] = tanh(W[i, j] State[j, t] + …)`
//! over 10,000 steps, the GNN of Table 1 with `Emb`, `Z`, `Agg` along the layer index).
//!
//! Each equation is planned for one step: the step variable takes a single value, so its
//! reads become windows (the dense path's GEMMs over one slice) and its left-hand side a
//! scatter into the step's slice; at step `s` the windows move to that slice. Equations the
//! dense path does not take run as loop nests with the step variable bound outside.

use super::einsum::DenseEquation;
use super::extreme::ExtremeProduct;
use super::nest::NestEquation;
use crate::semantics::{Checked, Equation, Family, IndexFn, Kind, Node, Stratum, TensorId, VarId};
use std::borrow::Cow;

/// An index-ordered recursive stratum.
#[derive(Clone, Debug)]
pub struct Steps {
    /// Per tensor of the stratum (in `Stratum::tensors` order), its step axis.
    pub axes: Vec<(TensorId, usize)>,
    /// Steps evaluated: the largest extent of a step axis.
    pub count: usize,
    /// How the values written to one element combine (all the stratum's tensors share it):
    /// sums are dense, `max=`/`min=` tensors hold their defined elements, their step axis
    /// first (a step's elements then follow the earlier ones in sorted order).
    pub family: Family,
    /// The equations in the order each step evaluates them: grouped by target, targets in
    /// the order their same-step reads need.
    pub equations: Vec<StepEquation>,
    /// Whether learning can differentiate the stratum step by step on the dense kernels
    /// (`learn::steps_backward`): sums, every equation on a one-step dense plan that moves
    /// to each of its steps and whose gradients the dense kernels take
    /// ([`super::backward::declines`]).
    pub differentiable: bool,
    /// Whether the stratum's `int` tensors are computed from integer values (§8): every
    /// step runs its loop nests in exact i64, no dense plan (which computes in floats).
    pub exact: bool,
}

impl Steps {
    /// The plan computing in exact i64 on the loop nests: for sums only (a `max=`/`min=`
    /// step keeps its elements in f64), `None` otherwise.
    pub(crate) fn exact(mut self) -> Option<Steps> {
        if self.family != Family::Sum {
            return None;
        }
        for eq in &mut self.equations {
            eq.dense = None;
            eq.extreme = None;
        }
        self.differentiable = false;
        self.exact = true;
        Some(self)
    }
}

/// One equation, planned for one step.
#[derive(Clone, Debug)]
pub struct StepEquation {
    /// The equation (index into `Checked::equations`).
    pub equation: usize,
    /// The tensor it defines.
    pub target: TensorId,
    /// The step a point writes: its step variable's value plus `offset`, or `offset` itself
    /// when the left-hand side writes a constant step (`Emb[n, 0, d] = X[n, d]`).
    pub var: Option<VarId>,
    /// See `var`.
    pub offset: i64,
    /// The step variable's range.
    pub range: usize,
    /// The step variable's stride in each factor of each term of `dense` (0 where a factor
    /// does not read it): a step moves that factor's window by it.
    pub strides: Vec<Vec<i64>>,
    /// The dense plan of one step (the step variable at 0), if the dense path takes it; its
    /// terms' gradient einsums move with it (`learn::steps_backward`).
    pub dense: Option<DenseEquation>,
    /// For a `max=`/`min=` product of reads, its plan with the step variable bound.
    pub extreme: Option<ExtremeProduct>,
    /// The loop nest, the step variable bound outside it.
    pub nest: NestEquation,
}

impl StepEquation {
    /// The step at which points with the step variable at `x` write, and the `x` that
    /// writes step `s`, if any.
    pub fn at_step(&self, s: usize) -> Option<usize> {
        let x = s as i64 - self.offset;
        match self.var {
            Some(_) => usize::try_from(x).ok().filter(|&x| x < self.range),
            None => (x == 0).then_some(0),
        }
    }

    /// Moves `d`, a copy of [`StepEquation::dense`], to the step variable at `x`: each window
    /// that reads it moved by its stride from the plan's, each relation read at it shifted,
    /// the scatter's positions evaluated there. The copy is made once per evaluation and
    /// moved each step, so a step allocates nothing for its plan. `false` when a moved window
    /// would leave its tensor (the loop nest then takes that step; `d` stays usable for the
    /// next).
    pub fn move_to(&self, x: usize, d: &mut DenseEquation) -> bool {
        let (Some(plan), Some(v)) = (&self.dense, self.var) else {
            return self.dense.is_some();
        };
        let pairs = d.terms.iter_mut().zip(&plan.terms).zip(&self.strides);
        for ((c, planned), strides) in pairs {
            let factors = c.factors.iter_mut().zip(&planned.factors).zip(strides);
            for ((f, planned), &stride) in factors {
                let (Some(w), Some(base)) = (f.window.as_mut(), planned.window.as_ref()) else {
                    continue;
                };
                let Some(offset) = i64::try_from(base.offset)
                    .ok()
                    .zip(stride.checked_mul(x as i64))
                    .and_then(|(o, s)| o.checked_add(s))
                else {
                    return false;
                };
                let (mut lo, mut hi) = (offset, offset);
                for (&var, &k) in f.vars.iter().zip(&w.strides) {
                    let Some(reach) = k.checked_mul(plan.extents[var] as i64 - 1) else {
                        return false;
                    };
                    if reach < 0 {
                        lo += reach;
                    } else {
                        hi += reach;
                    }
                }
                let size: usize = w.shape.iter().product();
                if lo < 0 || hi >= size as i64 {
                    return false;
                }
                w.offset = offset as usize;
            }
            // Each factor's gradient einsum reads the term's other factors where they lie.
            for (j, g) in c.gradients.iter_mut().enumerate() {
                let others = c.factors.iter().enumerate().filter(|&(k, _)| k != j);
                for (gf, (_, f)) in g.factors.iter_mut().skip(1).zip(others) {
                    if let (Some(gw), Some(w)) = (gf.window.as_mut(), f.window.as_ref()) {
                        gw.offset = w.offset;
                    }
                }
            }
            // A relation read at the step variable moves its shift.
            if let (Some(f), Some(base)) = (c.sparse.as_mut(), planned.sparse.as_ref()) {
                if let Some(k) = f.vars.iter().position(|&y| y == v) {
                    if let (Some(s), Some(b)) = (f.shift.get_mut(k), base.shift.get(k)) {
                        *s = b + x as i64;
                    }
                }
            }
        }
        if let (Some(at), Some(base)) = (d.scatter.as_mut(), plan.scatter.as_ref()) {
            for (f, b) in at.iter_mut().zip(base) {
                *f = super::valid::shift_index(b, v, x as i64);
            }
        }
        true
    }
}

/// A virtual index (§5.2) on the dense path: the equation planned for one step, its reads
/// of the previous slice reading the target (which holds that slice while the step runs),
/// its reads at the step variable windows that the step moves.
#[derive(Clone, Debug)]
pub struct Virtual {
    /// The step, as for index recursion: the virtual variable at `x` is step `x`.
    pub step: StepEquation,
}

/// The dense plan of a stratum that is one equation with a virtual index, if the dense path
/// takes it.
pub(crate) fn plan_virtual(p: &Checked, st: &Stratum, sparse: &[bool]) -> Option<Virtual> {
    let [e] = st.equations[..] else {
        return None;
    };
    let eq = &p.equations[e];
    let v = eq.virtual_var?;
    if st.recursive || value_of(&eq.rhs, v) {
        return None;
    }
    let mut one = eq.clone();
    one.virtual_var = None;
    one.vars[v].range = 1;
    one.rhs = super::valid::shift_node(&slices_read(&one.rhs, eq.target), v, 0);
    let dense = super::einsum::plan_one(p, e, &one, sparse)?;
    let strides = window_strides(&dense, v);
    if !movable(&dense, v) || dense.scatter.is_some() {
        return None;
    }
    Some(Virtual {
        step: StepEquation {
            equation: e,
            target: eq.target,
            var: Some(v),
            offset: 0,
            range: eq.vars[v].range,
            strides,
            dense: Some(without_gradients(dense)),
            extreme: None,
            nest: super::nest::plan_nest(p, e, sparse),
        },
    })
}

/// A one-step plan without its terms' gradient einsums: virtual steps are differentiated by
/// the reference's recorded slices, and each evaluation copies its plan.
fn without_gradients(mut d: DenseEquation) -> DenseEquation {
    d.terms.iter_mut().for_each(|c| c.gradients.clear());
    d
}

/// `n` with every read of the previous virtual slice made a read of `target`.
fn slices_read(n: &Node, target: TensorId) -> Node {
    let mut out = n.clone();
    fn walk(n: &mut Node, target: TensorId) {
        if let Node::Read { tensor, slice, .. } = n {
            if *slice {
                *tensor = target;
                *slice = false;
            }
        }
        n.children_mut().into_iter().for_each(|c| walk(c, target));
    }
    walk(&mut out, target);
    out
}

/// Whether every factor that reads the step variable can move with it: through a window,
/// or a relation through its shifted tuples.
fn movable(d: &DenseEquation, v: VarId) -> bool {
    d.terms
        .iter()
        .flat_map(|c| c.factors.iter().chain(&c.sparse))
        .all(|f| f.window.is_some() || !f.shift.is_empty() || !f.vars.contains(&v))
}

/// The step variable's stride in each factor of each term (0 where a factor does not read
/// it through a window).
fn window_strides(d: &DenseEquation, v: VarId) -> Vec<Vec<i64>> {
    d.terms
        .iter()
        .map(|c| {
            c.factors
                .iter()
                .map(|f| match (&f.window, f.vars.iter().position(|&x| x == v)) {
                    (Some(w), Some(k)) => w.strides[k],
                    _ => 0,
                })
                .collect()
        })
        .collect()
}

/// The index-order plan of a recursive stratum, if it has one.
pub(crate) fn plan_steps(p: &Checked, st: &Stratum, sparse: &[bool]) -> Option<Steps> {
    // Dense sums, or `max=`/`min=` tensors (their defined elements, kept sorted by the
    // step: their step axis must come first, checked below).
    let family = p.tensors[*st.tensors.first()?].family;
    let kind_ok = |t: TensorId| {
        let info = &p.tensors[t];
        info.kind != Kind::Bool
            && info.family == family
            && match family {
                Family::Sum => !info.sparse_values,
                Family::Max | Family::Min => info.sparse_values,
                Family::Avg => false,
            }
    };
    if !st.recursive || !st.tensors.iter().all(|&t| kind_ok(t)) {
        return None;
    }
    let equations: Vec<Cow<Equation>> = st
        .equations
        .iter()
        .map(|&e| {
            let eq = &p.equations[e];
            super::valid::restricted(p, eq).unwrap_or(Cow::Borrowed(eq))
        })
        .collect();
    if equations.iter().any(|eq| eq.virtual_var.is_some()) {
        return None;
    }
    let axes = find_axes(p, st, &equations)?;
    if family != Family::Sum && axes.iter().any(|&(_, a)| a != 0) {
        return None;
    }
    let axis_of = |t: TensorId| axes.iter().find(|(x, _)| *x == t).map(|&(_, a)| a);
    // Same-step dependencies between the stratum's tensors must be acyclic.
    let mut same_step: Vec<(TensorId, TensorId)> = Vec::new();
    let mut planned = Vec::new();
    for (&e, eq) in st.equations.iter().zip(&equations) {
        let axis = axis_of(eq.target)?;
        let (var, offset) = step_of(&eq.lhs[axis])?;
        let mut ok = true;
        eq.rhs.reads(&mut |tensor, index| {
            let Some(a) = axis_of(tensor) else {
                return;
            };
            match (var, index.get(a).and_then(step_of)) {
                (Some(v), Some((Some(w), c))) if w == v && c <= offset => {
                    if c == offset {
                        same_step.push((eq.target, tensor));
                    }
                }
                _ => ok = false,
            }
            // The step variable may index the stratum's tensors only along their step axes.
            if let Some(v) = var {
                let elsewhere = index
                    .iter()
                    .enumerate()
                    .any(|(ax, f)| ax != a && mentions(f, v));
                ok &= !elsewhere;
            }
        });
        if !ok {
            return None;
        }
        planned.push(step_equation(p, e, eq, (var, offset), sparse));
    }
    let order = topological(&st.tensors, &same_step)?;
    planned.sort_by_key(|s| order.iter().position(|&t| t == s.target));
    let count = axes
        .iter()
        .map(|&(t, a)| p.tensors[t].shape[a])
        .max()
        .unwrap_or(0);
    let differentiable = family == Family::Sum
        && planned.iter().all(|eq| {
            let Some(dense) = &eq.dense else {
                return false;
            };
            let mut moved = dense.clone();
            eq.extreme.is_none()
                && super::backward::declines(p, dense).is_none()
                && (0..eq.range).all(|x| eq.move_to(x, &mut moved))
        });
    Some(Steps {
        axes,
        count,
        family,
        equations: planned,
        differentiable,
        exact: false,
    })
}

/// An equation planned for one step: the step variable at 0 (a single value), read and
/// written through windows and a scatter that a step moves.
fn step_equation(
    p: &Checked,
    e: usize,
    eq: &Equation,
    (var, offset): (Option<VarId>, i64),
    sparse: &[bool],
) -> StepEquation {
    let range = var.map_or(1, |v| eq.vars[v].range);
    let nest = super::nest::plan_bound(p, e, eq, var, sparse);
    let mut one = eq.clone();
    if let Some(v) = var {
        one.vars[v].range = 1;
        // `v + 0`: positions that are index arithmetic become windows and a scatter.
        one.lhs = one
            .lhs
            .iter()
            .map(|f| super::valid::shift_index(f, v, 0))
            .collect();
        one.rhs = super::valid::shift_node(&one.rhs, v, 0);
    }
    // A step variable used as a value would read 0 in the one-step plan.
    let as_value = var.is_some_and(|v| value_of(&eq.rhs, v));
    let dense = match as_value {
        true => None,
        false => super::einsum::plan_one(p, e, &one, sparse),
    };
    let strides = match (&dense, var) {
        (Some(d), Some(v)) => window_strides(d, v),
        _ => Vec::new(),
    };
    // A factor that reads the step variable without a window could not move with it.
    let movable = match (&dense, var) {
        (Some(d), Some(v)) => movable(d, v),
        _ => true,
    };
    StepEquation {
        equation: e,
        target: eq.target,
        var,
        offset,
        range,
        strides,
        dense: dense.filter(|_| movable),
        extreme: super::extreme::plan_extreme(p, eq, var),
        nest,
    }
}

/// Chooses a step axis per tensor: every equation's left-hand side writes it at `v + c` or a
/// constant, and the reads of the stratum's tensors agree (`agreement`).
fn find_axes(
    p: &Checked,
    st: &Stratum,
    equations: &[Cow<Equation>],
) -> Option<Vec<(TensorId, usize)>> {
    let candidates: Vec<Vec<usize>> = st
        .tensors
        .iter()
        .map(|&t| {
            (0..p.tensors[t].shape.len())
                .filter(|&a| {
                    equations
                        .iter()
                        .filter(|eq| eq.target == t)
                        .all(|eq| eq.lhs.get(a).and_then(step_of).is_some())
                })
                .collect()
        })
        .collect();
    // Each tensor's axis must move with its equations: some equation shifts it (`v + 1`)
    // or the tensor is read along it by one that does. A depth-first search over the
    // tensors, dropping a partial choice as soon as an equation between chosen tensors
    // disagrees with it (a transformer block has a dozen tensors of rank 4 or 5).
    let mut choice = Vec::with_capacity(st.tensors.len());
    let mut budget = SEARCH_BUDGET;
    search(
        &st.tensors,
        &candidates,
        equations,
        &mut choice,
        &mut budget,
    )
    .then_some(choice)
}

/// How many partial choices `find_axes` may try before it gives up on index order.
const SEARCH_BUDGET: usize = 100_000;

/// Extends `choice` (axes for a prefix of `tensors`) to all of them, if some extension is
/// consistent.
fn search(
    tensors: &[TensorId],
    candidates: &[Vec<usize>],
    equations: &[Cow<Equation>],
    choice: &mut Vec<(TensorId, usize)>,
    budget: &mut usize,
) -> bool {
    let k = choice.len();
    let (Some(&t), Some(axes)) = (tensors.get(k), candidates.get(k)) else {
        return agreement(choice, equations) == Some(true);
    };
    for &a in axes {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        choice.push((t, a));
        if agreement(choice, equations).is_some()
            && search(tensors, candidates, equations, choice, budget)
        {
            return true;
        }
        choice.pop();
    }
    false
}

/// Whether every read of a chosen tensor, in an equation whose target is chosen, reads its
/// axis at the equation's step variable plus a constant no larger than the written one
/// (`None` if not); and if so, whether some equation writes a later step than it reads
/// (the recursion moves along the axes).
fn agreement(axes: &[(TensorId, usize)], equations: &[Cow<Equation>]) -> Option<bool> {
    let axis_of = |t: TensorId| axes.iter().find(|(x, _)| *x == t).map(|&(_, a)| a);
    let mut moves = false;
    for eq in equations {
        let Some(a) = axis_of(eq.target) else {
            continue;
        };
        let (var, offset) = step_of(eq.lhs.get(a)?)?;
        let mut ok = true;
        eq.rhs.reads(&mut |tensor, index| {
            let Some(a) = axis_of(tensor) else {
                return;
            };
            match (var, index.get(a).and_then(step_of)) {
                (Some(v), Some((Some(w), c))) if w == v && c <= offset => moves |= c < offset,
                _ => ok = false,
            }
        });
        if !ok {
            return None;
        }
    }
    Some(moves)
}

/// A position that is a variable plus a constant (`(Some(v), c)`) or a constant (`(None, c)`).
fn step_of(f: &IndexFn) -> Option<(Option<VarId>, i64)> {
    let (coefs, c) = super::einsum::affine(f)?;
    match coefs.as_slice() {
        [] => Some((None, c)),
        [(v, 1)] => Some((Some(*v), c)),
        _ => None,
    }
}

/// Whether `f` mentions `v`.
fn mentions(f: &IndexFn, v: VarId) -> bool {
    let mut vs = Vec::new();
    f.vars(&mut vs);
    vs.contains(&v)
}

/// Whether `v` is used as a value (not only in positions) in `n`.
fn value_of(n: &Node, v: VarId) -> bool {
    matches!(n, Node::Var(x) if *x == v) || n.children().into_iter().any(|c| value_of(c, v))
}

/// The tensors in an order where each comes after those it reads at the same step (`edges`:
/// reader, read); `None` when they read each other.
fn topological(tensors: &[TensorId], edges: &[(TensorId, TensorId)]) -> Option<Vec<TensorId>> {
    let mut order: Vec<TensorId> = Vec::with_capacity(tensors.len());
    while order.len() < tensors.len() {
        let next = tensors.iter().copied().find(|t| {
            !order.contains(t)
                && edges
                    .iter()
                    .filter(|(reader, _)| reader == t)
                    .all(|(_, read)| read != t && order.contains(read))
        })?;
        order.push(next);
    }
    Some(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    fn steps(src: &str) -> Option<Steps> {
        let c = checked(src);
        let st = c.strata.iter().find(|s| s.recursive)?;
        plan_steps(&c, st, &[])
    }

    #[test]
    fn index_recursion_has_steps_in_dependency_order() {
        let s = steps(
            "W : real[4, 4]\nU : real[4, 10]\nS0 : real[4]\n\
             State[i, 0] = S0[i]\nState[i, t + 1] = tanh(W[i, j] State[j, t] + U[i, t])\n",
        )
        .unwrap();
        assert_eq!(s.axes.len(), 1);
        assert_eq!(s.count, 11);
        assert!(s.equations.iter().all(|e| e.dense.is_some()));
        let gnn = steps(
            "Neig(0, 1). Neig(1, 2). Neig(2, 0).\nX : real[3, 4]\nWP : real[2, 4, 4]\n\
             WA : real[2, 4, 4]\nEmb[n, 0, d] = X[n, d]\n\
             Z[n, l, d] = relu(WP[l, d, e] Emb[n, l, e])\nAgg[n, l, d] = Neig(n, m) Z[m, l, d]\n\
             Emb[n, l + 1, d] = relu(WA[l, d, e] Agg[n, l, e] + Emb[n, l, e])\n",
        )
        .unwrap();
        let targets: Vec<TensorId> = gnn.equations.iter().map(|e| e.target).collect();
        // Each step evaluates Emb (both equations), then Z, then Agg.
        assert_eq!(targets.len(), 4);
        assert_eq!(targets[0], targets[1]);
        assert!(targets[1] != targets[2] && targets[2] != targets[3]);
    }

    #[test]
    fn a_concat_inside_index_recursion_is_a_dense_step() {
        let s = steps(
            "W : real[4, 2, 8, 16]\nE : real[3, 16]\nX[s, 0, d] = E[s, d]\n\
             O[s, l, h, k] = tanh(W[l, h, k, d] X[s, l, d])\n\
             X[s, l + 1, m] = concat(O[s, l, h, k])\n",
        )
        .unwrap();
        assert!(s.equations.iter().all(|e| e.dense.is_some()));
    }

    #[test]
    fn recursions_that_are_not_along_an_index_have_none() {
        assert!(steps("M : real[3, 3]\nR[i] = 0.5 * M[i, j] R[j] + 1\n").is_none());
        assert!(steps("E(0, 1).\nP(x, y) :- E(x, y).\nP(x, z) :- P(x, y), E(y, z).\n").is_none());
    }
}
