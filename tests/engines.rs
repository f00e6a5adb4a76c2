//! The standard engine must agree exactly with the reference evaluator (the oracle) on random
//! Datalog programs: recursion, several strata, negation, constants, comparisons, arities 1–3;
//! so must the differential engine, on one worker and on two.

mod common;

use proptest::prelude::*;
use std::path::Path;
use tensor_logic::eval::{Cluster, Differential, Engine, Processes, Reference, Standard};
use tensor_logic::{RunOptions, Session};

const VARS: [&str; 4] = ["x", "y", "z", "w"];

/// The tensors a generated program derives or is given, compared between engines.
const NAMES: [&str; 10] = [
    "D0", "D1", "D2", "N0", "N1", "N2", "M", "Hop", "Far", "Near",
];

/// A random rule, as indices that the generator turns into text.
#[derive(Clone, Debug)]
struct GenRule {
    head: usize,
    body: Vec<(usize, Vec<usize>)>,
    negated: Option<(usize, Vec<usize>)>,
    compare: bool,
    head_picks: Vec<usize>,
}

fn arity(r: usize) -> usize {
    1 + r % 3
}

/// An atom over `rel`, drawing variables from `pool` and sometimes a constant symbol; returns
/// the text and the variables it used.
fn atom<'a>(rel: &str, arity: usize, picks: &[usize], pool: &[&'a str]) -> (String, Vec<&'a str>) {
    let mut used = Vec::new();
    let terms: Vec<String> = (0..arity)
        .map(|k| {
            let p = picks[k % picks.len()];
            if p % 7 == 6 {
                format!("C{}", p % 3)
            } else {
                let v = pool[p % pool.len()];
                used.push(v);
                v.to_string()
            }
        })
        .collect();
    (format!("{rel}({})", terms.join(", ")), used)
}

/// A generated fact as a relation name and its fields.
fn fact(&(r, a, b, c): &(usize, usize, usize, usize)) -> (String, Vec<String>) {
    let args = [a, b, c]
        .iter()
        .take(arity(r))
        .map(|v| format!("C{}", v % 4))
        .collect::<Vec<_>>();
    // Some facts go to derived relations, which then have both facts and rules.
    let rel = if (a + b + c) % 5 == 4 { "D" } else { "B" };
    (format!("{rel}{r}"), args)
}

fn program(facts: &[(usize, usize, usize, usize)], rules: &[GenRule]) -> String {
    let facts: Vec<(String, Vec<String>)> = facts.iter().map(fact).collect();
    program_of(&facts, rules)
}

fn program_of(facts: &[(String, Vec<String>)], rules: &[GenRule]) -> String {
    let mut src = String::from("C : {C0, C1, C2, C3}\n");
    for r in 0..3 {
        let dims = vec!["C"; arity(r)].join(", ");
        src.push_str(&format!("B{r} : bool[{dims}]\nD{r} : bool[{dims}]\n"));
    }
    for (rel, args) in facts {
        src.push_str(&format!("{rel}({}).\n", args.join(", ")));
    }
    for rule in rules {
        let mut used: Vec<&str> = Vec::new();
        let mut lits = Vec::new();
        for (rel, picks) in &rule.body {
            let name = if rel % 2 == 0 {
                format!("B{}", rel % 3)
            } else {
                format!("D{}", rel % 3)
            };
            let (text, vars) = atom(&name, arity(rel % 3), picks, &VARS);
            for v in vars {
                if !used.contains(&v) {
                    used.push(v);
                }
            }
            lits.push(text);
        }
        if used.is_empty() {
            continue;
        }
        if let Some((rel, picks)) = &rule.negated {
            lits.push(format!(
                "not {}",
                atom(&format!("B{}", rel % 3), arity(rel % 3), picks, &used).0
            ));
        }
        if rule.compare && used.len() >= 2 {
            lits.push(format!("{} != {}", used[0], used[1]));
        }
        let head = atom(
            &format!("D{}", rule.head % 3),
            arity(rule.head % 3),
            &rule.head_picks,
            &used,
        )
        .0;
        src.push_str(&format!("{head} :- {}.\n", lits.join(", ")));
    }
    src.push_str("N0 = D0(x)\nN1[x] = D1(x, y)\nN2[x, z] = D2(x, y, z) (x != y)\nM[x] = B1(x, y) D0(y) + 1\n");
    // `min=`/`max=` over the relations: hop counts (a recursive minimum that always
    // settles), the farthest hop from each node, and a minimum over a subtracted relation.
    src.push_str("Hop[x, y] min= B1(x, y)\nHop[x, y] min= D1(x, y)\nHop[x, z] min= Hop[x, y] + B1(y, z)\nFar[x] max= Hop[x, y] + D0(y)\nNear[x] min= Hop[x, y] - B0(y)\n");
    src
}

/// Starts incremental mode: kept by the standard engine for 0, by a dataflow of `keeper`
/// workers otherwise.
fn start_incremental(
    s: &mut Session,
    opts: &RunOptions,
    keeper: usize,
) -> Result<Vec<String>, tensor_logic::Diagnostics> {
    match keeper {
        0 => s.run_incremental(opts),
        workers => s.run_incremental_on(
            opts,
            &Cluster {
                workers,
                processes: None,
            },
        ),
    }
}

fn run(src: &str, engine: &dyn Engine) -> Result<Session, String> {
    common::run_source(src, engine)
}

fn rule_strategy() -> impl Strategy<Value = GenRule> {
    (
        0usize..3,
        proptest::collection::vec((0usize..6, proptest::collection::vec(0usize..28, 3)), 1..4),
        proptest::option::of((0usize..3, proptest::collection::vec(0usize..12, 3))),
        any::<bool>(),
        proptest::collection::vec(0usize..12, 3),
    )
        .prop_map(|(head, body, negated, compare, head_picks)| GenRule {
            head,
            body,
            negated,
            compare,
            head_picks,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn standard_agrees_with_reference_on_random_datalog(
        facts in proptest::collection::vec((0usize..3, 0usize..4, 0usize..4, 0usize..4), 1..14),
        rules in proptest::collection::vec(rule_strategy(), 1..6),
        queries in proptest::collection::vec((0usize..3, proptest::collection::vec(0usize..7, 3)), 1..4),
    ) {
        let src = program(&facts, &rules);
        let reference = run(&src, &Reference);
        let standard = run(&src, &Standard);
        // Every generated program is valid (all relations are declared), so both must run.
        let (a, b) = match (reference, standard) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => panic!("{src}\nreference: {:?}\nstandard: {:?}", a.err(), b.err()),
        };
        for name in NAMES {
            prop_assert_eq!(a.tensor(name), b.tensor(name), "{} differs in\n{}", name, src);
        }
        // So does the differential dataflow, whatever its worker count.
        for workers in [1, 2] {
            let cluster = Cluster { workers, processes: None };
            let d = run(&src, &Differential { cluster }).unwrap_or_else(|e| panic!("{src}\n{e}"));
            for name in NAMES {
                prop_assert_eq!(a.tensor(name), d.tensor(name), "{} differs on {} workers in\n{}", name, workers, src);
            }
        }
        // Backward chaining (magic sets) answers like forward chaining.
        for (rel, picks) in &queries {
            let args: Vec<String> = picks
                .iter()
                .take(arity(*rel))
                .map(|&k| if k < 4 { format!("C{k}") } else { VARS[k - 4].to_string() })
                .collect();
            let text = format!("D{rel}({})", args.join(", "));
            let mut s = Session::new();
            s.load_source("p.tl", &src, Path::new(".")).unwrap();
            s.check(&Default::default()).unwrap();
            let q = s.prepare_query(&text).unwrap();
            let backward = s.answer(&Standard, &RunOptions::default(), &q).unwrap();
            prop_assert_eq!(a.query(&text).unwrap(), backward, "{} in\n{}", text, src);
        }
    }
}

/// Random insertions and removals, commit by commit.
type Commits = Vec<Vec<(bool, (usize, usize, usize, usize))>>;

/// Commits `commits` to `inc` (in incremental mode on the program of `facts` and `rules`)
/// and checks after each that it holds what a run from scratch on the same facts computes,
/// and reports exactly the difference.
fn commits_agree(
    inc: &mut Session,
    facts: &[(usize, usize, usize, usize)],
    rules: &[GenRule],
    commits: &Commits,
) -> Result<(), TestCaseError> {
    let src = program(facts, rules);
    let mut current: std::collections::BTreeSet<(String, Vec<String>)> =
        facts.iter().map(fact).collect();
    let mut before = run(&src, &Standard).unwrap();
    for batch in commits {
        for (insert, f) in batch {
            let (name, fields) = fact(f);
            if *insert {
                inc.insert(&name, std::slice::from_ref(&fields)).unwrap();
                current.insert((name, fields));
            } else {
                inc.remove(&name, std::slice::from_ref(&fields)).unwrap();
                current.remove(&(name, fields));
            }
        }
        let changes = inc.commit().unwrap_or_else(|e| panic!("{src}\n{e:?}"));
        let now: Vec<(String, Vec<String>)> = current.iter().cloned().collect();
        let scratch_src = program_of(&now, rules);
        let scratch = run(&scratch_src, &Standard).unwrap();
        for name in NAMES {
            prop_assert_eq!(
                inc.tensor(name),
                scratch.tensor(name),
                "{} after {:?} in\n{}",
                name,
                batch,
                src
            );
            // Changes are reported for what rules derive, not for the facts given.
            let checked = scratch.checked().unwrap();
            let t = checked.tensor_id(name).unwrap();
            if !checked
                .strata
                .iter()
                .any(|s| s.tensors.contains(&t) && !s.equations.is_empty())
            {
                continue;
            }
            let (old, new) = (before.rows(name).unwrap(), scratch.rows(name).unwrap());
            let added: Vec<_> = new.iter().filter(|r| !old.contains(r)).cloned().collect();
            let removed: Vec<_> = old.iter().filter(|r| !new.contains(r)).cloned().collect();
            let reported = changes.iter().find(|c| c.name == name);
            let (mut got_added, mut got_removed) = reported
                .map(|c| (c.added.clone(), c.removed.clone()))
                .unwrap_or_default();
            let key = |r: &tensor_logic::Row| format!("{r:?}");
            got_added.sort_by_key(key);
            got_removed.sort_by_key(key);
            let (mut added, mut removed) = (added, removed);
            added.sort_by_key(key);
            removed.sort_by_key(key);
            prop_assert_eq!(
                &got_added,
                &added,
                "{} added after {:?} in\n{}",
                name,
                batch,
                src
            );
            prop_assert_eq!(
                &got_removed,
                &removed,
                "{} removed after {:?} in\n{}",
                name,
                batch,
                src
            );
        }
        before = scratch;
    }
    Ok(())
}

fn commits_strategy() -> impl Strategy<Value = Commits> {
    proptest::collection::vec(
        proptest::collection::vec(
            (any::<bool>(), (0usize..3, 0usize..4, 0usize..4, 0usize..4)),
            1..5,
        ),
        1..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// After every commit of random insertions and removals, incremental mode holds what a
    /// run from scratch on the same facts computes, and reports exactly the difference.
    #[test]
    fn incremental_commits_agree_with_evaluating_from_scratch(
        facts in proptest::collection::vec((0usize..3, 0usize..4, 0usize..4, 0usize..4), 1..14),
        rules in proptest::collection::vec(rule_strategy(), 1..6),
        commits in commits_strategy(),
        keeper in 0usize..3,
    ) {
        let src = program(&facts, &rules);
        let mut inc = Session::new();
        inc.load_source("p.tl", &src, Path::new(".")).unwrap();
        start_incremental(&mut inc, &RunOptions::default(), keeper).unwrap_or_else(|e| panic!("{src}\n{e:?}"));
        commits_agree(&mut inc, &facts, &rules, &commits)?;
    }
}

/// Two processes' clusters over two free localhost ports: process 0's and process 1's.
fn two_processes(workers: usize) -> (Cluster, Cluster) {
    // Both listeners are held until both ports are known, so the two differ.
    let listeners: Vec<std::net::TcpListener> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let hosts: Vec<String> = listeners
        .iter()
        .map(|l| format!("127.0.0.1:{}", l.local_addr().unwrap().port()))
        .collect();
    drop(listeners);
    let of = |index| Cluster {
        workers,
        processes: Some(Processes {
            index,
            hosts: hosts.clone(),
        }),
    };
    (of(0), of(1))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// The same over two processes talking TCP on localhost (process 1 served from a thread
    /// of this test): process 0 takes the commits and holds what a run from scratch computes.
    #[test]
    fn incremental_commits_over_two_processes_agree_with_evaluating_from_scratch(
        facts in proptest::collection::vec((0usize..3, 0usize..4, 0usize..4, 0usize..4), 1..14),
        rules in proptest::collection::vec(rule_strategy(), 1..6),
        commits in commits_strategy(),
        workers in 1usize..3,
    ) {
        let src = program(&facts, &rules);
        let (zero, one) = two_processes(workers);
        let served = src.clone();
        let other = std::thread::spawn(move || {
            let mut s = Session::new();
            s.load_source("p.tl", &served, Path::new(".")).unwrap();
            s.serve_incremental(&RunOptions::default(), &one)
        });
        let mut inc = Session::new();
        inc.load_source("p.tl", &src, Path::new(".")).unwrap();
        inc.run_incremental_on(&RunOptions::default(), &zero).unwrap_or_else(|e| panic!("{src}\n{e:?}"));
        commits_agree(&mut inc, &facts, &rules, &commits)?;
        drop(inc);
        let served = other.join().unwrap();
        prop_assert!(served.is_ok(), "process 1: {:?}", served.err());
    }
}

#[test]
fn engines_agree_on_every_example_and_conformance_case() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut programs: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tl"))
        // The digits models' held-out evaluation (30M multiply-adds) and the language
        // model's attention over 36 windows take minutes in the reference loops of a debug
        // build; the same equations at small sizes are in tests/dense.rs and
        // tests/learning.rs, and tests/training.rs trains these models. The character LM's
        // forward pass over all 17,428 windows of Tiny Shakespeare holds about 10 GB; it is
        // trained in minibatches by tests/training.rs.
        .filter(|p| {
            let name = p.to_string_lossy();
            !name.contains("digits_") && !name.contains("tiny_lm") && !name.contains("shakespeare")
        })
        .collect();
    for case in std::fs::read_dir(root.join("tests/conformance")).unwrap() {
        let main = case.unwrap().path().join("main.tl");
        if !main.parent().unwrap().join("expected.err").exists() {
            programs.push(main);
        }
    }
    for path in programs {
        let run = |engine: &dyn Engine| {
            let mut s = Session::new();
            s.load_file(&path).unwrap();
            let lines = s.run_with(engine, &RunOptions::default()).unwrap();
            (lines, s)
        };
        let (la, _) = run(&Reference);
        let (lb, b) = run(&Standard);
        let checked = b.checked().unwrap();
        // Relations and integers agree exactly; real tensors within 1e-5 of the tensor's
        // largest magnitude (dense contractions sum in another order, f32 ones in f32).
        // `Session::verify` is `tl run --verify`.
        let diffs = b.verify(&RunOptions::default()).unwrap();
        for (info, d) in checked.tensors.iter().zip(&diffs) {
            let exact = info.kind != tensor_logic::semantics::Kind::Real;
            let close = d.defined_differ == 0
                && if exact {
                    d.max_abs == 0.0
                } else {
                    d.max_abs <= 1e-5 * d.largest.max(1e-6)
                };
            assert!(close, "{} in {}: {d:?}", info.name, path.display());
        }
        if checked
            .tensors
            .iter()
            .all(|t| t.kind != tensor_logic::semantics::Kind::Real)
        {
            assert_eq!(la, lb, "{}", path.display());
        }
    }
}

#[test]
fn a_boolean_recursion_settles_on_both_engines_whatever_max_iters_says() {
    // Its relations only grow within finite extents, so it may take as many rounds as they
    // hold elements (§9, docs/language.md); twelve rounds here.
    let mut src = String::new();
    for i in 0..11 {
        src.push_str(&format!("Edge(N{i}, N{}).\n", i + 1));
    }
    src.push_str("Path(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n");
    for max_iters in [1, 9, 12, 13] {
        let outcome = |engine: &dyn Engine| {
            let mut s = Session::new();
            s.load_source("c.tl", &src, Path::new(".")).unwrap();
            let settings = tensor_logic::Settings {
                max_iters,
                ..Default::default()
            };
            let options = RunOptions {
                settings,
                ..RunOptions::default()
            };
            s.run_with(engine, &options)
                .map(|_| format!("{:?}", s.tensor("Path").map(|t| t.entries())))
                .map_err(|d| d.0[0].code)
        };
        let (a, b) = (outcome(&Reference), outcome(&Standard));
        assert!(a.is_ok(), "reference at --max-iters {max_iters}: {a:?}");
        assert_eq!(a, b, "--max-iters {max_iters}");
    }
}

#[test]
fn thread_count_does_not_change_large_relations() {
    let mut src = String::new();
    let mut x: u64 = 12345;
    let mut next = vec![Vec::new(); 1500];
    for _ in 0..6000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let (a, b) = ((x >> 33) % 1500, (x >> 13) % 1500);
        next[a as usize].push(b as usize);
        src.push_str(&format!("E({a}, {b}). V({a}).\n"));
    }
    // `V(x)` keeps the joins from being products of binary relations: they run as tuple
    // joins (the bit-matrix path has its own thread-count test).
    src.push_str(
        "P(x, y) :- E(x, y), V(x).\nP(x, z) :- P(x, y), E(y, z), V(x).\nQ(x, z) :- E(x, y), E(y, z), x != z, V(x).\n",
    );
    let run = |threads: usize| {
        let mut s = Session::new();
        s.load_source("big.tl", &src, Path::new(".")).unwrap();
        s.run_with(
            &Standard,
            &RunOptions {
                threads,
                ..RunOptions::default()
            },
        )
        .unwrap();
        s
    };
    let (one, two) = (run(1), run(2));
    for name in ["P", "Q"] {
        assert_eq!(one.tensor(name), two.tensor(name), "{name}");
    }
    // The closure by breadth-first search from every node: large enough that derived tuples
    // are filtered against the known ones in batches during the joins.
    let mut closure = Vec::new();
    for start in 0..1500 {
        let mut seen = vec![false; 1500];
        let mut stack = next[start].clone();
        while let Some(n) = stack.pop() {
            if !std::mem::replace(&mut seen[n], true) {
                stack.extend(&next[n]);
            }
        }
        closure.extend(
            (0..1500)
                .filter(|&n| seen[n])
                .map(|n| [start as u32, n as u32]),
        );
    }
    match &one.tensor("P").unwrap().storage {
        tensor_logic::tensor::Storage::Relation(r) => {
            assert!(r.len() > 100_000, "the parallel path must be exercised");
            let tuples: Vec<[u32; 2]> = r.iter().map(|t| [t[0], t[1]]).collect();
            assert_eq!(tuples, closure);
        }
        other => panic!("{other:?}"),
    }
}

/// A random weighted graph and a `min=`/`max=` path program over it (linear or non-linear
/// recursion, constants, subtracted data, a Boolean guard).
fn path_program(edges: &[(usize, usize, i32)], max: bool, variant: usize, real: bool) -> String {
    let op = if max { "max=" } else { "min=" };
    let mut src = String::new();
    for &(a, b, w) in edges {
        let w = if real {
            format!("{}", w as f64 / 4.0)
        } else {
            w.to_string()
        };
        src.push_str(&format!("Edge[N{a}, N{b}] = {w}\n"));
    }
    src.push_str("Ok(N0). Ok(N2). Ok(N3). Ok(N5).\nCost[N1] = 2\nCost[N4] = 1\n");
    src.push_str(&format!("Dist[x, y] {op} Edge[x, y]\n"));
    src.push_str(&match variant {
        0 => format!("Dist[x, z] {op} Dist[x, y] + Edge[y, z]\n"),
        1 => format!("Dist[x, z] {op} Dist[x, y] + Dist[y, z]\n"),
        2 => format!("Dist[x, z] {op} Dist[x, y] + Edge[y, z] - Cost[y] + 1\n"),
        _ => format!("Dist[x, z] {op} Dist[x, y] + Edge[y, z] + Ok(z)\n"),
    });
    src
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    #[test]
    fn min_and_max_recursion_agree_with_reference(
        edges in proptest::collection::vec((0usize..7, 0usize..7, -3i32..9), 1..16),
        max in any::<bool>(),
        variant in 0usize..4,
        real in any::<bool>(),
    ) {
        let src = path_program(&edges, max, variant, real);
        let outcome = |engine: &dyn Engine| {
            let mut s = Session::new();
            s.load_source("d.tl", &src, Path::new(".")).unwrap();
            let settings = tensor_logic::Settings { max_iters: 40, ..Default::default() };
            let opts = RunOptions { settings, ..RunOptions::default() };
            match s.run_with(engine, &opts) {
                Ok(_) => Ok(s.tensor("Dist").cloned()),
                Err(d) => Err(d.render("d.tl", &src)),
            }
        };
        let standard = outcome(&Standard);
        prop_assert_eq!(outcome(&Reference), standard.clone(), "{}", src);
        // The dataflow's fixpoint has the same answer, or fails the same way (E0401; its
        // notes say what the dataflow saw).
        let code = |r: Result<Option<tensor_logic::tensor::Tensor>, String>| {
            r.map_err(|e| e.split(']').next().unwrap_or_default().to_string())
        };
        for workers in [1, 2] {
            let cluster = Cluster { workers, processes: None };
            let d = outcome(&Differential { cluster });
            prop_assert_eq!(code(standard.clone()), code(d), "{} workers in\n{}", workers, src);
        }
    }
}

/// Programs over one binary relation whose rules are products of binary relations (the bit
/// matrix path): closures in every linearity, transposed factors, `!=`/`==` on the head
/// variables, negation.
const CHAIN_RULES: &str = "\
P(x, y) :- E(x, y).
P(x, z) :- P(x, y), E(y, z).
L(x, y) :- E(x, y).
L(x, z) :- E(x, y), L(y, z).
Q(x, y) :- E(x, y).
Q(x, z) :- Q(x, y), Q(y, z).
Sg(x, y) :- E(x, p), E(y, p), x != y.
Sg(x, y) :- E(x, a), Sg(a, b), E(y, b).
R(x, y) :- E(y, x).
R(x, z) :- R(x, y), E(z, y).
Loop(x, y) :- P(x, y), x == y.
OneWay(x, y) :- P(x, y), not P(y, x).
";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]

    #[test]
    fn bit_matrix_rules_agree_with_reference(
        edges in proptest::collection::vec((0usize..9, 0usize..9), 1..20),
    ) {
        let mut src = String::new();
        for (a, b) in &edges {
            src.push_str(&format!("E({a}, {b}).\n"));
        }
        src.push_str(CHAIN_RULES);
        let a = run(&src, &Reference).unwrap();
        let b = run(&src, &Standard).unwrap();
        for name in ["P", "L", "Q", "Sg", "R", "Loop", "OneWay"] {
            prop_assert_eq!(a.tensor(name), b.tensor(name), "{} in\n{}", name, src);
        }
    }
}

#[test]
fn bit_matrices_agree_with_joins_across_word_boundaries() {
    // `V(x)` holds every node, so the `j` rules mean the same as the others but are not
    // products of binary relations: they run as joins, the others on bit matrices (150
    // nodes: three words a row).
    let mut src = String::new();
    let mut x: u64 = 99;
    for _ in 0..300 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let (a, b) = ((x >> 33) % 150, (x >> 13) % 150);
        src.push_str(&format!("E({a}, {b}). V({a}). V({b}).\n"));
    }
    src.push_str(CHAIN_RULES);
    src.push_str(
        "Pj(x, y) :- E(x, y), V(x).
Pj(x, z) :- Pj(x, y), E(y, z), V(x).
Qj(x, y) :- E(x, y), V(x).
Qj(x, z) :- Qj(x, y), Qj(y, z), V(x).
Sgj(x, y) :- E(x, p), E(y, p), x != y, V(x).
Sgj(x, y) :- E(x, a), Sgj(a, b), E(y, b), V(x).
Rj(x, y) :- E(y, x), V(x).
Rj(x, z) :- Rj(x, y), E(z, y), V(x).
OneWayj(x, y) :- Pj(x, y), not Pj(y, x), V(x).
",
    );
    let s = run(&src, &Standard).unwrap();
    for name in ["P", "Q", "Sg", "R", "OneWay"] {
        let (a, b) = (s.tensor(name), s.tensor(&format!("{name}j")));
        assert_eq!(a.map(|t| &t.storage), b.map(|t| &t.storage), "{name}");
    }
    for threads in [1, 2] {
        let mut t = Session::new();
        t.load_source("p.tl", &src, Path::new(".")).unwrap();
        let opts = RunOptions {
            threads,
            ..RunOptions::default()
        };
        t.run_with(&Standard, &opts).unwrap();
        assert_eq!(t.tensor("Sg"), s.tensor("Sg"), "{threads} threads");
    }
}

/// Cyclic bodies (worst-case-optimal joins): triangles, a 4-cycle, a recursive cyclic rule,
/// a ternary atom whose rows repeat candidates, constants, negation and comparisons.
const CYCLIC_RULES: &str = "\
Tri(x, y, z) :- E(x, y), E(y, z), E(z, x).
Tri2(x, z) :- E(x, y), F(y, z), E(z, x), x != y.
Sq(x, y) :- E(x, y), E(y, z), E(z, w), E(w, x).
C(x, y) :- E(x, y).
C(x, z) :- C(x, y), C(y, z), E(z, x).
T3(x, y, z) :- R(x, y, w), E(y, z), E(z, x).
K(y) :- E(0, y), E(y, z), E(z, 0).
N(x, y, z) :- E(x, y), E(y, z), E(z, x), not F(x, z).
Deg[x] = E(x, y) E(y, z) E(z, x)
";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(80))]

    #[test]
    fn cyclic_rules_agree_with_reference(
        edges in proptest::collection::vec((0usize..7, 0usize..7), 1..24),
        f in proptest::collection::vec((0usize..7, 0usize..7), 0..10),
        r in proptest::collection::vec((0usize..7, 0usize..7, 0usize..3), 0..10),
    ) {
        let mut src = String::from("V : 7\nE : bool[V, V]\nF : bool[V, V]\nR : bool[V, V, V]\n");
        for (a, b) in &edges {
            src.push_str(&format!("E({a}, {b}).\n"));
        }
        for (a, b) in &f {
            src.push_str(&format!("F({a}, {b}).\n"));
        }
        for (a, b, c) in &r {
            src.push_str(&format!("R({a}, {b}, {c}).\n"));
        }
        src.push_str(CYCLIC_RULES);
        let a = run(&src, &Reference).unwrap();
        let b = run(&src, &Standard).unwrap();
        for name in ["Tri", "Tri2", "Sq", "C", "T3", "K", "N", "Deg"] {
            prop_assert_eq!(a.tensor(name), b.tensor(name), "{} in\n{}", name, src);
        }
    }
}

#[test]
fn a_read_past_the_end_inside_not_is_false_on_both_engines() {
    // §6.5: `not B(x + 1)` at the largest x reads outside B, which is false, so the negation
    // holds; it must not shorten x's range either.
    let src = "S(0). S(1). S(2).\nB(1).\nR(x) :- S(x), not B(x + 1).\nR(x)?\n";
    for engine in [&Standard as &dyn Engine, &Reference] {
        let s = run(src, engine).unwrap();
        let lines = s.query("R(x)").unwrap();
        assert_eq!(lines, vec!["R(1)", "R(2)"], "{}", engine.name());
    }
}

#[test]
fn an_anonymous_variable_in_a_negated_atom_means_no_row_matches() {
    // `not F(x, _)` is "no F(x, y) for any y" (as in Soufflé); a named variable there is summed
    // outside the negation (§6.2): "some y without F(x, y)". Each `_` is its own variable.
    let src = "E(0, 1). E(1, 2). E(2, 0). E(3, 3).\nF(0, 1). F(3, 0).\n\
               None(x) :- E(x, _), not F(x, _).\n\
               Some(x) :- E(x, y), not F(x, z).\n\
               Both(x) :- E(x, _), E(_, x).\n\
               Loop(x) :- E(x, y), E(y, x).\n\
               Reach(y) :- E(0, y), not F(y, _).\nReach(z) :- Reach(y), E(y, z), not F(z, _).\n\
               Mixed(x) :- E(x, y), not F(z, _).\n";
    for engine in [&Standard as &dyn Engine, &Reference] {
        let s = run(src, engine).unwrap();
        let q = |text: &str| s.query(text).unwrap();
        let name = engine.name();
        assert_eq!(q("None(x)"), vec!["None(1)", "None(2)"], "{name}");
        assert_eq!(
            q("Some(x)"),
            vec!["Some(0)", "Some(1)", "Some(2)", "Some(3)"],
            "{name}"
        );
        assert_eq!(
            q("Both(x)"),
            vec!["Both(0)", "Both(1)", "Both(2)", "Both(3)"],
            "{name}"
        );
        assert_eq!(q("Loop(x)"), vec!["Loop(3)"], "{name}");
        assert_eq!(q("Reach(x)"), vec!["Reach(1)", "Reach(2)"], "{name}");
        // `z` is summed over the body, outside the negation, though a `_` shares its atom:
        // some z (1, say) has no F(z, _), so every x with an edge qualifies. Summed inside,
        // it would read "there is no F at all", which is false.
        assert_eq!(
            q("Mixed(x)"),
            vec!["Mixed(0)", "Mixed(1)", "Mixed(2)", "Mixed(3)"],
            "{name}"
        );
    }
}

#[test]
fn backward_chaining_through_negation_with_constants_answers_like_forward_chaining() {
    // `not Path(y, s)` with `s` bound by the query: the negated relation is answered by its
    // own demand for that constant (plan/demand.rs), not evaluated whole.
    let mut x: u64 = 7;
    let mut src = String::new();
    for _ in 0..120 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let (a, b) = ((x >> 33) % 60, (x >> 13) % 60);
        src.push_str(&format!("Edge({a}, {b}).\n"));
    }
    src.push_str(
        "Path(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n\
         OneWay(s, y) :- Path(s, y), not Path(y, s).\nNotBack(y) :- Path(3, y), not Path(y, 3).\n",
    );
    let full = run(&src, &Standard).unwrap();
    for text in [
        "OneWay(0, x)",
        "OneWay(5, x)",
        "OneWay(17, x)",
        "NotBack(x)",
        "OneWay(x, 4)",
    ] {
        let mut s = Session::new();
        s.load_source("p.tl", &src, Path::new(".")).unwrap();
        s.check(&Default::default()).unwrap();
        let q = s.prepare_query(text).unwrap();
        let backward = s.answer(&Standard, &RunOptions::default(), &q).unwrap();
        assert_eq!(full.query(text).unwrap(), backward, "{text}");
    }
}

#[test]
fn a_commit_that_keeps_a_minimum_improving_fails_and_the_next_one_recovers() {
    // Every hop costs −1, so a cycle of steps keeps improving `Dist`.
    let src = "N : {A, B, C}\nStep : bool[N, N]\nStep(A, B). Step(B, C).\nDist[x, y] min= Step(x, y) - 2\nDist[x, z] min= Dist[x, y] + Step(y, z) - 2\n";
    let settings = tensor_logic::Settings {
        max_iters: 30,
        ..Default::default()
    };
    let opts = RunOptions {
        settings,
        ..RunOptions::default()
    };
    let fields = |a: &str, b: &str| vec![vec![a.to_string(), b.to_string()]];
    for keeper in [0, 1, 2] {
        let mut s = Session::new();
        s.load_source("p.tl", src, Path::new(".")).unwrap();
        start_incremental(&mut s, &opts, keeper).unwrap();
        let settled = s.tensor("Dist").cloned();
        s.insert("Step", &fields("C", "A")).unwrap();
        let failed = s.commit().unwrap_err();
        let text = failed.render("p.tl", src);
        assert!(
            text.contains("E0401") && text.contains("30 iterations"),
            "{text}"
        );
        assert_eq!(
            s.tensor("Dist").cloned(),
            settled,
            "kept while commits fail"
        );
        // Removing the step that closed the cycle settles `Dist` where it was: no change.
        s.remove("Step", &fields("C", "A")).unwrap();
        let changes = s.commit().unwrap();
        assert!(changes.iter().all(|c| c.name != "Dist"), "{changes:?}");
        assert_eq!(s.tensor("Dist").cloned(), settled);
        // Failing, then settling elsewhere, reports the change from the last good values.
        s.insert("Step", &fields("B", "B")).unwrap();
        assert!(s.commit().is_err());
        s.remove("Step", &fields("B", "B")).unwrap();
        s.insert("Step", &fields("C", "B")).unwrap();
        assert!(s.commit().is_err(), "B → C → B is a cycle too");
        s.remove("Step", &fields("C", "B")).unwrap();
        s.remove("Step", &fields("B", "C")).unwrap();
        s.insert("Step", &fields("A", "C")).unwrap();
        let changes = s.commit().unwrap();
        let scratch = run(&src.replace("Step(B, C).", "Step(A, C)."), &Standard).unwrap();
        assert_eq!(s.tensor("Dist"), scratch.tensor("Dist"));
        let dist = changes.iter().find(|c| c.name == "Dist").unwrap();
        let cells = |rows: &[tensor_logic::Row]| -> Vec<String> {
            let name = |c: &tensor_logic::Cell| match c {
                tensor_logic::Cell::Symbol(s) => s.clone(),
                other => format!("{other:?}"),
            };
            rows.iter()
                .map(|(k, v)| format!("{}{}={v:?}", name(&k[0]), name(&k[1])))
                .collect()
        };
        assert_eq!(cells(&dist.added), ["AC=Some(-1.0)"]);
        assert_eq!(cells(&dist.removed), ["AC=Some(-2.0)", "BC=Some(-1.0)"]);
    }
}

/// A weighted graph over seven declared nodes with `min=`/`max=` paths over it.
fn weighted_program(w: &std::collections::BTreeMap<(usize, usize), i32>) -> String {
    weights_after("N : {N0, N1, N2, N3, N4, N5, N6}\nDist : int[N, N]\n", w)
}

/// `head`, then the weights `w` as element facts of `W` and the rules over them.
fn weights_after(head: &str, w: &std::collections::BTreeMap<(usize, usize), i32>) -> String {
    let mut src = String::from(head);
    for ((a, b), v) in w {
        src.push_str(&format!("W[N{a}, N{b}] = {v}\n"));
    }
    src.push_str(
        "Dist[x, y] min= W[x, y]\nDist[x, z] min= Dist[x, y] + W[y, z]\nFar[x] max= Dist[x, y]\n",
    );
    src
}

/// Stages a batch of weight changes (set with a value, or removed) on `inc` and applies
/// them to `w`, which a program from scratch is written from.
fn stage_weights(
    inc: &mut Session,
    w: &mut std::collections::BTreeMap<(usize, usize), i32>,
    batch: &[(bool, (usize, usize), i32)],
) {
    for &(set, (a, b), v) in batch {
        let at = vec![format!("N{a}"), format!("N{b}")];
        if set {
            let mut row = at;
            row.push(v.to_string());
            inc.insert("W", &[row]).unwrap();
            w.insert((a, b), v);
        } else {
            inc.remove("W", &[at]).unwrap();
            w.remove(&(a, b));
        }
    }
}

/// A sorted list of changed rows: (added, removed).
type RowChanges = (Vec<tensor_logic::Row>, Vec<tensor_logic::Row>);

/// What a commit reported for tensor `name`, and what two runs from scratch (before and
/// after its facts) say changed, each sorted.
fn reported_and_expected(
    changes: &[tensor_logic::Changes],
    (before, after): (&Session, &Session),
    name: &str,
) -> (RowChanges, RowChanges) {
    let sorted = |mut rows: Vec<tensor_logic::Row>| {
        rows.sort_by_key(|r| format!("{r:?}"));
        rows
    };
    let (old, new) = (before.rows(name).unwrap(), after.rows(name).unwrap());
    let added = new.iter().filter(|r| !old.contains(r)).cloned().collect();
    let removed = old.iter().filter(|r| !new.contains(r)).cloned().collect();
    let (got_added, got_removed) = changes
        .iter()
        .find(|c| c.name == name)
        .map(|c| (c.added.clone(), c.removed.clone()))
        .unwrap_or_default();
    (
        (sorted(got_added), sorted(got_removed)),
        (sorted(added), sorted(removed)),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Setting and removing weights commit by commit keeps shortest and longest paths equal
    /// to a run from scratch, and reports exactly what changed.
    #[test]
    fn incremental_weight_changes_agree_with_evaluating_from_scratch(
        edges in proptest::collection::vec(((0usize..7, 0usize..7), 1i32..9), 1..14),
        commits in proptest::collection::vec(
            proptest::collection::vec((any::<bool>(), (0usize..7, 0usize..7), 1i32..9), 1..4),
            1..5,
        ),
        keeper in 0usize..3,
    ) {
        let mut w: std::collections::BTreeMap<(usize, usize), i32> = edges.into_iter().collect();
        let src = weighted_program(&w);
        let mut inc = Session::new();
        inc.load_source("w.tl", &src, Path::new(".")).unwrap();
        start_incremental(&mut inc, &RunOptions::default(), keeper).unwrap_or_else(|e| panic!("{src}\n{e:?}"));
        let mut before = run(&src, &Standard).unwrap();
        for batch in &commits {
            stage_weights(&mut inc, &mut w, batch);
            let changes = inc.commit().unwrap_or_else(|e| panic!("{src}\n{batch:?}\n{e:?}"));
            if w.is_empty() {
                // A program without weights does not define `W`: nothing to run from scratch.
                for name in ["W", "Dist", "Far"] {
                    prop_assert_eq!(inc.rows(name).unwrap(), Vec::new(), "{} after {:?} in\n{}", name, batch, src);
                }
                break;
            }
            let scratch = run(&weighted_program(&w), &Standard).unwrap();
            for name in ["W", "Dist", "Far"] {
                prop_assert_eq!(inc.tensor(name), scratch.tensor(name), "{} after {:?} in\n{}", name, batch, src);
            }
            for name in ["Dist", "Far"] {
                let (reported, expected) = reported_and_expected(&changes, (&before, &scratch), name);
                prop_assert_eq!(reported, expected, "{} changes after {:?} in\n{}", name, batch, src);
            }
            before = scratch;
        }
    }
}

/// [`weighted_program`] without a declared domain: its nodes are the symbols the weights
/// use, and an edge between two nodes no commit touches keeps `W` defined.
fn open_weighted_program(w: &std::collections::BTreeMap<(usize, usize), i32>) -> String {
    weights_after("W[Z0, Z1] = 1\n", w)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20))]

    /// Weights between nodes the program has not seen yet make commits evaluate again from
    /// scratch (with every weight the commits set or removed before); the values and the
    /// reported changes still equal a run from scratch of the same weights.
    #[test]
    fn weights_on_new_nodes_evaluate_again_and_agree_with_evaluating_from_scratch(
        edges in proptest::collection::vec(((0usize..4, 0usize..4), 1i32..9), 1..8),
        commits in proptest::collection::vec(
            proptest::collection::vec((any::<bool>(), (0usize..7, 0usize..7), 1i32..9), 1..4),
            1..5,
        ),
    ) {
        let mut w: std::collections::BTreeMap<(usize, usize), i32> = edges.into_iter().collect();
        let src = open_weighted_program(&w);
        let mut inc = Session::new();
        inc.load_source("w.tl", &src, Path::new(".")).unwrap();
        start_incremental(&mut inc, &RunOptions::default(), 0).unwrap_or_else(|e| panic!("{src}\n{e:?}"));
        let key = |r: &tensor_logic::Row| format!("{r:?}");
        let sorted = |mut rows: Vec<tensor_logic::Row>| {
            rows.sort_by_key(key);
            rows
        };
        let mut before = run(&src, &Standard).unwrap();
        for batch in &commits {
            stage_weights(&mut inc, &mut w, batch);
            let changes = inc.commit().unwrap_or_else(|e| panic!("{src}\n{batch:?}\n{e:?}"));
            let scratch = run(&open_weighted_program(&w), &Standard).unwrap();
            for name in ["W", "Dist", "Far"] {
                prop_assert_eq!(sorted(inc.rows(name).unwrap()), sorted(scratch.rows(name).unwrap()), "{} after {:?} in\n{}", name, batch, src);
            }
            for name in ["Dist", "Far"] {
                let (reported, expected) = reported_and_expected(&changes, (&before, &scratch), name);
                prop_assert_eq!(reported, expected, "{} changes after {:?} in\n{}", name, batch, src);
            }
            before = scratch;
        }
    }
}
