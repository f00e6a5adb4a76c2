//! Open integer columns (§8, `semantics/open.rs`) as evaluation meets them. A variable of
//! an open domain holds a handle into its domain's [`ValueTable`]; where it is used as a
//! number (arithmetic in an index, a comparison, a value) it stands for the value. An
//! index at an open axis is a value too, except a bare variable, which is the handle: a
//! read looks the value up (a value the table lacks is in no tuple), a write numbers it.
//!
//! Shared by the reference evaluator and the engine: it imports neither.

use crate::diagnostics::{codes, Diagnostic, Span};
use crate::semantics::{Checked, Equation, IndexFn, NoValue, TensorId};
use crate::tensor::ValueTable;

/// The tables of one equation's variables of open domains, by variable.
#[derive(Clone, Default)]
pub(crate) struct OpenVars<'a> {
    tables: Vec<Option<&'a ValueTable>>,
    any: bool,
}

impl<'a> OpenVars<'a> {
    /// The open variables of `eq`.
    pub(crate) fn of(p: &'a Checked, eq: &Equation) -> OpenVars<'a> {
        let tables: Vec<Option<&ValueTable>> = eq
            .vars
            .iter()
            .map(|v| v.open.and_then(|d| p.domains[d].table.as_deref()))
            .collect();
        let any = tables.iter().any(Option::is_some);
        OpenVars { tables, any }
    }

    /// Whether any variable holds values of an open domain.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.any
    }

    /// The table of each variable, `None` where it is not open.
    pub(crate) fn tables(&self) -> &[Option<&'a ValueTable>] {
        &self.tables
    }

    /// The table of variable `v`, if it is open.
    #[inline]
    pub(crate) fn table(&self, v: usize) -> Option<&'a ValueTable> {
        self.tables.get(v).copied().flatten()
    }

    /// The number variable `v` stands for at position `pos`: its value where it is open.
    #[inline]
    pub(crate) fn number(&self, v: usize, pos: i64) -> i64 {
        match self.table(v) {
            Some(t) => t.value(pos as u32),
            None => pos,
        }
    }

    /// `env` with each open variable's handle replaced by its value, into `out`.
    pub(crate) fn numbers(&self, env: &[i64], out: &mut Vec<i64>) {
        out.clear();
        out.extend(env.iter().enumerate().map(|(v, &p)| self.number(v, p)));
    }
}

/// The table of axis `ax` of tensor `t`, if that axis is open.
#[inline]
pub(crate) fn axis_table(p: &Checked, t: TensorId, ax: usize) -> Option<&ValueTable> {
    let d = *p.tensors[t].domains.get(ax)?;
    p.domains[d].table.as_deref()
}

/// Where an index lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum At {
    /// At this position (a handle on an open axis).
    Pos(i64),
    /// On an open axis, at a value its table lacks, which no tuple holds.
    Absent,
    /// Nowhere: a division by zero (the point is nothing).
    Nothing,
    /// The value leaves the i64 range (E0406 where it is written).
    Overflow,
}

/// Where index `f` lands on an axis with table `table` (open) or none, under positions
/// `env` and the numbers the variables stand for, `numbers` ([`OpenVars::numbers`]); a
/// write (`number`) gives a new value its handle, a read does not.
pub(crate) fn index_at(
    f: &IndexFn,
    env: &[i64],
    numbers: &[i64],
    table: Option<&ValueTable>,
    number: bool,
) -> At {
    if let (IndexFn::Var(v), Some(_)) = (f, table) {
        return At::Pos(env[*v]);
    }
    place(f.checked(numbers), table, number)
}

/// Where a computed value lands on an axis with table `table` (open) or none: its
/// position, or handle; a write (`number`) gives a new value its handle.
pub(crate) fn place(value: Result<i64, NoValue>, table: Option<&ValueTable>, number: bool) -> At {
    let value = match value {
        Ok(x) => x,
        Err(NoValue::Undefined) => return At::Nothing,
        Err(NoValue::Overflow) => return At::Overflow,
    };
    match table {
        None => At::Pos(value),
        Some(t) => {
            let h = if number {
                t.intern(value)
            } else {
                t.handle(value)
            };
            match (h, number) {
                (Some(h), _) => At::Pos(i64::from(h)),
                (None, false) => At::Absent,
                (None, true) => At::Overflow,
            }
        }
    }
}

/// E0406: a value computed into an integer column leaves the i64 range (or its domain
/// would number more than 2³² values).
pub(crate) fn overflow(span: Span, target: &str) -> Diagnostic {
    Diagnostic::error(
        codes::VALUE_OVERFLOW,
        span,
        format!("a value this rule computes for `{target}` overflows 64-bit integers"),
    )
    .with_note("integer columns hold i64 values (§8); the arithmetic does not wrap")
}

/// What an engine needs to meet open columns: each domain's table, each tensor axis's, and
/// whether some value overflowed (a join reports it where it can only return `false`).
pub(crate) struct Open<'a> {
    p: &'a Checked,
    domains: Vec<Option<&'a ValueTable>>,
    axes: Vec<Vec<Option<&'a ValueTable>>>,
    /// The first equation (by index) whose value overflowed, or `usize::MAX`.
    overflowed: std::sync::atomic::AtomicUsize,
}

impl<'a> Open<'a> {
    /// The open columns of `p`; `None` when it has none (every position is then a value
    /// less an offset, and engines take their usual paths).
    pub(crate) fn of(p: &'a Checked) -> Option<Open<'a>> {
        let domains: Vec<Option<&ValueTable>> =
            p.domains.iter().map(|d| d.table.as_deref()).collect();
        if domains.iter().all(Option::is_none) {
            return None;
        }
        let axes = p
            .tensors
            .iter()
            .map(|t| t.domains.iter().map(|&d| domains[d]).collect())
            .collect();
        Some(Open {
            p,
            domains,
            axes,
            overflowed: std::sync::atomic::AtomicUsize::new(usize::MAX),
        })
    }

    /// The table of each variable of a join rule planned from equation `equation` with
    /// `vars` variables (its own, then those its lets bind, `lets` giving their domains).
    pub(crate) fn rule_tables(
        &self,
        equation: usize,
        vars: usize,
        lets: impl Iterator<Item = (usize, Option<usize>)>,
    ) -> Vec<Option<&'a ValueTable>> {
        let eq = &self.p.equations[equation];
        let mut out: Vec<Option<&ValueTable>> = (0..vars)
            .map(|v| self.domain(eq.vars.get(v).and_then(|i| i.open)))
            .collect();
        for (v, d) in lets {
            if let Some(slot) = out.get_mut(v) {
                *slot = self.domain(d);
            }
        }
        out
    }

    /// The table of domain `d`, if it is open.
    #[inline]
    pub(crate) fn domain(&self, d: Option<usize>) -> Option<&'a ValueTable> {
        d.and_then(|d| self.domains.get(d).copied().flatten())
    }

    /// The table of axis `ax` of tensor `t`, if that axis is open.
    #[inline]
    pub(crate) fn axis(&self, t: TensorId, ax: usize) -> Option<&'a ValueTable> {
        self.axes.get(t)?.get(ax).copied().flatten()
    }

    /// The rank of tensor `t`.
    pub(crate) fn rank(&self, t: TensorId) -> usize {
        self.axes.get(t).map_or(0, Vec::len)
    }

    /// Whether any axis of tensor `t` is open.
    pub(crate) fn touches(&self, t: TensorId) -> bool {
        self.axes
            .get(t)
            .is_some_and(|a| a.iter().any(Option::is_some))
    }

    /// Records that a value equation `equation` computes overflowed.
    pub(crate) fn note_overflow(&self, equation: usize) {
        self.overflowed
            .fetch_min(equation, std::sync::atomic::Ordering::Relaxed);
    }

    /// E0406 for the first equation whose value overflowed since this was made, if any.
    pub(crate) fn overflow(&self) -> Option<Diagnostic> {
        let e = self.overflowed.load(std::sync::atomic::Ordering::Relaxed);
        let eq = self.p.equations.get(e)?;
        Some(overflow(eq.span, &self.p.tensors[eq.target].name))
    }
}

/// The extent an axis has now: its table's length where it is open (every handle is
/// below it), its shape otherwise.
pub(crate) fn extent_now(p: &Checked, t: TensorId, ax: usize) -> usize {
    match axis_table(p, t, ax) {
        Some(table) => table.len(),
        None => p.tensors[t].shape.get(ax).copied().unwrap_or(0),
    }
}
