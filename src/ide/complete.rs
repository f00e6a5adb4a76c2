//! Completion and signature help. Both read the text before the caret rather than the
//! syntax tree, because while a user types the statement under the caret rarely parses.

use super::hover::word_at;
use super::{Analysis, Function, NameKind, FUNCTIONS};

/// What a completion inserts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionKind {
    /// A tensor's name.
    Tensor,
    /// A function.
    Function,
    /// A symbol of the domain of the axis under the caret.
    Symbol,
    /// A scalar constant.
    Constant,
    /// A declared domain.
    Domain,
    /// A keyword (`not`).
    Keyword,
}

/// One completion.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// The text to insert.
    pub label: String,
    /// What it is.
    pub kind: CompletionKind,
    /// A short description.
    pub detail: String,
}

/// Signature help: the call or access around the caret.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    /// `substr(s, start, count)` or `Parent(Person, Person)`.
    pub label: String,
    /// Each parameter's label.
    pub params: Vec<String>,
    /// The parameter the caret is in.
    pub active: usize,
    /// What the function does, or what the tensor is.
    pub doc: String,
}

/// The innermost unclosed `(` or `[` before `offset`: the name before it,
/// and how many top-level commas lie between it and the caret.
fn open_call(source: &str, offset: usize) -> Option<(&str, usize)> {
    let before = source.get(..offset)?;
    let (mut depth, mut commas, mut in_string) = (0usize, 0usize, false);
    for (i, c) in before.char_indices().rev() {
        match c {
            '"' => in_string = !in_string,
            _ if in_string => {}
            ')' | ']' => depth += 1,
            '(' | '[' if depth > 0 => depth -= 1,
            '(' | '[' => {
                let name = word_at(source, i).map(|(_, w)| w)?;
                return Some((name, commas));
            }
            ',' if depth == 0 => commas += 1,
            // A statement ends here (a `.` before a `,` or `]` is a normalised index). A
            // newline may be inside the brackets being looked for, so it does not stop.
            '?' if depth == 0 => return None,
            '.' if depth == 0 && before[i + 1..].starts_with(char::is_whitespace) => return None,
            _ => {}
        }
    }
    None
}

impl Analysis {
    /// What may be written at `offset`, filtered by the word typed so far.
    pub fn completions(&self, offset: usize) -> Vec<Completion> {
        let typed = word_at(&self.source, offset)
            .filter(|(s, _)| s.end == offset)
            .map_or("", |(s, w)| &w[..offset - s.start]);
        let mut out = self.axis_symbols(offset);
        let mut seen = std::collections::HashSet::new();
        for o in &self.names().occurrences {
            if !seen.insert((o.name.clone(), o.kind)) {
                continue;
            }
            let (kind, detail) = match o.kind {
                NameKind::Tensor => (CompletionKind::Tensor, "tensor"),
                NameKind::Domain => (CompletionKind::Domain, "domain"),
                NameKind::Constant => (CompletionKind::Constant, "scalar constant"),
            };
            out.push(Completion {
                label: o.name.clone(),
                kind,
                detail: detail.into(),
            });
        }
        out.extend(FUNCTIONS.iter().map(|f| Completion {
            label: f.name.into(),
            kind: CompletionKind::Function,
            detail: f.label(),
        }));
        out.push(Completion {
            label: "not".into(),
            kind: CompletionKind::Keyword,
            detail: "negation of a body atom".into(),
        });
        let lower = typed.to_lowercase();
        out.retain(|c| c.label.to_lowercase().starts_with(&lower) && c.label != typed);
        out
    }

    /// The symbols of the axis the caret is in, where that axis has symbols.
    fn axis_symbols(&self, offset: usize) -> Vec<Completion> {
        let Some((name, axis)) = open_call(&self.source, offset) else {
            return Vec::new();
        };
        let Some(c) = self.checked() else {
            return Vec::new();
        };
        let Some(t) = c.tensor_id(name) else {
            return Vec::new();
        };
        let Some(&d) = c.tensors[t].domains.get(axis) else {
            return Vec::new();
        };
        let dom = &c.domains[d];
        if !dom.symbolic || dom.real {
            return Vec::new();
        }
        dom.symbols
            .iter()
            .map(|s| Completion {
                label: s.clone(),
                kind: CompletionKind::Symbol,
                detail: format!("a symbol of axis {axis} of {name}"),
            })
            .collect()
    }

    /// The function or tensor whose arguments the caret is in.
    pub fn signature(&self, offset: usize) -> Option<Signature> {
        let (name, active) = open_call(&self.source, offset)?;
        if let Some(f) = Function::named(name) {
            return Some(Signature {
                label: f.label(),
                params: f.params.iter().map(|p| p.to_string()).collect(),
                active: active.min(f.params.len().saturating_sub(1)),
                doc: f.doc.into(),
            });
        }
        let c = self.checked()?;
        let info = &c.tensors[c.tensor_id(name)?];
        let params: Vec<String> = info
            .domains
            .iter()
            .zip(&info.shape)
            .map(|(&d, n)| axis_label(&c.domains[d], *n))
            .collect();
        let (open, close) = match info.kind {
            crate::semantics::Kind::Bool => ('(', ')'),
            _ => ('[', ']'),
        };
        Some(Signature {
            label: format!("{name}{open}{}{close}", params.join(", ")),
            active: active.min(params.len().saturating_sub(1)),
            params,
            doc: format!("a tensor of shape {:?}", info.shape),
        })
    }
}

/// A parameter of a tensor's signature: its domain's name, its first symbols, or its range.
fn axis_label(dom: &crate::semantics::Domain, extent: usize) -> String {
    if let Some(name) = &dom.name {
        return name.clone();
    }
    if dom.symbolic {
        let more = if dom.symbols.len() > 3 { ", …" } else { "" };
        let first: Vec<&str> = dom.symbols.iter().take(3).map(String::as_str).collect();
        return format!("{{{}{more}}}", first.join(", "));
    }
    format!("0..{extent}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const SRC: &str = "Parent(Ann, Bob). Parent(Bob, Cid).\nKids[x] = Parent(x, y)\n";

    #[test]
    fn completion_offers_the_axis_symbols_tensors_and_functions() {
        let typed = format!("{SRC}Y = Kids[");
        let before = Analysis::new(SRC, Path::new("."));
        let a = Analysis::update(before, &typed, Path::new("."));
        assert!(a.is_stale());
        let labels = |offset: usize| -> Vec<String> {
            a.completions(offset).into_iter().map(|c| c.label).collect()
        };
        let all = labels(typed.len());
        assert_eq!(&all[..3], ["Ann", "Bob", "Parent"], "{all:?}");
        assert!(all.contains(&"Parent".to_string()) && all.contains(&"softmax".to_string()));
        let src2 = format!("{SRC}Y = so");
        let b = Analysis::new(&src2, Path::new("."));
        let got: Vec<String> = b
            .completions(src2.len())
            .into_iter()
            .map(|c| c.label)
            .collect();
        assert_eq!(got, vec!["softplus", "softmax"]);
    }

    #[test]
    fn signature_help_follows_the_argument_under_the_caret() {
        let typed = format!("{SRC}Z = substr(\"abc\", 1, ");
        let a = Analysis::new(&typed, Path::new("."));
        let s = a
            .signature(typed.len())
            .unwrap_or_else(|| panic!("no signature"));
        assert_eq!((s.label.as_str(), s.active), ("substr(s, start, count)", 2));
        let typed = format!("{SRC}Q(x) :- Parent(Ann, ");
        let b = Analysis::new(&typed, Path::new("."));
        // The unfinished statement does not check, and no earlier version did.
        assert!(b.signature(typed.len()).is_none());
        let c = Analysis::new(SRC, Path::new("."));
        let at = SRC.find("x, y").unwrap_or(0) + 3;
        let s = c.signature(at).unwrap_or_else(|| panic!("no signature"));
        assert_eq!(
            (s.label.as_str(), s.active),
            ("Parent({Ann, Bob}, {Bob, Cid})", 1)
        );
    }
}
