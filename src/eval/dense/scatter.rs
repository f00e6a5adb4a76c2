//! A relation, or a tensor of defined elements, times dense operands: each tuple adds the
//! product of the operands' slices at its positions (times its value), in time linear in
//! the tuples; sorted tuples of one result row are summed in a local row. Relations read at
//! shifted positions are seen through their shifted tuples.

use super::*;
use crate::tensor::odometer::{advance, carries};

/// A relation's tuples, or a tensor of defined elements' positions with their values (each
/// tuple's weight); `None` for a dense tensor.
pub(super) fn tuples(s: &Storage) -> Option<Tuples<'_>> {
    match s {
        Storage::Relation(r) => Some((r, None)),
        Storage::Sparse(s) => Some((s.positions(), Some(s.values()))),
        Storage::Dense(_) => None,
    }
}

/// The tuples of a relation read at shifted positions (`Obs(t + 1, o)`), as the variables
/// see them: those whose every position minus its shift lies in its variable's extent, so
/// shifted (subtracting constants per axis keeps them sorted). The first axis's are a run
/// of the sorted tuples, found by binary search.
pub(super) fn shifted_view(
    (rel, weights): Tuples,
    shift: &[i64],
    vars: &[VarId],
    extents: &[usize],
) -> (crate::tensor::Relation, Option<Vec<f64>>) {
    let arity = shift.len();
    let first = |i: usize| i64::from(rel.tuple(i)[0]);
    let (lo, hi) = match (shift.first(), vars.first()) {
        (Some(&s0), Some(&v0)) => {
            let bound = |limit: i64| {
                let (mut a, mut b) = (0, rel.len());
                while a < b {
                    let mid = (a + b) / 2;
                    if first(mid) < limit {
                        a = mid + 1;
                    } else {
                        b = mid;
                    }
                }
                a
            };
            (bound(s0), bound(s0 + extents[v0] as i64))
        }
        _ => (0, rel.len()),
    };
    let mut data = Vec::with_capacity((hi - lo) * arity);
    let mut kept = Vec::new();
    for i in lo..hi {
        let t = rel.tuple(i);
        let inside = t
            .iter()
            .zip(shift.iter().zip(vars))
            .all(|(&p, (&s, &v))| (0..extents[v] as i64).contains(&(i64::from(p) - s)));
        if inside {
            data.extend(
                t.iter()
                    .zip(shift)
                    .map(|(&p, &s)| (i64::from(p) - s) as u32),
            );
            kept.push(i);
        }
    }
    let view = crate::tensor::Relation::from_sorted(arity, data);
    let weights = weights.map(|w| kept.iter().map(|&i| w[i]).collect());
    (view, weights)
}

/// Tuples and, for a tensor of defined elements, the value at each (a relation's are 1).
pub(super) type Tuples<'t> = (&'t crate::tensor::Relation, Option<&'t [f64]>);

/// The term's value over `c.out` when a relation multiplies dense operands: for every
/// tuple, the product of the operands' values at the tuple's positions (times the tuple's
/// value, for a tensor of defined elements) is added to the result there (variables the
/// tuple does not fix run over their extents). Time is linear in the tuples times that
/// slice; the relation is never made dense.
pub(super) fn scatter<'a, T: Num>(
    c: &Contraction,
    (rel_vars, (rel, weights)): (&[VarId], Tuples),
    parts: &[Operand<T>],
    threads: usize,
) -> Operand<'a, T> {
    let walk = TupleWalk::new(c, rel_vars, parts);
    let total: usize = c.out.iter().map(|&v| c.extents[v]).product();
    let mut data = vec![T::default(); total];
    // Tuples are sorted, so when the relation's first variable is the result's first axis,
    // runs of tuples write disjoint slabs of rows: workers take whole slabs, and each
    // element is summed in tuple order whatever the thread count.
    let rows = c.out.first().map_or(0, |&v| c.extents[v]);
    if threads > 1 && rows > 0 && rel.len() >= 1 << 12 && c.out.first() == rel_vars.first() {
        use rayon::prelude::*;
        let row = total / rows;
        let first = |i: usize| (rel.tuple(i)[0] as usize).min(rows);
        let step = rel.len().div_ceil(threads * 8);
        let mut cuts = vec![0usize];
        let mut i = step;
        while i < rel.len() {
            while i < rel.len() && first(i) == first(i - 1) {
                i += 1;
            }
            if i < rel.len() {
                cuts.push(i);
            }
            i += step;
        }
        cuts.push(rel.len());
        let mut slabs = Vec::new();
        let mut rest = data.as_mut_slice();
        for (k, w) in cuts.windows(2).enumerate() {
            let end = if k + 2 == cuts.len() {
                rows
            } else {
                first(w[1])
            };
            let start = if k == 0 { 0 } else { first(w[0]) };
            let (slab, tail) = rest.split_at_mut((end - start) * row);
            rest = tail;
            slabs.push((w[0]..w[1], start * row, slab));
        }
        slabs.into_par_iter().for_each(|(tuples, base, slab)| {
            add_tuples(&walk, (rel, weights, tuples), parts, (slab, base));
        });
    } else {
        add_tuples(&walk, (rel, weights, 0..rel.len()), parts, (&mut data, 0));
    }
    Operand {
        vars: Vars::from_slice(&c.out),
        data: data.into(),
    }
}

/// Adds the products of `tuples` (times their `weights`, if any) into `out`, which holds the
/// result from offset `base` on.
pub(super) fn add_tuples<T: Num>(
    walk: &TupleWalk,
    (rel, weights, tuples): (
        &crate::tensor::Relation,
        Option<&[f64]>,
        std::ops::Range<usize>,
    ),
    parts: &[Operand<T>],
    (out, base): (&mut [T], usize),
) {
    let row = match (parts, walk.free.as_slice()) {
        ([part], [(n, 1, steps)]) if steps[0] == 1 => Some((part, *n)),
        _ => None,
    };
    if let Some((part, n)) = row {
        if walk.runs() {
            return sum_rows(walk, (rel, weights, tuples), (&part.data, n), (out, base));
        }
    }
    let weight = |i: usize| weights.and_then(|w| w.get(i)).copied().unwrap_or(1.0);
    walk.run(rel, tuples, &mut |i, at_out, at, whole| {
        let at_out = at_out.wrapping_sub(base);
        match (row, whole) {
            // The common case, one operand whose free slice is contiguous like the result's
            // (`Neig(n, m) Z[m, d]`): add a row (times the tuple's value) to a row.
            (Some((part, n)), true) => {
                if let (Some(src), Some(dst)) = (
                    part.data.get(at[0]..at[0] + n),
                    out.get_mut(at_out..at_out.wrapping_add(n)),
                ) {
                    match weights {
                        None => dst.iter_mut().zip(src).for_each(|(d, &x)| *d = d.add(x)),
                        Some(_) => {
                            let w = T::from_f64(weight(i));
                            dst.iter_mut()
                                .zip(src)
                                .for_each(|(d, &x)| *d = d.add(x.mul(w)));
                        }
                    }
                }
                true
            }
            (None, true) => false,
            (_, false) => {
                let product = parts
                    .iter()
                    .zip(at)
                    .map(|(o, &k)| o.data[k].into())
                    .product::<f64>();
                if let Some(slot) = out.get_mut(at_out) {
                    *slot = T::from_f64((*slot).into() + weight(i) * product);
                }
                true
            }
        }
    });
}

/// [`add_tuples`] for one operand whose rows are added whole (`Neig(n, m) Z[m, d]`) when
/// only the tuple's first position moves the result ([`TupleWalk::runs`]): the sorted
/// tuples of one result row are consecutive, so their operand rows are summed in a local
/// row, in tuple order from zero, and stored once. The sums are the same as adding each
/// into the zeroed result.
pub(super) fn sum_rows<T: Num>(
    walk: &TupleWalk,
    (rel, weights, tuples): (
        &crate::tensor::Relation,
        Option<&[f64]>,
        std::ops::Range<usize>,
    ),
    (part, n): (&[T], usize),
    (out, base): (&mut [T], usize),
) {
    let mut acc = vec![T::default(); n];
    let mut current: Option<usize> = None;
    let mut flush = |at: Option<usize>, acc: &mut [T]| {
        let dst = at.and_then(|at| out.get_mut(at.wrapping_sub(base)..at.wrapping_sub(base) + n));
        if let Some(dst) = dst {
            for (d, a) in dst.iter_mut().zip(acc.iter_mut()) {
                *d = d.add(*a);
                *a = T::default();
            }
        }
    };
    for i in tuples {
        let tuple = rel.tuple(i);
        let mut at_out = 0usize;
        let mut at = 0usize;
        let mut inside = true;
        for (&x, (extent, so, sp)) in tuple.iter().zip(&walk.fixed) {
            inside &= (x as usize) < *extent;
            at_out += x as usize * so;
            at += x as usize * sp[0];
        }
        let Some(src) = part.get(at..at + n).filter(|_| inside) else {
            continue;
        };
        if current != Some(at_out) {
            flush(current, &mut acc);
            current = Some(at_out);
        }
        match weights.and_then(|w| w.get(i)) {
            None => acc.iter_mut().zip(src).for_each(|(a, &x)| *a = a.add(x)),
            Some(&w) => {
                let w = T::from_f64(w);
                acc.iter_mut()
                    .zip(src)
                    .for_each(|(a, &x)| *a = a.add(x.mul(w)));
            }
        }
    }
    flush(current, &mut acc);
}

/// One axis of a relation-times-operands term: its extent, its stride in the result, and
/// its stride in each operand.
pub(crate) type Axis = (usize, usize, Vec<usize>);

/// What [`TupleWalk::run`] calls: tuple index, result offset, operand offsets, and whether
/// the call stands for the tuple's whole slice.
pub(crate) type TupleVisitor<'f> = dyn FnMut(usize, usize, &[usize], bool) -> bool + 'f;

/// How a relation-times-operands term is walked: the relation's variables, fixed by each
/// tuple, and the free ones (the result's and the operands' other variables) that run over
/// their extents at each tuple.
pub(crate) struct TupleWalk {
    pub(crate) fixed: Vec<Axis>,
    pub(crate) free: Vec<Axis>,
    pub(crate) operands: usize,
}

impl TupleWalk {
    pub(crate) fn new<T: Num>(
        c: &Contraction,
        rel_vars: &[VarId],
        parts: &[Operand<T>],
    ) -> TupleWalk {
        let out_strides = strides(&c.out, &c.extents);
        let part_strides: Vec<Vec<usize>> =
            parts.iter().map(|o| strides(&o.vars, &c.extents)).collect();
        let axis = |v: VarId| {
            let within =
                |vars: &[VarId], s: &[usize]| vars.iter().position(|&x| x == v).map_or(0, |k| s[k]);
            let steps: Vec<usize> = parts
                .iter()
                .zip(&part_strides)
                .map(|(o, s)| within(&o.vars, s))
                .collect();
            (c.extents[v], within(&c.out, &out_strides), steps)
        };
        // Variables of one value (a step's index, a window's fixed row) move nothing.
        let mut free_vars: Vec<VarId> = Vec::new();
        for &v in c.out.iter().chain(parts.iter().flat_map(|p| p.vars.iter())) {
            if !rel_vars.contains(&v) && !free_vars.contains(&v) && c.extents[v] != 1 {
                free_vars.push(v);
            }
        }
        TupleWalk {
            fixed: rel_vars.iter().map(|&v| axis(v)).collect(),
            free: free_vars.into_iter().map(axis).collect(),
            operands: parts.len(),
        }
    }

    /// Whether only the tuple's first position moves the result: then the (sorted) tuples
    /// that add to one result element are consecutive.
    pub(crate) fn runs(&self) -> bool {
        self.fixed.first().is_some_and(|a| a.1 > 0) && self.fixed[1..].iter().all(|a| a.1 == 0)
    }

    /// For each tuple `i` inside the extents, calls `f(i, result offset, operand offsets,
    /// true)` at the start of its slice; unless that returns `true` (it handled the whole
    /// slice), then `f(…, false)` at every point of the slice, in row-major order of the free
    /// variables.
    pub(crate) fn run(
        &self,
        rel: &crate::tensor::Relation,
        tuples: std::ops::Range<usize>,
        f: &mut TupleVisitor,
    ) {
        let slice: usize = self.free.iter().map(|a| a.0).product();
        let mut idx = vec![0usize; self.free.len()];
        let mut at = vec![0usize; self.operands];
        // The result's and each operand's offset change when a free variable advances.
        let dims: Vec<usize> = self.free.iter().map(|a| a.0).collect();
        let strides = |of: &dyn Fn(&Axis) -> usize| -> Vec<i64> {
            self.free.iter().map(|a| of(a) as i64).collect()
        };
        let out_carry = carries(&strides(&|a| a.1), &dims);
        let carry: Vec<Vec<i64>> = (0..self.operands)
            .map(|k| carries(&strides(&|a| a.2[k]), &dims))
            .collect();
        for i in tuples {
            let tuple = rel.tuple(i);
            if tuple
                .iter()
                .zip(&self.fixed)
                .any(|(&x, a)| x as usize >= a.0)
            {
                continue;
            }
            let mut at_out = 0usize;
            at.iter_mut().for_each(|a| *a = 0);
            for (&x, (_, so, sp)) in tuple.iter().zip(&self.fixed) {
                at_out += x as usize * so;
                for (a, s) in at.iter_mut().zip(sp) {
                    *a += x as usize * s;
                }
            }
            if f(i, at_out, &at, true) {
                continue;
            }
            idx.iter_mut().for_each(|i| *i = 0);
            for _ in 0..slice {
                f(i, at_out, &at, false);
                if let Some(ax) = advance(&mut idx, &dims) {
                    at_out = at_out.wrapping_add_signed(out_carry[ax] as isize);
                    for (a, c) in at.iter_mut().zip(&carry) {
                        *a = a.wrapping_add_signed(c[ax] as isize);
                    }
                }
            }
        }
    }
}

/// The dense operands a relation multiplies: each factor alone, summed over the variables
/// only it has, when no two factors share a summed variable (then each tuple needs only a
/// product of slices, as in `R(x, y) Emb[x, i] Emb[y, j]`); otherwise their planned product.
pub(crate) fn sparse_operands<'a, T: Num>(
    c: &Contraction,
    values: &'a [Tensor],
    threads: usize,
) -> Vec<Operand<'a, T>> {
    let shared = c.factors.iter().enumerate().any(|(i, f)| {
        f.vars.iter().any(|v| {
            !c.keep.contains(v)
                && c.factors
                    .iter()
                    .enumerate()
                    .any(|(j, g)| i != j && g.vars.contains(v))
        })
    });
    match &c.path {
        Some(path) if shared => vec![reduce(
            subtree(c, path, values, threads),
            &c.keep,
            &c.extents,
        )],
        Some(_) => (0..c.factors.len())
            .map(|k| {
                reduce(
                    subtree(c, &Path::Leaf(k), values, threads),
                    &c.keep,
                    &c.extents,
                )
            })
            .collect(),
        None => Vec::new(),
    }
}
