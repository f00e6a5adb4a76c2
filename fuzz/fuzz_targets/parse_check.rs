//! Parse and check arbitrary source text, and evaluate what checks with a small memory cap.
//! Any panic is a bug: every input must end in values or diagnostics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensor_logic::semantics::{Equation, Node};
use tensor_logic::{RunOptions, Session, Settings};

/// Points the reference evaluator visits for one equation: the product of all ranges, times
/// the row length for every `softmax`/`lnorm` (each point re-evaluates its row).
fn cost(e: &Equation) -> u128 {
    fn normalizers(n: &Node, e: &Equation) -> u128 {
        let inner = n.children().into_iter().map(|c| normalizers(c, e)).max().unwrap_or(1);
        match n {
            Node::Normalize(_, v, _) => e.vars[*v].range.max(1) as u128 * inner,
            _ => inner,
        }
    }
    let points: u128 = e.vars.iter().map(|v| v.range.max(1) as u128).product();
    points.saturating_mul(normalizers(&e.rhs, e))
}

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let mut s = Session::new();
    if s.load_source("fuzz.tl", src, std::path::Path::new("/nonexistent")).is_err() {
        return;
    }
    let settings = Settings { max_iters: 50, max_memory: 1 << 20, ..Settings::default() };
    if s.check(&settings).is_err() {
        return;
    }
    let cheap = s.checked().map(|c| c.equations.iter().all(|e| cost(e) <= 4096)).unwrap_or(false);
    if cheap {
        let _ = s.run(&RunOptions { settings, ..RunOptions::default() });
    }
});
