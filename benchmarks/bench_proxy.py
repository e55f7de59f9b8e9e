"""The metering proxy: its added latency per call, and a 1,000-sample command-unit run.

1. Latency. One openai client (the sync one a user's agent would use, keep-alive on)
   calls the scripted server (zero latency, its own process) directly, through two
   forward-only proxies (aiohttp; each call passed on through aiohttp alone, `raw`, or
   through the official openai client as evalkit calls it, `sdk`: the floor for a proxy
   that, as evalkit must, calls the endpoint through that client), and through evalkit's
   metering proxy (its own process: the proxy, a sample session writing its trajectory,
   the run's ModelClient with ledger and response cache, as in a run), in alternating
   blocks, over several rounds. Every prompt is unique, so the cache never answers.
   `added_ms` is the difference of the medians (target <= 1 ms median on loopback);
   `metering_ms` is evalkit's share of it; `hop_cpu_ms_per_call` the CPU each
   forwarding process spends a call, steadier than wall times on a shared machine.
2. A command unit: 1,000 samples (100 cases x k 10) of a small stdlib agent
   (`proxy_agent.py`: two completions and one tool call each) run by `run_suite` at
   concurrency 8, against the same program run 1,000 times by a bare asyncio loop straight
   at the server (no proxy, no ledger, no trajectory), alternating (`--repeats` each).
   Both spawn one process a sample.

    .venv/bin/python benchmarks/bench_proxy.py [--calls 6000] [--rounds 3] [--samples 1000] [--repeats 2]

Writes `benchmarks/results/proxy.json`. Wall times on a shared 2-core machine are noisy:
the load average is recorded with them.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
import openai

HERE = Path(__file__).resolve().parent
AGENT = HERE / "proxy_agent.py"
CONCURRENCY = 8

_SERVER = """
import sys
from evalkit.calls.serve import ScriptedServer
script = {"rules": [{"match": "RESULT", "text": "the answer"}, {"match": "Question", "text": "CALL lookup(x)"}],
          "default": {"text": "ok"}, "latency_s": 0.0}
with ScriptedServer(script) as srv:
    print(srv.base_url, flush=True)
    sys.stdin.read()
"""

_PROXY = """
import asyncio, sys, tempfile
from pathlib import Path
from evalkit.calls.cache import ResponseCache
from evalkit.calls.client import ModelClient
from evalkit.calls.ledger import Ledger
from evalkit.calls.proxy import MeteringProxy
from evalkit.foundations.records import Endpoint, Price
from evalkit.calls.session import SampleSession
from evalkit.runfolder.trajectories import TrajectoryWriter
from evalkit.suites.units import ToolFixtures

async def main(upstream):
    tmp = Path(tempfile.mkdtemp())
    ledger = Ledger(1000.0, tmp / "ledger.jsonl")
    cache = ResponseCache(tmp / "cache.sqlite")
    client = ModelClient(Endpoint("scripted", upstream, "EVALKIT_BENCH_KEY"), Price(0.1, 0.4), ledger,
                         max_tokens_in=512, max_tokens_out=16, cache=cache, base_url=upstream)
    writer = TrajectoryWriter(tmp, "bench", "arm", 0)
    session = SampleSession(client=client, key=("bench", "arm", 0), writer=writer, fixtures=ToolFixtures(None),
                            should_stop=lambda: None, on_stop=lambda cause: None)
    proxy = await MeteringProxy(model="scripted").start()
    ep = proxy.open(session)
    print(ep.base_url, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await proxy.aclose(); await client.aclose(); cache.close(); ledger.close(); writer.close()

asyncio.run(main(sys.argv[1]))
"""

# The floors: proxies that only forward each completion and answer with its JSON: no
# ledger, no cache, no trajectory. `sdk` calls the endpoint through the official openai
# client exactly as evalkit does (`client.post(path, cast_to=bytes, body=...)`,
# `ModelClient._send`), as evalkit must call every endpoint; `raw` through aiohttp alone,
# to show what the SDK itself costs a call. What evalkit's proxy adds on top of `sdk` is
# its metering.
_FORWARD = """
import asyncio, sys
import aiohttp, openai
from aiohttp import web

async def main(upstream, kind):
    if kind == "sdk":
        client = openai.AsyncOpenAI(base_url=upstream, api_key="bench", max_retries=0,
                                    http_client=openai.DefaultAioHttpClient())
        async def call(body):
            return await client.post("/completions", cast_to=bytes, body=body)
    else:
        session = aiohttp.ClientSession()
        async def call(body):
            async with session.post(upstream + "/completions", json=body) as r:
                return await r.read()

    async def completions(request):
        return web.Response(body=await call(await request.json()), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"http://127.0.0.1:{runner.addresses[0][1]}/v1", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def _start(code: str, *args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        raise SystemExit(f"a benchmark server did not start: {url!r}")
    return proc, url


def _stop(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(timeout=30)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def latency(urls: dict[str, str], calls: int, pids: dict[str, int], rounds: int = 3, block: int = 50) -> dict:
    """Per-call latency (ms) of the same client at each URL (`direct`, `raw`, `sdk`,
    `proxy`), in alternating blocks so that load on the machine hits them alike, in
    `rounds` rounds (the machine's speed drifts over minutes: each round's medians are
    kept); and the CPU each forwarding process spends a call (`pids`)."""
    clients = {name: openai.OpenAI(base_url=url, api_key="bench", max_retries=0) for name, url in urls.items()}
    times: dict[str, list[float]] = {name: [] for name in urls}
    cpu: dict[str, float] = {name: 0.0 for name in pids}
    per_round: list[dict[str, float]] = []
    n = 0
    for c in clients.values():  # warm up every path
        for _ in range(20):
            n += 1
            c.completions.create(model="scripted", prompt=f"warm {n}", max_tokens=16)
    each = calls // len(urls) // rounds
    for _ in range(rounds):
        start = {name: len(v) for name, v in times.items()}
        while len(times["proxy"]) - start["proxy"] < each:
            for name, c in clients.items():
                c0 = _cpu_s(pids[name]) if name in pids else 0.0
                for _ in range(block):
                    n += 1
                    t0 = time.perf_counter()
                    c.completions.create(model="scripted", prompt=f"Question number {n}?", max_tokens=16, seed=n)
                    times[name].append((time.perf_counter() - t0) * 1000)
                if name in pids:
                    cpu[name] += _cpu_s(pids[name]) - c0
        per_round.append({k: round(statistics.median(v[start[k]:]), 3) for k, v in times.items()})
    for c in clients.values():
        c.close()

    def q(xs: list[float], p: float) -> float:
        return round(statistics.quantiles(xs, n=100)[int(p) - 1], 3)

    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    return {
        "calls_each": len(times["proxy"]),
        "rounds": rounds,
        "median_ms": med,
        "p90_ms": {k: q(v, 90) for k, v in times.items()},
        "p99_ms": {k: q(v, 99) for k, v in times.items()},
        "round_median_ms": per_round,
        "round_added_ms": [round(r["proxy"] - r["direct"], 3) for r in per_round],
        "added_ms": round(med["proxy"] - med["direct"], 3),
        # proxies that only forward: through aiohttp alone, and through the official openai client as evalkit does
        "raw_forward_added_ms": round(med["raw"] - med["direct"], 3),
        "sdk_forward_added_ms": round(med["sdk"] - med["direct"], 3),
        # what evalkit's metering (session, client, ledger, cache, trajectory) adds to the latter
        "metering_ms": round(med["proxy"] - med["sdk"], 3),
        # CPU each forwarding process spends a call (its user + system time over the calls it served)
        "hop_cpu_ms_per_call": {k: round(v * 1000 / len(times[k]), 3) for k, v in cpu.items()},
        "target_added_ms": 1.0,
        "meets_target": med["proxy"] - med["direct"] <= 1.0,
    }


def write_suite(root: Path, samples: int) -> Path:
    k = 10
    n_cases = max(1, samples // k)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({
        "unit": {"kind": "command", "argv": ["{python}", str(AGENT)], "timeout_s": 120},
        "generator": {"model": "scripted", "api_key_env": "EVALKIT_BENCH_KEY"},
        "temperature": 0.0, "seed": 1, "k": k, "concurrency": CONCURRENCY, "cost_cap_usd": 1000.0,
        "max_tokens_in": 512, "max_tokens_out": 16,
        "price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4}, "judge_price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4},
        "arms": [{"name": "baseline"}]}))
    (root / "cases.jsonl").write_text("".join(
        json.dumps({"id": f"case-{i:04d}", "input": f"what is item {i}?", "tags": ["bench"],
                    "checks": [{"kind": "contains", "value": "answer"}]}) + "\n" for i in range(n_cases)))
    return root


async def bare_processes(server_url: str, samples: int) -> float:
    """The agent program `samples` times, `CONCURRENCY` at once, straight at the server."""
    sem = asyncio.Semaphore(CONCURRENCY)
    env = {**os.environ, "OPENAI_BASE_URL": server_url, "OPENAI_API_KEY": "bench"}
    env.pop("EVALKIT_TOOLS_URL", None)

    async def one(i: int) -> bytes:
        async with sem:
            # A session of its own, as evalkit starts a program: on Linux that is also a
            # scheduling autogroup of its own, worth 3x the CPU on a loaded machine (measured).
            p = await asyncio.create_subprocess_exec(sys.executable, str(AGENT), stdin=asyncio.subprocess.PIPE,
                                                     stdout=asyncio.subprocess.PIPE, env=env,
                                                     start_new_session=True)
            out, _ = await p.communicate(json.dumps({"input": f"what is item {i}?", "model": "scripted",
                                                     "seed": i}).encode())
            assert p.returncode == 0
            return out

    t0 = time.perf_counter()
    outs = await asyncio.gather(*(one(i) for i in range(samples)))
    wall = time.perf_counter() - t0
    assert all(o.strip() == b"the answer" for o in outs)
    return wall


def command_run(server_url: str, samples: int, repeats: int) -> dict:
    """`repeats` evalkit runs and as many bare loops, alternating (bare first, then
    evalkit first, ...), so that load on the machine hits both alike."""
    from evalkit.conclusions.grading import grade_run
    from evalkit.running.runner import run_suite
    from evalkit.runfolder.runs import iter_jsonl

    walls: dict[str, list[float]] = {"evalkit": [], "bare": []}
    cpus: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        suite = write_suite(Path(d) / "suite", samples)
        for rep in range(repeats):
            for name in ("bare", "evalkit") if rep % 2 == 0 else ("evalkit", "bare"):
                if name == "bare":
                    walls["bare"].append(asyncio.run(bare_processes(server_url, samples)))
                    continue
                t0, c0 = time.perf_counter(), time.process_time()
                res = run_suite(suite, runs_dir=Path(d) / f"runs{rep}", base_url=server_url, progress=False,
                                cache=False)
                walls["evalkit"].append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
                assert res.complete and res.samples_ran == res.samples_total, res
                print(f"  rep {rep + 1}: evalkit {walls['evalkit'][-1]:.1f} s", flush=True)
        lines = [e for p in (res.path / "trajectories").rglob("*.jsonl") for e in iter_jsonl(p)
                 if e["type"] == "model_call"]
        calls = [e for e in lines if e.get("status") != "sent"]  # each call's outcome line (its "sent" line before)
        reserves = sum(1 for e in iter_jsonl(res.path / "ledger.jsonl") if e["event"] == "reserve")
        graded = grade_run(res.path)
        passed = sum(1 for g in graded.grades if g.passed)
    wall, bare = statistics.median(walls["evalkit"]), statistics.median(walls["bare"])
    return {
        "samples": res.samples_total, "concurrency": CONCURRENCY, "repeats": repeats,
        "model_calls": len(calls), "trajectory_model_call_lines": len(lines),
        "ledger_reservations": reserves, "passed": passed,
        "wall_s": [round(w, 2) for w in walls["evalkit"]], "median_wall_s": round(wall, 2),
        "samples_per_s": round(res.samples_total / wall, 1),
        "ms_per_sample": round(wall * 1000 / res.samples_total, 2),
        "evalkit_process_cpu_s": [round(c, 2) for c in cpus],
        "bare_loop_wall_s": [round(w, 2) for w in walls["bare"]], "median_bare_loop_wall_s": round(bare, 2),
        "ratio_to_bare": round(wall / bare, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=6000, help="latency calls, split over the four paths")
    ap.add_argument("--rounds", type=int, default=3, help="latency rounds (each alternates the paths)")
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=2, help="of the command-unit run and of its bare loop")
    ap.add_argument("--out", default=str(HERE / "results" / "proxy.json"))
    _smoke.add(ap)
    args = ap.parse_args()
    # --smoke: 10 latency calls a path, and one case (k 10: the fewest samples a suite of whole cases runs) each way
    _smoke.apply(args, HERE / "results" / "proxy.json", calls=40, rounds=1, samples=10, repeats=1)
    server, server_url = _start(_SERVER)
    try:
        procs = {"raw": _start(_FORWARD, server_url, "raw"), "sdk": _start(_FORWARD, server_url, "sdk"),
                 "proxy": _start(_PROXY, server_url)}
        try:
            urls = {"direct": server_url, **{name: url for name, (_, url) in procs.items()}}
            lat = latency(urls, args.calls, {name: p.pid for name, (p, _) in procs.items()}, rounds=args.rounds)
        finally:
            for p, _ in procs.values():
                _stop(p)
        print(f"latency: direct median {lat['median_ms']['direct']} ms, through evalkit's proxy "
              f"{lat['median_ms']['proxy']} ms: added {lat['added_ms']} ms (target <= 1; by round "
              f"{lat['round_added_ms']}); forwarding alone adds {lat['raw_forward_added_ms']} ms through aiohttp, "
              f"{lat['sdk_forward_added_ms']} ms through the openai client; evalkit's metering "
              f"{lat['metering_ms']} ms; CPU a call {lat['hop_cpu_ms_per_call']}", flush=True)
        run = command_run(server_url, args.samples, args.repeats)
        print(f"command unit: {run['samples']} samples in {run['median_wall_s']} s ({run['samples_per_s']}/s), "
              f"bare loop {run['median_bare_loop_wall_s']} s (ratio {run['ratio_to_bare']})", flush=True)
    finally:
        _stop(server)
    result = {
        "benchmark": "metering proxy: added latency per call, and a command-unit run",
        "command": "python benchmarks/bench_proxy.py",
        "server": "evalkit ScriptedServer, separate process, latency 0; the proxy in a separate process",
        "latency": lat, "command_unit": run,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
