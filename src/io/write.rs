//! Writers. Every file is written to a temporary file beside it and renamed into place, so a
//! reader never sees a half-written file (§11).

use crate::tensor::{ElemType, Tensor};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Most elements a dense file (`.npy`, `.safetensors`) may hold: 2³¹, i.e. 16 GiB of f64.
const MAX_DENSE_WRITE: usize = 1 << 31;

/// One tensor to write, with its index labels resolved (symbols raw, integers as digits).
pub(crate) struct WriteRequest<'a> {
    /// Destination.
    pub path: PathBuf,
    /// Entry name (for safetensors).
    pub name: String,
    /// The tensor.
    pub tensor: &'a Tensor,
    /// Whether it is a relation (rows carry no value field).
    pub boolean: bool,
    /// Label of position `pos` on axis `axis`.
    pub label: &'a dyn Fn(usize, usize) -> String,
}

/// Writes every request; requests for the same `.safetensors` path become one file.
pub(crate) fn write_files(requests: &[WriteRequest]) -> Result<(), String> {
    let mut done: Vec<&Path> = Vec::new();
    for (i, req) in requests.iter().enumerate() {
        if done.contains(&req.path.as_path()) {
            continue;
        }
        let ext = req
            .path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        if matches!(ext.as_str(), "npy" | "safetensors") {
            let n = req
                .tensor
                .shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d));
            if n.is_none_or(|n| n > MAX_DENSE_WRITE) {
                return Err(format!(
                    "cannot write `{}`: `{}` has shape {:?}, too large for a dense file; write it as .tsv",
                    req.path.display(),
                    req.name,
                    req.tensor.shape
                ));
            }
        }
        let bytes = match ext.as_str() {
            "tsv" | "facts" => delimited(req, b'\t')?,
            "csv" => delimited(req, b',')?,
            "npy" => npy(req.tensor)?,
            "safetensors" => {
                let same: Vec<&WriteRequest> =
                    requests[i..].iter().filter(|r| r.path == req.path).collect();
                safetensors_bytes(&same)?
            }
            _ => {
                return Err(format!(
                    "cannot write `{}`: unknown file type `.{ext}` (expected .tsv, .facts, .csv, .npy or .safetensors)",
                    req.path.display()
                ))
            }
        };
        atomic_write(&req.path, &bytes)?;
        done.push(&req.path);
    }
    Ok(())
}

/// Rows as the reader reads them back: a field holding the delimiter, a quote, a line
/// break or the comment character `#` is quoted (the `csv` crate's rules).
fn delimited(req: &WriteRequest, sep: u8) -> Result<Vec<u8>, String> {
    let mut w = csv::WriterBuilder::new()
        .delimiter(sep)
        .comment(Some(b'#'))
        .flexible(true)
        .from_writer(Vec::new());
    let shown = |e: csv::Error| format!("cannot write `{}`: {e}", req.path.display());
    for (idx, v) in req.tensor.entries() {
        if req.boolean && v == 0.0 {
            continue;
        }
        let mut fields: Vec<String> = idx
            .iter()
            .enumerate()
            .map(|(ax, &p)| (req.label)(ax, p))
            .collect();
        if !req.boolean {
            fields.push(req.tensor.format_at(&idx, v));
        }
        w.write_record(&fields).map_err(shown)?;
    }
    w.into_inner()
        .map_err(|e| format!("cannot write `{}`: {}", req.path.display(), e.error()))
}

fn npy(t: &Tensor) -> Result<Vec<u8>, String> {
    let values = t.to_dense_values();
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    match t.elem {
        ElemType::Bool => npy_bytes(&shape, values.iter().map(|&v| v != 0.0)),
        ElemType::Int => npy_bytes(&shape, t.to_dense_ints().into_iter()),
        ElemType::I8 => npy_bytes(&shape, values.iter().map(|&v| v as i64)),
        ElemType::F64 => npy_bytes(&shape, values.iter().copied()),
        _ => npy_bytes(&shape, values.iter().map(|&v| v as f32)),
    }
}

/// An `.npy` file of `values` in the dtype of `T`.
fn npy_bytes<T: npyz::AutoSerialize>(
    shape: &[u64],
    values: impl Iterator<Item = T>,
) -> Result<Vec<u8>, String> {
    use npyz::WriterBuilder;
    let err = |e: std::io::Error| e.to_string();
    let mut buf = Vec::new();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(&mut buf)
        .begin_nd()
        .map_err(err)?;
    w.extend(values).map_err(err)?;
    w.finish().map_err(err)?;
    Ok(buf)
}

fn safetensors_bytes(reqs: &[&WriteRequest]) -> Result<Vec<u8>, String> {
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;
    let mut owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for r in reqs {
        let values = r.tensor.to_dense_values();
        let (dtype, bytes): (Dtype, Vec<u8>) = match r.tensor.elem {
            ElemType::Bool => (
                Dtype::BOOL,
                values.iter().map(|&v| (v != 0.0) as u8).collect(),
            ),
            ElemType::Int => (
                Dtype::I64,
                r.tensor
                    .to_dense_ints()
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            ),
            ElemType::I8 => (Dtype::I8, values.iter().map(|&v| v as i8 as u8).collect()),
            ElemType::F64 => (
                Dtype::F64,
                values.iter().flat_map(|&v| v.to_le_bytes()).collect(),
            ),
            ElemType::F16 => (
                Dtype::F16,
                values
                    .iter()
                    .flat_map(|&v| half::f16::from_f64(v).to_le_bytes())
                    .collect(),
            ),
            ElemType::BF16 => (
                Dtype::BF16,
                values
                    .iter()
                    .flat_map(|&v| half::bf16::from_f64(v).to_le_bytes())
                    .collect(),
            ),
            ElemType::F32 | ElemType::FP8 => (
                Dtype::F32,
                values
                    .iter()
                    .flat_map(|&v| (v as f32).to_le_bytes())
                    .collect(),
            ),
        };
        owned.push((r.name.clone(), dtype, r.tensor.shape.clone(), bytes));
    }
    let mut views = Vec::new();
    for (name, dtype, shape, bytes) in &owned {
        let view = TensorView::new(*dtype, shape.clone(), bytes).map_err(|e| e.to_string())?;
        views.push((name.clone(), view));
    }
    safetensors::serialize(views, &None).map_err(|e| e.to_string())
}

/// Writes `bytes` to a temporary file beside `path`, synced, then renamed over it: a reader
/// (or a run killed midway) sees the old file or the new one, never part of one.
pub(crate) fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let shown = path.display();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let prefix = temporary_prefix(path);
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix);
    #[cfg(unix)]
    builder.permissions(mode_for(path));
    let mut tmp = builder
        .tempfile_in(&dir)
        .map_err(|e| format!("cannot write `{shown}`: {e}"))?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(|e| format!("cannot write `{shown}`: {e}"))?;
    tmp.persist(path)
        .map_err(|e| format!("cannot write `{shown}`: {}", e.error))?;
    remove_stale(&dir, &prefix);
    Ok(())
}

/// The start of the names of `path`'s temporary files: `.NAME.tl-`.
fn temporary_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    format!(".{name}.tl-")
}

/// Removes temporary files of the same destination that a killed run left behind; the
/// file just written has been renamed away from its temporary name already.
fn remove_stale(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(prefix) {
            // Best effort: a file that cannot be removed is left, as it was.
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A new file gets the usual mode (0666 less the umask, which the kernel applies), a
/// replaced one keeps its own.
#[cfg(unix)]
fn mode_for(path: &Path) -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.permissions())
        .unwrap_or_else(|_| std::fs::Permissions::from_mode(0o666))
}
