//! `tl explain --loss`: the backward plan of a training step, stratum by stratum in the
//! order the sweep runs them (the route each takes, the dense gradient contractions with
//! their FLOPs, and the equations left to the reference loops with why); and the log of
//! the routes a step took (`tl train --decisions`).

use crate::explain::statement;
use crate::learn::Routed;
use crate::plan::backward::{Backward, Route};
use crate::plan::{Kernel, Plan};
use crate::semantics::{Checked, TensorId};
use std::fmt::Write;

/// The backward plan of `b`, as `tl explain --loss` prints it after the forward plan.
pub(crate) fn backward(
    (p, plan, b): (&Checked, &Plan, &Backward),
    trainable: &[TensorId],
    source: &str,
) -> String {
    let names = |ts: &mut dyn Iterator<Item = TensorId>| -> String {
        ts.map(|t| p.tensors[t].name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "backward: d {} / d {}, strata newest first",
        p.tensors[b.loss].name,
        names(&mut trainable.iter().copied())
    );
    for (i, (st, route)) in p.strata.iter().zip(&b.routes).enumerate().rev() {
        if *route == Route::Idle {
            continue;
        }
        let tensors = names(&mut st.tensors.iter().copied());
        let why = match (route, plan.strata.get(i).map(|s| &s.kernel)) {
            (
                Route::Reference {
                    through_time: false,
                },
                Some(k),
            ) => {
                format!(
                    " (its forward pass: {})",
                    crate::eval::Ran::planned(k).describe()
                )
            }
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "stratum {}: {tensors}: {}{why}",
            i + 1,
            route.describe()
        );
        if let (Route::Dense(rest), Some(Kernel::Dense(plans))) =
            (route, plan.strata.get(i).map(|s| &s.kernel))
        {
            for d in plans
                .iter()
                .filter(|d| !rest.iter().any(|r| r.0 == d.equation))
            {
                let _ = writeln!(out, "  {}", statement(&p.equations[d.equation], source));
                gradient_contractions(&mut out, (p, b), d);
            }
        }
        if let Route::Dense(rest) = route {
            for (e, why) in rest {
                let eq = &p.equations[*e];
                let _ = writeln!(out, "  {}", statement(eq, source));
                let _ = writeln!(out, "    by the reference loops: {why}");
            }
        }
    }
    let idle: Vec<String> = (0..p.strata.len())
        .filter(|&i| b.routes[i] == Route::Idle && !p.strata[i].equations.is_empty())
        .map(|i| (i + 1).to_string())
        .collect();
    if !idle.is_empty() {
        let _ = writeln!(out, "no gradient through strata {}", idle.join(", "));
    }
    out
}

/// Each factor that takes a gradient, with the FLOPs of its planned gradient einsum.
fn gradient_contractions(
    out: &mut String,
    (p, b): (&Checked, &Backward),
    d: &crate::plan::einsum::DenseEquation,
) {
    for c in &d.terms {
        for (j, f) in c.factors.iter().enumerate() {
            let Some(info) = p.tensors.get(f.tensor).filter(|_| b.active[f.tensor]) else {
                continue;
            };
            let how = match c.gradients.get(j) {
                Some(g) => format!("{:.3e} FLOPs", g.flops),
                None => "by the relation's tuples".to_string(),
            };
            let twice = c.factors.iter().filter(|g| g.tensor == f.tensor).count() > 1;
            let which = match twice {
                true => format!(" (factor {})", j + 1),
                false => String::new(),
            };
            let _ = writeln!(out, "    d {}{which}: {how}", info.name);
        }
    }
}

/// The routes a step took, one line per stratum, with the planned route and why where they
/// differ (`tl train --decisions`).
pub(crate) fn routes(p: &Checked, b: &Backward, log: &[Routed]) -> String {
    let mut out = String::new();
    for r in log {
        let planned = b.routes.get(r.stratum);
        let line = crate::explain::LogLine {
            stratum: r.stratum,
            ran: r.ran.describe(),
            planned: planned.map(|planned| (*planned == r.ran, planned.describe())),
            reason: r.reason,
        };
        line.write(&mut out, p, "backward stratum");
        if let Route::Dense(rest) = &r.ran {
            for (e, why) in rest {
                let target = p.equations[*e].target;
                let _ = writeln!(
                    out,
                    "  an equation of {} by the reference loops: {why}",
                    p.tensors[target].name
                );
            }
        }
    }
    out
}
