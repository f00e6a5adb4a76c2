//! Execution. An [`Engine`] turns a checked program into tensor values; the reference
//! evaluator is the oracle every faster engine is tested against, and the [`Standard`]
//! engine executes a [`Plan`], recording which kernel ran for each stratum.

mod accumulate;
mod awake;
mod delta;
pub(crate) mod dense;
mod differential;
mod extreme;
mod fixpoint;
mod initial;
mod maintained;
mod nest;
mod open;
mod provenance;
mod reference;
mod relational;
mod scalar;
mod standard;
mod steps;
mod stop;

use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::functions::UserFunction;
use crate::plan::{Kernel, Plan};
use crate::semantics::{Checked, Query};
use crate::tensor::Tensor;
use std::collections::BTreeMap;

pub(crate) use awake::keep_awake;
pub use delta::Delta;
pub use dense::{KeptTerms, StepTerms};
pub use differential::{parse_hosts, Cluster, Differential, Incremental, Processes};
pub use maintained::{Change, Maintained};
pub(crate) use open::axis_table;
pub use provenance::{Provenance, Rounds};
pub(crate) use reference::{assignments, points, Cx};
pub use reference::{Record, Reference};
pub use standard::{evaluate_recorded, Standard, StratumRecord};
pub(crate) use standard::{fits_budget, thread_pool};
pub use stop::Stop;

pub use crate::plan::schedule::default_threads;

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
    /// Worker threads; results are identical for every count (§9). Default: [`default_threads`].
    pub threads: usize,
    /// When to end early (`--timeout`, Ctrl-C): with an error, never with partial values.
    pub stop: Stop,
    /// Where to record each derived tuple's round of first derivation (`--provenance`),
    /// for `why`; `None` records nothing.
    pub provenance: Option<Provenance>,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            tol: 1e-6,
            max_iters: 10_000,
            max_memory: crate::io::default_max_memory(),
            functions: BTreeMap::new(),
            threads: default_threads(),
            stop: Stop::default(),
            provenance: None,
        }
    }
}

/// The kernel that evaluated a stratum, as it ran (not as it was planned: a kernel may
/// decline at run time when its inputs are not as planned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ran {
    /// Data only: nothing to evaluate.
    Data,
    /// Semi-naive joins (bit matrices included).
    Joins,
    /// Counting by joins.
    Counts,
    /// Semi-naive `min=`/`max=` over improved elements.
    Extremum,
    /// Dense contractions and fused passes.
    Dense,
    /// Recursion along an index, step by step.
    Steps,
    /// Loop nests driven by sparse tensors.
    Nest,
    /// The reference evaluator's loops.
    Reference,
    /// In the differential dataflow.
    Differential,
    /// Kept up to date by a commit: the changes carried through its kept relations
    /// (continued semi-naive for insertions, delete and re-derive for removals).
    Maintained,
    /// Not evaluated (not needed for the query or the loss).
    Skipped,
}

impl Ran {
    /// The kernel's name as the decision log and `tl explain` print it.
    pub fn describe(self) -> &'static str {
        match self {
            Ran::Data => "data",
            Ran::Joins => "semi-naive joins",
            Ran::Counts => "counting by joins",
            Ran::Extremum => "semi-naive min=/max=",
            Ran::Dense => "dense contractions",
            Ran::Steps => "step by step along an index",
            Ran::Nest => "loop nests",
            Ran::Reference => "the reference loops",
            Ran::Differential => "the differential dataflow",
            Ran::Maintained => "maintained by a commit",
            Ran::Skipped => "skipped (not needed)",
        }
    }

    /// What a stratum planned on `kernel` runs on when nothing declines: the decision log
    /// of a run that went as planned.
    pub fn planned(kernel: &Kernel) -> Ran {
        match kernel {
            Kernel::Data => Ran::Data,
            Kernel::Datalog(..) => Ran::Joins,
            Kernel::Counts(_) => Ran::Counts,
            Kernel::Extremum(_) => Ran::Extremum,
            Kernel::Dense(_) => Ran::Dense,
            Kernel::Steps(_) | Kernel::Virtual(_) => Ran::Steps,
            Kernel::Nest => Ran::Nest,
            Kernel::Reference => Ran::Reference,
        }
    }
}

/// Why a planned kernel handed its stratum to the loop nests at run time: the inputs it
/// met are not the ones it was planned for, or what it would allocate is over the budget.
/// Recorded in the decision log (`tl run --decisions`), never silent.
#[derive(Clone, Debug, PartialEq)]
pub enum Declined {
    /// This tensor is not stored as the plan expected (sparse where a dense array of the
    /// planned shape was expected, or the reverse).
    NotAsPlanned(usize),
    /// The intermediates would need this many bytes, over `--max-memory`.
    Memory(f64),
    /// The expression calls a function that is not registered.
    Unregistered,
    /// A recursion is backpropagated through the reference's recorded iterates.
    Recorded,
    /// A dense recursion of several tensors, or one whose elements blew up or did not
    /// settle within `--max-iters`: the loop nests evaluate it and report what they find.
    NotSettled,
    /// A `max=`/`min=` target that has data of its own.
    ExtremeWithData,
    /// The kernel's own checks (a virtual index, semi-naive `min=`/`max=`) found a case
    /// whose outcome only the loop nests define.
    Unsupported(&'static str),
    /// A factor beside a tensor stored as its non-zeros holds an infinity or NaN (`None`:
    /// a constant factor is one), so the stored zeros, numbers, must be read.
    NotFinite {
        /// The tensor stored as its non-zeros.
        stored: usize,
        /// The factor that is not finite.
        factor: Option<usize>,
    },
}

impl Declined {
    /// The reason as the decision log prints it, naming tensors.
    pub fn describe(&self, p: &Checked) -> String {
        let name = |t: usize| p.tensors.get(t).map_or("?", |i| i.name.as_str());
        match self {
            Declined::NotAsPlanned(t) => format!("`{}` is not stored as planned", name(*t)),
            Declined::Memory(bytes) => {
                format!("its intermediates need {bytes:.0} bytes, over --max-memory")
            }
            Declined::Unregistered => "it calls a function that is not registered".into(),
            Declined::Recorded => "a recursion is backpropagated through recorded iterates".into(),
            Declined::NotSettled => {
                "a dense recursion of several tensors, or one that blew up or did not settle".into()
            }
            Declined::ExtremeWithData => "a `max=`/`min=` tensor with data of its own".into(),
            Declined::Unsupported(why) => (*why).into(),
            Declined::NotFinite { stored, factor } => format!(
                "{} holds an infinity or NaN beside the stored zeros of `{}`",
                factor.map_or("a constant".into(), |t| format!("`{}`", name(t))),
                name(*stored)
            ),
        }
    }
}

/// One entry of the decision log: which kernel ran a stratum, and why the reference loops
/// did where they did.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Index into `Checked::strata`.
    pub stratum: usize,
    /// What ran.
    pub ran: Ran,
    /// Why the planned kernel did not run it (it declined, [`Declined`]), or why it ran as it
    /// did where that is worth saying (on demand, on the reference loops).
    pub reason: Option<String>,
}

/// Tensor values and the record of how they were computed.
#[derive(Clone, Debug)]
pub struct Evaluation {
    /// Values of every tensor, indexed like [`Checked::tensors`].
    pub values: Vec<Tensor>,
    /// One entry per stratum evaluated, in evaluation order.
    pub log: Vec<Decision>,
}

/// That every registered function the program calls is in `o`: an evaluation without one
/// would have no value at those points, which must be an error (E0102), not zeros.
/// `calls` are the functions called, each with an equation calling it.
pub(crate) fn functions_registered(
    calls: &[(String, crate::diagnostics::Span)],
    o: &EvalOptions,
) -> Result<(), Diagnostics> {
    let mut missing = Vec::new();
    for (name, span) in calls {
        if !o.functions.contains_key(name) {
            missing.push(
                Diagnostic::error(
                    codes::UNKNOWN_FUNCTION,
                    *span,
                    format!("`{name}` is not registered in these evaluation options"),
                )
                .with_note("register it (`Session::register_function`) before evaluating"),
            );
        }
    }
    match missing.is_empty() {
        true => Ok(()),
        false => Err(Diagnostics(missing)),
    }
}

/// Something that evaluates checked programs. Implementations must agree with [`Reference`].
pub trait Engine {
    /// A short name for messages and `--verify` reports.
    fn name(&self) -> &'static str;
    /// Values of every tensor, with the strata planned beforehand ([`crate::Plan::new`])
    /// (engines that do not plan ignore it), and which kernel evaluated each stratum.
    fn run(
        &self,
        program: &Checked,
        plan: &Plan,
        options: &EvalOptions,
    ) -> Result<Evaluation, Diagnostics>;
    /// Values of every tensor, indexed like [`Checked::tensors`].
    fn evaluate(
        &self,
        program: &Checked,
        options: &EvalOptions,
    ) -> Result<Vec<Tensor>, Diagnostics> {
        Ok(self
            .run(program, &crate::plan::plan(program), options)?
            .values)
    }
    /// Values from which `query` can be answered (§9: backward chaining is allowed). Only
    /// the queried tensor's elements that match the query are meaningful; by default,
    /// everything is evaluated.
    fn evaluate_for(
        &self,
        program: &Checked,
        options: &EvalOptions,
        _query: &Query,
    ) -> Result<Vec<Tensor>, Diagnostics> {
        self.evaluate(program, options)
    }
    /// Values of every tensor, with the strata planned beforehand.
    fn evaluate_planned(
        &self,
        program: &Checked,
        plan: &Plan,
        options: &EvalOptions,
    ) -> Result<Vec<Tensor>, Diagnostics> {
        Ok(self.run(program, plan, options)?.values)
    }
}
