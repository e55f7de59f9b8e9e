"""Human-played conversations: a person plays the simulated user's part, and the saved plays.

A person playing a case's user (`evalkit converse`, the `play_conversation` notebook:
`evalkit.running.play`) takes the simulator's place in the `loop.ConversationRunner` a
run uses. A finished play is one line of the
suite's `simulator/human-played.jsonl` (`HumanPlayed`): the case, arm, who played, the
transcript and its sha256, the ending, the agent's model and the hashes of what the
agent was given (as a judge label is bound to what was read), the outcome the person
saw, and what the case's checks say of the transcript (`play_checks`, re-run at will).
A bad line is an `InputError` naming the file and line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.checking.graders import AgentFacts, default_checks, grade_sample
from evalkit.foundations._io import MAX_LABELS_BYTES, json_lines, read_text_file, write_atomic
from evalkit.foundations._text import storable_json
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import HUMAN_PLAYED_FILE
from evalkit.foundations.records import Case

SCHEMA = "evalkit.human-played/1"
# the endings a saved play may have: a person's stop marker, the turn limit, or the agent's failure
PLAY_ENDINGS = ("user_stop", "transfer", "out_of_scope", "max_turns", "agent_error")
OUTCOMES = {"passed": True, "failed": False}
_SHA256 = frozenset("0123456789abcdef")


def transcript_sha256(turns: Sequence[Mapping[str, Any]]) -> str:
    """sha256 of a conversation's turns as canonical JSON (role and content of each)."""
    body = [{"role": t.get("role"), "content": t.get("content")} for t in turns]
    text = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def case_sha256(case: Case) -> str:
    """sha256 of one case as a run's `inputs.cases` hash reads each case (its line aside)."""
    d = {k: v for k, v in dataclasses.asdict(case).items() if k != "line"}
    return hashlib.sha256(json.dumps(d, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class HumanPlayed:
    """One line of `simulator/human-played.jsonl`: a conversation a person played (see
    the module docstring). `outcome`: what the person saw (True passed, False failed,
    None not recorded); `checks_passed`: the case's deterministic checks on the
    transcript when saved (None: the case has none)."""

    play: str
    case_id: str
    arm: str
    player: str
    termination: str
    conversation: tuple[Mapping[str, Any], ...]
    agent_model: str
    outcome: bool | None = None
    note: str | None = None
    tool_calls: tuple[Any, ...] = ()
    inputs: Mapping[str, str] = field(default_factory=dict)
    case_sha256: str | None = None
    checks_passed: bool | None = None
    cost_usd: float = 0.0
    played: str | None = None
    line: int = 0
    # what the agent's tools did in the play, as a results line's `agent` holds it (its
    # `state`, `tool_errors`), for the state and tool_errors checks
    facts: Mapping[str, Any] = field(default_factory=dict)

    @property
    def turns(self) -> int:
        """The agent's replies (as a results line's `turns`)."""
        return sum(1 for t in self.conversation if t.get("role") == "assistant")

    @property
    def output(self) -> str:
        """The final assistant message (what the checks read by default)."""
        replies = [str(t.get("content") or "") for t in self.conversation if t.get("role") == "assistant"]
        return replies[-1] if replies else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "play": self.play,
            "case_id": self.case_id,
            "arm": self.arm,
            "player": self.player,
            "outcome": None if self.outcome is None else ("passed" if self.outcome else "failed"),
            "note": self.note,
            "termination": self.termination,
            "turns": self.turns,
            "conversation": [dict(t) for t in self.conversation],
            "transcript_sha256": transcript_sha256(self.conversation),
            "tool_calls": list(self.tool_calls),
            "agent_model": self.agent_model,
            "inputs": dict(self.inputs),
            "case_sha256": self.case_sha256,
            "checks_passed": self.checks_passed,
            "cost_usd": self.cost_usd,
            "played": self.played,
            "agent": dict(self.facts),
        }

    def as_sample(self) -> dict[str, Any]:
        """The play as a results line's fields the graders read."""
        agent = {**self.facts, "conversation": [dict(t) for t in self.conversation], "stop": "final"}
        return {
            "output": self.output,
            "tool_calls": list(self.tool_calls),
            "turns": self.turns,
            "agent": agent,
            "termination": self.termination,
        }


def play_checks(case: Case, play: HumanPlayed, suite_path: str | Path | None) -> tuple[bool | None, list[str]]:
    """The case's deterministic checks on a play's transcript, as grading runs them on a
    conversation sample: (all passed, or None when the case has none; the failed checks' names)."""
    if not default_checks(case):
        return None, []
    sample = play.as_sample()
    results = grade_sample(case, sample, suite_path, AgentFacts.of(sample))
    return all(r.passed for r in results), [r.name for r in results if not r.passed]


def graded_pass(case: Case, play: HumanPlayed, suite_path: str | Path | None) -> bool | None:
    """Whether a play passed as a run's conversation is graded: its deterministic checks
    re-run on the transcript, and for a judged case (rubric, `nl_assertions`) the
    person's outcome standing for the judge. None when that cannot be told (a judged
    case whose outcome was not recorded, and no failed check)."""
    checks, _ = play_checks(case, play, suite_path)
    if checks is False:
        return False
    if not case.judged:
        return checks
    return play.outcome


# ------------------------------------------------------------------------------ the file


def _where(d: Mapping[str, Any], key: str, want: Callable[[Any], bool], says: str, p: Path, i: int) -> Any:
    """`d[key]` when `want` holds for it, else an `InputError` naming the file, line and key."""
    v = d.get(key)
    if not want(v):
        raise InputError(f"{key} must be {says}, got {json.dumps(v, default=str)[:80]}", p, i, f"$.{key}")
    return v


def _text(v: Any) -> bool:
    return isinstance(v, str) and bool(v)


def _conversation(d: Mapping[str, Any], p: Path, i: int) -> tuple[dict[str, Any], ...]:
    turns = _where(d, "conversation", lambda v: isinstance(v, list) and bool(v), "a non-empty list of turns", p, i)
    for n, t in enumerate(turns):
        if not (isinstance(t, dict) and t.get("role") in ("user", "assistant") and isinstance(t.get("content"), str)):
            raise InputError(
                'each turn must be {"role": "user"|"assistant", "content": "..."}', p, i, f"$.conversation[{n}]"
            )
    sha = _where(d, "transcript_sha256", lambda v: isinstance(v, str) and set(v) <= _SHA256, "a sha256", p, i)
    if sha != transcript_sha256(turns):
        raise InputError(
            "transcript_sha256 does not match the conversation: the transcript was edited after it was played",
            p,
            i,
            "$.transcript_sha256",
        )
    return tuple({"role": t["role"], "content": t["content"]} for t in turns)


def _outcome(d: Mapping[str, Any], p: Path, i: int) -> bool | None:
    v = d.get("outcome")
    if v is not None and v not in OUTCOMES:
        raise InputError(f'outcome must be "passed", "failed" or null, got {json.dumps(v)[:80]}', p, i, "$.outcome")
    return None if v is None else OUTCOMES[v]


def _play_line(d: Any, p: Path, i: int) -> HumanPlayed:
    """One parsed line (see `parse_human_played`)."""
    if not isinstance(d, dict):
        raise InputError('each line must be a JSON object {"play", "case_id", "arm", "player", ...}', p, i)
    if d.get("schema") != SCHEMA:
        raise InputError(f"schema must be {SCHEMA!r}, got {json.dumps(d.get('schema'))[:80]}", p, i, "$.schema")
    s = {
        k: _where(d, k, _text, "a non-empty string", p, i) for k in ("play", "case_id", "arm", "player", "agent_model")
    }
    ending = _where(d, "termination", lambda v: v in PLAY_ENDINGS, f"one of {', '.join(PLAY_ENDINGS)}", p, i)
    conversation = _conversation(d, p, i)
    replies = sum(1 for t in conversation if t["role"] == "assistant")
    _where(d, "turns", lambda v: v == replies, f"{replies} (the agent's replies in the conversation)", p, i)
    inputs = _where(
        d, "inputs", lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()), "an object", p, i
    )
    cost = _where(
        d, "cost_usd", lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v >= 0, "a cost", p, i
    )
    checks = _where(d, "checks_passed", lambda v: v is None or isinstance(v, bool), "true, false or null", p, i)
    note = _where(d, "note", lambda v: v is None or isinstance(v, str), "a string or null", p, i)
    return HumanPlayed(
        **s,
        termination=ending,
        conversation=conversation,
        outcome=_outcome(d, p, i),
        note=note,
        tool_calls=tuple(_where(d, "tool_calls", lambda v: isinstance(v, list), "a list", p, i)),
        inputs=dict(inputs),
        case_sha256=d.get("case_sha256") if isinstance(d.get("case_sha256"), str) else None,
        checks_passed=checks,
        cost_usd=float(cost),
        played=d.get("played") if isinstance(d.get("played"), str) else None,
        line=i,
        facts=_facts(d, p, i),
    )


FACT_KEYS = ("state", "tool_errors")  # what of a play's `agent` the checks read


def _facts(d: Mapping[str, Any], p: Path, i: int) -> dict[str, Any]:
    """A line's `agent` (optional: lines saved before it was kept have none): its
    `state` (an object or null) and `tool_errors` (a list)."""
    agent = _where(d, "agent", lambda v: v is None or isinstance(v, dict), "an object", p, i) or {}
    if not isinstance(agent.get("state"), dict | None) or not isinstance(agent.get("tool_errors", []), list):
        raise InputError("agent.state must be an object and agent.tool_errors a list", p, i, "$.agent")
    return {k: agent[k] for k in FACT_KEYS if k in agent}


def parse_human_played(text: str, path: str | Path) -> list[HumanPlayed]:
    """The plays of a human-played file's text; each bad line (not JSON, a missing or
    wrong key, an edited transcript, a play id given twice) an `InputError` naming the
    file, line and key."""
    p = Path(path)
    plays: list[HumanPlayed] = []
    seen: dict[str, int] = {}
    for item in json_lines(text):
        if item.error is not None:
            raise InputError(item.error, p, item.line)
        play = _play_line(item.value, p, item.line)
        if play.play in seen:
            raise InputError(f"play {play.play!r} is given twice (first on line {seen[play.play]})", p, item.line)
        seen[play.play] = item.line
        plays.append(play)
    return plays


def suite_human_played(suite_path: str | Path) -> list[HumanPlayed] | None:
    """The suite's `simulator/human-played.jsonl` (read inside the suite folder), or None when it has none."""
    p = Path(suite_path) / HUMAN_PLAYED_FILE
    if not os.path.lexists(p):
        return None
    return parse_human_played(read_text_file(p, limit=MAX_LABELS_BYTES, allow_empty=True, root=suite_path), p)


def save_play(suite_path: str | Path, play: HumanPlayed) -> Path:
    """Append a play to the suite's `simulator/human-played.jsonl` (the whole file
    rewritten through a temporary file and a rename, after its lines read back)."""
    p = Path(suite_path) / HUMAN_PLAYED_FILE
    before = read_text_file(p, limit=MAX_LABELS_BYTES, allow_empty=True, root=suite_path) if p.exists() else ""
    text = before + ("" if not before or before.endswith("\n") else "\n") + storable_json(play.to_json()) + "\n"
    parse_human_played(text, p)  # what is written reads back, the earlier lines too
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, text)
    return p
