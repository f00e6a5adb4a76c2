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

/// The agreement target found the engines apart on `Down(x - 1) :- Down(x) x > -5`: the
/// comparison holds where `Down(x)` is false, so the reference's result depended on which
/// values its column held when it started. A recursion through a comparison is now refused
/// like one through `not`; joined as an atom (`Down(x), x > -5`) it counts down to -5.
#[test]
fn a_recursion_through_a_comparison_is_not_stratified() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let out = common::tl(&dir, &["check", "comparison_in_its_own_recursion.tl"]);
    let err = common::stderr(&out);
    assert!(err.contains("E0302") && err.contains("comparison"), "{err}");
    let tmp = tempfile::tempdir().unwrap();
    common::write(
        tmp.path(),
        "d.tl",
        "Down(0).\nDown(x - 1) :- Down(x), x > -5.\nDown(x)?\n",
    );
    let out = common::tl(tmp.path(), &["run", "d.tl", "--verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert_eq!(common::stdout(&out).lines().count(), 6);
}

/// A named integer constant at an axis of symbols is the literal it stands for: E0104.
#[test]
fn a_named_constant_is_no_symbol() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let out = common::tl(&dir, &["check", "named_constant_at_a_symbol_axis.tl"]);
    let err = common::stderr(&out);
    assert!(
        err.contains("E0104") && err.contains("integer constant 2"),
        "{err}"
    );
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

#[test]
fn file_reader_findings_end_promptly() {
    // `fuzz/fuzz_targets/read_files.rs`: the first byte picks the extension, the rest is the
    // file. Each must be read or rejected within seconds (a nested `.npy` header once made the
    // header parser backtrack for minutes).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions/read_files");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let Some((&pick, contents)) = bytes.split_first() else {
            continue;
        };
        let ext = ["tsv", "csv", "npy", "safetensors", "txt"][pick as usize % 5];
        let work = tempfile::tempdir().unwrap();
        std::fs::write(work.path().join(format!("f.{ext}")), contents).unwrap();
        common::write(work.path(), "read.tl", &format!("A = \"f.{ext}\"\nA?\n"));
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tl"))
            .args(["run", "read.tl"])
            .current_dir(work.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed().as_secs() > 60 {
                child.kill().unwrap();
                panic!("{}: still reading after a minute", path.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(
            matches!(status.code(), Some(0 | 1)),
            "{}: {status}",
            path.display()
        );
        n += 1;
    }
    assert!(n > 0);
}

#[test]
fn a_division_by_zero_at_a_corner_writes_nothing_below_zero() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let out = common::tl(&dir, &["run", "division_by_zero_corner.tl", "--verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        printed.trim_end(),
        "P[0, 0] = 4\nP[0, 1] = 3\nP[1, 0] = 8\nP[1, 1] = 7"
    );
}

/// A `min=` recursion whose weight is scaled by a constant (`Dist[x, y] + 2 W[y, z]`, also
/// written `+1 W[y, z]`) runs on the semi-naive kernel, not on loop nests over every row of
/// a huge extent: the fuzzer's program ends at once, and on a small extent agrees with the
/// reference; a negative scale of the recursive tensor itself (which reverses which value
/// is the extreme) is left to the loop nests.
#[test]
fn a_scaled_weight_keeps_min_recursion_semi_naive() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let out = common::tl(
        &dir,
        &["run", "slow_check_of_a_scaled_min_weight.tl", "--decisions"],
    );
    let err = common::stderr(&out);
    assert!(
        err.contains("Dist: semi-naive min=/max=, as planned"),
        "{err}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let program = |body: &str| {
        format!(
            "W[0, 1] = 2\nW[1, 2] = 3\nW[0, 2] = 7\nW[2, 3] = 1\n\
             D[x, y] min= W[x, y]\nD[x, z] min= {body}\nD?\n"
        )
    };
    let bodies = [
        ("D[x, y] + 2 W[y, z]", true),
        ("D[x, y] + 0.5 W[y, z]", true),
        ("D[x, y] + -1 W[y, z]", true),
        ("2 D[x, y] + W[y, z]", true),
        ("-1 D[x, y] + W[y, z]", false),
    ];
    for (scale, planned) in bodies {
        common::write(tmp.path(), "s.tl", &program(scale));
        let out = common::tl(tmp.path(), &["run", "s.tl", "--verify", "--decisions"]);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{scale}: {err}");
        assert_eq!(
            err.contains("D: semi-naive min=/max="),
            planned,
            "{scale}: {err}"
        );
    }
}

#[test]
fn masks_leave_points_out_beside_infinities_on_both_engines() {
    // docs/language.md, "masks": a false atom or comparison, or an undefined element, makes
    // its product 0 beside an infinity; a defined 0 and a divisor do not (`F[1]`, `G`).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions/agreement");
    let expected = "A[0] = inf\nA[1] = 1\nB[0] = inf\nB[1] = 0\nC[0] = 2\nC[1] = 3\n\
                    F[0] = 3\nF[1] = NaN\nG[0, 0] = 0.4\nG[0, 1] = inf\nG[1, 0] = inf\n\
                    G[1, 1] = 2.5\n";
    for engine in ["standard", "reference"] {
        let out = common::tl(
            &dir,
            &["run", "masks_beside_infinities.tl", "--engine", engine],
        );
        assert_eq!(common::stdout(&out), expected, "{engine}");
    }
}

#[test]
fn integer_division_by_zero_is_nothing_and_real_remainder_nan_on_both_engines() {
    // docs/language.md §5.1 choice: `59 % 0` is nothing (W is not written), `X[i] % 0` of a
    // real tensor is NaN, and a sum whose every point is nothing is nothing (`K[1]`).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions/agreement");
    let expected = "W = 0\nY[0] = NaN\nY[1] = 1\nY[2] = NaN\nK[0] = 0\nK[1] = 0\nK[2] = 0\n";
    for engine in ["standard", "reference"] {
        let file = "integer_remainder_by_zero_in_a_constant.tl";
        let out = common::tl(&dir, &["run", file, "--engine", engine]);
        assert_eq!(common::stdout(&out), expected, "{engine}");
    }
}
