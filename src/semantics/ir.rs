//! The checked program: what semantic analysis hands to an evaluator.
//!
//! Names are resolved to ids, domains and extents are fixed, summation points carry the
//! variables they sum (§6.2), and equations are grouped into strata in evaluation order.

use crate::diagnostics::Span;
use crate::functions::{Builtin, Structural};
use crate::syntax::ast::{ArithOp, BinOp, CmpOp, Num};
use crate::tensor::{ElemType, Tensor};

/// Index of a tensor in [`Checked::tensors`].
pub type TensorId = usize;
/// Index of a variable in [`Equation::vars`].
pub type VarId = usize;
/// Index of a domain in [`Checked::domains`].
pub type DomainId = usize;

/// Everything an evaluator needs to run a program.
#[derive(Clone, Debug)]
pub struct Checked {
    /// All tensors, data and derived.
    pub tensors: Vec<TensorInfo>,
    /// All domains; symbolic ones hold their symbols in interning order.
    pub domains: Vec<Domain>,
    /// All equations (rules are equations too).
    pub equations: Vec<Equation>,
    /// Strongly connected components in evaluation order.
    pub strata: Vec<Stratum>,
    /// Initial data per tensor (facts, literals, files, bindings), already in final shape.
    pub data: Vec<Option<Tensor>>,
    /// Parameters (§12): tensors declared or initialised but defined by neither data nor
    /// equations, whose `data` holds their initial (or checkpoint) values.
    pub params: Vec<TensorId>,
    /// Queries and file writes, in source order.
    pub outputs: Vec<Output>,
    /// Scalar constants, for resolving queries given later.
    pub scalars: std::collections::BTreeMap<String, f64>,
    /// Likely mistakes that do not stop the program (`W` codes), in source order.
    pub warnings: Vec<crate::diagnostics::Diagnostic>,
    /// The rules' string calls, whose tables the session fills in rounds (§8).
    pub strings: Vec<super::StringSite>,
}

impl Checked {
    /// Each registered function (§16) the program calls, once, with the first equation
    /// calling it.
    pub fn user_functions(&self) -> Vec<(String, crate::diagnostics::Span)> {
        let mut out: Vec<(String, crate::diagnostics::Span)> = Vec::new();
        for eq in &self.equations {
            eq.rhs.user_calls(&mut |name| {
                if !out.iter().any(|(n, _)| n == name) {
                    out.push((name.to_string(), eq.span));
                }
            });
        }
        out
    }

    /// How a multiplied factor masks its product, if it does: where a relation's atom or a
    /// comparison is false, or a tensor of defined elements has no element, the product is
    /// 0 whatever its other factors are, infinite or NaN included, as a join leaves out the
    /// tuples it does not meet and `torch.sparse` and SciPy leave out a sparse matrix's
    /// missing entries (docs/language.md, "Masks"). A defined element multiplies as any
    /// number does.
    pub fn mask(&self, factor: &Node) -> Option<Mask> {
        match factor.inside_empty_sums() {
            Node::Read { tensor, .. } => self.read_mask(*tensor),
            Node::Compare(..) => Some(Mask::False),
            _ => None,
        }
    }

    /// Whether a read of tensor `t` masks a product it multiplies ([`Checked::mask`]): a
    /// relation or a tensor of defined elements. Any other tensor's zeros are numbers, even
    /// where the plan stores it as its non-zeros.
    pub fn masks(&self, t: TensorId) -> bool {
        self.read_mask(t).is_some()
    }

    fn read_mask(&self, t: TensorId) -> Option<Mask> {
        let info = &self.tensors[t];
        match (info.kind == Kind::Bool, info.sparse_values) {
            (true, _) => Some(Mask::False),
            (false, true) => Some(Mask::Undefined),
            (false, false) => None,
        }
    }

    /// The id of the tensor called `name`.
    pub fn tensor_id(&self, name: &str) -> Option<TensorId> {
        self.tensors.iter().position(|t| t.name == name)
    }
}

/// Where a factor masks its product ([`Checked::mask`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask {
    /// Where it is 0: a relation's atom that is false, a comparison that fails.
    False,
    /// Where its element is undefined: a tensor of defined elements.
    Undefined,
}

/// How values combine at summation points and on the left-hand side (§7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `=` and `+=`.
    Sum,
    /// `max=`.
    Max,
    /// `min=`.
    Min,
    /// `avg=`.
    Avg,
}

/// Value kind of a tensor (§4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Boolean: written with parentheses somewhere.
    Bool,
    /// Exact integer arithmetic over Boolean and integer operands.
    Int,
    /// Real-valued.
    Real,
}

/// What the checker knows about one tensor.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// Its name.
    pub name: String,
    /// Value kind.
    pub kind: Kind,
    /// Storage type of its elements.
    pub elem: ElemType,
    /// Domain of each axis.
    pub domains: Vec<DomainId>,
    /// Final extent of each axis.
    pub shape: Vec<usize>,
    /// The value at position 0 of each axis: 0, or the most negative value of an integer
    /// column (§8); a position plus its offset is the value printed and written.
    pub offsets: Vec<i64>,
    /// Accumulation family of its equations.
    pub family: Family,
    /// Whether only defined elements exist (element facts, `max=`/`min=`, valued files).
    pub sparse_values: bool,
    /// Where it first appears, for messages.
    pub span: Span,
    /// Where it is declared, if it is.
    pub declared: Option<Span>,
}

impl TensorInfo {
    /// Its number of elements, saturating at `u128::MAX`: open columns make extents near
    /// 2⁶⁴, whose product over three axes passes even u128.
    pub fn elements(&self) -> u128 {
        self.shape
            .iter()
            .try_fold(1u128, |a, &n| a.checked_mul(n as u128))
            .unwrap_or(u128::MAX)
    }
}

/// A domain of §4.
#[derive(Clone, Debug, Default)]
pub struct Domain {
    /// Declared name, if any.
    pub name: Option<String>,
    /// Symbols in interning order (empty for an integer domain).
    pub symbols: Vec<String>,
    /// Whether any symbol was ever placed in it.
    pub symbolic: bool,
    /// Whether its symbols are numbers (§8): reals (`Price(Apple, 1.25)`), or integers
    /// spread wider than an axis reaches (`Id(0). Id(10000000000).`). Each is written as
    /// [`number_text`] writes it, in increasing order, so positions compare as values do.
    pub real: bool,
    /// Each symbol's position, so that interning a file of a million symbols stays linear.
    pub(crate) index: rustc_hash::FxHashMap<String, usize>,
    /// The values of an *open* integer domain (§8: the columns of relations that no dense
    /// tensor indexes), which positions number; `None` for every other domain, whose
    /// positions are values less an offset (or symbols). Evaluation adds the values it
    /// computes, so the table is shared by every copy of the checked program.
    pub table: Option<std::sync::Arc<crate::tensor::ValueTable>>,
}

impl Domain {
    /// A domain with no symbols yet.
    pub(crate) fn new(name: Option<String>, symbolic: bool) -> Domain {
        Domain {
            name,
            symbolic,
            ..Domain::default()
        }
    }

    /// An open integer domain holding `values` (sorted and distinct).
    pub(crate) fn open(values: Vec<i64>) -> Domain {
        Domain {
            table: Some(std::sync::Arc::new(crate::tensor::ValueTable::new(values))),
            ..Domain::default()
        }
    }

    /// Whether it is an open integer domain, whose positions number values (§8).
    pub fn is_open(&self) -> bool {
        self.table.is_some()
    }

    /// Where `symbol` is numbered, if it was ever placed here.
    pub fn position(&self, symbol: &str) -> Option<usize> {
        self.index.get(symbol).copied()
    }

    /// The value at each position of a real domain.
    pub fn values(&self) -> Vec<f64> {
        self.symbols
            .iter()
            .map(|s| s.parse::<f64>().unwrap_or(f64::NAN))
            .collect()
    }

    /// Renumbers a real domain's values in increasing order, once they are all placed.
    pub(crate) fn sort_values(&mut self) {
        if !self.real {
            return;
        }
        // Integers too close for f64 to tell apart are ordered by their exact values.
        let mut keyed: Vec<((f64, i64), String)> = self
            .values()
            .into_iter()
            .zip(std::mem::take(&mut self.symbols))
            .map(|(v, s)| ((v, s.parse::<i64>().unwrap_or(0)), s))
            .collect();
        keyed.sort_by(|a, b| a.0 .0.total_cmp(&b.0 .0).then(a.0 .1.cmp(&b.0 .1)));
        self.index.clear();
        for (_, s) in keyed {
            self.add(&s);
        }
    }

    /// Numbers `symbol` after the others unless it already has a number (copying it only
    /// then: a file repeats its symbols).
    pub(crate) fn add(&mut self, symbol: &str) {
        if !self.index.contains_key(symbol) {
            self.index.insert(symbol.to_string(), self.symbols.len());
            self.symbols.push(symbol.to_string());
        }
    }
}

/// How a real value is written in a numbered domain, in output and files: the shortest text
/// that reads back to it (`-0` is `0`), so that equal values are one symbol.
pub fn real_text(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    format!("{v}")
}

/// How a number read as text is written in a numbered domain: an integer exactly (all 64
/// bits of `9223372036854775807`), anything else as [`real_text`]; `None` when the text is
/// no finite number.
pub fn number_text(text: &str) -> Option<String> {
    let text = text.trim();
    if let Ok(v) = text.parse::<i64>() {
        return Some(v.to_string());
    }
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .map(real_text)
}

/// One strongly connected component of the dependency graph.
#[derive(Clone, Debug)]
pub struct Stratum {
    /// Tensors computed together.
    pub tensors: Vec<TensorId>,
    /// Equations defining them.
    pub equations: Vec<usize>,
    /// Whether they depend on themselves (a fixpoint is needed).
    pub recursive: bool,
}

/// An index variable of one equation.
#[derive(Clone, Debug)]
pub struct VarInfo {
    /// Its name as written.
    pub name: String,
    /// It ranges over `0..range`.
    pub range: usize,
    /// First occurrence.
    pub span: Span,
    /// The open domain (§8) whose values it holds, if it holds values rather than
    /// positions: its position is then a handle into that domain's table, and its range
    /// is no extent ([`crate::tensor::MAX_EXTENT`] stands for it) but the values the table
    /// holds when it is ranged over (evaluation adds values).
    pub open: Option<DomainId>,
}

/// One equation or rule, lowered.
#[derive(Clone, Debug)]
pub struct Equation {
    /// The tensor it defines.
    pub target: TensorId,
    /// Left-hand-side index functions.
    pub lhs: Vec<IndexFn>,
    /// Variables free on the left-hand side, looped over (excludes the virtual one).
    pub loop_vars: Vec<VarId>,
    /// A virtual index variable, looped sequentially (§5.2).
    pub virtual_var: Option<VarId>,
    /// How values combine.
    pub family: Family,
    /// Whether the head is Boolean (the result is stepped).
    pub bool_head: bool,
    /// Right-hand side; its root is a summation point.
    pub rhs: Node,
    /// Variables, with their ranges.
    pub vars: Vec<VarInfo>,
    /// The statement.
    pub span: Span,
}

/// Index function of one axis: integer arithmetic over variables and constants.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexFn {
    /// A variable.
    Var(VarId),
    /// A constant position.
    Const(i64),
    /// Arithmetic.
    Arith(Box<IndexFn>, ArithOp, Box<IndexFn>),
}

/// Why index arithmetic has no value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoValue {
    /// Division or remainder by zero: the point is nothing.
    Undefined,
    /// The result leaves the i64 range: an error where the value is written (§8).
    Overflow,
}

impl IndexFn {
    /// Its value under `var` (each variable's value) as a comparison takes it: exact in
    /// i128 for `+ - *`, so that `x + 1 > 9007199254740993` compares the true sum (§8); a
    /// value past i64 is a real (which still compares rightly with every i64), and one past
    /// i128 is computed in f64. `/` and `%` by zero give NaN, which compares false.
    pub fn exact(&self, var: &dyn Fn(VarId) -> i64) -> Num {
        fn wide(f: &IndexFn, var: &dyn Fn(VarId) -> i64) -> Option<i128> {
            match f {
                IndexFn::Var(v) => Some(i128::from(var(*v))),
                IndexFn::Const(c) => Some(i128::from(*c)),
                IndexFn::Arith(a, op, b) => {
                    let (a, b) = (wide(a, var)?, wide(b, var)?);
                    match op {
                        ArithOp::Add => a.checked_add(b),
                        ArithOp::Sub => a.checked_sub(b),
                        ArithOp::Mul => a.checked_mul(b),
                        ArithOp::Div => a.checked_div(b),
                        ArithOp::Rem => a.checked_rem(b),
                    }
                }
            }
        }
        fn real(f: &IndexFn, var: &dyn Fn(VarId) -> i64) -> f64 {
            match f {
                IndexFn::Var(v) => var(*v) as f64,
                IndexFn::Const(c) => *c as f64,
                IndexFn::Arith(a, op, b) => {
                    let (a, b) = (real(a, var), real(b, var));
                    match op {
                        ArithOp::Add => a + b,
                        ArithOp::Sub => a - b,
                        ArithOp::Mul => a * b,
                        ArithOp::Div if b == 0.0 => f64::NAN,
                        ArithOp::Div => (a / b).trunc(),
                        ArithOp::Rem => a % b,
                    }
                }
            }
        }
        match wide(self, var) {
            Some(v) => i64::try_from(v).map_or(Num::Real(v as f64), Num::Int),
            None => Num::Real(real(self, var)),
        }
    }

    /// Evaluates under an assignment of variables; `None` on division by zero or overflow.
    pub fn eval(&self, env: &[i64]) -> Option<i64> {
        self.checked(env).ok()
    }

    /// Evaluates under an assignment of variables, telling division by zero from overflow.
    pub fn checked(&self, env: &[i64]) -> Result<i64, NoValue> {
        match self {
            IndexFn::Var(v) => env.get(*v).copied().ok_or(NoValue::Undefined),
            IndexFn::Const(c) => Ok(*c),
            IndexFn::Arith(a, op, b) => {
                let (a, b) = (a.checked(env)?, b.checked(env)?);
                let zero = matches!(op, ArithOp::Div | ArithOp::Rem) && b == 0;
                if zero {
                    return Err(NoValue::Undefined);
                }
                match op {
                    ArithOp::Add => a.checked_add(b),
                    ArithOp::Sub => a.checked_sub(b),
                    ArithOp::Mul => a.checked_mul(b),
                    ArithOp::Div => a.checked_div(b),
                    ArithOp::Rem => a.checked_rem(b),
                }
                .ok_or(NoValue::Overflow)
            }
        }
    }

    /// Variables it mentions.
    pub fn vars(&self, out: &mut Vec<VarId>) {
        match self {
            IndexFn::Var(v) => out.push(*v),
            IndexFn::Const(_) => {}
            IndexFn::Arith(a, _, b) => {
                a.vars(out);
                b.vars(out);
            }
        }
    }
}

/// A called function.
#[derive(Clone, Debug, PartialEq)]
pub enum Func {
    /// A built-in of §6.3.
    Builtin(Builtin),
    /// A registered user function, by name.
    User(String),
}

/// Right-hand-side node.
#[derive(Clone, Debug)]
pub enum Node {
    /// A number: an integer constant exactly (§8: comparisons with any i64 are exact).
    Const(Num),
    /// An index variable used as a value.
    Var(VarId),
    /// A tensor read; `slice` marks a read of the current virtual slice.
    Read {
        /// Which tensor.
        tensor: TensorId,
        /// Index per axis.
        index: Vec<IndexFn>,
        /// A read of the previous virtual slice of the equation's own target.
        slice: bool,
    },
    /// A summation point and the variables summed there.
    Sum {
        /// Summed variables.
        vars: Vec<VarId>,
        /// Body.
        body: Box<Node>,
    },
    /// A join of factors; `true` marks division.
    Product(Vec<(bool, Node)>),
    /// Negation.
    Neg(Box<Node>),
    /// `1 - e`; its operand is read totally (false is 0, not undefined).
    Not(Box<Node>),
    /// Arithmetic.
    Binary(BinOp, Box<Node>, Box<Node>),
    /// Comparison yielding 0/1.
    Compare(CmpOp, Box<Node>, Box<Node>),
    /// Elementwise function.
    Call(Func, Vec<Node>),
    /// `softmax`/`lnorm` over `var`.
    Normalize(Structural, VarId, Box<Node>),
    /// `concat`: `out` enumerates the flattened `parts` (outermost first).
    Concat {
        /// The left-hand-side index that is absent from the argument.
        out: VarId,
        /// Flattened variables.
        parts: Vec<VarId>,
        /// The argument.
        arg: Box<Node>,
    },
}

impl Node {
    /// The node as integer arithmetic (`+`, `-`, products without division, negation) of
    /// variables and integer constants, which comparisons evaluate exactly
    /// ([`IndexFn::exact`]); `None` for any other node.
    pub fn integer_arithmetic(&self) -> Option<IndexFn> {
        let arith = |a, op, b| IndexFn::Arith(Box::new(a), op, Box::new(b));
        Some(match self.inside_empty_sums() {
            Node::Var(v) => IndexFn::Var(*v),
            Node::Const(Num::Int(c)) => IndexFn::Const(*c),
            Node::Neg(a) => arith(IndexFn::Const(0), ArithOp::Sub, a.integer_arithmetic()?),
            Node::Binary(op @ (BinOp::Add | BinOp::Sub), a, b) => {
                let op = match op {
                    BinOp::Add => ArithOp::Add,
                    _ => ArithOp::Sub,
                };
                arith(a.integer_arithmetic()?, op, b.integer_arithmetic()?)
            }
            Node::Product(fs) if !fs.is_empty() && fs.iter().all(|(div, _)| !div) => {
                let mut factors = fs.iter().map(|(_, f)| f.integer_arithmetic());
                let first = factors.next()??;
                factors.try_fold(first, |acc, f| Some(arith(acc, ArithOp::Mul, f?)))?
            }
            _ => return None,
        })
    }

    /// The node inside summation points without variables (which sum nothing).
    pub fn inside_empty_sums(&self) -> &Node {
        match self {
            Node::Sum { vars, body } if vars.is_empty() => body.inside_empty_sums(),
            other => other,
        }
    }

    /// Adds the variables the node mentions, as positions or as values, to `out`.
    pub fn mentioned_vars(&self, out: &mut Vec<VarId>) {
        match self {
            Node::Var(v) => out.push(*v),
            Node::Read { index, .. } => index.iter().for_each(|f| f.vars(out)),
            _ => {}
        }
        self.children()
            .into_iter()
            .for_each(|c| c.mentioned_vars(out));
    }

    /// Calls `f` with every read's tensor and positions.
    pub fn reads(&self, f: &mut dyn FnMut(TensorId, &[IndexFn])) {
        if let Node::Read { tensor, index, .. } = self {
            f(*tensor, index);
        }
        self.children().into_iter().for_each(|c| c.reads(f));
    }

    /// Calls `f` with the name of every registered function (§16) the node calls.
    pub fn user_calls(&self, f: &mut dyn FnMut(&str)) {
        if let Node::Call(Func::User(name), _) = self {
            f(name);
        }
        self.children().into_iter().for_each(|c| c.user_calls(f));
    }

    /// Direct children, so that passes over the tree need not repeat its shape.
    pub fn children(&self) -> Vec<&Node> {
        match self {
            Node::Const(_) | Node::Var(_) | Node::Read { .. } => Vec::new(),
            Node::Sum { body, .. }
            | Node::Neg(body)
            | Node::Not(body)
            | Node::Normalize(_, _, body) => vec![body],
            Node::Concat { arg, .. } => vec![arg],
            Node::Product(fs) => fs.iter().map(|(_, f)| f).collect(),
            Node::Binary(_, a, b) | Node::Compare(_, a, b) => vec![a, b],
            Node::Call(_, args) => args.iter().collect(),
        }
    }

    /// Direct children, mutably.
    pub fn children_mut(&mut self) -> Vec<&mut Node> {
        match self {
            Node::Const(_) | Node::Var(_) | Node::Read { .. } => Vec::new(),
            Node::Sum { body, .. }
            | Node::Neg(body)
            | Node::Not(body)
            | Node::Normalize(_, _, body) => vec![body],
            Node::Concat { arg, .. } => vec![arg],
            Node::Product(fs) => fs.iter_mut().map(|(_, f)| f).collect(),
            Node::Binary(_, a, b) | Node::Compare(_, a, b) => vec![a, b],
            Node::Call(_, args) => args.iter_mut().collect(),
        }
    }
}

/// A query or a file write, answered after evaluation.
#[derive(Clone, Debug)]
pub enum Output {
    /// A query.
    Query(Query),
    /// A file write.
    Write {
        /// Resolved path.
        path: std::path::PathBuf,
        /// Tensor written.
        tensor: TensorId,
        /// The statement.
        span: Span,
    },
}

/// A resolved query pattern.
#[derive(Clone, Debug)]
pub struct Query {
    /// Queried tensor.
    pub tensor: TensorId,
    /// Per axis: a fixed position, or a variable (by number within the query).
    pub pattern: Vec<QueryIndex>,
    /// Whether it was written with parentheses, or bare (`Ancestor?`): a Boolean tensor's
    /// answers then print as atoms, `Ancestor(Alice, Bob)`.
    pub paren: bool,
    /// Where it is.
    pub span: Span,
    /// Likely mistakes in it (a variable named like a constant of its axis).
    pub warnings: Vec<crate::diagnostics::Diagnostic>,
}

/// One position of a query.
#[derive(Clone, Debug, PartialEq)]
pub enum QueryIndex {
    /// A constant.
    Fixed(usize),
    /// A variable; equal numbers must match.
    Var(usize),
    /// A constant outside the axis: the query has no answers.
    Missing,
}
