"""A steady rate limit used to the full (issue 31): the scripted server's rate-limit mode
refuses as providers do (every refused request counted against the limit, 429 with
Retry-After and `x-ratelimit-*` headers), and `evalkit run` through the CLI completes
under it with zero samples lost and refusals bounded by the first burst, because every
worker shares one pacer that learns the limit and holds all on a 429. Not timing-based:
counts, not durations, are asserted (figures: benchmarks/bench_ratelimit.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.calls.client import ModelClient
from evalkit.calls.ledger import Ledger
from evalkit.calls.ratelimit import OUTCOME_WINDOW, Pacer, Refusal, pacer_for, parse_duration
from evalkit.foundations.records import Endpoint, Price
from evalkit.runfolder.runs import iter_jsonl
from evalkit.calls.serve import ScriptedServer

from conftest import write_engine_suite

CONCURRENCY = 16


def _limited(rpm: float, headers: bool = True) -> dict:
    return {
        "default": {"text": "Paris"},
        "rate_limit": {"requests_per_min": rpm, "tokens_per_min": 1_000_000, "burst_s": 2.0, "headers": headers},
    }


def _suite(root: Path, n_cases: int, k: int) -> Path:
    cases = [{"id": f"c{i:03d}", "input": f"capital {i}?", "expected": "Paris", "tags": ["t"]} for i in range(n_cases)]
    return write_engine_suite(root, cases, k=k, concurrency=CONCURRENCY, max_attempts=2, cost_cap_usd=5.0)


def _run(suite: Path, url: str, runs: Path):
    return CliRunner().invoke(main, ["run", str(suite), "--base-url", url, "--runs-dir", str(runs), "--no-progress"])


def test_the_server_counts_refused_requests_and_says_so_in_headers() -> None:
    # 6 a minute with a 20 s burst: two requests, then one more only after 10 s, so a slow
    # machine's pauses between the requests below cannot refill the bucket (at 60 a minute
    # a one-second stall did, and CI's loaded machine got an answer where a 429 was due)
    with ScriptedServer({"default": {"text": "ok"}, "rate_limit": {"requests_per_min": 6, "burst_s": 20.0}}) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        ok = client.completions.with_raw_response.create(model="m", prompt="hi", max_tokens=4)
        assert ok.headers["x-ratelimit-limit-requests"] == "6"
        assert ok.headers["x-ratelimit-remaining-requests"] == "1"
        client.completions.create(model="m", prompt="hi", max_tokens=4)
        refused = []
        for _ in range(5):  # each refusal takes its share too: the level goes below zero
            with pytest.raises(openai.RateLimitError) as exc:
                client.completions.create(model="m", prompt="hi", max_tokens=4)
            refused.append(float(exc.value.response.headers["retry-after"]))
            assert exc.value.response.headers["x-ratelimit-remaining-requests"] == "0"
        assert refused == sorted(refused) and refused[-1] > refused[0] + 3.0  # one more second owed per refusal
        assert srv.stats["rate_limited"] == 5 and srv.rate_limit.admitted == 2


def test_a_run_under_a_steady_limit_loses_nothing_and_refusals_stay_bounded(tmp_path: Path) -> None:
    suite = _suite(tmp_path / "suite", 20, 3)  # 120 samples at 1,200 requests/min
    with ScriptedServer(_limited(1200)) as srv:
        res = _run(suite, srv.base_url, tmp_path / "runs")
        refused, admitted = srv.rate_limit.refused, srv.rate_limit.admitted
    assert res.exit_code == 0, res.output
    run = next(p.parent for p in (tmp_path / "runs").glob("*/results.jsonl"))
    keys = {(r["case_id"], r["arm"], r["index"]) for r in iter_jsonl(run / "results.jsonl")}
    assert len(keys) == 120 and admitted == 120
    assert not (run / "errors.jsonl").exists() or not list(iter_jsonl(run / "errors.jsonl"))
    # Only the first burst (before any header was seen) can overrun the 40-request bucket.
    assert refused <= CONCURRENCY, refused


def test_without_headers_the_limit_is_learned_from_429_spacing(tmp_path: Path) -> None:
    suite = _suite(tmp_path / "suite", 20, 3)
    with ScriptedServer(_limited(1200, headers=False)) as srv:
        res = _run(suite, srv.base_url, tmp_path / "runs")
        refused = srv.rate_limit.refused
    assert res.exit_code == 0, res.output
    run = next(p.parent for p in (tmp_path / "runs").glob("*/results.jsonl"))
    assert len({(r["case_id"], r["arm"], r["index"]) for r in iter_jsonl(run / "results.jsonl")}) == 120
    assert refused <= 120, refused  # at most one refusal per sample on average, every sample done


def test_one_pacer_per_endpoint_is_shared_and_a_429_holds_it() -> None:
    a, b = pacer_for("http://127.0.0.1:9/v1", "m"), pacer_for("http://127.0.0.1:9/v1/", "m")
    assert a is b and pacer_for("http://127.0.0.1:9/v1", "other") is not a
    p = Pacer()
    p.observe({"x-ratelimit-limit-requests": "600", "x-ratelimit-limit-tokens": "60000"})
    assert p.request_rate == 10.0 and p.token_rate == 1000.0 and p.from_headers
    spent = {"x-ratelimit-remaining-requests": "0"}
    assert p.refused(5.0, spent).wait_s > 4.0 and p.holds == 1
    # a shorter Retry-After inside a hold does not shorten it
    assert p.refused(1.0, spent).wait_s > 4.0 and p.holds == 1
    assert parse_duration("6m0s") == 360.0 and parse_duration("20ms") == 0.02 and parse_duration("1.5s") == 1.5
    assert parse_duration("soon") is None


def test_the_judge_is_paced_by_the_same_client(tmp_path: Path) -> None:
    from test_grading import JUDGE_SCRIPT, write_run, write_suite

    suite = write_suite(tmp_path / "suite", opt_out=True)
    run = write_run(tmp_path, suite)
    script = {**JUDGE_SCRIPT, "rate_limit": {"requests_per_min": 120, "burst_s": 1.0}}  # 2 per second
    with ScriptedServer(script) as srv:
        res = CliRunner().invoke(main, ["grade", str(run), "--judge-base-url", srv.base_url])
        refused, admitted = srv.rate_limit.refused, srv.rate_limit.admitted
    assert res.exit_code == 0, res.output
    judged = [g for g in iter_jsonl(run / "grades.jsonl") if g.get("judge_score") is not None]
    assert len(judged) == 6 and admitted >= 5  # identical outputs of one case share one call
    assert refused <= 8, refused  # the first burst only: the judge's concurrency at most


def test_an_agents_calls_through_the_proxy_are_paced_by_the_same_client(tmp_path: Path) -> None:
    import asyncio

    from test_proxy import _setup, _teardown

    script = {"default": {"text": "one two"}, "rate_limit": {"requests_per_min": 600, "burst_s": 1.0}}

    async def go(url: str) -> list[str]:
        things = await _setup(tmp_path, url)
        ep = things[5]
        agent = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key, max_retries=0)
        outs = await asyncio.gather(
            *(agent.completions.create(model="m", prompt=f"call {i}", max_tokens=5) for i in range(40))
        )
        await agent.close()
        await _teardown(*things)
        return [o.choices[0].text for o in outs]

    with ScriptedServer(script) as srv:
        texts = asyncio.run(go(srv.base_url))
        refused, admitted = srv.rate_limit.refused, srv.rate_limit.admitted
    assert texts == ["one two"] * 40 and admitted == 40  # every agent call answered, none lost
    assert refused <= 32, refused  # the first burst only (the client's 32 in flight, 10 fit)


def test_a_pace_that_would_outlast_the_keys_budget_stops_the_run_at_once_and_costs_nothing(tmp_path: Path) -> None:
    """A tiny token limit (here 300 tokens/min, from the server's own headers) would park
    every later call for minutes: the pacer says how long instead of sleeping it, and the
    run stops INCOMPLETE with `rate limited`, the unsent calls at $0 (review of issue 31)."""
    cases = [{"id": f"c{i}", "input": f"capital {i}?", "expected": "Paris", "tags": ["t"]} for i in range(6)]
    suite = write_engine_suite(tmp_path / "suite", cases, k=1, concurrency=1, max_attempts=2, cost_cap_usd=5.0,
                               rate_limit_budget_s=5.0)
    script = {"default": {"text": "Paris"}, "rate_limit": {"tokens_per_min": 300, "burst_s": 60.0, "headers": True}}
    with ScriptedServer(script) as srv:
        res = _run(suite, srv.base_url, tmp_path / "runs")
        admitted = srv.rate_limit.admitted
    assert res.exit_code == 1, res.output
    assert "rate limited" in res.output and "past rate_limit_budget_s 5" in res.output, res.output
    assert 1 <= admitted < 6
    run = next(p.parent for p in (tmp_path / "runs").glob("*/results.jsonl"))
    ledger = list(iter_jsonl(run / "ledger.jsonl"))
    # what was sent is what was paid for; nothing else was charged
    settled = [e for e in ledger if e["event"] == "settle"]
    assert len(settled) == admitted and all(e["cost_usd"] > 0 for e in settled)
    assert all(e.get("cost_usd", 0.0) == 0 for e in ledger if e["event"] not in ("reserve", "settle"))


def _random_refusals(p: Pacer, n: int, every: int = 10) -> list[Refusal]:
    """`n` answers, every `every`-th a 429 with Retry-After 0.2 s and no headers."""
    out = []
    for i in range(1, n + 1):
        if i % every:
            p.answered()
        else:
            out.append(p.refused(0.2))
    return out


def test_random_refusals_are_retried_alone_and_do_not_lower_the_pace() -> None:
    """Issue 44: 10% of requests refused at random (an overload, not a bucket) held
    every worker and cut the pace on each. Now each refused request waits its own
    Retry-After; no hold, no pace learned, a pace already learned not cut."""
    p = Pacer()
    refusals = _random_refusals(p, 400)
    assert refusals == [Refusal(0.2, limit=False)] * 40
    assert p.holds == 0 and p.held_for() == 0.0 and p.request_rate is None and p.random_refusals == 40
    q = Pacer()
    q.request_rate = 10.0  # a pace learned before: random refusals leave it where it was, or raise it
    _random_refusals(q, 400)
    assert q.holds == 0 and q.request_rate is not None and q.request_rate >= 10.0


def test_refusals_that_track_the_request_rate_are_a_limit_and_cut_the_pace() -> None:
    """A bucket run dry refuses most requests: once refusals pass the share random ones
    keep, every worker is held and the pace is cut, as before issue 44."""
    p = Pacer()
    _random_refusals(p, 100)
    first = [p.refused(0.5) for _ in range(OUTCOME_WINDOW)]
    assert not first[0].limit and first[-1].limit and p.holds == 1
    assert p.request_rate is not None and p.held_for() > 0.3
    rate = p.request_rate
    p._hold_until = 0.0  # the hold over: the next refusal in the run of them cuts again
    assert p.refused(0.5).limit and p.request_rate < rate and p.holds == 2


def test_the_refusals_headers_tell_a_spent_limit_from_an_overload() -> None:
    p = Pacer()
    overload = p.refused(0.2, {"x-ratelimit-remaining-requests": "17", "x-ratelimit-remaining-tokens": "9000"})
    assert overload == Refusal(0.2, limit=False) and p.holds == 0
    spent = p.refused(0.2, {"x-ratelimit-remaining-requests": "17", "x-ratelimit-remaining-tokens": "0"})
    assert spent.limit and p.holds == 1 and p.held_for() > 0.1


def _calls(url: str, n: int) -> tuple[list[str], dict, int]:
    """`n` calls through one client at concurrency 16: their texts, what the endpoint's
    pacer learned, and the requests the client allows in flight at the end."""

    async def go() -> tuple[list[str], dict, int]:
        client = ModelClient(
            Endpoint("scripted", None, "EVALKIT_TEST_KEY"),
            Price(1.0, 2.0),
            Ledger(10.0),
            max_tokens_in=64,
            max_tokens_out=8,
            base_url=url,
            concurrency=CONCURRENCY,
        )
        try:
            outs = await asyncio.gather(*(client.complete(prompt=f"capital {i}?", key=f"c{i}") for i in range(n)))
            return [o.text for o in outs], client.pacer.describe(), client.concurrency_limit
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_a_run_under_random_429s_keeps_its_pace_and_its_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_TEST_KEY", "x")
    script = {"default": {"text": "Paris"}, "seed": 5, "faults": [{"kind": "429", "rate": 0.1, "retry_after": 0.05}]}
    with ScriptedServer(script) as srv:
        texts, pace, in_flight = _calls(srv.base_url, 300)
        refused = srv.stats["faults"]["429"]
    assert texts == ["Paris"] * 300 and refused >= 10  # every call answered, through the refusals
    assert pace["holds"] == 0 and pace["requests_per_min"] is None and pace["random_refusals"] == refused
    assert in_flight == CONCURRENCY


def test_a_token_bucket_without_headers_still_lowers_the_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_TEST_KEY", "x")
    with ScriptedServer(_limited(1200, headers=False)) as srv:
        texts, pace, _ = _calls(srv.base_url, 60)
        refused = srv.rate_limit.refused
    assert texts == ["Paris"] * 60 and refused >= 1
    assert pace["holds"] >= 1 and pace["requests_per_min"] is not None
