//! Executes max- and min-product plans (`plan::extreme`): each factor's elements are
//! gathered into a dense panel over its variables (once, for a factor that no step moves),
//! then every output row is the product of the panels' rows, factor by factor in the
//! equation's order, combined by the family over the summed points. Values go through the
//! same f64 operations as a loop nest's point (`1 · f₁ · f₂ …`); a panel that meets an
//! element that is nothing (out of range, or undefined under `max=`/`min=`) declines, for
//! the loop nest to take that step.

use crate::functions::widest::{widest, Vectorised};
use crate::plan::extreme::{ExtremeProduct, Read};
use crate::semantics::{Family, TensorId, VarId};
use crate::tensor::{Storage, Tensor};

/// One factor's elements over its variables, row-major in `vars` order.
#[derive(Clone, Debug)]
struct Panel {
    values: Vec<f64>,
    /// Per variable of the equation, its stride in `values` (0 where the factor does not
    /// read it).
    strides: Vec<usize>,
}

/// A plan with the panels of the factors that stay the same from step to step.
pub(super) struct ExtremeRun<'a> {
    plan: &'a ExtremeProduct,
    kept: Vec<Option<Panel>>,
    /// Loop order, outermost first: the output variables but the last, the summed ones,
    /// the last output variable. Panels are laid out in it, so the innermost loop reads
    /// rows that are contiguous (or one element).
    order: Vec<VarId>,
}

impl<'a> ExtremeRun<'a> {
    pub(super) fn new(plan: &'a ExtremeProduct) -> ExtremeRun<'a> {
        let mut order: Vec<VarId> = plan
            .out
            .split_last()
            .map_or(Vec::new(), |(_, o)| o.to_vec());
        order.extend(&plan.reduced);
        order.extend(plan.out.last());
        ExtremeRun {
            plan,
            kept: vec![None; plan.factors.len()],
            order,
        }
    }

    /// Appends the `(offset, value)` writes into `target` of the equation with the variable
    /// `bound` at its value; `false` (nothing appended) where a factor reads nothing, for
    /// the loop nest to evaluate.
    pub(super) fn contribute(
        &mut self,
        values: &[Tensor],
        (target, moving): (TensorId, &[TensorId]),
        bound: Option<(VarId, i64)>,
        writes: &mut Vec<(usize, f64)>,
    ) -> bool {
        let plan = self.plan;
        let bound_var = bound.map(|b| b.0);
        let mut fresh: Vec<Option<Panel>> = vec![None; plan.factors.len()];
        for (k, f) in plan.factors.iter().enumerate() {
            let Read::Tensor { tensor, index } = &f.read else {
                continue;
            };
            if self.kept[k].is_some() {
                continue;
            }
            let Some(panel) = gather(&values[*tensor], index, (&plan.ranges, &self.order), bound)
            else {
                return false;
            };
            let steps = index
                .iter()
                .any(|(coefs, _)| coefs.iter().any(|(v, _)| Some(*v) == bound_var));
            if moving.contains(tensor) || steps {
                fresh[k] = Some(panel);
            } else {
                self.kept[k] = Some(panel);
            }
        }
        let panels: Vec<Option<&Panel>> = self
            .kept
            .iter()
            .zip(&fresh)
            .map(|(a, b)| a.as_ref().or(b.as_ref()))
            .collect();
        let out_count: usize = plan.out.iter().map(|&v| plan.ranges[v]).product();
        let reduced_count: usize = plan.reduced.iter().map(|&v| plan.ranges[v]).product();
        if out_count == 0 || reduced_count == 0 {
            return true;
        }
        let mut acc = vec![f64::NAN; out_count];
        widest(Rows {
            plan,
            panels: &panels,
            reduced_count,
            acc: &mut acc,
        });
        place(plan, values[target].shape.as_slice(), bound, &acc, writes);
        true
    }
}

/// The products of one evaluation, combined into `acc` (the output elements, row-major),
/// as a loop for `functions::widest`.
struct Rows<'a> {
    plan: &'a ExtremeProduct,
    panels: &'a [Option<&'a Panel>],
    reduced_count: usize,
    acc: &'a mut [f64],
}

impl Vectorised for Rows<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let Rows {
            plan,
            panels,
            reduced_count,
            acc,
        } = self;
        let (outer, inner) = match plan.out.split_last() {
            Some((&last, rest)) => (rest, Some(last)),
            None => (&plan.out[..], None),
        };
        let width = inner.map_or(1, |v| plan.ranges[v]);
        let mut row = vec![0.0f64; width];
        let mut strided: Vec<Vec<f64>> = vec![Vec::new(); plan.factors.len()];
        let mut env = vec![0usize; plan.ranges.len()];
        let last = plan.factors.len().saturating_sub(1);
        for (o, out) in acc.chunks_exact_mut(width).enumerate() {
            odometer(outer, &plan.ranges, o, &mut env);
            for r in 0..reduced_count {
                odometer(&plan.reduced, &plan.ranges, r, &mut env);
                // `1 · f₁ · f₂ · …` in order: the first factor sets the row, the last
                // one's product is combined into the output as it is made.
                for (k, (f, panel)) in plan.factors.iter().zip(panels).enumerate() {
                    let src = match (&f.read, panel) {
                        (Read::Const(c), _) => Src::Scalar(*c),
                        (_, Some(p)) => {
                            let base: usize =
                                env.iter().zip(&p.strides).map(|(&x, &s)| x * s).sum();
                            let step = inner.map_or(0, |v| p.strides[v]);
                            source(&p.values[base..], step, width, &mut strided[k])
                        }
                        (_, None) => Src::Scalar(1.0),
                    };
                    if k == last {
                        let from = (k > 0).then_some(row.as_slice());
                        combine_row(out, from, &src, f.divide, plan.family);
                    } else {
                        apply(&mut row, k > 0, &src, f.divide);
                    }
                }
                if plan.factors.is_empty() {
                    combine_row(out, None, &Src::Scalar(1.0), false, plan.family);
                }
            }
        }
    }
}

/// Sets the variables `vars` to the `k`-th point of their ranges (row-major).
fn odometer(vars: &[VarId], ranges: &[usize], mut k: usize, env: &mut [usize]) {
    for &v in vars.iter().rev() {
        let n = ranges[v].max(1);
        env[v] = k % n;
        k /= n;
    }
}

/// A factor's row along the innermost variable: one element for all, or a contiguous row.
enum Src<'a> {
    Scalar(f64),
    Row(&'a [f64]),
}

/// The row of `values` at steps of `step`, copied into `scratch` when it is strided.
#[inline(always)]
fn source<'a>(values: &'a [f64], step: usize, width: usize, scratch: &'a mut Vec<f64>) -> Src<'a> {
    match step {
        0 => Src::Scalar(values[0]),
        1 => Src::Row(&values[..width]),
        _ => {
            scratch.clear();
            scratch.extend(values.iter().step_by(step).take(width));
            Src::Row(scratch)
        }
    }
}

/// `row = row op src`, or `row = 1 op src` when `!keep`.
#[inline(always)]
fn apply(row: &mut [f64], keep: bool, src: &Src, divide: bool) {
    match (src, keep, divide) {
        (Src::Scalar(k), true, false) => row.iter_mut().for_each(|x| *x *= k),
        (Src::Scalar(k), true, true) => row.iter_mut().for_each(|x| *x /= k),
        (Src::Scalar(k), false, false) => row.fill(1.0 * k),
        (Src::Scalar(k), false, true) => row.fill(1.0 / k),
        (Src::Row(r), true, false) => row.iter_mut().zip(*r).for_each(|(x, &y)| *x *= y),
        (Src::Row(r), true, true) => row.iter_mut().zip(*r).for_each(|(x, &y)| *x /= y),
        (Src::Row(r), false, false) => row.iter_mut().zip(*r).for_each(|(x, &y)| *x = 1.0 * y),
        (Src::Row(r), false, true) => row.iter_mut().zip(*r).for_each(|(x, &y)| *x = 1.0 / y),
    }
}

/// `out = extreme(out, from op src)`, `from` being 1 where absent.
#[inline(always)]
fn combine_row(out: &mut [f64], from: Option<&[f64]>, src: &Src, divide: bool, family: Family) {
    let (mul, div) = (|a: f64, b: f64| a * b, |a: f64, b: f64| a / b);
    let (max, min) = (f64::max, f64::min);
    match (divide, family) {
        (false, Family::Min) => combine_with(out, from, src, mul, min),
        (true, Family::Min) => combine_with(out, from, src, div, min),
        (false, _) => combine_with(out, from, src, mul, max),
        (true, _) => combine_with(out, from, src, div, max),
    }
}

/// [`combine_row`] with its operation and extreme fixed, so each loop compiles to straight
/// vector code.
#[inline(always)]
fn combine_with(
    out: &mut [f64],
    from: Option<&[f64]>,
    src: &Src,
    op: impl Fn(f64, f64) -> f64,
    pick: impl Fn(f64, f64) -> f64,
) {
    match (from, src) {
        (Some(row), Src::Row(r)) => {
            for ((o, &a), &b) in out.iter_mut().zip(row).zip(*r) {
                *o = pick(*o, op(a, b));
            }
        }
        (Some(row), Src::Scalar(k)) => {
            for (o, &a) in out.iter_mut().zip(row) {
                *o = pick(*o, op(a, *k));
            }
        }
        (None, Src::Row(r)) => {
            for (o, &b) in out.iter_mut().zip(*r) {
                *o = pick(*o, op(1.0, b));
            }
        }
        (None, Src::Scalar(k)) => {
            let v = op(1.0, *k);
            out.iter_mut().for_each(|o| *o = pick(*o, v));
        }
    }
}

/// A factor's elements over the ranges of the variables it reads (`bound` at its value);
/// `None` if any is nothing.
fn gather(
    t: &Tensor,
    index: &[crate::plan::nest::Affine],
    (ranges, order): (&[usize], &[VarId]),
    bound: Option<(VarId, i64)>,
) -> Option<Panel> {
    let reads = |v: &VarId| {
        index
            .iter()
            .any(|(coefs, _)| coefs.iter().any(|(x, _)| x == v))
    };
    let vars: Vec<VarId> = order.iter().copied().filter(reads).collect();
    let count: usize = vars.iter().map(|&v| ranges[v]).product();
    let mut strides = vec![0usize; ranges.len()];
    let mut s = 1;
    for &v in vars.iter().rev() {
        strides[v] = s;
        s *= ranges[v];
    }
    let mut env = vec![0i64; ranges.len()];
    if let Some((v, x)) = bound {
        env[v] = x;
    }
    let mut at = vec![0usize; ranges.len()];
    let mut key = vec![0u32; index.len()];
    let mut values = Vec::with_capacity(count);
    let mut hint = 0usize;
    for k in 0..count {
        odometer(&vars, ranges, k, &mut at);
        for &v in &vars {
            env[v] = at[v] as i64;
        }
        for ((slot, (coefs, c)), &n) in key.iter_mut().zip(index).zip(&t.shape) {
            let i = coefs.iter().fold(*c, |acc, &(v, k)| acc + env[v] * k);
            if i < 0 || i as u64 >= n as u64 {
                return None;
            }
            *slot = i as u32;
        }
        let value = match &t.storage {
            Storage::Sparse(s) => s.get_after(&key, &mut hint),
            _ => t.get_at(&key),
        };
        values.push(value?);
    }
    Some(Panel { values, strides })
}

/// Appends each output element's write: its position in the target from the left-hand
/// side, skipped where that leaves the target.
fn place(
    plan: &ExtremeProduct,
    shape: &[usize],
    bound: Option<(VarId, i64)>,
    acc: &[f64],
    writes: &mut Vec<(usize, f64)>,
) {
    let mut env = vec![0i64; plan.ranges.len()];
    if let Some((v, x)) = bound {
        env[v] = x;
    }
    let mut at = vec![0usize; plan.ranges.len()];
    writes.reserve(acc.len());
    'points: for (k, &value) in acc.iter().enumerate() {
        odometer(&plan.out, &plan.ranges, k, &mut at);
        for &v in &plan.out {
            env[v] = at[v] as i64;
        }
        let mut offset = 0usize;
        for (f, &n) in plan.lhs.iter().zip(shape) {
            match f.eval(&env) {
                Some(i) if i >= 0 && (i as u64) < n as u64 => offset = offset * n + i as usize,
                _ => continue 'points,
            }
        }
        writes.push((offset, value));
    }
}
