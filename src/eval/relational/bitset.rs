//! Dense relations as bit matrices, for strata whose rules are products of binary relations
//! (`plan::chains`). A row is a bitset; the product A·B ORs, for every set bit `y` of row `x`
//! of A, the whole row `y` of B into row `x` of the result, 64 pairs per instruction.
//! Semi-naive evaluation carries over unchanged: each round multiplies with the last round's
//! new pairs in one factor and keeps the pairs not already known.
//!
//! Rows of a product are independent, so with a thread pool they are split among workers;
//! each row is computed the same way whatever the split, so results do not depend on it.

use super::{Halt, Store};
use crate::plan::chains::{Chain, Factor};
use crate::semantics::{Checked, Stratum, TensorId};
use crate::tensor::{Relation, Storage, Tensor};
use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

/// An `n × n` Boolean matrix that stores only its non-empty rows, each as `words` u64s.
/// The last round's new pairs touch few rows, so every operation walks stored rows only.
#[derive(Clone)]
struct BitRows {
    n: usize,
    words: usize,
    /// Stored rows, in the order they were added.
    rows: Vec<u32>,
    /// Per row, its position in `rows` (`ABSENT` if not stored).
    slot: Vec<u32>,
    bits: Vec<u64>,
}

const ABSENT: u32 = u32::MAX;

impl BitRows {
    fn new(n: usize) -> BitRows {
        BitRows {
            n,
            words: n.div_ceil(64),
            rows: Vec::new(),
            slot: vec![ABSENT; n],
            bits: Vec::new(),
        }
    }

    fn row(&self, x: usize) -> Option<&[u64]> {
        let k = *self.slot.get(x)? as usize;
        (k != ABSENT as usize).then(|| &self.bits[k * self.words..(k + 1) * self.words])
    }

    /// Row `x`, stored (empty) first if needed.
    fn row_mut(&mut self, x: usize) -> &mut [u64] {
        if self.slot[x] == ABSENT {
            self.slot[x] = self.rows.len() as u32;
            self.rows.push(x as u32);
            self.bits.resize(self.bits.len() + self.words, 0);
        }
        let k = self.slot[x] as usize;
        &mut self.bits[k * self.words..(k + 1) * self.words]
    }

    /// Adds a row known not to be stored yet.
    fn push_row(&mut self, x: usize, bits: &[u64]) {
        self.slot[x] = self.rows.len() as u32;
        self.rows.push(x as u32);
        self.bits.extend_from_slice(bits);
    }

    fn set(&mut self, x: usize, y: usize) {
        self.row_mut(x)[y / 64] |= 1 << (y % 64);
    }

    /// The matrix of a binary relation's tuples (transposed if asked); `n` covers every
    /// extent.
    fn from_store(s: &Store, n: usize, transposed: bool) -> BitRows {
        let mut m = BitRows::new(n);
        for pair in s.data.chunks_exact(2) {
            let (x, y) = (pair[0] as usize, pair[1] as usize);
            let (x, y) = if transposed { (y, x) } else { (x, y) };
            if x < n && y < n {
                m.set(x, y);
            }
        }
        m
    }

    fn stored(&self) -> impl Iterator<Item = (usize, &[u64])> + '_ {
        self.rows
            .iter()
            .zip(self.bits.chunks_exact(self.words.max(1)))
            .map(|(&x, bits)| (x as usize, bits))
    }

    fn transpose(&self) -> BitRows {
        let mut t = BitRows::new(self.n);
        for (x, bits) in self.stored() {
            for y in ones(bits) {
                t.set(y, x);
            }
        }
        t
    }

    /// A bitset over rows: which rows are stored.
    fn row_mask(&self) -> Vec<u64> {
        let mut mask = vec![0u64; self.words];
        for &x in &self.rows {
            mask[x as usize / 64] |= 1 << (x % 64);
        }
        mask
    }

    /// The Boolean product `self · other`. Stored rows are split among `pool`'s workers in
    /// fixed chunks whose results are concatenated in order.
    fn times(&self, other: &BitRows, pool: Option<&rayon::ThreadPool>) -> BitRows {
        let mask = other.row_mask();
        let words = self.words;
        let lists = Lists::of_sparse(other);
        let part = |rows: &[u32], bits: &[u64]| -> (Vec<u32>, Vec<u64>) {
            // At most one row out per row in: reserving that avoids regrowing (and
            // re-zeroing pages) as rows arrive.
            let mut out_rows = Vec::with_capacity(rows.len());
            let mut out_bits = Vec::with_capacity(bits.len());
            let mut dst = vec![0u64; words];
            for (&x, a) in rows.iter().zip(bits.chunks_exact(words)) {
                dst.fill(0);
                for (w, (&aw, &mw)) in a.iter().zip(&mask).enumerate() {
                    let mut hits = aw & mw;
                    while hits != 0 {
                        let y = w * 64 + hits.trailing_zeros() as usize;
                        hits &= hits - 1;
                        match &lists {
                            Some(l) => l.set_row(y, &mut dst),
                            None => {
                                if let Some(b) = other.row(y) {
                                    for (d, &b) in dst.iter_mut().zip(b) {
                                        *d |= b;
                                    }
                                }
                            }
                        }
                    }
                }
                if dst.iter().any(|&w| w != 0) {
                    out_rows.push(x);
                    out_bits.extend_from_slice(&dst);
                }
            }
            (out_rows, out_bits)
        };
        if words == 0 {
            return BitRows::new(self.n);
        }
        let chunk = (crate::plan::schedule::BIT_WORDS.at / words).max(1);
        let (rows, bits) = match pool {
            Some(pool) if self.rows.len() > chunk => {
                let parts: Vec<(Vec<u32>, Vec<u64>)> = pool.install(|| {
                    self.rows
                        .par_chunks(chunk)
                        .zip(self.bits.par_chunks(chunk * words))
                        .map(|(rows, bits)| part(rows, bits))
                        .collect()
                });
                let (rows, bits): (Vec<Vec<u32>>, Vec<Vec<u64>>) = parts.into_iter().unzip();
                (rows.concat(), bits.concat())
            }
            _ => part(&self.rows, &self.bits),
        };
        let mut slot = vec![ABSENT; self.n];
        for (k, &x) in rows.iter().enumerate() {
            slot[x as usize] = k as u32;
        }
        BitRows {
            n: self.n,
            words,
            rows,
            slot,
            bits,
        }
    }

    /// ORs `other` in.
    fn or(&mut self, other: &BitRows) {
        for (x, bits) in other.stored() {
            for (d, &b) in self.row_mut(x).iter_mut().zip(bits) {
                *d |= b;
            }
        }
    }

    /// Adds `fresh` and returns the pairs that were not there yet.
    fn absorb(&mut self, fresh: &BitRows) -> BitRows {
        let mut new = BitRows::new(self.n);
        let mut buf = vec![0u64; self.words];
        for (x, bits) in fresh.stored() {
            let known = self.row_mut(x);
            let mut any = 0;
            for ((b, k), &f) in buf.iter_mut().zip(known.iter_mut()).zip(bits) {
                *b = f & !*k;
                *k |= *b;
                any |= *b;
            }
            if any != 0 {
                new.push_row(x, &buf);
            }
        }
        new
    }

    /// Sorted, distinct pairs, flat.
    fn pairs(&self) -> Vec<u32> {
        let mut order: Vec<(usize, &[u64])> = self.stored().collect();
        order.sort_unstable_by_key(|(x, _)| *x);
        let ones: usize = self.bits.iter().map(|w| w.count_ones() as usize).sum();
        let mut flat = Vec::with_capacity(2 * ones);
        for (x, bits) in order {
            for y in self::ones(bits) {
                flat.extend([x as u32, y as u32]);
            }
        }
        flat
    }
}

/// A sparse matrix's rows as lists of their set columns, for products that would
/// otherwise OR whole rows holding a few bits each: an edge relation with a handful of
/// successors per node costs those few bit sets per hit instead of `n / 64` words.
struct Lists {
    /// Per row, where its columns start in `cols` (`n + 1` entries).
    start: Vec<u32>,
    cols: Vec<u32>,
}

/// A matrix whose stored rows hold fewer than one set bit per this many words is read as
/// [`Lists`].
const SPARSE_ROW_WORDS: usize = 4;

impl Lists {
    fn of_sparse(m: &BitRows) -> Option<Lists> {
        let ones: usize = m.bits.iter().map(|w| w.count_ones() as usize).sum();
        if ones * SPARSE_ROW_WORDS >= m.bits.len() || u32::try_from(ones).is_err() {
            return None;
        }
        let mut start = Vec::with_capacity(m.n + 1);
        let mut cols = Vec::with_capacity(ones);
        start.push(0);
        for x in 0..m.n {
            if let Some(bits) = m.row(x) {
                cols.extend(self::ones(bits).map(|y| y as u32));
            }
            start.push(cols.len() as u32);
        }
        Some(Lists { start, cols })
    }

    /// ORs row `y` into `dst`.
    fn set_row(&self, y: usize, dst: &mut [u64]) {
        let (a, b) = (self.start[y] as usize, self.start[y + 1] as usize);
        for &c in &self.cols[a..b] {
            dst[c as usize / 64] |= 1 << (c % 64);
        }
    }
}

/// Set bits of a row, ascending.
pub(super) fn ones(row: &[u64]) -> impl Iterator<Item = usize> + '_ {
    row.iter().enumerate().flat_map(|(w, &word)| {
        let mut rest = word;
        std::iter::from_fn(move || {
            (rest != 0).then(|| {
                let b = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                w * 64 + b
            })
        })
    })
}

/// The product of a chain's factors, left to right, with factor `at` reading the last
/// round's new pairs; `None` when a factor has nothing to read.
fn chain_product<'m>(
    c: &Chain,
    at: usize,
    read: &dyn Fn(&Factor, bool) -> Option<&'m BitRows>,
    pool: Option<&rayon::ThreadPool>,
) -> Option<BitRows> {
    let first = read(&c.factors[0], at == 0)?;
    let mut acc: Option<BitRows> = None;
    for (k, f) in c.factors.iter().enumerate().skip(1) {
        let m = read(f, at == k)?;
        acc = Some(acc.as_ref().unwrap_or(first).times(m, pool));
    }
    Some(acc.unwrap_or_else(|| first.clone()))
}

/// Largest total size of the bit matrices of one stratum.
const MAX_BYTES: usize = 512 << 20;

/// Whether bit matrices can hold these rules' relations: all binary, with every extent at
/// most `n`, and in memory even if every row fills. Storing only non-empty rows, and doing
/// per row one OR of a whole row for each set bit, they are never far behind tuple joins
/// (which pay a hash insert per derived tuple) and far ahead once rows hold many pairs:
/// `BENCHMARKS.md` has the figures.
pub(super) fn side(p: &Checked, st: &Stratum, chains: &[Chain], max_memory: u64) -> Option<usize> {
    let mut tensors: Vec<TensorId> = st.tensors.clone();
    tensors.extend(
        chains
            .iter()
            .flat_map(|c| c.factors.iter().chain(&c.negated).map(|f| f.tensor)),
    );
    tensors.sort_unstable();
    tensors.dedup();
    if tensors.iter().any(|&t| p.tensors[t].shape.len() != 2) {
        return None;
    }
    // An open column (§8) has no extent, but every handle is below its table's length,
    // which no chain (a product of relations, computing no value) changes.
    let n = tensors
        .iter()
        .flat_map(|&t| (0..2).map(move |ax| crate::eval::open::extent_now(p, t, ax)))
        .max()?;
    // Full and new pairs of each relation, their transposes, and a product in flight.
    let bytes = n
        .checked_mul(n.div_ceil(64))?
        .checked_mul(8)?
        .checked_mul(2 * tensors.len() + 3)?;
    (bytes <= MAX_BYTES.min(max_memory as usize)).then_some(n)
}

/// Where the tuple joins stopped: every relation's tuples, the last round's new ones, and
/// the number of rounds run.
pub(super) struct State<'a> {
    /// Side of the matrices ([`side`]).
    pub n: usize,
    /// All tuples of every relation the rules read or define.
    pub full: &'a HashMap<TensorId, Store>,
    /// The stratum's relations' tuples new in the last round.
    pub delta: &'a HashMap<TensorId, Store>,
    /// Rounds already run.
    pub rounds: usize,
    /// Asked after each round: `--timeout`, Ctrl-C.
    pub stop: &'a crate::eval::Stop,
}

/// Goes on with a recursive stratum's semi-naive evaluation on bit matrices from `state`,
/// leaving its relations in `values`. `Err` when it needs more than `max_rounds` rounds in
/// all.
pub(super) fn evaluate_bitsets(
    p: &Checked,
    st: &Stratum,
    chains: &[Chain],
    state: State,
    values: &mut [Tensor],
    max_rounds: Option<usize>,
    pool: Option<&rayon::ThreadPool>,
) -> Result<(), Halt> {
    let n = state.n;
    let matrix = |s: &Store, transposed: bool| BitRows::from_store(s, n, transposed);
    let mut full: HashMap<TensorId, BitRows> = HashMap::default();
    let mut delta: HashMap<TensorId, BitRows> = HashMap::default();
    for &t in &st.tensors {
        if let Some(s) = state.full.get(&t) {
            full.insert(t, matrix(s, false));
        }
        if let Some(s) = state.delta.get(&t) {
            delta.insert(t, matrix(s, false));
        }
    }
    let fixed = fixed_matrices(st, chains, &state);
    let used_transposed = |t: &TensorId| {
        chains
            .iter()
            .flat_map(|c| &c.factors)
            .any(|f| f.tensor == *t && f.transposed)
    };
    let transpose_used = |m: &HashMap<TensorId, BitRows>| -> HashMap<TensorId, BitRows> {
        m.iter()
            .filter(|(t, _)| used_transposed(t))
            .map(|(&t, m)| (t, m.transpose()))
            .collect()
    };
    // Transposes of the stratum's relations that some rule reads transposed, kept current.
    let mut full_t = transpose_used(&full);
    let mut rounds = state.rounds;
    let outcome = loop {
        rounds += 1;
        let mut new: HashMap<TensorId, BitRows> = HashMap::default();
        let delta_t = transpose_used(&delta);
        let read = |f: &Factor, use_delta: bool| -> Option<&BitRows> {
            let own = st.tensors.contains(&f.tensor);
            match (use_delta, own, f.transposed) {
                (true, _, false) => delta.get(&f.tensor),
                (true, _, true) => delta_t.get(&f.tensor),
                (false, true, false) => full.get(&f.tensor),
                (false, true, true) => full_t.get(&f.tensor),
                (false, false, _) => fixed.get(&(f.tensor, f.transposed)),
            }
        };
        for c in chains {
            let runs = (0..c.factors.len()).filter(|&k| delta.contains_key(&c.factors[k].tensor));
            for at in runs {
                let Some(mut product) = chain_product(c, at, &read, pool) else {
                    continue;
                };
                let negated: Vec<&BitRows> =
                    c.negated.iter().filter_map(|f| read(f, false)).collect();
                restrict(&mut product, &negated, c.diagonal);
                match new.get_mut(&c.head) {
                    Some(acc) => acc.or(&product),
                    None => {
                        new.insert(c.head, product);
                    }
                }
            }
        }
        drop(delta_t);
        delta = absorb(new, &mut full, &mut full_t);
        let Some(max_rounds) = max_rounds.filter(|_| !delta.is_empty()) else {
            break Ok(());
        };
        if rounds >= max_rounds {
            break Err(Halt::TooManyRounds);
        }
        if state.stop.requested() {
            break Err(Halt::Stopped);
        }
    };
    if outcome.is_ok() {
        for &t in &st.tensors {
            if let Some(m) = full.remove(&t) {
                values[t] = Tensor {
                    elem: values[t].elem,
                    shape: p.tensors[t].shape.clone(),
                    storage: Storage::Relation(Relation::from_sorted(2, m.pairs())),
                };
            }
        }
    }
    outcome
}

/// Bit matrices of the relations from lower strata that the chains read (as factors or
/// negated), each in the orientation it is read in; they do not change in the fixpoint.
fn fixed_matrices(
    st: &Stratum,
    chains: &[Chain],
    state: &State,
) -> HashMap<(TensorId, bool), BitRows> {
    let mut fixed: HashMap<(TensorId, bool), BitRows> = HashMap::default();
    for f in chains
        .iter()
        .flat_map(|c| c.factors.iter().chain(&c.negated))
    {
        if let (false, Some(s)) = (st.tensors.contains(&f.tensor), state.full.get(&f.tensor)) {
            fixed
                .entry((f.tensor, f.transposed))
                .or_insert_with(|| BitRows::from_store(s, state.n, f.transposed));
        }
    }
    fixed
}

/// Removes from each row `x` of a chain's product what a negated relation holds at `x`, and
/// keeps only (or drops) the diagonal where the rule's head requires its two variables
/// equal (or different).
fn restrict(product: &mut BitRows, negated: &[&BitRows], diagonal: Option<bool>) {
    let words = product.words;
    for (x, row) in product
        .rows
        .iter()
        .zip(product.bits.chunks_exact_mut(words))
    {
        let x = *x as usize;
        for m in negated {
            if let Some(not) = m.row(x) {
                for (d, &b) in row.iter_mut().zip(not) {
                    *d &= !b;
                }
            }
        }
        let bit = row[x / 64] & (1 << (x % 64));
        match diagonal {
            Some(true) => {
                row.fill(0);
                row[x / 64] = bit;
            }
            Some(false) => row[x / 64] &= !bit,
            None => {}
        }
    }
}

/// Adds a round's products to the known relations (and their kept transposes), in a fixed
/// order of heads; the pairs that were new are the next round's delta.
fn absorb(
    new: HashMap<TensorId, BitRows>,
    full: &mut HashMap<TensorId, BitRows>,
    full_t: &mut HashMap<TensorId, BitRows>,
) -> HashMap<TensorId, BitRows> {
    let mut delta = HashMap::default();
    let mut heads: Vec<TensorId> = new.keys().copied().collect();
    heads.sort_unstable();
    for t in heads {
        let (Some(fresh), Some(known)) = (new.get(&t), full.get_mut(&t)) else {
            continue;
        };
        let added = known.absorb(fresh);
        if !added.rows.is_empty() {
            if let Some(known_t) = full_t.get_mut(&t) {
                known_t.or(&added.transpose());
            }
            delta.insert(t, added);
        }
    }
    delta
}
