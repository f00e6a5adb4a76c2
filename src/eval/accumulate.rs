//! Combining values that land on one left-hand-side element (§7), and finishing a tensor.

use super::scalar::{Exact, Scalar};
use crate::diagnostics::{codes, Diagnostic};
use crate::semantics::{Family, Kind, TensorInfo};
use crate::tensor::{Dense, Relation, Sparse, Storage, Tensor};

/// Running values of one tensor while its equations are evaluated: in f64, or exactly in
/// i64 for an `int` tensor (§8).
pub(super) enum Accumulator {
    /// A real or Boolean tensor's.
    Real(Acc<f64>),
    /// An `int` tensor's.
    Int(Acc<i64>),
}

/// An element type an accumulator holds.
pub(super) trait Element: Copy + PartialEq + Default {
    /// `a` and `b` combined by `family`; `None` where an integer leaves i64 (E0406).
    fn fold(family: Family, a: Self, b: Self) -> Option<Self>;
    /// A value computed in f64 (an integer taken toward zero).
    fn of_f64(v: f64) -> Self;
    /// Row-major elements as a dense buffer of `elem`.
    fn dense(elem: crate::tensor::ElemType, values: Vec<Self>) -> Dense;
    /// Defined elements at sorted, distinct positions, rounded to `elem`.
    fn sparse(elem: crate::tensor::ElemType, positions: Relation, values: Vec<Self>) -> Sparse;
    /// The value as f64.
    fn to_f64(self) -> f64;
    /// Whether a Boolean head holds here (the value is above 0).
    fn positive(self) -> bool;
    /// Stores the value at `index` of `t`.
    fn store(self, t: &mut Tensor, index: &[usize]);
}

impl Element for f64 {
    fn fold(family: Family, a: f64, b: f64) -> Option<f64> {
        Some(Scalar::fold(a, family, b))
    }
    fn of_f64(v: f64) -> f64 {
        v
    }
    fn dense(elem: crate::tensor::ElemType, values: Vec<f64>) -> Dense {
        Dense::from_f64(elem, values)
    }
    fn sparse(elem: crate::tensor::ElemType, positions: Relation, mut values: Vec<f64>) -> Sparse {
        elem.round_all(&mut values);
        Sparse::from_sorted(positions, values)
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn positive(self) -> bool {
        self > 0.0
    }
    fn store(self, t: &mut Tensor, index: &[usize]) {
        t.set(index, self);
    }
}

impl Element for i64 {
    fn fold(family: Family, a: i64, b: i64) -> Option<i64> {
        Exact(Some(a)).fold(family, Exact(Some(b))).0
    }
    fn of_f64(v: f64) -> i64 {
        v as i64
    }
    fn dense(_: crate::tensor::ElemType, values: Vec<i64>) -> Dense {
        Dense::from_i64(values)
    }
    fn sparse(_: crate::tensor::ElemType, positions: Relation, values: Vec<i64>) -> Sparse {
        Sparse::from_sorted_ints(positions, values)
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn positive(self) -> bool {
        self > 0
    }
    fn store(self, t: &mut Tensor, index: &[usize]) {
        t.set_int(index, self);
    }
}

/// Running values of one element type.
pub(super) struct Acc<V> {
    held: Held<V>,
    /// Bytes the written elements may take (§15: what the budget leaves beside the values
    /// already held); past it further writes are dropped and [`Accumulator::outgrew`] says so.
    room: u64,
    outgrew: bool,
    /// An integer sum left i64 (E0406).
    overflowed: bool,
}

/// How the running values are held.
enum Held<V> {
    /// Every element present; values add.
    Dense {
        /// Extents.
        shape: Vec<usize>,
        /// Row-major sums.
        values: Vec<V>,
    },
    /// Written elements only, as flat positions and values combined in batches by sorting:
    /// a sum stored as its non-zeros, a `max=`/`min=`/`avg=` tensor, or a relation's head.
    /// Memory follows the distinct positions, not the shape or the number of writes.
    Written(Written<V>),
}

/// Written positions and their running values.
struct Written<V> {
    family: Family,
    /// Whether elements not written are 0 (a sum stored as its non-zeros) rather than
    /// undefined.
    zeros: bool,
    /// Positions, `arity` per value, sorted and distinct before `combined`, then as written.
    keys: Vec<u32>,
    values: Vec<V>,
    /// An integer combination left i64.
    overflowed: bool,
    /// How many values each element combines (`avg=` only; empty otherwise).
    counts: Vec<u32>,
    arity: usize,
    combined: usize,
    /// Whether every position was written after the one before it: then they are already
    /// sorted and distinct, and combining has nothing to do (a nest writing in order).
    ascending: bool,
}

impl<V: Element> Written<V> {
    fn new(family: Family, zeros: bool, arity: usize) -> Written<V> {
        Written {
            family,
            zeros,
            keys: Vec::new(),
            values: Vec::new(),
            overflowed: false,
            counts: Vec::new(),
            arity,
            combined: 0,
            ascending: true,
        }
    }

    fn fold(&mut self, acc: V, v: V) -> V {
        V::fold(self.family, acc, v).unwrap_or_else(|| {
            self.overflowed = true;
            acc
        })
    }

    fn key(&self, i: usize) -> &[u32] {
        &self.keys[i * self.arity..(i + 1) * self.arity]
    }

    /// Adds one value within `room` bytes; `false`, with nothing added, when it would not fit.
    /// A write to the position written last combines in place, so a nest whose reduction
    /// runs innermost holds one entry per element.
    fn push(&mut self, index: &[usize], v: V, room: u64) -> bool {
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
        let peak = |w: &Written<V>| w.bytes() + (w.values.len() + more) as u64 * w.per_entry();
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
        out.overflowed = self.overflowed;
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
    /// An empty accumulator shaped for `info`.
    pub(super) fn new(info: &TensorInfo) -> Accumulator {
        let dense = info.kind != Kind::Bool && info.family == Family::Sum && !info.sparse_values;
        match info.elem == crate::tensor::ElemType::Int {
            true => Accumulator::Int(Acc::new(info, dense, false)),
            false => Accumulator::Real(Acc::new(info, dense, false)),
        }
    }

    /// An accumulator for a sum tensor stored as its non-zero elements (the plan's choice for
    /// a large result of sparse products, `plan::Plan::sparse`).
    pub(super) fn entries(info: &TensorInfo) -> Accumulator {
        match info.elem == crate::tensor::ElemType::Int {
            true => Accumulator::Int(Acc::new(info, false, true)),
            false => Accumulator::Real(Acc::new(info, false, true)),
        }
    }

    /// The same accumulator, its written elements held to what the memory budget leaves
    /// beside `values` (a dense accumulator was counted before evaluation began).
    pub(super) fn within(self, values: &[Tensor], max_memory: u64) -> Accumulator {
        let held = values
            .iter()
            .fold(0u64, |a, t| a.saturating_add(t.held_bytes()));
        let room = max_memory.saturating_sub(held);
        match self {
            Accumulator::Real(a) => Accumulator::Real(Acc { room, ..a }),
            Accumulator::Int(a) => Accumulator::Int(Acc { room, ..a }),
        }
    }

    /// Adds one value computed in f64 at `index` (out-of-bounds writes are dropped: extents
    /// were checked); an `int` tensor takes it toward zero (a count is exact below 2⁵³).
    pub(super) fn combine(&mut self, index: &[usize], v: f64) {
        match self {
            Accumulator::Real(a) => a.combine(index, v),
            Accumulator::Int(a) => a.combine(index, v as i64),
        }
    }

    /// Adds one integer computed exactly at `index`.
    pub(super) fn combine_int(&mut self, index: &[usize], v: i64) {
        match self {
            Accumulator::Real(a) => a.combine(index, v as f64),
            Accumulator::Int(a) => a.combine(index, v),
        }
    }

    /// Adds every defined element of a tensor (its data, or a finished virtual slice): an
    /// `int` tensor's exactly.
    pub(super) fn combine_tensor(&mut self, t: &Tensor) {
        match self {
            Accumulator::Real(a) => t.each_entry(&mut |idx, v| a.combine(idx, v)),
            Accumulator::Int(a) => t.each_entry(&mut |idx, v| {
                a.combine(idx, t.get_int(idx).unwrap_or(v as i64));
            }),
        }
    }

    /// E0601 when the written elements outgrew the memory budget (§15), or would in being
    /// sorted and combined: elements were dropped, so the tensor must not be used. E0406
    /// when an integer sum left i64 (§8: never a wrap).
    pub(super) fn outgrew(&mut self, info: &TensorInfo, max_memory: u64) -> Option<Diagnostic> {
        let (outgrew, overflowed) = match self {
            Accumulator::Real(a) => a.outgrew(),
            Accumulator::Int(a) => a.outgrew(),
        };
        if overflowed {
            return Some(overflow(info));
        }
        outgrew.then(|| {
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
        match self {
            Accumulator::Real(a) => a.finish(info),
            Accumulator::Int(a) => a.finish(info),
        }
    }
}

/// E0406: an `int` tensor's element left the i64 range.
pub(super) fn overflow(info: &TensorInfo) -> Diagnostic {
    Diagnostic::error(
        codes::VALUE_OVERFLOW,
        info.span,
        format!("an element of `{}` leaves the i64 range", info.name),
    )
    .with_label("an integer tensor")
    .with_note("integer arithmetic is exact and never wraps (§8): a value past ±9223372036854775807 is an error")
}

impl<V: Element> Acc<V> {
    fn new(info: &TensorInfo, dense: bool, zeros: bool) -> Acc<V> {
        let held = match dense {
            true => Held::Dense {
                shape: info.shape.clone(),
                values: vec![V::default(); info.shape.iter().product()],
            },
            false if zeros => Held::Written(Written::new(Family::Sum, true, info.shape.len())),
            false => Held::Written(Written::new(info.family, false, info.shape.len())),
        };
        Acc {
            held,
            room: u64::MAX,
            outgrew: false,
            overflowed: false,
        }
    }

    fn combine(&mut self, index: &[usize], v: V) {
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
                match V::fold(Family::Sum, values[off], v) {
                    Some(x) => values[off] = x,
                    None => self.overflowed = true,
                }
            }
        }
    }

    /// Whether the elements outgrew the room, and whether an integer left i64.
    fn outgrew(&mut self) -> (bool, bool) {
        if let Held::Written(w) = &mut self.held {
            self.outgrew |= !w.combine(self.room);
            self.overflowed |= w.overflowed;
        }
        (self.outgrew, self.overflowed)
    }

    fn finish(self, info: &TensorInfo) -> Tensor {
        let mut w = match self.held {
            Held::Dense { shape, values } => {
                return Tensor {
                    elem: info.elem,
                    shape,
                    storage: Storage::Dense(V::dense(info.elem, values)),
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
                if v.positive() {
                    flat.extend_from_slice(&k[..arity]);
                    kept += 1;
                }
            }
            if arity == 0 {
                kept = usize::from(w.values.first().is_some_and(|&v| v.positive()));
            }
            return Tensor::relation_flat(info.shape.clone(), flat, kept);
        }
        let mut values = w.values;
        if w.family == Family::Avg {
            let mut real: Vec<f64> = values.iter().map(|&v| v.to_f64()).collect();
            for (v, &n) in real.iter_mut().zip(&w.counts) {
                *v /= f64::from(n);
            }
            values = real.into_iter().map(V::of_f64).collect();
        }
        if !w.zeros && !info.sparse_values {
            let mut out = Tensor::zeros(info.elem, info.shape.clone());
            let mut idx = vec![0usize; w.arity];
            for (k, &v) in w.keys.chunks_exact(w.arity.max(1)).zip(&values) {
                for (slot, &i) in idx.iter_mut().zip(&k[..w.arity]) {
                    *slot = i as usize;
                }
                v.store(&mut out, &idx);
            }
            if w.arity == 0 {
                if let Some(&v) = values.first() {
                    v.store(&mut out, &[]);
                }
            }
            return out;
        }
        let positions = match w.arity {
            0 => Relation::from_flat(0, Vec::new(), count),
            arity => Relation::from_sorted(arity, w.keys),
        };
        let sparse = V::sparse(info.elem, positions, values);
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
