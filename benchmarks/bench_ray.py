"""Command-unit samples as Ray tasks (evalkit.running.executors) on 1, 2 and 3 local Ray nodes
of one CPU each (`ray.cluster_utils.Cluster`), against the scripted server, and the
same suite run locally (no Ray) for the overhead per sample.

Each sample's program sleeps `--sleep` s and makes 2 model calls through the metering
proxy (the standard library's HTTP client: no start-up of its own to speak of). For
each node count N: wall time, `speedup` (T1 / TN), `efficiency` (speedup / N: 1.0 is
linear; the issue's target is >= 0.8 at 3 nodes), the driver's CPU per sample (this
process's user + system time, which is the driver: Ray's nodes are other processes),
and `overhead_ms_per_sample` of the one-node Ray run over the local run at
concurrency 1 (the same one-at-a-time schedule). The driver joins each cluster before
the run is timed (`join_s`, about 2 s, once per run, is shown apart).

    .venv/bin/python benchmarks/bench_ray.py [--samples 400] [--sleep 0.5] [--nodes 1,2,3]

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
    return {"wall_s": round(wall, 3), "driver_cpu_ms_per_sample": round(cpu * 1000 / res.samples_ran, 3),
            "load_avg_1m_after": round(os.getloadavg()[0], 2)}


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
            print(f"bench_ray: {nodes}-node cluster did not start ({exc}); try {attempt + 2} of {TRIES}", file=sys.stderr)
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
    _smoke.add(ap)
    args = ap.parse_args()
    # --smoke: one one-node cluster (starting a cluster is most of the smoke run's time); the
    # speed-up and efficiency figures are still computed, on that one node count
    out = _smoke.apply(args, HERE / "results" / "ray.json", samples=4, sleep=0.05, nodes="1")
    import ray  # Ray only here: the benchmark of the Ray executor

    os.environ.setdefault("EVALKIT_BENCH_KEY", "sk-bench")
    node_counts = [int(n) for n in args.nodes.split(",")]
    figures: dict[str, object] = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-ray-") as d, ScriptedServer(
        {"default": {"text": "ok"}}
    ) as srv:
        local = timed(write_suite(Path(d) / "local", args.samples, args.sleep, 1), Path(d) / "runs-local",
                      srv.base_url, None)
        per_nodes: dict[int, dict[str, float]] = {}
        for n in node_counts:
            cluster = start_cluster(n)
            try:
                suite = write_suite(Path(d) / f"ray{n}", args.samples, args.sleep, n)
                t0 = time.perf_counter()
                # joined here, so the run's wall time is its samples' (the run reuses the connection)
                ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
                join_s = time.perf_counter() - t0
                per_nodes[n] = timed(suite, Path(d) / f"runs-ray{n}", srv.base_url,
                                     Executor(kind="ray", address=cluster.address))
                per_nodes[n]["join_s"] = round(join_s, 3)
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
            "local_concurrency_1": local,
            "ray": {str(n): f for n, f in per_nodes.items()},
        }
        if 1 in per_nodes:
            figures["overhead_ms_per_sample"] = round(
                (per_nodes[1]["wall_s"] - local["wall_s"]) * 1000 / args.samples, 3
            )
    figures["machine"] = {"cpus": os.cpu_count(), "load_avg_before": load_before, "load_avg": os.getloadavg(), "python": platform.python_version(),
                          "smoke": bool(args.smoke)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    json.dump(figures, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
