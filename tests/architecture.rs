//! Invariants of the pipeline that the compiler cannot check (docs/design.md): the reference
//! evaluator, the oracle every kernel is tested against, depends on none of them; the
//! modules it shares with the engine (values before evaluation, accumulation, fixpoint
//! checks) do not depend on the engine either.

use std::path::Path;

/// Modules of the fast engine and of planning.
const ENGINE: [&str; 7] = [
    "dense",
    "nest",
    "relational",
    "standard",
    "steps",
    "plan::",
    "plan;",
];

/// The `super::…` and `crate::…` paths a source file names, outside its tests.
fn paths(file: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(file)).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut out = Vec::new();
    for word in code.split(|c: char| c.is_whitespace() || "(){},<>&".contains(c)) {
        if word.starts_with("super::") || word.starts_with("crate::") {
            out.push(word.to_string());
        }
    }
    out
}

#[test]
fn the_reference_evaluator_imports_nothing_from_the_engine() {
    for file in [
        "src/eval/reference.rs",
        "src/eval/accumulate.rs",
        "src/eval/fixpoint.rs",
        "src/eval/initial.rs",
        "src/eval/stop.rs",
    ] {
        let found = paths(file);
        assert!(!found.is_empty() || file != "src/eval/reference.rs");
        for p in &found {
            for m in ENGINE {
                // The trait's `run` names the plan type it is handed (and ignores).
                let allowed = p == "crate::plan::Plan";
                assert!(
                    allowed || !p.contains(m),
                    "{file} depends on the engine through `{p}`"
                );
            }
        }
    }
}
