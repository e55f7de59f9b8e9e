"""The explorer of a 100,000-sample run: how large its one file is, how long writing it
takes, and how long headless Chromium takes to show its first rows and to scroll.

The run: the one `bench_report_scale.py` writes (N/20 cases x 2 arms x k = 10, default
N = 100,000, a `contains` check each, graded with `grading.grade_run`), each output
lengthened to about `--output-chars` characters (default 400: a seeded sentence of
common words after the drawn city, so the check still decides), as a model's answers
are; then:

* `write`: `explorer.write_explorer` in a fresh child process (wall and CPU time, peak
  memory), and the file's size against the 30 MiB budget;
* `open`: the page opened from disk in Debian's Chromium, driven by Playwright (never a
  downloaded browser), repeated (default 3): the time from navigation to the first rows
  in the DOM (drawn from the page's head, its first 200 rows, while the rest is read;
  target <= 3 s on this 2-core machine) and to every row listed and filterable, each
  step's mark (`performance.mark`: decoded, inflated, parsed), the rows in the DOM (only
  those in view), then a scroll to the middle and to the end: its time and the rows in
  the DOM after it.

    .venv/bin/python benchmarks/bench_explorer.py [--samples 100000] [--repeat 3]

Writes `benchmarks/results/explorer.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
from bench_batch import write_suite
from bench_report_scale import measure, write_run  # the same run (this folder is on sys.path)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "explorer.json"
TARGET_FIRST_ROWS_S = 3.0
BUDGET_BYTES = 30 * 2**20
WORDS = (
    "the capital city is well known for its history museums river bridges and markets which visitors "
    "often describe as lively busy old new quiet large small northern southern central"
).split()


def lengthen(run: Path, chars: int, seed: int = 20261206) -> None:
    """Each output of results.jsonl made about `chars` long: the drawn answer first, then
    seeded common words (compressible as a model's prose is, not as one repeated string)."""
    rnd = random.Random(seed)
    path = run / "results.jsonl"
    lines = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            words = [d["output"] + "."]
            while sum(len(w) + 1 for w in words) < chars:
                words.append(rnd.choice(WORDS))
            d["output"] = " ".join(words)
            lines.append(json.dumps(d) + "\n")
    path.write_text("".join(lines), encoding="utf-8")


def child(step: str, args: list[str]) -> dict:
    t0 = time.perf_counter()
    out: dict = {}
    if step == "make":
        suite = write_suite(Path(args[0]), int(args[1]))
        run = write_run(suite, Path(args[2]))
        lengthen(run, int(args[3]))
        from evalkit.conclusions.grading import grade_run

        grade_run(run)
        out = {"run": str(run)}
    elif step == "write":
        from evalkit.telling import explorer

        page = explorer.write_explorer(args[0], args[1])
        out = {"rows": page.rows, "bytes": page.bytes}
    out["wall_s"] = round(time.perf_counter() - t0, 3)
    return out


def step(name: str, *args: str) -> dict:
    out, m = measure([sys.executable, __file__, "--child", name, *args])
    result = json.loads(out.strip().splitlines()[-1])
    result.update({k: v for k, v in m.items() if k != "wall_s"}, process_wall_s=m["wall_s"])
    print(f"{name}: {json.dumps(result)[:300]}", flush=True)
    return result


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("Debian's chromium is needed (tools/install-chromium.sh)")


def open_once(browser, page_path: Path) -> dict:
    """One fresh page: the page's own times (from navigation start, `performance.now()`)
    to its first rows in the DOM (drawn from the head, before the rest is read) and to
    every row filterable, each step's mark, the wall time to the latter seen from here,
    the rows in the DOM, then scrolls to the middle and the end."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    try:
        load = round(os.getloadavg()[0], 2)
        t0 = time.perf_counter()
        page.goto(page_path.resolve().as_uri(), timeout=60000, wait_until="commit")
        page.wait_for_selector("body[data-ready='1']", timeout=120000)
        wall = time.perf_counter() - t0
        ready_ms = int(page.get_attribute("body", "data-ready-ms") or 0)
        first_ms = int(page.get_attribute("body", "data-first-rows-ms") or ready_ms)
        marks = page.evaluate("performance.getEntriesByType('mark').map(m => [m.name, Math.round(m.startTime)])")
        in_dom = page.locator("#rows .row").count()
        total = page.text_content("#count")
        scrolls = {}
        for where, expr in (("middle", "el.scrollHeight / 2"), ("end", "el.scrollHeight")):
            t1 = time.perf_counter()
            page.evaluate(f"(() => {{ const el = document.getElementById('list'); el.scrollTop = {expr}; }})()")
            page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            scrolls[where] = {
                "s": round(time.perf_counter() - t1, 3),
                "rows_in_dom": page.locator("#rows .row").count(),
                "first_row_case": page.get_attribute("#rows .row", "data-case"),
            }
        return {
            "first_rows_s": round(first_ms / 1000, 3),
            "all_rows_s": round(ready_ms / 1000, 3),
            "wall_to_all_rows_s": round(wall, 3),
            "marks_ms": dict(marks),
            "rows_in_dom": in_dom,
            "count": total,
            "scroll": scrolls,
            "load_average_1m": {"before": load, "after": round(os.getloadavg()[0], 2)},
        }
    finally:
        page.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--output-chars", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    _smoke.add(ap)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1:])), flush=True)
        return
    _smoke.apply(args, RESULTS, samples=200, repeat=1)
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="evalkit-bench-explorer-"))
    result: dict = {
        "benchmark": "the explorer (explorer.html) of a 100,000-sample two-arm run, opened in headless Chromium",
        "command": f"python benchmarks/bench_explorer.py --samples {args.samples} --output-chars {args.output_chars}",
        "samples": args.samples,
        "output_chars": args.output_chars,
    }
    try:
        made = step("make", str(work / "suite"), str(args.samples), str(work / "runs"), str(args.output_chars))
        run = Path(made["run"])
        result["run_bytes"] = {p.name: p.stat().st_size for p in sorted(run.glob("*.jsonl"))}
        result["write"] = step("write", str(run), str(work / "pages"))
        page_path = work / "pages" / "explorer.html"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox", "--disable-gpu"])
            try:
                opens = [open_once(browser, page_path) for _ in range(args.repeat)]
            finally:
                browser.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    firsts = [o["first_rows_s"] for o in opens]
    size = result["write"]["bytes"]
    result["open"] = {
        "repeats": opens,
        "median_first_rows_s": statistics.median(firsts),
        "max_first_rows_s": max(firsts),
        "median_all_rows_s": statistics.median(o["all_rows_s"] for o in opens),
    }
    result["file_mib"] = round(size / 2**20, 2)
    result["targets"] = {"first_rows_s": TARGET_FIRST_ROWS_S, "file_mib": BUDGET_BYTES / 2**20}
    result["meets_targets"] = statistics.median(firsts) <= TARGET_FIRST_ROWS_S and size <= BUDGET_BYTES
    result["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}
    result["measured"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("file_mib", "meets_targets")} | {"open": result["open"]}, indent=1))
    if not result["meets_targets"] and not args.smoke:
        sys.exit(1)


if __name__ == "__main__":
    main()
