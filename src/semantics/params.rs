//! Parameters (§12): tensors declared or initialised but not defined by data or equations get
//! values drawn from `--seed`, so that `tl run` on an untrained model is reproducible.

use super::{Ctx, Kind, TensorInfo};
use crate::diagnostics::{codes, Diagnostic, Span};
use crate::syntax::ast::{Access, Brackets, Expr, StmtKind};
use crate::tensor::{Init, Tensor};
use std::collections::HashMap;

impl Ctx<'_> {
    /// A domain named in declarations but declared nowhere takes its size from data; where
    /// nothing sizes it, the name is unknown (most often a typo).
    pub(super) fn check_implicit_domains(&mut self, infos: &[TensorInfo]) {
        let mut unsized_: Vec<(String, crate::diagnostics::Span)> = self
            .named_domains
            .iter()
            .filter(|(_, nd)| nd.implicit)
            .filter(|(name, _)| {
                let d = self
                    .domains
                    .iter()
                    .position(|d| d.name.as_deref() == Some(name.as_str()));
                !infos.iter().any(|t| {
                    t.domains
                        .iter()
                        .zip(&t.shape)
                        .any(|(&x, &n)| Some(x) == d && n > 0)
                })
            })
            .map(|(name, nd)| (name.clone(), nd.span))
            .collect();
        unsized_.sort_by_key(|(_, span)| span.start);
        for (name, span) in unsized_ {
            self.diags.push(
                Diagnostic::error(
                    codes::UNKNOWN_TENSOR,
                    span,
                    format!("unknown domain `{name}`: no declaration or data gives its size"),
                )
                .with_note(format!(
                    "declare it, e.g. `{name} : 10` or `{name} : {{A, B}}`, or read data for a tensor over it"
                )),
            );
        }
    }

    /// Initial values of parameters: a checkpoint's, `~` distributions, or the SPEC's
    /// default. Returns the parameters.
    pub(super) fn init_params(
        &mut self,
        infos: &[TensorInfo],
        data: &mut [Option<Tensor>],
        has_equations: &[bool],
    ) -> Vec<usize> {
        let program = self.program;
        let mut params = Vec::new();
        let is_param = |ctx: &Self, t: usize, data: &[Option<Tensor>]| {
            let d = &ctx.tensors[t];
            data[t].is_none()
                && !has_equations[t]
                && (d.declared.is_some() || d.init.is_some())
                && infos[t].kind != Kind::Bool
        };
        // Parameters and dense data are alive together (§15): refused before any parameter
        // is allocated, rather than aborting when an allocation fails.
        let held = |t: usize| {
            is_param(self, t, data)
                || matches!(&data[t], Some(x) if matches!(x.storage, crate::tensor::Storage::Dense(_)))
        };
        if let Some(d) = super::budget::check_alive(infos, &held, self.input.settings.max_memory) {
            self.diags.push(d);
            return params;
        }
        for (t, info) in infos.iter().enumerate() {
            let d = &self.tensors[t];
            if !is_param(self, t, data) {
                continue;
            }
            if d.declared.is_none() {
                if let Some(ax) = info.shape.iter().position(|&n| n == 0) {
                    self.diags.push(
                        Diagnostic::error(
                            codes::UNBOUND_INDEX,
                            info.span,
                            format!(
                                "parameter `{}` has no inferable shape: nothing gives the extent of its axis {}",
                                info.name,
                                ax + 1
                            ),
                        )
                        .with_note(format!(
                            "declare it, e.g. `{} : real[{}]`, or index it with a variable that data ranges over",
                            info.name,
                            vec!["10"; info.shape.len()].join(", ")
                        )),
                    );
                    continue;
                }
            }
            params.push(t);
            if let Some(v) = self.input.parameters.get(&info.name) {
                if v.shape == info.shape {
                    data[t] =
                        Tensor::dense(info.elem, info.shape.clone(), v.to_dense_values()).ok();
                } else {
                    self.diags.push(
                        Diagnostic::error(
                            codes::CHECKPOINT,
                            info.span,
                            format!(
                                "the checkpoint holds `{}` with shape {:?}, but the program gives it shape {:?}",
                                info.name, v.shape, info.shape
                            ),
                        )
                        .with_note("load a checkpoint saved from this program, or fix the declaration"),
                    );
                }
                continue;
            }
            let rank = info.shape.len();
            let (dist, args, span) = match d.init.map(|s| &program.statements[s]) {
                Some(st) => match &st.kind {
                    StmtKind::Init { dist, args, .. } => {
                        let valued: Result<Vec<f64>, Diagnostic> =
                            args.iter().map(|a| constant(a, &self.scalars)).collect();
                        match valued {
                            Ok(values) => (dist.text.clone(), values, st.span),
                            Err(d) => {
                                self.diags.push(d);
                                continue;
                            }
                        }
                    }
                    _ => continue,
                },
                None if rank >= 2 => {
                    let n = info.shape[rank - 1].max(1) as f64;
                    ("normal".to_string(), vec![0.0, 1.0 / n.sqrt()], info.span)
                }
                None => ("zeros".to_string(), Vec::new(), info.span),
            };
            if let Some(tensor) = self.drawn(info, (&dist, &args, span)) {
                data[t] = Some(tensor);
            }
        }
        params
    }

    /// Parameter `info` drawn from `dist(args)` straight into its own buffer, in its element
    /// type (no f64 copy of the whole); `None` with an error where the distribution is
    /// unknown or the memory is not given.
    fn drawn(
        &mut self,
        info: &TensorInfo,
        (dist, args, span): (&str, &[f64], Span),
    ) -> Option<Tensor> {
        if !self.fits_dense(info) {
            return None;
        }
        let Some(init) = Init::parse(dist, args) else {
            self.diags.push(
                Diagnostic::error(
                    codes::FORM,
                    span,
                    format!(
                        "unknown initialisation `{dist}` with {} argument(s)",
                        args.len()
                    ),
                )
                .with_note("use normal(mean, std), uniform(low, high), zeros or ones"),
            );
            return None;
        };
        let seed = self.input.settings.seed ^ fnv(&info.name);
        let tensor = init.draw(info.elem, info.shape.clone(), seed);
        tensor
            .map_err(|e| {
                let budget = self.input.settings.max_memory;
                self.diags.push(super::budget::not_given(info, e, budget))
            })
            .ok()
    }
}

/// A stable hash of a name, so each parameter draws from its own stream.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// The value of an initialiser's argument: numbers and scalar constants (`Dim = 128`, or one
/// set with `--set`) combined with `+ - * / ^` and the built-in scalar functions (as constant
/// folding computes them), so that `W ~ normal(0, 1 / sqrt(Dim))` follows the model's size.
fn constant(e: &Expr, scalars: &HashMap<String, f64>) -> Result<f64, Diagnostic> {
    let not_constant = |span, what: &str| {
        Diagnostic::error(
            codes::FORM,
            span,
            format!("an initialiser's argument must be a constant, but this is {what}"),
        )
        .with_note(
            "use numbers and scalar constants (`Dim = 128`), e.g. `normal(0, 1 / sqrt(Dim))`",
        )
    };
    Ok(match e {
        Expr::Number(k, _) => k.value(),
        Expr::Access(Access {
            name,
            brackets: Brackets::None,
            ..
        }) => match scalars.get(&name.text) {
            Some(v) => *v,
            None => {
                let what = format!("`{}`, which is not a scalar constant", name.text);
                return Err(not_constant(name.span, &what));
            }
        },
        Expr::Neg(x, _) => -constant(x, scalars)?,
        Expr::Binary(op, a, b, _) => op.apply(constant(a, scalars)?, constant(b, scalars)?),
        Expr::Term(factors, _) => {
            let mut v = 1.0;
            for (divide, f) in factors {
                let x = constant(f, scalars)?;
                v = if *divide { v / x } else { v * x };
            }
            v
        }
        Expr::Call { func, args, span } => match crate::functions::builtin(&func.text) {
            Some((f, arities)) if arities.contains(&args.len()) => {
                let xs = args
                    .iter()
                    .map(|a| constant(a, scalars))
                    .collect::<Result<Vec<f64>, Diagnostic>>()?;
                f.apply(&xs)
            }
            _ => return Err(not_constant(*span, &format!("a call of `{}`", func.text))),
        },
        other => {
            let what = "a tensor, a symbol or a comparison";
            return Err(not_constant(other.span(), what));
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::semantics::tests::{checked, error_codes};

    /// An initialiser's arguments may be expressions over scalar constants, so a model's
    /// scale follows its size (`--set Dim=32` changes both).
    #[test]
    fn initialiser_arguments_follow_scalar_constants() {
        let c = checked(
            "Dim = 4\nW ~ uniform(-1 / sqrt(Dim), 2 ^ -2 * 2)\nW : real[3, 4]\nY[i] = W[i, j]\n",
        );
        let w = c.tensor_id("W").unwrap();
        let values = c.data[w].as_ref().unwrap().to_dense_values();
        assert!(values.iter().all(|v| (-0.5..0.5).contains(v)), "{values:?}");
        assert!(values.iter().any(|v| *v < 0.0));
    }

    #[test]
    fn initialiser_arguments_that_are_not_constants_are_errors() {
        let codes = error_codes("N : 3\nX : real[N]\nW ~ normal(0, X)\nV ~ normal(X[0], 1)\nW : real[3]\nV : real[3]\nZ[i] = W[i] X[i] V[i]\n");
        assert_eq!(codes, vec![crate::diagnostics::codes::FORM; 2]);
    }
}
