//! How incremental mode keeps each stratum up to date after a commit: a plan decision, since
//! it depends only on the program and its kernel. `eval::maintained` follows it and
//! `tl explain` prints it.

use super::chains::{Chain, Factor};
use super::{Kernel, StratumPlan};
use crate::semantics::{Checked, Stratum, TensorId};

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
    /// The transitive closure of one relation, kept as bit rows: an inserted edge adds the
    /// reach of its end to the rows that reach its start, and a removed edge either has a
    /// detour (nothing changes) or the rows that reached its start are computed again. Kept
    /// as [`Maintenance::Kept`] when the rows do not fit the memory budget.
    Closure(Closure),
    /// A `min=`/`max=` stratum whose elements' stores are kept: a commit that adds
    /// elements or tuples to what it reads improves its elements from them; a removal that
    /// was no element's best (on integer values) is dropped; any other evaluates it again.
    Improved,
    /// Evaluated again on its kernel whenever something it reads changes; why.
    Again(&'static str),
}

/// A stratum whose one relation `head` is the transitive closure `G⁺` of `edge` (`G` is
/// `edge`, or its transpose where `transposed`): its rules are products of `G` and `head`
/// only, among them `head = G` and one that closes it (`head·G`, `G·head` or `head·head`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closure {
    /// The closure.
    pub head: TensorId,
    /// The relation it closes.
    pub edge: TensorId,
    /// Whether the edges are read from the relation's second column to its first.
    pub transposed: bool,
}

/// The closure that `chains` (the rules of `st`, as products) compute, if they compute one.
/// Every product of `G` and `head` lies in `G⁺`, and `G` with a closing rule gives all of it,
/// so `head = G⁺` exactly; facts of `head`'s own would add to it, so there are none.
fn closure(p: &Checked, st: &Stratum, chains: &[Chain]) -> Option<Closure> {
    let [head] = st.tensors[..] else {
        return None;
    };
    if p.data[head].is_some() {
        return None;
    }
    let mut edge: Option<Factor> = None;
    let (mut base, mut closing) = (false, false);
    for c in chains {
        if c.head != head || !c.negated.is_empty() || c.diagonal.is_some() {
            return None;
        }
        for f in &c.factors {
            match (f.tensor == head, edge) {
                (true, _) if f.transposed => return None,
                (true, _) => {}
                (false, None) => edge = Some(*f),
                (false, Some(e)) if e == *f => {}
                (false, Some(_)) => return None,
            }
        }
        let own = c.factors.iter().filter(|f| f.tensor == head).count();
        base |= c.factors.len() == 1 && own == 0;
        closing |= c.factors.len() == 2 && own >= 1;
    }
    let edge = edge.filter(|_| base && closing)?;
    Some(Closure {
        head,
        edge: edge.tensor,
        transposed: edge.transposed,
    })
}

/// The maintenance of stratum `st` planned as `sp` (its kernel and demand chosen).
pub(crate) fn plan_maintenance(p: &Checked, st: &Stratum, sp: &StratumPlan) -> Maintenance {
    match &sp.kernel {
        Kernel::Data => Maintenance::Data,
        _ if st.equations.is_empty() => Maintenance::Data,
        Kernel::Datalog(..) if sp.demand.is_some() => {
            Maintenance::Again("evaluated on demand: only what its readers ask is held")
        }
        Kernel::Datalog(rules, _) if rules.iter().any(|r| !r.exists.is_empty()) => {
            Maintenance::Again("a rule has a group of atoms independent of the rest")
        }
        Kernel::Datalog(rules, chains) => match chains.as_ref().and_then(|c| closure(p, st, c)) {
            Some(c) => Maintenance::Closure(c),
            None => Maintenance::Kept {
                rederive: rules.iter().all(|r| r.lets.is_empty()),
            },
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
            Maintenance::Closure(_) => "kept as bit rows of a transitive closure: an inserted \
                 edge adds its end's reach to the rows reaching its start; a removed one keeps \
                 a detour or computes those rows again"
                .into(),
            Maintenance::Improved => "kept: insertions improve its elements from the new ones; \
                 a removal that was no element's best is dropped, any other evaluates it again"
                .into(),
            Maintenance::Again(why) => {
                format!("evaluated again when what it reads changes ({why})")
            }
        }
    }
}
