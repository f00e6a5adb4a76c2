//! Combining values that land on one left-hand-side element (§7), and finishing a tensor.

use crate::diagnostics::{codes, Diagnostic};
use crate::semantics::{Family, Kind, TensorInfo};
use crate::tensor::{Storage, Tensor};

/// Running values of one tensor while its equations are evaluated.
pub(super) struct Accumulator {
    held: Held,
    /// Bytes the written elements may take (§15: what the budget leaves beside the values
    /// already held); past it further writes are dropped and [`Accumulator::outgrew`] says so.
    room: u64,
    outgrew: bool,
}

/// How the running values are held.
enum Held {
    /// Every element present; values add.
    Dense {
        /// Extents.
        shape: Vec<usize>,
        /// Row-major sums.
        values: Vec<f64>,
    },
    /// Written elements only, as flat positions and values combined in batches by sorting:
    /// a sum stored as its non-zeros, a `max=`/`min=`/`avg=` tensor, or a relation's head.
    /// Memory follows the distinct positions, not the shape or the number of writes.
    Written(Written),
}

/// Written positions and their running values.
struct Written {
    family: Family,
    /// Whether elements not written are 0 (a sum stored as its non-zeros) rather than
    /// undefined.
    zeros: bool,
    /// Positions, `arity` per value, sorted and distinct before `combined`, then as written.
    keys: Vec<u32>,
    values: Vec<f64>,
    /// How many values each element combines (`avg=` only; empty otherwise).
    counts: Vec<u32>,
    arity: usize,
    combined: usize,
    /// Whether every position was written after the one before it: then they are already
    /// sorted and distinct, and combining has nothing to do (a nest writing in order).
    ascending: bool,
}

impl Written {
    fn new(family: Family, zeros: bool, arity: usize) -> Written {
        Written {
            family,
            zeros,
            keys: Vec::new(),
            values: Vec::new(),
            counts: Vec::new(),
            arity,
            combined: 0,
            ascending: true,
        }
    }

    fn fold(&self, acc: f64, v: f64) -> f64 {
        match self.family {
            Family::Sum | Family::Avg => acc + v,
            Family::Max => acc.max(v),
            Family::Min => acc.min(v),
        }
    }

    fn key(&self, i: usize) -> &[u32] {
        &self.keys[i * self.arity..(i + 1) * self.arity]
    }

    /// Adds one value within `room` bytes; `false`, with nothing added, when it would not fit.
    /// A write to the position written last combines in place, so a nest whose reduction
    /// runs innermost holds one entry per element.
    fn push(&mut self, index: &[usize], v: f64, room: u64) -> bool {
        let n = self.values.len();
        let order = match n {
            0 => std::cmp::Ordering::Greater,
            _ => index
                .iter()
                .map(|&i| i as u64)
                .cmp(self.key(n - 1).iter().map(|&k| u64::from(k))),
        };
        if order == std::cmp::Ordering::Less {
            self.ascending = false;
        }
        if order == std::cmp::Ordering::Equal {
            self.values[n - 1] = self.fold(self.values[n - 1], v);
            if let Some(c) = self.counts.last_mut() {
                *c += 1;
            }
            return true;
        }
        // Most writes repeat a position: combining whenever the batch doubles keeps memory
        // near the distinct positions.
        if n >= 2 * self.combined.max(1 << 16) && !self.combine(room) {
            return false;
        }
        if self.values.len() == self.values.capacity() && !self.grow(room) {
            return false;
        }
        self.keys.extend(index.iter().map(|&i| i as u32));
        self.values.push(v);
        if self.family == Family::Avg {
            self.counts.push(1);
        }
        true
    }

    /// Bytes one entry takes.
    fn per_entry(&self) -> u64 {
        (self.arity * 4 + 8 + 4 * usize::from(self.family == Family::Avg)) as u64
    }

    /// Bytes held now.
    fn bytes(&self) -> u64 {
        (self.values.capacity() as u64).saturating_mul(self.per_entry())
    }

    /// Makes room for more entries (half as many again), combining first when growing
    /// would not fit in `room` (the old and new buffers are alive together while it moves).
    fn grow(&mut self, room: u64) -> bool {
        let more = (self.values.len() / 2).max(1024);
        let peak = |w: &Written| w.bytes() + (w.values.len() + more) as u64 * w.per_entry();
        if peak(self) > room {
            if !self.combine(room) {
                return false;
            }
            if self.values.len() < self.values.capacity() {
                return true;
            }
            if peak(self) > room {
                return false;
            }
        }
        self.keys.reserve_exact(more * self.arity);
        self.values.reserve_exact(more);
        if self.family == Family::Avg {
            self.counts.reserve_exact(more);
        }
        true
    }

    /// Sorts and combines what was written (stably: values at one position combine in the
    /// order written, so a sum adds as the reference adds); `false`, with nothing changed,
    /// when its order and copy would not fit in `room`.
    fn combine(&mut self, room: u64) -> bool {
        let n = self.values.len();
        if n <= 1 || n == self.combined || self.ascending {
            self.combined = n;
            return true;
        }
        let need = self.bytes() + n as u64 * (self.per_entry() + 4);
        if need > room {
            return false;
        }
        let mut order: Vec<u32> = (0..n as u32).collect();
        let arity = self.arity;
        let keys = &self.keys;
        order.sort_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            keys[a * arity..(a + 1) * arity].cmp(&keys[b * arity..(b + 1) * arity])
        });
        let mut out = Written::new(self.family, self.zeros, arity);
        out.keys.reserve_exact(n * arity);
        out.values.reserve_exact(n);
        out.counts.reserve_exact(self.counts.len());
        for i in order {
            let i = i as usize;
            let same = !out.values.is_empty() && out.key(out.values.len() - 1) == self.key(i);
            if same {
                let last = out.values.len() - 1;
                out.values[last] = out.fold(out.values[last], self.values[i]);
                if let Some(c) = out.counts.last_mut() {
                    *c += self.counts[i];
                }
            } else {
                out.keys.extend_from_slice(self.key(i));
                out.values.push(self.values[i]);
                if let Some(&c) = self.counts.get(i) {
                    out.counts.push(c);
                }
            }
        }
        out.combined = out.values.len();
        *self = out;
        true
    }
}

impl Accumulator {
    fn of(held: Held) -> Accumulator {
        Accumulator {
            held,
            room: u64::MAX,
            outgrew: false,
        }
    }

    /// An empty accumulator shaped for `info`.
    pub(super) fn new(info: &TensorInfo) -> Accumulator {
        if info.kind != Kind::Bool && info.family == Family::Sum && !info.sparse_values {
            Accumulator::of(Held::Dense {
                shape: info.shape.clone(),
                values: vec![0.0; info.shape.iter().product()],
            })
        } else {
            Accumulator::of(Held::Written(Written::new(
                info.family,
                false,
                info.shape.len(),
            )))
        }
    }

    /// An accumulator for a sum tensor stored as its non-zero elements (the plan's choice for
    /// a large result of sparse products, `plan::Plan::sparse`).
    pub(super) fn entries(info: &TensorInfo) -> Accumulator {
        Accumulator::of(Held::Written(Written::new(
            Family::Sum,
            true,
            info.shape.len(),
        )))
    }

    /// The same accumulator, its written elements held to what the memory budget leaves
    /// beside `values` (a dense accumulator was counted before evaluation began).
    pub(super) fn within(self, values: &[Tensor], max_memory: u64) -> Accumulator {
        let held = values
            .iter()
            .fold(0u64, |a, t| a.saturating_add(t.held_bytes()));
        Accumulator {
            room: max_memory.saturating_sub(held),
            ..self
        }
    }

    /// Adds one value at `index` (out-of-bounds writes are dropped: extents were checked).
    pub(super) fn combine(&mut self, index: &[usize], v: f64) {
        match &mut self.held {
            Held::Written(w) => {
                if !self.outgrew && !w.push(index, v, self.room) {
                    self.outgrew = true;
                }
            }
            Held::Dense { shape, values } => {
                let mut off = 0usize;
                for (&i, &n) in index.iter().zip(shape.iter()) {
                    if i >= n {
                        return;
                    }
                    off = off * n + i;
                }
                values[off] += v;
            }
        }
    }

    /// Adds every defined element of a tensor (its data, or a finished virtual slice).
    pub(super) fn combine_tensor(&mut self, t: &Tensor) {
        t.each_entry(&mut |idx, v| self.combine(idx, v));
    }

    /// E0601 when the written elements outgrew the memory budget (§15), or would in being
    /// sorted and combined: elements were dropped, so the tensor must not be used.
    pub(super) fn outgrew(&mut self, info: &TensorInfo, max_memory: u64) -> Option<Diagnostic> {
        if let Held::Written(w) = &mut self.held {
            self.outgrew |= !w.combine(self.room);
        }
        self.outgrew.then(|| {
            Diagnostic::error(
                codes::MEMORY,
                info.span,
                format!(
                    "the elements of `{}` outgrew the memory budget of {}",
                    info.name,
                    crate::semantics::budget::bytes(max_memory as u128)
                ),
            )
            .with_label("its defined elements")
            .with_note(
                "each element written is kept: narrow the equation (a condition, fewer \
                 variables on the left) or raise --max-memory",
            )
        })
    }

    /// The finished tensor: Boolean heads are stepped, `avg=` divided, values rounded.
    pub(super) fn finish(self, info: &TensorInfo) -> Tensor {
        let mut w = match self.held {
            Held::Dense { shape, values } => {
                return Tensor {
                    elem: info.elem,
                    shape,
                    storage: Storage::Dense(crate::tensor::Dense::from_f64(info.elem, values)),
                }
            }
            Held::Written(w) => w,
        };
        // Unbounded here: a bounded caller combined within its room when it asked `outgrew`.
        w.combine(u64::MAX);
        let count = w.values.len();
        if info.kind == Kind::Bool {
            let arity = w.arity;
            let mut flat = Vec::with_capacity(count * arity);
            let mut kept = 0;
            for (k, &v) in w.keys.chunks_exact(arity.max(1)).zip(&w.values) {
                if v > 0.0 {
                    flat.extend_from_slice(&k[..arity]);
                    kept += 1;
                }
            }
            if arity == 0 {
                kept = usize::from(w.values.first().is_some_and(|&v| v > 0.0));
            }
            return Tensor::relation_flat(info.shape.clone(), flat, kept);
        }
        if w.family == Family::Avg {
            for (v, &n) in w.values.iter_mut().zip(&w.counts) {
                *v /= f64::from(n);
            }
        }
        info.elem.round_all(&mut w.values);
        if !w.zeros && !info.sparse_values {
            let mut out = Tensor::zeros(info.elem, info.shape.clone());
            for (k, &v) in w.keys.chunks_exact(w.arity.max(1)).zip(&w.values) {
                let idx: Vec<usize> = k[..w.arity].iter().map(|&i| i as usize).collect();
                out.set(&idx, v);
            }
            if w.arity == 0 {
                if let Some(&v) = w.values.first() {
                    out.set(&[], v);
                }
            }
            return out;
        }
        let positions = match w.arity {
            0 => crate::tensor::Relation::from_flat(0, Vec::new(), count),
            arity => crate::tensor::Relation::from_sorted(arity, w.keys),
        };
        let sparse = crate::tensor::Sparse::from_sorted(positions, w.values);
        Tensor {
            elem: info.elem,
            shape: info.shape.clone(),
            storage: Storage::Sparse(match w.zeros {
                true => sparse.with_zeros(),
                false => sparse,
            }),
        }
    }
}
