//! The instances of an equation's summation point at a bound head: the assignments of its
//! free variables under which every positive relation read holds. They are found by joining
//! those reads' tuples through hash indexes, built once per explanation and relation (so a
//! fact of a 2M-tuple closure costs one pass over what it reads, not a loop over ranges);
//! variables no relation binds are then looped over their ranges, under a budget.

use super::Ctx;
use crate::diagnostics::{codes, Diagnostic};
use crate::semantics::{Equation, IndexFn, Node};
use crate::tensor::Storage;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::rc::Rc;

/// Points an explanation may visit before it gives up with an error.
const MAX_POINTS: u64 = 50_000_000;

/// A relation's tuples grouped by the positions of some of its axes.
type Index = FxHashMap<Vec<u32>, Vec<u32>>;

/// A relation and the axes an index of it keys on.
type IndexKey = (usize, Vec<usize>);

/// The indexes built so far.
#[derive(Default)]
pub(crate) struct Indexes(RefCell<FxHashMap<IndexKey, Rc<Index>>>);

impl Indexes {
    fn get(&self, ctx: &Ctx, tensor: usize, axes: &[usize]) -> Rc<Index> {
        let key = (tensor, axes.to_vec());
        if let Some(ix) = self.0.borrow().get(&key) {
            return ix.clone();
        }
        let mut ix: Index = FxHashMap::default();
        if let Storage::Relation(r) = &ctx.values[tensor].storage {
            for (i, t) in r.iter().enumerate() {
                let k: Vec<u32> = axes.iter().map(|&a| t[a]).collect();
                ix.entry(k).or_default().push(i as u32);
            }
        }
        let ix = Rc::new(ix);
        self.0.borrow_mut().insert(key, ix.clone());
        ix
    }
}

/// The indices of the tuples of `r` that begin with `key`.
fn prefix_range(r: &crate::tensor::Relation, key: &[u32]) -> std::ops::Range<usize> {
    let k = key.len();
    let first = |strict: bool| {
        let (mut lo, mut hi) = (0, r.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let head = &r.tuple(mid)[..k];
            let before = if strict { head <= key } else { head < key };
            if before {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    first(false)..first(true)
}

/// The variables and body of an equation's outermost summation point.
pub(crate) fn root(eq: &Equation) -> (&[usize], &Node) {
    match &eq.rhs {
        Node::Sum { vars, body } => (vars, body),
        other => (&[], other),
    }
}

/// A rule's summation point with the sums nested in its factors brought out: `A(x, y) :-
/// P(x, y, k)` is `A[x, y] = Σ_k P[x, y, k]` inside the rule's product, and a fact's instances
/// are those of `P(x, y, k)` at each `k` (an atom that exists is true at some point of its
/// own variables, so the variables join the rule's). For Boolean rules only.
pub(crate) fn hoisted(eq: &Equation) -> (Vec<usize>, Node) {
    fn bring_out(f: &Node, vars: &mut Vec<usize>, out: &mut Vec<(bool, Node)>) {
        match f.inside_empty_sums() {
            Node::Sum { vars: inner, body } => {
                vars.extend(inner.iter().copied());
                bring_out(body, vars, out);
            }
            Node::Product(fs) => {
                for (div, g) in fs {
                    match div {
                        false => bring_out(g, vars, out),
                        true => out.push((true, g.clone())),
                    }
                }
            }
            other => out.push((false, other.clone())),
        }
    }
    let (vars, body) = root(eq);
    let mut vars = vars.to_vec();
    let mut factors = Vec::new();
    bring_out(body, &mut vars, &mut factors);
    (vars, Node::Product(factors))
}

/// The positive reads of relations among a body's factors: the atoms that bind variables.
fn drivers<'n>(ctx: &Ctx, body: &'n Node) -> Vec<(usize, &'n [IndexFn])> {
    let factors: Vec<&Node> = match body.inside_empty_sums() {
        Node::Product(fs) => fs.iter().filter(|(d, _)| !d).map(|(_, f)| f).collect(),
        other => vec![other],
    };
    factors
        .into_iter()
        .filter_map(|f| match f.inside_empty_sums() {
            Node::Read {
                tensor,
                index,
                slice: false,
            } if matches!(ctx.values[*tensor].storage, Storage::Relation(_)) => {
                Some((*tensor, index.as_slice()))
            }
            _ => None,
        })
        .collect()
}

/// What a walk over instances shares.
struct Walk<'a, 'f> {
    ctx: &'a Ctx<'a>,
    eq: &'a Equation,
    drivers: Vec<(usize, &'a [IndexFn])>,
    free: &'a [usize],
    bound: Vec<bool>,
    points: u64,
    f: &'f mut dyn FnMut(&mut [i64]) -> bool,
}

/// Calls `f` at each assignment of `free` (with `env` holding the other variables) where
/// the positive relation reads of `body` hold; `f` returns `false` to stop early.
pub(crate) fn each(
    ctx: &Ctx,
    eq: &Equation,
    body: &Node,
    free: &[usize],
    env: &mut [i64],
    f: &mut dyn FnMut(&mut [i64]) -> bool,
) -> Result<(), Diagnostic> {
    let mut bound = vec![true; eq.vars.len()];
    for &v in free {
        bound[v] = false;
    }
    let mut w = Walk {
        ctx,
        eq,
        drivers: drivers(ctx, body),
        free,
        bound,
        points: 0,
        f,
    };
    let mut used = vec![false; w.drivers.len()];
    match w.join(env, &mut used) {
        Some(_) => Ok(()),
        None if w.points > MAX_POINTS => Err(Diagnostic::global(
            codes::QUERY,
            format!(
                "explaining the equation at {} would visit more than {MAX_POINTS} points",
                ctx.at(eq.span)
            ),
        )),
        None => Ok(()),
    }
}

impl Walk<'_, '_> {
    /// Joins the unused driver with the most bound axes next; `None` once `f` stopped the
    /// walk or the budget ran out.
    fn join(&mut self, env: &mut [i64], used: &mut [bool]) -> Option<()> {
        // The most bound axes first, then the smallest relation.
        let next = (0..self.drivers.len())
            .filter(|&d| !used[d])
            .max_by_key(|&d| (self.key_axes(d).len(), std::cmp::Reverse(self.size(d))));
        let Some(d) = next else {
            let rest: Vec<usize> = self
                .free
                .iter()
                .copied()
                .filter(|&v| !self.bound[v])
                .collect();
            return self.ranges(&rest, env);
        };
        used[d] = true;
        let (tensor, index) = self.drivers[d];
        let axes = self.key_axes(d);
        let key: Vec<u32> = axes
            .iter()
            .map(|&a| self.key_value(&index[a], env))
            .collect();
        let ctx = self.ctx;
        let Storage::Relation(r) = &ctx.values[tensor].storage else {
            used[d] = false;
            return Some(());
        };
        // Tuples are sorted, so a key on leading axes is a range found by binary search;
        // any other key goes through a hash index of the relation.
        let held;
        let matching: Box<dyn Iterator<Item = usize>> =
            if axes.iter().enumerate().all(|(i, &a)| i == a) {
                Box::new(prefix_range(r, &key))
            } else {
                held = ctx.indexes.get(ctx, tensor, &axes);
                Box::new(held.get(&key).into_iter().flatten().map(|&i| i as usize))
            };
        let binds: Vec<(usize, usize)> = index
            .iter()
            .enumerate()
            .filter_map(|(a, f)| match f {
                IndexFn::Var(v) if !self.bound[*v] => Some((a, *v)),
                _ => None,
            })
            .collect();
        let mut outcome = Some(());
        for i in matching {
            let t = r.tuple(i);
            let mut newly = Vec::new();
            let mut fits = true;
            for &(a, v) in &binds {
                if self.bound[v] {
                    fits &= env[v] == t[a] as i64;
                } else {
                    env[v] = t[a] as i64;
                    self.bound[v] = true;
                    newly.push(v);
                }
            }
            if fits {
                outcome = self.join(env, used);
            }
            for v in newly {
                self.bound[v] = false;
            }
            if outcome.is_none() {
                break;
            }
        }
        used[d] = false;
        outcome
    }

    fn size(&self, d: usize) -> usize {
        match &self.ctx.values[self.drivers[d].0].storage {
            Storage::Relation(r) => r.len(),
            _ => usize::MAX,
        }
    }

    /// The axes of driver `d` whose positions are known: bound variables, and constants
    /// on axes that hold positions (an open axis's constant is a value, checked at the end).
    fn key_axes(&self, d: usize) -> Vec<usize> {
        let (tensor, index) = self.drivers[d];
        index
            .iter()
            .enumerate()
            .filter(|(a, f)| match f {
                IndexFn::Var(v) => self.bound[*v],
                IndexFn::Const(_) => crate::eval::axis_table(self.ctx.p, tensor, *a).is_none(),
                IndexFn::Arith(..) => false,
            })
            .map(|(a, _)| a)
            .collect()
    }

    fn key_value(&self, f: &IndexFn, env: &[i64]) -> u32 {
        match f {
            IndexFn::Var(v) => env[*v] as u32,
            IndexFn::Const(c) => *c as u32,
            IndexFn::Arith(..) => 0,
        }
    }

    /// Loops `vars` over their ranges (an open variable over its table), calling `f` at
    /// each assignment.
    fn ranges(&mut self, vars: &[usize], env: &mut [i64]) -> Option<()> {
        let Some((&v, rest)) = vars.split_first() else {
            self.points += 1;
            return match self.points > MAX_POINTS || !(self.f)(env) {
                true => None,
                false => Some(()),
            };
        };
        let range = match self.eq.vars[v].open {
            Some(d) => self.ctx.p.domains[d].table.as_ref().map_or(0, |t| t.len()),
            None => self.eq.vars[v].range,
        };
        for i in 0..range {
            env[v] = i as i64;
            self.ranges(rest, env)?;
        }
        Some(())
    }
}
