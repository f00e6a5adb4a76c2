//! Planning: how each stratum will be evaluated. `datalog` recognises Datalog-shaped strata,
//! which the relational evaluator runs semi-naively, and `chains` those of them that
//! are products of binary relations, which it may run on bit matrices; `demand` rewrites them for one bound
//! query (magic sets); every other stratum goes to the reference evaluator's loops.

pub mod chains;
pub mod datalog;
pub mod demand;
pub mod einsum;
