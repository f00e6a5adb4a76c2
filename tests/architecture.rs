//! Invariants of the pipeline that the compiler cannot check (docs/design.md): the reference
//! evaluator, the oracle every kernel is tested against, depends on none of them; the
//! modules it shares with the engine (values before evaluation, accumulation, fixpoint
//! checks) do not depend on the engine either.

use std::path::Path;

/// Modules of the fast engine and of planning.
const ENGINE: [&str; 7] = [
    "dense",
    "nest",
    "relational",
    "standard",
    "steps",
    "plan::",
    "plan;",
];

/// The `super::…` and `crate::…` paths a source file names, outside its tests.
fn paths(file: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(file)).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut out = Vec::new();
    for word in code.split(|c: char| c.is_whitespace() || "(){},<>&".contains(c)) {
        if word.starts_with("super::") || word.starts_with("crate::") {
            out.push(word.to_string());
        }
    }
    out
}

#[test]
fn the_reference_evaluator_imports_nothing_from_the_engine() {
    for file in [
        "src/eval/reference.rs",
        "src/eval/accumulate.rs",
        "src/eval/fixpoint.rs",
        "src/eval/initial.rs",
        "src/eval/stop.rs",
    ] {
        let found = paths(file);
        assert!(!found.is_empty() || file != "src/eval/reference.rs");
        for p in &found {
            for m in ENGINE {
                // The trait's `run` names the plan type it is handed (and ignores).
                let allowed = p == "crate::plan::Plan";
                assert!(
                    allowed || !p.contains(m),
                    "{file} depends on the engine through `{p}`"
                );
            }
        }
    }
}

/// The `.rs` files of a source folder.
fn files_in(dir: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out: Vec<String> = std::fs::read_dir(root.join(dir))
        .unwrap()
        .map(|e| format!("{dir}/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".rs"))
        .collect();
    out.sort();
    out
}

#[test]
fn the_language_service_never_evaluates() {
    // An editor's keystroke must not start unbounded work: `ide` checks, never runs.
    let files = files_in("src/ide");
    assert!(files.len() >= 6);
    for file in files {
        for p in paths(&file) {
            assert!(
                !p.starts_with("crate::eval") && !p.contains("string_rounds"),
                "{file} reaches evaluation through `{p}`"
            );
        }
    }
}

#[test]
fn why_reads_values_through_the_reference_evaluator_only() {
    // Explanations evaluate with the oracle's expression code over the values they explain,
    // never with an engine's kernels.
    for file in files_in("src/why") {
        for p in paths(&file) {
            for m in ENGINE {
                assert!(!p.contains(m), "{file} depends on the engine through `{p}`");
            }
        }
    }
}

/// The `.rs` files of a source folder and of the folders inside it.
fn files_under(dir: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = files_in(dir);
    for e in std::fs::read_dir(root.join(dir)).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(files_under(&format!(
                "{dir}/{}",
                e.file_name().to_string_lossy()
            )));
        }
    }
    out
}

#[test]
fn each_stage_imports_only_the_stages_before_it() {
    // Data flows one way (docs/design.md): syntax, semantics, planning, execution, learning,
    // with the library's session and tools above them all.
    let later: [(&str, &[&str]); 4] = [
        (
            // The parser knows no function by name: the caller says which names are calls.
            "src/syntax",
            &[
                "semantics",
                "plan",
                "eval",
                "learn",
                "session",
                "io",
                "functions",
            ],
        ),
        ("src/semantics", &["plan", "eval", "learn", "session"]),
        ("src/plan", &["eval", "learn", "session"]),
        ("src/eval", &["learn", "session"]),
    ];
    for (dir, forbidden) in later {
        let files = files_under(dir);
        assert!(files.len() >= 5, "{dir}: {files:?}");
        for file in files {
            for p in paths(&file) {
                for stage in forbidden {
                    assert!(
                        !p.starts_with(&format!("crate::{stage}")),
                        "{file} reaches a later stage through `{p}`"
                    );
                }
            }
        }
    }
}

#[test]
fn syntax_and_semantics_do_no_io() {
    // Files are read before checking (`io::read_program_files`), the memory budget by the
    // caller (`io::default_max_memory`), parameters drawn by `tensor::Init`: the checker is
    // a function of its input.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = files_under("src/syntax");
    files.extend(files_under("src/semantics"));
    for file in files {
        let text = std::fs::read_to_string(root.join(&file)).unwrap();
        let before_tests = text.split("#[cfg(test)]").next().unwrap_or("");
        let code: String = before_tests
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        for io in [
            "std::fs",
            "std::io",
            "std::env",
            "/proc/",
            "rand::",
            "rand_chacha",
            "read_file",
            "read_program_files",
        ] {
            assert!(!code.contains(io), "{file} does I/O through `{io}`");
        }
    }
}
