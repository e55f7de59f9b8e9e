"""Typed, immutable records shared by every step: suite -> run -> grades -> stats.

Only data lives here; loading, validation and behaviour live in the module of their
concern (`suite`, `runner`, `graders`, ...). Every record is a frozen dataclass.
"""

from __future__ import annotations

import difflib
import functools
import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from evalkit.foundations import fmt
from evalkit.foundations.errors import InputError

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
    # What the response cache keys this endpoint's answers by (`endpoints.cache_identity`):
    # None for the base URL (or, under `evalkit serve`, the served model's identity)
    cache_identity: str | None = None


@dataclass(frozen=True)
class Arm:
    """One arm of a comparison: a name and the optional guidance text it adds, or the
    skill folder an agent unit is given (`skill_dir`)."""

    name: str
    guidance_file: str | None = None  # relative to the suite folder
    guidance: str | None = None  # the file's text, loaded
    skill_dir: str | None = None  # relative to the suite folder: the skill an agent of this arm loads
    skill: str | None = None  # the skill_dir's SKILL.md text, loaded ("" when it has none)
    # What the arm sets of the suite's own settings (`config.json` -> `arms[i]`): each is
    # used only when its config key is in `overrides` (so an arm can set one to null);
    # everything else comes from the suite (`Config.for_arm`).
    generator: Endpoint | None = None  # the suite's generator with the arm's keys over it
    price: Price | None = None
    batch_price: Price | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    max_tokens_out: int | None = None
    template_file: str | None = None  # `prompt`: relative to the suite folder
    template: str | None = None  # its text, loaded
    system_file: str | None = None  # `system`: relative to the suite folder
    system: str | None = None  # its text, loaded
    unit: Unit | None = None  # the suite's unit with the arm's `unit` fields over it
    overrides: tuple[str, ...] = ()  # the config keys this arm sets ("generator", "price", ...)


UnitKind = Literal["prompt", "agent", "command", "python"]


@dataclass(frozen=True)
class Resources:
    """What one sample of a unit holds of a Ray node while it runs
    (`unit.resources`, `evalkit.running.executors`): CPUs, memory in bytes, and custom resources
    by name (as `ray start --resources` declares them). A local run ignores it."""

    num_cpus: float = 1.0
    memory: int | None = None
    custom: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Executor:
    """Where a run's samples execute (`config.json` -> `executor`, or `evalkit run --ray`):
    ``local`` (this process, the default) or ``ray``: one Ray task per sample on the
    cluster at `address` (``auto``: the one `ray start` made on this machine; a
    ``host:port`` or ``ray://`` address; None: a new local one). `proxy_host`: where the
    driver's metering proxy listens for the nodes (None: loopback when every node is on
    the driver's machine, else the driver's node IP). `evalkit.running.executors`."""

    kind: Literal["local", "ray"] = "local"
    address: str | None = None
    proxy_host: str | None = None


@dataclass(frozen=True)
class Unit:
    """What a sample runs (`config.json` -> `unit`): the prompt template (`prompt`, the
    default), evalkit's own tool loop (`agent`, at most `max_turns` model calls), the
    user's agent program (`command`: `argv`, killed after `timeout_s`), or a Python
    function (`python`: `callable` as ``pkg.module:function``). See `evalkit.running.agents`."""

    kind: UnitKind = "prompt"
    max_turns: int = 8
    argv: tuple[str, ...] = ()
    timeout_s: float = 300.0
    callable: str | None = None
    # command and python units (evalkit.calls.sandbox): "sandbox" (bubblewrap) or "none"
    isolation: str = "sandbox"
    keep_workdir: bool = False  # keep each sample's working directory in the run folder
    read_only_paths: tuple[str, ...] = ()  # suite-relative paths bound read-only into the sandbox
    env: tuple[str, ...] = ()  # names of evalkit's environment variables passed to the program
    resources: Resources = field(default_factory=Resources)  # what a sample holds of a Ray node


@dataclass(frozen=True)
class GateThresholds:
    """Gate against a baseline (`config.json` -> `gate`): fail on a drop of the gated case
    score above `max_success_drop_points` (percentage points) overall or on any tag with
    >= `min_tag_cases` cases, or a cost-per-case increase above `max_cost_increase_pct`
    percent, when the change is also beyond run-to-run noise (Holm-adjusted one-sided
    p <= `alpha`). A gate whose gated set is too small to detect a drop of
    `max_success_drop_points` at `alpha` (`GatePower`) is UNDERPOWERED: a failure, or
    with `on_underpowered` "warn" a warning. The default of 3 points is the seed's
    (`001_524732e6341b4025.txt`, step 6)."""

    max_success_drop_points: float = 3.0
    max_cost_increase_pct: float = 20.0
    min_tag_cases: int = 5
    alpha: float = 0.05  # a breach fails only when beyond run-to-run noise at this level (1: no noise guard)
    on_underpowered: Literal["fail", "warn"] = "fail"


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
    # Judged pass/fail counts only for a calibrated judge, unless this opts out (recorded
    # on every judged grade line and shown on every report page).
    allow_uncalibrated_judge: bool = False
    verdict_judge: Literal["direct", "pairwise"] = "direct"  # which judge `compare` rests the verdict on
    # which estimate of a judged rate verdicts and the gate rest on: the judge's own, or the
    # prediction-powered one corrected by the human labels (grading.judged_rates)
    judged_estimate: Literal["judge", "corrected"] = "judge"
    timeout_s: float = 60.0
    max_attempts: int = 6
    ci_cost_cap_usd: float | None = None  # `ci.cost_cap_usd`: the lower cap of `evalkit run --ci`
    rate_limit_budget_s: float = 300.0  # per key: how long 429/503/overload answers are waited out
    max_connection_failures: int = 8  # in a row with no answer: the endpoint is unreachable, the run stops
    batch_price: Price | None = None  # `batch_price`: what `run --batch` reserves and charges (evalkit.running.batch)
    judge_batch_price: Price | None = None  # `judge_batch_price`: the same for `grade --batch`
    unit: Unit = field(default_factory=Unit)
    raw: dict[str, Json] = field(default_factory=dict, compare=False, repr=False)
    top_p: float | None = None  # nucleus sampling, sent when set (an arm may set its own)
    executor: Executor = field(default_factory=Executor)  # where samples run (evalkit.running.executors)

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise KeyError(name)

    def for_arm(self, arm: Arm | str) -> Config:
        """The config an arm's samples run under: the suite's, with what the arm sets
        (`Arm.overrides`: its generator, prices, parameters, templates, unit) in place.
        An arm that sets nothing runs under the suite's config itself."""
        a = self.arm(arm) if isinstance(arm, str) else arm
        if not a.overrides:
            return self
        own: dict[str, Any] = {
            "generator": a.generator,
            "price": a.price,
            "batch_price": a.batch_price,
            "temperature": a.temperature,
            "top_p": a.top_p,
            "seed": a.seed,
            "max_tokens_out": a.max_tokens_out,
            "template": a.template,
            "system": a.system,
            "unit": a.unit,
        }
        changes = {k: v for k, v in own.items() if k in a.overrides}
        return replace(self, **changes)

    def arm_settings(self, arm: Arm | str, base_url: str | None = None) -> dict[str, Any]:
        """What a report header and a run's `config.json` say of an arm: its model, the
        endpoint's host (of `base_url`, where its calls went, else its config's; never
        the full URL: no path, no credentials), its sampling parameters and the keys it
        sets over the suite's."""
        a = self.arm(arm) if isinstance(arm, str) else arm
        c = self.for_arm(a)
        host = None
        url = base_url or c.generator.base_url
        if url:
            host = urlsplit(url).hostname
        return {
            "model": c.generator.model,
            "host": host,
            "temperature": c.temperature,
            "top_p": c.top_p,
            "seed": c.seed,
            "max_tokens_out": c.max_tokens_out,
            "price": {"in_per_mtok": c.price.in_per_mtok, "out_per_mtok": c.price.out_per_mtok},
            "overrides": list(a.overrides),
        }


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
    # Agent units (`evalkit.running.agents`): model calls made, and what the trajectory says
    # (`trajectory`: its path in the run folder; `stop`, `tool_errors`, `model_calls`, ...).
    # `tool_calls` then holds every tool call of every turn, in order; usage, cost and
    # latency are the sample's totals.
    turns: int | None = None
    agent: dict[str, Json] | None = None


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


# ==========================================================================================
# Artifacts: what each step writes for the next one to read (docs/formats.md). Each has a
# schema name with a version, `to_json()` and `from_json()`; `from_json` reads the files
# of earlier versions too (their old keys), so an old run folder still loads.
# ==========================================================================================


def _num_or_none(x: Any) -> float | None:
    """A number as JSON can hold it: NaN and infinities (and non-numbers) become None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return None if x != x or x in (float("inf"), float("-inf")) else float(x)


def _check_schema(d: Any, schema: str, what: str) -> dict[str, Any]:
    """`d` when it is a JSON object whose `schema` is `schema` (or absent: a file from
    before schemas); `InputError` otherwise."""
    if not isinstance(d, dict):
        raise InputError(f"{what} must be a JSON object, got {type(d).__name__}", json_path="$")
    found = d.get("schema")
    if found is not None and found != schema:
        name, _, version = str(found).rpartition("/")
        mine, _, my_version = schema.rpartition("/")
        if name != mine or not version.isdigit() or int(version) > int(my_version):
            raise InputError(f"{what} has schema {found!r}; this evalkit reads {schema!r}", json_path="$.schema")
    return d


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


# --- statistics a record carries -----------------------------------------------------------


@dataclass(frozen=True)
class PairedDifference:
    """Mean of a - b over paired items with its (optionally clustered) SE, the Pearson
    correlation of a and b, a normal interval, and the SE an unpaired analysis would give
    (the pairing gain is se_unpaired / se). Made by `stats.paired_difference`."""

    mean: float
    se: float
    correlation: float
    low: float
    high: float
    n: int
    se_unpaired: float
    n_clusters: int | None = None
    alpha: float = 0.05

    def to_json(self) -> dict[str, Any]:
        return {
            k: (_num_or_none(v) if isinstance(v, float) else v)
            for k, v in ((f.name, getattr(self, f.name)) for f in fields(self))
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PairedDifference:
        nan = float("nan")
        kw: dict[str, Any] = {
            f.name: (nan if d.get(f.name) is None and f.type == "float" else d.get(f.name)) for f in fields(cls)
        }
        return cls(**kw)


# --- plans -----------------------------------------------------------------------------------

SIGN_TEST = "sign"  # exact two-sided binomial sign test, ties dropped
SEQUENTIAL_SIGN_TEST = "sequential-sign"


@dataclass(frozen=True)
class Plan:
    """A pre-registered power plan (`evals/<unit>/plan.json`), written before the run.

    `n_trials` is the number of units to run (cases: one vote per case), the n from
    which exact power stays at or above `power` (`n_trials_first` is the first n that
    reaches it; exact power is a sawtooth). `win_rate` is the expected share of
    non-tied units the treatment wins, `tie_rate` the expected share of ties.
    `sequential` holds the sequential design's parameters when `test` is sequential.
    """

    SCHEMA = "evalkit.plan/1"
    REQUIRED = ("test", "alpha", "power", "win_rate", "tie_rate", "n_trials")

    test: str
    alpha: float
    power: float
    win_rate: float
    tie_rate: float
    n_trials: int
    n_trials_first: int = 0
    n_trials_approx: int = 0
    n_discordant: int = 0
    n_discordant_first: int = 0
    n_discordant_approx: int = 0
    unit: str = "case"
    seed: int | None = None
    created: str = ""
    sequential: dict[str, Any] | None = None
    path: str = field(default="", compare=False)  # the file it was read from (not written)
    # More than two arms (`power --arms N`): the comparisons the family holds (every pair,
    # or a control against each other arm) and the correction across them; each pair is
    # planned at alpha / comparisons, the level Holm's first step tests the smallest p at.
    arms: int = 2
    comparisons: int = 1
    correction: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.SCHEMA, **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "path"}}

    @classmethod
    def from_json(cls, d: Any) -> Plan:
        """A plan from its JSON; `InputError` (with the JSON path) for a missing field or
        an unknown test."""
        d = _check_schema(d, cls.SCHEMA, "a plan")
        for key in cls.REQUIRED:
            if key not in d:
                raise InputError(f"missing field {key!r}", json_path=f"$.{key}")
        if d["test"] not in (SIGN_TEST, SEQUENTIAL_SIGN_TEST):
            raise InputError(f"unknown test {d['test']!r}", json_path="$.test")
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d and f.name != "path"})

    def sequential_params(self) -> dict[str, Any]:
        """Keyword arguments for `stats.SequentialSignTest`."""
        return dict((self.sequential or {}).get("params") or {})

    def render(self) -> str:
        how = (
            "truncated two-sided SPRT on the signs, exact boundaries"
            if self.test == SEQUENTIAL_SIGN_TEST
            else "exact two-sided sign test"
        )
        lines = [
            f"test: {self.test} ({how}, ties dropped), unit: {self.unit}",
            f"alpha {self.alpha:g}, power {self.power:g}, expected win rate {self.win_rate:g} of non-tied "
            f"units, tie rate {self.tie_rate:g}",
        ]
        if self.comparisons > 1:
            lines.append(
                f"{self.arms} arms, {self.comparisons} comparisons, {self.correction}-corrected: each pair is "
                f"planned at alpha {self.alpha:g} / {self.comparisons} = {self.alpha / self.comparisons:.4g} "
                "(the level Holm's first step tests at: the power holds for every pair)"
            )
        lines += [
            f"discordant pairs needed (exact): {self.n_discordant} (power stays >= {self.power:g} from here; "
            f"first reached at {self.n_discordant_first}); normal approximation {self.n_discordant_approx}",
            f"{self.unit}s needed (exact): {self.n_trials} (first reached at {self.n_trials_first}); "
            f"normal approximation {self.n_trials_approx}",
        ]
        if self.sequential:
            q = self.sequential
            e = float(q["expected_trials"])
            first = int(q.get("fixed_trials_first") or self.n_trials_first)
            stable = int(q.get("fixed_trials_stable") or q.get("fixed_trials") or self.n_trials)
            lines.append(
                f"sequential sign test: stops once settled, at most {q['max_discordant']} discordant "
                f"pairs; exact type I error {q['type_i_error']:.4f}, power {q['power_exact']:.3f}; "
                f"expected {self.unit}s at the planned effect {e:.1f}"
            )
            lines.append(
                f"fixed design for comparison: {first} {self.unit}s (first n reaching power "
                f"{self.power:g}; expected sequential / fixed = {e / first:.2f}x), {stable} {self.unit}s "
                f"(n from which power stays >= {self.power:g}; {e / stable:.2f}x)"
            )
        if self.seed is not None:
            lines.append(f"seed: {self.seed}")
        return "\n".join(lines)


@dataclass(frozen=True)
class PlanCheck:
    """A run held against its pre-registered plan: `ok` unless it stopped short of the
    planned units or changed the test, alpha or unit (`flags` say which). `plan` is the
    plan file it was held against."""

    ok: bool
    flags: tuple[str, ...]
    planned_trials: int
    observed_trials: int
    plan_test: str
    verdict_test: str
    plan: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "flags": list(self.flags)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PlanCheck:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d} | {"flags": tuple(d.get("flags") or ())})


# --- verdicts -----------------------------------------------------------------------------

VerdictKind = Literal["pass", "regression", "no-improvement", "inconclusive"]
ConformanceKind = Literal["pass", "regression", "inconclusive"]


def judge_line(judge: str, checks: dict[str, Any] | None) -> str:
    """What a verdict rests on, in words (`evalkit.conclusions.compare` fills `judge_checks`)."""
    c = checks or {}
    if judge == "pairwise":
        pc, bar = c.get("position_consistency"), c.get("position_consistency_bar") or 0.0
        bits = [f"position consistency {fmt.pct(pc, 0)} (bar {fmt.pct(bar, 0)})"]
        bits.append("trusted" if c.get("trusted") else "NOT trusted")
        if c.get("opt_out"):
            bits.append("by opt-out (uncalibrated)")
        return "the pairwise judge (" + ", ".join(bits) + ")"
    text = "each sample's pass/fail (deterministic checks"
    if c.get("judged"):
        text += ", and the direct judge: " + ("trusted" if c.get("trusted") else "NOT trusted, judged results held")
        if c.get("opt_out"):
            text += " by opt-out (uncalibrated)"
    return text + ")"


@dataclass(frozen=True)
class Verdict:
    """The verdict of a two-arm comparison (or of a tally from elsewhere).

    `wins/losses/ties` are counted in `unit` (for a run: one vote per case, the
    majority of its repeats); `n_trials` is the number of units, `n_pairs` the paired
    samples behind them, `errored` the units (for a run: cases) with any trial that
    errored or was unmatched; such a unit casts no vote, so wins + ties + losses +
    errored == n_trials, and its trials are named in `problems`. `p_value` is the exact
    two-sided sign test with ties dropped on the clean votes only (with errored units
    the verdict is inconclusive whatever it says), `p_one_sided` its one-sided value in
    the direction observed. `paired` is the clustered paired analysis of all trials
    (treatment minus baseline pass rate, clustered on the case); `sequential` the
    sequential test's path when the plan asked for one; `plan_check` the run against its
    plan.
    """

    SCHEMA = "evalkit.verdict/1"

    kind: VerdictKind
    unit: str
    wins: int
    losses: int
    ties: int
    errored: int
    n_trials: int
    p_value: float | None
    p_one_sided: float | None
    reason: str
    test: str = SIGN_TEST
    alpha: float = 0.05
    n_pairs: int = 0
    problems: tuple[str, ...] = ()
    paired: PairedDifference | None = None
    baseline_arm: str | None = None
    treatment_arm: str | None = None
    sequential: dict[str, Any] | None = None
    plan_check: PlanCheck | None = None
    case_votes: tuple[tuple[str, str], ...] = ()  # (case, win / loss / tie / errored), in case order
    judge: str = (
        "direct"  # what the votes rest on: "direct" pass/fail, or the "pairwise" judge (evalkit.conclusions.compare)
    )
    judge_checks: dict[str, Any] | None = None  # what was checked of that judge (evalkit.conclusions.compare)

    @property
    def discordant(self) -> int:
        return self.wins + self.losses

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schema": self.SCHEMA}
        for f in fields(self):
            d[f.name] = getattr(self, f.name)
        d["discordant"] = self.discordant
        d["p_value_scope"] = (
            f"clean votes only ({self.wins + self.ties + self.losses} of {self.n_trials} units; "
            f"{self.errored} errored/unmatched unit(s) cast no vote): not a verdict"
            if self.errored
            else "all units"
        )
        d["problems"] = list(self.problems)
        d["case_votes"] = [list(cv) for cv in self.case_votes]
        d["paired"] = self.paired.to_json() if self.paired is not None else None
        d["plan_check"] = self.plan_check.to_json() if self.plan_check is not None else None
        d["p_value"], d["p_one_sided"] = _num_or_none(self.p_value), _num_or_none(self.p_one_sided)
        return d

    @classmethod
    def from_json(cls, d: Any) -> Verdict:
        d = _check_schema(d, cls.SCHEMA, "a verdict")
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        kw["problems"] = tuple(d.get("problems") or ())
        kw["case_votes"] = tuple((str(c), str(v)) for c, v in d.get("case_votes") or ())
        kw["paired"] = PairedDifference.from_json(d["paired"]) if d.get("paired") else None
        kw["plan_check"] = PlanCheck.from_json(d["plan_check"]) if d.get("plan_check") else None
        return cls(**kw)

    def render(self) -> str:
        """A few lines for a terminal or a PR comment."""
        lines = [f"verdict: {self.kind}"]
        if self.plan_check is not None:  # second: a verdict that did not follow its plan says so first
            pc = self.plan_check
            lines.append(
                "plan: "
                + ("followed" if pc.ok else "NOT followed: " + "; ".join(pc.flags) + " (not the pre-registered test)")
            )
        elif self.baseline_arm:
            lines.append(
                "plan: none (exploratory: no pre-registered plan.json; write one with `evalkit power --write`)"
            )
        if self.baseline_arm:
            lines.append(f"arms: treatment {self.treatment_arm!r} vs baseline {self.baseline_arm!r}")
        lines.append(f"unit of the test: {self.unit}")
        lines.append(f"judge: {judge_line(self.judge, self.judge_checks)}")
        p, p1 = fmt.pvalue(self.p_value), fmt.pvalue(self.p_one_sided)
        lines.append(
            f"tally: {self.wins}W/{self.ties}T/{self.losses}L, {self.errored} errored/unmatched, "
            f"{self.n_trials} units, {self.discordant} discordant"
        )
        if self.errored:
            clean = self.wins + self.ties + self.losses
            lines.append(
                f"test: {self.test} (two-sided, ties dropped), alpha {self.alpha:g}: "
                f"exact sign-test p on the {clean} clean vote(s) only = {p} (one-sided {p1}); "
                f"not a verdict: {self.errored} errored/unmatched unit(s) cast no vote"
            )
        else:
            lines.append(
                f"test: {self.test} (two-sided, ties dropped), alpha {self.alpha:g}: "
                f"exact sign-test p = {p} (one-sided {p1})"
            )
        if self.paired is not None:
            pd_ = self.paired
            lines.append(
                f"all {pd_.n} graded paired trials, clustered on case ({pd_.n_clusters} clusters): "
                f"treatment - baseline pass rate {fmt.points(pd_.mean)} (SE {fmt.points(pd_.se, signed=False)}, "
                f"95% CI {fmt.points(pd_.low)} to {fmt.points(pd_.high)}), "
                f"correlation {fmt.correlation(pd_.correlation)}"
            )
        if self.sequential:
            s = self.sequential
            lines.append(f"sequential: {s['decision']} after {s['n_used']} of {s['n_available']} units")
        lines.append(f"reason: {self.reason}")
        for prob in self.problems[:20]:
            lines.append(f"  - {prob}")
        if len(self.problems) > 20:
            lines.append(f"  ... and {len(self.problems) - 20} more")
        return "\n".join(lines)


@dataclass(frozen=True)
class ConformanceVerdict:
    """Single-arm verdict: `pass` when every trial ran and met the threshold,
    `regression` when every trial ran and one fell below it, `inconclusive` when any
    trial errored (it proves nothing). `below` and `problems` name the trials."""

    SCHEMA = "evalkit.conformance/1"

    kind: ConformanceKind
    unit: str
    n_trials: int
    met: int
    below: int
    errored: int
    threshold: float | None
    reason: str
    below_trials: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    arm: str | None = None

    def to_json(self) -> dict[str, Any]:
        d = {"schema": self.SCHEMA, **{f.name: getattr(self, f.name) for f in fields(self)}}
        d["below_trials"], d["problems"] = list(self.below_trials), list(self.problems)
        return d

    @classmethod
    def from_json(cls, d: Any) -> ConformanceVerdict:
        d = _check_schema(d, cls.SCHEMA, "a conformance verdict")
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        kw["below_trials"], kw["problems"] = tuple(d.get("below_trials") or ()), tuple(d.get("problems") or ())
        return cls(**kw)

    def render(self) -> str:
        """A few lines for a terminal or a PR comment."""
        rule = "each case's own rule" if self.threshold is None else f"share of checks >= {self.threshold:g}"
        lines = [
            f"verdict: {self.kind} (single-arm conformance{f' of arm {self.arm!r}' if self.arm else ''})",
            f"trials: {self.n_trials}: {self.met} met the threshold ({rule}), {self.below} below, "
            f"{self.errored} errored or missing",
            f"reason: {self.reason}",
        ]
        lines += [f"  below: {t}" for t in self.below_trials[:20]]
        lines += [f"  {p}" for p in self.problems[:20]]
        return "\n".join(lines)


# --- what a gate reads of a run -----------------------------------------------------------


@dataclass(frozen=True)
class CaseResult:
    """One case of one arm of a run: `n` samples (ungraded ones included, never as
    passes), `c` that passed, each sample's list-price cost (generator + what the cache
    avoided + judge: what it would have cost without the cache), its set and tags."""

    case_id: str
    set: str
    tags: tuple[str, ...]
    n: int
    c: int
    costs: tuple[float, ...]
    ungraded: int = 0

    @property
    def gated(self) -> bool:
        """False for a case in a set with gate `none` (neither capability nor regression)."""
        return set_gate(self.set) != NO_GATE

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.case_id,
            "set": self.set,
            "tags": list(self.tags),
            "n": self.n,
            "c": self.c,
            "ungraded": self.ungraded,
            "costs": [round(x, 10) for x in self.costs],
        }

    @classmethod
    def from_json(cls, c: dict[str, Any]) -> CaseResult:
        return cls(
            case_id=str(c["id"]),
            set=str(c.get("set") or "capability"),
            tags=tuple(c.get("tags") or ()),
            n=int(c["n"]),
            c=int(c["c"]),
            costs=tuple(float(x) for x in c.get("costs") or ()),
            ungraded=int(c.get("ungraded", 0)),
        )


@dataclass(frozen=True)
class RunMetrics:
    """What a gate reads from one arm of a run: per-case counts at the run's k
    (`gates.run_metrics`). The measures over it (`metrics.gated_case_score`,
    `metrics.cost_per_case`) are defined once in `evalkit.numbers.metrics`."""

    SCHEMA = "evalkit.run-metrics/1"

    k: int
    cases: tuple[CaseResult, ...]
    arm: str | None = None
    run_stamp: str | None = None
    config_hash: str | None = None
    judge_version: str | None = None
    sets_from: str = "case table"  # where the cases' sets came from (an old run: its suite)

    def by_id(self) -> Mapping[str, CaseResult]:
        """Case id -> its counts: built once per record (it is frozen) and read-only, as
        callers ask for it once per case (a page lists the planned cases not run)."""
        return self._by_id

    @functools.cached_property
    def _by_id(self) -> Mapping[str, CaseResult]:
        return types.MappingProxyType({c.case_id: c for c in self.cases})

    def select(self, ids: Iterable[str] | None = None) -> list[CaseResult]:
        """The cases `ids` names (all of them for None), in the order given."""
        if ids is None:
            return list(self.cases)
        m = self.by_id()
        return [m[i] for i in ids if i in m]

    def tags(self, ids: Iterable[str] | None = None) -> dict[str, list[str]]:
        """Tag -> the ids of its cases (among `ids`), tags sorted."""
        out: dict[str, list[str]] = {}
        for c in self.select(ids):
            for t in c.tags:
                out.setdefault(t, []).append(c.case_id)
        return dict(sorted(out.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "k": self.k,
            "arm": self.arm,
            "run_stamp": self.run_stamp,
            "config_hash": self.config_hash,
            "judge_version": self.judge_version,
            "sets_from": self.sets_from,
            "cases": [c.to_json() for c in self.cases],
        }

    @classmethod
    def from_json(cls, d: Any) -> RunMetrics:
        d = _check_schema(d, cls.SCHEMA, "run metrics")
        jv = d.get("judge_version")
        return cls(
            k=int(d["k"]),
            arm=d.get("arm"),
            run_stamp=d.get("run_stamp"),
            config_hash=d.get("config_hash"),
            judge_version=jv if isinstance(jv, str) else None,  # 0.1 wrote NaN for an unjudged run
            sets_from=str(d.get("sets_from") or "case table"),
            cases=tuple(CaseResult.from_json(c) for c in d["cases"]),
        )


# --- gates --------------------------------------------------------------------------------

GATE_CAUSE_INCOMPLETE = "incomplete run"
GATE_CAUSE_SCORE = "case score drop"
GATE_CAUSE_COST = "cost increase"
GATE_CAUSE_NOT_COMPARABLE = "not comparable with the baseline"
GATE_CAUSE_JUDGE = "judge not trusted"  # judged results held (evalkit.conclusions.grading): no rate was read
GATE_CAUSE_UNDERPOWERED = "underpowered"  # the gated set cannot detect a drop of the threshold
UNDERPOWERED_PREFIX = "UNDERPOWERED"
GATE_POWER = 0.8  # the power at which the gate's detectable drop is computed
# Reasons that mean the gate failed without reading a rate (the run did not finish cleanly).
NOT_CLEAN_PREFIXES = ("the runner exited", "no summary", "summary.json is not valid", "INCOMPLETE")
SCORE_DROP_PREFIXES = ("case-score drop", "success-rate drop")  # the second: gates of evalkit 0.1
COST_RISE_PREFIXES = ("cost-per-case increase", "cost-per-task increase")


def gate_failure_causes(reasons: Iterable[str], read_rates: bool | None = None) -> list[str]:
    """Why a gate failed, from its reasons: `judge not trusted` when judged results were
    held, `incomplete run` when it failed on the run's exit status or summary without
    reading any rate (never a regression: nothing was measured), otherwise `case score
    drop` and/or `cost increase`, or `not comparable with the baseline` (k changed, no
    shared case, short cases). Empty for a gate that passed."""
    reasons = [str(r) for r in reasons]
    if any(r.startswith(GATE_CAUSE_JUDGE) for r in reasons):
        return [GATE_CAUSE_JUDGE]
    if read_rates is False or any(r.startswith(NOT_CLEAN_PREFIXES) for r in reasons):
        return [GATE_CAUSE_INCOMPLETE]
    causes = []
    if any(r.startswith(SCORE_DROP_PREFIXES) for r in reasons):
        causes.append(GATE_CAUSE_SCORE)
    if any(r.startswith(COST_RISE_PREFIXES) for r in reasons):
        causes.append(GATE_CAUSE_COST)
    if any(r.startswith(UNDERPOWERED_PREFIX) for r in reasons):
        causes.append(GATE_CAUSE_UNDERPOWERED)
    if reasons and not causes:
        causes.append(GATE_CAUSE_NOT_COMPARABLE)
    return causes


@dataclass(frozen=True)
class GateCheck:
    """One comparison of a gate: `kind` `score` (the gated case score, in points) or
    `cost` (the cost per case, in percent), the group (`overall` or `tag:<name>`),
    baseline and current values, the signed change (current minus baseline: points for
    the score, so a drop is negative; percent for cost, so an increase is positive), the
    threshold (a magnitude: the largest drop in points, or increase in percent,
    allowed), whether the change breached it, the one-sided p-value of the change under
    run-to-run noise (Holm-adjusted in `p_adjusted`; None when the baseline has no
    per-case data), and whether it failed the gate."""

    kind: str
    group: str
    n_cases: int
    baseline: float
    current: float
    change: float
    threshold: float
    exceeded: bool
    p_value: float | None
    p_adjusted: float | None
    failed: bool

    @property
    def label(self) -> str:
        """`case score overall`, `case score tag:x`, `cost per case`, `judged sample pass rate (corrected)`."""
        if self.kind == "judged":
            return "judged sample pass rate (corrected)"
        return f"case score {self.group}" if self.kind == "score" else "cost per case"

    def to_json(self) -> dict[str, Any]:
        return {
            f.name: (
                _num_or_none(getattr(self, f.name))
                if isinstance(getattr(self, f.name), float)
                else getattr(self, f.name)
            )
            for f in fields(self)
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GateCheck:
        kw: dict[str, Any] = {f.name: d.get(f.name) for f in fields(cls)}
        kw["kind"] = "score" if d.get("kind") == "success" else d.get("kind")  # 0.1 called it success
        return cls(**kw)


@dataclass(frozen=True)
class GatePower:
    """What the gate can see: the smallest drop of the overall gated case score (points)
    that `n_cases` gated cases detect at the gate's one-sided `alpha` with `power`
    (`stats.detectable_drop`, planned at `planning_rate`: the baseline's score shrunk by
    Laplace's rule), the threshold, the gated cases a drop of the threshold would need
    (`stats.cases_for_drop`), whether the gate is underpowered (detectable drop above
    the threshold) and what an underpowered gate does (`on_underpowered`)."""

    n_cases: int
    alpha: float
    power: float
    planning_rate: float
    detectable_drop_points: float
    threshold_points: float
    cases_needed: int
    underpowered: bool
    on_underpowered: str = "fail"

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, d: Any) -> GatePower:
        return cls(
            n_cases=int(d["n_cases"]),
            alpha=float(d["alpha"]),
            power=float(d["power"]),
            planning_rate=float(d["planning_rate"]),
            detectable_drop_points=float(d["detectable_drop_points"]),
            threshold_points=float(d["threshold_points"]),
            cases_needed=int(d["cases_needed"]),
            underpowered=bool(d["underpowered"]),
            on_underpowered=str(d.get("on_underpowered", "fail")),
        )

    def describe(self) -> str:
        return (
            f"{self.n_cases} gated case(s) detect "
            + (
                f"a drop of {self.detectable_drop_points:.1f} points or more "
                if self.detectable_drop_points <= 100
                else "no drop (not even 100 points) "
            )
            + f"(one-sided alpha {self.alpha:g}, power {self.power:.0%}, planned at a {self.planning_rate:.1%} score), "
            f"the threshold is {self.threshold_points:g} points: a drop of it needs {self.cases_needed:,} gated cases"
        )


@dataclass(frozen=True)
class GateResult:
    """The gate's outcome. `read_rates` is False when it failed on the run's exit status
    or INCOMPLETE summary without reading any rate."""

    SCHEMA = "evalkit.gate/1"

    passed: bool
    reasons: tuple[str, ...]
    read_rates: bool
    checks: tuple[GateCheck, ...] = ()
    notes: tuple[str, ...] = ()
    thresholds: GateThresholds = field(default_factory=lambda: GateThresholds())
    alpha: float = 0.05
    run: str = ""
    baseline: str = ""
    arm: str | None = None
    power: GatePower | None = None  # what the gate can see (None: it read no rate)

    @property
    def status(self) -> str:
        """PASS, FAIL (a measured regression or a run that cannot be compared), or
        UNDERPOWERED (failed only because the suite cannot see its threshold)."""
        if self.passed:
            return "PASS"
        return "UNDERPOWERED" if self.causes == [GATE_CAUSE_UNDERPOWERED] else "FAIL"

    @property
    def causes(self) -> list[str]:
        """Why it failed (`gate_failure_causes`): empty when it passed."""
        return [] if self.passed else gate_failure_causes(self.reasons, self.read_rates)

    @property
    def regression(self) -> bool:
        """A measured worsening (a case-score drop or a cost increase), not a run that
        could not be compared: only this is shown as a regression."""
        causes = set(self.causes)
        causes.discard(GATE_CAUSE_UNDERPOWERED)  # a gate that cannot see measured no worsening
        return bool(causes) and not ({GATE_CAUSE_INCOMPLETE, GATE_CAUSE_NOT_COMPARABLE, GATE_CAUSE_JUDGE} & causes)

    def to_json(self) -> dict[str, Any]:
        t = self.thresholds
        return {
            "schema": self.SCHEMA,
            "passed": self.passed,
            "causes": self.causes,
            "reasons": list(self.reasons),
            "read_rates": self.read_rates,
            "checks": [c.to_json() for c in self.checks],
            "notes": list(self.notes),
            "thresholds": {
                "max_success_drop_points": t.max_success_drop_points,
                "max_cost_increase_pct": t.max_cost_increase_pct,
                "min_tag_cases": t.min_tag_cases,
                "alpha": t.alpha,
                "on_underpowered": t.on_underpowered,
            },
            "alpha": self.alpha,
            "run": self.run,
            "baseline": self.baseline,
            "arm": self.arm,
            "status": self.status,
            "power": self.power.to_json() if self.power is not None else None,
        }

    @classmethod
    def from_json(cls, d: Any) -> GateResult:
        d = _check_schema(d, cls.SCHEMA, "a gate result")
        t = d.get("thresholds") or {}
        return cls(
            passed=bool(d["passed"]),
            reasons=tuple(d.get("reasons") or ()),
            read_rates=bool(d.get("read_rates", True)),
            checks=tuple(GateCheck.from_json(c) for c in d.get("checks") or ()),
            notes=tuple(d.get("notes") or ()),
            thresholds=GateThresholds(
                **{
                    k: t[k]
                    for k in (
                        "max_success_drop_points",
                        "max_cost_increase_pct",
                        "min_tag_cases",
                        "alpha",
                        "on_underpowered",
                    )
                    if k in t
                }
            ),
            alpha=float(d.get("alpha", 0.05)),
            run=str(d.get("run") or ""),
            baseline=str(d.get("baseline") or ""),
            arm=d.get("arm"),
            power=GatePower.from_json(d["power"]) if isinstance(d.get("power"), dict) else None,
        )

    def render(self) -> str:
        lines = [
            f"Gate: {self.status if self.status != 'FAIL' else 'FAIL: ' + ' / '.join(self.causes)}"
            + ("" if self.passed else f" ({'; '.join(self.reasons)})")
        ]
        if not self.read_rates:
            lines.append("rates not read: a run that did not finish cleanly is not comparable")
            return "\n".join(lines)
        t = self.thresholds
        lines.append(
            f"thresholds: gated case score drop > {t.max_success_drop_points:g} points (overall, tags with >= "
            f"{t.min_tag_cases} cases), cost per case increase > {t.max_cost_increase_pct:g}%; "
            f"a breach fails when beyond run-to-run noise (Holm-adjusted p <= {self.alpha:g}); "
            "change = current - baseline"
        )
        lines.append(
            f"{'check':<28} {'cases':>5} {'baseline':>10} {'current':>10} {'change':>9} {'p(noise)':>9}  result"
        )
        for c in self.checks:
            unit = " pts" if c.kind != "cost" else "%"
            shown = f"{c.baseline:.3f}" if c.kind != "cost" else f"${c.baseline:.4g}"
            now = f"{c.current:.3f}" if c.kind != "cost" else f"${c.current:.4g}"
            p = "-" if c.p_adjusted is None else f"{c.p_adjusted:.3g}"
            res = "FAIL" if c.failed else ("within noise" if c.exceeded else "ok")
            lines.append(f"{c.label:<28} {c.n_cases:>5} {shown:>10} {now:>10} {c.change:>+7.1f}{unit:<3}{p:>8}  {res}")
        if self.power is not None:
            lines.append(f"power: {self.power.describe()}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


# --- baselines ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CurvePoint:
    """pass@j and pass^j (means over cases of the unbiased per-case estimators, with
    their SE across cases) at one j <= k: a point of the curve that `SetScore.curve`
    holds for j = 1..k.

    References: Chen et al. 2021 (pass@k); Yao et al. 2024, tau-bench (pass^k)."""

    j: int
    pass_at_j: float | None
    pass_at_j_se: float | None
    pass_hat_j: float | None
    pass_hat_j_se: float | None

    def to_json(self) -> dict[str, Any]:
        return {f.name: (_num_or_none(v) if isinstance(v, float) else v) for f, v in _items(self)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CurvePoint:
        def num(key: str) -> float | None:
            v = d.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        return cls(int(d["j"]), num("pass_at_j"), num("pass_at_j_se"), num("pass_hat_j"), num("pass_hat_j_se"))


@dataclass(frozen=True)
class SetScore:
    """The gated case score of one set or tag of an arm at the run's k: pass@k and pass^k
    (means over its cases, with the SE across cases) and the score it is gated on
    (pass@k for capability, pass^k for regression, none for another set; for a tag, the
    mean over its gated cases of each case's own gated metric)."""

    n_cases: int
    k: int
    pass_at_k: float | None
    pass_at_k_se: float | None
    pass_hat_k: float | None
    pass_hat_k_se: float | None
    gate: str = NO_GATE
    gated_case_score: float | None = None
    gated_case_score_se: float | None = None
    n_gated: int = 0
    curve: tuple[CurvePoint, ...] = ()  # pass@j and pass^j for j = 1..k (files before it: empty)

    def to_json(self) -> dict[str, Any]:
        d = {f.name: (_num_or_none(v) if isinstance(v, float) else v) for f, v in _items(self) if f.name != "curve"}
        d["curve"] = [p.to_json() for p in self.curve]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SetScore:
        curve = tuple(CurvePoint.from_json(p) for p in d.get("curve") or () if isinstance(p, dict))
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d and f.name != "curve"}, curve=curve)


def _items(obj: Any) -> list[tuple[Any, Any]]:
    return [(f, getattr(obj, f.name)) for f in fields(obj)]


@dataclass(frozen=True)
class Baseline:
    """An accepted baseline (`evals/<unit>/baseline.json`): the gated case score of the
    accepted arm overall, per tag and per set, its cost per case (list price: what the
    samples would have cost without the cache), and the per-case counts the gate's noise
    guard needs (`metrics`). `metrics` is None for a baseline in the agent-evals shape
    (`success_rate`, `cost_per_task_usd`, `per_tag`), which the gate reads without the
    noise guard.

    Files of evalkit 0.1 (`"format": 1`) name the gated case score `success_rate` and
    the cost per case `cost_per_task_usd`; both are read."""

    SCHEMA = "evalkit.baseline/2"

    gated_case_score: float
    cost_per_case_usd: float | None
    metrics: RunMetrics | None = None
    gated_case_score_se: float | None = None
    per_tag: dict[str, float] = field(default_factory=dict)
    per_tag_cases: dict[str, int] = field(default_factory=dict)
    per_set: dict[str, SetScore] = field(default_factory=dict)
    run_stamp: str | None = None
    run: str | None = None
    summary: str | None = None
    accepted: str | None = None

    @property
    def arm(self) -> str | None:
        return self.metrics.arm if self.metrics else None

    @property
    def k(self) -> int | None:
        return self.metrics.k if self.metrics else None

    def to_json(self) -> dict[str, Any]:
        m = self.metrics
        return {
            "schema": self.SCHEMA,
            "run_stamp": self.run_stamp,
            "run": self.run,
            "summary": self.summary,
            "accepted": self.accepted,
            "judge_version": m.judge_version if m else None,
            "config_hash": m.config_hash if m else None,
            "arm": self.arm,
            "k": self.k,
            "gated_case_score": _num_or_none(self.gated_case_score),
            "gated_case_score_se": _num_or_none(self.gated_case_score_se),
            "cost_per_case_usd": _num_or_none(self.cost_per_case_usd),
            "per_tag": dict(self.per_tag),
            "per_tag_cases": dict(self.per_tag_cases),
            "per_set": {s: v.to_json() for s, v in self.per_set.items()},
            "cases": [c.to_json() for c in m.cases] if m else None,
        }

    @classmethod
    def from_json(cls, d: Any) -> Baseline:
        """A baseline of this version, of evalkit 0.1 (`"format": 1`), or in the
        agent-evals shape; `InputError` (with the JSON path) when it is none of them."""
        d = _check_schema(d, cls.SCHEMA, "a baseline")
        score = d.get("gated_case_score", d.get("success_rate"))
        if d.get("cases") is None and score is None:
            raise InputError("baseline has neither per-case data nor a gated case score", json_path="$.success_rate")
        metrics = None
        if d.get("cases") is not None:
            try:
                metrics = RunMetrics.from_json({**d, "schema": None})
            except (KeyError, TypeError, ValueError) as exc:
                raise InputError(f"malformed per-case baseline data: {exc!r}", json_path="$.cases") from None
        per_set = {}
        for s, v in (d.get("per_set") or {}).items():
            if "value" in v:  # 0.1: {"metric", "value", "se", "n_cases"}
                metric = str(v.get("metric") or "")
                est = (v.get("value"), v.get("se"))
                per_set[s] = SetScore(
                    int(v.get("n_cases") or 0),
                    int(d.get("k") or 0),
                    est[0] if metric.startswith("pass@") else None,
                    est[1] if metric.startswith("pass@") else None,
                    est[0] if metric.startswith("pass^") else None,
                    est[1] if metric.startswith("pass^") else None,
                    set_gate(s),
                    est[0],
                    est[1],
                    int(v.get("n_cases") or 0),
                )
            else:
                per_set[s] = SetScore.from_json(v)
        try:
            return cls(
                gated_case_score=float(score) if score is not None else float("nan"),
                cost_per_case_usd=_num_or_none(d.get("cost_per_case_usd", d.get("cost_per_task_usd"))),
                metrics=metrics,
                gated_case_score_se=_num_or_none(d.get("gated_case_score_se", d.get("success_rate_se"))),
                per_tag={str(t): float(v) for t, v in (d.get("per_tag") or {}).items()},
                per_tag_cases={str(t): int(v) for t, v in (d.get("per_tag_cases") or {}).items()},
                per_set=per_set,
                run_stamp=d.get("run_stamp"),
                run=d.get("run"),
                summary=d.get("summary"),
                accepted=d.get("accepted"),
            )
        except (TypeError, ValueError) as exc:
            raise InputError(f"malformed baseline: {exc}", json_path="$") from None


# --- grades summaries ---------------------------------------------------------------------


@dataclass(frozen=True)
class GroupMetrics:
    """The metrics of one group of samples (all of a run, an arm, an arm's tag) in
    `grades-summary.json`. One definition each (evalkit.numbers.metrics, docs/formats.md):

    * `sample_pass_rate`: samples whose every check (judge included) passed / the samples
      the run was expected to produce (a missing or errored sample is a failure);
    * `cost_per_sample_usd` / `cost_per_case_usd`: list price (generator + what the cache
      avoided + judge: what the samples would have cost without the cache) per sample
      that ran, and per case (the sum over its samples, averaged over cases);
      `paid_usd` is what was paid for them (generator + judge), `cache_avoided_usd` what
      the cache saved;
    * the rest as `evalkit.conclusions.grading` documents them. None where there is nothing to
      measure (no check of that kind, no sample)."""

    n_expected: int = 0
    n_graded: int = 0
    n_missing: int = 0
    n_errored: int = 0
    n_held: int = 0  # graded, but the judge's pass/fail is held (not trusted): never a pass
    n_samples: int = 0
    n_cases: int = 0
    sample_pass_rate: float | None = None
    correct_rate: float | None = None
    tool_call_correctness: float | None = None
    n_tool_call_checks: int = 0
    hallucination_rate: float | None = None
    n_grounding_checks: int = 0
    refusal_rate: float | None = None
    refusal_rate_golden: float | None = None
    n_golden: int = 0
    refusal_rate_should_refuse: float | None = None
    n_should_refuse: int = 0
    activation_rate: float | None = None
    n_activation: int = 0
    false_activation_rate: float | None = None
    n_non_activation: int = 0
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    generator_cost_usd: float = 0.0
    judge_cost_usd: float = 0.0
    paid_usd: float = 0.0
    cache_avoided_usd: float | None = 0.0  # generator and judge caches
    cost_per_sample_usd: float | None = None
    cost_per_case_usd: float | None = None
    judge_mean_score: float | None = None
    n_judged: int = 0
    judge_errors: int = 0
    n_judged_samples: int = 0
    judge_cache_avoided_usd: float = 0.0  # the judge cache's part of cache_avoided_usd

    RENAMED = {"success_rate": "sample_pass_rate"}  # evalkit 0.1's keys

    def to_json(self) -> dict[str, Any]:
        return {f.name: (_num_or_none(v) if isinstance(v, float) else v) for f, v in _items(self)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GroupMetrics:
        """Of this version, or of evalkit 0.1: `success_rate` is the sample pass rate;
        its `cost_per_task_usd` (what was paid per sample, the cache's savings left out)
        has no counterpart, so the costs of such a summary are unknown (None) until the
        run is graded again, which replays the judge from its cache at no cost."""
        kw = {cls.RENAMED.get(k, k): v for k, v in d.items()}
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in kw.items() if k in names}
        if "paid_usd" not in d:
            kw["paid_usd"] = float(d.get("generator_cost_usd") or 0) + float(d.get("judge_cost_usd") or 0)
            kw["cache_avoided_usd"] = None
        return cls(**kw)


@dataclass(frozen=True)
class ArmSummary:
    """One arm of a grades summary: its metrics overall and per tag, and its gated case
    scores (pass@k and pass^k with SE) per set and per tag."""

    overall: GroupMetrics
    per_tag: dict[str, GroupMetrics] = field(default_factory=dict)
    per_set_scores: dict[str, SetScore] = field(default_factory=dict)
    per_tag_scores: dict[str, SetScore] = field(default_factory=dict)
    scores: SetScore | None = None  # all the arm's cases

    def to_json(self) -> dict[str, Any]:
        return {
            "overall": self.overall.to_json(),
            "per_tag": {t: m.to_json() for t, m in self.per_tag.items()},
            "scores": self.scores.to_json() if self.scores else None,
            "per_set_scores": {s: v.to_json() for s, v in self.per_set_scores.items()},
            "per_tag_scores": {t: v.to_json() for t, v in self.per_tag_scores.items()},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArmSummary:
        return cls(
            GroupMetrics.from_json(d.get("overall") or {}),
            {t: GroupMetrics.from_json(m) for t, m in (d.get("per_tag") or {}).items()},
            {s: SetScore.from_json(v) for s, v in (d.get("per_set_scores") or {}).items()},
            {t: SetScore.from_json(v) for t, v in (d.get("per_tag_scores") or {}).items()},
            SetScore.from_json(d["scores"]) if d.get("scores") else None,
        )


@dataclass(frozen=True)
class JudgeTrust:
    """Whether the judge's pass/fail counted, as the grading recorded it
    (`grades-summary.json` -> `judge_trust`, written from `judge.decide_trust`):
    `trusted`, on what `basis` ("labels": this run's fresh human labels;
    "calibration.json": the suite's accepted record for this very judge; "opt-out";
    "none"), why, whether the user opted out, this run's own `calibration` and the
    accepted `record` used (as JSON objects: `judge.Calibration.to_json`), and the
    accepted records that were void for this judge. `trusted` is None only for a summary
    of an older evalkit that recorded agreement without a decision."""

    SCHEMA = "evalkit.checking.judge-trust/2"

    trusted: bool | None
    basis: str
    reason: str
    opt_out: bool = False
    calibration: dict[str, Any] | None = None
    record: dict[str, Any] | None = None
    invalidated: tuple[str, ...] = ()

    @property
    def n_labels(self) -> int:
        """Fresh human labels this run's calibration rests on (0 without one)."""
        return int((self.calibration or {}).get("n") or 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "trusted": self.trusted,
            "basis": self.basis,
            "reason": self.reason,
            "opt_out": self.opt_out,
            "calibration": self.calibration,
            "record": self.record,
            "invalidated": list(self.invalidated),
        }

    @classmethod
    def from_json(cls, d: Any) -> JudgeTrust:
        if not isinstance(d, dict):
            raise InputError(f"a judge trust record must be a JSON object, got {type(d).__name__}", json_path="$")
        if "basis" in d:
            return cls(
                trusted=d.get("trusted"),
                basis=str(d.get("basis") or "none"),
                reason=str(d.get("reason") or ""),
                opt_out=bool(d.get("opt_out")),
                calibration=d.get("calibration") if isinstance(d.get("calibration"), dict) else None,
                record=d.get("record") if isinstance(d.get("record"), dict) else None,
                invalidated=tuple(str(x) for x in d.get("invalidated") or ()),
            )
        # evalkit 0.1's `human_agreement` ({"n", "exact", "within_one"}) and 1's agreement
        # record: figures without a decision on them
        n = int(d.get("n") or 0)
        exact, within = d.get("exact"), d.get("within_one")
        figures = (
            f"{exact:.0%} exact / {within:.0%} within one on {n} label(s)"
            if isinstance(exact, (int, float)) and isinstance(within, (int, float))
            else f"{n} label(s)"
        )
        return cls(
            trusted=d.get("trusted") if isinstance(d.get("trusted"), bool) else None,
            basis="none",
            reason=str(d.get("reason") or f"recorded by an older evalkit without a verdict: {figures}"),
            calibration={"n": n, "exact": exact, "within_one": within} if n else None,
        )


@dataclass(frozen=True)
class GradesSummary:
    """`grades-summary.json`, written by `evalkit grade` (and by `evalkit ingest` for the
    runs of other tools): the metrics of the whole run (`overall`, `per_tag`) and of each
    arm (`per_arm`), at the run's `k`, with the judge, the pairwise judge, the privacy
    scan and the findings. `from_json` reads evalkit 0.1's summaries too."""

    SCHEMA = "evalkit.grades-summary/1"

    complete: bool
    k: int | None
    overall: GroupMetrics
    per_tag: dict[str, GroupMetrics] = field(default_factory=dict)
    per_arm: dict[str, ArmSummary] = field(default_factory=dict)
    run: str = ""
    suite: str | None = None
    judge_version: str | None = None
    judge_files: tuple[str, ...] = ()
    judge_model: str | None = None
    judge_same_model_override: bool = False
    judge: dict[str, Any] | None = None  # the judge's identity (`judge.JudgeIdentity.to_json`)
    judge_trust: JudgeTrust | None = None
    human_agreement: dict[str, Any] | None = None  # the figures of this run's calibration, if any
    judge_spend_usd: float = 0.0  # paid for the judge by this grading pass
    cache_hits: int = 0
    run_spend_usd: float | None = None
    cap_usd: float | None = None
    # paid for the judge over every pass on the run's ledger (a stopped pass and the one
    # that finished it), open reservations at their worst case; None: not recorded
    judge_ledger_usd: float | None = None
    stop_reason: str | None = None
    stop_detail: str | None = None
    privacy: dict[str, Any] | None = None
    pairwise: dict[str, Any] | None = None
    findings: tuple[Any, ...] = ()  # findings.Finding as JSON objects {"level", "message"}
    source: str = "grade"  # grade | ingest
    # judge-only and prediction-powered (human-corrected) rates of the judged samples
    # (`grading.judged_rates`; formats.md, "Corrected judged rates"); None: no judged sample
    judged_rates: dict[str, Any] | None = None
    # the judge asked again on a sample of items (`grade --judge-repeats`): flip rates per rubric version
    judge_consistency: dict[str, Any] | None = None

    @property
    def n_expected(self) -> int:
        return self.overall.n_expected

    @property
    def n_graded(self) -> int:
        return self.overall.n_graded

    @property
    def n_missing(self) -> int:
        return self.overall.n_missing

    @property
    def n_errored(self) -> int:
        return self.overall.n_errored

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "source": self.source,
            "run": self.run,
            "suite": self.suite,
            "complete": self.complete,
            "k": self.k,
            "n_expected": self.n_expected,
            "n_graded": self.n_graded,
            "n_missing": self.n_missing,
            "n_errored": self.n_errored,
            "judge_version": self.judge_version,
            "judge_files": list(self.judge_files),
            "judge_model": self.judge_model,
            "judge_same_model_override": self.judge_same_model_override,
            "overall": self.overall.to_json(),
            "per_tag": {t: m.to_json() for t, m in self.per_tag.items()},
            "per_arm": {a: s.to_json() for a, s in self.per_arm.items()},
            "judge": self.judge,
            "judge_trust": self.judge_trust.to_json() if self.judge_trust else None,
            "human_agreement": self.human_agreement,
            "judge_spend_usd": self.judge_spend_usd,
            "cache_hits": self.cache_hits,
            "run_spend_usd": self.run_spend_usd,
            "cap_usd": self.cap_usd,
            "judge_ledger_usd": self.judge_ledger_usd,
            **({"stop_reason": self.stop_reason} if self.stop_reason else {}),
            **({"stop_detail": self.stop_detail} if self.stop_detail else {}),
            "privacy": self.privacy,
            **({"pairwise": self.pairwise} if self.pairwise is not None else {}),
            "findings": [dict(f) for f in self.findings],
            **({"judged_rates": self.judged_rates} if self.judged_rates is not None else {}),
            **({"judge_consistency": self.judge_consistency} if self.judge_consistency is not None else {}),
        }

    @classmethod
    def from_json(cls, d: Any) -> GradesSummary:
        d = _check_schema(d, cls.SCHEMA, "a grades summary")
        trust = d.get("judge_trust") or d.get("human_agreement")
        agreement = d.get("human_agreement") if d.get("judge_trust") else None
        return cls(
            complete=bool(d.get("complete")),
            k=d.get("k"),
            overall=GroupMetrics.from_json(d.get("overall") or {}),
            per_tag={t: GroupMetrics.from_json(m) for t, m in (d.get("per_tag") or {}).items()},
            per_arm={a: ArmSummary.from_json(s) for a, s in (d.get("per_arm") or {}).items()},
            run=str(d.get("run") or ""),
            suite=d.get("suite"),
            judge_version=d.get("judge_version"),
            judge_files=tuple(d.get("judge_files") or ()),
            judge_model=d.get("judge_model"),
            judge_same_model_override=bool(d.get("judge_same_model_override")),
            judge=d.get("judge") if isinstance(d.get("judge"), dict) else None,
            judge_trust=JudgeTrust.from_json(trust) if trust else None,
            human_agreement=agreement if isinstance(agreement, dict) else None,
            judge_spend_usd=float(d.get("judge_spend_usd") or 0.0),
            cache_hits=int(d.get("cache_hits") or 0),
            run_spend_usd=d.get("run_spend_usd"),
            cap_usd=d.get("cap_usd"),
            judge_ledger_usd=d.get("judge_ledger_usd"),
            stop_reason=d.get("stop_reason"),
            stop_detail=d.get("stop_detail"),
            privacy=d.get("privacy"),
            pairwise=d.get("pairwise"),
            findings=tuple(d.get("findings") or ()),
            source=str(d.get("source") or "grade"),
            judged_rates=d.get("judged_rates") if isinstance(d.get("judged_rates"), dict) else None,
            judge_consistency=d.get("judge_consistency") if isinstance(d.get("judge_consistency"), dict) else None,
        )


# --- micro-tests --------------------------------------------------------------------------


@dataclass(frozen=True)
class MicrotestArm:
    """One arm of a micro-test: samples, how many were flagged, the flag rate with its
    95% Wilson interval, and how many distinct answer shapes the repetitions gave."""

    samples: int
    flagged: int
    rate: float | None
    ci_low: float | None
    ci_high: float | None
    shapes: int

    def to_json(self) -> dict[str, Any]:
        return {f.name: v for f, v in _items(self)}


@dataclass(frozen=True)
class MicrotestResult:
    """A micro-test's conclusion (`microtest.analyse`): the control's failures, the best
    variant, and the verdict kind (`pass`: the best variant flags less than the control;
    `no-improvement`: it does not, or the control shows nothing to fix)."""

    SCHEMA = "evalkit.conclusions.microtest/1"

    control: str
    flag_pattern: str
    arms: dict[str, MicrotestArm]
    kind: str
    conclusion: str
    nothing_to_fix: bool
    best: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "control": self.control,
            "flag_pattern": self.flag_pattern,
            "arms": {a: v.to_json() for a, v in self.arms.items()},
            "kind": self.kind,
            "conclusion": self.conclusion,
            "nothing_to_fix": self.nothing_to_fix,
            "best": self.best,
        }

    @classmethod
    def from_json(cls, d: Any) -> MicrotestResult:
        d = _check_schema(d, cls.SCHEMA, "a micro-test result")
        return cls(
            str(d["control"]),
            str(d.get("flag_pattern") or ""),
            {a: MicrotestArm(**v) for a, v in (d.get("arms") or {}).items()},
            str(d["kind"]),
            str(d["conclusion"]),
            bool(d.get("nothing_to_fix")),
            d.get("best"),
        )


# --- what compare, gate and report concluded ------------------------------------------------


@dataclass(frozen=True)
class ArmComparisons:
    """`evalkit compare` on a run of more than two arms: every pair's sign-test verdict
    (or, with a `control` arm, the control against each other arm), with Holm's
    correction across the pairs. `pairs` are the corrected verdicts (each keeps its own
    uncorrected `p_value`; its kind and reason follow `p_adjusted`, the Holm-adjusted
    p-value at the family's `alpha`); a pair that was inconclusive stays so.

    References: Holm 1979, Scand. J. Statist. 6(2); Dixon & Mood 1946 (the sign test)."""

    SCHEMA = "evalkit.arm-comparisons/1"

    arms: tuple[str, ...]
    control: str | None
    alpha: float
    pairs: tuple[Verdict, ...]
    p_adjusted: tuple[float | None, ...]
    correction: str = "holm"

    def pair(self, baseline: str, treatment: str) -> tuple[Verdict, float | None] | None:
        """The corrected verdict of one pair and its adjusted p-value, or None."""
        for v, p in zip(self.pairs, self.p_adjusted, strict=True):
            if (v.baseline_arm, v.treatment_arm) == (baseline, treatment):
                return v, p
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "arms": list(self.arms),
            "control": self.control,
            "alpha": self.alpha,
            "correction": self.correction,
            "pairs": [
                {
                    "baseline": v.baseline_arm,
                    "treatment": v.treatment_arm,
                    "kind": v.kind,
                    "wins": v.wins,
                    "ties": v.ties,
                    "losses": v.losses,
                    "errored": v.errored,
                    "p_value": _num_or_none(v.p_value),
                    "p_adjusted": _num_or_none(p),
                    "verdict": v.to_json(),
                }
                for v, p in zip(self.pairs, self.p_adjusted, strict=True)
            ],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArmComparisons:
        rows = d.get("pairs") or []
        return cls(
            arms=tuple(d.get("arms") or ()),
            control=d.get("control"),
            alpha=float(d.get("alpha", 0.05)),
            pairs=tuple(Verdict.from_json(r["verdict"]) for r in rows),
            p_adjusted=tuple(r.get("p_adjusted") for r in rows),
            correction=str(d.get("correction", "holm")),
        )

    def render(self) -> str:
        """The one table: each pair's tally, p-value, Holm-adjusted p-value and verdict."""
        how = f"{self.control} against each other arm" if self.control else "every pair"
        lines = [
            f"{len(self.arms)} arms ({', '.join(self.arms)}), {len(self.pairs)} comparison(s): {how}; exact "
            f"two-sided sign test per pair, one vote per case, Holm-corrected across the pairs at alpha "
            f"{self.alpha:g}",
            "",
            f"{'baseline':<16} {'treatment':<16} {'W/T/L (err)':>14} {'p':>9} {'p (Holm)':>9}  verdict",
        ]
        for v, p in zip(self.pairs, self.p_adjusted, strict=True):
            tally = f"{v.wins}/{v.ties}/{v.losses} ({v.errored})"
            raw = "n/a" if v.p_value is None else f"{v.p_value:.4g}"
            adj = "n/a" if p is None else f"{p:.4g}"
            lines.append(
                f"{str(v.baseline_arm):<16} {str(v.treatment_arm):<16} {tally:>14} {raw:>9} {adj:>9}  {v.kind.upper()}"
            )
        return "\n".join(lines)


@dataclass(frozen=True)
class RunVerdicts:
    """`verdicts.json` in a run folder: what `compare`, `gate` and `report` concluded
    about the run, written before any notebook runs, read by the notebooks and the
    index. Each command replaces its own part: `comparisons` (one per pair of arms, the
    plan check inside), `gate` (against `baseline`), `judge_trust`, `conformance` (a
    single-arm run), `microtest`."""

    SCHEMA = "evalkit.conclusions.verdicts/1"

    run: str
    comparisons: tuple[Verdict, ...] = ()
    gate: GateResult | None = None
    judge_trust: JudgeTrust | None = None
    conformance: ConformanceVerdict | None = None
    microtest: MicrotestResult | None = None
    plan: str | None = None  # the plan file the comparisons were held to
    updated: str = ""
    arm_comparisons: ArmComparisons | None = None  # a run of more than two arms: every pair, Holm-corrected

    def comparison(self, baseline: str, treatment: str) -> Verdict | None:
        return next((v for v in self.comparisons if (v.baseline_arm, v.treatment_arm) == (baseline, treatment)), None)

    def with_comparison(self, v: Verdict) -> RunVerdicts:
        """These verdicts with `v` in place of the comparison of the same two arms."""
        kept = tuple(
            c for c in self.comparisons if (c.baseline_arm, c.treatment_arm) != (v.baseline_arm, v.treatment_arm)
        )
        plan = v.plan_check.plan if v.plan_check is not None else self.plan
        return replace(self, comparisons=kept + (v,), plan=plan)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA,
            "run": self.run,
            "updated": self.updated,
            "plan": self.plan,
            "comparisons": [v.to_json() for v in self.comparisons],
            "gate": self.gate.to_json() if self.gate else None,
            "judge_trust": self.judge_trust.to_json() if self.judge_trust else None,
            "conformance": self.conformance.to_json() if self.conformance else None,
            "microtest": self.microtest.to_json() if self.microtest else None,
            "arm_comparisons": self.arm_comparisons.to_json() if self.arm_comparisons else None,
        }

    @classmethod
    def from_json(cls, d: Any) -> RunVerdicts:
        d = _check_schema(d, cls.SCHEMA, "verdicts.json")
        return cls(
            run=str(d.get("run") or ""),
            comparisons=tuple(Verdict.from_json(v) for v in d.get("comparisons") or ()),
            gate=GateResult.from_json(d["gate"]) if d.get("gate") else None,
            judge_trust=JudgeTrust.from_json(d["judge_trust"]) if d.get("judge_trust") else None,
            conformance=ConformanceVerdict.from_json(d["conformance"]) if d.get("conformance") else None,
            microtest=MicrotestResult.from_json(d["microtest"]) if d.get("microtest") else None,
            plan=d.get("plan"),
            updated=str(d.get("updated") or ""),
            arm_comparisons=ArmComparisons.from_json(d["arm_comparisons"]) if d.get("arm_comparisons") else None,
        )


@dataclass(frozen=True)
class PromptFinding:
    """One finding of the static analysis of a prompt or skill file
    (`evalkit.suites.analyze`): where (`file`, 1-based `line` and `col`), how bad
    (`severity`: error, warning, note), which `rule`, what it says and the `suggestion`
    (a rewrite to consider)."""

    file: str
    line: int
    col: int
    severity: str
    rule: str
    message: str
    suggestion: str

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "severity": self.severity,
            "rule": self.rule,
            "message": self.message,
            "suggestion": self.suggestion,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PromptFinding:
        return cls(
            str(d["file"]),
            int(d["line"]),
            int(d["col"]),
            str(d["severity"]),
            str(d["rule"]),
            str(d["message"]),
            str(d["suggestion"]),
        )
