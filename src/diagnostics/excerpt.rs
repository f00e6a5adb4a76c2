//! The source as a diagnostic quotes it: a line longer than [`LONG_LINE`] bytes is cut to
//! windows around the labels on it, so that an error in a 50 MB one-line program prints a
//! few lines, not the program. Line and column numbers stay those of the original source.

use codespan_reporting::files::{Error, Files};
use std::ops::Range;

/// Lines longer than this many bytes are quoted in windows.
pub(super) const LONG_LINE: usize = 400;

/// Bytes of context kept on each side of a label, and the most of a label quoted.
const CONTEXT: usize = 80;
const LABEL: usize = 160;

/// What a long line becomes where it is cut.
const ELLIPSIS: &str = "...";

/// A view of the source with its long lines cut, and how to map positions back.
pub(super) struct Excerpt<'a> {
    name: &'a str,
    original: &'a str,
    view: String,
    /// Pieces of the view copied from the original: (view start, original start, length),
    /// in order.
    pieces: Vec<(usize, usize, usize)>,
    /// Line starts of the view and of the original (one line of the view per line of the
    /// original).
    view_starts: Vec<usize>,
    original_starts: Vec<usize>,
}

impl<'a> Excerpt<'a> {
    /// The view of `source` for labels at `spans`; `None` when no line is long.
    pub(super) fn new(name: &'a str, source: &'a str, spans: &[Range<usize>]) -> Option<Self> {
        if !source.split('\n').any(|l| l.len() > LONG_LINE) {
            return None;
        }
        let mut e = Excerpt {
            name,
            original: source,
            view: String::new(),
            pieces: Vec::new(),
            view_starts: Vec::new(),
            original_starts: Vec::new(),
        };
        let mut start = 0;
        for line in source.split_inclusive('\n') {
            e.view_starts.push(e.view.len());
            e.original_starts.push(start);
            let body = line.strip_suffix('\n').unwrap_or(line);
            let end = start + body.len();
            if body.len() <= LONG_LINE {
                e.copy(start..start + line.len());
            } else {
                let ws = windows(source, start..end, spans);
                for (k, w) in ws.iter().enumerate() {
                    if k > 0 || w.start > start {
                        e.view.push_str(ELLIPSIS);
                    }
                    e.copy(w.clone());
                }
                if ws.last().is_some_and(|w| w.end < end) {
                    e.view.push_str(ELLIPSIS);
                }
                if line.len() > body.len() {
                    e.copy(end..end + 1);
                }
            }
            start += line.len();
        }
        if source.is_empty() || source.ends_with('\n') {
            e.view_starts.push(e.view.len());
            e.original_starts.push(source.len());
        }
        Some(e)
    }

    fn copy(&mut self, r: Range<usize>) {
        self.pieces.push((self.view.len(), r.start, r.len()));
        self.view.push_str(&self.original[r]);
    }

    /// Where an original position lies in the view (the end of the piece before it when it
    /// was cut out).
    pub(super) fn to_view(&self, at: usize) -> usize {
        let k = self.pieces.partition_point(|&(_, o, _)| o <= at);
        match k.checked_sub(1).map(|k| self.pieces[k]) {
            Some((v, o, len)) => v + (at - o).min(len),
            None => 0,
        }
    }

    fn to_original(&self, at: usize) -> usize {
        let k = self.pieces.partition_point(|&(v, _, _)| v <= at);
        match k.checked_sub(1).map(|k| self.pieces[k]) {
            Some((v, o, len)) => o + (at - v).min(len),
            None => 0,
        }
    }
}

/// The windows of the line `line` quoted: around each label on it (merged where they
/// overlap), or its start when none is on it; each on character boundaries.
fn windows(source: &str, line: Range<usize>, spans: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut ws: Vec<Range<usize>> = spans
        .iter()
        .filter(|s| s.start <= line.end && s.end >= line.start)
        .map(|s| {
            let from = s.start.max(line.start);
            let to = s.end.min(from + LABEL).min(line.end);
            from.saturating_sub(CONTEXT).max(line.start)..(to + CONTEXT).min(line.end)
        })
        .collect();
    if ws.is_empty() {
        ws.push(line.start..line.start + LONG_LINE);
    }
    ws.sort_by_key(|w| w.start);
    let mut merged: Vec<Range<usize>> = Vec::new();
    for w in ws {
        let w = floor(source, w.start)..floor(source, w.end);
        match merged.last_mut() {
            Some(last) if w.start <= last.end => last.end = last.end.max(w.end),
            _ => merged.push(w),
        }
    }
    merged
}

/// The nearest character boundary at or before `at`.
fn floor(source: &str, mut at: usize) -> usize {
    at = at.min(source.len());
    while !source.is_char_boundary(at) {
        at -= 1;
    }
    at
}

impl<'a> Files<'a> for Excerpt<'_> {
    type FileId = ();
    type Name = &'a str;
    type Source = &'a str;

    fn name(&'a self, (): ()) -> Result<&'a str, Error> {
        Ok(self.name)
    }

    fn source(&'a self, (): ()) -> Result<&'a str, Error> {
        Ok(&self.view)
    }

    fn line_index(&'a self, (): (), byte_index: usize) -> Result<usize, Error> {
        Ok(self
            .view_starts
            .partition_point(|&s| s <= byte_index)
            .saturating_sub(1))
    }

    fn column_number(&'a self, (): (), line: usize, byte_index: usize) -> Result<usize, Error> {
        let start = *self.original_starts.get(line).ok_or(Error::LineTooLarge {
            given: line,
            max: self.original_starts.len(),
        })?;
        let at = self.to_original(byte_index).max(start);
        Ok(self.original[start..floor(self.original, at)]
            .chars()
            .count()
            + 1)
    }

    fn line_range(&'a self, (): (), line: usize) -> Result<Range<usize>, Error> {
        let max = self.view_starts.len();
        let start = *self
            .view_starts
            .get(line)
            .ok_or(Error::LineTooLarge { given: line, max })?;
        let end = self
            .view_starts
            .get(line + 1)
            .copied()
            .unwrap_or(self.view.len());
        Ok(start..end)
    }
}
