"""How long `evalkit dataset validate` takes on the largest dataset the contract allows.

The contract promises a verdict in well under a second; the tests check what validation
says, this measures how long it takes: a valid dataset of 1,000 pairs (the limit), the
same with 1,001 (refused at the limit), and one with an error in every pair (diagnostics
capped), each validated in this process through the CLI (median of `--repeat`).

    .venv/bin/python benchmarks/bench_dataset.py [--repeat 5]

Writes `benchmarks/results/dataset.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_dataset import mkdataset, mkpair, to_csv  # noqa: E402  (the test suite's own builders)

from evalkit._cli.main import main  # noqa: E402


def validate_s(folder: Path, doc: dict, pairs: list[dict], repeat: int) -> tuple[float, int]:
    (folder / "d.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    (folder / "d.csv").write_text(to_csv(pairs), encoding="utf-8")
    runner, times, code = CliRunner(), [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = runner.invoke(main, ["dataset", "validate", "--json", "d.json", "--csv", "d.csv"])
        times.append(time.perf_counter() - t0)
        code = r.exit_code
    return statistics.median(times), code


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    _smoke.add(ap)
    args = ap.parse_args()
    dest = _smoke.apply(args, ROOT / "benchmarks" / "results" / "dataset.json", repeat=1)
    pairs = [mkpair(i, "easy") for i in range(1000)]
    broken = [mkpair(i, "easy", query="") for i in range(1000)]
    out = {"machine": platform.machine(), "python": platform.python_version(), "repeat": args.repeat, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.chdir(folder)  # the contract reads only files below the working directory
        for name, doc, ps in (
            ("valid, 1,000 pairs", mkdataset(pairs), pairs),
            ("1,001 pairs (over the limit)", mkdataset([*pairs, mkpair(1000)]), [*pairs, mkpair(1000)]),
            ("an error in every one of 1,000 pairs", mkdataset(broken), broken),
        ):
            s, code = validate_s(folder, doc, ps, args.repeat)
            out["cases"][name] = {"median_s": round(s, 4), "exit_code": code}
            print(f"{name}: {s:.3f} s (exit {code})")
    dest.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main_()
