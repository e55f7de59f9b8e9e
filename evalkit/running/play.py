"""A person plays a case's user against one arm, on the metered path a run's samples take.

`PlaySession` runs one conversation of a conversation suite with a person in the
simulator's place (`HumanUser`): the arm's unit answers each typed
turn through `loop.ConversationRunner`, each of its calls reserved on a ledger under
the cap before it goes out (role `generator`, as a run's agent), the suite's privacy
gate first. The play's ledger and trajectory are kept in the suite's
`simulator/human-played/<play>/`; `save` appends the finished conversation, with the
outcome the person saw, to `simulator/human-played.jsonl`.

The conversation runs on an event loop of its own in a worker thread, and the person's
side is synchronous: `start` and `say` return when the unit has answered and the
person's turn has come (or the conversation ended), so the terminal (`evalkit
converse`) and a notebook's widgets (`telling.play_ui`, whose handlers run on the
kernel's own loop) drive it alike.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import secrets
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalkit.calls.client import CallStopped, ModelClient, check_endpoint
from evalkit.calls.ledger import Ledger
from evalkit.calls.stopping import StopSignal
from evalkit.conversations.human import FACT_KEYS, HumanPlayed, case_sha256, play_checks, save_play
from evalkit.conversations.loop import ConversationRunner
from evalkit.conversations.simulator import UserTurn, split_marker
from evalkit.foundations.errors import BudgetExhausted, InputError
from evalkit.foundations.layout import HUMAN_PLAYED_DIR, LEDGER
from evalkit.foundations.records import Case, Sample, Simulator, Suite
from evalkit.running.runner import arm_base_url, derive_seed, input_hashes, seed_names
from evalkit.suites.endpoints import resolve_base_url
from evalkit.suites.suite import render_prompt

_WAIT_S = 0.2  # how often the person's side looks whether the worker thread is still alive


class PlayAbandoned(Exception):
    """The person left before an ending (end of input, the notebook's abandon): nothing is saved."""


class HumanUser:
    """The user side of a conversation played by a person (`simulator.UserSide`): each
    turn is what `ask` returns, given the conversation so far (None: the person left,
    `PlayAbandoned`); a stop marker in it ends the conversation as the simulator's does,
    its text before the marker kept as the last turn."""

    source = "person"

    def __init__(self, sim: Simulator, ask: Callable[[list[dict[str, Any]]], Awaitable[str | None]]) -> None:
        self.sim = sim
        self.ask = ask

    async def reply(
        self, case: Case, index: int, seed: int, turns: list[dict[str, Any]], should_stop: Callable[[], str | None]
    ) -> UserTurn:
        """The person's next turn (the case, index, seed and stop signal are the simulator's: unused)."""
        text = await self.ask([dict(t) for t in turns])
        if text is None:
            raise PlayAbandoned("was left before an ending")
        said, ending = split_marker(text)
        return UserTurn(said, ending)


@dataclass(frozen=True)
class PlayState:
    """Where a play stands: the conversation so far; once it `ended`, its termination
    (`cap` or `stopped` when cut, with `error`: nothing can be saved) and what it cost."""

    conversation: tuple[dict[str, Any], ...]
    ended: bool = False
    termination: str | None = None
    error: str | None = None
    cost_usd: float = 0.0

    @property
    def saveable(self) -> bool:
        return self.ended and self.error is None


def _checked(suite: Suite, case_id: str, arm: str, player: str) -> None:
    """Refuse what no play can be: a suite without a simulator, a unit evalkit does not
    answer itself, an unknown case or arm, no player name."""
    if suite.config.simulator is None:
        raise InputError("not a conversation suite: its config.json has no `simulator`", suite.path)
    if suite.config.unit.kind not in ("prompt", "agent"):
        raise InputError(f"a person plays a prompt or agent unit's user, not a {suite.config.unit.kind} unit's")
    if case_id not in {c.id for c in suite.cases}:
        raise InputError(f"--case {case_id!r}: no such case in the suite", suite.path)
    if arm not in {a.name for a in suite.config.arms}:
        raise InputError(f"--arm {arm!r}: no such arm (the suite's: {', '.join(a.name for a in suite.config.arms)})")
    if not player.strip():
        raise InputError("--player: name who plays the user (it is recorded on the saved conversation)")


class PlaySession:
    """One person playing one case's user against one arm (see the module docstring)."""

    def __init__(
        self,
        suite: Suite,
        case_id: str,
        arm: str,
        player: str,
        *,
        base_url: str | None = None,
        cost_cap_usd: float | None = None,
        allow_private_data: bool = False,
    ) -> None:
        from evalkit.pii.privacy import run_gate  # lazy: the privacy scanners load only when a play starts

        _checked(suite, case_id, arm, player)
        run_gate(suite, allowed=allow_private_data)
        self.suite, self.player = suite, player.strip()
        self.case = next(c for c in suite.cases if c.id == case_id)
        self.arm = suite.config.arm(arm)
        self.config = suite.config.for_arm(self.arm)
        config_path = Path(suite.path) / "config.json"
        suite_url = resolve_base_url("generator", suite.config.generator, base_url, config_path=config_path)
        self.url = arm_base_url(suite.config, self.arm, suite_url)
        check_endpoint(self.config.generator, self.url)
        self.cap_usd = float(suite.config.cost_cap_usd if cost_cap_usd is None else cost_cap_usd)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        self.play_id = f"{stamp}-{secrets.token_hex(3)}"
        self.folder = Path(suite.path) / HUMAN_PLAYED_DIR / self.play_id
        # the turn the conversation waits for: its loop and future, set from the person's thread
        self._waiting: tuple[asyncio.AbstractEventLoop, asyncio.Future[str | None]] | None = None
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.state = PlayState(())
        self.sample: Sample | None = None
        self.ledger: Ledger | None = None

    # -- the person's side
    def start(self) -> PlayState:
        """Start the conversation; return at the person's first turn (or its ending)."""
        if self._thread is not None:
            raise RuntimeError("the play has started")
        self.folder.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="evalkit-play", daemon=True)
        self._thread.start()
        return self._wait()

    def say(self, text: str) -> PlayState:
        """The person's turn (a stop marker ends the conversation); return when the unit
        has answered and the person's next turn has come, or the conversation ended."""
        if self._thread is None or self.state.ended:
            raise RuntimeError("the conversation is not waiting for a turn")
        if not text.strip():
            raise ValueError("an empty turn: type what the user says (or a stop marker to end)")
        self._answer(text)
        return self._wait()

    def abandon(self) -> PlayState:
        """Leave before an ending: the conversation is cut, nothing is saved."""
        if self._thread is None or self.state.ended:
            return self.state
        if self._waiting is None:  # left while the unit answers (an interrupt): the daemon thread is let go
            cost = self.ledger.committed_usd if self.ledger is not None else 0.0
            left = "was left while the agent answered"
            self.state = PlayState(self.state.conversation, True, "abandoned", left, cost)
            return self.state
        self._answer(None)
        return self._wait()

    def save(self, outcome: bool | None, note: str | None = None) -> HumanPlayed:
        """Append the ended conversation to the suite's `simulator/human-played.jsonl`
        with the outcome the person saw (True passed, False failed, None not recorded)
        and what the case's checks say of its transcript."""
        if not self.state.saveable or self.sample is None:
            raise InputError(f"nothing to save: the conversation {self.state.error or 'has not ended'}")
        play = self.played(outcome, note)
        save_play(self.suite.path, play)
        return play

    def played(self, outcome: bool | None, note: str | None = None) -> HumanPlayed:
        """The ended conversation as the line `save` writes."""
        assert self.sample is not None and self.sample.termination is not None
        inputs = {
            k: v
            for k, v in input_hashes(self.suite, [self.arm]).items()
            if k != "cases" and not k.startswith("simulator prompt")  # the person played by the case, not the prompt
        }
        play = HumanPlayed(
            play=self.play_id,
            case_id=self.case.id,
            arm=self.arm.name,
            player=self.player,
            termination=self.sample.termination,
            conversation=tuple(self.state.conversation),
            agent_model=self.config.generator.model,
            outcome=outcome,
            note=note or None,
            tool_calls=tuple(self.sample.tool_calls),
            inputs=inputs,
            case_sha256=case_sha256(self.case),
            cost_usd=self.sample.cost_usd,
            played=datetime.now(UTC).isoformat(timespec="seconds"),
            facts={k: v for k, v in (self.sample.agent or {}).items() if k in FACT_KEYS},
        )
        checks, _ = play_checks(self.case, play, self.suite.path)
        return dataclasses.replace(play, checks_passed=checks)

    def _wait(self) -> PlayState:
        """The next event of the worker thread, as the new state."""
        while True:
            try:
                kind, value = self._events.get(timeout=_WAIT_S)
                break
            except queue.Empty:
                if self._thread is not None and not self._thread.is_alive() and self._events.empty():
                    kind, value = "cut", "the conversation's thread ended unexpectedly"
                    break
        cost = self.ledger.committed_usd if self.ledger is not None else 0.0
        if kind == "turn":
            self.state = PlayState(tuple(value), cost_usd=cost)
        elif kind == "end":
            self.sample = value
            conversation = tuple(dict(t) for t in (value.agent or {}).get("conversation") or ())
            self.state = PlayState(conversation, True, value.termination, cost_usd=cost)
        else:
            cut, message = value if isinstance(value, tuple) else ("stopped", value)
            self.state = PlayState(self.state.conversation, True, cut, message, cost)
        return self.state

    # -- the conversation's side (the worker thread)
    def _answer(self, text: str | None) -> None:
        """Hand the waiting conversation the person's turn (None: they left)."""
        assert self._waiting is not None
        loop, turn = self._waiting
        self._waiting = None
        loop.call_soon_threadsafe(turn.set_result, text)

    async def _ask(self, turns: list[dict[str, Any]]) -> str | None:
        """The person's turn: the conversation waits on a future (no thread of the
        loop's blocks, so a process that exits mid-play does not hang on it)."""
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[str | None] = loop.create_future()
        self._waiting = (loop, turn)
        self._events.put(("turn", turns))
        return await turn

    async def _main(self) -> None:
        """The conversation on this thread's loop, every outcome put on the event queue."""
        try:
            self._events.put(("end", await self._converse()))
        except PlayAbandoned as exc:
            self._events.put(("cut", ("abandoned", str(exc))))
        except Exception as exc:  # noqa: BLE001 - any failure ends the play with its message, never a hang
            cut = "cap" if isinstance(exc, BudgetExhausted) and not isinstance(exc, CallStopped) else "stopped"
            self._events.put(("cut", (cut, f"was cut: {type(exc).__name__}: {exc}")))

    async def _converse(self) -> Sample:
        """One conversation, the agent's calls metered on the play's ledger."""
        config, arm = self.suite.config, self.arm
        self.ledger = Ledger(self.cap_usd, self.folder / LEDGER)
        client = ModelClient.of_run(
            config,
            "generator",
            self.config.generator,
            self.config.price,
            self.ledger,
            max_tokens_out=self.config.max_tokens_out,
            cache=None,
            replay_only=False,
            url=self.url,
        )
        try:
            signal = StopSignal(self.ledger, None, {arm.name: client})
            assert config.simulator is not None
            runner = ConversationRunner(
                self.config,
                self.folder,
                HumanUser(config.simulator, self._ask),
                should_stop=signal.should_stop,
                on_stop=signal.stop,
            )
            rendered = render_prompt(self.config, self.case, arm)
            seed_name = seed_names(config, {arm.name: self.url})[arm.name]
            seed = derive_seed(self.config.seed, self.case.id, seed_name, 0)
            system = rendered if isinstance(rendered, list) else []
            return await runner.sample(client, self.case, arm, 0, (seed, 0), list(system))
        finally:
            await client.aclose()
