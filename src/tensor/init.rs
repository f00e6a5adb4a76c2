//! Initial values of parameters (§12: `W ~ normal(0, 0.1)`), drawn from a seeded stream
//! straight into the parameter's own buffer. Deterministic: the same seed and name give the
//! same bits on every machine and thread count (ChaCha8 is specified, unlike `StdRng`).

use super::{AllocError, ElemType, Tensor};
use rand::SeedableRng;
use rand_distr::{Distribution, Normal, Uniform};

/// A distribution a parameter is drawn from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
    /// Normal with this mean and standard deviation (≥ 0, finite).
    Normal(f64, f64),
    /// Uniform on `[low, high)`, `low < high`.
    Uniform(f64, f64),
}

impl Init {
    /// The distribution `name(args)` names, if it is one with valid arguments.
    pub fn parse(name: &str, args: &[f64]) -> Option<Init> {
        match (name, args) {
            ("zeros", []) => Some(Init::Zeros),
            ("ones", []) => Some(Init::Ones),
            ("normal", [m, s]) if *s >= 0.0 && s.is_finite() => Some(Init::Normal(*m, *s)),
            ("uniform", [a, b]) if a < b => Some(Init::Uniform(*a, *b)),
            _ => None,
        }
    }

    /// A tensor of `shape` drawn from this distribution, from the stream `seed` starts, in
    /// its element type (no f64 copy of the whole).
    pub fn draw(self, elem: ElemType, shape: Vec<usize>, seed: u64) -> Result<Tensor, AllocError> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n: usize = shape.iter().product();
        match self {
            Init::Zeros => Tensor::try_zeros(elem, shape),
            Init::Ones => Tensor::generated(elem, shape, std::iter::repeat_n(1.0, n)),
            Init::Normal(m, s) => match Normal::new(m, s) {
                Ok(nd) => Tensor::generated(elem, shape, (0..n).map(|_| nd.sample(&mut rng))),
                Err(_) => Tensor::generated(elem, shape, std::iter::repeat_n(m, n)),
            },
            Init::Uniform(a, b) => {
                let u = Uniform::new(a, b);
                Tensor::generated(elem, shape, (0..n).map(|_| u.sample(&mut rng)))
            }
        }
    }
}
