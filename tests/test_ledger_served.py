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
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, body = data.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                fields = (h.partition(":") for h in lines[1:])
                length = next(int(v) for k, _, v in fields if k.lower() == "content-length")
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests += 1
                conn.sendall(self.answer(lines[0].split()[1], json.loads(body)))

    def close(self) -> None:
        self._ls.close()


def _one_call(tmp_path, base_url, **kw):
    import asyncio

    from evalkit.calls.client import ModelClient
    from evalkit.calls.ledger import Ledger
    from evalkit.foundations.records import Endpoint, Price
    from evalkit.runfolder.runs import iter_jsonl

    price = Price(in_per_mtok=1.0, out_per_mtok=2.0)

    async def go():
        led = Ledger(1.0, tmp_path / "ledger.jsonl")
        client = ModelClient(Endpoint("m", None, "EVALKIT_TEST_KEY"), price, led, max_tokens_in=64,
                             max_tokens_out=8, max_attempts=1, base_url=base_url)
        try:
            return await client.complete(**kw)
        except Exception as exc:  # noqa: BLE001 - returned for the assertions
            return exc
        finally:
            await client.aclose()
            led.close()

    out = asyncio.run(go())
    return out, list(iter_jsonl(tmp_path / "ledger.jsonl")), price.cost(64, 8)


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
