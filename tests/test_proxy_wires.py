"""The Anthropic Messages API (`/v1/messages`) and Gemini's `generateContent` /
`streamGenerateContent` through the metering proxy, over real HTTP: the official
anthropic and google-genai clients on one side, the scripted server (an
OpenAI-compatible endpoint: each request translated to chat) behind evalkit's
ModelClient on the other. Every call reserved at its worst case, settled on the usage
reported, cached per ordinal, recorded with its wire: requests upstream = trajectory
model calls = ledger settles."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import anthropic
import pytest
from google import genai
from google.genai import types as gtypes

from evalkit.calls.cache import ResponseCache
from evalkit.calls.client import ModelClient
from evalkit.calls.ledger import Ledger
from evalkit.calls.proxy import MeteringProxy
from evalkit.calls.serve import ScriptedServer
from evalkit.calls.session import SampleSession
from evalkit.foundations.records import Endpoint, Price
from evalkit.runfolder.runs import iter_jsonl
from evalkit.runfolder.trajectories import TrajectoryWriter, read_trajectory
from evalkit.suites.units import ToolFixtures

PRICE = Price(1.0, 2.0)
SCRIPT = {"rules": [
    {"match": "sunny", "text": "it is sunny in Oslo"},
    {"match": "both", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}},
                                     {"name": "get_weather", "arguments": {"city": "Rome"}}]},
    {"match": "weather", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "call_w1"}]},
    {"match": "long", "text": "w " * 50},
    {"match": "draw", "texts": ["red", "green", "blue", "cyan", "pink", "gold"]},
], "default": {"text": "one two three"}}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


class Sample:
    """One sample's session behind a started proxy, on the scripted server at `base_url`;
    `root` is what ANTHROPIC_BASE_URL and GOOGLE_GEMINI_BASE_URL are set to."""

    def __init__(self, tmp: Path, base_url: str, *, cache: ResponseCache | None = None) -> None:
        self.ledger = Ledger(1.0, tmp / "ledger.jsonl")
        self.client = ModelClient(Endpoint("scripted", base_url, "EVALKIT_TEST_KEY"), PRICE, self.ledger,
                                  max_tokens_in=500, max_tokens_out=20, max_attempts=1, cache=cache)
        self.writer = TrajectoryWriter(tmp, "case", "arm", 0)
        self.session = SampleSession(client=self.client, key=("case", "arm", 0), writer=self.writer,
                                     fixtures=ToolFixtures({}), should_stop=lambda: None, on_stop=lambda _: None)
        self.tmp = tmp

    async def __aenter__(self) -> Sample:
        self.proxy = await MeteringProxy(model="scripted").start()
        ep = self.proxy.open(self.session)
        self.root, self.token = ep.base_url.removesuffix("/v1"), ep.api_key
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.proxy.aclose()
        await self.client.aclose()
        self.writer.close()
        self.ledger.close()

    def events(self, kind: str) -> list[dict]:
        return [e for e in iter_jsonl(self.tmp / "ledger.jsonl") if e["event"] == kind]


def _metered_call_for_call(s: Sample, bodies: list[dict], wire: str) -> list[dict]:
    calls = read_trajectory(s.tmp, "case", "arm", 0).model_calls
    assert len(bodies) == len(calls) == len(s.events("reserve")) == len(s.events("settle")) == s.session.calls
    assert all(c["wire"] == wire and c["endpoint"] == "chat" and c["status"] == "ok" for c in calls)
    assert all("stream" not in b for b in bodies)  # one non-streamed upstream call each
    return calls


def test_the_anthropic_sdk_plain_streamed_and_tool_use_is_metered_call_for_call(tmp_path):
    async def go(srv):
        async with Sample(tmp_path, srv.base_url) as s:
            ac = anthropic.AsyncAnthropic(base_url=s.root, api_key=s.token, max_retries=0)
            m = await ac.messages.create(model="claude-x", max_tokens=10_000, system="be brief",
                                         messages=[{"role": "user", "content": "hello"}])
            assert m.content[0].text == "one two three" and m.stop_reason == "end_turn" and m.model == "scripted"
            assert (m.usage.input_tokens, m.usage.output_tokens) == (3, 3)
            assert (m.usage.cache_read_input_tokens, m.usage.cache_creation_input_tokens) == (0, 0)
            tools = [{"name": "get_weather", "description": "the weather", "input_schema": WEATHER}]
            ask = [{"role": "user", "content": "what is the weather in Oslo?"}]
            m = await ac.messages.create(model="claude-x", max_tokens=8, messages=ask, tools=tools,
                                         tool_choice={"type": "auto", "disable_parallel_tool_use": True})
            (use,) = m.content
            assert (use.type, use.id, use.name, use.input, m.stop_reason) == (
                "tool_use", "call_w1", "get_weather", {"city": "Oslo"}, "tool_use")
            follow = [*ask, {"role": "assistant", "content": [use.model_dump()]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                    "content": [{"type": "text", "text": "sunny"}]}]}]
            m = await ac.messages.create(model="claude-x", max_tokens=100, messages=follow, tools=tools)
            assert m.content[0].text == "it is sunny in Oslo"
            async with ac.messages.stream(model="claude-x", max_tokens=100, tools=tools,
                                          messages=[{"role": "user", "content": "both cities"}]) as st:
                final = await st.get_final_message()
            assert [b.input for b in final.content] == [{"city": "Oslo"}, {"city": "Rome"}]
            assert final.stop_reason == "tool_use" and final.usage.output_tokens > 0
            raw = await ac.messages.create(model="c", max_tokens=50, stream=True,
                                           messages=[{"role": "user", "content": "a long one"}])
            kinds = [e.type async for e in raw]
            assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
            m = await ac.messages.create(model="c", max_tokens=50, messages=[{"role": "user", "content": "long"}])
            assert m.stop_reason == "max_tokens"
            await ac.close()
            return s

    with ScriptedServer(SCRIPT) as srv:
        s = asyncio.run(go(srv))
        bodies = list(srv.requests)
    calls = _metered_call_for_call(s, bodies, "anthropic")
    assert len(bodies) == 6
    # reserved at the worst case: max_tokens above the ceiling is the ceiling, a smaller one kept
    assert [b["max_tokens"] for b in bodies] == [20, 8, 20, 20, 20, 20]
    assert [e["tokens_out"] for e in s.events("reserve")] == [20, 8, 20, 20, 20, 20]
    assert bodies[0]["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    assert bodies[1]["tools"][0] == {"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER, "description": "the weather"}}
    assert bodies[1]["parallel_tool_calls"] is False and bodies[1]["tool_choice"] == "auto"
    assert bodies[2]["messages"][-2]["tool_calls"][0]["id"] == "call_w1"
    assert bodies[2]["messages"][-1] == {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"}
    settled = s.events("settle")[0]
    assert (settled["prompt_tokens"], settled["completion_tokens"]) == (3, 3)
    assert calls[0]["requested_model"] == "claude-x" and calls[3]["stream"] is True


def test_google_genai_generate_and_stream_with_function_calls_is_metered_call_for_call(tmp_path):
    async def go(srv):
        async with Sample(tmp_path, srv.base_url) as s:
            gc = genai.Client(api_key=s.token, http_options=gtypes.HttpOptions(base_url=s.root))
            r = await gc.aio.models.generate_content(
                model="gemini-x", contents="hello",
                config=gtypes.GenerateContentConfig(system_instruction="be brief", max_output_tokens=10_000))
            assert r.text == "one two three" and r.candidates[0].finish_reason == "STOP"
            assert (r.usage_metadata.prompt_token_count, r.usage_metadata.candidates_token_count) == (3, 3)
            decl = gtypes.FunctionDeclaration(name="get_weather", description="the weather", parameters_json_schema=WEATHER)
            config = gtypes.GenerateContentConfig(
                tools=[gtypes.Tool(function_declarations=[decl])], max_output_tokens=8,
                automatic_function_calling=gtypes.AutomaticFunctionCallingConfig(disable=True))
            ask = gtypes.Content(role="user", parts=[gtypes.Part(text="what is the weather in Oslo?")])
            r = await gc.aio.models.generate_content(model="gemini-x", contents=[ask], config=config)
            (fc,) = r.function_calls
            assert (fc.name, fc.args, fc.id) == ("get_weather", {"city": "Oslo"}, "call_w1")
            answer = gtypes.Part.from_function_response(name="get_weather", response={"result": "sunny"})
            follow = [ask, r.candidates[0].content, gtypes.Content(role="user", parts=[answer])]
            r = await gc.aio.models.generate_content(model="gemini-x", contents=follow, config=config)
            assert r.text == "it is sunny in Oslo"
            chunks = [c async for c in await gc.aio.models.generate_content_stream(
                model="gemini-x", contents="both cities", config=config)]
            assert [f.args["city"] for c in chunks for f in (c.function_calls or ())] == ["Oslo", "Rome"]
            assert chunks[-1].usage_metadata.candidates_token_count > 0
            r = await gc.aio.models.generate_content(model="gemini-x", contents="long")
            assert r.candidates[0].finish_reason == "MAX_TOKENS"
            return s

    with ScriptedServer(SCRIPT) as srv:
        s = asyncio.run(go(srv))
        bodies = list(srv.requests)
    calls = _metered_call_for_call(s, bodies, "gemini")
    assert [b["max_tokens"] for b in bodies] == [20, 8, 8, 8, 20]
    assert bodies[0]["messages"][0] == {"role": "system", "content": "be brief"}
    assert bodies[1]["tools"][0]["function"]["parameters"] == WEATHER
    # the function response without an id takes the id of the call it answers
    assert bodies[2]["messages"][-1] == {"role": "tool", "tool_call_id": "call_w1", "content": '{"result": "sunny"}'}
    assert calls[0]["requested_model"] == "gemini-x" and calls[3]["stream"] is True


def test_anthropic_and_gemini_calls_are_cached_per_sample_and_ordinal(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")

    async def sample(srv, folder: Path) -> tuple[list[str], Sample]:
        folder.mkdir()
        async with Sample(folder, srv.base_url, cache=cache) as s:
            ac = anthropic.AsyncAnthropic(base_url=s.root, api_key=s.token, max_retries=0)
            gc = genai.Client(api_key=s.token, http_options=gtypes.HttpOptions(base_url=s.root))
            texts = []
            for _ in range(2):
                m = await ac.messages.create(model="c", max_tokens=20, messages=[{"role": "user", "content": "draw"}])
                texts.append(m.content[0].text)
                texts.append((await gc.aio.models.generate_content(model="g", contents="draw")).text)
            await ac.close()
        return texts, s

    async def go(srv):  # the same sample twice: (texts, sample, requests the server has had)
        return [(*await sample(srv, tmp_path / name), srv.stats["requests"]) for name in ("one", "two")]

    with ScriptedServer(SCRIPT) as srv:
        (first, s1, n), (again, s2, after) = asyncio.run(go(srv))
    assert n == after == 4 and len(set(first)) > 1  # the re-run sent nothing; the ordinal keys each answer
    assert again == first and s2.session.cached_calls == 4 and s2.session.cost_usd == 0.0
    assert s2.session.avoided_usd == pytest.approx(s1.session.cost_usd) and s1.session.cost_usd > 0
    cache.close()


def test_what_the_wires_cannot_meter_is_refused_by_name_and_errors_the_sample(tmp_path):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    a_refused = [
        ({"messages": [{"role": "user", "content": [image]}]}, "messages[0].content[0] of type 'image' is not served"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type='web_search_20250305'"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking="),
        ({"service_tier": "auto"}, "service_tier='auto' is not served"),
        ({"max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"messages": [{"role": "user", "content": [{"type": ["text"], "text": "a"}]}]}, "of type ['text']"),
        ({"mcp_servers": [{"url": "http://x.test"}]}, "mcp_servers="),
    ]
    g_refused = [
        ({"contents": [{"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]}]},
         "contents[0].parts[0] holding ['inlineData'] is not served"),
        ({"tools": [{"googleSearch": {}}]}, "tools[0] holding ['googleSearch'] is not served"),
        ({"generationConfig": {"candidateCount": 2}}, "candidateCount other than 1"),
        ({"generationConfig": {"thinkingConfig": {"thinkingBudget": 100}}}, "generationConfig.thinkingConfig"),
        ({"cachedContent": "cachedContents/1"}, "the field 'cachedContent' is not served"),
    ]

    async def go(srv):
        import aiohttp

        async with Sample(tmp_path, srv.base_url) as s, aiohttp.ClientSession() as http:
            seen = []
            for url, base, refused in (
                (f"{s.root}/v1/messages", {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
                 a_refused),
                (f"{s.root}/v1beta/models/g:generateContent", {"contents": [{"parts": [{"text": "hi"}]}]}, g_refused),
            ):
                for fields, named in refused:
                    async with http.post(url, json={**base, **fields}) as resp:
                        seen.append((named, resp.status, (await resp.json())["error"]["message"]))
            async with http.post(f"{s.root}/v1beta/models/g:countTokens", json={}) as resp:
                seen.append(("no such endpoint", resp.status, (await resp.json())["error"]["message"]))
            deep = {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "metadata": {}}
            cur = deep["metadata"]
            for _ in range(200):
                cur["k"] = {}
                cur = cur["k"]
            async with http.post(f"{s.root}/v1/messages", json=deep) as resp:
                seen.append(("deeper than 128 levels", resp.status, (await resp.json())["error"]["message"]))
            return s, seen

    with ScriptedServer(SCRIPT) as srv:
        s, seen = asyncio.run(go(srv))
        assert srv.stats["requests"] == 0
    for named, status, message in seen:
        assert named in message and status == (404 if named == "no such endpoint" else 400), (named, status, message)
    assert s.session.failure is not None and "image" in str(s.session.failure)


def anthropic_answer(body: dict) -> dict:
    """Anthropic's own answer: a tool_use while tools are offered and no result came back
    yet, else text after a thinking block; its usage reports cache reads and writes."""
    answered = any(isinstance(b, dict) and b.get("type") == "tool_result"
                   for m in body["messages"] if isinstance(m["content"], list) for b in m["content"])
    if body.get("tools") and not answered:
        content = [{"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}}]
        stop = "tool_use"
    else:
        content = [{"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "text", "text": "sunny"}]
        stop = "end_turn"
    usage = {"input_tokens": 5, "cache_creation_input_tokens": 1, "cache_read_input_tokens": 2, "output_tokens": 4}
    return {"id": "msg_01", "type": "message", "role": "assistant", "model": body["model"],
            "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}


def gemini_answer(body: dict) -> dict:
    """Gemini's own answer: a functionCall while tools are offered and no response came
    back yet, else a thought and text; thinking tokens reported apart."""
    answered = any("functionResponse" in p for c in body["contents"] for p in c["parts"])
    if body.get("tools") and not answered:
        parts = [{"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}]
    else:
        parts = [{"text": "thinking...", "thought": True}, {"text": "sunny"}]
    usage = {"promptTokenCount": 8, "candidatesTokenCount": 3, "thoughtsTokenCount": 1, "totalTokenCount": 12}
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage, "modelVersion": "gemini-native-001", "responseId": "r1"}


class Native:
    """A stand-in for a provider's own API on loopback (one route, answered by
    `answer(body)`): records each request's path, headers and body."""

    def __init__(self, route: str, answer) -> None:
        self.route, self.answer, self.seen = route, answer, []

    async def handle(self, request):
        from aiohttp import web

        body = await request.json()
        self.seen.append((request.path, dict(request.headers), body))
        return web.json_response(self.answer(body))

    async def __aenter__(self) -> str:
        from aiohttp import web

        app = web.Application()
        app.router.add_post(self.route, self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


class NativeSample(Sample):
    """`Sample` on an endpoint that speaks `api` (`Endpoint.api`) at `base_url`."""

    def __init__(self, tmp: Path, base_url: str, api: str) -> None:
        super().__init__(tmp, base_url)
        self.client = ModelClient(Endpoint("native", base_url, "EVALKIT_NATIVE_KEY", api=api), PRICE, self.ledger,
                                  max_tokens_in=500, max_tokens_out=20, max_attempts=1)
        self.session.client = self.client

    async def refused_chat_call(self) -> None:
        import openai

        async with openai.AsyncOpenAI(base_url=self.root + "/v1", api_key=self.token, max_retries=0) as oc:
            with pytest.raises(openai.APIStatusError, match="speaks the"):
                await oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    def check_metered(self, n: int, settled: tuple[int, int], wire: str) -> None:
        events = list(iter_jsonl(self.tmp / "ledger.jsonl"))
        assert [(e["prompt_tokens"], e["completion_tokens"]) for e in events if e["event"] == "settle"] == [settled] * n
        calls = read_trajectory(self.tmp, "case", "arm", 0).model_calls
        # the chat call to that endpoint failed with nothing sent
        assert [(c.get("wire"), c["status"], c["attempts"]) for c in calls] == [(wire, "ok", 1)] * n + [
            (None, "failed", 0)]


def test_a_messages_call_passes_through_to_an_anthropic_endpoint_metered_with_its_cache_tokens(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_NATIVE_KEY", "sk-ant-test")
    native = Native("/v1/messages", anthropic_answer)
    tools = [{"name": "get_weather", "description": "the weather", "input_schema": WEATHER,
              "cache_control": {"type": "ephemeral"}}]

    async def go():
        async with native as root:
            async with NativeSample(tmp_path, root + "/v1", "anthropic") as s:
                ac = anthropic.AsyncAnthropic(base_url=s.root, api_key=s.token, max_retries=0)
                ask = [{"role": "user", "content": [{"type": "text", "text": "weather in Oslo?",
                                                     "cache_control": {"type": "ephemeral"}}]}]
                m = await ac.messages.create(model="claude-x", max_tokens=4096, system="be brief", tools=tools,
                                             messages=ask)
                (use,) = m.content
                assert (use.type, use.id, use.input, m.stop_reason) == ("tool_use", "toolu_01", {"city": "Oslo"},
                                                                        "tool_use")
                follow = [*ask, {"role": "assistant", "content": [use.model_dump()]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                        "content": "rain"}]}]
                async with ac.messages.stream(model="claude-x", max_tokens=10, tools=tools, messages=follow) as st:
                    final = await st.get_final_message()
                assert final.content[0].text == "sunny" and final.usage.input_tokens == 8  # cache tokens counted
                await s.refused_chat_call()
                await ac.close()
                return s

    s = asyncio.run(go())
    assert len(native.seen) == 2  # the chat call reached nothing
    (path, h1, b1), (_, h2, b2) = native.seen
    assert path == "/v1/messages" and "Authorization" not in h1
    assert h1["x-api-key"] == "sk-ant-test" and h1["anthropic-version"] == "2023-06-01"
    # passed through as the agent sent it, under the suite's model and ceiling, one non-streamed call, no cache writes
    assert b1["model"] == "native" and b1["max_tokens"] == 20 and b2["max_tokens"] == 10 and "stream" not in b2
    assert b1["system"] == "be brief" and b1["tools"][0]["input_schema"] == WEATHER
    assert "cache_control" not in json.dumps([b1, b2])
    assert b2["messages"][-1]["content"][0] == {"type": "tool_result", "tool_use_id": "toolu_01", "content": "rain"}
    assert [e["tokens_out"] for e in s.events("reserve")] == [20, 10]
    s.check_metered(2, (8, 4), "anthropic")


def test_a_generate_content_call_passes_through_to_a_gemini_endpoint_thinking_billed_as_output(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_NATIVE_KEY", "gem-test")
    native = Native("/v1beta/models/{call}", gemini_answer)

    async def go():
        async with native as root:
            async with NativeSample(tmp_path, root + "/v1beta", "gemini") as s:
                gc = genai.Client(api_key=s.token, http_options=gtypes.HttpOptions(base_url=s.root))
                decl = gtypes.FunctionDeclaration(name="get_weather", description="the weather",
                                                  parameters_json_schema=WEATHER)
                config = gtypes.GenerateContentConfig(
                    tools=[gtypes.Tool(function_declarations=[decl])], max_output_tokens=8, system_instruction="brief",
                    automatic_function_calling=gtypes.AutomaticFunctionCallingConfig(disable=True))
                ask = gtypes.Content(role="user", parts=[gtypes.Part(text="weather in Oslo?")])
                r = await gc.aio.models.generate_content(model="gemini-x", contents=[ask], config=config)
                (fc,) = r.function_calls
                assert (fc.name, fc.args) == ("get_weather", {"city": "Oslo"})
                answer = gtypes.Part.from_function_response(name="get_weather", response={"result": "rain"})
                follow = [ask, r.candidates[0].content, gtypes.Content(role="user", parts=[answer])]
                chunks = [c async for c in await gc.aio.models.generate_content_stream(
                    model="gemini-x", contents=follow, config=config)]
                assert "".join(c.text or "" for c in chunks) == "sunny"
                await s.refused_chat_call()
                return s

    s = asyncio.run(go())
    assert len(native.seen) == 2
    (path, h1, b1), (_, _, b2) = native.seen
    assert path == "/v1beta/models/native:generateContent" and "Authorization" not in h1
    assert h1["x-goog-api-key"] == "gem-test"
    assert b1["generationConfig"] == {"maxOutputTokens": 8} and b1["systemInstruction"]["parts"] == [{"text": "brief"}]
    assert b1["tools"][0]["functionDeclarations"][0]["parameters_json_schema"] == WEATHER  # as google-genai sent it
    assert "functionResponse" in b2["contents"][-1]["parts"][0]
    s.check_metered(2, (8, 4), "gemini")  # candidates + thoughts as output
