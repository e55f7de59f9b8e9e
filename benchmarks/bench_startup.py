"""Start-up: the CPU time of a command from a fresh interpreter (`evalkit ...` as a user
types it), each against `evalkit --help`. Target: `verdict`, `power` and `lint` within
1.5x of `--help` (they import neither pandas nor openai; `verdict` and `lint` no scipy).

Each command runs `--repeat` times in a fresh process (`python -m evalkit._cli.main ...`); the
child's user + system CPU comes from `wait4`, its peak resident memory too. With
`--tree DIR` the commands run on the evalkit package in DIR (e.g. an older commit:
`git archive <commit> evalkit | tar -x -C DIR`), for a before/after figure.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 7] [--tree DIR] [--label after]

Writes `benchmarks/results/startup.json` (one entry per label, so before and after
stay side by side).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "startup.json"
COMMANDS = {
    "--help": ["--help"],
    "verdict": ["verdict", "--wins", "10", "--ties", "2", "--losses", "1"],
    "power": ["power", "--win-rate", "0.7", "--alpha", "0.05", "--power", "0.8"],
    "lint": ["lint", str(ROOT / "data" / "factual")],
    "run --help": ["run", "--help"],
    # a run refused for want of an endpoint (exit 2): everything `run` loads before its first call
    "run (refused)": ["run", str(ROOT / "data" / "factual"), "--no-progress", "--runs-dir", "/nonexistent/runs"],
}
EXIT = {"run (refused)": 2}
HEAVY = ("pandas", "scipy", "openai", "papermill", "matplotlib")
_PROBE = (
    "import os, runpy, sys, atexit\n"
    "tree = os.environ.get('EVALKIT_BENCH_TREE')\n"
    "if tree:  # that folder's evalkit, not the editable install's\n"
    "    sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in type(f).__module__]\n"
    "    sys.path.insert(0, tree)\n"
    "atexit.register(lambda: print('HEAVY=' + ','.join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr))\n"
    "atexit.register(lambda: print('FROM=' + sys.modules['evalkit'].__file__, file=sys.stderr))\n"
    "sys.argv = ['evalkit', *sys.argv[1:]]\n"
    "runpy.run_module('evalkit._cli.main', run_name='__main__')\n"
)


def once(args: list[str], env: dict[str, str], expect: int = 0) -> tuple[float, float, str]:
    proc = subprocess.Popen([sys.executable, "-c", _PROBE.format(heavy=HEAVY), *args], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != expect:
        raise SystemExit(f"evalkit {' '.join(args)} failed: {err[-2000:]}")
    heavy = next((line[6:] for line in err.splitlines() if line.startswith("HEAVY=")), "")
    where = next((line[5:] for line in err.splitlines() if line.startswith("FROM=")), "")
    tree = env.get("EVALKIT_BENCH_TREE")
    if tree and not where.startswith(tree):
        raise SystemExit(f"evalkit came from {where}, not from {tree}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, heavy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--tree", help="a folder holding the evalkit package to measure instead of this checkout's")
    ap.add_argument("--label", default="after")
    ap.add_argument("--out", default=str(RESULTS))
    _smoke.add(ap)
    args = ap.parse_args()
    _smoke.apply(args, RESULTS, repeat=1)
    env = {**os.environ}
    if args.tree:
        env["EVALKIT_BENCH_TREE"] = str(Path(args.tree).resolve())
    rows = {}
    for name, argv in COMMANDS.items():
        runs = [once(argv, env, EXIT.get(name, 0)) for _ in range(args.repeat)]
        rows[name] = {"cpu_s": statistics.median(r[0] for r in runs), "peak_rss_mib": max(r[1] for r in runs),
                      "heavy_modules": runs[-1][2].split(",") if runs[-1][2] else [],
                      "all_cpu_s": [round(r[0], 3) for r in runs]}
    base = rows["--help"]["cpu_s"]
    for row in rows.values():
        row["ratio_to_help"] = round(row["cpu_s"] / base, 3)
        row["cpu_s"] = round(row["cpu_s"], 3)
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.exists() and not args.smoke else {}
    doc.setdefault("benchmark", "start-up CPU of evalkit commands against evalkit --help")
    doc["target"] = "verdict, power, lint: CPU within 1.5x of --help"
    doc[args.label] = {"tree": args.tree or "this checkout", "repeat": args.repeat, "commands": rows,
                       "load_average_1m": round(os.getloadavg()[0], 2),
                       "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                       "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    for name, row in rows.items():
        print(f"{args.label} {name}: {row['cpu_s']:.3f} CPU-s ({row['ratio_to_help']:.2f}x --help), "
              f"{row['peak_rss_mib']:.0f} MiB, heavy: {','.join(row['heavy_modules']) or 'none'}")


if __name__ == "__main__":
    main()
