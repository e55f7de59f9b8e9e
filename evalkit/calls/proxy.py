"""The metering proxy: an OpenAI-compatible server on 127.0.0.1 for the user's own agent
(on an address a Ray cluster's nodes reach when they are past this machine:
`evalkit.running.executors`; every request still needs a sample's token).

A command or python unit (`evalkit.running.agents`) talks to this server instead of its model
endpoint. Started once per run, it serves each sample under its own token, in the URL
(``http://127.0.0.1:PORT/s/<token>/v1``, what `OPENAI_BASE_URL` is set to) or as the API
key (``Authorization: Bearer <token>`` on ``/v1/...``), and hands every call to that
sample's `evalkit.calls.session.SampleSession`, which meters it through the run's one
`ModelClient` (ledger reserve and settle, cache, retries: `evalkit.calls.client`) and writes
it to the sample's trajectory. Nothing reaches the endpoint that the ledger did not
reserve first.

Endpoints (under either prefix):

* ``POST .../v1/chat/completions`` and ``POST .../v1/completions``: the suite's generator
  model answers, whatever model the request names (the ledger prices that one; the name
  asked for is recorded). `max_tokens` (or `max_completion_tokens`) above the suite's
  `max_tokens_out`, or missing, is set to it; a smaller one is kept, and reserved as
  such. `tools` (function tools) and the fields in `FORWARDED_FIELDS` (`tool_choice`,
  `top_p`, `response_format`, ...) go through as sent; any other field, a non-text
  content part, a built-in tool, `n` (and `best_of`) other than 1 and logprobs are
  refused: one answer a call, and nothing billed that the reservation does not cover.
  ``"stream": true`` is answered as server-sent events (a role chunk, the content, the
  tool calls, the finish reason, a usage chunk when ``stream_options.include_usage``,
  ``[DONE]``) built from one non-streamed upstream call: the upstream usage is then the
  one the ledger settles, and the answer is read under the client's size bound before
  the agent sees any of it.
* ``POST .../v1/responses``: the same call in the OpenAI Responses API's shapes
  (`evalkit.calls.responses_api`), sent upstream as a Responses call: `max_output_tokens`
  above `max_tokens_out`, or missing, is set to it (and reserved so); `input` (a string,
  or message, ``function_call``, ``function_call_output`` and ``reasoning`` items with
  text parts), `instructions`, function `tools` and the fields in
  `RESPONSES_FORWARDED_FIELDS` go through; what brings input the proxy cannot count
  (`previous_response_id`, `conversation`, a stored `prompt`, an ``item_reference``, a
  non-text part) or bills beyond the reservation (a built-in tool, `background`,
  `service_tier`, logprobs) is refused. The answer is the upstream's text and function
  calls (each with its call id) as a ``response`` object; ``"stream": true`` gets its
  events (``response.created`` ... ``response.completed`` with the usage) from one
  non-streamed upstream call, as for chat. An endpoint without a Responses API (404 or
  405) gives the agent a 502 whose message says so and how each framework switches to
  chat completions.
* ``POST .../v1/messages`` (the Anthropic Messages API) and ``POST
  .../v1beta/models/<model>:generateContent`` or ``:streamGenerateContent`` (Gemini's):
  the same call in those providers' shapes, translated to chat for the endpoint and
  back (`evalkit.calls.anthropic_api`, `evalkit.calls.gemini_api`: what each refuses),
  recorded with its `wire`; ``ANTHROPIC_BASE_URL`` and ``GOOGLE_GEMINI_BASE_URL`` are
  ``http://127.0.0.1:PORT/s/<token>``, the key also read from ``x-api-key`` and
  ``x-goog-api-key``. docs/wires.md.
* ``GET .../v1/models``: the generator model.
* ``POST .../evalkit/tools`` (`EVALKIT_TOOLS_URL`): ``{"name", "arguments"}`` answered
  from the case's fixtures as ``{"content", "error"}``; with ``"result"`` or ``"error"``
  in the body, a tool the agent ran itself, recorded as reported. ``"id"`` (or
  ``"call_id"``, ``"tool_call_id"``) is the model's id of the call: the trace is then in
  the model's order whatever order the tools finished in (`SampleSession.trace`).

`listen_unix` serves the same routes on a Unix socket too: a sandboxed program's one
way out (`evalkit.calls.sandbox`). `open_call` serves one prompt sample's one call
(chat or completions) under a token of its own, spent on its first request: a prompt
sample run on a Ray node sends its request there and the driver makes the call.

Errors are OpenAI error bodies (``{"error": {"message", "type", "code"}}``) with
``x-should-retry: false``, so the official clients raise at once instead of retrying
what evalkit already decided: 402 ``budget_exhausted`` (the call does not fit under
the cap), 400 ``context_length_exceeded`` (over `max_tokens_in`), ``invalid_request`` and
``body_too_deep`` (a body nested deeper than `MAX_BODY_DEPTH`),
401 (an unknown token, or a sample that is over), 409 ``run_stopped`` (the run has
stopped), 502 ``upstream_failed`` (the endpoint failed after evalkit's retries, or
breached a ceiling), 507 (disk full), 404 (an endpoint the proxy does not serve). Every
such error makes the sample errored, a request refused before metering (a body that is
not JSON, a field the proxy does not serve) too.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from aiohttp import web

from evalkit.calls import anthropic_api, gemini_api
from evalkit.calls.client import CallStopped, Completion
from evalkit.calls.responses_api import response_body, sse, stream_events, usage_body
from evalkit.calls.session import SampleSession
from evalkit.foundations._text import storable_json
from evalkit.foundations.errors import (
    BudgetExhausted,
    CeilingBreached,
    DiskFull,
    InputTooLong,
    ReplayMiss,
    UnitCallError,
)

MAX_BODY_BYTES = 32 * 1024 * 1024
# The request fields forwarded as sent besides those the proxy reads itself: none
# changes what a call costs beyond what its reservation covers (its input is counted
# with their JSON size, `ModelClient.check_input`). Every other field is refused, for
# it may bill what the ledger did not reserve (`service_tier`, `prediction`, `audio`,
# `web_search_options`, `functions`, ...). docs/formats.md lists them.
FORWARDED_FIELDS = frozenset(
    {
        "top_p",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "user",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "metadata",
    }
)
MESSAGE_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})  # a message's, the same rule
# A Responses call's forwarded fields, by the same rule (its `instructions` are counted
# as input, `text` holds the output format, `reasoning` the effort, whose tokens are
# output tokens under `max_output_tokens`).
RESPONSES_FORWARDED_FIELDS = frozenset(
    {
        "instructions",
        "top_p",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "metadata",
        "user",
        "store",
        "truncation",
        "reasoning",
        "include",
        "prompt_cache_key",
        "safety_identifier",
        "max_tool_calls",
    }
)
RESPONSES_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})
# A text part's fields: any other (`image_url`, `file_id`, `file_data`, ...) brings input
# a text bound does not see.
TEXT_PART_FIELDS = frozenset({"type", "text", "refusal", "annotations", "logprobs", "cache_control"})
# The deepest request body served: no agent's request nests this deep (a tool's JSON
# schema included), and a deeper one would recurse in the JSON reader and writers.
MAX_BODY_DEPTH = 128
TOKEN_PREFIX = "ek-"
# A prompt sample run on a Ray node (`evalkit.running.executors`): its one call, handed the
# `ModelClient.complete` keywords the request's body gives (`requested_model` and `stream`
# dropped); it makes the call on the driver, under the run's ledger, and returns it.
CallHandler = Callable[[dict[str, Any]], Awaitable[Completion]]


@dataclass(frozen=True)
class SampleEndpoint:
    """Where one sample's agent sends its calls: `base_url` (OpenAI-style, with `/v1`),
    `api_key` (the token), and `tools_url`."""

    token: str
    base_url: str
    api_key: str
    tools_url: str


class _Refusal(Exception):
    def __init__(self, status: int, message: str, etype: str, code: str) -> None:
        super().__init__(message)
        self.status, self.etype, self.code = status, etype, code


def _refusal_of(exc: BaseException) -> _Refusal:
    """The HTTP error an agent gets for a call the session refused or that failed."""
    text = f"evalkit: {exc}"
    if isinstance(exc, BudgetExhausted):
        return _Refusal(402, text + " (the run's cost cap)", "insufficient_quota", "budget_exhausted")
    if isinstance(exc, InputTooLong):
        return _Refusal(400, text, "invalid_request_error", "context_length_exceeded")
    if isinstance(exc, CallStopped):
        return _Refusal(409, text, "run_stopped", "run_stopped")
    if isinstance(exc, DiskFull):
        return _Refusal(507, text, "server_error", "disk_full")
    if isinstance(exc, (CeilingBreached, UnitCallError, ReplayMiss)):
        return _Refusal(502, text, "upstream_error", "upstream_failed")
    return _Refusal(502, f"evalkit: unexpected {type(exc).__name__}: {exc}", "upstream_error", "upstream_failed")


def _refusal_response(r: _Refusal) -> web.Response:
    """The agent's HTTP error for refusal `r` (`_error_response`)."""
    return _error_response(r.status, str(r), r.etype, r.code)


def _json_response(body: dict[str, Any]) -> web.Response:
    """An answer as a JSON body (text as stored: a lone surrogate escaped)."""
    return web.Response(text=storable_json(body), content_type="application/json")


async def _made(call: Awaitable[Completion]) -> Completion | web.Response:
    """The call's completion, or the agent's HTTP error for a call refused or that
    failed (`_refusal_of`); a cancelled call stays cancelled."""
    try:
        return await call
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure is the agent's HTTP error
        return _refusal_response(_refusal_of(exc))


def _error_response(status: int, message: str, etype: str, code: str) -> web.Response:
    body = {"error": {"message": message, "type": etype, "param": None, "code": code}}
    return web.Response(
        status=status,
        text=storable_json(body),
        content_type="application/json",
        headers={"x-should-retry": "false"},
    )


_X = TypeVar("_X")


@dataclass(frozen=True)
class _Metered(Generic[_X]):
    """A request's metered model call (`MeteringProxy._metered_call`): its sample, body,
    the call's keywords, whether it streams, what else its API's answer needs, the answer."""

    session: SampleSession
    body: dict[str, Any]
    kw: dict[str, Any]
    stream: bool
    extra: _X
    completion: Completion


class MeteringProxy:
    """The proxy server (see the module docstring). Runs on the caller's event loop:
    `await start()`, `open(session)` per sample, `await close(token)`, `await aclose()`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, model: str) -> None:
        self.host, self.port, self.model = host, port, model
        self._sessions: dict[str, SampleSession] = {}
        self._calls: dict[str, CallHandler] = {}  # tokens of prompt samples' calls (`open_call`)
        self._runner: web.AppRunner | None = None
        self.requests = 0
        # (bytes of one, reports per sample): a sandboxed unit's `unit.limits` (evalkit.calls.sandbox)
        self.tool_report_limits: tuple[int, int] | None = None
        self._reports: dict[int, int] = {}  # tool reports per sample (by its session's id)

    @property
    def root(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> MeteringProxy:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        for prefix in ("/s/{token}", ""):
            app.router.add_post(prefix + "/v1/chat/completions", self._chat)
            app.router.add_post(prefix + "/v1/completions", self._completions)
            app.router.add_post(prefix + "/v1/responses", self._responses)
            app.router.add_post(prefix + "/v1/messages", self._anthropic)  # `evalkit.calls.anthropic_api`
            for version in ("/v1beta", "/v1"):  # `evalkit.calls.gemini_api`: models/<model>:<method>
                app.router.add_post(prefix + version + "/models/{call}", self._gemini)
            app.router.add_get(prefix + "/v1/models", self._models)
            app.router.add_post(prefix + "/evalkit/tools", self._tools)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def listen_unix(self, path: str) -> str:
        """Serve the same routes on a Unix socket at `path` too (what a sandboxed program
        reaches, through the forwarder inside its sandbox: `evalkit.calls.sandbox`); the
        socket is made readable and writable by its owner only. Returns `path`."""
        assert self._runner is not None, "start() first"
        site = web.UnixSite(self._runner, path)
        await site.start()
        os.chmod(path, 0o600)
        return path

    async def aclose(self) -> None:
        for session in list(self._sessions.values()):
            await session.finish("the run ended")
        self._sessions.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def open(self, session: SampleSession) -> SampleEndpoint:
        """Serve `session` under a new token; returns its URLs."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(18)
        self._sessions[token] = session
        base = f"{self.root}/s/{token}"
        return SampleEndpoint(token, f"{base}/v1", token, f"{base}/evalkit/tools")

    def open_call(self, handler: CallHandler) -> SampleEndpoint:
        """Serve one prompt sample's call under a new token (its chat or completions
        request, `CallHandler`): what a prompt sample on a Ray node sends its request to
        (`evalkit.running.executors`). `close_call` it when the sample ends."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(18)
        self._calls[token] = handler
        base = f"{self.root}/s/{token}"
        return SampleEndpoint(token, f"{base}/v1", token, f"{base}/evalkit/tools")

    def close_call(self, token: str) -> None:
        """Stop serving the call of `token` (later requests get 401)."""
        self._calls.pop(token, None)

    async def close(self, token: str, reason: str) -> None:
        """Stop serving the sample of `token`: later calls get 401; calls in flight are cut."""
        session = self._sessions.pop(token, None)
        if session is not None:
            self._reports.pop(id(session), None)
            await session.finish(reason)

    # -- handlers ------------------------------------------------------------------------

    def _session(self, request: web.Request) -> SampleSession:
        session = self._find(request)
        if session is None:
            raise _Refusal(
                401,
                "evalkit: unknown sample token, or the sample is over (each sample has its own "
                "base URL and key, in OPENAI_BASE_URL and OPENAI_API_KEY)",
                "invalid_request_error",
                "invalid_api_key",
            )
        return session

    def _find(self, request: web.Request, token: str | None = None) -> SampleSession | None:
        """The sample a request is for, by the token in its URL (or `token`) or its key."""
        return self._sessions.get(_token(request, token))

    def _refuse(self, session: SampleSession | None, r: _Refusal) -> web.Response:
        """The agent's HTTP error for a request refused before anything was metered; its
        sample (when known) is errored, so a refused call is never part of a pass."""
        if session is not None:
            exc = UnitCallError(f"the metering proxy refused a request ({r.status} {r.code}): {r}")
            exc.attempts = 0  # type: ignore[attr-defined]
            session.fail(exc)
        return _refusal_response(r)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        too_deep = False
        try:
            body = await request.json(loads=json.loads)
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
            raise _Refusal(
                400, f"evalkit: the request body is not JSON: {exc}", "invalid_request_error", "invalid_json"
            ) from None
        except RecursionError:
            too_deep = True  # deeper than the JSON reader goes: refused as any too deep
        if too_deep or json_depth(body, MAX_BODY_DEPTH) > MAX_BODY_DEPTH:
            raise _Refusal(
                400,
                f"evalkit: the request body nests deeper than {MAX_BODY_DEPTH} levels (MAX_BODY_DEPTH)",
                "invalid_request_error",
                "body_too_deep",
            )
        if not isinstance(body, dict):
            raise _Refusal(
                400, "evalkit: the request body must be a JSON object", "invalid_request_error", "invalid_json"
            )
        return body

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def _metered_call(
        self, request: web.Request, parse: Callable[[dict[str, Any]], tuple[dict[str, Any], bool, _X]]
    ) -> _Metered[_X] | web.Response:
        """One model call of an agent's request, whatever its API: its sample (by token),
        its body, `parse`d into `SampleSession.model_call` keywords, whether it streams,
        and what else the API's answer needs; then the call, metered by the session. A
        request refused before metering errors its sample (`_refuse`); a call the session
        refused or that failed is the agent's HTTP error (`_refusal_of`)."""
        self.requests += 1
        session: SampleSession | None = None
        try:
            session = self._session(request)
            body = await self._body(request)
            kw, stream, extra = parse(body)
        except _Refusal as r:
            return self._refuse(session, r)
        task = asyncio.current_task()
        if task is not None:
            session.track(task)
        c = await _made(session.model_call(**kw, stream=stream))  # a failure is the sample's too
        if isinstance(c, web.Response):
            return c
        return _Metered(session, body, kw, stream, extra, c)

    async def _serve(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        handler = self._calls.get(_token(request))
        if handler is not None:  # a prompt sample's one call on Ray (`open_call`), not an agent's
            self.requests += 1
            return await self._serve_call(request, handler, chat=chat)
        m = await self._metered_call(request, lambda body: _call_arguments(body, chat))
        if isinstance(m, web.Response):
            return m
        made = int(time.time())
        rid = f"{'chatcmpl' if chat else 'cmpl'}-evalkit-{m.session.calls}-{secrets.token_hex(4)}"
        if m.stream:
            return await _event_stream(request, _chunks(m.completion, rid, made, chat=chat, include_usage=m.extra))
        return _json_response(_answer(m.completion, rid, made, chat=chat))

    async def _serve_call(self, request: web.Request, handler: CallHandler, *, chat: bool) -> web.Response:
        """A prompt sample's one call (`open_call`): its request read as an agent's is,
        made by `handler`, answered in the same shape; the token is spent on its first
        request, so a second one is refused (401), as is one the body makes unservable."""
        token = _token(request)
        self._calls.pop(token, None)
        try:
            body = await self._body(request)
            kw, stream, _ = _call_arguments(body, chat)
            if stream:
                raise _Refusal(
                    400, "evalkit: a prompt sample's call is not streamed", "invalid_request_error", "stream"
                )
        except _Refusal as r:
            return _refusal_response(r)
        kw.pop("requested_model", None)
        c = await _made(handler(kw))  # the handler keeps a failure for the driver; the node is told
        if isinstance(c, web.Response):
            return c
        rid = f"{'chatcmpl' if chat else 'cmpl'}-evalkit-1-{secrets.token_hex(4)}"
        return _json_response(_answer(c, rid, int(time.time()), chat=chat))

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """A Responses API call (see the module docstring), metered as a chat call is."""
        m = await self._metered_call(request, lambda body: (*_responses_arguments(body), None))
        if isinstance(m, web.Response):
            return m
        session, body, kw, stream, c = m.session, m.body, m.kw, m.stream, m.completion
        ceiling = session.client.max_tokens_out
        echo = {**body, "max_output_tokens": min(kw["max_tokens"] or ceiling, ceiling)}
        answer = response_body(
            rid=f"evalkit{session.calls}{secrets.token_hex(6)}",
            created_at=int(time.time()),
            model=c.model,
            text=c.text,
            tool_calls=c.tool_calls,
            finish_reason=c.finish_reason,
            usage=usage_body(c.usage.prompt_tokens, c.usage.completion_tokens),
            request=echo,
        )
        if not stream:
            return _json_response(answer)
        return await _event_stream(request, sse(stream_events(answer)))

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        """An Anthropic Messages API call, translated to chat and metered as one
        (`evalkit.calls.anthropic_api`)."""
        m = await self._metered_call(request, lambda body: (*_translated(anthropic_api.messages_arguments, body), None))
        if isinstance(m, web.Response):
            return m
        u = m.completion.usage
        message = anthropic_api.message_body(
            **_answer_fields(m), usage=anthropic_api.usage_body(u.prompt_tokens, u.completion_tokens)
        )
        return (
            await _event_stream(request, anthropic_api.message_events(message)) if m.stream else _json_response(message)
        )

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        """A Gemini ``generateContent`` or ``streamGenerateContent`` call (the model and
        method in its URL), translated to chat and metered as one (`evalkit.calls.gemini_api`)."""
        model, _, method = request.match_info["call"].rpartition(":")
        if method not in ("generateContent", "streamGenerateContent"):
            return await self._unknown(request)
        stream = method == "streamGenerateContent"
        m = await self._metered_call(
            request, lambda body: (_translated(lambda b: gemini_api.generate_arguments(b, model), body), stream, None)
        )
        if isinstance(m, web.Response):
            return m
        u = m.completion.usage
        answer = gemini_api.generate_body(**_answer_fields(m), usage=(u.prompt_tokens, u.completion_tokens))
        if not stream:
            return _json_response(answer)
        if request.query.get("alt") != "sse":  # without alt=sse the stream is one JSON array
            return web.Response(text=storable_json([answer]), content_type="application/json")
        return await _event_stream(request, gemini_api.generate_events(answer))

    async def _models(self, request: web.Request) -> web.Response:
        try:
            self._session(request)
        except _Refusal as r:
            return _refusal_response(r)
        data = [{"id": self.model, "object": "model", "created": 0, "owned_by": "evalkit"}]
        return web.json_response({"object": "list", "data": data})

    async def _tools(self, request: web.Request) -> web.Response:
        session: SampleSession | None = None
        try:
            session = self._session(request)
            await self._report_within_limits(request, session)
            body = await self._body(request)
            name = body.get("name")
            if not isinstance(name, str) or not name:
                raise _Refusal(400, 'evalkit: a tool call needs "name"', "invalid_request_error", "invalid_tool_call")
            # the model's call id, under any of the names the frameworks use for it
            ids = [body.get(k) for k in ("id", "call_id", "tool_call_id")]
            call_id = next((v for v in ids if isinstance(v, str) and v), None)
            reported: dict[str, Any] | None = {k: body[k] for k in ("result", "error") if k in body} or None
            answer = session.tool(name, body.get("arguments", {}), call_id, reported=reported)
        except _Refusal as r:
            return self._refuse(session, r)
        except DiskFull as exc:
            return _error_response(507, f"evalkit: {exc}", "server_error", "disk_full")
        return web.Response(
            text=storable_json({"content": answer.content, "error": answer.error}), content_type="application/json"
        )

    async def _report_within_limits(self, request: web.Request, session: SampleSession) -> None:
        """`_Refusal` (the sample errored, naming the limit) for a tool report past
        `tool_report_limits`: more reports than a sample may post, or a larger one."""
        if self.tool_report_limits is None:
            return
        most_bytes, most = self.tool_report_limits
        self._reports[id(session)] = n = self._reports.get(id(session), 0) + 1
        if n > most:
            why = f"evalkit: it hit a per-sample limit: limits.tool_reports = {most}"
            raise _Refusal(429, why, "invalid_request_error", "limit_tool_reports")
        size = request.content_length if request.content_length is not None else len(await request.read())
        if size > most_bytes:
            why = f"evalkit: it hit a per-sample limit: limits.tool_report_bytes = {most_bytes} (a report of {size})"
            raise _Refusal(413, why, "invalid_request_error", "limit_tool_report_bytes")

    async def _unknown(self, request: web.Request) -> web.Response:
        parts = request.path.split("/")
        token = parts[2] if len(parts) > 2 and parts[1] == "s" else None
        why = _Refusal(
            404, f"evalkit: no such endpoint {request.method} {request.path}", "invalid_request_error", "not_found"
        )
        return self._refuse(self._find(request, token), why)


def _token(request: web.Request, token: str | None = None) -> str:
    """A request's sample token: `token`, else the one in its URL, else its key."""
    token = token or request.match_info.get("token")
    if token is None:
        auth = request.headers.get("Authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("api-key", "").strip()
        for name in ("x-api-key", "x-goog-api-key"):  # Anthropic's and Gemini's key headers
            token = token or request.headers.get(name, "").strip()
    return token or ""


def json_depth(value: Any, limit: int) -> int:
    """How deep `value` (parsed JSON) nests, counted without recursion and no further
    than `limit` + 1: a scalar is 0, an empty list or object 1."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= limit:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _answer_fields(m: _Metered[Any]) -> dict[str, Any]:
    """What another provider's answer body is built from (`anthropic_api.message_body`,
    `gemini_api.generate_body`): an id, and the completion's model, text, tool calls
    and finish reason."""
    c = m.completion
    rid = f"evalkit{m.session.calls}{secrets.token_hex(6)}"
    return {"rid": rid, "model": c.model, "text": c.text, "tool_calls": c.tool_calls, "finish_reason": c.finish_reason}


def _translated(parse: Callable[[dict[str, Any]], _X], body: dict[str, Any]) -> _X:
    """`parse(body)` of another provider's API (`anthropic_api`, `gemini_api`), its
    `ValueError` the agent's 400 (`_bad`)."""
    try:
        return parse(body)
    except ValueError as exc:
        raise _bad(str(exc)) from None


def _bad(msg: str) -> _Refusal:
    """The 400 for a request the proxy cannot meter exactly."""
    return _Refusal(400, f"evalkit: {msg}", "invalid_request_error", "invalid_request")


def _stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    """Whether a request asks for a stream, and for its usage at the stream's end (its
    `stream_options`, which change how the answer is sent, not what it costs); both taken
    out of `body`."""
    stream = bool(body.pop("stream", False))
    opts = body.pop("stream_options", None)
    return stream, bool(isinstance(opts, dict) and opts.get("include_usage"))


def _drop(body: dict[str, Any], name: str, served: tuple[Any, ...], why: str) -> None:
    """Take field `name` out of `body`; `_bad` (its value, then `why`) when the value is
    not one of `served` (absent reads None)."""
    if body.get(name) not in served:
        raise _bad(f"{name}={body[name]!r}{why}")
    body.pop(name, None)


def _check_positive(name: str, value: Any) -> None:
    """`_bad` unless `value` is None or a positive integer (an output ceiling)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise _bad(f"{name} must be a positive integer, got {value!r}")


def _requested_model(body: dict[str, Any]) -> str | None:
    """The model a request names (taken out of `body`), recorded when it is not the one
    that answers."""
    model = body.pop("model", None)
    return model if isinstance(model, str) else None


def _function_tools(body: dict[str, Any], implicit: str | None) -> list[dict[str, Any]] | None:
    """A request's `tools` (taken out of `body`), None for none; `_bad` for anything but
    a list of function tools (a provider's built-in tool bills its own use). `implicit`:
    the type of a tool that names none (chat's are functions)."""
    tools = body.pop("tools", None)
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise _bad("tools must be a list of tool objects")
    for i, t in enumerate(tools or ()):
        kind = t.get("type", implicit)
        if kind != "function":
            raise _bad(f"tools[{i}].type={kind!r} is not served (only function tools are metered)")
    return tools or None


def _temperature(body: dict[str, Any]) -> float | None:
    """A request's `temperature` (taken out of `body`); `_bad` unless a number or None."""
    temperature = body.pop("temperature", None)
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))):
        raise _bad(f"temperature must be a number, got {temperature!r}")
    return cast(float | None, temperature)


def _forwarded(body: dict[str, Any], fields: frozenset[str]) -> dict[str, Any] | None:
    """The fields left in `body`, sent upstream as they are (None for none; a null is
    the field's default, as if absent); `_bad` for one outside `fields`, which may bill
    what the reservation does not cover."""
    body = {k: v for k, v in body.items() if v is not None}
    for name in body:
        if name not in fields:
            raise _bad(f"the field {name!r} is not served (it may bill what the reservation does not cover)")
    return body or None


def _call_arguments(body: dict[str, Any], chat: bool) -> tuple[dict[str, Any], bool, bool]:
    """`SampleSession.model_call` keywords from a request body, whether it asks for a
    stream, and whether the stream should end with usage; `_Refusal` for what cannot be
    metered exactly."""
    body = dict(body)
    stream, include_usage = _stream_flags(body)
    for name in ("n", "best_of"):
        _drop(body, name, (None, 1), ": the proxy serves one answer a call (the reservation covers one)")
    if not chat and body.get("echo"):
        raise _bad("echo is not served (the answer would hold the prompt's tokens too)")
    for name in ("echo", "logprobs", "top_logprobs"):
        _drop(body, name, (None, False, 0), " is not served (an answer carries no logprobs)")
    wanted = [v for v in (body.pop("max_tokens", None), body.pop("max_completion_tokens", None)) if v is not None]
    for v in wanted:
        _check_positive("max_tokens", v)
    kw: dict[str, Any] = {"max_tokens": min(wanted) if wanted else None, "requested_model": _requested_model(body)}
    if chat:
        messages = body.pop("messages", None)
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise _bad("messages must be a non-empty list of message objects")
        _check_messages(messages)
        kw["messages"] = messages
        kw["tools"] = _function_tools(body, "function")
    else:
        prompt = body.pop("prompt", None)
        if not isinstance(prompt, str):
            raise _bad("prompt must be one string (the proxy serves one prompt a call)")
        kw["prompt"] = prompt
        if body.get("tools"):
            raise _bad("tools need the chat completions endpoint")
        body.pop("tools", None)
    kw["temperature"] = _temperature(body)
    seed = body.pop("seed", None)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _bad(f"seed must be an integer, got {seed!r}")
    kw["seed"] = seed
    stop = body.pop("stop", None)
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise _bad("stop must be a string or a list of strings")
    kw["stop"] = stop or None
    kw["extra"] = _forwarded(body, FORWARDED_FIELDS)  # top_p, tool_choice, response_format, user, ...
    return kw, stream, include_usage


# A Responses request's fields that are refused when set, and why.
_RESPONSES_REFUSED = (
    ("previous_response_id", "it adds stored input the proxy cannot count; send the whole input"),
    ("conversation", "it adds stored input the proxy cannot count; send the whole input"),
    ("prompt", "a stored prompt adds input the proxy cannot count"),
    ("background", "a background response is not metered"),
    ("service_tier", "it may bill what the reservation does not cover"),
)


def _responses_arguments(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """`SampleSession.model_call` keywords from a Responses request body and whether it
    asks for a stream; `_Refusal` for what cannot be metered exactly (the module
    docstring). Its `stream_options` (include_obfuscation: how the stream is padded)
    are dropped."""
    body = dict(body)
    stream, _ = _stream_flags(body)
    for name, why in _RESPONSES_REFUSED:
        _drop(body, name, (None, False), f" is not served ({why})")
    _drop(body, "top_logprobs", (None, 0), " is not served (an answer carries no logprobs)")
    wanted = body.pop("max_output_tokens", None)
    _check_positive("max_output_tokens", wanted)
    kw: dict[str, Any] = {"max_tokens": wanted, "requested_model": _requested_model(body)}
    input_ = body.pop("input", None)
    if isinstance(input_, str):
        if not input_:
            raise _bad("input must not be empty")
    elif not isinstance(input_, list) or not input_ or not all(isinstance(i, dict) for i in input_):
        raise _bad("input must be a string or a non-empty list of input items")
    else:
        _check_input_items(input_)
    kw["responses_input"] = input_
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _bad("instructions must be a string")
    kw["tools"] = _function_tools(body, None)
    kw["temperature"] = _temperature(body)
    kw["extra"] = _forwarded(body, RESPONSES_FORWARDED_FIELDS)
    return kw, stream


def _unserved_part(parts: list[Any], kinds: Collection[str], *, text: bool = False) -> tuple[int, Any] | None:
    """The place and type of the first content part the proxy cannot meter (a type
    outside `kinds`; with `text`, one whose ``text`` is no string), or None: an image,
    an audio clip or a file costs input tokens a text bound does not see."""
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if not isinstance(kind, str) or kind not in kinds or (text and not isinstance(part.get("text"), str)):
            return j, kind
        if not TEXT_PART_FIELDS.issuperset(part):  # a text part that carries an image or a file too
            return j, f"{kind} with {sorted(set(part) - TEXT_PART_FIELDS)}"
    return None


def _check_input_items(items: list[dict[str, Any]]) -> None:
    """`_bad` naming the first input item or content part the proxy cannot count: an
    ``item_reference`` or an item type it does not know, a part other than text."""
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind in ("function_call", "function_call_output", "reasoning"):
            output = item.get("output")
            if kind == "function_call_output" and not isinstance(output, (str, list)):
                what = output.get("type") if isinstance(output, dict) else type(output).__name__
                raise _bad(f"input[{i}].output of type {what!r} is not served (a string or a list of text parts)")
            if kind == "function_call_output" and isinstance(output, list):
                if (found := _unserved_part(output, RESPONSES_TEXT_PARTS)) is not None:
                    j, ptype = found
                    raise _bad(f"input[{i}].output[{j}] of type {ptype!r} is not served (only text is metered)")
            continue
        if kind != "message":
            raise _bad(
                f"input[{i}].type={kind!r} is not served (only message, function_call, function_call_output "
                "and reasoning items are metered)"
            )
        content = item.get("content")
        if isinstance(content, list):
            if (found := _unserved_part(content, RESPONSES_TEXT_PARTS)) is not None:
                j, ptype = found
                raise _bad(f"input[{i}].content[{j}] of type {ptype!r} is not served (only text parts are metered)")
        elif not isinstance(content, str):
            raise _bad(f"input[{i}].content must be a string or a list of text parts")


def _check_messages(messages: list[dict[str, Any]]) -> None:
    """`_bad` naming the first message field or content part the proxy cannot meter: a
    field outside `MESSAGE_FIELDS`, a part other than text (`_unserved_part`)."""
    for i, m in enumerate(messages):
        for name, value in m.items():
            if name not in MESSAGE_FIELDS and value is not None:
                raise _bad(f"messages[{i}].{name} is not served (it may bill what the reservation does not cover)")
        content = m.get("content")
        # ("text",): a tuple compares, so a part whose type is no string (a list) is named too
        if isinstance(content, list) and (found := _unserved_part(content, ("text",), text=True)) is not None:
            j, kind = found
            raise _bad(f"messages[{i}].content[{j}] of type {kind!r} is not served (only text parts are metered)")


def openai_tool_calls(tool_calls: Any, id_prefix: str = "call_evalkit_") -> list[dict[str, Any]]:
    """Tool calls as evalkit records them (`{"name", "arguments", "id"}`) in the OpenAI
    message shape, arguments as a JSON string; a call without an id gets `id_prefix` + i."""
    out = []
    for i, tc in enumerate(tool_calls):
        args = tc.get("arguments")
        out.append(
            {
                "id": tc.get("id") or f"{id_prefix}{i}",
                "type": "function",
                "function": {
                    "name": tc.get("name"),
                    "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
                },
            }
        )
    return out


def _usage(c: Completion) -> dict[str, int]:
    u = c.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


def _answer(c: Completion, rid: str, made: int, *, chat: bool) -> dict[str, Any]:
    """The OpenAI response body for a finished call."""
    finish = c.finish_reason or ("tool_calls" if c.tool_calls else "stop")
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": c.text if (c.text or not c.tool_calls) else None}
        if c.tool_calls:
            message["tool_calls"] = openai_tool_calls(c.tool_calls)
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": c.text, "finish_reason": finish, "logprobs": None}
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": made,
        "model": c.model,
        "system_fingerprint": c.system_fingerprint,
        "choices": [choice],
        "usage": _usage(c),
    }


async def _event_stream(request: web.Request, data: bytes) -> web.StreamResponse:
    """An answer sent as server-sent events `data`, whole, as one response."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    await resp.write(data)
    await resp.write_eof()
    return resp


def _chunks(c: Completion, rid: str, made: int, *, chat: bool, include_usage: bool) -> bytes:
    """A chat or completions answer as server-sent events (see the module docstring)."""
    finish = c.finish_reason or ("tool_calls" if c.tool_calls else "stop")
    head = {"id": rid, "created": made, "model": c.model, "system_fingerprint": c.system_fingerprint}
    chunks: list[dict[str, Any]] = []
    if chat:
        head["object"] = "chat.completion.chunk"
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if c.text:
            deltas.append({"content": c.text})
        calls = openai_tool_calls(c.tool_calls)
        if calls:
            deltas.append({"tool_calls": [{"index": i, **tc} for i, tc in enumerate(calls)]})
        for d in deltas:
            chunks.append({**head, "choices": [{"index": 0, "delta": d, "finish_reason": None, "logprobs": None}]})
        chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish, "logprobs": None}]})
    else:
        head["object"] = "text_completion"
        if c.text:
            chunks.append({**head, "choices": [{"index": 0, "text": c.text, "finish_reason": None, "logprobs": None}]})
        chunks.append({**head, "choices": [{"index": 0, "text": "", "finish_reason": finish, "logprobs": None}]})
    if include_usage:
        for ch in chunks:
            ch["usage"] = None
        chunks.append({**head, "choices": [], "usage": _usage(c)})
    data = "".join(f"data: {storable_json(ch)}\n\n" for ch in chunks) + "data: [DONE]\n\n"
    return data.encode("utf-8", "surrogatepass")
