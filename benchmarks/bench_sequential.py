"""Sequential sign test vs the fixed-n exact sign test: mean trials to a verdict.

Both designs are planned at the same alpha (0.05, two-sided) and power (0.8) for a win
rate of 0.75 (share of non-tied trials the treatment wins). The fixed design is the first
n whose exact power reaches 0.8 (`sign_test_sample_size(...).trials_first`); the
sequential design is `SequentialSignTest(win_rate=0.75)`. Seeded simulations at true win
rates 0.5, 0.65, 0.75, 0.9 (and tie rates 0 and 0.3) measure mean trials used, P(pass)
and P(regression) for each, alongside the exact values from the designs. A second table
plans each design for the true rate itself. Target: the sequential mean at win rate 0.75
is at most 0.6x the fixed design's trials, with no loss of power.

The information bound: no sequential test with the same error rates at 0.75 can use
fewer than [P1 log(P1/P0) + (1-P1) log((1-P1)/(1-P0))] / KL(0.75 || 0.5) discordant
pairs on average (Wald 1945; P1 = P(pass | 0.75), P0 = P(pass | 0.5)); it is printed.

    .venv/bin/python benchmarks/bench_sequential.py [--reps 100000] [--seed 2024]

Writes `benchmarks/results/sequential.json`.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
import numpy as np

from evalkit.runfolder.runs import write_atomic
from evalkit.numbers.stats import SequentialDesign, SequentialSignTest, sign_test, sign_test_power, sign_test_sample_size

HERE = Path(__file__).resolve().parent
WIN_RATES = (0.5, 0.65, 0.75, 0.9)
TIE_RATES = (0.0, 0.3)
ALPHA, POWER, PLANNED = 0.05, 0.8, 0.75


def simulate_sequential(design: SequentialDesign, w: float, t: float, reps: int, rng, chunk: int = 20_000):
    """Replays the design's boundaries on seeded streams of paired outcomes (vectorised);
    returns verdict codes (1 pass, -1 regression, 0 no-improvement) and trials used."""
    codes, trials = [], []
    horizon = int(design.max_discordant / (1 - t) * 2 + 80)
    pass_at, fut_at = np.asarray(design.pass_at), np.asarray(design.futility_at)
    for start in range(0, reps, chunk):
        m = min(chunk, reps - start)
        u = rng.random((m, horizon))
        step = np.where(u < t, 0, np.where(u < t + (1 - t) * w, 1, -1)).astype(np.int8)
        moved = step != 0
        wins = np.cumsum(step == 1, 1, dtype=np.int32)
        d = np.cumsum(moved, 1, dtype=np.int32)
        losses = d - wins
        dd = np.minimum(d, design.max_discordant)
        is_pass = moved & (wins >= pass_at[dd])
        is_reg = moved & (losses >= pass_at[dd])
        is_none = moved & ((np.maximum(wins, losses) <= fut_at[dd]) | (d >= design.max_discordant))
        stop = is_pass | is_reg | is_none
        if not stop.any(1).all():
            raise RuntimeError("simulation horizon too short")
        first = stop.argmax(1)
        rows = np.arange(m)
        codes.append(np.where(is_pass[rows, first], 1, np.where(is_reg[rows, first], -1, 0)))
        trials.append(first + 1)
    return np.concatenate(codes), np.concatenate(trials)


def simulate_fixed(n: int, w: float, t: float, reps: int, rng):
    """Fixed-n design: n paired trials, then the exact sign test (public `sign_test`)."""
    d = rng.binomial(n, 1 - t, size=reps)
    wins = rng.binomial(d, w)
    p = {}
    for a, b in set(zip(wins.tolist(), (d - wins).tolist())):
        p[(a, b)] = sign_test(a, b).p_value
    sig = np.array([p[(a, b)] <= ALPHA for a, b in zip(wins.tolist(), (d - wins).tolist())])
    return np.where(sig & (wins > d - wins), 1, np.where(sig & (wins < d - wins), -1, 0))


def wald_bound(p1: float, p0: float, w: float) -> float:
    kl = w * math.log(2 * w) + (1 - w) * math.log(2 * (1 - w))
    return (p1 * math.log(p1 / p0) + (1 - p1) * math.log((1 - p1) / (1 - p0))) / kl


def row(test: SequentialSignTest, fixed_n: int, w: float, t: float, reps: int, rng) -> dict:
    code, trials = simulate_sequential(test.design, w, t, reps, rng)
    fcode = simulate_fixed(fixed_n, w, t, reps, rng)
    oc = test.operating_characteristics(w, t)
    mean = float(trials.mean())
    return {
        "win_rate": w,
        "tie_rate": t,
        "fixed_trials": fixed_n,
        "fixed_p_pass_sim": float(np.mean(fcode == 1)),
        "fixed_p_regression_sim": float(np.mean(fcode == -1)),
        "fixed_p_reject_exact": sign_test_power(fixed_n, w, t, ALPHA),
        "seq_mean_trials_sim": mean,
        "seq_mean_trials_se": float(trials.std(ddof=1) / math.sqrt(reps)),
        "seq_mean_trials_exact": oc.expected_trials,
        "seq_p_pass_sim": float(np.mean(code == 1)),
        "seq_p_regression_sim": float(np.mean(code == -1)),
        "seq_p_pass_exact": oc.p_pass,
        "seq_p_regression_exact": oc.p_regression,
        "ratio": mean / fixed_n,
    }


def print_table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(" win  ties | fixed n  P(pass)  P(regr) | seq mean (exact)    P(pass) (exact)   P(regr) | ratio")
    for r in rows:
        print(
            f" {r['win_rate']:.2f} {r['tie_rate']:.1f}  | {r['fixed_trials']:7d}  {r['fixed_p_pass_sim']:.4f}   "
            f"{r['fixed_p_regression_sim']:.4f} | {r['seq_mean_trials_sim']:7.2f} ({r['seq_mean_trials_exact']:7.2f})   "
            f"{r['seq_p_pass_sim']:.4f} ({r['seq_p_pass_exact']:.4f})   {r['seq_p_regression_sim']:.4f} | {r['ratio']:.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=2024)
    _smoke.add(ap)
    args = ap.parse_args()
    dest = _smoke.apply(args, HERE / "results" / "sequential.json", reps=500)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()

    test = SequentialSignTest(win_rate=PLANNED, alpha=ALPHA, power=POWER)
    dz = test.design
    print(
        f"sequential design for win rate {PLANNED}: max {dz.max_discordant} discordant pairs, "
        f"log thresholds +{dz.log_upper:.3f} / {dz.log_futility:.3f}, exact type I {dz.type_i_error:.4f}, "
        f"exact power {dz.power_exact:.4f} (fixed design: n = {dz.fixed_discordant}, power {dz.fixed_power:.4f})"
    )
    planned_rows = []
    for t in TIE_RATES:
        fixed = sign_test_sample_size(PLANNED, t, ALPHA, POWER)
        for w in WIN_RATES:
            r = row(test, fixed.trials_first, w, t, args.reps, rng)
            r["fixed_trials_stable"] = fixed.trials_stable
            planned_rows.append(r)
    print_table(f"both designs planned for win rate {PLANNED} (alpha {ALPHA}, power {POWER})", planned_rows)

    own_rows = []
    for w in WIN_RATES[1:]:
        own = SequentialSignTest(win_rate=w, alpha=ALPHA, power=POWER)
        fixed = sign_test_sample_size(w, 0.0, ALPHA, POWER)
        r = row(own, fixed.trials_first, w, 0.0, args.reps, rng)
        r["fixed_trials_stable"] = fixed.trials_stable
        own_rows.append(r)
    print_table("each design planned for the true win rate (no ties)", own_rows)

    oc1 = test.operating_characteristics(PLANNED)
    oc0 = test.operating_characteristics(0.5)
    bound = wald_bound(oc1.p_pass, oc0.p_pass, PLANNED)
    at75 = next(r for r in planned_rows if r["win_rate"] == PLANNED and r["tie_rate"] == 0.0)
    summary = {
        "ratio_at_0.75_vs_first_n": at75["ratio"],
        "ratio_at_0.75_vs_stable_n": at75["seq_mean_trials_sim"] / at75["fixed_trials_stable"],
        "wald_lower_bound_discordant": bound,
        "wald_lower_bound_ratio": bound / dz.fixed_discordant,
        "power_seq_exact": dz.power_exact,
        "power_fixed_exact": dz.fixed_power,
        "target_ratio": 0.6,
        "target_met_vs_first_n": at75["ratio"] <= 0.6 and dz.power_exact >= dz.fixed_power,
    }
    print(
        f"\nwin rate 0.75, no ties: sequential {at75['seq_mean_trials_sim']:.2f} trials vs fixed "
        f"{at75['fixed_trials']} (first n reaching power) = {summary['ratio_at_0.75_vs_first_n']:.3f}x; "
        f"vs the stable n {at75['fixed_trials_stable']}: {summary['ratio_at_0.75_vs_stable_n']:.3f}x. "
        f"Power {dz.power_exact:.4f} (sequential) vs {dz.fixed_power:.4f} (fixed)."
    )
    print(
        f"Wald's bound for any sequential test with these error rates: {bound:.2f} pairs "
        f"= {summary['wald_lower_bound_ratio']:.3f}x the fixed n."
    )
    out = {
        "benchmark": "sequential sign test vs fixed-n exact sign test",
        "alpha": ALPHA,
        "power": POWER,
        "planned_win_rate": PLANNED,
        "reps": args.reps,
        "seed": args.seed,
        "design": {
            "max_discordant": dz.max_discordant,
            "log_upper": dz.log_upper,
            "log_futility": dz.log_futility,
            "type_i_error_exact": dz.type_i_error,
            "power_exact": dz.power_exact,
            "fixed_discordant": dz.fixed_discordant,
            "fixed_power_exact": dz.fixed_power,
        },
        "planned_for_0.75": planned_rows,
        "planned_for_true_rate": own_rows,
        "summary": summary,
        "seconds": time.perf_counter() - started,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    write_atomic(dest, json.dumps(out, indent=1) + "\n")
    print(f"wrote {dest} in {out['seconds']:.1f} s")


if __name__ == "__main__":
    main()
