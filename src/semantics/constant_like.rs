//! W0701 in rules: a lowercase name in a rule that occurs once and is spelt like a constant
//! of its axis (`Kid(y) :- Parent(alice, y).` where the people are `Alice`, or `alice` from
//! a file). It is a variable, so the rule matches every parent; the user meant the constant.
//! Queries get the same warning where they are resolved (`query.rs`).

use super::ir::{Domain, Equation, IndexFn, TensorInfo};
use crate::diagnostics::{codes, Diagnostic, Span};

/// The warning for variable `name` at `span`, spelt like `constant` of axis `ax`; `does`
/// says what the variable makes the statement do.
pub(crate) fn variable_like_constant(
    (name, span): (&str, Span),
    (constant, ax): (&str, usize),
    does: &str,
) -> Diagnostic {
    Diagnostic::warning(
        codes::QUERY_VARIABLE_LIKE_CONSTANT,
        span,
        format!("`{name}` is a variable (lowercase), so {does}"),
    )
    .with_label("a variable")
    .with_note(format!(
        "axis {} has the constant `{constant}`: write {} to mean it",
        ax + 1,
        written(constant)
    ))
}

/// How a constant is written in a program: bare when it reads as one (`Alice`), quoted
/// otherwise (`"alice"`, which bare would be a variable again).
fn written(constant: &str) -> String {
    let bare = constant.starts_with(|c: char| c.is_uppercase())
        && constant.chars().all(|c| c.is_alphanumeric() || c == '_');
    match bare {
        true => format!("`{constant}`"),
        false => format!("`{constant:?}`"),
    }
}

/// Warnings for rule variables that occur once, at an axis with a constant spelt the same
/// up to case.
pub(super) fn warnings(
    tensors: &[TensorInfo],
    domains: &[Domain],
    equations: &[Equation],
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for e in equations.iter().filter(|e| e.bool_head) {
        let mut count = vec![0usize; e.vars.len()];
        let mut seen = Vec::new();
        e.lhs.iter().for_each(|f| f.vars(&mut seen));
        e.rhs.mentioned_vars(&mut seen);
        seen.into_iter().for_each(|v| count[v] += 1);
        e.rhs.reads(&mut |t, index| {
            for (ax, f) in index.iter().enumerate() {
                let IndexFn::Var(v) = *f else { continue };
                let Some(&d) = tensors[t].domains.get(ax) else {
                    continue;
                };
                let var = &e.vars[v];
                if count[v] != 1 {
                    continue;
                }
                let mut symbols = domains[d].symbols.iter();
                if let Some(constant) = symbols.find(|s| spelt_like(s, &var.name)) {
                    let does = "the rule holds for every value of it";
                    out.push(variable_like_constant(
                        (&var.name, var.span),
                        (constant, ax),
                        does,
                    ));
                }
            }
        });
    }
    out
}

/// Whether `symbol` lowercased is `name`, without allocating: checks run on every symbol of
/// a domain, which a string recursion makes long.
pub(crate) fn spelt_like(symbol: &str, name: &str) -> bool {
    symbol.len() == name.len() && symbol.chars().flat_map(char::to_lowercase).eq(name.chars())
}
