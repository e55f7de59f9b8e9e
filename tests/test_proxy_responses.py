"""The Responses API (`/v1/responses`) through the metering proxy, over real HTTP: the
official openai client's `responses.create` and `responses.stream` on one side, the
scripted server behind evalkit's ModelClient on the other; no patched client."""
from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner

from evalkit.calls.cache import ResponseCache
from evalkit._cli.main import main
from evalkit.calls.client import ModelClient
from evalkit.calls.ledger import Ledger
from evalkit.calls.proxy import MeteringProxy
from evalkit.foundations.records import Endpoint, Price
from evalkit.calls.responses_api import CHAT_COMPLETIONS_SWITCHES
from evalkit.runfolder.runs import iter_jsonl
from evalkit.calls.serve import ScriptedServer
from evalkit.calls.session import SampleSession
from evalkit.runfolder.trajectories import TrajectoryWriter, read_trajectory
from evalkit.suites.units import ToolFixtures

PRICE = Price(1.0, 2.0)
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "agents"
TOOLS = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]
SCRIPT = {"rules": [
    {"match": "found it", "text": "the answer is 1"},
    {"match": "both", "tool_calls": [{"name": "lookup", "arguments": {"q": "a"}}, {"name": "lookup", "arguments": {"q": "b"}}]},
    {"match": "look", "tool_calls": [{"name": "lookup", "arguments": {"q": "a"}, "id": "call_model_1"}]},
    {"match": "long", "text": "w " * 50},
    {"match": "draw", "texts": ["red", "green", "blue", "cyan", "pink", "gold"]},
], "default": {"text": "one two three"}}


class Sample:
    """One sample's session behind a started proxy, on the scripted server at `base_url`."""

    def __init__(self, tmp: Path, base_url: str, *, cap: float = 1.0, cache: ResponseCache | None = None) -> None:
        self.ledger = Ledger(cap, tmp / "ledger.jsonl")
        self.client = ModelClient(Endpoint("scripted", base_url, "EVALKIT_TEST_KEY"), PRICE, self.ledger,
                                  max_tokens_in=500, max_tokens_out=20, max_attempts=1, cache=cache)
        self.writer = TrajectoryWriter(tmp, "case", "arm", 0)
        self.stops: list[str] = []
        self.session = SampleSession(client=self.client, key=("case", "arm", 0), writer=self.writer,
                                     fixtures=ToolFixtures({}), should_stop=lambda: None, on_stop=self.stops.append)
        self.tmp = tmp

    async def __aenter__(self) -> openai.AsyncOpenAI:
        self.proxy = await MeteringProxy(model="scripted").start()
        ep = self.proxy.open(self.session)
        self.oc = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key, max_retries=0)
        return self.oc

    async def __aexit__(self, *exc: object) -> None:
        await self.oc.close()
        await self.proxy.aclose()
        await self.client.aclose()
        self.writer.close()
        self.ledger.close()

    def reserves(self) -> list[dict]:
        return [e for e in iter_jsonl(self.tmp / "ledger.jsonl") if e["event"] == "reserve"]


def test_responses_plain_streamed_tools_and_parallel_tools_are_metered_and_recorded(tmp_path):
    s = None

    async def go(srv):
        nonlocal s
        s = Sample(tmp_path, srv.base_url)
        async with s as oc:
            r = await oc.responses.create(model="gpt-x", input="hello", instructions="be brief",
                                          max_output_tokens=10_000, metadata={"k": "v"})
            assert r.output_text == "one two three" and r.status == "completed" and r.model == "scripted"
            assert (r.usage.input_tokens, r.usage.output_tokens) == (3, 3)  # instructions + input, counted upstream
            r = await oc.responses.create(model="m", input=[{"role": "user", "content": "look it up"}],
                                          tools=TOOLS, max_output_tokens=8, parallel_tool_calls=False)
            (fc,) = r.output
            assert (fc.type, fc.name, json.loads(fc.arguments), fc.call_id) == ("function_call", "lookup", {"q": "a"},
                                                                                 "call_model_1")
            follow = [{"role": "user", "content": "look it up"}, fc.model_dump(exclude_none=True),
                      {"type": "function_call_output", "call_id": fc.call_id, "output": "found it"}]
            r = await oc.responses.create(model="m", input=follow, tools=TOOLS)
            assert r.output_text == "the answer is 1"
            # streamed: the events of the Responses API, the usage in response.completed
            stream = await oc.responses.create(model="m", input="both please", tools=TOOLS, stream=True)
            events = [e async for e in stream]
            kinds = [e.type for e in events]
            assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
            assert kinds.count("response.output_item.added") == 2 == kinds.count("response.function_call_arguments.done")
            assert [e.sequence_number for e in events] == list(range(len(events)))
            done = events[-1].response
            assert [json.loads(o.arguments) for o in done.output] == [{"q": "a"}, {"q": "b"}]
            assert done.usage.output_tokens > 0
            async with oc.responses.stream(model="m", input="hello again") as st:
                deltas = [e.delta async for e in st if e.type == "response.output_text.delta"]
                final = await st.get_final_response()
            assert "".join(deltas) == final.output_text == "one two three"
            # cut at the ceiling: incomplete, as the Responses API says it
            r = await oc.responses.create(model="m", input="long one")
            assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"

    with ScriptedServer(SCRIPT) as srv:
        asyncio.run(go(srv))
        bodies = list(srv.requests)
    assert s is not None and s.session.calls == len(bodies) == 6
    # every call reserved at its worst case: max_output_tokens absent or larger is the ceiling, a smaller one kept
    assert [b["max_output_tokens"] for b in bodies] == [20, 8, 20, 20, 20, 20]
    assert [e["tokens_out"] for e in s.reserves()] == [20, 8, 20, 20, 20, 20]
    assert [e["tokens_in"] for e in s.reserves()] == [500] * 6
    assert all("stream" not in b for b in bodies)  # one non-streamed upstream call each
    assert bodies[0]["instructions"] == "be brief" and bodies[0]["metadata"] == {"k": "v"}
    assert bodies[1]["parallel_tool_calls"] is False and bodies[1]["tools"] == TOOLS
    settled = [e for e in iter_jsonl(tmp_path / "ledger.jsonl") if e["event"] == "settle"]
    assert (settled[0]["prompt_tokens"], settled[0]["completion_tokens"]) == (3, 3)  # settled from the Responses usage
    t = read_trajectory(tmp_path, "case", "arm", 0)
    calls = t.model_calls
    assert [c["endpoint"] for c in calls] == ["responses"] * 6 and all(c["status"] == "ok" for c in calls)
    assert calls[0]["requested_model"] == "gpt-x" and calls[0]["request"]["input"] == "hello"
    assert calls[0]["request"]["params"] == {"max_output_tokens": 20, "instructions": "be brief", "metadata": {"k": "v"}}
    assert calls[1]["answer"]["tool_calls"] == [{"name": "lookup", "arguments": {"q": "a"}, "id": "call_model_1"}]
    assert [tc["arguments"] for tc in calls[3]["answer"]["tool_calls"]] == [{"q": "a"}, {"q": "b"}]
    assert all(tc["id"].startswith("call_") for tc in calls[3]["answer"]["tool_calls"])
    assert calls[3]["stream"] is True and calls[5]["answer"]["finish_reason"] == "length"
    assert calls[2]["request"]["input"][2] == {"type": "function_call_output", "call_id": "call_model_1",
                                               "output": "found it"}
    assert s.session.trace()[:1] == [{"name": "lookup", "arguments": {"q": "a"}, "id": "call_model_1"}]


def test_the_cap_holds_a_refused_reservation_is_the_agents_error_and_nothing_is_forwarded(tmp_path):
    worst = PRICE.cost(500, 20)
    s = None

    async def go(srv):
        nonlocal s
        s = Sample(tmp_path, srv.base_url, cap=worst * 0.9)
        async with s as oc:
            for stream in (False, True):
                with pytest.raises(openai.APIStatusError, match="budget exhausted") as err:
                    await oc.responses.create(model="m", input="hello", max_output_tokens=1, stream=stream)
                assert err.value.status_code == 402 and err.value.code == "budget_exhausted"
            with pytest.raises(openai.BadRequestError, match="previous_response_id"):
                await oc.responses.create(model="m", input="hi", previous_response_id="resp_1")
            with pytest.raises(openai.BadRequestError, match="only function tools"):
                await oc.responses.create(model="m", input="hi", tools=[{"type": "web_search"}])
            with pytest.raises(openai.BadRequestError, match="input_image"):
                await oc.responses.create(model="m", input=[{"role": "user", "content": [
                    {"type": "input_image", "image_url": "http://x.test/a.png"}]}])

    with ScriptedServer(SCRIPT) as srv:
        asyncio.run(go(srv))
        assert srv.stats["requests"] == 0  # nothing reached the server
    assert s is not None and s.reserves() == []
    assert "budget exhausted" in s.stops and s.session.failure is not None
    t = read_trajectory(tmp_path, "case", "arm", 0)
    assert [c["status"] for c in t.model_calls] == ["refused", "refused"]
    assert [c["endpoint"] for c in t.model_calls] == ["responses", "responses"]
    assert all(c["attempts"] == 0 for c in t.model_calls)


def test_responses_calls_are_cached_per_sample_and_ordinal_and_replayed_at_no_cost(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")

    async def sample(srv, folder: Path) -> tuple[list[str], Sample]:
        folder.mkdir()
        s = Sample(folder, srv.base_url, cache=cache)
        async with s as oc:
            # the same request twice in one sample: each ordinal is a call of its own
            texts = [(await oc.responses.create(model="m", input="draw one")).output_text for _ in range(2)]
            stream = await oc.responses.create(model="m", input="draw one", stream=True)
            texts.append([e async for e in stream][-1].response.output_text)
        return texts, s

    async def go(srv):
        first, s1 = await sample(srv, tmp_path / "one")
        n = srv.stats["requests"]
        again, s2 = await sample(srv, tmp_path / "two")
        return first, again, n, srv.stats["requests"], s1, s2

    with ScriptedServer(SCRIPT) as srv:
        first, again, n, after, s1, s2 = asyncio.run(go(srv))
    assert n == after == 3  # the re-run sent nothing
    assert len(set(first)) > 1  # the server drew per request: the ordinal, not the request, keys the answer
    assert again == first and s2.session.cached_calls == 3 and s2.session.cost_usd == 0.0
    assert s1.session.cost_usd > 0 and s2.session.avoided_usd == pytest.approx(s1.session.cost_usd)
    t = read_trajectory(tmp_path / "two", "case", "arm", 0)
    assert [c["cached"] for c in t.model_calls] == [True, True, True]
    cache.close()


def test_an_upstream_without_a_responses_api_names_each_frameworks_switch_to_chat(tmp_path):
    async def go(srv):
        s = Sample(tmp_path, srv.base_url)
        async with s as oc:
            with pytest.raises(openai.APIStatusError) as err:
                await oc.responses.create(model="m", input="hello")
            # chat completions still work on that endpoint
            r = await oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert r.choices[0].message.content == "one two three"
        return err.value

    with ScriptedServer({**SCRIPT, "no_responses": True}) as srv:
        err = asyncio.run(go(srv))
        assert srv.stats["requests"] == 1  # the 404 is not retried
    assert err.status_code == 502 and "has no Responses API (HTTP 404 on POST /responses)" in err.message
    assert CHAT_COMPLETIONS_SWITCHES in err.message
    for switch in ('set_default_openai_api("chat_completions")', "OpenAIChatModel",
                   "ChatOpenAI(use_responses_api=False)", "client.chat.completions"):
        assert switch in err.message


def test_evalkit_run_prints_why_a_responses_agent_failed_on_an_endpoint_without_the_api(tmp_path):
    suite = tmp_path / "suite"
    shutil.copytree(EXAMPLES / "openai_agents", suite)
    script = {**json.loads((suite / "script.json").read_text()), "no_responses": True}
    with ScriptedServer(script) as srv:
        proc = CliRunner().invoke(main, ["run", str(suite), "--runs-dir", str(tmp_path / "runs"), "--base-url",
                                         srv.base_url, "--no-progress"])
    assert proc.exit_code == 1, proc.output
    assert "INCOMPLETE: 0/2 cases (2 sample(s) errored)" in proc.output
    # the reason on the terminal, once for the two samples that failed the same way
    (line,) = [ln for ln in proc.output.splitlines() if ln.startswith("  error: ")]
    assert "has no Responses API" in line and "set_default_openai_api" in line and "oslo" not in line
    folder = next((tmp_path / "runs").glob("2*"))
    summary = json.loads((folder / "summary.json").read_text())
    assert (summary["samples_errored"], summary["samples_missing"]) == (2, 0)
    assert summary["error_reasons"] == [line.removeprefix("  error: ")]
    assert "has no Responses API" in (folder / "summary.md").read_text()
    # `grade` counts them as the run did: errored, not missing
    graded = CliRunner().invoke(main, ["grade", str(folder)])
    assert graded.exit_code == 1 and "(0 missing, 2 errored)" in graded.output, graded.output
    gs = json.loads((folder / "grades-summary.json").read_text())
    assert (gs["overall"]["n_missing"], gs["overall"]["n_errored"]) == (0, 2)


def test_the_scripted_server_answers_the_responses_api_itself_streamed_and_not():
    with ScriptedServer(SCRIPT) as srv:
        oc = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        r = oc.responses.create(model="m", input="both", tools=TOOLS)
        assert [(o.type, o.name) for o in r.output] == [("function_call", "lookup")] * 2
        assert len({o.call_id for o in r.output}) == 2 and r.usage.input_tokens == 1
        with oc.responses.stream(model="m", input="say it", max_output_tokens=2) as st:
            events = list(st)
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        last = events[-1]  # cut: the stream ends as the Responses API ends it, without response.completed
        assert text == "one two" and last.type == "response.incomplete"
        assert last.response.incomplete_details.reason == "max_output_tokens" and last.response.usage.output_tokens == 2
        assert srv.stats["requests"] == 2 and srv.requests[1]["stream"] is True
    with ScriptedServer({**SCRIPT, "no_responses": True}) as srv:
        oc = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            oc.responses.create(model="m", input="hello")


def test_each_responses_field_the_proxy_cannot_meter_is_refused_by_name_and_the_rest_go_through(tmp_path):
    refused = [  # (request fields, what the refusal names)
        ({"conversation": "conv_1"}, "conversation='conv_1' is not served"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt={'id': 'pmpt_1'} is not served (a stored prompt"),
        ({"background": True}, "background=True is not served"),
        ({"service_tier": "priority"}, "service_tier='priority' is not served"),
        ({"top_logprobs": 3}, "top_logprobs=3 is not served (an answer carries no logprobs)"),
        ({"max_output_tokens": 0}, "max_output_tokens must be a positive integer, got 0"),
        ({"temperature": "hot"}, "temperature must be a number, got 'hot'"),
        ({"tools": [{"name": "lookup"}]}, "tools[0].type=None is not served (only function tools"),
        ({"input": ""}, "input must not be empty"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type='item_reference' is not served"),
        ({"input": [{"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "seen"}, {"type": "input_image", "image_url": "http://x.test/a.png"}]}]},
         "input[0].output[1] of type 'input_image' is not served (only text is metered)"),
        ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}, "b"]}]},
         "input[0].content[1] of type 'str' is not served (only text parts are metered)"),
        ({"modalities": ["audio"]}, "the field 'modalities' is not served"),
    ]

    async def go(srv):
        s = Sample(tmp_path, srv.base_url)
        messages = []
        async with s as oc:
            for fields, named in refused:
                body = {"model": "m", "input": "hi", **fields}
                with pytest.raises(openai.BadRequestError) as err:
                    await oc.responses.create(model=body.pop("model"), input=body.pop("input"), extra_body=body)
                messages.append((named, err.value.message))
            # what is served: nulls are the fields' defaults, stream_options only shape the stream
            r = await oc.responses.create(model="m", input="hello", top_p=0.5, user="u1", service_tier=None,
                                          extra_body={"previous_response_id": None, "top_logprobs": 0})
            assert r.output_text == "one two three"
        return s, messages

    with ScriptedServer(SCRIPT) as srv:
        s, messages = asyncio.run(go(srv))
        bodies = list(srv.requests)
    for named, message in messages:
        assert named in message, (named, message)
    assert len(bodies) == 1  # nothing refused reached the endpoint
    sent = {k: v for k, v in bodies[0].items() if k not in ("model", "input", "max_output_tokens")}
    assert sent == {"top_p": 0.5, "user": "u1"}
    assert "conversation='conv_1'" in str(s.session.failure)  # the first refusal errored the sample


@pytest.mark.parametrize("body", [
    "deep",  # 100,000 levels: past the JSON reader's recursion
    "shallow-enough-to-parse",  # 500 levels: parsed, then refused before anything recurses over it
])
def test_a_deeply_nested_body_is_a_clean_400_naming_the_limit_and_errors_the_sample(tmp_path, body):
    import aiohttp

    from evalkit.calls.proxy import MAX_BODY_DEPTH

    levels = 100_000 if body == "deep" else 500
    raw = '{"model": "m", "input": "hi", "metadata": ' + "[" * levels + "]" * levels + "}"

    async def go(srv):
        s = Sample(tmp_path, srv.base_url)
        async with s:
            url = s.oc.base_url.join("responses")
            async with aiohttp.ClientSession() as http, http.post(
                    str(url), data=raw, headers={"Content-Type": "application/json"}) as resp:
                return s, resp.status, await resp.json()

    with ScriptedServer(SCRIPT) as srv:
        s, status, answer = asyncio.run(go(srv))
        assert srv.stats["requests"] == 0
    assert status == 400 and answer["error"]["code"] == "body_too_deep"
    assert f"deeper than {MAX_BODY_DEPTH} levels" in answer["error"]["message"]
    assert "Traceback" not in json.dumps(answer)
    assert s.session.failure is not None and "body_too_deep" in str(s.session.failure)


def test_a_tool_output_holding_an_image_and_a_part_whose_type_is_a_list_are_clean_400s(tmp_path):
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
    refused = [
        ([{"type": "function_call_output", "call_id": "c1", "output": image}],
         "input[0].output of type 'input_image' is not served"),
        ([{"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "x", "image_url": image["image_url"]}]}],
         "input[0].output[0] of type \"input_text with ['image_url']\" is not served"),
        ([{"role": "user", "content": [{"type": ["input_text"], "text": "a"}]}],
         "input[0].content[0] of type ['input_text'] is not served"),
        ([{"role": "user", "content": [{"type": {"k": 1}, "text": "a"}]}],
         "input[0].content[0] of type {'k': 1} is not served"),
        ([{"type": "function_call_output", "call_id": "c1", "output": [{"type": ["x"], "text": "a"}]}],
         "input[0].output[0] of type ['x'] is not served"),
    ]

    async def go(srv):
        s = Sample(tmp_path, srv.base_url)
        seen = []
        async with s as oc:
            for input_, named in refused:
                with pytest.raises(openai.BadRequestError) as err:
                    await oc.responses.create(model="m", input=input_)
                seen.append((named, err.value.message))
            with pytest.raises(openai.BadRequestError, match=r"messages\[0\].content\[0\] of type \['text'\]"):
                await oc.chat.completions.create(model="m", messages=[
                    {"role": "user", "content": [{"type": ["text"], "text": "a"}]}])
        return seen

    with ScriptedServer(SCRIPT) as srv:
        seen = asyncio.run(go(srv))
        assert srv.stats["requests"] == 0
    for named, message in seen:
        assert named in message, (named, message)
