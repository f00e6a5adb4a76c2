//! Domains grown in place by a commit (issue 49): a fact with a value its domain does not
//! hold yet need not evaluate the program afresh where the kept values can take the value.
//!
//! - A value new to an open integer column (§8) is numbered in its table: such a column has
//!   no extent, so every handle fits every tensor over it.
//! - A symbol new to a domain whose every tensor is a relation held as tuples is numbered
//!   after the others, and those tensors' extents grow by one: tuples do not move when an
//!   extent grows, where a dense array would.
//!
//! Only on the standard engine, in one process: each process of a dataflow numbers values in
//! a table of its own, so there a new value still evaluates afresh, every process together.

use super::incremental::Staged;
use super::Session;
use crate::semantics::{number_text, Checked, DomainId, Kind};
use crate::tensor::{Storage, Tensor};

impl Session {
    /// Numbers the staged facts' new values where the kept values allow it (see above).
    pub(super) fn grow_domains(&mut self, staged: &Staged) {
        if !self.kept_by_standard_engine() {
            return;
        }
        let (Some(checked), Some(values)) = (self.checked.as_mut(), self.values.as_mut()) else {
            return;
        };
        for (name, fields, _) in staged {
            let Some(t) = checked.tensor_id(name) else {
                continue;
            };
            let domains = checked.tensors[t].domains.clone();
            for (&d, text) in domains.iter().zip(fields) {
                let dom = &checked.domains[d];
                if let Some(table) = &dom.table {
                    if let Ok(v) = text.trim().parse::<i64>() {
                        table.intern(v);
                    }
                    continue;
                }
                let symbol = text.as_str();
                let new_symbol = dom.symbolic && !dom.real && dom.position(symbol).is_none();
                if new_symbol && number_text(symbol).is_none() && tuples_only(checked, values, d) {
                    add_symbol(checked, values, d, symbol);
                }
            }
        }
    }
}

/// Whether every tensor with an axis over domain `d` is a relation held as tuples (its
/// values, and its data where it has some).
fn tuples_only(p: &Checked, values: &[Tensor], d: DomainId) -> bool {
    let tuples = |t: &Tensor| matches!(t.storage, Storage::Relation(_));
    p.tensors.iter().enumerate().all(|(t, info)| {
        !info.domains.contains(&d)
            || (info.kind == Kind::Bool
                && tuples(&values[t])
                && p.data[t].as_ref().is_none_or(tuples))
    })
}

/// Numbers `symbol` last in domain `d`, and grows every axis over it by one.
fn add_symbol(p: &mut Checked, values: &mut [Tensor], d: DomainId, symbol: &str) {
    p.domains[d].add(symbol);
    for (t, info) in p.tensors.iter_mut().enumerate() {
        for (ax, _) in info.domains.iter().enumerate().filter(|(_, &x)| x == d) {
            info.shape[ax] += 1;
            values[t].shape[ax] += 1;
            if let Some(data) = p.data[t].as_mut() {
                data.shape[ax] += 1;
            }
        }
    }
}
