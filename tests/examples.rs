//! Every bundled example runs and prints what NumPy computed independently
//! (`scripts/examples_expected.py` → `tests/expected/*.out`).

mod common;
use std::path::Path;

fn check(name: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = common::tl(root, &["run", &format!("examples/{name}.tl")]);
    assert!(out.status.success(), "{name}: {}", common::stderr(&out));
    let expected =
        std::fs::read_to_string(root.join(format!("tests/expected/{name}.out"))).unwrap();
    if let Err(e) = common::compare(&expected, &common::stdout(&out)) {
        panic!("{name}: {e}");
    }
}

#[test]
fn family_datalog() {
    check("family");
}

#[test]
fn perceptron() {
    check("perceptron");
}

#[test]
fn mlp_layers_and_index_recursion() {
    check("mlp");
}

#[test]
fn rnn_virtual_index() {
    check("rnn");
}

#[test]
fn cnn_convolution_and_pooling() {
    check("cnn");
}

#[test]
fn gnn_forward() {
    check("gnn");
}

#[test]
fn transformer_forward() {
    check("transformer");
}

#[test]
fn kernel_machines() {
    check("kernels");
}

#[test]
fn bayesian_network() {
    check("bayes");
}

#[test]
fn embedding_space_reasoning() {
    check("embeddings");
}

#[test]
fn text_file() {
    check("text");
}

/// Every program of `examples/`, `tests/conformance/` and the fuzz regressions runs as
/// planned: the decision log of the standard engine names, for every stratum, the kernel its
/// plan chose (a kernel that declined at run time would show there as the loop nests, with
/// its reason).
#[test]
fn every_stratum_runs_as_planned() {
    use tensor_logic::eval::{Ran, Standard};
    use tensor_logic::{RunOptions, Session};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut programs = Vec::new();
    for dir in ["examples", "tests/fuzz_regressions"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            programs.push(e.unwrap().path());
        }
    }
    for e in std::fs::read_dir(root.join("tests/conformance")).unwrap() {
        programs.push(e.unwrap().path().join("main.tl"));
    }
    // The character LM's forward pass over all of Tiny Shakespeare holds about 10 GB; it
    // runs in minibatches (tests/training.rs).
    programs.retain(|p| {
        p.extension().is_some_and(|x| x == "tl")
            && p.exists()
            && !p.to_string_lossy().contains("shakespeare")
    });
    programs.sort();
    assert!(programs.len() > 30, "{programs:?}");
    for path in programs {
        let mut s = Session::new();
        if s.load_file(&path).is_err() {
            continue;
        }
        // Programs that are errors (conformance error cases, fuzz findings) have no run.
        // Fuzz findings run as their test runs them, with `--max-iters 50`: some recur
        // without end, and the default would take them to the memory budget.
        let mut options = RunOptions::default();
        if path.to_string_lossy().contains("fuzz_regressions") {
            options.settings.max_iters = 50;
        }
        if s.run_with(&Standard, &options).is_err() {
            continue;
        }
        let plan = s.plan().unwrap();
        for d in s.decisions() {
            let planned = Ran::planned(&plan.strata[d.stratum].kernel);
            assert_eq!(
                d.ran,
                planned,
                "{}: stratum {} ran on {:?}, planned {:?} ({:?})",
                path.display(),
                d.stratum,
                d.ran,
                planned,
                d.reason
            );
        }
    }
}

#[test]
fn roads_shortest_distances() {
    check("roads");
}
