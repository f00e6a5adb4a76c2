//! §15: one memory budget for the whole evaluation. The dense tensors of a program are alive
//! together (an evaluation keeps every value until it ends), so their sizes add up; on top
//! comes the scratch of the largest one, which a dense equation holds as f64 while it fills
//! it. A program whose total is over `--max-memory` is refused before
//! evaluation allocates anything, naming its largest tensors, rather than growing until the
//! operating system's out-of-memory killer ends it.

use super::ir::{Kind, TensorInfo};
use crate::diagnostics::{codes, Diagnostic};

/// What the dense tensors of `tensors` need together, with the scratch of the largest.
struct Need {
    /// Bytes of each dense tensor, largest first: (tensor, bytes).
    tensors: Vec<(usize, u128)>,
    /// Bytes of the f64 scratch of the largest.
    scratch: u128,
    /// Bytes a training step holds beside them (gradients, adjoints, optimizer state).
    training: u128,
}

impl Need {
    /// The tensors of a checked program that `dense` says are stored densely, by their
    /// final shapes; with the scratch of the largest where `scratch`.
    fn of(tensors: &[TensorInfo], dense: &dyn Fn(usize) -> bool, scratch: bool) -> Need {
        let mut sized: Vec<(usize, u128, u128)> = tensors
            .iter()
            .enumerate()
            .filter(|&(k, t)| dense(k) && is_dense(t))
            .map(|(k, t)| {
                let n = t.elements();
                (
                    k,
                    n.saturating_mul(t.elem.dense_bytes()),
                    n.saturating_mul(8),
                )
            })
            .collect();
        sized.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let scratch = match scratch {
            true => sized.iter().map(|s| s.2).max().unwrap_or(0),
            false => 0,
        };
        Need {
            tensors: sized.into_iter().map(|(k, b, _)| (k, b)).collect(),
            scratch,
            training: 0,
        }
    }

    /// Everything together.
    fn total(&self) -> u128 {
        let dense = self
            .tensors
            .iter()
            .fold(0u128, |a, t| a.saturating_add(t.1));
        dense
            .saturating_add(self.scratch)
            .saturating_add(self.training)
    }
}

/// Whether a tensor is stored as a dense array: not a relation, not a tensor of defined
/// elements only (`max=`, valued facts).
pub fn is_dense(t: &TensorInfo) -> bool {
    t.kind != Kind::Bool && !t.sparse_values
}

/// What an evaluation holds beside its dense tensors.
#[derive(Clone, Copy, Debug, Default)]
pub struct Beside {
    /// Bytes the largest dense equation allocates while it runs.
    pub equation_scratch: u128,
    /// Bytes a training step adds: gradients, adjoints, optimizer state (0 outside training).
    pub training: u128,
}

/// E0601 when the program's dense tensors (those `dense` keeps: a plan may store some real
/// tensors sparsely), scratch (the larger of the largest tensor's f64 copy and
/// `beside.equation_scratch`) and a training step's own buffers need more than `budget`
/// bytes. Evaluation asks this before it allocates anything, so training asks it of each
/// batch's program, not of the whole data set's.
pub fn check(
    tensors: &[TensorInfo],
    dense: &dyn Fn(usize) -> bool,
    beside: Beside,
    budget: u64,
) -> Option<Diagnostic> {
    let mut need = Need::of(tensors, dense, true);
    // A dense equation's own intermediates and grid are alive beside every tensor too.
    need.scratch = need.scratch.max(beside.equation_scratch);
    need.training = beside.training;
    refuse(tensors, need, budget)
}

/// E0601 when the dense tensors `alive` says are held at once (dense data, and parameters
/// about to be drawn) need more than `budget` bytes: the checker asks this before it draws
/// a parameter, so that a program over the budget is refused, not aborted by a failed
/// allocation.
pub fn check_alive(
    tensors: &[TensorInfo],
    alive: &dyn Fn(usize) -> bool,
    budget: u64,
) -> Option<Diagnostic> {
    refuse(tensors, Need::of(tensors, alive, false), budget)
}

fn refuse(tensors: &[TensorInfo], need: Need, budget: u64) -> Option<Diagnostic> {
    let total = need.total();
    if total <= budget as u128 {
        return None;
    }
    let &(largest, _) = need.tensors.first()?;
    let named: Vec<String> = need
        .tensors
        .iter()
        .take(3)
        .map(|&(k, b)| {
            let t = &tensors[k];
            format!("`{}` {:?} {:?}: {}", t.name, t.shape, t.elem, bytes(b))
        })
        .collect();
    let d = Diagnostic::error(
        codes::MEMORY,
        tensors[largest].span,
        format!(
            "the program's dense tensors need {} together, over the memory budget of {}",
            bytes(total),
            bytes(budget as u128)
        ),
    )
    .with_label("the largest")
    .with_note(match need.scratch {
        0 => format!("largest: {}", named.join(", ")),
        scratch => format!(
            "largest: {}; and {} of scratch while the largest is filled",
            named.join(", "),
            bytes(scratch)
        ),
    })
    .with_note(
        "make it smaller (`--set` its sizes), use a sparse formulation (a relation, or \
             `max=`/`min=` over defined elements), train in batches (`tl train --batch \
             Domain:N`), or raise `--max-memory`",
    );
    Some(match need.training {
        0 => d,
        b => d.with_note(format!(
            "a training step holds {} beside them: gradients, adjoints and optimizer state",
            bytes(b)
        )),
    })
}

/// E0601 for a dense buffer the system would not give, though the budget let it through
/// (a `--max-memory` above what the machine has, or memory taken since the budget was read):
/// an error, where the allocation would otherwise abort the process.
pub fn not_given(t: &TensorInfo, e: crate::tensor::AllocError, budget: u64) -> Diagnostic {
    Diagnostic::error(
        codes::MEMORY,
        t.span,
        format!(
            "the system would not give `{}` its {} (the memory budget of {} allowed it)",
            t.name,
            bytes(e.bytes()),
            bytes(budget as u128)
        ),
    )
    .with_note("lower `--max-memory` to what this machine has free, or make the tensor smaller")
}

/// `b` bytes as a person reads them: `3.4 GiB`.
pub fn bytes(b: u128) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    match u {
        0 => format!("{b} bytes"),
        _ => format!("{v:.1} {}", units[u]),
    }
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(bytes(512), "512 bytes");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
        assert_eq!(bytes(7_200_000_000), "6.7 GiB");
    }
}
