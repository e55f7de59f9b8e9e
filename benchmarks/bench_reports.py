"""Rendering the whole report set for a run of 2,000 samples, against the floor.

The run: 100 cases x 2 arms x k = 10 against the scripted server (10 judged cases, a
judge and 20 human labels, so every notebook of a two-arm run applies), graded. The
report: `evalkit.telling.reports.report_run` with every applicable notebook (run_summary,
pass_at_k, skill_comparison, judge_calibration with PandaLM when ../shared/data is
there, power_planning), executed with papermill in parallel and rendered to HTML.

The floor: the same number of *empty* notebooks (a parameters cell and nothing else),
executed and rendered by the same code (`reports.run_notebooks`, the same lanes): the
cost of starting kernels, papermill and nbconvert that no report can avoid. Both are
measured twice: with one kernel per lane (the default) and with a fresh kernel per
notebook (papermill's default).

Lower bounds on the same machinery: the empty notebooks plus a cell importing
matplotlib.pyplot alone (with and without as many one-line figures as the report
shows); plus the imports every report notebook makes (matplotlib,
pandas, evalkit.numbers.stats with scipy and statsmodels); plus those imports and as many
one-line figures as the report shows. A report cannot cost less than what it must import.

Each is repeated and the fastest kept (the machine may be shared). Wall time and CPU
time (this process plus its kernels) are both recorded; target: report <= 1.5x floor,
under 60 s on 2 cores.

    .venv/bin/python benchmarks/bench_reports.py [--cases 100] [--k 10] [--repeat 3]

Writes `benchmarks/results/reports.json`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
import nbformat

from evalkit.telling import reports
from evalkit.conclusions.grading import grade_run
from evalkit.running.runner import run_suite
from evalkit.calls.serve import ScriptedServer

RESULTS = Path(__file__).resolve().parent / "results" / "reports.json"


def make_run(root: Path, n_cases: int, k: int) -> Path:
    """A graded two-arm run of n_cases x 2 x k samples made against the scripted server."""
    suite = root / "evals" / "bench"
    for sub in ("guidance", "judge"):
        (suite / sub).mkdir(parents=True, exist_ok=True)
    n_judged = max(1, n_cases // 10)
    cases, rules = [], [{"match": ["Give a score", "right"], "text": "SCORE: 5 REASON: right"},
                        {"match": "Give a score", "text": "SCORE: 2 REASON: wrong"}]
    for i in range(n_cases):
        cid = f"case-{i:03d}"
        if i < n_judged:
            cases.append({"id": cid, "input": f"Explain item {i:03d}", "expected": {"rubric": "Says right."},
                          "tags": ["judged", f"group-{i % 5}"]})
            rules.append({"match": f"item {i:03d}", "texts": ["right answer", "no idea"], "weights": [0.6, 0.4]})
            continue
        cases.append({"id": cid, "input": f"Question {i:03d}?", "expected": f"answer-{i:03d}",
                      "tags": ["golden" if i % 3 else "adversarial", f"group-{i % 5}"],
                      "set": "regression" if i % 4 == 0 else "capability",
                      "checks": [{"kind": "contains", "value": f"answer-{i:03d}", "case_fold": True}]})
        p = 0.3 + 0.6 * ((i * 37) % 100) / 100
        rules.append({"match": ["GUIDED", f"Question {i:03d}"], "texts": [f"answer-{i:03d}", "no"],
                      "weights": [min(0.98, p + 0.2), 1 - min(0.98, p + 0.2)]})
        rules.append({"match": f"Question {i:03d}", "texts": [f"answer-{i:03d}", "no"], "weights": [p, 1 - p]})
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (suite / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (suite / "guidance" / "skilled.md").write_text("GUIDED: answer exactly.\n")
    (suite / "judge" / "rubric-v1.md").write_text("5 right, 1 wrong.\n")
    (suite / "judge" / "prompt-v1.md").write_text("${rubric}\n${input}\n${expected}\n${output}\nGive a score.\n")
    os.environ.setdefault("EVALKIT_BENCH_KEY", "bench")
    with ScriptedServer({"rules": rules, "default": {"text": "unknown"}}) as srv:
        cfg = {"mode": "completion", "template": "prompt.txt",
               "generator": {"model": "gen", "base_url": srv.base_url, "api_key_env": "EVALKIT_BENCH_KEY"},
               "judge": {"model": "judge", "base_url": srv.base_url, "api_key_env": "EVALKIT_BENCH_KEY"},
               "temperature": 0.8, "seed": 3, "k": k, "concurrency": 32, "cost_cap_usd": 100.0,
               "max_tokens_in": 256, "max_tokens_out": 16, "price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4},
               "judge_price": {"in_per_mtok": 0.15, "out_per_mtok": 0.6},
               "gate": {"max_success_drop_points": 5, "max_cost_increase_pct": 20},
               "arms": [{"name": "baseline"}, {"name": "skilled", "guidance": "guidance/skilled.md"}]}
        (suite / "config.json").write_text(json.dumps(cfg))
        res = run_suite(suite, progress=False)
        grade_run(res.path)
    labels = [{"item": f"case-{i % n_judged:03d}/{arm}/{i // n_judged}", "score": 5 if i % 3 else 2, "rater": "r"}
              for arm in ("baseline", "skilled") for i in range(10)]
    (suite / "judge" / "human-sample.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    return Path(res.path)


def empty_notebooks(folder: Path, names: list[str]) -> Path:
    """One notebook per name holding only a parameters cell with the same parameters."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        src = nbformat.read(reports.notebooks_dir() / f"{name}.ipynb", as_version=4)
        first = next(c for c in src.cells if c.cell_type == "code")
        nb = nbformat.v4.new_notebook(metadata=src.metadata)
        cell = nbformat.v4.new_code_cell(first.source, metadata={"tags": ["parameters"]})
        nb.cells = [cell]
        nbformat.write(nb, folder / f"{name}.ipynb")
    return folder


IMPORTS = ("import matplotlib.pyplot as plt\nimport numpy as np\nimport pandas as pd\n\n"
           "from evalkit import nb, stats, verdicts\n\nnb.setup_plots()")
BLANK_FIGURE = "fig, ax = plt.subplots()\nax.plot([0, 1], [0, 1])\nplt.show()"


def bare_content_notebooks(folder: Path, names: list[str], imports: str, figures: dict[str, int] | None) -> Path:
    """The empty notebooks plus only what any report notebook must do: run `imports`
    (the libraries the notebooks use: matplotlib, pandas, evalkit.numbers.stats with scipy and
    statsmodels; or matplotlib alone) and, when `figures` is given, show that many
    one-line figures. Timing these bounds from below what the real report can cost on
    this machinery."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        src = nbformat.read(reports.notebooks_dir() / f"{name}.ipynb", as_version=4)
        first = next(c for c in src.cells if c.cell_type == "code")
        nb = nbformat.v4.new_notebook(metadata=src.metadata)
        nb.cells = [nbformat.v4.new_code_cell(first.source, metadata={"tags": ["parameters"]}),
                    nbformat.v4.new_code_cell(imports)]
        nb.cells += [nbformat.v4.new_code_cell(BLANK_FIGURE) for _ in range((figures or {}).get(name, 0))]
        nbformat.write(nb, folder / f"{name}.ipynb")
    return folder


def figures_per_notebook(report) -> dict[str, int]:
    """How many figures each executed notebook of a report shows."""
    counts = {}
    for nb in report.notebooks:
        executed = nbformat.read(nb.ipynb, as_version=4)
        counts[nb.name] = sum(1 for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", [])
                              if "image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {}))
    return counts


def cpu_seconds() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn) -> tuple[float, float]:
    c0, t0 = cpu_seconds(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, cpu_seconds() - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    _smoke.add(ap)
    args = ap.parse_args()
    results = _smoke.apply(args, RESULTS, cases=4, k=2, repeat=1)
    tmp = Path(tempfile.mkdtemp(prefix="bench-reports-"))
    try:
        t0 = time.perf_counter()
        run = make_run(tmp, args.cases, args.k)
        n_samples = sum(1 for _ in open(run / "results.jsonl"))
        print(f"run of {n_samples} samples made and graded in {time.perf_counter() - t0:.1f}s: {run}", flush=True)
        plans, _ = reports.plan_notebooks(run, tmp / "reports" / run.name)
        names = sorted(plans)
        if args.smoke:  # one notebook of the set, each way of running it: that the benchmark runs, not its figures
            names = ["run_summary"] if "run_summary" in names else names[:1]
        empty_dir = empty_notebooks(tmp / "empty", names)
        figures: dict[str, int] | None = None
        if not args.smoke:  # warm the OS file cache and matplotlib's font cache once, outside the timings
            figures = figures_per_notebook(reports.report_run(run, tmp / "warm", notebooks=names))
        # The lower bounds show as many figures as the report: counted on the warm-up run, or
        # with --smoke (no warm-up: its figures are no figures) on the first timed report.
        bounds: dict[str, Path] = {}
        # Both ways of running kernels: one kernel per lane (the default), and a fresh
        # kernel per notebook (papermill's default). Each report is held against the
        # floor run the same way.
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in (
            "report", "floor", "report_fresh", "floor_fresh", "matplotlib_only", "matplotlib_and_figures",
            "imports_only", "imports_and_figures")}
        for i in range(args.repeat):
            for reuse, suffix in ((True, ""), (False, "_fresh")):
                out = tmp / f"floor{suffix}-{i}"
                times["floor" + suffix].append(timed(lambda: reports.run_notebooks(
                    {n: plans[n] for n in names}, out, source_dir=empty_dir, reuse_kernels=reuse)))
                holder = {}
                times["report" + suffix].append(timed(lambda: holder.setdefault("r", reports.report_run(
                    run, tmp / f"rep{suffix}-{i}", notebooks=names, reuse_kernels=reuse))))
                bad = [nb.name for nb in holder["r"].notebooks if not nb.ok]
                if bad:
                    print(f"notebooks failed: {bad}", file=sys.stderr)
                    return 1
                if figures is None:
                    figures = figures_per_notebook(holder["r"])
            if not bounds:
                mpl = "import matplotlib.pyplot as plt"
                bounds = {"matplotlib_only": bare_content_notebooks(tmp / "mpl", names, mpl, None),
                          "matplotlib_and_figures": bare_content_notebooks(tmp / "mpl-plots", names, mpl, figures),
                          "imports_only": bare_content_notebooks(tmp / "imports", names, IMPORTS, None),
                          "imports_and_figures": bare_content_notebooks(tmp / "plots", names, IMPORTS, figures)}
            for key, src in bounds.items():
                out = tmp / f"{key}-{i}"
                times[key].append(timed(lambda: reports.run_notebooks({n: plans[n] for n in names}, out,
                                                                      source_dir=src)))
            print(f"repeat {i + 1}: " + "; ".join(f"{k} {v[-1][0]:.2f}s wall / {v[-1][1]:.2f}s CPU"
                                                   for k, v in times.items()), flush=True)
        best = {k: (min(t for t, _ in v), min(c for _, c in v)) for k, v in times.items()}
        rep_wall, rep_cpu = best["report"]
        floor_wall, floor_cpu = best["floor"]
        assert figures is not None
        result = {
            "benchmark": "reports", "samples": n_samples, "notebooks": names, "workers": os.cpu_count(),
            "report_wall_s": round(rep_wall, 3), "report_cpu_s": round(rep_cpu, 3),
            "floor_wall_s": round(floor_wall, 3), "floor_cpu_s": round(floor_cpu, 3),
            "ratio_wall": round(rep_wall / floor_wall, 3), "ratio_cpu": round(rep_cpu / floor_cpu, 3),
            "fresh_kernels": {
                "report_wall_s": round(best["report_fresh"][0], 3), "report_cpu_s": round(best["report_fresh"][1], 3),
                "floor_wall_s": round(best["floor_fresh"][0], 3), "floor_cpu_s": round(best["floor_fresh"][1], 3),
                "ratio_wall": round(best["report_fresh"][0] / best["floor_fresh"][0], 3),
                "ratio_cpu": round(best["report_fresh"][1] / best["floor_fresh"][1], 3)},
            "report_vs_fresh_kernel_floor_wall": round(rep_wall / best["floor_fresh"][0], 3),
            # What any report notebook must do, on the same machinery: import the
            # libraries, and draw as many (one-line) figures as the report draws.
            "figures": figures,
            "matplotlib_only_wall_s": round(best["matplotlib_only"][0], 3),
            "matplotlib_only_ratio_wall": round(best["matplotlib_only"][0] / floor_wall, 3),
            "matplotlib_and_figures_wall_s": round(best["matplotlib_and_figures"][0], 3),
            "matplotlib_and_figures_ratio_wall": round(best["matplotlib_and_figures"][0] / floor_wall, 3),
            "imports_only_wall_s": round(best["imports_only"][0], 3),
            "imports_only_ratio_wall": round(best["imports_only"][0] / floor_wall, 3),
            "imports_and_figures_wall_s": round(best["imports_and_figures"][0], 3),
            "imports_and_figures_ratio_wall": round(best["imports_and_figures"][0] / floor_wall, 3),
            "target_ratio": 1.5, "target_wall_s": 60,
            "all_runs": {k: [[round(a, 3), round(b, 3)] for a, b in v] for k, v in times.items()},
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                        "load_average_1m": round(os.getloadavg()[0], 2)},
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(json.dumps(result, indent=2) + "\n")
        print(f"report set for {n_samples} samples ({len(names)} notebooks): {rep_wall:.2f}s wall, {rep_cpu:.2f}s CPU")
        print(f"floor ({len(names)} empty notebooks): {floor_wall:.2f}s wall, {floor_cpu:.2f}s CPU")
        print(f"ratio: {rep_wall / floor_wall:.2f}x wall, {rep_cpu / floor_cpu:.2f}x CPU (target <= 1.5x, < 60 s)")
        fr = result["fresh_kernels"]
        print(f"fresh kernel per notebook: report {fr['report_wall_s']:.2f}s wall / {fr['report_cpu_s']:.2f}s CPU, "
              f"floor {fr['floor_wall_s']:.2f}s / {fr['floor_cpu_s']:.2f}s, ratio {fr['ratio_wall']:.2f}x wall; "
              f"default report vs that floor: {result['report_vs_fresh_kernel_floor_wall']:.2f}x wall")
        print(f"the same notebooks importing matplotlib.pyplot and nothing else: "
              f"{result['matplotlib_only_wall_s']:.2f}s wall ({result['matplotlib_only_ratio_wall']:.2f}x the floor); "
              f"matplotlib and {sum(figures.values())} one-line figures: {result['matplotlib_and_figures_wall_s']:.2f}s "
              f"({result['matplotlib_and_figures_ratio_wall']:.2f}x)")
        print(f"the same notebooks doing only the imports: {result['imports_only_wall_s']:.2f}s wall "
              f"({result['imports_only_ratio_wall']:.2f}x the floor); imports and {sum(figures.values())} one-line "
              f"figures: {result['imports_and_figures_wall_s']:.2f}s ({result['imports_and_figures_ratio_wall']:.2f}x)")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
