//! A new user's first hour (issue 47): the usual mistakes, typed as a new user types them,
//! each with what it must get — a located error, a warning, or the right number — never a
//! silent wrong answer.

mod common;

/// Runs `tl ARGS… main.tl` on `src` in a fresh folder; returns (exit code, stdout, stderr).
fn run(src: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "main.tl", src);
    let mut all: Vec<&str> = args.to_vec();
    all.push("main.tl");
    let out = common::tl(dir.path(), &all);
    let err = common::stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    (out.status.code(), common::stdout(&out), err)
}

#[test]
fn a_tensor_defined_twice_is_summed_with_a_warning_unless_plus_equals_says_so() {
    let (code, out, err) = run("Y = 1\nY = 2\nY?\n", &["run"]);
    assert_eq!((code, out.trim()), (Some(0), "Y = 3"), "{err}");
    assert!(
        err.contains("warning[W0302]") && err.contains("main.tl:2:1"),
        "{err}"
    );
    let (_, out, err) = run("Y = 1\nY += 2\nY?\n", &["run"]);
    assert_eq!(out.trim(), "Y = 3");
    assert!(!err.contains("W0302"), "`+=` says the sum is meant: {err}");
    let (_, _, err) = run("X = [1, 2]\nY[i] = X[i]\nY[j] = 2 X[j]\nY?\n", &["run"]);
    assert!(
        err.contains("warning[W0302]") && err.contains("main.tl:3:1"),
        "{err}"
    );
    // Different elements, or a base case beside a recursive one, do not add up.
    let base = "W[0, 1] = 4\nW[1, 2] = 1\nA[0, j] = W[0, j]\nA[l, j] = A[l - 1, j]\nA?\n";
    let (_, _, err) = run(base, &["run"]);
    assert!(!err.contains("W0302"), "{err}");
}

#[test]
fn threads_default_to_every_core() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let (code, out, err) = run("A = [1, 2]\nS = A[i]\n", &["bench", "--repeat", "1"]);
    assert_eq!(code, Some(0), "{err}");
    let s = if cores == 1 { "" } else { "s" };
    assert!(out.contains(&format!("{cores} thread{s})")), "{out}");
    let (_, out, _) = run(
        "A = [1, 2]\nS = A[i]\n",
        &["bench", "--repeat", "1", "--threads", "1"],
    );
    assert!(out.contains("1 thread)"), "{out}");
}

#[test]
fn nan_propagates_through_elementwise_functions_as_in_numpy() {
    let src = "Z = [0]\nN[i] = log(Z[i] - 1)\nR[i] = relu(N[i])\nM[i] = max(N[i], 0)\n\
               L[i] = min(0, N[i])\nS[i] = step(N[i])\nR?\nM?\nL?\nS?\n";
    for engine in ["standard", "reference"] {
        let (code, out, err) = run(src, &["run", "--engine", engine]);
        assert_eq!(code, Some(0), "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines,
            ["R[0] = NaN", "M[0] = NaN", "L[0] = NaN", "S[0] = NaN"],
            "{engine}"
        );
    }
}

#[test]
fn a_tensor_read_without_its_indices_is_a_located_error_with_a_hint() {
    let (code, out, err) = run("X = [1, 2]\nY = X\nY?\n", &["run"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        err.contains("error[E0103]") && err.contains("main.tl:2:5"),
        "{err}"
    );
    assert!(
        err.contains("`Y = X[i]`") || err.contains("= X[i]` sums"),
        "{err}"
    );
    // A query of the whole tensor is not a read without indices.
    let (code, out, err) = run("X = [1, 2]\nX?\n", &["run"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "X[0] = 1\nX[1] = 2\n"),
        "{err}"
    );
}

#[test]
fn a_read_out_of_range_at_every_point_is_warned_about() {
    let (code, out, err) = run("X = [1, 2, 3]\nY[i] = X[i + 5]\nY?\n", &["run"]);
    assert_eq!((code, out.as_str()), (Some(0), ""));
    assert!(
        err.contains("warning[W0201]") && err.contains("main.tl:2:8"),
        "{err}"
    );
    assert!(
        err.contains("X[i + 5]"),
        "the warning shows the read: {err}"
    );
    let (_, out, err) = run("X = [1, 2, 3]\nY[i] = X[i + 1]\nY?\n", &["run"]);
    assert_eq!(out, "Y[0] = 2\nY[1] = 3\n");
    assert!(!err.contains("W0201"), "{err}");
}

#[test]
fn a_lowercase_constant_in_a_rule_body_gets_the_hint_written_as_the_program_needs() {
    let src = "Parent(Alice, Bob).\nParent(Bob, Cy).\nKid(y) :- Parent(alice, y).\nKid(y)?\n";
    let (code, _, err) = run(src, &["run"]);
    assert_eq!(code, Some(0));
    assert!(
        err.contains("warning[W0701]") && err.contains("main.tl:3:18"),
        "{err}"
    );
    assert!(err.contains("write `Alice`"), "{err}");
    // A lowercase constant (from a file) is written quoted, or it is a variable again.
    let src = "Parent(\"alice\", \"bob\").\nParent(alice, y)?\n";
    let (_, _, err) = run(src, &["run"]);
    assert!(err.contains("write `\"alice\"`"), "{err}");
    // A variable that joins is not taken for a constant.
    let src = "Parent(Alice, Bob).\nSelf(alice) :- Parent(alice, alice).\n";
    let (_, _, err) = run(src, &["check"]);
    assert!(!err.contains("W0701"), "{err}");
}

#[test]
fn a_csv_header_row_is_not_read_as_data() {
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "people.csv", "name,age\nAnn,31\nBob,17\n");
    let src = "People = \"people.csv\"\nAdult(x) :- People(x, a), a >= 18.\nAdult(x)?\n";
    common::write(dir.path(), "main.tl", src);
    let out = common::tl(dir.path(), &["run", "main.tl"]);
    assert_eq!(
        common::stdout(&out),
        "Adult(Ann)\n",
        "{}",
        common::stderr(&out)
    );
}

/// Programs whose sizes span the budget, dense and relational: each finishes or is refused
/// with E0601 (exit 1); none is killed by a signal (the OOM killer, an abort on a failed
/// allocation). A budget of 64 MiB keeps each case well under a second.
#[test]
fn programs_around_the_memory_budget_finish_or_are_refused_never_killed() {
    let dense = |n: usize| format!("N : {n}\nA : real[N, N]\nA ~ zeros\nS = A[i, j]\nS?\n");
    let joins = |n: usize| {
        let facts: String = (0..n).map(|i| format!("A({i}).\n")).collect();
        format!("{facts}P(x, y, z) :- A(x), A(y), A(z).\nC = P(x, y, z)\nC?\n")
    };
    let mut refused = 0;
    let cases = [
        (10, false),
        (1000, false),
        (2500, false),
        (6000, false),
        (100_000, false),
    ]
    .into_iter()
    .chain([(10, true), (60, true), (120, true), (400, true)]);
    for (n, relational) in cases {
        let src = if relational { joins(n) } else { dense(n) };
        let (code, out, err) = run(&src, &["run", "--max-memory", "64MiB"]);
        match code {
            Some(0) => assert!(out.starts_with("S = 0") || out.starts_with("C = "), "{out}"),
            Some(1) => {
                assert!(err.contains("error[E0601]"), "n = {n}: {err}");
                refused += 1;
            }
            other => panic!("n = {n} (relational: {relational}) ended with {other:?}: {err}"),
        }
    }
    assert!(refused >= 3, "the larger cases are over the budget");
}

#[test]
fn a_binding_error_names_the_binding_not_the_programs_first_line() {
    let mut s = tensor_logic::Session::new();
    let src = "Parent : bool[Person, Person]\nAnc(x, y) :- Parent(x, y).\n";
    s.load_source("<program>", src, std::path::Path::new("."))
        .unwrap();
    let rows = vec![vec![
        "Ann".to_string(),
        "Bob".to_string(),
        "Cy".to_string(),
        "x".to_string(),
    ]];
    s.bind_rows("Parent", &rows);
    let err = s.check(&tensor_logic::Settings::default()).unwrap_err();
    let text = err.render("<program>", src);
    assert!(text.contains("binding `Parent`:1"), "{text}");
    assert!(!text.contains("<program>:1:1"), "{text}");
}

/// Where the system gives less memory than the budget allows (`ulimit -v` here), a program is
/// refused with E0601 and exit 1, never aborted (SIGABRT): parameters are drawn straight into
/// their own buffers, the budget is asked before they are, and a buffer the system refuses
/// anyway is an error naming its tensor (or, deep in a kernel, the bytes asked for).
#[test]
fn an_allocation_the_system_refuses_is_an_error_not_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let n12 = "N : 12000\nA : real[N, N]\n";
    let cases = [
        // The case: 549 MiB of f32 fits 600M, but its f64 copy did not fit the limit.
        (
            format!("{n12}A ~ normal(0, 1)\nS = A[i, j]\nS?\n"),
            "600M",
            "over the memory budget",
        ),
        (
            "N : 20000\nA : real[N, N]\nA ~ zeros\nS = A[i, j]\nS?\n".into(),
            "100G",
            "`A` its 1.5 GiB",
        ),
        (
            "N : 20000\nA : real[N, N]\nA ~ normal(0, 1)\nS = A[i, j]\nS?\n".into(),
            "100G",
            "`A` its 1.5 GiB",
        ),
        (
            format!("{n12}A ~ zeros\nB[i, j] = A[i, j] + 1\nS = B[i, j]\nS?\n"),
            "100G",
            "would not give",
        ),
    ];
    for (src, budget, says) in cases {
        common::write(dir.path(), "main.tl", &src);
        let script = format!(
            "ulimit -v 1000000; exec '{}' run main.tl --max-memory {budget}",
            env!("CARGO_BIN_EXE_tl")
        );
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{src}: {err}");
        assert!(
            err.contains("error[E0601]") && err.contains(says),
            "{src}: {err}"
        );
    }
}
