//! Recognising Datalog-shaped strata: every equation has a Boolean head and a body that is a
//! join of positive atoms, negated atoms of lower strata, and comparisons, all indexed by plain
//! variables and constants. Such a stratum has set semantics (SPEC §8), so it can be evaluated
//! by joins over tuples instead of loops over iteration spaces.

use super::nest::{self, Value};
use crate::semantics::{Checked, Equation, Family, IndexFn, Kind, Node, Stratum, TensorId, VarId};
use crate::syntax::ast::{BinOp, CmpOp, Num};

/// One position of an atom or head: a variable, or a fixed position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Term {
    /// An index variable of the rule.
    Var(VarId),
    /// A constant position.
    Const(u32),
}

/// A body atom `R(x, A, y)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Atom {
    /// The relation read.
    pub tensor: TensorId,
    /// One term per axis.
    pub terms: Vec<Term>,
}

/// A negated atom with anonymous positions (`not F(x, _)`): it holds when no row of
/// `tensor` has `terms` at columns `cols`, whatever its other columns hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Absent {
    /// The relation read.
    pub tensor: TensorId,
    /// The positions that are not anonymous.
    pub cols: Vec<usize>,
    /// Their terms.
    pub terms: Vec<Term>,
}

/// A comparison between variables and numbers (`x != y`, `x == 3`).
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    /// The operator.
    pub op: CmpOp,
    /// Left operand: a variable or a number.
    pub left: Operand,
    /// Right operand.
    pub right: Operand,
}

/// An operand of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// A variable's position.
    Var(VarId),
    /// A number (a symbol's position, an integer exactly, or a real).
    Const(Num),
    /// Integer arithmetic of variables' values (`x + 1`), compared exactly
    /// ([`IndexFn::exact`]).
    Arith(IndexFn),
}

impl Operand {
    /// The variables it reads.
    pub fn vars(&self) -> Vec<VarId> {
        let mut out = Vec::new();
        match self {
            Operand::Var(v) => out.push(*v),
            Operand::Const(_) => {}
            Operand::Arith(f) => f.vars(&mut out),
        }
        out
    }
}

/// A rule ready for joins.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// The relation defined.
    pub head: TensorId,
    /// Head terms.
    pub head_terms: Vec<Term>,
    /// Positive atoms (at least one).
    pub atoms: Vec<Atom>,
    /// Negated atoms, over relations of lower strata.
    pub negated: Vec<Atom>,
    /// Negated atoms with anonymous positions, over relations of lower strata.
    pub absent: Vec<Absent>,
    /// Comparisons.
    pub filters: Vec<Filter>,
    /// Comparisons of computed values (`W[x, y] > 0.5`, `x < y + 1`), checked once every
    /// variable is bound ([`nest::check`]); they read tensors of lower strata only.
    pub checks: Vec<Value>,
    /// Head positions computed from the body's variables (`Nat(n + 1) :- Nat(n)`), each
    /// bound to a variable of its own (numbered after the equation's) before the checks.
    pub lets: Vec<Let>,
    /// Number of variables.
    pub vars: usize,
    /// The equation it was planned from (index into `Checked::equations`).
    pub equation: usize,
    /// Whether its body is cyclic ([`cyclic`]): it then runs as a worst-case-optimal join.
    pub cyclic: bool,
    /// Groups of atoms of lower strata that share no variable with the rest of the rule
    /// (`C(y), D(y)` in `A(x) :- B(x), C(y), D(y)`): the rule derives only where each
    /// group has an assignment, which is asked once per evaluation of the stratum rather
    /// than joined again in every round ([`independent`]).
    pub exists: Vec<Vec<Atom>>,
}

/// A variable bound to a position computed from the variables the atoms bind; an
/// assignment where it leaves `0..extent` derives nothing (a write outside the tensor).
/// Where the variable is of an open domain (§8) the value is numbered in its table instead,
/// whatever it is: an open column has no extent.
#[derive(Clone, Debug, PartialEq)]
pub struct Let {
    /// The variable bound.
    pub var: VarId,
    /// Its position.
    pub value: LetValue,
    /// The extent of the axis it indexes.
    pub extent: usize,
    /// The open domain whose values it holds, if any (its position is then a handle).
    pub open: Option<usize>,
}

/// How a [`Let`]'s position is computed.
#[derive(Clone, Debug, PartialEq)]
pub enum LetValue {
    /// Head arithmetic (`Nat(n + 1) :- Nat(n)`): a variable of its own.
    Index(IndexFn),
    /// A value read from tensors of lower strata (`Deg(x, n) :- Node(x), n = Kids[x]`):
    /// the equation's own variable, at the value minus `shift` (its domain's offset), where
    /// the value is an integer.
    Computed {
        /// The value, compiled as the loop nests' value checks are.
        value: Value,
        /// Subtracted from the value to give the position.
        shift: i64,
    },
}

impl Rule {
    /// The rule with its independent groups of atoms ([`Rule::exists`]) joined like the
    /// others again: for engines that join every atom.
    pub fn joined(&self) -> Rule {
        let mut r = self.clone();
        r.atoms.extend(r.exists.drain(..).flatten());
        r.planned()
    }

    /// Whether it computes with the values of open integer columns (§8): a head or bound
    /// value numbered in a table, or a variable of one in a computed position, comparison
    /// or check. Joins alone never need a value, only handles.
    pub fn uses_open_values(&self, p: &Checked) -> bool {
        let eq = &p.equations[self.equation];
        let open_vars = eq.vars.iter().any(|v| v.open.is_some());
        let computes = !self.lets.is_empty() || !self.filters.is_empty() || !self.checks.is_empty();
        self.lets.iter().any(|l| l.open.is_some()) || (open_vars && computes)
    }

    /// The rule with [`Rule::cyclic`] computed from its body.
    pub fn planned(mut self) -> Rule {
        self.cyclic = cyclic(&self);
        self
    }
}

/// One atom in join order: the columns looked up (bound by constants or earlier atoms) and
/// the columns that bind variables (`true` marks a repeat within the atom, which is checked).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct JoinStep {
    /// Which body atom.
    pub atom: usize,
    /// Columns whose values are known when the atom is reached: an index is looked up on them.
    pub key_cols: Vec<usize>,
    /// The terms giving those values.
    pub key_terms: Vec<Term>,
    /// `(column, variable, repeat)` for the columns that bind variables.
    pub binds: Vec<(usize, VarId, bool)>,
}

/// What a join order is chosen by: how many rows each body atom reads (for the atom reading
/// the last round's new tuples, how many are new), and about how many distinct values some
/// of its columns hold together.
pub(crate) trait JoinStats {
    /// Rows atom `atom` reads.
    fn rows(&self, atom: usize) -> usize;
    /// Distinct values of columns `cols` of atom `atom` (an estimate).
    fn distinct(&self, atom: usize, cols: &[usize]) -> usize;
    /// The rows that looking atom `next` up on columns `cols` finds for an average row of
    /// atom `first` scanned before it, measured on a sample of `first`'s rows (`None` where
    /// it cannot be): skewed relations make this far from the average per key (a popular
    /// object is pointed to by thousands of variables, and so is it in new tuples).
    fn per_row(&self, first: usize, next: usize, cols: &[usize]) -> Option<f64> {
        let _ = (first, next, cols);
        None
    }
}

/// `v < n` for each head variable that an atom reads at an axis longer than the head axis
/// it is written to (`n`): the values past `n` are writes outside the tensor and derive
/// nothing, as the reference (which ranges `v` over `0..n`) has it. Most rules have none:
/// a variable's axes share one extent, except where a declaration makes the head's shorter.
fn head_bounds(p: &Checked, eq: &Equation, rule: &Rule) -> Vec<Filter> {
    let target = &p.tensors[eq.target];
    let mut out = Vec::new();
    for (ax, t) in rule.head_terms.iter().enumerate() {
        let (Term::Var(v), Some(&n)) = (t, target.shape.get(ax)) else {
            continue;
        };
        if p.domains[target.domains[ax]].is_open() {
            continue;
        }
        let longer = rule.atoms.iter().any(|a| {
            a.terms.iter().enumerate().any(|(k, term)| {
                *term == Term::Var(*v) && p.tensors[a.tensor].shape.get(k).is_some_and(|&m| m > n)
            })
        });
        if longer {
            out.push(Filter {
                op: CmpOp::Lt,
                left: Operand::Var(*v),
                right: Operand::Const(Num::Int(n as i64)),
            });
        }
    }
    out
}

/// The positions a computed value may take: its variable's range, and no more than the
/// extent of any head axis it is written to (`Far(y, d) :- …, d = Dist[0, y]` into a
/// declared `Far : bool[4, 2]` writes nothing where `d` is 2 or more, as the reference
/// does: a write outside the tensor).
fn within_head(p: &Checked, eq: &Equation, var: VarId) -> usize {
    let shape = &p.tensors[eq.target].shape;
    eq.lhs
        .iter()
        .zip(shape)
        .filter(|(f, _)| **f == IndexFn::Var(var))
        .fold(eq.vars[var].range, |r, (_, &n)| r.min(n))
}

/// The distinct keys that `rows` rows can hold in columns of extents `extents`, for
/// [`JoinStats::distinct`] where nothing better is known: the rows, capped by the product of
/// the extents (a missing extent is taken as `rows`).
pub(crate) fn keys_within(rows: usize, shape: Option<&[usize]>, cols: &[usize]) -> usize {
    cols.iter()
        .map(|&c| shape.and_then(|s| s.get(c)).copied().unwrap_or(rows))
        .fold(1usize, |n, e| n.saturating_mul(e))
        .min(rows)
}

/// Join orders of rules with at most this many atoms are chosen among all orders.
const SEARCHED_ATOMS: usize = 6;

/// Join order for one run of a rule whose atom `first` (if any) reads the last round's new
/// tuples. The greedy order puts `first` first, then repeatedly the atom with the most bound
/// columns, ties broken by the smaller relation, then source order. For rules of at most
/// [`SEARCHED_ATOMS`] atoms, every order is costed by `stats` (index lookups and rows
/// visited, each step's rows per lookup taken as its rows over its key's distinct values)
/// and the cheapest replaces the greedy one when it costs under two thirds of it: when the
/// new tuples are many, and another atom few, starting from the other atom and looking the
/// new tuples up can do a fraction of the work. Re-planned every round, as sizes change.
pub(crate) fn join_order(r: &Rule, first: Option<usize>, stats: &dyn JoinStats) -> Vec<JoinStep> {
    let greedy = greedy_order(r, first, stats);
    if r.atoms.len() < 2 || r.atoms.len() > SEARCHED_ATOMS {
        return steps_of(r, &greedy);
    }
    let stats = Sampled {
        stats,
        atoms: r.atoms.len(),
        per_row: std::cell::RefCell::new(vec![None; r.atoms.len() * r.atoms.len()]),
    };
    let greedy_cost = order_cost(r, &greedy, &stats);
    let mut best: Option<(f64, Vec<usize>)> = None;
    let mut order: Vec<usize> = (0..r.atoms.len()).collect();
    permutations(&mut order, 0, &mut |o| {
        let c = order_cost(r, o, &stats);
        if best.as_ref().is_none_or(|(b, _)| c < *b) {
            best = Some((c, o.to_vec()));
        }
    });
    match best {
        Some((c, o)) if c * 3.0 < greedy_cost * 2.0 => steps_of(r, &o),
        _ => steps_of(r, &greedy),
    }
}

/// `stats` with each pair's [`JoinStats::per_row`] measured once: the orders of `n` atoms
/// share their `n (n - 1)` first pairs, and each measurement looks up a sample of rows.
struct Sampled<'a> {
    stats: &'a dyn JoinStats,
    atoms: usize,
    per_row: std::cell::RefCell<Vec<Option<Option<f64>>>>,
}

impl JoinStats for Sampled<'_> {
    fn rows(&self, atom: usize) -> usize {
        self.stats.rows(atom)
    }

    fn distinct(&self, atom: usize, cols: &[usize]) -> usize {
        self.stats.distinct(atom, cols)
    }

    /// The key columns of `next` bound by `first` alone depend only on the pair, so `cols`
    /// is the same each time a pair is asked.
    fn per_row(&self, first: usize, next: usize, cols: &[usize]) -> Option<f64> {
        let at = first * self.atoms + next;
        if let Some(known) = self.per_row.borrow()[at] {
            return known;
        }
        let measured = self.stats.per_row(first, next, cols);
        self.per_row.borrow_mut()[at] = Some(measured);
        measured
    }
}

/// Calls `f` with every order of `items[k..]` after `items[..k]`, in a fixed sequence.
fn permutations(items: &mut [usize], k: usize, f: &mut dyn FnMut(&[usize])) {
    if k == items.len() {
        f(items);
        return;
    }
    for i in k..items.len() {
        items.swap(k, i);
        permutations(items, k + 1, f);
        items.swap(k, i);
    }
}

/// The estimated work of joining the atoms in `order`: per step, one lookup (or scan) per
/// assignment reaching it, plus the rows it yields.
fn order_cost(r: &Rule, order: &[usize], stats: &dyn JoinStats) -> f64 {
    let mut bound = vec![false; r.vars];
    let (mut flow, mut cost) = (1.0f64, 0.0f64);
    for &i in order {
        let a = &r.atoms[i];
        let known: Vec<usize> = (0..a.terms.len())
            .filter(|&c| match a.terms[c] {
                Term::Const(_) => true,
                Term::Var(v) => bound[v],
            })
            .collect();
        let rows = stats.rows(i) as f64;
        let sampled = match (order.first(), order.get(1)) {
            (Some(&s), Some(&n)) if n == i && !known.is_empty() => stats.per_row(s, n, &known),
            _ => None,
        };
        let per = match (known.is_empty(), sampled) {
            (true, _) => rows,
            (false, Some(per)) => per,
            (false, None) => rows / (stats.distinct(i, &known).max(1) as f64),
        };
        cost += flow;
        flow *= per;
        cost += flow;
        for t in &a.terms {
            if let Term::Var(v) = t {
                bound[*v] = true;
            }
        }
    }
    cost
}

/// The greedy order of [`join_order`], as atom numbers.
fn greedy_order(r: &Rule, first: Option<usize>, stats: &dyn JoinStats) -> Vec<usize> {
    let mut bound = vec![false; r.vars];
    let mut left: Vec<usize> = (0..r.atoms.len()).collect();
    let mut order = Vec::with_capacity(r.atoms.len());
    while !left.is_empty() {
        let pick = match first.filter(|d| left.contains(d)) {
            Some(d) => d,
            None => {
                let score = |&i: &usize| {
                    let a = &r.atoms[i];
                    let known = a
                        .terms
                        .iter()
                        .filter(|t| {
                            matches!(t, Term::Const(_)) || matches!(t, Term::Var(v) if bound[*v])
                        })
                        .count();
                    (std::cmp::Reverse(known), stats.rows(i), i)
                };
                left.iter().copied().min_by_key(score).unwrap_or(left[0])
            }
        };
        left.retain(|&i| i != pick);
        for t in &r.atoms[pick].terms {
            if let Term::Var(v) = t {
                bound[*v] = true;
            }
        }
        order.push(pick);
    }
    order
}

/// The join steps of the atoms in `order`: each atom's columns bound by constants or earlier
/// atoms are looked up, the others bind variables.
fn steps_of(r: &Rule, order: &[usize]) -> Vec<JoinStep> {
    let mut bound = vec![false; r.vars];
    let mut steps = Vec::with_capacity(order.len());
    for &pick in order {
        let mut step = JoinStep {
            atom: pick,
            key_cols: Vec::new(),
            key_terms: Vec::new(),
            binds: Vec::new(),
        };
        let mut newly = Vec::new();
        for (c, t) in r.atoms[pick].terms.iter().enumerate() {
            match t {
                Term::Var(v) if !bound[*v] => {
                    step.binds.push((c, *v, newly.contains(v)));
                    newly.push(*v);
                }
                _ => {
                    step.key_cols.push(c);
                    step.key_terms.push(*t);
                }
            }
        }
        for v in newly {
            bound[v] = true;
        }
        steps.push(step);
    }
    steps
}

/// Whether a rule's body is cyclic, like the triangle `E(x, y), E(y, z), E(z, x)`: the GYO
/// reduction (drop variables found in one atom only, then atoms whose variables another atom
/// has) leaves more than one atom. Joining such a body one atom at a time can build
/// intermediate results far larger than its answer; a worst-case-optimal join, binding one
/// variable at a time from the intersection of every atom that has it, cannot.
pub(crate) fn cyclic(r: &Rule) -> bool {
    let mut edges: Vec<Vec<VarId>> = r
        .atoms
        .iter()
        .map(|a| {
            let mut vs: Vec<VarId> = a
                .terms
                .iter()
                .filter_map(|t| match t {
                    Term::Var(v) => Some(*v),
                    Term::Const(_) => None,
                })
                .collect();
            vs.sort_unstable();
            vs.dedup();
            vs
        })
        .collect();
    loop {
        let mut changed = false;
        for v in 0..r.vars {
            let holders = edges.iter().filter(|e| e.contains(&v)).count();
            if holders == 1 {
                for e in edges.iter_mut() {
                    e.retain(|&x| x != v);
                }
                changed = true;
            }
        }
        let before = edges.len();
        let mut k = 0;
        while k < edges.len() {
            let covered =
                (0..edges.len()).any(|j| j != k && edges[k].iter().all(|v| edges[j].contains(v)));
            if covered {
                edges.remove(k);
            } else {
                k += 1;
            }
        }
        changed |= edges.len() != before;
        if !changed {
            return edges.len() > 1;
        }
    }
}

/// The order in which a worst-case-optimal join binds variables: the variables of atom
/// `first` (the one reading new tuples) first, then repeatedly the variable in the most atoms
/// with a variable already bound, ties broken by the most atoms overall, then by number.
pub(crate) fn variable_order(r: &Rule, first: Option<usize>) -> Vec<VarId> {
    let has = |a: &Atom, v: VarId| a.terms.contains(&Term::Var(v));
    let used: Vec<VarId> = (0..r.vars)
        .filter(|&v| r.atoms.iter().any(|a| has(a, v)))
        .collect();
    let mut order: Vec<VarId> = Vec::new();
    if let Some(a) = first.and_then(|k| r.atoms.get(k)) {
        for t in &a.terms {
            if let Term::Var(v) = t {
                if !order.contains(v) {
                    order.push(*v);
                }
            }
        }
    }
    while order.len() < used.len() {
        let score = |&v: &VarId| {
            let linked = r
                .atoms
                .iter()
                .filter(|a| has(a, v) && order.iter().any(|&b| has(a, b)))
                .count();
            let all = r.atoms.iter().filter(|a| has(a, v)).count();
            (linked, all, std::cmp::Reverse(v))
        };
        let Some(next) = used
            .iter()
            .copied()
            .filter(|v| !order.contains(v))
            .max_by_key(score)
        else {
            break;
        };
        order.push(next);
    }
    order
}

/// The rules of a stratum when every one of its equations is Datalog-shaped.
pub(crate) fn plan_stratum(p: &Checked, st: &Stratum) -> Option<Vec<Rule>> {
    if st.tensors.iter().any(|&t| p.tensors[t].kind != Kind::Bool) {
        return None;
    }
    st.equations
        .iter()
        .map(|&e| plan_rule(p, e, false, &st.tensors))
        .collect()
}

/// The rules of a stratum that counts over relations (`Kids[x] = Parent(x, y)`): one integer
/// tensor, not recursive, whose equations have Datalog-shaped bodies. Its value is the number
/// of satisfying assignments per head element, which joins can enumerate directly.
pub(crate) fn plan_counts(p: &Checked, st: &Stratum) -> Option<Vec<Rule>> {
    let [t] = st.tensors[..] else {
        return None;
    };
    let info = &p.tensors[t];
    if st.recursive || info.kind != Kind::Int || info.sparse_values || info.family != Family::Sum {
        return None;
    }
    st.equations
        .iter()
        .map(|&e| plan_rule(p, e, true, &st.tensors))
        .collect()
}

/// A counting rule that is a product of two binary relations, `C[a, c] = A(a, b) B(b, c)`:
/// the atoms in that order (`first` binds a and b, `second` is looked up by b). Such a count
/// is a sparse matrix product, computed row by row of the first relation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Product {
    /// The atom over (a, b).
    pub first: usize,
    /// The atom over (b, c).
    pub second: usize,
}

/// The product form of a counting rule, if it has one: two binary atoms over distinct
/// variables a, b and b, c, no negation or comparison, and the head (a, c).
pub(crate) fn product(r: &Rule) -> Option<Product> {
    let ([x, y], true, true) = (
        r.atoms.as_slice(),
        r.negated.is_empty() && r.absent.is_empty(),
        r.filters.is_empty() && r.checks.is_empty(),
    ) else {
        return None;
    };
    let vars = |a: &Atom| match a.terms.as_slice() {
        [Term::Var(u), Term::Var(v)] if u != v => Some((*u, *v)),
        _ => None,
    };
    let ((a, b), (b2, c)) = (vars(x)?, vars(y)?);
    let head = |h: VarId, t: VarId| r.head_terms == [Term::Var(h), Term::Var(t)];
    if b == b2 && a != c && head(a, c) {
        return Some(Product {
            first: 0,
            second: 1,
        });
    }
    let ((a, b), (b2, c)) = (vars(y)?, vars(x)?);
    (b == b2 && a != c && head(a, c)).then_some(Product {
        first: 1,
        second: 0,
    })
}

/// Whether a counting rule counts the tuples of one relation by a prefix of its positions
/// (`Total = Path(x, y)`, `Deg[x] = Edge(x, y)`): one atom over distinct variables, no
/// negation or comparison, the head its first variables in order. Its counts are then the
/// lengths of the runs of sorted tuples sharing that prefix.
pub(crate) fn run_lengths(r: &Rule) -> bool {
    let ([a], true, true) = (
        r.atoms.as_slice(),
        r.negated.is_empty() && r.absent.is_empty(),
        r.filters.is_empty() && r.checks.is_empty(),
    ) else {
        return false;
    };
    let vars: Option<Vec<VarId>> = a
        .terms
        .iter()
        .map(|t| match t {
            Term::Var(v) => Some(*v),
            Term::Const(_) => None,
        })
        .collect();
    let Some(vars) = vars else {
        return false;
    };
    let distinct = (1..vars.len()).all(|k| !vars[..k].contains(&vars[k]));
    let prefix = r.head_terms.len() <= vars.len()
        && r.head_terms
            .iter()
            .zip(&vars)
            .all(|(t, &v)| *t == Term::Var(v));
    distinct && prefix
}

/// A `min=`/`max=` rule over defined elements (`Dist[x, z] min= Dist[x, y] + Edge[y, z]`): a
/// join of its reads, each contributing its value to a sum. Such a stratum is a shortest- or
/// longest-path problem, evaluated semi-naively over the elements that improved.
#[derive(Clone, Debug, PartialEq)]
pub struct ValuedRule {
    /// The join: one atom per read (Boolean reads contribute 1 where true).
    pub rule: Rule,
    /// The value at one join result.
    pub value: ValueExpr,
}

/// Sums and differences of read values, variables' values and constants, in the order the
/// equation writes them (floating-point addition is not associative, so the order is kept).
#[derive(Clone, Debug, PartialEq)]
pub enum ValueExpr {
    /// The value of atom `k` of the rule.
    Atom(usize),
    /// The value of a variable an atom binds (`E(x, y, w) w`, §8).
    Var(VarId),
    /// A number.
    Const(f64),
    /// `a + b`.
    Add(Box<ValueExpr>, Box<ValueExpr>),
    /// `a - b`.
    Sub(Box<ValueExpr>, Box<ValueExpr>),
    /// `c · a`, the product of a value and the constants beside it (`1.5 W[y, z]`).
    Scale(f64, Box<ValueExpr>),
}

impl ValueExpr {
    /// The value, given each atom's and each variable's.
    pub fn eval(&self, atom: &dyn Fn(usize) -> f64, var: &dyn Fn(VarId) -> f64) -> f64 {
        match self {
            ValueExpr::Atom(k) => atom(*k),
            ValueExpr::Var(v) => var(*v),
            ValueExpr::Const(c) => *c,
            ValueExpr::Add(a, b) => a.eval(atom, var) + b.eval(atom, var),
            ValueExpr::Sub(a, b) => a.eval(atom, var) - b.eval(atom, var),
            ValueExpr::Scale(c, a) => c * a.eval(atom, var),
        }
    }

    /// Whether a variable's value is part of it.
    pub fn reads_vars(&self) -> bool {
        match self {
            ValueExpr::Var(_) => true,
            ValueExpr::Atom(_) | ValueExpr::Const(_) => false,
            ValueExpr::Add(a, b) | ValueExpr::Sub(a, b) => a.reads_vars() || b.reads_vars(),
            ValueExpr::Scale(_, a) => a.reads_vars(),
        }
    }

    /// Calls `f` with each variable whose value is part of it.
    fn vars(&self, f: &mut dyn FnMut(VarId)) {
        match self {
            ValueExpr::Var(v) => f(*v),
            ValueExpr::Atom(_) | ValueExpr::Const(_) => {}
            ValueExpr::Add(a, b) | ValueExpr::Sub(a, b) => {
                a.vars(f);
                b.vars(f);
            }
            ValueExpr::Scale(_, a) => a.vars(f),
        }
    }

    /// The value of an `int` tensor's element, given each atom's f64 image: `None` where an
    /// atom, a constant or a partial result is not an integer below 2⁵³, which f64 may
    /// have rounded (§8). Operands below 2⁵³ add exactly, and a sum that reaches 2⁵³ still
    /// rounds to at least 2⁵³, so a result this accepts is the exact one.
    pub fn eval_exact(
        &self,
        atom: &dyn Fn(usize) -> f64,
        var: &dyn Fn(VarId) -> f64,
    ) -> Option<f64> {
        let held = |x: f64| crate::tensor::sums_exactly(x).then_some(x);
        let exact = |x: &ValueExpr| x.eval_exact(atom, var);
        match self {
            ValueExpr::Atom(k) => held(atom(*k)),
            ValueExpr::Var(v) => held(var(*v)),
            ValueExpr::Const(c) => held(*c),
            ValueExpr::Add(a, b) => held(exact(a)? + exact(b)?),
            ValueExpr::Sub(a, b) => held(exact(a)? - exact(b)?),
            // Integers whose exact product is below 2⁵³ multiply exactly in f64.
            ValueExpr::Scale(c, a) => held(held(*c)? * exact(a)?),
        }
    }
}

/// The rules of a stratum whose tensors all accumulate with the same `min=` or `max=`, whose
/// bodies add up reads of relations and of tensors with defined elements and the values of
/// variables those bind (a relation in a product only restricts), and in which the
/// stratum's own tensors are only ever added (never subtracted): then each iteration can only
/// improve elements, and only joins through the last round's improvements can improve more.
pub(crate) fn plan_extremum(p: &Checked, st: &Stratum) -> Option<Vec<ValuedRule>> {
    let family = p.tensors[*st.tensors.first()?].family;
    let ok = |t: &TensorId| {
        let info = &p.tensors[*t];
        info.family == family && info.kind != Kind::Bool && info.sparse_values
    };
    if !matches!(family, Family::Min | Family::Max) || !st.tensors.iter().all(ok) {
        return None;
    }
    st.equations
        .iter()
        .map(|&e| {
            let eq = &p.equations[e];
            if eq.family != family || eq.virtual_var.is_some() {
                return None;
            }
            let mut rule = Rule {
                head: eq.target,
                head_terms: eq
                    .lhs
                    .iter()
                    .enumerate()
                    .map(|(ax, f)| term_at(p, eq.target, ax, f))
                    .collect::<Option<Vec<_>>>()?,
                atoms: Vec::new(),
                negated: Vec::new(),
                absent: Vec::new(),
                filters: Vec::new(),
                checks: Vec::new(),
                lets: Vec::new(),
                vars: eq.vars.len(),
                equation: e,
                cyclic: false,
                exists: Vec::new(),
            };
            let value = value_expr(p, st, &eq.rhs, true, &mut rule.atoms)?;
            let mut positive = vec![false; rule.vars];
            for t in rule.atoms.iter().flat_map(|a| &a.terms) {
                if let Term::Var(v) = t {
                    positive[*v] = true;
                }
            }
            let mut valued_bound = true;
            value.vars(&mut |v| valued_bound &= positive[v]);
            let safe = !rule.atoms.is_empty()
                && valued_bound
                && rule
                    .head_terms
                    .iter()
                    .all(|t| !matches!(t, Term::Var(v) if !positive[*v]));
            safe.then(|| ValuedRule {
                rule: rule.planned(),
                value,
            })
        })
        .collect()
}

/// The value expression of a body, collecting its reads as atoms; `adds` is false under the
/// right operand of a subtraction, where the stratum's own tensors may not appear (the
/// iteration would then not be monotone).
fn value_expr(
    p: &Checked,
    st: &Stratum,
    n: &Node,
    adds: bool,
    atoms: &mut Vec<Atom>,
) -> Option<ValueExpr> {
    match n {
        // A nested `min`/`max` commutes with the additions around it, but not with being
        // subtracted: `a - min(b)` is `max(a - b)`.
        Node::Sum { vars, body } if adds || vars.is_empty() => value_expr(p, st, body, adds, atoms),
        Node::Const(c) => Some(ValueExpr::Const(c.value())),
        Node::Var(v) => Some(ValueExpr::Var(*v)),
        // Relations only restrict where the one other factor's value is taken (they are 1
        // where they hold, and the join visits nothing else).
        Node::Product(fs) if fs.iter().all(|(div, _)| !div) => {
            let relation = |f: &Node| matches!(f, Node::Read { tensor, .. } if p.tensors[*tensor].kind == Kind::Bool);
            let (relations, values): (Vec<&Node>, Vec<&Node>) =
                fs.iter().map(|(_, f)| f).partition(|f| relation(f));
            for r in relations {
                value_expr(p, st, r, adds, atoms)?;
            }
            // Constants scale the one value; a negative scale reverses which value is the
            // extreme, so the stratum's own tensors may not be under it.
            let (constants, values): (Vec<&Node>, Vec<&Node>) = values
                .into_iter()
                .partition(|f| matches!(f, Node::Const(_)));
            let scale: f64 = constants
                .iter()
                .map(|f| match f {
                    Node::Const(c) => c.value(),
                    _ => 1.0,
                })
                .product();
            let scaled = |v: ValueExpr| match scale == 1.0 {
                true => v,
                false => ValueExpr::Scale(scale, Box::new(v)),
            };
            match values.as_slice() {
                [] => Some(ValueExpr::Const(scale)),
                [v] => Some(scaled(value_expr(p, st, v, adds && scale > 0.0, atoms)?)),
                _ => None,
            }
        }
        Node::Read {
            tensor,
            index,
            slice: false,
        } => {
            let info = &p.tensors[*tensor];
            let own = st.tensors.contains(tensor);
            if (own && !adds) || !(info.kind == Kind::Bool || info.sparse_values) {
                return None;
            }
            atoms.push(Atom {
                tensor: *tensor,
                terms: index
                    .iter()
                    .enumerate()
                    .map(|(ax, f)| term_at(p, *tensor, ax, f))
                    .collect::<Option<Vec<_>>>()?,
            });
            Some(ValueExpr::Atom(atoms.len() - 1))
        }
        Node::Binary(op, a, b) => {
            let a = Box::new(value_expr(p, st, a, adds, atoms)?);
            match op {
                BinOp::Add => Some(ValueExpr::Add(
                    a,
                    Box::new(value_expr(p, st, b, adds, atoms)?),
                )),
                BinOp::Sub => Some(ValueExpr::Sub(
                    a,
                    Box::new(value_expr(p, st, b, false, atoms)?),
                )),
                BinOp::Pow | BinOp::Rem | BinOp::Quot => None,
            }
        }
        _ => None,
    }
}

/// Plans one equation as a join rule: with a Boolean head, or (`count`) an integer one;
/// `own` are the stratum's tensors, which its value checks may not read.
fn plan_rule(p: &Checked, e: usize, count: bool, own: &[TensorId]) -> Option<Rule> {
    let eq: &Equation = &p.equations[e];
    if eq.family != Family::Sum || eq.virtual_var.is_some() || eq.bool_head == count {
        return None;
    }
    let (head_terms, lets) = head_terms(p, eq)?;
    let Node::Sum { body, .. } = &eq.rhs else {
        return None;
    };
    let literals: Vec<&Node> = match strip(body) {
        Node::Product(fs) if fs.iter().all(|(div, _)| !div) => fs.iter().map(|(_, f)| f).collect(),
        single => vec![single],
    };
    let mut rule = Rule {
        head: eq.target,
        head_terms,
        atoms: Vec::new(),
        negated: Vec::new(),
        absent: Vec::new(),
        filters: Vec::new(),
        checks: Vec::new(),
        vars: eq.vars.len() + lets.len(),
        lets,
        equation: e,
        cyclic: false,
        exists: Vec::new(),
    };
    let checked_vars = add_literals(p, (e, own), &literals, &mut rule)?;
    rule.filters.extend(head_bounds(p, eq, &rule));
    let positive = positive_vars(&rule);
    // A count counts every assignment, a group's too; a relation asks only for one.
    if !count {
        rule.exists = independent(&mut rule, own);
    }
    safe((eq, &rule), &positive, &checked_vars).then(|| rule.planned())
}

/// The head's terms; head arithmetic binds a variable of its own (a `let` after the
/// equation's variables).
fn head_terms(p: &Checked, eq: &Equation) -> Option<(Vec<Term>, Vec<Let>)> {
    let mut lets = Vec::new();
    let mut head_terms = Vec::with_capacity(eq.lhs.len());
    let target = &p.tensors[eq.target];
    for (ax, (f, &extent)) in eq.lhs.iter().zip(&target.shape).enumerate() {
        head_terms.push(match (term_at(p, eq.target, ax, f), f) {
            (Some(t), _) => t,
            (None, IndexFn::Arith(..)) => {
                let var = eq.vars.len() + lets.len();
                let d = target.domains[ax];
                lets.push(Let {
                    var,
                    value: LetValue::Index(f.clone()),
                    extent,
                    open: p.domains[d].is_open().then_some(d),
                });
                Term::Var(var)
            }
            (None, _) => return None,
        });
    }
    Some((head_terms, lets))
}

/// Adds the body's literals to `rule`: atoms, negated and absent atoms, filters, bindings
/// of computed values (put before the head's lets) and checks the loop nests evaluate.
/// Returns the variables the checks and bindings read; `None` where a literal is none of
/// these.
fn add_literals(
    p: &Checked,
    (e, own): (usize, &[TensorId]),
    literals: &[&Node],
    rule: &mut Rule,
) -> Option<Vec<VarId>> {
    let eq = &p.equations[e];
    let mut in_atoms = vec![false; eq.vars.len()];
    for lit in literals {
        if let Node::Read { index, .. } = strip(lit) {
            for f in index {
                if let IndexFn::Var(v) = f {
                    in_atoms[*v] = true;
                }
            }
        }
    }
    let mut computed = Vec::new();
    let mut checked_vars = Vec::new();
    for lit in literals {
        let sums_here = matches!(lit, Node::Sum { vars, .. } if !vars.is_empty());
        let plain = strip(lit);
        let filter = |op: &CmpOp, a: &Node, b: &Node| {
            Some(Filter {
                op: *op,
                left: operand(strip(a))?,
                right: operand(strip(b))?,
            })
        };
        match plain {
            Node::Read { .. } => rule.atoms.push(atom(p, plain)?),
            Node::Not(inner) if !sums_here => match (atom(p, strip(inner)), inner.as_ref()) {
                (Some(a), Node::Sum { vars, .. }) if !vars.is_empty() => {
                    rule.absent.push(absent(a, vars)?)
                }
                (Some(a), _) => rule.negated.push(a),
                (None, _) => {
                    rule.checks.push(nest::check(p, e, plain, own)?);
                    plain.mentioned_vars(&mut checked_vars);
                }
            },
            Node::Compare(op, a, b) if !sums_here => match filter(op, a, b) {
                Some(f) => rule.filters.push(f),
                None if *op == CmpOp::Eq && binding(p, e, (a, b), &in_atoms, own).is_some() => {
                    let (var, value, shift) = binding(p, e, (a, b), &in_atoms, own)?;
                    value_vars(a, b, var, &mut checked_vars);
                    computed.push(Let {
                        var,
                        value: LetValue::Computed { value, shift },
                        extent: within_head(p, eq, var),
                        open: eq.vars[var].open,
                    });
                    in_atoms[var] = true;
                }
                None => {
                    rule.checks.push(nest::check(p, e, plain, own)?);
                    plain.mentioned_vars(&mut checked_vars);
                }
            },
            _ => return None,
        }
    }
    computed.append(&mut rule.lets);
    rule.lets = computed;
    Some(checked_vars)
}

/// Which variables a positive atom or a `let` binds.
fn positive_vars(rule: &Rule) -> Vec<bool> {
    let mut positive = vec![false; rule.vars];
    for a in &rule.atoms {
        for t in &a.terms {
            if let Term::Var(v) = t {
                positive[*v] = true;
            }
        }
    }
    for l in &rule.lets {
        positive[l.var] = true;
    }
    positive
}

/// Whether the rule is safe: every variable its head, negated and absent atoms, filters,
/// checks and head arithmetic read is bound by a positive atom or a binding (`positive`,
/// found before independent groups were taken out of the atoms).
fn safe((eq, rule): (&Equation, &Rule), positive: &[bool], checked_vars: &[VarId]) -> bool {
    let mut let_vars = Vec::new();
    for l in &rule.lets {
        if let LetValue::Index(f) = &l.value {
            f.vars(&mut let_vars);
        }
    }
    let bound = |t: &Term| !matches!(t, Term::Var(v) if !positive[*v]);
    let operand_bound = |o: &Operand| o.vars().iter().all(|&v| positive[v]);
    // A rule without variables needs no atom (`A() :- not B().`): it derives once.
    (!rule.atoms.is_empty() || eq.vars.is_empty() || !rule.exists.is_empty())
        && rule.head_terms.iter().all(bound)
        && rule.negated.iter().all(|a| a.terms.iter().all(bound))
        && rule.absent.iter().all(|a| a.terms.iter().all(bound))
        && rule
            .filters
            .iter()
            .all(|f| operand_bound(&f.left) && operand_bound(&f.right))
        && checked_vars.iter().all(|&v| positive[v])
        && let_vars.iter().all(|&v| positive[v] && v < eq.vars.len())
}

/// Takes out of `rule.atoms` the groups of atoms (connected by shared variables) that read
/// relations of lower strata only (not `own`) and whose variables nothing else in the rule
/// mentions: the head, the other atoms, negations, comparisons, computed positions. Rules
/// with value checks or bound values keep every atom (which variables those read is not
/// followed here).
fn independent(rule: &mut Rule, own: &[TensorId]) -> Vec<Vec<Atom>> {
    if !rule.checks.is_empty()
        || rule
            .lets
            .iter()
            .any(|l| matches!(l.value, LetValue::Computed { .. }))
    {
        return Vec::new();
    }
    let mut outside = vec![false; rule.vars];
    let mut mark = |t: &Term| {
        if let Term::Var(v) = t {
            outside[*v] = true;
        }
    };
    rule.head_terms.iter().for_each(&mut mark);
    rule.negated
        .iter()
        .flat_map(|a| &a.terms)
        .for_each(&mut mark);
    rule.absent
        .iter()
        .flat_map(|a| &a.terms)
        .for_each(&mut mark);
    for f in &rule.filters {
        for o in [&f.left, &f.right] {
            o.vars().into_iter().for_each(|v| mark(&Term::Var(v)));
        }
    }
    for l in &rule.lets {
        if let LetValue::Index(f) = &l.value {
            let mut vs = Vec::new();
            f.vars(&mut vs);
            vs.iter().for_each(|&v| mark(&Term::Var(v)));
        }
    }
    // Groups of atoms connected by shared variables.
    let n = rule.atoms.len();
    let mut group: Vec<usize> = (0..n).collect();
    let vars = |a: &Atom| -> Vec<VarId> {
        a.terms
            .iter()
            .filter_map(|t| match t {
                Term::Var(v) => Some(*v),
                Term::Const(_) => None,
            })
            .collect()
    };
    for i in 0..n {
        for j in 0..i {
            let (vi, vj) = (vars(&rule.atoms[i]), vars(&rule.atoms[j]));
            if vi.iter().any(|v| vj.contains(v)) {
                let (gi, gj) = (group[i], group[j]);
                group.iter_mut().filter(|g| **g == gi).for_each(|g| *g = gj);
            }
        }
    }
    let mut roots: Vec<usize> = group.clone();
    roots.sort_unstable();
    roots.dedup();
    let free = |g: usize| {
        (0..n).filter(|&i| group[i] == g).all(|i| {
            let a = &rule.atoms[i];
            !own.contains(&a.tensor) && vars(a).iter().all(|&v| !outside[v])
        })
    };
    let taken: Vec<usize> = roots.into_iter().filter(|&g| free(g)).collect();
    if taken.is_empty() {
        return Vec::new();
    }
    let atoms = std::mem::take(&mut rule.atoms);
    let mut groups: Vec<Vec<Atom>> = vec![Vec::new(); taken.len()];
    for (i, a) in atoms.into_iter().enumerate() {
        match taken.iter().position(|&g| g == group[i]) {
            Some(k) => groups[k].push(a),
            None => rule.atoms.push(a),
        }
    }
    groups
}

/// `(v, value, shift)` when an equality `v + shift == value` (either way round) binds a
/// variable `v` that no atom binds to a value read from lower strata, which mentions only
/// variables atoms bind.
fn binding(
    p: &Checked,
    e: usize,
    (a, b): (&Node, &Node),
    in_atoms: &[bool],
    own: &[TensorId],
) -> Option<(VarId, Value, i64)> {
    let shifted = |n: &Node| match n.inside_empty_sums() {
        Node::Var(v) => Some((*v, 0)),
        Node::Binary(BinOp::Add, x, k) => match (x.inside_empty_sums(), k.inside_empty_sums()) {
            (Node::Var(v), Node::Const(k)) => Some((*v, k.as_int()?)),
            _ => None,
        },
        _ => None,
    };
    [(a, b), (b, a)].into_iter().find_map(|(var, value)| {
        let (v, shift) = shifted(var)?;
        let mut mentioned = Vec::new();
        value.mentioned_vars(&mut mentioned);
        if in_atoms.get(v).copied().unwrap_or(true) || !mentioned.iter().all(|&u| in_atoms[u]) {
            return None;
        }
        Some((v, nest::computed(p, e, value, own)?, shift))
    })
}

/// Adds the variables of the value side of a binding `a == b` of `var`.
fn value_vars(a: &Node, b: &Node, var: VarId, out: &mut Vec<VarId>) {
    let mut all = Vec::new();
    a.mentioned_vars(&mut all);
    b.mentioned_vars(&mut all);
    out.extend(all.into_iter().filter(|&u| u != var));
}

/// The node inside summation points (their summed variables become join variables).
fn strip(n: &Node) -> &Node {
    match n {
        Node::Sum { body, .. } => strip(body),
        other => other,
    }
}

/// `a` with the positions of `anonymous` (each once, bare) left open.
fn absent(a: Atom, anonymous: &[VarId]) -> Option<Absent> {
    let open = |t: &Term| matches!(t, Term::Var(v) if anonymous.contains(v));
    let once = |&v: &VarId| a.terms.iter().filter(|t| **t == Term::Var(v)).count() == 1;
    if !anonymous.iter().all(once) {
        return None;
    }
    let (cols, terms) = a
        .terms
        .iter()
        .enumerate()
        .filter(|(_, t)| !open(t))
        .map(|(c, t)| (c, *t))
        .unzip();
    Some(Absent {
        tensor: a.tensor,
        cols,
        terms,
    })
}

fn term(f: &IndexFn) -> Option<Term> {
    match f {
        IndexFn::Var(v) => Some(Term::Var(*v)),
        IndexFn::Const(c) => u32::try_from(*c).ok().map(Term::Const),
        IndexFn::Arith(..) => None,
    }
}

/// [`term`] at axis `ax` of tensor `t`, where a constant on an open axis (§8) is a value,
/// numbered in its domain's table (a rule may ask for a value no datum holds yet).
fn term_at(p: &Checked, t: TensorId, ax: usize, f: &IndexFn) -> Option<Term> {
    let table = p.tensors[t]
        .domains
        .get(ax)
        .and_then(|&d| p.domains[d].table.as_ref());
    match (f, table) {
        (IndexFn::Const(c), Some(table)) => table.intern(*c).map(Term::Const),
        _ => term(f),
    }
}

fn atom(p: &Checked, n: &Node) -> Option<Atom> {
    match n {
        Node::Read {
            tensor,
            index,
            slice: false,
        } if p.tensors[*tensor].kind == Kind::Bool => Some(Atom {
            tensor: *tensor,
            terms: index
                .iter()
                .enumerate()
                .map(|(ax, f)| term_at(p, *tensor, ax, f))
                .collect::<Option<Vec<_>>>()?,
        }),
        _ => None,
    }
}

fn operand(n: &Node) -> Option<Operand> {
    match n {
        Node::Var(v) => Some(Operand::Var(*v)),
        Node::Const(c) => Some(Operand::Const(*c)),
        other => other.integer_arithmetic().map(Operand::Arith),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::chains;
    use crate::semantics::tests::checked;

    fn plans(src: &str) -> Vec<Option<Vec<Rule>>> {
        let c = checked(src);
        c.strata
            .iter()
            .filter(|s| !s.equations.is_empty())
            .map(|s| plan_stratum(&c, s))
            .collect()
    }

    #[test]
    fn rules_with_negation_constants_and_comparisons_are_planned() {
        let p = plans("E(A, B). N(A). N(B).\nP(x, y) :- E(x, y).\nP(x, z) :- P(x, y), E(y, z).\nQ(x) :- N(x), not P(A, x), x != B.\n");
        assert!(p.iter().all(Option::is_some), "{p:?}");
        let q = p.last().unwrap().as_ref().unwrap();
        assert_eq!(q[0].negated.len(), 1);
        assert_eq!(q[0].filters.len(), 1);
    }

    #[test]
    fn comparisons_of_values_are_checks_bound_by_atoms() {
        let p = plans("E(0, 1).\nW = [[0, 1], [1, 0]]\nR(0).\nR(y) :- R(x), E(x, y), W[x, y] > 0.5, x < y + 1.\n");
        let r = p.last().unwrap().as_ref().unwrap();
        // `x < y + 1` is integer arithmetic: a filter, compared exactly.
        assert_eq!((r[0].filters.len(), r[0].checks.len()), (1, 1));
        assert!(
            chains::chains(r).is_none(),
            "checks keep rules off bit matrices"
        );
        let unbound = plans("E(0, 1).\nW = [[0, 1], [1, 0]]\nF(x) :- E(x, x), W[x, y] > 0.\n");
        assert!(unbound.last().unwrap().is_none());
    }

    #[test]
    fn triangles_are_cyclic_and_paths_are_not() {
        let rules = |src: &str| plans(src).pop().flatten().unwrap();
        let tri = rules("E(0, 1).\nT(x, y, z) :- E(x, y), E(y, z), E(z, x).\n");
        assert!(cyclic(&tri[0]));
        assert_eq!(variable_order(&tri[0], None).len(), 3);
        let path = rules("E(0, 1).\nP(x, w) :- E(x, y), E(y, z), E(z, w), E(x, x).\n");
        assert!(!cyclic(&path[0]));
        let chord = rules("E(0, 1).\nP(x, w) :- E(x, y), E(y, z), E(z, w), E(x, z).\n");
        assert!(cyclic(&chord[0]), "x, y, z still form a triangle");
    }

    #[test]
    fn real_heads_arithmetic_and_unsafe_negation_are_not() {
        assert!(plans("E(0, 1).\nC[x] = E(x, y)\n")[0].is_none());
        assert!(plans("E(0, 1).\nF(x) :- E(x - 1, y).\n")[0].is_none());
        assert!(plans("E(0, 1). N(0). N(1).\nF(x) :- N(x), not E(x, y).\n")[0].is_none());
    }
}
