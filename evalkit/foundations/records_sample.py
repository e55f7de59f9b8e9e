"""What one sample records and how it was graded (`Usage`, `Sample`, `CheckResult`, `Grade`),
and the cases as the run saw them (`CaseRow`, `CaseTable`). Split out of
`evalkit.foundations.records`, which re-exports every public name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from evalkit.foundations.records_base import CaseSet, Json, _check_schema, set_gate
from evalkit.foundations.records_suite import Case


@dataclass(frozen=True)
class Usage:
    """Token usage a response reported (or that evalkit counted, for a cache hit)."""

    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Sample:
    """One line of `results.jsonl`: one finished call of the unit under test."""

    case_id: str
    tags: tuple[str, ...]
    arm: str
    index: int
    seed: int
    model: str
    output: str
    tool_calls: tuple[Json, ...]
    finish_reason: str | None
    usage: Usage
    latency_ms: float
    cost_usd: float
    request_hash: str
    system_fingerprint: str | None = None
    cached: bool = False
    cost_avoided_usd: float = 0.0
    # Agent units (`evalkit.running.agents`): model calls made, and what the trajectory says
    # (`trajectory`: its path in the run folder; `stop`, `tool_errors`, `model_calls`, ...).
    # `tool_calls` then holds every tool call of every turn, in order; usage, cost and
    # latency are the sample's totals.
    turns: int | None = None
    agent: dict[str, Json] | None = None
    # A conversation (`evalkit.conversations`): how it ended (`user_stop`, `transfer`,
    # `out_of_scope`, `max_turns`); `turns` then counts the agent's replies.
    termination: str | None = None


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check on one sample; `reason` says why it failed."""

    name: str
    passed: bool
    reason: str = ""


@dataclass(frozen=True)
class Grade:
    """One line of `grades.jsonl`: every check of one sample, and the verdict.

    `passed` is None when the sample could not be graded (judge error, `error` says
    why), or when its deterministic checks passed and the judge's pass/fail is held
    (`judge_held` says why: the judge is not calibrated): never a pass. `judge_passed`
    is what the judge's score said against the threshold, kept whether or not it
    counts; a held judge's result is not among `checks`.
    """

    case_id: str
    arm: str
    index: int
    passed: bool | None
    checks: tuple[CheckResult, ...]
    judge_version: str | None = None
    judge_score: int | None = None
    judge_reason: str | None = None
    judge_cost_usd: float = 0.0
    activated: bool | None = None
    error: str | None = None
    judge_model: str | None = None
    judge_same_model_override: bool = False  # judge = generator model, allowed by config (recorded)
    judge_passed: bool | None = None
    judge_held: str | None = None
    judge_uncalibrated_override: bool = False  # counted although uncalibrated: the user opted out (recorded)
    judge_unstable: bool = False  # asked again (`grade --judge-repeats`), its verdict flipped
    # What the judge's answer cost when first paid and a cache hit avoided now (the
    # judge's list price is judge_cost_usd + judge_cost_avoided_usd), and its tokens
    # (the seed's judge_tokens_in/out; None: no judge answer). Lines before: 0 / None.
    judge_cost_avoided_usd: float = 0.0
    judge_tokens_in: int | None = None
    judge_tokens_out: int | None = None


# --- the cases as the run saw them ---------------------------------------------------------


@dataclass(frozen=True)
class CaseRow:
    """One case of a run, as the run saw it: its set (what it is gated on), tags, and
    whether the judge scores it."""

    id: str
    set: CaseSet = "capability"
    tags: tuple[str, ...] = ()
    judged: bool = False

    @property
    def gate(self) -> str:
        return set_gate(self.set)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "set": self.set, "tags": list(self.tags), "judged": self.judged}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CaseRow:
        return cls(str(d["id"]), str(d.get("set") or "capability"), tuple(d.get("tags") or ()), bool(d.get("judged")))


@dataclass(frozen=True)
class CaseTable:
    """The run's case table (`case-table.json`), written by `run` (and `ingest`) when the
    run starts: a later edit of the suite never changes what an old run is gated on.
    `source` says where it came from: `run`, `ingest`, or, for a run folder without one
    (evalkit 0.1), what it was rebuilt from."""

    SCHEMA = "evalkit.case-table/1"

    cases: tuple[CaseRow, ...]
    source: str = "run"

    @classmethod
    def from_cases(cls, cases: Iterable[Case], source: str = "run") -> CaseTable:
        return cls(tuple(CaseRow(c.id, c.set, tuple(c.tags), c.judged) for c in cases), source)

    def by_id(self) -> dict[str, CaseRow]:
        return {c.id: c for c in self.cases}

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.SCHEMA, "source": self.source, "cases": [c.to_json() for c in self.cases]}

    @classmethod
    def from_json(cls, d: Any) -> CaseTable:
        d = _check_schema(d, cls.SCHEMA, "a case table")
        return cls(tuple(CaseRow.from_json(c) for c in d.get("cases") or ()), str(d.get("source") or "run"))
