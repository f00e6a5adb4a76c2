//! String functions in rules (§8). Each call of `cat`, `strlen`, `substr`, `ord`,
//! `to_number`, `to_string` or `contains` in a rule (a *site*) becomes a join with a table
//! relation of the function's results, and gets an *ask* rule: the argument tuples the rule
//! calls it on. The tables are facts; whoever runs the program fills them in rounds (run,
//! compute the results of every ask tuple not in the table yet, check again), so that every
//! engine sees only relations, extents are known before planning, and the symbols a call
//! creates are numbered after the program's own, in a fixed order.
//!
//! `Full(z) :- First(x), Last(y), z = cat(x, " ", y)` becomes
//! `Full(z) :- First(x), Last(y), #cat_0(x, y, z).` with `#ask_0(x, y) :- First(x), Last(y).`
//! and, once known, facts `#cat_0("Ada", "Lovelace", "Ada Lovelace").`
//!
//! An ask rule keeps the literals of its rule that do not depend on the call's result, nor
//! on the results of the rule's other calls except those its arguments need: so it asks for
//! at least every tuple the rule can use, and a round never waits on a table that waits on
//! it. A call on constants alone is computed here.

use super::bindings::{indices_in_expr, names_in_index, peel, value_names, variable};
use super::ir::IndexFn;
use crate::diagnostics::{codes, Diagnostic, Span};
use crate::functions::computed::{ReadIndex, ValueFn};
use crate::functions::strings::{Returns, StringFn, Value};
use crate::syntax::ast::*;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Results of string-function calls known so far, per site (in source order).
#[derive(Clone, Debug, Default)]
pub struct StringTables {
    entries: Vec<BTreeMap<Vec<Value>, Option<Value>>>,
    /// Bytes of the values held, with each entry's overhead.
    bytes: u64,
}

impl StringTables {
    /// Whether site `site` has a result (or knows it has none) for `args`.
    pub fn has(&self, site: usize, args: &[Value]) -> bool {
        self.entries.get(site).is_some_and(|e| e.contains_key(args))
    }

    /// Records the result of site `site` on `args` (`None`: the function is undefined there).
    pub fn insert(&mut self, site: usize, args: Vec<Value>, result: Option<Value>) {
        if self.entries.len() <= site {
            self.entries.resize_with(site + 1, BTreeMap::new);
        }
        let weight = |v: &Value| match v {
            Value::Int(_) => 8,
            Value::Sym(t) | Value::Real(t) => 24 + t.len() as u64,
        };
        self.bytes += 64 + args.iter().chain(&result).map(weight).sum::<u64>();
        self.entries[site].insert(args, result);
    }

    /// Bytes the tables hold: each value is held again by its domain, its relations and
    /// the next check's program, so a program holds a few times this.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// What a site computes.
#[derive(Clone, Debug)]
pub enum SiteFn {
    /// A string function.
    String(StringFn),
    /// A computed value that becomes a column (`d = p * 1.5`, `s = S[x]`).
    Value(ValueFn),
}

impl SiteFn {
    /// How messages name it.
    pub fn name(&self) -> &'static str {
        match self {
            SiteFn::String(f) => f.name(),
            SiteFn::Value(_) => "value",
        }
    }

    /// Whether its table has a result column (all but `contains`).
    fn gives_result(&self) -> bool {
        !matches!(self, SiteFn::String(f) if f.returns() == Returns::Truth)
    }
}

/// A call of a string function, or a computed value, in a rule, which reads its results
/// from a table.
#[derive(Clone, Debug)]
pub struct StringSite {
    /// The function.
    pub func: SiteFn,
    /// Its arguments: columns of the ask relation, or constants.
    pub args: Vec<SiteArg>,
    /// The relation of the argument tuples the rule calls it on.
    pub ask: String,
    /// The relation of its results that the rule joins.
    pub table: String,
    /// The call.
    pub span: Span,
}

/// One argument of a [`StringSite`].
#[derive(Clone, Debug)]
pub enum SiteArg {
    /// The ask relation's column of this number.
    Column(usize),
    /// A constant.
    Const(Value),
    /// Integer arithmetic over the ask relation's columns (`n + 1`): its variables are
    /// the columns' numbers.
    Arith(IndexFn),
}

/// The value of arithmetic over a row's columns: `None` where it is undefined (a division
/// by zero, an overflow, a symbol).
fn arith_value(f: &IndexFn, row: &[Value]) -> Option<i64> {
    let mut used = Vec::new();
    f.vars(&mut used);
    let env: Vec<i64> = row
        .iter()
        .map(|v| match v {
            Value::Int(n) => *n,
            Value::Sym(_) | Value::Real(_) => 0,
        })
        .collect();
    let ints = used
        .iter()
        .all(|&c| matches!(row.get(c), Some(Value::Int(_))));
    ints.then(|| f.eval(&env)).flatten()
}

impl StringSite {
    /// The call's arguments for one row of its ask relation; `None` when arithmetic in one
    /// is undefined there (the call then has no result).
    pub fn arguments(&self, row: &[Value]) -> Option<Vec<Value>> {
        self.args
            .iter()
            .map(|a| match a {
                SiteArg::Column(c) => row.get(*c).cloned(),
                SiteArg::Const(v) => Some(v.clone()),
                SiteArg::Arith(e) => arith_value(e, row).map(Value::Int),
            })
            .collect()
    }
}

/// Whether a tensor name was made by this pass: a table, which is defined even while it has
/// no rows (no source name can start with `#`, which starts a comment).
pub(super) fn is_table(name: &str) -> bool {
    name.starts_with('#') && !name.starts_with(ASK)
}

const ASK: &str = "#ask_";

/// The program with its string calls rewritten, its sites, their tables, and the errors
/// found.
pub(super) struct Rewritten {
    pub program: Program,
    pub sites: Vec<StringSite>,
    pub tables: Vec<Table>,
    pub diags: Vec<Diagnostic>,
}

/// A site's table as data, read as a bound file is (so that a million results cost what a
/// million-row file does): the argument columns, then the result (none for `contains`).
pub(super) struct Table {
    /// The table relation's name.
    pub name: String,
    /// Its rows.
    pub raw: std::sync::Arc<crate::io::RawData>,
    /// Which columns hold symbols, whatever their text (`to_string(7)` is the symbol `7`).
    pub symbolic: Vec<bool>,
}

fn table(site: &StringSite, entries: Option<&BTreeMap<Vec<Value>, Option<Value>>>) -> Table {
    let mut rows = crate::io::Table::default();
    let mut symbolic: Vec<bool> = Vec::new();
    let mut mark = |c: usize, v: &Value| {
        if symbolic.len() <= c {
            symbolic.resize(c + 1, false);
        }
        symbolic[c] |= matches!(v, Value::Sym(_));
    };
    for (line, (args, result)) in entries.into_iter().flatten().enumerate() {
        let Some(result) = result else { continue };
        let mut fields: Vec<String> = Vec::with_capacity(args.len() + 1);
        for (c, v) in args.iter().enumerate() {
            mark(c, v);
            fields.push(text(v));
        }
        if site.func.gives_result() {
            mark(args.len(), result);
            fields.push(text(result));
        }
        rows.push(line + 1, fields);
    }
    Table {
        name: site.table.clone(),
        raw: std::sync::Arc::new(crate::io::RawData::Table(rows)),
        symbolic,
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        Value::Sym(s) | Value::Real(s) => s.clone(),
    }
}

/// Rewrites every string call, given the results known so far; `None` when the program
/// calls none (the common case, which then costs no copy). `constants` are the names of
/// scalar constants.
pub(super) fn rewrite(
    program: &Program,
    constants: &HashSet<String>,
    tables: &StringTables,
    computed: &HashSet<Span>,
) -> Option<Rewritten> {
    if !program
        .statements
        .iter()
        .any(|st| mentions_call(st) || computes(st, computed))
    {
        return None;
    }
    let mut out = Rewritten {
        program: Program::default(),
        sites: Vec::new(),
        tables: Vec::new(),
        diags: Vec::new(),
    };
    let mut asks = Vec::new();
    for st in &program.statements {
        match &st.kind {
            StmtKind::Rule { head, body }
                if body.iter().any(expr_calls) || computes(st, computed) =>
            {
                let (head, body) = lift_computed(head, body, computed);
                let mut atom_vars = HashSet::new();
                for lit in &body {
                    if let Expr::Access(a) = peel(lit) {
                        if a.brackets != Brackets::None {
                            a.indices
                                .iter()
                                .for_each(|i| names_in_index(i, &mut atom_vars));
                        }
                    }
                }
                let mut r = RuleRewrite {
                    constants,
                    computed,
                    atom_vars,
                    sites: &mut out.sites,
                    diags: &mut out.diags,
                    locals: Vec::new(),
                    body: Vec::new(),
                    fresh: 0,
                    dead: false,
                };
                for lit in &body {
                    r.literal(lit);
                }
                asks.extend(r.ask_rules());
                let mut body = std::mem::take(&mut r.body);
                if r.dead {
                    body.push(never(st.span));
                }
                out.program.statements.push(Statement {
                    kind: StmtKind::Rule { head, body },
                    span: st.span,
                });
            }
            StmtKind::Equation { lhs, op, rhs } if expr_calls(rhs) => {
                let mut rhs = rhs.clone();
                refuse_calls(&mut rhs, &mut out.diags);
                out.program.statements.push(Statement {
                    kind: StmtKind::Equation {
                        lhs: lhs.clone(),
                        op: *op,
                        rhs,
                    },
                    span: st.span,
                });
            }
            _ => out.program.statements.push(st.clone()),
        }
    }
    out.program.statements.extend(asks);
    out.tables = out
        .sites
        .iter()
        .enumerate()
        .map(|(k, site)| table(site, tables.entries.get(k)))
        .collect();
    Some(out)
}

/// The rewriting of one rule.
struct RuleRewrite<'a> {
    constants: &'a HashSet<String>,
    /// Where values are computed that become columns (each a value site).
    computed: &'a HashSet<Span>,
    /// The variables the rule's own atoms bind: a call equal to one is a filter.
    atom_vars: HashSet<String>,
    sites: &'a mut Vec<StringSite>,
    diags: &'a mut Vec<Diagnostic>,
    locals: Vec<Local>,
    /// The rewritten body so far.
    body: Vec<Expr>,
    fresh: usize,
    /// A call on constants is undefined: the rule never holds.
    dead: bool,
}

/// A site of the rule being rewritten.
struct Local {
    /// Its number among all sites.
    site: usize,
    /// The variable bound to its result (none for `contains`).
    out: Option<String>,
    /// The variables among its arguments: the ask relation's columns.
    cols: Vec<String>,
    /// Literals its ask rule ranges columns over that only a read of its value ranged
    /// (`y = K[x] + C` ranges `x` over `K`'s axis; the ask holds no value to read it in).
    ranges: Vec<Expr>,
}

/// A call's rewriting: its value when its arguments are constants, or else the table
/// atom it became.
enum Call {
    Folded(Option<Value>),
    Atom(Expr),
}

/// One argument of a call being rewritten.
enum Arg {
    Var(String),
    Const(Value),
    /// Integer arithmetic over variables (`n + 1`), computed when the table is filled, so
    /// that the table joins on the variables themselves.
    Arith(Index),
}

impl RuleRewrite<'_> {
    fn literal(&mut self, lit: &Expr) {
        let e = peel(lit);
        if let Expr::Compare(CmpOp::Eq, l, r, span) = e {
            for (var, value) in [(l, r), (r, l)] {
                if let Some(v) = variable(var, self.constants) {
                    if self.computed.contains(&value.span())
                        || self.computed.contains(&peel(value).span())
                    {
                        self.value_site(value, v, *span);
                        return;
                    }
                }
            }
            for (var, value) in [(l, r), (r, l)] {
                let (
                    Some(v),
                    Expr::Call {
                        func,
                        args,
                        span: cs,
                    },
                ) = (variable(var, self.constants), peel(value))
                else {
                    continue;
                };
                let Some(f) = StringFn::named(&func.text) else {
                    continue;
                };
                if f.returns() == Returns::Truth {
                    continue;
                }
                match self.call(SiteFn::String(f), args, *cs, Some(v.clone())) {
                    Call::Folded(value) => {
                        if value.is_none() {
                            self.dead = true;
                        }
                        let value = value.unwrap_or(Value::Int(0));
                        self.body.push(Expr::Compare(
                            CmpOp::Eq,
                            Box::new(var_expr(&v, *span)),
                            Box::new(value_expr(&value, *cs)),
                            *span,
                        ));
                    }
                    Call::Atom(a) => self.body.push(a),
                }
                return;
            }
        }
        let (negated, inner) = match e {
            Expr::Not(inner, _) => (true, peel(inner)),
            other => (false, other),
        };
        if let Expr::Call { func, args, span } = inner {
            if let Some(f @ StringFn::Contains) = StringFn::named(&func.text) {
                match self.call(SiteFn::String(f), args, *span, None) {
                    Call::Folded(holds) => {
                        if holds.is_some() == negated {
                            self.dead = true;
                        }
                    }
                    Call::Atom(a) if negated => self.body.push(Expr::Not(Box::new(a), *span)),
                    Call::Atom(a) => self.body.push(a),
                }
                return;
            }
        }
        let mut lit = lit.clone();
        self.replace(&mut lit);
        self.body.push(lit);
    }

    /// Replaces each string call inside `e` by a fresh variable bound by its table atom.
    fn replace(&mut self, e: &mut Expr) {
        match e {
            Expr::Call { func, args, span } => {
                let Some(f) = StringFn::named(&func.text) else {
                    args.iter_mut().for_each(|a| self.replace(a));
                    return;
                };
                let span = *span;
                if f.returns() == Returns::Truth {
                    self.diags.push(
                        Diagnostic::error(codes::FORM, span, "`contains` is a condition, not a value")
                            .with_note("write it as a literal of the body: `contains(a, b)` or `not contains(a, b)`"),
                    );
                    *e = Expr::Number(Num::Int(0), span);
                    return;
                }
                let out = self.fresh_var("#str");
                let args = args.clone();
                *e = match self.call(SiteFn::String(f), &args, span, Some(out.clone())) {
                    Call::Folded(Some(v)) => value_expr(&v, span),
                    Call::Folded(None) => {
                        self.dead = true;
                        Expr::Number(Num::Int(0), span)
                    }
                    Call::Atom(a) => {
                        self.body.push(a);
                        var_expr(&out, span)
                    }
                };
            }
            Expr::Neg(x, _) | Expr::Not(x, _) => self.replace(x),
            Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => {
                self.replace(a);
                self.replace(b);
            }
            Expr::Term(fs, _) => fs.iter_mut().for_each(|(_, x)| self.replace(x)),
            Expr::Number(..) | Expr::Str(..) | Expr::Access(_) => {}
        }
    }

    /// Rewrites `out = value`, a computed value that becomes a column, into a value site.
    fn value_site(&mut self, value: &Expr, out: String, span: Span) {
        let mut e = value.clone();
        self.replace(&mut e);
        let mut cols: Vec<String> = Vec::new();
        let Some(f) = compile(&e, self.constants, &mut cols) else {
            self.diags.push(
                Diagnostic::error(
                    codes::FORM,
                    value.span(),
                    format!("`{out}` would hold a value computed here, which this form cannot make"),
                )
                .with_note("a computed column is arithmetic and functions of the rule's variables, numbers and tensor reads at variables or constants"),
            );
            self.dead = true;
            return;
        };
        if cols.is_empty() {
            if let Some(v) = f.constant() {
                match v.map(|v| v.and_then(Value::of_num)) {
                    Ok(Some(v)) => self.body.push(Expr::Compare(
                        CmpOp::Eq,
                        Box::new(var_expr(&out, span)),
                        Box::new(value_expr(&v, value.span())),
                        span,
                    )),
                    Ok(None) => self.dead = true,
                    Err(_) => {
                        self.diags.push(Diagnostic::error(
                            codes::VALUE_OVERFLOW,
                            value.span(),
                            "this value leaves the i64 range: integers are exact, so an overflow is an error, never a wrap (§8)",
                        ));
                        self.dead = true;
                    }
                }
                return;
            }
        }
        let ranges = ranging_reads(&e, &cols, &self.atom_vars);
        let args = (0..cols.len()).map(SiteArg::Column).collect();
        if let Call::Atom(a) = self.site(SiteFn::Value(f), args, cols, span, Some(out)) {
            self.body.push(a);
            if let Some(me) = self.locals.last_mut() {
                me.ranges = ranges;
            }
        }
    }

    fn fresh_var(&mut self, prefix: &str) -> String {
        self.fresh += 1;
        format!("{prefix}{}", self.fresh)
    }

    /// Rewrites a call whose result `out` is bound to (none for `contains`).
    fn call(&mut self, func: SiteFn, args: &[Expr], span: Span, out: Option<String>) -> Call {
        let f = match &func {
            SiteFn::String(f) => *f,
            SiteFn::Value(_) => return self.site(func, Vec::new(), Vec::new(), span, out),
        };
        if !f.takes(args.len()) {
            self.diags.push(
                Diagnostic::error(
                    codes::ARITY,
                    span,
                    format!(
                        "`{}` takes {}, not {}",
                        f.name(),
                        f.arity_text(),
                        args.len()
                    ),
                )
                .with_label("called here"),
            );
            return Call::Folded(None);
        }
        let args: Vec<Arg> = args.iter().map(|a| self.argument(a)).collect();
        if args.iter().all(|a| matches!(a, Arg::Const(_))) {
            let values: Vec<Value> = args
                .into_iter()
                .filter_map(|a| match a {
                    Arg::Const(v) => Some(v),
                    Arg::Var(_) | Arg::Arith(_) => None,
                })
                .collect();
            return match f.apply(&values) {
                Ok(v) => Call::Folded(v),
                Err(msg) => {
                    self.diags
                        .push(Diagnostic::error(codes::TYPE, span, msg).with_label("called here"));
                    Call::Folded(None)
                }
            };
        }
        let mut cols: Vec<String> = Vec::new();
        let mut column = |v: String| match cols.iter().position(|c| *c == v) {
            Some(c) => c,
            None => {
                cols.push(v);
                cols.len() - 1
            }
        };
        let site_args = args
            .into_iter()
            .map(|a| match a {
                Arg::Const(v) => SiteArg::Const(v),
                Arg::Var(v) => SiteArg::Column(column(v)),
                Arg::Arith(i) => {
                    let mut names: Vec<String> = Vec::new();
                    index_names_ordered(&i, &mut names);
                    let at: HashMap<String, usize> =
                        names.into_iter().map(|n| (n.clone(), column(n))).collect();
                    SiteArg::Arith(columns_of(&i, &at))
                }
            })
            .collect();
        self.site(func, site_args, cols, span, out)
    }

    /// Adds a site on argument columns `cols` whose result `out` is bound to.
    fn site(
        &mut self,
        func: SiteFn,
        site_args: Vec<SiteArg>,
        cols: Vec<String>,
        span: Span,
        out: Option<String>,
    ) -> Call {
        // A result equal to a variable bound elsewhere (by an atom, or one of its own
        // arguments) is compared with it instead.
        let out = match out {
            Some(v) if cols.contains(&v) || self.atom_vars.contains(&v) => {
                let fresh = self.fresh_var("#str");
                self.body.push(Expr::Compare(
                    CmpOp::Eq,
                    Box::new(var_expr(&v, span)),
                    Box::new(var_expr(&fresh, span)),
                    span,
                ));
                Some(fresh)
            }
            other => other,
        };
        let site = self.sites.len();
        let table = format!("#{}_{site}", func.name());
        self.sites.push(StringSite {
            func,
            args: site_args,
            ask: format!("{ASK}{site}"),
            table: table.clone(),
            span,
        });
        let indices = cols
            .iter()
            .chain(out.iter())
            .map(|v| name_index(v, span))
            .collect();
        self.locals.push(Local {
            site,
            out,
            cols,
            ranges: Vec::new(),
        });
        Call::Atom(Expr::Access(atom(&table, indices, span)))
    }

    fn argument(&mut self, e: &Expr) -> Arg {
        let span = e.span();
        // Nested calls first: a call on constants leaves its value.
        let mut e = e.clone();
        self.replace(&mut e);
        match peel(&e) {
            Expr::Str(s, _) => return Arg::Const(Value::Sym(s.clone())),
            Expr::Number(Num::Int(v), _) => return Arg::Const(Value::Int(*v)),
            Expr::Number(Num::Real(v), _) if v.fract() == 0.0 && v.abs() < 9.0e15 => {
                return Arg::Const(Value::Int(*v as i64))
            }
            Expr::Access(a) if a.brackets == Brackets::None && a.indices.is_empty() => {
                let t = &a.name.text;
                if t.starts_with(char::is_uppercase) && !self.constants.contains(t) {
                    return Arg::Const(Value::Sym(t.clone()));
                }
            }
            _ => {}
        }
        if let Some(v) = variable(&e, self.constants) {
            return Arg::Var(v);
        }
        if let Some(i) = super::bindings::as_index(&e) {
            let mut names = HashSet::new();
            names_in_index(&i, &mut names);
            let var = |n: &String| {
                n.starts_with(|c: char| c.is_lowercase() || c == '#') && !self.constants.contains(n)
            };
            if names.is_empty() {
                return match columns_of(&i, &HashMap::new()).eval(&[]) {
                    Some(v) => Arg::Const(Value::Int(v)),
                    None => {
                        self.dead = true;
                        Arg::Const(Value::Int(0))
                    }
                };
            }
            if names.iter().all(var) {
                return Arg::Arith(i);
            }
        }
        let v = self.fresh_var("#arg");
        self.body.push(Expr::Compare(
            CmpOp::Eq,
            Box::new(var_expr(&v, span)),
            Box::new(e),
            span,
        ));
        Arg::Var(v)
    }

    /// The ask rule of each site of the rule.
    fn ask_rules(&self) -> Vec<Statement> {
        // Variables bound by a value (`v = e`, in no atom of the rule), and what from.
        let mut atom_vars = HashSet::new();
        for lit in &self.body {
            if let Expr::Access(a) = peel(lit) {
                if a.brackets != Brackets::None && !a.name.text.starts_with('#') {
                    a.indices
                        .iter()
                        .for_each(|i| names_in_index(i, &mut atom_vars));
                }
            }
        }
        let mut from: HashMap<String, HashSet<String>> = HashMap::new();
        for lit in &self.body {
            if let Expr::Compare(CmpOp::Eq, l, r, _) = peel(lit) {
                for (var, value) in [(l, r), (r, l)] {
                    if let Some(v) = variable(var, self.constants) {
                        if !atom_vars.contains(&v) {
                            expr_names(value, from.entry(v).or_default());
                        }
                    }
                }
            }
        }
        for l in &self.locals {
            if let Some(o) = &l.out {
                from.entry(o.clone())
                    .or_default()
                    .extend(l.cols.iter().cloned());
            }
        }
        self.locals
            .iter()
            .map(|l| self.ask_rule(l, &from))
            .collect()
    }

    fn ask_rule(&self, me: &Local, from: &HashMap<String, HashSet<String>>) -> Statement {
        let span = self.sites[me.site].span;
        // What the arguments are computed from.
        let mut needed: HashSet<String> = HashSet::new();
        let mut stack: Vec<String> = me.cols.clone();
        while let Some(v) = stack.pop() {
            if needed.insert(v.clone()) {
                stack.extend(from.get(&v).into_iter().flatten().cloned());
            }
        }
        let ancestor = |l: &Local| l.out.as_ref().is_some_and(|o| needed.contains(o));
        // Everything that depends on a result the arguments do not need.
        let mut tainted: HashSet<String> = self
            .locals
            .iter()
            .filter(|l| !ancestor(l))
            .filter_map(|l| l.out.clone())
            .collect();
        loop {
            let before = tainted.len();
            for (v, srcs) in from {
                if !tainted.contains(v) && srcs.iter().any(|s| tainted.contains(s)) {
                    tainted.insert(v.clone());
                }
            }
            if tainted.len() == before {
                break;
            }
        }
        let tables: HashMap<&str, &Local> = self
            .locals
            .iter()
            .map(|l| (self.sites[l.site].table.as_str(), l))
            .collect();
        let mut body = Vec::new();
        for lit in &self.body {
            let (negated, atom_of) = match peel(lit) {
                Expr::Access(a) => (false, Some(a)),
                Expr::Not(x, _) => match peel(x) {
                    Expr::Access(a) => (true, Some(a)),
                    _ => (true, None),
                },
                _ => (false, None),
            };
            if let Some(a) = atom_of {
                if let Some(l) = tables.get(a.name.text.as_str()) {
                    if l.site != me.site && ancestor(l) {
                        body.push(lit.clone());
                    }
                    continue;
                }
                if !negated && a.brackets != Brackets::None {
                    if let Some(kept) = without(a, &tainted) {
                        body.push(Expr::Access(kept));
                    }
                    continue;
                }
            }
            let mut names = HashSet::new();
            expr_names(lit, &mut names);
            if names.is_disjoint(&tainted) {
                body.push(lit.clone());
            }
        }
        for lit in &me.ranges {
            let mut names = HashSet::new();
            expr_names(lit, &mut names);
            if names.is_disjoint(&tainted) {
                body.push(lit.clone());
            }
        }
        let head = atom(
            &self.sites[me.site].ask,
            me.cols.iter().map(|v| name_index(v, span)).collect(),
            span,
        );
        Statement {
            kind: StmtKind::Rule { head, body },
            span,
        }
    }
}

/// For each tensor read in a value site's expression `e` at a column no atom of the rule
/// binds, the literal `R[i] == R[i]`: it reads `R` where the value does, so it ranges those
/// columns over `R`'s axes as the read ranged them in the rule (it fails only where the
/// element is NaN, where the value has none either).
fn ranging_reads(e: &Expr, cols: &[String], atom_vars: &HashSet<String>) -> Vec<Expr> {
    let mut out = Vec::new();
    let mut visit = |a: &Access| {
        let mut names = HashSet::new();
        a.indices.iter().for_each(|i| names_in_index(i, &mut names));
        let ranges = names
            .iter()
            .any(|n| cols.contains(n) && !atom_vars.contains(n));
        if ranges {
            let read = Box::new(Expr::Access(a.clone()));
            out.push(Expr::Compare(CmpOp::Eq, read.clone(), read, a.span));
        }
    };
    each_read(e, &mut visit);
    out
}

/// Calls `f` on every tensor read (an access with brackets) in `e`.
fn each_read(e: &Expr, f: &mut impl FnMut(&Access)) {
    match e {
        Expr::Access(a) if a.brackets != Brackets::None => f(a),
        Expr::Neg(x, _) | Expr::Not(x, _) => each_read(x, f),
        Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => {
            each_read(a, f);
            each_read(b, f);
        }
        Expr::Term(fs, _) => fs.iter().for_each(|(_, x)| each_read(x, f)),
        Expr::Call { args, .. } => args.iter().for_each(|x| each_read(x, f)),
        Expr::Access(_) | Expr::Number(..) | Expr::Str(..) => {}
    }
}

/// An atom with its tainted variables made anonymous, or `None` when one is inside
/// arithmetic (the atom then constrains nothing the ask can use).
fn without(a: &Access, tainted: &HashSet<String>) -> Option<Access> {
    let mut a = a.clone();
    for i in &mut a.indices {
        let mut names = HashSet::new();
        names_in_index(i, &mut names);
        if names.is_disjoint(tainted) {
            continue;
        }
        match i {
            Index::Name(n) => n.text = super::lower::ANONYMOUS.to_string(),
            _ => return None,
        }
    }
    Some(a)
}

/// Reports a string call outside a rule and replaces it, so that checking goes on.
fn refuse_calls(e: &mut Expr, diags: &mut Vec<Diagnostic>) {
    match e {
        Expr::Call { func, args, span } if StringFn::named(&func.text).is_some() => {
            diags.push(
                Diagnostic::error(
                    codes::FORM,
                    *span,
                    format!("`{}` works on the symbols of relations: call it in a rule", func.text),
                )
                .with_note("compute it in a rule (`L(s, n) :- Word(s), n = strlen(s).`) and read that relation here"),
            );
            *e = Expr::Number(Num::Int(0), *span);
        }
        Expr::Call { args, .. } => args.iter_mut().for_each(|a| refuse_calls(a, diags)),
        Expr::Neg(x, _) | Expr::Not(x, _) => refuse_calls(x, diags),
        Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => {
            refuse_calls(a, diags);
            refuse_calls(b, diags);
        }
        Expr::Term(fs, _) => fs.iter_mut().for_each(|(_, x)| refuse_calls(x, diags)),
        Expr::Number(..) | Expr::Str(..) | Expr::Access(_) => {}
    }
}

/// Whether rule `st` computes a value that becomes a column, at one of `computed`.
fn computes(st: &Statement, computed: &HashSet<Span>) -> bool {
    if computed.is_empty() {
        return false;
    }
    let StmtKind::Rule { head, body } = &st.kind else {
        return false;
    };
    let mut spans = HashSet::new();
    for i in &head.indices {
        if let Index::Name(n) = i {
            spans.insert(n.span);
        }
        arith_spans(i, &mut spans);
    }
    for lit in body {
        expr_spans(lit, &mut spans);
    }
    !spans.is_disjoint(computed)
}

/// The spans of `i` and the index arithmetic inside it.
fn arith_spans(i: &Index, out: &mut HashSet<Span>) {
    if let Index::Arith(a, _, b, span) = i {
        out.insert(*span);
        arith_spans(a, out);
        arith_spans(b, out);
    }
}

/// The spans of the operands of `e`'s equalities and of its atoms' index arithmetic.
fn expr_spans(e: &Expr, out: &mut HashSet<Span>) {
    match e {
        Expr::Access(a) => a.indices.iter().for_each(|i| arith_spans(i, out)),
        Expr::Compare(_, a, b, _) => {
            for x in [a, b] {
                out.insert(x.span());
                out.insert(peel(x).span());
                expr_spans(x, out);
            }
        }
        Expr::Neg(x, _) | Expr::Not(x, _) => expr_spans(x, out),
        Expr::Binary(_, a, b, _) => {
            expr_spans(a, out);
            expr_spans(b, out);
        }
        Expr::Term(fs, _) => fs.iter().for_each(|(_, x)| expr_spans(x, out)),
        Expr::Call { args, .. } => args.iter().for_each(|x| expr_spans(x, out)),
        Expr::Number(..) | Expr::Str(..) => {}
    }
}

/// The rule with each index arithmetic at `computed` (over real values, in its head or
/// an atom) replaced by a fresh variable and a body literal binding it, which then becomes
/// a value site: `Double(x, p * 2) :- Price(x, p)` is
/// `Double(x, #lift1) :- Price(x, p), #lift1 = p * 2`.
fn lift_computed(head: &Access, body: &[Expr], computed: &HashSet<Span>) -> (Access, Vec<Expr>) {
    let mut bindings = Vec::new();
    let mut head = head.clone();
    for i in &mut head.indices {
        lift_head_variable(i, computed, &mut bindings);
    }
    let mut lift = |a: &mut Access| {
        for i in &mut a.indices {
            lift_index(i, computed, &mut bindings);
        }
    };
    lift(&mut head);
    let mut body: Vec<Expr> = body.to_vec();
    for lit in &mut body {
        match peel_mut(lit) {
            Expr::Access(a) => lift(a),
            Expr::Not(x, _) => {
                if let Expr::Access(a) = peel_mut(x) {
                    lift(a);
                }
            }
            _ => {}
        }
    }
    body.extend(bindings);
    (head, body)
}

/// [`peel`], for rewriting.
fn peel_mut(e: &mut Expr) -> &mut Expr {
    if !matches!(e, Expr::Term(fs, _) if fs.len() == 1 && !fs[0].0) {
        return e;
    }
    match e {
        Expr::Term(fs, _) => peel_mut(&mut fs[0].1),
        other => other,
    }
}

/// Lifts a head's bare variable at `computed` (a copy of positions into an open column
/// that computes values, `head_links.rs`) the way [`lift_index`] lifts arithmetic.
fn lift_head_variable(i: &mut Index, computed: &HashSet<Span>, bindings: &mut Vec<Expr>) {
    if matches!(i, Index::Name(n) if computed.contains(&n.span)) {
        lift_into_binding(i, bindings);
    }
}

fn lift_index(i: &mut Index, computed: &HashSet<Span>, bindings: &mut Vec<Expr>) {
    let Index::Arith(a, _, b, span) = i else {
        return;
    };
    if !computed.contains(span) {
        lift_index(a, computed, bindings);
        lift_index(b, computed, bindings);
        return;
    }
    lift_into_binding(i, bindings);
}

/// Replaces `i` by a fresh variable and adds the literal binding it to `i`'s value.
fn lift_into_binding(i: &mut Index, bindings: &mut Vec<Expr>) {
    let span = i.span();
    let var = format!("#lift{}", bindings.len() + 1);
    let value = super::bindings::index_as_expr(i);
    bindings.push(Expr::Compare(
        CmpOp::Eq,
        Box::new(var_expr(&var, span)),
        Box::new(value),
        span,
    ));
    *i = name_index(&var, span);
}

/// `e` as a value site's function; its variables, in order, are the site's columns.
/// `None` where `e` has a part a site cannot compute (a comparison, a symbol, a read at
/// index arithmetic).
fn compile(e: &Expr, constants: &HashSet<String>, cols: &mut Vec<String>) -> Option<ValueFn> {
    let column = |v: &str, cols: &mut Vec<String>| match cols.iter().position(|c| c == v) {
        Some(c) => c,
        None => {
            cols.push(v.to_string());
            cols.len() - 1
        }
    };
    Some(match e {
        Expr::Number(v, _) => ValueFn::Const(*v),
        Expr::Access(a) if a.brackets == Brackets::None && a.indices.is_empty() => {
            let t = &a.name.text;
            if constants.contains(t) {
                ValueFn::Scalar(t.clone())
            } else if variable(e, constants).is_some() {
                ValueFn::Arg(column(t, cols))
            } else {
                ValueFn::Read(t.clone(), Vec::new())
            }
        }
        Expr::Access(a) if a.brackets != Brackets::None => {
            let mut index = Vec::with_capacity(a.indices.len());
            for i in &a.indices {
                index.push(match i {
                    Index::Name(n) if constants.contains(&n.text) => return None,
                    Index::Name(n) if n.text.starts_with(char::is_uppercase) => {
                        ReadIndex::Const(Value::Sym(n.text.clone()))
                    }
                    Index::Name(n) => ReadIndex::Arg(column(&n.text, cols)),
                    Index::Str(s, _) => ReadIndex::Const(Value::Sym(s.clone())),
                    Index::Int(v, _) => ReadIndex::Const(Value::Int(*v)),
                    Index::Real(v, _) => ReadIndex::Const(Value::of_number(*v)?),
                    _ => return None,
                });
            }
            ValueFn::Read(a.name.text.clone(), index)
        }
        Expr::Neg(x, _) => ValueFn::Neg(Box::new(compile(x, constants, cols)?)),
        Expr::Binary(op, a, b, _) => ValueFn::Binary(
            *op,
            Box::new(compile(a, constants, cols)?),
            Box::new(compile(b, constants, cols)?),
        ),
        Expr::Term(fs, _) => {
            let mut out = Vec::with_capacity(fs.len());
            for (div, f) in fs {
                out.push((*div, compile(f, constants, cols)?));
            }
            ValueFn::Product(out)
        }
        Expr::Call { func, args, .. } => {
            let (b, arities) = crate::functions::builtin(&func.text)?;
            if !arities.contains(&args.len()) {
                return None;
            }
            let mut xs = Vec::with_capacity(args.len());
            for x in args {
                xs.push(compile(x, constants, cols)?);
            }
            ValueFn::Call(b, xs)
        }
        Expr::Access(_) | Expr::Str(..) | Expr::Not(..) | Expr::Compare(..) => return None,
    })
}

fn mentions_call(st: &Statement) -> bool {
    match &st.kind {
        StmtKind::Rule { body, .. } => body.iter().any(expr_calls),
        StmtKind::Equation { rhs, .. } => expr_calls(rhs),
        _ => false,
    }
}

fn expr_calls(e: &Expr) -> bool {
    match e {
        Expr::Call { func, args, .. } => {
            StringFn::named(&func.text).is_some() || args.iter().any(expr_calls)
        }
        Expr::Neg(x, _) | Expr::Not(x, _) => expr_calls(x),
        Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => expr_calls(a) || expr_calls(b),
        Expr::Term(fs, _) => fs.iter().any(|(_, x)| expr_calls(x)),
        Expr::Number(..) | Expr::Str(..) | Expr::Access(_) => false,
    }
}

/// Every name `e` uses, as a value or in an index.
fn expr_names(e: &Expr, out: &mut HashSet<String>) {
    indices_in_expr(e, out);
    value_names(e, out);
}

/// The names of an index expression, in order of first appearance.
fn index_names_ordered(i: &Index, out: &mut Vec<String>) {
    match i {
        Index::Name(n) if !out.contains(&n.text) => out.push(n.text.clone()),
        Index::Arith(a, _, b, _) => {
            index_names_ordered(a, out);
            index_names_ordered(b, out);
        }
        _ => {}
    }
}

/// Index arithmetic with its variables replaced by the columns they are.
fn columns_of(i: &Index, at: &HashMap<String, usize>) -> IndexFn {
    match i {
        Index::Name(n) => IndexFn::Var(at.get(&n.text).copied().unwrap_or(0)),
        Index::Int(v, _) => IndexFn::Const(*v),
        Index::Arith(a, op, b, _) => IndexFn::Arith(
            Box::new(columns_of(a, at)),
            *op,
            Box::new(columns_of(b, at)),
        ),
        _ => IndexFn::Const(0),
    }
}

fn name_index(v: &str, span: Span) -> Index {
    Index::Name(Name {
        text: v.to_string(),
        span,
    })
}

fn var_expr(v: &str, span: Span) -> Expr {
    Expr::Access(Access {
        name: Name {
            text: v.to_string(),
            span,
        },
        brackets: Brackets::None,
        indices: Vec::new(),
        span,
    })
}

fn value_expr(v: &Value, span: Span) -> Expr {
    match v {
        Value::Int(n) => Expr::Number(Num::Int(*n), span),
        Value::Real(s) => Expr::Number(Num::Real(s.parse().unwrap_or(f64::NAN)), span),
        Value::Sym(s) => Expr::Str(s.clone(), span),
    }
}

fn atom(name: &str, indices: Vec<Index>, span: Span) -> Access {
    Access {
        name: Name {
            text: name.to_string(),
            span,
        },
        brackets: Brackets::Paren,
        indices,
        span,
    }
}

/// A literal that never holds.
fn never(span: Span) -> Expr {
    Expr::Compare(
        CmpOp::Eq,
        Box::new(Expr::Number(Num::Int(0), span)),
        Box::new(Expr::Number(Num::Int(1), span)),
        span,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the atoms in each rule body of `src` once rewritten, by head name.
    fn bodies(src: &str) -> Vec<(String, Vec<String>)> {
        let (program, errors) = crate::syntax::parse(src, crate::functions::BUILTINS);
        assert!(errors.is_empty(), "{errors:?}");
        let r = rewrite(
            &program,
            &HashSet::new(),
            &StringTables::default(),
            &HashSet::new(),
        )
        .unwrap();
        assert!(r.diags.is_empty());
        r.program
            .statements
            .iter()
            .filter_map(|st| match &st.kind {
                StmtKind::Rule { head, body } => Some((
                    head.name.text.clone(),
                    body.iter()
                        .map(|e| match peel(e) {
                            Expr::Access(a) => a.name.text.clone(),
                            Expr::Not(x, _) => match peel(x) {
                                Expr::Access(a) => format!("not {}", a.name.text),
                                _ => "not".into(),
                            },
                            _ => "condition".into(),
                        })
                        .collect(),
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_ask_keeps_what_its_arguments_need_and_not_what_depends_on_its_result() {
        let got = bodies(
            "Full(z) :- First(x), Last(y), z = cat(x, \" \", y), strlen(z) < 5, not Bad(z).",
        );
        let want: Vec<(String, Vec<String>)> = vec![
            (
                "Full".into(),
                vec![
                    "First",
                    "Last",
                    "#cat_0",
                    "#strlen_1",
                    "condition",
                    "not Bad",
                ]
                .into_iter()
                .map(String::from)
                .collect(),
            ),
            // cat's arguments need neither strlen's result nor the tests on `z`.
            ("#ask_0".into(), vec!["First".into(), "Last".into()]),
            // strlen's argument is cat's result: its ask joins cat's table, and keeps the
            // test on `z` that does not need strlen's result.
            (
                "#ask_1".into(),
                vec!["First", "Last", "#cat_0", "not Bad"]
                    .into_iter()
                    .map(String::from)
                    .collect(),
            ),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_call_on_constants_is_computed_and_an_undefined_one_makes_the_rule_never_hold() {
        let got =
            bodies("A(x) :- B(x), x = cat(\"a\", \"b\").\nC(x) :- B(x), to_number(\"q\") == 1.");
        assert_eq!(got[0], ("A".into(), vec!["B".into(), "condition".into()]));
        assert_eq!(
            got[1],
            (
                "C".into(),
                vec!["B".into(), "condition".into(), "condition".into()]
            )
        );
    }
}
