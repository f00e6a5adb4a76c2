//! Fills the tables of a program's string calls (§8) in rounds: evaluate the checked
//! program, compute the result of every call its ask relations hold that the tables lack,
//! check again with those results, until a round adds none. That last program is then the
//! program: every call it makes reads its true result, so it means what the rules say.
//!
//! A round costs one evaluation. A program whose string calls feed each other through
//! recursion (`Path(cat(p, "/", c)) :- Path(p), Child(p, c)`) takes one round per level of
//! that recursion, and at most `--max-iters` rounds.

use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::eval::{Engine, EvalOptions, Standard};
use crate::functions::strings::Value;
use crate::semantics::{Checked, StringTables};

/// Evaluates `checked` and records in `tables` the results of every call its ask relations
/// hold that `tables` lacks. Returns how many it added: none means `checked` is final.
pub(crate) fn fill(
    checked: &Checked,
    options: &EvalOptions,
    tables: &mut StringTables,
) -> Result<usize, Diagnostics> {
    if checked.strings.is_empty() {
        return Ok(0);
    }
    let values = Standard.evaluate(checked, options)?;
    let mut added = 0;
    let mut errors = Vec::new();
    for (k, site) in checked.strings.iter().enumerate() {
        let Some(ask) = checked.tensor_id(&site.ask) else {
            continue;
        };
        let info = &checked.tensors[ask];
        let symbolic: Vec<bool> = info
            .domains
            .iter()
            .map(|&d| checked.domains[d].symbolic)
            .collect();
        for (idx, v) in values[ask].entries() {
            if v == 0.0 {
                continue;
            }
            let row: Vec<Value> = idx
                .iter()
                .enumerate()
                .map(|(ax, &pos)| {
                    let label = crate::output::label(checked, ask, ax, pos, false);
                    match symbolic[ax] {
                        true => Value::Sym(label),
                        false => label.parse().map_or(Value::Sym(label), Value::Int),
                    }
                })
                .collect();
            if tables.has(k, &row) {
                continue;
            }
            let result = match site.arguments(&row) {
                Some(args) => site.func.apply(&args),
                None => Ok(None),
            };
            match result {
                Ok(result) => {
                    tables.insert(k, row, result);
                    added += 1;
                }
                Err(msg) => {
                    errors.push(
                        Diagnostic::error(codes::TYPE, site.span, msg)
                            .with_label(format!("`{}` called here", site.func.name())),
                    );
                    break;
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    Ok(added)
}

/// The error when the rounds do not settle within `rounds`.
pub(crate) fn unsettled(checked: &Checked, rounds: usize) -> Diagnostics {
    let span = checked.strings.last().map(|s| s.span).unwrap_or_default();
    Diagnostic::error(
        codes::UNBOUNDED_GROWTH,
        span,
        format!("string calls still make new values after {rounds} rounds"),
    )
    .with_label("a call of the recursion that keeps making values")
    .with_note("bound the recursion with a guard (`strlen(s) < 20`), or raise `--max-iters`")
    .into()
}
