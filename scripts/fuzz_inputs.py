"""Run the input fuzzing pass and print its table (tried / traceback / hang / other).

    .venv/bin/python scripts/fuzz_inputs.py [--seed 1] [--mutants 2400] [--quick]

* mutated scenarios: each of scenarios/*.yaml mutated 1-3 times (numbers and durations replaced by
  extreme or wrong values, lines deleted, duplicated or re-indented, keys misspelt, alias bombs,
  deep nesting, control characters, truncation) through `validate`;
* accepted ones: `run --set duration=1h` (a Golem-sized world) with finite tables and a complete
  manifest, or a one-line refusal;
* damaged run directories: parts truncated, emptied, with flipped bytes at random offsets or of
  another schema, parts removed or added, manifests truncated, list-shaped or with a key retyped
  or removed, through `replay --verify`, `report` and `diff`;
* damaged checkpoints: state files with flipped bytes, truncated, removed, or edited (part index,
  paths, times), through `resume`: exit 0 only with the tables of an uninterrupted run.

The same checks (`invoke`, `clean_error`, `finite_tables`) serve the hypothesis properties of
tests/test_fuzz_inputs.py, which cover generated scenarios and `--set` values, tapes and planted
run directories (links, FIFOs); this script adds whole-file mutations of the shipped scenarios and
damaged checkpoints.

"traceback": a Python traceback, an exit status other than 0/1/2 (or 1 where only 0/2 are right),
or an error of more than one line or 500 characters; "> 60 s": a command that had not finished
after 60 s; "other": a silent wrong result (exit 0 on damaged input, a run with non-finite values,
a resume whose tables differ). Commands run in this process (the CLI entry, through typer's test
runner) under a 5 GB address-space cap, as the issue's pass did.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

EXTREME_NUMBERS = [".nan", ".inf", "-.inf", "0", "-1", "1e308", "-1e308", str(2**63), "9" * 5000, "-0.0", "1e-320",
                   "true", "x", "[]", "{}", "~", "5e-324", "2147483648"]
#: replacements a user might well type (most files stay valid with these)
PLAIN_NUMBERS = ["1", "2", "3", "0.5", "0.1", "10", "0.01", "100", "4", "0.9"]
EXTREME_DURATIONS = ["0", "-1h", str(2**63), ".nan", ".inf", "9999999999d", "1ms", "0.1s", "1y", "3x", "''"]
TYPOS = {"duration": "duraton", "count": "cont", "asset": "aset", "golems": "golem", "market": "markets",
         "top_k": "topk", "every_ticks": "every_tick", "events": "event", "regimes": "regime"}


from test_fuzz_inputs import clean_error, finite_tables, invoke   # noqa: E402  (one checker for both)


# ------------------------------------------------------------------------------ mutations
def mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    body = [i for i, l in enumerate(lines) if l.strip() and not l.lstrip().startswith("#")]
    op = rng.choice(["number", "number", "duration", "delete", "duplicate", "indent", "typo", "bomb", "deep",
                     "control", "truncate", "tab", "unknown", "override"])
    if op in ("number", "duration"):
        pat = r"(?<![\w.])-?\d+(\.\d+)?(e-?\d+)?(?![\w.])" if op == "number" else r"\b\d+(\.\d+)?(ms|min|s|m|h|d|w)\b"
        hits = [(i, m) for i in body for m in re.finditer(pat, lines[i])]
        if hits:
            i, m = rng.choice(hits)
            new = rng.choice((EXTREME_NUMBERS if rng.random() < 0.5 else PLAIN_NUMBERS) if op == "number"
                             else EXTREME_DURATIONS if rng.random() < 0.5 else ["1h", "30m", "2d", "90m", "6h"])
            lines[i] = lines[i][:m.start()] + new + lines[i][m.end():]
    elif op == "delete" and body:
        del lines[rng.choice(body)]
    elif op == "duplicate" and body:
        i = rng.choice(body)
        lines.insert(i + 1, lines[i])
    elif op == "indent" and body:
        i = rng.choice(body)
        lines[i] = ("  " + lines[i]) if rng.random() < 0.5 else lines[i][2:]
    elif op == "typo":
        hits = [i for i in body if any(k + ":" in lines[i] for k in TYPOS)]
        if hits:
            i = rng.choice(hits)
            k = next(k for k in TYPOS if k + ":" in lines[i])
            lines[i] = lines[i].replace(k + ":", TYPOS[k] + ":", 1)
    elif op == "bomb":
        where = rng.choice(["top", "override"])
        deep = "x: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\nx2: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n" \
               "x3: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nx4: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n" \
               "x5: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nx6: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
        lines += (deep + ("overrides: {retrieval: *f}" if where == "override" else "x7: [*f,*f,*f,*f]")).splitlines()
    elif op == "deep":
        n = rng.choice([40, 400, 1100])
        lines.append("description: " + "[" * n + "]" * n)
    elif op == "control" and body:
        i = rng.choice(body)
        lines.insert(i, '"k\\e[2J\\nx": 1' if rng.random() < 0.5 else "k\x1b[31m: 1")
    elif op == "truncate":
        cut = rng.randrange(len(text) + 1)
        return text[:cut]
    elif op == "tab" and body:
        i = rng.choice(body)
        lines[i] = "\t" + lines[i]
    elif op == "unknown":
        lines.append(rng.choice(["colour: blue", "seed2: 3", "golems2: []"]))
    elif op == "override":
        from golem.config import default_table
        s = rng.choice(list(default_table()))
        k = rng.choice(list(default_table()[s]))
        v = rng.choice(EXTREME_NUMBERS + ["0", "1", "-3", "2", "0.5"])
        at = [i for i, line in enumerate(lines) if line.startswith("overrides:")]
        if at and lines[at[0]].strip() == "overrides:":
            lines.insert(at[0] + 1, f"  {s}.{k}: {v}")
        elif not at:
            lines.append(f"overrides: {{{s}.{k}: {v}}}")
    return "\n".join(lines) + "\n"


def finite_run(run: Path) -> str | None:
    """None, or what is wrong with a finished run: its status, or a table that is not finite."""
    m = json.loads((run / "manifest.json").read_text())
    if m.get("status") != "complete":
        return f"status {m.get('status')}"
    try:
        finite_tables(run)
    except AssertionError as exc:
        return f"not finite: {exc}"
    return None


def scenarios_pass(n: int, rng: random.Random, work: Path, table: dict) -> None:
    files = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "tests" / "scenarios").glob("*.yaml"))
    val, run = Counter(), Counter()
    for k in range(n):
        src = rng.choice(files)
        text = src.read_text()
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            text = mutate(text, rng)
        f = work / f"m{k}.yaml"
        f.write_text(text, errors="surrogateescape")
        status, code, out, took = invoke(["validate", f], env={"GOLEM_MEMORY_LIMIT": "4GiB"})
        val["tried"] += 1
        if status == "hang" or took > 60:
            val["> 60 s"] += 1
        elif status == "crash" or code not in (0, 2) or (code == 2 and not clean_error(out)):
            val["traceback"] += 1
            print("validate:", f, status, code, out[:300].replace("\n", " | "))
        elif code == 2 and took > 10:
            val["other"] += 1
            print("validate slow:", f, took)
        if status == "ok" and code == 0:
            if "tape:" in text and not (ROOT / "tapes").exists():
                continue                                  # the real tape is not in the repository
            run["tried"] += 1
            out_dir = work / f"run{k}"
            status, code, out, took = invoke(["run", f, "--set", "duration=1h", "--out", out_dir, "-q"],
                                             env={"GOLEM_MEMORY_LIMIT": "4GiB"})
            if status == "hang":
                run["> 60 s"] += 1
            elif status == "crash" or code not in (0, 2) or (code == 2 and not clean_error(out)):
                run["traceback"] += 1
                print("run:", f, status, code, out[:300].replace("\n", " | "))
            elif code == 0:
                wrong = finite_run(out_dir)
                if wrong:
                    run["other"] += 1
                    print("run wrong:", f, wrong)
            shutil.rmtree(out_dir, ignore_errors=True)
        f.unlink()
    table["mutated scenarios, `validate`"] = val
    table["accepted ones, `run --set duration=1h`"] = run


# ------------------------------------------------------------------------- damaged runs
SMALL = """name: fuzz
duration: 12h
seed: {seed}
overrides: {{recording.flush_every_s: 3600, grimoire.capacity: 128}}
golems:
  - {{count: 3, clade: a, asset: ETH}}
  - {{count: 2, clade: b, asset: BTC, interval: 450}}
"""


def damage_dir(run: Path, rng: random.Random) -> str:
    from sim.recorder import TABLES, table_files
    parts = [f for t in TABLES for f in table_files(run, t)]
    op = rng.choice(["truncate", "empty", "flip", "flip", "foreign", "remove", "add", "manifest_truncate",
                     "manifest_list", "manifest_retype", "manifest_drop", "manifest_scenario"])
    f = rng.choice(parts)
    if op == "truncate":
        f.write_bytes(f.read_bytes()[: rng.randrange(max(f.stat().st_size, 1))])
    elif op == "empty":
        f.write_bytes(b"")
    elif op == "flip":
        data = bytearray(f.read_bytes())
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(data))
    elif op == "foreign":
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table({"x": [1.0, 2.0]}), f)
    elif op == "remove":
        f.unlink()
    elif op == "add":
        shutil.copy(f, f.with_name("part-09999.parquet"))
    else:
        mp = run / "manifest.json"
        m = json.loads(mp.read_text())
        if op == "manifest_truncate":
            text = mp.read_text()
            mp.write_text(text[: rng.randrange(len(text))])
        elif op == "manifest_list":
            mp.write_text(json.dumps(list(m)))
        elif op == "manifest_retype":
            k = rng.choice(["seed", "scenario", "config", "status", "hashes", "files"])
            m[k] = rng.choice([v for v in ("x", 5, [], None, {"a": 1}) if type(v) is not type(m[k])])
            mp.write_text(json.dumps(m))
            op = f"{op} {k}={m[k]!r}"
        elif op == "manifest_drop":
            k = rng.choice(["seed", "scenario", "config", "status", "files", "hashes"])
            m.pop(k, None)
            mp.write_text(json.dumps(m))
            op = f"{op} {k}"
        else:
            m["scenario"]["golems"][0]["count"] = rng.choice(["many", -1, 0, 10**9])
            mp.write_text(json.dumps(m))
    return op


def runs_pass(n: int, rng: random.Random, work: Path, table: dict) -> None:
    from sim.run import execute
    (work / "small.yaml").write_text(SMALL.format(seed=1))
    base, other = work / "base", work / "other"
    execute(work / "small.yaml", base, environ={})
    execute(work / "small.yaml", other, seed=2, environ={})
    c = Counter()
    for k in range(n):
        run = work / f"d{k}"
        shutil.copytree(base, run)
        op = damage_dir(run, rng)
        for cmd in (["replay", run, "--verify"], ["report", run, "--out", work / "r.html", "-q"], ["diff", run, other]):
            c["tried"] += 1
            status, code, out, took = invoke(cmd)
            if status == "hang":
                c["> 60 s"] += 1
            elif status == "crash" or code not in (1, 2) or not clean_error(out) and code == 2:
                if code == 0:
                    c["other"] += 1                        # damage read as if it were fine
                else:
                    c["traceback"] += 1
                print(cmd[0], op, status, code, out[:300].replace("\n", " | "))
            elif code == 1 and cmd[0] != "replay":
                c["traceback"] += 1
                print(cmd[0], op, "exit 1", out[:300].replace("\n", " | "))
        (work / "r.html").unlink(missing_ok=True)
        shutil.rmtree(run)
    table["damaged run directories (`replay --verify`, `report`, `diff`)"] = c


def checkpoints_pass(n: int, rng: random.Random, work: Path, table: dict) -> None:
    from sim import checkpoint as ckm
    from sim.recorder import content_hashes
    from sim.run import execute
    (work / "ck.yaml").write_text(SMALL.format(seed=3).replace("12h", "1d"))
    ref = execute(work / "ck.yaml", work / "ckref", environ={}).manifest["hashes"]
    base = work / "ckbase"

    def stop(now_s, ticks, alive):
        if now_s >= 15 * 3600:
            raise KeyboardInterrupt
    budget, ckm.BUDGET = ckm.BUDGET, float("inf")
    try:
        execute(work / "ck.yaml", base, environ={}, progress=stop)
    except KeyboardInterrupt:
        pass
    finally:
        ckm.BUDGET = budget
    c = Counter()
    for k in range(n):
        run = work / f"c{k}"
        shutil.copytree(base, run)
        states = sorted((run / "checkpoint").glob("state-*.json"))
        target = rng.choice(states + [s.with_suffix(".arrays") for s in states])
        op = rng.choice(["flip", "truncate", "remove", "part-1", "part-1-sealed", "path-sealed", "now-sealed",
                         "all-flip", "list"])
        if op == "flip":
            data = bytearray(target.read_bytes())
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            target.write_bytes(bytes(data))
        elif op == "truncate":
            target.write_bytes(target.read_bytes()[: rng.randrange(target.stat().st_size)])
        elif op == "remove":
            target.unlink()
        elif op == "all-flip":
            for s in states:
                data = bytearray(s.read_bytes())
                data[len(data) // 2] ^= 4
                s.write_bytes(bytes(data))
        elif op == "list":
            states[-1].write_text("[1, 2]")
        else:
            s = rng.choice(states)
            meta = json.loads(s.read_text())
            meta.pop("sha256")
            if op.startswith("part-1"):
                meta["part"] = -1
            elif op == "path-sealed":
                meta["arrays"] = "../../../etc/passwd"
            else:
                meta["now_s"] = meta["now_s"] + 3600 * rng.choice([-1, 1])
            if op.endswith("sealed"):
                ckm._write_meta(s, meta)
            else:
                s.write_text(json.dumps(meta))
        c["tried"] += 1
        status, code, out, took = invoke(["resume", run, "-q"])
        if status == "hang":
            c["> 60 s"] += 1
        elif status == "crash" or code not in (0, 2) or (code == 2 and not clean_error(out)):
            c["traceback"] += 1
            print("resume", op, status, code, out[:300].replace("\n", " | "))
        elif code == 0 and content_hashes(run) != ref:
            c["other"] += 1                                 # exit 0 with wrong tables
            print("resume wrong tables:", op, target.name)
        shutil.rmtree(run)
    table["damaged checkpoints, `resume`"] = c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mutants", type=int, default=2400)
    ap.add_argument("--runs", type=int, default=30, help="damaged run directories (x 3 commands)")
    ap.add_argument("--checkpoints", type=int, default=40)
    ap.add_argument("--quick", action="store_true", help="200 mutants, 10 run directories, 12 checkpoints")
    a = ap.parse_args()
    if a.quick:
        a.mutants, a.runs, a.checkpoints = 200, 10, 12
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (5 * 2**30, hard))
    rng = random.Random(a.seed)
    table: dict = {}
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="golem-fuzz-") as tmp:
        work = Path(tmp)
        scenarios_pass(a.mutants, rng, work, table)
        runs_pass(a.runs, rng, work, table)
        checkpoints_pass(a.checkpoints, rng, work, table)
    print(f"\nseed {a.seed}, {time.time() - t0:.0f} s\n")
    print("| input | tried | traceback | > 60 s | other |\n|---|---|---|---|---|")
    for name, c in table.items():
        print(f"| {name} | {c['tried']:,} | {c['traceback']} | {c['> 60 s']} | {c['other']} |")


if __name__ == "__main__":
    main()
