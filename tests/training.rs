//! `tl train` end to end (SPEC §12): the bundled models learn, runs are reproducible and
//! resumable, and every bad input gets a located error with nothing lost.

mod common;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `NAME = value` answers a short training run of a bundled example prints.
fn trained(example: &str, args: &[&str]) -> std::collections::BTreeMap<String, f64> {
    let file = format!("examples/{example}.tl");
    let mut all = vec!["train", file.as_str(), "--quiet"];
    all.extend_from_slice(args);
    let out = common::tl(root(), &all);
    assert!(out.status.success(), "{}", common::stderr(&out));
    scalars(&common::stdout(&out))
}

/// `NAME = value` lines of a run's output.
fn scalars(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| l.split_once(" = "))
        .filter_map(|(n, v)| Some((n.to_string(), v.parse().ok()?)))
        .collect()
}

/// The held-out accuracy a short training run of a bundled digits model prints.
fn accuracy(example: &str, args: &[&str]) -> f64 {
    let mut all = vec!["--batch", "Example:128", "--shuffle"];
    all.extend_from_slice(args);
    trained(example, &all)["Accuracy"]
}

#[test]
fn logistic_regression_learns_the_digits() {
    let acc = accuracy("digits_logreg", &["--epochs", "3", "--lr", "0.05"]);
    assert!(acc >= 0.9, "held-out accuracy {acc}");
}

#[test]
fn mlp_reaches_95_percent_on_held_out_digits() {
    let acc = accuracy("digits_mlp", &["--epochs", "4", "--lr", "0.003"]);
    assert!(acc >= 0.95, "held-out accuracy {acc}");
}

const LINEAR: &str = "X = [[1, 2], [2, 1], [3, 0], [0, 3], [1, 1]]\nY = [5, 4, 3, 6, 3]\n\
    W : real[2]\nB : real[1]\nP[e] = W[i] X[e, i] + B[0]\nLoss = (P[e] - Y[e])^2\nW?\n";

fn dir_with(src: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.tl"), src).unwrap();
    dir
}

fn train(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["train", "m.tl", "--quiet"];
    all.extend_from_slice(args);
    common::tl(dir, &all)
}

#[test]
fn a_resumed_run_continues_exactly_and_seeds_reproduce() {
    let dir = dir_with(LINEAR);
    let d = dir.path();
    let opts = [
        "--optimizer",
        "adamw",
        "--lr",
        "0.1",
        "--weight-decay",
        "0.01",
        "--seed",
        "5",
    ];
    let run = |extra: &[&str]| {
        let mut a = opts.to_vec();
        a.extend_from_slice(extra);
        let out = train(d, &a);
        assert!(out.status.success(), "{}", common::stderr(&out));
    };
    run(&["--steps", "12", "--save", "whole.safetensors"]);
    run(&["--steps", "12", "--save", "again.safetensors"]);
    run(&["--steps", "5", "--save", "part.safetensors"]);
    run(&[
        "--steps",
        "12",
        "--load",
        "part.safetensors",
        "--save",
        "part.safetensors",
    ]);
    let read = |n: &str| std::fs::read(d.join(n)).unwrap();
    assert_eq!(read("whole.safetensors"), read("again.safetensors"));
    assert_eq!(read("whole.safetensors"), read("part.safetensors"));
    let out = common::tl(d, &["run", "m.tl", "--load", "whole.safetensors"]);
    assert!(out.status.success());
    let trained = common::stdout(&out);
    assert!(trained.contains("W[0] = ") && !trained.contains("W[0] = 0\n"));
}

#[test]
fn minibatches_shuffle_by_seed_and_frozen_parameters_stay() {
    let src =
        "Example : 6\nX : real[Example, 2]\nX = [[1, 0], [0, 1], [1, 1], [2, 1], [1, 2], [0, 2]]\n\
        Y : real[Example]\nY = [1, 2, 3, 4, 5, 4]\nW : real[2]\nC ~ ones\nC : real[1]\n\
        Loss = (W[i] X[e, i] C[0] - Y[e])^2\nW?\nC?\n";
    let dir = dir_with(src);
    let d = dir.path();
    let run = |seed: &str, out: &str| {
        let o = train(
            d,
            &[
                "--batch",
                "Example:4",
                "--shuffle",
                "--epochs",
                "3",
                "--lr",
                "0.05",
                "--seed",
                seed,
                "--freeze",
                "C",
                "--save",
                out,
            ],
        );
        assert!(o.status.success(), "{}", common::stderr(&o));
        common::stdout(&o)
    };
    let a = run("1", "a.safetensors");
    let b = run("1", "b.safetensors");
    let c = run("2", "c.safetensors");
    assert_eq!(a, b);
    assert_ne!(a, c, "another seed shuffles differently");
    assert!(a.contains("C[0] = 1\n"), "frozen C moved:\n{a}");
}

#[test]
fn log_plot_eval_and_gradient_check() {
    let dir = dir_with(&format!("{LINEAR}Fit = (P[e] - Y[e])^2 / 5\n"));
    let d = dir.path();
    let out = train(
        d,
        &[
            "--epochs",
            "4",
            "--lr",
            "0.1",
            "--log",
            "m.csv",
            "--plot",
            "loss.svg",
            "--eval",
            "Fit",
            "--lr-schedule",
            "cosine",
            "--warmup",
            "2",
            "--clip",
            "10",
        ],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let log = std::fs::read_to_string(d.join("m.csv")).unwrap();
    assert!(
        log.starts_with("step,epoch,loss,lr,examples_per_sec,Fit\n"),
        "{log}"
    );
    assert_eq!(log.lines().count(), 5);
    assert!(std::fs::read_to_string(d.join("loss.svg"))
        .unwrap()
        .contains("<svg"));
    let out = common::tl(d, &["train", "m.tl", "--check-grad"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    assert!(
        text.contains("W: worst relative error") && text.contains("B: worst relative error"),
        "{text}"
    );
    assert!(
        text.ends_with("gradient check passed: every worst relative error is within 1e-3\n"),
        "{text}"
    );
    // relu's kink at 0: the central difference reads 0.5 where the gradient is 0.
    common::write(d, "kink.tl", "W ~ zeros\nW : real[3]\nLoss = relu(W[i])\n");
    let out = common::tl(d, &["train", "kink.tl", "--check-grad"]);
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    assert!(
        text.ends_with("gradient check failed: W over the tolerance 1e-3\n"),
        "{text}"
    );
}

fn fails(dir: &Path, args: &[&str], code: &str) -> String {
    let out = train(dir, args);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(code), "expected {code}:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn bad_losses_and_parameters_are_errors() {
    let dir = dir_with("W : real[3]\nL[i] = W[i] W[i]\n");
    let err = fails(dir.path(), &["--loss", "L"], "E0801");
    assert!(err.contains("must be a real scalar"), "{err}");
    let err = fails(dir.path(), &[], "E0801");
    assert!(err.contains("`Loss` is not a tensor"), "{err}");
    let dir = dir_with("W ~ normal(0, 1)\nLoss = W[i] W[i]\n");
    let err = fails(dir.path(), &[], "E0202");
    assert!(err.contains("no inferable shape"), "{err}");
    let dir = dir_with(LINEAR);
    let err = fails(dir.path(), &["--clip=-1", "--momentum", "1.5"], "E0801");
    assert!(
        err.contains("--clip is -1") && err.contains("--momentum is 1.5"),
        "{err}"
    );
    fails(dir.path(), &["--freeze", "Nope"], "E0801");
    let err = fails(dir.path(), &["--freeze", "W", "--freeze", "B"], "E0801");
    assert!(err.contains("no parameters to train"), "{err}");
    let dir = dir_with("X = [1, 2]\nW : real[2]\nLoss = X[i] X[i]\nV = W[i]\n");
    let err = fails(dir.path(), &[], "E0801");
    assert!(
        err.contains("does not depend on any trainable parameter"),
        "{err}"
    );
    let dir = dir_with(LINEAR);
    fails(dir.path(), &["--batch", "Nope:2"], "E0801");
}

#[test]
fn a_non_finite_loss_stops_and_keeps_the_last_good_checkpoint() {
    let dir = dir_with("W ~ ones\nW : real[1]\nLoss = log(W[0])\n");
    let d = dir.path();
    let err = fails(
        d,
        &[
            "--optimizer",
            "sgd",
            "--lr",
            "0.6",
            "--steps",
            "10",
            "--save",
            "m.safetensors",
            "--save-every",
            "1",
        ],
        "E0801",
    );
    assert!(err.contains("at step 3"), "{err}");
    let out = common::tl(d, &["run", "m.tl", "--load", "m.safetensors"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
}

#[test]
fn a_checkpoint_of_another_shape_is_an_error() {
    let dir = dir_with("W : real[3]\nLoss = W[i] W[i]\nW?\n");
    let d = dir.path();
    assert!(train(d, &["--save", "m.safetensors"]).status.success());
    std::fs::write(d.join("m.tl"), "W : real[4]\nLoss = W[i] W[i]\nW?\n").unwrap();
    let err = fails(d, &["--load", "m.safetensors"], "E0802");
    assert!(err.contains("shape [3]"), "{err}");
    std::fs::write(d.join("bad.safetensors"), b"not a checkpoint").unwrap();
    fails(d, &["--load", "bad.safetensors"], "E0802");
}

#[test]
fn gnn_classifies_held_out_nodes_through_the_graph() {
    let s = trained("gnn_classifier", &["--epochs", "100", "--lr", "0.01"]);
    assert!(s["Accuracy"] >= 0.85, "{s:?}");
}

/// `tl explain --loss` prints the backward plan (routes, gradient contractions, frozen
/// parameters left out) and `tl train --decisions` the routes a step took, each as planned;
/// a loss that is no tensor is E0801 there too.
#[test]
fn explain_and_train_show_the_backward_routes() {
    let file = "examples/gnn_classifier.tl";
    let explained = |args: &[&str]| {
        let out = common::tl(
            root(),
            &[&["explain", file, "--loss", "Loss"], args].concat(),
        );
        assert!(out.status.success(), "{}", common::stderr(&out));
        common::stdout(&out)
    };
    let text = explained(&[]);
    for line in [
        "backward: d Loss / d W0, W1, B1, Wo, Bo, strata newest first",
        ": Agg: dense gradient contractions",
        "    d H: by the relation's tuples",
        "    d W0: ",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    // Frozen, W0 takes no gradient, and neither does what only it feeds (H, Agg, Mean).
    let text = explained(&["--freeze", "W0"]);
    assert!(
        text.contains("backward: d Loss / d W1, B1, Wo, Bo,"),
        "{text}"
    );
    assert!(
        text.contains("    d W1: ") && !text.contains("d Mean"),
        "{text}"
    );
    assert!(!text.contains(": Agg: dense gradient"), "{text}");
    let out = common::tl(root(), &["explain", file, "--loss", "Lost"]);
    assert!(
        common::stderr(&out).contains("E0801"),
        "{}",
        common::stderr(&out)
    );

    let out = common::tl(
        root(),
        &["train", file, "--steps", "3", "--decisions", "--quiet"],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let log = common::stderr(&out);
    assert_eq!(log.matches("backward routes at step").count(), 1, "{log}");
    assert!(
        log.contains("backward stratum 16: P: dense gradient contractions, as planned"),
        "{log}"
    );
    let routes = log.lines().filter(|l| l.starts_with("backward stratum"));
    assert!(
        routes.clone().count() >= 5 && routes.clone().all(|l| l.ends_with("as planned")),
        "{log}"
    );
}

#[test]
fn kg_embeddings_deduce_at_zero_temperature_and_rank_analogically() {
    let s = trained("kg_embeddings", &["--epochs", "150", "--lr", "0.02"]);
    assert_eq!(s["Known"], s["Facts"], "{s:?}");
    assert_eq!(s["RecoveredByRule"], s["HeldGrandparents"], "{s:?}");
    assert!(s["Hits3"] >= 0.4 && s["MRR"] >= 0.3, "{s:?}");
}

#[test]
fn tucker_decomposition_reconstructs_the_boolean_tensor() {
    let s = trained("tucker", &["--epochs", "400", "--lr", "0.05"]);
    assert_eq!(s["Wrong"], 0.0, "{s:?}");
    assert_eq!(s["Cells"], 15680.0);
}

#[test]
fn tiny_transformer_language_model_learns_its_text() {
    let s = trained(
        "tiny_lm",
        &[
            "--batch",
            "Window:12",
            "--shuffle",
            "--epochs",
            "30",
            "--lr",
            "0.01",
        ],
    );
    // Untrained, perplexity is about the vocabulary's 164 words.
    assert!(s["Perplexity"] < 10.0, "{s:?}");
}

#[test]
fn killing_the_process_mid_save_leaves_a_whole_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("m.tl"),
        "X : real[64, 64]\nX ~ normal(0, 1)\nW : real[256, 64]\nV : real[256, 256]\n\
         H[e, h] = tanh(W[h, i] X[e, i])\nLoss = (V[g, h] H[e, h])^2\n",
    )
    .unwrap();
    for wait_ms in [300u64, 700, 1100] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tl"))
            .args([
                "train",
                "m.tl",
                "--steps",
                "100000",
                "--save",
                "m.safetensors",
                "--save-every",
                "1",
                "--quiet",
            ])
            .current_dir(d)
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        child.kill().unwrap();
        child.wait().unwrap();
        if d.join("m.safetensors").exists() {
            let out = common::tl(d, &["run", "m.tl", "--load", "m.safetensors"]);
            assert!(out.status.success(), "{}", common::stderr(&out));
        }
    }
}

#[test]
fn training_is_bit_identical_for_every_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let save = |threads: &str| {
        let path = dir.path().join(format!("t{threads}.safetensors"));
        let out = common::tl(
            root(),
            &[
                "train",
                "examples/digits_mlp.tl",
                "--batch",
                "Example:128",
                "--shuffle",
                "--steps",
                "4",
                "--threads",
                threads,
                "--save",
                path.to_str().unwrap(),
                "--quiet",
            ],
        );
        assert!(out.status.success(), "{}", common::stderr(&out));
        std::fs::read(path).unwrap()
    };
    assert_eq!(save("1"), save("2"));
}

#[test]
fn complex_completes_kinship_and_its_rule_deduces_from_the_learned_relation() {
    let s = trained(
        "kinship",
        &["--set", "Dim=32", "--epochs", "40", "--lr", "0.05"],
    );
    assert!(s["MRR"] >= 0.7, "{s:?}");
    assert!(
        s["Hits1"] <= s["Hits3"] && s["Hits3"] <= s["Hits10"],
        "{s:?}"
    );
    assert_eq!(s["RuleTests"], 91.0, "{s:?}");
    assert!(
        s["RuleTest"] >= 10.0 && s["RuleHeld"] >= s["RuleTest"],
        "{s:?}"
    );
}

#[test]
fn complex_completes_umls_and_distmult_is_its_real_part() {
    let complex = trained(
        "umls",
        &["--set", "Dim=16", "--epochs", "30", "--lr", "0.05"],
    );
    assert!(complex["MRR"] >= 0.75, "{complex:?}");
    let distmult = trained(
        "umls",
        &[
            "--set",
            "Dim=16",
            "--set",
            "Complex=0",
            "--epochs",
            "30",
            "--lr",
            "0.05",
        ],
    );
    assert!(distmult["MRR"] >= 0.6, "{distmult:?}");
}

#[test]
fn kg_models_pass_the_gradient_check_at_a_small_size() {
    for example in ["kinship", "umls"] {
        let mut s = tensor_logic::Session::new();
        s.load_file(&root().join(format!("examples/{example}.tl")))
            .unwrap();
        let mut opts = tensor_logic::RunOptions::default();
        opts.settings.scalars = vec![("Dim".into(), 3.0)];
        let checks = s.check_gradients(&opts, "Loss", &[], 3).unwrap();
        assert_eq!(checks.len(), 6);
        for c in checks {
            assert!(c.passes(), "{example}: {c:?}");
        }
    }
}

/// A scratch copy of the character LM whose data is the first `windows` windows of Tiny
/// Shakespeare (the whole text's forward pass is too large for a test).
fn shakespeare_with(windows: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("examples/shakespeare_lm.tl"),
        dir.path().join("shakespeare_lm.tl"),
    )
    .unwrap();
    let npy = std::fs::read(root().join("examples/data/shakespeare_chars.npy")).unwrap();
    let header_len = u16::from_le_bytes([npy[8], npy[9]]) as usize;
    let rows = &npy[10 + header_len..][..windows * 65];
    let mut header =
        format!("{{'descr': '|u1', 'fortran_order': False, 'shape': ({windows}, 65), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(rows);
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/shakespeare_chars.npy"), out).unwrap();
    dir
}

const SMALL_LM: [&str; 10] = [
    "--set",
    "Layers=2",
    "--set",
    "Dim=32",
    "--set",
    "Heads=2",
    "--set",
    "HeadDim=16",
    "--set",
    "Hidden=64",
];

#[test]
fn character_language_model_learns_shakespeare_through_its_layer_index() {
    let dir = shakespeare_with(320);
    let log = dir.path().join("log.csv");
    let mut args = vec![
        "train",
        "shakespeare_lm.tl",
        "--quiet",
        "--batch",
        "Window:32",
    ];
    args.extend_from_slice(&SMALL_LM);
    args.extend_from_slice(&["--epochs", "2", "--lr", "0.01", "--log"]);
    args.push(log.to_str().unwrap());
    let out = common::tl(dir.path(), &args);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = std::fs::read_to_string(&log).unwrap();
    let losses: Vec<f64> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(2).unwrap().parse().unwrap())
        .collect();
    assert_eq!(losses.len(), 20);
    // Untrained, the loss is about ln 65 = 4.17 nats per character.
    assert!(losses[0] > 4.0 && losses[19] < 3.1, "{losses:?}");
}

#[test]
fn character_language_model_passes_the_gradient_check_at_a_small_size() {
    let dir = shakespeare_with(3);
    let mut s = tensor_logic::Session::new();
    s.load_file(&dir.path().join("shakespeare_lm.tl")).unwrap();
    let mut opts = tensor_logic::RunOptions::default();
    opts.settings.scalars = [
        ("Layers", 2.0),
        ("Dim", 4.0),
        ("Heads", 2.0),
        ("HeadDim", 2.0),
    ]
    .into_iter()
    .chain([("Hidden", 6.0)])
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    let checks = s.check_gradients(&opts, "Loss", &[], 4).unwrap();
    assert_eq!(checks.len(), 9);
    for c in checks {
        assert!(c.passes(), "{c:?}");
    }
}
