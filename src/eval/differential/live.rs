//! A dataflow kept alive between rounds (incremental mode): its workers wait for a round's
//! input changes, run the round to completion, and worker 0 sends back the changes of every
//! relation the dataflow computes. Dropping it stops the workers.

use super::render::render;
use super::{Job, Row};
use crate::eval::Stop;
use crate::semantics::TensorId;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// Changes to the dataflow's inputs: the input's index, the tuple, +1 or −1.
pub(super) type InputChanges = Vec<(usize, Row, isize)>;
/// Changes to the relations it computes.
pub(super) type OutputChanges = Vec<(TensorId, Row, isize)>;

enum Command {
    Round(u64, Arc<InputChanges>),
    Stop,
}

/// Why a round did not finish.
pub(super) enum Failure {
    /// The stop flag or deadline ended it.
    Stopped,
    /// A worker failed.
    Failed(String),
}

/// The workers of a dataflow that stays up between rounds.
pub(super) struct Live {
    commands: Vec<Sender<Command>>,
    results: Receiver<Result<OutputChanges, Failure>>,
    workers: Option<timely::communication::WorkerGuards<()>>,
    round: u64,
    dead: bool,
}

impl Live {
    /// Starts `workers` threads of this process, each with the dataflow built.
    pub(super) fn start(job: Job, workers: usize, stop: Stop) -> Result<Live, String> {
        let workers = workers.max(1);
        let (mut senders, mut receivers) = (Vec::new(), Vec::new());
        for _ in 0..workers {
            let (s, r) = channel::<Command>();
            senders.push(s);
            receivers.push(Some(r));
        }
        let receivers = Arc::new(Mutex::new(receivers));
        let (results_tx, results) = channel();
        let results_tx = Arc::new(Mutex::new(results_tx));
        let job = Arc::new(job);
        let config = match workers {
            1 => timely::CommunicationConfig::Thread,
            n => timely::CommunicationConfig::Process(n),
        };
        let (builders, others) = config.try_build()?;
        let guards = timely::execute::execute_from(
            builders,
            others,
            timely::WorkerConfig::default(),
            move |worker| {
                let index = worker.index();
                let peers = worker.peers();
                let commands = receivers.lock().ok().and_then(|mut r| r[index].take());
                let Some(commands) = commands else { return };
                let send = |r| {
                    if let Ok(tx) = results_tx.lock() {
                        let _ = tx.send(r);
                    }
                };
                let mut r = render(worker, &job);
                while let Ok(Command::Round(round, changes)) = commands.recv() {
                    for (i, (input, row, diff)) in changes.iter().enumerate() {
                        if i % peers == index {
                            if let Some(h) = r.inputs.get_mut(*input) {
                                h.update(row.clone(), *diff);
                            }
                        }
                    }
                    for h in &mut r.inputs {
                        h.advance_to(round + 1);
                        h.flush();
                    }
                    while r.probe.less_than(&(round + 1)) {
                        worker.step();
                        if stop.requested() {
                            send(Err(Failure::Stopped));
                            return;
                        }
                    }
                    if index == 0 {
                        send(Ok(r.captured.take()));
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
        })
    }

    /// Runs one round with these input changes; the changes of the computed relations.
    pub(super) fn round(&mut self, changes: InputChanges) -> Result<OutputChanges, Failure> {
        if self.dead {
            return Err(Failure::Failed(
                "an earlier round did not finish; start again".into(),
            ));
        }
        let changes = Arc::new(changes);
        for c in &self.commands {
            if c.send(Command::Round(self.round, changes.clone())).is_err() {
                self.dead = true;
                return Err(Failure::Failed("a worker is gone".into()));
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
                Err(Failure::Failed("a worker stopped".into()))
            }
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        for c in &self.commands {
            let _ = c.send(Command::Stop);
        }
        self.commands.clear();
        if let Some(g) = self.workers.take() {
            // Workers that stopped early (Ctrl-C) have already returned.
            let _ = g.join();
        }
    }
}
