"""The metering proxy over real HTTP: the official openai client on one side, the
scripted server behind evalkit's ModelClient on the other."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import openai
import pytest

from evalkit.calls.client import ModelClient
from evalkit.calls.ledger import Ledger
from evalkit.calls.proxy import MeteringProxy
from evalkit.foundations.records import Endpoint, Price
from evalkit.runfolder.runs import iter_jsonl
from evalkit.calls.serve import ScriptedServer
from evalkit.calls.session import SampleSession
from evalkit.runfolder.trajectories import TrajectoryWriter, read_trajectory
from evalkit.suites.units import ToolFixtures

PRICE = Price(1.0, 2.0)


async def _setup(tmp: Path, base_url: str, cap: float = 1.0, stops: list[str] | None = None):
    ledger = Ledger(cap, tmp / "ledger.jsonl")
    client = ModelClient(Endpoint("scripted", base_url, "EVALKIT_TEST_KEY"), PRICE, ledger, max_tokens_in=500,
                         max_tokens_out=20, max_attempts=1)
    writer = TrajectoryWriter(tmp, "case", "arm", 0)
    stops = stops if stops is not None else []
    session = SampleSession(client=client, key=("case", "arm", 0), writer=writer,
                            fixtures=ToolFixtures({"lookup": [{"arguments": {"q": "a"}, "result": {"n": 1}}]}),
                            should_stop=lambda: None, on_stop=stops.append)
    proxy = await MeteringProxy(model="scripted").start()
    ep = proxy.open(session)
    return ledger, client, writer, session, proxy, ep


async def _teardown(*things):
    ledger, client, writer, session, proxy, ep = things
    await proxy.aclose()
    await client.aclose()
    writer.close()
    ledger.close()


def test_calls_are_metered_max_tokens_capped_fields_passed_and_streams_served(tmp_path):
    script = {"rules": [{"match": "tool", "tool_calls": [{"name": "lookup", "arguments": {"q": "a"}}]},
                        {"match": "", "text": "one two three"}]}

    async def go(srv):
        things = await _setup(tmp_path, srv.base_url)
        ledger, client, writer, session, proxy, ep = things
        oc = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key, max_retries=0)
        r = await oc.completions.create(model="gpt-whatever", prompt="say one two three", max_tokens=10_000,
                                        top_p=0.5, stop="\n")
        assert r.choices[0].text == "one two three" and r.usage.completion_tokens == 3 and r.model == "scripted"
        r = await oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "use a tool"}],
                                             tools=[{"type": "function", "function": {"name": "lookup"}}],
                                             tool_choice="auto", max_completion_tokens=5)
        tc = r.choices[0].message.tool_calls[0]
        assert tc.function.name == "lookup" and json.loads(tc.function.arguments) == {"q": "a"}
        assert r.choices[0].finish_reason == "tool_calls"
        stream = await oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                  stream=True, stream_options={"include_usage": True})
        chunks = [c async for c in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "one two three" and chunks[-1].usage.completion_tokens == 3
        cstream = await oc.completions.create(model="m", prompt="hi", stream=True)
        assert "".join([c.choices[0].text async for c in cstream if c.choices]) == "one two three"
        # the same sample by its key on /v1 (no token in the URL)
        plain = openai.AsyncOpenAI(base_url=f"{proxy.root}/v1", api_key=ep.api_key, max_retries=0)
        assert (await plain.completions.create(model="m", prompt="x")).choices[0].text == "one two three"
        models = await plain.models.list()
        assert [m.id for m in models.data] == ["scripted"]
        await oc.close()
        await plain.close()
        calls = session.calls
        await _teardown(*things)
        return calls

    with ScriptedServer(script) as srv:
        calls = asyncio.run(go(srv))
        bodies = srv.requests
    assert calls == len(bodies) == 5
    assert [b["max_tokens"] for b in bodies] == [20, 5, 20, 20, 20]  # larger or missing: the ceiling
    assert bodies[0]["top_p"] == 0.5 and bodies[0]["stop"] == ["\n"] and bodies[0]["model"] == "scripted"
    assert bodies[1]["tool_choice"] == "auto" and "stream" not in bodies[2]  # upstream is never streamed
    reserves = [e for e in iter_jsonl(tmp_path / "ledger.jsonl") if e["event"] == "reserve"]
    assert [e["tokens_out"] for e in reserves] == [20, 5, 20, 20, 20]
    assert [e["key"] for e in reserves] == [f"case/arm/0#{n}" for n in range(1, 6)]
    t = read_trajectory(tmp_path, "case", "arm", 0)
    assert [e["call"] for e in t.model_calls] == [1, 2, 3, 4, 5]
    assert t.model_calls[0]["requested_model"] == "gpt-whatever" and t.model_calls[2]["stream"] is True
    assert t.model_calls[0]["request"]["params"] == {"max_tokens": 20, "stop": ["\n"], "top_p": 0.5}


def test_refusals_are_errors_the_openai_client_raises_at_once_and_fail_the_sample(tmp_path):
    async def go(srv):
        stops: list[str] = []
        worst = PRICE.cost(500, 20)
        things = await _setup(tmp_path, srv.base_url, cap=worst * 2, stops=stops)
        ledger, client, writer, session, proxy, ep = things
        oc = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key)  # the default retries: none happen
        with pytest.raises(openai.BadRequestError, match="n=2"):
            await oc.completions.create(model="m", prompt="x", n=2)
        with pytest.raises(openai.BadRequestError, match="over max_tokens_in 500") as err:
            await oc.completions.create(model="m", prompt="word " * 2000)
        assert err.value.code == "context_length_exceeded"
        await oc.completions.create(model="m", prompt="fine")  # each settles at most of its worst case
        await oc.completions.create(model="m", prompt="fine too")
        with pytest.raises(openai.APIStatusError, match="budget exhausted") as err:
            await oc.completions.create(model="m", prompt="once more")
        assert err.value.status_code == 402 and err.value.code == "budget_exhausted"
        bad = openai.AsyncOpenAI(base_url=f"{proxy.root}/s/ek-nope/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="unknown sample token"):
            await bad.completions.create(model="m", prompt="x")
        tools = await _post(ep.tools_url, {"name": "lookup", "arguments": '{"q": "a"}'})
        missing = await _post(ep.tools_url, {"name": "lookup", "arguments": {"q": "b"}})
        reported = await _post(ep.tools_url, {"name": "shell", "arguments": {"cmd": "ls"}, "result": "a b"})
        as_json = await _post(ep.tools_url, {"name": "ls", "arguments": {}, "result": {"files": ["a", "b"], "n": 2}})
        assert as_json == {"content": '{"files": ["a", "b"], "n": 2}', "error": None}  # JSON, not a Python repr
        await proxy.close(ep.token, "over")
        with pytest.raises(openai.AuthenticationError):
            await oc.completions.create(model="m", prompt="after the end")
        await oc.close()
        await bad.close()
        out = (session.failure, session.failed_call, list(stops), tools, missing, reported, session.tool_errors)
        await _teardown(*things)
        return out

    heavy = {"default": {"text": "ok", "usage": {"prompt_tokens": 400, "completion_tokens": 15}}}
    with ScriptedServer(heavy) as srv:
        failure, failed_call, stops, tools, missing, reported, tool_errors = asyncio.run(go(srv))
        assert srv.stats["requests"] == 2  # the refused calls never reached the endpoint
    # the first refusal, n=2, was before anything was metered: the sample is errored all the same
    assert type(failure).__name__ == "UnitCallError" and "refused a request (400" in str(failure)
    assert "n=2" in str(failure) and failed_call is None
    assert stops == ["budget exhausted"]
    assert tools == {"content": '{"n": 1}', "error": None}
    assert missing["error"].startswith("no fixture for tool 'lookup'") and missing["content"].startswith("error: ")
    assert reported == {"content": "a b", "error": None}
    assert [e["name"] for e in tool_errors] == ["lookup"]
    t = read_trajectory(tmp_path, "case", "arm", 0)
    assert [(c["status"], c["attempts"]) for c in t.model_calls] == [
        ("refused", 0), ("ok", 1), ("ok", 1), ("refused", 0)]
    assert [x["source"] for x in t.tools] == ["fixture", "no fixture", "reported", "reported"]
    assert json.loads(t.tools[3]["result"]) == {"files": ["a", "b"], "n": 2}


async def _post(url: str, body: dict) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.post(url, json=body) as resp:
        return await resp.json()


# An agent program that sends one request the proxy refuses before metering (argv[1]),
# then prints an answer that would pass.
REFUSED = (
    "import json, os, sys, urllib.request, urllib.error\n"
    "json.load(sys.stdin)\n"
    "base, key = os.environ['OPENAI_BASE_URL'], os.environ['OPENAI_API_KEY']\n"
    "path = {'n2': ('/chat/completions', json.dumps({'model': 'm', 'n': 2, 'messages': []}).encode()),\n"
    "              'badjson': ('/chat/completions', b'{not json'),\n"
    "              'unknown': ('/embeddings', b'{}'),\n"
    "              'notool': ('/../evalkit/tools', b'{}'),\n"
    "              'image': ('/chat/completions', json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': [\n"
    "                  {'type': 'image_url', 'image_url': {'url': 'https://example.test/i.png'}}]}]}).encode())}\n"
    "path, data = path[sys.argv[1]]\n"
    "req = urllib.request.Request(base + path, data=data, headers={'Authorization': 'Bearer ' + key,\n"
    "                             'Content-Type': 'application/json'})\n"
    "try:\n"
    "    urllib.request.urlopen(req, timeout=30)\n"
    "except urllib.error.HTTPError as e:\n"
    "    sys.stderr.write(f'{e.code}\\n')\n"
    "print('x')\n"
)


@pytest.mark.parametrize("mode", ["n2", "badjson", "unknown", "notool", "image"])
def test_a_request_refused_before_metering_errors_the_sample_of_a_real_program(tmp_path, mode):
    from evalkit.conclusions.grading import grade_run
    from evalkit.running.runner import run_suite
    from evalkit.runfolder.runload import load_run

    suite = tmp_path / "suite"
    suite.mkdir()
    cfg = {"mode": "chat", "generator": {"model": "scripted", "api_key_env": "EVALKIT_TEST_KEY"},
           "temperature": 0.0, "seed": 7, "k": 1, "concurrency": 1, "cost_cap_usd": 1.0,
           "max_tokens_in": 1000, "max_tokens_out": 20, "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
           "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
           "unit": {"kind": "command", "argv": ["{python}", "-c", REFUSED, mode], "timeout_s": 30},
           "arms": [{"name": "baseline"}]}
    (suite / "config.json").write_text(json.dumps(cfg))
    (suite / "cases.jsonl").write_text(json.dumps({"id": "c", "input": "q", "tags": ["golden"],
                                                   "checks": [{"kind": "contains", "value": "x"}]}) + "\n")
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        assert srv.stats["requests"] == 0
    assert not res.complete and res.exit_code == 1
    run = load_run(res.path)
    assert run.samples.empty and "the metering proxy refused a request (4" in run.errors.error[0]
    assert not any(g.passed for g in grade_run(res.path).grades)
    t = read_trajectory(res.path, "c", "baseline", 0)
    assert t.end["status"] == "errored" and "refused a request" in t.end["error"]


def test_only_fields_that_cost_nothing_unreserved_are_forwarded_and_their_size_counts_as_input(tmp_path):
    user = [{"role": "user", "content": "hi"}]
    refused = [  # (request fields, what the refusal names)
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "describe"},
                                                     {"type": "image_url", "image_url": {"url": "https://x.test/i"}}]}]},
         "messages[0].content[1] of type 'image_url'"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA=="}}]}]},
         "messages[0].content[0] of type 'input_audio'"),
        ({"messages": [{"role": "assistant", "audio": {"id": "a1"}}, *user]}, "messages[0].audio"),
        ({"functions": [{"name": "f", "parameters": {}}]}, "'functions'"),
        ({"prediction": {"type": "content", "content": "p " * 100}}, "'prediction'"),
        ({"service_tier": "priority"}, "'service_tier'"),
        ({"web_search_options": {}}, "'web_search_options'"),
        ({"audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text", "audio"]}, "'audio'"),
        ({"tools": [{"type": "web_search_preview"}]}, "tools[0].type='web_search_preview'"),
        ({"logprobs": True, "top_logprobs": 5}, "logprobs=True"),
    ]
    big_schema = {"type": "json_schema", "json_schema": {"name": "s", "schema": {
        "type": "object", "description": "d" * 600}}}

    async def go(srv):
        things = await _setup(tmp_path, srv.base_url)
        ledger, client, writer, session, proxy, ep = things
        oc = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key, max_retries=0)
        messages = []
        for fields, named in refused:
            body = {"model": "m", "messages": user, **fields}
            with pytest.raises(openai.BadRequestError) as err:
                await oc.chat.completions.create(**{k: body.pop(k) for k in ("model", "messages")}, extra_body=body)
            messages.append((named, err.value.message))
        with pytest.raises(openai.BadRequestError, match="over max_tokens_in 500") as err:  # the schema is input too
            await oc.chat.completions.create(model="m", messages=user, response_format=big_schema)
        assert err.value.code == "context_length_exceeded"
        r = await oc.chat.completions.create(
            model="m", messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}], top_p=0.9,
            response_format={"type": "json_object"}, logit_bias={"50256": -100}, user="u1", metadata={"k": "v"},
            frequency_penalty=0.5, presence_penalty=0.1, logprobs=False, service_tier=None,
            tools=[{"type": "function", "function": {"name": "lookup"}}], parallel_tool_calls=False)
        assert r.choices[0].message.content == "ok"
        await oc.close()
        failure = session.failure
        await _teardown(*things)
        return messages, failure

    with ScriptedServer({"default": {"text": "ok"}}) as srv:
        messages, failure = asyncio.run(go(srv))
        bodies = srv.requests
    for named, message in messages:
        assert named in message and "is not served" in message
    assert len(bodies) == 1  # nothing refused reached the endpoint
    sent = bodies[0]
    assert {k: sent[k] for k in ("top_p", "logit_bias", "user", "metadata", "parallel_tool_calls")} == {
        "top_p": 0.9, "logit_bias": {"50256": -100}, "user": "u1", "metadata": {"k": "v"}, "parallel_tool_calls": False}
    assert "service_tier" not in sent and "logprobs" not in sent
    assert "messages[0].content[1]" in str(failure)  # the first refusal errored the sample


def test_the_proxy_waits_for_money_in_flight_under_a_cap_of_1_4_worst_case_calls(tmp_path):
    # Worst case 500 in x $1/M + 20 out x $2/M = $0.00054; the cap, 1.4 of it, holds one
    # reservation at a time. An agent sends 4 requests at once, each really costing
    # ~$0.000004 (1 word in, 1 out): the 3 that do not fit wait for the call in flight
    # and all 4 are answered (before, 3 got HTTP 402 budget exhausted at once).
    async def go(srv):
        worst = PRICE.cost(500, 20)
        things = await _setup(tmp_path, srv.base_url, cap=worst * 1.4)
        ledger, client, writer, session, proxy, ep = things
        oc = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key, max_retries=0)
        answers = await asyncio.gather(*(oc.completions.create(model="m", prompt=f"q{i}") for i in range(4)))
        await oc.close()
        out = [a.choices[0].text for a in answers], ledger.waits, ledger.refusals, ledger.committed_usd, worst
        await _teardown(*things)
        return out

    with ScriptedServer({"default": {"text": "ok"}, "latency_s": 0.05}) as srv:
        texts, waits, refusals, committed, worst = asyncio.run(go(srv))
        assert srv.stats["requests"] == 4
    assert texts == ["ok"] * 4 and waits >= 1 and refusals == 0 and committed <= worst * 1.4
    open_ = 0
    for ev in iter_jsonl(tmp_path / "ledger.jsonl"):
        open_ += {"reserve": 1, "settle": -1, "release": -1}.get(ev["event"], 0)
        assert open_ <= 1
