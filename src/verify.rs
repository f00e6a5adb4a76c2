//! `tl run --verify`: the reference evaluator run beside the engine, and the largest
//! difference per tensor. This is how a user checks the fast paths on their own program.

use crate::semantics::Checked;
use crate::tensor::{Storage, Tensor};
use std::collections::BTreeMap;
use std::fmt::Write;

/// How far one tensor's value is from the reference's.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    /// The tensor.
    pub tensor: String,
    /// Largest absolute difference over its elements (0 when identical; NaN against a number
    /// counts as infinite).
    pub max_abs: f64,
    /// Largest difference relative to the reference element's magnitude (elements where the
    /// reference is 0 count absolutely).
    pub max_rel: f64,
    /// Elements defined in one value and not the other (relations, `max=`/`min=`).
    pub defined_differ: usize,
    /// The reference's largest magnitude in the tensor: the scale against which sums that
    /// cancel are judged (their error follows their terms, not their result).
    pub largest: f64,
}

/// Differences allowed, relative to a tensor's largest magnitude: f32 sums taken in another
/// order (GEMM blocking, scans of tuples) differ in their last bits, and a real recursion
/// stops within `--tol` of its fixpoint, which each engine approaches by its own rounding.
pub const TOLERANCE: f64 = 1e-4;

impl Difference {
    /// Whether the engines agree on this tensor within [`TOLERANCE`]: the same defined
    /// elements, and values within it of the reference's largest magnitude.
    pub fn agrees(&self) -> bool {
        self.defined_differ == 0
            && (self.max_abs == 0.0 || self.max_abs <= TOLERANCE * self.largest)
    }
}

/// The relation `t` narrowed to the tuples that match one of `queries` (of `t`, binding
/// no variable twice).
pub(crate) fn matching(t: &Tensor, queries: &[crate::semantics::Query]) -> Tensor {
    use crate::semantics::QueryIndex;
    let fits = |idx: &[usize]| {
        queries.iter().any(|q| {
            idx.iter().zip(&q.pattern).all(|(&i, x)| match x {
                QueryIndex::Fixed(f) => i == *f,
                QueryIndex::Var(_) => true,
                QueryIndex::Missing => false,
            })
        })
    };
    true_where(t, fits)
}

/// The true tuples of relation `t` at the positions `keep` admits.
fn true_where(t: &Tensor, keep: impl Fn(&[usize]) -> bool) -> Tensor {
    let tuples: Vec<u32> = t
        .entries()
        .into_iter()
        .filter(|(idx, v)| *v != 0.0 && keep(idx))
        .flat_map(|(idx, _)| idx.into_iter().map(|i| i as u32))
        .collect();
    let count = tuples.len() / t.shape.len().max(1);
    Tensor::relation_flat(t.shape.clone(), tuples, count)
}

/// Compares every tensor of `engine`, evaluated by `plan`, with `reference`: a relation the
/// plan evaluates on demand (§9) on the tuples its readers ask for, one it narrows to what
/// its readers keep on the engine's tuples (each must be the reference's; its readers, which
/// are compared in full, show that nothing they need is missing).
pub fn compare_planned(
    p: &Checked,
    plan: &crate::plan::Plan,
    engine: &[Tensor],
    reference: &[Tensor],
) -> Vec<Difference> {
    let asked: Vec<&[crate::semantics::Query]> = plan
        .strata
        .iter()
        .filter_map(|sp| sp.demand.as_ref().map(|(q, _)| q.as_slice()))
        .collect();
    if asked.is_empty() && plan.narrowed.is_empty() {
        return compare(p, engine, reference);
    }
    let (mut engine, mut reference) = (engine.to_vec(), reference.to_vec());
    for queries in asked {
        let t = queries[0].tensor;
        engine[t] = matching(&engine[t], queries);
        reference[t] = matching(&reference[t], queries);
    }
    for &t in &plan.narrowed {
        let kept = &engine[t];
        reference[t] = true_where(&reference[t], |idx| kept.get(idx).is_some_and(|x| x != 0.0));
    }
    compare(p, &engine, &reference)
}

/// Compares every tensor of `engine` with `reference` (both indexed like `p.tensors`).
pub fn compare(p: &Checked, engine: &[Tensor], reference: &[Tensor]) -> Vec<Difference> {
    p.tensors
        .iter()
        .zip(engine.iter().zip(reference))
        .map(|(info, (e, r))| {
            let mut d = Difference {
                tensor: info.name.clone(),
                max_abs: 0.0,
                max_rel: 0.0,
                defined_differ: 0,
                largest: 0.0,
            };
            let mut note = |a: f64, b: f64| {
                if b.is_finite() {
                    d.largest = d.largest.max(b.abs());
                }
                let abs = if a == b || (a.is_nan() && b.is_nan()) {
                    0.0
                } else if a.is_nan() || b.is_nan() {
                    f64::INFINITY
                } else {
                    (a - b).abs()
                };
                d.max_abs = d.max_abs.max(abs);
                d.max_rel = d.max_rel.max(if b == 0.0 { abs } else { abs / b.abs() });
            };
            if info.elem == crate::tensor::ElemType::Int && e.shape == r.shape {
                // Exactly: two integers past 2⁵³ that f64 holds as one still differ.
                r.each_entry(&mut |idx, y| match e.get_int(idx) {
                    Some(x) => {
                        let gap = r.get_int(idx).map_or(0, |y| x.abs_diff(y));
                        d.largest = d.largest.max(y.abs());
                        d.max_abs = d.max_abs.max(gap as f64).max(f64::from(u8::from(gap > 0)));
                        d.max_rel = d.max_rel.max(match y {
                            0.0 => gap as f64,
                            y => (gap as f64 / y.abs()).max(f64::from(u8::from(gap > 0))),
                        });
                    }
                    None => d.defined_differ += 1,
                });
                e.each_entry(&mut |idx, _| {
                    d.defined_differ += usize::from(r.get(idx).is_none());
                });
                return d;
            }
            match (&e.storage, &r.storage) {
                (Storage::Dense(a), Storage::Dense(b)) if a.len() == b.len() => {
                    for (&x, &y) in a.to_f64().iter().zip(b.to_f64().iter()) {
                        note(x, y);
                    }
                }
                _ => {
                    let a: BTreeMap<Vec<usize>, f64> = e.entries().into_iter().collect();
                    let b: BTreeMap<Vec<usize>, f64> = r.entries().into_iter().collect();
                    for (k, &y) in &b {
                        match a.get(k) {
                            Some(&x) => note(x, y),
                            None => d.defined_differ += 1,
                        }
                    }
                    d.defined_differ += a.keys().filter(|k| !b.contains_key(*k)).count();
                }
            }
            d
        })
        .collect()
}

/// The report `tl run --verify` prints: one line per tensor.
pub fn report(engine: &str, diffs: &[Difference]) -> String {
    let mut out = format!("verify: {engine} engine against the reference evaluator\n");
    // Relations a rewrite made (`#cat_0`, §8) are listed only when they differ.
    let shown: Vec<&Difference> = diffs
        .iter()
        .filter(|d| !d.tensor.starts_with('#') || !d.agrees())
        .collect();
    let width = shown.iter().map(|d| d.tensor.len()).max().unwrap_or(0);
    for d in shown {
        let verdict = if !d.agrees() && d.defined_differ == 0 {
            format!(
                "DIFFERS: largest difference {:e} (relative {:e}; largest magnitude {:e})",
                d.max_abs, d.max_rel, d.largest
            )
        } else if d.defined_differ > 0 {
            format!("{} elements defined in only one of them", d.defined_differ)
        } else if d.max_abs == 0.0 {
            "identical".to_string()
        } else {
            format!(
                "largest difference {:e} (relative {:e}; largest magnitude {:e})",
                d.max_abs, d.max_rel, d.largest
            )
        };
        let _ = writeln!(out, "  {:width$}  {verdict}", d.tensor);
    }
    let differ = diffs.iter().filter(|d| !d.agrees()).count();
    if differ > 0 {
        let _ = writeln!(
            out,
            "verify: {differ} tensor{} differ beyond the tolerance ({TOLERANCE:e} of the largest magnitude)",
            if differ == 1 { "" } else { "s" }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;
    use crate::tensor::ElemType;

    #[test]
    fn differences_are_absolute_relative_and_by_definedness() {
        let p = checked("X = [1, 2]\nY = [1, 4]\n");
        let a = vec![
            Tensor::dense(ElemType::F64, vec![2], vec![1.0, 2.5]).unwrap(),
            Tensor::dense(ElemType::F64, vec![2], vec![1.0, 4.0]).unwrap(),
        ];
        let b = vec![
            Tensor::dense(ElemType::F64, vec![2], vec![1.0, 2.0]).unwrap(),
            Tensor::dense(ElemType::F64, vec![2], vec![1.0, 4.0]).unwrap(),
        ];
        let d = compare(&p, &a, &b);
        assert_eq!((d[0].max_abs, d[0].max_rel), (0.5, 0.25));
        assert_eq!(d[1].max_abs, 0.0);
        assert!(!d[0].agrees() && d[1].agrees());
        let text = report("standard", &d);
        assert!(text.contains("Y  identical"), "{text}");
        assert!(
            text.contains("1 tensor differ beyond the tolerance"),
            "{text}"
        );
    }
}
