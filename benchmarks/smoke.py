"""Every benchmarks/bench_*.py at its smallest size (`--smoke`), so a benchmark that no
longer runs fails `make test` instead of the next `make bench`. Their figures go to a
temporary folder (benchmarks/_smoke.py): a smoke run measures nothing.

    .venv/bin/python benchmarks/smoke.py [bench_runner.py ...]   (EVALKIT_BENCH_SMOKE_JOBS=3)

The longest first (LPT: longest processing time first, so the lanes end together), one
more at a time than the machine has cores (the default: 3 on 2 cores), since several
benchmarks spend much of their time waiting (a rate limit's backoff, a cluster or a
sandbox starting, a fault's Retry-After) and a waiting one leaves its core to the others.

Exit 1 when any benchmark fails (its output is shown), naming each, or when a file
under benchmarks/results/ changed while they ran (a smoke run's figures overwrote the
measured ones); prints each one's
wall time and CPU time, the total, and the load average (the wall time on a shared
machine measures its load).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from _smoke import SMOKE_DIR_ENV

HERE = Path(__file__).resolve().parent

# Each smoke run's wall seconds, for the order (longest first): `make bench-smoke` in the
# fresh-clone `make test` at c0c2b03, 3 at a time on 2 cores (49.9 s in all, 89.7 CPU-s,
# load average 3.3). A benchmark not listed goes first: unknown may be long.
WALL_S = {
    "bench_ray.py": 23.4, "bench_reports.py": 21.7, "bench_batch.py": 15.0, "bench_ratelimit.py": 14.8,
    "bench_report_scale.py": 14.0, "bench_proxy.py": 12.6, "bench_local_model.py": 10.8, "bench_faults.py": 7.3,
    "bench_sandbox.py": 6.4, "bench_startup.py": 3.7, "bench_runner.py": 3.6, "bench_cap.py": 3.4,
    "bench_ppi_coverage.py": 2.8, "bench_gate.py": 2.2, "bench_grading.py": 2.1, "bench_dataset.py": 2.1,
    "bench_server.py": 1.4, "bench_privacy.py": 1.2, "bench_sequential.py": 0.6, "bench_microtest.py": 3.4,
    "bench_stopping.py": 8.1,  # its smoke run alone (8.1 s wall, 2.2 CPU-s): not in the run above
    "bench_explorer.py": 10.0,  # its smoke run alone at load 7 (10.1 s wall, 4.4 CPU-s): not in the run above
    "bench_conversations.py": 43.5,  # its smoke run alone at load 3.4 (43.5 s wall, 29.8 CPU-s): not in the run above
}


def cores() -> int:
    """The cores this process may run on (its affinity; a container's limit shows there)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def order(benches: list[Path]) -> list[Path]:
    """Longest first (the unknown ones before all), ties by name."""
    return sorted(benches, key=lambda b: (-WALL_S.get(b.name, float("inf")), b.name))


def results_state() -> dict[str, tuple[int, int]]:
    """Size and modification time of each file under benchmarks/results/."""
    return {str(p.relative_to(HERE.parent)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted((HERE / "results").rglob("*")) if p.is_file()}


def run_one(bench: Path, env: dict[str, str]) -> tuple[Path, int, float, float, str]:
    """Exit status, wall seconds, CPU seconds (the benchmark and the processes it waited
    for: os.wait4's rusage) and output of one benchmark's smoke run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(bench), "--smoke"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=HERE.parent)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return bench, proc.returncode, time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, output


def main(argv: list[str]) -> int:
    jobs = int(os.environ.get("EVALKIT_BENCH_SMOKE_JOBS") or cores() + 1)
    benches = order([HERE / a for a in argv] if argv else list(HERE.glob("bench_*.py")))
    failed: list[str] = []
    before = results_state()
    t_all = time.perf_counter()
    cpu_all = 0.0
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-smoke-") as d, ThreadPoolExecutor(jobs) as pool:
        env = {**os.environ, SMOKE_DIR_ENV: d, "PYTHONUNBUFFERED": "1"}
        for fut in as_completed([pool.submit(run_one, b, env) for b in benches]):
            bench, rc, wall, cpu, output = fut.result()
            cpu_all += cpu
            print(f"bench-smoke {bench.name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {wall:.1f} s "
                  f"({cpu:.1f} CPU-s)", flush=True)
            if rc != 0:
                failed.append(bench.name)
                sys.stdout.write(output[-6000:])
    after = results_state()
    touched = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    if touched:
        print(f"bench-smoke: FAILED: a smoke run wrote to {', '.join(touched)} (its figures belong in the smoke "
              "folder, benchmarks/_smoke.py)", flush=True)
    print(f"bench-smoke: {len(benches) - len(failed)} of {len(benches)} benchmarks ran in "
          f"{time.perf_counter() - t_all:.1f} s ({jobs} at a time on {cores()} cores, {cpu_all:.1f} CPU-s, "
          f"load average {os.getloadavg()[0]:.2f})" + (f"; failed: {', '.join(failed)}" if failed else ""),
          flush=True)
    return 1 if failed or touched else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
