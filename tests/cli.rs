//! End-to-end tests of the `tl` command line (SPEC §14): subcommands, options, exit codes,
//! and files (§11).

mod common;
use common::write;
use std::path::Path;

const FAMILY: &str = "Parent(Alice, Bob). Parent(Bob, Charlie).\n\
    Ancestor(x, y) :- Parent(x, y).\nAncestor(x, z) :- Ancestor(x, y), Parent(y, z).\n";

#[test]
fn run_prints_answers_in_source_order() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "f.tl",
        &format!("{FAMILY}Ancestor(Charlie, x)?\nAncestor(Alice, x)?\nAncestor(Alice, Charlie)?\n"),
    );
    let out = common::tl(dir.path(), &["run", "f.tl"]);
    assert!(out.status.success());
    assert_eq!(
        common::stdout(&out),
        "Ancestor(Alice, Bob)\nAncestor(Alice, Charlie)\ntrue\n"
    );
}

#[test]
fn query_answers_like_forward_chaining() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "f.tl",
        &format!("{FAMILY}Ancestor(Alice, x)?\n"),
    );
    let forward = common::stdout(&common::tl(dir.path(), &["run", "f.tl"]));
    for q in ["Ancestor(Alice, x)", "Ancestor(Alice, x)?"] {
        let out = common::tl(dir.path(), &["query", "f.tl", q]);
        assert!(out.status.success(), "{}", common::stderr(&out));
        assert_eq!(common::stdout(&out), forward);
    }
    let out = common::tl(dir.path(), &["query", "f.tl", "Ancestor(Zed, x)"]);
    assert_eq!(
        common::stdout(&out),
        "",
        "an unknown constant has no answers"
    );
    let out = common::tl(dir.path(), &["query", "f.tl", "Nope(x)"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(common::stderr(&out).contains("E0101"));
}

#[test]
fn check_reports_without_running() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ok.tl", FAMILY);
    let out = common::tl(dir.path(), &["check", "ok.tl"]);
    assert!(out.status.success());
    assert!(common::stdout(&out).starts_with("ok:"));
    assert!(common::stdout(&common::tl(dir.path(), &["check", "ok.tl", "--quiet"])).is_empty());
    write(
        dir.path(),
        "bad.tl",
        "Odd(x, z) :- Parent(x, y).\nParent(A, B).\n",
    );
    let out = common::tl(dir.path(), &["check", "bad.tl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(common::stderr(&out).contains("bad.tl:1:8"));
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "f.tl", FAMILY);
    for args in [
        vec![],
        vec!["frob"],
        vec!["run"],
        vec!["run", "f.tl", "--threads", "0"],
        vec!["run", "f.tl", "--precision", "f16"],
        vec!["run", "f.tl", "--set", "N"],
        vec!["run", "f.tl", "--max-memory", "12Q"],
    ] {
        let out = common::tl(dir.path(), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let out = common::tl(dir.path(), &["run", "missing.tl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(common::stderr(&out).contains("missing.tl"));
}

#[test]
fn set_overrides_a_scalar_and_precision_changes_printing() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "s.tl",
        "N = 3\nX = [1, 2]\nY[i] = X[i] / N\nY?\n",
    );
    let out = common::tl(dir.path(), &["run", "s.tl", "--set", "N=4"]);
    assert_eq!(common::stdout(&out), "Y[0] = 0.25\nY[1] = 0.5\n");
    let f32 = common::stdout(&common::tl(dir.path(), &["run", "s.tl"]));
    let f64 = common::stdout(&common::tl(
        dir.path(),
        &["run", "s.tl", "--precision", "f64"],
    ));
    assert_eq!(f32, "Y[0] = 0.33333334\nY[1] = 0.6666667\n");
    assert_eq!(
        f64,
        "Y[0] = 0.3333333333333333\nY[1] = 0.6666666666666666\n"
    );
}

#[test]
fn thread_count_does_not_change_results() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for ex in [
        "examples/transformer.tl",
        "examples/gnn.tl",
        "examples/family.tl",
    ] {
        let one = common::tl(root, &["run", ex, "--threads", "1"]);
        let two = common::tl(root, &["run", ex, "--threads", "2"]);
        assert_eq!(one.stdout, two.stdout, "{ex}");
    }
}

#[test]
fn files_round_trip_and_are_written_atomically() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "edge.csv", "a,b\nb,c\n");
    write(
        dir.path(),
        "w.tl",
        "Edge = \"edge.csv\"\nPath(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n\
         W = [[1.5, 2], [3, 4]]\nCount[x] = Path(x, y)\n\"out/path.csv\" = Path\n\"out/w.npy\" = W\n\
         \"out/m.safetensors\" = W\n\"out/m.safetensors\" = Count\n\"out/count.tsv\" = Count\n",
    );
    let out = common::tl(dir.path(), &["run", "w.tl"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let o = dir.path().join("out");
    assert_eq!(
        std::fs::read_to_string(o.join("path.csv")).unwrap(),
        "a,b\na,c\nb,c\n"
    );
    assert_eq!(
        std::fs::read_to_string(o.join("count.tsv")).unwrap(),
        "a\t2\nb\t1\nc\t0\n"
    );
    let names: Vec<String> = std::fs::read_dir(&o)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        4,
        "no temporary files are left behind: {names:?}"
    );
    write(
        dir.path(),
        "r.tl",
        "W = \"out/w.npy\"\nCount = \"out/m.safetensors\"\nP = \"out/path.csv\"\n\
         S = W[i, j]\nT[x] = P(x, y)\nW?\nS?\nT?\nCount?\n",
    );
    let out = common::tl(dir.path(), &["run", "r.tl"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(common::stdout(&out), "W[0, 0] = 1.5\nW[0, 1] = 2\nW[1, 0] = 3\nW[1, 1] = 4\nS = 10.5\nT[\"a\"] = 2\nT[\"b\"] = 1\nCount[0] = 2\nCount[1] = 1\nCount[2] = 0\n");
}

#[test]
fn nothing_is_written_when_evaluation_fails() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "f.tl",
        "X = [1, 2]\n\"x.tsv\" = X\nY[i] = 1 - Y[i] + 0 X[i]\n",
    );
    let out = common::tl(dir.path(), &["run", "f.tl", "--max-iters", "20"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.path().join("x.tsv").exists());
}

#[test]
fn load_binds_parameters_from_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "save.tl",
        "W = [[1, 2], [3, 4]]\n\"ckpt.safetensors\" = W\n",
    );
    assert!(common::tl(dir.path(), &["run", "save.tl"]).status.success());
    write(
        dir.path(),
        "use.tl",
        "W : real[2, 2]\nX = [1, 1]\nY[i] = W[i, j] X[j]\nY?\n",
    );
    let out = common::tl(dir.path(), &["run", "use.tl", "--load", "ckpt.safetensors"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(common::stdout(&out), "Y[0] = 3\nY[1] = 7\n");
}

#[test]
fn parameters_are_initialised_from_the_seed() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "p.tl",
        "W : real[3, 4]\nB ~ ones\nB : real[3]\nV ~ uniform(-1, 1)\nV : real[2]\nW?\nB?\nV?\n",
    );
    let a = common::tl(dir.path(), &["run", "p.tl", "--seed", "7"]);
    let b = common::tl(dir.path(), &["run", "p.tl", "--seed", "7"]);
    let c = common::tl(dir.path(), &["run", "p.tl", "--seed", "8"]);
    assert!(a.status.success(), "{}", common::stderr(&a));
    assert_eq!(a.stdout, b.stdout);
    assert_ne!(a.stdout, c.stdout);
    let text = common::stdout(&a);
    assert!(text.contains("B[2] = 1"));
    assert_eq!(text.lines().count(), 12 + 3 + 2);
}

#[test]
fn explain_shows_each_strata_plan() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = common::tl(root, &["explain", "examples/family.tl"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    assert!(
        text.contains("Ancestor (recursive), semi-naive joins"),
        "{text}"
    );
    assert!(text.contains("Parent(y, z) [index on column 1]"), "{text}");
    assert!(
        text.contains("Children (not recursive), counting by joins"),
        "{text}"
    );
    // `Children[x] = Parent(x, y)` counts runs of sorted tuples, and explain says so.
    assert!(
        text.contains("run lengths: one pass over the sorted tuples of Parent(x, y), no index"),
        "{text}"
    );
}

/// Each dense equation says where it runs at `--threads N`, and `--schedule` prints every
/// thread split of the engine with what set it.
#[test]
fn explain_says_where_dense_equations_run_and_prints_the_schedule() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let at = |threads: &str| {
        let out = common::tl(root, &["explain", "examples/mlp.tl", "--threads", threads]);
        assert!(out.status.success(), "{}", common::stderr(&out));
        common::stdout(&out)
    };
    assert!(
        at("1").contains("    threads: one thread (--threads 1)"),
        "{}",
        at("1")
    );
    assert!(at("2").contains("    threads: on the calling thread (under 2^25 FLOPs)"));
    let out = common::tl(root, &["explain", "examples/mlp.tl", "--schedule"]);
    let text = common::stdout(&out);
    assert!(text.contains("equation work: 33554432 FLOPs"), "{text}");
    assert!(
        text.contains("rule rows: 4096 rows of the first atom"),
        "{text}"
    );
    assert_eq!(text.matches("  set by: ").count(), 15, "{text}");
}

#[test]
fn verify_reports_the_largest_difference_per_tensor_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "v.tl",
        &format!("{FAMILY}W = [[1, 2], [3, 4]]\nX = [0.5, 0.25]\nY[i] = sig(W[i, j] X[j])\nY?\n"),
    );
    let out = common::tl(dir.path(), &["run", "v.tl", "--verify"]);
    assert!(out.status.success());
    assert!(
        common::stdout(&out).starts_with("Y[0] = "),
        "answers stay on stdout"
    );
    let err = common::stderr(&out);
    assert!(
        err.contains("verify: standard engine against the reference evaluator"),
        "{err}"
    );
    assert!(err.contains("Ancestor  identical"), "{err}");
    assert!(err.contains("Y         identical"), "{err}");
}

#[test]
fn bench_times_evaluation_alone() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "b.tl",
        "A = [[1, 2], [3, 4]]\nC[i, k] = A[i, j] A[j, k]\n",
    );
    let out = common::tl(dir.path(), &["bench", "b.tl", "--repeat", "3"]);
    assert!(out.status.success());
    let text = common::stdout(&out);
    assert!(text.starts_with("evaluation: min "), "{text}");
    assert!(text.contains("over 3 runs"), "{text}");
}

/// Runs `tl args` in `dir` with `input` on standard input.
fn tl_with_input(dir: &Path, args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tl"))
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn run_reads_the_program_from_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = tl_with_input(
        dir.path(),
        &["run", "-"],
        "A(1). A(2).\nB(x) :- A(x), x > 1.\nB(x)?\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert_eq!(common::stdout(&out), "B(2)\n");
    let bad = tl_with_input(dir.path(), &["run", "-"], "B(x) :- A(x).\n");
    assert_eq!(bad.status.code(), Some(1));
    assert!(common::stderr(&bad).contains("<stdin>:1"));
}

#[test]
fn repl_answers_each_query_with_the_program_so_far_and_survives_errors() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "edges.tl", "Edge(1, 2). Edge(2, 3).\n");
    let input = "\
:load edges.tl
Path(x, y) :- Edge(x, y).
Path(1, x)?
Path(x, z) :- Path(x, y), Edge(y, z).
Broken(x) :- Missing(x).
Path(1, x)?
Path(1, x)
:explain
:nonsense
:reset
Path(1, x)?
Edge(5, 6).
Edge(x, y)?
:quit
Edge(7, 8).
";
    let out = tl_with_input(dir.path(), &["repl"], input);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let stdout = common::stdout(&out);
    let answers: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("Path(") || l.starts_with("Edge("))
        .collect();
    assert_eq!(
        answers,
        vec!["Path(1, 2)", "Path(1, 2)", "Path(1, 3)", "Edge(5, 6)"],
        "{stdout}"
    );
    assert!(stdout.contains("stratum"), "`:explain` prints the plan");
    let stderr = common::stderr(&out);
    assert!(
        stderr.contains("E0101") && stderr.contains("Missing"),
        "{stderr}"
    );
    assert!(stderr.contains("unknown command `:nonsense`"), "{stderr}");
    assert!(
        stderr.contains("hint: to ask, end the line with `?`: `Path(1, x)?`"),
        "a query typed without `?` gets a hint: {stderr}"
    );
}

/// `tl run --decisions` prints what ran each stratum: as planned, or the loop nests with the
/// planned kernel and why it declined (`P[2 * x] max=` leaves its odd elements undefined, so
/// `P` is not the dense array `Q`'s dense plan reads).
#[test]
fn decisions_show_what_ran_and_why_a_kernel_declined() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "d.tl",
        "G = [1, 5, 3]\nP[2 * x] max= G[x]\nQ[x] = 2 P[x]\nQ[2]?\n",
    );
    let out = common::tl(dir.path(), &["run", "d.tl", "--decisions"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(common::stdout(&out), "Q[2] = 10\n");
    let log = common::stderr(&out);
    assert!(
        log.contains("stratum 2: P: dense contractions, as planned"),
        "{log}"
    );
    assert!(
        log.contains("stratum 3: Q: loop nests, planned dense contractions (the planned kernel declined: `P` is not stored as planned)"),
        "{log}"
    );
}
