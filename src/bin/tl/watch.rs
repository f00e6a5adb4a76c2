//! `tl watch FILE`: evaluates once, then keeps the program up to date: on the standard
//! engine, or in a differential dataflow when a cluster is given. A line `+Edge(1, 2)` or `-Edge(1, 2)` on standard input inserts or removes a
//! fact; a change to one of the program's input files inserts and removes the rows that
//! changed. After each change it prints the query answers that appeared (`+`) and went
//! (`-`). End of input (Ctrl-D) ends it. Over several processes, process 0 does all this;
//! the others serve their share of the dataflow until it ends.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::{Duration, SystemTime};
use tensor_logic::eval::Cluster;
use tensor_logic::{Change, RunOptions, Session};

/// `tl watch FILE`: the program kept by the standard engine (or a dataflow, asked for by
/// name or by spreading it over processes); process 0 takes the changes, the others serve.
pub(crate) fn command(file: &Path, mut common: super::Common) -> Result<(), String> {
    // The standard engine keeps the values, unless the dataflow is asked for by
    // name or by spreading it over processes.
    if common.processes > 1 || common.hosts.is_some() || common.workers.is_some() {
        common.engine = "differential".into();
    }
    if common.engine == "reference" {
        return Err("`tl watch` keeps values on the standard engine or, with `--engine differential`, a dataflow; the reference evaluator cannot\n".into());
    }
    let dataflow = common.engine == "differential";
    let cluster = common.cluster()?;
    let mut session = super::load(file)?;
    let options = RunOptions {
        settings: common.settings(&[]),
        tol: Some(common.tol),
        write_files: true,
        threads: common.threads(),
        timeout: common.timeout.map(std::time::Duration::from_secs_f64),
        interrupt: None,
        provenance: false,
    };
    if cluster.gathers() {
        let cluster = dataflow.then_some(&cluster);
        return watch(session, options, cluster, common.quiet);
    }
    if !common.quiet {
        eprintln!(
            "process {}: serving the dataflow until process 0 ends",
            common.process
        );
    }
    session
        .serve_incremental(&options, &cluster)
        .map_err(|d| super::render(&session, &d))
}

/// How often input files are looked at.
const POLL: Duration = Duration::from_millis(100);

/// One input file: its relation, path, last modification time and rows.
struct Watched {
    relation: String,
    path: PathBuf,
    modified: Option<SystemTime>,
    rows: BTreeSet<Vec<String>>,
}

/// Runs the watch loop until standard input ends.
fn watch(
    mut session: Session,
    options: RunOptions,
    cluster: Option<&Cluster>,
    quiet: bool,
) -> Result<(), String> {
    let lines = match cluster {
        Some(cluster) => session.run_incremental_on(&options, cluster),
        None => session.run_incremental(&options),
    }
    .map_err(|d| rendered(&session, &d))?;
    for l in &lines {
        println!("{l}");
    }
    let mut files = Vec::new();
    for (relation, path) in session.input_files() {
        let rows = session
            .read_rows(&path, &relation)
            .map_err(|d| rendered(&session, &d))?;
        files.push(Watched {
            modified: modified(&path),
            relation,
            path,
            rows: rows.into_iter().collect(),
        });
    }
    if !quiet {
        eprintln!(
            "watching {} input file{}; type +Fact(...) or -Fact(...) to change facts, Ctrl-D to end",
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        );
    }
    let rx = stdin_lines();
    let mut shown: BTreeSet<String> = lines.into_iter().collect();
    loop {
        match rx.recv_timeout(POLL) {
            Ok(line) => {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                match Change::parse(line) {
                    Some(change) => {
                        let rows = [change.fields];
                        let staged = match change.insert {
                            true => session.insert(&change.relation, &rows),
                            false => session.remove(&change.relation, &rows),
                        };
                        match staged {
                            Ok(()) => commit(&mut session, &mut shown, quiet)?,
                            Err(d) => eprint!("{}", rendered(&session, &d)),
                        }
                    }
                    None => {
                        eprintln!("error: `{line}` is not `+Relation(a, b)` or `-Relation(a, b)`")
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if stage_file_edits(&mut session, &mut files) {
                    commit(&mut session, &mut shown, quiet)?;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

/// A diagnostic as the session's program shows it.
fn rendered(s: &Session, d: &tensor_logic::Diagnostics) -> String {
    let (name, src) = s.source();
    d.render(name, src)
}

/// Standard input's lines, read on their own thread so that the loop can poll the files
/// between them.
fn stdin_lines() -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = channel::<String>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        while matches!(stdin.read_line(&mut line), Ok(n) if n > 0) {
            if tx.send(std::mem::take(&mut line)).is_err() {
                return;
            }
        }
    });
    rx
}

/// Stages the rows that edited input files gained and lost since they were last read;
/// whether any file changed. A file that does not read is reported and left as it was.
fn stage_file_edits(session: &mut Session, files: &mut [Watched]) -> bool {
    let mut changed = false;
    for w in files {
        let now = modified(&w.path);
        if now == w.modified {
            continue;
        }
        w.modified = now;
        let rows: BTreeSet<Vec<String>> = match session.read_rows(&w.path, &w.relation) {
            Ok(rows) => rows.into_iter().collect(),
            Err(d) => {
                eprint!("{}", rendered(session, &d));
                continue;
            }
        };
        let gone: Vec<Vec<String>> = w.rows.difference(&rows).cloned().collect();
        let new: Vec<Vec<String>> = rows.difference(&w.rows).cloned().collect();
        let staged = session
            .remove(&w.relation, &gone)
            .and_then(|()| session.insert(&w.relation, &new));
        if let Err(d) = staged {
            eprint!("{}", rendered(session, &d));
            continue;
        }
        w.rows = rows;
        changed = true;
    }
    changed
}

/// Commits the staged facts and prints the answers that appeared and went.
fn commit(session: &mut Session, shown: &mut BTreeSet<String>, quiet: bool) -> Result<(), String> {
    if let Err(d) = session.commit() {
        // A failed dataflow (a lost process) cannot take further commits.
        if d.0
            .iter()
            .any(|e| e.code == tensor_logic::diagnostics::codes::DATAFLOW)
        {
            return Err(rendered(session, &d));
        }
        eprint!("{}", rendered(session, &d));
        return Ok(());
    }
    for fact in session.no_ops().iter().filter(|_| !quiet) {
        let was = match fact.starts_with('+') {
            true => "it held already",
            false => "it did not hold",
        };
        eprintln!("note: `{fact}` changed nothing: {was}");
    }
    let now: BTreeSet<String> = session
        .answers()
        .map_err(|d| rendered(session, &d))?
        .into_iter()
        .collect();
    for gone in shown.difference(&now) {
        println!("-{gone}");
    }
    for new in now.difference(shown) {
        println!("+{new}");
    }
    *shown = now;
    use std::io::Write;
    let _ = std::io::stdout().flush();
    Ok(())
}

fn modified(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
