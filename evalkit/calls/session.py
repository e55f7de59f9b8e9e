"""One agent sample's calls: every model call metered through the run's `ModelClient`,
every tool call answered from the case's fixtures, both written to the sample's
trajectory as they happen.

A `SampleSession` is what evalkit's own tool loop (`evalkit.running.agents`) and the metering
proxy (`evalkit.calls.proxy`, for a user's agent program) call into, so there is one rule for
what a call costs and what a trajectory holds, whoever makes the call:

* a model call goes through `ModelClient.complete` (count, reserve, call, retry, cache,
  settle: `evalkit.calls.client`) with the sample (case, arm, index) and the call's ordinal as
  its cache key, so two arms or cases never share a sampled answer while an identical
  re-run of a deterministic agent replays every call at $0; twin arms (the same
  effective requests, `runner.seed_names`) share one sample name (`TwinShare`), and a
  twin's call waits while the same call (same request, ordinal and sample) of the other
  is in flight, so it goes to the server once and the second replays it;
* a call that does not fit under the cap, is over `max_tokens_in`, breaches a ceiling or
  fails after its retries is recorded (`status` ``refused`` or ``failed``) and makes the
  sample errored: `failure` holds the first such exception, and the run's stop cause
  (budget exhausted, ceiling breached, disk full) is reported at once through `on_stop`;
* a tool call gets its fixture's answer (`evalkit.suites.units.ToolFixtures`), never a real
  side effect; an agent that ran a tool itself can report what it got (`reported`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from evalkit.calls.client import CallProgress, CallStopped, Completion, ModelClient, request_hash
from evalkit.foundations.errors import BudgetExhausted, CeilingBreached, DiskFull, InputTooLong
from evalkit.foundations.records import Case, Sample, Usage
from evalkit.runfolder.trajectories import TrajectoryWriter
from evalkit.suites.units import ToolAnswer, ToolFixtures, _as_text, canonical_arguments

Key = tuple[str, str, int]


def stop_cause(exc: BaseException) -> str | None:
    """The run's stop cause a failed call implies (as the runner names it), or None."""
    if isinstance(exc, BudgetExhausted) and not isinstance(exc, CallStopped):
        return "budget exhausted"
    if isinstance(exc, CeilingBreached):
        return "ceiling breached"
    if isinstance(exc, DiskFull):
        return str(exc)
    return None


@dataclass(frozen=True)
class TwinShare:
    """How a twin arm's sample shares its calls (`runner.seed_names`): `sample`, the name
    its calls are cached under ("case/seed name": the twin's and its first arm's are
    one), and `hold(ident)`, an async context that waits while another call with the
    same identity (endpoint, model, request, ordinal, sample, index) is in flight."""

    sample: str
    hold: Callable[[tuple[Any, ...]], AbstractAsyncContextManager[None]]


class SampleSession:
    """The calls of one sample (`key` = case, arm, index); see the module docstring."""

    def __init__(
        self,
        *,
        client: ModelClient,
        key: Key,
        writer: TrajectoryWriter,
        fixtures: ToolFixtures,
        should_stop: Callable[[], str | None],
        on_stop: Callable[[str], None],
        share: TwinShare | None = None,
    ) -> None:
        self.client = client
        self.key = key
        self.share = share
        self.writer = writer
        self.fixtures = fixtures
        self._should_stop = should_stop
        self._on_stop = on_stop
        self.calls = 0  # model calls made (ordinal of the last)
        self.attempts = 0  # HTTP requests the endpoint received for them
        self.cached_calls = 0
        self.usage_in = 0
        self.usage_out = 0
        self.cost_usd = 0.0
        self.avoided_usd = 0.0
        self.tool_calls: list[dict[str, Any]] = []  # executed (or reported) tool calls, in order
        self.answer_tool_calls: list[dict[str, Any]] = []  # the tool calls the model's answers asked for
        self.tool_errors: list[dict[str, Any]] = []
        # each tool call the model asked for: [call, position, id, name, arguments, claimed]
        self._asked: list[list[Any]] = []
        self._order: list[tuple[int, int, int]] = []  # of each of `tool_calls`: where the model asked for it
        self._arrivals = itertools.count()
        self.failure: BaseException | None = None  # the first refused or failed call
        self.failed_call: int | None = None
        self.revoked: str | None = None  # set when the sample is over: later calls are refused
        self.last: Completion | None = None
        self.inflight: set[asyncio.Task[Any]] = set()
        self._hashes: list[str] = []
        self.started = time.monotonic()

    @property
    def label(self) -> str:
        case_id, arm, index = self.key
        return f"{case_id}/{arm}/{index}"

    def should_stop(self) -> str | None:
        """Why no further call of this sample may go out (the sample is over, it failed,
        or the run stopped), else None; asked by the client before every attempt."""
        if self.revoked is not None:
            return self.revoked
        return self._should_stop()

    def fail(self, exc: BaseException, call: int | None = None) -> None:
        """Record a refused or failed call: the sample is errored; a budget, ceiling or
        disk stop is passed on to the run at once."""
        if self.failure is None:
            self.failure, self.failed_call = exc, call
        cause = stop_cause(exc)
        if cause is not None:
            self._on_stop(cause)

    async def model_call(
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
        requested_model: str | None = None,
        stream: bool = False,
        responses_input: Any = None,
        wire: str | None = None,
        native: dict[str, Any] | None = None,
    ) -> Completion:
        """One model call of the sample, through the client; its trajectory line is
        written when it ends, however it ends. Raises what the client raises (and
        records it as the sample's failure), `CallStopped` once the sample is over.
        `responses_input`: a Responses API call (endpoint ``responses`` in the
        trajectory, its request's ``input`` recorded as sent). `wire`: the API the agent
        spoke when it is not OpenAI's (``anthropic``, ``gemini``: its request translated
        to chat), recorded on the line; `native`: its request in that API's shape, what an
        endpoint speaking it is sent (`ModelClient.complete`)."""
        self.calls += 1
        n = self.calls
        args: dict[str, Any] = {
            "prompt": prompt,
            "messages": messages,
            "tools": tools,
            "temperature": temperature,
            "seed": seed,
            "stop": stop,
            "max_tokens": max_tokens,
            "extra": extra,
            "responses_input": responses_input,
        }
        line = self._call_line(n, args, requested_model=requested_model, stream=stream)
        if wire is not None:
            line["wire"] = wire
        t0 = time.perf_counter()
        # What the call made the endpoint receive and cost, however it ends; its "sent"
        # line is written before its first attempt goes out, so a killed run leaves a
        # line for every request the endpoint received (the outcome line supersedes it).
        progress = CallProgress(on_send=lambda: self._write_sent(line))
        sample = self.share.sample if self.share is not None else f"{self.key[0]}/{self.key[1]}"
        try:
            async with self._first_of_twins(args, n, sample):
                c = await self.client.complete(
                    **args,
                    native=native,
                    sample_index=self.key[2],
                    sample=sample,
                    key=f"{self.label}#{n}",
                    should_stop=self.should_stop,
                    call=n,
                    progress=progress,
                )
        except asyncio.CancelledError:
            self._record_cancelled(line, progress, t0)
            raise
        except BaseException as exc:
            self._record_failure(line, exc, progress, t0)
            raise
        return self._record_answer(line, c, t0)

    def _call_line(
        self, n: int, args: dict[str, Any], *, requested_model: str | None = None, stream: bool = False
    ) -> dict[str, Any]:
        """The trajectory line of call `n` before it is made, from `model_call`'s
        arguments: its endpoint (``completion``, ``chat`` or ``responses``), the model the
        agent asked for when it is not the one that answers, and the request as sent:
        prompt, messages or input, tools, and ``params`` with the output ceiling as the
        wire names it (at most the client's `max_tokens_out`) and the fields given."""
        prompt, responses_input = args.get("prompt"), args.get("responses_input")
        ceiling = "max_tokens" if responses_input is None else "max_output_tokens"  # as the wire names it
        most = self.client.max_tokens_out
        params: dict[str, Any] = {ceiling: min(args.get("max_tokens") or most, most)}
        for name in ("temperature", "seed", "stop"):
            if args.get(name) is not None:
                params[name] = args[name]
        params.update(args.get("extra") or {})
        request: dict[str, Any] = (
            {"prompt": prompt}
            if prompt is not None
            else {"input": responses_input}
            if responses_input is not None
            else {"messages": args.get("messages")}
        )
        if args.get("tools"):
            request["tools"] = args["tools"]
        request["params"] = params
        endpoint = "completion" if prompt is not None else "responses" if responses_input is not None else "chat"
        line: dict[str, Any] = {"call": n, "endpoint": endpoint}
        if requested_model is not None and requested_model != self.client.endpoint.model:
            line["requested_model"] = requested_model
        line["request"] = request
        if stream:
            line["stream"] = True
        return line

    def _record_cancelled(self, line: dict[str, Any], progress: CallProgress, t0: float) -> None:
        """A call cut as the sample ended: what its attempts sent and cost is counted,
        and its line written as cancelled."""
        self.attempts += progress.attempts
        self.cost_usd += progress.cost_usd
        line["cost_usd"] = progress.cost_usd
        why = "the sample ended while this call was in flight"
        self._write_call(line, "cancelled", None, t0, why, progress.attempts)

    def _record_failure(self, line: dict[str, Any], exc: BaseException, progress: CallProgress, t0: float) -> None:
        """A call that raised: its line written as ``refused`` (nothing was sent: it did
        not fit, was too long, or the sample was over) or ``failed``, with what its
        failed attempts cost; the sample is errored (`fail`)."""
        attempts = int(getattr(exc, "attempts", 0) or 0)
        self.attempts += attempts
        self.cost_usd += progress.cost_usd  # what its failed attempts were charged
        line["cost_usd"] = progress.cost_usd
        refused = isinstance(exc, (BudgetExhausted, InputTooLong)) and not attempts
        status = "refused" if refused or (isinstance(exc, CallStopped) and not attempts) else "failed"
        self._write_call(line, status, None, t0, f"{type(exc).__name__}: {exc}", attempts)
        self.fail(exc, line["call"])

    def _record_answer(self, line: dict[str, Any], c: Completion, t0: float) -> Completion:
        """A call that answered: its usage and cost counted, each tool call it asks for
        given an id unique in the sample (``call_<n>_<i>`` when it has none) and kept for
        the tool calls that answer it (`_claim`); its line written as ``ok``."""
        n = line["call"]
        self.attempts += c.attempts
        self.cached_calls += bool(c.cached)
        self.usage_in += c.usage.prompt_tokens
        self.usage_out += c.usage.completion_tokens
        self.cost_usd += c.cost_usd
        self.avoided_usd += c.cost_avoided_usd
        if any(not tc.get("id") for tc in c.tool_calls):  # every call gets an id unique in the sample
            ids = (dict(tc, id=tc.get("id") or f"call_{n}_{i}") for i, tc in enumerate(c.tool_calls))
            c = dataclasses.replace(c, tool_calls=tuple(ids))
        for i, tc in enumerate(c.tool_calls):
            self._asked.append([n, i, tc["id"], tc.get("name"), canonical_arguments(tc.get("arguments")), False])
        self.answer_tool_calls.extend(c.tool_calls)
        self._hashes.append(c.request_hash)
        self.last = c
        self._write_call(line, "ok", c, t0, None, c.attempts)
        return c

    def _write_sent(self, line: dict[str, Any]) -> None:
        try:
            self.writer.write("model_call", {**line, "status": "sent"})
        except DiskFull as exc:
            self.fail(exc, line["call"])
            raise

    def _write_call(
        self,
        line: dict[str, Any],
        status: str,
        c: Completion | None,
        t0: float,
        error: str | None,
        attempts: int | None,
    ) -> None:
        line["status"] = status
        if c is not None:
            line["answer"] = {"text": c.text, "tool_calls": list(c.tool_calls), "finish_reason": c.finish_reason}
            line["usage"] = {"prompt_tokens": c.usage.prompt_tokens, "completion_tokens": c.usage.completion_tokens}
            line["cost_usd"] = c.cost_usd
            line["latency_ms"] = round(c.latency_ms, 3)
            line["cached"] = c.cached
            line["request_hash"] = c.request_hash
            if c.cached:
                line["cost_avoided_usd"] = c.cost_avoided_usd
        else:
            line["latency_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        line["attempts"] = attempts
        if error is not None:
            line["error"] = error
        try:
            self.writer.write("model_call", line)
        except DiskFull as exc:
            self.fail(exc, line["call"])
            raise

    def tool(
        self, name: str, arguments: Any, call_id: str | None = None, *, reported: dict[str, Any] | None = None
    ) -> ToolAnswer:
        """A tool call of the sample: answered from the fixtures, or (`reported`:
        ``{"result": ...}`` or ``{"error": ...}``) run by the agent itself and recorded as
        it says. Written to the trajectory; a failed one counts as a tool error."""
        if reported is not None:
            err = reported.get("error")
            result = reported.get("result")
            answer = ToolAnswer(  # as a fixture's: a string as it is, any other JSON as JSON
                "" if result is None else _as_text(result),
                None if err in (None, False, "") else _as_text(err),
                "reported",
            )
        else:
            answer = self.fixtures.answer(name, arguments)
        args = canonical_arguments(arguments)
        asked = self._claim(name, args, call_id)
        if asked is not None and not call_id:
            call_id = str(asked[2])  # the model's id of the call it matched
        entry: dict[str, Any] = {"name": name, "arguments": args}
        if call_id:
            entry["id"] = call_id
        self.tool_calls.append(entry)
        arrival = next(self._arrivals)
        # where the model asked for it; a call no answer asked for: after those of its turn, as it came
        self._order.append((asked[0], asked[1], arrival) if asked is not None else (self.calls, 1 << 30, arrival))
        if answer.error is not None:
            self.tool_errors.append({"name": name, "error": answer.error})
        line = {
            "turn": self.calls,
            "name": name,
            "arguments": args,
            "id": call_id,
            "result": answer.content,
            "error": answer.error,
            "source": answer.source,
        }
        if asked is not None:
            line["asked"] = {"call": asked[0], "index": asked[1]}
        if answer.sets is not None:  # what it changed in the case's state (`ToolFixtures.state`)
            line["sets"] = dict(answer.sets)
        try:
            self.writer.write("tool", line)
        except DiskFull as exc:
            self.fail(exc)
            raise
        return answer

    def _claim(self, name: str, args: Any, call_id: str | None) -> list[Any] | None:
        """The model's request this tool call answers (marked as answered): the one with
        its id, else the first unanswered one of the same name and arguments, latest
        model call first; None when no answer asked for it."""
        if call_id:
            found = next((a for a in self._asked if a[2] == call_id and not a[5]), None)
        else:
            by_call = sorted(self._asked, key=lambda a: (-a[0], a[1]))
            found = next((a for a in by_call if not a[5] and a[3] == name and a[4] == args), None)
        if found is not None:
            found[5] = True
        return found

    def agent_record(self, unit: str, writer: TrajectoryWriter, stop: str) -> dict[str, Any]:
        """The `agent` fields of every agent sample's results line (a conversation's
        too): its unit, trajectory, how it stopped, its calls, tool errors, duration and,
        for a case with state, the tools' final state (`state`)."""
        agent: dict[str, Any] = {
            "unit": unit,
            "trajectory": writer.relpath,
            "attempt": writer.attempt,
            "stop": stop,
            "model_calls": self.calls,
            "cached_calls": self.cached_calls,
            "tool_errors": list(self.tool_errors),
            "duration_ms": round((time.monotonic() - self.started) * 1000, 3),
        }
        if self.fixtures.state is not None:
            agent["state"] = self.fixtures.state
        return agent

    def sample(self, case: Case, arm: str, seed: int, output: str, agent: dict[str, Any], **kw: Any) -> Sample:
        """The sample's `results.jsonl` line: what its calls used, cost and hashed, its
        `output` and `agent` fields; `kw`: `model` (when it made no call), `tool_calls`
        (its trace, redacted), `turns`, `termination`."""
        last = self.last
        return Sample(
            case_id=case.id,
            tags=case.tags,
            arm=arm,
            index=self.key[2],
            seed=seed,
            model=last.model if last is not None else kw["model"],
            output=output,
            tool_calls=tuple(kw.get("tool_calls", self.trace())),
            finish_reason=last.finish_reason if last is not None else None,
            usage=self.usage,
            latency_ms=agent["duration_ms"],
            cost_usd=self.cost_usd,
            request_hash=self.trajectory_hash(),
            system_fingerprint=last.system_fingerprint if last is not None else None,
            cached=self.calls > 0 and self.cached_calls == self.calls,
            cost_avoided_usd=self.avoided_usd,
            turns=kw["turns"],
            agent=agent,
            termination=kw.get("termination"),
        )

    @property
    def usage(self) -> Usage:
        return Usage(self.usage_in, self.usage_out)

    def trace(self) -> list[dict[str, Any]]:
        """The sample's tool calls in the model's order (the order its answers asked for
        them, whatever order the tools finished in): those executed through evalkit (the
        tool loop's, or a program's at its tools URL), else those the model's answers
        asked for (a program that runs its tools itself and reports none)."""
        if not self.tool_calls:
            return list(self.answer_tool_calls)
        order = sorted(range(len(self.tool_calls)), key=lambda i: self._order[i])
        return [self.tool_calls[i] for i in order]

    def trajectory_hash(self) -> str:
        """sha256 over the request hashes of the sample's calls, in order."""
        return hashlib.sha256("\n".join(self._hashes).encode("ascii")).hexdigest()

    def track(self, task: asyncio.Task[Any]) -> None:
        """Count `task` (a proxy request being answered) as in flight for this sample."""
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)

    def _first_of_twins(self, args: dict[str, Any], call: int, sample: str) -> AbstractAsyncContextManager[Any]:
        """Hold a twin's call while the same call of its twin is in flight (`TwinShare`),
        so the answer is paid once and replayed from the cache by the second."""
        if self.share is None:
            return contextlib.nullcontext()
        c = self.client
        ident = (c.cache_endpoint, c.endpoint.model, request_hash(c.request_body(**args)), call, sample, self.key[2])
        return self.share.hold(ident)

    async def finish(self, reason: str) -> None:
        """The sample is over: refuse its later calls, and cut those still in flight
        (each is written to the trajectory as cancelled; the client charges what may
        have been billed)."""
        if self.revoked is None:
            self.revoked = f"the sample {self.label} has ended ({reason})"
        me = asyncio.current_task()
        pending = [t for t in self.inflight if t is not me and not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
