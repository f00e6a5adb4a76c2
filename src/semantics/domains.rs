//! Domain inference (§4): union-find over (tensor, axis) slots, named domains and the index
//! variables of each equation, then symbol interning in source order.

use super::head_links::{HeadLink, HeadLinks};
use super::ir::{number_text, real_text};
use super::names::IndexName;
use super::{Ctx, Domain};
use crate::diagnostics::{codes, Diagnostic, Span};
use crate::io::RawData;
use crate::syntax::ast::*;

/// Disjoint sets over slot numbers.
#[derive(Default, Debug)]
pub(crate) struct UnionFind {
    parent: Vec<usize>,
}

impl UnionFind {
    /// Adds a fresh node.
    pub(super) fn add(&mut self) -> usize {
        self.parent.push(self.parent.len());
        self.parent.len() - 1
    }

    /// Makes sure nodes `0..n` exist.
    pub(super) fn grow(&mut self, n: usize) {
        while self.parent.len() < n {
            self.add();
        }
    }

    /// Representative of `x`'s set.
    pub(super) fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    /// Representative of `x`'s set, without path compression (for shared borrows).
    pub(super) fn root(&self, mut x: usize) -> usize {
        while self.parent[x] != x {
            x = self.parent[x];
        }
        x
    }

    /// Merges two sets; the smaller root wins so results do not depend on call order.
    pub(super) fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            let (lo, hi) = (a.min(b), a.max(b));
            self.parent[hi] = lo;
        }
    }
}

impl Ctx<'_> {
    /// Takes every file the program reads, in statement order (read before checking,
    /// [`crate::io::read_program_files`]), then the bound data.
    pub(super) fn load_files(&mut self) {
        let program = self.program;
        for st in &program.statements {
            if let StmtKind::FileRead { name, path } = &st.kind {
                let id = self.by_name[&name.text];
                let full = self.input.base_dir.join(path);
                let key = (full.clone(), name.text.clone());
                let read = self
                    .input
                    .files
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| Err(format!("`{path}` was not read before checking")));
                match read {
                    Ok(raw) => {
                        self.rank_from_file(id, &raw, st.span);
                        self.sources.push(super::Source {
                            tensor: id,
                            raw,
                            span: st.span,
                            file: path.clone(),
                            symbolic: Vec::new(),
                        })
                    }
                    Err(msg) => self.diags.push(
                        Diagnostic::error(
                            codes::FILE,
                            st.span,
                            msg.replace(&full.display().to_string(), path),
                        )
                        .with_label(format!("reading `{path}` for `{}`", name.text)),
                    ),
                }
            }
        }
        for (name, raw) in self.input.bindings {
            // A binding the program does not mention was reported when names were collected.
            let Some(&id) = self.by_name.get(name) else {
                continue;
            };
            self.rank_from_file(id, raw, Span::default());
            self.sources.push(super::Source {
                tensor: id,
                raw: std::sync::Arc::new(raw.clone()),
                span: Span::default(),
                file: format!("binding `{name}`"),
                symbolic: Vec::new(),
            });
        }
        for table in self.tables {
            let Some(&id) = self.by_name.get(&table.name) else {
                continue;
            };
            self.rank_from_file(id, &table.raw, Span::default());
            self.sources.push(super::Source {
                tensor: id,
                raw: std::sync::Arc::clone(&table.raw),
                span: Span::default(),
                file: format!("the results of `{}`", table.name),
                symbolic: table.symbolic.clone(),
            });
        }
    }

    /// A tensor known only from a file takes its rank from the file; a text file is a
    /// Boolean position×word relation.
    fn rank_from_file(&mut self, id: usize, raw: &RawData, span: Span) {
        let t = &mut self.tensors[id];
        if let RawData::Words(_) = raw {
            t.paren.get_or_insert(span);
        }
        if t.arity.is_some() {
            return;
        }
        let rank = match raw {
            RawData::Dense { shape, .. } => shape.len(),
            RawData::Words(_) => 2,
            RawData::Table(rows) => {
                let fields = rows.row(0).map(|r| r.len()).unwrap_or(0);
                let valued = !t.is_bool()
                    && fields >= 2
                    && rows
                        .rows()
                        .all(|r| r.last().is_some_and(|f| f.parse::<f64>().is_ok()));
                if valued {
                    fields - 1
                } else {
                    // Rows of index fields alone are a relation's tuples: it is Boolean and
                    // is written back as it was read, without a value column.
                    t.paren.get_or_insert(span);
                    fields
                }
            }
        };
        t.arity = Some((rank, span));
    }

    fn var_node(&mut self, stmt: usize, name: &str) -> usize {
        if let Some(&n) = self.var_nodes.get(&(stmt, name.to_string())) {
            return n;
        }
        let n = self.uf.add();
        self.var_nodes.insert((stmt, name.to_string()), n);
        n
    }

    /// Unifies slots that share an index variable and records where symbols are placed.
    /// A rule head's bare variables are returned unlinked: [`Ctx::link_heads`] links them.
    pub(super) fn build_domains(&mut self) -> HeadLinks {
        let mut base = 0;
        for t in &self.tensors {
            self.axis_base.push(base);
            base += t.rank();
        }
        self.uf.grow(base);
        let mut named: Vec<String> = self.named_domains.keys().cloned().collect();
        named.sort();
        for n in named {
            let node = self.uf.add();
            if let Some(d) = self.named_domains.get_mut(&n) {
                d.node = node;
            }
        }
        let mut placements = Vec::new();
        let mut links = HeadLinks::default();
        let program = self.program;
        for (si, st) in program.statements.iter().enumerate() {
            match &st.kind {
                StmtKind::Equation { lhs, rhs, .. } => {
                    self.unify_access(si, lhs, &mut placements, None);
                    self.unify_expr(si, rhs, &mut placements);
                }
                StmtKind::Rule { head, body } => {
                    self.unify_access(si, head, &mut placements, Some(&mut links));
                    for e in body {
                        self.unify_expr(si, e, &mut placements);
                    }
                }
                StmtKind::Fact(a) => self.unify_access(si, a, &mut placements, None),
                StmtKind::Declaration { name, dims, .. } => {
                    let t = self.by_name[&name.text];
                    // A declaration whose rank differs from the tensor's (already reported)
                    // names no slots beyond it.
                    let rank = self.tensors[t].rank();
                    for (ax, d) in dims.iter().enumerate().take(rank) {
                        if let Dim::Named(n) = d {
                            match self.named_domains.get(&n.text) {
                                Some(nd) => {
                                    let node = nd.node;
                                    self.uf.union(self.axis_base[t] + ax, node);
                                }
                                None => self.diags.push(
                                    Diagnostic::error(
                                        codes::UNKNOWN_TENSOR,
                                        n.span,
                                        format!("unknown domain `{}`", n.text),
                                    )
                                    .with_note(format!(
                                        "declare it, e.g. `{} : 10` or `{} : {{A, B}}`",
                                        n.text, n.text
                                    )),
                                ),
                            }
                        }
                    }
                }
                StmtKind::Domain {
                    name,
                    def: DomainDef::Symbols(syms),
                } => {
                    let node = self.named_domains[&name.text].node;
                    for s in syms {
                        placements.push(Pending::Symbol(node, s.text.clone()));
                    }
                }
                StmtKind::FileRead { .. } => {
                    let k = self
                        .sources
                        .iter()
                        .take_while(|s| s.span != st.span)
                        .count();
                    if k < self.sources.len() {
                        self.place_source(k, &mut placements);
                    }
                }
                _ => {}
            }
        }
        for k in 0..self.sources.len() {
            if self.sources[k].span == Span::default() {
                self.place_source(k, &mut placements);
            }
        }
        self.placements = placements;
        links
    }

    fn place_source(&mut self, k: usize, placements: &mut Vec<Pending>) {
        match &*self.sources[k].raw {
            RawData::Table(_) => placements.push(Pending::Table(k)),
            RawData::Words(_) => placements.push(Pending::Words(k)),
            RawData::Dense { .. } => {}
        }
    }

    /// Unifies the slots of access `a` with its variables; with `links`, the access is a
    /// rule's head: its bare variables are noted there instead, and so are the slots it
    /// writes with index arithmetic over variables.
    fn unify_access(
        &mut self,
        si: usize,
        a: &Access,
        placements: &mut Vec<Pending>,
        mut links: Option<&mut HeadLinks>,
    ) {
        let Some(&t) = self.by_name.get(&a.name.text) else {
            return;
        };
        if self.tensors[t].rank() != super::names::axes(&a.indices) {
            return;
        }
        let stored = a
            .indices
            .iter()
            .filter(|i| !matches!(i, Index::Virtual(..)));
        for (ax, idx) in stored.enumerate() {
            let slot = self.axis_base[t] + ax;
            match idx {
                Index::Name(n) | Index::Normalized(n) => match self.index_name(&n.text) {
                    IndexName::Var => {
                        let var = self.var_node(si, &n.text);
                        match links.as_deref_mut() {
                            Some(heads) => heads.links.push(HeadLink {
                                slot,
                                var,
                                span: n.span,
                            }),
                            None => self.uf.union(slot, var),
                        }
                    }
                    IndexName::Symbol => placements.push(Pending::Symbol(slot, n.text.clone())),
                    IndexName::Const(_) => {}
                },
                Index::Str(s, _) => placements.push(Pending::Symbol(slot, s.clone())),
                Index::Real(v, _) => placements.push(Pending::Real(slot, *v)),
                Index::Int(..) | Index::Arith(..) => match int_constant(idx) {
                    Some(v) => placements.push(Pending::Number(slot, v)),
                    None => {
                        if let Some(heads) = links.as_deref_mut() {
                            heads.computing.push(slot);
                        }
                    }
                },
                _ => {}
            }
        }
    }

    fn unify_expr(&mut self, si: usize, e: &Expr, placements: &mut Vec<Pending>) {
        match e {
            Expr::Access(a) => self.unify_access(si, a, placements, None),
            Expr::Call { args, .. } => args.iter().for_each(|x| self.unify_expr(si, x, placements)),
            Expr::Neg(x, _) | Expr::Not(x, _) => self.unify_expr(si, x, placements),
            Expr::Binary(_, a, b, _) => {
                self.unify_expr(si, a, placements);
                self.unify_expr(si, b, placements);
            }
            Expr::Compare(_, a, b, _) => {
                self.unify_expr(si, a, placements);
                self.unify_expr(si, b, placements);
                match (self.value_var(a), self.value_var(b)) {
                    (Some(x), Some(y)) => {
                        let (x, y) = (self.var_node(si, &x), self.var_node(si, &y));
                        self.uf.union(x, y);
                    }
                    (Some(x), None) => {
                        if let Some(s) = self.symbol_constant(b) {
                            let x = self.var_node(si, &x);
                            placements.push(Pending::Symbol(x, s));
                        }
                    }
                    (None, Some(y)) => {
                        if let Some(s) = self.symbol_constant(a) {
                            let y = self.var_node(si, &y);
                            placements.push(Pending::Symbol(y, s));
                        }
                    }
                    (None, None) => {}
                }
            }
            Expr::Term(fs, _) => fs
                .iter()
                .for_each(|(_, f)| self.unify_expr(si, f, placements)),
            Expr::Number(..) | Expr::Str(..) => {}
        }
    }

    /// The variable an expression is, when it is a bare index variable used as a value.
    pub(super) fn value_var(&self, e: &Expr) -> Option<String> {
        match e {
            Expr::Term(fs, _) if fs.len() == 1 => self.value_var(&fs[0].1),
            Expr::Access(a)
                if a.brackets == Brackets::None
                    && !self.by_name.contains_key(&a.name.text)
                    && self.index_name(&a.name.text) == IndexName::Var =>
            {
                Some(a.name.text.clone())
            }
            _ => None,
        }
    }

    /// The symbol an expression names, when it is a string or an unknown capitalised name.
    pub(super) fn symbol_constant(&self, e: &Expr) -> Option<String> {
        match e {
            Expr::Term(fs, _) if fs.len() == 1 => self.symbol_constant(&fs[0].1),
            Expr::Str(s, _) => Some(s.clone()),
            Expr::Access(a)
                if a.brackets == Brackets::None
                    && !self.by_name.contains_key(&a.name.text)
                    && self.index_name(&a.name.text) == IndexName::Symbol =>
            {
                Some(a.name.text.clone())
            }
            _ => None,
        }
    }

    /// Marks symbolic domains and numbers their symbols in source order.
    pub(super) fn intern(&mut self) {
        let pending = std::mem::take(&mut self.placements);
        let candidates = self.open_candidates();
        let mut kinds = RootKinds::default();
        for p in &pending {
            self.classify(p, &candidates, &mut kinds);
        }
        self.make_domains(kinds, &candidates);
        self.name_domains();
        for p in pending {
            self.add_symbols(p);
        }
        self.domains.iter_mut().for_each(Domain::sort_values);
    }

    /// What one placement says of its root: symbolic, real, or integers (their span, and
    /// the values an open domain will hold).
    fn classify(
        &mut self,
        p: &Pending,
        candidates: &std::collections::HashSet<usize>,
        kinds: &mut RootKinds,
    ) {
        match p {
            Pending::Symbol(node, _) => {
                kinds.symbolic.insert(self.uf.find(*node));
            }
            Pending::Real(node, _) => {
                kinds.real.insert(self.uf.find(*node));
            }
            Pending::Number(node, v) => {
                let root = self.uf.find(*node);
                kinds.spans.widen(root, *v);
                kinds.open.note(candidates, root, *v);
            }
            Pending::Table(k) => self.classify_table(*k, candidates, kinds),
            Pending::Words(k) => {
                let k = *k;
                let t = self.sources[k].tensor;
                if self.tensors[t].rank() == 2 {
                    kinds.symbolic.insert(self.uf.find(self.axis_base[t] + 1));
                    let root = self.uf.find(self.axis_base[t]);
                    if let RawData::Words(w) = &*self.sources[k].raw {
                        (0..w.len() as i64).for_each(|p| kinds.open.note(candidates, root, p));
                    }
                }
            }
        }
    }

    /// A file's columns: symbolic where forced or where a field is no number, real where a
    /// number is no integer.
    fn classify_table(
        &mut self,
        k: usize,
        candidates: &std::collections::HashSet<usize>,
        kinds: &mut RootKinds,
    ) {
        let RootKinds {
            symbolic,
            real,
            spans,
            open,
        } = kinds;
        let t = self.sources[k].tensor;
        let forced = &self.sources[k].symbolic;
        if let RawData::Table(rows) = &*self.sources[k].raw {
            for ax in 0..self.tensors[t].rank() {
                let root = self.uf.find(self.axis_base[t] + ax);
                if forced.get(ax).copied().unwrap_or(false) {
                    symbolic.insert(root);
                    continue;
                }
                let mut fields = rows.rows().filter_map(|r| r.field(ax));
                let column = fields.try_fold(Column::Integers, |c, f| match f.parse::<i64>() {
                    Ok(v) => {
                        spans.widen(root, v);
                        open.note(candidates, root, v);
                        Some(c)
                    }
                    Err(_) => Column::other(f),
                });
                match column {
                    None => {
                        symbolic.insert(root);
                    }
                    Some(Column::Reals) => {
                        real.insert(root);
                    }
                    Some(Column::Integers) => {}
                }
            }
        }
    }

    /// Domain 0 (the shared integer one), then an open domain per open root, then one per
    /// symbolic or real root.
    fn make_domains(&mut self, kinds: RootKinds, candidates: &std::collections::HashSet<usize>) {
        let RootKinds {
            symbolic,
            mut real,
            spans,
            mut open,
        } = kinds;
        // Domain 0 is the shared integer domain; every symbolic root gets its own.
        self.domains.push(Domain::default());
        // Integers spread wider than an axis reaches are numbered as they occur (§8), unless
        // the domain is open: its table numbers any values.
        real.extend(spans.too_wide().filter(|r| !candidates.contains(r)));
        let real: std::collections::HashSet<usize> = real.difference(&symbolic).copied().collect();
        let mut opened: Vec<usize> = candidates
            .iter()
            .filter(|r| !symbolic.contains(r) && !real.contains(r))
            .copied()
            .collect();
        opened.sort();
        for r in opened {
            self.domain_of_root.insert(r, self.domains.len());
            self.domains.push(Domain::open(open.take(r)));
        }
        let mut roots: Vec<usize> = symbolic.union(&real).copied().collect();
        roots.sort();
        for r in roots {
            self.domain_of_root.insert(r, self.domains.len());
            let mut d = Domain::new(None, true);
            d.real = real.contains(&r);
            self.domains.push(d);
        }
    }

    /// Declared domains give their names to the domains of their roots; an integer range
    /// declared where symbols or reals are placed is an error.
    fn name_domains(&mut self) {
        let mut names: Vec<(String, usize, Option<usize>)> = self
            .named_domains
            .iter()
            .map(|(k, v)| (k.clone(), v.node, v.size))
            .collect();
        names.sort();
        for (name, node, size) in names {
            let root = self.uf.find(node);
            match self.domain_of_root.get(&root) {
                // Another declared integer domain joined to this one by an index: one
                // domain with two names (declared extents that differ are E0201 where used).
                Some(&d) if !self.domains[d].symbolic => {}
                Some(&d) => {
                    self.domains[d].name = Some(name.clone());
                    if size.is_some() {
                        let span = self.named_domains[&name].span;
                        self.diags.push(Diagnostic::error(
                            codes::DECLARATION,
                            span,
                            format!(
                                "domain `{name}` is declared as an integer range but {} placed in it",
                                if self.domains[d].real { "real values are" } else { "symbols are" }
                            ),
                        ));
                    }
                }
                None => {
                    self.domain_of_root.insert(root, self.domains.len());
                    self.domains.push(Domain::new(Some(name), false));
                }
            }
        }
    }

    /// Numbers the symbols (and the values of real domains) a placement brings.
    fn add_symbols(&mut self, p: Pending) {
        match p {
            Pending::Symbol(node, s) => {
                let d = self.domain_of_node(node);
                self.add_symbol(d, &s);
            }
            Pending::Real(node, v) => {
                let d = self.domain_of_node(node);
                self.add_symbol(d, &real_text(v));
            }
            Pending::Number(node, v) => {
                let d = self.domain_of_node(node);
                if self.domains[d].real {
                    self.add_symbol(d, &v.to_string());
                }
            }
            Pending::Table(k) => self.table_symbols(k),
            Pending::Words(k) => self.word_symbols(k),
        }
    }

    /// The symbols of a file's symbolic columns, in row order.
    fn table_symbols(&mut self, k: usize) {
        let t = self.sources[k].tensor;
        let rank = self.tensors[t].rank();
        let doms: Vec<usize> = (0..rank).map(|ax| self.axis_domain(t, ax)).collect();
        if !doms.iter().any(|&d| self.domains[d].symbolic) {
            return;
        }
        // Taken out while its symbols are interned, so that they need no copy.
        let raw = std::sync::Arc::clone(&self.sources[k].raw);
        if let RawData::Table(rows) = &*raw {
            for r in rows.rows() {
                for (ax, f) in r.fields().take(rank).enumerate() {
                    let dom = &self.domains[doms[ax]];
                    if dom.real {
                        // Not a number: the checker reports the field where
                        // it reads the data.
                        if let Some(text) = number_text(f) {
                            self.add_symbol(doms[ax], &text);
                        }
                    } else if dom.symbolic {
                        self.add_symbol(doms[ax], f);
                    }
                }
            }
        }
    }

    /// The words of a text file, in order.
    fn word_symbols(&mut self, k: usize) {
        let t = self.sources[k].tensor;
        if self.tensors[t].rank() != 2 {
            let span = self.sources[k].span;
            self.diags.push(
                Diagnostic::error(
                    codes::ARITY,
                    span,
                    format!(
                        "a text file gives a position×word relation, but `{}` has {} indices",
                        self.tensors[t].name,
                        self.tensors[t].rank()
                    ),
                )
                .with_note(format!("use it as `{}(p, w)`", self.tensors[t].name)),
            );
            return;
        }
        let d = self.axis_domain(t, 1);
        let words = match &*self.sources[k].raw {
            RawData::Words(w) => w.clone(),
            _ => Vec::new(),
        };
        for w in words {
            self.add_symbol(d, &w);
        }
    }

    fn domain_of_node(&mut self, node: usize) -> usize {
        let root = self.uf.find(node);
        self.domain_of_root.get(&root).copied().unwrap_or(0)
    }

    fn add_symbol(&mut self, d: usize, s: &str) {
        if d == 0 {
            return;
        }
        self.domains[d].add(s);
    }

    /// Position of `symbol` in domain `d`.
    pub(super) fn symbol_index(&self, d: usize, symbol: &str) -> Option<usize> {
        self.domains.get(d)?.position(symbol)
    }

    /// Domain of a variable of statement `stmt`.
    pub(super) fn var_domain(&mut self, stmt: usize, name: &str) -> usize {
        match self.var_nodes.get(&(stmt, name.to_string())) {
            Some(&n) => self.domain_of_node(n),
            None => 0,
        }
    }
}

/// A symbol placement, in source order, kept between unification and interning.
#[derive(Debug)]
pub(crate) enum Pending {
    Symbol(usize, String),
    /// A real constant: its domain holds reals.
    Real(usize, f64),
    /// An integer constant: it widens its domain's span, and is placed where the domain
    /// turns out to hold numbers.
    Number(usize, i64),
    Table(usize),
    Words(usize),
}

/// What a file's column holds, as far as its fields tell.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Column {
    Integers,
    Reals,
}

impl Column {
    /// The column once a field that is no integer is read: `None` when it is no finite
    /// number either (then the column's fields are symbols).
    fn other(field: &str) -> Option<Column> {
        field
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .map(|_| Column::Reals)
    }
}

/// The smallest and largest integer data places in each domain (by root).
#[derive(Default)]
struct Spans(std::collections::HashMap<usize, (i64, i64)>);

impl Spans {
    fn widen(&mut self, root: usize, v: i64) {
        let e = self.0.entry(root).or_insert((v, v));
        *e = (e.0.min(v), e.1.max(v));
    }

    /// The roots whose integers need more positions than an axis has: positions count
    /// from the smallest value, or from 0 when none is negative (`offsets.rs`).
    fn too_wide(&self) -> impl Iterator<Item = usize> + '_ {
        let most = crate::tensor::MAX_EXTENT as i128;
        self.0
            .iter()
            .filter(move |(_, &(lo, hi))| i128::from(hi) - i128::from(lo.min(0)) >= most)
            .map(|(&r, _)| r)
    }
}

/// The value of an integer constant written in an index (`7`, `-3`, `2 * 8`).
pub(super) fn int_constant(i: &Index) -> Option<i64> {
    match i {
        Index::Int(v, _) => Some(*v),
        Index::Arith(a, op, b, _) => {
            let (a, b) = (int_constant(a)?, int_constant(b)?);
            super::IndexFn::Arith(
                Box::new(super::IndexFn::Const(a)),
                *op,
                Box::new(super::IndexFn::Const(b)),
            )
            .eval(&[])
        }
        _ => None,
    }
}
/// What the placements say of each root, before domains are made.
#[derive(Default)]
struct RootKinds {
    /// Roots holding symbols, or a file column with a field that is no number.
    symbolic: std::collections::HashSet<usize>,
    /// Roots holding a real constant, or a column of numbers not all integers; one that
    /// also holds symbols holds strings.
    real: std::collections::HashSet<usize>,
    /// The integers placed at each root.
    spans: Spans,
    /// The values each open candidate holds.
    open: super::open::OpenValues,
}
