"""The sandbox of command and python units (evalkit.calls.sandbox): what it adds per sample and per call.

1. Start-up. The same trivial program (`python -I -S -c pass`) started and waited for
   the way evalkit starts a sample's process, bare (``"isolation": "none"``) and in the
   sandbox (bubblewrap with the run's hidden and bound paths, the forwarder started
   first, serving a real Unix socket), one start of each in turn (so a load that
   drifts falls on every arm alike); `added_ms` is the
   difference of the medians (target <= 50 ms), with the compiled forwarder
   (`make sandbox`); `python_forwarder_added_ms` the same with the python one it falls
   back to, `bwrap_only_added_ms` bubblewrap's namespaces and mounts alone (no
   forwarder: the floor of any forwarder), and `bwrap_minimal_added_ms` bubblewrap
   with nothing but ``--ro-bind / /`` (what starting it at all costs).
2. The Unix-socket hop. One openai client program (keep-alive, as an agent) calls
   evalkit's metering proxy (its own process, as in bench_proxy.py: session,
   trajectory, ledger, cache, against the scripted server) straight on its TCP port
   from the host, and from inside a sandbox through the forwarder and the proxy's Unix
   socket, in alternating blocks over several rounds; `hop_added_ms` is the difference
   of the medians (target <= 0.3 ms on top of the proxy's own figure, proxy.json), and
   `forwarder_cpu_ms_per_call` the CPU the forwarder spends a call (read from the
   host's /proc while it runs), steadier than wall times on a loaded machine.

    .venv/bin/python benchmarks/bench_sandbox.py [--starts 100] [--calls 600] [--rounds 3]

Writes `benchmarks/results/sandbox.json`. Wall times on a shared 2-core machine are
noisy: the load average is recorded with them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _smoke  # benchmarks/_smoke.py: --smoke, the smallest size

from bench_proxy import _SERVER, _start, _stop

from evalkit.calls import sandbox

HERE = Path(__file__).resolve().parent

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

async def main(upstream, sock):
    tmp = Path(tempfile.mkdtemp())
    ledger = Ledger(1000.0, tmp / "ledger.jsonl")
    cache = ResponseCache(tmp / "cache.sqlite")
    client = ModelClient(Endpoint("scripted", upstream, "EVALKIT_BENCH_KEY"), Price(0.1, 0.4), ledger,
                         max_tokens_in=512, max_tokens_out=16, cache=cache, base_url=upstream)
    writer = TrajectoryWriter(tmp, "bench", "arm", 0)
    session = SampleSession(client=client, key=("bench", "arm", 0), writer=writer, fixtures=ToolFixtures(None),
                            should_stop=lambda: None, on_stop=lambda cause: None)
    proxy = await MeteringProxy(model="scripted").start()
    await proxy.listen_unix(sock)
    ep = proxy.open(session)
    print(ep.base_url, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await proxy.aclose(); await client.aclose(); cache.close(); ledger.close(); writer.close()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""

# The agent side: N calls with one keep-alive client, each timed; prints the times (ms).
_CLIENT = """
import json, sys, time, openai
url, n, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = openai.OpenAI(base_url=url, api_key="bench", max_retries=0)
for i in range(10):
    c.completions.create(model="scripted", prompt=f"warm {tag} {i}", max_tokens=16)
out = []
for i in range(n):
    t0 = time.perf_counter()
    c.completions.create(model="scripted", prompt=f"Question {tag} {i}?", max_tokens=16, seed=i)
    out.append((time.perf_counter() - t0) * 1000)
print(json.dumps(out), flush=True)
sys.stdin.read()  # held open until the host has read the forwarder's CPU
"""


def _jail(work: Path, sock: Path | None, port: int) -> sandbox.Jail:
    """A sandbox as a run makes it: this folder, the cwd and HOME hidden, the
    interpreter bound back."""
    hidden = sandbox.hidden_paths(HERE, os.getcwd(), os.environ.get("HOME"))
    return sandbox.Jail(work, sock, port, hidden, sandbox.interpreter_paths())


def _cpu_ms(pid: int) -> float:
    """CPU time (ms) of host process `pid` so far (Linux /proc: schedstat's nanoseconds
    where the kernel keeps them, else user + system in clock ticks, 10 ms coarse)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e6
    except (OSError, ValueError, IndexError):
        pass
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _forwarder_pids(port: int) -> list[int]:
    """The host pids of the forwarder serving `port` inside a sandbox (its command line;
    the compiled one's server and connection processes too)."""
    want = f"\0{port}\0{sandbox.SOCKET_INSIDE}\0--\0".encode()
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes()
                if want in cmd and b"--unshare-net" not in cmd:  # the forwarder, not the bwrap processes
                    found.append(int(p))
            except OSError:
                continue
    return found


def _unix_listener(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(8)
    path.chmod(0o666)  # root's sandbox runs as another uid (as a run's proxy socket)
    return s


def startup(n: int, block: int = 1) -> dict:
    """Wall time (ms) to start and reap a trivial program, bare and sandboxed."""
    tmp = Path(tempfile.mkdtemp(prefix="evalkit-bench-"))
    work = tmp / "work"
    work.mkdir()
    sandbox.own_workdir(work)  # as a run hands it to root's sandbox uid
    listener = _unix_listener(tmp / "proxy.sock")
    argv = [sys.executable, "-I", "-S", "-c", "pass"]
    env = sandbox.environment({}, work)
    jail = _jail(work, tmp / "proxy.sock", 40000 + os.getpid() % 20000)
    boxed = sandbox.bwrap_argv(jail, argv)
    os.environ[sandbox.FORWARDER_ENV] = "python"
    try:
        boxed_python = sandbox.bwrap_argv(jail, argv)
    finally:
        del os.environ[sandbox.FORWARDER_ENV]
    bare_box = sandbox.bwrap_argv(_jail(work, None, 0), argv)  # the namespaces and mounts alone, no forwarder
    # bubblewrap at its least (the host's root, no namespace of its own): what starting bwrap at all costs
    minimal = [sandbox.bwrap_binary() or "bwrap", "--ro-bind", "/", "/", *argv]
    arms = {"none": argv, "bwrap_minimal": minimal, "bwrap_only": bare_box, "sandbox": boxed,
            "sandbox_python_forwarder": boxed_python}
    times: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(2):  # warm the page cache for each
        for cmd in arms.values():
            subprocess.run(cmd, env=env, cwd=work, check=True)
    while len(times["sandbox"]) < n:
        for name, cmd in arms.items():
            for _ in range(block):
                t0 = time.perf_counter()
                subprocess.run(cmd, env=env, cwd=work, check=True, start_new_session=True,
                               stdin=subprocess.DEVNULL)
                times[name].append((time.perf_counter() - t0) * 1000)
    listener.close()
    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    added = round(med["sandbox"] - med["none"], 3)
    return {"starts_each": len(times["sandbox"]), "median_ms": med, "added_ms": added,
            # of which bubblewrap's namespaces and mounts (the rest: the forwarder's start)
            "bwrap_only_added_ms": round(med["bwrap_only"] - med["none"], 3),
            "bwrap_minimal_added_ms": round(med["bwrap_minimal"] - med["none"], 3),
            # the fallback where the compiled forwarder is not built: an interpreter start more
            "python_forwarder_added_ms": round(med["sandbox_python_forwarder"] - med["none"], 3),
            "forwarder": "compiled" if sandbox.forwarder_binary() else "python (the compiled one not built)",
            "p90_ms": {k: round(statistics.quantiles(v, n=10)[8], 3) for k, v in times.items()},
            "target_added_ms": 50.0, "meets_target": added <= 50.0}


def hop(calls: int, rounds: int) -> dict:
    """Per-call latency (ms) of an agent calling the proxy directly and through the
    sandbox's forwarder and Unix socket."""
    tmp = Path(tempfile.mkdtemp(prefix="evalkit-bench-"))
    work = tmp / "work"
    work.mkdir()
    sandbox.own_workdir(work)  # as a run hands it to root's sandbox uid
    sock = tmp / "proxy.sock"
    server, upstream = _start(_SERVER)
    proxy, url = _start(_PROXY, upstream, str(sock))
    sock.chmod(0o666)  # as a run's proxy socket
    port = int(url.split(":")[2].split("/")[0])
    env = sandbox.environment({}, work)
    direct = [sys.executable, "-c", _CLIENT]
    boxed = sandbox.bwrap_argv(_jail(work, sock, port), [sys.executable, "-c", _CLIENT])
    per = max(1, calls // rounds)
    times: dict[str, list[float]] = {"direct": [], "unix_hop": []}
    forwarder_cpu_ms = 0.0
    per_round = []
    try:
        for r in range(rounds):
            got = {}
            for name, cmd in (("direct", direct), ("unix_hop", boxed)):
                proc = subprocess.Popen([*cmd, url, str(per), f"{name}-{r}"], env=env, cwd=work, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                assert proc.stdout is not None and proc.stdin is not None
                got[name] = json.loads(proc.stdout.readline())
                for fwd in _forwarder_pids(port) if name == "unix_hop" else []:
                    forwarder_cpu_ms += _cpu_ms(fwd)  # its start-up included: an upper bound per call
                proc.stdin.close()
                proc.wait(timeout=60)
                times[name] += got[name]
            per_round.append({k: round(statistics.median(v), 3) for k, v in got.items()})
    finally:
        _stop(proxy)
        _stop(server)
    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    added = round(med["unix_hop"] - med["direct"], 3)
    return {"calls_each": len(times["direct"]), "rounds": rounds, "median_ms": med, "round_median_ms": per_round,
            "round_added_ms": [round(r["unix_hop"] - r["direct"], 3) for r in per_round],
            "hop_added_ms": added, "target_added_ms": 0.3, "meets_target": added <= 0.3,
            # the CPU the forwarder spent per call it carried (its start-up and 10 warm-up calls included:
            # an upper bound): what the hop costs, steadier than wall times on a loaded machine
            "forwarder_cpu_ms_per_call": round(forwarder_cpu_ms / len(times["unix_hop"]), 4),
            "forwarder": "compiled" if sandbox.forwarder_binary() else "python"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--calls", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    _smoke.add(ap)
    args = ap.parse_args()
    out = _smoke.apply(args, HERE / "results" / "sandbox.json", starts=3, calls=20, rounds=1)
    why = sandbox.probe()
    if why is not None:
        raise SystemExit(f"bench_sandbox: no sandbox on this machine: {why}")
    load0 = os.getloadavg()
    result = {
        "benchmark": "sandbox",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "bwrap": subprocess.run([sandbox.bwrap_binary() or "bwrap", "--version"], capture_output=True,
                                            text=True).stdout.strip()},
        "load_avg_before": [round(x, 2) for x in load0],
    }
    result["startup"] = startup(args.starts)
    result["unix_socket_hop"] = hop(args.calls, args.rounds)
    result.update({
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
    })
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
