//! Joins: the order atoms are visited in, and the nested-loop join over index lookups that
//! enumerates every assignment satisfying a rule body.

use super::index::IndexId;
use super::store::{row, Store};
use crate::eval::nest::Checker;
use crate::eval::stop::Ticker;
use crate::plan::datalog::{
    join_order, keys_within, Absent, Atom, Filter, JoinStats, LetValue, Operand, Rule, Term,
};
use crate::semantics::{NoValue, TensorId, VarId};
use crate::syntax::ast::Num;
use crate::tensor::{Tensor, ValueTable};
use rustc_hash::FxHashMap as HashMap;

/// Which version of a relation an atom reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Version {
    /// All tuples.
    Full(TensorId),
    /// Tuples new in the last round (recursive relations only).
    Delta(TensorId),
}

/// One atom in join order: which columns are looked up, which bind variables.
pub(super) struct Step {
    pub(super) atom: usize,
    pub(super) version: Version,
    pub(super) key_cols: Vec<usize>,
    pub(super) key_terms: Vec<Term>,
    /// `(column, variable, repeat)`: a scanned row binds `variable` from `column`.
    pub(super) binds: Vec<(usize, usize, bool)>,
    /// The index on `key_cols` (`None` when the atom is scanned).
    index: Option<IndexId>,
    /// `binds` with each column replaced by its place in the index's entries.
    slots: Vec<(usize, usize, bool)>,
    /// Only rows below this are read: the relation as it was before the last round's new
    /// tuples (see [`prepare`]).
    below: u32,
}

/// How a run of a rule with an atom reading the last round's new tuples reads the atoms
/// before that one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Earlier {
    /// In full.
    Full,
    /// As they were before the last round, whose new tuples are the last rows of their
    /// stores: each combination of new tuples is then derived by one run only (the run whose
    /// atom reading new tuples comes first), where reading them in full derives it once per
    /// atom with new tuples.
    Old,
}

/// The join order for one run of a rule, with the indexes its lookups need built. `shapes`
/// are the tensors' values, for the extents of their columns.
pub(super) fn prepare(
    r: &Rule,
    (delta_at, earlier): (Option<usize>, Earlier),
    (full, delta): (&mut HashMap<TensorId, Store>, &mut HashMap<TensorId, Store>),
    shapes: &[Tensor],
) -> Vec<Step> {
    let mut steps = order(r, delta_at, (full, delta), shapes);
    index_absent(r, full);
    for s in &mut steps {
        let new = match (s.version, delta_at) {
            (Version::Full(t), Some(d)) if earlier == Earlier::Old && s.atom < d => {
                delta.get(&t).map_or(0, |n| n.count)
            }
            _ => 0,
        };
        let store = match s.version {
            Version::Full(t) => full.get_mut(&t),
            Version::Delta(t) => delta.get_mut(&t),
        };
        if let Some(store) = store {
            s.below = store.count - new;
            s.index = store.ensure_index(&s.key_cols);
            if let Some(id) = s.index {
                let ix = store.index(id);
                s.slots = s
                    .binds
                    .iter()
                    .filter_map(|&(c, v, repeat)| Some((ix.slot_of(c)?, v, repeat)))
                    .collect();
            }
        }
    }
    steps
}

/// Builds the indexes that the rule's negated atoms with anonymous positions look up.
pub(super) fn index_absent(r: &Rule, full: &mut HashMap<TensorId, Store>) {
    for a in &r.absent {
        if let Some(store) = full.get_mut(&a.tensor) {
            store.ensure_index(&a.cols);
        }
    }
}

impl Step {
    /// How many of its store's rows the step reads.
    pub(super) fn rows(&self) -> u32 {
        self.below
    }
}

/// What the join order of one run of a rule is chosen by: the stores it reads, and the
/// extents of their columns (`shapes`; relations the program does not declare, such as a
/// query's demand, have none; an open column's (§8) stands for no extent, so its distinct
/// values are estimated from the count alone, as they were when measured the better choice).
struct Stats<'a> {
    rule: &'a Rule,
    delta_at: Option<usize>,
    full: &'a HashMap<TensorId, Store>,
    delta: &'a HashMap<TensorId, Store>,
    shapes: &'a [Tensor],
}

impl Stats<'_> {
    fn store(&self, atom: usize) -> Option<&Store> {
        let t = self.rule.atoms[atom].tensor;
        match Some(atom) == self.delta_at {
            true => self.delta.get(&t),
            false => self.full.get(&t),
        }
    }
}

impl JoinStats for Stats<'_> {
    fn rows(&self, atom: usize) -> usize {
        self.store(atom).map_or(0, |s| s.count as usize)
    }

    /// Looks `next` up for up to [`SAMPLE`] rows of `first` spread evenly over its store,
    /// where `next`'s store has an index on `cols` and each key column is a constant or a
    /// variable of `first`.
    fn per_row(&self, first: usize, next: usize, cols: &[usize]) -> Option<f64> {
        let (from, to) = (self.store(first)?, self.store(next)?);
        let index = to.index_id(cols)?;
        let (a, b) = (&self.rule.atoms[first], &self.rule.atoms[next]);
        // Each key column's value, as a term over a row of `first` (a variable standing for
        // the column of `first` that binds it).
        let sources: Vec<Term> = cols
            .iter()
            .map(|&c| match b.terms[c] {
                Term::Var(v) => a
                    .terms
                    .iter()
                    .position(|t| *t == Term::Var(v))
                    .map(|k| Term::Var(k as VarId)),
                constant => Some(constant),
            })
            .collect::<Option<_>>()?;
        if from.count == 0 {
            return Some(0.0);
        }
        let step = (from.count as usize).div_ceil(SAMPLE).max(1);
        let stride = to.index(index).stride();
        let (mut found, mut seen) = (0usize, 0usize);
        let mut key = Vec::with_capacity(cols.len());
        for r in (0..from.count).step_by(step) {
            let this = row(&from.data, from.arity, r);
            key.clear();
            key.extend(sources.iter().map(|t| value(t, this)));
            found += to.entries(index, &key).len() / stride;
            seen += 1;
        }
        Some(found as f64 / seen as f64)
    }

    /// The number of keys of an index on `cols` where there is one; otherwise the rows,
    /// capped by the product of the columns' extents.
    fn distinct(&self, atom: usize, cols: &[usize]) -> usize {
        let Some(store) = self.store(atom) else {
            return 0;
        };
        if let Some(keys) = store.distinct(cols) {
            return keys;
        }
        let shape = self.shapes.get(self.rule.atoms[atom].tensor);
        keys_within(store.count as usize, shape.map(|t| &t.shape[..]), cols)
    }
}

/// Rows of a store sampled to measure a lookup ([`Stats::per_row`]).
const SAMPLE: usize = 256;

/// The planned join order for one run of a rule, each step reading the right version.
fn order(
    r: &Rule,
    delta_at: Option<usize>,
    (full, delta): (&HashMap<TensorId, Store>, &HashMap<TensorId, Store>),
    shapes: &[Tensor],
) -> Vec<Step> {
    let stats = Stats {
        rule: r,
        delta_at,
        full,
        delta,
        shapes,
    };
    join_order(r, delta_at, &stats)
        .into_iter()
        .map(|j| Step {
            atom: j.atom,
            version: if Some(j.atom) == delta_at {
                Version::Delta(r.atoms[j.atom].tensor)
            } else {
                Version::Full(r.atoms[j.atom].tensor)
            },
            key_cols: j.key_cols,
            key_terms: j.key_terms,
            binds: j.binds,
            index: None,
            slots: Vec::new(),
            below: 0,
        })
        .collect()
}

pub(super) fn value(t: &Term, env: &[u32]) -> u32 {
    match t {
        Term::Var(v) => env[*v],
        Term::Const(c) => *c,
    }
}

pub(super) struct Join<'a> {
    pub(super) rule: &'a Rule,
    pub(super) steps: &'a [Step],
    pub(super) full: &'a HashMap<TensorId, Store>,
    pub(super) checker: Checker<'a>,
    /// The table of each variable of an open domain (§8): those stand for their values
    /// in computed positions, comparisons and checks. Empty where the program has none.
    tables: Vec<Option<&'a ValueTable>>,
    /// Each step's store, looked up once.
    stores: Vec<Option<&'a Store>>,
    /// Per step, the comparisons whose variables are all bound once it binds its own,
    /// tested there (again at the end with the rest): `Pair(x, y) :- N(x), N(y), x < 2`
    /// then meets `N(y)` only for the two `x` it keeps.
    early: Vec<Vec<usize>>,
    /// Whether every assignment the atoms admit derives (no negation, comparison, check or
    /// computed position to test).
    plain: bool,
}

impl<'a> Join<'a> {
    pub(super) fn new(
        rule: &'a Rule,
        steps: &'a [Step],
        (full, delta): (&'a HashMap<TensorId, Store>, &'a HashMap<TensorId, Store>),
        checker: Checker<'a>,
    ) -> Join<'a> {
        let stores = steps
            .iter()
            .map(|s| match s.version {
                Version::Full(t) => full.get(&t),
                Version::Delta(t) => delta.get(&t),
            })
            .collect();
        let plain = rule.lets.is_empty()
            && rule.negated.is_empty()
            && rule.absent.is_empty()
            && rule.filters.is_empty()
            && rule.checks.is_empty();
        Join {
            rule,
            steps,
            full,
            tables: rule_tables(rule, &checker),
            checker,
            stores,
            early: match rule.filters.is_empty() {
                true => Vec::new(),
                false => early_filters(rule, steps),
            },
            plain,
        }
    }

    /// The store step `k` reads.
    pub(super) fn step_store(&self, k: usize) -> Option<&'a Store> {
        self.stores.get(k).copied().flatten()
    }

    /// A fresh walk through this join.
    pub(super) fn walk(&self) -> Walk<'a> {
        Walk {
            env: vec![0; self.rule.vars + self.steps.len()],
            last: vec![
                Last {
                    key: [0; MAX_STACK_ARITY],
                    entries: None,
                };
                self.steps.len()
            ],
        }
    }

    /// Enumerates the assignments from step `k` on, calling `emit` for each that the rule
    /// admits, until they are done or `ticks` says to stop.
    pub(super) fn join<F: FnMut(&[u32])>(
        &self,
        k: usize,
        walk: &mut Walk<'a>,
        emit: &mut F,
        ticks: &mut Ticker,
    ) {
        let Some(step) = self.steps.get(k) else {
            let rule = (self.rule, &self.tables[..]);
            if self.plain || admits(rule, self.full, &self.checker, &mut walk.env) {
                emit(&walk.env);
            }
            return;
        };
        let Some(store) = self.step_store(k) else {
            return;
        };
        // Two copies of the loop: most steps test no comparison, and their inner loop then
        // carries no test of one (measured: a test of an empty list per row cost 5% on
        // points-to analyses).
        match self.early.get(k).is_some_and(|f| !f.is_empty()) {
            false => self.rows::<false, F>(k, (step, store), walk, emit, ticks),
            true => self.rows::<true, F>(k, (step, store), walk, emit, ticks),
        }
    }

    /// Step `k`'s rows: all of them below its bound when it scans, else those its lookup
    /// finds; each bound and joined further.
    fn rows<const EARLY: bool, F: FnMut(&[u32])>(
        &self,
        k: usize,
        (step, store): (&Step, &'a Store),
        walk: &mut Walk<'a>,
        emit: &mut F,
        ticks: &mut Ticker,
    ) {
        let Some(index) = step.index else {
            for r in 0..step.below {
                if !ticks.tick() {
                    return;
                }
                let this = row(&store.data, store.arity, r);
                self.bind::<EARLY, F>(k, r, this, &step.binds, walk, emit, ticks);
            }
            return;
        };
        let entries = walk.lookup(k, step, store, index);
        let stride = store.index(index).stride();
        // A group's entries are in row order, so the rows below a bound are a prefix.
        for e in entries.chunks_exact(stride) {
            if e[0] >= step.below || !ticks.tick() {
                return;
            }
            self.bind::<EARLY, F>(k, e[0], e, &step.slots, walk, emit, ticks);
        }
    }

    /// Binds step `k`'s variables from `tuple` (at the places `binds` gives, checking
    /// repeats), records its row `r` after the variables (`env[vars + k]`), tests (with
    /// `EARLY`) the comparisons whose variables are now bound, and goes on.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn bind<const EARLY: bool, F: FnMut(&[u32])>(
        &self,
        k: usize,
        r: u32,
        tuple: &[u32],
        binds: &[(usize, usize, bool)],
        walk: &mut Walk<'a>,
        emit: &mut F,
        ticks: &mut Ticker,
    ) {
        let env = &mut walk.env;
        env[self.rule.vars + k] = r;
        for &(c, v, repeat) in binds {
            if repeat {
                if env[v] != tuple[c] {
                    return;
                }
            } else {
                env[v] = tuple[c];
            }
        }
        if EARLY {
            let filters = &self.rule.filters;
            if !self.early[k]
                .iter()
                .all(|&f| passes(&filters[f], env, &self.tables))
            {
                return;
            }
        }
        self.join(k + 1, walk, emit, ticks);
    }

    /// Runs the join over rows `rows` of the first atom (which is scanned, not looked up).
    pub(super) fn scan_first<F: FnMut(&[u32])>(
        &self,
        rows: std::ops::Range<u32>,
        walk: &mut Walk<'a>,
        emit: &mut F,
        ticks: &mut Ticker,
    ) {
        let (Some(store), Some(step)) = (self.step_store(0), self.steps.first()) else {
            return;
        };
        let early = self.early.first().is_some_and(|f| !f.is_empty());
        for r in rows {
            if !ticks.tick() {
                return;
            }
            let this = row(&store.data, store.arity, r);
            match early {
                false => self.bind::<false, F>(0, r, this, &step.binds, walk, emit, ticks),
                true => self.bind::<true, F>(0, r, this, &step.binds, walk, emit, ticks),
            }
        }
    }
}

/// The state of one walk through a join: the variables' values, then each step's row
/// (`env`), and each step's last lookup.
pub(super) struct Walk<'a> {
    pub(super) env: Vec<u32>,
    last: Vec<Last<'a>>,
}

/// A step's last key and the entries found for it. A lookup whose key does not depend on
/// the step just before it repeats the same key for each of that step's rows (in
/// `Load(y, x), Path(x, z), Path(z, w)` read from `Path(x, z)`'s new tuples, `Path(z, w)` is
/// looked up once per `y` with the same `z`), and is then answered without hashing.
#[derive(Clone, Copy)]
struct Last<'a> {
    key: [u32; MAX_STACK_ARITY],
    entries: Option<&'a [u32]>,
}

impl<'a> Walk<'a> {
    /// The entries of step `k`'s store whose key columns hold the values of its key terms.
    fn lookup(&mut self, k: usize, step: &Step, store: &'a Store, index: IndexId) -> &'a [u32] {
        let n = step.key_terms.len();
        if n > MAX_STACK_ARITY {
            return with_values(&step.key_terms, &self.env, |key| store.entries(index, key));
        }
        let mut key = [0u32; MAX_STACK_ARITY];
        for (slot, t) in key.iter_mut().zip(&step.key_terms) {
            *slot = value(t, &self.env);
        }
        let last = &mut self.last[k];
        let same = last.key.iter().zip(&key).take(n).all(|(a, b)| a == b);
        if let Some(entries) = last.entries.filter(|_| same) {
            return entries;
        }
        let entries = store.entries(index, &key[..n]);
        *last = Last {
            key,
            entries: Some(entries),
        };
        entries
    }
}

/// Per step of `steps`, the rule's comparisons first fully bound there.
fn early_filters(rule: &Rule, steps: &[Step]) -> Vec<Vec<usize>> {
    let mut bound = vec![false; rule.vars];
    let mut placed = vec![false; rule.filters.len()];
    steps
        .iter()
        .map(|s| {
            for t in &s.key_terms {
                if let Term::Var(v) = t {
                    bound[*v] = true;
                }
            }
            for &(_, v, _) in &s.binds {
                bound[v] = true;
            }
            let known = |o: &Operand| o.vars().iter().all(|&v| bound[v]);
            (0..rule.filters.len())
                .filter(|&f| {
                    let ready =
                        !placed[f] && known(&rule.filters[f].left) && known(&rule.filters[f].right);
                    placed[f] |= ready;
                    ready
                })
                .collect()
        })
        .collect()
}

/// The table of each variable of `rule` that holds values of an open domain (§8); empty
/// where the program has none.
pub(in crate::eval) fn rule_tables<'a>(
    rule: &Rule,
    checker: &Checker<'a>,
) -> Vec<Option<&'a ValueTable>> {
    match checker.open {
        Some(open) => {
            let lets = rule.lets.iter().map(|l| (l.var, l.open));
            open.rule_tables(rule.equation, rule.vars, lets)
        }
        None => Vec::new(),
    }
}

/// Whether a complete assignment, its computed head positions bound (`Rule::lets`), passes
/// the rule's negated atoms, comparisons and value checks; `tables` are the rule's
/// ([`rule_tables`]).
pub(super) fn admits(
    (rule, tables): (&Rule, &[Option<&ValueTable>]),
    full: &HashMap<TensorId, Store>,
    checker: &Checker,
    env: &mut [u32],
) -> bool {
    // Values bound by the body come first, head positions last: a head value is computed
    // (numbered in an open column's table, or found to overflow) only for an assignment
    // every test admits.
    let (bound, head) = (Lets::Bound, Lets::Head);
    if !rule.lets.is_empty() && !bind_lets(rule, checker, (tables, bound), env) {
        return false;
    }
    if !tests(rule, full, checker, tables, env) {
        return false;
    }
    rule.lets.is_empty() || bind_lets(rule, checker, (tables, head), env)
}

/// Whether an assignment passes the rule's negated atoms, comparisons and value checks.
fn tests(
    rule: &Rule,
    full: &HashMap<TensorId, Store>,
    checker: &Checker,
    tables: &[Option<&ValueTable>],
    env: &[u32],
) -> bool {
    let holds = |a: &Atom| {
        with_values(&a.terms, env, |tuple| {
            full.get(&a.tensor).is_some_and(|s| s.contains(tuple))
        })
    };
    let absent = |a: &Absent| {
        with_values(&a.terms, env, |key| {
            full.get(&a.tensor).is_none_or(|s| match a.cols.is_empty() {
                true => s.count == 0,
                false => s.lookup_len(&a.cols, key) == 0,
            })
        })
    };
    rule.negated.iter().all(|a| !holds(a))
        && rule.absent.iter().all(absent)
        && rule.filters.iter().all(|f| passes(f, env, tables))
        && checker.holds(&rule.checks, &env[..rule.vars], tables)
}

/// `f` of the values `terms` take under `env`, gathered on the stack when they fit.
fn with_values<R>(terms: &[Term], env: &[u32], f: impl FnOnce(&[u32]) -> R) -> R {
    let mut buf = [0u32; MAX_STACK_ARITY];
    let mut heap = Vec::new();
    f(fill(
        &mut buf,
        &mut heap,
        terms.iter().map(|t| value(t, env)),
        terms.len(),
    ))
}

/// Binds each computed position, in order (a head position may use a bound value); `false`
/// when one leaves its axis, or a value is nothing or not an integer. A variable of an
/// open domain (§8, `tables`) stands for its value, and a computed value of one is
/// numbered in its table; one that overflows i64 is noted for E0406.
pub(in crate::eval) fn bind_lets(
    rule: &Rule,
    checker: &Checker,
    (tables, which): (&[Option<&ValueTable>], Lets),
    env: &mut [u32],
) -> bool {
    let mut stack = [0i64; 16];
    let mut heap = Vec::new();
    let point: &mut [i64] = if rule.vars <= stack.len() {
        &mut stack[..rule.vars]
    } else {
        heap.resize(rule.vars, 0);
        &mut heap
    };
    for (k, (p, &v)) in point.iter_mut().zip(env.iter()).enumerate() {
        *p = match tables.get(k).copied().flatten() {
            Some(t) => t.value(v),
            None => i64::from(v),
        };
    }
    for l in rule.lets.iter().filter(|l| which.takes(l)) {
        let position = match &l.value {
            LetValue::Index(f) => f.checked(point),
            LetValue::Computed { value, shift } => checker
                .value_at(value, point)
                .filter(|x| x.fract() == 0.0 && x.abs() < 9.0e15)
                .and_then(|x| (x as i64).checked_sub(*shift))
                .ok_or(NoValue::Undefined),
        };
        let table = tables.get(l.var).copied().flatten();
        match (position, table) {
            (Ok(x), Some(t)) => match t.intern(x) {
                Some(h) => {
                    env[l.var] = h;
                    point[l.var] = x;
                }
                None => {
                    note_overflow(checker, rule);
                    return false;
                }
            },
            (Ok(i), None) if i >= 0 && (i as u64) < l.extent as u64 => {
                env[l.var] = i as u32;
                point[l.var] = i;
            }
            (Err(NoValue::Overflow), Some(_)) => {
                note_overflow(checker, rule);
                return false;
            }
            _ => return false,
        }
    }
    true
}

/// Which of a rule's computed positions to bind.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::eval) enum Lets {
    /// Those the body binds to values (`n = Kids[x]`), which its tests may read.
    Bound,
    /// Head positions (`Nat(n + 1)`), which only the head reads.
    Head,
    /// Both, in order.
    All,
}

impl Lets {
    fn takes(self, l: &crate::plan::datalog::Let) -> bool {
        matches!(
            (self, &l.value),
            (Lets::All, _)
                | (Lets::Bound, LetValue::Computed { .. })
                | (Lets::Head, LetValue::Index(_))
        )
    }
}

/// Notes that a value `rule` computes overflowed (E0406 once the round ends).
fn note_overflow(checker: &Checker, rule: &Rule) {
    if let Some(open) = checker.open {
        open.note_overflow(rule.equation);
    }
}

/// Keys up to this many columns are built on the stack.
pub(super) const MAX_STACK_ARITY: usize = 8;

/// The values as a slice, on the stack when they fit.
pub(super) fn fill<'a>(
    buf: &'a mut [u32; MAX_STACK_ARITY],
    heap: &'a mut Vec<u32>,
    values: impl Iterator<Item = u32>,
    n: usize,
) -> &'a [u32] {
    if n <= MAX_STACK_ARITY {
        for (slot, v) in buf.iter_mut().zip(values) {
            *slot = v;
        }
        &buf[..n]
    } else {
        heap.extend(values);
        heap
    }
}

/// Whether a comparison holds under `env` (an open variable, `tables`, by its value).
pub(in crate::eval) fn passes(f: &Filter, env: &[u32], tables: &[Option<&ValueTable>]) -> bool {
    let value = |v: usize| match tables.get(v).copied().flatten() {
        Some(t) => t.value(env[v]),
        None => i64::from(env[v]),
    };
    let get = |o: &Operand| match o {
        Operand::Var(v) => Num::Int(value(*v)),
        Operand::Const(c) => *c,
        Operand::Arith(f) => f.exact(&value),
    };
    f.op.holds_num(get(&f.left), get(&f.right))
}
