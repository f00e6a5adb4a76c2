//! Elementwise functions of §6.3, plus user functions registered through the library (§16).

use std::sync::Arc;

/// Built-in scalar functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// Heaviside, `step(0) = 0`.
    Step,
    /// Logistic sigmoid, optionally with a temperature.
    Sig,
    /// Hyperbolic tangent.
    Tanh,
    /// max(0, x).
    Relu,
    /// Gaussian error linear unit (tanh approximation, as PyTorch's `approximate='tanh'`).
    Gelu,
    /// e^x.
    Exp,
    /// Natural logarithm.
    Log,
    /// Square root.
    Sqrt,
    /// Absolute value.
    Abs,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// ln(1 + e^x), computed stably.
    Softplus,
    /// Larger of two values.
    Max,
    /// Smaller of two values.
    Min,
}

/// Structural functions that look at a whole axis rather than one element (§6.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Structural {
    /// Numerically stable softmax over the normalised axis.
    Softmax,
    /// Layer normalisation over the normalised axis.
    Lnorm,
    /// Flattens absent indices into one left-hand-side index.
    Concat,
}

/// Resolves a built-in scalar function and its accepted argument counts.
pub fn builtin(name: &str) -> Option<(Builtin, &'static [usize])> {
    Some(match name {
        "step" => (Builtin::Step, &[1]),
        "sig" | "sigmoid" => (Builtin::Sig, &[1, 2]),
        "tanh" => (Builtin::Tanh, &[1]),
        "relu" => (Builtin::Relu, &[1]),
        "gelu" => (Builtin::Gelu, &[1]),
        "exp" => (Builtin::Exp, &[1]),
        "log" => (Builtin::Log, &[1]),
        "sqrt" => (Builtin::Sqrt, &[1]),
        "abs" => (Builtin::Abs, &[1]),
        "sin" => (Builtin::Sin, &[1]),
        "cos" => (Builtin::Cos, &[1]),
        "softplus" => (Builtin::Softplus, &[1]),
        "max" => (Builtin::Max, &[2]),
        "min" => (Builtin::Min, &[2]),
        _ => return None,
    })
}

/// Resolves a structural function.
pub fn structural(name: &str) -> Option<Structural> {
    match name {
        "softmax" => Some(Structural::Softmax),
        "lnorm" => Some(Structural::Lnorm),
        "concat" => Some(Structural::Concat),
        _ => None,
    }
}

/// Whether `name` is a built-in function of any kind.
pub fn is_builtin(name: &str) -> bool {
    builtin(name).is_some() || structural(name).is_some()
}

/// Heaviside step with `step(0) = 0`.
pub fn step(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else {
        0.0
    }
}

impl Builtin {
    /// Applies the function; arguments were checked against its arity.
    pub fn apply(self, args: &[f64]) -> f64 {
        let x = args.first().copied().unwrap_or(0.0);
        match self {
            Builtin::Step => step(x),
            Builtin::Sig => match args.get(1) {
                Some(0.0) => step(x),
                Some(&t) => 1.0 / (1.0 + (-x / t).exp()),
                None => 1.0 / (1.0 + (-x).exp()),
            },
            Builtin::Tanh => x.tanh(),
            Builtin::Relu => x.max(0.0),
            Builtin::Gelu => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            }
            Builtin::Exp => x.exp(),
            Builtin::Log => x.ln(),
            Builtin::Sqrt => x.sqrt(),
            Builtin::Abs => x.abs(),
            Builtin::Sin => x.sin(),
            Builtin::Cos => x.cos(),
            Builtin::Softplus => x.max(0.0) + (-x.abs()).exp().ln_1p(),
            Builtin::Max => x.max(args.get(1).copied().unwrap_or(x)),
            Builtin::Min => x.min(args.get(1).copied().unwrap_or(x)),
        }
    }
}

/// A scalar function supplied by the embedding program (procedural attachment, §16).
/// The derivative is kept for learning (§12).
#[derive(Clone)]
pub struct UserFunction {
    /// The function.
    pub f: Arc<dyn Fn(f64) -> f64 + Send + Sync>,
    /// Its derivative.
    pub df: Arc<dyn Fn(f64) -> f64 + Send + Sync>,
}

impl std::fmt::Debug for UserFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UserFunction")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sig_with_zero_temperature_is_step() {
        assert_eq!(Builtin::Sig.apply(&[0.3, 0.0]), 1.0);
        assert_eq!(Builtin::Sig.apply(&[0.0, 0.0]), 0.0);
        assert!((Builtin::Sig.apply(&[0.0]) - 0.5).abs() < 1e-15);
    }

    #[test]
    fn softplus_is_stable_for_large_inputs() {
        assert_eq!(Builtin::Softplus.apply(&[1000.0]), 1000.0);
        assert!(Builtin::Softplus.apply(&[-1000.0]) >= 0.0);
    }
}
