//! Semi-naive evaluation of Datalog-shaped strata (planned by `plan::datalog`): relations as
//! tuple sets with hash indexes on the columns each join looks up, maintained as tuples
//! arrive, and every recursive rule re-run once per recursive atom reading only the tuples new
//! in the last round.
//!
//! It must agree with the reference evaluator exactly; `tests/engines.rs` checks that on
//! random programs.

use super::EvalOptions;
use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::plan::datalog::{Atom, Filter, Operand, Rule, Term};
use crate::semantics::{Checked, Stratum, TensorId};
use crate::syntax::ast::CmpOp;
use crate::tensor::Tensor;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// A set of tuples with hash indexes keyed by column lists.
#[derive(Default)]
struct Store {
    rows: Vec<Vec<u32>>,
    set: HashSet<Vec<u32>>,
    indexes: HashMap<Vec<usize>, HashMap<Vec<u32>, Vec<u32>>>,
}

impl Store {
    fn from_tensor(t: &Tensor) -> Store {
        let mut s = Store::default();
        for (idx, v) in t.entries() {
            if v != 0.0 {
                s.insert(idx.iter().map(|&i| i as u32).collect());
            }
        }
        s
    }

    /// Adds a tuple, updating every index; false if it was already there.
    fn insert(&mut self, t: Vec<u32>) -> bool {
        if self.set.contains(&t) {
            return false;
        }
        let row = self.rows.len() as u32;
        for (cols, index) in &mut self.indexes {
            let key: Vec<u32> = cols.iter().map(|&c| t[c]).collect();
            index.entry(key).or_default().push(row);
        }
        self.set.insert(t.clone());
        self.rows.push(t);
        true
    }

    /// Makes sure an index on `cols` exists.
    fn ensure_index(&mut self, cols: &[usize]) {
        if cols.is_empty() || self.indexes.contains_key(cols) {
            return;
        }
        let mut index: HashMap<Vec<u32>, Vec<u32>> = HashMap::default();
        for (r, t) in self.rows.iter().enumerate() {
            index
                .entry(cols.iter().map(|&c| t[c]).collect())
                .or_default()
                .push(r as u32);
        }
        self.indexes.insert(cols.to_vec(), index);
    }
}

/// Which version of a relation an atom reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Version {
    /// All tuples.
    Full(TensorId),
    /// Tuples new in the last round (recursive relations only).
    Delta(TensorId),
}

/// One atom in join order: which columns are looked up, which bind variables.
struct Step {
    version: Version,
    key_cols: Vec<usize>,
    key_terms: Vec<Term>,
    binds: Vec<(usize, usize, bool)>,
}

/// Evaluates a planned stratum in place.
pub(super) fn evaluate_stratum(
    p: &Checked,
    st: &Stratum,
    rules: &[Rule],
    values: &mut [Tensor],
    o: &EvalOptions,
) -> Result<(), Diagnostics> {
    let members = &st.tensors;
    let mut full: HashMap<TensorId, Store> = HashMap::default();
    for &t in members {
        full.insert(t, Store::from_tensor(&values[t]));
    }
    for r in rules {
        for a in r.atoms.iter().chain(&r.negated) {
            full.entry(a.tensor)
                .or_insert_with(|| Store::from_tensor(&values[a.tensor]));
        }
    }
    let mut delta: HashMap<TensorId, Store> = HashMap::default();
    let mut new = Vec::new();
    for r in rules {
        run_rule(r, None, &mut full, &mut delta, &mut new);
    }
    let mut rounds = 1;
    loop {
        delta.clear();
        for (t, tuple) in new.drain(..) {
            let store = full.entry(t).or_default();
            if store.insert(tuple.clone()) {
                delta.entry(t).or_default().insert(tuple);
            }
        }
        if delta.is_empty() || !st.recursive {
            break;
        }
        if rounds >= o.max_iters {
            return Err(diverged(p, st, o));
        }
        rounds += 1;
        for r in rules {
            for (i, a) in r.atoms.iter().enumerate() {
                if delta.contains_key(&a.tensor) {
                    run_rule(r, Some(i), &mut full, &mut delta, &mut new);
                }
            }
        }
    }
    for &t in members {
        let rows = full.remove(&t).map(|s| s.rows).unwrap_or_default();
        values[t] = Tensor::relation(p.tensors[t].shape.clone(), rows);
    }
    Ok(())
}

fn diverged(p: &Checked, st: &Stratum, o: &EvalOptions) -> Diagnostics {
    let names: Vec<String> = st
        .tensors
        .iter()
        .map(|&t| format!("`{}`", p.tensors[t].name))
        .collect();
    Diagnostic::error(
        codes::DIVERGED,
        p.equations[st.equations[0]].span,
        format!(
            "{} did not converge after {} iterations",
            names.join(", "),
            o.max_iters
        ),
    )
    .with_label("in this recursive rule")
    .with_note("raise --max-iters: each iteration derives facts one step longer")
    .into()
}

/// Runs one rule, with atom `delta_at` reading the last round's new tuples, and collects the
/// head tuples it derives.
fn run_rule(
    r: &Rule,
    delta_at: Option<usize>,
    full: &mut HashMap<TensorId, Store>,
    delta: &mut HashMap<TensorId, Store>,
    out: &mut Vec<(TensorId, Vec<u32>)>,
) {
    let steps = order(r, delta_at, full);
    for s in &steps {
        let store = match s.version {
            Version::Full(t) => full.entry(t).or_default(),
            Version::Delta(t) => delta.entry(t).or_default(),
        };
        store.ensure_index(&s.key_cols);
    }
    let mut env = vec![0u32; r.vars];
    let cx = Join {
        rule: r,
        steps: &steps,
        full,
        delta,
    };
    cx.join(0, &mut env, &mut |env| {
        let tuple = r.head_terms.iter().map(|t| value(t, env)).collect();
        out.push((r.head, tuple));
    });
}

/// Join order: the delta atom first, then repeatedly the atom with the most bound columns
/// (ties: the smaller relation, then source order).
fn order(r: &Rule, delta_at: Option<usize>, full: &HashMap<TensorId, Store>) -> Vec<Step> {
    let mut bound = vec![false; r.vars];
    let mut left: Vec<usize> = (0..r.atoms.len()).collect();
    let mut steps = Vec::with_capacity(r.atoms.len());
    while !left.is_empty() {
        let pick = match delta_at.filter(|d| left.contains(d)) {
            Some(d) => d,
            None => {
                let score = |&i: &usize| {
                    let a = &r.atoms[i];
                    let bound_cols = a
                        .terms
                        .iter()
                        .filter(|t| {
                            matches!(t, Term::Const(_)) || matches!(t, Term::Var(v) if bound[*v])
                        })
                        .count();
                    let size = full.get(&a.tensor).map(|s| s.rows.len()).unwrap_or(0);
                    (std::cmp::Reverse(bound_cols), size, i)
                };
                left.iter().copied().min_by_key(score).unwrap_or(left[0])
            }
        };
        left.retain(|&i| i != pick);
        let a = &r.atoms[pick];
        let version = if Some(pick) == delta_at {
            Version::Delta(a.tensor)
        } else {
            Version::Full(a.tensor)
        };
        let mut key_cols = Vec::new();
        let mut key_terms = Vec::new();
        let mut binds = Vec::new();
        let mut newly = Vec::new();
        for (c, t) in a.terms.iter().enumerate() {
            match t {
                Term::Const(_) => {
                    key_cols.push(c);
                    key_terms.push(*t);
                }
                Term::Var(v) if bound[*v] => {
                    key_cols.push(c);
                    key_terms.push(*t);
                }
                Term::Var(v) => {
                    let repeat = newly.contains(v);
                    binds.push((c, *v, repeat));
                    newly.push(*v);
                }
            }
        }
        for v in newly {
            bound[v] = true;
        }
        steps.push(Step {
            version,
            key_cols,
            key_terms,
            binds,
        });
    }
    steps
}

fn value(t: &Term, env: &[u32]) -> u32 {
    match t {
        Term::Var(v) => env[*v],
        Term::Const(c) => *c,
    }
}

struct Join<'a> {
    rule: &'a Rule,
    steps: &'a [Step],
    full: &'a HashMap<TensorId, Store>,
    delta: &'a HashMap<TensorId, Store>,
}

impl Join<'_> {
    fn store(&self, v: Version) -> Option<&Store> {
        match v {
            Version::Full(t) => self.full.get(&t),
            Version::Delta(t) => self.delta.get(&t),
        }
    }

    fn join(&self, k: usize, env: &mut [u32], emit: &mut dyn FnMut(&[u32])) {
        let Some(step) = self.steps.get(k) else {
            if self.rule.negated.iter().all(|a| !self.holds(a, env))
                && self.rule.filters.iter().all(|f| passes(f, env))
            {
                emit(env);
            }
            return;
        };
        let Some(store) = self.store(step.version) else {
            return;
        };
        let mut visit = |row: &Vec<u32>, env: &mut [u32]| {
            for &(c, v, repeat) in &step.binds {
                if repeat {
                    if env[v] != row[c] {
                        return;
                    }
                } else {
                    env[v] = row[c];
                }
            }
            self.join(k + 1, env, emit);
        };
        if step.key_cols.is_empty() {
            for row in &store.rows {
                visit(row, env);
            }
            return;
        }
        let key: Vec<u32> = step.key_terms.iter().map(|t| value(t, env)).collect();
        let Some(ids) = store
            .indexes
            .get(&step.key_cols)
            .and_then(|ix| ix.get(&key))
        else {
            return;
        };
        for &id in ids {
            visit(&store.rows[id as usize], env);
        }
    }

    fn holds(&self, a: &Atom, env: &[u32]) -> bool {
        let tuple: Vec<u32> = a.terms.iter().map(|t| value(t, env)).collect();
        self.full
            .get(&a.tensor)
            .is_some_and(|s| s.set.contains(&tuple))
    }
}

fn passes(f: &Filter, env: &[u32]) -> bool {
    let get = |o: &Operand| match o {
        Operand::Var(v) => env[*v] as f64,
        Operand::Const(c) => *c,
    };
    let (a, b) = (get(&f.left), get(&f.right));
    match f.op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
    }
}
