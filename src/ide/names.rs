//! Where each tensor, domain and scalar constant is written: the index that go to
//! definition, find references, hover and document symbols read.
//!
//! It is built from the syntax tree alone, so it exists even where the program does not
//! check. A bare name is a tensor, a constant or a domain only where the program says so
//! somewhere (a definition, a bracketed access, a declaration); otherwise it is a variable
//! or a symbol, which the index leaves out.

use crate::diagnostics::Span;
use crate::syntax::ast::{Access, Brackets, Dim, Expr, Index, Program, StmtKind};
use std::collections::HashSet;

/// What a name stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NameKind {
    /// A tensor (Boolean, integer or real).
    Tensor,
    /// A declared domain (`Person : {Alice, Bob}`, `Hidden : 64`).
    Domain,
    /// A scalar constant (`N = 3`).
    Constant,
}

/// One place a name is written.
#[derive(Clone, Debug, PartialEq)]
pub struct Occurrence {
    /// The name.
    pub name: String,
    /// What it stands for.
    pub kind: NameKind,
    /// The name's own bytes.
    pub span: Span,
    /// Whether this place gives it elements, a value, a declaration or a definition.
    pub defines: bool,
    /// The statement it is in.
    pub statement: usize,
}

/// Every occurrence, in source order.
#[derive(Clone, Debug, Default)]
pub struct NameIndex {
    /// The occurrences, sorted by position.
    pub occurrences: Vec<Occurrence>,
}

/// Names as written before they are resolved: the candidates and what they could be.
#[derive(Default)]
struct Collect {
    found: Vec<(String, Span, bool, usize, Role)>,
    tensors: HashSet<String>,
    domains: HashSet<String>,
    constants: HashSet<String>,
}

/// How a name was written, which decides what it can be.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// Certainly this kind.
    Is(NameKind),
    /// A bare name on a right-hand side: a tensor or a constant if one is defined.
    Bare,
    /// An index: a constant if one is defined, else a variable or symbol.
    InIndex,
    /// A declaration's axis: a domain or a constant.
    Axis,
}

impl NameIndex {
    /// The index of a parsed program.
    pub fn new(program: &Program) -> NameIndex {
        let mut c = Collect::default();
        for (i, st) in program.statements.iter().enumerate() {
            c.statement(i, &st.kind);
        }
        let mut occurrences: Vec<Occurrence> = c
            .found
            .iter()
            .filter_map(|(name, span, defines, statement, role)| {
                let kind = c.resolve(name, *role)?;
                Some(Occurrence {
                    name: name.clone(),
                    kind,
                    span: *span,
                    defines: *defines,
                    statement: *statement,
                })
            })
            .collect();
        occurrences.sort_by_key(|o| (o.span.start, o.span.end));
        occurrences.dedup_by(|a, b| a.span == b.span);
        NameIndex { occurrences }
    }

    /// The occurrence under byte `offset` (its end counts, where an editor's caret sits
    /// after a name).
    pub fn at(&self, offset: usize) -> Option<&Occurrence> {
        self.occurrences
            .iter()
            .find(|o| o.span.start <= offset && offset <= o.span.end)
    }

    /// Every occurrence of `name` as `kind`.
    pub fn of<'a>(
        &'a self,
        name: &'a str,
        kind: NameKind,
    ) -> impl Iterator<Item = &'a Occurrence> + 'a {
        self.occurrences
            .iter()
            .filter(move |o| o.name == name && o.kind == kind)
    }
}

impl Collect {
    fn resolve(&self, name: &str, role: Role) -> Option<NameKind> {
        match role {
            Role::Is(k) => Some(k),
            Role::Bare if self.constants.contains(name) => Some(NameKind::Constant),
            Role::Bare if self.tensors.contains(name) => Some(NameKind::Tensor),
            Role::InIndex | Role::Axis if self.constants.contains(name) => Some(NameKind::Constant),
            Role::Axis if self.domains.contains(name) => Some(NameKind::Domain),
            _ => None,
        }
    }

    fn push(&mut self, name: &crate::syntax::ast::Name, defines: bool, st: usize, role: Role) {
        match role {
            Role::Is(NameKind::Tensor) => self.tensors.insert(name.text.clone()),
            Role::Is(NameKind::Domain) => self.domains.insert(name.text.clone()),
            Role::Is(NameKind::Constant) => self.constants.insert(name.text.clone()),
            _ => false,
        };
        self.found
            .push((name.text.clone(), name.span, defines, st, role));
    }

    fn statement(&mut self, i: usize, kind: &StmtKind) {
        let tensor = Role::Is(NameKind::Tensor);
        match kind {
            StmtKind::Equation { lhs, rhs, .. } => {
                self.access(lhs, true, i);
                self.expr(rhs, i);
            }
            StmtKind::Rule { head, body } => {
                self.access(head, true, i);
                body.iter().for_each(|e| self.expr(e, i));
            }
            StmtKind::Fact(a) => self.access(a, true, i),
            StmtKind::Literal { name, .. } | StmtKind::FileRead { name, .. } => {
                self.push(name, true, i, tensor)
            }
            StmtKind::Scalar { name, .. } => self.push(name, true, i, Role::Is(NameKind::Constant)),
            StmtKind::Declaration { name, dims, .. } => {
                self.push(name, true, i, tensor);
                for d in dims {
                    if let Dim::Named(n) = d {
                        self.push(n, false, i, Role::Axis);
                    }
                }
            }
            StmtKind::Domain { name, .. } => self.push(name, true, i, Role::Is(NameKind::Domain)),
            StmtKind::Init { name, args, .. } => {
                self.push(name, true, i, tensor);
                args.iter().for_each(|e| self.expr(e, i));
            }
            StmtKind::FileWrite { name, .. } => self.push(name, false, i, tensor),
            StmtKind::Query(a) => self.access(a, false, i),
        }
    }

    fn access(&mut self, a: &Access, defines: bool, i: usize) {
        let role = match a.brackets {
            Brackets::None if !defines => Role::Bare,
            _ => Role::Is(NameKind::Tensor),
        };
        self.push(&a.name, defines, i, role);
        a.indices.iter().for_each(|x| self.index(x, i));
    }

    fn index(&mut self, x: &Index, i: usize) {
        match x {
            Index::Name(n) => self.push(n, false, i, Role::InIndex),
            Index::Arith(a, _, b, _) => {
                self.index(a, i);
                self.index(b, i);
            }
            Index::Virtual(x, _) => self.index(x, i),
            Index::Normalized(_)
            | Index::Int(..)
            | Index::Str(..)
            | Index::Real(..)
            | Index::Slice(..) => {}
        }
    }

    fn expr(&mut self, e: &Expr, i: usize) {
        match e {
            Expr::Access(a) => self.access(a, false, i),
            Expr::Call { args, .. } => args.iter().for_each(|a| self.expr(a, i)),
            Expr::Neg(x, _) | Expr::Not(x, _) => self.expr(x, i),
            Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => {
                self.expr(a, i);
                self.expr(b, i);
            }
            Expr::Term(fs, _) => fs.iter().for_each(|(_, f)| self.expr(f, i)),
            Expr::Number(..) | Expr::Str(..) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(src: &str) -> NameIndex {
        let (p, errors) = crate::syntax::parse(src, crate::functions::BUILTINS);
        assert!(errors.is_empty(), "{errors:?}");
        NameIndex::new(&p)
    }

    #[test]
    fn tensors_constants_and_domains_are_told_apart_from_variables() {
        let src =
            "N = 3\nHidden : 4\nW : real[Hidden, N]\nY[i] = W[i, j] X[j] + N\nX = [1, 2, 3]\n";
        let ix = index(src);
        let kinds = |name: &str| -> Vec<(NameKind, bool)> {
            ix.occurrences
                .iter()
                .filter(|o| o.name == name)
                .map(|o| (o.kind, o.defines))
                .collect()
        };
        assert_eq!(
            kinds("N"),
            vec![
                (NameKind::Constant, true),
                (NameKind::Constant, false),
                (NameKind::Constant, false)
            ]
        );
        assert_eq!(
            kinds("Hidden"),
            vec![(NameKind::Domain, true), (NameKind::Domain, false)]
        );
        assert_eq!(
            kinds("X"),
            vec![(NameKind::Tensor, false), (NameKind::Tensor, true)]
        );
        assert!(kinds("i").is_empty() && kinds("j").is_empty());
        let at = src.find("W[i").unwrap_or(0) + 1;
        assert_eq!(ix.at(at).map(|o| o.name.as_str()), Some("W"));
    }
}
