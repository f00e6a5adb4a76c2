//! The README, `docs/guide.md` and `docs/reference.md` stay true, run as a user would: in a
//! scratch directory holding a copy of `examples/`, with `tl` on the `PATH`.
//!
//! - A block fenced ```` ```tl FILE ```` quotes FILE: the text must be in it.
//! - A block fenced ```` ```tl ```` is a program: saved as `main.tl`, `tl run main.tl` must
//!   succeed, and print the next block when the line after it says "prints".
//! - Each command of a ```` ```sh ```` block that starts with `tl` (or `cargo run --release --`,
//!   which is the same program) is run by `sh`; it must succeed, and the block's last command
//!   print the next block when the line after it says "prints" (or exit 1 with the message
//!   quoted after "fails with"). Other commands (`cargo test`,
//!   `cargo install`) are what CI itself runs, and are skipped.

mod common;

use std::path::Path;
use std::process::Command;

/// A fenced block: its info string, its body, and the first non-blank line after it.
struct Block {
    info: String,
    body: String,
    after: String,
}

fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !lines[end].starts_with("```") {
            end += 1;
        }
        let after = lines[(end + 1).min(lines.len())..]
            .iter()
            .find(|l| !l.trim().is_empty())
            .map_or(String::new(), |l| l.trim().to_string());
        out.push(Block {
            info: info.trim().to_string(),
            body: lines[start..end.min(lines.len())].join("\n"),
            after,
        });
        i = end + 1;
    }
    out
}

/// The commands of a shell block: continuation lines joined, comments dropped.
fn commands(body: &str) -> Vec<String> {
    let joined = body.replace("\\\n", " ");
    joined
        .lines()
        .map(|l| l.split(" #").next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A scratch directory as a user's checkout would look to these commands.
fn scratch(root: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&root.join("examples"), &dir.path().join("examples"));
    dir
}

/// Runs one shell command in `dir` with `tl` first on the `PATH`.
fn shell(dir: &Path, command: &str) -> std::process::Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_tl")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .unwrap()
}

/// Checks one document; returns how many excerpts, programs and commands it checked.
fn check(doc: &str) -> (usize, usize, usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(doc)).unwrap();
    let all = blocks(&text);
    let (mut excerpts, mut programs, mut commands_run) = (0, 0, 0);
    for (k, b) in all.iter().enumerate() {
        let expected = (b.after == "prints").then(|| all.get(k + 1).map(|n| n.body.as_str()));
        let expected = expected.map(|e| e.unwrap_or_else(|| panic!("{doc}: nothing after prints")));
        // "fails with `error[E0101]: …`": the message, its own backticks left out.
        let failure = b
            .after
            .strip_prefix("fails with `")
            .map(|rest| rest.split('`').next().unwrap_or(""));
        let compare = |what: &str, out: &std::process::Output| {
            if let Some(message) = failure {
                let err = common::stderr(out).replace('`', "");
                assert_eq!(out.status.code(), Some(1), "{doc}: {what}: {err}");
                assert!(
                    err.contains(message),
                    "{doc}: {what} fails otherwise:\n{err}"
                );
                return;
            }
            assert!(
                out.status.success(),
                "{doc}: {what} failed:\n{}",
                common::stderr(out)
            );
            if let Some(expected) = expected {
                if let Err(e) = common::compare(expected, &common::stdout(out)) {
                    panic!("{doc}: {what} prints other than shown: {e}");
                }
            }
        };
        match b.info.as_str() {
            "tl" => {
                let dir = scratch(root);
                common::write(dir.path(), "main.tl", &format!("{}\n", b.body));
                compare(&b.body, &common::tl(dir.path(), &["run", "main.tl"]));
                programs += 1;
            }
            "sh" => {
                let dir = scratch(root);
                let runnable: Vec<String> = commands(&b.body)
                    .into_iter()
                    .map(|c| c.replace("cargo run --release --", "tl"))
                    .filter(|c| c.starts_with("tl "))
                    .collect();
                for (n, c) in runnable.iter().enumerate() {
                    let out = shell(dir.path(), c);
                    match n + 1 == runnable.len() {
                        true => compare(c, &out),
                        false => {
                            assert!(out.status.success(), "{doc}: {c}: {}", common::stderr(&out))
                        }
                    }
                    commands_run += 1;
                }
            }
            info => {
                if let Some(file) = info.strip_prefix("tl ") {
                    let quoted = std::fs::read_to_string(root.join(file.trim())).unwrap();
                    assert!(
                        quoted.contains(b.body.as_str()),
                        "{doc} quotes {file} wrongly:\n{}",
                        b.body
                    );
                    excerpts += 1;
                }
            }
        }
    }
    (excerpts, programs, commands_run)
}

#[test]
fn the_readme_runs_as_shown() {
    let (_, programs, commands) = check("README.md");
    assert!(
        programs >= 3 && commands >= 3,
        "{programs} programs, {commands} commands"
    );
}

#[test]
fn the_guide_shows_what_the_examples_contain_and_print() {
    let (excerpts, _, commands) = check("docs/guide.md");
    assert!(
        excerpts >= 6 && commands >= 8,
        "{excerpts} excerpts, {commands} commands"
    );
}

#[test]
fn the_reference_runs_as_shown() {
    let (_, programs, commands) = check("docs/reference.md");
    assert!(
        programs >= 10 && commands >= 1,
        "{programs} programs, {commands} commands"
    );
}
