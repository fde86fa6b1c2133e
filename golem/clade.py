"""Clade (SPEC §2.7, §9): what a sibling's push does to the receiver.

The world carries the push (a SimPy event after the Clade's latency); this module decides what
the receiver keeps: an inherited copy of the entry (provenance = sender, confidence from the
'inherited' source) and contagion of P and A. Dominance is sovereign and never moves.
"""
from __future__ import annotations

import numpy as np

from golem import grimoire as gm
from golem.context import normalise

SIGNALS = ("THREAT", "OPPORTUNITY", "WISDOM")


def signal_type(alert_type: str, category: str, pleasure: float) -> str:
    """Pheromone typing: death reflections and lessons are WISDOM; negative-valence flashbulbs and
    warnings are THREAT; positive ones OPPORTUNITY."""
    if alert_type == "death_reflection" or category in ("lesson", "death_reflection", "heuristic"):
        return "WISDOM"
    return "THREAT" if pleasure < 0 or category == "warning" else "OPPORTUNITY"


FIELDS = ("category", "topic", "scope", "kind", "importance", "salience", "decay_class", "has_tag", "p", "a", "d",
          "i0", "emotion", "label", "attribution", "arousal_bias", "flashbulb", "outcome", "has_outcome", "role",
          "window_ms", "ttl_days", "id")


def capture(gr: gm.Grimoire, slot: int) -> dict:
    """The pushed entry as it is at send time (the sender may evict the slot before delivery)."""
    c = gr.cols
    entry = {k: c[k][slot].item() for k in FIELDS}
    entry["emb"] = gr.emb[slot].astype(np.float64)
    return entry


def receive(mind, parcels, now_ms: int, attenuation: float, rows: bool = True) -> tuple[int, dict | None]:
    """Store the inherited copies and apply contagion for pushes arriving at one instant.

    `parcels` is a list of (sender, entry, alert_type, receivers, latency_ms) in arrival order. A
    parcel's receivers are distinct and may include the sender and the dead (a Clade's pushes of
    one instant share one receiver array): those receive nothing, and a parcel left with no
    receiver is not numbered among the delivered ones. A parcel is one vectorised step,
    and parcels are applied in order (a receiver hit twice feels the second push on top of the
    first, and the copy's confidence uses its arousal at that moment). The copies are stored as
    one insert of all of them in delivery order would store them (slots, and ids numbered in
    delivery order), Clade by Clade (receivers are the sender's siblings, so Clades share no
    Golem) and in pieces of whole receivers (`Grimoire.insert_pieces`): a push wave of a
    1,000-Golem Clade is ~10^6 copies an instant, and only one Clade's are held at a time (without
    `rows`, not even their slots: `_number_in_place`). The copy keeps the sender's emotional tag
    (it is the sender's feeling that travels); its confidence is the 'inherited' source (0.6)
    times the receiver's arousal encoding factor. Returns the number of deliveries and, when
    `rows` (someone records them), their `contagion` events as columns, one row per delivery in
    delivery order (the recorder formats the payload); the `entries` rows of the stored copies go
    to `mind.pending_entries`.
    """
    pop = mind.pop
    if not parcels:
        return 0, []
    groups: dict[int, list[int]] = {}
    for i, parcel in enumerate(parcels):
        groups.setdefault(int(pop.clade[parcel[0]]), []).append(i)
    staged: list = [None] * len(parcels)
    slots_of: list = [None] * len(parcels)       # per parcel: the slot of each delivery (-1 refused)
    stored = np.zeros(len(parcels), dtype=np.int64)   # per parcel: copies stored
    total = 0
    for members in groups.values():
        part = [_contagion(mind, parcels[i], attenuation, pad=rows) for i in members]
        n_part = sum(len(x[3]) for x in part)
        total += n_part
        pieces = _store_copies(mind, part, now_ms) if n_part else [np.empty(0, dtype=np.int64)] * len(part)
        for i, x, piece in zip(members, part, pieces):
            stored[i] = int((piece >= 0).sum())
            if rows:
                slots_of[i], staged[i] = piece, x
        if not rows:
            _mark_in_place(mind.gr, pieces)
    if total == 0:                            # every receiver dead (or the sender alone): nothing happened
        return 0, None
    if not rows:
        _number_in_place(mind.gr, groups, stored, [np.flatnonzero(pop.clade == cl) for cl in groups])
        return total, None
    ids_of = _number(mind.gr, slots_of)
    # parcels are numbered among those that reached someone
    reached = [i for i, x in enumerate(staged) if len(x[3])]
    staged, slots_of, ids_of = [staged[i] for i in reached], [slots_of[i] for i in reached], [ids_of[i] for i in reached]
    at = np.repeat(np.arange(len(staged)), [len(x[3]) for x in staged])      # the parcel of each delivery
    slots, ids = np.concatenate(slots_of), np.concatenate(ids_of)
    ok = slots >= 0
    if ok.any():
        mind.pending_entries.append(_copy_rows(mind, staged, at, slots, ids, now_ms))
    return at.size, _contagion_columns(mind, staged, at, ids, ok, now_ms)


def _contagion(mind, parcel: tuple, attenuation: float, pad: bool = True) -> tuple:
    """One parcel's contagion: the receivers' P and A move by the sender's tag x attenuation (D is
    sovereign); the copy's confidence is the inherited source's at each receiver's arousal before.
    Returns the parcel staged for its living receivers other than the sender: (sender, entry,
    alert_type, receivers, latency_ms, tag, pad before, pad after, confidence); the PADs are None
    unless `pad` (only the rows need them)."""
    pop, cfg = mind.pop, mind.cfg
    sender, entry, alert_type, recv, latency_ms = parcel
    keep = pop.alive[recv] & (recv != sender)
    if not keep.all():
        recv, latency_ms = recv[keep], latency_ms[keep]
    recv = np.asarray(recv, dtype=np.int64)     # Golem ids as the rows hold them (in flight they are int32)
    tag = np.array([entry["p"], entry["a"], entry["d"]]) if entry["has_tag"] else np.zeros(3)
    before = pop.pad[recv]                      # fancy indexing: a copy
    after = before.copy()
    after[:, :2] = np.clip(before[:, :2] + tag[:2] * attenuation, -1.0, 1.0)   # D is sovereign
    pop.pad[recv] = after
    conf = gm.initial_confidence_batch(cfg.confidence.inherited, before[:, 1], cfg.arousal.encoding_peak,
                                       cfg.arousal.encoding_width)
    if not pad:
        before = after = None
    return sender, entry, alert_type, recv, latency_ms, tag, before, after, conf


def _store_copies(mind, part: list, now_ms: int) -> list[np.ndarray]:
    """Insert one Clade's copies (its staged parcels, in delivery order) into the receivers'
    Grimoires, unnumbered; returns each parcel's slots (-1 refused)."""
    gr = mind.gr
    n = [len(x[3]) for x in part]
    at = np.repeat(np.arange(len(part)), n)      # the parcel (within this Clade) of each delivery
    sender_all = np.array([x[0] for x in part], dtype=np.int64)[at]
    conf_all = np.concatenate([x[8] for x in part])
    per_parcel = {k: np.array([x[1][k] for x in part]) for k in FIELDS if k != "id"}
    # normalised and quantised once per pushed entry, not once per copy (row-wise: the same codes)
    codes = gm.quantise(normalise(np.stack([x[1]["emb"] for x in part])), gr.codes.shape[1])

    def copy_rows(idx):
        """Codes and column values of the copies at this Clade's delivery rows idx."""
        values = {k: v[at[idx]] for k, v in per_parcel.items()}
        values.update(created_ms=now_ms, last_access_ms=now_ms, provenance=sender_all[idx], curator_weight=1.0,
                      confidence=conf_all[idx])
        return codes[at[idx]], values

    slots = gr.insert_pieces(np.concatenate([x[3] for x in part]), copy_rows, number=False)[0]
    return np.split(slots, np.cumsum(n)[:-1])


def _number(gr: gm.Grimoire, slots_of: list) -> list[np.ndarray]:
    """Ids for the stored copies in delivery order over all Clades, as one insert numbers them."""
    ids_of = []
    for piece in slots_of:
        ok = piece >= 0
        ids = np.full(piece.size, -1, dtype=np.int64)
        ids[ok] = gr.next_id + np.arange(int(ok.sum()))
        gr.next_id += int(ok.sum())
        gr.cols["id"][piece[ok]] = ids[ok]
        ids_of.append(ids)
    return ids_of


#: A stored copy awaiting its id holds UNNUMBERED - q in the id column, q its place among its
#: Clade's stored copies of the instant (every live id is >= 0, an unnumbered insert writes -2).
UNNUMBERED = -3


def _mark_in_place(gr: gm.Grimoire, pieces: list[np.ndarray]) -> None:
    """Write each of one Clade's stored copies its place q (in delivery order) into the id
    column, so its slots need not be kept until the ids are known. A copy evicted by a later one
    of the same instant leaves its slot to that one, as in `_number`."""
    q = 0
    for piece in pieces:     # parcel by parcel: a slot stored twice keeps the later copy's place
        ok = piece[piece >= 0]
        gr.cols["id"][ok] = UNNUMBERED - q - np.arange(ok.size)
        q += ok.size


def _number_in_place(gr: gm.Grimoire, groups: dict[int, list[int]], stored: np.ndarray,
                     receivers: list[np.ndarray]) -> None:
    """`_number` for copies marked by `_mark_in_place`: a copy's id is where it stands in delivery
    order over all Clades, from its parcel's place and its own place within its Clade, read back
    from the slabs of `receivers` (per Clade of `groups`: its Golems)."""
    first = gr.next_id + np.cumsum(stored) - stored       # per parcel: the id of its first stored copy
    gr.next_id += int(stored.sum())
    ids = gr.cols["id"].reshape(gr.n_golems, gr.capacity)
    for members, golems in zip(groups.values(), receivers):
        m = np.asarray(members)
        before = np.cumsum(stored[m]) - stored[m]         # the Clade's stored copies before each of its parcels
        slab = ids[golems]                                # a copy (fancy indexing)
        marked = slab <= UNNUMBERED
        q = UNNUMBERED - slab[marked]
        j = np.searchsorted(before, q, side="right") - 1  # the parcel (within the Clade) of each copy
        slab[marked] = first[m[j]] + q - before[j]
        ids[golems] = slab


def _copy_rows(mind, staged: list, at: np.ndarray, slots: np.ndarray, ids: np.ndarray, now_ms: int) -> dict:
    """The `entries` rows of the stored copies (deliveries `at` of the staged parcels)."""
    pop = mind.pop
    recv_all = np.concatenate([x[3] for x in staged])
    sender_all = np.array([x[0] for x in staged], dtype=np.int64)[at]
    stored = slots >= 0
    k = int(stored.sum())
    copies = {k_: np.array([x[1][k_] for x in staged])[at][stored] for k_ in FIELDS if k_ != "id"}
    copies.update(created_ms=np.full(k, now_ms), last_access_ms=np.full(k, now_ms), provenance=sender_all[stored],
                  curator_weight=np.ones(k), confidence=np.concatenate([x[8] for x in staged])[stored])
    topics = np.repeat(np.array([mind.topic_name(int(x[1]["topic"])) for x in staged], dtype=object),
                       [len(x[3]) for x in staged])
    copies.update(id=ids[stored], slot=slots[stored], golem=recv_all[stored], clade=pop.clade[recv_all[stored]],
                  topic_name=topics[stored], ttl_days=np.full(k, np.nan), tick=pop.tick[recv_all[stored]],
                  event_kind=np.full(k, "", dtype=object))
    return copies


def _contagion_columns(mind, staged: list, at: np.ndarray, ids: np.ndarray, stored: np.ndarray, now_ms: int) -> dict:
    """The deliveries' `contagion` events as columns, one row per delivery in delivery order."""
    pop = mind.pop
    recv_all = np.concatenate([x[3] for x in staged])
    kinds = [(alert_type, signal_type(alert_type, gm.CATEGORIES[int(entry["category"])], float(tag[0])))
             for _, entry, alert_type, _, _, tag, *_ in staged]
    before = np.concatenate([s[6] for s in staged])
    after = np.concatenate([s[7] for s in staged])
    return dict(
        time_ms=now_ms, golem_id=recv_all, clade_id=pop.clade[recv_all], tick=pop.tick[recv_all], entry_id=ids,
        other_golem=np.array([x[0] for x in staged], dtype=np.int64)[at], value=after[:, 1] - before[:, 1],
        # the payload's fields, one row per delivery (the recorder writes them as JSON); alert type
        # and signal once per parcel, with each delivery's parcel
        alert_type=[k[0] for k in kinds], signal=[k[1] for k in kinds], parcel=at,
        latency_ms=np.concatenate([np.asarray(s[4], dtype=np.int64) for s in staged]),
        sender_entry=np.array([int(s[1]["id"]) for s in staged], dtype=np.int64)[at],
        pad_before=before, pad_after=after, tag=np.stack([s[5] for s in staged])[at],
        inherited_confidence=np.concatenate([s[8] for s in staged]), stored=stored)
