//! Running the workers with their panics caught: timely reports a lost peer by panicking
//! in its network and worker threads, which the default hook would print as backtraces.
//! While a run is in progress, panics are recorded instead, and the first one becomes the
//! run's error.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

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
        if let Ok(mut slot) = record.lock() {
            slot.get_or_insert(text);
        }
    }));
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
