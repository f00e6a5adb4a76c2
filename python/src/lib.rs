//! The `tensorlogic._native` extension: a thin layer that hands Python values to the
//! engine's [`Session`] and its results back. The Python package (`tensorlogic/`) wraps it
//! for the conversions that are easier in Python (torch tensors, pandas frames).

mod ctrl_c;

use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tensor_logic::tensor::{Buf, Dense, Storage};
use tensor_logic::{Cell, Diagnostics, ElemType, RunOptions, Session, Severity, Tensor};

/// A node of a why tree in pre-order: its label, its detail, and its parent's index.
type WhyRow = (String, String, Option<usize>);

create_exception!(
    _native,
    TensorLogicError,
    PyException,
    "A program's errors: `code`, `file`, `line`, `column` and `message` of the first, \
     `diagnostics` for all of them, and the rendered text as the message."
);
create_exception!(
    _native,
    ParseError,
    TensorLogicError,
    "E00xx: the text is not a program."
);
create_exception!(
    _native,
    NameError,
    TensorLogicError,
    "E01xx: unknown names, arities, kinds and forms."
);
create_exception!(
    _native,
    DomainError,
    TensorLogicError,
    "E02xx: domains, extents and ranges."
);
create_exception!(
    _native,
    StratificationError,
    TensorLogicError,
    "E03xx: unsafe rules, recursion through negation, mixed accumulation."
);
create_exception!(
    _native,
    EvaluationError,
    TensorLogicError,
    "E04xx: divergence, unbounded growth, timeouts and interrupts."
);
create_exception!(
    _native,
    DataError,
    TensorLogicError,
    "E05xx: files and their rows."
);
create_exception!(
    _native,
    MemoryLimitError,
    TensorLogicError,
    "E06xx: the memory cap."
);
create_exception!(_native, QueryError, TensorLogicError, "E07xx: queries.");
create_exception!(
    _native,
    TrainingError,
    TensorLogicError,
    "E08xx: training and checkpoints."
);

/// The exception class of a diagnostic code's family.
fn family(code: Option<&str>, message: String) -> PyErr {
    match code.and_then(|c| c.get(..3)) {
        Some("E00") => ParseError::new_err(message),
        Some("E01") => NameError::new_err(message),
        Some("E02") => DomainError::new_err(message),
        Some("E03") => StratificationError::new_err(message),
        Some("E04") => EvaluationError::new_err(message),
        Some("E05") => DataError::new_err(message),
        Some("E06") => MemoryLimitError::new_err(message),
        Some("E07") => QueryError::new_err(message),
        Some("E08") => TrainingError::new_err(message),
        _ => TensorLogicError::new_err(message),
    }
}

/// A loaded program, its bindings and, after `run`, its values.
#[pyclass(module = "tensorlogic._native", unsendable)]
struct Program {
    session: Session,
}

/// The Python exception for a program's diagnostics: the first one's fields as attributes,
/// every one as a dict in `diagnostics`.
fn error(py: Python<'_>, d: &Diagnostics, file: &str, source: &str) -> PyErr {
    let rendered = d.render(file, source);
    let err = family(d.0.first().map(|x| x.code), rendered.clone());
    let value = err.value(py);
    let list = PyList::empty(py);
    for diag in &d.0 {
        let item = PyDict::new(py);
        let _ = item.set_item("code", diag.code);
        let _ = item.set_item("message", &diag.message);
        let _ = item.set_item(
            "severity",
            match diag.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            },
        );
        let (f, line, column) = match &diag.location {
            Some(l) => (Some(l.file.clone()), Some(l.line), Some(l.column)),
            None => (None, None, None),
        };
        let _ = item.set_item("file", f);
        let _ = item.set_item("line", line);
        let _ = item.set_item("column", column);
        let _ = list.append(item);
    }
    let first = d.0.first();
    let _ = value.setattr("diagnostics", list);
    let _ = value.setattr("code", first.map(|x| x.code));
    let _ = value.setattr("message", first.map(|x| x.message.clone()));
    let loc = first.and_then(|x| x.location.clone());
    let _ = value.setattr("file", loc.as_ref().map(|l| l.file.clone()));
    let _ = value.setattr("line", loc.as_ref().map(|l| l.line));
    let _ = value.setattr("column", loc.as_ref().map(|l| l.column));
    let _ = value.setattr("rendered", rendered);
    err
}

/// The name a query's text is shown under in its errors: their places are in the query, not
/// in the program (as `tl query` shows them).
const QUERY: &str = "<query>";

impl Program {
    fn fail(&self, py: Python<'_>, d: &Diagnostics) -> PyErr {
        let (file, source) = self.session.source();
        error(py, d, file, source)
    }
}

/// A thread count given in Python: every core this process may use when `None` (as the CLI's
/// `--threads` default, §14); 0 is an error, as it is for the CLI.
fn thread_count(given: Option<usize>, name: &str) -> PyResult<usize> {
    match given {
        None => Ok(tensor_logic::eval::default_threads()),
        Some(0) => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{name} must be 1 or more (leave it out to use every core)"
        ))),
        Some(n) => Ok(n),
    }
}

fn cell(py: Python<'_>, c: &Cell) -> PyResult<Py<PyAny>> {
    Ok(match c {
        Cell::Int(v) => v.into_pyobject(py)?.into_any().unbind(),
        Cell::Real(v) => v.into_pyobject(py)?.into_any().unbind(),
        Cell::Symbol(s) => s.into_pyobject(py)?.into_any().unbind(),
    })
}

#[pymethods]
impl Program {
    /// Parses `source`; `base_dir` resolves the files it reads and writes.
    #[new]
    #[pyo3(signature = (source, base_dir = ".", name = "<program>", functions = None))]
    fn new(
        py: Python<'_>,
        source: &str,
        base_dir: &str,
        name: &str,
        functions: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Program> {
        let mut session = Session::new();
        register(&mut session, functions)?;
        if let Err(d) = session.load_source(name, source, &PathBuf::from(base_dir)) {
            return Err(error(py, &d, name, source));
        }
        Ok(Program { session })
    }

    /// Reads and parses a program file; its folder resolves the files it names.
    #[staticmethod]
    #[pyo3(signature = (path, functions = None))]
    fn from_file(
        py: Python<'_>,
        path: PathBuf,
        functions: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Program> {
        let mut session = Session::new();
        register(&mut session, functions)?;
        if let Err(d) = session.load_file(&path) {
            let (file, source) = session.source();
            return Err(error(py, &d, file, source));
        }
        Ok(Program { session })
    }

    /// Binds a dense tensor from a NumPy array. A C-contiguous float32 or float64 array is
    /// not copied: the engine reads its memory (until it is bound again), so it must not be
    /// written while a run is in progress. Other arrays are copied, integers and Booleans
    /// as float64.
    fn bind_array(&mut self, name: &str, array: &Bound<'_, PyAny>) -> PyResult<()> {
        let tensor = if let Ok(a) = array.cast::<PyArrayDyn<f32>>() {
            match lend(a)? {
                Some(l) => lent_tensor(ElemType::F32, a.shape(), Dense::lent_f32(l))?,
                None => {
                    let v = a.readonly();
                    let values = v.as_array().iter().map(|&x| f64::from(x)).collect();
                    dense(ElemType::F32, a.shape(), values)?
                }
            }
        } else if let Ok(a) = array.cast::<PyArrayDyn<f64>>() {
            match lend(a)? {
                Some(l) => lent_tensor(ElemType::F64, a.shape(), Dense::lent_f64(l))?,
                None => {
                    let v = a.readonly();
                    dense(
                        ElemType::F64,
                        a.shape(),
                        v.as_array().iter().copied().collect(),
                    )?
                }
            }
        } else {
            let np = array.py().import("numpy")?;
            let as_f64 = np.call_method1("asarray", (array, "float64"))?;
            let a = as_f64.cast::<PyArrayDyn<f64>>()?;
            let v = a.readonly();
            dense(
                ElemType::F64,
                a.shape(),
                v.as_array().iter().copied().collect(),
            )?
        };
        self.session.bind(name, &tensor);
        Ok(())
    }

    /// The element type the program declares tensor `name` with (`real`, `int`, `bool`,
    /// ...), or `None`.
    fn declared_type(&self, name: &str) -> Option<String> {
        self.session.declared_type(name).map(str::to_string)
    }

    /// Binds a relation (or a valued tensor: one more field per row) from rows of fields
    /// already written as text, as a `.tsv` file gives them.
    fn bind_rows(&mut self, name: &str, rows: Vec<Vec<String>>) {
        self.session.bind_rows(name, &rows);
    }

    /// Checks and evaluates the program on `threads` threads, without the GIL; returns the
    /// answers of the program's own queries. On the main thread, Ctrl-C stops the engine
    /// and is then raised as Python would raise it (`KeyboardInterrupt`), see [`ctrl_c`].
    /// `provenance=True` records each derived tuple's round, for `why` (`--provenance`).
    #[pyo3(signature = (threads = None, write_files = true, timeout = None, provenance = false))]
    fn run(
        &mut self,
        py: Python<'_>,
        threads: Option<usize>,
        write_files: bool,
        timeout: Option<f64>,
        provenance: bool,
    ) -> PyResult<Vec<String>> {
        let threads = thread_count(threads, "threads")?;
        let watch = ctrl_c::Watch::start();
        let options = RunOptions {
            threads,
            write_files,
            timeout: timeout.map(std::time::Duration::from_secs_f64),
            interrupt: watch.as_ref().map(ctrl_c::Watch::flag),
            provenance,
            ..RunOptions::default()
        };
        let session = &mut self.session;
        let result = py.detach(|| session.run(&options));
        drop(watch);
        py.check_signals()?;
        result.map_err(|d| self.fail(py, &d))
    }

    /// Evaluates (without the GIL) and keeps the values up to date for `insert`, `remove`
    /// and `commit`: on the standard engine with `workers` threads, or with
    /// `engine="differential"` in a dataflow of `workers` workers. Returns the answers of
    /// the program's own queries.
    #[pyo3(signature = (workers = None, write_files = true, engine = "standard"))]
    fn run_incremental(
        &mut self,
        py: Python<'_>,
        workers: Option<usize>,
        write_files: bool,
        engine: &str,
    ) -> PyResult<Vec<String>> {
        let workers = thread_count(workers, "workers")?;
        let options = RunOptions {
            threads: workers,
            write_files,
            ..RunOptions::default()
        };
        let cluster = match engine {
            "standard" => None,
            "differential" => Some(tensor_logic::eval::Cluster {
                workers,
                processes: None,
            }),
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "engine must be \"standard\" or \"differential\", not {other:?}"
                )))
            }
        };
        let session = &mut self.session;
        let result = py.detach(|| match &cluster {
            Some(cluster) => session.run_incremental_on(&options, cluster),
            None => session.run_incremental(&options),
        });
        result.map_err(|d| self.fail(py, &d))
    }

    /// The last commit's facts that changed nothing (`-Edge(9, 9)` removed while it did not
    /// hold, `+Edge(1, 2)` inserted while it held).
    fn no_ops(&self) -> Vec<String> {
        self.session.no_ops().to_vec()
    }

    /// Stages facts of relation `name` (rows of fields as text) to insert at the next
    /// commit.
    fn insert(&mut self, py: Python<'_>, name: &str, rows: Vec<Vec<String>>) -> PyResult<()> {
        let staged = self.session.insert(name, &rows);
        staged.map_err(|d| self.fail(py, &d))
    }

    /// Stages facts of relation `name` to remove at the next commit.
    fn remove(&mut self, py: Python<'_>, name: &str, rows: Vec<Vec<String>>) -> PyResult<()> {
        let staged = self.session.remove(name, &rows);
        staged.map_err(|d| self.fail(py, &d))
    }

    /// Applies the staged facts (without the GIL); returns, per derived tensor that changed,
    /// the rows added and removed, as `rows` gives them.
    fn commit<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let session = &mut self.session;
        let changes = py.detach(|| session.commit());
        let changes = changes.map_err(|d| self.fail(py, &d))?;
        let out = PyDict::new(py);
        for c in &changes {
            let entry = PyDict::new(py);
            entry.set_item("added", to_python(py, &c.added)?)?;
            entry.set_item("removed", to_python(py, &c.removed)?)?;
            out.set_item(&c.name, entry)?;
        }
        Ok(out)
    }

    /// A tensor's values after a run as a NumPy array of its storage type: float32 for
    /// `real` tensors by default, float64 for `f64` and Boolean ones, int64 for `int` ones
    /// (exact past 2⁵³). A dense f32 or f64 tensor is viewed without a copy (read-only);
    /// others are copied.
    fn array<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let Some(t) = self.session.tensor(name) else {
            return Err(pyo3::exceptions::PyKeyError::new_err(format!(
                "no tensor `{name}` after a run"
            )));
        };
        let shape = t.shape.clone();
        // A dense f32 or f64 result is shared, not copied: the array views the engine's
        // buffer, which `Shared` keeps alive, read-only since the program owns it.
        let shared = match &t.storage {
            Storage::Dense(Dense::F32(v)) => Some(Shared(Buffer::F32(Arc::clone(v)))),
            Storage::Dense(Dense::F64(v)) => Some(Shared(Buffer::F64(Arc::clone(v)))),
            _ => None,
        };
        let out = match shared {
            Some(buffer) => {
                let owner = Bound::new(py, buffer)?;
                let array = match &owner.get().0 {
                    Buffer::F32(v) => view(&owner, &v[..], &shape)?,
                    Buffer::F64(v) => view(&owner, &v[..], &shape)?,
                };
                array.call_method1("setflags", (false,))?;
                array
            }
            None if t.elem == ElemType::Int => numpy::PyArray1::from_vec(py, t.to_dense_ints())
                .reshape(shape)?
                .into_any(),
            None => {
                let values = t.to_dense_values();
                if t.elem == ElemType::F32 {
                    let v: Vec<f32> = values.iter().map(|&x| x as f32).collect();
                    numpy::PyArray1::from_vec(py, v).reshape(shape)?.into_any()
                } else {
                    numpy::PyArray1::from_vec(py, values)
                        .reshape(shape)?
                        .into_any()
                }
            }
        };
        Ok(out)
    }

    /// A tensor's defined elements after a run as tuples of Python values (symbols as
    /// `str`, integers as `int`, reals as `float`), ending with the value unless the
    /// tensor is a relation.
    fn rows<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let rows = self.session.rows(name).map_err(|d| self.fail(py, &d))?;
        to_python(py, &rows)
    }

    /// The rows of a query (`Ancestor(Alice, x)`) after a run, as [`Program::rows`].
    fn query_rows<'py>(&self, py: Python<'py>, text: &str) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let rows = self
            .session
            .query_rows(text)
            .map_err(|d| error(py, &d.located(QUERY, text), QUERY, text))?;
        to_python(py, &rows)
    }

    /// The answers to a query as the CLI prints them.
    fn query_lines(&self, py: Python<'_>, text: &str) -> PyResult<Vec<String>> {
        let answers = self.session.query(text);
        answers.map_err(|d| error(py, &d.located(QUERY, text), QUERY, text))
    }

    /// Why a fact holds or an element has its value, after a run: the tree as text, and its
    /// nodes in pre-order as (label, detail, parent's place).
    #[pyo3(signature = (text, top, depth, not_))]
    fn why(
        &self,
        py: Python<'_>,
        text: &str,
        top: usize,
        depth: usize,
        not_: bool,
    ) -> PyResult<(String, Vec<WhyRow>)> {
        let options = tensor_logic::why::WhyOptions {
            top,
            depth,
            not: not_,
        };
        match self.session.why(text, &options) {
            Ok(tree) => Ok((tree.text(), tree.flatten())),
            Err(d) => Err(error(py, &d, QUERY, text)),
        }
    }

    /// The plan `tl explain` prints, checking the program first if it has not run.
    fn explain(&mut self, py: Python<'_>) -> PyResult<String> {
        if self.session.explain().is_none() {
            let settings = tensor_logic::Settings::default();
            if let Err(d) = self.session.check(&settings) {
                return Err(self.fail(py, &d));
            }
        }
        Ok(self.session.explain().unwrap_or_default())
    }

    /// Trains the program's parameters as `tl train` does; `callback(event)` receives a
    /// dict per step (`kind="step"`, `step`, `total`, `epoch`, `loss`, `lr`), per epoch
    /// (`kind="epoch"`, `epoch`, `metrics`) and for the backward routes taken (`kind="routes"`,
    /// `step`, `log`, `declined`), and stops training by returning `False`.
    #[pyo3(signature = (loss = "Loss", optimizer = "adam", lr = 1e-3, epochs = 1, steps = None,
        batch = None, shuffle = false, seed = 0, freeze = Vec::new(), eval = Vec::new(),
        save = None, save_every = None, momentum = 0.0, weight_decay = 0.0, clip = None,
        threads = None, callback = None))]
    #[allow(clippy::too_many_arguments)]
    fn train<'py>(
        &mut self,
        py: Python<'py>,
        loss: &str,
        optimizer: &str,
        lr: f64,
        epochs: u64,
        steps: Option<u64>,
        batch: Option<(String, usize)>,
        shuffle: bool,
        seed: u64,
        freeze: Vec<String>,
        eval: Vec<String>,
        save: Option<PathBuf>,
        save_every: Option<u64>,
        momentum: f64,
        weight_decay: f64,
        clip: Option<f64>,
        threads: Option<usize>,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let threads = thread_count(threads, "threads")?;
        use tensor_logic::learn::optim;
        use tensor_logic::learn::train::{Event, TrainOptions};
        let kind = match optimizer {
            "sgd" => optim::Kind::Sgd,
            "adam" => optim::Kind::Adam,
            "adamw" => optim::Kind::AdamW,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown optimizer `{other}`: use \"sgd\", \"adam\" or \"adamw\""
                )))
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let options = TrainOptions {
            loss: loss.to_string(),
            optimizer: optim::Config {
                kind,
                lr,
                momentum,
                weight_decay,
                clip,
                ..optim::Config::default()
            },
            epochs,
            steps,
            batch,
            shuffle,
            freeze,
            seed,
            save,
            save_every,
            eval,
            stop: Some(Arc::clone(&stop)),
            ..TrainOptions::default()
        };
        let run = RunOptions {
            settings: tensor_logic::Settings {
                seed,
                ..tensor_logic::Settings::default()
            },
            threads,
            ..RunOptions::default()
        };
        let mut failure: Option<PyErr> = None;
        let mut report = |event: Event| {
            if failure.is_some() {
                return;
            }
            let d = PyDict::new(py);
            let filled = match &event {
                Event::Step {
                    step,
                    total,
                    epoch,
                    loss,
                    lr,
                    ..
                } => d
                    .set_item("kind", "step")
                    .and(d.set_item("step", step))
                    .and(d.set_item("total", total))
                    .and(d.set_item("epoch", epoch))
                    .and(d.set_item("loss", loss))
                    .and(d.set_item("lr", lr)),
                Event::Epoch { epoch, metrics } => {
                    let m = PyDict::new(py);
                    let filled = metrics.iter().try_for_each(|(k, v)| m.set_item(k, v));
                    filled
                        .and(d.set_item("kind", "epoch"))
                        .and(d.set_item("epoch", epoch))
                        .and(d.set_item("metrics", m))
                }
                Event::Routes {
                    step,
                    log,
                    declined,
                } => d
                    .set_item("kind", "routes")
                    .and(d.set_item("step", step))
                    .and(d.set_item("log", log))
                    .and(d.set_item("declined", declined)),
                Event::Saved { path, step } => d
                    .set_item("kind", "saved")
                    .and(d.set_item("path", path.display().to_string()))
                    .and(d.set_item("step", step)),
            };
            let outcome = filled
                .and_then(|_| py.check_signals())
                .and_then(|_| match &callback {
                    Some(f) => f.call1(py, (d,)).map(Some),
                    None => Ok(None),
                });
            match outcome {
                Ok(Some(r)) if r.bind(py).is(&*pyo3::types::PyBool::new(py, false)) => {
                    stop.store(true, Ordering::SeqCst)
                }
                Ok(_) => {}
                Err(e) => {
                    failure = Some(e);
                    stop.store(true, Ordering::SeqCst);
                }
            }
        };
        let trained = self.session.train(&run, &options, &mut report);
        if let Some(e) = failure {
            return Err(e);
        }
        let trained = trained.map_err(|d| self.fail(py, &d))?;
        let out = PyDict::new(py);
        out.set_item("losses", trained.losses)?;
        out.set_item("step", trained.step)?;
        Ok(out)
    }

    /// Writes the parameters (trained ones after `train`) to a `.safetensors` checkpoint.
    fn save(&mut self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.session
            .save_parameters(&path)
            .map_err(|d| self.fail(py, &d))
    }

    /// Takes parameter values from a checkpoint for the next run or training.
    fn load(&mut self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.session
            .load_parameters(&path)
            .map(|_| ())
            .map_err(|d| self.fail(py, &d))
    }

    /// Compares gradients with finite differences (`tl train --check-grad`): per parameter,
    /// a dict of `name`, `checked`, `worst` (relative error) and `largest`.
    #[pyo3(signature = (loss = "Loss", freeze = Vec::new(), per_param = 64))]
    fn check_gradients<'py>(
        &mut self,
        py: Python<'py>,
        loss: &str,
        freeze: Vec<String>,
        per_param: usize,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let checks = self
            .session
            .check_gradients(&RunOptions::default(), loss, &freeze, per_param)
            .map_err(|d| self.fail(py, &d))?;
        checks
            .iter()
            .map(|c| {
                let d = PyDict::new(py);
                d.set_item("name", &c.name)?;
                d.set_item("checked", c.checked)?;
                d.set_item("worst", c.worst)?;
                d.set_item("largest", c.largest)?;
                Ok(d)
            })
            .collect()
    }

    /// A tensor's kind after a check or a run: `"bool"`, `"int"` or `"real"`.
    fn kind(&self, name: &str) -> PyResult<&'static str> {
        let checked = self.session.checked();
        let info = checked
            .and_then(|c| c.tensor_id(name).map(|t| &c.tensors[t]))
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(format!("no tensor `{name}`")))?;
        Ok(match info.kind {
            tensor_logic::semantics::Kind::Bool => "bool",
            tensor_logic::semantics::Kind::Int => "int",
            tensor_logic::semantics::Kind::Real => "real",
        })
    }

    /// The names of the program's tensors, after a check or a run.
    fn names(&self) -> Vec<String> {
        self.session
            .checked()
            .map(|c| {
                c.tensors
                    .iter()
                    .filter(|t| !t.name.starts_with('#'))
                    .map(|t| t.name.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A NumPy array's memory lent to the engine, which reads it in place.
struct Borrowed<T: numpy::Element> {
    /// Keeps the array, hence its memory, alive.
    _array: Py<PyArrayDyn<T>>,
    data: *const T,
    len: usize,
}

// SAFETY: the pointer is into memory the held array owns; it is only ever read, from any
// thread, and the array cannot be resized or freed while it is held.
unsafe impl<T: numpy::Element> Send for Borrowed<T> {}
// SAFETY: as for `Send`: shared reads only.
unsafe impl<T: numpy::Element> Sync for Borrowed<T> {}

impl<T: numpy::Element> AsRef<[T]> for Borrowed<T> {
    fn as_ref(&self) -> &[T] {
        // SAFETY: `data` points at `len` initialised, aligned elements of the held,
        // C-contiguous array (checked in `lend`), alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

/// `a`'s memory to lend to the engine, when it can be read in place: C-contiguous,
/// aligned, not empty.
fn lend<T: numpy::Element + Send + Sync + 'static>(
    a: &Bound<'_, PyArrayDyn<T>>,
) -> PyResult<Option<Arc<dyn AsRef<[T]> + Send + Sync>>> {
    let aligned: bool = a.getattr("flags")?.getattr("aligned")?.extract()?;
    if !a.is_c_contiguous() || !aligned || a.len() == 0 {
        return Ok(None);
    }
    let borrowed = Borrowed {
        _array: a.clone().unbind(),
        data: a.data() as *const T,
        len: a.len(),
    };
    Ok(Some(Arc::new(borrowed)))
}

fn lent_tensor(elem: ElemType, shape: &[usize], storage: Dense) -> PyResult<Tensor> {
    Ok(Tensor {
        elem,
        shape: shape.to_vec(),
        storage: Storage::Dense(storage),
    })
}

fn dense(elem: ElemType, shape: &[usize], values: Vec<f64>) -> PyResult<Tensor> {
    Tensor::dense(elem, shape.to_vec(), values).map_err(pyo3::exceptions::PyValueError::new_err)
}

/// An engine buffer that NumPy arrays view, kept alive as their base object.
#[pyclass(module = "tensorlogic._native", frozen)]
struct Shared(Buffer);

/// The buffer of a [`Shared`].
enum Buffer {
    F32(Arc<Buf<f32>>),
    F64(Arc<Buf<f64>>),
}

/// A NumPy array of `shape` over `data`, a buffer that `owner` holds.
fn view<'py, T: numpy::Element>(
    owner: &Bound<'py, Shared>,
    data: &[T],
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let a = ArrayViewD::from_shape(IxDyn(shape), data).map_err(|e| {
        TensorLogicError::new_err(format!("a tensor's buffer does not fit its shape: {e}"))
    })?;
    // SAFETY: `owner` holds the Arc of this buffer, which nothing writes or frees while the
    // array lives: `owner` is its base object.
    Ok(unsafe { PyArrayDyn::borrow_from_array(&a, owner.clone().into_any()) }.into_any())
}

/// Registers Python elementwise functions, `{name: (f, df)}`, before a program that calls
/// them is parsed. Each call takes the GIL, so they are slow; an exception gives NaN.
fn register(session: &mut Session, functions: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
    let Some(functions) = functions else {
        return Ok(());
    };
    for (name, pair) in functions.iter() {
        let name: String = name.extract()?;
        let (f, df): (Py<PyAny>, Py<PyAny>) = pair.extract()?;
        let call = |g: Py<PyAny>| {
            move |x: f64| {
                Python::attach(|py| {
                    g.call1(py, (x,))
                        .and_then(|v| v.extract::<f64>(py))
                        .unwrap_or(f64::NAN)
                })
            }
        };
        session.register_function(&name, call(f), call(df));
    }
    Ok(())
}

/// Rows as Python tuples: the columns, then the value for a tensor that is not a relation.
fn to_python<'py>(
    py: Python<'py>,
    rows: &[tensor_logic::Row],
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    rows.iter()
        .map(|(cells, v)| {
            let mut items = cells
                .iter()
                .map(|c| cell(py, c))
                .collect::<PyResult<Vec<_>>>()?;
            if let Some(v) = v {
                items.push(v.into_pyobject(py)?.into_any().unbind());
            }
            PyTuple::new(py, items)
        })
        .collect()
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Program>()?;
    let py = m.py();
    let main = py.import("threading")?.call_method0("main_thread")?;
    ctrl_c::record_main_thread(main.getattr("ident")?.extract()?);
    m.add("TensorLogicError", py.get_type::<TensorLogicError>())?;
    m.add("ParseError", py.get_type::<ParseError>())?;
    m.add("NameError", py.get_type::<NameError>())?;
    m.add("DomainError", py.get_type::<DomainError>())?;
    m.add("StratificationError", py.get_type::<StratificationError>())?;
    m.add("EvaluationError", py.get_type::<EvaluationError>())?;
    m.add("DataError", py.get_type::<DataError>())?;
    m.add("MemoryLimitError", py.get_type::<MemoryLimitError>())?;
    m.add("QueryError", py.get_type::<QueryError>())?;
    m.add("TrainingError", py.get_type::<TrainingError>())?;
    Ok(())
}
