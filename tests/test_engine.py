"""The engine end to end: runs whose output tables are checked (issue: the engine)."""
from __future__ import annotations

import ast

import numpy as np
import pytest
import polars as pl

from conftest import ROOT, SCENARIOS, run_scenario, table
from sim.recorder import SCHEMAS, TABLES

H = 3_600_000


def test_golem_never_imports_simpy_or_sim():
    for f in (ROOT / "golem").rglob("*.py"):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                assert n.split(".")[0] not in ("simpy", "sim"), f"{f.name} imports {n}"


def _sim_imports(path) -> set[str]:
    """The sim modules a sim module imports, at module level or inside a function: an import
    deferred into a function hides a cycle from Python at import time, not from a reader."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("sim.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "sim":
                found |= {a.name for a in node.names}
            elif node.module.startswith("sim."):
                found.add(node.module.split(".")[1])
    return found - {path.stem}


def test_sim_modules_import_one_another_without_cycles():
    """The arrows between sim modules run one way (docs/architecture.md)."""
    mods = {f.stem: f for f in (ROOT / "sim").glob("*.py") if f.stem != "__init__"}
    deps = {m: sorted(_sim_imports(f) & set(mods)) for m, f in mods.items()}
    done: set[str] = set()

    def visit(m, path):
        assert m not in path, "import cycle: " + " -> ".join(path[path.index(m):] + [m])
        if m not in done:
            for d in deps[m]:
                visit(d, path + [m])
            done.add(m)
    for m in sorted(deps):
        visit(m, [])


def test_the_world_builds_no_table():
    """The world emits what happened; sim.recording alone turns it into Arrow columns."""
    imported = set()
    for node in ast.walk(ast.parse((ROOT / "sim" / "world.py").read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert "pyarrow" not in imported


def test_every_scenario_validates(monkeypatch):
    """Every shipped scenario is valid input. The memory check is the host's (population.yaml needs
    more than this 24 GiB machine has, docs/performance.md): here every world is given room, and
    test_population_is_refused_with_its_estimate_where_it_does_not_fit checks the refusal."""
    from sim import resources
    from sim.run import prepare
    monkeypatch.setattr(resources, "available", lambda environ=None: (2**50, "test"))
    for f in sorted(SCENARIOS.glob("*.yaml")):
        if f.stem == "real_tape":
            continue   # needs --set market.tape=... (tested with the shared data)
        sc, cfg, _, _ = prepare(f)
        assert sc.name and sc.duration_s > 0, f


def test_population_is_refused_with_its_estimate_where_it_does_not_fit():
    """100,000 Golems x 1,024 entries: a clean refusal naming the estimate, before anything is allocated."""
    from sim.errors import InputError
    from sim.run import prepare
    with pytest.raises(InputError, match=r"needs about 22\.7 GiB of memory \(Grimoire 20\.9 GiB = 100,000 Golems "
                                         r"x 1,024 entries x 219 B.*more than the 16\.0 GiB of GOLEM_MEMORY_LIMIT"):
        prepare(SCENARIOS / "population.yaml", environ={"GOLEM_MEMORY_LIMIT": "16GiB"}, record=False)


def test_a_recorded_population_is_refused_for_its_push_wave_and_told_to_run_without_tables(monkeypatch):
    """Recorded, the population's exploit makes every Golem push to its 999 siblings: 10^8 contagion
    rows held until the flush (600 B a copy, 55.8 GiB), which no 24 GiB machine has; without tables
    the same world fits, and the refusal says so. Before the wave was counted, such a run was
    accepted and killed by the kernel's OOM killer 14 simulated hours in."""
    from sim import resources
    from sim.errors import InputError
    from sim.run import prepare
    monkeypatch.setattr(resources, "available", lambda environ=None: (23 * 2**30, "test room"))
    with pytest.raises(InputError, match=r"needs about 79\.7 GiB .*push wave 55\.8 GiB\), more than the 23\.0 GiB "
                                         r"of test room; .*, or --no-record \(without tables it needs about 22\.7 GiB\)$"):
        prepare(SCENARIOS / "population.yaml")
    prepare(SCENARIOS / "population.yaml", record=False)


def test_the_push_wave_is_every_member_of_each_clade_pushing_to_every_sibling(tmp_path):
    """Clade sizes summed over groups: a Clade of 3 + 2 and one of 4 hold 5 x 4 + 4 x 3 = 32 copies
    of a wave, at 600 B each; nothing of it without recording."""
    from sim import resources
    from sim.run import prepare
    (tmp_path / "s.yaml").write_text(
        "name: w\nduration: 1h\nclades: [{name: a}, {name: b}]\n"
        "golems:\n  - {count: 3, clade: a}\n  - {count: 2, clade: a}\n  - {count: 4, clade: b}\n")
    sc, cfg, _, _ = prepare(tmp_path / "s.yaml")
    assert resources.estimate(sc, cfg, record=True)["push wave"] == 32 * 600
    assert "push wave" not in resources.estimate(sc, cfg, record=False)


def test_the_row_buffers_count_each_groups_heartbeats_in_a_flush(tmp_path):
    """Rows buffered until a flush, a row per Golem-heartbeat: 2 Golems at 120 s, 3 once per bar of
    a 600 s market step and 4 at the default heartbeat (300 s), over min(2 h, a 3,600 s flush):
    2 x 30 + 3 x 6 + 4 x 12 = 126 rows. A tape's bar is not known before it is read: the default."""
    from sim import resources
    from sim.run import prepare
    (tmp_path / "s.yaml").write_text(
        "name: b\nduration: 2h\nmarket: {step_s: 600}\noverrides: {recording.flush_every_s: 3600}\n"
        "golems:\n  - {count: 2, interval: 120}\n  - {count: 3, interval: bar}\n  - {count: 4}\n")
    sc, cfg, _, _ = prepare(tmp_path / "s.yaml")
    assert [resources.interval_s(sc, g, cfg) for g in sc.golems] == [120, 600, 300]
    assert resources.estimate(sc, cfg, record=True)["buffers"] == 126 * resources.PER_ROW
    assert "buffers" not in resources.estimate(sc, cfg, record=False)
    tape = sc.model_copy(update={"market": sc.market.model_copy(update={"tape": object()})})
    assert resources.interval_s(tape, sc.golems[1], cfg) == cfg.heartbeat.interval_s == 300


def test_population_ticks_in_ten_cohorts_of_ten_thousand():
    """scenarios/population.yaml's comment: 100 Clades of 1,000 in ten cohorts of 10,000 (offsets
    0, 30, ..., 270 s, ten consecutive Clades each), so the first ten Clades are one whole cohort."""
    import yaml

    from sim.scenario import parse_duration
    doc = yaml.safe_load((SCENARIOS / "population.yaml").read_text())
    cohorts: dict[float, list[str]] = {}
    for g in doc["golems"]:
        cohorts.setdefault(parse_duration(g["start"]), []).extend([g["clade"]] * g["count"])
    assert sorted(cohorts) == [30.0 * i for i in range(10)]
    assert [sorted(set(m), key=lambda c: int(c[1:])) for m in cohorts.values()] == [
        [f"c{10 * i + j}" for j in range(10)] for i in range(10)]
    assert all(len(m) == 10_000 for m in cohorts.values())


def test_tables_have_fixed_schemas_and_a_manifest(flash_run):
    run = flash_run.run_dir
    m = flash_run.manifest
    assert m["status"] == "complete" and set(m["hashes"]) == set(TABLES)
    for t in TABLES:
        if m["row_counts"][t]:
            df = pl.read_parquet(run / t / "*.parquet")
            assert df.columns == SCHEMAS[t].names
    assert (run / "log.jsonl").read_text().count("run_complete") == 1


def test_entry_content_names_kind_topic_and_outcome(flash_run):
    """`content` is "<kind> <topic>", with ": outcome <%+.2f>" for entries that have an outcome
    (Arrow assembles it on the writer thread; here Python formats it from the row's own columns)."""
    e = table(flash_run.run_dir, "entries")
    assert e["has_outcome"].sum() > 50 and (~e["has_outcome"]).sum() > 50
    want = [f"{k} {t}: outcome {o:+.2f}" if h else f"{k} {t}"
            for k, t, o, h in zip(e["kind"], e["topic"], e["outcome"], e["has_outcome"])]
    assert e["content"].to_list() == want


def test_one_heartbeat_per_golem_tick_in_order(flash_run):
    h = table(flash_run.run_dir, "heartbeats")
    n_golems = 14
    ticks = 3 * 86400 // 300       # ticks at 0, 300, ..., in [0, 3d): the end time is exclusive
    assert h.height == n_golems * ticks
    assert h.group_by("golem_id").agg(pl.col("tick").max())["tick"].to_list() == [ticks - 1] * n_golems
    # written in (time, golem) order
    assert h.select(["time_ms", "golem_id"]).equals(h.select(["time_ms", "golem_id"]).sort(["time_ms", "golem_id"]))
    assert set(h["state_path"].unique()) <= {"SENSING>DECIDING>ACTING>REFLECTING", "DREAMING",
                                            "SENSING>DECIDING>ACTING>REFLECTING>TERMINAL>DEAD"}
    # one DREAMING heartbeat per simulated day at each Golem's own phase (SPEC §8): three each in 3 d,
    # a day apart (to the 300 s cadence), and a Clade never sleeps all at once
    dreams = h.filter(pl.col("state_path") == "DREAMING").sort("golem_id", "time_ms")
    assert dreams.group_by("golem_id").len()["len"].to_list() == [3] * n_golems
    gaps = dreams.group_by("golem_id").agg(pl.col("time_ms").diff().drop_nulls())["time_ms"].explode()
    assert gaps.is_between(86_400_000, 86_400_000 + 300_000).all()
    first = dreams.group_by("golem_id").agg(pl.col("time_ms").min(), pl.col("clade_id").first())
    assert (first.group_by("clade_id").agg(pl.col("time_ms").n_unique())["time_ms"] > 1).all()


def test_flash_crash_pleasure_falls_and_arousal_rises(flash_run):
    h = table(flash_run.run_dir, "heartbeats")
    before = h.filter((pl.col("time_ms") >= 34 * H) & (pl.col("time_ms") < 36 * H)).group_by("golem_id").agg(
        p0=pl.col("p").mean(), a0=pl.col("a").mean())
    during = h.filter((pl.col("time_ms") >= 36 * H) & (pl.col("time_ms") < 38 * H)).group_by("golem_id").agg(
        p1=pl.col("p").mean(), a1=pl.col("a").mean())
    held = h.filter((pl.col("time_ms") >= 36 * H) & (pl.col("time_ms") < 38 * H)).group_by("golem_id").agg(
        held=pl.col("exposure").mean() > 0.1)
    j = before.join(during, on="golem_id").join(held, on="golem_id")
    assert (j["a1"] > j["a0"]).mean() >= 0.8, j                 # arousal rises for almost every Golem
    holding = j.filter(pl.col("held"))
    assert holding.height >= 2 and (holding["p1"] < holding["p0"]).all(), j   # pleasure falls for those holding
    out = j.filter(~pl.col("held"))                               # those that sold at once stay pleased
    assert out.height >= 2 and (out["p1"] > 0).all(), j


def test_flash_crash_holders_entries_are_negative_and_recall_grows_mood_congruent(flash_run):
    h = table(flash_run.run_dir, "heartbeats").filter((pl.col("time_ms") >= 36 * H) & (pl.col("time_ms") < 38 * H))
    holding = h.group_by("golem_id").agg(pl.col("exposure").mean()).filter(pl.col("exposure") > 0.1)["golem_id"]
    e = table(flash_run.run_dir, "entries").filter(
        (pl.col("created_ms") >= 36 * H) & (pl.col("created_ms") < 38 * H) & pl.col("has_tag")
        & pl.col("golem_id").is_in(holding.to_list()))
    assert e.height > 50
    assert (e["p"] < 0).mean() > 0.6
    # recall is mood-congruent, the more so once the crash has moved the mood (the query is the mood,
    # SPEC §4.1): the served top-k's emotional factor above the pool's, after the crash more than on day 1
    rr = table(flash_run.run_dir, "retrievals").filter(pl.col("pool_n") > 0)
    congruence = (pl.col("served_mean_emotional") - pl.col("pool_mean_emotional")).mean()
    day1 = rr.filter(pl.col("time_ms") < 24 * H).select(congruence).item()
    after = rr.filter(pl.col("time_ms") >= 38 * H).select(congruence).item()
    assert after > 0.05 and after > day1 + 0.03


def test_retrieval_records_are_consistent(flash_run):
    r = table(flash_run.run_dir, "retrievals").head(2000)
    for row in r.iter_rows(named=True):
        k = len(row["ids"])
        assert k == len(row["scores"]) == len(row["semantic"]) == len(row["emotional"]) == len(row["valences"])
        assert k <= 8 and row["pool_n"] >= k
        assert row["scores"] == sorted(row["scores"], reverse=True) or row["anti_rumination"]
        w = np.array([0.40, 0.20, 0.25, 0.15])
        f = np.array([row["semantic"], row["temporal"], row["importance"], row["emotional"]])
        if k and not row["anti_rumination"]:
            assert np.allclose(w @ f, row["scores"], atol=1e-9)
        assert row["salience_shadow"] is not None and len(row["salience_shadow"]) == k


def test_entries_carry_the_tick_affect(flash_run):
    e = table(flash_run.run_dir, "entries")
    h = table(flash_run.run_dir, "heartbeats").select("golem_id", "tick", "p", "a", "d")
    own = e.filter((pl.col("provenance") == -1) & (pl.col("kind") == "price-move"))
    j = own.join(h, on=["golem_id", "tick"], suffix="_hb")
    assert j.height == own.height
    assert np.allclose(j["a"], j["a_hb"]) and np.allclose(j["d"], j["d_hb"])
    assert (e["salience"] >= 0.3).all() or e.filter(pl.col("salience") < 0.3)["flashbulb"].all()


def test_same_scenario_and_seed_give_byte_identical_tables(tmp_path):
    a = run_scenario("clade_panic" if (SCENARIOS / "clade_panic.yaml").exists() else "default", tmp_path / "a",
                     sets=["duration=1d", "clade.jitter_s=1.5"])
    b = run_scenario("clade_panic" if (SCENARIOS / "clade_panic.yaml").exists() else "default", tmp_path / "b",
                     sets=["duration=1d", "clade.jitter_s=1.5"])
    for t in TABLES:
        fa = sorted((a.run_dir / t).glob("*.parquet"))
        fb = sorted((b.run_dir / t).glob("*.parquet"))
        assert [f.name for f in fa] == [f.name for f in fb]
        for x, y in zip(fa, fb):
            assert x.read_bytes() == y.read_bytes(), f"{t}/{x.name} differs"
    assert a.manifest["hashes"] == b.manifest["hashes"]
    assert a.manifest["row_counts"]["events"] > 0
    c = run_scenario("default", tmp_path / "c", seed=43, sets=["duration=1d"])
    d = run_scenario("default", tmp_path / "d", seed=42, sets=["duration=1d"])
    assert c.manifest["hashes"]["heartbeats"] != d.manifest["hashes"]["heartbeats"]


def test_adding_a_golem_does_not_shift_another_golems_individuality(tmp_path):
    from sim.world import World
    from sim.run import prepare, build_tape
    sc, cfg, _, seed = prepare(SCENARIOS / "calm.yaml")
    w1 = World(sc, cfg, build_tape(sc, seed), seed)
    sc2 = sc.model_copy(update={"golems": [sc.golems[0].model_copy(update={"count": 9})]})
    w2 = World(sc2, cfg, build_tape(sc2, seed), seed)
    assert np.allclose(w1.pop.baseline, w2.pop.baseline[:6])
    assert np.allclose(w1.pop.trend_scale, w2.pop.trend_scale[:6])


def test_cohorts_batch_golems_sharing_a_cadence(tmp_path):
    from sim.world import World
    from sim.run import prepare, build_tape
    s = tmp_path / "s.yaml"
    s.write_text("name: c\nduration: 2h\ngolems:\n  - {count: 3}\n  - {count: 2, interval: 600, start: 60}\n"
                 "  - {count: 1}\n")
    sc, cfg, _, seed = prepare(s)
    w = World(sc, cfg, build_tape(sc, seed), seed)
    assert [(c.interval_s, c.start_s, c.members.tolist()) for c in w.cohorts] == [(300.0, 0.0, [0, 1, 2, 5]), (600.0, 60.0, [3, 4])]
    res = run_scenario(s, tmp_path / "r")
    h = table(res.run_dir, "heartbeats")
    counts = dict(h.group_by("golem_id").len().sort("golem_id").iter_rows())
    assert counts == {0: 24, 1: 24, 2: 24, 3: 12, 4: 12, 5: 24}
    assert h.filter(pl.col("golem_id") == 3)["time_ms"].to_list()[:2] == [60_000, 660_000]


def test_event_rows_are_numbered_in_the_order_they_happen(flash_run):
    """Single events, column batches (anti-rumination) and Clade deliveries share one sequence:
    0..n-1 without gaps, non-decreasing in time, each batch's rows in a block."""
    ev = table(flash_run.run_dir, "events").sort("seq")
    assert ev["seq"].to_list() == list(range(ev.height))
    assert (ev["time_ms"].diff().drop_nulls() >= 0).all()
    kinds = set(ev["kind"].to_list())
    assert {"anti_rumination", "contagion", "flashbulb"} <= kinds
    ar = ev.filter(pl.col("kind") == "anti_rumination")
    assert (ar["payload"] == "{}").all() and (ar["other_golem"] == -1).all() and ar["value"].is_between(0, 1).all()


def test_every_imported_package_is_a_declared_dependency():
    """`pip install -e .` on a fresh machine brings every package golem/ and sim/ import at module
    level; an import deferred into a function may come from an extra (dask, for sweeps on a cluster).
    A package that arrives only through another extra's dependencies (click through dask) would
    work in the test environment and fail in the README's first command."""
    import re
    import sys
    import tomllib
    from importlib.metadata import packages_distributions
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(reqs):       # "dask[distributed]>=2024.1" names dask and its extra's package, distributed
        return {n.lower().replace("_", "-") for r in reqs for n in re.findall(r"[\w.-]+", r.split(">")[0].split("=")[0])}
    core = names(meta["dependencies"])
    extras = set().union(*(names(v) for v in meta["optional-dependencies"].values()))
    through = {"llvmlite": "numba"}     # numba's own dependency, imported for its intrinsics
    dists = packages_distributions()
    for f in sorted([*(ROOT / "golem").glob("*.py"), *(ROOT / "sim").glob("*.py")]):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module.split(".")[0]]
            else:
                continue
            allowed = core if node.col_offset == 0 else core | extras
            for m in mods:
                if m in sys.stdlib_module_names or m in ("golem", "sim"):
                    continue
                found = {d.lower().replace("_", "-") for d in dists.get(m, [m])}
                assert found & allowed or through.get(m) in core, f"{f.name}:{node.lineno} imports {m}, not a dependency"
