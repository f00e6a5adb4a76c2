//! Running the workers with their panics caught: timely reports a lost peer by panicking
//! in its network and worker threads, which the default hook would print as backtraces.
//! While a run is in progress, panics are recorded instead, and the first one becomes the
//! run's error.
//!
//! A thread that panics again while unwinding from its first panic (timely's network
//! buffers can panic in their destructors once a peer is gone) makes Rust abort the
//! process. The hook sees that second panic first: it then prints the run's error as E0404
//! and exits with status 1, so a lost peer ends the process as every other error does (no
//! output file has been written: files are written after evaluation).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

thread_local! {
    /// Whether this thread has panicked during the current run.
    static PANICKED: Cell<bool> = const { Cell::new(false) };
}

/// `f`'s result, or the message of the first panic of any thread while it ran.
pub(super) fn catching<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let first: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let record = first.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
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
            let d = crate::diagnostics::Diagnostics(vec![crate::diagnostics::Diagnostic::global(
                crate::diagnostics::codes::DATAFLOW,
                format!("the differential dataflow failed: {}", explain(&first)),
            )]);
            eprint!("{}", d.render("", ""));
            std::process::exit(1);
        }
    }));
    PANICKED.with(|p| p.set(false));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    std::panic::set_hook(previous);
    let panicked = first.lock().ok().and_then(|mut s| s.take());
    match (outcome, panicked) {
        (Ok(Ok(v)), None) => Ok(v),
        (Ok(Err(e)), _) => Err(e),
        (_, Some(why)) => Err(explain(&why)),
        (Err(_), None) => Err("a worker stopped".into()),
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
