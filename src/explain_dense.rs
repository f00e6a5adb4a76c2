//! `tl explain` for a stratum of dense contractions: each equation's terms with their
//! contraction order and kernel, the FLOPs, what is fused into the pass over the output,
//! and where the result is stored (`plan::einsum` plans them).

use crate::explain::{order, statement, tables};
use crate::plan::einsum::{Contraction, DenseEquation, Expr};
use crate::semantics::{Checked, Equation, Family};
use std::fmt::Write;

/// The planned equations of a dense stratum, an equation planned in parts (`einsum::parts`)
/// quoted once.
pub(crate) fn dense(
    out: &mut String,
    (p, source, threads): (&Checked, &str, usize),
    plans: &[DenseEquation],
) {
    for (i, d) in plans.iter().enumerate() {
        let eq = &p.equations[d.equation];
        let same = |x: &&DenseEquation| x.equation == d.equation;
        let before = plans[..i].iter().filter(same).count();
        let of = plans.iter().filter(same).count();
        if before == 0 {
            let _ = writeln!(out, "  {}", statement(eq, source));
        }
        if of > 1 {
            let part = before + 1;
            let _ = writeln!(out, "   part {part} of {of} of its sum, planned alone:");
        }
        for (k, c) in d.terms.iter().enumerate() {
            let _ = writeln!(out, "    term {}: {}", k + 1, term(p, eq, c));
        }
        let _ = writeln!(out, "    {:.3e} FLOPs{}", d.flops, fused(p, eq, d));
        let scatters = d.terms.iter().any(|c| c.sparse.is_some());
        let runs = crate::plan::schedule::equation_text(d.flops, scatters, threads);
        let _ = writeln!(out, "    threads: {runs}");
        if let Some(line) = in_place(d) {
            let _ = writeln!(out, "    {line}");
        }
        tables(out, d, eq, "    ");
    }
}

/// A term's contraction order, then its kernel and blocking in brackets.
fn term(p: &Checked, eq: &Equation, c: &Contraction) -> String {
    let mut what: Vec<String> = c.path.iter().map(|path| order(p, c, path)).collect();
    if let Some(r) = &c.sparse {
        let mut tuples = format!("tuples of {}", p.tensors[r.tensor].name);
        if !c.finite.is_empty() {
            // Its zeros are numbers (`Contraction::finite`).
            let finite: Vec<&str> = c
                .finite
                .iter()
                .map(|&t| p.tensors[t].name.as_str())
                .collect();
            tuples += &format!(" (where {} finite; checked at run time)", finite.join(", "));
        }
        what.push(tuples);
    }
    let pairs = c.factors.len().saturating_sub(1);
    let kernel = match (&c.sparse, pairs) {
        (Some(_), _) => "tuple-by-tuple scatter".to_string(),
        (None, 0) => "read in place".to_string(),
        (None, n) => format!(
            "{n} {} GEMM{}",
            if c.single { "f32" } else { "f64" },
            if n == 1 { "" } else { "s" }
        ),
    };
    let mut chunk = match (c.chunk, c.out.first()) {
        (Some(rows), Some(&v)) => format!(", in blocks of {rows} {}", eq.vars[v].name),
        _ => String::new(),
    };
    if c.factors.len() > 2 {
        let largest = c.largest_intermediate();
        chunk.push_str(&format!(", largest intermediate {largest:.0} elements"));
    }
    format!("{} [{kernel}{chunk}]", what.join(" for each of the "))
}

/// What the pass over the output does besides the terms: the rest of the expression, a
/// sum over variables, how elements combine at their left-hand-side positions.
fn fused(p: &Checked, eq: &Equation, d: &DenseEquation) -> String {
    let mut fused = match (&d.expr, d.mask) {
        (Expr::Term(_), _) => String::new(),
        (_, Some(k)) => format!(
            ", the rest only where term {} is nonzero (its tuples)",
            k + 1
        ),
        _ => ", the rest in one pass over the output".to_string(),
    };
    if !d.summed.is_empty() {
        let names: Vec<&str> = d.summed.iter().map(|&v| eq.vars[v].name.as_str()).collect();
        fused.push_str(&format!(", then summed over {}", names.join(", ")));
    }
    let combined = match p.tensors[d.target].family {
        Family::Max => Some("kept where largest"),
        Family::Min => Some("kept where smallest"),
        _ => d.scatter.as_ref().map(|_| "added"),
    };
    if let Some(how) = combined {
        fused.push_str(&format!(
            ", each element {how} at its left-hand-side position"
        ));
    }
    fused
}

/// Where a result computed in a term's f32 buffer is stored, and what is applied there.
fn in_place(d: &DenseEquation) -> Option<String> {
    use crate::plan::einsum::InPlaceEpilogue;
    let at = d.in_place.as_ref()?;
    let then = match &at.epilogue {
        InPlaceEpilogue::Bare => "kept as it is".to_string(),
        InPlaceEpilogue::Normalize(kind, axis) => {
            format!("{kind:?} along axis {} in f32", axis + 1).to_lowercase()
        }
        InPlaceEpilogue::Rows => "the expression applied a row at a time".into(),
        InPlaceEpilogue::NormalizeRows(kind, axis, _) => format!(
            "its argument applied a row at a time, then {} along axis {} in f32",
            format!("{kind:?}").to_lowercase(),
            axis + 1
        ),
    };
    Some(format!(
        "stored in term {}'s f32 buffer, {then}",
        at.main + 1
    ))
}
