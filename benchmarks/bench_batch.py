"""100,000 samples end to end: `evalkit run --batch` against the scripted server's Batch
API, the same run online, then grading and the report set of that run.

The suite: N/20 cases x 2 arms x k = 10 (completion mode, a `contains` check each),
written to a temporary folder. The scripted server runs in a process of its own with
OpenAI's limits (50,000 requests and 200 MB a batch file), so a 100,000-request run is
two batches; every line is answered by the same rules as an online call. Each measured
step runs in a fresh child process, so its peak memory (the child's maximum resident set,
from `wait4`) is its own:

* `batch` at each size (default 10,000 and 100,000; cases grow with it, k = 10): `run_suite(batch=BatchOptions(...))`,
  requests streamed to the batch files, results streamed back; and (twice each, in turn) with the
  suite of the smallest size and k ten times larger (the requests grow, the cases do
  not): that peak against the smallest one shows the memory flat in the number of
  requests, while the first pair also carries ten times the cases (their prompts);
* `online` at each size: the same run made online (concurrency 32);
* every key is in `results.jsonl` exactly once in both, and the batch run's outputs equal
  the online run's key for key (the same seeds, the same scripted answers);
* `grade` of the 100,000-sample batch run (deterministic checks), and `report`: every
  notebook that applies (`reports.report_run`), its wall time and the size of the HTML.

    .venv/bin/python benchmarks/bench_batch.py [--sizes 10000,100000] [--sample-files] [--smoke]

Writes `benchmarks/results/batch.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _smoke

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "batch.json"
K = 10

_SERVER = """
import sys
from evalkit.calls.serve import ScriptedServer
cities = ["Paris", "Lyon", "Nice"]
script = {"rules": [{"match": ["capital", "one word"], "texts": cities, "weights": [0.8, 0.15, 0.05]},
                    {"match": "capital", "texts": cities, "weights": [0.5, 0.3, 0.2]}],
          "default": {"text": "unknown"}}
with ScriptedServer(script) as srv:
    print(srv.base_url, flush=True)
    sys.stdin.read()
"""


def write_suite(root: Path, n_samples: int, k: int = K) -> Path:
    n_cases = n_samples // (2 * k)
    root.mkdir(parents=True)
    config = {
        "mode": "completion",
        "template": "prompt.txt",
        "generator": {"model": "scripted", "api_key_env": "EVALKIT_BENCH_KEY"},
        "temperature": 0.8,
        "seed": 1234,
        "k": k,
        "concurrency": 32,
        "cost_cap_usd": 1000.0,
        "max_tokens_in": 512,
        "max_tokens_out": 16,
        "price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4},
        "batch_price": {"in_per_mtok": 0.05, "out_per_mtok": 0.2},
        "judge_price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4},
        "arms": [{"name": "baseline"}, {"name": "guided", "guidance": "guided.md"}],
        "stop": ["\n"],
    }
    (root / "config.json").write_text(json.dumps(config))
    (root / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (root / "guided.md").write_text("Answer with one word.\n")
    with open(root / "cases.jsonl", "w") as fh:
        for i in range(n_cases):
            tags = ["bench", "golden" if i % 10 == 0 else f"group-{i % 7}"]
            case = {
                "id": f"case-{i:05d}",
                "input": f"What is the capital of country number {i}?",
                "expected": "Paris",
                "tags": tags,
            }
            fh.write(json.dumps(case) + "\n")
    return root


# -- the measured steps, each in a child process ----------------------------------------


def child(step: str, args: list[str]) -> dict:
    t0 = time.perf_counter()
    out: dict = {}
    if step in ("batch", "online"):
        from evalkit.running.batch import BatchOptions
        from evalkit.running.runner import run_suite

        suite, runs, url, sample_files = args[0], args[1], args[2], args[3] == "1"
        res = run_suite(
            suite,
            runs_dir=runs,
            base_url=url,
            progress=False,
            sample_files=sample_files,
            batch=BatchOptions(poll_s=0.5) if step == "batch" else None,
        )
        out = {
            "complete": res.complete,
            "samples": res.samples_ran,
            "run": str(res.path),
            "spend_usd": round(res.spend_usd, 6),
        }
    elif step == "grade":
        from evalkit.conclusions.grading import grade_run

        g = grade_run(args[0])
        out = {"graded": g.summary.n_graded, "sample_pass_rate": g.summary.overall.sample_pass_rate}
    elif step == "report":
        from evalkit.telling.reports import report_run

        rep = report_run(args[0], args[1], notebooks=args[2:] or None)  # named notebooks only (--smoke)
        sizes = {p.name: p.stat().st_size for p in Path(rep.out_dir).glob("*.html")}
        out = {
            "ok": rep.ok,
            "notebooks": sorted(n.name for n in rep.notebooks),
            "skipped": rep.skipped,
            "html_bytes": sizes,
            "html_total_bytes": sum(sizes.values()),
            "index_bytes": Path(rep.index).stat().st_size,
            "per_notebook_s": {n.name: round(getattr(n, "seconds", 0.0), 3) for n in rep.notebooks},
        }
    elif step == "check":  # every key once; the batch run's outputs against the online run's
        ok, count, outputs = keys_once(Path(args[0]))
        out = {"every_key_once": ok, "keys": count}
        if len(args) > 1:
            out["equals"] = outputs == keys_once(Path(args[1]))[2]
    elif step == "breakdown":  # where the report set's time goes, piece by piece: as bench_report_scale.py says it
        from bench_report_scale import child as report_scale_step

        out = report_scale_step("breakdown", args)
    out["wall_s"] = round(time.perf_counter() - t0, 3)
    return out


def measure(step: str, *args: str) -> dict:
    """Run a step in a fresh process; its result, wall time and peak resident memory."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", step, *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{step} failed (exit {proc.returncode})")
    result = json.loads(out.strip().splitlines()[-1])
    result["process_wall_s"] = round(time.perf_counter() - t0, 3)
    result["peak_rss_mib"] = round(usage.ru_maxrss / 1024, 1)  # KiB on Linux
    print(f"{step} {' '.join(a for a in args[:1])}: {json.dumps(result)[:300]}", flush=True)
    return result


def check(*runs: str) -> dict:
    """The `check` step in a child process: the parent stays small, since a child's peak
    memory counts the parent's pages at the moment it is forked."""
    proc = subprocess.run(
        [sys.executable, __file__, "--child", "check", *runs], capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def keys_once(run: Path) -> tuple[bool, int, dict]:
    """Whether every key of the run is in results.jsonl exactly once; the outputs by key."""
    meta = json.loads((run / "config.json").read_text())
    planned = {(c, a, i) for c in meta["cases"] for a in meta["arms"] for i in range(meta["k"])}
    outputs: dict = {}
    dupes = 0
    with open(run / "results.jsonl", "rb") as fh:
        for line in fh:
            r = json.loads(line)
            key = (r["case_id"], r["arm"], r["index"])
            dupes += key in outputs
            outputs[key] = (r["output"], r["seed"], r["request_hash"])
    return dupes == 0 and set(outputs) == planned, len(outputs), outputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--sample-files", action="store_true", help="also write samples/<case>/<arm>/sample-<n>.txt")
    ap.add_argument("--no-online", action="store_true")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    _smoke.add(ap)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1:])), flush=True)
        return
    _smoke.apply(args, RESULTS, sizes="200")

    sizes = [int(x) for x in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="evalkit-bench-batch-"))
    server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    load_before = round(os.getloadavg()[0], 2)
    result: dict = {
        "benchmark": "100,000 samples: run --batch vs online, then grade and report",
        "command": "python benchmarks/bench_batch.py" + (" --sample-files" if args.sample_files else ""),
        "sample_files": args.sample_files,
        "sizes": sizes,
        "runs": {},
    }
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url.startswith("http"):
            raise SystemExit("the scripted server did not start")
        sf = "1" if args.sample_files else "0"
        for n in sizes:
            suite = write_suite(work / f"suite-{n}", n)
            entry: dict = {}
            for mode in ("batch", "online") if not args.no_online else ("batch",):
                r = measure(mode, str(suite), str(work / f"runs-{mode}-{n}"), url, sf)
                r.update({k: v for k, v in check(r["run"]).items() if k in ("every_key_once", "keys")})
                entry[mode] = r
            if "online" in entry:
                entry["batch_equals_online"] = check(entry["batch"]["run"], entry["online"]["run"])["equals"]
            batch_run = Path(entry["batch"]["run"])
            log = json.loads((batch_run / "batches.json").read_text())["batches"]
            entry["batch"]["batches"] = [{k: e.get(k) for k in ("name", "lines", "bytes", "status")} for e in log]
            result["runs"][str(n)] = entry
        # The same suite as the smallest size, only k larger: the requests grow, the cases do
        # not. Twice each, in turn: one peak can carry the noise of a shared machine.
        lo = min(sizes)
        n, k = max(sizes), K * max(sizes) // lo
        same: dict = {
            "cases": lo // (2 * K),
            "k": [K, k],
            "requests": [lo, n],
            "peak_rss_mib": {str(lo): [], str(n): []},
        }
        for rep in range(1 if args.smoke else 2):
            # one pair of sizes (with one size, --sizes 10000, both are the same run: made once)
            for size, kk in dict.fromkeys(((lo, K), (n, k))):
                suite = write_suite(work / f"suite-{size}-k{kk}-{rep}", size, k=kk)
                r = measure("batch", str(suite), str(work / f"runs-batch-{size}-k{kk}-{rep}"), url, sf)
                assert check(r["run"])["every_key_once"], "a key is missing or twice"
                same["peak_rss_mib"][str(size)].append(r["peak_rss_mib"])
                same.setdefault("wall_s", {}).setdefault(str(size), []).append(r["wall_s"])
        result["same_cases_larger_k"] = same
        biggest = str(max(sizes))
        run = Path(result["runs"][biggest]["batch"]["run"])
        result["grade"] = measure("grade", str(run))
        # --smoke: one notebook of the set (bench_reports.py's smoke does the same): that it runs
        result["report"] = measure("report", str(run), str(work / "reports"), *(["run_summary"] if args.smoke else []))
        if not args.smoke:  # bench_report_scale.py's own smoke runs the breakdown
            result["report_breakdown"] = measure("breakdown", str(run))
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    lo, hi = str(min(sizes)), str(max(sizes))
    b = result["runs"]
    result["peak_rss_ratio_batch"] = round(b[hi]["batch"]["peak_rss_mib"] / b[lo]["batch"]["peak_rss_mib"], 3)
    same = result["same_cases_larger_k"]
    same["peak_rss_ratio_of_medians"] = round(
        statistics.median(same["peak_rss_mib"][hi]) / statistics.median(same["peak_rss_mib"][lo]), 3
    )
    if "online" in b[hi]:
        result["peak_rss_ratio_online"] = round(b[hi]["online"]["peak_rss_mib"] / b[lo]["online"]["peak_rss_mib"], 3)
    result["report_target_s"] = 15.0
    result["report_meets_target"] = result["report"]["process_wall_s"] <= 15.0
    result["machine"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_average_1m": {"start": load_before, "end": round(os.getloadavg()[0], 2)},
    }
    result["measured"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
