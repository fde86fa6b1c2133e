"""docs/api.md: every Python snippet runs as written, in order, from the repository root, and
every entry point of the API is shown."""
from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_every_entry_point_has_a_snippet():
    code = "\n".join(snippets())
    for name in ("Simulation.from_yaml(", ".step()", ".run_for(", ".run(until=", ".run()", ".population()",
                 ".grimoire(", ".result", "memory=True", "out=", "register(", "strategy_params",
                 "appraisal_hooks", 'manifest["plugins"]'):
        assert name in code, name


def test_the_snippets_run(monkeypatch, tmp_path):
    """From a working directory that looks like the repository root (its `scenarios/`) and holds
    nothing else: whatever the snippets write lands there, never in the repository (whose `runs/`
    a user may be filling while the suite runs)."""
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    monkeypatch.chdir(tmp_path)
    from golem import hooks, strategies
    before = (dict(strategies.REGISTRY), dict(hooks.REGISTRY))
    ns: dict = {"__name__": "api_docs"}
    try:
        for i, src in enumerate(snippets()):
            exec(compile(src, f"docs/api.md snippet {i + 1}", "exec"), ns)
    finally:
        strategies.REGISTRY.clear()
        strategies.REGISTRY.update(before[0])
        hooks.REGISTRY.clear()
        hooks.REGISTRY.update(before[1])
    # nothing written where the snippets run: in-memory runs, and a temporary run directory
    assert sorted(os.listdir(tmp_path)) == ["scenarios"]
    # what the snippets claim
    assert ns["sim"].status == "complete"
    assert ns["targets"].collect().sort("clade_id")["target_exposure"][0] <= 0.55
    assert ns["a"]["with"] != ns["a"]["without"]
