"""The example notebooks run from top to bottom (so that they never rot): every cell
executes without an error in a fresh kernel, in the notebooks' own folder."""

import pathlib

import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "notebooks"


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_runs(path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outputs = cell.get("outputs", [])
        if "raises-exception" in cell.metadata.get("tags", []):
            # A program's errors show as HTML, not as a traceback.
            pages = [o.get("data", {}).get("text/html", "") for o in outputs]
            assert any("E0101" in p for p in pages), outputs
        else:
            assert not [o for o in outputs if o.get("output_type") == "error"]


def test_there_are_notebooks():
    assert len(list(NOTEBOOKS.glob("*.ipynb"))) >= 2
