"""docs/tables.md documents every column of every table, and nothing that does not exist."""
import re
from pathlib import Path

from sim.recorder import SCHEMAS

DOC = Path(__file__).resolve().parents[1] / "docs" / "tables.md"


def _documented():
    out, table = {}, None
    for line in DOC.read_text().splitlines():
        m = re.match(r"## (\w+)", line)
        if m:
            table = m.group(1)
            out[table] = set()
        elif table and line.startswith("| ") and not line.startswith("| column") and not line.startswith("|---"):
            for name in line.split("|")[1].split(","):
                out[table].add(name.strip())
    return out


def test_every_column_is_documented():
    doc = _documented()
    assert set(doc) == set(SCHEMAS)
    for t, schema in SCHEMAS.items():
        assert set(schema.names) == doc[t], t
