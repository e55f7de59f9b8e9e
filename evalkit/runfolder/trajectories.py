"""Trajectories: what one agent sample did, one JSON line per event, written as it happens.

``trajectories/<case>/<arm>/sample-<n>.jsonl`` in the run folder (n from 1, as the
sample files). Every line has `type`, `attempt` (1 for the first time the sample ran; a
resume that runs it again appends attempt 2 after it) and `t` (seconds since the epoch):

* ``start``: the sample began (`case_id`, `arm`, `index`, `seed`, `unit`);
* ``model_call``: one call the agent made (`call`: its ordinal in the attempt, from 1;
  `endpoint`: ``chat``, ``completion`` or ``responses``; `wire`: ``anthropic`` or
  ``gemini`` when the agent spoke that provider's API (its request translated to chat:
  `evalkit.calls.anthropic_api`, `evalkit.calls.gemini_api`), absent for OpenAI's;
  `request`: the messages, prompt or Responses ``input``, tools and parameters sent;
  `answer`: text, tool calls, finish reason; `usage`, `cost_usd`,
  `latency_ms`, `cached`, `attempts` (HTTP requests the endpoint received for it: 0 for
  a cache hit or a refused call), `status` ``ok`` | ``refused`` | ``failed`` |
  ``cancelled``, `error`). A call that goes out to the endpoint first writes a line
  with `status` ``sent`` (its `call`, `endpoint`, `request`), before its first attempt,
  so a killed run leaves a line for every request the endpoint received; its outcome
  line follows, and `trajectory_of` shows that one alone (a ``sent`` line stays only
  for a call that never ended);
* ``tool``: one tool call and its result (`name`, `arguments`, `id`, `result`, `error`,
  `source`: ``fixture``, ``default``, ``any-tool default``, ``no fixture``, ``unknown
  tool`` or ``reported`` (the agent ran the tool itself and said what it got); `turn`:
  the model calls made before it; `asked`: ``{"call", "index"}``, the model call whose
  answer asked for it and its position there, when one did: readers show tool lines in
  that order, the model's, whatever order the tools finished in);
* ``end``: the attempt finished (`status` ``finished`` | ``errored``, `stop`, `output`,
  `turns`, `tool_calls`, `usage`, `cost_usd`, `duration_ms`, `error`, and for a program
  `exit_status` and `stderr_tail`).

An attempt without an ``end`` line was cut off (a killed run): `read_trajectory` shows
the last attempt, and says whether it finished. Lines are whole-line appends
(`runs.AppendLog`): a kill never leaves a torn line that a later append glues onto.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.foundations._io import iter_jsonl
from evalkit.foundations.layout import TRAJECTORIES, trajectory_relpath
from evalkit.runfolder.runs import AppendLog

__all__ = ["TRAJECTORIES", "trajectory_relpath"]  # the layout's names, importable from here as before


class TrajectoryWriter:
    """Appends one attempt of one sample to its trajectory file, line by line.

    The attempt number is one more than the attempts the file already holds (a resumed
    sample starts over after them). Raises `DiskFull` (from `AppendLog`) when there is no
    room; what was written stays whole lines."""

    def __init__(
        self,
        run_path: str | Path,
        case_id: str,
        arm: str,
        index: int,
        redact: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.redact = redact  # applied to every line before it is written (a sandboxed program's secrets)
        self.relpath = trajectory_relpath(case_id, arm, index)
        self.path = Path(run_path) / self.relpath
        self.path.parent.mkdir(parents=True, exist_ok=True)
        before = 0
        if self.path.exists():
            before = sum(1 for ev in iter_jsonl(self.path) if ev.get("type") == "start")
        self.attempt = before + 1
        self._log: AppendLog | None = AppendLog(self.path)

    def write(self, kind: str, fields: dict[str, Any]) -> None:
        """Append one line of `kind` (`start`, `model_call`, `tool`, `end`); after `close`, nothing."""
        if self._log is None:
            return
        if self.redact is not None:
            fields = self.redact(fields)
        self._log.append({"type": kind, "attempt": self.attempt, "t": round(time.time(), 3), **fields})

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass(frozen=True)
class Turn:
    """One model call of a trajectory and the tool calls its answer led to."""

    number: int  # from 1
    call: dict[str, Any]
    tools: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Trajectory:
    """The last attempt of one sample's trajectory file (`read_trajectory`)."""

    case_id: str
    arm: str
    index: int
    attempt: int  # the attempt shown (the last); 0 when the file has none
    attempts: int
    events: tuple[dict[str, Any], ...]

    @property
    def finished(self) -> bool:
        """Whether the attempt wrote its `end` line (a killed one did not)."""
        return bool(self.events) and self.events[-1].get("type") == "end"

    @property
    def end(self) -> dict[str, Any] | None:
        return self.events[-1] if self.finished else None

    @property
    def model_calls(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == "model_call"]

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tool lines in the model's order (`asked`: the call and position of the
        model's request each answers), whatever order they were written in."""
        return sorted((e for e in self.events if e.get("type") == "tool"), key=_model_order)

    def turns(self) -> list[Turn]:
        """The model calls in order, each with the tool lines written after it (tool
        lines before the first call form a turn 0 with an empty call)."""
        out: list[Turn] = []
        call: dict[str, Any] | None = None
        tools: list[dict[str, Any]] = []
        calls = 0
        for e in self.events:
            if e.get("type") == "model_call":
                if call is not None or tools:
                    out.append(Turn(calls, call or {}, tuple(tools)))
                calls += 1
                call, tools = e, []
            elif e.get("type") == "tool":
                tools.append(e)
        if call is not None or tools:
            out.append(Turn(calls, call or {}, tuple(tools)))
        return [Turn(t.number, t.call, tuple(sorted(t.tools, key=_model_order))) for t in out]

    def texts(self) -> list[str]:
        """Every answer text of the model, in order, then the final output."""
        out = [str((c.get("answer") or {}).get("text") or "") for c in self.model_calls]
        if self.end is not None and self.end.get("output") is not None:
            out.append(str(self.end["output"]))
        return out

    def requests_text(self) -> str:
        """Everything the agent sent the model (prompts and message contents), joined."""
        parts: list[str] = []
        for c in self.model_calls:
            req = c.get("request") or {}
            if isinstance(req.get("prompt"), str):
                parts.append(req["prompt"])
            for m in req.get("messages") or ():
                content = m.get("content") if isinstance(m, dict) else None
                if isinstance(content, str):
                    parts.append(content)
                elif isinstance(content, list):
                    parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return "\n".join(parts)


def _model_order(line: dict[str, Any]) -> tuple[int, int]:
    """Where the model asked for a tool line's call (its `asked` call and position);
    one it did not ask for sorts after those of its turn (a stable sort keeps its place)."""
    asked = line.get("asked")
    if isinstance(asked, dict) and isinstance(asked.get("call"), int) and isinstance(asked.get("index"), int):
        return asked["call"], asked["index"]
    return int(line.get("turn") or 0), 1 << 30


def read_trajectory(run_path: str | Path, case_id: str, arm: str, index: int) -> Trajectory | None:
    """The sample's trajectory (its last attempt), or None when it has no file."""
    path = Path(run_path) / trajectory_relpath(case_id, arm, index)
    if not path.is_file():
        return None
    return trajectory_of(iter_jsonl(path), case_id, arm, index)


def trajectory_of(lines: Iterable[dict[str, Any]], case_id: str, arm: str, index: int) -> Trajectory:
    """The last attempt of a trajectory file's lines; a call's ``sent`` line is left out
    once its outcome line is there."""
    attempts: dict[int, list[dict[str, Any]]] = {}
    for ev in lines:
        attempts.setdefault(int(ev.get("attempt") or 1), []).append(ev)
    last = max(attempts) if attempts else 0
    events = attempts.get(last, [])
    ended = {e.get("call") for e in events if e.get("type") == "model_call" and e.get("status") != "sent"}
    shown = [
        e
        for e in events
        if not (e.get("type") == "model_call" and e.get("status") == "sent" and e.get("call") in ended)
    ]
    return Trajectory(case_id, arm, index, last, len(attempts), tuple(shown))


def sample_indices(run_path: str | Path, case_id: str, arm: str) -> list[int]:
    """The sample indices (from 0) that have a trajectory file for (case, arm)."""
    folder = Path(run_path) / TRAJECTORIES / case_id / arm
    out = []
    for p in folder.glob("sample-*.jsonl") if folder.is_dir() else ():
        n = p.stem.removeprefix("sample-")
        if n.isdigit() and int(n) >= 1:
            out.append(int(n) - 1)
    return sorted(out)
