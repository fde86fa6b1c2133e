"""HDC fingerprints inside the mind (SPEC §11): somatic retrieval, compositional queries, dreams."""
import numpy as np
import polars as pl
import pytest

from conftest import events, payloads, run_scenario, table
from golem import hdc
from golem.grimoire import Grimoire
from golem.retrieval import RetrievalParams, retrieve_somatic_hdc


@pytest.fixture(scope="module")
def hdc_run(tmp_path_factory):
    return run_scenario("exploit", tmp_path_factory.mktemp("hdc") / "run", sets=["retrieval.mode=somatic_hdc"])


def test_every_entry_is_fingerprinted_like_its_tag(hdc_run):
    mind = hdc_run.world.mind
    gr = mind.gr
    live = np.flatnonzero(gr.cols["id"] >= 0)
    assert gr.fp is not None and (gr.fp[live] != 0).any(axis=1).all()
    s = live[:50]
    again = mind.fingerprints(gr.cols["p"][s], gr.cols["a"][s], gr.cols["d"][s], gr.cols["emotion"][s],
                              gr.cols["i0"][s], gr.cols["regime"][s], gr.cols["scope"][s])
    # the gas role depends on the tick an entry was written; every other role must agree exactly
    sims = [hdc.similarity(x, y) for x, y in zip(again, gr.fp[s])]
    assert min(sims) > 0.8


def test_somatic_score_is_the_spec_blend():
    gr = Grimoire(1, 4, 2)
    gr.fp = np.zeros((4, hdc.N_WORDS), np.uint64)
    gr.insert(np.array([0, 0]), np.array([[1.0, 0], [0.0, 1]]),
              dict(created_ms=0, last_access_ms=0, window_ms=np.inf, importance=np.array([0.2, 0.9], np.float32)))
    im = hdc.ItemMemory(3)
    gr.fp[0] = hdc.encode((-0.5, 0.8, -0.2), "fear", 0.6, "crash", im)
    gr.fp[1] = hdc.encode((0.5, -0.2, 0.4), "trust", 0.4, "calm", im)
    state = hdc.encode((-0.5, 0.8, -0.2), "fear", 0.6, "crash", im)[None, :]
    from golem.config import default_config
    res = retrieve_somatic_hdc(gr, np.array([0]), np.array([[1.0, 0]], np.float32), np.array([[-0.5, 0.8, -0.2]]),
                               3_600_000, RetrievalParams.from_config(default_config()), state)
    sim1 = hdc.similarity(state[0], gr.fp[1])
    want = {0: 0.30 * 0.995 + 0.30 * 0.2 + 0.25 * 1.0 + 0.15 * 1.0,
            1: 0.30 * 0.995 + 0.30 * 0.9 + 0.25 * 0.0 + 0.15 * sim1}
    got = dict(zip(res.slots[0, :2].tolist(), res.scores[0, :2].tolist()))
    assert got == pytest.approx(want, abs=1e-6)
    assert hdc.somatic_score(0.995, 0.2, 1.0, 1.0) == pytest.approx(want[0], abs=1e-9)
    # the weights are the config's retrieval.hdc_* keys
    from dataclasses import replace
    res = retrieve_somatic_hdc(gr, np.array([0]), np.array([[1.0, 0]], np.float32), np.array([[-0.5, 0.8, -0.2]]),
                               3_600_000, replace(RetrievalParams.from_config(default_config()),
                                                  somatic_weights=(0.0, 1.0, 0.0, 0.0)), state)
    assert dict(zip(res.slots[0, :2].tolist(), res.scores[0, :2].tolist())) == pytest.approx({0: 0.2, 1: 0.9})


def test_compositional_query_finds_fearful_exploit_memories(hdc_run):
    mind = hdc_run.world.mind
    e = table(hdc_run.run_dir, "entries").filter(pl.col("golem_id") == 0)
    hits = mind.compose_query(0, k=10, emotion="fear", protocol="aave")
    assert len(hits) == 10 and hits == sorted(hits, key=lambda x: -x[1])
    top = e.filter(pl.col("id").is_in([h[0] for h in hits]))
    rest = e.filter(~pl.col("id").is_in([h[0] for h in hits]))
    assert (top["emotion"] == "fear").mean() > (rest["emotion"] == "fear").mean()


def test_dreams_replay_what_resembles_high_arousal(hdc_run):
    """Under somatic_hdc a dream replays the entries nearest a fear-like, high-arousal prototype:
    across the full replays (16 chosen among at least three times as many of the dreamer's own
    entries written before it, tags as written), the replayed are more aroused than what was held,
    on average and in at least three dreams of four."""
    ev = events(hdc_run.run_dir, "dream")
    e = table(hdc_run.run_dir, "entries").select("id", "a", "golem_id", "created_ms")
    gaps = []
    for (g, t), x in zip(ev.select("golem_id", "time_ms").iter_rows(), payloads(ev)):
        held = e.filter((pl.col("golem_id") == g) & (pl.col("created_ms") < t))
        if len(x["replayed"]) < 16 or held.height < 48:
            continue
        gaps.append(held.filter(pl.col("id").is_in(x["replayed"]))["a"].mean() - held["a"].mean())
    assert len(gaps) >= 4
    assert sum(gaps) / len(gaps) > 0 and sum(g > 0 for g in gaps) >= 0.75 * len(gaps)


def test_hdc_runs_are_deterministic(hdc_run, tmp_path):
    again = run_scenario("exploit", tmp_path / "again", sets=["retrieval.mode=somatic_hdc"])
    assert again.manifest["hashes"] == hdc_run.manifest["hashes"]
