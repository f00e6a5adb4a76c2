//! Interval arithmetic over index functions: the smallest and largest value an index
//! expression can take when each variable lies in a range. Extents use it where corner
//! evaluation is not exact (`%` is not monotone).

use super::IndexFn;
use crate::syntax::ast::ArithOp;

/// A closed interval `[lo, hi]` of integers.
pub(crate) type Interval = (i64, i64);

/// Whether `f` uses an operation that is not monotone in each variable, so that its extremes
/// need not lie at the corners of its variables' ranges: `%`, and `/` (undefined at 0 and
/// changing direction there: `2 / y` over `0..3` has no value at a corner).
pub(crate) fn needs_intervals(f: &IndexFn) -> bool {
    match f {
        IndexFn::Var(_) | IndexFn::Const(_) => false,
        IndexFn::Arith(a, op, b) => {
            matches!(op, ArithOp::Rem | ArithOp::Div) || needs_intervals(a) || needs_intervals(b)
        }
    }
}

/// An interval holding every value `f` takes when each variable `v` lies in `var(v)`;
/// `None` when some variable's range is empty, a divisor is always 0, or a bound overflows.
pub(crate) fn interval(f: &IndexFn, var: &dyn Fn(usize) -> Option<Interval>) -> Option<Interval> {
    match f {
        IndexFn::Var(v) => var(*v),
        IndexFn::Const(c) => Some((*c, *c)),
        IndexFn::Arith(a, op, b) => {
            let (a, b) = (interval(a, var)?, interval(b, var)?);
            match op {
                ArithOp::Add => Some((a.0.checked_add(b.0)?, a.1.checked_add(b.1)?)),
                ArithOp::Sub => Some((a.0.checked_sub(b.1)?, a.1.checked_sub(b.0)?)),
                ArithOp::Mul => hull(&[
                    a.0.checked_mul(b.0)?,
                    a.0.checked_mul(b.1)?,
                    a.1.checked_mul(b.0)?,
                    a.1.checked_mul(b.1)?,
                ]),
                ArithOp::Div => divided(a, b),
                ArithOp::Rem => remainder(a, b),
            }
        }
    }
}

/// The smallest interval holding `values`.
fn hull(values: &[i64]) -> Option<Interval> {
    Some((*values.iter().min()?, *values.iter().max()?))
}

/// The parts of a divisor's interval on either side of 0 (a division by 0 has no value).
fn nonzero_parts(b: Interval) -> Vec<Interval> {
    let mut parts = Vec::with_capacity(2);
    if b.0 < 0 {
        parts.push((b.0, b.1.min(-1)));
    }
    if b.1 > 0 {
        parts.push((b.0.max(1), b.1));
    }
    parts
}

/// Truncating division is monotone in each operand while the divisor keeps its sign, so its
/// extremes over each part lie at the corners.
fn divided(a: Interval, b: Interval) -> Option<Interval> {
    let mut corners = Vec::new();
    for (lo, hi) in nonzero_parts(b) {
        for x in [a.0, a.1] {
            for y in [lo, hi] {
                corners.push(x.checked_div(y)?);
            }
        }
    }
    hull(&corners)
}

/// A remainder has the dividend's sign and is smaller in magnitude than the divisor; where
/// the dividend is already smaller than every divisor it is the dividend itself.
fn remainder(a: Interval, b: Interval) -> Option<Interval> {
    let parts = nonzero_parts(b);
    let largest = parts
        .iter()
        .map(|&(lo, hi)| lo.unsigned_abs().max(hi.unsigned_abs()))
        .max()?;
    let smallest = parts
        .iter()
        .map(|&(lo, hi)| {
            if lo > 0 {
                lo.unsigned_abs()
            } else {
                hi.unsigned_abs()
            }
        })
        .min()?;
    if a.0.unsigned_abs() < smallest && a.1.unsigned_abs() < smallest {
        return Some(a);
    }
    let m = i64::try_from(largest - 1).unwrap_or(i64::MAX);
    Some((a.0.max(-m).min(0), a.1.min(m).max(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(f: &IndexFn, ranges: &[Interval]) -> Option<Interval> {
        let mut seen: Option<Interval> = None;
        let mut env = vec![0i64; ranges.len()];
        fn walk(
            k: usize,
            f: &IndexFn,
            ranges: &[Interval],
            env: &mut Vec<i64>,
            seen: &mut Option<Interval>,
        ) {
            if k == ranges.len() {
                if let Some(v) = f.eval(env) {
                    *seen = Some(seen.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
                }
                return;
            }
            for x in ranges[k].0..=ranges[k].1 {
                env[k] = x;
                walk(k + 1, f, ranges, env, seen);
            }
        }
        walk(0, f, ranges, &mut env, &mut seen);
        seen
    }

    #[test]
    fn intervals_hold_every_value_and_remainders_are_tight() {
        let x = || Box::new(IndexFn::Var(0));
        let y = || Box::new(IndexFn::Var(1));
        let c = |v| Box::new(IndexFn::Const(v));
        let cases = [
            IndexFn::Arith(x(), ArithOp::Rem, c(3)),
            IndexFn::Arith(x(), ArithOp::Rem, y()),
            IndexFn::Arith(x(), ArithOp::Div, y()),
            IndexFn::Arith(
                Box::new(IndexFn::Arith(x(), ArithOp::Mul, y())),
                ArithOp::Sub,
                c(4),
            ),
        ];
        let ranges = [[(0, 9), (1, 4)], [(-7, 5), (-3, 2)], [(2, 2), (5, 8)]];
        for f in &cases {
            for r in &ranges {
                let got = interval(f, &|v| Some(r[v])).unwrap();
                let truth = brute(f, r).unwrap();
                assert!(
                    got.0 <= truth.0 && truth.1 <= got.1,
                    "{f:?} over {r:?}: {got:?} vs {truth:?}"
                );
            }
        }
        let rem3 = IndexFn::Arith(x(), ArithOp::Rem, c(3));
        assert_eq!(interval(&rem3, &|_| Some((0, 9))), Some((0, 2)));
        assert_eq!(interval(&rem3, &|_| Some((0, 1))), Some((0, 1)));
        assert_eq!(interval(&rem3, &|_| Some((-5, 0))), Some((-2, 0)));
    }
}
