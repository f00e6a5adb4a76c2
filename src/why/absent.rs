//! `why --not`: why a fact does not hold. For each rule whose head names it, the instance
//! that gets furthest through the body's positive atoms in order, the first part that fails
//! there, and below a failing atom why that fact does not hold in turn, to the depth asked.

use super::facts::{bind_head, bound_text, given};
use super::{Ctx, WhyNode};
use crate::diagnostics::Diagnostic;
use crate::semantics::{Equation, IndexFn, Node};

/// Why fact `(t, pos)` does not hold: for each rule whose head names it, the instance that
/// gets furthest through the body, and the first atom that fails there.
pub(super) fn why_not(
    ctx: &Ctx,
    t: usize,
    pos: &[u32],
    depth: usize,
) -> Result<WhyNode, Diagnostic> {
    let label = ctx.element(t, pos);
    let mut children = Vec::new();
    for (k, eq) in ctx.p.equations.iter().enumerate() {
        if eq.target != t {
            continue;
        }
        let mut env = vec![0i64; eq.vars.len()];
        let Some(bound) = bind_head(eq, pos, &mut env) else {
            continue;
        };
        children.push(closest_failure(ctx, k, &mut env, &bound, depth)?);
    }
    let detail = match (children.is_empty(), given(ctx, &(t, pos.to_vec()))) {
        (true, _) => "no rule derives it and it is not given".to_string(),
        _ => "no rule's body holds for it".to_string(),
    };
    Ok(WhyNode {
        label: format!("{label} does not hold"),
        detail,
        children,
    })
}

/// Explains why a fact does not hold, below a failing atom.
pub(super) fn why_not_below(ctx: &Ctx, t: usize, pos: &[u32], depth: usize) -> Option<WhyNode> {
    let derived = ctx.p.equations.iter().any(|e| e.target == t);
    (depth > 1 && derived).then(|| why_not(ctx, t, pos, depth - 1).ok())?
}

/// For `why --not`: the instance of equation `k` (head bound in `env`) that satisfies the
/// most of its body's positive atoms in order, and the first part of the body that fails
/// there.
pub(super) fn closest_failure(
    ctx: &Ctx,
    k: usize,
    env: &mut [i64],
    bound: &[bool],
    depth: usize,
) -> Result<WhyNode, Diagnostic> {
    let eq = &ctx.p.equations[k];
    let (_, body) = ctx.hoisted(k);
    let factors: Vec<&Node> = match body {
        Node::Product(fs) => fs.iter().map(|(_, f)| f).collect(),
        other => vec![other],
    };
    let cx = ctx.cx(eq);
    let mut best: Option<(usize, Vec<i64>, Vec<bool>)> = None;
    let mut bound = bound.to_vec();
    deepest(ctx, &cx, &factors, 0, env, &mut bound, &mut best, &mut 0);
    let (k, env, bound) = best.unwrap_or((0, env.to_vec(), bound));
    let rule = format!(
        "rule at {}: {}",
        ctx.at(eq.span),
        bound_text(ctx, eq, &env, Some(&bound))
    );
    let Some(failing) = factors.get(k) else {
        return Ok(WhyNode::leaf(rule, "its whole body holds here".into()));
    };
    let mut children = Vec::new();
    let atom = match failing.inside_empty_sums() {
        Node::Read { tensor, index, .. } => {
            let text = atom_text(ctx, eq, *tensor, index, &env, &bound);
            let ground = index.iter().all(|f| f_vars_bound(f, &bound));
            if ground {
                if let Some(p) = cx.read_at(*tensor, index, &env) {
                    children.extend(why_not_below(ctx, *tensor, &p, depth));
                }
            }
            format!("fails at `{text}`: no such fact")
        }
        Node::Not(_) => "fails at a negated atom, which holds".to_string(),
        _ => "fails at a comparison or condition".to_string(),
    };
    Ok(WhyNode {
        label: rule,
        detail: atom,
        children,
    })
}

fn f_vars_bound(f: &IndexFn, bound: &[bool]) -> bool {
    let mut vs = Vec::new();
    f.vars(&mut vs);
    vs.iter().all(|&v| bound[v])
}

/// Searches factor by factor for the instance that gets furthest; `visits` bounds it.
#[allow(clippy::too_many_arguments)]
fn deepest(
    ctx: &Ctx,
    cx: &crate::eval::Cx,
    factors: &[&Node],
    k: usize,
    env: &mut [i64],
    bound: &mut Vec<bool>,
    best: &mut Option<(usize, Vec<i64>, Vec<bool>)>,
    visits: &mut usize,
) -> bool {
    *visits += 1;
    if best.as_ref().is_none_or(|(b, _, _)| k > *b) {
        *best = Some((k, env.to_vec(), bound.clone()));
    }
    let Some(f) = factors.get(k) else {
        return true;
    };
    if *visits > 100_000 {
        return false;
    }
    let node = f.inside_empty_sums();
    let Node::Read { tensor, index, .. } = node else {
        // A condition: it fails here unless it holds with what is bound.
        let mut vars = Vec::new();
        node.mentioned_vars(&mut vars);
        if vars.iter().all(|&v| bound[v]) && cx.eval(node, env, true).is_some_and(|v| v > 0.0) {
            return deepest(ctx, cx, factors, k + 1, env, bound, best, visits);
        }
        return false;
    };
    let crate::tensor::Storage::Relation(r) = &ctx.values[*tensor].storage else {
        return false;
    };
    for t in r.iter() {
        let mut newly = Vec::new();
        let mut fits = true;
        for (a, f) in index.iter().enumerate() {
            match f {
                IndexFn::Var(v) if !bound[*v] => {
                    env[*v] = t[a] as i64;
                    bound[*v] = true;
                    newly.push(*v);
                }
                IndexFn::Var(v) => fits &= env[*v] == t[a] as i64,
                IndexFn::Const(c) => fits &= *c == t[a] as i64,
                IndexFn::Arith(..) => {}
            }
        }
        let done = fits && deepest(ctx, cx, factors, k + 1, env, bound, best, visits);
        for v in newly {
            bound[v] = false;
        }
        if done || *visits > 100_000 {
            return done;
        }
    }
    false
}

/// An atom with what is bound written in: `Parent(Bob, y)`.
fn atom_text(
    ctx: &Ctx,
    eq: &Equation,
    t: usize,
    index: &[IndexFn],
    env: &[i64],
    bound: &[bool],
) -> String {
    let args: Vec<String> = index
        .iter()
        .enumerate()
        .map(|(a, f)| match f {
            IndexFn::Var(v) if bound[*v] => {
                crate::output::label(ctx.p, t, a, env[*v].max(0) as usize, true)
            }
            IndexFn::Var(v) => eq.vars[*v].name.clone(),
            IndexFn::Const(c) => crate::output::label(ctx.p, t, a, (*c).max(0) as usize, true),
            IndexFn::Arith(..) => "…".into(),
        })
        .collect();
    format!("{}({})", ctx.p.tensors[t].name, args.join(", "))
}
