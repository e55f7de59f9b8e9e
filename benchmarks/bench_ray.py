"""Command-unit samples as Ray tasks (evalkit.running.executors) on 1, 2 and 3 local Ray nodes
of one CPU each (`ray.cluster_utils.Cluster`), against the scripted server, and the
overhead per sample of a one-node Ray run over a local run, measured in pairs.

Each sample's program sleeps `--sleep` s and makes 2 model calls through the metering
proxy (the standard library's HTTP client: no start-up of its own to speak of). For
each node count N, one run of `--samples` samples at concurrency N: wall time,
`speedup` (T1 / TN), `efficiency` (speedup / N: 1.0 is linear; the issue's target is
>= 0.8 at 3 nodes) and the driver's CPU per sample (this process's user + system
time, which is the driver: Ray's nodes and the sample programs are other processes).
The driver joins each cluster, and runs one untimed sample on it (Ray starts a worker
per node for a new job), before the run is timed (`join_s`, once per cluster).

The overhead per sample: on the one-node cluster, `--pairs` pairs of blocks of
`--block` samples at concurrency 1, a local run (no Ray) and a Ray run, one right
after the other, the order swapped every pair (local first, then Ray first), so a
load that drifts over the minutes of the benchmark moves both runs of a pair alike
and cancels in the pair's difference. `overhead_ms_per_sample` is the median of the
pairs' differences (Ray minus local, wall time per sample); each pair is kept, with
both runs' driver CPU per sample (and their medians). Each block is a run of its own,
so a run's fixed cost (its folder, its proxy) is in both runs of a pair.

    .venv/bin/python benchmarks/bench_ray.py [--samples 400] [--sleep 0.5] [--nodes 1,2,3] [--pairs 5] [--block 40]

Writes `benchmarks/results/ray.json`. Needs as many free cores as nodes (plus the
driver's and the server's): on a shared 2-core machine the figures measure the
machine's load, not evalkit, so run the full size on a machine with >= 4 free cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _smoke

from evalkit.calls import sandbox
from evalkit.foundations.records import Executor
from evalkit.running.runner import run_suite
from evalkit.calls.serve import ScriptedServer

HERE = Path(__file__).resolve().parent
TRIES = 6  # starts of a cluster before the benchmark gives up

PROGRAM = """
import json, os, sys, time, urllib.request
case = json.load(sys.stdin)
time.sleep(float(sys.argv[1]))
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
text = ""
for turn in range(2):
    body = {"model": case["model"], "prompt": f"Question: {case['input']} turn {turn}", "max_tokens": 8}
    req = urllib.request.Request(base + "/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        text = json.load(resp)["choices"][0]["text"]
print(text)
"""


def write_suite(root: Path, samples: int, sleep_s: float, concurrency: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.py").write_text(PROGRAM)
    isolation = "sandbox" if sandbox.probe() is None else "none"
    config = {
        "mode": "chat", "generator": {"model": "scripted", "api_key_env": "EVALKIT_BENCH_KEY"},
        "temperature": 0.0, "seed": 7, "k": 1, "concurrency": concurrency, "cost_cap_usd": 100.0,
        "max_tokens_in": 2000, "max_tokens_out": 16,
        "price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4}, "judge_price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4},
        "max_attempts": 2, "arms": [{"name": "baseline"}],
        "unit": {"kind": "command", "argv": ["{python}", "agent.py", f"{sleep_s:g}"], "timeout_s": 120,
                 "isolation": isolation, "resources": {"num_cpus": 1}},
    }
    (root / "config.json").write_text(json.dumps(config))
    cases = [{"id": f"c{i}", "input": f"q{i}", "tags": ["golden"], "checks": [{"kind": "contains", "value": "x"}]}
             for i in range(samples)]
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return root


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(suite: Path, runs: Path, base_url: str, executor: Executor | None) -> dict[str, Any]:
    c0, t0 = cpu_s(), time.perf_counter()
    res = run_suite(suite, runs_dir=runs, base_url=base_url, progress=False, cache=False, executor=executor)
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    if not res.complete:
        raise SystemExit(f"bench_ray: a run was INCOMPLETE ({res.reason})")
    return {"wall_s": round(wall, 3), "wall_ms_per_sample": round(wall * 1000 / res.samples_ran, 3),
            "driver_cpu_ms_per_sample": round(cpu * 1000 / res.samples_ran, 3),
            "load_avg_1m_after": round(os.getloadavg()[0], 2)}


def joined(cluster: Any, suite: Path, runs: Path, base_url: str) -> float:
    """Join `cluster` (the runs then reuse the connection) and run one untimed sample on
    it, so that what is timed after is the samples' (Ray starts a worker per node for a
    new job); seconds that took."""
    import ray  # Ray only here: the benchmark of the Ray executor

    t0 = time.perf_counter()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    timed(suite, runs, base_url, Executor(kind="ray", address=cluster.address))
    return round(time.perf_counter() - t0, 3)


def paired(d: Path, base_url: str, cluster: Any, pairs: int, block: int, sleep_s: float) -> dict[str, Any]:
    """`pairs` pairs of runs of `block` samples at concurrency 1, local and on the joined
    one-node `cluster`, the order swapped every pair; the pairs and their medians."""
    local_suite = write_suite(d / "pair-local", block, sleep_s, 1)
    ray_suite = write_suite(d / "pair-ray", block, sleep_s, 1)
    executor = Executor(kind="ray", address=cluster.address)
    timed(write_suite(d / "warm-local", 1, sleep_s, 1), d / "runs-warm-local", base_url, None)  # untimed
    rows: list[dict[str, Any]] = []
    for i in range(pairs):
        order = ("local", "ray") if i % 2 == 0 else ("ray", "local")
        got: dict[str, dict[str, Any]] = {}
        for kind in order:
            suite, ex = (local_suite, None) if kind == "local" else (ray_suite, executor)
            got[kind] = timed(suite, d / f"runs-pair{i}-{kind}", base_url, ex)
        rows.append({
            "first": order[0],
            "local": got["local"],
            "ray": got["ray"],
            "diff_ms_per_sample": round(got["ray"]["wall_ms_per_sample"] - got["local"]["wall_ms_per_sample"], 3),
        })

    def median(kind: str, name: str) -> float:
        return round(statistics.median(r[kind][name] for r in rows), 3)

    return {
        "block_samples": block,
        "median_diff_ms_per_sample": round(statistics.median(r["diff_ms_per_sample"] for r in rows), 3),
        "median_local_driver_cpu_ms_per_sample": median("local", "driver_cpu_ms_per_sample"),
        "median_ray_driver_cpu_ms_per_sample": median("ray", "driver_cpu_ms_per_sample"),
        "pairs": rows,
    }


def start_cluster(nodes: int) -> Any:
    """`nodes` local Ray nodes of one CPU each. A node start that times out (Ray waits 30 s
    for a raylet, which a loaded machine can miss) is tried again, up to `TRIES` times."""
    from ray.cluster_utils import Cluster

    store = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    import psutil  # a dependency of Ray's

    for attempt in range(TRIES):
        cluster = None
        before = {c.pid for c in psutil.Process().children(recursive=True)}
        try:
            cluster = Cluster(initialize_head=True, head_node_args={**store, "include_dashboard": False})
            for _ in range(nodes - 1):
                cluster.add_node(**store)
            cluster.wait_for_nodes()
            return cluster
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for a node that did not start
            again = f"; try {attempt + 2} of {TRIES}" if attempt + 1 < TRIES else ""
            print(f"bench_ray: {nodes}-node cluster did not start ({exc}){again}", file=sys.stderr)
            if cluster is not None:
                cluster.shutdown()
            for child in psutil.Process().children(recursive=True):  # what the failed start left running
                if child.pid not in before:
                    child.kill()
    raise SystemExit(f"bench_ray: a {nodes}-node cluster did not start in {TRIES} tries")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--sleep", type=float, default=0.5)
    ap.add_argument("--nodes", default="1,2,3")
    ap.add_argument("--pairs", type=int, default=5, help="pairs of local and one-node Ray runs for the overhead")
    ap.add_argument("--block", type=int, default=40, help="samples in each run of a pair")
    _smoke.add(ap)
    args = ap.parse_args()
    # --smoke: one one-node cluster (starting a cluster is most of the smoke run's time) and two
    # pairs of one-sample runs; the speed-up and efficiency figures are still computed, on that one node count
    out = _smoke.apply(args, HERE / "results" / "ray.json", samples=2, sleep=0.05, nodes="1", pairs=2, block=1)
    import ray  # Ray only here: the benchmark of the Ray executor

    os.environ.setdefault("EVALKIT_BENCH_KEY", "sk-bench")
    node_counts = [int(n) for n in args.nodes.split(",")]
    figures: dict[str, object] = {}
    load_before = os.getloadavg()
    overhead: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-ray-") as d, ScriptedServer(
        {"default": {"text": "ok"}}
    ) as srv:
        per_nodes: dict[int, dict[str, float]] = {}
        for n in node_counts:
            cluster = start_cluster(n)
            try:
                join_s = joined(cluster, write_suite(Path(d) / f"warm{n}", 1, args.sleep, 1), Path(d) / f"runs-warm{n}",
                                srv.base_url)
                if n == 1 and args.pairs > 0:  # the overhead pairs, on the one-node cluster joined now
                    overhead = paired(Path(d), srv.base_url, cluster, args.pairs, args.block, args.sleep)
                suite = write_suite(Path(d) / f"ray{n}", args.samples, args.sleep, n)
                per_nodes[n] = timed(suite, Path(d) / f"runs-ray{n}", srv.base_url,
                                     Executor(kind="ray", address=cluster.address))
                per_nodes[n]["join_s"] = join_s
            finally:
                ray.shutdown()
                cluster.shutdown()
        first = per_nodes[node_counts[0]]["wall_s"] * node_counts[0]
        for n, f in per_nodes.items():
            speedup = first / f["wall_s"]
            f.update(speedup=round(speedup, 3), efficiency=round(speedup / n, 3))
        figures = {
            "samples": args.samples,
            "sleep_s": args.sleep,
            "calls_per_sample": 2,
            "ray": {str(n): f for n, f in per_nodes.items()},
        }
        if overhead is not None:
            figures["overhead_ms_per_sample"] = overhead["median_diff_ms_per_sample"]
            figures["overhead_pairs"] = overhead
    figures["machine"] = {"cpus": os.cpu_count(), "load_avg_before": load_before, "load_avg": os.getloadavg(),
                          "python": platform.python_version(), "smoke": bool(args.smoke)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    json.dump(figures, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
