"""The provider Batch API under the run's ledger, over real HTTP to the scripted server's
/v1/files and /v1/batches through the official openai client: a batch run that grades,
compares and reports as the online run does, limits that split, a cap that refuses a
batch before upload, a SIGKILL that never uploads twice, failed, expired, cancelled and
invalid batches, result lines nobody should believe, and the judge's batches."""
from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.foundations import fmt
from evalkit.running.batch import BATCHES, BatchOptions, batch_cancel, batch_status
from evalkit._cli.main import main
from evalkit.conclusions.grading import grade_run
from evalkit.running.runner import run_suite
from evalkit.foundations._io import iter_jsonl
from evalkit.runfolder.runload import load_run
from evalkit.calls.serve import ScriptedServer
from evalkit.conclusions.verdicts import two_arm_verdict

from conftest import write_engine_suite

PRICE = {"in_per_mtok": 1.0, "out_per_mtok": 2.0}  # ENGINE_CONFIG's price
HALF = {"in_per_mtok": 0.5, "out_per_mtok": 1.0}
SCRIPT = {"rules": [{"match": "country", "texts": ["Paris", "Lima", "Rome"], "weights": [0.5, 0.3, 0.2]}]}
LINE_WORST = (64 * 0.5 + 8 * 1.0) / 1e6  # max_tokens_in x in + max_tokens_out x out, at HALF


def write_suite(root: Path, n_cases: int = 6, **config) -> Path:
    return write_engine_suite(root, [
        {"id": f"case-{i:02d}", "input": f"capital of country {i}?", "expected": "Paris",
         "tags": ["capital", "golden" if i % 2 else "other"]} for i in range(n_cases)],
        **{"batch_price": HALF, **config})


def fast(**kw) -> BatchOptions:
    return BatchOptions(poll_s=0.02, **kw)


def results(run: Path) -> dict[tuple, dict]:
    rows = list(iter_jsonl(run / "results.jsonl"))
    keys = [(r["case_id"], r["arm"], r["index"]) for r in rows]
    assert len(keys) == len(set(keys)), "a key has two results"
    return dict(zip(keys, rows, strict=True))


def walk_ledger(path: Path, cap: float) -> tuple[float, float]:
    """Replay ledger.jsonl on its own terms (written for this test, not the Ledger
    class): committed + reserved never passes the cap after any event. Returns
    (committed, still reserved)."""
    committed = reserved = 0.0
    held: dict[tuple, float] = {}
    for ev in iter_jsonl(path):
        rid = (ev["run_epoch"], ev.get("id"))
        kind = ev["event"]
        if kind == "reserve":
            held[rid] = ev["amount_usd"]
            reserved += ev["amount_usd"]
        elif kind == "adopt":
            held[rid] = held.pop((ev["from_epoch"], ev["from_id"]))
        elif kind == "charge":
            held[rid] -= ev["released_usd"]
            reserved -= ev["released_usd"]
            committed += ev["cost_usd"]
            assert held[rid] >= -1e-12, ev
        elif kind in ("settle", "release"):
            reserved -= held.pop(rid)
            committed += ev["cost_usd"]
        assert committed + reserved <= cap + 1e-12, ev
    return committed, reserved


def charges(run: Path) -> collections.Counter:
    return collections.Counter(e["line"] for e in iter_jsonl(run / "ledger.jsonl") if e["event"] == "charge")


# -- the same run, online and as a batch -------------------------------------------------

CHAT_TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
CHAT_SCRIPT = {"rules": [{"match": "country 0", "tool_calls": [{"name": "lookup", "arguments": {"q": "0"}}]},
                         *SCRIPT["rules"]]}
SAME = ("seed", "output", "tool_calls", "finish_reason", "usage", "cost_usd", "request_hash", "model",
        "system_fingerprint", "cached", "cost_avoided_usd", "tags")


@pytest.mark.parametrize("mode", ["completion", "chat"])
def test_a_batch_run_is_the_online_run_key_for_key_and_grades_and_compares_the_same(tmp_path, mode):
    extra = {"mode": "chat", "tools": CHAT_TOOLS, "max_tokens_in": 256} if mode == "chat" else {}
    suite = write_suite(tmp_path / "suite", batch_price=PRICE, **extra)  # the same price: the same costs
    with ScriptedServer(CHAT_SCRIPT if mode == "chat" else SCRIPT) as srv:
        online = run_suite(suite, runs_dir=tmp_path / "online", base_url=srv.base_url, progress=False)
        sent_online = sorted(json.dumps(b, sort_keys=True) for b in srv.requests)
        srv.requests.clear()
        batch = run_suite(suite, runs_dir=tmp_path / "batch", base_url=srv.base_url, progress=False, batch=fast())
        sent_batch = sorted(json.dumps(b, sort_keys=True) for b in srv.requests)
        assert srv.batch_stats["uploads"] == srv.batch_stats["batches"] == 1
    assert online.complete and batch.complete and batch.exit_code == 0
    assert sent_batch == sent_online  # each line's body is the online request, seed and all
    a, b = results(online.path), results(batch.path)
    assert set(a) == set(b) and len(a) == 6 * 2 * 3
    for key in a:
        assert {f: a[key][f] for f in SAME} == {f: b[key][f] for f in SAME}, key
    if mode == "chat":
        assert b[("case-00", "base", 0)]["tool_calls"][0]["name"] == "lookup"
    assert len({r["output"] for r in b.values()}) > 1  # the seeded draws really differ across keys
    for p in (online.path, batch.path):  # the sample files an online run writes
        assert {f.relative_to(p / "samples").as_posix() for f in (p / "samples").rglob("*.txt")} == {
            f"{c}/{arm}/sample-{i + 1}.txt" for c, arm, i in a}
    s_on, s_b = (json.loads((p / "summary.json").read_text()) for p in (online.path, batch.path))
    assert s_b["spend_usd"] == pytest.approx(s_on["spend_usd"])
    assert {k: v for k, v in s_b.items() if k != "spend_usd"} == {k: v for k, v in s_on.items() if k != "spend_usd"}
    # grade and compare: the same lines, the same verdict
    g_on, g_b = grade_run(online.path), grade_run(batch.path)
    assert [json.loads(x) for x in (online.path / "grades.jsonl").read_text().splitlines()] == [
        json.loads(x) for x in (batch.path / "grades.jsonl").read_text().splitlines()]
    for m in ("sample_pass_rate", "correct_rate", "refusal_rate", "n_graded", "generator_cost_usd"):
        assert getattr(g_on.summary.overall, m) == pytest.approx(getattr(g_b.summary.overall, m))
    v_on, v_b = two_arm_verdict(online.path, "base", "guided"), two_arm_verdict(batch.path, "base", "guided")
    assert (v_on.kind, v_on.wins, v_on.losses, v_on.ties, v_on.p_value) == (
        v_b.kind, v_b.wins, v_b.losses, v_b.ties, v_b.p_value)
    # the ledger: one reservation for the batch, one charge per line, nothing left open
    committed, left = walk_ledger(batch.path / "ledger.jsonl", 1.0)
    assert left == pytest.approx(0.0, abs=1e-12) and committed == pytest.approx(batch.spend_usd)
    assert set(charges(batch.path)) == {f"{c}/{arm}/{i}" for c, arm, i in b} and set(charges(batch.path).values()) == {1}
    assert not (batch.path / "batches" / "generator-1.jsonl").exists()  # the local input file goes once collected


def test_the_report_set_renders_for_a_batch_run(tmp_path):
    from evalkit.telling.reports import report_run

    suite = write_suite(tmp_path / "suite", 4)
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, batch=fast())
    graded = grade_run(res.path)
    rep = report_run(res.path, tmp_path / "reports", notebooks=["run_summary"])
    assert rep.ok, [n.error for n in rep.notebooks]
    html = (rep.out_dir / "run_summary.html").read_text()
    assert f"<td>{fmt.pct(graded.summary.overall.sample_pass_rate)} (" in html  # the number grading wrote, shown


# -- limits, cap, price ------------------------------------------------------------------

@pytest.mark.parametrize("max_requests,max_bytes", [(7, 10**6), (50, 1000)])
def test_inputs_over_the_providers_limits_are_split_into_batches_each_within_them(tmp_path, max_requests, max_bytes):
    suite = write_suite(tmp_path / "suite", 6)  # 36 keys; a line is about 190 bytes
    with ScriptedServer({**SCRIPT, "batch": {"max_requests": max_requests, "max_bytes": max_bytes}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False,
                        batch=fast(max_requests=max_requests, max_bytes=max_bytes))
        inputs = [srv.batches._paths[f["id"]].read_bytes() for f in srv.batches.files.values() if f["purpose"] == "batch"]
        statuses = [b["status"] for b in srv.batches.batches.values()]
    assert res.complete and set(statuses) == {"completed"}  # the server's own limits never refused one
    assert all(len(x) <= max_bytes and x.count(b"\n") <= max_requests for x in inputs)
    lines = [line for x in inputs for line in x.splitlines(keepends=True)]
    packed: list[list[bytes]] = []  # the same lines packed greedily, in order, within both limits
    for line in lines:
        if not packed or len(packed[-1]) == max_requests or sum(map(len, packed[-1])) + len(line) > max_bytes:
            packed.append([])
        packed[-1].append(line)
    assert [b"".join(p) for p in packed] == inputs and len(inputs) > 1
    ids = [json.loads(line)["custom_id"] for line in lines]
    assert sorted(ids) == sorted(f"{c}/{a}/{i}" for c, a, i in results(res.path))  # every key once, in one batch
    log = json.loads((res.path / BATCHES).read_text())["batches"]
    assert [e["state"] for e in log] == ["collected"] * len(inputs)
    reserves = [e for e in iter_jsonl(res.path / "ledger.jsonl") if e["event"] == "reserve"]
    assert [e["lines"] for e in reserves] == [e["lines"] for e in log] == [len(p) for p in packed]
    assert all(e["amount_usd"] == pytest.approx(e["lines"] * LINE_WORST) for e in reserves)


def test_a_batch_that_would_pass_the_cap_is_refused_whole_before_upload(tmp_path):
    # 36 lines at 4e-5 each: one batch's worst case is $0.00144, over a $0.001 cap.
    suite = write_suite(tmp_path / "suite", 6, cost_cap_usd=0.001)
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, batch=fast())
        assert srv.batch_stats == {"uploads": 0, "batches": 0, "lines": 0, "cancels": 0}  # the server saw no upload
        assert srv.stats["requests"] == 0
    assert not res.complete and res.exit_code == 1 and res.samples_ran == 0
    assert res.reason.startswith("budget exhausted: batch generator-1 (36 requests) was refused whole before upload")
    assert res.spend_usd == 0.0
    events = list(iter_jsonl(res.path / "ledger.jsonl"))
    assert [e["event"] for e in events] == ["refuse"] and events[0]["amount_usd"] == pytest.approx(36 * LINE_WORST)
    log = json.loads((res.path / BATCHES).read_text())["batches"]
    assert [e["state"] for e in log] == ["refused"] and not list((res.path / "batches").iterdir())

    # The first batch fits, the second does not: it is refused whole, nothing after it is
    # submitted, and the first runs to the end under the cap.
    suite2 = write_suite(tmp_path / "suite2", 6, cost_cap_usd=0.001)
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite2, runs_dir=tmp_path / "runs2", base_url=srv.base_url, progress=False,
                        batch=fast(max_requests=20))
        assert srv.batch_stats["uploads"] == srv.batch_stats["batches"] == 1 and srv.batch_stats["lines"] == 20
    assert res.samples_ran == 20 and "batch generator-2 (16 requests) was refused whole" in res.reason
    committed, left = walk_ledger(res.path / "ledger.jsonl", 0.001)
    assert left == pytest.approx(0.0, abs=1e-12) and committed == pytest.approx(res.spend_usd) and committed > 0


def test_the_cap_holds_across_batches_online_calls_and_the_judge_on_one_ledger(tmp_path):
    suite = write_suite(tmp_path / "suite", 6, cost_cap_usd=0.01)
    with ScriptedServer({**SCRIPT, "faults": [{"kind": "500", "match": "country 2", "times": 6}]}) as srv:
        first = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, batch=fast())
        assert not first.complete and first.reason == "6 sample(s) errored"
        online = run_suite(suite, base_url=srv.base_url, resume=first.path, progress=False)  # the rest online
    assert online.complete
    ledger = list(iter_jsonl(first.path / "ledger.jsonl"))
    assert {e["event"] for e in ledger} >= {"reserve", "charge", "release", "settle"}
    assert sum(1 for e in ledger if e["event"] == "settle") == 6  # the six keys that failed went online once
    committed, left = walk_ledger(first.path / "ledger.jsonl", 0.01)
    assert committed == pytest.approx(online.spend_usd) and left == pytest.approx(0.0, abs=1e-12)


def test_batch_needs_a_batch_price_and_calls_and_bad_flags_exit_2_before_anything(tmp_path):
    suite = write_engine_suite(tmp_path / "suite", [{"id": "c", "input": "x", "expected": "y", "tags": ["t"]}])
    runs = tmp_path / "runs"
    out = CliRunner().invoke(main, ["run", str(suite), "--runs-dir", str(runs), "--base-url", "http://127.0.0.1:9/v1",
                                    "--batch", "--no-progress"])
    assert out.exit_code == 2 and "--batch needs batch_price" in out.output and "$.batch_price" in out.output
    assert not runs.exists() or not any(runs.iterdir()) or not list(runs.glob("*/config.json"))
    out = CliRunner().invoke(main, ["run", str(suite), "--runs-dir", str(runs), "--no-wait"])
    assert out.exit_code == 2 and "--no-wait only apply with --batch" in out.output
    suite2 = write_suite(tmp_path / "suite2", 1)
    out = CliRunner().invoke(main, ["run", str(suite2), "--runs-dir", str(runs), "--batch", "--replay-only"])
    assert out.exit_code == 2 and "--replay-only makes no calls" in out.output
    out = CliRunner().invoke(main, ["run", str(suite2), "--runs-dir", str(runs), "--batch", "--batch-max-requests",
                                    "0", "--base-url", "http://127.0.0.1:9/v1"])
    assert out.exit_code == 2 and "batch limits must be positive" in out.output
    assert not list(runs.glob("*/config.json"))


# -- durable: a SIGKILL never uploads twice --------------------------------------------

def _spawn(suite: Path, runs: Path, base_url: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evalkit._cli.main", "run", str(suite), "--runs-dir", str(runs),
                             "--base-url", base_url, "--no-progress", "--batch", "--batch-poll-s", "0.05", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for(pred, what: str, timeout_s: float = 60.0) -> None:
    """A bounded poll of files the killed `evalkit run` writes (its batches.json, its
    results.jsonl): that child process sends this test no event as it writes them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting until {what}")


def _log(runs: Path) -> list[dict]:
    found = list(runs.glob(f"*/{BATCHES}"))
    return json.loads(found[0].read_text())["batches"] if found else []


def test_a_sigkill_while_polling_resumes_the_same_batch_without_a_second_upload(tmp_path):
    suite = write_suite(tmp_path / "suite", 6)
    runs = tmp_path / "runs"
    # the batch holds its first line of case-05 (line 31 of 36) until released: the kill
    # lands while it is in progress, whatever the machine's load
    hold = {"kind": "slow", "hold": True, "match": "country 5?", "times": 1}
    with ScriptedServer({**SCRIPT, "faults": [hold]}) as srv:
        proc = _spawn(suite, runs, srv.base_url)
        assert srv.held.wait(60), "the batch never reached its held line"
        _wait_for(lambda: any((e.get("request_counts") or {}).get("completed", 0) >= 4 for e in _log(runs)),
                  "the run's batches.json records the batch in progress")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        folder = next(runs.glob(f"*/{BATCHES}")).parent
        assert not (folder / "summary.json").exists() and not (folder / "results.jsonl").exists()
        assert _log(runs)[0]["state"] == "submitted"
        assert srv.batch_stats["uploads"] == srv.batch_stats["batches"] == 1
        assert srv.held.is_set() and srv.batch_stats["lines"] < 36  # still in progress at the kill
        srv.release()
        res = run_suite(suite, base_url=srv.base_url, resume=folder, progress=False, batch=fast())
        assert srv.batch_stats["uploads"] == srv.batch_stats["batches"] == 1  # polled again, never resubmitted
        assert srv.batch_stats["lines"] == 36
    assert res.complete and len(results(folder)) == 36
    events = list(iter_jsonl(folder / "ledger.jsonl"))
    assert [e["event"] for e in events if e["event"] in ("reserve", "adopt")] == ["reserve", "adopt"]
    assert set(charges(folder).values()) == {1} and len(charges(folder)) == 36  # every line charged once
    committed, left = walk_ledger(folder / "ledger.jsonl", 1.0)
    assert committed == pytest.approx(res.spend_usd) and left == pytest.approx(0.0, abs=1e-12)
    assert res.spend_usd == pytest.approx(sum(r["cost_usd"] for r in results(folder).values()))


def test_a_sigkill_while_collecting_records_the_rest_and_charges_no_line_twice(tmp_path):
    suite = write_suite(tmp_path / "suite", 100, k=15)  # 3,000 keys
    runs = tmp_path / "runs"
    with ScriptedServer(SCRIPT) as srv:
        proc = _spawn(suite, runs, srv.base_url, "--no-sample-files")

        def collecting() -> bool:
            found = list(runs.glob("*/results.jsonl"))
            return bool(found) and found[0].read_bytes().count(b"\n") >= 300

        _wait_for(collecting, "the run's results.jsonl holds 300 lines")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        folder = next(runs.glob("*/results.jsonl")).parent
        before = len(results(folder))
        assert before < 3000, "the collection finished before the kill"
        charged_before = charges(folder)
        res = run_suite(suite, base_url=srv.base_url, resume=folder, progress=False, batch=fast())
        assert srv.batch_stats["uploads"] == srv.batch_stats["batches"] == 1
    assert res.complete and len(results(folder)) == 3000
    assert set(charges(folder).values()) == {1} and len(charges(folder)) == 3000
    assert len(charged_before) >= before  # charged first, recorded next: the resume charged those no more
    committed, left = walk_ledger(folder / "ledger.jsonl", 1.0)
    assert committed == pytest.approx(res.spend_usd) and left == pytest.approx(0.0, abs=1e-12)


# -- lines that fail, batches that expire, fail validation, or are cancelled -------------

def test_failed_and_expired_lines_cost_nothing_and_resume_submits_only_those_keys(tmp_path):
    suite = write_suite(tmp_path / "suite", 6)
    script = {**SCRIPT, "faults": [{"kind": "500", "match": "country 1?", "times": 6}],
              "batch": {"faults": [{"kind": "expire", "after_lines": 24, "times": 1}]}}
    with ScriptedServer(script) as srv:
        first = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, batch=fast())
        failed = {(e["case_id"], e["arm"], e["index"]): e for e in iter_jsonl(first.path / "errors.jsonl")}
        done = set(results(first.path))
        assert not first.complete and len(done) == 18 and len(failed) == 18
        assert first.reason == "batch generator-1 expired: 12 of 36 request(s) did not run ($0); --resume submits them again"
        http = [k for k, e in failed.items() if e["error"].startswith("HTTP 500")]
        expired = [k for k, e in failed.items() if e["error"].startswith("batch_expired")]
        assert len(http) == 6 and {k[0] for k in http} == {"case-01"} and len(expired) == 12
        assert all(failed[k]["attempts"] == 1 for k in http) and all(failed[k]["attempts"] == 0 for k in expired)
        free = [e for e in iter_jsonl(first.path / "ledger.jsonl") if e["event"] == "charge" and e["cost_usd"] == 0]
        assert len(free) == 18  # an HTTP error status, a request that never ran: $0
        assert first.spend_usd == pytest.approx(sum(r["cost_usd"] for r in results(first.path).values()))

        copy = tmp_path / "copy"
        shutil.copytree(first.path, copy)
        # the user's choice, 1: a new batch of exactly the missing keys
        again = run_suite(suite, base_url=srv.base_url, resume=first.path, progress=False, batch=fast())
        newest = list(srv.batches.files.values())
        second_input = [f for f in newest if f["purpose"] == "batch"][-1]
        sent = {json.loads(x)["custom_id"] for x in srv.batches._paths[second_input["id"]].read_text().splitlines()}
        assert sent == {f"{c}/{a}/{i}" for c, a, i in failed}
        assert again.complete and set(results(first.path)) == done | set(failed)
        # the user's choice, 2: those keys online
        requests_before = srv.stats["requests"]
        online = run_suite(suite, base_url=srv.base_url, resume=copy, progress=False)
        assert online.complete and srv.stats["requests"] - requests_before == 18
        assert sum(1 for e in iter_jsonl(copy / "ledger.jsonl") if e["event"] == "settle") == 18


def test_a_batch_that_fails_validation_costs_nothing_and_names_why(tmp_path):
    suite = write_suite(tmp_path / "suite", 2)
    script = {**SCRIPT, "batch": {"faults": [{"kind": "fail_validation", "message": "bad model for batch", "times": 1}]}}
    with ScriptedServer(script) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, batch=fast())
        assert srv.stats["requests"] == 0
        assert not res.complete and res.samples_ran == 0 and res.spend_usd == 0.0
        assert res.reason.startswith("batch generator-1 (batch_") and "failed validation: bad model for batch" in res.reason
        assert not (res.path / "errors.jsonl").exists()  # nothing ran: no key errored
        close = [e for e in iter_jsonl(res.path / "ledger.jsonl") if e["event"] == "release"]
        assert len(close) == 1 and close[0]["cost_usd"] == 0 and close[0]["reason"] == "batch failed"
        res2 = run_suite(suite, base_url=srv.base_url, resume=res.path, progress=False, batch=fast())
        assert res2.complete and srv.batch_stats["batches"] == 2


def test_the_servers_own_validation_refuses_a_file_over_its_limit_and_the_reason_says_so(tmp_path):
    suite = write_suite(tmp_path / "suite", 2)  # 12 lines, but the provider takes 5 and evalkit was told 50,000
    with ScriptedServer({**SCRIPT, "batch": {"max_requests": 5}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, batch=fast())
    assert "failed validation: The input file has 12 requests; at most 5 are allowed. (line 12)" in res.reason
    assert res.spend_usd == 0.0


def test_no_wait_then_status_then_cancel_then_resume_collects_the_partial_results(tmp_path):
    suite = write_suite(tmp_path / "suite", 6)
    runs = tmp_path / "runs"
    # the batch holds its first line of case-01 (line 7 of 36) until released: it is still
    # running when it is cancelled, whatever the machine's load
    hold = {"kind": "slow", "hold": True, "match": "country 1?", "times": 1}
    with ScriptedServer({**SCRIPT, "faults": [hold]}) as srv:
        res = run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False,
                        batch=BatchOptions(poll_s=0.02, wait=False))
        assert not res.complete and res.exit_code == 1 and "submitted and not collected yet (--no-wait)" in res.reason
        rows = batch_status(res.path)
        assert [r["status"] for r in rows] in (["validating"], ["in_progress"])
        out = CliRunner().invoke(main, ["batch", "status", str(res.path)])
        assert out.exit_code == 0 and "generator-1" in out.output and "submitted" in out.output
        # held at its seventh line, the batch has answered the six before it
        assert srv.held.wait(60), "the batch never reached its held line"
        assert batch_status(res.path)[0]["request_counts"]["completed"] >= 5
        rows = batch_cancel(res.path)
        assert rows[0]["status"] in ("cancelling", "cancelled") and srv.batch_stats["cancels"] == 1
        srv.release()  # the held line answers; the batch, cancelled, runs no line after it
        out = CliRunner().invoke(main, ["batch", "cancel", str(res.path)])  # again: nothing more to cancel
        assert out.exit_code == 0 and srv.batch_stats["cancels"] == 1
        again = run_suite(suite, base_url=srv.base_url, resume=res.path, progress=False)
        ran = srv.batch_stats["lines"]
    assert 5 <= ran < 36
    assert not again.complete and again.samples_ran == ran
    assert again.reason.startswith(f"batch generator-1 cancelled: {36 - ran} of 36 request(s) did not run ($0)")
    assert json.loads((res.path / BATCHES).read_text())["batches"][0]["state"] == "collected"
    committed, left = walk_ledger(res.path / "ledger.jsonl", 1.0)
    assert committed == pytest.approx(again.spend_usd) and left == pytest.approx(0.0, abs=1e-12)
    out = CliRunner().invoke(main, ["batch", "status", str(res.path), "--json", "--offline"])
    assert json.loads(out.output.splitlines()[0])["state"] == "collected"


# -- answers nobody should believe -------------------------------------------------------

def test_malformed_and_over_ceiling_lines_are_charged_at_their_worst_and_a_breach_cancels_the_rest(tmp_path):
    suite = write_suite(tmp_path / "suite", 6)
    script = {**SCRIPT, "faults": [{"kind": "malformed", "match": "country 1?"},
                                   {"kind": "over_usage", "match": "country 3?", "times": 1},
                                   {"kind": "slow", "match": "country 5?", "delay_s": 0.3}]}
    with ScriptedServer(script) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False,
                        batch=fast(max_requests=24))  # case-00..03 in the first batch, the rest in the second
        statuses = [b["status"] for b in srv.batches.batches.values()]
    assert res.reason.startswith("ceiling breached")
    assert statuses == ["completed", "cancelled"]  # the breach cancelled the batch still running
    errors = {(e["case_id"], e["arm"], e["index"]): e["error"] for e in iter_jsonl(res.path / "errors.jsonl")}
    malformed = [k for k, e in errors.items() if e.startswith("malformed response")]
    assert len(malformed) == 6 and {k[0] for k in malformed} == {"case-01"}
    assert sum(1 for e in errors.values() if e.startswith("ceiling breached")) == 1
    worst = [e for e in iter_jsonl(res.path / "ledger.jsonl") if e["event"] == "charge" and e.get("reason") == "malformed response"]
    assert len(worst) == 6 and all(e["cost_usd"] == pytest.approx(LINE_WORST) for e in worst)
    summary = json.loads((res.path / "summary.json").read_text())
    assert summary["ceiling_breaches"] == 1
    walk_ledger(res.path / "ledger.jsonl", 1.0)


def test_result_lines_for_other_ids_and_second_results_are_never_recorded(tmp_path):
    suite = write_suite(tmp_path / "suite", 2)
    with ScriptedServer({**SCRIPT, "batch": {"faults": [{"kind": "rogue"}]}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, batch=fast())
    rows = results(res.path)
    assert res.complete and len(rows) == 12 and "ROGUE" not in {r["output"] for r in rows.values()}
    outcome = json.loads((res.path / BATCHES).read_text())["batches"][0]["outcome"]
    assert outcome["unexpected"] == 13 and outcome["answered"] == 12
    assert len(charges(res.path)) == 12 and set(charges(res.path).values()) == {1}


# -- the judge -------------------------------------------------------------------------

def test_judge_calls_in_a_batch_grade_exactly_as_online_on_the_runs_ledger(tmp_path):
    from test_grading import JUDGE_SCRIPT, write_run
    from test_grading import write_suite as write_judged_suite

    suite = write_judged_suite(tmp_path)
    cfg = json.loads((suite / "config.json").read_text())
    (suite / "config.json").write_text(json.dumps({**cfg, "judge_batch_price": cfg["judge_price"]}))
    run_a = write_run(tmp_path / "a", suite)
    run_b = write_run(tmp_path / "b", suite)
    with ScriptedServer(JUDGE_SCRIPT) as srv:
        online = grade_run(run_a, judge_base_url=srv.base_url)
        n_online = srv.stats["requests"]
        batched = grade_run(run_b, judge_base_url=srv.base_url, batch=fast())
        assert srv.stats["requests"] == 2 * n_online  # each line through the online rules, once
        assert srv.batch_stats["batches"] == 1 and srv.batch_stats["lines"] == n_online
        lines = [[json.loads(x) for x in (p / "grades.jsonl").read_text().splitlines()] for p in (run_a, run_b)]
        regrade = grade_run(run_b, judge_base_url=srv.base_url, batch=fast())  # the judge cache answers: no batch
        assert srv.batch_stats["batches"] == 1
    assert lines[0] == lines[1] and any(g["judge_score"] for g in lines[1])  # costs too: the same prices
    assert online.summary.judge_spend_usd == pytest.approx(batched.summary.judge_spend_usd)
    assert sum(g["judge_cost_usd"] for g in lines[1]) == pytest.approx(batched.summary.judge_spend_usd)
    assert batched.summary.judge_spend_usd > 0.0
    assert regrade.summary.judge_spend_usd == 0.0 and regrade.summary.cache_hits > 0
    # one cost per case whatever path made it (issue 26): online, batch, and the re-grade
    # from the judge cache (which avoided exactly what the batch paid) give one list price
    cpc = [r.summary.overall.cost_per_case_usd for r in (online, batched, regrade)]
    assert cpc[0] > 0 and cpc == pytest.approx([cpc[0]] * 3, rel=1e-12)
    assert regrade.summary.overall.judge_cache_avoided_usd == pytest.approx(batched.summary.judge_spend_usd)
    assert regrade.summary.judge_ledger_usd == pytest.approx(batched.summary.judge_spend_usd)
    judge_charges = [e for e in iter_jsonl(run_b / "ledger.jsonl") if e["event"] == "charge"]
    assert judge_charges and {e["role"] for e in judge_charges} == {"judge"}
    assert all(e["line"].startswith("judge/") for e in judge_charges)
    walk_ledger(run_b / "ledger.jsonl", 1.0)


def test_grade_batch_needs_a_judge_batch_price(tmp_path):
    from test_grading import write_run
    from test_grading import write_suite as write_judged_suite

    suite = write_judged_suite(tmp_path)
    run = write_run(tmp_path, suite)
    out = CliRunner().invoke(main, ["grade", str(run), "--batch"])
    assert out.exit_code == 2 and "--batch needs judge_batch_price" in out.output
    assert not (run / "grades.jsonl").exists()


def test_run_batch_from_the_command_line(tmp_path):
    suite = write_suite(tmp_path / "suite", 2)
    with ScriptedServer(SCRIPT) as srv:
        out = CliRunner().invoke(main, ["run", str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url",
                                        srv.base_url, "--no-progress", "--batch", "--batch-poll-s", "0.02",
                                        "--batch-max-requests", "5"])
        assert srv.batch_stats["batches"] == 3
    assert out.exit_code == 0, out.output
    run = Path(out.output.split("run folder: ")[1].splitlines()[0])
    assert len(load_run(run).samples) == 12


def test_judge_batches_left_open_are_collected_by_the_next_grading_with_no_call_made_twice(tmp_path):
    from test_grading import JUDGE_SCRIPT, write_run
    from test_grading import write_suite as write_judged_suite

    suite = write_judged_suite(tmp_path)
    cfg = json.loads((suite / "config.json").read_text())
    (suite / "config.json").write_text(json.dumps({**cfg, "judge_batch_price": HALF}))
    run = write_run(tmp_path, suite)
    with ScriptedServer(JUDGE_SCRIPT) as srv:
        first = grade_run(run, judge_base_url=srv.base_url, batch=BatchOptions(poll_s=0.02, wait=False))
        assert not first.complete and "judge batch(es) still open" in (first.summary.stop_reason or "")
        assert first.summary.judge_spend_usd > 0  # the open batch's worst case, until it is collected
        assert all(g.judge_score is None for g in first.grades if g.case_id in ("open-1", "inject"))
        # Without --batch the grading polls at the default interval (15 s): let the batch end
        # at the provider first (an event, not a clock), so its first status check collects it.
        assert srv.wait_until(lambda _: [b["status"] for b in srv.batches.batches.values()] == ["completed"], 60)
        second = grade_run(run, judge_base_url=srv.base_url)  # no --batch: the open batch is collected, not redone
        assert srv.batch_stats["batches"] == 1
        assert srv.stats["requests"] == srv.batch_stats["lines"]  # no judge call went online
    assert second.complete and second.summary.judge_spend_usd > 0
    assert json.loads((run / BATCHES).read_text())["batches"][0]["state"] == "collected"
    committed, left = walk_ledger(run / "ledger.jsonl", 1.0)
    assert left == pytest.approx(0.0, abs=1e-12) and committed == pytest.approx(second.summary.run_spend_usd)


def test_a_kill_between_upload_or_create_and_their_record_looks_the_ids_up_instead_of_repeating(tmp_path):
    suite = write_suite(tmp_path / "suite", 2)
    with ScriptedServer(SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False,
                        batch=BatchOptions(poll_s=0.02, wait=False))
        assert srv.batch_stats["uploads"] == srv.batch_stats["batches"] == 1
        # The record a kill leaves when it struck after the upload and the create had
        # begun but before either id was written:
        log = json.loads((res.path / BATCHES).read_text())
        entry = log["batches"][0]
        entry.update(state="prepared", file_id=None, batch_id=None, status=None, upload_started=True,
                     create_started=True)
        (res.path / BATCHES).write_text(json.dumps(log))
        again = run_suite(suite, base_url=srv.base_url, resume=res.path, progress=False, batch=fast())
        assert srv.batch_stats["uploads"] == srv.batch_stats["batches"] == 1  # found by name and by input file
        assert srv.batch_stats["lines"] == 12
    assert again.complete and len(results(res.path)) == 12
    assert json.loads((res.path / BATCHES).read_text())["batches"][0]["batch_id"] == next(iter(srv.batches.batches))


def test_a_server_that_dies_while_polled_stops_the_run_with_its_batch_recorded_and_its_worst_case_spent(tmp_path):
    suite = write_suite(tmp_path / "suite", 6)
    srv = ScriptedServer({**SCRIPT, "batch": {"lines_per_s": 5}}).start()  # 36 lines: about 7 s
    try:
        def die_soon() -> str | None:
            if srv.batch_stats["lines"] >= 3 and srv.exit_reason() is None:
                srv.stop()
            return srv.exit_reason()

        t0 = time.monotonic()
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False, batch=fast(),
                        watch=die_soon)
        assert time.monotonic() - t0 < 5  # stopped at once, not after a round of failed polls
    finally:
        srv.stop()
    assert not res.complete and res.reason.startswith("the scripted server at") and "was stopped" in res.reason
    assert "1 batch(es) still open at the provider" in res.reason
    entry = json.loads((res.path / BATCHES).read_text())["batches"][0]
    assert entry["state"] == "submitted" and entry["batch_id"] and entry["file_id"]
    assert res.spend_usd == pytest.approx(36 * LINE_WORST)  # in flight: every line may yet be billed
    summary = json.loads((res.path / "summary.json").read_text())
    assert summary["in_flight_usd"] == pytest.approx(36 * LINE_WORST) == summary["spend_usd"]
    assert "of it is the worst case of batches still running" in (res.path / "summary.md").read_text()
    out = CliRunner().invoke(main, ["batch", "status", str(res.path)])
    assert out.exit_code == 0 and "not asked" in out.output  # the provider is gone: the record is shown


def test_an_agent_unit_is_refused_batch_before_anything(tmp_path):
    """An agent's calls each wait on the answer before: they cannot go in one provider
    batch. Refused at once (exit 2, naming the key), no run folder made."""
    suite = tmp_path / "agent"
    shutil.copytree(Path(__file__).resolve().parent.parent / "data" / "agent", suite,
                    ignore=shutil.ignore_patterns("runs", "reports"))
    cfg = json.loads((suite / "config.json").read_text())
    (suite / "config.json").write_text(json.dumps({**cfg, "batch_price": HALF}))
    runs = tmp_path / "runs"
    out = CliRunner().invoke(main, ["run", str(suite), "--runs-dir", str(runs), "--base-url", "http://127.0.0.1:9/v1",
                                    "--batch", "--no-progress"])
    assert out.exit_code == 2, out.output
    assert "a command unit's calls each depend on the answer before" in out.output and "$.unit.kind" in out.output
    assert not list(runs.glob("*/config.json"))


def test_a_judge_batch_stop_says_to_grade_again_and_a_too_long_input_keeps_its_reason(tmp_path):
    from test_grading import JUDGE_SCRIPT, OUTPUTS, write_run
    from test_grading import write_suite as write_judged_suite

    suite = write_judged_suite(tmp_path)
    cfg = json.loads((suite / "config.json").read_text())
    (suite / "config.json").write_text(json.dumps({**cfg, "judge_batch_price": cfg["judge_price"]}))
    outs = dict(OUTPUTS)
    outs["open-1"] = ["ANSWER-GOOD " + "word " * 5000, *OUTPUTS["open-1"][1:]]  # over the judge's max_tokens_in
    expiring = {**JUDGE_SCRIPT, "batch": {"faults": [{"kind": "expire", "after_lines": 1, "times": 1}]}}
    with ScriptedServer(expiring) as srv:
        g = grade_run(write_run(tmp_path / "r", suite, outputs=outs), judge_base_url=srv.base_url, batch=fast())
    assert not g.complete
    reason = g.summary.stop_reason or ""
    assert "expired" in reason and reason.endswith("grade again (with --batch) to submit them again")
    assert "--resume" not in reason  # grade has no --resume
    long = next(x for x in g.grades if x.case_id == "open-1" and x.index == 0)
    assert long.passed is None and "InputTooLong" in long.error and "over max_tokens_in" in long.error


# -- arms on other models: one batch per endpoint, model and price ------------------------

ARM_SCRIPT = {"rules": [{"match": "country", "texts": ["Paris", "Lima", "Rome"],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 2}}]}
NEW_PRICE, NEW_HALF = {"in_per_mtok": 3.0, "out_per_mtok": 7.0}, {"in_per_mtok": 1.5, "out_per_mtok": 3.5}


def test_arms_on_two_models_go_in_one_batch_each_at_their_own_batch_price_and_replay_per_arm(tmp_path):
    import openai

    arms = [{"name": "base"},
            {"name": "new", "generator": {"model": "m-new"}, "price": NEW_PRICE, "batch_price": NEW_HALF},
            {"name": "copy"}]  # base's twin: the same requests, each sent once
    suite = write_suite(tmp_path / "suite", 3, k=2, arms=arms)
    runs = tmp_path / "runs"
    with ScriptedServer(ARM_SCRIPT) as srv:
        res = run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False, batch=fast())
        assert res.complete, res.reason
        assert srv.batch_stats["uploads"] == srv.batch_stats["batches"] == 2 and srv.batch_stats["lines"] == 12
        # The server's own record of the two batches: every line of one carries base's model
        # (copy's requests are base's, not sent twice), every line of the other m-new.
        api = openai.OpenAI(base_url=srv.base_url, api_key="test")
        models, arms_of = [], []
        for b in api.batches.list():
            lines = [json.loads(x) for x in api.files.content(b.input_file_id).text.splitlines() if x.strip()]
            models.append({line["body"]["model"] for line in lines})
            arms_of.append({line["custom_id"].split("/")[1] for line in lines})
            assert len(lines) == 6
        api.close()
    assert sorted(map(sorted, models)) == [["m-new"], ["scripted"]]
    assert sorted(map(sorted, arms_of)) == [["base"], ["new"]]
    entries = json.loads((res.path / BATCHES).read_text())["batches"]
    assert {e["model"]: (e["arms"], e["price"]) for e in entries} == {
        "scripted": (["base", "copy"], HALF), "m-new": (["new"], NEW_HALF)}
    # By hand. Each line: 10 tokens in, 2 out. base at its batch price 0.5 / 1.0 USD per Mtok:
    # 10 x 0.5 + 2 x 1.0 = 7 USD per M lines = $0.000007; new at 1.5 / 3.5: 15 + 7 = $0.000022.
    # Each batch reserved whole at its worst case, 6 lines x (64 in x in-price + 8 out x out-price):
    # base 6 x (32 + 8) = $0.000240, new 6 x (96 + 28) = $0.000744.
    base_line, new_line = 7e-6, 22e-6
    reserved = sorted(round(e["amount_usd"], 12) for e in iter_jsonl(res.path / "ledger.jsonl")
                      if e["event"] == "reserve")
    assert reserved == [pytest.approx(240e-6), pytest.approx(744e-6)]
    rows = results(res.path)
    for (c, arm, i), r in rows.items():
        assert r["model"] == ("m-new" if arm == "new" else "scripted")
        assert r["cost_usd"] == pytest.approx({"base": base_line, "new": new_line, "copy": 0.0}[arm])
        if arm == "copy":  # the twin replayed base's answer from the cache, once base's batch was collected
            assert r["cached"] and r["output"] == rows[(c, "base", i)]["output"]
            assert r["cost_avoided_usd"] == pytest.approx(base_line)
    assert res.per_arm["base"]["paid_usd"] == pytest.approx(6 * base_line)
    assert res.per_arm["new"]["paid_usd"] == pytest.approx(6 * new_line)
    assert res.per_arm["copy"]["paid_usd"] == 0 and res.per_arm["copy"]["avoided_usd"] == pytest.approx(6 * base_line)
    assert res.spend_usd == pytest.approx(6 * base_line + 6 * new_line)
    committed, left = walk_ledger(res.path / "ledger.jsonl", 1.0)
    assert left == pytest.approx(0.0, abs=1e-12) and committed == pytest.approx(res.spend_usd)
    # Replay from the cache, per arm: the same server (answers are keyed by the endpoint
    # that gave them), nothing sent, no batch made, each arm its own answers.
    with ScriptedServer(ARM_SCRIPT) as srv:
        first = run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False, batch=fast())
        n, batches = len(srv.requests), srv.batch_stats["batches"]
        again = run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False, batch=fast())
        assert len(srv.requests) == n and srv.batch_stats["batches"] == batches == 2
    assert first.complete and again.complete and again.spend_usd == 0
    one, two = results(first.path), results(again.path)
    assert all(r["cached"] for r in two.values())
    assert {k: (r["output"], r["model"]) for k, r in two.items()} == {k: (r["output"], r["model"]) for k, r in one.items()}
    spend = again.per_arm
    assert spend["new"]["avoided_usd"] == pytest.approx(6 * new_line)
    assert spend["base"]["avoided_usd"] == pytest.approx(6 * base_line) == spend["copy"]["avoided_usd"]


def test_a_twin_at_another_batch_price_replays_its_twins_line_and_avoids_its_own_batch_price(tmp_path):
    # "dear" sends base's very requests (prices are not part of a request) at its own prices.
    arms = [{"name": "base"}, {"name": "dear", "price": NEW_PRICE, "batch_price": NEW_HALF}]
    suite = write_suite(tmp_path / "suite", 3, k=2, arms=arms)
    runs = tmp_path / "runs"
    with ScriptedServer(ARM_SCRIPT) as srv:
        res = run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False, batch=fast())
        assert res.complete, res.reason
        assert srv.batch_stats["lines"] == len(srv.requests) == 6  # base's lines, each once; none online
    # By hand: 10 tokens in, 2 out per line. base at 0.5 / 1.0 USD per Mtok: 5 + 2 = $0.000007;
    # dear, at its own batch price 1.5 / 3.5: 15 + 7 = $0.000022 avoided per replayed line.
    base_line, dear_line = 7e-6, 22e-6
    rows = results(res.path)
    for (c, arm, i), r in rows.items():
        if arm == "dear":
            assert r["cached"] and r["output"] == rows[(c, "base", i)]["output"] and r["cost_usd"] == 0
            assert r["cost_avoided_usd"] == pytest.approx(dear_line)
        else:
            assert r["cost_usd"] == pytest.approx(base_line) and not r["cached"]
    assert res.per_arm["dear"]["paid_usd"] == 0 and res.per_arm["dear"]["avoided_usd"] == pytest.approx(6 * dear_line)
    assert res.spend_usd == pytest.approx(6 * base_line)
    # Replayed from the cache by a second batch run: each arm avoids its own batch price.
    with ScriptedServer(ARM_SCRIPT) as srv:
        run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False, batch=fast())
        n = len(srv.requests)  # answers are keyed by the server that gave them: fill the cache here
        again = run_suite(suite, runs_dir=runs, base_url=srv.base_url, progress=False, batch=fast())
        assert len(srv.requests) == n
    assert again.complete and again.spend_usd == 0
    assert again.per_arm["dear"]["avoided_usd"] == pytest.approx(6 * dear_line)
    assert again.per_arm["base"]["avoided_usd"] == pytest.approx(6 * base_line)


def test_an_arm_on_another_model_without_its_own_batch_price_is_refused_naming_the_arm_and_its_key(tmp_path):
    # The suite's batch_price is for its own model: the arm on m-new has none, and --batch
    # must say so at the arm's key, before any folder or call is made.
    arms = [{"name": "base"}, {"name": "new", "generator": {"model": "m-new"}, "price": NEW_PRICE}]
    suite = write_suite(tmp_path / "suite", 2, k=1, arms=arms)
    runs = tmp_path / "runs"
    with ScriptedServer(ARM_SCRIPT) as srv:
        out = CliRunner().invoke(main, ["run", str(suite), "--runs-dir", str(runs), "--base-url", srv.base_url,
                                        "--batch", "--no-progress"])
        assert srv.requests == [] and srv.batch_stats["uploads"] == 0
    assert out.exit_code == 2, out.output
    assert "$.arms[1].batch_price" in out.output and "arm 'new'" in out.output and "'m-new'" in out.output
    assert "$.batch_price" not in out.output.replace("$.arms[1].batch_price", "")
    assert not runs.exists() or not any(runs.iterdir())


def test_batches_of_two_models_left_open_are_each_collected_by_resume_and_the_twin_replays(tmp_path):
    arms = [{"name": "base"},
            {"name": "new", "generator": {"model": "m-new"}, "price": NEW_PRICE, "batch_price": NEW_HALF},
            {"name": "copy"}]
    suite = write_suite(tmp_path / "suite", 3, k=2, arms=arms)
    with ScriptedServer(ARM_SCRIPT) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False,
                        batch=BatchOptions(poll_s=0.02, wait=False))
        assert not res.complete and "2 batch(es) submitted and not collected yet" in res.reason
        assert res.samples_ran == 0 and srv.batch_stats["batches"] == 2
        again = run_suite(suite, base_url=srv.base_url, resume=res.path, progress=False)  # online: collects both
        assert srv.batch_stats["batches"] == 2 and srv.batch_stats["lines"] == 12
        assert len(srv.requests) == 12  # the batch lines only: copy's keys replayed, none sent online
    assert again.complete, again.reason
    rows = results(res.path)
    assert all(rows[(c, "copy", i)]["cached"] and rows[(c, "copy", i)]["output"] == rows[(c, "base", i)]["output"]
               for c, arm, i in rows if arm == "base")
    assert {e["state"] for e in json.loads((res.path / BATCHES).read_text())["batches"]} == {"collected"}
    assert again.per_arm["new"]["paid_usd"] == pytest.approx(6 * 22e-6)
    assert again.per_arm["base"]["paid_usd"] == pytest.approx(6 * 7e-6) and again.per_arm["copy"]["paid_usd"] == 0
    committed, left = walk_ledger(res.path / "ledger.jsonl", 1.0)
    assert left == pytest.approx(0.0, abs=1e-12) and committed == pytest.approx(again.spend_usd)


def test_twin_lines_send_each_request_once_and_the_twin_key_waits():
    from types import SimpleNamespace

    from evalkit.running.batch import _TwinLines

    client = SimpleNamespace(cache_endpoint="http://host/v1", endpoint=SimpleNamespace(model="m"))
    lines = _TwinLines(engine=None, sink=None, twins={"base", "copy"})
    assert not lines.waits(client, "h", ("c", "base", 0))  # the first line carries the request
    assert lines.waits(client, "h", ("c", "copy", 0))  # its twin's very request: waits, replays later
    assert not lines.waits(client, "h", ("c", "copy", 1))  # another index is another request
    assert not lines.waits(client, "other", ("c", "copy", 2))
    assert not lines.waits(client, "h", ("c", "solo", 0))  # an arm with no twin never waits
    assert lines.waiting == [("c", "copy", 0)]
