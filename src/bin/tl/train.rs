//! `tl train`: options, progress display, the metrics log and the loss plot. The training
//! itself is `Session::train`.

use clap::Args;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use tensor_logic::learn::optim;
use tensor_logic::learn::train::{Event, TrainOptions};
use tensor_logic::tensor::format_number;
use tensor_logic::ElemType;

/// `tl train FILE`: trains, then (where the program has outputs) evaluates the trained
/// program on its full data, or checks its gradients (`--check-grad`).
pub(crate) fn command(
    file: &Path,
    set: &[(String, f64)],
    args: &TrainArgs,
    common: &super::Common,
) -> Result<(), String> {
    let mut session = super::load(file)?;
    let resume = match args.load() {
        Some(ckpt) => Some(
            session
                .load_parameters(ckpt)
                .map_err(|d| super::render(&session, &d))?,
        ),
        None => None,
    };
    let opts = common.run_options(set, true);
    if args.check_grad() {
        return check_gradients(&mut session, &opts, args);
    }
    let mut progress = Progress::new(common.quiet, args.decisions);
    let result = session.train(&opts, &args.options(resume, common.seed), &mut |e| {
        progress.event(e)
    });
    super::warn(&session);
    let last = progress.finish();
    if let Some(path) = args.log_path() {
        progress
            .write_log(path)
            .map_err(|e| format!("error[E0501]: {e}\n"))?;
    }
    if let Some(path) = args.plot_path() {
        progress
            .plot(path)
            .map_err(|e| format!("error[E0501]: {e}\n"))?;
    }
    let trained = result.map_err(|d| super::render(&session, &d))?;
    if !common.quiet {
        let last = last.map(|l| tensor_logic::tensor::format_number(l, ElemType::F32));
        eprintln!(
            "trained {} steps; last loss {}",
            trained.step,
            last.as_deref().unwrap_or("-")
        );
    }
    // The trained program answers its queries and writes its files on the full data;
    // one without outputs (a model trained for its loss curve and checkpoint) is not
    // evaluated again.
    let checked = session.check(&opts.settings);
    if checked.is_ok_and(|c| c.outputs.is_empty()) {
        return Ok(());
    }
    let lines = session
        .run(&opts)
        .map_err(|d| super::render(&session, &d))?;
    super::print_lines(&lines);
    Ok(())
}

/// `tl train --check-grad`: each parameter's worst relative error against finite
/// differences; an error (with nothing more to print) when one is over the tolerance.
fn check_gradients(
    session: &mut tensor_logic::Session,
    opts: &tensor_logic::RunOptions,
    args: &TrainArgs,
) -> Result<(), String> {
    let (loss, freeze) = args.loss_and_freeze();
    let checks = session
        .check_gradients(opts, loss, freeze, 20)
        .map_err(|d| super::render(session, &d))?;
    for c in &checks {
        println!(
            "{}: worst relative error {:.3e} over {} elements, {} with a gradient that is not 0 (at element {}; largest gradient {:.3e})",
            c.name, c.worst, c.checked, c.nonzero, c.at, c.largest
        );
    }
    let unseen: Vec<&str> = checks
        .iter()
        .filter(|c| c.checked > 0 && c.nonzero == 0)
        .map(|c| c.name.as_str())
        .collect();
    if !unseen.is_empty() {
        println!(
            "note: every gradient of {} is 0 at this point, so the check saw nothing to compare there",
            unseen.join(", ")
        );
    }
    let tolerance = tensor_logic::learn::gradcheck::TOLERANCE;
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| !c.passes())
        .map(|c| c.name.as_str())
        .collect();
    if failed.is_empty() {
        println!("gradient check passed: every worst relative error is within {tolerance:e}");
        return Ok(());
    }
    println!(
        "gradient check failed: {} over the tolerance {tolerance:e}",
        failed.join(", ")
    );
    Err(String::new())
}

/// Options of §12.
#[derive(Args, Clone)]
pub struct TrainArgs {
    /// The scalar tensor to minimise.
    #[arg(long, default_value = "Loss")]
    loss: String,
    /// Update rule.
    #[arg(long, default_value = "adam", value_parser = ["sgd", "adam", "adamw"])]
    optimizer: String,
    /// Learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.0)]
    momentum: f64,
    /// Weight decay (L2 for sgd/adam, decoupled for adamw).
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f64,
    /// Clip the global gradient norm to this value.
    #[arg(long)]
    clip: Option<f64>,
    /// Passes over the data.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Total optimizer steps (overrides --epochs).
    #[arg(long)]
    steps: Option<u64>,
    /// Learning-rate schedule after warmup.
    #[arg(long, default_value = "constant", value_parser = ["constant", "cosine"])]
    lr_schedule: String,
    /// Steps of linear learning-rate warmup.
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Minibatches over a domain, e.g. `--batch Example:64`.
    #[arg(long, value_name = "DOMAIN:N", value_parser = parse_batch)]
    batch: Option<(String, usize)>,
    /// Reshuffle the examples every epoch (from --seed).
    #[arg(long)]
    shuffle: bool,
    /// Hold a parameter fixed (repeatable).
    #[arg(long, value_name = "NAME")]
    freeze: Vec<String>,
    /// Write parameters and optimizer state here (at the end and every --save-every steps).
    #[arg(long, value_name = "CKPT")]
    save: Option<PathBuf>,
    /// Steps between checkpoints.
    #[arg(long, value_name = "N")]
    save_every: Option<u64>,
    /// Resume from a checkpoint: its parameters, optimizer state and step count.
    #[arg(long, value_name = "CKPT")]
    load: Option<PathBuf>,
    /// Write per-step metrics as CSV.
    #[arg(long, value_name = "CSV")]
    log: Option<PathBuf>,
    /// Draw the loss curve as SVG.
    #[arg(long, value_name = "SVG")]
    plot: Option<PathBuf>,
    /// Print this scalar tensor after each epoch, evaluated on the full data (repeatable).
    #[arg(long, value_name = "NAME")]
    eval: Vec<String>,
    /// Compare analytic gradients with finite differences (in f64) instead of training.
    #[arg(long)]
    check_grad: bool,
    /// Print, on stderr, the route each stratum's gradient took in the first step (and in
    /// any later step whose routes change), the planned one where they differ, and why.
    #[arg(long)]
    decisions: bool,
}

fn parse_batch(s: &str) -> Result<(String, usize), String> {
    let (name, n) = s
        .split_once(':')
        .ok_or("expected DOMAIN:N, e.g. Example:64")?;
    let n: usize = n
        .trim()
        .parse()
        .map_err(|_| format!("`{n}` is not a batch size"))?;
    if n == 0 {
        return Err("a batch needs at least one example".into());
    }
    Ok((name.trim().to_string(), n))
}

impl TrainArgs {
    /// Whether to compare gradients instead of training.
    pub fn check_grad(&self) -> bool {
        self.check_grad
    }

    /// Loss name and frozen parameters, for the gradient check.
    pub fn loss_and_freeze(&self) -> (&str, &[String]) {
        (&self.loss, &self.freeze)
    }

    /// Where `--log` writes.
    pub fn log_path(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// Where `--plot` draws.
    pub fn plot_path(&self) -> Option<&Path> {
        self.plot.as_deref()
    }

    /// The checkpoint to resume from.
    pub fn load(&self) -> Option<&Path> {
        self.load.as_deref()
    }

    /// Library options, given the resumed checkpoint and the seed.
    pub fn options(
        &self,
        resume: Option<tensor_logic::learn::checkpoint::Checkpoint>,
        seed: u64,
    ) -> TrainOptions {
        TrainOptions {
            loss: self.loss.clone(),
            optimizer: optim::Config {
                kind: match self.optimizer.as_str() {
                    "sgd" => optim::Kind::Sgd,
                    "adamw" => optim::Kind::AdamW,
                    _ => optim::Kind::Adam,
                },
                lr: self.lr,
                momentum: self.momentum,
                weight_decay: self.weight_decay,
                clip: self.clip,
                schedule: if self.lr_schedule == "cosine" {
                    optim::Schedule::Cosine
                } else {
                    optim::Schedule::Constant
                },
                warmup: self.warmup,
                total_steps: 0,
            },
            epochs: self.epochs,
            steps: self.steps,
            batch: self.batch.clone(),
            shuffle: self.shuffle,
            freeze: self.freeze.clone(),
            seed,
            save: self.save.clone(),
            save_every: self.save_every,
            resume,
            eval: self.eval.clone(),
            stop: None,
        }
    }
}

/// One row of `--log`.
struct Row {
    step: u64,
    epoch: u64,
    loss: f64,
    lr: f64,
    examples_per_sec: f64,
    metrics: Vec<(String, f64)>,
}

/// Shows progress (a bar on a terminal, plain lines otherwise) and keeps the metrics log.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    quiet: bool,
    /// Print every report of the backward routes, not only those where one declined.
    decisions: bool,
    rows: Vec<Row>,
}

impl Progress {
    /// A display for a run; `quiet` prints nothing, `decisions` the backward routes.
    pub fn new(quiet: bool, decisions: bool) -> Progress {
        Progress {
            bar: None,
            quiet,
            decisions,
            rows: Vec::new(),
        }
    }

    /// Handles one event of the run.
    pub fn event(&mut self, e: Event) {
        match e {
            Event::Step {
                step,
                total,
                epoch,
                loss,
                lr,
                examples_per_sec,
            } => {
                self.rows.push(Row {
                    step,
                    epoch,
                    loss,
                    lr,
                    examples_per_sec,
                    metrics: Vec::new(),
                });
                if self.quiet {
                    return;
                }
                if std::io::stderr().is_terminal() {
                    let bar = self.bar.get_or_insert_with(|| {
                        let b = indicatif::ProgressBar::new(total);
                        if let Ok(style) = indicatif::ProgressStyle::with_template(
                            "{bar:30} {pos}/{len} steps  {msg}  [{elapsed} < {eta}]",
                        ) {
                            b.set_style(style);
                        }
                        b
                    });
                    bar.set_position(step);
                    bar.set_message(format!(
                        "epoch {epoch}  loss {loss:.6}  {examples_per_sec:.0} examples/s"
                    ));
                } else if step == total || step % (total / 20).max(1) == 0 {
                    eprintln!(
                        "step {step}/{total}  epoch {epoch}  loss {loss:.6}  lr {lr:.3e}  {examples_per_sec:.0} examples/s"
                    );
                }
            }
            Event::Epoch { epoch, metrics } => {
                if let Some(row) = self.rows.last_mut() {
                    row.metrics = metrics.clone();
                }
                if self.quiet {
                    return;
                }
                let shown: Vec<String> = metrics
                    .iter()
                    .map(|(n, v)| format!("{n} = {}", format_number(*v, ElemType::F32)))
                    .collect();
                let line = format!("epoch {epoch}: {}", shown.join(", "));
                match &self.bar {
                    Some(bar) => bar.println(line),
                    None => eprintln!("{line}"),
                }
            }
            Event::Routes {
                step,
                log,
                declined,
            } => {
                // A route that declined to the reference loops is never silent.
                if self.decisions || (declined && !self.quiet) {
                    let text = format!("backward routes at step {step}:\n{log}");
                    match &self.bar {
                        Some(bar) => bar.println(text.trim_end()),
                        None => eprint!("{text}"),
                    }
                }
            }
            Event::Saved { path, step } => {
                if !self.quiet && self.bar.is_none() {
                    eprintln!("saved {} at step {step}", path.display());
                }
            }
        }
    }

    /// Ends the display; the last loss, if any.
    pub fn finish(&mut self) -> Option<f64> {
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
        self.rows.last().map(|r| r.loss)
    }

    /// Writes the per-step metrics as CSV.
    pub fn write_log(&self, path: &Path) -> Result<(), String> {
        let names: Vec<String> = self
            .rows
            .iter()
            .flat_map(|r| r.metrics.iter().map(|(n, _)| n.clone()))
            .fold(Vec::new(), |mut acc, n| {
                if !acc.contains(&n) {
                    acc.push(n);
                }
                acc
            });
        let mut w = csv::Writer::from_path(path)
            .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
        let mut header = vec!["step", "epoch", "loss", "lr", "examples_per_sec"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        header.extend(names.iter().cloned());
        let mut rows = vec![header];
        for r in &self.rows {
            let mut row = vec![
                r.step.to_string(),
                r.epoch.to_string(),
                r.loss.to_string(),
                r.lr.to_string(),
                format!("{:.1}", r.examples_per_sec),
            ];
            for n in &names {
                row.push(
                    r.metrics
                        .iter()
                        .find(|(m, _)| m == n)
                        .map_or(String::new(), |(_, v)| v.to_string()),
                );
            }
            rows.push(row);
        }
        for row in rows {
            w.write_record(&row)
                .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
        }
        w.flush()
            .map_err(|e| format!("cannot write `{}`: {e}", path.display()))
    }

    /// Draws the loss against the step as an SVG line chart.
    pub fn plot(&self, path: &Path) -> Result<(), String> {
        use plotters::prelude::*;
        let err = |e: &dyn std::fmt::Display| format!("cannot draw `{}`: {e}", path.display());
        let points: Vec<(f64, f64)> = self
            .rows
            .iter()
            .filter(|r| r.loss.is_finite())
            .map(|r| (r.step as f64, r.loss))
            .collect();
        let (lo, hi) = points
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(_, l)| {
                (lo.min(l), hi.max(l))
            });
        let (lo, hi) = if lo.is_finite() {
            (lo, hi.max(lo + 1e-12))
        } else {
            (0.0, 1.0)
        };
        let last = points.last().map_or(1.0, |p| p.0.max(1.0));
        let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption("training loss", ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..last, lo..hi)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc("loss")
            .draw()
            .map_err(|e| err(&e))?;
        chart
            .draw_series(LineSeries::new(points, &BLUE))
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))
    }
}
