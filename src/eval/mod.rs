//! Execution. An [`Engine`] turns a checked program into tensor values; the reference
//! evaluator is the oracle every faster engine is tested against.

mod accumulate;
mod reference;
mod relational;

use crate::diagnostics::Diagnostics;
use crate::functions::UserFunction;
use crate::semantics::Checked;
use crate::tensor::Tensor;
use std::collections::BTreeMap;

pub use reference::Reference;

/// Options that affect evaluation but not meaning.
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// Convergence tolerance for real recursive components (§9).
    pub tol: f64,
    /// Iteration cap for recursive components (§9).
    pub max_iters: usize,
    /// Largest dense tensor, in bytes (§15).
    pub max_memory: u64,
    /// Registered functions (§16).
    pub functions: BTreeMap<String, UserFunction>,
    /// Worker threads; results are identical for every count (§9).
    pub threads: usize,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            tol: 1e-6,
            max_iters: 10_000,
            max_memory: crate::semantics::default_max_memory(),
            functions: BTreeMap::new(),
            threads: 1,
        }
    }
}

/// The default engine: each stratum by the fastest evaluator that handles it. Datalog-shaped
/// strata (`plan::datalog`) are evaluated semi-naively by joins, counts over relations by
/// enumerating joins; every other stratum by the reference evaluator's loops.
#[derive(Clone, Copy, Debug, Default)]
pub struct Standard;

impl Engine for Standard {
    fn name(&self) -> &'static str {
        "standard"
    }

    fn evaluate(&self, p: &Checked, o: &EvalOptions) -> Result<Vec<Tensor>, Diagnostics> {
        let mut values = reference::initial_values(p, o)?;
        let pool = (o.threads > 1)
            .then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(o.threads)
                    .build()
                    .ok()
            })
            .flatten();
        for st in &p.strata {
            match crate::plan::datalog::plan_stratum(p, st) {
                Some(rules) if !rules.is_empty() => {
                    relational::evaluate_stratum(p, st, &rules, &mut values, o, pool.as_ref())?
                }
                _ => match crate::plan::datalog::plan_counts(p, st) {
                    Some(rules) if !rules.is_empty() => {
                        relational::evaluate_counts(p, st, &rules, &mut values)
                    }
                    _ => reference::evaluate_stratum(p, st, &mut values, o)?,
                },
            }
        }
        Ok(values)
    }
}

/// The error for a recursive component still changing after `--max-iters` iterations (§9),
/// pointing at its equations; each engine adds a note on what it saw.
fn not_converged(
    p: &Checked,
    st: &crate::semantics::Stratum,
    max_iters: usize,
) -> crate::diagnostics::Diagnostic {
    let names: Vec<String> = st
        .tensors
        .iter()
        .map(|&t| format!("`{}`", p.tensors[t].name))
        .collect();
    let mut d = crate::diagnostics::Diagnostic::error(
        crate::diagnostics::codes::DIVERGED,
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

/// Something that evaluates checked programs. Implementations must agree with [`Reference`].
pub trait Engine {
    /// A short name for messages and `--verify` reports.
    fn name(&self) -> &'static str;
    /// Values of every tensor, indexed like [`Checked::tensors`].
    fn evaluate(
        &self,
        program: &Checked,
        options: &EvalOptions,
    ) -> Result<Vec<Tensor>, Diagnostics>;
}
