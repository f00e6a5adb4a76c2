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
