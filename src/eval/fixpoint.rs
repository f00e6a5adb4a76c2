//! What every evaluator's fixpoint iteration (§9) shares: how far an iterate moved, whether
//! it blew up, and the diagnostics for a recursion that diverges or does not settle, so that
//! the engines report the same errors.

use super::EvalOptions;
use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::semantics::{Checked, Kind, Stratum, TensorId};
use crate::tensor::{Storage, Tensor};

/// Iterates X ← F(X) from the current values until no tensor of the stratum moves by more
/// than its [`tolerance`] (§9), within [`iteration_cap`] iterations: the Jacobi iteration the
/// reference and the loop nests share, so they stop, and fail, alike. `next(iteration,
/// values)` computes every tensor of the stratum, in `st.tensors` order, from the last
/// iterate.
pub(crate) fn jacobi(
    p: &Checked,
    st: &Stratum,
    values: &mut [Tensor],
    o: &EvalOptions,
    mut next: impl FnMut(usize, &[Tensor]) -> Result<Vec<Tensor>, Diagnostics>,
) -> Result<(), Diagnostics> {
    let mut last_change = 0.0;
    let cap = iteration_cap(p, st, o.max_iters);
    for iteration in 0..cap {
        super::stop::check(p, st, &o.stop)?;
        let next = next(iteration, values)?;
        let mut converged = true;
        last_change = 0.0f64;
        for (&t, new) in st.tensors.iter().zip(next) {
            if let Some(bad) = blew_up(&values[t], &new) {
                return Err(diverged(p, st, t, bad).into());
            }
            match change(&values[t], &new) {
                Some(c) if c <= tolerance(p, t, o) => {}
                Some(c) => {
                    converged = false;
                    last_change = last_change.max(c);
                }
                None => {
                    converged = false;
                    last_change = f64::INFINITY;
                }
            }
            values[t] = new;
        }
        if converged {
            return Ok(());
        }
    }
    Err(not_converged(p, st, cap, last_change).into())
}

/// The largest change at which tensor `t` counts as settled: `--tol` for real tensors, none
/// for Boolean and integer ones (they must stop changing exactly).
pub(crate) fn tolerance(p: &Checked, t: TensorId, o: &EvalOptions) -> f64 {
    if p.tensors[t].kind == Kind::Real {
        o.tol
    } else {
        0.0
    }
}

/// The most iterations recursive component `st` may take (§9): `--max-iters`, or for a
/// component of Boolean tensors only, at least one more than the elements they can hold.
/// Such a component only ever adds elements within finite extents, so it settles within
/// that many iterations however long its chains are (`Nat(x + 1) :- Nat(x), x < 100000`
/// takes 100,001), and the cap still ends one that does not.
pub(crate) fn iteration_cap(p: &Checked, st: &Stratum, max_iters: usize) -> usize {
    // A relation with an open column (§8) has no number of cells that bounds its rounds, and
    // a round that visits every value it holds (loop nests, the reference) costs more each
    // time: `--max-iters` ends a recursion that never does within seconds.
    if holds_values(p, st) {
        return max_iters;
    }
    join_round_cap(p, st, max_iters)
}

/// Rounds a semi-naive join over open columns may take for each `--max-iters` iteration.
/// Such a round costs what it derives (a million rounds of one tuple each take about half a
/// second), so the default's ten million rounds run any value recursion a program means
/// (a loop of a million steps) and end one that never stops within seconds, where the
/// memory budget alone would take minutes.
pub(crate) const VALUE_ROUNDS_PER_ITERATION: usize = 1000;

/// Whether a relation of the component has an open column (§8).
pub(crate) fn holds_values(p: &Checked, st: &Stratum) -> bool {
    st.tensors.iter().any(|&t| {
        let info = &p.tensors[t];
        info.domains.iter().any(|&d| p.domains[d].is_open())
    })
}

/// The rounds a semi-naive join fixpoint may run: as [`iteration_cap`], but for relations
/// with open columns [`VALUE_ROUNDS_PER_ITERATION`] per iteration; one that derives ever
/// more tuples per round meets the memory budget (§15) first, which counts the tuples as
/// they are derived.
pub(crate) fn join_round_cap(p: &Checked, st: &Stratum, max_iters: usize) -> usize {
    if holds_values(p, st) {
        return max_iters.saturating_mul(VALUE_ROUNDS_PER_ITERATION);
    }
    if !st.tensors.iter().all(|&t| p.tensors[t].kind == Kind::Bool) {
        return max_iters;
    }
    let cells = st.tensors.iter().fold(0usize, |sum, &t| {
        let size = p.tensors[t]
            .shape
            .iter()
            .fold(1usize, |a, &n| a.saturating_mul(n));
        sum.saturating_add(size)
    });
    max_iters.max(cells.saturating_add(1))
}

/// A non-finite value that appeared where the previous iterate was finite.
pub(crate) fn blew_up(old: &Tensor, new: &Tensor) -> Option<f64> {
    let (Storage::Dense(a), Storage::Dense(b)) = (&old.storage, &new.storage) else {
        let bad = new
            .entries()
            .into_iter()
            .map(|(_, v)| v)
            .find(|v| !v.is_finite())?;
        return old
            .entries()
            .iter()
            .all(|(_, v)| v.is_finite())
            .then_some(bad);
    };
    a.to_f64()
        .iter()
        .zip(b.to_f64().iter())
        .find(|(x, y)| x.is_finite() && !y.is_finite())
        .map(|(_, y)| *y)
}

/// Largest absolute change between two values of one tensor; `None` if the defined elements
/// differ.
pub(crate) fn change(old: &Tensor, new: &Tensor) -> Option<f64> {
    if old.shape != new.shape {
        return None;
    }
    let diff = |a: f64, b: f64| {
        if a == b || (a.is_nan() && b.is_nan()) {
            0.0
        } else {
            (a - b).abs()
        }
    };
    if old.elem == crate::tensor::ElemType::Int && new.elem == crate::tensor::ElemType::Int {
        return exact_change(old, new);
    }
    match (&old.storage, &new.storage) {
        (Storage::Dense(a), Storage::Dense(b)) => Some(
            a.to_f64()
                .iter()
                .zip(b.to_f64().iter())
                .map(|(&x, &y)| diff(x, y))
                .fold(0.0, f64::max),
        ),
        (Storage::Relation(a), Storage::Relation(b)) => (a == b).then_some(0.0),
        (Storage::Sparse(a), Storage::Sparse(b)) => {
            if a.positions() != b.positions() {
                return None;
            }
            Some(
                a.values()
                    .iter()
                    .zip(b.values())
                    .map(|(&x, &y)| diff(x, y))
                    .fold(0.0, f64::max),
            )
        }
        _ => None,
    }
}

/// [`change`] of two `int` tensors, exactly: 0 where every element is equal, otherwise
/// the largest difference (at least 1, where f64 cannot tell two integers past 2⁵³ apart).
fn exact_change(old: &Tensor, new: &Tensor) -> Option<f64> {
    let gap = |a: i64, b: i64| (a.abs_diff(b) as f64).max(f64::from(u8::from(a != b)));
    match (&old.storage, &new.storage) {
        (Storage::Dense(a), Storage::Dense(b)) => Some(
            a.to_i64()
                .iter()
                .zip(b.to_i64().iter())
                .map(|(&x, &y)| gap(x, y))
                .fold(0.0, f64::max),
        ),
        (Storage::Sparse(a), Storage::Sparse(b)) if a.positions() == b.positions() => {
            let ints = |s: &crate::tensor::Sparse| -> Vec<i64> {
                match s.ints() {
                    Some(i) => i.to_vec(),
                    None => s.values().iter().map(|&v| v as i64).collect(),
                }
            };
            Some(
                ints(a)
                    .iter()
                    .zip(&ints(b))
                    .map(|(&x, &y)| gap(x, y))
                    .fold(0.0, f64::max),
            )
        }
        _ => None,
    }
}

/// The error for tensor `t` of a recursive component taking the non-finite value `bad`.
pub(crate) fn diverged(p: &Checked, st: &Stratum, t: TensorId, bad: f64) -> Diagnostic {
    Diagnostic::error(
        codes::DIVERGED,
        p.equations[st.equations[0]].span,
        format!(
            "`{}` diverged: an element became {bad} during fixpoint iteration",
            p.tensors[t].name
        ),
    )
    .with_label("in this recursive equation")
    .with_note("the recursion grows without bound; check that it is a contraction (e.g. damped by a factor below 1)")
}

/// The error for a recursive component still changing after `--max-iters` iterations,
/// pointing at its equations; `last_change` is the largest change of the last iteration.
pub(crate) fn not_converged(
    p: &Checked,
    st: &Stratum,
    max_iters: usize,
    last_change: f64,
) -> Diagnostic {
    recursion_unsettled(p, st, max_iters)
        .with_note(format!(
            "the largest change in the last iteration was {last_change}"
        ))
        .with_note("raise --max-iters or --tol, or check that the recursion is bounded")
}

/// The error for a recursive component still changing after `--max-iters` iterations (§9),
/// pointing at its equations; each evaluator adds a note on what it saw.
pub(crate) fn recursion_unsettled(p: &Checked, st: &Stratum, max_iters: usize) -> Diagnostic {
    let names: Vec<String> = st
        .tensors
        .iter()
        .map(|&t| format!("`{}`", p.tensors[t].name))
        .collect();
    let mut d = Diagnostic::error(
        codes::DIVERGED,
        p.equations[st.equations[0]].span,
        format!(
            "{} did not converge after {max_iters} iterations",
            names.join(", ")
        ),
    )
    .with_label("in this recursive equation");
    for &e in &st.equations[1..] {
        d = d.with_secondary(p.equations[e].span, "also part of the recursion");
    }
    d
}
