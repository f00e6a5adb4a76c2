//! String functions (§8) on random words: `cat`, `strlen`, `substr`, `ord`, `to_number`,
//! `to_string` and `contains`, in heads and bodies, under negation and feeding each other.
//! The answers must equal what Rust's own string functions give (computed here, without
//! the engine), and the standard engine must agree exactly with the reference evaluator.

mod common;

use proptest::prelude::*;
use std::collections::BTreeSet;
use tensor_logic::eval::{Reference, Standard};

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ab]{0,4}",
        "[0-9]{1,3}",
        Just("-12".to_string()),
        Just("héllo".to_string()),
    ]
}

/// `W(w)` for each word, `N(n)` for each number, and rules whose answers the test knows.
fn program(words: &[String], nums: &[i64], start: i64, len: i64, needle: &str) -> String {
    let mut src = String::new();
    for w in words {
        src.push_str(&format!("W(\"{w}\").\n"));
    }
    for n in nums {
        src.push_str(&format!("N({n}).\n"));
    }
    src.push_str(&format!(
        "Pair(z) :- W(x), W(y), z = cat(x, \"-\", y).\n\
         Len(z, strlen(z)) :- Pair(z).\n\
         Cut(w, substr(w, {start}, {len})) :- W(w).\n\
         Has(w) :- W(w), contains(\"{needle}\", w).\n\
         Hasnt(w) :- W(w), not contains(\"{needle}\", w).\n\
         First(w, ord(w)) :- W(w).\n\
         Num(w, to_number(w)) :- W(w).\n\
         Text(n, s) :- N(n), s = to_string(n * 2).\n\
         Back(n) :- N(n), to_number(to_string(n)) == n.\n\
         Long(w) :- W(w), strlen(cat(w, w)) > 4.\n\
         Pair(z)?\nLen(z, n)?\nCut(w, c)?\nHas(w)?\nHasnt(w)?\nFirst(w, c)?\n\
         Num(w, n)?\nText(n, s)?\nBack(n)?\nLong(w)?\n"
    ));
    src
}

fn quoted(s: &str) -> String {
    let bare = s.chars().next().is_some_and(char::is_uppercase)
        && s.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '\'');
    if bare {
        s.to_string()
    } else {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// The answers, computed with Rust's strings.
fn expected(
    words: &[String],
    nums: &[i64],
    start: i64,
    len: i64,
    needle: &str,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ws: BTreeSet<&String> = words.iter().collect();
    for x in &ws {
        for y in &ws {
            let z = format!("{x}-{y}");
            out.insert(format!("Pair({})", quoted(&z)));
            out.insert(format!("Len({}, {})", quoted(&z), z.chars().count()));
        }
    }
    for w in &ws {
        let n = w.chars().count() as i64;
        if start >= 0 && len >= 0 && start <= n {
            let c: String = w.chars().skip(start as usize).take(len as usize).collect();
            out.insert(format!("Cut({}, {})", quoted(w), quoted(&c)));
        }
        if w.contains(needle) {
            out.insert(format!("Has({})", quoted(w)));
        } else {
            out.insert(format!("Hasnt({})", quoted(w)));
        }
        if let Some(c) = w.chars().next() {
            out.insert(format!("First({}, {})", quoted(w), c as i64));
        }
        if let Ok(v) = w.parse::<i64>() {
            out.insert(format!("Num({}, {v})", quoted(w)));
        }
        if 2 * w.chars().count() > 4 {
            out.insert(format!("Long({})", quoted(w)));
        }
    }
    for n in nums {
        out.insert(format!("Text({n}, {})", quoted(&(n * 2).to_string())));
        out.insert(format!("Back({n})"));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn string_functions_give_what_rust_gives_on_both_engines(
        words in prop::collection::vec(word(), 1..5),
        nums in prop::collection::vec(-30i64..30, 1..4),
        start in -1i64..5,
        len in 0i64..4,
        needle in "[ab]{0,2}",
    ) {
        let src = program(&words, &nums, start, len, &needle);
        let want = expected(&words, &nums, start, len, &needle);
        for engine in [&Standard as &dyn tensor_logic::eval::Engine, &Reference] {
            let mut s = common::run_source(&src, engine).map_err(TestCaseError::fail)?;
            let got: BTreeSet<String> = s
                .run_with(engine, &tensor_logic::RunOptions::default())
                .map_err(|d| TestCaseError::fail(d.render("p.tl", &src)))?
                .into_iter()
                .collect();
            prop_assert_eq!(&got, &want, "{}", src);
        }
    }
}

#[test]
fn a_recursion_through_cat_builds_paths_until_its_guard_stops_it() {
    let src = "Child(Root, \"a\"). Child(\"a\", \"b\"). Child(\"b\", \"c\").\n\
        Path(Root, Root).\n\
        Path(cat(p, \"/\", c), c) :- Path(p, q), Child(q, c), strlen(p) < 8.\n\
        Path(p, q)?\n";
    let s = common::run_source(src, &Standard).unwrap();
    let got = s.query("Path(p, q)").unwrap();
    assert_eq!(
        got,
        vec![
            "Path(Root, Root)",
            "Path(\"Root/a\", \"a\")",
            "Path(\"Root/a/b\", \"b\")",
        ],
        "Root/a/b is 8 long: no Root/a/b/c"
    );
}

#[test]
fn a_recursion_that_keeps_making_symbols_ends_with_a_located_error() {
    let src = "G(\"a\").\nG(cat(x, \"a\")) :- G(x).\n";
    let mut options = tensor_logic::RunOptions::default();
    options.settings.max_iters = 20;
    let err = run_error(src, &options);
    assert!(err.contains("E0402") && err.contains("2:3"), "{err}");
    // Each round evaluates the program again: they stop at a tenth of `--max-iters`.
    assert!(err.contains("after 2 rounds"), "{err}");
}

#[test]
fn wrong_calls_are_located_errors_reported_together() {
    let src = "A(Al).\nC(y) :- A(x), y = cat(x).\nD(y) :- A(x), y = contains(x, \"l\") + 1.\nE[x] = strlen(x)\n";
    let err = run_error(src, &tensor_logic::RunOptions::default());
    for code in ["E0103", "E0105"] {
        assert!(err.contains(code), "{err}");
    }
    assert!(
        err.contains("2:19") && err.contains("3:19") && err.contains("4:8"),
        "{err}"
    );
}

#[test]
fn a_symbol_where_substr_needs_a_count_is_a_type_error_at_the_call() {
    let src = "A(Al).\nB(x, y) :- A(x), y = substr(x, x, 1).\n";
    let err = run_error(src, &tensor_logic::RunOptions::default());
    assert!(err.contains("E0104") && err.contains("2:22"), "{err}");
}

/// The rendered errors of running `src`, which must fail.
fn run_error(src: &str, options: &tensor_logic::RunOptions) -> String {
    let mut s = tensor_logic::Session::new();
    s.load_source("p.tl", src, std::path::Path::new("."))
        .unwrap();
    s.run(options).unwrap_err().render("p.tl", src)
}
