"""Cost to a verdict: a run that stops once its pre-registered sequential test has decided
(`evalkit run --until-decided`) against the fixed design it replaces (issue 46).

Part 1, seeded simulation. The plan is `evalkit power --win-rate 0.75 --power 0.8
--sequential` at each tie rate (0, 0.3, 0.5); its fixed design runs the plan's `n_trials`
cases (the n from which exact power stays >= 0.8), every call of them. The sequential run
feeds one vote per case, in the seeded order, to the plan's `SequentialSignTest` (a
truncated two-sided SPRT on the discordant pairs with exact boundaries) and stops at its
decision. True effects: none (win rate 0.5), half the plan's (0.625), the plan's (0.75)
and double it (win rate 1.0, taken as 0.99: the design's rates are defined on (0, 1)). For each: P(pass), P(regression) with Monte Carlo SEs (>= 2,000 runs),
mean cases and calls (cases x 2 arms x k) against the fixed design's, and the exact values
from the design's recursion. Horizon: the simulated runs have as many cases as the design
may need (`horizon_cases`, the plan's `max_trials`: its cap on discordant pairs at the tie
rate), so the test always decides; a suite with fewer cases stops undecided when they run
out, and `p_pass_exact_at_fixed_cases` gives the exact power when the suite has only the
fixed design's `n_trials` cases. A case's calls are the unit here; calls in flight when the
test decides (at most `concurrency` - 1 keys) are measured by part 2, not simulated.

Part 2, end to end: issue 46's case (60 cases, k=2, the treatment arm flags 10% of its
answers, the baseline 70%) run with `run_suite(until_decided=True)` against evalkit's
scripted server, one run per seed: calls, dollars, `saved_usd`, the decision. Its plan is
written for the 60-case suite (`power --sequential --write`: the design whose most cases
fit it), so its horizon is the suite's 60 cases.

Part 3, per-case stopping (`"stopping": "per_case"`): the expected share of a case's k
samples drawn when a pass^k case stops at its first failure and a pass@k case at its
first pass, for per-sample pass rates p (closed form: sum_{i<k} p^i / k, resp. (1-p)^i).

    .venv/bin/python benchmarks/bench_stopping.py [--reps 20000] [--seed 46] [--e2e-seeds 5]

Writes `benchmarks/results/stopping.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
import numpy as np
from bench_sequential import simulate_sequential

from evalkit.calls.serve import ScriptedServer
from evalkit.numbers.plans import plan_power, write_plan
from evalkit.numbers.stats import SequentialSignTest
from evalkit.runfolder.runs import write_atomic
from evalkit.running.runner import run_suite

HERE = Path(__file__).resolve().parent
ALPHA, POWER, PLANNED, K = 0.05, 0.8, 0.75, 2
EFFECTS = {"none": 0.5, "half": 0.625, "planned": 0.75, "double": 0.99}  # double: 1.0, kept inside (0, 1)
TIE_RATES = (0.0, 0.3, 0.5)
CASES_E2E = 60
SCRIPT = {"rules": [
    {"match": "Answer in one word", "texts": ["FLAGGED", "ok"], "weights": [0.1, 0.9]},
    {"match": "Q:", "texts": ["FLAGGED", "ok"], "weights": [0.7, 0.3]},
]}


def simulated_row(effect: str, tie: float, reps: int, rng: np.random.Generator) -> dict:
    """One (effect, tie rate) cell: the plan made at that tie rate, its sequential design
    replayed on `reps` seeded streams of case votes, against the plan's fixed design."""
    plan = plan_power(PLANNED, tie, ALPHA, POWER, sequential=True)
    test = SequentialSignTest(**plan.sequential_params())
    w = EFFECTS[effect]
    code, trials = simulate_sequential(test.design, w, tie, reps, rng)
    oc = test.operating_characteristics(w, tie)
    p_pass, p_reg = float(np.mean(code == 1)), float(np.mean(code == -1))
    mean_cases = float(trials.mean())
    return {
        "effect": effect,
        "win_rate": w,
        "tie_rate": tie,
        "reps": reps,
        "horizon_cases": plan.max_trials(),  # the simulated suite has every case the design may need
        "max_discordant": test.design.max_discordant,
        "p_pass_exact_at_fixed_cases": test.power_within(plan.n_trials, w, tie),
        "p_pass": p_pass,
        "p_pass_se": math.sqrt(p_pass * (1 - p_pass) / reps),
        "p_regression": p_reg,
        "p_reject_two_sided": p_pass + p_reg,
        "p_reject_se": math.sqrt((p_pass + p_reg) * (1 - p_pass - p_reg) / reps),
        "p_pass_exact": oc.p_pass,
        "p_regression_exact": oc.p_regression,
        "mean_cases": mean_cases,
        "mean_cases_se": float(trials.std(ddof=1) / math.sqrt(reps)),
        "mean_cases_exact": oc.expected_trials,
        "mean_calls": mean_cases * 2 * K,
        "fixed_cases": plan.n_trials,
        "fixed_cases_first": plan.n_trials_first,
        "fixed_calls": plan.n_trials * 2 * K,
        "ratio_to_fixed": mean_cases / plan.n_trials,
        "ratio_to_fixed_first": mean_cases / plan.n_trials_first,
    }


def _suite(root: Path, seed: int) -> Path:
    root.mkdir(parents=True)
    config = {
        "mode": "completion", "template": "prompt.txt", "generator": {"model": "scripted"},
        "temperature": 0.8, "seed": seed, "k": K, "concurrency": 4, "cost_cap_usd": 1.0,
        "max_tokens_in": 64, "max_tokens_out": 8,
        "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}, "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
        "arms": [{"name": "baseline"}, {"name": "skilled", "guidance": "skilled.md"}],
    }
    (root / "config.json").write_text(json.dumps(config))
    (root / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (root / "skilled.md").write_text("Answer in one word. ")
    cases = [{"id": f"case-{i:02d}", "input": f"question {i}?", "expected": "ok", "tags": ["t"]}
             for i in range(CASES_E2E)]
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    write_plan(plan_power(PLANNED, 0.0, ALPHA, POWER, sequential=True, suite_cases=CASES_E2E), root)
    return root


def end_to_end(seeds: list[int]) -> list[dict]:
    """Issue 46's case run with --until-decided against the scripted server, per seed."""
    out = []
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(SCRIPT) as srv:
        for seed in seeds:
            suite = _suite(Path(tmp) / f"s{seed}", seed)
            started = time.perf_counter()
            res = run_suite(suite, runs_dir=Path(tmp) / f"runs{seed}", base_url=srv.base_url, progress=False,
                            until_decided=True)
            stop = res.stopping or {}
            out.append({
                "seed": seed, "decision": stop.get("decision"), "at_case": stop.get("at_case"),
                "calls": stop.get("calls"), "fixed_calls": stop.get("fixed_calls"),
                "calls_ratio": stop.get("calls", 0) / stop.get("fixed_calls", 1),
                "spend_usd": res.spend_usd, "fixed_usd": stop.get("fixed_usd"), "saved_usd": stop.get("saved_usd"),
                "wall_s": time.perf_counter() - started,
            })
    return out


def per_case_share(p: float, k: int, gate: str) -> float:
    """Expected share of k samples drawn: pass^k stops at the first failure (a sample is
    drawn while all before it passed), pass@k at the first pass."""
    q = p if gate == "pass^k" else 1 - p
    return sum(q**i for i in range(k)) / k


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--e2e-seeds", type=int, default=5)
    _smoke.add(ap)
    args = ap.parse_args()
    dest = _smoke.apply(args, HERE / "results" / "stopping.json", reps=300, e2e_seeds=1)
    if not args.smoke and args.reps < 2000:
        sys.exit("--reps: at least 2,000 runs per cell (the Monte Carlo error of alpha)")
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    rows = [simulated_row(e, t, args.reps, rng) for t in TIE_RATES for e in EFFECTS]
    print(" effect  ties | P(pass) (exact)    P(regr) | mean cases (exact) fixed | calls ratio (vs first n)")
    for r in rows:
        print(f" {r['effect']:7s} {r['tie_rate']:.1f} | {r['p_pass']:.4f} ({r['p_pass_exact']:.4f})  "
              f"{r['p_regression']:.4f} | {r['mean_cases']:6.2f} ({r['mean_cases_exact']:6.2f}) {r['fixed_cases']:4d} "
              f"| {r['ratio_to_fixed']:.3f} ({r['ratio_to_fixed_first']:.3f})")
    e2e = end_to_end([args.seed + i for i in range(args.e2e_seeds)])
    for r in e2e:
        print(f"issue 46 case, seed {r['seed']}: {r['decision']} at case {r['at_case']} of {CASES_E2E}, "
              f"{r['calls']} of {r['fixed_calls']} calls ({r['calls_ratio']:.2f}), saved ${r['saved_usd']:.6f}")
    per_case = [{"p": p, "k": k, "gate": g, "share_drawn": per_case_share(p, k, g)}
                for g in ("pass^k", "pass@k") for k in (3, 5) for p in (0.5, 0.8, 0.95)]
    none = [r for r in rows if r["effect"] == "none"]
    planned = [r for r in rows if r["effect"] == "planned"]
    summary = {
        "max_p_pass_no_effect": max(r["p_pass"] for r in none),
        "max_p_reject_no_effect": max(r["p_reject_two_sided"] for r in none),
        "alpha_held": all(r["p_reject_two_sided"] <= ALPHA + 3 * r["p_reject_se"] for r in none),
        "min_power_planned": min(r["p_pass"] for r in planned),
        "power_held": all(r["p_pass"] >= POWER - 3 * r["p_pass_se"] for r in planned),
        "max_calls_ratio_planned": max(r["ratio_to_fixed"] for r in planned),
        "max_calls_ratio_planned_vs_first_n": max(r["ratio_to_fixed_first"] for r in planned),
        "target_ratio": 0.6,
        "target_met": all(r["ratio_to_fixed"] <= 0.6 for r in planned),
        "e2e_max_calls_ratio": max((r["calls_ratio"] for r in e2e), default=None),
        "e2e_all_pass": all(r["decision"] == "pass" for r in e2e),
    }
    print(json.dumps(summary, indent=1))
    out = {
        "benchmark": "stop sampling when the pre-registered sequential test has decided (issue 46)",
        "alpha": ALPHA, "power": POWER, "planned_win_rate": PLANNED, "k": K,
        "reps": args.reps, "seed": args.seed,
        "simulated": rows, "end_to_end": e2e, "per_case": per_case, "summary": summary,
        "seconds": time.perf_counter() - started,
        "python": platform.python_version(), "machine": platform.machine(),
    }
    write_atomic(dest, json.dumps(out, indent=1) + "\n")
    print(f"wrote {dest} in {out['seconds']:.1f} s")


if __name__ == "__main__":
    main()
