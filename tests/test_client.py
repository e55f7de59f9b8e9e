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

from evalkit.client import CallStopped, ModelClient, backoff_s, request_hash
from evalkit.errors import CeilingBreached, InputTooLong, UnitCallError
from evalkit.ledger import Ledger
from evalkit.records import Endpoint, Price
from evalkit.runs import iter_jsonl
from evalkit.serve import ScriptedServer
from evalkit.tokens import TokenCounter, byte_bound, local_tiktoken, utf8_len

PRICE = Price(in_per_mtok=1.0, out_per_mtok=2.0)
ENDPOINT = Endpoint("scripted", None, "EVALKIT_TEST_KEY")


def call(srv: ScriptedServer, tmp_path, *, max_attempts=4, max_tokens_in=64, max_tokens_out=8, timeout_s=5.0, **kw):
    """One `complete` through a fresh client; returns (completion or exception, ledger events)."""
    async def go():
        led = Ledger(1.0, tmp_path / "ledger.jsonl")
        client = ModelClient(ENDPOINT, PRICE, led, max_tokens_in=max_tokens_in, max_tokens_out=max_tokens_out,
                             max_attempts=max_attempts, timeout_s=timeout_s, base_url=srv.base_url)
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
    fractional usage, a dict where the text goes). No tokenizer endpoint (404)."""

    def __init__(self, answer) -> None:
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
                data = json.dumps(outer.answer(body)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> "HostileServer":
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
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


def test_the_stop_flag_is_checked_before_every_attempt(tmp_path):
    script = {"default": {"text": "Paris"}, "faults": [{"kind": "429", "retry_after": 0.05}]}  # every request
    stopped: list[str] = []

    def should_stop():
        return stopped[0] if stopped else None

    async def flip_after_first_request(srv):
        while srv.stats["requests"] < 1:
            await asyncio.sleep(0.005)
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
    from evalkit.serve import LocalModelServer

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
