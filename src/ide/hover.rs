//! Hover: what a name under the caret is, in Markdown.

use super::{Analysis, Function, NameKind, Occurrence};
use crate::diagnostics::Span;
use crate::semantics::{Checked, Kind};
use crate::syntax::ast::{DomainDef, StmtKind};
use std::fmt::Write;

/// Symbols of a domain listed before "…".
const SHOWN_SYMBOLS: usize = 8;

impl Analysis {
    /// Markdown about the name under `offset`, and the span it is about.
    pub fn hover(&self, offset: usize) -> Option<(Span, String)> {
        if let Some(o) = self.names.at(offset) {
            let text = match o.kind {
                NameKind::Tensor => self.tensor_hover(o),
                NameKind::Domain => self.domain_hover(o),
                NameKind::Constant => self.constant_hover(o),
            };
            return Some((o.span, text));
        }
        let (span, word) = word_at(&self.source, offset)?;
        let f = Function::named(word)?;
        Some((span, format!("```tl\n{}\n```\n{}", f.label(), f.doc)))
    }

    fn tensor_hover(&self, o: &Occurrence) -> String {
        let mut out = format!("**{}**", o.name);
        let defined = self.lines_defining(o);
        let Some(c) = self.checked.as_ref() else {
            let _ = write!(out, " (tensor)\n\n{defined}");
            return out;
        };
        let Some(t) = c.tensor_id(&o.name) else {
            let _ = write!(out, " (tensor)\n\n{defined}");
            return out;
        };
        let info = &c.tensors[t];
        let kind = match info.kind {
            Kind::Bool => "Boolean (a relation: its true tuples)".to_string(),
            Kind::Int => "int (i64)".to_string(),
            Kind::Real => format!("real, stored as {}", elem_name(info.elem)),
        };
        let _ = write!(out, ": {kind}\n\nshape {:?}\n", info.shape);
        for (axis, &d) in info.domains.iter().enumerate() {
            let _ = writeln!(
                out,
                "- axis {axis}: {}",
                domain_text(c, d, info.shape[axis])
            );
        }
        let _ = write!(out, "\n{defined}");
        if let Some(k) = c.strata.iter().position(|s| s.tensors.contains(&t)) {
            let header = format!("stratum {}:", k + 1);
            let line = self
                .explain_text()
                .and_then(|e| e.lines().find(|l| l.starts_with(&header)));
            if let Some(line) = line {
                let _ = write!(out, "\n\n`{line}`");
            }
        }
        out
    }

    /// "defined at lines 3, 4" for the statements that define the name.
    fn lines_defining(&self, o: &Occurrence) -> String {
        let index = super::LineIndex::new(&self.source);
        let lines: Vec<String> = self
            .names
            .of(&o.name, o.kind)
            .filter(|x| x.defines)
            .map(|x| (index.position(&self.source, x.span.start).0 + 1).to_string())
            .collect();
        match lines.len() {
            0 => "not defined in this program (bound from outside, or a parameter)".into(),
            1 => format!("defined at line {}", lines[0]),
            _ => format!("defined at lines {}", lines.join(", ")),
        }
    }

    fn domain_hover(&self, o: &Occurrence) -> String {
        let def = self
            .program()
            .statements
            .iter()
            .find_map(|st| match &st.kind {
                StmtKind::Domain { name, def } if name.text == o.name => Some(def),
                _ => None,
            });
        let what = match def {
            Some(DomainDef::Size(n)) => format!("the integer range 0..{n}"),
            Some(DomainDef::Symbols(s)) => {
                let names: Vec<&str> = s.iter().map(|n| n.text.as_str()).collect();
                format!("{} symbols: {}", names.len(), listed(&names))
            }
            None => "a domain".into(),
        };
        format!("**{}** (domain): {what}", o.name)
    }

    fn constant_hover(&self, o: &Occurrence) -> String {
        let value = self
            .program()
            .statements
            .iter()
            .find_map(|st| match &st.kind {
                StmtKind::Scalar { name, value, .. } if name.text == o.name => Some(*value),
                _ => None,
            });
        match value {
            Some(v) => format!("**{}** (scalar constant) = {v}", o.name),
            None => format!("**{}** (scalar constant)", o.name),
        }
    }
}

fn elem_name(e: crate::ElemType) -> &'static str {
    use crate::ElemType::*;
    match e {
        Bool => "bool",
        Int => "int",
        F64 => "f64",
        F32 => "f32",
        BF16 => "bf16",
        F16 => "f16",
        FP8 => "fp8",
        I8 => "i8",
    }
}

fn domain_text(c: &Checked, d: usize, extent: usize) -> String {
    let dom = &c.domains[d];
    let name = dom
        .name
        .as_deref()
        .map(|n| format!("{n}, "))
        .unwrap_or_default();
    if dom.table.is_some() {
        return format!("{name}integer values (a column of a relation, no extent)");
    }
    if dom.symbolic {
        let names: Vec<&str> = dom.symbols.iter().map(String::as_str).collect();
        let what = if dom.real { "values" } else { "symbols" };
        return format!("{name}{} {what}: {}", names.len(), listed(&names));
    }
    format!("{name}0..{extent}")
}

/// The first symbols, then how many there are.
fn listed(names: &[&str]) -> String {
    let shown = names[..names.len().min(SHOWN_SYMBOLS)].join(", ");
    match names.len() > SHOWN_SYMBOLS {
        true => format!("{shown}, … ({} in all)", names.len()),
        false => shown,
    }
}

/// The identifier around `offset`, if there is one.
pub(super) fn word_at(source: &str, offset: usize) -> Option<(Span, &str)> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '\'';
    let offset = offset.min(source.len());
    if !source.is_char_boundary(offset) {
        return None;
    }
    let start = source[..offset]
        .char_indices()
        .rev()
        .take_while(|&(_, c)| is_word(c))
        .last()
        .map_or(offset, |(i, _)| i);
    let end = source[offset..]
        .char_indices()
        .find(|&(_, c)| !is_word(c))
        .map_or(source.len(), |(i, _)| offset + i);
    (start < end).then(|| (Span::new(start, end), &source[start..end]))
}

#[cfg(test)]
mod tests {
    use super::super::Analysis;
    use std::path::Path;

    #[test]
    fn hover_tells_kind_shape_domains_definition_and_stratum() {
        let src = "Person : {Ann, Bob, Cid}\nParent(Ann, Bob). Parent(Bob, Cid).\n\
            Anc(x, y) :- Parent(x, y).\nAnc(x, z) :- Anc(x, y), Parent(y, z).\n\
            Kids[x] = Parent(x, y)\nN = 2\nY = relu(Kids[Ann]) + N\n";
        let a = Analysis::new(src, Path::new("."));
        assert!(a.diagnostics().is_empty(), "{:?}", a.diagnostics());
        let hover = |needle: &str| -> String {
            let at = src.find(needle).unwrap_or(0);
            a.hover(at).map(|(_, t)| t).unwrap_or_default()
        };
        let anc = hover("Anc(x, z)");
        assert!(anc.contains("Boolean"), "{anc}");
        assert!(anc.contains("shape [3, 3]"), "{anc}");
        assert!(anc.contains("3 symbols: Ann, Bob, Cid"), "{anc}");
        assert!(anc.contains("defined at lines 3, 4"), "{anc}");
        assert!(anc.contains("(recursive)"), "{anc}");
        let kids = hover("Kids[x]");
        assert!(kids.contains("int (i64)"), "{kids}");
        assert!(hover("relu").contains("relu(x)"));
        assert!(hover("N\n").contains("= 2"));
        assert!(hover("Person :").contains("domain"));
    }
}
