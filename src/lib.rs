//! Tensor Logic: one engine where a Datalog rule and an einsum are the same tensor equation.
//!
//! The pipeline, one stage per module: `syntax` (lexer, parser, AST) → [`semantics`]
//! (names, domains, extents, types, safety, strata) → `plan` ([`Plan`]: how each stratum is evaluated)
//! → [`eval`] (engines; the reference evaluator is the oracle) → [`learn`] (gradients,
//! optimizers, training). [`Session`] ties them together for library users and the `tl` CLI.
//!
//! The public surface is the session and its options, tensor values, diagnostics, the
//! engines (with their decision log), learning, and the checked program for inspection;
//! parsing, planning, `explain`, files and output are internal, reached through
//! [`Session`].
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
#![warn(unreachable_pub)]
// Diagnostics travel on the cold error path; boxing them would only add noise.
#![allow(clippy::result_large_err)]

pub mod diagnostics;
pub mod eval;
pub(crate) mod explain;
mod explain_backward;
mod explain_dense;
pub(crate) mod functions;
pub mod ide;
pub(crate) mod io;
pub mod learn;
pub(crate) mod output;
pub(crate) mod plan;
pub mod semantics;
mod session;
pub(crate) mod string_rounds;
pub(crate) mod syntax;
pub mod tensor;
pub mod verify;
pub mod why;

pub use diagnostics::{Diagnostic, Diagnostics, Location, Severity};
pub use functions::{Builtin, Structural, UserFunction};
pub use plan::backward::{Backward, Route};
pub use plan::Plan;
pub use semantics::Settings;
pub use session::{Cell, Change, Changes, Row, RunOptions, Session};
pub use syntax::ast::{ArithOp, BinOp, CmpOp};
pub use tensor::{ElemType, Tensor};
