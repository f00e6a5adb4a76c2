//! Rounds of first derivation (`--provenance`, issue 50).
//!
//! Semi-naive evaluation derives a tuple first in round `r` from tuples all known before
//! it, so `r` is the height of its shortest derivation within its stratum, and a
//! derivation of minimal height is a walk down the rounds (`why/facts.rs`). The joins
//! append each round's new rows to a store in order, so a store only notes its row count
//! at the end of each round; when the stratum is done, each tuple's round is laid out in
//! the order of the sorted relation: 4 bytes per tuple, nothing when not asked for.
//! Strata other kernels evaluate (bit matrices, loop nests, dense passes) record nothing,
//! and `why` searches their facts as it does without provenance.

use crate::semantics::TensorId;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex};

/// Each recorded relation's rounds, in the order of its sorted tuples (0: held before its
/// stratum's first round: given).
pub type Rounds = FxHashMap<TensorId, Vec<u32>>;

/// Where an evaluation leaves the rounds it records; shared by the clones of the options
/// that carry it, and read once the run is over ([`Provenance::take`]).
#[derive(Clone, Debug, Default)]
pub struct Provenance(Arc<Mutex<Rounds>>);

impl Provenance {
    /// Keeps relation `t`'s rounds.
    pub(crate) fn record(&self, t: TensorId, rounds: Vec<u32>) {
        if let Ok(mut all) = self.0.lock() {
            all.insert(t, rounds);
        }
    }

    /// The rounds recorded so far, leaving none.
    pub fn take(&self) -> Rounds {
        self.0
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }
}

/// The round of each of `count` distinct rows (`arity` columns, flat in `data`, in the
/// order they arrived) in the order of the rows sorted, given the row count at the start
/// (`marks[0]`) and at the end of each round.
pub(crate) fn sorted_rounds(data: &[u32], arity: usize, count: usize, marks: &[u32]) -> Vec<u32> {
    let row = |r: u32| &data[r as usize * arity..(r as usize + 1) * arity];
    let mut order: Vec<u32> = (0..count as u32).collect();
    order.sort_unstable_by(|&a, &b| row(a).cmp(row(b)));
    order
        .into_iter()
        .map(|r| marks.partition_point(|&m| m <= r) as u32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_take_the_round_they_arrived_in_sorted_order() {
        // Rows (5), (1) held before; (3) in round 1; (0), (4) in round 2.
        let data = [5, 1, 3, 0, 4];
        let rounds = sorted_rounds(&data, 1, 5, &[2, 3, 5]);
        // Sorted: 0, 1, 3, 4, 5.
        assert_eq!(rounds, vec![2, 0, 1, 2, 0]);
    }
}
