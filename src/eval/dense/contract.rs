//! A term's contraction tree: each pairwise product reduces the variables only one side
//! sums, reads both operands in place through strides where their summed variables lie
//! together (loops around the GEMMs for the rest) and orients its result for the product
//! that reads it; terms with a gathered window may run in blocks of rows.

use super::*;

/// A term's value over its free variables (in left-hand-side order), scaled.
pub(crate) fn term<'a>(c: &Contraction, values: &'a [Tensor], threads: usize) -> Operand<'a> {
    let mut root = match (c.single, &c.path) {
        (_, None) if c.sparse.is_none() => Operand {
            vars: Vars::new(),
            data: Cow::Owned(vec![1.0]),
        },
        // Scaled as it is widened.
        (true, _) => return widen(unscaled::<f32>(c, values, threads), c.scale, threads),
        (false, _) => unscaled::<f64>(c, values, threads),
    };
    if c.scale != 1.0 {
        for x in root.data.to_mut().iter_mut() {
            *x *= c.scale;
        }
    }
    root
}

/// A term with factors, over its free variables in left-hand-side order, unscaled, in `T`.
pub(super) fn unscaled<'a, T: Num>(
    c: &Contraction,
    values: &'a [Tensor],
    threads: usize,
) -> Operand<'a, T> {
    match (&c.sparse, &c.path) {
        (Some(f), _) => match tuples(&values[f.tensor].storage) {
            Some(r) if !f.shift.is_empty() => {
                let (rel, weights) = shifted_view(r, &f.shift, &f.vars, &c.extents);
                scatter(
                    c,
                    (&f.vars, (&rel, weights.as_deref())),
                    &sparse_operands(c, values, threads),
                    threads,
                )
            }
            Some(r) => scatter(
                c,
                (&f.vars, r),
                &sparse_operands(c, values, threads),
                threads,
            ),
            None => Operand {
                vars: Vars::from_slice(&c.out),
                data: Cow::Owned(vec![
                    T::default();
                    c.out.iter().map(|&v| c.extents[v]).product()
                ]),
            },
        },
        (None, Some(path)) => contracted(c, path, values, threads),
        (None, None) => Operand {
            vars: Vars::new(),
            data: Cow::Owned(vec![T::ONE]),
        },
    }
}

/// A term without a relation, over its free variables in left-hand-side order, unscaled;
/// in blocks of rows of its first variable when the plan says so (`Contraction::chunk`).
pub(super) fn contracted<'a, T: Num>(
    c: &Contraction,
    path: &Path,
    values: &'a [Tensor],
    threads: usize,
) -> Operand<'a, T> {
    let (Some(rows), Some(&first)) = (c.chunk, c.out.first()) else {
        let dense = reduce(subtree(c, path, values, threads), &c.keep, &c.extents);
        return permute(dense, &c.out, &c.extents, threads);
    };
    let total: usize = c.out.iter().map(|&v| c.extents[v]).product();
    let mut data = Vec::with_capacity(total);
    for start in (0..c.extents[first]).step_by(rows.max(1)) {
        let block = rows_block(
            c,
            first,
            start..(start + rows).min(c.extents[first]),
            values,
        );
        let dense = reduce(
            subtree(&block, path, values, threads),
            &block.keep,
            &block.extents,
        );
        data.extend_from_slice(&permute(dense, &block.out, &block.extents, threads).data);
    }
    data.resize(total, T::default());
    Operand {
        vars: Vars::from_slice(&c.out),
        data: data.into(),
    }
}

/// The term restricted to rows `range` of the variable `first`: every factor that reads
/// it becomes a window starting at the block's first row.
pub(super) fn rows_block(
    c: &Contraction,
    first: VarId,
    range: std::ops::Range<usize>,
    values: &[Tensor],
) -> Contraction {
    let mut block = c.forward_copy();
    block.chunk = None;
    block.extents[first] = range.len();
    for f in block.factors.iter_mut() {
        let Some(at) = f.vars.iter().position(|&v| v == first) else {
            continue;
        };
        let window = match f.window.take() {
            Some(w) => w,
            None => {
                let shape = values
                    .get(f.tensor)
                    .map(|t| t.shape.clone())
                    .unwrap_or_default();
                let own = strides(&f.vars, &c.extents);
                crate::plan::einsum::Window {
                    shape,
                    offset: 0,
                    strides: own.iter().map(|&s| s as i64).collect(),
                }
            }
        };
        let step = window.strides[at];
        f.window = Some(crate::plan::einsum::Window {
            offset: (window.offset as i64 + step * range.start as i64) as usize,
            ..window
        });
    }
    block
}

/// Evaluates a subtree, keeping the variables needed outside it.
pub(super) fn subtree<'a, T: Num>(
    c: &Contraction,
    path: &Path,
    values: &'a [Tensor],
    threads: usize,
) -> Operand<'a, T> {
    let leaf = |k: usize| factor_operand(&c.factors[k], values, &c.extents, threads);
    subtree_from(c, path, &leaf, threads)
}

/// Evaluates a subtree whose leaves `leaf` supplies.
pub(crate) fn subtree_from<'a, T: Num>(
    c: &Contraction,
    path: &Path,
    leaf: &dyn Fn(usize) -> Operand<'a, T>,
    threads: usize,
) -> Operand<'a, T> {
    node(c, path, leaf, threads, &[])
}

/// [`subtree_from`] for a node whose parent sums `next` out of its result.
pub(super) fn node<'a, T: Num>(
    c: &Contraction,
    path: &Path,
    leaf: &dyn Fn(usize) -> Operand<'a, T>,
    threads: usize,
    next: &[VarId],
) -> Operand<'a, T> {
    match path {
        Path::Leaf(k) => leaf(*k),
        Path::Pair(a, b) => {
            let keep = kept(c, &path.factors());
            let (in_a, in_b) = (kept(c, &a.factors()), kept(c, &b.factors()));
            let summed: Vec<VarId> = in_a
                .iter()
                .filter(|v| in_b.contains(v) && !keep.contains(v))
                .copied()
                .collect();
            let x = node(c, a, leaf, threads, &summed);
            let y = node(c, b, leaf, threads, &summed);
            contract(x, y, (&keep, &c.out, next), &c.extents, threads)
        }
    }
}

/// The contraction of two operands over their shared variables not in `keep`. The result's
/// rows come from the operand whose own variables come first in `order` (the term's output
/// order), so that a product like `W[h, i] X[b, i]` onto `[b, h]` is computed as `X Wᵀ`
/// and needs no permutation afterwards.
pub(super) fn contract<'a, T: Num>(
    x: Operand<'a, T>,
    y: Operand<'a, T>,
    (keep, order, next): (&[VarId], &[VarId], &[VarId]),
    extents: &[usize],
    threads: usize,
) -> Operand<'a, T> {
    // Axes of extent 1 (a layer's `l` at one step) are set aside: they move no element, and
    // between summed variables (`X[s, l, p, d]` summed over s and p) they would stop an
    // operand from being read in place. The result has the kept ones first.
    let unit = |v: &VarId| extents[*v] == 1;
    if x.vars.iter().chain(&y.vars).any(unit) {
        let mut units: Vars = Vars::new();
        for v in x.vars.iter().chain(&y.vars) {
            if unit(v) && keep.contains(v) && !units.contains(v) {
                units.push(*v);
            }
        }
        let strip = |op: Operand<'a, T>| Operand {
            vars: op.vars.iter().copied().filter(|v| !unit(v)).collect(),
            data: op.data,
        };
        let keep: Vec<VarId> = keep.iter().copied().filter(|v| !unit(v)).collect();
        let next: Vec<VarId> = next.iter().copied().filter(|v| !unit(v)).collect();
        let inner = contract(strip(x), strip(y), (&keep, order, &next), extents, threads);
        return Operand {
            vars: units.iter().chain(&inner.vars).copied().collect(),
            data: inner.data,
        };
    }
    let swap = swapped(&x, &y, (keep, order, next));
    let (x, y) = if swap { (y, x) } else { (x, y) };
    let with = |other: &Operand<T>| -> Vec<VarId> {
        keep.iter()
            .chain(&other.vars)
            .copied()
            .collect::<Vec<VarId>>()
    };
    let (keep_x, keep_y) = (with(&y), with(&x));
    let x = reduce(x, &keep_x, extents);
    let y = reduce(y, &keep_y, extents);
    let pick = |vars: &[VarId], test: &dyn Fn(&VarId) -> bool| -> Vec<VarId> {
        vars.iter().copied().filter(|v| test(v)).collect()
    };
    let batch = pick(&x.vars, &|v| y.vars.contains(v) && keep.contains(v));
    let inner = pick(&x.vars, &|v| y.vars.contains(v) && !keep.contains(v));
    let rows = pick(&x.vars, &|v| !y.vars.contains(v));
    let cols = pick(&y.vars, &|v| !x.vars.contains(v));
    let axes = Axes {
        batch,
        inner,
        rows,
        cols,
    };
    multiplied(x, y, &axes, extents, threads)
}

/// The variables of a pairwise product by role: in both and kept (looped over), in both and
/// summed, and each side's own.
struct Axes {
    batch: Vec<VarId>,
    inner: Vec<VarId>,
    rows: Vec<VarId>,
    cols: Vec<VarId>,
}

/// The product of `x` and `y` (already reduced to what it needs) as GEMMs: read in place
/// through strides where the summed variables lie together in both, else permuted to
/// `[batch, rows, inner]` and `[batch, inner, columns]` first.
fn multiplied<'a, T: Num>(
    x: Operand<'a, T>,
    y: Operand<'a, T>,
    axes: &Axes,
    extents: &[usize],
    threads: usize,
) -> Operand<'a, T> {
    let Axes {
        batch,
        inner,
        rows,
        cols,
    } = axes;
    let size = |vs: &[VarId]| -> usize { vs.iter().map(|&v| extents[v]).product() };
    let (m, k, n) = (size(rows), size(inner), size(cols));
    // Operands are read in place through strides: the summed variables must lie together,
    // in the same order, in both; of each side's own variables, the largest run that lies
    // together gives the matrix's rows (or columns), and the rest are looped over with the
    // batch variables, each GEMM writing its block of the result. Where that fails, or would
    // make GEMMs so small that calls cost more than copying, operands are permuted into
    // `[batch, rows, inner]` and `[batch, inner, columns]` first.
    let (tail_x, tail_y) = (
        widest_run(&x.vars, rows, extents),
        widest_run(&y.vars, cols, extents),
    );
    let in_place = run_at(&x.vars, inner).is_some()
        && run_at(&y.vars, inner).is_some()
        && (size(&tail_x) == m && size(&tail_y) == n
            || size(&tail_x) * size(&tail_y) * k >= 1 << 13);
    let (x, y, tail_x, tail_y) = if in_place {
        (x, y, tail_x, tail_y)
    } else {
        let x = permute(
            x,
            &[batch.clone(), rows.clone(), inner.clone()].concat(),
            extents,
            threads,
        );
        let y = permute(
            y,
            &[batch.clone(), inner.clone(), cols.clone()].concat(),
            extents,
            threads,
        );
        (x, y, rows.clone(), cols.clone())
    };
    let (own_x, own_y) = (strides(&x.vars, extents), strides(&y.vars, extents));
    let stride = |vars: &[VarId], own: &[usize], v: Option<&VarId>| {
        v.and_then(|v| vars.iter().position(|x| x == v))
            .map_or(0, |p| own[p])
    };
    let loops: Vec<Loop> = batch
        .iter()
        .chain(rows.iter().filter(|v| !tail_x.contains(v)))
        .chain(cols.iter().filter(|v| !tail_y.contains(v)))
        .map(|v| {
            let (sx, sy) = (
                stride(&x.vars, &own_x, Some(v)),
                stride(&y.vars, &own_y, Some(v)),
            );
            (extents[*v], sx, sy)
        })
        .collect();
    let lhs = [
        stride(&x.vars, &own_x, tail_x.last()),
        stride(&x.vars, &own_x, inner.last()),
    ];
    let rhs = [
        stride(&y.vars, &own_y, inner.last()),
        stride(&y.vars, &own_y, tail_y.last()),
    ];
    let data = looped(
        &loops,
        (size(&tail_x), size(&tail_y), k),
        (&x.data, lhs),
        (&y.data, rhs),
        (T::default(), T::ONE),
        threads,
    );
    let looped_vars = batch
        .iter()
        .chain(rows.iter().filter(|v| !tail_x.contains(v)))
        .chain(cols.iter().filter(|v| !tail_y.contains(v)));
    Operand {
        vars: looped_vars.chain(&tail_x).chain(&tail_y).copied().collect(),
        data: data.into(),
    }
}

/// Whether the result's rows come from `y` rather than `x`: from the operand whose own
/// variables come first in `order`, unless only the other orientation puts the variables
/// the parent sums (`next`) at one end of the result.
fn swapped<T: Num>(
    x: &Operand<T>,
    y: &Operand<T>,
    (keep, order, next): (&[VarId], &[VarId], &[VarId]),
) -> bool {
    let rank = |v: &VarId| order.iter().position(|o| o == v).unwrap_or(usize::MAX);
    let first_own = |a: &Operand<T>, b: &Operand<T>| {
        a.vars
            .iter()
            .filter(|v| keep.contains(v) && !b.vars.contains(v))
            .map(rank)
            .min()
    };
    // The result is laid out [batch, rows, columns]. When the parent contraction sums
    // `next` out of it, the orientation that puts those variables at one end lets the
    // parent read it in place (a chain `C[p, i] I[i, j, k, l] C[q, j] …` then never
    // permutes); otherwise the output order decides.
    let ends = |a: &Operand<T>, b: &Operand<T>| {
        let layout: Vec<VarId> = a
            .vars
            .iter()
            .filter(|v| keep.contains(v))
            .chain(
                b.vars
                    .iter()
                    .filter(|v| keep.contains(v) && !a.vars.contains(v)),
            )
            .copied()
            .collect();
        let n = next.len();
        n > 0
            && layout.len() >= n
            && (layout[..n].iter().all(|v| next.contains(v))
                || layout[layout.len() - n..].iter().all(|v| next.contains(v)))
    };
    match (ends(x, y), ends(y, x)) {
        (false, true) => true,
        (true, false) => false,
        _ => matches!((first_own(x, y), first_own(y, x)), (Some(r), Some(c)) if c < r),
    }
}

/// Where `group` lies in `vars` as consecutive axes in its own order (`Some(0)` for an
/// empty group).
pub(super) fn run_at(vars: &[VarId], group: &[VarId]) -> Option<usize> {
    if group.is_empty() {
        return Some(0);
    }
    vars.windows(group.len()).position(|w| w == group)
}

/// Of the maximal runs of consecutive axes of `vars` that belong to `group`, the one with
/// the most elements (the later one on a tie), in `vars` order.
pub(super) fn widest_run(vars: &[VarId], group: &[VarId], extents: &[usize]) -> Vec<VarId> {
    let mut best: Vec<VarId> = Vec::new();
    let mut best_size = 0usize;
    let mut run: Vec<VarId> = Vec::new();
    for v in vars.iter().map(Some).chain([None]) {
        match v {
            Some(v) if group.contains(v) => run.push(*v),
            _ => {
                let size: usize = run.iter().map(|&v| extents[v]).product();
                if !run.is_empty() && size >= best_size {
                    best_size = size;
                    best = std::mem::take(&mut run);
                }
                run.clear();
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operand(vars: &[VarId], data: Vec<f64>) -> Operand<'static> {
        Operand {
            vars: Vars::from_slice(vars),
            data: Cow::Owned(data),
        }
    }

    /// `Y[l, h, d] = Σ_{s,p} A[s, l, p, h] B[s, l, p, d]` with `l` of extent 1 between the
    /// summed `s` and `p`: the same values as the product without `l`, with `l` kept.
    #[test]
    fn a_unit_axis_between_summed_variables_changes_no_value() {
        // Variables: 0 = s, 1 = l, 2 = p, 3 = h, 4 = d.
        let extents = [3, 1, 4, 2, 5];
        let a: Vec<f64> = (0..3 * 4 * 2).map(|i| f64::from(i % 7) - 2.0).collect();
        let b: Vec<f64> = (0..3 * 4 * 5).map(|i| f64::from(i % 5) * 0.5).collect();
        let with = contract(
            operand(&[0, 1, 2, 3], a.clone()),
            operand(&[0, 1, 2, 4], b.clone()),
            (&[1, 3, 4], &[1, 3, 4], &[]),
            &extents,
            1,
        );
        let without = contract(
            operand(&[0, 2, 3], a.clone()),
            operand(&[0, 2, 4], b.clone()),
            (&[3, 4], &[3, 4], &[]),
            &extents,
            1,
        );
        assert_eq!(with.vars[..], [1, 3, 4]);
        assert_eq!(without.vars[..], [3, 4]);
        assert_eq!(with.data, without.data);
        let (h, d) = (1, 3);
        let want: f64 = (0..3)
            .flat_map(|s| (0..4).map(move |p| (s, p)))
            .map(|(s, p)| a[(s * 4 + p) * 2 + h] * b[(s * 4 + p) * 5 + d])
            .sum();
        assert_eq!(with.data[h * 5 + d], want);
    }
}
