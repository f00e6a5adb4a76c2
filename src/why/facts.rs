//! Derivations of Boolean facts, of minimal height.
//!
//! The facts a goal can rest on within its stratum (its backward closure) are found by
//! instantiating the stratum's rules at bound heads; then heights are settled as in Knuth's
//! generalisation of Dijkstra's algorithm: a given fact has height 0, an instance of a rule
//! 1 + the largest height of its body facts, and a fact the smallest height of its
//! instances, settled smallest first. Facts of lower strata are settled the same way, first.
//! Nothing needs to be recorded during evaluation.

use super::join::each;
use super::{Ctx, WhyNode};
use crate::diagnostics::{codes, Diagnostic, Span};
use crate::semantics::{Equation, IndexFn, Kind, Node};
use crate::syntax::ast::{Index, StmtKind};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A fact: a Boolean tensor and a tuple of positions.
type Fact = (usize, Vec<u32>);

/// Nodes of one explanation tree at most; deeper parts are elided.
const MAX_NODES: usize = 10_000;

/// One way to derive a fact: an equation and its variables, with the facts its body reads.
#[derive(Clone, Debug)]
struct Instance {
    eq: usize,
    env: Vec<i64>,
    body: Vec<Fact>,
    negated: Vec<Fact>,
}

/// How a fact was settled.
#[derive(Clone, Debug)]
enum Settled {
    Given,
    Derived(Box<Instance>),
}

/// Settled facts and their heights, shared by every closure one explanation explores.
struct Search<'a> {
    ctx: &'a Ctx<'a>,
    settled: FxHashMap<Fact, (usize, Settled)>,
}

/// Explains fact `(t, pos)`: its derivation, or with `--not`, why it does not hold.
pub(super) fn explain(ctx: &Ctx, t: usize, pos: &[u32], span: Span) -> Result<WhyNode, Diagnostic> {
    let holds = ctx.values[t].get_at(pos).is_some_and(|v| v > 0.0);
    let fact = ctx.element(t, pos);
    match (holds, ctx.options.not) {
        (false, false) => {
            let mut d = Diagnostic::error(codes::QUERY, span, format!("{fact} does not hold"));
            d.notes
                .push("ask `why --not` to see which part of each rule fails".into());
            return Err(d);
        }
        (false, true) => return super::absent::why_not(ctx, t, pos, ctx.options.depth),
        (true, true) => {
            let what = format!("{fact} holds: ask without `--not` for its derivation");
            return Err(Diagnostic::error(codes::QUERY, span, what));
        }
        (true, false) => {}
    }
    let mut s = Search {
        ctx,
        settled: FxHashMap::default(),
    };
    let goal = (t, pos.to_vec());
    match ctx.rounds {
        Some(_) => s.walk_rounds(&goal)?,
        None => s.settle(&goal)?,
    }
    let mut budget = MAX_NODES;
    Ok(s.tree(&goal, &mut budget))
}

/// Whether a fact is given rather than derived: it holds, and it is among the data the
/// program was given (facts, file rows, bindings) or its relation has no rules (so it was
/// given, or inserted by an incremental commit).
pub(super) fn given(ctx: &Ctx, f: &Fact) -> bool {
    let holds = ctx.values[f.0].get_at(&f.1).is_some_and(|v| v > 0.0);
    let in_data = ctx.p.data[f.0]
        .as_ref()
        .and_then(|d| d.get_at(&f.1))
        .is_some_and(|v| v > 0.0);
    holds && (in_data || !ctx.p.equations.iter().any(|e| e.target == f.0))
}

/// The variables an instance ranges over beyond the head: loop and summed variables.
fn free_vars(eq: &Equation, sum: &[usize], bound: &[bool]) -> Vec<usize> {
    let mut free: Vec<usize> = eq.loop_vars.iter().chain(sum).copied().collect();
    free.retain(|&v| !bound[v]);
    free.sort_unstable();
    free.dedup();
    free
}

/// Binds the head's variables to `pos`: the variables bound, or `None` where the head
/// cannot name `pos`.
pub(super) fn bind_head(eq: &Equation, pos: &[u32], env: &mut [i64]) -> Option<Vec<bool>> {
    let mut bound = vec![false; eq.vars.len()];
    for (f, &p) in eq.lhs.iter().zip(pos) {
        if let IndexFn::Var(v) = f {
            if bound[*v] && env[*v] != p as i64 {
                return None;
            }
            env[*v] = p as i64;
            bound[*v] = true;
        }
    }
    Some(bound)
}

/// The Boolean reads among a body's factors: positive ones, and those under `not`.
fn atoms(body: &Node) -> (Vec<&Node>, Vec<&Node>) {
    let factors: Vec<&Node> = match body.inside_empty_sums() {
        Node::Product(fs) => fs.iter().filter(|(d, _)| !d).map(|(_, f)| f).collect(),
        other => vec![other],
    };
    let (mut pos, mut neg) = (Vec::new(), Vec::new());
    for f in factors {
        match f.inside_empty_sums() {
            n @ Node::Read { slice: false, .. } => pos.push(n),
            Node::Not(x) => {
                if let n @ Node::Read { slice: false, .. } = x.inside_empty_sums() {
                    neg.push(n)
                }
            }
            _ => {}
        }
    }
    (pos, neg)
}

impl Search<'_> {
    /// Every instance of the rules of `f`'s tensor that derives `f` from the values.
    fn instances(&self, f: &Fact) -> Result<Vec<Instance>, Diagnostic> {
        let ctx = self.ctx;
        let mut out = Vec::new();
        for (k, eq) in ctx.p.equations.iter().enumerate() {
            if eq.target != f.0 || eq.virtual_var.is_some() {
                continue;
            }
            let mut env = vec![0i64; eq.vars.len()];
            let Some(bound) = bind_head(eq, &f.1, &mut env) else {
                continue;
            };
            let (sum, body) = ctx.hoisted(k);
            let free = free_vars(eq, sum, &bound);
            let cx = ctx.cx(eq);
            let (pos, neg) = atoms(body);
            let want: Vec<usize> = f.1.iter().map(|&p| p as usize).collect();
            each(ctx, eq, body, &free, &mut env, &mut |env| {
                let holds = cx.eval(body, env, false).is_some_and(|v| v > 0.0);
                if !holds || cx.lhs_at(env, true) != Ok(Some(want.clone())) {
                    return true;
                }
                let facts = |nodes: &[&Node]| -> Vec<Fact> {
                    nodes
                        .iter()
                        .filter_map(|n| match n {
                            Node::Read { tensor, index, .. }
                                if ctx.p.tensors[*tensor].kind == Kind::Bool =>
                            {
                                Some((*tensor, cx.read_at(*tensor, index, env)?))
                            }
                            _ => None,
                        })
                        .collect()
                };
                out.push(Instance {
                    eq: k,
                    env: env.to_vec(),
                    body: facts(&pos),
                    negated: facts(&neg),
                });
                true
            })?;
        }
        Ok(out)
    }

    /// Settles `goal` by the rounds the run recorded (`--provenance`): a fact first derived
    /// in round `r` has an instance whose body facts of its stratum are all of earlier
    /// rounds, so that instance, taken for each fact down from the goal, is a derivation of
    /// minimal height within each stratum, found without a search. A fact with no round
    /// (its stratum ran on another kernel) is settled by [`Search::settle`].
    fn walk_rounds(&mut self, goal: &Fact) -> Result<(), Diagnostic> {
        let mut chosen: FxHashMap<Fact, Instance> = FxHashMap::default();
        let mut stack = vec![goal.clone()];
        while let Some(f) = stack.last().cloned() {
            if self.settled.contains_key(&f) {
                stack.pop();
                continue;
            }
            if let Some(inst) = chosen.remove(&f) {
                let waiting: Vec<Fact> = inst
                    .body
                    .iter()
                    .filter(|b| !self.settled.contains_key(*b))
                    .cloned()
                    .collect();
                if waiting.is_empty() {
                    let h = self.instance_height(&inst);
                    self.settled
                        .insert(f, (h, Settled::Derived(Box::new(inst))));
                    stack.pop();
                } else {
                    chosen.insert(f, inst);
                    stack.extend(waiting);
                }
                continue;
            }
            match self.earlier_instance(&f)? {
                Some(inst) => {
                    chosen.insert(f, inst);
                }
                None => {
                    self.settle(&f)?;
                    stack.pop();
                }
            }
        }
        Ok(())
    }

    /// An instance deriving `f` whose body facts of `f`'s stratum all have recorded rounds
    /// earlier than `f`'s (the latest of them as early as can be); `None` where `f` has no
    /// recorded round after 0, is given, or no such instance is found.
    fn earlier_instance(&self, f: &Fact) -> Result<Option<Instance>, Diagnostic> {
        let ctx = self.ctx;
        if given(ctx, f) {
            return Ok(None);
        }
        let Some(round) = ctx.round(f.0, &f.1).filter(|&r| r > 0) else {
            return Ok(None);
        };
        let stratum = ctx.stratum_of(f.0);
        let latest = |inst: &Instance| -> Option<u32> {
            let mut latest = 0;
            for b in inst.body.iter().filter(|b| ctx.stratum_of(b.0) == stratum) {
                let r = ctx.round(b.0, &b.1)?;
                if r >= round {
                    return None;
                }
                latest = latest.max(r);
            }
            Some(latest)
        };
        Ok(self
            .instances(f)?
            .into_iter()
            .filter_map(|i| latest(&i).map(|l| (l, i)))
            .min_by_key(|(l, _)| *l)
            .map(|(_, i)| i))
    }

    /// Settles `goal` and every fact of its stratum that its derivations may rest on.
    fn settle(&mut self, goal: &Fact) -> Result<(), Diagnostic> {
        if self.settled.contains_key(goal) {
            return Ok(());
        }
        if given(self.ctx, goal) {
            self.settled.insert(goal.clone(), (0, Settled::Given));
            return Ok(());
        }
        let stratum = self.ctx.stratum_of(goal.0);
        // The backward closure within the stratum, breadth first, with every instance of
        // each fact and each fact's distance from the goal.
        let mut ids: FxHashMap<Fact, usize> = FxHashMap::default();
        let mut facts: Vec<Fact> = vec![goal.clone()];
        let mut dist: Vec<usize> = vec![0];
        let mut insts: Vec<Vec<Instance>> = Vec::new();
        ids.insert(goal.clone(), 0);
        let mut k = 0;
        let mut next_try = 1;
        while k < facts.len() {
            // Every fact within distance d of the goal is expanded: a derivation found of
            // height at most d + 1 is minimal, so the rest of the closure is not needed.
            let d = dist[k].saturating_sub(1);
            if dist[k] > 0 && d + 1 >= next_try && k == insts.len() {
                if self.settle_within(goal, &facts, &ids, &dist, &insts, d + 1) {
                    return Ok(());
                }
                next_try = 2 * (d + 1);
            }
            let f = facts[k].clone();
            let found = match given(self.ctx, &f) || self.settled.contains_key(&f) {
                true => Vec::new(),
                false => self.instances(&f)?,
            };
            for i in &found {
                for b in &i.body {
                    let same = self.ctx.stratum_of(b.0) == stratum;
                    if same && !self.settled.contains_key(b) && !ids.contains_key(b) {
                        ids.insert(b.clone(), facts.len());
                        facts.push(b.clone());
                        dist.push(dist[k] + 1);
                    } else if !same {
                        self.settle(b)?;
                    }
                }
            }
            insts.push(found);
            k += 1;
        }
        self.knuth(&facts, &ids, insts);
        match self.settled.contains_key(goal) {
            true => Ok(()),
            false => Err(Diagnostic::global(
                codes::QUERY,
                format!(
                    "no derivation of {} follows from the rules and the evaluated values",
                    self.ctx.element(goal.0, &goal.1)
                ),
            )),
        }
    }

    /// Settles what is explored of a closure (the facts past `insts` not yet expanded) and
    /// keeps the result if the goal's height is at most `bound`, with only the facts whose
    /// height plus distance from the goal is within it (those are minimal too); otherwise
    /// forgets every height it settled.
    fn settle_within(
        &mut self,
        goal: &Fact,
        facts: &[Fact],
        ids: &FxHashMap<Fact, usize>,
        dist: &[usize],
        insts: &[Vec<Instance>],
        bound: usize,
    ) -> bool {
        let mut partial = insts.to_vec();
        partial.resize(facts.len(), Vec::new());
        let before: rustc_hash::FxHashSet<&Fact> = facts
            .iter()
            .filter(|f| self.settled.contains_key(*f))
            .collect();
        self.knuth(facts, ids, partial);
        let accepted = self.settled.get(goal).is_some_and(|(h, _)| *h <= bound);
        for (f, &d) in facts.iter().zip(dist) {
            if before.contains(f) {
                continue;
            }
            let keep = accepted && self.settled.get(f).is_some_and(|(h, _)| h + d <= bound);
            if !keep {
                self.settled.remove(f);
            }
        }
        accepted
    }

    /// Settles the closure's facts, smallest height first.
    fn knuth(&mut self, facts: &[Fact], ids: &FxHashMap<Fact, usize>, insts: Vec<Vec<Instance>>) {
        let height = |s: &Self, f: &Fact| s.settled.get(f).map(|(h, _)| *h);
        // For each instance, the body facts of the closure not settled yet.
        let mut waiting: Vec<Vec<usize>> = Vec::new();
        let mut users: Vec<Vec<(usize, usize)>> = vec![Vec::new(); facts.len()];
        let mut heap = BinaryHeap::new();
        for (f, list) in insts.iter().enumerate() {
            let mut w = Vec::new();
            for (i, inst) in list.iter().enumerate() {
                let open: Vec<&Fact> = inst
                    .body
                    .iter()
                    .filter(|b| height(self, b).is_none() && ids.contains_key(*b))
                    .collect();
                for b in &open {
                    users[ids[*b]].push((f, i));
                }
                w.push(open.len());
                if open.is_empty() {
                    heap.push(Reverse((self.instance_height(inst), f, i)));
                }
            }
            waiting.push(w);
        }
        for (f, fact) in facts.iter().enumerate() {
            if given(self.ctx, fact) && !self.settled.contains_key(fact) {
                self.settled.insert(fact.clone(), (0, Settled::Given));
                self.release(f, &users, &mut waiting, &insts, &mut heap);
            }
        }
        while let Some(Reverse((h, f, i))) = heap.pop() {
            if self.settled.contains_key(&facts[f]) {
                continue;
            }
            let inst = Box::new(insts[f][i].clone());
            self.settled
                .insert(facts[f].clone(), (h, Settled::Derived(inst)));
            self.release(f, &users, &mut waiting, &insts, &mut heap);
        }
    }

    /// Counts fact `f` as settled for the instances that wait on it.
    fn release(
        &self,
        f: usize,
        users: &[Vec<(usize, usize)>],
        waiting: &mut [Vec<usize>],
        insts: &[Vec<Instance>],
        heap: &mut BinaryHeap<Reverse<(usize, usize, usize)>>,
    ) {
        for &(g, i) in &users[f] {
            waiting[g][i] -= 1;
            if waiting[g][i] == 0 {
                heap.push(Reverse((self.instance_height(&insts[g][i]), g, i)));
            }
        }
    }

    /// 1 + the largest height of an instance's body facts (all settled).
    fn instance_height(&self, inst: &Instance) -> usize {
        1 + inst
            .body
            .iter()
            .filter_map(|b| self.settled.get(b).map(|(h, _)| *h))
            .max()
            .unwrap_or(0)
    }

    /// The derivation of a settled fact as a tree.
    fn tree(&self, f: &Fact, budget: &mut usize) -> WhyNode {
        let ctx = self.ctx;
        let label = ctx.element(f.0, &f.1);
        *budget = budget.saturating_sub(1);
        match self.settled.get(f) {
            None => WhyNode::leaf(label, "not explained here".into()),
            Some((_, Settled::Given)) => WhyNode::leaf(label, given_where(ctx, f)),
            Some((_, Settled::Derived(inst))) if *budget == 0 => {
                let eq = &ctx.p.equations[inst.eq];
                WhyNode::leaf(
                    label,
                    format!("rule at {}; the rest is elided", ctx.at(eq.span)),
                )
            }
            Some((h, Settled::Derived(inst))) => {
                let eq = &ctx.p.equations[inst.eq];
                let round = ctx
                    .round(f.0, &f.1)
                    .map_or(String::new(), |r| format!(", round {r}"));
                let detail = format!(
                    "height {h}{round}, rule at {}: {}",
                    ctx.at(eq.span),
                    bound_text(ctx, eq, &inst.env, None)
                );
                let mut children: Vec<WhyNode> =
                    inst.body.iter().map(|b| self.tree(b, budget)).collect();
                for n in &inst.negated {
                    let what = format!("absent; decided in stratum {}", ctx.stratum_of(n.0));
                    children.push(WhyNode::leaf(
                        format!("not {}", ctx.element(n.0, &n.1)),
                        what,
                    ));
                }
                WhyNode {
                    label,
                    detail,
                    children,
                }
            }
        }
    }
}

/// Where a given fact comes from: a fact statement, a row of an input file, or a binding.
fn given_where(ctx: &Ctx, f: &Fact) -> String {
    let name = &ctx.p.tensors[f.0].name;
    let labels: Vec<String> = (0..f.1.len())
        .map(|ax| crate::output::label(ctx.p, f.0, ax, f.1[ax] as usize, false))
        .collect();
    for st in &ctx.program.statements {
        match &st.kind {
            StmtKind::Fact(a) if &a.name.text == name && same_fact(&a.indices, &labels) => {
                return format!("fact at {}", ctx.at(a.span));
            }
            StmtKind::FileRead { name: n, path } if &n.text == name => {
                if let Some(line) = ctx.row_of(&ctx.base_dir.join(path), &labels) {
                    return format!("row of {path}:{line}");
                }
            }
            _ => {}
        }
    }
    "given: bound from outside, or inserted by a commit".into()
}

/// Whether a fact statement's constants spell these labels.
fn same_fact(indices: &[Index], labels: &[String]) -> bool {
    indices.len() == labels.len()
        && indices.iter().zip(labels).all(|(i, l)| match i {
            Index::Name(n) => &n.text == l,
            Index::Int(v, _) => &v.to_string() == l,
            Index::Str(s, _) => s == l,
            Index::Real(v, _) => v.to_string() == *l || l.parse::<f64>().ok() == Some(*v),
            _ => false,
        })
}

/// A statement's text with its variables replaced by what they are bound to (those of
/// `bound` only, where it is given).
pub(super) fn bound_text(ctx: &Ctx, eq: &Equation, env: &[i64], bound: Option<&[bool]>) -> String {
    let text = ctx
        .source
        .get(eq.span.start..eq.span.end)
        .unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let var = eq.vars.iter().position(|v| v.name == *word);
        match var.filter(|&v| bound.is_none_or(|b| b[v])) {
            Some(v) if !word.is_empty() => out.push_str(&var_label(ctx, eq, v, env)),
            _ => out.push_str(word),
        }
        word.clear();
    };
    let mut in_string = false;
    for c in text.chars() {
        if c == '"' {
            in_string = !in_string;
        }
        if !in_string && (c.is_alphanumeric() || c == '_' || c == '\'') {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// What variable `v` stands for at `env`: a symbol, a number or a value.
fn var_label(ctx: &Ctx, eq: &Equation, v: usize, env: &[i64]) -> String {
    if let Some(d) = eq.vars[v].open {
        if let Some(t) = &ctx.p.domains[d].table {
            return t.value(env[v] as u32).to_string();
        }
    }
    let mut reads: Vec<(usize, &[IndexFn])> = vec![(eq.target, &eq.lhs)];
    collect_reads(&eq.rhs, &mut reads);
    for (t, index) in reads {
        if let Some(a) = index.iter().position(|f| *f == IndexFn::Var(v)) {
            return crate::output::label(ctx.p, t, a, env[v].max(0) as usize, true);
        }
    }
    env[v].to_string()
}

/// Every read in a node, with its tensor.
fn collect_reads<'n>(n: &'n Node, out: &mut Vec<(usize, &'n [IndexFn])>) {
    match n {
        Node::Read { tensor, index, .. } => out.push((*tensor, index)),
        Node::Sum { body, .. } => collect_reads(body, out),
        Node::Product(fs) => fs.iter().for_each(|(_, f)| collect_reads(f, out)),
        Node::Neg(x) | Node::Not(x) => collect_reads(x, out),
        Node::Normalize(_, _, x) => collect_reads(x, out),
        Node::Concat { arg, .. } => collect_reads(arg, out),
        Node::Binary(_, a, b) | Node::Compare(_, a, b) => {
            collect_reads(a, out);
            collect_reads(b, out);
        }
        Node::Call(_, args) => args.iter().for_each(|a| collect_reads(a, out)),
        Node::Const(_) | Node::Var(_) => {}
    }
}
