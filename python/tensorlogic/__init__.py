"""Tensor Logic from Python: load a program, bind NumPy arrays, PyTorch tensors and rows,
run it on the Rust engine, and read tensors back as NumPy arrays and relations as rows.

    import tensorlogic as tl
    prog = tl.Program('''
    Ancestor(x, y) :- Parent(x, y).
    Ancestor(x, z) :- Ancestor(x, y), Parent(y, z).
    ''')
    prog.bind("Parent", [("Alice", "Bob"), ("Bob", "Carol")])
    prog.run()
    prog.query("Ancestor(Alice, x)")   # [("Alice", "Bob"), ("Alice", "Carol")]
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from . import _native
from ._native import (
    DataError,
    DomainError,
    EvaluationError,
    MemoryLimitError,
    NameError,
    ParseError,
    QueryError,
    StratificationError,
    TensorLogicError,
    TrainingError,
)

__all__ = [
    "Program", "Why", "function", "TensorLogicError", "ParseError", "NameError", "DomainError",
    "StratificationError", "EvaluationError", "DataError", "MemoryLimitError", "QueryError",
    "TrainingError",
]

_FUNCTIONS: dict = {}


def function(name: str, f: Callable[[float], float], df: Callable[[float], float]) -> None:
    """Registers an elementwise function `name` with its derivative `df`, for programs
    created afterwards (`Y[i] = swish(X[i])`). Each element calls Python, so it is slow;
    built-in functions stay native. An exception in `f` gives NaN."""
    _FUNCTIONS[name] = (f, df)


def _field(v: Any) -> str:
    """A row's field as the text a `.tsv` file would hold."""
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def _rows(value: Any) -> Optional[List[List[str]]]:
    """`value` as rows of fields when it is a table: a pandas DataFrame, a 2-D integer
    NumPy array of rows, or a sequence of tuples or lists."""
    if hasattr(value, "itertuples") and hasattr(value, "columns"):
        return [[_field(v) for v in row] for row in value.itertuples(index=False)]
    if isinstance(value, np.ndarray):
        if value.ndim == 2 and value.dtype.kind in "iub":
            return [[_field(v) for v in row] for row in value.tolist()]
        return None
    if isinstance(value, (list, tuple)):
        rows = list(value)
        if all(isinstance(r, (list, tuple)) for r in rows):
            return [[_field(v) for v in r] for r in rows]
        if all(isinstance(r, (str, int, np.integer)) for r in rows):
            return [[_field(r)] for r in rows]
    return None


def _fields(value: Any) -> List[List[str]]:
    """Facts to insert or remove as rows of fields; a `TypeError` for anything else."""
    rows = _rows(value)
    if rows is None:
        raise TypeError("facts are a list of tuples, a 2-D integer array or a DataFrame")
    return rows


_DLPACK_CPU = 1


def _array(value: Any) -> np.ndarray:
    """`value` as a NumPy array over the same memory where it can be: NumPy arrays as they
    are; anything with `__dlpack__` (a torch tensor, a JAX or CuPy array) through DLPack,
    which views CPU memory in place (a tensor on another device is copied to the CPU
    first); anything else through `np.asarray`."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__"):
        if getattr(value, "requires_grad", False):
            value = value.detach()
        device = getattr(value, "__dlpack_device__", None)
        if callable(device) and device()[0] != _DLPACK_CPU and callable(
                getattr(value, "cpu", None)):
            value = value.cpu()
        return np.from_dlpack(value)
    return np.asarray(value)


class Program:
    """A Tensor Logic program: its source, what is bound to its tensors and, after
    `run`, their values."""

    def __init__(self, source: str, base_dir: str = ".", name: str = "<program>") -> None:
        """Parses `source`; `base_dir` resolves the files it reads and writes. Syntax
        errors raise `TensorLogicError`."""
        self._native = _native.Program(source, os.fspath(base_dir), name, dict(_FUNCTIONS))

    @classmethod
    def from_file(cls, path: "str | os.PathLike[str]") -> "Program":
        """Reads and parses a program file; its folder resolves the files it names."""
        prog = cls.__new__(cls)
        prog._native = _native.Program.from_file(os.fspath(path), dict(_FUNCTIONS))
        return prog

    def bind(self, name: str, value: Any) -> "Program":
        """Gives tensor `name` its data, as a file would: a NumPy array, a torch tensor (or
        anything with `__dlpack__`) or anything `np.asarray` takes for a dense tensor; a list of tuples, a 2-D integer
        array of rows or a pandas DataFrame for a relation (a final number column makes it
        valued). A tensor the program declares with a number type (`X : real[2, 3]`) always
        takes the array's values, whatever its dtype. A C-contiguous float32 or float64 array or CPU tensor is read in place,
        not copied (do not write it during a run); other data is copied. Returns the
        program, so calls chain."""
        declared = self._native.declared_type(name)
        # A tensor declared with a number type is dense: any numeric array or nested list is
        # its values (integers and Booleans converted), never rows of a relation.
        rows = None if declared not in (None, "bool") else _rows(value)
        if rows is not None:
            self._native.bind_rows(name, rows)
        else:
            self._native.bind_array(name, _array(value))
        return self

    def run(self, threads: Optional[int] = None, write_files: bool = True,
            timeout: Optional[float] = None, provenance: bool = False) -> List[str]:
        """Checks and evaluates the program without holding the GIL; returns the answers
        of its own queries as the CLI prints them. `threads` defaults to every core this
        process may use (results are bit-identical for any count). `provenance=True`
        records each derived tuple's round (4 bytes a tuple), so that `why` walks down the
        rounds to a derivation of minimal height instead of searching for one. Errors (every one of them) raise
        `TensorLogicError`; Ctrl-C raises `KeyboardInterrupt` once the engine stops."""
        return self._native.run(threads, write_files, timeout, provenance)

    def run_incremental(self, workers: Optional[int] = None, write_files: bool = True,
                        engine: str = "standard") -> List[str]:
        """Evaluates and keeps the values up to date, so that `insert`/`remove` then
        `commit` update every derived relation without evaluating from scratch: on the
        standard engine with `workers` threads (the default), or with
        `engine="differential"` in a differential dataflow of `workers` workers. Returns
        the answers of the program's own queries."""
        return self._native.run_incremental(workers, write_files, engine)

    def no_ops(self) -> List[str]:
        """The last commit's facts that changed nothing: `-Edge(9, 9)` for a fact removed
        while it did not hold, `+Edge(1, 2)` for one inserted while it held."""
        return self._native.no_ops()

    def insert(self, name: str, rows) -> None:
        """Stages facts of relation `name` (tuples of Python values, or a DataFrame) to
        insert at the next `commit`."""
        self._native.insert(name, _fields(rows))

    def remove(self, name: str, rows) -> None:
        """Stages facts of relation `name` to remove at the next `commit`."""
        self._native.remove(name, _fields(rows))

    def commit(self) -> Dict[str, Dict[str, List[Tuple[Any, ...]]]]:
        """Applies the staged facts in order; returns, for each derived tensor that
        changed, `{"added": [...], "removed": [...]}` rows as `rows` gives them. Reading
        any tensor afterwards gives its current contents."""
        return self._native.commit()

    def __getitem__(self, name: str) -> np.ndarray:
        """Tensor `name` after a run, as a new NumPy array (float32 for `real` tensors,
        float64 for `f64` and Boolean ones, int64 for integer ones)."""
        return self._native.array(name)

    def rows(self, name: str) -> List[Tuple[Any, ...]]:
        """The tuples of relation `name`, symbols as `str` and numbers as `int` or `float`;
        a tensor that is not a relation gives each defined element, its value last."""
        return self._native.rows(name)

    def query(self, text: str) -> List[Tuple[Any, ...]]:
        """The tuples that answer `text` (`"Ancestor(Alice, x)"`), as `rows` gives them."""
        return self._native.query_rows(text)

    def frame(self, name: str, columns: Optional[List[str]] = None):
        """Relation (or valued tensor) `name` as a pandas DataFrame, one row per tuple;
        columns are named `columns`, or `c0, c1, ...` (then `value` for a valued tensor)."""
        import pandas as pd
        rows = self.rows(name)
        width = len(rows[0]) if rows else 0
        if columns is None:
            columns = [f"c{i}" for i in range(width)]
            info = self._native.kind(name)
            if info != "bool" and width:
                columns[-1] = "value"
        return pd.DataFrame(rows, columns=columns if rows else columns or None)

    def tuples(self, name: str) -> np.ndarray:
        """The tuples of a relation whose columns hold integers, as a 2-D int64 NumPy
        array (one row per tuple), the form `bind` also takes."""
        rows = self.rows(name)
        if any(not isinstance(v, (int, np.integer)) for r in rows for v in r):
            raise TypeError(f"`{name}` has columns that are not integers: use rows()")
        width = len(rows[0]) if rows else 0
        return np.array(rows, dtype=np.int64).reshape(len(rows), width)

    def answers(self, text: str) -> List[str]:
        """The answers to `text` as the CLI prints them (`Ancestor(Alice, Bob)`)."""
        return self._native.query_lines(text)

    def why(self, atom: str, top: int = 5, depth: int = 2, not_: bool = False) -> "Why":
        """Why a fact holds (`"Ancestor(Alice, Dana)"`: its derivation of minimal height) or
        an element has its value (`"Dist[A, D]"`, `"Y[3]"`: its `top` largest terms, derived
        factors explained to `depth` levels), after `run`; `not_=True` explains why a fact
        does not hold. The tree prints as text and shows as HTML in a notebook."""
        text, nodes = self._native.why(atom, top, depth, not_)
        return Why._from_nodes(nodes, text)

    def explain(self) -> str:
        """The plan the engine runs, as `tl explain` prints it."""
        return self._native.explain()

    def train(self, loss: str = "Loss", optimizer: str = "adam", lr: float = 1e-3,
              epochs: int = 1, steps: Optional[int] = None,
              batch: Optional[Dict[str, int]] = None, shuffle: bool = False, seed: int = 0,
              freeze: Optional[List[str]] = None, eval: Optional[List[str]] = None,
              save: Optional[str] = None, save_every: Optional[int] = None,
              momentum: float = 0.0, weight_decay: float = 0.0, clip: Optional[float] = None,
              threads: Optional[int] = None,
              callback: Optional[Callable[[dict], Any]] = None) -> dict:
        """Trains the parameters with the engine `tl train` uses (same options, same
        results for the same seed). `batch={"Example": 128}` batches over a domain.
        `callback(event)` gets a dict per step (`kind="step"`, `step`, `total`, `epoch`,
        `loss`, `lr`), per epoch (`kind="epoch"`, `metrics` of the `eval` tensors) and per
        checkpoint written; returning `False` stops training after that step. Returns
        `{"losses": [...], "step": n}`; afterwards `run` uses the trained parameters."""
        if batch is not None and len(batch) != 1:
            raise ValueError("batch names one domain: {\"Example\": 128}")
        pair = next(iter(batch.items())) if batch else None
        return self._native.train(
            loss, optimizer, lr, epochs, steps, pair, shuffle, seed, list(freeze or []),
            list(eval or []), None if save is None else os.fspath(save), save_every,
            momentum, weight_decay, clip, threads, callback)

    def save(self, path: "str | os.PathLike[str]") -> None:
        """Writes the parameters (trained ones after `train`) to a `.safetensors` file."""
        self._native.save(os.fspath(path))

    def load(self, path: "str | os.PathLike[str]") -> None:
        """Takes parameter values from a checkpoint for the next run or training."""
        self._native.load(os.fspath(path))

    def check_gradients(self, loss: str = "Loss", freeze: Optional[List[str]] = None,
                        per_param: int = 64) -> List[dict]:
        """Compares gradients with finite differences in f64: per parameter, the worst
        relative error (`worst`) over up to `per_param` elements."""
        return self._native.check_gradients(loss, list(freeze or []), per_param)

    def names(self) -> List[str]:
        """The program's tensors, after a check or a run."""
        return self._native.names()

    def _repr_html_(self) -> str:
        import html
        return "<pre>" + html.escape(self.explain()) + "</pre>"


class Why:
    """An explanation (`Program.why`): `label` (the fact, or the element and its value),
    `detail` (the rule with its variables bound, where a fact was given, a term's share),
    and `children`, each a `Why`. A derivation may be thousands of levels deep, so nothing
    here recurses."""

    def __init__(self, label: str, detail: str, text: Optional[str] = None) -> None:
        self.label, self.detail = label, detail
        self.children: List["Why"] = []
        self._text = text

    @classmethod
    def _from_nodes(cls, nodes, text: str) -> "Why":
        made: List["Why"] = []
        for label, detail, parent in nodes:
            node = cls(label, detail)
            if parent is not None:
                made[parent].children.append(node)
            made.append(node)
        made[0]._text = text
        return made[0]

    def _walk(self):
        """(node, depth, prefix of its line, prefix of its children's lines), in pre-order."""
        stack = [(self, 0, "", "")]
        while stack:
            node, depth, first, rest = stack.pop()
            yield node, depth, first, rest
            n = len(node.children)
            for i in reversed(range(n)):
                last = i + 1 == n
                stack.append((node.children[i], depth + 1, rest + ("└─ " if last else "├─ "),
                              rest + ("   " if last else "│  ")))

    def to_dict(self) -> dict:
        root: dict = {}
        dicts = {}
        for node, _, _, _ in self._walk():
            dicts[id(node)] = {"label": node.label, "detail": node.detail, "children": []}
        for node, _, _, _ in self._walk():
            dicts[id(node)]["children"] = [dicts[id(c)] for c in node.children]
        root = dicts[id(self)]
        return root

    def __str__(self) -> str:
        if self._text is not None:
            return self._text
        return "".join(f"{first}{n.label}" + (f"  ({n.detail})" if n.detail else "") + "\n"
                       for n, _, first, _ in self._walk())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        """Nested, collapsible lists; levels below 100 are left out."""
        import html
        out, open_at = [], []
        for node, depth, _, _ in self._walk():
            while open_at and open_at[-1] >= depth:
                out.append("</details>")
                open_at.pop()
            if depth > 100:
                continue
            head = f"<code>{html.escape(node.label)}</code>"
            if node.detail:
                head += f" <span style='color:#666'>({html.escape(node.detail)})</span>"
            if node.children and depth < 100:
                out.append(f"<details open style='margin-left:1.2em'><summary>{head}</summary>")
                open_at.append(depth)
            else:
                out.append(f"<div style='margin-left:1.2em'>{head}</div>")
        out.extend("</details>" for _ in open_at)
        return "".join(out)


def _diagnostics_html(err: TensorLogicError) -> str:
    """A program's errors as HTML: one block per diagnostic, its code and place first."""
    import html
    rows = []
    for d in getattr(err, "diagnostics", []) or []:
        where = ""
        if d.get("file"):
            where = f"{d['file']}:{d.get('line')}:{d.get('column')}"
        rows.append(
            f"<div><b style='color:#b00'>{html.escape(str(d.get('code')))}</b> "
            f"{html.escape(str(d.get('message')))} <i>{html.escape(where)}</i></div>")
    rendered = html.escape(getattr(err, "rendered", "") or str(err))
    return "".join(rows) + f"<pre>{rendered}</pre>"


def _show_in_notebooks() -> None:
    """In IPython (a notebook), show a program's errors as HTML rather than a traceback."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    def handler(shell, etype, value, tb, tb_offset=None):
        from IPython.display import HTML, display
        display(HTML(_diagnostics_html(value)))

    shell.set_custom_exc((TensorLogicError,), handler)


_show_in_notebooks()


def load_ipython_extension(ipython) -> None:
    """`%load_ext tensorlogic`: the `%%tl` cell magic and `%tl` (see `tensorlogic.magic`)."""
    from .magic import load_ipython_extension as load
    load(ipython)
