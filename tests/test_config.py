"""Configuration: every key typed, unknown keys errors, precedence of the layers (SPEC §15)."""
import pytest

from golem.config import default_config, default_table
from sim.config_layers import resolve, split_sets
from sim.scenario import InputError


def test_defaults_hold_the_spec_constants():
    c = default_config()
    assert (c.retrieval.w_semantic, c.retrieval.w_temporal, c.retrieval.w_importance, c.retrieval.w_emotional) == (0.40, 0.20, 0.25, 0.15)
    assert c.curator.every_ticks == 50 and c.contrarian.every_ticks == 100
    assert c.clade.contagion_attenuation == 0.3 and c.flashbulb.max_per_24h == 3
    assert c.decay.half_life_days == 3.0 and c.grimoire.capacity == 4096 and c.grimoire.embedding_dim == 64
    assert c.appraisal.emotion_half_life_s == 600 and c.appraisal.mood_half_life_s == 43_200
    assert c.appraisal.outlook_window_s == 30 * 86_400 and c.appraisal.reference_vol == "auto"
    assert c.dream.every_s == 86_400
    assert c.retrieval.salience_rank == "shadow" and c.retrieval.salience_rank_cap == 0.25


def test_precedence_defaults_file_scenario_env_set(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("retrieval: {top_k: 5}\ncurator: {every_ticks: 10}\nclade: {latency_s: 9.0}\n")
    cfg, src = resolve(str(f), {"retrieval.top_k": 6, "curator": {"every_ticks": 20}},
                       {"GOLEM_SALIENCE_RANK": "Live", "GOLEM__retrieval__top_k": "7"},
                       {"retrieval.top_k": 9})
    assert cfg.retrieval.top_k == 9 and src["retrieval.top_k"] == "--set"
    assert cfg.curator.every_ticks == 20 and src["curator.every_ticks"] == "scenario overrides"
    assert cfg.clade.latency_s == 9.0 and src["clade.latency_s"] == str(f)
    assert cfg.retrieval.salience_rank == "live"
    cfg, _ = resolve(None, {"retrieval.top_k": 6}, {"GOLEM__retrieval__top_k": "7"}, {})
    assert cfg.retrieval.top_k == 7   # environment above scenario


def test_spec_environment_variables():
    cfg, _ = resolve(environ={"GOLEM_REFLEX": "off", "GOLEM_REFLEX_MAX_PER_TURN": "9",
                              "GOLEM_REFLEX_PROMOTION_MIN": "5", "GOLEM_SALIENCE_RANK_CAP": "0.4",
                              "GOLEM_SALIENCE_RANK": "OFF"})
    assert cfg.reflex.enabled is False and cfg.reflex.max_per_turn == 5
    assert cfg.reflex.promotion_min == 5 and cfg.retrieval.salience_rank_cap == 0.4
    assert cfg.retrieval.salience_rank == "off"
    cfg, _ = resolve(environ={"GOLEM_REFLEX_MAX_PER_TURN": "0"})
    assert cfg.reflex.max_per_turn == 1


@pytest.mark.parametrize("layer, message", [
    ({"retrieval.bogus": 1}, "retrieval.bogus: unknown key"),
    ({"nosuch.key": 1}, "nosuch: unknown config section"),
    ({"retrieval.top_k": "many"}, "retrieval.top_k: Input should be a valid integer"),
    ({"retrieval.salience_rank": "sometimes"}, "retrieval.salience_rank: Input should be 'off', 'shadow' or 'live'"),
])
def test_bad_keys_name_the_layer_and_path(layer, message):
    with pytest.raises(InputError) as exc:
        resolve(sets=layer)
    (name, value), = layer.items()
    assert str(exc.value).startswith(f"--set {name}={value}: ") and message in str(exc.value)


def test_set_routes_config_and_scenario_keys():
    cfg, scen = split_sets(["retrieval.top_k=4", "market.tape=/x.parquet", "duration=2d", "curator.balance=false"])
    assert cfg == {"retrieval.top_k": 4, "curator.balance": False}
    assert scen == {"market.tape": "/x.parquet", "duration": "2d"}
    with pytest.raises(InputError, match="expected key=value"):
        split_sets(["retrieval.top_k"])
    with pytest.raises(InputError, match="unknown key"):
        split_sets(["wat.x=1"])


def test_every_default_key_is_typed():
    cfg = default_config()
    for section, keys in default_table().items():
        for k, v in keys.items():
            assert cfg.get(f"{section}.{k}") == v
