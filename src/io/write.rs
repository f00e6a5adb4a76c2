//! Writers. Every file is written to a temporary file beside it and renamed into place, so a
//! reader never sees a half-written file (§11).

use crate::tensor::{format_number, ElemType, Tensor};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Most elements a dense file (`.npy`, `.safetensors`) may hold: 2³¹, i.e. 16 GiB of f64.
const MAX_DENSE_WRITE: usize = 1 << 31;

/// One tensor to write, with its index labels resolved (symbols raw, integers as digits).
pub struct WriteRequest<'a> {
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
pub fn write_files(requests: &[WriteRequest]) -> Result<(), String> {
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
            "tsv" => delimited(req, '\t'),
            "csv" => delimited(req, ','),
            "npy" => npy(req.tensor)?,
            "safetensors" => {
                let same: Vec<&WriteRequest> =
                    requests[i..].iter().filter(|r| r.path == req.path).collect();
                safetensors_bytes(&same)?
            }
            _ => {
                return Err(format!(
                    "cannot write `{}`: unknown file type `.{ext}` (expected .tsv, .csv, .npy or .safetensors)",
                    req.path.display()
                ))
            }
        };
        atomic_write(&req.path, &bytes)?;
        done.push(&req.path);
    }
    Ok(())
}

fn delimited(req: &WriteRequest, sep: char) -> Vec<u8> {
    let mut out = String::new();
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
            fields.push(format_number(v, req.tensor.elem));
        }
        out.push_str(&fields.join(&sep.to_string()));
        out.push('\n');
    }
    out.into_bytes()
}

fn npy(t: &Tensor) -> Result<Vec<u8>, String> {
    let values = t.to_dense_values();
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    match t.elem {
        ElemType::Bool => npy_bytes(&shape, values.iter().map(|&v| v != 0.0)),
        ElemType::Int | ElemType::I8 => npy_bytes(&shape, values.iter().map(|&v| v as i64)),
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
                values
                    .iter()
                    .flat_map(|&v| (v as i64).to_le_bytes())
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

fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let shown = path.display();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(&dir)
        .map_err(|e| format!("cannot write `{shown}`: {e}"))?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(|e| format!("cannot write `{shown}`: {e}"))?;
    tmp.persist(path)
        .map_err(|e| format!("cannot write `{shown}`: {}", e.error))?;
    Ok(())
}
