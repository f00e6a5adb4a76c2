//! Dense equations: an elementwise expression (sums, products, quotients, functions,
//! comparisons) over *terms*, each a sum over a product of dense tensors (an einsum:
//! `Y[h] = relu(W[h, i] X[i] + B[h])` has the terms `W[h, i] X[i]` and `B[h]`). Each term is
//! evaluated as a tree of pairwise contractions, each a (batched) matrix product, in the order
//! that needs the fewest floating-point operations; the expression then runs once per output
//! element, reading every term's value there, so functions and additions around a
//! contraction cost one pass over memory, not one per operator.

use super::contraction_path::{best_path, volume};
use super::rows::{RowLayout, RowOp, RowProgram};
use crate::functions::Structural;
use crate::semantics::{
    Checked, Equation, Family, Func, IndexFn, Kind, Node, Stratum, TensorId, VarId,
};
use crate::syntax::ast::{ArithOp, BinOp, CmpOp};

/// One factor: a dense tensor read at plain, distinct variables, or through a window.
#[derive(Clone, Debug, PartialEq)]
pub struct Factor {
    /// The tensor read.
    pub tensor: TensorId,
    /// One variable per axis; for a window, its variables in order of first appearance.
    pub vars: Vec<VarId>,
    /// How positions that are index arithmetic (`Image[x + dx, y + dy]`) read the tensor.
    pub window: Option<Window>,
    /// For a relation read at shifted positions (`Obs(t + 1, o)`): per axis, the constant
    /// added to its variable; empty when the positions are the variables themselves.
    pub shift: Vec<i64>,
}

impl Factor {
    /// Whether a tensor of `shape` is read as a plan over `extents` assumes: a window of its
    /// window's shape, or one axis per variable with that variable's extent. A relation
    /// (`as_relation`) read at a shift may have any extents: its tuples outside them are
    /// skipped. The planner asks it of checked shapes, the kernel again of run-time ones.
    pub fn reads_shape(&self, shape: &[usize], extents: &[usize], as_relation: bool) -> bool {
        if let (Some(w), false) = (&self.window, as_relation) {
            return shape == w.shape.as_slice();
        }
        shape.len() == self.vars.len()
            && ((as_relation && !self.shift.is_empty())
                || shape.iter().zip(&self.vars).all(|(&n, &x)| n == extents[x]))
    }

    /// The factor's variables in the order its tensor lays them out, as positions in
    /// `vars` and as the variables there: by decreasing window stride (as written, for a
    /// factor read whole). A window taken in this order is read in place or copied in
    /// contiguous runs, and a gradient computed in it is added back in runs.
    pub fn memory_order(&self) -> (Vec<usize>, Vec<VarId>) {
        let mut order: Vec<usize> = (0..self.vars.len()).collect();
        if let Some(w) = &self.window {
            order.sort_by_key(|&i| std::cmp::Reverse(w.strides[i].unsigned_abs()));
        }
        let vars = order.iter().map(|&i| self.vars[i]).collect();
        (order, vars)
    }
}

/// A read whose positions are affine in the variables (`[x + dx]`, `[2 x + 1, N - 1 - i]`)
/// and stay inside the tensor for every value of them: the factor is the tensor seen through
/// strides, gathered into a dense operand over its variables (im2col) before it is
/// contracted. Reads that could leave the tensor are not windows: the reference skips those
/// points, which a gathered operand cannot.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// The tensor's shape, which its value must have.
    pub shape: Vec<usize>,
    /// Row-major offset of the element read when every variable is 0.
    pub offset: usize,
    /// Change of that offset per unit of each variable (in `Factor::vars` order).
    pub strides: Vec<i64>,
}

/// The order of pairwise contractions: a binary tree over the factors.
#[derive(Clone, Debug, PartialEq)]
pub enum Path {
    /// Factor `k`.
    Leaf(usize),
    /// The contraction of two subtrees.
    Pair(Box<Path>, Box<Path>),
}

impl Path {
    /// The factors under this node (what [`kept`] takes).
    pub fn factors(&self) -> FactorSet {
        match self {
            Path::Leaf(k) => FactorSet::one(*k),
            Path::Pair(a, b) => a.factors().union(&b.factors()),
        }
    }
}

/// A set of a term's factors, of any number (tensor networks have hundreds).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FactorSet(Vec<u64>);

impl FactorSet {
    /// Factor `k` alone.
    pub fn one(k: usize) -> FactorSet {
        let mut words = vec![0; k / 64 + 1];
        words[k / 64] = 1 << (k % 64);
        FactorSet(words)
    }

    /// The factors whose bits `mask` sets.
    pub(super) fn of_mask(mask: u32) -> FactorSet {
        FactorSet(vec![u64::from(mask)])
    }

    /// Both sets' factors.
    pub fn union(&self, other: &FactorSet) -> FactorSet {
        let (long, short) = match self.0.len() >= other.0.len() {
            true => (self, other),
            false => (other, self),
        };
        let mut words = long.0.clone();
        words.iter_mut().zip(&short.0).for_each(|(w, o)| *w |= o);
        FactorSet(words)
    }

    /// Whether factor `k` is in the set.
    pub fn contains(&self, k: usize) -> bool {
        self.0.get(k / 64).is_some_and(|w| w & (1 << (k % 64)) != 0)
    }
}

/// One term: a sum over a product of factors, scaled by the product of its constants.
#[derive(Clone, Debug, PartialEq)]
pub struct Contraction {
    /// Its free variables (all on the left-hand side), in left-hand-side order.
    pub out: Vec<VarId>,
    /// The tensors multiplied.
    pub factors: Vec<Factor>,
    /// The product of the constant factors.
    pub scale: f64,
    /// Extent of every variable of the equation.
    pub extents: Vec<usize>,
    /// Contraction order of the dense factors (`None` when there are none: a relation alone).
    pub path: Option<Path>,
    /// Multiply-adds of that order, times two.
    pub flops: f64,
    /// Whether its products run in f32: every factor and the target hold f32 (or narrower)
    /// values, so f32 products are exact and only the sums round, as in PyTorch.
    pub single: bool,
    /// A Boolean relation, or a tensor of defined elements, multiplying the dense factors
    /// (`Neig(n, m) Z[m, d]`, `W[n, m] Z[m, d]` read from a valued file): its tuples select
    /// what the dense product adds where (times their values), in time linear in the tuples.
    pub sparse: Option<Factor>,
    /// Tensors whose values must all be finite for `sparse`'s tuples to stand for the whole
    /// product: where it is a tensor stored as its non-zeros (not a mask), its zeros are
    /// numbers, and 0 times an infinity is NaN. Its dense factors, checked before the term
    /// runs (it declines to the loop nests otherwise).
    pub finite: Vec<TensorId>,
    /// What the dense factors' product keeps: `out`, then the relation's other variables.
    pub keep: Vec<VarId>,
    /// Rows of the first output variable evaluated at a time, when a gathered window
    /// (im2col) would otherwise exceed [`CHUNK_ELEMENTS`]: each block of rows gathers only
    /// its part of the window. Rows never depend on each other (§9), so results are the
    /// same.
    pub chunk: Option<usize>,
    /// Per factor, the einsum of its gradient ([`gradient_term`] with the term's adjoint
    /// over `out`), planned once for training's backward passes; empty for a term a
    /// relation multiplies (its backward pass plans over the relation's operands).
    pub gradients: Vec<Contraction>,
}

impl Contraction {
    /// Elements of all intermediates of a subtree: each pairwise result, plus each factor's
    /// permuted copy.
    pub fn intermediates(&self, path: &Path) -> f64 {
        let volume = |vars: &[VarId]| {
            vars.iter()
                .map(|&v| self.extents[v] as f64)
                .product::<f64>()
        };
        let size = volume(&kept(self, &path.factors()));
        match path {
            Path::Leaf(k) => volume(&self.factors[*k].vars) + size,
            Path::Pair(a, b) => self.intermediates(a) + self.intermediates(b) + size,
        }
    }

    /// Elements of the largest result of a pairwise contraction of its path (what a
    /// tensor network's path is judged by beside its FLOPs), 0 with fewer than two factors.
    pub fn largest_intermediate(&self) -> f64 {
        fn largest(c: &Contraction, path: &Path) -> f64 {
            match path {
                Path::Leaf(_) => 0.0,
                Path::Pair(a, b) => volume(c, &kept(c, &path.factors()))
                    .max(largest(c, a))
                    .max(largest(c, b)),
            }
        }
        self.path.as_ref().map_or(0.0, |p| largest(self, p))
    }

    /// A copy for evaluating part of the term (a block of rows), without the gradient
    /// einsums, which only the backward pass reads.
    pub fn forward_copy(&self) -> Contraction {
        Contraction {
            out: self.out.clone(),
            factors: self.factors.clone(),
            scale: self.scale,
            extents: self.extents.clone(),
            path: self.path.clone(),
            flops: self.flops,
            single: self.single,
            sparse: self.sparse.clone(),
            finite: self.finite.clone(),
            keep: self.keep.clone(),
            chunk: self.chunk,
            gradients: Vec::new(),
        }
    }
}

/// The most elements of a grid that is summed after its expression (512 MiB of f64).
pub(crate) const SUMMED_GRID: usize = 1 << 26;

/// The most elements a gathered window may hold before its term is evaluated in blocks of
/// rows (16 MiB of f32).
pub(crate) const CHUNK_ELEMENTS: usize = 1 << 22;

/// Rows of `c.out[0]` per block when one of its windows would gather more than
/// [`CHUNK_ELEMENTS`] and the first output variable divides it.
fn chunk_rows(c: &Contraction) -> Option<usize> {
    let first = *c.out.first()?;
    let gathered = c
        .factors
        .iter()
        .filter(|f| f.window.is_some() && f.vars.contains(&first))
        .map(|f| f.vars.iter().map(|&v| c.extents[v]).product::<usize>())
        .max()?;
    let per_row = gathered / c.extents[first].max(1);
    let rows = (CHUNK_ELEMENTS / per_row.max(1)).max(1);
    (c.sparse.is_none() && gathered > CHUNK_ELEMENTS && rows < c.extents[first]).then_some(rows)
}

/// The elementwise expression over the terms, evaluated in f64 as the reference does.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// The value of term `k` at this element.
    Term(usize),
    /// A number.
    Const(f64),
    /// The position of a left-hand-side variable.
    Var(VarId),
    /// `-e`.
    Neg(Box<Expr>),
    /// `not e`: `1 - e`.
    Not(Box<Expr>),
    /// Factors, each multiplied (`false`) or divided by (`true`).
    Product(Vec<(bool, Expr)>),
    /// `+`, `-`, `^`.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// A comparison: 1 or 0.
    Compare(CmpOp, Box<Expr>, Box<Expr>),
    /// An elementwise function.
    Call(Func, Vec<Expr>),
    /// `softmax` or `lnorm` along a left-hand-side variable's axis.
    Normalize(Structural, VarId, Box<Expr>),
}

/// A planned dense equation.
#[derive(Clone, Debug, PartialEq)]
pub struct DenseEquation {
    /// The equation (index into `Checked::equations`).
    pub equation: usize,
    /// The tensor it adds to.
    pub target: TensorId,
    /// The grid the expression is evaluated over: the left-hand-side variables (one per axis
    /// of the target), then `summed`.
    pub out: Vec<VarId>,
    /// Variables summed after the expression (`Loss = (Y[e] - T[e])^2` sums `e` over an
    /// elementwise expression), innermost in `out`; empty for most equations.
    pub summed: Vec<VarId>,
    /// The contractions it reads.
    pub terms: Vec<Contraction>,
    /// What it computes from them at each element.
    pub expr: Expr,
    /// Extent of every variable of the equation.
    pub extents: Vec<usize>,
    /// The terms' FLOPs plus one per output element and operator.
    pub flops: f64,
    /// The target's shape. It is the extents of the grid's left-hand-side variables, except
    /// under `concat`, whose flattened variables stand in the grid for the one they make
    /// (`M[s, p, m] = concat(O[s, h, p, k])` runs over `[s, p, h, k]`, laid out in memory
    /// exactly as `[s, p, m]`).
    pub target_shape: Vec<usize>,
    /// Where each grid element is added when left-hand-side positions are index arithmetic
    /// (`SumPool[x / 2, y / 2] = F[x, y]`): the positions, evaluated at every element of the
    /// grid (`out`, the variables they use); elements whose position falls outside the
    /// target are skipped, as the reference skips those points.
    pub scatter: Option<Vec<IndexFn>>,
    /// Whether the target holds f32 (or narrower) values: its `softmax` rows are then
    /// computed in f32, as they are stored.
    pub narrow: bool,
    /// For an f32 target that sums nothing after its expression: the f32 product laid out
    /// like the output that does the most work, whose buffer becomes the value, and what is
    /// applied to it there.
    pub in_place: Option<InPlace>,
    /// The expression compiled for row-at-a-time evaluation; `None` when it holds a
    /// normalisation, which becomes a term at run time first.
    pub program: Option<RowProgram>,
    /// Where each row of the grid lies in each term, laid out over its `out`.
    pub layout: RowLayout,
    /// A term built from a relation's tuples whose zeros make the whole expression zero
    /// (`-Tgt(s, p, t) log(P[s, p, t])`): the rows are evaluated, forward and backward, only
    /// at that term's nonzero elements, so work follows the tuples rather than the grid
    /// (the loop nests' skipping of zeros, docs/language.md).
    pub mask: Option<usize>,
    /// Per term, whether its backward pass reads the term's values (a product's other
    /// factor, a function's argument, anything under a `softmax`/`lnorm`, the mask): the
    /// forward pass of a training step keeps only those, and the backward pass computes no
    /// other (`Q[…] = WQ[…] X[…]` passes its adjoint on without its values).
    pub read_back: Vec<bool>,
    /// Elements evaluation allocates beyond its inputs: every term's intermediates (one
    /// block's, for a term computed in blocks, plus the whole term) and the grid; what
    /// `--max-memory` bounds (8 bytes each).
    pub scratch: f64,
}

/// An f32 equation computed over one product's own buffer ([`DenseEquation::in_place`]).
#[derive(Clone, Debug, PartialEq)]
pub struct InPlace {
    /// The term whose buffer it is.
    pub main: usize,
    /// What is applied to it.
    pub epilogue: InPlaceEpilogue,
}

/// What an in-place product's buffer becomes.
#[derive(Clone, Debug, PartialEq)]
pub enum InPlaceEpilogue {
    /// The product itself, scaled.
    Bare,
    /// Softmax or layer normalisation along this output axis.
    Normalize(Structural, usize),
    /// The elementwise expression, a row at a time (it holds no normalisation).
    Rows,
    /// Softmax or layer normalisation along this output axis of an elementwise expression
    /// (compiled here; it holds no normalisation), the expression applied a row at a time
    /// and rounded to f32 first (`softmax(Q K / 8 - 1e9 (q > p))`, `lnorm(W H + X)`), as
    /// an f32 framework computes it.
    NormalizeRows(Structural, usize, RowProgram),
}

impl DenseEquation {
    /// Whether a training step's forward pass keeps each row's `lnorm` divisor, so that the
    /// backward pass needs none of the argument's values: an `lnorm` of an expression along
    /// the grid's last axis, over its product's buffer.
    pub fn divides_rows(&self) -> bool {
        let last = self.out.len().checked_sub(1);
        self.in_place.as_ref().is_some_and(|planned| {
            matches!(planned.epilogue,
                InPlaceEpilogue::NormalizeRows(Structural::Lnorm, axis, _) if Some(axis) == last)
        })
    }
}

impl Expr {
    /// Whether the expression holds a `softmax` or `lnorm`.
    pub fn normalizes(&self) -> bool {
        match self {
            Expr::Normalize(..) => true,
            Expr::Term(_) | Expr::Const(_) | Expr::Var(_) => false,
            Expr::Neg(x) | Expr::Not(x) => x.normalizes(),
            Expr::Product(fs) => fs.iter().any(|(_, f)| f.normalizes()),
            Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => a.normalizes() || b.normalizes(),
            Expr::Call(_, args) => args.iter().any(Expr::normalizes),
        }
    }
}

/// The in-place plan of an f32 equation ([`DenseEquation::in_place`]).
fn in_place(p: &Checked, d: &DenseEquation) -> Option<InPlace> {
    if !d.summed.is_empty() || p.tensors[d.target].elem != crate::tensor::ElemType::F32 {
        return None;
    }
    let (main, _) = d
        .terms
        .iter()
        .enumerate()
        .filter(|(_, c)| c.single && c.out == d.out && (c.path.is_some() || c.sparse.is_some()))
        .max_by(|a, b| a.1.flops.total_cmp(&b.1.flops))?;
    let epilogue = match &d.expr {
        Expr::Term(k) if *k == main => InPlaceEpilogue::Bare,
        Expr::Normalize(kind, var, arg) if matches!(**arg, Expr::Term(k) if k == main) => {
            InPlaceEpilogue::Normalize(*kind, d.out.iter().position(|v| v == var)?)
        }
        Expr::Normalize(kind, var, arg) if !arg.normalizes() => InPlaceEpilogue::NormalizeRows(
            *kind,
            d.out.iter().position(|v| v == var)?,
            RowProgram::compile(arg)?.tabulate(&d.out, &d.extents),
        ),
        e if !e.normalizes() => InPlaceEpilogue::Rows,
        _ => return None,
    };
    Some(InPlace { main, epilogue })
}

/// The dense equations of a stratum when every equation of it is one: not recursive (or
/// recursive in one sum tensor), and every tensor dense, real or integer, and accumulated with `=`/`+=`, or with `max=`/`min=`
/// by equations without summation points.
/// `sparse` marks the tensors stored as their non-zeros (`Plan::sparse`): a sum multiplies
/// by their tuples.
pub(crate) fn plan_dense(p: &Checked, st: &Stratum, sparse: &[bool]) -> Option<Vec<DenseEquation>> {
    // A recursive stratum of one sum tensor iterates its dense equations to the fixpoint
    // (`eval::dense`); others keep the reference loops.
    if st.recursive && (st.tensors.len() != 1 || p.tensors[st.tensors[0]].family != Family::Sum) {
        return None;
    }
    if !st
        .tensors
        .iter()
        .all(|&t| dense_tensor(p, t) && p.tensors[t].family != Family::Avg)
    {
        return None;
    }
    let mut plans = Vec::new();
    for &e in &st.equations {
        let eq = &p.equations[e];
        match plan_one(p, e, eq, sparse) {
            Some(d) => plans.push(d),
            None if !st.recursive => {
                for part in parts(p, eq)? {
                    plans.push(plan_one(p, e, &part, sparse)?);
                }
            }
            None => return None,
        }
    }
    Some(plans)
}

/// A sum of parts that each sum their own variables (a loss with a regulariser,
/// `λ M[x, i] sqrt(M[x, i]) - Train(x, r, y) log(P[x, r, y])`), as one equation per part:
/// `Σ_V (Σ_W₁ P₁ − Σ_W₂ P₂) = Σ_V∪W₁ P₁ − Σ_V∪W₂ P₂`, each then a grid summed after its
/// expression. Exact but for the order of the additions, as long as no point is dropped
/// by a read leaving its tensor (§5.1: that drops every part at that point): so every
/// position must be a constant or affine in one variable, whose range `valid::restricted`
/// then keeps inside the tensor. `None` for anything else, and for fewer than two parts.
fn parts(p: &Checked, eq: &Equation) -> Option<Vec<Equation>> {
    if eq.family != Family::Sum || eq.virtual_var.is_some() {
        return None;
    }
    let eq = super::valid::restricted(p, eq)?;
    let Node::Sum { vars, body } = &eq.rhs else {
        return None;
    };
    let mut simple = true;
    eq.rhs.reads(&mut |_, index| {
        simple &= index
            .iter()
            .all(|f| matches!(f, IndexFn::Const(_)) || super::valid::single(f).is_some());
    });
    let mut found = Vec::new();
    signed(body, false, &mut found);
    if !simple || found.len() < 2 {
        return None;
    }
    let split = found.into_iter().map(|(negated, part)| {
        let (mut summed, body) = match part {
            Node::Sum { vars, body } => (vars.clone(), (**body).clone()),
            other => (Vec::new(), other.clone()),
        };
        summed.splice(0..0, vars.iter().copied());
        let body = match negated {
            true => Node::Neg(Box::new(body)),
            false => body,
        };
        Equation {
            rhs: Node::Sum {
                vars: summed,
                body: Box::new(body),
            },
            ..eq.as_ref().clone()
        }
    });
    Some(split.collect())
}

/// The parts of sums and differences under `n`, each with whether it is subtracted.
fn signed<'n>(n: &'n Node, negated: bool, out: &mut Vec<(bool, &'n Node)>) {
    match n {
        Node::Binary(BinOp::Add, a, b) => {
            signed(a, negated, out);
            signed(b, negated, out);
        }
        Node::Binary(BinOp::Sub, a, b) => {
            signed(a, negated, out);
            signed(b, !negated, out);
        }
        Node::Neg(a) => signed(a, !negated, out),
        Node::Sum { vars, body } if vars.is_empty() => signed(body, negated, out),
        other => out.push((negated, other)),
    }
}

/// `max=`/`min=` tensors hold only their defined elements; the dense path reads one only
/// when every element is defined (stored dense, checked at run time).
fn dense_tensor(p: &Checked, t: TensorId) -> bool {
    let info = &p.tensors[t];
    info.kind != Kind::Bool
        && (!info.sparse_values || matches!(info.family, Family::Max | Family::Min))
}

/// The dense plan of equation `e` as given by `eq` (the equation itself, or a rewriting of
/// it, such as one step of an index recursion, `plan::steps`), when every tensor it
/// multiplies is dense.
pub(super) fn plan_one(
    p: &Checked,
    e: usize,
    eq: &Equation,
    sparse: &[bool],
) -> Option<DenseEquation> {
    let d = dense_equation(p, e, eq, sparse)?;
    let reads_dense = d
        .terms
        .iter()
        .flat_map(|c| &c.factors)
        .all(|f| dense_tensor(p, f.tensor));
    reads_dense.then_some(d)
}

fn dense_equation(p: &Checked, e: usize, eq: &Equation, sparse: &[bool]) -> Option<DenseEquation> {
    let eq = super::valid::restricted(p, eq)?;
    let eq = eq.as_ref();
    if eq.family == Family::Avg || eq.virtual_var.is_some() {
        return None;
    }
    let extents: Vec<usize> = eq.vars.iter().map(|v| v.range).collect();
    let Grid {
        lhs,
        rhs,
        target_shape,
        scatter,
    } = grid(p, eq, &extents);
    // The grid lays out the target only where it has the variables' shape.
    if p.tensors[eq.target].shape != target_shape {
        return None;
    }
    let mut terms = Vec::new();
    let mut out = lhs.clone();
    let mut summed = Vec::new();
    let mut planned = expr((p, sparse), rhs, &out, &extents, &mut terms);
    // A sum over an elementwise expression (a loss): the expression over the whole grid,
    // then the sum, in the reference's row-major order.
    let mut root = rhs;
    while let Node::Sum { vars, body } = root {
        if !vars.is_empty() {
            break;
        }
        root = body;
    }
    if let (None, Node::Sum { vars, body }, None) = (&planned, root, &scatter) {
        if vars.iter().all(|v| !lhs.contains(v)) {
            terms.clear();
            out.extend(vars);
            summed = vars.clone();
            planned = expr((p, sparse), body, &out, &extents, &mut terms);
            // Relations alone are counting's business (`plan_counts`), by joins.
            if terms.iter().all(|c| c.factors.is_empty()) {
                return None;
            }
        }
    }
    let expr = planned?;
    if terms.is_empty() {
        return None;
    }
    let narrow = |t: TensorId| narrow(p, t);
    for c in &mut terms {
        c.single = narrow(eq.target) && c.factors.iter().all(|f| narrow(f.tensor));
        c.gradients = gradients(p, c);
    }
    if eq.family != Family::Sum && !pointwise(&terms, &summed) {
        return None;
    }
    let elements: f64 = out.iter().map(|&v| extents[v] as f64).product();
    // A grid summed after the expression is held whole: beyond `SUMMED_GRID` elements the
    // loop nests, which hold one point at a time and follow the tuples, take it.
    if !summed.is_empty() && elements > SUMMED_GRID as f64 {
        return None;
    }
    let flops = terms.iter().map(|c| c.flops).sum::<f64>() + elements * size(&expr) as f64;
    let mut d = DenseEquation {
        equation: e,
        target: eq.target,
        out,
        summed,
        terms,
        expr,
        extents,
        flops,
        target_shape,
        scatter,
        narrow: narrow(eq.target),
        in_place: None,
        program: None,
        layout: RowLayout {
            len: 0,
            count: 0,
            steps: Vec::new(),
            dims: Vec::new(),
        },
        scratch: 0.0,
        mask: None,
        read_back: Vec::new(),
    };
    d.program = RowProgram::compile(&d.expr).map(|p| p.tabulate(&d.out, &d.extents));
    d.layout = RowLayout::new(&d, d.terms.iter().map(|c| c.out.as_slice()));
    d.scratch = scratch(&d);
    d.in_place = in_place(p, &d);
    d.mask = mask(p, &d).filter(|_| eq.family == Family::Sum);
    d.read_back = read_back(&d);
    Some(d)
}

/// Whether `t` is held in a precision narrower than f64 (its terms then run in f32).
fn narrow(p: &Checked, t: TensorId) -> bool {
    use crate::tensor::ElemType::{BF16, F16, F32, FP8};
    matches!(p.tensors[t].elem, F32 | BF16 | F16 | FP8)
}

/// A term's gradient einsums, one per factor, in the term's own precision. A program
/// without parameters is never trained, so it plans none (a network of a hundred factors
/// would plan a hundred paths for nothing).
fn gradients(p: &Checked, c: &Contraction) -> Vec<Contraction> {
    if c.sparse.is_some() || p.params.is_empty() {
        return Vec::new();
    }
    (0..c.factors.len())
        .map(|j| gradient_term(c, j, &c.out))
        .collect()
}

/// The grid an equation's dense evaluation runs over: its variables in left-hand-side
/// order (the target's shape where each is written bare), the right-hand side with
/// `concat`s flattened, and, where positions are computed, how each is written.
struct Grid<'e> {
    lhs: Vec<VarId>,
    rhs: &'e Node,
    target_shape: Vec<usize>,
    scatter: Option<Vec<IndexFn>>,
}

fn grid<'e>(p: &Checked, eq: &'e Equation, extents: &[usize]) -> Grid<'e> {
    match distinct_vars(&eq.lhs) {
        Some(written) => {
            let target_shape = written.iter().map(|&v| extents[v]).collect();
            let (lhs, rhs) = flatten_concat(&written, &eq.rhs, extents);
            Grid {
                lhs,
                rhs,
                target_shape,
                scatter: None,
            }
        }
        None => {
            let (lhs, rhs) = flatten_concat_scattered(&eq.lhs, &eq.rhs, extents);
            let mut grid = Vec::new();
            lhs.iter().for_each(|f| index_vars(f, &mut grid));
            Grid {
                lhs: grid,
                rhs,
                target_shape: p.tensors[eq.target].shape.clone(),
                scatter: Some(lhs),
            }
        }
    }
}

/// Under `max=`/`min=` the extreme replaces the sum at every summation point (§7): only
/// equations without any (`Pool[x / 2, y / 2] max= F[x, y]`) are dense, each grid element
/// then combined at its left-hand-side position.
fn pointwise(terms: &[Contraction], summed: &[VarId]) -> bool {
    summed.is_empty()
        && terms.iter().all(|c| {
            c.sparse.is_none()
                && c.factors
                    .iter()
                    .flat_map(|f| &f.vars)
                    .all(|v| c.out.contains(v))
        })
}

/// [`DenseEquation::read_back`]: from the row program's `needed` values, or for a softmax
/// of an expression from its argument's (its Jacobian is in its values alone, which the
/// forward pass keeps), as for an `lnorm` of an expression along the grid's last axis over
/// its product's buffer (the forward pass keeps its rows' divisors too); every term where
/// the expression holds another normalisation (lifted at run time) or a term is a
/// relation's.
fn read_back(d: &DenseEquation) -> Vec<bool> {
    let argument;
    let program = match (&d.program, &d.expr) {
        (Some(program), _) => program,
        (None, Expr::Normalize(kind, _, x))
            if !x.normalizes() && (*kind == Structural::Softmax || d.divides_rows()) =>
        {
            match RowProgram::compile(x) {
                Some(compiled) => {
                    argument = compiled;
                    &argument
                }
                None => return vec![true; d.terms.len()],
            }
        }
        (None, _) => return vec![true; d.terms.len()],
    };
    let mut reads: Vec<bool> = d.terms.iter().map(|c| c.sparse.is_some()).collect();
    if let Some(k) = d.mask {
        reads[k] = true;
    }
    for (op, &needed) in program.ops.iter().zip(&program.needed) {
        if let (RowOp::Term(k), true) = (op, needed) {
            if let Some(r) = reads.get_mut(*k) {
                *r = true;
            }
        }
    }
    reads
}

/// [`DenseEquation::mask`]: a term a relation's tuples make (a mask, never a tensor merely
/// stored as its non-zeros), with no dense factors, whose
/// zeros the expression keeps, under a sum (never `max=`/`min=`, where 0 is a value), for
/// an expression the rows evaluate as planned (not over its own product's buffer).
fn mask(p: &Checked, d: &DenseEquation) -> Option<usize> {
    if d.program.is_none() || d.in_place.is_some() {
        return None;
    }
    (0..d.terms.len()).find(|&k| {
        let c = &d.terms[k];
        c.factors.is_empty()
            && c.sparse
                .as_ref()
                .is_some_and(|f| f.shift.is_empty() && p.masks(f.tensor))
            && vanishes_with(&d.expr, k)
    })
}

/// Whether `e` is zero wherever term `k` is, its other values being finite numbers: term
/// `k` itself, negated, or multiplying (not dividing) a product.
fn vanishes_with(e: &Expr, k: usize) -> bool {
    match e {
        Expr::Term(j) => *j == k,
        Expr::Neg(a) => vanishes_with(a, k),
        Expr::Product(fs) => fs.iter().any(|(div, f)| !div && vanishes_with(f, k)),
        _ => false,
    }
}

/// [`DenseEquation::scratch`].
fn scratch(d: &DenseEquation) -> f64 {
    let grid: f64 = d.out.iter().map(|&v| d.extents[v] as f64).product();
    let terms: f64 = d
        .terms
        .iter()
        .filter_map(|c| {
            let path = c.path.as_ref()?;
            Some(match (c.chunk, c.out.first()) {
                (Some(rows), Some(&first)) => {
                    let mut block = c.forward_copy();
                    block.extents[first] = rows;
                    let out: f64 = c.out.iter().map(|&v| c.extents[v] as f64).product();
                    block.intermediates(path) + out
                }
                _ => c.intermediates(path),
            })
        })
        .sum();
    terms + grid
}

/// The variables of an index position, in order of first appearance, added to `vars`.
fn index_vars(f: &IndexFn, vars: &mut Vec<VarId>) {
    match f {
        IndexFn::Var(v) if !vars.contains(v) => vars.push(*v),
        IndexFn::Var(_) | IndexFn::Const(_) => {}
        IndexFn::Arith(a, _, b) => {
            index_vars(a, vars);
            index_vars(b, vars);
        }
    }
}

/// For a right-hand side that is a `concat` whose flattened variables exactly fill the one
/// they make, the left-hand-side variables with that one replaced by them (outermost first,
/// as §6.4 numbers them) and the argument; otherwise the left-hand side and right-hand side
/// as they are.
fn flatten_concat<'a>(lhs: &[VarId], rhs: &'a Node, extents: &[usize]) -> (Vec<VarId>, &'a Node) {
    let mut root = rhs;
    while let Node::Sum { vars, body } = root {
        if !vars.is_empty() {
            break;
        }
        root = body;
    }
    if let Node::Concat { out, parts, arg } = root {
        let filled = parts.iter().map(|&v| extents[v]).product::<usize>() == extents[*out];
        if let (true, Some(at)) = (filled, lhs.iter().position(|v| v == out)) {
            let mut grid = lhs[..at].to_vec();
            grid.extend(parts);
            grid.extend(&lhs[at + 1..]);
            return (grid, arg);
        }
    }
    (lhs.to_vec(), rhs)
}

/// As [`flatten_concat`] for a left-hand side with index arithmetic (one step of an index
/// recursion, `X[s, l + 1, m] = concat(O[s, l, h, k])`): the position written as the
/// concatenated variable becomes its flattened index, `h · K + k`, scattered like any other
/// arithmetic. Only where that variable is one whole position and appears nowhere else.
fn flatten_concat_scattered<'a>(
    lhs: &[IndexFn],
    rhs: &'a Node,
    extents: &[usize],
) -> (Vec<IndexFn>, &'a Node) {
    if let Node::Concat { out, parts, arg } = rhs.inside_empty_sums() {
        let filled = parts.iter().map(|&v| extents[v]).product::<usize>() == extents[*out];
        let whole: Vec<usize> = (0..lhs.len())
            .filter(|&k| lhs[k] == IndexFn::Var(*out))
            .collect();
        let mut mentioned = Vec::new();
        lhs.iter().for_each(|f| f.vars(&mut mentioned));
        let once = whole.len() == 1 && mentioned.iter().filter(|&&v| v == *out).count() == 1;
        let flat = parts.iter().fold(None, |acc: Option<IndexFn>, &v| {
            Some(match acc {
                None => IndexFn::Var(v),
                Some(a) => IndexFn::Arith(
                    Box::new(IndexFn::Arith(
                        Box::new(a),
                        ArithOp::Mul,
                        Box::new(IndexFn::Const(extents[v] as i64)),
                    )),
                    ArithOp::Add,
                    Box::new(IndexFn::Var(v)),
                ),
            })
        });
        if let (true, true, Some(flat)) = (filled, once, flat) {
            let mut written = lhs.to_vec();
            written[whole[0]] = flat;
            return (written, arg);
        }
    }
    (lhs.to_vec(), rhs)
}

/// Operators in an expression.
fn size(e: &Expr) -> usize {
    match e {
        Expr::Term(_) | Expr::Const(_) | Expr::Var(_) => 0,
        Expr::Neg(x) | Expr::Not(x) => 1 + size(x),
        Expr::Product(fs) => fs.len() + fs.iter().map(|(_, f)| size(f)).sum::<usize>(),
        Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => 1 + size(a) + size(b),
        Expr::Call(_, args) => 1 + args.iter().map(size).sum::<usize>(),
        Expr::Normalize(_, _, x) => 4 + size(x),
    }
}

/// The elementwise expression of a node outside every summation with variables; summations
/// with variables, and reads, become terms.
fn expr(
    (p, sparse): (&Checked, &[bool]),
    n: &Node,
    out: &[VarId],
    extents: &[usize],
    terms: &mut Vec<Contraction>,
) -> Option<Expr> {
    if let Some(k) = super::constants::value(p, n) {
        return Some(Expr::Const(k));
    }
    let mut sub = |x: &Node| expr((p, sparse), x, out, extents, terms);
    Some(match n {
        Node::Sum { vars, body } if vars.is_empty() => return sub(body),
        // Σ (a ± b) = Σ a ± Σ b, when each side reads every summed variable (a side
        // without one would be counted once per value of it): each sum is then a term
        // (`relu(WAgg[l, d, e] Agg[n, l, e] + WSelf[l, d, e] Emb[n, l, e])`).
        Node::Sum { vars, body } if split(vars, body).is_some() => {
            let (op, a, b) = split(vars, body)?;
            let sum = |x: &Node| Node::Sum {
                vars: vars.clone(),
                body: Box::new(x.clone()),
            };
            let (a, b) = (sub(&sum(a))?, sub(&sum(b))?);
            Expr::Binary(op, Box::new(a), Box::new(b))
        }
        // Σ over groups of factors that share no summed variable is the product of the
        // groups' sums (`Alpha[t, r] Trans[r, s] Emit[s, o] Obs(t + 1, o)`: a GEMV times
        // a gather), far fewer operations than one grid over every variable.
        Node::Sum { vars, body } if independent(p, vars, body).is_some() => {
            return sub(&independent(p, vars, body)?);
        }
        Node::Sum { .. } | Node::Read { .. } => {
            terms.push(contraction((p, sparse), n, out, extents)?);
            Expr::Term(terms.len() - 1)
        }
        Node::Const(k) => Expr::Const(k.value()),
        Node::Var(v) if out.contains(v) => Expr::Var(*v),
        Node::Neg(x) => Expr::Neg(Box::new(sub(x)?)),
        Node::Not(x) => Expr::Not(Box::new(sub(x)?)),
        Node::Product(fs) => Expr::Product(
            fs.iter()
                .map(|(div, f)| Some((*div, sub(f)?)))
                .collect::<Option<_>>()?,
        ),
        // An integer `%` or `//` is nothing where it divides by 0, which a dense array cannot
        // hold: the loop nests take it.
        Node::Binary(op, a, b)
            if crate::semantics::divides_integers(*op, (a, b), &|t| p.tensors[t].kind) =>
        {
            return None
        }
        Node::Binary(op, a, b) => Expr::Binary(*op, Box::new(sub(a)?), Box::new(sub(b)?)),
        Node::Compare(op, a, b) => Expr::Compare(*op, Box::new(sub(a)?), Box::new(sub(b)?)),
        Node::Call(f, args) => Expr::Call(f.clone(), args.iter().map(sub).collect::<Option<_>>()?),
        Node::Normalize(kind @ (Structural::Softmax | Structural::Lnorm), v, x)
            if out.contains(v) =>
        {
            Expr::Normalize(*kind, *v, Box::new(sub(x)?))
        }
        _ => return None,
    })
}

/// One term: a sum (or a read) over a product of tensor reads and constants, with its
/// contraction path; `None` where `n` is not one, or a free variable is not on the
/// left-hand side, or a summed one is read by no factor.
fn contraction(
    (p, sparse): (&Checked, &[bool]),
    n: &Node,
    out: &[VarId],
    extents: &[usize],
) -> Option<Contraction> {
    let mut c = Contraction {
        out: Vec::new(),
        factors: Vec::new(),
        scale: 1.0,
        extents: extents.to_vec(),
        path: None,
        flops: 0.0,
        single: false,
        sparse: None,
        finite: Vec::new(),
        keep: Vec::new(),
        chunk: None,
        gradients: Vec::new(),
    };
    collect((p, sparse), n, &mut c)?;
    if c.sparse.as_ref().is_some_and(|f| !p.masks(f.tensor)) {
        c.finite = c.factors.iter().map(|f| f.tensor).collect();
    }
    // Free variables must all be on the left-hand side; summed ones must be read (a
    // summed variable no factor reads would multiply the term by its extent).
    let read = |v: VarId| {
        c.factors
            .iter()
            .chain(&c.sparse)
            .any(|f| f.vars.contains(&v))
    };
    let empty = c.factors.is_empty() && c.sparse.is_none();
    if empty || !summed(n).into_iter().all(read) {
        return None;
    }
    c.out = out.iter().copied().filter(|&v| read(v)).collect();
    c.keep = c.out.clone();
    for k in 0..c.factors.len() {
        order_window(&mut c, k);
    }
    for &v in c.sparse.iter().flat_map(|f| &f.vars) {
        if !c.keep.contains(&v) {
            c.keep.push(v);
        }
    }
    if !c.factors.is_empty() {
        let (path, flops) = best_path(&c);
        c.path = Some(path);
        c.flops = flops;
    }
    c.chunk = chunk_rows(&c);
    Some(c)
}

/// The operator and sides of a summation point's body that is a sum or difference both of
/// whose sides read every variable summed there.
fn split<'n>(vars: &[VarId], body: &'n Node) -> Option<(BinOp, &'n Node, &'n Node)> {
    let Node::Binary(op @ (BinOp::Add | BinOp::Sub), a, b) = body.inside_empty_sums() else {
        return None;
    };
    let reads_all = |n: &Node| {
        let mut used = Vec::new();
        read_vars(n, &mut used);
        vars.iter().all(|v| used.contains(v))
    };
    (reads_all(a) && reads_all(b)).then_some((*op, a.as_ref(), b.as_ref()))
}

/// `Σ_vars Π factors` as the product of one sum per group of factors connected by summed
/// variables (factors that sum none first), when there are at least two such groups and
/// each reads a tensor that is not a relation; `None` otherwise. Only multiplied factors
/// are regrouped.
fn independent(p: &Checked, vars: &[VarId], body: &Node) -> Option<Node> {
    let Node::Product(fs) = body.inside_empty_sums() else {
        return None;
    };
    if vars.is_empty() || fs.iter().any(|(div, _)| *div) {
        return None;
    }
    let summed_in = |n: &Node| {
        let mut used = Vec::new();
        n.mentioned_vars(&mut used);
        used.retain(|v| vars.contains(v));
        used
    };
    // Each summed variable's group: the smallest position in `vars` it is linked to.
    let mut group: Vec<usize> = (0..vars.len()).collect();
    let position = |v: VarId| vars.iter().position(|&x| x == v);
    loop {
        let mut changed = false;
        for (_, f) in fs {
            let at: Vec<usize> = summed_in(f).into_iter().filter_map(position).collect();
            let Some(low) = at.iter().map(|&k| group[k]).min() else {
                continue;
            };
            for k in at {
                if group[k] != low {
                    group[k] = low;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut roots: Vec<usize> = group.clone();
    roots.sort_unstable();
    roots.dedup();
    if roots.len() < 2 {
        return None;
    }
    let group_of = |f: &Node| {
        summed_in(f)
            .first()
            .and_then(|&v| position(v))
            .map(|k| group[k])
    };
    let mut free: Vec<(bool, Node)> = Vec::new();
    let mut sums: Vec<(bool, Node)> = Vec::new();
    for root in roots {
        let members: Vec<(bool, Node)> = fs
            .iter()
            .filter(|(_, f)| group_of(f) == Some(root))
            .cloned()
            .collect();
        let dense = members.iter().any(|(_, f)| {
            let mut dense = false;
            f.reads(&mut |t, _| dense |= p.tensors[t].kind != crate::semantics::Kind::Bool);
            dense
        });
        if !dense {
            return None;
        }
        let group_vars: Vec<VarId> = (0..vars.len())
            .filter(|&k| group[k] == root)
            .map(|k| vars[k])
            .collect();
        sums.push((
            false,
            Node::Sum {
                vars: group_vars,
                body: Box::new(Node::Product(members)),
            },
        ));
    }
    free.extend(fs.iter().filter(|(_, f)| group_of(f).is_none()).cloned());
    free.extend(sums);
    Some(Node::Product(free))
}

/// Variables that the reads of a node index.
fn read_vars(n: &Node, out: &mut Vec<VarId>) {
    if let Node::Read { index, .. } = n {
        index.iter().for_each(|f| f.vars(out));
    }
    n.children().into_iter().for_each(|c| read_vars(c, out));
}

/// The variables of an index list made of distinct plain variables (`[i, j]`, not `[i, i]`
/// or `[i + 1]`).
fn distinct_vars(index: &[IndexFn]) -> Option<Vec<VarId>> {
    let vars: Vec<VarId> = index
        .iter()
        .map(|f| match f {
            IndexFn::Var(v) => Some(*v),
            _ => None,
        })
        .collect::<Option<_>>()?;
    (1..vars.len())
        .all(|k| !vars[..k].contains(&vars[k]))
        .then_some(vars)
}

/// Variables summed anywhere in a node.
fn summed(n: &Node) -> Vec<VarId> {
    let mut vs = match n {
        Node::Sum { vars, .. } => vars.clone(),
        _ => Vec::new(),
    };
    for c in n.children() {
        vs.extend(summed(c));
    }
    vs
}

/// Gathers factors and constants from sums (any variables) and products (dividing only by
/// constants, as in `Q[p, d] K[q, d] / 8` or `/ sqrt(Dk)`), and at most one Boolean
/// relation. Constants (`plan::constants`) fold into the term's scale.
fn collect((p, sparse): (&Checked, &[bool]), n: &Node, c: &mut Contraction) -> Option<()> {
    if let Some(k) = super::constants::value(p, n) {
        c.scale *= k;
        return Some(());
    }
    match n {
        Node::Sum { body, .. } => collect((p, sparse), body, c),
        Node::Product(fs) => fs.iter().try_for_each(|(div, f)| match (div, f) {
            (true, f) => {
                c.scale /= super::constants::value(p, f)?;
                Some(())
            }
            (false, f) => collect((p, sparse), f, c),
        }),
        Node::Read {
            tensor,
            index,
            slice: false,
        } => {
            // Relations, and tensors of defined elements given as data (their undefined
            // elements read 0 in a sum), multiply by their tuples.
            let info = &p.tensors[*tensor];
            let stored_sparse = sparse.get(*tensor) == Some(&true);
            let bool = info.kind == Kind::Bool
                || (info.sparse_values && info.family == Family::Sum)
                || stored_sparse;
            let f = match distinct_vars(index) {
                Some(vars) => Factor {
                    tensor: *tensor,
                    vars,
                    window: None,
                    shift: Vec::new(),
                },
                None if !bool => {
                    let (vars, w) = window(index, &p.tensors[*tensor].shape, &c.extents)?;
                    Factor {
                        tensor: *tensor,
                        vars,
                        window: Some(w),
                        shift: Vec::new(),
                    }
                }
                None => {
                    let (vars, shift) = shifted(index)?;
                    Factor {
                        tensor: *tensor,
                        vars,
                        window: None,
                        shift,
                    }
                }
            };
            if bool {
                if c.sparse.is_some() {
                    return None;
                }
                c.sparse = Some(f);
            } else {
                c.factors.push(f);
            }
            Some(())
        }
        _ => None,
    }
}

/// The variables and per-axis constants of positions that are each a distinct variable
/// plus a constant (`Obs(t + 1, o)`), for a relation read through its shifted tuples.
fn shifted(index: &[IndexFn]) -> Option<(Vec<VarId>, Vec<i64>)> {
    let mut vars = Vec::with_capacity(index.len());
    let mut shift = Vec::with_capacity(index.len());
    for f in index {
        let (coefs, c) = affine(f)?;
        let [(v, 1)] = coefs[..] else {
            return None;
        };
        if vars.contains(&v) {
            return None;
        }
        vars.push(v);
        shift.push(c);
    }
    // Positions the valid-range rewriting left as `x + 0` read the tuples as they are.
    if shift.iter().all(|&c| c == 0) {
        shift.clear();
    }
    Some((vars, shift))
}

/// The window of a read at affine positions that stay inside `shape` for every value of the
/// variables (each ranging over its extent), with its variables; `None` otherwise.
fn window(index: &[IndexFn], shape: &[usize], extents: &[usize]) -> Option<(Vec<VarId>, Window)> {
    if index.len() != shape.len() {
        return None;
    }
    let mut vars: Vec<VarId> = Vec::new();
    let mut strides: Vec<i64> = Vec::new();
    let mut offset = 0i64;
    let mut step = 1i64;
    for (f, &n) in index.iter().zip(shape).rev() {
        let (coefs, constant) = affine(f)?;
        let (mut low, mut high) = (constant, constant);
        for &(v, k) in &coefs {
            let last = i64::try_from(*extents.get(v)?).ok()?.checked_sub(1)?;
            let reach = k.checked_mul(last)?;
            if reach < 0 {
                low = low.checked_add(reach)?;
            } else {
                high = high.checked_add(reach)?;
            }
            let at = match vars.iter().position(|&x| x == v) {
                Some(at) => at,
                None => {
                    vars.push(v);
                    strides.push(0);
                    vars.len() - 1
                }
            };
            strides[at] = strides[at].checked_add(k.checked_mul(step)?)?;
        }
        if low < 0 || high >= i64::try_from(n).ok()? {
            return None;
        }
        offset = offset.checked_add(constant.checked_mul(step)?)?;
        step = step.checked_mul(i64::try_from(n).ok()?)?;
    }
    // Variables were met from the last axis to the first; put them in reading order.
    vars.reverse();
    strides.reverse();
    Some((
        vars,
        Window {
            shape: shape.to_vec(),
            offset: usize::try_from(offset).ok()?,
            strides,
        },
    ))
}

/// Orders a window's variables as its gathered operand is best laid out for the product:
/// the summed ones first, in the order another factor holds them, then the output's, in
/// output order. The product then reads the operand in place as a (transposed) matrix, and
/// the gather copies the output's last variable in runs (`In[b, c, x + dx, y + dy]` against
/// `W[o, c, dx, dy]` is gathered as `[c, dx, dy, b, x, y]`).
fn order_window(c: &mut Contraction, k: usize) {
    let Some(w) = &c.factors[k].window else {
        return;
    };
    let vars = &c.factors[k].vars;
    let rank = |v: VarId| -> (usize, usize) {
        if let Some(at) = c.out.iter().position(|&o| o == v) {
            return (2, at);
        }
        let held = c
            .factors
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != k)
            .find_map(|(_, f)| f.vars.iter().position(|&x| x == v));
        match held {
            Some(at) => (0, at),
            None => (1, vars.iter().position(|&x| x == v).unwrap_or(0)),
        }
    };
    let mut order: Vec<usize> = (0..vars.len()).collect();
    order.sort_by_key(|&i| rank(vars[i]));
    let (vars, strides) = order.iter().map(|&i| (vars[i], w.strides[i])).unzip();
    let f = &mut c.factors[k];
    f.vars = vars;
    if let Some(w) = &mut f.window {
        w.strides = strides;
    }
}

/// A position as integer coefficients of variables (each once) plus a constant; `None` for
/// one that is not affine (a division, a product of variables).
pub(crate) fn affine(f: &IndexFn) -> Option<(Vec<(VarId, i64)>, i64)> {
    Some(match f {
        IndexFn::Var(v) => (vec![(*v, 1)], 0),
        IndexFn::Const(k) => (Vec::new(), *k),
        IndexFn::Arith(a, op, b) => {
            let ((ca, ka), (cb, kb)) = (affine(a)?, affine(b)?);
            let scaled = |cs: Vec<(VarId, i64)>, k: i64, by: i64| -> Option<_> {
                let cs = cs
                    .into_iter()
                    .map(|(v, c)| Some((v, c.checked_mul(by)?)))
                    .collect::<Option<Vec<_>>>()?;
                Some((cs, k.checked_mul(by)?))
            };
            match op {
                ArithOp::Add | ArithOp::Sub => {
                    let sign = if *op == ArithOp::Add { 1 } else { -1 };
                    let (cb, kb) = scaled(cb, kb, sign)?;
                    let mut cs = ca;
                    for (v, c) in cb {
                        match cs.iter_mut().find(|(x, _)| *x == v) {
                            Some((_, d)) => *d = d.checked_add(c)?,
                            None => cs.push((v, c)),
                        }
                    }
                    (cs, ka.checked_add(kb)?)
                }
                ArithOp::Mul if ca.is_empty() => scaled(cb, kb, ka)?,
                ArithOp::Mul if cb.is_empty() => scaled(ca, ka, kb)?,
                _ => return None,
            }
        }
    })
}

/// Variables of a set of factors (a bitmask) still needed after contracting them: those of
/// the output, of the relation, and of the factors outside the set.
pub(crate) fn kept(c: &Contraction, set: &FactorSet) -> Vec<VarId> {
    let mut vs: Vec<VarId> = Vec::new();
    for (k, f) in c.factors.iter().enumerate() {
        if set.contains(k) {
            for &v in &f.vars {
                if !vs.contains(&v) {
                    vs.push(v);
                }
            }
        }
    }
    vs.retain(|v| {
        c.keep.contains(v)
            || c.factors
                .iter()
                .enumerate()
                .any(|(k, f)| !set.contains(k) && f.vars.contains(v))
    });
    vs.sort_unstable();
    vs
}

/// The einsum that gives the gradient of factor `j` of `c`: the term's adjoint (factor 0,
/// over `adjoint`) times the other factors, onto factor `j`'s variables, with the contraction
/// order of fewest FLOPs. Factor 0 names no tensor: the evaluator supplies it.
pub(crate) fn gradient_term(c: &Contraction, j: usize, adjoint: &[VarId]) -> Contraction {
    let mut factors = vec![Factor {
        tensor: usize::MAX,
        vars: adjoint.to_vec(),
        window: None,
        shift: Vec::new(),
    }];
    factors.extend(
        c.factors
            .iter()
            .enumerate()
            .filter(|&(k, _)| k != j)
            .map(|(_, f)| f.clone()),
    );
    // Computed in the order the factor's tensor lays its variables out, in which its
    // adjoint is added: the last product then writes it without a permutation.
    let target = c
        .factors
        .get(j)
        .map(|f| f.memory_order().1)
        .unwrap_or_default();
    let mut g = Contraction {
        out: target.clone(),
        factors,
        scale: 1.0,
        extents: c.extents.clone(),
        path: None,
        flops: 0.0,
        single: c.single,
        sparse: None,
        finite: Vec::new(),
        keep: target,
        chunk: None,
        gradients: Vec::new(),
    };
    let (path, flops) = best_path(&g);
    g.path = Some(path);
    g.flops = flops;
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    fn plans(src: &str) -> Vec<Option<Vec<DenseEquation>>> {
        let c = checked(src);
        c.strata
            .iter()
            .filter(|s| !s.equations.is_empty())
            .map(|s| plan_dense(&c, s, &[]))
            .collect()
    }

    /// A product's values are read back only where a derivative needs them.
    #[test]
    fn the_backward_pass_reads_back_only_what_it_needs() {
        let read = |src: &str| plans(src)[0].as_ref().unwrap()[0].read_back.clone();
        let w = "W : real[3, 4]\nX : real[4]\nB : real[3]\n";
        assert_eq!(read(&format!("{w}Y[h] = W[h, i] X[i]\n")), vec![false]);
        assert_eq!(
            read(&format!("{w}Y[h] = W[h, i] X[i] + B[h]\n")),
            vec![false, false]
        );
        assert_eq!(
            read(&format!("{w}Y[h] = relu(W[h, i] X[i] + B[h])\n")),
            vec![true, true]
        );
        assert_eq!(read(&format!("{w}Y[h] = W[h, i] X[i] B[h]\n")).len(), 1);
        assert_eq!(
            read(&format!("{w}Y[h] = softmax(W[h, i] X[i] / 2 - B[h])\n")),
            vec![false, false]
        );
        // An lnorm along the grid's last axis keeps its divisors, along another it does not.
        assert_eq!(
            read(&format!("{w}Y[h.] = lnorm(W[h, i] X[i] + B[h])\n")),
            vec![false, false]
        );
        assert_eq!(
            read(&format!("{w}Y[h.] = lnorm(relu(W[h, i] X[i]) + B[h])\n")),
            vec![true, false]
        );
        assert_eq!(
            read(&format!(
                "{w}V : real[4, 2]\nY[h., j] = lnorm(W[h, i] V[i, j] + B[h])\n"
            )),
            vec![true, true]
        );
    }

    #[test]
    fn matmuls_and_layers_are_dense_equations() {
        let p = plans("A : real[2, 3]\nB : real[3, 4]\nC[i, k] = A[i, j] B[j, k]\n");
        let c = &p[0].as_ref().unwrap()[0];
        assert_eq!(c.terms[0].factors.len(), 2);
        assert_eq!(c.terms[0].flops, 2.0 * 2.0 * 3.0 * 4.0 + 6.0 + 12.0);
        let p =
            plans("W : real[3, 4]\nX : real[4]\nB : real[3]\nY[h] = relu(W[h, i] X[i] + B[h])\n");
        let y = &p[0].as_ref().unwrap()[0];
        assert_eq!(y.terms.len(), 2);
        assert!(matches!(y.expr, Expr::Call(..)), "{:?}", y.expr);
        let p = plans("Q : real[4, 8]\nK : real[4, 8]\nS[p, q] = softmax(Q[p, d] K[q, d] / 4)\n");
        let s = &p[0].as_ref().unwrap()[0];
        assert_eq!(s.terms[0].scale, 0.25);
        assert!(matches!(s.expr, Expr::Normalize(..)), "{:?}", s.expr);
    }

    #[test]
    fn sums_over_elementwise_expressions_sum_after_the_expression() {
        let first = |src: &str| plans(src).into_iter().flatten().flatten().next().unwrap();
        let d = first("Y = [1, 2]\nP = [0.5, 0.25]\nLoss = (P[e] - Y[e])^2\n");
        assert_eq!(d.summed.len(), 1);
        assert_eq!(d.out, d.summed);
        let d = first("X = [1, 2, 3]\nY[i] = X[i] X[j] (i != j)\n");
        assert_eq!(d.out.len(), 2);
        assert_eq!(d.summed.len(), 1);
    }

    #[test]
    fn the_optimal_order_contracts_the_small_side_first() {
        // (A·B)·x costs n³; A·(B·x) costs n².
        let p = plans(
            "A : real[50, 50]\nB : real[50, 50]\nX : real[50]\nY[i] = A[i, j] B[j, k] X[k]\n",
        );
        let c = &p[0].as_ref().unwrap()[0].terms[0];
        let Some(Path::Pair(l, r)) = &c.path else {
            panic!()
        };
        assert!(matches!(**l, Path::Leaf(0)), "{:?}", c.path);
        assert!(matches!(**r, Path::Pair(..)), "{:?}", c.path);
    }

    #[test]
    fn a_term_of_a_hundred_factors_gets_a_path() {
        // A term of any number of factors is one contraction with a path (a tensor network
        // of a hundred is never a loop nest over every point).
        let chain: Vec<String> = (0..100).map(|k| format!("A[i{k}, i{}]", k + 1)).collect();
        let many = format!("A : real[2, 2]\nY[i0, i100] = {}\n", chain.join(" "));
        let d = plans(&many).into_iter().flatten().flatten().next().unwrap();
        assert_eq!(d.terms.len(), 1);
        assert_eq!(d.terms[0].factors.len(), 100);
        assert!(
            d.terms[0].path.as_ref().unwrap().factors() == FactorSet(vec![u64::MAX, (1 << 36) - 1])
        );
    }

    #[test]
    fn recursion_two_relations_divided_reads_and_unfilled_concats_are_not() {
        // A `concat` whose parts fill the variable they make runs over them.
        let filled = plans("S : real[3, 4]\nP[k] = concat(S[i, j])\n");
        let grid = filled[0]
            .as_ref()
            .map(|d| (d[0].out.len(), d[0].target_shape.clone()));
        assert_eq!(grid, Some((2, vec![12])));
        // A read that stays inside its tensor is a window.
        let inside = plans("X : real[3]\nY[i] = X[i + 1]\n");
        let window = inside[0]
            .as_ref()
            .and_then(|d| d[0].terms[0].factors[0].window.clone());
        assert_eq!(window.map(|w| (w.offset, w.strides)), Some((1, vec![1])));
        // One that can leave it runs over the interval where it stays inside (`plan::valid`),
        // writing each element at its shifted position.
        let shifted = plans("X : real[3]\nY : real[3]\nY[i] = X[i + 1]\n");
        let grid = shifted[0]
            .as_ref()
            .map(|d| (d[0].extents.clone(), d[0].scatter.is_some()));
        assert_eq!(grid, Some((vec![2], true)));
        for src in [
            "X : real[4]\nY[i] = X[i / 2]\n",
            "E(0, 1).\nY[i] = E(i, j) E(j, k)\n",
            "S : real[3, 4]\nP : real[13]\nP[k] = concat(S[i, j])\n",
        ] {
            assert!(plans(src).iter().all(Option::is_none), "{src}");
        }
    }
}
