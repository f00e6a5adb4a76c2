//! The `tensorlogic._native` extension: a thin layer that hands Python values to the
//! engine's [`Session`] and its results back. The Python package (`tensorlogic/`) wraps it
//! for the conversions that are easier in Python (torch tensors, pandas frames).

use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tensor_logic::{Cell, Diagnostics, ElemType, RunOptions, Session, Severity, Tensor};

create_exception!(
    _native,
    TensorLogicError,
    PyException,
    "A program's errors: `code`, `file`, `line`, `column` and `message` of the first, \
     `diagnostics` for all of them, and the rendered text as the message."
);

/// A loaded program, its bindings and, after `run`, its values.
#[pyclass(module = "tensorlogic._native", unsendable)]
struct Program {
    session: Session,
    /// Set by a Ctrl-C seen while the engine runs; the engine then stops with E0403.
    interrupt: Arc<AtomicBool>,
}

/// The Python exception for a program's diagnostics: the first one's fields as attributes,
/// every one as a dict in `diagnostics`.
fn error(py: Python<'_>, d: &Diagnostics, file: &str, source: &str) -> PyErr {
    let rendered = d.render(file, source);
    let err = TensorLogicError::new_err(rendered.clone());
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

impl Program {
    fn fail(&self, py: Python<'_>, d: &Diagnostics) -> PyErr {
        let (file, source) = self.session.source();
        error(py, d, file, source)
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
    #[pyo3(signature = (source, base_dir = ".", name = "<program>"))]
    fn new(py: Python<'_>, source: &str, base_dir: &str, name: &str) -> PyResult<Program> {
        let mut session = Session::new();
        if let Err(d) = session.load_source(name, source, &PathBuf::from(base_dir)) {
            return Err(error(py, &d, name, source));
        }
        Ok(Program {
            session,
            interrupt: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Reads and parses a program file; its folder resolves the files it names.
    #[staticmethod]
    fn from_file(py: Python<'_>, path: PathBuf) -> PyResult<Program> {
        let mut session = Session::new();
        if let Err(d) = session.load_file(&path) {
            let (file, source) = session.source();
            return Err(error(py, &d, file, source));
        }
        Ok(Program {
            session,
            interrupt: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Binds a dense tensor from a NumPy array (float32 and float64 keep their type;
    /// integers and Booleans are stored as f64). The values are copied.
    fn bind_array(&mut self, name: &str, array: &Bound<'_, PyAny>) -> PyResult<()> {
        let (elem, shape, values) = if let Ok(a) = array.cast::<PyArrayDyn<f32>>() {
            let v = a.readonly();
            let values: Vec<f64> = v.as_array().iter().map(|&x| f64::from(x)).collect();
            (ElemType::F32, a.shape().to_vec(), values)
        } else if let Ok(a) = array.cast::<PyArrayDyn<f64>>() {
            let v = a.readonly();
            (
                ElemType::F64,
                a.shape().to_vec(),
                v.as_array().iter().copied().collect(),
            )
        } else {
            let np = array.py().import("numpy")?;
            let as_f64 = np.call_method1("asarray", (array, "float64"))?;
            let a = as_f64.cast::<PyArrayDyn<f64>>()?;
            let v = a.readonly();
            (
                ElemType::F64,
                a.shape().to_vec(),
                v.as_array().iter().copied().collect(),
            )
        };
        let tensor =
            Tensor::dense(elem, shape, values).map_err(pyo3::exceptions::PyValueError::new_err)?;
        self.session.bind(name, &tensor);
        Ok(())
    }

    /// Binds a relation (or a valued tensor: one more field per row) from rows of fields
    /// already written as text, as a `.tsv` file gives them.
    fn bind_rows(&mut self, name: &str, rows: Vec<Vec<String>>) {
        self.session.bind_rows(name, &rows);
    }

    /// Checks and evaluates the program on `threads` threads, without the GIL; returns the
    /// answers of the program's own queries. Ctrl-C stops it with a `TensorLogicError`.
    #[pyo3(signature = (threads = 1, write_files = true, timeout = None))]
    fn run(
        &mut self,
        py: Python<'_>,
        threads: usize,
        write_files: bool,
        timeout: Option<f64>,
    ) -> PyResult<Vec<String>> {
        self.interrupt.store(false, Ordering::SeqCst);
        let options = RunOptions {
            threads,
            write_files,
            timeout: timeout.map(std::time::Duration::from_secs_f64),
            interrupt: Some(Arc::clone(&self.interrupt)),
            ..RunOptions::default()
        };
        let session = &mut self.session;
        let interrupt = Arc::clone(&self.interrupt);
        let result = std::thread::scope(|scope| {
            let worker = scope.spawn(move || session.run(&options));
            // This thread keeps the GIL only to look at signals now and then, so that
            // Ctrl-C (KeyboardInterrupt) stops the engine.
            let mut signalled = None;
            while !worker.is_finished() {
                py.detach(|| std::thread::sleep(std::time::Duration::from_millis(20)));
                if signalled.is_none() {
                    if let Err(e) = py.check_signals() {
                        interrupt.store(true, Ordering::SeqCst);
                        signalled = Some(e);
                    }
                }
            }
            let r = worker.join();
            (r, signalled)
        });
        match result {
            (_, Some(signal)) => Err(signal),
            (Ok(Ok(lines)), None) => Ok(lines),
            (Ok(Err(d)), None) => Err(self.fail(py, &d)),
            (Err(_), None) => Err(TensorLogicError::new_err("the engine stopped unexpectedly")),
        }
    }

    /// A tensor's values after a run, as a new NumPy array of its storage type (float32
    /// for `real` tensors by default, float64 for `f64`, `int` and Boolean ones).
    fn array<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let Some(t) = self.session.tensor(name) else {
            return Err(pyo3::exceptions::PyKeyError::new_err(format!(
                "no tensor `{name}` after a run"
            )));
        };
        let shape = t.shape.clone();
        let values = t.to_dense_values();
        let out = if t.elem == ElemType::F32 {
            let v: Vec<f32> = values.iter().map(|&x| x as f32).collect();
            numpy::PyArray1::from_vec(py, v).reshape(shape)?.into_any()
        } else {
            numpy::PyArray1::from_vec(py, values)
                .reshape(shape)?
                .into_any()
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
            .map_err(|d| self.fail(py, &d))?;
        to_python(py, &rows)
    }

    /// The answers to a query as the CLI prints them.
    fn query_lines(&self, py: Python<'_>, text: &str) -> PyResult<Vec<String>> {
        self.session.query(text).map_err(|d| self.fail(py, &d))
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
    m.add("TensorLogicError", m.py().get_type::<TensorLogicError>())?;
    Ok(())
}
