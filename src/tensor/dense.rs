//! A dense tensor's elements in their storage type (§4): f32 tensors hold `f32`s, bf16 and
//! f16 hold 16-bit values, fp8 and i8 one byte each, so a tensor takes the memory its type
//! says and an f32 product reads its operands in place. Buffers are shared until written
//! (copy on write): every evaluation starts from the program's data without copying it.

use super::ElemType;

mod add_runs;
use half::{bf16, f16};
use std::borrow::Cow;
use std::sync::Arc;

/// Row-major elements of a dense tensor, in the narrowest buffer that holds its type.
#[derive(Clone, Debug, PartialEq)]
pub enum Dense {
    /// `f64` and dense Booleans.
    F64(Arc<Buf<f64>>),
    /// `int`: exact over all of i64 (§8).
    I64(Arc<Buf<i64>>),
    /// `f32`.
    F32(Arc<Buf<f32>>),
    /// `bf16`.
    BF16(Arc<Buf<bf16>>),
    /// `f16`.
    F16(Arc<Buf<f16>>),
    /// `fp8` (E4M3FN bit patterns).
    FP8(Arc<Buf<u8>>),
    /// `i8`.
    I8(Arc<Buf<i8>>),
}

/// Memory another owner lends a tensor (a NumPy array bound from Python): read in place,
/// copied the first time the tensor is written.
pub type Lent<T> = Arc<dyn AsRef<[T]> + Send + Sync>;

/// The elements of a [`Dense`] buffer: the engine's own, or lent (then `owned` is empty).
#[derive(Clone)]
pub struct Buf<T> {
    owned: Vec<T>,
    lent: Option<Lent<T>>,
}

impl<T> std::ops::Deref for Buf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.lent {
            Some(l) => (**l).as_ref(),
            None => &self.owned,
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Buf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: PartialEq> PartialEq for Buf<T> {
    fn eq(&self, other: &Buf<T>) -> bool {
        **self == **other
    }
}

/// The buffer of `d` to write: copied first if another tensor shares it or it is lent.
fn owned<T: Clone>(d: &mut Arc<Buf<T>>) -> &mut Vec<T> {
    let b = Arc::make_mut(d);
    if let Some(l) = b.lent.take() {
        b.owned = (*l).as_ref().to_vec();
    }
    &mut b.owned
}

/// `buf` cut into one slice per (offset, length) span, where the spans lie apart and in
/// order (what threads can then write at once); a span is cut at the end of `buf` (empty
/// past it). `None` where a span starts before the previous one ends.
pub(crate) fn spans_mut<T>(
    buf: &mut [T],
    spans: impl IntoIterator<Item = (usize, usize)>,
) -> Option<Vec<&mut [T]>> {
    let mut pieces = Vec::new();
    let (mut rest, mut start) = (buf, 0);
    for (at, n) in spans {
        let tail = std::mem::take(&mut rest);
        let skip = at.checked_sub(start)?.min(tail.len());
        let tail = &mut tail[skip..];
        let (piece, after) = tail.split_at_mut(n.min(tail.len()));
        (rest, start) = (after, at + n);
        pieces.push(piece);
    }
    Some(pieces)
}

fn own<T>(v: Vec<T>) -> Arc<Buf<T>> {
    Arc::new(Buf {
        owned: v,
        lent: None,
    })
}

fn lent<T>(l: Lent<T>) -> Arc<Buf<T>> {
    Arc::new(Buf {
        owned: Vec::new(),
        lent: Some(l),
    })
}

/// What [`Dense::add_each`] calls: it hands each (offset, value) pair to the function it
/// is given.
pub(super) type Writes<'w> = dyn FnMut(&mut dyn FnMut(usize, f64)) + 'w;

/// Consecutive values to add from one offset on, in either width.
#[derive(Clone, Copy)]
pub enum Run<'a> {
    /// f32 values.
    F32(&'a [f32]),
    /// f64 values.
    F64(&'a [f64]),
}

impl Run<'_> {
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Run::F32(v) => v.len(),
            Run::F64(v) => v.len(),
        }
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values `from..to` of it.
    fn part(&self, from: usize, to: usize) -> Self {
        match *self {
            Run::F32(v) => Run::F32(&v[from..to]),
            Run::F64(v) => Run::F64(&v[from..to]),
        }
    }
}

/// The most values of one run a worker adds at a time when runs are split: a run as long as
/// a layer's whole window is shared among the workers too.
const RUN_PIECE: usize = 1 << 15;

/// Applies `$body` to the buffer of whichever variant `$d` is, bound as `$v`.
macro_rules! each {
    ($d:expr, $v:ident => $body:expr) => {
        match $d {
            Dense::F64($v) => $body,
            Dense::I64($v) => $body,
            Dense::F32($v) => $body,
            Dense::BF16($v) => $body,
            Dense::F16($v) => $body,
            Dense::FP8($v) => $body,
            Dense::I8($v) => $body,
        }
    };
}

impl Dense {
    /// `n` zeros of type `elem`.
    pub fn zeros(elem: ElemType, n: usize) -> Dense {
        match elem {
            ElemType::F32 => Dense::F32(own(vec![0.0; n])),
            ElemType::BF16 => Dense::BF16(own(vec![bf16::ZERO; n])),
            ElemType::F16 => Dense::F16(own(vec![f16::ZERO; n])),
            ElemType::FP8 => Dense::FP8(own(vec![0; n])),
            ElemType::I8 => Dense::I8(own(vec![0; n])),
            ElemType::Int => Dense::I64(own(vec![0; n])),
            ElemType::F64 | ElemType::Bool => Dense::F64(own(vec![0.0; n])),
        }
    }

    /// `values` rounded to `elem` and stored in its buffer.
    pub fn from_f64(elem: ElemType, mut values: Vec<f64>) -> Dense {
        match elem {
            ElemType::F64 | ElemType::Bool => {
                elem.round_all(&mut values);
                Dense::F64(own(values))
            }
            _ => Dense::from_f64_slice(elem, &values),
        }
    }

    /// [`Dense::from_f64`] of borrowed values: a narrower type is converted straight from
    /// them, with no copy first.
    pub fn from_f64_slice(elem: ElemType, values: &[f64]) -> Dense {
        match elem {
            ElemType::F32 => Dense::F32(own(values.iter().map(|&v| v as f32).collect())),
            ElemType::BF16 => Dense::BF16(own(values.iter().map(|&v| bf16::from_f64(v)).collect())),
            ElemType::F16 => Dense::F16(own(values.iter().map(|&v| f16::from_f64(v)).collect())),
            ElemType::FP8 => Dense::FP8(own(values.iter().map(|&v| fp8_encode(v)).collect())),
            ElemType::I8 => Dense::I8(own(values
                .iter()
                .map(|&v| ElemType::I8.round(v) as i8)
                .collect())),
            ElemType::Int => Dense::I64(own(values.iter().map(|&v| int_of(v)).collect())),
            ElemType::F64 | ElemType::Bool => {
                let mut values = values.to_vec();
                elem.round_all(&mut values);
                Dense::F64(own(values))
            }
        }
    }

    /// `n` zeros of type `elem`, `None` where the allocation fails (the budget of §15 let
    /// it through, but the system has less): the caller reports it rather than aborting.
    /// Zeroed by the allocator, so untouched pages cost nothing, as with `vec![0; n]`.
    pub fn try_zeros(elem: ElemType, n: usize) -> Option<Dense> {
        fn try_zeroed_vec<T: bytemuck::Zeroable>(n: usize) -> Result<Vec<T>, ()> {
            super::fallible::handled(|| bytemuck::allocation::try_zeroed_vec(n))
        }
        Some(match elem {
            ElemType::F32 => Dense::F32(own(try_zeroed_vec(n).ok()?)),
            ElemType::BF16 => Dense::BF16(own(try_zeroed_vec(n).ok()?)),
            ElemType::F16 => Dense::F16(own(try_zeroed_vec(n).ok()?)),
            ElemType::FP8 => Dense::FP8(own(try_zeroed_vec(n).ok()?)),
            ElemType::I8 => Dense::I8(own(try_zeroed_vec(n).ok()?)),
            ElemType::Int => Dense::I64(own(try_zeroed_vec(n).ok()?)),
            ElemType::F64 | ElemType::Bool => Dense::F64(own(try_zeroed_vec(n).ok()?)),
        })
    }

    /// The first `n` of `values` rounded to `elem`, written straight into its buffer (a
    /// parameter of a billion f32 elements is drawn into one 4 GB buffer, with no f64 copy
    /// first); `None` where the allocation fails.
    pub fn generated(elem: ElemType, n: usize, values: impl Iterator<Item = f64>) -> Option<Dense> {
        fn filled<T>(n: usize, values: impl Iterator<Item = T>) -> Option<Vec<T>> {
            let mut v = Vec::new();
            super::fallible::handled(|| v.try_reserve_exact(n)).ok()?;
            v.extend(values.take(n));
            Some(v)
        }
        Some(match elem {
            ElemType::F32 => Dense::F32(own(filled(n, values.map(|v| v as f32))?)),
            ElemType::BF16 => Dense::BF16(own(filled(n, values.map(bf16::from_f64))?)),
            ElemType::F16 => Dense::F16(own(filled(n, values.map(f16::from_f64))?)),
            ElemType::FP8 => Dense::FP8(own(filled(n, values.map(fp8_encode))?)),
            ElemType::I8 => Dense::I8(own(filled(n, values.map(|v| ElemType::I8.round(v) as i8))?)),
            ElemType::Int => Dense::I64(own(filled(n, values.map(int_of))?)),
            ElemType::F64 | ElemType::Bool => {
                Dense::F64(own(filled(n, values.map(|v| elem.round(v)))?))
            }
        })
    }

    /// Integers kept as they are: an `int` tensor's exact elements.
    pub fn from_i64(values: Vec<i64>) -> Dense {
        Dense::I64(own(values))
    }

    /// f32 values kept as they are (they are exact as f32).
    pub fn from_f32(values: Vec<f32>) -> Dense {
        Dense::F32(own(values))
    }

    /// f32 values read in place from memory another owner lends.
    pub fn lent_f32(values: Lent<f32>) -> Dense {
        Dense::F32(lent(values))
    }

    /// f64 values read in place from memory another owner lends.
    pub fn lent_f64(values: Lent<f64>) -> Dense {
        Dense::F64(lent(values))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each!(self, v => v.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element at offset `i` as an integer: exact for an `int` buffer, truncated from
    /// the others (what an integer equation reads of a Boolean or an `i8` tensor).
    #[inline]
    pub fn get_int(&self, i: usize) -> Option<i64> {
        match self {
            Dense::I64(v) => v.get(i).copied(),
            other => other.get(i).map(int_of),
        }
    }

    /// The element at offset `i`, exactly, as f64 (an `int` beyond ±2⁵³ rounded).
    #[inline]
    pub fn get(&self, i: usize) -> Option<f64> {
        match self {
            Dense::F64(v) => v.get(i).copied(),
            Dense::I64(v) => v.get(i).map(|&x| x as f64),
            Dense::F32(v) => v.get(i).map(|&x| f64::from(x)),
            Dense::BF16(v) => v.get(i).map(|x| x.to_f64()),
            Dense::F16(v) => v.get(i).map(|x| x.to_f64()),
            Dense::FP8(v) => v.get(i).map(|&x| fp8_decode(x)),
            Dense::I8(v) => v.get(i).map(|&x| f64::from(x)),
        }
    }

    /// Every element, exactly, as f64, without converting the buffer first.
    pub fn values(&self) -> impl Iterator<Item = f64> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Whether this is the buffer a dense tensor of `elem` keeps.
    pub fn holds(&self, elem: ElemType) -> bool {
        matches!(
            (self, elem),
            (Dense::F64(_), ElemType::F64)
                | (Dense::I64(_), ElemType::Int)
                | (Dense::F32(_), ElemType::F32)
                | (Dense::BF16(_), ElemType::BF16)
                | (Dense::F16(_), ElemType::F16)
                | (Dense::FP8(_), ElemType::FP8)
                | (Dense::I8(_), ElemType::I8)
        )
    }

    /// The elements at `start`, `start + step`, … into `out` (one per slot), exactly, as
    /// f64; the type is matched once. Offsets past the end read 0.
    pub fn gather(&self, start: i64, step: i64, out: &mut [f64]) {
        fn fill<T>(v: &[T], start: i64, step: i64, out: &mut [f64], f: impl Fn(&T) -> f64) {
            for (j, slot) in out.iter_mut().enumerate() {
                let at = start + step * j as i64;
                *slot = usize::try_from(at)
                    .ok()
                    .and_then(|a| v.get(a))
                    .map_or(0.0, &f);
            }
        }
        match self {
            Dense::F64(v) => fill(v, start, step, out, |&x| x),
            Dense::I64(v) => fill(v, start, step, out, |&x| x as f64),
            Dense::F32(v) => fill(v, start, step, out, |&x| f64::from(x)),
            Dense::BF16(v) => fill(v, start, step, out, |x| x.to_f64()),
            Dense::F16(v) => fill(v, start, step, out, |x| x.to_f64()),
            Dense::FP8(v) => fill(v, start, step, out, |&x| fp8_decode(x)),
            Dense::I8(v) => fill(v, start, step, out, |&x| f64::from(x)),
        }
    }

    /// Adds values to elements: `each` is called once and hands every (offset, value) pair
    /// to the function it is given; each sum is rounded to the type (a shared buffer is
    /// copied once, the type matched once). Returns the first sum that is not finite where
    /// its element was (offsets past the end are ignored).
    pub fn add_each(&mut self, each: &mut Writes) -> Option<f64> {
        fn run<T: Clone>(
            d: &mut Arc<Buf<T>>,
            each: &mut Writes,
            read: impl Fn(&T) -> f64,
            write: impl Fn(f64) -> T,
        ) -> Option<f64> {
            let d = owned(d);
            let mut bad = None;
            each(&mut |i, v| {
                if let Some(x) = d.get_mut(i) {
                    let old = read(x);
                    let new = old + v;
                    if old.is_finite() && !new.is_finite() && bad.is_none() {
                        bad = Some(new);
                    }
                    *x = write(new);
                }
            });
            bad
        }
        match self {
            Dense::F64(d) => run(d, each, |&x| x, |v| v),
            Dense::I64(d) => run(d, each, |&x| x as f64, int_of),
            Dense::F32(d) => run(d, each, |&x| f64::from(x), |v| v as f32),
            Dense::BF16(d) => run(d, each, |x| x.to_f64(), bf16::from_f64),
            Dense::F16(d) => run(d, each, |x| x.to_f64(), f16::from_f64),
            Dense::FP8(d) => run(d, each, |&x| fp8_decode(x), fp8_encode),
            Dense::I8(d) => run(d, each, |&x| f64::from(x), |v| ElemType::I8.round(v) as i8),
        }
    }

    /// [`Dense::add_each`] for runs of consecutive elements, each (offset, values) added
    /// in one loop (sums rounded to the type, the first that is not finite where its
    /// element was returned, in the order of `runs`). Runs past the end are cut. With
    /// `split`, runs that lie apart and in order are added on the current rayon pool's
    /// workers (each element receives one addition either way).
    pub fn add_runs(&mut self, runs: &[(usize, Run)], split: bool) -> Option<f64> {
        use add_runs::{run, run_f32};
        match self {
            Dense::F64(d) => run(d, runs, split, |&x| x, |v| v),
            Dense::I64(d) => run(d, runs, split, |&x| x as f64, int_of),
            Dense::F32(d) => run_f32(d, runs, split),
            Dense::BF16(d) => run(d, runs, split, |x| x.to_f64(), bf16::from_f64),
            Dense::F16(d) => run(d, runs, split, |x| x.to_f64(), f16::from_f64),
            Dense::FP8(d) => run(d, runs, split, |&x| fp8_decode(x), fp8_encode),
            Dense::I8(d) => run(
                d,
                runs,
                split,
                |&x| f64::from(x),
                |v| ElemType::I8.round(v) as i8,
            ),
        }
    }

    /// Stores `v` (already rounded to the type, or rounded by the conversion) at offset `i`;
    /// a shared buffer is copied first.
    #[inline]
    pub fn set(&mut self, i: usize, v: f64) {
        match self {
            Dense::F64(d) => set_in(d, i, v),
            Dense::I64(d) => set_in(d, i, int_of(v)),
            Dense::F32(d) => set_in(d, i, v as f32),
            Dense::BF16(d) => set_in(d, i, bf16::from_f64(v)),
            Dense::F16(d) => set_in(d, i, f16::from_f64(v)),
            Dense::FP8(d) => set_in(d, i, fp8_encode(v)),
            Dense::I8(d) => set_in(d, i, ElemType::I8.round(v) as i8),
        }
    }

    /// Stores an integer exactly at offset `i` (converted where the buffer is not `int`).
    #[inline]
    pub fn set_int(&mut self, i: usize, v: i64) {
        match self {
            Dense::I64(d) => set_in(d, i, v),
            other => other.set(i, v as f64),
        }
    }

    /// Every element as an integer: borrowed from an `int` buffer, converted from the others.
    pub fn to_i64(&self) -> Cow<'_, [i64]> {
        match self {
            Dense::I64(v) => Cow::Borrowed(&v[..]),
            other => Cow::Owned((0..other.len()).filter_map(|i| other.get_int(i)).collect()),
        }
    }

    /// Every element as f64: borrowed from an f64 buffer, converted from the others.
    pub fn to_f64(&self) -> Cow<'_, [f64]> {
        match self {
            Dense::F64(v) => Cow::Borrowed(&v[..]),
            Dense::F32(v) => Cow::Owned(v.iter().map(|&x| f64::from(x)).collect()),
            other => Cow::Owned((0..other.len()).filter_map(|i| other.get(i)).collect()),
        }
    }

    /// Every element as f32: borrowed from an f32 buffer, rounded from the others.
    pub fn to_f32(&self) -> Cow<'_, [f32]> {
        match self {
            Dense::F32(v) => Cow::Borrowed(&v[..]),
            Dense::F64(v) => Cow::Owned(v.iter().map(|&x| x as f32).collect()),
            other => Cow::Owned(
                (0..other.len())
                    .filter_map(|i| other.get(i))
                    .map(|x| x as f32)
                    .collect(),
            ),
        }
    }
}

/// An integer element from a value computed in f64 (a count, a sum of Booleans): exact
/// below 2⁵³, which is where the floating kernels that write `int` tensors stay (the plan
/// gives an equation that reads integer values to the exact loops); NaN reads 0.
#[inline]
fn int_of(v: f64) -> i64 {
    v as i64
}

/// Writes one element, copying the buffer first if another tensor shares it.
#[inline]
fn set_in<T: Clone>(d: &mut Arc<Buf<T>>, i: usize, v: T) {
    if let Some(slot) = owned(d).get_mut(i) {
        *slot = v;
    }
}

/// The value of an E4M3FN bit pattern: 4 exponent bits (bias 7), 3 mantissa bits, no
/// infinities, NaN only at S.1111.111.
pub fn fp8_decode(b: u8) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((b >> 3) & 0x0f);
    let man = f64::from(b & 0x07);
    if exp == 0x0f && b & 0x07 == 0x07 {
        return f64::NAN;
    }
    let magnitude = if exp == 0 {
        man / 8.0 * 2f64.powi(-6)
    } else {
        (1.0 + man / 8.0) * 2f64.powi(exp - 7)
    };
    sign * magnitude
}

/// The E4M3FN bit pattern nearest `v` (ties to even), saturating at ±448.
pub fn fp8_encode(v: f64) -> u8 {
    let r = ElemType::FP8.round(v);
    if r.is_nan() {
        return 0x7f;
    }
    let sign = if r.is_sign_negative() { 0x80 } else { 0 };
    let a = r.abs();
    if a == 0.0 {
        return sign;
    }
    // The rounded value is exact in the format: a subnormal is a multiple of 2⁻⁹, a normal
    // number (1 + m/8)·2^e.
    if a < 2f64.powi(-6) {
        return sign | (a / 2f64.powi(-9)) as u8;
    }
    let e = a.log2().floor() as i32;
    let man = ((a / 2f64.powi(e) - 1.0) * 8.0) as u8;
    sign | (((e + 7) as u8) << 3) | man
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adding runs gives what adding their elements one by one gives, the blow-up included.
    #[test]
    fn runs_add_as_elements_do() {
        let start: Vec<f64> = vec![1.0, -2.0, 0.5, 3.0e38, 4.0, f64::INFINITY];
        let mut by_runs = Dense::from_f64(ElemType::F32, start.clone());
        let mut by_elements = Dense::from_f64(ElemType::F32, start);
        let adds = [0.25f32, 1.0, -0.5, 3.0e38];
        let runs = [
            (1, Run::F32(&adds[..2])),
            (3, Run::F32(&adds[2..])),
            (5, Run::F64(&[1.0, 2.0])),
        ];
        let a = by_runs.add_runs(&runs, false);
        let b = by_elements.add_each(&mut |put| {
            for (k, &v) in adds.iter().enumerate() {
                put(1 + k, f64::from(v));
            }
            put(5, 1.0);
        });
        assert_eq!(a, b);
        assert_eq!(by_runs.to_f64(), by_elements.to_f64());
    }

    /// f32 runs into f32 elements are added in f32 with the bits of adding in f64 and
    /// rounding once: exponents far apart, subnormals, signed zeros, overflow to infinity.
    #[test]
    fn f32_runs_round_as_the_f64_sum_does() {
        let mut x = 0x2545_f491_u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            f32::from_bits((x & 0xff7f_ffff) | (u32::from(x.is_multiple_of(7)) * 0x0080_0000))
        };
        let mut start: Vec<f32> = (0..4000).map(|_| next()).collect();
        let mut adds: Vec<f32> = (0..4000).map(|_| next()).collect();
        start.extend([3.0e38, -0.0, 1.0, 1e-45, 16_777_216.0]);
        adds.extend([3.0e38, 0.0, 1e-30, 1e-45, 1.0]);
        let finite = |v: &mut Vec<f32>| v.retain(|x| x.is_finite());
        finite(&mut start);
        finite(&mut adds);
        let n = start.len().min(adds.len());
        let (start, adds) = (&start[start.len() - n..], &adds[adds.len() - n..]);
        let mut d = Dense::from_f64(ElemType::F32, start.iter().map(|&v| f64::from(v)).collect());
        assert_eq!(d.add_runs(&[(0, Run::F32(adds))], false), None);
        let expected: Vec<u32> = start
            .iter()
            .zip(adds)
            .map(|(&a, &b)| ((f64::from(a) + f64::from(b)) as f32).to_bits())
            .collect();
        let got: Vec<u32> = d.to_f32().iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, expected);
    }

    /// Over runs longer than a block, the first blow-up is the one reported.
    #[test]
    fn a_long_run_reports_its_first_blow_up() {
        let mut start = vec![1.0; 200];
        start[150] = 1e308;
        start[170] = -1e308;
        let mut d = Dense::from_f64(ElemType::F64, start);
        let mut adds = vec![0.5; 200];
        adds[150] = 1e308;
        adds[170] = -1e308;
        let bad = d.add_runs(&[(0, Run::F64(&adds))], false);
        assert_eq!(bad, Some(f64::INFINITY));
        assert_eq!(d.to_f64()[170], f64::NEG_INFINITY);
        assert_eq!(d.to_f64()[0], 1.5);
    }

    /// Spans lying apart give their slices, cut at the end; overlapping ones give none.
    #[test]
    fn spans_cut_a_buffer_only_where_they_lie_apart() {
        let mut buf = [0, 1, 2, 3, 4, 5, 6];
        let pieces = super::spans_mut(&mut buf, [(1, 2), (4, 2), (6, 3), (9, 1)]).unwrap();
        let got: Vec<Vec<i32>> = pieces.iter().map(|p| p.to_vec()).collect();
        assert_eq!(got, vec![vec![1, 2], vec![4, 5], vec![6], vec![]]);
        assert!(super::spans_mut(&mut buf, [(1, 3), (3, 1)]).is_none());
        assert!(super::spans_mut(&mut buf, [(4, 1), (2, 1)]).is_none());
    }

    /// Runs added on two threads give one thread's values and its first blow-up.
    #[test]
    fn runs_split_across_threads_add_as_on_one() {
        let start: Vec<f64> = (0..4096).map(|i| i as f64 / 8.0).collect();
        let mut adds: Vec<f32> = (0..4096).map(|i| (i % 13) as f32 / 3.0).collect();
        adds[3000] = f32::INFINITY;
        adds[1000] = f32::NEG_INFINITY;
        let runs: Vec<(usize, Run)> = adds
            .chunks(512)
            .enumerate()
            .map(|(k, c)| (k * 512, Run::F32(c)))
            .collect();
        let mut one = Dense::from_f64(ElemType::F32, start.clone());
        let mut two = Dense::from_f64(ElemType::F32, start);
        let a = one.add_runs(&runs, false);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let b = pool.install(|| two.add_runs(&runs, true));
        assert_eq!(a, Some(f64::NEG_INFINITY));
        assert_eq!(a, b);
        assert_eq!(one.to_f64(), two.to_f64());
        // One run longer than a piece is shared among the workers, the first blow-up in
        // its order still the one reported.
        let mut long: Vec<f32> = (0..3 * RUN_PIECE + 5).map(|i| (i % 7) as f32).collect();
        long[2 * RUN_PIECE + 3] = f32::INFINITY;
        long[RUN_PIECE + 9] = f32::NEG_INFINITY;
        let start = vec![0.5; long.len() + 10];
        let mut one = Dense::from_f64(ElemType::F32, start.clone());
        let mut two = Dense::from_f64(ElemType::F32, start);
        let a = one.add_runs(&[(7, Run::F32(&long))], false);
        let b = pool.install(|| two.add_runs(&[(7, Run::F32(&long))], true));
        assert_eq!(a, Some(f64::NEG_INFINITY));
        assert_eq!(a, b);
        assert_eq!(one.to_f64(), two.to_f64());
    }

    /// Every finite E4M3FN value survives encode(decode(b)), and the largest is 448.
    #[test]
    fn fp8_bit_patterns_round_trip() {
        for b in 0..=255u8 {
            let v = fp8_decode(b);
            if v.is_nan() {
                assert!(b & 0x7f == 0x7f, "{b:#x}");
                continue;
            }
            assert_eq!(
                ElemType::FP8.round(v),
                v,
                "{b:#x} decodes to {v}, not representable"
            );
            if v != 0.0 {
                assert_eq!(fp8_encode(v), b, "{b:#x} = {v}");
            }
        }
        assert_eq!(fp8_decode(0x7e), 448.0);
        assert_eq!(fp8_decode(0x01), 2f64.powi(-9));
        assert_eq!(fp8_encode(1e9), 0x7e);
        assert_eq!(fp8_encode(-1e9), 0xfe);
    }

    /// Each buffer holds its type: values read back are the rounded ones.
    #[test]
    fn buffers_round_to_their_type() {
        let values = vec![1.0 / 3.0, -2.5, 1000.0, 0.0, 1e-7];
        for elem in [
            ElemType::F64,
            ElemType::F32,
            ElemType::BF16,
            ElemType::F16,
            ElemType::FP8,
            ElemType::I8,
            ElemType::Int,
        ] {
            let d = Dense::from_f64(elem, values.clone());
            let expected: Vec<f64> = values.iter().map(|&v| elem.round(v)).collect();
            assert_eq!(d.to_f64().to_vec(), expected, "{elem:?}");
            let mut e = d.clone();
            e.set(1, 7.25);
            assert_eq!(e.get(1), Some(elem.round(7.25)), "{elem:?}");
            assert_eq!(
                d.get(1),
                Some(elem.round(-2.5)),
                "a shared buffer is copied on write"
            );
        }
    }
}
