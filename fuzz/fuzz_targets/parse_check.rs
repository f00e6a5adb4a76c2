//! Parse and check arbitrary source text, and evaluate what checks with a small memory cap.
//! Any panic is a bug: every input must end in values or diagnostics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensor_logic::{RunOptions, Session, Settings};

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
    let cheap = s
        .checked()
        .map(|c| c.equations.iter().all(|e| e.vars.iter().map(|v| v.range.max(1) as u128).product::<u128>() <= 4096))
        .unwrap_or(false);
    if cheap {
        let _ = s.run(&RunOptions { settings, tol: None, write_files: false });
    }
});
