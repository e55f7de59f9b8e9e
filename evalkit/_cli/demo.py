"""The main job of `make demo`: the example suites on the embedded model, end to end.

lint -> serve the embedded llama.cpp model on loopback -> run each suite's arms under its
cost cap -> grade -> two-arm verdict against the pre-registered plan (more arms: every
pair's, Holm-corrected) -> reports (each run's explorer.html; the factual suite's
baseline and skilled arms run a second time, with another seed and no response cache,
and its diff.html holds the run against that second one; another suite's diff.html is
against its previous run when an earlier `make demo` left one) -> the
path of `reports/index.html` on the last line. No API key and no network: the model is
the Gemma 3 270M base model that the `local` extra installs.

The suites: `data/factual` (a prompt template, k=5) and `data/agent` (the user's own
agent program, `data/agent/agent.py`, run per sample behind evalkit's metering proxy:
every model call it makes is reserved on the run's ledger, its tool calls are answered
from the cases' fixtures, and its trajectories are replayed side by side in the report).

    python -m evalkit._cli.demo [SUITE ...] [--k K] [--reports-dir reports] [--pandalm-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from evalkit.foundations import fmt
from evalkit.foundations.errors import EvalkitError

DEFAULT_SUITES = ("data/factual", "data/agent")
# suite name -> the arms run a second time, another seed and no cache, for the diff
SECOND_RUN = {"factual": ("baseline", "skilled")}


def _say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def _prepare(path: str, k: int | None) -> tuple[Any, Any] | None:
    """Lint the suite and read (or write) its pre-registered plan; None when it has errors."""
    # lazy: the demo's stack loads after its arguments are read
    from evalkit.intake.lint import lint_suite, load_suite
    from evalkit.numbers.plans import find_plan, load_plan, plan_power, write_plan

    report = lint_suite(path)
    for f in report.findings:
        _say(f"lint: {f}")
    if not report.ok:
        _say(f"the suite {path} has errors; fix them first")
        return None
    suite = load_suite(path)
    arms = [a.name for a in suite.config.arms]
    unit = suite.config.unit.kind
    _say(f"suite {suite.name}: {len(suite.cases)} cases, arms {', '.join(arms)}, k={k or suite.config.k}, unit {unit}")
    # Pre-register the comparison before any sample is drawn (issue: plan, then run).
    # The suite commits its plan; a suite without one gets one written now.
    plan_path = find_plan(path)
    if plan_path is not None:
        plan = load_plan(plan_path)
        _say(f"pre-registered plan {plan_path}: {plan.test}, alpha {plan.alpha}, power {plan.power}")
    else:
        plan = plan_power(win_rate=0.8, tie_rate=0.5, alpha=0.05, power=0.8, seed=suite.config.seed)
        _say(f"power plan written to {write_plan(plan, path)}")
    return suite, plan


def second_run(suite: Any, run_suite: Callable[..., Any], **how: Any) -> Any | None:
    """The suite's `SECOND_RUN` arms run again with the next seed and the response cache
    off (else the cache would answer every sample as before): the run the first one's
    diff.html is held against, so a fresh clone's demo has a diff with real changes.
    `how`: run_suite's other keywords (k, runs_dir, base_url, watch). None for a suite
    without second arms."""
    arms = [a for a in SECOND_RUN.get(suite.name, ()) if a in {x.name for x in suite.config.arms}]
    if not arms:
        return None
    seed = (suite.config.seed or 0) + 1
    raw = {**suite.config.raw, "seed": seed} if suite.config.raw else {}  # what the run's config.json records
    again = replace(suite, config=replace(suite.config, seed=seed, raw=raw))
    return run_suite(again, arms=arms, cache=False, **how)


def _analyse(
    suite: Any, plan: Any, result: Any, reports_dir: str, pandalm_dir: str | None = None, again: Any | None = None
) -> bool:
    """Grade the run, say the verdict, render its reports (diff.html against `again`,
    the second run, else the suite's previous run); True when all went well."""
    # lazy: the demo's stack loads after its arguments are read
    from evalkit.conclusions.compare import compare, compare_many
    from evalkit.conclusions.grading import grade_run
    from evalkit.conclusions.verdicts import conformance_verdict
    from evalkit.telling.explorer import previous_run
    from evalkit.telling.reports import report_run

    arms = [a.name for a in suite.config.arms]
    graded = grade_run(result.path, suite)
    for arm in arms:
        a = graded.summary.per_arm.get(arm)
        m = a.overall if a is not None else None
        rate = m.sample_pass_rate if m is not None else None
        shown = fmt.pct(rate)
        expected = m.n_expected if m is not None else 0
        graded_n = m.n_graded if m is not None else 0
        _say(f"{suite.name}: sample pass rate {arm}: {shown} of {expected} samples ({graded_n} graded)")
    for f in graded.findings:
        _say(f"{suite.name}: finding {f.level}: {f.message}")
    if len(arms) > 2:  # every pair, Holm-corrected across the pairs (recorded in verdicts.json)
        matrix = compare_many(result.path, arms, plan=plan.path or None)
        _say(f"{suite.name}: {len(matrix.pairs)} pairs of {len(arms)} arms, Holm-corrected at alpha {matrix.alpha:g}")
        for v, q in zip(matrix.pairs, matrix.p_adjusted, strict=True):
            _say(
                f"{suite.name}: verdict {v.treatment_arm} vs {v.baseline_arm}: {v.kind} ({v.wins}W/{v.ties}T/"
                f"{v.losses}L, p={fmt.pvalue(v.p_value)}, Holm p={fmt.pvalue(q)}, unit: {v.unit})"
            )
            if v.plan_check is not None and not v.plan_check.ok:
                _say(
                    f"{suite.name}: {v.treatment_arm} vs {v.baseline_arm} against the plan: "
                    + "; ".join(v.plan_check.flags)
                )
    elif len(arms) == 2:
        v = compare(result.path, arms[0], arms[1], plan=plan.path or None)  # recorded in verdicts.json
        _say(
            f"{suite.name}: verdict {arms[1]} vs {arms[0]}: {v.kind} ({v.wins}W/{v.ties}T/{v.losses}L, "
            f"p={fmt.pvalue(v.p_value)}, unit: {v.unit})"
            if v.p_value is not None
            else f"{suite.name}: verdict: {v.kind} ({v.reason})"
        )
        if v.plan_check is not None and not v.plan_check.ok:
            _say(f"{suite.name}: against the plan: {'; '.join(v.plan_check.flags)}")
    else:
        cv = conformance_verdict(result.path, arm=arms[0])
        _say(f"{suite.name}: conformance {cv.kind}: {cv.reason}")
    if suite.config.unit.kind != "prompt":
        _say(f"{suite.name}: trajectories in {result.path / 'trajectories'}; `evalkit replay {result.path}` shows them")
    if again is not None:
        grade_run(again.path, suite)
    before = again.path if again is not None else previous_run(result.path)
    rep = report_run(result.path, reports_dir, pandalm_dir=pandalm_dir, against=before)
    if before is not None:
        _say(f"{suite.name}: diff against {before.name}: {rep.out_dir / 'diff.html'}")
    for nb in rep.notebooks:
        _say(f"{suite.name}: report {nb.name}: {'ok' if nb.ok else 'FAILED'}")
    for name, why in rep.skipped.items():
        _say(f"{suite.name}: report {name}: skipped ({why})")
    return bool(result.complete and rep.ok)


def main(argv: list[str] | None = None) -> int:
    # lazy: the demo's stack loads after its arguments are read
    from evalkit.calls.serve import LocalModelServer
    from evalkit.running.runner import run_suite

    ap = argparse.ArgumentParser(prog="python -m evalkit._cli.demo", description=__doc__.splitlines()[0])
    ap.add_argument("suites", nargs="*", default=list(DEFAULT_SUITES), metavar="SUITE")
    ap.add_argument("--k", type=int, default=None, help="samples per case and arm (default: each suite's own k)")
    ap.add_argument("--reports-dir", default="reports")
    ap.add_argument("--runs-dir", default=None, help="default: <suite>/runs")
    ap.add_argument("--pandalm-dir", default=None, help="PandaLM's data, to calibrate a judge on as well")
    args = ap.parse_args(argv)
    t0 = time.monotonic()

    maybe = [_prepare(path, args.k) for path in args.suites]
    prepared = [p for p in maybe if p is not None]
    if len(prepared) != len(maybe):
        return 2
    results: list[Any] = []
    seconds: list[Any] = []
    with LocalModelServer() as server:
        _say(f"embedded model {server.model_name} serving at {server.base_url}")
        # A few tokens first: a server that loads but dies on its first completion (a
        # llama.cpp build wrong for this CPU) fails here, with its log, not mid-run.
        server.smoke()
        _say("start-up completion: ok")
        for suite, _ in prepared:
            t_run = time.monotonic()
            arms = [a.name for a in suite.config.arms]
            # Watched: if the server dies mid-run, the run stops at once, INCOMPLETE, naming
            # its exit status and log tail, instead of retrying a dead port.
            result = run_suite(
                suite, arms=arms, k=args.k, runs_dir=args.runs_dir, base_url=server.base_url, watch=server.exit_reason
            )
            _say(f"{suite.name}: run folder {result.path} ({time.monotonic() - t_run:.1f}s)")
            _say(
                f"{suite.name}: spend {fmt.usd(result.spend_usd)} of cap {fmt.usd(result.cap_usd)} "
                f"(cache avoided {fmt.usd(result.avoided_usd)})"
            )
            results.append(result)
            if server.exit_reason():
                break
            how = {"k": args.k, "runs_dir": args.runs_dir, "base_url": server.base_url, "watch": server.exit_reason}
            again = second_run(suite, run_suite, **how)
            if again is not None:
                _say(
                    f"{suite.name}: second run of {', '.join(SECOND_RUN[suite.name])} (seed+1, no cache): {again.path}"
                )
            seconds.append(again)
            if server.exit_reason():
                break
        died = server.exit_reason()
    if died:
        _say("the embedded model server died during the run: not grading or reporting it")
        return 1
    # every run is analysed and reported, even after one that did not go well
    oks = [
        _analyse(suite, plan, res, args.reports_dir, args.pandalm_dir, again)
        for (suite, plan), res, again in zip(prepared, results, seconds + [None] * len(results), strict=False)
    ]
    ok = all(oks)
    from evalkit.telling.report_index import build_index  # lazy: as above

    index = build_index(args.reports_dir)
    _say(f"done in {time.monotonic() - t0:.1f}s")
    print(Path(index).resolve())
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except EvalkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
