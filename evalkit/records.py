"""Typed, immutable records shared by every step: suite -> run -> grades -> stats.

Only data lives here; loading, validation and behaviour live in the module of their
concern (`suite`, `runner`, `graders`, ...). Every record is a frozen dataclass.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

Json = Any
CaseSet = str  # "capability" (gated on pass@k), "regression" (pass^k), or any other name (not gated)

# --- case sets: what each is gated on ---------------------------------------------------

CASE_SETS = ("capability", "regression")  # the gated sets; any other set is measured, not gated
SET_GATES = {"capability": "pass@k", "regression": "pass^k"}
NO_GATE = "none"
SET_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def set_gate(case_set: str) -> str:
    """What a case's set is gated on: `pass@k` (capability), `pass^k` (regression), or
    `none` for any other set, whose cases are measured and shown but never gated (as the
    agent-evals harness treats a set it does not know)."""
    return SET_GATES.get(case_set, NO_GATE)


def ungated_set_warning(case_set: str) -> str:
    """The warning for a case in a set that is not gated, with the gated set it may be a
    typo of (so a misspelt `regresion` does not silently drop a case from the gate)."""
    close = difflib.get_close_matches(case_set, CASE_SETS, n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"set {case_set!r} is neither capability nor regression: its cases are measured and shown "
        f'with gate "none", never gated{hint}'
    )


@dataclass(frozen=True)
class Check:
    """One declarative deterministic check of a case (`cases.jsonl` -> `checks[]`).

    `kind` is a grader name (`exact`, `contains`, `regex`, `json_schema`, `tool_calls`,
    `grounding`, `refusal`, `activation`, `scorer`); `options` holds the rest of the
    check's JSON object as given.
    """

    kind: str
    options: dict[str, Json] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    """One line of `cases.jsonl`.

    `input` is a string or an object of template variables. `expected` is a string, a
    JSON object, a tool-call list, or ``{"rubric": ...}`` for judged cases (then
    `rubric` is set). `line` is the 1-based line in the file it came from.
    """

    id: str
    input: str | dict[str, Json]
    expected: Json
    tags: tuple[str, ...]
    set: CaseSet = "capability"
    judge_threshold: int = 4
    checks: tuple[Check, ...] = ()
    rubric: str | None = None
    intent: str | None = None  # "non-activation" when the guidance should stay silent
    context: str | None = None  # text given to the unit, for grounding checks
    line: int = 0

    @property
    def judged(self) -> bool:
        return self.rubric is not None


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    in_per_mtok: float
    out_per_mtok: float

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.in_per_mtok + tokens_out * self.out_per_mtok) / 1_000_000


@dataclass(frozen=True)
class Endpoint:
    """A model on an OpenAI-compatible endpoint. The API key is read from the
    environment variable `api_key_env` at call time, never stored."""

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"


@dataclass(frozen=True)
class Arm:
    """One arm of a comparison: a name and the optional guidance text it adds."""

    name: str
    guidance_file: str | None = None  # relative to the suite folder
    guidance: str | None = None  # the file's text, loaded


@dataclass(frozen=True)
class GateThresholds:
    """Gate against a baseline: fail on a success drop above `max_success_drop_points`
    (percentage points) overall or on any tag with >= `min_tag_cases` cases, or a
    cost-per-task increase above `max_cost_increase_pct` percent."""

    max_success_drop_points: float = 5.0
    max_cost_increase_pct: float = 20.0
    min_tag_cases: int = 5


@dataclass(frozen=True)
class Config:
    """`config.json` of a suite, validated. Caps and ceilings are required, positive."""

    generator: Endpoint
    judge: Endpoint | None
    mode: Literal["completion", "chat"]
    template: str  # prompt template text (completion) or user-message template (chat)
    system: str | None  # system-message template (chat mode)
    temperature: float | None
    seed: int | None
    k: int
    concurrency: int
    cost_cap_usd: float
    max_tokens_in: int
    max_tokens_out: int
    price: Price
    judge_price: Price
    gate: GateThresholds
    arms: tuple[Arm, ...]
    stop: tuple[str, ...] = ()
    tools: tuple[Json, ...] = ()
    allow_same_judge_model: bool = False
    timeout_s: float = 60.0
    max_attempts: int = 6
    ci_cost_cap_usd: float | None = None  # `ci.cost_cap_usd`: the lower cap of `evalkit run --ci`
    rate_limit_budget_s: float = 300.0  # per key: how long 429/503/overload answers are waited out
    max_connection_failures: int = 8  # in a row with no answer: the endpoint is unreachable, the run stops
    raw: dict[str, Json] = field(default_factory=dict, compare=False, repr=False)

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise KeyError(name)


@dataclass(frozen=True)
class Suite:
    """A suite folder `evals/<unit>/` loaded: its cases, config and judge files."""

    path: str
    name: str
    config: Config
    cases: tuple[Case, ...]
    rubric_files: tuple[str, ...] = ()  # e.g. ("judge/rubric-v1.md",)
    prompt_files: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


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


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check on one sample; `reason` says why it failed."""

    name: str
    passed: bool
    reason: str = ""


@dataclass(frozen=True)
class Grade:
    """One line of `grades.jsonl`: every check of one sample, and the verdict.

    `passed` is None when the sample could not be graded (judge error): never a pass.
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
