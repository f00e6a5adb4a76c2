//! Planning: how each stratum will be evaluated. Today this recognises Datalog-shaped strata,
//! which the relational evaluator runs semi-naively; every other stratum goes to the
//! reference evaluator's iteration-space loops.

pub mod datalog;
