//! What an editor asks of a program, answered from checking alone: diagnostics, hover,
//! definitions and references, symbols, completion, signature help and formatting.
//!
//! This is the language service that `tl lsp` speaks the protocol for; it has no I/O beyond
//! what checking reads (the program's data files), no protocol types, and never evaluates:
//! a program's string tables are not filled (that takes evaluation), so an edit cannot start
//! unbounded work. Offsets are bytes of the source; [`LineIndex`] converts them to lines and
//! UTF-16 columns, as the protocol counts them.

mod complete;
mod functions;
mod hover;
mod lines;
mod names;
mod symbols;

pub use complete::{Completion, CompletionKind, Signature};
pub use functions::{Function, FUNCTIONS};
pub use lines::LineIndex;
pub use names::{NameIndex, NameKind, Occurrence};
pub use symbols::{Symbol, SymbolKind};

use crate::diagnostics::{codes, Diagnostic, Span};
use crate::semantics::{self, CheckInput, Checked, Settings, StringTables};
use crate::syntax::ast::Program;
use std::collections::BTreeMap;
use std::path::Path;

/// The budget of the data a check reads and the parameters it draws, for an editor: a
/// keystroke must not allocate gigabytes. What a run would refuse for memory is `tl check`'s
/// to report (E0601 is left out here).
const EDITOR_MEMORY: u64 = 1 << 30;

/// Lays a program out canonically (`tl fmt`): the syntax errors that stop it otherwise.
pub fn format(source: &str) -> Result<String, Vec<Diagnostic>> {
    crate::syntax::format::format(source, crate::functions::BUILTINS)
}

/// One version of a document, parsed and checked.
pub struct Analysis {
    source: String,
    program: Program,
    names: NameIndex,
    checked: Option<Checked>,
    diagnostics: Vec<Diagnostic>,
    stale: bool,
    explain: std::sync::OnceLock<String>,
}

impl Analysis {
    /// Parses and checks `source`; `base_dir` resolves the files it reads.
    pub fn new(source: &str, base_dir: &Path) -> Analysis {
        let (program, errors) = crate::syntax::parse(source, crate::functions::BUILTINS);
        let names = NameIndex::new(&program);
        let (checked, diagnostics) = match errors.is_empty() {
            true => check(&program, base_dir),
            false => (None, errors),
        };
        Analysis {
            source: source.to_string(),
            program,
            names,
            checked,
            diagnostics,
            stale: false,
            explain: std::sync::OnceLock::new(),
        }
    }

    /// The next version of a document. Where it does not check (mid-edit, typically), what
    /// the last version that did check knew about tensors and domains is kept for hover,
    /// completion and signature help; diagnostics are always the new version's.
    pub fn update(previous: Analysis, source: &str, base_dir: &Path) -> Analysis {
        let mut next = Analysis::new(source, base_dir);
        if next.checked.is_none() {
            next.checked = previous.checked;
            next.stale = true;
        }
        next
    }

    /// Whether what is known of tensors comes from an earlier version that checked.
    pub fn is_stale(&self) -> bool {
        self.stale
    }

    /// The text this analysis is of.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Every error and warning, in source order.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// The checked program, where it checks (or the last version that did).
    pub fn checked(&self) -> Option<&Checked> {
        self.checked.as_ref()
    }

    /// Where each tensor, domain and constant is written.
    pub fn names(&self) -> &NameIndex {
        &self.names
    }

    /// The places that define what is under `offset`: a tensor's equations, rules, facts,
    /// literals, file reads, declarations and initialisations; a domain's or a constant's
    /// definition.
    pub fn definition(&self, offset: usize) -> Vec<Span> {
        let Some(o) = self.names.at(offset) else {
            return Vec::new();
        };
        self.names
            .of(&o.name, o.kind)
            .filter(|x| x.defines)
            .map(|x| x.span)
            .collect()
    }

    /// Every place the name under `offset` is written, definitions included when asked.
    pub fn references(&self, offset: usize, with_definitions: bool) -> Vec<Span> {
        let Some(o) = self.names.at(offset) else {
            return Vec::new();
        };
        self.names
            .of(&o.name, o.kind)
            .filter(|x| with_definitions || !x.defines)
            .map(|x| x.span)
            .collect()
    }

    /// The plan as `tl explain` prints it, made once on first use (hover needs it; typing
    /// does not).
    fn explain_text(&self) -> Option<&str> {
        let checked = self.checked.as_ref()?;
        Some(self.explain.get_or_init(|| {
            let plan = crate::plan::plan(checked);
            crate::explain::explain(
                checked,
                &plan,
                &self.source,
                crate::plan::schedule::default_threads(),
            )
        }))
    }

    fn program(&self) -> &Program {
        &self.program
    }
}

/// Checks a parsed program once, with no string tables and the editor's budget.
fn check(program: &Program, base_dir: &Path) -> (Option<Checked>, Vec<Diagnostic>) {
    let settings = Settings {
        max_memory: Settings::default().max_memory.min(EDITOR_MEMORY),
        ..Settings::default()
    };
    let (bindings, parameters) = (BTreeMap::new(), BTreeMap::new());
    let tables = StringTables::default();
    let files = crate::io::read_program_files(program, base_dir);
    let input = CheckInput {
        program,
        base_dir: base_dir.to_path_buf(),
        files: &files,
        bindings: &bindings,
        user_functions: Vec::new(),
        settings,
        parameters: &parameters,
        strings: &tables,
    };
    match semantics::check(&input) {
        Ok(mut checked) => {
            let warnings = std::mem::take(&mut checked.warnings);
            (Some(checked), warnings)
        }
        Err(d) => {
            let shown =
                d.0.into_iter()
                    .filter(|d| d.code != codes::MEMORY)
                    .collect();
            (None, shown)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAMILY: &str = "Parent(Alice, Bob). Parent(Bob, Cid).\n\
        Anc(x, y) :- Parent(x, y).\n\
        Anc(x, z) :- Anc(x, y), Parent(y, z).\n\
        Anc(Alice, x)?\n";

    #[test]
    fn definitions_and_references_of_a_tensor() {
        let a = Analysis::new(FAMILY, Path::new("."));
        assert!(a.diagnostics().is_empty(), "{:?}", a.diagnostics());
        let at = FAMILY.rfind("Anc(Alice").unwrap_or(0);
        let lines = |spans: Vec<Span>| -> Vec<usize> {
            spans
                .iter()
                .map(|s| FAMILY[..s.start].matches('\n').count())
                .collect()
        };
        assert_eq!(lines(a.definition(at)), vec![1, 2]);
        assert_eq!(lines(a.references(at, false)), vec![2, 3]);
        assert_eq!(a.references(at, true).len(), 4);
        assert!(a.definition(FAMILY.find("x, y").unwrap_or(0)).is_empty());
    }

    #[test]
    fn errors_come_with_codes_and_spans() {
        let a = Analysis::new("Y[i] = X[i]\n", Path::new("."));
        let d = &a.diagnostics()[0];
        assert_eq!(d.code, codes::UNKNOWN_TENSOR);
        assert!(d.span.is_some());
        let a = Analysis::new("Y[i] = (X[i]\n", Path::new("."));
        assert_eq!(a.diagnostics()[0].code, codes::SYNTAX);
    }
}
