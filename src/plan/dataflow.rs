//! Lowering a program's relational strata into one differential dataflow (the `differential`
//! engine, `eval::differential`): where each stratum runs, and each rule as a pipeline of
//! joins over arrangements that its stratum's rules share.
//!
//! A stratum runs in the dataflow when its plan is semi-naive joins, counting joins or a
//! `min=`/`max=` recursion ([`Kernel::Datalog`], [`Kernel::Counts`], [`Kernel::Extremum`])
//! and the values its checks read are known before the dataflow starts. A `min=`/`max=`
//! stratum's values travel in its rows (two last words per atom of a tensor with values),
//! and a `reduce` per head keeps the best. Every other stratum runs on the standard engine: *before* the dataflow
//! when it reads nothing the dataflow computes (its relations then enter the dataflow as
//! inputs), *after* it otherwise, on the dataflow's results. Only relations cross between
//! the two.

use super::datalog::{Atom, Rule, Term, ValueExpr, ValuedRule};
use super::{Kernel, Plan};
use crate::semantics::{Checked, Family, Kind, TensorId, VarId};
use crate::tensor::ElemType;

/// Where a stratum runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// On the standard engine, before the dataflow starts: it reads nothing the dataflow
    /// computes.
    Before,
    /// In the dataflow.
    Flow,
    /// On the standard engine, on the dataflow's results; why it is not in the dataflow.
    After(String),
}

/// An arrangement's index among its stratum's ([`FlowStratum::arrangements`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ArrangementId(pub usize);

/// The rows of a relation that match an atom's constants and repeated variables, indexed by
/// some of their columns: what a join looks rows up in. Rules of a stratum that read the
/// same relation the same way share one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Arrangement {
    /// The relation.
    pub tensor: TensorId,
    /// Columns that must hold these positions.
    pub consts: Vec<(usize, u32)>,
    /// Pairs of columns that must hold the same position (a variable repeated in the atom).
    pub equal: Vec<(usize, usize)>,
    /// The columns rows are looked up by, in order.
    pub key: Vec<usize>,
    /// The other columns kept, in order; empty for a negated atom's keys.
    pub value: Vec<usize>,
    /// Whether rows are made distinct after projecting (a negated atom with anonymous
    /// positions projects many rows onto one key).
    pub distinct: bool,
}

/// One join of a rule: the assignments so far, keyed by `key`, meet an arrangement's rows.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct JoinStage {
    /// The arrangement joined.
    pub arrangement: ArrangementId,
    /// The bound variables making the key, in the arrangement's key order.
    pub key: Vec<VarId>,
    /// The variables after the join, in the order of an assignment's positions.
    pub env: Vec<VarId>,
}

/// A negated atom: assignments whose key is in the arrangement are dropped.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Antijoin {
    /// The arrangement of the negated relation's keys.
    pub arrangement: ArrangementId,
    /// The key's terms (variables bound by then, or constants).
    pub terms: Vec<Term>,
}

/// How a `min=`/`max=` rule's head value is computed: every atom of a tensor with values
/// reads its row's last two words (the value's bits, high first) into two variables of
/// their own, which no other atom shares, so they join nothing.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RuleValue {
    /// The value at one assignment, over the atoms' values.
    pub expr: ValueExpr,
    /// Per atom of the rule, the variables holding its value's high and low words; `None`
    /// for a relation, whose atoms are worth 1 where they hold.
    pub words: Vec<Option<[VarId; 2]>>,
    /// What the head's elements are rounded to (each candidate, as the standard engine
    /// rounds it).
    pub elem: ElemType,
    /// How the head combines candidates: an `int` candidate that f64 may not hold exactly
    /// takes the family's extreme (−∞ under `min=`), which wins and is refused when the
    /// answers are gathered (E0407).
    pub family: crate::semantics::Family,
}

/// A rule as a dataflow: the first atom's rows, joins, then the rule's comparisons,
/// computed positions and value checks, then negation, then the head.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FlowRule {
    /// The rule as the standard engine plans it (filters, checks and lets are read from it),
    /// with the value variables of a `min=`/`max=` rule added to its atoms.
    pub rule: Rule,
    /// For a `min=`/`max=` rule, its head value: the head's rows then end with its words.
    pub value: Option<RuleValue>,
    /// The first atom's arrangement.
    pub first: ArrangementId,
    /// The variables of the first atom's rows: its key, then its values.
    pub first_env: Vec<VarId>,
    /// The other atoms, in join order.
    pub joins: Vec<JoinStage>,
    /// The negated atoms.
    pub antijoins: Vec<Antijoin>,
}

/// A stratum in the dataflow.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FlowStratum {
    /// Index into `Checked::strata`.
    pub stratum: usize,
    /// Whether it is a fixpoint (an `iterate` scope of its own).
    pub recursive: bool,
    /// What its tensors are made of their rules' head rows.
    pub heads: Heads,
    /// The tensors it defines.
    pub tensors: Vec<TensorId>,
    /// Arrangements shared by its rules (built inside its loop when it is recursive).
    pub arrangements: Vec<Arrangement>,
    /// Its rules.
    pub rules: Vec<FlowRule>,
}

/// What a stratum in the dataflow makes of the head rows its rules derive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Heads {
    /// A relation: each distinct tuple.
    Distinct,
    /// A count: the number of rows per head tuple (one integer tensor).
    Count,
    /// `min=` or `max=`: per head tuple, the least or greatest value its rows carry.
    Extreme(Family),
}

/// The program as the differential engine runs it.
#[derive(Clone, Debug)]
pub(crate) struct DataflowPlan {
    /// Per stratum, where it runs.
    pub placement: Vec<Placement>,
    /// The relations the dataflow reads from outside it (facts, files, strata run before),
    /// and the facts of relations it defines (none, for some): one input each.
    pub inputs: Vec<TensorId>,
    /// The strata in the dataflow, in evaluation order.
    pub strata: Vec<FlowStratum>,
    /// The tensors that the rules' value checks and computed positions read: captured when
    /// the dataflow is built.
    pub read_by_values: Vec<TensorId>,
    /// The tensors whose rows carry their element's value as two last words (the bits of
    /// the `f64`, high first): those `min=`/`max=` strata define, and those they read that
    /// have values.
    pub valued: Vec<TensorId>,
}

impl Arrangement {
    /// All of `tensor`'s rows, keyed by nothing yet.
    fn of(tensor: TensorId) -> Arrangement {
        Arrangement {
            tensor,
            consts: Vec::new(),
            equal: Vec::new(),
            key: Vec::new(),
            value: Vec::new(),
            distinct: false,
        }
    }
}

impl DataflowPlan {
    /// The tensors the dataflow defines.
    pub(crate) fn outputs(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.strata.iter().flat_map(|s| s.tensors.iter().copied())
    }
}

/// Lowers the strata of a planned program.
pub(crate) fn plan_dataflow(p: &Checked, plan: &Plan) -> DataflowPlan {
    let mut placement: Vec<Placement> = Vec::with_capacity(p.strata.len());
    let mut home: Vec<Option<usize>> = vec![None; p.tensors.len()];
    let mut strata = Vec::new();
    let mut read_by_values = Vec::new();
    let mut valued = Vec::new();
    for (i, (st, sp)) in p.strata.iter().zip(&plan.strata).enumerate() {
        if i > 0 {
            for &t in &p.strata[i - 1].tensors {
                home[t] = Some(i - 1);
            }
        }
        let place = |t: TensorId| home[t].map(|s: usize| &placement[s]);
        let in_flow = |t: TensorId| matches!(place(t), Some(Placement::Flow));
        let after = |t: TensorId| matches!(place(t), Some(Placement::After(_)));
        let mut reads = Vec::new();
        for &e in &st.equations {
            p.equations[e].rhs.reads(&mut |t, _| reads.push(t));
        }
        let Some((heads, rules)) = lowered_rules(p, st, &sp.kernel) else {
            let late = reads.iter().any(|&t| in_flow(t) || after(t));
            placement.push(match late {
                true => Placement::After("not a Datalog stratum".into()),
                false => Placement::Before,
            });
            continue;
        };
        if let Some(why) = unflowable(p, &rules) {
            placement.push(Placement::After(why.into()));
            continue;
        }
        // A `min=`/`max=` stratum's values travel in its rows; other rules' values are read
        // from tensors known when the dataflow is built.
        let values = match heads {
            Heads::Extreme(_) => Vec::new(),
            _ => value_reads(p, &rules, &reads),
        };
        let blocked = reads.iter().copied().find(|&t| after(t)).or_else(|| {
            values
                .iter()
                .copied()
                .find(|&t| in_flow(t) || after(t) || st.tensors.contains(&t))
        });
        if let Some(t) = blocked {
            let why = format!(
                "it reads `{}`, which is computed from the dataflow's results",
                p.tensors[t].name
            );
            placement.push(Placement::After(why));
            continue;
        }
        read_by_values.extend(values);
        // Joins read only Boolean tensors, so a tensor's rows carry values in every rule
        // that reads them or in none.
        if let Heads::Extreme(_) = heads {
            valued.extend(&st.tensors);
            let atoms = rules.iter().flat_map(|(r, _)| &r.atoms);
            valued.extend(
                atoms
                    .map(|a| a.tensor)
                    .filter(|&t| p.tensors[t].kind != Kind::Bool),
            );
        }
        strata.push(lower_stratum(i, st.recursive, heads, &st.tensors, &rules));
        placement.push(Placement::Flow);
    }
    for (i, st) in p.strata.iter().enumerate() {
        for &t in &st.tensors {
            home[t] = Some(i);
        }
    }
    read_by_values.sort_unstable();
    read_by_values.dedup();
    valued.sort_unstable();
    valued.dedup();
    let inputs = dataflow_inputs(&strata, &home, &placement);
    DataflowPlan {
        placement,
        inputs,
        strata,
        read_by_values,
        valued,
    }
}

/// The rules of a stratum the dataflow can run (joins, counts, `min=`/`max=`), with how its
/// heads combine; `None` for any other kernel.
fn lowered_rules(
    p: &Checked,
    st: &crate::semantics::Stratum,
    kernel: &Kernel,
) -> Option<(Heads, Vec<Lowering>)> {
    Some(match kernel {
        Kernel::Datalog(rules, _) => (
            Heads::Distinct,
            rules.iter().map(|r| (r.clone(), None)).collect(),
        ),
        Kernel::Counts(rules) => (
            Heads::Count,
            rules.iter().map(|(r, _)| (r.clone(), None)).collect(),
        ),
        Kernel::Extremum(rules) => (
            Heads::Extreme(p.tensors[st.tensors[0]].family),
            rules.iter().map(|vr| with_values(p, vr)).collect(),
        ),
        _ => return None,
    })
}

/// Why rules the dataflow could run stay out of it, if they do.
fn unflowable(p: &Checked, rules: &[Lowering]) -> Option<&'static str> {
    if rules.iter().any(|(r, _)| r.joined().atoms.is_empty()) {
        return Some("a rule without a positive atom has no arrangement to start from");
    }
    let open_valued = |(r, v): &Lowering| {
        v.as_ref().is_some_and(|v| v.expr.reads_vars())
            && p.equations[r.equation]
                .vars
                .iter()
                .any(|x| x.open.is_some())
    };
    if rules.iter().any(|(r, _)| r.uses_open_values(p)) || rules.iter().any(open_valued) {
        return Some(
            "it computes with the values of open integer columns (§8), which are \
             numbered as they are met and so differ between workers",
        );
    }
    None
}

/// The tensors the dataflow reads from outside: arranged tensors no stratum in the flow
/// defines, and the facts of its relations (even none yet, so that incremental mode can
/// insert some; a count's facts are added to it after the dataflow).
fn dataflow_inputs(
    strata: &[FlowStratum],
    home: &[Option<usize>],
    placement: &[Placement],
) -> Vec<TensorId> {
    let mut inputs: Vec<TensorId> = Vec::new();
    for fs in strata {
        for a in &fs.arrangements {
            let defined = home[a.tensor].is_some_and(|s| placement[s] == Placement::Flow);
            if !defined {
                inputs.push(a.tensor);
            }
        }
        match fs.heads {
            Heads::Count => {}
            Heads::Distinct | Heads::Extreme(_) => inputs.extend(&fs.tensors),
        }
    }
    inputs.sort_unstable();
    inputs.dedup();
    inputs
}

/// A rule to lower, with its head value if it has one.
type Lowering = (Rule, Option<RuleValue>);

/// A `min=`/`max=` rule with two value variables added to each atom of a tensor with values.
fn with_values(p: &Checked, vr: &ValuedRule) -> (Rule, Option<RuleValue>) {
    let mut rule = vr.rule.clone();
    let mut words = Vec::with_capacity(rule.atoms.len());
    for a in rule.atoms.iter_mut() {
        words.push(value_words(p, a, &mut rule.vars));
    }
    let value = RuleValue {
        expr: vr.value.clone(),
        words,
        elem: p.tensors[rule.head].elem,
        family: p.tensors[rule.head].family,
    };
    (rule, Some(value))
}

/// Appends two fresh variables to atom `a` of a tensor with values, numbered from `vars`.
fn value_words(p: &Checked, a: &mut Atom, vars: &mut usize) -> Option<[VarId; 2]> {
    if p.tensors[a.tensor].kind == Kind::Bool {
        return None;
    }
    let w = [*vars, *vars + 1];
    *vars += 2;
    a.terms.extend([Term::Var(w[0]), Term::Var(w[1])]);
    Some(w)
}

/// The tensors read other than as a rule's atoms (in value checks and computed positions).
fn value_reads(p: &Checked, rules: &[Lowering], reads: &[TensorId]) -> Vec<TensorId> {
    let mut literal = vec![0usize; p.tensors.len()];
    for (r, _) in rules {
        let tensors = r.atoms.iter().chain(&r.negated).map(|a| a.tensor);
        for t in tensors.chain(r.absent.iter().map(|a| a.tensor)) {
            literal[t] += 1;
        }
    }
    let mut all = vec![0usize; p.tensors.len()];
    for &t in reads {
        all[t] += 1;
    }
    (0..p.tensors.len())
        .filter(|&t| all[t] > literal[t] || (all[t] > 0 && p.tensors[t].kind != Kind::Bool))
        .collect()
}

fn lower_stratum(
    stratum: usize,
    recursive: bool,
    heads: Heads,
    tensors: &[TensorId],
    rules: &[Lowering],
) -> FlowStratum {
    let mut fs = FlowStratum {
        stratum,
        recursive,
        heads,
        tensors: tensors.to_vec(),
        arrangements: Vec::new(),
        rules: Vec::new(),
    };
    for (r, value) in rules {
        let mut rule = lower_rule(&r.joined(), &mut fs.arrangements);
        rule.value = value.clone();
        fs.rules.push(rule);
    }
    fs
}

/// The arrangement's id, adding it if no rule of the stratum has it yet.
fn share(arrangements: &mut Vec<Arrangement>, a: Arrangement) -> ArrangementId {
    match arrangements.iter().position(|b| *b == a) {
        Some(k) => ArrangementId(k),
        None => {
            arrangements.push(a);
            ArrangementId(arrangements.len() - 1)
        }
    }
}

/// The join order: the first atom as written (users put the recursive atom first), then
/// repeatedly the atom with the most positions bound (by constants or earlier atoms), ties
/// broken by source order.
fn atom_order(r: &Rule) -> Vec<usize> {
    let mut bound = vec![false; r.vars];
    let mut left: Vec<usize> = (0..r.atoms.len()).collect();
    let mut order = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let known = |i: &usize| {
            let known = r.atoms[*i]
                .terms
                .iter()
                .filter(|t| !matches!(t, Term::Var(v) if !bound[*v]))
                .count();
            (order.is_empty() as usize, known, std::cmp::Reverse(*i))
        };
        let pick = match order.is_empty() {
            true => left[0],
            false => left.iter().copied().max_by_key(known).unwrap_or(left[0]),
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

/// How atom `terms` reads its relation given the variables `bound` before it: constants and
/// repeats select rows, bound variables form the key, the first occurrence of each other
/// variable a value.
fn arrangement_of(
    tensor: TensorId,
    terms: &[Term],
    bound: &[VarId],
) -> (Arrangement, Vec<VarId>, Vec<VarId>) {
    let mut a = Arrangement::of(tensor);
    let (mut key_vars, mut value_vars) = (Vec::new(), Vec::new());
    let mut first_col: Vec<(VarId, usize)> = Vec::new();
    for (c, t) in terms.iter().enumerate() {
        match t {
            Term::Const(k) => a.consts.push((c, *k)),
            Term::Var(v) if bound.contains(v) => {
                a.key.push(c);
                key_vars.push(*v);
            }
            Term::Var(v) => match first_col.iter().find(|(u, _)| u == v) {
                Some(&(_, c0)) => a.equal.push((c0, c)),
                None => {
                    first_col.push((*v, c));
                    a.value.push(c);
                    value_vars.push(*v);
                }
            },
        }
    }
    (a, key_vars, value_vars)
}

fn lower_rule(r: &Rule, arrangements: &mut Vec<Arrangement>) -> FlowRule {
    let order = atom_order(r);
    let mut env: Vec<VarId> = Vec::new();
    let mut first = ArrangementId(0);
    let mut first_env = Vec::new();
    let mut joins = Vec::new();
    for (k, &i) in order.iter().enumerate() {
        let atom = &r.atoms[i];
        if k == 0 {
            // The first atom is keyed by the variables the second looks up, in the order
            // the second's key lists them, so the first join reads two shared arrangements.
            let own = vars_of(&atom.terms);
            let next_key = match order.get(1) {
                Some(&j) => arrangement_of(r.atoms[j].tensor, &r.atoms[j].terms, &own).1,
                None => Vec::new(),
            };
            let (a, vars) = first_arrangement(atom.tensor, &atom.terms, &next_key);
            first = share(arrangements, a);
            first_env = vars;
            env = first_env.clone();
            continue;
        }
        let (a, key_vars, value_vars) = arrangement_of(atom.tensor, &atom.terms, &env);
        env.extend(value_vars);
        joins.push(JoinStage {
            arrangement: share(arrangements, a),
            key: key_vars,
            env: env.clone(),
        });
    }
    // A negated atom reads whole rows; one with anonymous positions, their projection
    // onto the others, made distinct.
    let negated = r.negated.iter().map(|a| {
        let cols: Vec<usize> = (0..a.terms.len()).collect();
        (a.tensor, cols, a.terms.clone(), false)
    });
    let absent = r
        .absent
        .iter()
        .map(|a| (a.tensor, a.cols.clone(), a.terms.clone(), true));
    let antijoins = negated
        .chain(absent)
        .map(|(tensor, cols, terms, distinct)| {
            let a = Arrangement {
                key: cols,
                distinct,
                ..Arrangement::of(tensor)
            };
            Antijoin {
                arrangement: share(arrangements, a),
                terms,
            }
        })
        .collect();
    FlowRule {
        rule: r.clone(),
        value: None,
        first,
        first_env,
        joins,
        antijoins,
    }
}

/// The first atom's arrangement, keyed by `key` (variables it binds, in the order of the
/// key the next atom is looked up by), and the variables of its rows: the key, then the
/// other variables in column order.
fn first_arrangement(tensor: TensorId, terms: &[Term], key: &[VarId]) -> (Arrangement, Vec<VarId>) {
    let mut a = Arrangement::of(tensor);
    let mut first_col: Vec<(VarId, usize)> = Vec::new();
    let mut values = Vec::new();
    for (c, t) in terms.iter().enumerate() {
        match t {
            Term::Const(k) => a.consts.push((c, *k)),
            Term::Var(v) => match first_col.iter().find(|(u, _)| u == v) {
                Some(&(_, c0)) => a.equal.push((c0, c)),
                None => {
                    first_col.push((*v, c));
                    if !key.contains(v) {
                        a.value.push(c);
                        values.push(*v);
                    }
                }
            },
        }
    }
    for v in key {
        if let Some(&(_, c)) = first_col.iter().find(|(u, _)| u == v) {
            a.key.push(c);
        }
    }
    (a, key.iter().copied().chain(values).collect())
}

fn vars_of(terms: &[Term]) -> Vec<VarId> {
    let mut vs = Vec::new();
    for t in terms {
        if let Term::Var(v) = t {
            if !vs.contains(v) {
                vs.push(*v);
            }
        }
    }
    vs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    fn lowered(src: &str) -> (Checked, DataflowPlan) {
        let c = checked(src);
        let plan = crate::plan::plan(&c);
        let d = plan_dataflow(&c, &plan);
        (c, d)
    }

    #[test]
    fn the_first_atom_is_keyed_in_the_order_the_second_looks_it_up() {
        let (c, d) = lowered("A(0, 1). B(1, 0).\nC(x, y) :- A(x, y), B(y, x).\n");
        let fs = d
            .strata
            .iter()
            .find(|s| s.tensors == [c.tensor_id("C").unwrap()]);
        let fs = fs.unwrap();
        let r = &fs.rules[0];
        let first = &fs.arrangements[r.first.0];
        let join = &fs.arrangements[r.joins[0].arrangement.0];
        // B(y, x) is looked up by (y, x): A's key must be its columns (1, 0).
        assert_eq!(
            (first.key.clone(), join.key.clone()),
            (vec![1, 0], vec![0, 1])
        );
        assert_eq!(r.first_env, r.joins[0].key);
    }

    #[test]
    fn rules_reading_a_relation_alike_share_its_arrangement() {
        let (_, d) = lowered("E(0, 1).\nN(x) :- E(x, y).\nN(y) :- E(x, y).\n");
        let fs = &d.strata[0];
        assert_eq!(fs.arrangements.len(), 1, "{:?}", fs.arrangements);
        assert_eq!(fs.rules.len(), 2);
    }

    #[test]
    fn min_and_max_strata_carry_values_in_their_rows() {
        let src = "Edge[A, B] = 2\nEdge[B, C] = 3\nOk(B).\nDist[x, y] min= Edge[x, y]\nDist[x, z] min= Dist[x, y] + Edge[y, z] + Ok(y)\nFar[x] max= Dist[x, y]\n";
        let (c, d) = lowered(src);
        let id = |n: &str| c.tensor_id(n).unwrap();
        assert_eq!(d.valued, {
            let mut v = vec![id("Edge"), id("Dist"), id("Far")];
            v.sort_unstable();
            v
        });
        let dist = d.strata.iter().find(|s| s.tensors == [id("Dist")]).unwrap();
        assert!(dist.recursive && dist.heads == Heads::Extreme(Family::Min));
        let r = &dist.rules[1];
        let value = r.value.as_ref().unwrap();
        // Dist and Edge carry two words each, Ok none: it is worth 1 where it holds.
        let vars = c.equations[r.rule.equation].vars.len();
        assert_eq!(
            value.words,
            vec![Some([vars, vars + 1]), Some([vars + 2, vars + 3]), None]
        );
        assert_eq!(r.rule.atoms[0].terms.len(), 4);
        let far = d.strata.iter().find(|s| s.tensors == [id("Far")]).unwrap();
        assert!(!far.recursive && far.heads == Heads::Extreme(Family::Max));
        assert!(d.read_by_values.is_empty(), "values travel in rows");
    }

    #[test]
    fn dense_strata_run_before_or_after_the_dataflow() {
        let src = "E(0, 1). E(1, 2).\nW = [[0, 1, 0], [0, 0, 1], [0, 0, 0]]\nS[x] = W[x, y]\nP(x, y) :- E(x, y).\nP(x, z) :- P(x, y), E(y, z).\nH[x] = relu(S[x]) + 1\nQ(x) :- P(x, y), S[x] > 0.5.\nR[x] = P(x, y) W[x, y]\n";
        let (c, d) = lowered(src);
        let place = |name: &str| {
            let t = c.tensor_id(name).unwrap();
            let i = c
                .strata
                .iter()
                .position(|s| s.tensors.contains(&t))
                .unwrap();
            d.placement[i].clone()
        };
        assert_eq!(place("S"), Placement::Before);
        assert_eq!(place("P"), Placement::Flow);
        assert_eq!(
            place("Q"),
            Placement::Flow,
            "its check reads S, known before"
        );
        assert!(matches!(place("R"), Placement::After(_)));
        assert!(d.read_by_values.contains(&c.tensor_id("S").unwrap()));
        assert!(d.inputs.contains(&c.tensor_id("E").unwrap()));
    }
}
