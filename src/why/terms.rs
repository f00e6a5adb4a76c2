//! Contributions to a real or integer element: the terms of its equations' sums, largest
//! first, each with its factors' values and its share; for `max=`/`min=` the witness term,
//! followed along the same tensor (a shortest path edge by edge).

use super::facts::{bind_head, bound_text};
use super::join::each;
use super::{Ctx, WhyNode};
use crate::diagnostics::{Diagnostic, Span};
use crate::semantics::{Equation, Family, IndexFn, Kind, Node};
use crate::syntax::ast::{BinOp, StmtKind};
use crate::tensor::format_number;

/// One term of a sum: its value, and the equation, addend and variables that produced it.
pub(super) struct Term<'n> {
    pub(super) value: f64,
    pub(super) env: Vec<i64>,
    /// The variables bound where the term is: the head's and the term's own.
    bound: Vec<bool>,
    pub(super) eq: &'n Equation,
    pub(super) body: &'n Node,
}

/// Explains element `(t, pos)` of a real or integer tensor.
pub(super) fn explain(
    ctx: &Ctx,
    t: usize,
    pos: &[u32],
    _span: Span,
) -> Result<WhyNode, Diagnostic> {
    let mut chain = Vec::new();
    element(ctx, t, pos, ctx.options.depth.max(1), &mut chain)
}

/// A value as the tensor holds it (rounded to its element type).
pub(super) fn number(ctx: &Ctx, t: usize, v: f64) -> String {
    let elem = ctx.p.tensors[t].elem;
    format_number(elem.round(v), elem)
}

/// The node of one element, with its terms to `depth` levels.
fn element(
    ctx: &Ctx,
    t: usize,
    pos: &[u32],
    depth: usize,
    chain: &mut Vec<(usize, Vec<u32>)>,
) -> Result<WhyNode, Diagnostic> {
    let name = ctx.element(t, pos);
    let Some(value) = ctx.values[t].get_at(pos) else {
        return Ok(WhyNode::leaf(name, "no value: no term defines it".into()));
    };
    let label = format!("{name} = {}", number(ctx, t, value));
    let equations: Vec<&Equation> = ctx
        .p
        .equations
        .iter()
        .filter(|e| e.target == t && e.virtual_var.is_none())
        .collect();
    let data = ctx.p.data[t].as_ref().and_then(|d| d.get_at(pos));
    if equations.is_empty() {
        return Ok(WhyNode::leaf(label, data_where(ctx, t)));
    }
    let mut terms = terms_at(ctx, &equations, pos)?;
    let family = ctx.p.tensors[t].family;
    if family == Family::Sum && data.is_none_or(|g| g == 0.0) {
        if let Some(groups) = super::by_fact::regrouped(ctx, &terms)? {
            return Ok(super::by_fact::node(ctx, (label, value), &terms, groups));
        }
    }
    let (detail, shown) = match family {
        Family::Max | Family::Min => {
            let word = if family == Family::Max {
                "largest"
            } else {
                "smallest"
            };
            match terms.iter().position(|x| x.value == value) {
                Some(w) => {
                    let n = terms.len();
                    let plural = if n == 1 { "the one term" } else { "terms" };
                    let what = match n {
                        1 => plural.to_string(),
                        _ => format!("the {word} of {n} {plural}"),
                    };
                    (what, vec![terms.swap_remove(w)])
                }
                None => (data_where(ctx, t), Vec::new()),
            }
        }
        _ => {
            let mut d = sum_detail(&mut terms, ctx.options.top);
            if let Some(g) = data.filter(|g| *g != 0.0) {
                d.push_str(&format!("; given data adds {}", number(ctx, t, g)));
            }
            (d, terms)
        }
    };
    chain.push((t, pos.to_vec()));
    let mut children = Vec::new();
    for term in &shown {
        children.push(term_node(ctx, term, value, family, depth, chain)?);
    }
    chain.pop();
    Ok(WhyNode {
        label,
        detail,
        children,
    })
}

/// The terms of element `pos` of the tensor `equations` define.
pub(super) fn terms_at<'n>(
    ctx: &Ctx,
    equations: &[&'n Equation],
    pos: &[u32],
) -> Result<Vec<Term<'n>>, Diagnostic> {
    let mut terms = Vec::new();
    for eq in equations {
        let mut env = vec![0i64; eq.vars.len()];
        let Some(bound) = bind_head(eq, pos, &mut env) else {
            continue;
        };
        let want: Vec<usize> = pos.iter().map(|&p| p as usize).collect();
        terms_in(ctx, eq, &eq.rhs, &mut env, &bound, Some(&want), &mut terms)?;
    }
    Ok(terms)
}

/// Sorts terms by size and keeps the `top`; says how many there were.
fn sum_detail(terms: &mut Vec<Term>, top: usize) -> String {
    terms.sort_by(|a, b| b.value.abs().total_cmp(&a.value.abs()));
    let n = terms.len();
    terms.truncate(top);
    let plural = if n == 1 { "" } else { "s" };
    match n > terms.len() {
        true => format!(
            "a sum of {n} term{plural}, the {} largest shown",
            terms.len()
        ),
        false => format!("a sum of {n} term{plural}"),
    }
}

/// Where the data of a tensor without equations comes from.
fn data_where(ctx: &Ctx, t: usize) -> String {
    let name = &ctx.p.tensors[t].name;
    for st in &ctx.program.statements {
        match &st.kind {
            StmtKind::Literal { name: n, .. } if &n.text == name => {
                return format!("data: the literal at {}", ctx.at(st.span))
            }
            StmtKind::FileRead { name: n, path } if &n.text == name => {
                return format!("data: read from {path} at {}", ctx.at(st.span))
            }
            StmtKind::Equation { lhs, .. } if &lhs.name.text == name => {
                return format!("data: the element fact at {}", ctx.at(st.span))
            }
            _ => {}
        }
    }
    match ctx.p.params.contains(&t) {
        true => "a parameter".into(),
        false => "data bound from outside".into(),
    }
}

/// The addends of an expression (`a + b - c`), each with its sign.
fn addends<'n>(n: &'n Node, sign: f64, out: &mut Vec<(f64, &'n Node)>) {
    match n {
        Node::Sum { vars, body } if vars.is_empty() => addends(body, sign, out),
        Node::Binary(BinOp::Add, a, b) => {
            addends(a, sign, out);
            addends(b, sign, out);
        }
        Node::Binary(BinOp::Sub, a, b) => {
            addends(a, sign, out);
            addends(b, -sign, out);
        }
        other => out.push((sign, other)),
    }
}

/// The terms of `node` at `env`: each addend's summation point over its variables (at the
/// root, with the head's free variables too, where the head names `want`).
fn terms_in<'n>(
    ctx: &Ctx,
    eq: &'n Equation,
    node: &'n Node,
    env: &mut [i64],
    bound: &[bool],
    want: Option<&[usize]>,
    out: &mut Vec<Term<'n>>,
) -> Result<(), Diagnostic> {
    let cx = ctx.cx(eq);
    let mut parts = Vec::new();
    addends(node, 1.0, &mut parts);
    for (sign, part) in parts {
        let (vars, body): (&[usize], &Node) = match part {
            Node::Sum { vars, body } => (vars, body),
            other => (&[], other),
        };
        let roots = want.map_or(&[][..], |_| eq.loop_vars.as_slice());
        let mut free: Vec<usize> = roots.iter().chain(vars).copied().collect();
        free.retain(|&v| !bound[v]);
        free.sort_unstable();
        free.dedup();
        let mut here = bound.to_vec();
        free.iter().for_each(|&v| here[v] = true);
        each(ctx, eq, body, &free, env, &mut |env| {
            if want.is_some_and(|w| cx.lhs_at(env, false) != Ok(Some(w.to_vec()))) {
                return true;
            }
            if let Some(v) = cx.eval(body, env, false) {
                out.push(Term {
                    value: sign * v,
                    env: env.to_vec(),
                    bound: here.clone(),
                    eq,
                    body,
                });
            }
            true
        })?;
    }
    Ok(())
}

/// One term: its value and share, its factors, and derived factors explained below. A
/// term that is a function of a sum (`sig(W[o, h] H[h] + B[o])`) shows the sum's terms.
fn term_node(
    ctx: &Ctx,
    term: &Term,
    total: f64,
    family: Family,
    depth: usize,
    chain: &mut Vec<(usize, Vec<u32>)>,
) -> Result<WhyNode, Diagnostic> {
    let eq = term.eq;
    let cx = ctx.cx(eq);
    let mut env = term.env.clone();
    let share = match (family, total != 0.0) {
        (Family::Sum, true) => format!(", {:.1}% of the total", 100.0 * term.value / total),
        _ => String::new(),
    };
    let text = bound_text(ctx, eq, &env, Some(&term.bound));
    let mut detail = format!("{text}{share}; from {}", ctx.at(eq.span));
    let inner = match term.body.inside_empty_sums() {
        Node::Call(f, args) if args.len() == 1 => Some((func_name(f), &args[0])),
        Node::Normalize(kind, _, arg) => Some((format!("{kind:?}").to_lowercase(), &**arg)),
        _ => None,
    };
    let mut children = Vec::new();
    if let Some((f, arg)) = inner.filter(|(_, a)| splits(a)) {
        let pre = cx.eval(arg, &mut env, false).unwrap_or(f64::NAN);
        let mut terms = Vec::new();
        terms_in(ctx, eq, arg, &mut env, &term.bound, None, &mut terms)?;
        let sum = sum_detail(&mut terms, ctx.options.top);
        let pre_text = number(ctx, eq.target, pre);
        detail.push_str(&format!("; {f} of {pre_text}, which is {sum}"));
        for t in &terms {
            children.push(term_node(ctx, t, pre, Family::Sum, depth, chain)?);
        }
    } else {
        children = factor_nodes(ctx, term, &cx, family, depth, chain)?;
    }
    Ok(WhyNode {
        label: format!("term {}", number(ctx, eq.target, term.value)),
        detail,
        children,
    })
}

/// A function's name as a program writes it.
fn func_name(f: &crate::semantics::Func) -> String {
    match f {
        crate::semantics::Func::Builtin(b) => format!("{b:?}").to_lowercase(),
        crate::semantics::Func::User(name) => name.clone(),
    }
}

/// Whether an expression has terms of its own to show: a sum, or several addends.
fn splits(n: &Node) -> bool {
    let mut parts = Vec::new();
    addends(n, 1.0, &mut parts);
    parts.len() > 1
        || matches!(parts.first(), Some((_, Node::Sum { vars, .. })) if !vars.is_empty())
}

/// The elements a term reads, each with its value; derived ones explained below.
fn factor_nodes(
    ctx: &Ctx,
    term: &Term,
    cx: &crate::eval::Cx,
    family: Family,
    depth: usize,
    chain: &mut Vec<(usize, Vec<u32>)>,
) -> Result<Vec<WhyNode>, Diagnostic> {
    let eq = term.eq;
    let mut reads = Vec::new();
    top_reads(term.body, &mut reads);
    let mut children = Vec::new();
    for (t, index) in reads {
        let Some(p) = cx.read_at(t, index, &term.env) else {
            continue;
        };
        let derived = ctx.p.equations.iter().any(|e| e.target == t);
        let along = t == eq.target && matches!(family, Family::Max | Family::Min);
        let seen = chain.iter().any(|(ct, cp)| *ct == t && *cp == p);
        let real = ctx.p.tensors[t].kind != Kind::Bool;
        let node = if derived && !seen && real && (along || depth > 1) {
            // A witness is followed along its own tensor without using up depth.
            element(ctx, t, &p, if along { depth } else { depth - 1 }, chain)?
        } else {
            let v = ctx.values[t].get_at(&p).unwrap_or(0.0);
            WhyNode::leaf(
                format!("{} = {}", ctx.element(t, &p), number(ctx, t, v)),
                String::new(),
            )
        };
        children.push(node);
    }
    Ok(children)
}

/// The reads of a term that name one element: those outside inner summation points.
pub(super) fn top_reads<'n>(n: &'n Node, out: &mut Vec<(usize, &'n [IndexFn])>) {
    match n {
        Node::Read {
            tensor,
            index,
            slice: false,
        } => out.push((*tensor, index)),
        Node::Sum { vars, body } if vars.is_empty() => top_reads(body, out),
        Node::Product(fs) => fs.iter().for_each(|(_, f)| top_reads(f, out)),
        Node::Neg(x) | Node::Not(x) => top_reads(x, out),
        Node::Normalize(_, _, x) => top_reads(x, out),
        Node::Binary(_, a, b) | Node::Compare(_, a, b) => {
            top_reads(a, out);
            top_reads(b, out);
        }
        Node::Call(_, args) => args.iter().for_each(|a| top_reads(a, out)),
        _ => {}
    }
}
