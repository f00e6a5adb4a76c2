//! Semi-naive evaluation of Datalog-shaped strata (planned by `plan::datalog`): relations as
//! tuple sets with hash indexes on the columns each join looks up, maintained as tuples
//! arrive, and every recursive rule re-run once per recursive atom reading only the tuples new
//! in the last round.
//!
//! It must agree with the reference evaluator exactly; `tests/engines.rs` checks that on
//! random programs.

use super::accumulate::Accumulator;
use super::EvalOptions;
use crate::diagnostics::Diagnostics;
use crate::plan::datalog::{join_order, Atom, Filter, Operand, Rule, Term};
use crate::plan::demand::DemandPlan;
use crate::semantics::{Checked, Stratum, TensorId};
use crate::tensor::{Storage, Tensor};
use hashbrown::HashTable;
use rayon::prelude::*;
use rustc_hash::{FxHashMap as HashMap, FxHasher};
use std::hash::Hasher;

/// Marks the end of an index chain.
const NONE: u32 = u32::MAX;

fn hash_of(values: impl Iterator<Item = u32>) -> u64 {
    let mut h = FxHasher::default();
    for v in values {
        h.write_u32(v);
    }
    h.finish()
}

/// Row `r` of flat storage with `arity` columns.
fn row(data: &[u32], arity: usize, r: u32) -> &[u32] {
    &data[r as usize * arity..(r as usize + 1) * arity]
}

/// A set of tuples stored flat (`arity` u32s per row, no allocation per tuple), with a hash
/// table of row ids for membership and hash indexes on the column lists that joins look up.
struct Store {
    arity: usize,
    count: u32,
    data: Vec<u32>,
    members: HashTable<u32>,
    indexes: Vec<Index>,
}

/// Rows grouped by the values of some columns: a hash table from each key to the newest row
/// with it, and a `next` link from every row to the previous one with the same key.
struct Index {
    cols: Vec<usize>,
    heads: HashTable<(u32, u32)>,
    next: Vec<u32>,
}

impl Index {
    fn add(&mut self, data: &[u32], arity: usize, r: u32) {
        let Index { cols, heads, next } = self;
        let this = row(data, arity, r);
        let h = hash_of(cols.iter().map(|&c| this[c]));
        next.push(NONE);
        let same = |&(k, _): &(u32, u32)| cols.iter().all(|&c| row(data, arity, k)[c] == this[c]);
        match heads.find_mut(h, same) {
            Some((_, head)) => {
                next[r as usize] = *head;
                *head = r;
            }
            None => {
                heads.insert_unique(h, (r, r), |&(k, _)| {
                    hash_of(cols.iter().map(|&c| row(data, arity, k)[c]))
                });
            }
        }
    }

    /// The newest row whose key columns equal `key`, if any; follow `next` for the others.
    fn first(&self, data: &[u32], arity: usize, key: &[u32]) -> u32 {
        let h = hash_of(key.iter().copied());
        let same = |&(k, _): &(u32, u32)| {
            self.cols
                .iter()
                .zip(key)
                .all(|(&c, &v)| row(data, arity, k)[c] == v)
        };
        self.heads
            .find(h, same)
            .map(|&(_, head)| head)
            .unwrap_or(NONE)
    }
}

impl Store {
    fn new(arity: usize) -> Store {
        Store {
            arity,
            count: 0,
            data: Vec::new(),
            members: HashTable::new(),
            indexes: Vec::new(),
        }
    }

    fn from_tensor(t: &Tensor) -> Store {
        let mut s = Store::new(t.rank());
        if let Storage::Relation(r) = &t.storage {
            for tuple in r.iter() {
                s.insert(tuple);
            }
        }
        s
    }

    fn contains(&self, t: &[u32]) -> bool {
        let h = hash_of(t.iter().copied());
        self.members
            .find(h, |&r| row(&self.data, self.arity, r) == t)
            .is_some()
    }

    /// Adds a tuple, updating every index; false if it was already there.
    fn insert(&mut self, t: &[u32]) -> bool {
        let h = hash_of(t.iter().copied());
        let Store {
            arity,
            count,
            data,
            members,
            ..
        } = self;
        if members.find(h, |&r| row(data, *arity, r) == t).is_some() {
            return false;
        }
        members.insert_unique(h, *count, |&x| {
            hash_of(row(data, *arity, x).iter().copied())
        });
        self.push(t);
        true
    }

    /// Appends a tuple known to be new, without the membership table: for the last round's
    /// new tuples, which are only scanned or looked up through an index.
    fn push(&mut self, t: &[u32]) {
        let r = self.count;
        self.count += 1;
        self.data.extend_from_slice(t);
        for ix in self.indexes.iter_mut() {
            ix.add(&self.data, self.arity, r);
        }
    }

    /// Makes sure an index on `cols` exists.
    fn ensure_index(&mut self, cols: &[usize]) {
        if cols.is_empty() || self.index(cols).is_some() {
            return;
        }
        let mut ix = Index {
            cols: cols.to_vec(),
            heads: HashTable::new(),
            next: Vec::with_capacity(self.count as usize),
        };
        for r in 0..self.count {
            ix.add(&self.data, self.arity, r);
        }
        self.indexes.push(ix);
    }

    fn index(&self, cols: &[usize]) -> Option<&Index> {
        self.indexes.iter().find(|ix| ix.cols == cols)
    }

    /// Every row, in insertion order.
    fn rows(&self) -> impl Iterator<Item = &[u32]> {
        (0..self.count).map(|r| row(&self.data, self.arity, r))
    }
}

/// Head tuples derived in one round, flat, with their number (which also covers rank 0).
#[derive(Default)]
struct Derived {
    count: usize,
    values: Vec<u32>,
}

impl Derived {
    /// Records the head tuple of `r` under `env`.
    fn push(&mut self, r: &Rule, env: &[u32]) {
        self.count += 1;
        self.values
            .extend(r.head_terms.iter().map(|t| value(t, env)));
    }
}

/// Which version of a relation an atom reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Version {
    /// All tuples.
    Full(TensorId),
    /// Tuples new in the last round (recursive relations only).
    Delta(TensorId),
}

/// One atom in join order: which columns are looked up, which bind variables.
struct Step {
    version: Version,
    key_cols: Vec<usize>,
    key_terms: Vec<Term>,
    binds: Vec<(usize, usize, bool)>,
}

/// Evaluates a planned stratum in place.
pub(super) fn evaluate_stratum(
    p: &Checked,
    st: &Stratum,
    rules: &[Rule],
    values: &mut [Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
) -> Result<(), Diagnostics> {
    let members = &st.tensors;
    let mut full: HashMap<TensorId, Store> = HashMap::default();
    for &t in members {
        full.insert(t, Store::from_tensor(&values[t]));
    }
    load_atoms(rules, values, &mut full);
    let rounds = st.recursive.then_some(o.max_iters);
    if fixpoint(rules, &mut full, rounds, pool).is_err() {
        return Err(diverged(p, st, o));
    }
    for &t in members {
        if let Some(store) = full.remove(&t) {
            values[t] =
                Tensor::relation_flat(p.tensors[t].shape.clone(), store.data, store.count as usize);
        }
    }
    Ok(())
}

/// Evaluates a query's magic-sets program (`plan::demand`) and leaves the answer relation's
/// tuples in the queried tensor. Every relation the plan reads in full must already be in
/// `values`. `false` when the fixpoint needed more than `--max-iters` rounds, for the caller
/// to fall back on full evaluation (whose iteration count is the one §9 speaks of).
pub(super) fn evaluate_demand(
    p: &Checked,
    plan: &DemandPlan,
    queried: TensorId,
    values: &mut [Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
) -> bool {
    let base = p.tensors.len();
    let mut full: HashMap<TensorId, Store> = HashMap::default();
    for (k, &(arity, origin)) in plan.relations.iter().enumerate() {
        let store = match origin {
            Some(t) => Store::from_tensor(&values[t]),
            None => Store::new(arity),
        };
        full.insert(base + k, store);
    }
    if let Some(magic) = full.get_mut(&plan.seed.0) {
        magic.insert(&plan.seed.1);
    }
    load_atoms(&plan.rules, values, &mut full);
    if fixpoint(&plan.rules, &mut full, Some(o.max_iters), pool).is_err() {
        return false;
    }
    if let Some(store) = full.remove(&plan.answer) {
        values[queried] = Tensor::relation_flat(
            p.tensors[queried].shape.clone(),
            store.data,
            store.count as usize,
        );
    }
    true
}

/// More rounds were needed than allowed.
struct TooManyRounds;

/// Runs `rules` semi-naively until no new tuple appears, adding what they derive to `full`
/// (which holds a store for every relation they read or define). The first round runs every
/// rule on everything; later rounds run each rule once per atom with new tuples, that atom
/// reading only those. `max_rounds` is `None` for rules that are not recursive: one round.
fn fixpoint(
    rules: &[Rule],
    full: &mut HashMap<TensorId, Store>,
    max_rounds: Option<usize>,
    pool: Option<&rayon::ThreadPool>,
) -> Result<(), TooManyRounds> {
    let mut delta: HashMap<TensorId, Store> = HashMap::default();
    let mut new: HashMap<TensorId, Derived> = HashMap::default();
    for r in rules {
        run_rule(r, None, full, &mut delta, &mut new, pool);
    }
    let mut rounds = 1;
    loop {
        delta.clear();
        let mut heads: Vec<TensorId> = new.keys().copied().collect();
        heads.sort_unstable();
        for t in heads {
            let derived = new.remove(&t).unwrap_or_default();
            let Some(store) = full.get_mut(&t) else {
                continue;
            };
            let arity = store.arity;
            let mut fresh = Store::new(arity);
            for k in 0..derived.count {
                let tuple = &derived.values[k * arity..(k + 1) * arity];
                if store.insert(tuple) {
                    fresh.push(tuple);
                }
            }
            if fresh.count > 0 {
                delta.insert(t, fresh);
            }
        }
        let Some(max_rounds) = max_rounds.filter(|_| !delta.is_empty()) else {
            return Ok(());
        };
        if rounds >= max_rounds {
            return Err(TooManyRounds);
        }
        rounds += 1;
        for r in rules {
            for (i, a) in r.atoms.iter().enumerate() {
                if delta.contains_key(&a.tensor) {
                    run_rule(r, Some(i), full, &mut delta, &mut new, pool);
                }
            }
        }
    }
}

/// Adds a store for every relation the rules read that has none yet.
fn load_atoms(rules: &[Rule], values: &[Tensor], full: &mut HashMap<TensorId, Store>) {
    for r in rules {
        for a in r.atoms.iter().chain(&r.negated) {
            full.entry(a.tensor)
                .or_insert_with(|| Store::from_tensor(&values[a.tensor]));
        }
    }
}

/// Evaluates a counting stratum (`plan::datalog::plan_counts`): its data plus one for every
/// assignment that satisfies a body, accumulated as the join enumerates them, so the join is
/// never stored.
pub(super) fn evaluate_counts(p: &Checked, st: &Stratum, rules: &[Rule], values: &mut [Tensor]) {
    let t = st.tensors[0];
    let info = &p.tensors[t];
    let mut full: HashMap<TensorId, Store> = HashMap::default();
    load_atoms(rules, values, &mut full);
    let mut acc = Accumulator::new(info);
    if let Some(d) = &p.data[t] {
        acc.combine_tensor(d);
    }
    let delta = HashMap::default();
    for r in rules {
        let steps = order(r, None, &full);
        for s in &steps {
            if let Version::Full(t) = s.version {
                if let Some(store) = full.get_mut(&t) {
                    store.ensure_index(&s.key_cols);
                }
            }
        }
        let cx = Join {
            rule: r,
            steps: &steps,
            full: &full,
            delta: &delta,
        };
        let mut env = vec![0u32; r.vars];
        let mut idx = vec![0usize; r.head_terms.len()];
        cx.join(0, &mut env, &mut |env| {
            for (slot, t) in idx.iter_mut().zip(&r.head_terms) {
                *slot = value(t, env) as usize;
            }
            acc.combine(&idx, 1.0);
        });
    }
    values[t] = acc.finish(info);
}

fn diverged(p: &Checked, st: &Stratum, o: &EvalOptions) -> Diagnostics {
    super::not_converged(p, st, o.max_iters)
        .with_note("raise --max-iters: each iteration derives facts one step longer")
        .into()
}

/// Runs one rule, with atom `delta_at` reading the last round's new tuples, and collects the
/// head tuples it derives.
fn run_rule(
    r: &Rule,
    delta_at: Option<usize>,
    full: &mut HashMap<TensorId, Store>,
    delta: &mut HashMap<TensorId, Store>,
    out: &mut HashMap<TensorId, Derived>,
    pool: Option<&rayon::ThreadPool>,
) {
    let steps = order(r, delta_at, full);
    for s in &steps {
        let store = match s.version {
            Version::Full(t) => full.get_mut(&t),
            Version::Delta(t) => delta.get_mut(&t),
        };
        if let Some(store) = store {
            store.ensure_index(&s.key_cols);
        }
    }
    let cx = Join {
        rule: r,
        steps: &steps,
        full,
        delta,
    };
    let derived = out.entry(r.head).or_default();
    let first_rows = steps
        .first()
        .and_then(|s| cx.store(s.version))
        .map(|s| s.count as usize)
        .unwrap_or(0);
    let scan_first = steps.first().is_some_and(|s| s.key_cols.is_empty());
    match pool {
        Some(pool) if scan_first && first_rows >= PARALLEL_MIN_ROWS => {
            // Split the first atom's rows among the workers; concatenating their results in
            // chunk order keeps the derivation order the same for every thread count.
            let chunk = first_rows
                .div_ceil(pool.current_num_threads() * 8)
                .max(PARALLEL_MIN_ROWS / 8);
            let starts: Vec<usize> = (0..first_rows).step_by(chunk).collect();
            let parts: Vec<Derived> = pool.install(|| {
                starts
                    .par_iter()
                    .map(|&start| {
                        let mut part = Derived::default();
                        let mut env = vec![0u32; r.vars];
                        cx.scan_first(
                            start as u32..(start + chunk).min(first_rows) as u32,
                            &mut env,
                            &mut |env| part.push(r, env),
                        );
                        part
                    })
                    .collect()
            });
            for part in parts {
                derived.count += part.count;
                derived.values.extend(part.values);
            }
        }
        _ => {
            let mut env = vec![0u32; r.vars];
            cx.join(0, &mut env, &mut |env| derived.push(r, env));
        }
    }
}

/// Below this many rows in the first atom, a rule runs on one thread.
const PARALLEL_MIN_ROWS: usize = 4096;

/// The planned join order for one run of a rule, each step reading the right version.
fn order(r: &Rule, delta_at: Option<usize>, full: &HashMap<TensorId, Store>) -> Vec<Step> {
    let size = |t: TensorId| full.get(&t).map(|s| s.count as usize).unwrap_or(0);
    join_order(r, delta_at, &size)
        .into_iter()
        .map(|j| Step {
            version: if Some(j.atom) == delta_at {
                Version::Delta(r.atoms[j.atom].tensor)
            } else {
                Version::Full(r.atoms[j.atom].tensor)
            },
            key_cols: j.key_cols,
            key_terms: j.key_terms,
            binds: j.binds,
        })
        .collect()
}

fn value(t: &Term, env: &[u32]) -> u32 {
    match t {
        Term::Var(v) => env[*v],
        Term::Const(c) => *c,
    }
}

struct Join<'a> {
    rule: &'a Rule,
    steps: &'a [Step],
    full: &'a HashMap<TensorId, Store>,
    delta: &'a HashMap<TensorId, Store>,
}

impl Join<'_> {
    fn store(&self, v: Version) -> Option<&Store> {
        match v {
            Version::Full(t) => self.full.get(&t),
            Version::Delta(t) => self.delta.get(&t),
        }
    }

    fn join(&self, k: usize, env: &mut [u32], emit: &mut dyn FnMut(&[u32])) {
        let Some(step) = self.steps.get(k) else {
            if self.rule.negated.iter().all(|a| !self.holds(a, env))
                && self.rule.filters.iter().all(|f| passes(f, env))
            {
                emit(env);
            }
            return;
        };
        let Some(store) = self.store(step.version) else {
            return;
        };
        if step.key_cols.is_empty() {
            for this in store.rows() {
                self.bind(k, this, env, emit);
            }
            return;
        }
        let mut buf = [0u32; MAX_STACK_ARITY];
        let mut heap = Vec::new();
        let key = fill(
            &mut buf,
            &mut heap,
            step.key_terms.iter().map(|t| value(t, env)),
            step.key_terms.len(),
        );
        let Some(ix) = store.index(&step.key_cols) else {
            return;
        };
        let mut r = ix.first(&store.data, store.arity, key);
        while r != NONE {
            self.bind(k, row(&store.data, store.arity, r), env, emit);
            r = ix.next[r as usize];
        }
    }

    /// Binds step `k`'s variables from one of its rows (checking repeats) and goes on.
    fn bind(&self, k: usize, this: &[u32], env: &mut [u32], emit: &mut dyn FnMut(&[u32])) {
        for &(c, v, repeat) in &self.steps[k].binds {
            if repeat {
                if env[v] != this[c] {
                    return;
                }
            } else {
                env[v] = this[c];
            }
        }
        self.join(k + 1, env, emit);
    }

    /// Runs the join over rows `rows` of the first atom (which is scanned, not looked up).
    fn scan_first(
        &self,
        rows: std::ops::Range<u32>,
        env: &mut [u32],
        emit: &mut dyn FnMut(&[u32]),
    ) {
        let Some(store) = self.steps.first().and_then(|s| self.store(s.version)) else {
            return;
        };
        for r in rows {
            self.bind(0, row(&store.data, store.arity, r), env, emit);
        }
    }

    fn holds(&self, a: &Atom, env: &[u32]) -> bool {
        let mut buf = [0u32; MAX_STACK_ARITY];
        let mut heap = Vec::new();
        let tuple = fill(
            &mut buf,
            &mut heap,
            a.terms.iter().map(|t| value(t, env)),
            a.terms.len(),
        );
        self.full.get(&a.tensor).is_some_and(|s| s.contains(tuple))
    }
}

/// Keys up to this many columns are built on the stack.
const MAX_STACK_ARITY: usize = 8;

/// The values as a slice, on the stack when they fit.
fn fill<'a>(
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

fn passes(f: &Filter, env: &[u32]) -> bool {
    let get = |o: &Operand| match o {
        Operand::Var(v) => env[*v] as f64,
        Operand::Const(c) => *c,
    };
    f.op.holds(get(&f.left), get(&f.right))
}
