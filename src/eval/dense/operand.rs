//! Operands of contractions: row-major values over variables, in f32 or f64 (`Num`),
//! borrowed from the inputs until an operation writes; their layout operations — a window's
//! gather and a permutation (one strided copy, 16×16 tiles for transpositions) and the sum
//! over variables no later product needs.

use super::*;
use crate::tensor::odometer::{advance, carries, row_major};

/// A tensor being contracted: row-major values over `vars`, borrowed from an input until an
/// operation has to write. Contractions of f32 tensors run in f32 (`Contraction::single`);
/// everything else, and every elementwise expression, in f64.
pub(crate) struct Operand<'a, T: Clone = f64> {
    pub(crate) vars: Vars,
    pub(crate) data: Cow<'a, [T]>,
}

/// An operand's variables, on the stack up to rank 6: a tiny equation's dispatch is
/// mostly allocations otherwise.
pub(crate) type Vars = smallvec::SmallVec<[VarId; 6]>;

/// An element type contractions run in: f32 or f64.
pub(crate) trait Num: Copy + Default + Send + Sync + 'static + Into<f64> {
    /// The type's 1.
    const ONE: Self;
    /// The sum, rounded to the type.
    fn add(self, other: Self) -> Self;
    /// The product, rounded to the type.
    fn mul(self, other: Self) -> Self;
    /// The value nearest `v`.
    fn from_f64(v: f64) -> Self;
    /// A dense tensor's elements in this type: borrowed when it is stored in it.
    fn elements(d: &Dense) -> Cow<'_, [Self]>;
    /// Softmax or layer normalisation of `scale ·` a row, in place.
    fn normalize_row(kind: Structural, row: &mut [Self], scale: f64);
    /// Values of this type as a [`Grid`] of their own type.
    fn into_grid(values: Vec<Self>) -> super::Grid;
}

impl Num for f64 {
    const ONE: f64 = 1.0;
    fn add(self, other: f64) -> f64 {
        self + other
    }
    fn mul(self, other: f64) -> f64 {
        self * other
    }
    fn from_f64(v: f64) -> f64 {
        v
    }
    fn elements(d: &Dense) -> Cow<'_, [f64]> {
        d.to_f64()
    }
    fn normalize_row(kind: Structural, row: &mut [f64], scale: f64) {
        if scale != 1.0 {
            row.iter_mut().for_each(|r| *r *= scale);
        }
        crate::functions::normalize_row(kind, row);
    }
    fn into_grid(values: Vec<f64>) -> super::Grid {
        super::Grid::F64(values)
    }
}

impl Num for f32 {
    const ONE: f32 = 1.0;
    fn add(self, other: f32) -> f32 {
        self + other
    }
    fn mul(self, other: f32) -> f32 {
        self * other
    }
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
    fn elements(d: &Dense) -> Cow<'_, [f32]> {
        d.to_f32()
    }
    fn normalize_row(kind: Structural, row: &mut [f32], scale: f64) {
        crate::functions::fast_rows::normalize_row(kind, row, scale);
    }
    fn into_grid(values: Vec<f32>) -> super::Grid {
        super::Grid::F32(values)
    }
}

/// An operand's values as f64 times `scale`, for the elementwise pass; on the `--threads`
/// pool's workers where [`split::splits`] says so.
pub(crate) fn widen<'a, T: Num>(op: Operand<'a, T>, scale: f64, threads: usize) -> Operand<'a> {
    Operand {
        data: Cow::Owned(widened(&op.data, scale, threads)),
        vars: op.vars,
    }
}

/// Values as f64 times `scale` (exactly the values where `scale` is 1), as [`widen`] gives
/// an operand's.
pub(crate) fn widened<T: Num>(data: &[T], scale: f64, threads: usize) -> Vec<f64> {
    let one = |&x: &T| -> f64 {
        match scale == 1.0 {
            true => x.into(),
            false => x.into() * scale,
        }
    };
    split::mapped(data, one, threads)
}

/// A factor as an operand: the tensor as stored, or its window gathered, over the factor's
/// variables in [`Factor::memory_order`].
pub(crate) fn factor_operand<'a, T: Num>(
    f: &Factor,
    values: &'a [Tensor],
    extents: &[usize],
    threads: usize,
) -> Operand<'a, T> {
    let (order, vars) = f.memory_order();
    let Some(Storage::Dense(d)) = values.get(f.tensor).map(|t| &t.storage) else {
        return Operand {
            vars: Vars::from_slice(&vars),
            data: Cow::Owned(Vec::new()),
        };
    };
    let all = T::elements(d);
    let data = match &f.window {
        None => all,
        Some(w) => {
            let dims: Vec<usize> = vars.iter().map(|&v| extents[v]).collect();
            let steps: Vec<i64> = order.iter().map(|&i| w.strides[i]).collect();
            // A window that is a row-major block of the tensor (`WP[l, d, e]` at one `l`)
            // is that slice of it, read in place.
            let block = row_major(&dims)
                .iter()
                .zip(&steps)
                .zip(&dims)
                .all(|((&r, &s), &n)| n == 1 || r as i64 == s);
            let len: usize = dims.iter().product();
            match (block, &all) {
                (true, Cow::Borrowed(a)) => match a.get(w.offset..w.offset + len) {
                    Some(slice) => Cow::Borrowed(slice),
                    None => Cow::Owned(gather(a, w.offset as i64, (&steps, &dims), threads)),
                },
                _ => Cow::Owned(gather(&all, w.offset as i64, (&steps, &dims), threads)),
            }
        }
    };
    Operand {
        vars: Vars::from_slice(&vars),
        data,
    }
}

/// [`strided_copy`] in blocks of the first axis on the pool's workers, where it is large
/// enough to split: each block is gathered as one thread gathers it.
fn gather<T: Num>(
    data: &[T],
    offset: i64,
    (strides, dims): (&[i64], &[usize]),
    threads: usize,
) -> Vec<T> {
    let total: usize = dims.iter().product();
    // Axes of extent 1 (a layer's `l` at one step) move nothing: the blocks split the first
    // axis that does.
    let lead = dims.iter().take_while(|&&n| n == 1).count();
    let (strides, dims) = match lead < dims.len() {
        true => (&strides[lead..], &dims[lead..]),
        false => (strides, dims),
    };
    let (Some(&first), Some(&step)) = (dims.first(), strides.first()) else {
        return strided_copy(data, offset, strides, dims);
    };
    if first < 2 || !split::splits(threads, total) {
        return strided_copy(data, offset, strides, dims);
    }
    let plane = total / first;
    // Blocks of whole planes of about 32k elements: each block's copy stays in cache.
    let rows = (BLOCK_ELEMENTS / plane.max(1)).clamp(1, first);
    let mut out = split::zeros(total, threads);
    split::each_block(&mut out, rows * plane, true, |at, block| {
        let (a0, n) = (at / plane, block.len() / plane);
        let dims: Vec<usize> = std::iter::once(n)
            .chain(dims[1..].iter().copied())
            .collect();
        block.copy_from_slice(&strided_copy(
            data,
            offset + step * a0 as i64,
            strides,
            &dims,
        ));
    });
    out
}

/// Elements a block of a split [`gather`] copies, about.
const BLOCK_ELEMENTS: usize = 1 << 15;

/// Copies the elements at `offset + Σ strides[a] · idx[a]` for every index of `dims`, in
/// row-major order (a window's gather, and a permutation): the innermost axis in a tight
/// loop (a slice copy when it is contiguous), an odometer over the others. Positions outside
/// `data` cannot occur (planning keeps windows inside their tensors): debug builds stop
/// there, release builds read the type's zero.
pub(super) fn strided_copy<T: Num>(
    data: &[T],
    offset: i64,
    strides: &[i64],
    dims: &[usize],
) -> Vec<T> {
    // Axes of extent 1 move nothing: without them a gather that is a transposition
    // (`Emb[n, l, e]` read as e × n at one l) takes the tiled copy.
    if dims.len() > 1 && dims.contains(&1) {
        let (strides, dims): (Vec<i64>, Vec<usize>) = strides
            .iter()
            .zip(dims)
            .filter(|(_, &n)| n != 1)
            .map(|(&s, &n)| (s, n))
            .unzip();
        return strided_copy(data, offset, &strides, &dims);
    }
    let total: usize = dims.iter().product();
    if let Some(out) = transposed_copy(data, offset, strides, dims) {
        return out;
    }
    let mut out = Vec::with_capacity(total);
    let (inner, step) = match (dims.last(), strides.last()) {
        (Some(&n), Some(&s)) => (n, s),
        _ => (1, 0),
    };
    let outer = dims.len().saturating_sub(1);
    let mut idx = vec![0usize; outer];
    let carry = carries(&strides[..outer], &dims[..outer]);
    let mut at = offset;
    let read = |p: i64| {
        let x = usize::try_from(p).ok().and_then(|p| data.get(p));
        debug_assert!(
            x.is_some(),
            "a strided read at {p} outside {} elements",
            data.len()
        );
        x.copied().unwrap_or_default()
    };
    for _ in 0..total.checked_div(inner).unwrap_or(0) {
        let run = usize::try_from(at)
            .ok()
            .and_then(|a| data.get(a..a + inner));
        match run {
            Some(run) if step == 1 => out.extend_from_slice(run),
            _ => out.extend((0..inner as i64).map(|i| read(at + i * step))),
        }
        at = advance(&mut idx, &dims[..outer]).map_or(offset, |ax| at + carry[ax]);
    }
    out
}

/// [`strided_copy`] when the innermost axis is strided and another axis is contiguous in
/// `data` (a transposition, as in `[r, s, p, q]` to `[p, q, r, s]`): 16×16 tiles of those
/// two axes are copied at a time, so each cache line read is used whole. `None` for other
/// layouts, or when a position would fall outside `data`.
pub(super) fn transposed_copy<T: Num>(
    data: &[T],
    offset: i64,
    strides: &[i64],
    dims: &[usize],
) -> Option<Vec<T>> {
    const TILE: usize = 16;
    let last = dims.len().checked_sub(1)?;
    let a = strides[..last].iter().position(|&s| s == 1)?;
    let (na, nl, step) = (dims[a], dims[last], usize::try_from(strides[last]).ok()?);
    if step <= 1 || na < TILE || nl < TILE || offset < 0 || strides.iter().any(|&s| s < 0) {
        return None;
    }
    let reach: i64 = offset
        + strides
            .iter()
            .zip(dims)
            .map(|(&s, &n)| s * (n as i64 - 1))
            .sum::<i64>();
    if reach as usize >= data.len() || dims.contains(&0) {
        return None;
    }
    let total: usize = dims.iter().product();
    let out_strides = row_major(dims);
    let da = out_strides[a];
    let mut out = vec![T::default(); total];
    // Every axis but `a` and the last, stepped with both offsets carried along.
    let others: Vec<usize> = (0..last).filter(|&k| k != a).collect();
    let outer: Vec<usize> = others.iter().map(|&ax| dims[ax]).collect();
    let src_carry = carries(
        &others.iter().map(|&ax| strides[ax]).collect::<Vec<_>>(),
        &outer,
    );
    let out_steps: Vec<i64> = others.iter().map(|&ax| out_strides[ax] as i64).collect();
    let dst_carry = carries(&out_steps, &outer);
    let mut idx = vec![0usize; others.len()];
    let planes = total / (na * nl);
    let (mut src, mut dst) = (offset, 0i64);
    for _ in 0..planes {
        let (plane_src, plane_dst) = (src as usize, dst as usize);
        for a0 in (0..na).step_by(TILE) {
            for l0 in (0..nl).step_by(TILE) {
                for ia in a0..(a0 + TILE).min(na) {
                    let row = plane_dst + ia * da;
                    let from = plane_src + ia;
                    for il in l0..(l0 + TILE).min(nl) {
                        out[row + il] = data[from + il * step];
                    }
                }
            }
        }
        if let Some(ax) = advance(&mut idx, &outer) {
            src += src_carry[ax];
            dst += dst_carry[ax];
        }
    }
    Some(out)
}

/// Row-major strides of `vars`.
pub(super) fn strides(vars: &[VarId], extents: &[usize]) -> Vec<usize> {
    row_major(&vars.iter().map(|&v| extents[v]).collect::<Vec<_>>())
}

/// The operand with its axes in `order` (a permutation of its variables); a large copy
/// in blocks on the pool's workers.
pub(crate) fn permute<'a, T: Num>(
    op: Operand<'a, T>,
    order: &[VarId],
    extents: &[usize],
    threads: usize,
) -> Operand<'a, T> {
    // Axes of extent 1 (a layer's `l` at one step) move no element: where the others keep
    // their order the values are already laid out as asked.
    let moving =
        |vars: &[VarId]| -> Vars { vars.iter().copied().filter(|&v| extents[v] != 1).collect() };
    if moving(&op.vars) == moving(order) {
        return Operand {
            vars: Vars::from_slice(order),
            data: op.data,
        };
    }
    let src = strides(&op.vars, extents);
    let from: Vec<i64> = order
        .iter()
        .map(|v| {
            op.vars
                .iter()
                .position(|x| x == v)
                .map_or(0, |k| src[k] as i64)
        })
        .collect();
    let dims: Vec<usize> = order.iter().map(|&v| extents[v]).collect();
    let data = gather(&op.data, 0, (&from, &dims), threads);
    Operand {
        vars: Vars::from_slice(order),
        data: data.into(),
    }
}

/// Sums out every variable not in `keep`, in row-major order of the summed ones (in f64,
/// then rounded to the operand's type).
pub(crate) fn reduce<'a, T: Num>(
    op: Operand<'a, T>,
    keep: &[VarId],
    extents: &[usize],
) -> Operand<'a, T> {
    if op.vars.iter().all(|v| keep.contains(v)) {
        return op;
    }
    let (kept, summed): (Vec<VarId>, Vec<VarId>) = op.vars.iter().partition(|v| keep.contains(v));
    let block: usize = summed.iter().map(|&v| extents[v]).product();
    let order = [kept.clone(), summed].concat();
    let op = permute(op, &order, extents, 1);
    let data = if block == 0 {
        vec![T::default(); kept.iter().map(|&v| extents[v]).product()]
    } else {
        op.data
            .chunks_exact(block)
            .map(|b| T::from_f64(b.iter().map(|&x| x.into()).sum()))
            .collect()
    };
    Operand {
        vars: Vars::from_slice(&kept),
        data: data.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ordering of `n` axes.
    fn orders(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![Vec::new()];
        }
        let mut out = Vec::new();
        for rest in orders(n - 1) {
            for at in 0..=rest.len() {
                let mut o = rest.clone();
                o.insert(at, n - 1);
                out.push(o);
            }
        }
        out
    }

    /// A gather with axes of extent 1 (a window at one step) copies what the element
    /// odometer names.
    #[test]
    fn unit_axes_are_squeezed_without_changing_the_copy() {
        let data: Vec<f64> = (0..3 * 40 * 20).map(f64::from).collect();
        let (strides, dims) = ([1i64, 60, 20], [20usize, 40, 1]);
        let got = strided_copy(&data, 20, &strides, &dims);
        let mut want = Vec::new();
        for a in 0..20i64 {
            for b in 0..40i64 {
                want.push(data[(20 + a + 60 * b) as usize]);
            }
        }
        assert_eq!(got, want);
    }

    /// A gather split across a pool's threads copies what one thread copies: a window of
    /// whole planes, a transposition, and a window led by an axis of extent 1 (a layer's
    /// `l` at one step), all large enough to split.
    #[test]
    fn a_split_gather_matches_one_thread() {
        let dims = [48usize, 64, 96];
        let total: usize = dims.iter().product();
        let data: Vec<f32> = (0..total).map(|i| (i % 1009) as f32).collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for (offset, strides, dims) in [
            (96i64, vec![64 * 96i64, 96, 1], vec![40usize, 64, 90]),
            (0, vec![1, 96, 64 * 96], vec![96, 64, 48]),
            (96, vec![7, 1, 96, 64 * 96], vec![1, 90, 64, 40]),
        ] {
            let one = strided_copy(&data, offset, &strides, &dims);
            let two = pool.install(|| gather(&data, offset, (&strides, &dims), 2));
            assert_eq!(one, two);
        }
    }

    /// Moving only axes of extent 1 relabels the operand and copies nothing.
    #[test]
    fn moving_unit_axes_copies_nothing() {
        let extents = [3, 1, 4];
        let data: Vec<f64> = (0..12).map(f64::from).collect();
        let op = Operand {
            vars: Vars::from_slice(&[0, 1, 2]),
            data: Cow::Borrowed(data.as_slice()),
        };
        let moved = permute(op, &[1, 0, 2], &extents, 1);
        assert_eq!(moved.vars[..], [1, 0, 2]);
        assert!(matches!(moved.data, Cow::Borrowed(_)));
        assert_eq!(moved.data[..], data[..]);
    }

    /// Every permutation copies the element each position names, whether or not it takes
    /// the tiled path (extents below, at and above the tile, uneven ones).
    #[test]
    fn permutations_copy_each_element() {
        for dims in [vec![17usize, 33, 20], vec![5, 16, 3, 18], vec![40, 2, 16]] {
            let total: usize = dims.iter().product();
            let data: Vec<f32> = (0..total).map(|i| i as f32).collect();
            let own: Vec<usize> = (0..dims.len())
                .map(|a| dims[a + 1..].iter().product())
                .collect();
            for order in orders(dims.len()) {
                let d: Vec<usize> = order.iter().map(|&a| dims[a]).collect();
                let s: Vec<i64> = order.iter().map(|&a| own[a] as i64).collect();
                let got = strided_copy(&data, 0, &s, &d);
                let mut idx = vec![0usize; d.len()];
                for (at, &x) in got.iter().enumerate() {
                    crate::tensor::odometer::unflatten(at, &d, |ax, i| idx[ax] = i);
                    let want: i64 = idx.iter().zip(&s).map(|(&i, &s)| i as i64 * s).sum();
                    assert_eq!(x, want as f32, "{dims:?} as {order:?} at {at}");
                }
            }
        }
    }
}
