//! Dense contractions: equations whose right-hand side is a sum over a product of dense
//! tensors (an einsum, `C[i, k] = A[i, j] B[j, k]`), possibly scaled by constants and wrapped
//! in one elementwise function (`Y[i] = sig(W[i, j] X[j])`). Such an equation is evaluated as
//! a tree of pairwise contractions, each a (batched) matrix product, in the order that needs
//! the fewest floating-point operations; the function runs on the result as it is written.

use crate::functions::Builtin;
use crate::semantics::{Checked, Family, Func, IndexFn, Kind, Node, Stratum, TensorId, VarId};

/// One factor: a dense tensor read at plain, distinct variables.
#[derive(Clone, Debug, PartialEq)]
pub struct Factor {
    /// The tensor read.
    pub tensor: TensorId,
    /// One variable per axis.
    pub vars: Vec<VarId>,
}

/// The order of pairwise contractions: a binary tree over the factors.
#[derive(Clone, Debug, PartialEq)]
pub enum Path {
    /// Factor `k`.
    Leaf(usize),
    /// The contraction of two subtrees.
    Pair(Box<Path>, Box<Path>),
}

/// A planned dense contraction.
#[derive(Clone, Debug, PartialEq)]
pub struct Contraction {
    /// The equation (index into `Checked::equations`).
    pub equation: usize,
    /// The tensor it adds to.
    pub target: TensorId,
    /// Left-hand-side variables, one per axis of the target.
    pub out: Vec<VarId>,
    /// The tensors multiplied.
    pub factors: Vec<Factor>,
    /// The product of the constant factors.
    pub scale: f64,
    /// A function applied to each element of the sum.
    pub epilogue: Option<Builtin>,
    /// Extent of every variable of the equation.
    pub extents: Vec<usize>,
    /// Contraction order.
    pub path: Path,
    /// Multiply-adds of that order, times two.
    pub flops: f64,
}

/// The contractions of a stratum when every equation of it is one: not recursive, and every
/// tensor dense, real or integer, and accumulated with `=`/`+=`.
pub fn plan_dense(p: &Checked, st: &Stratum) -> Option<Vec<Contraction>> {
    if st.recursive {
        return None;
    }
    let dense = |t: TensorId| {
        let info = &p.tensors[t];
        info.kind != Kind::Bool && !info.sparse_values
    };
    if !st
        .tensors
        .iter()
        .all(|&t| dense(t) && p.tensors[t].family == Family::Sum)
    {
        return None;
    }
    st.equations
        .iter()
        .map(|&e| {
            let c = contraction(p, e)?;
            c.factors.iter().all(|f| dense(f.tensor)).then_some(c)
        })
        .collect()
}

fn contraction(p: &Checked, e: usize) -> Option<Contraction> {
    let eq = &p.equations[e];
    if eq.family != Family::Sum || eq.virtual_var.is_some() {
        return None;
    }
    let out: Vec<VarId> = eq
        .lhs
        .iter()
        .map(|f| match f {
            IndexFn::Var(v) => Some(*v),
            _ => None,
        })
        .collect::<Option<_>>()?;
    if (1..out.len()).any(|k| out[..k].contains(&out[k])) {
        return None;
    }
    // Summation points with no variables may wrap one function; below it, sums and products.
    let mut node = &eq.rhs;
    let mut epilogue = None;
    loop {
        match node {
            Node::Sum { vars, body } if vars.is_empty() => node = body,
            Node::Call(Func::Builtin(b), args) if epilogue.is_none() && args.len() == 1 => {
                if matches!(b, Builtin::Max | Builtin::Min) {
                    return None;
                }
                epilogue = Some(*b);
                node = &args[0];
            }
            _ => break,
        }
    }
    let mut c = Contraction {
        equation: e,
        target: eq.target,
        out,
        factors: Vec::new(),
        scale: 1.0,
        epilogue,
        extents: eq.vars.iter().map(|v| v.range).collect(),
        path: Path::Leaf(0),
        flops: 0.0,
    };
    collect(node, &mut c)?;
    if c.factors.is_empty() {
        return None;
    }
    // Every summed variable must be read somewhere: a bare one would repeat the sum.
    let read = |v: VarId| c.factors.iter().any(|f| f.vars.contains(&v));
    if (0..c.extents.len()).any(|v| !read(v) && !c.out.contains(&v)) {
        return None;
    }
    let (path, flops) = best_path(&c);
    c.path = path;
    c.flops = flops;
    Some(c)
}

/// Gathers factors and constants from sums (any variables) and products (no division).
fn collect(n: &Node, c: &mut Contraction) -> Option<()> {
    match n {
        Node::Sum { body, .. } => collect(body, c),
        Node::Product(fs) => fs.iter().try_for_each(|(div, f)| {
            if *div {
                return None;
            }
            collect(f, c)
        }),
        Node::Const(k) => {
            c.scale *= k;
            Some(())
        }
        Node::Read {
            tensor,
            index,
            slice: false,
        } => {
            let vars: Vec<VarId> = index
                .iter()
                .map(|f| match f {
                    IndexFn::Var(v) => Some(*v),
                    _ => None,
                })
                .collect::<Option<_>>()?;
            if (1..vars.len()).any(|k| vars[..k].contains(&vars[k])) {
                return None;
            }
            c.factors.push(Factor {
                tensor: *tensor,
                vars,
            });
            Some(())
        }
        _ => None,
    }
}

/// Variables of a set of factors (a bitmask) still needed after contracting them: those of
/// the output and of the factors outside the set.
fn kept(c: &Contraction, set: u32) -> Vec<VarId> {
    let mut vs: Vec<VarId> = Vec::new();
    for (k, f) in c.factors.iter().enumerate() {
        if set & (1 << k) != 0 {
            for &v in &f.vars {
                if !vs.contains(&v) {
                    vs.push(v);
                }
            }
        }
    }
    vs.retain(|v| {
        c.out.contains(v)
            || c.factors
                .iter()
                .enumerate()
                .any(|(k, f)| set & (1 << k) == 0 && f.vars.contains(v))
    });
    vs.sort_unstable();
    vs
}

fn volume(c: &Contraction, vars: &[VarId]) -> f64 {
    vars.iter().map(|&v| c.extents[v] as f64).product()
}

/// Factors up to this many get the optimal order (dynamic programming over subsets, as
/// opt_einsum's `optimal`); more get a greedy one.
const OPTIMAL_UP_TO: usize = 10;

/// The contraction order with the fewest FLOPs, and that number.
fn best_path(c: &Contraction) -> (Path, f64) {
    let n = c.factors.len();
    if n > OPTIMAL_UP_TO {
        return greedy_path(c);
    }
    let full = (1u32 << n) - 1;
    let mut best: Vec<Option<(f64, Path)>> = vec![None; 1 << n];
    for k in 0..n {
        // A lone factor is reduced over its private summed variables: one pass over it.
        let f = &c.factors[k];
        best[1 << k] = Some((volume(c, &f.vars), Path::Leaf(k)));
    }
    for set in 1..=full {
        if set.count_ones() < 2 {
            continue;
        }
        let mut choice: Option<(f64, Path)> = None;
        // Each split once: the part holding the lowest factor is `a`.
        let low = set & set.wrapping_neg();
        let mut a = (set - 1) & set;
        while a > 0 {
            if a & low != 0 {
                let b = set & !a;
                if let (Some((ca, pa)), Some((cb, pb))) = (&best[a as usize], &best[b as usize]) {
                    let mut vars = kept(c, a);
                    for v in kept(c, b) {
                        if !vars.contains(&v) {
                            vars.push(v);
                        }
                    }
                    let cost = ca + cb + 2.0 * volume(c, &vars);
                    if choice.as_ref().is_none_or(|(best, _)| cost < *best) {
                        choice =
                            Some((cost, Path::Pair(Box::new(pa.clone()), Box::new(pb.clone()))));
                    }
                }
            }
            a = (a - 1) & set;
        }
        best[set as usize] = choice;
    }
    best[full as usize]
        .take()
        .map(|(cost, path)| (path, cost))
        .unwrap_or((Path::Leaf(0), 0.0))
}

/// Repeatedly contracts the pair whose result is smallest (ties: fewest FLOPs, then order).
fn greedy_path(c: &Contraction) -> (Path, f64) {
    let mut parts: Vec<(u32, Path)> = (0..c.factors.len())
        .map(|k| (1u32 << k, Path::Leaf(k)))
        .collect();
    let mut flops: f64 = c.factors.iter().map(|f| volume(c, &f.vars)).sum();
    while parts.len() > 1 {
        let mut pick = (0, 1, f64::INFINITY, f64::INFINITY);
        for i in 0..parts.len() {
            for j in i + 1..parts.len() {
                let both = parts[i].0 | parts[j].0;
                let size = volume(c, &kept(c, both));
                let mut vars = kept(c, parts[i].0);
                for v in kept(c, parts[j].0) {
                    if !vars.contains(&v) {
                        vars.push(v);
                    }
                }
                let cost = 2.0 * volume(c, &vars);
                if (size, cost) < (pick.2, pick.3) {
                    pick = (i, j, size, cost);
                }
            }
        }
        let (i, j, _, cost) = pick;
        flops += cost;
        let (mj, pj) = parts.remove(j);
        let (mi, pi) = parts.remove(i);
        parts.insert(i, (mi | mj, Path::Pair(Box::new(pi), Box::new(pj))));
    }
    let path = parts.pop().map(|(_, p)| p).unwrap_or(Path::Leaf(0));
    (path, flops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    fn plans(src: &str) -> Vec<Option<Vec<Contraction>>> {
        let c = checked(src);
        c.strata
            .iter()
            .filter(|s| !s.equations.is_empty())
            .map(|s| plan_dense(&c, s))
            .collect()
    }

    #[test]
    fn matmuls_chains_and_functions_are_contractions() {
        let p = plans(
            "A : real[2, 3]\nB : real[3, 4]\nC[i, k] = A[i, j] B[j, k]\nY[i, k] = sig(2 C[i, k])\n",
        );
        let c = &p[0].as_ref().unwrap()[0];
        assert_eq!(c.factors.len(), 2);
        assert_eq!(c.flops, 2.0 * 2.0 * 3.0 * 4.0 + 6.0 + 12.0);
        let y = &p[1].as_ref().unwrap()[0];
        assert_eq!((y.scale, y.epilogue), (2.0, Some(Builtin::Sig)));
    }

    #[test]
    fn the_optimal_order_contracts_the_small_side_first() {
        // (A·B)·x costs n³; A·(B·x) costs n².
        let p = plans(
            "A : real[50, 50]\nB : real[50, 50]\nX : real[50]\nY[i] = A[i, j] B[j, k] X[k]\n",
        );
        let c = &p[0].as_ref().unwrap()[0];
        let Path::Pair(l, r) = &c.path else { panic!() };
        assert!(matches!(**l, Path::Leaf(0)), "{:?}", c.path);
        assert!(matches!(**r, Path::Pair(..)), "{:?}", c.path);
    }

    #[test]
    fn recursion_relations_arithmetic_and_division_are_not() {
        for src in [
            "X : real[3]\nY[i] = X[i + 1]\n",
            "X : real[3]\nY[i] = X[i] / X[i]\n",
            "E(0, 1).\nY[i] = E(i, j)\n",
            "X : real[3]\nY[i] = X[i] + 1\n",
        ] {
            assert!(plans(src).iter().all(Option::is_none), "{src}");
        }
    }
}
