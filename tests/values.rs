//! Values in integer columns (§8): random programs with negative and larger values, guarded
//! arithmetic heads, recursion counting down, value bindings of index arithmetic and of
//! counts, `/` and `%`, bitwise calls and negation, on which the standard engine must agree
//! exactly with the reference evaluator.

mod common;

use proptest::prelude::*;
use tensor_logic::eval::{Engine, Reference, Standard};
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

#[test]
fn answers_print_values_and_negation_reads_past_the_end_as_false() {
    let src = "U(-2). U(3). U(4).\nLast(x) :- U(x), not U(x + 1).\nNeg(x) :- U(x), x < 0.\nLast(x)?\nNeg(x)?\n";
    for engine in [&Reference as &dyn Engine, &Standard] {
        let s = run(src, engine).unwrap();
        assert_eq!(s.query("Last(x)").unwrap(), vec!["Last(-2)", "Last(4)"]);
        assert_eq!(s.query("Neg(x)").unwrap(), vec!["Neg(-2)"]);
    }
}
