//! Worst-case-optimal joins for cyclic rule bodies (`plan::datalog::cyclic`), in the style
//! of generic join: variables are bound one at a time, each from the smallest of the candidate
//! sets that the atoms holding it allow, and every candidate is checked against the others by
//! an index lookup. The work is bounded by the largest answer the atoms' sizes permit (for a
//! triangle over m edges, m^1.5) instead of by the intermediate pairs an atom-at-a-time join
//! builds, which on a skewed graph approach m².

use super::join::{admits, fill, Version, MAX_STACK_ARITY};
use super::store::{row, Store};
use super::{Derived, Halt};
use crate::eval::nest::Checker;
use crate::eval::stop::Ticker;
use crate::plan::datalog::{variable_order, Rule, Term};
use crate::plan::schedule::JOIN_CANDIDATES;
use crate::semantics::{TensorId, VarId};
use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

/// One atom's say in binding one variable.
struct Part {
    version: Version,
    /// Columns known before the variable is bound (constants, earlier variables) and the terms
    /// giving their values.
    key_cols: Vec<usize>,
    key_terms: Vec<Term>,
    /// Columns holding the variable.
    var_cols: Vec<usize>,
    /// `key_cols` then `var_cols`: looked up to check a candidate.
    probe_cols: Vec<usize>,
    /// Whether the atom has columns bound later: then its rows can repeat a candidate.
    repeats: bool,
}

/// Binding one variable.
struct Level {
    var: VarId,
    parts: Vec<Part>,
}

/// The levels of a generic join for one run of a rule.
pub(super) struct Plan {
    levels: Vec<Level>,
    /// Atoms with no variable: they hold or the rule derives nothing.
    ground: Vec<(Version, Vec<u32>)>,
}

/// A planned generic join, ready to run over the relations.
pub(super) struct GenericJoin<'a> {
    rule: &'a Rule,
    levels: Vec<Level>,
    ground: Vec<(Version, Vec<u32>)>,
    full: &'a HashMap<TensorId, Store>,
    delta: &'a HashMap<TensorId, Store>,
    checker: Checker<'a>,
    /// The rule's variables of open domains ([`super::join::rule_tables`]).
    tables: Vec<Option<&'a crate::tensor::ValueTable>>,
}

/// Plans the levels of a generic join, with atom `delta_at` reading the last round's new
/// tuples, and builds the indexes their lookups need.
pub(super) fn prepare_generic(
    r: &Rule,
    delta_at: Option<usize>,
    full: &mut HashMap<TensorId, Store>,
    delta: &mut HashMap<TensorId, Store>,
) -> Plan {
    let order = variable_order(r, delta_at);
    super::join::index_absent(r, full);
    let version = |k: usize| {
        let t = r.atoms[k].tensor;
        if Some(k) == delta_at {
            Version::Delta(t)
        } else {
            Version::Full(t)
        }
    };
    let mut levels = Vec::new();
    for (i, &v) in order.iter().enumerate() {
        let bound = &order[..i];
        let mut parts = Vec::new();
        for (k, a) in r.atoms.iter().enumerate() {
            if !a.terms.contains(&Term::Var(v)) {
                continue;
            }
            let mut part = Part {
                version: version(k),
                key_cols: Vec::new(),
                key_terms: Vec::new(),
                var_cols: Vec::new(),
                probe_cols: Vec::new(),
                repeats: false,
            };
            for (c, t) in a.terms.iter().enumerate() {
                match t {
                    Term::Var(x) if *x == v => part.var_cols.push(c),
                    Term::Var(x) if !bound.contains(x) => part.repeats = true,
                    _ => {
                        part.key_cols.push(c);
                        part.key_terms.push(*t);
                    }
                }
            }
            part.probe_cols = [part.key_cols.clone(), part.var_cols.clone()].concat();
            parts.push(part);
        }
        levels.push(Level { var: v, parts });
    }
    let ground = (0..r.atoms.len())
        .filter(|&k| r.atoms[k].terms.iter().all(|t| matches!(t, Term::Const(_))))
        .map(|k| {
            let consts = r.atoms[k]
                .terms
                .iter()
                .filter_map(|t| match t {
                    Term::Const(c) => Some(*c),
                    Term::Var(_) => None,
                })
                .collect();
            (version(k), consts)
        })
        .collect();
    for part in levels.iter().flat_map(|l| &l.parts) {
        let store = match part.version {
            Version::Full(t) => full.get_mut(&t),
            Version::Delta(t) => delta.get_mut(&t),
        };
        if let Some(store) = store {
            store.ensure_index(&part.key_cols);
            store.ensure_index(&part.probe_cols);
        }
    }
    Plan { levels, ground }
}

impl<'a> GenericJoin<'a> {
    pub(super) fn new(
        rule: &'a Rule,
        Plan { levels, ground }: Plan,
        (full, delta): (&'a HashMap<TensorId, Store>, &'a HashMap<TensorId, Store>),
        checker: Checker<'a>,
    ) -> Self {
        GenericJoin {
            rule,
            levels,
            ground,
            full,
            delta,
            tables: super::join::rule_tables(rule, &checker),
            checker,
        }
    }

    fn store(&self, v: Version) -> Option<&'a Store> {
        match v {
            Version::Full(t) => self.full.get(&t),
            Version::Delta(t) => self.delta.get(&t),
        }
    }

    /// Every head tuple the rule derives, in an order that does not depend on `pool`: the
    /// first variable's candidates are split into chunks whose results are concatenated.
    pub(super) fn derive(&self, pool: Option<&rayon::ThreadPool>) -> Result<Derived, Halt> {
        let r = self.rule;
        let stop = &self.checker.o.stop;
        let mut out = Derived::default();
        let holds = |(v, t): &(Version, Vec<u32>)| self.store(*v).is_some_and(|s| s.contains(t));
        if !self.ground.iter().all(holds) {
            return Ok(out);
        }
        let mut env = vec![0u32; r.vars];
        if self.levels.is_empty() {
            if admits((r, &self.tables), self.full, &self.checker, &mut env) {
                out.push(r, &env);
            }
            return Ok(out);
        }
        let first = self.candidates(0, &env);
        match pool {
            Some(pool) if first.len() >= JOIN_CANDIDATES.at => {
                let chunk = first
                    .len()
                    .div_ceil(pool.current_num_threads() * 8)
                    .max(JOIN_CANDIDATES.at / 8);
                let parts: Vec<Result<Derived, Halt>> = pool.install(|| {
                    first
                        .par_chunks(chunk)
                        .map(|values| {
                            let mut part = Derived::default();
                            let mut env = vec![0u32; r.vars];
                            let mut ticks = Ticker::new(stop);
                            for &c in values {
                                env[self.levels[0].var] = c;
                                self.bind(1, &mut env, &mut part, &mut ticks);
                            }
                            if ticks.stopped() {
                                return Err(Halt::Stopped);
                            }
                            Ok(part)
                        })
                        .collect()
                });
                for part in parts {
                    out.append(part?);
                }
            }
            _ => {
                let mut ticks = Ticker::new(stop);
                for c in first {
                    env[self.levels[0].var] = c;
                    self.bind(1, &mut env, &mut out, &mut ticks);
                }
                if ticks.stopped() {
                    return Err(Halt::Stopped);
                }
            }
        }
        Ok(out)
    }

    /// Binds level `i`'s variable to each of its candidates in turn and goes on.
    fn bind(&self, i: usize, env: &mut [u32], out: &mut Derived, ticks: &mut Ticker) {
        let Some(level) = self.levels.get(i) else {
            if admits((self.rule, &self.tables), self.full, &self.checker, env) {
                out.push(self.rule, env);
            }
            return;
        };
        for c in self.candidates(i, env) {
            if !ticks.tick() {
                return;
            }
            env[level.var] = c;
            self.bind(i + 1, env, out, ticks);
        }
    }

    /// The values level `i`'s variable can take under `env`: walked from the part with the
    /// fewest rows, kept where every other part has a row, without repeats.
    fn candidates(&self, i: usize, env: &[u32]) -> Vec<u32> {
        let level = &self.levels[i];
        let mut buf = [0u32; MAX_STACK_ARITY];
        let mut heap = Vec::new();
        let mut best: Option<(usize, usize)> = None;
        for (j, part) in level.parts.iter().enumerate() {
            let Some(store) = self.store(part.version) else {
                return Vec::new();
            };
            let size = if part.key_cols.is_empty() {
                store.count as usize
            } else {
                heap.clear();
                let key = key_of(part, env, &mut buf, &mut heap);
                store.lookup_len(&part.key_cols, key)
            };
            if size == 0 {
                return Vec::new();
            }
            if best.is_none_or(|(_, s)| size < s) {
                best = Some((j, size));
            }
        }
        let Some((j, _)) = best else {
            return Vec::new();
        };
        let lead = &level.parts[j];
        let Some(store) = self.store(lead.version) else {
            return Vec::new();
        };
        let mut values = Vec::new();
        let mut take = |r: u32| {
            let this = row(&store.data, store.arity, r);
            let c = this[lead.var_cols[0]];
            if lead.var_cols[1..].iter().any(|&col| this[col] != c) {
                return;
            }
            let others = level
                .parts
                .iter()
                .enumerate()
                .filter(|&(k, _)| k != j)
                .all(|(_, part)| self.has(part, env, c));
            if others {
                values.push(c);
            }
        };
        if lead.key_cols.is_empty() {
            (0..store.count).for_each(&mut take);
        } else {
            heap.clear();
            let key = key_of(lead, env, &mut buf, &mut heap);
            store.lookup(&lead.key_cols, key).for_each(&mut take);
        }
        if lead.repeats {
            values.sort_unstable();
            values.dedup();
        }
        values
    }

    /// Whether `part`'s atom has a row with its known columns from `env` and value `c` in the
    /// variable's columns.
    fn has(&self, part: &Part, env: &[u32], c: u32) -> bool {
        let Some(store) = self.store(part.version) else {
            return false;
        };
        let mut buf = [0u32; MAX_STACK_ARITY];
        let mut heap = Vec::new();
        let probe = fill(
            &mut buf,
            &mut heap,
            part.key_terms
                .iter()
                .map(|t| super::value(t, env))
                .chain(part.var_cols.iter().map(|_| c)),
            part.probe_cols.len(),
        );
        store.lookup(&part.probe_cols, probe).next().is_some()
    }
}

fn key_of<'k>(
    part: &Part,
    env: &[u32],
    buf: &'k mut [u32; MAX_STACK_ARITY],
    heap: &'k mut Vec<u32>,
) -> &'k [u32] {
    fill(
        buf,
        heap,
        part.key_terms.iter().map(|t| super::value(t, env)),
        part.key_terms.len(),
    )
}
