"""The cost ledger: the cap holds under concurrency and adversarial usage; a response over
its reservation stops the run. Model calls go over HTTP to the scripted server."""
from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest

from evalkit.foundations.errors import BudgetExhausted, CeilingBreached, InputError
from evalkit.calls.ledger import Ledger, spend_by_arm
from evalkit.foundations.records import Price, Usage
from evalkit.running.runner import run_suite
from evalkit.runfolder.runload import load_run
from evalkit.runfolder.runs import TornLineWarning, iter_jsonl
from evalkit.calls.serve import ScriptedServer

from conftest import replay_ledger, write_engine_suite

PRICE = Price(in_per_mtok=1.0, out_per_mtok=2.0)


def write_suite(root: Path, n_cases: int, **config) -> Path:
    """A completion-mode suite folder with two arms; `config` overrides keys."""
    return write_engine_suite(root, [
        {"id": f"case-{i:03d}", "input": f"capital of country {i}", "expected": "Paris", "tags": ["capital"]}
        for i in range(n_cases)], **{"temperature": 0.5, "seed": 7, "k": 2, **config})


# -- the Ledger object -------------------------------------------------------------------

def test_reserve_refuses_what_would_pass_the_cap(tmp_path):
    worst = PRICE.cost(100, 10)
    led = Ledger(worst * 3.5, tmp_path / "ledger.jsonl")
    held = [led.reserve("generator", "m", PRICE, 100, 10, key=f"k{i}") for i in range(3)]
    with pytest.raises(BudgetExhausted):
        led.reserve("generator", "m", PRICE, 100, 10, key="k3")
    led.settle(held[0], Usage(50, 5))  # frees room: half the worst case was used
    led.reserve("generator", "m", PRICE, 100, 10, key="k4")
    assert led.committed_usd + led.reserved_usd <= led.cap_usd + 1e-12
    events = [e["event"] for e in iter_jsonl(tmp_path / "ledger.jsonl")]
    assert events.count("refuse") == 1 and events.count("reserve") == 4


def test_unknown_price_and_bad_cap_refuse_to_run():
    with pytest.raises(InputError):
        Ledger(0)
    with pytest.raises(InputError, match="no price"):
        Ledger(1.0).reserve("generator", "m", None, 1, 1)


def test_settle_over_the_reservation_commits_and_raises(tmp_path):
    led = Ledger(1.0, tmp_path / "ledger.jsonl")
    r = led.reserve("generator", "m", PRICE, 100, 10)
    with pytest.raises(CeilingBreached):
        led.settle(r, Usage(100, 11))
    assert led.committed_usd == pytest.approx(PRICE.cost(100, 11)) and led.reserved_usd == 0
    assert list(iter_jsonl(tmp_path / "ledger.jsonl"))[-1]["breach"] is True


def test_threads_never_pass_the_cap(tmp_path):
    worst = PRICE.cost(64, 8)
    cap = worst * 10
    led = Ledger(cap, tmp_path / "ledger.jsonl")
    granted = []

    def worker():
        for _ in range(50):
            try:
                r = led.reserve("generator", "m", PRICE, 64, 8)
            except BudgetExhausted:
                continue
            granted.append(r)
            led.settle(r, Usage(64, 8))  # adversarial: every call uses its whole ceiling

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 10
    assert led.committed_usd <= cap + 1e-12
    replay_ledger(tmp_path / "ledger.jsonl", cap)


def test_resume_counts_open_reservations_and_repairs_a_torn_line(tmp_path):
    p = tmp_path / "ledger.jsonl"
    led = Ledger(1.0, p)
    r1 = led.reserve("generator", "m", PRICE, 100, 10, key="a")
    led.settle(r1, Usage(40, 4))
    led.reserve("generator", "m", PRICE, 100, 10, key="b")  # in flight when killed
    led.close()
    with open(p, "a", encoding="utf-8") as fh:
        fh.write('{"event": "settle", "id": 2, "cost')  # torn by the kill
    with pytest.warns(TornLineWarning):
        again = Ledger.resume(1.0, p)
    expected = PRICE.cost(40, 4) + PRICE.cost(100, 10)
    assert again.committed_usd == pytest.approx(expected)
    r = again.reserve("generator", "m", PRICE, 100, 10, key="c")  # ids restart at 1 ...
    again.settle(r, Usage(1, 1))
    again.close()
    # ... but the epoch keeps them apart, and the file stays loadable line by line.
    third = Ledger.resume(1.0, p)
    assert third.committed_usd == pytest.approx(expected + PRICE.cost(1, 1))
    assert len(list(iter_jsonl(p))) == 5


# -- through the scripted server -----------------------------------------------------------

def test_cap_holds_with_32_concurrent_calls_and_adversarial_usage(tmp_path):
    # Every answer reports usage exactly at both ceilings (64 in, 8 out): the worst case
    # the reservation allows. The cap fits 37.5 worst-case calls; 200 are planned.
    suite = write_suite(tmp_path / "suite", 50, k=2, concurrency=32,
                        cost_cap_usd=PRICE.cost(64, 8) * 37.5)
    script = {"rules": [{"match": "country 1", "text": "Paris", "usage": {"prompt_tokens": 64, "completion_tokens": 8}},
                        {"match": "country", "texts": ["Paris", "Lima"],
                         "usage": {"prompt_tokens": 64, "completion_tokens": 8}}],
              "latency_s": 0.01}
    with ScriptedServer(script) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        n_requests = srv.stats["requests"]
    cap = res.cap_usd
    committed, peak = replay_ledger(res.path / "ledger.jsonl", cap)
    assert committed == pytest.approx(res.spend_usd)
    assert res.spend_usd <= cap + 1e-12
    assert peak > cap * 0.9  # the cap was really under pressure
    assert not res.complete and res.reason == "budget exhausted" and res.exit_code == 1
    run = load_run(res.path)
    assert len(run.samples) == n_requests == 37  # one line per paid call, none for refused ones
    assert (run.ledger.event == "refuse").sum() >= 1
    assert (res.path / "summary.md").read_text().startswith(f"INCOMPLETE: {res.ran}/50 cases (budget exhausted)")


def test_over_reporting_response_stops_the_run(tmp_path):
    suite = write_suite(tmp_path / "suite", 30, k=2, concurrency=4)
    script = {"default": {"text": "Paris"}, "faults": [{"kind": "over_usage", "times": 1}], "latency_s": 0.02}
    with ScriptedServer(script) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        n_requests = srv.stats["requests"]
    assert res.reason == "ceiling breached" and res.exit_code == 1 and not res.complete
    assert n_requests < 20  # of 120 planned: dispatching stopped
    run = load_run(res.path)
    assert len(run.errors) == 1 and "ceiling breached" in run.errors.iloc[0].error
    breach = run.ledger[run.ledger.event == "settle"].breach.fillna(False).astype(bool)
    assert breach.sum() == 1
    # The breaching call's real cost is committed: never hidden.
    assert res.spend_usd == pytest.approx(run.ledger[run.ledger.event == "settle"].cost_usd.sum())


# -- untrusted usage, stop causes --------------------------------------------------------

def test_untrusted_counts_never_lower_the_committed_total(tmp_path):
    led = Ledger(1.0, tmp_path / "ledger.jsonl")
    seen = [led.committed_usd]
    for pt, ct in [(-100000, 0), (3, -1), (2.5, 1), ("7", 1), (float("nan"), 1), (None, 1), (3, 1)]:
        r = led.reserve("generator", "m", PRICE, 64, 8)
        cost, usage, why = led.settle_reported(r, pt, ct)
        assert cost >= 0 and usage.prompt_tokens >= 0 and usage.completion_tokens >= 0
        if (pt, ct) == (3, 1):
            assert why is None and cost == pytest.approx(PRICE.cost(3, 1))
        else:
            assert why and cost == pytest.approx(PRICE.cost(64, 8))  # the full reservation
        seen.append(led.committed_usd)
    assert seen == sorted(seen) and led.untrusted == 6
    with pytest.raises(ValueError):  # settle itself refuses counts that are not non-negative integers
        led.settle(led.reserve("generator", "m", PRICE, 64, 8), Usage(-5, 1))
    led.close()
    # A hand-edited negative cost in the file does not lower the spend carried forward.
    p = tmp_path / "ledger.jsonl"
    before = Ledger.resume(1.0, p).committed_usd
    with open(p, "a") as fh:
        fh.write(json.dumps({"event": "settle", "run_epoch": 1, "id": 99, "cost_usd": -3.0}) + "\n")
    assert Ledger.resume(1.0, p).committed_usd == pytest.approx(before)


def test_negative_usage_from_the_endpoint_cannot_lower_spend_or_pass_the_cap(tmp_path):
    from test_client import HostileServer, completion_body  # a real HTTP server the scripted one refuses to be

    worst = PRICE.cost(64, 8)
    suite = write_suite(tmp_path / "suite", 10, k=1, concurrency=4, cost_cap_usd=worst * 6.5)
    neg = completion_body(usage={"prompt_tokens": -100000, "completion_tokens": 0})
    with HostileServer(lambda body: neg) as srv:
        res = run_suite(suite, arms=["base"], runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        n_requests = len(srv.requests)
    committed, _ = replay_ledger(res.path / "ledger.jsonl", res.cap_usd)
    # every answer the same malformed usage: the run stops after the first three (in-flight calls
    # finish and count) or when the cap is spent, whichever comes first; each at its reservation
    assert 3 <= n_requests <= 6 and res.spend_usd == pytest.approx(n_requests * worst) == pytest.approx(committed)
    run = load_run(res.path)
    assert run.samples.empty and len(run.errors) == n_requests  # a malformed response is no sample
    assert run.errors.error.str.contains("usage is not a non-negative integer").all()
    assert res.exit_code == 1 and (res.reason == "budget exhausted" or res.reason.startswith(
        "the first 3 samples failed with the same error: attempt 1: malformed response: usage is not")), res.reason
    assert res.reason.count("the first") <= 1  # the stop is said once
    assert json.loads((res.path / "summary.json").read_text())["untrusted_usage"] == n_requests
    costs = run.ledger[run.ledger.event == "settle"].committed_usd.tolist()
    assert costs == sorted(costs)  # monotone non-decreasing


def test_the_reason_names_every_stop_cause_with_the_breach_first(tmp_path):
    # Eight keys reserve at once; the cap holds three; one of those three over-reports.
    worst = PRICE.cost(64, 8)
    suite = write_suite(tmp_path / "suite", 10, k=1, concurrency=8, cost_cap_usd=worst * 3.5)
    script = {"rules": [{"match": "country 1", "text": "Lima", "usage": {"prompt_tokens": 5, "completion_tokens": 99}},
                        {"match": "country", "text": "Paris"}], "latency_s": 0.05}
    with ScriptedServer(script) as srv:
        res = run_suite(suite, arms=["base"], runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert res.reason == "ceiling breached; budget exhausted" and res.exit_code == 1
    summary = json.loads((res.path / "summary.json").read_text())
    assert summary["ceiling_breaches"] == 1 and summary["reason"] == res.reason
    assert (res.path / "summary.md").read_text().startswith(f"INCOMPLETE: {res.ran}/10 cases (ceiling breached; "
                                                            "budget exhausted)")
    assert (load_run(res.path).ledger.event == "refuse").sum() >= 1


def test_resume_refuses_a_ledger_with_a_bad_line_before_its_end(tmp_path):
    # Review finding: resume skipped any line it could not parse, so a damaged ledger
    # could carry less spend forward than was paid.
    p = tmp_path / "ledger.jsonl"
    p.write_text('{"event": "settle", "id": 1, "cost_usd": 0.5}\nnot json\n{"event": "settle", "id": 2, "cost_usd": 0.25}\n')
    with pytest.raises(InputError) as ei:
        Ledger.resume(10.0, p)
    assert ei.value.line == 2 and str(p) in str(ei.value)


# -- batches: one reservation, charged line by line, adopted by a later session ---------

def test_a_batch_reservation_is_charged_line_by_line_and_its_rest_closed(tmp_path):
    p = tmp_path / "ledger.jsonl"
    line = PRICE.cost(100, 10)
    led = Ledger(4 * line, p)
    r = led.reserve("generator", "m", PRICE, 3 * 100, 3 * 10, key="batch/generator-1", extra={"lines": 3})
    assert led.reserved_usd == pytest.approx(3 * line)
    with pytest.raises(BudgetExhausted):  # the batch holds three lines' worst case: two more do not fit
        led.reserve("generator", "m", PRICE, 200, 20, key="x")
    cost = led.charge(r, Usage(40, 4), tokens_in=100, tokens_out=10, line="c/a/0")
    assert cost == pytest.approx(PRICE.cost(40, 4))
    assert led.reserved_usd == pytest.approx(2 * line) and led.left_usd(r) == pytest.approx(2 * line)
    led.charge(r, Usage(0, 0), tokens_in=100, tokens_out=10, line="c/a/1", reason="HTTP 500")
    with pytest.raises(CeilingBreached):  # over the line's own ceilings, though within the batch's
        led.charge(r, Usage(150, 4), tokens_in=100, tokens_out=10, line="c/a/2")
    assert led.breaches == 1 and led.reserved_usd == pytest.approx(0.0, abs=1e-15)
    led.settle_failed(r, None, "batch completed")
    assert led.reserved_usd == 0.0
    assert led.committed_usd == pytest.approx(PRICE.cost(40, 4) + PRICE.cost(150, 4))
    led.close()
    events = list(iter_jsonl(p))
    assert [e["event"] for e in events] == ["reserve", "refuse", "charge", "charge", "charge", "release"]
    assert events[0]["lines"] == 3 and events[3]["reason"] == "HTTP 500" and events[4]["breach"] is True
    again = Ledger.resume(1.0, p)
    assert again.committed_usd == pytest.approx(led.committed_usd) and again.breaches == 1 and not again.orphans


def test_a_batch_left_open_counts_as_spent_until_a_later_session_adopts_it(tmp_path):
    p = tmp_path / "ledger.jsonl"
    line = PRICE.cost(100, 10)
    led = Ledger(1.0, p)
    r = led.reserve("generator", "m", PRICE, 400, 40, key="batch/generator-1", extra={"lines": 4})
    led.charge(r, Usage(10, 1), tokens_in=100, tokens_out=10, line="c/a/0")
    led.close()  # killed: the batch is still running at the provider

    second = Ledger.resume(1.0, p)
    spent = PRICE.cost(10, 1) + 3 * line  # what was charged, plus the three lines that may yet be billed
    assert second.committed_usd == pytest.approx(spent)
    assert set(second.orphans) == {"batch/generator-1"} and second.orphans["batch/generator-1"][2] == {"c/a/0"}
    held, charged = second.adopt("batch/generator-1", "generator", "m", PRICE, 400, 40)
    assert charged == {"c/a/0"} and held.amount_usd == pytest.approx(3 * line)
    assert second.committed_usd == pytest.approx(PRICE.cost(10, 1)) and second.reserved_usd == pytest.approx(3 * line)
    assert second.adopt("batch/generator-1", "generator", "m", PRICE, 400, 40) is None  # once
    second.charge(held, Usage(20, 2), tokens_in=100, tokens_out=10, line="c/a/1")
    second.close()  # killed again, after adopting it

    third = Ledger.resume(1.0, p)  # the chain of adoptions is followed
    assert third.committed_usd == pytest.approx(PRICE.cost(10, 1) + PRICE.cost(20, 2) + 2 * line)
    held, charged = third.adopt("batch/generator-1", "generator", "m", PRICE, 400, 40)
    assert charged == {"c/a/0", "c/a/1"} and held.amount_usd == pytest.approx(2 * line)
    third.settle_failed(held, Usage(100, 10), "batch completed", "1 line counted as processed, with no result")
    third.close()
    final = Ledger.resume(1.0, p)
    assert final.committed_usd == pytest.approx(PRICE.cost(10, 1) + PRICE.cost(20, 2) + line) and not final.orphans


# -- a cap that waits for money in flight -------------------------------------------------

def test_a_reservation_that_does_not_fit_waits_for_the_call_in_flight(tmp_path):
    """Event-driven: the second reservation waits on the first one's settle (no clock),
    and is refused only when nothing is in flight and it still does not fit."""
    import asyncio

    worst = PRICE.cost(100, 10)  # $0.00012
    led = Ledger(worst * 1.4, tmp_path / "ledger.jsonl")

    async def scenario() -> None:
        first = led.reserve("generator", "m", PRICE, 100, 10)
        second = asyncio.ensure_future(led.reserve_waiting("generator", "m", PRICE, 100, 10))
        await asyncio.sleep(0)  # let it run up to its wait (one turn of the loop, not a timer)
        assert not second.done() and led.waits == 1 and led.refusals == 0
        led.settle(first, Usage(10, 1))  # $0.000012 committed: $0.000048 + $0.00012 fits
        r2 = await second
        assert led.reserved_usd == pytest.approx(worst)
        led.settle(r2, Usage(100, 10))  # the worst case: committed $0.000132, room $0.000036
        with pytest.raises(BudgetExhausted):  # nothing in flight: refused at once, no wait
            await led.reserve_waiting("generator", "m", PRICE, 100, 10)
        assert led.refusals == 1

    asyncio.run(scenario())
    led.close()


def test_a_waiter_is_woken_by_a_settle_in_another_thread(tmp_path):
    import asyncio

    led = Ledger(PRICE.cost(100, 10) * 1.4)
    first = led.reserve("judge", "m", PRICE, 100, 10)
    settled = threading.Event()

    async def scenario() -> None:
        waiting = asyncio.ensure_future(led.reserve_waiting("judge", "m", PRICE, 100, 10))
        await asyncio.sleep(0)
        assert not waiting.done()
        t = threading.Thread(target=lambda: (led.settle(first, Usage(1, 1)), settled.set()))
        t.start()
        r = await waiting
        t.join()
        assert settled.is_set() and r.id == 2

    asyncio.run(scenario())


def test_concurrency_4_spends_a_cap_of_1_4_worst_case_calls(tmp_path):
    # The case of issue 26: concurrency 4, a cap worth 1.4 worst-case calls, 40 samples
    # (20 cases x 2 arms x k=1). Worst case per call: 1024 in x $1/M + 64 out x $2/M =
    # $0.001152; cap 1.4 x that = $0.0016128, so one reservation fits at a time. Each
    # answer really costs about 6..11 words in + 1 out, ~$0.00001, so 40 calls commit
    # ~$0.0004, under the 0.4 x $0.001152 = $0.00046 that leaves room for the next
    # worst case. Before the cap waited, the run stopped after 1 of 40 (the other three
    # reservations were refused while the first was in flight).
    worst = PRICE.cost(1024, 64)
    suite = write_suite(tmp_path / "suite", 20, k=1, concurrency=4, max_tokens_in=1024, max_tokens_out=64,
                        cost_cap_usd=worst * 1.4)
    with ScriptedServer({"rules": [{"match": "country", "texts": ["Paris", "Lima"]}], "latency_s": 0.01}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    committed, peak = replay_ledger(res.path / "ledger.jsonl", res.cap_usd)  # never past the cap
    run = load_run(res.path)
    assert len(run.samples) >= 30, (len(run.samples), res.reason)
    assert res.spend_usd <= res.cap_usd and committed == pytest.approx(res.spend_usd)
    # one reservation open at a time though 4 workers ran: they waited, none was refused
    opened = 0
    for ev in iter_jsonl(res.path / "ledger.jsonl"):
        opened += {"reserve": 1, "settle": -1, "release": -1}.get(ev["event"], 0)
        assert opened <= 1
    assert (run.ledger.event == "refuse").sum() <= 1


def test_an_arms_spend_is_the_same_whatever_order_its_calls_settled_in(tmp_path):
    """Two runs of the same samples settle in other orders (online and by batch, or at other
    concurrency); the arm's paid amount must not differ in its last digit between them."""
    usages = [Usage(165, 1), Usage(130, 5), Usage(151, 4), Usage(59, 8)]
    costs = [PRICE.cost(u.prompt_tokens, u.completion_tokens) for u in usages]
    assert sum(costs) != sum(reversed(costs))  # a float sum that depends on its order
    spent = []
    for name, order in (("forward", usages), ("backward", usages[::-1])):
        led = Ledger(1.0, tmp_path / f"{name}.jsonl")
        for i, u in enumerate(order):
            led.settle(led.reserve("generator", "m", PRICE, 200, 10, key=f"case-{i}/base/0"), u)
        spent.append(spend_by_arm(tmp_path / f"{name}.jsonl")["base"]["paid_usd"])
    assert spent[0] == spent[1] == math.fsum(costs)
