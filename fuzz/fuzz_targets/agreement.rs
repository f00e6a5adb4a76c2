//! Evaluate small programs on both engines: where both finish, every tensor must agree within
//! `verify::TOLERANCE` (a difference is a finding, as a panic is), except tensors that
//! step or compare an inexact real value ([`fragile`]), where the engines may rightly differ.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
#[allow(dead_code)]
mod common;
use tensor_logic::eval::{Engine, EvalOptions, Reference, Standard, Stop};
use tensor_logic::semantics::{Checked, Func, Kind, Node};
use tensor_logic::{Builtin, ElemType, Session, Settings};

/// Tensors that are a discontinuous function (a step, a comparison) of a real value that is
/// not exact — a sum of reals, or a computed real tensor — or that read one. Summed in another
/// order (both engines may), a value that is 0 up to rounding lands on either side of the
/// step: `step(0.7 - 0.4 + 0.3 - 0.6)` is 1 in one order and 0 in another.
fn fragile(p: &Checked) -> Vec<bool> {
    let computed: Vec<bool> = (0..p.tensors.len())
        .map(|t| p.equations.iter().any(|e| e.target == t))
        .collect();
    let real = |t: usize| p.tensors[t].kind == Kind::Real;
    fn any_read(n: &Node, f: &dyn Fn(usize) -> bool) -> bool {
        let mut hit = false;
        n.reads(&mut |t, _| hit |= f(t));
        hit
    }
    fn inexact(n: &Node, real: &dyn Fn(usize) -> bool, computed: &[bool]) -> bool {
        let summed = matches!(n, Node::Sum { vars, .. } if !vars.is_empty()) && any_read(n, real);
        summed || any_read(n, &|t| real(t) && computed[t])
    }
    fn cliff(n: &Node, real: &dyn Fn(usize) -> bool, computed: &[bool]) -> bool {
        let discontinuous = match n {
            Node::Compare(..) => true,
            Node::Call(Func::Builtin(Builtin::Step), _) => true,
            Node::Call(Func::Builtin(Builtin::Sig), args) => args.len() == 2,
            _ => false,
        };
        (discontinuous && inexact(n, real, computed))
            || n.children().into_iter().any(|c| cliff(c, real, computed))
    }
    let mut out = vec![false; p.tensors.len()];
    // Until nothing changes: a recursive component reads its own tensors.
    loop {
        let mut changed = false;
        for e in &p.equations {
            let hit = out[e.target]
                || cliff(&e.rhs, &real, &computed)
                || any_read(&e.rhs, &|t| out[t]);
            if hit && !out[e.target] {
                out[e.target] = true;
                changed = true;
            }
        }
        if !changed {
            return out;
        }
    }
}

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
    // The reference loops visit every point of an equation's iteration space, so a small
    // program over a large extent can keep them busy for minutes: a run that ends by its
    // deadline is skipped, like one that fails.
    let stop = Stop::new(Some(std::time::Duration::from_secs(5)), None);
    let o = EvalOptions { max_iters: 50, max_memory: 1 << 20, stop, ..EvalOptions::default() };
    let (Ok(engine), Ok(reference)) = (Standard.evaluate(&checked, &o), Reference.evaluate(&checked, &o)) else {
        return;
    };
    let fragile = fragile(&checked);
    // Compared as `tl run --verify` compares: relations evaluated on demand or narrowed to
    // what their readers keep, on those tuples.
    let plan = tensor_logic::Plan::new(&checked);
    for d in tensor_logic::verify::compare_planned(&checked, &plan, &engine, &reference) {
        let skip = checked.tensor_id(&d.tensor).is_some_and(|t| fragile[t]);
        assert!(skip || d.agrees(), "the engines disagree on `{}`: {d:?}\n{src}", d.tensor);
    }
});
