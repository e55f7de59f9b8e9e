"""One model call under the ledger: count, reserve, call, retry, settle, cache.

`ModelClient.complete` is the only place evalkit calls a model (generator or judge). It
goes through the official async `openai` client with the client's own retries off
(`max_retries=0`), because every attempt is a call that may be billed and must be on
the ledger: evalkit retries itself, with full-jitter exponential backoff and the
server's Retry-After, and after the last attempt raises `UnitCallError` with every
cause. It never invents an output.

Retries. A rate limit or an overload (HTTP 429, 503, 529, or an error body whose type
or code says "overloaded"; not a 429 `insufficient_quota`, which no wait cures) is
retried for as long as the key's time budget lasts (`rate_limit_budget_s`, counted from
the key's first attempt), never sooner than Retry-After. Other 5xx, 408, 409, dropped
connections, timeouts and malformed bodies are retried up to `max_attempts` attempts
(rate-limited answers do not count against it). Concurrency backs off with the rate
limits (AIMD, as TCP and well-kept API clients do): a rate-limited answer the pacer
takes for a limit (`evalkit.calls.ratelimit`; not a random refusal) halves the number
of requests allowed in flight (at most once a second), and each successful answer
gives back 1/limit of a slot, up to the configured `concurrency`.

Accounting per attempt: reserve the worst case (`max_tokens_in` in, `max_tokens_out`
out, at the model's price) before sending; settle with the usage the response reports
(`CeilingBreached` when it reports more than the reservation). What a failed attempt
costs is decided by what may have been billed, and nothing else:

* an HTTP error status: $0 (the endpoint refused before generating);
* provably never sent: $0, released on the ledger with reason ``"not sent"`` and its
  cause. That is only: a refused connection (ECONNREFUSED), a failed DNS lookup, any
  other failure to connect (aiohttp's `ClientConnectorError`: unreachable network, TLS
  handshake), a connect timeout (aiohttp's `ConnectionTimeoutError`, raised only while a
  connection is acquired), and a request whose bytes were refused by a closing
  connection (aiohttp's "Cannot write to closing transport": the headers go out with the
  body in that one write, and a body cut short under its Content-Length is no request
  any server can process), a URL the client cannot request (aiohttp's
  `NonHttpUrlClientError`, `InvalidUrlClientError`; httpx's `UnsupportedProtocol`), and
  any error the HTTP client raised on this side before a response arrived for the
  attempt (a header it refuses to serialize, say: "the HTTP client refused to send the
  request"). That last kind is told apart by the response hook, which marks the attempt
  (`_ATTEMPT`) when an answer's status line arrives: without the mark, an error that is
  not the transport's (every failure once a socket is in use surfaces as an openai
  `APIConnectionError`) came from building the request. It is not retried (the same
  request fails the same way) and counts as a connection failure, so a run of them
  stops the run as a dead endpoint does. On the httpx transport (`EVALKIT_HTTP=httpx`):
  its `ConnectError`, `ConnectTimeout`, `PoolTimeout` and `LocalProtocolError` (h11
  refused to serialize the request).
* anything else that may have reached the server (a connection reset or closed after
  the request was written, a read timeout, a malformed or implausible body): the full
  reservation, because the call may have been billed and evalkit cannot know. The
  ledger never underestimates. So is an answer that is no HTTP response at all (a bad
  status line, binary bytes, a NUL in a header: `unreadable_answer`, reason
  ``"unreadable answer"``): it came after the request was written, whatever the HTTP
  library's error type says.

Reported counts below what the request's text and the answer's text can carry
(`ledger.implausible_usage`: 0 tokens for 2,000 bytes; `_text_bytes`: every string of
the request body on every wire, Gemini's `contents` and `systemInstruction`, Anthropic's
`system`, Responses' tool outputs, and of the answer, its tool calls' arguments
included; media and ids left out) are untrusted too: the attempt
is settled at the full reservation, the reason on its ledger line, and the answer is
kept (its text is fine; only its accounting is not believed).
Reported usage that is not an object of non-negative integer counts (negative,
fractional, a string, a list, a missing count) is untrusted: the attempt is settled at
the full reservation and the call fails as a malformed response, not retried. No usage
at all is charged at the full reservation. A body whose text is not a string, or any
other shape that is not a completion, is a malformed response too; so is a plausible-
looking one that is not: a body over `body_bound(max_tokens_out)` bytes (cut off as it
is read) or text and tool calls over `text_bound(max_tokens_out)` UTF-8 bytes, that is
`BYTES_PER_TOKEN` bytes per token plus `TEXT_SLACK_BYTES` (the embedded Gemma 3
vocabulary's longest token is 31 bytes): a 50 MB answer to a 24-token request is no
sample.

A dead endpoint stops the run: after `max_connection_failures` consecutive connection
failures (never sent, or dropped) with no answer from the server in between,
`unreachable` says ``endpoint unreachable: <url> (<cause>)`` and no further attempt is
made. So does one that never stops rate-limiting: once a key has waited out its whole
`rate_limit_budget_s`, `rate_limited_out` says ``rate limited: <url> (...)`` and no key
waits that long again. `should_stop` is asked before every attempt and during the backoff before a retry, so
a run that has stopped (ceiling breached, budget exhausted, disk full, its watched
server died) sends no further paid retry and waits for none. A client with no base URL
is refused (`InputError`) unless replay-only: evalkit never lets the openai client pick
its default host. So is a base URL no request can go to (`endpoints.check_base_url`:
http(s) with a host, no credentials) and an API key no HTTP header can carry
(`check_endpoint`): both are known before any request, and no reservation is made.

A request text with a lone surrogate (a model's output shown to the judge) is sent with
U+FFFD in its place: UTF-8, and so HTTP, cannot carry it (`evalkit.foundations._text.sendable`).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import email.utils
import functools
import hashlib
import json
import math
import os
import random
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlparse

import aiohttp
import openai

try:  # the HTTP library the openai client speaks: httpx2 from openai 3.x, httpx before
    import httpx2
except ImportError:  # pragma: no cover - an older openai
    import httpx as httpx2  # type: ignore[no-redef]

from evalkit.calls.anthropic_api import ANTHROPIC_VERSION, read_message
from evalkit.calls.cache import ResponseCache
from evalkit.calls.gemini_api import read_response
from evalkit.calls.ledger import Ledger, Reservation, implausible_usage, reported_usage, unusable_usage
from evalkit.calls.ratelimit import pacer_for
from evalkit.calls.responses_api import input_messages, no_responses_api
from evalkit.foundations._io import loads_bounded
from evalkit.foundations._text import sendable
from evalkit.foundations.errors import (
    BudgetExhausted,
    CeilingBreached,
    InputError,
    InputTooLong,
    ReplayMiss,
    UnitCallError,
)
from evalkit.foundations.records import Config, Endpoint, Price, Usage
from evalkit.foundations.tokens import TokenCounter, utf8_len
from evalkit.suites.endpoints import cache_identity, check_base_url, served_model_file

# The request fields evalkit sets itself; `complete(extra=...)` cannot replace them.
_OWN_FIELDS = frozenset(
    {"model", "max_tokens", "prompt", "messages", "tools", "temperature", "seed", "stop", "input", "max_output_tokens"}
)
RETRY_STATUSES = frozenset({408, 409})  # plus every 5xx, and the rate limits below
RATE_LIMIT_STATUSES = frozenset({429, 503, 529})  # retried within the key's time budget
BACKOFF_BASE_S = 0.25
BACKOFF_MAX_S = 20.0
RATE_LIMIT_BACKOFF_MAX_S = 30.0
RETRY_AFTER_MAX_S = 120.0
RATE_LIMIT_BUDGET_S = 300.0
MAX_CONNECTION_FAILURES = 8
THROTTLE_CUT_INTERVAL_S = 1.0  # rate limits halve the requests in flight at most this often
BYTES_PER_TOKEN = 256
TEXT_SLACK_BYTES = 4096
BODY_SLACK_BYTES = 64 * 1024
BODY_PER_TEXT_BYTE = 8  # JSON escapes a byte in at most 6 (\u00XX), and a body has fields around the text


def text_bound(max_tokens_out: int) -> int:
    """The most UTF-8 bytes of text and tool calls an answer of `max_tokens_out` tokens
    is believed to carry (generously)."""
    return TEXT_SLACK_BYTES + BYTES_PER_TOKEN * max(0, int(max_tokens_out))


def body_bound(max_tokens_out: int) -> int:
    """The most bytes a response body to a request of `max_tokens_out` tokens is read."""
    return BODY_SLACK_BYTES + BODY_PER_TEXT_BYTE * text_bound(max_tokens_out)


def served_tokenizer(base_url: str | None) -> Callable[[str], int] | None:
    """The embedded model's own token count when `base_url` is the model `evalkit serve`
    runs (`serve.gguf_token_count` on its file), else None: the endpoint's tokenizer or
    the byte bound count instead (`foundations.tokens`)."""
    path = served_model_file(base_url)
    if path is None:
        return None
    from evalkit.calls.serve import gguf_token_count  # lazy: llama.cpp only under `evalkit serve`

    return functools.partial(gguf_token_count, path)


@dataclass(frozen=True)
class Completion:
    """One finished call (or a cache replay of one)."""

    text: str
    tool_calls: tuple[dict[str, Any], ...]
    finish_reason: str | None
    usage: Usage
    latency_ms: float
    cost_usd: float
    model: str
    system_fingerprint: str | None
    request_hash: str
    cached: bool
    cost_avoided_usd: float
    attempts: int


@dataclass
class CallProgress:
    """What a call in flight has cost so far, kept up to date by `ModelClient.complete`
    (mutable for that reason): the reader (`evalkit.calls.session`) still knows, when the call
    is cancelled mid-way, how many requests the endpoint received and what the ledger
    charged for them."""

    attempts: int = 0  # attempts sent (or being sent)
    cost_usd: float = 0.0  # charged for attempts that failed or were cut
    on_send: Callable[[], None] | None = None  # called before the first attempt is reserved and sent


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(body: dict[str, Any]) -> str:
    """sha256 of the canonical request body (model, prompt or messages, parameters)."""
    return hashlib.sha256(canonical_json(body).encode("utf-8", "surrogatepass")).hexdigest()


def _is_loopback(url: str | None) -> bool:
    host = (urlparse(url).hostname or "") if url else ""
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def _retry_after_s(headers: Any) -> float | None:
    """Seconds from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            v = float(raw) / divisor
            if math.isfinite(v) and v >= 0:
                return min(v, RETRY_AFTER_MAX_S)
        except ValueError:
            if name == "retry-after":
                try:
                    when = email.utils.parsedate_to_datetime(raw)
                    return min(max(0.0, when.timestamp() - time.time()), RETRY_AFTER_MAX_S)
                except (TypeError, ValueError):
                    pass
    return None


def backoff_s(attempt: int, retry_after: float | None, rng: random.Random, cap_s: float = BACKOFF_MAX_S) -> float:
    """Full-jitter exponential backoff after failed attempt `attempt` (1-based, capped at
    `cap_s`); with a Retry-After, that wait plus a jitter of at most as much again (so
    keys told the same wait do not all come back at once), never shorter."""
    ceiling = min(cap_s, BACKOFF_BASE_S * 2 ** (attempt - 1))
    if retry_after is None:
        return rng.uniform(0, ceiling)
    return retry_after + rng.uniform(0, min(ceiling, retry_after))


def _error_code(exc: openai.APIStatusError) -> str:
    """The error body's `type` and `code`, lowercased, for telling overloads and quota
    errors apart (empty when the body has none)."""
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error", body)
    if not isinstance(err, dict):
        return ""
    return " ".join(str(err.get(k) or "") for k in ("type", "code")).lower()


def is_rate_limit(exc: openai.APIStatusError) -> bool:
    """A rate limit or an overload: worth waiting for (see the module docstring)."""
    code = _error_code(exc)
    if "insufficient_quota" in code:
        return False  # billing, not load: no wait makes it pass
    return exc.status_code in RATE_LIMIT_STATUSES or (exc.status_code >= 500 and "overloaded" in code)


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and all(e is not x for x in out):
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


_URL_ERRORS = (aiohttp.NonHttpUrlClientError, aiohttp.InvalidUrlClientError, httpx2.UnsupportedProtocol)
_DNS_ERRORS = tuple(c for c in (getattr(aiohttp, "ClientConnectorDNSError", None), socket.gaierror) if c)


# Errors an HTTP client raises only while reading an answer (a bad status line, binary
# bytes, a NUL in a header, a body cut short): the request was written before them.
_ANSWER_ERRORS = (aiohttp.ClientResponseError, aiohttp.ClientPayloadError, httpx2.RemoteProtocolError, httpx2.ReadError)


def unreadable_answer(exc: BaseException) -> str | None:
    """The cause when `exc` came from reading the server's answer (the request was sent,
    so the attempt may be billed: never "not sent", never $0), else None."""
    for e in _chain(exc):
        if isinstance(e, _ANSWER_ERRORS):
            return f"unreadable answer ({type(e).__name__}: {_short(str(e), 200)})"
    return None


def transport_failure(exc: BaseException, timeout_s: float) -> tuple[str, str]:
    """(ledger reason, cause) of an attempt that got no HTTP answer: ``"not sent"`` when
    the request provably never reached the server (see the module docstring),
    ``"connection error"`` when the connection failed after it may have, ``"timeout"``
    when no answer came in time.

    openai's aiohttp transport maps every `aiohttp.ClientConnectionError` (a refused
    connection, a dropped one) to `httpx.ConnectTimeout`, so the SDK raises
    `APITimeoutError` for both; the cause chain still tells them apart."""
    chain = _chain(exc)
    for e in chain:
        if isinstance(e, _URL_ERRORS):  # raised before any connection is made
            return "not sent", f"the URL cannot be requested ({type(e).__name__}: {_short(str(e), 120)})"
        if isinstance(e, _DNS_ERRORS):
            return "not sent", f"DNS lookup failed: {_short(str(e), 120)}"
        if isinstance(e, ConnectionRefusedError):
            return "not sent", "connection refused"
        if isinstance(e, aiohttp.ClientConnectorError):
            if isinstance(e.os_error, ConnectionRefusedError):
                return "not sent", "connection refused"
            return "not sent", f"cannot connect: {_short(str(e.os_error or e), 120)}"
        if isinstance(e, aiohttp.ConnectionTimeoutError):
            return "not sent", f"connect timeout after {timeout_s:g}s"
        if isinstance(e, aiohttp.ClientConnectionResetError) and "closing transport" in str(e):
            return "not sent", "the server closed the connection before the request was written"
    if not any(isinstance(e, aiohttp.ClientError) for e in chain):  # httpx2's own transport
        for e in chain:
            if isinstance(e, (httpx2.ConnectTimeout, httpx2.PoolTimeout)):
                return "not sent", f"connect timeout after {timeout_s:g}s"
            if isinstance(e, httpx2.ConnectError):
                return "not sent", f"cannot connect: {_short(str(e) or type(e).__name__, 120)}"
            if isinstance(e, httpx2.LocalProtocolError):  # h11 refused to serialize the request
                return "not sent", f"the HTTP client refused to send the request: {_short(str(e), 120)}"
    for e in chain:
        if isinstance(e, aiohttp.ClientConnectionError) and not isinstance(e, TimeoutError):
            return "connection error", f"connection error: {_short(str(e), 200)}"
    if isinstance(exc, openai.APITimeoutError):
        return "timeout", f"timeout after {timeout_s:g}s"
    return "connection error", f"connection error: {_short(str(exc.__cause__ or exc), 200)}"


def _tool_call_dict(tc: Any) -> tuple[dict[str, Any], int]:
    """A tool call as evalkit records it, and an upper bound of its UTF-8 size."""
    fn = getattr(tc, "function", None)
    name = getattr(fn, "name", None)
    if not isinstance(name, str):
        raise _Malformed("a tool call has no function name")
    raw = _raw(getattr(fn, "arguments", None))
    try:
        args = loads_bounded(raw, "a tool call's arguments") if isinstance(raw, str) else raw
    except (json.JSONDecodeError, InputError):  # not JSON, or nested past the depth guard
        args = raw  # kept as the model wrote it; graders decide
    d = {"name": name, "arguments": args}
    tc_id = getattr(tc, "id", None)
    if isinstance(tc_id, str) and tc_id:
        d["id"] = tc_id
    size = _utf8_size(name) + (_utf8_size(raw) if isinstance(raw, str) else len(json.dumps(raw, default=str)))
    return d, size


MAX_TEXT_WALK = 200_000  # the values `_text_bytes` looks at, at most (a bounded walk, no recursion)
# Keys whose strings are no text the model reads or writes token by token: media and file
# references, ids, opaque signatures and encrypted reasoning.
_NOT_TEXT_KEYS = frozenset(
    {"url", "image_url", "file_data", "file_id", "b64_json", "id", "call_id", "tool_call_id", "tool_use_id"}
    | {"encrypted_content", "signature", "thoughtSignature"}
)
_MEDIA_KEYS = ("mimeType", "mime_type", "media_type", "format")  # a dict with one: its `data` is media


def _text_values(d: dict[Any, Any]) -> Iterator[Any]:
    """The values of `d` that may hold text: not under `_NOT_TEXT_KEYS`, nor the `data`
    of a media part (base64 with a MIME type beside it)."""
    media = d.get("type") == "base64" or any(k in d for k in _MEDIA_KEYS)
    return (v for k, v in d.items() if k not in _NOT_TEXT_KEYS and not (media and k == "data"))


def _text_bytes(value: Any) -> int:
    """The UTF-8 bytes of every string in `value` (a request body in any wire's shape:
    chat, Responses, Anthropic, Gemini; an answer's tool calls), media and ids left out
    (`_text_values`, `data:` URIs), walked over at most `MAX_TEXT_WALK` values: the text
    a usage count must cover (`ledger.implausible_usage`)."""
    size, stack, seen = 0, [value], 0
    while stack and seen < MAX_TEXT_WALK:
        v = stack.pop()
        seen += 1
        if isinstance(v, str):
            size += 0 if v.startswith("data:") else _utf8_size(v)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(_text_values(v))
    return size


def _utf8_size(text: str) -> int:
    """UTF-8 bytes of `text` (a lone surrogate as its three bytes)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _key_problem(key: str) -> str | None:
    """Why `key` cannot go in an HTTP Authorization header (the HTTP library would refuse
    to send the request), or None. Names the character's kind and place, never the key."""
    for i, ch in enumerate(key, 1):
        if ch in "\r\n":
            kind = "a line break (a trailing newline from a file or `echo`?)"
        elif ch.isspace():
            kind = "whitespace"
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            kind = "a control character"
        elif ord(ch) > 0x7E:
            kind = "a non-ASCII character"
        else:
            continue
        return f"it holds {kind} at character {i} of {len(key)}"
    return None


def check_endpoint(endpoint: Endpoint, base_url: str | None = None, replay_only: bool = False) -> str:
    """The API key for `endpoint`, read from the environment variable its config names.
    A loopback server (or a replay-only run) takes any key; elsewhere a missing key is an
    `InputError`. So is a key no HTTP header can carry (a newline, whitespace, a control
    or non-ASCII character): no request could be sent with it. The message names the
    variable, never the key."""
    url = base_url or endpoint.base_url
    api_key = os.environ.get(endpoint.api_key_env)
    if api_key:
        problem = _key_problem(api_key)
        if problem is not None:
            raise InputError(
                f"environment variable {endpoint.api_key_env} (the API key for {endpoint.model!r}) cannot be sent: "
                f"{problem}; an HTTP header cannot carry it, so no request would leave (the value is not shown)"
            )
        return api_key
    if (url and _is_loopback(url)) or replay_only:
        return "evalkit-loopback"  # local servers take any key
    raise InputError(f"environment variable {endpoint.api_key_env} (the API key for {endpoint.model!r}) is not set")


def _http_client(timeout_s: float, on_response: Callable[[Any], Any]) -> Any:
    """The openai client's own aiohttp transport (`openai.DefaultAioHttpClient`): at 32
    concurrent calls it spends about a third less CPU per call than the default httpx
    pool, which walks every pooled connection on each request. `EVALKIT_HTTP=httpx`
    keeps the default transport. Either way `on_response` sees every response before
    its body is read (it caps the body, `ModelClient._cap_body`)."""
    hooks = {"response": [on_response]}
    if os.environ.get("EVALKIT_HTTP", "").lower() == "httpx":
        return openai.DefaultAsyncHttpxClient(timeout=timeout_s, event_hooks=hooks)
    return openai.DefaultAioHttpClient(timeout=timeout_s, event_hooks=hooks)


class _Attempt:
    """One attempt's state, seen by the response hook through `_ATTEMPT`: `answered`
    once a response (its status line and headers) arrived for it."""

    __slots__ = ("answered",)

    def __init__(self) -> None:
        self.answered = False


# The attempt the running task is making: the response hook runs in the task that sends
# the request, so each of many concurrent attempts marks its own.
_ATTEMPT: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar("evalkit_attempt", default=None)


class CallStopped(UnitCallError):
    """The run stopped (ceiling breached, budget exhausted, endpoint unreachable, disk
    full, its watched server died) before this call's next attempt: no further paid
    attempt went out."""


class _Malformed(Exception):
    """The endpoint answered 200 with a body that is not a completion."""


MalformedResponse = _Malformed  # the public name (`ModelClient.parse_body` raises it)


class _BodyTooLarge(_Malformed):
    """A response body over `body_bound`: cut off as it was read."""


class _CappedStream(httpx2.AsyncByteStream):
    """A response body read at most `limit` bytes far: past it, a success's body raises
    `_BodyTooLarge` (it is no completion), an error's body is cut (its message is only
    shown)."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, strict: bool) -> None:
        self._inner, self._limit, self._strict = inner, limit, strict

    async def __aiter__(self) -> AsyncIterator[Any]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                if self._strict:
                    raise _BodyTooLarge(
                        f"the response body passed {self._limit} bytes, more than the requested max_tokens can produce"
                    )
                yield chunk[: len(chunk) - (seen - self._limit)]
                return
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Throttle:
    """How many requests may be in flight: additive increase, multiplicative decrease.

    A rate-limited answer halves the limit, at most once per `THROTTLE_CUT_INTERVAL_S`
    (the answers to one burst are one signal, not many: cutting on each would pin the
    limit at 1 under a steady few percent of 429s, and one slow answer would then hold
    the whole run); each successful answer adds 1/limit (one slot per limit's worth of
    answers), up to `ceiling`. Waiters are served in order. Single event loop; the fast
    path (a free slot, nobody waiting) takes no future.
    """

    def __init__(self, ceiling: int) -> None:
        self.ceiling = max(1, int(ceiling))
        self.limit = float(self.ceiling)
        self.in_flight = 0
        self._last_cut = -math.inf
        self._waiters: collections.deque[asyncio.Future[Any]] = collections.deque()

    async def acquire(self) -> None:
        """Wait for a slot."""
        if self.in_flight < int(self.limit) and not self._waiters:
            self.in_flight += 1
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted as it was cancelled: hand the slot on
            else:
                try:
                    self._waiters.remove(fut)
                except ValueError:
                    pass
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def rate_limited(self) -> None:
        now = time.monotonic()
        if now - self._last_cut >= THROTTLE_CUT_INTERVAL_S:
            self.limit = max(1.0, self.limit / 2)
            self._last_cut = now

    def answered(self) -> None:
        if self.limit < self.ceiling:
            self.limit = min(float(self.ceiling), self.limit + 1.0 / self.limit)
            self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < int(self.limit):
            fut = self._waiters.popleft()
            if not fut.done():
                self.in_flight += 1
                fut.set_result(None)


class _Causes:
    """The causes of a key's failed attempts, one entry per run of identical causes
    ("attempts 2-40: HTTP 429: ..."), so minutes of rate limits make one line."""

    def __init__(self) -> None:
        self._runs: list[list[Any]] = []  # [first attempt, last attempt, cause]; attempt None: a note

    def add(self, attempt: int, cause: str) -> None:
        last = self._runs[-1] if self._runs else None
        if last is not None and last[2] == cause and last[1] == attempt - 1:
            last[1] = attempt
        else:
            self._runs.append([attempt, attempt, cause])

    def note(self, text: str) -> None:
        self._runs.append([None, None, text])

    def __str__(self) -> str:
        return "; ".join(
            c if a is None else f"attempt {a}: {c}" if a == b else f"attempts {a}-{b}: {c}" for a, b, c in self._runs
        )


@dataclass(frozen=True)
class _Failed:
    """Why an attempt failed and may be retried: its cause, the server's Retry-After,
    and for a rate limit the wait the endpoint's pacer asks (`Pacer.refused`)."""

    cause: str
    retry_after: float | None = None
    limited_wait: float | None = None


@dataclass
class _Call:
    """One `ModelClient.complete` call: its wire body, its hashes, and the state of its
    attempts (mutable: each attempt updates it)."""

    body: dict[str, Any]
    rhash: str
    ckey: str  # what its answer is cached under (`_answer_key`)
    sample_index: int
    key: str
    should_stop: Callable[[], str | None] | None
    progress: CallProgress
    causes: _Causes = field(default_factory=_Causes)
    started: float = field(default_factory=time.monotonic)  # the key's rate-limit budget counts from here
    attempt: int = 0  # the attempt being made (1-based)
    failures: int = 0  # failed attempts that count against max_attempts (not rate limits)
    native: str | None = None  # the provider API its body is in when passed through (`Endpoint.api`), else None

    @property
    def label(self) -> str:
        return self.key or "request"

    @property
    def responses(self) -> bool:
        return "input" in self.body  # a Responses API call

    @property
    def tokens_out(self) -> int:
        """The reservation's output ceiling: what the call may use."""
        if self.native == "gemini":
            return int(self.body["generationConfig"]["maxOutputTokens"])
        return int(self.body["max_output_tokens"] if self.responses else self.body["max_tokens"])

    @functools.cached_property
    def pace_tokens(self) -> int:
        """The tokens a provider counts against its rate limit for one attempt, estimated."""
        return self.tokens_out + utf8_len(canonical_json(self.body)) // 4


# The provider APIs an endpoint may speak besides OpenAI's (`Endpoint.api`), as causes name them.
NATIVE_APIS = {"anthropic": "the Anthropic Messages API", "gemini": "the Gemini API"}


def _answer_key(rhash: str, call: int | None, sample: str | None) -> str:
    """What an answer to request `rhash` is cached under: the hash itself, or for an
    agent's call (`call`, its ordinal in sample `sample`) one answer per sample and
    ordinal, so a request made twice in one sample, or by two samples, gets its own."""
    if call is None:
        return rhash
    return request_hash({"request": rhash, "call": int(call), "sample": sample or ""})


class ModelClient:
    """Calls one model on one OpenAI-compatible endpoint under a ledger; see the module
    docstring. Build one per run (it holds the HTTP connection pool) and `aclose` it."""

    def __init__(
        self,
        endpoint: Endpoint,
        price: Price,
        ledger: Ledger,
        *,
        role: str = "generator",
        max_tokens_in: int,
        max_tokens_out: int,
        cache: ResponseCache | None = None,
        replay_only: bool = False,
        max_attempts: int = 6,
        timeout_s: float = 60.0,
        base_url: str | None = None,
        rate_limit_budget_s: float = RATE_LIMIT_BUDGET_S,
        max_connection_failures: int = MAX_CONNECTION_FAILURES,
        concurrency: int = 32,
        cache_endpoint: str | None = None,
    ) -> None:
        if price is None:
            raise InputError(f"no price for model {endpoint.model!r}: refusing to run")
        if max_attempts < 1:
            raise InputError(f"max_attempts must be at least 1, got {max_attempts}")
        if replay_only and cache is None:
            raise InputError("--replay-only needs a response cache")
        self.endpoint = endpoint
        self.price = price
        self.ledger = ledger
        self.role = role
        self.max_tokens_in = int(max_tokens_in)
        self.max_tokens_out = int(max_tokens_out)
        self.cache = cache
        # The endpoint the cache's entries are keyed by (`endpoints.endpoint_key` of the base
        # URL): an answer is replayed only to a request for the server that gave it. None:
        # entries without an endpoint (the judge's cache, for now).
        self.cache_endpoint = cache_endpoint
        self.replay_only = replay_only
        self.max_attempts = int(max_attempts)
        self.timeout_s = float(timeout_s)
        self.rate_limit_budget_s = float(rate_limit_budget_s)
        self.max_connection_failures = max(1, int(max_connection_failures))
        self.base_url = base_url or endpoint.base_url
        if not self.base_url and not replay_only:
            # Never the openai client's default host (api.openai.com): endpoints.resolve_base_url.
            raise InputError(
                f"no base URL for the {role} model {endpoint.model!r}; evalkit never falls back to "
                "the openai client's default host"
            )
        if self.base_url:  # one a request can go to: http(s), a host, no credentials
            check_base_url(self.base_url, f"the {role}'s base_url")

        self.unreachable: str | None = None  # "endpoint unreachable: <url> (<cause>)" once it is
        self.rate_limited_out: str | None = None  # set when a key waited out its whole rate_limit_budget_s
        self._connection_failures = 0
        self._text_bound = text_bound(self.max_tokens_out)
        self._body_bound = body_bound(self.max_tokens_out)
        self._throttle = _Throttle(concurrency)
        # The endpoint's rate limit, learned and shared with every client of it (evalkit.calls.ratelimit).
        self.pacer = pacer_for(self.base_url, endpoint.model)
        api_key = check_endpoint(endpoint, self.base_url, replay_only)
        # A replay-only client without a URL never sends: it gets no openai client at all.
        self._openai = (
            openai.AsyncOpenAI(
                api_key=api_key,
                base_url=self.base_url,
                max_retries=0,
                timeout=self.timeout_s,
                http_client=_http_client(self.timeout_s, self._cap_body),
            )
            if self.base_url
            else None
        )
        self.counter = TokenCounter(
            endpoint.model, self.base_url, api_key=api_key, tokenize=served_tokenizer(self.base_url)
        )
        self._rng = random.Random()

    @classmethod
    def of_run(
        cls,
        config: Config,
        role: str,
        endpoint: Endpoint,
        price: Price,
        ledger: Ledger,
        *,
        max_tokens_out: int,
        cache: ResponseCache | None,
        replay_only: bool,
        url: str | None,
        replay_key: str | None = None,
    ) -> ModelClient:
        """A run's client for `role` (the generator of an arm, the simulator): the
        suite's input ceiling, retries, timeout, rate-limit budget and concurrency; its
        answers cached under what they depend on (`endpoints.cache_identity`, not a
        serve's port; with no URL, `replay_key`: where a replay looks for them)."""
        return cls(
            endpoint,
            price,
            ledger,
            role=role,
            max_tokens_in=config.max_tokens_in,
            max_tokens_out=max_tokens_out,
            cache=cache,
            replay_only=replay_only,
            max_attempts=config.max_attempts,
            timeout_s=config.timeout_s,
            base_url=url,
            rate_limit_budget_s=config.rate_limit_budget_s,
            max_connection_failures=config.max_connection_failures,
            concurrency=config.concurrency,
            cache_endpoint=cache_identity(endpoint, url) if url else replay_key,
        )

    @property
    def concurrency_limit(self) -> int:
        """Requests allowed in flight now (the configured concurrency, or less while the
        endpoint rate-limits)."""
        return int(self._throttle.limit)

    async def _cap_body(self, response: Any) -> None:
        """httpx response hook: no completion body is read past `body_bound`. A body
        with a Content-Length is read to that length and no further, so it is checked
        here; one without (chunked) is counted as it is read."""
        mark = _ATTEMPT.get()
        if mark is not None:
            mark.answered = True
        self.pacer.observe(response.headers)
        strict = response.status_code < 400
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and "transfer-encoding" not in response.headers:
            if int(length) <= self._body_bound:
                return
            if strict:
                raise _BodyTooLarge(
                    f"the response body is {int(length)} bytes, over the {self._body_bound} "
                    f"that {self.max_tokens_out} tokens can carry"
                )
        response.stream = _CappedStream(response.stream, self._body_bound, strict)

    def _answered(self) -> None:
        self._connection_failures = 0

    def _connection_failed(self, cause: str) -> None:
        self._connection_failures += 1
        if self._connection_failures >= self.max_connection_failures and self.unreachable is None:
            self.unreachable = f"endpoint unreachable: {self._url()} ({cause})"

    async def complete(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        stop: list[str] | None = None,
        sample_index: int = 0,
        key: str = "",
        should_stop: Callable[[], str | None] | None = None,
        max_tokens: int | None = None,
        extra: dict[str, Any] | None = None,
        call: int | None = None,
        sample: str | None = None,
        progress: CallProgress | None = None,
        responses_input: Any = None,
        native: dict[str, Any] | None = None,
    ) -> Completion:
        """Make one call (or replay it from the cache); see the module docstring.

        `should_stop` is asked before every attempt (the first and each retry); when it
        returns a reason, or the endpoint is unreachable, no further attempt is paid for
        and `CallStopped` is raised.

        For calls made on an agent's behalf (`evalkit.calls.proxy`, `evalkit.running.agents`):
        `max_tokens` asks for fewer output tokens than `max_tokens_out` (the reservation
        is then that much smaller; a larger one is cut to the ceiling); `extra` holds
        further request fields sent as they are (`top_p`, `tool_choice`, ...: part of the
        request and its hash); `call` is the call's ordinal within its sample and `sample`
        the sample's identity (``case/arm``; its index is `sample_index`), both part of the
        cache key, so a request made twice in one sample, or by two arms or cases, gets
        its own answer while an identical re-run of the sample replays each. `progress`,
        when given, is kept up to date with the attempts sent and the cost charged for
        those that failed (`CallProgress`).

        `responses_input` (instead of `prompt` or `messages`) makes it a Responses API
        call (``POST /responses``, `evalkit.calls.responses_api`): its `max_output_tokens` is
        the ceiling as `max_tokens` is for chat, its usage (`input_tokens`,
        `output_tokens`) is settled, its function calls are the answer's tool calls
        (each with its call id); an endpoint answering 404 or 405 has no Responses API,
        and the error says how each framework switches to chat completions.

        `native`: the agent's request in its provider's own shape, keyed by that API
        (``anthropic``: `anthropic_api.native_body`, ``gemini``: `gemini_api.native_body`),
        which `messages` and `tools` translate; to an endpoint whose `api` is that one,
        that request is what is sent (its model and output ceiling set as for chat) and
        its answer read in that shape; to an OpenAI-compatible one, the translation is."""
        body = self.request_body(
            prompt=prompt,
            messages=messages,
            tools=tools,
            temperature=temperature,
            seed=seed,
            stop=stop,
            max_tokens=max_tokens,
            extra=extra,
            responses_input=responses_input,
        )
        counted, body = body, self._native(body, native, key)
        rhash = request_hash(body)
        ckey = _answer_key(rhash, call, sample)
        await self.check_input(counted, key)
        hit = self.replay(rhash, sample_index, key, cache_key=ckey)
        if hit is not None:
            return hit
        prog = progress if progress is not None else CallProgress()
        api = None if body is counted else self.endpoint.api
        state = _Call(body, rhash, ckey, sample_index, key, should_stop, prog, native=api)
        while True:
            state.attempt += 1
            outcome = await self._attempt(state)
            if isinstance(outcome, Completion):
                return outcome
            await self._before_retry(state, outcome)

    def _native(self, body: dict[str, Any], native: dict[str, Any] | None, key: str) -> dict[str, Any]:
        """What is sent for chat `body`: itself to an OpenAI-compatible endpoint; to an
        Anthropic or Gemini one (`Endpoint.api`) the agent's request in that API's shape
        (`native`) under the same model and output ceiling, and `UnitCallError` for a
        call that has none."""
        api = self.endpoint.api
        if api == "openai":
            return body
        own = (native or {}).get(api)
        if own is None:
            raise _call_error(
                f"{key or 'request'}: the generator's endpoint speaks {NATIVE_APIS[api]} (api: {api}); "
                "only an agent's calls in that API reach it",
                0,
            )
        if api == "gemini":
            config = {**own.get("generationConfig", {}), "maxOutputTokens": body["max_tokens"]}
            return {**own, "generationConfig": config}
        return {**own, "model": self.endpoint.model, "max_tokens": body["max_tokens"]}

    async def _attempt(self, call: _Call) -> Completion | _Failed:
        """One attempt of `call`: wait for the endpoint's pace and a slot in flight,
        reserve, send, and settle the answer (a `Completion`), or say why it failed and
        may be retried (`_Failed`); raises when the call is over."""
        await self._pace(call)
        await self._throttle.acquire()
        try:
            r = await self._reserve(call)
            return await self._send_attempt(call, r)
        finally:
            _ATTEMPT.set(None)
            self._throttle.release()

    async def _pace(self, call: _Call) -> None:
        """Wait until the endpoint's learned rate limit (`evalkit.calls.ratelimit`) lets
        the attempt go; when that wait would outlast the key's `rate_limit_budget_s`,
        the call fails and the endpoint is marked `rate_limited_out`."""
        budget_left = self.rate_limit_budget_s - (time.monotonic() - call.started)
        too_long = await self.pacer.acquire(call.pace_tokens, max_wait_s=max(0.0, budget_left))
        if too_long is None:
            return
        self._rate_limited_out(f"its rate limit would make a key wait {too_long:.0f}s")
        raise _call_error(
            f"{call.label}: the endpoint's rate limit would hold this call {too_long:.1f}s, past "
            f"rate_limit_budget_s {self.rate_limit_budget_s:g}; {call.causes}",
            call.attempt - 1,
        )

    def _stopped(self, call: _Call, *, rate_limited: bool = True) -> str | None:
        """Why no further attempt may go out: the run stopped (`should_stop`), the
        endpoint is unreachable, or (with `rate_limited`) it rate-limited a key out."""
        stopped = (call.should_stop() if call.should_stop is not None else None) or self.unreachable
        return stopped or (self.rate_limited_out if rate_limited else None)

    async def _reserve(self, call: _Call) -> Reservation:
        """The attempt's reservation on the ledger (waiting while calls in flight may free
        room), made only while the run goes on; the sample's "sent" hook runs before the
        first. `CallStopped` when the run stopped before or while it waited;
        `BudgetExhausted` when it does not fit (after paid attempts, with their causes)."""
        stopped = self._stopped(call)
        if stopped:
            call.causes.note(f"stopped before attempt {call.attempt}: {stopped}")
            raise _call_error(f"{call.label}: {call.causes}", call.attempt - 1, CallStopped)
        if call.attempt == 1 and call.progress.on_send is not None:  # before anything is reserved: may raise DiskFull
            call.progress.on_send()
        try:
            r = await self.ledger.reserve_waiting(
                self.role, self.endpoint.model, self.price, self.max_tokens_in, call.tokens_out, call.key
            )
            stopped = self._stopped(call, rate_limited=False)
            if stopped:  # the run stopped while this reservation waited: nothing sent
                self.ledger.release_unsent(r, f"stopped: {stopped}")
                call.causes.note(f"stopped before attempt {call.attempt}: {stopped}")
                raise _call_error(f"{call.label}: {call.causes}", call.attempt - 1, CallStopped)
        except BudgetExhausted as exc:
            if call.attempt == 1:
                raise
            # Earlier attempts were paid: the key errored, with their causes.
            call.causes.note(f"attempt {call.attempt} refused: {exc}")
            raise _call_error(f"{call.label}: {call.causes}", call.attempt - 1, BudgetExhausted) from exc
        return r

    async def _send_attempt(self, call: _Call, r: Reservation) -> Completion | _Failed:
        """Send the reserved attempt and settle its answer; a failure is charged what it
        may have been billed (the module docstring) and classified by its kind."""
        t0 = time.perf_counter()
        mark = _Attempt()
        _ATTEMPT.set(mark)
        call.progress.attempts = call.attempt
        try:
            resp = await self._send(call.body, native=call.native)
            latency_ms = (time.perf_counter() - t0) * 1000
            self._answered()
            parsed = self._parse(resp, chat="prompt" not in call.body, responses=call.responses, native=call.native)
        except openai.APIStatusError as exc:
            return self._http_error(call, r, exc)
        except openai.APIConnectionError as exc:  # APITimeoutError is one too
            return self._transport_error(call, r, exc)
        except Exception as exc:
            return self._no_completion(call, r, exc, mark)
        except BaseException:
            # Cancelled or interrupted mid-call: it may have been billed.
            call.progress.cost_usd += self.ledger.settle_failed(r, _worst(r), "interrupted")
            raise
        self._throttle.answered()
        self.pacer.answered()
        return self._settle(
            r,
            call.rhash,
            call.ckey,
            call.sample_index,
            call.label,
            call.attempt,
            call.causes,
            parsed,
            latency_ms,
            prompt_bytes=_text_bytes(call.body),
        )

    def _http_error(self, call: _Call, r: Reservation, exc: openai.APIStatusError) -> _Failed:
        """An attempt the endpoint answered with an error status ($0): a rate limit (the
        throttle and the pacer back off, the key waits), a retryable status, or one
        that fails the call at once (a 4xx; 404 or 405 to a Responses call: no such API)."""
        self._answered()
        status = exc.status_code
        call.progress.cost_usd += self.ledger.settle_failed(r, None, f"HTTP {status}")
        cause = f"HTTP {status}: {_short(exc.message)}"
        headers = exc.response.headers if exc.response is not None else None
        retry_after = _retry_after_s(headers)
        if call.responses and status in (404, 405) and "model_not_found" not in _error_code(exc):
            call.causes.add(call.attempt, no_responses_api(self._url(), status))
            raise _call_error(f"{call.label}: {call.causes} (not retried)", call.attempt) from exc
        if is_rate_limit(exc):
            # A limit holds every worker of the endpoint until Retry-After (the pacer) and
            # halves the requests in flight; a random refusal makes this call alone wait.
            refusal = self.pacer.refused(retry_after, headers)
            if refusal.limit:
                self._throttle.rate_limited()
            return _Failed(cause, retry_after, refusal.wait_s)
        if status not in RETRY_STATUSES and status < 500:
            call.causes.add(call.attempt, cause)
            raise _call_error(f"{call.label}: {call.causes} (not retried)", call.attempt) from exc
        return _Failed(cause, retry_after)

    def _transport_error(self, call: _Call, r: Reservation, exc: openai.APIConnectionError) -> _Failed:
        """An attempt that got no HTTP answer: $0 when it provably never left, else the
        full reservation (`transport_failure`); all but a timeout count towards the
        endpoint being unreachable."""
        reason, cause = transport_failure(exc, self.timeout_s)
        if reason != "timeout":  # a slow answer is an answer coming, not a dead endpoint
            self._connection_failed(cause)
        if reason == "not sent":
            self.ledger.release_unsent(r, cause)
            call.progress.attempts -= 1
            return _Failed(f"not sent ($0): {cause}")
        call.progress.cost_usd += self.ledger.settle_failed(r, _worst(r), reason, cause)
        return _Failed(cause)

    def _no_completion(self, call: _Call, r: Reservation, exc: Exception, mark: _Attempt) -> _Failed:
        """An attempt that raised anything else: before any answer, the HTTP client
        refused to send the request ($0, not retried: the same request fails the same
        way; a run of them stops the run as a dead endpoint does); after one, the answer
        was no completion (charged in full, retried)."""
        unreadable = unreadable_answer(exc)
        if unreadable is not None:  # sent, and the server answered bytes that are no HTTP response
            call.progress.cost_usd += self.ledger.settle_failed(r, _worst(r), "unreadable answer", unreadable)
            self._answered()
            return _Failed(unreadable)
        if not mark.answered and not isinstance(exc, _Malformed):
            # Not a transport error (every failure once a socket is in use reaches us
            # as an APIConnectionError), so the HTTP client refused to build or send it.
            unsent = f"the HTTP client refused to send the request ({type(exc).__name__}: {_short(str(exc))})"
            self.ledger.release_unsent(r, unsent)
            call.progress.attempts -= 1
            self._connection_failed(f"not sent: {unsent}")
            call.causes.add(call.attempt, f"not sent ($0): {unsent}")
            raise _call_error(f"{call.label}: {call.causes} (not retried)", call.attempt) from exc
        call.progress.cost_usd += self.ledger.settle_failed(r, _worst(r), "malformed response")
        if isinstance(exc, (_Malformed, ValueError)):  # the server answered with no completion
            self._answered()
            return _Failed(f"malformed response: {_short(str(exc))}")
        return _Failed(f"malformed response: {type(exc).__name__}: {_short(str(exc))}")  # the client library's

    async def _before_retry(self, call: _Call, failed: _Failed) -> None:
        """Record a failed attempt's cause and wait before the next: a rate limit for as
        long as the key's time budget lasts, any other failure with backoff until
        `max_attempts` failures; raises when the call may not go on."""
        call.causes.add(call.attempt, failed.cause)
        if failed.limited_wait is not None:  # a rate limit: wait it out while the key's budget lasts
            elapsed = time.monotonic() - call.started
            if elapsed + failed.limited_wait > self.rate_limit_budget_s:
                # the endpoint keeps refusing: stop, rather than let every key wait this long
                self._rate_limited_out(f"a key was refused for {elapsed:.0f}s")
                raise _call_error(
                    f"{call.label}: rate limited for {elapsed:.1f}s, and the next wait "
                    f"({failed.limited_wait:.1f}s) would pass rate_limit_budget_s "
                    f"{self.rate_limit_budget_s:g}; {call.causes}",
                    call.attempt,
                )
            await pause(failed.limited_wait, call.should_stop)
            return
        call.failures += 1
        if call.failures >= self.max_attempts:
            raise _call_error(f"{call.label}: failed after {call.attempt} attempts; {call.causes}", call.attempt)
        await pause(backoff_s(call.failures, failed.retry_after, self._rng), call.should_stop)

    def _url(self) -> str:
        """The endpoint's URL, as causes name it."""
        return self.base_url or str(cast(Any, self._openai).base_url)

    def _rate_limited_out(self, why: str) -> None:
        """Mark the endpoint as rate-limiting keys out (the first cause is kept): no
        key waits past its budget again."""
        if self.rate_limited_out is None:
            self.rate_limited_out = (
                f"rate limited: {self._url()} ({why}, past rate_limit_budget_s {self.rate_limit_budget_s:g})"
            )

    def request_body(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        stop: list[str] | None = None,
        max_tokens: int | None = None,
        extra: dict[str, Any] | None = None,
        responses_input: Any = None,
    ) -> dict[str, Any]:
        """The request body `complete` sends for these arguments (and a provider batch
        sends as a line's `body`, `evalkit.running.batch`): the model, `max_tokens` (at most
        `max_tokens_out`, which it is when not given), the `extra` fields not evalkit's
        own, the prompt or messages (sendable text) and the parameters given. With
        `responses_input`, a Responses API body: `input`, and `max_output_tokens` in
        place of `max_tokens` (no `seed` or `stop`, which that API has not)."""
        if sum(x is not None for x in (prompt, messages, responses_input)) != 1:
            raise ValueError("give exactly one of prompt (completions), messages (chat) or responses_input")
        if prompt is not None and tools:
            raise ValueError("tools need chat mode (messages)")
        prompt, messages = sendable(prompt), sendable(messages)
        tokens_out = self.max_tokens_out if max_tokens is None else max(1, min(int(max_tokens), self.max_tokens_out))
        if responses_input is not None:
            if seed is not None or stop:
                raise ValueError("the Responses API takes no seed or stop")
            body = {"model": self.endpoint.model, "max_output_tokens": tokens_out}
            if extra:
                body.update({k: v for k, v in sendable(extra).items() if k not in _OWN_FIELDS})
            body["input"] = sendable(responses_input)
            if tools:
                body["tools"] = tools
            if temperature is not None:
                body["temperature"] = temperature
            return body
        body = {"model": self.endpoint.model, "max_tokens": tokens_out}
        if extra:
            body.update({k: v for k, v in sendable(extra).items() if k not in _OWN_FIELDS})
        if prompt is not None:
            body["prompt"] = prompt
        else:
            body["messages"] = messages
            if tools:
                body["tools"] = tools
        if temperature is not None:
            body["temperature"] = temperature
        if seed is not None:
            body["seed"] = seed
        if stop:
            body["stop"] = list(stop)
        return body

    async def check_input(self, body: dict[str, Any], key: str = "") -> None:
        """`InputTooLong` when the body's input is over `max_tokens_in` (`tokens`): the
        prompt or messages and the tool definitions, plus the UTF-8 size of the JSON of
        every further field (`response_format`'s schema, `logit_bias`, ...: what a
        provider may read as input), a bound for any byte-level tokenizer."""
        responses = "input" in body  # a Responses body: its instructions and input items as messages
        extra = {k: v for k, v in body.items() if k not in _OWN_FIELDS and not (responses and k == "instructions")}
        n_extra = utf8_len(json.dumps(extra, separators=(",", ":"), ensure_ascii=False)) if extra else 0
        n_in, method = await self.counter.measure(
            prompt=body.get("prompt"),
            messages=input_messages(body["input"], body.get("instructions")) if responses else body.get("messages"),
            tools=body.get("tools"),
            limit=self.max_tokens_in - n_extra,
        )
        if n_extra:
            n_in, method = n_in + n_extra, f"{method} + {n_extra} bytes of further fields"
        if n_in > self.max_tokens_in:
            raise InputTooLong(
                f"{key or 'request'}: input is {n_in} tokens ({method}), over max_tokens_in {self.max_tokens_in}: "
                "raise max_tokens_in in config.json (or the arm's), within the model's context, or shorten the prompt"
            )

    def replay(
        self,
        rhash: str,
        sample_index: int,
        key: str = "",
        *,
        cache_key: str | None = None,
        price: Price | None = None,
    ) -> Completion | None:
        """The cached answer to request `rhash` for `sample_index` ($0, its cost recorded
        as avoided), or None when there is none (`ReplayMiss` when replay-only).
        `cache_key` (default `rhash`) is what the answer is stored under: an agent's call
        adds its ordinal within the sample. A generator's avoided cost is the answer's
        tokens at `price` (default this client's: what this call would have paid), not
        what the call that stored it paid: two arms sending one request at different
        prices (twins, `runner.seed_names`) each avoid their own cost. The judge's (one
        price a pass) is what the answer cost when first paid, so a batch grade and a
        re-grade from the cache give one list price (formats.md, "One cost")."""
        if self.cache is None:
            return None
        hit = self.cache.get(self.endpoint.model, cache_key or rhash, sample_index, endpoint=self.cache_endpoint)
        if hit is not None:
            u = hit.get("usage") or {}
            n_in, n_out = (u.get("prompt_tokens"), u.get("completion_tokens")) if isinstance(u, dict) else (None, None)
            if (self.role == "generator" or price is not None) and isinstance(n_in, int) and isinstance(n_out, int):
                avoided = (price or self.price).cost(n_in, n_out)
            else:  # the judge's, or stored without usage (every put stores it): what the storing call paid
                avoided = float(hit.get("cost_usd", 0.0))
            self.ledger.record_avoided(avoided, key)
            return Completion(
                text=hit.get("text", ""),
                tool_calls=tuple(hit.get("tool_calls") or ()),
                finish_reason=hit.get("finish_reason"),
                usage=Usage(int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0))),
                # the latency first measured (stored with the answer), marked by `cached`
                latency_ms=float(hit.get("latency_ms") or 0.0),
                cost_usd=0.0,
                model=hit.get("model", self.endpoint.model),
                system_fingerprint=hit.get("system_fingerprint"),
                request_hash=rhash,
                cached=True,
                cost_avoided_usd=avoided,
                attempts=0,
            )
        if self.replay_only:
            where = f" from {self.cache_endpoint}" if self.cache_endpoint else ""
            raise ReplayMiss(
                f"{key or 'request'}: no cached response{where} (request {rhash[:12]}, "
                f"sample {sample_index}) and --replay-only is set; answers are cached per endpoint"
                + ("" if self.cache_endpoint else ": give the base URL of the one that answered")
            )
        return None

    def parse_body(self, body: Any, *, chat: bool) -> tuple[Any, ...]:
        """(text, tool calls, finish reason, raw usage, fingerprint, model) from a
        response body as JSON (a batch result line's `response.body`), checked as every
        online answer is (the caller bounds its size: `body_bound`); `MalformedResponse`
        for any shape that is not a completion."""
        if not isinstance(body, dict):
            raise _Malformed(f"the response body is a {type(body).__name__}, not an object")
        return self._parse(_Fields(body), chat=chat)

    def settle_answer(
        self,
        r: Any,
        rhash: str,
        sample_index: int,
        key: str,
        parsed: tuple[Any, ...],
        latency_ms: float,
        settle: Callable[[Usage, str | None], float],
        attempts: int = 1,
    ) -> Completion:
        """Settle an answer that did not come through `complete` (a batch line) as
        `complete` settles its own: the cache first, then `settle(usage, untrusted)` on
        the ledger; `r` holds the line's ceilings. Raises as `complete` does."""
        label = key or "request"
        return self._settle(
            r, rhash, rhash, sample_index, label, attempts, _Causes(), parsed, latency_ms, settle=settle
        )

    def _settle(
        self,
        r: Reservation,
        rhash: str,
        ckey: str,
        sample_index: int,
        label: str,
        attempt: int,
        causes: _Causes,
        parsed: tuple[Any, ...],
        latency_ms: float,
        settle: Callable[[Usage, str | None], float] | None = None,
        prompt_bytes: int = 0,
    ) -> Completion:
        """Settle a finished call: store the answer in the cache first (committed before
        it is used, when the cache commits each put), then settle it on the ledger (or
        with `settle`, a batch line's charge). Raises `CeilingBreached`, or
        `UnitCallError` for untrusted usage (not retried: a server whose accounting is
        wrong would be paid at the worst case again); counts below what the request's
        text (`prompt_bytes`) and the answer's could carry are untrusted too, settled at
        the reservation with the answer kept. `parsed`: what `_parse` read."""
        text, tool_calls, finish, usage, fingerprint, model = parsed
        untrusted: str | None
        if isinstance(usage, _Unusable):
            settled, untrusted = _worst(r), unusable_usage(usage.raw)
        else:
            # No usage reported: charge the worst case rather than guess low.
            settled, untrusted = reported_usage(r, *(usage if usage is not None else (r.tokens_in, r.tokens_out)))
        answer_bytes = _text_bytes([text, tool_calls])
        low = implausible_usage(settled, prompt_bytes, answer_bytes) if untrusted is None else None
        if low is not None:  # the reservation stands; the answer itself is kept
            settled = Usage(max(settled.prompt_tokens, r.tokens_in), max(settled.completion_tokens, r.tokens_out))
        within = settled.prompt_tokens <= r.tokens_in and settled.completion_tokens <= r.tokens_out
        if self.cache is not None and untrusted is None and low is None and within:
            self._cache_answer(r, ckey, sample_index, parsed, settled, latency_ms)
        try:
            why = untrusted or low
            cost = self.ledger.settle(r, settled, untrusted=why) if settle is None else settle(settled, why)
        except CeilingBreached as exc:
            exc.attempts = attempt  # type: ignore[attr-defined]
            raise
        if untrusted is not None:
            causes.add(attempt, f"malformed response: {untrusted}")
            raise _call_error(f"{label}: {causes} (not retried)", attempt)
        return Completion(
            text=text,
            tool_calls=tool_calls,
            finish_reason=finish,
            usage=settled,
            latency_ms=latency_ms,
            cost_usd=cost,
            model=model,
            system_fingerprint=fingerprint,
            request_hash=rhash,
            cached=False,
            cost_avoided_usd=0.0,
            attempts=attempt,
        )

    def _cache_answer(
        self, r: Reservation, ckey: str, sample_index: int, parsed: tuple[Any, ...], settled: Usage, latency_ms: float
    ) -> None:
        """Store a trusted answer in the cache under `ckey` for `sample_index`, with its
        settled usage, its measured latency (a replay keeps it) and what it cost at the
        reservation's price."""
        assert self.cache is not None
        text, tool_calls, finish, _, fingerprint, model = parsed
        self.cache.put(
            self.endpoint.model,
            ckey,
            sample_index,
            {
                "text": text,
                "tool_calls": list(tool_calls),
                "finish_reason": finish,
                "usage": {"prompt_tokens": settled.prompt_tokens, "completion_tokens": settled.completion_tokens},
                "model": model,
                "system_fingerprint": fingerprint,
                "latency_ms": latency_ms,
            },
            r.price.cost(settled.prompt_tokens, settled.completion_tokens),
            endpoint=self.cache_endpoint,
        )

    async def _send(self, body: dict[str, Any], native: str | None = None) -> Any:
        """POST `body` as it is through the official client's own `post` (its headers,
        auth, timeouts, transport and error types) and read the answer as JSON.

        Not `completions.create`: that walks the body through the SDK's typed transform
        and builds a pydantic object of the answer, 0.2 ms of CPU a call (measured: a
        proxied agent's call took 0.25 ms less end to end, benchmarks/bench_proxy.py),
        while `_parse_fields` checks every field itself anyway (the answer is untrusted).
        `body` is already the wire body (`request_body`); the fields an agent sent go as
        they are, whatever this SDK version names."""
        assert self._openai is not None, "a replay-only client without a base URL sends nothing"
        if native is not None:  # the provider's own API: its key header (and version), no bearer token
            headers = (
                {"x-goog-api-key": self._openai.api_key}
                if native == "gemini"
                else {"x-api-key": self._openai.api_key, "anthropic-version": ANTHROPIC_VERSION}
            )
            path = f"/models/{self.endpoint.model}:generateContent" if native == "gemini" else "/messages"
            options: Any = {"headers": {**headers, "Authorization": openai.omit}}
            raw = await self._openai.post(path, cast_to=bytes, body=body, options=options)
        else:
            path = "/responses" if "input" in body else "/chat/completions" if "messages" in body else "/completions"
            raw = await self._openai.post(path, cast_to=bytes, body=body)
        try:
            return _fields(json.loads(raw))
        except ValueError as exc:  # not JSON, or not UTF-8
            raise _Malformed(f"the response body is not JSON ({_short(str(exc), 120)})") from None

    def _parse(self, resp: Any, *, chat: bool, responses: bool = False, native: str | None = None) -> tuple[Any, ...]:
        """(text, tool calls, finish reason, raw usage, fingerprint, model) from a
        response body; `_Malformed` for any shape that is not a completion, or one whose
        text and tool calls pass `text_bound`. The openai client builds its objects
        without validating them, so every field is checked here: model output is
        untrusted data. Raw usage: None (not reported), a (prompt, completion) pair as
        sent (the ledger decides whether to trust it), or `_Unusable`."""
        try:
            if native is not None:
                return self._parse_native(resp, native)
            if responses:
                return self._parse_responses(resp)
            return self._parse_fields(resp, chat=chat)
        except _Malformed:
            raise
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            raise _Malformed(f"unexpected response shape ({type(exc).__name__}: {_short(str(exc), 120)})") from exc

    def _parse_fields(self, resp: Any, *, chat: bool) -> tuple[Any, ...]:
        choices = None if isinstance(resp, (str, bytes)) else getattr(resp, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise _Malformed("no choices in the response body")
        choice = choices[0]
        if isinstance(choice, (str, bytes, int, float, list)) or choice is None:
            raise _Malformed(f"the first choice is a {_kind(choice)}, not an object")
        tool_calls: tuple[dict[str, Any], ...] = ()
        size = 0
        if chat:
            msg = getattr(choice, "message", None)
            if msg is None or isinstance(msg, (str, bytes, int, float, list, dict)):
                raise _Malformed("no message object in the first choice")
            text = msg.content
            if text is None:
                text = ""
            raw_calls = msg.tool_calls
            if raw_calls is not None and not isinstance(raw_calls, list):
                raise _Malformed(f"tool_calls is a {_kind(raw_calls)}, not a list")
            calls = [_tool_call_dict(tc) for tc in (raw_calls or ())]
            tool_calls = tuple(d for d, _ in calls)
            size = sum(n for _, n in calls)
        else:
            text = getattr(choice, "text", None)
            if text is None:
                raise _Malformed("no text in the first choice")
        if not isinstance(text, str):
            raise _Malformed(f"the model's text is a {_kind(text)}, not a string")
        if size + len(text) * 4 > self._text_bound:  # 4: the most UTF-8 bytes of one character
            size += _utf8_size(text)
            if size > self._text_bound:
                raise _Malformed(
                    f"implausible answer: {size} bytes of text and tool calls, more than "
                    f"{self.max_tokens_out} tokens can carry (bound {self._text_bound} bytes)"
                )
        finish = getattr(choice, "finish_reason", None)
        if finish is not None and not isinstance(finish, str):
            raise _Malformed(f"finish_reason is a {_kind(finish)}, not a string")
        u = getattr(resp, "usage", None)
        usage: Any = None
        if isinstance(u, dict):
            usage = (u.get("prompt_tokens"), u.get("completion_tokens"))
        elif isinstance(u, (str, bytes, int, float, list, tuple)):
            usage = _Unusable(_raw(u))  # not an object of token counts
        elif u is not None:  # the counts as the data sent (a count that is an object named as one)
            usage = (_raw(getattr(u, "prompt_tokens", None)), _raw(getattr(u, "completion_tokens", None)))
        fingerprint = getattr(resp, "system_fingerprint", None)
        model = getattr(resp, "model", None)
        return (
            text,
            tool_calls,
            finish,
            usage,
            fingerprint if isinstance(fingerprint, str) else None,
            model if isinstance(model, str) and model else self.endpoint.model,
        )

    def _parse_native(self, resp: Any, api: str) -> tuple[Any, ...]:
        """`_parse_fields` for an answer in a provider's own shape: an Anthropic message
        (`anthropic_api.read_message`) or a Gemini response (`gemini_api.read_response`),
        under the same size bound."""
        read = read_response if api == "gemini" else read_message
        text, calls, finish, usage, model = read(_raw(resp))
        size = _utf8_size(text) + sum(len(json.dumps(c, default=str)) for c in calls)
        if size > self._text_bound:
            raise _Malformed(
                f"implausible answer: {size} bytes of text and tool calls, more than "
                f"{self.max_tokens_out} tokens can carry (bound {self._text_bound} bytes)"
            )
        if isinstance(usage, tuple):
            usage = tuple(_raw(v) for v in usage)
        elif usage is not None:
            usage = _Unusable(usage)
        return text, calls, finish, usage, None, model or self.endpoint.model

    def _parse_responses(self, resp: Any) -> tuple[Any, ...]:
        """`_parse_fields` for a Responses API body: the text of its assistant message
        items (``output_text`` and ``refusal`` parts), its ``function_call`` items as
        tool calls (the call id as their id), ``reasoning`` items skipped (their tokens
        are in the output count); any other item is no answer the proxy can pass on.
        Status ``incomplete`` is finish reason ``length`` (``content_filter`` when it
        says so); usage is (`input_tokens`, `output_tokens`)."""
        output = None if isinstance(resp, (str, bytes)) else getattr(resp, "output", None)
        if not isinstance(output, list):
            raise _Malformed("no output list in the response body")
        status = getattr(resp, "status", None)
        if status not in ("completed", "incomplete"):
            err = getattr(resp, "error", None)
            why = f": {_short(str(_raw(err)), 160)}" if err is not None else ""
            raise _Malformed(f"the response's status is {status!r}, not completed{why}")
        texts, calls, size = _responses_output(output)
        text = "".join(texts)
        size += _utf8_size(text)
        if size > self._text_bound:
            raise _Malformed(
                f"implausible answer: {size} bytes of text and tool calls, more than "
                f"{self.max_tokens_out} tokens can carry (bound {self._text_bound} bytes)"
            )
        finish = "tool_calls" if calls else "stop"
        if status == "incomplete":
            details = getattr(resp, "incomplete_details", None)
            reason = getattr(details, "reason", None) if isinstance(details, _Fields) else None
            finish = "content_filter" if reason == "content_filter" else "length"
        u = getattr(resp, "usage", None)
        usage: Any = None
        if isinstance(u, _Fields):
            usage = (_raw(u.input_tokens), _raw(u.output_tokens))
        elif u is not None:
            usage = _Unusable(_raw(u))
        model = getattr(resp, "model", None)
        return (
            text,
            tuple(calls),
            finish,
            usage,
            None,
            model if isinstance(model, str) and model else self.endpoint.model,
        )

    async def aclose(self) -> None:
        if self._openai is not None:
            await self._openai.close()
        await self.counter.aclose()


def _responses_output(output: list[Any]) -> tuple[list[str], list[dict[str, Any]], int]:
    """A Responses body's `output` items read (`ModelClient._parse_responses`): the
    texts of its message items, its function calls as tool calls, and the UTF-8 size of
    the calls; `_Malformed` for an item that is no answer the proxy can pass on."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    size = 0
    for i, item in enumerate(output):
        kind = getattr(item, "type", None) if isinstance(item, _Fields) else None
        if kind == "message":
            content = item.content
            if not isinstance(content, list):
                raise _Malformed(f"output[{i}].content is a {_kind(content)}, not a list")
            for part in content:
                t = getattr(part, "text", None) if isinstance(part, _Fields) else None
                if t is None and isinstance(part, _Fields):
                    t = part.refusal
                if not isinstance(t, str):
                    raise _Malformed(f"output[{i}] holds a content part with no text")
                texts.append(t)
        elif kind == "function_call":
            name, raw, call_id = item.name, item.arguments, item.call_id
            if not isinstance(name, str) or not isinstance(raw, str):
                raise _Malformed(f"output[{i}] is a function call without a name and arguments string")
            try:
                args: Any = loads_bounded(raw, "a function call's arguments")
            except (json.JSONDecodeError, InputError):  # not JSON, or nested past the depth guard
                args = raw  # kept as the model wrote it; graders decide
            call: dict[str, Any] = {"name": name, "arguments": args}
            if isinstance(call_id, str) and call_id:
                call["id"] = call_id
            calls.append(call)
            size += _utf8_size(name) + _utf8_size(raw)
        elif kind != "reasoning":
            raise _Malformed(f"output[{i}] is an item of type {kind!r}, which the proxy does not pass on")
    return texts, calls, size


async def pause(seconds: float, should_stop: Callable[[], str | None] | None) -> None:
    """The backoff before a retry, cut short once `should_stop` reports (asked at once
    and every 50 ms): a call that failed because its server died (a watched server,
    `endpoints`) stops promptly instead of waiting out its backoff."""
    if should_stop is None:
        await asyncio.sleep(seconds)
        return
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while not should_stop():
        left = end - loop.time()
        if left <= 0:
            return
        await asyncio.sleep(min(left, 0.05))


class _Fields:
    """A JSON object read by attribute, as `_parse_fields` reads the openai client's
    response objects (a missing key reads None; nested objects and lists of them
    likewise; any other value as it is). The openai client's own `construct` gives the
    same view at about ten times the cost, which a 100,000-line batch pays in full."""

    __slots__ = ("_d",)

    def __init__(self, d: dict[str, Any]) -> None:
        self._d = d

    def __getattr__(self, name: str) -> Any:
        return _fields(self._d.get(name))


def _raw(v: Any) -> Any:
    """A response value as plain JSON data again (`_Fields` unwrapped), to be stored."""
    if isinstance(v, _Fields):
        return v._d
    if isinstance(v, list):
        return [_raw(x) for x in v]
    return v


def _kind(v: Any) -> str:
    """The JSON type name of a response value, as a cause names it (`dict` for an object)."""
    return "dict" if isinstance(v, _Fields) else type(v).__name__


def _fields(v: Any) -> Any:
    if isinstance(v, dict):
        return _Fields(v)
    if isinstance(v, list):
        return [_fields(x) for x in v]
    return v


@dataclass(frozen=True)
class _Unusable:
    """Reported usage that is not an object of token counts (a string, a number, a list)."""

    raw: Any


def _call_error(message: str, attempts: int, cls: type[Exception] = UnitCallError) -> Exception:
    exc = cls(message)
    exc.attempts = attempts  # type: ignore[attr-defined]
    return exc


def _worst(r: Reservation) -> Usage:
    return Usage(r.tokens_in, r.tokens_out)


def _short(s: str, n: int = 200) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."
