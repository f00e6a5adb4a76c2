//! Every thread split in one table: the work under which an operation stays on the calling
//! thread, and the blocks that split work comes in. Kernels read their threshold here,
//! never a constant of their own, so that one table says how `--threads` is used; each
//! entry says what set it. No entry changes a result (§14): a split block computes what one
//! thread computes for its elements, and reductions keep their fixed order whatever the
//! split. `tl explain` prints, per dense equation, which side of [`EQUATION_WORK`] it is
//! on; `docs/design.md` lists the table (a unit test keeps the two the same).

/// Every core this process may use (its affinity mask and cgroup quota counted): the default
/// thread count of the CLI, Python and the library (§14). Results are bit-identical for any
/// count, so there is nothing to gain from a smaller default, as NumPy and PyTorch users
/// expect.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// One threshold or block size of the schedule.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Split {
    /// The name the table prints.
    pub(crate) name: &'static str,
    /// The threshold (work at or above it splits) or the block size.
    pub(crate) at: usize,
    /// What `at` counts.
    pub(crate) unit: &'static str,
    /// Which operation it decides.
    pub(crate) decides: &'static str,
    /// The measurement, or where there was none the reasoning, that set it.
    pub(crate) set_by: &'static str,
}

/// A dense equation runs its contractions and its pass over the output on the pool.
pub(crate) const EQUATION_WORK: Split = Split {
    name: "equation work",
    at: 1 << 25,
    unit: "FLOPs (a relation's scatter counts 16 per tuple and element)",
    decides: "a dense equation runs on the `--threads` pool",
    set_by: "moving a smaller equation to the pool costs more than it does",
};

/// A matrix product (or a batch of them) splits its rows among threads.
pub(crate) const PRODUCT_WORK: Split = Split {
    name: "product work",
    at: 1 << 22,
    unit: "multiply-adds",
    decides: "a GEMM (or batch of GEMMs) splits among threads",
    set_by: "below it, waking workers and their packing buffers cost more than they save",
};

/// A product whose reduction is this many times longer than its output's longer side
/// splits by blocks of the reduction instead of by rows.
pub(crate) const INNER_RATIO: Split = Split {
    name: "inner split ratio",
    at: 4,
    unit: "reduction length / longer output side",
    decides: "a GEMM splits by its reduction's KC blocks rather than by rows",
    set_by: "rows too few to share among threads; the blocks are added in their fixed order",
};

/// The most reduction blocks a product splits by.
pub(crate) const INNER_BLOCKS: Split = Split {
    name: "inner blocks",
    at: 16,
    unit: "KC blocks of 512",
    decides: "the most reduction blocks a GEMM splits by",
    set_by: "each later block holds a buffer the size of the output until all are added",
};

/// The most output elements of a product split by reduction blocks.
pub(crate) const INNER_OUTPUT: Split = Split {
    name: "inner split output",
    at: 1 << 20,
    unit: "output elements",
    decides: "the largest GEMM output split by reduction blocks",
    set_by: "with at most 15 later blocks, at most 15 buffers of 2²⁰ elements beside the result",
};

/// A memory-bound pass (a gather, a permutation, a row's Jacobian) splits into blocks.
pub(crate) const PASS_ELEMENTS: Split = Split {
    name: "pass elements",
    at: 1 << 17,
    unit: "elements",
    decides: "a gather, permutation or copy splits into blocks",
    set_by: "a worker's wake-up costs more than copying fewer",
};

/// Elements of a block of a split fill (a vectorised loop per worker).
pub(crate) const FILL_BLOCK: Split = Split {
    name: "fill block",
    at: 1 << 14,
    unit: "elements per block",
    decides: "the block a split fill hands to one worker",
    set_by: "rayon's element-by-element collect made the character LM's two-thread step \
             slower than one thread; blocks of 2¹⁴: 82.5 → 76.7 ms",
};

/// A pass of row programs over the output splits into blocks of rows.
pub(crate) const ROW_WORK: Split = Split {
    name: "row pass work",
    at: 1 << 19,
    unit: "row operations × elements",
    decides: "an elementwise pass over the output splits by rows",
    set_by: "below it a worker's wake-up costs more than the pass",
};

/// Rows per block of a split pass of row programs.
pub(crate) const ROW_BLOCK: Split = Split {
    name: "row block",
    at: 64,
    unit: "rows per block",
    decides: "the block of a split elementwise pass (and of its backward pass)",
    set_by: "enough rows per worker to amortise a task; small enough to balance two threads",
};

/// Rows per block of a lifted softmax/lnorm's Jacobian in the backward pass.
pub(crate) const JACOBIAN_BLOCK: Split = Split {
    name: "jacobian block",
    at: 64,
    unit: "rows per block",
    decides: "the block of a split softmax/lnorm Jacobian",
    set_by: "as the row block",
};

/// Adam's (and SGD's) update of the parameters splits.
pub(crate) const UPDATE_ELEMENTS: Split = Split {
    name: "update elements",
    at: 1 << 15,
    unit: "parameter elements",
    decides: "an optimizer's update splits among threads",
    set_by: "each element costs a square root and a division, so fewer are worth splitting \
             than for a copy",
};

/// A bit-matrix product splits by rows.
pub(crate) const BIT_WORDS: Split = Split {
    name: "bit-matrix words",
    at: 1 << 16,
    unit: "64-bit words of rows",
    decides: "a bit-matrix product splits among threads (and its chunk of rows)",
    set_by: "below it a product is faster than the pool's wake-up",
};

/// A worst-case-optimal join splits by candidates of its first variable.
pub(crate) const JOIN_CANDIDATES: Split = Split {
    name: "join candidates",
    at: 1024,
    unit: "values of the first variable",
    decides: "a worst-case-optimal join splits among threads (chunks of at least an eighth)",
    set_by: "below it a join is faster than the pool's wake-up",
};

/// A sparse matrix product of counts splits by tuples.
pub(crate) const PRODUCT_TUPLES: Split = Split {
    name: "count product tuples",
    at: 1 << 14,
    unit: "tuples of the first relation",
    decides: "a sparse matrix product of counts splits among threads",
    set_by: "below it a product is faster than the pool's wake-up",
};

/// A rule's join splits by the rows of its first atom.
pub(crate) const RULE_ROWS: Split = Split {
    name: "rule rows",
    at: 4096,
    unit: "rows of the first atom",
    decides: "a semi-naive rule's join splits among threads (chunks of at least an eighth)",
    set_by: "below it a rule is faster than the pool's wake-up",
};

/// The whole table, in the order `docs/design.md` lists it.
pub(crate) const TABLE: [Split; 15] = [
    EQUATION_WORK,
    PRODUCT_WORK,
    INNER_RATIO,
    INNER_BLOCKS,
    INNER_OUTPUT,
    PASS_ELEMENTS,
    FILL_BLOCK,
    ROW_WORK,
    ROW_BLOCK,
    JACOBIAN_BLOCK,
    UPDATE_ELEMENTS,
    BIT_WORDS,
    JOIN_CANDIDATES,
    PRODUCT_TUPLES,
    RULE_ROWS,
];

/// Where a dense equation of `flops` (its plan's estimate) runs with `threads` threads, as
/// `tl explain` prints it: on the calling thread, on the pool, or (a relation multiplying
/// it) decided by the relation's tuples when it runs.
pub(crate) fn equation_text(flops: f64, scatters: bool, threads: usize) -> String {
    let least = EQUATION_WORK.at as f64;
    match (threads, scatters) {
        (0 | 1, _) => "one thread (--threads 1)".to_string(),
        _ if flops >= least => format!("on the pool of {threads} threads"),
        (_, true) => format!(
            "on the pool of {threads} threads if its relation's tuples bring it to \
             2^25 FLOPs"
        ),
        (_, false) => "on the calling thread (under 2^25 FLOPs)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/design.md` lists every entry with its value, and no other.
    #[test]
    fn the_design_document_lists_the_table() {
        let doc = include_str!("../../docs/design.md");
        let rows: Vec<&str> = doc
            .lines()
            .filter(|l| l.starts_with("| `schedule::"))
            .collect();
        assert_eq!(rows.len(), TABLE.len(), "{rows:#?}");
        for (row, s) in rows.iter().zip(TABLE) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            assert!(
                cells[1].ends_with(&format!("({})", s.name)),
                "{row}: {}",
                s.name
            );
            let fields = [
                s.at.to_string(),
                s.unit.into(),
                s.decides.into(),
                s.set_by.into(),
            ];
            assert_eq!(cells[2..6], fields, "{row}");
        }
    }

    #[test]
    fn explain_says_where_an_equation_runs() {
        assert!(equation_text(1e9, false, 2).contains("pool of 2"));
        assert!(equation_text(1e3, false, 2).contains("calling thread"));
        assert!(equation_text(1e3, true, 4).contains("tuples"));
        assert!(equation_text(1e9, false, 1).contains("one thread"));
    }
}
