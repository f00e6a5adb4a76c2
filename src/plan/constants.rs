//! Constant folding. A scalar constant of the program (`Dk = 4`, or one set with `--set`) and
//! any subexpression made only of such constants and numbers (`sqrt(Dk)`, `-1 / V`) has one
//! value for the whole program, known when it is planned: kernels take it as a number (a
//! GEMM's scale, an epilogue's constant) instead of reading a tensor at every point.
//!
//! Values are the ones the reference evaluator computes: a constant is read as stored (in its
//! element type) and combined with the same f64 operations in the same order.

use crate::semantics::{Checked, Func, Node, TensorId};

/// The value of a rank-0 tensor that is a scalar constant: defined by a scalar statement (or
/// `--set`) and by nothing else, and not a parameter (§12), so no evaluation or training
/// step changes it.
pub(crate) fn scalar(p: &Checked, t: TensorId) -> Option<f64> {
    let info = p.tensors.get(t)?;
    let constant = info.shape.is_empty()
        && p.scalars.contains_key(&info.name)
        && !p.params.contains(&t)
        && !p.equations.iter().any(|e| e.target == t);
    if !constant {
        return None;
    }
    p.data.get(t)?.as_ref()?.get(&[])
}

/// The value of a node that has no variables and reads only scalar constants; `None` for any
/// other node (and for registered functions, which are only known at evaluation).
pub(crate) fn value(p: &Checked, n: &Node) -> Option<f64> {
    let v = folded(p, n)?;
    // An integer past 2^53 is not exact in f64: the integer evaluators compute it in i64.
    let exact = v.abs() <= 9_007_199_254_740_992.0
        || !crate::semantics::integral(n, &|t| p.tensors[t].kind);
    exact.then_some(v)
}

/// [`value`] of one node, its operands folded first.
fn folded(p: &Checked, n: &Node) -> Option<f64> {
    Some(match n {
        Node::Const(k) => k.value(),
        Node::Read {
            tensor,
            index,
            slice: false,
        } if index.is_empty() => scalar(p, *tensor)?,
        Node::Sum { vars, body } if vars.is_empty() => value(p, body)?,
        Node::Neg(x) => -value(p, x)?,
        Node::Not(x) => 1.0 - value(p, x)?,
        Node::Product(fs) => {
            let (mut acc, mut masked) = (1.0, false);
            for (div, f) in fs {
                let v = value(p, f)?;
                if *div {
                    acc /= v;
                } else {
                    // A false comparison masks the product (docs/language.md, "masks").
                    masked |= v == 0.0 && p.mask(f).is_some();
                    acc *= v;
                }
            }
            if masked {
                0.0
            } else {
                acc
            }
        }
        Node::Binary(op, a, b) => {
            let (x, y) = (value(p, a)?, value(p, b)?);
            // An integer `%` or `//` by 0 is nothing: not a number to fold.
            let kinds = |t: usize| p.tensors[t].kind;
            if y == 0.0 && crate::semantics::divides_integers(*op, (a, b), &kinds) {
                return None;
            }
            op.apply(x, y)
        }
        Node::Compare(op, a, b) => {
            if op.holds(value(p, a)?, value(p, b)?) {
                1.0
            } else {
                0.0
            }
        }
        Node::Call(Func::Builtin(f), args) => {
            let xs = args
                .iter()
                .map(|a| value(p, a))
                .collect::<Option<Vec<f64>>>()?;
            f.apply(&xs)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    fn rhs_value(src: &str, target: &str) -> Option<f64> {
        let c = checked(src);
        let t = c.tensor_id(target).unwrap();
        let eq = c.equations.iter().find(|e| e.target == t).unwrap();
        value(&c, &eq.rhs)
    }

    #[test]
    fn scalars_and_functions_of_them_fold() {
        assert_eq!(rhs_value("Dk = 16\nY = 1 / sqrt(Dk)\n", "Y"), Some(0.25));
        // Stored in f32 (`real`), as the reference reads it.
        assert_eq!(rhs_value("T = 0.1\nY = -T\n", "Y"), Some(-(0.1f32 as f64)));
    }

    #[test]
    fn parameters_computed_tensors_and_variables_do_not() {
        assert_eq!(rhs_value("T ~ zeros\nY = 2 * T\n", "Y"), None);
        assert_eq!(rhs_value("S = 2\nT = S + 1\nY = T\n", "Y"), None);
        assert_eq!(rhs_value("X = [1, 2]\nY[i] = X[i] + 1\n", "Y"), None);
    }
}
