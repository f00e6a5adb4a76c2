//! The requests the server answers, each from the document's current analysis.

use super::{code, convert::Text, error, Server};
use lsp_server::{Request, Response};
use lsp_types as lsp;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tensor_logic::ide::{Analysis, CompletionKind, Symbol, SymbolKind};

/// What the server offers, for `initialize`.
pub fn capabilities() -> lsp::InitializeResult {
    lsp::InitializeResult {
        capabilities: lsp::ServerCapabilities {
            text_document_sync: Some(lsp::TextDocumentSyncCapability::Kind(
                lsp::TextDocumentSyncKind::INCREMENTAL,
            )),
            hover_provider: Some(lsp::HoverProviderCapability::Simple(true)),
            definition_provider: Some(lsp::OneOf::Left(true)),
            references_provider: Some(lsp::OneOf::Left(true)),
            document_symbol_provider: Some(lsp::OneOf::Left(true)),
            document_formatting_provider: Some(lsp::OneOf::Left(true)),
            completion_provider: Some(lsp::CompletionOptions {
                trigger_characters: Some(vec!["(".into(), "[".into(), ",".into()]),
                ..lsp::CompletionOptions::default()
            }),
            signature_help_provider: Some(lsp::SignatureHelpOptions {
                trigger_characters: Some(vec!["(".into(), "[".into(), ",".into()]),
                ..lsp::SignatureHelpOptions::default()
            }),
            ..lsp::ServerCapabilities::default()
        },
        server_info: Some(lsp::ServerInfo {
            name: "tl".into(),
            version: Some(env!("CARGO_PKG_VERSION").into()),
        }),
    }
}

/// A request's parameters, or the error that answers a request whose parameters are wrong.
fn params<P: DeserializeOwned>(r: &Request) -> Result<P, Response> {
    serde_json::from_value(r.params.clone()).map_err(|e| {
        error(
            r.id.clone(),
            code::INVALID_PARAMS,
            &format!("invalid parameters for {}: {e}", r.method),
        )
    })
}

impl Server {
    /// A request after `initialize`: the answer, `null` where there is none (an unknown
    /// document, a position outside it), or an error for an unknown method.
    pub(super) fn answer(&mut self, r: Request) -> Response {
        let result = match r.method.as_str() {
            "textDocument/hover" => self.positional(&r, hover),
            "textDocument/definition" => {
                self.positional(&r, |a, t, at, uri| locations(t, uri, a.definition(at)))
            }
            "textDocument/references" => {
                let with = r.params["context"]["includeDeclaration"]
                    .as_bool()
                    .unwrap_or(true);
                self.positional(&r, |a, t, at, uri| {
                    locations(t, uri, a.references(at, with))
                })
            }
            "textDocument/completion" => self.positional(&r, completion),
            "textDocument/signatureHelp" => self.positional(&r, signature),
            "textDocument/documentSymbol" => self.whole(&r, symbols),
            "textDocument/formatting" => self.whole(&r, formatting),
            _ => {
                let what = format!("unknown method `{}`", r.method);
                return error(r.id, code::METHOD_NOT_FOUND, &what);
            }
        };
        match result {
            Ok(value) => Response::new_ok(r.id, value),
            Err(response) => response,
        }
    }

    /// Answers a request about a position in a document.
    fn positional(
        &mut self,
        r: &Request,
        f: impl Fn(&Analysis, &Text, usize, &lsp::Uri) -> Value,
    ) -> Result<Value, Response> {
        let p: lsp::TextDocumentPositionParams = params(r)?;
        let key = p.text_document.uri.as_str().to_string();
        self.analyse(&key);
        let Some((uri, doc)) = self.documents.get(&key) else {
            return Ok(Value::Null);
        };
        let (Some(a), text) = (doc.analysis.as_ref(), doc.text_view()) else {
            return Ok(Value::Null);
        };
        let Some(at) = text.offset(p.position) else {
            return Ok(Value::Null);
        };
        Ok(f(a, &text, at, uri))
    }

    /// Answers a request about a whole document.
    fn whole(
        &mut self,
        r: &Request,
        f: impl Fn(&Analysis, &Text) -> Value,
    ) -> Result<Value, Response> {
        let p: lsp::DocumentSymbolParams = params(r).or_else(|_| {
            let f: lsp::DocumentFormattingParams = params(r)?;
            Ok::<_, Response>(lsp::DocumentSymbolParams {
                text_document: f.text_document,
                work_done_progress_params: Default::default(),
                partial_result_params: Default::default(),
            })
        })?;
        let key = p.text_document.uri.as_str().to_string();
        self.analyse(&key);
        let Some((_, doc)) = self.documents.get(&key) else {
            return Ok(Value::Null);
        };
        match doc.analysis.as_ref() {
            Some(a) => Ok(f(a, &doc.text_view())),
            None => Ok(Value::Null),
        }
    }
}

impl super::Document {
    fn text_view(&self) -> Text<'_> {
        Text {
            source: &self.text,
            lines: &self.lines,
        }
    }
}

fn json(v: impl serde::Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn hover(a: &Analysis, t: &Text, at: usize, _: &lsp::Uri) -> Value {
    let Some((span, markdown)) = a.hover(at) else {
        return Value::Null;
    };
    json(lsp::Hover {
        contents: lsp::HoverContents::Markup(lsp::MarkupContent {
            kind: lsp::MarkupKind::Markdown,
            value: markdown,
        }),
        range: Some(t.range(span)),
    })
}

/// Places in this document: a program reads no other programs, so every definition and
/// reference is in the file itself.
fn locations(t: &Text, uri: &lsp::Uri, spans: Vec<tensor_logic::diagnostics::Span>) -> Value {
    let all: Vec<lsp::Location> = spans
        .into_iter()
        .map(|s| lsp::Location {
            uri: uri.clone(),
            range: t.range(s),
        })
        .collect();
    json(all)
}

fn completion(a: &Analysis, _: &Text, at: usize, _: &lsp::Uri) -> Value {
    let items: Vec<lsp::CompletionItem> = a
        .completions(at)
        .into_iter()
        .map(|c| lsp::CompletionItem {
            kind: Some(match c.kind {
                CompletionKind::Tensor => lsp::CompletionItemKind::VARIABLE,
                CompletionKind::Function => lsp::CompletionItemKind::FUNCTION,
                CompletionKind::Symbol => lsp::CompletionItemKind::ENUM_MEMBER,
                CompletionKind::Constant => lsp::CompletionItemKind::CONSTANT,
                CompletionKind::Domain => lsp::CompletionItemKind::ENUM,
                CompletionKind::Keyword => lsp::CompletionItemKind::KEYWORD,
            }),
            label: c.label,
            detail: Some(c.detail),
            ..lsp::CompletionItem::default()
        })
        .collect();
    json(items)
}

fn signature(a: &Analysis, _: &Text, at: usize, _: &lsp::Uri) -> Value {
    let Some(s) = a.signature(at) else {
        return Value::Null;
    };
    json(lsp::SignatureHelp {
        signatures: vec![lsp::SignatureInformation {
            label: s.label,
            documentation: Some(lsp::Documentation::String(s.doc)),
            parameters: Some(
                s.params
                    .into_iter()
                    .map(|p| lsp::ParameterInformation {
                        label: lsp::ParameterLabel::Simple(p),
                        documentation: None,
                    })
                    .collect(),
            ),
            active_parameter: Some(s.active as u32),
        }],
        active_signature: Some(0),
        active_parameter: Some(s.active as u32),
    })
}

#[allow(deprecated)] // `DocumentSymbol::deprecated` must still be written.
fn symbol(t: &Text, s: Symbol) -> lsp::DocumentSymbol {
    lsp::DocumentSymbol {
        name: s.name,
        detail: (!s.detail.is_empty()).then_some(s.detail),
        kind: match s.kind {
            SymbolKind::Tensor => lsp::SymbolKind::VARIABLE,
            SymbolKind::Rule | SymbolKind::Equation => lsp::SymbolKind::FUNCTION,
            SymbolKind::Data => lsp::SymbolKind::FIELD,
            SymbolKind::Domain => lsp::SymbolKind::ENUM,
            SymbolKind::Constant => lsp::SymbolKind::CONSTANT,
            SymbolKind::Query => lsp::SymbolKind::EVENT,
        },
        tags: None,
        deprecated: None,
        range: t.range(s.span),
        selection_range: t.range(s.selection),
        children: (!s.children.is_empty())
            .then(|| s.children.into_iter().map(|c| symbol(t, c)).collect()),
    }
}

fn symbols(a: &Analysis, t: &Text) -> Value {
    let all: Vec<lsp::DocumentSymbol> = a.symbols().into_iter().map(|s| symbol(t, s)).collect();
    json(all)
}

/// One edit that replaces the whole text, or none where it is formatted already or does
/// not parse (its diagnostics say why).
fn formatting(a: &Analysis, t: &Text) -> Value {
    match tensor_logic::ide::format(a.source()) {
        Ok(formatted) if formatted != a.source() => json(vec![lsp::TextEdit {
            range: t.range(tensor_logic::diagnostics::Span::new(0, a.source().len())),
            new_text: formatted,
        }]),
        Ok(_) => json(Vec::<lsp::TextEdit>::new()),
        Err(_) => Value::Null,
    }
}
