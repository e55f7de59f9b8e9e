"""The two conversation examples end to end, timed, and the figures issue 45 asks for.

Each suite is copied to a temporary folder and taken through the commands a user types,
each one timed (wall and CPU seconds, the load average before and after: on a shared
machine the wall time measures its load too):

    evalkit serve SERVE -- evalkit run SUITE --runs-dir RUNS   (the conversations)
    evalkit serve SERVE -- evalkit grade RUN                   (checks, judged statements, reviews)
    evalkit compare RUN --baseline baseline --treatment careful
    evalkit report RUN --reports-dir REPORTS
    evalkit serve SERVE -- evalkit run SUITE --runs-dir RUNS   (again: every call replays at $0)

`scripted`: examples/conversation on the scripted server (`--scripted scripted.json`
plays the user, both agents and the judge). `local`: examples/conversation-local on the
embedded model that is instruction-tuned (`--tools-model`, SmolLM2-135M-Instruct plays
the user, both agents and the judge). The figures from each run's conversations.json:
the simulator's share of the run's spend, the reviews' blame, each arm's endings, pass
rate and pass^k over conversations (with and without the simulator-blamed ones).

    python benchmarks/bench_conversations.py [--suites scripted,local] [--k K] [--report-only NB,..]
        [--out FILE] [--work DIR] [--smoke]

`--smoke`: the scripted suite only (no model), k=1, the report's run_summary notebook
only; its figures go to the smoke folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)

ROOT = Path(__file__).resolve().parent.parent
EVALKIT = [sys.executable, "-m", "evalkit._cli.main"]
SUITES = {
    "scripted": (ROOT / "examples" / "conversation", ["--scripted", "scripted.json"]),
    "local": (ROOT / "examples" / "conversation-local", ["--tools-model"]),
}
ARMS = ("baseline", "careful")


def timed(name: str, argv: list[str], cwd: Path) -> dict[str, Any]:
    """Run one command: its exit status, wall and CPU seconds (it and the processes it
    waited for, the model server included: os.wait4's rusage), the load average around
    it and its output's last lines. A step that fails is recorded as failed (`rc`), its
    figures kept: a judge too small to score is an outcome to show, not to hide."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    step = {"step": name, "command": " ".join(argv_for_humans(argv, cwd)), "rc": rc,
            "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "load_average_1m_before": round(load, 2), "load_average_1m_after": round(os.getloadavg()[0], 2)}
    step["last_lines"] = [x for x in output.splitlines() if x.strip()][-3:]
    print(f"{name}: exit {rc} in {step['wall_s']} s ({step['cpu_s']} CPU-s), load {load:.2f}", flush=True)
    if rc != 0:
        print(output[-4000:], flush=True)
    return step


def argv_for_humans(argv: list[str], cwd: Path) -> list[str]:
    """The command as a user would type it: `evalkit` for this interpreter's module, paths
    relative to the suite's copy."""
    out = ["evalkit" if a == "evalkit._cli.main" else a for a in argv if a not in (sys.executable, "-m")]
    return [os.path.relpath(a, cwd) if a.startswith(str(cwd)) else a for a in out]


def served(serve: list[str], *command: str) -> list[str]:
    """`evalkit serve SERVE -- evalkit COMMAND...`."""
    return [*EVALKIT, "serve", *serve, "--", *EVALKIT, *command]


def newest_run(runs: Path) -> Path:
    return max((p for p in runs.iterdir() if p.is_dir()), key=lambda p: p.name)


def pipeline(name: str, work: Path, k: int | None, report: list[str]) -> dict[str, Any]:
    """One suite through run, grade, compare, report and the $0 replay: the steps' times
    and the run's figures. `k`: the suite's own when None; `report`: `evalkit report`'s
    other arguments."""
    source, serve = SUITES[name]
    suite = work / name
    shutil.copytree(source, suite, ignore=shutil.ignore_patterns("runs"))
    runs, reports = work / f"{name}-runs", work / f"{name}-reports"
    sample = ["run", str(suite), "--runs-dir", str(runs), "--no-progress", *(["--k", str(k)] if k else [])]
    steps = [timed("run", served(serve, *sample), suite)]
    if steps[0]["rc"] != 0:
        raise SystemExit(f"the run of {name} failed: {steps[0]['last_lines']}")
    run = newest_run(runs)
    steps.append(timed("grade", served(serve, "grade", str(run)), suite))
    steps.append(timed("compare", [*EVALKIT, "compare", str(run), "--baseline", ARMS[0], "--treatment", ARMS[1]],
                       suite))
    steps.append(timed("report", [*EVALKIT, "report", str(run), "--reports-dir", str(reports), *report],
                       suite))
    steps.append(timed("replay", served(serve, *sample), suite))
    replay = json.loads((newest_run(runs) / "summary.json").read_text())
    return {"suite": str(source.relative_to(ROOT)), "serve": " ".join(serve), "steps": steps,
            "replay_spend_usd": replay["spend_usd"], **figures(run)}


def figures(run: Path) -> dict[str, Any]:
    """The run's figures: spend by role, the simulator's share, the reviews' blame and
    each arm's conversation figures (conversations.json, written by `evalkit grade`)."""
    summary = json.loads((run / "summary.json").read_text())
    spend = summary["spend_usd"]
    conv = json.loads((run / "conversations.json").read_text())
    reviews = conv["reviews"]
    blamed = sum((reviews.get("blame") or {}).values())
    return {
        "conversations": summary["samples_ran"],
        "spend_usd": spend,
        "simulator_spend_usd": conv["simulator_spend_usd"],
        "agent_spend_usd": conv["agent_spend_usd"],
        "simulator_share_of_spend": conv["simulator_spend_usd"] / spend if spend else None,
        "reviews": reviews,
        "blame_shares": {k: v / blamed for k, v in (reviews.get("blame") or {}).items()} if blamed else {},
        "per_arm": {arm: per_arm(a) for arm, a in conv["per_arm"].items()},
    }


def per_arm(a: dict[str, Any]) -> dict[str, Any]:
    """One arm's figures as conversations.json has them."""
    keys = ("conversations", "endings", "mean_turns", "passed", "failed", "simulator_blamed",
            "simulator_blamed_share_of_failures", "pass_rate", "pass_rate_without_simulator_blamed",
            "pass_hat_k", "pass_hat_k_without_simulator_blamed")
    return {k: a.get(k) for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suites", default="scripted,local", help="comma-separated: scripted, local")
    ap.add_argument("--out", default=None, help="default: benchmarks/results/conversations.json")
    ap.add_argument("--k", type=int, default=None, help="samples per case and arm (default: each suite's k)")
    ap.add_argument("--report-only", default="", help="comma-separated notebooks for `evalkit report --only`")
    ap.add_argument("--work", default=None, help="keep the suites' copies, runs and reports here (default: a "
                    "temporary folder, removed)")
    _smoke.add(ap)
    args = ap.parse_args()
    out = _smoke.apply(args, ROOT / "benchmarks" / "results" / "conversations.json", suites="scripted", k=1,
                       report_only="run_summary")
    report = [a for nb in args.report_only.split(",") if nb for a in ("--only", nb)]
    command = " ".join(["python", *(os.path.relpath(a, ROOT) if a.startswith(str(ROOT)) else a for a in sys.argv)])
    result: dict[str, Any] = {"command": command, "cores": len(os.sched_getaffinity(0)), "suites": {}}
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-conv-") as d:
        work = Path(args.work or d)
        for name in args.suites.split(","):
            result["suites"][name] = pipeline(name, work, args.k, report)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
