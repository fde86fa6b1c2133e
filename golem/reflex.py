"""The reflex lane [R] (SPEC §4.5): entries that fire on the market's event description, no query.

Matching is deliberately dumb and exact: every content token of a recall_when phrase must appear
among the description's tokens; no fuzzy, prefix or score. A phrase that boils down to a single
token fires only when that token looks like an identifier, so a common word alone can never fire.
"""
from __future__ import annotations

import re

import numpy as np

#: the last firing of a reflex entry that never fired: long enough ago for any cooldown
NEVER = np.iinfo(np.int64).min // 2

#: Function words dropped from phrases before matching.
FUNCTION_WORDS = frozenset("""a an and any are as at be been but by can could did do does for from had has have
how if in into is it its may might not of on or our should so such than that the their them then there these they
this those to too was we were what when where which while who will with would you your""".split())
_TOKEN = re.compile(r"[a-z0-9][a-z0-9_\-\.]*")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def content_tokens(phrase: str) -> list[str]:
    """Tokens of >= 3 characters that are not function words."""
    return [t for t in tokens(phrase) if len(t) >= 3 and t not in FUNCTION_WORDS]


def looks_like_identifier(tok: str) -> bool:
    return any(c.isdigit() for c in tok) or "-" in tok or "_" in tok


def phrase_matches(phrase: str, description_tokens: set[str]) -> bool:
    """All content tokens present; a one-token phrase only if it looks like an identifier."""
    ct = content_tokens(phrase)
    if not ct:
        return False
    if len(ct) == 1 and not looks_like_identifier(ct[0]):
        return False
    return all(t in description_tokens for t in ct)


def fire(description: str, candidates: list[tuple[int, int, tuple[str, ...], int]], now_ms: int,
         max_per_turn: int = 2, cooldown_ms: int = 4 * 3_600_000) -> list[tuple[int, int, str]]:
    """Which reflex entries fire on `description` this tick.

    candidates: (slot, entry_id, recall_when phrases, last_fired_ms) in a fixed order (slot order).
    Returns [(slot, entry_id, matched phrase)], at most `max_per_turn` (clamped 1..5), each entry
    at most once per cooldown.
    """
    budget = min(5, max(1, max_per_turn))
    desc = set(tokens(description))
    fired: list[tuple[int, int, str]] = []
    if not desc:
        return fired
    for slot, eid, phrases, last in candidates:
        if now_ms - last < cooldown_ms:
            continue
        for ph in phrases:
            if phrase_matches(ph, desc):
                fired.append((slot, eid, ph))
                break
        if len(fired) >= budget:
            break
    return fired


def lane(mind, ix: np.ndarray, obs, out) -> dict[int, list[int]]:
    """Run the lane for a cohort in SENSING; returns {cohort index: [fired slots]} and records events."""
    cfg, gr = mind.cfg, mind.gr
    res: dict[int, list[int]] = {}
    if not cfg.reflex.enabled or not gr.recall_when:
        return res
    c = gr.cols
    rows = np.flatnonzero(obs.sees.any(axis=1))
    # only Golems holding a reflex entry can fire
    rows = rows[c["reflex"].reshape(gr.n_golems, gr.capacity)[ix[rows]].any(axis=1)]
    for i in rows:
        g = int(ix[i])
        sl = gr.slab(g)
        slots = np.flatnonzero(c["reflex"][sl] & (c["id"][sl] >= 0)) + sl.start
        if slots.size == 0:
            continue
        description = " ".join(tok for (_, _, tok), seen in zip(obs.events, obs.sees[i]) if seen)
        cands = [(int(s), eid, gr.recall_when.get(eid, ()), gr.last_fired.get(eid, NEVER))
                 for s, eid in zip(slots.tolist(), c["id"][slots].tolist())]
        hits = fire(description, cands, obs.now_ms, cfg.reflex.max_per_turn, int(cfg.reflex.cooldown_s * 1000))
        if not hits:
            continue
        for s, eid, ph in hits:
            gr.last_fired[eid] = obs.now_ms
        res[int(i)] = [s for s, _, _ in hits]
        out.events.append(mind._event(obs.now_ms, g, "reflex", entry_id=hits[0][1], value=float(len(hits)),
                                      payload={"matched": [ph for _, _, ph in hits], "pool_size": int(slots.size),
                                               "served_ids": [e for _, e, _ in hits], "description": description}))
    return res


def acts_in_window(gr, slots: np.ndarray, now_ms: int, min_acted: int, window_days: float) -> np.ndarray:
    """Were the entries at `slots` acted on at least `min_acted` times within the last
    `window_days` (SPEC §4.5: >= 3 times in 30 days)? True when their `min_acted`-th most recent act
    (the oldest of the ring, which holds exactly that many) is inside the window."""
    acted = gr.cols["acted_on_count"][slots]
    if min_acted <= 0:
        return np.ones(slots.shape, dtype=bool)
    ring = gr.act_ring
    if ring < min_acted:
        raise ValueError(f"the Grimoire keeps {ring} act times per entry, fewer than reflex.promotion_min {min_acted}")
    # the ring's next write position holds the oldest kept act; with min_acted < ring, step back
    oldest = gr.acted_at(slots, (acted - min_acted) % ring)
    return (acted >= min_acted) & (now_ms - oldest <= window_days * 86_400_000)


def proposals(gr, golems: np.ndarray, now_ms: int, min_acted: int, window_days: float) -> tuple[np.ndarray, np.ndarray]:
    """The slots the curator proposes for reflex, Golem by Golem: acted on >= min_acted times
    within the window (`acts_in_window`), not yet reflex, and carrying event phrases to fire on.
    Returns (slots, the index into `golems` of each one's Golem)."""
    c = gr.cols
    golems = np.asarray(golems, dtype=np.int64)
    if not gr.phrases:   # no entry carries phrases: nothing to propose
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ids, acted, rf = (c[k].reshape(gr.n_golems, gr.capacity)[golems] for k in ("id", "acted_on_count", "reflex"))
    ok = gr.live_rows(golems) & ~rf & (acted >= min_acted)
    ok[ok] = np.isin(ids[ok], np.fromiter(gr.phrases, dtype=np.int64, count=len(gr.phrases)))
    owner, col = np.nonzero(ok)
    slots = golems[owner] * gr.capacity + col
    inside = acts_in_window(gr, slots, now_ms, min_acted, window_days)
    return slots[inside], owner[inside]


def promote(gr, slots: np.ndarray) -> None:
    """Make entries reflexes: their recall_when is the event description they were written under."""
    for s in slots:
        eid = int(gr.cols["id"][s])
        gr.cols["reflex"][s] = True
        gr.recall_when[eid] = (gr.phrases[eid],)
