"""Clade (SPEC §2.7, §9): what a sibling's push does to the receiver.

The world carries the push (a SimPy event after the Clade's latency); this module decides what
the receiver keeps: an inherited copy of the entry (provenance = sender, confidence from the
'inherited' source) and contagion of P and A. Dominance is sovereign and never moves.
"""
from __future__ import annotations

import numpy as np

from golem import grimoire as gm
from golem import pad as padm

SIGNALS = ("THREAT", "OPPORTUNITY", "WISDOM")


def signal_type(alert_type: str, category: str, pleasure: float) -> str:
    """Pheromone typing: death reflections and lessons are WISDOM; negative-valence flashbulbs and
    warnings are THREAT; positive ones OPPORTUNITY."""
    if alert_type == "death_reflection" or category in ("lesson", "death_reflection", "heuristic"):
        return "WISDOM"
    return "THREAT" if pleasure < 0 or category == "warning" else "OPPORTUNITY"


FIELDS = ("category", "topic", "scope", "kind", "importance", "salience", "decay_class", "has_tag", "p", "a", "d",
          "i0", "emotion", "label", "attribution", "arousal_bias", "flashbulb", "outcome", "has_outcome", "role",
          "window_ms", "id")


def capture(gr: gm.Grimoire, slot: int) -> dict:
    """The pushed entry as it is at send time (the sender may evict the slot before delivery)."""
    c = gr.cols
    entry = {k: c[k][slot].item() for k in FIELDS}
    entry["emb"] = gr.emb[slot].astype(np.float64)
    return entry


def receive(mind, receiver: int, sender: int, entry: dict, alert_type: str, now_ms: int,
            latency_ms: int, attenuation: float) -> dict:
    """Store the inherited copy and apply contagion; returns the `events` row for the delivery.

    The copy keeps the sender's emotional tag (it is the sender's feeling that travels); its
    confidence is the 'inherited' source (0.6) times the receiver's arousal encoding factor.
    """
    gr, pop, cfg = mind.gr, mind.pop, mind.cfg
    tag = (entry["p"], entry["a"], entry["d"]) if entry["has_tag"] else (0.0, 0.0, 0.0)
    before = tuple(float(x) for x in pop.pad[receiver])
    category = gm.CATEGORIES[int(entry["category"])]
    values = {k: np.array([entry[k]]) for k in FIELDS if k != "id"}
    conf = gm.initial_confidence(cfg.confidence.inherited, before[1], cfg.arousal.encoding_peak, cfg.arousal.encoding_width)
    values.update(created_ms=now_ms, last_access_ms=now_ms, provenance=sender, curator_weight=1.0,
                  confidence=np.array([conf]))
    slots, ids = gr.insert(np.array([receiver]), entry["emb"][None, :], values)
    after = padm.apply_contagion(before, tag, attenuation)
    pop.pad[receiver] = after
    sig = signal_type(alert_type, category, tag[0])
    if slots[0] >= 0:
        rows = {k: np.asarray(v).reshape(-1)[:1].copy() for k, v in values.items()}
        rows.update(id=ids[:1], slot=slots[:1], golem=np.array([receiver]), clade=np.array([pop.clade[receiver]]),
                    topic_name=np.array([mind.topic_name(int(entry["topic"]))], dtype=object),
                    ttl_days=np.array([np.nan]), tick=np.array([pop.tick[receiver]]), event_kind=np.array([""], dtype=object),
                    created_ms=np.array([now_ms]), provenance=np.array([sender]))
        mind.pending_entries.append(rows)
    return dict(time_ms=now_ms, golem_id=receiver, clade_id=int(pop.clade[receiver]), kind="contagion",
                tick=int(pop.tick[receiver]), entry_id=int(ids[0]), other_golem=sender, value=after[1] - before[1],
                payload={"alert_type": alert_type, "signal": sig, "latency_ms": latency_ms,
                         "sender_entry": int(entry["id"]), "pad_before": list(before), "pad_after": list(after),
                         "tag": list(tag), "inherited_confidence": conf, "stored": bool(slots[0] >= 0)})
