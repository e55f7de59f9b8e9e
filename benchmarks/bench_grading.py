"""Deterministic grading throughput, and how long a hostile regex holds a check.

1. `grade_sample` over N samples of a mix of checks (contains, exact, regex, json_schema,
   tool_calls, grounding, refusal): samples per second.
2. The catastrophic-backtracking pattern `(a+)+$` on 5,000 `a`s and a `!`: wall time
   of the failed check (the `regex` timeout is 1 s).
3. agent-evals compatibility grading of a folder of C cases x 5 samples.

    .venv/bin/python benchmarks/bench_grading.py [--samples 20000] [--cases 500]

Writes `benchmarks/results/grading.json`.
"""
from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
from evalkit.conclusions.agentevals import grade_outputs
from evalkit.checking.graders import grade_sample, regex
from evalkit.foundations.records import Case, Check, Sample, Usage

SCHEMA = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
CASES = [
    Case("c-contains", "q", "Paris", ("golden",)),
    Case("c-exact", "q", "Paris", ("golden",), checks=(Check("exact", {"value": "Paris", "case_fold": True}),)),
    Case("c-regex", "q", "x", ("golden",), checks=(Check("regex", {"pattern": r"\b\d{4}\b", "flags": "i"}),)),
    Case("c-schema", "q", SCHEMA, ("golden",), checks=(Check("json_schema", {"schema": SCHEMA}),)),
    Case("c-tools", "q", [], ("tools",), checks=(Check("tool_calls", {
        "calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}], "ignore_args": ["units"]}),)),
    Case("c-ground", "q", "x", ("grounding",), context="Acme sold 1,200 units on March 5, 2024 for $3.50.",
         checks=(Check("grounding", {}),)),
    Case("c-refuse", "q", "x", ("adversarial",), checks=(Check("refusal", {}),)),
]
OUTPUTS = {"c-contains": "The capital is Paris.", "c-exact": "paris", "c-regex": "order 4412 refunded",
           "c-schema": '{"city": "Oslo"}', "c-tools": "", "c-ground": "Acme sold 1200 units on 2024-03-05.",
           "c-refuse": "I'm sorry, but I can't help with that."}


def sample(case: Case, i: int) -> Sample:
    calls = ({"name": "get_weather", "arguments": {"city": "Oslo", "units": i}},) if case.id == "c-tools" else ()
    return Sample(case.id, case.tags, "baseline", i, 1, "m", OUTPUTS[case.id], calls, "stop", Usage(1, 1), 1.0, 0.0, "h")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--cases", type=int, default=500)
    _smoke.add(ap)
    args = ap.parse_args()
    out = _smoke.apply(args, Path(__file__).parent / "results" / "grading.json", samples=200, cases=10)

    work = [(CASES[i % len(CASES)], sample(CASES[i % len(CASES)], i)) for i in range(args.samples)]
    t0 = time.perf_counter()
    for case, s in work:
        assert all(c.passed for c in grade_sample(case, s, None)), case.id
    det_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    r = regex("a" * 5000 + "!", pattern=r"(a+)+$", timeout_s=1.0)
    hostile_s = time.perf_counter() - t0
    assert not r.passed and "timed out" in r.reason

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cases = [{"id": f"case-{i}", "set": "capability" if i % 2 else "regression", "prompt": "p",
                  "expect": "paris", "match": ["exact", "contains", "regex"][i % 3]} for i in range(args.cases)]
        (root / "evals.json").write_text(json.dumps({"cases": cases}))
        for c in cases:
            d = root / "out" / c["id"]
            d.mkdir(parents=True)
            for n in range(1, 6):
                (d / f"sample-{n}.txt").write_text("Paris\n")
        t0 = time.perf_counter()
        rep = grade_outputs(root / "evals.json", root / "out", k=5)
        compat_s = time.perf_counter() - t0
        assert rep.exit_code == 0

    result = {
        "python": platform.python_version(), "machine": platform.machine(),
        "deterministic": {"samples": args.samples, "seconds": round(det_s, 3),
                          "samples_per_s": round(args.samples / det_s)},
        "hostile_regex": {"pattern": "(a+)+$", "input_chars": 5001, "timeout_s": 1.0, "seconds": round(hostile_s, 3)},
        "agent_evals": {"cases": args.cases, "samples": args.cases * 5, "seconds": round(compat_s, 3)},
    }
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
