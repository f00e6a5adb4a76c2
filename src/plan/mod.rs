//! Planning: how each stratum will be evaluated, decided once per checked program.
//! `datalog` recognises Datalog-shaped strata (run semi-naively by joins), counting strata
//! and `min=`/`max=` path problems; `chains` finds the Datalog rules that are products of
//! binary relations (which may run on bit matrices); `einsum` plans dense equations as
//! contraction trees; `demand` rewrites rules for one bound query (magic sets). Every other
//! stratum goes to the reference evaluator's loops.

pub mod chains;
pub mod constants;
pub mod datalog;
pub mod demand;
pub mod einsum;
pub mod valid;

use crate::semantics::Checked;

/// How one stratum is evaluated.
#[derive(Clone, Debug)]
pub enum StratumPlan {
    /// Semi-naive joins (or bit matrices) over these rules.
    Datalog(Vec<datalog::Rule>),
    /// Counts over relations, by enumerating these joins.
    Counts(Vec<datalog::Rule>),
    /// Semi-naive `min=`/`max=` over improved elements (the reference decides error cases).
    Extremum(Vec<datalog::ValuedRule>),
    /// Contraction trees and fused expressions (the reference runs if inputs differ).
    Dense(Vec<einsum::DenseEquation>),
    /// The reference evaluator's loops (also data-only strata).
    Loops,
}

/// The plan of every stratum, in `Checked::strata` order: built once, evaluated any number of
/// times (`tl bench`, training steps).
#[derive(Clone, Debug)]
pub struct Plan {
    /// One entry per stratum.
    pub strata: Vec<StratumPlan>,
}

/// Plans every stratum of a checked program.
pub fn plan(p: &Checked) -> Plan {
    let strata = p
        .strata
        .iter()
        .map(|st| {
            if let Some(r) = datalog::plan_stratum(p, st).filter(|r| !r.is_empty()) {
                StratumPlan::Datalog(r)
            } else if let Some(r) = datalog::plan_counts(p, st).filter(|r| !r.is_empty()) {
                StratumPlan::Counts(r)
            } else if let Some(r) = datalog::plan_extremum(p, st).filter(|r| !r.is_empty()) {
                StratumPlan::Extremum(r)
            } else if let Some(d) = einsum::plan_dense(p, st).filter(|d| !d.is_empty()) {
                StratumPlan::Dense(d)
            } else {
                StratumPlan::Loops
            }
        })
        .collect();
    Plan { strata }
}
