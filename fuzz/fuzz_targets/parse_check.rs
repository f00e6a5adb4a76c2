//! Parse and check arbitrary source text, and evaluate what checks with a small memory cap.
//! Any panic is a bug: every input must end in values or diagnostics.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
#[allow(dead_code)]
mod common;
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
    let cheap = s.checked().is_some_and(|c| c.equations.iter().all(|e| common::cheap_equation(e, 4096)));
    if cheap {
        let _ = s.run(&RunOptions { settings, ..RunOptions::default() });
    }
});
