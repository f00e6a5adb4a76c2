//! Minibatches (§12): `--batch Example:64` slices every data tensor along each axis of the
//! domain `Example`, and every tensor and index variable over that domain shrinks to the
//! batch. Parameters may not have such an axis (they are not data).

use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::semantics::{Checked, DomainId, IndexFn, Node};
use crate::tensor::{Storage, Tensor};

/// How one program is cut into batches.
#[derive(Clone, Debug)]
pub struct Batching {
    /// The sliced domain.
    pub domain: DomainId,
    /// Its full extent: the number of examples.
    pub examples: usize,
    /// Examples per batch (the last batch of an epoch may be smaller).
    pub size: usize,
}

/// Finds the domain called `name` and checks that no parameter is indexed by it.
pub fn batching(p: &Checked, name: &str, size: usize) -> Result<Batching, Diagnostics> {
    let domain = p
        .domains
        .iter()
        .position(|d| d.name.as_deref() == Some(name))
        .ok_or_else(|| {
            Diagnostics::from(
                Diagnostic::global(
                    codes::TRAIN,
                    format!("--batch names `{name}`, which is not a declared domain"),
                )
                .with_note(format!(
                    "declare the data's example axis with it, e.g. `X : real[{name}, 64]`"
                )),
            )
        })?;
    if let Some(&t) = p
        .params
        .iter()
        .find(|&&t| p.tensors[t].domains.contains(&domain))
    {
        return Err(Diagnostic::error(
            codes::TRAIN,
            p.tensors[t].span,
            format!(
                "parameter `{}` has an axis over the batch domain `{name}`",
                p.tensors[t].name
            ),
        )
        .with_note(
            "minibatches slice data only; batch over another domain or train on the full data",
        )
        .into());
    }
    let examples = p
        .tensors
        .iter()
        .flat_map(|t| t.domains.iter().zip(&t.shape))
        .find(|(&d, _)| d == domain)
        .map_or(0, |(_, &n)| n);
    if size == 0 {
        return Err(Diagnostic::global(
            codes::TRAIN,
            "--batch needs at least one example per batch",
        )
        .into());
    }
    Ok(Batching {
        domain,
        examples,
        size,
    })
}

/// The program restricted to the examples `rows` (positions in the batch domain), in that
/// order.
pub fn slice(p: &Checked, b: &Batching, rows: &[usize]) -> Checked {
    let mut q = Checked {
        tensors: p.tensors.clone(),
        domains: p.domains.clone(),
        equations: p.equations.clone(),
        strata: p.strata.clone(),
        data: Vec::new(),
        params: p.params.clone(),
        outputs: p.outputs.clone(),
        scalars: p.scalars.clone(),
        warnings: Vec::new(),
        strings: p.strings.clone(),
    };
    let mut new_pos = vec![None; b.examples];
    for (k, &r) in rows.iter().enumerate() {
        if r < b.examples {
            new_pos[r] = Some(k);
        }
    }
    for (t, info) in q.tensors.iter_mut().enumerate() {
        let axes: Vec<usize> = (0..info.domains.len())
            .filter(|&k| info.domains[k] == b.domain)
            .collect();
        for &k in &axes {
            info.shape[k] = rows.len();
        }
        q.data.push(match &p.data[t] {
            Some(d) if !axes.is_empty() => Some(slice_tensor(d, &axes, rows, &new_pos)),
            d => d.clone(),
        });
    }
    for eq in &mut q.equations {
        let over: Vec<bool> = (0..eq.vars.len())
            .map(|v| ranges_over(p, eq, v, b.domain))
            .collect();
        for (v, info) in eq.vars.iter_mut().enumerate() {
            if over[v] {
                info.range = rows.len();
            }
        }
    }
    q
}

/// Whether variable `v` of `eq` indexes an axis of `domain` bare (on the left or in a read).
fn ranges_over(p: &Checked, eq: &crate::semantics::Equation, v: usize, domain: DomainId) -> bool {
    let bare = |index: &[IndexFn], t: usize| {
        index
            .iter()
            .zip(&p.tensors[t].domains)
            .any(|(f, &d)| d == domain && *f == IndexFn::Var(v))
    };
    fn reads(n: &Node, f: &dyn Fn(&[IndexFn], usize) -> bool) -> bool {
        match n {
            Node::Read { tensor, index, .. } => f(index, *tensor),
            _ => n.children().into_iter().any(|c| reads(c, f)),
        }
    }
    bare(&eq.lhs, eq.target) || reads(&eq.rhs, &bare)
}

/// `t` with its `axes` cut to `rows` (`new_pos` maps an example to its place in the batch).
fn slice_tensor(t: &Tensor, axes: &[usize], rows: &[usize], new_pos: &[Option<usize>]) -> Tensor {
    let mut shape = t.shape.clone();
    for &k in axes {
        shape[k] = rows.len();
    }
    if let Storage::Dense(v) = &t.storage {
        // Gather: the axes after the last batched one are contiguous in both, so each
        // block of them is copied whole from its example's place, no index lists.
        let strides = crate::tensor::odometer::row_major(&t.shape);
        let last = axes.iter().copied().max().unwrap_or(0);
        let inner: usize = shape[last + 1..].iter().product();
        let total: usize = shape.iter().product();
        let mut out = vec![0.0; total];
        let mut idx = vec![0usize; last + 1];
        for block in out.chunks_exact_mut(inner.max(1)) {
            let mut off = 0;
            for (k, (&i, &s)) in idx.iter().zip(&strides).enumerate() {
                let i = if axes.contains(&k) { rows[i] } else { i };
                off += i * s;
            }
            v.gather(off as i64, 1, block);
            crate::tensor::odometer::advance(&mut idx, &shape);
        }
        return Tensor {
            elem: t.elem,
            shape,
            storage: Storage::Dense(crate::tensor::Dense::from_f64(t.elem, out)),
        };
    }
    let mut out = match &t.storage {
        Storage::Relation(_) => Tensor::relation(shape.clone(), Vec::new()),
        _ => Tensor::sparse(t.elem, shape.clone()),
    };
    for (idx, v) in t.entries() {
        let mut at = idx.clone();
        let mut inside = true;
        for &k in axes {
            match new_pos.get(idx[k]).copied().flatten() {
                Some(n) => at[k] = n,
                None => inside = false,
            }
        }
        if inside {
            out.set(&at, v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    #[test]
    fn slices_data_and_shrinks_variables() {
        let p = checked(
            "Example : 4\nX : real[Example, 2]\nX = [[1, 2], [3, 4], [5, 6], [7, 8]]\n\
             W : real[2]\nY[e] = X[e, i] W[i]\nLoss = Y[e] Y[e]\n",
        );
        let b = batching(&p, "Example", 2).unwrap();
        assert_eq!(b.examples, 4);
        let q = slice(&p, &b, &[3, 1]);
        let x = q.tensor_id("X").unwrap();
        assert_eq!(
            q.data[x].as_ref().unwrap().to_dense_values(),
            vec![7.0, 8.0, 3.0, 4.0]
        );
        let y = q.tensor_id("Y").unwrap();
        assert_eq!(q.tensors[y].shape, vec![2]);
        assert!(q.equations[0]
            .vars
            .iter()
            .any(|v| v.name == "e" && v.range == 2));
        assert!(batching(&p, "Nope", 2).is_err());
    }
}
