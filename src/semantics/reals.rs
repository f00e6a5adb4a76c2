//! Real values in columns (§8): `Price(Apple, 1.25).`, or a `.tsv` column of numbers that
//! are not all integers. A domain that holds reals is interned like symbols, its values in
//! increasing order (`ir::Domain::sort_values`), so engines see positions and a join on
//! equal prices is a join on equal positions. Where a rule uses such a column as a value
//! (`p < 1.0`, `Total = Price(x, p) p`), the variable reads the domain's *values tensor*:
//! a real vector that data gives, one element per position, so that every engine computes
//! with the value through an ordinary read and nothing downstream knows about reals.

use super::bindings::{names_in_index, peel, variable};
use super::lower::Lowered;
use super::{Ctx, Draft, Kind, Node, Retry, Source};
use crate::diagnostics::{codes, Diagnostic, Span};
use crate::io::{RawData, Table};
use crate::syntax::ast::{Brackets, CmpOp, Expr, Index, StmtKind};
use crate::tensor::ElemType;
use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Arc;

/// The prefix of a values tensor's name; `#` keeps it apart from every name a user writes.
const VALUES: &str = "#values";

impl Ctx<'_> {
    /// Adds the values tensor of every domain that holds reals, its axis in that domain.
    /// Runs after interning, when each such domain's values are known.
    pub(super) fn add_value_tensors(&mut self) {
        for d in 0..self.domains.len() {
            if !self.domains[d].real {
                continue;
            }
            let Some((&root, _)) = self.domain_of_root.iter().find(|(_, &x)| x == d) else {
                continue;
            };
            let mut rows = Table::default();
            for (line, s) in self.domains[d].symbols.iter().enumerate() {
                rows.push(line + 1, [s.as_str(), s.as_str()]);
            }
            let name = format!("{VALUES}{d}");
            let t = self.tensors.len();
            let mut draft = Draft::new(&name, Span::default());
            draft.arity = Some((1, Span::default()));
            // A column of integers aggregates exactly (`Top[k] max= V(k, v) v` is an
            // integer tensor, never rounded through f32); any real makes it real.
            let integers = self.domains[d]
                .symbols
                .iter()
                .all(|s| s.parse::<i64>().is_ok());
            draft.elem = Some(if integers {
                ElemType::Int
            } else {
                ElemType::F64
            });
            draft.bound = true;
            self.tensors.push(draft);
            self.by_name.insert(name.clone(), t);
            let slot = self.uf.add();
            self.axis_base.push(slot);
            self.uf.union(slot, root);
            self.sources.push(Source {
                tensor: t,
                raw: Arc::new(RawData::Table(rows)),
                span: Span::default(),
                file: format!("the values of `{}`", self.domain_label(d)),
                symbolic: Vec::new(),
            });
            self.values_tensor.insert(d, t);
        }
    }

    /// How messages name domain `d`.
    fn domain_label(&self, d: usize) -> String {
        match &self.domains[d].name {
            Some(n) => n.clone(),
            None => format!(
                "a real column ({})",
                self.domains[d]
                    .symbols
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// Rewrites every variable of a real domain used as a value into a read of its
    /// domain's values tensor.
    pub(super) fn read_real_values(&mut self, eqs: &mut [Lowered]) {
        if self.values_tensor.is_empty() {
            return;
        }
        for (eq, meta) in eqs.iter_mut() {
            let reads: Vec<Option<usize>> = eq
                .vars
                .iter()
                .map(|v| {
                    let d = self.var_domain(meta.stmt, &v.name);
                    self.values_tensor.get(&d).copied()
                })
                .collect();
            if reads.iter().any(Option::is_some) {
                value_reads(&mut eq.rhs, &reads);
            }
        }
    }

    /// Finds the values rules compute into columns: index arithmetic over a real column in
    /// a head or an atom (`Double(x, p * 2)`, which a binding `d = p * 2` became), and a
    /// binding `v = e` of a variable no positive atom binds to a value that need not be an
    /// integer (`d = p + 0.5`, `s = S[x]` with `S` real). Such a value is not a position,
    /// so it becomes a value site (`strings.rs`) filled in rounds. New ones send the
    /// program back to be rewritten; ones already rewritten but still here are errors.
    pub(super) fn computed_values(
        &mut self,
        kinds: &[Kind],
        known: &HashSet<Span>,
    ) -> Result<(), Retry> {
        let program = self.program;
        let constants: HashSet<String> = self.scalars.keys().cloned().collect();
        let mut found = Vec::new();
        for (si, st) in program.statements.iter().enumerate() {
            let StmtKind::Rule { head, body } = &st.kind else {
                continue;
            };
            let mut atoms = vec![head];
            let mut positive = HashSet::new();
            for lit in body {
                match peel(lit) {
                    Expr::Access(a) if a.brackets != Brackets::None => {
                        atoms.push(a);
                        a.indices
                            .iter()
                            .for_each(|i| names_in_index(i, &mut positive));
                    }
                    Expr::Not(x, _) => {
                        if let Expr::Access(a) = peel(x) {
                            atoms.push(a);
                        }
                    }
                    _ => {}
                }
            }
            for a in atoms {
                for i in &a.indices {
                    self.real_arith(si, i, &mut found);
                }
            }
            self.numbered_into_open(si, head, &mut found);
            for lit in body {
                let Expr::Compare(CmpOp::Eq, l, r, _) = peel(lit) else {
                    continue;
                };
                for (var, value) in [(l, r), (r, l)] {
                    let bound = variable(var, &constants).filter(|v| !positive.contains(v));
                    if bound.is_some() && self.real_valued(si, value, kinds) {
                        found.push(value.span());
                        break;
                    }
                }
            }
        }
        let fresh: Vec<Span> = found
            .iter()
            .filter(|s| !known.contains(s))
            .copied()
            .collect();
        if !fresh.is_empty() {
            return Err(Retry::Compute(fresh));
        }
        for span in found {
            self.diags.push(
                Diagnostic::error(
                    codes::FORM,
                    span,
                    "this value would become a column, which it cannot here",
                )
                .with_note("compute it in a rule's body as `v = e`, with `v` in the head"),
            );
        }
        Ok(())
    }

    /// Adds the span of `i` if it is index arithmetic over a real column.
    fn real_arith(&mut self, stmt: usize, i: &Index, found: &mut Vec<Span>) {
        if let Index::Arith(_, _, _, span) = i {
            let mut names = HashSet::new();
            names_in_index(i, &mut names);
            if has_real(i) || names.iter().any(|n| self.holds_reals(stmt, n)) {
                found.push(*span);
            }
        }
    }

    /// Adds the spans of the head's index arithmetic that writes into an open column (§8)
    /// from a variable of numbered positions (`T0(x + 2) :- V(x, _)` where `V`'s column is
    /// numbered because a count reads it): a position plus 2 is no handle of the open
    /// column's table, so the value is computed and interned, as a value site.
    fn numbered_into_open(
        &mut self,
        stmt: usize,
        head: &crate::syntax::ast::Access,
        found: &mut Vec<Span>,
    ) {
        let Some(&t) = self.by_name.get(&head.name.text) else {
            return;
        };
        for (ax, i) in head.indices.iter().enumerate() {
            let Index::Arith(_, _, _, span) = i else {
                continue;
            };
            if !self.domains[self.axis_domain(t, ax)].is_open() {
                continue;
            }
            let mut names = HashSet::new();
            names_in_index(i, &mut names);
            let numbered = names.iter().any(|n| {
                let d = self.var_domain(stmt, n);
                !self.domains[d].is_open() && !self.scalars.contains_key(n)
            });
            if numbered {
                found.push(*span);
            }
        }
    }

    /// Whether variable `var` of statement `stmt` ranges over a domain of numbered values
    /// (an unknown variable is in the integer domain 0).
    pub(super) fn holds_reals(&mut self, stmt: usize, var: &str) -> bool {
        let d = self.var_domain(stmt, var);
        self.domains[d].real
    }

    /// Whether `e` may be a value that is not an integer: it reads a real column or a
    /// real tensor, or holds a number with a fraction.
    fn real_valued(&mut self, stmt: usize, e: &Expr, kinds: &[Kind]) -> bool {
        match e {
            Expr::Number(v, _) => v.value().fract() != 0.0,
            Expr::Access(a) if a.brackets == Brackets::None && a.indices.is_empty() => {
                match self.by_name.get(&a.name.text) {
                    Some(&t) => kinds.get(t) == Some(&Kind::Real),
                    None => self.holds_reals(stmt, &a.name.text),
                }
            }
            Expr::Access(a) => self
                .by_name
                .get(&a.name.text)
                .is_some_and(|&t| kinds.get(t) == Some(&Kind::Real)),
            Expr::Neg(x, _) => self.real_valued(stmt, x, kinds),
            Expr::Binary(_, a, b, _) => {
                self.real_valued(stmt, a, kinds) || self.real_valued(stmt, b, kinds)
            }
            Expr::Term(fs, _) => fs.iter().any(|(_, f)| self.real_valued(stmt, f, kinds)),
            Expr::Call { args, .. } => args.iter().any(|x| self.real_valued(stmt, x, kinds)),
            Expr::Str(..) | Expr::Not(..) | Expr::Compare(..) => false,
        }
    }
}

/// Whether index arithmetic holds a real constant (`b * 1.1`).
fn has_real(i: &Index) -> bool {
    match i {
        Index::Real(..) => true,
        Index::Arith(a, _, b, _) => has_real(a) || has_real(b),
        _ => false,
    }
}

fn value_reads(n: &mut Node, reads: &[Option<usize>]) {
    // Two variables of one numbered domain compare by position, which orders as the
    // values do, exactly also where f64 cannot tell two integers apart.
    if let Node::Compare(_, a, b) = n {
        if let (Node::Var(x), Node::Var(y)) = (a.inside_empty_sums(), b.inside_empty_sums()) {
            let domain = |v: &usize| reads.get(*v).copied().flatten();
            if domain(x).is_some() && domain(x) == domain(y) {
                return;
            }
        }
    }
    if let Node::Var(v) = n {
        if let Some(&Some(tensor)) = reads.get(*v) {
            *n = Node::Read {
                tensor,
                index: vec![super::IndexFn::Var(*v)],
                slice: false,
            };
        }
        return;
    }
    n.children_mut()
        .into_iter()
        .for_each(|c| value_reads(c, reads));
}

/// The values tensor of each real domain, by domain.
pub(super) type ValueTensors = HashMap<usize, usize>;
