//! Tokens of §2, with newlines inside `()`, `[]` and `{}` dropped so that the parser sees a
//! newline only where it may end a statement.

use crate::diagnostics::{codes, Diagnostic, Span};
use logos::Logos;

/// One token of Tensor Logic source.
#[derive(Logos, Clone, Debug, PartialEq)]
#[logos(skip r"[ \t\r\f]+")]
#[logos(skip r"#[^\n]*")]
pub(crate) enum Tok {
    /// Ends a statement outside brackets.
    #[token("\n")]
    Newline,
    /// Ends a statement.
    #[token(";")]
    Semi,
    /// Ends a rule or fact; marks a normalised index (`p'.`).
    #[token(".")]
    Dot,
    /// Separates indices, arguments and body literals.
    #[token(",")]
    Comma,
    /// `(`
    #[token("(")]
    LParen,
    /// `)`
    #[token(")")]
    RParen,
    /// `[`
    #[token("[")]
    LBracket,
    /// `]`
    #[token("]")]
    RBracket,
    /// `{`
    #[token("{")]
    LBrace,
    /// `}`
    #[token("}")]
    RBrace,
    /// The rule arrow in any of its three spellings.
    #[token(":-")]
    #[token("<-")]
    #[token("←")]
    Arrow,
    /// Declarations and slices.
    #[token(":")]
    Colon,
    /// Ends a query.
    #[token("?")]
    Question,
    /// Initialisation.
    #[token("~")]
    Tilde,
    /// `=`
    #[token("=")]
    Assign,
    /// `+=`
    #[token("+=")]
    PlusAssign,
    /// `max=`
    #[token("max=")]
    MaxAssign,
    /// `min=`
    #[token("min=")]
    MinAssign,
    /// `avg=`
    #[token("avg=")]
    AvgAssign,
    /// `==`
    #[token("==")]
    EqEq,
    /// `!=`
    #[token("!=")]
    NotEq,
    /// `<`
    #[token("<")]
    Lt,
    /// `<=`
    #[token("<=")]
    Le,
    /// `>`
    #[token(">")]
    Gt,
    /// `>=`
    #[token(">=")]
    Ge,
    /// `+`
    #[token("+")]
    Plus,
    /// `-`
    #[token("-")]
    Minus,
    /// `*`: the join written out, or a virtual index.
    #[token("*")]
    Star,
    /// `/`
    #[token("/")]
    Slash,
    /// `^`
    #[token("^")]
    Caret,
    /// `%`: the remainder.
    #[token("%")]
    Percent,
    /// Negation.
    #[token("not")]
    Not,
    /// A name.
    #[regex(r"[\p{L}_][\p{L}\p{N}_']*", |lex| Box::<str>::from(lex.slice()))]
    Ident(Box<str>),
    /// A number; `is_int` tells whether it was written without a fraction or exponent.
    #[regex(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?", number)]
    Number(Number),
    /// A string with its escapes resolved.
    #[regex(r#""([^"\\\n]|\\.)*""#, string)]
    Str(Box<str>),
}

/// A token and where it is. Offsets are 4 bytes so that a token of a long literal costs 32
/// bytes rather than 48 (source is limited to 4 GiB).
#[derive(Clone, Debug)]
pub(crate) struct Token {
    /// What was read.
    pub tok: Tok,
    start: u32,
    end: u32,
}

impl Token {
    /// Its bytes in the source.
    pub(crate) fn span(&self) -> Span {
        Span::new(self.start as usize, self.end as usize)
    }
}

/// A numeric literal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Number {
    /// Its value.
    pub value: f64,
    /// True when written as a plain integer (usable as an index).
    pub is_int: bool,
    /// A plain integer's exact value, where it has at most 39 digits (an index constant
    /// may be any i64, §8, which `value` cannot hold exactly past 2⁵³).
    pub int: Option<i128>,
}

fn number(lex: &mut logos::Lexer<Tok>) -> Option<Number> {
    let s = lex.slice();
    let value: f64 = s.parse().ok()?;
    let is_int = !s.contains(['.', 'e', 'E']);
    Some(Number {
        value,
        is_int,
        int: is_int.then(|| s.parse::<i128>().ok()).flatten(),
    })
}

fn string(lex: &mut logos::Lexer<Tok>) -> Option<Box<str>> {
    let s = lex.slice();
    let inner = &s[1..s.len() - 1];
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('"') => out.push('"'),
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out.into())
}

/// Splits source into tokens, reporting every invalid character or string.
pub(crate) fn lex(source: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let mut tokens = Vec::new();
    let mut errors = Vec::new();
    if u32::try_from(source.len()).is_err() {
        let what = "a program must be smaller than 4 GiB (put large data in a file)";
        errors.push(Diagnostic::error(codes::SYNTAX, Span::new(0, 0), what));
        return (tokens, errors);
    }
    let mut depth: usize = 0;
    for (result, range) in Tok::lexer(source).spanned() {
        let span = Span::new(range.start, range.end);
        match result {
            Ok(tok) => {
                match tok {
                    Tok::LParen | Tok::LBracket | Tok::LBrace => depth += 1,
                    Tok::RParen | Tok::RBracket | Tok::RBrace => depth = depth.saturating_sub(1),
                    Tok::Newline if depth > 0 => continue,
                    _ => {}
                }
                tokens.push(Token {
                    tok,
                    start: range.start as u32,
                    end: range.end as u32,
                });
            }
            Err(()) => {
                let text = &source[range.clone()];
                let what = if text.starts_with('"') {
                    "unterminated or malformed string".to_string()
                } else {
                    format!("unexpected character `{}`", text.escape_debug())
                };
                errors.push(Diagnostic::error(codes::SYNTAX, span, what));
            }
        }
    }
    (tokens, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<Tok> {
        lex(s).0.into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn accumulation_operators_win_over_names() {
        assert_eq!(
            kinds("Y max= A"),
            vec![
                Tok::Ident("Y".into()),
                Tok::MaxAssign,
                Tok::Ident("A".into())
            ]
        );
        assert_eq!(kinds("max(a")[0], Tok::Ident("max".into()));
    }

    #[test]
    fn newlines_inside_brackets_are_dropped() {
        let toks = kinds("A = [1,\n 2]\nB");
        assert_eq!(toks.iter().filter(|t| **t == Tok::Newline).count(), 1);
    }

    #[test]
    fn primes_and_arrows() {
        assert_eq!(kinds("p'")[0], Tok::Ident("p'".into()));
        assert_eq!(kinds("← <- :-"), vec![Tok::Arrow, Tok::Arrow, Tok::Arrow]);
    }

    #[test]
    fn numbers_keep_integer_flag_and_dot_ends_statement() {
        let toks = kinds("X = 3.");
        assert!(matches!(toks[2], Tok::Number(Number { is_int: true, .. })));
        assert_eq!(toks[3], Tok::Dot);
    }

    #[test]
    fn bad_characters_are_reported_not_panicked() {
        let (_, errs) = lex("A = $ \"open");
        assert_eq!(errs.len(), 2);
    }
}
