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
from typing import Any, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from . import _native
from ._native import TensorLogicError

__all__ = ["Program", "TensorLogicError"]


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


def _array(value: Any) -> np.ndarray:
    """`value` as a NumPy array: NumPy arrays as they are, CPU torch tensors through
    `numpy()`, anything else through `np.asarray`."""
    if isinstance(value, np.ndarray):
        return value
    numpy = getattr(value, "numpy", None)
    if callable(numpy) and hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return np.asarray(value)


class Program:
    """A Tensor Logic program: its source, what is bound to its tensors and, after
    `run`, their values."""

    def __init__(self, source: str, base_dir: str = ".", name: str = "<program>") -> None:
        """Parses `source`; `base_dir` resolves the files it reads and writes. Syntax
        errors raise `TensorLogicError`."""
        self._native = _native.Program(source, os.fspath(base_dir), name)

    @classmethod
    def from_file(cls, path: "str | os.PathLike[str]") -> "Program":
        """Reads and parses a program file; its folder resolves the files it names."""
        prog = cls.__new__(cls)
        prog._native = _native.Program.from_file(os.fspath(path))
        return prog

    def bind(self, name: str, value: Any) -> "Program":
        """Gives tensor `name` its data, as a file would: a NumPy array, a CPU torch tensor
        or anything `np.asarray` takes for a dense tensor; a list of tuples, a 2-D integer
        array of rows or a pandas DataFrame for a relation (a final number column makes it
        valued). The data is copied. Returns the program, so calls chain."""
        rows = _rows(value)
        if rows is not None:
            self._native.bind_rows(name, rows)
        else:
            self._native.bind_array(name, _array(value))
        return self

    def run(self, threads: int = 1, write_files: bool = True,
            timeout: Optional[float] = None) -> List[str]:
        """Checks and evaluates the program without holding the GIL; returns the answers
        of its own queries as the CLI prints them. Errors (every one of them) raise
        `TensorLogicError`; Ctrl-C raises `KeyboardInterrupt` once the engine stops."""
        return self._native.run(threads, write_files, timeout)

    def __getitem__(self, name: str) -> np.ndarray:
        """Tensor `name` after a run, as a new NumPy array (float32 for `real` tensors,
        float64 for `f64`, integer and Boolean ones)."""
        return self._native.array(name)

    def rows(self, name: str) -> List[Tuple[Any, ...]]:
        """The tuples of relation `name`, symbols as `str` and numbers as `int` or `float`;
        a tensor that is not a relation gives each defined element, its value last."""
        return self._native.rows(name)

    def query(self, text: str) -> List[Tuple[Any, ...]]:
        """The tuples that answer `text` (`"Ancestor(Alice, x)"`), as `rows` gives them."""
        return self._native.query_rows(text)

    def answers(self, text: str) -> List[str]:
        """The answers to `text` as the CLI prints them (`Ancestor(Alice, Bob)`)."""
        return self._native.query_lines(text)

    def explain(self) -> str:
        """The plan the engine runs, as `tl explain` prints it."""
        return self._native.explain()

    def names(self) -> List[str]:
        """The program's tensors, after a check or a run."""
        return self._native.names()

    def _repr_html_(self) -> str:
        import html
        return "<pre>" + html.escape(self.explain()) + "</pre>"
