"""The sampling engine end to end, over HTTP to the scripted server: seeds, errors,
INCOMPLETE runs and their exit status, chat mode, and a SIGKILLed run resumed with every
key exactly once and nothing paid twice."""
from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalkit.foundations.errors import InputError
from evalkit.running.runner import derive_seed, run_suite
from evalkit.runfolder.runload import load_run
from evalkit.runfolder.runs import iter_jsonl
from evalkit.calls.serve import ScriptedServer

from conftest import private_tmpfs, write_engine_suite

def write_suite(root: Path, n_cases: int, **config) -> Path:
    return write_engine_suite(root, [
        {"id": f"case-{i:02d}", "input": f"capital of country {i}?", "expected": "Paris",
         "tags": ["capital", "golden" if i % 2 else "adversarial"]} for i in range(n_cases)], **config)


SCRIPT = {"rules": [{"match": "country", "texts": ["Paris", "Lima", "Rome"]}]}


def cli(*args: str):
    """`evalkit run ...` through click in this process (a subprocess pays every import
    again); the SIGKILL test below runs the real command in its own process."""
    from click.testing import CliRunner
    from evalkit._cli.main import main
    return CliRunner().invoke(main, ["run", *args, "--no-progress"])


def test_seeds_are_recorded_distinct_and_sent(tmp_path):
    suite = write_suite(tmp_path / "suite", 5)
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        sent = sorted(r["seed"] for r in srv.requests)
    s = load_run(res.path).samples
    assert res.complete and res.exit_code == 0 and len(s) == 5 * 2 * 3
    assert s.seed.is_unique and sorted(s.seed) == sent
    for row in s.itertuples():
        assert row.seed == derive_seed(1234, row.case_id, row.arm, row.index)
    assert all(sorted(g) == [0, 1, 2] for _, g in s.groupby(["case_id", "arm"])["index"])
    # Stable across processes, versions and hash randomisation (sha256, not hash()):
    # pinned, so a change that would silently re-seed old suites fails here.
    assert derive_seed(1234, "case-01", "guided", 2) == 1475107180
    assert derive_seed(1234, "case-01", "guided", 2) != derive_seed(1235, "case-01", "guided", 2)


def test_run_folder_records(tmp_path):
    suite = write_suite(tmp_path / "suite", 2, k=2)
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    run = load_run(res.path)
    paid = run.samples.groupby("arm").cost_usd.sum()
    per_arm = {a: {"samples": 4, "errors": 0, "missing": 0, "paid_usd": pytest.approx(paid[a]), "avoided_usd": 0.0,
                   "paid_per_case_usd": pytest.approx(paid[a] / 2), "model": "scripted"} for a in ("base", "guided")}
    assert run.config["arms"] == ["base", "guided"] and run.config["k"] == 2
    assert run.config["cases"] == ["case-00", "case-01"] and len(run.config["config_hash"]) == 64
    assert run.summary == {"complete": True, "ran": 2, "total": 2, "samples_ran": 8, "samples_total": 8,
                           "reason": None, "spend_usd": res.spend_usd, "avoided_usd": 0.0, "cap_usd": 1.0,
                           "ceiling_breaches": 0, "untrusted_usage": 0, "samples_errored": 0, "samples_missing": 0,
                           "per_arm": per_arm,
                           "exit_code": 0}
    assert not (res.path / "summary.md").read_text().startswith("INCOMPLETE")
    for row in run.samples.itertuples():
        text = (res.path / "samples" / row.case_id / row.arm / f"sample-{row.index + 1}.txt").read_text()
        assert text == row.output and row.output in {"Paris", "Lima", "Rome"}
        assert row.tags == ["capital", "golden" if row.case_id == "case-01" else "adversarial"]
        assert row.system_fingerprint == "fp_evalkit_scripted" and len(row.request_hash) == 64
    assert res.spend_usd == pytest.approx(run.samples.cost_usd.sum())


def test_incomplete_run_exits_1_with_the_line_first_in_summary(tmp_path):
    worst = (64 * 1.0 + 8 * 2.0) / 1e6
    suite = write_suite(tmp_path / "suite", 6, cost_cap_usd=worst * 5, concurrency=2)
    with ScriptedServer({**SCRIPT, "latency_s": 0.01}) as srv:
        proc = cli(str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url", srv.base_url)
    assert proc.exit_code == 1, proc.stderr
    folder = Path(re.search(r"run folder: (\S+)", proc.stdout).group(1))
    first = (folder / "summary.md").read_text().splitlines()[0]
    assert re.fullmatch(r"INCOMPLETE: \d/6 cases \(budget exhausted\)", first)
    assert first in proc.stderr.splitlines()
    assert json.loads((folder / "summary.json").read_text())["exit_code"] == 1
    assert "spend: $" in proc.stdout and "base: " in proc.stdout


def test_bad_input_exits_2_and_writes_nothing(tmp_path):
    suite = write_suite(tmp_path / "suite", 2)
    proc = cli(str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url", "http://127.0.0.1:9/v1",
               "--arms", "base,nope")
    assert proc.exit_code == 2 and "unknown arm(s) nope" in proc.stderr and "config.json" in proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    proc = cli(str(suite), "--k", "0", "--runs-dir", str(tmp_path / "runs"))
    assert proc.exit_code == 2 and "k must be at least 1" in proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_errored_keys_are_recorded_and_resume_runs_only_them(tmp_path):
    suite = write_suite(tmp_path / "suite", 4, k=2)
    faulty = {**SCRIPT, "faults": [{"kind": "500", "match": "country 2?"}]}  # every call for case-02
    with ScriptedServer(faulty) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert not res.complete and res.exit_code == 1 and res.reason == "4 sample(s) errored"
    assert (res.ran, res.total, res.samples_ran) == (3, 4, 12)
    run = load_run(res.path)
    assert set(run.errors.case_id) == {"case-02"} and (run.errors.attempts == 2).all()
    assert run.errors.error.str.contains("HTTP 500").all()
    assert "case-02" not in set(run.samples.case_id)  # no invented output
    with ScriptedServer(SCRIPT) as srv:
        again = run_suite(suite, base_url=srv.base_url, resume=res.path, progress=False)
        assert srv.stats["requests"] == 4
        assert {r["prompt"].split("country ")[1] for r in srv.requests} == {"2?\nA:"}
    assert again.complete and again.exit_code == 0 and again.path == res.path
    assert len(load_run(res.path).samples) == 16


def test_resume_refuses_a_changed_config(tmp_path):
    suite = write_suite(tmp_path / "suite", 2, k=1)
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        write_suite(tmp_path / "suite", 2, k=1, temperature=0.1)
        with pytest.raises(InputError, match="changed since this run"):
            run_suite(suite, base_url=srv.base_url, resume=res.path, progress=False)


def test_chat_mode_sends_messages_and_tools(tmp_path):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    suite = write_suite(tmp_path / "suite", 2, k=1, mode="chat", tools=tools, max_tokens_in=256)
    (suite / "system.txt").write_text("You look things up.")
    cfg = json.loads((suite / "config.json").read_text())
    (suite / "config.json").write_text(json.dumps({**cfg, "system": "system.txt"}))
    script = {"rules": [{"match": "country 0", "tool_calls": [{"name": "lookup", "arguments": {"q": "0"}}]},
                        {"match": "country", "text": "Paris"}]}
    with ScriptedServer(script) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        bodies = srv.requests
    assert res.complete
    assert all(b["tools"] == tools and b["messages"][0] == {"role": "system", "content": "You look things up."}
               for b in bodies)
    s = load_run(res.path).samples.set_index(["case_id", "arm"])
    assert s.loc[("case-00", "base")].tool_calls == [{"name": "lookup", "arguments": {"q": "0"}, "id": s.loc[
        ("case-00", "base")].tool_calls[0]["id"]}]
    assert s.loc[("case-01", "guided")].output == "Paris"


def _spawn_run(suite, runs, base_url: str, *, session: bool = False, **env: str) -> subprocess.Popen:
    """`evalkit run` in a process of its own (to be killed or raced), output discarded;
    `session`: in a process group of its own, which its children (the sample writer) join."""
    return subprocess.Popen([sys.executable, "-m", "evalkit._cli.main", "run", str(suite), "--runs-dir", str(runs),
                             "--base-url", base_url, "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env},
                            start_new_session=session)


def _wait_group_gone(pgid: int, timeout_s: float = 60.0) -> bool:
    """Wait until no process of group `pgid` is left (a killed run's orphaned sample
    writer draining its pipe); False when one still runs after `timeout_s`. A bounded
    poll: the writer is no child of this process (no wait() for it) and holds no pipe of
    this test's (its stdout and stderr are its own), so its exit sends this test no event."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_sigkill_mid_run_then_resume_every_key_once_nothing_paid_twice(tmp_path):
    suite = write_suite(tmp_path / "suite", 12, k=3, concurrency=4)
    runs = tmp_path / "runs"
    # The first four keys of case-05 are held by the server: once all four workers wait on
    # them, cases 0-4 (30 keys) are written and four calls are in flight (events, not a
    # line count polled against the clock); the run is killed there.
    held = {**SCRIPT, "faults": [{"kind": "slow", "hold": True, "match": "country 5?", "times": 4}]}
    with ScriptedServer(held) as srv:
        proc = _spawn_run(suite, runs, srv.base_url, session=True, EVALKIT_SAMPLE_WRITER_AFTER="0")  # the helper too
        reached = srv.wait_until(lambda stats: stats["faults"]["slow"] >= 4, 120)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        srv.release()  # the held calls answer a dead connection; the resume's are not held
        assert reached, "the run never reached its held keys"
        (results,) = runs.glob("*/results.jsonl")
        folder = results.parent
        assert not (folder / "summary.json").exists()  # it really died mid-run
        before = {(r["case_id"], r["arm"], r["index"]) for r in iter_jsonl(results)}
        assert 15 <= len(before) < 72
        assert before == {(f"case-{c:02d}", a, i) for c in range(5) for a in ("base", "guided") for i in range(3)}
        epoch1 = {e["run_epoch"] for e in iter_jsonl(folder / "ledger.jsonl")}
        requests_before = srv.stats["requests"]

        res = run_suite(suite, base_url=srv.base_url, resume=folder, progress=False)
        requests_resumed = srv.stats["requests"] - requests_before

    assert res.complete and res.exit_code == 0
    keys = [(r["case_id"], r["arm"], r["index"]) for r in iter_jsonl(folder / "results.jsonl")]
    counts = collections.Counter(keys)
    assert len(counts) == 72 and set(counts.values()) == {1}  # every key exactly once

    ledger = list(iter_jsonl(folder / "ledger.jsonl"))
    later = [e for e in ledger if e["run_epoch"] not in epoch1]
    touched_later = {tuple(e["key"].rsplit("/", 2)) for e in later if e["event"] in ("reserve", "cache_hit")}
    touched_later = {(c, a, int(i)) for c, a, i in touched_later}
    assert not touched_later & before  # a finished key was neither paid nor replayed again
    assert touched_later == set(counts) - before
    assert requests_resumed == sum(1 for e in later if e["event"] == "reserve")
    # The spend carried forward: every settled cost, plus calls left in flight by the kill.
    settled = sum(e.get("cost_usd", 0.0) for e in ledger if e["event"] in ("settle", "release"))
    reserved = {(e["run_epoch"], e["id"]): e["amount_usd"] for e in ledger if e["event"] == "reserve"}
    closed = {(e["run_epoch"], e["id"]) for e in ledger if e["event"] in ("settle", "release")}
    in_flight = sum(v for k, v in reserved.items() if k not in closed)
    assert res.spend_usd == pytest.approx(settled + in_flight)
    paid = sum(r["cost_usd"] for r in iter_jsonl(folder / "results.jsonl"))
    assert res.spend_usd >= paid - 1e-12
    # Every finished sample has its text file (the killed run's helper drained its pipe,
    # the resume wrote whatever was still missing), and nothing else is there, once the
    # orphaned helper has exited (under load it could still hold a temporary file here)
    assert _wait_group_gone(proc.pid), "the killed run's sample writer never exited"
    files = {p.relative_to(folder / "samples").as_posix(): p.read_text() for p in (folder / "samples").rglob("*")
             if p.is_file()}
    assert files == {f"{r['case_id']}/{r['arm']}/sample-{r['index'] + 1}.txt": r["output"]
                     for r in iter_jsonl(folder / "results.jsonl")}


def test_no_paid_retry_after_a_ceiling_breach(tmp_path):
    # case-00 over-reports after 0.2 s; case-01 gets a 429 asking to retry after 1 s,
    # by which time the run has stopped: that retry must never go out.
    suite = write_suite(tmp_path / "suite", 2, k=1, concurrency=4, max_attempts=4)
    script = {"rules": [{"match": "country 0", "text": "Paris", "usage": {"prompt_tokens": 5, "completion_tokens": 50}},
                        {"match": "country", "text": "Lima"}],
              "faults": [{"kind": "429", "retry_after": 1.0, "times": 3, "match": "country 1"}], "latency_s": 0.2}
    with ScriptedServer(script) as srv:
        res = run_suite(suite, arms=["base"], runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert srv.stats["requests"] == 2 and srv.stats["faults"]["429"] == 1
    assert res.reason == "ceiling breached" and res.exit_code == 1
    ledger = list(iter_jsonl(res.path / "ledger.jsonl"))
    breach_at = next(i for i, e in enumerate(ledger) if e.get("breach"))
    assert not [e for e in ledger[breach_at:] if e["event"] == "reserve"]  # nothing paid after the breach
    errors = {e["case_id"]: e["error"] for e in iter_jsonl(res.path / "errors.jsonl")}
    assert "stopped before attempt 2: ceiling breached" in errors["case-01"]


def test_resume_refuses_changed_templates_guidance_or_cases_naming_what_changed(tmp_path):
    suite = write_suite(tmp_path / "suite", 2, k=1)
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        meta = json.loads((res.path / "config.json").read_text())
        assert len(meta["inputs_hash"]) == 64 and "prompt template (prompt.txt)" in meta["inputs"]
        edits = [("prompt.txt", "${guidance}Question: ${input}\nA:", "prompt template (prompt.txt)"),
                 ("guided.md", "Answer in two words. ", "guidance of arm 'guided' (guided.md)"),
                 ("cases.jsonl", (suite / "cases.jsonl").read_text().replace("country 1", "country 9"), "cases")]
        for name, text, named in edits:
            original = (suite / name).read_text()
            (suite / name).write_text(text)
            proc = cli(str(suite), "--resume", str(res.path), "--base-url", srv.base_url)
            assert proc.exit_code == 2 and named in proc.stderr and "changed since this run started" in proc.stderr
            assert str(res.path) in proc.stderr
            (suite / name).write_text(original)
        assert srv.stats["requests"] == 4  # the refused resumes called nothing
        again = run_suite(suite, base_url=srv.base_url, resume=res.path, progress=False)
    assert again.complete  # unchanged inputs resume


def test_model_text_that_is_not_a_string_errors_the_sample_and_the_run_still_writes_its_summary(tmp_path):
    from test_client import HostileServer, completion_body

    suite = write_suite(tmp_path / "suite", 2, k=1, max_attempts=1)

    def answer(body):
        return completion_body(text={"a": 1}) if "country 0" in body["prompt"] else completion_body(text="Paris")

    with HostileServer(answer) as srv:
        proc = cli(str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url", srv.base_url)
    assert proc.exit_code == 1 and isinstance(proc.exception, (SystemExit, type(None)))
    assert "Traceback" not in proc.output
    folder = Path(re.search(r"run folder: (\S+)", proc.stdout).group(1))
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["exit_code"] == 1 and summary["samples_ran"] == 2
    assert (folder / "summary.md").read_text().startswith("INCOMPLETE: 1/2 cases (2 sample(s) errored)")
    run = load_run(folder)
    assert set(run.errors.case_id) == {"case-00"}
    assert run.errors.error.str.contains("text is a dict, not a string").all()


def test_two_processes_never_share_a_run_folder(tmp_path):
    suite = write_suite(tmp_path / "suite", 12, k=3, concurrency=2)
    runs = tmp_path / "runs"
    # The last case's first key is held by the server: the first run is surely still
    # going while the second tries its folder (events, not a latency it might outrun).
    held = {**SCRIPT, "latency_s": 0.01, "faults": [{"kind": "slow", "hold": True, "match": "country 11", "times": 1}]}
    with ScriptedServer(held) as srv:
        first = _spawn_run(suite, runs, srv.base_url)
        try:
            assert srv.held.wait(timeout=120), "the first run never reached its held key"
            folder = next(runs.glob("*/results.jsonl")).parent
            # the second process is this one (the first holds the folder's flock in its own)
            second = cli(str(suite), "--resume", str(folder), "--base-url", srv.base_url)
            assert second.exit_code == 2, second.output
            assert "another evalkit process" in second.stderr and str(folder) in second.stderr
            assert "Traceback" not in second.stderr
            # The refused process opened no ledger and wrote no line: one writer only.
            assert len({e["run_epoch"] for e in iter_jsonl(folder / "ledger.jsonl")}) == 1
            assert first.poll() is None  # still running, holding the folder's lock
        finally:
            os.kill(first.pid, signal.SIGKILL)  # the kernel drops its lock with it
            first.wait()
            srv.release()
        assert not (folder / "summary.json").exists()
        res = run_suite(suite, base_url=srv.base_url, resume=folder, progress=False)
    assert res.complete
    counts = collections.Counter((r["case_id"], r["arm"], r["index"]) for r in iter_jsonl(folder / "results.jsonl"))
    assert len(counts) == 72 and set(counts.values()) == {1}


def test_the_heap_frozen_for_a_run_is_handed_back_and_a_callers_freeze_left_alone(tmp_path):
    import gc

    from evalkit.running.runner import _frozen_heap

    assert gc.get_freeze_count() == 0
    with _frozen_heap():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        with _frozen_heap():
            pass
        # The caller's objects stay frozen (an unfreeze would empty the permanent
        # generation; its count only drifts down as frozen objects are freed).
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_key_refused_on_its_retry_keeps_its_paid_attempt_and_error(tmp_path):
    # Review finding: attempt 1 (a dropped connection, charged at the worst case) was
    # paid, attempt 2 was refused by the cap, and the key left no errors.jsonl line.
    worst = (64 * 1.0 + 8 * 2.0) / 1e6
    suite = write_suite(tmp_path / "suite", 1, k=1, cost_cap_usd=worst * 1.5, max_attempts=3)
    with ScriptedServer({**SCRIPT, "faults": [{"kind": "drop", "times": 1}]}) as srv:
        res = run_suite(suite, arms=["base"], runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert srv.stats["requests"] == 1
    assert res.reason == "budget exhausted" and res.exit_code == 1
    errors = list(iter_jsonl(res.path / "errors.jsonl"))
    assert [(e["case_id"], e["attempts"]) for e in errors] == [("case-00", 1)]
    assert "attempt 1: connection error" in errors[0]["error"] and "attempt 2 refused: budget exhausted" in errors[0]["error"]
    assert res.spend_usd == pytest.approx(worst)


# --- what a run reads and where it writes: inside the suite only --------------------------
def _nothing_written(runs: Path) -> bool:
    return not runs.exists() or not any(runs.iterdir())


def test_a_guidance_or_cases_symlink_out_of_the_suite_makes_run_refuse_before_any_call(tmp_path):
    secret = tmp_path / "outside" / "secret.md"
    secret.parent.mkdir()
    secret.write_text("SECRET TEXT FROM OUTSIDE THE SUITE ")
    suite = write_suite(tmp_path / "suite", 2)
    (suite / "guided.md").unlink()
    (suite / "guided.md").symlink_to(secret)
    with ScriptedServer(SCRIPT) as srv:
        proc = cli(str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url", srv.base_url)
        assert srv.requests == []  # the outside file's content never reached the endpoint
    assert proc.exit_code == 2, proc.output
    assert f"{suite / 'guided.md'}: resolves to {secret}, outside the suite folder" in proc.stderr
    assert _nothing_written(tmp_path / "runs")
    (suite / "guided.md").unlink()
    (suite / "guided.md").write_text("Answer in one word. ")
    (secret.parent / "cases.jsonl").write_text((suite / "cases.jsonl").read_text())
    (suite / "cases.jsonl").unlink()
    (suite / "cases.jsonl").symlink_to(secret.parent / "cases.jsonl")
    proc = cli(str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url", "http://127.0.0.1:9/v1")
    assert proc.exit_code == 2 and "cases.jsonl: resolves to" in proc.stderr
    assert _nothing_written(tmp_path / "runs")


def test_a_runs_symlink_out_of_the_suite_is_refused_unless_runs_dir_names_the_place(tmp_path):
    suite = write_suite(tmp_path / "suite", 1, k=1)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (suite / "runs").symlink_to(target)
    with ScriptedServer(SCRIPT) as srv:
        proc = cli(str(suite), "--base-url", srv.base_url)
        assert proc.exit_code == 2, proc.output
        assert f"{suite / 'runs'}: is a symlink to {target}, outside the suite folder" in proc.stderr
        assert "--runs-dir" in proc.stderr and srv.requests == [] and not any(target.iterdir())
        proc = cli(str(suite), "--base-url", srv.base_url, "--runs-dir", str(target))  # asked for: written
        assert proc.exit_code == 0, proc.output
    assert len([p for p in target.iterdir() if p.is_dir()]) == 1


def test_a_config_no_call_fits_under_and_an_oversized_k_are_refused_before_a_folder_is_made(tmp_path):
    suite = write_suite(tmp_path / "suite", 2, max_tokens_out=2_000_000)  # 2e6 x $2/Mtok = $4 > cap $1
    with ScriptedServer(SCRIPT) as srv:
        proc = cli(str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url", srv.base_url)
        assert proc.exit_code == 2 and "0 calls fit under the cap" in proc.stderr and "max_tokens_out" in proc.stderr
        assert _nothing_written(tmp_path / "runs")
        suite = write_suite(tmp_path / "suite2", 2)
        proc = cli(str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url", srv.base_url, "--k", "1001")
        assert proc.exit_code == 2 and "k must be at most 1000" in proc.stderr
        assert srv.requests == [] and _nothing_written(tmp_path / "runs")


def reserves_per_key(run_path: Path) -> collections.Counter:
    """Reservations per key that went out: one released "not sent" (the run stopped while
    it waited for room, Ledger.reserve_waiting) never reached the server and is no attempt."""
    lines = list(iter_jsonl(run_path / "ledger.jsonl"))
    unsent = {e["id"] for e in lines if e.get("reason") == "not sent"}
    return collections.Counter(e["key"] for e in lines if e["event"] == "reserve" and e["id"] not in unsent)


def kill_when_results(runs: Path, n: int, pid: int, watch: collections.abc.Callable[[], str | None],
                      sig: int = signal.SIGSEGV, timeout_s: float = 120,
                      ) -> tuple[dict, collections.abc.Callable[[], str | None]]:
    """In a thread: once a run folder under `runs` holds `n` results, send `sig` to
    `pid`. Returns a dict that gets `reached` (the n results came) and the time of the
    kill (`t`), and the watch to run with: `watch`, which also counts the results each
    time the run asks it (before every sample and attempt: the first just after a result
    is appended), so the kill waits on that event, not on a clock."""
    import threading

    out: dict = {}
    reached = threading.Event()

    def counting() -> str | None:
        if not reached.is_set():
            files = list(runs.glob("*/results.jsonl"))
            if files and len(files[0].read_text().splitlines()) >= n:
                out["reached"] = True
                reached.set()
        return watch()

    def go() -> None:
        if reached.wait(timeout_s):
            out["t"] = time.monotonic()
            os.kill(pid, sig)

    threading.Thread(target=go, daemon=True).start()
    return out, counting


def test_a_watched_server_that_dies_stops_the_run_at_once_naming_the_signal_and_its_log(tmp_path):
    """A real server process (the scripted server, in its own process) killed by SIGSEGV
    mid-run: the run stops at once, INCOMPLETE, the summary names the signal and the
    server's last log line, no key is retried against the dead port, and the spend is
    what the calls made before the crash cost, far below the cap."""
    from evalkit.calls.serve import ServerProcess

    script = tmp_path / "script.json"
    script.write_text(json.dumps({**SCRIPT, "latency_s": 0.2}))
    suite = write_suite(tmp_path / "suite", 20, k=3, concurrency=4, max_attempts=4)
    runs = tmp_path / "runs"
    with ServerProcess([sys.executable, "-m", "evalkit._cli.main", "serve", "--scripted", str(script), "--port", "{port}"],
                       startup_timeout_s=60) as srv:
        killed, watch = kill_when_results(runs, 6, srv.pid, srv.exit_reason)
        res = run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False, watch=watch)
        assert killed.get("reached"), "the run ended before it wrote 6 results"
        stopped_after_s = time.monotonic() - killed["t"]
        log = srv.log_tail()
    assert not res.complete and res.exit_code == 1
    assert "killed by SIGSEGV (signal 11)" in res.reason and srv.base_url in res.reason
    assert stopped_after_s < 2.0, stopped_after_s
    md = (res.path / "summary.md").read_text()
    assert md.startswith("INCOMPLETE: ") and "SIGSEGV" in md.splitlines()[0]
    last_log_line = log.strip().splitlines()[-1]
    assert last_log_line and last_log_line in md and res.stop_detail and last_log_line in res.stop_detail
    summary = json.loads((res.path / "summary.json").read_text())
    assert "SIGSEGV" in summary["reason"] and last_log_line in summary["stop_detail"]
    # no retry against the dead port: each key was attempted at most once, and only the
    # calls in flight at the crash (at most `concurrency`) failed
    per_key = reserves_per_key(res.path)
    assert max(per_key.values()) == 1
    errors = list(iter_jsonl(res.path / "errors.jsonl")) if (res.path / "errors.jsonl").exists() else []
    assert len(errors) <= 4 and all(e["attempts"] == 1 for e in errors)
    assert len(per_key) == res.samples_ran + len(errors) <= res.samples_ran + 4
    worst = (64 * 1.0 + 8 * 2.0) / 1e6
    assert res.spend_usd <= len(per_key) * worst < 0.01 * res.cap_usd


# -- faults cost nothing they did not cost, lose nothing, and say what happened -------------

def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dead_endpoint_stops_the_run_in_seconds_at_no_cost_and_a_resume_finishes_it(tmp_path):
    # The campaign's case: nothing listening, 10 cases, cap $0.01. It used to charge
    # $0.009936 of phantom calls, say "60 sample(s) errored", and never finish on resume.
    suite = write_suite(tmp_path / "suite", 10, cost_cap_usd=0.01, max_attempts=6)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    t0 = time.perf_counter()
    proc = cli(str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url", url)
    elapsed = time.perf_counter() - t0
    assert proc.exit_code == 1 and elapsed < 10, (elapsed, proc.stderr)
    folder = Path(re.search(r"run folder: (\S+)", proc.stdout).group(1))
    line = f"INCOMPLETE: 0/10 cases (endpoint unreachable: {url} (connection refused))"
    assert (folder / "summary.md").read_text().splitlines()[0] == line
    assert line in proc.stderr.splitlines() and "Traceback" not in proc.output
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["spend_usd"] == 0.0 and summary["samples_ran"] == 0
    ledger = list(iter_jsonl(folder / "ledger.jsonl"))
    releases = [e for e in ledger if e["event"] == "release"]
    # max_connection_failures (8) tripped it; attempts already on their way when the eighth
    # failure came back (at most one per other worker) end the same way, $0 each; none
    # starts after the trip. On a quiet machine it is exactly 8.
    concurrency = json.loads((suite / "config.json").read_text()).get("concurrency", 4)
    assert 8 <= len(releases) <= 8 + concurrency - 1, len(releases)
    assert all(e["reason"] == "not sent" and e["cost_usd"] == 0 for e in releases)
    with ScriptedServer(SCRIPT, port=port) as srv:  # the server is back, on the same port
        again = run_suite(suite, resume=folder, base_url=url, progress=False)
        assert srv.stats["requests"] == 60
    assert again.complete and again.exit_code == 0 and again.spend_usd <= 0.01


def test_a_storm_of_rate_limits_is_ridden_out_and_the_run_completes(tmp_path):
    # 50% 429s (and some 503s) for the first 1.5 s, each key allowed only 2 attempts for
    # other faults: before, any key drawing two rate limits in a row was lost.
    suite = write_suite(tmp_path / "suite", 12, k=2, concurrency=8, max_attempts=2)
    script = {**SCRIPT, "latency_s": 0.005,
              "faults": [{"kind": "429", "rate": 0.5, "retry_after": 0.1, "until_s": 1.5},
                         {"kind": "503", "rate": 0.2, "retry_after": 0.1, "until_s": 1.5}]}
    with ScriptedServer(script) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        limited = srv.stats["faults"]["429"] + srv.stats["faults"]["503"]
    # the storm happened; the pacer holds every worker on a refusal, so fewer requests
    # meet it than when each worker retried alone (about 20 then, often under 20 now)
    assert limited >= 8
    assert res.complete and res.samples_ran == 48, res.reason
    keys = collections.Counter((r["case_id"], r["arm"], r["index"]) for r in iter_jsonl(res.path / "results.jsonl"))
    assert len(keys) == 48 and set(keys.values()) == {1}
    ledger = list(iter_jsonl(res.path / "ledger.jsonl"))
    assert sum(e["cost_usd"] for e in ledger if e["event"] == "release") == 0  # a refusal costs nothing


def test_the_fault_mix_completes_every_key_once_within_the_cap(tmp_path, fast_backoff):
    suite = write_suite(tmp_path / "suite", 30, k=2, concurrency=8, max_attempts=6, timeout_s=2.0)
    script = {**SCRIPT, "seed": 7, "faults": [{"kind": "429", "rate": 0.10, "retry_after": 0.05},
                                              {"kind": "500", "rate": 0.05 / 0.9},
                                              {"kind": "drop", "rate": 0.02 / 0.85},
                                              {"kind": "slow", "rate": 0.01 / 0.83, "delay_s": 0.1}]}
    with ScriptedServer(script) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        faults = srv.stats["faults"]
    assert res.complete and res.samples_ran == 120, res.reason
    assert faults["429"] and faults["500"] and faults["drop"]
    keys = collections.Counter((r["case_id"], r["arm"], r["index"]) for r in iter_jsonl(res.path / "results.jsonl"))
    assert len(keys) == 120 and set(keys.values()) == {1}
    ledger = list(iter_jsonl(res.path / "ledger.jsonl"))
    charged = [e for e in ledger if e["event"] == "release" and e["cost_usd"] > 0]
    assert len(charged) == faults["drop"] and all(e["reason"] == "connection error" for e in charged)
    assert res.spend_usd <= res.cap_usd


HOSTILE_TEXT = "lone \ud800 surrogate, NUL \x00, bell \x07, \x1b[2J\x1b]0;pwned\x07 CSI \x9b31m, \u202e rtl, 東京"


def test_any_text_the_endpoint_sends_is_stored_in_every_file_and_read_back_equal(tmp_path):
    from test_client import HostileServer, completion_body

    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    suite = write_suite(tmp_path / "suite", 3, k=2, mode="chat", tools=tools, max_tokens_in=256,
                        max_tokens_out=64, max_attempts=1)
    call = {"id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"q": HOSTILE_TEXT})}}

    def answer(body):
        text = body["messages"][-1]["content"]
        if "country 2" in text:  # an error whose message carries the text
            return 400, {"error": {"message": HOSTILE_TEXT, "type": "invalid_request_error"}}
        choice = {"index": 0, "finish_reason": "stop" + HOSTILE_TEXT[:6],
                  "message": {"role": "assistant", "content": HOSTILE_TEXT, "tool_calls": [call]}}
        return completion_body(chat=True, choices=[choice], usage={"prompt_tokens": 10, "completion_tokens": 5})

    runs = tmp_path / "runs"
    with HostileServer(answer) as srv:
        proc = cli(str(suite), "--runs-dir", str(runs), "--base-url", srv.base_url)
        assert proc.exit_code == 1, proc.output  # the 400s errored two keys
        assert "Traceback" not in proc.output and "\x1b" not in proc.output and "\x9b" not in proc.output
        folder = Path(re.search(r"run folder: (\S+)", proc.stdout).group(1))
        n_requests = len(srv.requests)
        # The cache replays the same text: a second run pays nothing for the stored keys.
        again = run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False, sample_files=False)
        assert len(srv.requests) - n_requests == 4  # only the errored keys went out again
    rows = list(iter_jsonl(folder / "results.jsonl"))
    assert len(rows) == 8
    for r in rows:
        assert r["output"] == HOSTILE_TEXT and r["tool_calls"][0]["arguments"] == {"q": HOSTILE_TEXT}
        assert r["finish_reason"] == "stop" + HOSTILE_TEXT[:6]
        raw = (folder / "samples" / r["case_id"] / r["arm"] / f"sample-{r['index'] + 1}.txt").read_bytes()
        assert raw.decode("utf-8", "surrogatepass") == HOSTILE_TEXT  # WTF-8: lossless
    errors = list(iter_jsonl(folder / "errors.jsonl"))
    assert len(errors) == 4 and all(HOSTILE_TEXT.split(",")[0] in e["error"] for e in errors)
    cached = [r for r in iter_jsonl(again.path / "results.jsonl")]
    assert sum(r["cached"] for r in cached) == 8
    assert all(r["output"] == HOSTILE_TEXT and r["tool_calls"][0]["arguments"] == {"q": HOSTILE_TEXT}
               for r in cached)
    assert load_run(folder).samples.output.tolist() == [HOSTILE_TEXT] * 8


def test_with_no_sample_files_and_the_helper_process_the_text_is_stored_too(tmp_path, monkeypatch):
    suite = write_suite(tmp_path / "suite", 4, k=2, max_tokens_out=64)
    with ScriptedServer({"default": {"text": HOSTILE_TEXT}}) as srv:
        a = run_suite(suite, runs_dir=tmp_path / "a", base_url=srv.base_url, progress=False, sample_files=False)
        monkeypatch.setenv("EVALKIT_SAMPLE_WRITER_AFTER", "0")  # the helper process writes every file
        proc = cli(str(suite), "--runs-dir", str(tmp_path / "b"), "--base-url", srv.base_url)
        assert proc.exit_code == 0, proc.output
    assert a.complete and [r["output"] for r in iter_jsonl(a.path / "results.jsonl")] == [HOSTILE_TEXT] * 16
    (b,) = (tmp_path / "b").glob("*/results.jsonl")
    for r in iter_jsonl(b):
        raw = (b.parent / "samples" / r["case_id"] / r["arm"] / f"sample-{r['index'] + 1}.txt").read_bytes()
        assert r["output"] == HOSTILE_TEXT and raw.decode("utf-8", "surrogatepass") == HOSTILE_TEXT


def test_two_runs_of_a_suite_at_once_never_pay_twice(tmp_path):
    suite = write_suite(tmp_path / "suite", 12, k=3, concurrency=2)
    runs = tmp_path / "runs"
    # One key of case-11 is held by the server until the second run has been refused:
    # the first run is surely still going when the second starts (events, not a delay).
    slow_tail = {**SCRIPT, "latency_s": 0.01,
                 "faults": [{"kind": "slow", "hold": True, "match": "country 11", "times": 1}]}
    with ScriptedServer(slow_tail) as srv:
        first = subprocess.Popen([sys.executable, "-m", "evalkit._cli.main", "run", str(suite), "--runs-dir", str(runs),
                                  "--base-url", srv.base_url, "--no-progress"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert srv.held.wait(timeout=120), "the first run never reached its held key"
        # the second run is this process (the first holds the runs folder's flock in its own)
        second = cli(str(suite), "--runs-dir", str(runs), "--base-url", srv.base_url)
        assert first.poll() is None  # still holding its locks while the second was refused
        srv.release()
        out, err = first.communicate(timeout=120)
        requests = srv.stats["requests"]
    assert first.returncode == 0, err
    assert second.exit_code == 2 and "another evalkit run" in second.stderr and str(runs) in second.stderr
    assert "Traceback" not in second.stderr
    assert requests == 72  # every key paid once: the refused run sent nothing
    assert len(list(runs.glob("*/config.json"))) == 1  # and made no run folder


def test_tasks_are_fed_through_a_bounded_queue(tmp_path):
    # k x cases keys, but never more than `concurrency` keys in progress: the number of
    # live tasks stays flat (it was one task per key, created up front: k=10**6 took
    # 1.9 GB before the first call).
    import asyncio

    from evalkit.running.runner import run_suite_async

    # 200 keys: one task per key (the old way) would be 200 live tasks, 16 times the bound
    suite = write_suite(tmp_path / "suite", 1, k=100, concurrency=4)
    peak = 0

    def counting(loop, coro, **kw):
        # every task of the loop counted as it is made, when the number live can rise:
        # the exact peak, which sampling it on a clock could miss
        nonlocal peak
        task = asyncio.Task(coro, loop=loop, **kw)
        peak = max(peak, len(asyncio.all_tasks(loop)))
        return task

    async def go(url):
        asyncio.get_running_loop().set_task_factory(counting)
        return await asyncio.ensure_future(run_suite_async(suite, runs_dir=tmp_path / "runs", base_url=url,
                                                           progress=False, cache=False, sample_files=False))

    with ScriptedServer(SCRIPT) as srv:
        res = asyncio.run(go(srv.base_url))
    assert res.complete and res.samples_ran == 200
    # Per key in progress: its worker and the HTTP transport's request-writer task; then
    # this test's task and the run's. Before, every one of the 200 keys had its task.
    assert peak <= 2 * 4 + 4


def test_untrusted_usage_counts_a_plain_string_and_every_session(tmp_path):
    from test_client import HostileServer, completion_body

    suite = write_suite(tmp_path / "suite", 3, k=1, max_attempts=1)
    with HostileServer(lambda body: completion_body(usage="lots")) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert json.loads((res.path / "summary.json").read_text())["untrusted_usage"] == 6
        run_suite(suite, resume=res.path, base_url=srv.base_url, progress=False)
    summary = json.loads((res.path / "summary.json").read_text())
    assert summary["untrusted_usage"] == 12 and summary["samples_ran"] == 0  # both sessions, no sample
    assert res.spend_usd == pytest.approx(6 * (64 * 1.0 + 8 * 2.0) / 1e6)  # each at its full reservation


# -- a full disk ------------------------------------------------------------------------------
#
# Two honest ways to run out of room, and the same checks for both. A real full
# filesystem: a small tmpfs in a private mount namespace (`unshare -m` as root, `unshare
# -rm` as anyone where user namespaces are allowed), filled by a filler file that is
# deleted afterwards ("space is back"); it gives the kernel's ENOSPC, and SQLite's
# SQLITE_FULL. Where no namespace can be made (an unprivileged CI runner without user
# namespaces) that test is skipped, saying so; the other always runs: a file size limit
# (RLIMIT_FSIZE in the child process), whose EFBIG ("File too large") evalkit treats as
# no room too. It is not ENOSPC, and the test does not pretend it is.

DISK_KEYS = 30 * 2 * 3


def _disk_suite(tmp_path: Path) -> Path:
    return write_suite(tmp_path / "suite", 30, k=3, concurrency=4)


def _check_full_then_resumed(run1: dict, run2: dict, runs: Path, why: str) -> None:
    """run1 stopped INCOMPLETE on `disk full: ... (why)` with every file parseable and no
    traceback; run2 (the resume, with room again) finished every key exactly once."""
    import warnings

    assert run1["rc"] == 1, run1
    assert "Traceback" not in run1["err"] and "Traceback" not in run1["out"], run1["err"]
    (folder,) = [p for p in runs.iterdir() if p.is_dir()]
    line = next(x for x in run1["err"].splitlines() if x.startswith("INCOMPLETE:"))
    assert re.fullmatch(rf"INCOMPLETE: \d+/30 cases \(disk full: \S+ \({why}\)\)", line), line
    named = re.search(r"disk full: (\S+) ", line).group(1)
    assert named.startswith(str(run1["root"])), (named, run1["root"])  # the file that had no room
    assert run1["summary_md"].splitlines()[0] == line  # the freed reserve kept room for the summary
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn line would warn
        done1 = run1["results"]
        assert 0 < len(done1) < DISK_KEYS
        assert all(isinstance(e, dict) for e in run1["ledger"])
    assert run2["rc"] == 0, run2["err"]
    rows = list(iter_jsonl(folder / "results.jsonl"))
    counts = collections.Counter((r["case_id"], r["arm"], r["index"]) for r in rows)
    assert len(counts) == DISK_KEYS and set(counts.values()) == {1}
    for r in rows:  # the sample files a full disk could not write were written on resume
        path = folder / "samples" / r["case_id"] / r["arm"] / f"sample-{r['index'] + 1}.txt"
        assert path.read_text() == r["output"]
    assert not (folder / ".space-reserve").exists()
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["complete"] and summary["spend_usd"] <= summary["cap_usd"]


def _snapshot(folder: Path) -> dict:
    return {"results": list(iter_jsonl(folder / "results.jsonl")), "ledger": list(iter_jsonl(folder / "ledger.jsonl")),
            "summary_md": (folder / "summary.md").read_text()}


def test_a_file_size_limit_stops_the_run_incomplete_and_a_resume_completes(tmp_path):
    import resource

    suite = _disk_suite(tmp_path)
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "evalkit._cli.main", "run", str(suite), "--runs-dir", str(runs), "--no-progress",
           "--no-cache"]  # SQLite reports EFBIG as an I/O error, not as a full disk: the tmpfs test covers it

    def limit_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, 48 * 1024))  # Python itself ignores SIGXFSZ

    with ScriptedServer(SCRIPT) as srv:
        p1 = subprocess.run(cmd + ["--base-url", srv.base_url], capture_output=True, text=True, timeout=120,
                            preexec_fn=limit_files)
        (folder,) = [p for p in runs.iterdir() if p.is_dir()]
        run1 = {"rc": p1.returncode, "out": p1.stdout, "err": p1.stderr, "root": runs, **_snapshot(folder)}
        p2 = cli(str(suite), "--resume", str(folder), "--base-url", srv.base_url)  # no limit: this process
    _check_full_then_resumed(run1, {"rc": p2.exit_code, "err": p2.stderr}, runs, "File too large")



def test_a_full_disk_stops_the_run_incomplete_and_a_resume_completes_once_space_is_back(tmp_path):
    import shlex

    prefix = private_tmpfs()
    if prefix is None:
        pytest.skip("no private mount namespace here (not root, and no user namespaces): the file size limit "
                    "test above covers the run's side; this one needs a real full filesystem")
    suite = _disk_suite(tmp_path)
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    runs = mnt / "runs"
    py = shlex.quote(sys.executable)
    with ScriptedServer(SCRIPT) as srv:
        run = f"{py} -m evalkit._cli.main run {shlex.quote(str(suite))} --base-url {srv.base_url} --no-progress"
        # 2 MiB of tmpfs, 1.8 MiB of it taken: the run fills the rest (each sample file
        # takes a 4 KiB page; the helper process writes them from the first), stops; the
        # filler is deleted and the resume finishes.
        script = f"""
        set -u
        mount -t tmpfs -o size=2m tmpfs {mnt}
        head -c 1843200 /dev/zero > {mnt}/filler
        EVALKIT_SAMPLE_WRITER_AFTER=0 {run} --runs-dir {runs} > {out}/run1.out 2> {out}/run1.err
        echo $? > {out}/run1.rc
        cp -a {runs} {out}/after-run1
        rm {mnt}/filler
        {run} --resume "$(ls -d {runs}/2*)" > {out}/run2.out 2> {out}/run2.err; echo $? > {out}/run2.rc
        cp -a {runs} {out}/after-run2
        """
        done = subprocess.run([*prefix, "bash", "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    read = {name: (out / name).read_text() for name in ("run1.out", "run1.err", "run1.rc", "run2.err", "run2.rc")}
    (folder1,) = [p for p in (out / "after-run1").iterdir() if p.is_dir()]
    run1 = {"rc": int(read["run1.rc"]), "out": read["run1.out"], "err": read["run1.err"], "root": runs,
            **_snapshot(folder1)}
    assert "database or disk is full" in read["run1.err"] or "No space left on device" in read["run1.err"]
    why = "(No space left on device|database or disk is full)"
    _check_full_then_resumed(run1, {"rc": int(read["run2.rc"]), "err": read["run2.err"]}, out / "after-run2", why)


def test_a_resumed_ci_run_stays_under_its_ci_cap(tmp_path, monkeypatch):
    """`run --resume` without `--ci` used to resume a CI run under the local cap; the
    run's config.json now records its cap, and a resume keeps it. `--ci` on a local
    run's resume is refused (it would not be the cap the run started under)."""
    monkeypatch.setenv("EVALKIT_TEST_KEY", "sk-test")
    suite = write_suite(tmp_path / "suite", 3, ci={"cost_cap_usd": 0.5})
    broken = {**SCRIPT, "faults": [{"kind": "500", "match": "country 1?"}]}
    with ScriptedServer(broken) as srv:
        first = cli(str(suite), "--ci", "--base-url", srv.base_url)
    assert first.exit_code == 1, first.output
    run_dir = Path(first.output.split("run folder: ")[1].splitlines()[0].strip())
    meta = json.loads((run_dir / "config.json").read_text())
    assert meta["cost_cap_usd"] == 0.5 and meta["ci"] is True
    with ScriptedServer(SCRIPT) as srv:
        again = cli(str(suite), "--resume", str(run_dir), "--base-url", srv.base_url)
    assert again.exit_code == 0, again.output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and summary["cap_usd"] == 0.5  # not the local 1.0

    with ScriptedServer(broken) as srv:
        local = cli(str(suite), "--base-url", srv.base_url)
    local_dir = Path(local.output.split("run folder: ")[1].splitlines()[0].strip())
    assert json.loads((local_dir / "config.json").read_text())["ci"] is False
    with ScriptedServer(SCRIPT) as srv:
        refused = cli(str(suite), "--resume", str(local_dir), "--ci", "--base-url", srv.base_url)
        assert srv.stats["requests"] == 0
    assert refused.exit_code == 2 and "not a CI run" in refused.output


def test_a_ci_cap_no_call_fits_under_is_refused_before_a_folder_is_made(tmp_path):
    suite = write_suite(tmp_path / "suite", 2, ci={"cost_cap_usd": 0.00001})  # one call: up to $0.00008
    with ScriptedServer(SCRIPT) as srv:
        proc = cli(str(suite), "--ci", "--runs-dir", str(tmp_path / "runs"), "--base-url", srv.base_url)
        assert srv.requests == []
    assert proc.exit_code == 2 and "0 calls fit under the cap" in proc.stderr and "$.ci.cost_cap_usd" in proc.stderr
    assert _nothing_written(tmp_path / "runs")


def test_a_dead_servers_log_tail_is_printed_line_by_line(tmp_path, monkeypatch, capsys):
    """The watch's detail (a crashed server's log tail) was printed through `printable`
    as one block, every newline shown as a literal `\\x0a`; a line's own control
    characters are still escaped."""
    monkeypatch.setenv("EVALKIT_TEST_KEY", "sk-test")
    suite = write_suite(tmp_path / "suite", 2)
    reason = ("the llama.cpp server (pid 4242) exited: killed by SIGSEGV (signal 11)\n"
              "its log ends:\nggml: loading model\n\x1b]0;PWNED\x07segfault at 0x0")
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, base_url=srv.base_url, progress=False, watch=lambda: reason)
    err = capsys.readouterr().err.splitlines()
    assert res.reason.startswith("the llama.cpp server (pid 4242) exited") and not res.complete
    assert "\\x0a" not in "\n".join(err)
    assert "its log ends:" in err and "ggml: loading model" in err
    assert "\\x1b]0;PWNED\\x07segfault at 0x0" in err  # the escape sequence shown, not run


def test_resume_refuses_a_changed_agent_program_naming_the_file(tmp_path):
    suite = tmp_path / "suite"
    (suite / "mypkg").mkdir(parents=True)
    agent = "import json, sys\ncase = json.load(sys.stdin)\nprint('v1')\nsys.exit(1 if case['index'] == 1 else 0)\n"
    (suite / "agent.py").write_text(agent)
    (suite / "mypkg" / "__init__.py").write_text("")
    (suite / "mypkg" / "main.py").write_text("from .words import W\n\ndef run(case, client):\n    return W\n")
    (suite / "mypkg" / "words.py").write_text("W = 'v1'\n")
    cfg = json.loads((write_suite(suite, 1, k=2) / "config.json").read_text())
    cfg.pop("template", None)
    command = {**cfg, "unit": {"kind": "command", "argv": ["{python}", "agent.py"], "timeout_s": 30}}
    python = {**cfg, "unit": {"kind": "python", "callable": "mypkg.main:run", "timeout_s": 30}}
    (suite / "config.json").write_text(json.dumps(command))
    with ScriptedServer(SCRIPT) as srv:
        first = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert not first.complete  # index 1 exited 1: a resume would run it again
        (suite / "agent.py").write_text(agent.replace("v1", "v2"))
        with pytest.raises(InputError, match=r"changed since this run started: agent program \(agent.py\)"):
            run_suite(suite, base_url=srv.base_url, resume=first.path, progress=False)
        (suite / "agent.py").write_text(agent.replace("sys.exit(1 if case['index'] == 1 else 0)", ""))
        (suite / "config.json").write_text(json.dumps(python))
        (suite / "mypkg" / "main.py").write_text("def run(case, client):\n    return 'v1' if case['index'] else 1\n")
        second = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert not second.complete  # index 0 returned a number: errored
        (suite / "mypkg" / "words.py").write_text("W = 'v2'\n")  # a file of its package, not the module itself
        with pytest.raises(InputError, match=r"changed since this run started: agent program \(mypkg/words.py\)"):
            run_suite(suite, base_url=srv.base_url, resume=second.path, progress=False)
    assert len(list(iter_jsonl(first.path / "results.jsonl"))) == 2  # index 0 of each arm: the refused resume wrote nothing


def test_run_options_are_one_record_and_the_keywords_build_the_same_one(tmp_path):
    """`RunOptions` handed down whole: a record run and a keyword run of one suite make
    the same samples; keywords replace the record's fields; a misspelt keyword is a
    TypeError before anything is called or written."""
    from evalkit.running.runner import RunOptions

    suite = write_suite(tmp_path / "suite", 2, k=2)
    with ScriptedServer(SCRIPT) as srv:
        opts = RunOptions(runs_dir=tmp_path / "a", base_url=srv.base_url, progress=False, k=1, arms=["guided"])
        by_record = run_suite(suite, opts)
        by_keywords = run_suite(suite, runs_dir=tmp_path / "b", base_url=srv.base_url, progress=False, k=1,
                                arms=["guided"], cache=False)
        mixed = run_suite(suite, opts, runs_dir=tmp_path / "c", sample_files=False, cache=False)
        with pytest.raises(TypeError, match="sampel_files"):
            run_suite(suite, opts, sampel_files=False)
        assert len(srv.requests) == 6  # three runs of 2 keys, each in its own runs folder; the misspelt one none
    for res in (by_record, by_keywords, mixed):
        assert res.complete and res.samples_total == 2 and list(res.per_arm) == ["guided"]
    assert sorted(load_run(by_record.path).samples.output) == sorted(load_run(by_keywords.path).samples.output)
    assert not (mixed.path / "samples").exists() and (by_record.path / "samples").is_dir()
    assert not (tmp_path / "runs").exists() and opts.k == 1  # the record is not changed by a run


# ---------------------------------------------------------------- the run's steps, one by one

THREE_ARMS = [{"name": "base"}, {"name": "guided", "guidance": "guided.md"}, {"name": "copy"}]


def test_plan_run_resolves_arms_k_prompts_and_seed_names_and_writes_nothing(tmp_path):
    from evalkit.running import runner as R
    from evalkit.suites.reader import load_suite

    suite = load_suite(write_suite(tmp_path / "suite", 2, k=2, arms=THREE_ARMS))
    with ScriptedServer(SCRIPT) as srv:
        url = srv.base_url
        plan = R._plan_run(suite, None, R.RunOptions(base_url=url, arms=["guided", "copy", "base"]))
    assert plan.opts.arms == ["guided", "copy", "base"] and plan.k == 2 and plan.opts.base_url == url
    assert [a.name for a in plan.arm_objs] == ["guided", "copy", "base"]
    assert len(plan.prompts) == 2 * 3
    assert plan.prompts[("case-01", "guided")] == "Answer in one word. Q: capital of country 1?\nA:"
    assert plan.prompts[("case-01", "base")] == plan.prompts[("case-01", "copy")] == "Q: capital of country 1?\nA:"
    # `copy` sends base's very requests: its seeds derive from base's name
    assert plan.seeds == {"base": "base", "guided": "guided", "copy": "base"}
    assert plan.meta == {} and not (tmp_path / "runs").exists()
    meta = R._new_meta(plan)
    assert meta["arms"] == ["guided", "copy", "base"] and meta["k"] == 2 and meta["seed_names"] == plan.seeds
    assert meta["cases"] == ["case-00", "case-01"] and meta["config_hash"] == plan.config_hash


def test_plan_run_of_a_resume_takes_the_runs_arms_k_cap_and_seed_names(tmp_path):
    from evalkit.running import runner as R
    from evalkit.suites.reader import load_suite
    from evalkit.runfolder.runs import RunFolder

    suite_dir = write_suite(tmp_path / "suite", 2, k=2, arms=THREE_ARMS)
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite_dir, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False,
                        arms=["copy"], k=1)
        meta = json.loads((res.path / "config.json").read_text())
        meta["cost_cap_usd"] = 0.5  # the cap the run started under wins over the config's
        (res.path / "config.json").write_text(json.dumps(meta))
        plan = R._plan_run(load_suite(suite_dir), RunFolder(res.path), R.RunOptions(base_url=srv.base_url))
        with pytest.raises(InputError, match="--k 2 differs from the run's k 1"):
            R._plan_run(load_suite(suite_dir), RunFolder(res.path), R.RunOptions(base_url=srv.base_url, k=2))
    assert plan.opts.arms == ["copy"] and plan.k == 1 and plan.suite.config.cost_cap_usd == 0.5
    assert plan.seeds == {"copy": "base"} and plan.meta["arms"] == ["copy"]


def test_done_keys_are_the_rows_inside_the_plan(tmp_path):
    from evalkit.running import runner as R
    from evalkit.suites.reader import load_suite

    suite = load_suite(write_suite(tmp_path / "suite", 2))
    rows = [{"case_id": c, "arm": a, "index": i} for c, a, i in [
        ("case-00", "base", 0), ("case-01", "guided", 2),  # in the plan
        ("case-01", "guided", 3),  # an index past k
        ("gone", "base", 0),  # a case no longer in the suite
        ("case-00", "guided", 1),  # an arm not run this time
    ]]
    assert R._done_keys(rows, suite, [suite.config.arm("base"), suite.config.arm("guided")], 3) == {
        ("case-00", "base", 0), ("case-01", "guided", 2), ("case-00", "guided", 1)}
    assert R._done_keys(rows, suite, [suite.config.arm("base")], 3) == {("case-00", "base", 0)}
