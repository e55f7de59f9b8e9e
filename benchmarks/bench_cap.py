"""A cap of a few worst-case calls, spent: samples completed per dollar of cap against
concurrency 1..32.

A completion suite of 100 cases x 2 arms x k=1 (200 samples, more than the cap holds) runs over HTTP against the
scripted server (10 ms per answer) under a cap worth 1.4 worst-case calls (1024 in x
$1/M + 64 out x $2/M = $0.001152 worst, cap $0.0016128), so one reservation fits at a
time: the others wait for the call in flight to settle (`Ledger.reserve_waiting`)
instead of stopping the run at the first refusal. For each concurrency: samples
completed, spend, samples per dollar of cap, the run's reason and wall time.

    .venv/bin/python benchmarks/bench_cap.py [--cases 100] [--multiple 1.4]

Writes `benchmarks/results/cap.json`.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import _smoke  # benchmarks/_smoke.py: --smoke, the smallest size

from evalkit.runfolder.runload import load_run
from evalkit.running.runner import run_suite
from evalkit.calls.serve import ScriptedServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import write_engine_suite  # noqa: E402

CONCURRENCY = (1, 2, 4, 8, 16, 32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--multiple", type=float, default=1.4, help="the cap in worst-case calls")
    _smoke.add(ap)
    args = ap.parse_args()
    path = _smoke.apply(args, Path(__file__).resolve().parent / "results" / "cap.json", cases=6)
    concurrencies = (1, 4) if args.smoke else CONCURRENCY
    worst = (1024 * 1.0 + 64 * 2.0) / 1e6
    cap = worst * args.multiple
    rows = []
    for conc in concurrencies:
        with tempfile.TemporaryDirectory() as tmp:
            cases = [{"id": f"case-{i:03d}", "input": f"capital of country {i}", "expected": "Paris",
                      "tags": ["capital"]} for i in range(args.cases)]
            suite = write_engine_suite(Path(tmp) / "suite", cases, k=1, concurrency=conc, max_tokens_in=1024,
                                       max_tokens_out=64, cost_cap_usd=cap)
            with ScriptedServer({"rules": [{"match": "country", "texts": ["Paris", "Lima"]}],
                                 "latency_s": 0.01}) as srv:
                t0 = time.perf_counter()
                res = run_suite(suite, runs_dir=Path(tmp) / "runs", base_url=srv.base_url, progress=False)
                wall = time.perf_counter() - t0
            n = len(load_run(res.path).samples)
        rows.append({"concurrency": conc, "samples": n, "planned": 2 * args.cases, "spend_usd": res.spend_usd,
                     "cap_usd": cap, "samples_per_dollar_of_cap": n / cap, "reason": res.reason,
                     "wall_s": round(wall, 2)})
        print(f"concurrency {conc:>2}: {n}/{2 * args.cases} samples, spend ${res.spend_usd:.6f} of "
              f"${cap:.6f}, {n / cap:,.0f} samples per $ of cap, {wall:.2f}s ({res.reason or 'complete'})")
    out = {"python": platform.python_version(), "worst_case_usd": worst, "cap_multiple": args.multiple,
           "rows": rows}
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
