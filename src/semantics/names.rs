//! Name resolution: which names are tensors, their arity, whether they are Boolean, what defines
//! them, and which capitalised names are scalar constants.

use super::{Ctx, Draft};
use crate::diagnostics::{codes, Diagnostic, Span};
use crate::syntax::ast::*;
use crate::tensor::ElemType;

/// How a name in an index position resolves.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum IndexName {
    /// An index variable.
    Var,
    /// A scalar constant with an integer value.
    Const(i64),
    /// A symbol.
    Symbol,
}

impl Ctx<'_> {
    /// Finds or creates the tensor `name`, first seen at `span`.
    pub(super) fn tensor_id(&mut self, name: &str, span: Span) -> usize {
        if let Some(&id) = self.by_name.get(name) {
            return id;
        }
        let id = self.tensors.len();
        self.tensors.push(Draft::new(name, span));
        self.by_name.insert(name.to_string(), id);
        id
    }

    /// Records the number of indices `name` is used with, reporting a mismatch.
    fn use_arity(&mut self, id: usize, arity: usize, span: Span) {
        let t = &mut self.tensors[id];
        match t.arity {
            None => t.arity = Some((arity, span)),
            Some((a, first)) if a != arity => {
                let name = t.name.clone();
                self.diags.push(
                    Diagnostic::error(
                        codes::ARITY,
                        span,
                        format!("`{name}` is used with {arity} indices here but {a} elsewhere"),
                    )
                    .with_secondary(first, format!("used with {a} indices here")),
                );
            }
            _ => {}
        }
    }

    fn mark_paren(&mut self, id: usize, span: Span) {
        if self.tensors[id].paren.is_none() {
            self.tensors[id].paren = Some(span);
        }
    }

    fn mark_real(&mut self, id: usize, span: Span) {
        if self.tensors[id].real.is_none() {
            self.tensors[id].real = Some(span);
        }
    }

    /// Resolves a name in an index position.
    pub(super) fn index_name(&self, name: &str) -> IndexName {
        if let Some(&v) = self.scalars.get(name) {
            if v.fract() == 0.0 {
                return IndexName::Const(v as i64);
            }
        }
        if name.starts_with(char::is_uppercase) {
            IndexName::Symbol
        } else {
            IndexName::Var
        }
    }

    /// First pass: scalar constants, so that index names can be resolved everywhere.
    pub(super) fn collect_scalars(&mut self) {
        for st in &self.program.statements {
            // Several definitions add up (§7), as any tensor's do (W0302 says so).
            if let StmtKind::Scalar { name, value, .. } = &st.kind {
                *self.scalars.entry(name.text.clone()).or_insert(0.0) += *value;
            }
        }
        for (name, value) in &self.input.settings.scalars {
            if !self.scalars.contains_key(name) {
                let mut known: Vec<&str> = self.scalars.keys().map(String::as_str).collect();
                known.sort_unstable();
                let note = match known.is_empty() {
                    true => "it has none; `--set` overrides a statement `NAME = number`".into(),
                    false => format!("its scalar constants: {}", known.join(", ")),
                };
                self.diags.push(
                    Diagnostic::global(
                        codes::UNKNOWN_TENSOR,
                        format!(
                            "`--set {name}={value}`: the program has no scalar constant `{name}`"
                        ),
                    )
                    .with_note(note),
                );
                continue;
            }
            self.scalars.insert(name.clone(), *value);
        }
    }

    /// Second pass: every tensor that is defined somewhere, with its arity and kind.
    pub(super) fn collect_definitions(&mut self) {
        let program = self.program;
        for (si, st) in program.statements.iter().enumerate() {
            self.define(si, &st.kind);
        }
        self.mark_bound();
        self.implicit_domains();
    }

    /// What statement `si` defines: a tensor's arity, kind, and where its equations,
    /// facts, data and declaration are.
    fn define(&mut self, si: usize, kind: &StmtKind) {
        match kind {
            StmtKind::Equation { lhs, rhs, .. } => self.define_equation(si, lhs, rhs),
            StmtKind::Rule { head, .. } => {
                self.check_not_function(&head.name);
                let id = self.tensor_id(&head.name.text, head.name.span);
                self.use_arity(id, head.indices.len(), head.span);
                self.mark_paren(id, head.span);
                self.tensors[id].equations.push(si);
            }
            StmtKind::Fact(a) => {
                self.check_not_function(&a.name);
                let id = self.tensor_id(&a.name.text, a.name.span);
                self.use_arity(id, a.indices.len(), a.span);
                if a.brackets == Brackets::Square {
                    self.diags.push(
                        Diagnostic::error(codes::FORM, a.span, format!("`{}[...]` on its own is not a statement", a.name.text))
                            .with_note("write a fact with parentheses, `R(A, B)`, or give a value, `T[A, B] = 1`"),
                    );
                }
                self.mark_paren(id, a.span);
                self.tensors[id].facts.push(si);
            }
            StmtKind::Literal { name, value } => {
                self.check_not_function(name);
                let id = self.tensor_id(&name.text, name.span);
                self.mark_real(id, name.span);
                self.use_arity(id, value.shape.len(), name.span);
                self.tensors[id].sources.push(si);
            }
            StmtKind::Scalar { name, .. } => {
                self.check_not_function(name);
                let id = self.tensor_id(&name.text, name.span);
                self.mark_real(id, name.span);
                self.use_arity(id, 0, name.span);
                self.tensors[id].sources.push(si);
            }
            StmtKind::Declaration { name, ty, dims } => self.declare(si, name, ty, dims),
            StmtKind::Init { name, .. } => {
                let id = self.tensor_id(&name.text, name.span);
                self.tensors[id].init = Some(si);
            }
            StmtKind::FileRead { name, .. } => {
                self.check_not_function(name);
                let id = self.tensor_id(&name.text, name.span);
                self.tensors[id].sources.push(si);
            }
            StmtKind::Domain { name, def } => self.declare_domain(name, def),
            StmtKind::FileWrite { .. } | StmtKind::Query(_) => {}
        }
    }

    /// An equation's target: an element statement (`W[2] = 0.5`) gives data, any other an
    /// equation.
    fn define_equation(&mut self, si: usize, lhs: &Access, rhs: &Expr) {
        self.check_not_function(&lhs.name);
        let id = self.tensor_id(&lhs.name.text, lhs.name.span);
        let arity = if lhs.brackets == Brackets::None && super::lower::has_slices(rhs) {
            slice_count(rhs)
        } else {
            axes(&lhs.indices)
        };
        self.use_arity(id, arity, lhs.span);
        if lhs.brackets == Brackets::Paren {
            self.mark_paren(id, lhs.span);
        } else {
            self.mark_real(id, lhs.span);
        }
        if element_value(rhs).is_some() && lhs.indices.iter().all(|i| self.is_constant(i)) {
            self.tensors[id].elements.push(si);
        } else {
            self.tensors[id].equations.push(si);
        }
    }

    /// A declaration's arity and type; a tensor declared twice is an error.
    fn declare(&mut self, si: usize, name: &Name, ty: &Name, dims: &[Dim]) {
        self.check_not_function(name);
        let id = self.tensor_id(&name.text, name.span);
        self.use_arity(id, dims.len(), name.span);
        match ElemType::parse(&ty.text, self.input.settings.real) {
            Some(ElemType::Bool) => self.mark_paren(id, ty.span),
            Some(elem) => {
                self.mark_real(id, ty.span);
                self.tensors[id].elem = Some(elem);
            }
            None => self.diags.push(
                Diagnostic::error(codes::TYPE, ty.span, format!("unknown type `{}`", ty.text))
                    .with_note("types are bool, int, real, f64, f32, bf16, f16, fp8 and i8"),
            ),
        }
        if self.tensors[id].declared.is_some() {
            self.diags.push(Diagnostic::error(
                codes::DECLARATION,
                name.span,
                format!("`{}` is declared twice", name.text),
            ));
        }
        self.tensors[id].declared = Some(si);
    }

    /// A named domain; one declared twice is an error.
    fn declare_domain(&mut self, name: &Name, def: &DomainDef) {
        if self.named_domains.contains_key(&name.text) {
            self.diags.push(Diagnostic::error(
                codes::DECLARATION,
                name.span,
                format!("domain `{}` is declared twice", name.text),
            ));
        }
        let size = match def {
            DomainDef::Size(n) => Some(*n),
            DomainDef::Symbols(_) => None,
        };
        self.named_domains.insert(
            name.text.clone(),
            super::NamedDomain {
                span: name.span,
                size,
                node: 0,
                implicit: false,
            },
        );
    }

    /// Tensors bound to data by the caller (from Python); a binding of a name the program
    /// does not mention is an error.
    fn mark_bound(&mut self) {
        let mentioned = mentioned_names(self.program);
        for name in self.input.bindings.keys() {
            if !mentioned.contains(name.as_str()) {
                self.diags.push(
                    Diagnostic::global(
                        codes::UNKNOWN_TENSOR,
                        format!(
                            "data is bound to `{name}`, but the program has no tensor `{name}`"
                        ),
                    )
                    .with_note("bind a tensor the program reads or defines"),
                );
                continue;
            }
            let id = self.tensor_id(name, Span::default());
            self.tensors[id].bound = true;
        }
    }

    /// A domain named in a tensor declaration but declared nowhere (`X : real[Example, 64]`)
    /// is a domain whose extent (or symbols) comes from the data, as §12's `--batch` example
    /// writes it.
    fn implicit_domains(&mut self) {
        for st in &self.program.statements {
            if let StmtKind::Declaration { dims, .. } = &st.kind {
                for d in dims {
                    if let Dim::Named(n) = d {
                        // A scalar constant of a whole value (`N = 512`) sizes the axes it
                        // names, as the domain `N : 512` would.
                        let size = self
                            .scalars
                            .get(&n.text)
                            .filter(|v| v.fract() == 0.0 && **v >= 0.0)
                            .map(|&v| v as usize);
                        self.named_domains
                            .entry(n.text.clone())
                            .or_insert(super::NamedDomain {
                                span: n.span,
                                size,
                                node: 0,
                                implicit: size.is_none(),
                            });
                    }
                }
            }
        }
    }

    fn check_not_function(&mut self, name: &Name) {
        if self.is_function(&name.text) {
            self.diags.push(Diagnostic::error(
                codes::TYPE,
                name.span,
                format!(
                    "`{}` is a function; tensors may not take a function's name",
                    name.text
                ),
            ));
        }
    }

    fn is_constant(&self, i: &Index) -> bool {
        match i {
            Index::Int(..) | Index::Str(..) => true,
            Index::Name(n) => self.index_name(&n.text) != IndexName::Var,
            _ => false,
        }
    }

    /// Third pass: reads on right-hand sides, queries and writes, checking every name.
    pub(super) fn collect_reads(&mut self) {
        let program = self.program;
        for st in &program.statements {
            match &st.kind {
                StmtKind::Equation { rhs, .. } => self.reads_in(rhs),
                StmtKind::Rule { body, .. } => body.iter().for_each(|e| self.reads_in(e)),
                StmtKind::Query(a) if self.known(&a.name) => self.read_access(a),
                StmtKind::FileWrite { name, .. } | StmtKind::Init { name, .. } => {
                    self.known(name);
                }
                _ => {}
            }
        }
        self.check_bare_reads();
    }

    /// A tensor with indices read by its bare name in an equation or rule (`Y = X` for a
    /// vector `X`) would read nothing (its zero-index element does not exist) and silently
    /// give 0: it is E0103, with the two likely meanings as a hint. A query `X?` asks
    /// every element and is fine.
    fn check_bare_reads(&mut self) {
        let program = self.program;
        let mut reads = Vec::new();
        for st in &program.statements {
            match &st.kind {
                StmtKind::Equation { rhs, .. } => rhs.accesses(&mut reads),
                StmtKind::Rule { body, .. } => body.iter().for_each(|e| e.accesses(&mut reads)),
                _ => {}
            }
        }
        for a in reads.into_iter().filter(|a| a.brackets == Brackets::None) {
            let Some(&id) = self.by_name.get(&a.name.text) else {
                continue;
            };
            let Some((n, first)) = self.tensors[id].arity.filter(|&(n, _)| n > 0) else {
                continue;
            };
            let name = &a.name.text;
            let vars: Vec<&str> = ["i", "j", "k", "l", "m", "n"].into_iter().take(n).collect();
            let vars = vars.join(", ");
            let s = if n == 1 { "" } else { "es" };
            self.diags.push(
                Diagnostic::error(
                    codes::ARITY,
                    a.span,
                    format!("`{name}` has {n} index{s} but is read here with none"),
                )
                .with_label("read without its indices")
                .with_secondary(first, format!("used with {n} index{s} here"))
                .with_note(format!(
                    "write its {what}: `… = {name}[{vars}]` sums over {them}, \
                     `Y[{vars}] = {name}[{vars}]` copies it",
                    what = if n == 1 { "index" } else { "indices" },
                    them = if n == 1 { "it" } else { "them" },
                )),
            );
        }
    }

    fn known(&mut self, name: &Name) -> bool {
        match self.by_name.get(&name.text) {
            Some(&id) if self.tensors[id].is_defined() => true,
            // A string call's table (§8) is defined while its results are still unknown.
            _ if super::strings::is_table(&name.text) => {
                let id = self.tensor_id(&name.text, name.span);
                self.tensors[id].bound = true;
                true
            }
            _ => {
                self.diags.push(
                    Diagnostic::error(
                        codes::UNKNOWN_TENSOR,
                        name.span,
                        format!("unknown tensor `{}`", name.text),
                    )
                    .with_label("not defined by data, an equation or a declaration"),
                );
                false
            }
        }
    }

    fn read_access(&mut self, a: &Access) {
        let Some(&id) = self.by_name.get(&a.name.text) else {
            return;
        };
        if a.brackets != Brackets::None {
            self.use_arity(id, axes(&a.indices), a.span);
        }
        if a.brackets == Brackets::Paren && self.tensors[id].paren.is_none() {
            self.tensors[id].paren = Some(a.span);
            self.tensors[id].paren_read = true;
        }
    }

    fn reads_in(&mut self, e: &Expr) {
        match e {
            Expr::Number(..) | Expr::Str(..) => {}
            Expr::Access(a) => {
                if a.brackets == Brackets::None && !self.by_name.contains_key(&a.name.text) {
                    // A variable used as a value, or a symbol in a comparison: checked when lowering.
                    return;
                }
                if self.known(&a.name) {
                    self.read_access(a);
                }
            }
            Expr::Call { func, args, .. } => {
                if !self.is_function(&func.text) {
                    self.diags.push(Diagnostic::error(
                        codes::UNKNOWN_FUNCTION,
                        func.span,
                        format!("unknown function `{}`", func.text),
                    ));
                }
                args.iter().for_each(|a| self.reads_in(a));
            }
            Expr::Neg(x, _) | Expr::Not(x, _) => self.reads_in(x),
            Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => {
                self.reads_in(a);
                self.reads_in(b);
            }
            Expr::Term(fs, _) => fs.iter().for_each(|(_, f)| self.reads_in(f)),
        }
    }

    /// Reports tensors that are both Boolean and real, at the read when parentheses on a read
    /// made it Boolean (the definition is then what the user meant).
    pub(super) fn check_kinds(&mut self) {
        for t in &self.tensors {
            let (Some(p), Some(r)) = (t.paren, t.real) else {
                continue;
            };
            let d = match t.paren_read {
                true => Diagnostic::error(
                    codes::TYPE,
                    p,
                    format!("`{}` is real, but this read's parentheses make it Boolean", t.name),
                )
                .with_label("read with parentheses")
                .with_secondary(r, "defined as real here")
                .with_note(format!(
                    "read a real tensor with brackets (`{}[...]`), or compare it (`{}[i] > 0`) for a Boolean",
                    t.name, t.name
                )),
                false => Diagnostic::error(
                    codes::TYPE,
                    r,
                    format!("`{}` is defined as real here but is Boolean elsewhere", t.name),
                )
                .with_secondary(p, "written with parentheses here, which makes it Boolean"),
            };
            self.diags.push(d);
        }
    }
}

/// The value of an element fact's right-hand side (`Edge[A, B] = 2.5`), if it is a number.
pub(super) fn element_value(rhs: &Expr) -> Option<f64> {
    match rhs {
        Expr::Number(v, _) => Some(v.value()),
        Expr::Neg(x, _) => element_value(x).map(|v| -v),
        Expr::Term(fs, _) if fs.len() == 1 => element_value(&fs[0].1),
        _ => None,
    }
}

fn slice_count(e: &Expr) -> usize {
    match e {
        Expr::Access(a) => a
            .indices
            .iter()
            .filter(|i| matches!(i, Index::Slice(..)))
            .count(),
        Expr::Term(fs, _) => fs.iter().map(|(_, f)| slice_count(f)).sum(),
        _ => 0,
    }
}

/// Number of stored axes an access names: a virtual index (§5.2) is not stored.
pub(super) fn axes(indices: &[Index]) -> usize {
    indices
        .iter()
        .filter(|i| !matches!(i, Index::Virtual(..)))
        .count()
}

/// Every name the program's statements use as a tensor (accessed, defined, declared, read,
/// written or queried): what a binding may name.
fn mentioned_names(program: &crate::syntax::ast::Program) -> std::collections::HashSet<&str> {
    use crate::syntax::ast::Expr;
    fn expr<'p>(e: &'p Expr, out: &mut std::collections::HashSet<&'p str>) {
        match e {
            Expr::Access(a) => {
                out.insert(a.name.text.as_str());
            }
            Expr::Call { args, .. } => args.iter().for_each(|x| expr(x, out)),
            Expr::Neg(x, _) | Expr::Not(x, _) => expr(x, out),
            Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => {
                expr(a, out);
                expr(b, out);
            }
            Expr::Term(fs, _) => fs.iter().for_each(|(_, f)| expr(f, out)),
            Expr::Number(..) | Expr::Str(..) => {}
        }
    }
    let mut out = std::collections::HashSet::new();
    for st in &program.statements {
        match &st.kind {
            StmtKind::Equation { lhs, rhs, .. } => {
                out.insert(lhs.name.text.as_str());
                expr(rhs, &mut out);
            }
            StmtKind::Rule { head, body } => {
                out.insert(head.name.text.as_str());
                body.iter().for_each(|e| expr(e, &mut out));
            }
            StmtKind::Fact(a) | StmtKind::Query(a) => {
                out.insert(a.name.text.as_str());
            }
            StmtKind::Literal { name, .. }
            | StmtKind::Scalar { name, .. }
            | StmtKind::Declaration { name, .. }
            | StmtKind::Init { name, .. }
            | StmtKind::FileRead { name, .. }
            | StmtKind::FileWrite { name, .. } => {
                out.insert(name.text.as_str());
            }
            StmtKind::Domain { .. } => {}
        }
    }
    out
}
