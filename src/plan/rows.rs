//! A dense equation's elementwise expression compiled for row-at-a-time evaluation: its
//! operations in postorder ([`RowProgram`]) and where each row of the output lies in every
//! term ([`RowLayout`]). Both depend only on the program and its shapes, so they are made
//! once here and `eval::dense::rows` runs them; only an expression rewritten at run time
//! (a `softmax` inside it becomes a term) is compiled there.

use super::einsum::{DenseEquation, Expr};
use crate::functions::Builtin;
use crate::semantics::{Func, VarId};
use crate::syntax::ast::{BinOp, CmpOp};

/// One operation; inputs are indices of earlier operations.
#[derive(Clone, Debug, PartialEq)]
pub enum RowOp {
    /// Term `k`'s element.
    Term(usize),
    /// A constant.
    Const(f64),
    /// An output variable's position.
    Var(VarId),
    /// `-x`.
    Neg(usize),
    /// `1 - x`.
    Not(usize),
    /// `x · y`.
    Mul(usize, usize),
    /// `x · m`, but 0 where the mask `m` is 0, whatever `x` is (`Checked::masks`: a
    /// comparison multiplying the expression).
    Mask(usize, usize),
    /// `x / y`.
    Div(usize, usize),
    /// `x + y`.
    Add(usize, usize),
    /// `x - y`.
    Sub(usize, usize),
    /// `x ^ y`.
    Pow(usize, usize),
    /// `x % y`.
    Rem(usize, usize),
    /// `x / y` truncated to an integer.
    Quot(usize, usize),
    /// 1 where the comparison holds, else 0.
    Compare(CmpOp, usize, usize),
    /// A built-in function of its arguments.
    Builtin(Builtin, Vec<usize>),
    /// Registered function number `slot` of [`RowProgram::users`], of one argument.
    User(usize, usize),
    /// Table `t` of [`RowProgram::tables`] at the output variables' positions.
    Table(usize),
}

/// A part of the expression that reads no term and calls no registered function
/// (`1e9 * (q > p)`, a positional code): its value depends only on the positions of the
/// output variables it mentions, so it is computed once per pass over their grid, a table
/// far smaller than the output read as a term is, instead of once per row.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// Its operations in postorder (inputs numbered within them), the last one its value.
    pub ops: Vec<RowOp>,
    /// The output variables it mentions, in the output's order: it is row-major over them.
    pub vars: Vec<VarId>,
}

/// Most values a table holds.
const TABLE_MAX: usize = 1 << 16;

/// The fewest output elements per table value for a table to pay: it replaces the part's
/// operations on every row with a read.
const TABLE_REUSE: usize = 8;

/// A compiled expression: operations in postorder, the last one its value.
#[derive(Clone, Debug, PartialEq)]
pub struct RowProgram {
    /// The operations.
    pub ops: Vec<RowOp>,
    /// Names of the registered functions it calls (§16), found when it runs: registration
    /// is an evaluation option, not part of the program.
    pub users: Vec<String>,
    /// Per operation, whether an adjoint reaches a term through it: the backward pass
    /// passes adjoints back only through these (`1e9 * (q > p)` has none).
    pub live: Vec<bool>,
    /// Per operation, whether the backward pass needs its value: an input of a live
    /// operation's local derivative, or of such an input. The others are not computed
    /// there (an expression that is one term, `Q[…] K[…] / c`, needs no forward values).
    pub needed: Vec<bool>,
    /// The parts computed once per pass ([`RowProgram::tabulate`]).
    pub tables: Vec<Table>,
}

impl RowProgram {
    /// Compiles `e`; `None` when it still holds a `softmax`/`lnorm` (those are made terms
    /// first).
    pub fn compile(e: &Expr) -> Option<RowProgram> {
        let mut p = RowProgram {
            ops: Vec::new(),
            users: Vec::new(),
            live: Vec::new(),
            needed: Vec::new(),
            tables: Vec::new(),
        };
        p.push(e)?;
        p.live = live(&p.ops);
        p.needed = needed(&p.ops, &p.live);
        Some(p)
    }

    /// The expression as `Σ cₖ · termₖ` plus what passes no adjoint back (`1e9 * (q > p)`):
    /// each term's coefficient, the product of the local derivatives on its way to the
    /// value; `None` where a term's derivative varies along the grid (a product of terms, a
    /// function of one). The backward pass then gives term `k` the adjoint `cₖ · a` in one
    /// pass instead of a row at a time.
    pub fn linear(&self) -> Option<Vec<(usize, f64)>> {
        // Per operation: its coefficients, and its value where it is a constant.
        let mut forms: Vec<Vec<(usize, f64)>> = Vec::with_capacity(self.ops.len());
        let mut constants: Vec<Option<f64>> = Vec::with_capacity(self.ops.len());
        let scaled = |f: &[(usize, f64)], c: f64| f.iter().map(|&(k, x)| (k, x * c)).collect();
        for (i, op) in self.ops.iter().enumerate() {
            let (form, constant) = match op {
                RowOp::Const(c) => (Vec::new(), Some(*c)),
                _ if !self.live[i] => (Vec::new(), None),
                RowOp::Term(k) => (vec![(*k, 1.0)], None),
                RowOp::Neg(x) | RowOp::Not(x) => (scaled(&forms[*x], -1.0), None),
                RowOp::Add(x, y) => ([&forms[*x][..], &forms[*y][..]].concat(), None),
                RowOp::Sub(x, y) => {
                    let mut f = forms[*x].clone();
                    f.extend(forms[*y].iter().map(|&(k, c)| (k, -c)));
                    (f, None)
                }
                RowOp::Mul(x, y) => match (constants[*x], constants[*y]) {
                    (Some(c), _) => (scaled(&forms[*y], c), None),
                    (_, Some(c)) => (scaled(&forms[*x], c), None),
                    _ => return None,
                },
                RowOp::Div(x, y) => match constants[*y] {
                    Some(c) if !self.live[*y] => (scaled(&forms[*x], 1.0 / c), None),
                    _ => return None,
                },
                _ => return None,
            };
            forms.push(form);
            constants.push(constant);
        }
        // A term read twice takes the sum of its coefficients.
        let mut merged: Vec<(usize, f64)> = Vec::new();
        for (k, c) in forms.pop()? {
            match merged.iter_mut().find(|(j, _)| *j == k) {
                Some((_, sum)) => *sum += c,
                None => merged.push((k, c)),
            }
        }
        Some(merged)
    }

    /// The program with each largest part that reads no term and calls no registered
    /// function made a [`Table`] over the output variables it mentions (`out`, with
    /// `extents`), where that table holds at most [`TABLE_MAX`] values and the output at
    /// least [`TABLE_REUSE`] times as many. A bare constant or variable stays as it is.
    pub fn tabulate(self, out: &[VarId], extents: &[usize]) -> RowProgram {
        let size = |vars: &[VarId]| -> usize {
            vars.iter()
                .map(|&v| extents.get(v).copied().unwrap_or(0))
                .product()
        };
        let grid = size(out);
        // Per operation, the output variables it depends on where it reads no term.
        let mut free: Vec<Option<Vec<VarId>>> = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            let vars = match op {
                RowOp::Term(_) | RowOp::User(..) | RowOp::Table(_) => None,
                RowOp::Var(v) => out.contains(v).then(|| vec![*v]),
                _ => inputs(op).iter().try_fold(Vec::new(), |mut acc, &x| {
                    acc.extend(free[x].as_ref()?);
                    Some(acc)
                }),
            };
            free.push(vars.map(|vs| out.iter().copied().filter(|v| vs.contains(v)).collect()));
        }
        let mut read_by_free = vec![false; self.ops.len()];
        for (i, op) in self.ops.iter().enumerate() {
            if free[i].is_some() {
                inputs(op).into_iter().for_each(|x| read_by_free[x] = true);
            }
        }
        let roots: Vec<usize> = (0..self.ops.len())
            .filter(|&i| {
                let Some(vars) = &free[i] else {
                    return false;
                };
                let bare = matches!(self.ops[i], RowOp::Const(_) | RowOp::Var(_));
                let n = size(vars);
                !read_by_free[i] && !bare && n <= TABLE_MAX && n.saturating_mul(TABLE_REUSE) <= grid
            })
            .collect();
        if roots.is_empty() {
            return self;
        }
        // Each operation's table root, if it is inside one.
        let mut owner: Vec<Option<usize>> = vec![None; self.ops.len()];
        for (t, &r) in roots.iter().enumerate() {
            let mut stack = vec![r];
            while let Some(i) = stack.pop() {
                owner[i] = Some(t);
                stack.extend(inputs(&self.ops[i]));
            }
        }
        let mut tables: Vec<Table> = roots
            .iter()
            .map(|&r| Table {
                ops: Vec::new(),
                vars: free[r].clone().unwrap_or_default(),
            })
            .collect();
        // New numbers: within a table for its operations, in the program for the rest.
        let mut number = vec![0usize; self.ops.len()];
        let mut ops = Vec::new();
        for (i, op) in self.ops.iter().enumerate() {
            let renumbered = map_inputs(op, |x| number[x]);
            match owner[i] {
                Some(t) => {
                    number[i] = tables[t].ops.len();
                    tables[t].ops.push(renumbered);
                    if roots[t] == i {
                        ops.push(RowOp::Table(self.tables.len() + t));
                        // The program reads the table's root by its number there.
                        number[i] = ops.len() - 1;
                    }
                }
                None => {
                    number[i] = ops.len();
                    ops.push(renumbered);
                }
            }
        }
        let mut p = self;
        p.tables.extend(tables);
        p.live = live(&ops);
        p.needed = needed(&ops, &p.live);
        p.ops = ops;
        p
    }

    fn push(&mut self, e: &Expr) -> Option<usize> {
        let op = match e {
            Expr::Term(k) => RowOp::Term(*k),
            Expr::Const(c) => RowOp::Const(*c),
            Expr::Var(v) => RowOp::Var(*v),
            Expr::Neg(x) => RowOp::Neg(self.push(x)?),
            Expr::Not(x) => RowOp::Not(self.push(x)?),
            Expr::Product(fs) => {
                // acc = 1; acc *= f or acc /= f, left to right, as the reference multiplies;
                // then each comparison masks it (a multiplication by 1 changes no bit).
                let mut acc: Option<usize> = None;
                let mut masks = Vec::new();
                for (div, f) in fs {
                    if !*div && matches!(f, Expr::Compare(..)) {
                        masks.push(self.push(f)?);
                        continue;
                    }
                    let x = self.push(f)?;
                    let left = match acc {
                        Some(a) => a,
                        None if !*div => {
                            acc = Some(x);
                            continue;
                        }
                        None => self.op(RowOp::Const(1.0)),
                    };
                    acc = Some(self.op(match div {
                        true => RowOp::Div(left, x),
                        false => RowOp::Mul(left, x),
                    }));
                }
                let mut acc = match acc {
                    Some(a) => a,
                    None => self.op(RowOp::Const(1.0)),
                };
                for m in masks {
                    acc = self.op(RowOp::Mask(acc, m));
                }
                return Some(acc);
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.push(a)?, self.push(b)?);
                match op {
                    BinOp::Add => RowOp::Add(a, b),
                    BinOp::Sub => RowOp::Sub(a, b),
                    BinOp::Pow => RowOp::Pow(a, b),
                    BinOp::Rem => RowOp::Rem(a, b),
                    BinOp::Quot => RowOp::Quot(a, b),
                }
            }
            Expr::Compare(op, a, b) => {
                let (a, b) = (self.push(a)?, self.push(b)?);
                RowOp::Compare(*op, a, b)
            }
            Expr::Call(f, args) => {
                let xs = args
                    .iter()
                    .map(|a| self.push(a))
                    .collect::<Option<Vec<usize>>>()?;
                match f {
                    Func::Builtin(b) => RowOp::Builtin(*b, xs),
                    Func::User(name) => {
                        let slot = match self.users.iter().position(|n| n == name) {
                            Some(slot) => slot,
                            None => {
                                self.users.push(name.clone());
                                self.users.len() - 1
                            }
                        };
                        RowOp::User(slot, *xs.first()?)
                    }
                }
            }
            Expr::Normalize(..) => return None,
        };
        Some(self.op(op))
    }

    fn op(&mut self, op: RowOp) -> usize {
        self.ops.push(op);
        self.ops.len() - 1
    }
}

/// `op` with each input `x` numbered `f(x)`.
fn map_inputs(op: &RowOp, f: impl Fn(usize) -> usize) -> RowOp {
    match op {
        RowOp::Term(_) | RowOp::Const(_) | RowOp::Var(_) | RowOp::Table(_) => op.clone(),
        RowOp::Neg(x) => RowOp::Neg(f(*x)),
        RowOp::Not(x) => RowOp::Not(f(*x)),
        RowOp::User(slot, x) => RowOp::User(*slot, f(*x)),
        RowOp::Mul(a, b) => RowOp::Mul(f(*a), f(*b)),
        RowOp::Mask(a, b) => RowOp::Mask(f(*a), f(*b)),
        RowOp::Div(a, b) => RowOp::Div(f(*a), f(*b)),
        RowOp::Add(a, b) => RowOp::Add(f(*a), f(*b)),
        RowOp::Sub(a, b) => RowOp::Sub(f(*a), f(*b)),
        RowOp::Pow(a, b) => RowOp::Pow(f(*a), f(*b)),
        RowOp::Rem(a, b) => RowOp::Rem(f(*a), f(*b)),
        RowOp::Quot(a, b) => RowOp::Quot(f(*a), f(*b)),
        RowOp::Compare(c, a, b) => RowOp::Compare(*c, f(*a), f(*b)),
        RowOp::Builtin(b, args) => RowOp::Builtin(*b, args.iter().map(|&x| f(x)).collect()),
    }
}

/// Every input of an operation.
fn inputs(op: &RowOp) -> Vec<usize> {
    match op {
        RowOp::Term(_) | RowOp::Const(_) | RowOp::Var(_) | RowOp::Table(_) => Vec::new(),
        RowOp::Neg(x) | RowOp::Not(x) | RowOp::User(_, x) => vec![*x],
        RowOp::Mul(a, b)
        | RowOp::Mask(a, b)
        | RowOp::Div(a, b)
        | RowOp::Add(a, b)
        | RowOp::Sub(a, b)
        | RowOp::Pow(a, b)
        | RowOp::Rem(a, b)
        | RowOp::Quot(a, b)
        | RowOp::Compare(_, a, b) => vec![*a, *b],
        RowOp::Builtin(_, args) => args.clone(),
    }
}

/// Whether an operation's derivative with respect to its inputs can be nonzero (a
/// comparison's and an integer quotient's is zero).
fn differentiable(op: &RowOp) -> bool {
    !matches!(op, RowOp::Compare(..) | RowOp::Quot(..))
}

/// Which operations lead to a term through differentiable operations.
fn live(ops: &[RowOp]) -> Vec<bool> {
    let mut live = vec![false; ops.len()];
    for (i, op) in ops.iter().enumerate() {
        live[i] = matches!(op, RowOp::Term(_))
            || differentiable(op) && inputs(op).iter().any(|&x| live[x]);
    }
    live
}

/// Which operations' values the backward pass reads: for each live operation, the inputs
/// its local derivatives read (a product's other factor, a quotient's divisor, a function's
/// argument), and everything those are computed from.
fn needed(ops: &[RowOp], live: &[bool]) -> Vec<bool> {
    let mut needed = vec![false; ops.len()];
    for (i, op) in ops.iter().enumerate().rev() {
        if live[i] {
            let reads: Vec<usize> = match op {
                RowOp::Mul(a, b) | RowOp::Mask(a, b) => [(live[*a], *b), (live[*b], *a)]
                    .into_iter()
                    .filter_map(|(l, x)| l.then_some(x))
                    .collect(),
                RowOp::Div(a, b) if live[*b] => vec![*a, *b],
                RowOp::Div(_, b) => vec![*b],
                RowOp::Rem(a, b) if live[*b] => vec![*a, *b],
                RowOp::Pow(..) | RowOp::Builtin(..) | RowOp::User(..) => inputs(op),
                _ => Vec::new(),
            };
            for x in reads {
                needed[x] = true;
            }
        }
        if needed[i] {
            for x in inputs(op) {
                needed[x] = true;
            }
        }
    }
    needed
}

/// Where one row of the output (its innermost axis) lies in each term: the offset of its
/// first element and the step along the row (0 where the term does not vary along it).
#[derive(Clone, Debug, PartialEq)]
pub struct RowLayout {
    /// Elements per row.
    pub len: usize,
    /// Rows.
    pub count: usize,
    /// Per term, its stride along each output axis.
    pub steps: Vec<Vec<usize>>,
    /// Extents of the output axes.
    pub dims: Vec<usize>,
}

impl RowLayout {
    /// The layout of `d`'s grid over terms laid out over `vars` (row-major).
    pub fn new<'v>(d: &DenseEquation, vars: impl Iterator<Item = &'v [VarId]>) -> RowLayout {
        let dims: Vec<usize> = d.out.iter().map(|&v| d.extents[v]).collect();
        let len = dims.last().copied().unwrap_or(1);
        let total: usize = dims.iter().product();
        let steps = vars
            .map(|vars| {
                let dims: Vec<usize> = vars.iter().map(|&v| d.extents[v]).collect();
                let own = crate::tensor::odometer::row_major(&dims);
                d.out
                    .iter()
                    .map(|v| vars.iter().position(|x| x == v).map_or(0, |k| own[k]))
                    .collect()
            })
            .collect();
        RowLayout {
            len,
            count: total.checked_div(len).unwrap_or(0),
            steps,
            dims,
        }
    }

    /// Whether term `k` is laid out exactly like the grid (row-major over the output's
    /// axes), so that each grid element is its own element of the term.
    pub fn is_grid(&self, k: usize) -> bool {
        let mut stride = 1;
        for (ax, &n) in self.dims.iter().enumerate().rev() {
            if n > 1 && self.steps[k][ax] != stride {
                return false;
            }
            stride *= n;
        }
        true
    }

    /// The step of term `k` along the row.
    pub fn inner_step(&self, k: usize) -> usize {
        self.steps[k].last().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(e: Expr) -> Box<Expr> {
        Box::new(e)
    }

    /// `Term(0) / 8 - 1e9 * (q > p)`, as attention's softmax argument is written.
    fn causal_mask(q: VarId, p: VarId) -> Expr {
        Expr::Binary(
            BinOp::Sub,
            boxed(Expr::Product(vec![
                (false, Expr::Term(0)),
                (true, Expr::Const(8.0)),
            ])),
            boxed(Expr::Product(vec![
                (false, Expr::Const(1e9)),
                (
                    false,
                    Expr::Compare(CmpOp::Gt, boxed(Expr::Var(q)), boxed(Expr::Var(p))),
                ),
            ])),
        )
    }

    #[test]
    fn a_causal_mask_needs_no_values_and_passes_no_adjoint() {
        let e = causal_mask(1, 0);
        let p = RowProgram::compile(&e).expect("no softmax inside");
        let live: Vec<usize> = (0..p.ops.len()).filter(|&i| p.live[i]).collect();
        let needed: Vec<&RowOp> = (0..p.ops.len())
            .filter(|&i| p.needed[i])
            .map(|i| &p.ops[i])
            .collect();
        // The term, its division and the subtraction; the divisor's value only.
        assert_eq!(live.len(), 3);
        assert_eq!(needed, vec![&RowOp::Const(8.0)]);
        // Its term's adjoint is the value's divided by 8.
        assert_eq!(p.linear(), Some(vec![(0, 0.125)]));
    }

    /// The mask of attention's scores becomes a table over the two positions it reads (not
    /// over the batch axis), read where it was computed; nothing about the term changes.
    #[test]
    fn a_causal_mask_is_tabulated_over_its_positions() {
        let e = causal_mask(2, 1);
        let compiled = RowProgram::compile(&e).expect("no softmax inside");
        // Output [b, p, q] with b of 16: the output holds 16 values per table value.
        let p = compiled.clone().tabulate(&[0, 1, 2], &[16, 64, 64]);
        assert_eq!(
            p.ops,
            vec![
                RowOp::Term(0),
                RowOp::Const(8.0),
                RowOp::Div(0, 1),
                RowOp::Table(0),
                RowOp::Sub(2, 3)
            ]
        );
        assert_eq!(p.tables.len(), 1);
        assert_eq!(p.tables[0].vars, vec![1, 2]);
        assert_eq!(p.tables[0].ops.last(), Some(&RowOp::Mask(0, 3)));
        assert_eq!(p.linear(), compiled.linear());
        assert_eq!(p.needed, vec![false, true, false, false, false]);
        // Without a batch axis to repeat over, the table would be as large as the output.
        let small = compiled.clone().tabulate(&[1, 2], &[0, 64, 64]);
        assert_eq!(small, compiled);
    }

    /// Sums and differences of terms scaled by constants are linear; a term read twice takes
    /// both coefficients; a product of terms or a function of one is not.
    #[test]
    fn linear_expressions_give_each_term_its_coefficient() {
        let linear = |e: Expr| RowProgram::compile(&e).and_then(|p| p.linear());
        let sum = Expr::Binary(BinOp::Add, boxed(Expr::Term(0)), boxed(Expr::Term(1)));
        assert_eq!(linear(sum), Some(vec![(0, 1.0), (1, 1.0)]));
        let twice = Expr::Binary(
            BinOp::Sub,
            boxed(Expr::Product(vec![
                (false, Expr::Const(3.0)),
                (false, Expr::Term(0)),
            ])),
            boxed(Expr::Neg(boxed(Expr::Term(0)))),
        );
        assert_eq!(linear(twice), Some(vec![(0, 4.0)]));
        let product = Expr::Product(vec![(false, Expr::Term(0)), (false, Expr::Term(1))]);
        assert_eq!(linear(product), None);
        let relu = Expr::Call(Func::Builtin(Builtin::Relu), vec![Expr::Term(0)]);
        assert_eq!(linear(relu), None);
    }

    #[test]
    fn a_product_needs_the_other_factor_and_what_it_is_made_of() {
        // Term(0) * relu(Term(1) + 1): the adjoint of each term needs the other side.
        let e = Expr::Product(vec![
            (false, Expr::Term(0)),
            (
                false,
                Expr::Call(
                    Func::Builtin(Builtin::Relu),
                    vec![Expr::Binary(
                        BinOp::Add,
                        boxed(Expr::Term(1)),
                        boxed(Expr::Const(1.0)),
                    )],
                ),
            ),
        ]);
        let p = RowProgram::compile(&e).expect("no softmax inside");
        assert!(p.live.iter().filter(|&&l| l).count() >= 4);
        // Everything but the product itself is read: Term(0) for the right side's adjoint,
        // the relu for Term(0)'s, and relu's argument for its derivative.
        let root = p.ops.len() - 1;
        assert!((0..root).all(|i| p.needed[i]));
        assert!(!p.needed[root]);
    }
}
