//! Helpers shared by the end-to-end tests: running the `tl` binary and comparing its output
//! the way the conformance suite does (numbers within rtol 1e-4, atol 1e-5).

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Loads and runs `src` on `engine` in a session, the errors rendered.
pub fn run_source(
    src: &str,
    engine: &dyn tensor_logic::eval::Engine,
) -> Result<tensor_logic::Session, String> {
    let mut s = tensor_logic::Session::new();
    s.load_source("p.tl", src, Path::new("."))
        .map_err(|d| d.render("p.tl", src))?;
    s.run_with(engine, &tensor_logic::RunOptions::default())
        .map_err(|d| d.render("p.tl", src))?;
    Ok(s)
}

/// Runs `tl` with `args` in `dir`.
pub fn tl(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tl"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the tl binary runs")
}

/// Writes `text` to `dir/name`.
pub fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// Stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn close(a: &str, b: &str) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-5 + 1e-4 * y.abs(),
        _ => a == b,
    }
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Compares expected and actual output line by line; `Err` describes the first difference.
pub fn compare(expected: &str, actual: &str) -> Result<(), String> {
    let exp: Vec<&str> = expected
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let act: Vec<&str> = actual
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    for (n, (e, a)) in exp.iter().zip(&act).enumerate() {
        let ok = match (e.rsplit_once('='), a.rsplit_once('=')) {
            (Some((le, ve)), Some((la, va))) if !e.contains("==") => {
                squash(le) == squash(la) && close(va.trim(), ve.trim())
            }
            _ => squash(e) == squash(a),
        };
        if !ok {
            let fields_e: Vec<&str> = e
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|s| !s.is_empty())
                .collect();
            let fields_a: Vec<&str> = a
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|s| !s.is_empty())
                .collect();
            if fields_e.len() == fields_a.len()
                && fields_e.iter().zip(&fields_a).all(|(x, y)| close(y, x))
            {
                continue;
            }
            return Err(format!("line {}: expected {e:?}, got {a:?}", n + 1));
        }
    }
    if exp.len() != act.len() {
        return Err(format!("expected {} lines, got {}", exp.len(), act.len()));
    }
    Ok(())
}
