//! Combining values that land on one left-hand-side element (§7), and finishing a tensor.

use crate::semantics::{Family, Kind, TensorInfo};
use crate::tensor::{Sparse, Storage, Tensor};
use std::collections::BTreeMap;

/// Running values of one tensor while its equations are evaluated.
pub(super) enum Accumulator {
    /// Every element present; values add.
    Dense {
        /// Extents.
        shape: Vec<usize>,
        /// Row-major sums.
        values: Vec<f64>,
    },
    /// A sum whose elements are mostly 0, stored as its written positions and values (flat,
    /// combined in batches by sorting): memory follows the non-zeros, not the shape.
    Entries {
        /// Positions, `arity` per value, in the order written since the last batch.
        keys: Vec<u32>,
        /// One value per position.
        values: Vec<f64>,
        /// Axes.
        arity: usize,
        /// Values before this index are combined (sorted, distinct).
        combined: usize,
    },
    /// Only written elements; values combine per family, with a count for `avg=`.
    Map {
        /// Family.
        family: Family,
        /// Written elements.
        map: BTreeMap<Vec<u32>, (f64, u32)>,
    },
}

impl Accumulator {
    /// An empty accumulator shaped for `info`.
    pub(super) fn new(info: &TensorInfo) -> Accumulator {
        if info.kind != Kind::Bool && info.family == Family::Sum && !info.sparse_values {
            Accumulator::Dense {
                shape: info.shape.clone(),
                values: vec![0.0; info.shape.iter().product()],
            }
        } else {
            Accumulator::Map {
                family: info.family,
                map: BTreeMap::new(),
            }
        }
    }

    /// An accumulator for a sum tensor stored as its non-zero elements (the plan's choice for
    /// a large result of sparse products, `plan::Plan::sparse`).
    pub(super) fn entries(info: &TensorInfo) -> Accumulator {
        Accumulator::Entries {
            keys: Vec::new(),
            values: Vec::new(),
            arity: info.shape.len(),
            combined: 0,
        }
    }

    /// Adds one value at `index` (out-of-bounds writes are dropped: extents were checked).
    pub(super) fn combine(&mut self, index: &[usize], v: f64) {
        match self {
            Accumulator::Entries {
                keys,
                values,
                arity,
                combined,
            } => {
                keys.extend(index.iter().map(|&i| i as u32));
                values.push(v);
                // Most writes repeat a position: combining whenever the batch doubles keeps
                // memory near the distinct positions.
                if values.len() >= 2 * (*combined).max(1 << 16) {
                    let s =
                        Sparse::from_entries(*arity, std::mem::take(keys), std::mem::take(values));
                    *combined = s.len();
                    *keys = s.positions().iter().flatten().copied().collect();
                    *values = s.values().to_vec();
                }
            }
            Accumulator::Dense { shape, values } => {
                let mut off = 0usize;
                for (&i, &n) in index.iter().zip(shape.iter()) {
                    if i >= n {
                        return;
                    }
                    off = off * n + i;
                }
                values[off] += v;
            }
            Accumulator::Map { family, map } => {
                let key: Vec<u32> = index.iter().map(|&i| i as u32).collect();
                match map.get_mut(&key) {
                    None => {
                        map.insert(key, (v, 1));
                    }
                    Some((acc, n)) => {
                        *n += 1;
                        *acc = match family {
                            Family::Sum | Family::Avg => *acc + v,
                            Family::Max => acc.max(v),
                            Family::Min => acc.min(v),
                        };
                    }
                }
            }
        }
    }

    /// Adds every defined element of a tensor (its data, or a finished virtual slice).
    pub(super) fn combine_tensor(&mut self, t: &Tensor) {
        for (idx, v) in t.entries() {
            self.combine(&idx, v);
        }
    }

    /// The finished tensor: Boolean heads are stepped, `avg=` divided, values rounded.
    pub(super) fn finish(self, info: &TensorInfo) -> Tensor {
        match self {
            Accumulator::Entries {
                keys,
                values,
                arity,
                ..
            } => {
                let s = Sparse::from_entries(arity, keys, values);
                let rounded = s.values().iter().map(|&v| info.elem.round(v)).collect();
                Tensor {
                    elem: info.elem,
                    shape: info.shape.clone(),
                    storage: Storage::Sparse(
                        Sparse::from_sorted(s.positions().clone(), rounded).with_zeros(),
                    ),
                }
            }
            Accumulator::Dense { shape, values } => Tensor {
                elem: info.elem,
                shape,
                storage: Storage::Dense(crate::tensor::Dense::from_f64(info.elem, values)),
            },
            Accumulator::Map { map, .. } if info.kind == Kind::Bool => {
                let arity = info.shape.len();
                let mut flat = Vec::with_capacity(map.len() * arity);
                let mut count = 0;
                for (k, (v, _)) in map {
                    if v > 0.0 {
                        flat.extend_from_slice(&k);
                        count += 1;
                    }
                }
                Tensor::relation_flat(info.shape.clone(), flat, count)
            }
            Accumulator::Map { family, map } => {
                let mut out = if info.sparse_values {
                    Tensor::sparse(info.elem, info.shape.clone())
                } else {
                    Tensor::zeros(info.elem, info.shape.clone())
                };
                for (k, (v, n)) in map {
                    let idx: Vec<usize> = k.iter().map(|&i| i as usize).collect();
                    out.set(
                        &idx,
                        if family == Family::Avg {
                            v / n as f64
                        } else {
                            v
                        },
                    );
                }
                out
            }
        }
    }
}
