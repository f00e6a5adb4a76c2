//! The differential engine end to end: `tl run --engine differential` on one process and on
//! two over localhost (started by the test) prints and writes exactly what the standard
//! engine does; wrong combinations are errors; a process killed mid-run ends the other with
//! E0404 and no output file.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

const PROGRAM: &str = "Edge = \"edge.tsv\"
Node(x) :- Edge(x, y).
Node(y) :- Edge(x, y).
Path(x, y) :- Edge(x, y).
Path(x, z) :- Path(x, y), Edge(y, z).
Cyclic(x) :- Path(x, x).
Acyclic(x) :- Node(x), not Cyclic(x).
Sink(x) :- Node(x), not Edge(x, _).
Reach[x] = Path(x, y)
Hops[y] min= Edge(0, y)
Hops[z] min= Hops[y] + Edge(y, z)
Deepest max= Hops[x]
\"path.tsv\" = Path
Acyclic(x)?
Sink(x)?
Reach[x]?
Hops[x]?
Deepest?
";

/// A graph of `n` nodes: a chain with a few back edges and chords.
fn edges(n: u32) -> String {
    let mut s = String::new();
    for i in 0..n - 1 {
        s.push_str(&format!("{i}\t{}\n", i + 1));
        if i % 7 == 3 {
            s.push_str(&format!("{}\t{}\n", i + 1, i / 2));
        }
        if i % 5 == 1 {
            s.push_str(&format!("{i}\t{}\n", (i * 3) % n));
        }
    }
    s
}

fn setup(n: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "p.tl", PROGRAM);
    common::write(dir.path(), "edge.tsv", &edges(n));
    dir
}

/// Two free localhost ports, in a hosts file.
fn hosts(dir: &Path) -> std::path::PathBuf {
    // Both listeners are held until both ports are known, so the two differ.
    let listeners: Vec<std::net::TcpListener> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    drop(listeners);
    let text = format!(
        "# two processes on this machine\n127.0.0.1:{}\n\n127.0.0.1:{}\n",
        ports[0], ports[1]
    );
    let path = dir.join("hosts.txt");
    std::fs::write(&path, text).unwrap();
    path
}

fn spawn(dir: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tl"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `tl` with `args`, its standard input a pipe to write to.
fn spawn_fed(dir: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tl"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `tl watch` on `program` as process `i` of two on `hosts`, with `extra` options, fed
/// through standard input.
fn watch_of_two(dir: &Path, hosts: &Path, (program, i): (&str, &str), extra: &[&str]) -> Child {
    let h = hosts.to_str().unwrap();
    let base = [
        "watch",
        program,
        "--processes",
        "2",
        "--process",
        i,
        "--hosts",
        h,
    ];
    spawn_fed(dir, &[&base[..], extra].concat())
}

/// A check that the next line `child` prints (within 30 s) is the one given.
fn expecting(child: &mut Child) -> impl Fn(&str) {
    let next = receiving(child);
    move |line: &str| assert_eq!(next().as_deref(), Some(line), "no `{line}`")
}

/// The child's next line of standard output (`None` after 30 s without one).
fn receiving(child: &mut Child) -> impl Fn() -> Option<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    move || rx.recv_timeout(std::time::Duration::from_secs(30)).ok()
}

#[test]
fn one_process_prints_and_writes_what_the_standard_engine_does() {
    let dir = setup(120);
    let standard = common::tl(dir.path(), &["run", "p.tl"]);
    assert!(standard.status.success(), "{}", common::stderr(&standard));
    let written = std::fs::read_to_string(dir.path().join("path.tsv")).unwrap();
    for workers in ["1", "2", "3"] {
        std::fs::remove_file(dir.path().join("path.tsv")).unwrap();
        let args = [
            "run",
            "p.tl",
            "--engine",
            "differential",
            "--workers",
            workers,
        ];
        let out = common::tl(dir.path(), &args);
        assert!(out.status.success(), "{}", common::stderr(&out));
        assert_eq!(common::stdout(&out), common::stdout(&standard));
        let again = std::fs::read_to_string(dir.path().join("path.tsv")).unwrap();
        assert_eq!(again, written, "{workers} workers");
    }
}

#[test]
fn two_processes_over_localhost_answer_like_one() {
    let dir = setup(150);
    let single = common::tl(dir.path(), &["run", "p.tl"]);
    let written = std::fs::read(dir.path().join("path.tsv")).unwrap();
    std::fs::remove_file(dir.path().join("path.tsv")).unwrap();
    let hosts = hosts(dir.path());
    let h = hosts.to_str().unwrap();
    let common_args = ["--engine", "differential", "--processes", "2", "--hosts", h];
    let mut args1 = vec!["run", "p.tl", "--process", "1", "--workers", "2"];
    args1.extend(common_args);
    let p1 = spawn(dir.path(), &args1);
    let mut args0 = vec!["run", "p.tl", "--process", "0", "--workers", "2"];
    args0.extend(common_args);
    let out0 = common::tl(dir.path(), &args0);
    let out1 = p1.wait_with_output().unwrap();
    assert!(out0.status.success(), "{}", common::stderr(&out0));
    assert!(out1.status.success(), "{}", common::stderr(&out1));
    assert_eq!(common::stdout(&out0), common::stdout(&single));
    assert_eq!(common::stdout(&out1), "", "only process 0 prints");
    assert_eq!(std::fs::read(dir.path().join("path.tsv")).unwrap(), written);
}

#[test]
fn processes_with_other_worker_counts_refuse_each_other() {
    let dir = setup(20);
    let hosts = hosts(dir.path());
    let h = hosts.to_str().unwrap();
    let base = [
        "run",
        "p.tl",
        "--engine",
        "differential",
        "--processes",
        "2",
    ];
    let mut a1: Vec<&str> = base.to_vec();
    a1.extend(["--hosts", h, "--process", "1", "--workers", "1"]);
    let p1 = spawn(dir.path(), &a1);
    let mut a0: Vec<&str> = base.to_vec();
    a0.extend(["--hosts", h, "--process", "0", "--workers", "2"]);
    let out0 = common::tl(dir.path(), &a0);
    let out1 = p1.wait_with_output().unwrap();
    for out in [&out0, &out1] {
        assert_eq!(out.status.code(), Some(1));
        let err = common::stderr(out);
        assert!(
            err.contains("E0404") && err.contains("same `--workers`"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_killed_process_ends_the_other_with_an_error_and_no_output_file() {
    // Long enough that the kill lands mid-run: the closure of a 1,500-node chain.
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "p.tl", PROGRAM);
    let chain: String = (0..1500).map(|i| format!("{i}\t{}\n", i + 1)).collect();
    common::write(dir.path(), "edge.tsv", &chain);
    let hosts = hosts(dir.path());
    let h = hosts.to_str().unwrap();
    let base = [
        "run",
        "p.tl",
        "--engine",
        "differential",
        "--processes",
        "2",
    ];
    let mut a1: Vec<&str> = base.to_vec();
    a1.extend(["--hosts", h, "--process", "1"]);
    let mut p1 = spawn(dir.path(), &a1);
    let mut a0: Vec<&str> = base.to_vec();
    a0.extend(["--hosts", h, "--process", "0"]);
    let p0 = spawn(dir.path(), &a0);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    p1.kill().unwrap();
    p1.wait().unwrap();
    let out0 = p0.wait_with_output().unwrap();
    let err = common::stderr(&out0);
    assert_eq!(
        out0.status.code(),
        Some(1),
        "{err}\n{}",
        common::stdout(&out0)
    );
    assert!(err.contains("E0404"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!dir.path().join("path.tsv").exists());
}

#[test]
fn wrong_cluster_options_are_usage_errors() {
    let dir = setup(10);
    let cases: [(&[&str], &str); 4] = [
        (&["--workers", "2"], "need `--engine differential`"),
        (
            &["--engine", "differential", "--processes", "2"],
            "needs `--hosts FILE`",
        ),
        (
            &[
                "--engine",
                "differential",
                "--processes",
                "2",
                "--process",
                "2",
            ],
            "is not below",
        ),
        (
            &[
                "--engine",
                "differential",
                "--processes",
                "2",
                "--hosts",
                "missing.txt",
            ],
            "cannot read the hosts file",
        ),
    ];
    for (extra, expected) in cases {
        let mut args = vec!["run", "p.tl"];
        args.extend(extra);
        let out = common::tl(dir.path(), &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            common::stderr(&out).contains(expected),
            "{args:?}: {}",
            common::stderr(&out)
        );
    }
    common::write(dir.path(), "bad.txt", "127.0.0.1:1\nnot a host\n");
    let args = [
        "run",
        "p.tl",
        "--engine",
        "differential",
        "--processes",
        "2",
        "--hosts",
        "bad.txt",
    ];
    let out = common::tl(dir.path(), &args);
    assert!(
        common::stderr(&out).contains("line 2"),
        "{}",
        common::stderr(&out)
    );
}

#[test]
fn explain_prints_the_dataflow_and_where_other_strata_run() {
    let dir = setup(10);
    let out = common::tl(dir.path(), &["explain", "p.tl", "--engine", "differential"]);
    let text = common::stdout(&out);
    assert!(out.status.success(), "{}", common::stderr(&out));
    for part in [
        "inputs: Edge",
        "Path (iterate",
        "join a",
        "antijoin a",
        "Reach (count per head)",
        "(shared by 2 rules)",
    ] {
        assert!(text.contains(part), "{part} missing from\n{text}");
    }
}

#[test]
fn watch_keeps_a_minimum_up_to_date_and_explain_shows_its_reduce() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "edge.tsv", "1\t2\n2\t3\n");
    common::write(
        dir.path(),
        "h.tl",
        "Edge = \"edge.tsv\"\nHop[x, y] min= Edge(x, y)\nHop[x, z] min= Hop[x, y] + Edge(y, z)\nHop[1, x]?\n",
    );
    let out = common::tl(dir.path(), &["explain", "h.tl", "--engine", "differential"]);
    let text = common::stdout(&out);
    assert!(
        text.contains("Hop (iterate: a fixpoint scope of its own, min per head"),
        "{text}"
    );
    assert!(text.contains("map to Hop with its value"), "{text}");
    let mut child = spawn_fed(dir.path(), &["watch", "h.tl", "--workers", "2"]);
    let expect = expecting(&mut child);
    expect("Hop[1, 2] = 1");
    expect("Hop[1, 3] = 2");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "+Edge(1, 3)").unwrap();
    expect("-Hop[1, 3] = 2");
    expect("+Hop[1, 3] = 1");
    writeln!(stdin, "-Edge(1, 3)").unwrap();
    expect("-Hop[1, 3] = 1");
    expect("+Hop[1, 3] = 2");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn watch_takes_new_weights_from_stdin_and_from_file_edits() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "w.tsv", "1\t2\t5\n2\t3\t1\n");
    common::write(
        dir.path(),
        "d.tl",
        "W = \"w.tsv\"\nDist[x, y] min= W[x, y]\nDist[x, z] min= Dist[x, y] + W[y, z]\nDist[1, x]?\n",
    );
    let mut child = spawn_fed(dir.path(), &["watch", "d.tl"]);
    let expect = expecting(&mut child);
    expect("Dist[1, 2] = 5");
    expect("Dist[1, 3] = 6");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "+W(1, 3, 2)").unwrap();
    expect("-Dist[1, 3] = 6");
    expect("+Dist[1, 3] = 2");
    // The file's row `1 2 5` becomes `1 2 1`: the old weight goes, the new one comes.
    std::thread::sleep(std::time::Duration::from_millis(50));
    common::write(dir.path(), "w.tsv", "1\t2\t1\n2\t3\t1\n");
    expect("-Dist[1, 2] = 5");
    expect("+Dist[1, 2] = 1");
    writeln!(stdin, "-W(1, 2)").unwrap();
    expect("-Dist[1, 2] = 1");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn watch_over_two_processes_takes_weights_on_new_nodes_before_and_after_changed_weights() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "w.tsv", "1\t2\t5\n2\t3\t1\n");
    common::write(
        dir.path(),
        "d.tl",
        "W = \"w.tsv\"\nDist[x, y] min= W[x, y]\nDist[x, z] min= Dist[x, y] + W[y, z]\nDist[1, x]?\n",
    );
    let hosts = hosts(dir.path());
    let watch = |i| watch_of_two(dir.path(), &hosts, ("d.tl", i), &[]);
    let one = watch("1");
    let mut zero = watch("0");
    let next = receiving(&mut zero);
    let lines = |n: usize| {
        let mut got: Vec<String> = (0..n).filter_map(|_| next()).collect();
        got.sort();
        got
    };
    assert_eq!(lines(2), ["Dist[1, 2] = 5", "Dist[1, 3] = 6"]);
    let mut stdin = zero.stdin.take().unwrap();
    // Node 9 is new: both processes start again, with this weight.
    writeln!(stdin, "+W(3, 9, 4)").unwrap();
    assert_eq!(lines(1), ["+Dist[1, 9] = 10"]);
    // A changed weight runs as a round of the new run.
    writeln!(stdin, "+W(1, 2, 1)").unwrap();
    let mut want = [
        "+Dist[1, 2] = 1",
        "+Dist[1, 3] = 2",
        "+Dist[1, 9] = 6",
        "-Dist[1, 2] = 5",
        "-Dist[1, 3] = 6",
        "-Dist[1, 9] = 10",
    ];
    want.sort();
    assert_eq!(lines(6), want);
    // Another new node after weights changed: the run starts again with every weight so far.
    writeln!(stdin, "+W(9, 11, 1)").unwrap();
    assert_eq!(lines(1), ["+Dist[1, 11] = 7"]);
    writeln!(stdin, "-W(2, 3)").unwrap();
    let mut want = ["-Dist[1, 3] = 2", "-Dist[1, 9] = 6", "-Dist[1, 11] = 7"];
    want.sort();
    assert_eq!(lines(3), want);
    drop(stdin);
    let out = zero.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    let out = one.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
}

#[test]
fn watch_prints_the_answers_that_change_with_stdin_facts_and_file_edits() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "edge.tsv", "1\t2\n2\t3\n");
    common::write(
        dir.path(),
        "w.tl",
        "C : {Red, Blue}\nColor : bool[C]\nColor(Red).\nEdge = \"edge.tsv\"\nPath(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\nPath(1, x)?\n",
    );
    let mut child = spawn_fed(dir.path(), &["watch", "w.tl", "--workers", "2"]);
    let expect = expecting(&mut child);
    expect("Path(1, 2)");
    expect("Path(1, 3)");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "+Edge(3, 4)").unwrap();
    expect("+Path(1, 4)");
    // An edit of the input file: the edge 2 → 3 goes.
    std::thread::sleep(std::time::Duration::from_millis(50));
    common::write(dir.path(), "edge.tsv", "1\t2\n");
    expect("-Path(1, 3)");
    expect("-Path(1, 4)");
    writeln!(stdin, "+Edge(2, 3)").unwrap();
    expect("+Path(1, 3)");
    expect("+Path(1, 4)");
    // Facts that do not check are reported; the run goes on as it was.
    writeln!(stdin, "+Color(Green)").unwrap();
    writeln!(stdin, "+Edge(4, 5)").unwrap();
    expect("+Path(1, 5)");
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let err = common::stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("`Green` is not in the declared domain"),
        "{err}"
    );
}

#[test]
fn watch_over_two_processes_takes_commits_at_process_0_starts_again_for_new_nodes_and_ends_on_a_lost_peer(
) {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    common::write(dir.path(), "edge.tsv", "1\t2\n2\t3\n");
    common::write(
        dir.path(),
        "w.tl",
        "C : {Red, Blue}\nColor : bool[C]\nColor(Red).\nEdge = \"edge.tsv\"\nPath(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\nPath(1, x)?\n",
    );
    let hosts = hosts(dir.path());
    let watch = |i| watch_of_two(dir.path(), &hosts, ("w.tl", i), &["--workers", "2"]);
    let mut one = watch("1");
    let mut zero = watch("0");
    let expect = expecting(&mut zero);
    expect("Path(1, 2)");
    expect("Path(1, 3)");
    let mut stdin = zero.stdin.take().unwrap();
    writeln!(stdin, "+Edge(3, 4)").unwrap();
    expect("+Path(1, 4)");
    writeln!(stdin, "-Edge(2, 3)").unwrap();
    expect("-Path(1, 3)");
    expect("-Path(1, 4)");
    // A node past the extent needs a fresh evaluation: both processes start again.
    writeln!(stdin, "+Edge(3, 12)").unwrap();
    writeln!(stdin, "+Edge(2, 3)").unwrap();
    // (A fresh evaluation's changes come in the order of their fields' text.)
    expect("+Path(1, 12)");
    expect("+Path(1, 3)");
    expect("+Path(1, 4)");
    // Facts that do not check leave the run as it was.
    writeln!(stdin, "+Color(Green)").unwrap();
    writeln!(stdin, "-Edge(3, 12)").unwrap();
    expect("-Path(1, 12)");
    // Process 1 dies: process 0's next commit ends it with E0404.
    one.kill().unwrap();
    let _ = one.wait();
    writeln!(stdin, "+Edge(4, 5)").unwrap();
    let out = zero.wait_with_output().unwrap();
    let err = common::stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("`Green` is not in the declared domain"),
        "{err}"
    );
    assert!(
        err.contains("error[E0404]") && err.contains("another process of the run ended"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn watch_over_two_processes_ends_process_1_cleanly_with_process_0() {
    let dir = setup(30);
    let hosts = hosts(dir.path());
    let h = hosts.to_str().unwrap();
    let one = spawn(
        dir.path(),
        &[
            "watch",
            "p.tl",
            "--processes",
            "2",
            "--process",
            "1",
            "--hosts",
            h,
        ],
    );
    let zero = Command::new(env!("CARGO_BIN_EXE_tl"))
        .args([
            "watch",
            "p.tl",
            "--processes",
            "2",
            "--process",
            "0",
            "--hosts",
            h,
        ])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let single = common::tl(dir.path(), &["run", "p.tl"]);
    assert!(zero.status.success(), "{}", common::stderr(&zero));
    assert_eq!(common::stdout(&zero), common::stdout(&single));
    let one = one.wait_with_output().unwrap();
    assert!(one.status.success(), "{}", common::stderr(&one));
    assert_eq!(common::stdout(&one), "");
}

/// Random edge insertions and removals, one commit per line, sent to `tl watch` over two
/// processes (both started here): the answers it ends with, replayed from its `+`/`-`
/// lines, are those of `tl run` on the final edges.
#[test]
fn watch_over_two_processes_ends_with_the_answers_of_a_run_on_the_final_facts() {
    use std::collections::BTreeSet;
    use std::io::Write;
    let declared = format!("N : 12\nEdge : bool[N, N]\n{PROGRAM}");
    for seed in [7u64, 1234, 99991] {
        let dir = tempfile::tempdir().unwrap();
        common::write(dir.path(), "p.tl", &declared);
        let mut state = seed;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut edges: BTreeSet<(u64, u64)> = BTreeSet::new();
        while edges.len() < 10 {
            edges.insert((next(12), next(12)));
        }
        let file = |edges: &BTreeSet<(u64, u64)>| {
            edges
                .iter()
                .map(|(a, b)| format!("{a}\t{b}\n"))
                .collect::<String>()
        };
        common::write(dir.path(), "edge.tsv", &file(&edges));
        let mut lines = Vec::new();
        for _ in 0..12 {
            let e = (next(12), next(12));
            let insert = next(3) > 0;
            lines.push(format!(
                "{}Edge({}, {})",
                if insert { '+' } else { '-' },
                e.0,
                e.1
            ));
            match insert {
                true => edges.insert(e),
                false => edges.remove(&e),
            };
        }
        let hosts = hosts(dir.path());
        let h = hosts.to_str().unwrap();
        let base = [
            "watch",
            "p.tl",
            "--processes",
            "2",
            "--hosts",
            h,
            "--quiet",
            "--workers",
            "1",
        ];
        let one = spawn(dir.path(), &[&base[..], &["--process", "1"]].concat());
        let mut zero = spawn_fed(dir.path(), &[&base[..], &["--process", "0"]].concat());
        let mut stdin = zero.stdin.take().unwrap();
        for l in &lines {
            writeln!(stdin, "{l}").unwrap();
        }
        drop(stdin);
        let out = zero.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", common::stderr(&out));
        assert!(
            !common::stderr(&out).contains("error"),
            "{}",
            common::stderr(&out)
        );
        let one = one.wait_with_output().unwrap();
        assert!(one.status.success(), "{}", common::stderr(&one));
        let mut shown: BTreeSet<String> = BTreeSet::new();
        for l in common::stdout(&out).lines() {
            match (l.strip_prefix('+'), l.strip_prefix('-')) {
                (Some(a), _) => assert!(shown.insert(a.to_string()), "{a} shown twice"),
                (_, Some(a)) => assert!(shown.remove(a), "{a} was not shown"),
                _ => assert!(shown.insert(l.to_string())),
            }
        }
        // The file still holds the first edges: the run reads the final ones instead.
        common::write(dir.path(), "edge.tsv", &file(&edges));
        let run = common::tl(dir.path(), &["run", "p.tl"]);
        let expected: BTreeSet<String> = common::stdout(&run).lines().map(str::to_string).collect();
        assert_eq!(shown, expected, "seed {seed}: {lines:?}");
    }
}
