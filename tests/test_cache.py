"""Response cache: identical re-runs replay at $0, repeats stay independent, several
processes can write one cache file, and --replay-only turns a miss into an error."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.cache import ResponseCache
from evalkit.runner import run_suite
from evalkit.runload import load_run
from evalkit.serve import ScriptedServer

from conftest import write_engine_suite


def write_suite(root: Path, n_cases: int, **config) -> Path:
    return write_engine_suite(root, [
        {"id": f"case-{i}", "input": f"capital of Peru {i}", "expected": "Lima", "tags": ["capital"]}
        for i in range(n_cases)], **{"temperature": 0.9, "seed": 99, **config})


SCRIPT = {"rules": [{"match": "Peru", "texts": ["Lima", "Cusco", "Arequipa"]}]}


def test_get_put_keys_and_first_writer_wins(tmp_path):
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        assert cache.get("m", "h", 0) is None
        cache.put("m", "h", 0, {"text": "Lima"}, 0.5)
        cache.put("m", "h", 0, {"text": "other"}, 9.0)  # ignored: the key is taken
        cache.put("m", "h", 1, {"text": "Cusco"}, 0.25)  # another sample of the same request
        assert cache.get("m", "h", 0) == {"text": "Lima", "cost_usd": 0.5}
        assert cache.get("m", "h", 1)["text"] == "Cusco"
        assert cache.get("other-model", "h", 0) is None
        assert len(cache) == 2
    assert ResponseCache(tmp_path / "c.sqlite").get("m", "h", 1)["text"] == "Cusco"  # persisted
    mode = subprocess.run([sys.executable, "-c", "import sqlite3,sys; print(sqlite3.connect(sys.argv[1])"
                           ".execute('PRAGMA journal_mode').fetchone()[0])", str(tmp_path / "c.sqlite")],
                          capture_output=True, text=True).stdout.strip()
    assert mode == "wal"


_WRITER = """
import sys
from evalkit.cache import ResponseCache
path, worker, n, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cache = ResponseCache(path, batch=batch)
for i in range(n):
    cache.put("m", f"req-{i}", worker, {"text": f"w{worker}-{i}"}, 0.001)
    cache.put("m", "shared", i, {"text": f"w{worker}"}, 0.001)  # contended keys
    assert cache.get("m", f"req-{i}", worker)["text"] == f"w{worker}-{i}"
cache.close()
"""


def test_concurrent_writer_processes(tmp_path):
    path = str(tmp_path / "c.sqlite")
    ResponseCache(path).close()
    # Two writers commit every put, two batch them: transactions interleave on the file.
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, path, str(w), "150", str(batch)])
             for w, batch in enumerate((1, 1, 16, 16))]
    assert [p.wait(60) for p in procs] == [0, 0, 0, 0]
    with ResponseCache(path) as cache:
        assert len(cache) == 4 * 150 + 150
        assert all(cache.get("m", f"req-{i}", w)["text"] == f"w{w}-{i}" for w in range(4) for i in range(150))
        assert cache.get("m", "shared", 7)["text"] in {"w0", "w1", "w2", "w3"}


def test_identical_rerun_replays_at_zero_cost(tmp_path):
    suite = write_suite(tmp_path / "suite", 4)
    runs = tmp_path / "runs"
    with ScriptedServer(SCRIPT) as srv:
        first = run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False)
        n_first = srv.stats["requests"]
        second = run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False)
        assert srv.stats["requests"] == n_first == 24  # the re-run sent nothing
    assert first.complete and second.complete and first.spend_usd > 0
    assert second.spend_usd == 0 and second.avoided_usd == pytest.approx(first.spend_usd)
    a, b = load_run(first.path).samples, load_run(second.path).samples
    key = ["case_id", "arm", "index"]
    a, b = a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True)
    assert list(a.output) == list(b.output) and list(a.seed) == list(b.seed)
    assert not a.cached.any() and b.cached.all()
    assert (b.cost_usd == 0).all() and b.cost_avoided_usd.tolist() == pytest.approx(a.cost_usd.tolist())
    hits = load_run(second.path).ledger
    assert set(hits.event) == {"cache_hit"} and len(hits) == 24
    # Repeats stay independent samples: k=3 indices of one case and arm are three entries.
    assert len(ResponseCache(runs / "cache.sqlite")) == 24


def test_replay_only_miss_is_an_error_and_a_hit_is_free(tmp_path):
    suite = write_suite(tmp_path / "suite", 2)
    with ScriptedServer(SCRIPT) as srv:
        missing = run_suite(suite, runs_dir=tmp_path / "fresh", base_url=srv.base_url, replay_only=True,
                            progress=False)
        assert srv.stats["requests"] == 0
        assert missing.exit_code == 1 and missing.samples_ran == 0
        errors = load_run(missing.path).errors
        assert len(errors) == 12 and errors.error.str.startswith("ReplayMiss").all()

        run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        n = srv.stats["requests"]
        replay = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, replay_only=True,
                           progress=False)
        assert srv.stats["requests"] == n
    assert replay.complete and replay.spend_usd == 0 and replay.exit_code == 0
