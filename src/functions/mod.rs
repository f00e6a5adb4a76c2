//! Elementwise functions of §6.3, plus user functions registered through the library (§16).

use std::sync::Arc;

pub(crate) mod computed;
pub(crate) mod fast_rows;
pub(crate) mod lanes;
pub(crate) mod normalize;
pub(crate) mod strings;
pub(crate) mod widest;

pub(crate) use normalize::{normalize_row, RowStats};

/// The ε of `lnorm` (§6.4): `(x − mean) / sqrt(var + ε)`.
pub(crate) const LNORM_EPSILON: f64 = 1e-5;

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
    /// Bitwise and of two integers (§8).
    Band,
    /// Bitwise or of two integers.
    Bor,
    /// Bitwise exclusive or of two integers.
    Bxor,
    /// An integer shifted left.
    Bshl,
    /// An integer shifted right, keeping its sign.
    Bshr,
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
pub(crate) fn builtin(name: &str) -> Option<(Builtin, &'static [usize])> {
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
        "band" => (Builtin::Band, &[2]),
        "bor" => (Builtin::Bor, &[2]),
        "bxor" => (Builtin::Bxor, &[2]),
        "bshl" => (Builtin::Bshl, &[2]),
        "bshr" => (Builtin::Bshr, &[2]),
        _ => return None,
    })
}

/// Resolves a structural function.
pub(crate) fn structural(name: &str) -> Option<Structural> {
    match name {
        "softmax" => Some(Structural::Softmax),
        "lnorm" => Some(Structural::Lnorm),
        "concat" => Some(Structural::Concat),
        _ => None,
    }
}

/// Functions that may be called inside an index (`A[max(i, j)]`, `R(substr(s, 0, 2))`):
/// integer arithmetic and the string functions.
const INDEX_FUNCTIONS: [&str; 7] = ["band", "bor", "bxor", "bshl", "bshr", "min", "max"];

/// Whether a built-in function may be called inside an index.
pub(crate) fn in_index(name: &str) -> bool {
    INDEX_FUNCTIONS.contains(&name) || strings::StringFn::named(name).is_some()
}

/// The built-in functions, as the parser is told of them.
pub(crate) const BUILTINS: crate::syntax::Functions<'static> = crate::syntax::Functions {
    call: &is_builtin,
    in_index: &in_index,
};

/// Whether `name` is a built-in function of any kind.
pub(crate) fn is_builtin(name: &str) -> bool {
    builtin(name).is_some()
        || structural(name).is_some()
        || strings::StringFn::named(name).is_some()
}

/// Heaviside step with `step(0) = 0`, NaN for NaN (as NumPy's `heaviside`).
pub(crate) fn step(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x.is_nan() {
        x
    } else {
        0.0
    }
}

/// `max(x, 0)`, NaN for NaN: `f64::max` would drop the NaN and give 0, where NumPy's
/// `maximum` and PyTorch's `relu` keep it, so that a NaN upstream is seen downstream.
pub(crate) fn relu(x: f64) -> f64 {
    nan_max(x, 0.0)
}

/// [`relu`] of an f32.
pub(crate) fn relu32(x: f32) -> f32 {
    if x.is_nan() {
        x
    } else {
        x.max(0.0)
    }
}

/// The larger of `x` and `y`, NaN when either is (NumPy's `maximum`, not `fmax`).
fn nan_max(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.max(y)
    }
}

/// The smaller of `x` and `y`, NaN when either is (NumPy's `minimum`).
fn nan_min(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.min(y)
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
            Builtin::Relu => relu(x),
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
            Builtin::Max => nan_max(x, args.get(1).copied().unwrap_or(x)),
            Builtin::Min => nan_min(x, args.get(1).copied().unwrap_or(x)),
            Builtin::Band | Builtin::Bor | Builtin::Bxor | Builtin::Bshl | Builtin::Bshr => {
                let y = args.get(1).copied().unwrap_or(0.0);
                match (integer(x), integer(y)) {
                    (Some(a), Some(b)) => bitwise(self, a, b).map_or(f64::NAN, |v| v as f64),
                    _ => f64::NAN,
                }
            }
        }
    }
}

/// `x` as an integer, when it is one that an f64 holds exactly.
fn integer(x: f64) -> Option<i64> {
    (x.fract() == 0.0 && x.abs() <= 9_007_199_254_740_992.0).then_some(x as i64)
}

/// The bitwise functions on i64 (two's complement, as in Soufflé); a shift by a count
/// outside `0..64` shifts every bit out (`bshr` of a negative number gives -1). `None`
/// for a function that is not bitwise.
pub(crate) fn bitwise(f: Builtin, a: i64, b: i64) -> Option<i64> {
    let shift = u32::try_from(b).ok().filter(|&s| s < 64);
    Some(match f {
        Builtin::Band => a & b,
        Builtin::Bor => a | b,
        Builtin::Bxor => a ^ b,
        Builtin::Bshl => shift.map_or(0, |s| a.wrapping_shl(s)),
        Builtin::Bshr => shift.map_or(if a < 0 { -1 } else { 0 }, |s| a >> s),
        _ => return None,
    })
}

impl Builtin {
    /// The partial derivative with respect to argument `i` at `args`, for backpropagation
    /// (§12): `step` (and `sig` at temperature 0) has derivative 0 everywhere; at a kink
    /// (`relu`, `abs`, `max`, `min` at a tie) the derivative of the branch `apply` takes.
    pub fn partial(self, args: &[f64], i: usize) -> f64 {
        let x = args.first().copied().unwrap_or(0.0);
        let logistic = |z: f64| 1.0 / (1.0 + (-z).exp());
        match self {
            // Integer functions are piecewise constant.
            Builtin::Step
            | Builtin::Band
            | Builtin::Bor
            | Builtin::Bxor
            | Builtin::Bshl
            | Builtin::Bshr => 0.0,
            Builtin::Sig => match args.get(1) {
                Some(0.0) => 0.0,
                Some(&t) => {
                    let s = logistic(x / t);
                    let ds = s * (1.0 - s);
                    if i == 0 {
                        ds / t
                    } else {
                        -ds * x / (t * t)
                    }
                }
                None => {
                    let s = logistic(x);
                    s * (1.0 - s)
                }
            },
            Builtin::Tanh => 1.0 - x.tanh() * x.tanh(),
            Builtin::Relu => step(x),
            Builtin::Gelu => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                let u = c * (x + 0.044715 * x * x * x);
                let t = u.tanh();
                0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
            }
            Builtin::Exp => x.exp(),
            Builtin::Log => 1.0 / x,
            Builtin::Sqrt => 0.5 / x.sqrt(),
            Builtin::Abs => {
                if x < 0.0 {
                    -1.0
                } else {
                    1.0
                }
            }
            Builtin::Sin => x.cos(),
            Builtin::Cos => -x.sin(),
            Builtin::Softplus => logistic(x),
            Builtin::Max | Builtin::Min => {
                let y = args.get(1).copied().unwrap_or(x);
                let first = if self == Builtin::Max { x >= y } else { x <= y };
                if first == (i == 0) {
                    1.0
                } else {
                    0.0
                }
            }
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
    fn partials_match_central_differences() {
        let fs = [
            Builtin::Sig,
            Builtin::Tanh,
            Builtin::Relu,
            Builtin::Gelu,
            Builtin::Exp,
            Builtin::Log,
            Builtin::Sqrt,
            Builtin::Abs,
            Builtin::Sin,
            Builtin::Cos,
            Builtin::Softplus,
        ];
        for f in fs {
            for x in [-1.3, 0.4, 2.2] {
                let x = if matches!(f, Builtin::Log | Builtin::Sqrt) {
                    f64::abs(x)
                } else {
                    x
                };
                let h = 1e-6;
                let numeric = (f.apply(&[x + h]) - f.apply(&[x - h])) / (2.0 * h);
                assert!((f.partial(&[x], 0) - numeric).abs() < 1e-6, "{f:?} at {x}");
            }
        }
        for (i, h) in [(0, [1e-6, 0.0]), (1, [0.0, 1e-6])] {
            let (x, t) = (0.7, 1.9);
            let numeric = (Builtin::Sig.apply(&[x + h[0], t + h[1]])
                - Builtin::Sig.apply(&[x - h[0], t - h[1]]))
                / 2e-6;
            assert!((Builtin::Sig.partial(&[x, t], i) - numeric).abs() < 1e-6);
        }
        assert_eq!(Builtin::Max.partial(&[1.0, 2.0], 1), 1.0);
        assert_eq!(Builtin::Max.partial(&[1.0, 2.0], 0), 0.0);
        assert_eq!(Builtin::Step.partial(&[1.0], 0), 0.0);
    }

    #[test]
    fn softplus_is_stable_for_large_inputs() {
        assert_eq!(Builtin::Softplus.apply(&[1000.0]), 1000.0);
        assert!(Builtin::Softplus.apply(&[-1000.0]) >= 0.0);
    }
}
