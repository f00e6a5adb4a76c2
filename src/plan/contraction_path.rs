//! Contraction paths: the order in which a product of dense factors is contracted pairwise.
//! Few factors get the optimal order, more a greedy one (two greedy rules, the cheaper
//! kept), searched further where the FLOPs justify it. Only the path is chosen here; what
//! each pairwise step keeps is [`kept`], as the executor computes it.

use super::einsum::{kept, Contraction, FactorSet, Path};
use super::opt_einsum_greedy::opt_einsum_greedy;
use crate::semantics::VarId;
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn volume(c: &Contraction, vars: &[VarId]) -> f64 {
    vars.iter().map(|&v| c.extents[v] as f64).product()
}

/// Factors up to this many get the optimal order (dynamic programming over subsets, as
/// opt_einsum's `optimal`); more get a greedy one.
const OPTIMAL_UP_TO: usize = 10;

/// The contraction order with the fewest FLOPs, and that number.
pub(super) fn best_path(c: &Contraction) -> (Path, f64) {
    let n = c.factors.len();
    if n > OPTIMAL_UP_TO {
        return sampled_greedy_path(c);
    }
    let full = (1u32 << n) - 1;
    let mut best: Vec<Option<(f64, Path)>> = vec![None; 1 << n];
    for k in 0..n {
        // A lone factor is reduced over its private summed variables: one pass over it.
        let f = &c.factors[k];
        best[1 << k] = Some((volume(c, &f.vars), Path::Leaf(k)));
    }
    for set in 1..=full {
        if set.count_ones() < 2 {
            continue;
        }
        let mut choice: Option<(f64, Path)> = None;
        // Each split once: the part holding the lowest factor is `a`.
        let low = set & set.wrapping_neg();
        let mut a = (set - 1) & set;
        while a > 0 {
            if a & low != 0 {
                let b = set & !a;
                if let (Some((ca, pa)), Some((cb, pb))) = (&best[a as usize], &best[b as usize]) {
                    let mut vars = kept(c, &FactorSet::of_mask(a));
                    for v in kept(c, &FactorSet::of_mask(b)) {
                        if !vars.contains(&v) {
                            vars.push(v);
                        }
                    }
                    let cost = ca + cb + 2.0 * volume(c, &vars);
                    // Splits are visited from the largest `a` down: on a tie the smaller
                    // one wins, which contracts factors in the order they are written
                    // (`W[r, i, j] Emb[x, i] Emb[y, j]` joins `Emb[x, i]` first, and the
                    // result comes out in its output order, with no permuting copy).
                    if choice.as_ref().is_none_or(|(best, _)| cost <= *best) {
                        choice =
                            Some((cost, Path::Pair(Box::new(pa.clone()), Box::new(pb.clone()))));
                    }
                }
            }
            a = (a - 1) & set;
        }
        best[set as usize] = choice;
    }
    best[full as usize]
        .take()
        .map(|(cost, path)| (path, cost))
        .unwrap_or((Path::Leaf(0), 0.0))
}

/// Repeatedly contracts the pair whose result is smallest against its operands (ties: fewest
/// FLOPs, then the earlier pair), among the pairs that share a variable; parts that share
/// none (a disconnected network) are joined last, by the same rule over all pairs. Unlike
/// opt_einsum's greedy ([`opt_einsum_greedy`]), a pair is scored again whenever a
/// contraction changes who holds one of its variables. Hundreds of factors plan in
/// milliseconds: each part keeps its variables, each variable the parts that hold it. The
/// FLOPs are the path's as it runs ([`path_flops`]).
fn greedy_path(c: &Contraction, noise: Option<Noise>) -> (Path, f64) {
    let mut g = Greedy::new(c, noise);
    while g.live() > 1 {
        g.score_stale();
        let pick = g.cheapest().or_else(|| g.cheapest_of_all());
        let Some((i, j)) = pick else {
            break;
        };
        g.merge(i, j);
    }
    let path = g.parts.into_iter().rev().flatten().next().map(|p| p.path);
    let path = path.unwrap_or(Path::Leaf(0));
    let flops = path_flops(c, &path);
    (path, flops)
}

/// The FLOPs of contracting along `path`: a pass over each factor, and twice the volume of
/// every pairwise step's variables, each step keeping what [`kept`] keeps.
pub(super) fn path_flops(c: &Contraction, path: &Path) -> f64 {
    fn walk(c: &Contraction, path: &Path) -> (f64, Vec<VarId>) {
        match path {
            Path::Leaf(k) => (volume(c, &c.factors[*k].vars), kept(c, &path.factors())),
            Path::Pair(a, b) => {
                let ((fa, mut va), (fb, vb)) = (walk(c, a), walk(c, b));
                va.extend(vb.iter().filter(|v| !va.contains(v)).collect::<Vec<_>>());
                let step = 2.0 * volume(c, &va);
                (fa + fb + step, kept(c, &path.factors()))
            }
        }
    }
    walk(c, path).0
}

/// The cheaper of two greedy paths: this module's and opt_einsum's (each wins on some
/// networks: on a random 3-regular network of 100 tensors ours has 1% of opt_einsum's FLOPs,
/// on a 10×10 lattice opt_einsum's 28% of ours), so a path is never worse than opt_einsum's
/// greedy one. Ours on a tie.
fn greedy(c: &Contraction) -> (Path, f64) {
    let ours = greedy_path(c, None);
    let theirs = opt_einsum_greedy(c);
    let theirs_flops = path_flops(c, &theirs);
    if theirs_flops < ours.1 {
        (theirs, theirs_flops)
    } else {
        ours
    }
}

/// The parts other than `part` that hold one of its variables `vars` (`holders`: the live
/// parts holding each variable), in order.
pub(super) fn partners(vars: &[VarId], holders: &[Vec<usize>], part: usize) -> Vec<usize> {
    let mut out: Vec<usize> = vars
        .iter()
        .flat_map(|&v| holders[v].iter().copied())
        .filter(|&h| h != part)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Greedy paths whose FLOPs pass this are searched further.
const SEARCH_ABOVE_FLOPS: f64 = 1e8;

/// How many perturbed greedy paths such a term tries.
const SEARCH_TRIALS: u64 = 32;

/// The greedy path, and where its FLOPs justify a search (a contraction of 10⁸ FLOPs takes
/// tens of milliseconds, a greedy path of a hundred factors about one), the cheapest of
/// [`SEARCH_TRIALS`] more whose choices are perturbed as opt_einsum's `random-greedy`
/// perturbs them (Gumbel noise on each pair's score, so the pair taken is drawn with
/// Boltzmann weights). The generator is seeded by the trial's number: the same term always
/// gets the same path.
fn sampled_greedy_path(c: &Contraction) -> (Path, f64) {
    let mut best = greedy(c);
    if best.1 <= SEARCH_ABOVE_FLOPS {
        return best;
    }
    for trial in 0..SEARCH_TRIALS {
        let temperature = 0.05 + 0.95 * trial as f64 / SEARCH_TRIALS as f64;
        let noise = Noise {
            rng: rand::SeedableRng::seed_from_u64(trial),
            temperature,
        };
        let found = greedy_path(c, Some(noise));
        if found.1 < best.1 {
            best = found;
        }
    }
    best
}

/// The perturbation of a sampled greedy path.
struct Noise {
    rng: rand_chacha::ChaCha8Rng,
    temperature: f64,
}

impl Noise {
    /// A Gumbel draw scaled by the temperature and by `scale` (the sizes a pair involves).
    fn draw(&mut self, scale: f64) -> f64 {
        use rand::Rng;
        let u: f64 = self.rng.gen_range(f64::MIN_POSITIVE..1.0);
        -self.temperature * scale * (-(-u.ln()).ln())
    }
}

/// A part of a greedy contraction: what it keeps and how it was made.
struct Part {
    vars: Vec<VarId>,
    path: Path,
}

/// A pair's score: (memory the contraction adds, its FLOPs, what it keeps).
type Score = (f64, f64, Vec<VarId>);

/// The state of [`greedy_path`]. Parts are numbered in the order they are made (factors
/// first), which breaks ties.
struct Greedy<'a> {
    c: &'a Contraction,
    parts: Vec<Option<Part>>,
    /// The live parts that hold each variable.
    holders: Vec<Vec<usize>>,
    /// Scores of the sharing pairs `(i, j)`, `i < j`, of live parts.
    scores: BTreeMap<(usize, usize), Score>,
    /// Parts whose pairs must be scored again.
    stale: BTreeSet<usize>,
    /// Perturbs scores, for a sampled path.
    noise: Option<Noise>,
}

impl<'a> Greedy<'a> {
    fn new(c: &'a Contraction, noise: Option<Noise>) -> Greedy<'a> {
        let parts: Vec<Option<Part>> = (0..c.factors.len())
            .map(|k| {
                Some(Part {
                    vars: kept(c, &FactorSet::one(k)),
                    path: Path::Leaf(k),
                })
            })
            .collect();
        let mut holders = vec![Vec::new(); c.extents.len()];
        for (k, p) in parts.iter().enumerate() {
            p.iter()
                .flat_map(|p| &p.vars)
                .for_each(|&v| holders[v].push(k));
        }
        Greedy {
            c,
            stale: (0..parts.len()).collect(),
            parts,
            holders,
            scores: BTreeMap::new(),
            noise,
        }
    }

    fn live(&self) -> usize {
        self.parts.iter().flatten().count()
    }

    fn vars(&self, k: usize) -> &[VarId] {
        self.parts[k].as_ref().map_or(&[], |p| &p.vars)
    }

    /// Scores every sharing pair with a stale part.
    fn score_stale(&mut self) {
        let stale = std::mem::take(&mut self.stale);
        for &s in &stale {
            for h in partners(self.vars(s), &self.holders, s) {
                let key = (s.min(h), s.max(h));
                let mut score = self.score(key.0, key.1);
                if let Some(noise) = &mut self.noise {
                    let (a, b) = (self.parts[key.0].as_ref(), self.parts[key.1].as_ref());
                    let sizes = [a, b]
                        .iter()
                        .flatten()
                        .map(|p| volume(self.c, &p.vars))
                        .sum::<f64>();
                    score.0 += noise.draw(sizes + volume(self.c, &score.2));
                }
                self.scores.insert(key, score);
            }
        }
    }

    /// What contracting parts `i` and `j` adds, costs and keeps.
    fn score(&self, i: usize, j: usize) -> Score {
        let (a, b) = (self.vars(i), self.vars(j));
        let mut both = a.to_vec();
        both.extend(b.iter().filter(|v| !a.contains(v)));
        let cost = 2.0 * volume(self.c, &both);
        // A variable stays where the output or a third part still needs it.
        let mut kept_vars: Vec<VarId> = both
            .iter()
            .copied()
            .filter(|v| {
                let here = usize::from(a.contains(v)) + usize::from(b.contains(v));
                self.c.keep.contains(v) || self.holders[*v].len() > here
            })
            .collect();
        kept_vars.sort_unstable();
        // opt_einsum's "memory removed": the result's size less its operands'.
        let grown = volume(self.c, &kept_vars) - volume(self.c, a) - volume(self.c, b);
        (grown, cost, kept_vars)
    }

    /// The best scored pair.
    fn cheapest(&self) -> Option<(usize, usize)> {
        let mut best: Option<(&(usize, usize), &Score)> = None;
        for (key, s) in &self.scores {
            if best.is_none_or(|(_, b)| (s.0, s.1) < (b.0, b.1)) {
                best = Some((key, s));
            }
        }
        best.map(|(&key, _)| key)
    }

    /// The best pair of all live parts, where none share a variable.
    fn cheapest_of_all(&mut self) -> Option<(usize, usize)> {
        let live: Vec<usize> = (0..self.parts.len())
            .filter(|&k| self.parts[k].is_some())
            .collect();
        let mut best: Option<((usize, usize), (f64, f64))> = None;
        for (x, &i) in live.iter().enumerate() {
            for &j in &live[x + 1..] {
                let (grown, cost, _) = self.score(i, j);
                if best.is_none_or(|(_, b)| (grown, cost) < b) {
                    best = Some(((i, j), (grown, cost)));
                }
            }
        }
        let (key, _) = best?;
        let score = self.score(key.0, key.1);
        self.scores.insert(key, score);
        Some(key)
    }

    /// Contracts parts `i` and `j` into a new part.
    fn merge(&mut self, i: usize, j: usize) {
        let Some((_, _, kept_vars)) = self.scores.remove(&(i, j)) else {
            return;
        };
        if self.parts[i].is_none() || self.parts[j].is_none() {
            return;
        }
        let (Some(a), Some(b)) = (self.parts[i].take(), self.parts[j].take()) else {
            return;
        };
        let new = self.parts.len();
        let touched: Vec<VarId> = a.vars.iter().chain(&b.vars).copied().collect();
        for &v in &touched {
            self.holders[v].retain(|&h| h != i && h != j);
        }
        for &v in &kept_vars {
            self.holders[v].push(new);
        }
        self.parts.push(Some(Part {
            vars: kept_vars,
            path: Path::Pair(Box::new(a.path), Box::new(b.path)),
        }));
        // Who holds a touched variable changed: every pair of such holders scores anew.
        let mut stale: BTreeSet<usize> = touched
            .iter()
            .flat_map(|&v| self.holders[v].iter().copied())
            .collect();
        stale.insert(new);
        self.scores.retain(|&(x, y), _| {
            x != i && x != j && y != i && y != j && !stale.contains(&x) && !stale.contains(&y)
        });
        self.stale = stale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::tests::checked;

    /// An L×L lattice of tensors with bonds of extent `d`, summed to a scalar: one term.
    fn lattice(l: usize, d: usize) -> Contraction {
        let mut src = format!("D : {d}\n");
        let mut factors = Vec::new();
        for r in 0..l {
            for c in 0..l {
                let mut bonds = Vec::new();
                if c + 1 < l {
                    bonds.push(format!("h{r}x{c}"));
                }
                if c > 0 {
                    bonds.push(format!("h{r}x{}", c - 1));
                }
                if r + 1 < l {
                    bonds.push(format!("v{r}x{c}"));
                }
                if r > 0 {
                    bonds.push(format!("v{}x{c}", r - 1));
                }
                let shape = vec!["D"; bonds.len()].join(", ");
                src.push_str(&format!("T{r}x{c} : real[{shape}]\n"));
                factors.push(format!("T{r}x{c}[{}]", bonds.join(", ")));
            }
        }
        src.push_str(&format!("S = {}\n", factors.join(" ")));
        let c = checked(&src);
        let st = c.strata.iter().find(|s| !s.equations.is_empty()).unwrap();
        let mut d = super::super::einsum::plan_dense(&c, st, &[]).unwrap();
        d.remove(0).terms.remove(0)
    }

    /// On a lattice opt_einsum's greedy rule finds the cheaper path; on a random 3-regular
    /// network ours does (BENCHMARKS.md): the plan takes the cheaper, so it is never worse
    /// than what a NumPy user gets.
    #[test]
    fn the_plan_takes_the_cheaper_of_the_two_greedy_paths() {
        let c = lattice(10, 2);
        let ours = greedy_path(&c, None).1;
        let theirs = path_flops(&c, &opt_einsum_greedy(&c));
        assert!(theirs < ours * 0.5, "{theirs} vs {ours}");
        assert_eq!(greedy(&c).1, theirs);
        assert_eq!(c.path.as_ref().map(|p| path_flops(&c, p)), Some(theirs));
    }

    #[test]
    fn a_costly_greedy_path_is_searched_further_and_never_made_worse() {
        let c = lattice(5, 8);
        let greedy = greedy(&c);
        assert!(greedy.1 > SEARCH_ABOVE_FLOPS, "{}", greedy.1);
        let searched = sampled_greedy_path(&c);
        assert!(searched.1 < greedy.1, "{} vs {}", searched.1, greedy.1);
        assert_eq!(
            c.path.as_ref(),
            Some(&searched.0),
            "the plan holds the searched path"
        );
        assert_eq!(
            sampled_greedy_path(&c),
            searched,
            "the same term gets the same path"
        );
    }
}
