//! `tl why`: where a fact or a value came from, read off the evaluated tensors.
//!
//! Nothing is recorded while evaluating (so evaluation costs what it did): a derivation is
//! found afterwards by instantiating the program's rules against the values the engine
//! computed, and a value's contributions by evaluating the terms of its equation there.
//! Every value shown is computed by the reference evaluator's expression code (`Cx`) over
//! those tensors, so an explanation is exactly as right as the values it reads.

mod absent;
mod by_fact;
mod facts;
mod join;
mod terms;

use crate::diagnostics::{codes, Diagnostic, Span};
use crate::eval::Cx;
use crate::eval::EvalOptions;
use crate::semantics::{Checked, Equation, Kind, Node, Query, QueryIndex};
use crate::syntax::ast::Program;
use crate::tensor::Tensor;
use std::fmt::Write;

/// What to show.
#[derive(Clone, Debug)]
pub struct WhyOptions {
    /// Terms shown per value (`--top`).
    pub top: usize,
    /// Levels of derived factors explained below a value, and of failing atoms below a
    /// fact that does not hold (`--depth`); a derivation tree of a fact is shown whole.
    pub depth: usize,
    /// Explain why a fact does not hold (`tl why --not`).
    pub not: bool,
}

impl Default for WhyOptions {
    fn default() -> Self {
        WhyOptions {
            top: 5,
            depth: 2,
            not: false,
        }
    }
}

/// One node of an explanation: a fact or a value, how it came to be, and what it rests on.
#[derive(Clone, Debug, PartialEq)]
pub struct WhyNode {
    /// The fact (`Ancestor(Alice, Dan)`) or element with its value (`Dist[A, C] = 12`).
    pub label: String,
    /// How: the rule with its variables bound and where it is, where a fact was given, a
    /// term's share of its sum, or why an atom fails.
    pub detail: String,
    /// What it rests on.
    pub children: Vec<WhyNode>,
}

impl WhyNode {
    fn leaf(label: String, detail: String) -> WhyNode {
        WhyNode {
            label,
            detail,
            children: Vec::new(),
        }
    }

    /// The tree as indented text, one node per line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        self.write_text(&mut out, "", "");
        out
    }

    fn write_text(&self, out: &mut String, first: &str, rest: &str) {
        let _ = write!(out, "{first}{}", self.label);
        if !self.detail.is_empty() {
            let _ = write!(out, "  ({})", self.detail);
        }
        out.push('\n');
        let n = self.children.len();
        for (i, c) in self.children.iter().enumerate() {
            let last = i + 1 == n;
            let (a, b) = if last {
                ("└─ ", "   ")
            } else {
                ("├─ ", "│  ")
            };
            c.write_text(out, &format!("{rest}{a}"), &format!("{rest}{b}"));
        }
    }

    /// The tree as JSON: `{"label", "detail", "children"}` at every node.
    pub fn json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    fn write_json(&self, out: &mut String) {
        let _ = write!(
            out,
            "{{\"label\":{},\"detail\":{},\"children\":[",
            quoted(&self.label),
            quoted(&self.detail)
        );
        for (i, c) in self.children.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            c.write_json(out);
        }
        out.push_str("]}");
    }

    /// The nodes in pre-order, each as its label, detail and parent's place in the list:
    /// a tree a host language can rebuild without recursion (a derivation may be thousands
    /// of levels deep).
    pub fn flatten(&self) -> Vec<(String, String, Option<usize>)> {
        let mut out = Vec::new();
        let mut stack: Vec<(&WhyNode, Option<usize>)> = vec![(self, None)];
        while let Some((n, parent)) = stack.pop() {
            let at = out.len();
            out.push((n.label.clone(), n.detail.clone(), parent));
            stack.extend(n.children.iter().rev().map(|c| (c, Some(at))));
        }
        out
    }

    /// How many levels deep the tree goes (a leaf is 0).
    pub fn height(&self) -> usize {
        self.children
            .iter()
            .map(|c| c.height() + 1)
            .max()
            .unwrap_or(0)
    }
}

/// A JSON string.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// What an explanation reads: the checked program, its source, and evaluated values.
pub(crate) struct Ctx<'a> {
    pub p: &'a Checked,
    pub values: &'a [Tensor],
    pub program: &'a Program,
    pub source: &'a str,
    pub file_name: &'a str,
    pub base_dir: &'a std::path::Path,
    pub options: &'a WhyOptions,
    /// Each derived tuple's round of first derivation, where the run recorded them
    /// (`--provenance`).
    pub rounds: Option<&'a crate::eval::Rounds>,
    eval: EvalOptions,
    indexes: join::Indexes,
    /// Each equation's body with its nested sums brought out ([`join::hoisted`]), made
    /// when an explanation first instantiates it.
    hoisted: Vec<std::cell::OnceCell<(Vec<usize>, Node)>>,
    /// Input files read so far: each row's fields (tab-joined) to its first line.
    rows: std::cell::RefCell<rustc_hash::FxHashMap<std::path::PathBuf, std::rc::Rc<Rows>>>,
}

/// A file's rows: fields joined by tabs, to the line (from 1) of the first such row.
type Rows = rustc_hash::FxHashMap<String, usize>;

impl<'a> Ctx<'a> {
    /// The reference evaluator's view of one equation over the evaluated values.
    fn cx(&'a self, eq: &'a Equation) -> Cx<'a> {
        Cx::new(self.p, eq, self.values, None, &self.eval)
    }

    /// `file:line` of a place in the program.
    fn at(&self, span: Span) -> String {
        let line = self.source.as_bytes()[..span.start.min(self.source.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        format!("{}:{}", self.file_name, line + 1)
    }

    /// An element as source writes it: `Parent(Ann, Bob)`, `Dist[A, C]`, `Total`.
    fn element(&self, t: usize, pos: &[u32]) -> String {
        let info = &self.p.tensors[t];
        if pos.is_empty() {
            return match info.kind {
                Kind::Bool => format!("{}()", info.name),
                _ => info.name.clone(),
            };
        }
        let labels: Vec<String> = pos
            .iter()
            .enumerate()
            .map(|(ax, &i)| crate::output::label(self.p, t, ax, i as usize, true))
            .collect();
        match info.kind {
            Kind::Bool => format!("{}({})", info.name, labels.join(", ")),
            _ => format!("{}[{}]", info.name, labels.join(", ")),
        }
    }

    /// The line (from 1) of the first row of a `.tsv`/`.csv` file whose fields are
    /// `labels` (each file read once per explanation).
    fn row_of(&self, path: &std::path::Path, labels: &[String]) -> Option<usize> {
        let rows = self.rows.borrow().get(path).cloned();
        let rows = match rows {
            Some(r) => r,
            None => {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                let mut map = Rows::default();
                for (i, line) in text.lines().enumerate() {
                    let fields: Vec<&str> = line.split(['\t', ',']).map(str::trim).collect();
                    map.entry(fields.join("\t")).or_insert(i + 1);
                }
                let map = std::rc::Rc::new(map);
                self.rows
                    .borrow_mut()
                    .insert(path.to_path_buf(), map.clone());
                map
            }
        };
        rows.get(&labels.join("\t")).copied()
    }

    /// Equation `k`'s summed variables and body with its nested sums brought out.
    fn hoisted(&self, k: usize) -> &(Vec<usize>, Node) {
        self.hoisted[k].get_or_init(|| join::hoisted(&self.p.equations[k]))
    }

    /// The round in which the run first derived fact `pos` of relation `t`, where it
    /// recorded one (0: held before its stratum's first round).
    fn round(&self, t: usize, pos: &[u32]) -> Option<u32> {
        let rounds = self.rounds?.get(&t)?;
        let crate::tensor::Storage::Relation(r) = &self.values.get(t)?.storage else {
            return None;
        };
        rounds.get(r.find(pos)?).copied()
    }

    /// The stratum (from 1, as `tl explain` numbers them) that computes tensor `t`.
    fn stratum_of(&self, t: usize) -> usize {
        self.p
            .strata
            .iter()
            .position(|s| s.tensors.contains(&t))
            .map_or(0, |k| k + 1)
    }
}

/// Explains the element a ground query names.
pub(crate) fn why(
    p: &Checked,
    (values, rounds): (&[Tensor], Option<&crate::eval::Rounds>),
    program: &Program,
    source: (&str, &str, &std::path::Path),
    query: &Query,
    options: &WhyOptions,
) -> Result<WhyNode, Diagnostic> {
    let mut pos = Vec::with_capacity(query.pattern.len());
    for q in &query.pattern {
        match q {
            QueryIndex::Fixed(i) => pos.push(*i as u32),
            QueryIndex::Var(_) => {
                let what = "`why` explains one fact or element: write constants, not variables";
                return Err(Diagnostic::error(codes::QUERY, query.span, what));
            }
            QueryIndex::Missing => {
                let what = "this element is outside the tensor's domains";
                return Err(Diagnostic::error(codes::QUERY, query.span, what));
            }
        }
    }
    let (file_name, text, base_dir) = source;
    let ctx = Ctx {
        p,
        values,
        program,
        source: text,
        file_name,
        base_dir,
        options,
        rounds,
        eval: EvalOptions::default(),
        indexes: join::Indexes::default(),
        hoisted: p.equations.iter().map(|_| Default::default()).collect(),
        rows: Default::default(),
    };
    match p.tensors[query.tensor].kind {
        Kind::Bool => facts::explain(&ctx, query.tensor, &pos, query.span),
        _ => terms::explain(&ctx, query.tensor, &pos, query.span),
    }
}
