//! Incremental maintenance on the standard engine: random programs over two input relations
//! (recursion linear and not, mutual recursion, negation, counts, `min=`), random commits of
//! insertions and removals. After each commit every tensor equals a run from scratch of the
//! standard engine on the same facts, the commit reports exactly the difference, and the
//! Datalog strata were carried through rather than evaluated again.

mod common;

use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;
use tensor_logic::eval::{Ran, Standard};
use tensor_logic::{RunOptions, Session};

/// Rules over inputs `E` and `F` (binary, over six nodes); a program takes a subset.
const RULES: &[&str] = &[
    "P(x, y) :- E(x, y).",
    "P(x, z) :- P(x, y), E(y, z).",
    "P(x, z) :- P(x, y), P(y, z).",
    "P(x, y) :- F(x, y), E(y, x).",
    "Q(x, y) :- F(x, y), not P(x, y).",
    "S(x) :- P(x, x).",
    "A(x, y) :- F(x, y).",
    "A(x, z) :- B(x, y), F(y, z).",
    "B(x, y) :- A(x, y), E(y, y).",
    "B(x, y) :- A(y, x), x != y.",
    "U(x) :- E(x, y), not S(x).",
    "G(x, y) :- P(x, y), A(y, x).",
    "C[x] = P(x, y)",
    "D[y] min= E(N0, y)",
    "D[z] min= D[y] + E(y, z)",
    "K[x] = Q(x, y) A(y, z)",
];

const NAMES: &[&str] = &["P", "Q", "S", "A", "B", "U", "G", "C", "D", "K"];

fn program(facts: &BTreeSet<(bool, usize, usize)>, rules: &[bool]) -> String {
    let mut src = String::from("N : {N0, N1, N2, N3, N4, N5}\n");
    for r in ["E", "F", "P", "Q", "A", "B", "G"] {
        src.push_str(&format!("{r} : bool[N, N]\n"));
    }
    src.push_str("S : bool[N]\nU : bool[N]\nC : int[N]\nK : int[N]\nD : int[N]\n");
    for &(f, a, b) in facts {
        let rel = if f { "F" } else { "E" };
        src.push_str(&format!("{rel}(N{a}, N{b}).\n"));
    }
    for (rule, _) in RULES.iter().zip(rules).filter(|(_, &on)| on) {
        src.push_str(rule);
        src.push('\n');
    }
    src
}

type Fact = (bool, usize, usize);

fn fact_strategy() -> impl Strategy<Value = Fact> {
    (any::<bool>(), 0usize..6, 0usize..6)
}

fn fields(&(_, a, b): &Fact) -> Vec<String> {
    vec![format!("N{a}"), format!("N{b}")]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn commits_on_the_standard_engine_agree_with_evaluating_from_scratch(
        facts in proptest::collection::btree_set(fact_strategy(), 0..16),
        rules in proptest::collection::vec(any::<bool>(), RULES.len()),
        commits in proptest::collection::vec(
            proptest::collection::vec((any::<bool>(), fact_strategy()), 1..5),
            1..6,
        ),
    ) {
        let src = program(&facts, &rules);
        let mut inc = Session::new();
        inc.load_source("m.tl", &src, Path::new(".")).unwrap();
        inc.run_incremental(&RunOptions::default()).unwrap_or_else(|e| panic!("{src}\n{e:?}"));
        let mut current = facts.clone();
        let mut before = common::run_source(&src, &Standard).unwrap();
        for batch in &commits {
            for (insert, f) in batch {
                let rel = if f.0 { "F" } else { "E" };
                let rows = [fields(f)];
                match insert {
                    true => inc.insert(rel, &rows).unwrap(),
                    false => inc.remove(rel, &rows).unwrap(),
                }
                match insert {
                    true => current.insert(*f),
                    false => current.remove(f),
                };
            }
            let changes = inc.commit().unwrap_or_else(|e| panic!("{src}\n{batch:?}\n{e:?}"));
            // No stratum over relations only is evaluated again: each is carried through.
            for d in inc.decisions() {
                let joins = inc.checked().is_some_and(|c| {
                    c.strata[d.stratum].tensors.iter().all(|&t| c.tensors[t].kind == tensor_logic::semantics::Kind::Bool)
                });
                let negation = d.reason.as_deref().is_some_and(|r| r.contains("`not`") || r.contains("quarter"));
                prop_assert!(!joins || d.ran == Ran::Maintained || negation, "{:?} in\n{}", d, src);
            }
            let scratch = common::run_source(&program(&current, &rules), &Standard).unwrap();
            for name in NAMES {
                prop_assert_eq!(inc.tensor(name), scratch.tensor(name), "{} after {:?} in\n{}", name, batch, src);
                let (old, new) = (before.rows(name).unwrap(), scratch.rows(name).unwrap());
                let mut added: Vec<String> = new.iter().filter(|r| !old.contains(r)).map(|r| format!("{r:?}")).collect();
                let mut removed: Vec<String> = old.iter().filter(|r| !new.contains(r)).map(|r| format!("{r:?}")).collect();
                let reported = changes.iter().find(|c| c.name == *name);
                let mut got_added: Vec<String> = reported.map_or(Vec::new(), |c| c.added.iter().map(|r| format!("{r:?}")).collect());
                let mut got_removed: Vec<String> = reported.map_or(Vec::new(), |c| c.removed.iter().map(|r| format!("{r:?}")).collect());
                added.sort();
                removed.sort();
                got_added.sort();
                got_removed.sort();
                prop_assert_eq!(got_added, added, "{} added after {:?} in\n{}", name, batch, src);
                prop_assert_eq!(got_removed, removed, "{} removed after {:?} in\n{}", name, batch, src);
            }
            before = scratch;
        }
    }
}

/// Shortest distances lose an edge that was no one's best (kept: no element changes), and
/// the edge stays gone for later commits: when its source improves, it gives nothing.
#[test]
fn a_removed_edge_that_was_no_ones_best_stays_gone() {
    let chain = "E(N0, N1). E(N1, N2). E(N2, N3). E(N3, N4). E(N4, N5).\n";
    let src = format!("N : {{N0, N1, N2, N3, N4, N5}}\nE : bool[N, N]\nD : int[N]\n{chain}E(N5, N4).\nD[y] min= E(N0, y)\nD[z] min= D[y] + E(y, z)\n");
    let mut s = Session::new();
    s.load_source("d.tl", &src, Path::new(".")).unwrap();
    s.run_incremental(&RunOptions::default()).unwrap();
    s.remove("E", &[vec!["N5".into(), "N4".into()]]).unwrap();
    assert!(s.commit().unwrap().is_empty());
    assert!(
        s.decisions().iter().all(|d| d.ran == Ran::Maintained),
        "{:?}",
        s.decisions()
    );
    s.insert("E", &[vec!["N0".into(), "N5".into()]]).unwrap();
    s.commit().unwrap();
    let want = format!("N : {{N0, N1, N2, N3, N4, N5}}\nE : bool[N, N]\nD : int[N]\n{chain}E(N0, N5).\nD[y] min= E(N0, y)\nD[z] min= D[y] + E(y, z)\n");
    let scratch = common::run_source(&want, &Standard).unwrap();
    assert_eq!(s.tensor("D"), scratch.tensor("D"));
}

/// Facts with symbols and integers their domains do not hold yet grow the domains in place
/// (the commit is carried through, not evaluated afresh) and give what a run from scratch on
/// all the facts gives; a domain that a count also ranges over is evaluated afresh instead.
#[test]
fn new_symbols_and_values_grow_their_domains_in_place() {
    let rules = "Path(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n";
    let cases = [
        (
            "Edge(Ann, Bob). Edge(Bob, Cid).\n",
            ["Cid", "Dee", "Eve"],
            true,
        ),
        ("Edge(1, 2). Edge(2, 3).\n", ["3", "40", "-7"], true),
        (
            "Edge(Ann, Bob). Edge(Bob, Cid).\nOut[x] = Path(x, y)\n",
            ["Cid", "Dee", "Eve"],
            false,
        ),
    ];
    for (facts, [a, b, c], in_place) in cases {
        let src = format!("{facts}{rules}");
        let mut s = Session::new();
        s.load_source("g.tl", &src, Path::new(".")).unwrap();
        s.run_incremental(&RunOptions::default()).unwrap();
        let mut added = String::new();
        for (x, y) in [(a, b), (b, c), (c, a)] {
            s.insert("Edge", &[vec![x.into(), y.into()]]).unwrap();
            s.commit().unwrap();
            added.push_str(&format!("Edge({x}, {y}).\n"));
            let maintained = s.decisions().iter().all(|d| d.ran == Ran::Maintained);
            assert_eq!(maintained, in_place, "{src}{added}: {:?}", s.decisions());
            let scratch = common::run_source(&format!("{src}{added}"), &Standard).unwrap();
            assert_eq!(s.rows("Path"), scratch.rows("Path"), "{src}{added}");
            // Symbols are numbered in order of appearance either way; an open column's
            // handles are not positions (a run from scratch numbers its values sorted).
            if a == "Cid" {
                assert_eq!(s.tensor("Path"), scratch.tensor("Path"), "{src}{added}");
            }
        }
    }
}

/// A removal whose tuples keep another derivation: over-deleted, then derived again.
#[test]
fn paths_with_a_detour_outlive_a_removed_edge() {
    let src = "N : {N0, N1, N2, N3}\nE : bool[N, N]\nE(N0, N1). E(N1, N2). E(N0, N2). E(N2, N3).\nP(x, y) :- E(x, y).\nP(x, z) :- P(x, y), E(y, z).\n";
    let mut s = Session::new();
    s.load_source("d.tl", src, Path::new(".")).unwrap();
    s.run_incremental(&RunOptions::default()).unwrap();
    s.remove("E", &[vec!["N1".into(), "N2".into()]]).unwrap();
    let changes = s.commit().unwrap();
    let p = changes.iter().find(|c| c.name == "P").expect("P changes");
    assert_eq!(p.added, Vec::new());
    // P(N0, N2) and P(N0, N3) lose a derivation and keep another.
    assert_eq!(p.removed.len(), 2, "only P(N1, N2) and P(N1, N3) go: {p:?}");
    assert_eq!(
        s.decisions().iter().map(|d| d.ran).collect::<Vec<_>>(),
        [Ran::Maintained]
    );
}

/// `tl watch` keeps a closure on the standard engine: insertions and removals from standard
/// input print what appears and goes, and `tl explain` says how the stratum is kept.
#[test]
fn watch_keeps_a_closure_on_the_standard_engine() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let src = "Edge(1, 2). Edge(2, 3).\nPath(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\nPath(1, x)?\n";
    common::write(dir.path(), "c.tl", src);
    let explain = common::stdout(&common::tl(dir.path(), &["explain", "c.tl"]));
    assert!(
        explain.contains("incremental: kept as bit rows of a transitive closure"),
        "{explain}"
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tl"))
        .args(["watch", "c.tl"])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "+Edge(3, 1)\n-Edge(2, 3)\n-Edge(9, 9)\n+Edge(1, 2)").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    // First the answers, then +Path(1, 1) from the new edge, then what the removal takes.
    assert_eq!(
        lines,
        [
            "Path(1, 2)",
            "Path(1, 3)",
            "+Path(1, 1)",
            "-Path(1, 1)",
            "-Path(1, 3)"
        ],
        "{text}"
    );
    // Facts that change nothing are noted, not silently dropped.
    let notes = String::from_utf8_lossy(&out.stderr);
    assert!(
        notes.contains("`-Edge(9, 9)` changed nothing: it did not hold"),
        "{notes}"
    );
    assert!(
        notes.contains("`+Edge(1, 2)` changed nothing: it held already"),
        "{notes}"
    );
}
