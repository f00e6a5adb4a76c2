//! Semantic analysis: names, domains, extents, types, safety and strata.
//!
//! Input is a parsed program plus data bound from outside; output is a [`Checked`] program in
//! which every name is resolved and every extent is known, or every error found.

mod bindings;
pub mod budget;
mod constant_like;
mod data;
mod defined_twice;
mod domains;
mod empty_reads;
mod extents;
mod head_links;
mod interval;
pub mod ir;
mod lower;
mod names;
mod offsets;
mod open;
mod params;
mod query;
mod reals;
mod strata;
pub(crate) use strata::{divides_integers, integral};
pub mod strings;
mod values;

use crate::diagnostics::{Diagnostic, Diagnostics, Span};
use crate::io::RawData;
use crate::syntax::ast::Program;
use crate::tensor::ElemType;
pub use ir::*;
pub use query::resolve_query;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
pub use strings::{SiteArg, SiteFn, StringSite, StringTables};

/// Options that change what a program means.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Element type of `real` (f32 by default, §4).
    pub real: ElemType,
    /// Iteration cap for fixpoints and extent growth (§9).
    pub max_iters: usize,
    /// Scalar constants set from outside (`--set N=3`), overriding the program's.
    pub scalars: Vec<(String, f64)>,
    /// Seed of every random initialisation (§12).
    pub seed: u64,
    /// Memory budget of the whole evaluation, in bytes (§15): the program's dense tensors
    /// together, with scratch, and the tuples its relations derive.
    pub max_memory: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            real: ElemType::F32,
            max_iters: 10_000,
            scalars: Vec::new(),
            seed: 0,
            max_memory: crate::io::default_max_memory(),
        }
    }
}

impl Settings {
    /// Rounds of string and value calls (§8) before a recursion through them is E0402: a
    /// tenth of `--max-iters` (1,000 by default). A round evaluates the whole program, whose
    /// chain of created values is one longer each round, so `n` rounds cost about n³; a
    /// tenth recognises a recursion that never ends in under a second, and a program that
    /// really needs more levels raises `--max-iters`.
    pub fn string_rounds(&self) -> usize {
        self.max_iters.div_ceil(10).max(1)
    }
}

/// Everything the checker reads.
pub struct CheckInput<'a> {
    /// The parsed program.
    pub program: &'a Program,
    /// Directory that file paths are relative to.
    pub base_dir: PathBuf,
    /// What the program's files hold, read before checking ([`crate::io::read_program_files`]):
    /// the checker interns and sizes them but does no I/O itself.
    pub files: &'a crate::io::ProgramFiles,
    /// Data bound from memory, by tensor name (interned after the program's own symbols).
    pub bindings: &'a BTreeMap<String, RawData>,
    /// Names of registered user functions.
    pub user_functions: Vec<String>,
    /// Settings.
    pub settings: Settings,
    /// Values of parameters from a checkpoint, replacing their initialisation (§12); each
    /// must have its parameter's shape.
    pub parameters: &'a BTreeMap<String, crate::tensor::Tensor>,
    /// Results of the program's string calls known so far (§8): see [`StringTables`].
    pub strings: &'a StringTables,
}

/// Checks a program, reporting every error found.
pub fn check(input: &CheckInput) -> Result<Checked, Diagnostics> {
    let constants: std::collections::HashSet<String> = input
        .program
        .statements
        .iter()
        .filter_map(|st| match &st.kind {
            crate::syntax::ast::StmtKind::Scalar { name, .. } => Some(name.text.clone()),
            _ => None,
        })
        .chain(input.settings.scalars.iter().map(|(n, _)| n.clone()))
        .collect();
    // Values computed into columns (`reals.rs`) are found by checking: each pass rewrites
    // the ones found so far into value sites, and a pass finds only new ones.
    let mut computed = std::collections::HashSet::new();
    for _ in 0..MAX_COMPUTING_PASSES {
        match check_computing(input, &constants, &computed) {
            Pass::Done(result) => return *result,
            Pass::Compute(spans) => computed.extend(spans),
        }
    }
    Err(Diagnostic::global(
        crate::diagnostics::codes::UNBOUNDED_GROWTH,
        format!(
            "computed values still feed other computed values after {MAX_COMPUTING_PASSES} checks"
        ),
    )
    .into())
}

/// How many times a program is checked again to find the values it computes into columns:
/// one more than the longest chain of such values feeding each other.
const MAX_COMPUTING_PASSES: usize = 32;

/// The outcome of one pass of [`check`].
enum Pass {
    Done(Box<Result<Checked, Diagnostics>>),
    /// These values are computed into columns: rewrite them into value sites.
    Compute(Vec<Span>),
}

fn check_computing(
    input: &CheckInput,
    constants: &std::collections::HashSet<String>,
    computed: &std::collections::HashSet<Span>,
) -> Pass {
    let mut strings = strings::rewrite(input.program, constants, input.strings, computed);
    let (sites, tables, early) =
        strings
            .as_mut()
            .map_or((Vec::new(), Vec::new(), Vec::new()), |r| {
                (
                    std::mem::take(&mut r.sites),
                    std::mem::take(&mut r.tables),
                    std::mem::take(&mut r.diags),
                )
            });
    let program = strings.as_ref().map_or(input.program, |r| &r.program);
    let substituted = bindings::substitute(program, constants);
    let program = substituted.as_ref().unwrap_or(program);
    let rewritten = CheckInput {
        program,
        base_dir: input.base_dir.clone(),
        files: input.files,
        bindings: input.bindings,
        user_functions: input.user_functions.clone(),
        settings: input.settings.clone(),
        parameters: input.parameters,
        strings: input.strings,
    };
    let mut found = offsets::Offsets::default();
    for _ in 0..MAX_OFFSET_CHECKS {
        match check_once(&rewritten, &tables, &found, computed) {
            Attempt::Done(result) => {
                return Pass::Done(Box::new(match *result {
                    Ok(mut checked) if early.is_empty() => {
                        checked.strings = sites;
                        Ok(checked)
                    }
                    Ok(_) => Err(Diagnostics(early)),
                    Err(Diagnostics(later)) => {
                        let mut all = early;
                        all.extend(later);
                        all.sort_by_key(|d| d.span.map(|s| s.start));
                        Err(Diagnostics(all))
                    }
                }))
            }
            Attempt::Lower(below) => {
                for (d, by) in below {
                    found.lower(d, by);
                }
            }
            Attempt::Compute(spans) => return Pass::Compute(spans),
        }
    }
    Pass::Done(Box::new(Err(Diagnostic::global(
        crate::diagnostics::codes::UNBOUNDED_GROWTH,
        format!("the values of an integer column keep falling after {MAX_OFFSET_CHECKS} checks"),
    )
    .with_note("bound the recursion that counts down with a guard (`x > -100`)")
    .into())))
}

/// How many times a program is checked again with lower offsets (each at least doubles
/// how far below 0 a domain reaches, so 2⁶² is reached first).
const MAX_OFFSET_CHECKS: usize = 64;

/// The outcome of one check of a program.
enum Attempt {
    /// Checked, or its errors.
    Done(Box<Result<Checked, Diagnostics>>),
    /// Equations write below these domains' offsets, by these amounts: check again.
    Lower(Vec<(usize, i64)>),
    /// Rules compute these values into columns, which the check did not know of.
    Compute(Vec<Span>),
}

fn check_once(
    input: &CheckInput,
    tables: &[strings::Table],
    found: &offsets::Offsets,
    computed: &std::collections::HashSet<Span>,
) -> Attempt {
    match check_with(input, tables, found, computed) {
        Ok(checked) => Attempt::Done(Box::new(Ok(checked))),
        Err(Retry::Lower(below)) => Attempt::Lower(below),
        Err(Retry::Compute(spans)) => Attempt::Compute(spans),
        Err(Retry::Failed(d)) => Attempt::Done(Box::new(Err(d))),
    }
}

/// Why [`check_with`] did not return a program.
enum Retry {
    Lower(Vec<(usize, i64)>),
    Compute(Vec<Span>),
    Failed(Diagnostics),
}

impl From<Diagnostics> for Retry {
    fn from(d: Diagnostics) -> Retry {
        Retry::Failed(d)
    }
}

fn check_with<'a>(
    input: &'a CheckInput<'a>,
    tables: &'a [strings::Table],
    found: &offsets::Offsets,
    computed: &std::collections::HashSet<Span>,
) -> Result<Checked, Retry> {
    let mut ctx = Ctx::new(input);
    ctx.tables = tables;
    ctx.collect_scalars();
    ctx.collect_definitions();
    ctx.collect_reads();
    ctx.check_kinds();
    ctx.load_files();
    let links = ctx.build_domains();
    ctx.link_heads(links, computed)?;
    ctx.intern();
    ctx.add_value_tensors();
    ctx.find_offsets(found);
    ctx.data_extents();
    let mut equations = ctx.lower_all();
    ctx.read_real_values(&mut equations);
    let kinds = ctx.infer_kinds(&equations);
    ctx.computed_values(&kinds, computed)?;
    let families = ctx.families(&equations);
    ctx.bail()?;
    let strata = ctx.stratify(&equations);
    ctx.check_safety(&equations);
    ctx.bail()?;
    ctx.shift_equations(&mut equations);
    let mut tensors = ctx.tensor_infos(&kinds, &families, &equations);
    ctx.check_dense_offsets(&tensors, &equations);
    let equations = ctx.infer_extents(&mut tensors, equations, &strata);
    if !ctx.below_offsets.is_empty() {
        let below = std::mem::take(&mut ctx.below_offsets);
        let too_far: Vec<Diagnostic> = below
            .iter()
            .filter_map(|&(root, by, span)| ctx.falls_too_far(found, root, by, span))
            .collect();
        if !too_far.is_empty() {
            return Err(Retry::Failed(Diagnostics(too_far)));
        }
        return Err(Retry::Lower(
            below.into_iter().map(|(r, by, _)| (r, by)).collect(),
        ));
    }
    ctx.bail()?;
    let mut has_equations = vec![false; tensors.len()];
    for e in &equations {
        has_equations[e.target] = true;
    }
    let mut data = ctx.materialise_data(&tensors, &has_equations);
    ctx.check_implicit_domains(&tensors);
    let params = ctx.init_params(&tensors, &mut data, &has_equations);
    let outputs = ctx.outputs(&tensors);
    ctx.bail()?;
    let mut warnings = defined_twice::warnings(input.program);
    warnings.extend(empty_reads::warnings(
        input.program,
        &tensors,
        &equations,
        &strata,
    ));
    warnings.extend(constant_like::warnings(&tensors, &ctx.domains, &equations));
    warnings.append(&mut ctx.warnings);
    Ok(Checked {
        tensors,
        domains: ctx.domains,
        equations,
        strata,
        data,
        params,
        outputs,
        scalars: ctx.scalars.into_iter().collect(),
        warnings,
        strings: Vec::new(),
    })
}

/// A named domain declaration.
#[derive(Clone, Debug)]
pub(crate) struct NamedDomain {
    span: Span,
    size: Option<usize>,
    node: usize,
    /// Named only in tensor declarations, never declared itself: data must size it.
    implicit: bool,
}

/// What the checker gathers about one tensor before it is resolved.
#[derive(Clone, Debug)]
pub(crate) struct Draft {
    name: String,
    span: Span,
    arity: Option<(usize, Span)>,
    paren: Option<Span>,
    /// Whether `paren` is a read (not a definition), the likelier mistake in a conflict.
    paren_read: bool,
    real: Option<Span>,
    elem: Option<ElemType>,
    declared: Option<usize>,
    init: Option<usize>,
    equations: Vec<usize>,
    facts: Vec<usize>,
    elements: Vec<usize>,
    sources: Vec<usize>,
    bound: bool,
}

impl Draft {
    fn new(name: &str, span: Span) -> Self {
        Draft {
            name: name.to_string(),
            span,
            arity: None,
            paren: None,
            paren_read: false,
            real: None,
            elem: None,
            declared: None,
            init: None,
            equations: Vec::new(),
            facts: Vec::new(),
            elements: Vec::new(),
            sources: Vec::new(),
            bound: false,
        }
    }

    fn is_defined(&self) -> bool {
        !self.equations.is_empty()
            || !self.facts.is_empty()
            || !self.elements.is_empty()
            || !self.sources.is_empty()
            || self.declared.is_some()
            || self.init.is_some()
            || self.bound
    }

    fn rank(&self) -> usize {
        self.arity.map(|(a, _)| a).unwrap_or(0)
    }

    fn is_bool(&self) -> bool {
        self.paren.is_some()
    }
}

/// Raw data for one tensor from one statement (or from a binding).
#[derive(Clone, Debug)]
pub(crate) struct Source {
    tensor: usize,
    raw: std::sync::Arc<RawData>,
    span: Span,
    file: String,
    /// Columns that hold symbols whatever their text (a string call's table, §8).
    symbolic: Vec<bool>,
}

/// Shared state of the checker's passes.
pub(crate) struct Ctx<'a> {
    program: &'a Program,
    input: &'a CheckInput<'a>,
    diags: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    tensors: Vec<Draft>,
    by_name: HashMap<String, usize>,
    scalars: HashMap<String, f64>,
    named_domains: HashMap<String, NamedDomain>,
    sources: Vec<Source>,
    uf: domains::UnionFind,
    axis_base: Vec<usize>,
    var_nodes: HashMap<(usize, String), usize>,
    domain_of_root: HashMap<usize, DomainId>,
    domains: Vec<Domain>,
    data_shape: Vec<Vec<usize>>,
    placements: Vec<domains::Pending>,
    declared_symbols: HashMap<DomainId, usize>,
    /// The value at position 0 of each integer domain that does not start at 0, by root.
    offsets: HashMap<usize, i64>,
    /// Whether each tensor is indexed by value (`offsets.rs`).
    by_value: Vec<bool>,
    /// Roots whose offset data gives (not only an equation's writes).
    data_offsets: std::collections::HashSet<usize>,
    /// The values data gives each integer domain (`offsets.rs`).
    data_spans: offsets::DataSpans,
    /// The smallest value data gives each axis of each value-indexed tensor.
    data_lows: Vec<Vec<Option<i64>>>,
    /// Integer domains (by root) whose offset an equation wrote below, by how much, and
    /// the equation.
    below_offsets: Vec<(usize, i64, Span)>,
    /// The tables of the program's string calls (§8), read after the bound data.
    tables: &'a [strings::Table],
    /// The values tensor of each domain of reals (`reals.rs`).
    values_tensor: reals::ValueTensors,
}

impl<'a> Ctx<'a> {
    fn new(input: &'a CheckInput<'a>) -> Self {
        Ctx {
            program: input.program,
            input,
            diags: Vec::new(),
            warnings: Vec::new(),
            tensors: Vec::new(),
            by_name: HashMap::new(),
            scalars: HashMap::new(),
            named_domains: HashMap::new(),
            sources: Vec::new(),
            uf: domains::UnionFind::default(),
            axis_base: Vec::new(),
            var_nodes: HashMap::new(),
            domain_of_root: HashMap::new(),
            domains: Vec::new(),
            data_shape: Vec::new(),
            placements: Vec::new(),
            declared_symbols: HashMap::new(),
            offsets: HashMap::new(),
            by_value: Vec::new(),
            data_offsets: Default::default(),
            data_spans: Default::default(),
            data_lows: Vec::new(),
            below_offsets: Vec::new(),
            tables: &[],
            values_tensor: Default::default(),
        }
    }

    fn bail(&mut self) -> Result<(), Diagnostics> {
        if self.diags.is_empty() {
            Ok(())
        } else {
            let mut d = std::mem::take(&mut self.diags);
            d.sort_by(|a, b| {
                let at = |d: &Diagnostic| d.span.map(|s| s.start).unwrap_or(usize::MAX);
                (at(a), a.code).cmp(&(at(b), b.code))
            });
            d.dedup();
            Err(Diagnostics(d))
        }
    }

    fn is_function(&self, name: &str) -> bool {
        crate::functions::is_builtin(name) || self.input.user_functions.iter().any(|f| f == name)
    }

    /// Domain of axis `axis` of tensor `t`.
    fn axis_domain(&self, t: usize, axis: usize) -> DomainId {
        // An access with more indices than the tensor has axes (E0103, reported by its own
        // check) has no domain past the last axis: not another tensor's slot, not a panic.
        if axis >= self.tensors[t].rank() {
            return 0;
        }
        let root = self.uf.root(self.axis_base[t] + axis);
        self.domain_of_root.get(&root).copied().unwrap_or(0)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Parses and checks `src` with default settings.
    fn check_source(src: &str) -> Result<Checked, Diagnostics> {
        let (program, errors) = crate::syntax::parse(src, crate::functions::BUILTINS);
        if !errors.is_empty() {
            return Err(Diagnostics(errors));
        }
        let bindings = BTreeMap::new();
        check(&CheckInput {
            program: &program,
            base_dir: PathBuf::from("."),
            files: &crate::io::ProgramFiles::new(),
            bindings: &bindings,
            user_functions: Vec::new(),
            settings: Settings::default(),
            parameters: &BTreeMap::new(),
            strings: &StringTables::default(),
        })
    }

    /// Parses and checks `src`, panicking with rendered diagnostics on failure.
    pub(crate) fn checked(src: &str) -> Checked {
        check_source(src).unwrap_or_else(|d| panic!("{}", d.render("t.tl", src)))
    }

    /// The codes of the errors `src` produces.
    pub(crate) fn error_codes(src: &str) -> Vec<&'static str> {
        match check_source(src) {
            Ok(_) => Vec::new(),
            Err(d) => d.0.iter().map(|d| d.code).collect(),
        }
    }

    #[test]
    fn declared_integer_domains_joined_by_an_index_are_one_domain() {
        let joined = "N : 6\nD : 6\nZ : real[N, D]\nE : real[N, D]\nC[n, d] = Z[n, e] E[e, d]\n";
        assert_eq!(error_codes(joined), Vec::<&str>::new());
        let clash = joined.replace("D : 6", "D : 5");
        assert_eq!(
            error_codes(&clash),
            vec![crate::diagnostics::codes::EXTENT_MISMATCH]
        );
    }

    #[test]
    fn symbols_are_numbered_per_domain_in_source_order() {
        let c = checked("Parent(Bob, Cid).\nAnc(Ann, Bob).\nAnc(x, y) :- Parent(x, y).\nAnc(x, z) :- Anc(x, y), Parent(y, z).\nKids[x] = Parent(x, y)\n");
        let anc = c.tensor_id("Anc").unwrap();
        let d = &c.domains[c.tensors[anc].domains[0]];
        assert_eq!(d.symbols, vec!["Bob", "Cid", "Ann"]);
        assert_eq!(c.tensors[anc].domains[0], c.tensors[anc].domains[1]);
    }

    #[test]
    fn comparisons_unify_domains_and_place_symbols() {
        let c = checked("P(A). Q(B).\nR(x, y) :- P(x), Q(y), x != y.\nS(x) :- P(x), x == Zed.\n");
        let p = c.tensor_id("P").unwrap();
        let q = c.tensor_id("Q").unwrap();
        assert_eq!(c.tensors[p].domains[0], c.tensors[q].domains[0]);
        assert_eq!(
            c.domains[c.tensors[p].domains[0]].symbols,
            vec!["A", "B", "Zed"]
        );
    }

    #[test]
    fn kinds_follow_the_operands() {
        let c = checked("E(A, B).\nN[x] = E(x, y)\nX = [1, 2]\nY[i] = X[i]\nH(x) :- E(x, y).\n");
        let kind = |n: &str| c.tensors[c.tensor_id(n).unwrap()].kind;
        assert_eq!(kind("N"), Kind::Int);
        assert_eq!(kind("Y"), Kind::Real);
        assert_eq!(kind("H"), Kind::Bool);
    }

    #[test]
    fn strata_are_in_dependency_order_with_recursion_marked() {
        let c = checked(
            "E(A, B).\nP(x, y) :- E(x, y).\nP(x, z) :- P(x, y), E(y, z).\nC[x] = P(x, y)\n",
        );
        let names: Vec<(Vec<String>, bool)> = c
            .strata
            .iter()
            .map(|s| {
                (
                    s.tensors
                        .iter()
                        .map(|&t| c.tensors[t].name.clone())
                        .collect(),
                    s.recursive,
                )
            })
            .collect();
        let pos = |n: &str| {
            names
                .iter()
                .position(|(ts, _)| ts.contains(&n.to_string()))
                .unwrap()
        };
        assert!(pos("E") < pos("P") && pos("P") < pos("C"));
        assert!(names[pos("P")].1 && !names[pos("C")].1);
    }

    #[test]
    fn guards_keep_writes_off_negative_positions() {
        // Over a column a dense tensor indexes, offsets count from the lowest value.
        let dense = "W = [1, 2, 3]\nS = P(x, y) W[y]\n";
        let guarded = format!("E(0, 1). E(1, 2).\nP(x, y - 1) :- E(x, y), y > 0.\n{dense}");
        assert_eq!(error_codes(&guarded), Vec::<&str>::new());
        let c = checked(&guarded);
        assert_eq!(c.tensors[c.tensor_id("P").unwrap()].shape[1], 2);
        // `E` holds no `y` below 1, so `y - 1` is never negative.
        let unguarded = checked(&guarded.replace(", y > 0", ""));
        let p = &unguarded.tensors[unguarded.tensor_id("P").unwrap()];
        assert_eq!((p.offsets[1], p.shape[1]), (0, 2));
        let below = checked(&guarded.replace("y - 1) :- E(x, y), y > 0", "y - 2) :- E(x, y)"));
        let p = &below.tensors[below.tensor_id("P").unwrap()];
        assert_eq!(
            (p.offsets[1], p.shape[1]),
            (-1, 2),
            "a relation's column holds the value -1"
        );
        // An open column (§8) holds any value: no offset, no extent.
        let open = checked("E(0, 1). E(1, 2).\nP(x, y - 1) :- E(x, y).\n");
        let p = &open.tensors[open.tensor_id("P").unwrap()];
        assert_eq!(p.offsets, vec![0, 0]);
        assert_eq!(p.shape, vec![crate::tensor::MAX_EXTENT; 2]);
        assert_eq!(
            error_codes("W = [1, 2]\nY[i - 1] = W[i]\n"),
            vec![crate::diagnostics::codes::OUT_OF_DOMAIN],
            "a dense real tensor still counts from 0"
        );
    }

    #[test]
    fn errors_of_every_pass_are_collected() {
        let codes = error_codes("A = [1]\nB[i] = Foo[i]\nC[i, j] = A[i, j]\nX(0)\nX = [2]\n");
        assert!(
            codes.contains(&"E0101") && codes.contains(&"E0103") && codes.contains(&"E0104"),
            "{codes:?}"
        );
    }
}
