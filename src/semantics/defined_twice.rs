//! W0302: a tensor defined twice at the same elements. §7 adds the definitions together,
//! which is what a model written as a sum of terms wants, but a user who writes `Y = 1` and
//! later `Y = 2` (as in Python) means the second to replace the first and silently gets 3.
//! Writing `+=` in any one of the definitions says the sum is meant and silences the warning.
//! Definitions of different elements (`W[0, 1] = 4` and `W[1, 2] = 1`, or a base case
//! `Act[0, j] = In[j]` beside `Act[l, j] = …`) are not warned about: they do not add.

use crate::diagnostics::{codes, Diagnostic, Span};
use crate::syntax::ast::{AccumOp, Index, Program, StmtKind};
use std::collections::BTreeMap;

/// One statement that defines a tensor's values by adding to it.
struct Definition<'p> {
    span: Span,
    /// Written with `+=`: the sum is asked for.
    explicit: bool,
    /// The positions it writes; `None` for the whole tensor (a literal, a scalar).
    lhs: Option<&'p [Index]>,
}

/// What a left-hand-side position writes, as far as telling overlaps needs.
#[derive(PartialEq)]
enum Slot {
    /// Every value of its axis: a variable.
    All,
    /// One element: a number, a symbol or a constant's name.
    One(String),
    /// Index arithmetic and the like: which elements is not known here.
    Unknown,
}

fn slot(i: &Index) -> Slot {
    match i {
        Index::Name(n) | Index::Normalized(n) if !n.text.starts_with(char::is_uppercase) => {
            Slot::All
        }
        Index::Name(n) => Slot::One(n.text.clone()),
        Index::Int(v, _) => Slot::One(v.to_string()),
        Index::Str(v, _) => Slot::One(format!("{v:?}")),
        _ => Slot::Unknown,
    }
}

/// Whether two definitions surely write the same elements: at each position both write
/// every value (variables) or the same constant.
fn same_elements(a: Option<&[Index]>, b: Option<&[Index]>) -> bool {
    let all = |l: &[Index]| l.iter().all(|i| slot(i) == Slot::All);
    match (a, b) {
        (None, None) => true,
        (None, Some(l)) | (Some(l), None) => all(l),
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| match (slot(x), slot(y)) {
                    (Slot::All, Slot::All) => true,
                    (Slot::One(p), Slot::One(q)) => p == q,
                    _ => false,
                })
        }
    }
}

/// A warning for every tensor with two adding definitions (equations with `=`, literals,
/// scalar constants) of the same elements, unless one of its definitions is written with
/// `+=`; it points at the second definition and names the first.
pub(super) fn warnings(program: &Program) -> Vec<Diagnostic> {
    let mut defs: BTreeMap<&str, Vec<Definition>> = BTreeMap::new();
    for st in &program.statements {
        let (name, explicit, lhs) = match &st.kind {
            StmtKind::Equation {
                lhs,
                op: AccumOp::Assign | AccumOp::Add,
                ..
            } => {
                let explicit = matches!(
                    &st.kind,
                    StmtKind::Equation {
                        op: AccumOp::Add,
                        ..
                    }
                );
                (&lhs.name, explicit, Some(&lhs.indices[..]))
            }
            StmtKind::Literal { name, .. } | StmtKind::Scalar { name, .. } => (name, false, None),
            _ => continue,
        };
        let span = st.span;
        let def = Definition {
            span,
            explicit,
            lhs,
        };
        defs.entry(&name.text).or_default().push(def);
    }
    let mut out: Vec<Diagnostic> = defs
        .into_iter()
        .filter(|(_, d)| !d.iter().any(|d| d.explicit))
        .filter_map(|(name, d)| {
            let (first, second) = (0..d.len())
                .flat_map(|j| (0..j).map(move |i| (i, j)))
                .find(|&(i, j)| same_elements(d[i].lhs, d[j].lhs))?;
            let w = Diagnostic::warning(
                codes::DEFINED_TWICE,
                d[second].span,
                format!("`{name}` is defined twice at the same elements; the two are added"),
            )
            .with_label("a second definition, added to the first")
            .with_secondary(d[first].span, "the first")
            .with_note(format!(
                "several equations of one tensor are summed (§7); write `{name} += …` in \
                 this one if the sum is meant, or give it another name"
            ));
            Some(w)
        })
        .collect();
    out.sort_by_key(|w| w.span.map(|s| s.start));
    out
}
