//! Computed values that become columns (§8): `d = p * 1.5` over a real column, or
//! `s = S[x]` where `S` holds reals. A column holds only values its domain has numbered, so
//! such a binding is a *site*, like a string call: a table of its results, filled in rounds
//! by whoever runs the program (see `semantics::strings`). This is the function a value
//! site computes, over the site's arguments and the evaluated program's tensors.

use super::strings::Value;
use super::Builtin;
use crate::syntax::ast::{BinOp, Num};

/// An expression over a site's arguments.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueFn {
    /// A number.
    Const(Num),
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

/// An integer result outside i64 (§8: an error where the value is written, never a wrap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow;

/// A value: `Ok(None)` where it is undefined, which derives nothing.
pub(crate) type Computed = Result<Option<Num>, Overflow>;

impl ValueFn {
    /// The value of a function of numbers alone, known before anything runs; `None` when
    /// it reads arguments, scalars or tensors.
    pub fn constant(&self) -> Option<Computed> {
        let fixed = match self {
            ValueFn::Const(_) => true,
            ValueFn::Arg(_) | ValueFn::Scalar(_) | ValueFn::Read(..) => false,
            ValueFn::Neg(x) => x.constant().is_some(),
            ValueFn::Binary(_, a, b) => a.constant().is_some() && b.constant().is_some(),
            ValueFn::Product(fs) => fs.iter().all(|(_, f)| f.constant().is_some()),
            ValueFn::Call(_, xs) => xs.iter().all(|x| x.constant().is_some()),
        };
        fixed.then(|| self.eval(&[], &Nothing))
    }

    /// The value on `args`. Integers stay exact in i64 (§8: 4294967295 and 2⁶² + 1 are
    /// never rounded through a float) until a real operand, `/` in a product or a real
    /// function makes the value real; a real that is not finite is undefined.
    pub fn eval(&self, args: &[Value], reads: &dyn Reads) -> Computed {
        let v = match self {
            ValueFn::Const(c) => *c,
            ValueFn::Arg(k) => match args.get(*k).and_then(number) {
                Some(v) => v,
                None => return Ok(None),
            },
            ValueFn::Scalar(name) => match reads.scalar(name) {
                Some(x) => Num::of(x),
                None => return Ok(None),
            },
            ValueFn::Neg(x) => match x.eval(args, reads)? {
                Some(Num::Int(v)) => Num::Int(v.checked_neg().ok_or(Overflow)?),
                Some(Num::Real(x)) => Num::Real(-x),
                None => return Ok(None),
            },
            ValueFn::Binary(op, a, b) => {
                let (Some(a), Some(b)) = (a.eval(args, reads)?, b.eval(args, reads)?) else {
                    return Ok(None);
                };
                return binary(*op, a, b).map(|v| v.filter(finite));
            }
            ValueFn::Product(fs) => {
                let mut acc = Num::Int(1);
                for (div, f) in fs {
                    let Some(x) = f.eval(args, reads)? else {
                        return Ok(None);
                    };
                    acc = match (acc, x, div) {
                        (Num::Int(a), Num::Int(b), false) => {
                            Num::Int(a.checked_mul(b).ok_or(Overflow)?)
                        }
                        (a, b, false) => Num::Real(a.value() * b.value()),
                        (a, b, true) => Num::Real(a.value() / b.value()),
                    };
                }
                acc
            }
            ValueFn::Call(b, xs) => {
                let mut nums = Vec::with_capacity(xs.len());
                for x in xs {
                    match x.eval(args, reads)? {
                        Some(v) => nums.push(v),
                        None => return Ok(None),
                    }
                }
                call(*b, &nums)?
            }
            ValueFn::Read(name, index) => {
                let at: Option<Vec<Value>> = index
                    .iter()
                    .map(|i| match i {
                        ReadIndex::Arg(k) => args.get(*k).cloned(),
                        ReadIndex::Const(v) => Some(v.clone()),
                    })
                    .collect();
                match at.and_then(|at| reads.element(name, &at)) {
                    Some(x) => Num::of(x),
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(v).filter(finite))
    }
}

/// An argument as a number: a value column's integers as they are written, exact past 2⁵³.
fn number(v: &Value) -> Option<Num> {
    match v {
        Value::Int(v) => Some(Num::Int(*v)),
        Value::Real(s) | Value::Sym(s) => match s.trim().parse::<i64>() {
            Ok(v) => Some(Num::Int(v)),
            Err(_) => v.number().map(Num::Real),
        },
    }
}

fn finite(v: &Num) -> bool {
    match v {
        Num::Int(_) => true,
        Num::Real(x) => x.is_finite(),
    }
}

/// `a op b`: exact on two integers (`/` truncates, as index arithmetic does; by zero it is
/// undefined), real otherwise.
fn binary(op: BinOp, a: Num, b: Num) -> Computed {
    if let (Num::Int(a), Num::Int(b)) = (a, b) {
        let v = match op {
            BinOp::Add => a.checked_add(b),
            BinOp::Sub => a.checked_sub(b),
            BinOp::Quot | BinOp::Rem if b == 0 => return Ok(None),
            BinOp::Quot => a.checked_div(b),
            BinOp::Rem => a.checked_rem(b),
            BinOp::Pow => match u32::try_from(b) {
                Ok(e) => a.checked_pow(e),
                Err(_) => return Ok(Some(Num::Real((a as f64).powf(b as f64)))),
            },
        };
        return v.map(|v| Some(Num::Int(v))).ok_or(Overflow);
    }
    let (a, b) = (a.value(), b.value());
    Ok(Some(Num::Real(match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Pow => a.powf(b),
        BinOp::Rem => a % b,
        // `/` in index arithmetic truncates integers; reals divide.
        BinOp::Quot if a.fract() == 0.0 && b.fract() == 0.0 => (a / b).trunc(),
        BinOp::Quot => a / b,
    })))
}

/// A built-in function: `min`, `max`, `abs` and the bitwise functions of integers stay
/// integers; everything else is real.
fn call(f: Builtin, xs: &[Num]) -> Result<Num, Overflow> {
    let ints: Option<Vec<i64>> = xs
        .iter()
        .map(|x| match x {
            Num::Int(v) => Some(*v),
            Num::Real(_) => None,
        })
        .collect();
    if let Some(ints) = ints.filter(|i| !i.is_empty()) {
        let (a, b) = (ints[0], ints.get(1).copied());
        match (f, b) {
            (Builtin::Min | Builtin::Max, None) => return Ok(Num::Int(a)),
            (Builtin::Min, Some(b)) => return Ok(Num::Int(a.min(b))),
            (Builtin::Max, Some(b)) => return Ok(Num::Int(a.max(b))),
            (Builtin::Abs, None) => return a.checked_abs().map(Num::Int).ok_or(Overflow),
            (_, Some(b)) => {
                if let Some(v) = super::bitwise(f, a, b) {
                    return Ok(Num::Int(v));
                }
            }
            _ => {}
        }
    }
    let reals: Vec<f64> = xs.iter().map(|x| x.value()).collect();
    Ok(Num::Real(f.apply(&reals)))
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
        assert_eq!(
            twice_plus.eval(&args, &Fixed),
            Ok(Some(Num::Real(1.5 / 4.0 + 2.5)))
        );
        let elsewhere = [Value::Real("1.5".into()), Value::Sym("B".into())];
        assert_eq!(twice_plus.eval(&elsewhere, &Fixed), Ok(None));
        let by_zero = ValueFn::Product(vec![
            (false, ValueFn::Const(Num::Int(1))),
            (true, ValueFn::Const(Num::Int(0))),
        ]);
        assert_eq!(
            by_zero.eval(&[], &Fixed),
            Ok(None),
            "an infinity is no value"
        );
    }

    #[test]
    fn integers_stay_exact_and_overflow_is_no_wrap() {
        let big = [Value::Int((1 << 62) + 1)];
        let plus = |op, k| {
            ValueFn::Binary(
                op,
                Box::new(ValueFn::Arg(0)),
                Box::new(ValueFn::Const(Num::Int(k))),
            )
        };
        let sum = plus(BinOp::Add, 2).eval(&big, &Fixed);
        assert_eq!(sum, Ok(Some(Num::Int((1 << 62) + 3))));
        assert_eq!(plus(BinOp::Quot, 0).eval(&big, &Fixed), Ok(None));
        let twice = ValueFn::Product(vec![
            (false, ValueFn::Arg(0)),
            (false, ValueFn::Const(Num::Int(2))),
        ]);
        assert_eq!(twice.eval(&big, &Fixed), Err(Overflow));
    }
}
