//! Backward chaining for `tl query` (SPEC §9, §16): the magic-sets transformation of the
//! Datalog rules a query needs, so that evaluation derives only facts relevant to the query's
//! constants. `Reach(N0, x)` then explores what `N0` reaches instead of the whole closure.
//!
//! Each derived relation is *adorned* with which of its positions are bound when it is asked
//! for (`Path` asked with its first position known is `Path_bf`). Each adorned relation gets a
//! *magic* relation holding the bound values asked for, and each of its rules is guarded by
//! that magic relation. Bindings flow sideways through a rule body in join order: an atom's
//! positions are bound when a constant or an earlier atom fixes them. Only relations evaluated
//! by joins (`plan::datalog`) are adorned; everything else a rule reads (lower strata that are
//! not Datalog-shaped, relations read under `not`) is evaluated in full first, which keeps the
//! rewritten program free of negation through recursion.

use super::datalog::{plan_stratum, Atom, Rule, Term};
use crate::semantics::{
    Checked, IndexFn, Node, Output, Query, QueryIndex, Stratum, TensorId, VarId,
};
use std::collections::{BTreeMap, BTreeSet};

/// The rewritten program for one query. New relations (adorned and magic) take ids from
/// `Checked::tensors.len()` on.
#[derive(Clone, Debug)]
pub struct DemandPlan {
    /// Magic and adorned rules, to be run together to one fixpoint.
    pub rules: Vec<Rule>,
    /// Per new relation (id `tensors.len() + k`): its arity, and for an adorned relation the
    /// original whose data facts it starts from.
    pub relations: Vec<(usize, Option<TensorId>)>,
    /// The magic relation of the query and the tuples it starts with: one per pattern of
    /// constants asked (`tl query` asks one; a program's rules may ask several).
    pub seed: (TensorId, Vec<Vec<u32>>),
    /// The adorned relation holding the query's answers (and perhaps other true tuples).
    pub answer: TensorId,
    /// Original tensors the rules read as they are: they must be evaluated in full first.
    pub full: BTreeSet<TensorId>,
    /// Relations read only under `not`, always with the same constants (`not Path(y, 0)`):
    /// each is answered first by its own backward chaining for those constants, which
    /// gives every tuple a lookup can ask for, instead of being evaluated in full.
    pub negated: Vec<Query>,
}

/// Per original tensor, the tensors its equations read.
fn reads(p: &Checked) -> Vec<BTreeSet<TensorId>> {
    fn walk(n: &Node, out: &mut BTreeSet<TensorId>) {
        if let Node::Read { tensor, .. } = n {
            out.insert(*tensor);
        }
        for c in n.children() {
            walk(c, out);
        }
    }
    let mut deps = vec![BTreeSet::new(); p.tensors.len()];
    for eq in &p.equations {
        walk(&eq.rhs, &mut deps[eq.target]);
    }
    deps
}

/// Everything `roots` depend on, themselves included.
pub(crate) fn closure(
    p: &Checked,
    roots: impl IntoIterator<Item = TensorId>,
) -> BTreeSet<TensorId> {
    let deps = reads(p);
    let mut seen = BTreeSet::new();
    let mut stack: Vec<TensorId> = roots.into_iter().collect();
    while let Some(t) = stack.pop() {
        if seen.insert(t) {
            stack.extend(deps[t].iter().copied());
        }
    }
    seen
}

/// The query a program's own rules ask of the relation stratum `st` computes, when they ask
/// it only at constants (§9: demand is a plan choice for programs too): `st` is recursive
/// and computes that one relation, which no query prints and no file receives, and every
/// read of it elsewhere binds the same positions to the same constants
/// (`Found() :- Sg(N16384, N32767)`). Evaluating it for that query's demand then gives
/// every tuple any rule reads.
pub(crate) fn asked_by_program(p: &Checked, st: &Stratum) -> Option<Vec<Query>> {
    let [t] = st.tensors[..] else {
        return None;
    };
    if !st.recursive || p.tensors[t].kind != crate::semantics::Kind::Bool {
        return None;
    }
    let printed = p.outputs.iter().any(|o| match o {
        Output::Query(q) => q.tensor == t,
        Output::Write { tensor, .. } => *tensor == t,
    });
    if printed || p.params.contains(&t) {
        return None;
    }
    let mut asked: Vec<Vec<Option<i64>>> = Vec::new();
    let mut same = true;
    for (e, eq) in p.equations.iter().enumerate() {
        if st.equations.contains(&e) {
            continue;
        }
        eq.rhs.reads(&mut |tensor, index| {
            if tensor != t {
                return;
            }
            let consts: Vec<Option<i64>> = index
                .iter()
                .map(|f| match f {
                    IndexFn::Const(c) => Some(*c),
                    _ => None,
                })
                .collect();
            // Every read binds the same positions, to constants.
            let bound: Vec<bool> = consts.iter().map(Option::is_some).collect();
            let like = asked
                .first()
                .is_none_or(|a| a.iter().map(Option::is_some).eq(bound.iter().copied()));
            same &= bound.contains(&true) && like;
            if !asked.contains(&consts) {
                asked.push(consts);
            }
        });
    }
    if !same || asked.is_empty() {
        return None;
    }
    asked
        .iter()
        .map(|consts| {
            let pattern = consts
                .iter()
                .enumerate()
                .map(|(ax, c)| match c {
                    None => Some(QueryIndex::Var(ax)),
                    Some(v) => {
                        let d = p.tensors[t].domains[ax];
                        let position = match &p.domains[d].table {
                            Some(table) => table.intern(*v).map(i64::from),
                            None => Some(*v),
                        };
                        position
                            .and_then(|x| usize::try_from(x).ok())
                            .map(QueryIndex::Fixed)
                    }
                })
                .collect::<Option<_>>()?;
            Some(Query {
                tensor: t,
                pattern,
                paren: true,
                span: p.tensors[t].span,
                warnings: Vec::new(),
            })
        })
        .collect()
}

/// Narrows a relation that a stratum computes without recursion to what its readers keep
/// (§9: a relation read only under a filter is narrowed by demand): where every rule that
/// reads it compares a column of it with the same constant (`Small(x, y) :- Pair(x, y),
/// x < 2`), and nothing else reads, prints or writes it, its own rules take that comparison
/// on their head's term for the column, so `Pair(x, y) :- N(x), N(y)` derives 2 rows of
/// pairs, not 10,001.
pub(crate) fn narrow_by_readers(p: &Checked, strata: &mut [super::StratumPlan]) -> Vec<TensorId> {
    use super::datalog::{Filter, Operand};
    use super::Kernel;
    let mut narrowed = Vec::new();
    for (i, st) in p.strata.iter().enumerate() {
        let [t] = st.tensors[..] else {
            continue;
        };
        let printed = p.outputs.iter().any(|o| match o {
            Output::Query(q) => q.tensor == t,
            Output::Write { tensor, .. } => *tensor == t,
        });
        if st.recursive || printed || !matches!(strata[i].kernel, Kernel::Datalog(..)) {
            continue;
        }
        // Per column, the comparisons with constants that every reading rule makes.
        let mut common: Option<Vec<(usize, Filter)>> = None;
        let mut readers = 0usize;
        for (e, eq) in p.equations.iter().enumerate() {
            let mut reads = 0usize;
            eq.rhs.reads(&mut |x, _| reads += usize::from(x == t));
            if reads == 0 {
                continue;
            }
            readers += reads;
            let rule = strata.iter().find_map(|sp| match &sp.kernel {
                Kernel::Datalog(rules, _) => rules.iter().find(|r| r.equation == e),
                _ => None,
            });
            let found = rule.filter(|r| {
                reads == 1
                    && r.negated
                        .iter()
                        .chain(&r.exists.concat())
                        .all(|a| a.tensor != t)
            });
            let Some(rule) =
                found.filter(|r| r.atoms.iter().filter(|a| a.tensor == t).count() == 1)
            else {
                common = Some(Vec::new());
                break;
            };
            let Some(atom) = rule.atoms.iter().find(|a| a.tensor == t) else {
                continue;
            };
            let mut here = Vec::new();
            for f in &rule.filters {
                let (var, op, c) = match (&f.left, &f.right) {
                    (Operand::Var(v), Operand::Const(c)) => (*v, f.op, *c),
                    (Operand::Const(c), Operand::Var(v)) => (*v, f.op.flipped(), *c),
                    _ => continue,
                };
                let cols = (0..atom.terms.len()).filter(|&c| atom.terms[c] == Term::Var(var));
                for col in cols {
                    here.push((
                        col,
                        Filter {
                            op,
                            left: Operand::Var(col),
                            right: Operand::Const(c),
                        },
                    ));
                }
            }
            common = Some(match common {
                None => here,
                Some(before) => before.into_iter().filter(|x| here.contains(x)).collect(),
            });
        }
        let Some(common) = common.filter(|c| !c.is_empty() && readers > 0) else {
            continue;
        };
        narrowed.push(t);
        if let Kernel::Datalog(rules, _) = &mut strata[i].kernel {
            for r in rules.iter_mut() {
                for (col, f) in &common {
                    if let Some(Term::Var(v)) = r.head_terms.get(*col) {
                        r.filters.push(Filter {
                            left: Operand::Var(*v),
                            ..f.clone()
                        });
                    }
                }
            }
        }
    }
    narrowed
}

/// The magic-sets rewrite of every query in `asked` (patterns of one relation binding the
/// same positions), as one rewrite with a seed per query; `None` unless each query's
/// rewrite is the same but for its seed.
pub(crate) fn plan_program_demand(p: &Checked, asked: &[Query]) -> Option<DemandPlan> {
    let mut plans = asked.iter().map(|q| plan_demand(p, q));
    let mut plan = plans.next()??;
    for other in plans {
        let other = other?;
        let alike = other.rules == plan.rules
            && other.relations == plan.relations
            && other.seed.0 == plan.seed.0
            && other.answer == plan.answer
            && other.full == plan.full
            && other.negated.is_empty()
            && plan.negated.is_empty();
        if !alike {
            return None;
        }
        plan.seed.1.extend(other.seed.1);
    }
    Some(plan)
}

/// The joins of every stratum that `reach` touches and that runs as joins, by head
/// (each of the stratum's tensors present, with no rules where it has none).
fn rules_reached(p: &Checked, reach: &BTreeSet<TensorId>) -> BTreeMap<TensorId, Vec<Rule>> {
    let mut rules_of: BTreeMap<TensorId, Vec<Rule>> = BTreeMap::new();
    for st in &p.strata {
        if !st.tensors.iter().any(|t| reach.contains(t)) {
            continue;
        }
        if let Some(rules) = plan_stratum(p, st).filter(|r| !r.is_empty()) {
            for &t in &st.tensors {
                rules_of.insert(t, Vec::new());
            }
            for r in rules {
                rules_of.entry(r.head).or_default().push(r);
            }
        }
    }
    rules_of
}

/// The magic-sets rewrite for `q`, when the queried relation is evaluated by joins and the
/// query binds at least one position; `None` means evaluating what `q` reads in full is as
/// good as it gets.
pub(crate) fn plan_demand(p: &Checked, q: &Query) -> Option<DemandPlan> {
    let alpha: Vec<bool> = q
        .pattern
        .iter()
        .map(|x| matches!(x, QueryIndex::Fixed(_)))
        .collect();
    if !alpha.contains(&true) || q.pattern.contains(&QueryIndex::Missing) {
        return None;
    }
    let reach = closure(p, [q.tensor]);
    let mut rules_of = rules_reached(p, &reach);
    // A computed head position cannot be asked for before it is computed.
    if rules_of.values().flatten().any(|r| !r.lets.is_empty()) {
        return None;
    }
    // Negated atoms and value checks read their tensors whole.
    let mut checked = Vec::new();
    for r in rules_of.values().flatten() {
        r.checks.iter().for_each(|c| c.tensors(&mut checked));
    }
    // Unless a rule reads the queried relation, its rules only ever run for the query's
    // constants, so those stand for the head variables they bind.
    let read_back = rules_of
        .values()
        .flatten()
        .any(|r| r.atoms.iter().any(|a| a.tensor == q.tensor));
    let seed = (!read_back).then_some(q);
    let asked = negated_patterns(p, &rules_of, &checked, seed);
    let by_demand: Vec<Query> = asked
        .iter()
        .filter_map(|(&t, pattern)| {
            let q = negated_query(t, pattern.as_ref()?);
            plan_demand(p, &q).map(|_| q)
        })
        .collect();
    let demanded = |t: &TensorId| by_demand.iter().any(|q| q.tensor == *t);
    // Independent groups of atoms (`Rule::exists`) are asked once, of lower strata read
    // as they are: they too are needed whole.
    let negated = rules_of
        .values()
        .flatten()
        .flat_map(|r| {
            let negated = r.negated.iter().map(|a| a.tensor);
            let exists = r.exists.iter().flatten().map(|a| a.tensor);
            negated
                .chain(r.absent.iter().map(|a| a.tensor))
                .chain(exists)
        })
        .filter(|t| !demanded(t))
        .chain(checked);
    let others = reach
        .iter()
        .copied()
        .filter(|t| !rules_of.contains_key(t) && !demanded(t));
    let full = closure(p, negated.chain(others).collect::<Vec<_>>());
    rules_of.retain(|t, _| !full.contains(t));
    if !rules_of.contains_key(&q.tensor) {
        return None;
    }
    let mut rw = Rewrite {
        p,
        rules_of: &rules_of,
        ids: BTreeMap::new(),
        relations: Vec::new(),
        queue: Vec::new(),
        rules: Vec::new(),
        full,
    };
    let (answer, magic) = rw.adorned(q.tensor, &alpha);
    while let Some((t, adornment)) = rw.queue.pop() {
        rw.rewrite(t, &adornment);
    }
    let seed = q
        .pattern
        .iter()
        .filter_map(|x| match x {
            QueryIndex::Fixed(v) => u32::try_from(*v).ok(),
            _ => None,
        })
        .collect();
    Some(DemandPlan {
        rules: rw.rules,
        relations: rw.relations,
        seed: (magic, vec![seed]),
        answer,
        full: rw.full,
        negated: by_demand,
    })
}

/// Per relation read under `not` in `rules_of`, the constants it is read with, when every
/// negated read of it there has the same constants in the same positions, at least one,
/// and no value check reads it (`None` otherwise: it is needed whole). A constant may be
/// the query's own, standing for a head variable it binds (`seed`).
fn negated_patterns(
    p: &Checked,
    rules_of: &BTreeMap<TensorId, Vec<Rule>>,
    checked: &[TensorId],
    seed: Option<&Query>,
) -> BTreeMap<TensorId, Option<Vec<Option<u32>>>> {
    let mut asked: BTreeMap<TensorId, Option<Vec<Option<u32>>>> = BTreeMap::new();
    for r in rules_of.values().flatten() {
        // Head variables the query's constants bind, in a rule of the queried relation.
        let mut fixed: BTreeMap<VarId, u32> = BTreeMap::new();
        if let Some(q) = seed.filter(|q| q.tensor == r.head) {
            for (t, x) in r.head_terms.iter().zip(&q.pattern) {
                if let (Term::Var(v), QueryIndex::Fixed(c)) = (t, x) {
                    if let Ok(c) = u32::try_from(*c) {
                        fixed.insert(*v, c);
                    }
                }
            }
        }
        for a in &r.negated {
            let pattern: Vec<Option<u32>> = a
                .terms
                .iter()
                .map(|t| match t {
                    Term::Const(c) => Some(*c),
                    Term::Var(v) => fixed.get(v).copied(),
                })
                .collect();
            let entry = asked
                .entry(a.tensor)
                .or_insert_with(|| Some(pattern.clone()));
            if entry.as_ref() != Some(&pattern) {
                *entry = None;
            }
        }
        // Absent atoms and independent groups read their relations whole.
        let absent = r.absent.iter().map(|a| a.tensor);
        for t in absent.chain(r.exists.iter().flatten().map(|a| a.tensor)) {
            asked.insert(t, None);
        }
    }
    // Positive reads are of adorned copies, which start from whatever the relation holds;
    // a value check reads the relation itself, so it is then needed whole.
    for (t, pattern) in asked.iter_mut() {
        let has_constant = pattern
            .as_ref()
            .is_some_and(|p| p.iter().any(Option::is_some));
        if checked.contains(t)
            || !has_constant
            || p.tensors[*t].kind != crate::semantics::Kind::Bool
        {
            *pattern = None;
        }
    }
    asked
}

/// The query `t(…)` with `pattern`'s constants and a variable of its own at every other
/// position.
fn negated_query(t: TensorId, pattern: &[Option<u32>]) -> Query {
    Query {
        tensor: t,
        pattern: pattern
            .iter()
            .enumerate()
            .map(|(k, c)| match c {
                Some(c) => QueryIndex::Fixed(*c as usize),
                None => QueryIndex::Var(k),
            })
            .collect(),
        paren: true,
        span: crate::diagnostics::Span::default(),
        warnings: Vec::new(),
    }
}

struct Rewrite<'a> {
    p: &'a Checked,
    rules_of: &'a BTreeMap<TensorId, Vec<Rule>>,
    /// (relation, adornment) → (adorned id, magic id).
    ids: BTreeMap<(TensorId, Vec<bool>), (TensorId, TensorId)>,
    relations: Vec<(usize, Option<TensorId>)>,
    queue: Vec<(TensorId, Vec<bool>)>,
    rules: Vec<Rule>,
    full: BTreeSet<TensorId>,
}

impl Rewrite<'_> {
    /// The ids of `t` adorned by `alpha` and of its magic relation, queueing its rules the
    /// first time it is asked for.
    fn adorned(&mut self, t: TensorId, alpha: &[bool]) -> (TensorId, TensorId) {
        if let Some(&ids) = self.ids.get(&(t, alpha.to_vec())) {
            return ids;
        }
        let base = self.p.tensors.len();
        let adorned = base + self.relations.len();
        self.relations.push((alpha.len(), Some(t)));
        let magic = base + self.relations.len();
        self.relations
            .push((alpha.iter().filter(|&&b| b).count(), None));
        self.ids.insert((t, alpha.to_vec()), (adorned, magic));
        self.queue.push((t, alpha.to_vec()));
        (adorned, magic)
    }

    /// Adds the adorned copies of `t`'s rules, and a magic rule for every adorned atom in them.
    fn rewrite(&mut self, t: TensorId, alpha: &[bool]) {
        let (adorned, magic) = self.adorned(t, alpha);
        let rules_of = self.rules_of;
        let Some(rules) = rules_of.get(&t) else {
            return;
        };
        for r in rules {
            let guard = Atom {
                tensor: magic,
                terms: bound_terms(&r.head_terms, alpha),
            };
            let mut bound = vec![false; r.vars];
            mark(&guard.terms, &mut bound);
            let mut body = vec![guard.clone()];
            let mut left: Vec<&Atom> = r.atoms.iter().collect();
            while !left.is_empty() {
                let known = |a: &Atom| a.terms.iter().filter(|t| is_bound(t, &bound)).count();
                let pick = (0..left.len())
                    .max_by_key(|&i| (known(left[i]), std::cmp::Reverse(i)))
                    .unwrap_or(0);
                let a = left.remove(pick);
                let tensor = if self.rules_of.contains_key(&a.tensor) {
                    let beta: Vec<bool> = a.terms.iter().map(|t| is_bound(t, &bound)).collect();
                    let (adorned_a, magic_a) = self.adorned(a.tensor, &beta);
                    let head_terms = bound_terms(&a.terms, &beta);
                    // `m(x) :- m(x)` (a recursive atom asked the same way) adds nothing.
                    let trivial = magic_a == magic && body.len() == 1 && head_terms == guard.terms;
                    if !trivial {
                        self.rules.push(
                            Rule {
                                head: magic_a,
                                head_terms,
                                atoms: body.clone(),
                                negated: Vec::new(),
                                absent: Vec::new(),
                                filters: Vec::new(),
                                checks: Vec::new(),
                                lets: Vec::new(),
                                vars: r.vars,
                                equation: r.equation,
                                cyclic: false,
                                exists: Vec::new(),
                            }
                            .planned(),
                        );
                    }
                    adorned_a
                } else {
                    self.full.insert(a.tensor);
                    a.tensor
                };
                mark(&a.terms, &mut bound);
                body.push(Atom {
                    tensor,
                    terms: a.terms.clone(),
                });
            }
            self.rules.push(
                Rule {
                    head: adorned,
                    head_terms: r.head_terms.clone(),
                    atoms: body,
                    negated: r.negated.clone(),
                    absent: r.absent.clone(),
                    filters: r.filters.clone(),
                    checks: r.checks.clone(),
                    lets: r.lets.clone(),
                    vars: r.vars,
                    equation: r.equation,
                    cyclic: false,
                    exists: r.exists.clone(),
                }
                .planned(),
            );
        }
    }
}

fn is_bound(t: &Term, bound: &[bool]) -> bool {
    match t {
        Term::Const(_) => true,
        Term::Var(v) => bound[*v],
    }
}

fn mark(terms: &[Term], bound: &mut [bool]) {
    for t in terms {
        if let Term::Var(v) = t {
            bound[*v] = true;
        }
    }
}

fn bound_terms(terms: &[Term], alpha: &[bool]) -> Vec<Term> {
    terms
        .iter()
        .zip(alpha)
        .filter(|(_, &b)| b)
        .map(|(t, _)| *t)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    fn plan(src: &str, query: &str) -> Option<DemandPlan> {
        let c = checked(src);
        let access = crate::syntax::parse_query(query, crate::functions::BUILTINS).unwrap();
        let q = crate::semantics::resolve_query(&c, &access).unwrap();
        plan_demand(&c, &q)
    }

    const TC: &str = "Edge(0, 1). Edge(1, 2).\nPath(x, y) :- Edge(x, y).\nPath(x, z) :- Path(x, y), Edge(y, z).\n";

    #[test]
    fn a_bound_closure_query_asks_only_for_its_own_adornment() {
        let d = plan(TC, "Path(0, x)").unwrap();
        // Path_bf and its magic relation; the recursive atom keeps the same adornment.
        assert_eq!(d.relations.len(), 2);
        assert_eq!(d.seed.1, vec![vec![0]]);
        assert!(d.full.contains(&0), "Edge is read as it is");
        assert_eq!(d.rules.iter().filter(|r| r.head == d.answer).count(), 2);
    }

    #[test]
    fn free_queries_and_negated_relations_are_not_rewritten() {
        assert!(plan(TC, "Path(x, y)").is_none());
        let neg =
            format!("{TC}N(0). N(1). N(2).\nFar(x, y) :- N(x), N(y), not Path(z, z), N(z).\n");
        let d = plan(&neg, "Far(0, y)").unwrap();
        let path = checked(&neg).tensor_id("Path").unwrap();
        assert!(
            d.full.contains(&path),
            "Path is read under `not` with no constant, so it is evaluated in full"
        );
    }

    #[test]
    fn an_independent_group_is_read_whole() {
        let src = "B(1). E(0, 2). E(3, 3).\nD(x) :- B(x).\nP(x, y) :- D(w), E(x, y).\n";
        let d = plan(src, "P(x, 2)").unwrap();
        let dd = checked(src).tensor_id("D").unwrap();
        assert!(
            d.full.contains(&dd),
            "D(w) is asked once, of D evaluated in full"
        );
    }

    #[test]
    fn a_negated_relation_read_with_constants_gets_its_own_demand() {
        let neg = format!("{TC}N(0). N(1). N(2).\nFar(x, y) :- N(x), N(y), not Path(x, y).\n");
        let d = plan(&neg, "Far(0, y)").unwrap();
        let path = checked(&neg).tensor_id("Path").unwrap();
        assert!(!d.full.contains(&path));
        assert_eq!(d.negated.len(), 1);
        assert_eq!(d.negated[0].tensor, path);
        assert_eq!(
            d.negated[0].pattern,
            vec![QueryIndex::Fixed(0), QueryIndex::Var(1)],
            "the query's constant stands for x"
        );
    }
}
