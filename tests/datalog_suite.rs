//! A suite of Datalog programs in the style of Soufflé's tests: each `NAME.tl` under
//! `tests/datalog_suite/` runs with `tl run --verify` (the reference evaluator beside the
//! engine; a first line `# verify: no` leaves it out where its naive loops would be too
//! slow) and must print exactly `NAME.out`, whose answers were worked out by hand; so must
//! the differential engine, on one worker and on two.

mod common;
use std::path::Path;

#[test]
fn every_program_prints_its_expected_answers_on_both_engines() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/datalog_suite");
    let mut programs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tl"))
        .collect();
    programs.sort();
    assert!(!programs.is_empty());
    let mut failures = Vec::new();
    for path in &programs {
        let source = std::fs::read_to_string(path).unwrap();
        let expected = std::fs::read_to_string(path.with_extension("out")).unwrap();
        let mut args = vec!["run", path.to_str().unwrap()];
        if !source.starts_with("# verify: no") {
            args.push("--verify");
        }
        let out = common::tl(&dir, &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.code() != Some(0) || stdout.trim_end() != expected.trim_end() {
            failures.push(format!(
                "{} (exit {:?}):\n--- printed\n{stdout}--- expected\n{expected}--- stderr\n{}",
                path.display(),
                out.status.code(),
                common::stderr(&out)
            ));
        }
        // The differential engine prints the same, on one worker and on two.
        for workers in ["1", "2"] {
            let p = path.to_str().unwrap();
            let args = ["run", p, "--engine", "differential", "--workers", workers];
            let out = common::tl(&dir, &args);
            let stdout = String::from_utf8_lossy(&out.stdout);
            if out.status.code() != Some(0) || stdout.trim_end() != expected.trim_end() {
                failures.push(format!(
                    "{} on the differential engine, {workers} workers (exit {:?}):\n--- printed\n{stdout}--- expected\n{expected}--- stderr\n{}",
                    path.display(),
                    out.status.code(),
                    common::stderr(&out)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
