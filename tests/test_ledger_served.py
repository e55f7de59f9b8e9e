"""The ledger counts what was served (issue 44, item 4): an upstream on a raw loopback
socket reads the whole request, then answers bytes that are no HTTP response, or
usage below what its text carries; the attempt is paid at its reservation, never $0.
Each test fails on the code before the fix."""

from __future__ import annotations

import json

import pytest


# --- the ledger counts what was served (item 4) -------------------------------------------
class RawUpstream:
    """A real socket on loopback that reads each whole request (headers, then the body
    to its Content-Length) and answers the bytes `answer(path, body)` returns, as they
    are: no HTTP library on this side, so the answer may be anything."""

    def __init__(self, answer) -> None:
        import socket
        import threading

        self.answer, self.requests = answer, 0
        self._ls = socket.socket()
        self._ls.bind(("127.0.0.1", 0))
        self._ls.listen(16)
        self.base_url = f"http://127.0.0.1:{self._ls.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._ls.accept()
            except OSError:  # closed: the test is over
                return
            import threading

            # each connection on a thread of its own: a client that connects and closes
            # without a request (recv gives b"") never holds the next one up
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, body = data.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            fields = (h.partition(":") for h in lines[1:])
            length = next(int(v) for k, _, v in fields if k.lower() == "content-length")
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                body += chunk
            self.requests += 1
            conn.sendall(self.answer(lines[0].split()[1], json.loads(body)))

    def close(self) -> None:
        self._ls.close()


def _one_call(tmp_path, base_url, api="openai", tokens_in=64, **kw):
    import asyncio

    from evalkit.calls.client import ModelClient
    from evalkit.calls.ledger import Ledger
    from evalkit.foundations.records import Endpoint, Price
    from evalkit.runfolder.runs import iter_jsonl

    price = Price(in_per_mtok=1.0, out_per_mtok=2.0)

    async def go():
        led = Ledger(1.0, tmp_path / "ledger.jsonl")
        client = ModelClient(Endpoint("m", None, "EVALKIT_TEST_KEY", api=api), price, led, max_tokens_in=tokens_in,
                             max_tokens_out=8, max_attempts=1, base_url=base_url)
        try:
            return await client.complete(**kw)
        except Exception as exc:  # noqa: BLE001 - returned for the assertions
            return exc
        finally:
            await client.aclose()
            led.close()

    out = asyncio.run(go())
    return out, list(iter_jsonl(tmp_path / "ledger.jsonl")), price.cost(tokens_in, 8)


GARBAGE = {
    "bad status line": b"HTTP/1.1 abc\r\n\r\n",
    "binary bytes": bytes(range(256)) * 4,
    "NUL in a header": b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\ncontent-length: 2\r\n\r\n{}",
}


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
@pytest.mark.parametrize("garbage", list(GARBAGE))
def test_an_unreadable_answer_to_a_written_request_is_paid_at_the_reservation(tmp_path, monkeypatch, garbage,
                                                                               transport):
    """The upstream read the whole request, then answered bytes that are no HTTP
    response: the attempt was sent and may be billed, so it is settled at its reserved
    worst case, never released as "not sent" at $0."""
    from evalkit.foundations.errors import UnitCallError

    monkeypatch.setenv("EVALKIT_TEST_KEY", "k")
    monkeypatch.setenv("EVALKIT_HTTP", transport)
    up = RawUpstream(lambda path, body: GARBAGE[garbage])
    try:
        out, events, worst = _one_call(tmp_path, up.base_url, prompt="hi")
    finally:
        up.close()
    assert up.requests == 1 and isinstance(out, UnitCallError)
    (release,) = [e for e in events if e["event"] == "release"]
    assert release["reason"] != "not sent" and release["cost_usd"] == pytest.approx(worst), release


def _http(payload: dict) -> bytes:
    data = json.dumps(payload).encode()
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(data) + data


TEXT = "word " * 400  # 2,000 bytes of text


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_usage_below_what_the_text_carries_keeps_the_reservation_with_a_finding(tmp_path, monkeypatch, api):
    """0 tokens reported for 2,000 bytes of answer: not trusted, the call settled at its
    reservation (not $0), the ledger line says why; the answer itself is kept."""
    monkeypatch.setenv("EVALKIT_TEST_KEY", "k")

    def answer(path, body):
        if path.endswith("/responses"):
            return _http({"id": "r", "object": "response", "status": "completed", "model": "m",
                          "output": [{"type": "message", "role": "assistant", "id": "m1", "status": "completed",
                                      "content": [{"type": "output_text", "text": TEXT, "annotations": []}]}],
                          "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}})
        return _http({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                      "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": TEXT}}],
                      "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})

    up = RawUpstream(answer)
    kw = {"responses_input": "hi"} if api == "responses" else {"messages": [{"role": "user", "content": "hi"}]}
    try:
        out, events, worst = _one_call(tmp_path, up.base_url, max_tokens=2000, **kw)
    finally:
        up.close()
    assert not isinstance(out, Exception), out
    assert out.text == TEXT and out.cost_usd > 0
    (settle,) = [e for e in events if e["event"] == "settle"]
    assert settle["cost_usd"] == pytest.approx(out.cost_usd) and "below what the text carries" in settle["untrusted"]


def test_through_the_proxy_an_unreadable_upstream_answer_is_paid_at_the_reservation(tmp_path, monkeypatch):
    """An agent's call through the metering proxy to an upstream that reads the request
    and answers a bad status line: the agent gets a 502, and the ledger holds the
    attempt at its reserved worst case (the proxy forwards through `ModelClient`)."""
    import asyncio

    import openai
    from test_proxy import PRICE, _setup, _teardown

    from evalkit.runfolder.runs import iter_jsonl

    monkeypatch.setenv("EVALKIT_TEST_KEY", "k")
    up = RawUpstream(lambda path, body: GARBAGE["bad status line"])

    async def go():
        things = await _setup(tmp_path, up.base_url)
        ep = things[-1]
        oc = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key, max_retries=0)
        try:
            with pytest.raises(openai.APIStatusError) as ei:
                await oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            return ei.value.status_code
        finally:
            await oc.close()
            await _teardown(*things)

    try:
        status = asyncio.run(go())
    finally:
        up.close()
    assert status == 502 and up.requests == 1
    releases = [e for e in iter_jsonl(tmp_path / "ledger.jsonl") if e["event"] == "release"]
    assert [(e["reason"], e["cost_usd"]) for e in releases] == [("unreadable answer", pytest.approx(PRICE.cost(500, 20)))]


# --- usage below the text, counted on every wire (review of item 4) -------------------------
def _native(api: str, body: dict) -> dict:
    """`complete` keywords for an agent's request in its provider's own shape."""
    from evalkit.calls import anthropic_api, gemini_api

    kw = gemini_api.generate_arguments(body, "m") if api == "gemini" else anthropic_api.messages_arguments(body)[0]
    return {"messages": kw["messages"], "tools": kw["tools"], "native": kw["native"]}


def _answer(path: str, *, tokens_in: int, call_args: dict | None) -> bytes:
    """A 200 answer in the shape of the wire `path` names, reporting `tokens_in` input
    tokens and 1 output token, with a tool call carrying `call_args` (else the text "ok")."""
    args = json.dumps(call_args)
    if "generateContent" in path:
        part = {"functionCall": {"name": "f", "args": call_args}} if call_args else {"text": "ok"}
        return _http({"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP"}],
                      "usageMetadata": {"promptTokenCount": tokens_in, "candidatesTokenCount": 1}})
    if path.endswith("/messages"):
        block = {"type": "tool_use", "id": "t1", "name": "f", "input": call_args} if call_args else {
            "type": "text", "text": "ok"}
        return _http({"type": "message", "role": "assistant", "model": "m", "content": [block],
                      "stop_reason": "tool_use" if call_args else "end_turn",
                      "usage": {"input_tokens": tokens_in, "output_tokens": 1}})
    if path.endswith("/responses"):
        item = {"type": "function_call", "id": "fc1", "call_id": "c1", "name": "f", "arguments": args,
                "status": "completed"} if call_args else {
            "type": "message", "role": "assistant", "id": "m1", "status": "completed",
            "content": [{"type": "output_text", "text": "ok", "annotations": []}]}
        return _http({"id": "r", "object": "response", "status": "completed", "model": "m", "output": [item],
                      "usage": {"input_tokens": tokens_in, "output_tokens": 1, "total_tokens": tokens_in + 1}})
    message = {"role": "assistant", "content": "ok"}
    if call_args:
        message = {"role": "assistant", "content": None,
                   "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}]}
    return _http({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                  "choices": [{"index": 0, "finish_reason": "tool_calls" if call_args else "stop", "message": message}],
                  "usage": {"prompt_tokens": tokens_in, "completion_tokens": 1, "total_tokens": tokens_in + 1}})


USER = [{"role": "user", "content": "hi"}]
PROMPTS = {  # 2,000 bytes of prompt where the old count did not look: (api, complete's keywords)
    "gemini contents": ("gemini", lambda: _native("gemini", {"contents": [{"role": "user", "parts": [{"text": TEXT}]}]})),
    "gemini systemInstruction": ("gemini", lambda: _native("gemini", {
        "systemInstruction": {"parts": [{"text": TEXT}]}, "contents": [{"role": "user", "parts": [{"text": "hi"}]}]})),
    "anthropic system": ("anthropic", lambda: _native("anthropic", {"model": "m", "max_tokens": 8, "system": TEXT,
                                                                    "messages": USER})),
    "responses function_call_output": ("openai", lambda: {"responses_input": [
        {"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": TEXT}]}),
}


@pytest.mark.parametrize("case", list(PROMPTS))
def test_a_prompt_on_any_wire_counted_whole_against_low_usage(tmp_path, monkeypatch, case):
    """3 input tokens reported for a request whose 2,000 bytes sit in Gemini's
    `contents` or `systemInstruction`, Anthropic's `system` or a Responses tool output:
    not trusted, settled at the reservation, the ledger line says why."""
    monkeypatch.setenv("EVALKIT_TEST_KEY", "k")
    api, kw = PROMPTS[case]
    up = RawUpstream(lambda path, body: _answer(path, tokens_in=3, call_args=None))
    try:
        out, events, worst = _one_call(tmp_path, up.base_url, api=api, tokens_in=4000, **kw())
    finally:
        up.close()
    assert not isinstance(out, Exception), out
    (settle,) = [e for e in events if e["event"] == "settle"]
    assert "prompt_tokens=3 for" in (settle.get("untrusted") or ""), settle
    assert settle["cost_usd"] == pytest.approx(worst)


ANSWER_CALLS = {  # a request per wire; each answer is a tool call with 2,000 bytes of arguments
    "chat": ("openai", lambda: {"messages": USER}),
    "responses": ("openai", lambda: {"responses_input": "hi"}),
    "anthropic": ("anthropic", lambda: _native("anthropic", {"model": "m", "max_tokens": 8, "messages": USER})),
    "gemini": ("gemini", lambda: _native("gemini", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})),
}


@pytest.mark.parametrize("wire", list(ANSWER_CALLS))
def test_an_answers_tool_call_arguments_counted_against_low_usage(tmp_path, monkeypatch, wire):
    """1 output token reported for a tool call whose arguments hold 2,000 bytes, on
    every wire: not trusted, settled at the reservation."""
    monkeypatch.setenv("EVALKIT_TEST_KEY", "k")
    monkeypatch.setattr("evalkit.calls.client.TEXT_SLACK_BYTES", 4000)  # the answer fits the output bound
    api, kw = ANSWER_CALLS[wire]
    up = RawUpstream(lambda path, body: _answer(path, tokens_in=20, call_args={"q": TEXT}))
    try:
        out, events, worst = _one_call(tmp_path, up.base_url, api=api, **kw())
    finally:
        up.close()
    assert not isinstance(out, Exception), out
    assert out.tool_calls and out.tool_calls[0]["arguments"] == {"q": TEXT}
    (settle,) = [e for e in events if e["event"] == "settle"]
    assert "completion_tokens=1 for" in (settle.get("untrusted") or ""), settle


def test_media_and_ids_are_not_counted_as_text(tmp_path, monkeypatch):
    """A 40 KB base64 image (Anthropic's and Gemini's media parts, an OpenAI data URI)
    reported at a few tokens is trusted: image tokens do not follow its bytes."""
    import base64

    monkeypatch.setenv("EVALKIT_TEST_KEY", "k")
    data = base64.b64encode(bytes(range(256)) * 120).decode()
    from evalkit.calls.client import _text_bytes

    for body in ({"contents": [{"parts": [{"inlineData": {"mimeType": "image/png", "data": data}}]}]},
                 {"source": {"type": "base64", "media_type": "image/png", "data": data}},
                 [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + data}}]):
        assert _text_bytes(body) < 20, body  # its type and MIME type only
    up = RawUpstream(lambda path, body: _answer(path, tokens_in=30, call_args=None))
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + data}}
    try:
        out, events, _ = _one_call(tmp_path, up.base_url, messages=[{"role": "user", "content": [image]}],
                                     tokens_in=50_000)
    finally:
        up.close()
    assert not isinstance(out, Exception), out
    (settle,) = [e for e in events if e["event"] == "settle"]
    assert not settle.get("untrusted") and settle["prompt_tokens"] == 30, settle


@pytest.mark.parametrize("cached", ["many", -3, 1.5, [4], True])
def test_an_anthropic_cache_count_that_is_no_count_is_untrusted(tmp_path, monkeypatch, cached):
    """`cache_read_input_tokens` that is not a whole number: the input count is not
    `input_tokens` alone (a lower count than was served) but untrusted, settled at the
    reservation; null still counts as none."""
    monkeypatch.setenv("EVALKIT_TEST_KEY", "k")

    def answer(path, body, cached=cached):
        return _http({"type": "message", "role": "assistant", "model": "m", "content": [{"type": "text", "text": "ok"}],
                      "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1,
                                                           "cache_read_input_tokens": cached,
                                                           "cache_creation_input_tokens": None}})

    up = RawUpstream(answer)
    try:
        out, events, worst = _one_call(tmp_path, up.base_url, api="anthropic",
                                       **_native("anthropic", {"model": "m", "max_tokens": 8, "messages": USER}))
    finally:
        up.close()
    (settle,) = [e for e in events if e["event"] == "settle"]
    assert "cache_read_input_tokens" in (settle.get("untrusted") or ""), settle
    assert settle["cost_usd"] == pytest.approx(worst)


def test_anthropic_cache_counts_add_to_the_input_and_null_is_none():
    from evalkit.calls.anthropic_api import read_message

    base = {"type": "message", "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}
    usage = {"input_tokens": 5, "cache_creation_input_tokens": None, "cache_read_input_tokens": 2.0, "output_tokens": 4}
    assert read_message({**base, "usage": usage})[3] == (7, 4)
