//! Computed values that become columns (§8): `d = p * 1.5` over a real column, or
//! `s = S[x]` where `S` holds reals. A column holds only values its domain has numbered, so
//! such a binding is a *site*, like a string call: a table of its results, filled in rounds
//! by whoever runs the program (see `semantics::strings`). This is the function a value
//! site computes, over the site's arguments and the evaluated program's tensors.

use super::strings::Value;
use super::Builtin;
use crate::syntax::ast::BinOp;

/// An expression over a site's arguments.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueFn {
    /// A number.
    Const(f64),
    /// The site's argument of this number.
    Arg(usize),
    /// A scalar constant, known once the program is checked.
    Scalar(String),
    /// `-e`.
    Neg(Box<ValueFn>),
    /// Arithmetic.
    Binary(BinOp, Box<ValueFn>, Box<ValueFn>),
    /// A product; `true` marks division (real division, §4).
    Product(Vec<(bool, ValueFn)>),
    /// A built-in function.
    Call(Builtin, Vec<ValueFn>),
    /// A tensor read at arguments and constants.
    Read(String, Vec<ReadIndex>),
}

/// An index of a [`ValueFn::Read`].
#[derive(Clone, Debug, PartialEq)]
pub enum ReadIndex {
    /// The site's argument of this number.
    Arg(usize),
    /// A constant.
    Const(Value),
}

/// What a value site reads of the evaluated program: a tensor's element at the given
/// column values (`None` outside the tensor: nothing, §5.1), and scalars.
pub trait Reads {
    /// The element of tensor `name` at `index`.
    fn element(&self, name: &str, index: &[Value]) -> Option<f64>;
    /// The scalar constant `name`.
    fn scalar(&self, name: &str) -> Option<f64>;
}

/// Reads nothing: for a value of constants alone.
struct Nothing;

impl Reads for Nothing {
    fn element(&self, _: &str, _: &[Value]) -> Option<f64> {
        None
    }
    fn scalar(&self, _: &str) -> Option<f64> {
        None
    }
}

impl ValueFn {
    /// The value of a function of numbers alone, known before anything runs (`NaN` where
    /// it is undefined); `None` when it reads arguments, scalars or tensors.
    pub fn constant(&self) -> Option<f64> {
        let fixed = match self {
            ValueFn::Const(_) => true,
            ValueFn::Arg(_) | ValueFn::Scalar(_) | ValueFn::Read(..) => false,
            ValueFn::Neg(x) => x.constant().is_some(),
            ValueFn::Binary(_, a, b) => a.constant().is_some() && b.constant().is_some(),
            ValueFn::Product(fs) => fs.iter().all(|(_, f)| f.constant().is_some()),
            ValueFn::Call(_, xs) => xs.iter().all(|x| x.constant().is_some()),
        };
        fixed.then(|| self.eval(&[], &Nothing).unwrap_or(f64::NAN))
    }

    /// The value on `args`; `None` where it is undefined (a read of nothing, an argument
    /// that is no number, a result that is not finite), which derives nothing.
    pub fn eval(&self, args: &[Value], reads: &dyn Reads) -> Option<f64> {
        let v = match self {
            ValueFn::Const(c) => *c,
            ValueFn::Arg(k) => args.get(*k)?.number()?,
            ValueFn::Scalar(name) => reads.scalar(name)?,
            ValueFn::Neg(x) => -x.eval(args, reads)?,
            ValueFn::Binary(op, a, b) => {
                let (a, b) = (a.eval(args, reads)?, b.eval(args, reads)?);
                match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Pow => a.powf(b),
                    BinOp::Rem => a % b,
                    // `/` in index arithmetic truncates integers; reals divide.
                    BinOp::Quot if a.fract() == 0.0 && b.fract() == 0.0 => (a / b).trunc(),
                    BinOp::Quot => a / b,
                }
            }
            ValueFn::Product(fs) => {
                let mut acc = 1.0;
                for (div, f) in fs {
                    let x = f.eval(args, reads)?;
                    if *div {
                        acc /= x;
                    } else {
                        acc *= x;
                    }
                }
                acc
            }
            ValueFn::Call(b, xs) => {
                let xs: Option<Vec<f64>> = xs.iter().map(|x| x.eval(args, reads)).collect();
                b.apply(&xs?)
            }
            ValueFn::Read(name, index) => {
                let at: Option<Vec<Value>> = index
                    .iter()
                    .map(|i| match i {
                        ReadIndex::Arg(k) => args.get(*k).cloned(),
                        ReadIndex::Const(v) => Some(v.clone()),
                    })
                    .collect();
                reads.element(name, &at?)?
            }
        };
        v.is_finite().then_some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;

    impl Reads for Fixed {
        fn element(&self, name: &str, index: &[Value]) -> Option<f64> {
            (name == "S" && index == [Value::Sym("A".into())]).then_some(2.5)
        }
        fn scalar(&self, name: &str) -> Option<f64> {
            (name == "N").then_some(4.0)
        }
    }

    #[test]
    fn values_read_arguments_tensors_and_scalars() {
        let twice_plus = ValueFn::Binary(
            BinOp::Add,
            Box::new(ValueFn::Product(vec![
                (false, ValueFn::Arg(0)),
                (true, ValueFn::Scalar("N".into())),
            ])),
            Box::new(ValueFn::Read("S".into(), vec![ReadIndex::Arg(1)])),
        );
        let args = [Value::Real("1.5".into()), Value::Sym("A".into())];
        assert_eq!(twice_plus.eval(&args, &Fixed), Some(1.5 / 4.0 + 2.5));
        let elsewhere = [Value::Real("1.5".into()), Value::Sym("B".into())];
        assert_eq!(twice_plus.eval(&elsewhere, &Fixed), None);
        let by_zero = ValueFn::Product(vec![
            (false, ValueFn::Const(1.0)),
            (true, ValueFn::Const(0.0)),
        ]);
        assert_eq!(by_zero.eval(&[], &Fixed), None, "an infinity is no value");
    }
}
