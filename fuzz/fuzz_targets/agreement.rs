//! Evaluate small programs on both engines: where both finish, every tensor must agree within
//! `verify::TOLERANCE` (a difference is a finding, as a panic is).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
#[allow(dead_code)]
mod common;
use tensor_logic::eval::{Engine, EvalOptions, Reference, Standard};
use tensor_logic::{ElemType, Session, Settings};

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let mut s = Session::new();
    if s.load_source("fuzz.tl", src, std::path::Path::new("/nonexistent")).is_err() {
        return;
    }
    // f64 reals: the engines' summation orders then differ far below the tolerance.
    let settings = Settings {
        max_iters: 50,
        max_memory: 1 << 20,
        real: ElemType::F64,
        ..Settings::default()
    };
    let Ok(checked) = s.check(&settings) else { return };
    if !common::cheap(checked, 4096) {
        return;
    }
    let checked = checked.clone();
    let o = EvalOptions { max_iters: 50, max_memory: 1 << 20, ..EvalOptions::default() };
    let (Ok(engine), Ok(reference)) = (Standard.evaluate(&checked, &o), Reference.evaluate(&checked, &o)) else {
        return;
    };
    for d in tensor_logic::verify::compare(&checked, &engine, &reference) {
        assert!(d.agrees(), "the engines disagree on `{}`: {d:?}\n{src}", d.tensor);
    }
});
