//! The reference evaluator: loops over iteration spaces in f64, straight from the SPEC.
//!
//! It is deliberately simple: every summation point enumerates its variables' full ranges,
//! every recursive component is iterated naively (Jacobi) to its fixpoint. Faster engines must
//! agree with it; keep it obviously correct rather than fast.

use super::accumulate::Accumulator;
use super::fixpoint;
use super::initial::empty;
use super::open::{axis_table, index_at, At, OpenVars};
use super::scalar::{element_at, Element, Exact, Scalar};
use super::{Decision, Engine, EvalOptions, Evaluation, Ran};
use crate::diagnostics::Diagnostics;
use crate::functions::RowStats;
use crate::semantics::{Checked, Equation, Family, Func, Mask, Node, Stratum};
use crate::syntax::ast::Num;
use crate::tensor::odometer::advance_vars;
use crate::tensor::Tensor;
use std::collections::BTreeMap;

/// The oracle evaluator.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reference;

impl Engine for Reference {
    fn name(&self) -> &'static str {
        "reference"
    }

    fn run(
        &self,
        p: &Checked,
        _plan: &crate::plan::Plan,
        o: &EvalOptions,
    ) -> Result<Evaluation, Diagnostics> {
        let mut values = initial_values(p, o)?;
        let mut log = Vec::with_capacity(p.strata.len());
        for (stratum, st) in p.strata.iter().enumerate() {
            evaluate_stratum(p, st, &mut values, o)?;
            log.push(Decision {
                stratum,
                ran: Ran::Reference,
                reason: None,
            });
        }
        Ok(Evaluation { values, log })
    }

    fn evaluate(&self, p: &Checked, o: &EvalOptions) -> Result<Vec<Tensor>, Diagnostics> {
        let mut values = initial_values(p, o)?;
        for st in &p.strata {
            evaluate_stratum(p, st, &mut values, o)?;
        }
        Ok(values)
    }
}

/// Every tensor's value before evaluation: its data, or empty.
pub(super) fn initial_values(p: &Checked, o: &EvalOptions) -> Result<Vec<Tensor>, Diagnostics> {
    super::functions_registered(&p.user_functions(), o)?;
    super::initial::fits_budget(p, &|_| true, Default::default(), o)?;
    p.tensors
        .iter()
        .enumerate()
        .map(|(t, info)| match &p.data[t] {
            Some(d) => Ok(d.clone()),
            None => empty(info, o),
        })
        .collect()
}

/// Evaluates one stratum in place: once, or to its fixpoint when it is recursive.
pub(super) fn evaluate_stratum(
    p: &Checked,
    st: &Stratum,
    values: &mut [Tensor],
    o: &EvalOptions,
) -> Result<(), Diagnostics> {
    evaluate_stratum_recorded(p, st, values, o, None)
}

/// What backpropagation needs from one stratum's evaluation beyond its final values: the
/// iterates a fixpoint went through and the slices a virtual index went through (§12).
#[derive(Clone, Debug, Default)]
pub struct Record {
    /// The stratum's tensors (in [`Stratum::tensors`] order) before each fixpoint iteration.
    pub iterates: Vec<Vec<Tensor>>,
    /// Per (fixpoint iteration, equation index): the slice before each virtual step, then
    /// the final slice.
    pub slices: BTreeMap<(usize, usize), Vec<Tensor>>,
}

/// As [`evaluate_stratum`], keeping in `rec` what backpropagation through it needs.
pub(super) fn evaluate_stratum_recorded(
    p: &Checked,
    st: &Stratum,
    values: &mut [Tensor],
    o: &EvalOptions,
    mut rec: Option<&mut Record>,
) -> Result<(), Diagnostics> {
    if st.equations.is_empty() {
        return Ok(());
    }
    if st.recursive {
        return fixpoint(p, st, values, o, rec);
    }
    for &t in &st.tensors {
        values[t] = compute(p, t, values, o, rec.as_deref_mut().map(|r| (0, r)))?;
    }
    Ok(())
}

/// Iterates X ← F(X) from the data (or zeros) until nothing changes (§9).
fn fixpoint(
    p: &Checked,
    st: &Stratum,
    values: &mut [Tensor],
    o: &EvalOptions,
    mut rec: Option<&mut Record>,
) -> Result<(), Diagnostics> {
    fixpoint::jacobi(p, st, values, o, |iteration, values| {
        if let Some(r) = rec.as_deref_mut() {
            r.iterates
                .push(st.tensors.iter().map(|&t| values[t].clone()).collect());
        }
        let mut next = Vec::with_capacity(st.tensors.len());
        for &t in &st.tensors {
            let rec = rec.as_deref_mut().map(|r| (iteration, r));
            next.push(compute(p, t, values, o, rec)?);
        }
        Ok(next)
    })
}

/// One tensor's value: its data combined with every equation's contributions.
fn compute(
    p: &Checked,
    t: usize,
    values: &[Tensor],
    o: &EvalOptions,
    mut rec: Option<(usize, &mut Record)>,
) -> Result<Tensor, Diagnostics> {
    let info = &p.tensors[t];
    let mut acc = Accumulator::new(info).within(values, o.max_memory);
    if let Some(d) = &p.data[t] {
        acc.combine_tensor(d);
    }
    for (e, eq) in p
        .equations
        .iter()
        .enumerate()
        .filter(|(_, e)| e.target == t)
    {
        let slices = match rec.as_mut() {
            Some((iteration, r)) if eq.virtual_var.is_some() => {
                Some(r.slices.entry((*iteration, e)).or_default())
            }
            _ => None,
        };
        run_equation(p, eq, values, o, &mut acc, slices)?;
    }
    match acc.outgrew(info, o.max_memory) {
        Some(d) => Err(d.into()),
        None => Ok(acc.finish(info)),
    }
}

/// Evaluates one equation at every left-hand-side point (sequentially along a virtual index).
fn run_equation(
    p: &Checked,
    eq: &Equation,
    values: &[Tensor],
    o: &EvalOptions,
    acc: &mut Accumulator,
    mut slices: Option<&mut Vec<Tensor>>,
) -> Result<(), Diagnostics> {
    let info = &p.tensors[eq.target];
    let mut env = vec![0i64; eq.vars.len()];
    // An open variable ranges over the values its table holds now (§8).
    let ranged = ranged_over_tables(p, eq);
    let eq = ranged.as_ref().unwrap_or(eq);
    let Some(tv) = eq.virtual_var else {
        let cx = Cx::new(p, eq, values, None, o);
        return points(eq, &mut env, &mut |env| cx.emit(env, acc));
    };
    let mut slice = match &p.data[eq.target] {
        Some(d) => d.clone(),
        None => empty(info, o)?,
    };
    for step in 0..eq.vars[tv].range {
        if let Some(s) = slices.as_deref_mut() {
            s.push(slice.clone());
        }
        env[tv] = step as i64;
        let mut next = Accumulator::new(info).within(values, o.max_memory);
        let cx = Cx::new(p, eq, values, Some(&slice), o);
        points(eq, &mut env, &mut |env| cx.emit(env, &mut next))?;
        if let Some(d) = next.outgrew(info, o.max_memory) {
            return Err(d.into());
        }
        slice = next.finish(info);
    }
    if let Some(s) = slices {
        s.push(slice.clone());
    }
    acc.combine_tensor(&slice);
    Ok(())
}

/// `eq` with each open variable's range the length of its table now, where it has any.
fn ranged_over_tables(p: &Checked, eq: &Equation) -> Option<Equation> {
    let open = OpenVars::of(p, eq);
    open.any().then(|| {
        let mut eq = eq.clone();
        for (v, info) in eq.vars.iter_mut().enumerate() {
            if let Some(t) = open.table(v) {
                info.range = t.len();
            }
        }
        eq
    })
}

/// Calls `f` at every assignment of the equation's left-hand-side variables, in row-major order.
pub(crate) fn points(
    eq: &Equation,
    env: &mut [i64],
    f: &mut dyn FnMut(&mut [i64]) -> Result<(), Diagnostics>,
) -> Result<(), Diagnostics> {
    assignments(eq, &eq.loop_vars, env, f)
}

/// Calls `f` at every assignment of `vars` (over their ranges), in row-major order.
pub(crate) fn assignments(
    eq: &Equation,
    vars: &[usize],
    env: &mut [i64],
    f: &mut dyn FnMut(&mut [i64]) -> Result<(), Diagnostics>,
) -> Result<(), Diagnostics> {
    if vars.iter().any(|&v| eq.vars[v].range == 0) {
        return Ok(());
    }
    for &v in vars {
        env[v] = 0;
    }
    loop {
        f(env)?;
        if !advance_vars(env, vars, |v| eq.vars[v].range) {
            return Ok(());
        }
    }
}

/// What evaluating one equation reads.
pub(crate) struct Cx<'a> {
    p: &'a Checked,
    eq: &'a Equation,
    /// Its variables of open domains, which stand for their values.
    open: OpenVars<'a>,
    values: &'a [Tensor],
    slice: Option<&'a Tensor>,
    o: &'a EvalOptions,
    /// Points visited since the last look at `--timeout` and Ctrl-C, and whether one asked to
    /// stop (every value after that is meaningless, and the evaluation ends with an error).
    ticks: std::cell::Cell<u64>,
    stopped: std::cell::Cell<bool>,
}

impl<'a> Cx<'a> {
    /// An evaluator of `eq`'s right-hand side over `values`; `slice` is the previous slice of
    /// a virtual index.
    pub(crate) fn new(
        p: &'a Checked,
        eq: &'a Equation,
        values: &'a [Tensor],
        slice: Option<&'a Tensor>,
        o: &'a EvalOptions,
    ) -> Cx<'a> {
        Cx {
            p,
            eq,
            open: OpenVars::of(p, eq),
            values,
            slice,
            o,
            ticks: Default::default(),
            stopped: Default::default(),
        }
    }

    /// Evaluates the right-hand side at one point and writes it to the left-hand side: an
    /// `int` tensor's exactly (E0406 where it leaves i64).
    fn emit(&self, env: &mut [i64], acc: &mut Accumulator) -> Result<(), Diagnostics> {
        let info = &self.p.tensors[self.eq.target];
        if info.elem == crate::tensor::ElemType::Int {
            let value = self.value::<Exact>(&self.eq.rhs, env, false);
            if self.tick() {
                return Err(self.o.stop.error(self.eq.span).into());
            }
            return match value {
                Some(Exact(Some(v))) => match self.lhs_at(env, v != 0) {
                    Ok(Some(idx)) => {
                        acc.combine_int(&idx, v);
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(()) => Err(super::open::overflow(self.eq.span, &info.name).into()),
                },
                Some(Exact(None)) => match self.lhs_at(env, false) {
                    Ok(Some(_)) => Err(super::accumulate::overflow(info).into()),
                    _ => Ok(()),
                },
                None => Ok(()),
            };
        }
        let value = self.eval(&self.eq.rhs, env, false);
        if self.tick() {
            return Err(self.o.stop.error(self.eq.span).into());
        }
        let Some(v) = value else {
            return Ok(());
        };
        // A point that writes 0 (a false body: only relations have open axes) numbers no
        // value and cannot overflow: it derives nothing.
        match self.lhs_at(env, v != 0.0) {
            Ok(Some(idx)) => acc.combine(&idx, v),
            Ok(None) => {}
            Err(()) => {
                let name = &self.p.tensors[self.eq.target].name;
                return Err(super::open::overflow(self.eq.span, name).into());
            }
        }
        Ok(())
    }

    /// The element the left-hand side names at `env`: `None` where it names none, an
    /// error where a value it computes leaves the i64 range (with `number`: where the point
    /// writes a value that an open axis must number).
    pub(crate) fn lhs_at(&self, env: &[i64], number: bool) -> Result<Option<Vec<usize>>, ()> {
        let mut numbers = Vec::new();
        self.open.numbers(env, &mut numbers);
        let mut idx = Vec::with_capacity(self.eq.lhs.len());
        for (ax, f) in self.eq.lhs.iter().enumerate() {
            let table = axis_table(self.p, self.eq.target, ax);
            match index_at(f, env, &numbers, table, number) {
                At::Pos(i) if i >= 0 => idx.push(i as usize),
                At::Overflow if number => return Err(()),
                _ => return Ok(None),
            }
        }
        Ok(Some(idx))
    }

    /// The element a read names at `env` (positions, handles on open axes), or `None`
    /// where it names none (out of range, or a value an open axis does not hold).
    pub(crate) fn read_at(
        &self,
        tensor: usize,
        index: &[crate::semantics::IndexFn],
        env: &[i64],
    ) -> Option<Vec<u32>> {
        let mut numbers = Vec::new();
        self.open.numbers(env, &mut numbers);
        let shape = &self.values[tensor].shape;
        let mut key = Vec::with_capacity(index.len());
        for (ax, (f, &n)) in index.iter().zip(shape).enumerate() {
            let table = axis_table(self.p, tensor, ax);
            match index_at(f, env, &numbers, table, false) {
                At::Pos(i) if i >= 0 && (table.is_some() || (i as u64) < n as u64) => {
                    key.push(i as u32)
                }
                _ => return None,
            }
        }
        Some(key)
    }

    /// Counts a point; whether the evaluation must stop (asked every `stop::EVERY` points).
    fn tick(&self) -> bool {
        if self.stopped.get() {
            return true;
        }
        let n = self.ticks.get() + 1;
        self.ticks.set(n);
        if n.is_multiple_of(super::stop::EVERY) && self.o.stop.requested() {
            self.stopped.set(true);
        }
        self.stopped.get()
    }

    /// Sets the flattened variables `parts` of a `concat` from the position of `out`
    /// (outermost first, §6.4).
    pub(crate) fn split_concat(&self, out: usize, parts: &[usize], env: &mut [i64]) {
        let mut rest = env[out];
        for &part in parts.iter().rev() {
            let r = self.eq.vars[part].range.max(1) as i64;
            env[part] = rest % r;
            rest /= r;
        }
    }

    /// Registered functions, for their derivatives.
    pub(crate) fn functions(&self) -> &BTreeMap<String, crate::functions::UserFunction> {
        &self.o.functions
    }

    /// Relational semantics (§7): under `max=`/`min=` undefined elements stop a point.
    pub(crate) fn relational(&self) -> bool {
        matches!(self.eq.family, Family::Max | Family::Min)
    }

    /// The value at one point, or `None` when the point contributes nothing (an out-of-range
    /// read, or an undefined element under relational semantics).
    pub(crate) fn eval(&self, n: &Node, env: &mut [i64], total: bool) -> Option<f64> {
        self.value(n, env, total)
    }

    /// [`Cx::eval`] in `S`: f64, or exactly for an `int` tensor ([`super::scalar`]).
    fn value<S: Scalar>(&self, n: &Node, env: &mut [i64], total: bool) -> Option<S> {
        match n {
            Node::Const(c) => Some(S::constant(c.value())),
            Node::Var(v) => Some(S::var(self.open.number(*v, env[*v]))),
            Node::Read {
                tensor,
                index,
                slice,
            } => self
                .element::<S>(*tensor, index, *slice, env)?
                .resolve(total, self.relational()),
            Node::Sum { vars, body } => self.sum::<S>(vars, body, env, total),
            Node::Product(fs) => self.product::<S>(fs, env, total),
            Node::Neg(x) => self.value::<S>(x, env, total).map(S::neg),
            Node::Not(x) => self.value::<S>(x, env, true).map(S::not),
            Node::Binary(op, a, b) => {
                let (x, y) = (
                    self.value::<S>(a, env, total),
                    self.value::<S>(b, env, total),
                );
                let (x, y) = (x?, y?);
                // An integer `%` or `//` by 0 is nothing.
                let kinds = |t: usize| self.p.tensors[t].kind;
                if y.real() == 0.0 && crate::semantics::divides_integers(*op, (a, b), &kinds) {
                    return None;
                }
                x.binary(*op, y)
            }
            Node::Compare(op, a, b) => {
                // Variables and constants compare exactly, as integers where they are.
                if let (Some(x), Some(y)) = (self.leaf(a, env), self.leaf(b, env)) {
                    return Some(S::truth(op.holds_num(x, y)));
                }
                // An integer equation may compare reals: those compare in f64.
                if S::EXACT && !(self.integral(a) && self.integral(b)) {
                    let (a, b) = (self.eval(a, env, total), self.eval(b, env, total));
                    return Some(S::truth(op.holds(a?, b?)));
                }
                let (a, b) = (
                    self.value::<S>(a, env, total),
                    self.value::<S>(b, env, total),
                );
                Some(a?.compare(*op, b?))
            }
            Node::Call(f, args) => {
                let mut xs = Vec::with_capacity(args.len());
                let mut skip = false;
                for a in args {
                    match self.value::<S>(a, env, total) {
                        Some(v) => xs.push(v),
                        None => skip = true,
                    }
                }
                if skip {
                    return None;
                }
                match f {
                    Func::Builtin(b) => Some(S::builtin(*b, &xs)),
                    Func::User(name) => {
                        let uf = self.o.functions.get(name)?;
                        Some(S::of_real((uf.f)(xs[0].real())))
                    }
                }
            }
            Node::Normalize(kind, var, arg) => {
                let here = env[*var];
                let range = self.eq.vars[*var].range;
                let mut row = Vec::with_capacity(range);
                for q in 0..range {
                    env[*var] = q as i64;
                    row.push(self.eval(arg, env, total));
                }
                env[*var] = here;
                let x = row.get(here as usize).copied().flatten()?;
                let defined: Vec<f64> = row.into_iter().flatten().collect();
                Some(S::of_real(RowStats::of(*kind, &defined).apply(x)))
            }
            Node::Concat { out, parts, arg } => {
                self.split_concat(*out, parts, env);
                self.value::<S>(arg, env, total)
            }
        }
    }

    /// A product's value: its factors left to right, a divisor dividing; nothing where a
    /// factor is, and 0 where a mask is false or undefined, whatever the other factors are
    /// (docs/language.md, "masks").
    fn product<S: Scalar>(&self, fs: &[(bool, Node)], env: &mut [i64], total: bool) -> Option<S> {
        let mut acc = S::truth(true);
        let (mut skip, mut masked) = (false, false);
        // Undefined elements are nothing under `max=`/`min=`, not masks.
        let nothing = self.relational() && !total;
        for (div, f) in fs {
            let mask = if *div { None } else { self.p.mask(f) };
            if mask == Some(Mask::Undefined) && !nothing && self.undefined(f, env) {
                masked = true;
                continue;
            }
            match self.value::<S>(f, env, total) {
                Some(v) => {
                    masked |= mask == Some(Mask::False) && v.real() == 0.0;
                    acc = acc.mul(v, *div);
                }
                None => skip = true,
            }
        }
        (!skip).then_some(if masked { S::truth(false) } else { acc })
    }

    /// Whether a subexpression computes an integer (no real read, constant or operation),
    /// so an integer equation compares it exactly.
    fn integral(&self, n: &Node) -> bool {
        crate::semantics::integral(n, &|t| self.p.tensors[t].kind)
    }

    /// A variable's number or a constant, as a comparison takes it.
    fn leaf(&self, n: &Node, env: &[i64]) -> Option<Num> {
        match n.inside_empty_sums() {
            Node::Var(v) => Some(Num::Int(self.open.number(*v, env[*v]))),
            Node::Const(c) => Some(*c),
            other => {
                let f = other.integer_arithmetic()?;
                Some(f.exact(&|v| self.open.number(v, env[v])))
            }
        }
    }

    /// The element a read finds (`None` for a slice the step has not made yet).
    fn element<S: Scalar>(
        &self,
        tensor: usize,
        index: &[crate::semantics::IndexFn],
        slice: bool,
        env: &[i64],
    ) -> Option<Element<S>> {
        let t = if slice {
            self.slice?
        } else {
            &self.values[tensor]
        };
        let open = self.open.any()
            || self.p.tensors[tensor]
                .domains
                .iter()
                .any(|&d| self.p.domains[d].is_open());
        Some(match open {
            true => self.element_open(t, tensor, index, env),
            false => element_at(t, index, env),
        })
    }

    /// Whether a factor that masks where its element is undefined has none at the point.
    fn undefined(&self, f: &Node, env: &[i64]) -> bool {
        match f.inside_empty_sums() {
            Node::Read {
                tensor,
                index,
                slice,
            } => matches!(
                self.element::<f64>(*tensor, index, *slice, env),
                Some(Element::Undefined)
            ),
            _ => false,
        }
    }

    /// [`Cx::element`] where open columns take part (`eval/open.rs`): an open axis has no
    /// extent, and a value its table lacks is in no tuple (undefined).
    fn element_open<S: Scalar>(
        &self,
        t: &Tensor,
        tensor: usize,
        index: &[crate::semantics::IndexFn],
        env: &[i64],
    ) -> Element<S> {
        let mut numbers = Vec::new();
        self.open.numbers(env, &mut numbers);
        let mut key = Vec::with_capacity(index.len());
        let mut absent = false;
        for (ax, (f, &n)) in index.iter().zip(&t.shape).enumerate() {
            let table = axis_table(self.p, tensor, ax);
            match index_at(f, env, &numbers, table, false) {
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

    /// A summation point: combines every defined value over its variables' ranges in
    /// row-major order (a fixed order, so results are deterministic).
    fn sum<S: Scalar>(
        &self,
        vars: &[usize],
        body: &Node,
        env: &mut [i64],
        total: bool,
    ) -> Option<S> {
        if vars.is_empty() {
            return self.value::<S>(body, env, total);
        }
        if vars.iter().any(|&v| self.eq.vars[v].range == 0) {
            return None;
        }
        for &v in vars {
            env[v] = 0;
        }
        let family = self.eq.family;
        let mut acc: Option<S> = None;
        let mut count = 0usize;
        loop {
            if self.tick() {
                return None;
            }
            if let Some(x) = self.value::<S>(body, env, total) {
                count += 1;
                acc = Some(match acc {
                    None => x,
                    Some(a) => a.fold(family, x),
                });
            }
            if !advance_vars(env, vars, |v| self.eq.vars[v].range) {
                return match family {
                    Family::Avg => acc.map(|a| S::of_real(a.real() / count as f64)),
                    _ => acc,
                };
            }
        }
    }
}
