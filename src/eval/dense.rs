//! Dense contractions (`plan::einsum`): each pairwise contraction of the planned tree is a
//! batched matrix product by the `gemm` crate, after reducing the variables only one side
//! sums and permuting both sides to `[batch, rows, inner]` and `[batch, inner, columns]`.
//! The last result is scaled, passed through the equation's function and written in one pass.
//!
//! Arithmetic is f64 throughout, as in the reference evaluator; results are rounded to the
//! target's type when stored. `gemm` splits only output tiles among threads, so each element
//! is summed in the same order for every thread count.

use super::EvalOptions;
use crate::plan::einsum::{Contraction, Path};
use crate::semantics::{Checked, Stratum, VarId};
use crate::tensor::{Storage, Tensor};

/// A tensor being contracted: row-major values over `vars`.
struct Operand {
    vars: Vec<VarId>,
    data: Vec<f64>,
}

/// Evaluates the stratum's contractions in place; `false` (with `values` untouched) when its
/// inputs are not all dense arrays of the planned shapes, or its intermediates would not fit
/// `--max-memory`, for the caller to use the reference loops.
pub(super) fn evaluate_dense(
    p: &Checked,
    st: &Stratum,
    plans: &[Contraction],
    values: &mut [Tensor],
    o: &EvalOptions,
    pool: Option<&rayon::ThreadPool>,
) -> bool {
    if !plans.iter().all(|c| fits(p, c, values, o.max_memory)) {
        return false;
    }
    let threads = o.threads.max(1);
    for &t in &st.tensors {
        let info = &p.tensors[t];
        let Storage::Dense(start) = &values[t].storage else {
            return false;
        };
        let mut acc = start.clone();
        for c in plans.iter().filter(|c| c.target == t) {
            let run = || evaluate(c, values, threads);
            let result = match pool {
                Some(pool) => pool.install(run),
                None => run(),
            };
            for (a, r) in acc.iter_mut().zip(result) {
                *a += r;
            }
        }
        values[t] = Tensor {
            elem: info.elem,
            shape: info.shape.clone(),
            storage: Storage::Dense(acc.into_iter().map(|v| info.elem.round(v)).collect()),
        };
    }
    true
}

/// Whether every factor is a dense array whose extents are the variables' and the target's
/// shape is the output variables', and the intermediates fit in `max_memory`.
fn fits(p: &Checked, c: &Contraction, values: &[Tensor], max_memory: u64) -> bool {
    let shaped = c.factors.iter().all(|f| {
        let v = &values[f.tensor];
        matches!(v.storage, Storage::Dense(_))
            && v.shape.len() == f.vars.len()
            && v.shape
                .iter()
                .zip(&f.vars)
                .all(|(&n, &x)| n == c.extents[x])
    });
    let target = &p.tensors[c.target].shape;
    let out_ok =
        target.len() == c.out.len() && target.iter().zip(&c.out).all(|(&n, &x)| n == c.extents[x]);
    let bytes = 8.0 * intermediates(c, &c.path).1;
    shaped && out_ok && bytes <= max_memory as f64
}

/// Variables a subtree's result keeps, and the elements of all intermediates inside it
/// (counting each pairwise result and its operands' permuted copies).
fn intermediates(c: &Contraction, path: &Path) -> (Vec<VarId>, f64) {
    let leaves = leaves(path);
    let mut vars: Vec<VarId> = Vec::new();
    for &k in &leaves {
        for &v in &c.factors[k].vars {
            if !vars.contains(&v) {
                vars.push(v);
            }
        }
    }
    let needed = |v: &VarId| {
        c.out.contains(v)
            || c.factors
                .iter()
                .enumerate()
                .any(|(k, f)| !leaves.contains(&k) && f.vars.contains(v))
    };
    vars.retain(needed);
    let size: f64 = vars.iter().map(|&v| c.extents[v] as f64).product();
    match path {
        Path::Leaf(k) => {
            let own: f64 = c.factors[*k]
                .vars
                .iter()
                .map(|&v| c.extents[v] as f64)
                .product();
            (vars, own + size)
        }
        Path::Pair(a, b) => {
            let (_, ea) = intermediates(c, a);
            let (_, eb) = intermediates(c, b);
            (vars, ea + eb + size)
        }
    }
}

fn leaves(path: &Path) -> Vec<usize> {
    match path {
        Path::Leaf(k) => vec![*k],
        Path::Pair(a, b) => [leaves(a), leaves(b)].concat(),
    }
}

/// The contraction's value over its output variables (row-major in the target's order).
fn evaluate(c: &Contraction, values: &[Tensor], threads: usize) -> Vec<f64> {
    let root = subtree(c, &c.path, values, threads);
    let root = reduce(root, &c.out, &c.extents);
    // Write in output order; output variables the product never reads are broadcast.
    let strides = strides(&root.vars, &c.extents);
    let out_strides: Vec<usize> = c
        .out
        .iter()
        .map(|v| {
            root.vars
                .iter()
                .position(|x| x == v)
                .map_or(0, |k| strides[k])
        })
        .collect();
    let dims: Vec<usize> = c.out.iter().map(|&v| c.extents[v]).collect();
    let total: usize = dims.iter().product();
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; dims.len()];
    let mut offset = 0usize;
    for _ in 0..total {
        let x = c.scale * root.data[offset];
        out.push(match c.epilogue {
            Some(f) => f.apply(&[x]),
            None => x,
        });
        for ax in (0..dims.len()).rev() {
            idx[ax] += 1;
            offset += out_strides[ax];
            if idx[ax] < dims[ax] {
                break;
            }
            offset -= out_strides[ax] * dims[ax];
            idx[ax] = 0;
        }
    }
    out
}

/// Evaluates a subtree, keeping the variables needed outside it.
fn subtree(c: &Contraction, path: &Path, values: &[Tensor], threads: usize) -> Operand {
    match path {
        Path::Leaf(k) => {
            let f = &c.factors[*k];
            let data = match &values[f.tensor].storage {
                Storage::Dense(d) => d.clone(),
                _ => Vec::new(),
            };
            Operand {
                vars: f.vars.clone(),
                data,
            }
        }
        Path::Pair(a, b) => {
            let inside = leaves(path);
            let keep: Vec<VarId> = (0..c.extents.len())
                .filter(|v| {
                    c.out.contains(v)
                        || c.factors
                            .iter()
                            .enumerate()
                            .any(|(k, f)| !inside.contains(&k) && f.vars.contains(v))
                })
                .collect();
            let x = subtree(c, a, values, threads);
            let y = subtree(c, b, values, threads);
            contract(x, y, &keep, &c.extents, threads)
        }
    }
}

/// Row-major strides of `vars`.
fn strides(vars: &[VarId], extents: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; vars.len()];
    for k in (0..vars.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * extents[vars[k + 1]];
    }
    s
}

/// The operand with its axes in `order` (a permutation of its variables).
fn permute(op: Operand, order: &[VarId], extents: &[usize]) -> Operand {
    if op.vars == order {
        return op;
    }
    let src = strides(&op.vars, extents);
    let from: Vec<usize> = order
        .iter()
        .map(|v| op.vars.iter().position(|x| x == v).map_or(0, |k| src[k]))
        .collect();
    let dims: Vec<usize> = order.iter().map(|&v| extents[v]).collect();
    let total: usize = dims.iter().product();
    let mut data = Vec::with_capacity(total);
    let mut idx = vec![0usize; dims.len()];
    let mut offset = 0usize;
    for _ in 0..total {
        data.push(op.data[offset]);
        for ax in (0..dims.len()).rev() {
            idx[ax] += 1;
            offset += from[ax];
            if idx[ax] < dims[ax] {
                break;
            }
            offset -= from[ax] * dims[ax];
            idx[ax] = 0;
        }
    }
    Operand {
        vars: order.to_vec(),
        data,
    }
}

/// Sums out every variable not in `keep`, in row-major order of the summed ones.
fn reduce(op: Operand, keep: &[VarId], extents: &[usize]) -> Operand {
    let (kept, summed): (Vec<VarId>, Vec<VarId>) = op.vars.iter().partition(|v| keep.contains(v));
    if summed.is_empty() {
        return op;
    }
    let block: usize = summed.iter().map(|&v| extents[v]).product();
    let order = [kept.clone(), summed].concat();
    let op = permute(op, &order, extents);
    let data = if block == 0 {
        vec![0.0; kept.iter().map(|&v| extents[v]).product()]
    } else {
        op.data
            .chunks_exact(block)
            .map(|b| b.iter().sum())
            .collect()
    };
    Operand { vars: kept, data }
}

/// The contraction of two operands over their shared variables not in `keep`.
fn contract(x: Operand, y: Operand, keep: &[VarId], extents: &[usize], threads: usize) -> Operand {
    let with = |other: &Operand| -> Vec<VarId> {
        keep.iter()
            .chain(&other.vars)
            .copied()
            .collect::<Vec<VarId>>()
    };
    let (keep_x, keep_y) = (with(&y), with(&x));
    let x = reduce(x, &keep_x, extents);
    let y = reduce(y, &keep_y, extents);
    let shared = |v: &&VarId| y.vars.contains(v);
    let batch: Vec<VarId> = x
        .vars
        .iter()
        .filter(shared)
        .filter(|v| keep.contains(v))
        .copied()
        .collect();
    let inner: Vec<VarId> = x
        .vars
        .iter()
        .filter(shared)
        .filter(|v| !keep.contains(v))
        .copied()
        .collect();
    let rows: Vec<VarId> = x
        .vars
        .iter()
        .filter(|v| !y.vars.contains(v))
        .copied()
        .collect();
    let cols: Vec<VarId> = y
        .vars
        .iter()
        .filter(|v| !x.vars.contains(v))
        .copied()
        .collect();
    let size = |vs: &[VarId]| -> usize { vs.iter().map(|&v| extents[v]).product() };
    let (b, m, k, n) = (size(&batch), size(&rows), size(&inner), size(&cols));
    let x = permute(
        x,
        &[batch.clone(), rows.clone(), inner.clone()].concat(),
        extents,
    );
    let y = permute(y, &[batch.clone(), inner, cols.clone()].concat(), extents);
    let mut data = vec![0.0; b * m * n];
    for i in 0..b {
        matmul(
            m,
            n,
            k,
            &x.data[i * m * k..(i + 1) * m * k],
            &y.data[i * k * n..(i + 1) * k * n],
            &mut data[i * m * n..(i + 1) * m * n],
            threads,
        );
    }
    Operand {
        vars: [batch, rows, cols].concat(),
        data,
    }
}

/// `dst = lhs · rhs` for row-major `m×k` and `k×n` matrices.
fn matmul(m: usize, n: usize, k: usize, lhs: &[f64], rhs: &[f64], dst: &mut [f64], threads: usize) {
    if m == 0 || n == 0 || k == 0 || lhs.len() < m * k || rhs.len() < k * n || dst.len() < m * n {
        return;
    }
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the three slices hold at least m·k, k·n and m·n elements (checked above), laid
    // out row-major with the strides given, and `dst` does not alias the inputs.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            lhs.as_ptr(),
            1,
            k as isize,
            rhs.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}
