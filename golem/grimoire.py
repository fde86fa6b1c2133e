"""The Grimoire: a columnar arena of memory entries for a whole population (SPEC §3).

Shape: one slab of `capacity` slots per Golem (rows g*cap .. g*cap+cap), every field a column,
embeddings one contiguous block of int8 codes (`quantise`: the direction of the vector, rounded so
its largest component is +-127). A retrieval scans its Golem's slab front to back, so scoring
rides on one memory stream; at d = 64 an entry is 64 bytes of codes, 129 of columns and 24 of act
times, where float32 embeddings alone would take 256 (docs/performance.md: what the rounding does to
scores; docs/decisions.md: why int8). Evicting overwrites a slot in place; the slab never moves, and an
entry is never removed from its slot, only replaced or archived, so every slot below a slab's
count holds an entry. Sparse, rarely-set fields (reflex phrases and firings, links) live in dicts
keyed by entry id so that memory per entry stays O(d).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit, prange

from golem import kernels
from golem import pad as padm

CATEGORIES = ("episode", "insight", "heuristic", "warning", "opportunity", "lesson", "death_reflection")
DECAY_CLASSES = ("ephemeral", "tactical", "regime_conditional", "structural")
STATUSES = ("active", "stale", "expired", "archived")
LABELS = ("neutral", "frustration", "success", "risk")
ATTRIBUTIONS = ("mixed", "internal", "external")
ROLES = ("observation", "action", "insight")
EPHEMERAL, TACTICAL, REGIME, STRUCTURAL = range(4)
ACTIVE, STALE, EXPIRED, ARCHIVED = range(4)
DAY_MS = 86_400_000
HOUR_MS = 3_600_000.0


def fill(base: float, term: float) -> float:
    """Fill up toward 1 by `term` of the remaining headroom; never past 1 (SPEC §3.3), whatever
    the term (a config may make one exceed 1) and however the last bit rounds."""
    return min(1.0, base + term * (1.0 - base))


def pnl_magnitude(tick_pnl: float, portfolio_value: float, pnl_scale: float = 0.05) -> float:
    """m = min(1, |pnl| / (pnl_scale * value)); with nothing left (value <= 0) any change is
    everything (1) and no change nothing (0): the limit of the formula as value falls to 0."""
    denom = pnl_scale * portfolio_value
    if denom > 0:
        return min(1.0, abs(tick_pnl) / denom)
    return 1.0 if tick_pnl != 0 else 0.0


def salience(intensity: float, tick_pnl: float, portfolio_value: float, pleasure: float, *,
             probe_high: bool = False, regime_shift: bool = False, recurring_loss: bool = False,
             role_scale: float = 1.0, first_sighting: bool = False, pnl_scale: float = 0.05,
             negativity: float = 0.25, signal_boost: float = 0.1, first_sighting_floor: float = 0.7) -> float:
    """Salience of a would-be entry (SPEC §3.3).

    s = fill(intensity, m), m = min(1, |pnl| / (pnl_scale * value)); a loss fills further by
    negativity*|P| (bad is stronger than good); the entry's role scales the result; each signal
    (high probe, regime shift, recurring loss) then adds `signal_boost`; capped at 1. A first
    sighting is floored at 0.70. Role scaling precedes the additive boosts so a boost is always
    worth the same 0.1 (our reading; docs/decisions.md).
    """
    s = fill(intensity, pnl_magnitude(tick_pnl, portfolio_value, pnl_scale))
    if pleasure < 0:
        s = fill(s, negativity * abs(pleasure))
    s = min(1.0, s * role_scale)
    s = min(1.0, s + signal_boost * (int(probe_high) + int(regime_shift) + int(recurring_loss)))
    if first_sighting:
        s = max(s, first_sighting_floor)
    return s


def gate(s: float, flashbulb: bool = False, gate_min: float = 0.3, tier_14d: float = 0.5,
         tier_30d: float = 0.7, ttl_days: tuple[float, float, float] = (7, 14, 30)) -> tuple[bool, float, bool]:
    """(write?, tier TTL in days, promote?) for salience s (SPEC §3.3 gating)."""
    if s < gate_min and not flashbulb:
        return False, 0.0, False
    if s < tier_14d:
        return True, ttl_days[0], False
    if s < tier_30d:
        return True, ttl_days[1], False
    return True, ttl_days[2], True


def promote(decay_class: int) -> int:
    """One step up, never above regime-conditional by promotion alone."""
    return min(decay_class + 1, REGIME) if decay_class < REGIME else decay_class


def effective_window_days(decay_class: int, tier_ttl_days: float, sal: float,
                          class_days: tuple[float, float, float] = (1, 7, 14)) -> float:
    """max(class_days, tier TTL) * (1 + salience); structural entries never expire (inf)."""
    if decay_class == STRUCTURAL:
        return math.inf
    return max(class_days[decay_class], tier_ttl_days) * (1.0 + sal)


def status_at(now_ms: int, last_accessed_ms: int, window_days: float, archived: bool = False) -> int:
    """active, stale from the window on, expired from twice the window on (age from last access):
    an age of exactly twice the window is expired here as in retrieval and the curator."""
    if archived:
        return ARCHIVED
    age_ms = now_ms - last_accessed_ms
    if age_ms >= 2.0 * window_days * DAY_MS:
        return EXPIRED
    if age_ms >= window_days * DAY_MS:
        return STALE
    return ACTIVE


def initial_confidence(source_confidence: float, arousal: float, peak: float = 0.3, width: float = 0.6) -> float:
    """Source confidence (own 0.9 ... speculative 0.2) times the arousal encoding factor."""
    return source_confidence * padm.arousal_encoding_factor(arousal, peak, width)


def initial_confidence_batch(source_confidence: float, arousal: np.ndarray, peak: float = 0.3,
                             width: float = 0.6) -> np.ndarray:
    """`initial_confidence` for many arousals, bit for bit (a Clade push reaches a hundred
    siblings at once). numpy's pow and exp differ from libm's, which Python calls, in the last bit
    of about one value in twenty, and a literal exponent 2 becomes x * x, which differs from
    pow(x, 2) for about one in a thousand: the kernel calls libm's pow with a run-time 2.0."""
    a = np.ascontiguousarray(arousal, dtype=np.float64)
    out = np.empty_like(a)
    _initial_confidence_batch(float(source_confidence), a, float(peak), float(width), 2.0, out)
    return out


@njit(cache=True)
def _initial_confidence_batch(source, arousal, peak, width, two, out):
    c = 2.0 * math.pow(width, two)
    for i in range(arousal.size):
        out[i] = source * math.exp(-math.pow(arousal[i] - peak, two) / c)


def propagate_confidence(c: float, validated: bool, validation: float = 0.10, contradiction: float = 0.20) -> float:
    return min(1.0, max(0.0, c + validation if validated else c - contradiction))


def eviction_score(importance: float, confidence: float, sal: float) -> float:
    return importance * confidence * (1.0 + sal)


#: salience from which an entry is protected (`grimoire.protected_salience`)
PROTECTED_SALIENCE = 0.7


def is_protected(decay_class: int, flashbulb: bool, sal: float, threshold: float = PROTECTED_SALIENCE) -> bool:
    """Structural, flashbulb or salience >= 0.7 entries are never evicted nor archived."""
    return decay_class == STRUCTURAL or flashbulb or sal >= threshold


# --- the arena -------------------------------------------------------------------------------

_COLUMNS: dict[str, type] = {
    "id": np.int64, "created_ms": np.int64, "last_access_ms": np.int64, "window_ms": np.float32,
    "category": np.int8, "topic": np.int32, "scope": np.int32, "kind": np.int16,
    "confidence": np.float32, "importance": np.float32, "salience": np.float32, "decay_class": np.int8,
    "has_tag": np.bool_, "p": np.float32, "a": np.float32, "d": np.float32,
    "i0": np.float32, "emotion": np.int8, "reactivated": np.bool_, "react_count": np.int16,
    "last_react_ms": np.int64, "label": np.int8, "attribution": np.int8, "arousal_bias": np.bool_,
    "flashbulb": np.bool_, "provenance": np.int32, "access_count": np.int32, "acted_on_count": np.int32,
    "reflex": np.bool_, "status": np.int8, "heat": np.float32,
    "outcome": np.float32, "has_outcome": np.bool_, "curator_weight": np.float32, "low_conf": np.bool_,
    "role": np.int8, "raw_outcome": np.float32, "consolidated": np.bool_,
    "regime": np.int16, "ttl_days": np.float32,   # the salience tier's TTL (0: bypassed gating, e.g. imports)
}


#: codes per row are padded with zeros to a multiple of this (the retrieval kernel reads 32 at a time)
CODE_ALIGN = 32
#: the largest code: a stored vector's largest component is rounded to +-127
CODE_MAX = 127


#: rows per piece of `Grimoire.insert_pieces`
PIECE_ROWS = 1 << 16


def code_stride(dim: int) -> int:
    return -(-dim // CODE_ALIGN) * CODE_ALIGN


def quantise(v: np.ndarray, stride: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """int8 codes of the rows of v: round(v * 127 / max|v|) per row (half to even), zero-padded to
    `stride` columns. Only the direction is kept (a retrieval scores the cosine of the codes), so
    rows need not be normalised; a zero row gives zero codes. Decoding and quantising again gives
    the same codes (a Clade copy or a lesson framed on an entry inherits its codes exactly).
    Rows are taken in chunks (a bulk import's float64 temporaries stay small); `out`: write the
    codes there (rows x stride int8) instead of a new array."""
    v = np.asarray(v)
    if v.ndim == 1:
        return quantise(v[None, :], stride)[0]
    n, d = v.shape
    if out is None:
        out = np.zeros((n, stride or d), dtype=np.int8)
    if v.dtype not in (np.float32, np.float64):
        v = v.astype(np.float64)
    _quantise_rows(v, out)
    return out


@njit(cache=True)
def _quantise_rows(v, out):
    """`quantise` row by row, the numpy expressions' float64 arithmetic: scale = 127 / max|row|
    (0 for a zero row, or one holding a NaN or an infinity, whose codes are then all 0), codes
    rint(x * scale), half to even; the rest of the row zero."""
    n, d = v.shape
    for i in range(n):
        top = 0.0
        bad = False
        for j in range(d):
            a = abs(np.float64(v[i, j]))
            top = max(top, a)
            bad |= not np.isfinite(a)
        scale = CODE_MAX / top if top > 0.0 and not bad else 0.0
        for j in range(d):
            x = np.float64(v[i, j]) * scale
            out[i, j] = np.int8(np.rint(x)) if np.isfinite(x) else 0
        for j in range(d, out.shape[1]):
            out[i, j] = 0


def decode(codes: np.ndarray, dim: int) -> np.ndarray:
    """Unit float32 vectors of int8 code rows (zero for zero codes)."""
    c = np.asarray(codes)[..., :dim].astype(np.float64)
    n = np.sqrt((c * c).sum(axis=-1, keepdims=True))
    return np.divide(c, n, out=np.zeros_like(c), where=n > 0).astype(np.float32)


class Embeddings:
    """The stored embeddings as float32 unit vectors (decoded from `Grimoire.codes` on reading;
    assigning quantises). What the rest of the mind reads where it needs an entry's vector."""

    def __init__(self, gr: "Grimoire"):
        self._gr = gr

    @property
    def shape(self) -> tuple[int, int]:
        return (self._gr.codes.shape[0], self._gr.dim)

    @property
    def nbytes(self) -> int:
        return self._gr.codes.nbytes

    def __len__(self) -> int:
        return self._gr.codes.shape[0]

    def __getitem__(self, idx) -> np.ndarray:
        return decode(self._gr.codes[idx], self._gr.dim)

    def __setitem__(self, idx, v) -> None:
        v = np.asarray(v, dtype=np.float64)
        rows = self._gr.codes[idx]
        self._gr.codes[idx] = quantise(np.broadcast_to(v, rows.shape[:-1] + (self._gr.dim,)).reshape(-1, self._gr.dim),
                                       rows.shape[-1]).reshape(rows.shape)
        self._gr.refresh_scan(self._slots(idx))

    def _slots(self, idx) -> np.ndarray:
        """The slots `idx` selects (an int, a slice, an index array or a mask over the rows),
        without an index array over the whole arena (10^8 slots at the population scale); a
        negative slot counts from the end in the scan-terms kernel too."""
        if isinstance(idx, slice):
            return np.arange(*idx.indices(len(self)))
        a = np.asarray(idx)
        return np.flatnonzero(a) if a.dtype == bool else a

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out if dtype is None else out.astype(dtype)

    def copy(self) -> np.ndarray:
        return self[:]

    def astype(self, dtype) -> np.ndarray:
        return self[:].astype(dtype)


def slot_arrays(n: int, spec: list[tuple[str, type, tuple[int, ...]]]) -> dict[str, np.ndarray]:
    """Zeroed arrays of `n` rows (name, dtype, the shape of a row), C-contiguous views into one
    numpy allocation, each starting on a 64-byte line.

    Why one: numpy asks the kernel for transparent huge pages (madvise) for allocations from 4 MiB,
    and a retrieval scan streams a dozen columns at once. Allocated apart, a 1,000 x 1,024
    Grimoire's 4-byte columns are 4.1 MB each, just under that, so each stream would cross a 4 KB
    page (another TLB entry) every 1,024 entries; together they are one allocation of ~200 MB on
    2 MB pages (the kernel 3-4 % faster on the same arena: docs/performance.md)."""
    sizes = [n * int(np.prod(shape, dtype=np.int64)) * np.dtype(t).itemsize for _, t, shape in spec]
    starts = np.concatenate([[0], np.cumsum([-(-b // 64) * 64 for b in sizes])])
    buf = np.zeros(int(starts[-1]) + 64, dtype=np.uint8)
    lead = -buf.ctypes.data % 64            # the first array's line
    return {name: buf[lead + o:lead + o + b].view(t).reshape((n, *shape))
            for (name, t, shape), o, b in zip(spec, starts[:-1].tolist(), sizes)}


@dataclass
class Grimoire:
    """Entries x fields for `n_golems` Golems, `capacity` slots each."""

    n_golems: int
    capacity: int
    dim: int
    cols: dict[str, np.ndarray] = field(init=False)
    codes: np.ndarray = field(init=False)      # (slots, code_stride(dim)) int8, see `quantise`
    count: np.ndarray = field(init=False)
    next_id: int = 0
    recall_when: dict[int, tuple[str, ...]] = field(default_factory=dict)
    links: dict[int, tuple[int, ...]] = field(default_factory=dict)
    phrases: dict[int, str] = field(default_factory=dict)   # event tokens an entry was written under
    last_fired: dict[int, int] = field(default_factory=dict)   # a reflex entry's last firing (ms)
    fingerprints: bool = False      # keep a 10,240-bit HDC fingerprint per entry (retrieval.mode somatic_hdc)
    on_insert: object = None        # callback(slots) after a write, e.g. to fingerprint new entries
    protect: float = PROTECTED_SALIENCE   # salience from which an entry is never evicted nor archived
    act_ring: int = 3               # act times kept per entry (reflex.promotion_min: "acted on >= n times in 30 days")
    # the scan terms' constants (`set_scan`): temporal base, half-life (ms), reactivation boost, and
    # the epoch their exponents count from
    temporal_base: float = 0.995
    half_life_ms: float = 3 * DAY_MS
    react_boost: float = 0.3
    epoch_ms: int = 0

    def __post_init__(self) -> None:
        n = self.n_golems * self.capacity
        # the columns, the codes and the scan terms (`refresh_scan`: what a retrieval reads besides
        # the columns, derived from them) in one allocation (`slot_arrays`)
        arrays = slot_arrays(n, [(k, t, ()) for k, t in _COLUMNS.items()]
                             + [("codes", np.int8, (code_stride(self.dim),)), ("norm2", np.int32, ()),
                                ("recency", np.float32, ()), ("charge", np.float32, ())])
        self.cols = {k: arrays[k] for k in _COLUMNS}
        self.cols["id"][:] = -1
        self.cols["last_react_ms"][:] = -1
        self.cols["provenance"][:] = -1
        self.cols["curator_weight"][:] = 1.0
        self.codes = arrays["codes"]
        self.count = np.zeros(self.n_golems, dtype=np.int64)
        self.fp = np.zeros((n, 160), dtype=np.uint64) if self.fingerprints else None
        self.keep_acts(self.act_ring)
        # an empty slot's scan terms (zero codes, i0 0, accessed at the epoch 0) are 0, 1 and 0
        self.norm2 = arrays["norm2"]
        self.recency = arrays["recency"]
        self.recency[:] = 1.0
        self.charge = arrays["charge"]

    def keep_acts(self, ring: int) -> None:
        """Keep the times of each entry's last `ring` acts (none recorded yet): a ring indexed by
        acted_on_count, whose oldest time, when there are that many, says whether they all fall in
        a window. A time is 48 bits of ms, the low 32 in `acted_lo` and the high 16 in `acted_hi`
        (6 bytes an act, not 8: 2^48 ms is ~8,900 years, past any scenario's 100). A decision's
        recall writes them (`kernels.recall_served`)."""
        self.act_ring = max(1, ring)
        n = self.n_golems * self.capacity
        self.acted_lo = np.zeros((n, self.act_ring), dtype=np.uint32)
        self.acted_hi = np.zeros((n, self.act_ring), dtype=np.uint16)

    def acted_at(self, slots: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """The act times (int64 ms) at ring position pos of the entries at slots."""
        return (self.acted_hi[slots, pos].astype(np.int64) << 32) | self.acted_lo[slots, pos].astype(np.int64)

    # --- the scan terms -------------------------------------------------------------------
    #: the arrays `refresh_scan` derives from the columns (a checkpoint does not save them)
    SCAN_TERMS = ("norm2", "recency", "charge")

    def scan_constants(self) -> tuple[int, float, float, float]:
        """(epoch_ms, lg2_per_ms, inv_hl, boost): what `kernels.recency_term` and
        `kernels.charge_term` take besides an entry's columns."""
        return (int(self.epoch_ms), math.log2(self.temporal_base) / HOUR_MS, 1.0 / self.half_life_ms,
                float(self.react_boost))

    def rebase_span_ms(self) -> float:
        """How far `now` may run past the epoch before `prepare_scan` moves it: exponents of at
        most 32 within the span, so a term's float32 (range 2^-126 .. 2^128) holds it whatever
        the half-life and base, with room for a reactivation boost over an i0 of 1e-8 (2^25)."""
        lg2 = abs(math.log2(self.temporal_base)) / HOUR_MS
        return min(32.0 * self.half_life_ms, 32.0 / lg2 if lg2 > 0 else math.inf)

    def refresh_scan(self, slots: np.ndarray | None = None) -> None:
        """Recompute the scan terms of `slots` (all slots when None) from their columns: what
        every write of codes, last_access_ms, i0, created_ms, reactivated or last_react_ms does
        after it (`insert`, the embeddings' setter, `kernels.recall_served`); a test or tool that
        writes those columns directly calls it."""
        c = self.cols
        args = (self.codes, c["last_access_ms"], c["i0"], c["created_ms"], c["reactivated"], c["last_react_ms"],
                *self.scan_constants(), self.norm2, self.recency, self.charge)
        if slots is None:
            kernels.scan_terms_all.on(self.norm2.size)(*args)
        elif np.size(slots):
            slots = np.ascontiguousarray(slots, dtype=np.int64).ravel()
            kernels.scan_terms.on(slots.size)(slots, *args)

    def set_scan(self, temporal_base: float, half_life_ms: float, react_boost: float) -> None:
        """The constants the scan terms are computed with (the retrieval's); a change recomputes them."""
        key = (float(temporal_base), float(half_life_ms), float(react_boost))
        if key != (self.temporal_base, self.half_life_ms, self.react_boost):
            self.temporal_base, self.half_life_ms, self.react_boost = key
            self.refresh_scan()

    def prepare_scan(self, temporal_base: float, half_life_ms: float, react_boost: float, now_ms: int) -> None:
        """Before a retrieval at `now_ms`: the scan terms for these constants, and an epoch no
        further than `rebase_span_ms` behind now (a run longer than the span moves it to now and
        recomputes every term: once per span, ~96 simulated days at the defaults)."""
        self.set_scan(temporal_base, half_life_ms, react_boost)
        if abs(now_ms - self.epoch_ms) > self.rebase_span_ms():
            self.epoch_ms = int(now_ms)
            self.refresh_scan()

    def scan_is_current(self, slots: np.ndarray | None = None) -> bool:
        """Whether the stored scan terms of `slots` (all when None) are what `refresh_scan` would
        compute now from the columns (GOLEM_CHECK_SCAN makes retrievals ask it)."""
        idx = np.arange(self.norm2.size) if slots is None else np.ascontiguousarray(slots, dtype=np.int64).ravel()
        c = self.cols
        stale = kernels.scan_terms_stale.on(idx.size)
        return stale(idx, self.codes, c["last_access_ms"], c["i0"], c["created_ms"], c["reactivated"],
                     c["last_react_ms"], *self.scan_constants(), self.norm2, self.recency, self.charge) == 0

    def __getattr__(self, name: str) -> np.ndarray:
        cols = self.__dict__.get("cols")
        if cols is not None and name in cols:
            return cols[name]
        raise AttributeError(name)

    @property
    def emb(self) -> Embeddings:
        """The embeddings as float32 unit vectors (decoded on reading, quantised on assigning)."""
        return Embeddings(self)

    def bytes_per_entry(self) -> float:
        total = (self.codes.nbytes + sum(c.nbytes for c in self.cols.values())
                 + self.acted_lo.nbytes + self.acted_hi.nbytes
                 + self.norm2.nbytes + self.recency.nbytes + self.charge.nbytes
                 + (self.fp.nbytes if self.fp is not None else 0))
        return total / (self.n_golems * self.capacity)

    @classmethod
    def bytes_for(cls, n_golems: int, capacity: int, dim: int, fingerprints: bool = False, act_ring: int = 3) -> int:
        """Bytes an arena of n_golems x capacity entries takes, measured on a one-slot arena of the
        same layout, so a world too big for memory is refused before it allocates."""
        one = cls(1, 1, dim, fingerprints=fingerprints, act_ring=act_ring)
        return int(math.ceil(one.bytes_per_entry() * n_golems * capacity)) + 8 * n_golems

    def slab(self, g: int) -> slice:
        return slice(g * self.capacity, g * self.capacity + int(self.count[g]))

    def live_rows(self, golems: np.ndarray) -> np.ndarray:
        """(Golems x capacity) mask of the slots of their slabs holding an entry (below the count,
        with an id), in one pass instead of a row copy of the id column."""
        return _live_rows(np.asarray(golems, dtype=np.int64), self.capacity, self.count, self.cols["id"])

    def slot_of(self, entry_id: int) -> int:
        hits = np.flatnonzero(self.cols["id"] == entry_id)
        return int(hits[0]) if hits.size else -1

    def insert(self, golem: np.ndarray, emb: np.ndarray | None, values: dict[str, np.ndarray],
               unit: bool = False, codes: np.ndarray | None = None,
               number: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Write a batch of entries in the given order; returns (slots, ids).

        Full slabs evict their lowest importance*confidence*(1+salience) non-protected entry
        (archived ones first); a slab with nothing evictable refuses the write (slot -1). The
        embeddings are stored as `quantise` codes, which depend only on each row's direction, so
        normalised (`unit`, bulk imports) and raw rows are stored alike; `codes` gives the rows'
        codes instead of `emb`. `number=False` leaves the stored rows' ids to the caller
        (`insert_pieces`), with the id column of their slots written as -2 meanwhile.
        """
        golem = np.asarray(golem, dtype=np.int64)
        c = self.cols
        # work: the rows, and a slab scored for each row whose Golem's slab is full
        work = golem.size + self.capacity * int(np.count_nonzero(self.count[golem] >= self.capacity))
        slots, evicted = _pick_slots.on(work)(golem, np.argsort(golem, kind="stable"), self.count, self.capacity,
                                              c["id"], c["importance"], c["confidence"], c["salience"],
                                              c["decay_class"], c["flashbulb"].view(np.int8), c["status"],
                                              MANY_EVICTIONS, self.protect)
        ok = slots >= 0
        every = bool(ok.all())                      # the usual case: no row to drop
        n_ok = golem.size if every else int(ok.sum())
        ids = np.full(golem.size, -1, dtype=np.int64)
        if number:
            ids[ok] = self.next_id + np.arange(n_ok)
            self.next_id += n_ok
        else:
            ids[ok] = -2
        s = slots if every else slots[ok]

        def kept(v):
            return v if every else v[ok]
        evicted = evicted if every else evicted[ok]    # = c["id"][s], read by the kernel beside the scan
        gone = None
        for side in (self.recall_when, self.links, self.phrases, self.last_fired):   # most evicted entries have none
            if side:
                gone = set(evicted[evicted >= 0].tolist()) if gone is None else gone
                for eid in side.keys() & gone:
                    del side[eid]
        for name, col in c.items():
            if name not in values:
                col[s] = _RESET.get(name, 0)
        c["id"][s] = kept(ids)
        for name, v in values.items():
            c[name][s] = kept(np.asarray(v)) if np.ndim(v) else v
        if codes is not None:
            self.codes[s] = kept(codes)
        elif every and s.size and s[-1] - s[0] == s.size - 1 and (np.diff(s) == 1).all():
            quantise(emb, self.codes.shape[1], out=self.codes[s[0]:s[-1] + 1])   # a bulk import: in place
        else:
            self.codes[s] = quantise(kept(emb), self.codes.shape[1])
        self.refresh_scan(s)
        if self.on_insert is not None and s.size:
            self.on_insert(s)
        return slots, ids

    def insert_pieces(self, golem: np.ndarray, rows, max_rows: int = PIECE_ROWS,
                      number: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """`insert` of one large batch (a Clade push reaching every sibling at once: at 1,000
        Golems a Clade, ~10^6 copies an instant), in pieces of whole Golems so its temporaries stay
        bounded: each Golem's rows go into one piece in batch order, and the stored rows are
        numbered in batch order over all pieces, so slots, ids and the arena are those of one
        insert. `rows(idx)` gives (codes, values) for the batch rows idx (ascending). `number=False`:
        the caller numbers the stored rows (as `insert`; the ids returned are then -2)."""
        golem = np.asarray(golem, dtype=np.int64)
        if golem.size <= max_rows:
            codes, values = rows(np.arange(golem.size))
            return self.insert(golem, None, values, codes=codes, number=number)
        per = np.bincount(golem, minlength=self.n_golems)
        piece = ((np.cumsum(per) - per) // max_rows)[golem]      # Golems in id order, ~max_rows rows a piece
        order = np.argsort(piece, kind="stable")
        bounds = np.searchsorted(piece[order], np.arange(int(piece.max()) + 2))
        slots = np.empty(golem.size, dtype=np.int64)
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            if hi > lo:
                idx = order[lo:hi]                                # ascending: argsort is stable
                codes, values = rows(idx)
                slots[idx] = self.insert(golem[idx], None, values, codes=codes, number=False)[0]
        ok = slots >= 0
        ids = np.full(golem.size, -1, dtype=np.int64)
        if not number:
            ids[ok] = -2
            return slots, ids
        ids[ok] = self.next_id + np.arange(int(ok.sum()))
        self.next_id += int(ok.sum())
        self.cols["id"][slots[ok]] = ids[ok]
        return slots, ids

    def unit_pad(self, slots: np.ndarray) -> np.ndarray:
        """(n, 3) unit PAD vectors of the entries' tags (0 for untagged ones), float64: what the
        alternative retrieval profiles take the PAD cosine with. The four-factor kernel computes
        the cosine from p, a, d itself (`padm.pad_cosine_safe`'s operations)."""
        c = self.cols
        p, a, d = (c[k][slots].astype(np.float64) for k in "pad")
        n = np.maximum(np.sqrt(p * p + a * a + d * d), 1e-8)
        tagged = c["has_tag"][slots]
        return np.stack([np.where(tagged, x / n, 0.0) for x in (p, a, d)], axis=-1)


_RESET = {"id": -1, "last_react_ms": -1, "provenance": -1, "curator_weight": 1.0}


@njit(cache=True)
def _live_rows(golems, cap, count, ids):
    live = np.zeros((golems.size, cap), dtype=np.bool_)
    for r in range(golems.size):
        base = golems[r] * cap
        for j in range(count[golems[r]]):
            live[r, j] = ids[base + j] >= 0
    return live


@njit(cache=True, fastmath={"nnan", "ninf", "nsz"})
def _lowest(buf):
    """The minimum of a score buffer (fast-math lets the min reduction vectorise; no NaN here)."""
    m = np.inf
    for j in range(buf.size):
        m = min(m, buf[j])
    return m


@njit(cache=True)
def _smallest(buf, m):
    """The slots of the (up to) m smallest finite values of `buf`, in (value, slot) order: the
    slots that m minimum-after-minimum picks would take, in one pass (an insertion into a short
    sorted list; a value joins after its equals, which came from earlier slots)."""
    m = min(m, buf.size)
    val = np.empty(m)
    slot = np.empty(m, dtype=np.int64)
    n = 0
    for t in range(buf.size):
        v = buf[t]
        if v == np.inf or (n == m and v >= val[m - 1]):
            continue
        i = n if n < m else m - 1
        while i > 0 and val[i - 1] > v:
            if i < m:
                val[i], slot[i] = val[i - 1], slot[i - 1]
            i -= 1
        val[i], slot[i] = v, t
        n = min(n + 1, m)
    return slot[:n]


@njit(cache=True)
def _eviction_scores(imp, conf, sl, dc, fb, st, keep, buf):
    """A full slab's eviction scores (SPEC §3.5): importance x confidence x (1 + salience), -1 for
    an archived entry (they go first), +inf for a protected one. The float32 product and comparison
    as numpy makes them on the columns (a stored 0.7, 0.69999999, is protected). `fb` is the
    flashbulb column viewed as int8 and the selects are branch-free: a bool array and branches kept
    the loop scalar, 6x slower."""
    for t in range(buf.size):
        score = np.float64(imp[t] * conf[t]) * (1.0 + np.float64(sl[t]))
        archived = st[t] == ARCHIVED
        protected = (dc[t] == STRUCTURAL) | (fb[t] != 0) | (sl[t] >= keep)
        buf[t] = np.inf if protected else (-1.0 if archived else score)


#: a Golem getting more evictions than this in one insert takes its slab's smallest scores in one
#: pass (`_smallest`) instead of minimum after minimum
MANY_EVICTIONS = 1


@kernels.threaded(cache=True)
def _pick_slots(golem, order, count, cap, ids, importance, confidence, sal, decay_class, flashbulb, status,
                many=MANY_EVICTIONS, protect=PROTECTED_SALIENCE):
    """Sequentially choose a slot for each new entry of each Golem: the next free one, else evict.

    A slot given to an entry of this batch (free or evicted) is marked STRUCTURAL, off-limits
    until the insert writes the entry. Once a Golem's slab is full it is scored branch-free into a
    buffer once (protected = +inf, archived = -1); each eviction then takes the first slot holding
    the buffer's minimum and sets it to +inf, which is what scoring the slab again would give, or,
    for more than `many` of them (a Clade push brings a Golem dozens of copies at once), the next
    of the buffer's smallest values in (value, slot) order, the same sequence. Also returns the id
    each chosen slot held. A Golem's entries are placed in batch order (`order`: a stable argsort of
    `golem`, made by numpy so that numba compiles no sort of its own, ~4 s of a first run's
    compiling); Golems touch only their own slabs, so they are spread over numba's threads with the
    same result."""
    out = np.empty(golem.size, dtype=np.int64)
    evicted = np.full(golem.size, -1, dtype=np.int64)   # the id each slot held (-1: none)
    starts = np.empty(golem.size + 1, dtype=np.int64)
    n_groups = 0
    for j in range(golem.size):
        if j == 0 or golem[order[j]] != golem[order[j - 1]]:
            starts[n_groups] = j
            n_groups += 1
    starts[n_groups] = golem.size
    keep = np.float32(protect)
    for grp in prange(n_groups):
        buf = np.empty(cap)
        scored = False
        ranked = np.empty(0, dtype=np.int64)   # many evictions: the slots they take, in order
        use_ranked = False
        nxt = 0
        for j in range(starts[grp], starts[grp + 1]):
            i = order[j]
            g = golem[i]
            base = g * cap
            if count[g] < cap:
                out[i] = base + count[g]
                evicted[i] = ids[base + count[g]]
                decay_class[base + count[g]] = STRUCTURAL   # holds a new entry of this batch
                count[g] += 1
                continue
            if not scored:
                _eviction_scores(importance[base:base + cap], confidence[base:base + cap], sal[base:base + cap],
                                 decay_class[base:base + cap], flashbulb[base:base + cap], status[base:base + cap],
                                 keep, buf)
                scored = True
                if starts[grp + 1] - j > many:
                    ranked = _smallest(buf, starts[grp + 1] - j)
                    use_ranked = True
            best = -1
            if use_ranked:
                if nxt < ranked.size:
                    best = ranked[nxt]
                    nxt += 1
            else:
                low = _lowest(buf)
                if low < np.inf:
                    for t in range(cap):
                        if buf[t] == low:     # ties keep the earlier slot (deterministic)
                            best = t
                            break
            if best >= 0:
                decay_class[base + best] = STRUCTURAL  # holds a new entry of this batch: off-limits until written
                buf[best] = np.inf
                best += base
                evicted[i] = ids[best]
            out[i] = best
    return out, evicted
