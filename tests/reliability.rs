//! Regression tests for what broke under hostile or unusual input (issue 17): deep programs,
//! huge lines, files that must read back as they were written, and silent acceptance.

mod common;
use common::write;

use std::path::Path;

#[test]
fn a_chain_of_100000_equations_is_checked_without_overflowing_the_stack() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = String::from("T0 = 1\n");
    for k in 1..100_000 {
        src.push_str(&format!("T{k} = T{} + 1\n", k - 1));
    }
    src.push_str("T99999?\n");
    write(dir.path(), "chain.tl", &src);
    let out = common::tl(dir.path(), &["check", "chain.tl"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(common::stdout(&out).contains("100000 strata"));
}

#[test]
fn an_error_in_a_huge_line_quotes_a_window_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = String::from("A = [");
    src.push_str(&"1, ".repeat(1_000_000));
    src.push_str("+]\n");
    write(dir.path(), "big.tl", &src);
    let out = common::tl(dir.path(), &["check", "big.tl"]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("error[E0001]"), "{err}");
    // The column is the original one; the quoted line is a window with its cuts marked.
    assert!(err.contains("--> big.tl:1:3000006"), "{err}");
    assert!(err.len() < 2_000, "{} bytes on stderr", err.len());
    assert!(err.contains("...,"), "{err}");
}

#[test]
fn symbols_that_need_quoting_read_back_as_written() {
    let dir = tempfile::tempdir().unwrap();
    // Fields quoted by the CSV rules: a comma, a tab, a leading `#`, a doubled quote.
    write(
        dir.path(),
        "in.tsv",
        "\"x,y\"\tp\n\"a\tb\"\tq\n\"#h\"\tr\n\"say \"\"hi\"\"\"\ts\n",
    );
    write(
        dir.path(),
        "write.tl",
        "A = \"in.tsv\"\n\"out.csv\" = A\n\"out.tsv\" = A\n",
    );
    let out = common::tl(dir.path(), &["run", "write.tl"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    write(
        dir.path(),
        "read.tl",
        "A = \"in.tsv\"\nB = \"out.csv\"\nC = \"out.tsv\"\nA(x, y)?\nB(x, y)?\nC(x, y)?\n",
    );
    let out = common::tl(dir.path(), &["run", "read.tl"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    let rows = |name: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(name))
            .map(|l| l[name.len()..].to_string())
            .collect()
    };
    assert_eq!(rows("A("), rows("B("), "{text}");
    assert_eq!(rows("A("), rows("C("), "{text}");
    assert_eq!(rows("A(").len(), 4, "{text}");
    // A relation read from a file is written back without a value column.
    let csv = std::fs::read_to_string(dir.path().join("out.csv")).unwrap();
    assert!(csv.lines().all(|l| !l.ends_with(",1")), "{csv}");
}

#[test]
fn rows_after_comment_lines_keep_their_line_numbers() {
    let dir = tempfile::tempdir().unwrap();
    for (file, line) in [
        ("# header\na\tb\nc\n", 3),
        ("a\tb\n# between\nc\n", 3),
        ("a\tb\n\n# two\n# comments\nc\n", 5),
    ] {
        write(dir.path(), "r.tsv", file);
        write(dir.path(), "r.tl", "R = \"r.tsv\"\nR(x, y)?\n");
        let out = common::tl(dir.path(), &["run", "r.tl"]);
        let err = common::stderr(&out);
        assert!(err.contains(&format!("r.tsv:{line}:")), "{file:?}: {err}");
    }
}

/// An `.npy` file of f16 values, written byte by byte as NumPy lays it out.
fn f16_npy(values: &[f32]) -> Vec<u8> {
    let mut header = format!(
        "{{'descr': '<f2', 'fortran_order': False, 'shape': ({},), }}",
        values.len()
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    for &v in values {
        out.extend(half::f16::from_f32(v).to_le_bytes());
    }
    out
}

#[test]
fn f16_npy_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("h.npy"), f16_npy(&[1.5, -2.25, 0.125])).unwrap();
    write(dir.path(), "h.tl", "H = \"h.npy\"\nH[i]?\n");
    let out = common::tl(dir.path(), &["run", "h.tl"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    assert!(text.contains("H[0] = 1.5"), "{text}");
    assert!(text.contains("H[1] = -2.25"), "{text}");
    assert!(text.contains("H[2] = 0.125"), "{text}");
}

/// Two tensors reading one safetensors file each get their own entry (the file is not
/// read once for the first and handed to the second).
#[test]
fn tensors_read_their_own_entries_of_one_safetensors_file() {
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{"A":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"B":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    for v in [1.0f32, 2.0, 10.0, 20.0] {
        bytes.extend(v.to_le_bytes());
    }
    std::fs::write(dir.path().join("two.safetensors"), bytes).unwrap();
    write(
        dir.path(),
        "s.tl",
        "A = \"two.safetensors\"\nB = \"two.safetensors\"\nA?\nB?\n",
    );
    let out = common::tl(dir.path(), &["run", "s.tl"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    assert!(
        text.contains("A[1] = 2") && text.contains("B[1] = 20"),
        "{text}"
    );
}

#[cfg(unix)]
#[test]
fn written_files_get_the_usual_mode_and_stale_temporaries_go() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "w.tl", "A = [1, 2]\n\"a.tsv\" = A\n");
    // What a run killed before its rename leaves behind.
    write(dir.path(), ".a.tsv.tl-stale1", "partial");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 022 && '{}' run w.tl",
            env!("CARGO_BIN_EXE_tl")
        ))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    let mode = std::fs::metadata(dir.path().join("a.tsv"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // A replaced file keeps its mode.
    std::fs::set_permissions(
        dir.path().join("a.tsv"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let out = common::tl(dir.path(), &["run", "w.tl"]);
    assert!(out.status.success());
    let mode = std::fs::metadata(dir.path().join("a.tsv"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn mistakes_on_the_command_line_are_errors_not_ignored() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "p.tl", "N = 3\nA[i] = i\nA : real[N]\nA[i]?\n");
    let out = common::tl(dir.path(), &["run", "p.tl", "--set", "Nope=3"]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E0101]") && err.contains("`Nope`"),
        "{err}"
    );
    assert!(
        err.contains("N"),
        "the note names the constants there are: {err}"
    );
    for bad in ["nan", "inf", "-1"] {
        let out = common::tl(dir.path(), &["run", "p.tl", "--tol", bad]);
        assert_eq!(out.status.code(), Some(2), "--tol {bad}");
    }
    let out = common::tl(dir.path(), &["run", "p.tl", "--set", "N=4"]);
    assert!(
        common::stdout(&out).contains("A[3] = 3"),
        "{}",
        common::stderr(&out)
    );
}

#[test]
fn a_ground_query_outside_a_real_tensor_is_an_error_and_of_a_relation_false() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "q.tl", "A = [1, 2]\nA[5]?\n");
    let out = common::tl(dir.path(), &["run", "q.tl"]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E0701]") && err.contains("q.tl:2:3"),
        "{err}"
    );
    assert!(err.contains("shape [2]"), "{err}");
    write(dir.path(), "r.tl", "R(1).\nR(7)?\nR(Zed)?\n");
    let out = common::tl(dir.path(), &["run", "r.tl"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(common::stdout(&out).matches("false").count(), 2);
}

#[test]
fn a_scalar_constant_sizes_a_declared_axis() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "n.tl",
        "N = 4\nA : real[N, N]\nA ~ ones\nB[i] = A[i, j]\nB[i]?\n",
    );
    let out = common::tl(dir.path(), &["run", "n.tl"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(common::stdout(&out).contains("B[3] = 4"));
}

#[test]
fn identifiers_may_be_letters_of_any_script() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "u.tl",
        "Ω = [1, 2]\nβ[i] = 2 Ω[i]\nβ[i]?\nLiebt(Jürgen, Zoë).\nLiebt(Jürgen, ÿ)?\n",
    );
    let out = common::tl(dir.path(), &["run", "u.tl"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    assert!(text.contains("β[1] = 4"), "{text}");
    // `Zoë` is a symbol (capitalised) and `ÿ` a variable (lowercase).
    assert!(text.contains("Liebt(Jürgen, Zoë)"), "{text}");
}

#[test]
fn a_timeout_ends_a_run_that_would_not_finish_naming_its_equation() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "hang.tl",
        "E[1000000000, 1000000000] = 1\nS = E[x, y]\nS?\n",
    );
    // 10¹⁸ points on the reference loops: only the timeout ends it.
    let start = std::time::Instant::now();
    let out = common::tl(
        dir.path(),
        &[
            "run",
            "hang.tl",
            "--engine",
            "reference",
            "--timeout",
            "0.5",
        ],
    );
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E0403]") && err.contains("hang.tl:2:1"),
        "{err}"
    );
    assert!(start.elapsed().as_secs() < 30);
    // The standard engine costs the defined elements.
    let out = common::tl(dir.path(), &["run", "hang.tl", "--timeout", "60"]);
    assert_eq!(common::stdout(&out).trim(), "S = 1");
    for bad in ["0", "-1", "nan"] {
        let out = common::tl(dir.path(), &["run", "hang.tl", "--timeout", bad]);
        assert_eq!(out.status.code(), Some(2), "--timeout {bad}");
    }
}

#[cfg(unix)]
#[test]
fn ctrl_c_ends_a_run_cleanly_with_the_equation() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "hang.tl",
        "E[1000000000, 1000000000] = 1\nS = E[x, y]\n\"s.tsv\" = S\n",
    );
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_tl"))
        .args(["run", "hang.tl", "--engine", "reference"])
        .current_dir(dir.path())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let killed = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E0403]") && err.contains("interrupted"),
        "{err}"
    );
    assert!(!dir.path().join("s.tsv").exists(), "nothing is written");
}

#[test]
fn the_memory_check_counts_the_bytes_of_the_storage_type() {
    let dir = tempfile::tempdir().unwrap();
    // 10⁶ elements: 4 MB as f32, 8 MB as f64, each with 8 MB of f64 scratch while it is
    // filled: 12 MB and 16 MB against a 13 MiB budget (§15: the whole evaluation).
    write(
        dir.path(),
        "m.tl",
        "N : 1000\nA : real[N, N]\nA ~ ones\nS = A[i, j]\nS?\n",
    );
    let out = common::tl(dir.path(), &["run", "m.tl", "--max-memory", "13M"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let out = common::tl(
        dir.path(),
        &["run", "m.tl", "--max-memory", "13M", "--precision", "f64"],
    );
    let err = common::stderr(&out);
    assert!(
        err.contains("error[E0601]") && err.contains("`A` [1000, 1000] F64: 7.6 MiB"),
        "{err}"
    );
}

/// Runs `tl` with `TL_MAX_SIMD` capping the vector width.
fn capped(dir: &Path, cap: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_tl"));
    c.args(args).current_dir(dir);
    match cap {
        Some(cap) => c.env("TL_MAX_SIMD", cap),
        None => c.env_remove("TL_MAX_SIMD"),
    };
    c.output().unwrap()
}

#[test]
fn every_vector_width_gives_the_same_bits() {
    // Softmax rows in f32, a Viterbi max-product and Adam updates all run on the widest
    // vectors the processor has; AVX-512 (where present), AVX2 (where present) and the
    // portable loops must print the same digits (shortest round-trip forms: the same bits).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let mut viterbi = String::from("S : 8\nT : 40\nO : 5\nObs : bool[T, O]\n");
    for t in 0..40 {
        viterbi.push_str(&format!("Obs({t}, {}).\n", (t * 7 + 3) % 5));
    }
    viterbi.push_str(
        "Trans : real[S, S]\nTrans ~ uniform(0, 0.2)\nEmit : real[S, O]\nEmit ~ uniform(0.5, 1.5)\n\
         Init : real[S]\nInit ~ uniform(0, 1)\nE[t, s] = Emit[s, o] Obs(t, o)\n\
         V[0, s] max= Init[s] E[0, s]\nV[t + 1, s] max= V[t, r] Trans[r, s] E[t + 1, s]\n\
         V[39, s]?\n\
         Q : real[4, 64]\nQ ~ normal(0, 1)\nK : real[64, 64]\nK ~ normal(0, 1)\n\
         A[p, q.] = softmax(Q[p, d] K[q, d] / 8)\nA[3, q]?\n",
    );
    write(dir.path(), "v.tl", &viterbi);
    let runs: Vec<(Vec<&str>, &Path)> = vec![
        (vec!["run", "v.tl"], dir.path()),
        (
            vec!["train", "examples/tiny_lm.tl", "--epochs", "2", "--quiet"],
            root,
        ),
    ];
    for (args, at) in runs {
        let widest = capped(at, None, &args);
        assert!(widest.status.success(), "{}", common::stderr(&widest));
        for cap in ["avx2", "portable"] {
            let out = capped(at, Some(cap), &args);
            assert_eq!(
                common::stdout(&out),
                common::stdout(&widest),
                "{args:?} under TL_MAX_SIMD={cap}"
            );
        }
    }
}

#[test]
fn a_timeout_ends_a_long_datalog_fixpoint_between_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let mut src: String = (0..4000).map(|i| format!("E({i}, {}).\n", i + 1)).collect();
    src.push_str("P(x, y) :- E(x, y).\nP(x, z) :- P(x, y), E(y, z).\nS = P(x, y)\nS?\n");
    write(dir.path(), "cl.tl", &src);
    let start = std::time::Instant::now();
    let out = common::tl(dir.path(), &["run", "cl.tl", "--timeout", "0.3"]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E0403]") && err.contains("cl.tl:4001:1"),
        "{err}"
    );
    assert!(start.elapsed().as_secs() < 20);
}

#[test]
fn a_timeout_ends_a_join_inside_its_first_round() {
    let dir = tempfile::tempdir().unwrap();
    // 600⁴ assignments in one round of one rule: only a look at the clock inside the join
    // ends it.
    let mut src: String = (0..600).map(|i| format!("A({i}).\n")).collect();
    src.push_str("T(x) :- A(x), A(y), A(z), A(w), x != y, y != z, z != w.\nT?\n");
    write(dir.path(), "join.tl", &src);
    for threads in ["1", "2"] {
        let start = std::time::Instant::now();
        let args = ["run", "join.tl", "--timeout", "0.3", "--threads", threads];
        let out = common::tl(dir.path(), &args);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("error[E0403]") && err.contains("join.tl:601:1"),
            "{err}"
        );
        assert!(start.elapsed().as_secs() < 20);
    }
}
