//! The backward pass as plan data (§12): for one loss and its trainable parameters, which
//! strata a training step evaluates, which it records, and the route each stratum's
//! adjoints take. Planned once per plan (not at every step), printed by
//! `tl explain --loss`, and followed by `learn::gradient`, which logs where a route
//! declined at run time and why.

use super::einsum::{DenseEquation, Expr};
use super::{Kernel, Plan};
use crate::semantics::{Checked, Kind, Node, TensorId};

/// How one stratum passes its tensors' adjoints back to what it read.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    /// No tensor of it lies between a trainable parameter and the loss, or the loss does
    /// not read it: nothing passes back.
    Idle,
    /// A recursion along an index: back step by step, newest first, by the dense kernels
    /// of each step's planned contractions (`learn::steps_backward`).
    Steps,
    /// A fixpoint: evaluated forward by the reference loops recording every iterate, then
    /// back through each iteration it ran, newest first.
    Iterations,
    /// The dense kernels: each planned equation's gradient contractions, in one pass. The
    /// equations listed go back by the reference loops instead (no dense plan, or a
    /// gradient the kernels do not take), each with why.
    Dense(Vec<(usize, &'static str)>),
    /// The reference loops, one pass backwards over every equation; `through_time` when
    /// an equation has a virtual index, whose slices the forward pass records.
    Reference {
        /// The forward pass records the virtual index's slices for it.
        through_time: bool,
    },
}

impl Route {
    /// Whether the forward pass must run this stratum on the reference loops, recording
    /// what the route reads.
    pub fn recorded(&self) -> bool {
        matches!(
            self,
            Route::Iterations | Route::Reference { through_time: true }
        )
    }

    /// The route as `tl explain` and the decision log print it.
    pub fn describe(&self) -> &'static str {
        match self {
            Route::Idle => "no gradient",
            Route::Steps => "back step by step by the dense kernels",
            Route::Iterations => "back through every recorded iteration by the reference loops",
            Route::Dense(rest) if rest.is_empty() => "dense gradient contractions",
            Route::Dense(_) => "dense gradient contractions, some equations by the reference loops",
            Route::Reference { through_time: true } => {
                "back through every recorded step by the reference loops"
            }
            Route::Reference {
                through_time: false,
            } => "reference loops, one pass",
        }
    }
}

/// A training step's backward plan.
#[derive(Clone, Debug)]
pub struct Backward {
    /// The loss, a real scalar.
    pub loss: TensorId,
    /// Per tensor: on a path from a trainable parameter to the loss (it carries an adjoint).
    pub active: Vec<bool>,
    /// Per stratum: the loss reads it, directly or not (a step evaluates only these).
    pub needed: Vec<bool>,
    /// Per stratum, in `Checked::strata` order.
    pub routes: Vec<Route>,
}

impl Backward {
    /// The backward plan of `plan` for `loss` and `trainable`.
    pub fn new(p: &Checked, plan: &Plan, loss: TensorId, trainable: &[TensorId]) -> Backward {
        let active = active(p, loss, trainable);
        let needed = needed(p, loss);
        let routes = p
            .strata
            .iter()
            .zip(&plan.strata)
            .enumerate()
            .map(|(i, (st, sp))| {
                let carries = needed[i] && st.tensors.iter().any(|&t| active[t]);
                let through_time = st
                    .equations
                    .iter()
                    .any(|&e| p.equations[e].virtual_var.is_some());
                match &sp.kernel {
                    _ if !carries || st.equations.is_empty() => Route::Idle,
                    Kernel::Steps(s) if s.differentiable => Route::Steps,
                    _ if st.recursive => Route::Iterations,
                    _ if through_time => Route::Reference { through_time },
                    Kernel::Dense(plans) => Route::Dense(by_reference(p, &st.equations, plans)),
                    _ => Route::Reference {
                        through_time: false,
                    },
                }
            })
            .collect();
        Backward {
            loss,
            active,
            needed,
            routes,
        }
    }

    /// The oracle's backward plan over `reference` (`Plan::reference`): every stratum
    /// carrying a gradient recorded by the reference loops (`learn::reference_gradients`).
    pub fn reference(
        p: &Checked,
        reference: &Plan,
        loss: TensorId,
        trainable: &[TensorId],
    ) -> Backward {
        let mut b = Backward::new(p, reference, loss, trainable);
        for (r, st) in b.routes.iter_mut().zip(&p.strata) {
            if *r != Route::Idle {
                *r = match st.recursive {
                    true => Route::Iterations,
                    false => Route::Reference { through_time: true },
                };
            }
        }
        b
    }

    /// Per stratum: whether the forward pass records it for its route.
    pub fn record(&self) -> Vec<bool> {
        self.routes.iter().map(Route::recorded).collect()
    }
}

/// The equations of a dense stratum whose gradients the dense kernels do not take, as the
/// program alone decides it (its inputs decide the rest at run time, and are logged).
fn by_reference(
    p: &Checked,
    equations: &[usize],
    plans: &[DenseEquation],
) -> Vec<(usize, &'static str)> {
    let mut rest = Vec::new();
    for &e in equations {
        let mut parts = plans.iter().filter(|d| d.equation == e).peekable();
        let why = match parts.peek() {
            None => Some("no dense plan"),
            Some(_) => parts.find_map(|d| declines(p, d)),
        };
        if let Some(why) = why.filter(|_| p.tensors[p.equations[e].target].kind == Kind::Real) {
            rest.push((e, why));
        }
    }
    rest
}

/// Why the dense backward pass cannot take a planned dense equation, whatever its inputs:
/// the scatter of a relation's tuples neither shifts nor weighs them by values, and only one
/// level of `softmax`/`lnorm` is lifted.
pub(crate) fn declines(p: &Checked, d: &DenseEquation) -> Option<&'static str> {
    let sparse = || d.terms.iter().flat_map(|c| &c.sparse);
    if sparse().any(|f| !f.shift.is_empty()) {
        Some("a shifted relation as a factor")
    } else if sparse().any(|f| p.tensors[f.tensor].kind != Kind::Bool) {
        Some("a tensor of defined elements as a factor")
    } else if nested_normalize(&d.expr, false) {
        Some("a softmax or lnorm inside another")
    } else {
        None
    }
}

/// Whether a `softmax`/`lnorm` lies inside another (the dense backward pass lifts one
/// level).
fn nested_normalize(e: &Expr, inside: bool) -> bool {
    match e {
        Expr::Normalize(_, _, x) => inside || nested_normalize(x, true),
        Expr::Term(_) | Expr::Const(_) | Expr::Var(_) => false,
        Expr::Neg(x) | Expr::Not(x) => nested_normalize(x, inside),
        Expr::Product(fs) => fs.iter().any(|(_, f)| nested_normalize(f, inside)),
        Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => {
            nested_normalize(a, inside) || nested_normalize(b, inside)
        }
        Expr::Call(_, args) => args.iter().any(|a| nested_normalize(a, inside)),
    }
}

/// Which tensors lie on a path from a trainable parameter to the loss.
pub(crate) fn active(p: &Checked, loss: TensorId, trainable: &[TensorId]) -> Vec<bool> {
    let n = p.tensors.len();
    let mut from_param = vec![false; n];
    for &t in trainable {
        from_param[t] = true;
    }
    let reads: Vec<Vec<TensorId>> = (0..n)
        .map(|t| {
            let mut r = Vec::new();
            for eq in p.equations.iter().filter(|e| e.target == t) {
                collect_reads(&eq.rhs, &mut r);
            }
            r
        })
        .collect();
    let real = |t: usize| p.tensors[t].kind == Kind::Real;
    loop {
        let mut changed = false;
        for t in 0..n {
            if !from_param[t] && real(t) && reads[t].iter().any(|&r| from_param[r]) {
                from_param[t] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut to_loss = vec![false; n];
    let mut stack = vec![loss];
    while let Some(t) = stack.pop() {
        if to_loss[t] || !from_param[t] {
            continue;
        }
        to_loss[t] = true;
        stack.extend(reads[t].iter().copied());
    }
    to_loss
}

fn collect_reads(n: &Node, out: &mut Vec<TensorId>) {
    if let Node::Read { tensor, .. } = n {
        out.push(*tensor);
    }
    for c in n.children() {
        collect_reads(c, out);
    }
}

/// Strata the loss reads, directly or not: the only ones a training step evaluates.
fn needed(p: &Checked, loss: TensorId) -> Vec<bool> {
    let reads = super::demand::closure(p, [loss]);
    p.strata
        .iter()
        .map(|st| st.tensors.iter().any(|t| reads.contains(t)))
        .collect()
}
