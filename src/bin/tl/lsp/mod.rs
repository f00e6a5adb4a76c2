//! `tl lsp`: a Language Server Protocol server on standard input and output, over the
//! library's language service (`tensor_logic::ide`). `lsp-server` and `lsp-types` are the
//! crates rust-analyzer is built on: the message and protocol types, kept in step with the
//! specification, so that this file holds only what is ours.
//!
//! Documents are checked, never evaluated, a short quiet time after the last edit, so a
//! burst of keystrokes is checked once.

mod convert;
mod handlers;
mod transport;

use lsp_server::{Message, Notification, Request, RequestId, Response};
use lsp_types as lsp;
use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;
use tensor_logic::ide::{Analysis, LineIndex};
use transport::Incoming;

/// How long the server waits after an edit for the next one before checking.
const DEBOUNCE: Duration = Duration::from_millis(10);

/// JSON-RPC's and the protocol's error codes.
mod code {
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    pub const SERVER_NOT_INITIALIZED: i32 = -32002;
}

/// One open document.
struct Document {
    text: String,
    version: i32,
    lines: LineIndex,
    /// The last analysis; `None` until the first check.
    analysis: Option<Analysis>,
    /// Edited since `analysis`.
    dirty: bool,
}

/// The server's state between messages.
#[derive(Default)]
struct Server {
    initialized: bool,
    shut_down: bool,
    documents: HashMap<String, (lsp::Uri, Document)>,
}

/// Runs the server until the client's `exit`, or until standard input ends. Exit status 0
/// after a `shutdown` request, 1 otherwise, as the protocol says.
pub fn serve() -> Result<(), String> {
    let incoming = transport::stdin_messages();
    let mut server = Server::default();
    loop {
        let next = match server.dirty() {
            true => incoming.recv_timeout(DEBOUNCE),
            false => incoming.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let sent = match next {
            Err(RecvTimeoutError::Timeout) => server.check_dirty(),
            Err(RecvTimeoutError::Disconnected) => break,
            Ok(Incoming::Malformed(why)) => transport::send_parse_error(&why),
            Ok(Incoming::Message(Message::Notification(n))) if n.method == "exit" => {
                return match server.shut_down {
                    true => Ok(()),
                    false => Err(String::new()),
                };
            }
            Ok(Incoming::Message(Message::Notification(n))) => server.notification(n),
            Ok(Incoming::Message(Message::Request(r))) => {
                let id = r.id.clone();
                let answered =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.request(r)));
                let response = answered.unwrap_or_else(|_| {
                    error(id, code::INTERNAL_ERROR, "internal error (a bug in tl)")
                });
                transport::send(&Message::Response(response))
            }
            Ok(Incoming::Message(Message::Response(_))) => Ok(()),
        };
        if sent.is_err() {
            break;
        }
    }
    Err(String::new())
}

impl Server {
    fn dirty(&self) -> bool {
        self.documents.values().any(|(_, d)| d.dirty)
    }

    /// Checks every edited document and publishes its diagnostics.
    fn check_dirty(&mut self) -> std::io::Result<()> {
        let keys: BTreeSet<String> = self
            .documents
            .iter()
            .filter(|(_, (_, d))| d.dirty)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.analyse(&key);
            self.publish(&key)?;
        }
        Ok(())
    }

    /// Brings a document's analysis up to date with its text.
    fn analyse(&mut self, key: &str) {
        let Some((uri, doc)) = self.documents.get_mut(key) else {
            return;
        };
        if !doc.dirty && doc.analysis.is_some() {
            return;
        }
        let base = convert::base_dir(uri);
        let previous = doc.analysis.take();
        let text = doc.text.as_str();
        // A bug in checking must cost one analysis, not the server: the document is then
        // analysed afresh, without what the last version knew.
        let analysed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match previous {
            Some(previous) => Analysis::update(previous, text, &base),
            None => Analysis::new(text, &base),
        }));
        doc.analysis = analysed.ok();
        doc.dirty = false;
    }

    fn publish(&self, key: &str) -> std::io::Result<()> {
        let Some((uri, doc)) = self.documents.get(key) else {
            return Ok(());
        };
        let text = convert::Text {
            source: &doc.text,
            lines: &doc.lines,
        };
        let diagnostics = doc
            .analysis
            .iter()
            .flat_map(|a| a.diagnostics())
            .map(|d| text.diagnostic(uri, d))
            .collect();
        let params = lsp::PublishDiagnosticsParams {
            uri: uri.clone(),
            diagnostics,
            version: Some(doc.version),
        };
        let note = Notification::new("textDocument/publishDiagnostics".into(), params);
        transport::send(&Message::Notification(note))
    }

    fn notification(&mut self, n: Notification) -> std::io::Result<()> {
        if !self.initialized {
            return Ok(());
        }
        match n.method.as_str() {
            "textDocument/didOpen" => {
                if let Ok(p) = serde_json::from_value::<lsp::DidOpenTextDocumentParams>(n.params) {
                    let doc = p.text_document;
                    self.open(doc.uri, doc.text, doc.version);
                }
            }
            "textDocument/didChange" => {
                if let Ok(p) = serde_json::from_value::<lsp::DidChangeTextDocumentParams>(n.params)
                {
                    self.change(p);
                }
            }
            "textDocument/didClose" => {
                if let Ok(p) = serde_json::from_value::<lsp::DidCloseTextDocumentParams>(n.params) {
                    return self.close(p.text_document.uri);
                }
            }
            // `initialized`, `$/cancelRequest`, saves and settings need nothing; notifications
            // the server does not know are ignored, as the protocol says.
            _ => {}
        }
        Ok(())
    }

    fn open(&mut self, uri: lsp::Uri, text: String, version: i32) {
        let doc = Document {
            lines: LineIndex::new(&text),
            text,
            version,
            analysis: None,
            dirty: true,
        };
        self.documents.insert(uri.as_str().to_string(), (uri, doc));
    }

    /// Applies edits: whole texts, or ranges of the text as it stands after the edits before.
    fn change(&mut self, p: lsp::DidChangeTextDocumentParams) {
        let Some((_, doc)) = self.documents.get_mut(p.text_document.uri.as_str()) else {
            return;
        };
        for change in p.content_changes {
            match change.range {
                None => doc.text = change.text,
                Some(range) => {
                    let text = convert::Text {
                        source: &doc.text,
                        lines: &doc.lines,
                    };
                    let (Some(a), Some(b)) = (text.offset(range.start), text.offset(range.end))
                    else {
                        continue;
                    };
                    if a <= b {
                        doc.text.replace_range(a..b, &change.text);
                    }
                }
            }
            doc.lines = LineIndex::new(&doc.text);
        }
        doc.version = p.text_document.version;
        doc.dirty = true;
    }

    /// Forgets a document and clears its diagnostics.
    fn close(&mut self, uri: lsp::Uri) -> std::io::Result<()> {
        self.documents.remove(uri.as_str());
        let params = lsp::PublishDiagnosticsParams {
            uri,
            diagnostics: Vec::new(),
            version: None,
        };
        let note = Notification::new("textDocument/publishDiagnostics".into(), params);
        transport::send(&Message::Notification(note))
    }

    /// Answers one request; never fails, since an error is an answer too.
    fn request(&mut self, r: Request) -> Response {
        let id = r.id.clone();
        match (r.method.as_str(), self.initialized, self.shut_down) {
            ("initialize", false, _) => {
                self.initialized = true;
                Response::new_ok(id, handlers::capabilities())
            }
            ("initialize", true, _) => error(id, code::INVALID_REQUEST, "initialized already"),
            (_, false, _) => error(id, code::SERVER_NOT_INITIALIZED, "not initialized yet"),
            ("shutdown", true, _) => {
                self.shut_down = true;
                Response::new_ok(id, ())
            }
            (_, true, true) => error(id, code::INVALID_REQUEST, "the server is shutting down"),
            _ => self.answer(r),
        }
    }
}

fn error(id: RequestId, code: i32, message: &str) -> Response {
    Response::new_err(id, code, message.into())
}
