//! Value bindings in rule bodies (§8): `y = x * 2 + 1` (or `==`), where `y` occurs in no
//! positive atom, gives `y` the value of index arithmetic over the rule's other variables.
//! The binding is substituted into the rest of the rule before any other pass, so that
//! `Next(x, y) :- Cur(x), y = x * 2 + 1` is checked, planned and evaluated exactly as
//! `Next(x, x * 2 + 1) :- Cur(x)`: the head writes the computed position, domains link
//! through it, and every engine already runs index arithmetic.
//!
//! Only right-hand sides that are index arithmetic (variables, integers, symbols, `+ - * /
//! %`, integer division truncating) are substituted; any other equality stays a comparison.

use crate::syntax::ast::*;
use std::collections::HashSet;

/// The program with every value binding substituted, or `None` when it has none (the common
/// case, which then costs no copy). `constants` are the names that denote scalar constants
/// rather than variables.
pub(super) fn substitute(program: &Program, constants: &HashSet<String>) -> Option<Program> {
    let has_binding = |st: &Statement| match &st.kind {
        StmtKind::Rule { head, body } => {
            next_binding(body, constants).is_some()
                || next_test_binding(head, body, constants).is_some()
        }
        _ => false,
    };
    if !program.statements.iter().any(has_binding) {
        return None;
    }
    let statements = program
        .statements
        .iter()
        .map(|st| match &st.kind {
            StmtKind::Rule { head, body } => {
                let (mut head, mut body) = (head.clone(), body.clone());
                while let Some((k, var, value)) = next_binding(&body, constants) {
                    body.remove(k);
                    replace_in_access(&mut head, &var, &value);
                    body.iter_mut()
                        .for_each(|e| replace_in_expr(e, &var, &value));
                }
                while let Some((k, var, value)) = next_test_binding(&head, &body, constants) {
                    let span = body[k].span();
                    body[k] = whole(value.clone(), span);
                    for (j, e) in body.iter_mut().enumerate() {
                        if j != k {
                            replace_var_by_expr(e, &var, &value);
                        }
                    }
                }
                Statement {
                    kind: StmtKind::Rule { head, body },
                    span: st.span,
                }
            }
            _ => st.clone(),
        })
        .collect();
    Some(Program { statements })
}

/// The first body literal `v = e` (either way round) that binds a variable `v` named in no
/// positive atom and not in `e` to index arithmetic `e`: its position, `v`, and `e`.
fn next_binding(body: &[Expr], constants: &HashSet<String>) -> Option<(usize, String, Index)> {
    let mut positive = HashSet::new();
    for e in body.iter() {
        if let Expr::Access(a) = peel(e) {
            if a.brackets != Brackets::None {
                a.indices
                    .iter()
                    .for_each(|i| names_in_index(i, &mut positive));
            }
        }
    }
    body.iter().enumerate().find_map(|(k, e)| {
        let Expr::Compare(CmpOp::Eq, l, r, _) = e else {
            return None;
        };
        [(l, r), (r, l)].into_iter().find_map(|(var, value)| {
            let v = variable(var, constants)?;
            if positive.contains(&v) {
                return None;
            }
            let value = as_index(value)?;
            let mut mentioned = HashSet::new();
            names_in_index(&value, &mut mentioned);
            (!mentioned.contains(&v)).then_some((k, v, value))
        })
    })
}

/// The first body literal `v = e` whose `v` is used only as a value in tests (in no index of
/// the head or of any atom) and whose `e` is not index arithmetic (`n = Out[x] - In[x]`,
/// then `n < 0`): its position, `v`, and `e`. The tests then read `e` itself, so `v` needs
/// no range, and a negative value is as good as any.
fn next_test_binding(
    head: &Access,
    body: &[Expr],
    constants: &HashSet<String>,
) -> Option<(usize, String, Expr)> {
    let mut indexed = HashSet::new();
    head.indices
        .iter()
        .for_each(|i| names_in_index(i, &mut indexed));
    for e in body {
        indices_in_expr(e, &mut indexed);
    }
    body.iter().enumerate().find_map(|(k, e)| {
        let Expr::Compare(CmpOp::Eq, l, r, _) = e else {
            return None;
        };
        [(l, r), (r, l)].into_iter().find_map(|(var, value)| {
            let v = variable(var, constants)?;
            if indexed.contains(&v)
                || as_index(value).is_some()
                || variable(value, constants).is_some()
            {
                return None;
            }
            let mut mentioned = HashSet::new();
            indices_in_expr(value, &mut mentioned);
            value_names(value, &mut mentioned);
            (!mentioned.contains(&v)).then(|| (k, v, (**value).clone()))
        })
    })
}

/// The test a value binding leaves: the value is a whole number (`e % 1 == 0`), as a
/// binding requires (a value that is not an integer derives nothing, §8).
fn whole(value: Expr, span: crate::diagnostics::Span) -> Expr {
    Expr::Compare(
        CmpOp::Eq,
        Box::new(Expr::Binary(
            BinOp::Rem,
            Box::new(value),
            Box::new(Expr::Number(Num::Int(1), span)),
            span,
        )),
        Box::new(Expr::Number(Num::Int(0), span)),
        span,
    )
}

/// Every name used in an index of an access inside `e`.
pub(super) fn indices_in_expr(e: &Expr, out: &mut HashSet<String>) {
    match e {
        Expr::Access(a) => a.indices.iter().for_each(|i| names_in_index(i, out)),
        Expr::Number(..) | Expr::Str(..) => {}
        Expr::Call { args, .. } => args.iter().for_each(|x| indices_in_expr(x, out)),
        Expr::Neg(x, _) | Expr::Not(x, _) => indices_in_expr(x, out),
        Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => {
            indices_in_expr(a, out);
            indices_in_expr(b, out);
        }
        Expr::Term(fs, _) => fs.iter().for_each(|(_, x)| indices_in_expr(x, out)),
    }
}

/// Every bare name used as a value inside `e`.
pub(super) fn value_names(e: &Expr, out: &mut HashSet<String>) {
    match e {
        Expr::Access(a) if a.brackets == Brackets::None && a.indices.is_empty() => {
            out.insert(a.name.text.clone());
        }
        Expr::Access(_) | Expr::Number(..) | Expr::Str(..) => {}
        Expr::Call { args, .. } => args.iter().for_each(|x| value_names(x, out)),
        Expr::Neg(x, _) | Expr::Not(x, _) => value_names(x, out),
        Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => {
            value_names(a, out);
            value_names(b, out);
        }
        Expr::Term(fs, _) => fs.iter().for_each(|(_, x)| value_names(x, out)),
    }
}

/// `e` with every use of the variable `var` as a value replaced by `value`.
fn replace_var_by_expr(e: &mut Expr, var: &str, value: &Expr) {
    match e {
        Expr::Access(a) if a.brackets == Brackets::None && a.indices.is_empty() => {
            if a.name.text == var {
                *e = value.clone();
            }
        }
        Expr::Access(_) | Expr::Number(..) | Expr::Str(..) => {}
        Expr::Call { args, .. } => args
            .iter_mut()
            .for_each(|x| replace_var_by_expr(x, var, value)),
        Expr::Neg(x, _) | Expr::Not(x, _) => replace_var_by_expr(x, var, value),
        Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => {
            replace_var_by_expr(a, var, value);
            replace_var_by_expr(b, var, value);
        }
        Expr::Term(fs, _) => fs
            .iter_mut()
            .for_each(|(_, x)| replace_var_by_expr(x, var, value)),
    }
}

/// `e` without the summation points that hold it alone (`Term([e])`).
pub(super) fn peel(mut e: &Expr) -> &Expr {
    while let Expr::Term(fs, _) = e {
        match fs.as_slice() {
            [(false, inner)] => e = inner,
            _ => break,
        }
    }
    e
}

/// The name of a bare variable (not a scalar constant, not `_`).
pub(super) fn variable(e: &Expr, constants: &HashSet<String>) -> Option<String> {
    match peel(e) {
        Expr::Access(a) if a.brackets == Brackets::None && a.indices.is_empty() => {
            let t = &a.name.text;
            // Lower case, or a variable a rewrite made (`#str1`, §8's string calls).
            let lower = t.starts_with(|c: char| c.is_lowercase() || c == '#');
            (lower && !constants.contains(t)).then(|| t.clone())
        }
        _ => None,
    }
}

/// `e` as index arithmetic, if it is written with names, integers, strings and `+ - * / %`.
pub(super) fn as_index(e: &Expr) -> Option<Index> {
    Some(match peel(e) {
        Expr::Number(Num::Int(v), span) => Index::Int(*v, *span),
        Expr::Number(Num::Real(v), span) if v.fract() == 0.0 && v.abs() < 9.0e15 => {
            Index::Int(*v as i64, *span)
        }
        Expr::Number(Num::Real(v), span) if v.is_finite() => Index::Real(*v, *span),
        Expr::Str(s, span) => Index::Str(s.clone(), *span),
        Expr::Access(a) if a.brackets == Brackets::None && a.indices.is_empty() => {
            Index::Name(a.name.clone())
        }
        Expr::Neg(inner, span) => Index::Arith(
            Box::new(Index::Int(0, *span)),
            ArithOp::Sub,
            Box::new(as_index(inner)?),
            *span,
        ),
        Expr::Binary(op, a, b, span) => {
            let op = match op {
                BinOp::Add => ArithOp::Add,
                BinOp::Sub => ArithOp::Sub,
                BinOp::Rem => ArithOp::Rem,
                BinOp::Quot => ArithOp::Div,
                BinOp::Pow => return None,
            };
            Index::Arith(Box::new(integral(a)?), op, Box::new(integral(b)?), *span)
        }
        Expr::Term(factors, span) => {
            let mut it = factors.iter();
            let (_, first) = it.next()?;
            if factors.len() == 1 {
                return as_index(first);
            }
            let mut acc = integral(first)?;
            for (div, f) in it {
                let op = if *div { ArithOp::Div } else { ArithOp::Mul };
                acc = Index::Arith(Box::new(acc), op, Box::new(integral(f)?), *span);
            }
            acc
        }
        _ => return None,
    })
}

/// `e` as an operand of index arithmetic, which is over integers.
fn integral(e: &Expr) -> Option<Index> {
    as_index(e).filter(|i| !matches!(i, Index::Real(..)))
}

/// Every name an index expression mentions.
pub(super) fn names_in_index(i: &Index, out: &mut HashSet<String>) {
    match i {
        Index::Name(n) | Index::Normalized(n) => {
            out.insert(n.text.clone());
        }
        Index::Arith(a, _, b, _) => {
            names_in_index(a, out);
            names_in_index(b, out);
        }
        Index::Virtual(inner, _) => names_in_index(inner, out),
        Index::Int(..) | Index::Str(..) | Index::Real(..) | Index::Slice(..) => {}
    }
}

fn replace_in_index(i: &mut Index, var: &str, value: &Index) {
    match i {
        Index::Name(n) if n.text == var => *i = value.clone(),
        Index::Arith(a, _, b, _) => {
            replace_in_index(a, var, value);
            replace_in_index(b, var, value);
        }
        Index::Virtual(inner, _) => replace_in_index(inner, var, value),
        _ => {}
    }
}

fn replace_in_access(a: &mut Access, var: &str, value: &Index) {
    a.indices
        .iter_mut()
        .for_each(|i| replace_in_index(i, var, value));
}

/// `i` as a value expression (the variable used as a value, §5.2).
pub(super) fn index_as_expr(i: &Index) -> Expr {
    match i {
        Index::Int(v, span) => Expr::Number(Num::Int(*v), *span),
        Index::Real(v, span) => Expr::Number(Num::Real(*v), *span),
        Index::Str(s, span) => Expr::Str(s.clone(), *span),
        Index::Arith(a, op, b, span) => {
            let (a, b) = (index_as_expr(a), index_as_expr(b));
            match op {
                ArithOp::Add => Expr::Binary(BinOp::Add, Box::new(a), Box::new(b), *span),
                ArithOp::Sub => Expr::Binary(BinOp::Sub, Box::new(a), Box::new(b), *span),
                ArithOp::Rem => Expr::Binary(BinOp::Rem, Box::new(a), Box::new(b), *span),
                ArithOp::Mul => Expr::Term(vec![(false, a), (false, b)], *span),
                ArithOp::Div => Expr::Binary(BinOp::Quot, Box::new(a), Box::new(b), *span),
            }
        }
        other => Expr::Access(Access {
            name: match other {
                Index::Name(n) => n.clone(),
                _ => Name {
                    text: String::new(),
                    span: other.span(),
                },
            },
            brackets: Brackets::None,
            indices: Vec::new(),
            span: other.span(),
        }),
    }
}

fn replace_in_expr(e: &mut Expr, var: &str, value: &Index) {
    match e {
        Expr::Access(a) if a.brackets == Brackets::None && a.indices.is_empty() => {
            if a.name.text == var {
                *e = index_as_expr(value);
            }
        }
        Expr::Access(a) => replace_in_access(a, var, value),
        Expr::Number(..) | Expr::Str(..) => {}
        Expr::Call { args, .. } => args.iter_mut().for_each(|x| replace_in_expr(x, var, value)),
        Expr::Neg(x, _) | Expr::Not(x, _) => replace_in_expr(x, var, value),
        Expr::Binary(_, a, b, _) | Expr::Compare(_, a, b, _) => {
            replace_in_expr(a, var, value);
            replace_in_expr(b, var, value);
        }
        Expr::Term(fs, _) => fs
            .iter_mut()
            .for_each(|(_, x)| replace_in_expr(x, var, value)),
    }
}
