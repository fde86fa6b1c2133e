"""Lock-in: the spiral and what breaks it (SPEC §2.9), over seeds paired by seed.

    .venv/bin/python scripts/lockin.py --seeds 20 --out runs/lockin
    .venv/bin/python scripts/lockin.py --seeds 4 --set duration=3d          # a quick look

Runs crash_recovery and losing_streak under each setting below on the same seeds (a seed is the
same tape in every setting, so settings compare pairwise), as one `golem-sim sweep` (the sweep file
is written to OUT/lockin.yaml; finished runs are reused), two runs at a time. Per run:
  recovery_h   hours from the price's full recovery to the holders' mean mood P back within 0.1
               of its pre-crash level (sim.analysis.mood_recovery; capped at the run's end); the
               crash is the scenario's flash_crash event, else the market's deepest fall within 3h
  congruence   the mood-congruence index (SPEC §14), mean over the run's retrievals
  mood_p       mean mood P over all awake heartbeats
  captured     the holders' share of the recovery's gain; final_value: their mean final value
Prints a markdown table (per setting: means with 95 % t intervals) and the paired differences of
§2.9 with their 95 % intervals and signs; writes OUT/lockin.json. A run that fails is counted and
named, never averaged.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCENARIOS = ("crash_recovery", "losing_streak")
ALL_OFF = {"contrarian.enabled": False, "curator.balance": False, "retrieval.anti_rumination": False,
           "dream.rem_cycles": 0}
NO_RECALL = {"appraisal.recall_gain": 0}
COUNTERMEASURES = {"contrarian": "contrarian.enabled", "curator balance": "curator.balance",
                   "anti-rumination": "retrieval.anti_rumination", "REM depotentiation": "dream.rem_cycles"}
DOSES = (0.0, 0.15, 0.3, 0.5)
METRICS = ("recovery_h", "congruence", "mood_p", "captured", "final_value")


def settings() -> dict[str, dict]:
    """Setting name -> its overrides. A dose equal to the default weight is the all-off setting
    itself (the same runs), not a second copy of it."""
    from golem.config import default_table
    out = {"baseline": {}, "no recall": dict(NO_RECALL), "all off": dict(ALL_OFF),
           "all off, no recall": {**ALL_OFF, **NO_RECALL}}
    for name, key in COUNTERMEASURES.items():
        out[f"{name} off"] = {key: ALL_OFF[key]}
    default_w = default_table()["retrieval"]["w_emotional"]
    for w in DOSES:
        if w != default_w:
            out[f"all off, w_emotional {w}"] = {**ALL_OFF, "retrieval.w_emotional": w}
    return out


def dose_setting(w: float) -> str:
    from golem.config import default_table
    return "all off" if w == default_table()["retrieval"]["w_emotional"] else f"all off, w_emotional {w}"


def crash_start(run: Path):
    """(asset, start) of the scenario's first flash_crash event, from the run's manifest; (None,
    None) when it schedules none (mood_recovery then finds the crash in the market)."""
    from sim.analysis import manifest
    for ev in (manifest(run).get("scenario") or {}).get("market", {}).get("events", []):
        if ev.get("kind") == "flash_crash":
            return ev.get("asset"), ev["at"]
    return None, None


def figures(run: Path) -> dict:
    import polars as pl

    from sim import analysis as A
    asset, start = crash_start(run)
    r = A.mood_recovery(run, asset=asset, start=start).collect().row(0, named=True)
    mc = A.mood_congruence(run).select(pl.col("mood_congruence").mean()).collect().item()
    mood = (A.scan_table(run, "heartbeats").filter(pl.col("state_path") != "DREAMING")
            .select(pl.col("mood_p").mean()).collect().item())
    hours = None if r["mood_recovery_s"] is None else r["mood_recovery_s"] / 3600
    return dict(recovery_h=hours, capped=r["capped"], price_recovery_h=None if r["price_recovery_s"] is None
                else r["price_recovery_s"] / 3600, depth=r["depth"], holders=r["holders"], congruence=mc,
                mood_p=mood, captured=r["captured_share"], final_value=r["final_value"])


def sweep_file(out: Path, seeds: list[int], sets: dict[str, dict], scenarios=SCENARIOS) -> Path:
    path = out / "lockin.yaml"
    out.mkdir(parents=True, exist_ok=True)
    doc = {"name": "lockin", "description": "SPEC 2.9 lock-in experiments (written by scripts/lockin.py)",
           "scenarios": [str(ROOT / "scenarios" / f"{s}.yaml") for s in scenarios],
           "override_sets": list(sets.values()), "seeds": seeds}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def collect(out: Path, sets: dict[str, dict]) -> list[dict]:
    """One row per planned run: scenario, setting, seed, status, error, wall_s and its figures."""
    from sim.sweep import combo_key, read_summary
    by_combo = {combo_key(tuple(o.items())): name for name, o in sets.items()}
    rows = []
    for r in read_summary(out).collect().iter_rows(named=True):
        row = dict(scenario=r["scenario"], setting=by_combo[r["combo"]], seed=r["seed"], status=r["status"],
                   error=r["error"], wall_s=r["wall_s"])
        row.update(figures(Path(r["run_path"])) if r["status"] == "ok" else {m: None for m in METRICS})
        rows.append(row)
    return rows


def by_seed(rows, scenario, setting, metric) -> dict:
    return {r["seed"]: r[metric] for r in rows if r["scenario"] == scenario and r["setting"] == setting}


def interval(d: dict, digits: int = 3, sign: str = "+") -> str:
    """mean [low, high]; `sign` "+" for differences, "" for levels."""
    if d["mean"] is None:
        return "–"
    f = f"{sign},.{digits}f"
    return format(d["mean"], f) + ("" if d["low"] is None else f" [{d['low']:{f}}, {d['high']:{f}}]")


def comparisons(rows, scenario) -> list[dict]:
    """The paired differences §2.9 lists, a - b over seeds: (what, a, b, metric, result)."""
    from sim.analysis import paired_difference
    pairs = [("spiral: recalled feeling with every countermeasure off", "all off", "all off, no recall"),
             ("recalled feeling at the defaults", "baseline", "no recall"),
             ("all countermeasures together, on - off", "baseline", "all off")]
    pairs += [(f"{name}, on - off", "baseline", f"{name} off") for name in COUNTERMEASURES]
    pairs += [(f"dose: w_emotional {hi} - {lo}", dose_setting(hi), dose_setting(lo))
              for lo, hi in zip(DOSES, DOSES[1:])] + [(f"dose: w_emotional {DOSES[-1]} - 0",
                                                       dose_setting(DOSES[-1]), dose_setting(0.0))]
    out = []
    for what, a, b in pairs:
        metrics = ("recovery_h", "congruence", "mood_p")
        if what.startswith(("spiral", "all countermeasures")):
            metrics += ("captured", "final_value")          # the consequence: what the spiral costs
        for m in metrics:
            out.append(dict(what=what, a=a, b=b, metric=m,
                            **paired_difference(by_seed(rows, scenario, a, m), by_seed(rows, scenario, b, m))))
    return out


def dose_monotone(rows, scenario, metric) -> bool | None:
    """Seed means rising with the dose (non-decreasing), or None when some dose has no value."""
    means = []
    for w in DOSES:
        v = [x for x in by_seed(rows, scenario, dose_setting(w), metric).values() if x is not None and not math.isnan(x)]
        if not v:
            return None
        means.append(sum(v) / len(v))
    return all(b >= a for a, b in zip(means, means[1:]))


def report(rows, sets, scenarios=SCENARIOS) -> tuple[str, dict]:
    from sim.analysis import paired_difference
    lines, result = [], {"comparisons": {}, "dose_monotone": {}, "means": {}}
    for scen in scenarios:
        lines += [f"\n### {scen}\n", "| setting | runs ok | recovery (h) | capped | congruence | mood P | captured | "
                  "final value |", "|---|---|---|---|---|---|---|---|"]
        for name in sets:
            rs = [r for r in rows if r["scenario"] == scen and r["setting"] == name]
            ok = [r for r in rs if r["status"] == "ok"]
            cells = {}
            for m in METRICS:
                vals = {r["seed"]: r[m] for r in ok}
                cells[m] = paired_difference(vals, {k: 0.0 for k in vals})   # a mean's t interval: against 0
            result["means"][f"{scen} / {name}"] = cells
            capped = sum(bool(r.get("capped")) for r in ok)
            measured = sum(r["recovery_h"] is not None for r in ok)
            lines.append(f"| {name} | {len(ok)}/{len(rs)} | {interval(cells['recovery_h'], 2, '')} (n={measured}) | "
                         f"{capped} | {interval(cells['congruence'], 4, '')} | {interval(cells['mood_p'], 3, '')} | "
                         f"{interval(cells['captured'], 3, '')} | {interval(cells['final_value'], 0, '')} |")
        comp = comparisons(rows, scen)
        result["comparisons"][scen] = comp
        lines += ["", "| paired difference (a - b) | metric | n | mean [95 % CI] | sign |", "|---|---|---|---|---|"]
        for c in comp:
            lines.append(f"| {c['what']} | {c['metric']} | {c['n']} | {interval(c, 4 if c['metric'] == 'congruence' else 0 if c['metric'] == 'final_value' else 3)}"
                         f" | {c['sign'] or '–'} |")
        mono = {m: dose_monotone(rows, scen, m) for m in ("recovery_h", "congruence")}
        result["dose_monotone"][scen] = mono
        lines.append(f"\ndose {list(DOSES)}: seed means monotone: recovery {mono['recovery_h']}, "
                     f"congruence {mono['congruence']}")
    return "\n".join(lines), result


def document(data: dict) -> str:
    """docs/lockin.md from a run's lockin.json: the command, then the tables `report` prints, re-rendered
    from the per-run figures (so the page cannot say what its data does not)."""
    scenarios = tuple(dict.fromkeys(r["scenario"] for r in data["runs"]))
    text, _ = report(data["runs"], data["settings"], scenarios)
    sets = "".join(f" --set {x}" for x in data["sets"])
    return (f"# Lock-in results (SPEC §2.9)\n\nWritten by `scripts/lockin.py --render docs/lockin.json` from the "
            f"per-run figures of\n`scripts/lockin.py --seeds {data['seeds']} --scenarios {','.join(scenarios)}{sets}` "
            f"(commit {data.get('commit', 'unknown')}),\n{data['seeds']} seeds paired by seed; intervals are 95 % t "
            "intervals over seeds; sign '0' = the interval holds 0.\n" + text + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--render", metavar="JSON", help="print docs/lockin.md from a lockin.json, running nothing")
    ap.add_argument("--seeds", type=int, default=20, help="seeds 1..N (default 20)")
    ap.add_argument("--out", default="runs/lockin")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated (default {','.join(SCENARIOS)})")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="key=value for every run (duration=2d)")
    args = ap.parse_args()
    if args.render:
        print(document(json.loads(Path(args.render).read_text())), end="")
        return 0
    scenarios = tuple(x.strip() for x in args.scenarios.split(",") if x.strip())
    unknown = [x for x in scenarios if x not in SCENARIOS]
    if unknown or not scenarios:
        print(f"error: --scenarios {args.scenarios}: expected some of {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    if args.seeds < 2 or args.workers < 1:
        print(f"error: --seeds {args.seeds} --workers {args.workers}: expected at least 2 seeds (an interval needs "
              f"two pairs) and 1 worker", file=sys.stderr)
        return 2
    from sim.scenario import InputError
    from sim.sweep import LocalPool, run_sweep
    out = Path(args.out)
    sets = settings()
    try:
        res = run_sweep(sweep_file(out, list(range(1, args.seeds + 1)), sets, scenarios), out, executor=LocalPool(args.workers),
                        sets=args.sets)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = collect(out, sets)
    text, result = report(rows, sets, scenarios)
    failed = [r for r in rows if r["status"] != "ok"]
    walls = {s: [r["wall_s"] for r in rows if r["scenario"] == s and r["status"] == "ok" and r["wall_s"]]
             for s in scenarios}
    print(f"# Lock-in (SPEC 2.9): {args.seeds} seeds, {len(rows)} runs, {len(failed)} failed, "
          f"sweep wall {res.wall_s:.0f} s" + (f", sets {' '.join(args.sets)}" if args.sets else ""))
    for s, w in walls.items():
        if w:
            print(f"- one {s} run: {sum(w) / len(w):.1f} s wall on average ({len(w)} runs)")
    for r in failed[:10]:
        print(f"- FAILED {r['scenario']} / {r['setting']} / seed {r['seed']}: {r['error']}")
    print(text)
    import subprocess
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    (out / "lockin.json").write_text(json.dumps({"seeds": args.seeds, "sets": args.sets, "settings": sets,
                                                 "commit": commit, "runs": rows}, indent=1, default=str) + "\n")
    print(f"\nwritten: {out / 'lockin.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
