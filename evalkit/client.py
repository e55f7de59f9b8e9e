"""One model call under the ledger: count, reserve, call, retry, settle, cache.

`ModelClient.complete` is the only place evalkit calls a model (generator or judge). It
goes through the official async `openai` client with the client's own retries off
(`max_retries=0`), because every attempt is a call that may be billed and must be on
the ledger: evalkit retries 429, 5xx, timeouts, dropped connections and malformed bodies
itself, with exponential backoff, full jitter and the server's Retry-After, up to
`max_attempts`, and after the last attempt raises `UnitCallError` with the cause. It
never invents an output.

Accounting per attempt: reserve the worst case (`max_tokens_in` in, `max_tokens_out`
out, at the model's price) before sending; settle with the usage the response reports
(`CeilingBreached` when it reports more than the reservation). An HTTP error status is
settled at $0 (the endpoint refused before generating); a dropped connection, a timeout
or a malformed body is settled at the full reservation, because the call may have been
billed and evalkit cannot know: the ledger never underestimates. Reported usage that is
not a non-negative integer is untrusted: the attempt is settled at the full reservation
(`Ledger.settle_reported`) and the call fails as a malformed response, not retried. A
body whose text is not a string, or any other shape that is not a completion, is a
malformed response too. `should_stop` is asked before every attempt and during the
backoff before a retry, so a run that has stopped (ceiling breached, budget exhausted,
its watched server died) sends no further paid retry and waits for none. A client with
no base URL is refused (`InputError`) unless replay-only: evalkit never lets the openai
client pick its default host.
"""
from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import math
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlparse

import aiohttp
import openai

from .cache import ResponseCache
from .errors import BudgetExhausted, CeilingBreached, InputError, InputTooLong, ReplayMiss, UnitCallError
from .ledger import Ledger
from .records import Endpoint, Price, Usage
from .tokens import TokenCounter

RETRY_STATUSES = frozenset({408, 409, 429})  # plus every 5xx
BACKOFF_BASE_S = 0.25
BACKOFF_MAX_S = 20.0
RETRY_AFTER_MAX_S = 120.0


@dataclass(frozen=True)
class Completion:
    """One finished call (or a cache replay of one)."""

    text: str
    tool_calls: tuple[dict, ...]
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


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(body: dict[str, Any]) -> str:
    """sha256 of the canonical request body (model, prompt or messages, parameters)."""
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


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


def backoff_s(attempt: int, retry_after: float | None, rng: random.Random) -> float:
    """Full-jitter exponential backoff after failed attempt `attempt` (1-based); never
    shorter than the server's Retry-After."""
    jitter = rng.uniform(0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1)))
    return max(retry_after or 0.0, jitter) if retry_after is not None else jitter


def _tool_call_dict(tc: Any) -> dict:
    fn = getattr(tc, "function", None)
    name = getattr(fn, "name", None)
    if not isinstance(name, str):
        raise _Malformed("a tool call has no function name")
    raw = getattr(fn, "arguments", None)
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        args = raw  # kept as the model wrote it; graders decide
    d = {"name": name, "arguments": args}
    tc_id = getattr(tc, "id", None)
    if isinstance(tc_id, str) and tc_id:
        d["id"] = tc_id
    return d


def check_endpoint(endpoint: Endpoint, base_url: str | None = None, replay_only: bool = False) -> str:
    """The API key for `endpoint`, read from the environment variable its config names.
    A loopback server (or a replay-only run) takes any key; elsewhere a missing key is an
    `InputError`."""
    url = base_url or endpoint.base_url
    api_key = os.environ.get(endpoint.api_key_env)
    if api_key:
        return api_key
    if (url and _is_loopback(url)) or replay_only:
        return "evalkit-loopback"  # local servers take any key
    raise InputError(f"environment variable {endpoint.api_key_env} (the API key for "
                     f"{endpoint.model!r}) is not set")


def _dropped_connection(exc: BaseException) -> BaseException | None:
    """The aiohttp error behind `exc` when the connection failed without timing out.

    openai's aiohttp transport maps every `aiohttp.ClientConnectionError` (a dropped
    connection, a refused one) to `httpx.ConnectTimeout`, so the SDK raises
    `APITimeoutError` for both; the cause chain still tells them apart."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, aiohttp.ClientConnectionError) and not isinstance(e, TimeoutError):
            return e
        e = e.__cause__ or e.__context__
    return None


def _http_client(timeout_s: float):
    """The openai client's own aiohttp transport (`openai.DefaultAioHttpClient`): at 32
    concurrent calls it spends about a third less CPU per call than the default httpx
    pool, which walks every pooled connection on each request. `EVALKIT_HTTP=httpx`
    keeps the default (None)."""
    if os.environ.get("EVALKIT_HTTP", "").lower() == "httpx":
        return None
    return openai.DefaultAioHttpClient(timeout=timeout_s)


class CallStopped(UnitCallError):
    """The run stopped (ceiling breached, budget exhausted, its watched server died)
    before this call's next attempt: no further paid attempt went out."""


class _Malformed(Exception):
    """The endpoint answered 200 with a body that is not a completion."""


class ModelClient:
    """Calls one model on one OpenAI-compatible endpoint under a ledger; see the module
    docstring. Build one per run (it holds the HTTP connection pool) and `aclose` it."""

    def __init__(self, endpoint: Endpoint, price: Price, ledger: Ledger, *, role: str = "generator",
                 max_tokens_in: int, max_tokens_out: int, cache: ResponseCache | None = None,
                 replay_only: bool = False, max_attempts: int = 4, timeout_s: float = 60.0,
                 base_url: str | None = None) -> None:
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
        self.replay_only = replay_only
        self.max_attempts = int(max_attempts)
        self.timeout_s = float(timeout_s)
        self.base_url = base_url or endpoint.base_url
        if not self.base_url and not replay_only:
            # Never the openai client's default host (api.openai.com): endpoints.resolve_base_url.
            raise InputError(f"no base URL for the {role} model {endpoint.model!r}; evalkit never falls back to "
                             "the openai client's default host")
        api_key = check_endpoint(endpoint, self.base_url, replay_only)
        # A replay-only client without a URL never sends: it gets no openai client at all.
        self._openai = openai.AsyncOpenAI(api_key=api_key, base_url=self.base_url, max_retries=0,
                                          timeout=self.timeout_s, http_client=_http_client(self.timeout_s)) \
            if self.base_url else None
        self.counter = TokenCounter(endpoint.model, self.base_url, api_key=api_key)
        self._rng = random.Random()

    async def complete(self, *, prompt: str | None = None, messages: list[dict] | None = None,
                       tools: list[dict] | None = None, temperature: float | None = None,
                       seed: int | None = None, stop: list[str] | None = None,
                       sample_index: int = 0, key: str = "",
                       should_stop: Callable[[], str | None] | None = None) -> Completion:
        """Make one call (or replay it from the cache); see the module docstring.

        `should_stop` is asked before every attempt (the first and each retry); when it
        returns a reason, no further attempt is paid for and `CallStopped` is raised."""
        if (prompt is None) == (messages is None):
            raise ValueError("give exactly one of prompt (completions) or messages (chat)")
        if prompt is not None and tools:
            raise ValueError("tools need chat mode (messages)")
        body: dict[str, Any] = {"model": self.endpoint.model, "max_tokens": self.max_tokens_out}
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
        rhash = request_hash(body)

        n_in, method = await self.counter.measure(prompt=prompt, messages=messages, tools=tools,
                                                  limit=self.max_tokens_in)
        if n_in > self.max_tokens_in:
            raise InputTooLong(f"{key or 'request'}: input is {n_in} tokens ({method}), "
                               f"over max_tokens_in {self.max_tokens_in}")

        if self.cache is not None:
            hit = self.cache.get(self.endpoint.model, rhash, sample_index)
            if hit is not None:
                avoided = float(hit.get("cost_usd", 0.0))
                self.ledger.record_avoided(avoided, key)
                u = hit.get("usage") or {}
                return Completion(text=hit.get("text", ""), tool_calls=tuple(hit.get("tool_calls") or ()),
                                  finish_reason=hit.get("finish_reason"),
                                  usage=Usage(int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0))),
                                  latency_ms=0.0, cost_usd=0.0, model=hit.get("model", self.endpoint.model),
                                  system_fingerprint=hit.get("system_fingerprint"), request_hash=rhash,
                                  cached=True, cost_avoided_usd=avoided, attempts=0)
            if self.replay_only:
                raise ReplayMiss(f"{key or 'request'}: no cached response (request {rhash[:12]}, "
                                 f"sample {sample_index}) and --replay-only is set")

        causes: list[str] = []
        for attempt in range(1, self.max_attempts + 1):
            stopped = should_stop() if should_stop is not None else None
            if stopped:
                causes.append(f"stopped before attempt {attempt}: {stopped}")
                exc = CallStopped(f"{key or 'request'}: " + "; ".join(causes))
                exc.attempts = attempt - 1  # type: ignore[attr-defined]
                raise exc
            try:
                r = self.ledger.reserve(self.role, self.endpoint.model, self.price, self.max_tokens_in,
                                        self.max_tokens_out, key)
            except BudgetExhausted as exc:
                if attempt == 1:
                    raise
                # Earlier attempts were paid: the key errored, with their causes.
                causes.append(f"attempt {attempt} refused: {exc}")
                refused = BudgetExhausted(f"{key or 'request'}: " + "; ".join(causes))
                refused.attempts = attempt - 1  # type: ignore[attr-defined]
                raise refused from exc
            t0 = time.perf_counter()
            retry_after: float | None = None
            try:
                resp = await self._send(body)
                latency_ms = (time.perf_counter() - t0) * 1000
                text, tool_calls, finish, usage, fingerprint, model = self._parse(resp, chat=prompt is None)
            except openai.APIStatusError as exc:
                status = exc.status_code
                self.ledger.settle_failed(r, None, f"HTTP {status}")
                cause = f"HTTP {status}: {_short(exc.message)}"
                if status not in RETRY_STATUSES and status < 500:
                    raise _call_error(f"{key or 'request'}: {cause} (not retried)", attempt) from exc
                retry_after = _retry_after_s(exc.response.headers if exc.response is not None else None)
            except openai.APIConnectionError as exc:  # APITimeoutError is one too
                dropped = _dropped_connection(exc)
                if isinstance(exc, openai.APITimeoutError) and dropped is None:
                    self.ledger.settle_failed(r, _worst(r), "timeout")
                    cause = f"timeout after {self.timeout_s:g}s"
                else:
                    self.ledger.settle_failed(r, _worst(r), "connection error")
                    cause = f"connection error: {_short(str(dropped or exc.__cause__ or exc))}"
            except (_Malformed, ValueError) as exc:
                self.ledger.settle_failed(r, _worst(r), "malformed response")
                cause = f"malformed response: {_short(str(exc))}"
            except Exception as exc:  # anything else the client library raised on this body
                self.ledger.settle_failed(r, _worst(r), "malformed response")
                cause = f"malformed response: {type(exc).__name__}: {_short(str(exc))}"
            except BaseException:
                # Cancelled or interrupted mid-call: it may have been billed.
                self.ledger.settle_failed(r, _worst(r), "interrupted")
                raise
            else:
                if usage is None:
                    # No usage reported: charge the worst case rather than guess low.
                    usage = (r.tokens_in, r.tokens_out)
                # Raises CeilingBreached; a count that is not a non-negative integer is
                # settled at the reservation (never lower) and fails the sample below.
                try:
                    cost, usage, untrusted = self.ledger.settle_reported(r, *usage)
                except CeilingBreached as exc:
                    exc.attempts = attempt  # type: ignore[attr-defined]
                    raise
                if untrusted is not None:
                    cause = f"malformed response: {untrusted}"
                    causes.append(f"attempt {attempt}: {cause}")
                    # Not retried: a server whose accounting is wrong would be paid at the
                    # worst case again on every attempt.
                    raise _call_error(f"{key or 'request'}: " + "; ".join(causes) + " (not retried)", attempt)
                if self.cache is not None:
                    self.cache.put(self.endpoint.model, rhash, sample_index,
                                   {"text": text, "tool_calls": list(tool_calls), "finish_reason": finish,
                                    "usage": {"prompt_tokens": usage.prompt_tokens,
                                              "completion_tokens": usage.completion_tokens},
                                    "model": model, "system_fingerprint": fingerprint}, cost)
                return Completion(text=text, tool_calls=tool_calls, finish_reason=finish, usage=usage,
                                  latency_ms=latency_ms, cost_usd=cost, model=model,
                                  system_fingerprint=fingerprint, request_hash=rhash, cached=False,
                                  cost_avoided_usd=0.0, attempts=attempt)
            causes.append(f"attempt {attempt}: {cause}")
            if attempt < self.max_attempts:
                await _pause(backoff_s(attempt, retry_after, self._rng), should_stop)
        raise _call_error(f"{key or 'request'}: failed after {self.max_attempts} attempts; "
                          + "; ".join(causes), self.max_attempts)

    async def _send(self, body: dict[str, Any]) -> Any:
        assert self._openai is not None, "a replay-only client without a base URL sends nothing"
        if "messages" in body:
            return await self._openai.chat.completions.create(**body)
        return await self._openai.completions.create(**body)

    def _parse(self, resp: Any, *, chat: bool):
        """(text, tool calls, finish reason, raw usage counts or None, fingerprint, model)
        from a response body; `_Malformed` for any shape that is not a completion. The
        openai client builds its objects without validating them, so every field is
        checked here: model output is untrusted data."""
        try:
            return self._parse_fields(resp, chat=chat)
        except _Malformed:
            raise
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            raise _Malformed(f"unexpected response shape ({type(exc).__name__}: {_short(str(exc), 120)})") from exc

    def _parse_fields(self, resp: Any, *, chat: bool):
        choices = None if isinstance(resp, (str, bytes)) else getattr(resp, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise _Malformed("no choices in the response body")
        choice = choices[0]
        if isinstance(choice, (str, bytes, int, float, list)) or choice is None:
            raise _Malformed(f"the first choice is a {type(choice).__name__}, not an object")
        tool_calls: tuple[dict, ...] = ()
        if chat:
            msg = getattr(choice, "message", None)
            if msg is None or isinstance(msg, (str, bytes, int, float, list, dict)):
                raise _Malformed("no message object in the first choice")
            text = msg.content
            if text is None:
                text = ""
            raw_calls = msg.tool_calls
            if raw_calls is not None and not isinstance(raw_calls, list):
                raise _Malformed(f"tool_calls is a {type(raw_calls).__name__}, not a list")
            tool_calls = tuple(_tool_call_dict(tc) for tc in (raw_calls or ()))
        else:
            text = getattr(choice, "text", None)
            if text is None:
                raise _Malformed("no text in the first choice")
        if not isinstance(text, str):
            raise _Malformed(f"the model's text is a {type(text).__name__}, not a string")
        finish = getattr(choice, "finish_reason", None)
        if finish is not None and not isinstance(finish, str):
            raise _Malformed(f"finish_reason is a {type(finish).__name__}, not a string")
        u = getattr(resp, "usage", None)
        usage = None
        if u is not None:
            pt, ct = getattr(u, "prompt_tokens", None), getattr(u, "completion_tokens", None)
            if pt is not None and ct is not None:
                usage = (pt, ct)  # raw: the ledger decides whether to trust them
        fingerprint = getattr(resp, "system_fingerprint", None)
        model = getattr(resp, "model", None)
        return (text, tool_calls, finish, usage, fingerprint if isinstance(fingerprint, str) else None,
                model if isinstance(model, str) and model else self.endpoint.model)

    async def aclose(self) -> None:
        if self._openai is not None:
            await self._openai.close()
        await self.counter.aclose()


async def _pause(seconds: float, should_stop: Callable[[], str | None] | None) -> None:
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


def _call_error(message: str, attempts: int) -> UnitCallError:
    exc = UnitCallError(message)
    exc.attempts = attempts  # type: ignore[attr-defined]
    return exc


def _worst(r) -> Usage:
    return Usage(r.tokens_in, r.tokens_out)


def _short(s: str, n: int = 200) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."
