//! Document symbols: an outline of the program, one entry per tensor with the statements
//! that define it beneath, then domains, constants and queries.

use super::Analysis;
use crate::diagnostics::Span;
use crate::syntax::ast::{Name, StmtKind};

/// What an outline entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolKind {
    /// A tensor; its children are the statements that define it.
    Tensor,
    /// A rule `H(x) :- ...`.
    Rule,
    /// An equation `Y[i] = ...`.
    Equation,
    /// Facts, a literal, a file read, a declaration or an initialisation.
    Data,
    /// A domain.
    Domain,
    /// A scalar constant.
    Constant,
    /// A query.
    Query,
}

/// One entry of the outline.
#[derive(Clone, Debug)]
pub struct Symbol {
    /// Its name as shown.
    pub name: String,
    /// A short description (the statement's text, shortened).
    pub detail: String,
    /// What it is.
    pub kind: SymbolKind,
    /// All of it.
    pub span: Span,
    /// The part to select: its name.
    pub selection: Span,
    /// Entries beneath it.
    pub children: Vec<Symbol>,
}

/// Characters of a statement shown as an entry's detail.
const DETAIL: usize = 80;

impl Analysis {
    /// The outline, in the order things first appear.
    pub fn symbols(&self) -> Vec<Symbol> {
        let mut out: Vec<Symbol> = Vec::new();
        for st in &self.program().statements {
            let text = shortened(self.source.get(st.span.start..st.span.end).unwrap_or(""));
            let entry = |kind, name: &Name| Symbol {
                name: name.text.clone(),
                detail: text.clone(),
                kind,
                span: st.span,
                selection: name.span,
                children: Vec::new(),
            };
            let (kind, name) = match &st.kind {
                StmtKind::Equation { lhs, .. } => (SymbolKind::Equation, &lhs.name),
                StmtKind::Rule { head, .. } => (SymbolKind::Rule, &head.name),
                StmtKind::Fact(a) => (SymbolKind::Data, &a.name),
                StmtKind::Literal { name, .. }
                | StmtKind::FileRead { name, .. }
                | StmtKind::Declaration { name, .. }
                | StmtKind::Init { name, .. } => (SymbolKind::Data, name),
                StmtKind::Domain { name, .. } => {
                    out.push(entry(SymbolKind::Domain, name));
                    continue;
                }
                StmtKind::Scalar { name, .. } => {
                    out.push(entry(SymbolKind::Constant, name));
                    continue;
                }
                StmtKind::Query(a) => {
                    out.push(Symbol {
                        name: text.clone(),
                        ..entry(SymbolKind::Query, &a.name)
                    });
                    continue;
                }
                StmtKind::FileWrite { .. } => continue,
            };
            let child = entry(kind, name);
            match out
                .iter_mut()
                .find(|s| s.kind == SymbolKind::Tensor && s.name == name.text)
            {
                Some(t) => {
                    t.span = t.span.to(st.span);
                    t.children.push(child);
                }
                None => out.push(Symbol {
                    detail: String::new(),
                    kind: SymbolKind::Tensor,
                    children: vec![child],
                    ..entry(SymbolKind::Tensor, name)
                }),
            }
        }
        out
    }
}

/// The statement on one line, cut at [`DETAIL`] characters.
fn shortened(text: &str) -> String {
    let one: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one.chars().count() > DETAIL {
        true => one.chars().take(DETAIL).chain(['…']).collect(),
        false => one,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_outline_groups_statements_under_their_tensor() {
        let src = "N = 2\nE(1, 2). E(2, 3).\nP(x, y) :- E(x, y).\nP(x, z) :- P(x, y), E(y, z).\nC = P(x, y)\nP(1, x)?\n";
        let a = Analysis::new(src, Path::new("."));
        let s = a.symbols();
        let names: Vec<(&str, SymbolKind, usize)> = s
            .iter()
            .map(|s| (s.name.as_str(), s.kind, s.children.len()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("N", SymbolKind::Constant, 0),
                ("E", SymbolKind::Tensor, 2),
                ("P", SymbolKind::Tensor, 2),
                ("C", SymbolKind::Tensor, 1),
                ("P(1, x)?", SymbolKind::Query, 0),
            ]
        );
        assert_eq!(s[2].children[1].kind, SymbolKind::Rule);
        assert_eq!(&src[s[2].selection.start..s[2].selection.end], "P");
    }
}
