//! Learning (SPEC §12): analytic gradients against finite differences on programs that use
//! every construct a gradient must pass through.

use std::path::Path;
use tensor_logic::eval::EvalOptions;
use tensor_logic::learn::{gradcheck, loss_tensor};
use tensor_logic::{ElemType, Route, Session, Settings};

/// The worst relative error of any parameter of `src` (checked in f64), by name.
fn worst(src: &str) -> Vec<(String, f64)> {
    let mut s = Session::new();
    s.load_source("g.tl", src, Path::new(".")).unwrap();
    let settings = Settings {
        real: ElemType::F64,
        seed: 7,
        ..Settings::default()
    };
    let p = s
        .check(&settings)
        .unwrap_or_else(|d| panic!("{}", d.render("g.tl", src)))
        .clone();
    let loss = loss_tensor(&p, "Loss").unwrap();
    let r = gradcheck::check(&p, &EvalOptions::default(), loss, &p.params.clone(), 40).unwrap();
    r.into_iter().map(|c| (c.name, c.worst)).collect()
}

fn assert_exact(src: &str) {
    let w = worst(src);
    assert!(!w.is_empty(), "no parameters in\n{src}");
    for (name, e) in w {
        assert!(e < 1e-5, "{name}: relative error {e} in\n{src}");
    }
}

#[test]
fn mlp_with_bias_and_squared_loss() {
    assert_exact(
        "X = [[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]]\nT = [[1, 0], [0, 1]]\n\
         W1 : real[4, 3]\nB1 ~ uniform(-0.5, 0.5)\nB1 : real[4]\nW2 : real[2, 4]\n\
         H[e, h] = tanh(W1[h, i] X[e, i] + B1[h])\nY[e, o] = sig(W2[o, h] H[e, h])\n\
         Loss = (Y[e, o] - T[e, o])^2\n",
    );
}

#[test]
fn softmax_cross_entropy_and_lnorm() {
    assert_exact(
        "X = [[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]]\nT = [[1, 0, 0], [0, 0, 1]]\n\
         W : real[3, 3]\nN[e, j] = lnorm(W[j, i] X[e, i])\nP[e, k] = softmax(N[e, k] + W[k, 0])\n\
         Loss = -T[e, k] log(P[e, k])\n",
    );
}

#[test]
fn max_pooling_with_index_arithmetic_and_convolution() {
    assert_exact(
        "Img = [[0.1, 0.9, 0.3, 0.4, 0.2], [0.5, 0.7, 0.8, 0.1, 0.6], [0.3, 0.2, 0.9, 0.4, 0.5], [0.7, 0.1, 0.2, 0.8, 0.3], [0.6, 0.4, 0.5, 0.2, 0.9]]\n\
         F ~ normal(0, 1)\nF : real[2, 2]\n\
         Feat[x, y] = F[dx, dy] Img[x + dx, y + dy]\nPool[x / 2, y / 2] max= Feat[x, y]\n\
         Loss = Pool[i, j] Pool[i, j]\n",
    );
}

#[test]
fn index_recursion_over_layers() {
    assert_exact(
        "In = [0.2, -0.4, 0.9]\nL ~ normal(0, 0.8)\nL : real[4, 3, 3]\n\
         Act[0, j] = In[j]\nAct[l, j] = sig(L[l, j, k] Act[l - 1, k])\nLoss = Act[3, j]\n",
    );
}

#[test]
fn virtual_index_rnn_backpropagates_through_time() {
    assert_exact(
        "U = [[0.3, -0.2, 0.5, 0.1], [0.7, 0.4, -0.6, 0.2]]\nW ~ normal(0, 0.6)\nW : real[3, 3]\n\
         V ~ normal(0, 0.6)\nV : real[3, 2]\n\
         S[i, *t + 1] = tanh(W[i, j] S[j, *t] + V[i, k] U[k, t])\nLoss = S[i] S[i]\n",
    );
}

#[test]
fn fixpoint_recursion_unrolled_over_its_iterations() {
    assert_exact(
        "A = [[0, 0.3, 0.2], [0.1, 0, 0.4], [0.3, 0.3, 0]]\nB ~ uniform(0, 1)\nB : real[3]\n\
         R[x] = 0.5 * A[x, y] R[y] + B[x]\nLoss = R[x] R[x]\n",
    );
}

#[test]
fn concat_avg_and_relations_times_parameters() {
    assert_exact(
        "Neig(0, 1). Neig(1, 2). Neig(2, 0). Neig(2, 1).\nZ : real[3, 2]\nQ : real[2, 2, 2]\n\
         Agg[n, d] = Neig(n, m) Z[m, d]\nHeads[n, h, d] = Q[h, d, e] Agg[n, e]\n\
         Flat[n, c] = concat(Heads[n, h, d])\nMean[n] avg= Flat[n, c]\nLoss = sin(Mean[n]) + Flat[n, c] Flat[n, c]\n",
    );
}

#[test]
fn min_recursion_passes_gradient_to_the_winning_path() {
    assert_exact(
        "Edge(0, 1). Edge(1, 2). Edge(0, 2). Edge(2, 3).\nC ~ uniform(1, 2)\nC : real[4, 4]\n\
         Dist[0] min= 0\nDist[y] min= Dist[x] + Edge(x, y) C[x, y]\nLoss = Dist[3]\n",
    );
}

/// The kernels' gradients (dense equations) against the reference loops', in f64.
fn assert_fast_matches_reference(src: &str) {
    let mut s = Session::new();
    s.load_source("g.tl", src, Path::new(".")).unwrap();
    let settings = Settings {
        real: ElemType::F64,
        seed: 3,
        ..Settings::default()
    };
    let p = s.check(&settings).unwrap().clone();
    let loss = loss_tensor(&p, "Loss").unwrap();
    let o = EvalOptions::default();
    let plan = tensor_logic::Plan::new(&p);
    let fast = tensor_logic::learn::gradients(&p, &plan, &o, loss, &p.params).unwrap();
    let slow = tensor_logic::learn::reference_gradients(&p, &o, loss, &p.params).unwrap();
    // Every route ran as the backward plan says, and the oracle's on the reference loops.
    assert!(
        fast.routes.iter().all(|r| r.reason.is_none()),
        "{:?}",
        fast.routes
    );
    let oracle = |r: &Route| {
        matches!(
            r,
            Route::Iterations | Route::Reference { through_time: true }
        )
    };
    assert!(
        slow.routes.iter().all(|r| oracle(&r.ran)),
        "{:?}",
        slow.routes
    );
    assert!((fast.loss - slow.loss).abs() <= 1e-12 * slow.loss.abs().max(1.0));
    for ((f, r), &t) in fast.grads.iter().zip(&slow.grads).zip(&p.params) {
        let scale = r.iter().fold(1e-12f64, |m, x| m.max(x.abs()));
        for (a, b) in f.iter().zip(r) {
            assert!(
                (a - b).abs() <= 1e-10 * scale,
                "{}: {a} vs {b}",
                p.tensors[t].name
            );
        }
    }
}

#[test]
fn relation_times_parameter_gradients_match_the_reference_loops() {
    assert_fast_matches_reference(
        "Neig(0, 1). Neig(1, 2). Neig(2, 0). Neig(2, 1). Neig(3, 3).\nR(0, 2). R(1, 3). R(3, 0).\n\
         Z : real[4, 3]\nEmb : real[4, 2]\nW : real[3]\n\
         Agg[n, d] = Neig(n, m) Z[m, d]\nER[i, j] = R(x, y) Emb[x, i] Emb[y, j]\nS[n] = Neig(n, m) Z[m, d] W[d]\n\
         Loss = Agg[n, d] Agg[n, d] + sin(ER[i, j]) + S[n] S[n]\n",
    );
}

#[test]
fn dense_kernel_gradients_match_the_reference_loops() {
    assert_fast_matches_reference(
        "X = [[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]]\nT = [[1, 0], [0, 1]]\n\
         W1 : real[4, 3]\nB1 ~ uniform(-0.5, 0.5)\nB1 : real[4]\nW2 : real[2, 4]\n\
         H[e, h] = relu(W1[h, i] X[e, i] + B1[h])\nY[e, o] = sig(W2[o, h] H[e, h]) * 2 - H[e, 0] / (1 + H[e, 1]^2)\n\
         Loss = (Y[e, o] - T[e, o])^2 + 0.1 * W1[h, i] W1[h, i]\n",
    );
    assert_fast_matches_reference(
        "A ~ normal(0, 1)\nA : real[3, 4, 5]\nB ~ normal(0, 1)\nB : real[5, 4]\nC ~ normal(0, 1)\nC : real[2, 3]\n\
         D[p, q] = C[p, i] A[i, j, k] B[k, j] + exp(C[p, q])\nLoss = D[p, q] D[p, q]\n",
    );
    assert_fast_matches_reference(
        "X ~ normal(0, 1)\nX : real[4, 3]\nQ ~ normal(0, 1)\nQ : real[3, 3]\nK ~ normal(0, 1)\nK : real[3, 3]\n\
         T = [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]\n\
         S[p, p'.] = softmax(Q[d, i] X[p, i] K[d, j] X[p', j] / 2)\nN[p, d.] = lnorm(S[p, q] X[q, d] * 3 + X[p, d])\n\
         Loss = -T[p, q] log(S[p, q]) + N[p, d] N[p, d] N[p, 0]\n",
    );
    // A strided convolution over an image that takes no gradient (a gathered window), and
    // a reversed read of a tensor that takes one (its gradient scattered back, col2im).
    assert_fast_matches_reference(
        "Img = [[0.1, 0.9, 0.3, 0.4, 0.2], [0.5, 0.7, 0.8, 0.1, 0.6], [0.3, 0.2, 0.9, 0.4, 0.5], [0.7, 0.1, 0.2, 0.8, 0.3], [0.6, 0.4, 0.5, 0.2, 0.9]]\n\
         F ~ normal(0, 1)\nF : real[3, 2, 2]\nB : real[3]\nG : real[3, 3]\n\
         Feat[c, x, y] = tanh(F[c, dx, dy] Img[2 * x + dx, 2 * y + dy] + B[c])\n\
         Back[c, x, y] = G[c, d] Feat[d, 1 - x, y]\nLoss = Feat[c, x, y] Feat[c, x, y] + Back[c, x, y]^2\n",
    );
    // Two stacked convolutions: the second's overlapping windows over the first's output
    // add up in its gradient.
    assert_fast_matches_reference(
        "Img ~ normal(0, 1)\nImg : real[2, 7, 6]\nF ~ normal(0, 1)\nF : real[3, 2, 2, 2]\n\
         G ~ normal(0, 1)\nG : real[2, 3, 3, 2]\n\
         A[c, x, y] = relu(F[c, i, dx, dy] Img[i, x + dx, y + dy])\n\
         B[o, x, y] = G[o, c, dx, dy] A[c, x + dx, 2 * y + dy]\nLoss = B[o, x, y] B[o, x, y]\n",
    );
    // `concat` (dense: the flattened variables stand in the grid for the one they make).
    assert_fast_matches_reference(
        "Z ~ normal(0, 1)\nZ : real[2, 3, 2]\nW ~ normal(0, 1)\nW : real[4, 5]\n\
         M[p, m] = concat(tanh(Z[h, p, v]))\nY[p, o] = W[m, o] M[p, m]\nLoss = Y[p, o]^2 + M[p, m] M[p, 3]\n",
    );
    // Sum pooling (left-hand-side index arithmetic): each grid element gets its position's
    // adjoint.
    assert_fast_matches_reference(
        "F ~ normal(0, 1)\nF : real[5, 4]\nP[x / 2, y / 2] = sig(F[x, y]) F[x, 0]\nLoss = P[i, j] P[i, j]\n",
    );
}

/// Recursion along an index (planned in index order) is differentiated step by step by the
/// dense kernels, not recorded on the reference loops, and agrees with them.
fn assert_index_order_matches_reference(src: &str) {
    let mut s = Session::new();
    s.load_source("g.tl", src, Path::new(".")).unwrap();
    s.check(&Settings::default()).unwrap();
    assert!(s.explain().unwrap().contains("in index order"), "{src}");
    let backward = s.explain_backward("Loss", &[]).unwrap();
    assert!(
        backward.contains("back step by step by the dense kernels"),
        "{backward}"
    );
    assert_fast_matches_reference(src);
}

#[test]
fn index_order_recursion_gradients_match_the_reference_loops() {
    // Each layer reads the previous one of its own tensor (`Act[l - 1, k]`).
    assert_index_order_matches_reference(
        "In = [0.2, -0.4, 0.9]\nL ~ normal(0, 0.8)\nL : real[4, 3, 3]\n\
         Act[0, j] = In[j]\nAct[l, j] = sig(L[l, j, k] Act[l - 1, k])\nLoss = Act[3, j] Act[3, j]\n",
    );
    // The GNN of Table 1 with a loss: three tensors per layer, a relation, self-reads.
    assert_index_order_matches_reference(
        "Neig(0, 1). Neig(1, 2). Neig(2, 0). Neig(2, 1).\nX ~ normal(0, 1)\nX : real[3, 4]\n\
         WP : real[2, 4, 4]\nWA : real[2, 4, 4]\nWS : real[2, 4, 4]\nEmb[n, 0, d] = X[n, d]\n\
         Z[n, l, d] = relu(WP[l, d, e] Emb[n, l, e])\nAgg[n, l, d] = Neig(n, m) Z[m, l, d]\n\
         Emb[n, l + 1, d] = tanh(WA[l, d, e] Agg[n, l, e] + WS[l, d, e] Emb[n, l, e])\n\
         Loss = Emb[n, 2, d] Emb[n, 2, d]\n",
    );
    // Transformer blocks along a layer index: causal attention, lnorm, a feed-forward layer.
    assert_index_order_matches_reference(
        "Tok(0, 0, 1). Tok(0, 1, 2). Tok(0, 2, 0). Tok(1, 0, 2). Tok(1, 1, 2). Tok(1, 2, 1).\n\
         Tgt(0, 0, 2). Tgt(0, 1, 0). Tgt(0, 2, 1). Tgt(1, 0, 2). Tgt(1, 1, 1). Tgt(1, 2, 0).\n\
         Emb : real[3, 4]\nPos : real[3, 4]\nWQ : real[2, 2, 2, 4]\nWK : real[2, 2, 2, 4]\n\
         WV : real[2, 2, 2, 4]\nWS : real[2, 4, 2, 2]\nW1 : real[2, 5, 4]\nW2 : real[2, 4, 5]\n\
         WOut : real[3, 4]\n\
         X[s, 0, p, d] = Tok(s, p, c) Emb[c, d] + Pos[p, d]\n\
         Q[s, l, h, p, k] = WQ[l, h, k, d] X[s, l, p, d]\nK[s, l, h, p, k] = WK[l, h, k, d] X[s, l, p, d]\n\
         V[s, l, h, p, k] = WV[l, h, k, d] X[s, l, p, d]\n\
         Att[s, l, h, p, q.] = softmax(Q[s, l, h, p, k] K[s, l, h, q, k] / 2 - 1e9 * (q > p))\n\
         O[s, l, h, p, k] = Att[s, l, h, p, q] V[s, l, h, q, k]\n\
         X1[s, l, p, d.] = lnorm(WS[l, d, h, k] O[s, l, h, p, k] + X[s, l, p, d])\n\
         H[s, l, p, f] = relu(W1[l, f, d] X1[s, l, p, d])\n\
         X[s, l + 1, p, d.] = lnorm(W2[l, d, f] H[s, l, p, f] + X1[s, l, p, d])\n\
         P[s, p, c.] = softmax(WOut[c, d] X[s, 2, p, d])\nLoss = -Tgt(s, p, c) log(P[s, p, c])\n",
    );
}

const VARS: [&str; 4] = ["i", "j", "k", "l"];
const DOMS: [&str; 4] = ["I", "J", "K", "L"];

/// A random einsum-shaped model: parameters `F0..`, one equation
/// `Y[out] = around(f(F0[..] F1[..] …))`, and a loss reading every element of Y.
fn random_model(
    extents: &[usize],
    factors: &[Vec<usize>],
    out: &[usize],
    func: usize,
    around: usize,
) -> String {
    let mut src = String::new();
    for (d, n) in DOMS.iter().zip(extents) {
        src.push_str(&format!("{d} : {n}\n"));
    }
    let mut body = Vec::new();
    for (f, vars) in factors.iter().enumerate() {
        let doms: Vec<&str> = vars.iter().map(|&v| DOMS[v]).collect();
        let names: Vec<&str> = vars.iter().map(|&v| VARS[v]).collect();
        src.push_str(&format!(
            "F{f} : real[{}]\nF{f} ~ normal(0, 0.7)\n",
            doms.join(", ")
        ));
        body.push(format!("F{f}[{}]", names.join(", ")));
    }
    let rhs = body.join(" ");
    let rhs = match func {
        1 => format!("sig({rhs})"),
        2 => format!("tanh({rhs})"),
        _ => rhs,
    };
    let lhs: Vec<&str> = out.iter().map(|&v| VARS[v]).collect();
    let rhs = match (out.first(), around) {
        (Some(&o), 1) => {
            src.push_str(&format!("B : real[{}]\nB ~ normal(0, 1)\n", DOMS[o]));
            format!("{rhs} * B[{}] + B[{}]", VARS[o], VARS[o])
        }
        (Some(_), 2) => format!("softmax({rhs})"),
        (Some(_), 3) => format!("lnorm({rhs}) * 0.5"),
        (Some(_), 4) => format!("({rhs}) / (2 + ({rhs})^2)"),
        _ => rhs,
    };
    let y = if lhs.is_empty() {
        "Y".to_string()
    } else {
        format!("Y[{}]", lhs.join(", "))
    };
    src.push_str(&format!("{y} = {rhs}\nLoss = {y} {y} + sin({y})\n"));
    src
}

type Model = (Vec<usize>, Vec<Vec<usize>>, Vec<usize>, usize, usize);

fn model() -> impl Strategy<Value = Model> {
    (
        proptest::collection::vec(1usize..4, 4),
        proptest::collection::vec(
            proptest::sample::subsequence((0..4).collect::<Vec<_>>(), 1..4),
            1..4,
        ),
        proptest::sample::subsequence((0..4).collect::<Vec<_>>(), 0..3),
        0usize..3,
        0usize..5,
    )
        .prop_map(|(extents, factors, out, func, around)| {
            let out = out
                .into_iter()
                .filter(|v| factors.iter().any(|f| f.contains(v)))
                .collect();
            (extents, factors, out, func, around)
        })
}

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// On random models the kernels' gradients equal the reference loops', and both equal
    /// central finite differences.
    #[test]
    fn random_models_have_exact_gradients((extents, factors, out, func, around) in model()) {
        let src = random_model(&extents, &factors, &out, func, around);
        assert_fast_matches_reference(&src);
        for (name, e) in worst(&src) {
            // Central differences carry ~1e-6 of noise relative to small gradients.
            prop_assert!(e < 1e-4, "{}: relative error {} in\n{}", name, e, src);
        }
    }
}

#[test]
fn registered_functions_backpropagate_through_their_derivative() {
    let src = "X = [[0.5, -1.0], [1.5, 0.3]]\nW : real[3, 2]\nY[e, h] = swish(W[h, i] X[e, i])\n\
               Loss = Y[e, h] Y[e, h]\n";
    let mut s = Session::new();
    s.register_function(
        "swish",
        |x| x / (1.0 + (-x).exp()),
        |x| {
            let g = 1.0 / (1.0 + (-x).exp());
            g + x * g * (1.0 - g)
        },
    );
    s.load_source("g.tl", src, Path::new(".")).unwrap();
    let checks = s
        .check_gradients(&tensor_logic::RunOptions::default(), "Loss", &[], 20)
        .unwrap();
    assert_eq!(checks.len(), 1);
    assert!(
        checks[0].worst < 1e-6 && checks[0].largest > 0.0,
        "{checks:?}"
    );
}

/// A backward pass large enough to split its element-wise work among threads gives the bits
/// of one thread: a term laid out like the output, a broadcast one (`B[h]`), a transposed
/// one (`V[h, e]`) and one read twice.
#[test]
fn gradients_are_bit_identical_for_every_thread_count() {
    let src = "W : real[64, 32]\nW ~ normal(0, 0.2)\nX : real[512, 32]\nX ~ normal(0, 1)\n\
               B : real[64]\nB ~ normal(0, 0.1)\nV : real[64, 512]\nV ~ normal(0, 0.1)\n\
               H[e, h] = tanh(W[h, i] X[e, i] + B[h]) * V[h, e] + V[h, e] * B[h] * B[h]\n\
               Loss = H[e, h] H[e, h]\n";
    let one = same_bits_at_one_and_two_threads(src);
    assert!(one.grads.iter().all(|a| a.iter().any(|&x| x != 0.0)));
}

/// The gradients of `src`'s `Loss` at one thread, having checked that two threads give
/// the same bits.
fn same_bits_at_one_and_two_threads(src: &str) -> tensor_logic::learn::Gradients {
    let mut s = Session::new();
    s.load_source("g.tl", src, Path::new(".")).unwrap();
    let p = s.check(&Settings::default()).unwrap().clone();
    let loss = loss_tensor(&p, "Loss").unwrap();
    let plan = tensor_logic::Plan::new(&p);
    let run = |threads| {
        let o = EvalOptions {
            threads,
            ..EvalOptions::default()
        };
        tensor_logic::learn::gradients(&p, &plan, &o, loss, &p.params).unwrap()
    };
    let (one, two) = (run(1), run(2));
    assert_eq!(one.loss.to_bits(), two.loss.to_bits());
    for (a, b) in one.grads.iter().zip(&two.grads) {
        assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
    one
}

/// A loss whose parts sum different variables around a call (a regulariser beside a
/// cross-entropy) is planned as one dense equation per part, not a loop nest, and its
/// gradients are exact.
#[test]
fn a_loss_summing_parts_over_different_variables_is_dense_and_exact() {
    let src = "M : real[10, 8]\nM ~ uniform(0.1, 1)\nW : real[10, 3, 10]\nW ~ normal(0, 0.1)\n\
               Train(1, 2, 3). Train(4, 1, 5). Train(7, 0, 9). Train(9, 2, 0).\n\
               TP[x, r, y] = sigmoid(W[x, r, y])\n\
               Loss = 0.01 M[x, i] sqrt(M[x, i]) - Train(x, r, y) log(TP[x, r, y]) + 0.5 M[x, i] M[x, i]\n";
    let mut s = Session::new();
    s.load_source("g.tl", src, Path::new(".")).unwrap();
    s.check(&Settings::default()).unwrap();
    let explained = s.explain().unwrap();
    assert!(explained.contains("part 3 of 3"), "{explained}");
    assert!(!explained.contains("loop nests"), "{explained}");
    assert_fast_matches_reference(src);
}

/// Heads concatenated inside a recursion along a layer index run as dense steps, and their
/// gradients are exact.
#[test]
fn a_concat_inside_index_recursion_has_exact_gradients() {
    assert_fast_matches_reference(
        "W : real[4, 2, 8, 16]\nW ~ normal(0, 0.3)\nE : real[3, 16]\nE ~ normal(0, 1)\n\
         X[s, 0, d] = E[s, d]\nO[s, l, h, k] = tanh(W[l, h, k, d] X[s, l, d])\n\
         X[s, l + 1, m] = concat(O[s, l, h, k])\nLoss = X[s, 4, m] X[s, 4, m]\n",
    );
}

/// A cross-entropy whose target is a relation evaluates its `log` only at the relation's
/// tuples (explain says so); its value and gradients are the reference loops' where every
/// probability is positive, and bit for bit the same at one and two threads, also where
/// the tuples are many enough to split.
#[test]
fn a_cross_entropy_over_a_relation_runs_only_at_its_tuples() {
    let facts = |rows: usize, keep: &dyn Fn(usize, usize) -> bool| {
        let mut out = String::new();
        for e in 0..rows {
            for c in (0..40).filter(|&c| keep(e, c)) {
                out.push_str(&format!("Tgt({e}, {c}).\n"));
            }
        }
        out
    };
    let program = |rows: usize, facts: String| {
        format!(
            "W : real[40, 8]\nW ~ normal(0, 1)\nX : real[{rows}, 8]\nX ~ normal(0, 1)\n{facts}\
             P[e, c.] = softmax(W[c, d] X[e, d])\nLoss = -Tgt(e, c) log(P[e, c]) / {rows}\n"
        )
    };
    let small = program(60, facts(60, &|e, c| c == (e * 7) % 40));
    let mut s = Session::new();
    s.load_source("g.tl", &small, Path::new(".")).unwrap();
    s.check(&Settings::default()).unwrap();
    let explained = s.explain().unwrap();
    assert!(
        explained.contains("the rest only where term 1 is nonzero"),
        "{explained}"
    );
    assert_fast_matches_reference(&small);

    let many = program(1000, facts(1000, &|e, c| (e + c) % 3 == 0));
    let one = same_bits_at_one_and_two_threads(&many);
    assert!(one.loss.is_finite() && one.loss > 0.0);
}

/// A probability of 0 where the target relation is false adds nothing to a cross-entropy
/// (as in PyTorch), rather than 0 · log(0) = NaN: the relation's zeros are skipped.
#[test]
fn a_zero_probability_off_the_target_leaves_the_cross_entropy_finite() {
    let src = "Z = [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]]\nTgt(0, 0). Tgt(1, 1).\n\
               W : real[3]\nW ~ uniform(1, 2)\nP[e, c] = Z[e, c] W[c]\n\
               Loss = -Tgt(e, c) log(P[e, c])\n";
    let mut s = Session::new();
    s.load_source("g.tl", src, Path::new(".")).unwrap();
    let p = s.check(&Settings::default()).unwrap().clone();
    let loss = loss_tensor(&p, "Loss").unwrap();
    let plan = tensor_logic::Plan::new(&p);
    let g = tensor_logic::learn::gradients(&p, &plan, &EvalOptions::default(), loss, &p.params)
        .unwrap();
    assert!(g.loss.is_finite(), "{}", g.loss);
    let w = &g.grads[0];
    assert!(w[0] < 0.0 && w[1] < 0.0 && w[2] == 0.0, "{w:?}");
}

/// Passes large enough to split across threads (a softmax's and a strided lnorm's
/// Jacobians, permutations of their operands) give the same gradients at one and two
/// threads.
#[test]
fn large_normalisations_split_across_threads_give_the_same_bits() {
    let src = "X : real[40, 64, 64]\nX ~ normal(0, 1)\nW : real[64, 64]\nW ~ normal(0, 0.1)\n\
               S[e, p, q.] = softmax(X[e, p, d] W[d, c] X[e, q, c] / 8)\n\
               N[e, p., d] = lnorm(W[d, c] X[e, p, c])\n\
               Loss = S[e, p, q] S[e, p, q] + N[e, p, d] N[e, p, d] N[e, p, d]\n";
    let one = same_bits_at_one_and_two_threads(src);
    assert!(one.grads.iter().all(|a| a.iter().any(|&x| x != 0.0)));
}

/// A parameter no gradient reaches (its `max=` part never wins) gets zeros of its own
/// length, and one that a gradient covers whole gets exactly that gradient, at one and two
/// threads.
#[test]
fn a_parameter_no_gradient_reaches_gets_zeros_of_its_length() {
    let src = "W : real[3]\nW = [5, 6, 7]\nV : real[4]\nV = [1, 2, 3, 0]\n\
               A[i] = 2 W[i]\nB[j] = V[j]\nLoss max= A[i]\nLoss max= B[j]\n";
    let mut s = Session::new();
    s.load_source("g.tl", src, Path::new(".")).unwrap();
    let p = s.check(&Settings::default()).unwrap().clone();
    let loss = loss_tensor(&p, "Loss").unwrap();
    let plan = tensor_logic::Plan::new(&p);
    let id = |name: &str| p.tensors.iter().position(|t| t.name == name).unwrap();
    let trainable = [id("W"), id("V")];
    for threads in [1, 2] {
        let o = EvalOptions {
            threads,
            ..EvalOptions::default()
        };
        let g = tensor_logic::learn::gradients(&p, &plan, &o, loss, &trainable).unwrap();
        assert_eq!(g.loss, 14.0);
        assert_eq!(g.grads, vec![vec![0.0, 0.0, 2.0], vec![0.0; 4]]);
    }
}

/// The backward plan names each stratum's route before training (`tl explain --loss`), and
/// a step's log says each ran as planned: dense equations by their gradient contractions,
/// a weighted sparse factor and a loop-nest equation by the reference loops with why, a
/// recursion back through its recorded iterations, strata off the loss's path idle.
#[test]
fn backward_routes_are_planned_explained_and_followed() {
    let src = "X = [[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]]\nW1 : real[4, 3]\nW2 : real[2, 4]\n\
               Node : 300\nA : real[Node, Node]\nA[0, 1] = 0.5\nA[1, 0] = 2\nZ : real[Node, 4]\n\
               V : real[2, 4]\n\
               H[e, h] = relu(W1[h, i] X[e, i])\nY[e, o] = W2[o, h] H[e, h]\n\
               M[n, d] = A[n, m] Z[m, d]\nR[i] = 0.5 * R[i] + V[i, h] V[i, h]\n\
               N[e, o.] = softmax(lnorm(Y[e, o]))\nG[e] max= Y[e, o]\nUnused[e] = H[e, 0]\n\
               Loss = Y[e, o] Y[e, o] + M[n, d] + R[i] + G[e] + N[e, o] Y[e, o]\n";
    let mut s = Session::new();
    s.load_source("g.tl", src, Path::new(".")).unwrap();
    let p = s.check(&Settings::default()).unwrap().clone();
    let text = s.explain_backward("Loss", &[]).unwrap();
    for line in [
        "backward: d Loss / d W1, W2, Z, V",
        ": H: dense gradient contractions",
        "    d W1: ",
        ": M: dense gradient contractions",
        "    d Z: ",
        ": N: dense gradient contractions, some equations by the reference loops",
        "by the reference loops: a softmax or lnorm inside another",
        ": R: back through every recorded iteration by the reference loops",
        "no gradient through strata",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    let loss = loss_tensor(&p, "Loss").unwrap();
    let plan = tensor_logic::Plan::new(&p);
    let b = tensor_logic::Backward::new(&p, &plan, loss, &p.params);
    let unused = p.tensor_id("Unused").unwrap();
    let idle = p
        .strata
        .iter()
        .position(|st| st.tensors.contains(&unused))
        .unwrap();
    assert_eq!(b.routes[idle], Route::Idle);
    let o = EvalOptions::default();
    let g = tensor_logic::learn::planned_gradients((&p, &plan, &b), &o, &p.params).unwrap();
    assert!(g
        .routes
        .iter()
        .all(|r| r.ran == b.routes[r.stratum] && r.reason.is_none()));
    let ran: Vec<&Route> = g.routes.iter().map(|r| &r.ran).collect();
    assert!(ran.contains(&&Route::Iterations), "{ran:?}");
    assert!(ran.iter().any(|r| matches!(
        r,
        Route::Reference {
            through_time: false
        }
    )));
    let reference = tensor_logic::learn::reference_gradients(&p, &o, loss, &p.params).unwrap();
    for (a, r) in g
        .grads
        .iter()
        .flatten()
        .zip(reference.grads.iter().flatten())
    {
        assert!((a - r).abs() <= 1e-4 * r.abs().max(1.0), "{a} vs {r}");
    }
}
