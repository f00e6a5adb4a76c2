//! The shared conformance cases (copied into `tests/conformance/`), run like
//! `../shared/conformance/run.sh`: each case in a scratch copy of its folder.

mod common;
use std::path::Path;

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn all_conformance_cases_pass() {
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance");
    let mut names: Vec<_> = std::fs::read_dir(&cases)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let mut failures = Vec::new();
    for case in &names {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let work = tempfile::tempdir().unwrap();
        copy_dir(case, work.path());
        let out = common::tl(work.path(), &["run", "main.tl"]);
        let err = common::stderr(&out);
        let expected_err = case.join("expected.err");
        let why = if expected_err.exists() {
            let want = std::fs::read_to_string(&expected_err).unwrap();
            let want = want.lines().next().unwrap_or("").to_string();
            if out.status.code() != Some(1) {
                Some(format!("exit {:?}, wanted 1", out.status.code()))
            } else if err.contains("panicked") {
                Some("panicked".into())
            } else if !err.contains(&want) {
                Some(format!("stderr lacks {want:?}: {err}"))
            } else {
                None
            }
        } else if !out.status.success() {
            Some(format!("failed: {err}"))
        } else {
            let mut why = None;
            for f in std::fs::read_dir(case).unwrap() {
                let p = f.unwrap().path();
                let file = p.file_name().unwrap().to_string_lossy().into_owned();
                let Some(target) = file.strip_prefix("expected.") else {
                    continue;
                };
                let actual = if target == "out" {
                    common::stdout(&out)
                } else {
                    std::fs::read_to_string(work.path().join(target)).unwrap_or_default()
                };
                if let Err(e) = common::compare(&std::fs::read_to_string(&p).unwrap(), &actual) {
                    why = Some(format!("{target}: {e}"));
                }
            }
            why
        };
        if let Some(w) = why {
            failures.push(format!("{name}: {w}"));
        }
    }
    assert!(names.len() >= 22, "conformance cases are missing");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
