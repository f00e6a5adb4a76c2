//! Real values in columns (§8): `Price(Apple, 1.25).`, or a `.tsv` column of numbers that
//! are not all integers. A domain that holds reals is interned like symbols, its values in
//! increasing order (`ir::Domain::sort_values`), so engines see positions and a join on
//! equal prices is a join on equal positions. Where a rule uses such a column as a value
//! (`p < 1.0`, `Total = Price(x, p) p`), the variable reads the domain's *values tensor*:
//! a real vector that data gives, one element per position, so that every engine computes
//! with the value through an ordinary read and nothing downstream knows about reals.

use super::lower::Lowered;
use super::{Ctx, Draft, Node, Source};
use crate::diagnostics::Span;
use crate::io::{RawData, Table};
use crate::tensor::ElemType;
use std::collections::HashMap;
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
            draft.elem = Some(ElemType::F64);
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
}

fn value_reads(n: &mut Node, reads: &[Option<usize>]) {
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
