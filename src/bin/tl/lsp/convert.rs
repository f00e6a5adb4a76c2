//! Between the library's byte spans and diagnostics and the protocol's positions and types.

use lsp_types as lsp;
use tensor_logic::diagnostics::Span;
use tensor_logic::ide::LineIndex;
use tensor_logic::{Diagnostic, Severity};

/// A document's text with its line index, which every conversion needs.
pub struct Text<'a> {
    /// The source.
    pub source: &'a str,
    /// Its lines.
    pub lines: &'a LineIndex,
}

impl Text<'_> {
    /// The protocol's position of byte `offset`.
    pub fn position(&self, offset: usize) -> lsp::Position {
        let (line, character) = self.lines.position(self.source, offset);
        lsp::Position { line, character }
    }

    /// The protocol's range of a span.
    pub fn range(&self, span: Span) -> lsp::Range {
        lsp::Range {
            start: self.position(span.start),
            end: self.position(span.end),
        }
    }

    /// The byte offset of a position; `None` outside the document.
    pub fn offset(&self, p: lsp::Position) -> Option<usize> {
        self.lines.offset(self.source, p.line, p.character)
    }

    /// One diagnostic as the protocol shows it: the label and the notes join the message,
    /// and the secondary spans become related information.
    pub fn diagnostic(&self, uri: &lsp::Uri, d: &Diagnostic) -> lsp::Diagnostic {
        let mut message = d.message.clone();
        if !d.label.is_empty() && d.label != d.message {
            message.push_str(&format!(" ({})", d.label));
        }
        for note in &d.notes {
            message.push('\n');
            message.push_str(note);
        }
        let related: Vec<lsp::DiagnosticRelatedInformation> = d
            .secondary
            .iter()
            .map(|(span, label)| lsp::DiagnosticRelatedInformation {
                location: lsp::Location {
                    uri: uri.clone(),
                    range: self.range(*span),
                },
                message: label.clone(),
            })
            .collect();
        lsp::Diagnostic {
            range: self.range(d.span.unwrap_or_default()),
            severity: Some(match d.severity {
                Severity::Error => lsp::DiagnosticSeverity::ERROR,
                Severity::Warning => lsp::DiagnosticSeverity::WARNING,
            }),
            code: Some(lsp::NumberOrString::String(d.code.to_string())),
            source: Some("tl".into()),
            message,
            related_information: (!related.is_empty()).then_some(related),
            ..lsp::Diagnostic::default()
        }
    }
}

/// The directory a document's relative file paths start from: its own, for a `file:` URI.
pub fn base_dir(uri: &lsp::Uri) -> std::path::PathBuf {
    let text = uri.as_str();
    let Some(path) = text.strip_prefix("file://") else {
        return ".".into();
    };
    let path = std::path::PathBuf::from(percent_decoded(path));
    path.parent()
        .map_or_else(|| ".".into(), |p| p.to_path_buf())
}

/// `%20` and its kind decoded; a malformed escape is kept as written.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_give_their_directory() {
        let uri: lsp::Uri = "file:///home/a%20b/prog.tl"
            .parse()
            .unwrap_or_else(|_| panic!());
        assert_eq!(base_dir(&uri), std::path::PathBuf::from("/home/a b"));
        let other: lsp::Uri = "untitled:Untitled-1".parse().unwrap_or_else(|_| panic!());
        assert_eq!(base_dir(&other), std::path::PathBuf::from("."));
    }
}
