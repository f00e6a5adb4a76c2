//! Lowers equations and rules to the IR, placing each summed variable at the innermost
//! summation point that contains all of its occurrences (§6.2).

use super::names::IndexName;
use super::{Ctx, Equation, Family, Func, IndexFn, Node, TensorId, VarId, VarInfo};
use crate::diagnostics::{codes, Diagnostic, Span};
use crate::functions::{self, Structural};
use crate::syntax::ast::*;
use std::collections::HashMap;

/// Facts about one equation that later passes need but evaluation does not.
#[derive(Clone, Debug, Default)]
pub(super) struct EqMeta {
    /// Tensors read, whether under `not`, and where.
    pub reads: Vec<(TensorId, bool, Span)>,
    /// Tensors read inside a comparison's operands, and where: like `not`, a comparison
    /// can turn from true to false as what it reads grows (`Down(x) x > -5` holds where
    /// `Down(x)` is false), so it cannot be part of a recursion through them.
    pub compared: Vec<(TensorId, Span)>,
    /// Variables that occur in a positive atom or are bound to a constant by `==`.
    pub bound_positively: Vec<bool>,
    /// Variables whose range is fixed by a slice.
    pub fixed_ranges: HashMap<VarId, usize>,
    /// Head span (for safety messages).
    pub head_span: Span,
    /// The statement, whose variables' domains are known by name.
    pub stmt: usize,
    /// Equalities `v == e` outside `not`, with the variables `e` mentions: `v` takes the
    /// value of `e` (`n = Kids[x]`), so it is safe once they are.
    pub equalities: Vec<(VarId, Vec<VarId>)>,
}

/// The name of the anonymous variable: each occurrence is a variable of its own.
pub(super) const ANONYMOUS: &str = "_";

/// An equation with its metadata.
pub(super) type Lowered = (Equation, EqMeta);

struct Builder<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
    stmt: usize,
    target: TensorId,
    vars: Vec<VarInfo>,
    ids: HashMap<String, VarId>,
    meta: EqMeta,
    lhs_vars: Vec<VarId>,
    normalized: Option<VarId>,
    virtual_var: Option<VarId>,
    slices: usize,
    /// Each `_` inside a `not`, summed just inside it: `not F(x, _)` is "no F(x, y)".
    anonymous_negated: Vec<VarId>,
}

impl Ctx<'_> {
    /// Lowers every equation and rule.
    pub(super) fn lower_all(&mut self) -> Vec<Lowered> {
        let program = self.program;
        let mut out = Vec::new();
        for t in 0..self.tensors.len() {
            for si in self.tensors[t].equations.clone() {
                let st = &program.statements[si];
                let lowered = match &st.kind {
                    StmtKind::Equation { lhs, op, rhs } => self.lower_equation(Statement {
                        stmt: si,
                        target: t,
                        lhs,
                        op: *op,
                        rhs: Some(rhs),
                        body: &[],
                        span: st.span,
                    }),
                    StmtKind::Rule { head, body } => {
                        let lowered = self.lower_equation(Statement {
                            stmt: si,
                            target: t,
                            lhs: head,
                            op: AccumOp::Assign,
                            rhs: None,
                            body,
                            span: st.span,
                        });
                        if let Some((eq, _)) = &lowered {
                            self.warn_negated_only(eq);
                        }
                        lowered
                    }
                    _ => None,
                };
                out.extend(lowered);
            }
        }
        out.sort_by_key(|(e, _)| e.span.start);
        out
    }

    /// Warns of a rule variable named only inside `not`: it is summed outside the negation
    /// (§6.2), so `not F(x, z)` means "some z without F(x, z)", where a Datalog user means
    /// "no z", which is `_`; a misspelt head variable looks the same.
    fn warn_negated_only(&mut self, eq: &Equation) {
        let mut outside = Vec::new();
        let mut inside = Vec::new();
        split_by_not(&eq.rhs, false, &mut outside, &mut inside);
        for f in &eq.lhs {
            f.vars(&mut outside);
        }
        let mut warned = Vec::new();
        for v in inside {
            let var = &eq.vars[v];
            if outside.contains(&v) || warned.contains(&v) || var.name == ANONYMOUS {
                continue;
            }
            warned.push(v);
            self.warnings.push(
                Diagnostic::warning(
                    codes::NEGATED_ONLY,
                    var.span,
                    format!("`{}` occurs only inside `not`", var.name),
                )
                .with_label("only here")
                .with_note(format!(
                    "so the body holds when some value of `{}` makes the negated atom false; \
                     write `_` there for \"no value does\" (as in Soufflé), or bind `{}` in \
                     a positive atom",
                    var.name, var.name
                )),
            );
        }
    }

    fn lower_equation(&mut self, s: Statement) -> Option<Lowered> {
        let before = self.diags.len();
        let target = s.target;
        let mut b = Builder {
            ctx: self,
            stmt: s.stmt,
            target,
            vars: Vec::new(),
            ids: HashMap::new(),
            meta: EqMeta {
                head_span: s.lhs.span,
                stmt: s.stmt,
                ..EqMeta::default()
            },
            lhs_vars: Vec::new(),
            normalized: None,
            virtual_var: None,
            slices: 0,
            anonymous_negated: Vec::new(),
        };
        let slice_lhs = s.lhs.brackets == Brackets::None && s.rhs.is_some_and(has_slices);
        if !slice_lhs && super::names::axes(&s.lhs.indices) != b.ctx.tensors[target].rank() {
            return None;
        }
        let mut lhs_fns = match slice_lhs {
            true => Vec::new(),
            false => b.lhs_indices(s.lhs)?,
        };
        let mut loop_vars = Vec::new();
        for f in &lhs_fns {
            let mut vs = Vec::new();
            f.vars(&mut vs);
            for v in vs {
                if !loop_vars.contains(&v) {
                    loop_vars.push(v);
                }
            }
        }
        b.lhs_vars = loop_vars.clone();
        let body_node = match s.rhs {
            Some(e) => b.expr(e, false),
            None => {
                let lits: Vec<(bool, Node)> =
                    s.body.iter().map(|e| (false, b.expr(e, false))).collect();
                Node::Product(lits)
            }
        };
        if slice_lhs {
            for k in 0..b.slices {
                let v = b.ids[&format!("#slice{k}")];
                loop_vars.push(v);
                lhs_fns.push(IndexFn::Var(v));
            }
        }
        let root = b.summed(body_node, &loop_vars);
        let Builder {
            vars,
            meta,
            virtual_var,
            ..
        } = b;
        if self.diags.len() > before {
            return None;
        }
        let bool_head = self.tensors[target].is_bool();
        let family = match s.op {
            AccumOp::Assign | AccumOp::Add => Family::Sum,
            AccumOp::Max => Family::Max,
            AccumOp::Min => Family::Min,
            AccumOp::Avg => Family::Avg,
        };
        let mut meta = meta;
        meta.bound_positively.resize(vars.len(), false);
        Some((
            Equation {
                target,
                lhs: lhs_fns,
                loop_vars,
                virtual_var,
                family,
                bool_head,
                rhs: root,
                vars,
                span: s.span,
            },
            meta,
        ))
    }
}

/// One statement to lower: an equation `lhs op rhs`, or a rule `lhs :- body`.
struct Statement<'p> {
    stmt: usize,
    target: TensorId,
    lhs: &'p Access,
    op: AccumOp,
    /// An equation's right-hand side; `None` for a rule.
    rhs: Option<&'p Expr>,
    /// A rule's body.
    body: &'p [Expr],
    span: Span,
}

impl Builder<'_, '_> {
    /// The left-hand side's positions (a virtual index sets `virtual_var`, a normalized
    /// one `normalized`); `None` after an error.
    fn lhs_indices(&mut self, lhs: &Access) -> Option<Vec<IndexFn>> {
        let target = self.target;
        let mut lhs_fns = Vec::new();
        let mut ax: usize = 0;
        for idx in &lhs.indices {
            if !matches!(idx, Index::Virtual(..)) {
                ax += 1;
            }
            let ax = ax.saturating_sub(1);
            match idx {
                Index::Virtual(inner, vspan) => {
                    self.virtual_var = Some(self.virtual_lhs(inner, *vspan)?)
                }
                Index::Normalized(n) => {
                    let v = self.var(&n.text, n.span);
                    self.normalized = Some(v);
                    lhs_fns.push(IndexFn::Var(v));
                }
                _ => lhs_fns.push(self.index(target, ax, idx)?),
            }
        }
        Some(lhs_fns)
    }

    /// The body under its summations: each variable not on the left-hand side is summed
    /// at the smallest node holding all its uses (§6.2).
    fn summed(&mut self, body: Node, loop_vars: &[VarId]) -> Node {
        let mut root = Node::Sum {
            vars: Vec::new(),
            body: Box::new(body),
        };
        let n = self.vars.len();
        let mut total = vec![0usize; n];
        count(&root, &mut total);
        let mut bound = vec![false; n];
        for &v in loop_vars {
            bound[v] = true;
        }
        if let Some(v) = self.virtual_var {
            bound[v] = true;
        }
        for &v in &self.anonymous_negated {
            bound[v] = true;
        }
        mark_concat_parts(&root, &mut bound);
        let mut assigned = vec![false; n];
        assign(&mut root, &total, &bound, &mut assigned);
        root
    }
}

impl Builder<'_, '_> {
    /// The variable called `name`; every `_` is a new one (anonymous, as in Soufflé).
    fn var(&mut self, name: &str, span: Span) -> VarId {
        if let Some(&v) = self.ids.get(name) {
            return v;
        }
        let v = self.vars.len();
        let d = self.ctx.var_domain(self.stmt, name);
        self.vars.push(VarInfo {
            name: name.to_string(),
            range: 0,
            span,
            open: self.ctx.domains[d].is_open().then_some(d),
        });
        if name != ANONYMOUS {
            self.ids.insert(name.to_string(), v);
        }
        v
    }

    fn error(&mut self, d: Diagnostic) {
        self.ctx.diags.push(d);
    }

    fn positive(&mut self, v: VarId) {
        if self.meta.bound_positively.len() <= v {
            self.meta.bound_positively.resize(v + 1, false);
        }
        self.meta.bound_positively[v] = true;
    }

    fn virtual_lhs(&mut self, inner: &Index, span: Span) -> Option<VarId> {
        let var = match inner {
            Index::Arith(a, ArithOp::Add, c, _) => match (&**a, &**c) {
                (Index::Name(n), Index::Int(1, _)) => Some(n),
                _ => None,
            },
            _ => None,
        };
        match var {
            Some(n) if self.ctx.index_name(&n.text) == IndexName::Var => {
                Some(self.var(&n.text, n.span))
            }
            _ => {
                self.error(
                    Diagnostic::error(
                        codes::FORM,
                        span,
                        "a virtual index on the left-hand side must be written `*t + 1`",
                    )
                    .with_note("the right-hand side then reads the previous step as `*t`"),
                );
                None
            }
        }
    }

    /// An index position of tensor `t`, axis `ax`.
    fn index(&mut self, t: TensorId, ax: usize, idx: &Index) -> Option<IndexFn> {
        match idx {
            Index::Name(n) => match self.ctx.index_name(&n.text) {
                IndexName::Var => Some(IndexFn::Var(self.var(&n.text, n.span))),
                _ => self.constant(t, ax, idx),
            },
            Index::Int(..) | Index::Str(..) | Index::Real(..) => self.constant(t, ax, idx),
            Index::Arith(..) => {
                if self.ctx.domains[self.ctx.axis_domain(t, ax)].symbolic {
                    self.error(Diagnostic::error(
                        codes::TYPE,
                        idx.span(),
                        format!(
                            "index arithmetic on axis {} of `{}`, which holds symbols",
                            ax + 1,
                            self.ctx.tensors[t].name
                        ),
                    ));
                    return None;
                }
                self.arith(idx)
            }
            Index::Normalized(n) => {
                self.error(Diagnostic::error(
                    codes::FORM,
                    n.span,
                    "a normalised index (`p'.`) may only appear on the left-hand side",
                ));
                None
            }
            Index::Virtual(_, span) => {
                self.error(Diagnostic::error(
                    codes::FORM,
                    *span,
                    "a virtual index here must read the previous step of the tensor being defined",
                ));
                None
            }
            Index::Slice(lo, hi, span) => {
                let k = self.slices;
                self.slices += 1;
                let v = self.var(&format!("#slice{k}"), *span);
                let lo = lo.unwrap_or(0);
                let ext = self
                    .ctx
                    .data_shape
                    .get(t)
                    .and_then(|s| s.get(ax))
                    .copied()
                    .unwrap_or(0) as i64;
                let hi = hi.unwrap_or(ext);
                if lo < 0 || hi < lo {
                    self.error(Diagnostic::error(
                        codes::OUT_OF_DOMAIN,
                        *span,
                        format!("empty or negative slice {lo}:{hi}"),
                    ));
                    return None;
                }
                self.meta.fixed_ranges.insert(v, (hi - lo) as usize);
                Some(IndexFn::Arith(
                    Box::new(IndexFn::Var(v)),
                    ArithOp::Add,
                    Box::new(IndexFn::Const(lo)),
                ))
            }
        }
    }

    fn constant(&mut self, t: TensorId, ax: usize, idx: &Index) -> Option<IndexFn> {
        match self.ctx.const_position(t, ax, idx) {
            Ok(p) => Some(IndexFn::Const(p)),
            Err(d) => {
                self.error(d);
                None
            }
        }
    }

    fn arith(&mut self, idx: &Index) -> Option<IndexFn> {
        match idx {
            Index::Name(n) => match self.ctx.index_name(&n.text) {
                IndexName::Var if self.ctx.holds_reals(self.stmt, &n.text) => {
                    self.error(
                        Diagnostic::error(
                            codes::TYPE,
                            n.span,
                            format!("`{}` holds reals, and index arithmetic is over integers", n.text),
                        )
                        .with_note("in a rule, bind the value to a variable (`d = p * 2`) to make it a column"),
                    );
                    None
                }
                IndexName::Var => Some(IndexFn::Var(self.var(&n.text, n.span))),
                IndexName::Const(c) => Some(IndexFn::Const(c)),
                IndexName::Symbol => {
                    self.error(
                        Diagnostic::error(
                            codes::UNKNOWN_TENSOR,
                            n.span,
                            format!(
                                "`{}` in index arithmetic is not an integer scalar constant",
                                n.text
                            ),
                        )
                        .with_note(format!("define it, e.g. `{} = 2`", n.text)),
                    );
                    None
                }
            },
            Index::Int(v, _) => Some(IndexFn::Const(*v)),
            Index::Arith(a, op, b, _) => Some(IndexFn::Arith(
                Box::new(self.arith(a)?),
                *op,
                Box::new(self.arith(b)?),
            )),
            other => {
                self.error(Diagnostic::error(
                    codes::SYNTAX,
                    other.span(),
                    "only variables, integers and scalar constants may appear in index arithmetic",
                ));
                None
            }
        }
    }

    fn read(&mut self, a: &Access, negated: bool) -> Node {
        let Some(&t) = self.ctx.by_name.get(&a.name.text) else {
            return Node::Const(Num::Int(0));
        };
        if super::names::axes(&a.indices) != self.ctx.tensors[t].rank() {
            return Node::Const(Num::Int(0));
        }
        let mut index = Vec::with_capacity(a.indices.len());
        let mut slice = false;
        let mut ax = 0;
        for idx in &a.indices {
            if let Index::Virtual(inner, span) = idx {
                let ok = t == self.target
                    && matches!(&**inner, Index::Name(n) if self.virtual_var == self.ids.get(&n.text).copied() && self.virtual_var.is_some());
                if !ok {
                    self.error(Diagnostic::error(codes::FORM, *span, "`*t` reads the previous step of the tensor defined with `*t + 1` on the left-hand side"));
                }
                slice = true;
                continue;
            }
            let this = ax;
            ax += 1;
            if let Some(f) = self.index(t, this, idx) {
                if !negated {
                    let mut vs = Vec::new();
                    f.vars(&mut vs);
                    vs.into_iter().for_each(|v| self.positive(v));
                }
                index.push(f);
            }
        }
        if !slice {
            self.meta.reads.push((t, negated, a.span));
        }
        Node::Read {
            tensor: t,
            index,
            slice,
        }
    }

    /// A comparison's operand: a number there is compared exactly, whatever its size.
    fn operand(&mut self, e: &Expr, negated: bool) -> Node {
        match super::bindings::peel(e) {
            Expr::Number(v, _) => Node::Const(*v),
            Expr::Neg(x, _) => match super::bindings::peel(x) {
                Expr::Number(v, _) => Node::Const(v.neg()),
                _ => self.expr(e, negated),
            },
            _ => self.expr(e, negated),
        }
    }

    fn expr(&mut self, e: &Expr, negated: bool) -> Node {
        match e {
            Expr::Number(Num::Int(v), span) if (*v as f64) as i128 != i128::from(*v) => {
                self.error(
                    Diagnostic::error(
                        codes::INEXACT_INTEGER,
                        *span,
                        format!("{v} cannot be held exactly here: numbers in expressions are f64, exact only within ±2⁵³"),
                    )
                    .with_note("atom arguments and comparisons take any i64 exactly (`E(9007199254740993, y)`, `x > 9007199254740993`)"),
                );
                Node::Const(Num::Int(*v))
            }
            Expr::Number(v, _) => Node::Const(*v),
            Expr::Str(s, span) => {
                self.error(Diagnostic::error(
                    codes::FORM,
                    *span,
                    format!("the symbol \"{s}\" can only be compared with an index variable"),
                ));
                Node::Const(Num::Int(0))
            }
            Expr::Access(a) => {
                if a.brackets == Brackets::None && !self.ctx.by_name.contains_key(&a.name.text) {
                    return match self.ctx.index_name(&a.name.text) {
                        IndexName::Var => Node::Var(self.var(&a.name.text, a.name.span)),
                        IndexName::Const(c) => Node::Const(Num::Int(c)),
                        IndexName::Symbol => {
                            self.error(Diagnostic::error(
                                codes::UNKNOWN_TENSOR,
                                a.name.span,
                                format!("unknown tensor `{}`", a.name.text),
                            ));
                            Node::Const(Num::Int(0))
                        }
                    };
                }
                self.read(a, negated)
            }
            Expr::Call { func, args, span } => self.call(func, args, *span, negated),
            // `-3` is the constant -3, so that guards such as `x > -3` bound ranges.
            Expr::Neg(x, _) => match self.expr(x, negated) {
                Node::Const(c) => Node::Const(c.neg()),
                inner => Node::Neg(Box::new(inner)),
            },
            Expr::Not(x, _) => {
                let before = self.vars.len();
                let operand = self.expr(x, true);
                let anonymous: Vec<VarId> = (before..self.vars.len())
                    .filter(|&v| self.vars[v].name == ANONYMOUS)
                    .collect();
                if anonymous.is_empty() {
                    Node::Not(Box::new(operand))
                } else {
                    self.anonymous_negated.extend(&anonymous);
                    Node::Not(Box::new(Node::Sum {
                        vars: anonymous,
                        body: Box::new(operand),
                    }))
                }
            }
            Expr::Binary(op, a, b, _) => Node::Binary(
                *op,
                Box::new(self.expr(a, negated)),
                Box::new(self.expr(b, negated)),
            ),
            Expr::Compare(op, a, b, span) => self.compare(*op, a, b, *span, negated),
            Expr::Term(fs, _) => {
                for (_, f) in fs.iter().filter(|(div, _)| *div) {
                    self.no_relation_divisor(f);
                }
                let body = if fs.len() == 1 && !fs[0].0 {
                    self.expr(&fs[0].1, negated)
                } else {
                    Node::Product(
                        fs.iter()
                            .map(|(d, f)| (*d, self.expr(f, negated)))
                            .collect(),
                    )
                };
                Node::Sum {
                    vars: Vec::new(),
                    body: Box::new(body),
                }
            }
        }
    }

    /// E0104 for a relation as a divisor (`N(x) / R(y, m)`): it is infinite wherever the
    /// atom is false, and the joins (which meet only its true tuples) and the reference (which
    /// sums every point, infinities and NaNs included) would answer differently; no Datalog
    /// means it. Divide by a real tensor, or test the atom.
    fn no_relation_divisor(&mut self, f: &Expr) {
        if let Expr::Access(a) = f {
            if a.brackets == Brackets::Paren {
                self.error(
                    Diagnostic::error(
                        codes::TYPE,
                        a.span,
                        format!(
                            "a relation cannot divide: `{}` is 0 where it is false",
                            a.name.text
                        ),
                    )
                    .with_note("divide by a real tensor (`W[x]`), or use the atom as a condition"),
                );
            }
        }
    }

    fn compare(&mut self, op: CmpOp, a: &Expr, b: &Expr, span: Span, negated: bool) -> Node {
        let before = self.meta.reads.len();
        let node = self.compare_operands(op, (a, b), span, negated);
        let compared: Vec<(TensorId, Span)> = self.meta.reads[before..]
            .iter()
            .map(|&(t, _, at)| (t, at))
            .collect();
        self.meta.compared.extend(compared);
        node
    }

    fn compare_operands(
        &mut self,
        op: CmpOp,
        (a, b): (&Expr, &Expr),
        span: Span,
        negated: bool,
    ) -> Node {
        let (va, vb) = (self.ctx.value_var(a), self.ctx.value_var(b));
        let symbolic = |s: &mut Self, v: &str| {
            let d = s.ctx.var_domain(s.stmt, v);
            let dom = &s.ctx.domains[d];
            (dom.symbolic && !dom.real).then_some(d)
        };
        let sym = |s: &mut Self, var: &str, e: &Expr| -> Option<Node> {
            let name = s.ctx.symbol_constant(e)?;
            let d = s.ctx.var_domain(s.stmt, var);
            let p = s.ctx.symbol_index(d, &name)?;
            Some(Node::Const(Num::Int(p as i64)))
        };
        let (left, right) = match (&va, &vb) {
            (Some(x), None) if self.ctx.symbol_constant(b).is_some() => {
                let node = sym(self, x, b).unwrap_or(Node::Const(Num::Int(-1)));
                (self.expr(a, negated), node)
            }
            (None, Some(y)) if self.ctx.symbol_constant(a).is_some() => {
                let node = sym(self, y, a).unwrap_or(Node::Const(Num::Int(-1)));
                (node, self.expr(b, negated))
            }
            _ => (self.operand(a, negated), self.operand(b, negated)),
        };
        let on_symbols = va.as_deref().and_then(|v| symbolic(self, v)).is_some()
            || vb.as_deref().and_then(|v| symbolic(self, v)).is_some();
        if on_symbols && !matches!(op, CmpOp::Eq | CmpOp::Ne) {
            self.error(Diagnostic::error(
                codes::TYPE,
                span,
                "symbols can only be compared with `==` and `!=`",
            ));
        }
        if op == CmpOp::Eq && !negated {
            match (unwrap_sum(&left), unwrap_sum(&right)) {
                (Node::Var(v), Node::Const(_)) | (Node::Const(_), Node::Var(v)) => {
                    self.positive(*v)
                }
                (Node::Var(v), other) | (other, Node::Var(v)) => {
                    let mut mentioned = Vec::new();
                    other.mentioned_vars(&mut mentioned);
                    if !mentioned.contains(v) {
                        self.meta.equalities.push((*v, mentioned));
                    }
                }
                _ => {}
            }
        }
        Node::Compare(op, Box::new(left), Box::new(right))
    }

    fn call(&mut self, func: &Name, args: &[Expr], span: Span, negated: bool) -> Node {
        let arg = |s: &mut Self, e: &Expr| Node::Sum {
            vars: Vec::new(),
            body: Box::new(s.expr(e, negated)),
        };
        if let Some(kind) = functions::structural(&func.text) {
            if args.len() != 1 {
                self.error(Diagnostic::error(
                    codes::ARITY,
                    span,
                    format!("`{}` takes one argument", func.text),
                ));
                return Node::Const(Num::Int(0));
            }
            let body = arg(self, &args[0]);
            return match kind {
                Structural::Softmax | Structural::Lnorm => {
                    let var = self.normalized.or_else(|| self.lhs_vars.last().copied());
                    match var {
                        Some(v) => Node::Normalize(kind, v, Box::new(body)),
                        None => {
                            self.error(Diagnostic::error(
                                codes::FORM,
                                span,
                                format!(
                                    "`{}` needs a left-hand-side index to normalise over",
                                    func.text
                                ),
                            ));
                            Node::Const(Num::Int(0))
                        }
                    }
                }
                Structural::Concat => self.concat(body, span),
            };
        }
        if let Some((b, arities)) = functions::builtin(&func.text) {
            if !arities.contains(&args.len()) {
                let want: Vec<String> = arities.iter().map(|a| a.to_string()).collect();
                self.error(Diagnostic::error(
                    codes::ARITY,
                    span,
                    format!(
                        "`{}` takes {} argument(s), found {}",
                        func.text,
                        want.join(" or "),
                        args.len()
                    ),
                ));
            }
            let nodes = args.iter().map(|e| arg(self, e)).collect();
            return Node::Call(Func::Builtin(b), nodes);
        }
        if args.len() != 1 {
            self.error(Diagnostic::error(
                codes::ARITY,
                span,
                format!("`{}` takes one argument", func.text),
            ));
        }
        let nodes = args.iter().map(|e| arg(self, e)).collect();
        Node::Call(Func::User(func.text.clone()), nodes)
    }

    fn concat(&mut self, body: Node, span: Span) -> Node {
        let mut order = Vec::new();
        occurrences(&body, &mut order);
        let mut parts = Vec::new();
        for v in order {
            if !self.lhs_vars.contains(&v) && !parts.contains(&v) {
                parts.push(v);
            }
        }
        let absent: Vec<VarId> = self
            .lhs_vars
            .iter()
            .copied()
            .filter(|v| {
                let mut o = Vec::new();
                occurrences(&body, &mut o);
                !o.contains(v)
            })
            .collect();
        if absent.len() != 1 || parts.is_empty() {
            self.error(
                Diagnostic::error(codes::FORM, span, "`concat` needs exactly one left-hand-side index that is absent from its argument")
                    .with_note("e.g. `Merge[b, p, dm] = concat(Attn[b, h, p, dv])` flattens h and dv into dm"),
            );
            return Node::Const(Num::Int(0));
        }
        Node::Concat {
            out: absent[0],
            parts,
            arg: Box::new(body),
        }
    }
}

/// The node inside summation points that sum nothing (before assignment, all of them).
fn unwrap_sum(n: &Node) -> &Node {
    match n {
        Node::Sum { vars, body } if vars.is_empty() => unwrap_sum(body),
        other => other,
    }
}

/// Whether a right-hand side is a whole-tensor copy with slices (`Y = X[4:8, :]`).
pub(super) fn has_slices(e: &Expr) -> bool {
    match e {
        Expr::Access(a) => a.indices.iter().any(|i| matches!(i, Index::Slice(..))),
        Expr::Term(fs, _) => fs.iter().any(|(_, f)| has_slices(f)),
        _ => false,
    }
}

/// Variables in order of first occurrence.
fn occurrences(n: &Node, out: &mut Vec<VarId>) {
    match n {
        Node::Var(v) => out.push(*v),
        Node::Read { index, .. } => index.iter().for_each(|f| f.vars(out)),
        other => other
            .children()
            .into_iter()
            .for_each(|c| occurrences(c, out)),
    }
}

fn count(n: &Node, counts: &mut [usize]) {
    let mut o = Vec::new();
    occurrences(n, &mut o);
    for v in o {
        counts[v] += 1;
    }
}

fn mark_concat_parts(n: &Node, bound: &mut [bool]) {
    if let Node::Concat { parts, .. } = n {
        parts.iter().for_each(|&p| bound[p] = true);
    }
    n.children()
        .into_iter()
        .for_each(|c| mark_concat_parts(c, bound));
}

/// Bottom-up: a summation point takes every free variable all of whose occurrences it holds.
/// One made with its variables already (the `_`s of a `not`) takes no others.
fn assign(n: &mut Node, total: &[usize], bound: &[bool], assigned: &mut [bool]) {
    n.children_mut()
        .into_iter()
        .for_each(|c| assign(c, total, bound, assigned));
    if let Node::Sum { vars, body } = n {
        if !vars.is_empty() {
            return;
        }
        let mut here = vec![0usize; total.len()];
        count(body, &mut here);
        for v in 0..total.len() {
            if here[v] > 0 && here[v] == total[v] && !bound[v] && !assigned[v] {
                vars.push(v);
                assigned[v] = true;
            }
        }
    }
}

/// The variables mentioned outside and inside `not` (a variable can be in both).
fn split_by_not(n: &Node, under_not: bool, outside: &mut Vec<VarId>, inside: &mut Vec<VarId>) {
    let here = match under_not {
        true => &mut *inside,
        false => &mut *outside,
    };
    match n {
        Node::Var(v) => here.push(*v),
        Node::Read { index, .. } => index.iter().for_each(|f| f.vars(here)),
        _ => {}
    }
    let under_not = under_not || matches!(n, Node::Not(_));
    for c in n.children() {
        split_by_not(c, under_not, outside, inside);
    }
}

#[cfg(test)]
mod tests {
    use crate::semantics::tests::checked;
    use crate::semantics::{Checked, Node};

    /// Each summation point's summed variables, in tree order.
    fn sums(c: &Checked, target: &str) -> Vec<Vec<String>> {
        fn walk(n: &Node, names: &[String], out: &mut Vec<Vec<String>>) {
            if let Node::Sum { vars, .. } = n {
                out.push(vars.iter().map(|&v| names[v].clone()).collect());
            }
            n.children().into_iter().for_each(|ch| walk(ch, names, out));
        }
        let t = c.tensor_id(target).unwrap();
        let eq = c.equations.iter().find(|e| e.target == t).unwrap();
        let names: Vec<String> = eq.vars.iter().map(|v| v.name.clone()).collect();
        let mut out = Vec::new();
        walk(&eq.rhs, &names, &mut out);
        out.into_iter().filter(|v| !v.is_empty()).collect()
    }

    #[test]
    fn indices_are_summed_at_the_innermost_point_holding_them() {
        let c = checked(
            "W = [1, 2]\nX = [3, 4]\nC = 1\nM = [[1, 2], [3, 4]]\nY = step(W[i] X[i] + C)\n\
             K[i, i'] = exp(-(M[i, j] - M[i', j])^2 / C)\nP[i, i'] = (M[i, j] M[i', j])^2\n\
             R[e] = X[e] - M[e, j]\nD[x, z] min= M[x, y] + M[y, z]\n",
        );
        assert_eq!(sums(&c, "Y"), vec![vec!["i"]]);
        assert_eq!(sums(&c, "K"), vec![vec!["j"]]);
        assert_eq!(sums(&c, "P"), vec![vec!["j"]]);
        assert_eq!(sums(&c, "R"), vec![vec!["j"]]);
        assert_eq!(sums(&c, "D"), vec![vec!["y"]]);
    }

    #[test]
    fn concat_parts_are_not_summed() {
        let c = checked("Z = [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]\nM[p, m] = concat(Z[h, p, v])\n");
        assert!(sums(&c, "M").is_empty());
    }

    #[test]
    fn a_rule_variable_only_under_not_is_warned_of_and_underscore_is_not() {
        let warned = |src: &str| -> Vec<String> {
            let c = checked(src);
            c.warnings.iter().map(|w| w.message.clone()).collect()
        };
        let facts = "E(0, 1). F(0, 1).\n";
        assert_eq!(
            warned(&format!("{facts}R(x) :- E(x, y), not F(x, z).\n")),
            vec!["`z` occurs only inside `not`"]
        );
        assert!(warned(&format!("{facts}R(x) :- E(x, _), not F(x, _).\n")).is_empty());
        assert!(warned(&format!("{facts}R(x) :- E(x, y), not F(x, y).\n")).is_empty());
        assert!(
            warned("F = [[1, 0], [0, 1]]\nG[i] = not F[i, j]\n").is_empty(),
            "equations sum as written; only rules are Datalog"
        );
    }
}
