"""examples/fearful_buyer: the whole loop of writing a strategy and comparing it with a
built-in runs, on the command line and as the example's notebook."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import numpy as np
import polars as pl
import pytest
from nbclient import NotebookClient

from conftest import cli, table

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fearful_buyer"
H = 3_600_000


def test_the_loop_on_the_command_line(tmp_path):
    a, b = tmp_path / "fearful", tmp_path / "momentum"
    code, out = cli("run", EXAMPLE / "scenario.yaml", "--out", a, "-q")
    assert code == 0, out
    m = json.loads((a / "manifest.json").read_text())
    assert m["plugins"]["loaded"][0]["file"] == str(EXAMPLE / "fearful_buyer.py")
    code, out = cli("replay", a, "--set", "golems.0.strategy=momentum", "--out", b, "-q")
    assert code == 0, out
    mb = json.loads((b / "manifest.json").read_text())
    assert mb["hashes"]["market"] == m["hashes"]["market"] and mb["parent"]["path"] == str(a.resolve())
    code, out = cli("diff", a, b)
    assert code == 0 and "buyers" in out and "final_pnl" in out, out
    code, out = cli("report", a, "--compare", b, "--out", tmp_path / "r.html", "-q")
    assert code == 0 and (tmp_path / "r.html").stat().st_size > 10_000, out

    # the plug-in decided: fear above 0.2 -> target 1, else 0.5 + 0.3 x memory signal (SPEC-free: its docstring);
    # rows where the mind overrules a strategy (cached somatic response, mortality phase) or where
    # reflection rewrote P after the decision (backcheck, P < -0.7) are left out
    hb = table(a, "heartbeats").filter((pl.col("state_path") != "DREAMING") & ~pl.col("cache_served")
                                       & (pl.col("phase") == "thriving") & (pl.col("p") >= -0.7))
    fear = np.clip(-hb["p"].to_numpy(), 0, 1) * np.clip(hb["a"].to_numpy(), 0, 1)
    want = np.where(fear > 0.2, 1.0, np.clip(0.5 + 0.3 * hb["memory_signal"].to_numpy(), 0, 1))
    assert hb.height > 3000 and (fear > 0.2).sum() > 100
    assert np.allclose(hb["target_exposure"].to_numpy(), want, atol=1e-12)
    crash = (pl.col("time_ms") >= 24 * H) & (pl.col("time_ms") < 28 * H)
    fearful = table(a, "heartbeats").filter(crash)["target_exposure"].mean()
    momentum = table(b, "heartbeats").filter(crash)["target_exposure"].mean()
    assert fearful > momentum + 0.3     # the fearful buy the crash that momentum sells


def test_the_example_notebook_executes(tmp_path):
    nb = nbformat.read(EXAMPLE / "fearful_buyer.ipynb", as_version=4)
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code"), "stored with outputs"
    assert "Simulation.from_yaml" in "".join(c.source for c in nb.cells)
    # started outside the repository: it finds its files through the installed package
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    figures = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert figures >= 2
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "stream")
    assert "final_pnl" in text and "report:" in text and "\x1b[" not in text
    conclusion = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    assert len(re.findall(r"[-+]?\d+\.\d+", conclusion)) >= 5, conclusion

    # the Clade P&L panel ends where the run's P&L does (each Golem's last value, not a sum of its ticks)
    import ast
    panel = ast.literal_eval(re.search(r"Clade P&L % at the last hour: (\{.*\})", text).group(1))
    pnl = ast.literal_eval(re.search(r"P&L % \(run_pnl\): (\{.*\})", text).group(1))
    assert panel.keys() == pnl.keys() == {"fearful buyer", "momentum"}
    for arm in pnl:
        assert panel[arm] == pytest.approx(pnl[arm], abs=1e-3) and abs(pnl[arm]) < 50
