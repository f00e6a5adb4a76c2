//! The dense contraction path (planned einsums through GEMM) must match the reference
//! evaluator within 1e-5 relative on random einsum-shaped equations — relative to the sum of
//! the magnitudes of the products, since f32 products are summed in f32 as PyTorch's are, and
//! an element that cancels to nearly nothing keeps the rounding of its terms — and give
//! bit-identical results for every thread count.

use proptest::prelude::*;
use std::path::Path;
use tensor_logic::eval::{Engine, Ran, Reference, Standard};
use tensor_logic::tensor::Storage;
use tensor_logic::{RunOptions, Session};

const VARS: [&str; 5] = ["i", "j", "k", "l", "m"];
const DOMS: [&str; 5] = ["I", "J", "K", "L", "M"];
const FUNCS: [&str; 4] = ["", "sig", "tanh", "relu"];

/// A program declaring random parameters (initialised from the seed) and one equation
/// `Y[out] = f(c · F0[..] F1[..] …)`, possibly with elementwise work around it.
fn program(
    extents: &[usize],
    factors: &[Vec<usize>],
    out: &[usize],
    func: usize,
    scale: bool,
    around: usize,
) -> String {
    let mut src = String::new();
    for (d, n) in DOMS.iter().zip(extents) {
        src.push_str(&format!("{d} : {n}\n"));
    }
    let mut body = Vec::new();
    // `Mag` sums the magnitudes of the same products: the scale of the rounding error.
    let mut magnitude = Vec::new();
    if scale {
        body.push("0.5".to_string());
        magnitude.push("0.5".to_string());
    }
    for (f, vars) in factors.iter().enumerate() {
        let doms: Vec<&str> = vars.iter().map(|&v| DOMS[v]).collect();
        let names: Vec<&str> = vars.iter().map(|&v| VARS[v]).collect();
        src.push_str(&format!("F{f} : real[{}]\n", doms.join(", ")));
        src.push_str(&format!("G{f}[{0}] = abs(F{f}[{0}])\n", names.join(", ")));
        body.push(format!("F{f}[{}]", names.join(", ")));
        magnitude.push(format!("G{f}[{}]", names.join(", ")));
    }
    let lhs: Vec<&str> = out.iter().map(|&v| VARS[v]).collect();
    if lhs.is_empty() {
        src.push_str(&format!("Mag = {}\n", magnitude.join(" ")));
    } else {
        src.push_str(&format!(
            "Mag[{}] = {}\n",
            lhs.join(", "),
            magnitude.join(" ")
        ));
    }
    let rhs = body.join(" ");
    let rhs = if FUNCS[func].is_empty() {
        rhs
    } else {
        format!("{}({rhs})", FUNCS[func])
    };
    // Elementwise work around the contraction, over a bias along the first output variable
    // (computed, since declared vectors start at zero).
    let bias = |o: usize, src: &mut String| {
        src.push_str(&format!("Bz : real[{}]\nBz[v] = cos(v + 1)\n", DOMS[o]));
    };
    let rhs = match (out.first(), around) {
        (Some(&o), 1) => {
            bias(o, &mut src);
            format!("{rhs} + Bz[{}]", VARS[o])
        }
        (Some(&o), 2) => {
            bias(o, &mut src);
            format!("max({rhs}, Bz[{}]) / (2 + abs(Bz[{}]))", VARS[o], VARS[o])
        }
        (Some(&o), 3) => format!("exp(-({rhs})) - {} * ({rhs})", VARS[o]),
        (Some(_), 4) => format!("softmax({rhs})"),
        (Some(_), 5) => format!("lnorm({rhs}) + 1"),
        _ => rhs,
    };
    if lhs.is_empty() {
        src.push_str(&format!("Y = {rhs}\n"));
    } else {
        src.push_str(&format!("Y[{}] = {rhs}\n", lhs.join(", ")));
    }
    src
}

fn values(src: &str, engine: &dyn Engine, threads: usize) -> Vec<f64> {
    tensor(src, engine, threads, "Y")
}

fn tensor(src: &str, engine: &dyn Engine, threads: usize, name: &str) -> Vec<f64> {
    let mut s = Session::new();
    s.load_source("d.tl", src, Path::new(".")).unwrap();
    let opts = RunOptions {
        threads,
        ..RunOptions::default()
    };
    s.run_with(engine, &opts)
        .map_err(|d| d.render("d.tl", src))
        .unwrap();
    match &s.tensor(name).unwrap().storage {
        Storage::Dense(v) => v.to_f64().into_owned(),
        other => panic!("{other:?}"),
    }
}

type Case = (Vec<usize>, Vec<Vec<usize>>, Vec<usize>, usize, bool, usize);

fn einsum() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(1usize..6, 5),
        proptest::collection::vec(
            proptest::sample::subsequence((0..5).collect::<Vec<_>>(), 1..4),
            1..5,
        ),
        proptest::sample::subsequence((0..5).collect::<Vec<_>>(), 0..4),
        0usize..4,
        any::<bool>(),
        0usize..6,
    )
        .prop_map(|(extents, factors, out, func, scale, around)| {
            // Output variables must be read by some factor.
            let out = out
                .into_iter()
                .filter(|v| factors.iter().any(|f| f.contains(v)))
                .collect();
            (extents, factors, out, func, scale, around)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn contractions_match_the_reference((extents, factors, out, func, scale, around) in einsum()) {
        let src = program(&extents, &factors, &out, func, scale, around);
        let (a, b) = (values(&src, &Reference, 1), values(&src, &Standard, 1));
        let magnitude = tensor(&src, &Reference, 1, "Mag");
        prop_assert_eq!(a.len(), b.len());
        let widest = magnitude.iter().fold(0.0f64, |a, &m| a.max(m));
        for ((x, y), m) in a.iter().zip(&b).zip(&magnitude) {
            // How much the elementwise work around the sum can amplify its rounding:
            // exp(-s) - o·s by up to exp(|s|) + 4; softmax mixes a row (errors up to twice
            // the row's); lnorm divides by at least sqrt(1e-5).
            let (gain, m) = match around {
                3 => (m.exp() + 5.0, *m),
                4 => (2.0, widest),
                5 => (2.0 / 1e-5f64.sqrt(), widest),
                _ => (1.0, *m),
            };
            let bound = 1e-5 * (x.abs() + gain * m) + 1e-12;
            prop_assert!((x - y).abs() <= bound, "{} vs {} (bound {}) in\n{}", x, y, bound, src);
        }
    }
}

#[test]
fn large_contractions_do_not_depend_on_the_thread_count() {
    let src = "I : 96\nJ : 130\nK : 70\nB : 3\nX : real[B, I, J]\nW : real[J, K]\nV : real[K, I]\n\
               Y[b, i, k] = tanh(X[b, i, j] W[j, k])\nZ[b] = X[b, i, j] W[j, k] V[k, i]\n";
    let one = values(src, &Standard, 1);
    let two = values(src, &Standard, 2);
    assert_eq!(one, two);
    let reference = values(src, &Reference, 1);
    let largest = reference.iter().fold(1e-3f64, |m, x| m.max(x.abs()));
    for (x, y) in reference.iter().zip(&one) {
        assert!((x - y).abs() <= 1e-5 * largest, "{x} vs {y}");
    }
}

/// A product large enough that blocks of its rows go to workers (uneven blocks, with a
/// k that spans two fixed blocks of the inner dimension) gives the same bits for 1, 2 and 3
/// threads.
#[test]
fn products_split_by_rows_do_not_depend_on_the_thread_count() {
    let src = "A : real[300, 700]\nB : real[700, 260]\nY[i, k] = relu(A[i, j] B[j, k])\n";
    let one = values(src, &Standard, 1);
    assert!(one.iter().filter(|&&x| x > 0.0).count() > one.len() / 4);
    assert_eq!(one, values(src, &Standard, 2));
    assert_eq!(one, values(src, &Standard, 3));
}

/// A relation of 20,000 tuples times dense tensors (split among workers by slabs of output
/// rows, and an attention softmax split by rows) gives the same bits for 1 and 2 threads, and
/// the aggregation is the direct sum.
#[test]
fn large_scatters_and_softmax_rows_do_not_depend_on_the_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let edges: String = (0..20_000u64)
        .map(|i| format!("{}\t{}\n", (i * 7919) % 3000, (i * 104_729 + 11) % 3000))
        .collect();
    std::fs::write(dir.path().join("e.tsv"), edges).unwrap();
    let src = "N : 3000\nD : 48\nE : bool[N, N]\nE = \"e.tsv\"\nZ : real[N, D]\n\
               A[n, d] = E(n, m) Z[m, d]\nS[n, m.] = softmax(Z[n, d] Z[m, d] / 4)\n";
    let run = |engine: &dyn Engine, threads: usize, name: &str| {
        let mut s = Session::new();
        s.load_source("g.tl", src, dir.path()).unwrap();
        s.run_with(
            engine,
            &RunOptions {
                threads,
                ..RunOptions::default()
            },
        )
        .unwrap();
        s.tensor(name).unwrap().to_dense_values()
    };
    for name in ["A", "S"] {
        let one = run(&Standard, 1, name);
        assert_eq!(one, run(&Standard, 2, name), "{name}");
    }
    // Against a direct sum (the reference loops would visit N·N·D points).
    let edges: Vec<(usize, usize)> = (0..20_000usize)
        .map(|i| ((i * 7919) % 3000, (i * 104_729 + 11) % 3000))
        .collect();
    let (mut s, a) = (Session::new(), run(&Standard, 2, "A"));
    s.load_source("g.tl", src, dir.path()).unwrap();
    s.run(&RunOptions::default()).unwrap();
    let z = s.tensor("Z").unwrap().to_dense_values();
    let mut want = vec![0.0f64; 3000 * 48];
    let distinct: std::collections::BTreeSet<_> = edges.into_iter().collect();
    for (n, m) in distinct {
        for d in 0..48 {
            want[n * 48 + d] += z[m * 48 + d];
        }
    }
    for (x, y) in want.iter().zip(&a) {
        assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{x} vs {y}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]

    /// A relation joined with dense tensors (GNN aggregation, embedding lookup, a relation
    /// embedded by two embeddings) runs tuple by tuple and must match the reference.
    #[test]
    fn relations_times_dense_tensors_match_the_reference(
        edges in proptest::collection::vec((0usize..6, 0usize..6), 0..20),
    ) {
        let mut src = String::from("N : 6\nD : 3\nNeig : bool[N, N]\nZ : real[N, D]\nEmb : real[N, D]\n");
        src.push_str("W : real[D, D]\n");
        for (a, b) in &edges {
            src.push_str(&format!("Neig({a}, {b}).\n"));
        }
        src.push_str(
            "Agg[n, d] = Neig(n, m) Z[m, d]\n\
             AggT[n, d] = Neig(m, n) Z[m, d]\n\
             Mix[n, d] = relu(Neig(n, m) Z[m, d] + Z[n, d])\n\
             EmbR[i, j] = Neig(x, y) Emb[x, i] Emb[y, j]\n\
             Deg[n] = 1.5 Neig(n, m)\n\
             Gate[n, d] = Neig(n, m) Z[m, d] Emb[n, d]\n\
             Chain[n, d] = Neig(n, m) Z[m, e] W[e, d]\n\
             Y = Agg[n, d] Agg[n, d] + Mix[n, d] + EmbR[i, j] + Deg[n]\n",
        );
        for name in ["Agg", "AggT", "Mix", "EmbR", "Deg", "Gate", "Chain"] {
            let a = tensor(&src, &Reference, 1, name);
            let b = tensor(&src, &Standard, 1, name);
            for (x, y) in a.iter().zip(&b) {
                prop_assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{}: {} vs {} in\n{}", name, x, y, src);
            }
        }
    }
}

/// The tensors `names` after `equations` over `X : real[B, K]` (rows `rows` of a fixed f32
/// example matrix) and a fixed `W : real[K, N]`, with `threads` workers.
fn batched(
    rows: &[usize],
    (k, n): (usize, usize),
    equations: &str,
    names: &[&str],
    threads: usize,
) -> Vec<Vec<f64>> {
    let value = |i: usize| ((i * 7919) % 1000) as f64 / 500.0 - 1.0;
    let w: Vec<f64> = (0..k * n).map(|i| value(i + 17) as f32 as f64).collect();
    let src = format!(
        "B : {}\nK : {k}\nN : {n}\nX : real[B, K]\nW : real[K, N]\n{equations}",
        rows.len()
    );
    let mut s = Session::new();
    s.load_source("b.tl", &src, Path::new(".")).unwrap();
    let x: Vec<f64> = rows
        .iter()
        .flat_map(|&r| (0..k).map(move |j| value(r * k + j) as f32 as f64))
        .collect();
    let f32 = tensor_logic::ElemType::F32;
    s.bind(
        "X",
        &tensor_logic::Tensor::dense(f32, vec![rows.len(), k], x).unwrap(),
    );
    s.bind(
        "W",
        &tensor_logic::Tensor::dense(f32, vec![k, n], w).unwrap(),
    );
    let opts = RunOptions {
        threads,
        ..RunOptions::default()
    };
    s.run(&opts).unwrap();
    names
        .iter()
        .map(|name| match &s.tensor(name).unwrap().storage {
            Storage::Dense(v) => v.to_f64().into_owned(),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// A row of a batched product, softmax or lnorm is bit-identical to the same row computed
/// alone (SPEC §9's batch invariance).
#[test]
fn rows_do_not_depend_on_the_batch() {
    let (k, n) = (300, 70);
    // Products whose softmax, lnorm, bias and activation run over their own f32 rows, and
    // the same functions of a stored product.
    let equations =
        "Y[b, n] = X[b, k] W[k, n]\nS[b, n] = softmax(Y[b, n])\nL[b, n] = lnorm(Y[b, n])\n\
                     A[b, n.] = softmax(X[b, k] W[k, n] / 4)\nG[b, n.] = lnorm(X[b, k] W[k, n])\n\
                     R[b, n] = relu(X[b, k] W[k, n] + W[0, n])\n";
    let names = ["Y", "S", "L", "A", "G", "R"];
    let batch: Vec<usize> = (0..37).collect();
    let all = batched(&batch, (k, n), equations, &names, 1);
    for r in [0, 5, 36] {
        let alone = batched(&[r], (k, n), equations, &names, 1);
        for (name, (a, b)) in names.iter().zip(all.iter().zip(&alone)) {
            assert_eq!(&a[r * n..(r + 1) * n], &b[..], "{name} row {r}");
        }
    }
}

/// `Y` of `X[b, k] W[k, n]` (or, transposed, `W[k, n] X[b, k]` onto `Y[n, b]`) for the
/// examples `rows`, f32.
fn product_rows(rows: &[usize], k: usize, n: usize, transposed: bool, threads: usize) -> Vec<f64> {
    let eq = if transposed {
        "Y[n, b] = W[k, n] X[b, k]\n"
    } else {
        "Y[b, n] = X[b, k] W[k, n]\n"
    };
    batched(rows, (k, n), eq, &["Y"], threads).remove(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Batch invariance (§9) across shapes, orientations and thread counts: an example's
    /// outputs are bit-identical whether it is computed alone or in a batch.
    #[test]
    fn a_batched_product_equals_each_example_alone(
        m in 2usize..70,
        k in prop::sample::select(vec![1usize, 7, 64, 300, 1024, 4096]),
        n in 1usize..70,
        transposed in any::<bool>(),
        threads in 1usize..3,
    ) {
        let batch: Vec<usize> = (0..m).collect();
        let all = product_rows(&batch, k, n, transposed, threads);
        for r in [0, m / 2, m - 1] {
            let alone = product_rows(&[r], k, n, transposed, 1);
            let got: Vec<f64> = if transposed {
                (0..n).map(|j| all[j * m + r]).collect()
            } else {
                all[r * n..(r + 1) * n].to_vec()
            };
            prop_assert_eq!(got, alone, "example {} of {}, k {}, n {}", r, m, k, n);
        }
    }
}

/// A convolution over `In : real[C, N]` (and `M` columns when `two_d`) through index
/// arithmetic: stride `s`, kernel `k`, reversed reads when `rev`, an output wider than the
/// valid positions when `wide` (those reads can leave the input, so the reference loops run).
fn convolution(
    (c, o, n, k, s): (usize, usize, usize, usize, usize),
    two_d: bool,
    rev: bool,
    wide: bool,
    func: usize,
) -> String {
    let x = (n - k) / s + 1 + usize::from(wide);
    let pos = |v: &str, d: &str| {
        if rev {
            format!("{} - {s} * {v} - {d}", n - 1)
        } else {
            format!("{s} * {v} + {d}")
        }
    };
    let (in_shape, w_shape, y_shape, read, kernel, lhs) = if two_d {
        (
            "C, N, N".to_string(),
            "O, C, K, K",
            "O, X, X",
            format!("In[q, {}, {}]", pos("x", "d"), pos("y", "e")),
            "W[p, q, d, e]",
            "Y[p, x, y]",
        )
    } else {
        (
            "C, N".to_string(),
            "O, C, K",
            "O, X",
            format!("In[q, {}]", pos("x", "d")),
            "W[p, q, d]",
            "Y[p, x]",
        )
    };
    let body = format!("{kernel} {read}");
    let rhs = if FUNCS[func].is_empty() {
        body
    } else {
        format!("{}({body})", FUNCS[func])
    };
    format!(
        "C : {c}\nO : {o}\nN : {n}\nK : {k}\nX : {x}\nIn : real[{in_shape}]\nW : real[{w_shape}]\n\
         Y : real[{y_shape}]\n{lhs} = {rhs}\n"
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(120))]

    /// Reads through index arithmetic (gathered windows on the dense path) match the
    /// reference: strided, reversed, one and two dimensions, with functions around.
    #[test]
    fn windowed_reads_match_the_reference(
        (c, o, n) in (1usize..4, 1usize..4, 3usize..10),
        k in 1usize..4,
        s in 1usize..3,
        two_d in any::<bool>(),
        rev in any::<bool>(),
        wide in any::<bool>(),
        func in 0usize..4,
    ) {
        let k = k.min(n);
        let src = convolution((c, o, n, k, s), two_d, rev, wide, func);
        let (a, b) = (values(&src, &Reference, 1), values(&src, &Standard, 1));
        prop_assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            prop_assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{} vs {} in\n{}", x, y, src);
        }
    }
}

/// A valid convolution is planned as a gathered window and a GEMM, not the reference loops;
/// one whose reads could leave the input is not.
#[test]
fn valid_convolutions_take_the_dense_path() {
    for (wide, dense) in [(false, true), (true, false)] {
        let src = convolution((2, 3, 8, 3, 1), true, false, wide, 3);
        let plan = explained(&src);
        assert_eq!(plan.contains("In[window gathered]"), dense, "{plan}");
        assert_eq!(y_ran_dense(&src), dense, "{src}");
    }
}

/// Whether the standard engine's decision log says `Y`'s stratum ran on dense contractions
/// (what ran, not what the plan printed).
fn y_ran_dense(src: &str) -> bool {
    let mut s = Session::new();
    s.load_source("d.tl", src, Path::new(".")).unwrap();
    s.run_with(&Standard, &RunOptions::default()).unwrap();
    let checked = s.checked().unwrap();
    let y = checked.tensor_id("Y").unwrap();
    s.decisions()
        .iter()
        .any(|d| checked.strata[d.stratum].tensors.contains(&y) && d.ran == Ran::Dense)
}

/// What `tl explain` prints for `src`.
fn explained(src: &str) -> String {
    let mut s = Session::new();
    s.load_source("d.tl", src, Path::new(".")).unwrap();
    s.check(&RunOptions::default().settings).unwrap();
    s.explain().unwrap()
}

/// `Y` by the standard engine is the reference's within 1e-5 relative.
fn assert_engines_agree(src: &str) {
    let (a, b) = (values(src, &Reference, 1), values(src, &Standard, 1));
    assert_eq!(a.len(), b.len(), "{src}");
    for (x, y) in a.iter().zip(&b) {
        assert!(
            (x - y).abs() <= 1e-5 * (1.0 + x.abs()),
            "{x} vs {y} in\n{src}"
        );
    }
}

/// `concat` on the dense path (its flattened variables stand in the grid for the one they
/// make) matches the reference: parts before, between and after the other variables, with a
/// product and functions in the argument, and a made variable the parts do not fill (which
/// keeps the reference loops).
#[test]
fn concat_matches_the_reference() {
    for (decl, eq) in [
        ("", "Y[p, m] = concat(Z[h, p, v])"),
        ("", "Y[m, p] = concat(sig(Z[h, p, v]) + 1)"),
        ("", "Y[h, m] = concat(Z[h, p, v])"),
        (
            "W : real[2, 4]\n",
            "Y[p, m] = concat(W[j, q] Z[h, p, j] + Z[h, p, 0])",
        ),
        ("Y : real[3, 9]\n", "Y[p, m] = concat(Z[h, p, v])"),
    ] {
        let src = format!("Z : real[3, 3, 2]\n{decl}{eq}\n");
        assert_engines_agree(&src);
    }
}

/// Left-hand sides with index arithmetic (sum pooling, strided and shifted writes) on the
/// dense path match the reference.
#[test]
fn pooling_and_shifted_writes_match_the_reference() {
    for (decl, eq) in [
        ("", "Y[x / 2, y / 3] = F[x, y]"),
        ("", "Y[x / 2, y / 2] = relu(F[x, y] - 0.1) + G[x]"),
        ("Y : real[6, 3]\n", "Y[x + 1, y / 2] = F[x, y] G[x]"),
        ("Y : real[3, 12]\n", "Y[x / 2, 2 * y + 1] = F[x, y]"),
        ("", "Y[x / 2] = F[x, y] H[y]"),
    ] {
        let src = format!("F : real[5, 6]\nG : real[5]\nH : real[6]\n{decl}{eq}\n");
        assert_engines_agree(&src);
    }
}

/// Contractions that read operands in place through loops (an operand's own variables split
/// by the summed ones, batch variables anywhere in it) and chains whose intermediates are
/// laid out for the contraction that reads them (the opt_einsum README case) match the
/// reference, and give the same bits with 1 and 2 threads.
#[test]
fn looped_and_chained_contractions_match_the_reference() {
    for (decl, eq) in [
        (
            "N : 8\nC : real[N, N]\nI : real[N, N, N, N]\n",
            "Y[p, q, r, s] = C[p, i] C[q, j] I[i, j, k, l] C[r, k] C[s, l]",
        ),
        (
            "X : real[20, 24, 20, 20]\nC : real[24, 24]\n",
            "Y[p, k, l, q] = X[p, j, k, l] C[q, j]",
        ),
        (
            "A : real[30, 6, 40]\nB : real[6, 40, 50]\n",
            "Y[b, p, q] = A[p, b, i] B[b, i, q]",
        ),
        (
            "A : real[30, 6, 40]\nB : real[50, 6, 40]\n",
            "Y[q, b, p] = A[p, b, i] B[q, b, i]",
        ),
        (
            "A : real[64, 32]\nB : real[32, 48]\nC : real[48, 40]\nD : real[40, 8]\n",
            "Y[a, e] = A[a, b] B[b, c] C[c, d] D[d, e]",
        ),
    ] {
        let src = format!("{decl}{eq}\n");
        assert_engines_agree(&src);
        let bits = |threads| -> Vec<u64> {
            values(&src, &Standard, threads)
                .iter()
                .map(|x| x.to_bits())
                .collect()
        };
        assert_eq!(bits(1), bits(2), "{src}");
    }
}

/// `max=`/`min=` equations without summation points (max pooling, pointwise extremes of
/// several equations) take the dense path and match the reference element for element:
/// stored dense when every element is written, as their defined elements otherwise.
#[test]
fn max_and_min_pooling_match_the_reference() {
    for (decl, eqs, all_written) in [
        ("", "Y[x / 2, y / 3] max= F[x, y]", true),
        ("", "Y[x / 2, y / 2] min= relu(F[x, y] - 0.1) + G[x]", true),
        (
            "Y : real[6, 3]\n",
            "Y[x + 1, y / 2] max= F[x, y] G[x]",
            false,
        ),
        ("", "Y[x, y] max= F[x, y] G[x]\nY[x, y] max= -F[x, y]", true),
        (
            "",
            "Y[x / 2, y / 2] max= F[x, y]\nZ[i] = Y[i, j] H[j]",
            true,
        ),
    ] {
        let src = format!("F : real[5, 6]\nG : real[5]\nH : real[3]\n{decl}{eqs}\n");
        let entries = |engine: &dyn Engine| {
            let mut s = Session::new();
            s.load_source("d.tl", &src, Path::new(".")).unwrap();
            s.run_with(engine, &RunOptions::default()).unwrap();
            let y = s.tensor("Y").unwrap();
            (y.entries(), matches!(y.storage, Storage::Dense(_)))
        };
        let ((a, _), (b, dense)) = (entries(&Reference), entries(&Standard));
        assert_eq!(dense, all_written, "{src}");
        assert_eq!(a.len(), b.len(), "{src}");
        for ((i, x), (j, y)) in a.iter().zip(&b) {
            assert_eq!(i, j, "{src}");
            assert!(
                (x - y).abs() <= 1e-6 * (1.0 + x.abs()),
                "{x} vs {y} in\n{src}"
            );
        }
        let plan = explained(&src);
        assert!(plan.contains("Y (not recursive), dense"), "{plan}");
        assert!(y_ran_dense(&src), "{src}");
    }
}

/// Reads shifted by a variable's value (`X[i - 1]`, `A[2 * i + 1]`, `A[10 - i]`) that would
/// leave their tensor at some values take the dense path over the variable's valid interval
/// (the other points contribute nothing, §5.1) and match the reference.
#[test]
fn shifted_reads_take_the_dense_path_and_match_the_reference() {
    for eq in [
        "Y[i, j] = X[i - 1, j] + 0.5 X[i, j]",
        "Y[i] = A[i + 1] - A[i]",
        "Y[i] = A[2 * i + 1] A[10 - i]",
        "Y[i, j] = sig(X[i, k] X[j - 2, k])",
        "Y[i] = X[i - 1, j] W[j] + i",
        "Y[i, j] = X[i - 1, j] X[i + 1, j] (i > 2)",
    ] {
        let src = format!("X : real[10, 4]\nA : real[12]\nW : real[4]\n{eq}\n");
        assert_engines_agree(&src);
        let plan = explained(&src);
        assert!(plan.contains("Y (not recursive), dense"), "{plan}");
        assert!(y_ran_dense(&src), "{src}");
    }
}

/// Recursive strata reach the reference's fixpoint: index recursion (a deep network written
/// `Y[i, j] = sig(W[i, j, k] Y[i - 1, k])`, batched or not, an integer recursion) one step
/// at a time in index order, a damped contraction like PageRank's by iterating its dense
/// equations. A recursion that blows up or does not settle gets the reference's diagnostic.
#[test]
fn recursions_iterate_dense_equations_to_the_reference_fixpoint() {
    let index_order = "Y (recursive), in index order";
    for (src, how) in [
        (
            "W : real[6, 8, 8]\nIn : real[8]\nY[0, j] = In[j]\nY[i, j] = sig(W[i, j, k] Y[i - 1, k])\n",
            index_order,
        ),
        (
            "W : real[5, 16, 16]\nIn : real[4, 16]\nY[0, b, j] = In[b, j]\n\
             Y[i, b, j] = tanh(W[i, j, k] Y[i - 1, b, k] + 0.1)\n",
            index_order,
        ),
        (
            "A : real[6, 6]\nM[x, y] = 0.1 sig(A[x, y])\nY[x] = 0.15 + 0.85 M[x, y] Y[y]\n",
            "Y (recursive), dense",
        ),
        // An int recursion that computes from values (`+ i`) is exact, step by step.
        (
            "Y : int[10]\nY[0] = 1\nY[i] = 2 Y[i - 1] + i\n",
            "Y (recursive), in index order, exact i64",
        ),
    ] {
        assert_engines_agree(src);
        let plan = explained(src);
        assert!(plan.contains(how), "{plan}");
    }
    for src in [
        "Y : real[3]\nY[x] = 1 + 2 Y[x]\n",
        "Y : real[3]\nY[x] = 1 + 0.9999999 Y[x]\n",
    ] {
        let error = |engine: &dyn Engine| {
            let mut s = Session::new();
            s.load_source("d.tl", src, Path::new(".")).unwrap();
            match s.run_with(engine, &RunOptions::default()) {
                Ok(_) => panic!("{src} should fail"),
                Err(d) => d.render("d.tl", src),
            }
        };
        assert_eq!(error(&Reference), error(&Standard), "{src}");
    }
}

/// A convolution whose gathered window (im2col) would exceed `CHUNK_ELEMENTS` runs in
/// blocks of batch rows; each example's output is bit for bit what a smaller batch, gathered
/// whole, gives for it.
#[test]
fn large_windows_are_gathered_in_blocks_of_rows() {
    let run = |examples: std::ops::Range<usize>| -> (Vec<f64>, String) {
        let b = examples.len();
        let src = format!(
            "In : real[{b}, 16, 50, 50]\nW : real[4, 16, 3, 3]\n\
             Y[b, o, x, y] = relu(W[o, c, dx, dy] In[b, c, x + dx, y + dy])\n"
        );
        let value = |i: usize| ((i * 7919) % 1000) as f64 / 500.0 - 1.0;
        let per = 16 * 50 * 50;
        let x: Vec<f64> = examples
            .flat_map(|e| (0..per).map(move |j| value(e * per + j) as f32 as f64))
            .collect();
        let w: Vec<f64> = (0..4 * 16 * 9)
            .map(|i| value(i + 3) as f32 as f64)
            .collect();
        let f32 = tensor_logic::ElemType::F32;
        let mut s = Session::new();
        s.load_source("c.tl", &src, Path::new(".")).unwrap();
        s.bind(
            "In",
            &tensor_logic::Tensor::dense(f32, vec![b, 16, 50, 50], x).unwrap(),
        );
        s.bind(
            "W",
            &tensor_logic::Tensor::dense(f32, vec![4, 16, 3, 3], w).unwrap(),
        );
        s.run(&RunOptions::default()).unwrap();
        let y = match &s.tensor("Y").unwrap().storage {
            Storage::Dense(v) => v.to_f64().into_owned(),
            other => panic!("{other:?}"),
        };
        (y, explained(&src))
    };
    let (all, plan) = run(0..16);
    assert!(plan.contains("in blocks of"), "{plan}");
    let (first, plan) = run(0..8);
    assert!(!plan.contains("in blocks of"), "{plan}");
    let (second, _) = run(8..16);
    assert_eq!(all, [first, second].concat());
}

/// A softmax of an expression (attention's masked, scaled scores) and a layer norm of a sum
/// (a residual) run over their product's f32 buffer, and give the reference's values within
/// the f32 rounding of their argument.
#[test]
fn normalisations_of_expressions_run_in_their_products_buffer() {
    let src = "Q : real[6, 8]\nK : real[6, 8]\nQ ~ normal(0, 1)\nK ~ normal(0, 1)\n\
               Att[p, q.] = softmax(Q[p, k] K[q, k] / sqrt(8) - 1e9 * (q > p))\n\
               Y[p, d.] = lnorm(Q[p, k] K[d, k] + Att[p, d])\n";
    let plan = explained(src);
    for how in [
        "its argument applied a row at a time, then softmax along axis 2 in f32",
        "its argument applied a row at a time, then lnorm along axis 2 in f32",
    ] {
        assert!(plan.contains(how), "{plan}");
    }
    let (a, b) = (values(src, &Reference, 1), values(src, &Standard, 1));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{x} vs {y}");
    }
}

/// Parts of an expression that read no term (`1e9 * (q > p)`, positional codes) are
/// tabulated once per pass over the variables they mention and read as terms: on f64
/// tensors the engine's values are the reference's bit for bit, at one and two threads,
/// for every kind of operation such a part holds, and `explain` says so.
#[test]
fn tabulated_parts_match_the_reference_bit_for_bit() {
    let parts = [
        "X[b, p, q] / 8 - 1e9 * (q > p)",
        "X[b, p, q] + sin(p * 0.3 + q) * (p % 3) - (q >= p) + (p == q) - (p != 2 * q)",
        "X[b, p, q] * (0.5 ^ (q - p)) + exp(-(p - q) ^ 2 / 4) - relu(p - q) / (q + 1)",
        "-(X[b, p, q]) + max(p, q) * (q < 3) + (p <= q) - tanh(q / 7)",
        // Two tables, over p and over q (the second read along the row).
        "X[b, p, q] * sig(p - 4) + X[b, p, q] * sqrt(q)",
    ];
    for part in parts {
        let src = format!(
            "B : 16\nP : 9\nQ : 11\nX : f64[B, P, Q]\nX ~ normal(0, 1)\nY : f64[B, P, Q]\nY[b, p, q] = {part}\n"
        );
        assert!(explained(&src).contains("tabulated over"), "{src}");
        let want = values(&src, &Reference, 1);
        for threads in [1, 2] {
            let got = values(&src, &Standard, threads);
            assert_eq!(want.len(), got.len(), "{src}");
            for (a, b) in want.iter().zip(&got) {
                assert!(
                    a.to_bits() == b.to_bits(),
                    "{a} vs {b} at {threads} threads in\n{src}"
                );
            }
        }
    }
}

/// A tensor network of many factors is contracted along a path, never as a loop nest over
/// every point: the product of sixty 2×2 shears is computed at once (as a loop nest it would
/// visit 2⁶¹ points), exactly, and the same for every thread count.
#[test]
fn a_product_of_sixty_matrices_is_contracted_along_a_path() {
    let chain: Vec<String> = (0..60).map(|k| format!("A[i{k}, i{}]", k + 1)).collect();
    let src = format!("A = [[1, 1], [0, 1]]\nY[i0, i60] = {}\n", chain.join(" "));
    for threads in [1, 2] {
        assert_eq!(
            tensor(&src, &Standard, threads, "Y"),
            vec![1.0, 60.0, 0.0, 1.0]
        );
    }
}

/// A declared matrix given by a few weighted rows is stored as them (SPEC §4: storage follows
/// the data, not the declaration): a 20,000² f32 matrix of 300 rows runs under a 100 MB budget
/// that its 1.6 GB dense array is far over, `tl explain` says so, and its product matches the
/// one over an undeclared copy. Rows at one position add with the element type's rounding
/// after each addition, as a dense array's stores do: 2²⁴ + 1 + 1 stays 2²⁴ in f32 whichever
/// way the matrix is stored.
#[test]
fn a_declared_matrix_of_few_rows_is_stored_as_them() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..300u64)
        .map(|i| {
            format!(
                "{}\t{}\t{}\n",
                (i * 7919) % 20_000,
                (i * 104_729 + 11) % 20_000,
                i % 7
            )
        })
        .collect();
    std::fs::write(dir.path().join("w.tsv"), rows).unwrap();
    std::fs::write(
        dir.path().join("twice.tsv"),
        "5\t5\t16777216\n5\t5\t1\n5\t5\t1\n",
    )
    .unwrap();
    let run = |src: &str, name: &str| {
        let mut s = Session::new();
        s.load_source("w.tl", src, dir.path()).unwrap();
        let mut opts = RunOptions::default();
        opts.settings.max_memory = 100 << 20;
        s.run_with(&Standard, &opts)
            .map_err(|d| d.render("w.tl", src))
            .unwrap();
        (
            s.tensor(name).unwrap().to_dense_values(),
            s.explain().unwrap(),
        )
    };
    let body =
        "Z : real[Node, D]\nZ[m, d] = m + d\nAgg[n, d] = W[n, m] Z[m, d]\nS[d] = Agg[n, d]\n";
    let declared = run(
        &format!("Node : 20000\nD : 4\nW : real[Node, Node]\nW = \"w.tsv\"\n{body}"),
        "S",
    );
    let bare = run(&format!("Node : 20000\nD : 4\nW = \"w.tsv\"\n{body}"), "S");
    assert_eq!(declared.0, bare.0);
    assert!(
        declared.1.contains("W stored as its 300 non-zero elements"),
        "{}",
        declared.1
    );
    for n in [8, 20_000] {
        let src = format!("Node : {n}\nW : real[Node, Node]\nW = \"twice.tsv\"\nTop = W[5, 5]\n");
        assert_eq!(run(&src, "Top").0, vec![16_777_216.0], "{n} nodes");
    }
}

/// A declared matrix stored as its few weighted rows keeps its zeros as numbers (docs/
/// language.md, "skipping zeros"): beside an infinite factor (`Z[0] = 1 / 0`) or a zero
/// divisor, 0 · inf and 0 / 0 are NaN on both engines, so the loop nests and the dense
/// scatter read the stored zeros then, and say so in the decision log; beside finite
/// factors they still leave them out.
#[test]
fn stored_zeros_are_numbers_beside_infinities() {
    let dir = tempfile::tempdir().unwrap();
    // Two rows the values below follow, and enough others for `Agg` to be planned dense.
    let rows: String = (2..300).map(|i| format!("{i}\t{}\t1.5\n", i * 7)).collect();
    std::fs::write(
        dir.path().join("w.tsv"),
        format!("0\t1\t2.0\n1\t0\t3.0\n{rows}"),
    )
    .unwrap();
    let src = "Node : 3000\nD : 2\nW : real[Node, Node]\nW = \"w.tsv\"\n\
               V[y] = (y > 0) + 0 W[0, y]\nZ[y] = 1 / V[y]\nF[y] = 1 / (V[y] + 1)\n\
               Zd : real[Node, D]\nZd[y, d] = Z[y] + d\n\
               A[x] = W[x, y] Z[y]\nB[x] = W[x, y] / V[y]\nC[x] = W[x, y] F[y]\n\
               Agg[x, d] = W[x, y] Zd[y, d]\n";
    let run = |engine: &dyn Engine| {
        let mut s = Session::new();
        s.load_source("z.tl", src, dir.path()).unwrap();
        s.run_with(engine, &RunOptions::default())
            .map_err(|d| d.render("z.tl", src))
            .unwrap();
        let at = |name: &str, i: usize| s.tensor(name).unwrap().to_dense_values()[i];
        let values = [at("A", 2), at("B", 2), at("C", 0), at("C", 1), at("Agg", 5)];
        (values, s.decisions_text().unwrap_or_default())
    };
    for engine in [&Standard as &dyn Engine, &Reference] {
        let ([a, b, c0, c1, agg], log) = run(engine);
        assert!(
            a.is_nan() && b.is_nan() && agg.is_nan(),
            "{a} {b} {agg}\n{log}"
        );
        assert_eq!((c0, c1), (1.0, 3.0), "{log}");
    }
    let (_, log) = run(&Standard);
    let line = |t: &str| {
        log.lines()
            .find(|l| l.contains(&format!(": {t}:")))
            .unwrap_or("")
    };
    assert!(line("A").contains("`W` read at every point"), "{log}");
    assert!(line("B").contains("the divisor `V` holds a 0"), "{log}");
    assert!(!line("C").contains("read at every point"), "{log}");
    assert!(
        line("Agg").contains("`Zd` holds an infinity or NaN beside"),
        "{log}"
    );
}
