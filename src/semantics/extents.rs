//! Ranges of index variables and extents of derived tensors (§5.1), computed statically in
//! stratum order; a recursive component is iterated until its extents stop growing.

use super::lower::{EqMeta, Lowered};
use super::values::{bound_by_value, value_bounds, Bounds};
use super::{Ctx, Equation, IndexFn, Kind, Node, Stratum, TensorInfo, VarId};
use crate::diagnostics::{codes, Diagnostic, Span};
use crate::syntax::ast::BinOp;
use std::collections::HashSet;

/// Largest value a scan for a "valid" range goes to.
const SCAN_LIMIT: i64 = 1 << 22;

/// Iterations of a recursive component after which a variable bounded by its guards takes
/// the guards' range at once, instead of growing with the component one step at a time
/// (`Nat(x + 1) :- Nat(x), x < 10000` settles in three iterations, not ten thousand).
const WIDEN_AFTER: usize = 8;

impl Ctx<'_> {
    /// Fixes every variable's range and every tensor's shape.
    pub(super) fn infer_extents(
        &mut self,
        tensors: &mut [TensorInfo],
        eqs: Vec<Lowered>,
        strata: &[Stratum],
    ) -> Vec<Equation> {
        let mut eqs = eqs;
        let max_iters = self.input.settings.max_iters.max(1);
        // Open domains (`open.rs`) have no extent to infer: their axes hold what their
        // tables hold, and their variables range over the table.
        let symbolic: Vec<bool> = self
            .domains
            .iter()
            .map(|d| d.symbolic || d.is_open())
            .collect();
        let open: Vec<bool> = self.domains.iter().map(|d| d.is_open()).collect();
        let open_values = open_values(&self.domains, tensors, &eqs);
        let by_value: Vec<bool> = (0..tensors.len()).map(|t| self.value_indexed(t)).collect();
        let roots: Vec<Vec<usize>> = (0..tensors.len())
            .map(|t| {
                (0..tensors[t].shape.len())
                    .map(|ax| self.axis_root(t, ax))
                    .collect()
            })
            .collect();
        let mut sizing = Sizing {
            symbolic: &symbolic,
            open: (&open, &open_values),
            by_value: &by_value,
            roots: &roots,
            below: Vec::new(),
            lows: (0..tensors.len())
                .map(|t| self.data_low_positions(t))
                .collect(),
            bounds: (0..tensors.len()).map(|t| self.data_bounds(t)).collect(),
        };
        for st in strata {
            if st.equations.is_empty() {
                continue;
            }
            let depth = recursion_depth(st, &eqs, tensors);
            let stable = stable_axes(st, &eqs);
            if st.recursive {
                fix_extents(st, &eqs, tensors, &sizing.scope(st, false, true));
            }
            let mut iter = 0;
            loop {
                iter += 1;
                let mut errors = Vec::new();
                // Past the depth its counter allows, no derivation is longer: the extents
                // hold every value it can write (`Fib(n + 1, x + y) :- …, n < 20`).
                let settled = depth.is_some_and(|d| iter > d);
                let round = Round {
                    st,
                    widen: iter > WIDEN_AFTER,
                    settled,
                    stable: &stable,
                };
                let changed = sizing.round(&round, &mut eqs, tensors, &mut errors);
                if !sizing.below.is_empty() {
                    // Checked again with lower offsets (`offsets.rs`).
                    self.below_offsets = std::mem::take(&mut sizing.below);
                    return eqs.into_iter().map(|(e, _)| e).collect();
                }
                if !changed {
                    self.diags.extend(errors);
                    let settled: Vec<&Equation> = st.equations.iter().map(|&i| &eqs[i].0).collect();
                    value_bounds(st, &settled, (tensors, &open_values), &mut sizing.bounds);
                    break;
                }
                if iter >= max_iters {
                    self.diags.push(keeps_growing(st, &eqs, tensors, max_iters));
                    break;
                }
            }
        }
        eqs.into_iter().map(|(e, _)| e).collect()
    }
}

/// E0402: a component's extents still grew after `--max-iters` rounds.
fn keeps_growing(
    st: &Stratum,
    eqs: &[Lowered],
    tensors: &[TensorInfo],
    max_iters: usize,
) -> Diagnostic {
    let names: Vec<String> = st
        .tensors
        .iter()
        .map(|&t| format!("`{}`", tensors[t].name))
        .collect();
    let span = eqs[st.equations[0]].0.span;
    Diagnostic::error(
        codes::UNBOUNDED_GROWTH,
        span,
        format!("the extent of {} keeps growing", names.join(", ")),
    )
    .with_note(format!(
        "it still grew after --max-iters ({max_iters}) iterations; declare the tensor's shape to bound it"
    ))
}

/// What sizing reads for every component (which domains are symbolic or open, which
/// tensors are indexed by value, each axis's root) and what it carries from one component
/// to the next (offsets to lower, the lowest positions written, value bounds).
struct Sizing<'a> {
    symbolic: &'a [bool],
    open: (&'a [bool], &'a [Bounds]),
    by_value: &'a [bool],
    roots: &'a [Vec<usize>],
    below: Vec<(usize, i64, Span)>,
    lows: Vec<Vec<Option<i64>>>,
    bounds: Vec<Bounds>,
}

/// One round of sizing a component.
struct Round<'s> {
    st: &'s Stratum,
    /// Whether variables bounded only by the component take the range its guards allow.
    widen: bool,
    /// Whether no derivation can be longer: ranges are set, extents grow no more.
    settled: bool,
    /// The axes no derivation moves (`stable_axes`).
    stable: &'s HashSet<(usize, usize)>,
}

impl Sizing<'_> {
    fn scope<'b>(&'b self, st: &'b Stratum, widen: bool, outside: bool) -> Scope<'b> {
        Scope {
            symbolic: self.symbolic,
            current: &st.tensors,
            widen,
            bounds: &self.bounds,
            by_value: self.by_value,
            roots: self.roots,
            outside,
            open: self.open,
        }
    }

    /// Ranges every variable of the component's equations and grows their targets to
    /// hold what they write; whether an extent grew.
    fn round(
        &mut self,
        r: &Round,
        eqs: &mut [Lowered],
        tensors: &mut [TensorInfo],
        errors: &mut Vec<Diagnostic>,
    ) -> bool {
        let mut changed = false;
        for &i in &r.st.equations {
            let (eq, meta) = &mut eqs[i];
            let mut below = std::mem::take(&mut self.below);
            let ranges = ranges(
                eq,
                meta,
                tensors,
                &self.scope(r.st, r.widen, false),
                &mut below,
                errors,
            );
            for (v, range) in ranges.iter().enumerate() {
                eq.vars[v].range = *range;
            }
            if !r.settled {
                let target = Target {
                    symbolic: self.symbolic,
                    by_value: self.by_value,
                    roots: self.roots,
                    below: &mut below,
                    current: &r.st.tensors,
                    lows: &mut self.lows,
                    open: self.open,
                    widen: r.widen,
                    stable: r.stable,
                };
                changed |= grow_lhs(eq, tensors, target, &ranges, errors);
            }
            self.below = below;
        }
        changed
    }
}

/// The values each open domain (§8) holds where no equation writes one of its axes with
/// arithmetic (so evaluation adds no value to its table): its table's smallest and largest.
fn open_values(domains: &[super::Domain], tensors: &[TensorInfo], eqs: &[Lowered]) -> Vec<Bounds> {
    let mut grows = vec![false; domains.len()];
    for (eq, _) in eqs {
        for (ax, f) in eq.lhs.iter().enumerate() {
            if !matches!(f, IndexFn::Var(_) | IndexFn::Const(_)) {
                if let Some(&d) = tensors[eq.target].domains.get(ax) {
                    grows[d] = true;
                }
            }
        }
    }
    domains
        .iter()
        .zip(grows)
        .map(|(d, grows)| {
            let (lo, hi) = d.table.as_ref().filter(|_| !grows)?.bounds()?;
            Some((lo as f64, hi as f64))
        })
        .collect()
}

/// How many iterations a recursive component of one tensor can derive something new in,
/// when each of its recursive equations counts along one axis (writes `v + c`, `c ≥ 1`,
/// reads itself at `v + d`, `d ≤ 0`, on that axis) below a guard (`v < B`): a derivation
/// then has at most `(B - 1) / c + 1` recursive steps, whatever other columns compute.
/// `None` otherwise.
fn recursion_depth(st: &Stratum, eqs: &[Lowered], tensors: &[TensorInfo]) -> Option<usize> {
    let [t] = st.tensors[..] else {
        return None;
    };
    if !st.recursive || tensors[t].kind != Kind::Bool {
        return None;
    }
    let mut depth = 0usize;
    for &i in &st.equations {
        let eq = &eqs[i].0;
        let mut own = Vec::new();
        eq.rhs.reads(&mut |tensor, index| {
            if tensor == t {
                own.push(index.to_vec());
            }
        });
        if own.is_empty() {
            continue;
        }
        let steps = eq.lhs.iter().enumerate().find_map(|(ax, f)| {
            let mut vs = Vec::new();
            f.vars(&mut vs);
            let [v] = vs[..] else {
                return None;
            };
            let (1, c @ 1..) = single_shift(f, v)? else {
                return None;
            };
            // Every read of itself is at `v + d`, `d ≤ 0`: the head's counter is larger.
            let counted = own.iter().all(|index| {
                index
                    .get(ax)
                    .and_then(|f| single_shift(f, v))
                    .is_some_and(|(k, d)| k == 1 && d <= 0)
            });
            let mut bound = None;
            guards(&eq.rhs, v, &mut |b| {
                bound = Some(bound.map_or(b, |x: i64| x.min(b)))
            });
            // From a counter at 0 or more, step k writes at most `(k - 1)·c < B` on.
            (counted && bound? >= 1).then(|| bound.map(|b| ((b - 1) / c + 1) as usize))?
        })?;
        depth = depth.max(steps);
    }
    Some(depth)
}

/// What the ranges of one equation are inferred against.
struct Scope<'a> {
    /// Whether each domain is symbolic.
    symbolic: &'a [bool],
    /// The tensors of the component being sized, whose extents may still grow.
    current: &'a [usize],
    /// Whether a variable that only the component's own axes, its guards and its shifted
    /// reads bound takes the range those allow (the component's extents are then the
    /// largest the guards allow).
    widen: bool,
    /// Bounds on the values of each tensor of earlier strata.
    bounds: &'a [Bounds],
    /// Whether each tensor's integer axes are indexed by value (`offsets.rs`).
    by_value: &'a [bool],
    /// Each axis's union-find root, which identifies its integer domain.
    roots: &'a [Vec<usize>],
    /// Whether ranges come from outside the component alone: its own tensors' reads are
    /// left out, as when fixing extents before it runs ([`fix_extents`]).
    outside: bool,
    /// Whether each domain is open (`open.rs`): its variables range over no extent; and
    /// the values each holds where no rule adds to them.
    open: (&'a [bool], &'a [Bounds]),
}

/// Fixes the extents of the component's axes that do not depend on the component (§5.1):
/// an axis that every equation writes with a constant or a bare variable whose range comes
/// from outside the component (dense data, a declaration, a relation of data, an earlier
/// stratum) has its extent before the component runs, so a read of it inside that extent is
/// an ordinary read (0 or false), not nothing: `Reach[x, z] = Adj[x, z] + Reach[x, y] Adj[y,
/// z]` counts paths from the first iteration on. Other axes grow with the recursion.
fn fix_extents(st: &Stratum, eqs: &[Lowered], tensors: &mut [TensorInfo], scope: &Scope) {
    let mut scratch = (Vec::new(), Vec::new());
    let ranges: Vec<Vec<Option<usize>>> = st
        .equations
        .iter()
        .map(|&i| {
            let (eq, meta) = &eqs[i];
            ranges_within(eq, meta, tensors, scope, &mut scratch.0, &mut scratch.1)
        })
        .collect();
    for &t in &st.tensors {
        if tensors[t].declared.is_some() {
            continue;
        }
        for ax in 0..tensors[t].shape.len() {
            if tensors[t]
                .domains
                .get(ax)
                .is_some_and(|&d| scope.symbolic[d])
            {
                continue;
            }
            let mut need: Option<usize> = None;
            for (k, &i) in st.equations.iter().enumerate() {
                let eq = &eqs[i].0;
                if eq.target != t {
                    continue;
                }
                let written = match eq.lhs.get(ax) {
                    Some(IndexFn::Const(c)) => usize::try_from(*c).ok().map(|c| c + 1),
                    Some(IndexFn::Var(v)) => ranges[k].get(*v).copied().flatten(),
                    _ => None,
                };
                match written {
                    Some(w) => need = Some(need.unwrap_or(0).max(w)),
                    None => {
                        need = None;
                        break;
                    }
                }
            }
            if let Some(n) = need.filter(|&n| n <= crate::tensor::MAX_EXTENT) {
                tensors[t].shape[ax] = tensors[t].shape[ax].max(n);
            }
        }
    }
}

/// A variable read bare at one axis of a tensor.
struct Bare {
    var: VarId,
    tensor: usize,
    axis: usize,
    under_not: bool,
}

/// Whether an axis of `t` fixes ranges (and so must agree with other such axes).
fn is_hard(t: usize, tensors: &[TensorInfo], current: &[usize]) -> bool {
    tensors[t].declared.is_some()
        || (!current.contains(&t) && tensors[t].kind != Kind::Bool && !tensors[t].sparse_values)
}

/// Every bare occurrence of each variable, marked when it is under `not` (whose reads are
/// total, §6.5), and every arithmetic one outside `not`.
fn occurrences(
    n: &Node,
    bare: &mut Vec<Bare>,
    arith: &mut Vec<(usize, usize, IndexFn)>,
    under_not: bool,
) {
    if let Node::Read {
        tensor,
        index,
        slice: false,
    } = n
    {
        for (ax, f) in index.iter().enumerate() {
            match f {
                IndexFn::Var(v) => bare.push(Bare {
                    var: *v,
                    tensor: *tensor,
                    axis: ax,
                    under_not,
                }),
                IndexFn::Const(_) => {}
                // Under `not` a read past the end is false, not nothing: it bounds nothing.
                _ if under_not => {}
                other => arith.push((*tensor, ax, other.clone())),
            }
        }
    }
    let under_not = under_not || matches!(n, Node::Not(_));
    n.children()
        .into_iter()
        .for_each(|c| occurrences(c, bare, arith, under_not));
}

fn concats(n: &Node, out: &mut Vec<(VarId, Vec<VarId>)>) {
    if let Node::Concat { out: o, parts, .. } = n {
        out.push((*o, parts.clone()));
    }
    n.children().into_iter().for_each(|c| concats(c, out));
}

/// Each variable's range (§5.1); a variable whose range cannot be inferred is an error.
fn ranges(
    eq: &Equation,
    meta: &EqMeta,
    tensors: &[TensorInfo],
    scope: &Scope,
    below: &mut Vec<(usize, i64, Span)>,
    errors: &mut Vec<Diagnostic>,
) -> Vec<usize> {
    ranges_within(eq, meta, tensors, scope, below, errors)
        .into_iter()
        .enumerate()
        .map(|(v, r)| match r {
            Some(r) => r,
            None => {
                errors.push(
                    Diagnostic::error(codes::UNBOUND_INDEX, eq.vars[v].span, format!("cannot infer the range of index `{}`", eq.vars[v].name))
                        .with_label("its range is not fixed by any tensor it indexes")
                        .with_note(format!("declare the shape of `{}` (e.g. `{} : real[10]`), or use `{}` to index a tensor of known shape", tensors[eq.target].name, tensors[eq.target].name, eq.vars[v].name)),
                );
                0
            }
        })
        .collect()
}

/// Each variable's range, `None` where nothing fixes it: by the axes it indexes bare, by
/// value (`n = Out[x] + m`), as a concatenation's parts, else where its index arithmetic
/// stays inside the tensors it reads.
fn ranges_within(
    eq: &Equation,
    meta: &EqMeta,
    tensors: &[TensorInfo],
    scope: &Scope,
    below: &mut Vec<(usize, i64, Span)>,
    errors: &mut Vec<Diagnostic>,
) -> Vec<Option<usize>> {
    let cx = Ranging::new(eq, tensors, scope);
    let n = eq.vars.len();
    let mut range: Vec<Option<usize>> = vec![None; n];
    for (&v, &r) in &meta.fixed_ranges {
        range[v] = Some(r);
    }
    for (v, info) in eq.vars.iter().enumerate() {
        if info.open.is_some_and(|d| scope.open.0[d]) {
            range[v] = Some(crate::tensor::MAX_EXTENT);
        }
    }
    // The largest value the reads give each variable before guards: the bound a guard
    // between two variables (`x < y`) takes from the other one. An open variable (§8) has
    // the values its domain holds where no rule adds to them, if that is known.
    let mut read = range.clone();
    for b in cx.bare.iter().filter(|b| !b.under_not) {
        let ext = tensors[b.tensor].shape.get(b.axis).copied().unwrap_or(0);
        read[b.var] = Some(read[b.var].map_or(ext, |r| r.min(ext)));
    }
    let largest = |w: VarId| -> Option<i64> {
        match eq.vars[w].open {
            Some(d) if scope.open.0[d] => {
                let (_, hi) = scope.open.1.get(d).copied().flatten()?;
                (hi.abs() < 1e15).then_some(hi.floor() as i64)
            }
            _ => Some(read.get(w).copied().flatten()? as i64 - 1),
        }
    };
    for (v, slot) in range.iter_mut().enumerate() {
        if slot.is_none() {
            *slot = cx.by_axes(v, &largest, errors);
        }
    }
    for v in 0..n {
        if range[v].is_none() {
            range[v] = cx.by_value(v, &range, below, errors);
        }
    }
    let mut cs = Vec::new();
    concats(&eq.rhs, &mut cs);
    for (out, parts) in cs {
        if range[out].is_none() {
            range[out] = Some(
                parts
                    .iter()
                    .fold(1usize, |a, &p| a.saturating_mul(range[p].unwrap_or(0))),
            );
        }
    }
    for v in 0..n {
        if range[v].is_none() {
            range[v] = cx.inside_reads(v, &range);
        }
    }
    range
}

/// One equation's variables being ranged: where each is read bare, and the index
/// arithmetic over them.
struct Ranging<'a, 's> {
    eq: &'a Equation,
    tensors: &'a [TensorInfo],
    scope: &'a Scope<'s>,
    bare: Vec<Bare>,
    arith: Vec<(usize, usize, IndexFn)>,
}

impl<'a, 's> Ranging<'a, 's> {
    fn new(eq: &'a Equation, tensors: &'a [TensorInfo], scope: &'a Scope<'s>) -> Self {
        let current = scope.current;
        let symbolic = scope.symbolic;
        let mut bare = Vec::new();
        let mut arith = Vec::new();
        occurrences(&eq.rhs, &mut bare, &mut arith, false);
        if scope.outside {
            bare.retain(|b| !current.contains(&b.tensor));
            arith.retain(|(t, _, _)| !current.contains(t));
        }
        for (ax, f) in eq.lhs.iter().enumerate() {
            if let IndexFn::Var(v) = f {
                let target = eq.target;
                // An open column has no extent (§8): writing into it bounds nothing (the
                // head `T0(x + 2, y)` writes values `x` ranges over elsewhere).
                let domain = tensors[target].domains.get(ax).copied();
                let open = domain.is_some_and(|d| scope.open.0[d]);
                let declared = tensors[target].declared.is_some();
                if !open && (declared || domain.is_some_and(|d| symbolic[d])) {
                    bare.push(Bare {
                        var: *v,
                        tensor: target,
                        axis: ax,
                        under_not: false,
                    });
                }
            }
        }
        Ranging {
            eq,
            tensors,
            scope,
            bare,
            arith,
        }
    }

    /// The range the axes `v` indexes bare give it: a hard axis (dense data, a declaration,
    /// symbols) fixes it, and two that disagree are an error; else the smallest soft axis,
    /// narrowed by shifted reads and guards.
    fn by_axes(
        &self,
        v: VarId,
        largest: &dyn Fn(VarId) -> Option<i64>,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<usize> {
        let (eq, tensors, scope) = (self.eq, self.tensors, self.scope);
        let (symbolic, current) = (scope.symbolic, scope.current);
        let mut hard: Option<(usize, usize)> = None;
        // Soft axes bound the variable: outside `not`, a read past one is nothing, and
        // nothing is absorbing (§5.1), so the smallest bounds it. Reads under `not` are total
        // (§6.5), so even a dense axis there neither fixes nor conflicts: it bounds the
        // variable only when nothing else does.
        let mut soft: Option<usize> = None;
        let mut soft_total: Option<usize> = None;
        let mut only_current = true;
        for b in self.bare.iter().filter(|b| b.var == v) {
            only_current &= current.contains(&b.tensor);
            let (t, ax) = (b.tensor, b.axis);
            let ext = tensors[t].shape.get(ax).copied().unwrap_or(0);
            let on_symbols = tensors[t].domains.get(ax).is_some_and(|&d| symbolic[d]);
            if on_symbols || (!b.under_not && is_hard(t, tensors, current)) {
                match hard {
                    None => hard = Some((ext, t)),
                    Some((e0, t0)) if e0 != ext => {
                        errors.push(
                            Diagnostic::error(
                                codes::EXTENT_MISMATCH,
                                eq.vars[v].span,
                                format!(
                                    "index `{}` ranges over {} in {} but over {} in {}",
                                    eq.vars[v].name, e0, tensors[t0].name, ext, tensors[t].name
                                ),
                            )
                            .with_secondary(eq.span, "in this equation"),
                        );
                    }
                    _ => {}
                }
            } else if b.under_not {
                soft_total = Some(soft_total.unwrap_or(0).max(ext));
            } else {
                soft = Some(soft.map_or(ext, |s| s.min(ext)));
            }
        }
        match hard {
            Some((e, _)) => Some(e),
            // Without a hard axis, shifted reads and guards bound it too (§5.1).
            None => match (
                soft.or(soft_total),
                upper_bound(eq, v, &self.arith, tensors, largest),
            ) {
                (Some(_), Some(b)) if scope.widen && only_current => Some(b),
                (Some(r), Some(b)) => Some(r.min(b)),
                (r, _) => r,
            },
        }
    }

    /// The range of `v` as a value of other variables (`n = Out[x] + m`), narrowed by its
    /// guards (`n < 20`).
    fn by_value(
        &self,
        v: VarId,
        range: &[Option<usize>],
        below: &mut Vec<(usize, i64, Span)>,
        errors: &mut Vec<Diagnostic>,
    ) -> Option<usize> {
        let (eq, scope) = (self.eq, self.scope);
        // A head column may hold a negative value: its offset is then lowered.
        let mut lower = |by: i64| {
            let head = eq.lhs.iter().position(|f| *f == IndexFn::Var(v));
            let root = head
                .filter(|_| scope.by_value[eq.target])
                .and_then(|ax| scope.roots[eq.target].get(ax));
            root.map(|&r| below.push((r, by, eq.span))).is_some()
        };
        // Positions of the other variables, narrowed by their guards (`x > 0`); the
        // values of open ones (§8) where no rule adds to them.
        let vars = |u: VarId| {
            if let Some(d) = eq.vars[u].open {
                return scope.open.1.get(d).copied().flatten();
            }
            let r = range.get(u).copied().flatten()?.checked_sub(1)? as f64;
            Some((lower_bound(&eq.rhs, u) as f64, r))
        };
        let r = bound_by_value(eq, v, &vars, scope.bounds, &mut lower, errors)?;
        let guarded = upper_bound(eq, v, &self.arith, self.tensors, &|w| {
            Some(range.get(w).copied().flatten()? as i64 - 1)
        });
        Some(guarded.map_or(r, |b| b.min(r)))
    }

    /// The values `0..end` of `v` where every read of index arithmetic over it stays inside
    /// its tensor (the "valid" range, §5.1), `None` where that does not end.
    fn inside_reads(&self, v: VarId, range: &[Option<usize>]) -> Option<usize> {
        let tensors = self.tensors;
        let constraints: Vec<&(usize, usize, IndexFn)> = self
            .arith
            .iter()
            .filter(|(_, _, f)| {
                let mut vs = Vec::new();
                f.vars(&mut vs);
                vs.contains(&v)
            })
            .collect();
        if constraints.is_empty() {
            return None;
        }
        let max_ext = constraints
            .iter()
            .map(|(t, ax, _)| tensors[*t].shape.get(*ax).copied().unwrap_or(0) as i64)
            .max()
            .unwrap_or(0);
        let scale = constraints
            .iter()
            .map(|(_, _, f)| largest_constant(f))
            .max()
            .unwrap_or(1)
            .max(1);
        let limit = (4 * (max_ext + 1))
            .saturating_mul(scale)
            .saturating_add(64)
            .min(SCAN_LIMIT);
        // Reads affine in `v` (`Temp(-x)`, `Obs(t + 1, o)`, `Img[3 * x + dx + c]`) keep it in
        // an interval, known at once: the scan below would walk to it one value at a time
        // (4·10⁶ values for a large constant).
        let affine: Option<Vec<Read>> = constraints
            .iter()
            .map(|(t, ax, f)| {
                let ext = tensors[*t].shape.get(*ax).copied().unwrap_or(0) as i64;
                let k = affine_coefficient(f, v)?;
                // Where another variable's range is empty the read binds nothing (as below).
                Some(match bounds(f, range, &[], Some((v, 0))) {
                    Some((low, high)) => (k, low, high, ext),
                    None => (0, 0, 0, 1),
                })
            })
            .collect();
        if let Some(valid) = affine.and_then(|reads| valid_interval(&reads, limit)) {
            return match valid {
                Valid::Empty => Some(0),
                Valid::Below(end) => Some(end as usize),
                Valid::ToTheLimit => None,
            };
        }
        let mut first_valid = None;
        let mut end = 0;
        let mut bounded = false;
        for x in 0..limit {
            let ok = constraints.iter().all(|(t, ax, f)| {
                let ext = tensors[*t].shape.get(*ax).copied().unwrap_or(0) as i64;
                match bounds(f, range, &[], Some((v, x))) {
                    Some((lo, hi)) => lo >= 0 && hi < ext,
                    None => true,
                }
            });
            if ok {
                first_valid.get_or_insert(x);
                end = x + 1;
            } else if first_valid.is_some() {
                bounded = true;
                break;
            }
        }
        if first_valid.is_some() && !bounded {
            return None;
        }
        Some(end as usize)
    }
}

/// Where the values `0..limit` of a variable keep every read `k·v + c` inside its extent.
#[derive(Debug)]
enum Valid {
    /// Nowhere.
    Empty,
    /// Up to this end, which is below the limit.
    Below(i64),
    /// Up to the limit: nothing bounds it so.
    ToTheLimit,
}

/// A read `k·v + r` of an axis of extent `e`, the rest `r` ranging over `low..=high`:
/// `(k, low, high, e)`.
type Read = (i64, i64, i64, i64);

/// [`Valid`] for reads each keeping `0 ≤ k·v + r < extent` for every value of the rest: an
/// interval of `v`; so does their intersection with `0..limit`. The same answer as a scan
/// of every value; `None` where the arithmetic leaves i64 (the scan decides then).
fn valid_interval(reads: &[Read], limit: i64) -> Option<Valid> {
    let (mut lo, mut hi) = (0i64, limit - 1);
    let ceil = |a: i64, b: i64| Some(a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0));
    for &(k, low, high, ext) in reads {
        // k·v ≥ -low and k·v ≤ ext - 1 - high.
        let top = ext.checked_sub(1)?.checked_sub(high)?;
        let bottom = low.checked_neg()?;
        let (from, to) = match k {
            0 if bottom <= 0 && top >= 0 => continue,
            0 => return Some(Valid::Empty),
            k if k > 0 => (ceil(bottom, k)?, top.div_euclid(k)),
            k => {
                let m = k.checked_neg()?;
                (ceil(top.checked_neg()?, m)?, low.div_euclid(m))
            }
        };
        lo = lo.max(from);
        hi = hi.min(to);
    }
    Some(match (lo > hi, hi >= limit - 1) {
        (true, _) => Valid::Empty,
        (false, true) => Valid::ToTheLimit,
        (false, false) => Valid::Below(hi + 1),
    })
}

/// The `k` of an index function that is `k·v` plus terms without `v` (other variables
/// anywhere): `None` where `v` is multiplied by a variable or divided.
fn affine_coefficient(f: &IndexFn, v: VarId) -> Option<i64> {
    use crate::syntax::ast::ArithOp;
    let mut vs = Vec::new();
    f.vars(&mut vs);
    if !vs.contains(&v) {
        return Some(0);
    }
    match f {
        IndexFn::Var(_) => Some(1),
        IndexFn::Const(_) => Some(0),
        IndexFn::Arith(a, op, b) => match (op, &**a, &**b) {
            (ArithOp::Add, a, b) => {
                affine_coefficient(a, v)?.checked_add(affine_coefficient(b, v)?)
            }
            (ArithOp::Sub, a, b) => {
                affine_coefficient(a, v)?.checked_sub(affine_coefficient(b, v)?)
            }
            (ArithOp::Mul, IndexFn::Const(c), x) | (ArithOp::Mul, x, IndexFn::Const(c)) => {
                affine_coefficient(x, v)?.checked_mul(*c)
            }
            _ => None,
        },
    }
}

/// One more than the largest value of `v` at which every read shifting it alone stays
/// inside its axis (`Obs(t + 1, o)`: `t + 1 < n`) and every guard on it in a factor of the
/// right-hand side holds (`x < 10000`, or `x < y` with `y` at most `largest(y)`);
/// `None` when nothing bounds it so. Points past it are nothing (an out-of-range read) or 0
/// (a false guard), so they write nothing that would grow an extent. Reads under `not` are
/// total and do not bound it.
fn upper_bound(
    eq: &Equation,
    v: VarId,
    arith: &[(usize, usize, IndexFn)],
    tensors: &[TensorInfo],
    largest: &dyn Fn(VarId) -> Option<i64>,
) -> Option<usize> {
    let mut bound: Option<i64> = None;
    let mut tighten = |b: i64| bound = Some(bound.map_or(b, |x| x.min(b)));
    for (t, ax, f) in arith {
        let Some((k, c)) = single_shift(f, v) else {
            continue;
        };
        let n = tensors[*t].shape.get(*ax).copied().unwrap_or(0) as i64;
        // k·v + c ≤ n - 1 with k > 0.
        if k > 0 {
            tighten((n - 1 - c).div_euclid(k) + 1);
        }
    }
    guards(&eq.rhs, v, &mut tighten);
    // `v < w + c` holds only below the largest `w` plus `c`.
    variable_guards(&eq.rhs, v, &mut |side, w, c| {
        if let Some(hi) = largest(w).filter(|_| w != v && side == Side::Below) {
            // The largest `v` is `hi + c - 1`; one more than it:
            tighten(hi.saturating_add(c));
        }
    });
    bound.map(|b| b.max(0) as usize)
}

/// Calls `bound` with `(Below, w, c)` for each guard `v < w + c`, and `(From, w, c)` for each
/// `v ≥ w + c`, between `v` and another variable (`x < y`, `x + 1 <= y`, either way round)
/// that multiplies the right-hand side's value, both sides `v` or `w` plus a constant.
fn variable_guards(n: &Node, v: VarId, bound: &mut dyn FnMut(Side, VarId, i64)) {
    use crate::syntax::ast::CmpOp;
    each_guard(n, &mut |op, a, b| {
        // `v + d op w + e`, or the other way round.
        let shifted_var = |n: &Node| -> Option<(VarId, f64)> {
            let mut vs = Vec::new();
            n.inside_empty_sums().mentioned_vars(&mut vs);
            vs.dedup();
            let &[x] = vs.as_slice() else { return None };
            match linear(n, x)? {
                (k, d) if k == 1.0 && d.fract() == 0.0 && d.abs() < 1e15 => Some((x, d)),
                _ => None,
            }
        };
        let (Some((x, dx)), Some((y, dy))) = (shifted_var(a), shifted_var(b)) else {
            return;
        };
        let (op, (w, dv, dw)) = match (x == v, y == v) {
            (true, false) => (*op, (y, dx, dy)),
            (false, true) => (op.flipped(), (x, dy, dx)),
            _ => return,
        };
        // v + dv < w + dw  ⇔  v < w + (dw - dv); `≤` allows one more, and so on.
        let c = (dw - dv) as i64;
        match op {
            CmpOp::Lt => bound(Side::Below, w, c),
            CmpOp::Le => bound(Side::Below, w, c.saturating_add(1)),
            CmpOp::Gt => bound(Side::From, w, c.saturating_add(1)),
            CmpOp::Ge => bound(Side::From, w, c),
            CmpOp::Eq => {
                bound(Side::Below, w, c.saturating_add(1));
                bound(Side::From, w, c);
            }
            CmpOp::Ne => {}
        }
    });
}

/// `(k, c)` when `f` is `k·v + c` in `v` alone, built from `+`, `-` and `*` by constants.
fn single_shift(f: &IndexFn, v: VarId) -> Option<(i64, i64)> {
    use crate::syntax::ast::ArithOp;
    Some(match f {
        IndexFn::Var(x) if *x == v => (1, 0),
        IndexFn::Var(_) => return None,
        IndexFn::Const(c) => (0, *c),
        IndexFn::Arith(a, op, b) => {
            let ((ka, ca), (kb, cb)) = (single_shift(a, v)?, single_shift(b, v)?);
            match op {
                ArithOp::Add => (ka.checked_add(kb)?, ca.checked_add(cb)?),
                ArithOp::Sub => (ka.checked_sub(kb)?, ca.checked_sub(cb)?),
                ArithOp::Mul if ka == 0 => (ca.checked_mul(kb)?, ca.checked_mul(cb)?),
                ArithOp::Mul if kb == 0 => (ka.checked_mul(cb)?, ca.checked_mul(cb)?),
                _ => return None,
            }
        }
    })
}

/// Calls `bound` with `b` for each guard `v < b` (or `v ≤ b - 1`, `v == b - 1`, written
/// either way round) that multiplies the right-hand side's value: a factor of the product
/// under its summation points.
fn guards(n: &Node, v: VarId, bound: &mut dyn FnMut(i64)) {
    guard_limits(n, v, &mut |side, b| {
        if side == Side::Below {
            bound(b)
        }
    });
}

/// The smallest value of `v` that the right-hand side's guards allow (`v > 0`, `v ≥ 2`,
/// `v == 3`, either way round) and its reads shifting it alone keep at a position
/// (`Init[v - 1]`: `v ≥ 1`): at smaller values every point is 0 or nothing, so nothing is
/// written. Reads under `not` are total and do not bound it.
fn lower_bound(n: &Node, v: VarId) -> i64 {
    let mut low = 0i64;
    guard_limits(n, v, &mut |side, b| {
        if side == Side::From {
            low = low.max(b)
        }
    });
    shifted_reads(n, v, &mut |k, c| {
        // k·v + c ≥ 0 with k > 0.
        low = low.max((-c).div_euclid(k) + i64::from((-c).rem_euclid(k) != 0));
    });
    low
}

/// Calls `f` with `(k, c)` for each read outside `not` at `k·v + c`, `k > 0`, in `v` alone.
fn shifted_reads(n: &Node, v: VarId, f: &mut dyn FnMut(i64, i64)) {
    match n {
        Node::Not(_) => {}
        Node::Read {
            index,
            slice: false,
            ..
        } => {
            for ix in index {
                if let Some((k @ 1.., c)) = single_shift(ix, v) {
                    f(k, c);
                }
            }
        }
        other => other
            .children()
            .into_iter()
            .for_each(|ch| shifted_reads(ch, v, f)),
    }
}

/// Which end of a variable's range a guard limits.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// `v < b`.
    Below,
    /// `v ≥ b`.
    From,
}

/// Calls `limit` for each guard on `v` that multiplies the right-hand side's value (a
/// factor of the product under its summation points).
fn guard_limits(n: &Node, v: VarId, limit: &mut dyn FnMut(Side, i64)) {
    use crate::syntax::ast::CmpOp;
    each_guard(n, &mut |op, a, b| {
        // Written as `k·v + d op c` (or the other way round), solved for `v`.
        let (op, (k, d), c) = match (linear(a, v), op, b.inside_empty_sums()) {
            (Some(kd), op, Node::Const(c)) => (*op, kd, c.value()),
            _ => match (a.inside_empty_sums(), linear(b, v)) {
                (Node::Const(c), Some(kd)) => (op.flipped(), kd, c.value()),
                _ => return,
            },
        };
        if k == 0.0 {
            return;
        }
        let (op, c) = match k > 0.0 {
            true => (op, (c - d) / k),
            false => (op.flipped(), (c - d) / k),
        };
        let found = match op {
            CmpOp::Lt => vec![(Side::Below, c.ceil())],
            CmpOp::Le => vec![(Side::Below, c.floor() + 1.0)],
            CmpOp::Gt => vec![(Side::From, c.floor() + 1.0)],
            CmpOp::Ge => vec![(Side::From, c.ceil())],
            CmpOp::Eq => vec![(Side::Below, c.floor() + 1.0), (Side::From, c.ceil())],
            CmpOp::Ne => vec![],
        };
        for (side, b) in found {
            if b.is_finite() && b.abs() < 1e15 {
                limit(side, b as i64);
            }
        }
    });
}

/// Calls `f` with each comparison that multiplies the right-hand side's value: a factor of
/// the product under its summation points (a guard: where it is false, the point is 0).
fn each_guard(n: &Node, f: &mut dyn FnMut(&crate::syntax::ast::CmpOp, &Node, &Node)) {
    match n {
        Node::Sum { body, .. } => each_guard(body, f),
        Node::Product(fs) => fs
            .iter()
            .filter(|(div, _)| !div)
            .for_each(|(_, x)| each_guard(x.inside_empty_sums(), f)),
        Node::Compare(op, a, b) => f(op, a, b),
        _ => {}
    }
}

/// `(k, d)` when `n` is `k·v + d` in `v` alone (`v`, `y + 1`, `2 * y - 3`).
fn linear(n: &Node, v: VarId) -> Option<(f64, f64)> {
    match n.inside_empty_sums() {
        Node::Var(x) if *x == v => Some((1.0, 0.0)),
        Node::Const(c) => Some((0.0, c.value())),
        Node::Neg(a) => linear(a, v).map(|(k, d)| (-k, -d)),
        Node::Binary(op @ (BinOp::Add | BinOp::Sub), a, b) => {
            let ((ka, da), (kb, db)) = (linear(a, v)?, linear(b, v)?);
            let sign = if *op == BinOp::Add { 1.0 } else { -1.0 };
            Some((ka + sign * kb, da + sign * db))
        }
        Node::Product(fs) => fs.iter().try_fold((0.0, 1.0), |(k, d), (div, f)| {
            let (kf, df) = linear(f, v)?;
            match (div, k == 0.0, kf == 0.0) {
                (false, true, _) => Some((d * kf, d * df)),
                (false, false, true) => Some((k * df, d * df)),
                (true, _, true) if df != 0.0 => Some((k / df, d / df)),
                _ => None,
            }
        }),
        _ => None,
    }
}

/// The largest absolute integer constant in an index function (scales the valid-range scan).
fn largest_constant(f: &IndexFn) -> i64 {
    match f {
        IndexFn::Var(_) => 1,
        IndexFn::Const(c) => c.saturating_abs(),
        IndexFn::Arith(a, _, b) => largest_constant(a).max(largest_constant(b)),
    }
}

/// Smallest and largest value of a (monotone) index function over the ranges, or `None` if
/// some variable has an empty range.
fn bounds(
    f: &IndexFn,
    range: &[Option<usize>],
    low: &[i64],
    fixed: Option<(VarId, i64)>,
) -> Option<(i64, i64)> {
    if super::interval::needs_intervals(f) {
        return super::interval::interval(f, &|v| match fixed {
            Some((fv, x)) if fv == v => Some((x, x)),
            _ => {
                let r = range.get(v).copied().flatten().unwrap_or(1) as i64;
                let first = low.get(v).copied().unwrap_or(0).max(0);
                (first < r).then_some((first, r - 1))
            }
        });
    }
    let mut vs = Vec::new();
    f.vars(&mut vs);
    vs.sort();
    vs.dedup();
    let mut corners: Vec<Vec<(VarId, i64)>> = vec![Vec::new()];
    for &v in &vs {
        let choices: Vec<i64> = match fixed {
            Some((fv, x)) if fv == v => vec![x],
            _ => {
                let r = range[v].unwrap_or(1) as i64;
                let first = low.get(v).copied().unwrap_or(0).max(0);
                if first >= r {
                    return None;
                }
                if first == r - 1 {
                    vec![first]
                } else {
                    vec![first, r - 1]
                }
            }
        };
        corners = corners
            .into_iter()
            .flat_map(|c| {
                choices.iter().map(move |&x| {
                    let mut c = c.clone();
                    c.push((v, x));
                    c
                })
            })
            .collect();
    }
    let width = vs.iter().max().map(|m| m + 1).unwrap_or(0);
    let mut lo = i64::MAX;
    let mut hi = i64::MIN;
    for c in corners {
        let mut env = vec![0i64; width];
        for (v, x) in c {
            env[v] = x;
        }
        // Division by zero or overflow: no valid position.
        let val = f.eval(&env).unwrap_or(-1);
        lo = lo.min(val);
        hi = hi.max(val);
    }
    Some((lo, hi))
}

/// What [`grow_lhs`] knows of the tensors it writes.
struct Target<'a> {
    /// Whether each domain is symbolic.
    symbolic: &'a [bool],
    /// Whether each tensor's integer axes are indexed by value (`offsets.rs`).
    by_value: &'a [bool],
    /// Each axis's union-find root, which identifies its integer domain.
    roots: &'a [Vec<usize>],
    /// Domains written below their offset, by how much, and the equation.
    below: &'a mut Vec<(usize, i64, Span)>,
    /// The tensors of the component being sized.
    current: &'a [usize],
    /// The smallest position each tensor holds on each axis, `None` where unknown (its
    /// data's smallest, then what its equations write, once its component is sized).
    lows: &'a mut [Vec<Option<i64>>],
    /// Whether each domain is open (§8), and the values each holds where no rule adds to
    /// them.
    open: (&'a [bool], &'a [Bounds]),
    /// Whether the component's own smallest positions so far are left out: at first they
    /// bound its reads (and the sizing goes on while they fall), later only what is fixed
    /// outside it does, so a long countdown is sized at once.
    widen: bool,
    /// The component's axes that no derivation moves ([`stable_axes`]).
    stable: &'a HashSet<(usize, usize)>,
}

/// Grows the target's integer extents to hold every index written; reports writes outside a
/// declared extent, and notes writes below a value-indexed axis's first position. Returns
/// whether anything grew.
fn grow_lhs(
    eq: &Equation,
    tensors: &mut [TensorInfo],
    target: Target,
    ranges: &[usize],
    errors: &mut Vec<Diagnostic>,
) -> bool {
    let symbolic = target.symbolic;
    let t = eq.target;
    let r: Vec<Option<usize>> = ranges.iter().map(|&x| Some(x)).collect();
    // Guards such as `y > 0` keep a write `y - 1` off negative positions, and so does an
    // atom of a rule's body that holds nothing lower (`Down(x - 1) :- Down(x), Temp(x).`).
    let mut low: Vec<i64> = (0..ranges.len()).map(|v| lower_bound(&eq.rhs, v)).collect();
    if tensors[t].kind == Kind::Bool {
        // Until widening, the component's own relations bound their reads by the smallest
        // positions written so far; sizing goes on until those stop falling, when they hold
        // every value a derivation can reach (`F(x, y - 4) :- F(x, y), x < y`).
        // After it, so do their axes that no derivation moves.
        let skipped = |t: usize, ax: usize| {
            target.widen && target.current.contains(&t) && !target.stable.contains(&(t, ax))
        };
        atom_lows(&eq.rhs, tensors, &skipped, target.lows, &mut low);
    }
    // A guard `v > w` keeps `v` above the smallest `w` (`Down(x, y - 1) :- Down(x, y), x < y`).
    for v in 0..low.len() {
        variable_guards(&eq.rhs, v, &mut |side, w, c| {
            let lowest = match eq.vars[w].open {
                Some(d) if target.open.0[d] => match target.open.1.get(d).copied().flatten() {
                    Some((lo, _)) if lo.abs() < 1e15 => lo.ceil() as i64,
                    _ => return,
                },
                _ => low.get(w).copied().unwrap_or(0).max(0),
            };
            if side == Side::From && w != v {
                low[v] = low[v].max(lowest.saturating_add(c));
            }
        });
    }
    let mut changed = false;
    for (ax, f) in eq.lhs.iter().enumerate() {
        if tensors[t].domains.get(ax).is_some_and(|&d| symbolic[d]) {
            continue;
        }
        let Some((lo, hi)) = bounds(f, &r, &low, None) else {
            continue;
        };
        if let Some(l) = target.lows[t].get_mut(ax) {
            changed |= !target.widen && l.is_some_and(|l| lo < l);
            *l = Some(l.map_or(lo, |l| l.min(lo)));
        }
        if lo < 0 && target.by_value[t] {
            if let Some(&root) = target.roots[t].get(ax) {
                target.below.push((root, lo.saturating_neg(), eq.span));
            }
            continue;
        }
        if lo < 0 {
            errors.push(Diagnostic::error(
                codes::OUT_OF_DOMAIN,
                eq.span,
                format!(
                    "this equation writes `{}` at a negative index on axis {}",
                    tensors[t].name,
                    ax + 1
                ),
            ));
            continue;
        }
        let need = (hi as usize).saturating_add(1);
        if need > crate::tensor::MAX_EXTENT {
            errors.push(Diagnostic::error(
                codes::OUT_OF_DOMAIN,
                eq.span,
                format!(
                    "this equation writes `{}` beyond the largest supported position ({})",
                    tensors[t].name,
                    crate::tensor::MAX_EXTENT - 1
                ),
            ));
            continue;
        }
        let have = tensors[t].shape[ax];
        if need > have {
            if let Some(decl) = tensors[t].declared {
                errors.push(
                    Diagnostic::error(codes::OUT_OF_DOMAIN, eq.span, format!("this equation writes `{}` up to index {hi} on axis {}, outside its declared extent {have}", tensors[t].name, ax + 1))
                        .with_secondary(decl, "declared here"),
                );
            } else {
                tensors[t].shape[ax] = need;
                changed = true;
            }
        }
    }
    changed
}

/// Raises `low[v]` to the smallest position a Boolean tensor holds (on an axis not
/// `skipped`) where a factor of a rule's body reads it at bare `v`: a point below it reads
/// false there, so its product writes nothing.
fn atom_lows(
    n: &Node,
    tensors: &[TensorInfo],
    skipped: &dyn Fn(usize, usize) -> bool,
    lows: &[Vec<Option<i64>>],
    low: &mut [i64],
) {
    each_atom_read(n, &mut |tensor, ax, v| {
        if skipped(tensor, ax) || tensors[tensor].kind != Kind::Bool {
            return;
        }
        if let (Some(Some(l)), Some(x)) = (lows[tensor].get(ax), low.get_mut(v)) {
            *x = (*x).max(*l);
        }
    });
}

/// Calls `f(tensor, axis, v)` for each bare variable `v` a factor of a rule's body (not a
/// divisor, not under `not`) reads a tensor at.
fn each_atom_read(n: &Node, f: &mut dyn FnMut(usize, usize, VarId)) {
    match n {
        Node::Sum { body, .. } => each_atom_read(body, f),
        Node::Product(fs) => fs
            .iter()
            .filter(|(div, _)| !div)
            .for_each(|(_, x)| each_atom_read(x.inside_empty_sums(), f)),
        Node::Read {
            tensor,
            index,
            slice: false,
        } => {
            for (ax, i) in index.iter().enumerate() {
                if let IndexFn::Var(v) = i {
                    f(*tensor, ax, *v);
                }
            }
        }
        _ => {}
    }
}

/// The axes of a component's tensors that no derivation moves: every equation of the
/// component writes them with a constant, or with a bare variable its body reads at the
/// same axis of the same tensor or at a tensor outside the component. Their smallest
/// positions are final once each outside write is seen, so they bound reads after
/// widening too (`G(x, y - 4) :- G(x, y), x < y`: `x` stays where `Ceil` put it).
fn stable_axes(st: &Stratum, eqs: &[Lowered]) -> HashSet<(usize, usize)> {
    let mut moved = HashSet::new();
    for &i in &st.equations {
        let eq = &eqs[i].0;
        let mut reads = Vec::new();
        each_atom_read(&eq.rhs, &mut |t, ax, v| reads.push((t, ax, v)));
        for (ax, f) in eq.lhs.iter().enumerate() {
            let kept = match f {
                IndexFn::Const(_) => true,
                IndexFn::Var(v) => reads.iter().any(|&(t, a, w)| {
                    w == *v && ((t, a) == (eq.target, ax) || !st.tensors.contains(&t))
                }),
                IndexFn::Arith(..) => false,
            };
            if !kept {
                moved.insert((eq.target, ax));
            }
        }
    }
    st.equations
        .iter()
        .flat_map(|&i| {
            let eq = &eqs[i].0;
            (0..eq.lhs.len()).map(move |ax| (eq.target, ax))
        })
        .filter(|k| !moved.contains(k))
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::semantics::tests::{checked, error_codes};

    fn range(c: &crate::semantics::Checked, target: &str, var: &str) -> usize {
        let t = c.tensor_id(target).unwrap();
        let eq = c.equations.iter().find(|e| e.target == t).unwrap();
        eq.vars.iter().find(|v| v.name == var).unwrap().range
    }

    #[test]
    fn the_valid_interval_of_shifted_reads_is_what_a_scan_finds() {
        use super::{valid_interval, Valid};
        // Every (k, low, high, extent) pair of reads in a small box (the rest of the read
        // over low..=high), against a scan of 0..limit.
        let limit = 40;
        let reads: Vec<(i64, i64, i64, i64)> = (-3..=3)
            .flat_map(|k| {
                (-8..=8).flat_map(move |c| {
                    [0, 3]
                        .into_iter()
                        .flat_map(move |w| [1, 5, 30].map(|e| (k, c, c + w, e)))
                })
            })
            .collect();
        for (a, b) in reads.iter().zip(reads.iter().rev()) {
            let shifts = [*a, *b];
            let valid: Vec<i64> = (0..limit)
                .filter(|&x| {
                    shifts
                        .iter()
                        .all(|&(k, lo, hi, e)| (lo..=hi).all(|r| (0..e).contains(&(k * x + r))))
                })
                .collect();
            let want = match (valid.first(), valid.last()) {
                (None, _) => Valid::Empty,
                (Some(_), Some(&l)) if l == limit - 1 => Valid::ToTheLimit,
                (Some(_), Some(&l)) => Valid::Below(l + 1),
                _ => unreachable!(),
            };
            let got = valid_interval(&shifts, limit).unwrap();
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "{shifts:?}");
        }
    }

    #[test]
    fn a_variable_only_in_arithmetic_gets_the_valid_range() {
        let c = checked("I = [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]\nF = [[1, 2], [3, 4]]\nO[x, y] = F[dx, dy] I[x + dx, y + dy]\nS = 2\nP[x / S] = O[x, 0]\n");
        assert_eq!(range(&c, "O", "x"), 4);
        let o = c.tensor_id("O").unwrap();
        assert_eq!(c.tensors[o].shape, vec![4, 4]);
        let p = c.tensor_id("P").unwrap();
        assert_eq!(c.tensors[p].shape, vec![2]);
    }

    #[test]
    fn index_recursion_grows_to_the_layers_given() {
        let c = checked("W = [[[1]], [[2]], [[3]]]\nIn = [1]\nX[0, j] = In[j]\nX[i, j] = sig(W[i, j, k] X[i - 1, k])\n");
        let x = c.tensor_id("X").unwrap();
        assert_eq!(c.tensors[x].shape, vec![3, 1]);
    }

    #[test]
    fn hard_axes_must_agree_and_soft_ones_take_the_largest() {
        assert_eq!(
            error_codes("W = [[1, 2, 3]]\nX = [1, 2]\nY[i] = W[i, j] X[j]\n"),
            vec!["E0201"]
        );
        // A relation's integer column that a dense tensor indexes has an extent.
        let c = checked("E(0, 1). E(1, 4).\nF(x) :- E(x, y).\nG(x) :- E(x, y), E(y, z).\nW = [1, 2, 3, 4, 5, 6]\nY[x] = G(x) W[x]\n");
        let f = c.tensor_id("F").unwrap();
        assert_eq!(
            c.tensors[f].shape,
            vec![5],
            "E's axes share a domain through G, so its widest extent"
        );
        // Without one, it is open (§8): no extent at all.
        let c = checked("E(0, 1). E(1, 4).\nF(x) :- E(x, y).\n");
        let f = c.tensor_id("F").unwrap();
        assert_eq!(c.tensors[f].shape, vec![crate::tensor::MAX_EXTENT]);
    }

    #[test]
    fn a_dense_axis_under_not_neither_fixes_nor_conflicts() {
        let c = checked("A = [1, 2, 3, 4, 5]\nB = [1, 0, 1]\nY[i] = A[i] (not B[i])\n");
        assert_eq!(
            range(&c, "Y", "i"),
            5,
            "B's three elements read false past its end"
        );
        let c = checked("B = [1, 0, 1]\nY[i] = not B[i]\n");
        assert_eq!(
            range(&c, "Y", "i"),
            3,
            "with nothing else, the read under not bounds i"
        );
    }

    #[test]
    fn a_recursive_tensor_has_the_shape_of_what_fixes_its_axes() {
        let c = checked(
            "Adj[0, 1] = 1\nAdj[1, 2] = 1\nReach[x, z] = Adj[x, z] + Reach[x, y] Adj[y, z]\n",
        );
        let r = c.tensor_id("Reach").unwrap();
        assert_eq!(
            c.tensors[r].shape,
            vec![2, 3],
            "Adj's shape, before the recursion runs"
        );
        assert_eq!(range(&c, "Reach", "x"), 2);
        let c = checked("W = [[[1]], [[2]], [[3]]]\nIn = [1]\nX[0, j] = In[j]\nX[i, j] = sig(W[i, j, k] X[i - 1, k])\n");
        let x = c.tensor_id("X").unwrap();
        assert_eq!(
            c.tensors[x].shape,
            vec![3, 1],
            "an axis written at i grows as before"
        );
    }
}
