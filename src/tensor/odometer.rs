//! Row-major walks over a grid of positions, the last axis fastest: the one odometer that
//! loops over an equation's variables or a tensor's elements step, so that each keeps only
//! what it does at a position (and the offsets it carries along).

/// Steps `idx` to the next position of a grid of extents `dims` and returns the axis that
/// advanced (every later axis went back to 0), or `None` after the last position (every
/// axis back at 0).
pub(crate) fn advance(idx: &mut [usize], dims: &[usize]) -> Option<usize> {
    for (ax, (i, &n)) in idx.iter_mut().zip(dims).enumerate().rev() {
        *i += 1;
        if *i < n {
            return Some(ax);
        }
        *i = 0;
    }
    None
}

/// Row-major strides of a grid of extents `dims`: the last axis 1, each other the product
/// of the extents after it.
pub(crate) fn row_major(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * dims[k + 1];
    }
    s
}

/// The position of the row-major offset `at` in a grid of extents `dims`: `set(axis, i)` for
/// every axis, the last first (an empty axis counts as one).
pub(crate) fn unflatten(mut at: usize, dims: &[usize], mut set: impl FnMut(usize, usize)) {
    for (ax, &n) in dims.iter().enumerate().rev() {
        set(ax, at % n.max(1));
        at /= n.max(1);
    }
}

/// [`advance`] over the entries `vars` of `env`, each of extent `extent(v)`: the variables
/// of an equation stepped in place; `false` after the last point.
pub(crate) fn advance_vars(
    env: &mut [i64],
    vars: &[usize],
    extent: impl Fn(usize) -> usize,
) -> bool {
    for &v in vars.iter().rev() {
        env[v] += 1;
        if (env[v] as usize) < extent(v) {
            return true;
        }
        env[v] = 0;
    }
    false
}

/// What an offset `Σ idx[a] · steps[a]` changes by when [`advance`] returns axis `a`: one
/// step of `a`, less the steps the later axes took back to 0. Indexed by that axis.
pub(crate) fn carries(steps: &[i64], dims: &[usize]) -> Vec<i64> {
    let mut back = 0i64;
    let mut out = vec![0i64; steps.len()];
    for ax in (0..steps.len()).rev() {
        out[ax] = steps[ax] - back;
        back += steps[ax] * (dims[ax] as i64 - 1).max(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_offsets_step_in_row_major_order() {
        let dims = [2, 3];
        let steps = [10, -1];
        let carry = carries(&steps, &dims);
        let (mut idx, mut at) = ([0usize; 2], 0i64);
        let mut seen = vec![(idx, at)];
        while let Some(ax) = advance(&mut idx, &dims) {
            at += carry[ax];
            seen.push((idx, at));
        }
        let want: Vec<([usize; 2], i64)> = (0..2)
            .flat_map(|i| (0..3).map(move |j| ([i, j], 10 * i as i64 - j as i64)))
            .collect();
        assert_eq!(seen, want);
        assert_eq!(idx, [0, 0]);
        let mut env = [7i64, 0, 0];
        let mut points = 1;
        while advance_vars(&mut env, &[2, 1], |v| v + 1) {
            points += 1;
        }
        assert_eq!((points, env), (6, [7, 0, 0]));
        let strides = row_major(&[2, 3, 4]);
        assert_eq!(strides, [12, 4, 1]);
        let mut at = [0usize; 3];
        unflatten(23, &[2, 3, 4], |ax, i| at[ax] = i);
        assert_eq!(at, [1, 2, 3]);
    }
}
