//! Semi-naive evaluation of Datalog-shaped strata (planned by `plan::datalog`): relations as
//! tuple sets with hash indexes on the columns each join looks up, maintained as tuples
//! arrive, and every recursive rule re-run once per recursive atom reading only the tuples new
//! in the last round.
//!
//! It must agree with the reference evaluator exactly; `tests/engines.rs` checks that on
//! random programs.

use super::accumulate::Accumulator;
use super::nest::Checker;
use super::stop::Ticker;
use super::EvalOptions;
use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::plan::datalog::{Product, Rule};
use crate::plan::demand::DemandPlan;
use crate::plan::schedule::RULE_ROWS;
use crate::semantics::{Checked, Stratum, TensorId};
use crate::tensor::Tensor;
use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

mod bitset;
mod extremum;
mod index;
mod join;
mod kept;
mod kept_closure;
mod kept_extremum;
mod members;
mod product;
mod store;
mod wcoj;

pub(super) use extremum::evaluate_extremum;
pub(super) use join::{bind_lets, passes, Lets};
use join::{prepare, value, Earlier, Join};
pub(super) use kept::{Kept, Update};
pub(super) use kept_closure::KeptClosure;
pub(super) use kept_extremum::KeptExtremum;
use store::Store;

/// The rules whose independent groups of atoms (`plan::datalog::Rule::exists`) each have
/// an assignment, without those groups; the others derive nothing here. Each group is
/// joined once, however many rounds the stratum takes.
fn existing(
    rules: &[Rule],
    full: &mut HashMap<TensorId, Store>,
    run: Run,
) -> Result<Vec<Rule>, Halt> {
    let mut kept = Vec::with_capacity(rules.len());
    'rules: for r in rules {
        for group in &r.exists {
            let probe = Rule {
                head_terms: Vec::new(),
                atoms: group.clone(),
                negated: Vec::new(),
                absent: Vec::new(),
                filters: Vec::new(),
                checks: Vec::new(),
                lets: Vec::new(),
                exists: Vec::new(),
                ..r.clone()
            }
            .planned();
            load_atoms(std::slice::from_ref(&probe), run.0.values, full);
            let mut found = HashMap::default();
            run_rule(
                &probe,
                None,
                (full, &mut HashMap::default()),
                &mut found,
                run,
            )?;
            if found.get(&r.head).is_none_or(|d: &Derived| d.count == 0) {
                continue 'rules;
            }
        }
        kept.push(Rule {
            exists: Vec::new(),
            ..r.clone()
        });
    }
    Ok(kept)
}

/// Head tuples derived in one round, flat, with their number (which also covers rank 0).
#[derive(Default)]
struct Derived {
    count: usize,
    values: Vec<u32>,
    /// `values` before this index have been checked against the known tuples.
    checked: usize,
}

impl Derived {
    /// Records the head tuple of `r` under `env`.
    fn push(&mut self, r: &Rule, env: &[u32]) {
        self.count += 1;
        self.values
            .extend(r.head_terms.iter().map(|t| value(t, env)));
    }

    /// Adds another batch's tuples after this one's.
    fn append(&mut self, other: Derived) {
        self.count += other.count;
        self.values.extend(other.values);
    }

    /// Records the head tuple of `r` under `env`, dropping, every [`FILTER_EVERY`] tuples,
    /// those that `known` already has: most derivations repeat tuples known before the round,
    /// and buffering them all can take far more memory than the relation itself. Checking in
    /// batches keeps the probes in a tight loop, as fast as checking them later. Sets `full`
    /// once the new tuples take more than `limit` bytes (§15: the join then stops).
    fn push_unknown(
        &mut self,
        r: &Rule,
        env: &[u32],
        known: Option<&Store>,
        (limit, full): (u64, &std::cell::Cell<bool>),
    ) {
        self.push(r, env);
        let arity = r.head_terms.len();
        if self.values.len() - self.checked < FILTER_EVERY * arity.max(1) {
            return;
        }
        if let Some(known) = known.filter(|_| arity > 0) {
            let kept = self.checked + known.retain_unknown(&mut self.values[self.checked..]);
            self.values.truncate(kept);
            self.count = kept / arity;
        }
        self.checked = self.values.len();
        // The buffer (which may be twice its length), then the store the tuples go into: rows,
        // membership and an index, about three times the tuples again.
        if self.values.capacity() as u64 * 4 * BUFFER_FACTOR > limit {
            full.set(true);
        }
    }
}

/// The memory that new tuples come to take, per byte of their buffer's capacity: the buffer
/// itself (up to twice its length) and, once they are in the store, about three times their
/// bytes again. A round's buffer is stopped at the budget over this.
const BUFFER_FACTOR: u64 = 4;

/// How many derived tuples accumulate between checks against the known ones.
const FILTER_EVERY: usize = 1 << 14;

/// Evaluates a planned stratum in place.
pub(super) fn evaluate_stratum(
    p: &Checked,
    st: &Stratum,
    (rules, chains): (&[Rule], &Option<Vec<crate::plan::chains::Chain>>),
    values: &mut [Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
) -> Result<(), Diagnostics> {
    let rounds = st
        .recursive
        .then(|| super::fixpoint::join_round_cap(p, st, o.max_iters));
    let members = &st.tensors;
    let mut full: HashMap<TensorId, Store> = HashMap::default();
    for &t in members {
        full.insert(t, Store::from_tensor(&values[t]));
    }
    let open = super::open::Open::of(p);
    let checker = Checker {
        values,
        o,
        open: open.as_ref(),
    };
    let rules = &existing(rules, &mut full, (checker, pool)).map_err(|h| halted(p, st, o, h))?;
    load_atoms(rules, values, &mut full);
    // Rules that are products of binary relations move to bit matrices once a relation is
    // dense enough that a row of bits is smaller than its pairs as tuples would be.

    let side = chains
        .as_ref()
        .filter(|_| st.recursive)
        .and_then(|c| bitset::side(p, st, c, o.max_memory));
    let dense = |full: &HashMap<TensorId, Store>| {
        side.is_some_and(|n| {
            let cells = n * n.div_ceil(64) / 4;
            members
                .iter()
                .any(|t| full.get(t).is_some_and(|s| s.count as usize >= cells))
        })
    };
    if o.provenance.is_some() {
        for t in members {
            if let Some(s) = full.get_mut(t) {
                s.note_rounds();
            }
        }
    }
    let outcome = fixpoint(rules, &mut full, rounds, &dense, (checker, pool));
    if let Some(d) = open.as_ref().and_then(|o| o.overflow()) {
        return Err(d.into());
    }
    match outcome {
        Err(halt) => return Err(halted(p, st, o, halt)),
        Ok(Some((delta, done))) => {
            if let (Some(chains), Some(n)) = (&chains, side) {
                let state = bitset::State {
                    n,
                    full: &full,
                    delta: &delta,
                    rounds: done,
                    stop: &o.stop,
                };
                return match bitset::evaluate_bitsets(p, st, chains, state, values, rounds, pool) {
                    Ok(()) => Ok(()),
                    Err(halt) => Err(halted(p, st, o, halt)),
                };
            }
        }
        Ok(None) => {}
    }
    for &t in members {
        if let Some(store) = full.remove(&t) {
            if let (Some(rec), Some(rounds)) = (&o.provenance, store.rounds()) {
                rec.record(t, rounds);
            }
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
        for seed in &plan.seed.1 {
            magic.insert(seed);
        }
    }
    let open = super::open::Open::of(p);
    let checker = Checker {
        values,
        o,
        open: open.as_ref(),
    };
    let run = (checker, pool);
    let Ok(rules) = existing(&plan.rules, &mut full, run) else {
        return false;
    };
    load_atoms(&rules, values, &mut full);
    if fixpoint(&rules, &mut full, Some(o.max_iters), &|_| false, run).is_err() {
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

/// What running a rule needs besides its relations: the checker of its value checks, and
/// the workers.
type Run<'a> = (Checker<'a>, Option<&'a rayon::ThreadPool>);

/// Whether a fixpoint should stop after a round for its caller to go on another way.
type Switch<'a> = &'a dyn Fn(&HashMap<TensorId, Store>) -> bool;

/// Where [`fixpoint`] stopped early: the last round's new tuples, and the rounds run.
type Stopped = (HashMap<TensorId, Store>, usize);

/// Why a semi-naive fixpoint ended before its last round.
pub(super) enum Halt {
    /// More rounds were needed than `--max-iters` allows.
    TooManyRounds,
    /// `--timeout` or Ctrl-C asked it to stop.
    Stopped,
    /// The relations' tuples would take more than `--max-memory` (§15).
    Memory,
}

/// Runs `rules` semi-naively until no new tuple appears, adding what they derive to `full`
/// (which holds a store for every relation they read or define). The first round runs every
/// rule on everything; later rounds run each rule once per atom with new tuples, that atom
/// reading only those. `max_rounds` is `None` for rules that are not recursive: one round.
/// When `switch` says so after a round, it stops early and returns that round's new tuples
/// and the number of rounds run, for the caller to go on another way.
fn fixpoint(
    rules: &[Rule],
    full: &mut HashMap<TensorId, Store>,
    max_rounds: Option<usize>,
    switch: &dyn Fn(&HashMap<TensorId, Store>) -> bool,
    run: Run,
) -> Result<Option<Stopped>, Halt> {
    let mut new: HashMap<TensorId, Derived> = HashMap::default();
    for r in rules {
        run_rule(r, None, (full, &mut HashMap::default()), &mut new, run)?;
    }
    settle(rules, full, new, (max_rounds, switch), run)
}

/// Goes on from a round that derived `new`: adds its tuples to `full`, then runs each rule
/// once per atom with new tuples until a round adds nothing (as [`fixpoint`] describes).
fn settle(
    rules: &[Rule],
    full: &mut HashMap<TensorId, Store>,
    mut new: HashMap<TensorId, Derived>,
    (max_rounds, switch): (Option<usize>, Switch),
    run: Run,
) -> Result<Option<Stopped>, Halt> {
    let mut delta: HashMap<TensorId, Store> = HashMap::default();
    let mut rounds = 1;
    // The stores that note their rounds (`--provenance`); each ends its rounds alone.
    let noting: Vec<TensorId> = full
        .iter()
        .filter(|(_, s)| s.marks.is_some())
        .map(|(t, _)| *t)
        .collect();
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
        for t in &noting {
            if let Some(s) = full.get_mut(t) {
                s.end_round();
            }
        }
        let Some(max_rounds) = max_rounds.filter(|_| !delta.is_empty()) else {
            return Ok(None);
        };
        if rounds >= max_rounds {
            return Err(Halt::TooManyRounds);
        }
        if run.0.o.stop.requested() {
            return Err(Halt::Stopped);
        }
        let held = full.values().fold(0u64, |a, s| a.saturating_add(s.bytes()));
        if held > run.0.o.max_memory {
            return Err(Halt::Memory);
        }
        if switch(full) {
            return Ok(Some((delta, rounds)));
        }
        rounds += 1;
        for r in rules {
            for (i, a) in r.atoms.iter().enumerate() {
                if delta.contains_key(&a.tensor) {
                    run_rule(r, Some(i), (full, &mut delta), &mut new, run)?;
                }
            }
        }
    }
}

/// Adds a store for every relation the rules read that has none yet.
fn load_atoms(rules: &[Rule], values: &[Tensor], full: &mut HashMap<TensorId, Store>) {
    for r in rules {
        let absent = r.absent.iter().map(|a| a.tensor);
        for t in r
            .atoms
            .iter()
            .chain(&r.negated)
            .map(|a| a.tensor)
            .chain(absent)
        {
            full.entry(t)
                .or_insert_with(|| Store::from_tensor(&values[t]));
        }
    }
}

/// Evaluates a counting stratum (`plan::datalog::plan_counts`): its data plus one for every
/// assignment that satisfies a body, accumulated as the join enumerates them, so the join is
/// never stored.
/// A tensor that `sparse` marks (`plan::Plan::sparse`) is accumulated and stored as its
/// non-zero elements.
pub(super) fn evaluate_counts(
    p: &Checked,
    st: &Stratum,
    rules: &[(Rule, Option<Product>)],
    values: &mut [Tensor],
    sparse: &[bool],
    (o, pool): (&EvalOptions, Option<&rayon::ThreadPool>),
) -> Result<(), Diagnostics> {
    let t = st.tensors[0];
    let info = &p.tensors[t];
    // One sparse product, the whole count: its sorted result is the tensor as it comes.
    if let ([(r, Some(m))], Some(true)) = (rules, sparse.get(t)) {
        if let Some((keys, counts)) = product_of(p, r, *m, values, pool) {
            let positions = crate::tensor::Relation::from_sorted(2, keys);
            let counts = counts.into_iter().map(|n| info.elem.round(n)).collect();
            values[t] = Tensor::of_sparse(
                info.elem,
                info.shape.clone(),
                crate::tensor::Sparse::from_sorted(positions, counts).with_zeros(),
            );
            return Ok(());
        }
    }
    // Only rules that run as joins need their relations indexed (loaded when reached).
    let mut full: HashMap<TensorId, Store> = HashMap::default();
    let open = super::open::Open::of(p);
    let mut acc = if sparse.get(t) == Some(&true) {
        Accumulator::entries(info)
    } else {
        Accumulator::new(info)
    }
    .within(values, o.max_memory);
    if let Some(d) = &p.data[t] {
        acc.combine_tensor(d);
    }
    let delta = HashMap::default();
    for (r, product) in rules {
        if let Some(runs) = run_lengths(r, values) {
            for (prefix, n) in runs {
                let idx: Vec<usize> = prefix.iter().map(|&i| i as usize).collect();
                acc.combine(&idx, n);
            }
            continue;
        }
        if let Some((keys, counts)) = product.and_then(|m| product_of(p, r, m, values, pool)) {
            for (k, n) in keys.chunks_exact(2).zip(counts) {
                acc.combine(&[k[0] as usize, k[1] as usize], n);
            }
            continue;
        }
        load_atoms(std::slice::from_ref(r), values, &mut full);
        let checker = Checker {
            values,
            o,
            open: open.as_ref(),
        };
        let steps = prepare(
            r,
            (None, Earlier::Full),
            (&mut full, &mut HashMap::default()),
            checker.values,
        );
        let cx = Join::new(r, &steps, (&full, &delta), checker);
        let mut walk = cx.walk();
        let mut idx = vec![0usize; r.head_terms.len()];
        let mut ticks = Ticker::new(&o.stop);
        let mut count = |env: &[u32]| {
            for (slot, t) in idx.iter_mut().zip(&r.head_terms) {
                *slot = value(t, env) as usize;
            }
            acc.combine(&idx, 1.0);
        };
        cx.join(0, &mut walk, &mut count, &mut ticks);
        if ticks.stopped() {
            return Err(halted(p, st, o, Halt::Stopped));
        }
        if let Some(d) = open.as_ref().and_then(|o| o.overflow()) {
            return Err(d.into());
        }
    }
    if let Some(d) = acc.outgrew(info, o.max_memory) {
        return Err(d.into());
    }
    values[t] = acc.finish(info);
    Ok(())
}

/// The counts of a rule that counts one relation's tuples by a prefix of their positions
/// (`plan::datalog::run_lengths`), as (prefix, run length) in ascending order: one pass
/// over the sorted tuples, no index built.
fn run_lengths(r: &Rule, values: &[Tensor]) -> Option<Vec<(Vec<u32>, f64)>> {
    if !crate::plan::datalog::run_lengths(r) {
        return None;
    }
    let crate::tensor::Storage::Relation(rel) = &values[r.atoms[0].tensor].storage else {
        return None;
    };
    let k = r.head_terms.len();
    let mut out: Vec<(Vec<u32>, f64)> = Vec::new();
    if k == 0 {
        out.push((Vec::new(), rel.len() as f64));
        return Some(out);
    }
    for t in rel.iter() {
        match out.last_mut() {
            Some((prefix, n)) if prefix.as_slice() == &t[..k] => *n += 1.0,
            _ => out.push((t[..k].to_vec(), 1.0)),
        }
    }
    Some(out)
}

/// The counts of a rule planned as a sparse matrix product, when both of its relations are
/// stored as tuples.
fn product_of(
    p: &Checked,
    r: &Rule,
    m: Product,
    values: &[Tensor],
    pool: Option<&rayon::ThreadPool>,
) -> Option<(Vec<u32>, Vec<f64>)> {
    let relation = |k: usize| match &values[r.atoms[k].tensor].storage {
        crate::tensor::Storage::Relation(rel) => Some(rel),
        _ => None,
    };
    let (a, b) = (relation(m.first)?, relation(m.second)?);
    let c_extent = *p.tensors[r.atoms[m.second].tensor].shape.get(1)?;
    Some(product::product(a, b, c_extent, pool))
}

fn halted(p: &Checked, st: &Stratum, o: &EvalOptions, halt: Halt) -> Diagnostics {
    match halt {
        Halt::TooManyRounds => super::fixpoint::recursion_unsettled(
            p,
            st,
            super::fixpoint::join_round_cap(p, st, o.max_iters),
        )
        .with_note(match super::fixpoint::holds_values(p, st) {
            false => "raise --max-iters: each iteration derives facts one step longer".to_string(),
            true => format!(
                "it kept computing new values; raise --max-iters if it is meant to (a join over values takes {} rounds per iteration)",
                super::fixpoint::VALUE_ROUNDS_PER_ITERATION
            ),
        })
        .into(),
        Halt::Stopped => {
            let span = st.equations.first().map(|&e| p.equations[e].span);
            o.stop.error(span.unwrap_or_default()).into()
        }
        Halt::Memory => over_budget(p, st, o).into(),
    }
}

/// E0601 for a stratum whose relations outgrew the memory budget while they were derived.
fn over_budget(p: &Checked, st: &Stratum, o: &EvalOptions) -> Diagnostic {
    let span = st.equations.first().map(|&e| p.equations[e].span);
    let names: Vec<String> = st
        .tensors
        .iter()
        .map(|&t| format!("`{}`", p.tensors[t].name))
        .collect();
    Diagnostic::error(
        codes::MEMORY,
        span.unwrap_or_default(),
        format!(
            "deriving {} would take more than the memory budget of {}",
            names.join(", "),
            crate::semantics::budget::bytes(o.max_memory as u128)
        ),
    )
    .with_label("this stratum's tuples outgrew it")
    .with_note(
        "a join of unrelated atoms multiplies their sizes: check that the rule's atoms share \
         variables, narrow it with a constant or a query (`tl query`), or raise --max-memory",
    )
}

/// Runs one rule, with atom `delta_at` reading the last round's new tuples, and collects the
/// head tuples it derives; `Err` when the evaluation must stop.
fn run_rule(
    r: &Rule,
    delta_at: Option<usize>,
    stores: (&mut HashMap<TensorId, Store>, &mut HashMap<TensorId, Store>),
    out: &mut HashMap<TensorId, Derived>,
    run: Run,
) -> Result<(), Halt> {
    run_rule_reading(r, (delta_at, Earlier::Old), stores, out, run)
}

/// [`run_rule`], the atoms before `delta_at` read as `earlier` says.
fn run_rule_reading(
    r: &Rule,
    (delta_at, earlier): (Option<usize>, Earlier),
    (full, delta): (&mut HashMap<TensorId, Store>, &mut HashMap<TensorId, Store>),
    out: &mut HashMap<TensorId, Derived>,
    (checker, pool): Run,
) -> Result<(), Halt> {
    if r.cyclic {
        let plan = wcoj::prepare_generic(r, delta_at, full, delta);
        let found = wcoj::GenericJoin::new(r, plan, (full, delta), checker).derive(pool)?;
        out.entry(r.head).or_default().append(found);
        return Ok(());
    }
    let stop = &checker.o.stop;
    let limit = checker.o.max_memory;
    let steps = prepare(r, (delta_at, earlier), (full, delta), checker.values);
    let cx = Join::new(r, &steps, (full, delta), checker);
    let derived = out.entry(r.head).or_default();
    let known = full.get(&r.head);
    let first_rows = match cx.step_store(0) {
        Some(_) => steps.first().map_or(0, |s| s.rows() as usize),
        None => 0,
    };
    let scan_first = steps.first().is_some_and(|s| s.key_cols.is_empty());
    match pool {
        Some(pool) if scan_first && first_rows >= RULE_ROWS.at => {
            // Split the first atom's rows among the workers; concatenating their results in
            // chunk order keeps the derivation order the same for every thread count.
            let chunk = first_rows
                .div_ceil(pool.current_num_threads() * 8)
                .max(RULE_ROWS.at / 8);
            let starts: Vec<usize> = (0..first_rows).step_by(chunk).collect();
            let parts: Vec<Result<Derived, Halt>> = pool.install(|| {
                starts
                    .par_iter()
                    .map(|&start| {
                        let mut part = Derived::default();
                        let mut walk = cx.walk();
                        let full = std::cell::Cell::new(false);
                        let mut ticks = Ticker::new(stop).watching(&full);
                        let share = (limit / pool.current_num_threads() as u64, &full);
                        cx.scan_first(
                            start as u32..(start + chunk).min(first_rows) as u32,
                            &mut walk,
                            &mut |env| part.push_unknown(r, env, known, share),
                            &mut ticks,
                        );
                        match (full.get(), ticks.stopped()) {
                            (true, _) => Err(Halt::Memory),
                            (false, true) => Err(Halt::Stopped),
                            (false, false) => Ok(part),
                        }
                    })
                    .collect()
            });
            for part in parts {
                derived.append(part?);
            }
        }
        _ => {
            let mut walk = cx.walk();
            let full = std::cell::Cell::new(false);
            let mut ticks = Ticker::new(stop).watching(&full);
            cx.join(
                0,
                &mut walk,
                &mut |env| derived.push_unknown(r, env, known, (limit, &full)),
                &mut ticks,
            );
            if full.get() {
                return Err(Halt::Memory);
            }
            if ticks.stopped() {
                return Err(Halt::Stopped);
            }
        }
    }
    Ok(())
}
