//! Byte offsets to lines and columns and back. The protocol counts columns in UTF-16 code
//! units by default; a name in Greek or a string with an emoji must still land on the
//! right character.

/// Where each line of a source starts.
#[derive(Clone, Debug)]
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    /// The lines of `source`.
    pub fn new(source: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(source.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    /// The line (from 0) and UTF-16 column of byte `offset`, clamped to the source.
    pub fn position(&self, source: &str, offset: usize) -> (u32, u32) {
        let mut offset = offset.min(source.len());
        while !source.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let col: usize = source[self.starts[line]..offset]
            .chars()
            .map(char::len_utf16)
            .sum();
        (line as u32, col as u32)
    }

    /// The byte offset of a line and UTF-16 column; `None` past the last line. A column past
    /// the end of its line is the line's end, as the protocol says.
    pub fn offset(&self, source: &str, line: u32, col: u32) -> Option<usize> {
        let start = *self.starts.get(line as usize)?;
        let end = self
            .starts
            .get(line as usize + 1)
            .map_or(source.len(), |&s| s - 1);
        let mut units = 0usize;
        for (i, c) in source.get(start..end)?.char_indices() {
            if units >= col as usize {
                return Some(start + i);
            }
            units += c.len_utf16();
        }
        Some(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_utf16_units() {
        let src = "α = 1\n😀 = \"x\"\nZ";
        let ix = LineIndex::new(src);
        let z = src.find('Z').unwrap_or(0);
        assert_eq!(ix.position(src, z), (2, 0));
        let eq = src.find("= \"").unwrap_or(0);
        assert_eq!(ix.position(src, eq), (1, 3));
        assert_eq!(ix.offset(src, 1, 3), Some(eq));
        assert_eq!(ix.offset(src, 0, 99), Some(src.find('\n').unwrap_or(0)));
        assert_eq!(ix.offset(src, 7, 0), None);
    }
}
