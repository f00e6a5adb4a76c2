//! Located diagnostics with stable codes (SPEC §15), rendered like rustc's.
//!
//! Every stage reports problems as [`Diagnostic`]s instead of failing fast, so that a user sees
//! all errors in a file at once. Codes are stable: they are listed in `docs/errors.md`.

use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label};
use codespan_reporting::files::{Files, SimpleFile};

mod excerpt;
use codespan_reporting::term::{self, Chars, Config};

/// A byte range in the program source; kept `Copy` so that AST nodes can carry it cheaply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Span {
    /// A span from `start` to `end` (byte offsets).
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }

    /// The smallest span covering both, for nodes built from several tokens.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// Stable error codes; `docs/errors.md` explains each one.
pub mod codes {
    /// Unexpected or invalid token.
    pub const SYNTAX: &str = "E0001";
    /// Unknown tensor name.
    pub const UNKNOWN_TENSOR: &str = "E0101";
    /// Unknown function name.
    pub const UNKNOWN_FUNCTION: &str = "E0102";
    /// A tensor used with different numbers of indices.
    pub const ARITY: &str = "E0103";
    /// A tensor both Boolean and real, or otherwise ill-typed.
    pub const TYPE: &str = "E0104";
    /// A statement form used where it is not allowed (e.g. a fact with variables).
    pub const FORM: &str = "E0105";
    /// Two dense axes disagree on the extent of one index.
    pub const EXTENT_MISMATCH: &str = "E0201";
    /// The range of an index variable cannot be inferred.
    pub const UNBOUND_INDEX: &str = "E0202";
    /// A write outside a declared extent, or an index outside a domain.
    pub const OUT_OF_DOMAIN: &str = "E0203";
    /// Data disagrees with a declaration.
    pub const DECLARATION: &str = "E0204";
    /// An unsafe variable in a rule head.
    pub const UNSAFE: &str = "E0301";
    /// Recursion through negation.
    pub const NOT_STRATIFIED: &str = "E0302";
    /// Equations of one tensor mix accumulation families.
    pub const MIXED_ACCUMULATION: &str = "E0303";
    /// A recursive component did not converge within `--max-iters`.
    pub const DIVERGED: &str = "E0401";
    /// An extent kept growing for `--max-iters` iterations.
    pub const UNBOUNDED_GROWTH: &str = "E0402";
    /// Evaluation ended early: `--timeout` ran out, or it was interrupted (Ctrl-C).
    pub const STOPPED: &str = "E0403";
    /// The differential dataflow failed: a worker stopped, or a peer process could not be
    /// reached or ended mid-run.
    pub const DATAFLOW: &str = "E0404";
    /// A commit that the running incremental evaluation cannot take.
    pub const COMMIT: &str = "E0405";
    /// A value that a rule computes into an integer column leaves the i64 range, or a
    /// column would hold more than 2³² distinct values (§8).
    pub const VALUE_OVERFLOW: &str = "E0406";
    /// An integer this implementation cannot hold exactly where it is used: a number in an
    /// expression beyond ±2⁵³, or an integer `min=`/`max=` element past it in the
    /// differential dataflow (values pass through f64 there).
    pub const INEXACT_INTEGER: &str = "E0407";
    /// A file could not be read or written.
    pub const FILE: &str = "E0501";
    /// A file row does not fit the tensor.
    pub const FILE_ROW: &str = "E0502";
    /// A tensor would need more memory than `--max-memory`.
    pub const MEMORY: &str = "E0601";
    /// A query that cannot be answered.
    pub const QUERY: &str = "E0701";
    /// Training cannot proceed: no scalar loss, a non-finite loss, a bad option value.
    pub const TRAIN: &str = "E0801";
    /// A checkpoint that does not fit the program (shapes, names, unreadable contents).
    pub const CHECKPOINT: &str = "E0802";
    /// Warning: a read with index arithmetic that is out of range at every point, so its
    /// equation gives no element.
    pub const EMPTY_READ: &str = "W0201";
    /// Warning: a rule variable that occurs only in negated atoms (write `_`).
    pub const NEGATED_ONLY: &str = "W0301";
    /// Warning: a tensor defined by several `=` statements, which §7 adds together.
    pub const DEFINED_TWICE: &str = "W0302";
    /// Warning: a lowercase query position (a variable) named like a constant of its domain.
    pub const QUERY_VARIABLE_LIKE_CONSTANT: &str = "W0701";
}

/// One problem found in a program or its data, pointing at the source that caused it.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    /// Stable code such as `E0201`.
    pub code: &'static str,
    /// Whether it stops the program (an error) or only points at a likely mistake.
    pub severity: Severity,
    /// One-line summary.
    pub message: String,
    /// Where the problem is; `None` for problems with no place in the source.
    pub span: Option<Span>,
    /// Text under the primary caret.
    pub label: String,
    /// Other places that explain the problem (the other tensor of a mismatch, say).
    pub secondary: Vec<(Span, String)>,
    /// Hints and notes printed after the snippet.
    pub notes: Vec<String>,
    /// The file, line and column of `span`, once known (the library's [`Session`] fills
    /// it in), for `Display`.
    ///
    /// [`Session`]: crate::Session
    pub location: Option<Location>,
}

/// How serious a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The program cannot run.
    Error,
    /// The program runs, but probably not as meant (a `W` code).
    Warning,
}

impl Severity {
    /// The word rustc prints: `error` or `warning`.
    pub fn word(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// A place in a named source file, counted from 1 (columns in characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file's name as given when it was loaded.
    pub file: String,
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1, in characters.
    pub column: usize,
}

impl Diagnostic {
    /// An error at `span`.
    pub fn error(code: &'static str, span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: message.into(),
            span: Some(span),
            label: "here".into(),
            secondary: Vec::new(),
            notes: Vec::new(),
            location: None,
        }
    }

    /// An error with no place in the source (a command-line value, say).
    pub fn global(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: message.into(),
            span: None,
            label: String::new(),
            secondary: Vec::new(),
            notes: Vec::new(),
            location: None,
        }
    }

    /// A warning at `span`: the program runs, but this is probably not what was meant.
    pub fn warning(code: &'static str, span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, span, message)
        }
    }

    /// The same diagnostic with its file, line and column filled in from `source`.
    pub fn located(mut self, file_name: &str, source: &str) -> Diagnostic {
        let Some(span) = self.span else { return self };
        let mut at = clamp(span, source.len()).start;
        while !source.is_char_boundary(at) {
            at -= 1;
        }
        let before = &source[..at];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        self.location = Some(Location {
            file: file_name.to_string(),
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        });
        self
    }

    /// Replaces the caret's label.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Adds a secondary location.
    pub fn with_secondary(mut self, span: Span, label: impl Into<String>) -> Self {
        self.secondary.push((span, label.into()));
        self
    }

    /// Adds a hint or note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }
}

/// All the diagnostics of one failed stage; a non-empty list.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Renders every diagnostic against the source, rustc-style, without colour.
    pub fn render(&self, file_name: &str, source: &str) -> String {
        render(&self.0, file_name, source)
    }

    /// The same diagnostics with the file, line and column of each span filled in.
    pub fn located(self, file_name: &str, source: &str) -> Diagnostics {
        Diagnostics(
            self.0
                .into_iter()
                .map(|d| d.located(file_name, source))
                .collect(),
        )
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
}

impl std::fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for d in &self.0 {
            if let Some(l) = &d.location {
                write!(f, "{}:{}:{}: ", l.file, l.line, l.column)?;
            }
            writeln!(f, "{}[{}]: {}", d.severity.word(), d.code, d.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// Renders diagnostics as text, `--> file:line:col` first, then the source line with a caret.
pub fn render(diags: &[Diagnostic], file_name: &str, source: &str) -> String {
    let spans: Vec<std::ops::Range<usize>> = diags
        .iter()
        .flat_map(|d| d.span.iter().chain(d.secondary.iter().map(|(s, _)| s)))
        .map(|s| {
            let s = clamp(*s, source.len());
            s.start..s.end
        })
        .collect();
    match excerpt::Excerpt::new(file_name, source, &spans) {
        Some(view) => emit(diags, &view, &|at| view.to_view(at), source.len()),
        None => emit(
            diags,
            &SimpleFile::new(file_name, source),
            &|at| at,
            source.len(),
        ),
    }
}

/// Renders `diags` against `file`, whose positions `at` maps from the source's.
fn emit<'f, F: Files<'f, FileId = ()>>(
    diags: &[Diagnostic],
    file: &'f F,
    at: &dyn Fn(usize) -> usize,
    len: usize,
) -> String {
    let config = Config {
        chars: Chars::ascii(),
        ..Config::default()
    };
    let mut out = term::termcolor::NoColor::new(Vec::new());
    for d in diags {
        let cs = match d.severity {
            Severity::Error => CsDiagnostic::error(),
            Severity::Warning => CsDiagnostic::warning(),
        };
        let mut cs = cs
            .with_code(d.code)
            .with_message(&d.message)
            .with_notes(d.notes.clone());
        let mut labels = Vec::new();
        if let Some(span) = d.span {
            let span = clamp(span, len);
            labels.push(Label::primary((), at(span.start)..at(span.end)).with_message(&d.label));
        }
        for (span, text) in &d.secondary {
            let span = clamp(*span, len);
            labels.push(Label::secondary((), at(span.start)..at(span.end)).with_message(text));
        }
        cs = cs.with_labels(labels);
        if term::emit(&mut out, &config, file, &cs).is_err() {
            return diags
                .iter()
                .map(|d| format!("{}[{}]: {}\n", d.severity.word(), d.code, d.message))
                .collect();
        }
    }
    String::from_utf8_lossy(&out.into_inner()).into_owned()
}

fn clamp(span: Span, len: usize) -> Span {
    let start = span.start.min(len);
    Span::new(start, span.end.clamp(start, len))
}
