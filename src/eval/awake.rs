//! Workers kept looking for work through a run of many short steps.
//!
//! A rayon worker that finds nothing to do soon sleeps, and waking it costs a context switch
//! (tens of microseconds on a virtual machine). A training step of a small model splits a
//! few products and updates of a few hundred microseconds each, so a sleeping second worker
//! cost more than it gained: the MLP's two-thread step was slower than its one-thread step.
//! While an [`Awake`] lives, every other worker of the `--threads` pool runs a job that takes
//! the pool's work as it appears and otherwise spins, as OpenMP's workers do between parallel
//! regions. Which work a worker takes never changes a result: splits are fixed by sizes.

use super::{thread_pool, EvalOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Keeps the pool's other workers awake until dropped.
pub(crate) struct Awake {
    stop: Arc<AtomicBool>,
}

/// Wakes the other workers of `o`'s pool for as long as the result lives; `None` at one
/// thread, with more threads than the machine runs at once (a spinning worker would take
/// the processor from one with work), or when the calling thread is not one of the pool's
/// workers (its work would be handed to the pool anyway, and a spinning worker could take
/// the caller's place).
pub(crate) fn keep_awake(o: &EvalOptions) -> Option<Awake> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if o.threads > cores {
        return None;
    }
    let pool = thread_pool(o)?;
    let caller = rayon::current_thread_index()?;
    if pool.current_thread_index() != Some(caller) {
        return None;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    pool.spawn_broadcast(move |ctx| {
        // The caller takes its own copy of this job when it next waits for work; it must
        // return at once, or the caller would spin in place of its own step.
        if ctx.index() == caller {
            return;
        }
        while !flag.load(Ordering::Relaxed) {
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                std::hint::spin_loop();
            }
        }
    });
    Some(Awake { stop })
}

impl Drop for Awake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads(n: usize) -> EvalOptions {
        EvalOptions {
            threads: n,
            ..EvalOptions::default()
        }
    }

    #[test]
    fn awake_workers_go_back_to_the_pool_when_dropped() -> Result<(), String> {
        assert!(
            keep_awake(&threads(1)).is_none(),
            "one thread has no workers"
        );
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert!(
            keep_awake(&threads(cores + 1)).is_none(),
            "more threads than cores spin none"
        );
        if cores < 2 {
            return Ok(());
        }
        let awake = keep_awake(&threads(2)).ok_or("no pool of two")?;
        let pool = thread_pool(&threads(2)).ok_or("no pool of two")?;
        let sum: u64 = pool.install(|| {
            use rayon::prelude::*;
            (0..100_000u64).into_par_iter().sum()
        });
        assert_eq!(sum, 4_999_950_000);
        let stop = awake.stop.clone();
        drop(awake);
        let start = std::time::Instant::now();
        // Every worker's copy of the job has returned once only this count is left; the
        // caller runs its own copy when it next looks for work.
        while Arc::strong_count(&stop) > 1 {
            rayon::yield_now();
            if start.elapsed().as_secs() > 20 {
                return Err("a worker still spins".into());
            }
        }
        Ok(())
    }
}
