//! Queries (§10) resolved against a checked program, and the outputs list of a program.

use super::{Checked, Ctx, Domain, Output, Query, QueryIndex, TensorInfo};
use crate::diagnostics::{codes, Diagnostic};
use crate::syntax::ast::{Access, Brackets, Index, StmtKind};
use std::collections::BTreeMap;

/// Resolves a query pattern such as `Ancestor(Alice, x)` against a checked program.
pub fn resolve_query(checked: &Checked, access: &Access) -> Result<Query, Diagnostic> {
    let Some(t) = checked.tensor_id(&access.name.text) else {
        return Err(Diagnostic::error(
            codes::UNKNOWN_TENSOR,
            access.name.span,
            format!("unknown tensor `{}`", access.name.text),
        ));
    };
    resolve(
        &checked.tensors[t],
        t,
        &checked.domains,
        &checked.scalars,
        access,
    )
}

fn resolve(
    info: &TensorInfo,
    t: usize,
    domains: &[Domain],
    scalars: &BTreeMap<String, f64>,
    access: &Access,
) -> Result<Query, Diagnostic> {
    let rank = info.shape.len();
    let mut r = Resolving {
        info,
        domains,
        scalars,
        names: Vec::new(),
        warnings: Vec::new(),
    };
    let pattern: Vec<QueryIndex> = if access.brackets == Brackets::None {
        (0..rank).map(|ax| r.var(&format!("#{ax}"))).collect()
    } else {
        if access.indices.len() != rank {
            return Err(Diagnostic::error(
                codes::ARITY,
                access.span,
                format!(
                    "`{}` has {rank} indices, but the query gives {}",
                    info.name,
                    access.indices.len()
                ),
            ));
        }
        let valued = info.kind != super::Kind::Bool;
        let mut out = Vec::with_capacity(rank);
        for (ax, idx) in access.indices.iter().enumerate() {
            let resolved = r.index(ax, idx)?;
            // A fact absent from a relation is false; a position outside a real tensor is
            // a mistake, as NumPy's IndexError says.
            if valued && resolved == QueryIndex::Missing {
                return Err(r.outside(ax, idx));
            }
            out.push(resolved);
        }
        out
    };
    Ok(Query {
        tensor: t,
        pattern,
        paren: access.brackets != Brackets::Square,
        span: access.span,
        warnings: r.warnings,
    })
}

/// A query's indices being resolved against its tensor.
struct Resolving<'a> {
    info: &'a TensorInfo,
    domains: &'a [Domain],
    scalars: &'a BTreeMap<String, f64>,
    /// The query's variables, in order of first use.
    names: Vec<String>,
    warnings: Vec<Diagnostic>,
}

impl Resolving<'_> {
    fn var(&mut self, n: &str) -> QueryIndex {
        match self.names.iter().position(|x| x == n) {
            Some(k) => QueryIndex::Var(k),
            None => {
                self.names.push(n.to_string());
                QueryIndex::Var(self.names.len() - 1)
            }
        }
    }

    /// Index `idx` at axis `ax`: a variable, a position, or `Missing` where the tensor has
    /// no such position or symbol.
    fn index(&mut self, ax: usize, idx: &Index) -> Result<QueryIndex, Diagnostic> {
        let dom = &self.domains[self.info.domains[ax]];
        let symbol = |s: &str| match dom.position(s) {
            Some(p) => QueryIndex::Fixed(p),
            None => QueryIndex::Missing,
        };
        let offset = self.info.offsets.get(ax).copied().unwrap_or(0);
        let extent = self.info.shape[ax];
        let position = |v: i64| {
            // An open column numbers the value, which evaluation may yet compute.
            if let Some(table) = &dom.table {
                return table
                    .intern(v)
                    .map_or(QueryIndex::Missing, |h| QueryIndex::Fixed(h as usize));
            }
            let p = v.saturating_sub(offset);
            if p >= 0 && (p as usize) < extent {
                QueryIndex::Fixed(p as usize)
            } else {
                QueryIndex::Missing
            }
        };
        let unsupported = |span| {
            Diagnostic::error(
                codes::QUERY,
                span,
                "a query index must be a variable, an integer or a symbol",
            )
        };
        Ok(match idx {
            Index::Name(n) => {
                let scalar = self.scalars.get(&n.text).filter(|v| v.fract() == 0.0);
                match scalar {
                    Some(&v) => position(v as i64),
                    None if n.text.starts_with(char::is_uppercase) => symbol(&n.text),
                    None => {
                        let like = dom
                            .symbols
                            .iter()
                            .find(|s| super::constant_like::spelt_like(s, &n.text));
                        if let Some(constant) = like {
                            let does = "this asks for every value of it";
                            self.warnings
                                .push(super::constant_like::variable_like_constant(
                                    (&n.text, n.span),
                                    (constant, ax),
                                    does,
                                ));
                        }
                        self.var(&n.text)
                    }
                }
            }
            Index::Str(s, _) => symbol(s),
            Index::Real(v, _) if dom.real => symbol(&super::real_text(*v)),
            Index::Int(p, _) if dom.real => symbol(&p.to_string()),
            Index::Int(p, _) if !dom.symbolic => position(*p),
            Index::Arith(..) if !dom.symbolic => match constant(idx) {
                Some(v) => position(v),
                None => return Err(unsupported(idx.span())),
            },
            other => return Err(unsupported(other.span())),
        })
    }

    /// The error for a real tensor's position or symbol that it does not have.
    fn outside(&self, ax: usize, idx: &Index) -> Diagnostic {
        let what = match idx {
            Index::Int(p, _) => format!("position {p}"),
            Index::Name(n) if self.scalars.contains_key(&n.text) => {
                format!("`{}` (= {})", n.text, self.scalars[&n.text])
            }
            Index::Name(n) => format!("the symbol `{}`", n.text),
            Index::Str(s, _) => format!("the symbol {s:?}"),
            Index::Real(v, _) => format!("the value {v}"),
            other => format!("{other:?}"),
        };
        let info = self.info;
        Diagnostic::error(
            codes::QUERY,
            idx.span(),
            format!("{what} is outside axis {} of `{}`", ax + 1, info.name),
        )
        .with_note(format!("`{}` has shape {:?}", info.name, info.shape))
    }
}

impl Ctx<'_> {
    /// Queries and writes in source order.
    pub(super) fn outputs(&mut self, tensors: &[TensorInfo]) -> Vec<Output> {
        let program = self.program;
        let scalars: BTreeMap<String, f64> =
            self.scalars.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let mut out = Vec::new();
        for st in &program.statements {
            match &st.kind {
                StmtKind::Query(a) => {
                    let Some(&t) = self.by_name.get(&a.name.text) else {
                        continue;
                    };
                    match resolve(&tensors[t], t, &self.domains, &scalars, a) {
                        Ok(mut q) => {
                            self.warnings.append(&mut q.warnings);
                            out.push(Output::Query(q))
                        }
                        Err(d) => self.diags.push(d),
                    }
                }
                StmtKind::FileWrite { path, name } => {
                    let Some(&t) = self.by_name.get(&name.text) else {
                        continue;
                    };
                    out.push(Output::Write {
                        path: self.input.base_dir.join(path),
                        tensor: t,
                        span: st.span,
                    });
                }
                _ => {}
            }
        }
        out
    }
}

/// The value of a constant written with arithmetic (`-3`).
fn constant(i: &Index) -> Option<i64> {
    match i {
        Index::Int(v, _) => Some(*v),
        Index::Arith(a, op, b, _) => super::IndexFn::Arith(
            Box::new(super::IndexFn::Const(constant(a)?)),
            *op,
            Box::new(super::IndexFn::Const(constant(b)?)),
        )
        .eval(&[]),
        _ => None,
    }
}
