"""The analysis notebooks run top to bottom on a fresh kernel (each makes its own small run)."""
from __future__ import annotations

import re
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAMES = ["bias_drift.ipynb", "contagion_wave.ipynb", "contrarian_ab.ipynb", "salience_lift.ipynb", "real_episode.ipynb"]
BUDGET_S = 180.0          # all notebooks together
_spent: list[float] = []


def test_notebooks_are_stored_clean_and_shaped():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)
    for name in NAMES:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
        assert nb.cells[0].cell_type == "markdown" and "Question" in nb.cells[0].source, name
        params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(params) == 1 and "RUN" in params[0].source and "None" in params[0].source, name
        assert any(c.cell_type == "code" and "plt." in c.source for c in nb.cells), name
        for c in nb.cells:
            if c.cell_type == "code":
                assert c.outputs == [] and c.execution_count is None, f"{name}: stored with outputs"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    t = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    _spent.append(time.perf_counter() - t)
    figures = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert figures >= 2, name
    conclusion = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    assert len(re.findall(r"[-+]?\d+\.\d+", conclusion)) >= 3, conclusion   # numbers, computed
    assert not re.search(r"\bnan\b", conclusion, re.I), conclusion
    assert sum(_spent) < BUDGET_S, f"notebooks took {sum(_spent):.0f} s so far (budget {BUDGET_S:.0f} s)"
