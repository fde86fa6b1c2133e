"""The strategy view says what each served memory is (category, kind, topic), as the entries table
records it, so a plug-in can act on "the top recalled memory is a warning"; a counterfactual that
changes a group's strategy starts it from that strategy's defaults unless given parameters."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import table
from golem.grimoire import CATEGORIES
from golem.memory_writer import KINDS
from golem.plugins import CohortView
from sim.run import execute

SCEN = """name: kinds
duration: 18h
seed: 3
market:
  events:
    - {kind: flash_crash, at: 8h, asset: ETH, duration: 2h, severity: high, impact: -0.10}
golems:
  - {count: 3, clade: mine, asset: ETH, strategy: 'kinds.py:spy', strategy_params: {level: 0.6}}
"""
PLUGIN = '''
import numpy as np
from golem import strategies

SEEN = []

def spy(view, level=0.6):
    SEEN.append(dict(t=view.now_ms, g=view.golem_id.copy(), ids=view.served_ids.copy(),
                     cat=view.served_category.copy(), kind=view.served_kind.copy(), topic=view.served_topic.copy()))
    warned = view.served_category[:, 0] == view.CATEGORIES.index("warning")
    return np.where(warned, 0.0, level)          # sell when the top recalled memory is a warning
'''


@pytest.fixture(scope="module")
def spied(tmp_path_factory):
    d = tmp_path_factory.mktemp("kinds")
    (d / "kinds.py").write_text(PLUGIN)
    (d / "s.yaml").write_text(SCEN)
    res = execute(d / "s.yaml", d / "run", environ={})
    mod = next(m for n, m in sys.modules.items() if n.startswith("golem_plugin_kinds"))
    return res.run_dir, list(mod.SEEN)


def test_the_view_names_category_kind_and_topic_of_each_served_entry(spied):
    run, seen = spied
    assert CohortView.CATEGORIES == CATEGORIES and CohortView.KINDS == KINDS
    ent = table(run, "entries").select("id", "category", "kind", "topic")
    by_id = {r[0]: r[1:] for r in ent.iter_rows()}
    checked, kinds = 0, set()
    for s in seen:
        for i in range(len(s["g"])):
            served = s["ids"][i] >= 0
            assert (s["cat"][i][~served] == -1).all() and (s["kind"][i][~served] == -1).all()
            assert all(t == "" for t in s["topic"][i][~served])
            for eid, c, k, t in zip(s["ids"][i][served], s["cat"][i][served], s["kind"][i][served],
                                    s["topic"][i][served]):
                if eid not in by_id:
                    continue              # an entry written after the last flush that recorded it: none expected
                assert (CATEGORIES[c], KINDS[k], t) == by_id[eid]
                kinds.add(KINDS[k])
                checked += 1
    assert checked > 1000 and len(kinds) >= 3, (checked, kinds)


def test_a_strategy_can_see_that_the_top_memory_is_a_warning(spied):
    """The rule "sell when the top recalled memory is a warning" fires on the ticks whose first
    served entry the entries table calls a warning, and only on those."""
    run, seen = spied
    ent = dict(table(run, "entries").select("id", "category").iter_rows())
    top_view = [(s["t"], g, CATEGORIES[c] if c >= 0 else None) for s in seen for g, c in zip(s["g"], s["cat"][:, 0])]
    rt = table(run, "retrievals").select("time_ms", "golem_id", pl.col("ids").list.first().alias("top"))
    top_table = {(t, g): ent.get(i) for t, g, i in rt.iter_rows()}
    fired = [(t, g) for t, g, c in top_view if c == "warning"]
    assert fired and all(top_table[k] == "warning" for k in fired)
    assert sum(v == "warning" for k, v in top_table.items() if k in {(t, g) for t, g, _ in top_view}) == len(fired)


def test_a_counterfactual_that_changes_the_strategy_drops_the_old_params(spied, tmp_path):
    """kinds.py:spy's `level` would be an unexpected keyword for momentum: changing the strategy alone
    must start momentum from its defaults, and parameters given with it must be used."""
    from sim.replay import counterfactual
    run, _ = spied
    cf = counterfactual(run, ["golems.0.strategy=momentum", "duration=2h"], tmp_path / "cf").run_dir
    m = __import__("json").loads((cf / "manifest.json").read_text())
    g = m["scenario"]["golems"][0]
    assert g["strategy"] == "momentum" and not g.get("strategy_params")
    cf2 = counterfactual(run, ["golems.0.strategy=momentum", "golems.0.strategy_params={trend_window: 6}",
                               "duration=2h"], tmp_path / "cf2").run_dir
    g2 = __import__("json").loads((cf2 / "manifest.json").read_text())["scenario"]["golems"][0]
    assert g2["strategy_params"] == {"trend_window": 6}
