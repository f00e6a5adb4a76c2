//! Tensor Logic: one engine where a Datalog rule and an einsum are the same tensor equation.
//!
//! The pipeline, one stage per module: [`syntax`] (lexer, parser, AST) → [`semantics`]
//! (names, domains, extents, types, safety, strata) → [`plan`] (how each stratum is evaluated)
//! → [`eval`] (engines; the reference evaluator is the oracle) → [`learn`] (gradients,
//! optimizers, training). [`Session`] ties them together for library users and the `tl` CLI.
//!
//! ```
//! use tensor_logic::{RunOptions, Session};
//! let mut s = Session::new();
//! s.load_source("family.tl", "Parent(Ann, Bob). Parent(Bob, Cid).\n\
//!     Anc(x, y) :- Parent(x, y).\nAnc(x, z) :- Anc(x, y), Parent(y, z).", std::path::Path::new(".")).unwrap();
//! s.run(&RunOptions::default()).unwrap();
//! assert_eq!(s.query("Anc(Ann, x)").unwrap(), vec!["Anc(Ann, Bob)", "Anc(Ann, Cid)"]);
//! ```

#![warn(missing_docs)]
// Diagnostics travel on the cold error path; boxing them would only add noise.
#![allow(clippy::result_large_err)]

pub mod diagnostics;
pub mod eval;
pub mod explain;
pub mod functions;
pub mod io;
pub mod learn;
pub mod output;
pub mod plan;
pub mod semantics;
mod session;
pub mod syntax;
pub mod tensor;
pub mod verify;

pub use diagnostics::{Diagnostic, Diagnostics};
pub use semantics::Settings;
pub use session::{RunOptions, Session};
pub use tensor::{ElemType, Tensor};
