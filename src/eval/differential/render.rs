//! Builds the timely dataflow of a [`DataflowPlan`] in one worker: an input per relation
//! entering it, each stratum's arrangements and rules, an `iterate` scope per recursive
//! stratum, and the results routed to worker 0, where they are captured.

use super::{Delta, Job, Row};
use crate::eval::nest::Checker;
use crate::eval::relational::{bind_lets, passes, Lets};
use crate::plan::dataflow::{Arrangement, ArrangementId, FlowRule, FlowStratum, Heads, RuleValue};
use crate::plan::datalog::Term;
use crate::semantics::{Family, TensorId};
use differential_dataflow::input::{Input, InputSession};
use differential_dataflow::lattice::Lattice;
use differential_dataflow::operators::arrange::{Arranged, TraceAgent};
use differential_dataflow::operators::iterate::VecVariable;
use differential_dataflow::trace::implementations::ValSpine;
use differential_dataflow::{AsCollection, VecCollection};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use timely::dataflow::operators::probe::Handle;
use timely::dataflow::operators::vec::{Broadcast, Filter};
use timely::dataflow::operators::{Exchange, Inspect, Probe};
use timely::dataflow::Scope;
use timely::order::Product;
use timely::progress::Timestamp;

/// Multiplicities: 1 per tuple of a relation, the number of assignments before `distinct`.
type Diff = isize;
type Coll<'s, T> = VecCollection<'s, T, Row, Diff>;
type Arr<'s, T> = Arranged<'s, TraceAgent<ValSpine<Row, Row, T, Diff>>>;

/// Collections by the tensor they hold.
type Named<'s> = HashMap<TensorId, Coll<'s, u64>>;

/// Changes to one relation the dataflow computes, as captured at worker 0.
pub(super) type Captured = Rc<RefCell<Vec<(TensorId, Row, Diff)>>>;

/// What a worker holds of its dataflow.
pub(super) struct Rendered {
    /// One per [`crate::plan::dataflow::DataflowPlan::inputs`].
    pub inputs: Vec<InputSession<u64, Row, Diff>>,
    /// Passes a round once every result of that round has been captured.
    pub probe: Handle<u64>,
    /// The results' changes (at worker 0; empty elsewhere).
    pub captured: Captured,
    /// Changes a `min=`/`max=` fixpoint made at iteration `--max-iters` or later, per
    /// tensor (at worker 0): what it still changes after the last iteration allowed, which
    /// the dataflow does not feed back. Any left after a round means it did not settle.
    pub unsettled: Captured,
    /// Rows one worker sends every worker (process 0 telling the others to start again).
    pub notice: InputSession<u64, Row, Diff>,
    /// The rows sent through `notice`, as this worker received them.
    pub noticed: Rc<RefCell<Vec<Row>>>,
}

/// Where a worker's results go: captured at worker 0, and the probe that passes a round
/// once every one of them is.
struct Sinks {
    probe: Handle<u64>,
    captured: Captured,
    unsettled: Captured,
}

impl Sinks {
    /// Sends `c`'s changes, as tensor `t`'s, to worker 0 and captures them in `sink`.
    fn capture(&self, t: TensorId, c: Coll<'_, u64>, sink: &Captured) {
        let sink = sink.clone();
        // The caller nets each tuple's changes, so they need not be consolidated here.
        c.inner
            .exchange(|_| 0)
            .inspect(move |(row, _, diff)| sink.borrow_mut().push((t, row.clone(), *diff)))
            .probe_with(&self.probe);
    }
}

/// Builds the dataflow in `worker`.
pub(super) fn render(worker: &mut timely::worker::Worker, job: &Job) -> Rendered {
    worker.dataflow::<u64, _, _>(|scope| {
        let plan = &job.plan;
        let mut inputs = Vec::with_capacity(plan.inputs.len());
        let mut facts: HashMap<TensorId, Coll<'_, u64>> = HashMap::new();
        for &t in &plan.inputs {
            let (handle, c) = scope.new_collection::<Row, Diff>();
            inputs.push(handle);
            facts.insert(t, c);
        }
        let defined: Vec<TensorId> = plan.outputs().collect();
        let mut rels: HashMap<TensorId, Coll<'_, u64>> = facts
            .iter()
            .filter(|(t, _)| !defined.contains(t))
            .map(|(&t, c)| (t, c.clone()))
            .collect();
        let sinks = Sinks {
            probe: Handle::new(),
            captured: Rc::new(RefCell::new(Vec::new())),
            unsettled: Rc::new(RefCell::new(Vec::new())),
        };
        for fs in &plan.strata {
            let defs = match (fs.recursive, fs.heads) {
                (true, _) => recursive(scope, fs, (&rels, &facts), job, &sinks),
                (false, Heads::Count) => counted(fs, &rels, job),
                (false, heads) => {
                    let rows = stratum_rules(fs, &|t| rels.get(&t).cloned(), job);
                    fs.tensors
                        .iter()
                        .filter_map(|&t| {
                            let own = facts.get(&t).cloned();
                            Some((t, settle(union(heads_of(&rows, t).chain(own))?, heads)))
                        })
                        .collect()
                }
            };
            rels.extend(defs);
        }
        for t in defined {
            let Some(c) = rels.get(&t) else { continue };
            sinks.capture(t, c.clone(), &sinks.captured);
        }
        for c in facts.values() {
            c.clone().inner.probe_with(&sinks.probe);
        }
        let (notice, notes) = scope.new_collection::<Row, Diff>();
        let noticed = Rc::new(RefCell::new(Vec::new()));
        let sink = noticed.clone();
        notes
            .inner
            .broadcast()
            .inspect(move |(row, _, d)| {
                if *d > 0 {
                    sink.borrow_mut().push(row.clone())
                }
            })
            .probe_with(&sinks.probe);
        Rendered {
            inputs,
            notice,
            noticed,
            probe: sinks.probe,
            captured: sinks.captured,
            unsettled: sinks.unsettled,
        }
    })
}

/// The head tuples of `heads` defining `t`.
fn heads_of<'a, 's, T: Timestamp + Lattice>(
    heads: &'a [(TensorId, Coll<'s, T>)],
    t: TensorId,
) -> impl Iterator<Item = Coll<'s, T>> + 'a {
    heads
        .iter()
        .filter(move |(h, _)| *h == t)
        .map(|(_, c)| c.clone())
}

/// The concatenation of collections (none for none).
fn union<'s, T: Timestamp + Lattice>(
    mut parts: impl Iterator<Item = Coll<'s, T>>,
) -> Option<Coll<'s, T>> {
    let first = parts.next()?;
    Some(first.concatenate(parts))
}

/// A tensor made of its facts' and rules' head rows, as `heads` says.
fn settle<'s, T: Timestamp + Lattice>(rows: Coll<'s, T>, heads: Heads) -> Coll<'s, T> {
    match heads {
        Heads::Extreme(family) => best(rows, family),
        Heads::Distinct | Heads::Count => rows.distinct(),
    }
}

/// Per head tuple, the row with the least (`min=`) or greatest (`max=`) value: rows end
/// with their value's two words.
fn best<'s, T: Timestamp + Lattice>(rows: Coll<'s, T>, family: Family) -> Coll<'s, T> {
    rows.map(|mut r| {
        let k = r.len().saturating_sub(2);
        let v: Row = r[k..].iter().copied().collect();
        r.truncate(k);
        (r, v)
    })
    .reduce(
        move |_, values: &[(&Row, Diff)], output: &mut Vec<(Row, Diff)>| {
            let mut pick: Option<(&Row, f64)> = None;
            for &(v, n) in values {
                let x = Delta::value(v).1;
                if n > 0 && pick.is_none_or(|(_, y)| better(family, x, y)) {
                    pick = Some((v, x));
                }
            }
            if let Some((v, _)) = pick {
                output.push((v.clone(), 1));
            }
        },
    )
    .map(|(mut k, v)| {
        k.extend_from_slice(&v);
        k
    })
}

/// Whether `new` improves on `old`, as the standard engine decides it: strictly, and any
/// number on NaN.
fn better(family: Family, new: f64, old: f64) -> bool {
    match family {
        Family::Min => new < old || (old.is_nan() && !new.is_nan()),
        _ => new > old || (old.is_nan() && !new.is_nan()),
    }
}

/// A recursive stratum: one variable per tensor in an `iterate` scope, each made (as its
/// stratum's heads say) of its facts and its rules' heads over the variables' last values.
/// A `min=`/`max=` one feeds back only the changes of its first `--max-iters` iterations;
/// later ones go to the sinks' `unsettled`.
fn recursive<'s>(
    scope: Scope<'s, u64>,
    fs: &FlowStratum,
    (rels, facts): (&Named<'s>, &Named<'s>),
    job: &Job,
    sinks: &Sinks,
) -> Vec<(TensorId, Coll<'s, u64>)> {
    scope.iterative::<u64, _, _>(|inner| {
        let mut own: HashMap<TensorId, Coll<'_, Product<u64, u64>>> = HashMap::new();
        let mut vars = Vec::new();
        for &t in &fs.tensors {
            let (v, c) = VecVariable::new(inner, Product::new(0, 1));
            own.insert(t, c);
            vars.push((t, v));
        }
        let entered: RefCell<HashMap<TensorId, Coll<'_, Product<u64, u64>>>> =
            RefCell::new(HashMap::new());
        let rel = |t: TensorId| {
            if let Some(c) = own.get(&t) {
                return Some(c.clone());
            }
            let mut e = entered.borrow_mut();
            if let Some(c) = e.get(&t) {
                return Some(c.clone());
            }
            let c = rels.get(&t)?.clone().enter(inner);
            e.insert(t, c.clone());
            Some(c)
        };
        let heads = stratum_rules(fs, &rel, job);
        let cap = job.values.options.max_iters as u64;
        let mut out = Vec::new();
        for (t, v) in vars {
            let fact = facts.get(&t).map(|c| c.clone().enter(inner));
            let Some(def) = union(heads_of(&heads, t).chain(fact)) else {
                continue;
            };
            let mut def = settle(def, fs.heads);
            if let Heads::Extreme(_) = fs.heads {
                let late = def.inner.clone().filter(move |(_, at, _)| at.inner >= cap);
                sinks.capture(t, late.as_collection().leave(scope), &sinks.unsettled);
                def = def
                    .inner
                    .filter(move |(_, at, _)| at.inner < cap)
                    .as_collection();
            }
            v.set(def.clone());
            out.push((t, def.leave(scope)));
        }
        out
    })
}

/// A counting stratum: the number of assignments per head tuple, written as the head's
/// positions followed by the count's high and low 32 bits.
fn counted<'s>(
    fs: &FlowStratum,
    rels: &HashMap<TensorId, Coll<'s, u64>>,
    job: &Job,
) -> Vec<(TensorId, Coll<'s, u64>)> {
    let heads = stratum_rules(fs, &|t| rels.get(&t).cloned(), job);
    let Some(&t) = fs.tensors.first() else {
        return Vec::new();
    };
    let Some(all) = union(heads_of(&heads, t)) else {
        return Vec::new();
    };
    let counts = all.count().map(|(mut head, n)| {
        let n = n as u64;
        head.push((n >> 32) as u32);
        head.push(n as u32);
        head
    });
    vec![(t, counts)]
}

/// Every rule's head tuples (one per assignment), with the relation it defines.
fn stratum_rules<'s, T: Timestamp + Lattice>(
    fs: &FlowStratum,
    rel: &dyn Fn(TensorId) -> Option<Coll<'s, T>>,
    job: &Job,
) -> Vec<(TensorId, Coll<'s, T>)> {
    let arrangements: Vec<Option<Arr<'s, T>>> = fs
        .arrangements
        .iter()
        .map(|a| Some(arrange(a, rel(a.tensor)?)))
        .collect();
    fs.rules
        .iter()
        .filter_map(|r| Some((r.rule.head, rule(r, &arrangements, job)?)))
        .collect()
}

/// The rows of a relation an arrangement keeps, keyed.
fn arrange<'s, T: Timestamp + Lattice>(a: &Arrangement, c: Coll<'s, T>) -> Arr<'s, T> {
    let sel = a.clone();
    let picked = c.filter(move |r| {
        sel.consts.iter().all(|&(c, k)| r.get(c) == Some(&k))
            && sel.equal.iter().all(|&(x, y)| r.get(x) == r.get(y))
    });
    let (key, value) = (a.key.clone(), a.value.clone());
    let cols = |r: &Row, cs: &[usize]| cs.iter().map(|&c| r[c]).collect::<Row>();
    match a.distinct {
        true => picked
            .map(move |r| cols(&r, &key))
            .distinct()
            .map(|k| (k, Row::new()))
            .arrange_by_key(),
        false => picked
            .map(move |r| (cols(&r, &key), cols(&r, &value)))
            .arrange_by_key(),
    }
}

/// A rule's head tuples, one per satisfying assignment.
fn rule<'s, T: Timestamp + Lattice>(
    r: &FlowRule,
    arrangements: &[Option<Arr<'s, T>>],
    job: &Job,
) -> Option<Coll<'s, T>> {
    let arr = |id: ArrangementId| arrangements.get(id.0).cloned().flatten();
    let first = arr(r.first)?;
    let concat = |parts: [&[u32]; 3]| -> Row {
        let mut row = Row::with_capacity(parts.iter().map(|p| p.len()).sum());
        parts.iter().for_each(|p| row.extend_from_slice(p));
        row
    };
    let mut env: Coll<'s, T> = match r.joins.first() {
        Some(j) => first.join_core(arr(j.arrangement)?, move |k, a, b| {
            Some(concat([k.as_slice(), a.as_slice(), b.as_slice()]))
        }),
        None => first.as_collection(move |k, v| concat([k.as_slice(), v.as_slice(), &[]])),
    };
    let mut layout = r.joins.first().map_or(&r.first_env, |j| &j.env);
    for j in r.joins.iter().skip(1) {
        let at: Vec<usize> = j
            .key
            .iter()
            .map(|v| layout.iter().position(|u| u == v).unwrap_or(0))
            .collect();
        env = env
            .map(move |e| (at.iter().map(|&i| e[i]).collect::<Row>(), e))
            .arrange_by_key()
            .join_core(arr(j.arrangement)?, move |_, e, v| {
                Some(concat([e.as_slice(), v.as_slice(), &[]]))
            });
        layout = &j.env;
    }
    // The full assignment, every variable at its own number, computed positions bound.
    let slots: Vec<(usize, usize)> = (0..r.rule.vars)
        .filter_map(|v| Some((v, layout.iter().position(|&u| u == v)?)))
        .collect();
    let (rule, values) = (r.rule.clone(), job.values.clone());
    let mut full = env.flat_map(move |e| {
        let mut a = vec![0u32; rule.vars];
        for &(v, at) in &slots {
            a[v] = e[at];
        }
        // Strata whose rules use values of open columns (§8) run after the dataflow
        // (`plan::dataflow`), so every position here is a value less an offset.
        let checker = Checker {
            values: &values.tensors,
            o: &values.options,
            open: None,
        };
        let ok = (rule.lets.is_empty() || bind_lets(&rule, &checker, (&[], Lets::All), &mut a))
            && rule.filters.iter().all(|f| passes(f, &a, &[]))
            && checker.holds(&rule.checks, &a, &[]);
        ok.then_some(a)
    });
    for aj in &r.antijoins {
        let terms = aj.terms.clone();
        let keyed = full.map(move |a| (key(&terms, &a), a));
        let hits = keyed
            .clone()
            .arrange_by_key()
            .join_core(arr(aj.arrangement)?, |k, a, _| Some((k.clone(), a.clone())));
        full = keyed.concat(hits.negate()).map(|(_, a)| a);
    }
    let head = r.rule.head_terms.clone();
    Some(match r.value.clone() {
        None => full.map(move |a| key(&head, &a)),
        Some(value) => full.map(move |a| {
            let mut row = key(&head, &a);
            row.extend(Delta::words(valued(&value, &a)));
            row
        }),
    })
}

/// A `min=`/`max=` rule's head value under assignment `a`, rounded to its element type; an
/// `int` one that f64 may not hold exactly is the family's extreme (`RuleValue::family`).
fn valued(value: &RuleValue, a: &[u32]) -> f64 {
    let atom = |k: usize| match value.words.get(k).copied().flatten() {
        Some([hi, lo]) => Delta::value(&[a[hi], a[lo]]).1,
        None => 1.0,
    };
    // Rules that read an open column's values stay out of the dataflow (`unflowable`).
    let position = |v: usize| f64::from(a[v]);
    if value.elem == crate::tensor::ElemType::Int {
        let extreme = match value.family {
            crate::semantics::Family::Min => f64::NEG_INFINITY,
            _ => f64::INFINITY,
        };
        return value.expr.eval_exact(&atom, &position).unwrap_or(extreme);
    }
    value.elem.round(value.expr.eval(&atom, &position))
}

/// The positions `terms` take under assignment `a`.
fn key(terms: &[Term], a: &[u32]) -> Row {
    terms
        .iter()
        .map(|t| match t {
            Term::Var(v) => a[*v],
            Term::Const(c) => *c,
        })
        .collect()
}
