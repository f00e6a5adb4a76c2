//! `tl lsp` driven as an editor drives it: JSON-RPC over standard input and output.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

struct Client {
    child: Child,
    input: ChildStdin,
    output: Receiver<Value>,
}

fn read_message(r: &mut impl BufRead) -> Option<Value> {
    let mut length = 0;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(n) = line.strip_prefix("Content-Length: ") {
            length = n.parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

impl Client {
    fn start() -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tl"))
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("tl lsp starts");
        let input = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (send, output) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            while let Some(v) = read_message(&mut r) {
                if send.send(v).is_err() {
                    break;
                }
            }
        });
        Client {
            child,
            input,
            output,
        }
    }

    fn raw(&mut self, text: &str) {
        write!(self.input, "Content-Length: {}\r\n\r\n{text}", text.len()).expect("write");
        self.input.flush().expect("flush");
    }

    fn send(&mut self, v: Value) {
        self.raw(&v.to_string());
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// The next message that satisfies `pick`, skipping others.
    fn wait(&mut self, pick: impl Fn(&Value) -> bool) -> Value {
        loop {
            let v = self
                .output
                .recv_timeout(Duration::from_secs(20))
                .expect("the server answers");
            if pick(&v) {
                return v;
            }
        }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.wait(|v| v["id"] == json!(id))
    }

    fn diagnostics(&mut self) -> Vec<Value> {
        let v = self.wait(|v| v["method"] == "textDocument/publishDiagnostics");
        v["params"]["diagnostics"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

const URI: &str = "file:///tmp/tl-lsp-test/family.tl";

fn at(line: u32, character: u32) -> Value {
    json!({"textDocument": {"uri": URI}, "position": {"line": line, "character": character}})
}

#[test]
fn an_editor_session_from_initialize_to_exit() {
    let mut c = Client::start();
    let init = c.request(1, "initialize", json!({"capabilities": {}}));
    assert_eq!(init["result"]["capabilities"]["hoverProvider"], json!(true));
    c.notify("initialized", json!({}));

    let broken = "Parent(Ann, Bob). Parent(Bob, Cid).\nAnc(x, y) :- Parnt(x, y).\nAnc(x, z) :- Anc(x, y), Parent(y, z).\nAnc(Ann, x)?\n";
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": URI, "languageId": "tl", "version": 1, "text": broken}}),
    );
    let d = c.diagnostics();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["code"], "E0101");
    assert_eq!(d[0]["range"]["start"], json!({"line": 1, "character": 13}));

    // The fix, as an edit of a range: `Parnt` becomes `Parent`.
    let range = json!({"start": {"line": 1, "character": 13}, "end": {"line": 1, "character": 18}});
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": URI, "version": 2},
               "contentChanges": [{"range": range, "text": "Parent"}]}),
    );
    assert!(c.diagnostics().is_empty());

    let hover = c.request(2, "textDocument/hover", at(2, 15));
    let text = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        text.contains("Boolean") && text.contains("(recursive)"),
        "{text}"
    );

    let def = c.request(3, "textDocument/definition", at(3, 1));
    let lines: Vec<i64> = def["result"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l["range"]["start"]["line"].as_i64())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(lines, vec![1, 2]);

    let fmt = c.request(
        4,
        "textDocument/formatting",
        json!({"textDocument": {"uri": URI}, "options": {"tabSize": 4, "insertSpaces": true}}),
    );
    assert_eq!(fmt["result"], json!([]), "the program is formatted already");

    // Bad input gets error answers, and the server keeps serving.
    c.raw("{not json");
    let e = c.wait(|v| v["error"]["code"] == json!(-32700));
    assert_eq!(e["id"], Value::Null);
    let e = c.request(5, "textDocument/frobnicate", json!({}));
    assert_eq!(e["error"]["code"], json!(-32601));
    let e = c.request(6, "textDocument/hover", json!({"nonsense": true}));
    assert_eq!(e["error"]["code"], json!(-32602));
    let outside = c.request(7, "textDocument/hover", at(90, 0));
    assert_eq!(outside["result"], Value::Null);
    let unknown = json!({"textDocument": {"uri": "file:///nowhere.tl"}, "position": {"line": 0, "character": 0}});
    assert_eq!(
        c.request(8, "textDocument/hover", unknown)["result"],
        Value::Null
    );

    // An edit of a document that is not open is ignored; the server still answers.
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": "file:///nowhere.tl", "version": 3},
               "contentChanges": [{"text": "X = 1"}]}),
    );
    let symbols = c.request(
        9,
        "textDocument/documentSymbol",
        json!({"textDocument": {"uri": URI}}),
    );
    assert_eq!(symbols["result"][1]["name"], "Anc");

    let down = c.request(10, "shutdown", Value::Null);
    assert!(down.get("error").is_none());
    c.notify("exit", Value::Null);
    let status = c.child.wait().expect("exit");
    assert!(status.success());
}
