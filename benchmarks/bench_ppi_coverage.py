"""Coverage of the corrected (prediction-powered) judged rate, by simulation.

A run of N = 500 judged samples whose true human pass rate is p = 0.6, judged by a
generous judge: it disagrees with people on 10% of the samples, 9 points of passes
that people fail and 1 point of fails that people pass (+8 points of bias). n = 20, 40
and 80 of the samples carry a human label. For each n, R = 2,000 replications: how
often each 95% interval covers p, and its mean width:

- `corrected`: what evalkit reports (`stats.ppi_mean(..., adjust=1)`: PPI++ power
  tuning, rectifier variance with one pseudo-observation per (human, judge) cell);
- `ppi++ clt`: the same estimate with the plain CLT interval (what ppi-python's
  `ppi_mean_ci` gives);
- `judge only`: the Wilson interval of the judge's rate over all N (the judge treated
  as a person);
- `labels only`: the Wilson interval of the n human labels alone (the classical one).

The corrected interval must cover p in 93.5-96.5% of replications at every n (a band of
about +-3 binomial SEs: sqrt(.95 * .05 / 2000) = 0.49 points).

**Missing cases** (the corrected gated case score, `metrics.corrected_gated_case_score`):
N = 500 judged regression cases, k = 1, of which 20% have no judge-scored sample (errored:
they fail for the judge and for people); the rest as above (people pass 60%, the judge
+8 points). n = 40 and 80 of the judge-scored cases are labelled, drawn by case
(`judge sample --by-case`). Coverage of the arm's human case score and the mean error,
for evalkit (unscored cases in the exact stratum) and for the treatment before the fix
(unscored cases left among the judged ones, where the correction reached them).

    .venv/bin/python benchmarks/bench_ppi_coverage.py [--reps 2000] [--seed 2027]

Writes `benchmarks/results/ppi_coverage.json` and `benchmarks/results/ppi_coverage.png`.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import _smoke  # benchmarks/_smoke.py: --smoke, the smallest size

import numpy as np

from evalkit.numbers.metrics import JudgedCase, corrected_gated_case_score
from evalkit.numbers.stats import ppi_mean, proportion_interval

RESULTS = Path(__file__).parent / "results"
N, P, UP, DOWN = 500, 0.6, 0.09, 0.01
BAND = (0.935, 0.965)


def simulate(n: int, reps: int, rng: np.random.Generator) -> dict[str, dict[str, float]]:
    names = ("corrected", "ppi++ clt", "judge only", "labels only")
    cover = dict.fromkeys(names, 0)
    width: dict[str, list[float]] = {k: [] for k in names}
    lams: list[float] = []
    for _ in range(reps):
        y = rng.random(N) < P
        u = rng.random(N)
        yhat = np.where(y, u >= DOWN / P, u < UP / (1 - P))
        idx = rng.choice(N, n, replace=False)
        Y, Yh, Yu = y[idx].astype(float), yhat[idx].astype(float), yhat.astype(float)
        e = ppi_mean(Y, Yh, Yu, adjust=1.0)
        lams.append(e.lam)
        judge = proportion_interval(int(Yu.sum()), N)
        labels = proportion_interval(int(Y.sum()), n)
        for name, (lo, hi) in {
            "corrected": (e.low, e.high),
            "ppi++ clt": (e.clt_low, e.clt_high),
            "judge only": (judge.low, judge.high),
            "labels only": (labels.low, labels.high),
        }.items():
            cover[name] += lo <= P <= hi
            width[name].append(hi - lo)
    out = {k: {"coverage": cover[k] / reps, "mean_width": float(np.mean(width[k]))} for k in names}
    out["corrected"]["mean_lam"] = float(np.mean(lams))
    return out


def simulate_missing(n: int, reps: int, rng: np.random.Generator, missing: float = 0.2) -> dict[str, Any]:
    """The missing-cases scenario (module docstring): coverage and mean error of the
    corrected gated case score, as evalkit computes it and as it was before the fix."""
    cover = {"evalkit": 0, "before fix": 0}
    err: dict[str, list[float]] = {"evalkit": [], "before fix": []}
    for _ in range(reps):
        y = rng.random(N) < P
        u = rng.random(N)
        yhat = np.where(y, u >= DOWN / P, u < UP / (1 - P))
        gone = rng.random(N) < missing
        y, yhat = y & ~gone, yhat & ~gone  # an errored sample fails for both
        labelled = set(rng.choice(np.flatnonzero(~gone), n, replace=False).tolist())
        truth = float(y.mean())
        for name, scored in (("evalkit", (~gone).astype(int)), ("before fix", np.ones(N, int))):
            cases = [
                JudgedCase("regression", 1, int(yhat[i]), int(y[i]) if i in labelled else None, True, int(scored[i]))
                for i in range(N)
            ]
            block = corrected_gated_case_score(cases, 1)
            c = block["corrected"] if block else None
            assert c is not None
            cover[name] += c["low"] <= truth <= c["high"]
            err[name].append(c["score"] - truth)
    return {k: {"coverage": cover[k] / reps, "mean_error": float(np.mean(err[k]))} for k in cover}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=2027)
    _smoke.add(ap)
    args = ap.parse_args()
    json_out = _smoke.apply(args, RESULTS / "ppi_coverage.json", reps=20)
    png_out = json_out.with_suffix(".png")
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    rows = {n: simulate(n, args.reps, rng) for n in (20, 40, 80)}
    wall = time.perf_counter() - t0
    print(f"N={N}, human rate {P}, judge +8 points (10% disagreement), {args.reps} replications per n")
    print(f"{'n':>4}  {'interval':<12} {'coverage':>9} {'mean width':>11}")
    for n, r in rows.items():
        for name, v in r.items():
            print(f"{n:>4}  {name:<12} {v['coverage']:>9.4f} {v['mean_width']:>11.4f}")
    in_band = all(BAND[0] <= r["corrected"]["coverage"] <= BAND[1] for r in rows.values())
    print(f"corrected coverage in {BAND[0]:.1%}-{BAND[1]:.1%} at every n: {in_band}  ({wall:.1f} s)")
    t1 = time.perf_counter()
    rng_m = np.random.default_rng(args.seed + 1)  # its own stream: the figures above stay as they were
    missing = {n: simulate_missing(n, args.reps, rng_m) for n in (40, 80)}
    wall_m = time.perf_counter() - t1
    print(f"missing cases: N={N} judged cases, 20% with no judge-scored sample, labelled by case")
    for n, r in missing.items():
        for name, v in r.items():
            print(f"{n:>4}  {name:<12} coverage {v['coverage']:.4f}  mean error {v['mean_error']:+.4f}")
    print(f"({wall_m:.1f} s)")
    json_out.parent.mkdir(exist_ok=True)
    json_out.write_text(
        json.dumps(
            {
                "N": N,
                "human_rate": P,
                "judge_bias_points": 100 * (UP - DOWN),
                "judge_disagreement": UP + DOWN,
                "replications": args.reps,
                "seed": args.seed,
                "band": list(BAND),
                "in_band": in_band,
                "by_n": {str(n): r for n, r in rows.items()},
                "wall_s": round(wall, 2),
                "missing_cases": {
                    "share_unscored": 0.2,
                    "labels": "by case",
                    "by_n": {str(n): r for n, r in missing.items()},
                    "wall_s": round(wall_m, 2),
                },
                "machine": platform.platform(),
            },
            indent=2,
        )
        + "\n"
    )
    import matplotlib  # lazy: only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    ns = list(rows)
    for name in ("corrected", "ppi++ clt", "judge only", "labels only"):
        a1.plot(ns, [rows[n][name]["coverage"] for n in ns], marker="o", label=name)
        a2.plot(ns, [rows[n][name]["mean_width"] for n in ns], marker="o", label=name)
    a1.axhspan(*BAND, color="grey", alpha=0.2)
    a1.set(xlabel="human labels n", ylabel="coverage of the human rate", title="95% interval coverage")
    a2.set(xlabel="human labels n", ylabel="mean width", title="interval width")
    a1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png_out, dpi=100)


if __name__ == "__main__":
    main()
