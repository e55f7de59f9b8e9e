"""Write the wall each test file took, from a pytest JUnit XML, to
benchmarks/results/test_walls.json; tests/conftest.py starts the longest files first.

    python -m pytest -n 3 --dist loadfile --junitxml=/tmp/walls.xml
    python tools/test_walls.py /tmp/walls.xml [OUT.json]

Why: `make test` gives each worker whole files (`--dist loadfile`, so a module's
fixtures, such as test_executors' three-node Ray cluster, are set up once) in the order
collected. Started late, one long file leaves one worker running it alone at the end
while the others idle; started first, the short files fill in around it (longest
processing time first). A file missing from the table (a new one) runs last, as short.
The figures order the run and nothing else: no test reads them.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "test_walls.json"


def file_walls(junit: Path) -> dict[str, float]:
    """Seconds per test file (set-up, call and tear-down of each of its tests), longest first."""
    walls: Counter[str] = Counter()
    for case in ET.parse(junit).iter("testcase"):
        parts = (case.get("classname") or "").split(".")  # tests[.sub].test_x[.TestClass]
        module = next((i for i, part in enumerate(parts) if part.startswith("test_")), None)
        if parts[0] != "tests" or module is None:
            continue
        walls["/".join(parts[: module + 1]) + ".py"] += float(case.get("time") or 0.0)
    return {name: round(s, 1) for name, s in walls.most_common()}


def main(argv: list[str]) -> int:
    """Write the table from the JUnit XML `argv[0]` (to `argv[1]`, else OUT); exit 2 on bad input."""
    if len(argv) not in (1, 2):
        print("usage: python tools/test_walls.py JUNIT.xml [OUT.json]", file=sys.stderr)
        return 2
    out = Path(argv[1]) if len(argv) == 2 else OUT
    try:
        walls = file_walls(Path(argv[0]))
    except (OSError, ET.ParseError) as exc:
        print(f"{argv[0]}: not a JUnit XML file: {exc}", file=sys.stderr)
        return 2
    if not walls:
        print(f"{argv[0]}: no test case of tests/ in it", file=sys.stderr)
        return 2
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({"seconds_per_file": walls}, indent=1) + "\n")
    tmp.replace(out)
    print(f"{out}: {len(walls)} files, {sum(walls.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
