//! `tl fmt`: writes each program back in the canonical layout, as rustfmt and black do;
//! `--check` changes nothing and fails on a file that would change (for CI); `-` formats
//! standard input to standard output.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Formats `files`; an error (exit 1) where one does not parse, cannot be written, or
/// would change under `--check`.
pub fn fmt(files: &[PathBuf], check: bool) -> Result<(), String> {
    let mut failed = String::new();
    for file in files {
        let outcome = match file == Path::new("-") {
            true => stdin_to_stdout(check),
            false => one_file(file, check),
        };
        if let Err(text) = outcome {
            failed.push_str(&text);
        }
    }
    match failed.is_empty() {
        true => Ok(()),
        false => Err(failed),
    }
}

fn formatted(name: &str, source: &str) -> Result<String, String> {
    tensor_logic::ide::format(source)
        .map_err(|errors| tensor_logic::diagnostics::render(&errors, name, source))
}

fn stdin_to_stdout(check: bool) -> Result<(), String> {
    let mut source = String::new();
    std::io::stdin()
        .read_to_string(&mut source)
        .map_err(|e| format!("cannot read standard input: {e}\n"))?;
    let out = formatted("<stdin>", &source)?;
    if check {
        return match out == source {
            true => Ok(()),
            false => Err(first_difference("<stdin>", &source, &out)),
        };
    }
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write standard output: {e}\n"))
}

fn one_file(file: &Path, check: bool) -> Result<(), String> {
    let name = file.display().to_string();
    let source =
        std::fs::read_to_string(file).map_err(|e| format!("cannot read `{name}`: {e}\n"))?;
    let out = formatted(&name, &source)?;
    if out == source {
        return Ok(());
    }
    if check {
        return Err(first_difference(&name, &source, &out));
    }
    // Written beside the file, then renamed over it: an interrupted write never leaves
    // half a program.
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
    let write = || -> std::io::Result<()> {
        let mut tmp = tempfile::NamedTempFile::new_in(dir.unwrap_or(Path::new(".")))?;
        tmp.write_all(out.as_bytes())?;
        if let Ok(meta) = std::fs::metadata(file) {
            tmp.as_file().set_permissions(meta.permissions())?;
        }
        tmp.persist(file).map_err(|e| e.error)?;
        Ok(())
    };
    write().map_err(|e| format!("cannot write `{name}`: {e}\n"))
}

/// What `--check` prints: the first line that would change, before and after.
fn first_difference(name: &str, before: &str, after: &str) -> String {
    let mut old = before.lines();
    let mut new = after.lines();
    let mut line = 1;
    loop {
        match (old.next(), new.next()) {
            (Some(a), Some(b)) if a == b => line += 1,
            (a, b) => {
                return format!(
                    "{name}:{line}: would be reformatted\n- {}\n+ {}\n",
                    a.unwrap_or(""),
                    b.unwrap_or("")
                )
            }
        }
    }
}
