//! Executes index-ordered recursion (`plan::steps`): step 0, 1, 2, … in turn, each step's
//! equations in their planned order, each writing its target's slice of that step once it
//! has every contribution: `data + Σ contributions`, rounded once to the tensor's type, as
//! the naive iteration's fixpoint holds it. A step runs the equation's one-step dense plan
//! (its windows moved to the step) or, where that cannot be used, its loop nest.

use super::extreme::ExtremeRun;
use super::scalar::{Exact, Scalar};
use super::{dense, fixpoint, nest, EvalOptions};
use crate::diagnostics::Diagnostics;
use crate::plan::einsum::DenseEquation;
use crate::plan::steps::{StepEquation, Steps, Virtual};
use crate::semantics::{Checked, Family, Stratum};
use crate::tensor::{Storage, Tensor};

/// Evaluates the stratum in index order, in place. Its tensors hold their data (or zeros)
/// and are dense.
/// With `keep`, the terms each step's dense plans computed are kept there for the backward
/// pass (`learn::steps_backward`).
pub(super) fn evaluate(
    p: &Checked,
    st: &Stratum,
    plan: &Steps,
    values: &mut [Tensor],
    (o, pool): (&EvalOptions, Option<&rayon::ThreadPool>),
    mut keep: Option<&mut dense::StepTerms>,
) -> Result<(), Diagnostics> {
    if plan.exact {
        return evaluate_exact(p, st, plan, values, o);
    }
    let mut writes: Vec<(usize, f64)> = Vec::new();
    let mut extremes: Vec<Option<ExtremeRun>> = plan
        .equations
        .iter()
        .map(|e| e.extreme.as_ref().map(ExtremeRun::new))
        .collect();
    // Each equation's one-step plan, moved from step to step.
    let mut moved: Vec<Option<DenseEquation>> =
        plan.equations.iter().map(|e| e.dense.clone()).collect();
    for s in 0..plan.count {
        super::stop::check(p, st, &o.stop)?;
        let mut k = 0;
        while k < plan.equations.len() {
            let target = plan.equations[k].target;
            let group = plan.equations[k..]
                .iter()
                .take_while(|e| e.target == target)
                .count();
            // The equations of this target that write this step (`Emb[n, 0, d]` only the
            // first).
            let writers = plan.equations[k..k + group]
                .iter()
                .filter(|e| e.at_step(s).is_some())
                .count();
            writes.clear();
            let mut direct = None;
            let equations = plan.equations[k..k + group].iter();
            let held = extremes[k..k + group]
                .iter_mut()
                .zip(&mut moved[k..k + group]);
            for (j, (eq, (extreme, dense))) in equations.zip(held).enumerate() {
                if let Some(x) = eq.at_step(s) {
                    let bound = eq.var.map(|v| (v, x as i64));
                    let moving = (eq.target, st.tensors.as_slice());
                    if let Some(run) = extreme {
                        if run.contribute(values, moving, bound, &mut writes) {
                            continue;
                        }
                    }
                    // One equation writing its own elements once each: its grid goes straight
                    // into the target.
                    let kept = keep
                        .as_deref_mut()
                        .map(|m| m.entry((s, k + j)).or_default());
                    let found = dense.as_mut().and_then(|d| {
                        eq.move_to(x, d).then_some(())?;
                        dense::contributions(p, d, values, (o, pool), kept)
                    });
                    match found {
                        Some(found) if writers == 1 && plan.family == Family::Sum => {
                            direct = Some((found, j))
                        }
                        Some((grid, at)) => {
                            writes.reserve(grid.len());
                            at.each(grid.len(), &mut |i, a| writes.push((a, grid.get(i))));
                            let kept = keep.as_deref_mut().and_then(|m| m.get_mut(&(s, k + j)));
                            if let (Some(d), Some(kept)) = (dense.as_ref(), kept) {
                                dense::keep_grid(d, kept, grid);
                            }
                        }
                        None => contribute(eq, x, values, o, &mut writes),
                    }
                }
            }
            if let Some(((grid, at), j)) = direct {
                if let Some(bad) = write_grid(&mut values[target], &grid, &at, o.threads) {
                    return Err(fixpoint::diverged(p, st, target, bad).into());
                }
                let kept = keep.as_deref_mut().and_then(|m| m.get_mut(&(s, k + j)));
                if let (Some(Some(d)), Some(kept)) = (moved.get(k + j), kept) {
                    dense::keep_grid(d, kept, grid);
                }
                k += group;
                continue;
            }
            let bad = match plan.family {
                Family::Sum => write(&mut values[target], &mut writes, writers > 1),
                family => write_extreme(&mut values[target], &mut writes, family),
            };
            if let Some(bad) = bad {
                return Err(fixpoint::diverged(p, st, target, bad).into());
            }
            k += group;
        }
    }
    Ok(())
}

/// [`evaluate`] for `int` tensors computed from integer values (`Steps::exact`, §8): each
/// step's loop nests in exact i64, each element of the step written once as its data plus
/// its contributions; E0406 where one leaves i64.
fn evaluate_exact(
    p: &Checked,
    st: &Stratum,
    plan: &Steps,
    values: &mut [Tensor],
    o: &EvalOptions,
) -> Result<(), Diagnostics> {
    let mut writes: Vec<(usize, Exact)> = Vec::new();
    for s in 0..plan.count {
        super::stop::check(p, st, &o.stop)?;
        for group in plan.equations.chunk_by(|a, b| a.target == b.target) {
            let target = group[0].target;
            writes.clear();
            for eq in group {
                let Some(x) = eq.at_step(s) else {
                    continue;
                };
                let bound = eq.var.map(|v| (v, x as i64));
                nest::contributions::<Exact>(&eq.nest, values, o, bound, &mut |idx, v| {
                    if let Some(at) = values[target].offset(idx) {
                        writes.push((at, v));
                    }
                });
            }
            // Stable: an element's contributions add in the order written.
            writes.sort_by_key(|w| w.0);
            let Storage::Dense(d) = &mut values[target].storage else {
                continue;
            };
            if !add_exact(d, &writes) {
                return Err(super::accumulate::overflow(&p.tensors[target]).into());
            }
        }
    }
    Ok(())
}

/// Adds sorted exact writes to the elements they name; `false` where a sum leaves i64.
fn add_exact(d: &mut crate::tensor::Dense, writes: &[(usize, Exact)]) -> bool {
    for run in writes.chunk_by(|a, b| a.0 == b.0) {
        let at = run[0].0;
        let held = Exact(d.get_int(at));
        let sum = run.iter().fold(held, |a, w| a.fold(Family::Sum, w.1));
        match sum.0 {
            Some(v) => d.set_int(at, v),
            None => return false,
        }
    }
    true
}

/// Evaluates a virtual index on the dense path: each step computes the next slice from the
/// last (starting from the data, or zeros) with the target holding the last while it runs;
/// the tensor is then its data plus the final slice (§5.2, as the reference steps). A step
/// whose inputs are not as planned runs the equation's loop nest instead (every step).
pub(super) fn evaluate_virtual(
    p: &Checked,
    plan: &Virtual,
    values: &mut [Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
) -> Result<bool, Diagnostics> {
    let step = &plan.step;
    let t = step.target;
    let info = &p.tensors[t];
    let start = match &p.data[t] {
        Some(d) => d.clone(),
        None => super::initial::empty(info, o)?,
    };
    let mut held = std::mem::replace(&mut values[t], start);
    let mut moved = step.dense.clone();
    for x in 0..step.range {
        let next = moved.as_mut().and_then(|d| {
            step.move_to(x, d).then_some(())?;
            dense::contributions(p, d, values, (o, pool), None)
        });
        let Some((grid, _)) = next else {
            values[t] = held;
            return Ok(false);
        };
        let Ok(slice) = Tensor::dense(info.elem, info.shape.clone(), grid.into_f64()) else {
            values[t] = held;
            return Ok(false);
        };
        values[t] = slice;
    }
    std::mem::swap(&mut values[t], &mut held);
    let slice = held;
    values[t] = match &p.data[t] {
        Some(d) => {
            let total: Vec<f64> = d
                .to_dense_values()
                .iter()
                .zip(slice.to_dense_values())
                .map(|(a, b)| a + b)
                .collect();
            Tensor::dense(info.elem, info.shape.clone(), total).unwrap_or(slice)
        }
        None => slice,
    };
    Ok(true)
}

/// Appends the (offset, value) pairs that equation `eq`'s loop nest adds at step variable
/// value `x`.
fn contribute(
    eq: &StepEquation,
    x: usize,
    values: &[Tensor],
    o: &EvalOptions,
    writes: &mut Vec<(usize, f64)>,
) {
    let bound = eq.var.map(|v| (v, x as i64));
    nest::contributions::<f64>(&eq.nest, values, o, bound, &mut |idx, v| {
        if let Some(at) = values[eq.target].offset(idx) {
            writes.push((at, v));
        }
    });
}

/// Combines the step's writes into a `max=`/`min=` tensor's defined elements: each
/// element's values by the family, with its data where it has some. The step's elements
/// come after every earlier one (the step axis is first), so they are appended in order.
fn write_extreme(t: &mut Tensor, writes: &mut [(usize, f64)], family: Family) -> Option<f64> {
    let n = combine_in_order(writes, family, t.shape.iter().skip(1).product());
    let writes = &writes[..n];
    let (shape, elem) = (t.shape.clone(), t.elem);
    let Storage::Sparse(s) = &mut t.storage else {
        return None;
    };
    let combine = |a: f64, b: f64| match family {
        Family::Max => a.max(b),
        _ => a.min(b),
    };
    let mut key = vec![0u32; shape.len()];
    let mut k = 0;
    while k < writes.len() {
        let (at, mut v) = writes[k];
        k += 1;
        while k < writes.len() && writes[k].0 == at {
            v = combine(v, writes[k].1);
            k += 1;
        }
        crate::tensor::odometer::unflatten(at, &shape, |ax, x| key[ax] = x as u32);
        // A step's element after every stored one is new (most are).
        if v.is_finite() && s.push_last(&key, elem.round(v)) {
            continue;
        }
        let old = s.get(&key);
        let new = elem.round(old.map_or(v, |o| combine(o, v)));
        if !new.is_finite() && old.is_none_or(f64::is_finite) {
            return Some(new);
        }
        if !s.push_last(&key, new) {
            s.set(&key, new);
        }
    }
    None
}

/// Orders a step's writes by offset, each element's values adjacent in the order written.
/// The writes of one step of a tensor whose step axis is first fall in one block of `slice`
/// elements: they are combined there by the family (one pass, no sort), leaving one write
/// per element.
fn combine_in_order(writes: &mut [(usize, f64)], family: Family, slice: usize) -> usize {
    let Some(base) = writes.iter().map(|w| w.0).min() else {
        return 0;
    };
    let block = base / slice.max(1) * slice.max(1);
    if slice == 0 || writes.iter().any(|w| w.0 >= block + slice) {
        writes.sort_by_key(|w| w.0);
        return writes.len();
    }
    let mut acc: Vec<Option<f64>> = vec![None; slice];
    for &(at, v) in writes.iter() {
        let slot = &mut acc[at - block];
        *slot = Some(match (*slot, family) {
            (None, _) => v,
            (Some(a), Family::Max) => a.max(v),
            (Some(a), _) => a.min(v),
        });
    }
    let mut n = 0;
    for (i, v) in acc.into_iter().enumerate() {
        if let Some(v) = v {
            writes[n] = (block + i, v);
            n += 1;
        }
    }
    n
}

/// Adds one equation's grid to the tensor where its placement puts it (each element
/// written once; on the `--threads` pool's workers when large); the first value that is
/// not finite where the element was, if any.
fn write_grid(
    t: &mut Tensor,
    grid: &dense::Grid,
    at: &dense::Placement,
    threads: usize,
) -> Option<f64> {
    let Storage::Dense(d) = &mut t.storage else {
        return None;
    };
    use crate::tensor::Run;
    let len = grid.len();
    if at.in_runs() {
        let mut runs = Vec::new();
        at.runs(len, &mut |i, a, n| match grid {
            dense::Grid::F32(v) => runs.push((a, Run::F32(&v[i..i + n]))),
            dense::Grid::F64(v) => runs.push((a, Run::F64(&v[i..i + n]))),
        });
        return d.add_runs(&runs, dense::split::splits(threads, len));
    }
    d.add_each(&mut |put| at.each(len, &mut |i, a| put(a, grid.get(i))))
}

/// Adds the step's writes to the tensor (its data, or 0, being what those elements hold),
/// each element's values summed first (in the order written) when several equations wrote;
/// the first value that is not finite where the element was, if any (divergence, §9).
fn write(t: &mut Tensor, writes: &mut [(usize, f64)], several: bool) -> Option<f64> {
    if several {
        writes.sort_by_key(|w| w.0);
    }
    let Storage::Dense(d) = &mut t.storage else {
        return None;
    };
    d.add_each(&mut |put| {
        let mut k = 0;
        while k < writes.len() {
            let (at, mut sum) = writes[k];
            k += 1;
            while k < writes.len() && writes[k].0 == at {
                sum += writes[k].1;
                k += 1;
            }
            put(at, sum);
        }
    })
}
