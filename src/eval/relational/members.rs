//! Which tuples a relation holds: an open-addressing table of 64-bit words, probed linearly.
//!
//! Semi-naive joins test every derived tuple against the relation before keeping it, so this
//! probe is the innermost operation of most Datalog programs (Andersen's analysis derives 55
//! million tuples to find 1.1 million). Tuples of at most two columns are stored packed in
//! their word, so a probe touches one cache line and never the relation's rows; wider tuples
//! store 32 bits of their hash with their row id, and only a matching hash reads the row.
//! Batches of probes prefetch the slots they will read a few tuples ahead, so that the
//! memory latency of one probe overlaps the work of the others.

/// An unused slot. A packed tuple is never `u64::MAX` (positions are below `u32::MAX`), nor
/// is a wide entry (its row id is below `u32::MAX`).
const EMPTY: u64 = u64::MAX;

/// How many tuples ahead a batch prefetches.
const AHEAD: usize = 8;

/// The tuple set of one relation: [`Members::find`] and [`Members::insert`] take the
/// relation's flat rows, which wide tuples are compared against.
pub(super) struct Members {
    arity: usize,
    /// `arity <= 2`: each word is the tuple itself, so no probe reads a row.
    packed: bool,
    slots: Vec<u64>,
    /// Per slot, the row of its tuple: kept only when asked for ([`Members::new`]) and the
    /// tuples are packed (a wide entry holds its row already).
    rows: Vec<u32>,
    positions: bool,
    len: usize,
    /// `64 - log2(slots.len())`: a hash's top bits pick the first slot.
    shift: u32,
}

/// A 64-bit mixer (the finaliser of MurmurHash3): packed tuples differ in few bits, which
/// this spreads over the top bits that pick a slot.
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    let x = (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The word of a tuple of at most two columns.
fn pack(t: &[u32]) -> u64 {
    t.iter().fold(0u64, |w, &v| (w << 32) | u64::from(v))
}

/// The hash of a wide tuple, whose top 32 bits are kept in its entry.
fn hash_wide(t: &[u32]) -> u64 {
    mix(t
        .iter()
        .fold(0x9e37_79b9_7f4a_7c15u64, |h, &v| mix(h ^ u64::from(v))))
}

/// Row `r` of flat storage with `arity` columns.
fn row(data: &[u32], arity: usize, r: u32) -> &[u32] {
    &data[r as usize * arity..(r as usize + 1) * arity]
}

/// Where a probe for a tuple starts, and the word that stands for it (for a wide tuple, the
/// hash half; its row is filled in on insertion).
#[derive(Clone, Copy)]
struct Probe {
    hash: u64,
    word: u64,
}

impl Members {
    /// An empty set of tuples of `arity` columns; `positions` keeps each tuple's row for
    /// [`Members::find`] (relations whose rows carry values need it).
    pub(super) fn new(arity: usize, positions: bool) -> Members {
        let packed = arity <= 2;
        Members {
            arity,
            packed,
            slots: vec![EMPTY; 8],
            rows: if packed && positions {
                vec![0; 8]
            } else {
                Vec::new()
            },
            positions,
            len: 0,
            shift: 61,
        }
    }

    fn probe(&self, t: &[u32]) -> Probe {
        if self.packed {
            let word = pack(t);
            Probe {
                hash: mix(word),
                word,
            }
        } else {
            let hash = hash_wide(t);
            Probe {
                hash,
                word: hash & 0xffff_ffff_0000_0000,
            }
        }
    }

    fn start(&self, hash: u64) -> usize {
        (hash >> self.shift) as usize
    }

    /// The slot holding `t`, or the empty slot where it would go.
    fn slot(&self, t: &[u32], p: Probe, data: &[u32]) -> (usize, bool) {
        let mask = self.slots.len() - 1;
        let mut i = self.start(p.hash);
        loop {
            let w = self.slots[i];
            if w == EMPTY {
                return (i, false);
            }
            let hit = match self.packed {
                true => w == p.word,
                false => {
                    w & 0xffff_ffff_0000_0000 == p.word && row(data, self.arity, w as u32) == t
                }
            };
            if hit {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    /// The row of tuple `t`, among rows `data`. A set kept without positions finds it by a
    /// scan of the rows.
    pub(super) fn find(&self, t: &[u32], data: &[u32]) -> Option<u32> {
        let (i, hit) = self.slot(t, self.probe(t), data);
        if !hit {
            return None;
        }
        match (self.packed, self.positions) {
            (false, _) => Some(self.slots[i] as u32),
            (true, true) => Some(self.rows[i]),
            (true, false) => (0..(data.len() / self.arity.max(1)) as u32)
                .find(|&r| row(data, self.arity, r) == t),
        }
    }

    pub(super) fn contains(&self, t: &[u32], data: &[u32]) -> bool {
        self.slot(t, self.probe(t), data).1
    }

    /// Records that row `r` of `data` holds `t`, unless some row does already: `false` then.
    pub(super) fn insert(&mut self, t: &[u32], r: u32, data: &[u32]) -> bool {
        if (self.len + 1) * 10 > self.slots.len() * 7 {
            self.grow(data);
        }
        let p = self.probe(t);
        let (i, hit) = self.slot(t, p, data);
        if hit {
            return false;
        }
        self.put(i, p, r);
        true
    }

    fn put(&mut self, i: usize, p: Probe, r: u32) {
        self.len += 1;
        if self.packed {
            self.slots[i] = p.word;
            if self.positions {
                self.rows[i] = r;
            }
        } else {
            self.slots[i] = p.word | u64::from(r);
        }
    }

    fn grow(&mut self, data: &[u32]) {
        let size = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; size]);
        let old_rows = std::mem::take(&mut self.rows);
        if self.packed && self.positions {
            self.rows = vec![0; size];
        }
        self.shift -= 1;
        let mask = size - 1;
        for (k, w) in old.into_iter().enumerate() {
            if w == EMPTY {
                continue;
            }
            let hash = match self.packed {
                true => mix(w),
                false => hash_wide(row(data, self.arity, w as u32)),
            };
            let mut i = self.start(hash);
            while self.slots[i] != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = w;
            if let Some(&r) = old_rows.get(k) {
                self.rows[i] = r;
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
        let n = tuples.len() / arity;
        let mut kept = 0;
        for k in 0..n {
            if k + AHEAD < n {
                let ahead = &tuples[(k + AHEAD) * arity..(k + AHEAD + 1) * arity];
                self.prefetch(self.start(self.probe(ahead).hash));
            }
            let t = &tuples[k * arity..(k + 1) * arity];
            if !self.slot(t, self.probe(t), data).1 {
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
            let p = self.slots[i..].as_ptr() as *const i8;
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
                .map(|c| ((state >> (c * 7)) % 50) as u32)
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
        let mut batch: Vec<u32> = (0..300u32).flat_map(|v| vec![v % 60; arity]).collect();
        let kept = m.retain_unknown(&mut batch, &data);
        let want: Vec<u32> = (0..300u32)
            .flat_map(|v| vec![v % 60; arity])
            .collect::<Vec<_>>()
            .chunks(arity)
            .filter(|t| !seen.contains(*t))
            .flatten()
            .copied()
            .collect();
        assert_eq!(&batch[..kept], &want[..]);
    }

    #[test]
    fn packed_and_wide_tuples_agree_with_a_hash_set() {
        for arity in 1..=4 {
            check(arity, false);
            check(arity, true);
        }
    }

    #[test]
    fn the_empty_tuple_is_held_once() {
        let mut m = Members::new(0, false);
        assert!(m.insert(&[], 0, &[]));
        assert!(!m.insert(&[], 1, &[]));
        assert!(m.contains(&[], &[]));
        let mut none: Vec<u32> = Vec::new();
        assert_eq!(m.retain_unknown(&mut none, &[]), 0);
    }
}
