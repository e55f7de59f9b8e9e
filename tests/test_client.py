"""ModelClient over real HTTP to the scripted server: retries on the ledger, causes
recorded, ceilings passed to the API, and input counts that never undercount."""
from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evalkit.calls.client import CallStopped, ModelClient, backoff_s, request_hash
from evalkit.foundations.errors import CeilingBreached, InputError, InputTooLong, UnitCallError
from evalkit.calls.ledger import Ledger
from evalkit.foundations.records import Endpoint, Price
from evalkit.runfolder.runs import iter_jsonl
from evalkit.calls.serve import ScriptedServer
from evalkit.foundations.tokens import TokenCounter, byte_bound, local_tiktoken, utf8_len

PRICE = Price(in_per_mtok=1.0, out_per_mtok=2.0)
ENDPOINT = Endpoint("scripted", None, "EVALKIT_TEST_KEY")


def call(srv: ScriptedServer, tmp_path, *, max_attempts=4, max_tokens_in=64, max_tokens_out=8, timeout_s=5.0,
         client_kw=None, **kw):
    """One `complete` through a fresh client; returns (completion or exception, ledger events).
    `srv` is anything with a `base_url`; `client_kw` go to `ModelClient`."""
    async def go():
        led = Ledger(1.0, tmp_path / "ledger.jsonl")
        client = ModelClient(ENDPOINT, PRICE, led, max_tokens_in=max_tokens_in, max_tokens_out=max_tokens_out,
                             max_attempts=max_attempts, timeout_s=timeout_s, base_url=srv.base_url,
                             **(client_kw or {}))
        try:
            return await client.complete(**kw)
        except Exception as exc:  # returned for the assertions
            return exc
        finally:
            await client.aclose()
            led.close()
    out = asyncio.run(go())
    return out, list(iter_jsonl(tmp_path / "ledger.jsonl"))


def kinds(events):
    return [e["event"] for e in events]


class HostileServer:
    """A real HTTP server on loopback answering every completion request with the body
    `answer(request)` returns: shapes the scripted server refuses to produce (negative or
    fractional usage, a dict where the text goes). `answer` may return `(status, body)`,
    and bytes for a body sent as they are;
    `chunked=True` sends the body without a Content-Length. No tokenizer endpoint (404)."""

    def __init__(self, answer, chunked: bool = False) -> None:
        self.answer = answer
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                if not self.path.endswith("completions"):
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                outer.requests.append(body)
                answer = outer.answer(body)
                status, answer = answer if isinstance(answer, tuple) else (200, answer)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                if chunked:
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for i in range(0, len(data), 65536):
                        part = data[i:i + 65536]
                        try:
                            self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                        except OSError:  # the client stopped reading: the point of the test
                            return
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        chunked = bool(chunked)
        Handler.protocol_version = "HTTP/1.1" if chunked else "HTTP/1.0"
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> "HostileServer":
        # shutdown() waits for serve_forever to look at its flag, which it does each poll_interval
        # (0.5 s by default): a test per server, 88 of them, would wait that out each time
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def completion_body(text="yes", usage=None, chat=False, choices=None):
    """A completion response body; `text` goes where the model's text goes, as is."""
    if choices is None:
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"} if chat
                  else {"index": 0, "text": text, "finish_reason": "stop"})
        choices = [choice]
    return {"id": "x", "object": "chat.completion" if chat else "text_completion", "created": 0, "model": "scripted",
            "choices": choices, "usage": usage if usage is not None else {"prompt_tokens": 3, "completion_tokens": 1}}


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": -100000, "completion_tokens": 0},
    {"prompt_tokens": 3, "completion_tokens": -5},
    {"prompt_tokens": 10.9, "completion_tokens": 1.2},
    {"prompt_tokens": "12", "completion_tokens": 1},
    {"prompt_tokens": True, "completion_tokens": 1},
    {"prompt_tokens": [1], "completion_tokens": {"n": 1}},
])
def test_untrusted_usage_is_settled_at_the_reservation_and_fails_the_call(tmp_path, usage):
    with HostileServer(lambda body: completion_body(usage=usage)) as srv:
        exc, events = call(srv, tmp_path, prompt="Capital of France?", key="c/a/0")
        assert len(srv.requests) == 1  # not retried: the server's accounting cannot be trusted
    assert isinstance(exc, UnitCallError) and "usage is not a non-negative integer" in str(exc)
    assert kinds(events) == ["reserve", "settle"]
    settle = events[1]
    assert settle["cost_usd"] == pytest.approx(PRICE.cost(64, 8)) == pytest.approx(events[0]["amount_usd"])
    assert (settle["prompt_tokens"], settle["completion_tokens"]) == (64, 8)
    assert "not a non-negative integer" in settle["untrusted"] and not settle["breach"]


def test_counts_that_are_objects_are_named_as_json_in_the_ledger_and_the_cause(tmp_path):
    """The answer is read through an attribute view of its JSON: a count that is an object
    (or a list of them) is named as the data the server sent, never as that view's repr
    (an address that differs each run, stored in the ledger's journal)."""
    usage = {"prompt_tokens": [{"a": 1}], "completion_tokens": {"n": 1}}
    with HostileServer(lambda body: completion_body(usage=usage)) as srv:
        exc, events = call(srv, tmp_path, prompt="Capital of France?", key="c/a/0")
    (settle,) = [e for e in events if e["event"] == "settle"]
    assert "prompt_tokens=[{'a': 1}], completion_tokens={'n': 1}" in settle["untrusted"], settle["untrusted"]
    assert "prompt_tokens=[{'a': 1}], completion_tokens={'n': 1}" in str(exc)
    client = ModelClient(ENDPOINT, PRICE, Ledger(1.0), max_tokens_in=64, max_tokens_out=8, base_url=srv.base_url)
    try:  # a batch line's body is read the same way
        raw_usage = client.parse_body(completion_body(usage=usage), chat=False)[3]
    finally:
        asyncio.run(client.aclose())
    assert raw_usage == ([{"a": 1}], {"n": 1})


def test_fractional_usage_over_the_reservation_rounds_up_and_breaches(tmp_path):
    usage = {"prompt_tokens": 3, "completion_tokens": 8.01}  # 8 reserved: rounded up to 9
    with HostileServer(lambda body: completion_body(usage=usage)) as srv:
        exc, events = call(srv, tmp_path, prompt="Capital of France?")
    assert isinstance(exc, CeilingBreached)
    assert events[-1]["completion_tokens"] == 9 and events[-1]["breach"]
    assert events[-1]["cost_usd"] == pytest.approx(PRICE.cost(64, 9))


def test_an_integral_float_count_is_an_integer(tmp_path):
    with HostileServer(lambda body: completion_body(usage={"prompt_tokens": 3.0, "completion_tokens": 1.0})) as srv:
        c, events = call(srv, tmp_path, prompt="Capital of France?")
    assert c.text == "yes" and c.usage.prompt_tokens == 3 and isinstance(c.usage.prompt_tokens, int)
    assert events[-1]["cost_usd"] == pytest.approx(PRICE.cost(3, 1)) and "untrusted" not in events[-1]


@pytest.mark.parametrize("chat,body,cause", [
    (False, completion_body(text={"a": 1}), "text is a dict, not a string"),
    (False, completion_body(text=["a"]), "text is a list, not a string"),
    (False, completion_body(text=7), "text is a int, not a string"),
    (False, completion_body(choices=["yes"]), "first choice is a str"),
    (False, completion_body(choices={"0": {"text": "yes"}}), "no choices"),
    (True, completion_body(text={"a": 1}, chat=True), "text is a dict, not a string"),
    (True, completion_body(chat=True, choices=[{"index": 0, "message": {"role": "assistant", "content": "x",
                                                                         "tool_calls": [{"id": "t"}]}}]),
     "tool call has no function name"),
    (True, completion_body(chat=True, choices=[{"index": 0, "message": "hi", "finish_reason": "stop"}]),
     "no message object"),
    (False, {**completion_body(), "choices": [{"index": 0, "text": "x", "finish_reason": {"why": 1}}]},
     "finish_reason is a dict"),
])
def test_malformed_shapes_fail_the_call_with_the_cause(tmp_path, chat, body, cause):
    kw = {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"}
    with HostileServer(lambda _: body) as srv:
        exc, events = call(srv, tmp_path, max_attempts=2, **kw)
        assert len(srv.requests) == 2  # a malformed body is retried like a dropped one
    assert isinstance(exc, UnitCallError) and "malformed response" in str(exc) and cause in str(exc), str(exc)
    assert kinds(events) == ["reserve", "release"] * 2  # charged in full, no output invented
    assert all(e["cost_usd"] == pytest.approx(PRICE.cost(64, 8)) for e in events if e["event"] == "release")


def test_a_body_that_is_not_json_is_a_malformed_response(tmp_path):
    with HostileServer(lambda _: b"<html>502 from a gateway</html>") as srv:
        exc, events = call(srv, tmp_path, max_attempts=2, prompt="hi")
        assert len(srv.requests) == 2
    assert isinstance(exc, UnitCallError) and "malformed response: the response body is not JSON" in str(exc)
    assert kinds(events) == ["reserve", "release"] * 2


def test_tool_call_arguments_sent_as_an_object_are_kept_as_plain_json(tmp_path):
    """The answer is read as plain JSON (not the SDK's objects): arguments a server sends
    as an object, not as a JSON string, are recorded as that object, storable as JSON."""
    calls = [{"id": "t1", "type": "function", "function": {"name": "lookup", "arguments": {"city": ["Paris", {"n": 1}]}}}]
    body = completion_body(chat=True, choices=[{"index": 0, "message": {"role": "assistant", "content": None,
                                                                        "tool_calls": calls},
                                                "finish_reason": "tool_calls"}])
    with HostileServer(lambda _: body) as srv:
        c, _ = call(srv, tmp_path, messages=[{"role": "user", "content": "hi"}])
    assert c.tool_calls == ({"name": "lookup", "arguments": {"city": ["Paris", {"n": 1}]}, "id": "t1"},)
    assert json.loads(json.dumps(c.tool_calls)) == list(c.tool_calls) and c.text == "" and c.finish_reason == "tool_calls"


def test_the_stop_flag_is_checked_before_every_attempt(tmp_path):
    script = {"default": {"text": "Paris"}, "faults": [{"kind": "429", "retry_after": 0.05}]}  # every request
    stopped: list[str] = []

    def should_stop():
        return stopped[0] if stopped else None

    async def flip_after_first_request(srv):
        # the server signals its first request (a thread waits on it, off the event loop)
        assert await asyncio.to_thread(srv.wait_until, lambda stats: stats["requests"] >= 1, 30)
        stopped.append("ceiling breached")

    with ScriptedServer(script) as srv:
        async def go():
            led = Ledger(1.0, tmp_path / "ledger.jsonl")
            client = ModelClient(ENDPOINT, PRICE, led, max_tokens_in=64, max_tokens_out=8, max_attempts=4,
                                 timeout_s=5.0, base_url=srv.base_url)
            try:
                flip = asyncio.ensure_future(flip_after_first_request(srv))
                try:
                    return await client.complete(prompt="Capital of France?", key="c/a/0", should_stop=should_stop)
                except Exception as exc:
                    return exc
                finally:
                    await flip
            finally:
                await client.aclose()
                led.close()
        exc = asyncio.run(go())
        assert srv.stats["requests"] == 1  # no retry went out after the stop
    assert isinstance(exc, CallStopped) and exc.attempts == 1
    assert "stopped before attempt 2: ceiling breached" in str(exc)
    assert kinds(list(iter_jsonl(tmp_path / "ledger.jsonl"))) == ["reserve", "release"]


def test_429_is_retried_after_retry_after_and_each_attempt_is_on_the_ledger(tmp_path):
    script = {"default": {"text": "Paris"}, "faults": [{"kind": "429", "retry_after": 0.15, "times": 2}]}
    with ScriptedServer(script) as srv:
        t0 = time.perf_counter()
        c, events = call(srv, tmp_path, prompt="Capital of France?", seed=3, key="c/a/0")
        elapsed = time.perf_counter() - t0
        assert srv.stats["faults"]["429"] == 2 and srv.stats["requests"] == 3
    assert c.text == "Paris" and c.attempts == 3 and not c.cached
    assert elapsed >= 0.3  # waited out both Retry-After headers
    assert kinds(events) == ["reserve", "release", "reserve", "release", "reserve", "settle"]
    assert [e["reason"] for e in events if e["event"] == "release"] == ["HTTP 429", "HTTP 429"]
    assert all(e["key"] == "c/a/0" for e in events)


def test_500_and_a_dropped_connection_are_retried_and_counted(tmp_path):
    script = {"default": {"text": "Lima"}, "faults": [{"kind": "500", "times": 1}, {"kind": "drop", "times": 1}]}
    with ScriptedServer(script) as srv:
        c, events = call(srv, tmp_path, prompt="Capital of Peru?")
        assert srv.stats["faults"]["500"] == 1 and srv.stats["faults"]["drop"] == 1
    assert c.text == "Lima" and c.attempts == 3
    releases = [e for e in events if e["event"] == "release"]
    assert [r["reason"] for r in releases] == ["HTTP 500", "connection error"]
    # An HTTP error costs nothing; a dropped call may have been billed: charged in full.
    assert releases[0]["cost_usd"] == 0 and releases[1]["cost_usd"] == pytest.approx(PRICE.cost(64, 8))


def test_a_timeout_is_retried_and_charged_in_full(tmp_path):
    script = {"default": {"text": "Oslo"}, "faults": [{"kind": "slow", "delay_s": 2.0, "times": 1}]}
    with ScriptedServer(script) as srv:
        c, events = call(srv, tmp_path, prompt="Capital of Norway?", timeout_s=0.3)
    assert c.text == "Oslo" and c.attempts == 2
    (release,) = [e for e in events if e["event"] == "release"]
    assert release["reason"] == "timeout" and release["cost_usd"] == pytest.approx(PRICE.cost(64, 8))


def test_malformed_body_is_retried(tmp_path):
    script = {"default": {"text": "Rome"}, "faults": [{"kind": "malformed", "times": 1}]}
    with ScriptedServer(script) as srv:
        c, events = call(srv, tmp_path, prompt="Capital of Italy?")
    assert c.text == "Rome" and c.attempts == 2
    assert [e["reason"] for e in events if e["event"] == "release"] == ["malformed response"]


def test_after_the_last_attempt_the_case_errors_with_the_cause(tmp_path):
    script = {"default": {"text": "never seen"}, "faults": [{"kind": "500"}]}  # every request
    with ScriptedServer(script) as srv:
        exc, events = call(srv, tmp_path, prompt="Capital of Spain?", max_attempts=3)
        assert srv.stats["requests"] == 3
    assert isinstance(exc, UnitCallError) and exc.attempts == 3
    assert "failed after 3 attempts" in str(exc) and "HTTP 500" in str(exc)
    assert kinds(events) == ["reserve", "release"] * 3  # no settle: no output was invented


def test_a_400_is_not_retried(tmp_path):
    with ScriptedServer({"rules": [{"match": "France", "text": "Paris"}]}) as srv:  # no default: 400
        exc, events = call(srv, tmp_path, prompt="Capital of Chad?")
        assert srv.stats["requests"] == 1
    assert isinstance(exc, UnitCallError) and "HTTP 400" in str(exc) and "not retried" in str(exc)
    assert kinds(events) == ["reserve", "release"]


def test_ceilings_and_sampling_parameters_reach_the_api(tmp_path):
    with ScriptedServer({"default": {"text": "one two three four five six seven eight nine ten"}}) as srv:
        c, events = call(srv, tmp_path, prompt="Count", temperature=0.7, seed=42, stop=["\n"], max_tokens_out=4)
        body = srv.requests[0]
    assert body["max_tokens"] == 4 and body["seed"] == 42 and body["temperature"] == 0.7 and body["stop"] == ["\n"]
    assert c.text == "one two three four" and c.finish_reason == "length" and c.usage.completion_tokens == 4
    settle = events[-1]
    assert settle["event"] == "settle" and settle["cost_usd"] == pytest.approx(PRICE.cost(c.usage.prompt_tokens, 4))
    assert c.cost_usd == pytest.approx(settle["cost_usd"])
    assert c.system_fingerprint == "fp_evalkit_scripted"


def test_an_agents_call_asks_fewer_tokens_sends_its_own_fields_and_is_cached_by_its_ordinal(tmp_path):
    from evalkit.calls.cache import ResponseCache

    async def go(srv):
        led = Ledger(1.0, tmp_path / "ledger.jsonl")
        cache = ResponseCache(tmp_path / "cache.sqlite")
        client = ModelClient(ENDPOINT, PRICE, led, max_tokens_in=64, max_tokens_out=8, base_url=srv.base_url,
                             cache=cache)
        kw = {"prompt": "Count", "seed": 3, "extra": {"top_p": 0.5, "model": "not-this", "max_tokens": 99}}
        a = await client.complete(**kw, max_tokens=3, call=1)
        b = await client.complete(**kw, max_tokens=3, call=2)  # the same request again: a call of its own
        c = await client.complete(**kw, max_tokens=3, call=1)  # a re-run of call 1: replayed
        big = await client.complete(prompt="Count", max_tokens=10_000)  # over the ceiling: the ceiling
        await client.aclose()
        cache.close()
        led.close()
        return a, b, c, big

    with ScriptedServer({"default": {"text": "one two three four five six seven eight nine ten"}}) as srv:
        a, b, c, big = asyncio.run(go(srv))
        bodies = srv.requests
    assert len(bodies) == 3 and [x["max_tokens"] for x in bodies] == [3, 3, 8]
    assert bodies[0]["top_p"] == 0.5 and bodies[0]["model"] == "scripted"  # evalkit's own fields stay its own
    assert a.text == "one two three" and not a.cached and not b.cached and c.cached and c.cost_usd == 0
    assert a.request_hash == b.request_hash == c.request_hash  # the request; the ordinal only keys the cache
    reserves = [e for e in iter_jsonl(tmp_path / "ledger.jsonl") if e["event"] == "reserve"]
    assert [e["tokens_out"] for e in reserves] == [3, 3, 8]
    assert big.text == "one two three four five six seven eight"


def test_chat_mode_sends_messages_and_tools_and_parses_tool_calls(tmp_path):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    script = {"rules": [{"match": "weather", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}]}
    messages = [{"role": "system", "content": "You call tools."}, {"role": "user", "content": "weather in Oslo?"}]
    with ScriptedServer(script) as srv:
        c, _ = call(srv, tmp_path, messages=messages, tools=tools, seed=1, max_tokens_in=256)
        body = srv.requests[0]
    assert body["messages"] == messages and body["tools"] == tools
    assert c.tool_calls[0]["name"] == "get_weather" and c.tool_calls[0]["arguments"] == {"city": "Oslo"}


def test_request_hash_is_the_canonical_body():
    a = {"model": "m", "prompt": "p", "max_tokens": 8, "seed": 1}
    b = {"seed": 1, "max_tokens": 8, "prompt": "p", "model": "m"}
    assert request_hash(a) == request_hash(b)
    assert request_hash(a) != request_hash({**a, "seed": 2})
    assert request_hash(a) == hashlib.sha256(b'{"max_tokens":8,"model":"m","prompt":"p","seed":1}').hexdigest()


def test_backoff_grows_and_honours_retry_after():
    import random
    rng = random.Random(0)
    assert all(backoff_s(1, None, rng) <= 0.25 for _ in range(100))
    assert max(backoff_s(5, None, rng) for _ in range(200)) > 0.25 * 4
    assert all(backoff_s(1, 2.0, rng) >= 2.0 for _ in range(50))


# -- token counting -----------------------------------------------------------------------

TEXTS = ["", "Paris", "What is the capital of France?\nA:", "  spaced   out  ", "naïve café",
         "東京は日本の首都です", "emoji 🇫🇷🏳️‍🌈 test", "a" * 500, "x y " * 300, "\u200b\u200d zero width"]


def test_input_over_the_limit_fails_before_any_call(tmp_path):
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        exc, events = call(srv, tmp_path, prompt="word " * 70, max_tokens_in=64)
        assert srv.stats["requests"] == 0
    assert isinstance(exc, InputTooLong) and "over max_tokens_in 64" in str(exc)
    assert events == []  # nothing reserved, nothing paid


def test_byte_bound_is_never_below_the_true_count():
    """The byte bound against two exact counts: the scripted server's tokenizer and a
    real byte-level BPE (tiktoken's engine with a byte vocabulary and merges built here,
    as no encoding file can be downloaded)."""
    import tiktoken

    ranks = {bytes([i]): i for i in range(256)}
    for pair in (b"th", b"he", b"the", b"ca", b"Pa", b"is", b" c", b"\xe6\x9d"):
        ranks.setdefault(pair, len(ranks))
    enc = tiktoken.Encoding("bytebpe", pat_str=r"""'s|'t| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+""",
                            mergeable_ranks=ranks, special_tokens={})
    with ScriptedServer({"default": {"text": "ok"}}) as srv:
        counter = TokenCounter("scripted", srv.base_url)

        async def exact(t):
            n = await counter.count_endpoint(prompt=t)
            await counter.aclose()
            return n
        for t in TEXTS:
            bound = byte_bound(prompt=t)
            assert bound >= len(enc.encode(t)) + 1  # + BOS
            assert bound >= asyncio.run(exact(t))
    msgs = [{"role": "user", "content": t} for t in TEXTS]
    assert byte_bound(messages=msgs) >= sum(len(enc.encode(t)) + 5 for t in TEXTS)


def test_counter_asks_the_endpoint_only_when_the_bound_is_over_the_limit(tmp_path):
    text = "ab " * 40  # 120 bytes, 40 words
    with ScriptedServer({"default": {"text": "ok"}}) as srv:
        async def go():
            counter = TokenCounter("scripted", srv.base_url)
            cheap = await counter.count(prompt="short", limit=64)
            cheap_method = counter.method
            fine = await counter.count(prompt=text, limit=64)
            fine_method = counter.method
            chat = await counter.count(messages=[{"role": "user", "content": text}], limit=64)
            await counter.aclose()
            return cheap, cheap_method, fine, fine_method, chat
        cheap, cheap_method, fine, fine_method, chat = asyncio.run(go())
        assert srv.stats["tokenize"] == 2  # none for the short prompt
        # The count guards the limit, and the server's own usage is never above it.
        c, _ = call(srv, tmp_path, prompt=text, max_tokens_in=64)
    assert (cheap, cheap_method) == (utf8_len("short") + 2, "utf8-bytes")
    assert (fine, fine_method) == (40, "endpoint")
    assert chat >= 40 and chat < byte_bound(messages=[{"role": "user", "content": text}])
    assert c.usage.prompt_tokens <= fine


def test_counter_falls_back_to_bytes_without_a_tokenizer_and_never_downloads(tmp_path, monkeypatch):
    # An endpoint that is not there: the upper bound, no exception.
    async def go():
        counter = TokenCounter("gpt-4o", "http://127.0.0.1:9/v1", timeout_s=2)
        n = await counter.count(prompt="x" * 100, limit=10)
        await counter.aclose()
        return n, counter.method
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    # A cached file with the wrong hash would make tiktoken delete it and download again:
    # it must be left alone and not used.
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    fake = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    fake.write_bytes(b"not an encoding")
    assert local_tiktoken("gpt-4o") is None
    assert fake.exists()
    assert asyncio.run(go()) == (102, "utf8-bytes")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # caching disabled: every use would download
    assert local_tiktoken("gpt-4o") is None
    assert local_tiktoken("gemma-3-270m") is None  # not an OpenAI model: no tiktoken count


@pytest.mark.local_model
def test_counts_against_the_embedded_models_own_tokenizer(tmp_path):
    """The real tokenizer of a real model: the endpoint count is what the completion
    reports, and the byte bound is never below it."""
    from evalkit.calls.serve import LocalModelServer

    prompts = [t for t in TEXTS if t] + ["Answer each question.\n\nQ: What is the capital of France?\nA:"]
    with LocalModelServer(n_ctx=1024) as srv:
        async def go():
            led = Ledger(1.0, tmp_path / "ledger.jsonl")
            client = ModelClient(Endpoint(srv.model_name, None, "EVALKIT_TEST_KEY"), PRICE, led,
                                 max_tokens_in=8, max_tokens_out=1, base_url=srv.base_url)
            rows = []
            for p in prompts:
                exact = await client.counter.count_endpoint(prompt=p)
                try:
                    c = await client.complete(prompt=p, temperature=0.0, seed=1)
                    reported = c.usage.prompt_tokens
                except InputTooLong:
                    reported = None
                rows.append((p, exact, reported))
            await client.aclose()
            return rows
        rows = asyncio.run(go())
    for p, exact, reported in rows:
        assert byte_bound(prompt=p) >= exact
        if reported is not None:  # fits max_tokens_in=8: called, and counted exactly
            assert reported == exact <= 8
        else:  # refused before any call, by the exact count, not the bytes
            assert exact > 8
    assert {r is None for _, _, r in rows} == {True, False}


def test_concurrent_counts_each_name_their_own_source():
    # Review finding: the source was shared state on the counter, read after an await,
    # so a concurrent count could name the wrong one in the InputTooLong message.
    text = "ab " * 40
    with ScriptedServer({"default": {"text": "ok"}}) as srv:
        async def go():
            counter = TokenCounter("scripted", srv.base_url)
            try:
                return await asyncio.gather(counter.measure(prompt=text, limit=64),
                                            counter.measure(prompt="short", limit=64))
            finally:
                await counter.aclose()
        (fine, fine_method), (cheap, cheap_method) = asyncio.run(go())
    assert (fine, fine_method) == (40, "endpoint")
    assert (cheap, cheap_method) == (utf8_len("short") + 2, "utf8-bytes")


def test_the_endpoint_is_asked_once_per_text_however_many_samples_send_it():
    # Review finding: each of the k samples of a (case, arm) asked the tokenizer again.
    text = "ab " * 40
    with ScriptedServer({"default": {"text": "ok"}}) as srv:
        async def go():
            counter = TokenCounter("scripted", srv.base_url)
            try:
                return [await counter.measure(prompt=text, limit=64) for _ in range(5)]
            finally:
                await counter.aclose()
        counts = asyncio.run(go())
        assert srv.stats["tokenize"] == 1
    assert counts == [(40, "endpoint")] * 5


# -- what a failed call costs, dead endpoints, rate limits, implausible answers -------------

class Refused:
    """A loopback port with nothing listening (connections are refused)."""

    def __init__(self) -> None:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"


def test_a_refused_connection_is_released_at_zero_as_not_sent(tmp_path):
    exc, events = call(Refused(), tmp_path, prompt="Capital of France?", max_attempts=3, key="c/a/0")
    assert isinstance(exc, UnitCallError) and "connection refused" in str(exc) and "not sent ($0)" in str(exc)
    assert kinds(events) == ["reserve", "release"] * 3
    releases = [e for e in events if e["event"] == "release"]
    assert all(e["reason"] == "not sent" and e["cause"] == "connection refused" and e["cost_usd"] == 0
               for e in releases)
    again = Ledger.resume(1.0, tmp_path / "ledger.jsonl")
    assert again.committed_usd == 0.0  # nothing was billed, and a resume agrees


def test_a_connect_timeout_is_not_sent(tmp_path):
    import socket
    # A listener whose accept queue is full: Linux drops further SYNs, so connecting hangs
    # until the connect timeout; the request never left.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        for _ in range(4):
            f = socket.socket()
            f.setblocking(False)
            try:
                f.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            fillers.append(f)
        # the accept queue is full once the first filler's handshake completes (listen(0)
        # queues one): its socket turns writable, the others stay in SYN_SENT
        import select

        assert select.select([], fillers, [], 10)[1], "no filler connection completed"

        class Srv:
            base_url = f"http://127.0.0.1:{port}/v1"
        exc, events = call(Srv(), tmp_path, prompt="hi", max_attempts=1, timeout_s=0.3)
        for f in fillers:
            f.close()
    (release,) = [e for e in events if e["event"] == "release"]
    assert release["reason"] == "not sent" and release["cause"] == "connect timeout after 0.3s", release
    assert release["cost_usd"] == 0 and "connect timeout" in str(exc)


def test_a_server_that_closes_before_reading_costs_nothing_one_that_read_stays_charged(tmp_path):
    import os
    import subprocess
    import sys
    if os.environ.get("EVALKIT_HTTP", "").lower() == "httpx":
        pytest.skip("the httpx transport does not say whether a failed write sent any byte: charged in full there")
    # Accept, close at once, never read: the client's write meets a closing connection
    # ("not sent"). When the close loses the race and the request was already written,
    # the reset may follow a processed request: charged in full.
    srv = subprocess.Popen([sys.executable, "-c", (
        "import socket\n"
        "ls = socket.socket(); ls.bind(('127.0.0.1', 0)); ls.listen(64)\n"
        "print(ls.getsockname()[1], flush=True)\n"
        "while True:\n"
        "    c, _ = ls.accept(); c.close()\n")], stdout=subprocess.PIPE, text=True)
    async def ten_calls(base_url, ledger_path):
        led = Ledger(1.0, ledger_path)
        client = ModelClient(ENDPOINT, PRICE, led, max_tokens_in=64, max_tokens_out=8, max_attempts=1,
                             base_url=base_url, max_connection_failures=100)
        try:
            return await asyncio.gather(*(client.complete(prompt=f"q{i}") for i in range(10)), return_exceptions=True)
        finally:
            await client.aclose()
            led.close()
    # Which side wins the race depends on scheduling: on a loaded machine the request is
    # often written before the close lands. Rounds of ten until one write met the close
    # (each round's outcomes checked: nothing else is ever "not sent").
    releases: list[dict] = []
    unsent: list[dict] = []
    try:
        url = f"http://127.0.0.1:{int(srv.stdout.readline())}/v1"
        for rnd in range(8):
            ledger_path = tmp_path / f"ledger-{rnd}.jsonl"
            outcomes = asyncio.run(ten_calls(url, ledger_path))
            assert all(isinstance(o, UnitCallError) for o in outcomes)
            got = [e for e in iter_jsonl(ledger_path) if e["event"] == "release"]
            assert len(got) == 10
            releases += got
            unsent = [e for e in releases if e["reason"] == "not sent"]
            if unsent:
                break
    finally:
        srv.kill()
        srv.wait()
    assert unsent, releases  # 80 in a row losing the race
    assert all(e["cost_usd"] == 0 and "before the request was written" in e["cause"] for e in unsent)
    for e in releases:
        if e["reason"] != "not sent":
            assert e["reason"] == "connection error" and e["cost_usd"] == pytest.approx(PRICE.cost(64, 8))
    (tmp_path / "read").mkdir()
    with ScriptedServer({"default": {"text": "x"}, "faults": [{"kind": "drop"}]}) as read_then_closed:
        exc, events = call(read_then_closed, tmp_path / "read", prompt="hi", max_attempts=2)
    assert [(e["reason"], e["cost_usd"]) for e in events if e["event"] == "release"] == \
        [("connection error", pytest.approx(PRICE.cost(64, 8)))] * 2  # it read the request: maybe processed


def test_consecutive_connection_failures_make_the_endpoint_unreachable(tmp_path):
    dead = Refused()

    async def go():
        led = Ledger(1.0, tmp_path / "ledger.jsonl")
        client = ModelClient(ENDPOINT, PRICE, led, max_tokens_in=64, max_tokens_out=8, max_attempts=10,
                             base_url=dead.base_url, max_connection_failures=3)
        try:
            first = await asyncio.gather(*(client.complete(prompt=f"q{i}", key=f"k{i}") for i in range(2)),
                                         return_exceptions=True)
            return first, client.unreachable
        finally:
            await client.aclose()
            led.close()
    t0 = time.perf_counter()
    (a, b), unreachable = asyncio.run(go())
    assert time.perf_counter() - t0 < 5  # not every key trying every one of its 10 attempts
    assert unreachable == f"endpoint unreachable: {dead.base_url} (connection refused)"
    assert isinstance(a, CallStopped) and isinstance(b, CallStopped)
    # The third failure tripped it and nothing was started after; the other key's attempt
    # may already have been on its way then (a loaded machine), so 3 or 4, never more.
    assert a.attempts + b.attempts in (3, 4), (a.attempts, b.attempts)
    assert f"stopped before attempt {a.attempts + 1}: {unreachable}" in str(a)


def test_an_answer_resets_the_connection_failure_count(tmp_path, fast_backoff):
    script = {"default": {"text": "ok"}, "faults": [{"kind": "drop", "times": 2}, {"kind": "500", "times": 1},
                                                    {"kind": "drop", "times": 2}]}
    with ScriptedServer(script) as srv:
        c, _ = call(srv, tmp_path, prompt="hi", max_attempts=6, client_kw={"max_connection_failures": 3})
    assert c.text == "ok" and c.attempts == 6  # two drops, an HTTP answer, two drops: never 3 in a row


def test_rate_limits_are_waited_out_within_the_time_budget_not_the_attempts(tmp_path):
    script = {"default": {"text": "Paris"}, "faults": [{"kind": "429", "retry_after": 0.02, "times": 4},
                                                       {"kind": "503", "retry_after": 0.02, "times": 3}]}
    with ScriptedServer(script) as srv:
        c, events = call(srv, tmp_path, prompt="Capital of France?", max_attempts=2)
        assert srv.stats["faults"]["429"] == 4 and srv.stats["faults"]["503"] == 3
    assert c.text == "Paris" and c.attempts == 8  # 7 rate-limited answers cost no attempt of the 2
    assert [e["reason"] for e in events if e["event"] == "release"] == ["HTTP 429"] * 4 + ["HTTP 503"] * 3
    assert all(e["cost_usd"] == 0 for e in events if e["event"] == "release")


def test_a_rate_limit_past_the_budget_fails_the_key_with_one_line_of_causes(tmp_path):
    script = {"default": {"text": "Paris"}, "faults": [{"kind": "429", "retry_after": 0.05}]}  # every request
    with ScriptedServer(script) as srv:
        t0 = time.perf_counter()
        exc, events = call(srv, tmp_path, prompt="Capital of France?", max_attempts=2,
                           client_kw={"rate_limit_budget_s": 1.5})
        elapsed = time.perf_counter() - t0
        n = srv.stats["requests"]
    assert isinstance(exc, UnitCallError) and "passes rate_limit_budget_s 1.5" in str(exc).replace("would pass",
                                                                                                    "passes")
    # more requests than max_attempts: the budget (time), not the attempts, ended it
    assert 0.75 < elapsed < 5.0 and n >= 3
    assert f"attempts 1-{n}: HTTP 429" in str(exc)  # one entry for the whole run of rate limits


def test_an_endpoint_that_rate_limits_past_the_budget_stops_every_other_key(tmp_path):
    script = {"default": {"text": "Paris"}, "faults": [{"kind": "429", "retry_after": 0.05}]}  # every request

    async def go(url):
        led = Ledger(1.0, tmp_path / "ledger.jsonl")
        client = ModelClient(ENDPOINT, PRICE, led, max_tokens_in=64, max_tokens_out=8, base_url=url,
                             rate_limit_budget_s=0.4)
        try:
            first = await asyncio.gather(client.complete(prompt="a"), return_exceptions=True)
            later = await asyncio.gather(client.complete(prompt="b"), return_exceptions=True)
            return first[0], later[0], client.rate_limited_out
        finally:
            await client.aclose()
            led.close()
    with ScriptedServer(script) as srv:
        url = srv.base_url
        first, later, why = asyncio.run(go(url))
    assert isinstance(first, UnitCallError) and not isinstance(first, CallStopped)
    assert why.startswith(f"rate limited: {url} (a key was refused for")
    assert isinstance(later, CallStopped) and later.attempts == 0  # not another 0.4 s of waiting


def test_insufficient_quota_is_not_waited_for(tmp_path):
    body = {"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota",
                      "code": "insufficient_quota"}}
    with HostileServer(lambda _: (429, body)) as srv:
        exc, _ = call(srv, tmp_path, prompt="hi", max_attempts=3)
        assert len(srv.requests) == 1
    assert isinstance(exc, UnitCallError) and "HTTP 429" in str(exc) and "not retried" in str(exc)


def test_concurrency_halves_on_rate_limits_and_recovers_after():
    import tempfile
    from pathlib import Path
    # A storm of 429s (half the requests, 20 in all), then none: the limit on requests in
    # flight is halved while it lasts and climbs back to 16 after it. The storm ends by
    # its count, not a window of the server's clock (a loaded machine's first request
    # once came after a 1 s window had closed); test_serve keeps the window's own test.
    storm = 20
    script = {"default": {"text": "ok"}, "latency_s": 0.01,
              "faults": [{"kind": "429", "rate": 0.5, "retry_after": 0.02, "times": storm}]}
    during: list[int] = []
    after: list[int] = []

    with ScriptedServer(script) as srv, tempfile.TemporaryDirectory() as d:

        async def go():
            led = Ledger(10.0, Path(d) / "ledger.jsonl")
            client = ModelClient(ENDPOINT, PRICE, led, max_tokens_in=64, max_tokens_out=8, base_url=srv.base_url,
                                 concurrency=16)
            sem = asyncio.Semaphore(16)

            async def one(i, trace):
                async with sem:
                    await client.complete(prompt=f"q{i}", key=str(i))
                    trace.append(client.concurrency_limit)
            try:
                await asyncio.gather(*(one(i, during) for i in range(100)))
                # 100 keys (and their retries) drew the whole storm: what follows meets none
                assert srv.stats["faults"]["429"] == storm
                # from any limit >= 1, each answer adds 1/limit: 150 answers climb past 16
                await asyncio.gather(*(one(i, after) for i in range(100, 250)))
            finally:
                await client.aclose()
                led.close()
        asyncio.run(go())
        assert srv.stats["faults"]["429"] == storm
    assert min(during) <= 8  # halved while the storm lasted
    assert after[-1] == 16  # and recovered once it was over


def test_backoff_with_retry_after_spreads_the_retries():
    import random
    rng = random.Random(1)
    waits = [backoff_s(3, 1.0, rng) for _ in range(200)]
    assert min(waits) >= 1.0 and max(waits) <= 2.0 and max(waits) - min(waits) > 0.5


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_bound_is_cut_off_and_charged_as_malformed(tmp_path, chunked):
    from evalkit.calls.client import body_bound
    text = "y" * 5_000_000  # a 5 MB answer to an 8-token request
    with HostileServer(lambda _: completion_body(text=text, usage={"prompt_tokens": 3, "completion_tokens": 1}),
                       chunked=chunked) as srv:
        t0 = time.perf_counter()
        exc, events = call(srv, tmp_path, prompt="hi", max_attempts=1)
        assert time.perf_counter() - t0 < 5
    assert isinstance(exc, UnitCallError) and "malformed response" in str(exc)
    assert f"{body_bound(8)}" in str(exc)
    (release,) = [e for e in events if e["event"] == "release"]
    assert release["reason"] == "malformed response" and release["cost_usd"] == pytest.approx(PRICE.cost(64, 8))


def test_text_far_longer_than_max_tokens_allows_is_no_sample(tmp_path):
    from evalkit.calls.client import text_bound
    # One 20 kB "word": the scripted server counts it as 1 token, the body is small, but
    # no 8-token answer is 20 kB long.
    with ScriptedServer({"default": {"text": "x" * 20_000}}) as srv:
        exc, events = call(srv, tmp_path, prompt="hi", max_attempts=1)
    assert isinstance(exc, UnitCallError) and "implausible answer: 20000 bytes" in str(exc)
    assert f"bound {text_bound(8)} bytes" in str(exc)
    assert [e["reason"] for e in events if e["event"] == "release"] == ["malformed response"]
    (tmp_path / "ok").mkdir()
    with ScriptedServer({"default": {"text": "x" * (text_bound(8) - 10)}}) as srv:  # long, but possible
        c, _ = call(srv, tmp_path / "ok", prompt="hi", max_attempts=1)
    assert len(c.text) == text_bound(8) - 10


@pytest.mark.parametrize("usage", ["lots", 12, [3, 1], {}, {"prompt_tokens": 3}, {"total_tokens": 4}])
def test_every_kind_of_bad_usage_is_untrusted(tmp_path, usage):
    with HostileServer(lambda body: completion_body(usage=usage)) as srv:
        exc, events = call(srv, tmp_path, prompt="Capital of France?", key="c/a/0")
        assert len(srv.requests) == 1
    assert isinstance(exc, UnitCallError) and "malformed response: usage" in str(exc)
    (settle,) = [e for e in events if e["event"] == "settle"]
    assert settle["untrusted"] and settle["cost_usd"] == pytest.approx(PRICE.cost(64, 8))
    assert Ledger.resume(1.0, tmp_path / "ledger.jsonl").untrusted == 1  # counted on a resume too


def test_no_usage_at_all_is_charged_in_full_but_is_not_untrusted(tmp_path):
    body = completion_body()
    del body["usage"]
    with HostileServer(lambda _: body) as srv:
        c, events = call(srv, tmp_path, prompt="hi")
    assert c.text == "yes" and c.cost_usd == pytest.approx(PRICE.cost(64, 8)) and "untrusted" not in events[-1]


def test_a_lone_surrogate_in_a_request_is_sent_as_a_replacement_character(tmp_path):
    with ScriptedServer({"default": {"text": "ok"}}) as srv:
        c, _ = call(srv, tmp_path, prompt="judge this: lone \ud800 output")
        assert srv.requests[0]["prompt"] == "judge this: lone \ufffd output"
    assert c.text == "ok" and c.request_hash == request_hash(srv.requests[0])


@pytest.mark.parametrize("key, kind", [("sk-abc123\n", "a line break"), ("sk-abc\u00e9123", "a non-ASCII character"),
                                       ("sk abc", "whitespace"), ("sk-\x01abc", "a control character")])
def test_a_key_no_header_can_carry_is_refused_before_any_request(tmp_path, monkeypatch, key, kind):
    """Before the fix the HTTP library refused each request on this side and evalkit
    charged it at its worst case as a "malformed response", retried until the cap was
    spent; the server saw nothing. Now the client is refused at construction: the
    message names the variable and what is wrong, never the key."""
    monkeypatch.setenv("EVALKIT_TEST_KEY", key)
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        with pytest.raises(InputError) as e:
            ModelClient(ENDPOINT, PRICE, Ledger(1.0), max_tokens_in=64, max_tokens_out=8, base_url=srv.base_url)
        assert srv.stats["requests"] == 0
    assert "EVALKIT_TEST_KEY" in str(e.value) and kind in str(e.value)
    assert "abc" not in str(e.value)  # the key is never shown


@pytest.mark.parametrize("url, problem", [
    ("http://u:p4ssw0rd@127.0.0.1:{port}/v1", "credentials"),
    ("ftp://127.0.0.1:{port}/v1", "scheme 'ftp'"),
    ("http:///v1", "no host"),
    ("http://127.0.0.1:{port}/v1\n", "control character"),
])
def test_a_base_url_no_request_can_go_to_is_refused_before_any_request(tmp_path, url, problem):
    """Credentials in the URL ("Cannot combine AUTHORIZATION header with credentials
    encoded in URL") and a scheme other than http(s) used to be charged in full per
    attempt with the server receiving nothing; now the client is refused, naming the
    URL with its password masked."""
    with ScriptedServer({"default": {"text": "x"}}) as srv:
        port = srv.base_url.rsplit(":", 1)[1].split("/")[0]
        with pytest.raises(InputError) as e:
            ModelClient(ENDPOINT, PRICE, Ledger(1.0), max_tokens_in=64, max_tokens_out=8,
                        base_url=url.format(port=port))
        assert srv.stats["requests"] == 0
    assert problem in str(e.value) and "p4ssw0rd" not in str(e.value), e.value


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_request_the_http_client_refuses_to_send_costs_nothing_and_stops_like_a_dead_endpoint(
        tmp_path, monkeypatch, transport):
    """A header evalkit does not check itself (the openai client reads OPENAI_ORG_ID into
    `OpenAI-Organization`) holding a newline: the HTTP library refuses every request
    before writing a byte. Each attempt is released at $0 as "not sent" (not charged as
    a malformed response, not retried), and a run of them stops the client as a dead
    endpoint does."""
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1\n")
    monkeypatch.setenv("EVALKIT_HTTP", transport)

    async def go(base_url):
        led = Ledger(1.0, tmp_path / "ledger.jsonl")
        client = ModelClient(ENDPOINT, PRICE, led, max_tokens_in=64, max_tokens_out=8, max_attempts=4,
                             base_url=base_url, max_connection_failures=3)
        try:
            out = []
            for i in range(5):
                try:
                    out.append(await client.complete(prompt=f"q{i}", key=f"k{i}"))
                except Exception as exc:  # noqa: BLE001 - returned for the assertions
                    out.append(exc)
            return out, client.unreachable
        finally:
            await client.aclose()
            led.close()

    with ScriptedServer({"default": {"text": "x"}}) as srv:
        url = srv.base_url
        outcomes, unreachable = asyncio.run(go(url))
        assert srv.stats["requests"] == 0
    events = list(iter_jsonl(tmp_path / "ledger.jsonl"))
    releases = [e for e in events if e["event"] == "release"]
    assert releases and all(e["reason"] == "not sent" and e["cost_usd"] == 0 for e in releases), releases
    assert "refused to send the request" in releases[0]["cause"]
    assert Ledger.resume(1.0, tmp_path / "ledger.jsonl").committed_usd == 0.0
    assert unreachable is not None and unreachable.startswith(f"endpoint unreachable: {url} (")
    assert all(isinstance(o, UnitCallError) for o in outcomes)
    assert isinstance(outcomes[-1], CallStopped)  # stopped: no attempt after the third failure
    assert len(releases) == 3


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - the kind of failure is what is compared
        return ("error", type(exc).__name__)


BODIES = [  # a batch result line's body: what parse_body must read exactly as the online path does
    {"choices": [{"index": 0, "text": "Paris", "finish_reason": "stop"}],
     "usage": {"prompt_tokens": 3, "completion_tokens": 1}, "model": "m", "system_fingerprint": "fp"},
    {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{broken"}}]},
        "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 5}},
    {"choices": [{"message": {"content": "hi"}}]},  # no usage, no finish reason, no model
    {"choices": [{"message": {"content": "hi"}}], "usage": "lots"},
    {"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": -1, "completion_tokens": 1.5}},
    {"choices": [{"message": {"content": "hi"}}], "usage": [1, 2]},
    {"choices": "bad"}, {"choices": []}, {"choices": [7]}, {"choices": [{"message": "text"}]},
    {"choices": [{"message": {"content": 42}}]}, {"choices": [{"message": {"content": "x"}, "finish_reason": 3}]},
    {"choices": [{"message": {"content": "x", "tool_calls": {"no": "list"}}}]},
    {"choices": [{"message": {"content": "x", "tool_calls": [{"function": {"arguments": "{}"}}]}}]},
    {"choices": [{"message": {"content": "y" * 20_000}}]},  # past what 8 tokens can carry
    {"choices": [{"text": None}]}, {"model": "m"},
]


@pytest.mark.parametrize("body", BODIES)
def test_parse_body_reads_a_json_body_exactly_as_the_openai_clients_objects_are_read(body):
    import openai

    led = Ledger(1.0)
    client = ModelClient(ENDPOINT, PRICE, led, max_tokens_in=64, max_tokens_out=8, base_url="http://127.0.0.1:9/v1")
    try:
        for chat, cls in ((True, openai.types.chat.ChatCompletion), (False, openai.types.Completion)):
            reference = _outcome(lambda: client._parse(cls.construct(**body), chat=chat))  # what the SDK builds
            assert _outcome(lambda: client.parse_body(body, chat=chat)) == reference
    finally:
        asyncio.run(client.aclose())
