"""The gate's false-alarm rate on two runs of one model, and its power on a real drop.

For several suite shapes (cases x k, a third of the cases in the regression set, four
tags), two runs are drawn from the same per-case pass probabilities and sample-cost
distribution and gated against each other (`verdicts.gate_metrics`), with the noise
guard (`require_significance`, alpha 0.05, Holm) and without it (the seed's gate, the
default since issue 41: plain thresholds on the observed change). Then the current
run's pass probabilities are lowered by `--drop` and the detection rate is measured.
Also: the two-arm sign-test verdict's pass/regression rate under no effect.

    .venv/bin/python benchmarks/bench_gate.py [--reps 1000] [--resamples 1000] [--drop 0.15]

Writes `benchmarks/results/gate.json`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
import numpy as np

from evalkit.conclusions import gates as G
from evalkit.conclusions import verdicts as V
from evalkit.foundations.records import GateThresholds

SHAPES = [(20, 3), (40, 5), (100, 3), (100, 1)]


def _runner(rng: np.random.Generator, n_cases: int, k: int):
    sets = ["regression" if i % 3 == 0 else "capability" for i in range(n_cases)]
    tags = [(f"tag{i % 4}",) for i in range(n_cases)]

    def sample(probs: np.ndarray) -> G.RunMetrics:
        c = rng.binomial(k, probs)
        return G.RunMetrics(k=k, cases=tuple(
            G.CaseResult(f"c{i}", sets[i], tags[i], k, int(c[i]),
                         tuple(float(x) for x in rng.gamma(4.0, 0.00025, size=k))) for i in range(n_cases)))
    return sample


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--drop", type=float, default=0.15)
    _smoke.add(ap)
    args = ap.parse_args()
    dest = _smoke.apply(args, Path(__file__).parent / "results" / "gate.json", reps=5, resamples=50)
    t = GateThresholds(max_success_drop_points=5, max_cost_increase_pct=10, min_tag_cases=5, require_significance=True)
    plain = dataclasses.replace(t, require_significance=False)  # no noise guard: the thresholds alone
    out = {"python": platform.python_version(), "reps": args.reps, "resamples": args.resamples,
           "thresholds": {"points": 5, "cost_pct": 10, "min_tag_cases": 5}, "drop": args.drop, "shapes": []}
    for n_cases, k in SHAPES:
        rng = np.random.default_rng(1000 * n_cases + k)
        p = rng.beta(2, 1.2, size=n_cases)
        sample = _runner(rng, n_cases, k)
        t0 = time.perf_counter()
        guarded = naive = 0
        for r in range(args.reps):
            a, b = sample(p), sample(p)
            guarded += not G.gate_metrics(a, b, t, n_resamples=args.resamples, seed=r).passed
            naive += not G.gate_metrics(a, b, plain, n_resamples=50, seed=r).passed
        lowered = np.clip(p - args.drop, 0, 1)
        detected = sum(not G.gate_metrics(sample(lowered), sample(p), t, n_resamples=args.resamples, seed=r).passed
                       for r in range(max(100, args.reps // 5)))
        row = {"cases": n_cases, "k": k, "false_alarm_guarded": guarded / args.reps,
               "false_alarm_plain_thresholds": naive / args.reps,
               "detection_at_drop": detected / max(100, args.reps // 5),
               "seconds": round(time.perf_counter() - t0, 2)}
        out["shapes"].append(row)
        print(json.dumps(row))
    rng = np.random.default_rng(5)
    hits = 0
    n_tallies = 20 * args.reps
    for _ in range(n_tallies):
        o = rng.choice(3, size=int(rng.integers(6, 60)), p=[0.35, 0.3, 0.35])
        hits += V.verdict_from_tally(int((o == 0).sum()), int((o == 1).sum()), int((o == 2).sum())).kind in (
            "pass", "regression")
    out["sign_verdict_false_positive"] = hits / n_tallies
    print(json.dumps({"sign_verdict_false_positive": hits / n_tallies, "tallies": n_tallies}))
    dest.parent.mkdir(exist_ok=True)
    dest.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
