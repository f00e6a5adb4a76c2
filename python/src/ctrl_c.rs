//! Ctrl-C while the engine runs on Python's main thread, where Python handles signals.
//!
//! Python's own SIGINT handler only trips a flag that the interpreter looks at between
//! bytecodes, which it does not run while the engine holds the thread. So for the length of
//! a run, [`Watch`] puts a handler in its place that asks the engine to stop (it then ends
//! with E0403), puts Python's back afterwards and raises the signal again, so that whatever
//! Python would have done (raise `KeyboardInterrupt`, call the user's handler, or end the
//! process for `SIG_DFL`) happens once the run is over. The run stays on the calling thread:
//! no watcher thread, nothing to hand over, and no gap for quick runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// The flag the handler sets: one for the process, since only the main thread swaps
/// handlers and it runs one program at a time.
static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Python's main thread, as `threading.main_thread().ident` gives it.
static MAIN: OnceLock<u64> = OnceLock::new();

/// Records which thread is Python's main thread (from the module's initialisation).
pub fn record_main_thread(ident: u64) {
    let _ = MAIN.set(ident);
}

/// The stop flag for a run on this thread, watched for Ctrl-C until the `Watch` is dropped;
/// `None` on other threads (Python delivers signals to the main thread only), where
/// SIGINT is ignored, and off Unix.
pub struct Watch {
    #[cfg(unix)]
    previous: libc::sigaction,
    flag: Arc<AtomicBool>,
}

impl Watch {
    /// Starts watching, when this is Python's main thread and SIGINT is not ignored.
    #[cfg(unix)]
    pub fn start() -> Option<Watch> {
        // SAFETY: pthread_self has no preconditions.
        let this = unsafe { libc::pthread_self() } as usize as u64;
        if MAIN.get() != Some(&this) {
            return None;
        }
        let flag = Arc::clone(FLAG.get_or_init(|| Arc::new(AtomicBool::new(false))));
        flag.store(false, Ordering::SeqCst);
        // SAFETY: sigaction structs are plain data, valid when zeroed; `seen` only stores
        // to an atomic, which is async-signal-safe.
        unsafe {
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = seen as extern "C" fn(libc::c_int) as libc::sighandler_t;
            ours.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut ours.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGINT, &ours, &mut previous) != 0 {
                return None;
            }
            if previous.sa_sigaction == libc::SIG_IGN {
                libc::sigaction(libc::SIGINT, &previous, std::ptr::null_mut());
                return None;
            }
            Some(Watch { previous, flag })
        }
    }

    /// No signals to watch off Unix: Ctrl-C is seen when the run ends.
    #[cfg(not(unix))]
    pub fn start() -> Option<Watch> {
        None
    }

    /// What the engine polls to stop.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.flag)
    }
}

#[cfg(unix)]
impl Drop for Watch {
    /// Puts the previous handler back, then delivers a Ctrl-C seen meanwhile to it.
    fn drop(&mut self) {
        // SAFETY: `previous` is the action sigaction returned; raise has no preconditions.
        unsafe {
            libc::sigaction(libc::SIGINT, &self.previous, std::ptr::null_mut());
            if self.flag.load(Ordering::SeqCst) {
                libc::raise(libc::SIGINT);
            }
        }
    }
}

/// The handler while a run is watched.
#[cfg(unix)]
extern "C" fn seen(_: libc::c_int) {
    if let Some(flag) = FLAG.get() {
        flag.store(true, Ordering::SeqCst);
    }
}
