//! The language service on every program of the repository, at every few bytes: no question
//! an editor can ask makes it fail, and what it answers points inside the document.

use std::path::Path;
use tensor_logic::ide::{Analysis, LineIndex};

#[test]
fn every_question_at_every_place_of_every_program_is_answered() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["examples", "tests/datalog_suite", "tests/fuzz_regressions"] {
        for e in std::fs::read_dir(root.join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            if e.path().extension().is_some_and(|x| x == "tl") {
                files.push(e.path());
            }
        }
    }
    files.sort();
    assert!(files.len() > 40);
    for f in &files {
        let source = std::fs::read_to_string(f).unwrap_or_default();
        let dir = f.parent().unwrap_or(Path::new("."));
        let a = Analysis::new(&source, dir);
        let lines = LineIndex::new(&source);
        let inside = |s: tensor_logic::diagnostics::Span| s.start <= s.end && s.end <= source.len();
        for d in a.diagnostics() {
            assert!(d.span.is_none_or(inside), "{}: {d:?}", f.display());
        }
        assert!(a
            .symbols()
            .iter()
            .all(|s| inside(s.span) && inside(s.selection)));
        for at in (0..=source.len())
            .step_by(7)
            .filter(|&i| source.is_char_boundary(i))
        {
            let (line, col) = lines.position(&source, at);
            assert_eq!(
                lines.offset(&source, line, col),
                Some(at),
                "{}",
                f.display()
            );
            assert!(a.hover(at).is_none_or(|(s, _)| inside(s)));
            assert!(a.definition(at).into_iter().all(inside));
            assert!(a.references(at, true).into_iter().all(inside));
            let _ = a.completions(at);
            let _ = a.signature(at);
        }
    }
}
