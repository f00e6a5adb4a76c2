//! The memory budget (§15) bounds what an evaluation allocates: a random program under a
//! random `--max-memory` (dense kernels, loop nests that keep defined elements, a training
//! step) is either refused with E0601, or runs with its live heap growing by at most the
//! budget plus a fixed allowance (the process's own small allocations: thread pools, plans,
//! strings). A counting allocator measures it.

use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use tensor_logic::learn::train::TrainOptions;
use tensor_logic::{RunOptions, Session};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is the system allocator's; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What the process may allocate beside the budgeted tensors and scratch.
const ALLOWANCE: usize = 4 << 20;

/// What running `src` under a budget of `budget` bytes grew the heap by, and the rendered
/// error if it was refused.
fn grown(src: &str, budget: u64, train: bool) -> (usize, Option<String>) {
    let mut s = Session::new();
    s.load_source("b.tl", src, Path::new(".")).unwrap();
    let mut opts = RunOptions::default();
    opts.settings.max_memory = budget;
    opts.threads = 1;
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let refused = match train {
        false => s.run_with(&tensor_logic::eval::Standard, &opts).err(),
        true => {
            let t = TrainOptions {
                loss: "S".into(),
                steps: Some(2),
                ..TrainOptions::default()
            };
            s.train(&opts, &t, &mut |_| {}).err()
        }
    };
    let grew = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    (grew, refused.map(|d| d.render("b.tl", src)))
}

/// The equations of a random program over `A : real[n, k]` and `B : real[k, m]`.
const SHAPES: [&str; 5] = [
    "C[i, j] = relu(A[i, l] B[l, j])\nS = C[i, j]\n",
    "C[i, j] = A[i, l] B[l, j] + A[i, l]\nT[i] = softmax(C[i, j])\nS = T[i]\n",
    "D[i, l] = sig(A[i, l])\nC[i, j] = D[i, l] B[l, j]\nS = C[i, j] C[i, j]\n",
    // Loop nests: defined elements of a `max=` tensor, and a sum under a comparison.
    "C[i, j] max= A[i, l] + B[l, j]\nS = C[i, j]\n",
    "C[i, j] = A[i, l] B[l, j] (A[i, l] > B[l, j])\nS = C[i, j]\n",
];

/// Losses of a random training step over the same parameters.
const LOSSES: [&str; 3] = [
    "C[i, j] = relu(A[i, l] B[l, j])\nS = (C[i, j] - 1) * (C[i, j] - 1)\n",
    "C[i, j] = A[i, l] B[l, j]\nS = C[i, j] C[i, j]\n",
    "S = A[i, l] B[l, j]\n",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    // One property, so that no other test allocates while one is measured.
    #[test]
    fn an_evaluation_or_training_step_stays_within_its_budget_or_is_refused(
        n in 16usize..1200,
        k in 1usize..300,
        m in 16usize..1200,
        shape in 0usize..SHAPES.len() + LOSSES.len(),
        scale in 0.25f64..16.0,
    ) {
        let train = shape >= SHAPES.len();
        let equations = match train {
            true => LOSSES[shape - SHAPES.len()],
            false => SHAPES[shape],
        };
        // Loop nests visit every point: their reductions are kept short.
        let k = if (3..SHAPES.len()).contains(&shape) { k % 6 + 1 } else { k };
        let src = format!(
            "A : real[{n}, {k}]\nB : real[{k}, {m}]\nA ~ normal(0, 1)\nB ~ normal(0, 1)\n{equations}S?\n"
        );
        // Budgets around the largest tensor's f64 size, where refusing and running meet.
        let budget = ((scale * (n * m * 8) as f64) as usize).max(64 << 10);
        let (grew, refused) = grown(&src, budget as u64, train);
        eprintln!("STAT shape={shape} refused={} grew={grew} budget={budget}", refused.is_some());
        if let Some(text) = &refused {
            prop_assert!(text.contains("E0601"), "{}", text);
        }
        prop_assert!(grew <= budget + ALLOWANCE, "grew {} over a budget of {} (refused: {})\n{}", grew, budget, refused.is_some(), src);
    }
}
