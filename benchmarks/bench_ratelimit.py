"""A provider's steady rate limit, used to the full: evalkit beside inspect-ai.

The server is evalkit's scripted server in its rate-limit mode (`rate_limit` in the
script, evalkit.calls.serve.RateLimit): 600 requests/min and 200,000 tokens/min, enforced as
providers do: a bucket of one second's worth that refills continuously, every refused
request counted against the limit too, 429 with Retry-After, and OpenAI's
`x-ratelimit-*` headers on every answer. Both sides run 1,800 single-call samples (3
minutes at the limit) at concurrency 32:

* evalkit: `run_suite` on a completion suite (k 10, 90 cases x 2 arms);
* inspect-ai: `inspect_ai.eval` of the same prompts through its `openai-api` provider
  pointed at the loopback server (`max_connections` 32), in its own process, stopped
  after `--cap-s` seconds when it has not finished.

A third side, `random` (issue 44): no limit at all, but an overloaded provider that
refuses 10% of requests at random with `Retry-After: 0.2` (the scripted server's `429`
fault, no `x-ratelimit-*` headers): 400 samples at concurrency 16, run clean and then
under the refusals, each on a fresh server; the figure is the ratio of the two wall
times (target <= 1.5: a random refusal costs its own request a retry, not the run its
pace), with the refusals the server sent and the samples lost.

Measured on the server (the tool's own bookkeeping is not trusted): requests admitted
and refused, and the achieved throughput as a fraction of the limit: admitted requests
over the span from the server's first request to its last admitted one, divided by 10
per second (each tool's start-up is left out alike); lost samples: planned samples
without a result at the end.

    .venv/bin/python benchmarks/bench_ratelimit.py            # 1,800 samples a side (3+ minutes each)
    .venv/bin/python benchmarks/bench_ratelimit.py --smoke    # 40 samples a side, to prove it runs
    .venv/bin/python benchmarks/bench_ratelimit.py --sides random   # random refusals only

Sides not run keep their figures from the results file (each side says when it was
measured).

`--time-scale S` runs the same limit on a clock 1/S times faster: the rates divided by S,
the burst times S (so the bucket holds as many requests), every Retry-After S times as
long. `--smoke` uses 0.1 (6,000 requests/min with a 0.1 s bucket of 10 requests): each side
still meets the limit and its 429s, at a tenth of the wait; inspect-ai's own backoff (3 s
and up, whatever Retry-After says) is not the server's to scale, but the faster refill
admits its first retries.

Writes `benchmarks/results/ratelimit.json` (with --smoke, a file in the smoke folder).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import _smoke  # benchmarks/_smoke.py: --smoke, the smallest size

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from conftest import write_engine_suite  # noqa: E402

from evalkit.running.runner import run_suite  # noqa: E402
from evalkit.runfolder.runs import iter_jsonl  # noqa: E402
from evalkit.calls.serve import ScriptedServer  # noqa: E402

RPM, TPM, BURST_S, CONCURRENCY, K = 600, 200_000, 1.0, 32, 10
RANDOM = {"samples": 400, "concurrency": 16, "rate": 0.10, "retry_after": 0.2, "target_ratio": 1.5}


def limit(scale: float = 1.0) -> dict:
    """The provider's limit on a clock 1/scale times faster (`--time-scale`): per-minute
    rates divided by `scale`, the burst times `scale`, so the bucket holds as much."""
    return {"requests_per_min": RPM / scale, "tokens_per_min": TPM / scale, "burst_s": BURST_S * scale,
            "count_refused": True}


def script(scale: float = 1.0) -> dict:
    return {"default": {"text": "Paris"}, "rate_limit": limit(scale)}
_INSPECT = textwrap.dedent(
    """
    import sys
    from inspect_ai import Task, eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate
    n, url, logs = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    ds = MemoryDataset([Sample(input=f"Q: What is the capital of country number {i}?\\nA:", target="Paris",
                               id=f"s{i}") for i in range(n)])
    task = Task(dataset=ds, solver=generate(), scorer=match())
    log = eval(task, model="openai-api/scripted/scripted", model_base_url=url, max_connections=32,
               max_tokens=16, log_dir=logs, display="none", fail_on_error=False)[0]
    done = sum(1 for s in (log.samples or []) if not s.error)
    print("INSPECT", log.status, done, flush=True)
    """
)


def _server_figures(srv: ScriptedServer, wall: float) -> dict:
    """The server's count, and the throughput from its first request to its last
    admitted one (a tool's start-up is not the limit's to use) as a fraction of the limit."""
    rl = srv.rate_limit
    assert rl is not None and rl.requests is not None
    span = (rl.last_admitted_at or 0.0) - (rl.first_at or 0.0)
    return {
        "admitted": rl.admitted,
        "refused": rl.refused,
        "wall_s": round(wall, 2),
        "served_span_s": round(span, 2),
        "fraction_of_limit": round(rl.admitted / (span * rl.requests.rate), 3) if span > 0 else None,
    }


def _random_run(work: Path, samples: int, faults: list[dict]) -> dict:
    """One run of `samples` at `RANDOM`'s concurrency on a fresh scripted server with
    `faults`: wall time, the server's 429s, samples lost."""
    n_cases = max(1, samples // (2 * K))
    cases = [{"id": f"case-{i:04d}", "input": f"What is the capital of country number {i}?", "expected": "Paris",
              "tags": ["b"]} for i in range(n_cases)]
    suite = write_engine_suite(work / "suite", cases, k=K, concurrency=RANDOM["concurrency"], cost_cap_usd=100.0,
                               max_attempts=6, max_tokens_out=16)
    with ScriptedServer({"default": {"text": "Paris"}, "seed": 11, "faults": faults}) as srv:
        t0 = time.perf_counter()
        res = run_suite(suite, runs_dir=work / "runs", base_url=srv.base_url, progress=False)
        wall = time.perf_counter() - t0
        stats = srv.stats
    keys = {(r["case_id"], r["arm"], r["index"]) for r in iter_jsonl(Path(res.path) / "results.jsonl")}
    return {"wall_s": round(wall, 2), "requests": stats["requests"], "refused_429": stats["faults"]["429"],
            "planned": n_cases * 2 * K, "lost": n_cases * 2 * K - len(keys), "complete": res.complete,
            "reason": res.reason}


def random_side(work: Path, samples: int, scale: float = 1.0) -> dict:
    """`RANDOM`: the same samples clean, then under random 429s (Retry-After x `scale`)."""
    for name in ("warm-up", "clean", "refused"):
        (work / name).mkdir()
    _random_run(work / "warm-up", 40, [])  # the imports and first-run costs, paid by neither side
    clean = _random_run(work / "clean", samples, [])
    fault = {"kind": "429", "rate": RANDOM["rate"], "retry_after": RANDOM["retry_after"] * scale}
    refused = _random_run(work / "refused", samples, [fault])
    ratio = refused["wall_s"] / clean["wall_s"] if clean["wall_s"] > 0 else None
    return {"fault": fault, "concurrency": RANDOM["concurrency"], "clean": clean, "random_429": refused,
            "wall_ratio": None if ratio is None else round(ratio, 3), "target_ratio": RANDOM["target_ratio"],
            "meets_target": ratio is not None and ratio <= RANDOM["target_ratio"] and refused["lost"] == 0}


def evalkit_side(samples: int, work: Path, scale: float = 1.0) -> dict:
    n_cases = samples // (2 * K)
    cases = [
        {"id": f"case-{i:04d}", "input": f"What is the capital of country number {i}?", "expected": "Paris", "tags": ["b"]}
        for i in range(n_cases)
    ]
    suite = write_engine_suite(
        work / "suite", cases, k=K, concurrency=CONCURRENCY, cost_cap_usd=100.0, max_attempts=6, max_tokens_out=16
    )
    with ScriptedServer(script(scale)) as srv:
        t0 = time.perf_counter()
        res = run_suite(suite, runs_dir=work / "runs", base_url=srv.base_url, progress=False)
        wall = time.perf_counter() - t0
        fig = _server_figures(srv, wall)
    results = list(iter_jsonl(Path(res.path) / "results.jsonl"))
    fig.update(
        planned=n_cases * 2 * K,
        results=len(results),
        lost=n_cases * 2 * K - len({(r["case_id"], r["arm"], r["index"]) for r in results}),
        complete=res.complete,
    )
    return fig


def inspect_side(samples: int, work: Path, cap_s: float, scale: float = 1.0) -> dict:
    with ScriptedServer(script(scale)) as srv:
        env = {**os.environ, "SCRIPTED_API_KEY": "bench", "INSPECT_LOG_DIR": str(work / "logs")}
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", _INSPECT, str(samples), srv.base_url, str(work / "logs")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            out, _ = proc.communicate(timeout=cap_s)
            exited = True
        except subprocess.TimeoutExpired:  # killed: what the server counted stands
            proc.kill()
            out, _ = proc.communicate()
            exited = False
        wall = time.perf_counter() - t0
        fig = _server_figures(srv, wall)
    line = next((ln for ln in out.splitlines() if ln.startswith("INSPECT ")), None)
    done = int(line.split()[2]) if line else None
    fig.update(
        planned=samples,
        results=done,
        lost=None if done is None else samples - done,
        exited_within_cap=exited,  # the process ended by itself within --cap-s (after writing its log)
        status=line.split()[1] if line else f"stopped after {cap_s:g} s" if not exited else out[-400:],
    )
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1800)
    ap.add_argument("--cap-s", type=float, default=None, help="stop inspect-ai after this long (default 2x the ideal)")
    ap.add_argument("--sides", default="evalkit,inspect,random")
    ap.add_argument("--random-samples", type=int, default=RANDOM["samples"])
    ap.add_argument("--time-scale", type=float, default=1.0,
                    help="the limit on a clock 1/S times faster: rates / S, burst x S (--smoke: 0.1)")
    _smoke.add(ap)
    args = ap.parse_args()
    # --smoke: 40 a side (2 cases x 2 arms x k 10), on a clock ten times faster: the first wave (32 at once)
    # overruns the bucket of 10 requests, so both sides still meet 429s
    dest = _smoke.apply(args, HERE / "results" / "ratelimit.json", samples=40, time_scale=0.1, random_samples=40)
    samples, scale = args.samples, args.time_scale
    cap = args.cap_s or 120.0 + 2.0 * samples / (RPM / scale / 60.0)
    lim = limit(scale)
    out: dict = {
        "limit": {"requests_per_min": lim["requests_per_min"], "tokens_per_min": lim["tokens_per_min"],
                  "refused_requests_count": True, "burst_s": lim["burst_s"]},
        "time_scale": scale,
        "samples_per_side": samples,
        "concurrency": CONCURRENCY,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}",
        "command": "benchmarks/bench_ratelimit.py" + (" --smoke" if args.smoke else "")
        + (f" --time-scale {scale:g}" if scale != 1.0 and not args.smoke else ""),
    }
    kept = json.loads(dest.read_text()) if dest.is_file() and not args.smoke else {}
    out.update({k: kept[k] for k in ("evalkit", "inspect_ai", "random", "note") if k in kept})
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        if "random" in args.sides:
            (work / "r").mkdir()
            out["random"] = {**random_side(work / "r", args.random_samples, scale), "measured": stamp,
                             "load_average_1m": round(os.getloadavg()[0], 2)}
            print("random", json.dumps(out["random"]), flush=True)
        if "evalkit" in args.sides:
            (work / "e").mkdir()
            out["evalkit"] = {**evalkit_side(samples, work / "e", scale), "measured": stamp}
            print("evalkit", json.dumps(out["evalkit"]), flush=True)
        if "inspect" in args.sides:
            (work / "i").mkdir()
            out["inspect_ai"] = {**inspect_side(samples, work / "i", cap, scale), "measured": stamp}
            print("inspect-ai", json.dumps(out["inspect_ai"]), flush=True)
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(dest)


if __name__ == "__main__":
    main()
