//! Data: literals, scalars, facts, element facts, files and bindings, turned into tensors of
//! their final shapes, with errors that name the file and line of a bad row (§11).

use super::names::{element_value, IndexName};
use super::{number_text, real_text, Ctx, IndexFn, Kind, TensorInfo};
use crate::diagnostics::{codes, Diagnostic, Span};
use crate::io::RawData;
use crate::syntax::ast::*;
use crate::tensor::{worth_storing_sparsely, ElemType, Sparse, Storage, Tensor};
use std::collections::HashMap;

impl<'a> Ctx<'a> {
    /// Value of a constant index on axis `ax` of tensor `t`: an integer (`-3`, `2 * N`) or
    /// a symbol's position. [`Ctx::axis_offset`] turns a value into a position.
    pub(super) fn const_position(
        &mut self,
        t: usize,
        ax: usize,
        idx: &Index,
    ) -> Result<i64, Diagnostic> {
        let numbered = self.domains[self.axis_domain(t, ax)].real;
        match idx {
            Index::Real(v, span) => self.real_position(t, ax, *v, *span),
            Index::Int(..) | Index::Arith(..) if numbered => {
                match super::domains::int_constant(idx) {
                    Some(v) => self.symbol_position(t, ax, &v.to_string(), idx.span()),
                    None => Err(Diagnostic::error(
                        codes::OUT_OF_DOMAIN,
                        idx.span(),
                        "this constant overflows 64 bits or divides by zero",
                    )),
                }
            }
            Index::Int(v, span) => {
                if self.domains[self.axis_domain(t, ax)].symbolic {
                    return Err(Diagnostic::error(
                        codes::TYPE,
                        *span,
                        format!(
                            "axis {} of `{}` holds symbols, not integers",
                            ax + 1,
                            self.tensors[t].name
                        ),
                    ));
                }
                Ok(*v)
            }
            Index::Str(s, span) => self.symbol_position(t, ax, s, *span),
            Index::Name(n) => match self.index_name(&n.text) {
                IndexName::Const(v) if self.domains[self.axis_domain(t, ax)].symbolic => {
                    Err(Diagnostic::error(
                        codes::TYPE,
                        n.span,
                        format!(
                            "axis {} of `{}` holds symbols, but `{}` is the integer constant {v}",
                            ax + 1,
                            self.tensors[t].name,
                            n.text
                        ),
                    )
                    .with_note(format!("write \"{}\" for the symbol", n.text)))
                }
                IndexName::Const(v) => Ok(v),
                IndexName::Symbol => self.symbol_position(t, ax, &n.text, n.span),
                IndexName::Var => Err(Diagnostic::error(
                    codes::FORM,
                    n.span,
                    format!("a fact must be ground, but `{}` is a variable", n.text),
                )
                .with_note(format!(
                    "constants are capitalised: write `{}` or \"{}\" for a symbol; or write a rule (`H(x) :- B(x).`) to derive facts for every value",
                    capitalised(&n.text),
                    n.text
                ))),
            },
            Index::Arith(_, _, _, span) if self.domains[self.axis_domain(t, ax)].symbolic => {
                Err(Diagnostic::error(
                    codes::TYPE,
                    *span,
                    format!(
                        "index arithmetic on axis {} of `{}`, which holds {}",
                        ax + 1,
                        self.tensors[t].name,
                        if self.domains[self.axis_domain(t, ax)].real {
                            "reals: write the value"
                        } else {
                            "symbols"
                        }
                    ),
                ))
            }
            Index::Arith(a, op, b, span) => {
                let a = self.const_position(t, ax, a)?;
                let b = self.const_position(t, ax, b)?;
                IndexFn::Arith(Box::new(IndexFn::Const(a)), *op, Box::new(IndexFn::Const(b)))
                    .eval(&[])
                    .ok_or_else(|| {
                        Diagnostic::error(
                            codes::OUT_OF_DOMAIN,
                            *span,
                            "this constant overflows 64 bits or divides by zero",
                        )
                    })
            }
            other => Err(Diagnostic::error(
                codes::FORM,
                other.span(),
                "a fact's indices must be constants",
            )),
        }
    }

    /// The position of symbol `s` on axis `ax` of `t`; E0203 where the axis lacks it.
    fn symbol_position(
        &mut self,
        t: usize,
        ax: usize,
        s: &str,
        span: Span,
    ) -> Result<i64, Diagnostic> {
        let d = self.axis_domain(t, ax);
        self.symbol_index(d, s).map(|p| p as i64).ok_or_else(|| {
            Diagnostic::error(
                codes::OUT_OF_DOMAIN,
                span,
                format!("`{s}` is not a symbol of this axis"),
            )
        })
    }

    /// The position of real value `v` on axis `ax` of `t`, numbered like a symbol; E0104
    /// where the axis holds symbols or integers.
    fn real_position(
        &mut self,
        t: usize,
        ax: usize,
        v: f64,
        span: Span,
    ) -> Result<i64, Diagnostic> {
        let d = self.axis_domain(t, ax);
        if self.domains[d].real {
            return self.symbol_position(t, ax, &real_text(v), span);
        }
        Err(Diagnostic::error(
            codes::TYPE,
            span,
            format!(
                "axis {} of `{}` holds {}, not reals",
                ax + 1,
                self.tensors[t].name,
                if self.domains[d].symbolic {
                    "symbols"
                } else {
                    "integers"
                }
            ),
        ))
    }

    /// The indices of tensor `t`'s facts and element facts (`R(-3, 4).`, `W[2] = 0.5`).
    pub(super) fn constant_indices(&self, t: usize) -> Vec<&'a [Index]> {
        let program = self.program;
        let d = &self.tensors[t];
        d.facts
            .iter()
            .chain(&d.elements)
            .filter_map(|&si| match &program.statements[si].kind {
                StmtKind::Fact(a) => Some(&a.indices[..]),
                StmtKind::Equation { lhs, .. } => Some(&lhs.indices[..]),
                _ => None,
            })
            .collect()
    }

    /// Extent of each axis as given by data and declarations alone.
    pub(super) fn data_extents(&mut self) {
        let program = self.program;
        for st in &program.statements {
            if let StmtKind::Domain {
                name,
                def: DomainDef::Symbols(syms),
            } = &st.kind
            {
                let node = self.named_domains[&name.text].node;
                let root = self.uf.find(node);
                if let Some(&d) = self.domain_of_root.get(&root) {
                    self.declared_symbols.insert(d, syms.len());
                }
            }
        }
        for t in 0..self.tensors.len() {
            let (mut shape, given) = self.given_extents(t);
            let offsets: Vec<i64> = (0..shape.len()).map(|ax| self.axis_offset(t, ax)).collect();
            let too_far = self.widen_by_data(t, &mut shape, &given, &offsets);
            self.apply_declaration(t, &mut shape);
            self.check_positions(t, &shape, too_far, &offsets);
            self.data_shape.push(shape);
        }
        self.share_relation_extents();
        self.size_implicit_domains();
    }

    /// The extents known before any data: a symbolic axis has its symbols, an open one no
    /// bound; and which axes those are.
    fn given_extents(&self, t: usize) -> (Vec<usize>, Vec<bool>) {
        let rank = self.tensors[t].rank();
        let mut shape = vec![0usize; rank];
        let mut given = vec![false; rank];
        for ax in 0..rank {
            let d = self.axis_domain(t, ax);
            if self.domains[d].symbolic {
                shape[ax] = self.domains[d].symbols.len();
                given[ax] = true;
            } else if self.domains[d].is_open() {
                // No extent: any handle the table gives fits (`open.rs`).
                shape[ax] = crate::tensor::MAX_EXTENT;
                given[ax] = true;
            }
        }
        (shape, given)
    }

    /// Widens the other axes to every position data write (facts, element statements,
    /// files, literals); returns the first constant too far above its column's offset.
    fn widen_by_data(
        &mut self,
        t: usize,
        shape: &mut [usize],
        given: &[bool],
        offsets: &[i64],
    ) -> Option<(Span, i64, usize)> {
        let program = self.program;
        let rank = shape.len();
        let mut too_far = None;
        for idx in self.constant_indices(t) {
            for (ax, i) in idx.iter().enumerate().take(rank) {
                if let Ok(v) = self.const_position(t, ax, i) {
                    let p = v.saturating_sub(offsets[ax]);
                    if p >= crate::tensor::MAX_EXTENT as i64 && too_far.is_none() {
                        too_far = Some((i.span(), v, ax));
                    }
                    if !given[ax] && p >= 0 {
                        shape[ax] = shape[ax].max((p as usize).saturating_add(1));
                    }
                }
            }
        }
        for s in self.sources.iter().filter(|s| s.tensor == t) {
            match &*s.raw {
                RawData::Dense { shape: ds, .. } => {
                    for (ax, &n) in ds.iter().enumerate().take(rank) {
                        if !given[ax] {
                            shape[ax] = shape[ax].max(n);
                        }
                    }
                }
                RawData::Table(rows) => {
                    for r in rows.rows() {
                        for (ax, f) in r.fields().enumerate().take(rank) {
                            if let (false, Ok(v)) = (given[ax], f.parse::<i64>()) {
                                let p = v.saturating_sub(offsets[ax]);
                                if p >= 0 {
                                    shape[ax] = shape[ax].max((p as usize).saturating_add(1));
                                }
                            }
                        }
                    }
                }
                RawData::Words(w) => {
                    if rank == 2 && !given[0] {
                        shape[0] = shape[0].max(w.len());
                    }
                }
            }
        }
        for si in self.tensors[t].sources.clone() {
            if let StmtKind::Literal { value, .. } = &program.statements[si].kind {
                for (ax, &n) in value.shape.iter().enumerate().take(rank) {
                    if !given[ax] {
                        shape[ax] = shape[ax].max(n);
                    }
                }
            }
        }
        for si in self.tensors[t].sources.clone() {
            if let StmtKind::Literal { value, .. } = &program.statements[si].kind {
                for (ax, &n) in value.shape.iter().enumerate().take(rank) {
                    if !given[ax] {
                        shape[ax] = shape[ax].max(n);
                    }
                }
            }
        }
        too_far
    }

    /// A declared extent replaces the data's; data past it (or dense data short of it) is
    /// an error.
    fn apply_declaration(&mut self, t: usize, shape: &mut [usize]) {
        let program = self.program;
        let rank = shape.len();
        if let Some(si) = self.tensors[t].declared {
            if let StmtKind::Declaration { dims, name, .. } = &program.statements[si].kind {
                for (ax, dim) in dims.iter().enumerate().take(rank) {
                    let n = match dim {
                        Dim::Size(n, _) => Some(*n),
                        Dim::Named(dn) => self.named_domains.get(&dn.text).and_then(|d| d.size),
                    };
                    if let Some(n) = n {
                        let has_data = !self.tensors[t].sources.is_empty()
                            || !self.tensors[t].facts.is_empty();
                        // Facts and tuple files may leave the last positions unused;
                        // dense data must fill the declared extent exactly.
                        let dense = self.tensors[t].sources.iter().any(|&s| {
                            matches!(program.statements[s].kind, StmtKind::Literal { .. })
                        }) || self
                            .sources
                            .iter()
                            .any(|s| s.tensor == t && matches!(*s.raw, RawData::Dense { .. }));
                        let wrong = shape[ax] > n || (dense && shape[ax] != n);
                        if has_data && wrong && shape[ax] != 0 {
                            let at = self.tensors[t]
                                .sources
                                .first()
                                .map(|&s| program.statements[s].span)
                                .unwrap_or(self.tensors[t].span);
                            self.diags.push(Diagnostic::error(
                                codes::DECLARATION,
                                at,
                                format!("data for `{}` has extent {} on axis {} but the declaration says {n}", name.text, shape[ax], ax + 1),
                            ).with_secondary(dim_span(dim), "declared here"));
                        }
                        shape[ax] = n;
                    }
                }
            }
        }
    }

    /// An index past the largest supported position is an error, named at the constant
    /// that put it there where there is one.
    fn check_positions(
        &mut self,
        t: usize,
        shape: &[usize],
        too_far: Option<(Span, i64, usize)>,
        offsets: &[i64],
    ) {
        if let (Some((span, v, ax)), true) = (
            too_far,
            shape.iter().any(|&n| n > crate::tensor::MAX_EXTENT),
        ) {
            let low = offsets[ax];
            self.diags.push(
                Diagnostic::error(
                    codes::OUT_OF_DOMAIN,
                    span,
                    format!("`{v}` is too far above the smallest value of this column ({low})"),
                )
                .with_note(format!(
                    "the values of one integer column may span at most {} consecutive integers",
                    crate::tensor::MAX_EXTENT
                )),
            );
        } else if shape.iter().any(|&n| n > crate::tensor::MAX_EXTENT) {
            let span = self.tensors[t].span;
            self.diags.push(Diagnostic::error(
                codes::OUT_OF_DOMAIN,
                span,
                format!(
                    "`{}` has an index above the largest supported position ({})",
                    self.tensors[t].name,
                    crate::tensor::MAX_EXTENT - 1
                ),
            ));
        }
    }

    /// An axis declared over a domain named only in declarations (`Pos : real[Position, 32]`)
    /// takes the widest extent that data gives any axis of that domain.
    fn size_implicit_domains(&mut self) {
        let program = self.program;
        let mut widest: HashMap<usize, usize> = HashMap::new();
        for t in 0..self.tensors.len() {
            for ax in 0..self.tensors[t].rank() {
                let root = self.uf.root(self.axis_base[t] + ax);
                let n = self
                    .data_shape
                    .get(t)
                    .and_then(|s| s.get(ax))
                    .copied()
                    .unwrap_or(0);
                let w = widest.entry(root).or_insert(0);
                *w = (*w).max(n);
            }
        }
        for t in 0..self.tensors.len() {
            let Some(si) = self.tensors[t].declared else {
                continue;
            };
            let StmtKind::Declaration { dims, .. } = &program.statements[si].kind else {
                continue;
            };
            // Axes beyond the tensor's rank (a declaration of another rank, already
            // reported) have no slot.
            let rank = self.tensors[t].rank();
            for (ax, dim) in dims.iter().enumerate().take(rank) {
                let Dim::Named(n) = dim else {
                    continue;
                };
                if !self.named_domains.get(&n.text).is_some_and(|d| d.implicit) {
                    continue;
                }
                let root = self.uf.root(self.axis_base[t] + ax);
                if let Some(x) = self.data_shape.get_mut(t).and_then(|s| s.get_mut(ax)) {
                    if *x == 0 {
                        *x = widest.get(&root).copied().unwrap_or(0);
                    }
                }
            }
        }
    }

    /// Integer axes of relations given by data (facts, files) that share a domain get the
    /// largest extent among them: `Even(0). Even(2). Odd(1). Odd(3).` read at `d = 3` is
    /// false, not out of range (docs/language.md, "Extents of relations").
    fn share_relation_extents(&mut self) {
        let mut widest: HashMap<usize, usize> = HashMap::new();
        let mut axes = Vec::new();
        for t in 0..self.tensors.len() {
            let d = &self.tensors[t];
            if !d.is_bool() || d.declared.is_some() || !d.equations.is_empty() {
                continue;
            }
            for ax in 0..d.rank() {
                if self.domains[self.axis_domain(t, ax)].symbolic {
                    continue;
                }
                let root = self.uf.root(self.axis_base[t] + ax);
                let w = widest.entry(root).or_insert(0);
                *w = (*w).max(self.data_shape[t][ax]);
                axes.push((t, ax, root));
            }
        }
        for (t, ax, root) in axes {
            self.data_shape[t][ax] = widest[&root];
        }
    }

    /// Builds the initial value of every tensor that has data, in its final shape.
    pub(super) fn materialise_data(
        &mut self,
        infos: &[TensorInfo],
        has_equations: &[bool],
    ) -> Vec<Option<Tensor>> {
        let program = self.program;
        let mut out = Vec::with_capacity(infos.len());
        for (t, info) in infos.iter().enumerate() {
            let d = self.tensors[t].clone();
            let has = !d.facts.is_empty()
                || !d.elements.is_empty()
                || self.sources.iter().any(|s| s.tensor == t)
                || d.sources.iter().any(|&s| {
                    matches!(
                        program.statements[s].kind,
                        StmtKind::Literal { .. } | StmtKind::Scalar { .. }
                    )
                });
            if !has {
                out.push(None);
                continue;
            }
            if let Some(whole) = self.whole_buffer(t, info) {
                out.push(Some(whole));
                continue;
            }
            let by_data = !has_equations[t] && self.stored_by_data(t, info);
            let tensor = if info.kind == Kind::Bool || info.sparse_values || by_data {
                Tensor::sparse(info.elem, info.shape.clone())
            } else {
                match self.dense_zeros(info) {
                    Some(z) => z,
                    None => {
                        out.push(None);
                        continue;
                    }
                }
            };
            let mut g = Gather::new(tensor);
            for si in d.facts {
                if let StmtKind::Fact(a) = &program.statements[si].kind {
                    if let Some(pos) = self.positions(t, &a.indices) {
                        g.add(&pos, 1.0);
                    }
                }
            }
            for si in self.tensors[t].elements.clone() {
                if let StmtKind::Equation { lhs, rhs, .. } = &program.statements[si].kind {
                    if let (Some(pos), Some(v)) =
                        (self.positions(t, &lhs.indices), element_value(rhs))
                    {
                        g.add(&pos, v);
                    }
                }
            }
            // A scalar constant's value is the sum of its statements (or its `--set` value):
            // it is added once, however many statements define it.
            let mut scalar_added = false;
            for si in self.tensors[t].sources.clone() {
                match &program.statements[si].kind {
                    StmtKind::Literal { value, name } => {
                        let values = value.values.iter().copied();
                        self.add_dense(&mut g, &value.shape, values, name.span, &name.text);
                    }
                    StmtKind::Scalar { value, name, .. } if !scalar_added => {
                        let v = self.scalars.get(&name.text).copied().unwrap_or(*value);
                        g.add(&[], v);
                        scalar_added = true;
                    }
                    _ => {}
                }
            }
            for k in 0..self.sources.len() {
                if self.sources[k].tensor != t {
                    continue;
                }
                let src = self.sources[k].clone();
                match &*src.raw {
                    RawData::Dense { shape, values, .. } => {
                        self.add_dense(&mut g, shape, values.values(), src.span, &src.file)
                    }
                    RawData::Table(rows) => self.add_rows(&mut g, t, info, rows, &src),
                    RawData::Words(words) => {
                        let dom = self.axis_domain(t, 1);
                        for (p, w) in words.iter().enumerate() {
                            if let Some(s) = self.symbol_index(dom, w) {
                                g.add(&[p, s], 1.0);
                            }
                        }
                    }
                }
            }
            out.push(match by_data {
                true => self.store_by_data(info, g),
                false => Some(g.finish()),
            });
        }
        out
    }

    /// Whether tensor `t`, whose elements are all defined (0 where its data gives none), is
    /// gathered element by element and then stored by what its data turned out to be: its
    /// data are facts, element statements and rows of files, none of them a dense array.
    fn stored_by_data(&self, t: usize, info: &TensorInfo) -> bool {
        info.kind != Kind::Bool && !info.sparse_values && !self.given_arrays(t)
    }

    /// Whether tensor `t` is given a dense array: a literal or scalar statement of the
    /// program, or a file of one (`.npy`, safetensors) rather than rows.
    pub(super) fn given_arrays(&self, t: usize) -> bool {
        let program_arrays = self.tensors[t].sources.iter().any(|&s| {
            matches!(
                self.program.statements[s].kind,
                StmtKind::Literal { .. } | StmtKind::Scalar { .. }
            )
        });
        program_arrays
            || self
                .sources
                .iter()
                .any(|s| s.tensor == t && matches!(*s.raw, RawData::Dense { .. }))
    }

    /// The gathered elements of a tensor whose other elements are 0, as its non-zeros where
    /// they are few ([`worth_storing_sparsely`]: a declared 20,000² matrix read from 100k
    /// weighted rows), else as a dense array. Values at one position add in the order given,
    /// rounded after each addition as a dense array's stores are, so either storage holds
    /// the same elements.
    fn store_by_data(&mut self, info: &TensorInfo, g: Gather) -> Option<Tensor> {
        let rank = info.shape.len();
        let elements = info.elements();
        let elem = info.elem;
        if worth_storing_sparsely(elements, g.values.len()) {
            let add = |a: Option<f64>, v: f64| elem.round(a.unwrap_or(0.0) + v);
            let s = Sparse::from_entries_by(rank, g.tuples, g.values, add).with_zeros();
            return Some(Tensor {
                elem,
                shape: info.shape.clone(),
                storage: Storage::Sparse(s),
            });
        }
        let mut dense = self.dense_zeros(info)?;
        let mut pos = vec![0; rank];
        for (k, &v) in g.values.iter().enumerate() {
            for (p, &x) in pos.iter_mut().zip(&g.tuples[k * rank..(k + 1) * rank]) {
                *p = x as usize;
            }
            let old = dense.get(&pos).unwrap_or(0.0);
            dense.set(&pos, old + v);
        }
        Some(dense)
    }

    /// The data of a tensor whose only source is one dense array of its exact shape and
    /// buffer type: that array's buffer itself, shared rather than copied, so that a large
    /// input (a bound NumPy array, which stays lent) is not held twice.
    fn whole_buffer(&self, t: usize, info: &TensorInfo) -> Option<Tensor> {
        let d = &self.tensors[t];
        let program_data = d.sources.iter().any(|&s| {
            matches!(
                self.program.statements[s].kind,
                StmtKind::Literal { .. } | StmtKind::Scalar { .. }
            )
        });
        if program_data
            || !d.facts.is_empty()
            || !d.elements.is_empty()
            || info.kind == Kind::Bool
            || info.sparse_values
        {
            return None;
        }
        let mut sources = self.sources.iter().filter(|s| s.tensor == t);
        let (Some(only), None) = (sources.next(), sources.next()) else {
            return None;
        };
        match &*only.raw {
            RawData::Dense { shape, values, .. }
                if *shape == info.shape
                    && values.holds(info.elem)
                    && values.len() == shape.iter().product::<usize>() =>
            {
                Some(Tensor {
                    elem: info.elem,
                    shape: shape.clone(),
                    storage: Storage::Dense(values.clone()),
                })
            }
            _ => None,
        }
    }

    /// A dense tensor of zeros, or an error if it would exceed `--max-memory`.
    pub(super) fn dense_zeros(&mut self, info: &TensorInfo) -> Option<Tensor> {
        if !self.fits_dense(info) {
            return None;
        }
        Tensor::try_zeros(info.elem, info.shape.clone())
            .map_err(|e| {
                let budget = self.input.settings.max_memory;
                self.diags.push(super::budget::not_given(info, e, budget))
            })
            .ok()
    }

    /// Whether `info` fits `--max-memory` as a dense tensor; an error where it does not.
    pub(super) fn fits_dense(&mut self, info: &TensorInfo) -> bool {
        let n = info.elements();
        let bytes = n.saturating_mul(info.elem.dense_bytes());
        if bytes > self.input.settings.max_memory as u128 {
            self.diags.push(
                Diagnostic::error(
                    codes::MEMORY,
                    info.span,
                    format!("`{}` would need {} bytes as a dense {:?} tensor, over --max-memory ({} bytes)", info.name, bytes, info.shape, self.input.settings.max_memory),
                )
                .with_note("use a sparse formulation: a Boolean relation written with parentheses, or element facts"),
            );
            return false;
        }
        true
    }

    /// Where value `v` (a constant's [`Ctx::const_position`]) is stored on axis `ax` of
    /// tensor `t`: its handle on an open axis (`open.rs`), else less the axis's offset.
    pub(super) fn stored_position(&self, t: usize, ax: usize, v: i64) -> i64 {
        match &self.domains[self.axis_domain(t, ax)].table {
            Some(table) => table.intern(v).map_or(-1, i64::from),
            None => v - self.axis_offset(t, ax),
        }
    }

    fn positions(&mut self, t: usize, idx: &[Index]) -> Option<Vec<usize>> {
        if idx.len() != self.tensors[t].rank() {
            return None;
        }
        let mut pos = Vec::with_capacity(idx.len());
        for (ax, i) in idx.iter().enumerate() {
            match self
                .const_position(t, ax, i)
                .map(|v| self.stored_position(t, ax, v))
            {
                Ok(p) if p >= 0 => pos.push(p as usize),
                Ok(_) => {
                    self.diags.push(Diagnostic::error(
                        codes::OUT_OF_DOMAIN,
                        i.span(),
                        "a position must not be negative",
                    ));
                    return None;
                }
                Err(d) => {
                    self.diags.push(d);
                    return None;
                }
            }
        }
        Some(pos)
    }

    fn add_dense(
        &mut self,
        g: &mut Gather,
        shape: &[usize],
        values: impl Iterator<Item = f64>,
        span: Span,
        what: &str,
    ) {
        if shape.len() != g.tensor.rank() {
            self.diags.push(placed(
                codes::ARITY,
                span,
                format!(
                    "{what} has {} axes but the tensor is used with {}",
                    shape.len(),
                    g.tensor.rank()
                ),
            ));
            return;
        }
        if shape.iter().zip(&g.tensor.shape).any(|(a, b)| a > b) {
            self.diags.push(placed(
                codes::DECLARATION,
                span,
                format!(
                    "{what} has shape {shape:?}, which does not fit the tensor's shape {:?}",
                    g.tensor.shape
                ),
            ));
            return;
        }
        let mut idx = vec![0usize; shape.len()];
        for v in values {
            if g.tensor.elem == ElemType::Bool {
                if v != 0.0 {
                    g.add(&idx, 1.0);
                }
            } else {
                g.add(&idx, v);
            }
            crate::tensor::odometer::advance(&mut idx, shape);
        }
    }

    fn add_rows(
        &mut self,
        g: &mut Gather,
        t: usize,
        info: &TensorInfo,
        rows: &crate::io::Table,
        src: &super::Source,
    ) {
        let rank = info.shape.len();
        let valued = info.kind != Kind::Bool;
        let doms: Vec<usize> = (0..rank).map(|ax| self.axis_domain(t, ax)).collect();
        let declared: Vec<Option<usize>> = doms
            .iter()
            .map(|d| self.declared_symbols.get(d).copied())
            .collect();
        for r in rows.rows() {
            let want = if valued {
                [rank, rank + 1]
            } else {
                [rank, rank]
            };
            let bad = |msg: String| {
                let text = format!("{}:{}: {msg}", src.file, r.line);
                placed(codes::FILE_ROW, src.span, text)
                    .with_label(format!("reading `{}`", src.file))
            };
            if !want.contains(&r.len()) {
                let fields = |n: usize| format!("{n} field{}", if n == 1 { "" } else { "s" });
                let expect = if valued {
                    format!(
                        "{} and a value",
                        fields(rank).replace("field", "index field")
                    )
                } else {
                    fields(rank)
                };
                self.diags.push(bad(format!(
                    "expected {expect} for `{}`, found {}",
                    info.name,
                    fields(r.len())
                )));
                continue;
            }
            let mut pos = Vec::with_capacity(rank);
            let mut ok = true;
            for (ax, (f, &d)) in r.fields().zip(&doms).enumerate() {
                let column = Column {
                    info,
                    ax,
                    domain: d,
                    declared: declared[ax],
                };
                match self.field_position(&column, f) {
                    Ok(p) => pos.push(p),
                    Err(msg) => {
                        self.diags.push(bad(msg));
                        ok = false;
                    }
                }
            }
            if !ok {
                continue;
            }
            let v = if r.len() == rank + 1 {
                let field = r.field(rank).unwrap_or("");
                match field.parse::<f64>() {
                    Ok(v) => v,
                    Err(_) => {
                        self.diags
                            .push(bad(format!("value `{field}` is not a number")));
                        continue;
                    }
                }
            } else {
                1.0
            };
            g.add(&pos, v);
        }
    }

    /// The position a file's field names on a column: a symbol's (within the declared
    /// symbols), an open column's handle, or an integer less the axis's offset; the
    /// message for a field that names none.
    fn field_position(&mut self, c: &Column, f: &str) -> Result<usize, String> {
        let (info, ax, d) = (c.info, c.ax, c.domain);
        if self.domains[d].symbolic {
            let real = self.domains[d].real;
            let text = match number_text(f) {
                Some(v) if real => std::borrow::Cow::Owned(v),
                _ => std::borrow::Cow::Borrowed(f),
            };
            return match self.symbol_index(d, &text) {
                Some(p) if c.declared.is_none_or(|n| p < n) => Ok(p),
                _ => Err(format!(
                    "`{f}` is not in the declared domain of axis {}",
                    ax + 1
                )),
            };
        }
        if let Some(table) = &self.domains[d].table {
            // An open column (`open.rs`): every value of its data is in the table.
            return match f.parse::<i64>().ok().and_then(|v| table.intern(v)) {
                Some(h) => Ok(h as usize),
                None => Err(format!("`{f}` is not an integer index")),
            };
        }
        let offset = info.offsets.get(ax).copied().unwrap_or(0);
        match f.parse::<i64>().map(|v| (v, v.saturating_sub(offset))) {
            Ok((_, p)) if p >= 0 && (p as usize) < info.shape[ax] => Ok(p as usize),
            Ok((v, _)) => {
                let end = offset.saturating_add(info.shape[ax] as i64);
                Err(format!(
                    "index {v} is outside {offset}..{end} on axis {}",
                    ax + 1
                ))
            }
            Err(_) => Err(format!("`{f}` is not an integer index")),
        }
    }
}

/// One column of a file being read into a tensor.
struct Column<'i> {
    info: &'i TensorInfo,
    ax: usize,
    domain: usize,
    /// How many symbols the domain declares, if it declares them.
    declared: Option<usize>,
}

fn dim_span(d: &Dim) -> Span {
    match d {
        Dim::Named(n) => n.span,
        Dim::Size(_, s) => *s,
    }
}

/// Data being gathered for one tensor: values are summed where several places give one
/// element (§7); relations collect their tuples flat and are sorted once at the end.
struct Gather {
    tensor: Tensor,
    tuples: Vec<u32>,
    values: Vec<f64>,
    count: usize,
}

impl Gather {
    fn new(tensor: Tensor) -> Gather {
        Gather {
            tensor,
            tuples: Vec::new(),
            values: Vec::new(),
            count: 0,
        }
    }

    /// Adds `v` at `pos` (for relations, any non-zero value makes the tuple true); values
    /// at one position of a tensor of defined elements add up in the order given.
    fn add(&mut self, pos: &[usize], v: f64) {
        match &self.tensor.storage {
            Storage::Relation(_) if v != 0.0 => {
                self.tuples.extend(pos.iter().map(|&p| p as u32));
                self.count += 1;
            }
            Storage::Relation(_) => {}
            Storage::Sparse(_) => {
                self.tuples.extend(pos.iter().map(|&p| p as u32));
                self.values.push(v);
            }
            Storage::Dense(_) => {
                let old = self.tensor.get(pos).unwrap_or(0.0);
                self.tensor.set(pos, old + v);
            }
        }
    }

    fn finish(self) -> Tensor {
        let Gather {
            tensor,
            tuples,
            values,
            count,
        } = self;
        match &tensor.storage {
            Storage::Relation(_) => Tensor::relation_flat(tensor.shape, tuples, count),
            Storage::Sparse(_) => {
                let elem = tensor.elem;
                let s = Sparse::from_entries(tensor.shape.len(), tuples, values);
                let rounded: Vec<f64> = s.values().iter().map(|&v| elem.round(v)).collect();
                let s = Sparse::from_sorted(s.positions().clone(), rounded);
                Tensor::of_sparse(elem, tensor.shape, s)
            }
            Storage::Dense(_) => tensor,
        }
    }
}

/// `name` with its first letter uppercase: the constant a user who wrote a lowercase one
/// most likely meant.
fn capitalised(name: &str) -> String {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// An error about data at `span`, or with no place in the source where the data has none
/// (bound from memory, a string call's results: `Span::default()`): it then names the
/// binding and row in its message instead of pointing at the program's first character.
fn placed(code: &'static str, span: Span, message: String) -> Diagnostic {
    match span == Span::default() {
        true => Diagnostic::global(code, message),
        false => Diagnostic::error(code, span, message),
    }
}
