//! The training loop (§12): batches, gradients, updates, metrics and checkpoints.
//!
//! The loop reports through [`Event`]s so that the CLI can draw a progress bar or print
//! plain lines while the library stays free of terminal code. Everything random (batch
//! order) derives from the seed and the epoch number, and a checkpoint stores the step count,
//! so a resumed run continues exactly as an uninterrupted one.

use super::batch::{self, Batching};
use super::checkpoint::{self, Checkpoint};
use super::optim::{self, State};
use super::{loss_tensor, planned_gradients};
use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::eval::{Engine, EvalOptions, Standard};
use crate::plan::backward::Backward;
use crate::plan::Plan;
use crate::semantics::{Checked, TensorId};
use crate::tensor::{ElemType, Tensor};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What `tl train` was asked to do.
#[derive(Clone, Debug)]
pub struct TrainOptions {
    /// Name of the scalar loss tensor.
    pub loss: String,
    /// Optimizer settings (`total_steps` is filled in by [`train`]).
    pub optimizer: optim::Config,
    /// Passes over the data.
    pub epochs: u64,
    /// Stop after this many steps in all (across resumes), if given.
    pub steps: Option<u64>,
    /// `--batch Domain:N`.
    pub batch: Option<(String, usize)>,
    /// Reshuffle the examples every epoch.
    pub shuffle: bool,
    /// Parameters held fixed.
    pub freeze: Vec<String>,
    /// Seed of the batch order.
    pub seed: u64,
    /// Checkpoint path, written at the end and every `save_every` steps.
    pub save: Option<PathBuf>,
    /// Steps between saves.
    pub save_every: Option<u64>,
    /// The checkpoint this run resumed from, whose optimizer state and step count it continues.
    pub resume: Option<Checkpoint>,
    /// Metric tensors (scalars) evaluated on the full data after each epoch.
    pub eval: Vec<String>,
    /// Set it (from a progress callback) to end training after the current step, keeping
    /// what it learned and writing the checkpoint as at the end.
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// `tl train`'s defaults: the loss `Loss`, one epoch of the whole data, no checkpoint.
impl Default for TrainOptions {
    fn default() -> TrainOptions {
        TrainOptions {
            loss: "Loss".into(),
            optimizer: optim::Config::default(),
            epochs: 1,
            steps: None,
            batch: None,
            shuffle: false,
            freeze: Vec::new(),
            seed: 0,
            save: None,
            save_every: None,
            resume: None,
            eval: Vec::new(),
            stop: None,
        }
    }
}

/// Progress of a run, for the caller to display or log.
#[derive(Clone, Debug)]
pub enum Event {
    /// A step finished.
    Step {
        /// Steps taken so far (across resumes).
        step: u64,
        /// Total steps this run will reach.
        total: u64,
        /// Epoch (from 1).
        epoch: u64,
        /// The batch's loss before the update.
        loss: f64,
        /// Learning rate used.
        lr: f64,
        /// Examples per second over this step.
        examples_per_sec: f64,
    },
    /// An epoch finished; the metrics of `--eval`.
    Epoch {
        /// Epoch (from 1).
        epoch: u64,
        /// `(name, value)` per metric.
        metrics: Vec<(String, f64)>,
    },
    /// The route each stratum's adjoints took in a step (`tl train --decisions`): reported
    /// at the first step, and again whenever a step's routes differ from the last reported.
    Routes {
        /// The step (from 1).
        step: u64,
        /// One line per stratum, as the decision log prints it.
        log: String,
        /// Whether a route declined at run time (it differs from the backward plan).
        declined: bool,
    },
    /// A checkpoint was written.
    Saved {
        /// Where.
        path: PathBuf,
        /// At which step.
        step: u64,
    },
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct Trained {
    /// Trained parameter values by name.
    pub params: BTreeMap<String, Tensor>,
    /// Loss of each step taken in this run.
    pub losses: Vec<f64>,
    /// Steps taken in all.
    pub step: u64,
}

/// Trains `p`'s parameters to minimise its loss.
pub fn train(
    p: &Checked,
    opts: &TrainOptions,
    o: &EvalOptions,
    report: &mut dyn FnMut(Event),
) -> Result<Trained, Diagnostics> {
    check_options(&opts.optimizer)?;
    let loss = loss_tensor(p, &opts.loss)?;
    let trainable = trainable(p, &opts.freeze)?;
    depends_on_parameters(p, loss, &trainable)?;
    let metrics: Vec<TensorId> = opts
        .eval
        .iter()
        .map(|n| metric(p, n))
        .collect::<Result<_, _>>()?;
    let (batching, per_epoch) = batches(p, opts)?;
    if batching.is_none() {
        // Refused before the parameters' f64 copies and the program's copy are made.
        super::fits_step(p, &crate::plan::plan(p), o, (loss, &trainable))?;
    }
    let total = opts.steps.unwrap_or(per_epoch * opts.epochs);
    let mut config = opts.optimizer.clone();
    config.total_steps = total;
    let mut params = initial_values(p, &trainable);
    let elems: Vec<ElemType> = trainable.iter().map(|&t| p.tensors[t].elem).collect();
    let mut state = resume_state(p, &trainable, opts.resume.as_ref());
    let mut program = p.clone();
    let mut plans = Plans {
        loss,
        trainable: &trainable,
        by_size: BTreeMap::new(),
        shown: None,
    };
    let mut losses = Vec::new();
    let mut order = EpochOrder::default();
    let _awake = crate::eval::keep_awake(o);
    while state.step < total {
        let step = state.step;
        let epoch = step / per_epoch;
        let start = std::time::Instant::now();
        // The program this step differentiates: a batch of it, or (without --batch) the
        // whole program, updated in place rather than copied.
        let mut sliced = None;
        let examples = match &batching {
            Some(b) => {
                let rows = order.batch(b, opts, (step, per_epoch));
                sliced = Some(batch::slice(&program, b, rows));
                rows.len()
            }
            None => 1,
        };
        let step_program = sliced.as_mut().unwrap_or(&mut program);
        for (&t, values) in trainable.iter().zip(&params) {
            step_program.data[t] = to_tensor(p, t, values);
        }
        let g = plans.gradients((p, step_program), examples, o, (state.step + 1, report))?;
        if !g.loss.is_finite() {
            return Err(not_finite(g.loss, (step, epoch), opts.save.as_deref()));
        }
        let mut grads = g.grads;
        let lr = config.lr_at(step);
        config.update(&mut state, (&mut params, &elems), &mut grads, o.threads);
        losses.push(g.loss);
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        report(Event::Step {
            step: state.step,
            total,
            epoch: epoch + 1,
            loss: g.loss,
            lr,
            examples_per_sec: examples as f64 / secs,
        });
        let epoch_done = state.step.is_multiple_of(per_epoch) || state.step == total;
        if epoch_done && !metrics.is_empty() {
            for (&t, values) in trainable.iter().zip(&params) {
                program.data[t] = to_tensor(p, t, values);
            }
            report(Event::Epoch {
                epoch: epoch + 1,
                metrics: evaluate_metrics(&program, &metrics, o)?,
            });
        }
        let stopping = stop_requested(opts);
        if let (Some(path), true) = (&opts.save, saves_at(opts, state.step, total) || stopping) {
            save(p, &trainable, &params, &state, path)?;
            report(Event::Saved {
                path: path.clone(),
                step: state.step,
            });
        }
        if stopping {
            break;
        }
    }
    Ok(Trained {
        params: named_tensors(p, &trainable, &params),
        losses,
        step: state.step,
    })
}

/// The run's minibatches (`--batch`), if any, and the steps an epoch takes.
fn batches(p: &Checked, opts: &TrainOptions) -> Result<(Option<Batching>, u64), Diagnostics> {
    let batching = match &opts.batch {
        Some((name, size)) => Some(batch::batching(p, name, *size)?),
        None => None,
    };
    let per_epoch = batching
        .as_ref()
        .map_or(1, |b| b.examples.div_ceil(b.size).max(1)) as u64;
    Ok((batching, per_epoch))
}

/// The plans of a run, made once each: one per batch size (a last, smaller batch has its
/// own), each with its backward plan; and the backward routes last reported.
struct Plans<'a> {
    loss: TensorId,
    trainable: &'a [TensorId],
    by_size: BTreeMap<usize, (Plan, Backward)>,
    shown: Option<Vec<super::Routed>>,
}

impl Plans<'_> {
    /// The gradients of one step's program (`p` the program as checked, for names), over
    /// `examples` examples; reports the backward routes the step took where they differ
    /// from those last reported.
    fn gradients(
        &mut self,
        (p, program): (&Checked, &Checked),
        examples: usize,
        o: &EvalOptions,
        (step, report): (u64, &mut dyn FnMut(Event)),
    ) -> Result<super::Gradients, Diagnostics> {
        let (loss, trainable) = (self.loss, self.trainable);
        let (plan, backward) = self.by_size.entry(examples).or_insert_with(|| {
            let plan = crate::plan::plan(program);
            let backward = Backward::new(program, &plan, loss, trainable);
            (plan, backward)
        });
        let g = planned_gradients((program, plan, backward), o, trainable)?;
        if self.shown.as_ref() != Some(&g.routes) {
            report(Event::Routes {
                step,
                log: crate::explain_backward::routes(p, backward, &g.routes),
                declined: g.routes.iter().any(|r| r.reason.is_some()),
            });
            self.shown = Some(g.routes.clone());
        }
        Ok(g)
    }
}

/// Whether the caller asked training to stop (Ctrl-C): it stops after the step under way.
fn stop_requested(opts: &TrainOptions) -> bool {
    opts.stop
        .as_ref()
        .is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst))
}

/// The trained parameters as tensors of their declared types, by name.
fn named_tensors(
    p: &Checked,
    trainable: &[TensorId],
    params: &[Vec<f64>],
) -> BTreeMap<String, Tensor> {
    trainable
        .iter()
        .zip(params)
        .filter_map(|(&t, v)| Some((p.tensors[t].name.clone(), to_tensor(p, t, v)?)))
        .collect()
}

/// Each parameter's starting values, row-major in f64 (what the optimizer updates).
fn initial_values(p: &Checked, trainable: &[TensorId]) -> Vec<Vec<f64>> {
    trainable
        .iter()
        .map(|&t| {
            p.data[t]
                .as_ref()
                .map(Tensor::to_dense_values)
                .unwrap_or_default()
        })
        .collect()
}

/// Whether a checkpoint is written after `step` steps of `total`: every `--save-every`
/// steps, and at the end.
fn saves_at(opts: &TrainOptions, step: u64, total: u64) -> bool {
    let due = opts
        .save_every
        .is_some_and(|every| every > 0 && step.is_multiple_of(every));
    due || step == total
}

/// An error unless the loss depends on a parameter that trains: otherwise every step would
/// leave the parameters as they are.
fn depends_on_parameters(
    p: &Checked,
    loss: TensorId,
    trainable: &[TensorId],
) -> Result<(), Diagnostics> {
    match crate::plan::backward::active(p, loss, trainable)[loss] {
        true => Ok(()),
        false => Err(Diagnostic::error(
            codes::TRAIN,
            p.tensors[loss].span,
            format!(
                "the loss `{}` does not depend on any trainable parameter",
                p.tensors[loss].name
            ),
        )
        .with_note("use a parameter in the loss's equations, or unfreeze one")
        .into()),
    }
}

/// The error for a loss that became NaN or infinite at `(step, epoch)` (both from 0):
/// training stops there, and says where the last good parameters are.
fn not_finite(loss: f64, (step, epoch): (u64, u64), save: Option<&std::path::Path>) -> Diagnostics {
    Diagnostic::global(
        codes::TRAIN,
        format!(
            "the loss became {loss} at step {} (epoch {})",
            step + 1,
            epoch + 1
        ),
    )
    .with_note(match save {
        Some(path) => format!(
            "training stopped; `{}` holds the last good checkpoint, if one was saved",
            path.display()
        ),
        None => "training stopped; nothing was saved".to_string(),
    })
    .with_note("lower --lr, add --clip, or check the loss for log(0) or division by zero")
    .into()
}

/// The scalar `metrics` of the whole program with the current parameters (`--eval`).
fn evaluate_metrics(
    program: &Checked,
    metrics: &[TensorId],
    o: &EvalOptions,
) -> Result<Vec<(String, f64)>, Diagnostics> {
    let values = Standard.evaluate(program, o)?;
    Ok(metrics
        .iter()
        .map(|&m| {
            (
                program.tensors[m].name.clone(),
                values[m].get(&[]).unwrap_or(0.0),
            )
        })
        .collect())
}

/// Option values that make no sense are errors, not silent misbehaviour (a negative clip
/// would flip every gradient).
fn check_options(c: &optim::Config) -> Result<(), Diagnostics> {
    let mut errors = Vec::new();
    let mut bad = |what: &str, v: f64, want: &str| {
        errors.push(Diagnostic::global(
            codes::TRAIN,
            format!("{what} is {v}, but it must be {want}"),
        ))
    };
    if !c.lr.is_finite() || c.lr < 0.0 {
        bad("--lr", c.lr, "a finite number ≥ 0");
    }
    if !(0.0..1.0).contains(&c.momentum) {
        bad("--momentum", c.momentum, "in [0, 1)");
    }
    if !c.weight_decay.is_finite() || c.weight_decay < 0.0 {
        bad("--weight-decay", c.weight_decay, "a finite number ≥ 0");
    }
    if let Some(clip) = c.clip {
        if !clip.is_finite() || clip <= 0.0 {
            bad("--clip", clip, "a finite number > 0");
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Diagnostics(errors))
    }
}

/// The parameters a run trains: every one but those frozen (E0801 for a name that is none).
pub(crate) fn trainable(p: &Checked, freeze: &[String]) -> Result<Vec<TensorId>, Diagnostics> {
    let mut errors = Vec::new();
    for name in freeze {
        if !p.params.iter().any(|&t| &p.tensors[t].name == name) {
            errors.push(
                Diagnostic::global(codes::TRAIN, format!("--freeze names `{name}`, which is not a parameter"))
                    .with_note("parameters are tensors declared or initialised with `~` and defined by no data or equation"),
            );
        }
    }
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }
    let t: Vec<TensorId> = p
        .params
        .iter()
        .copied()
        .filter(|&t| !freeze.contains(&p.tensors[t].name))
        .collect();
    if t.is_empty() {
        return Err(Diagnostic::global(codes::TRAIN, "the program has no parameters to train")
            .with_note("declare one (`W : real[4, 3]`) or initialise one (`W ~ normal(0, 0.1)`) and use it in the loss")
            .into());
    }
    Ok(t)
}

/// A `--eval` metric: a real scalar.
fn metric(p: &Checked, name: &str) -> Result<TensorId, Diagnostics> {
    loss_tensor(p, name).map_err(|_| {
        Diagnostics::from(Diagnostic::global(
            codes::TRAIN,
            format!("--eval names `{name}`, which is not a real scalar tensor of this program"),
        ))
    })
}

/// The optimizer state a checkpoint saved, matched to the trainable parameters.
fn resume_state(p: &Checked, trainable: &[TensorId], c: Option<&Checkpoint>) -> State {
    let Some(c) = c else {
        return State::default();
    };
    let size = |t: TensorId| p.tensors[t].shape.iter().product::<usize>();
    let pick = |m: &BTreeMap<String, Vec<f64>>| -> Vec<Vec<f64>> {
        trainable
            .iter()
            .map(|&t| match m.get(&p.tensors[t].name) {
                Some(v) if v.len() == size(t) => v.clone(),
                _ => vec![0.0; size(t)],
            })
            .collect()
    };
    State {
        step: c.step,
        m: pick(&c.m),
        v: pick(&c.v),
    }
}

/// Examples in the order epoch `epoch` visits them.
/// The order of the examples in the current epoch, drawn once per epoch.
#[derive(Default)]
struct EpochOrder {
    rows: Vec<usize>,
    epoch: u64,
}

impl EpochOrder {
    /// The examples of step `step` (of `per_epoch` a epoch): its batch of this epoch's order.
    fn batch(
        &mut self,
        b: &Batching,
        opts: &TrainOptions,
        (step, per_epoch): (u64, u64),
    ) -> &[usize] {
        let epoch = step / per_epoch;
        if self.epoch != epoch || self.rows.is_empty() {
            self.rows = epoch_order(b, opts.shuffle, opts.seed, epoch);
            self.epoch = epoch;
        }
        let n = self.rows.len();
        let at = ((step % per_epoch) as usize) * b.size;
        &self.rows[at.min(n)..(at + b.size).min(n)]
    }
}

fn epoch_order(b: &Batching, shuffle: bool, seed: u64, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..b.examples).collect();
    if shuffle {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
            seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        order.shuffle(&mut rng);
    }
    order
}

fn to_tensor(p: &Checked, t: TensorId, values: &[f64]) -> Option<Tensor> {
    Tensor::dense_from(p.tensors[t].elem, p.tensors[t].shape.clone(), values).ok()
}

fn save(
    p: &Checked,
    trainable: &[TensorId],
    params: &[Vec<f64>],
    state: &State,
    path: &std::path::Path,
) -> Result<(), Diagnostics> {
    let mut c = Checkpoint {
        step: state.step,
        ..Checkpoint::default()
    };
    for &t in &p.params {
        let values = match trainable.iter().position(|&x| x == t) {
            Some(k) => to_tensor(p, t, &params[k]),
            None => p.data[t].clone(),
        };
        if let Some(v) = values {
            c.params.insert(p.tensors[t].name.clone(), v);
        }
    }
    for (k, &t) in trainable.iter().enumerate() {
        let name = p.tensors[t].name.clone();
        if let Some(m) = state.m.get(k) {
            c.m.insert(name.clone(), m.clone());
        }
        if let Some(v) = state.v.get(k) {
            c.v.insert(name, v.clone());
        }
    }
    checkpoint::save(&c, path).map_err(|e| Diagnostic::global(codes::CHECKPOINT, e).into())
}
