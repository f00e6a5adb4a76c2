//! `tl`: the command line (§14), a thin layer over the `tensor_logic` library.
//!
//! Exit codes: 0 success, 1 an error in the program or its data, 2 wrong usage.

mod alloc;
mod fmt;
mod lsp;
mod repl;
mod train;
mod watch;

#[global_allocator]
static ALLOCATOR: alloc::Refusing = alloc::Refusing;

use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tensor_logic::eval::{Cluster, Differential, Engine, Processes, Reference, Standard};
use tensor_logic::{ElemType, RunOptions, Session, Settings};

#[derive(Parser)]
#[command(
    name = "tl",
    version,
    about = "Tensor Logic: run, check and query tensor-equation programs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate a program: write its files and print its query answers.
    Run(Box<RunArgs>),
    /// Parse and check a program; print its diagnostics.
    Check {
        /// Program file.
        file: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Print how each stratum will be evaluated: join orders and indexes, or iteration spaces.
    Explain {
        /// Program file.
        file: PathBuf,
        /// Also print the backward plan of a training step minimising this scalar tensor:
        /// the route each stratum's gradient takes.
        #[arg(long)]
        loss: Option<String>,
        /// With --loss: a parameter held fixed (repeatable).
        #[arg(long, value_name = "NAME", requires = "loss")]
        freeze: Vec<String>,
        /// Also print the schedule: every threshold of work under which an operation stays
        /// on one thread, and the blocks split work comes in, with what set each.
        #[arg(long)]
        schedule: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Time evaluation alone (no parsing, checking, loading or writing), over several runs.
    Bench {
        /// Program file.
        file: PathBuf,
        /// Evaluations to time.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        /// Override a scalar constant, e.g. `--set N=3`.
        #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set)]
        set: Vec<(String, f64)>,
        #[command(flatten)]
        common: Common,
    },
    /// Train the program's parameters to minimise its loss (§12), then print its answers
    /// with the trained parameters.
    Train {
        /// Program file.
        file: PathBuf,
        /// Override a scalar constant, e.g. `--set N=3`.
        #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set)]
        set: Vec<(String, f64)>,
        #[command(flatten)]
        args: Box<train::TrainArgs>,
        #[command(flatten)]
        common: Common,
    },
    /// Explain a fact or a value after evaluating: a fact's derivation of minimal height
    /// (rules with their variables bound, down to given facts), why a fact does not hold
    /// (`--not`), or an element's largest terms with their factors, e.g.
    /// `tl why family.tl 'Ancestor(Alice, Dana)'`.
    Why(Box<WhyArgs>),
    /// Lay programs out in the one canonical style, in place (`-`: standard input to
    /// standard output). Comments and blank-line groups are kept; the meaning never changes.
    Fmt {
        /// Program files, or `-`.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Change nothing; exit 1 if a file would be reformatted (for CI).
        #[arg(long)]
        check: bool,
    },
    /// A Language Server Protocol server on standard input and output, for editors:
    /// diagnostics as you type, hover, go to definition, references, symbols, completion,
    /// signature help and formatting.
    Lsp,
    /// Type statements and queries line by line, each query answered at once.
    Repl {
        /// A program file to load first.
        file: Option<PathBuf>,
        /// Record each derived tuple's round, so that `:why` walks down the rounds to a
        /// derivation of minimal height (4 bytes per tuple the joins derive).
        #[arg(long)]
        provenance: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Evaluate, then keep the answers up to date as facts change: `+Edge(1, 2)` /
    /// `-Edge(1, 2)` lines on standard input, or edits of the program's input files; prints
    /// the answers that appear (`+`) and go (`-`). The standard engine maintains them;
    /// `--engine differential` (or `--processes`) keeps them in a dataflow.
    Watch {
        /// Program file.
        file: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Answer one query, e.g. `tl query family.tl 'Ancestor(Alice, x)'`.
    Query {
        /// Program file.
        file: PathBuf,
        /// The query, with or without the trailing `?`.
        query: String,
        /// Override a scalar constant, e.g. `--set N=3`.
        #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set)]
        set: Vec<(String, f64)>,
        #[command(flatten)]
        common: Common,
    },
}

/// `tl run`'s arguments.
#[derive(Args)]
struct RunArgs {
    /// Program file, or `-` to read the program from standard input.
    file: PathBuf,
    /// Override a scalar constant, e.g. `--set N=3`.
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set)]
    set: Vec<(String, f64)>,
    /// Load parameters from a `.safetensors` checkpoint.
    #[arg(long, value_name = "CKPT")]
    load: Option<PathBuf>,
    /// Also run the reference evaluator and print, on stderr, the largest difference
    /// per tensor; exit 1 when a tensor differs beyond 1e-4 of its largest magnitude.
    #[arg(long)]
    verify: bool,
    /// Print, on stderr, the kernel that evaluated each stratum, the planned one where
    /// they differ, and why a kernel declined.
    #[arg(long)]
    decisions: bool,
    #[command(flatten)]
    common: Common,
}

/// `tl why`'s arguments.
#[derive(Args)]
struct WhyArgs {
    /// Program file.
    file: PathBuf,
    /// The fact or element, e.g. `Ancestor(Alice, Dana)`, `Dist[A, C]`, `Y[3]`.
    atom: String,
    /// Explain why the fact does not hold: each rule's closest instance and the atom
    /// that fails there.
    #[arg(long)]
    not: bool,
    /// Terms shown per value.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Levels of derived factors explained below a value (and of failing atoms below a
    /// fact that does not hold).
    #[arg(long, default_value_t = 2)]
    depth: usize,
    /// `text` (a tree) or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
    /// Record each derived tuple's round while evaluating, so that the derivation of
    /// minimal height is a walk down the rounds rather than a search (4 bytes per tuple
    /// the joins derive).
    #[arg(long)]
    provenance: bool,
    /// Override a scalar constant, e.g. `--set N=3`.
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set)]
    set: Vec<(String, f64)>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Clone)]
struct Common {
    /// Worker threads (default: every core this process may use; results are identical for
    /// any count).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// Precision of `real` tensors.
    #[arg(long, default_value = "f32", value_parser = ["f32", "f64"])]
    precision: String,
    /// Iteration cap for recursive components.
    #[arg(long, default_value_t = 10_000)]
    max_iters: usize,
    /// Convergence tolerance for real recursive components.
    #[arg(long, default_value_t = 1e-6, value_parser = parse_tol)]
    tol: f64,
    /// End evaluation with an error after this many seconds (default: no limit).
    #[arg(long, value_name = "SECONDS", value_parser = parse_timeout)]
    timeout: Option<f64>,
    /// Memory the whole evaluation may use, e.g. `512M`, `4G`, `4GB`, `4GiB` (default: the
    /// smaller of 80% of available memory and the address-space limit).
    #[arg(long, value_parser = parse_bytes)]
    max_memory: Option<u64>,
    /// Seed for parameter initialisation.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print nothing but answers and errors.
    #[arg(long)]
    quiet: bool,
    /// Evaluator: `standard` (semi-naive joins for Datalog, loops otherwise), `reference`
    /// (the oracle: loops everywhere) or `differential` (Datalog strata as a timely +
    /// differential dataflow, the rest on the standard engine).
    #[arg(long, default_value = "standard", value_parser = ["standard", "reference", "differential"])]
    engine: String,
    /// Differential dataflow workers per process (default: `--threads`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    workers: Option<u32>,
    /// Differential dataflow processes taking part (one per machine), with `--process`
    /// and `--hosts`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    processes: u32,
    /// This process's index, 0 to `--processes` − 1; process 0 prints the answers and
    /// writes the files.
    #[arg(long, default_value_t = 0)]
    process: u32,
    /// A file with one `host:port` per line, one line per process in index order.
    #[arg(long, value_name = "FILE")]
    hosts: Option<PathBuf>,
}

fn parse_set(s: &str) -> Result<(String, f64), String> {
    let (name, value) = s.split_once('=').ok_or("expected NAME=VALUE")?;
    let v: f64 = value
        .trim()
        .parse()
        .map_err(|_| format!("`{value}` is not a number"))?;
    Ok((name.trim().to_string(), v))
}

fn parse_tol(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        Ok(_) => Err("a tolerance must be a finite number, zero or more".into()),
        Err(_) => Err(format!("`{s}` is not a number")),
    }
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t.is_finite() && t > 0.0 && t < 1e9 => Ok(t),
        Ok(_) => Err("a timeout must be a positive number of seconds".into()),
        Err(_) => Err(format!("`{s}` is not a number")),
    }
}

/// The flag Ctrl-C sets: the running evaluation then ends with E0403 (a second Ctrl-C
/// exits at once, as 130).
fn interrupt() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let set = flag.clone();
        // Without a handler (one is installed already), Ctrl-C keeps its default effect.
        let _ = ctrlc::set_handler(move || {
            if set.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
        });
        flag
    })
    .clone()
}

/// A size such as `512M`, `4G`, `4GB` or `4GiB`: K, M, G and T (and KiB…TiB) are powers of
/// 1024, as `ulimit` and Docker read them; KB, MB, GB and TB are powers of 1000, as disks are
/// sold. Case is ignored.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let text = s.trim();
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (num, unit) = (text[..split].trim(), &text[split..]);
    let mult: f64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1.0,
        "K" | "KIB" => 1024.0,
        "M" | "MIB" => 1024.0 * 1024.0,
        "G" | "GIB" => 1024.0 * 1024.0 * 1024.0,
        "T" | "TIB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` (use K, M, G or T, KiB…TiB, or KB…TB)"
            ))
        }
    };
    let n: f64 = num.parse().map_err(|_| format!("`{text}` is not a size"))?;
    if !n.is_finite() || n < 0.0 {
        return Err("a size must not be negative".into());
    }
    Ok((n * mult).min(u64::MAX as f64) as u64)
}

impl Common {
    /// The options of a run with these flags, `set` overriding scalar constants; Ctrl-C
    /// ends it with E0403.
    fn run_options(&self, set: &[(String, f64)], write_files: bool) -> RunOptions {
        RunOptions {
            settings: self.settings(set),
            tol: Some(self.tol),
            write_files,
            threads: self.threads(),
            timeout: self.timeout.map(std::time::Duration::from_secs_f64),
            interrupt: Some(interrupt()),
            provenance: false,
        }
    }

    /// `--threads`, or every core this process may use (§14).
    fn threads(&self) -> usize {
        self.threads
            .map_or_else(tensor_logic::eval::default_threads, |t| t as usize)
    }

    fn engine(&self) -> Box<dyn Engine> {
        match self.engine.as_str() {
            "reference" => Box::new(Reference),
            "differential" => Box::new(Differential {
                cluster: self.cluster().unwrap_or_default(),
            }),
            _ => Box::new(Standard),
        }
    }

    /// Where the differential engine's workers run; an error for a wrong combination of
    /// `--processes`, `--process` and `--hosts`.
    fn cluster(&self) -> Result<Cluster, String> {
        let workers = self.workers.map_or(self.threads(), |w| w as usize);
        let (n, i) = (self.processes as usize, self.process as usize);
        if self.engine != "differential"
            && (n > 1 || self.hosts.is_some() || self.workers.is_some())
        {
            return Err(
                "`--workers`, `--processes` and `--hosts` need `--engine differential`\n".into(),
            );
        }
        if i >= n {
            return Err(format!("`--process {i}` is not below `--processes {n}`\n"));
        }
        if n == 1 {
            return Ok(Cluster {
                workers,
                processes: None,
            });
        }
        let Some(file) = &self.hosts else {
            return Err(format!(
                "`--processes {n}` needs `--hosts FILE` (one `host:port` per process)\n"
            ));
        };
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read the hosts file {}: {e}\n", file.display()))?;
        let hosts = tensor_logic::eval::parse_hosts(&text)
            .map_err(|e| format!("{}: {e}\n", file.display()))?;
        if hosts.len() < n {
            return Err(format!(
                "{}: {} host{} for `--processes {n}`\n",
                file.display(),
                hosts.len(),
                if hosts.len() == 1 { "" } else { "s" }
            ));
        }
        Ok(Cluster {
            workers,
            processes: Some(Processes {
                index: i,
                hosts: hosts[..n].to_vec(),
            }),
        })
    }

    /// Whether this process prints answers and writes files (process 0 of several).
    fn gathers(&self) -> bool {
        self.process == 0
    }

    fn settings(&self, scalars: &[(String, f64)]) -> Settings {
        let mut s = Settings {
            real: if self.precision == "f64" {
                ElemType::F64
            } else {
                ElemType::F32
            },
            max_iters: self.max_iters,
            scalars: scalars.to_vec(),
            seed: self.seed,
            ..Settings::default()
        };
        if let Some(m) = self.max_memory {
            s.max_memory = m;
        }
        s
    }
}

/// mimalloc's `mi_option_purge_delay` (the same position in mimalloc 2 and 3).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> ExitCode {
    // By default mimalloc gives freed pages back to the kernel after 10 ms. A training step
    // frees and allocates buffers of the same sizes every step, and faulting them back in
    // took 7% of a step of the character LM (12,400 page faults in ten steps, 570 without).
    // `tl` keeps them for reuse until it exits.
    // SAFETY: mi_option_set only stores an option's value; no allocation depends on it.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(text) => {
            eprint!("{text}");
            ExitCode::from(1)
        }
    }
}

/// `tl run FILE`: evaluates, prints the answers and writes the files; `--verify` compares
/// every tensor with the reference evaluator's.
fn run_program(args: RunArgs) -> Result<(), String> {
    let RunArgs {
        file,
        set,
        load: ckpt,
        verify,
        decisions,
        common,
    } = args;
    common.cluster()?;
    let mut session = load(&file)?;
    if let Some(ckpt) = ckpt {
        session
            .load_parameters(&ckpt)
            .map_err(|d| render(&session, &d))?;
    }
    let opts = common.run_options(&set, common.gathers());
    let engine = common.engine();
    // `--verify` compares every tensor, so it needs them all.
    let result = match verify {
        true => session.run_with(engine.as_ref(), &opts),
        false => session.run_for_answers(engine.as_ref(), &opts),
    };
    warn(&session);
    let lines = result.map_err(|d| render(&session, &d))?;
    if let (true, Some(log)) = (decisions, session.decisions_text()) {
        eprint!("decisions ({} engine):\n{log}", engine.name());
    }
    if !common.gathers() {
        return Ok(());
    }
    print_lines(&lines);
    if verify {
        let diffs = session.verify(&opts).map_err(|d| render(&session, &d))?;
        let report = tensor_logic::verify::report(engine.name(), &diffs);
        if diffs.iter().any(|d| !d.agrees()) {
            return Err(report);
        }
        eprint!("{report}");
    }
    Ok(())
}

/// `tl why FILE ATOM`: evaluates on the standard engine, then explains the atom.
fn why(args: WhyArgs) -> Result<(), String> {
    let WhyArgs {
        file,
        atom,
        not,
        top,
        depth,
        format,
        provenance,
        set,
        common,
    } = args;
    let mut session = load(&file)?;
    let opts = RunOptions {
        provenance,
        ..common.run_options(&set, false)
    };
    session
        .run_with(&Standard, &opts)
        .map_err(|d| render(&session, &d))?;
    warn(&session);
    let options = tensor_logic::why::WhyOptions { top, depth, not };
    let atom = atom.trim().trim_end_matches('?').to_string();
    let tree = session
        .why(&atom, &options)
        .map_err(|d| d.render("<why>", &atom))?;
    match format.as_str() {
        "json" => println!("{}", tree.json()),
        _ => print!("{}", tree.text()),
    }
    Ok(())
}

fn load(file: &Path) -> Result<Session, String> {
    let mut session = Session::new();
    if file == Path::new("-") {
        let mut source = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut source)
            .map_err(|e| format!("cannot read the program from standard input: {e}\n"))?;
        session
            .load_source("<stdin>", &source, Path::new("."))
            .map_err(|d| d.render("<stdin>", &source))?;
        return Ok(session);
    }
    session.load_file(file).map_err(|d| {
        let (name, src) = session.source();
        d.render(name, src)
    })?;
    Ok(session)
}

fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Run(args) => run_program(*args),
        Command::Check { file, common } => {
            let session = load_checked(&file, &common)?;
            if let (false, Some(checked)) = (common.quiet, session.checked()) {
                println!(
                    "ok: {} tensors, {} equations, {} strata",
                    checked.tensors.len(),
                    checked.equations.len(),
                    checked.strata.len()
                );
            }
            Ok(())
        }
        Command::Explain {
            file,
            loss,
            freeze,
            schedule,
            common,
        } => {
            let session = load_checked(&file, &common)?;
            let text = match common.engine.as_str() {
                "differential" => session.explain_dataflow(),
                _ => session.explain_at(common.threads()),
            };
            if let Some(text) = text {
                print!("{text}");
            }
            if let Some(loss) = loss {
                let text = session
                    .explain_backward(&loss, &freeze)
                    .map_err(|d| render(&session, &d))?;
                print!("{text}");
            }
            if schedule {
                print!("{}", tensor_logic::Session::schedule_table());
            }
            Ok(())
        }
        Command::Bench {
            file,
            repeat,
            set,
            common,
        } => {
            let mut session = load(&file)?;
            let opts = common.run_options(&set, false);
            let mut times = session
                .time_evaluation(common.engine().as_ref(), &opts, repeat as usize)
                .map_err(|d| render(&session, &d))?;
            times.sort();
            let ms = |d: Option<&std::time::Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1e3);
            println!(
                "evaluation: min {:.3} ms, median {:.3} ms over {} run{} ({} engine, {} thread{})",
                ms(times.first()),
                ms(times.get(times.len() / 2)),
                times.len(),
                if times.len() == 1 { "" } else { "s" },
                common.engine().name(),
                common.threads(),
                if common.threads() == 1 { "" } else { "s" },
            );
            Ok(())
        }
        Command::Train {
            file,
            set,
            args,
            common,
        } => train::command(&file, &set, &args, &common),
        Command::Watch { file, common } => watch::command(&file, common),
        Command::Fmt { files, check } => fmt::fmt(&files, check),
        Command::Why(args) => why(*args),
        Command::Lsp => lsp::serve(),
        Command::Repl {
            file,
            provenance,
            common,
        } => repl::repl(
            file,
            RunOptions {
                settings: common.settings(&[]),
                tol: Some(common.tol),
                write_files: false,
                threads: common.threads(),
                timeout: common.timeout.map(std::time::Duration::from_secs_f64),
                interrupt: None,
                provenance,
            },
        ),
        Command::Query {
            file,
            query,
            set,
            common,
        } => {
            let opts = common.run_options(&set, false);
            let mut session = load(&file)?;
            if let Err(d) = session.check(&opts.settings) {
                return Err(render(&session, &d));
            }
            warn(&session);
            let q = session
                .prepare_query(&query)
                .map_err(|d| d.render("<query>", &query))?;
            if !q.warnings.is_empty() {
                eprint!(
                    "{}",
                    tensor_logic::diagnostics::render(&q.warnings, "<query>", &query)
                );
            }
            let lines = session
                .answer(common.engine().as_ref(), &opts, &q)
                .map_err(|d| render(&session, &d))?;
            print_lines(&lines);
            Ok(())
        }
    }
}

/// Loads and checks a program; `Err` holds the rendered diagnostics.
fn load_checked(file: &Path, common: &Common) -> Result<Session, String> {
    let mut session = load(file)?;
    if let Err(d) = session.check(&common.settings(&[])) {
        return Err(render(&session, &d));
    }
    warn(&session);
    Ok(session)
}

/// Prints the last check's warnings on stderr.
fn warn(session: &Session) {
    let warnings = session.warnings();
    if !warnings.is_empty() {
        let (name, src) = session.source();
        eprint!("{}", tensor_logic::diagnostics::render(warnings, name, src));
    }
}

fn render(session: &Session, d: &tensor_logic::Diagnostics) -> String {
    let (name, src) = session.source();
    d.render(name, src)
}

fn print_lines(lines: &[String]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for l in lines {
        if writeln!(out, "{l}").is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_bytes("4G"), Ok(4 << 30));
        assert_eq!(parse_bytes("4GiB"), Ok(4 << 30));
        assert_eq!(parse_bytes("4GB"), Ok(4_000_000_000));
        assert_eq!(parse_bytes("512m"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5MiB"), Ok(3 << 19));
        assert_eq!(parse_bytes("100MB"), Ok(100_000_000));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert!(parse_bytes("4X").is_err());
        assert!(parse_bytes("-1G").is_err());
        assert!(parse_bytes("GB").is_err());
    }
}
