//! How incremental mode keeps each stratum up to date after a commit: a plan decision, since
//! it depends only on the program and its kernel. `eval::maintained` follows it and
//! `tl explain` prints it.

use super::{Kernel, StratumPlan};
use crate::semantics::Stratum;

/// A stratum's maintenance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Maintenance {
    /// Facts only: nothing to keep.
    Data,
    /// Its relations' stores and indexes are kept: insertions continue semi-naive
    /// evaluation; removals delete and re-derive where `rederive` (no rule computes its
    /// head's positions), and evaluate it again otherwise. It is evaluated again too when a
    /// relation it reads under `not`, or a tensor with values, changes.
    Kept {
        /// Whether removals can be re-derived.
        rederive: bool,
    },
    /// A `min=`/`max=` stratum whose elements' stores are kept: a commit that only adds
    /// elements or tuples to what it reads improves its elements from them; any other
    /// evaluates it again.
    Improved,
    /// Evaluated again on its kernel whenever something it reads changes; why.
    Again(&'static str),
}

/// The maintenance of stratum `st` planned as `sp` (its kernel and demand chosen).
pub(crate) fn plan_maintenance(st: &Stratum, sp: &StratumPlan) -> Maintenance {
    match &sp.kernel {
        Kernel::Data => Maintenance::Data,
        _ if st.equations.is_empty() => Maintenance::Data,
        Kernel::Datalog(..) if sp.demand.is_some() => {
            Maintenance::Again("evaluated on demand: only what its readers ask is held")
        }
        Kernel::Datalog(rules, _) if rules.iter().any(|r| !r.exists.is_empty()) => {
            Maintenance::Again("a rule has a group of atoms independent of the rest")
        }
        Kernel::Datalog(rules, _) => Maintenance::Kept {
            rederive: rules.iter().all(|r| r.lets.is_empty()),
        },
        Kernel::Counts(_) => Maintenance::Again("counts are not kept yet"),
        Kernel::Extremum(_) => Maintenance::Improved,
        _ => Maintenance::Again("not a Datalog stratum"),
    }
}

impl Maintenance {
    /// The line `tl explain` prints.
    pub fn text(&self) -> String {
        match self {
            Maintenance::Data => "facts".into(),
            Maintenance::Kept { rederive: true } => {
                "kept: insertions continue semi-naive, removals delete and re-derive".into()
            }
            Maintenance::Kept { rederive: false } => "kept: insertions continue semi-naive, \
                 removals evaluate it again (a rule computes its head's positions)"
                .into(),
            Maintenance::Improved => "kept: insertions improve its elements from the new ones, \
                 removals and changed values evaluate it again"
                .into(),
            Maintenance::Again(why) => {
                format!("evaluated again when what it reads changes ({why})")
            }
        }
    }
}
