//! What commits have changed since the program was loaded, kept so that an evaluation from
//! scratch (a commit with a new symbol, or another process starting again) reproduces it;
//! and its encoding as rows of words, which the dataflow carries to the other processes.

use std::collections::{BTreeMap, BTreeSet};

/// Every commit's facts so far: per relation, those inserted (bound as rows, beside the
/// program's own facts) and those removed (taken out of the checked facts); per tensor with
/// values, each element set or removed. A check from scratch then reproduces the state
/// commits reached.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Overlay {
    pub(super) relations: BTreeMap<String, (Facts, Facts)>,
    pub(super) elements: BTreeMap<String, Elements>,
}

/// A relation's facts as rows of fields.
pub(super) type Facts = BTreeSet<Vec<String>>;

/// Elements of a tensor with values, by their positions' fields: the value's text a commit
/// set, or `None` where one removed the element.
pub(super) type Elements = BTreeMap<Vec<String>, Option<String>>;

impl Overlay {
    /// Records a staged change; `rank` is the tensor's when it has values (its rows are
    /// then positions, and a value when inserting).
    pub(super) fn record(
        &mut self,
        name: &str,
        fields: &[String],
        sign: isize,
        rank: Option<usize>,
    ) {
        if let Some(rank) = rank {
            let at = rank.min(fields.len());
            let value = fields.get(rank).filter(|_| sign > 0).cloned();
            let elements = self.elements.entry(name.to_string()).or_default();
            elements.insert(fields[..at].to_vec(), value);
            return;
        }
        let (added, removed) = self.relations.entry(name.to_string()).or_default();
        if sign > 0 {
            removed.remove(fields);
            added.insert(fields.to_vec());
        } else {
            added.remove(fields);
            removed.insert(fields.to_vec());
        }
    }

    /// The rows to bind per tensor before a check from scratch: a relation's inserted facts,
    /// a tensor's set elements (so that their symbols enter the domains; their values are
    /// set after the check, [`Session::apply_overlay`]).
    pub(super) fn tables(&self) -> Vec<(String, Vec<Vec<String>>)> {
        let relations = self
            .relations
            .iter()
            .map(|(name, (added, _))| (name.clone(), added.iter().cloned().collect()));
        let elements = self.elements.iter().map(|(name, elements)| {
            let rows = elements.iter().filter_map(|(pos, v)| {
                let v = v.as_ref()?;
                Some(pos.iter().chain([v]).cloned().collect())
            });
            (name.clone(), rows.collect())
        });
        relations.chain(elements).collect()
    }

    /// The overlay as rows of words: one per fact or element, its kind first, then its
    /// strings ([`Overlay::decode`] reads them back).
    pub(super) fn encode(&self) -> Vec<Vec<u32>> {
        let mut rows = Vec::new();
        for (name, (added, removed)) in &self.relations {
            for (kind, facts) in [(Kind::Added, added), (Kind::Removed, removed)] {
                for f in facts {
                    rows.push(row(kind, name, f.iter()));
                }
            }
        }
        for (name, elements) in &self.elements {
            for (pos, v) in elements {
                rows.push(match v {
                    Some(v) => row(Kind::Set, name, pos.iter().chain([v])),
                    None => row(Kind::Unset, name, pos.iter()),
                });
            }
        }
        rows
    }

    /// The overlay [`Overlay::encode`] wrote; `None` if the rows are not such an encoding.
    pub(super) fn decode(rows: &[Vec<u32>]) -> Option<Overlay> {
        let mut o = Overlay::default();
        for r in rows {
            let (&kind, mut rest) = r.split_first()?;
            let mut strings = Vec::new();
            while !rest.is_empty() {
                let (s, tail) = string(rest)?;
                strings.push(s);
                rest = tail;
            }
            let (name, fields) = strings.split_first()?;
            match kind {
                k if k == Kind::Added as u32 || k == Kind::Removed as u32 => {
                    let (added, removed) = o.relations.entry(name.clone()).or_default();
                    match k == Kind::Added as u32 {
                        true => added.insert(fields.to_vec()),
                        false => removed.insert(fields.to_vec()),
                    };
                }
                k if k == Kind::Set as u32 => {
                    let (value, pos) = fields.split_last()?;
                    let elements = o.elements.entry(name.clone()).or_default();
                    elements.insert(pos.to_vec(), Some(value.clone()));
                }
                k if k == Kind::Unset as u32 => {
                    let elements = o.elements.entry(name.clone()).or_default();
                    elements.insert(fields.to_vec(), None);
                }
                _ => return None,
            }
        }
        Some(o)
    }
}

/// What a row of [`Overlay::encode`] records.
#[derive(Clone, Copy)]
enum Kind {
    Added = 0,
    Removed = 1,
    Set = 2,
    Unset = 3,
}

/// A row: its kind, then the tensor's name and the fields, each as its length in bytes
/// followed by its bytes four to a word.
fn row<'a>(kind: Kind, name: &'a str, fields: impl Iterator<Item = &'a String>) -> Vec<u32> {
    let mut r = vec![kind as u32];
    for s in std::iter::once(name).chain(fields.map(String::as_str)) {
        let bytes = s.as_bytes();
        r.push(bytes.len() as u32);
        r.extend(bytes.chunks(4).map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(w)
        }));
    }
    r
}

/// The string at the start of `words` ([`row`]'s encoding) and the words after it.
fn string(words: &[u32]) -> Option<(String, &[u32])> {
    let (&len, rest) = words.split_first()?;
    let len = len as usize;
    let n = len.div_ceil(4);
    let bytes: Vec<u8> = rest
        .get(..n)?
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let text = String::from_utf8(bytes.get(..len)?.to_vec()).ok()?;
    Some((text, &rest[n..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlay_survives_its_encoding() {
        let mut o = Overlay::default();
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        o.record("Edge", &f(&["a", "bé"]), 1, None);
        o.record("Edge", &f(&["", "c d"]), -1, None);
        o.record("W", &f(&["1", "2", "0.5"]), 1, Some(2));
        o.record("W", &f(&["3", "4"]), -1, Some(2));
        o.record("S", &f(&["5"]), 1, Some(0));
        let back = Overlay::decode(&o.encode());
        assert_eq!(back.as_ref(), Some(&o));
        assert_eq!(Overlay::decode(&[vec![9, 0]]), None);
        assert_eq!(Overlay::decode(&[vec![0, 7, 1]]), None);
    }
}
