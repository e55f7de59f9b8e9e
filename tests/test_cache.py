"""Response cache: identical re-runs replay at $0, repeats stay independent, several
processes can write one cache file, and --replay-only turns a miss into an error."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.foundations.errors import ReplayMiss
from evalkit.calls.cache import ResponseCache
from evalkit.running.runner import run_suite
from evalkit.runfolder.runload import load_run
from evalkit.calls.serve import ScriptedServer

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


def test_a_scope_keeps_answers_to_the_caller_that_asked(tmp_path):
    """The judge's cache is scoped (endpoint, judge files): the same model name and request
    from another judge is a miss, and an unscoped cache sees neither scoped entry."""
    path = tmp_path / "judge.sqlite"
    with ResponseCache(path, scope="judge-at-8080") as a:
        a.put("judge-model", "h", 0, {"text": "SCORE: 5 REASON: a"}, 0.1)
        assert a.get("judge-model", "h", 0)["text"] == "SCORE: 5 REASON: a"
    with ResponseCache(path, scope="judge-at-9090") as b:
        assert b.get("judge-model", "h", 0) is None
        b.put("judge-model", "h", 0, {"text": "SCORE: 1 REASON: b"}, 0.1)
    assert ResponseCache(path, scope="judge-at-8080").get("judge-model", "h", 0)["text"].endswith("a")
    assert ResponseCache(path).get("judge-model", "h", 0) is None


_WRITER = """
import sys
from evalkit.calls.cache import ResponseCache
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
        # every sample missed: ReplayMiss, and no run folder left (issue 42 item 9)
        with pytest.raises(ReplayMiss, match="none of the 12 samples has a cached answer"):
            run_suite(suite, runs_dir=tmp_path / "fresh", base_url=srv.base_url, replay_only=True, progress=False)
        assert srv.stats["requests"] == 0
        assert not [p for p in (tmp_path / "fresh").iterdir() if p.is_dir()]

        run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        n = srv.stats["requests"]
        replay = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, replay_only=True,
                           progress=False)
        assert srv.stats["requests"] == n
    assert replay.complete and replay.spend_usd == 0 and replay.exit_code == 0


def test_answers_are_replayed_only_to_the_endpoint_that_gave_them(tmp_path):
    """Two servers serving the same model name: the second run used to replay the
    first server's cached answers and record them as its samples."""
    suite = write_suite(tmp_path / "suite", 2)
    runs = tmp_path / "runs"
    with ScriptedServer({"rules": [{"match": "Peru", "text": "Lima"}]}) as a, \
            ScriptedServer({"rules": [{"match": "Peru", "text": "Cusco"}]}) as b:
        first = run_suite(suite, runs_dir=runs, base_url=a.base_url, progress=False)
        other = run_suite(suite, runs_dir=runs, base_url=b.base_url, progress=False)
        assert b.stats["requests"] == 12  # asked, not replayed from a's answers
        again = run_suite(suite, runs_dir=runs, base_url=a.base_url + "/", progress=False)  # the same endpoint
        assert a.stats["requests"] == 12
    assert set(load_run(first.path).samples.output) == {"Lima"}
    assert set(load_run(other.path).samples.output) == {"Cusco"} and other.avoided_usd == 0
    assert set(load_run(again.path).samples.output) == {"Lima"} and again.spend_usd == 0


def test_entries_without_an_endpoint_stay_readable_and_are_misses_for_an_endpoint(tmp_path):
    """A cache file from before (entries keyed without an endpoint: the judge's are still
    written so) answers a lookup without an endpoint as before; a lookup for an endpoint
    does not take them, since nothing says which server gave them."""
    import sqlite3

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:  # the table as evalkit wrote it before the endpoint key
        conn.execute("CREATE TABLE responses (model TEXT NOT NULL, request_hash TEXT NOT NULL, sample_index "
                     "INTEGER NOT NULL, response TEXT NOT NULL, cost_usd REAL NOT NULL, created REAL NOT NULL, "
                     "PRIMARY KEY (model, request_hash, sample_index))")
        conn.execute("INSERT INTO responses VALUES ('m', 'h', 0, '{\"text\": \"old\"}', 0.5, 0)")
    with ResponseCache(path) as cache:
        assert cache.get("m", "h", 0) == {"text": "old", "cost_usd": 0.5}
        assert cache.get("m", "h", 0, endpoint="http://127.0.0.1:1/v1") is None
        cache.put("m", "h", 0, {"text": "new"}, 0.25, endpoint="http://127.0.0.1:1/v1")
        cache.put("m", "h", 0, {"text": "other server"}, 0.25, endpoint="http://127.0.0.1:2/v1")
    with ResponseCache(path) as cache:
        assert cache.get("m", "h", 0, endpoint="http://127.0.0.1:1/v1")["text"] == "new"
        assert cache.get("m", "h", 0, endpoint="http://127.0.0.1:2/v1")["text"] == "other server"
        assert cache.get("m", "h", 0)["text"] == "old" and len(cache) == 3


def test_the_endpoint_key_is_the_normalized_base_url():
    from evalkit.suites.endpoints import endpoint_key

    assert endpoint_key("HTTP://LocalHost:80/v1/") == endpoint_key("http://localhost/v1") == "http://localhost/v1"
    assert endpoint_key("https://api.example.org:443/v1") == "https://api.example.org/v1"
    assert endpoint_key("http://127.0.0.1:8080/v1") != endpoint_key("http://localhost:8080/v1")
    assert endpoint_key("http://[::1]:9/v1/") == "http://[::1]:9/v1"
    assert endpoint_key("http://127.0.0.1:1/v1") != endpoint_key("http://127.0.0.1:2/v1")
