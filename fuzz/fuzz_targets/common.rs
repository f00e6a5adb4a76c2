//! What the fuzz targets share: which checked programs are cheap enough to evaluate.

use tensor_logic::semantics::{Checked, Equation, Node};

/// Points the reference evaluator visits for one equation: the product of all ranges, times
/// the row length for every `softmax`/`lnorm` (each point re-evaluates its row).
fn cost(e: &Equation) -> u128 {
    fn normalizers(n: &Node, e: &Equation) -> u128 {
        let inner = n.children().into_iter().map(|c| normalizers(c, e)).max().unwrap_or(1);
        match n {
            Node::Normalize(_, v, _) => e.vars[*v].range.max(1) as u128 * inner,
            _ => inner,
        }
    }
    let points: u128 = e.vars.iter().map(|v| v.range.max(1) as u128).product();
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
