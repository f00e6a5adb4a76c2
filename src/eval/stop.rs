//! Ending an evaluation early and cleanly: a deadline (`--timeout`) or a flag a caller sets
//! (Ctrl-C in the CLI, a Python `KeyboardInterrupt`). Loops ask [`Stop::requested`] every so
//! many iterations; the evaluation then returns an error (E0403) naming the equation that was
//! running, instead of running on without a bound.

use crate::diagnostics::{codes, Diagnostic, Diagnostics, Span};
use crate::semantics::{Checked, Stratum};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Iterations of an inner loop between two looks at the clock and the flag.
pub(crate) const EVERY: u64 = 1 << 14;

/// When an evaluation must stop; the default never stops it.
#[derive(Clone, Debug, Default)]
pub struct Stop {
    /// Set by the caller (a signal handler) to stop as soon as possible.
    pub flag: Option<Arc<AtomicBool>>,
    /// The moment the time allowed runs out, and that time (for the message).
    pub deadline: Option<(Instant, Duration)>,
}

impl Stop {
    /// A stop after `timeout` from now, and whenever `flag` is set.
    pub fn new(timeout: Option<Duration>, flag: Option<Arc<AtomicBool>>) -> Stop {
        Stop {
            flag,
            deadline: timeout.map(|t| (Instant::now() + t, t)),
        }
    }

    /// Whether the evaluation must end now.
    pub fn requested(&self) -> bool {
        self.flag
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
            || self.deadline.is_some_and(|(d, _)| Instant::now() >= d)
    }

    /// The error that ends it, at the equation that was running.
    pub(crate) fn error(&self, span: Span) -> Diagnostic {
        let why = match self.deadline {
            Some((d, t)) if Instant::now() >= d => {
                format!("the time allowed (--timeout {} s) ran out", t.as_secs_f64())
            }
            _ => "evaluation was interrupted".to_string(),
        };
        Diagnostic::error(
            codes::STOPPED,
            span,
            format!("{why} while evaluating this equation"),
        )
        .with_label("running here")
    }
}

/// One thread's count of inner-loop iterations between looks at a [`Stop`]: a join that
/// enumerates a huge product ends within [`EVERY`] steps of the request, not at the end of
/// its round.
pub(crate) struct Ticker<'a> {
    stop: &'a Stop,
    count: u64,
    stopped: bool,
    /// Set by what the loop fills when it has filled its share of the memory budget (§15).
    full: Option<&'a std::cell::Cell<bool>>,
}

impl<'a> Ticker<'a> {
    /// A count that looks at `stop`.
    pub(crate) fn new(stop: &'a Stop) -> Self {
        Ticker {
            stop,
            count: 0,
            stopped: false,
            full: None,
        }
    }

    /// The same count, stopping also once `full` is set.
    pub(crate) fn watching(self, full: &'a std::cell::Cell<bool>) -> Self {
        Ticker {
            full: Some(full),
            ..self
        }
    }

    /// Counts one iteration; `false` once the evaluation must stop (and from then on).
    pub(crate) fn tick(&mut self) -> bool {
        if !self.stopped {
            self.count += 1;
            self.stopped = self.count.is_multiple_of(EVERY)
                && (self.stop.requested() || self.full.is_some_and(std::cell::Cell::get));
        }
        !self.stopped
    }

    /// Whether a tick has seen the request.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped
    }
}

/// `Err` (at the stratum's first equation) when the evaluation must stop: asked between
/// strata and between the rounds of a fixpoint.
pub(crate) fn check(p: &Checked, st: &Stratum, stop: &Stop) -> Result<(), Diagnostics> {
    // A stratum of data alone costs nothing: the next one with equations is named.
    match st.equations.first() {
        Some(&e) if stop.requested() => Err(stop.error(p.equations[e].span).into()),
        _ => Ok(()),
    }
}
