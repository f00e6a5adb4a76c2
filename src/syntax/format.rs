//! `tl fmt`: one canonical layout of a program, from its tokens alone.
//!
//! The layout is decided token by token, line by line: the line structure stays as written
//! (a newline outside brackets ends a statement, so moving one would change the program),
//! spacing between tokens follows fixed rules, continuation lines inside brackets are
//! indented four spaces, runs of blank lines become one, and comments stay on their lines.
//! Working on tokens rather than the syntax tree is what makes it safe: the formatted text
//! is lexed again and must give the same tokens, or nothing is written.

use super::lexer::{lex, Tok};
use crate::diagnostics::{codes, Diagnostic};
use logos::Logos;

/// Continuation lines (inside brackets opened on an earlier line) start with this.
const CONTINUATION: &str = "    ";

/// The program laid out canonically; the syntax errors that stop formatting otherwise (a
/// program that does not parse has no layout to keep).
pub(crate) fn format(source: &str, functions: super::Functions) -> Result<String, Vec<Diagnostic>> {
    let (_, errors) = super::parse(source, functions);
    if !errors.is_empty() {
        return Err(errors);
    }
    let formatted = layout(source);
    if significant(source) != significant(&formatted) {
        // A spacing rule glued or split tokens: a bug here, never a reason to change meaning.
        let what = "formatting would change this program's tokens; it was left as it is";
        return Err(vec![Diagnostic::global(codes::SYNTAX, what)]);
    }
    Ok(formatted)
}

/// The tokens that carry meaning, with each run of newlines counted once.
fn significant(source: &str) -> Vec<Tok> {
    let mut out: Vec<Tok> = Vec::new();
    for t in lex(source).0 {
        if t.tok == Tok::Newline && matches!(out.last(), None | Some(Tok::Newline)) {
            continue;
        }
        out.push(t.tok);
    }
    if out.last() == Some(&Tok::Newline) {
        out.pop();
    }
    out
}

/// Where the layout is in the program while it walks the lines.
#[derive(Default)]
struct Cursor {
    /// Brackets open at this point.
    depth: usize,
    /// The last token written, and whether it was a unary operator.
    prev: Option<(Tok, bool)>,
    /// Blank lines seen since the last written line.
    blanks: usize,
}

fn layout(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut at = Cursor::default();
    for line in source.split('\n') {
        let text = format_line(line, &mut at);
        if text.is_empty() {
            at.blanks += 1;
            continue;
        }
        if at.blanks > 0 && !out.is_empty() {
            out.push('\n');
        }
        at.blanks = 0;
        out.push_str(&text);
        out.push('\n');
    }
    out
}

/// One source line laid out; empty for a blank line.
fn format_line(line: &str, at: &mut Cursor) -> String {
    let mut out = String::new();
    if at.depth > 0 {
        out.push_str(CONTINUATION);
    }
    let mut first = true;
    let mut end = 0;
    for (tok, range) in Tok::lexer(line).spanned() {
        // `format` checked that the program lexes, so every token is whole.
        let Ok(tok) = tok else { continue };
        end = range.end;
        let unary = is_unary(&tok, at.prev.as_ref().map(|p| &p.0));
        if !first && spaced(at.prev.as_ref(), &tok, at.depth) {
            out.push(' ');
        }
        first = false;
        out.push_str(spelling(&tok, &line[range]));
        match tok {
            Tok::LParen | Tok::LBracket | Tok::LBrace => at.depth += 1,
            Tok::RParen | Tok::RBracket | Tok::RBrace => at.depth = at.depth.saturating_sub(1),
            _ => {}
        }
        at.prev = Some((tok, unary));
    }
    let comment = line[end..].trim();
    match (comment.is_empty(), first) {
        (true, true) => return String::new(),
        (false, true) => out.push_str(comment),
        (false, false) => {
            out.push_str("  ");
            out.push_str(comment);
        }
        (true, false) => {}
    }
    out
}

/// How a token is written: the arrow always as `:-`, everything else as in the source.
fn spelling<'s>(tok: &Tok, text: &'s str) -> &'s str {
    match tok {
        Tok::Arrow => ":-",
        _ => text,
    }
}

/// Whether `-`, `+` or `*` stands before its operand alone (`-1`, `X[*t]`), which is the
/// case after anything that cannot end an operand.
fn is_unary(tok: &Tok, prev: Option<&Tok>) -> bool {
    if !matches!(tok, Tok::Minus | Tok::Plus | Tok::Star) {
        return false;
    }
    !matches!(
        prev,
        Some(
            Tok::Ident(_)
                | Tok::Number(_)
                | Tok::Str(_)
                | Tok::RParen
                | Tok::RBracket
                | Tok::RBrace
        )
    )
}

/// Whether a space goes between the previous token and `next`.
fn spaced(prev: Option<&(Tok, bool)>, next: &Tok, depth: usize) -> bool {
    let Some((prev, prev_unary)) = prev else {
        return false;
    };
    if *prev_unary {
        return false;
    }
    match (prev, next) {
        (
            _,
            Tok::Comma
            | Tok::RParen
            | Tok::RBracket
            | Tok::RBrace
            | Tok::Question
            | Tok::Semi
            | Tok::Dot,
        ) => false,
        (Tok::LParen | Tok::LBracket | Tok::LBrace, _) => false,
        (Tok::Caret, _) | (_, Tok::Caret) => false,
        // A colon inside brackets is a slice (`X[1:3]`); outside, a declaration.
        (Tok::Colon, _) | (_, Tok::Colon) => depth == 0,
        // A call or an access: the name and its bracket stay together.
        (Tok::Ident(_), Tok::LParen | Tok::LBracket) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(s: &str) -> String {
        format(s, crate::functions::BUILTINS).unwrap_or_else(|e| panic!("{s:?}: {e:?}"))
    }

    #[test]
    fn spacing_follows_the_rules() {
        assert_eq!(
            fmt("Anc(x,z):-Anc(x,y),Parent(y,z)."),
            "Anc(x, z) :- Anc(x, y), Parent(y, z).\n"
        );
        assert_eq!(fmt("Y[i]=A[i,j]*B[j]+ -1"), "Y[i] = A[i, j] * B[j] + -1\n");
        assert_eq!(fmt("V(Lo,-4).V(Hi , 4)."), "V(Lo, -4). V(Hi, 4).\n");
        assert_eq!(
            fmt("P[p,d]=sin(p/L^(d/De))"),
            "P[p, d] = sin(p / L^(d / De))\n"
        );
        assert_eq!(
            fmt("C[h,p,p'.]=softmax(Q[h,p,k])"),
            "C[h, p, p'.] = softmax(Q[h, p, k])\n"
        );
        assert_eq!(fmt("W:real[N,4]"), "W : real[N, 4]\n");
        assert_eq!(fmt("H(x)<-B(x), not C(x)."), "H(x) :- B(x), not C(x).\n");
        assert_eq!(fmt("Y[t] = X[*t+1]"), "Y[t] = X[*t + 1]\n");
    }

    #[test]
    fn comments_blank_lines_and_continuations_are_kept() {
        let src = "\n\n# top\nA = [1,   # one\n  2]\n\n\n\nB = A   \n# end\n\n";
        let out = fmt(src);
        assert_eq!(out, "# top\nA = [1,  # one\n    2]\n\nB = A\n# end\n");
        assert_eq!(fmt(&out), out);
    }

    #[test]
    fn formatting_never_glues_tokens_into_others() {
        // `x < -1` must not become the arrow `x<-1`, nor `max =` the operator `max=`.
        assert_eq!(fmt("H(x) :- N(x), x < -1."), "H(x) :- N(x), x < -1.\n");
        let src = "max = 2\nY = max";
        assert_eq!(significant(&fmt(src)), significant(src));
    }

    #[test]
    fn a_program_that_does_not_parse_is_not_formatted() {
        let errors = format("A = [1, 2\n", crate::functions::BUILTINS).unwrap_err();
        assert_eq!(errors[0].code, codes::SYNTAX);
    }

    /// Statements as tokens, each valid on its own line.
    const STATEMENTS: &[&[&str]] = &[
        &[
            "Parent", "(", "Ann", ",", "-", "2", ")", ".", "Parent", "(", "Bob", ",", "3", ")", ".",
        ],
        &[
            "H", "(", "x", ",", "y", ")", ":-", "B", "(", "x", ",", "z", ")", ",", "not", "C", "(",
            "z", ",", "y", ")", ",", "x", "!=", "y", ".",
        ],
        &[
            "Y", "[", "i", "]", "=", "A", "[", "i", ",", "j", "]", "*", "B", "[", "j", "]", "+",
            "sig", "(", "X", "[", "i", "]", ")", "^", "2", "-", "-", "1",
        ],
        &["W", ":", "real", "[", "N", ",", "4", "]"],
        &["H", "(", "Ann", ",", "x", ")", "?"],
        &["# a comment"],
        &[
            "S", "[", "t", "]", "max=", "X", "[", "*", "t", "+", "1", "]", "/", "(", "2", "+", "N",
            ")",
        ],
        &[
            "M", "=", "[", "[", "1", ",", "2.5", "]", ",", "\n", "[", "3", ",", "4e-1", "]", "]",
        ],
        &[
            "C", "[", "p", ",", "q", ".", "]", "=", "softmax", "(", "Q", "[", "p", "]", "K", "[",
            "q", "]", ")",
        ],
        &[
            "N", "=", "3", ";", "L", "(", "x", ")", "<-", "E", "(", "x", ",", "\"a b\"", ")", ",",
            "x", "<", "-", "1", ".",
        ],
    ];

    /// Statement lines joined with the spacing choices given (none, a space, two, a tab),
    /// except where no space would glue two tokens into others.
    fn spaced_out(which: &[usize], spacing: &[usize]) -> String {
        let mut out = String::new();
        let mut k = 0;
        for &w in which {
            let toks = STATEMENTS[w % STATEMENTS.len()];
            for (i, t) in toks.iter().enumerate() {
                if *t == "\\n" {
                    out.push('\n');
                    continue;
                }
                if i > 0 {
                    let gap = ["", " ", "  ", "\t"][spacing[k % spacing.len()] % 4];
                    k += 1;
                    let glued = format!("{}{gap}{t}", toks[i - 1]);
                    let apart = format!("{} {t}", toks[i - 1]);
                    out.push_str(match significant(&glued) == significant(&apart) {
                        true => gap,
                        false => " ",
                    });
                }
                out.push_str(t);
            }
            out.push('\n');
            // Blank lines are layout that is kept (a run of them as one).
            if w % 3 == 0 {
                out.push_str("\n \n");
            }
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn the_layout_depends_on_the_tokens_alone(
            which in proptest::collection::vec(0usize..10, 1..8),
            spacing in proptest::collection::vec(0usize..4, 1..64),
        ) {
            let loose = spaced_out(&which, &spacing);
            let tidy = spaced_out(&which, &[1]);
            let a = format(&loose, crate::functions::BUILTINS).map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{loose}: {e:?}")))?;
            let b = format(&tidy, crate::functions::BUILTINS).map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{tidy}: {e:?}")))?;
            proptest::prop_assert_eq!(&a, &b);
            proptest::prop_assert_eq!(format(&a, crate::functions::BUILTINS).ok(), Some(a.clone()));
            proptest::prop_assert_eq!(significant(&a), significant(&loose));
        }
    }
}
