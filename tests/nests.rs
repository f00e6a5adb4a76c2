//! Loop nests (the kernel for equations the specialised kernels do not take) must agree with
//! the reference evaluator on random programs that mix relations, tensors of defined
//! elements, dense tensors, comparisons, constants, nested summations, `max=`/`min=`/`avg=`
//! and recursion — and the decision log must show that they, not the reference loops, ran.

mod common;

use proptest::prelude::*;
use tensor_logic::eval::{Engine, Ran, Reference, Standard};
use tensor_logic::Session;

/// A random program: sizes, facts and values, and which equations it holds.
#[derive(Clone, Debug)]
struct Gen {
    n: usize,
    edges: Vec<(usize, usize)>,
    marks: Vec<usize>,
    elements: Vec<(usize, usize, i32)>,
    dense: Vec<i32>,
    matrix: Vec<i32>,
    threshold: i32,
    equations: Vec<usize>,
}

/// Equation templates; each reads the data above (R, S, V, D, M) or earlier results.
const TEMPLATES: [&str; 33] = [
    "T0[x] = R(x, y) M[x, y] (D[y] > C)",
    "T1[x, y] = V[x, z] R(z, y)",
    "T2 = R(x, y) / (1 + D[x] * D[x])",
    "T3[x] max= V[x, y] + D[y]",
    "T4[x] = relu(R(x, y) D[y] - C) + D[x]",
    "T5[x] avg= M[x, y] R(x, y)",
    "T6[x] = 0.25 / N * R(x, y) T6[y] + D[x]",
    "T7[x] min= V[x, y] - M[y, x]",
    "T8 = V[x, y] V[y, x]",
    "T9[x] = S[x] (1 - R[x, x]) + S[x] exp(-1 / C2)",
    "Q0(x) :- S(x), R(x, y), M[x, y] > C.",
    "T10[y] = S(x) R(x, y) (M[x, y] != D[y]) M[y, x]",
    "T11[x] = sig(V[x, y] D[y]) + max(D[x], C)",
    "T12[x] max= R(x, y) M[x, y] D[y]",
    "U0[x] = W[x, y] R(y, x)",
    "U1[x] max= W[x, y] + W[y, x]",
    "U2 = W[x, y] D[y] + W[y, x] (x < y)",
    "U3[x] min= W[x, y] M[x, y]",
    "U4[x, y] = W[x, z] W[z, y]",
    "Y5[x, *t + 1] = 0.5 * R(x, y) Y5[y, *t] + D[t] (t < C)",
    "A6[i, 0] = D[i]\nA6[i, t + 1] = 0.5 * M[i, j] A6[j, t] + D[t]",
    "L7 = [1, -2, 0.5]\nB7[i, 0] = D[i]\nC7[i, t] = relu(M[i, j] B7[j, t]) * L7[t]\n\
     B7[i, t + 1] = R(i, j) C7[j, t] - 0.5 * B7[i, t] + t",
    "L9 = [0.5, 1, -1]\nV9[0, s] max= D[s]\nV9[t + 1, s] max= V9[t, r] + M[r, s] + L9[t]",
    "Q1(y) :- S(y).\nQ1(y) :- Q1(x), R(x, y), M[x, y] > C.",
    "Q2(x, y) :- R(x, y), not (W[x, y] > C), x < y + 1.",
    "K3 : int[Node]\nK3[x] = R(x, y) (D[y] + D[x] > C)",
    "Q4(x, y, z) :- R(x, y), R(y, z), R(z, x), M[x, z] * 2 >= C.",
    "Z5(0).\nZ5(n + 1) :- Z5(n), S(n).",
    "P6(x, y - 1) :- R(x, y), y > 0.",
    "K8 : int[Node]\nK8[x / 2] = R(x, y) (M[x, y] > C)",
    "L10 = [0.5, 2, -1]\nX10[0, s] max= D[s]\nX10[t + 1, s] max= X10[t, r] M[r, s] L10[t]",
    "L11 = [1, -0.5]\nY11[0, s] min= D[s]\nY11[t + 1, s] min= 0.5 * Y11[t, r] / C2 * V[s, r] L11[t]",
    "K12 : int[Node]\nK12[x] = R(x, y)\nB12 : bool[Node, Node]\nB12(x, y) :- y = K12[x] * 2 - 1.",
];

fn program(g: &Gen) -> String {
    let n = g.n;
    let mut src = format!("N = {n}\nC = {}\nC2 = 4\nNode : {n}\n", g.threshold);
    src.push_str("R : bool[Node, Node]\nS : bool[Node]\n");
    for &(a, b) in &g.edges {
        src.push_str(&format!("R({}, {}).\n", a % n, b % n));
    }
    for &a in &g.marks {
        src.push_str(&format!("S({}).\n", a % n));
    }
    // Elements: V is declared (dense, its axes the nodes'), W is not (its defined
    // elements only, its extents those of its elements: reads past them are nothing).
    src.push_str("V : real[Node, Node]\n");
    for &(a, b, v) in &g.elements {
        let v = f64::from(v) / 4.0;
        src.push_str(&format!(
            "V[{}, {}] = {v}\nW[{}, {}] = {v}\n",
            a % n,
            b % n,
            b % n,
            a % n
        ));
    }
    if g.elements.is_empty() {
        src.push_str("W[0, 0] = 1\n");
    }
    let d: Vec<String> = (0..n)
        .map(|i| format!("{}", f64::from(g.dense[i % g.dense.len()]) / 4.0))
        .collect();
    src.push_str(&format!("D = [{}]\n", d.join(", ")));
    let rows: Vec<String> = (0..n)
        .map(|i| {
            let row: Vec<String> = (0..n)
                .map(|j| {
                    format!(
                        "{}",
                        f64::from(g.matrix[(i * n + j) % g.matrix.len()]) / 2.0
                    )
                })
                .collect();
            format!("[{}]", row.join(", "))
        })
        .collect();
    src.push_str(&format!("M = [{}]\n", rows.join(", ")));
    let mut equations = g.equations.clone();
    equations.sort_unstable();
    equations.dedup();
    for e in equations {
        src.push_str(TEMPLATES[e % TEMPLATES.len()]);
        src.push('\n');
    }
    src
}

fn run(src: &str, engine: &dyn Engine) -> Session {
    common::run_source(src, engine).unwrap_or_else(|e| panic!("{e}"))
}

fn gen() -> impl Strategy<Value = Gen> {
    (
        // Up to 12 nodes: loop nests evaluate ranges of 8 or more a row at a time.
        1usize..13,
        proptest::collection::vec((0usize..13, 0usize..13), 0..30),
        proptest::collection::vec(0usize..13, 0..8),
        proptest::collection::vec((0usize..13, 0usize..13, -8i32..9), 0..16),
        proptest::collection::vec(-8i32..9, 1..7),
        proptest::collection::vec(-8i32..9, 1..12),
        -3i32..4,
        proptest::collection::vec(0usize..TEMPLATES.len(), 1..5),
    )
        .prop_map(
            |(n, edges, marks, elements, dense, matrix, threshold, equations)| Gen {
                n,
                edges,
                marks,
                elements,
                dense,
                matrix,
                threshold,
                equations,
            },
        )
}

/// Whether two values agree within the rounding of a different summation order in f32
/// (`real`), and the convergence tolerance of a recursion (1e-6), relative to the tensor's
/// largest magnitude `scale` (a recursion along an index carries its rounding forward).
/// That every stratum ran on the kernel its plan chose (none declined to the loop nests).
fn ran_as_planned(s: &Session) -> Result<(), String> {
    let plan = s.plan().ok_or("no plan")?;
    for d in s.decisions() {
        let planned = Ran::planned(&plan.strata[d.stratum].kernel);
        if d.ran != planned {
            return Err(format!(
                "stratum {}: {:?}, planned {planned:?} ({:?})",
                d.stratum, d.ran, d.reason
            ));
        }
    }
    Ok(())
}

fn close(a: f64, b: f64, scale: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-5 * (1.0 + scale)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn loop_nests_agree_with_the_reference(g in gen()) {
        let src = program(&g);
        let fast = run(&src, &Standard);
        let oracle = run(&src, &Reference);
        let checked = fast.checked().unwrap();
        for info in &checked.tensors {
            let (a, b) = (fast.tensor(&info.name).unwrap(), oracle.tensor(&info.name).unwrap());
            let (ea, eb) = (a.entries(), b.entries());
            prop_assert_eq!(ea.len(), eb.len(), "{} defined elements\n{}", info.name, src);
            let scale = eb.iter().map(|(_, v)| v.abs()).filter(|v| v.is_finite()).fold(0.0, f64::max);
            for ((ia, va), (ib, vb)) in ea.iter().zip(&eb) {
                prop_assert_eq!(ia, ib, "{}\n{}", info.name, src);
                prop_assert!(close(*va, *vb, scale), "{}{:?}: {} vs {}\n{}", info.name, ia, va, vb, src);
            }
        }
        prop_assert!(ran_as_planned(&fast).is_ok(), "{:?}\n{}", ran_as_planned(&fast), src);
    }
}

/// A variable a rule equates with a value of the others (`c = Text[s, p + 1]`) takes that
/// value instead of running over its range: the answers are the reference's, with values
/// out of range or negative giving no tuple.
#[test]
fn an_equality_binds_its_variable() {
    let src = "Char : 4\nPos : 4\nRow : 2\nSix : 5\nText : int[Row, Six]\n\
               Text = [[0, 3, 2, -1, 7], [1, 1, 0, 2, 3]]\n\
               Tok : bool[Row, Pos, Char]\n\
               Tok(s, p, c) :- c = Text[s, p + 1].\n";
    let fast = run(src, &Standard);
    let oracle = run(src, &Reference);
    assert_eq!(fast.query("Tok").unwrap(), oracle.query("Tok").unwrap());
    assert_eq!(fast.query("Tok").unwrap().len(), 6, "3, 2; 1, 1, 0, 2");
    let explained = fast.explain().unwrap_or_default();
    assert!(
        explained.contains("bind c to the value it equals"),
        "{explained}"
    );
}

/// A tensor of defined elements with a huge declared extent is scanned, not looped over.
#[test]
fn huge_extents_cost_their_defined_elements() {
    let src = "E[1000000000, 1000000000] = 1\nS = E[x, y]\nT = E[x, y] E[y, x]\n";
    let s = run(src, &Standard);
    assert_eq!(s.query("S").unwrap(), vec!["S = 1"]);
    ran_as_planned(&s).unwrap();
}

/// A count over relations whose dense array would hold 25M elements is stored as its
/// non-zeros, and equals the two-step paths counted directly; sums over it scan them.
#[test]
fn large_counts_are_stored_as_their_non_zeros() {
    use std::collections::BTreeMap;
    use tensor_logic::tensor::Storage;
    let n = 5000u64;
    let edges: Vec<(u64, u64)> = (0..20_000u64)
        .map(|i| ((i * 7919) % n, (i * 104_729 + 13) % n))
        .collect();
    let mut src = format!("Nodes : {n}\nEdge : bool[Nodes, Nodes]\n");
    for (a, b) in &edges {
        src.push_str(&format!("Edge({a}, {b}).\n"));
    }
    src.push_str(
        "Two[x, z] = Edge(x, y) Edge(y, z)\nTotal = Two[x, z]\nSquares = Two[x, z] Two[x, z]\n",
    );
    let s = run(&src, &Standard);
    let mut distinct: Vec<(u64, u64)> = edges.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let mut from: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for &(a, b) in &distinct {
        from.entry(a).or_default().push(b);
    }
    let mut want: BTreeMap<(u64, u64), f64> = BTreeMap::new();
    for &(a, b) in &distinct {
        for &d in from.get(&b).into_iter().flatten() {
            *want.entry((a, d)).or_default() += 1.0;
        }
    }
    let two = s.tensor("Two").unwrap();
    let Storage::Sparse(stored) = &two.storage else {
        panic!("Two is not stored sparse: {:?}", two.shape)
    };
    let got: BTreeMap<(u64, u64), f64> = stored
        .iter()
        .map(|(k, v)| ((u64::from(k[0]), u64::from(k[1])), v))
        .collect();
    assert_eq!(got, want);
    let total: f64 = want.values().sum();
    let squares: f64 = want.values().map(|v| v * v).sum();
    assert_eq!(s.query("Total").unwrap(), vec![format!("Total = {total}")]);
    assert_eq!(
        s.query("Squares").unwrap(),
        vec![format!("Squares = {squares}")]
    );
    ran_as_planned(&s).unwrap();
}

/// Rules with value comparisons and head arithmetic run on the join engine (the decision
/// log says so), with the reference's answers, in recursion too.
#[test]
fn value_checks_and_head_arithmetic_run_as_joins() {
    let src = "Node : 6\nE : bool[Node, Node]\nE(0, 1). E(1, 2). E(2, 3). E(3, 4). E(4, 5).\n\
               W = [[0, 0.9, 0, 0, 0, 0], [0, 0, 0.8, 0, 0, 0], [0, 0, 0, 0.1, 0, 0], \
               [0, 0, 0, 0, 0.9, 0], [0, 0, 0, 0, 0, 0.9], [0, 0, 0, 0, 0, 0]]\n\
               Reach(0).\nReach(y) :- Reach(x), E(x, y), W[x, y] > 0.5.\n\
               Nat(0).\nNat(n + 1) :- Nat(n), n < 50.\n\
               Back(x, y - 1) :- E(x, y), y > 1.\n";
    let fast = run(src, &Standard);
    let oracle = run(src, &Reference);
    for t in ["Reach", "Nat", "Back"] {
        assert_eq!(fast.query(t).unwrap(), oracle.query(t).unwrap(), "{t}");
    }
    assert_eq!(
        fast.query("Reach").unwrap().len(),
        3,
        "0, 1, 2: W[2, 3] is 0.1"
    );
    assert_eq!(fast.query("Nat").unwrap().len(), 51);
    let checked = fast.checked().unwrap();
    for d in fast.decisions() {
        let names: Vec<&str> = checked.strata[d.stratum]
            .tensors
            .iter()
            .map(|&t| checked.tensors[t].name.as_str())
            .collect();
        if names.iter().any(|n| ["Reach", "Nat", "Back"].contains(n)) {
            assert_eq!(d.ran, Ran::Joins, "{names:?}");
        }
    }
}
