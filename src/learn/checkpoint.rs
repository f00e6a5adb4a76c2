//! Checkpoints (§12): parameters and optimizer state in one `.safetensors` file.
//!
//! Parameters are stored under their own names in their element type (so `tl run --load`
//! and other tools read them as ordinary tensors); the optimizer's moments under
//! `optimizer.m.NAME` / `optimizer.v.NAME` in f64, and the step count in the metadata. A
//! save writes a temporary file beside the target and renames it over the target, so a
//! process killed mid-save leaves the previous checkpoint whole.

use crate::tensor::{ElemType, Tensor};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// What a checkpoint holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpoint {
    /// Parameter values by name.
    pub params: BTreeMap<String, Tensor>,
    /// First moments (SGD momentum buffers, Adam's m) by parameter name.
    pub m: BTreeMap<String, Vec<f64>>,
    /// Second moments (Adam's v) by parameter name.
    pub v: BTreeMap<String, Vec<f64>>,
    /// Optimizer steps taken.
    pub step: u64,
}

/// Little-endian bytes of one tensor in the dtype a checkpoint uses for it.
fn encode(values: &[f64], wide: bool) -> (Dtype, Vec<u8>) {
    if wide {
        let bytes = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        (Dtype::F64, bytes)
    } else {
        let bytes = values
            .iter()
            .flat_map(|&x| (x as f32).to_le_bytes())
            .collect();
        (Dtype::F32, bytes)
    }
}

/// Writes `c` to `path` atomically.
pub fn save(c: &Checkpoint, path: &Path) -> Result<(), String> {
    let shown = path.display();
    let mut owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, t) in &c.params {
        let wide = !matches!(
            t.elem,
            ElemType::F32 | ElemType::BF16 | ElemType::F16 | ElemType::FP8
        );
        let (dtype, bytes) = encode(&t.to_dense_values(), wide);
        owned.push((name.clone(), dtype, t.shape.clone(), bytes));
    }
    for (prefix, moments) in [("optimizer.m.", &c.m), ("optimizer.v.", &c.v)] {
        for (name, values) in moments {
            let (dtype, bytes) = encode(values, true);
            owned.push((format!("{prefix}{name}"), dtype, vec![values.len()], bytes));
        }
    }
    let mut views = Vec::with_capacity(owned.len());
    for (name, dtype, shape, bytes) in &owned {
        let view = TensorView::new(*dtype, shape.clone(), bytes)
            .map_err(|e| format!("cannot encode `{name}` for `{shown}`: {e}"))?;
        views.push((name.clone(), view));
    }
    let metadata: HashMap<String, String> = [("step".to_string(), c.step.to_string())]
        .into_iter()
        .collect();
    let bytes = safetensors::tensor::serialize(views, &Some(metadata))
        .map_err(|e| format!("cannot encode `{shown}`: {e}"))?;
    crate::io::atomic_write(path, &bytes)
}

/// Reads a checkpoint written by [`save`] (or any `.safetensors` file of parameters).
pub fn load(path: &Path) -> Result<Checkpoint, String> {
    let shown = path.display();
    let bytes =
        std::fs::read(path).map_err(|e| format!("cannot read checkpoint `{shown}`: {e}"))?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| format!("`{shown}` is not a readable .safetensors file: {e}"))?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("`{shown}` is not a readable .safetensors file: {e}"))?;
    let mut c = Checkpoint {
        step: meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get("step"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        ..Checkpoint::default()
    };
    for (name, view) in st.tensors() {
        let values = decode(&view).ok_or_else(|| {
            format!(
                "`{shown}`: entry `{name}` has an unsupported dtype {:?}",
                view.dtype()
            )
        })?;
        if let Some(p) = name.strip_prefix("optimizer.m.") {
            c.m.insert(p.to_string(), values);
        } else if let Some(p) = name.strip_prefix("optimizer.v.") {
            c.v.insert(p.to_string(), values);
        } else {
            let elem = if view.dtype() == Dtype::F64 {
                ElemType::F64
            } else {
                ElemType::F32
            };
            let t = Tensor::dense(elem, view.shape().to_vec(), values)
                .map_err(|e| format!("`{shown}`: entry `{name}`: {e}"))?;
            c.params.insert(name, t);
        }
    }
    Ok(c)
}

/// An entry's values as f64, for the float dtypes a checkpoint may hold.
fn decode(view: &TensorView) -> Option<Vec<f64>> {
    let data = view.data();
    Some(match view.dtype() {
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect(),
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect(),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_parameters_moments_and_step() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let mut c = Checkpoint {
            step: 42,
            ..Checkpoint::default()
        };
        c.params.insert(
            "W".into(),
            Tensor::dense(ElemType::F32, vec![2, 2], vec![0.5, -1.25, 3.0, 0.1]).unwrap(),
        );
        c.params.insert(
            "B".into(),
            Tensor::dense(ElemType::F64, vec![3], vec![0.1, 0.2, 0.3]).unwrap(),
        );
        c.m.insert("W".into(), vec![0.1, 0.2, 0.3, 0.4]);
        c.v.insert("W".into(), vec![1e-9, 2.0, 3.0, 4.0]);
        save(&c, &path).unwrap();
        assert_eq!(load(&path).unwrap(), c);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.safetensors");
        std::fs::write(&path, b"\xff\xff\xff\xff\xff\xff\xff\x7fnot a header").unwrap();
        assert!(load(&path).is_err());
        assert!(load(&dir.path().join("missing.safetensors")).is_err());
    }
}
