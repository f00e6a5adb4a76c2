//! Syntax: lexer, parser and the AST with spans.

pub(crate) mod ast;
pub(crate) mod format;
pub(crate) mod lexer;
pub(crate) mod parser;

pub(crate) use parser::{parse, parse_query, Functions};
