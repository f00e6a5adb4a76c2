//! `docs/guide.md` stays true: every program excerpt it shows is in the example it names, and
//! every `tl` command followed by "prints" prints that, run from the repository root.

mod common;

use std::path::Path;

/// The fenced blocks of a Markdown text: (info string, body, the line after the fence).
fn blocks(text: &str) -> Vec<(String, String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(info) = lines[i].strip_prefix("```") {
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && !lines[end].starts_with("```") {
                end += 1;
            }
            let after = lines.get(end + 1).copied().unwrap_or("").to_string();
            out.push((
                info.to_string(),
                lines[start..end.min(lines.len())].join("\n"),
                after,
            ));
            i = end + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// A command line split into words, single quotes grouping.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[test]
fn the_guide_shows_what_the_examples_contain_and_print() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let guide = std::fs::read_to_string(root.join("docs/guide.md")).unwrap();
    let all = blocks(&guide);
    let (mut excerpts, mut commands) = (0, 0);
    for (k, (info, body, after)) in all.iter().enumerate() {
        if let Some(file) = info.strip_prefix("tl ") {
            let text = std::fs::read_to_string(root.join(file.trim())).unwrap();
            assert!(
                text.contains(body.as_str()),
                "docs/guide.md quotes {file} wrongly:\n{body}"
            );
            excerpts += 1;
        }
        if info == "sh" && after.trim() == "prints" {
            let (_, expected, _) = &all[k + 1];
            let args = words(body.trim());
            assert_eq!(args[0], "tl", "{body}");
            let rest: Vec<&str> = args[1..].iter().map(String::as_str).collect();
            let out = common::tl(root, &rest);
            assert!(out.status.success(), "{body}: {}", common::stderr(&out));
            if let Err(e) = common::compare(expected, &common::stdout(&out)) {
                panic!("`{body}` prints other than docs/guide.md says: {e}");
            }
            commands += 1;
        }
    }
    assert!(
        excerpts >= 6 && commands >= 8,
        "{excerpts} excerpts, {commands} commands"
    );
}
