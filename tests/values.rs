//! Values in integer columns (§8): random programs with negative and larger values, guarded
//! arithmetic heads, recursion counting down, value bindings of index arithmetic and of
//! counts, `/` and `%`, bitwise calls and negation, on which the standard engine must agree
//! exactly with the reference evaluator.

mod common;

use proptest::prelude::*;
use tensor_logic::eval::{Cluster, Differential, Engine, Ran, Reference, Standard};
use tensor_logic::Session;

/// One rule template and its constants.
#[derive(Clone, Debug)]
enum Template {
    /// `A(x + k, y) :- V(x, y), x > c.`
    Shifted(i64, i64),
    /// `B(x, n) :- U(x), n = Cnt[x].`
    Counted,
    /// `C(y, z) :- V(x, y), z = x * k - y.`
    Bound(i64),
    /// `D(x) :- U(x), not V(x, _).` or `not U(x + 1)`.
    Negated(bool),
    /// `E(x, band(x, m))` or `bshr`.
    Bitwise(i64, bool),
    /// `R(x) :- U(x).  R(x - s) :- R(x), x > c.`
    Down(i64, i64),
    /// `F(x % k, x / k) :- U(x).`
    Divided(i64),
}

fn template() -> impl Strategy<Value = Template> {
    prop_oneof![
        (-3i64..4, -10i64..10).prop_map(|(k, c)| Template::Shifted(k, c)),
        Just(Template::Counted),
        (-3i64..4).prop_map(Template::Bound),
        any::<bool>().prop_map(Template::Negated),
        (1i64..16, any::<bool>()).prop_map(|(m, and)| Template::Bitwise(m, and)),
        (1i64..4, -30i64..0).prop_map(|(s, c)| Template::Down(s, c)),
        prop_oneof![-5i64..-1, 2i64..6].prop_map(Template::Divided),
    ]
}

fn value() -> impl Strategy<Value = i64> {
    prop_oneof![8 => -25i64..25, 1 => Just(600), 1 => Just(-600)]
}

fn program(pairs: &[(i64, i64)], singles: &[i64], templates: &[Template]) -> String {
    let mut src = String::new();
    for (a, b) in pairs {
        src.push_str(&format!("V({a}, {b}).\n"));
    }
    for a in singles {
        src.push_str(&format!("U({a}).\n"));
    }
    src.push_str("Cnt[x] = V(x, y)\n");
    for (k, t) in templates.iter().enumerate() {
        let rule = match t {
            Template::Shifted(d, c) => format!("T{k}(x + {d}, y) :- V(x, y), x > {c}."),
            Template::Counted => format!("T{k}(x, n) :- U(x), n = Cnt[x]."),
            Template::Bound(m) => format!("T{k}(y, z) :- V(x, y), z = x * {m} - y."),
            Template::Negated(true) => format!("T{k}(x) :- U(x), not V(x, _)."),
            Template::Negated(false) => format!("T{k}(x) :- U(x), not U(x + 1)."),
            Template::Bitwise(m, true) => format!("T{k}(x, band(x, {m})) :- U(x)."),
            Template::Bitwise(m, false) => format!("T{k}(x, y) :- U(x), y = bshr(x, {m} % 3)."),
            Template::Down(s, c) => {
                format!("T{k}(x) :- U(x), x < 30.\nT{k}(x - {s}) :- T{k}(x), x > {c}.")
            }
            Template::Divided(d) => format!("T{k}(x % {d}, x / {d}) :- U(x)."),
        };
        src.push_str(&rule);
        src.push('\n');
    }
    src
}

fn run(src: &str, engine: &dyn Engine) -> Result<Session, String> {
    common::run_source(src, engine)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn both_engines_agree_on_values_in_columns(
        pairs in proptest::collection::vec((value(), value()), 1..8),
        singles in proptest::collection::vec(value(), 1..6),
        templates in proptest::collection::vec(template(), 1..5),
    ) {
        let src = program(&pairs, &singles, &templates);
        let (a, b) = match (run(&src, &Reference), run(&src, &Standard)) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => panic!("{src}\nreference: {:?}\nstandard: {:?}", a.err(), b.err()),
        };
        for (k, t) in templates.iter().enumerate() {
            let name = format!("T{k}");
            let unary = matches!(t, Template::Negated(_) | Template::Down(..));
            let query = format!("{name}({})", if unary { "x" } else { "x, y" });
            prop_assert_eq!(a.query(&query).unwrap(), b.query(&query).unwrap(), "{} differs in\n{}", name, src);
        }
    }
}

/// A head that writes `x + 2` into an open column does not bound `x`: `x` ranges over
/// `V`'s numbered column (603 positions, numbered because `Cnt` counts by it), not over the
/// open column's 2³² — the reference once looped over 8.6·10⁹ points here.
#[test]
fn a_value_written_into_an_open_column_leaves_its_variable_ranged_by_the_body() {
    let src =
        "V(600, -14).\nV(-2, 21).\nV(10, 11).\nCnt[x] = V(x, y)\nT0(x + 2, y) :- V(x, y), x > 8.\n";
    let started = std::time::Instant::now();
    for engine in [&Reference as &dyn Engine, &Standard] {
        let s = run(src, engine).unwrap();
        assert_eq!(
            s.query("T0(x, y)").unwrap(),
            vec!["T0(12, 11)", "T0(602, -14)"]
        );
    }
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
}

#[test]
fn answers_print_values_and_negation_reads_past_the_end_as_false() {
    let src = "U(-2). U(3). U(4).\nLast(x) :- U(x), not U(x + 1).\nNeg(x) :- U(x), x < 0.\nLast(x)?\nNeg(x)?\n";
    for engine in [&Reference as &dyn Engine, &Standard] {
        let s = run(src, engine).unwrap();
        assert_eq!(s.query("Last(x)").unwrap(), vec!["Last(-2)", "Last(4)"]);
        assert_eq!(s.query("Neg(x)").unwrap(), vec!["Neg(-2)"]);
    }
}

#[test]
fn integers_past_two_to_the_53_stay_exact_in_columns() {
    // `N` reads `Id` as a count, so its column is numbered values rather than open: `x + 2`
    // and `y = x * 3 - 1` are then computed by value sites, which keep integers in i64.
    let src = "Id(9007199254740993).\nN[k] = Id(k)\nJ(x + 2) :- Id(x).\nK(y) :- Id(x), y = x * 3 - 1.\nM(y) :- Id(x), y = max(x, 5) - bshr(x, 60).\nJ?\nK?\nM?\n";
    for engine in [&Reference as &dyn Engine, &Standard] {
        let s = run(src, engine).unwrap();
        assert_eq!(s.query("J(x)").unwrap(), vec!["J(9007199254740995)"]);
        assert_eq!(s.query("K(x)").unwrap(), vec!["K(27021597764222978)"]);
        assert_eq!(s.query("M(x)").unwrap(), vec!["M(9007199254740993)"]);
    }
    // Comparisons with constants are exact past 2⁵³, negative ones too.
    let compared = "E(9007199254740993, 1).\nE(9007199254740992, 2).\nE(-9007199254740993, 3).\nG(y) :- E(x, y), x = 9007199254740993.\nH(y) :- E(x, y), x < -9007199254740992.\nK(y) :- E(x, y), x + 1 > 9007199254740993.\nL(y) :- E(x, y), 3 * x - 2 * x < -9007199254740992.\n";
    for engine in [&Reference as &dyn Engine, &Standard] {
        let s = run(compared, engine).unwrap();
        assert_eq!(s.query("G(y)").unwrap(), vec!["G(1)"]);
        assert_eq!(s.query("H(y)").unwrap(), vec!["H(3)"]);
        // Arithmetic in a comparison is exact too (in i128: `3 * x` may pass i64).
        assert_eq!(s.query("K(y)").unwrap(), vec!["K(1)"]);
        assert_eq!(s.query("L(y)").unwrap(), vec!["L(3)"]);
    }
    // A computed value that leaves i64 is an error, never a wrap.
    let over = "Id(9007199254740993).\nN[k] = Id(k)\nK(y) :- Id(x), y = x * 2048.\nK?\n";
    for engine in [&Reference as &dyn Engine, &Standard] {
        let e = run(over, engine).err().unwrap();
        assert!(e.contains("E0406"), "{e}");
    }
}

#[test]
fn integer_tensors_are_exact_over_all_of_i64() {
    // Aggregates, sums and arithmetic of integer tensors past 2⁵³ (where f64 would round
    // 9007199254740993 to ...992), on both engines; leaving i64 is E0406, never a wrap.
    let src = "V(Lo, -4294967296). V(Hi, 4294967295). V(Big, 9007199254740993). V(Big, 1).\n\
               Top[k] max= V(k, v) v\nLow[k] min= V(k, v) v\nS[k] += V(k, v) v\n\
               M[k] = Top[k] * 3 - 1\nD[k] = Top[k] - Low[k]\nTotal = S[k]\n";
    for engine in [&Reference as &dyn Engine, &Standard] {
        let s = run(src, engine).unwrap();
        assert_eq!(
            s.query("Top[Big]").unwrap(),
            vec!["Top[Big] = 9007199254740993"]
        );
        assert_eq!(
            s.query("S[Big]").unwrap(),
            vec!["S[Big] = 9007199254740994"]
        );
        assert_eq!(
            s.query("M[Big]").unwrap(),
            vec!["M[Big] = 27021597764222978"]
        );
        assert_eq!(
            s.query("D[Big]").unwrap(),
            vec!["D[Big] = 9007199254740992"]
        );
        assert_eq!(s.query("Total").unwrap(), vec!["Total = 9007199254740993"]);
    }
    let over = "V(A, 4611686018427387904).\nTop[k] max= V(k, v) v\nT[k] = Top[k] + Top[k]\n";
    for engine in [&Reference as &dyn Engine, &Standard] {
        let e = run(over, engine).err().unwrap();
        assert!(e.contains("E0406") && e.contains("`T`"), "{e}");
    }
}

/// Semi-naive `min=` over `int` tensors adds in f64 while every value is below 2⁵³ (it runs
/// as planned), and past it gives the stratum to the loop nests, which add in i64: shortest
/// paths whose lengths pass 2⁵³ are exact, with weights as tensor elements (`W[y, z]`) or
/// as column values (`Road(y, z, w) w`). The differential engine agrees or refuses (E0407).
#[test]
fn int_shortest_paths_past_two_to_the_53_stay_exact() {
    let src = |a: i64, b: i64| {
        format!(
            "Road(A, B, {a}). Road(B, C, {b}). Road(C, D, 1). Road(A, D, {}).\n\
             W[x, y] min= Road(x, y, w) w\n\
             Dist[x, y] min= W[x, y]\nDist[x, z] min= Dist[x, y] + W[y, z]\n\
             Len[x, y] min= Road(x, y, w) w\nLen[x, z] min= Len[x, y] + Road(y, z, w) w\n",
            a + b + 2
        )
    };
    let ran = |s: &Session, name: &str| {
        let checked = s.checked().unwrap();
        let t = checked.tensor_id(name).unwrap();
        let d = s
            .decisions()
            .iter()
            .find(|d| checked.strata[d.stratum].tensors.contains(&t));
        d.map(|d| d.ran).unwrap()
    };
    let (a, b) = (1i64 << 52, (1i64 << 52) + 1);
    let paths = |name: &str, (a, b): (i64, i64)| {
        vec![
            format!("{name}[A, B] = {a}"),
            format!("{name}[A, C] = {}", a + b),
            format!("{name}[A, D] = {}", a + b + 1),
        ]
    };
    let dataflow = Differential {
        cluster: Cluster::default(),
    };
    for engine in [&Reference as &dyn Engine, &Standard, &dataflow] {
        let s = match run(&src(a, b), engine) {
            Err(e) if engine.name() == "differential" => {
                // The dataflow holds `min=` values in f64.
                assert!(e.contains("E0407"), "{e}");
                continue;
            }
            s => s.unwrap(),
        };
        for name in ["Dist", "Len"] {
            let q = format!("{name}[A, z]");
            assert_eq!(
                s.query(&q).unwrap(),
                paths(name, (a, b)),
                "{}",
                engine.name()
            );
        }
    }
    let s = run(&src(a, b), &Standard).unwrap();
    assert_eq!((ran(&s, "Dist"), ran(&s, "Len")), (Ran::Nest, Ran::Nest));
    for engine in [&Standard as &dyn Engine, &dataflow] {
        let s = run(&src(4, 5), engine).unwrap();
        assert_eq!(s.query("Dist[A, z]").unwrap(), paths("Dist", (4, 5)));
        assert_eq!(s.query("Len[A, z]").unwrap(), paths("Len", (4, 5)));
    }
    let s = run(&src(4, 5), &Standard).unwrap();
    let planned = (Ran::Extremum, Ran::Extremum);
    assert_eq!((ran(&s, "Dist"), ran(&s, "Len")), planned);
}

/// A rule over the real column of `P(k, v)`, for [`both_engines_agree_on_real_columns`].
#[derive(Clone, Debug)]
enum RealRule {
    /// `T(k, t) :- P(k, p), t = p * c.`
    Scaled(f64),
    /// `T(k, p) :- P(k, p), p < c.`
    Below(f64),
    /// `T(a, b) :- P(a, p), P(b, p), a != b.`
    Same,
    /// `T(k, p + c) :- P(k, p).`
    Shifted(f64),
    /// `S[x] = P(x, p) p` then `T(x, s) :- P(x, _), s = S[x].`
    Summed,
}

fn real_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => (-12i32..12).prop_map(|i| f64::from(i) * 0.25),
        1 => prop_oneof![Just(0.1), Just(1e-3), Just(1000.5), Just(-7.0)],
    ]
}

fn real_rule() -> impl Strategy<Value = RealRule> {
    prop_oneof![
        real_value().prop_map(RealRule::Scaled),
        real_value().prop_map(RealRule::Below),
        Just(RealRule::Same),
        real_value().prop_map(RealRule::Shifted),
        Just(RealRule::Summed),
    ]
}

/// Rust's shortest text of a value, as a real column prints it.
fn real(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else {
        format!("{v}")
    }
}

/// The answers of rule `k` worked out here, or `None` where they are left to the engines.
fn expected(k: usize, rule: &RealRule, facts: &[(i64, f64)]) -> Option<Vec<String>> {
    let mut out: Vec<String> = match rule {
        RealRule::Scaled(c) => facts
            .iter()
            .map(|(a, p)| format!("T{k}({a}, {})", real(p * c)))
            .collect(),
        RealRule::Below(c) => facts
            .iter()
            .filter(|(_, p)| p < c)
            .map(|(a, p)| format!("T{k}({a}, {})", real(*p)))
            .collect(),
        RealRule::Same => facts
            .iter()
            .flat_map(|(a, p)| {
                facts
                    .iter()
                    .filter(move |(b, q)| a != b && p == q)
                    .map(move |(b, _)| format!("T{k}({a}, {b})"))
            })
            .collect(),
        RealRule::Shifted(c) => facts
            .iter()
            .map(|(a, p)| format!("T{k}({a}, {})", real(p + c)))
            .collect(),
        RealRule::Summed => return None,
    };
    out.sort();
    out.dedup();
    Some(out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Real columns: comparisons, joins on equal values, computed values and sums bound as
    /// columns. The engines agree exactly, and with answers worked out here.
    #[test]
    fn both_engines_agree_on_real_columns(
        facts in proptest::collection::vec((0i64..5, real_value()), 1..8),
        rules in proptest::collection::vec(real_rule(), 1..4),
    ) {
        let mut facts = facts;
        facts.sort_by(|a, b| (a.0, a.1).partial_cmp(&(b.0, b.1)).unwrap());
        facts.dedup();
        let mut src = String::new();
        for (a, v) in &facts {
            // One value with a fraction makes the column real whatever the others are.
            src.push_str(&format!("P({a}, {v:?}).\n"));
        }
        src.push_str("P(9, 0.5).\n");
        let mut all = facts.clone();
        all.push((9, 0.5));
        for (k, r) in rules.iter().enumerate() {
            src.push_str(&match r {
                RealRule::Scaled(c) => format!("T{k}(k, t) :- P(k, p), t = p * {c:?}.\n"),
                RealRule::Below(c) => format!("T{k}(k, p) :- P(k, p), p < {c:?}.\n"),
                RealRule::Same => format!("T{k}(a, b) :- P(a, p), P(b, p), a != b.\n"),
                RealRule::Shifted(c) => format!("T{k}(k, p + {c:?}) :- P(k, p).\n"),
                RealRule::Summed => format!("S{k}[x] = P(x, p) p\nT{k}(x, s) :- P(x, _), s = S{k}[x].\n"),
            });
        }
        let (a, b) = match (run(&src, &Reference), run(&src, &Standard)) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => panic!("{src}\nreference: {:?}\nstandard: {:?}", a.err(), b.err()),
        };
        for (k, r) in rules.iter().enumerate() {
            let query = format!("T{k}(x, y)");
            let mut got = b.query(&query).unwrap();
            prop_assert_eq!(&a.query(&query).unwrap(), &got, "T{} differs in\n{}", k, src);
            got.sort();
            if let Some(want) = expected(k, r, &all) {
                prop_assert_eq!(got, want, "T{} in\n{}", k, src);
            }
        }
    }
}

/// A value binding whose only range for a variable is a tensor read (`y = K[x] + C`, `C` a
/// computed scalar, so the value is a column computed in rounds): the read ranges `x` there
/// as it does in `y = K[x] + 1`, with an integer or a real result.
#[test]
fn a_read_in_a_computed_value_ranges_its_variable() {
    let facts = "Node : 3\nR : bool[Node, Node]\nR(0, 1).\nR(2, 1).\nR(2, 0).\nK : int[Node]\nK[x] = R(x, y)\n";
    let cases = [
        (
            "C = 0\nB : bool[Node, Node]\nB(x, y) :- y = K[x] + C.\n",
            vec!["B(0, 1)", "B(1, 0)", "B(2, 2)"],
        ),
        (
            "C = 0.5\nB(x, v) :- v = K[x] + C.\n",
            vec!["B(0, 1.5)", "B(1, 0.5)", "B(2, 2.5)"],
        ),
    ];
    for (rules, want) in cases {
        let src = format!("{facts}{rules}");
        for engine in [&Reference as &dyn Engine, &Standard] {
            let s = run(&src, engine).unwrap_or_else(|e| panic!("{src}\n{e}"));
            assert_eq!(s.query("B(x, y)").unwrap(), want, "{src}");
        }
    }
}

/// A recursion that computes values (§8): counters bounded by another variable and by
/// negation, an accumulating loop, and aggregates over wide and negative values; and
/// counters up and down bounded by another variable whose columns a tensor indexes, so that
/// their extents are inferred before evaluation; and a Collatz trajectory started from a copy
/// of such a column, which holds values no extent bounds; a doubling past 2⁵³ bounded by
/// comparisons, sums of values past 2⁵³, and an `int` index recursion whose elements pass
/// 2⁵³, all exact (§8).
#[derive(Clone, Debug)]
struct Recursion {
    start: i64,
    step: i64,
    limit: i64,
    stop: i64,
    rounds: i64,
    scale: i64,
    wide: Vec<(u8, i64)>,
    base: i64,
}

/// Values to 2⁴⁰, small ones, and ones past 2⁵³ (of either sign) up to 2⁵⁹: eight of them
/// sum inside i64.
fn wide() -> impl Strategy<Value = i64> {
    prop_oneof![
        -(1i64 << 40)..(1i64 << 40),
        -5i64..5,
        (1i64 << 53)..(1i64 << 59),
        -(1i64 << 59)..-(1i64 << 53),
    ]
}

fn recursion() -> impl Strategy<Value = Recursion> {
    (
        (-40i64..40, 1i64..5, -40i64..60),
        (-40i64..40, 0i64..30, -3i64..4),
        proptest::collection::vec((0u8..3, wide()), 1..8),
        wide(),
    )
        .prop_map(
            |((start, step, limit), (stop, rounds, scale), wide, base)| Recursion {
                start,
                step,
                limit,
                stop,
                rounds,
                scale,
                wide,
                base,
            },
        )
}

/// 2⁶¹, the bound of the doubling `W`.
const HALF: i64 = 1 << 61;

impl Recursion {
    fn program(&self) -> String {
        let Recursion {
            start,
            step,
            limit,
            stop,
            rounds,
            scale,
            base,
            ..
        } = self;
        let mut src = format!(
            "Start({start}, {limit}).\nA(x, y) :- Start(x, y).\nA(x + {step}, y) :- A(x, y), x < y.\n\
             Lim({stop}).\nB({start}).\nB(x + {step}) :- B(x), not Lim(x), x < {start} + 200.\n\
             C(0, 0).\nC(i + 1, s + i * {scale}) :- C(i, s), i < {rounds}.\n\
             D(x, y) :- Start(x, y).\nD(x + {step}, y) :- D(x, y), x < y.\nUp[x] = D(x, y)\n\
             Ceil({floor}, {limit}).\nF(x, y) :- Ceil(x, y).\nF(x, y - {step}) :- F(x, y), x < y.\n\
             Down[y] = F(x, y)\n\
             G(x, y, x) :- Start(x, y), x < 12.\nG(x, y, m / 2) :- G(x, y, m), m > 1, m % 2 = 0.\n\
             G(x, y, 3 * m + 1) :- G(x, y, m), m > 1, m % 2 = 1.\n\
             Reach[x] max= G(x, y, m) m\n\
             W(0, {base}).\nW(i + 1, v * 2 + {scale}) :- W(i, v), i < 80, v < {HALF}, v > -{HALF}.\n\
             P : int[{steps}]\nP[0] = {start}\nP[i] = 3 P[i - 1] + i * {scale}\nLast = P[{last}]\n",
            floor = start.max(&0),
            steps = rounds + 6,
            last = rounds + 5,
        );
        for (k, v) in &self.wide {
            src.push_str(&format!("V(K{k}, {v}).\n"));
        }
        src.push_str("Top[k] max= V(k, v) v\nLow[k] min= V(k, v) v\nSum[k] += V(k, v) v\n");
        for (i, (k, v)) in self.wide.iter().enumerate() {
            src.push_str(&format!("E(K{k}, K{}, {}).\n", edge_end(i, *k), v.abs()));
        }
        src.push_str("Len[x, y] min= E(x, y, w) w\nLen[x, z] min= Len[x, y] + E(y, z, w) w\n");
        src
    }

    /// The answers, worked out here.
    fn expected(&self) -> Vec<(&'static str, Vec<String>)> {
        let Recursion {
            start,
            step,
            limit,
            stop,
            rounds,
            scale,
            base,
            ..
        } = *self;
        let mut a = vec![start];
        while *a.last().unwrap() < limit {
            a.push(a.last().unwrap() + step);
        }
        // Counting down by `step` past a bound of 0 or more.
        let floor = start.max(0);
        let mut f = vec![limit];
        while *f.last().unwrap() > floor {
            f.push(f.last().unwrap() - step);
        }
        f.sort_unstable();
        let mut b = vec![start];
        let mut x = start;
        while x != stop && x < start + 200 {
            x += step;
            b.push(x);
        }
        b.sort_unstable();
        b.dedup();
        let mut c = vec![(0, 0)];
        for i in 0..rounds {
            let s = c.last().unwrap().1 + i * scale;
            c.push((i + 1, s));
        }
        let mut w = vec![(0, base)];
        while let Some(&(i, v)) = w.last().filter(|(i, v)| *i < 80 && v.abs() < HALF) {
            w.push((i + 1, v * 2 + scale));
        }
        let last = (1..rounds + 6).fold(start, |p, i| 3 * p + i * scale);
        // Symbols print in the order they first appear (§10).
        let mut keys: Vec<u8> = Vec::new();
        for (k, _) in &self.wide {
            if !keys.contains(k) {
                keys.push(*k);
            }
        }
        // Facts are a set: a repeated `V(K1, -5).` is one fact.
        let facts: std::collections::BTreeSet<(u8, i64)> = self.wide.iter().copied().collect();
        let best = |pick: fn(i64, i64) -> i64| -> Vec<String> {
            keys.iter()
                .map(|k| {
                    let vs = facts.iter().filter(|(j, _)| j == k).map(|(_, v)| *v);
                    (k, vs.reduce(pick).unwrap())
                })
                .map(|(k, v)| format!("[K{k}] = {v}"))
                .collect()
        };
        vec![
            (
                "A(x, y)",
                a.iter().map(|x| format!("A({x}, {limit})")).collect(),
            ),
            (
                "D(x, y)",
                a.iter().map(|x| format!("D({x}, {limit})")).collect(),
            ),
            (
                "G(x, y, m)",
                collatz(start)
                    .iter()
                    .filter(|_| start < 12)
                    .map(|m| format!("G({start}, {limit}, {m})"))
                    .collect(),
            ),
            (
                "F(x, y)",
                f.iter().map(|y| format!("F({floor}, {y})")).collect(),
            ),
            ("B(x)", b.iter().map(|x| format!("B({x})")).collect()),
            (
                "C(i, s)",
                c.iter().map(|(i, s)| format!("C({i}, {s})")).collect(),
            ),
            (
                "Top[k]",
                best(i64::max)
                    .into_iter()
                    .map(|l| format!("Top{l}"))
                    .collect(),
            ),
            (
                "Low[k]",
                best(i64::min)
                    .into_iter()
                    .map(|l| format!("Low{l}"))
                    .collect(),
            ),
            (
                "Sum[k]",
                best(|a, b| a + b)
                    .into_iter()
                    .map(|l| format!("Sum{l}"))
                    .collect(),
            ),
            (
                "W(i, v)",
                w.iter().map(|(i, v)| format!("W({i}, {v})")).collect(),
            ),
            ("Last", vec![format!("Last = {last}")]),
        ]
    }
}

/// The node the `i`th weighted edge from `K{k}` goes to.
fn edge_end(i: usize, k: u8) -> u8 {
    (k + 1 + i as u8 % 2) % 3
}

impl Recursion {
    /// The lightest walk of one edge or more between each pair of nodes, worked out here by
    /// relaxing every edge until nothing shortens, as `Len[x, y]` prints them (sorted).
    fn lightest_walks(&self) -> Vec<String> {
        let mut len = std::collections::BTreeMap::<(u8, u8), i64>::new();
        let edges: Vec<(u8, u8, i64)> = (self.wide.iter().enumerate())
            .map(|(i, &(k, v))| (k, edge_end(i, k), v.abs()))
            .collect();
        for &(x, y, w) in &edges {
            let e = len.entry((x, y)).or_insert(w);
            *e = (*e).min(w);
        }
        loop {
            let mut changed = false;
            for ((x, y), d) in len.clone() {
                for &(_, z, w) in edges.iter().filter(|e| e.0 == y) {
                    let e = len.entry((x, z)).or_insert(i64::MAX);
                    if d + w < *e {
                        *e = d + w;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let mut out: Vec<String> = len
            .iter()
            .map(|((x, y), d)| format!("Len[K{x}, K{y}] = {d}"))
            .collect();
        out.sort();
        out
    }
}

/// The values of the Collatz trajectory from `n` (down to 1), sorted.
fn collatz(n: i64) -> Vec<i64> {
    let mut seen = vec![n];
    let mut m = n;
    while m > 1 {
        m = if m % 2 == 0 { m / 2 } else { 3 * m + 1 };
        seen.push(m);
    }
    seen.sort_unstable();
    seen.dedup();
    seen
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn value_recursions_end_when_nothing_is_new_on_both_engines(r in recursion()) {
        let src = r.program();
        let (a, b) = match (run(&src, &Reference), run(&src, &Standard)) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => panic!("{src}\nreference: {:?}\nstandard: {:?}", a.err(), b.err()),
        };
        for (query, want) in r.expected() {
            let (x, y) = (a.query(query).unwrap(), b.query(query).unwrap());
            prop_assert_eq!(&x, &y, "{} differs between engines in\n{}", query, src);
            prop_assert_eq!(&y, &want, "{} in\n{}", query, src);
        }
        let (mut x, mut y) = (a.query("Len[x, y]").unwrap(), b.query("Len[x, y]").unwrap());
        x.sort();
        y.sort();
        prop_assert_eq!(&x, &y, "Len differs between engines in\n{}", src);
        prop_assert_eq!(&y, &r.lightest_walks(), "Len in\n{}", src);
        for query in ["Up[x]", "Down[y]"] {
            prop_assert_eq!(a.query(query).unwrap(), b.query(query).unwrap(), "{} in\n{}", query, src);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// §5.1: a recursive real tensor whose axes the data fixes reads 0, not nothing, inside
    /// that shape, so `Paths` counts the paths of a random acyclic graph.
    #[test]
    fn fixed_extent_recursions_count_paths(edges in proptest::collection::btree_set((0usize..6, 0usize..6), 1..12)) {
        let edges: Vec<(usize, usize)> = edges.into_iter().filter(|(a, b)| a < b).collect();
        prop_assume!(!edges.is_empty());
        let mut src = String::new();
        for (a, b) in &edges {
            src.push_str(&format!("Adj[{a}, {b}] = 1\n"));
        }
        src.push_str("Paths[x, z] = Adj[x, z] + Paths[x, y] Adj[y, z]\n");
        let rows = edges.iter().map(|e| e.0).max().unwrap() + 1;
        let cols = edges.iter().map(|e| e.1).max().unwrap() + 1;
        // Paths from x to z, by z in increasing order (every edge goes up).
        let mut want = vec![vec![0u64; cols]; rows];
        for (x, row) in want.iter_mut().enumerate() {
            for z in 0..cols {
                let direct = u64::from(edges.contains(&(x, z)));
                let through: u64 = (0..z)
                    .filter(|&y| y < rows && edges.contains(&(y, z)))
                    .map(|y| row[y])
                    .sum();
                row[z] = direct + through;
            }
        }
        let want: Vec<String> = (0..rows)
            .flat_map(|x| (0..cols).map(move |z| (x, z)))
            .map(|(x, z)| format!("Paths[{x}, {z}] = {}", want[x][z]))
            .collect();
        for engine in [&Reference as &dyn Engine, &Standard] {
            let s = run(&src, engine).unwrap();
            prop_assert_eq!(s.query("Paths").unwrap(), want.clone(), "{}", src);
        }
    }
}
