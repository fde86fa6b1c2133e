"""PAD affect: the scalar formula layer (SPEC §2, §16).

Every function here is a small pure function named as the spec names it, so a researcher
can check it against the formula; vectorised twins live in `golem.kernels`.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import yaml

PAD = tuple[float, float, float]

#: Sign pattern per Plutchik primary emotion (SPEC §2.2); 0 means either sign.
SIGN_PATTERNS: dict[str, tuple[int, int, int]] = {
    "joy": (1, 1, 1),
    "trust": (1, -1, 1),
    "fear": (-1, 1, -1),
    "surprise": (0, 1, -1),
    "sadness": (-1, -1, -1),
    "disgust": (-1, -1, 1),
    "anger": (-1, 1, 1),
    "anticipation": (1, 1, 1),
}
EMOTIONS: tuple[str, ...] = tuple(SIGN_PATTERNS)
#: Emotion codes as stored in the arena (0 = neutral).
EMOTION_CODES: tuple[str, ...] = ("neutral",) + EMOTIONS
NEUTRAL_NORM = 0.05
PROTOTYPE_FILE = Path(__file__).resolve().parent.parent / "configs" / "plutchik_pad.yaml"


def clamp(x: float, lo: float = -1.0, hi: float = 1.0) -> float:
    return lo if x < lo else hi if x > hi else x


def norm(v: PAD) -> float:
    return math.sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2])


def pad_cosine_safe(a: PAD, b: PAD) -> float:
    """Cosine of two PAD vectors mapped to [0, 1]; a zero vector gives the neutral 0.5."""
    dot = a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
    return (dot / (max(norm(a), 1e-8) * max(norm(b), 1e-8)) + 1.0) / 2.0


def intensity(pad: PAD) -> float:
    """||pad|| / sqrt(3): 0 for calm, 1 at a corner of the PAD cube."""
    return norm(pad) / math.sqrt(3.0)


def arousal_encoding_factor(arousal: float, peak: float = 0.3, width: float = 0.6) -> float:
    """Inverted-U of encoding strength over arousal (peak at 0.3); scales initial confidence."""
    return math.exp(-((arousal - peak) ** 2) / (2.0 * width**2))


def arousal_band(arousal: float) -> str:
    """low (< -0.3): thin elaboration; moderate: full; high (> 0.5): crisis encoding."""
    if arousal < -0.3:
        return "low"
    if arousal > 0.5:
        return "high"
    return "moderate"


@lru_cache(maxsize=4)
def load_prototypes(path: str | None = None) -> dict[str, PAD]:
    """The published prototype table (configs/plutchik_pad.yaml), validated against the sign patterns."""
    with open(path or PROTOTYPE_FILE) as fh:
        raw = yaml.safe_load(fh)
    protos = {k: tuple(float(x) for x in v) for k, v in raw.items()}
    for name, signs in SIGN_PATTERNS.items():
        vec = protos[name]
        for s, x in zip(signs, vec):
            if s and (x > 0) != (s > 0):
                raise ValueError(f"prototype {name} {vec} breaks the sign pattern {signs}")
    return protos


def classify(pad: PAD, prototypes: dict[str, PAD] | None = None) -> str:
    """Nearest Plutchik prototype by cosine; 'neutral' when the PAD norm is below 0.05.

    Ties go to the earlier emotion in SPEC order, so the result never depends on dict order.
    """
    if norm(pad) < NEUTRAL_NORM:
        return "neutral"
    protos = prototypes or load_prototypes()
    best, best_cos = "neutral", -2.0
    for name in EMOTIONS:
        c = pad_cosine_safe(pad, protos[name])
        if c > best_cos:
            best, best_cos = name, c
    return best


def emotional_intensity_at(
    i0: float,
    created_at_ms: int,
    now_ms: int,
    reactivated: bool,
    last_reactivated_at_ms: int | None,
    half_life_days: float = 3.0,
    reactivation_boost: float = 0.3,
) -> float:
    """Emotional charge of a tag at `now` (SPEC §2.6): exponential fading plus a reactivation boost."""
    h_ms = half_life_days * 86_400_000.0
    base = i0 * 2.0 ** (-(now_ms - created_at_ms) / h_ms)
    boost = 0.0
    if reactivated and last_reactivated_at_ms is not None:
        boost = reactivation_boost * 2.0 ** (-(now_ms - last_reactivated_at_ms) / h_ms)
    return min(1.0, base + boost)


def charge(i0: float, intensity_now: float) -> float:
    """Share of a tag's original charge left now, clipped to [0, 1] (charge fading, SPEC §4.1)."""
    return min(1.0, max(0.0, intensity_now / max(i0, 1e-8)))


def faded_emotional_factor(pad_cos: float, charge_now: float) -> float:
    """A faded tag pulls toward the neutral 0.5; charge 1 gives the plain cosine factor."""
    return 0.5 + (pad_cos - 0.5) * charge_now


def recall_charge(i0: float, created_at_ms: int, now_ms: int, reactivated: bool,
                  last_reactivated_at_ms: int | None, half_life_days: float = 3.0,
                  reactivation_boost: float = 0.3) -> float:
    """What a recalled tag evokes of its original charge (SPEC §2.1 recalled feeling): intensity_at(now) / i0
    (§2.6), not clipped: a faded tag evokes little, a freshly reactivated one up to its boost more than it did
    when written. 0 for a tag written without charge (i0 0)."""
    if i0 <= 1e-8:
        return 0.0
    return emotional_intensity_at(i0, created_at_ms, now_ms, reactivated, last_reactivated_at_ms, half_life_days,
                                  reactivation_boost) / i0


def recalled_feeling(scores, charges, tags) -> tuple[float, float]:
    """The affect the entries a Golem considers evoke (SPEC §2.1): `sum w_i tag_i / sum w_i` over the tagged ones,
    `w_i = max(score_i, 0) * charge_i`; (P, A) of that mean, (0, 0) when nothing tagged carries weight. `tags[i]` is
    a (p, a, d) triple or None (an untagged entry evokes nothing). Recall moves no dominance: agency is judged from
    the present."""
    sw = sp = sa = 0.0
    for score, ch, tag in zip(scores, charges, tags):
        if tag is None:
            continue
        w = max(score, 0.0) * ch
        sw += w
        sp += w * tag[0]
        sa += w * tag[1]
    return (sp / sw, sa / sw) if sw > 0 else (0.0, 0.0)


#: the mood's intensity bands of the risk channel (SPEC §5): mild < 0.33 <= moderate < 0.66 <= intense
RISK_BANDS = (0.33, 0.66)


def risk_multiplier(mood: PAD, risk_by_emotion: dict[str, tuple[float, float, float]], max_boost: float = 0.2,
                    prototypes: dict[str, PAD] | None = None, neutral_norm: float = NEUTRAL_NORM) -> float:
    """The mood's risk multiplier (SPEC §5, the risk channel): 1 + the change `risk_by_emotion` gives the mood's
    label for its intensity band (mild, moderate, intense), never above 1 + max_boost nor below 0. A neutral mood
    (norm < neutral_norm) or a label without an entry changes nothing."""
    label = "neutral" if norm(mood) < neutral_norm else classify(mood, prototypes)
    steps = risk_by_emotion.get(label)
    if steps is None:
        return 1.0
    i = intensity(mood)
    band = 0 if i < RISK_BANDS[0] else 1 if i < RISK_BANDS[1] else 2
    return min(max(1.0 + steps[band], 0.0), 1.0 + max_boost)


def apply_contagion(receiver_pad: PAD, incoming_pad: PAD, attenuation: float = 0.3) -> PAD:
    """Clade contagion (SPEC §2.7): P and A move by attenuation x the sender's tag; D is sovereign."""
    return (
        clamp(receiver_pad[0] + incoming_pad[0] * attenuation),
        clamp(receiver_pad[1] + incoming_pad[1] * attenuation),
        receiver_pad[2],
    )


def affect_step(prev: PAD, target: PAD, dt_s: float, half_life_s: float) -> PAD:
    """One step of either level of affect (SPEC §2.1, §16): `rho * prev + (1 - rho) * target` with
    rho = 2^(-dt / H). The step lives in simulated time, so the same market gives the same affect at
    any cadence, and its steady state under a constant target is that target: a convex combination
    never runs into the clamp by itself.

    Emotion: prev = emotion, target = stimulus (`emotion_step`). Mood: prev = mood - baseline,
    target = emotion, baseline added back (`mood_step`).
    """
    rho = 2.0 ** (-dt_s / half_life_s)
    return tuple(rho * p + (1.0 - rho) * t for p, t in zip(prev, target))  # type: ignore[return-value]


def emotion_step(emotion: PAD, stimulus: PAD, dt_s: float, half_life_s: float = 600.0) -> PAD:
    """emotion_t = clamp(rho * emotion_{t-1} + (1 - rho) * stimulus_t): what just happened, felt within minutes."""
    return tuple(clamp(x) for x in affect_step(emotion, stimulus, dt_s, half_life_s))  # type: ignore[return-value]


def mood_step(mood: PAD, emotion: PAD, baseline: PAD, dt_s: float, half_life_s: float = 43_200.0) -> PAD:
    """mood_t = clamp(baseline + rho * (mood_{t-1} - baseline) + (1 - rho) * emotion_t) (SPEC §2.1):
    the mood integrates emotions over hours and rests at the Golem's temperament when nothing is felt."""
    rel = affect_step(tuple(m - b for m, b in zip(mood, baseline)), emotion, dt_s, half_life_s)
    return tuple(clamp(b + r) for b, r in zip(baseline, rel))  # type: ignore[return-value]


def attribution(dominance: float, threshold: float = 0.2) -> str:
    """internal if D > 0.2, external if D < -0.2, else mixed (SPEC §3.1)."""
    if dominance > threshold:
        return "internal"
    if dominance < -threshold:
        return "external"
    return "mixed"


def emotion_label(pleasure: float, arousal: float, recent_losses: int, failed_attempts: int,
                  probe_high: bool, high_arousal: float = 0.5) -> str:
    """Seed-[S] label: frustration | success | risk | neutral (SPEC §2.2).

    frustration: P < 0 with >= 2 losing ticks of the last 5; success: P > 0 after > 2 failed
    attempts; risk: high arousal with P < 0, or a high probe. Checked in that order.
    """
    if pleasure < 0 and recent_losses >= 2:
        return "frustration"
    if pleasure > 0 and failed_attempts > 2:
        return "success"
    if (arousal > high_arousal and pleasure < 0) or probe_high:
        return "risk"
    return "neutral"
