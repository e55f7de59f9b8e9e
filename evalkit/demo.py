"""The main job of `make demo`: the example suite on the embedded model, end to end.

lint -> serve the embedded llama.cpp model on loopback -> run both arms at k=5 under
the cost cap -> grade -> two-arm verdict and power plan -> reports -> the path of
`reports/index.html` on the last line. No API key and no network: the model is the
Gemma 3 270M base model that the `local` extra installs.

    python -m evalkit.demo [SUITE] [--k 5] [--reports-dir reports] [--pandalm-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import fmt
from .errors import EvalkitError


def _say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def main(argv: list[str] | None = None) -> int:
    # lazy: the demo's stack loads after its arguments are read
    from .grading import grade_run
    from .loader import lint_suite, load_suite
    from .plans import find_plan, load_plan, plan_power, write_plan
    from .reports import report_run
    from .runner import run_suite
    from .serve import LocalModelServer
    from .verdicts import compare

    ap = argparse.ArgumentParser(prog="python -m evalkit.demo", description=__doc__.splitlines()[0])
    ap.add_argument("suite", nargs="?", default="data/factual")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--reports-dir", default="reports")
    ap.add_argument("--runs-dir", default=None, help="default: <suite>/runs")
    ap.add_argument("--pandalm-dir", default=None, help="PandaLM's data, to calibrate a judge on as well")
    args = ap.parse_args(argv)
    t0 = time.monotonic()

    report = lint_suite(args.suite)
    for f in report.findings:
        _say(f"lint: {f}")
    if not report.ok:
        _say("the suite has errors; fix them first")
        return 2
    suite = load_suite(args.suite)
    arms = [a.name for a in suite.config.arms]
    _say(f"suite {suite.name}: {len(suite.cases)} cases, arms {', '.join(arms)}, k={args.k}")

    # Pre-register the comparison before any sample is drawn (issue: plan, then run).
    # The suite commits its plan; a suite without one gets one written now.
    plan_path = find_plan(args.suite)
    if plan_path is not None:
        plan = load_plan(plan_path)
        _say(f"pre-registered plan {plan_path}: {plan.test}, alpha {plan.alpha}, power {plan.power}")
    else:
        plan = plan_power(win_rate=0.8, tie_rate=0.5, alpha=0.05, power=0.8, seed=suite.config.seed)
        _say(f"power plan written to {write_plan(plan, args.suite)}")

    with LocalModelServer() as server:
        _say(f"embedded model {server.model_name} serving at {server.base_url}")
        # A few tokens first: a server that loads but dies on its first completion (a
        # llama.cpp build wrong for this CPU) fails here, with its log, not mid-run.
        server.smoke()
        _say("start-up completion: ok")
        t_run = time.monotonic()
        # Watched: if the server dies mid-run, the run stops at once, INCOMPLETE, naming
        # its exit status and log tail, instead of retrying a dead port.
        result = run_suite(
            suite, arms=arms, k=args.k, runs_dir=args.runs_dir, base_url=server.base_url, watch=server.exit_reason
        )
        _say(f"run folder {result.path} ({time.monotonic() - t_run:.1f}s)")
        died = server.exit_reason()
    _say(
        f"spend {fmt.usd(result.spend_usd)} of cap {fmt.usd(result.cap_usd)} "
        f"(cache avoided {fmt.usd(result.avoided_usd)})"
    )
    if died:
        _say("the embedded model server died during the run: not grading or reporting it")
        return 1

    graded = grade_run(result.path, suite)
    for arm in arms:
        a = graded.summary.per_arm.get(arm)
        m = a.overall if a is not None else None
        rate = m.sample_pass_rate if m is not None else None
        shown = fmt.pct(rate)
        expected = m.n_expected if m is not None else 0
        graded_n = m.n_graded if m is not None else 0
        _say(f"sample pass rate {arm}: {shown} of {expected} samples ({graded_n} graded)")
    for f in graded.findings:
        _say(f"finding {f.level}: {f.message}")

    if len(arms) >= 2:
        v = compare(result.path, arms[0], arms[1], plan=plan.path or None)  # recorded in verdicts.json
        _say(
            f"verdict {arms[1]} vs {arms[0]}: {v.kind} ({v.wins}W/{v.ties}T/{v.losses}L, "
            f"p={fmt.pvalue(v.p_value)}, unit: {v.unit})"
            if v.p_value is not None
            else f"verdict: {v.kind} ({v.reason})"
        )

    rep = report_run(result.path, args.reports_dir, pandalm_dir=args.pandalm_dir)
    for nb in rep.notebooks:
        _say(f"report {nb.name}: {'ok' if nb.ok else 'FAILED'}")
    for name, why in rep.skipped.items():
        _say(f"report {name}: skipped ({why})")
    _say(f"done in {time.monotonic() - t0:.1f}s")
    print(Path(rep.index).resolve())
    return 0 if (result.complete and rep.ok) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except EvalkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
