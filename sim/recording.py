"""What happened, as table rows (SPEC §13): the one place where the world's output becomes tables.

The World emits what happened (the mind's `TickOutput` each cohort tick, the Clade's deliveries,
the market's bars as they become known); `Tables` turns each into the columns of its table and
hands them to the `Recorder` (sim.recorder), which buffers, sorts and writes the Parquet parts.
Strings that take long to build (entry content, event payload JSON) are left as `Formatted`
columns for the recorder's writer thread; names are `Names` codes. Event rows are numbered in the
order they are recorded (`seq`), deliveries and tick events in one sequence.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from golem import grimoire as gm
from golem import pad as padm
from golem.heartbeat import STATE_PATHS, EventBatch, TickOutput
from golem.memory_writer import KINDS
from golem.population import PHASES, SEVERITIES, TIERS, Population
from sim.market import Tape
from sim.recorder import (Formatted, Lists, Names, Recorder, join_strings, json_floats, json_int_lists, json_ints,
                          json_objects, json_objects_by_kind, json_strings, signed_fixed2)

#: json.dumps(payload, sort_keys=True, default=float) without building an encoder per event
_payload_json = json.JSONEncoder(sort_keys=True, default=float).encode

_EVENT_NUMBERS = {"time_ms": np.int64, "golem_id": np.int64, "clade_id": np.int64, "tick": np.int64, "entry_id": np.int64,
                  "other_golem": np.int64, "value": np.float64}


def _entry_content(c: dict) -> pa.Array:
    """entries.content: "<kind> <topic>", and "<kind> <topic>: outcome <%+.2f>" for entries with
    an outcome (built on the writer thread, `Formatted`)."""
    joined = join_strings(c["kind"], " ", c["topic"])
    idx = np.flatnonzero(c["has_outcome"])
    if idx.size == 0:
        return joined
    told = join_strings(Names(c["kind"].names, c["kind"].codes[idx]), " ", c["topic"].take(idx), ": outcome ",
                        signed_fixed2(c["outcome"][idx]))
    return pc.replace_with_mask(joined, pa.array(c["has_outcome"]), told)


def _contagion_payload(c: dict) -> pa.Array:
    """The `contagion` events' payload JSON from clade.receive's columns, by Arrow string kernels:
    the same text `_payload_json` writes for the dict, key for key (built on the writer thread)."""
    f, b, a, tag = json_floats, c["pad_before"], c["pad_after"], c["tag"]
    return join_strings(
        '{"alert_type": ', json_strings(c["alert"]), ', "inherited_confidence": ', f(c["inherited_confidence"]),
        ', "latency_ms": ', json_ints(c["latency_ms"]),
        ', "pad_after": [', f(a[:, 0]), ", ", f(a[:, 1]), ", ", f(a[:, 2]),
        '], "pad_before": [', f(b[:, 0]), ", ", f(b[:, 1]), ", ", f(b[:, 2]),
        '], "sender_entry": ', json_ints(c["sender_entry"]), ', "signal": ', json_strings(c["signal"]),
        ', "stored": ', Names(("false", "true"), np.asarray(c["stored"]).astype(np.int8)),
        ', "tag": [', f(tag[:, 0]), ", ", f(tag[:, 1]), ", ", f(tag[:, 2]), "]}")


def _payload_column(v):
    """An `EventBatch` payload column as `json_objects` takes it: lists of ints as JSON text (a
    list of lists: Python; a (values, offsets) pair: Arrow, on the writer thread), numbers as numpy."""
    if isinstance(v, list):
        return json_int_lists(v)
    if isinstance(v, tuple):
        values, offsets = v
        return pa.ListArray.from_arrays(pa.array(np.asarray(offsets, dtype=np.int32)),
                                        pa.array(np.asarray(values, dtype=np.int64)))
    return np.array(v)


def _strings(a) -> pa.Array:
    """A string column as Arrow now, on the simulation thread (a few µs per tick): converted on the
    writer thread, a column of Python strings would hold the GIL for the whole conversion and stall
    the simulation's Python for as long."""
    return pa.array(a, type=pa.string(), from_pandas=True)


@functools.lru_cache(maxsize=8)
def _empty_lists(n: int) -> pa.Array:
    """n empty list<int64> cells (no Python list per row); Arrow arrays are immutable, so the
    cohort's one size is built once."""
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], type=pa.int64()))


class NonFiniteValue(ArithmeticError):
    """A value overflowed during the run (inf or NaN where a table needs a number): the run fails
    rather than record it (validate's bounds keep every known input from getting here)."""


def _check_finite(h: dict, columns: tuple[str, ...]) -> None:
    """The heartbeats' money and affect columns are finite, else NonFiniteValue naming the first."""
    for c in columns:
        v = np.asarray(h[c]) if c in h else None
        if v is not None and v.dtype.kind == "f" and not np.isfinite(v).all():
            i = int(np.flatnonzero(~np.isfinite(v))[0])
            raise NonFiniteValue(f"heartbeats.{c} is {float(v[i])!r} for Golem {int(h['golem_id'][i])} at "
                                 f"time_ms {int(h['time_ms'][i])}: a value overflowed; expected finite "
                                 "values (smaller money, prices, costs or event sizes)")


class Tables:
    """Turns what the world emits into rows of the run's tables, through `rec` (None: a run that
    records nothing). Holds the events' running sequence number and the Clade deliveries waiting
    to be recorded (a 100-Golem Clade turns one flashbulb into 99 deliveries: they are recorded
    in batches, at the next tick's rows or flush)."""

    def __init__(self, tape: Tape, cfg, pop: Population):
        self.tape, self.cfg, self.pop = tape, cfg, pop
        self.rec: Recorder | None = None
        self.event_seq = 0                          # the next event row's `seq`
        self._delivered_events: list[dict] = []     # clade.receive's columns, one dict per delivery
        self._delivered_entries: list[dict] = []    # the copies the receivers stored

    # ---------------------------------------------------------------- what the world hands in
    def tick(self, out: TickOutput) -> int:
        """A cohort tick's rows (after the deliveries waiting, so `seq` follows the order things
        happened). Returns the number of event rows recorded."""
        n = self.deliveries()
        if out.heartbeats:
            self._record_heartbeats(out.heartbeats)
        if out.retrievals:
            self._record_retrievals(out.retrievals)
        for rows in out.entries:
            self._record_entries(rows)
        if out.events:
            n += self._record_events(out.events)
        for snap in out.snapshots:
            self._record_snapshot(snap)
        return n

    def delivered(self, events: dict, entries: list[dict]) -> None:
        """A Clade delivery's contagion columns and stored copies, held until the next tick or flush."""
        self._delivered_events.append(events)
        self._delivered_entries.extend(entries)

    def deliveries(self) -> int:
        """Record the deliveries waiting; returns the number of event rows recorded."""
        n = 0
        for batch in self._delivered_events:
            n += self._record_contagion(batch)
        self._delivered_events = []
        if self._delivered_entries:
            rows = self._delivered_entries
            if len(rows) == 1:
                self._record_entries({k: np.atleast_1d(v) for k, v in rows[0].items()})
            else:
                self._record_entries({k: np.concatenate([np.atleast_1d(r[k]) for r in rows]) for k in rows[0]})
            self._delivered_entries = []
        return n

    def market(self, lo: int, hi: int) -> None:
        """The tape's bars lo .. hi - 1, one row per bar and asset."""
        t = self.tape
        lo = max(lo, 0)
        if hi <= lo:
            return
        A = len(t.assets)
        steps = np.repeat(np.arange(lo, hi), A)
        aidx = np.tile(np.arange(A), hi - lo)
        self.rec.add("market", dict(
            time_ms=t.time_ms[steps], step=steps, asset=Names(t.assets, aidx),
            open=t.open[steps, aidx], high=t.high[steps, aidx], low=t.low[steps, aidx], close=t.close[steps, aidx],
            volume=t.volume[steps, aidx], tvl=t.tvl[steps, aidx], gas=t.gas[steps], funding_rate=t.funding[steps],
            regime=Names(t.regime_names, t.regime[steps])))

    def tape_events(self) -> None:
        """The tape's scheduled events, once at the start of a run."""
        t = self.tape
        if not t.events:
            return
        sev = ("none", "low", "medium", "high")
        self.rec.add("tape_events", dict(
            time_ms=[e.time_ms for e in t.events], kind=[e.kind for e in t.events],
            asset=[t.assets[e.asset] if e.asset >= 0 else "*" for e in t.events],
            severity=[sev[e.severity] for e in t.events], impact=[e.impact for e in t.events],
            duration_ms=[e.duration_ms for e in t.events], tokens=[e.tokens for e in t.events],
            detect_lag_ms=[e.detect_lag_ms for e in t.events], detect_jitter_ms=[e.detect_jitter_ms for e in t.events],
            early_detectors=[list(e.early_detectors) for e in t.events]))

    # ---------------------------------------------------------------- one table each
    def _record_heartbeats(self, h: dict) -> None:
        _check_finite(h, ("value", "cash", "budget", "vitality", "price", "p", "a", "d", "intensity", "exposure"))
        self.rec.add("heartbeats", dict(
            h, state_path=Names(STATE_PATHS, h["state_path"]), emotion=Names(padm.EMOTION_CODES, h["emotion"]),
            label=Names(gm.LABELS, h["label"]), tier=Names(TIERS, h["tier"]), phase=Names(PHASES, h["phase"]),
            regime=Names(self.tape.regime_names, h["regime"]), probe=Names(SEVERITIES, h["probe"])))

    def _record_retrievals(self, r: dict) -> None:
        served = r["ids"] >= 0
        n = served.shape[0]
        mode = self.cfg.retrieval.salience_rank

        def lists(a, mask=served):
            return Lists(a, mask)
        shadow = pa.nulls(n, pa.list_(pa.int64())) if mode == "off" else lists(r["shadow_ids"], r["shadow_ids"] >= 0)
        contra = r.get("contrarian_ids")
        self.rec.add("retrievals", dict(
            time_ms=r["time_ms"], golem_id=r["golem_id"], clade_id=self.pop.clade[r["golem_id"]], tick=r["tick"],
            profile=Names((self.cfg.retrieval.profile,), np.zeros(n, dtype=np.int8)), query_p=r["query_p"], query_a=r["query_a"],
            query_d=r["query_d"], ids=lists(r["ids"], served), scores=lists(r["scores"]),
            semantic=lists(r["factors"][:, :, 0]), temporal=lists(r["factors"][:, :, 1]),
            importance=lists(r["factors"][:, :, 2]), emotional=lists(r["factors"][:, :, 3]),
            valences=lists(r["valences"]), salience_shadow=shadow, pool_n=r["pool_n"],
            pool_mean_emotional=r["pool_mean_emotional"], pool_mean_valence=r["pool_mean_valence"],
            served_mean_emotional=r["served_mean_emotional"], served_mean_valence=r["served_mean_valence"],
            anti_rumination=r["anti_rumination"], low_conf_ids=lists(r["low_conf_ids"], r["low_conf_ids"] >= 0),
            reactivated=r["reactivated"], memory_signal=r["memory_signal"], cache_served=r["cache_served"],
            contrarian_ids=contra if contra is not None else _empty_lists(n),
            contrarian_changed=r.get("contrarian_changed", np.zeros(n, dtype=bool))))

    def _record_entries(self, e: dict) -> None:
        n = e["id"].size
        if n == 0:
            return
        assets = self.tape.assets
        topic = pa.array(e["topic_name"], type=pa.string())
        kind = Names(KINDS, e["kind"])
        # copies: the writer reads them at the flush
        content = Formatted(_entry_content, dict(kind=kind, topic=topic, has_outcome=np.array(e["has_outcome"], dtype=bool),
                                                 outcome=np.array(e["outcome"], dtype=np.float64)), n)
        self.rec.add("entries", dict(
            id=e["id"], golem_id=e["golem"], clade_id=e["clade"], created_ms=np.full(n, e["created_ms"]) if np.ndim(e["created_ms"]) == 0 else e["created_ms"],
            tick=e["tick"], category=Names(gm.CATEGORIES, e["category"]), topic=topic,
            scope=Names(assets, np.clip(e["scope"], 0, len(assets) - 1)), kind=kind,
            event_kind=_strings(e["event_kind"]),
            content=content, confidence=e["confidence"], importance=e["importance"], salience=e["salience"],
            decay_class=Names(gm.DECAY_CLASSES, e["decay_class"]), ttl_days=e["ttl_days"],
            window_days=np.asarray(e["window_ms"], dtype=np.float64) / 86_400_000, has_tag=e["has_tag"], p=e["p"], a=e["a"], d=e["d"],
            emotion=Names(padm.EMOTION_CODES, e["emotion"]), intensity=e["i0"], label=Names(gm.LABELS, e["label"]),
            attribution=Names(gm.ATTRIBUTIONS, e["attribution"]), arousal_bias=e["arousal_bias"],
            flashbulb=e["flashbulb"], provenance=e["provenance"], outcome=e["outcome"], has_outcome=e["has_outcome"],
            role=Names(gm.ROLES, e["role"]), recall_mode=Names(("normal",), np.zeros(n, dtype=np.int8))))

    def _record_events(self, events: list) -> int:
        """Event dicts and `EventBatch`es, in list order (seq follows it); returns the rows recorded."""
        n = 0
        run: list[dict] = []
        for ev in events:
            if isinstance(ev, EventBatch):
                n += self._record_event_dicts(run)
                run = []
                n += self._record_event_batch(ev)
            else:
                run.append(ev)
        return n + self._record_event_dicts(run)

    def _next_seq(self, n: int) -> np.ndarray:
        seq = np.arange(self.event_seq, self.event_seq + n)
        self.event_seq += n
        return seq

    def _record_event_dicts(self, events: list[dict]) -> int:
        if not events:
            return 0
        seq = self._next_seq(len(events))
        # numpy and Arrow columns, as the batches give them: one conversion per flush
        cols = {k: np.array([ev[k] for ev in events], dtype=dt) for k, dt in _EVENT_NUMBERS.items()}
        cols["kind"] = pa.array([ev["kind"] for ev in events], type=pa.string())
        # most payloads are empty
        cols["payload"] = pa.array(["{}" if ev["payload"] == {} else _payload_json(ev["payload"]) for ev in events],
                                   type=pa.string())
        self.rec.add("events", dict(cols, seq=seq))
        return len(events)

    def _record_event_batch(self, b: EventBatch) -> int:
        n = len(b)
        if not n:
            return 0
        # the objects are assembled by Arrow on the writer thread, the same text `_payload_json`
        # writes for the dicts
        if isinstance(b.kind, tuple):       # rows of several kinds, a payload dict per kind
            cols = {"kind": np.asarray(b.kind_code)}
            for k, pl in enumerate(b.payload):
                cols.update({f"{k}:{key}": _payload_column(v) for key, v in pl.items()})
            payload = Formatted(json_objects_by_kind, cols, n)
            kind = Names(b.kind, b.kind_code)
        else:
            payload = (Formatted(json_objects, {k: _payload_column(v) for k, v in b.payload.items()}, n) if b.payload
                       else pa.repeat(pa.scalar("{}", pa.string()), n))
            kind = b.kind
        return self._record_event_columns(b.time_ms, kind, b.golem_id, b.clade_id, b.tick, b.entry_id,
                                          np.full(n, -1, dtype=np.int64), b.value, payload)

    def _record_contagion(self, c: dict) -> int:
        """`contagion` events from clade.receive's columns; the payload JSON is assembled by Arrow
        string kernels on the writer thread, the same text `_payload_json` writes for the dict, key
        for key."""
        payload = Formatted(_contagion_payload, dict(
            alert=Names(c["alert_type"], c["parcel"]), signal=Names(c["signal"], c["parcel"]),
            **{k: c[k] for k in ("inherited_confidence", "latency_ms", "pad_after", "pad_before", "sender_entry",
                                 "stored", "tag")}), len(c["golem_id"]))
        return self._record_event_columns(c["time_ms"], "contagion", c["golem_id"], c["clade_id"], c["tick"],
                                          c["entry_id"], c["other_golem"], c["value"], payload)

    def _record_event_columns(self, time_ms: int, kind: str | Names, golem_id, clade_id, tick, entry_id, other_golem,
                              value, payload: pa.Array | Formatted) -> int:
        """Events at one instant, given as columns (the next `seq` numbers in row order); `kind`
        one for all rows, or each row's."""
        n = len(golem_id)
        self.rec.add("events", dict(
            time_ms=np.full(n, time_ms, dtype=np.int64), seq=self._next_seq(n), golem_id=golem_id, clade_id=clade_id,
            tick=tick, kind=kind if isinstance(kind, Names) else pa.repeat(pa.scalar(kind, pa.string()), n),
            entry_id=entry_id, other_golem=other_golem, value=value, payload=payload))
        return n

    def _record_snapshot(self, s: dict) -> None:
        A = len(self.tape.assets)
        self.rec.add("snapshots", dict(
            flashbulb_id=[s["flashbulb_id"]] * A, golem_id=[s["golem_id"]] * A, time_ms=[s["time_ms"]] * A,
            step=[s["step"]] * A, asset=list(self.tape.assets), close=s["close"], tvl=s["tvl"], gas=[s["gas"]] * A,
            regime=[self.tape.regime_names[s["regime"]]] * A, held=[a == s["position_asset"] for a in range(A)],
            position_exposure=[s["position_exposure"] if a == s["position_asset"] else 0.0 for a in range(A)],
            links=[list(s["links"])] * A))
