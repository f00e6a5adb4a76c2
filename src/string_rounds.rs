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
use crate::functions::computed::{Overflow, Reads};
use crate::functions::strings::Value;
use crate::semantics::{number_text, Checked, SiteFn, StringTables};
use crate::tensor::{ElemType, Tensor};

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
    let evaluated = Evaluated {
        checked,
        values: &values,
    };
    let mut added = 0;
    let mut errors = Vec::new();
    for (k, site) in checked.strings.iter().enumerate() {
        let Some(ask) = checked.tensor_id(&site.ask) else {
            continue;
        };
        let info = &checked.tensors[ask];
        let doms: Vec<&crate::semantics::Domain> =
            info.domains.iter().map(|&d| &checked.domains[d]).collect();
        for (idx, v) in values[ask].entries() {
            if v == 0.0 {
                continue;
            }
            let row: Vec<Value> = idx
                .iter()
                .enumerate()
                .map(|(ax, &pos)| {
                    let label = crate::output::label(checked, ask, ax, pos, false);
                    match (doms[ax].real, doms[ax].symbolic) {
                        (true, _) => Value::Real(label),
                        (false, true) => Value::Sym(label),
                        (false, false) => label.parse().map_or(Value::Sym(label), Value::Int),
                    }
                })
                .collect();
            if tables.has(k, &row) {
                continue;
            }
            let result = match (site.arguments(&row), &site.func) {
                (None, _) => Ok(None),
                (Some(args), SiteFn::String(f)) => f.apply(&args).map_err(|m| (codes::TYPE, m)),
                (Some(args), SiteFn::Value(f)) => match f.eval(&args, &evaluated) {
                    Ok(v) => Ok(v.and_then(Value::of_num)),
                    Err(Overflow) => Err((codes::VALUE_OVERFLOW, overflow(&row))),
                },
            };
            match result {
                Ok(result) => {
                    tables.insert(k, row, result);
                    added += 1;
                }
                Err((code, msg)) => {
                    errors.push(
                        Diagnostic::error(code, site.span, msg)
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

/// The message of a value site whose integer result leaves i64 on `row`.
fn overflow(row: &[Value]) -> String {
    let args: Vec<_> = row.iter().map(Value::text).collect();
    format!(
        "the value computed here at ({}) leaves the i64 range: integers are exact, so an overflow is an error, never a wrap (§8)",
        args.join(", ")
    )
}

/// What a value site reads: the program as this round evaluated it.
struct Evaluated<'a> {
    checked: &'a Checked,
    values: &'a [Tensor],
}

impl Reads for Evaluated<'_> {
    fn element(&self, name: &str, index: &[Value]) -> Option<f64> {
        let t = self.checked.tensor_id(name)?;
        let info = &self.checked.tensors[t];
        if index.len() != info.shape.len() {
            return None;
        }
        let at: Option<Vec<usize>> = index
            .iter()
            .enumerate()
            .map(|(ax, v)| self.position(t, ax, v))
            .collect();
        match self.values.get(t)?.get(&at?) {
            // A value stored narrower than f64 is the number its shortest text spells, as
            // it prints (`0.003`, not the f32's `0.003000000026077032`).
            Some(v) if !matches!(info.elem, ElemType::F64 | ElemType::Int | ElemType::Bool) => {
                format!("{}", v as f32).parse().ok()
            }
            Some(v) => Some(v),
            // An undefined element reads 0 (§4), as on every right-hand side: a relation
            // is false where it holds no tuple, a `min=` tensor 0 where nothing reaches.
            None => Some(0.0),
        }
    }

    fn scalar(&self, name: &str) -> Option<f64> {
        self.checked.scalars.get(name).copied()
    }
}

impl Evaluated<'_> {
    /// The position of value `v` on axis `ax` of tensor `t`, if the axis has it.
    fn position(&self, t: usize, ax: usize, v: &Value) -> Option<usize> {
        let info = &self.checked.tensors[t];
        let dom = &self.checked.domains[*info.domains.get(ax)?];
        let p = if dom.real {
            let text = match v {
                Value::Int(n) => n.to_string(),
                Value::Sym(s) | Value::Real(s) => number_text(s)?,
            };
            dom.position(&text)?
        } else if dom.symbolic {
            match v {
                Value::Sym(s) | Value::Real(s) => dom.position(s)?,
                Value::Int(n) => dom.position(&n.to_string())?,
            }
        } else {
            let n = v.number().filter(|x| x.fract() == 0.0)? as i64;
            usize::try_from(n.checked_sub(info.offsets.get(ax).copied().unwrap_or(0))?).ok()?
        };
        (p < *info.shape.get(ax)?).then_some(p)
    }
}

/// How many times its tables' bytes a program that makes strings holds: each value sits
/// in the tables, its symbol domain, the relations that hold it and the program checked
/// with it.
const HELD_PER_TABLE_BYTE: u64 = 4;

/// E0601 when the values string calls made so far, as the program holds them, pass the
/// memory budget (§15): a recursion whose strings multiply each round (three rules, each
/// appending to every string) is refused before it fills the machine.
pub(crate) fn over_budget(
    checked: &Checked,
    tables: &StringTables,
    budget: u64,
) -> Option<Diagnostics> {
    let held = tables.bytes().saturating_mul(HELD_PER_TABLE_BYTE);
    if held <= budget {
        return None;
    }
    let span = checked.strings.last().map(|s| s.span).unwrap_or_default();
    Some(
        Diagnostic::error(
            codes::MEMORY,
            span,
            format!(
                "string calls made {} of values, over the memory budget of {}",
                crate::semantics::budget::bytes(u128::from(held)),
                crate::semantics::budget::bytes(u128::from(budget))
            ),
        )
        .with_label("a call of the recursion that keeps making values")
        .with_note("bound the recursion with a guard (`strlen(s) < 20`), or raise `--max-memory`")
        .into(),
    )
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
    .with_note("bound the recursion with a guard (`strlen(s) < 20`), or raise `--max-iters` (string rounds stop at a tenth of it)")
    .into()
}
