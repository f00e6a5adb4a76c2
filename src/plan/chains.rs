//! Rules that are compositions of binary relations: `Path(x, z) :- Path(x, y), Edge(y, z)`
//! is the Boolean matrix product Path·Edge, and same-generation's
//! `Sg(x, y) :- Parent(x, a), Sg(a, b), Parent(y, b)` is Parent·Sg·Parentᵀ. Such a stratum
//! can be evaluated on bit matrices (a row is a bitset; a product ORs whole rows a word at a
//! time), which is Tensor Logic's advantage over join-only engines when relations are dense.
//! Whether it pays is decided at evaluation time, from the relations' sizes.

use super::datalog::{Atom, Filter, Operand, Rule, Term};
use crate::semantics::TensorId;
use crate::syntax::ast::CmpOp;

/// One factor of a chain: a binary relation, read as written or transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Factor {
    /// The relation.
    pub tensor: TensorId,
    /// Whether it is read from its second column to its first.
    pub transposed: bool,
}

/// A rule `H(a, b) :- A1(a, v1), A2(v1, v2), …, Ak(vk-1, b)` (each atom in either direction),
/// possibly with `a != b` or `a == b` and negated binary atoms over `a` and `b`.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    /// The relation defined.
    pub head: TensorId,
    /// The product's factors from `a` to `b`; `atoms[k]` is the rule atom of `factors[k]`.
    pub factors: Vec<Factor>,
    /// Rule atom index of each factor (which one reads last round's new tuples).
    pub atoms: Vec<usize>,
    /// Negated atoms, as factors over (a, b).
    pub negated: Vec<Factor>,
    /// `Some(false)`: the diagonal is removed (`a != b`); `Some(true)`: only it is kept.
    pub diagonal: Option<bool>,
}

/// The chain form of every rule, if each has one.
pub(crate) fn chains(rules: &[Rule]) -> Option<Vec<Chain>> {
    rules.iter().map(chain).collect()
}

fn chain(r: &Rule) -> Option<Chain> {
    let [Term::Var(a), Term::Var(b)] = r.head_terms[..] else {
        return None;
    };
    if a == b || !r.checks.is_empty() || !r.lets.is_empty() || !r.absent.is_empty() {
        return None;
    }
    let pair = |at: &Atom| match at.terms[..] {
        [Term::Var(x), Term::Var(y)] if x != y => Some((x, y)),
        _ => None,
    };
    let mut used = vec![false; r.atoms.len()];
    let mut seen = vec![a];
    let mut factors = Vec::new();
    let mut atoms = Vec::new();
    let mut at = a;
    while at != b || factors.is_empty() {
        let (k, next, transposed) = r.atoms.iter().enumerate().find_map(|(k, atom)| {
            let (x, y) = pair(atom)?;
            match () {
                _ if used[k] => None,
                _ if x == at => Some((k, y, false)),
                _ if y == at => Some((k, x, true)),
                _ => None,
            }
        })?;
        if seen.contains(&next) {
            return None;
        }
        used[k] = true;
        seen.push(next);
        factors.push(Factor {
            tensor: r.atoms[k].tensor,
            transposed,
        });
        atoms.push(k);
        at = next;
    }
    if used.contains(&false) {
        return None;
    }
    let negated = r
        .negated
        .iter()
        .map(|n| match pair(n)? {
            (x, y) if (x, y) == (a, b) => Some(Factor {
                tensor: n.tensor,
                transposed: false,
            }),
            (x, y) if (x, y) == (b, a) => Some(Factor {
                tensor: n.tensor,
                transposed: true,
            }),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    let mut diagonal = None;
    for f in &r.filters {
        let ends = |o: &Operand| matches!(o, Operand::Var(v) if *v == a || *v == b);
        let Filter { op, left, right } = f;
        if !ends(left) || !ends(right) || left == right {
            return None;
        }
        let keep = match op {
            CmpOp::Eq => true,
            CmpOp::Ne => false,
            _ => return None,
        };
        if diagonal.is_some_and(|d| d != keep) {
            return None;
        }
        diagonal = Some(keep);
    }
    Some(Chain {
        head: r.head,
        factors,
        atoms,
        negated,
        diagonal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::datalog::plan_stratum;
    use crate::semantics::tests::checked;

    fn chains_of(src: &str) -> Vec<Option<Vec<Chain>>> {
        let c = checked(src);
        c.strata
            .iter()
            .filter(|s| !s.equations.is_empty())
            .map(|s| chains(&plan_stratum(&c, s).unwrap()))
            .collect()
    }

    #[test]
    fn closures_and_same_generation_are_chains() {
        let tc = chains_of("E(0, 1).\nP(x, y) :- E(x, y).\nP(x, z) :- P(x, y), E(y, z).\n");
        let tc = tc[0].as_ref().unwrap();
        assert_eq!(tc[1].factors.len(), 2);
        let sg = chains_of("Par(1, 0). Par(2, 0).\nSg(x, y) :- Par(x, p), Par(y, p), x != y.\nSg(x, y) :- Par(x, a), Sg(a, b), Par(y, b).\n");
        let sg = sg[0].as_ref().unwrap();
        assert_eq!(sg[0].diagonal, Some(false));
        assert!(sg[0].factors[1].transposed && sg[1].factors[2].transposed);
    }

    #[test]
    fn triangles_constants_and_unary_atoms_are_not() {
        for src in [
            "E(0, 1).\nT(x, y) :- E(x, y), E(y, z), E(z, x).\n",
            "E(0, 1).\nT(x, y) :- E(x, y), E(0, y).\n",
            "E(0, 1). N(0).\nT(x, y) :- E(x, y), N(x).\n",
        ] {
            assert_eq!(chains_of(src)[0], None, "{src}");
        }
    }
}
