//! W0201: an equation that gives its tensor no element because a read with index arithmetic
//! is out of range at every point (`Y[i] = X[i + 5]` over a 3-vector). The extent of `i`
//! is what keeps every read in range (§5.1), here none, so `Y` is empty and prints nothing:
//! correct by the rules, and never what was meant.

use super::ir::{Equation, Kind, Stratum, TensorInfo};
use crate::diagnostics::{codes, Diagnostic};
use crate::syntax::ast::{Access, Index, Program, StmtKind};

/// A warning for each read with index arithmetic over a variable that no value keeps in
/// range, in equations of real tensors outside recursion (where extents still grow as
/// evaluation goes, and Datalog reads out of range on purpose, inside `not`).
pub(super) fn warnings(
    program: &Program,
    tensors: &[TensorInfo],
    equations: &[Equation],
    strata: &[Stratum],
) -> Vec<Diagnostic> {
    let recursive: Vec<usize> = strata
        .iter()
        .filter(|s| s.recursive)
        .flat_map(|s| s.equations.iter().copied())
        .collect();
    let mut out = Vec::new();
    for (k, e) in equations.iter().enumerate() {
        if recursive.contains(&k) || tensors[e.target].kind != Kind::Real {
            continue;
        }
        let empty: Vec<&str> = e
            .vars
            .iter()
            .filter(|v| v.range == 0 && v.open.is_none())
            .map(|v| v.name.as_str())
            .collect();
        if empty.is_empty() {
            continue;
        }
        let Some(st) = program.statements.iter().find(|s| s.span == e.span) else {
            continue;
        };
        let StmtKind::Equation { rhs, .. } = &st.kind else {
            continue;
        };
        let mut reads = Vec::new();
        rhs.accesses(&mut reads);
        for a in reads {
            let Some(var) = empty.iter().find(|v| arithmetic_on(a, v)) else {
                continue;
            };
            let target = &tensors[e.target].name;
            let shape = tensors
                .iter()
                .find(|t| t.name == a.name.text)
                .map_or(String::new(), |t| format!(" (shape {:?})", t.shape));
            out.push(
                Diagnostic::warning(
                    codes::EMPTY_READ,
                    a.span,
                    format!(
                        "this read is outside `{}` for every value of `{var}`",
                        a.name.text
                    ),
                )
                .with_label(format!("out of range at every point{shape}"))
                .with_note(format!(
                    "so this equation gives `{target}` no element; check the offset of the \
                     index arithmetic"
                )),
            );
        }
    }
    out
}

/// Whether one of `a`'s indices is arithmetic that mentions variable `var`.
fn arithmetic_on(a: &Access, var: &str) -> bool {
    a.indices.iter().any(|i| {
        let mut names = Vec::new();
        i.names(&mut names);
        matches!(i, Index::Arith(..)) && names.contains(&var)
    })
}
