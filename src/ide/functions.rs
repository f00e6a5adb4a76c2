//! The functions a program may call (§6.3, §6.4, §8), as completion and signature help
//! show them.

/// One function: how it is called and what it does.
#[derive(Clone, Copy, Debug)]
pub struct Function {
    /// Its name.
    pub name: &'static str,
    /// Its parameters, as signature help labels them.
    pub params: &'static [&'static str],
    /// One line on what it computes.
    pub doc: &'static str,
}

impl Function {
    /// `name(a, b)`, as signature help shows it.
    pub fn label(&self) -> String {
        format!("{}({})", self.name, self.params.join(", "))
    }

    /// The function called `name`.
    pub fn named(name: &str) -> Option<&'static Function> {
        FUNCTIONS.iter().find(|f| f.name == name)
    }
}

const fn f(name: &'static str, params: &'static [&'static str], doc: &'static str) -> Function {
    Function { name, params, doc }
}

/// Every built-in function.
pub const FUNCTIONS: &[Function] = &[
    f("step", &["x"], "Heaviside step: 1 where x > 0, else 0."),
    f(
        "sig",
        &["x", "temperature"],
        "Logistic sigmoid 1 / (1 + e^(-x / T)); the temperature is optional.",
    ),
    f(
        "sigmoid",
        &["x", "temperature"],
        "The same as `sig`: logistic sigmoid, optional temperature.",
    ),
    f("tanh", &["x"], "Hyperbolic tangent."),
    f("relu", &["x"], "max(x, 0); NaN stays NaN."),
    f(
        "gelu",
        &["x"],
        "Gaussian error linear unit (the tanh approximation).",
    ),
    f("exp", &["x"], "e^x."),
    f("log", &["x"], "Natural logarithm."),
    f("sqrt", &["x"], "Square root."),
    f("abs", &["x"], "Absolute value."),
    f("sin", &["x"], "Sine."),
    f("cos", &["x"], "Cosine."),
    f("softplus", &["x"], "ln(1 + e^x), computed stably."),
    f("max", &["a", "b"], "The larger of two values."),
    f("min", &["a", "b"], "The smaller of two values."),
    f("band", &["a", "b"], "Bitwise and of two integers."),
    f("bor", &["a", "b"], "Bitwise or of two integers."),
    f("bxor", &["a", "b"], "Bitwise exclusive or of two integers."),
    f("bshl", &["a", "n"], "a shifted left by n bits."),
    f(
        "bshr",
        &["a", "n"],
        "a shifted right by n bits, keeping its sign.",
    ),
    f(
        "softmax",
        &["x"],
        "Softmax over the normalised axis (the index written `p.`).",
    ),
    f(
        "lnorm",
        &["x"],
        "Layer normalisation over the normalised axis.",
    ),
    f(
        "concat",
        &["x"],
        "Flattens the indices absent from the left-hand side into one of its axes.",
    ),
    f(
        "cat",
        &["a", "b", "..."],
        "Concatenates two or more strings into a new symbol.",
    ),
    f("strlen", &["s"], "The length of a string, in characters."),
    f(
        "substr",
        &["s", "start", "count"],
        "`count` characters of s from position `start` (from 0).",
    ),
    f("ord", &["s"], "The code point of a one-character string."),
    f("to_number", &["s"], "The number a string spells."),
    f("to_string", &["n"], "A number written as a string."),
    f(
        "contains",
        &["a", "b"],
        "Whether string a contains string b (Boolean).",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogue_is_the_language_s_functions() {
        for f in FUNCTIONS {
            assert!(crate::functions::is_builtin(f.name), "{}", f.name);
        }
        for name in ["sig", "max", "bshr", "lnorm", "substr", "contains"] {
            assert!(Function::named(name).is_some(), "{name}");
        }
        assert_eq!(FUNCTIONS.len(), 30);
    }
}
