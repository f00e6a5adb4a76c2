//! Loop nests: the kernel for any equation the specialised kernels do not take. Each
//! summation point (§6.2) becomes a [`Scope`]: a nest of loops binding its variables and a
//! compiled expression evaluated at each point. Loops are driven by what can contribute:
//!
//! - a relation or a tensor of defined elements that multiplies the point's value is
//!   *scanned*: its tuples bind the variables it indexes (looked up by the positions already
//!   bound), so points where it is false or undefined are never visited;
//! - a comparison that multiplies it is a *filter*, checked as soon as its variables are
//!   bound; an equality of an unbound variable with a value of bound ones *binds* it
//!   instead ([`Level::Bind`]);
//! - every other variable runs over its range.
//!
//! Work is then proportional to the tuples joined times the ranges of the variables no tuple
//! binds, never to the product of every domain (`E[10⁹, 10⁹] = 1` then `S = E[x, y]` visits
//! one point). Skipping a point where a scanned factor is 0 is exact when the product's other
//! factors are finite numbers (documented in `docs/language.md`), and when no other read of
//! the point could be out of range (such a point would be "nothing", not 0, §5.1); scopes
//! where that cannot be shown loop over ranges and read the factor instead. Under
//! `max=`/`min=` undefined elements make a point nothing (§7), so scanning them is exact.

use super::einsum::affine;
use crate::functions::Structural;
use crate::semantics::{
    Checked, Equation, Family, Func, IndexFn, Kind, Mask, Node, TensorId, VarId,
};
use crate::syntax::ast::{BinOp, CmpOp};

/// A planned loop-nest equation.
#[derive(Clone, Debug, PartialEq)]
pub struct NestEquation {
    /// The equation (index into `Checked::equations`).
    pub equation: usize,
    /// The tensor it defines.
    pub target: TensorId,
    /// Left-hand-side positions, evaluated at each point.
    pub lhs: Vec<IndexFn>,
    /// How values landing on one element combine (§7).
    pub family: Family,
    /// Variables of the equation (the size of a point's environment).
    pub vars: usize,
    /// Scan slots used by all scopes (each scan keeps its current tuple in one).
    pub slots: usize,
    /// A virtual index (§5.2) and its number of steps: the nest runs once per step, in
    /// increasing order, reading the previous step's slice ([`Value::Slice`]).
    pub steps: Option<(VarId, usize)>,
    /// The outermost scope: the left-hand-side variables, with the right-hand side's own
    /// summed variables where their points can be combined into the element directly (every
    /// family but `avg=`, whose mean is taken per left-hand-side point first).
    pub root: Scope,
    /// Where a scan leaves out the zeros of a tensor stored as its non-zeros (not a mask):
    /// what must hold at run time for that to be exact, and the nest to run otherwise.
    pub zeros: Option<Box<SkippedZeros>>,
}

/// The condition under which a nest may leave out the zeros of a tensor that
/// [`super::Plan::sparse`] stores as its non-zeros, and the nest to run where it fails.
#[derive(Clone, Debug, PartialEq)]
pub struct SkippedZeros {
    /// What the data must satisfy.
    pub needs: Needs,
    /// The same equation with every such tensor read at each point rather than scanned.
    pub unscanned: NestEquation,
}

/// Stored zeros are numbers, so the product at a skipped point is 0 only if its other
/// factors are finite there and its divisors are not 0 (0 · inf and 0 / 0 are NaN): the
/// plan cannot know that, the data can.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Needs {
    /// The tensors stored as their non-zeros whose zeros the scans leave out.
    pub skipped: Vec<TensorId>,
    /// Tensors whose values must all be finite: those the other factors read.
    pub finite: Vec<TensorId>,
    /// Divisors that must be 0 nowhere.
    pub nonzero: Vec<TensorId>,
}

impl Needs {
    fn add(&mut self, more: Needs) {
        for t in more.skipped {
            if !self.skipped.contains(&t) {
                self.skipped.push(t);
            }
        }
        for t in more.finite {
            if !self.finite.contains(&t) {
                self.finite.push(t);
            }
        }
        for t in more.nonzero {
            if !self.nonzero.contains(&t) {
                self.nonzero.push(t);
            }
        }
    }
}

/// One summation point: its loops, and the value at each point.
#[derive(Clone, Debug, PartialEq)]
pub struct Scope {
    /// How the points' values combine.
    pub family: Family,
    /// Loops in nesting order.
    pub levels: Vec<Level>,
    /// The value at one point.
    pub body: Value,
    /// Whether a scope none of whose points is visited is worth 0 (its unvisited points were
    /// zeros) rather than nothing.
    pub zero_when_empty: bool,
}

/// One loop of a scope.
#[derive(Clone, Debug, PartialEq)]
pub enum Level {
    /// The tuples of a sparse tensor, looked up by the positions already bound.
    Scan(Scan),
    /// A variable over `0..extent`.
    Range {
        /// The variable.
        var: VarId,
        /// Its extent.
        extent: usize,
    },
    /// A variable of an open domain (§8) over the values its table holds when the loop
    /// starts: the column has no extent.
    Values {
        /// The variable.
        var: VarId,
        /// Its domain, whose table holds the values.
        domain: usize,
    },
    /// A variable bound by an equality with a value of the variables bound before it
    /// (`c = Text[s, p]`): the one position where the comparison holds, the value when it
    /// is a whole number in `0..extent`, and no point otherwise.
    Bind {
        /// The variable.
        var: VarId,
        /// Its extent.
        extent: usize,
        /// What it equals.
        value: Value,
    },
    /// Skips the point unless the value is non-zero.
    Filter(Value),
}

/// A scan of a relation or of a tensor of defined elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Scan {
    /// The tensor scanned.
    pub tensor: TensorId,
    /// Per axis: the variable it binds or checks, or a constant position.
    pub positions: Vec<Position>,
    /// Axes whose positions are known when the scan starts (constants, variables bound
    /// outside): the tuples are looked up by them.
    pub key: Vec<usize>,
    /// The slot holding the current tuple (its value is [`Value::Scanned`]).
    pub slot: usize,
}

/// A position `c + Σ k·v`: the coefficients of its variables and its constant.
pub(crate) type Affine = (Vec<(VarId, i64)>, i64);

/// One position of a scan.
#[derive(Clone, Debug, PartialEq)]
pub enum Position {
    /// A variable: bound by the first axis that has it, checked by the others.
    Var(VarId),
    /// A constant position.
    Const(i64),
    /// Index arithmetic over variables bound outside the scope (`Obs(t + 1, o)` at a step
    /// of `t`): known when the scan starts, so the tuples are looked up by it.
    Known(IndexFn),
    /// A variable plus a constant (`Fib(n - 1, y)` once values are positions): binds the
    /// variable to the tuple's position less `by` where that falls in `0..range`. With `by`
    /// 0 it is a variable whose range ends before the tensor's axis does.
    Shifted {
        /// The variable.
        var: VarId,
        /// What the position adds to it.
        by: i64,
        /// The variable's range.
        range: usize,
    },
}

/// A factor (not yet placed) equating `v` with a value of variables already bound (or not
/// the scope's), as `(factor, that value)`: `v` then takes the value instead of running over
/// its range to be compared with it at every point.
fn binding<'n>(
    factors: &[(bool, &'n Node)],
    placed: &[usize],
    v: VarId,
    vars: &[VarId],
    bound: &[VarId],
) -> Option<(usize, &'n Node)> {
    factors.iter().enumerate().find_map(|(k, &(div, f))| {
        let Node::Compare(CmpOp::Eq, a, b) = f else {
            return None;
        };
        if div || placed.contains(&k) {
            return None;
        }
        let other = match (a.inside_empty_sums(), b.inside_empty_sums()) {
            (Node::Var(x), other) | (other, Node::Var(x)) if *x == v => other,
            _ => return None,
        };
        let mut used = Vec::new();
        other.mentioned_vars(&mut used);
        let known = used
            .iter()
            .all(|u| *u != v && (bound.contains(u) || !vars.contains(u)));
        known.then_some((k, other))
    })
}

/// The variable of `rest` to loop over next, in order, except that with equalities to bind
/// (`equal`): one an equality binds now first, and one an equality could bind once others
/// are bound last (`n = Out[x] + m` binds `n` after `m` rather than ranging over both).
fn next_var(
    rest: &[VarId],
    factors: &[(bool, &Node)],
    vars: &[VarId],
    equal: bool,
    placed: &Placed,
) -> Option<VarId> {
    let first = *rest.first()?;
    if !equal {
        return Some(first);
    }
    let bindable =
        |v: VarId, bound: &[VarId]| binding(factors, &placed.filters, v, vars, bound).is_some();
    if let Some(&v) = rest.iter().find(|&&v| bindable(v, &placed.bound)) {
        return Some(v);
    }
    // Bindable once every other variable is bound.
    let later = |v: VarId| {
        let others: Vec<VarId> = vars.iter().copied().filter(|&u| u != v).collect();
        bindable(v, &others)
    };
    Some(rest.iter().copied().find(|&v| !later(v)).unwrap_or(first))
}

/// `f` as a variable plus a constant, if it is one.
fn shifted(f: &IndexFn) -> Option<(VarId, i64)> {
    match super::einsum::affine(f)? {
        (coefs, c) if coefs.len() == 1 && coefs[0].1 == 1 => Some((coefs[0].0, c)),
        _ => None,
    }
}

/// A compiled right-hand-side expression, evaluated at one point; `None` is "nothing" (§5.1).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A number.
    Const(f64),
    /// A variable's position.
    Var(VarId),
    /// An element of a tensor; `total` reads out-of-range and undefined elements as 0
    /// (under `not`, §6.5), otherwise out-of-range reads are nothing, and so are undefined
    /// ones under `max=`/`min=` (`relational`).
    Read {
        /// The tensor.
        tensor: TensorId,
        /// Its positions.
        index: Vec<IndexFn>,
        /// The positions as `c + Σ k·v` when they all are (most reads): evaluated without
        /// walking the expressions.
        affine: Option<Vec<Affine>>,
        /// Read under `not`.
        total: bool,
        /// Undefined elements are nothing.
        relational: bool,
    },
    /// The value of the tuple a scan is at (1 for a relation).
    Scanned(usize),
    /// An element of the previous step's slice of a virtual index (`X[j, *t]`).
    Slice {
        /// Its positions (the virtual axis left out).
        index: Vec<IndexFn>,
        /// Read under `not`.
        total: bool,
        /// Undefined elements are nothing.
        relational: bool,
    },
    /// A nested summation point.
    Sum(Box<Scope>),
    /// `-x`.
    Neg(Box<Value>),
    /// `1 - x`.
    Not(Box<Value>),
    /// Factors, each multiplied, divided by or a mask, left to right.
    Product(Vec<(By, Value)>),
    /// `+`, `-`, `^`.
    Binary(BinOp, Box<Value>, Box<Value>),
    /// A comparison: 1 or 0.
    Compare(CmpOp, Box<Value>, Box<Value>),
    /// An elementwise function.
    Call(Func, Vec<Value>),
    /// `softmax`/`lnorm` over a variable's range, the argument evaluated along it.
    Normalize(Structural, VarId, usize, Box<Value>),
    /// `concat`: `out`'s position sets the flattened `parts` (variable, extent), outermost
    /// first (§6.4).
    Concat(VarId, Vec<(VarId, usize)>, Box<Value>),
}

/// How a factor enters a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// Multiplied.
    Times,
    /// Divided by.
    Over,
    /// Multiplied, and where it is 0 the product is 0 whatever the others are (a relation's
    /// atom, a comparison: [`Mask::False`]).
    Mask,
    /// Multiplied, and where its element is undefined the product is 0 whatever the others
    /// are (a tensor of defined elements: [`Mask::Undefined`]).
    Defined,
}

impl By {
    fn of(p: &Checked, div: bool, factor: &Node) -> By {
        match (div, p.mask(factor)) {
            (true, _) => By::Over,
            (false, Some(Mask::False)) => By::Mask,
            (false, Some(Mask::Undefined)) => By::Defined,
            (false, None) => By::Times,
        }
    }
}

/// Plans an equation as a loop nest (every equation has one). `sparse` marks the tensors
/// stored as their non-zero elements ([`super::Plan::sparse`]), which a sum may scan.
pub(crate) fn plan_nest(p: &Checked, e: usize, sparse: &[bool]) -> NestEquation {
    let original = &p.equations[e];
    // Over the valid intervals of shifted reads (§5.1), more reads are known to stay inside
    // their tensors, so more points may be skipped. A virtual index steps over its whole
    // range (the reference's order), so its equations are taken as written.
    let restricted = match original.virtual_var {
        None => super::valid::restricted(p, original),
        Some(_) => None,
    };
    plan_bound(
        p,
        e,
        restricted.as_deref().unwrap_or(original),
        None,
        sparse,
    )
}

/// The loop nest of equation `e` as `eq` gives it, with the left-hand-side variable `bound`
/// (if any) set outside the nest: one step of an index recursion (`plan::steps`).
pub(super) fn plan_bound(
    p: &Checked,
    e: usize,
    eq: &Equation,
    bound: Option<VarId>,
    sparse: &[bool],
) -> NestEquation {
    let mut cx = Compiler {
        p,
        eq,
        slots: 0,
        family: eq.family,
        sparse,
        zeros: None,
    };
    let target = &p.tensors[eq.target];
    // Points may be skipped at the root when an element nobody writes is the same as one
    // written 0: a dense sum (it starts at 0), or a Boolean head (0 is false).
    let skip_at_root = match eq.family {
        Family::Sum => target.kind == Kind::Bool || !target.sparse_values,
        Family::Max | Family::Min => true,
        Family::Avg => false,
    };
    let mut vars: Vec<VarId> = eq
        .loop_vars
        .iter()
        .copied()
        .filter(|&v| Some(v) != bound)
        .collect();
    let body = if eq.family == Family::Avg {
        &eq.rhs
    } else {
        merged(&eq.rhs, &mut vars)
    };
    let skip = match skip_at_root {
        false => Skip::Never,
        true if eq.family == Family::Sum && target.kind == Kind::Bool => Skip::Relation,
        true => Skip::WhereDefined,
    };
    let root = cx.scope(&vars, body, eq.family, skip, false);
    // Planned without any stored zeros to skip, the alternative needs no condition.
    let zeros = cx.zeros.map(|needs| {
        Box::new(SkippedZeros {
            needs,
            unscanned: plan_bound(p, e, eq, bound, &[]),
        })
    });
    NestEquation {
        equation: e,
        target: eq.target,
        lhs: eq.lhs.clone(),
        family: eq.family,
        vars: eq.vars.len(),
        slots: cx.slots,
        steps: eq.virtual_var.map(|v| (v, eq.vars[v].range)),
        root,
        zeros,
    }
}

/// A comparison of a join rule's body whose operands compute values (`W[x, y] > 0.5`,
/// `x < y + 1`) compiled for evaluation at each assignment of the join
/// ([`super::datalog::Rule::checks`]): no summation, no slice, no normalisation, and no read
/// of a tensor in `own` (the stratum's, which change as the join runs). Its value is 1 or
/// 0, or nothing where a read leaves its tensor (the assignment is then not counted, as a
/// sum drops nothing-points).
pub(crate) fn check(p: &Checked, e: usize, n: &Node, own: &[TensorId]) -> Option<Value> {
    let compares = match n {
        Node::Compare(..) => true,
        Node::Not(x) => matches!(x.inside_empty_sums(), Node::Compare(..)),
        _ => false,
    };
    compares.then(|| computed(p, e, n, own))?
}

/// A value of equation `e` computed from the variables of one assignment and tensors of
/// lower strata (not `own`), as [`check`] compiles a comparison: a value binding's value
/// (`n = Kids[x]`). `None` where it reads the stratum's own tensors.
pub(crate) fn computed(p: &Checked, e: usize, n: &Node, own: &[TensorId]) -> Option<Value> {
    fn simple(n: &Node, own: &[TensorId]) -> bool {
        match n {
            Node::Read { tensor, slice, .. } => !slice && !own.contains(tensor),
            Node::Sum { vars, body } => vars.is_empty() && simple(body, own),
            Node::Normalize(..) | Node::Concat { .. } => false,
            _ => n.children().into_iter().all(|c| simple(c, own)),
        }
    }
    if !simple(n, own) {
        return None;
    }
    let eq = &p.equations[e];
    let mut cx = Compiler {
        p,
        eq,
        slots: 0,
        family: Family::Sum,
        sparse: &[],
        zeros: None,
    };
    Some(cx.value(n, false))
}

struct Compiler<'a> {
    p: &'a Checked,
    eq: &'a Equation,
    slots: usize,
    family: Family,
    sparse: &'a [bool],
    /// What the scans of stored zeros placed so far need ([`SkippedZeros`]).
    zeros: Option<Needs>,
}

/// Whether points of a scope may be left out when a scanned factor or a filter is 0.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Skip {
    /// No: every point is written (an element written 0 differs from one not written).
    Never,
    /// Where no other factor can be nothing at the point (the value would then differ).
    WhereDefined,
    /// Always: the root of a rule, where a point that is nothing writes nothing, as a
    /// skipped 0 does (`Fib(n - 1, y)` at `n = 0`).
    Relation,
}

/// What a scope has placed so far: its levels, the variables they bind, the factors
/// scanned (with their slots) and those placed as filters.
#[derive(Default)]
struct Placed {
    levels: Vec<Level>,
    bound: Vec<VarId>,
    scanned: Vec<(usize, usize)>,
    filters: Vec<usize>,
}

impl Compiler<'_> {
    /// A scope over `vars` (bound in it, not outside) whose points are worth `body`.
    /// `skip` says whether points may be left out where a scanned factor or a filter is 0;
    /// `total` whether the body is under `not`.
    fn scope(
        &mut self,
        vars: &[VarId],
        body: &Node,
        family: Family,
        skip: Skip,
        total: bool,
    ) -> Scope {
        // The factors of the point's value, in order; only multiplied ones may be scanned or
        // filter.
        let factors: Vec<(bool, &Node)> = match body.inside_empty_sums() {
            Node::Product(fs) => fs
                .iter()
                .map(|(div, f)| (*div, f.inside_empty_sums()))
                .collect(),
            other => vec![(false, other)],
        };
        let relational = matches!(family, Family::Max | Family::Min);
        // Skipping is exact when no other factor can be nothing at a skipped point.
        let whole = self.always_defined(body);
        let may_skip = skip != Skip::Never
            && !total
            && (relational || (family == Family::Sum && (whole || skip == Skip::Relation)));
        let mut placed = Placed::default();
        if may_skip {
            self.place_scans(&factors, vars, family, &mut placed);
        }
        let equal = may_skip && family == Family::Sum;
        let mut rest: Vec<VarId> = vars
            .iter()
            .copied()
            .filter(|v| !placed.bound.contains(v))
            .collect();
        while let Some(v) = next_var(&rest, &factors, vars, equal, &placed) {
            rest.retain(|&u| u != v);
            self.place_var(v, &factors, vars, (family, may_skip), &mut placed);
        }
        // Scanned factors read their tuple's value; filters that passed are worth 1 and drop
        // out of the product. The others keep their order, so the arithmetic is the
        // reference's.
        let mut rest: Vec<(By, Value)> = Vec::with_capacity(factors.len());
        for (k, &(div, f)) in factors.iter().enumerate() {
            if placed.filters.contains(&k) {
                continue;
            }
            // A scanned factor is at a tuple: defined, and true.
            rest.push(match placed.scanned.iter().find(|(s, _)| *s == k) {
                Some(&(_, slot)) => (By::Times, Value::Scanned(slot)),
                None => (By::of(self.p, div, f), self.value(f, total)),
            });
        }
        let body = match rest.as_slice() {
            [(By::Times | By::Mask | By::Defined, _)] => {
                rest.pop().map(|(_, v)| v).unwrap_or(Value::Const(1.0))
            }
            [] => Value::Const(1.0),
            _ => Value::Product(rest),
        };
        let empty_range = vars.iter().any(|&v| self.eq.vars[v].range == 0);
        Scope {
            family,
            levels: placed.levels,
            body,
            zero_when_empty: family == Family::Sum && whole && !empty_range,
        }
    }

    /// A level for variable `v`, which no scan binds: where a factor equates it with a
    /// value of variables already bound (in a skipping sum), it takes that value;
    /// otherwise it runs over its range (or an open column's values).
    fn place_var(
        &mut self,
        v: VarId,
        factors: &[(bool, &Node)],
        vars: &[VarId],
        (family, may_skip): (Family, bool),
        placed: &mut Placed,
    ) {
        let extent = self.eq.vars[v].range;
        let equal = may_skip && family == Family::Sum;
        let binding = equal.then(|| binding(factors, &placed.filters, v, vars, &placed.bound));
        placed.bound.push(v);
        match binding.flatten() {
            Some((k, other)) => {
                placed.filters.push(k);
                let value = self.value(other, false);
                placed.levels.push(Level::Bind {
                    var: v,
                    extent,
                    value,
                });
            }
            None => match self.eq.vars[v].open {
                Some(domain) => placed.levels.push(Level::Values { var: v, domain }),
                None => placed.levels.push(Level::Range { var: v, extent }),
            },
        }
        if may_skip {
            self.place_filters(factors, vars, family, placed);
        }
    }

    /// Scans of the scannable factors, most positions known first, each followed by the
    /// filters its variables complete.
    fn place_scans(
        &mut self,
        factors: &[(bool, &Node)],
        vars: &[VarId],
        family: Family,
        placed: &mut Placed,
    ) {
        let scannable: Vec<usize> = (0..factors.len())
            .filter(|&k| !factors[k].0 && self.scannable(factors[k].1, vars))
            .collect();
        let mut candidates: Vec<usize> = scannable
            .into_iter()
            .filter(|&k| self.zeros_skippable(factors, k))
            .collect();
        while !candidates.is_empty() {
            // The most positions known first, then the smallest, then source order.
            let pick = candidates
                .iter()
                .copied()
                .min_by_key(|&k| {
                    let Node::Read { tensor, index, .. } = factors[k].1 else {
                        return (0, usize::MAX, k);
                    };
                    let known = index
                        .iter()
                        .filter(|f| match f {
                            IndexFn::Var(v) => placed.bound.contains(v) || !vars.contains(v),
                            _ => true,
                        })
                        .count();
                    (index.len() - known, self.size(*tensor), k)
                })
                .unwrap_or(candidates[0]);
            candidates.retain(|&k| k != pick);
            let Node::Read { tensor, index, .. } = factors[pick].1 else {
                continue;
            };
            let scan = self.scan_of(*tensor, index, vars, &placed.bound);
            for p in &scan.positions {
                if let Position::Var(v) | Position::Shifted { var: v, .. } = p {
                    if !placed.bound.contains(v) {
                        placed.bound.push(*v);
                    }
                }
            }
            let slot = scan.slot;
            placed.scanned.push((pick, slot));
            placed.levels.push(Level::Scan(scan));
            // Filters whose variables are now all bound go right after the scan.
            self.place_filters(factors, vars, family, placed);
        }
    }

    /// The scan of `tensor` at `index`: each position a variable it binds, one it checks
    /// against the variable's range, a constant or a position known when it starts (then a
    /// key of its lookup).
    fn scan_of(
        &mut self,
        tensor: TensorId,
        index: &[IndexFn],
        vars: &[VarId],
        bound: &[VarId],
    ) -> Scan {
        let slot = self.slots;
        self.slots += 1;
        let mut scan = Scan {
            tensor,
            positions: Vec::new(),
            key: Vec::new(),
            slot,
        };
        for (ax, f) in index.iter().enumerate() {
            let unbound = |v: &VarId| !bound.contains(v) && vars.contains(v);
            let range = |v: &VarId| self.eq.vars[*v].range;
            let past = |v: &VarId| {
                self.p.tensors[tensor]
                    .shape
                    .get(ax)
                    .is_some_and(|&n| n > range(v))
            };
            let pos = match f {
                // A tuple past the variable's range (fixed by a dense axis, §5.1) is
                // no point of the equation: the variable is bound checked.
                IndexFn::Var(v) if unbound(v) && past(v) => Position::Shifted {
                    var: *v,
                    by: 0,
                    range: range(v),
                },
                IndexFn::Var(v) => Position::Var(*v),
                IndexFn::Const(c) => Position::Const(*c),
                IndexFn::Arith(..) => match shifted(f) {
                    Some((var, by)) if unbound(&var) => Position::Shifted {
                        var,
                        by,
                        range: self.eq.vars[var].range,
                    },
                    _ => Position::Known(f.clone()),
                },
            };
            let known = match pos {
                Position::Var(v) => !unbound(&v),
                Position::Shifted { .. } => false,
                Position::Const(_) | Position::Known(_) => true,
            };
            if known {
                scan.key.push(ax);
            }
            scan.positions.push(pos);
        }
        scan
    }

    /// Adds as filters the comparison factors (not yet placed) whose variables are bound.
    fn place_filters(
        &mut self,
        factors: &[(bool, &Node)],
        vars: &[VarId],
        family: Family,
        placed: &mut Placed,
    ) {
        if family != Family::Sum {
            return;
        }
        for (k, &(div, f)) in factors.iter().enumerate() {
            if div || placed.filters.contains(&k) || !matches!(f, Node::Compare(..)) {
                continue;
            }
            let mut used = Vec::new();
            f.mentioned_vars(&mut used);
            if used
                .iter()
                .all(|v| placed.bound.contains(v) || !vars.contains(v))
            {
                placed.filters.push(k);
                placed.levels.push(Level::Filter(self.value(f, false)));
            }
        }
    }

    /// Whether factor `k` may be scanned as far as its zeros go: always for a mask (a
    /// relation, a tensor of defined elements); for a tensor stored as its non-zeros, where
    /// every other factor is finite and every divisor nonzero given conditions on the data,
    /// which the nest then needs ([`SkippedZeros`]).
    fn zeros_skippable(&mut self, factors: &[(bool, &Node)], k: usize) -> bool {
        let Node::Read { tensor, .. } = factors[k].1 else {
            return true;
        };
        if self.p.masks(*tensor) {
            return true;
        }
        let mut needs = Needs {
            skipped: vec![*tensor],
            ..Needs::default()
        };
        let finite = factors
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != k)
            .all(|(_, &(div, f))| self.finite_where(f, div, &mut needs));
        if finite {
            self.zeros.get_or_insert_with(Needs::default).add(needs);
        }
        finite
    }

    /// Whether `n` (a divisor when `div`) is a finite number, and as a divisor not 0, at
    /// every point, given what it adds to `needs` of the data: reads, sums, `+`, `-`,
    /// products, integer powers and functions finite on finite arguments (`relu`, `tanh`,
    /// `sin`…) are; `exp`, `log`, `sqrt`, `/` by a computed value and user functions may
    /// not be (a sum of finite numbers may still overflow: that is left as it is).
    fn finite_where(&self, n: &Node, div: bool, needs: &mut Needs) -> bool {
        use crate::functions::Builtin;
        let n = n.inside_empty_sums();
        if div {
            return match n {
                Node::Const(c) => c.value() != 0.0 && c.value().is_finite(),
                Node::Read {
                    tensor,
                    slice: false,
                    ..
                } => {
                    needs.finite.push(*tensor);
                    needs.nonzero.push(*tensor);
                    true
                }
                _ => false,
            };
        }
        let nonzero_const =
            |b: &Node| matches!(b, Node::Const(c) if c.value() != 0.0 && c.value().is_finite());
        match n {
            Node::Const(c) => c.value().is_finite(),
            Node::Var(_) | Node::Compare(..) => true,
            Node::Read { slice: true, .. } => false,
            Node::Read { tensor, .. } => {
                if self.p.tensors[*tensor].kind != Kind::Bool {
                    needs.finite.push(*tensor);
                }
                true
            }
            Node::Sum { body, .. } | Node::Neg(body) | Node::Not(body) => {
                self.finite_where(body, false, needs)
            }
            Node::Concat { arg, .. } => self.finite_where(arg, false, needs),
            Node::Product(fs) => fs.iter().all(|(d, f)| self.finite_where(f, *d, needs)),
            Node::Binary(BinOp::Add | BinOp::Sub, a, b) => {
                self.finite_where(a, false, needs) && self.finite_where(b, false, needs)
            }
            Node::Binary(BinOp::Pow, a, b) => {
                let whole = matches!(b.inside_empty_sums(), Node::Const(c) if c.value() >= 0.0 && c.value().fract() == 0.0);
                whole && self.finite_where(a, false, needs)
            }
            Node::Binary(BinOp::Rem | BinOp::Quot, a, b) => {
                nonzero_const(b.inside_empty_sums()) && self.finite_where(a, false, needs)
            }
            Node::Call(Func::Builtin(f), args) => {
                let total = match f {
                    Builtin::Sig => args.len() == 1,
                    Builtin::Exp | Builtin::Log | Builtin::Sqrt => false,
                    _ => true,
                };
                total && args.iter().all(|a| self.finite_where(a, false, needs))
            }
            Node::Call(Func::User(_), _) | Node::Normalize(..) => false,
        }
    }

    /// Whether a factor is a read of a sparse tensor at plain positions that binds at least
    /// one of `vars`.
    fn scannable(&self, f: &Node, vars: &[VarId]) -> bool {
        let Node::Read {
            tensor,
            index,
            slice: false,
        } = f
        else {
            return false;
        };
        let info = &self.p.tensors[*tensor];
        // A tensor stored as its non-zeros has defined zeros elsewhere: skipping them is
        // exact in a sum only.
        let stored_sparse = self.sparse.get(*tensor) == Some(&true) && self.family == Family::Sum;
        let sparse = info.kind == Kind::Bool || info.sparse_values || stored_sparse;
        let outside = |f: &IndexFn| {
            let mut used = Vec::new();
            f.vars(&mut used);
            used.iter().all(|v| !vars.contains(v))
        };
        let plain = index.iter().all(|f| match f {
            IndexFn::Var(_) | IndexFn::Const(_) => true,
            IndexFn::Arith(..) => outside(f) || shifted(f).is_some(),
        });
        let binds = index.iter().any(|f| match f {
            IndexFn::Var(v) => vars.contains(v),
            IndexFn::Arith(..) => shifted(f).is_some_and(|(v, _)| vars.contains(&v)),
            IndexFn::Const(_) => false,
        });
        sparse && plain && binds && !index.is_empty()
    }

    /// The number of tuples a scan of `t` is expected to meet: its data's, or its dense size.
    fn size(&self, t: TensorId) -> usize {
        use crate::tensor::Storage;
        match self.p.data[t].as_ref().map(|d| &d.storage) {
            Some(Storage::Relation(r)) => r.len(),
            Some(Storage::Sparse(s)) => s.len(),
            _ => self.p.tensors[t]
                .shape
                .iter()
                .fold(1usize, |a, &n| a.saturating_mul(n)),
        }
    }

    /// Whether no point of `n` can be nothing: every read stays inside its tensor for all
    /// values of the variables, and under `max=`/`min=` no read is of a sparse tensor.
    fn always_defined(&self, n: &Node) -> bool {
        match n {
            // A slice is the target's shape without the virtual axis, which its index leaves
            // out too.
            Node::Read { tensor, index, .. } => {
                let info = &self.p.tensors[*tensor];
                let sparse = info.kind == Kind::Bool || info.sparse_values;
                let relational = matches!(self.family, Family::Max | Family::Min);
                !(relational && sparse) && self.inside(index, &info.shape)
            }
            Node::Not(_) => true,
            // An integer `%` or `//` is nothing where it divides by 0.
            Node::Binary(op, a, b)
                if crate::semantics::divides_integers(*op, (a, b), &|t| self.p.tensors[t].kind) =>
            {
                false
            }
            // A summation point over an empty range is nothing.
            Node::Sum { vars, .. } if vars.iter().any(|&v| self.eq.vars[v].range == 0) => false,
            _ => n.children().into_iter().all(|c| self.always_defined(c)),
        }
    }

    /// Whether positions stay inside `shape` for every value of their variables.
    fn inside(&self, index: &[IndexFn], shape: &[usize]) -> bool {
        index.iter().zip(shape).all(|(f, &n)| {
            let Some((coefs, c)) = affine(f) else {
                return false;
            };
            let (mut lo, mut hi) = (c, c);
            for (v, k) in coefs {
                let last = self.eq.vars[v].range as i64 - 1;
                if last < 0 {
                    return true;
                }
                if k < 0 {
                    lo += k * last;
                } else {
                    hi += k * last;
                }
            }
            lo >= 0 && hi < n as i64
        })
    }

    /// Whether a read of `tensor` at `index` meets an open column (§8): an open axis, or a
    /// variable of an open domain inside index arithmetic.
    fn reads_values(&self, tensor: TensorId, index: &[IndexFn]) -> bool {
        let open_axis = self.p.tensors[tensor]
            .domains
            .iter()
            .any(|&d| self.p.domains[d].is_open());
        let mut vars = Vec::new();
        index.iter().for_each(|f| f.vars(&mut vars));
        open_axis || vars.iter().any(|&v| self.eq.vars[v].open.is_some())
    }

    /// Compiles a node; `total` under `not`.
    fn value(&mut self, n: &Node, total: bool) -> Value {
        if let Some(k) = super::constants::value(self.p, n) {
            return Value::Const(k);
        }
        let sub = |c: &mut Self, x: &Node| c.value(x, total);
        match n {
            Node::Const(k) => Value::Const(k.value()),
            Node::Var(v) => Value::Var(*v),
            Node::Read {
                index, slice: true, ..
            } => Value::Slice {
                index: index.clone(),
                total,
                relational: matches!(self.family, Family::Max | Family::Min),
            },
            Node::Read { tensor, index, .. } => Value::Read {
                tensor: *tensor,
                index: index.clone(),
                // Positions at open axes are values to look up, not offsets to add.
                affine: match self.reads_values(*tensor, index) {
                    true => None,
                    false => index.iter().map(affine).collect(),
                },
                total,
                relational: matches!(self.family, Family::Max | Family::Min),
            },
            Node::Sum { vars, body } if vars.is_empty() => sub(self, body),
            Node::Sum { .. } => {
                let mut vars = Vec::new();
                let body = match self.family {
                    Family::Avg => match n {
                        Node::Sum { vars: v, body } => {
                            vars.clone_from(v);
                            body.as_ref()
                        }
                        _ => n,
                    },
                    _ => merged(n, &mut vars),
                };
                Value::Sum(Box::new(self.scope(
                    &vars,
                    body,
                    self.family,
                    Skip::WhereDefined,
                    total,
                )))
            }
            Node::Neg(x) => Value::Neg(Box::new(sub(self, x))),
            Node::Not(x) => Value::Not(Box::new(self.value(x, true))),
            Node::Product(fs) => Value::Product(
                fs.iter()
                    .map(|(div, f)| (By::of(self.p, *div, f), self.value(f, total)))
                    .collect(),
            ),
            Node::Binary(op, a, b) => {
                Value::Binary(*op, Box::new(sub(self, a)), Box::new(sub(self, b)))
            }
            Node::Compare(op, a, b) => {
                Value::Compare(*op, Box::new(sub(self, a)), Box::new(sub(self, b)))
            }
            Node::Call(f, args) => Value::Call(
                f.clone(),
                args.iter().map(|a| self.value(a, total)).collect(),
            ),
            Node::Normalize(kind, v, x) => Value::Normalize(
                *kind,
                *v,
                self.eq.vars[*v].range,
                Box::new(self.value(x, total)),
            ),
            Node::Concat { out, parts, arg } => Value::Concat(
                *out,
                parts.iter().map(|&v| (v, self.eq.vars[v].range)).collect(),
                Box::new(self.value(arg, total)),
            ),
        }
    }
}

impl Value {
    /// Adds the tensors the value reads (scanned or looked up) to `out`.
    pub fn tensors(&self, out: &mut Vec<TensorId>) {
        match self {
            Value::Read { tensor, .. } => out.push(*tensor),
            Value::Sum(s) => {
                for l in &s.levels {
                    match l {
                        Level::Scan(scan) => out.push(scan.tensor),
                        Level::Filter(v) | Level::Bind { value: v, .. } => v.tensors(out),
                        Level::Range { .. } | Level::Values { .. } => {}
                    }
                }
                s.body.tensors(out);
            }
            Value::Neg(x)
            | Value::Not(x)
            | Value::Normalize(_, _, _, x)
            | Value::Concat(_, _, x) => x.tensors(out),
            Value::Product(fs) => fs.iter().for_each(|(_, f)| f.tensors(out)),
            Value::Binary(_, a, b) | Value::Compare(_, a, b) => {
                a.tensors(out);
                b.tensors(out);
            }
            Value::Call(_, args) => args.iter().for_each(|a| a.tensors(out)),
            Value::Const(_) | Value::Var(_) | Value::Slice { .. } | Value::Scanned(_) => {}
        }
    }
}

impl NestEquation {
    /// Whether the outermost loop scans tuples: the points visited follow the tuples of a
    /// sparse tensor, so the result has at most as many non-zero elements as they allow.
    pub fn driven(&self) -> bool {
        matches!(self.root.levels.first(), Some(Level::Scan(_)))
    }

    /// The points the nest is expected to visit, counting nested scopes at each point of
    /// theirs: a scan meets its data's tuples (or, for a tensor computed here, its dense
    /// size), divided by the extents of the positions it looks up; a range its extent.
    pub fn points(&self, p: &Checked) -> f64 {
        scope_points(p, &self.root)
    }
}

fn scope_points(p: &Checked, s: &Scope) -> f64 {
    use crate::tensor::Storage;
    let mut points = 1.0f64;
    for l in &s.levels {
        match l {
            Level::Range { extent, .. } => points *= *extent as f64,
            Level::Values { domain, .. } => {
                points *= p.domains[*domain].table.as_ref().map_or(1, |t| t.len()) as f64;
            }
            Level::Scan(scan) => {
                let info = &p.tensors[scan.tensor];
                let size = match p.data[scan.tensor].as_ref().map(|d| &d.storage) {
                    Some(Storage::Relation(r)) => r.len() as f64,
                    Some(Storage::Sparse(s)) => s.len() as f64,
                    _ => info.shape.iter().map(|&n| n as f64).product(),
                };
                let known: f64 = scan
                    .key
                    .iter()
                    .map(|&ax| info.shape.get(ax).copied().unwrap_or(1) as f64)
                    .product();
                points *= (size / known.max(1.0)).max(1.0);
            }
            Level::Filter(_) | Level::Bind { .. } => {}
        }
    }
    points * (1.0 + value_points(p, &s.body))
}

/// The points of the scopes nested in a value, per evaluation of it.
fn value_points(p: &Checked, v: &Value) -> f64 {
    match v {
        Value::Sum(s) => scope_points(p, s),
        Value::Neg(x) | Value::Not(x) | Value::Concat(_, _, x) => value_points(p, x),
        Value::Normalize(_, _, n, x) => *n as f64 * (1.0 + value_points(p, x)),
        Value::Product(fs) => fs.iter().map(|(_, f)| value_points(p, f)).sum(),
        Value::Binary(_, a, b) | Value::Compare(_, a, b) => value_points(p, a) + value_points(p, b),
        Value::Call(_, args) => args.iter().map(|a| value_points(p, a)).sum(),
        Value::Const(_)
        | Value::Var(_)
        | Value::Read { .. }
        | Value::Slice { .. }
        | Value::Scanned(_) => 0.0,
    }
}

/// The body of a chain of directly nested summation points, their variables added to
/// `vars`: `Σ_z (Σ_w x)` is one summation over z and w (max of maxes is the max, a sum of
/// sums the sum). Not for `avg=`, whose mean of means differs.
fn merged<'n>(n: &'n Node, vars: &mut Vec<VarId>) -> &'n Node {
    match n {
        Node::Sum { vars: summed, body } => {
            for &v in summed {
                if !vars.contains(&v) {
                    vars.push(v);
                }
            }
            merged(body, vars)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    fn nest(src: &str, target: &str) -> NestEquation {
        let c = checked(src);
        let t = c.tensor_id(target).unwrap();
        let e = c.equations.iter().position(|e| e.target == t).unwrap();
        plan_nest(&c, e, &[])
    }

    #[test]
    fn an_equality_binds_its_variable_after_those_it_reads() {
        let n = nest(
            "Text : int[W, 5]\nText[0, 0] = 1\nTok : bool[W, P, C]\nC : 3\nP : 4\nW : 2\n\
             Tok(s, p, c) :- c = Text[s, p + 0].\n",
            "Tok",
        );
        assert!(
            matches!(
                n.root.levels.as_slice(),
                [
                    Level::Range { .. },
                    Level::Range { .. },
                    Level::Bind {
                        var: 2,
                        extent: 3,
                        ..
                    }
                ]
            ),
            "{:?}",
            n.root.levels
        );
    }

    #[test]
    fn a_variable_an_equality_can_bind_is_looped_over_last() {
        // `n` comes first in the head, but `n = Out[x] + m` binds it once `m` is known.
        let c = checked(
            "Edge(1, 2). Edge(0, 2).\nNode(x) :- Edge(x, _).\nOut[x] = Edge(x, z)\n\
             Reach(0, 0).\nReach(x, n) :- Node(x), Reach(y, m) (y + x), n = Out[x] + m, n < 8.\n",
        );
        let t = c.tensor_id("Reach").unwrap();
        let e = c.equations.iter().position(|e| e.target == t).unwrap();
        let n = plan_nest(&c, e, &[]);
        let var = |name: &str| c.equations[e].vars.iter().position(|v| v.name == name);
        let levels = n.root.levels.as_slice();
        assert!(
            matches!(
                levels,
                [Level::Scan(_), Level::Range { var: m, .. }, Level::Bind { var: b, .. }, ..]
                    if Some(*m) == var("m") && Some(*b) == var("n")
            ),
            "{levels:?}"
        );
    }

    #[test]
    fn sparse_factors_drive_and_comparisons_filter() {
        let n = nest(
            "Held(A, R, B). Person(A). Person(B).\nS[r, x, y] = x + y + r\n\
             Better[x, r, y] = Held(x, r, y) Person(z) (S[r, x, z] > S[r, x, y])\n",
            "Better",
        );
        let kinds: Vec<&str> = n
            .root
            .levels
            .iter()
            .map(|l| match l {
                Level::Scan(_) => "scan",
                Level::Range { .. } | Level::Values { .. } => "range",
                Level::Bind { .. } => "bind",
                Level::Filter(_) => "filter",
            })
            .collect();
        assert_eq!(kinds, vec!["scan", "scan", "filter"]);
    }

    #[test]
    fn huge_element_facts_are_scanned() {
        let n = nest("E[1000000000, 1000000000] = 1\nS = E[x, y]\n", "S");
        assert!(matches!(n.root.levels.as_slice(), [Level::Scan(_)]));
    }

    #[test]
    fn a_rule_reading_itself_at_a_shifted_value_scans_both_reads() {
        // `Fib(n - 1, y)` may be out of range at the smallest `n`; a rule's point that is
        // nothing writes nothing, as a skipped 0 does, so both reads are scanned.
        let n = nest(
            "Fib(0, 0). Fib(1, 1).\nFib(n + 1, x + y) :- Fib(n, x), Fib(n - 1, y), n < 30.\n",
            "Fib",
        );
        let scans = n
            .root
            .levels
            .iter()
            .filter(|l| matches!(l, Level::Scan(_)))
            .count();
        assert_eq!(scans, 2, "{:?}", n.root.levels);
        assert!(!n
            .root
            .levels
            .iter()
            .any(|l| matches!(l, Level::Range { .. })));
    }

    #[test]
    fn points_that_could_be_nothing_are_not_skipped() {
        // `X[i / 2]` is not shown to stay inside X, so a zero of R cannot stand for the
        // point's value (it could be nothing).
        let n = nest("R(0). R(2).\nX = [1, 2, 3]\nY = R(i) X[i / 2]\n", "Y");
        assert!(
            !n.root.levels.iter().any(|l| matches!(l, Level::Scan(_))),
            "{:?}",
            n.root.levels
        );
    }
}
