"""The simulated user: its prompt from a case's scenario, its view of the conversation, its endings.

The simulator sees the conversation from the user's side: its system message is the
suite's `simulator/prompt-vN.md` with the case's `input.user` filled in, its own earlier
turns are `assistant` messages and the agent's replies are `user` messages. Its seed
derives from (case, sample index), never the arm, and its calls carry no arm in their
cache key, so two arms whose agents said the same thing send the same request and meet
the same reply: the first pays, the second replays it from the response cache at $0
(a twin call in flight is held until the first is answered).

A reply ending the conversation carries a stop marker (`STOP_MARKERS`); the text
before the marker is kept as the user's last turn (tau2-bench drops it, #517).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from evalkit.calls.cache import ResponseCache
from evalkit.calls.client import Completion, ModelClient, request_hash
from evalkit.calls.ledger import Ledger
from evalkit.foundations.records import Case, Config, Simulator
from evalkit.suites.suite_conversation import STOP_MARKERS, USER_KEYS

Hold = Callable[[tuple[Any, ...]], AbstractAsyncContextManager[None]]


@dataclass(frozen=True)
class UserTurn:
    """One turn of the simulated user: its text (a stop marker taken off), the ending
    the marker named (None: the conversation goes on), and the call that wrote it."""

    text: str
    ending: str | None
    cost_usd: float = 0.0
    cached: bool = False
    usage: tuple[int, int] = (0, 0)


def scenario_prompt(sim: Simulator, case: Case) -> str:
    """The simulator's system message: its prompt with the case's `input.user` fields
    substituted (a field the case leaves out reads "(none)"); the values are inserted
    as text, never read as placeholders."""
    user = case.input.get("user") if isinstance(case.input, dict) else None
    fields = {key: "(none)" for key in USER_KEYS}
    if isinstance(user, dict):
        fields.update({k: str(v) for k, v in user.items() if k in USER_KEYS})
    return string.Template(sim.prompt).safe_substitute(fields)


def split_marker(text: str) -> tuple[str, str | None]:
    """A simulator reply as (the user's text, the ending its first stop marker names);
    the text before the marker is kept, whatever follows it is dropped."""
    found = [(text.find(m), m) for m in STOP_MARKERS if m in text]
    if not found:
        return text.strip(), None
    at, marker = min(found)
    return text[:at].strip(), STOP_MARKERS[marker]


def simulator_messages(system: str, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the simulator sees it: its scenario, then each turn with the
    roles swapped (the agent's text as `user`, its own as `assistant`). The simulator
    opens with a `user` turn asking for the first message."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    if not turns:
        messages.append({"role": "user", "content": "(The agent is waiting. Write your first message.)"})
    for t in turns:
        messages.append({"role": "assistant" if t["role"] == "user" else "user", "content": t["content"] or ""})
    return messages


class UserSide(Protocol):
    """Who plays the user of a conversation (`loop.ConversationRunner`): the simulated
    user, or a person (`evalkit.conversations.human.HumanUser`). `source` names it on
    the trajectory's `user` lines; `sim` is the suite's simulator (its prompt file)."""

    sim: Simulator
    source: str

    async def reply(
        self, case: Case, index: int, seed: int, turns: list[dict[str, Any]], should_stop: Callable[[], str | None]
    ) -> UserTurn: ...


class SimulatedUser:
    """The simulated user of one run: `reply` writes the user's next turn through the
    simulator's client (role `simulator` on the run's ledger)."""

    source = "simulator"

    def __init__(self, sim: Simulator, client: ModelClient, hold: Hold | None = None) -> None:
        self.sim = sim
        self.client = client
        self.hold = hold  # held per request while one is in flight (`cache.InFlight.hold`)

    async def reply(
        self,
        case: Case,
        index: int,
        seed: int,
        turns: list[dict[str, Any]],
        should_stop: Callable[[], str | None],
    ) -> UserTurn:
        """The user's next turn given the conversation so far (`turns`). Raises what the
        client raises: a budget, ceiling or stop refusal, or the failure of its retries."""
        args: dict[str, Any] = {
            "messages": simulator_messages(scenario_prompt(self.sim, case), turns),
            "temperature": self.sim.temperature,
            "seed": seed,
        }
        held = nullcontext() if self.hold is None else self.hold(self._ident(args, index))
        async with held:
            c: Completion = await self.client.complete(
                **args, sample_index=index, key=f"{case.id}/simulator/{index}#{len(turns) + 1}", should_stop=should_stop
            )
        text, ending = split_marker(c.text)
        return UserTurn(text, ending, c.cost_usd, c.cached, (c.usage.prompt_tokens, c.usage.completion_tokens))

    def _ident(self, args: dict[str, Any], index: int) -> tuple[Any, ...]:
        c = self.client
        return ("simulator", c.cache_endpoint, c.endpoint.model, request_hash(c.request_body(**args)), index)


def simulator_client(
    config: Config, ledger: Ledger, cache: ResponseCache | None, url: str | None, replay_only: bool
) -> ModelClient:
    """The simulator's client: role `simulator` on the run's one ledger (each call
    reserved at its worst case, `max_tokens_in` x its input price + its own
    `max_tokens_out` x its output price), on the run's response cache, with the suite's
    retry, timeout and rate-limit settings."""
    sim = config.simulator
    assert sim is not None
    return ModelClient.of_run(
        config,
        "simulator",
        sim.endpoint,
        sim.price,
        ledger,
        max_tokens_out=sim.max_tokens_out,
        cache=cache,
        replay_only=replay_only,
        url=url,
    )
