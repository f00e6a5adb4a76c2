//! Contributions regrouped by fact, for reasoning in embedding space (paper §5). There a
//! score such as `D[x, y] = EmbR[i, j] Emb[x, i] Emb[y, j]` is a sum over embedding
//! dimensions, whose terms say nothing a reader can check; but its factor
//! `EmbR[i, j] = Knows(a, b) Emb[a, i] Emb[b, j]` is a sum over the facts of `Knows`, and
//! each term is linear in it, so the score is exactly the sum, over those facts, of the
//! fact's term of `EmbR` times the rest of each term. Summed by fact, that says which facts
//! the score comes from (the facts whose embeddings are most like `x` and `y`'s).

use super::terms::{number, terms_at, top_reads, Term};
use super::{Ctx, WhyNode};
use crate::diagnostics::Diagnostic;
use crate::semantics::{Equation, Kind, Node};
use std::collections::BTreeMap;

/// Inner terms visited at most: a regrouping beyond this is not shown (the terms are).
const MOST_INNER: usize = 1 << 20;

/// The facts one inner term reads, and the derived tensor whose term it is.
pub(super) struct Group {
    /// The facts, as the program writes them (`Knows(Ann, Bob)`).
    facts: String,
    /// The derived factor regrouped.
    factor: usize,
    /// Where its equation is.
    eq: crate::diagnostics::Span,
    /// The summed contribution.
    value: f64,
}

/// `terms` summed by the facts of one derived real factor each is linear in, where every
/// term is such a product and every term of that factor reads facts; `None` otherwise.
pub(super) fn regrouped(ctx: &Ctx, terms: &[Term]) -> Result<Option<Vec<Group>>, Diagnostic> {
    if terms.is_empty() {
        return Ok(None);
    }
    let mut groups: BTreeMap<(usize, String), Group> = BTreeMap::new();
    let mut visited = 0usize;
    for term in terms {
        let Some((f, pos, rest)) = linear_factor(ctx, term) else {
            return Ok(None);
        };
        let equations: Vec<&Equation> = ctx
            .p
            .equations
            .iter()
            .filter(|e| e.target == f && e.virtual_var.is_none())
            .collect();
        if ctx.p.data[f].is_some() {
            return Ok(None);
        }
        let inner = terms_at(ctx, &equations, &pos)?;
        visited += inner.len();
        if visited > MOST_INNER {
            return Ok(None);
        }
        for t in &inner {
            let Some(facts) = facts_of(ctx, t) else {
                return Ok(None);
            };
            let g = groups.entry((f, facts.clone())).or_insert(Group {
                facts,
                factor: f,
                eq: t.eq.span,
                value: 0.0,
            });
            g.value += t.value * rest;
        }
    }
    Ok(Some(groups.into_values().collect()))
}

/// The one derived real factor of a term that is a product of reads, with its element and
/// the product of the other factors' values.
fn linear_factor(ctx: &Ctx, term: &Term) -> Option<(usize, Vec<u32>, f64)> {
    let Node::Product(fs) = term.body.inside_empty_sums() else {
        return None;
    };
    let cx = ctx.cx(term.eq);
    let (mut found, mut rest) = (None, 1.0);
    for (div, f) in fs {
        let Node::Read {
            tensor,
            index,
            slice: false,
        } = f
        else {
            return None;
        };
        let p = cx.read_at(*tensor, index, &term.env)?;
        let derived = ctx.p.equations.iter().any(|e| e.target == *tensor);
        if !div && found.is_none() && derived && ctx.p.tensors[*tensor].kind != Kind::Bool {
            found = Some((*tensor, p));
            continue;
        }
        let v = ctx.values[*tensor].get_at(&p).unwrap_or(0.0);
        rest = if *div { rest / v } else { rest * v };
    }
    let (t, p) = found?;
    Some((t, p, rest))
}

/// The facts (Boolean reads) a term reads, as text; `None` where it reads none.
fn facts_of(ctx: &Ctx, t: &Term) -> Option<String> {
    let cx = ctx.cx(t.eq);
    let mut reads = Vec::new();
    top_reads(t.body, &mut reads);
    let facts: Vec<String> = reads
        .into_iter()
        .filter(|(r, _)| ctx.p.tensors[*r].kind == Kind::Bool)
        .filter_map(|(r, index)| Some(ctx.element(r, &cx.read_at(r, index, &t.env)?)))
        .collect();
    (!facts.is_empty()).then(|| facts.join(", "))
}

/// The node of an element whose terms regroup by fact: the `top` facts by size, each with
/// its contribution and share.
pub(super) fn node(
    ctx: &Ctx,
    (label, total): (String, f64),
    terms: &[Term],
    mut groups: Vec<Group>,
) -> WhyNode {
    groups.sort_by(|a, b| b.value.abs().total_cmp(&a.value.abs()));
    let n = groups.len();
    groups.truncate(ctx.options.top);
    let factor = groups.first().map_or(String::new(), |g| {
        format!("`{}`", ctx.p.tensors[g.factor].name)
    });
    let plural = |k: usize, one: &str, many: &str| match k {
        1 => format!("1 {one}"),
        k => format!("{k} {many}"),
    };
    let shown = match n > groups.len() {
        true => format!(", the {} largest shown", groups.len()),
        false => String::new(),
    };
    let detail = format!(
        "a sum of {}; by the facts its factor {factor} sums, {}{shown}",
        plural(terms.len(), "term", "terms"),
        plural(n, "fact", "facts"),
    );
    let t = terms.first().map_or(0, |t| t.eq.target);
    let children = groups
        .iter()
        .map(|g| {
            let share = match total != 0.0 {
                true => format!(", {:.1}% of the total", 100.0 * g.value / total),
                false => String::new(),
            };
            WhyNode::leaf(
                format!("fact {}", g.facts),
                format!(
                    "contributes {}{share}, through `{}` (from {})",
                    number(ctx, t, g.value),
                    ctx.p.tensors[g.factor].name,
                    ctx.at(g.eq)
                ),
            )
        })
        .collect();
    WhyNode {
        label,
        detail,
        children,
    }
}
