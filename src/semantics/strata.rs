//! Kinds (Boolean, integer, real), accumulation families, strata (SCCs), stratification of
//! negation, and rule safety (§4, §7, §8, §9).

use super::lower::Lowered;
use super::{Ctx, Family, Func, Kind, Node, Stratum, TensorInfo};
use crate::diagnostics::{codes, Diagnostic};
use crate::functions::Builtin;
use crate::io::RawData;
use crate::syntax::ast::{BinOp, StmtKind};
use crate::tensor::ElemType;
use petgraph::graph::DiGraph;

impl Ctx<'_> {
    /// Boolean where written with parentheses; integer where every operand is Boolean or
    /// integer and no real operation occurs; real otherwise.
    pub(super) fn infer_kinds(&mut self, eqs: &[Lowered]) -> Vec<Kind> {
        let program = self.program;
        let mut kinds: Vec<Kind> = (0..self.tensors.len())
            .map(|t| {
                let d = &self.tensors[t];
                if d.is_bool() {
                    return Kind::Bool;
                }
                if let Some(e) = d.elem {
                    return if e.is_integral() {
                        Kind::Int
                    } else {
                        Kind::Real
                    };
                }
                let literal = d.sources.iter().any(|&s| {
                    matches!(
                        program.statements[s].kind,
                        StmtKind::Literal { .. } | StmtKind::Scalar { .. }
                    )
                });
                let real_data =
                    self.sources
                        .iter()
                        .filter(|s| s.tensor == t)
                        .any(|s| match &*s.raw {
                            RawData::Dense { elem, .. } => !elem.is_integral(),
                            RawData::Table(_) => true,
                            RawData::Words(_) => false,
                        });
                if literal || real_data || !d.elements.is_empty() || d.init.is_some() {
                    Kind::Real
                } else {
                    Kind::Int
                }
            })
            .collect();
        loop {
            let mut changed = false;
            for (eq, _) in eqs {
                if kinds[eq.target] == Kind::Int
                    && (eq.family == Family::Avg || !integral(&eq.rhs, &|t| kinds[t]))
                {
                    kinds[eq.target] = Kind::Real;
                    changed = true;
                }
            }
            if !changed {
                return kinds;
            }
        }
    }

    /// The accumulation family of each tensor; mixing families is an error (§7).
    pub(super) fn families(&mut self, eqs: &[Lowered]) -> Vec<Family> {
        let mut fams: Vec<Option<(Family, crate::diagnostics::Span)>> =
            vec![None; self.tensors.len()];
        let mut counts = vec![0usize; self.tensors.len()];
        for (eq, _) in eqs {
            counts[eq.target] += 1;
            match fams[eq.target] {
                None => fams[eq.target] = Some((eq.family, eq.span)),
                Some((f, first)) if f != eq.family => self.diags.push(
                    Diagnostic::error(
                        codes::MIXED_ACCUMULATION,
                        eq.span,
                        format!("`{}` mixes accumulation operators", self.tensors[eq.target].name),
                    )
                    .with_secondary(first, "first defined with another operator here")
                    .with_note("all equations of one tensor use the same family: `=`/`+=`, `max=` or `min=`"),
                ),
                _ => {}
            }
        }
        for (eq, _) in eqs {
            if eq.family == Family::Avg && counts[eq.target] > 1 {
                self.diags.push(Diagnostic::error(
                    codes::MIXED_ACCUMULATION,
                    eq.span,
                    format!("`avg=` is allowed only for a tensor with a single equation, but `{}` has {}", self.tensors[eq.target].name, counts[eq.target]),
                ));
            }
        }
        fams.into_iter()
            .map(|f| f.map(|(f, _)| f).unwrap_or(Family::Sum))
            .collect()
    }

    /// Strongly connected components in evaluation order; recursion through `not` is an error
    /// that prints the cycle.
    pub(super) fn stratify(&mut self, eqs: &[Lowered]) -> Vec<Stratum> {
        let n = self.tensors.len();
        let mut g = DiGraph::<usize, bool>::with_capacity(n, eqs.len());
        let nodes: Vec<_> = (0..n).map(|t| g.add_node(t)).collect();
        for (eq, meta) in eqs {
            for &(src, negated, _) in &meta.reads {
                g.add_edge(nodes[src], nodes[eq.target], negated);
            }
        }
        // Kosaraju's passes are iterative (petgraph's Tarjan recurses once per node of a
        // chain, and a program of 100,000 chained equations overflowed the stack).
        let mut sccs = petgraph::algo::kosaraju_scc(&g);
        sccs.reverse();
        let mut by_target: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, (e, _)) in eqs.iter().enumerate() {
            by_target[e.target].push(i);
        }
        let mut strata = Vec::new();
        for scc in sccs {
            let mut tensors: Vec<usize> = scc.iter().map(|&ix| g[ix]).collect();
            tensors.sort();
            let recursive = tensors.len() > 1 || g.contains_edge(scc[0], scc[0]);
            let mut equations: Vec<usize> = tensors
                .iter()
                .flat_map(|&t| by_target[t].iter().copied())
                .collect();
            equations.sort();
            if recursive {
                for &i in &equations {
                    let (eq, meta) = &eqs[i];
                    for &(src, negated, span) in &meta.reads {
                        if negated && tensors.contains(&src) {
                            let cycle = self.cycle(eqs, &tensors, ("not", src), eq.target);
                            self.diags.push(
                                Diagnostic::error(
                                    codes::NOT_STRATIFIED,
                                    span,
                                    format!("recursion through negation: `{}` depends on `not {}`", self.tensors[eq.target].name, self.tensors[src].name),
                                )
                                .with_label("negated here")
                                .with_note(format!("cycle: {cycle}"))
                                .with_note("a tensor may only be negated once it is fully computed, in an earlier stratum"),
                            );
                        }
                    }
                    // Relations only: a real recursion iterates to its fixpoint from the
                    // data, comparisons included (a Hopfield network's `S[j] W[i, j] > 0`).
                    for &(src, span) in meta.compared.iter().filter(|_| eq.bool_head) {
                        if tensors.contains(&src) {
                            let cycle = self.cycle(eqs, &tensors, ("compared", src), eq.target);
                            self.diags.push(
                                Diagnostic::error(
                                    codes::NOT_STRATIFIED,
                                    span,
                                    format!("recursion through a comparison: `{}` depends on a comparison of `{}`", self.tensors[eq.target].name, self.tensors[src].name),
                                )
                                .with_label("compared here")
                                .with_note(format!("cycle: {cycle}"))
                                .with_note("a comparison can turn from true to false as what it reads grows, as `not` can (`R(x) x > 0` holds where `R(x)` is false): compare a tensor once it is fully computed, in an earlier stratum, or join it as an atom (`R(x), x > 0`)"),
                            );
                        }
                    }
                }
            }
            strata.push(Stratum {
                tensors,
                equations,
                recursive,
            });
        }
        strata
    }

    /// The dependency path `target ← not src ← … ← target` (`how` is the word before `src`:
    /// `not`, or `compared`), by breadth-first search.
    fn cycle(
        &self,
        eqs: &[Lowered],
        scc: &[usize],
        (how, src): (&str, usize),
        target: usize,
    ) -> String {
        let mut prev: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
        let mut queue = std::collections::VecDeque::from([target]);
        let mut seen = vec![target];
        while let Some(t) = queue.pop_front() {
            if t == src {
                break;
            }
            for (eq, meta) in eqs.iter().filter(|(e, _)| e.target == t) {
                for &(r, _, _) in &meta.reads {
                    if scc.contains(&r) && !seen.contains(&r) {
                        seen.push(r);
                        prev.insert(r, eq.target);
                        queue.push_back(r);
                    }
                }
            }
        }
        let name = |t: usize| self.tensors[t].name.clone();
        let mut parts = vec![name(target), format!("{how} {}", name(src))];
        let mut cur = src;
        while let Some(&p) = prev.get(&cur) {
            parts.push(name(p));
            cur = p;
        }
        if parts.last() != Some(&name(target)) {
            parts.push(name(target));
        }
        parts.join(" ← ")
    }

    /// Every head variable of a rule must occur in a positive body atom (§8).
    pub(super) fn check_safety(&mut self, eqs: &[Lowered]) {
        for (eq, meta) in eqs {
            if !eq.bool_head {
                continue;
            }
            let mut safe = meta.bound_positively.clone();
            safe.resize(eq.vars.len(), false);
            // A variable equal to a value of safe variables is safe (`n = Kids[x]`).
            let mut grew = true;
            while grew {
                grew = false;
                for (v, deps) in &meta.equalities {
                    if !safe[*v] && deps.iter().all(|&d| safe.get(d).copied().unwrap_or(false)) {
                        safe[*v] = true;
                        grew = true;
                    }
                }
            }
            for &v in &eq.loop_vars {
                if !safe[v] {
                    self.diags.push(
                        Diagnostic::error(
                            codes::UNSAFE,
                            eq.vars[v].span,
                            format!("unsafe variable `{}` in rule for `{}`", eq.vars[v].name, self.tensors[eq.target].name),
                        )
                        .with_label("not bound by a positive body atom")
                        .with_secondary(meta.head_span, "in this head")
                        .with_note("every head variable must occur in a positive body atom, be compared `==` with a constant, or be bound to a value with `=`"),
                    );
                }
            }
        }
    }

    /// Resolved per-tensor information, with shapes from data (extents are finished later).
    pub(super) fn tensor_infos(
        &mut self,
        kinds: &[Kind],
        families: &[Family],
        eqs: &[Lowered],
    ) -> Vec<TensorInfo> {
        let program = self.program;
        let mut has_eqs = vec![false; self.tensors.len()];
        for (e, _) in eqs {
            has_eqs[e.target] = true;
        }
        let mut dense_sources = vec![false; self.tensors.len()];
        for s in self.sources.iter() {
            if matches!(*s.raw, RawData::Dense { .. }) {
                dense_sources[s.tensor] = true;
            }
        }
        (0..self.tensors.len())
            .map(|t| {
                let d = &self.tensors[t];
                let kind = kinds[t];
                let elem = match kind {
                    Kind::Bool => ElemType::Bool,
                    Kind::Int => d.elem.unwrap_or(ElemType::Int),
                    Kind::Real => d.elem.unwrap_or(self.input.settings.real),
                };
                let has_eqs = has_eqs[t];
                let dense_data = d.sources.iter().any(|&s| {
                    matches!(
                        program.statements[s].kind,
                        StmtKind::Literal { .. } | StmtKind::Scalar { .. }
                    )
                }) || dense_sources[t];
                let sparse_values = kind != Kind::Bool
                    && (matches!(families[t], Family::Max | Family::Min)
                        || (!has_eqs && !dense_data && d.declared.is_none() && d.init.is_none()));
                TensorInfo {
                    name: d.name.clone(),
                    kind,
                    elem,
                    domains: (0..d.rank()).map(|ax| self.axis_domain(t, ax)).collect(),
                    shape: self.data_shape[t].clone(),
                    offsets: (0..d.rank()).map(|ax| self.axis_offset(t, ax)).collect(),
                    family: families[t],
                    sparse_values,
                    span: d.span,
                    declared: d.declared.map(|s| program.statements[s].span),
                }
            })
            .collect()
    }
}

/// Whether `a op b` divides integers (`%` or `//` of two integral operands) by a divisor
/// that may be 0: it is nothing there, on every engine (docs/language.md, §5.1 choice); a
/// real `%` by 0 is NaN, as NumPy's `fmod` is.
pub(crate) fn divides_integers(
    op: BinOp,
    (a, b): (&Node, &Node),
    kinds: &dyn Fn(usize) -> Kind,
) -> bool {
    let nonzero = matches!(b.inside_empty_sums(), Node::Const(c) if c.value() != 0.0);
    matches!(op, BinOp::Rem | BinOp::Quot) && !nonzero && integral(a, kinds) && integral(b, kinds)
}

/// Whether a right-hand side keeps integer values exact (§4).
pub(crate) fn integral(n: &Node, kinds: &dyn Fn(usize) -> Kind) -> bool {
    match n {
        Node::Const(c) => c.as_int().is_some(),
        Node::Var(_) => true,
        Node::Read { tensor, .. } => kinds(*tensor) != Kind::Real,
        Node::Sum { body, .. } | Node::Neg(body) | Node::Not(body) => integral(body, kinds),
        Node::Product(fs) => fs.iter().all(|(div, f)| !div && integral(f, kinds)),
        Node::Binary(op, a, b) => *op != BinOp::Pow && integral(a, kinds) && integral(b, kinds),
        Node::Compare(..) => true,
        Node::Call(Func::Builtin(b), args) => {
            matches!(
                b,
                Builtin::Step | Builtin::Relu | Builtin::Abs | Builtin::Max | Builtin::Min
            ) && args.iter().all(|a| integral(a, kinds))
        }
        Node::Call(Func::User(_), _) | Node::Normalize(..) => false,
        Node::Concat { arg, .. } => integral(arg, kinds),
    }
}
