"""Every benchmarks/bench_*.py at its smallest size (`--smoke`), two at a time, so a
benchmark that no longer runs fails `make test` instead of the next `make bench`. Their
figures go to a temporary folder (benchmarks/_smoke.py): a smoke run measures nothing.

    .venv/bin/python benchmarks/smoke.py [bench_runner.py ...]   (EVALKIT_BENCH_SMOKE_JOBS=2)

Exit 1 when any benchmark fails (its output is shown), naming each; prints each one's
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


# The slowest first (measured one at a time, quiet: ray 37.7 s with two clusters, ratelimit 18.5,
# reports 17.7, batch 11.7, sandbox 9.8, report_scale 7.9, runner 7.6 s), so that two lanes end
# together; ray and ratelimit mostly wait (a cluster starting, a rate limit), beside CPU-bound ones.
SLOWEST = ("bench_ray.py", "bench_ratelimit.py", "bench_reports.py", "bench_batch.py", "bench_sandbox.py",
           "bench_report_scale.py", "bench_runner.py", "bench_faults.py")


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
    jobs = int(os.environ.get("EVALKIT_BENCH_SMOKE_JOBS", "2"))  # the two cores of the machine the target is for
    benches = [HERE / a for a in argv] if argv else sorted(HERE.glob("bench_*.py"))
    benches.sort(key=lambda b: SLOWEST.index(b.name) if b.name in SLOWEST else len(SLOWEST))
    failed: list[str] = []
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
    print(f"bench-smoke: {len(benches) - len(failed)} of {len(benches)} benchmarks ran in "
          f"{time.perf_counter() - t_all:.1f} s ({jobs} at a time, {cpu_all:.1f} CPU-s, "
          f"load average {os.getloadavg()[0]:.2f})" + (f"; failed: {', '.join(failed)}" if failed else ""),
          flush=True)
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
