//! Syntax: lexer, parser and the AST with spans.

pub mod ast;
pub mod format;
pub mod lexer;
pub mod parser;

pub use parser::{parse, parse_query};
