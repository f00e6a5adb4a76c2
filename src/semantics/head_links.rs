//! Which way values flow through a rule's head (§8).
//!
//! A bare variable in a rule's head copies the values its body binds into the head's
//! column. Unifying the two columns' classes is right while both hold the same kind of
//! thing, but it is one-way in truth: `Collatz(n, n) :- Num(n)` with `Steps[n] +=
//! Collatz(n, m)` copies positions of `Num`'s column, which a dense tensor indexes, into
//! a column that `Collatz(n, 3 * m + 1)` fills with values no extent bounds. Unified, the
//! value column would need an extent it cannot have. So a head link is cut where its
//! column's class is open and computes values while its variable's class is closed: the
//! copy becomes a value site (`strings.rs`), as index arithmetic from a numbered column
//! into an open one does (`reals.rs`).
//!
//! Invariant: only such links are cut; every other head link is a union, as any shared
//! variable is, so programs whose classes agree check as before.

use super::{Ctx, Retry};
use crate::diagnostics::Span;
use std::collections::HashSet;

/// What rule heads write, gathered while domains are built.
#[derive(Default)]
pub(super) struct HeadLinks {
    /// Bare variables in heads, not yet unified with their slots.
    pub links: Vec<HeadLink>,
    /// The slots heads write with index arithmetic over variables: columns whose values
    /// the program computes.
    pub computing: Vec<usize>,
}

/// A rule head's slot and the bare variable written there, not yet unified.
pub(super) struct HeadLink {
    pub slot: usize,
    pub var: usize,
    /// The variable's place in the head.
    pub span: Span,
}

impl Ctx<'_> {
    /// Unifies each head link's slot with its variable, except links that carry positions
    /// of a closed class into an open class that computes values: those are sent back to
    /// be rewritten into value sites (unless `computed` already holds them).
    pub(super) fn link_heads(
        &mut self,
        heads: HeadLinks,
        computed: &HashSet<Span>,
    ) -> Result<(), Retry> {
        let (mut held, kept): (Vec<HeadLink>, Vec<HeadLink>) = heads
            .links
            .into_iter()
            .partition(|l| !computed.contains(&l.span));
        for l in kept {
            self.uf.union(l.slot, l.var);
        }
        if held.is_empty() {
            return Ok(());
        }
        let mut classes = Classes {
            open: self.open_candidates(),
            computing: heads.computing.iter().map(|&s| self.uf.find(s)).collect(),
            axes: (0..self.tensors.iter().map(|t| t.rank()).sum())
                .map(|n| self.uf.find(n))
                .collect(),
        };
        loop {
            let before = held.len();
            held.retain(|l| !self.link_unless_cut(l, &mut classes));
            if held.len() == before {
                break;
            }
        }
        if held.is_empty() {
            return Ok(());
        }
        Err(Retry::Compute(held.into_iter().map(|l| l.span).collect()))
    }

    /// Unifies `l`'s slot and variable unless the link is cut; whether it unified.
    fn link_unless_cut(&mut self, l: &HeadLink, classes: &mut Classes) -> bool {
        let (s, v) = (self.uf.find(l.slot), self.uf.find(l.var));
        if s != v {
            let cut = classes.open.contains(&s)
                && classes.computing.contains(&s)
                && classes.axes.contains(&v)
                && !classes.open.contains(&v);
            if cut {
                return false;
            }
            self.uf.union(s, v);
            let r = self.uf.find(s);
            if !(classes.open.contains(&s) && classes.open.contains(&v)) {
                classes.open.remove(&r);
            }
            if classes.computing.contains(&s) || classes.computing.contains(&v) {
                classes.computing.insert(r);
            }
            if classes.axes.contains(&s) || classes.axes.contains(&v) {
                classes.axes.insert(r);
            }
        }
        true
    }
}

/// What [`Ctx::link_heads`] knows of each class, by root, kept up to date as it unifies.
struct Classes {
    /// Open candidates: no dense tensor, declaration or named domain sizes them.
    open: HashSet<usize>,
    /// Classes a rule's head writes computed values into.
    computing: HashSet<usize>,
    /// Classes that hold some tensor's axis.
    axes: HashSet<usize>,
}
