//! A loop nest's innermost range evaluated a row at a time: the point's expression computed
//! for every value of the range at once, each operation over the whole row, so that the
//! expression is walked once per row instead of once per point and reads along the row step
//! through memory. Every element goes through the same f64 operations as at one point; the
//! row keeps, per element, whether it is defined ("nothing", §5.1).

use super::{read_affine, row_value, Cx, MAX_AFFINE_RANK};
use crate::functions::Builtin;
use crate::plan::nest::{By, Value};
use crate::semantics::{Func, VarId};
use crate::syntax::ast::BinOp;
use crate::tensor::Storage;

/// Values along a row, and which are defined.
pub(super) struct Row {
    pub(super) values: Vec<f64>,
    pub(super) defined: Vec<bool>,
}

impl Row {
    fn filled(n: usize, v: f64) -> Row {
        Row {
            values: vec![v; n],
            defined: vec![true; n],
        }
    }
}

/// The range a row runs over: its variable and extent.
#[derive(Clone, Copy)]
pub(super) struct Along {
    pub(super) var: VarId,
    pub(super) n: usize,
}

impl Cx<'_> {
    /// `v` at every value of the row's variable, the other variables as in `env`.
    pub(super) fn eval_row(
        &self,
        v: &Value,
        env: &mut [i64],
        slots: &mut [usize],
        along: Along,
    ) -> Row {
        let n = along.n;
        match v {
            Value::Const(k) => Row::filled(n, *k),
            Value::Var(x) if *x == along.var => Row {
                values: (0..n).map(|j| j as f64).collect(),
                defined: vec![true; n],
            },
            Value::Var(x) => Row::filled(n, env[*x] as f64),
            Value::Scanned(slot) => {
                let value = slots
                    .get(*slot)
                    .map(|&r| row_value::<f64>(self.values, self.indexes.scanned(*slot), r));
                match value {
                    Some(v) => Row::filled(n, v),
                    None => self.pointwise(v, env, slots, along),
                }
            }
            Value::Read {
                tensor,
                affine: Some(at),
                total,
                relational,
                ..
            } if at.len() <= MAX_AFFINE_RANK => {
                let t = &self.values[*tensor];
                let bits = self.indexes.bitmap(*tensor);
                // A dense tensor read along the row steps through memory by one stride.
                if let Storage::Dense(d) = &t.storage {
                    if let Some((base, step)) = linear(at, &t.shape, env, along) {
                        let mut out = Row::filled(n, 0.0);
                        d.gather(base, step, &mut out.values);
                        return out;
                    }
                }
                let here = env[along.var];
                let mut out = Row::filled(n, 0.0);
                for j in 0..n {
                    env[along.var] = j as i64;
                    match read_affine::<f64>(t, bits, at, env).resolve(*total, *relational) {
                        Some(x) => out.values[j] = x,
                        None => out.defined[j] = false,
                    }
                }
                env[along.var] = here;
                out
            }
            Value::Neg(x) => self.map(x, env, slots, along, |a| -a),
            Value::Not(x) => self.map(x, env, slots, along, |a| 1.0 - a),
            // Where an undefined element masks the product, a point at a time.
            Value::Product(fs) if fs.iter().any(|(by, _)| *by == By::Defined) => {
                self.pointwise(v, env, slots, along)
            }
            Value::Product(fs) => self.product_row(fs, env, slots, along),
            // An integer `%` or `//` is nothing where it divides by 0: a point at a time.
            Value::Binary(op, a, b) if self.divides_integers(*op, a, b) => {
                self.pointwise(v, env, slots, along)
            }
            Value::Binary(op, a, b) => {
                let (a, b) = (
                    self.eval_row(a, env, slots, along),
                    self.eval_row(b, env, slots, along),
                );
                let f = match op {
                    BinOp::Add => |x: f64, y: f64| x + y,
                    BinOp::Sub => |x: f64, y: f64| x - y,
                    BinOp::Pow => f64::powf,
                    BinOp::Rem => |x: f64, y: f64| x % y,
                    BinOp::Quot => |x: f64, y: f64| (x / y).trunc(),
                };
                zip(a, &b, f)
            }
            Value::Compare(op, a, b) => {
                let (a, b) = (
                    self.eval_row(a, env, slots, along),
                    self.eval_row(b, env, slots, along),
                );
                let op = *op;
                zip(a, &b, move |x, y| if op.holds(x, y) { 1.0 } else { 0.0 })
            }
            Value::Call(Func::Builtin(f), args) if args.len() <= 2 => {
                let rows: Vec<Row> = args
                    .iter()
                    .map(|a| self.eval_row(a, env, slots, along))
                    .collect();
                call(*f, rows, n)
            }
            // Nested summation points, normalisations, concats, slices, registered
            // functions and reads by arbitrary arithmetic: one point at a time.
            _ => self.pointwise(v, env, slots, along),
        }
    }

    /// A product along the row: its factors multiplied or divided in order, then 0 wherever
    /// a mask is 0, as the reference's product is.
    fn product_row(
        &self,
        fs: &[(By, Value)],
        env: &mut [i64],
        slots: &mut [usize],
        along: Along,
    ) -> Row {
        let mut acc = Row::filled(along.n, 1.0);
        let mut masks = Vec::new();
        for (by, f) in fs {
            let r = self.eval_row(f, env, slots, along);
            let pairs = acc.values.iter_mut().zip(&r.values);
            match by {
                By::Over => pairs.for_each(|(a, x)| *a /= x),
                By::Times | By::Mask | By::Defined => pairs.for_each(|(a, x)| *a *= x),
            }
            for (d, x) in acc.defined.iter_mut().zip(&r.defined) {
                *d &= x;
            }
            if *by == By::Mask {
                masks.push(r.values);
            }
        }
        for m in &masks {
            for (v, _) in acc.values.iter_mut().zip(m).filter(|(_, m)| **m == 0.0) {
                *v = 0.0;
            }
        }
        acc
    }

    /// `f` of a row.
    fn map(
        &self,
        x: &Value,
        env: &mut [i64],
        slots: &mut [usize],
        along: Along,
        f: impl Fn(f64) -> f64,
    ) -> Row {
        let mut r = self.eval_row(x, env, slots, along);
        r.values.iter_mut().for_each(|v| *v = f(*v));
        r
    }

    /// `v` along the row, evaluated at each point.
    fn pointwise(&self, v: &Value, env: &mut [i64], slots: &mut [usize], along: Along) -> Row {
        let here = env[along.var];
        let mut out = Row::filled(along.n, 0.0);
        for j in 0..along.n {
            env[along.var] = j as i64;
            match self.eval(v, env, slots) {
                Some(x) => out.values[j] = x,
                None => out.defined[j] = false,
            }
        }
        env[along.var] = here;
        out
    }
}

/// The row-major offset of a read at the row's first element and its change per element,
/// when every position stays inside its axis along the whole row; `None` otherwise (the row
/// is then read element by element, with out-of-range elements undefined).
fn linear(
    at: &[crate::plan::nest::Affine],
    shape: &[usize],
    env: &[i64],
    along: Along,
) -> Option<(i64, i64)> {
    let (mut base, mut step) = (0i64, 0i64);
    for ((coefs, c), &n) in at.iter().zip(shape) {
        let (mut first, mut per) = (*c, 0i64);
        for &(v, k) in coefs {
            if v == along.var {
                per += k;
            } else {
                first += env[v] * k;
            }
        }
        let last = first + per * (along.n as i64 - 1);
        if first.min(last) < 0 || first.max(last) >= n as i64 {
            return None;
        }
        base = base * n as i64 + first;
        step = step * n as i64 + per;
    }
    Some((base, step))
}

/// Two rows combined elementwise.
fn zip(mut a: Row, b: &Row, f: impl Fn(f64, f64) -> f64) -> Row {
    for ((x, &y), (da, &db)) in a
        .values
        .iter_mut()
        .zip(&b.values)
        .zip(a.defined.iter_mut().zip(&b.defined))
    {
        *x = f(*x, y);
        *da &= db;
    }
    a
}

/// A built-in function of one or two rows.
fn call(f: Builtin, mut rows: Vec<Row>, n: usize) -> Row {
    match rows.len() {
        1 => {
            let mut r = rows.remove(0);
            r.values.iter_mut().for_each(|x| *x = f.apply(&[*x]));
            r
        }
        2 => {
            let b = rows.remove(1);
            let a = rows.remove(0);
            zip(a, &b, |x, y| f.apply(&[x, y]))
        }
        _ => Row::filled(n, f.apply(&[])),
    }
}
