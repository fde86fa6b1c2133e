"""Bad input: one line naming file, key path and expectation; exit 2; no traceback."""
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli

ROOT = Path(__file__).resolve().parents[1]
GOOD = """name: t
duration: 2h
golems:
  - {count: 2, asset: ETH}
"""


def _run(args):
    return cli(*args)


@pytest.mark.parametrize("text, expect", [
    (GOOD + "colour: blue\n", ["colour: unknown key", ":5"]),
    (GOOD.replace("count: 2", "count: two"), ["golems.0.count", "valid integer", ":4"]),
    (GOOD.replace("2h", "-3h"), ["duration", "expected a duration >= 0"]),
    (GOOD.replace("2h", "0"), ["duration", "expected a positive duration"]),
    (GOOD + "market: {events: [{kind: exploit, at: 1h, asset: DOGE}]}\n", ["market", "DOGE"]),
    ("name: t\nduration: [1h\n", ["invalid YAML", "expected ','"]),
    ("name: t\nduration: 1h\n", ["golems: required key is missing"]),
    (GOOD + "overrides: {retrieval: {top_k: nine}}\n", ["overrides", "retrieval.top_k"]),
])
def test_malformed_scenarios(tmp_path, text, expect):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    for cmd in (["validate", str(f)], ["run", str(f), "--out", str(tmp_path / "out"), "-q"]):
        code, out = _run(cmd)
        assert code == 2, out
        assert "Traceback" not in out
        line = out.strip()
        assert "\n" not in line.replace("\n ", " "), out   # one line (rich may soft-wrap)
        assert str(f) in out.replace("\n", "")
        for e in expect:
            assert e in out.replace("\n", ""), (e, out)


def test_missing_file(tmp_path):
    code, out = _run(["validate", str(tmp_path / "nope.yaml")])
    assert code == 2 and "nope.yaml: file not found" in out.replace("\n", "")


def test_bad_set_value(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(GOOD)
    code, out = _run(["run", str(f), "--set", "retrieval.top_k=lots", "--out", str(tmp_path / "o"), "-q"])
    assert code == 2 and "--set retrieval.top_k=lots: retrieval.top_k" in out.replace("\n", "")
    assert not (tmp_path / "o").exists()   # nothing written before validation passed


def test_nonempty_out_dir_is_refused_and_left_alone(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(GOOD)
    out_dir = tmp_path / "o"
    out_dir.mkdir()
    (out_dir / "keep.txt").write_text("precious")
    code, out = _run(["run", str(f), "--out", str(out_dir), "-q"])
    assert code == 2 and "not empty" in out
    assert (out_dir / "keep.txt").read_text() == "precious"


def test_real_process_exit_status_and_no_traceback(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(GOOD + "colour: blue\n")
    r = subprocess.run([sys.executable, "-m", "sim.cli", "validate", str(f)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "colour: unknown key" in r.stderr
