//! Which tuples a relation holds: an open-addressing table probed linearly.
//!
//! Semi-naive joins test every derived tuple against the relation before keeping it, so this
//! probe is the innermost operation of most Datalog programs (Andersen's analysis derives 48
//! million tuples to find 1.1 million). Two layouts:
//! - **bits**, for tuples of at most two columns whose rows need not be found: a slot holds
//!   the tuple with its last 6 bits cleared and a 64-bit mask of which of those 64 tuples are
//!   present. Relations of programs are clustered (a variable points to objects declared near
//!   each other), so one slot holds several tuples, the table is several times smaller than a
//!   word per tuple, and consecutive probes of a join, which share their first column, mostly
//!   hit the same cache line;
//! - **words**: the tuple packed in its word (at most two columns), or 32 bits of its hash
//!   with its row id (wider tuples; only a matching hash reads the row).
//!
//! Batches of probes prefetch the slots they will read a few tuples ahead, so that the memory
//! latency of one probe overlaps the work of the others.

use super::store::row;

/// An unused slot. A packed tuple is never `u64::MAX` (positions are below `u32::MAX`), nor
/// is a wide entry (its row id is below `u32::MAX`), nor a tuple with its last bits cleared.
const EMPTY: u64 = u64::MAX;

/// How many tuples ahead a batch prefetches.
const AHEAD: usize = 8;

/// The tuple set of one relation: [`Members::find`] and [`Members::insert`] take the
/// relation's flat rows, which wide tuples are compared against.
pub(super) struct Members {
    arity: usize,
    table: Table,
    /// Occupied slots.
    len: usize,
    /// `64 - log2(slots)`: a hash's top bits pick the first slot.
    shift: u32,
}

enum Table {
    /// `[tuple >> 6, mask]` per slot.
    Bits(Vec<[u64; 2]>),
    /// A word per tuple: the tuple itself when `packed`, else hash bits and row id. `rows`
    /// holds each packed tuple's row when positions are kept.
    Words {
        slots: Vec<u64>,
        rows: Vec<u32>,
        packed: bool,
        positions: bool,
    },
}

/// A 64-bit mixer (the finaliser of MurmurHash3): packed tuples differ in few bits, which
/// this spreads over the top bits that pick a slot. Indexes hash their keys with it too.
pub(super) fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    let x = (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The word of a tuple (or key) of at most two columns: the tuple itself.
pub(super) fn pack(t: impl IntoIterator<Item = u32>) -> u64 {
    t.into_iter().fold(0u64, |w, v| (w << 32) | u64::from(v))
}

/// The hash of a wider tuple (or key); a wide entry keeps its top 32 bits.
pub(super) fn hash_wide(t: impl IntoIterator<Item = u32>) -> u64 {
    mix(t
        .into_iter()
        .fold(0x9e37_79b9_7f4a_7c15u64, |h, v| mix(h ^ u64::from(v))))
}

/// Tuple equality as a plain loop: tuples are a few values long, too short for `memcmp`
/// (which slice `==` calls) to pay for its call.
fn same(a: &[u32], b: &[u32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// What a probe for a tuple looks for: where it starts (`hash`), the word a slot must hold
/// (for a wide tuple, the hash half; its row is filled in on insertion), and for the bits
/// layout, the tuple's bit.
#[derive(Clone, Copy)]
struct Probe {
    hash: u64,
    word: u64,
    bit: u64,
}

impl Members {
    /// An empty set of tuples of `arity` columns; `positions` keeps each tuple's row for
    /// [`Members::find`] (relations whose rows carry values need it).
    pub(super) fn new(arity: usize, positions: bool) -> Members {
        let packed = arity <= 2;
        let table = match (packed, positions) {
            (true, false) => Table::Bits(vec![[EMPTY, 0]; 8]),
            _ => Table::Words {
                slots: vec![EMPTY; 8],
                rows: if packed && positions {
                    vec![0; 8]
                } else {
                    Vec::new()
                },
                packed,
                positions,
            },
        };
        Members {
            arity,
            table,
            len: 0,
            shift: 61,
        }
    }

    fn size(&self) -> usize {
        match &self.table {
            Table::Bits(s) => s.len(),
            Table::Words { slots, .. } => slots.len(),
        }
    }

    #[inline]
    fn probe(&self, t: &[u32]) -> Probe {
        match &self.table {
            Table::Bits(_) => {
                let w = pack(t.iter().copied());
                Probe {
                    hash: mix(w >> 6),
                    word: w >> 6,
                    bit: 1 << (w & 63),
                }
            }
            Table::Words { packed: true, .. } => {
                let word = pack(t.iter().copied());
                Probe {
                    hash: mix(word),
                    word,
                    bit: 0,
                }
            }
            Table::Words { packed: false, .. } => {
                let hash = hash_wide(t.iter().copied());
                Probe {
                    hash,
                    word: hash & 0xffff_ffff_0000_0000,
                    bit: 0,
                }
            }
        }
    }

    #[inline]
    fn start(&self, hash: u64) -> usize {
        (hash >> self.shift) as usize
    }

    /// The slot holding `t`'s word (for bits, whether or not `t`'s bit is set), or the empty
    /// slot where it would go.
    #[inline]
    fn slot(&self, t: &[u32], p: Probe, data: &[u32]) -> (usize, bool) {
        let mask = self.size() - 1;
        let mut i = self.start(p.hash);
        loop {
            let (w, hit) = match &self.table {
                Table::Bits(s) => (s[i][0], s[i][0] == p.word),
                Table::Words { slots, packed, .. } => {
                    let w = slots[i];
                    let hit = match packed {
                        true => w == p.word,
                        false => {
                            w != EMPTY
                                && w & 0xffff_ffff_0000_0000 == p.word
                                && same(row(data, self.arity, w as u32), t)
                        }
                    };
                    (w, hit)
                }
            };
            if hit {
                return (i, true);
            }
            if w == EMPTY {
                return (i, false);
            }
            i = (i + 1) & mask;
        }
    }

    /// Whether slot `i`, found for probe `p`, holds the tuple.
    #[inline]
    fn holds(&self, (i, hit): (usize, bool), p: Probe) -> bool {
        match &self.table {
            Table::Bits(s) => hit && s[i][1] & p.bit != 0,
            Table::Words { .. } => hit,
        }
    }

    /// The row of tuple `t`, among rows `data`. A set kept without positions finds it by a
    /// scan of the rows.
    pub(super) fn find(&self, t: &[u32], data: &[u32]) -> Option<u32> {
        let p = self.probe(t);
        let at = self.slot(t, p, data);
        if !self.holds(at, p) {
            return None;
        }
        match &self.table {
            Table::Words {
                packed: false,
                slots,
                ..
            } => Some(slots[at.0] as u32),
            Table::Words {
                positions: true,
                rows,
                ..
            } => Some(rows[at.0]),
            _ => (0..(data.len() / self.arity.max(1)) as u32)
                .find(|&r| same(row(data, self.arity, r), t)),
        }
    }

    pub(super) fn contains(&self, t: &[u32], data: &[u32]) -> bool {
        let p = self.probe(t);
        self.holds(self.slot(t, p, data), p)
    }

    /// Whether [`Members::remove`] can take tuples out: the bits layout, which keeps no rows.
    pub(super) fn removable(&self) -> bool {
        matches!(self.table, Table::Bits(_))
    }

    /// Takes `t` out (its bit cleared; the slot stays, so probes still pass it). Only for a
    /// [`Members::removable`] set.
    pub(super) fn remove(&mut self, t: &[u32], data: &[u32]) {
        let p = self.probe(t);
        let (i, hit) = self.slot(t, p, data);
        if let (Table::Bits(s), true) = (&mut self.table, hit) {
            s[i][1] &= !p.bit;
        }
    }

    /// Records that row `r` of `data` holds `t`, unless some row does already: `false` then.
    pub(super) fn insert(&mut self, t: &[u32], r: u32, data: &[u32]) -> bool {
        if (self.len + 1) * 10 > self.size() * 7 {
            self.grow(data);
        }
        let p = self.probe(t);
        let (i, hit) = self.slot(t, p, data);
        if hit && matches!(self.table, Table::Words { .. }) {
            return false;
        }
        if !hit {
            self.len += 1;
        }
        match &mut self.table {
            Table::Bits(s) => {
                let had = s[i][1] & p.bit != 0;
                s[i] = [p.word, s[i][1] | p.bit];
                !had
            }
            Table::Words {
                slots,
                rows,
                packed,
                positions,
            } => {
                if *packed {
                    slots[i] = p.word;
                    if *positions {
                        rows[i] = r;
                    }
                } else {
                    slots[i] = p.word | u64::from(r);
                }
                true
            }
        }
    }

    fn grow(&mut self, data: &[u32]) {
        let size = self.size() * 2;
        let mask = size - 1;
        self.shift -= 1;
        let shift = self.shift;
        let place = |taken: &dyn Fn(usize) -> bool, hash: u64| {
            let mut i = (hash >> shift) as usize;
            while taken(i) {
                i = (i + 1) & mask;
            }
            i
        };
        match &mut self.table {
            Table::Bits(s) => {
                let old = std::mem::replace(s, vec![[EMPTY, 0]; size]);
                for slot in old.into_iter().filter(|s| s[0] != EMPTY) {
                    let i = place(&|i| s[i][0] != EMPTY, mix(slot[0]));
                    s[i] = slot;
                }
            }
            Table::Words {
                slots,
                rows,
                packed,
                positions,
            } => {
                let old = std::mem::replace(slots, vec![EMPTY; size]);
                let old_rows = std::mem::take(rows);
                if *packed && *positions {
                    *rows = vec![0; size];
                }
                for (k, w) in old.into_iter().enumerate().filter(|&(_, w)| w != EMPTY) {
                    let hash = match packed {
                        true => mix(w),
                        false => hash_wide(row(data, self.arity, w as u32).iter().copied()),
                    };
                    let i = place(&|i| slots[i] != EMPTY, hash);
                    slots[i] = w;
                    if let Some(&r) = old_rows.get(k) {
                        rows[i] = r;
                    }
                }
            }
        }
    }

    /// Keeps, of the tuples laid flat in `tuples`, those not in the set, in order; returns
    /// how many values remain. Slots are prefetched [`AHEAD`] tuples ahead.
    pub(super) fn retain_unknown(&self, tuples: &mut [u32], data: &[u32]) -> usize {
        let arity = self.arity;
        if arity == 0 {
            return if self.len > 0 { 0 } else { tuples.len() };
        }
        if let Table::Bits(slots) = &self.table {
            return self.retain_unknown_bits(slots, tuples);
        }
        let n = tuples.len() / arity;
        let mut kept = 0;
        for k in 0..n {
            if k + AHEAD < n {
                let ahead = &tuples[(k + AHEAD) * arity..(k + AHEAD + 1) * arity];
                self.prefetch(self.start(self.probe(ahead).hash));
            }
            let t = &tuples[k * arity..(k + 1) * arity];
            let p = self.probe(t);
            if !self.holds(self.slot(t, p, data), p) {
                tuples.copy_within(k * arity..(k + 1) * arity, kept);
                kept += arity;
            }
        }
        kept
    }

    /// [`Members::retain_unknown`] for the bits layout, which reads no rows.
    fn retain_unknown_bits(&self, slots: &[[u64; 2]], tuples: &mut [u32]) -> usize {
        let arity = self.arity;
        let n = tuples.len() / arity;
        let mask = slots.len() - 1;
        let probe = |t: &[u32]| {
            let w = pack(t.iter().copied());
            (w >> 6, 1u64 << (w & 63))
        };
        let mut kept = 0;
        for k in 0..n {
            if k + AHEAD < n {
                let (word, _) = probe(&tuples[(k + AHEAD) * arity..(k + AHEAD + 1) * arity]);
                self.prefetch(self.start(mix(word)));
            }
            let t = &tuples[k * arity..(k + 1) * arity];
            let (word, bit) = probe(t);
            let mut i = self.start(mix(word));
            let known = loop {
                let [w, bits] = slots[i];
                if w == word {
                    break bits & bit != 0;
                }
                if w == EMPTY {
                    break false;
                }
                i = (i + 1) & mask;
            };
            if !known {
                tuples.copy_within(k * arity..(k + 1) * arity, kept);
                kept += arity;
            }
        }
        kept
    }

    fn prefetch(&self, i: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let p = match &self.table {
                Table::Bits(s) => s[i..].as_ptr() as *const i8,
                Table::Words { slots, .. } => slots[i..].as_ptr() as *const i8,
            };
            // SAFETY: SSE is part of every x86_64 target, and a prefetch only hints the
            // cache: it reads nothing and cannot fault (the address is in the table anyway).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(arity: usize, positions: bool) {
        let mut m = Members::new(arity, positions);
        let mut data = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut state = 12345u64;
        for _ in 0..5000 {
            state = mix(state);
            let t: Vec<u32> = (0..arity)
                .map(|c| ((state >> (c * 7)) % 200) as u32)
                .collect();
            let r = (data.len() / arity.max(1)) as u32;
            let mut with = data.clone();
            with.extend_from_slice(&t);
            let fresh = m.insert(&t, r, &with);
            assert_eq!(fresh, seen.insert(t.clone()));
            if fresh {
                data = with;
            }
            let at = m.find(&t, &data).map(|r| row(&data, arity, r).to_vec());
            assert_eq!(at, Some(t));
        }
        let probes: Vec<u32> = (0..900u32).flat_map(|v| vec![v % 260; arity]).collect();
        let mut batch = probes.clone();
        let kept = m.retain_unknown(&mut batch, &data);
        let want: Vec<u32> = probes
            .chunks(arity)
            .filter(|t| !seen.contains(*t))
            .flatten()
            .copied()
            .collect();
        assert_eq!(&batch[..kept], &want[..]);
        for t in probes.chunks(arity) {
            assert_eq!(m.contains(t, &data), seen.contains(t));
        }
    }

    #[test]
    fn every_layout_agrees_with_a_hash_set() {
        for arity in 1..=4 {
            check(arity, false);
            check(arity, true);
        }
    }

    #[test]
    fn the_empty_tuple_is_held_once() {
        for positions in [false, true] {
            let mut m = Members::new(0, positions);
            assert!(!m.contains(&[], &[]));
            assert!(m.insert(&[], 0, &[]));
            assert!(!m.insert(&[], 1, &[]));
            assert!(m.contains(&[], &[]));
            let mut none: Vec<u32> = Vec::new();
            assert_eq!(m.retain_unknown(&mut none, &[]), 0);
        }
    }
}
