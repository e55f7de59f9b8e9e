"""The micro-test's false-winner rate under no effect, and its power on a real one.

For several micro-test shapes (cases x repetitions, variants, the control's flag rate,
the same for every case or drawn per case), every arm is drawn from the same per-case
flag rates and the micro-test's decision is taken (`microtest.variant_tests`: each
variant against the control, the exact stratified test by case, Holm across variants,
alpha 0.05): the share of seeds in which it names a winner is its false-winner rate,
which must stay at or below alpha. Beside it, the rule evalkit used before issue 41
("best" = any variant with fewer flags than the control, no test). Then one variant's
flag rate is lowered (`--effect`: control 70%, variant 10%) and the share of seeds that
name it is its power.

    .venv/bin/python benchmarks/bench_microtest.py [--seeds 2000] [--smoke]

Writes `benchmarks/results/microtest.json`.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
import numpy as np

from evalkit.conclusions import microtest as M

# (cases, repetitions, variants, control flag rate; "mixed": each case's rate uniform in [0.05, 0.95])
SHAPES = [(12, 5, 1, 0.7), (12, 5, 3, 0.7), (2, 5, 2, 0.7), (1, 5, 1, 0.5), (30, 5, 2, "mixed"), (12, 10, 2, 0.3)]


def _arm(rng: np.random.Generator, rates: np.ndarray, reps: int) -> M.Counts:
    return {f"c{i}": (int(k), reps) for i, k in enumerate(rng.binomial(reps, rates))}


def _shape(seeds: int, cases: int, reps: int, variants: int, rate: float | str, effect: float | None) -> dict:
    """One shape's share of seeds naming a winner: by the test, and by the old rule."""
    named = old = 0
    t0 = time.perf_counter()
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        rates = rng.uniform(0.05, 0.95, cases) if rate == "mixed" else np.full(cases, float(rate))
        control = _arm(rng, rates, reps)
        arms = {f"v{j}": _arm(rng, rates if effect is None or j else np.full(cases, effect), reps)
                for j in range(variants)}
        tests = M.variant_tests(control, arms)
        named += any(t[1] <= M.ALPHA for t in tests.values()) if effect is None else tests["v0"][1] <= M.ALPHA
        flags = sum(k for k, _ in control.values())
        old += any(sum(k for k, _ in a.values()) < flags for a in arms.values())
    secs = time.perf_counter() - t0
    key = "false_winner_rate" if effect is None else "power_variant_named"
    return {"cases": cases, "reps": reps, "variants": variants, "control_rate": rate,
            "variant_rate": rate if effect is None else effect, key: named / seeds,
            "monte_carlo_se": (named / seeds * (1 - named / seeds) / seeds) ** 0.5,
            "old_rule_winner_rate": old / seeds, "ms_per_microtest": round(1000 * secs / seeds, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=2000)
    ap.add_argument("--effect", type=float, default=0.1, help="the helpful variant's flag rate (control 70%%)")
    _smoke.add(ap)
    args = ap.parse_args()
    dest = _smoke.apply(args, Path(__file__).parent / "results" / "microtest.json", seeds=20)
    out: dict = {"benchmark": "micro-test false-winner rate under no effect, and power",
                 "python": platform.python_version(), "seeds": args.seeds, "alpha": M.ALPHA, "test": M.TEST,
                 "no_effect": [], "effect": []}
    for cases, reps, variants, rate in SHAPES:
        row = _shape(args.seeds, cases, reps, variants, rate, None)
        out["no_effect"].append(row)
        print(json.dumps(row))
    for cases, reps, variants in [(12, 5, 1), (12, 5, 3), (2, 5, 1)]:
        row = _shape(args.seeds, cases, reps, variants, 0.7, args.effect)
        out["effect"].append(row)
        print(json.dumps(row))
    out["max_false_winner_rate"] = max(r["false_winner_rate"] for r in out["no_effect"])
    out["monte_carlo_se_at_alpha"] = (M.ALPHA * (1 - M.ALPHA) / args.seeds) ** 0.5
    dest.parent.mkdir(exist_ok=True)
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"max false-winner rate {out['max_false_winner_rate']:.4f} (alpha {M.ALPHA}); written to {dest}")


if __name__ == "__main__":
    main()
