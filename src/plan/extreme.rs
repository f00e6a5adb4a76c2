//! Max-product and min-product equations (`Delta[t + 1, s] max= Delta[t, r] Trans[r, s]
//! E[t + 1, s]`, Viterbi's recursion): a product of reads at affine positions, combined by
//! `max=`/`min=` over its summed variables (§7). Planned here as strided loops over dense
//! panels of the factors, the innermost loop along the last left-hand-side variable, so a
//! step is a few vector passes instead of one interpreted point at a time.

use super::nest::Affine;
use crate::semantics::{Checked, Equation, Family, IndexFn, Node, TensorId, VarId};

/// A planned max- or min-product equation.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtremeProduct {
    /// `max=` or `min=`.
    pub family: Family,
    /// The variables the left-hand side indexes by (its plain positions), outermost first.
    pub out: Vec<VarId>,
    /// The summed variables: each output element is the extreme over their points.
    pub reduced: Vec<VarId>,
    /// Per variable of the equation, its range.
    pub ranges: Vec<usize>,
    /// The target's positions (plain variables of `out`, constants, or the step position).
    pub lhs: Vec<IndexFn>,
    /// The product's factors, in the order the equation writes them.
    pub factors: Vec<Factor>,
}

/// One factor of the product: multiplied, or divided by (`true`).
#[derive(Clone, Debug, PartialEq)]
pub struct Factor {
    /// Divides rather than multiplies.
    pub divide: bool,
    /// What it reads.
    pub read: Read,
}

/// What a factor reads.
#[derive(Clone, Debug, PartialEq)]
pub enum Read {
    /// A number (a folded constant).
    Const(f64),
    /// An element of a tensor at positions `c + Σ k·v`.
    Tensor {
        /// The tensor.
        tensor: TensorId,
        /// Its positions.
        index: Vec<Affine>,
    },
}

/// The max- or min-product plan of an equation as `eq` gives it, `bound` being the variable
/// set outside (a step of an index recursion), if its right-hand side is a product of
/// reads and constants over plain left-hand-side variables.
pub(crate) fn plan_extreme(
    p: &Checked,
    eq: &Equation,
    bound: Option<VarId>,
) -> Option<ExtremeProduct> {
    if !matches!(eq.family, Family::Max | Family::Min) || eq.virtual_var.is_some() {
        return None;
    }
    let (reduced, body) = match eq.rhs.inside_empty_sums() {
        Node::Sum { vars, body } => (vars.clone(), body.as_ref()),
        other => (Vec::new(), other),
    };
    let terms: Vec<(bool, &Node)> = match body.inside_empty_sums() {
        Node::Product(fs) => fs
            .iter()
            .map(|(d, f)| (*d, f.inside_empty_sums()))
            .collect(),
        single => vec![(false, single)],
    };
    let mut factors = Vec::with_capacity(terms.len());
    for (divide, n) in terms {
        let read = match (super::constants::value(p, n), n) {
            (Some(k), _) => Read::Const(k),
            (
                None,
                Node::Read {
                    tensor,
                    index,
                    slice: false,
                },
            ) => Read::Tensor {
                tensor: *tensor,
                index: index
                    .iter()
                    .map(super::einsum::affine)
                    .collect::<Option<Vec<_>>>()?,
            },
            _ => return None,
        };
        factors.push(Factor { divide, read });
    }
    let mut out = Vec::new();
    for f in &eq.lhs {
        match f {
            IndexFn::Var(v) if Some(*v) != bound => {
                if out.contains(v) || reduced.contains(v) {
                    return None;
                }
                out.push(*v);
            }
            _ => {
                let mut used = Vec::new();
                f.vars(&mut used);
                if used.iter().any(|&v| Some(v) != bound) {
                    return None;
                }
            }
        }
    }
    // Every variable a factor reads is an output, summed or bound one.
    let known = |v: &VarId| out.contains(v) || reduced.contains(v) || Some(*v) == bound;
    let reads_known = factors.iter().all(|f| match &f.read {
        Read::Const(_) => true,
        Read::Tensor { index, .. } => index
            .iter()
            .all(|(coefs, _)| coefs.iter().all(|(v, _)| known(v))),
    });
    let summed_known = eq.loop_vars.iter().all(known);
    (reads_known && summed_known).then(|| ExtremeProduct {
        family: eq.family,
        out,
        reduced,
        ranges: eq.vars.iter().map(|v| v.range).collect(),
        lhs: eq.lhs.clone(),
        factors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    fn planned(src: &str, target: &str) -> Option<ExtremeProduct> {
        let c = checked(src);
        let t = c.tensor_id(target).unwrap();
        let eq = c.equations.iter().rfind(|e| e.target == t).unwrap();
        plan_extreme(&c, eq, None)
    }

    #[test]
    fn products_of_reads_are_planned_and_sums_are_not() {
        let src = "T = [[0.5, 1], [2, 0.25]]\nV = [1, 2]\nB[s] max= V[r] T[r, s] / 2\n";
        let e = planned(src, "B").unwrap();
        assert_eq!((e.out.len(), e.reduced.len(), e.factors.len()), (1, 1, 3));
        assert!(e.factors[2].divide);
        let sum = "T = [[0.5, 1], [2, 0.25]]\nV = [1, 2]\nB[s] max= V[r] + T[r, s]\n";
        assert!(planned(sum, "B").is_none());
        let plain = "T = [[0.5, 1], [2, 0.25]]\nV = [1, 2]\nB[s] = V[r] T[r, s]\n";
        assert!(planned(plain, "B").is_none());
    }
}
