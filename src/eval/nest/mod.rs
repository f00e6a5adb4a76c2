//! Executes loop nests (`plan::nest`): each scope's loops in order — scans over sorted
//! tuples (a binary search when the known positions lead the tuple, a sorted index on them
//! otherwise), ranges, filters — and the compiled expression at each point.
//!
//! Values at one point go through the reference evaluator's f64 operations in the same
//! order; what differs is which points are visited (only those that can contribute) and,
//! for sums, the order in which points are added.

mod rows;

use super::accumulate::Accumulator;
use super::fixpoint;
use super::EvalOptions;
use crate::diagnostics::Diagnostics;
use crate::eval::open::{place, At, Open, OpenVars};
use crate::eval::scalar::{element_at, Element};
use crate::eval::scalar::{Exact, Scalar};
use crate::functions::Builtin;
use crate::plan::nest::{By, Level, Needs, NestEquation, Position, Scan, Scope, Value};
use crate::semantics::{Checked, Family, Func, IndexFn, Stratum};
use crate::syntax::ast::{BinOp, Num};
use crate::tensor::{Relation, Storage, Tensor, ValueTable};

/// Evaluates a stratum of loop-nest equations in place: once, or, when it is recursive,
/// iterated from its current values until nothing changes (§9), as the reference does.
///
/// Tensors that `sparse` marks (`plan::Plan::sparse`) are accumulated and stored as their
/// non-zero elements. Returns why any equation read stored zeros at every point rather than
/// scanning past them (in the last round of a recursion), for the decision log.
pub(super) fn evaluate_stratum(
    p: &Checked,
    st: &Stratum,
    (plans, sparse): (&[NestEquation], &[bool]),
    values: &mut [Tensor],
    o: &EvalOptions,
) -> Result<Option<String>, Diagnostics> {
    let read_zeros = |values: &[Tensor]| {
        let why: Vec<String> = plans
            .iter()
            .filter_map(|n| unskipped(p, n, values))
            .collect();
        (!why.is_empty()).then(|| why.join("; "))
    };
    if !st.recursive {
        let why = read_zeros(values);
        for &t in &st.tensors {
            let acc = match sparse.get(t) {
                Some(true) => Accumulator::entries(&p.tensors[t]),
                _ => Accumulator::new(&p.tensors[t]),
            };
            values[t] = compute(p, t, plans, values, o, acc)?;
        }
        return Ok(why);
    }
    let mut why = None;
    fixpoint::jacobi(p, st, values, o, |_, values| {
        why = read_zeros(values);
        st.tensors
            .iter()
            .map(|&t| compute(p, t, plans, values, o, Accumulator::new(&p.tensors[t])))
            .collect()
    })?;
    Ok(why)
}

/// One tensor's value: its data combined with every equation's contributions in `acc`.
fn compute(
    p: &Checked,
    t: usize,
    plans: &[NestEquation],
    values: &[Tensor],
    o: &EvalOptions,
    acc: Accumulator,
) -> Result<Tensor, Diagnostics> {
    let info = &p.tensors[t];
    let mut acc = acc.within(values, o.max_memory);
    if let Some(d) = &p.data[t] {
        acc.combine_tensor(d);
    }
    for n in plans.iter().filter(|n| n.target == t) {
        run_equation(p, n, values, o, &mut acc)?;
    }
    match acc.outgrew(info, o.max_memory) {
        Some(d) => Err(d.into()),
        None => Ok(acc.finish(info)),
    }
}

/// Adds every point's value of one equation to `acc` at its left-hand-side position; with
/// a virtual index, each step's points make the next slice from the last (starting from the
/// data), and the final slice is added (§5.2, as the reference steps).
fn run_equation(
    p: &Checked,
    n: &NestEquation,
    values: &[Tensor],
    o: &EvalOptions,
    acc: &mut Accumulator,
) -> Result<(), Diagnostics> {
    let n = exact(n, values);
    // A tensor the plan expected as defined elements may have been stored dense (a
    // `max=` tensor every element of which was written): its scans then follow all of its
    // elements.
    let mut scans = Vec::new();
    collect_scans(&n.root, &mut scans);
    let dense: Vec<usize> = scans
        .iter()
        .map(|s| s.tensor)
        .filter(|&t| tuples(&values[t]).is_none())
        .collect();
    let as_tuples: Vec<Tensor>;
    let values = match dense.is_empty() {
        true => values,
        false => {
            as_tuples = values
                .iter()
                .enumerate()
                .map(|(t, v)| match dense.contains(&t) {
                    true => every_element(v),
                    false => v.clone(),
                })
                .collect();
            &as_tuples
        }
    };
    let indexes = Indexes::build(n, values);
    let mut env = vec![0i64; n.vars];
    let open = Open::of(p);
    let vars = OpenVars::of(p, &p.equations[n.equation]);
    let open_nest = open.as_ref().map(|open| OpenNest {
        open,
        vars: vars.tables(),
        equation: n.equation,
    });
    let Some((var, steps)) = n.steps else {
        let cx = Cx {
            values,
            o,
            indexes: &indexes,
            slice: None,
            open: open_nest,
        };
        cx.run_into(n, &mut env, (&p.tensors[n.target], acc))?;
        return match open.as_ref().and_then(|o| o.overflow()) {
            Some(d) => Err(d.into()),
            None => Ok(()),
        };
    };
    let info = &p.tensors[n.target];
    let mut slice = match &p.data[n.target] {
        Some(d) => d.clone(),
        None => super::initial::empty(info, o)?,
    };
    for step in 0..steps {
        env[var] = step as i64;
        let mut next = Accumulator::new(info).within(values, o.max_memory);
        let cx = Cx {
            values,
            o,
            indexes: &indexes,
            slice: Some(&slice),
            open: open_nest,
        };
        cx.run_into(n, &mut env, (info, &mut next))?;
        if let Some(d) = next.outgrew(info, o.max_memory) {
            return Err(d.into());
        }
        slice = next.finish(info);
    }
    acc.combine_tensor(&slice);
    Ok(())
}

/// Calls `f` with the left-hand-side position and value of every point of an equation
/// without a virtual index, the variable `bound` set outside the nest (one step of an index
/// recursion, `eval::steps`).
pub(super) fn contributions<S: Scalar>(
    n: &NestEquation,
    values: &[Tensor],
    o: &EvalOptions,
    bound: Option<(usize, i64)>,
    f: &mut dyn FnMut(&[usize], S),
) {
    let n = exact(n, values);
    let indexes = Indexes::build(n, values);
    // Index recursion runs over dense axes, which open columns never are.
    let cx = Cx {
        values,
        o,
        indexes: &indexes,
        slice: None,
        open: None,
    };
    let mut env = vec![0i64; n.vars];
    if let Some((v, x)) = bound {
        env[v] = x;
    }
    cx.run::<S>(n, &mut env, f);
}

/// The nest that computes `n` exactly from these values: `n`, or, where it would leave out
/// the zeros of a tensor stored as its non-zeros beside an infinite or NaN factor or a zero
/// divisor ([`crate::plan::nest::SkippedZeros`]), the one that reads them.
fn exact<'n>(n: &'n NestEquation, values: &[Tensor]) -> &'n NestEquation {
    match &n.zeros {
        Some(z) if !holds(&z.needs, values) => &z.unscanned,
        _ => n,
    }
}

/// Whether the data meet what skipping stored zeros needs.
fn holds(needs: &Needs, values: &[Tensor]) -> bool {
    needs.finite.iter().all(|&t| values[t].finite())
        && needs.nonzero.iter().all(|&t| values[t].nowhere_zero())
}

/// Why `n` reads stored zeros at every point rather than scanning past them, if it does.
fn unskipped(p: &Checked, n: &NestEquation, values: &[Tensor]) -> Option<String> {
    let needs = &n.zeros.as_ref()?.needs;
    let names = |ts: &[usize]| {
        let names: Vec<String> = ts
            .iter()
            .map(|&t| format!("`{}`", p.tensors[t].name))
            .collect();
        names.join(", ")
    };
    let infinite = needs.finite.iter().find(|&&t| !values[t].finite());
    let why = match infinite {
        Some(&t) => format!(
            "{} holds an infinity or NaN (0 times it is NaN)",
            names(&[t])
        ),
        None => {
            let &zero = needs.nonzero.iter().find(|&&t| !values[t].nowhere_zero())?;
            format!("the divisor {} holds a 0 (0 / 0 is NaN)", names(&[zero]))
        }
    };
    Some(format!(
        "{} read at every point, stored zeros included: {why}",
        names(&needs.skipped)
    ))
}

/// What a nest reads: the values, options, per scan a way to find its tuples, and the
/// previous slice of a virtual index.
pub(super) struct Cx<'a> {
    values: &'a [Tensor],
    o: &'a EvalOptions,
    indexes: &'a Indexes,
    slice: Option<&'a Tensor>,
    /// The program's open columns, where it has any.
    open: Option<OpenNest<'a>>,
}

/// Open columns (§8) as a nest meets them: a variable of an open domain holds its *value*
/// at a point, so arithmetic, comparisons and values need nothing more; at an open axis a
/// scan or a read looks the value's handle up, and a write numbers it.
#[derive(Clone, Copy)]
struct OpenNest<'a> {
    open: &'a Open<'a>,
    /// The table of each variable of the equation that holds values of an open domain.
    vars: &'a [Option<&'a ValueTable>],
    /// The equation, named by an overflow.
    equation: usize,
}

impl<'a> OpenNest<'a> {
    fn var(&self, v: usize) -> Option<&'a ValueTable> {
        self.vars.get(v).copied().flatten()
    }

    /// The tables of `t`'s axes, where any is open.
    fn axes(&self, t: usize) -> Option<Vec<Option<&'a ValueTable>>> {
        self.open.touches(t).then(|| {
            let rank = self.open.rank(t);
            (0..rank).map(|ax| self.open.axis(t, ax)).collect()
        })
    }
}

/// The tuples a scan meets, as indices into the scanned tensor's ascending tuples.
type PointFn<'f> = dyn FnMut(&Cx, &mut [i64], &mut [usize]) + 'f;

impl Cx<'_> {
    /// Calls `f` with the left-hand-side position and value of every point of the equation,
    /// computed in `S` (rows, which compute in f64, only for f64).
    fn run<S: Scalar>(&self, n: &NestEquation, env: &mut [i64], f: &mut dyn FnMut(&[usize], S)) {
        let mut slots = vec![0usize; n.slots];
        let mut idx = vec![0usize; n.lhs.len()];
        let root = &n.root;
        let lhs = |env: &[i64], idx: &mut [usize]| {
            for (slot, f) in idx.iter_mut().zip(&n.lhs) {
                match f.eval(env) {
                    Some(i) if i >= 0 => *slot = i as usize,
                    _ => return false,
                }
            }
            true
        };
        if let Some(axes) = self.open.and_then(|o| o.axes(n.target)) {
            // Only relations have open axes: their values are 0 or 1.
            return self.run_open(n, &axes, env, &mut |idx, v| f(idx, S::of_real(v)));
        }
        if let Some((r, along)) = row_level(root).filter(|_| !S::EXACT) {
            let moves = n.lhs.iter().any(|f| {
                let mut vs = Vec::new();
                f.vars(&mut vs);
                vs.contains(&along.var)
            });
            // Left-hand-side positions along the row: the first's, plus j times a step.
            let affine: Option<Vec<crate::plan::nest::Affine>> =
                n.lhs.iter().map(crate::plan::einsum::affine).collect();
            let steps: Option<Vec<i64>> = affine.as_ref().map(|a| {
                a.iter()
                    .map(|(coefs, _)| {
                        coefs
                            .iter()
                            .filter(|(v, _)| *v == along.var)
                            .map(|(_, k)| k)
                            .sum()
                    })
                    .collect()
            });
            let end = root.levels.len();
            let mut first = vec![0i64; n.lhs.len()];
            self.points(root, (0, r), env, &mut slots, &mut |cx, env, slots| {
                let (body, keep) = cx.row(root, (r + 1, end), env, slots, along);
                if !moves && !lhs(env, &mut idx) {
                    return;
                }
                if let (true, Some(steps)) = (moves, &steps) {
                    env[along.var] = 0;
                    for (slot, f) in first.iter_mut().zip(&n.lhs) {
                        *slot = f.eval(env).unwrap_or(-1);
                    }
                    for j in (0..along.n).filter(|&j| keep[j] && body.defined[j]) {
                        let inside =
                            idx.iter_mut()
                                .zip(first.iter().zip(steps))
                                .all(|(slot, (&a, &k))| {
                                    let at = a + k * j as i64;
                                    *slot = at.max(0) as usize;
                                    at >= 0
                                });
                        if inside {
                            f(&idx, S::of_real(body.values[j]));
                        }
                    }
                    return;
                }
                for j in (0..along.n).filter(|&j| keep[j] && body.defined[j]) {
                    env[along.var] = j as i64;
                    if moves && !lhs(env, &mut idx) {
                        continue;
                    }
                    f(&idx, S::of_real(body.values[j]));
                }
            });
            return;
        }
        let end = root.levels.len();
        self.points(root, (0, end), env, &mut slots, &mut |cx, env, slots| {
            let Some(v) = cx.value::<S>(&root.body, env, slots) else {
                return;
            };
            if lhs(env, &mut idx) {
                f(&idx, v);
            }
        });
    }

    /// [`Cx::run`] into an accumulator: an `int` tensor's values exactly, with E0406 where
    /// one is no i64.
    fn run_into(
        &self,
        n: &NestEquation,
        env: &mut [i64],
        (info, acc): (&crate::semantics::TensorInfo, &mut Accumulator),
    ) -> Result<(), Diagnostics> {
        if info.elem != crate::tensor::ElemType::Int {
            self.run::<f64>(n, env, &mut |idx, v| acc.combine(idx, v));
            return Ok(());
        }
        let mut overflowed = false;
        self.run::<Exact>(n, env, &mut |idx, v| match v.0 {
            Some(v) => acc.combine_int(idx, v),
            None => overflowed = true,
        });
        match overflowed {
            true => Err(super::accumulate::overflow(info).into()),
            false => Ok(()),
        }
    }

    /// [`Cx::run`] for an equation writing open axes (`axes`, §8): each point's value is
    /// written at the handles of its values, numbered where new; a point that writes 0 (a
    /// false body: only relations have open axes) numbers nothing.
    fn run_open(
        &self,
        n: &NestEquation,
        axes: &[Option<&ValueTable>],
        env: &mut [i64],
        f: &mut dyn FnMut(&[usize], f64),
    ) {
        let mut slots = vec![0usize; n.slots];
        let mut idx = vec![0usize; n.lhs.len()];
        let root = &n.root;
        let end = root.levels.len();
        self.points(root, (0, end), env, &mut slots, &mut |cx, env, slots| {
            let Some(v) = cx.eval(&root.body, env, slots) else {
                return;
            };
            for (ax, (slot, f)) in idx.iter_mut().zip(&n.lhs).enumerate() {
                let table = axes.get(ax).copied().flatten();
                // Open variables hold their values here: every index is a value.
                match place(f.checked(env), table, v != 0.0) {
                    At::Pos(i) if i >= 0 => *slot = i as usize,
                    At::Overflow if v != 0.0 => {
                        if let Some(o) = cx.open {
                            o.open.note_overflow(o.equation);
                        }
                        return;
                    }
                    _ => return,
                }
            }
            f(&idx, v);
        });
    }

    /// The body of `scope` along a row, and which of its elements pass the filters of
    /// levels `from..to` (those after the row's range).
    fn row(
        &self,
        scope: &Scope,
        (from, to): (usize, usize),
        env: &mut [i64],
        slots: &mut [usize],
        along: rows::Along,
    ) -> (rows::Row, Vec<bool>) {
        let mut keep = vec![true; along.n];
        for l in &scope.levels[from..to] {
            if let Level::Filter(v) = l {
                let r = self.eval_row(v, env, slots, along);
                for (k, (&x, &d)) in keep.iter_mut().zip(r.values.iter().zip(&r.defined)) {
                    *k &= d && x != 0.0;
                }
            }
        }
        (self.eval_row(&scope.body, env, slots, along), keep)
    }

    /// Calls `f` at every point of the loops `level..end` of `scope` (those after `end`
    /// are the caller's).
    fn points(
        &self,
        scope: &Scope,
        (level, end): (usize, usize),
        env: &mut [i64],
        slots: &mut [usize],
        f: &mut PointFn,
    ) {
        if level >= end {
            return f(self, env, slots);
        }
        let Some(l) = scope.levels.get(level) else {
            return f(self, env, slots);
        };
        match l {
            Level::Range { var, extent } => {
                for x in 0..*extent {
                    env[*var] = x as i64;
                    self.points(scope, (level + 1, end), env, slots, f);
                }
            }
            Level::Filter(v) => {
                if self.eval(v, env, slots).is_some_and(|x| x != 0.0) {
                    self.points(scope, (level + 1, end), env, slots, f);
                }
            }
            Level::Values { var, domain } => {
                let Some(table) = self.open.and_then(|o| o.open.domain(Some(*domain))) else {
                    return;
                };
                for h in 0..table.len() as u32 {
                    env[*var] = table.value(h);
                    self.points(scope, (level + 1, end), env, slots, f);
                }
            }
            Level::Bind { var, extent, value } => {
                // The position `var = value` holds at, as a range and a filter would find;
                // an open variable holds any whole value.
                let open = self.open.and_then(|o| o.var(*var)).is_some();
                let x = self.eval(value, env, slots);
                let fits = |x: &f64| {
                    x.fract() == 0.0
                        && (open && x.abs() < 9.0e18 || *x >= 0.0 && *x < *extent as f64)
                };
                if let Some(x) = x.filter(fits) {
                    env[*var] = x as i64;
                    self.points(scope, (level + 1, end), env, slots, f);
                }
            }
            Level::Scan(s) => {
                let Some(tuples) = tuples(&self.values[s.tensor]) else {
                    return;
                };
                let axes = self.open.and_then(|o| o.axes(s.tensor));
                let table = |ax: usize| axes.as_ref().and_then(|a| a.get(ax).copied().flatten());
                let mut key = Vec::with_capacity(s.key.len());
                for &ax in &s.key {
                    match known(&s.positions[ax], env, table(ax)) {
                        Some(k) => key.push(k),
                        None => return,
                    }
                }
                let (order, lo, hi) = self.indexes.rows(s, tuples, &key);
                for i in lo..hi {
                    let row = order.map_or(i, |o| o[i] as usize);
                    let tuple = tuples.tuple(row);
                    if bind(s, tuple, env, &table) {
                        slots[s.slot] = row;
                        self.points(scope, (level + 1, end), env, slots, f);
                    }
                }
            }
        }
    }

    /// The value at one point; `None` is nothing.
    pub(super) fn eval(&self, v: &Value, env: &mut [i64], slots: &mut [usize]) -> Option<f64> {
        self.value(v, env, slots)
    }

    /// The element a read or a slice finds (`None` for anything else, or a slice the step
    /// has not made yet).
    fn element<S: Scalar>(&self, v: &Value, env: &[i64]) -> Option<Element<S>> {
        match v {
            Value::Read {
                tensor,
                affine: Some(at),
                ..
            } if at.len() <= MAX_AFFINE_RANK => {
                let t = &self.values[*tensor];
                Some(read_affine(t, self.indexes.bitmap(*tensor), at, env))
            }
            Value::Read { tensor, index, .. } => match self.open.and_then(|o| o.axes(*tensor)) {
                Some(axes) => Some(read_open(&self.values[*tensor], index, env, &axes)),
                None => Some(element_at(&self.values[*tensor], index, env)),
            },
            Value::Slice { index, .. } => Some(element_at(self.slice?, index, env)),
            _ => None,
        }
    }

    /// Whether a read masks its product at the point: its element is undefined, and an
    /// undefined element is not nothing there (`max=`/`min=`, outside `not`).
    fn undefined(&self, f: &Value, env: &[i64]) -> bool {
        match f {
            Value::Read {
                total, relational, ..
            }
            | Value::Slice {
                total, relational, ..
            } if *total || !*relational => {
                matches!(self.element::<f64>(f, env), Some(Element::Undefined))
            }
            _ => false,
        }
    }

    /// [`Cx::eval`] in `S`: f64, or exactly for an `int` tensor ([`crate::eval::scalar`]).
    fn value<S: Scalar>(&self, v: &Value, env: &mut [i64], slots: &mut [usize]) -> Option<S> {
        match v {
            Value::Const(k) => Some(S::constant(*k)),
            Value::Var(x) => Some(S::var(env[*x])),
            Value::Read {
                total, relational, ..
            }
            | Value::Slice {
                total, relational, ..
            } => self.element(v, env)?.resolve(*total, *relational),
            Value::Scanned(slot) => {
                let row = slots.get(*slot).copied()?;
                Some(row_value(self.values, self.indexes.scanned(*slot), row))
            }
            Value::Sum(scope) => self.sum::<S>(scope, env, slots),
            Value::Neg(x) => self.value::<S>(x, env, slots).map(S::neg),
            Value::Not(x) => self.value::<S>(x, env, slots).map(S::not),
            Value::Product(fs) => {
                let mut acc = S::truth(true);
                let (mut skip, mut masked) = (false, false);
                for (by, f) in fs {
                    if *by == By::Defined && self.undefined(f, env) {
                        masked = true;
                        continue;
                    }
                    match self.value::<S>(f, env, slots) {
                        Some(x) => {
                            masked |= *by == By::Mask && x.real() == 0.0;
                            acc = acc.mul(x, *by == By::Over);
                        }
                        None => skip = true,
                    }
                }
                // A mask at 0 makes the product 0, as the reference's does.
                (!skip).then_some(if masked { S::truth(false) } else { acc })
            }
            Value::Binary(op, a, b) => {
                let (x, y) = (
                    self.value::<S>(a, env, slots),
                    self.value::<S>(b, env, slots),
                );
                let (x, y) = (x?, y?);
                // An integer `%` or `//` by 0 is nothing, as the reference's is.
                if y.real() == 0.0 && self.divides_integers(*op, a, b) {
                    return None;
                }
                x.binary(*op, y)
            }
            Value::Compare(op, a, b) => {
                // Variables and constants compare exactly, as integers where they are.
                let leaf = |v: &Value| match v {
                    Value::Var(x) => Some(Num::Int(env[*x])),
                    Value::Const(c) => Some(Num::of(*c)),
                    _ => None,
                };
                if let (Some(x), Some(y)) = (leaf(a), leaf(b)) {
                    return Some(S::truth(op.holds_num(x, y)));
                }
                // An integer equation may compare reals: those compare in f64.
                if S::EXACT && !(self.integral(a) && self.integral(b)) {
                    let (a, b) = (self.eval(a, env, slots), self.eval(b, env, slots));
                    return Some(S::truth(op.holds(a?, b?)));
                }
                let (a, b) = (
                    self.value::<S>(a, env, slots),
                    self.value::<S>(b, env, slots),
                );
                Some(a?.compare(*op, b?))
            }
            Value::Call(f, args) => {
                let mut xs = Vec::with_capacity(args.len());
                let mut skip = false;
                for a in args {
                    match self.value::<S>(a, env, slots) {
                        Some(x) => xs.push(x),
                        None => skip = true,
                    }
                }
                if skip {
                    return None;
                }
                match f {
                    Func::Builtin(b) => Some(S::builtin(*b, &xs)),
                    Func::User(name) => self
                        .o
                        .functions
                        .get(name)
                        .map(|uf| S::of_real((uf.f)(xs.first().map_or(0.0, |x| x.real())))),
                }
            }
            Value::Normalize(kind, var, range, arg) => {
                let here = env[*var];
                let mut row = Vec::with_capacity(*range);
                for q in 0..*range {
                    env[*var] = q as i64;
                    row.push(self.eval(arg, env, slots));
                }
                env[*var] = here;
                let x = row.get(usize::try_from(here).ok()?).copied().flatten()?;
                let defined: Vec<f64> = row.into_iter().flatten().collect();
                Some(S::of_real(
                    crate::functions::RowStats::of(*kind, &defined).apply(x),
                ))
            }
            Value::Concat(out, parts, arg) => {
                let mut rest = env[*out];
                for &(part, range) in parts.iter().rev() {
                    let r = range.max(1) as i64;
                    env[part] = rest % r;
                    rest /= r;
                }
                self.value::<S>(arg, env, slots)
            }
        }
    }

    /// Whether `a op b` divides integers ([`crate::semantics::divides_integers`]).
    pub(super) fn divides_integers(&self, op: BinOp, a: &Value, b: &Value) -> bool {
        matches!(op, BinOp::Rem | BinOp::Quot) && self.integral(a) && self.integral(b)
    }

    /// Whether a value computes an integer (no real read, constant or operation), so an
    /// integer equation compares it exactly.
    fn integral(&self, v: &Value) -> bool {
        match v {
            Value::Const(c) => Num::of(*c).as_int().is_some(),
            Value::Var(_) | Value::Compare(..) => true,
            Value::Read { tensor, .. } => self.values[*tensor].elem.is_integral(),
            Value::Slice { .. } => self.slice.is_some_and(|t| t.elem.is_integral()),
            Value::Scanned(slot) => self
                .indexes
                .scanned(*slot)
                .is_none_or(|t| self.values[t].elem.is_integral()),
            Value::Sum(scope) => self.integral(&scope.body),
            Value::Neg(x) | Value::Not(x) | Value::Concat(_, _, x) => self.integral(x),
            Value::Product(fs) => fs.iter().all(|(by, f)| *by != By::Over && self.integral(f)),
            Value::Binary(op, a, b) => *op != BinOp::Pow && self.integral(a) && self.integral(b),
            Value::Call(Func::Builtin(b), args) => {
                matches!(
                    b,
                    Builtin::Step | Builtin::Relu | Builtin::Abs | Builtin::Max | Builtin::Min
                ) && args.iter().all(|a| self.integral(a))
            }
            Value::Call(Func::User(_), _) | Value::Normalize(..) => false,
        }
    }

    /// A nested summation point: its points' values combined by its family, in loop order.
    fn sum<S: Scalar>(&self, scope: &Scope, env: &mut [i64], slots: &mut [usize]) -> Option<S> {
        let mut acc: Option<S> = None;
        let mut count = 0usize;
        let family = scope.family;
        let mut add = |x: S| {
            count += 1;
            acc = Some(match acc {
                None => x,
                Some(a) => a.fold(family, x),
            });
        };
        let end = scope.levels.len();
        match row_level(scope).filter(|_| !S::EXACT) {
            Some((r, along)) => {
                self.points(scope, (0, r), env, slots, &mut |cx, env, slots| {
                    let (body, keep) = cx.row(scope, (r + 1, end), env, slots, along);
                    for j in (0..along.n).filter(|&j| keep[j] && body.defined[j]) {
                        add(S::of_real(body.values[j]));
                    }
                });
            }
            None => self.points(scope, (0, end), env, slots, &mut |cx, env, slots| {
                if let Some(x) = cx.value::<S>(&scope.body, env, slots) {
                    add(x);
                }
            }),
        }
        match (acc, family) {
            (None, _) if scope.zero_when_empty => Some(S::truth(false)),
            (Some(a), Family::Avg) => Some(S::of_real(a.real() / count as f64)),
            (acc, _) => acc,
        }
    }
}

/// Rows are worth evaluating whole from this many elements on.
const ROW_MIN: usize = 8;

/// A scope's innermost range, when only filters follow it and it is long enough: its level
/// and the row it runs.
fn row_level(scope: &Scope) -> Option<(usize, rows::Along)> {
    let r = scope
        .levels
        .iter()
        .rposition(|l| !matches!(l, Level::Filter(_)))?;
    match scope.levels[r] {
        Level::Range { var, extent } if extent >= ROW_MIN => {
            Some((r, rows::Along { var, n: extent }))
        }
        _ => None,
    }
}

/// The value of tuple `row` of `t`: its element's value, or 1 for a relation.
pub(super) fn row_value<S: Scalar>(values: &[Tensor], t: Option<usize>, row: usize) -> S {
    match t.and_then(|t| values.get(t)).map(|t| &t.storage) {
        Some(Storage::Sparse(s)) => S::row(s, row).unwrap_or(S::truth(false)),
        _ => S::truth(true),
    }
}

/// [`element_at`] of a tensor with open axes (`axes`, §8): an index there is a value (open
/// variables hold theirs at a point), looked up in the axis's table; a value the table
/// lacks is in no tuple.
fn read_open<S: Scalar>(
    t: &Tensor,
    index: &[IndexFn],
    env: &[i64],
    axes: &[Option<&ValueTable>],
) -> Element<S> {
    let mut key = Vec::with_capacity(index.len());
    let mut absent = false;
    for (ax, (f, &n)) in index.iter().zip(&t.shape).enumerate() {
        let table = axes.get(ax).copied().flatten();
        match place(f.checked(env), table, false) {
            At::Pos(i) if i >= 0 && (table.is_some() || (i as u64) < n as u64) => {
                key.push(i as u32)
            }
            At::Absent => absent = true,
            _ => return Element::Outside,
        }
    }
    match (!absent).then(|| S::read(t, &key)).flatten() {
        Some(v) => Element::Defined(v),
        None => Element::Undefined,
    }
}

/// Reads of tensors up to this rank take [`read_affine`] (their key fits on the stack).
pub(super) const MAX_AFFINE_RANK: usize = 8;

/// [`read`] for positions given as `c + Σ k·v`; a relation with a bitmap of its tuples is
/// looked up in it.
pub(super) fn read_affine<S: Scalar>(
    t: &Tensor,
    bits: Option<&[u64]>,
    at: &[crate::plan::nest::Affine],
    env: &[i64],
) -> Element<S> {
    let mut offset = 0usize;
    let mut key = [0u32; MAX_AFFINE_RANK];
    for (ax, ((coefs, c), &n)) in at.iter().zip(&t.shape).enumerate() {
        let mut i = *c;
        for &(v, k) in coefs {
            i += env[v] * k;
        }
        if i < 0 || i as u64 >= n as u64 {
            return Element::Outside;
        }
        offset = offset * n + i as usize;
        key[ax] = i as u32;
    }
    let value = match (&t.storage, bits) {
        (Storage::Dense(d), _) => S::dense(d, offset),
        (Storage::Relation(_), Some(bits)) => {
            let set = bits
                .get(offset / 64)
                .is_some_and(|w| w >> (offset % 64) & 1 == 1);
            set.then_some(S::truth(true))
        }
        _ => S::read(t, &key[..at.len()]),
    };
    value.map_or(Element::Undefined, Element::Defined)
}

/// A dense tensor as defined elements, every one of them.
fn every_element(t: &Tensor) -> Tensor {
    let mut keys = Vec::new();
    let mut vals = Vec::new();
    for (idx, v) in t.entries() {
        keys.extend(idx.iter().map(|&i| i as u32));
        vals.push(v);
    }
    Tensor::of_sparse(
        t.elem,
        t.shape.clone(),
        crate::tensor::Sparse::from_entries(t.rank(), keys, vals),
    )
}

/// The tuples of a sparse tensor, or `None` for a dense one (nothing to scan).
fn tuples(t: &Tensor) -> Option<&Relation> {
    match &t.storage {
        Storage::Relation(r) => Some(r),
        Storage::Sparse(s) => Some(s.positions()),
        Storage::Dense(_) => None,
    }
}

/// A known position's value, `None` when it is negative (no tuple has it); at an open axis
/// (`table`, §8) the handle of the value, `None` when the table lacks it.
fn known(pos: &Position, env: &[i64], table: Option<&ValueTable>) -> Option<u32> {
    let v = match pos {
        Position::Var(x) => env[*x],
        Position::Shifted { var, by, .. } => env[*var].checked_add(*by)?,
        Position::Const(c) => *c,
        Position::Known(f) => f.eval(env)?,
    };
    match table {
        Some(t) => t.handle(v),
        None => u32::try_from(v).ok(),
    }
}

/// Binds the scan's unbound variables from `tuple`, checking repeated ones; `false` when a
/// repeat disagrees. Key positions were matched by the lookup. At an open axis (`table`)
/// the tuple holds a handle, and the variable takes its value.
fn bind<'t>(
    s: &Scan,
    tuple: &[u32],
    env: &mut [i64],
    table: &dyn Fn(usize) -> Option<&'t ValueTable>,
) -> bool {
    for (ax, pos) in s.positions.iter().enumerate() {
        if s.key.contains(&ax) {
            continue;
        }
        let (v, by) = match pos {
            Position::Var(v) => (*v, 0),
            Position::Shifted { var, by, .. } => (*var, *by),
            Position::Const(_) | Position::Known(_) => continue,
        };
        let open = table(ax);
        let Some(value) = open
            .map_or(i64::from(tuple[ax]), |t| t.value(tuple[ax]))
            .checked_sub(by)
        else {
            return false;
        };
        // A variable unknown when the scan starts is bound by its first axis.
        let first = !s.positions[..ax].iter().enumerate().any(|(a, q)| {
            !s.key.contains(&a)
                && matches!(q, Position::Var(w) | Position::Shifted { var: w, .. } if *w == v)
        });
        if first {
            if let (Position::Shifted { range, .. }, None) = (pos, open) {
                if value < 0 || value >= *range as i64 {
                    return false;
                }
            }
            env[v] = value;
        } else if env[v] != value {
            return false;
        }
    }
    true
}

/// Evaluates the value checks of join rules (`plan::datalog::Rule::checks`) against the
/// tensors of lower strata, with the loop nests' expression evaluator.
#[derive(Clone, Copy)]
pub(in crate::eval) struct Checker<'a> {
    /// Every tensor's value (those the checks read are final).
    pub values: &'a [Tensor],
    /// Where user functions come from.
    pub o: &'a EvalOptions,
    /// The program's open columns (§8), if it has any.
    pub open: Option<&'a crate::eval::open::Open<'a>>,
}

/// A checker reads no scanned tuples and no bitmaps.
static NO_INDEXES: Indexes = Indexes {
    by_slot: Vec::new(),
    bitmaps: Vec::new(),
};

impl Checker<'_> {
    /// Whether every check holds at the assignment whose first positions are the
    /// variables' (a check that is nothing does not hold); `tables` gives the open
    /// variables, which stand for their values.
    pub(in crate::eval) fn holds(
        &self,
        checks: &[Value],
        env: &[u32],
        tables: &[Option<&crate::tensor::ValueTable>],
    ) -> bool {
        if checks.is_empty() {
            return true;
        }
        // The point holds values for open variables already; checks write nothing.
        let cx = Cx {
            values: self.values,
            o: self.o,
            indexes: &NO_INDEXES,
            slice: None,
            open: self.open.map(|open| OpenNest {
                open,
                vars: &[],
                equation: usize::MAX,
            }),
        };
        let mut stack = [0i64; 16];
        let mut heap = Vec::new();
        let point: &mut [i64] = if env.len() <= stack.len() {
            &mut stack[..env.len()]
        } else {
            heap.resize(env.len(), 0);
            &mut heap
        };
        for (k, (p, &v)) in point.iter_mut().zip(env).enumerate() {
            *p = match tables.get(k).copied().flatten() {
                Some(t) => t.value(v),
                None => i64::from(v),
            };
        }
        checks
            .iter()
            .all(|c| matches!(cx.eval(c, point, &mut []), Some(x) if x != 0.0))
    }

    /// A computed value at a point (an assignment of the equation's variables); `None`
    /// where it is nothing.
    pub(in crate::eval) fn value_at(&self, value: &Value, point: &mut [i64]) -> Option<f64> {
        // The point holds values for open variables already; checks write nothing.
        let cx = Cx {
            values: self.values,
            o: self.o,
            indexes: &NO_INDEXES,
            slice: None,
            open: self.open.map(|open| OpenNest {
                open,
                vars: &[],
                equation: usize::MAX,
            }),
        };
        cx.eval(value, point, &mut [])
    }
}

/// For each scan whose key is not a prefix of the tuple, its tuples sorted by the key's
/// positions (then the rest), so lookups are binary searches.
struct Indexes {
    /// Per slot: the scanned tensor, and the sorted order of its tuples when needed.
    by_slot: Vec<(Option<usize>, Option<Vec<u32>>)>,
    /// Per relation read by lookups whose dense shape is small enough: a bit per element.
    bitmaps: Vec<(usize, Vec<u64>)>,
}

/// A relation read by lookups gets a bitmap of its elements when it has at most this many
/// (32 MiB): a lookup is then one load instead of a binary search over its tuples.
const BITMAP_ELEMENTS: usize = 1 << 28;

impl Indexes {
    fn build(n: &NestEquation, values: &[Tensor]) -> Indexes {
        let mut by_slot = vec![(None, None); n.slots];
        let mut scans = Vec::new();
        collect_scans(&n.root, &mut scans);
        for s in scans {
            let order = match tuples(&values[s.tensor]) {
                Some(r) if !is_prefix(&s.key) => Some(sorted_by(r, &s.key)),
                _ => None,
            };
            if let Some(slot) = by_slot.get_mut(s.slot) {
                *slot = (Some(s.tensor), order);
            }
        }
        let mut read = Vec::new();
        relations_read(&n.root, values, &mut read);
        let bitmaps = read
            .into_iter()
            .filter_map(|t| {
                let Storage::Relation(r) = &values[t].storage else {
                    return None;
                };
                let shape = &values[t].shape;
                let elements = shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n))?;
                if elements > BITMAP_ELEMENTS || r.len() < 64 {
                    return None;
                }
                let mut bits = vec![0u64; elements.div_ceil(64)];
                for tuple in r.iter() {
                    let at = tuple
                        .iter()
                        .zip(shape)
                        .fold(0usize, |o, (&i, &n)| o * n + i as usize);
                    bits[at / 64] |= 1 << (at % 64);
                }
                Some((t, bits))
            })
            .collect();
        Indexes { by_slot, bitmaps }
    }

    /// The bitmap of relation `t`, if it has one.
    fn bitmap(&self, t: usize) -> Option<&[u64]> {
        self.bitmaps
            .iter()
            .find(|(x, _)| *x == t)
            .map(|(_, b)| b.as_slice())
    }

    /// The tensor scan `slot` reads.
    fn scanned(&self, slot: usize) -> Option<usize> {
        self.by_slot.get(slot).and_then(|s| s.0)
    }

    /// The tuples of `r` whose key positions equal `key`: positions `lo..hi` of the scan's
    /// sorted order (`None`: the tuples' own order), ascending within the key.
    fn rows<'s>(
        &'s self,
        s: &Scan,
        r: &Relation,
        key: &[u32],
    ) -> (Option<&'s [u32]>, usize, usize) {
        let order = self.by_slot.get(s.slot).and_then(|x| x.1.as_deref());
        let n = order.map_or(r.len(), <[u32]>::len);
        let at = |i: usize| r.tuple(order.map_or(i, |o| o[i] as usize));
        let (lo, hi) = equal_range(n, |i| compare(at(i), &s.key, key));
        (order, lo, hi)
    }
}

/// How a tuple's key positions compare with `key`.
fn compare(tuple: &[u32], axes: &[usize], key: &[u32]) -> std::cmp::Ordering {
    axes.iter().map(|&ax| tuple[ax]).cmp(key.iter().copied())
}

/// The positions `lo..hi` of `0..n` whose key equals the one `cmp` compares with, keys being
/// ascending.
fn equal_range(n: usize, cmp: impl Fn(usize) -> std::cmp::Ordering) -> (usize, usize) {
    use std::cmp::Ordering::{Greater, Less};
    let bound = |past: &dyn Fn(std::cmp::Ordering) -> bool| {
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if past(cmp(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    (bound(&|o| o == Less), bound(&|o| o != Greater))
}

/// Whether key axes are `0, 1, …, k - 1`: the sorted tuples are then grouped by the key.
fn is_prefix(key: &[usize]) -> bool {
    key.iter().enumerate().all(|(i, &ax)| i == ax)
}

/// Tuple indices of `r` sorted by the positions `key` (stable: ties keep ascending order).
fn sorted_by(r: &Relation, key: &[usize]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..r.len() as u32).collect();
    order.sort_by(|&a, &b| {
        let (ta, tb) = (r.tuple(a as usize), r.tuple(b as usize));
        key.iter()
            .map(|&ax| ta[ax])
            .cmp(key.iter().map(|&ax| tb[ax]))
    });
    order
}

/// The relations that a scope (and those nested in it) reads by lookups, each once.
fn relations_read(scope: &Scope, values: &[Tensor], out: &mut Vec<usize>) {
    fn walk(v: &Value, values: &[Tensor], out: &mut Vec<usize>) {
        match v {
            Value::Read { tensor, .. } => {
                let relation = matches!(
                    values.get(*tensor).map(|t| &t.storage),
                    Some(Storage::Relation(_))
                );
                if relation && !out.contains(tensor) {
                    out.push(*tensor);
                }
            }
            Value::Sum(s) => relations_read(s, values, out),
            Value::Neg(x)
            | Value::Not(x)
            | Value::Normalize(_, _, _, x)
            | Value::Concat(_, _, x) => walk(x, values, out),
            Value::Product(fs) => fs.iter().for_each(|(_, f)| walk(f, values, out)),
            Value::Binary(_, a, b) | Value::Compare(_, a, b) => {
                walk(a, values, out);
                walk(b, values, out);
            }
            Value::Call(_, args) => args.iter().for_each(|a| walk(a, values, out)),
            Value::Const(_) | Value::Var(_) | Value::Slice { .. } | Value::Scanned(_) => {}
        }
    }
    for l in &scope.levels {
        if let Level::Filter(v) | Level::Bind { value: v, .. } = l {
            walk(v, values, out);
        }
    }
    walk(&scope.body, values, out);
}

/// Every scan of a scope and of the scopes nested in it.
fn collect_scans<'a>(scope: &'a Scope, out: &mut Vec<&'a Scan>) {
    for l in &scope.levels {
        match l {
            Level::Scan(s) => out.push(s),
            Level::Filter(v) | Level::Bind { value: v, .. } => values_scans(v, out),
            Level::Range { .. } | Level::Values { .. } => {}
        }
    }
    values_scans(&scope.body, out);
}

fn values_scans<'a>(v: &'a Value, out: &mut Vec<&'a Scan>) {
    match v {
        Value::Sum(s) => collect_scans(s, out),
        Value::Neg(x) | Value::Not(x) | Value::Normalize(_, _, _, x) | Value::Concat(_, _, x) => {
            values_scans(x, out)
        }
        Value::Product(fs) => fs.iter().for_each(|(_, f)| values_scans(f, out)),
        Value::Binary(_, a, b) | Value::Compare(_, a, b) => {
            values_scans(a, out);
            values_scans(b, out);
        }
        Value::Call(_, args) => args.iter().for_each(|a| values_scans(a, out)),
        Value::Const(_)
        | Value::Var(_)
        | Value::Read { .. }
        | Value::Slice { .. }
        | Value::Scanned(_) => {}
    }
}
