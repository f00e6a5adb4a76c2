//! Property tests: random programs and data, checked against independent computations
//! written directly in Rust, and random token soup that must never panic.

use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;
use tensor_logic::{ElemType, RunOptions, Session, Settings};

fn run(src: &str, real: ElemType) -> Session {
    let mut s = Session::new();
    s.load_source("p.tl", src, Path::new(".")).unwrap();
    let opts = RunOptions {
        settings: Settings {
            real,
            ..Settings::default()
        },
        ..RunOptions::default()
    };
    if let Err(e) = s.run(&opts) {
        panic!("{}", e.render("p.tl", src));
    }
    s
}

fn closure(n: usize, edges: &BTreeSet<(usize, usize)>) -> BTreeSet<(usize, usize)> {
    let mut reach = BTreeSet::new();
    for s in 0..n {
        let mut stack: Vec<usize> = edges.iter().filter(|e| e.0 == s).map(|e| e.1).collect();
        while let Some(v) = stack.pop() {
            if reach.insert((s, v)) {
                stack.extend(edges.iter().filter(|e| e.0 == v).map(|e| e.1));
            }
        }
    }
    reach
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn transitive_closure_matches_search(n in 1usize..7, raw in proptest::collection::vec((0usize..7, 0usize..7), 0..14)) {
        let edges: BTreeSet<(usize, usize)> = raw.into_iter().map(|(a, b)| (a % n, b % n)).collect();
        let mut src = String::new();
        for (a, b) in &edges {
            src.push_str(&format!("E(N{a}, N{b}).\n"));
        }
        src.push_str("P(x, y) :- E(x, y).\nP(x, z) :- P(x, y), E(y, z).\nP(x, y)?\n");
        if edges.is_empty() {
            return Ok(());
        }
        let s = run(&src, ElemType::F32);
        let got: BTreeSet<String> = s.query("P(x, y)").unwrap().into_iter().collect();
        let want: BTreeSet<String> = closure(n, &edges).into_iter().map(|(a, b)| format!("P(N{a}, N{b})")).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn negation_is_the_complement_of_a_lower_stratum(n in 2usize..7, raw in proptest::collection::vec((0usize..7, 0usize..7), 0..12)) {
        let edges: BTreeSet<(usize, usize)> = raw.into_iter().map(|(a, b)| (a % n, b % n)).collect();
        if edges.is_empty() {
            return Ok(());
        }
        let mut src = String::new();
        for v in 0..n {
            src.push_str(&format!("Node({v}).\n"));
        }
        for (a, b) in &edges {
            src.push_str(&format!("E({a}, {b}).\n"));
        }
        src.push_str("R(x) :- E(0, x).\nR(y) :- R(x), E(x, y).\nU(x) :- Node(x), not R(x).\n");
        let s = run(&src, ElemType::F32);
        let reach = closure(n, &edges);
        let want: Vec<String> = (0..n).filter(|v| !reach.contains(&(0, *v))).map(|v| format!("U({v})")).collect();
        prop_assert_eq!(s.query("U(x)").unwrap(), want);
    }

    #[test]
    fn contractions_match_direct_loops(
        (i, j, k) in (1usize..4, 1usize..4, 1usize..4),
        seed in proptest::collection::vec(-3i32..4, 64),
    ) {
        let a: Vec<f64> = (0..i * j).map(|x| seed[x % 64] as f64 * 0.5).collect();
        let b: Vec<f64> = (0..j * k).map(|x| seed[(x * 7 + 3) % 64] as f64 * 0.25).collect();
        let v: Vec<f64> = (0..k).map(|x| seed[(x * 5 + 1) % 64] as f64).collect();
        let lit = |vals: &[f64], rows: usize, cols: usize| {
            let rs: Vec<String> = (0..rows).map(|r| {
                let cs: Vec<String> = (0..cols).map(|c| vals[r * cols + c].to_string()).collect();
                format!("[{}]", cs.join(", "))
            }).collect();
            format!("[{}]", rs.join(", "))
        };
        let vlit = v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
        let src = format!(
            "A = {}\nB = {}\nV = [{vlit}]\nC[r, c] = A[r, m] B[m, c]\nD[r] = sig(A[r, m] B[m, c] V[c]) + A[r, 0]\nT = C[r, c] V[c]\n",
            lit(&a, i, j), lit(&b, j, k),
        );
        let s = run(&src, ElemType::F64);
        let c = s.tensor("C").unwrap();
        let mut total = 0.0;
        for r in 0..i {
            let mut inner = 0.0;
            for cc in 0..k {
                let want: f64 = (0..j).map(|m| a[r * j + m] * b[m * k + cc]).sum();
                prop_assert!((c.value(&[r, cc]) - want).abs() < 1e-9);
                inner += want * v[cc];
            }
            total += inner;
            let d = 1.0 / (1.0 + (-inner).exp()) + a[r * j];
            prop_assert!((s.tensor("D").unwrap().value(&[r]) - d).abs() < 1e-9);
        }
        prop_assert!((s.tensor("T").unwrap().value(&[]) - total).abs() < 1e-9);
    }

    #[test]
    fn runs_are_bit_identical(vals in proptest::collection::vec(-100i32..100, 8)) {
        let x: Vec<String> = vals.iter().map(|v| format!("{}", *v as f64 / 7.0)).collect();
        let src = format!("X = [{}]\nY[i.] = softmax(X[i] X[j] / 100)\nZ[i.] = lnorm(Y[i])\nR[i] = X[i] / 10 + 0.4 R[j] Y[j] / 8\n", x.join(", "));
        let a = run(&src, ElemType::F32);
        let b = run(&src, ElemType::F32);
        for name in ["Y", "Z", "R"] {
            prop_assert_eq!(a.tensor(name), b.tensor(name));
        }
    }

    #[test]
    fn token_soup_never_panics(tokens in proptest::collection::vec(prop_oneof![
        Just("X"), Just("Y"), Just("x"), Just("i"), Just("["), Just("]"), Just("("), Just(")"),
        Just(","), Just("="), Just("max="), Just(":-"), Just("not"), Just("+"), Just("-"), Just("*"),
        Just("/"), Just("^"), Just("?"), Just("."), Just("\n"), Just("1"), Just("2.5"), Just("*t"),
        Just("sig("), Just("softmax("), Just("concat("), Just(":"), Just("{"), Just("}"), Just("\"s\""),
        Just("X = [1, 2]\n"), Just("E(A, B).\n"), Just("p'."), Just("~"), Just("normal(0, 1)"),
    ], 0..40)) {
        let src: String = tokens.concat();
        let mut s = Session::new();
        if s.load_source("soup.tl", &src, Path::new("/nonexistent")).is_ok() {
            let settings = Settings { max_iters: 20, max_memory: 1 << 16, ..Settings::default() };
            if s.check(&settings).is_ok() {
                let small = s.checked().is_some_and(|c| c.equations.iter().all(|e| e.vars.iter().map(|v| v.range.max(1)).product::<usize>() <= 512));
                if small {
                    let _ = s.run(&RunOptions { settings, ..RunOptions::default() });
                }
            }
        }
    }
}
