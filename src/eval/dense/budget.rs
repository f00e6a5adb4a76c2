//! What an equation may cost before it runs: the intermediates it would allocate against
//! `--max-memory`, and the work that decides whether it is split among threads.

use super::*;

/// Whether an equation is worth splitting among the `--threads` pool.
pub(super) fn split(
    d: &DenseEquation,
    values: &[Tensor],
    pool: Option<&rayon::ThreadPool>,
) -> bool {
    pool.is_some() && work(d, values) >= crate::plan::schedule::EQUATION_WORK.at as f64
}

/// An equation's work, in FLOPs: its plan's estimate plus, for each term a relation
/// multiplies, its tuples times the slice each adds (weighted 16: a scatter is bound by
/// memory, not arithmetic). Equations of less than 2²⁵ stay on the calling thread.
pub(super) fn work(d: &DenseEquation, values: &[Tensor]) -> f64 {
    let scatters: f64 = d
        .terms
        .iter()
        .filter_map(|c| {
            let f = c.sparse.as_ref()?;
            let (r, _) = tuples(&values.get(f.tensor)?.storage)?;
            let slice: f64 = c
                .out
                .iter()
                .filter(|v| !f.vars.contains(v))
                .map(|&v| c.extents[v] as f64)
                .product();
            Some(16.0 * r.len() as f64 * slice)
        })
        .sum();
    d.flops + scatters
}

/// That every factor is a dense array whose extents are the variables' and the
/// intermediates fit in `max_memory`; else why not.
pub(crate) fn fits(d: &DenseEquation, values: &[Tensor], max_memory: u64) -> Result<(), Declined> {
    let shaped = |f: &Factor| {
        let v = &values[f.tensor];
        matches!(v.storage, Storage::Dense(_)) && f.reads_shape(&v.shape, &d.extents, false)
    };
    if let Some(f) = d.terms.iter().flat_map(|c| &c.factors).find(|f| !shaped(f)) {
        return Err(Declined::NotAsPlanned(f.tensor));
    }
    // A shifted relation is seen through its tuples inside the variables' extents.
    let relation = |f: &Factor| {
        let v = &values[f.tensor];
        tuples(&v.storage).is_some() && f.reads_shape(&v.shape, &d.extents, true)
    };
    if let Some(f) = d
        .terms
        .iter()
        .flat_map(|c| &c.sparse)
        .find(|f| !relation(f))
    {
        return Err(Declined::NotAsPlanned(f.tensor));
    }
    match 8.0 * d.scratch <= max_memory as f64 {
        true => Ok(()),
        false => Err(Declined::Memory(8.0 * d.scratch)),
    }
}
