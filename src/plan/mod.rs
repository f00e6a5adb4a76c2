//! Planning: how each stratum will be evaluated, decided once per checked program and
//! stored as the [`Plan`] that evaluation executes and `tl explain` prints.
//!
//! The passes, in the order a stratum tries them:
//! - `datalog`: Datalog-shaped strata (run semi-naively by joins), counting strata and
//!   `min=`/`max=` path problems; `chains` finds the rules that are products of binary
//!   relations (which may run on bit matrices); `demand` rewrites rules for one bound
//!   query (magic sets);
//! - `einsum`: dense equations as contraction trees and fused elementwise passes, after
//!   `valid` (shifted reads over their valid intervals) and `constants` (folding);
//! - `nest`: loop nests for every other equation, driven by the tuples of the sparse
//!   tensors they multiply; they are also what runs when a kernel above declines at run
//!   time (its inputs are not as planned).
//!
//! Every equation has a loop nest, so no stratum is left to the reference evaluator's
//! loops: they are the oracle (`--engine reference`, `--verify`, tests), not a fallback.

pub mod chains;
pub mod constants;
pub mod datalog;
pub mod demand;
pub mod einsum;
pub mod nest;
pub mod valid;

use crate::semantics::{Checked, Stratum};

/// The kernel a stratum runs on.
#[derive(Clone, Debug)]
pub enum Kernel {
    /// No equations: the stratum is its data.
    Data,
    /// Semi-naive joins (or bit matrices) over these rules.
    Datalog(Vec<datalog::Rule>),
    /// Counts over relations, by enumerating these joins.
    Counts(Vec<datalog::Rule>),
    /// Semi-naive `min=`/`max=` over improved elements (declines for the cases whose outcome
    /// the reference defines).
    Extremum(Vec<datalog::ValuedRule>),
    /// Contraction trees and fused expressions (declines if inputs differ from the plan).
    Dense(Vec<einsum::DenseEquation>),
    /// Loop nests ([`StratumPlan::nests`]).
    Nest,
    /// The reference evaluator's loops: only in [`Plan::reference`], the oracle's plan.
    Reference,
}

/// How one stratum is evaluated.
#[derive(Clone, Debug)]
pub struct StratumPlan {
    /// The kernel chosen.
    pub kernel: Kernel,
    /// Loop nests of every equation: the kernel when it is [`Kernel::Nest`], otherwise what
    /// runs if the kernel declines at run time.
    pub nests: Vec<nest::NestEquation>,
}

/// The plan of every stratum, in `Checked::strata` order: built once, evaluated any number of
/// times (`tl bench`, training steps).
#[derive(Clone, Debug)]
pub struct Plan {
    /// One entry per stratum.
    pub strata: Vec<StratumPlan>,
}

impl Plan {
    /// A plan that evaluates every stratum with the reference loops (for the learning code's
    /// reference gradients).
    pub fn reference(p: &Checked) -> Plan {
        let strata = p
            .strata
            .iter()
            .map(|_| StratumPlan {
                kernel: Kernel::Reference,
                nests: Vec::new(),
            })
            .collect();
        Plan { strata }
    }
}

/// Plans every stratum of a checked program.
pub fn plan(p: &Checked) -> Plan {
    Plan {
        strata: p.strata.iter().map(|st| plan_stratum(p, st)).collect(),
    }
}

fn plan_stratum(p: &Checked, st: &Stratum) -> StratumPlan {
    let nests = st
        .equations
        .iter()
        .map(|&e| nest::plan_nest(p, e))
        .collect();
    let kernel = if st.equations.is_empty() {
        Kernel::Data
    } else if let Some(r) = datalog::plan_stratum(p, st).filter(|r| !r.is_empty()) {
        Kernel::Datalog(r)
    } else if let Some(r) = datalog::plan_counts(p, st).filter(|r| !r.is_empty()) {
        Kernel::Counts(r)
    } else if let Some(r) = datalog::plan_extremum(p, st).filter(|r| !r.is_empty()) {
        Kernel::Extremum(r)
    } else if let Some(d) = einsum::plan_dense(p, st).filter(|d| !d.is_empty()) {
        Kernel::Dense(d)
    } else {
        Kernel::Nest
    };
    StratumPlan { kernel, nests }
}
