//! Framing of the protocol's messages on standard input and output (`Content-Length`
//! headers, then JSON). Read by hand rather than with `lsp-server`'s stdio transport,
//! because that one stops at the first malformed message, and a server must answer it
//! with a parse error and keep serving.

use lsp_server::Message;
use std::io::{BufRead, Read, Write};
use std::sync::mpsc::{self, Receiver};

/// The largest message read; a longer one is skipped and answered with a parse error
/// rather than allocated.
const MAX_MESSAGE: usize = 256 << 20;

/// What arrives from the client.
pub enum Incoming {
    /// A request, response or notification.
    Message(Message),
    /// A frame that is not a message: why.
    Malformed(String),
}

/// Starts the thread that reads standard input; the channel closes at its end.
pub fn stdin_messages() -> Receiver<Incoming> {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        let mut input = std::io::stdin().lock();
        while let Some(frame) = read_frame(&mut input) {
            let incoming = match frame.and_then(|text| {
                serde_json::from_str::<Message>(&text)
                    .map_err(|e| format!("not a JSON-RPC message: {e}"))
            }) {
                Ok(msg) => Incoming::Message(msg),
                Err(why) => Incoming::Malformed(why),
            };
            if send.send(incoming).is_err() {
                break;
            }
        }
    });
    receive
}

/// The next frame's text, an error for a frame that cannot be read, `None` at the end.
fn read_frame(input: &mut impl BufRead) -> Option<Result<String, String>> {
    let mut length: Option<usize> = None;
    let mut bad_header = None;
    let mut seen = false;
    loop {
        let mut line = String::new();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            // Blank lines before any header are noise between frames.
            if seen {
                break;
            }
            continue;
        }
        seen = true;
        match line.split_once(':') {
            Some((name, value)) if name.trim().eq_ignore_ascii_case("content-length") => {
                match value.trim().parse::<usize>() {
                    Ok(n) => length = Some(n),
                    Err(_) => bad_header = Some(format!("bad Content-Length `{}`", value.trim())),
                }
            }
            Some(_) => {}
            None => bad_header = Some(format!("malformed header `{line}`")),
        }
    }
    let Some(n) = length else {
        return Some(Err(bad_header.unwrap_or_else(|| "no Content-Length".into())));
    };
    if n > MAX_MESSAGE {
        let skipped = std::io::copy(&mut input.take(n as u64), &mut std::io::sink());
        return match skipped {
            Ok(k) if k == n as u64 => Some(Err(format!("a message of {n} bytes is too long"))),
            _ => None,
        };
    }
    let mut body = vec![0u8; n];
    input.read_exact(&mut body).ok()?;
    if let Some(why) = bad_header {
        return Some(Err(why));
    }
    Some(String::from_utf8(body).map_err(|_| "a message that is not UTF-8".to_string()))
}

/// Writes one message, framed; an error means the client has gone.
pub fn send(message: &Message) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    message.write(&mut out)?;
    out.flush()
}

/// Answers a frame that was not a message: JSON-RPC's parse error, with a null id.
pub fn send_parse_error(why: &str) -> std::io::Result<()> {
    let text = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": -32700, "message": why },
    })
    .to_string();
    let mut out = std::io::stdout().lock();
    write!(out, "Content-Length: {}\r\n\r\n{text}", text.len())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_read_and_bad_ones_skipped() {
        let input = "Content-Length: 2\r\n\r\n{}Content-Length: x\r\n\r\nContent-Length: 3\n\n[1]";
        let mut r = std::io::BufReader::new(input.as_bytes());
        assert_eq!(read_frame(&mut r), Some(Ok("{}".into())));
        assert!(matches!(read_frame(&mut r), Some(Err(_))));
        assert_eq!(read_frame(&mut r), Some(Ok("[1]".into())));
        assert_eq!(read_frame(&mut r), None);
    }
}
