//! `tl fmt` on every program the repository holds: the bundled examples are in the canonical
//! layout already, formatting is a fixed point, and a formatted program gives the same
//! answers as the program as written.

use std::path::{Path, PathBuf};
use tensor_logic::{RunOptions, Session};

fn programs(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "tl") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn answers(source: &str, dir: &Path) -> Result<Vec<String>, String> {
    let mut s = Session::new();
    let options = RunOptions {
        write_files: false,
        ..RunOptions::default()
    };
    s.load_source("p.tl", source, dir)
        .and_then(|()| s.run(&options))
        .map_err(|d| d.0.iter().map(|d| d.code).collect::<Vec<_>>().join(","))
}

#[test]
fn the_examples_are_formatted_and_formatting_is_a_fixed_point() {
    let mut all = programs("examples");
    for dir in ["tests", "../shared/conformance"] {
        all.extend(programs(dir));
    }
    assert!(all.len() > 100, "{}", all.len());
    for p in &all {
        let source = std::fs::read_to_string(p).unwrap_or_default();
        let Ok(once) = tensor_logic::ide::format(&source) else {
            continue; // a program with a syntax error (a test of errors) has no layout
        };
        let twice = tensor_logic::ide::format(&once).unwrap_or_default();
        assert_eq!(once, twice, "{}", p.display());
        if p.starts_with(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")) {
            assert_eq!(
                once,
                source,
                "{} is not in the canonical layout",
                p.display()
            );
        }
    }
}

#[test]
fn a_formatted_program_gives_the_same_answers() {
    let mut all = programs("tests/datalog_suite");
    all.extend(programs("tests/conformance"));
    let mut compared = 0;
    for p in &all {
        let source = std::fs::read_to_string(p).unwrap_or_default();
        // Written loosely: the layout a user might type, which the formatter undoes.
        let loose: String = source
            .replace(", ", ",")
            .replace(" = ", "=")
            .replace(" :- ", ":-");
        let Ok(formatted) = tensor_logic::ide::format(&loose) else {
            continue;
        };
        let dir = p.parent().unwrap_or(Path::new("."));
        assert_eq!(
            answers(&formatted, dir),
            answers(&source, dir),
            "{}",
            p.display()
        );
        compared += 1;
    }
    assert!(compared > 40, "{compared}");
}
