//! `tl explain`: how each stratum will be evaluated — by semi-naive joins (with the join order
//! and the index each atom is looked up by, the variable order of a worst-case-optimal join
//! for a cyclic body, and whether bit matrices may take over), by semi-naive `min=`/`max=`
//! joins, by contraction trees for dense equations (order and FLOPs), or by the reference
//! loops (with the size of each iteration space); with `--engine differential`, the dataflow
//! (arrangements and each rule's operators) — so a user can see why a program is fast
//! or slow. It prints the plan `plan::plan` makes, which is the one evaluation follows.

use crate::output::label;
use crate::plan::dataflow::{Arrangement, ArrangementId, DataflowPlan, FlowRule, Heads, Placement};
use crate::plan::datalog::{
    join_order, keys_within, variable_order, Atom, JoinStats, JoinStep, LetValue, Rule, Term,
};
use crate::plan::einsum::{Contraction, DenseEquation, Path};
use crate::plan::nest::{Level, NestEquation, Position, Scope, Value};
use crate::plan::{Kernel, Plan};
use crate::semantics::{Checked, Equation, Family, Stratum, TensorId, VarId};
use crate::tensor::Storage;
use std::fmt::Write;

/// The decision log of an evaluation, one line per stratum evaluated: the kernel that ran
/// it, the one planned where they differ, and why (`tl run --decisions`).
pub(crate) fn decisions(p: &Checked, plan: &Plan, log: &[crate::eval::Decision]) -> String {
    use crate::eval::Ran;
    let mut out = String::new();
    for d in log {
        let planned = plan
            .strata
            .get(d.stratum)
            .map(|sp| Ran::planned(&sp.kernel));
        let line = LogLine {
            stratum: d.stratum,
            ran: d.ran.describe(),
            planned: planned.map(|r| (r == d.ran, r.describe())),
            reason: d.reason.as_deref(),
        };
        line.write(&mut out, p, "stratum");
    }
    out
}

/// One line of a decision log: a stratum, what ran it, whether that is what was planned
/// (and if not, what was), and why.
pub(crate) struct LogLine<'a> {
    pub(crate) stratum: usize,
    pub(crate) ran: &'a str,
    /// `(same, planned)`, where the plan is known.
    pub(crate) planned: Option<(bool, &'a str)>,
    pub(crate) reason: Option<&'a str>,
}

impl LogLine<'_> {
    /// Appends the line, `label` before the stratum's number; nothing for a stratum that
    /// is not the program's.
    pub(crate) fn write(&self, out: &mut String, p: &Checked, label: &str) {
        let Some(st) = p.strata.get(self.stratum) else {
            return;
        };
        let names: Vec<&str> = st
            .tensors
            .iter()
            .map(|&t| p.tensors[t].name.as_str())
            .collect();
        let (k, names) = (self.stratum + 1, names.join(", "));
        let _ = write!(out, "{label} {k}: {names}: {}", self.ran);
        match self.planned {
            Some((true, _)) => out.push_str(", as planned"),
            Some((false, planned)) => {
                let _ = write!(out, ", planned {planned}");
            }
            None => {}
        }
        if let Some(why) = self.reason {
            let _ = write!(out, " ({why})");
        }
        out.push('\n');
    }
}

/// The plan of every stratum, in evaluation order (`plan` is the value evaluation executes),
/// dense equations with where they run at `threads` threads.
pub(crate) fn explain(p: &Checked, plan: &Plan, source: &str, threads: usize) -> String {
    let mut out = String::new();
    for (k, (st, sp)) in p.strata.iter().zip(&plan.strata).enumerate() {
        let names: Vec<&str> = st
            .tensors
            .iter()
            .map(|&t| p.tensors[t].name.as_str())
            .collect();
        let names = names.join(", ");
        if st.equations.is_empty() {
            let _ = writeln!(out, "stratum {}: {names} (data)", k + 1);
            data_storage(&mut out, p, plan, st);
            continue;
        }
        let kind = if st.recursive {
            "recursive"
        } else {
            "not recursive"
        };
        let at = Explaining {
            p,
            st,
            sp,
            source,
            head: format!("stratum {}: {names} ({kind})", k + 1),
        };
        match &sp.kernel {
            Kernel::Data => {}
            Kernel::Datalog(rules, chained) => at.datalog(&mut out, rules, chained.is_some()),
            Kernel::Extremum(rules) => at.extremum(&mut out, rules),
            Kernel::Counts(rules) => at.counts(&mut out, rules),
            Kernel::Dense(plans) => {
                let _ = writeln!(out, "{}, dense contractions (matrix products)", at.head);
                crate::explain_dense::dense(&mut out, (p, source, threads), plans);
            }
            Kernel::Steps(plan) => at.steps(&mut out, plan),
            Kernel::Virtual(plan) => at.virtual_index(&mut out, plan),
            Kernel::Nest => {
                let _ = writeln!(out, "{}, loop nests", at.head);
                for n in &sp.nests {
                    let eq = &p.equations[n.equation];
                    let _ = writeln!(out, "  {}", statement(eq, source));
                    nest_plan(&mut out, p, eq, &n.root, 4);
                    skipped_zeros(&mut out, p, n, 4);
                }
            }
            Kernel::Reference => {
                let _ = writeln!(out, "{}, reference loops", at.head);
                for &e in &st.equations {
                    let eq = &p.equations[e];
                    let _ = writeln!(out, "  {}", statement(eq, source));
                    let _ = writeln!(out, "    {}", iteration_space(eq));
                }
            }
        }
    }
    out
}

/// A stratum of data: the tensors stored as their non-zero elements.
fn data_storage(out: &mut String, p: &Checked, plan: &Plan, st: &Stratum) {
    for &t in st.tensors.iter().filter(|&&t| plan.sparse[t]) {
        let _ = writeln!(
            out,
            "  {} stored as its {} non-zero elements (few for its shape {:?})",
            p.tensors[t].name,
            data_size(p, t),
            p.tensors[t].shape
        );
    }
}

/// One stratum being explained: the program, the stratum and its plan, the source its
/// statements are quoted from, and its heading (`stratum 2: Path (recursive)`).
struct Explaining<'a> {
    p: &'a Checked,
    st: &'a Stratum,
    sp: &'a crate::plan::StratumPlan,
    source: &'a str,
    head: String,
}

impl Explaining<'_> {
    fn datalog(&self, out: &mut String, rules: &[Rule], chained: bool) {
        let (p, st, sp) = (self.p, self.st, self.sp);
        let _ = writeln!(out, "{}, semi-naive joins", self.head);
        if chained {
            let _ = writeln!(
                out,
                "  products of binary relations: bit-matrix rows once a relation is dense"
            );
        }
        if let Some((asked, d)) = &sp.demand {
            let shown: Vec<String> = asked.iter().map(|q| asked_atom(p, q)).collect();
            let _ = writeln!(
                out,
                "  on demand: the program reads it only as {}, so the magic-sets \
                 rewrite ({} rules) derives what that asks for; the rules below run \
                 only if it declines",
                shown.join(" and "),
                d.rules.len()
            );
        }
        for r in rules {
            rule_plan(out, p, st, r, self.source);
        }
        let _ = writeln!(out, "  incremental: {}", sp.maintenance.text());
    }

    fn extremum(&self, out: &mut String, rules: &[crate::plan::datalog::ValuedRule]) {
        let p = self.p;
        let family = if p.tensors[self.st.tensors[0]].family == Family::Min {
            "min="
        } else {
            "max="
        };
        let _ = writeln!(
            out,
            "{}, semi-naive {family} joins over improved elements",
            self.head
        );
        for vr in rules {
            rule_plan(out, p, self.st, &vr.rule, self.source);
        }
        let _ = writeln!(out, "  incremental: {}", self.sp.maintenance.text());
    }

    fn counts(&self, out: &mut String, rules: &[(Rule, Option<crate::plan::datalog::Product>)]) {
        let p = self.p;
        let _ = writeln!(out, "{}, counting by joins", self.head);
        for (r, product) in rules {
            let eq = &p.equations[r.equation];
            let _ = writeln!(out, "  {}", statement(eq, self.source));
            if let Some(m) = product {
                let _ = writeln!(
                    out,
                    "    sparse matrix product: each row of {} gathers the rows of {} it names",
                    atom(p, &r.atoms[m.first], eq),
                    atom(p, &r.atoms[m.second], eq)
                );
                continue;
            }
            if crate::plan::datalog::run_lengths(r) {
                let _ = writeln!(
                    out,
                    "    run lengths: one pass over the sorted tuples of {}, no index",
                    atom(p, &r.atoms[0], eq)
                );
                continue;
            }
            let size = DataStats { p, rule: r };
            let _ = writeln!(
                out,
                "    join: {}",
                steps(p, r, eq, &join_order(r, None, &size))
            );
            afterwards(out, p, r, eq);
        }
    }

    fn steps(&self, out: &mut String, plan: &crate::plan::steps::Steps) {
        let p = self.p;
        let axes: Vec<String> = plan
            .axes
            .iter()
            .map(|&(t, a)| format!("{} axis {}", p.tensors[t].name, a + 1))
            .collect();
        let _ = writeln!(
            out,
            "{}, in index order{}: {} steps along {}",
            self.head,
            if plan.exact { ", exact i64" } else { "" },
            plan.count,
            axes.join(", ")
        );
        for s in &plan.equations {
            let eq = &p.equations[s.equation];
            let _ = writeln!(out, "  {}", statement(eq, self.source));
            match &s.dense {
                _ if s.extreme.is_some() => {
                    let family = if eq.family == crate::semantics::Family::Min {
                        "min"
                    } else {
                        "max"
                    };
                    let _ = writeln!(
                        out,
                        "    each step: {family}-product rows over dense panels of its factors (a loop nest where a factor reads nothing)"
                    );
                }
                Some(d) => {
                    let _ = writeln!(
                        out,
                        "    each step: dense, {:.3e} FLOPs, its windows moved to the step",
                        d.flops
                    );
                    tables(out, d, eq, "      ");
                }
                None => {
                    let _ = writeln!(out, "    each step: a loop nest");
                    nest_plan(out, p, eq, &s.nest.root, 6);
                    skipped_zeros(out, p, &s.nest, 6);
                }
            }
        }
    }

    fn virtual_index(&self, out: &mut String, plan: &crate::plan::steps::Virtual) {
        let eq = &self.p.equations[plan.step.equation];
        let _ = writeln!(
            out,
            "{}, a virtual index: {} steps, dense",
            self.head, plan.step.range
        );
        let _ = writeln!(out, "  {}", statement(eq, self.source));
        let flops = plan.step.dense.as_ref().map_or(0.0, |d| d.flops);
        let _ = writeln!(
            out,
            "    each step: {flops:.3e} FLOPs over the previous slice, its windows moved to the step"
        );
    }
}

/// A query a stratum is evaluated on demand for, as the program writes it (`_` for a
/// position it leaves open).
fn asked_atom(p: &Checked, q: &crate::semantics::Query) -> String {
    let at: Vec<String> = q
        .pattern
        .iter()
        .enumerate()
        .map(|(ax, x)| match x {
            crate::semantics::QueryIndex::Fixed(i) => label(p, q.tensor, ax, *i, true),
            _ => "_".into(),
        })
        .collect();
    format!("{}({})", p.tensors[q.tensor].name, at.join(", "))
}

/// The size of an equation's iteration space, as the reference loops visit it.
pub(crate) fn iteration_space(eq: &Equation) -> String {
    let dims: Vec<String> = eq
        .vars
        .iter()
        .map(|v| format!("{} {}", v.name, v.range))
        .collect();
    let points = eq
        .vars
        .iter()
        .fold(1u128, |a, v| a.saturating_mul(v.range as u128));
    if dims.is_empty() {
        "one point".to_string()
    } else {
        format!("iteration space: {} = {points} points", dims.join(" × "))
    }
}

/// The parts of a dense equation's expression computed once per pass as tables
/// (`plan::rows::Table`), one line each.
pub(crate) fn tables(out: &mut String, d: &DenseEquation, eq: &Equation, indent: &str) {
    use crate::plan::einsum::InPlaceEpilogue;
    let argument = d.in_place.as_ref().and_then(|at| match &at.epilogue {
        InPlaceEpilogue::NormalizeRows(_, _, arg) => Some(arg),
        _ => None,
    });
    for program in d.program.iter().chain(argument) {
        for t in &program.tables {
            let names: Vec<&str> = t.vars.iter().map(|&v| eq.vars[v].name.as_str()).collect();
            let values: usize = t.vars.iter().map(|&v| d.extents[v]).product();
            let _ = writeln!(
                out,
                "{indent}a part reading no term tabulated over {} once per pass ({values} values), read as a term",
                if names.is_empty() { "nothing".to_string() } else { names.join(", ") }
            );
        }
    }
}

/// The run-time condition of a nest that scans past stored zeros
/// ([`crate::plan::nest::SkippedZeros`]).
fn skipped_zeros(out: &mut String, p: &Checked, n: &NestEquation, indent: usize) {
    let Some(z) = &n.zeros else {
        return;
    };
    let names = |ts: &[usize]| {
        let names: Vec<&str> = ts.iter().map(|&t| p.tensors[t].name.as_str()).collect();
        names.join(", ")
    };
    let mut condition = format!("{} finite", names(&z.needs.finite));
    if !z.needs.nonzero.is_empty() {
        condition += &format!(", {} nowhere 0", names(&z.needs.nonzero));
    }
    let _ = writeln!(
        out,
        "{:indent$}stored zeros of {} left out where {condition} (checked at run time; else read at every point)",
        "",
        names(&z.needs.skipped)
    );
}

/// A scope's loops, one per line, indented by `indent`, with the scopes nested in its body.
fn nest_plan(out: &mut String, p: &Checked, eq: &Equation, scope: &Scope, indent: usize) {
    let pad = " ".repeat(indent);
    let var = |v: usize| eq.vars[v].name.as_str();
    for level in &scope.levels {
        let _ = match level {
            Level::Scan(s) => {
                let positions: Vec<String> = s
                    .positions
                    .iter()
                    .enumerate()
                    .map(|(ax, pos)| match pos {
                        Position::Var(v) | Position::Shifted { var: v, by: 0, .. } => {
                            var(*v).to_string()
                        }
                        Position::Const(c) => label(p, s.tensor, ax, *c as usize, true),
                        Position::Known(f) => index_text(f, eq),
                        Position::Shifted { var: v, by, .. } if *by < 0 => {
                            format!("{} - {}", var(*v), -by)
                        }
                        Position::Shifted { var: v, by, .. } => format!("{} + {by}", var(*v)),
                    })
                    .collect();
                let how = if s.key.is_empty() {
                    "every tuple".to_string()
                } else {
                    let at: Vec<String> = s.key.iter().map(|a| (a + 1).to_string()).collect();
                    format!("looked up by position {}", at.join(", "))
                };
                writeln!(
                    out,
                    "{pad}scan {}({}) [{how}]",
                    p.tensors[s.tensor].name,
                    positions.join(", ")
                )
            }
            Level::Range { var: v, extent } => writeln!(out, "{pad}for {} in 0..{extent}", var(*v)),
            Level::Values { var: v, .. } => writeln!(
                out,
                "{pad}for {} over the values its column holds (an open column, no extent)",
                var(*v)
            ),
            Level::Bind { var: v, extent, .. } => writeln!(
                out,
                "{pad}bind {} to the value it equals (a whole number in 0..{extent}, or no point)",
                var(*v)
            ),
            Level::Filter(_) => writeln!(out, "{pad}filter: a comparison, skipped where false"),
        };
    }
    let _ = writeln!(out, "{pad}value: the expression at each point");
    nested(out, p, eq, &scope.body, indent + 2);
}

/// Index arithmetic as written, with the equation's variable names: an operand that binds
/// more loosely than its operator (or as loosely, on the right) keeps its parentheses.
fn index_text(f: &crate::semantics::IndexFn, eq: &Equation) -> String {
    use crate::semantics::IndexFn;
    use crate::syntax::ast::ArithOp;
    let binding = |f: &IndexFn| match f {
        IndexFn::Arith(_, ArithOp::Add | ArithOp::Sub, _) => 1,
        IndexFn::Arith(..) => 2,
        IndexFn::Var(_) | IndexFn::Const(_) => 3,
    };
    match f {
        IndexFn::Var(v) => eq.vars[*v].name.clone(),
        IndexFn::Const(c) => c.to_string(),
        IndexFn::Arith(a, op, b) => {
            let tight = binding(f);
            let operand = |x: &IndexFn, loose: bool| match loose {
                true => format!("({})", index_text(x, eq)),
                false => index_text(x, eq),
            };
            let sign = match op {
                ArithOp::Add => "+",
                ArithOp::Sub => "-",
                ArithOp::Mul => "*",
                ArithOp::Div => "/",
                ArithOp::Rem => "%",
            };
            let (a, b) = (
                operand(a, binding(a) < tight),
                operand(b, binding(b) <= tight),
            );
            format!("{a} {sign} {b}")
        }
    }
}

/// The scopes nested in a value, each under a heading.
fn nested(out: &mut String, p: &Checked, eq: &Equation, v: &Value, indent: usize) {
    match v {
        Value::Sum(s) => {
            let summed: Vec<&str> = s
                .levels
                .iter()
                .filter_map(|l| match l {
                    Level::Range { var, .. } | Level::Values { var, .. } => {
                        Some(eq.vars[*var].name.as_str())
                    }
                    _ => None,
                })
                .collect();
            let _ = writeln!(
                out,
                "{}nested summation{}:",
                " ".repeat(indent),
                if summed.is_empty() {
                    String::new()
                } else {
                    format!(" over {}", summed.join(", "))
                }
            );
            nest_plan(out, p, eq, s, indent + 2);
        }
        Value::Neg(x) | Value::Not(x) | Value::Normalize(_, _, _, x) | Value::Concat(_, _, x) => {
            nested(out, p, eq, x, indent)
        }
        Value::Product(fs) => fs.iter().for_each(|(_, f)| nested(out, p, eq, f, indent)),
        Value::Binary(_, a, b) | Value::Compare(_, a, b) => {
            nested(out, p, eq, a, indent);
            nested(out, p, eq, b, indent);
        }
        Value::Call(_, args) => args.iter().for_each(|a| nested(out, p, eq, a, indent)),
        Value::Const(_)
        | Value::Var(_)
        | Value::Read { .. }
        | Value::Slice { .. }
        | Value::Scanned(_) => {}
    }
}

/// A join rule's statement and join orders: one for the first round and, in a recursive
/// stratum, one per recursive atom reading the last round's new tuples.
fn rule_plan(out: &mut String, p: &Checked, st: &Stratum, r: &Rule, source: &str) {
    let eq = &p.equations[r.equation];
    let _ = writeln!(out, "  {}", statement(eq, source));
    let recursive: Vec<usize> = (0..r.atoms.len())
        .filter(|&i| st.tensors.contains(&r.atoms[i].tensor))
        .collect();
    let size = DataStats { p, rule: r };
    if r.cyclic {
        let vars = |first: Option<usize>| {
            let names: Vec<&str> = variable_order(r, first)
                .iter()
                .map(|&v| eq.vars[v].name.as_str())
                .collect();
            names.join(" → ")
        };
        let _ = writeln!(
            out,
            "    cyclic body: worst-case-optimal join binding {}",
            vars(None)
        );
        for &i in recursive.iter().filter(|_| st.recursive) {
            let _ = writeln!(
                out,
                "    new {} tuples: binding {}",
                p.tensors[r.atoms[i].tensor].name,
                vars(Some(i))
            );
        }
    } else if st.recursive && !recursive.is_empty() {
        let _ = writeln!(
            out,
            "    first round: {}",
            steps(p, r, eq, &join_order(r, None, &size))
        );
        for &i in &recursive {
            let order = join_order(r, Some(i), &size);
            let _ = writeln!(
                out,
                "    new {} tuples: {}",
                p.tensors[r.atoms[i].tensor].name,
                steps(p, r, eq, &order)
            );
        }
    } else {
        let _ = writeln!(
            out,
            "    join: {}",
            steps(p, r, eq, &join_order(r, None, &size))
        );
    }
    afterwards(out, p, r, eq);
}

/// What a join computes and checks at each assignment it finds: computed head positions,
/// negated atoms and value comparisons.
fn afterwards(out: &mut String, p: &Checked, r: &Rule, eq: &Equation) {
    for group in &r.exists {
        let atoms: Vec<String> = group.iter().map(|a| atom(p, a, eq)).collect();
        let _ = writeln!(
            out,
            "    only if {} has an assignment: joined once, apart (it shares no variable)",
            atoms.join(", ")
        );
    }
    for l in &r.lets {
        let bound = match l.open {
            Some(_) => "numbered among its open column's values, §8".to_string(),
            None => format!("outside 0..{} derives nothing", l.extent),
        };
        let _ = match &l.value {
            LetValue::Index(f) => writeln!(
                out,
                "    then: head position {} computed ({bound})",
                index_text(f, eq),
            ),
            LetValue::Computed { .. } => writeln!(
                out,
                "    then: `{}` bound to its computed value ({bound})",
                eq.vars[l.var].name
            ),
        };
    }
    for a in &r.negated {
        let _ = writeln!(out, "    then: not {} (a lookup)", atom(p, a, eq));
    }
    for a in &r.absent {
        let mut terms = vec![Some("_".to_string()); p.tensors[a.tensor].shape.len()];
        for (&c, t) in a.cols.iter().zip(&a.terms) {
            terms[c] = Some(term(p, a.tensor, c, t, eq));
        }
        let shown = access(p, a.tensor, terms.into_iter().flatten().collect());
        let _ = writeln!(
            out,
            "    then: not {shown} (a lookup by the named positions)"
        );
    }
    if !r.checks.is_empty() {
        let mut read = Vec::new();
        r.checks.iter().for_each(|c| c.tensors(&mut read));
        read.sort_unstable();
        read.dedup();
        let names: Vec<&str> = read.iter().map(|&t| p.tensors[t].name.as_str()).collect();
        let reads = match names.as_slice() {
            [] => String::new(),
            _ => format!(", reading {}", names.join(", ")),
        };
        let _ = writeln!(
            out,
            "    then: {} value comparison(s) at each assignment{reads}",
            r.checks.len()
        );
    }
}

/// A contraction tree as nested products of the factors' names: `(A · (B · X))`.
pub(crate) fn order(p: &Checked, c: &Contraction, path: &Path) -> String {
    match path {
        Path::Leaf(k) => {
            let f = &c.factors[*k];
            let name = &p.tensors[f.tensor].name;
            match &f.window {
                // Index arithmetic: the window is gathered (im2col) before the product.
                Some(_) => format!("{name}[window gathered]"),
                None => name.clone(),
            }
        }
        Path::Pair(a, b) => format!("({} · {})", order(p, c, a), order(p, c, b)),
    }
}

/// `line N: <source text>` for an equation.
pub(crate) fn statement(eq: &Equation, source: &str) -> String {
    let line = 1 + source
        .get(..eq.span.start)
        .unwrap_or("")
        .matches('\n')
        .count();
    let text = source.get(eq.span.start..eq.span.end).unwrap_or("").trim();
    format!("line {line}: {text}")
}

/// Tuples in a tensor's data, used to order joins the way the first round will.
/// A join order as explain prints it: by the sizes of the relations' data (derived ones
/// count as empty), each column's values taken as spread over its extent. Evaluation chooses
/// again each round by the sizes it finds.
struct DataStats<'a> {
    p: &'a Checked,
    rule: &'a Rule,
}

impl JoinStats for DataStats<'_> {
    fn rows(&self, atom: usize) -> usize {
        data_size(self.p, self.rule.atoms[atom].tensor)
    }

    fn distinct(&self, atom: usize, cols: &[usize]) -> usize {
        let shape = &self.p.tensors[self.rule.atoms[atom].tensor].shape;
        keys_within(self.rows(atom), Some(shape), cols)
    }
}

fn data_size(p: &Checked, t: usize) -> usize {
    match p.data[t].as_ref().map(|d| &d.storage) {
        Some(Storage::Relation(r)) => r.len(),
        Some(Storage::Sparse(m)) => m.len(),
        _ => 0,
    }
}

fn atom(p: &Checked, a: &Atom, eq: &Equation) -> String {
    let terms = a.terms.iter().enumerate();
    access(
        p,
        a.tensor,
        terms.map(|(ax, t)| term(p, a.tensor, ax, t, eq)).collect(),
    )
}

fn term(p: &Checked, tensor: TensorId, ax: usize, t: &Term, eq: &Equation) -> String {
    match t {
        Term::Var(v) => eq.vars[*v].name.clone(),
        Term::Const(c) => label(p, tensor, ax, *c as usize, true),
    }
}

/// `R(x, y)` for a Boolean tensor, `W[x, y]` for another.
fn access(p: &Checked, tensor: TensorId, terms: Vec<String>) -> String {
    let info = &p.tensors[tensor];
    if info.kind == crate::semantics::Kind::Bool {
        format!("{}({})", info.name, terms.join(", "))
    } else {
        format!("{}[{}]", info.name, terms.join(", "))
    }
}

fn steps(p: &Checked, r: &Rule, eq: &Equation, order: &[JoinStep]) -> String {
    if order.is_empty() {
        return "no atom to join: the body's tests, once".into();
    }
    let parts: Vec<String> = order
        .iter()
        .map(|s| {
            let a = &r.atoms[s.atom];
            let how = if s.key_cols.is_empty() {
                "scan".to_string()
            } else {
                let cols: Vec<String> = s.key_cols.iter().map(|c| (c + 1).to_string()).collect();
                format!("index on column {}", cols.join(", "))
            };
            format!("{} [{how}]", atom(p, a, eq))
        })
        .collect();
    parts.join(" → ")
}

/// The dataflow as `tl explain --engine differential` prints it.
pub(crate) fn explain_dataflow(p: &Checked, d: &DataflowPlan, source: &str) -> String {
    let mut out = String::new();
    let names = |ts: &[TensorId]| {
        let n: Vec<&str> = ts.iter().map(|&t| p.tensors[t].name.as_str()).collect();
        n.join(", ")
    };
    let _ = writeln!(
        out,
        "differential dataflow (timely + differential-dataflow)"
    );
    let _ = writeln!(out, "  inputs: {}", or_none(names(&d.inputs)));
    for (i, (st, place)) in p.strata.iter().zip(&d.placement).enumerate() {
        if st.equations.is_empty() {
            continue;
        }
        let where_ = match place {
            Placement::Before => "standard engine, before the dataflow".to_string(),
            Placement::After(why) => format!("standard engine, after the dataflow: {why}"),
            Placement::Flow => continue,
        };
        let _ = writeln!(out, "stratum {}: {} ({where_})", i + 1, names(&st.tensors));
    }
    for fs in &d.strata {
        let what = match (fs.recursive, fs.heads) {
            (true, Heads::Extreme(f)) => format!(
                "iterate: a fixpoint scope of its own, {} per head, at most --max-iters iterations",
                extreme_name(f)
            ),
            (true, _) => "iterate: a fixpoint scope of its own".to_string(),
            (false, Heads::Count) => "count per head".to_string(),
            (false, Heads::Extreme(f)) => format!("{} per head", extreme_name(f)),
            (false, Heads::Distinct) => "distinct".to_string(),
        };
        let _ = writeln!(
            out,
            "stratum {}: {} ({what})",
            fs.stratum + 1,
            names(&fs.tensors)
        );
        for (k, a) in fs.arrangements.iter().enumerate() {
            let shared = fs
                .rules
                .iter()
                .filter(|r| uses(r, ArrangementId(k)))
                .count();
            let _ = writeln!(
                out,
                "  arrangement a{k}: {}{}",
                arrangement_text(p, a),
                match shared {
                    0 | 1 => String::new(),
                    n => format!(" (shared by {n} rules)"),
                }
            );
        }
        for r in &fs.rules {
            let eq = &p.equations[r.rule.equation];
            let _ = writeln!(out, "  {}", statement(eq, source));
            let _ = writeln!(out, "    {}", flow_rule_ops(p, r).join(" → "));
        }
    }
    out
}

/// A rule's operators in the dataflow: its first arrangement, joins, filters, antijoins and
/// the map to its head.
fn flow_rule_ops(p: &Checked, r: &FlowRule) -> Vec<String> {
    let eq = &p.equations[r.rule.equation];
    let names = |ts: &[TensorId]| {
        let n: Vec<&str> = ts.iter().map(|&t| p.tensors[t].name.as_str()).collect();
        n.join(", ")
    };
    // A value's two words print as one name: `value(Edge)`.
    let word = |v: &VarId| {
        let words = r.value.as_ref()?.words.iter().enumerate();
        words
            .filter_map(|(k, w)| Some((k, (*w)?)))
            .find(|(_, w)| w.contains(v))
            .map(|(k, w)| match w[0] == *v {
                true => Some(format!("value({})", names(&[r.rule.atoms[k].tensor]))),
                false => None,
            })
    };
    let var = |v: &VarId| match word(v) {
        Some(name) => name,
        None => Some(
            eq.vars
                .get(*v)
                .map_or_else(|| format!("_{v}"), |i| i.name.clone()),
        ),
    };
    let vs = |vs: &[VarId]| vs.iter().filter_map(var).collect::<Vec<_>>().join(", ");
    let head = names(&[r.rule.head]);
    let mut ops = vec![format!("a{} ({})", r.first.0, vs(&r.first_env))];
    for j in &r.joins {
        ops.push(format!(
            "join a{} on ({}) → ({})",
            j.arrangement.0,
            vs(&j.key),
            vs(&j.env)
        ));
    }
    let r0 = &r.rule;
    if !r0.filters.is_empty() || !r0.checks.is_empty() || !r0.lets.is_empty() {
        ops.push(format!(
            "filter ({} comparisons, {} value checks, {} computed positions)",
            r0.filters.len(),
            r0.checks.len(),
            r0.lets.len()
        ));
    }
    for a in &r.antijoins {
        ops.push(format!("antijoin a{}", a.arrangement.0));
    }
    match r.value {
        Some(_) => ops.push(format!("map to {head} with its value")),
        None => ops.push(format!("map to {head}")),
    }
    ops
}

fn extreme_name(f: Family) -> &'static str {
    match f {
        Family::Max => "max",
        _ => "min",
    }
}

fn or_none(s: String) -> String {
    match s.is_empty() {
        true => "none".into(),
        false => s,
    }
}

fn uses(r: &FlowRule, a: ArrangementId) -> bool {
    r.first == a
        || r.joins.iter().any(|j| j.arrangement == a)
        || r.antijoins.iter().any(|j| j.arrangement == a)
}

fn arrangement_text(p: &Checked, a: &Arrangement) -> String {
    let mut s = format!("{} by column", p.tensors[a.tensor].name);
    // Columns past the tensor's positions hold its value's two words.
    let rank = p.tensors[a.tensor].shape.len();
    let cols = |cs: &[usize]| {
        cs.iter()
            .filter(|&&c| c <= rank)
            .map(|&c| match c == rank {
                true => "value".to_string(),
                false => c.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match a.key.len() {
        0 => s = format!("{} (no key)", p.tensors[a.tensor].name),
        1 => s.push_str(&format!(" {}", cols(&a.key))),
        _ => s.push_str(&format!("s ({})", cols(&a.key))),
    }
    if !a.value.is_empty() {
        s.push_str(&format!(", keeping ({})", cols(&a.value)));
    }
    for (c, k) in &a.consts {
        s.push_str(&format!(", column {c} = {k}"));
    }
    for (x, y) in &a.equal {
        s.push_str(&format!(", column {x} = column {y}"));
    }
    if a.distinct {
        s.push_str(", distinct");
    }
    s
}

/// The schedule's table (`tl explain --schedule`): every threshold of work under which an
/// operation stays on the calling thread, and every block split work comes in, with what
/// set it.
pub(crate) fn schedule() -> String {
    let mut out = String::from("schedule: when work splits among --threads, and in what blocks\n");
    for s in crate::plan::schedule::TABLE {
        let _ = writeln!(out, "{}: {} {}", s.name, s.at, s.unit);
        let _ = writeln!(out, "  decides: {}", s.decides);
        let _ = writeln!(out, "  set by: {}", s.set_by);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    fn explain_source(src: &str) -> String {
        let c = checked(src);
        explain(&c, &crate::plan::plan(&c), src, 1)
    }

    #[test]
    fn datalog_strata_show_join_orders_and_others_show_iteration_spaces() {
        let src = "E(A, B). E(B, C).\nP(x, y) :- E(x, y).\nP(x, z) :- P(x, y), E(y, z).\nN[x] = P(x, y)\n";
        let text = explain_source(src);
        assert!(text.contains("P (recursive), semi-naive joins"), "{text}");
        assert!(
            text.contains("new P tuples: P(x, y) [scan] → E(y, z) [index on column 1]"),
            "{text}"
        );
        assert!(
            text.contains("N (not recursive), counting by joins"),
            "{text}"
        );
        let src = "E(A, B).\nT(x, y, z) :- E(x, y), E(y, z), E(z, x).\n";
        let text = explain_source(src);
        assert!(
            text.contains("worst-case-optimal join binding x → y → z"),
            "{text}"
        );
        let src = "W[A, B] = 2\nD[x, y] min= W[x, y]\nD[x, z] min= D[x, y] + W[y, z]\n";
        let text = explain_source(src);
        assert!(
            text.contains("D (recursive), semi-naive min= joins over improved elements"),
            "{text}"
        );
        let src =
            "A : real[50, 50]\nB : real[50, 50]\nX : real[50]\nY[i] = sig(A[i, j] B[j, k] X[k])\n";
        let text = explain_source(src);
        assert!(
            text.contains(
                "term 1: (A · (B · X)) [2 f32 GEMMs, largest intermediate 50 elements]\n    1.510e4 FLOPs, the rest in one pass"
            ),
            "{text}"
        );
        let src = "X = [1, 2, 3]\nY[i] = X[i] X[j] (i != j)\n";
        let text = explain_source(src);
        assert!(
            text.contains("the rest in one pass over the output, then summed over j"),
            "{text}"
        );
        let src = "X = [1, 2, 3]\nY : real[3]\nY[i] = X[i + 1]\n";
        let text = explain_source(src);
        assert!(
            text.contains("added at its left-hand-side position"),
            "{text}"
        );
        let src = "X = [1, 2, 3]\nY[i] = X[i + 1]\n";
        let text = explain_source(src);
        assert!(text.contains("term 1: X[window gathered]"), "{text}");
        let src = "Fact(0, 1).\nFact(i + 1, n * (i + 1)) :- Fact(i, n), i < 5.\nG(i - (n - 1)) :- Fact(i, n).\n";
        let text = explain_source(src);
        assert!(
            text.contains("head position n * (i + 1) computed"),
            "{text}"
        );
        assert!(
            text.contains("head position i - (n - 1) computed"),
            "{text}"
        );
        let src = "X = [1, 2, 3, 4]\nY[i / 2] = X[i]\n";
        let text = explain_source(src);
        assert!(
            text.contains("added at its left-hand-side position"),
            "{text}"
        );
    }
}
