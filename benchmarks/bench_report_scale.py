"""The report set of a 100,000-sample run: how long `evalkit report` takes, and where.

The run: N/20 cases x 2 arms x k = 10 (default N = 100,000: 5,000 cases), the suite of
`bench_batch.py` (completion mode, a `contains` check each), written straight into a run
folder with evalkit's own writers (`RunFolder.create`, `append_result`, `write_summary`)
from a seeded draw with the scripted server's weights (baseline: Paris 0.5, Lyon 0.3,
Nice 0.2; the guided arm: 0.8 / 0.15 / 0.05), so no server and no `--batch` are needed;
then graded with `grading.grade_run` (the deterministic checks).

Measured, each in a fresh child process (its peak memory is its own, from `wait4`, the
largest of the process and the kernels it waited for):

* `report`: `evalkit report RUN --reports-dir ...` (the CLI, as a user runs it), repeated
  (default 3) for the median wall time, with the CPU time of the process and its kernels,
  each notebook's seconds (from the report's manifest), the HTML written, and the load
  average of the machine before and after each (it may be shared);
* `breakdown`: `runload.load_run` of the run, and the computations the report makes
  on it (`gates.run_metrics` per arm, `verdicts.paired_trials`, `verdicts.two_arm_verdict`).

    .venv/bin/python benchmarks/bench_report_scale.py [--samples 100000] [--repeat 3]

Writes `benchmarks/results/report_scale.json`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
from bench_batch import K, write_suite  # the same suite as bench_batch.py (this folder is on sys.path)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "report_scale.json"
TARGET_S = 15.0
WEIGHTS = {"baseline": [0.5, 0.3, 0.2], "guided": [0.8, 0.15, 0.05]}
CITIES = ["Paris", "Lyon", "Nice"]


def write_run(suite_dir: Path, runs_dir: Path, k: int = K, seed: int = 20261201) -> Path:
    """A finished run of the suite, written with evalkit's writers from a seeded draw."""
    from evalkit.suites.reader import load_suite
    from evalkit.foundations.records import CaseTable, Sample, Usage
    from evalkit.runfolder.runs import RunFolder

    suite = load_suite(suite_dir)
    config = json.loads((suite_dir / "config.json").read_text())
    arms = [a["name"] for a in config["arms"]]
    meta = {
        "suite": str(suite_dir),
        "suite_name": suite.name,
        "config": config,
        "config_hash": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest(),
        "arms": arms,
        "k": k,
        "cases": [c.id for c in suite.cases],
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": "evalkit",
        "sample_files": False,
    }
    rnd = random.Random(seed)
    folder = RunFolder.create(runs_dir, meta)
    folder.write_case_table(CaseTable.from_cases(suite.cases))
    folder.sample_files = False
    spend = 0.0
    per_arm = {a: {"samples": 0, "spend_usd": 0.0} for a in arms}
    for case in suite.cases:
        for arm in arms:
            for i in range(k):
                pt, ct = 10 + 6 * (arm == "guided"), 1
                cost = (pt * 0.1 + ct * 0.4) / 1e6
                out = rnd.choices(CITIES, WEIGHTS[arm])[0]
                key = f"{case.id}/{arm}/{i}".encode()
                folder.append_result(
                    Sample(
                        case_id=case.id,
                        tags=tuple(case.tags),
                        arm=arm,
                        index=i,
                        seed=rnd.randrange(2**31),
                        model="scripted",
                        output=out,
                        tool_calls=(),
                        finish_reason="stop",
                        usage=Usage(pt, ct),
                        latency_ms=round(rnd.uniform(2.0, 40.0), 3),
                        cost_usd=cost,
                        request_hash=hashlib.sha256(key).hexdigest(),
                        system_fingerprint="fp_evalkit_scripted",
                    )
                )
                spend += cost
                per_arm[arm]["samples"] += 1
                per_arm[arm]["spend_usd"] += cost
    n = len(suite.cases) * len(arms) * k
    summary = {
        "complete": True,
        "ran": len(suite.cases),
        "total": len(suite.cases),
        "samples_ran": n,
        "samples_total": n,
        "reason": None,
        "spend_usd": spend,
        "avoided_usd": 0.0,
        "cap_usd": config["cost_cap_usd"],
        "ceiling_breaches": 0,
        "untrusted_usage": 0,
        "per_arm": per_arm,
        "exit_code": 0,
    }
    folder.write_summary(summary, f"# {suite.name}\n\n{n} samples, complete.\n")
    folder.close()
    return folder.path


# -- the measured steps, each in a child process ----------------------------------------


def child(step: str, args: list[str]) -> dict:
    t0 = time.perf_counter()
    out: dict = {}
    if step == "make":
        suite = write_suite(Path(args[0]), int(args[1]))
        run = write_run(suite, Path(args[2]))
        out = {"run": str(run)}
    elif step == "grade":
        from evalkit.conclusions.grading import grade_run

        g = grade_run(args[0])
        out = {"graded": g.summary.n_graded}
    elif step == "breakdown":
        from evalkit.conclusions import gates
        from evalkit.runfolder import runload
        from evalkit.conclusions import verdicts

        def timed(fn) -> float:
            t = time.perf_counter()
            fn()
            return round(time.perf_counter() - t, 3)

        run = runload.load_run(args[0])
        out = {
            "runload.load_run_s": timed(lambda: runload.load_run(args[0])),
            "gates.run_metrics_s per arm": {
                a: timed(lambda a=a: gates.run_metrics(run, arm=a)) for a in run.arm_names()
            },
            "verdicts.paired_trials_s": timed(lambda: verdicts.paired_trials(run, "baseline", "guided")),
            "verdicts.two_arm_verdict_s": timed(lambda: verdicts.two_arm_verdict(run, "baseline", "guided")),
        }
    out["wall_s"] = round(time.perf_counter() - t0, 3)
    return out


def measure(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[str, dict]:
    """Run a command in a fresh process: its output, wall time, CPU time (with the
    children it waited for) and peak resident memory."""
    load = round(os.getloadavg()[0], 2)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed (exit {rc}):\n{out[-3000:]}")
    return out, {
        "wall_s": round(time.perf_counter() - t0, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
        "load_average_1m": {"before": load, "after": round(os.getloadavg()[0], 2)},
    }


def step(name: str, *args: str) -> dict:
    out, m = measure([sys.executable, __file__, "--child", name, *args])
    result = json.loads(out.strip().splitlines()[-1])
    result.update({k: v for k, v in m.items() if k != "wall_s"}, process_wall_s=m["wall_s"])
    print(f"{name}: {json.dumps(result)[:300]}", flush=True)
    return result


def report_once(run: Path, reports_dir: Path, tree: Path = HERE.parent) -> dict:
    """`evalkit report RUN` in a fresh process, with `tree`'s evalkit (default this
    checkout's; another: a git worktree of an older commit) first on PYTHONPATH and this
    venv's packages, so two versions are timed on the same run, one after the other, on the
    same machine."""
    shutil.rmtree(reports_dir, ignore_errors=True)
    report = ["report", str(run), "--reports-dir", str(reports_dir)]
    code = (
        f"import sys, evalkit; assert evalkit.__file__.startswith({str(tree.resolve()) + '/'!r}), evalkit.__file__; "
        f"from evalkit._cli.main import main; sys.argv = ['evalkit', *{report!r}]; sys.exit(main())"
    )
    # run from the tree: `-c` puts the working directory first on sys.path, before PYTHONPATH
    _, m = measure([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
    out = reports_dir / run.name
    manifest = json.loads((out / "report.json").read_text())
    m["per_notebook_s"] = {n["name"]: n["seconds"] for n in manifest["notebooks"]}
    m["ok"] = all(n["ok"] for n in manifest["notebooks"])
    m["html_bytes"] = {p.name: p.stat().st_size for p in sorted(out.glob("*.html"))}
    print(f"report ({tree.name}): {json.dumps(m)}", flush=True)
    return m


def compared(trees: list[Path], runs: dict[Path, list[dict]]) -> dict:
    """Each other tree's reports beside this one's: its commit, walls and medians."""
    return {
        str(tree): {
            "commit": commit(tree),
            "walls_s": [r["wall_s"] for r in runs[tree]],
            "median_wall_s": statistics.median(r["wall_s"] for r in runs[tree]),
            "median_cpu_s": statistics.median(r["cpu_s"] for r in runs[tree]),
            "ok": all(r["ok"] for r in runs[tree]),
        }
        for tree in trees
    }


def cpu_model() -> str:
    """The processor's model name (from /proc/cpuinfo on Linux): the same report took 9 s on
    one 2-core machine and 20 s on another (issue 44), so a figure says which it ran on."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def commit(tree: Path = HERE.parent) -> str | None:
    """A checkout's commit (None outside a git checkout), with "+changes" when its evalkit
    or notebooks have any."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "evalkit", "notebooks"], cwd=tree, capture_output=True, text=True
        )
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--run", help="report on this graded run folder instead of making one")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument(
        "--against",
        nargs="+",
        type=lambda p: Path(p).resolve(),
        default=[],
        help="other checkouts (git worktrees of older commits) whose reports are timed in turn with this one's",
    )
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    _smoke.add(ap)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1:])), flush=True)
        return
    _smoke.apply(args, RESULTS, samples=200, repeat=1)

    work = Path(tempfile.mkdtemp(prefix="evalkit-bench-report-scale-"))
    result: dict = {
        "benchmark": "the report set (evalkit report) of a 100,000-sample two-arm run",
        "command": "python benchmarks/bench_report_scale.py"
        + (f" --samples {args.samples}" if args.run is None else "")
        + f" --repeat {args.repeat}"
        + (" --against " + " ".join(map(str, args.against)) if args.against else "")
        + (" --smoke" if args.smoke else ""),
        "samples": args.samples,
    }
    try:
        if args.run:
            run = Path(args.run).resolve()
        else:
            made = step("make", str(work / "suite"), str(args.samples), str(work / "runs"))
            run = Path(made["run"])
            result["make"] = made
            result["grade"] = step("grade", str(run))
        result["run_bytes"] = {p.name: p.stat().st_size for p in sorted(run.glob("*.jsonl"))}
        result["breakdown"] = step("breakdown", str(run))
        reps, others = [], {t: [] for t in args.against}
        for n in range(args.repeat):  # interleaved: a machine's speed drifts within the hour
            order = [None, *args.against]
            for tree in order if n % 2 == 0 else order[::-1]:  # neither side always first
                if tree is None:
                    reps.append(report_once(run, work / "reports"))
                else:
                    others[tree].append(report_once(run, work / "reports", tree))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    walls = [r["wall_s"] for r in reps]
    result["report"] = {
        "repeats": reps,
        "median_wall_s": statistics.median(walls),
        "min_wall_s": min(walls),
        "median_cpu_s": statistics.median(r["cpu_s"] for r in reps),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in reps),
        "per_notebook_median_s": {
            n: round(statistics.median(r["per_notebook_s"][n] for r in reps), 3) for n in reps[0]["per_notebook_s"]
        },
        "html_total_bytes": sum(reps[-1]["html_bytes"].values()),
        "ok": all(r["ok"] for r in reps),
    }
    if args.against:
        result["against"] = compared(args.against, others)
    result["target_s"] = TARGET_S
    result["meets_target"] = result["report"]["median_wall_s"] <= TARGET_S
    result["machine"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "platform": platform.platform(),
    }
    result["commit"] = commit()
    result["measured"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["report"], indent=1))


if __name__ == "__main__":
    main()
