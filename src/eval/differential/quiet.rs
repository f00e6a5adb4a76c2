//! Running the workers with their panics caught: timely reports a lost peer by panicking
//! in its network and worker threads, which the default hook would print as backtraces.
//! While a [`Hushed`] is held, panics of timely's threads (named `timely:…`) are recorded
//! instead, and the first one becomes the run's error; other threads' panics go to the hook
//! that was there before.
//!
//! A thread that panics again while unwinding from its first panic (timely's network
//! buffers can panic in their destructors once a peer is gone) makes Rust abort the
//! process. The hook sees that second panic first: it then prints the run's error as E0404
//! and exits with status 1, so a lost peer ends the process as every other error does (no
//! output file has been written: files are written after evaluation).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe, PanicHookInfo};
use std::sync::{Arc, Mutex};

thread_local! {
    /// Whether this thread has panicked while a [`Hushed`] was held.
    static PANICKED: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread's panics are recorded as timely's are ([`Hushed::quietly`]).
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

type Hook = Arc<dyn Fn(&PanicHookInfo<'_>) + Sync + Send + 'static>;

/// Timely's panics recorded rather than printed, until dropped (which puts back the hook
/// that was there before).
pub(super) struct Hushed {
    first: Arc<Mutex<Option<String>>>,
    previous: Hook,
}

impl Hushed {
    pub(super) fn new() -> Hushed {
        let first: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let previous: Hook = Arc::from(std::panic::take_hook());
        let (record, others) = (first.clone(), previous.clone());
        std::panic::set_hook(Box::new(move |info| {
            let timely = QUIET.with(Cell::get)
                || std::thread::current()
                    .name()
                    .is_some_and(|n| n.starts_with("timely:"));
            if !timely {
                return others(info);
            }
            let text = match (
                info.payload().downcast_ref::<&str>(),
                info.payload().downcast_ref::<String>(),
            ) {
                (Some(s), _) => s.to_string(),
                (_, Some(s)) => s.clone(),
                _ => "a worker stopped".to_string(),
            };
            let again = PANICKED.with(|p| p.replace(true));
            let first = match record.lock() {
                Ok(mut slot) => slot.get_or_insert(text).clone(),
                Err(_) => text,
            };
            if again {
                let d =
                    crate::diagnostics::Diagnostics(vec![crate::diagnostics::Diagnostic::global(
                        crate::diagnostics::codes::DATAFLOW,
                        format!("the differential dataflow failed: {}", explain(&first)),
                    )]);
                eprint!("{}", d.render("", ""));
                std::process::exit(1);
            }
        }));
        Hushed { first, previous }
    }

    /// Runs `f` on this thread with its panics recorded and caught (joining workers whose
    /// peer is gone panics in timely's network guard).
    pub(super) fn quietly<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        QUIET.with(|q| q.set(true));
        let out = catch_unwind(AssertUnwindSafe(f)).ok();
        QUIET.with(|q| q.set(false));
        out
    }

    /// The first recorded panic, in words a user can act on.
    pub(super) fn first(&self) -> Option<String> {
        let why = self.first.lock().ok()?.clone()?;
        Some(explain(&why))
    }
}

impl Drop for Hushed {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let previous = self.previous.clone();
        std::panic::set_hook(Box::new(move |info| previous(info)));
    }
}

/// `f`'s result, or the message of the first panic of a timely thread, or of this one,
/// while it ran.
pub(super) fn catching<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let hushed = Hushed::new();
    let outcome = hushed.quietly(f);
    let panicked = hushed.first();
    drop(hushed);
    match (outcome, panicked) {
        (Some(Ok(v)), None) => Ok(v),
        (Some(Err(e)), _) => Err(e),
        (_, Some(why)) => Err(why),
        (None, None) => Err("a worker stopped".into()),
    }
}

/// A peer's loss in words a user can act on.
fn explain(why: &str) -> String {
    if why.contains("socket closed")
        || why.contains("Connection reset")
        || why.contains("Broken pipe")
        || why.contains("MergeQueue poisoned")
    {
        return format!("another process of the run ended before it finished ({why})");
    }
    why.to_string()
}
