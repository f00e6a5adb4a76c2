//! The library API (§16): parse a program, bind tensors from memory, register functions,
//! run, read tensors back and answer queries. The `tl` CLI is a thin layer over this.

use crate::diagnostics::{codes, Diagnostic, Diagnostics};
use crate::eval::{Engine, EvalOptions, Standard};
use crate::functions::UserFunction;
use crate::io::{write_files, RawData, Table, WriteRequest};
use crate::output;
use crate::semantics::{self, CheckInput, Checked, Output, Settings};
use crate::syntax::{self, ast::Program};
use crate::tensor::Tensor;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod change;
mod grow;
mod incremental;
mod overlay;
pub use change::Change;
pub use incremental::Changes;

/// Options for a run: meaning ([`Settings`]) and evaluation ([`EvalOptions`]).
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// What the program means (precision, `--set`, iteration cap, memory cap, seed).
    pub settings: Settings,
    /// Convergence tolerance for real recursion (§9); 1e-6 when `None`.
    pub tol: Option<f64>,
    /// Whether to write the program's output files (§11).
    pub write_files: bool,
    /// Worker threads (0 or 1: one); results are identical for every count. Default: every
    /// core this process may use ([`crate::eval::default_threads`], §14).
    pub threads: usize,
    /// Longest an evaluation may run (`--timeout`); it then ends with E0403.
    pub timeout: Option<std::time::Duration>,
    /// Set it (from a Ctrl-C handler) to end an evaluation with E0403.
    pub interrupt: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Record each derived tuple's round (`--provenance`), so that `why` walks down the
    /// rounds to a derivation of minimal height: 4 bytes per tuple of a relation the
    /// joins derive.
    pub provenance: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            settings: Settings::default(),
            tol: None,
            write_files: false,
            threads: crate::eval::default_threads(),
            timeout: None,
            interrupt: None,
            provenance: false,
        }
    }
}

/// A program being worked with: its source, bound data, registered functions and, after a
/// run, its values.
#[derive(Default)]
pub struct Session {
    file_name: String,
    source: String,
    base_dir: PathBuf,
    program: Program,
    bindings: BTreeMap<String, RawData>,
    /// Dense tensors bound from memory, as given: a check reads them through `bindings`,
    /// and the checked program then holds these buffers themselves where it can.
    tensors: BTreeMap<String, Tensor>,
    parameters: BTreeMap<String, Tensor>,
    functions: BTreeMap<String, UserFunction>,
    checked: Option<Checked>,
    plan: Option<crate::plan::Plan>,
    values: Option<Vec<Tensor>>,
    /// Each derived tuple's round in the last run, where it recorded them
    /// (`RunOptions::provenance`); cleared whenever the values change otherwise.
    rounds: Option<crate::eval::Rounds>,
    log: Vec<crate::eval::Decision>,
    /// Why the last load failed: checking and running then report it rather than running
    /// what parsed of the program.
    load_errors: Option<Diagnostics>,
    /// The settings of the last check, and whether anything but new values for its dense
    /// real tensors has changed since (then the next run checks again).
    checked_with: Option<Settings>,
    stale: bool,
    /// Dense real tensors given new values of the same shape since the last check: the
    /// next run puts them into the checked program and re-uses its plan.
    rebound: Vec<(usize, Tensor)>,
    /// Incremental mode: the live dataflow, and facts staged for the next commit.
    live: Option<incremental::Live>,
    staged: incremental::Staged,
    /// The last commit's facts that changed nothing ([`Session::no_ops`]).
    no_ops: Vec<String>,
    overlay: overlay::Overlay,
}

impl Session {
    /// An empty session; register functions before loading a program that calls them.
    pub fn new() -> Session {
        Session::default()
    }

    /// Registers an elementwise function `f` with derivative `df` under `name`.
    pub fn register_function(
        &mut self,
        name: &str,
        f: impl Fn(f64) -> f64 + Send + Sync + 'static,
        df: impl Fn(f64) -> f64 + Send + Sync + 'static,
    ) {
        self.stale = true;
        self.functions.insert(
            name.to_string(),
            UserFunction {
                f: Arc::new(f),
                df: Arc::new(df),
            },
        );
    }

    /// Parses a program given as text; `file_name` is used in diagnostics and `base_dir`
    /// resolves its file paths.
    pub fn load_source(
        &mut self,
        file_name: &str,
        source: &str,
        base_dir: &Path,
    ) -> Result<(), Diagnostics> {
        self.file_name = file_name.to_string();
        self.source = source.to_string();
        self.base_dir = base_dir.to_path_buf();
        self.checked = None;
        self.plan = None;
        self.values = None;
        self.rounds = None;
        self.live = None;
        self.staged.clear();
        self.overlay = overlay::Overlay::default();
        let funcs: Vec<String> = self.functions.keys().cloned().collect();
        let is_function = |n: &str| crate::functions::is_builtin(n) || funcs.iter().any(|f| f == n);
        let functions = syntax::Functions {
            call: &is_function,
            in_index: &crate::functions::in_index,
        };
        let (program, errors) = syntax::parse(source, functions);
        self.program = program;
        self.load_errors = None;
        if errors.is_empty() {
            return Ok(());
        }
        let d = Diagnostics(errors).located(file_name, source);
        self.load_errors = Some(d.clone());
        Err(d)
    }

    /// Reads and parses a program file.
    pub fn load_file(&mut self, path: &Path) -> Result<(), Diagnostics> {
        let source = match std::fs::read_to_string(path) {
            Ok(source) => source,
            Err(e) => {
                let d = Diagnostics::from(Diagnostic::global(
                    codes::FILE,
                    format!("cannot read `{}`: {e}", path.display()),
                ));
                self.program = Program::default();
                self.checked = None;
                self.plan = None;
                self.values = None;
                self.rounds = None;
                self.load_errors = Some(d.clone());
                return Err(d);
            }
        };
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let name = path.display().to_string();
        self.load_source(&name, &source, &base)
    }

    /// The loaded source and its file name, for rendering diagnostics.
    pub fn source(&self) -> (&str, &str) {
        (&self.file_name, &self.source)
    }

    /// Binds a tensor from memory, as if it were read from a file (positions index symbols in
    /// interning order for symbolic axes).
    pub fn bind(&mut self, name: &str, tensor: &Tensor) {
        match self.same_form(name, tensor) {
            Some(t) => {
                self.rebound.retain(|(x, _)| *x != t);
                self.rebound.push((t, tensor.clone()));
            }
            None => self.stale = true,
        }
        // Kept as it is (a lent buffer stays lent); a check shares it with its data.
        self.tensors.insert(name.to_string(), tensor.clone());
    }

    /// Binds a relation (or a valued tensor, with a final value field) from rows of fields, as
    /// if read from a `.tsv` file.
    pub fn bind_rows(&mut self, name: &str, rows: &[Vec<String>]) {
        self.stale = true;
        let mut table = Table::default();
        for (i, r) in rows.iter().enumerate() {
            table.push(i + 1, r);
        }
        self.tensors.remove(name);
        self.bindings
            .insert(name.to_string(), RawData::Table(table));
    }

    fn same_form(&self, name: &str, tensor: &Tensor) -> Option<usize> {
        same_form(self.checked.as_ref()?, name, tensor)
    }

    /// Takes parameter values from a checkpoint (§12): entries named like a parameter replace
    /// its initialisation at the next check; a shape that does not fit is an error then.
    /// Returns the checkpoint, whose optimizer state a resumed training run continues.
    pub fn load_parameters(
        &mut self,
        path: &Path,
    ) -> Result<crate::learn::checkpoint::Checkpoint, Diagnostics> {
        let c = crate::learn::checkpoint::load(path)
            .map_err(|e| Diagnostics::from(Diagnostic::global(codes::CHECKPOINT, e)))?;
        self.parameters = c.params.clone();
        self.checked = None;
        Ok(c)
    }

    /// Checks the program and trains its parameters (`tl train`); afterwards the session's
    /// parameters are the trained ones, so [`Session::run`] evaluates the trained model.
    pub fn train(
        &mut self,
        options: &RunOptions,
        train: &crate::learn::train::TrainOptions,
        report: &mut dyn FnMut(crate::learn::train::Event),
    ) -> Result<crate::learn::train::Trained, Diagnostics> {
        self.check_for(options)?;
        let checked = self.checked.as_ref().ok_or_else(not_checked)?;
        let eval = eval_options(options, &self.functions);
        let trained = crate::learn::train::train(checked, train, &eval, report)
            .map_err(|d| d.located(&self.file_name, &self.source))?;
        self.parameters = trained.params.clone();
        self.checked = None;
        Ok(trained)
    }

    /// Writes the program's parameters to a `.safetensors` checkpoint: the trained values
    /// after [`Session::train`], otherwise their initial ones (checking the program first).
    pub fn save_parameters(&mut self, path: &Path) -> Result<(), Diagnostics> {
        if self.checked.is_none() {
            self.check(&Settings::default())?;
        }
        let checked = self.checked.as_ref().ok_or_else(not_checked)?;
        let mut c = crate::learn::checkpoint::Checkpoint::default();
        for &t in &checked.params {
            let name = &checked.tensors[t].name;
            let value = self
                .parameters
                .get(name)
                .cloned()
                .or_else(|| checked.data[t].clone());
            if let Some(v) = value {
                c.params.insert(name.clone(), v);
            }
        }
        crate::learn::checkpoint::save(&c, path)
            .map_err(|e| Diagnostics::from(Diagnostic::global(codes::CHECKPOINT, e)))
    }

    /// Compares the program's gradients with finite differences (`tl train --check-grad`),
    /// evaluating in f64 whatever `--precision` says; up to `per_param` elements each.
    pub fn check_gradients(
        &mut self,
        options: &RunOptions,
        loss: &str,
        freeze: &[String],
        per_param: usize,
    ) -> Result<Vec<crate::learn::gradcheck::ParamCheck>, Diagnostics> {
        let mut settings = options.settings.clone();
        settings.real = crate::tensor::ElemType::F64;
        self.check(&settings)?;
        let checked = self.checked.as_ref().ok_or_else(not_checked)?;
        let loss = crate::learn::loss_tensor(checked, loss)?;
        let params: Vec<usize> = checked
            .params
            .iter()
            .copied()
            .filter(|&t| !freeze.contains(&checked.tensors[t].name))
            .collect();
        let eval = eval_options(options, &self.functions);
        crate::learn::gradcheck::check(checked, &eval, loss, &params, per_param)
    }

    /// Checks the program without evaluating it. A program with string calls (§8) is
    /// evaluated as often as filling their tables takes.
    pub fn check(&mut self, settings: &Settings) -> Result<&Checked, Diagnostics> {
        self.check_for(&RunOptions {
            settings: settings.clone(),
            ..RunOptions::default()
        })
    }

    /// As [`Session::check`], with the run's threads and limits for the evaluations that
    /// fill string tables.
    fn check_for(&mut self, options: &RunOptions) -> Result<&Checked, Diagnostics> {
        if let Some(errors) = &self.load_errors {
            return Err(errors.clone());
        }
        // New values for dense real tensors of the same shape: the checked program and its
        // plan stay as they are (planning depends only on shapes and types).
        let same = self.checked_with.as_ref() == Some(&options.settings);
        if self.checked.is_some() && !self.stale && same {
            let rebound = std::mem::take(&mut self.rebound);
            let checked = self.checked.as_mut().ok_or_else(not_checked)?;
            for (t, tensor) in rebound {
                checked.data[t] = Some(tensor);
            }
            return Ok(checked);
        }
        self.stale = false;
        self.live = None;
        self.rebound.clear();
        self.checked_with = Some(options.settings.clone());
        // A dense bound tensor's buffer is shared, not converted: the check gives it to the
        // tensor as it is when the types agree (a lent buffer stays lent).
        for (name, tensor) in &self.tensors {
            let values = match &tensor.storage {
                crate::tensor::Storage::Dense(d) => d.clone(),
                _ => crate::tensor::Dense::from_f64(tensor.elem, tensor.to_dense_values()),
            };
            let raw = RawData::Dense {
                shape: tensor.shape.clone(),
                values,
                elem: tensor.elem,
            };
            self.bindings.insert(name.clone(), raw);
        }
        let eval = eval_options(options, &self.functions);
        let mut tables = semantics::StringTables::default();
        let mut round = 0;
        let files = crate::io::read_program_files(&self.program, &self.base_dir);
        let mut checked = loop {
            let input = CheckInput {
                program: &self.program,
                base_dir: self.base_dir.clone(),
                files: &files,
                bindings: &self.bindings,
                user_functions: self.functions.keys().cloned().collect(),
                settings: options.settings.clone(),
                parameters: &self.parameters,
                strings: &tables,
            };
            let located = |d: Diagnostics| d.located(&self.file_name, &self.source);
            let checked = semantics::check(&input).map_err(located)?;
            if crate::string_rounds::fill(&checked, &eval, &mut tables).map_err(located)? == 0 {
                break checked;
            }
            let budget = options.settings.max_memory;
            if let Some(d) = crate::string_rounds::over_budget(&checked, &tables, budget) {
                return Err(located(d));
            }
            round += 1;
            if round >= options.settings.string_rounds() {
                return Err(located(crate::string_rounds::unsettled(&checked, round)));
            }
        };
        checked.warnings = std::mem::take(&mut checked.warnings)
            .into_iter()
            .map(|w| w.located(&self.file_name, &self.source))
            .collect();
        self.plan = Some(crate::plan::plan(&checked));
        Ok(self.checked.insert(checked))
    }

    /// The element type that a declaration of the loaded program gives tensor `name`
    /// (`real`, `int`, `bool`, `f16`, …), if one does: how bound data is to be read (an
    /// array of numbers for a declared dense tensor, rows for a relation).
    pub fn declared_type(&self, name: &str) -> Option<&str> {
        use crate::syntax::ast::StmtKind;
        self.program
            .statements
            .iter()
            .find_map(|st| match &st.kind {
                StmtKind::Declaration { name: n, ty, .. } if n.text == name => {
                    Some(ty.text.as_str())
                }
                _ => None,
            })
    }

    /// What the last check found suspicious but not wrong (`W` codes), with their locations.
    pub fn warnings(&self) -> &[Diagnostic] {
        self.checked.as_ref().map_or(&[], |c| &c.warnings)
    }

    /// The plan of the last check: what evaluation executes and `tl explain` prints.
    pub fn plan(&self) -> Option<&crate::plan::Plan> {
        self.plan.as_ref()
    }

    /// How each stratum of the last check will be evaluated (`tl explain`): the plan that
    /// runs, as text.
    pub fn explain(&self) -> Option<String> {
        self.explain_at(crate::eval::default_threads())
    }

    /// [`Session::explain`], saying where each dense equation runs with `threads` threads.
    pub fn explain_at(&self, threads: usize) -> Option<String> {
        let (checked, plan) = (self.checked.as_ref()?, self.plan.as_ref()?);
        Some(crate::explain::explain(
            checked,
            plan,
            &self.source,
            threads,
        ))
    }

    /// Every thread split of the engine in one table (`tl explain --schedule`): the work
    /// under which an operation stays on the calling thread and the blocks split work
    /// comes in, each with what set it.
    pub fn schedule_table() -> String {
        crate::explain::schedule()
    }

    /// The backward plan of a training step for the loss `loss` with the parameters but
    /// `freeze` trained (`tl explain --loss`): the route each stratum's adjoints take.
    pub fn explain_backward(&self, loss: &str, freeze: &[String]) -> Result<String, Diagnostics> {
        let (checked, plan) = (
            self.checked.as_ref().ok_or_else(not_checked)?,
            self.plan.as_ref().ok_or_else(not_checked)?,
        );
        let located = |d: Diagnostics| d.located(&self.file_name, &self.source);
        let loss = crate::learn::loss_tensor(checked, loss).map_err(located)?;
        let trainable = crate::learn::train::trainable(checked, freeze).map_err(located)?;
        let b = crate::plan::backward::Backward::new(checked, plan, loss, &trainable);
        let at = (checked, plan, &b);
        Ok(crate::explain_backward::backward(
            at,
            &trainable,
            &self.source,
        ))
    }

    /// The differential dataflow of the last check (`tl explain --engine differential`):
    /// where each stratum runs, the arrangements, and each rule's operators.
    pub fn explain_dataflow(&self) -> Option<String> {
        let (checked, plan) = (self.checked.as_ref()?, self.plan.as_ref()?);
        let flow = crate::plan::dataflow::plan_dataflow(checked, plan);
        Some(crate::explain::explain_dataflow(
            checked,
            &flow,
            &self.source,
        ))
    }

    /// How the last run evaluated each stratum: the kernel that ran, and why where it was
    /// not the planned one (a decline) or ran in a way worth saying.
    pub fn decisions(&self) -> &[crate::eval::Decision] {
        &self.log
    }

    /// The last run's decision log as `tl run --decisions` prints it.
    pub fn decisions_text(&self) -> Option<String> {
        let (checked, plan) = (self.checked.as_ref()?, self.plan.as_ref()?);
        Some(crate::explain::decisions(checked, plan, &self.log))
    }

    /// Checks, evaluates with the standard engine, writes files and answers the program's
    /// queries. Returns the answer lines in source order.
    pub fn run(&mut self, options: &RunOptions) -> Result<Vec<String>, Diagnostics> {
        self.run_with(&Standard, options)
    }

    /// As [`Session::run`], with a chosen engine.
    pub fn run_with(
        &mut self,
        engine: &dyn Engine,
        options: &RunOptions,
    ) -> Result<Vec<String>, Diagnostics> {
        self.check_for(options)?;
        let checked = self
            .checked
            .as_ref()
            .ok_or_else(|| Diagnostics::from(Diagnostic::global(codes::FORM, "no program")))?;
        let plan = self.plan.as_ref().ok_or_else(not_checked)?;
        let eval = eval_options(options, &self.functions);
        let run = engine
            .run(checked, plan, &eval)
            .map_err(|d| d.located(&self.file_name, &self.source))?;
        self.log = run.log;
        self.rounds = eval.provenance.map(|p| p.take());
        self.publish(run.values, options)
    }

    /// Keeps a run's values: answers the program's queries and writes its files (when
    /// `options` ask for them).
    fn publish(
        &mut self,
        values: Vec<Tensor>,
        options: &RunOptions,
    ) -> Result<Vec<String>, Diagnostics> {
        let checked = self.checked.as_ref().ok_or_else(not_checked)?;
        let mut lines = Vec::new();
        let mut writes = Vec::new();
        for out in &checked.outputs {
            match out {
                Output::Query(q) => lines.extend(output::answer(checked, &values, q)),
                Output::Write { path, tensor, span } => writes.push((path.clone(), *tensor, *span)),
            }
        }
        if options.write_files {
            write_outputs(checked, &values, &writes)?;
        }
        self.values = Some(values);
        Ok(lines)
    }

    /// As [`Session::run_with`] for a caller that only wants the answers (`tl run`): when
    /// every output of the program is a query that binds a constant backward chaining can
    /// use (`Samegen(16384, x)?`), each is answered by [`Session::answer`], deriving only
    /// the facts relevant to it; otherwise the whole program runs. After answering by
    /// demand, [`Session::tensor`] reads nothing, as other tensors may be partial.
    pub fn run_for_answers(
        &mut self,
        engine: &dyn Engine,
        options: &RunOptions,
    ) -> Result<Vec<String>, Diagnostics> {
        self.check_for(options)?;
        let checked = self.checked.as_ref().ok_or_else(not_checked)?;
        let queries: Option<Vec<semantics::Query>> = checked
            .outputs
            .iter()
            .map(|out| match out {
                Output::Query(q) => crate::plan::demand::plan_demand(checked, q).map(|_| q.clone()),
                Output::Write { .. } => None,
            })
            .collect();
        let Some(queries) = queries.filter(|q| !q.is_empty()) else {
            return self.run_with(engine, options);
        };
        let mut lines = Vec::new();
        for q in &queries {
            lines.extend(self.answer(engine, options, q)?);
        }
        Ok(lines)
    }

    /// Resolves a query such as `Ancestor(Alice, x)` against the checked program, for
    /// [`Session::answer`]; diagnostics point into the query text.
    pub fn prepare_query(&self, text: &str) -> Result<semantics::Query, Diagnostics> {
        let access = self.parse_query(text)?;
        let checked = self.checked.as_ref().ok_or_else(not_checked)?;
        Ok(semantics::resolve_query(checked, &access)?)
    }

    /// Answers one prepared query, evaluating only what it needs: the strata it reads and,
    /// for a bound query on rules (`Ancestor(Alice, x)`), only the facts relevant to its
    /// constants (§9). Files are not written, and since other tensors may be left partial,
    /// [`Session::tensor`] reads nothing afterwards.
    pub fn answer(
        &mut self,
        engine: &dyn Engine,
        options: &RunOptions,
        query: &semantics::Query,
    ) -> Result<Vec<String>, Diagnostics> {
        self.values = None;
        self.rounds = None;
        let checked = self.checked.as_ref().ok_or_else(not_checked)?;
        let eval = eval_options(options, &self.functions);
        let values = engine.evaluate_for(checked, &eval, query)?;
        Ok(output::answer(checked, &values, query))
    }

    fn parse_query(&self, text: &str) -> Result<crate::syntax::ast::Access, Diagnostic> {
        let is_function =
            |n: &str| crate::functions::is_builtin(n) || self.functions.contains_key(n);
        let functions = syntax::Functions {
            call: &is_function,
            in_index: &crate::functions::in_index,
        };
        syntax::parse_query(text, functions)
    }

    /// Checks and plans the program once, then evaluates it `repeat` times and returns how
    /// long each evaluation took: the engine's time alone, without parsing, checking,
    /// planning, loading files or writing results (`tl bench`).
    pub fn time_evaluation(
        &mut self,
        engine: &dyn Engine,
        options: &RunOptions,
        repeat: usize,
    ) -> Result<Vec<std::time::Duration>, Diagnostics> {
        self.check_for(options)?;
        let checked = self.checked.as_ref().ok_or_else(not_checked)?;
        let eval = eval_options(options, &self.functions);
        let plan = self.plan.as_ref().ok_or_else(not_checked)?;
        let mut times = Vec::with_capacity(repeat);
        for _ in 0..repeat.max(1) {
            // The last run's values are dropped first, as a caller that keeps only the newest
            // would: their memory is then free for this run to reuse.
            self.values = None;
            self.rounds = None;
            let start = std::time::Instant::now();
            let values = engine.evaluate_planned(checked, plan, &eval)?;
            times.push(start.elapsed());
            self.values = Some(values);
        }
        Ok(times)
    }

    /// Evaluates the last run's program again with the reference evaluator and compares
    /// every tensor with the run's values (`tl run --verify`).
    pub fn verify(
        &self,
        options: &RunOptions,
    ) -> Result<Vec<crate::verify::Difference>, Diagnostics> {
        let (Some(checked), Some(values)) = (&self.checked, &self.values) else {
            return Err(
                Diagnostic::global(codes::QUERY, "run the program before verifying it").into(),
            );
        };
        let eval = eval_options(options, &self.functions);
        let reference = crate::eval::Reference.evaluate(checked, &eval)?;
        Ok(match &self.plan {
            Some(plan) => crate::verify::compare_planned(checked, plan, values, &reference),
            None => crate::verify::compare(checked, values, &reference),
        })
    }

    /// The value of a tensor after a run.
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        let id = self.checked.as_ref()?.tensor_id(name)?;
        self.values.as_ref()?.get(id)
    }

    /// The checked program of the last check or run.
    pub fn checked(&self) -> Option<&Checked> {
        self.checked.as_ref()
    }

    /// The defined elements of a tensor after a run, as host values: each tuple of column
    /// values with its element's value (none for a relation's tuples), in index order. A
    /// language binding hands these to its users (symbols as strings, numbers as numbers).
    pub fn rows(&self, name: &str) -> Result<Vec<Row>, Diagnostics> {
        let (checked, values) = self.ran()?;
        let t = checked.tensor_id(name).ok_or_else(|| unknown(name))?;
        Ok(rows_matching(checked, &values[t], t, &[]))
    }

    /// The rows of a query such as `Ancestor(Alice, x)` after a run: the tensor's rows that
    /// match its constants and repeated variables, as [`Session::rows`] gives them.
    pub fn query_rows(&self, text: &str) -> Result<Vec<Row>, Diagnostics> {
        let access = self.parse_query(text)?;
        let (checked, values) = self.ran()?;
        let q = semantics::resolve_query(checked, &access)?;
        if q.pattern.contains(&semantics::QueryIndex::Missing) {
            return Ok(Vec::new());
        }
        Ok(rows_matching(
            checked,
            &values[q.tensor],
            q.tensor,
            &q.pattern,
        ))
    }

    /// Why a fact holds or an element has its value, after a run (`tl why`): the fact's
    /// derivation of minimal height, or the element's largest terms (§ docs/guide.md, "Why").
    /// Diagnostics point into `text`.
    pub fn why(
        &self,
        text: &str,
        options: &crate::why::WhyOptions,
    ) -> Result<crate::why::WhyNode, Diagnostics> {
        let access = self
            .parse_query(text)
            .map_err(|d| d.located("<why>", text))?;
        let (checked, values) = self.ran()?;
        let q = semantics::resolve_query(checked, &access)
            .map_err(|d| Diagnostics::from(d.located("<why>", text)))?;
        let source = (
            self.file_name.as_str(),
            self.source.as_str(),
            self.base_dir.as_path(),
        );
        let evaluated = (values, self.rounds.as_ref());
        crate::why::why(checked, evaluated, &self.program, source, &q, options)
            .map_err(|d| Diagnostics::from(d.located("<why>", text)))
    }

    fn ran(&self) -> Result<(&Checked, &[Tensor]), Diagnostics> {
        match (&self.checked, &self.values) {
            (Some(c), Some(v)) => Ok((c, v)),
            _ => Err(Diagnostic::global(codes::QUERY, "run the program before reading it").into()),
        }
    }

    /// Answers a query such as `Ancestor(Alice, x)` (with or without `?`) after a run; the
    /// answer is the same as forward chaining's (§9).
    pub fn query(&self, text: &str) -> Result<Vec<String>, Diagnostics> {
        let access = self.parse_query(text)?;
        let (Some(checked), Some(values)) = (&self.checked, &self.values) else {
            return Err(
                Diagnostic::global(codes::QUERY, "run the program before querying it").into(),
            );
        };
        let q = semantics::resolve_query(checked, &access)?;
        Ok(output::answer(checked, values, &q))
    }
}

/// One column's value, as a host language holds it.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// A value of an integer column.
    Int(i64),
    /// A value of a real column.
    Real(f64),
    /// A symbol.
    Symbol(String),
}

/// One defined element: its column values, and its value unless it is a relation's tuple.
pub type Row = (Vec<Cell>, Option<f64>);

fn unknown(name: &str) -> Diagnostics {
    Diagnostic::global(codes::UNKNOWN_TENSOR, format!("unknown tensor `{name}`")).into()
}

/// Position `pos` of axis `ax` of tensor `t` as a host value.
fn cell(checked: &Checked, t: usize, ax: usize, pos: usize) -> Cell {
    let dom = &checked.domains[checked.tensors[t].domains[ax]];
    let label = output::label(checked, t, ax, pos, false);
    match (dom.real, dom.symbolic) {
        (true, _) => label
            .parse::<i64>()
            .map_or_else(|_| Cell::Real(label.parse().unwrap_or(f64::NAN)), Cell::Int),
        (false, true) => Cell::Symbol(label),
        (false, false) => label.parse().map_or(Cell::Symbol(label), Cell::Int),
    }
}

/// The rows of tensor `t` whose positions match `pattern` (all when it is empty).
fn rows_matching(
    checked: &Checked,
    tensor: &Tensor,
    t: usize,
    pattern: &[semantics::QueryIndex],
) -> Vec<Row> {
    use semantics::QueryIndex;
    let info = &checked.tensors[t];
    let cell = |ax: usize, pos: usize| cell(checked, t, ax, pos);
    let matches = |idx: &[usize]| {
        pattern.iter().enumerate().all(|(ax, p)| match p {
            QueryIndex::Fixed(f) => idx.get(ax) == Some(f),
            QueryIndex::Var(v) => pattern
                .iter()
                .enumerate()
                .all(|(bx, q)| *q != QueryIndex::Var(*v) || idx.get(bx) == idx.get(ax)),
            QueryIndex::Missing => false,
        })
    };
    let boolean = info.kind == semantics::Kind::Bool;
    let mut entries: Vec<(Vec<usize>, f64)> = tensor
        .entries()
        .into_iter()
        .filter(|(idx, v)| !(boolean && *v == 0.0) && matches(idx))
        .collect();
    output::in_value_order(checked, t, &mut entries, |(idx, _)| idx);
    entries
        .into_iter()
        .map(|(idx, v)| {
            let cells = idx.iter().enumerate().map(|(ax, &p)| cell(ax, p)).collect();
            (cells, (!boolean).then_some(v))
        })
        .collect()
}

/// The id of tensor `name` when `tensor` can replace its data without checking the program
/// again: a dense real tensor of the same shape and storage type, in a program without
/// string calls or computed values (whose tables data feeds).
fn same_form(checked: &Checked, name: &str, tensor: &Tensor) -> Option<usize> {
    let t = checked.tensor_id(name)?;
    let info = &checked.tensors[t];
    let old = checked.data[t].as_ref()?;
    let dense = |x: &Tensor| matches!(x.storage, crate::tensor::Storage::Dense(_));
    let fits = checked.strings.is_empty()
        && info.kind == semantics::Kind::Real
        && dense(old)
        && dense(tensor)
        && old.shape == tensor.shape
        && info.shape == tensor.shape
        && info.elem == tensor.elem;
    fits.then_some(t)
}

fn not_checked() -> Diagnostic {
    Diagnostic::global(codes::QUERY, "check the program before querying it")
}

fn eval_options(options: &RunOptions, functions: &BTreeMap<String, UserFunction>) -> EvalOptions {
    EvalOptions {
        tol: options.tol.unwrap_or(1e-6),
        max_iters: options.settings.max_iters,
        max_memory: options.settings.max_memory,
        functions: functions.clone(),
        threads: options.threads.max(1),
        stop: crate::eval::Stop::new(options.timeout, options.interrupt.clone()),
        provenance: options.provenance.then(crate::eval::Provenance::default),
    }
}

fn write_outputs(
    checked: &Checked,
    values: &[Tensor],
    writes: &[(PathBuf, usize, crate::diagnostics::Span)],
) -> Result<(), Diagnostics> {
    let labels: Vec<Box<dyn Fn(usize, usize) -> String + '_>> = writes
        .iter()
        .map(|&(_, t, _)| {
            Box::new(move |ax: usize, pos: usize| output::label(checked, t, ax, pos, false))
                as Box<dyn Fn(usize, usize) -> String>
        })
        .collect();
    let requests: Vec<WriteRequest> = writes
        .iter()
        .zip(&labels)
        .map(|((path, t, _), label)| WriteRequest {
            path: path.clone(),
            name: checked.tensors[*t].name.clone(),
            tensor: &values[*t],
            boolean: checked.tensors[*t].kind == semantics::Kind::Bool,
            label: label.as_ref(),
        })
        .collect();
    write_files(&requests).map_err(|msg| {
        let span = writes.first().map(|w| w.2).unwrap_or_default();
        Diagnostics::from(Diagnostic::error(codes::FILE, span, msg))
    })
}
