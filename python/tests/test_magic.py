"""`%%tl` cells, run in a real notebook kernel under nbclient, as a user's notebook runs."""

import pytest


def _notebook(cells):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    for source, tags in cells:
        cell = nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    return nb


def _html(cell):
    return "".join(o.get("data", {}).get("text/html", "") for o in cell.get("outputs", []))


def _text(cell):
    return "".join(o.get("text", "") for o in cell.get("outputs", []))


def test_tl_cells_keep_a_program_bind_python_values_and_show_tables(tmp_path):
    nbclient = pytest.importorskip("nbclient")
    nb = _notebook([
        ("%load_ext tensorlogic", None),
        ("%%tl\nParent(Alice, Bob). Parent(Bob, Carol).\n"
         "Ancestor(x, y) :- Parent(x, y).\nAncestor(x, z) :- Ancestor(x, y), Parent(y, z).\n"
         "Ancestor(Alice, x)?", None),
        # A later cell adds to the same program and sees what the first defined.
        ("%%tl\nAunt(x) :- Ancestor(x, Carol), not Parent(x, Carol).\nAunt(x)?", None),
        ("import numpy as np\nw = np.array([1.0, 2.0, 3.0], dtype=np.float32)", None),
        ("%%tl --program dense --bind W=w\nW : real[3]\nS = W[i] W[i]\nS?", None),
        # An error shows as HTML diagnostics and adds nothing to the program.
        ("%%tl\nBad(x) :- Missing(x).", ["raises-exception"]),
        ("%%tl\nAncestor(Bob, x)?", None),
        ("%tl explain --program dense", None),
        ("%tl why Ancestor(Alice, Carol)", None),
    ])
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}}).execute()
    c = nb.cells
    first = _html(c[1])
    assert "<table>" in first and "<td>Bob</td>" in first and "<td>Carol</td>" in first, first
    assert "<th>x</th>" in first, first
    assert "<td>Alice</td>" in _html(c[2]), c[2]
    assert "<td>14.0</td>" in _html(c[4]), c[4]
    assert "E0101" in _html(c[5]), c[5]
    later = _html(c[6])
    assert "<td>Carol</td>" in later and "(1 answer)" in later, later
    assert "stratum" in _text(c[7]), c[7]
    why = _html(c[8])
    assert "<details" in why and "Parent(Bob, Carol)" in why, c[8]
