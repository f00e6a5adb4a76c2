//! Readers for `.tsv`, `.csv`, `.npy`, `.safetensors` and `.txt`.

use crate::syntax::ast::{Program, StmtKind};
use crate::tensor::{Dense, ElemType};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file's contents before the checker gives them meaning.
#[derive(Clone, Debug)]
pub enum RawData {
    /// Delimited rows: index fields, and for valued tensors a final value field.
    Table(Table),
    /// A dense array.
    Dense {
        /// Extents.
        shape: Vec<usize>,
        /// Row-major values, in an f32 buffer for f32 data (a bound array may be lent).
        values: Dense,
        /// Element type as stored.
        elem: ElemType,
    },
    /// Whitespace-separated words of a text file.
    Words(Vec<String>),
}

/// The rows of a delimited file, flat: every field's text in one buffer, so that reading a
/// million-row file allocates a few vectors rather than a few million strings.
#[derive(Clone, Debug, Default)]
pub struct Table {
    text: String,
    /// Per field, where its text ends in `text` (it starts where the previous one ends).
    ends: Vec<usize>,
    /// Per row, its 1-based line and its first field.
    starts: Vec<(usize, usize)>,
}

impl Table {
    /// Adds a row read at `line` (1-based, for messages).
    pub fn push<S: AsRef<str>>(&mut self, line: usize, fields: impl IntoIterator<Item = S>) {
        self.starts.push((line, self.ends.len()));
        for f in fields {
            self.text.push_str(f.as_ref());
            self.ends.push(self.text.len());
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> Option<Row<'_>> {
        let &(line, first) = self.starts.get(i)?;
        let end = self.starts.get(i + 1).map_or(self.ends.len(), |&(_, f)| f);
        Some(Row {
            line,
            table: self,
            first,
            end,
        })
    }

    /// Every row, in file order.
    pub fn rows(&self) -> impl Iterator<Item = Row<'_>> + '_ {
        (0..self.len()).filter_map(|i| self.row(i))
    }

    /// Whether the first row is a header (`name,age` above `Ann,31`): a column whose first
    /// field is not a number while every later one is, as pandas' `read_csv` would take it.
    /// Without this, the header's words become symbols of columns that hold numbers, and
    /// the error that follows blames a rule, not the file.
    fn has_header(&self) -> bool {
        let number = |f: &str| f.parse::<f64>().is_ok();
        let Some(first) = self.row(0).filter(|_| self.len() > 1) else {
            return false;
        };
        first
            .fields()
            .enumerate()
            .any(|(c, f)| !number(f) && self.rows().skip(1).all(|r| r.field(c).is_some_and(number)))
    }

    /// The same rows but the first.
    fn without_first(&self) -> Table {
        let mut out = Table::default();
        for r in self.rows().skip(1) {
            out.push(r.line, r.fields());
        }
        out
    }
}

/// One row of a [`Table`].
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// 1-based line number, for messages.
    pub line: usize,
    table: &'a Table,
    first: usize,
    end: usize,
}

impl<'a> Row<'a> {
    /// Number of fields.
    pub fn len(&self) -> usize {
        self.end - self.first
    }

    /// Whether the row has no fields.
    pub fn is_empty(&self) -> bool {
        self.end == self.first
    }

    /// Field `i`, trimmed.
    pub fn field(&self, i: usize) -> Option<&'a str> {
        let k = self.first + i;
        if k >= self.end {
            return None;
        }
        let start = if k == 0 { 0 } else { self.table.ends[k - 1] };
        self.table.text.get(start..self.table.ends[k])
    }

    /// Every field, trimmed.
    pub fn fields(&self) -> impl Iterator<Item = &'a str> + 'a {
        let row = *self;
        (0..self.len()).filter_map(move |i| row.field(i))
    }

    /// The last field.
    pub fn last(&self) -> Option<&'a str> {
        self.len().checked_sub(1).and_then(|i| self.field(i))
    }
}

/// What a program's files hold, by path (as the program's directory joins it) and the
/// tensor that reads it (a safetensors file gives each tensor its own entry): read before
/// checking, so that the checker does no I/O.
pub(crate) type ProgramFiles = HashMap<(PathBuf, String), Result<Arc<RawData>, String>>;

/// Reads every file `program` reads (`W = "w.tsv"`), relative to `base_dir`.
pub(crate) fn read_program_files(program: &Program, base_dir: &Path) -> ProgramFiles {
    let mut files = ProgramFiles::new();
    for st in &program.statements {
        if let StmtKind::FileRead { name, path } = &st.kind {
            let full = base_dir.join(path);
            files
                .entry((full.clone(), name.text.clone()))
                .or_insert_with(|| read_file(&full, &name.text).map(Arc::new));
        }
    }
    files
}

/// Reads `path`; `entry` names the safetensors entry. Errors name the file (and line).
pub(crate) fn read_file(path: &Path, entry: &str) -> Result<RawData, String> {
    let shown = path.display();
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read `{shown}`: {e}"))?;
    match ext.as_str() {
        // `.facts` is Soufflé's tab-separated input.
        "tsv" | "facts" => read_delimited(&bytes, b'\t', &shown.to_string()),
        "csv" => read_delimited(&bytes, b',', &shown.to_string()),
        "npy" => read_npy(&bytes).map_err(|e| format!("`{shown}` is not a readable .npy file: {e}")),
        "safetensors" => read_safetensors(&bytes, entry)
            .map_err(|e| format!("`{shown}` is not a readable .safetensors file: {e}")),
        "txt" => {
            let text = String::from_utf8(bytes).map_err(|_| format!("`{shown}` is not UTF-8 text"))?;
            Ok(RawData::Words(
                text.split_whitespace().map(str::to_string).collect(),
            ))
        }
        _ => Err(format!(
            "`{shown}`: unknown file type `.{ext}` (expected .tsv, .facts, .csv, .npy, .safetensors or .txt)"
        )),
    }
}

fn read_delimited(bytes: &[u8], delimiter: u8, shown: &str) -> Result<RawData, String> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .from_reader(bytes);
    let mut table = Table::default();
    let (mut line, mut counted_to) = (1usize, 0usize);
    let mut record = csv::StringRecord::new();
    loop {
        let more = reader.read_record(&mut record).map_err(|e| {
            let offset = e
                .position()
                .map(|p| p.byte() as usize)
                .unwrap_or(0)
                .min(bytes.len());
            let line = 1 + bytes[..offset].iter().filter(|&&b| b == b'\n').count();
            format!("{shown}:{line}: malformed row: {e}")
        })?;
        if !more {
            break;
        }
        let mut offset = record
            .position()
            .map(|p| p.byte() as usize)
            .unwrap_or(0)
            .min(bytes.len());
        // The record starts after any blank and comment lines at its position.
        while let Some(&b) = bytes.get(offset) {
            match b {
                b'\n' | b'\r' => offset += 1,
                b'#' => match bytes[offset..].iter().position(|&c| c == b'\n') {
                    Some(n) => offset += n + 1,
                    None => offset = bytes.len(),
                },
                _ => break,
            }
        }
        // Lines are counted incrementally from the previous record: one pass over the file.
        if offset > counted_to {
            line += bytes[counted_to..offset]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            counted_to = offset;
        }
        if record.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        table.push(line, record.iter().map(str::trim));
    }
    Ok(RawData::Table(match table.has_header() {
        true => table.without_first(),
        false => table,
    }))
}

fn read_npy(bytes: &[u8]) -> Result<RawData, String> {
    check_npy_header(bytes)?;
    let npy = npyz::NpyFile::new(bytes).map_err(|e| e.to_string())?;
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    if npy.order() == npyz::Order::Fortran && shape.len() > 1 {
        return Err("Fortran-ordered arrays are not supported; save with order='C'".into());
    }
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if n.is_none_or(|n| n > bytes.len()) {
        return Err(format!("shape {shape:?} is larger than the file's data"));
    }
    let descr = match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => return Err(format!("unsupported dtype {}", other.descr())),
    };
    let code = descr.trim_start_matches(['<', '>', '|', '=']);
    let err = |e: std::io::Error| e.to_string();
    if code == "f4" {
        let values = Dense::from_f32(npy.into_vec::<f32>().map_err(err)?);
        return Ok(RawData::Dense {
            shape,
            values,
            elem: ElemType::F32,
        });
    }
    let (values, elem): (Vec<f64>, ElemType) = match code {
        "f8" => (npy.into_vec::<f64>().map_err(err)?, ElemType::F64),
        "f2" => (
            npy.into_vec::<half::f16>()
                .map_err(err)?
                .into_iter()
                .map(f64::from)
                .collect(),
            ElemType::F16,
        ),
        "i8" => (
            npy.into_vec::<i64>()
                .map_err(err)?
                .into_iter()
                .map(|v| v as f64)
                .collect(),
            ElemType::Int,
        ),
        "i4" => (
            npy.into_vec::<i32>()
                .map_err(err)?
                .into_iter()
                .map(f64::from)
                .collect(),
            ElemType::Int,
        ),
        "u1" => (
            npy.into_vec::<u8>()
                .map_err(err)?
                .into_iter()
                .map(f64::from)
                .collect(),
            ElemType::Int,
        ),
        "b1" => (
            npy.into_vec::<bool>()
                .map_err(err)?
                .into_iter()
                .map(|b| if b { 1.0 } else { 0.0 })
                .collect(),
            ElemType::Bool,
        ),
        other => {
            return Err(format!(
                "unsupported dtype `{other}` (expected f8, f4, f2, i8, i4, u1 or b1)"
            ))
        }
    };
    Ok(RawData::Dense {
        shape,
        values: Dense::from_f64(ElemType::F64, values),
        elem,
    })
}

/// Deepest bracket nesting accepted in a `.npy` header.
const MAX_HEADER_NESTING: usize = 8;

/// Rejects, before `npyz` reads it, a header longer than the file, one nested too deep for
/// its parser, or one whose shape could not fit in the file (its product can overflow, which must be an error rather than
/// a panic).
fn check_npy_header(bytes: &[u8]) -> Result<(), String> {
    let (len_at, width) = match bytes.get(6) {
        Some(1) => (8, 2),
        Some(2 | 3) => (8, 4),
        _ => return Ok(()),
    };
    let Some(len_bytes) = bytes.get(len_at..len_at + width) else {
        return Ok(());
    };
    let len = len_bytes
        .iter()
        .rev()
        .fold(0usize, |a, &b| (a << 8) | b as usize);
    let start = len_at + width;
    // npyz allocates the declared length before reading it (4 bytes of a version-2 header
    // can ask for 4 GiB).
    if start.saturating_add(len) > bytes.len() {
        return Err(format!(
            "the header says it is {len} bytes long, more than the file"
        ));
    }
    let Some(header) = bytes
        .get(start..start + len)
        .and_then(|h| std::str::from_utf8(h).ok())
    else {
        return Ok(());
    };
    // npyz parses the header with a grammar that backtracks exponentially on nested brackets
    // (45 `[` take minutes); a header it accepts nests three deep at most.
    let mut depth = 0usize;
    for c in header.chars() {
        match c {
            '[' | '(' | '{' => depth += 1,
            ']' | ')' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_HEADER_NESTING {
            return Err(format!(
                "malformed header: brackets nested more than {MAX_HEADER_NESTING} deep"
            ));
        }
    }
    let Some(tuple) = header
        .split("'shape':")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
    else {
        return Ok(());
    };
    let mut n: Option<u128> = Some(1);
    for dim in tuple
        .trim_start()
        .trim_start_matches('(')
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        n = n.and_then(|n| dim.parse::<u128>().ok().and_then(|d| n.checked_mul(d)));
    }
    match n {
        Some(n) if n <= bytes.len() as u128 => Ok(()),
        _ => Err(format!("shape ({tuple}) is larger than the file's data")),
    }
}

/// Little-endian elements of `N` bytes each, converted by `f`.
fn decode<const N: usize, T>(data: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N)
        .map(|c| {
            let mut b = [0u8; N];
            b.copy_from_slice(c);
            f(b)
        })
        .collect()
}

fn read_safetensors(bytes: &[u8], entry: &str) -> Result<RawData, String> {
    use safetensors::Dtype;
    let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
    let view = st.tensor(entry).map_err(|_| {
        let mut names: Vec<String> = st.names().into_iter().cloned().collect();
        names.sort();
        format!("no entry named `{entry}` (entries: {})", names.join(", "))
    })?;
    let data = view.data();
    if view.dtype() == Dtype::F32 {
        return Ok(RawData::Dense {
            shape: view.shape().to_vec(),
            values: Dense::from_f32(decode(data, f32::from_le_bytes)),
            elem: ElemType::F32,
        });
    }
    let (values, elem): (Vec<f64>, ElemType) = match view.dtype() {
        Dtype::F64 => (decode(data, f64::from_le_bytes), ElemType::F64),
        Dtype::F16 => (
            decode(data, |b| half::f16::from_le_bytes(b).to_f64()),
            ElemType::F16,
        ),
        Dtype::BF16 => (
            decode(data, |b| half::bf16::from_le_bytes(b).to_f64()),
            ElemType::BF16,
        ),
        Dtype::I64 => (
            decode(data, |b| i64::from_le_bytes(b) as f64),
            ElemType::Int,
        ),
        Dtype::I32 => (
            decode(data, |b| i32::from_le_bytes(b) as f64),
            ElemType::Int,
        ),
        Dtype::I8 => (decode(data, |b: [u8; 1]| b[0] as i8 as f64), ElemType::I8),
        Dtype::U8 => (decode(data, |b: [u8; 1]| b[0] as f64), ElemType::Int),
        Dtype::BOOL => (
            decode(data, |b: [u8; 1]| (b[0] != 0) as u8 as f64),
            ElemType::Bool,
        ),
        other => return Err(format!("unsupported dtype {other:?}")),
    };
    Ok(RawData::Dense {
        shape: view.shape().to_vec(),
        values: Dense::from_f64(ElemType::F64, values),
        elem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_file_names_the_file() {
        let err = read_file(Path::new("/nonexistent/x.tsv"), "X").unwrap_err();
        assert!(err.contains("/nonexistent/x.tsv"), "{err}");
    }

    #[test]
    fn delimited_rows_keep_line_numbers() {
        let RawData::Table(rows) = read_delimited(b"a\tb\n\nc\td\n", b'\t', "f").unwrap() else {
            panic!()
        };
        assert_eq!(rows.len(), 2);
        let second = rows.row(1).unwrap();
        assert_eq!(second.line, 3);
        assert_eq!(second.fields().collect::<Vec<_>>(), ["c", "d"]);
    }

    #[test]
    fn a_header_row_above_numbers_is_skipped() {
        let read = |text: &[u8]| match read_delimited(text, b',', "f").unwrap() {
            RawData::Table(t) => t
                .rows()
                .map(|r| (r.line, r.fields().collect::<Vec<_>>().join(",")))
                .collect::<Vec<_>>(),
            _ => panic!(),
        };
        let ages = read(b"name,age\nAnn,31\nBob,17\n");
        assert_eq!(ages, [(2, "Ann,31".to_string()), (3, "Bob,17".to_string())]);
        // Symbols all the way down: nothing tells a header, so the first row is data.
        assert_eq!(read(b"Ann,Bob\nBob,Cy\n").len(), 2);
        // A row of numbers first is data.
        assert_eq!(read(b"1,2\n3,4\n").len(), 2);
        // One row alone is data.
        assert_eq!(read(b"name,age\n").len(), 1);
    }
}
