//! A dataflow kept alive between rounds (incremental mode). Every process of the cluster
//! builds it and feeds its share of the initial inputs. The workers of process 0 then wait
//! for each round's input changes, run the round to completion, and worker 0 sends back
//! the changes of every relation the dataflow computes. The other processes close their
//! inputs after the first round and serve the dataflow (its exchanges and arrangements)
//! until process 0 closes its own, which ends the dataflow everywhere.

use super::quiet::{catching, Hushed};
use super::render::render;
use super::{Cluster, Job, Row, CONNECT_WITHIN};
use crate::eval::Stop;
use crate::semantics::TensorId;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Changes to the dataflow's inputs: the input's index, the tuple, +1 or −1.
pub(super) type InputChanges = Vec<(usize, Row, isize)>;
/// Changes to the tensors it computes, and those a `min=`/`max=` fixpoint made past
/// `--max-iters` ([`super::render::Rendered::unsettled`]).
pub(super) type OutputChanges = (Vec<(TensorId, Row, isize)>, Vec<(TensorId, Row, isize)>);

enum Command {
    /// A round: its number, its input changes, and rows worker 0 sends every worker.
    Round(u64, Arc<InputChanges>, Arc<Vec<Row>>),
    Stop,
}

/// Why a round did not finish.
pub(super) enum Failure {
    /// The stop flag or deadline ended it.
    Stopped,
    /// A worker failed.
    Failed(String),
}

/// The workers of process 0 of a dataflow that stays up between rounds.
pub(super) struct Live {
    commands: Vec<Sender<Command>>,
    results: Receiver<Result<OutputChanges, Failure>>,
    workers: Option<timely::communication::WorkerGuards<()>>,
    round: u64,
    dead: bool,
    /// Panics of the workers (a lost peer) become a round's error instead of a backtrace.
    hushed: Hushed,
}

/// How often a serving worker looks at the stop flag while nothing happens.
const POLL: Duration = Duration::from_millis(100);

impl Live {
    /// Starts this process's workers (process 0 of the cluster, or its only one), each with
    /// the dataflow built and its share of `initial` fed; the first [`Live::round`] returns
    /// what they derive from it. `fingerprint` must be the same in every process.
    pub(super) fn start(
        job: Job,
        initial: InputChanges,
        (cluster, fingerprint): (&Cluster, u64),
        stop: Stop,
    ) -> Result<Live, String> {
        let workers = cluster.workers.max(1);
        let (mut senders, mut receivers) = (Vec::new(), Vec::new());
        for _ in 0..workers {
            let (s, r) = channel::<Command>();
            senders.push(s);
            receivers.push(Some(r));
        }
        let receivers = Arc::new(Mutex::new(receivers));
        let (results_tx, results) = channel();
        let results_tx = Arc::new(Mutex::new(results_tx));
        let (job, initial) = (Arc::new(job), Arc::new(initial));
        let hushed = Hushed::new();
        let (builders, others) = cluster.allocators(fingerprint, CONNECT_WITHIN)?;
        let guards = timely::execute::execute_from(
            builders,
            others,
            timely::WorkerConfig::default(),
            move |worker| {
                let (index, peers) = (worker.index(), worker.peers());
                // Process 0's workers are the first `workers` of the cluster.
                let commands = receivers
                    .lock()
                    .ok()
                    .and_then(|mut r| r.get_mut(index)?.take());
                let Some(commands) = commands else { return };
                let send = |r| {
                    if let Ok(tx) = results_tx.lock() {
                        let _ = tx.send(r);
                    }
                };
                let mut r = render(worker, &job);
                feed(&mut r.inputs, &initial, (index, peers));
                while let Ok(Command::Round(round, changes, notice)) = commands.recv() {
                    feed(&mut r.inputs, &changes, (index, workers));
                    if index == 0 {
                        notice
                            .iter()
                            .for_each(|row| r.notice.update(row.clone(), 1));
                    }
                    for h in r.inputs.iter_mut().chain([&mut r.notice]) {
                        h.advance_to(round + 1);
                        h.flush();
                    }
                    while r.probe.less_than(&(round + 1)) {
                        worker.step();
                        if stop.requested() {
                            send(Err(Failure::Stopped));
                            abandon(worker);
                            return;
                        }
                    }
                    if index == 0 {
                        send(Ok((r.captured.take(), r.unsettled.take())));
                    }
                }
            },
        )?;
        Ok(Live {
            commands: senders,
            results,
            workers: Some(guards),
            round: 0,
            dead: false,
            hushed,
        })
    }

    /// Runs one round with these input changes; the changes of the computed relations.
    pub(super) fn round(&mut self, changes: InputChanges) -> Result<OutputChanges, Failure> {
        self.round_with(changes, Vec::new())
    }

    /// Runs a round that sends `message` to every worker of every process: the
    /// [`serve`] of each other process returns it once this run ends.
    pub(super) fn announce(&mut self, message: Vec<Vec<u32>>) -> Result<(), Failure> {
        // Each row leads with its place, as they may arrive in any order.
        let rows = message.iter().enumerate().map(|(i, m)| {
            let mut row = Row::from_slice(&[i as u32]);
            row.extend_from_slice(m);
            row
        });
        self.round_with(Vec::new(), rows.collect()).map(|_| ())
    }

    fn round_with(
        &mut self,
        changes: InputChanges,
        notice: Vec<Row>,
    ) -> Result<OutputChanges, Failure> {
        if self.dead {
            return Err(Failure::Failed(
                "an earlier round did not finish; start again".into(),
            ));
        }
        let (changes, notice) = (Arc::new(changes), Arc::new(notice));
        for c in &self.commands {
            if c.send(Command::Round(self.round, changes.clone(), notice.clone()))
                .is_err()
            {
                self.dead = true;
                return Err(self.lost());
            }
        }
        self.round += 1;
        match self.results.recv() {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(f)) => {
                self.dead = true;
                Err(f)
            }
            Err(_) => {
                self.dead = true;
                Err(self.lost())
            }
        }
    }

    /// Why the workers are gone: the panic that ended them (a lost peer), if one did.
    fn lost(&self) -> Failure {
        Failure::Failed(
            self.hushed
                .first()
                .unwrap_or_else(|| "a worker stopped".into()),
        )
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        for c in &self.commands {
            let _ = c.send(Command::Stop);
        }
        self.commands.clear();
        if let Some(g) = self.workers.take() {
            // Workers that stopped early (Ctrl-C) have already returned; those whose peer
            // is gone have panicked, and so does joining their network threads.
            let _ = self.hushed.quietly(|| g.join());
        }
    }
}

/// Serves a dataflow that process 0 of `cluster` drives ([`Live::start`] there): builds it
/// in this process's workers, feeds their share of `initial`, closes their inputs and
/// steps until process 0 closes its own. Returns once the dataflow has ended everywhere,
/// with what process 0 announced ([`Live::announce`]), if it did.
pub(super) fn serve(
    job: Job,
    initial: InputChanges,
    (cluster, fingerprint): (&Cluster, u64),
    stop: Stop,
) -> Result<Option<Vec<Vec<u32>>>, Failure> {
    let (job, initial) = (Arc::new(job), Arc::new(initial));
    let (builders, others) = cluster
        .allocators(fingerprint, CONNECT_WITHIN)
        .map_err(Failure::Failed)?;
    let work = move |worker: &mut timely::worker::Worker| {
        let (index, peers) = (worker.index(), worker.peers());
        let mut r = render(worker, &job);
        feed(&mut r.inputs, &initial, (index, peers));
        for mut h in r.inputs.into_iter().chain([r.notice]) {
            h.advance_to(1);
            h.flush();
        }
        while worker.has_dataflows() {
            worker.step_or_park(Some(POLL));
            if stop.requested() {
                abandon(worker);
                return Err(());
            }
        }
        Ok(r.noticed.take())
    };
    let results = catching(move || {
        let guards =
            timely::execute::execute_from(builders, others, timely::WorkerConfig::default(), work)?;
        Ok(guards.join())
    })
    .map_err(Failure::Failed)?;
    let mut noticed = Vec::new();
    for result in results {
        match result {
            // Every worker received the same rows.
            Ok(Ok(rows)) => noticed = rows,
            Ok(Err(())) => return Err(Failure::Stopped),
            Err(e) => return Err(Failure::Failed(format!("a worker failed: {e}"))),
        }
    }
    if noticed.is_empty() {
        return Ok(None);
    }
    noticed.sort_by_key(|r| r.first().copied());
    Ok(Some(noticed.iter().map(|r| r[1..].to_vec()).collect()))
}

/// Feeds worker `index` of `peers` its share of `changes` (every `peers`-th).
fn feed(
    inputs: &mut [differential_dataflow::input::InputSession<u64, Row, isize>],
    changes: &[(usize, Row, isize)],
    (index, peers): (usize, usize),
) {
    for (i, (input, row, diff)) in changes.iter().enumerate() {
        if i % peers == index {
            if let Some(h) = inputs.get_mut(*input) {
                h.update(row.clone(), *diff);
            }
        }
    }
}

/// Drops the worker's dataflows, so that a stopped worker does not step them to the end.
fn abandon(worker: &mut timely::worker::Worker) {
    for id in worker.installed_dataflows() {
        worker.drop_dataflow(id);
    }
}
