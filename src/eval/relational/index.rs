//! A relation's rows grouped by the values of some key columns, each key's entries
//! contiguous: an entry is the row id followed by the values of the other columns, so a join
//! that looks a key up reads its matches in one sequential run and binds its variables without
//! visiting the rows.
//!
//! Groups live in one arena and grow by doubling: a full group is extended in place when it is
//! the arena's last, and moved to the end otherwise; the arena is compacted when moved-out
//! space passes half of it.

use super::members::{hash_wide, pack};
use super::store::row;
use hashbrown::HashTable;

/// Which of a store's indexes: the position in its list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct IndexId(pub(super) usize);

/// One key's entries: `len` of them at `start` in the arena, with room for `cap`. `key` is
/// the key itself when it has at most two columns, its hash otherwise (the columns are then
/// compared through the group's first row).
#[derive(Clone, Copy)]
struct Group {
    key: u64,
    start: usize,
    len: u32,
    cap: u32,
}

pub(super) struct Index {
    pub(super) cols: Vec<usize>,
    /// The columns an entry holds after the row id, in order.
    rest: Vec<usize>,
    groups: HashTable<Group>,
    arena: Vec<u32>,
    /// Arena values no group owns any more.
    garbage: usize,
}

/// The hash of a key's word for the key table: one multiply, lighter than the membership
/// table's mixer (a lookup of every join step pays it), and enough for `hashbrown`, which
/// takes its tag from the top bits and its bucket from the low ones.
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 29)
}

/// Whether `g` is the group of row `this`, whose key word is `word`: keys of more than two
/// columns (not `packed` in the word) are compared on columns `cols` through the group's
/// first row, found in `arena` among `data`'s rows of `arity` columns.
#[inline]
fn is_group_of(
    g: &Group,
    (word, packed): (u64, bool),
    (cols, this): (&[usize], &[u32]),
    (arena, data, arity): (&[u32], &[u32], usize),
) -> bool {
    g.key == word
        && (packed || {
            let first = row(data, arity, arena[g.start]);
            cols.iter().all(|&c| first[c] == this[c])
        })
}

impl Index {
    /// An empty index on `cols` of a relation with `arity` columns.
    pub(super) fn new(cols: &[usize], arity: usize) -> Index {
        Index {
            cols: cols.to_vec(),
            rest: (0..arity).filter(|c| !cols.contains(c)).collect(),
            groups: HashTable::new(),
            arena: Vec::new(),
            garbage: 0,
        }
    }

    /// Values per entry: the row id, then the other columns.
    pub(super) fn stride(&self) -> usize {
        1 + self.rest.len()
    }

    /// Where column `c`'s value sits in an entry (`None` for a key column).
    pub(super) fn slot_of(&self, c: usize) -> Option<usize> {
        self.rest.iter().position(|&r| r == c).map(|p| p + 1)
    }

    /// How many distinct keys the rows hold.
    pub(super) fn keys(&self) -> usize {
        self.groups.len()
    }

    fn packed(&self) -> bool {
        self.cols.len() <= 2
    }

    /// The word a key is found by.
    fn word(&self, key: impl Iterator<Item = u32>) -> u64 {
        match self.packed() {
            true => pack(key),
            false => hash_wide(key),
        }
    }

    /// Adds row `r` of `data` (rows of `arity` columns).
    pub(super) fn add(&mut self, data: &[u32], arity: usize, r: u32) {
        let this = row(data, arity, r);
        let word = self.word(self.cols.iter().map(|&c| this[c]));
        let h = mix(word);
        let stride = self.stride();
        let packed = self.packed();
        let Index {
            cols,
            rest,
            groups,
            arena,
            garbage,
        } = self;
        let same = |g: &Group| is_group_of(g, (word, packed), (cols, this), (arena, data, arity));
        let group = match groups.find_mut(h, same) {
            Some(g) => g,
            None => {
                let g = Group {
                    key: word,
                    start: arena.len(),
                    len: 0,
                    cap: 1,
                };
                arena.resize(arena.len() + stride, 0);
                groups.insert_unique(h, g, |g| mix(g.key)).into_mut()
            }
        };
        if group.len == group.cap {
            let (old, used) = (group.cap as usize * stride, group.len as usize * stride);
            if group.start + old != arena.len() {
                let start = arena.len();
                arena.extend_from_within(group.start..group.start + used);
                group.start = start;
                *garbage += old;
            }
            arena.resize(group.start + 2 * old, 0);
            group.cap *= 2;
        }
        let at = group.start + group.len as usize * stride;
        arena[at] = r;
        for (k, &c) in rest.iter().enumerate() {
            arena[at + 1 + k] = this[c];
        }
        group.len += 1;
        if *garbage > 1024 && *garbage * 2 > arena.len() {
            self.compact();
        }
    }

    /// The group of the key that row `r` of `data` holds, found through `groups`; the
    /// closure gets the group found, if any, and may say to drop it.
    fn group_of<T>(
        &mut self,
        (data, arity): (&[u32], usize),
        r: u32,
        f: impl FnOnce(&mut Group, &mut [u32], usize) -> (T, bool),
    ) -> Option<T> {
        let this = row(data, arity, r);
        let word = self.word(self.cols.iter().map(|&c| this[c]));
        let packed = self.packed();
        let stride = self.stride();
        let Index {
            cols,
            groups,
            arena,
            garbage,
            ..
        } = self;
        let same = |g: &Group| is_group_of(g, (word, packed), (cols, this), (arena, data, arity));
        let entry = groups.find_entry(mix(word), same).ok()?;
        let mut group = *entry.get();
        let (out, drop) = f(&mut group, arena, stride);
        match drop {
            true => {
                *garbage += group.cap as usize * stride;
                entry.remove();
            }
            false => *entry.into_mut() = group,
        }
        Some(out)
    }

    /// Takes row `r`'s entry out of its group, keeping the others in row order.
    pub(super) fn remove(&mut self, data: &[u32], arity: usize, r: u32) {
        self.group_of((data, arity), r, |g, arena, stride| {
            let entries = &mut arena[g.start..g.start + g.len as usize * stride];
            // Recent rows, the likeliest to go, are at the end.
            if let Some(k) = entries.chunks_exact(stride).rposition(|e| e[0] == r) {
                entries.copy_within((k + 1) * stride.., k * stride);
                g.len -= 1;
            }
            ((), g.len == 0)
        });
    }

    /// Renames the entry of row `from` as row `to`, which now holds the same tuple, keeping
    /// its group in row order.
    pub(super) fn renumber(&mut self, data: &[u32], arity: usize, from: u32, to: u32) {
        self.group_of((data, arity), to, |g, arena, stride| {
            let entries = &mut arena[g.start..g.start + g.len as usize * stride];
            let Some(k) = entries.chunks_exact(stride).rposition(|e| e[0] == from) else {
                return ((), false);
            };
            let mut entry = entries[k * stride..(k + 1) * stride].to_vec();
            entry[0] = to;
            entries.copy_within((k + 1) * stride.., k * stride);
            let n = g.len as usize - 1;
            let at = entries[..n * stride]
                .chunks_exact(stride)
                .rposition(|e| e[0] < to)
                .map_or(0, |k| k + 1);
            entries.copy_within(at * stride..n * stride, (at + 1) * stride);
            entries[at * stride..(at + 1) * stride].copy_from_slice(&entry);
            ((), false)
        });
    }

    /// Moves every group to a fresh arena, each with room for exactly its entries.
    fn compact(&mut self) {
        let stride = self.stride();
        let live: usize = self.groups.iter().map(|g| g.len as usize * stride).sum();
        let mut arena = Vec::with_capacity(live + live / 4);
        for g in self.groups.iter_mut() {
            let used = g.len as usize * stride;
            let start = arena.len();
            arena.extend_from_slice(&self.arena[g.start..g.start + used]);
            g.start = start;
            g.cap = g.len;
        }
        self.arena = arena;
        self.garbage = 0;
    }

    /// The entries of the rows whose key columns hold `key` (rows of `data`, `arity`
    /// columns): [`Index::stride`] values each.
    pub(super) fn entries(&self, data: &[u32], arity: usize, key: &[u32]) -> &[u32] {
        let word = self.word(key.iter().copied());
        let packed = self.packed();
        let same = |g: &Group| {
            g.key == word
                && (packed || {
                    let first = row(data, arity, self.arena[g.start]);
                    self.cols.iter().zip(key).all(|(&c, &v)| first[c] == v)
                })
        };
        match self.groups.find(mix(word), same) {
            Some(g) => &self.arena[g.start..g.start + g.len as usize * self.stride()],
            None => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removing rows the way a store does (the last row moved into the hole) keeps every
    /// group's entries those of its rows, in row order.
    #[test]
    fn removed_and_renumbered_rows_keep_groups_in_row_order() {
        for cols in [vec![0], vec![0, 1], vec![2, 0, 1]] {
            let arity = 3;
            let mut data = Vec::new();
            let mut ix = Index::new(&cols, arity);
            for r in 0..400u32 {
                data.extend_from_slice(&[r % 7, r % 3, r]);
                ix.add(&data, arity, r);
            }
            let mut count = 400u32;
            for r in [399u32, 5, 17, 200, 0, 150, 3] {
                ix.remove(&data, arity, r);
                let last = count - 1;
                if r != last {
                    let moved: Vec<u32> = row(&data, arity, last).to_vec();
                    data[r as usize * arity..(r as usize + 1) * arity].copy_from_slice(&moved);
                    ix.renumber(&data, arity, last, r);
                }
                count = last;
                data.truncate(count as usize * arity);
            }
            for r in 0..count {
                let t = row(&data, arity, r);
                let key: Vec<u32> = cols.iter().map(|&c| t[c]).collect();
                let found: Vec<u32> = ix
                    .entries(&data, arity, &key)
                    .chunks_exact(ix.stride())
                    .map(|e| e[0])
                    .collect();
                let want: Vec<u32> = (0..count)
                    .filter(|&s| cols.iter().all(|&c| row(&data, arity, s)[c] == t[c]))
                    .collect();
                assert_eq!(found, want, "cols {cols:?}, row {r}");
            }
        }
    }

    #[test]
    fn every_row_is_found_under_its_key_with_its_other_columns() {
        for cols in [vec![0], vec![1], vec![0, 2], vec![2, 0, 1]] {
            let arity = 3;
            let mut data = Vec::new();
            let mut ix = Index::new(&cols, arity);
            let mut state = 7u64;
            for r in 0..3000u32 {
                state = mix(state.wrapping_add(1));
                let t = [(state % 13) as u32, (state >> 8) as u32 % 5, r];
                data.extend_from_slice(&t);
                ix.add(&data, arity, r);
            }
            for r in 0..3000u32 {
                let t = row(&data, arity, r);
                let key: Vec<u32> = cols.iter().map(|&c| t[c]).collect();
                let found: Vec<u32> = ix
                    .entries(&data, arity, &key)
                    .chunks_exact(ix.stride())
                    .map(|e| e[0])
                    .collect();
                let want: Vec<u32> = (0..3000u32)
                    .filter(|&s| cols.iter().all(|&c| row(&data, arity, s)[c] == t[c]))
                    .collect();
                assert_eq!(found, want);
                let e = ix.entries(&data, arity, &key);
                let mine = e.chunks_exact(ix.stride()).find(|e| e[0] == r).unwrap();
                for (c, &v) in t.iter().enumerate() {
                    if let Some(s) = ix.slot_of(c) {
                        assert_eq!(mine[s], v);
                    }
                }
            }
            assert!(ix.entries(&data, arity, &vec![99; cols.len()]).is_empty());
        }
    }
}
