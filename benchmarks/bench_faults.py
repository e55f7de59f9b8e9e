"""Fault soak: runs under the campaign's fault mixes, against a scripted server in its own process.

Three scenarios, each with evalkit's default retry settings (`max_attempts` 6,
`rate_limit_budget_s` 300, `max_connection_failures` 8, `timeout_s` 60) at concurrency
32:

* ``mix``: 2,000 calls under 10% 429 (Retry-After 1 s), 5% 500, 2% dropped connections
  (the server reads the request, then closes) and 1% slow answers (2 s, within the
  timeout);
* ``storm``: 600 calls while 50% of requests get a 429 (Retry-After 1 s) for the first
  20 s;
* ``outage``: 2,000 calls; the server process is SIGKILLed after about 600 samples and
  started again on the same port 3 s later. The run stops ("endpoint unreachable"),
  then a resume finishes it.

What is reported, per scenario, and how it is measured independently of evalkit's own
bookkeeping where it can be:

* lost samples: planned keys without a `results.jsonl` line once the run (and, for the
  outage, its resume) ended; duplicated: keys with more than one line;
* spend against the cap (the summary's spend; the ledger replayed gives the same);
* phantom charges: attempts charged on the ledger beyond what the server could have
  billed. The server process appends the seed of every completion request it receives
  to a log file (flushed per request, so a SIGKILL loses none); a key's attempts that
  the server may have processed without answering are its received requests minus its
  HTTP answers (ledger settles and HTTP-status releases). Any charged attempt beyond
  that, per key, is phantom; target $0;
* wall time, requests, faults injected, and the stop reason of an interrupted session.

    .venv/bin/python benchmarks/bench_faults.py [--scenarios mix,storm,outage] [--calls 2000] [--time-scale 1]

Writes `benchmarks/results/faults.json` (scenarios not run keep their figures from it).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
from evalkit.suites.reader import load_suite
from evalkit.foundations.records import Suite
from evalkit.running.runner import derive_seed, run_suite
from evalkit.runfolder.runs import iter_jsonl

HERE = Path(__file__).resolve().parent
CONCURRENCY = 32
SEED = 1234

# The server: evalkit's ScriptedServer, subclassed only to log each request's seed as it
# arrives (before any fault is applied), so the log is the server's own truth.
_SERVER = """
import json, sys
from evalkit.calls.serve import ScriptedServer
script, log_path, port = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
log = open(log_path, "a", buffering=1)

class Logged(ScriptedServer):
    async def _handle_model_call(self, request, chat):
        body = json.loads(await request.read())  # aiohttp keeps the body for the handler
        log.write(f"{body.get('seed')}\\n")
        return await super()._handle_model_call(request, chat)

with Logged(script, port=port) as srv:
    print(srv.base_url, flush=True)
    sys.stdin.read()
    print(json.dumps(srv.stats), flush=True)
"""

TEXTS = {"rules": [{"match": "capital", "texts": ["Paris", "Lyon", "Nice"]}], "default": {"text": "unknown"}}
MIX = [{"kind": "429", "rate": 0.10, "retry_after": 1.0},
       {"kind": "500", "rate": 0.05 / 0.90},  # faults are tried in order: rates of what is left
       {"kind": "drop", "rate": 0.02 / 0.85},
       {"kind": "slow", "rate": 0.01 / 0.83, "delay_s": 2.0}]
STORM = [{"kind": "429", "rate": 0.5, "retry_after": 1.0, "until_s": 20.0}]


def make_suite(calls: int, root: Path) -> Suite:
    """The suite of `calls` completions, written to `root` and loaded from there, as a
    user's suite is (the run's privacy gate and input hashes read its files)."""
    k = 10
    n_cases = max(1, calls // (k * 2))
    # Worst case per call: 512 in + 16 out at $0.1/$0.4 per Mtok; the cap allows every
    # key 3 charged attempts, far more than the faults need.
    worst = (512 * 0.1 + 16 * 0.4) / 1e6
    root.mkdir(parents=True, exist_ok=True)
    config = {
        "generator": {"model": "scripted", "api_key_env": "EVALKIT_BENCH_KEY"}, "mode": "completion",
        "template": "prompt.txt", "temperature": 0.8, "seed": SEED, "k": k, "concurrency": CONCURRENCY,
        "cost_cap_usd": round(3 * worst * n_cases * k * 2, 6), "max_tokens_in": 512, "max_tokens_out": 16,
        "price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4}, "judge_price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4},
        "arms": [{"name": "baseline"}, {"name": "guided", "guidance": "guided.md"}], "stop": ["\n"],
    }
    (root / "config.json").write_text(json.dumps(config))
    (root / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (root / "guided.md").write_text("Answer with one word.\n")
    (root / "cases.jsonl").write_text("".join(
        json.dumps({"id": f"case-{i:04d}", "input": f"What is the capital of country number {i}?",
                    "expected": "Paris", "tags": ["bench"]}) + "\n" for i in range(n_cases)))
    return load_suite(root)


class Server:
    """The scripted server in a process of its own, on a fixed port, logging seeds."""

    def __init__(self, script: dict, log: Path, port: int) -> None:
        self.script, self.log, self.port = script, log, port
        self.proc: subprocess.Popen | None = None
        self.stats: list[dict] = []

    def start(self) -> str:
        for _ in range(50):  # the port may linger for a moment after a kill
            self.proc = subprocess.Popen([sys.executable, "-c", _SERVER, json.dumps(self.script), str(self.log),
                                          str(self.port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            url = self.proc.stdout.readline().strip()
            if url.startswith("http"):
                return url
            self.proc.wait()
            time.sleep(0.1)
        raise SystemExit("the scripted server did not start")

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.stdin.close()
        line = self.proc.stdout.readline()
        self.proc.wait(timeout=30)
        if line.strip():
            self.stats.append(json.loads(line))


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(suite: Suite, folder: Path, log: Path) -> dict:
    """Lost, duplicated and phantom figures of a finished run folder (see the docstring)."""
    cfg = suite.config
    plan = {(c.id, a.name, i) for c in suite.cases for a in cfg.arms for i in range(cfg.k)}
    seed_key = {derive_seed(cfg.seed, *key): "/".join(map(str, key)) for key in plan}
    lines = collections.Counter((r["case_id"], r["arm"], int(r["index"])) for r in iter_jsonl(folder / "results.jsonl"))
    received = collections.Counter(seed_key.get(int(s)) for s in log.read_text().split())
    ledger = list(iter_jsonl(folder / "ledger.jsonl"))
    answered: collections.Counter[str] = collections.Counter()
    charged: collections.Counter[str] = collections.Counter()
    reserved: collections.Counter[str] = collections.Counter()
    worst = cfg.price.cost(cfg.max_tokens_in, cfg.max_tokens_out)
    reasons: collections.Counter[str] = collections.Counter()
    for e in ledger:
        if e["event"] == "reserve":
            reserved[e["key"]] += 1
        elif e["event"] == "settle":
            answered[e["key"]] += 1
        elif e["event"] == "release":
            reasons[e.get("reason", "")] += 1
            if str(e.get("reason", "")).startswith("HTTP "):
                answered[e["key"]] += 1
            if e.get("cost_usd", 0) > 0:
                charged[e["key"]] += 1
    phantom = {k: charged[k] - max(0, received[k] - answered[k]) for k in charged}
    phantom = {k: n for k, n in phantom.items() if n > 0}
    phantom_causes = [f"{e['key']}: {e.get('reason')}: {e.get('cause', '')}" for e in ledger
                      if e["event"] == "release" and e.get("cost_usd", 0) > 0 and e["key"] in phantom]
    settled = sum(e.get("cost_usd", 0.0) for e in ledger if e["event"] in ("settle", "release"))
    closed = {(e["run_epoch"], e["id"]) for e in ledger if e["event"] in ("settle", "release")}
    in_flight = sum(e["amount_usd"] for e in ledger if e["event"] == "reserve" and (e["run_epoch"], e["id"]) not in closed)
    summary = json.loads((folder / "summary.json").read_text())
    return {
        "planned": len(plan), "samples": len(lines), "lost": len(plan - set(lines)),
        "duplicated": sum(1 for n in lines.values() if n > 1),
        "spend_usd": round(summary["spend_usd"], 6), "ledger_replayed_usd": round(settled + in_flight, 6),
        "cap_usd": summary["cap_usd"], "spend_within_cap": summary["spend_usd"] <= summary["cap_usd"] + 1e-12,
        "phantom_attempts": sum(phantom.values()), "phantom_usd": round(sum(phantom.values()) * worst, 6),
        "phantom_keys_charged_releases": phantom_causes,
        "attempts_on_ledger": sum(reserved.values()), "requests_received": sum(received.values()),
        "attempts_not_received": sum(reserved.values()) - sum(received.values()),
        "releases_by_reason": dict(reasons), "complete": summary["complete"], "reason": summary["reason"],
    }


def scaled(faults: list[dict], scale: float) -> list[dict]:
    """The faults with their seconds (Retry-After, slow answers' delay, the storm's
    window) times `scale`: `--time-scale` (the smoke run's 0.05 keeps every fault)."""
    keys = ("retry_after", "delay_s", "until_s")
    return [{**f, **{k: f[k] * scale for k in keys if k in f}} for f in faults]


def scenario(name: str, calls: int, work: Path, storm_calls: int = 600, scale: float = 1.0) -> dict:
    suite = make_suite(calls if name != "storm" else storm_calls, work / "suite")
    faults = scaled({"mix": MIX, "storm": STORM, "outage": MIX}[name], scale)
    log, runs = work / f"{name}-requests.log", work / f"{name}-runs"
    server = Server({**TEXTS, "faults": faults, "seed": 7}, log, _free_port())
    url = server.start()
    sessions = []
    t0 = time.perf_counter()
    if name != "outage":
        res = run_suite(suite, runs_dir=runs, base_url=url, progress=False)
        sessions.append({"wall_s": round(time.perf_counter() - t0, 2), "complete": res.complete, "reason": res.reason})
        server.stop()
    else:
        killed = threading.Event()
        killed_at: list[float] = []

        at = max(1, min(600, calls * 3 // 10))  # 600 samples of the 2,000; a smaller run, its 30%

        def outage() -> None:  # kill the server after `at` samples, start it again 3 s (x scale) later
            while not killed.is_set():
                found = list(runs.glob("*/results.jsonl"))
                if found and found[0].read_bytes().count(b"\n") >= at:
                    server.kill()
                    killed_at.append(time.perf_counter())
                    killed.set()
                    return
                time.sleep(0.01)
        watcher = threading.Thread(target=outage, daemon=True)
        watcher.start()
        res = run_suite(suite, runs_dir=runs, base_url=url, progress=False)
        killed.set()
        watcher.join()
        if not killed_at:  # the run finished before the watcher saw `at` samples: the server still runs
            server.kill()
        stopped_after = time.perf_counter() - killed_at[0] if killed_at else None
        sessions.append({"wall_s": round(time.perf_counter() - t0, 2), "complete": res.complete,
                         "reason": res.reason, "samples_ran": res.samples_ran,
                         "stopped_s_after_the_kill": None if stopped_after is None else round(stopped_after, 2)})
        if killed_at:
            time.sleep(max(0.0, killed_at[0] + 3.0 * scale - time.perf_counter()))  # the outage lasts this long
        server.start()
        t1 = time.perf_counter()
        again = run_suite(suite, resume=res.path, base_url=url, progress=False)
        sessions.append({"wall_s": round(time.perf_counter() - t1, 2), "complete": again.complete,
                         "reason": again.reason})
        server.stop()
    folder = next(runs.glob("*/summary.json")).parent
    out = {"calls": len(suite.cases) * 2 * suite.config.k, "faults": faults, "sessions": sessions,
           "wall_s": round(time.perf_counter() - t0, 2), "server_stats": server.stats, **measure(suite, folder, log)}
    print(f"{name}: {out['samples']}/{out['planned']} samples, lost {out['lost']}, duplicated {out['duplicated']}, "
          f"spend ${out['spend_usd']:.6f} of cap ${out['cap_usd']:.6f}, phantom ${out['phantom_usd']:.6f} "
          f"({out['phantom_attempts']} attempts), {out['attempts_not_received']} attempts never reached the "
          f"server, wall {out['wall_s']} s; sessions {sessions}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="mix,storm,outage")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--storm-calls", type=int, default=600, help="the rate-limit storm's calls")
    ap.add_argument("--time-scale", type=float, default=1.0,
                    help="multiply every fault's seconds (Retry-After, slow delay, storm window, outage) by this")
    ap.add_argument("--out", default=str(HERE / "results" / "faults.json"))
    _smoke.add(ap)
    args = ap.parse_args()
    # --smoke: the three scenarios with every fault, on a clock twenty times faster (a 1 s storm, a 0.15 s outage)
    _smoke.apply(args, HERE / "results" / "faults.json", calls=40, storm_calls=40, time_scale=0.05)
    # scenarios not run this time keep their figures from the file (each says when it was measured)
    kept = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() and not args.smoke else {}
    results = dict(kept.get("scenarios", {}))
    with tempfile.TemporaryDirectory() as d:
        for name in args.scenarios.split(","):
            work = Path(d) / name
            work.mkdir()
            load = round(os.getloadavg()[0], 2)
            results[name] = {**scenario(name, args.calls, work, args.storm_calls, args.time_scale),
                             "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                             "load_average_1m": {"before": load, "after": round(os.getloadavg()[0], 2)}}
    targets = {n: r["lost"] == 0 and r["duplicated"] == 0 and r["spend_within_cap"] and r["phantom_usd"] == 0
               and r["complete"] for n, r in results.items()}
    doc = {"benchmark": "fault soak: lost/duplicated samples, spend against the cap, phantom charges",
           "command": "python benchmarks/bench_faults.py [--scenarios NAMES: the others kept from the file]",
           "concurrency": CONCURRENCY, "settings": "evalkit defaults (max_attempts 6, rate_limit_budget_s 300, "
                                                   "max_connection_failures 8, timeout_s 60)",
           "server": "evalkit ScriptedServer in its own process, logging every request it receives",
           "scenarios": results, "meets_targets": targets,
           "phantom_note": "phantom counts charged attempts beyond what the server's own request log can account "
                           "for. In the outage, requests written into the socket as the server was SIGKILLed reach "
                           "no handler; the client sees a connection reset after writing, which a real server or "
                           "proxy can also send after processing a request, so evalkit charges them at the worst "
                           "case by design (only what provably never left is free).",
           "target": "0 lost, 0 duplicated, spend <= cap, phantom $0, complete",
           "load_average_1m": round(os.getloadavg()[0], 2),
           "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
           "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"targets met: {targets}")


if __name__ == "__main__":
    main()
