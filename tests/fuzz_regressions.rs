//! Inputs the fuzzer found (`fuzz/`), kept so they stay fixed: each must end in values or
//! diagnostics promptly, never a panic.

mod common;
use std::path::Path;

#[test]
fn fuzzer_findings_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.is_file() {
            continue;
        }
        let out = common::tl(&dir, &["run", path.to_str().unwrap(), "--max-iters", "50"]);
        let err = common::stderr(&out);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{}: {err}",
            path.display()
        );
        assert!(!err.contains("panicked"), "{}: {err}", path.display());
        n += 1;
    }
    assert!(n > 0);
}

#[test]
fn an_index_used_only_as_a_divisor_has_no_range() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let out = common::tl(&dir, &["check", "divisor_only_index.tl"]);
    assert!(
        common::stderr(&out).contains("E0202"),
        "{}",
        common::stderr(&out)
    );
}

#[test]
fn engine_disagreements_the_fuzzer_found_stay_fixed() {
    // `fuzz/fuzz_targets/agreement.rs`: both engines in f64 must agree (`--verify` exits 1
    // when they do not).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions/agreement");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let args = [
            "run",
            path.to_str().unwrap(),
            "--verify",
            "--precision",
            "f64",
        ];
        let out = common::tl(&dir, &args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            path.display(),
            common::stderr(&out)
        );
        n += 1;
    }
    assert!(n > 0);
}
