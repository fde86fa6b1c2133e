"""The analysis notebooks run top to bottom on a fresh kernel from any directory (each makes its own
small run), and what their conclusions say holds on that execution: every finding's direction word
agrees with its interval, the prose prints that word, and one figure per notebook is recomputed here
from the run's Parquet tables without the notebook's code."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import nbformat
import polars as pl
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
        assert len(params) == 1 and ("RUN" in params[0].source or "SWEEP_DIR" in params[0].source) \
            and "None" in params[0].source, name
        assert any(c.cell_type == "code" and "plt." in c.source for c in nb.cells), name
        for c in nb.cells:
            if c.cell_type == "code":
                assert c.outputs == [] and c.execution_count is None, f"{name}: stored with outputs"
                assert "pyproject.toml" not in c.source, f"{name}: looks for the checkout above the cwd"
            else:   # prose quotes no figure: the numbers are printed from the data
                assert not re.search(r"[-+±]\s?\d+\.\d{2,}", c.source), f"{name}: a hand-typed figure in prose"


def _rows(run: Path, table: str) -> pl.DataFrame:
    return pl.read_parquet(run / table / "*.parquet")


def _per_golem_mean(df: pl.DataFrame, expr: pl.Expr) -> float:
    return df.group_by("golem_id").agg(expr.mean().alias("m"))["m"].mean()


def _recompute_bias_drift(f: dict) -> None:
    r = _rows(Path(f["runs"][0]), "retrievals").filter(pl.col("pool_n") > pl.col("ids").list.len())
    got = _per_golem_mean(r, pl.col("served_mean_emotional") - pl.col("pool_mean_emotional"))
    assert f["mood_congruence"]["mean"] == pytest.approx(got, rel=1e-9)


def _recompute_contagion_wave(f: dict) -> None:
    ev = _rows(Path(f["runs"][0]), "events").filter(pl.col("kind") == "contagion")
    assert f["shift_at_delivery"]["mean"] == pytest.approx(ev["value"].mean(), rel=1e-9)
    # the control moved no one's arousal at delivery
    ctl = _rows(Path(f["control"]), "events").filter(pl.col("kind") == "contagion")
    assert ctl.height > 0 and ctl["value"].abs().max() == 0


def _recompute_contrarian_ab(f: dict) -> None:
    from sim import sweep as sw
    s = sw.read_summary(f["runs"][0]).filter(pl.col("status") == "ok").collect()
    on = dict(s.filter(pl.col("contrarian.enabled")).select("seed", "mean_valence_bias").iter_rows())
    off = dict(s.filter(~pl.col("contrarian.enabled")).select("seed", "mean_valence_bias").iter_rows())
    d = [on[k] - off[k] for k in on if k in off]
    key = next(k for k in f if k.endswith("mean_valence_bias, on - off"))
    assert f[key]["n"] == len(d) and f[key]["mean"] == pytest.approx(sum(d) / len(d), rel=1e-9)


def _recompute_salience_lift(f: dict) -> None:
    run = Path(f["runs"][0])
    sal = _rows(run, "entries").select("id", "salience")
    r = _rows(run, "retrievals").filter(pl.col("ids").list.len() > 0).with_row_index("r")

    def side(col):
        return (r.select("r", "golem_id", pl.col(col).alias("id")).explode("id").join(sal, on="id")
                .group_by("r", "golem_id").agg(pl.col("salience").mean()))
    j = side("salience_shadow").join(side("ids"), on=["r", "golem_id"], suffix="_served")
    got = _per_golem_mean(j, pl.col("salience") - pl.col("salience_served"))
    assert f["salience, shadow - served"]["mean"] == pytest.approx(got, rel=1e-9)


def _recompute_real_episode(f: dict) -> None:
    from sim import analysis as A
    run = Path(f["runs"][0])
    asset = _rows(run, "heartbeats")   # the drawdown of the Golems' asset: the one with the deepest fall
    m = A.market(run).collect().sort("sim_ms")
    worst = (m.with_columns((pl.col("close") / pl.col("close").cum_max().over("asset") - 1).alias("dd"))
             .filter(pl.col("asset") == A.golem_assets(run).collect()["asset"].mode().sort()[0])
             .sort("dd").row(0, named=True))
    near = pl.col("time_ms").is_between(worst["sim_ms"] - 12 * 3_600_000, worst["sim_ms"] + 12 * 3_600_000)
    g = asset.group_by("golem_id").agg(pl.col("a").filter(near).mean().alias("n"), pl.col("a").filter(~near).mean().alias("f"))
    assert f["emotion A, near - elsewhere"]["mean"] == pytest.approx((g["n"] - g["f"]).mean(), rel=1e-9)


RECOMPUTE = {"bias_drift.ipynb": _recompute_bias_drift, "contagion_wave.ipynb": _recompute_contagion_wave,
             "contrarian_ab.ipynb": _recompute_contrarian_ab, "salience_lift.ipynb": _recompute_salience_lift,
             "real_episode.ipynb": _recompute_real_episode}


def check_findings(conclusion: str) -> dict:
    """The FINDINGS line of a conclusion: each finding's direction agrees with its interval (judged
    here, not by the notebook's code) and the prose above prints that finding with that word."""
    line = next(x for x in conclusion.splitlines() if x.startswith("FINDINGS "))
    findings = json.loads(line[len("FINDINGS "):])
    prose = conclusion[:conclusion.index(line)]
    stats = {k: v for k, v in findings.items() if isinstance(v, dict)}
    assert stats, conclusion
    for name, f in stats.items():
        if f["n"] >= 2:
            assert f["low"] <= f["mean"] <= f["high"], name
            want = "positive" if f["low"] > 0 else "negative" if f["high"] < 0 else "null"
        else:
            want = "null"
        assert f["says"] == want, (name, f)
        said = [x for x in prose.splitlines() if name in x]
        assert said and all(re.search(rf"\b{want}\b", x) for x in said), (name, want, said)
    return findings


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes_and_its_conclusion_holds(name, tmp_path):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    t = time.perf_counter()
    # started outside the repository: the notebook finds what it needs through the installed package
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    _spent.append(time.perf_counter() - t)
    figures = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert figures >= 2, name
    conclusion = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    assert not re.search(r"\bnan\b", conclusion, re.I), conclusion
    RECOMPUTE[name](check_findings(conclusion))
    assert sum(_spent) < BUDGET_S, f"notebooks took {sum(_spent):.0f} s so far (budget {BUDGET_S:.0f} s)"


def test_a_word_that_contradicts_its_interval_is_caught():
    f = {"n": 6, "mean": -0.001, "low": -0.004, "high": 0.002, "says": "null"}
    ok = "drift: -0.001 [-0.004, +0.002], n = 6, null\nFINDINGS " + json.dumps({"drift": f})
    check_findings(ok)
    with pytest.raises(AssertionError):       # the prose says the curve grows while the interval contains 0
        check_findings(ok.replace("n = 6, null", "n = 6, positive"))
    with pytest.raises(AssertionError):       # the notebook's own verdict disagrees with its interval
        check_findings(ok.replace('"says": "null"', '"says": "negative"'))
