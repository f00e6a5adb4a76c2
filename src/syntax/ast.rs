//! The syntax tree: statements of §3 and expressions of §6.1, each carrying its span.

use crate::diagnostics::Span;

/// A parsed program: its statements in source order.
#[derive(Clone, Debug, Default)]
pub struct Program {
    /// Statements in source order (order matters for queries, writes and symbol interning).
    pub statements: Vec<Statement>,
}

/// One statement and where it is.
#[derive(Clone, Debug)]
pub struct Statement {
    /// What it says.
    pub kind: StmtKind,
    /// The whole statement.
    pub span: Span,
}

/// A name with its location.
#[derive(Clone, Debug, PartialEq)]
pub struct Name {
    /// The identifier text.
    pub text: String,
    /// Where it is written.
    pub span: Span,
}

/// The statement forms of §3.
#[derive(Clone, Debug)]
pub enum StmtKind {
    /// `C[i,k] = A[i,j] B[j,k]`, `Y[i] max= ...`, `Ancestor(x,z) = ...`.
    Equation {
        /// Left-hand side.
        lhs: Access,
        /// Accumulation operator.
        op: AccumOp,
        /// Right-hand side.
        rhs: Expr,
    },
    /// `H(x) :- B1(x), not B2(x), x != y.`
    Rule {
        /// Head atom.
        head: Access,
        /// Body literals, joined.
        body: Vec<Expr>,
    },
    /// `Parent(Alice, Bob).`
    Fact(Access),
    /// `W = [0.2, 1.9]`.
    Literal {
        /// Tensor name.
        name: Name,
        /// Its values.
        value: DenseLiteral,
    },
    /// `S = 2`.
    Scalar {
        /// Constant name.
        name: Name,
        /// Its value.
        value: f64,
        /// Written as an integer (usable in index arithmetic).
        is_int: bool,
    },
    /// `W1 : real[Hidden, 784]`.
    Declaration {
        /// Tensor name.
        name: Name,
        /// Element type name (`real`, `bool`, `f16`, ...).
        ty: Name,
        /// Axis domains or sizes.
        dims: Vec<Dim>,
    },
    /// `Hidden : 64`, `Person : {Alice, Bob}`.
    Domain {
        /// Domain name.
        name: Name,
        /// Its definition.
        def: DomainDef,
    },
    /// `W ~ normal(0, 0.05)`.
    Init {
        /// Parameter name.
        name: Name,
        /// Distribution name.
        dist: Name,
        /// Its arguments: numbers, or expressions over scalar constants (`1 / sqrt(Dim)`),
        /// valued when the program is checked.
        args: Vec<Expr>,
    },
    /// `Parent = "parent.tsv"`.
    FileRead {
        /// Tensor name.
        name: Name,
        /// Path as written.
        path: String,
    },
    /// `"out.tsv" = Ancestor`.
    FileWrite {
        /// Path as written.
        path: String,
        /// Tensor name.
        name: Name,
    },
    /// `Ancestor(Alice, x)?`.
    Query(Access),
}

/// Accumulation operators of §7.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccumOp {
    /// `=`
    Assign,
    /// `+=`
    Add,
    /// `max=`
    Max,
    /// `min=`
    Min,
    /// `avg=`
    Avg,
}

/// One axis of a declaration.
#[derive(Clone, Debug)]
pub enum Dim {
    /// A named domain.
    Named(Name),
    /// A literal size.
    Size(usize, Span),
}

/// A domain declaration's right-hand side.
#[derive(Clone, Debug)]
pub enum DomainDef {
    /// An integer range `0..n`.
    Size(usize),
    /// A set of symbols, numbered in this order.
    Symbols(Vec<Name>),
}

/// A bracketed literal, flattened while parsing so that a large one costs its values and
/// nothing per element.
#[derive(Clone, Debug)]
pub struct DenseLiteral {
    /// Extent of each nesting level, outermost first.
    pub shape: Vec<usize>,
    /// The numbers in row-major order.
    pub values: Vec<f64>,
    /// From the opening to the closing bracket.
    pub span: Span,
}

/// Which brackets an access uses: parentheses make the tensor Boolean (§4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Brackets {
    /// `Name`
    None,
    /// `Name[...]`
    Square,
    /// `Name(...)`
    Paren,
}

/// A tensor access `Name[i, j]` or `Name(x, y)`.
#[derive(Clone, Debug)]
pub struct Access {
    /// Tensor name.
    pub name: Name,
    /// Bracket style.
    pub brackets: Brackets,
    /// Index expressions.
    pub indices: Vec<Index>,
    /// Whole access.
    pub span: Span,
}

/// An index expression (§5).
#[derive(Clone, Debug)]
pub enum Index {
    /// A name: a variable, a scalar constant or a symbol, resolved later.
    Name(Name),
    /// An integer constant.
    Int(i64, Span),
    /// A quoted symbol.
    Str(String, Span),
    /// A real number in a column (`Price(Apple, 1.25)`, §8).
    Real(f64, Span),
    /// Index arithmetic.
    Arith(Box<Index>, ArithOp, Box<Index>, Span),
    /// A virtual index `*t`, `*t+1`.
    Virtual(Box<Index>, Span),
    /// A normalised index `p'.`.
    Normalized(Name),
    /// A slice `a:b` (either side optional).
    Slice(Option<i64>, Option<i64>, Span),
}

impl Index {
    /// Adds every name inside it (variables, constants, symbols) to `out`.
    pub fn names<'i>(&'i self, out: &mut Vec<&'i str>) {
        match self {
            Index::Name(n) | Index::Normalized(n) => out.push(&n.text),
            Index::Arith(a, _, b, _) => {
                a.names(out);
                b.names(out);
            }
            Index::Virtual(x, _) => x.names(out),
            Index::Int(..) | Index::Str(..) | Index::Real(..) | Index::Slice(..) => {}
        }
    }

    /// Where it is written.
    pub fn span(&self) -> Span {
        match self {
            Index::Name(n) | Index::Normalized(n) => n.span,
            Index::Int(_, s)
            | Index::Str(_, s)
            | Index::Real(_, s)
            | Index::Arith(_, _, _, s)
            | Index::Virtual(_, s)
            | Index::Slice(_, _, s) => *s,
        }
    }
}

/// Operators of index arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`: integer division, truncating toward zero as in Soufflé.
    Div,
    /// `%`: the remainder of that division, with the dividend's sign.
    Rem,
}

/// Binary arithmetic on values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `^`
    Pow,
    /// `%`: the remainder, with the dividend's sign (`fmod`).
    Rem,
    /// Integer division truncating toward zero. It has no syntax (`/` between values is real
    /// division, §4): a value binding's `y = x / 2` becomes it where `y` is used as a value.
    Quot,
}

impl BinOp {
    /// The operation on two values: what a constant expression folds to.
    pub fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            BinOp::Add => a + b,
            BinOp::Sub => a - b,
            BinOp::Pow => a.powf(b),
            BinOp::Rem => a % b,
            BinOp::Quot => (a / b).trunc(),
        }
    }
}

/// Comparison operators (§6.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// A comparison's operand: an integer, held exactly, or a real.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    /// An integer.
    Int(i64),
    /// A real.
    Real(f64),
}

/// 2^63, the first f64 above every i64 (exact: a power of two).
const PAST_I64: f64 = -(i64::MIN as f64);

impl Num {
    /// Its integer value, if it is one (a real with no fraction in the i64 range is one).
    pub fn as_int(self) -> Option<i64> {
        match self {
            Num::Int(v) => Some(v),
            Num::Real(x) => match Num::of(x) {
                Num::Int(v) => Some(v),
                Num::Real(_) => None,
            },
        }
    }

    /// `-self`, exact for integers but i64::MIN.
    pub fn neg(self) -> Num {
        match self {
            Num::Int(v) => v.checked_neg().map_or(Num::Real(-(v as f64)), Num::Int),
            Num::Real(x) => Num::Real(-x),
        }
    }

    /// `self - other`, exact for integers where it stays in i64.
    pub fn minus(self, other: Num) -> Num {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a
                .checked_sub(b)
                .map_or(Num::Real(a as f64 - b as f64), Num::Int),
            (a, b) => Num::Real(a.value() - b.value()),
        }
    }

    /// The number as f64 (rounded past 2⁵³, where arithmetic is real anyway).
    pub fn value(self) -> f64 {
        match self {
            Num::Int(v) => v as f64,
            Num::Real(x) => x,
        }
    }

    /// A number written as an f64: an integer where it is a whole number in the i64 range.
    pub fn of(x: f64) -> Num {
        if x.fract() == 0.0 && (-PAST_I64..PAST_I64).contains(&x) {
            Num::Int(x as i64)
        } else {
            Num::Real(x)
        }
    }
}

/// How integer `a` compares with real `b`, exactly; `None` when `b` is NaN.
fn int_real(a: i64, b: f64) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering::*;
    if b.is_nan() {
        return None;
    }
    if b >= PAST_I64 {
        return Some(Less);
    }
    if b < -PAST_I64 {
        return Some(Greater);
    }
    let whole = b.trunc();
    Some(
        a.cmp(&(whole as i64))
            .then_with(|| 0.0.partial_cmp(&(b - whole)).unwrap_or(Equal)),
    )
}

impl CmpOp {
    /// Whether `a op b` holds; both engines compare through this one definition.
    pub fn holds(self, a: f64, b: f64) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }

    /// Whether `a op b` holds where `a` and `b` may be integers, compared exactly (two
    /// values of an integer column near 2⁶³ that f64 cannot tell apart, §8).
    pub fn holds_num(self, a: Num, b: Num) -> bool {
        let order = match (a, b) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
            (Num::Int(a), Num::Real(b)) => int_real(a, b),
            (Num::Real(a), Num::Int(b)) => int_real(b, a).map(std::cmp::Ordering::reverse),
            (Num::Real(a), Num::Real(b)) => return self.holds(a, b),
        };
        use std::cmp::Ordering::*;
        match (self, order) {
            (CmpOp::Ne, None) => true,
            (_, None) => false,
            (CmpOp::Eq, Some(o)) => o == Equal,
            (CmpOp::Ne, Some(o)) => o != Equal,
            (CmpOp::Lt, Some(o)) => o == Less,
            (CmpOp::Le, Some(o)) => o != Greater,
            (CmpOp::Gt, Some(o)) => o == Greater,
            (CmpOp::Ge, Some(o)) => o != Less,
        }
    }

    /// The operator with its operands swapped: `a < b` is `b > a`.
    pub fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            other => other,
        }
    }
}

/// Right-hand-side expressions (§6.1).
#[derive(Clone, Debug)]
pub enum Expr {
    /// A numeric literal: an integer written as one is held exactly (§8: the whole i64
    /// range), any other as f64.
    Number(Num, Span),
    /// A string: a symbol constant.
    Str(String, Span),
    /// A tensor access, a bare name, or an index variable used as a value.
    Access(Access),
    /// A function call.
    Call {
        /// Function name.
        func: Name,
        /// Arguments; each is a summation point.
        args: Vec<Expr>,
        /// Whole call.
        span: Span,
    },
    /// `-e`
    Neg(Box<Expr>, Span),
    /// `not e`
    Not(Box<Expr>, Span),
    /// `a + b`, `a - b`, `a ^ b`.
    Binary(BinOp, Box<Expr>, Box<Expr>, Span),
    /// A comparison.
    Compare(CmpOp, Box<Expr>, Box<Expr>, Span),
    /// A product of factors (a join): the summation point of §6.2. The flag marks division.
    Term(Vec<(bool, Expr)>, Span),
}

impl Expr {
    /// Adds every tensor access inside it to `out`.
    pub fn accesses<'e>(&'e self, out: &mut Vec<&'e Access>) {
        match self {
            Expr::Access(a) => out.push(a),
            Expr::Call { args, .. } => args.iter().for_each(|a| a.accesses(out)),
            Expr::Neg(x, _) | Expr::Not(x, _) => x.accesses(out),
            Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => {
                a.accesses(out);
                b.accesses(out);
            }
            Expr::Term(fs, _) => fs.iter().for_each(|(_, f)| f.accesses(out)),
            Expr::Number(..) | Expr::Str(..) => {}
        }
    }

    /// Where it is written.
    pub fn span(&self) -> Span {
        match self {
            Expr::Number(_, s)
            | Expr::Str(_, s)
            | Expr::Call { span: s, .. }
            | Expr::Neg(_, s)
            | Expr::Not(_, s)
            | Expr::Binary(_, _, _, s)
            | Expr::Compare(_, _, _, s)
            | Expr::Term(_, s) => *s,
            Expr::Access(a) => a.span,
        }
    }
}
