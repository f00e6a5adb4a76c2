//! Open integer domains (§8): the integer columns of relations that no dense tensor indexes.
//!
//! Such a column holds values, not positions: it has no extent to infer, any i64 value may
//! be in it, and a recursion may compute new ones, which it keeps doing until a round derives
//! nothing new (`Fact(i + 1, n * (i + 1)) :- Fact(i, n), not Lim(i)`). Its domain numbers
//! its values in a [`crate::tensor::ValueTable`]: the values the data and the program's
//! constants place there, sorted, then those evaluation computes. Only dense storage needs
//! an extent, so a domain that some dense tensor, declaration or dense datum touches keeps
//! positions counted from an offset (`offsets.rs`), with extents inferred (`extents.rs`).
//!
//! Invariants: an index function at an open axis denotes a *value* (its variables of open
//! domains stand for their values, constants are values), except a bare variable, which is
//! the handle itself; data and facts store handles; only engines add values to a table.

use super::names::IndexName;
use super::Ctx;
use crate::syntax::ast::{Access, CmpOp, Expr, Index, StmtKind};
use std::collections::{HashMap, HashSet};

impl Ctx<'_> {
    /// The union-find roots of integer classes whose every axis belongs to a relation that
    /// is neither declared nor given dense data, and that no named domain sizes: the
    /// candidates for open domains (symbolic and real-valued ones are taken out later).
    pub(super) fn open_candidates(&mut self) -> HashSet<usize> {
        let mut seen = HashSet::new();
        let mut closed = HashSet::new();
        for t in 0..self.tensors.len() {
            let relational = self.holds_tuples(t);
            for ax in 0..self.tensors[t].rank() {
                let root = self.uf.find(self.axis_base[t] + ax);
                seen.insert(root);
                if !relational {
                    closed.insert(root);
                }
            }
        }
        let nodes: Vec<usize> = self.named_domains.values().map(|d| d.node).collect();
        for node in nodes {
            closed.insert(self.uf.find(node));
        }
        self.close_fed_classes(&seen, &mut closed);
        seen.difference(&closed).copied().collect()
    }

    /// Closes the classes whose values a closed class's extent depends on. A column a
    /// dense tensor indexes needs a static extent, so the classes whose values its
    /// equations write there through arithmetic (`P(x, y - 1)` into a dense-indexed
    /// column), or bind a variable to through a value binding (`c = bshl(x, 2)`), need
    /// static ranges too; so does a variable that no axis ranges, which only a binding's
    /// bounds can give (`L(bshl(x, 2) + 1)`), and the columns it indexes.
    fn close_fed_classes(&mut self, seen: &HashSet<usize>, closed: &mut HashSet<usize>) {
        let program = self.program;
        // (the class fed, `None` for a variable no axis ranges; the classes feeding it)
        let mut feeds: Vec<(Option<usize>, Vec<Option<usize>>)> = Vec::new();
        for (si, st) in program.statements.iter().enumerate() {
            let (head, body): (&Access, Vec<&Expr>) = match &st.kind {
                StmtKind::Rule { head, body } => (head, body.iter().collect()),
                StmtKind::Equation { lhs, rhs, .. } => (lhs, vec![rhs]),
                _ => continue,
            };
            let root = |ctx: &Self, name: &str| {
                let node = *ctx.var_nodes.get(&(si, name.to_string()))?;
                Some(ctx.uf.root(node)).filter(|r| seen.contains(r))
            };
            let mut reads = Vec::new();
            body.iter().for_each(|e| e.accesses(&mut reads));
            for (a, written) in
                std::iter::once((head, true)).chain(reads.into_iter().map(|a| (a, false)))
            {
                let Some(&t) = self.by_name.get(&a.name.text) else {
                    continue;
                };
                for (ax, idx) in a.indices.iter().enumerate().take(self.tensors[t].rank()) {
                    if !matches!(idx, Index::Arith(..)) {
                        continue;
                    }
                    let axis = self.uf.root(self.axis_base[t] + ax);
                    let vars = self.var_names(idx);
                    let feeders: Vec<Option<usize>> = vars.iter().map(|n| root(self, n)).collect();
                    if feeders.contains(&None) {
                        closed.insert(axis);
                    }
                    if written {
                        feeds.push((Some(axis), feeders));
                    }
                }
            }
            // Variables a positive atom binds (a value binding of one is a comparison).
            let mut atoms = Vec::new();
            body.iter()
                .filter(|e| !matches!(e, Expr::Not(..)))
                .for_each(|e| e.accesses(&mut atoms));
            let scanned: HashSet<&str> = atoms
                .iter()
                .filter(|a| self.by_name.contains_key(&a.name.text))
                .flat_map(|a| &a.indices)
                .filter_map(|i| match i {
                    Index::Name(n) => Some(n.text.as_str()),
                    _ => None,
                })
                .collect();
            for e in &body {
                if let Expr::Compare(CmpOp::Eq, a, b, _) = e {
                    for (var, value) in [(a, b), (b, a)] {
                        if let Some(v) = self.value_var(var) {
                            let mut inside = Vec::new();
                            value.accesses(&mut inside);
                            let feeders = inside
                                .iter()
                                .flat_map(|x| self.access_var_names(x))
                                .map(|n| root(self, &n))
                                .collect();
                            // A variable only a binding gives values to takes the range its
                            // bounds give (an open one would range over values no tuple
                            // holds yet).
                            let fed = root(self, &v).filter(|_| scanned.contains(v.as_str()));
                            feeds.push((fed, feeders));
                            if !scanned.contains(v.as_str()) {
                                if let Some(r) = root(self, &v) {
                                    closed.insert(r);
                                }
                            }
                        }
                    }
                }
            }
        }
        loop {
            let before = closed.len();
            for (fed, feeders) in &feeds {
                if fed.is_none_or(|r| closed.contains(&r)) {
                    closed.extend(feeders.iter().flatten().copied());
                }
            }
            if closed.len() == before {
                return;
            }
        }
    }

    /// Whether tensor `t` is a relation stored as its tuples whatever the program does:
    /// Boolean, undeclared, and given no dense data.
    pub(super) fn holds_tuples(&self, t: usize) -> bool {
        let d = &self.tensors[t];
        d.is_bool() && d.declared.is_none() && d.elem.is_none() && !self.given_arrays(t)
    }

    /// The index variables an index mentions.
    fn var_names(&self, idx: &Index) -> Vec<String> {
        let mut names = Vec::new();
        idx.names(&mut names);
        names
            .into_iter()
            .filter(|n| self.index_name(n) == IndexName::Var)
            .map(str::to_string)
            .collect()
    }

    /// The index variables an access mentions: in its indices, or itself as a value.
    fn access_var_names(&self, a: &Access) -> Vec<String> {
        let mut names: Vec<String> = a.indices.iter().flat_map(|i| self.var_names(i)).collect();
        let bare = a.brackets == crate::syntax::ast::Brackets::None;
        if bare
            && !self.by_name.contains_key(&a.name.text)
            && self.index_name(&a.name.text) == IndexName::Var
        {
            names.push(a.name.text.clone());
        }
        names
    }
}

/// The values placed in each open candidate domain (by root), gathered while interning.
#[derive(Default)]
pub(super) struct OpenValues(pub HashMap<usize, Vec<i64>>);

impl OpenValues {
    /// Notes value `v` placed in the class of `root`, if that may be open.
    pub(super) fn note(&mut self, candidates: &HashSet<usize>, root: usize, v: i64) {
        if candidates.contains(&root) {
            self.0.entry(root).or_default().push(v);
        }
    }

    /// The sorted, distinct values of `root`'s class.
    pub(super) fn take(&mut self, root: usize) -> Vec<i64> {
        let mut v = self.0.remove(&root).unwrap_or_default();
        v.sort_unstable();
        v.dedup();
        // Every field of a file was noted; the table keeps only the distinct values.
        v.shrink_to_fit();
        v
    }
}
