"""`SampleSession.model_call` over real HTTP to the scripted server: the trajectory line
each call leaves (the request as sent, on each endpoint) and how an answered, a failed,
a refused and a cut call are counted and recorded."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evalkit.calls.client import ModelClient
from evalkit.calls.ledger import Ledger
from evalkit.calls.serve import ScriptedServer
from evalkit.calls.session import SampleSession
from evalkit.foundations.errors import BudgetExhausted, UnitCallError
from evalkit.foundations.records import Endpoint, Price
from evalkit.runfolder.trajectories import TrajectoryWriter, read_trajectory
from evalkit.suites.units import ToolFixtures

PRICE = Price(1.0, 2.0)
WORST = PRICE.cost(500, 20)  # one call's reservation: max_tokens_in 500, max_tokens_out 20


class Sample:
    """One sample's session on the scripted server at `base_url` (no proxy in between)."""

    def __init__(self, tmp: Path, base_url: str, *, cap: float = 1.0, timeout_s: float = 60.0) -> None:
        self.ledger = Ledger(cap, tmp / "ledger.jsonl")
        self.client = ModelClient(Endpoint("scripted", base_url, "EVALKIT_TEST_KEY"), PRICE, self.ledger,
                                  max_tokens_in=500, max_tokens_out=20, max_attempts=1, timeout_s=timeout_s)
        self.writer = TrajectoryWriter(tmp, "case", "arm", 0)
        self.stops: list[str] = []
        self.session = SampleSession(client=self.client, key=("case", "arm", 0), writer=self.writer,
                                     fixtures=ToolFixtures({}), should_stop=lambda: None, on_stop=self.stops.append)
        self.tmp = tmp

    async def close(self) -> list[dict]:
        await self.client.aclose()
        self.writer.close()
        self.ledger.close()
        t = read_trajectory(self.tmp, "case", "arm", 0)
        return list(t.model_calls)


def test_each_calls_line_holds_the_request_as_sent_on_each_endpoint(tmp_path):
    user = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]

    async def go(srv):
        s = Sample(tmp_path, srv.base_url)
        await s.session.model_call(messages=user, max_tokens=500, requested_model="scripted")
        await s.session.model_call(messages=user, tools=tools, max_tokens=5, temperature=0.0, seed=3, stop=["x"],
                                   extra={"top_p": 0.5}, requested_model="gpt-x", stream=True)
        await s.session.model_call(prompt="say hi", temperature=0.7)
        await s.session.model_call(responses_input="hello", max_tokens=7, extra={"instructions": "be brief"})
        return s, await s.close()

    with ScriptedServer({"default": {"text": "ok"}}) as srv:
        s, calls = asyncio.run(go(srv))
    assert [c["endpoint"] for c in calls] == ["chat", "chat", "completion", "responses"]
    assert [c["call"] for c in calls] == [1, 2, 3, 4] and all(c["status"] == "ok" for c in calls)
    # the ceiling as the wire names it, at most max_tokens_out; only the parameters given
    assert calls[0]["request"] == {"messages": user, "params": {"max_tokens": 20}}
    assert calls[1]["request"] == {"messages": user, "tools": tools, "params": {
        "max_tokens": 5, "temperature": 0.0, "seed": 3, "stop": ["x"], "top_p": 0.5}}
    assert calls[2]["request"] == {"prompt": "say hi", "params": {"max_tokens": 20, "temperature": 0.7}}
    assert calls[3]["request"] == {"input": "hello", "params": {"max_output_tokens": 7, "instructions": "be brief"}}
    # the model asked for is kept only when it is not the one that answered; a stream is marked
    assert "requested_model" not in calls[0] and calls[1]["requested_model"] == "gpt-x"
    assert calls[1]["stream"] is True and not any("stream" in c for c in (calls[0], calls[2], calls[3]))
    assert s.session.calls == 4 and s.session.attempts == 4 and s.session.cached_calls == 0
    assert s.session.usage_in == sum(c["usage"]["prompt_tokens"] for c in calls)
    assert s.session.cost_usd == pytest.approx(sum(c["cost_usd"] for c in calls))


def test_a_failed_call_is_counted_with_its_cost_a_refused_one_is_not_and_the_first_errors_the_sample(tmp_path):
    async def go(srv):
        s = Sample(tmp_path, srv.base_url, cap=WORST * 1.5, timeout_s=0.3)  # room for one reservation, not two
        with pytest.raises(UnitCallError, match="HTTP 500"):  # answered with an error: $0
            await s.session.model_call(prompt="boom")
        with pytest.raises(UnitCallError, match="timeout"):  # may have been billed: charged in full
            await s.session.model_call(prompt="slow")
        with pytest.raises(BudgetExhausted):  # the cap is spent: nothing sent
            await s.session.model_call(prompt="fine")
        return s, await s.close()

    script = {"default": {"text": "ok"}, "faults": [{"kind": "500", "match": "boom"},
                                                     {"kind": "slow", "delay_s": 2.0, "match": "slow"}]}
    with ScriptedServer(script) as srv:
        s, calls = asyncio.run(go(srv))
    assert [(c["status"], c["attempts"]) for c in calls] == [("failed", 1), ("failed", 1), ("refused", 0)]
    assert [c["cost_usd"] for c in calls] == [0.0, pytest.approx(WORST), 0.0]
    assert "HTTP 500" in calls[0]["error"] and calls[2]["error"].startswith("BudgetExhausted: ")
    assert s.session.attempts == 2 and s.session.cost_usd == pytest.approx(WORST)
    assert s.session.failed_call == 1 and "HTTP 500" in str(s.session.failure)  # the first failure is kept
    assert s.stops == ["budget exhausted"]  # the run is told at once


def test_a_call_cut_as_its_sample_ends_is_recorded_cancelled_and_charged_what_may_have_been_billed(tmp_path):
    async def go(srv):
        s = Sample(tmp_path, srv.base_url)
        task = asyncio.ensure_future(s.session.model_call(prompt="wait"))
        s.session.track(task)
        # the server's event (a thread's), awaited off the loop the call runs on
        assert await asyncio.to_thread(srv.held.wait, 30), "the call never reached the server"
        await s.session.finish("the agent exited")
        assert task.cancelled()
        with pytest.raises(UnitCallError, match="has ended"):  # later calls are refused
            await s.session.model_call(prompt="again")
        srv.release()
        return s, await s.close()

    script = {"default": {"text": "ok"}, "faults": [{"kind": "slow", "hold": True, "match": "wait"}]}
    with ScriptedServer(script) as srv:
        s, calls = asyncio.run(go(srv))
    assert [(c["status"], c["attempts"]) for c in calls] == [("cancelled", 1), ("refused", 0)]
    assert calls[0]["cost_usd"] == pytest.approx(WORST) and "in flight" in calls[0]["error"]
    assert s.session.attempts == 1 and s.session.cost_usd == pytest.approx(WORST)
