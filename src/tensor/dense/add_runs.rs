//! Adding runs of consecutive values into a dense buffer ([`super::Dense::add_runs`]): each
//! run in one vectorised loop, split over the pool's workers where the runs lie apart.

use super::{owned, spans_mut, Buf, Run, RUN_PIECE};
use crate::functions::widest::{widest, Vectorised};
use std::sync::Arc;

/// Each run added by `add` into its slice of `d`: on the pool's workers with
/// `split` where the runs lie apart and in order (a long run in pieces of
/// [`RUN_PIECE`]), else in the order of `runs`. Either way the first value that is
/// not finite in run order is the one reported.
fn each_run<T: Send>(
    d: &mut [T],
    runs: &[(usize, Run)],
    split: bool,
    add: impl Fn(&mut [T], Run) -> Option<f64> + Sync,
) -> Option<f64> {
    if split {
        let pieces: Vec<(usize, Run)> = runs
            .iter()
            .flat_map(|&(at, values)| {
                (0..values.len()).step_by(RUN_PIECE).map(move |from| {
                    let to = (from + RUN_PIECE).min(values.len());
                    (at + from, values.part(from, to))
                })
            })
            .collect();
        let spans = pieces.iter().map(|&(at, values)| (at, values.len()));
        if let Some(dsts) = spans_mut(d, spans) {
            use rayon::prelude::*;
            let found: Vec<Option<f64>> = dsts
                .into_par_iter()
                .zip(pieces.par_iter())
                .map(|(dst, &(_, values))| add(dst, values))
                .collect();
            return found.into_iter().flatten().next();
        }
    }
    let mut bad = None;
    for &(at, values) in runs {
        if let Some(dst) = d.get_mut(at..) {
            bad = bad.or(add(dst, values));
        }
    }
    bad
}
pub(super) fn run<T: Clone + Send + Sync>(
    d: &mut Arc<Buf<T>>,
    runs: &[(usize, Run)],
    split: bool,
    read: impl Fn(&T) -> f64 + Sync,
    write: impl Fn(f64) -> T + Sync,
) -> Option<f64> {
    each_run(owned(d), runs, split, |dst, values| match values {
        Run::F32(vs) => widest(AddRun {
            dst,
            vs,
            read: &read,
            write: &write,
        }),
        Run::F64(vs) => widest(AddRun {
            dst,
            vs,
            read: &read,
            write: &write,
        }),
    })
}
/// f32 values into f32 elements: added in f32, which rounds the sum of two f32
/// values as f64 then f32 would (f64 carries more than twice f32's precision plus
/// two bits, so rounding twice is rounding once), on twice the lanes, without
/// conversions.
pub(super) fn run_f32(d: &mut Arc<Buf<f32>>, runs: &[(usize, Run)], split: bool) -> Option<f64> {
    let (read, write) = (|&x: &f32| f64::from(x), |v: f64| v as f32);
    each_run(owned(d), runs, split, |dst, values| match values {
        Run::F32(vs) => widest(AddF32 { dst, vs }),
        Run::F64(vs) => widest(AddRun {
            dst,
            vs,
            read: &read,
            write: &write,
        }),
    })
}
/// Adds f32 `vs` to the start of f32 `dst` on the widest vectors.
struct AddF32<'r> {
    dst: &'r mut [f32],
    vs: &'r [f32],
}
impl Vectorised for AddF32<'_> {
    type Output = Option<f64>;
    #[inline(always)]
    fn run(self) -> Option<f64> {
        // A sum of finite f32 values is finite in f64, so an element diverges
        // exactly where it was finite and its addend is not; the value reported
        // is the f64 sum, which is then that addend.
        const BLOCK: usize = 64;
        let mut bad = None;
        for (xs, vs) in self.dst.chunks_mut(BLOCK).zip(self.vs.chunks(BLOCK)) {
            let (mut diverged, mut finite) = (false, [false; BLOCK]);
            for ((x, &v), was) in xs.iter_mut().zip(vs).zip(finite.iter_mut()) {
                *was = x.is_finite();
                diverged |= *was & !v.is_finite();
                *x += v;
            }
            if diverged && bad.is_none() {
                bad = finite
                    .iter()
                    .zip(vs)
                    .find(|(&was, v)| was && !v.is_finite())
                    .map(|(_, &v)| f64::from(v));
            }
        }
        bad
    }
}
/// Adds `vs` to the start of `dst` on the widest vectors.
struct AddRun<'r, T, V, R, W> {
    dst: &'r mut [T],
    vs: &'r [V],
    read: &'r R,
    write: &'r W,
}
impl<T, V: Copy + Into<f64>, R: Fn(&T) -> f64, W: Fn(f64) -> T> Vectorised
    for AddRun<'_, T, V, R, W>
{
    type Output = Option<f64>;
    #[inline(always)]
    fn run(self) -> Option<f64> {
        add_run(self.dst, self.vs, (self.read, self.write))
    }
}
/// Adds `vs` to the start of `dst` in blocks: each block's sums in one loop with no
/// branch (so that it vectorises); returns the first sum that is not finite where its
/// element was, looked for only in a block that has one.
#[inline(always)]
fn add_run<T, V: Copy + Into<f64>>(
    dst: &mut [T],
    vs: &[V],
    (read, write): (&impl Fn(&T) -> f64, &impl Fn(f64) -> T),
) -> Option<f64> {
    const BLOCK: usize = 64;
    let mut bad = None;
    let mut olds = [0.0f64; BLOCK];
    for (xs, vs) in dst.chunks_mut(BLOCK).zip(vs.chunks(BLOCK)) {
        let mut diverged = false;
        for ((x, &v), old) in xs.iter_mut().zip(vs).zip(olds.iter_mut()) {
            *old = read(x);
            let new = *old + v.into();
            diverged |= old.is_finite() & !new.is_finite();
            *x = write(new);
        }
        if diverged && bad.is_none() {
            bad = olds
                .iter()
                .zip(vs)
                .map(|(&old, &v)| (old, old + v.into()))
                .find(|(old, new)| old.is_finite() && !new.is_finite())
                .map(|(_, new)| new);
        }
    }
    bad
}
