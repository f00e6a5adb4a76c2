//! The values of an open integer column (§8) and the handles engines store for them.
//!
//! A relation's integer column that no dense tensor indexes has no extent: it holds values,
//! any of the i64 range, and a recursion may compute new ones (`Fact(i + 1, n * (i + 1))`).
//! Relations store `u32` positions, so each such column's domain numbers its values: the
//! values known when the program is checked (its data and constants) in increasing order,
//! then each value an evaluation computes, in the order it is first met. This is Soufflé's
//! symbol table for numbers: one table per domain, shared by every evaluation of a checked
//! program, that only grows, so a value keeps its handle for the program's lifetime and two
//! engines (or two runs) store the same tuples alike.
//!
//! Where the values known at check time are `0, 1, …, k-1` (a graph's node numbers), handle
//! and value coincide over that prefix and no lookup is made there.

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::RwLock;

/// Values and their handles; see the module documentation.
pub struct ValueTable {
    /// Handles below this are their own values (a prefix `0..k` of the table).
    identity: AtomicU32,
    inner: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    values: Vec<i64>,
    /// The handle of each value outside the identity prefix.
    index: FxHashMap<i64, u32>,
}

impl ValueTable {
    /// A table numbering `values` (sorted and distinct) in order.
    pub fn new(values: Vec<i64>) -> ValueTable {
        debug_assert!(values.windows(2).all(|w| w[0] < w[1]));
        let identity = values
            .iter()
            .enumerate()
            .take_while(|&(i, &v)| v == i as i64)
            .count();
        let index = values
            .iter()
            .enumerate()
            .skip(identity)
            .map(|(i, &v)| (v, i as u32))
            .collect();
        ValueTable {
            identity: AtomicU32::new(identity as u32),
            inner: RwLock::new(Inner { values, index }),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        // A panic elsewhere cannot leave the table half-written: every write is one push
        // and one insert, so a poisoned lock still holds a consistent table.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The handle of `v`, if the table holds it.
    #[inline]
    pub fn handle(&self, v: i64) -> Option<u32> {
        let identity = self.identity.load(Ordering::Acquire);
        if (0..i64::from(identity)).contains(&v) {
            return Some(v as u32);
        }
        self.read().index.get(&v).copied()
    }

    /// The handle of `v`, numbering it after the others if it is new; `None` once the
    /// table holds 2³² values.
    pub fn intern(&self, v: i64) -> Option<u32> {
        if let Some(h) = self.handle(v) {
            return Some(h);
        }
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if let Some(&h) = inner.index.get(&v) {
            return Some(h);
        }
        let h = u32::try_from(inner.values.len()).ok()?;
        let identity = self.identity.load(Ordering::Acquire);
        if h == u32::MAX {
            return None;
        }
        inner.values.push(v);
        if identity == h && v == i64::from(h) {
            self.identity.store(h + 1, Ordering::Release);
        } else {
            inner.index.insert(v, h);
        }
        Some(h)
    }

    /// The value of handle `h` (0 for a handle the table never gave).
    #[inline]
    pub fn value(&self, h: u32) -> i64 {
        if h < self.identity.load(Ordering::Acquire) {
            return i64::from(h);
        }
        self.read().values.get(h as usize).copied().unwrap_or(0)
    }

    /// How many values the table holds: every handle is below it.
    pub fn len(&self) -> usize {
        self.read().values.len()
    }

    /// The smallest and largest value it holds, if any.
    pub fn bounds(&self) -> Option<(i64, i64)> {
        let inner = self.read();
        let lo = inner.values.iter().min()?;
        let hi = inner.values.iter().max()?;
        Some((*lo, *hi))
    }

    /// Whether the table holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The handles `0..len()` in increasing order of their values.
    pub fn by_value(&self) -> Vec<u32> {
        let inner = self.read();
        let mut order: Vec<u32> = (0..inner.values.len() as u32).collect();
        order.sort_by_key(|&h| inner.values[h as usize]);
        order
    }
}

impl std::fmt::Debug for ValueTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ValueTable({} values)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::ValueTable;

    #[test]
    fn a_prefix_of_naturals_is_its_own_handles_and_new_values_follow() {
        let t = ValueTable::new(vec![0, 1, 2, 7]);
        assert_eq!(
            (t.handle(2), t.handle(7), t.handle(3)),
            (Some(2), Some(3), None)
        );
        assert_eq!(t.intern(3), Some(4), "numbered after the others");
        assert_eq!(t.intern(-5), Some(5));
        assert_eq!(t.intern(3), Some(4), "the same value keeps its handle");
        assert_eq!(
            (t.value(1), t.value(3), t.value(4), t.value(5)),
            (1, 7, 3, -5)
        );
        assert_eq!(t.by_value(), vec![5, 0, 1, 2, 4, 3]);
        let t = ValueTable::new(vec![]);
        assert_eq!(
            (t.intern(0), t.intern(1), t.intern(9)),
            (Some(0), Some(1), Some(2))
        );
        assert_eq!((t.value(1), t.value(2), t.handle(1)), (1, 9, Some(1)));
        let t = ValueTable::new(vec![i64::MIN, i64::MAX]);
        assert_eq!((t.value(0), t.value(1)), (i64::MIN, i64::MAX));
    }
}
