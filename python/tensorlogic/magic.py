"""`%%tl` cells for IPython and Jupyter: `%load_ext tensorlogic`, then

    %%tl
    Parent(Alice, Bob). Parent(Bob, Carol).
    Ancestor(x, y) :- Parent(x, y).
    Ancestor(x, z) :- Ancestor(x, y), Parent(y, z).
    Ancestor(Alice, x)?

Each cell adds its statements to a program the notebook keeps (`--program NAME` for
another), runs it, and shows the answers to the cell's own queries as tables. `--bind X=x`
binds tensor `X` to the Python variable `x`. A cell with an error adds nothing, and its
diagnostics show as HTML. `%tl explain`, `%tl why ATOM`, `%tl source` and `%tl reset` look
at, explain or clear a program.
"""

from __future__ import annotations

import html
import os
import re
import shlex
from typing import Any, Dict, List, Tuple

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from . import Program

DEFAULT = "default"


def _split(cell: str) -> Tuple[List[str], List[str]]:
    """The cell's statements to keep, and its queries (lines ending in `?`), in order."""
    kept, queries = [], []
    for line in cell.splitlines():
        code = line.split("#", 1)[0].strip() if '"' not in line else line.strip()
        if code.endswith("?"):
            queries.append(code[:-1].strip())
        else:
            kept.append(line)
    return kept, queries


def _columns(query: str, width: int, valued: bool) -> List[str]:
    """Column names: the query's arguments as written where they fit, then `value`."""
    inside = re.search(r"[(\[](.*)[)\]]\s*$", query)
    names = [a.strip() for a in inside.group(1).split(",")] if inside else []
    keys = width - (1 if valued else 0)
    if len(names) != keys or len(set(names)) != len(names):
        names = [f"c{i}" for i in range(keys)]
    return names + (["value"] if valued else [])


class Answer:
    """The answers to one query: a table in a notebook, lines in a terminal."""

    def __init__(self, query: str, rows: List[tuple], lines: List[str], valued: bool):
        self.query, self.rows, self.lines = query, rows, lines
        width = len(rows[0]) if rows else 0
        self.columns = _columns(query, width, valued)

    def __repr__(self) -> str:
        return "\n".join(self.lines) if self.lines else f"{self.query}: no answers"

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>"
            for r in self.rows)
        caption = f"<caption style='text-align:left'><code>{html.escape(self.query)}?</code> " \
                  f"({len(self.rows)} answer{'s' if len(self.rows) != 1 else ''})</caption>"
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


@magics_class
class TensorLogicMagics(Magics):
    """The programs of one notebook: their statements so far and what is bound to them."""

    def __init__(self, shell):
        super().__init__(shell)
        self.sources: Dict[str, List[str]] = {}
        self.bindings: Dict[str, Dict[str, str]] = {}
        self.programs: Dict[str, Program] = {}

    def _options(self, line: str) -> Tuple[str, Dict[str, str], List[str]]:
        """`--program NAME` and `--bind X=x` options, and the words left."""
        words = shlex.split(line)
        name, binds, rest = DEFAULT, {}, []
        i = 0
        while i < len(words):
            w = words[i]
            if w in ("--program", "-p", "--bind", "-b"):
                if i + 1 >= len(words):
                    raise UsageError(f"{w} needs a value")
                value = words[i + 1]
                if w in ("--program", "-p"):
                    name = value
                else:
                    tensor, sep, variable = value.partition("=")
                    if not sep or not tensor or not variable:
                        raise UsageError(f"--bind takes TENSOR=variable, not {value!r}")
                    binds[tensor.strip()] = variable.strip()
                i += 2
            else:
                rest.append(w)
                i += 1
        return name, binds, rest

    def _value(self, variable: str) -> Any:
        if variable not in self.shell.user_ns:
            raise UsageError(f"--bind: no Python variable named {variable!r}")
        return self.shell.user_ns[variable]

    @cell_magic
    def tl(self, line: str, cell: str):
        """Adds the cell's statements to the program, runs it, and shows the answers to the
        cell's queries."""
        name, binds, rest = self._options(line)
        if rest:
            raise UsageError(f"%%tl does not take {' '.join(rest)!r}")
        kept, queries = _split(cell)
        source = self.sources.get(name, []) + kept
        bound = {**self.bindings.get(name, {}), **binds}
        prog = Program("\n".join(source) + "\n", base_dir=os.getcwd(), name=f"<%%tl {name}>")
        for tensor, variable in bound.items():
            prog.bind(tensor, self._value(variable))
        prog.run()
        answers = [
            Answer(q, prog.query(q), prog.answers(q), self._valued(prog, q)) for q in queries
        ]
        # Only a cell that ran is kept: an error leaves the program as it was.
        self.sources[name], self.bindings[name], self.programs[name] = source, bound, prog
        from IPython.display import display
        for a in answers:
            display(a)

    @staticmethod
    def _valued(prog: Program, query: str) -> bool:
        head = re.match(r"\s*([^\s(\[]+)", query)
        try:
            return head is not None and prog._native.kind(head.group(1)) != "bool"
        except Exception:
            return False

    @line_magic("tl")
    def tl_line(self, line: str):
        """`%tl explain`, `%tl why ATOM` (`%tl why not ATOM`), `%tl source` or `%tl reset`,
        each with an optional `--program NAME`."""
        name, _, rest = self._options(line)
        command = rest[0] if rest else ""
        if command == "reset":
            for d in (self.sources, self.bindings, self.programs):
                d.pop(name, None)
            return None
        if command == "source":
            print("\n".join(self.sources.get(name, [])))
            return None
        if command == "explain":
            if name not in self.programs:
                raise UsageError(f"no program {name!r} has run yet: run a %%tl cell first")
            print(self.programs[name].explain())
            return None
        if command == "why":
            if name not in self.programs:
                raise UsageError(f"no program {name!r} has run yet: run a %%tl cell first")
            words = rest[1:]
            not_ = bool(words) and words[0] == "not"
            atom = " ".join(words[1:] if not_ else words)
            if not atom:
                raise UsageError("%tl why ATOM, or %tl why not ATOM")
            return self.programs[name].why(atom.rstrip("?"), not_=not_)
        raise UsageError("%tl takes explain, why, source or reset (and --program NAME)")


def load_ipython_extension(ipython) -> None:
    """`%load_ext tensorlogic`."""
    ipython.register_magics(TensorLogicMagics)
