//! The library API (SPEC §16): everything the CLI does, from Rust, without files.

use std::path::Path;
use tensor_logic::tensor::Storage;
use tensor_logic::{Cell, ElemType, RunOptions, Session, Tensor};

fn session(src: &str) -> Session {
    let mut s = Session::new();
    s.load_source("mem.tl", src, Path::new(".")).unwrap();
    s
}

#[test]
fn bind_dense_tensors_run_and_read_back() {
    let mut s = session("X : real[2, 3]\nW : real[3]\nY[i] = X[i, j] W[j]\n");
    s.bind(
        "X",
        &Tensor::dense(
            ElemType::F64,
            vec![2, 3],
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        )
        .unwrap(),
    );
    s.bind(
        "W",
        &Tensor::dense(ElemType::F64, vec![3], vec![1.0, 0.0, -1.0]).unwrap(),
    );
    s.run(&RunOptions::default()).unwrap();
    let y = s.tensor("Y").unwrap();
    assert_eq!(y.shape, vec![2]);
    assert_eq!(y.to_dense_values(), vec![-2.0, -2.0]);
    assert!(matches!(y.storage, Storage::Dense(_)));
}

#[test]
fn bind_relations_from_rows_and_query() {
    let mut s = session("Path(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n");
    let rows: Vec<Vec<String>> = [("a", "b"), ("b", "c"), ("c", "d")]
        .iter()
        .map(|(x, y)| vec![x.to_string(), y.to_string()])
        .collect();
    s.bind_rows("Edge", &rows);
    s.run(&RunOptions::default()).unwrap();
    assert_eq!(
        s.query("Path(\"b\", x)").unwrap(),
        vec!["Path(\"b\", \"c\")", "Path(\"b\", \"d\")"]
    );
    assert_eq!(s.query("Path(\"d\", \"a\")?").unwrap(), vec!["false"]);
    assert!(s.query("Path(").is_err());
}

#[test]
fn registered_functions_are_called_by_name() {
    let mut s = Session::new();
    s.register_function(
        "swish",
        |x| x / (1.0 + (-x).exp()),
        |x| {
            let sg = 1.0 / (1.0 + (-x).exp());
            sg + x * sg * (1.0 - sg)
        },
    );
    s.load_source(
        "f.tl",
        "X = [0, 1, -1]\nY[i] = swish(X[i])\nY?\n",
        Path::new("."),
    )
    .unwrap();
    let lines = s.run(&RunOptions::default()).unwrap();
    assert_eq!(lines[0], "Y[0] = 0");
    assert_eq!(lines[1], "Y[1] = 0.7310586");
}

#[test]
fn unregistered_functions_are_errors_with_locations() {
    let mut s = session("X = [0, 1]\nY[i] = swish(X[i])\n");
    let err = s.run(&RunOptions::default()).unwrap_err();
    let text = err.render("f.tl", "X = [0, 1]\nY[i] = swish(X[i])\n");
    assert!(
        text.contains("error[E0102]: unknown function `swish`"),
        "{text}"
    );
    assert!(text.contains("f.tl:2:8"), "{text}");
}

#[test]
fn parse_errors_come_back_as_diagnostics() {
    let mut s = Session::new();
    let err = s
        .load_source("bad.tl", "A = [1,\nB = ]\n", Path::new("."))
        .unwrap_err();
    assert!(!err.0.is_empty());
    assert!(err.0.iter().all(|d| d.code == "E0001"));
}

#[test]
fn relations_stay_sparse_at_ten_thousand_nodes() {
    let mut src = String::new();
    for i in 0..10_000 {
        src.push_str(&format!("Edge({i}, {}).\n", (i + 1) % 10_000));
    }
    src.push_str(
        "Back(y, x) :- Edge(x, y).\nTwo(x, z) :- Edge(x, y), Edge(y, z).\nNext(y) :- Edge(5, y).\n",
    );
    let mut s = session(&src);
    s.run(&RunOptions::default()).unwrap();
    for (name, count) in [
        ("Edge", 10_000),
        ("Back", 10_000),
        ("Two", 10_000),
        ("Next", 1),
    ] {
        let t = s.tensor(name).unwrap();
        match &t.storage {
            Storage::Relation(r) => assert_eq!(r.len(), count, "{name}"),
            other => panic!("{name}: a relation must be stored as tuples, not {other:?}"),
        }
    }
    // Integer columns that no dense tensor indexes are open (§8): they have no extent.
    let open = tensor_logic::tensor::MAX_EXTENT;
    assert_eq!(s.tensor("Back").unwrap().shape, vec![open, open]);
    assert_eq!(s.tensor("Two").unwrap().value(&[9_999, 1]), 1.0);
}

#[test]
fn running_after_a_failed_load_reports_the_load_errors() {
    let mut s = Session::new();
    assert!(s
        .load_source("bad.tl", "A = [1, 2]\nB = ]\n", Path::new("."))
        .is_err());
    let err = s.run(&RunOptions::default()).unwrap_err();
    assert!(err.0.iter().all(|d| d.code == "E0001"), "{err:?}");
    // A file that cannot be read leaves no earlier program behind either.
    let mut s = session("A = [1]\nA?\n");
    assert!(s.load_file(Path::new("/nonexistent/x.tl")).is_err());
    let err = s.run(&RunOptions::default()).unwrap_err();
    assert_eq!(err.0[0].code, "E0501");
    // A good load clears them.
    s.load_source("ok.tl", "A = [1]\nA?\n", Path::new("."))
        .unwrap();
    assert_eq!(s.run(&RunOptions::default()).unwrap(), vec!["A[0] = 1"]);
}

#[test]
fn binding_a_tensor_the_program_lacks_is_an_error() {
    let mut s = session("X : real[2]\nY[i] = 2 X[i]\n");
    s.bind(
        "Z",
        &Tensor::dense(ElemType::F64, vec![2], vec![1.0, 2.0]).unwrap(),
    );
    let err = s.run(&RunOptions::default()).unwrap_err();
    assert!(
        err.0
            .iter()
            .any(|d| d.code == "E0101" && d.message.contains("`Z`")),
        "{err:?}"
    );
}

#[test]
fn evaluating_without_a_called_function_registered_is_an_error() {
    use tensor_logic::eval::{Engine, EvalOptions, Reference, Standard};
    let mut s = Session::new();
    s.register_function("swish", |x| x, |_| 1.0);
    s.load_source("f.tl", "X = [0, 1]\nY[i] = swish(X[i])\n", Path::new("."))
        .unwrap();
    let checked = s.check(&Default::default()).unwrap().clone();
    for engine in [&Standard as &dyn Engine, &Reference] {
        let err = engine
            .evaluate(&checked, &EvalOptions::default())
            .unwrap_err();
        assert_eq!(err.0[0].code, "E0102", "{}", engine.name());
    }
}

#[test]
fn options_have_the_cli_defaults() {
    let t = tensor_logic::learn::train::TrainOptions::default();
    assert_eq!((t.loss.as_str(), t.epochs), ("Loss", 1));
    let c = tensor_logic::learn::optim::Config::default();
    assert_eq!(
        (c.kind, c.lr),
        (tensor_logic::learn::optim::Kind::Adam, 1e-3)
    );
}

#[test]
fn diagnostics_display_their_file_line_and_column() {
    let mut s = session("X = [0, 1]\nY[i] = swish(X[i])\n");
    let err = s.run(&RunOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("mem.tl:2:8: error[E0102]"), "{text}");
    let mut s = Session::new();
    let err = s
        .load_source("bad.tl", "A = [1, 2]\nB = ]\n", Path::new("."))
        .unwrap_err();
    assert!(
        err.to_string().starts_with("bad.tl:2:5: error[E0001]"),
        "{err}"
    );
}

#[test]
fn rows_come_back_as_host_values() {
    let mut s = session(
        "Edge(-1, 2). Edge(2, 3).\nPath(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n\
         Price(Tea, 2.5).\nDeg[x] = Edge(x, y)\n",
    );
    assert!(s.rows("Path").is_err(), "nothing to read before a run");
    s.run(&RunOptions::default()).unwrap();
    let int = |v: i64| Cell::Int(v);
    assert_eq!(
        s.query_rows("Path(-1, x)").unwrap(),
        vec![(vec![int(-1), int(2)], None), (vec![int(-1), int(3)], None)]
    );
    assert_eq!(
        s.rows("Price").unwrap(),
        vec![(vec![Cell::Symbol("Tea".into()), Cell::Real(2.5)], None)]
    );
    let deg = s.rows("Deg").unwrap();
    assert!(deg.contains(&(vec![int(2)], Some(1.0))), "{deg:?}");
    assert!(s.query_rows("Path(7, x)").unwrap().is_empty());
    assert!(s.rows("Nope").is_err());
}

#[test]
fn binding_new_values_of_the_same_shape_reuses_the_plan_and_is_exact() {
    let mut s = session("X : real[3]\nY[i] = X[i] * 2 + Z[i]\nZ = [1, 1, 1]\nT = Y[i]\n");
    let x = |v: Vec<f64>| Tensor::dense(ElemType::F32, vec![v.len()], v).unwrap();
    let total = |s: &Session| s.tensor("T").unwrap().to_dense_values()[0];
    s.bind("X", &x(vec![1.0, 2.0, 3.0]));
    s.run(&RunOptions::default()).unwrap();
    assert_eq!(total(&s), 15.0);
    s.bind("X", &x(vec![0.0, 0.0, 0.5]));
    s.run(&RunOptions::default()).unwrap();
    assert_eq!(total(&s), 4.0, "the new values are used");
    s.bind("X", &x(vec![1.0, 1.0, 1.0, 1.0]));
    assert!(
        s.run(&RunOptions::default()).is_err(),
        "another shape is checked again: it does not fit the declaration"
    );
    s.bind("X", &x(vec![2.0, 2.0, 2.0]));
    s.run(&RunOptions::default()).unwrap();
    assert_eq!(total(&s), 15.0);
}

/// Incremental mode relies on this: a commit's inserted facts are bound as rows, beside the
/// facts the program writes.
#[test]
fn bound_rows_add_to_a_relations_facts_written_in_the_program() {
    let mut s = Session::new();
    s.load_source(
        "p.tl",
        "E(A, B). E(B, C).\nP(x, y) :- E(x, y).\n",
        std::path::Path::new("."),
    )
    .unwrap();
    s.bind_rows("E", &[vec!["C".into(), "D".into()]]);
    s.run(&RunOptions::default()).unwrap();
    assert_eq!(
        s.query("P(x, y)").unwrap(),
        vec!["P(A, B)", "P(B, C)", "P(C, D)"]
    );
}
