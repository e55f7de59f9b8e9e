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

from evalkit.errors import InputError
from evalkit.runner import derive_seed, run_suite
from evalkit.runs import iter_jsonl, load_run
from evalkit.serve import ScriptedServer

from conftest import write_engine_suite

def write_suite(root: Path, n_cases: int, **config) -> Path:
    return write_engine_suite(root, [
        {"id": f"case-{i:02d}", "input": f"capital of country {i}?", "expected": "Paris",
         "tags": ["capital", "golden" if i % 2 else "adversarial"]} for i in range(n_cases)], **config)


SCRIPT = {"rules": [{"match": "country", "texts": ["Paris", "Lima", "Rome"]}]}


def cli(*args: str):
    """`evalkit run ...` through click in this process (a subprocess pays every import
    again); the SIGKILL test below runs the real command in its own process."""
    from click.testing import CliRunner
    from evalkit.cli import main
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
    assert run.config["arms"] == ["base", "guided"] and run.config["k"] == 2
    assert run.config["cases"] == ["case-00", "case-01"] and len(run.config["config_hash"]) == 64
    assert run.summary == {"complete": True, "ran": 2, "total": 2, "samples_ran": 8, "samples_total": 8,
                           "reason": None, "spend_usd": res.spend_usd, "avoided_usd": 0.0, "cap_usd": 1.0,
                           "ceiling_breaches": 0, "untrusted_usage": 0, "per_arm": {"base": {"samples": 4, "errors": 0}, "guided": {"samples": 4, "errors": 0}},
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


def _spawn_run(suite, runs, base_url: str, **env: str) -> subprocess.Popen:
    """`evalkit run` in a process of its own (to be killed or raced), output discarded."""
    return subprocess.Popen([sys.executable, "-m", "evalkit.cli", "run", str(suite), "--runs-dir", str(runs),
                             "--base-url", base_url, "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env})


def test_sigkill_mid_run_then_resume_every_key_once_nothing_paid_twice(tmp_path):
    suite = write_suite(tmp_path / "suite", 12, k=3, concurrency=4)
    runs = tmp_path / "runs"
    with ScriptedServer({**SCRIPT, "latency_s": 0.1}) as srv:
        proc = _spawn_run(suite, runs, srv.base_url, EVALKIT_SAMPLE_WRITER_AFTER="0")  # the helper too
        deadline = time.monotonic() + 60
        results = None
        while time.monotonic() < deadline:
            found = [p for p in runs.glob("*/results.jsonl")] if runs.exists() else []
            if found and found[0].read_bytes().count(b"\n") >= 15:
                results = found[0]
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert results is not None, "the run never got going"
        folder = results.parent
        assert not (folder / "summary.json").exists()  # it really died mid-run
        before = {(r["case_id"], r["arm"], r["index"]) for r in iter_jsonl(results)}
        assert 15 <= len(before) < 72
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
    # the resume wrote whatever was still missing), and nothing else is there.
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
    with ScriptedServer({**SCRIPT, "latency_s": 0.1}) as srv:
        first = _spawn_run(suite, runs, srv.base_url)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not list(runs.glob("*/results.jsonl")):
                time.sleep(0.01)
            folder = next(runs.glob("*/results.jsonl")).parent
            second = subprocess.run([sys.executable, "-m", "evalkit.cli", "run", str(suite), "--resume", str(folder),
                                     "--base-url", srv.base_url, "--no-progress"],
                                    capture_output=True, text=True, timeout=60)
            assert second.returncode == 2, second.stderr
            assert "another evalkit process" in second.stderr and str(folder) in second.stderr
            assert "Traceback" not in second.stderr
            # The refused process opened no ledger and wrote no line: one writer only.
            assert len({e["run_epoch"] for e in iter_jsonl(folder / "ledger.jsonl")}) == 1
        finally:
            os.kill(first.pid, signal.SIGKILL)  # the kernel drops its lock with it
            first.wait()
        assert not (folder / "summary.json").exists()
        res = run_suite(suite, base_url=srv.base_url, resume=folder, progress=False)
    assert res.complete
    counts = collections.Counter((r["case_id"], r["arm"], r["index"]) for r in iter_jsonl(folder / "results.jsonl"))
    assert len(counts) == 72 and set(counts.values()) == {1}


def test_the_heap_frozen_for_a_run_is_handed_back_and_a_callers_freeze_left_alone(tmp_path):
    import gc

    from evalkit.runner import _frozen_heap

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
    return collections.Counter(e["key"] for e in iter_jsonl(run_path / "ledger.jsonl") if e["event"] == "reserve")


def kill_when_results(runs: Path, n: int, pid: int, sig: int = signal.SIGSEGV, timeout_s: float = 120) -> dict:
    """In a thread: once a run folder under `runs` holds `n` results, send `sig` to
    `pid`; the returned dict gets the time of the kill (`t`)."""
    import threading

    out: dict = {}

    def go() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            files = list(runs.glob("*/results.jsonl"))
            if files and len(files[0].read_text().splitlines()) >= n:
                break
            time.sleep(0.02)
        out["t"] = time.monotonic()
        os.kill(pid, sig)

    threading.Thread(target=go, daemon=True).start()
    return out


def test_a_watched_server_that_dies_stops_the_run_at_once_naming_the_signal_and_its_log(tmp_path):
    """A real server process (the scripted server, in its own process) killed by SIGSEGV
    mid-run: the run stops at once, INCOMPLETE, the summary names the signal and the
    server's last log line, no key is retried against the dead port, and the spend is
    what the calls made before the crash cost, far below the cap."""
    from evalkit.serve import ServerProcess

    script = tmp_path / "script.json"
    script.write_text(json.dumps({**SCRIPT, "latency_s": 0.2}))
    suite = write_suite(tmp_path / "suite", 20, k=3, concurrency=4, max_attempts=4)
    runs = tmp_path / "runs"
    with ServerProcess([sys.executable, "-m", "evalkit.cli", "serve", "--scripted", str(script), "--port", "{port}"],
                       startup_timeout_s=60) as srv:
        killed = kill_when_results(runs, 6, srv.pid)
        res = run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False, watch=srv.exit_reason)
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
