//! The memory budget (§15) bounds what an evaluation allocates: a random dense program under a
//! random `--max-memory` is either refused with E0601 before its tensors are allocated, or
//! runs with its live heap growing by at most the budget plus a fixed allowance (the process's
//! own small allocations: thread pools, plans, strings). A counting allocator measures it.

use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn an_evaluation_stays_within_its_budget_or_is_refused(
        n in 16usize..1200,
        k in 1usize..300,
        m in 16usize..1200,
        shape in 0usize..3,
        budget_kib in 64u64..32_768,
    ) {
        let equation = match shape {
            0 => "C[i, j] = relu(A[i, l] B[l, j])\nS = C[i, j]\n",
            1 => "C[i, j] = A[i, l] B[l, j] + A[i, l]\nT[i] = softmax(C[i, j])\nS = T[i]\n",
            _ => "D[i, l] = sig(A[i, l])\nC[i, j] = D[i, l] B[l, j]\nS = C[i, j] C[i, j]\n",
        };
        let src = format!(
            "A : real[{n}, {k}]\nB : real[{k}, {m}]\nA ~ normal(0, 1)\nB ~ normal(0, 1)\n{equation}S?\n"
        );
        let mut s = Session::new();
        s.load_source("b.tl", &src, Path::new(".")).unwrap();
        let mut opts = RunOptions::default();
        opts.settings.max_memory = budget_kib << 10;
        opts.threads = 1;
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let result = s.run_with(&tensor_logic::eval::Standard, &opts);
        let grew = PEAK.load(Ordering::Relaxed).saturating_sub(before);
        let budget = (budget_kib << 10) as usize;
        match result {
            Ok(_) => prop_assert!(grew <= budget + ALLOWANCE, "grew {} over a budget of {}\n{}", grew, budget, src),
            Err(d) => {
                let text = d.render("b.tl", &src);
                prop_assert!(text.contains("E0601"), "{}", text);
                prop_assert!(grew <= budget + ALLOWANCE, "refused after growing {}\n{}", grew, src);
            }
        }
    }
}
