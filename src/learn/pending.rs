//! Gradients that reach a window of an adjoint no other gradient has reached, held as they
//! came until the window is read (`steps_backward`).
//!
//! In a recursion along a layer index every layer's tensors are windows of one tensor
//! (`Q[s, l, h, p, k]` at one `l`), and the backward pass meets each window twice: one
//! equation's products give its gradient, and the window's own equation reads it back as its
//! upstream. Written into a whole f64 adjoint, that gradient costs zeroing the whole
//! adjoint, adding into it, and gathering it out again, rounded back to the f32 it was. A
//! [`Pending`] holds it instead, and the window's equation reads it as it is. Whatever else
//! needs the adjoint whole has the held gradients added to zeros first, in the order they
//! came ([`Pending::settle`]), so every element gets the additions it would have had, in
//! the same order: the same bits.

use crate::eval::dense::split;
use crate::eval::dense::{Grid, Num, Placement};
use crate::semantics::TensorId;
use std::borrow::Cow;

/// One window's gradient.
struct Piece {
    at: Placement,
    /// The adjoint's offsets it covers: runs that lie apart, in order.
    spans: Vec<(usize, usize)>,
    /// Its values in the placement's (grid) order: as the first gradient came, then in f64
    /// once a second one is added.
    values: Grid,
}

/// Per tensor, the windows' gradients of its adjoint while its buffer is still empty. A
/// tensor either has pieces or a buffer, never both.
pub(crate) struct Pending {
    pieces: Vec<Vec<Piece>>,
}

/// A piece lent out as an upstream: its tensor, its index and its values.
pub(crate) struct Lent {
    tensor: TensorId,
    index: usize,
    /// The window's gradient, in the placement's order.
    pub values: Grid,
}

impl Pending {
    /// Nothing held, for `tensors` tensors.
    pub(crate) fn new(tensors: usize) -> Pending {
        Pending {
            pieces: (0..tensors).map(|_| Vec::new()).collect(),
        }
    }

    /// Whether `t` has held gradients.
    pub(crate) fn holds(&self, t: TensorId) -> bool {
        self.pieces.get(t).is_some_and(|p| !p.is_empty())
    }

    /// Holds `g`, placed at `at` in an adjoint of `len` elements, for tensor `t` (whose
    /// buffer is empty): added to the piece at the same window, or a new piece where it
    /// overlaps none (taking `g`'s values without a copy when they are owned). `g` back,
    /// holding nothing, for a placement that does not land in runs lying apart inside the
    /// adjoint, or one overlapping another window's piece.
    pub(crate) fn hold<'g, T: Num>(
        &mut self,
        t: TensorId,
        at: &Placement,
        len: usize,
        g: Cow<'g, [T]>,
        threads: usize,
    ) -> Option<Cow<'g, [T]>> {
        let Some(pieces) = self.pieces.get_mut(t) else {
            return Some(g);
        };
        if !matches!(at, Placement::Strided { .. }) {
            return Some(g);
        }
        if let Some(piece) = pieces.iter_mut().find(|p| p.at == *at) {
            if piece.values.len() != g.len() {
                return Some(g);
            }
            add_into(&mut piece.values, &g, threads);
            return None;
        }
        let Some(spans) = spans(at, len, g.len()) else {
            return Some(g);
        };
        if pieces.iter().any(|p| overlap(&p.spans, &spans)) {
            return Some(g);
        }
        pieces.push(Piece {
            at: at.clone(),
            spans,
            values: T::into_grid(g.into_owned()),
        });
        None
    }

    /// The values held for exactly the window `at` of `t`, lent until [`Pending::give_back`]
    /// (the piece stays, empty, meanwhile: nothing may add to `t` until then).
    pub(crate) fn lend(&mut self, t: TensorId, at: &Placement) -> Option<Lent> {
        let pieces = self.pieces.get_mut(t)?;
        let index = pieces.iter().position(|p| p.at == *at)?;
        let values = std::mem::replace(&mut pieces[index].values, Grid::F64(Vec::new()));
        Some(Lent {
            tensor: t,
            index,
            values,
        })
    }

    /// Returns a lent piece's values to it.
    pub(crate) fn give_back(&mut self, lent: Lent) {
        if let Some(piece) = self
            .pieces
            .get_mut(lent.tensor)
            .and_then(|p| p.get_mut(lent.index))
        {
            piece.values = lent.values;
        }
    }

    /// Makes `t`'s held gradients its adjoint `buf` (empty; `len` elements): zeros, then each
    /// piece added at its window in the order they came. Nothing where none are held.
    pub(crate) fn settle(&mut self, t: TensorId, buf: &mut Vec<f64>, len: usize, threads: usize) {
        let Some(pieces) = self.pieces.get_mut(t).filter(|p| !p.is_empty()) else {
            return;
        };
        *buf = split::zeros(len, threads);
        for piece in pieces.drain(..) {
            match &piece.values {
                Grid::F32(v) => super::dense_backward::add_placed(buf, &piece.at, v, threads),
                Grid::F64(v) => super::dense_backward::add_placed(buf, &piece.at, v, threads),
            }
        }
    }

    /// Drops `t`'s held gradients: its adjoint is read no more.
    pub(crate) fn drop_held(&mut self, t: TensorId) {
        if let Some(pieces) = self.pieces.get_mut(t) {
            pieces.clear();
        }
    }
}

/// Adds `g` to `values`, in f64 (as the adjoint would have added it).
fn add_into<T: Num>(values: &mut Grid, g: &[T], threads: usize) {
    if let Grid::F32(v) = values {
        *values = Grid::F64(crate::eval::dense::widened(v, 1.0, threads));
    }
    if let Grid::F64(v) = values {
        split::each_block(
            v,
            1 << 14,
            split::splits(threads, g.len()),
            |first, block| {
                let src = &g[first..first + block.len()];
                block.iter_mut().zip(src).for_each(|(x, &y)| *x += y.into());
            },
        );
    }
}

/// The adjoint's offsets a window of `count` elements placed at `at` covers, as runs lying
/// apart in order inside `len`, or `None`.
fn spans(at: &Placement, len: usize, count: usize) -> Option<Vec<(usize, usize)>> {
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    at.runs(count, &mut |i, a, n| runs.push((i, a, n)))?;
    let mut next_i = 0;
    let mut end = 0;
    for &(i, a, n) in &runs {
        if i != next_i || a < end || a + n > len {
            return None;
        }
        next_i = i + n;
        end = a + n;
    }
    (next_i == count).then(|| runs.into_iter().map(|(_, a, n)| (a, n)).collect())
}

/// Whether two sorted lists of runs share an offset.
fn overlap(a: &[(usize, usize)], b: &[(usize, usize)]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let ((x, n), (y, m)) = (a[i], b[j]);
        if x < y + m && y < x + n {
            return true;
        }
        if x + n <= y + m {
            i += 1;
        } else {
            j += 1;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(base: i64, rows: usize, row: usize) -> Placement {
        Placement::Strided {
            base,
            steps: vec![3 * row as i64, 1],
            dims: vec![rows, row],
        }
    }

    /// Held windows settle into the adjoint that adding them to zeros gives, bit for bit;
    /// two gradients of one window add up in f64; an overlapping window is refused.
    #[test]
    fn held_windows_settle_as_added_to_zeros() {
        let (rows, row, len) = (4, 5, 60);
        let g1: Vec<f32> = (0..20).map(|i| i as f32 / 7.0).collect();
        let g2: Vec<f32> = (0..20).map(|i| (i * i) as f32 / 3.0).collect();
        let g3: Vec<f32> = (0..20).map(|i| 1.0 - i as f32).collect();
        let mut p = Pending::new(1);
        assert!(p
            .hold(0, &window(0, rows, row), len, Cow::Borrowed(&g1), 1)
            .is_none());
        assert!(p
            .hold(0, &window(5, rows, row), len, Cow::Borrowed(&g2), 1)
            .is_none());
        assert!(p
            .hold(0, &window(0, rows, row), len, Cow::Borrowed(&g3), 1)
            .is_none());
        assert!(
            p.hold(0, &window(3, rows, row), len, Cow::Borrowed(&g3), 1)
                .is_some(),
            "overlaps both"
        );
        assert!(
            p.hold(0, &window(50, rows, row), len, Cow::Borrowed(&g3), 1)
                .is_some(),
            "past the end"
        );
        let mut expected = vec![0.0f64; len];
        for (g, base) in [(&g1, 0), (&g2, 5), (&g3, 0)] {
            super::super::dense_backward::add_placed(&mut expected, &window(base, rows, row), g, 1);
        }
        let lent = p.lend(0, &window(5, rows, row)).map(|l| l.values.len());
        assert_eq!(lent, Some(20));
        let mut none = Pending::new(1);
        assert!(none.lend(0, &window(5, rows, row)).is_none());
        let mut p = Pending::new(1);
        for (g, base) in [(&g1, 0), (&g2, 5), (&g3, 0)] {
            assert!(p
                .hold(
                    0,
                    &window(base, rows, row),
                    len,
                    Cow::Borrowed(g.as_slice()),
                    1
                )
                .is_none());
        }
        let mut buf = Vec::new();
        p.settle(0, &mut buf, len, 1);
        assert!(!p.holds(0));
        assert_eq!(buf.len(), len);
        assert!(buf
            .iter()
            .zip(&expected)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}
