//! `why`: every derivation is a valid proof of minimal height, every sum's terms add up to
//! its value, explanations read off the standard engine's values equal those read off the
//! reference evaluator's, and what cannot be explained is a located error.

mod common;
use proptest::prelude::*;
use std::collections::{BTreeSet, HashMap, VecDeque};
use tensor_logic::eval::{Reference, Standard};
use tensor_logic::why::{WhyNode, WhyOptions};
use tensor_logic::Session;

fn closure(edges: &[(u8, u8)]) -> String {
    let mut src: String = edges
        .iter()
        .map(|(a, b)| format!("Edge(N{a}, N{b}).\n"))
        .collect();
    src.push_str("Path(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n");
    src.push_str("Sink(x) :- Path(y, x), not Path(x, y).\nOut[x] = Edge(x, y)\n");
    src
}

/// Fewest edges from `a` to `b`, by breadth-first search: a path's minimal height.
fn distance(edges: &[(u8, u8)], a: u8, b: u8) -> Option<usize> {
    let mut next: HashMap<u8, Vec<u8>> = HashMap::new();
    for &(x, y) in edges {
        next.entry(x).or_default().push(y);
    }
    let mut seen = HashMap::new();
    let mut queue: VecDeque<(u8, usize)> = next
        .get(&a)
        .into_iter()
        .flatten()
        .map(|&y| (y, 1))
        .collect();
    while let Some((x, d)) = queue.pop_front() {
        if seen.contains_key(&x) {
            continue;
        }
        seen.insert(x, d);
        for &y in next.get(&x).into_iter().flatten() {
            queue.push_back((y, d + 1));
        }
    }
    seen.get(&b).copied()
}

/// Every fact a tree shows holds (or, under `not`, does not), and every leaf that is not
/// negated is an `Edge` given as a fact.
fn valid(s: &Session, n: &WhyNode) -> Result<(), String> {
    let holds = |atom: &str| s.query_rows(atom).map(|a| !a.is_empty()).unwrap_or(false);
    match n.label.strip_prefix("not ") {
        Some(atom) if holds(atom) => return Err(format!("{atom} shown absent but holds")),
        Some(_) => return Ok(()),
        None if !holds(&n.label) => return Err(format!("{} shown but does not hold", n.label)),
        None => {}
    }
    if n.children.is_empty() && !(n.label.starts_with("Edge(") && n.detail.starts_with("fact at")) {
        return Err(format!(
            "leaf {} ({}) is not a given edge",
            n.label, n.detail
        ));
    }
    n.children.iter().try_for_each(|c| valid(s, c))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn derivations_are_valid_and_of_minimal_height(
        edges in prop::collection::vec((0u8..7, 0u8..7), 1..14)
    ) {
        let src = closure(&edges);
        let standard = common::run_source(&src, &Standard).map_err(TestCaseError::fail)?;
        let reference = common::run_source(&src, &Reference).map_err(TestCaseError::fail)?;
        let options = WhyOptions::default();
        let nodes: BTreeSet<u8> = edges.iter().flat_map(|&(a, b)| [a, b]).collect();
        for &a in &nodes {
            for &b in &nodes {
                let atom = format!("Path(N{a}, N{b})");
                let Some(d) = distance(&edges, a, b) else {
                    prop_assert!(standard.why(&atom, &options).is_err());
                    continue;
                };
                let tree = standard.why(&atom, &options).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
                prop_assert_eq!(tree.height(), d, "{}", tree.text());
                valid(&reference, &tree).map_err(TestCaseError::fail)?;
                // Read off the reference evaluator's values, the same explanation.
                let again = reference.why(&atom, &options).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
                prop_assert_eq!(tree.text(), again.text());
            }
            if standard.query_rows(&format!("Sink(N{a})")).map(|v| !v.is_empty()).unwrap_or(false) {
                let tree = standard.why(&format!("Sink(N{a})"), &options).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
                valid(&reference, &tree).map_err(TestCaseError::fail)?;
                prop_assert!(tree.text().contains("absent; decided in stratum"), "{}", tree.text());
            }
        }
    }

    /// With `--provenance` a derivation is a walk down the recorded rounds: as high as the
    /// search finds without it (minimal), and each derived fact's height is its round. The
    /// edges have a third column, so the closure stays on the joins, which record rounds;
    /// the rule that doubles paths is not linear.
    #[test]
    fn with_provenance_derivations_walk_down_the_rounds(
        edges in prop::collection::vec((0u8..7, 0u8..7), 1..14)
    ) {
        let mut src: String = edges
            .iter()
            .map(|(a, b)| format!("Edge(N{a}, N{b}, 1).\n"))
            .collect();
        src.push_str("Path(x, y) :- Edge(x, y, w).\nPath(x, z) :- Path(x, y), Path(y, z).\n");
        let searched = common::run_source(&src, &Standard).map_err(TestCaseError::fail)?;
        let mut walked = Session::new();
        walked.load_source("p.tl", &src, std::path::Path::new(".")).map_err(|d| TestCaseError::fail(d.render("p.tl", &src)))?;
        let options = tensor_logic::RunOptions { provenance: true, ..Default::default() };
        walked.run(&options).map_err(|d| TestCaseError::fail(d.render("p.tl", &src)))?;
        let o = WhyOptions::default();
        let nodes: BTreeSet<u8> = edges.iter().flat_map(|&(a, b)| [a, b]).collect();
        for &a in &nodes {
            for &b in &nodes {
                let atom = format!("Path(N{a}, N{b})");
                let Ok(minimal) = searched.why(&atom, &o) else {
                    prop_assert!(walked.why(&atom, &o).is_err());
                    continue;
                };
                let tree = walked.why(&atom, &o).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
                let h = tree.height();
                prop_assert_eq!(h, minimal.height(), "{}", tree.text());
                let round = format!("height {h}, round {h}, rule at");
                prop_assert!(tree.detail.starts_with(&round), "{}", tree.text());
                valid(&walked, &tree).map_err(TestCaseError::fail)?;
            }
        }
    }

    #[test]
    fn the_terms_of_a_sum_add_up_to_its_value(
        w in prop::collection::vec(-4i32..5, 6),
        x in prop::collection::vec(-4i32..5, 3),
    ) {
        let list = |v: &[i32]| v.iter().map(|n| format!("{n}.5")).collect::<Vec<_>>().join(", ");
        let src = format!(
            "W = [[{}], [{}]]\nX = [{}]\nB = [1.25, -2]\nY[i] = W[i, j] X[j] + B[i]\n",
            list(&w[..3]), list(&w[3..]), list(&x)
        );
        let s = common::run_source(&src, &Standard).map_err(TestCaseError::fail)?;
        let options = WhyOptions { top: 100, ..WhyOptions::default() };
        for i in 0..2 {
            let tree = s.why(&format!("Y[{i}]"), &options).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            let value: f64 = tree.label.rsplit(" = ").next().unwrap_or("").parse().unwrap_or(f64::NAN);
            let sum: f64 = tree.children.iter()
                .filter_map(|c| c.label.strip_prefix("term ")?.parse::<f64>().ok())
                .sum();
            prop_assert!((sum - value).abs() <= 1e-4 * value.abs().max(1.0), "{} vs {value}: {}", sum, tree.text());
            prop_assert_eq!(tree.children.len(), 4);
        }
    }

    /// Reasoning in embedding space: a score regroups by the facts of the relation its
    /// factor embeds, each fact contributing the product of its objects' similarities to
    /// the scored pair (computed here), and the contributions add up to the score.
    #[test]
    fn an_embedding_score_regroups_by_the_facts_embedded(
        emb in prop::collection::vec(-3i32..4, 6),
        facts in prop::collection::btree_set((0usize..3, 0usize..3), 1..6),
        (x, y) in (0usize..3, 0usize..3),
    ) {
        let e = |o: usize, i: usize| f64::from(emb[o * 2 + i]) + 0.5;
        let rows: Vec<String> = (0..3).map(|o| format!("[{}, {}]", e(o, 0), e(o, 1))).collect();
        let names = ["A", "B", "C"];
        let knows: String = facts.iter().map(|&(a, b)| format!("Knows({}, {}). ", names[a], names[b])).collect();
        let src = format!(
            "Obj : {{A, B, C}}\nEmb : real[Obj, 2]\nEmb = [{}]\n{knows}\nEmbR[i, j] = Knows(a, b) Emb[a, i] Emb[b, j]\nD[x, y] = EmbR[i, j] Emb[x, i] Emb[y, j]\n",
            rows.join(", ")
        );
        let s = common::run_source(&src, &Standard).map_err(TestCaseError::fail)?;
        let options = WhyOptions { top: 100, ..WhyOptions::default() };
        let tree = s.why(&format!("D[{}, {}]", names[x], names[y]), &options).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let dot = |a: usize, b: usize| e(a, 0) * e(b, 0) + e(a, 1) * e(b, 1);
        let mut sum = 0.0;
        prop_assert_eq!(tree.children.len(), facts.len(), "{}", tree.text());
        for c in &tree.children {
            let fact = c.label.strip_prefix("fact Knows(").and_then(|f| f.strip_suffix(')')).unwrap_or("");
            let (a, b) = fact.split_once(", ").unwrap_or(("", ""));
            let (a, b) = (names.iter().position(|n| *n == a).unwrap_or(9), names.iter().position(|n| *n == b).unwrap_or(9));
            prop_assert!(facts.contains(&(a, b)), "{}", tree.text());
            let got: f64 = c.detail.strip_prefix("contributes ").and_then(|d| d.split([',', ' ']).next()).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
            let want = dot(a, x) * dot(b, y);
            prop_assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "{} vs {}: {}", got, want, tree.text());
            sum += got;
        }
        let value: f64 = tree.label.rsplit(" = ").next().unwrap_or("").parse().unwrap_or(f64::NAN);
        prop_assert!((sum - value).abs() <= 1e-6 * value.abs().max(1.0), "{} vs {}: {}", sum, value, tree.text());
    }
}

#[test]
fn a_shortest_distance_is_explained_by_its_path() {
    let src = "Edge[A, B] = 4\nEdge[B, C] = 3\nEdge[A, C] = 9\nEdge[C, D] = 1\n\
        Dist[A, A] = 0\nDist[x, z] min= Dist[x, y] + Edge[y, z]\n";
    let s = common::run_source(src, &Standard).unwrap_or_else(|e| panic!("{e}"));
    let tree = s
        .why("Dist[A, D]", &WhyOptions::default())
        .unwrap_or_else(|e| panic!("{e:?}"));
    let text = tree.text();
    let edges: Vec<&str> = ["Edge[C, D] = 1", "Edge[B, C] = 3", "Edge[A, B] = 4"].to_vec();
    for e in &edges {
        assert!(text.contains(e), "{text}");
    }
    assert!(!text.contains("Edge[A, C]"), "{text}");
    assert_eq!(tree.label, "Dist[A, D] = 8");
}

#[test]
fn what_cannot_be_explained_is_a_located_error() {
    let s = common::run_source(&closure(&[(1, 2), (2, 3)]), &Standard)
        .unwrap_or_else(|e| panic!("{e}"));
    let o = WhyOptions::default();
    let code =
        |atom: &str, o: &WhyOptions| s.why(atom, o).map(|_| "").unwrap_or_else(|d| d.0[0].code);
    assert_eq!(code("Nope(N1)", &o), "E0101");
    assert_eq!(code("Path(N1)", &o), "E0103");
    assert_eq!(code("Path(N1, x)", &o), "E0701");
    assert_eq!(code("Path(N9, N1)", &o), "E0701");
    let not_held = s.why("Path(N3, N1)", &o).err().map(|d| d.0[0].clone());
    let d = not_held.unwrap_or_else(|| panic!("no error"));
    assert!(d.notes.iter().any(|n| n.contains("--not")), "{d:?}");
    let why_not = s
        .why(
            "Path(N3, N1)",
            &WhyOptions {
                not: true,
                ..o.clone()
            },
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(
        why_not.text().contains("fails at `Edge(N3, N1)`"),
        "{}",
        why_not.text()
    );
}

#[test]
fn tl_why_prints_the_tree_and_json() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = common::tl(dir, &["why", "examples/family.tl", "Ancestor(Alice, Dana)"]);
    let text = common::stdout(&out);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(
        text.starts_with("Ancestor(Alice, Dana)  (height 2, rule at examples/family.tl:7"),
        "{text}"
    );
    assert!(
        text.contains("└─ Parent(Bob, Dana)  (fact at examples/family.tl:3)"),
        "{text}"
    );
    let out = common::tl(
        dir,
        &[
            "why",
            "examples/family.tl",
            "Children[Bob]",
            "--format",
            "json",
        ],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(json["label"], "Children[Bob] = 2");
    let out = common::tl(dir, &["why", "examples/family.tl", "Ancestor(Dana, Alice)"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn why_explains_the_facts_as_they_are_after_a_commit() {
    let mut s = Session::new();
    let src = closure(&[(1, 2), (2, 3)]);
    s.load_source("p.tl", &src, std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("{e:?}"));
    s.run_incremental(&tensor_logic::RunOptions::default())
        .unwrap_or_else(|e| panic!("{e:?}"));
    let row = |a: &str, b: &str| vec![a.to_string(), b.to_string()];
    s.insert("Edge", &[row("N3", "N1")])
        .unwrap_or_else(|e| panic!("{e:?}"));
    s.remove("Edge", &[row("N1", "N2")])
        .unwrap_or_else(|e| panic!("{e:?}"));
    s.commit().unwrap_or_else(|e| panic!("{e:?}"));
    let o = WhyOptions::default();
    let tree = s
        .why("Path(N2, N1)", &o)
        .unwrap_or_else(|e| panic!("{e:?}"));
    let text = tree.text();
    assert!(
        text.contains("Edge(N3, N1)  (given: bound from outside, or inserted by a commit)"),
        "{text}"
    );
    assert_eq!(tree.height(), 2, "{text}");
    assert!(
        s.why("Path(N1, N2)", &o).is_err(),
        "a removed edge no longer derives it"
    );
}

/// A variable only the body names (`k`, summed inside the rule) is bound by its atom: the
/// tree shows the atom at its value, and `why --not` names it as what fails. (The instance
/// search once evaluated the nested sum at one point and showed no body, slowly.)
#[test]
fn a_variable_only_in_the_body_is_bound_by_its_atom() {
    let src = "Parent(Ann, Bob, 1). Parent(Bob, Cid, 2).\n\
               Ancestor(x, y) :- Parent(x, y, k).\n\
               Ancestor(x, z) :- Ancestor(x, y), Parent(y, z, k).\n";
    let s = common::run_source(src, &Standard).unwrap_or_else(|e| panic!("{e}"));
    let tree = s
        .why("Ancestor(Ann, Cid)", &WhyOptions::default())
        .unwrap_or_else(|e| panic!("{e:?}"));
    let text = tree.text();
    assert!(
        text.contains("└─ Parent(Bob, Cid, 2)  (fact at p.tl:1)"),
        "{text}"
    );
    assert_eq!(tree.height(), 2, "{text}");
    let not = WhyOptions {
        not: true,
        ..WhyOptions::default()
    };
    let text = s
        .why("Ancestor(Cid, Ann)", &not)
        .unwrap_or_else(|e| panic!("{e:?}"))
        .text();
    assert!(
        text.contains("(fails at `Parent(Cid, Ann, k)`: no such fact)"),
        "{text}"
    );
}

/// `tl why --provenance` records rounds while evaluating and shows each step's round.
#[test]
fn tl_why_with_provenance_shows_the_rounds() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    common::write(
        dir.path(),
        "p.tl",
        "Parent(Ann, Bob, 1). Parent(Bob, Cid, 1).\n\
         Ancestor(x, y) :- Parent(x, y, k).\n\
         Ancestor(x, z) :- Ancestor(x, y), Parent(y, z, k).\n",
    );
    let args = ["why", "--provenance", "p.tl", "Ancestor(Ann, Cid)"];
    let out = common::tl(dir.path(), &args);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    assert!(
        text.starts_with("Ancestor(Ann, Cid)  (height 2, round 2, rule at p.tl:3"),
        "{text}"
    );
}
