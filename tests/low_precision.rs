//! Narrow storage types (§4): what bf16, f16, fp8 (E4M3FN) and i8 tensors hold, checked
//! against conversions computed independently with ml_dtypes and NumPy
//! (`scripts/low_precision.py` wrote `tests/data/low_precision.tsv`); that each is stored in
//! its own width; and that products of narrow tensors, accumulated in f32 (exact integer sums
//! for i8), are exactly the reference evaluator's whenever the sums are exact.

use std::path::Path;
use tensor_logic::eval::{Engine, Reference, Standard};
use tensor_logic::tensor::{Dense, Storage};
use tensor_logic::{ElemType, RunOptions, Session, Tensor};

const TYPES: [(&str, ElemType); 4] = [
    ("bf16", ElemType::BF16),
    ("f16", ElemType::F16),
    ("fp8", ElemType::FP8),
    ("i8", ElemType::I8),
];

/// Equal as stored values: the same number, and the same sign for a floating-point zero.
fn same(a: f64, b: f64, elem: ElemType) -> bool {
    (a.is_nan() && b.is_nan())
        || (a == b
            && (elem == ElemType::I8 || a != 0.0 || a.is_sign_negative() == b.is_sign_negative()))
}

#[test]
fn conversions_match_ml_dtypes_and_numpy() {
    let table = std::fs::read_to_string("tests/data/low_precision.tsv").unwrap();
    let mut rows = 0;
    for line in table.lines().skip(1) {
        let cols: Vec<f64> = line.split('\t').map(|c| c.parse().unwrap()).collect();
        let value = cols[0];
        for (k, (name, elem)) in TYPES.iter().enumerate() {
            let want = cols[k + 1];
            // Building a tensor, storing one element and the type's own rounding agree.
            let built = Tensor::dense(*elem, vec![1], vec![value]).unwrap();
            let mut set = Tensor::zeros(*elem, vec![1]);
            set.set(&[0], value);
            for (how, got) in [
                ("built", built.value(&[0])),
                ("set", set.value(&[0])),
                ("round", elem.round(value)),
            ] {
                assert!(
                    same(got, want, *elem),
                    "{name} of {value:e} ({how}): {got:e}, want {want:e}"
                );
            }
        }
        rows += 1;
    }
    assert!(rows > 1000, "{rows} rows");
}

#[test]
fn each_type_is_stored_in_its_own_width() {
    let values = vec![1.0, -2.0, 3.5, 100.0];
    for (name, elem) in TYPES {
        let t = Tensor::dense(elem, vec![4], values.clone()).unwrap();
        let ok = matches!(
            (&t.storage, elem),
            (Storage::Dense(Dense::BF16(_)), ElemType::BF16)
                | (Storage::Dense(Dense::F16(_)), ElemType::F16)
                | (Storage::Dense(Dense::FP8(_)), ElemType::FP8)
                | (Storage::Dense(Dense::I8(_)), ElemType::I8)
        );
        assert!(ok, "{name}: {:?}", t.storage);
    }
    let t = Tensor::dense(ElemType::F32, vec![1], vec![0.1]).unwrap();
    assert!(matches!(t.storage, Storage::Dense(Dense::F32(_))));
}

/// `Y = X W` over `ty` tensors holding small integers, by `engine`.
fn product(
    ty: ElemType,
    name: &str,
    engine: &dyn Engine,
    (b, k, n): (usize, usize, usize),
) -> Vec<f64> {
    let src = format!(
        "B : {b}\nK : {k}\nN : {n}\nX : {name}[B, K]\nW : {name}[K, N]\nY : {name}[B, N]\n\
         Y[i, j] = X[i, l] W[l, j]\n"
    );
    let small = |i: usize| ((i * 7919) % 7) as f64 - 3.0;
    let mut s = Session::new();
    s.load_source("p.tl", &src, Path::new(".")).unwrap();
    s.bind(
        "X",
        &Tensor::dense(ty, vec![b, k], (0..b * k).map(small).collect()).unwrap(),
    );
    s.bind(
        "W",
        &Tensor::dense(ty, vec![k, n], (0..k * n).map(|i| small(i + 3)).collect()).unwrap(),
    );
    s.run_with(engine, &RunOptions::default()).unwrap();
    let y = s.tensor("Y").unwrap();
    assert!(matches!(y.storage, Storage::Dense(_)));
    assert_eq!(y.elem, ty);
    y.to_dense_values()
}

#[test]
fn narrow_products_equal_the_reference_when_sums_are_exact() {
    for (name, elem) in TYPES {
        for shape in [(3, 5, 4), (9, 300, 7), (2, 1100, 3)] {
            let fast = product(elem, name, &Standard, shape);
            let slow = product(elem, name, &Reference, shape);
            assert_eq!(fast, slow, "{name} {shape:?}");
            // And both are the type's rounding of the exact integer sums.
            let (b, k, n) = shape;
            let small = |i: usize| ((i * 7919) % 7) as f64 - 3.0;
            for i in 0..b {
                for j in 0..n {
                    let exact: f64 = (0..k)
                        .map(|l| elem.round(small(i * k + l)) * elem.round(small(l * n + j + 3)))
                        .sum();
                    assert_eq!(
                        fast[i * n + j],
                        elem.round(exact),
                        "{name} {shape:?} ({i}, {j})"
                    );
                }
            }
        }
    }
}
