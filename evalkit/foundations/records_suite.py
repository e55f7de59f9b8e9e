"""The records a suite is made of: `Check`, `Case`, `Price`, `Endpoint`, `Arm`, `Unit` and its
executor, `GateThresholds`, `Config`, `Suite`. Split out of `evalkit.foundations.records`,
which re-exports every public name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from evalkit.foundations.records_base import CaseSet, Json


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
    # The API the endpoint speaks: "openai" (OpenAI-compatible: every call is sent as chat,
    # completions or Responses), "anthropic" or "gemini" (that provider's own API: an
    # agent's calls in it pass through, `evalkit.calls.anthropic_api`, `evalkit.calls.gemini_api`).
    api: str = "openai"


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
class Limits:
    """What one sample of a command or python unit may take (`unit.limits`,
    `evalkit.calls.sandbox`), so one hostile or runaway program cannot take the run down:
    processes and threads, address space per process, the size of any file it writes,
    its ``/tmp`` (a tmpfs in host memory), its open files, its open connections to the
    proxy, and the tool reports it posts (each one's bytes, and how many). A hit errors
    that sample, naming the limit; the run goes on."""

    processes: int = 256
    memory_bytes: int = 4 * 1024**3
    file_size_bytes: int = 256 * 1024**2
    tmp_bytes: int = 256 * 1024**2
    open_files: int = 1024
    proxy_connections: int = 64
    tool_report_bytes: int = 1024**2
    tool_reports: int = 1000


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
    read_only_paths: tuple[str, ...] = ()  # paths (suite-relative or absolute) bound read-only into the sandbox
    env: tuple[str, ...] = ()  # names of evalkit's environment variables passed to the program
    resources: Resources = field(default_factory=Resources)  # what a sample holds of a Ray node
    limits: Limits = field(default_factory=Limits)  # what one sample may take (evalkit.calls.sandbox)


@dataclass(frozen=True)
class Simulator:
    """The simulated user of a conversation suite (`config.json` -> `simulator`): its
    endpoint and price (the same rules as the generator's and the judge's), its
    sampling, and the versioned prompt it plays the user by (`simulator/prompt-vN.md`,
    the highest N; recorded in the run's config as the judge's files are).
    `evalkit.conversations`."""

    endpoint: Endpoint
    price: Price
    prompt: str
    prompt_file: str
    temperature: float | None = None
    max_tokens_out: int = 256


@dataclass(frozen=True)
class GateThresholds:
    """Gate against a baseline (`config.json` -> `gate`), by default the seed's
    (`001_524732e6341b4025.txt`, step 6): fail on an observed drop of the gated case score
    above `max_success_drop_points` (percentage points, default 3) overall or on any tag
    with >= `min_tag_cases` cases (5), or a cost-per-case increase above
    `max_cost_increase_pct` percent (20). What the gate can see is said with every
    verdict, and fails it only where the suite asks: `require_significance` (the noise
    guard) fails a breach only when it is also beyond run-to-run noise (Holm-adjusted
    one-sided p <= `alpha`); `on_underpowered` "fail" fails a gate whose gated set is too
    small to detect a drop of `max_success_drop_points` at `alpha` (`GatePower`:
    UNDERPOWERED), "warn" (the default) says so."""

    max_success_drop_points: float = 3.0
    max_cost_increase_pct: float = 20.0
    min_tag_cases: int = 5
    alpha: float = 0.05  # the noise guard's level and the power computation's
    on_underpowered: Literal["fail", "warn"] = "warn"
    require_significance: bool = False  # the noise guard: a breach fails only when beyond noise at alpha


def noise_guard_asked(gate: Any) -> bool:
    """The default of a `gate` block's `require_significance`: a block that sets `alpha`
    asked, before issue 41, for the noise guard at that level (1 turned it off), and keeps
    that meaning: on when alpha is below 1. A block without either gets the seed's gate
    (no noise guard)."""
    a = gate.get("alpha") if isinstance(gate, dict) else None
    return isinstance(a, (int, float)) and not isinstance(a, bool) and a < 1


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
    # Whether an uncalibrated judge's pass/fail counts (`judge.decide_trust`): None (the
    # default) counts a judge that is not calibrated at all, flagged on every output; True
    # (`allow_uncalibrated_judge: true`) counts any judge; False (`judge.require_calibration:
    # true`, or `allow_uncalibrated_judge: false`) holds every judge that is not trusted.
    allow_uncalibrated_judge: bool | None = None
    verdict_judge: Literal["direct", "pairwise"] = "direct"  # which judge `compare` rests the verdict on
    # the unit the recorded two-arm verdict counts: one vote per case, or SKRAFT's trial
    # (stimuli x runs, `verdict_unit: "trial"`), the other shown beside it
    verdict_unit: Literal["case", "trial"] = "case"
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
    # when a run may stop before the fixed design's end (evalkit.running.until_decided):
    # "fixed" never, "sequential" once the pre-registered test decided, "per_case" a case's gate
    stopping: Literal["fixed", "sequential", "per_case"] = "fixed"
    simulator: Simulator | None = None  # a conversation suite's simulated user (evalkit.conversations)

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
