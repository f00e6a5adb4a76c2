//! Tensor values as the library exposes them: dense arrays or sparse maps of defined elements.
//!
//! Relations (Boolean tensors) are always sparse, so a graph of 10,000 nodes never allocates a
//! 10⁸-element matrix. Dense elements are held in their declared type ([`Dense`]); values
//! pass through the API as f64 and are rounded to the element type on every store.

mod dense;
pub mod fallible;
mod finite;
mod init;
pub(crate) mod odometer;
mod sparse;
mod values;

pub(crate) use dense::spans_mut;
pub use dense::{fp8_decode, fp8_encode, Buf, Dense, Lent, Run};
pub use init::Init;
pub use sparse::{worth_storing_sparsely, Sparse, SPARSE_DATA_ELEMENTS};
pub use values::ValueTable;

/// Largest extent of an axis: positions are stored as `u32` in sparse tensors.
pub const MAX_EXTENT: usize = u32::MAX as usize;

/// Element types of §4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemType {
    /// Boolean (0/1).
    Bool,
    /// 64-bit integer.
    Int,
    /// IEEE double.
    F64,
    /// IEEE single (the default for `real`).
    F32,
    /// bfloat16.
    BF16,
    /// IEEE half.
    F16,
    /// OCP E4M3FN: max ±448, no infinities, saturating.
    FP8,
    /// Symmetric 8-bit integer (−127..=127).
    I8,
}

impl ElemType {
    /// Bytes a dense buffer holds per element (Booleans are stored as f64, integers as i64):
    /// what `--max-memory` is checked against.
    pub fn dense_bytes(self) -> u128 {
        match self {
            ElemType::Bool | ElemType::Int | ElemType::F64 => 8,
            ElemType::F32 => 4,
            ElemType::BF16 | ElemType::F16 => 2,
            ElemType::FP8 | ElemType::I8 => 1,
        }
    }

    /// Parses a declaration's type name; `real` resolves to `real_as`.
    pub fn parse(name: &str, real_as: ElemType) -> Option<ElemType> {
        Some(match name {
            "bool" => ElemType::Bool,
            "int" => ElemType::Int,
            "real" => real_as,
            "f64" => ElemType::F64,
            "f32" => ElemType::F32,
            "bf16" => ElemType::BF16,
            "f16" => ElemType::F16,
            "fp8" => ElemType::FP8,
            "i8" => ElemType::I8,
            _ => return None,
        })
    }

    /// Rounds a value to what this type can hold.
    #[inline]
    pub fn round(self, v: f64) -> f64 {
        match self {
            ElemType::Bool => {
                if v > 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            // As `int` storage holds it: toward zero, saturating, NaN as 0 (NumPy's
            // `astype(int64)` but for its undefined NaN).
            ElemType::Int => v as i64 as f64,
            ElemType::F64 => v,
            ElemType::F32 => v as f32 as f64,
            ElemType::BF16 => half::bf16::from_f64(v).to_f64(),
            ElemType::F16 => half::f16::from_f64(v).to_f64(),
            ElemType::FP8 => round_e4m3fn(v),
            ElemType::I8 => {
                if v.is_nan() {
                    0.0
                } else {
                    v.round_ties_even().clamp(-127.0, 127.0)
                }
            }
        }
    }

    /// Rounds every value in place; the type is matched once, so the common f32/f64 cases
    /// are a plain (vectorisable) loop.
    pub fn round_all(self, values: &mut [f64]) {
        match self {
            ElemType::F64 => {}
            ElemType::F32 => values.iter_mut().for_each(|v| *v = *v as f32 as f64),
            other => values.iter_mut().for_each(|v| *v = other.round(*v)),
        }
    }

    /// Whether values print and are stored as integers.
    pub fn is_integral(self) -> bool {
        matches!(self, ElemType::Bool | ElemType::Int | ElemType::I8)
    }
}

/// Rounds to the nearest E4M3FN value (ties to even), saturating at ±448.
fn round_e4m3fn(v: f64) -> f64 {
    if v.is_nan() || v == 0.0 {
        return v;
    }
    let a = v.abs();
    if a >= 448.0 {
        return 448.0f64.copysign(v);
    }
    let e = a.log2().floor().max(-6.0);
    let quantum = (e - 3.0).exp2();
    let r = (a / quantum).round_ties_even() * quantum;
    r.min(448.0).copysign(v)
}

/// Storage of a tensor's elements.
#[derive(Clone, Debug, PartialEq)]
pub enum Storage {
    /// Row-major, every element present, in the element type's buffer.
    Dense(Dense),
    /// Only the defined elements of a real or integer tensor.
    Sparse(Sparse),
    /// The true tuples of a Boolean tensor.
    Relation(Relation),
}

/// The true tuples of a relation: sorted, without duplicates, stored flat (`arity` u32s per
/// tuple), so a relation costs 4 bytes per position and no allocation per tuple.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Relation {
    arity: usize,
    len: usize,
    data: Vec<u32>,
}

impl Relation {
    /// A relation from tuples laid out flat that are already sorted and distinct.
    pub fn from_sorted(arity: usize, data: Vec<u32>) -> Relation {
        let len = data.len().checked_div(arity).unwrap_or(0);
        debug_assert!(
            data.chunks(arity.max(1)).is_sorted(),
            "tuples must be sorted"
        );
        Relation { arity, len, data }
    }

    /// A relation from `count` tuples laid out flat in any order, with duplicates allowed.
    pub fn from_flat(arity: usize, data: Vec<u32>, count: usize) -> Relation {
        if arity == 0 {
            return Relation {
                arity,
                len: count.min(1),
                data: Vec::new(),
            };
        }
        let data = match arity {
            1 => {
                let mut d = data;
                d.sort_unstable();
                d.dedup();
                d
            }
            2 => {
                let mut keys: Vec<u64> = data
                    .chunks_exact(2)
                    .map(|r| (r[0] as u64) << 32 | r[1] as u64)
                    .collect();
                keys.sort_unstable();
                keys.dedup();
                keys.iter()
                    .flat_map(|&k| [(k >> 32) as u32, k as u32])
                    .collect()
            }
            _ => {
                let rows = data.len() / arity;
                let mut order: Vec<usize> = (0..rows).collect();
                let row = |i: usize| &data[i * arity..(i + 1) * arity];
                order.sort_unstable_by(|&a, &b| row(a).cmp(row(b)));
                order.dedup_by(|a, b| row(*a) == row(*b));
                order.iter().flat_map(|&i| row(i).iter().copied()).collect()
            }
        };
        Relation {
            arity,
            len: data.len() / arity,
            data,
        }
    }

    /// Number of true tuples.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no tuple is true.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Tuple `i` in ascending order.
    pub fn tuple(&self, i: usize) -> &[u32] {
        &self.data[i * self.arity..(i + 1) * self.arity]
    }

    /// Every tuple's positions, one after another in ascending order.
    pub fn flat(&self) -> &[u32] {
        &self.data
    }

    /// The tuples in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = &[u32]> + '_ {
        (0..self.len).map(|i| self.tuple(i))
    }

    fn search(&self, t: &[u32]) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.tuple(mid).cmp(t) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// [`Relation::search`] among the tuples from `from` on, which is known to be at or
    /// before `t`'s place: galloping from it, then bisecting, so ascending searches cost
    /// about the distance between them rather than the whole length.
    fn search_from(&self, from: usize, t: &[u32]) -> Result<usize, usize> {
        let (mut lo, mut step) = (from.min(self.len), 1);
        while lo + step <= self.len && self.tuple(lo + step - 1) < t {
            lo += step;
            step *= 2;
        }
        // The first tuple not below `t` lies in lo..=hi (hi: the probe that stopped, or
        // the end).
        let mut hi = (lo + step - 1).min(self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.tuple(mid) < t {
                true => lo = mid + 1,
                false => hi = mid,
            }
        }
        match lo < self.len && self.tuple(lo) == t {
            true => Ok(lo),
            false => Err(lo),
        }
    }

    /// Whether a tuple is true.
    pub fn contains(&self, t: &[u32]) -> bool {
        t.len() == self.arity && self.search(t).is_ok()
    }

    /// The index of tuple `t` in ascending order, if it is true.
    pub fn find(&self, t: &[u32]) -> Option<usize> {
        (t.len() == self.arity)
            .then(|| self.search(t).ok())
            .flatten()
    }

    /// Makes `t` true, returning its index (where it is or now lies). Linear in the size.
    fn insert(&mut self, t: &[u32]) -> usize {
        match self.search(t) {
            Ok(i) => i,
            Err(i) => {
                let at = i * self.arity;
                self.data.splice(at..at, t.iter().copied());
                self.len += 1;
                i
            }
        }
    }

    /// Appends a tuple that sorts after every one held (the caller checks).
    fn push_last(&mut self, t: &[u32]) {
        self.data.extend_from_slice(t);
        self.len += 1;
    }

    /// The number of positions per tuple.
    pub fn arity(&self) -> usize {
        self.arity
    }

    /// Takes the tuples `removed` out and puts the tuples `added` in (tuples of other
    /// arities, removed tuples it lacks and added ones it holds change nothing), in place:
    /// one pass moving the runs between changes, and no new buffer unless it must grow, so
    /// a few changes to a large relation cost about one move of it.
    pub fn patch(&mut self, added: &[Vec<u32>], removed: &[Vec<u32>]) {
        let a = self.arity;
        if a == 0 {
            let holds = (self.len > 0 || !added.is_empty()) && removed.is_empty();
            self.len = usize::from(holds);
            return;
        }
        let mut removed: Vec<&[u32]> = removed
            .iter()
            .map(Vec::as_slice)
            .filter(|t| t.len() == a)
            .collect();
        removed.sort_unstable();
        removed.dedup();
        let mut from = 0;
        let gone: Vec<usize> = removed
            .into_iter()
            .filter_map(|t| {
                let at = self.search_from(from, t);
                from = at.unwrap_or_else(|e| e);
                at.ok()
            })
            .collect();
        let (mut write, mut read) = (0usize, 0usize);
        for &i in &gone {
            self.data.copy_within(read * a..i * a, write * a);
            write += i - read;
            read = i + 1;
        }
        self.data.copy_within(read * a..self.len * a, write * a);
        self.len -= gone.len();
        self.data.truncate(self.len * a);
        let mut new: Vec<&[u32]> = added
            .iter()
            .map(Vec::as_slice)
            .filter(|t| t.len() == a)
            .collect();
        new.sort_unstable();
        new.dedup();
        let mut from = 0;
        let places: Vec<(usize, &[u32])> = new
            .into_iter()
            .filter_map(|t| {
                let at = self.search_from(from, t);
                from = at.unwrap_or_else(|e| e);
                at.err().map(|at| (at, t))
            })
            .collect();
        let (old, k) = (self.len, places.len());
        if self.data.capacity() < (old + k) * a {
            self.data
                .reserve((old + k) * a - self.data.len() + old * a / 8);
        }
        self.data.resize((old + k) * a, 0);
        let mut end = old;
        for (j, &(at, t)) in places.iter().enumerate().rev() {
            let shift = j + 1;
            self.data.copy_within(at * a..end * a, (at + shift) * a);
            let slot = (at + j) * a;
            self.data[slot..slot + a].copy_from_slice(t);
            end = at;
        }
        self.len = old + k;
    }

    /// Makes one tuple true or false. Linear in the size; build large relations with
    /// [`Relation::from_flat`].
    pub fn set(&mut self, t: &[u32], value: bool) {
        if t.len() != self.arity {
            return;
        }
        match (self.search(t), value) {
            (Err(_), true) => {
                self.insert(t);
            }
            (Ok(i), false) => {
                let at = i * self.arity;
                self.data.drain(at..at + self.arity);
                self.len -= 1;
            }
            _ => {}
        }
    }
}

/// A tensor value.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Element type.
    pub elem: ElemType,
    /// Extent of each axis.
    pub shape: Vec<usize>,
    /// Elements.
    pub storage: Storage,
}

/// A dense buffer the system would not give, though the memory budget let it through.
#[derive(Clone, Copy, Debug)]
pub struct AllocError {
    /// The element type asked for.
    pub elem: ElemType,
    /// How many elements.
    pub n: usize,
}

impl AllocError {
    /// The bytes asked for.
    pub fn bytes(&self) -> u128 {
        (self.n as u128).saturating_mul(self.elem.dense_bytes())
    }
}

impl Tensor {
    /// A dense tensor; `values` are rounded to `elem`. Fails if the length does not fit.
    pub fn dense(elem: ElemType, shape: Vec<usize>, values: Vec<f64>) -> Result<Tensor, String> {
        fits(&shape, values.len())?;
        Ok(Tensor {
            elem,
            shape,
            storage: Storage::Dense(Dense::from_f64(elem, values)),
        })
    }

    /// [`Tensor::dense`] of borrowed values (a training step's parameters, which stay with
    /// the optimizer): converted to `elem` in one pass.
    pub fn dense_from(elem: ElemType, shape: Vec<usize>, values: &[f64]) -> Result<Tensor, String> {
        fits(&shape, values.len())?;
        Ok(Tensor {
            elem,
            shape,
            storage: Storage::Dense(Dense::from_f64_slice(elem, values)),
        })
    }

    /// A dense tensor of the `shape`'s element count of `values`, each rounded to `elem`
    /// as it is stored (no f64 copy of the whole); an error where the allocation fails.
    pub fn generated(
        elem: ElemType,
        shape: Vec<usize>,
        values: impl Iterator<Item = f64>,
    ) -> Result<Tensor, AllocError> {
        let n: usize = shape.iter().product();
        let dense = Dense::generated(elem, n, values).ok_or(AllocError { elem, n })?;
        Ok(Tensor {
            elem,
            shape,
            storage: Storage::Dense(dense),
        })
    }

    /// [`Tensor::zeros`], or an error where the allocation fails.
    pub fn try_zeros(elem: ElemType, shape: Vec<usize>) -> Result<Tensor, AllocError> {
        let n: usize = shape.iter().product();
        let dense = Dense::try_zeros(elem, n).ok_or(AllocError { elem, n })?;
        Ok(Tensor {
            elem,
            shape,
            storage: Storage::Dense(dense),
        })
    }

    /// A dense tensor of zeros.
    pub fn zeros(elem: ElemType, shape: Vec<usize>) -> Tensor {
        let n = shape.iter().product();
        Tensor {
            elem,
            shape,
            storage: Storage::Dense(Dense::zeros(elem, n)),
        }
    }

    /// An empty sparse tensor: a relation for `bool`, otherwise a tensor of defined elements.
    pub fn sparse(elem: ElemType, shape: Vec<usize>) -> Tensor {
        let storage = if elem == ElemType::Bool {
            Storage::Relation(Relation::from_flat(shape.len(), Vec::new(), 0))
        } else {
            let elements = Sparse::new(shape.len());
            return Tensor::of_sparse(elem, shape, elements);
        };
        Tensor {
            elem,
            shape,
            storage,
        }
    }

    /// A tensor holding `elements`: an `int` tensor's keep their integers beside the f64
    /// image (kernels that compute in floating point build elements from f64 values).
    pub fn of_sparse(elem: ElemType, shape: Vec<usize>, elements: Sparse) -> Tensor {
        let elements = if elem == ElemType::Int {
            elements.as_ints()
        } else {
            elements
        };
        Tensor {
            elem,
            shape,
            storage: Storage::Sparse(elements),
        }
    }

    /// A relation from tuples of positions.
    pub fn relation(shape: Vec<usize>, tuples: impl IntoIterator<Item = Vec<u32>>) -> Tensor {
        let mut data = Vec::new();
        let mut count = 0;
        for t in tuples {
            data.extend_from_slice(&t);
            count += 1;
        }
        Tensor::relation_flat(shape, data, count)
    }

    /// A relation from `count` tuples laid out flat (any order, duplicates allowed).
    pub fn relation_flat(shape: Vec<usize>, data: Vec<u32>, count: usize) -> Tensor {
        Tensor {
            elem: ElemType::Bool,
            storage: Storage::Relation(Relation::from_flat(shape.len(), data, count)),
            shape,
        }
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Row-major offset of an in-bounds index.
    pub(crate) fn offset(&self, index: &[usize]) -> Option<usize> {
        if index.len() != self.shape.len() {
            return None;
        }
        let mut off = 0usize;
        for (&i, &n) in index.iter().zip(&self.shape) {
            if i >= n {
                return None;
            }
            off = off * n + i;
        }
        Some(off)
    }

    /// The element at `index` if it is defined (dense elements always are).
    pub fn get(&self, index: &[usize]) -> Option<f64> {
        match &self.storage {
            Storage::Dense(v) => self.offset(index).and_then(|o| v.get(o)),
            Storage::Sparse(m) => {
                let key: Vec<u32> = index.iter().map(|&i| i as u32).collect();
                m.get(&key)
            }
            Storage::Relation(r) => {
                let key: Vec<u32> = index.iter().map(|&i| i as u32).collect();
                r.contains(&key).then_some(1.0)
            }
        }
    }

    /// Row-major offset of an in-bounds `index` (unchecked: the evaluators' reads).
    #[inline]
    fn offset_at(&self, index: &[u32]) -> usize {
        index
            .iter()
            .zip(&self.shape)
            .fold(0usize, |off, (&i, &n)| off * n + i as usize)
    }

    /// The element at an in-bounds `index` if it is defined; the evaluator's allocation-free
    /// read.
    pub fn get_at(&self, index: &[u32]) -> Option<f64> {
        match &self.storage {
            Storage::Dense(v) => v.get(self.offset_at(index)),
            Storage::Sparse(m) => m.get(index),
            Storage::Relation(r) => r.contains(index).then_some(1.0),
        }
    }

    /// [`Tensor::get_at`] as an integer: exact for an `int` tensor (§8), the value taken
    /// toward zero for the others.
    pub fn get_int_at(&self, index: &[u32]) -> Option<i64> {
        match &self.storage {
            Storage::Dense(v) => v.get_int(self.offset_at(index)),
            Storage::Sparse(m) => m.get_int(index),
            Storage::Relation(r) => r.contains(index).then_some(1),
        }
    }

    /// [`Tensor::get`] as an integer (see [`Tensor::get_int_at`]).
    pub fn get_int(&self, index: &[usize]) -> Option<i64> {
        let key: Vec<u32> = index
            .iter()
            .map(|&i| u32::try_from(i).unwrap_or(u32::MAX))
            .collect();
        self.offset(index).and_then(|_| self.get_int_at(&key))
    }

    /// The element at `index` as output writes it: an `int` tensor's exactly, another's
    /// in the shortest form that reads back (§10); `v` is its value as f64.
    pub fn format_at(&self, index: &[usize], v: f64) -> String {
        match (self.elem, self.get_int(index)) {
            (ElemType::Int, Some(i)) => i.to_string(),
            _ => format_number(v, self.elem),
        }
    }

    /// Sets one element of an integer, exactly in an `int` tensor; out-of-bounds writes are
    /// ignored.
    pub fn set_int(&mut self, index: &[usize], v: i64) {
        if let Some(off) = self.offset(index) {
            match &mut self.storage {
                Storage::Dense(d) => d.set_int(off, v),
                Storage::Sparse(m) => {
                    let key: Vec<u32> = index.iter().map(|&i| i as u32).collect();
                    m.set_int(&key, v);
                }
                Storage::Relation(r) => {
                    let key: Vec<u32> = index.iter().map(|&i| i as u32).collect();
                    r.set(&key, v != 0);
                }
            }
        }
    }

    /// The element at `index`, 0 where undefined (§4: elements are 0 by default).
    pub fn value(&self, index: &[usize]) -> f64 {
        self.get(index).unwrap_or(0.0)
    }

    /// Sets one element (rounded to the element type); out-of-bounds writes are ignored.
    pub fn set(&mut self, index: &[usize], v: f64) {
        let v = self.elem.round(v);
        if let Some(off) = self.offset(index) {
            match &mut self.storage {
                Storage::Dense(d) => d.set(off, v),
                Storage::Sparse(m) => {
                    let key: Vec<u32> = index.iter().map(|&i| i as u32).collect();
                    m.set(&key, v);
                }
                Storage::Relation(r) => {
                    let key: Vec<u32> = index.iter().map(|&i| i as u32).collect();
                    r.set(&key, v != 0.0);
                }
            }
        }
    }

    /// Defined elements in ascending index order (every element of a dense tensor or of a
    /// sparse one whose other elements are 0; the true elements of a relation).
    pub fn entries(&self) -> Vec<(Vec<usize>, f64)> {
        let mut out = Vec::new();
        self.each_entry(&mut |idx, v| out.push((idx.to_vec(), v)));
        out
    }

    /// Bytes its elements take (a shared buffer counted in full): what the memory budget
    /// sees of a value while others are computed.
    pub fn held_bytes(&self) -> u64 {
        let b = match &self.storage {
            Storage::Dense(d) => (d.len() as u128) * self.elem.dense_bytes(),
            Storage::Sparse(m) => {
                let per = if m.ints().is_some() { 16 } else { 8 };
                (m.positions().flat().len() as u128) * 4 + (m.len() as u128) * per
            }
            Storage::Relation(r) => (r.flat().len() as u128) * 4,
        };
        u64::try_from(b).unwrap_or(u64::MAX)
    }

    /// Calls `f` with each element [`Tensor::entries`] lists, in the same order, without
    /// gathering them first.
    pub fn each_entry(&self, f: &mut dyn FnMut(&[usize], f64)) {
        let mut idx = vec![0usize; self.shape.len()];
        let set = |k: &[u32], idx: &mut Vec<usize>| {
            for (slot, &i) in idx.iter_mut().zip(k) {
                *slot = i as usize;
            }
        };
        match &self.storage {
            Storage::Dense(v) => {
                for x in v.values() {
                    f(&idx, x);
                    self.step(&mut idx);
                }
            }
            Storage::Sparse(m) if m.zeros() => {
                let mut stored = m.iter().peekable();
                let total: usize = self.shape.iter().product();
                for _ in 0..total {
                    let here =
                        stored.next_if(|(k, _)| k.iter().zip(&idx).all(|(&a, &b)| a as usize == b));
                    f(&idx, here.map_or(0.0, |(_, v)| v));
                    self.step(&mut idx);
                }
            }
            Storage::Sparse(m) => m.iter().for_each(|(k, x)| {
                set(k, &mut idx);
                f(&idx, x);
            }),
            Storage::Relation(r) => r.iter().for_each(|k| {
                set(k, &mut idx);
                f(&idx, 1.0);
            }),
        }
    }

    /// The next index in row-major order (wrapping to all zeros after the last).
    fn step(&self, idx: &mut [usize]) {
        odometer::advance(idx, &self.shape);
    }

    /// All elements as a dense row-major vector of integers (undefined ones as 0): an `int`
    /// tensor's exactly.
    pub fn to_dense_ints(&self) -> Vec<i64> {
        match &self.storage {
            Storage::Dense(v) => v.to_i64().into_owned(),
            Storage::Sparse(_) | Storage::Relation(_) => {
                let mut out = vec![0; self.shape.iter().product()];
                self.each_entry(&mut |idx, _| {
                    if let (Some(o), Some(x)) = (self.offset(idx), self.get_int(idx)) {
                        out[o] = x;
                    }
                });
                out
            }
        }
    }

    /// All elements as a dense row-major vector (undefined ones as 0).
    pub fn to_dense_values(&self) -> Vec<f64> {
        match &self.storage {
            Storage::Dense(v) => v.to_f64().into_owned(),
            Storage::Sparse(_) | Storage::Relation(_) => {
                let mut out = vec![0.0; self.shape.iter().product()];
                for (idx, x) in self.entries() {
                    if let Some(o) = self.offset(&idx) {
                        out[o] = x;
                    }
                }
                out
            }
        }
    }
}

/// Whether `v` is an integer below 2⁵³ in magnitude: f64 holds it, and sums of two such
/// are exact or reach 2⁵³ (rounding cannot bring them back below), so a kernel adding
/// integers in f64 can tell when it is exact (§8).
pub fn sums_exactly(v: f64) -> bool {
    v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0
}

/// Formats a number in the shortest form that reads back to the same value (§10).
pub fn format_number(v: f64, elem: ElemType) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if elem.is_integral() && v.fract() == 0.0 && v.abs() < 1e16 {
        return format!("{}", v as i64);
    }
    if elem == ElemType::F64 {
        shortest(format!("{v}"), format!("{v:e}"))
    } else {
        let f = v as f32;
        if f as f64 == v {
            shortest(format!("{f}"), format!("{f:e}"))
        } else {
            shortest(format!("{v}"), format!("{v:e}"))
        }
    }
}

fn shortest(plain: String, sci: String) -> String {
    if sci.len() < plain.len() {
        sci
    } else {
        plain
    }
}

/// Whether `len` values fill `shape` exactly.
fn fits(shape: &[usize], len: usize) -> Result<(), String> {
    let n: usize = shape.iter().product();
    match n == len {
        true => Ok(()),
        false => Err(format!("shape {shape:?} needs {n} values, got {len}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Patching in place gives the set a `BTreeSet` computes, for changes anywhere, at the
    /// ends, absent removals, present insertions and duplicates.
    #[test]
    fn a_relation_patched_in_place_holds_the_changed_set() {
        let mut state = 11u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as u32
        };
        for round in 0..40 {
            let rows: Vec<Vec<u32>> = (0..round * 5).map(|_| vec![next(9), next(9)]).collect();
            let mut r = Relation::from_flat(2, rows.concat(), rows.len());
            let added: Vec<Vec<u32>> = (0..next(12)).map(|_| vec![next(10), next(10)]).collect();
            let removed: Vec<Vec<u32>> = (0..next(12)).map(|_| vec![next(10), next(10)]).collect();
            let mut want: std::collections::BTreeSet<Vec<u32>> = rows.into_iter().collect();
            removed.iter().for_each(|t| {
                want.remove(t);
            });
            want.extend(added.iter().cloned());
            r.patch(&added, &removed);
            let got: Vec<Vec<u32>> = r.iter().map(<[u32]>::to_vec).collect();
            assert_eq!(got, want.into_iter().collect::<Vec<_>>(), "round {round}");
        }
    }

    #[test]
    fn fp8_saturates_at_448_and_rounds_to_even() {
        assert_eq!(ElemType::FP8.round(1000.0), 448.0);
        assert_eq!(ElemType::FP8.round(-500.0), -448.0);
        assert_eq!(ElemType::FP8.round(1.0625), 1.0);
        assert_eq!(ElemType::FP8.round(1.1875), 1.25);
        assert_eq!(ElemType::FP8.round(2f64.powi(-9)), 2f64.powi(-9));
    }

    #[test]
    fn numbers_print_shortest() {
        assert_eq!(format_number(0.1f32 as f64, ElemType::F32), "0.1");
        assert_eq!(format_number(2.0, ElemType::F32), "2");
        assert_eq!(format_number(1e-7f32 as f64, ElemType::F32), "1e-7");
        assert_eq!(format_number(-0.0, ElemType::F32), "0");
        assert_eq!(format_number(8.0, ElemType::Int), "8");
    }

    #[test]
    fn relations_sort_and_deduplicate_at_every_arity() {
        let r = Relation::from_flat(2, vec![3, 1, 0, 9, 3, 1, 0, 2], 4);
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            vec![&[0, 2][..], &[0, 9], &[3, 1]]
        );
        let r = Relation::from_flat(3, vec![1, 0, 0, 0, 5, 5, 1, 0, 0], 3);
        assert_eq!(r.len(), 2);
        assert!(r.contains(&[0, 5, 5]) && !r.contains(&[0, 5]));
        let r = Relation::from_flat(1, vec![4, 2, 4], 3);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![&[2][..], &[4]]);
        assert_eq!(Relation::from_flat(0, Vec::new(), 3).len(), 1);
        assert!(Relation::from_flat(0, Vec::new(), 0).is_empty());
        let mut r = Relation::from_flat(2, vec![1, 1], 1);
        r.set(&[0, 7], true);
        r.set(&[1, 1], false);
        r.set(&[0, 7], true);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![&[0, 7][..]]);
    }

    #[test]
    fn relations_are_sparse_and_default_to_zero() {
        let r = Tensor::relation(vec![10_000, 10_000], vec![vec![1, 2]]);
        assert_eq!(r.value(&[1, 2]), 1.0);
        assert_eq!(r.value(&[2, 1]), 0.0);
        assert_eq!(r.get(&[2, 1]), None);
    }
}
