"""Decide, then write (SPEC §3.3 [G]): candidates are scored for salience and gated; the writer
applies all writes of a tick batch at the end, in a fixed order (Golem id, then candidate order).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from golem import grimoire as gm
from golem.appraisal import arousal_factor_batch
from golem.context import topic_code
from golem.kernels import np_maximum, np_minimum

DAY_MS = 86_400_000
KINDS = ("price-move", "event", "trade", "regret", "dominance-correction", "flashbulb", "death-reflection",
         "inherited", "lesson", "import", "backcheck")


#: columns a candidate may leave out, with their default
DEFAULTS = {"raw_outcome": np.nan, "regime": 0, "tokens": "", "force": False}


@dataclass
class Candidates:
    """Would-be entries of one tick batch, as growing column lists."""

    cols: dict[str, list] = field(default_factory=dict)   # per column, a chunk per add(): its rows, or a 0-d value
    emb: list[np.ndarray] = field(default_factory=list)
    topics: list[np.ndarray] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)        # rows per add()
    n: int = 0            # rows so far (kept, not recounted: add() is called once per event seen)
    #: candidates `write` refused as empty observations: (golem, kind code, topic, reason)
    aborted: list[tuple[int, int, str, str]] = field(default_factory=list)

    def add(self, emb: np.ndarray, topics: list[str] | np.ndarray, **cols) -> None:
        n = emb.shape[0]
        if n == 0:
            return
        self.emb.append(np.asarray(emb, dtype=np.float64))
        self.topics.append(np.asarray(topics, dtype=object))
        self.sizes.append(n)
        self.n += n
        if self.cols and set(cols) | set(DEFAULTS) != set(self.cols):
            missing = (set(self.cols) ^ (set(cols) | set(DEFAULTS)))
            raise ValueError(f"candidate columns {sorted(missing)} missing in one add() call")
        for k, v in DEFAULTS.items():
            if k not in cols:
                cols[k] = v
        for k, v in cols.items():
            # copies (the caller may change its arrays before build()); a value shared by the rows
            # stays one 0-d array until build() (most columns of an add are one value)
            if isinstance(v, np.ndarray) and v.shape == (n,):
                chunk = v.copy()
            else:
                arr = np.asarray(v, dtype=object) if isinstance(v, str) else np.asarray(v)
                chunk = arr.copy() if arr.ndim == 0 else np.broadcast_to(arr, (n,)).copy()
            self.cols.setdefault(k, []).append(chunk)

    def build(self, take: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray] | None:
        """(embeddings, columns, topics) of the rows `take` (indices into the rows in add order):
        what indexing the full columns (`column`) with `take` gives, without building them."""
        if not self.emb:
            return None
        take = np.asarray(take, dtype=np.int64)
        adds = np.searchsorted(np.cumsum(self.sizes), take, side="right")     # the add each row came from
        emb = np.empty((take.size,) + self.emb[0].shape[1:])
        lo = 0
        for a, (e, m) in enumerate(zip(self.emb, self.sizes)):
            rows = np.flatnonzero(adds == a)
            if rows.size:
                emb[rows] = e[take[rows] - lo]
            lo += m
        return emb, {k: self._rows(v, take, adds) for k, v in self.cols.items()}, np.concatenate(self.topics)[take]

    def column(self, name: str) -> np.ndarray:
        """One column over every row, in add order."""
        return self._column(self.cols[name])

    def _column(self, chunks: list[np.ndarray]) -> np.ndarray:
        """A column's chunks as one array, as np.concatenate of them at full length would give it
        (the dtype np.result_type of the chunks)."""
        if all(c.ndim for c in chunks):
            return np.concatenate(chunks)
        out = np.empty(self.n, dtype=np.result_type(*chunks))
        lo = 0
        for c, m in zip(chunks, self.sizes):
            out[lo:lo + m] = c
            lo += m
        return out

    def _rows(self, chunks: list[np.ndarray], take: np.ndarray, adds: np.ndarray) -> np.ndarray:
        """`_column(chunks)[take]`; where every add gave the column one shared value, each taken
        row's add's value (stacked in the column's dtype) without the full column."""
        if any(c.ndim for c in chunks):
            return self._column(chunks)[take]
        return np.stack(chunks)[adds]


#: the candidate columns `score_and_gate` reads
GATE_COLUMNS = ("p", "a", "d", "has_tag", "value", "pnl", "role", "signals", "first_sighting", "flashbulb", "force",
                "decay_class")


def score_and_gate(cfg, c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Salience (vectorised SPEC §3.3 `grimoire.salience`), gating, TTL tier, promotion, window, for
    the candidates' columns `c` (`_salience_rows`; P, A, D, value and P&L taken as float64, as the
    mind's are)."""
    s_cfg, g = cfg.salience, cfg.grimoire
    n = np.asarray(c["p"]).size

    def col(k, dtype, default=None):
        v = np.asarray(c.get(k, default), dtype=dtype)
        return np.ascontiguousarray(v) if v.shape == (n,) else np.full(n, v, dtype=dtype)
    sal, write, ttl, dc, window_ms, inten = _salience_rows(
        col("p", np.float64), col("a", np.float64), col("d", np.float64), col("has_tag", np.bool_),
        col("value", np.float64), col("pnl", np.float64), col("role", np.int64), col("signals", np.float64),
        col("first_sighting", np.bool_), col("flashbulb", np.bool_), col("force", np.bool_, False),
        col("decay_class", np.int8),
        np.array([s_cfg.role_observation, s_cfg.role_action, s_cfg.role_insight], dtype=np.float64),
        np.array([g.ephemeral_days, g.tactical_days, g.regime_conditional_days, np.inf]),
        float(s_cfg.pnl_scale), float(s_cfg.negativity), float(s_cfg.signal_boost), float(s_cfg.first_sighting_floor),
        float(s_cfg.gate_min), float(s_cfg.tier_14d), float(s_cfg.tier_30d), float(s_cfg.ttl_days_low),
        float(s_cfg.ttl_days_mid), float(s_cfg.ttl_days_high), float(s_cfg.promotion), gm.REGIME, gm.STRUCTURAL,
        float(DAY_MS), np.sqrt(3.0))
    return {"salience": sal, "write": write, "ttl_days": ttl, "decay_class": dc, "window_ms": window_ms,
            "intensity": inten}


@njit(cache=True)
def _salience_rows(p, a, d, has_tag, value, pnl, role, signals, first_sighting, flashbulb, force, decay_class,
                   role_scale, class_days, pnl_scale, negativity, signal_boost, first_floor, gate_min, tier_14d,
                   tier_30d, ttl_low, ttl_mid, ttl_high, promotion, regime, structural, day_ms, sqrt3):
    """Each candidate's salience, gate, TTL tier, class and window (SPEC §3.2-3.3), one pass with the
    array expressions' operations in their order (tests/test_grimoire.py holds them): the intensity
    of a tagged one (|PAD| / sqrt 3), filled by the P&L's magnitude (|pnl| / (pnl_scale x value), 1
    for any change of a book with nothing left), negative tags filled further (negativity x |P|),
    scaled by the role, plus the signals' boost, at least first_floor for a first sighting, all
    capped at 1. Written when at least gate_min (or a flashbulb, or forced); the tier's TTL by
    tier_14d / tier_30d (0 below the gate); promoted one class from `promotion` up to `regime`, a
    flashbulb `structural`; the window max(class days, TTL) x (1 + s) days, unbounded for
    structural."""
    n = p.size
    sal = np.empty(n)
    write = np.empty(n, np.bool_)
    ttl = np.empty(n)
    dc = np.empty(n, np.int8)
    window_ms = np.empty(n)
    inten = np.empty(n)
    for i in range(n):
        x = np.sqrt(p[i] * p[i] + a[i] * a[i] + d[i] * d[i]) / sqrt3 if has_tag[i] else 0.0
        inten[i] = x
        denom = pnl_scale * value[i]
        if denom > 0:
            m = np_minimum(1.0, abs(pnl[i]) / denom)
        else:
            m = 1.0 if pnl[i] != 0 else 0.0
        s = np_minimum(1.0, x + m * (1 - x))
        if has_tag[i] and p[i] < 0:
            s = np_minimum(1.0, s + negativity * abs(p[i]) * (1 - s))
        s = np_minimum(1.0, s * role_scale[role[i]])
        s = np_minimum(1.0, s + signal_boost * signals[i])
        if first_sighting[i]:
            s = np_maximum(s, first_floor)
        sal[i] = s
        write[i] = (s >= gate_min) | flashbulb[i] | force[i]
        t = 0.0 if s < gate_min else (ttl_low if s < tier_14d else (ttl_mid if s < tier_30d else ttl_high))
        ttl[i] = t
        c = decay_class[i]
        if s >= promotion and c < regime:
            c = c + 1
        if flashbulb[i]:
            c = structural
        dc[i] = c
        window_ms[i] = (np.inf if c == structural else np_maximum(class_days[c], t) * (1 + s)) * day_ms
    return sal, write, ttl, dc, window_ms, inten


def empty_observations(emb: np.ndarray, topics: np.ndarray) -> np.ndarray:
    """Candidates with nothing to remember: no direction (a zero or non-finite embedding) or no
    topic. SPEC §3.3: such a write is aborted loudly, never filled with an invented entry."""
    norm = np.sqrt(np.einsum("ij,ij->i", emb, emb))
    return ~(np.isfinite(norm) & (norm > 0)) | (topics == "")


def write(cfg, gr: gm.Grimoire, cand: Candidates, now_ms: int) -> dict[str, np.ndarray] | None:
    """Score, gate and insert a batch; returns the rows of the written entries (for `entries`).
    Empty observations are not written; they are listed in `cand.aborted` for the caller to
    report (the mind does no I/O: it emits `write_aborted` events, the world logs them)."""
    if not cand.emb:
        return None
    # which rows are empty observations (all of them are reported) and which pass the gate, from
    # their own columns; only the rows written are then gathered, in write order (Golem id, then
    # candidate order). Scored row by row with IEEE operations only: the same bits in any batch.
    empty = np.concatenate([empty_observations(e, t) for e, t in zip(cand.emb, cand.topics)])
    if empty.any():
        rows = np.flatnonzero(empty)
        _, c, topics = cand.build(rows)
        for i in range(rows.size):
            reason = "no topic" if topics[i] == "" else "empty embedding"
            cand.aborted.append((int(c["golem"][i]), int(c["kind"][i]), str(topics[i]), reason))
    sc = score_and_gate(cfg, {k: cand.column(k) for k in GATE_COLUMNS})
    take = np.lexsort((cand.column("seq"), cand.column("golem")))
    take = take[(sc["write"] & ~empty)[take]]
    if take.size == 0:
        return None
    emb, c, topics = cand.build(take)
    sc = {k: v[take] for k, v in sc.items()}
    conf = np.clip(c["source_conf"] * arousal_factor_batch(c["a"], cfg.arousal.encoding_peak, cfg.arousal.encoding_width),
                   0.0, 1.0)
    conf = np.where(c["has_tag"], conf, c["source_conf"])
    thr = cfg.arousal.attribution_dominance
    att = np.where(c["d"] > thr, 1, np.where(c["d"] < -thr, 2, 0)).astype(np.int8)
    att = np.where(c["force_internal"], 1, att).astype(np.int8)
    topic_codes = np.fromiter(map(topic_code, topics), dtype=np.int32, count=topics.size)
    values = {
        "created_ms": now_ms, "last_access_ms": now_ms, "window_ms": sc["window_ms"].astype(np.float32),   # as stored
        "category": c["category"], "topic": topic_codes, "scope": c["scope"], "kind": c["kind"],
        "confidence": conf, "importance": c["importance"], "salience": sc["salience"],
        "decay_class": sc["decay_class"], "has_tag": c["has_tag"], "p": c["p"], "a": c["a"], "d": c["d"],
        "i0": sc["intensity"], "emotion": c["emotion"], "label": c["label"], "attribution": att,
        "arousal_bias": c["arousal_bias"], "flashbulb": c["flashbulb"], "provenance": c["provenance"],
        "outcome": c["outcome"], "has_outcome": c["has_outcome"], "role": c["role"], "curator_weight": 1.0,
        "raw_outcome": np.where(np.isnan(c["raw_outcome"].astype(np.float64)), c["outcome"], c["raw_outcome"]).astype(np.float32),
        "regime": c["regime"].astype(np.int16), "ttl_days": sc["ttl_days"].astype(np.float32),
    }
    slots, ids = gr.insert(c["golem"], emb, values)
    ok = slots >= 0
    n_ok = int(np.count_nonzero(ok))
    keep = slice(None) if n_ok == ok.size else ok    # all stored (the usual case): no masked copies
    rows = {k: v[keep] if isinstance(v, np.ndarray) else np.full(n_ok, v) for k, v in values.items()}
    rows.update(id=ids[ok], slot=slots[ok], golem=c["golem"][ok], topic_name=topics[ok],
                ttl_days=sc["ttl_days"][ok], tick=c["tick"][ok], event_kind=c["event_kind"][ok])
    rows["refused"] = int((~ok).sum())
    tokens = c["tokens"][ok]
    has = tokens != ""
    for eid, tok in zip(ids[ok][has].tolist(), tokens[has].tolist()):
        gr.phrases[eid] = str(tok)   # the event description this entry was written under
    return rows
