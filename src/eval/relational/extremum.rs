//! Semi-naive `min=`/`max=` recursion (shortest and longest paths), planned by
//! `plan::datalog::plan_extremum`.
//!
//! The reference evaluator iterates X ← F(X) from the data. For these strata F only adds and
//! takes minima (or maxima), so the iterates only improve, and an element of F(X) can differ
//! from X only through a join that uses an element improved in the last round. Each round
//! therefore re-runs every rule once per atom over a stratum tensor, that atom reading only the
//! last round's improvements, and keeps a candidate where it beats the stored value. Rounds
//! correspond one to one with the reference's iterations, so `--max-iters` and `--tol` mean
//! the same; where the reference would report an error (too many rounds, a value that is not
//! finite) this evaluator gives up and the caller runs the reference for its diagnostic.

use super::{halted, prepare, Derived, Earlier, Halt, Join, Store};
use crate::diagnostics::Diagnostics;
use crate::eval::nest::Checker;
use crate::eval::stop::Ticker;
use crate::eval::EvalOptions;
use crate::plan::datalog::ValuedRule;
use crate::semantics::{Checked, Family, Kind, Stratum, TensorId};
use crate::tensor::{Sparse, Tensor};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// Head tuples derived in one round with their candidate values.
#[derive(Default)]
struct Candidates {
    tuples: Derived,
    values: Vec<f64>,
    /// An `int` value f64 might not hold exactly was met (`ValueExpr::eval_exact`).
    inexact: bool,
}

/// Why the rounds stopped without settling: the loop nests then decide the outcome (an
/// error naming the equation, or values the rounds cannot give).
pub(in crate::eval) type Unsettled = &'static str;

/// A value not finite: the loop nests report it or compute what it stands for.
const NOT_FINITE: Unsettled = "semi-naive `min=`/`max=` met a value that is not finite";
/// An integer at or past 2⁵³, which the rounds' f64 may not hold: the nests compute in i64.
const PAST_EXACT: Unsettled =
    "semi-naive `min=`/`max=` met an integer past 2⁵³, which its f64 values do not hold exactly";
/// More rounds than `--max-iters`.
const TOO_MANY_ROUNDS: Unsettled =
    "semi-naive `min=`/`max=` did not settle within --max-iters rounds";

/// Evaluates the stratum in place; why not (with `values` untouched) when the loop nests
/// must decide the outcome, `Err` when the evaluation must stop.
pub(in crate::eval) fn evaluate_extremum(
    p: &Checked,
    st: &Stratum,
    rules: &[ValuedRule],
    values: &mut [Tensor],
    o: &EvalOptions,
) -> Result<Result<(), Unsettled>, Diagnostics> {
    let mut full = stores(st, rules, values);
    // The stratum's own data keeps its values unless improved: f64 must hold them.
    let exact = |t: &TensorId| {
        p.tensors[*t].elem != crate::tensor::ElemType::Int
            || full[t]
                .values
                .iter()
                .all(|&v| crate::tensor::sums_exactly(v))
    };
    if !st.tensors.iter().all(exact) {
        return Ok(Err(PAST_EXACT));
    }
    let improving = Improving {
        p,
        st,
        rules,
        dead: None,
    };
    let none = &mut |_, _, _| {};
    if let Err(why) = improving.rounds((&mut full, HashMap::default()), (values, o), none)? {
        return Ok(Err(why));
    }
    for &t in &st.tensors {
        let Some(store) = full.remove(&t) else {
            continue;
        };
        let info = &p.tensors[t];
        let values_of: Vec<f64> = (0..store.count)
            .map(|r| info.elem.round(store.values[r as usize]))
            .collect();
        values[t] = Tensor::of_sparse(
            info.elem,
            info.shape.clone(),
            Sparse::from_entries(store.arity, store.data, values_of),
        );
    }
    Ok(Ok(()))
}

/// The stores of stratum `st`'s elements and of what its rules read, from `values`.
pub(super) fn stores(
    st: &Stratum,
    rules: &[ValuedRule],
    values: &[Tensor],
) -> HashMap<TensorId, Store> {
    let mut full: HashMap<TensorId, Store> = HashMap::default();
    for &t in &st.tensors {
        full.insert(t, Store::from_valued(&values[t]));
    }
    for a in rules.iter().flat_map(|vr| &vr.rule.atoms) {
        full.entry(a.tensor)
            .or_insert_with(|| Store::from_valued(&values[a.tensor]));
    }
    full
}

/// Rows of the stores that no longer hold (their tuples were removed by a commit), per
/// tensor: joins pass over them.
pub(super) type Dead = HashMap<TensorId, HashSet<u32>>;

/// A stratum's rules improving its elements round by round.
pub(super) struct Improving<'a> {
    pub(super) p: &'a Checked,
    pub(super) st: &'a Stratum,
    pub(super) rules: &'a [ValuedRule],
    /// Rows the joins pass over (kept stores after removals).
    pub(super) dead: Option<&'a Dead>,
}

/// A candidate of one head element: its tensor, positions and value.
pub(super) type Candidate = (TensorId, Vec<u32>, f64);

/// Called with each improved element: its tensor, its row, and its value before (`None`
/// for a new element).
pub(super) type OnImproved<'a> = dyn FnMut(TensorId, u32, Option<f64>) + 'a;

impl Improving<'_> {
    /// The candidates of every rule instance that reads a row of `delta` (each rule run
    /// once per atom over a tensor of `delta`, the others reading `full`): what a removal
    /// of those rows takes away.
    pub(super) fn candidates(
        &self,
        (full, mut delta): (&mut HashMap<TensorId, Store>, HashMap<TensorId, Store>),
        (values, o): (&[Tensor], &EvalOptions),
    ) -> Result<Result<Vec<Candidate>, Unsettled>, Diagnostics> {
        let open = crate::eval::open::Open::of(self.p);
        let checker = Checker {
            values,
            o,
            open: open.as_ref(),
        };
        let mut found: HashMap<TensorId, Candidates> = HashMap::default();
        for vr in self.rules {
            for (i, a) in vr.rule.atoms.iter().enumerate() {
                if delta.contains_key(&a.tensor) {
                    let sides = (&mut *full, &mut delta);
                    if run(vr, Some(i), sides, &mut found, (checker, self.dead)).is_err() {
                        return Err(halted(self.p, self.st, o, Halt::Stopped));
                    }
                }
            }
        }
        let mut out = Vec::new();
        if found.values().any(|c| c.inexact) {
            return Ok(Err(PAST_EXACT));
        }
        for (t, c) in found {
            let arity = c
                .tuples
                .values
                .len()
                .checked_div(c.values.len())
                .unwrap_or(0);
            for (k, &v) in c.values.iter().enumerate() {
                out.push((t, c.tuples.values[k * arity..(k + 1) * arity].to_vec(), v));
            }
        }
        Ok(Ok(out))
    }

    /// Runs rounds until nothing improves, over `full`. With an empty `delta` the first round
    /// runs every rule whole; otherwise `delta` holds changed elements of the tensors the
    /// rules read (their last rows in `full`), and every round runs each rule once per atom
    /// with changes. Why not when the caller must decide (a value not finite, more rounds
    /// than `--max-iters`).
    pub(super) fn rounds(
        &self,
        (full, mut delta): (&mut HashMap<TensorId, Store>, HashMap<TensorId, Store>),
        (values, o): (&[Tensor], &EvalOptions),
        improved_at: &mut OnImproved,
    ) -> Result<Result<(), Unsettled>, Diagnostics> {
        let (p, st) = (self.p, self.st);
        let open = crate::eval::open::Open::of(p);
        let checker = Checker {
            values,
            o,
            open: open.as_ref(),
        };
        let family = p.tensors[st.tensors[0]].family;
        let better = |new: f64, old: f64| match family {
            Family::Min => new < old || (old.is_nan() && !new.is_nan()),
            _ => new > old || (old.is_nan() && !new.is_nan()),
        };
        let mut rounds = 0;
        let whole_first = delta.is_empty();
        loop {
            rounds += 1;
            let mut candidates: HashMap<TensorId, Candidates> = HashMap::default();
            for vr in self.rules {
                let atoms = vr.rule.atoms.iter().enumerate();
                let delta_ats: Vec<Option<usize>> = if rounds == 1 && whole_first {
                    vec![None]
                } else {
                    atoms
                        .filter(|(_, a)| delta.contains_key(&a.tensor))
                        .map(|(i, _)| Some(i))
                        .collect()
                };
                for at in delta_ats {
                    let sides = (&mut *full, &mut delta);
                    if run(vr, at, sides, &mut candidates, (checker, self.dead)).is_err() {
                        return Err(halted(p, st, o, Halt::Stopped));
                    }
                }
            }
            delta.clear();
            let mut converged = true;
            for &t in &st.tensors {
                let Some(found) = candidates.remove(&t) else {
                    continue;
                };
                if found.inexact {
                    return Ok(Err(PAST_EXACT));
                }
                let Some(store) = full.get_mut(&t) else {
                    continue;
                };
                let info = &p.tensors[t];
                let tol = if info.kind == Kind::Real { o.tol } else { 0.0 };
                let arity = store.arity;
                let mut improved: Vec<u32> = Vec::new();
                for (k, &v) in found.values.iter().enumerate() {
                    let v = info.elem.round(v);
                    if !v.is_finite() {
                        return Ok(Err(NOT_FINITE));
                    }
                    let tuple = &found.tuples.values[k * arity..(k + 1) * arity];
                    match store.position(tuple) {
                        Some(r) => {
                            let old = store.values[r as usize];
                            if better(v, old) {
                                converged &= (v - old).abs() <= tol;
                                improved_at(t, r, Some(old));
                                store.values[r as usize] = v;
                                improved.push(r);
                            }
                        }
                        None => {
                            converged = false;
                            improved_at(t, store.count, None);
                            improved.push(store.count);
                            store.insert(tuple);
                            store.values.push(v);
                        }
                    }
                }
                if let Some(fresh) = rows_of(store, improved) {
                    delta.insert(t, fresh);
                }
            }
            if converged || delta.is_empty() || !st.recursive {
                return Ok(Ok(()));
            }
            if rounds >= o.max_iters {
                return Ok(Err(TOO_MANY_ROUNDS));
            }
            if o.stop.requested() {
                return Err(halted(p, st, o, Halt::Stopped));
            }
        }
    }
}

/// The rows `rows` of `store` (each once, in order) with their values, as the next round's
/// delta; `None` for no rows.
fn rows_of(store: &Store, mut rows: Vec<u32>) -> Option<Store> {
    rows.sort_unstable();
    rows.dedup();
    if rows.is_empty() {
        return None;
    }
    let mut fresh = Store::new(store.arity);
    for r in rows {
        fresh.push(super::store::row(&store.data, store.arity, r));
        fresh.values.push(store.values[r as usize]);
    }
    Some(fresh)
}

/// Runs one rule, with atom `delta_at` reading the last round's improvements, and collects
/// its head tuples with their values; `Err` when the evaluation must stop.
fn run(
    vr: &ValuedRule,
    delta_at: Option<usize>,
    (full, delta): (&mut HashMap<TensorId, Store>, &mut HashMap<TensorId, Store>),
    out: &mut HashMap<TensorId, Candidates>,
    (checker, dead): (Checker, Option<&Dead>),
) -> Result<(), Halt> {
    let r = &vr.rule;
    let steps = prepare(r, (delta_at, Earlier::Full), (full, delta), checker.values);
    let cx = Join::new(r, &steps, (full, delta), checker);
    let stores: Vec<Option<&Store>> = (0..steps.len()).map(|k| cx.step_store(k)).collect();
    let mut step_of = vec![0usize; r.atoms.len()];
    for (k, s) in steps.iter().enumerate() {
        step_of[s.atom] = k;
    }
    // Per step reading a whole store, the rows of it that no longer hold.
    let gone: Vec<Option<&HashSet<u32>>> = steps
        .iter()
        .map(|s| match s.version {
            super::join::Version::Full(t) => dead.and_then(|d| d.get(&t)),
            super::join::Version::Delta(_) => None,
        })
        .collect();
    let found = out.entry(r.head).or_default();
    let exact = checker.values[r.head].elem == crate::tensor::ElemType::Int;
    // A variable of an open column holds its value's handle (§8), others their position.
    let tables = super::join::rule_tables(r, &checker);
    let mut walk = cx.walk();
    let mut ticks = Ticker::new(&checker.o.stop);
    let mut keep = |env: &[u32]| {
        let held =
            |k: usize, g: &Option<&HashSet<u32>>| g.is_none_or(|g| !g.contains(&env[r.vars + k]));
        if !gone.iter().enumerate().all(|(k, g)| held(k, g)) {
            return;
        }
        let atom_value = |j: usize| {
            let k = step_of[j];
            stores[k].map_or(0.0, |s| s.value(env[r.vars + k]))
        };
        let var_value = |v: usize| match tables.get(v).copied().flatten() {
            Some(t) => t.value(env[v]) as f64,
            None => f64::from(env[v]),
        };
        let value = match exact {
            true => vr
                .value
                .eval_exact(&atom_value, &var_value)
                .unwrap_or_else(|| {
                    found.inexact = true;
                    0.0
                }),
            false => vr.value.eval(&atom_value, &var_value),
        };
        found.values.push(value);
        found.tuples.push(r, env);
    };
    cx.join(0, &mut walk, &mut keep, &mut ticks);
    match ticks.stopped() {
        true => Err(Halt::Stopped),
        false => Ok(()),
    }
}
