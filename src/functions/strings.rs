//! String functions of §8 (`cat`, `strlen`, `substr`, `ord`, `to_number`, `to_string`,
//! `contains`), on the values a relation's columns hold. They are computed outside the
//! engines: each call in a rule reads a table of their results (see `semantics::strings`).

use crate::syntax::ast::Num;

/// A value of a relation's column as string functions see it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    /// An integer column's value.
    Int(i64),
    /// A symbol.
    Sym(String),
    /// A real column's value, written as its domain writes it (`semantics::real_text`).
    Real(String),
}

impl Value {
    /// The text a string function reads: a symbol's own, an integer's decimal digits (so
    /// that `cat(x, n)` needs no `to_string`).
    pub(crate) fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Value::Int(v) => v.to_string().into(),
            Value::Sym(s) | Value::Real(s) => s.as_str().into(),
        }
    }

    /// The number a computed value reads: an integer's, a real's, or a symbol that spells
    /// one (as `to_number` would read it).
    pub fn number(&self) -> Option<f64> {
        match self {
            Value::Int(v) => Some(*v as f64),
            Value::Sym(s) | Value::Real(s) => s.trim().parse().ok(),
        }
    }

    /// The value a computation gives, as a column holds it: an integer where it is one,
    /// a real otherwise; `None` for an infinity or NaN, which no column holds.
    pub fn of_number(v: f64) -> Option<Value> {
        if !v.is_finite() {
            return None;
        }
        if v.fract() == 0.0 && v.abs() <= 9.007_199_254_740_992e15 {
            return Some(Value::Int(v as i64));
        }
        Some(Value::Real(crate::semantics::real_text(v)))
    }

    /// The value a computation gives, as a column holds it; `None` for an infinity or
    /// NaN, which no column holds.
    pub fn of_num(v: Num) -> Option<Value> {
        match v {
            Num::Int(v) => Some(Value::Int(v)),
            Num::Real(x) => Value::of_number(x),
        }
    }

    /// The integer a count or position argument reads; a symbol is one only when it is
    /// written as one.
    fn int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            Value::Sym(s) | Value::Real(s) => s.parse().ok(),
        }
    }
}

/// The string functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StringFn {
    /// `cat(a, b, ...)`: the arguments' texts joined.
    Cat,
    /// `strlen(s)`: how many characters.
    Strlen,
    /// `substr(s, i, n)`: `n` characters from the `i`-th (0-based), fewer at the end.
    Substr,
    /// `ord(s)`: the Unicode code point of the first character.
    Ord,
    /// `to_number(s)`: the number `s` spells, an integer where it is one.
    ToNumber,
    /// `to_string(n)`: the symbol spelling `n`.
    ToString,
    /// `contains(a, b)`: whether `a` occurs in `b` (Soufflé's order).
    Contains,
}

/// What a call of a string function gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Returns {
    /// A symbol.
    Symbol,
    /// An integer.
    Integer,
    /// Truth: the call is a condition.
    Truth,
}

impl StringFn {
    /// The function called `name`, if it is a string function.
    pub fn named(name: &str) -> Option<StringFn> {
        Some(match name {
            "cat" => StringFn::Cat,
            "strlen" => StringFn::Strlen,
            "substr" => StringFn::Substr,
            "ord" => StringFn::Ord,
            "to_number" => StringFn::ToNumber,
            "to_string" => StringFn::ToString,
            "contains" => StringFn::Contains,
            _ => return None,
        })
    }

    /// Its name as written.
    pub fn name(self) -> &'static str {
        match self {
            StringFn::Cat => "cat",
            StringFn::Strlen => "strlen",
            StringFn::Substr => "substr",
            StringFn::Ord => "ord",
            StringFn::ToNumber => "to_number",
            StringFn::ToString => "to_string",
            StringFn::Contains => "contains",
        }
    }

    /// Whether `n` arguments fit.
    pub fn takes(self, n: usize) -> bool {
        match self {
            StringFn::Cat => n >= 2,
            StringFn::Substr => n == 3,
            StringFn::Contains => n == 2,
            _ => n == 1,
        }
    }

    /// The arguments it takes, for messages.
    pub fn arity_text(self) -> &'static str {
        match self {
            StringFn::Cat => "two or more arguments",
            StringFn::Substr => "three arguments (a string, a start and a length)",
            StringFn::Contains => "two arguments",
            _ => "one argument",
        }
    }

    /// What a call gives.
    pub fn returns(self) -> Returns {
        match self {
            StringFn::Cat | StringFn::Substr | StringFn::ToString => Returns::Symbol,
            StringFn::Strlen | StringFn::Ord | StringFn::ToNumber => Returns::Integer,
            StringFn::Contains => Returns::Truth,
        }
    }

    /// The call's value: `Ok(None)` where the function is undefined there (a position
    /// outside the string, text that is no number, the first character of ""), which derives
    /// nothing, as a division by zero does; `Err` when an argument has the wrong kind.
    /// `contains` gives `Int(1)` when it holds and `None` when not.
    pub fn apply(self, args: &[Value]) -> Result<Option<Value>, String> {
        let text = |i: usize| args.get(i).map(Value::text).unwrap_or_default();
        Ok(match self {
            StringFn::Cat => Some(Value::Sym(args.iter().map(Value::text).collect())),
            StringFn::Strlen => Some(Value::Int(text(0).chars().count() as i64)),
            StringFn::Ord => text(0).chars().next().map(|c| Value::Int(c as i64)),
            StringFn::ToNumber => {
                let t = text(0);
                match t.trim().parse::<i64>() {
                    Ok(v) => Some(Value::Int(v)),
                    Err(_) => t.trim().parse::<f64>().ok().and_then(Value::of_number),
                }
            }
            StringFn::ToString => Some(Value::Sym(text(0).into_owned())),
            StringFn::Contains => text(1).contains(&*text(0)).then_some(Value::Int(1)),
            StringFn::Substr => {
                let count = |i: usize| {
                    args.get(i).and_then(Value::int).ok_or_else(|| {
                        format!(
                            "`substr` takes integers as its start and length, not `{}`",
                            text(i)
                        )
                    })
                };
                let (start, len) = (count(1)?, count(2)?);
                let s = text(0);
                let chars = s.chars().count() as i64;
                if start < 0 || len < 0 || start > chars {
                    None
                } else {
                    Some(Value::Sym(
                        s.chars().skip(start as usize).take(len as usize).collect(),
                    ))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(s: &str) -> Value {
        Value::Sym(s.into())
    }

    #[test]
    fn each_function_computes_what_its_documentation_says() {
        let ok = |f: StringFn, args: &[Value]| f.apply(args).unwrap();
        assert_eq!(
            ok(StringFn::Cat, &[sym("a"), Value::Int(-2), sym("b")]),
            Some(sym("a-2b"))
        );
        assert_eq!(ok(StringFn::Strlen, &[sym("héllo")]), Some(Value::Int(5)));
        assert_eq!(
            ok(
                StringFn::Substr,
                &[sym("hello"), Value::Int(1), Value::Int(3)]
            ),
            Some(sym("ell"))
        );
        assert_eq!(
            ok(
                StringFn::Substr,
                &[sym("hello"), Value::Int(3), Value::Int(10)]
            ),
            Some(sym("lo"))
        );
        assert_eq!(
            ok(
                StringFn::Substr,
                &[sym("hello"), Value::Int(5), Value::Int(1)]
            ),
            Some(sym(""))
        );
        assert_eq!(
            ok(
                StringFn::Substr,
                &[sym("hello"), Value::Int(6), Value::Int(1)]
            ),
            None
        );
        assert_eq!(ok(StringFn::Ord, &[sym("A")]), Some(Value::Int(65)));
        assert_eq!(ok(StringFn::Ord, &[sym("")]), None);
        assert_eq!(ok(StringFn::ToNumber, &[sym("-42")]), Some(Value::Int(-42)));
        assert_eq!(ok(StringFn::ToNumber, &[sym("4x")]), None);
        assert_eq!(
            ok(StringFn::ToNumber, &[sym("2.50")]),
            Some(Value::Real("2.5".into()))
        );
        assert_eq!(ok(StringFn::ToNumber, &[sym("2.0")]), Some(Value::Int(2)));
        assert_eq!(ok(StringFn::ToString, &[Value::Int(7)]), Some(sym("7")));
        assert_eq!(
            ok(StringFn::Contains, &[sym("ell"), sym("hello")]),
            Some(Value::Int(1))
        );
        assert_eq!(ok(StringFn::Contains, &[sym("hello"), sym("ell")]), None);
    }

    #[test]
    fn a_symbol_as_a_count_is_an_error_unless_it_spells_one() {
        assert!(StringFn::Substr
            .apply(&[sym("abc"), sym("Alice"), Value::Int(1)])
            .is_err());
        assert_eq!(
            StringFn::Substr
                .apply(&[sym("abc"), sym("1"), Value::Int(1)])
                .unwrap(),
            Some(sym("b"))
        );
    }
}
