//! Query answers printed exactly as §10 describes, and labels for file rows (§11).

use crate::semantics::{Checked, Kind, Query, QueryIndex};
use crate::tensor::{Storage, Tensor};

/// The label of position `pos` on axis `axis` of tensor `t`: a symbol or a number.
/// `quoted` writes symbols as source would (§10); files hold them raw (§11).
pub(crate) fn label(p: &Checked, t: usize, axis: usize, pos: usize, quoted: bool) -> String {
    let dom = &p.domains[p.tensors[t].domains[axis]];
    if let Some(table) = &dom.table {
        return table.value(pos as u32).to_string();
    }
    if !dom.symbolic {
        let offset = p.tensors[t].offsets.get(axis).copied().unwrap_or(0);
        return (pos as i64).saturating_add(offset).to_string();
    }
    let Some(s) = dom.symbols.get(pos) else {
        return pos.to_string();
    };
    if !quoted || dom.real || is_bare_symbol(s) {
        s.clone()
    } else {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// Whether a symbol prints bare: a capitalised identifier.
fn is_bare_symbol(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(char::is_uppercase)
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '\'')
}

/// The lines answering one query, in ascending order of their indices' values (§10).
pub(crate) fn answer(p: &Checked, values: &[Tensor], q: &Query) -> Vec<String> {
    let mut lines = answer_lines(p, values, q);
    in_value_order(p, q.tensor, &mut lines, |(idx, _)| idx);
    lines.into_iter().map(|(_, l)| l).collect()
}

/// Sorts items given in index order into the order of their indices' values: open columns
/// (§8) number values in the order they were met, every other axis in value order.
pub(crate) fn in_value_order<T>(
    p: &Checked,
    t: usize,
    items: &mut [T],
    idx: impl Fn(&T) -> &[usize],
) {
    let tables: Vec<_> = p.tensors[t]
        .domains
        .iter()
        .map(|&d| p.domains[d].table.as_ref())
        .collect();
    if tables.iter().all(Option::is_none) {
        return;
    }
    let key = |idx: &[usize]| -> Vec<i64> {
        idx.iter()
            .zip(&tables)
            .map(|(&i, t)| t.map_or(i as i64, |t| t.value(i as u32)))
            .collect()
    };
    items.sort_by_cached_key(|item| key(idx(item)));
}

/// The lines answering one query, each with the index it answers (none for a scalar or a
/// ground query), in the order of the stored positions.
fn answer_lines(p: &Checked, values: &[Tensor], q: &Query) -> Vec<(Vec<usize>, String)> {
    let info = &p.tensors[q.tensor];
    let t = &values[q.tensor];
    let name = &info.name;
    let ground = !q.pattern.iter().any(|i| matches!(i, QueryIndex::Var(_)));
    let fmt_idx = |idx: &[usize]| -> String {
        idx.iter()
            .enumerate()
            .map(|(ax, &i)| label(p, q.tensor, ax, i, true))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if info.kind == Kind::Bool && (q.paren || info.shape.is_empty() || ground) {
        if ground {
            let hit = fixed_index(&q.pattern).is_some_and(|idx| t.value(&idx) != 0.0);
            return vec![(Vec::new(), if hit { "true" } else { "false" }.to_string())];
        }
        if let Storage::Relation(r) = &t.storage {
            // Filter the stored tuples in place: a relation may hold far more tuples than a
            // query selects.
            return r
                .iter()
                .filter(|tuple| matches_u32(&q.pattern, tuple))
                .map(|tuple| {
                    let idx: Vec<usize> = tuple.iter().map(|&i| i as usize).collect();
                    let line = format!("{name}({})", fmt_idx(&idx));
                    (idx, line)
                })
                .collect();
        }
        return t
            .entries()
            .into_iter()
            .filter(|(idx, v)| *v != 0.0 && matches(&q.pattern, idx))
            .map(|(idx, _)| {
                let line = format!("{name}({})", fmt_idx(&idx));
                (idx, line)
            })
            .collect();
    }
    if info.shape.is_empty() {
        let line = format!("{name} = {}", t.format_at(&[], t.value(&[])));
        return vec![(Vec::new(), line)];
    }
    t.entries()
        .into_iter()
        .filter(|(idx, v)| matches(&q.pattern, idx) && !(info.kind == Kind::Bool && *v == 0.0))
        .map(|(idx, v)| {
            let line = format!("{name}[{}] = {}", fmt_idx(&idx), t.format_at(&idx, v));
            (idx, line)
        })
        .collect()
}

fn fixed_index(pattern: &[QueryIndex]) -> Option<Vec<usize>> {
    pattern
        .iter()
        .map(|i| match i {
            QueryIndex::Fixed(p) => Some(*p),
            _ => None,
        })
        .collect()
}

/// [`matches`] for a stored tuple.
fn matches_u32(pattern: &[QueryIndex], tuple: &[u32]) -> bool {
    let idx: Vec<usize> = tuple.iter().map(|&i| i as usize).collect();
    matches(pattern, &idx)
}

/// Whether an index matches a pattern: fixed positions equal, repeated variables agree.
fn matches(pattern: &[QueryIndex], idx: &[usize]) -> bool {
    let mut bound: Vec<(usize, usize)> = Vec::new();
    for (p, &i) in pattern.iter().zip(idx) {
        match p {
            QueryIndex::Fixed(f) if *f != i => return false,
            QueryIndex::Missing => return false,
            QueryIndex::Var(k) => match bound.iter().find(|(v, _)| v == k) {
                Some((_, x)) if *x != i => return false,
                Some(_) => {}
                None => bound.push((*k, i)),
            },
            _ => {}
        }
    }
    true
}
