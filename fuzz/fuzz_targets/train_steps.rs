//! A few `tl train` steps of small programs: no panic, and a run that ends without an error
//! has finite losses and parameters (a non-finite loss must be E0801).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
#[allow(dead_code)]
mod common;
use tensor_logic::learn::train::TrainOptions;
use tensor_logic::{RunOptions, Session, Settings};

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let mut s = Session::new();
    if s.load_source("fuzz.tl", src, std::path::Path::new("/nonexistent")).is_err() {
        return;
    }
    let settings = Settings { max_iters: 20, max_memory: 1 << 20, ..Settings::default() };
    let Ok(checked) = s.check(&settings) else { return };
    if !common::cheap(checked, 2048) || checked.params.is_empty() {
        return;
    }
    let options = RunOptions { settings, ..RunOptions::default() };
    let train = TrainOptions { steps: Some(3), ..TrainOptions::default() };
    if let Ok(t) = s.train(&options, &train, &mut |_| {}) {
        assert!(t.losses.iter().all(|l| l.is_finite()), "{:?}\n{src}", t.losses);
        for (name, p) in &t.params {
            assert!(
                p.to_dense_values().iter().all(|v| v.is_finite()),
                "`{name}` is not finite after training\n{src}"
            );
        }
    }
});
