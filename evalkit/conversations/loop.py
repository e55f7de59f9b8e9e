"""One conversation: the simulated user and the unit under test taking turns to an ending.

A conversation sample opens with the case's `input.first_message` (else the simulator
writes it), then the unit answers each user turn (the prompt unit: one call with the
suite's system message and the conversation as messages; evalkit's tool loop: calls
and fixture-answered tools until a reply without tool calls, its tool messages kept in
the agent's history; the user's program (a command unit, `Program`): run once a turn
with the conversation so far in its case, its stdout the reply) and the simulator
writes the next, until an ending:

* `user_stop`, `transfer`, `out_of_scope`: the simulator's stop marker (its text before
  the marker kept as the last user turn);
* `max_turns`: the agent answered `input.max_turns` times (default 10);
* `agent_error`: an agent call failed after its retries, or the program's turn failed
  (a non-zero exit, its timeout: its stderr tail recorded) (graded: the agent failed);
* `simulator_error`: a simulator call failed after its retries (counted apart, as
  tau2-bench leaves infrastructure errors out of pass^k).

A call the cap refuses (either side), a ceiling breach, a full disk or a stopped run
cuts the conversation: its trajectory ends `errored` with termination `cap` (or `stopped`)
and it gets no `results.jsonl` line; the run ends INCOMPLETE. Every turn is a trajectory
line (`user`, `assistant`, with the agent's `model_call` and `tool` lines between);
the results line carries the transcript (`agent.conversation`), `turns` (the agent's
replies) and `termination`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evalkit.calls.client import CallStopped
from evalkit.calls.proxy import openai_tool_calls
from evalkit.calls.sandbox import Redactor
from evalkit.calls.session import SampleSession, TwinShare
from evalkit.conversations.simulator import UserSide, UserTurn
from evalkit.foundations.errors import (
    BudgetExhausted,
    CeilingBreached,
    DiskFull,
    InputTooLong,
    ReplayMiss,
    UnitCallError,
)
from evalkit.foundations.records import Arm, Case, Config, Sample
from evalkit.runfolder.trajectories import TrajectoryWriter
from evalkit.suites.suite_conversation import DEFAULT_MAX_TURNS
from evalkit.suites.units import ToolFixtures, tool_names

Key = tuple[str, str, int]
# a call that failed after its retries: the conversation ends with the side's error
_CALL_FAILED = (InputTooLong, ReplayMiss, UnitCallError)
# what cuts a conversation with no result line: the run stops
_CUT = (BudgetExhausted, CeilingBreached, DiskFull, CallStopped)


@dataclass
class _Talk:
    """A conversation in progress: its turns (`role`, `content`), the agent's own
    history (with its tool messages) and what the simulator's calls cost."""

    system: list[dict[str, Any]]
    turns: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    sim_cost_usd: float = 0.0
    sim_calls: int = 0
    sim_cached: int = 0
    # the program's turn (a command unit): the conversation so far -> its reply
    program: Callable[[list[dict[str, Any]]], Awaitable[str]] | None = None
    failure: dict[str, Any] = field(default_factory=dict)  # why the agent's turn failed (`agent_error`)
    redactor: Redactor | None = None  # the program's: what it reported is written redacted


def max_turns_of(case: Case) -> int:
    """The agent replies a conversation allows (`input.max_turns`, default 10)."""
    n = case.input.get("max_turns") if isinstance(case.input, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else DEFAULT_MAX_TURNS


# One agent turn of the user's program: (the conversation's session, its redactor, the
# case, the arm, the agent's seed, the conversation so far) -> its reply.
ProgramTurn = Callable[[SampleSession, Redactor, Case, Arm, int, list[dict[str, Any]]], Awaitable[str]]


class Program(Protocol):
    """The user's program as a conversation's agent (`evalkit.running.agents.AgentRunner`):
    `turn` runs it once, sandboxed, its model calls through the metering proxy on the
    conversation's one `SampleSession`, and returns its reply (see `AgentRunner.turn`);
    `redactor` holds the secrets taken out of what it returns."""

    def redactor(self) -> Redactor: ...

    @property
    def turn(self) -> ProgramTurn: ...


class ConversationRunner:
    """Runs the conversations of one arm of a run (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        run_path: Path,
        user: UserSide,
        *,
        should_stop: Callable[[], str | None],
        on_stop: Callable[[str], None],
        share: Callable[[Key], TwinShare | None] | None = None,
        program: Program | None = None,
    ) -> None:
        self.config = config
        self.run_path = Path(run_path)
        self.user = user
        self.should_stop = should_stop
        self.on_stop = on_stop
        self.share = share
        self.program = program  # a command unit's: the user's program answers each turn

    def session(self, client: Any, case: Case, arm: Arm, index: int, writer: TrajectoryWriter) -> SampleSession:
        """The agent's calls of one conversation, metered as an agent sample's are."""
        key = (case.id, arm.name, index)
        agent = self.config.unit.kind == "agent"
        return SampleSession(
            client=client,
            key=key,
            writer=writer,
            fixtures=ToolFixtures.of_case(case.input, tool_names(self.config) if agent else None),
            should_stop=self.should_stop,
            on_stop=self.on_stop,
            share=None if self.share is None else self.share(key),
        )

    async def sample(
        self, client: Any, case: Case, arm: Arm, index: int, seeds: tuple[int, int], system: list[dict[str, Any]]
    ) -> Sample:
        """One conversation (`seeds`: the agent's, the simulator's): its `Sample`, or the
        exception that cut it (see the module docstring)."""
        redactor = self.program.redactor() if self.program is not None else None
        writer = TrajectoryWriter(self.run_path, case.id, arm.name, index, redactor.fields if redactor else None)
        session = self.session(client, case, arm, index, writer)
        talk = _Talk(system=[m for m in system if m.get("role") == "system"])
        if self.program is not None and redactor is not None:
            talk.program = functools.partial(self.program.turn, session, redactor, case, arm, seeds[0])
            talk.redactor = redactor
        writer.write(
            "start",
            {
                "case_id": case.id,
                "arm": arm.name,
                "index": index,
                "seed": seeds[0],
                "unit": self.config.unit.kind,
                "simulator_seed": seeds[1],
            },
        )
        try:
            ending = await self._talk(session, writer, talk, case, index, seeds)
        except BaseException as exc:
            await session.finish("cut")
            cut = "cap" if isinstance(exc, BudgetExhausted) and not isinstance(exc, CallStopped) else "stopped"
            self._end(
                writer,
                session,
                talk,
                {"status": "errored", "termination": cut, "error": f"{type(exc).__name__}: {exc}"},
            )
            raise
        await session.finish("finished")
        self._end(writer, session, talk, {"status": "finished", "termination": ending})
        return self._sample(session, writer, talk, case, arm, seeds[0], ending)

    async def _talk(
        self,
        session: SampleSession,
        writer: TrajectoryWriter,
        talk: _Talk,
        case: Case,
        index: int,
        seeds: tuple[int, int],
    ) -> str:
        """Turns until an ending; returns it. Raises what cuts the conversation."""
        first = case.input.get("first_message") if isinstance(case.input, dict) else None
        if isinstance(first, str):
            self._user_turn(writer, talk, UserTurn(first, None), "first_message")
        else:
            ending = await self._simulate(writer, talk, case, index, seeds[1])
            if ending is not None:
                return ending
        for n in range(1, max_turns_of(case) + 1):
            try:
                reply = await self._answer(session, talk, seeds[0])
            except _CUT:
                raise
            except _CALL_FAILED as exc:
                self._failed_turn(writer, talk, n, exc)
                return "agent_error"
            talk.turns.append({"role": "assistant", "content": reply})
            writer.write("assistant", {"turn": n, "content": reply})
            if n == max_turns_of(case):
                return "max_turns"
            ending = await self._simulate(writer, talk, case, index, seeds[1])
            if ending is not None:
                return ending
        return "max_turns"

    async def _simulate(self, writer: TrajectoryWriter, talk: _Talk, case: Case, index: int, seed: int) -> str | None:
        """The simulator's next turn, recorded; the ending it names (or
        `simulator_error` when its call failed after its retries), else None."""
        try:
            turn = await self.user.reply(case, index, seed, talk.turns, self.should_stop)
        except _CUT:
            raise
        except _CALL_FAILED as exc:
            writer.write(
                "user", {"turn": len(talk.turns) + 1, "status": "failed", "error": f"{type(exc).__name__}: {exc}"}
            )
            talk.sim_cost_usd += float(getattr(exc, "cost_usd", 0.0) or 0.0)
            return "simulator_error"
        talk.sim_calls += 1
        talk.sim_cached += int(turn.cached)
        talk.sim_cost_usd += turn.cost_usd
        self._user_turn(writer, talk, turn, self.user.source)
        return turn.ending

    @staticmethod
    def _user_turn(writer: TrajectoryWriter, talk: _Talk, turn: UserTurn, source: str) -> None:
        """Record a user turn (one with no text before its stop marker adds no turn)."""
        line: dict[str, Any] = {"turn": len(talk.turns) + 1, "content": turn.text, "source": source}
        if source == "simulator":
            line.update(cost_usd=turn.cost_usd, cached=turn.cached, ending=turn.ending)
        writer.write("user", line)
        if turn.text:
            talk.turns.append({"role": "user", "content": turn.text})
            talk.history.append({"role": "user", "content": turn.text})

    @staticmethod
    def _failed_turn(writer: TrajectoryWriter, talk: _Talk, n: int, exc: BaseException) -> None:
        """Record the agent's failed turn `n`: why, and a program's exit status and stderr tail."""
        talk.failure = {"error": f"{type(exc).__name__}: {exc}"}
        for name in ("exit_status", "stderr_tail"):
            if getattr(exc, name, None) is not None:
                talk.failure[name] = getattr(exc, name)
        writer.write("assistant", {"turn": n, "status": "failed", **talk.failure})

    async def _answer(self, session: SampleSession, talk: _Talk, seed: int) -> str:
        """The unit's reply to the last user turn: one call (prompt unit), the tool
        loop's calls until a reply without tool calls (agent unit), or one run of the
        user's program (command unit)."""
        if talk.program is not None:
            reply = await talk.program([dict(t) for t in talk.turns])
            talk.history.append({"role": "assistant", "content": reply})
            return reply
        cfg = self.config
        tools = list(cfg.tools) or None if cfg.unit.kind == "agent" else None
        stop = list(cfg.stop) or None
        steps = cfg.unit.max_turns if tools else 1
        for _ in range(steps):
            c = await session.model_call(
                messages=talk.system + talk.history, tools=tools, temperature=cfg.temperature, seed=seed, stop=stop
            )
            if not c.tool_calls or tools is None:
                talk.history.append({"role": "assistant", "content": c.text})
                return c.text
            calls = openai_tool_calls(c.tool_calls, f"call_{session.calls}_")
            talk.history.append({"role": "assistant", "content": c.text or None, "tool_calls": calls})
            for call, tc in zip(calls, c.tool_calls, strict=True):
                answer = session.tool(str(tc.get("name")), tc.get("arguments"), call["id"])
                talk.history.append({"role": "tool", "tool_call_id": call["id"], "content": answer.content})
        raise UnitCallError(f"the agent made {steps} tool-calling steps in one turn without a reply (unit.max_turns)")

    def _end(self, writer: TrajectoryWriter, session: SampleSession, talk: _Talk, end: dict[str, Any]) -> None:
        line = {
            **end,
            "turns": sum(1 for t in talk.turns if t["role"] == "assistant"),
            "model_calls": session.calls,
            "tool_calls": len(session.tool_calls),
            "cost_usd": session.cost_usd,
            "simulator_cost_usd": talk.sim_cost_usd,
            "duration_ms": round((time.monotonic() - session.started) * 1000, 3),
            **talk.failure,
        }
        if session.fixtures.state is not None:  # the tools' final state (a `state` check's)
            line["state"] = session.fixtures.state
        try:
            writer.write("end", line)
        finally:
            writer.close()

    def _sample(
        self,
        session: SampleSession,
        writer: TrajectoryWriter,
        talk: _Talk,
        case: Case,
        arm: Arm,
        seed: int,
        ending: str,
    ) -> Sample:
        """The conversation's `results.jsonl` line: the final assistant message as its
        output, every turn in `agent.conversation`, the agent's usage and cost (the
        simulator's apart, in `agent.simulator_cost_usd`)."""
        replies = [t["content"] for t in talk.turns if t["role"] == "assistant"]
        # "stop": the tool loop ended each reply; how the conversation ended is `termination`
        agent = session.agent_record(self.config.unit.kind, writer, "final")
        agent.update(
            conversation=[dict(t) for t in talk.turns],
            simulator_calls=talk.sim_calls,
            simulator_cached_calls=talk.sim_cached,
            simulator_cost_usd=talk.sim_cost_usd,
            simulator_prompt=self.user.sim.prompt_file,
            **{("turn_error" if k == "error" else k): v for k, v in talk.failure.items()},
        )
        if self.program is not None:
            agent["isolation"] = self.config.unit.isolation
        return session.sample(
            case,
            arm.name,
            seed,
            replies[-1] if replies else "",
            agent,
            model=self.config.generator.model,
            turns=len(replies),
            termination=ending,
            # the tool calls the program reported, as its trajectory holds them: redacted
            tool_calls=talk.redactor.fields(session.trace()) if talk.redactor is not None else session.trace(),
        )
