//! What the fuzz targets share: which checked programs are cheap enough to evaluate.

use tensor_logic::semantics::{Checked, Equation, Node, VarInfo};

/// Values an open column's variable (§8) takes in a small program: its table grows by about
/// one value per round, and the targets stop after 50 rounds.
const OPEN_VALUES: u128 = 64;

/// How many values the reference evaluator gives `v`: its range, or for an open column's
/// variable (whose range stands for no extent) the values its table comes to hold.
fn range(v: &VarInfo) -> u128 {
    match v.open {
        Some(_) => OPEN_VALUES,
        None => v.range.max(1) as u128,
    }
}

/// Points the reference evaluator visits for one equation: the product of all ranges, times
/// the row length for every `softmax`/`lnorm` (each point re-evaluates its row).
fn cost(e: &Equation) -> u128 {
    fn normalizers(n: &Node, e: &Equation) -> u128 {
        let inner = n.children().into_iter().map(|c| normalizers(c, e)).max().unwrap_or(1);
        match n {
            Node::Normalize(_, v, _) => range(&e.vars[*v]) * inner,
            _ => inner,
        }
    }
    let points: u128 = e.vars.iter().map(range).product();
    points.saturating_mul(normalizers(&e.rhs, e))
}

/// Whether evaluating `p` visits at most `limit` points in all.
pub fn cheap(p: &Checked, limit: u128) -> bool {
    p.equations.iter().map(cost).fold(0u128, u128::saturating_add) <= limit
}

/// Whether evaluating one equation visits at most `limit` points.
pub fn cheap_equation(e: &Equation, limit: u128) -> bool {
    cost(e) <= limit
}
