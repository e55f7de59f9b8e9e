"""Grade a run folder: deterministic checks, then the judge for judged cases, then
metrics and findings. Writes `grades.jsonl` and `grades-summary.json` (docs/formats.md).

Re-grading replaces both files and never calls the generator: it reads `results.jsonl`.
Judge answers are kept in the run folder's response cache (`judge-cache.sqlite`), so a
re-grade with unchanged judge files replays them at $0; judge calls that are made
reserve and settle on the run's own `ledger.jsonl` under the run's cost cap: the one the
run's `config.json` records (`runs.run_cap_usd`; a CI run's `ci.cost_cap_usd`), so the
generator and the judge of one run spend under one cap.

A sample missing from `results.jsonl` is not a pass: every rate divides by the samples
the run was expected to produce (cases x arms x k), and each group states how many were
expected, graded, missing and errored. A judge error leaves `passed` null on its line.

Metrics of a group (`grades-summary.json` -> `overall`, `per_tag`, `per_arm`):

* `sample_pass_rate`: samples whose every check (judge included) passed / expected
  samples (`evalkit.numbers.metrics`; evalkit 0.1 called it `success_rate`);
* `correct_rate`: the same ignoring `activation` checks, so "bad output" is told apart
  from "the guidance never triggered" (`activation_rate`: samples with an activation
  check, on cases that should activate, whose marker or loading tool call appeared;
  `false_activation_rate`: the same on `intent: non-activation` cases);
* `tool_call_correctness`: passed / all `tool_calls` checks;
* `hallucination_rate`: failed / all `grounding` checks (a sample with any ungrounded
  number, date or quoted name counts once; the check's reason lists the misses);
* `refusal_rate`: samples `graders.is_refusal` flags, overall, on `golden`-tagged cases,
  and on should-refuse cases (a `refusal` check, or tag `should-refuse`);
* `latency_p50_ms` / `latency_p95_ms` of the graded samples;
* `cost_per_sample_usd` / `cost_per_case_usd`: list price (generator + what the cache
  avoided + judge) per sample and per case, with `paid_usd` and `cache_avoided_usd`
  beside them (`evalkit.numbers.metrics` defines each once);

and per arm, pass@k and pass^k with their SE and the gated case score, overall
(`scores`), per set (`per_set_scores`) and per tag (`per_tag_scores`).

Identical (case, output) pairs are judged once per grading pass and share the answer.

**A judge you can trust.** A judged sample's pass/fail counts only when the judge is
trusted (`judge.decide_trust`): calibrated against people on this rubric (at least 20
fresh labels on this run, or the suite's accepted `judge/calibration.json` record for
this very judge: model, endpoint, prompt and rubric hashes), or the user opted out
(`allow_uncalibrated_judge` / `--allow-uncalibrated-judge`), or, by default, the judge is
not calibrated at all (no accepted record, under 20 fresh labels): counted, recorded on
every judged line as `judge_uncalibrated_override` and in `judge_trust`, flagged "judge
not calibrated (n of 20 labels)" on the terminal, RESULTS, every page and the CI summary,
a MEDIUM finding (seed 001: a human sample under 20 items). A judge whose calibration
missed the bars, or any judge not trusted where the suite sets `judge.require_calibration`
(`--require-calibrated-judge`), is *held*: its line keeps the judge's score and
`judge_passed`, `judge_held` says why, `passed` is None unless a deterministic check
already failed it (then False: the judge could not have passed it), and no rate, gate or
verdict reads the judge's answer: held samples are counted (`n_held`) and are never
passes. Grading exits 1 while any judged result is held, or any pairwise trial errored.

The judge cache is scoped to the judge (`judge.cache_scope`: model, endpoint, judge
files), so a re-grade against another judge server or other judge files asks again. A
grading without the pairwise judge removes an earlier `pairwise.jsonl`; with it, every
planned (judged case, index) gets a line, an arm's missing sample an errored one.

`grade_run(batch=...)` (`evalkit grade RUN --batch`) makes the judge calls through the
provider's Batch API instead (`evalkit.running.batch.JudgeBatches`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import random
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from evalkit.calls import sandbox
from evalkit.calls.cache import ResponseCache
from evalkit.calls.ledger import Ledger, role_spend
from evalkit.checking.graders import AgentFacts, activation_observed, grade_sample, is_refusal, require_scored
from evalkit.checking.judge import (
    HUMAN_SAMPLE_MIN,
    REPEAT_ITEMS,
    REPEAT_TEMPERATURE,
    Calibration,
    HumanLabel,
    JudgedItem,
    JudgeFiles,
    JudgeIdentity,
    JudgeScore,
    JudgeTrust,
    LabelMatch,
    PairOutcome,
    cache_scope,
    calibrate,
    check_judge_model,
    consistency,
    decide_trust,
    item_id,
    item_rubric_sha256,
    judge_direct,
    judge_identity,
    judge_pair,
    judge_versions,
    load_human_labels,
    load_judge_files,
    match_labels,
    pairwise_bias,
    position_consistency,
    read_calibrations,
    suite_human_labels,
    text_sha256,
    trajectory_text,
    unmatched_pair,
)
from evalkit.conclusions.results import write_seed_results, write_summary_md
from evalkit.conversations.transcript import judged_text
from evalkit.foundations._io import RUN_JSON_BYTES, iter_jsonl, read_json_object, write_atomic
from evalkit.foundations._text import storable_json
from evalkit.foundations.errors import InputError, JudgeError
from evalkit.foundations.findings import Finding, Level, by_severity
from evalkit.foundations.layout import (
    CONFIG_FILE,
    GRADES,
    GRADES_SUMMARY,
    HUMAN_LABELS_FILE,
    JUDGE_CACHE,
    LEDGER,
    PAIRWISE,
    RESULTS,
    RUN_CONFIG,
    trajectory_relpath,
)
from evalkit.foundations.records import (
    ArmSummary,
    Case,
    CaseTable,
    CheckResult,
    Endpoint,
    Grade,
    GradesSummary,
    GroupMetrics,
    Sample,
    SetScore,
    Suite,
)
from evalkit.foundations.records import JudgeTrust as JudgeTrustRecord
from evalkit.numbers import metrics
from evalkit.pii.privacy import scan_outputs
from evalkit.runfolder.runload import case_table, judge_trust_notice
from evalkit.runfolder.runs import (
    RunFolder,
    find_suite_dir,
    grade_from_dict,
    grade_to_dict,
    not_run_keys,
    run_cap_usd,
    sample_from_dict,
)
from evalkit.runfolder.trajectories import read_trajectory
from evalkit.suites.endpoints import Watch, cache_identity, combine, endpoint_key, resolve_base_url, served_watch
from evalkit.suites.reader import load_suite

__all__ = [
    "GRADES_SUMMARY",
    "JUDGE_CACHE",
    "PAIRWISE",
    "judge_trust_notice",
]  # the file names, importable from here as before

GOLDEN_TAG = "golden"
SHOULD_REFUSE_TAGS = ("should-refuse", "should_refuse")

Key = tuple[str, str, int]


@dataclass(frozen=True)
class GradeResult:
    """What `grade_run` wrote: the grade lines, the summary dict, the findings."""

    run_path: Path
    grades: tuple[Grade, ...]
    summary: GradesSummary
    findings: tuple[Finding, ...]
    pairs: tuple[PairOutcome, ...] = ()

    @property
    def complete(self) -> bool:
        return self.summary.complete

    @property
    def held(self) -> int:
        """Judged samples whose pass/fail is held (the judge is not trusted)."""
        return self.summary.overall.n_held

    @property
    def exit_code(self) -> int:
        """0 when every expected sample was graded, no judged result is held and no
        pairwise trial errored; 1 otherwise."""
        pw_errored = int((self.summary.pairwise or {}).get("errored") or 0)
        return 0 if self.complete and not self.held and not pw_errored else 1


# ------------------------------------------------------------------------- loading


def resolve_suite(run: Path, meta: dict[str, Any], suite: Suite | str | Path | None) -> Suite:
    """The suite to grade `run` against: `suite` (loaded when a path), else the one its
    `config.json` (`meta`) names; `InputError` when it cannot be found."""
    if isinstance(suite, Suite):
        return suite
    # lenient on unknown keys: the run that is graded already accepted its suite (`run` and
    # `lint` are where a typo stops, unless `--lenient-keys` let it through there)
    if suite is not None:
        return load_suite(suite, lenient_keys=True)
    ref = meta.get("suite")
    if not ref:
        raise InputError("the run's config.json names no suite: pass the suite path", run / RUN_CONFIG)
    if Path(ref).is_file():  # a suite given as its evals.json / eval.yaml file
        return load_suite(ref, lenient_keys=True)
    found = find_suite_dir(run, ref)
    if found is not None:
        return load_suite(found, lenient_keys=True)
    raise InputError(
        f"the run's suite {ref!r} was not found: pass the suite path", run / RUN_CONFIG, json_path="$.suite"
    )


def read_samples(run: Path) -> dict[Key, Sample]:
    """The run's samples (`results.jsonl`) by (case, arm, index); the first line of a
    key wins (a resumed run may repeat one)."""
    samples: dict[Key, Sample] = {}
    p = run / RESULTS
    if not p.exists():
        return samples
    for d in iter_jsonl(p):
        s = sample_from_dict(d)
        samples.setdefault((s.case_id, s.arm, int(s.index)), s)  # a resumed run may repeat a line
    return samples


def _expected_keys(meta: dict[str, Any], samples: dict[Key, Sample]) -> set[Key]:
    """The keys the run planned (cases x arms x k), or for a run that did not say, those
    it has a sample for."""
    cases, arms, k = meta.get("cases"), meta.get("arms"), meta.get("k")
    if isinstance(cases, list) and isinstance(arms, list) and isinstance(k, int):
        return {(c, a, i) for c in cases for a in arms for i in range(k)}
    return set(samples)  # a run from another tool that did not say what it planned


# ----------------------------------------------------------------------- grading


def _should_refuse(case: Case) -> bool:
    if any(t in SHOULD_REFUSE_TAGS for t in case.tags):
        return True
    return any(c.kind == "refusal" and c.options.get("should_refuse", True) for c in case.checks)


def _refused(case: Case | None, output: str) -> bool:
    """Whether an output refuses, as the case's own refusal check reads it: the built-in
    phrases plus the `patterns` of its refusal checks (the refusal rates count what the
    check counts). A case pattern that times out leaves the built-ins to decide."""
    patterns: list[str] = []
    for c in case.checks if case else ():
        pats = c.options.get("patterns") if c.kind == "refusal" else None
        patterns += [str(p) for p in pats] if isinstance(pats, list) else []
    try:
        return is_refusal(output, tuple(patterns))
    except TimeoutError:
        return is_refusal(output)


def _activation(case: Case, sample: Sample, checks_run: list[CheckResult] | None = None) -> bool | None:
    checks = [c for c in case.checks if c.kind == "activation"]
    skill = [i for i, c in enumerate(case.checks) if c.kind == "skill_activation"]
    if skill and checks_run is not None:  # an agent's skill: its check says whether it was used
        skill_dir = ((sample.agent or {}).get("skill_dir")) if sample.agent else None
        seen = []
        for i in skill:
            expect = case.checks[i].options.get("expect", bool(skill_dir) and case.intent != "non-activation")
            seen.append(checks_run[i].passed == bool(expect))
        return any(seen)
    if not checks:
        return None
    return any(
        activation_observed(
            sample.output, sample.tool_calls, marker=c.options.get("marker"), tool=c.options.get("tool")
        )
        for c in checks
    )


def _grade_line(
    case: Case,
    sample: Sample,
    checks: list[CheckResult],
    js: JudgeScore | None,
    judge_error: str | None,
    override: bool,
    trust: JudgeTrust | None = None,
) -> Grade:
    """One sample's grade. A judge score counts among the checks only when `trust`
    says the judge is trusted; otherwise the judge's result is kept beside the checks
    (`judge_passed`) and held (`judge_held`), and the sample's `passed` is what the
    deterministic checks alone can decide: False when one failed, else None."""
    checks = list(checks)
    error = judge_error
    score = reason = version = model = None
    judge_passed = held = None
    cost = avoided = 0.0
    tokens_in = tokens_out = None
    if js is not None:
        version, model, cost = js.version, js.model, js.cost_usd
        avoided, tokens_in, tokens_out = js.cost_avoided_usd, js.tokens_in, js.tokens_out
        if js.error:
            error = f"judge error: {js.error}"
        else:
            score, reason = js.score, js.reason
            judge_passed = score is not None and score >= case.judge_threshold
            check = CheckResult(
                "judge",
                judge_passed,
                "" if judge_passed else f"judge score {score} < threshold {case.judge_threshold}: {reason}",
            )
            if trust is None or trust.trusted:
                checks.append(check)
            else:
                held = f"judge not trusted: {trust.reason}"
    if sample.termination == "simulator_error":  # the simulated user failed, not the agent: counted apart
        error = error or "simulator_error: the simulated user's call failed after its retries"
    passed: bool | None
    if error:
        passed = None
    elif held:
        passed = False if not all(c.passed for c in checks) else None
    else:
        passed = all(c.passed for c in checks)
    return Grade(
        case_id=case.id,
        arm=sample.arm,
        index=int(sample.index),
        passed=passed,
        checks=tuple(checks),
        judge_version=version,
        judge_score=score,
        judge_reason=reason,
        judge_cost_usd=cost,
        activated=_activation(case, sample, checks),
        error=error,
        judge_model=model,
        judge_same_model_override=bool(override and case.judged),
        judge_passed=judge_passed,
        judge_held=held,
        judge_uncalibrated_override=bool(case.judged and trust is not None and trust.opt_out and score is not None),
        judge_cost_avoided_usd=avoided,
        judge_tokens_in=tokens_in,
        judge_tokens_out=tokens_out,
    )


def _agent_facts(run: Path, suite: Suite, sample: Sample) -> AgentFacts | None:
    """What the trajectory checks of an agent unit's sample read (None for a prompt
    unit's): the trajectory itself only when a check asks for it."""
    if sample.agent is None:
        return None

    arm = next((a for a in suite.config.arms if a.name == sample.arm), None)
    key = (sample.case_id, sample.arm, int(sample.index))
    return AgentFacts.of(sample, arm, lambda: read_trajectory(run, *key), run)


# Evaluates a list of Python expressions over a context (JSON on stdin), each with only
# a few builtins, `re` and `json`; prints, per expression, null when it held, else why
# not. Run by `sandboxed_assertions` inside the sandbox, never in evalkit's process.
_ASSERTION_EVALUATOR = """
import json, re, sys
job = json.load(sys.stdin)
safe = {n: __builtins__.__dict__[n] if hasattr(__builtins__, "__dict__") else __builtins__[n]
        for n in ("len", "any", "all", "str", "int", "float", "bool", "list", "dict", "min", "max",
                  "sum", "sorted", "set", "tuple", "abs", "isinstance", "True", "False", "None")}
scope = {"__builtins__": safe, "re": re, "json": json, **job["context"]}
out = []
for expr in job["assertions"]:
    try:
        out.append(None if eval(expr, scope) else "false")
    except Exception as exc:
        out.append(type(exc).__name__ + ": " + str(exc)[:200])
print(json.dumps(out))
"""
ASSERTION_TIMEOUT_S = 10.0


def sandboxed_assertions(
    run: Path, suite: str | Path, exprs: Sequence[str], context: Mapping[str, Any]
) -> list[str | None]:
    """Waza's `code` assertions evaluated by a fresh Python process inside the sandbox
    (`evalkit.calls.sandbox`: no network, the suite, run and home folders hidden, a
    scratch working directory): per expression None when it held, else why not. Where
    the sandbox cannot run every assertion fails with its reason: never evaluated in
    evalkit's own process."""
    why = sandbox.probe()
    if why is not None:
        return [f"the sandbox cannot run here ({why})"] * len(exprs)
    with tempfile.TemporaryDirectory(prefix="evalkit-assert-") as tmp:
        hidden = (run, Path(suite), Path.cwd(), Path.home())
        jail = sandbox.Jail(Path(tmp), None, 0, hidden, sandbox.interpreter_paths())
        argv = sandbox.bwrap_argv(jail, [sys.executable, "-I", "-S", "-c", _ASSERTION_EVALUATOR])
        job = json.dumps({"assertions": list(exprs), "context": dict(context)})
        try:
            done = subprocess.run(argv, input=job, capture_output=True, text=True, timeout=ASSERTION_TIMEOUT_S)
            answers = json.loads(done.stdout)
        except (subprocess.TimeoutExpired, ValueError) as exc:
            return [f"the evaluator failed: {type(exc).__name__}"] * len(exprs)
    if not isinstance(answers, list) or len(answers) != len(exprs):
        return ["the evaluator gave no answer"] * len(exprs)
    return [None if a is None else str(a) for a in answers]


TRACE_CHECKS = ("forbidden_tools", "tool_calls")  # checks that read the trace of a sample's tool calls
INCOMPLETE_TRAJECTORY = "trajectory may be incomplete"


def _incomplete_trajectory_findings(
    config: Any, cases: Mapping[str, Case], samples: Mapping[Key, Sample], det: Mapping[Key, Any]
) -> list[Finding]:
    """A finding for the samples of a user's program (command or python unit) whose
    model asked for no tool and that reported no tool call, while the suite declares
    tools and a trace check of the case PASSED on that empty trace: a program that runs
    its tools inside generated code leaves an empty trace, which a `forbidden_tools`
    check would pass in silence. An empty trace that fails a check (a `tool_calls`
    that expected a call) is already a visible failure, not a silent pass."""
    if not config.tools:
        return []
    found = [
        k
        for k in sorted(det)
        if (samples[k].agent or {}).get("unit") in ("command", "python")
        and not samples[k].tool_calls
        and any(r.passed and r.name.split(":")[0] in TRACE_CHECKS for r in det[k])
    ]
    if not found:
        return []
    shown = ", ".join(f"{c}/{a}/{i}" for c, a, i in found[:5])
    if len(found) > 5:
        shown += f" and {len(found) - 5} more"
    return [
        Finding(
            "MEDIUM",
            f"{INCOMPLETE_TRAJECTORY}: the model asked for no tool in {len(found)} sample(s) ({shown}), and the "
            "program reported none, while the suite declares tools and checks them, so the trace checks "
            "(forbidden_tools, tool_calls) passed on an empty trace. Either the model cannot call tools (a base "
            "model such as the embedded Gemma 3 270M answers in text: serve a model that calls tools, "
            "`evalkit serve --tools-model`) or did not choose to; or the program runs its tools itself (inside "
            "generated code) and must report each at EVALKIT_TOOLS_URL",
        )
    ]


def judge_endpoint(suite: Suite, judge_base_url: str | None = None) -> Endpoint:
    """The judge's model and the base URL its calls go to (`endpoints.resolve_base_url`:
    the override, `EVALKIT_JUDGE_BASE_URL`, `$.judge.base_url`, the server `evalkit
    serve` runs). `InputError` when there is no judge, no URL, or no key a request can
    carry, before any request."""
    judge = suite.config.judge
    config_file = Path(suite.path) / CONFIG_FILE if Path(suite.path).is_dir() else Path(suite.path)
    if judge is None:
        raise InputError("the suite has judged cases but config.json has no judge", config_file, json_path="$.judge")
    url = resolve_base_url("judge", judge, judge_base_url, config_path=config_file)
    endpoint = Endpoint(judge.model, url, judge.api_key_env)
    from evalkit.calls.client import check_endpoint  # lazy: openai's client is the heaviest import of a grade

    check_endpoint(endpoint)  # a missing key, or one no header can carry: refused before the ledger is opened
    return endpoint


@dataclass(frozen=True)
class _PairTodo:
    """One pairwise trial to ask: the texts of both arms (outputs or trajectories)."""

    case: Case
    index: int
    baseline: str
    treatment: str
    subject: str
    arms: tuple[str, str]


def _judge_client(config: Any, endpoint: Endpoint, ledger: Ledger, cache: ResponseCache) -> Any:
    """The judge's `ModelClient` on the run's ledger and the judge cache."""
    from evalkit.calls.client import ModelClient  # lazy: openai's client is the heaviest import of a grade

    return ModelClient(
        endpoint,
        config.judge_price,
        ledger,
        role="judge",
        max_tokens_in=config.max_tokens_in,
        max_tokens_out=config.max_tokens_out,
        cache=cache,
        max_attempts=config.max_attempts,
        timeout_s=config.timeout_s,
        base_url=endpoint.base_url,
        rate_limit_budget_s=config.rate_limit_budget_s,
        max_connection_failures=config.max_connection_failures,
        concurrency=config.concurrency,
        cache_endpoint=_served_identity(endpoint),
    )


def _served_identity(endpoint: Endpoint) -> str | None:
    """What the judge's cached answers are keyed by when `evalkit serve` answers as the
    judge: the served script's hash or the embedded model's file, as the generator's (an
    edited script under the same port asks again; an identical serve replays). None for
    any other endpoint, whose answers the judge cache's scope (its URL) keys already."""
    if not endpoint.base_url:
        return None
    identity = cache_identity(endpoint, endpoint.base_url)
    return None if identity == endpoint_key(endpoint.base_url) else identity


@dataclass
class _JudgeSession:
    """What every judge pass of a grade (`_judge_all`, `_judge_repeats`) calls through:
    the run's ledger resumed under the cap, the judge cache, the judge's client on
    both, the semaphore of the config's concurrency, and the watch asked before every
    judge attempt (`should_stop`). Opened and closed by `_judge_session`."""

    ledger: Ledger
    cache: ResponseCache
    client: Any
    sem: asyncio.Semaphore
    spent_before: float
    watch: Any = None
    stopped: str | None = None  # the watch's reason once it reported: no judge call after it

    @classmethod
    def open(cls, config: Any, endpoint: Endpoint, run: Path, cap: float, scope: str, watch: Any) -> _JudgeSession:
        ledger = Ledger.resume(cap, run / LEDGER)
        # batch=1: each judge answer is committed before it is used, so a grade killed
        # mid-way never pays twice for a judge key (the cache is its only record).
        cache = ResponseCache(run / JUDGE_CACHE, batch=1, scope=scope)
        client = _judge_client(config, endpoint, ledger, cache)
        sem = asyncio.Semaphore(max(1, config.concurrency))
        return cls(ledger, cache, client, sem, ledger.committed_usd, watch)

    def causes(self) -> list[str]:
        """Why no further judge call may go out, after the watch's cause: a dead or
        endlessly rate-limiting endpoint, a judge cache that can no longer store what is
        paid for (a full disk: the cache is a judge answer's only record, so an answer
        paid now would be paid again on resume), then the cap."""
        causes = [c for c in (self.client.unreachable, self.client.rate_limited_out) if c]
        if self.cache.write_error is not None:
            causes.append(str(self.cache.write_error))
        if self.ledger.refusals:
            causes.append("budget exhausted")
        return causes

    def halted(self) -> list[str]:
        """Why no further judge call may go out, as the runner says it: the watch's cause
        (its first line) first, then the session's (`causes`)."""
        return ([self.stopped.partition("\n")[0]] if self.stopped is not None else []) + self.causes()

    def should_stop(self) -> str | None:
        """Asked before every judge attempt: the first of `halted`, None to go on. The
        watch is asked until it first reports; from then on its reason stands, so once
        it reports no judge call of the pass goes out."""
        if self.stopped is None and self.watch is not None:
            reason = self.watch()
            if reason:
                self.stopped = reason.strip()
        causes = self.halted()
        return causes[0] if causes else None

    def close(self) -> None:
        self.ledger.close()
        self.cache.close()


@contextlib.asynccontextmanager
async def _judge_session(
    config: Any, endpoint: Endpoint, run: Path, cap: float, scope: str, watch: Any
) -> AsyncIterator[_JudgeSession]:
    """The set-up every judge pass shares: a `_JudgeSession` opened on the run, and its
    client, ledger and cache closed however the pass ends."""
    session = _JudgeSession.open(config, endpoint, run, cap, scope, watch)
    try:
        yield session
    finally:
        await session.client.aclose()
        session.close()


def _same_output_groups(todo: Iterable[tuple[Case, Sample]]) -> list[list[tuple[Case, Sample]]]:
    """The judged samples grouped by (case, output), in the order first seen: identical
    pairs make identical judge requests, so each group is asked once, in a fixed order,
    and the number of paid calls does not depend on timing."""
    groups: dict[tuple[str, str], list[tuple[Case, Sample]]] = {}
    for case, s in todo:
        groups.setdefault((case.id, judged_text(s)), []).append((case, s))
    return list(groups.values())


def _share_answer(js: JudgeScore, members: Sequence[tuple[Case, Sample]]) -> dict[Key, JudgeScore]:
    """One judge answer for every sample of a same-output group: the first line carries
    its cost (paid or avoided), the rest $0, as a cache hit would."""
    shared = dataclasses.replace(js, cost_usd=0.0, cost_avoided_usd=0.0)
    return {(case.id, s.arm, int(s.index)): js if i == 0 else shared for i, (case, s) in enumerate(members)}


async def _judge_group(
    session: _JudgeSession, client: Any, files: JudgeFiles, seed: int | None, members: list[tuple[Case, Sample]]
) -> dict[Key, JudgeScore]:
    """The judge asked once, through `client`, for a same-output group (its first sample)."""
    case, s = members[0]
    async with session.sem:
        js = await judge_direct(
            client,
            files,
            case,
            judged_text(s),  # a conversation's whole transcript: one judge call per conversation
            key=f"judge/{case.id}/{s.arm}/{s.index}",
            seed=seed,
            should_stop=session.should_stop,
        )
    return _share_answer(js, members)


async def _judge_pair_todo(
    session: _JudgeSession, client: Any, files: JudgeFiles, seed: int | None, t: _PairTodo
) -> PairOutcome:
    """One pairwise trial asked through `client`."""
    async with session.sem:
        return await judge_pair(
            client,
            files,
            t.case,
            t.baseline,
            t.treatment,
            index=t.index,
            key=f"pair/{t.case.id}/{t.index}",
            seed=seed,
            should_stop=session.should_stop,
            subject=t.subject,
            arms=t.arms,
        )


async def _open_batches(session: _JudgeSession, run: Path, config: Any, batch: Any) -> Any:
    """The pass's `evalkit.running.batch.JudgeBatches` when it goes through the Batch API
    (`batch`) or an earlier grading left judge batches open, which are adopted first (no
    longer counted as spent before this pass); None for online calls."""
    from evalkit.running.batch import JudgeBatches, has_open  # the provider's Batch API (evalkit.running.batch)

    if batch is None and not has_open(run, "judge"):
        return None
    batched = JudgeBatches(session.client, run, config, batch, watch=session.should_stop)
    await batched.take_over()  # an earlier grading's open batches: no longer counted as spent
    session.spent_before = session.ledger.committed_usd
    return batched


def _judge_stats(session: _JudgeSession, cap: float, batched: Any) -> dict[str, Any]:
    """What a closed judge pass puts in `grades-summary.json`: its spend (judge batches
    still running at their worst case, as a later session counts them), the cache's
    hits, the run's spend and cap, and why calls stopped (`stop_reason`, and the
    watch's report past its first line as `stop_detail`)."""
    ledger = session.ledger
    in_flight = ledger.reserved_usd if ledger.reserved_usd > 1e-12 else 0.0  # not the rounding of settles
    stats: dict[str, Any] = {
        "judge_spend_usd": ledger.committed_usd + in_flight - session.spent_before,
        "cache_hits": session.cache.hits,
        "run_spend_usd": ledger.committed_usd + in_flight,
        "cap_usd": cap,
    }
    causes = session.halted()
    if causes:
        stats["stop_reason"] = "; ".join(dict.fromkeys(c.strip() for c in causes))
    if session.stopped is not None:
        detail = session.stopped.partition("\n")[2]
        if detail.strip("\n"):
            stats["stop_detail"] = detail.strip("\n")
    elif batched is not None and batched.causes:
        stats["stop_reason"] = "; ".join(batched.causes)
    return stats


async def _judge_all(
    suite: Suite,
    files: JudgeFiles,
    todo: list[tuple[Case, Sample]],
    endpoint: Endpoint,
    run: Path,
    cap: float,
    pairs_todo: list[_PairTodo],
    watch: Any,
    scope: str = "",
    batch: Any = None,
) -> tuple[dict[Key, JudgeScore], list[PairOutcome], dict[str, Any]]:
    """The judge pass of a grade: each same-output group of `todo` asked once and every
    pairwise trial, online or through judge batches (`_open_batches`). Returns the
    scores by sample, the pair outcomes and the pass's `_judge_stats`."""
    config = suite.config
    scores: dict[Key, JudgeScore] = {}
    groups = _same_output_groups(todo)
    async with _judge_session(config, endpoint, run, cap, scope, watch) as session:

        async def ask(client: Any) -> list[PairOutcome]:  # every judge call of the pass, through `client`
            asked = await asyncio.gather(*(_judge_group(session, client, files, config.seed, m) for m in groups))
            for answers in asked:
                scores.update(answers)
            pairs = (_judge_pair_todo(session, client, files, config.seed, t) for t in pairs_todo)
            return list(await asyncio.gather(*pairs))

        batched = await _open_batches(session, run, config, batch)
        outcomes = await (batched.run(ask) if batched is not None else ask(session.client))
    return scores, outcomes, _judge_stats(session, cap, batched)


async def _judge_repeats(
    suite: Suite,
    files: JudgeFiles,
    todo: list[tuple[Case, Sample]],
    repeats: int,
    endpoint: Endpoint,
    run: Path,
    cap: float,
    watch: Any,
    scope: str,
) -> tuple[dict[Key, list[JudgeScore]], float]:
    """The judge asked `repeats - 1` more times on each of `todo` (`grade
    --judge-repeats`), at `REPEAT_TEMPERATURE` with seeds seed + 1 .. seed + repeats - 1,
    on the run's ledger under the same cap and through the judge cache (a regrade
    replays them at $0), as online calls even when the grading used `--batch`. Returns
    each item's extra scores and what they cost."""
    config = suite.config
    out: dict[Key, list[JudgeScore]] = {}
    base_seed = config.seed or 0
    async with _judge_session(config, endpoint, run, cap, scope, watch) as session:

        async def one(case: Case, s: Sample, r: int) -> tuple[Key, int, JudgeScore]:
            async with session.sem:
                js = await judge_direct(
                    session.client,
                    files,
                    case,
                    s.output,
                    key=f"judge-repeat/{case.id}/{s.arm}/{s.index}/{r}",
                    seed=base_seed + r,
                    should_stop=session.should_stop,
                    temperature=REPEAT_TEMPERATURE,
                )
            return (case.id, s.arm, int(s.index)), r, js

        done = await asyncio.gather(*(one(c, s, r) for c, s in todo for r in range(1, repeats)))
    spent = session.ledger.committed_usd - session.spent_before
    for key, _, js in sorted(done, key=lambda t: (t[0], t[1])):
        out.setdefault(key, []).append(js)
    return out, spent


def repeat_items(scored: dict[Key, JudgeScore], samples: dict[Key, Sample], seed: int | None) -> list[Key]:
    """The judged samples `grade --judge-repeats` asks again: one per distinct (case,
    output) the judge scored without error (identical outputs share one answer), at most
    `REPEAT_ITEMS` of them, drawn with the config's seed."""
    first: dict[tuple[str, str], Key] = {}
    for key in sorted(scored):
        if scored[key].score is not None:
            first.setdefault((key[0], samples[key].output), key)
    reps = sorted(first.values())
    return sorted(random.Random(seed or 0).sample(reps, min(REPEAT_ITEMS, len(reps))))


def _run_sync(coro: Any) -> Any:
    """`asyncio.run`, or the same in a worker thread when an event loop is already
    running in this thread (a notebook kernel)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def trajectory_path(run: Path, case_id: str, arm: str, index: int) -> Path:
    """Where an agent run keeps one sample's trajectory (n from 1, as `samples/`)."""
    return run / trajectory_relpath(case_id, arm, int(index))


def _pair_todo(run: Path, case: Case, index: int, base: Sample, treat: Sample, arms: tuple[str, str]) -> _PairTodo:
    """A pairwise trial on the two samples' trajectories when both have one (the judge
    then sees what each agent did, not only its last words), else on their outputs.
    A trajectory that cannot be read is a trial on the outputs (said in the subject)."""
    tb, tt = trajectory_path(run, case.id, arms[0], index), trajectory_path(run, case.id, arms[1], index)
    if tb.is_file() and tt.is_file():
        try:
            return _PairTodo(case, index, trajectory_text(tb), trajectory_text(tt), "trajectory", arms)
        except (JudgeError, OSError):
            pass
    return _PairTodo(case, index, base.output, treat.output, "output", arms)


def default_pairwise_arms(config: Any, run_arms: Sequence[str]) -> tuple[str, str] | None:
    """The arms `verdict_judge: "pairwise"` compares when `--pairwise` is not given: the
    config's first arm as the baseline, its second as the treatment (both must be in
    the run); None when there are not two."""
    names = [a.name for a in config.arms if a.name in run_arms]
    return (names[0], names[1]) if len(names) >= 2 else None


@dataclass(frozen=True)
class GradeOptions:
    """How `grade_run` grades a run (each field is described there), built once by the
    caller (`evalkit grade` from its flags, `grade_run` from its keyword arguments) and
    handed down whole: adding an option is one field here."""

    judge_base_url: str | None = None
    judge_version: str | None = None
    pairwise: tuple[str, str] | None = None
    watch: Watch | None = None
    allow_uncalibrated_judge: bool | None = None
    labels: str | Path | None = None
    batch: Any = None  # an evalkit.running.batch.BatchOptions (not imported: evalkit.running.batch only for --batch)
    judge_repeats: int = 1


@dataclass(frozen=True)
class _GradePlan:
    """What `grade_run` grades, resolved before any check runs (`_resolve_grading`): the
    run folder and its `config.json` (`meta`), the suite, the options (`pairwise`
    resolved to the arms compared, or None), the samples and the keys the run planned."""

    run: Path
    meta: dict[str, Any]
    suite: Suite
    opts: GradeOptions
    cases: dict[str, Case]
    samples: dict[Key, Sample]
    expected: set[Key]
    planned_cases: list[str]
    run_arms: list[str]

    @property
    def config(self) -> Any:
        return self.suite.config


@dataclass(frozen=True)
class _Checked:
    """The deterministic checks of every sample (`_grade_deterministic`), and the
    samples not graded because their case left the suite, with why."""

    det: dict[Key, list[CheckResult]]
    unknown: dict[Key, str]
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class _JudgeSetup:
    """What the judge step needs, read before any judge call is paid for
    (`_prepare_judge`): the judged samples, the judge files (None: none to judge with,
    `no_judge_files` says why when cases needed them), whether the judge may be the
    generator's model, and the human labels and accepted calibrations."""

    judged_keys: list[Key]
    files: JudgeFiles | None
    override: bool
    no_judge_files: str | None
    labels: list[HumanLabel] | None
    labels_where: str | None
    records: list[Calibration]
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class _Judged:
    """What the judge answered (`_ask_judge`, then `_judge_consistency`): scores by
    sample, pair outcomes, the spend and stop figures of `grades-summary.json`, the
    judge's identity (None: not asked), and with `judge_repeats` the samples whose
    verdict flipped and the `judge_consistency` block."""

    scores: dict[Key, JudgeScore]
    outcomes: list[PairOutcome]
    stats: dict[str, Any]
    identity: JudgeIdentity | None
    cap: float
    findings: tuple[Finding, ...] = ()
    unstable: frozenset[Key] = frozenset()
    consistency: dict[str, Any] | None = None


@RunFolder.holding_lock  # one process per run folder (runs.RunFolder.lock)
def grade_run(
    run_path: str | Path, suite: Suite | str | Path | None = None, options: GradeOptions | None = None, **fields: Any
) -> GradeResult:
    """Grade every sample of a run folder and write `grades.jsonl` and
    `grades-summary.json` (replacing earlier ones, atomically).

    How is one `GradeOptions` (`options`), or its fields as keyword arguments, or both
    (the keywords replace the options' fields). `suite` defaults to the suite the run
    names; `judge_base_url` overrides the judge
    endpoint; `judge_version` pins `vN` (default: the highest); `pairwise=(baseline,
    treatment)` also asks the pairwise judge on every judged case/index both arms ran
    and writes `pairwise.jsonl` (default: the config's first two arms when its
    `verdict_judge` is "pairwise"; without it an earlier `pairwise.jsonl` is removed).
    `labels` is the human label file to calibrate against (default: the suite's
    `judge/human-sample.jsonl`); `allow_uncalibrated_judge` (default: the config's)
    lets an uncalibrated judge's pass/fail count, recorded. `watch` (e.g.
    `LocalModelServer.exit_reason` of the judge's server) is asked before every judge
    attempt: once it reports, no judge call goes out, the rest are judge errors and the
    summary says why (`stop_reason`, `stop_detail`, a HIGH finding). Raises
    `InputError` (nothing written) for a case with neither a check nor a rubric, a bad
    check, a bad label file, a judge that is the generator's model without the
    override, or a judge with no base URL (`judge_endpoint`), or `batch` without
    `judge_batch_price`. `batch` (`evalkit.running.batch.BatchOptions`) sends the judge calls
    through the provider's Batch API at `judge_batch_price`, on the run's ledger; judge
    batches an earlier grading left open are collected first either way.
    `judge_repeats` R > 1 asks the judge R - 1 more times on up to `REPEAT_ITEMS` of
    the items it scored (`_judge_repeats`): `judge_consistency` in the summary, and the
    samples whose verdict flipped marked `judge_unstable`. `InputError` for R < 1.

    The steps, in order: resolve (`_resolve_grading`), grade deterministic
    (`_grade_deterministic`), judge (`_prepare_judge`, `_plan_pairs`, `_ask_judge`,
    `_judge_consistency`, `_decide_judge_trust`), then the lines (`_grade_lines`), the
    summary (`_summarise`) and the files (`_write_grading`).
    """
    opts = dataclasses.replace(options or GradeOptions(), **fields)
    plan, found = _resolve_grading(Path(run_path), suite, opts)
    checked = _grade_deterministic(plan)
    setup = _prepare_judge(plan, checked.det)
    pairs_todo, unmatched = _plan_pairs(plan, checked.det)
    judged = _ask_judge(plan, setup, pairs_todo)
    files, identity = setup.files, judged.identity
    if files is not None and identity is not None and plan.opts.judge_repeats > 1:
        if not judged.stats.get("stop_reason"):
            judged = _judge_consistency(plan, files, identity, judged)
    case_pos = {c: i for i, c in enumerate(plan.planned_cases)}
    outcomes = sorted(judged.outcomes + unmatched, key=lambda o: (case_pos.get(o.case_id, len(case_pos)), o.index))
    trust, match = _decide_judge_trust(plan, setup, judged)
    grades = _grade_lines(plan, checked, setup, judged, trust)
    findings = [*found, *checked.findings, *setup.findings, *judged.findings]
    summary, all_findings = _summarise(plan, grades, outcomes, setup, judged, trust, match, findings)
    _write_grading(plan, grades, outcomes, summary)
    return GradeResult(plan.run, tuple(grades), summary, all_findings, tuple(outcomes))


def _resolve_grading(
    run: Path, suite: Suite | str | Path | None, opts: GradeOptions
) -> tuple[_GradePlan, list[Finding]]:
    """Step 1, resolve: the run, its suite and what it planned, with the options
    checked (`judge_repeats`, `batch`'s price) and `pairwise` defaulted
    (`_default_pairwise`). Raises `InputError` before anything is graded: a bad option,
    no suite, a case with neither a check nor a rubric."""
    if int(opts.judge_repeats) != opts.judge_repeats or opts.judge_repeats < 1:
        raise InputError(f"--judge-repeats must be a positive integer, got {opts.judge_repeats!r}")
    meta = RunFolder(run).read_meta()
    suite_obj = resolve_suite(run, meta, suite)
    config = suite_obj.config
    if opts.batch is not None:  # judge batches are reserved and charged at the batch price: refuse before any work
        from evalkit.running.batch import check_ready  # lazy: evalkit.running.batch only for --batch

        check_ready(config, "judge", Path(suite_obj.path) / CONFIG_FILE)
    cases = {c.id: c for c in suite_obj.cases}
    samples = read_samples(run)
    # a run that stopped once its test decided (or a case's gate did) expects fewer keys
    expected = _expected_keys(meta, samples) - not_run_keys(RunFolder(run).read_summary())
    planned_cases = sorted({k[0] for k in expected} | {k[0] for k in samples})
    for cid in planned_cases:
        if cid in cases:
            require_scored(cases[cid])
    run_arms = sorted({k[1] for k in expected} | {k[1] for k in samples})
    pairwise, findings = _default_pairwise(config, opts.pairwise, run_arms)
    opts = dataclasses.replace(opts, pairwise=pairwise)
    return _GradePlan(run, meta, suite_obj, opts, cases, samples, expected, planned_cases, run_arms), findings


def _default_pairwise(
    config: Any, pairwise: tuple[str, str] | None, run_arms: Sequence[str]
) -> tuple[tuple[str, str] | None, list[Finding]]:
    """The arms the pairwise judge compares: `pairwise` as given, else, when the config's
    `verdict_judge` is "pairwise", its first two arms the run has
    (`default_pairwise_arms`), or None and a HIGH finding when it has fewer than two."""
    if pairwise is not None or config.verdict_judge != "pairwise":
        return pairwise, []
    pairwise = default_pairwise_arms(config, run_arms)
    if pairwise is not None:
        return pairwise, []
    return None, [
        Finding(
            "HIGH",
            'verdict_judge is "pairwise" but the run has fewer than two of the config\'s arms: '
            "no pairwise judge was asked",
        )
    ]


def _grade_deterministic(plan: _GradePlan) -> _Checked:
    """Step 2, grade deterministic: every sample's checks (`graders.grade_sample`; a
    bad check raises `InputError`, nothing written), a sample whose case left the suite
    set aside, and the finding on agent traces that may be incomplete."""
    det: dict[Key, list[CheckResult]] = {}
    unknown: dict[Key, str] = {}
    for key in sorted(plan.samples):
        case = plan.cases.get(key[0])
        if case is None:
            unknown[key] = f"case {key[0]!r} is not in the suite any more: not graded"
            continue
        sample = plan.samples[key]
        facts = _agent_facts(plan.run, plan.suite, sample) or AgentFacts()
        facts = dataclasses.replace(facts, evaluate=functools.partial(sandboxed_assertions, plan.run, plan.suite.path))
        det[key] = grade_sample(case, sample, plan.suite.path, facts)
    findings = _incomplete_trajectory_findings(plan.config, plan.cases, plan.samples, det)
    return _Checked(det, unknown, tuple(findings))


def _prepare_judge(plan: _GradePlan, det: Mapping[Key, list[CheckResult]]) -> _JudgeSetup:
    """Step 3a, before any judge call: the judged samples, the judge refused when it is
    the generator's model without the override (`judge.check_judge_model`), its files
    (`_judge_files`), and the human labels and accepted calibrations (`_human_labels`),
    each refused (`InputError`) when bad."""
    config, samples = plan.config, plan.samples
    judged_keys = [k for k in sorted(det) if plan.cases[k[0]].judged]
    files: JudgeFiles | None = None
    override = False
    missing: str | None = None
    findings: list[Finding] = []
    if judged_keys or plan.opts.pairwise:
        override = check_judge_model(config, {samples[k].model for k in judged_keys})
        files, missing, findings = _judge_files(plan, judged_keys)
        if override and config.judge is not None:  # check_judge_model refused a config without a judge
            findings.append(
                Finding(
                    "HIGH",
                    f"the judge is the generator's model ({config.judge.model}), "
                    "allowed by allow_same_judge_model: judge scores are not independent",
                )
            )
    labels, where, records = _human_labels(plan, files)
    return _JudgeSetup(judged_keys, files, override, missing, labels, where, records, tuple(findings))


def _judge_files(plan: _GradePlan, judged_keys: Sequence[Key]) -> tuple[JudgeFiles | None, str | None, list[Finding]]:
    """The judge files of the pinned or highest version; with none in the suite, None,
    why judged cases cannot be scored, and a HIGH finding per judged case."""
    if judge_versions(plan.suite.path) or plan.opts.judge_version is not None:
        return load_judge_files(plan.suite.path, plan.opts.judge_version), None, []
    why = "no judge/rubric-vN.md and judge/prompt-vN.md: judged cases cannot be scored"
    findings = [
        Finding("HIGH", f"judged case {cid!r} has no rubric file (judge/rubric-vN.md)")
        for cid in sorted({k[0] for k in judged_keys})
    ]
    return None, why, findings


def _human_labels(
    plan: _GradePlan, files: JudgeFiles | None
) -> tuple[list[HumanLabel] | None, str | None, list[Calibration]]:
    """The human labels to calibrate against (`labels`, else the suite's
    `judge/human-sample.jsonl`), where they came from, and the suite's accepted
    calibrations; nothing without judge files. Read, and refused when bad, before any
    judge call is paid for."""
    if files is None:
        return None, None, []
    labels = plan.opts.labels
    label_list: list[HumanLabel] | None
    where: str | None
    if labels is not None:
        label_list, where = load_human_labels(labels), str(labels)
    else:
        label_list = suite_human_labels(plan.suite.path)
        where = HUMAN_LABELS_FILE if label_list is not None else None
    return label_list, where, read_calibrations(plan.suite.path)


def _plan_pairs(plan: _GradePlan, det: Mapping[Key, list[CheckResult]]) -> tuple[list[_PairTodo], list[PairOutcome]]:
    """Step 3b: the pairwise trials to ask, one per judged (case, index) the run planned
    for the two arms, and an errored outcome for each whose arm has no sample.
    `InputError` for an arm the run does not have."""
    pairwise, run_arms = plan.opts.pairwise, plan.run_arms
    if not pairwise:
        return [], []
    base_arm, treat_arm = pairwise
    for arm in pairwise:
        if arm not in run_arms:
            raise InputError(
                f"pairwise arm {arm!r} is not in the run (arms: {', '.join(run_arms)})",
                plan.run / RUN_CONFIG,
                json_path="$.arms",
            )
    cases, samples = plan.cases, plan.samples
    planned = sorted(
        {(c, i) for c, a, i in plan.expected | set(samples) if a in pairwise and c in cases and cases[c].judged}
    )
    todo: list[_PairTodo] = []
    unmatched: list[PairOutcome] = []
    for cid, idx in planned:
        kb, kt = (cid, base_arm, idx), (cid, treat_arm, idx)
        if kb in det and kt in det:
            todo.append(_pair_todo(plan.run, cases[cid], idx, samples[kb], samples[kt], pairwise))
        else:
            gone = " and ".join(a for a, k in ((base_arm, kb), (treat_arm, kt)) if k not in samples) or "?"
            unmatched.append(unmatched_pair(cid, idx, f"no {gone} sample", pairwise))
    return todo, unmatched


def _ask_judge(plan: _GradePlan, setup: _JudgeSetup, pairs_todo: list[_PairTodo]) -> _Judged:
    """Step 3c, judge: every judged sample and pairwise trial asked (`_judge_all`) under
    the run's cap, with the judge's identity and its spend on the ledger, and a HIGH
    finding when calls stopped. Nothing is asked without judge files or anything to ask."""
    config, files = plan.config, setup.files
    cap = run_cap_usd(
        plan.meta, config.cost_cap_usd
    )  # the run's recorded cap (a CI run's ci.cost_cap_usd): one cap for all
    if files is None or not (setup.judged_keys or pairs_todo):
        # no judge pass: the run's spend is what its ledger holds (generator, earlier judge passes)
        ledger = plan.run / LEDGER
        spent = role_spend(ledger, "generator") + role_spend(ledger, "judge")
        stats = {"judge_spend_usd": 0.0, "cache_hits": 0, "cap_usd": cap, "run_spend_usd": spent}
        return _Judged({}, [], stats, None, cap)
    endpoint = judge_endpoint(plan.suite, plan.opts.judge_base_url)
    identity = judge_identity(files, endpoint.model, endpoint.base_url)
    todo = [(plan.cases[k[0]], plan.samples[k]) for k in setup.judged_keys]
    watch = combine(plan.opts.watch, served_watch(endpoint.base_url))
    scores, outcomes, stats = _run_sync(
        _judge_all(
            plan.suite, files, todo, endpoint, plan.run, cap, pairs_todo, watch, cache_scope(identity), plan.opts.batch
        )
    )
    stats["judge_ledger_usd"] = role_spend(plan.run / LEDGER, "judge")  # every pass, this one included
    findings: list[Finding] = []
    if stats.get("stop_reason"):
        findings.append(
            Finding(
                "HIGH",
                f"grading stopped: {stats['stop_reason']}; the judged samples "
                "left have no score (not counted as passes)",
            )
        )
    return _Judged(scores, outcomes, stats, identity, cap, tuple(findings))


def _judge_consistency(plan: _GradePlan, files: JudgeFiles, identity: JudgeIdentity, judged: _Judged) -> _Judged:
    """Step 3d (`judge_repeats` R > 1): the judge asked R - 1 more times on up to
    `REPEAT_ITEMS` of the items it scored (`_judge_repeats`); `judged` with the repeats'
    spend added, the `judge_consistency` block, the samples whose verdict flipped
    (`_flipped_samples`) and the findings (`_consistency_findings`)."""
    repeats, samples, cases = int(plan.opts.judge_repeats), plan.samples, plan.cases
    picked = repeat_items(judged.scores, samples, plan.config.seed)
    extra, spent = _run_sync(
        _judge_repeats(
            plan.suite,
            files,
            [(cases[k[0]], samples[k]) for k in picked],
            repeats,
            judge_endpoint(plan.suite, plan.opts.judge_base_url),
            plan.run,
            judged.cap,
            combine(plan.opts.watch, served_watch(identity.base_url)),
            cache_scope(identity),
        )
    )
    asks = _repeat_asks(picked, judged.scores, extra)
    block = consistency(asks, {item_id(*k): cases[k[0]].judge_threshold for k in picked})
    errors = sum(1 for k in picked for js in extra.get(k, []) if js.score is None)
    return dataclasses.replace(
        judged,
        stats={**judged.stats, "judge_spend_usd": judged.stats.get("judge_spend_usd", 0.0) + spent},
        findings=judged.findings + tuple(_consistency_findings(block, errors, files.version, repeats)),
        unstable=_flipped_samples(picked, block["unstable"], judged.scores, samples),
        consistency={
            "repeats": repeats,
            "temperature": REPEAT_TEMPERATURE,
            "max_items": REPEAT_ITEMS,
            "per_version": {files.version: {**block, "repeats": repeats, "errors": errors}},
        },
    )


def _repeat_asks(
    picked: Sequence[Key], scores: Mapping[Key, JudgeScore], extra: Mapping[Key, list[JudgeScore]]
) -> dict[str, list[int]]:
    """Item id -> every score the judge gave it: the grading's first, then the
    repeats', those without a score (a judge error) left out."""
    return {
        item_id(*k): [int(s) for s in [scores[k].score, *(js.score for js in extra.get(k, []))] if s is not None]
        for k in picked
    }


def _flipped_samples(
    picked: Sequence[Key],
    unstable_items: Iterable[str],
    scores: Mapping[Key, JudgeScore],
    samples: Mapping[Key, Sample],
) -> frozenset[Key]:
    """The judged samples to mark `judge_unstable`: every one that shares its (case,
    output) with a repeated item whose verdicts fell on both sides of the threshold
    (identical outputs share one answer, so they flip together)."""
    flipped_ids = set(unstable_items)
    flipped = {(k[0], samples[k].output) for k in picked if item_id(*k) in flipped_ids}
    return frozenset(k for k in scores if (k[0], samples[k].output) in flipped)


def _consistency_findings(block: Mapping[str, Any], errors: int, version: str, repeats: int) -> list[Finding]:
    """The MEDIUM findings of a judge-repeats pass: repeated asks that got no score,
    and items whose verdicts flipped."""
    findings: list[Finding] = []
    if errors:
        findings.append(
            Finding(
                "MEDIUM",
                f"judge consistency: {errors} of {block['n_asks'] + errors} repeated ask(s) got no score "
                "(judge error, or the cap): the flip rate is over the rest",
            )
        )
    if block["unstable"]:
        findings.append(
            Finding(
                "MEDIUM",
                f"judge {version} flips: asked {repeats} times, {len(block['unstable'])} of "
                f"{block['n_items']} item(s) got verdicts on both sides of the threshold (flip rate "
                f"{block['flip_rate']:.0%}); their samples are marked unstable",
            )
        )
    return findings


def _decide_judge_trust(
    plan: _GradePlan, setup: _JudgeSetup, judged: _Judged
) -> tuple[JudgeTrust | None, LabelMatch | None]:
    """Step 3e, calibration and trust: whether the judge's pass/fail may count in this
    grading. The human labels that match what this judge scored here calibrate it
    (`judge.calibrate`, on fresh labels only), beside its accepted records, and
    `judge.decide_trust` decides, with the user's opt-out (`allow_uncalibrated_judge`:
    the option, else the config's). Returns the trust (None when no judge was asked)
    and the label match (None without labels). `_grade_line` applies the trust to each
    judged sample (an untrusted judge's result is held) and `judge_trust_findings` says
    what it calls for: the one place grading decides how a judge's answers count."""
    files, identity = setup.files, judged.identity
    if files is None or identity is None:
        return None, None
    allow = plan.opts.allow_uncalibrated_judge
    opt_out = plan.config.allow_uncalibrated_judge if allow is None else bool(allow)
    scored = judged_items(((k, js.score) for k, js in judged.scores.items()), plan.samples, files, plan.cases)
    match = run_cal = None
    if setup.labels:
        match = match_labels(setup.labels, scored)
        if match.n_fresh:
            run_cal = calibrate(match, identity, run=plan.run.name, labels_file=setup.labels_where)
    return decide_trust(identity, run_cal, setup.records, opt_out=opt_out), match


def _grade_lines(
    plan: _GradePlan, checked: _Checked, setup: _JudgeSetup, judged: _Judged, trust: JudgeTrust | None
) -> list[Grade]:
    """Step 4: one grade line per sample, in key order (`_grade_line`): its checks and
    judge score under the judge's trust, an error for a sample whose case left the
    suite, `judge_unstable` on samples whose verdict flipped."""
    grades: list[Grade] = []
    for key in sorted(plan.samples):
        if key in checked.unknown:
            grades.append(Grade(key[0], key[1], key[2], None, (), error=checked.unknown[key]))
            continue
        case = plan.cases[key[0]]
        js = judged.scores.get(key) if case.judged else None
        jerr = setup.no_judge_files if case.judged and setup.files is None else None
        line = _grade_line(case, plan.samples[key], checked.det[key], js, jerr, setup.override, trust)
        grades.append(dataclasses.replace(line, judge_unstable=True) if key in judged.unstable else line)
    return grades


def _summarise(
    plan: _GradePlan,
    grades: list[Grade],
    outcomes: list[PairOutcome],
    setup: _JudgeSetup,
    judged: _Judged,
    trust: JudgeTrust | None,
    match: LabelMatch | None,
    findings: list[Finding],
) -> tuple[GradesSummary, tuple[Finding, ...]]:
    """Step 5, summarise: personal data in the outputs, the judge's trust, the pairwise
    judge's bias and the judged rates add their findings to `findings`, and `summarize`
    builds `grades-summary.json` (its own findings added, most severe first). Returns
    the summary and every finding."""
    run, config, files, pairwise = plan.run, plan.config, setup.files, plan.opts.pairwise
    leaks = scan_outputs(plan.suite, plan.samples)  # personal data and secrets in the outputs (no value is kept)
    findings = [*findings, *(Finding(cast(Level, level), message) for level, message in leaks.findings)]
    findings += judge_trust_findings(trust, match, grades)
    pw = None
    if pairwise:
        bias = pairwise_bias(outcomes, same_model=setup.override)
        findings += [Finding(cast(Level, level), message) for level, message in bias.findings]
        pw = pairwise_summary(outcomes, pairwise, bias)
    run_errors = {(str(e["case_id"]), str(e["arm"]), int(e["index"])) for e in RunFolder(run).errors()}
    rates = _judged_rates_of(plan, grades, match)
    findings += judged_rate_findings(rates)
    summary = summarize(
        plan.meta,
        plan.samples,
        grades,
        plan.expected,
        case_table(run),
        cases=plan.cases,
        findings=findings,
        run=str(run),
        run_errors=run_errors,
        suite=plan.suite.path,
        judge=judged.identity.to_json() if judged.identity else None,
        judge_trust=JudgeTrustRecord.from_json(trust.to_json()) if trust else None,
        human_agreement=_agreement_block(trust, match),
        judge_model=config.judge.model if config.judge else None,
        judge_files=(files.rubric_path, files.prompt_path) if files else (),
        judge_version=files.version if files else None,
        judge_same_model_override=setup.override,
        privacy=leaks.summary,
        pairwise=pw,
        judged_rates=rates,
        judge_consistency=judged.consistency,
        **judged.stats,
    )
    return summary, tuple(findings)  # summarize appended its own findings and sorted the list


def _judged_rates_of(plan: _GradePlan, grades: list[Grade], match: LabelMatch | None) -> dict[str, Any] | None:
    """The judged rates of the grading (`judged_rates`), with the run's k (its
    `config.json`'s, else the highest index graded or expected) and the human scores of
    the matched labels."""
    k_run = int(plan.meta.get("k") or max((i + 1 for _, _, i in plan.expected), default=0))
    return judged_rates(
        grades,
        plan.cases,
        case_table(plan.run),
        human_scores(match),
        plan.config.judged_estimate,
        expected=plan.expected,
        k=k_run,
        case_human=human_scores(match, draw="case"),
    )


def _write_grading(plan: _GradePlan, grades: list[Grade], outcomes: list[PairOutcome], summary: GradesSummary) -> None:
    """Step 6: `grades.jsonl`, `pairwise.jsonl` (removed when no pairwise judge was
    asked: an earlier one no longer describes this grading) and the summary files,
    each replaced atomically."""
    run = plan.run
    lines = "".join(storable_json(grade_to_dict(g)) + "\n" for g in grades)  # any text the judge sent
    write_atomic(run / GRADES, lines)
    if plan.opts.pairwise:
        write_atomic(run / PAIRWISE, "".join(storable_json(o.to_json()) + "\n" for o in outcomes))
    else:
        (run / PAIRWISE).unlink(missing_ok=True)  # an earlier grading's: it no longer describes this one
    write_summary(run, summary)
    write_seed_results(run, plan.samples, grades)  # seed 001's runs/results-<stamp>.jsonl


def judged_items(
    scored: Iterable[tuple[Key, int | None]], samples: dict[Key, Sample], files: JudgeFiles, cases: dict[str, Case]
) -> dict[str, JudgedItem]:
    """Item id -> what the judge scored (score, output and rubric hashes), for the
    scored keys (`None` scores skipped) that have a sample and a case."""
    return {
        item_id(*k): JudgedItem(int(score), text_sha256(samples[k].output), item_rubric_sha256(files, cases[k[0]]))
        for k, score in scored
        if score is not None and k in samples and k[0] in cases
    }


def run_label_match(
    run_path: str | Path, suite: Suite | str | Path | None = None, *, labels: str | Path | None = None
) -> tuple[LabelMatch, JudgeIdentity, str]:
    """A label file (default: the suite's `judge/human-sample.jsonl`) held against the
    outputs the judge scored in a graded run (`judge.match_labels`), with the identity
    of that judge and where the labels came from. No model call: the judge's scores are
    in `grades.jsonl`, its identity in `grades-summary.json`. `InputError` when the run
    was not graded by a judge, or the judge files changed since it was."""
    run = Path(run_path)
    meta = RunFolder(run).read_meta()
    suite_obj = resolve_suite(run, meta, suite)
    sp = run / GRADES_SUMMARY
    if not sp.exists():
        raise InputError("no grades-summary.json: run `evalkit grade` on the run first", run)
    summary = read_json_object(sp, GRADES_SUMMARY, limit=RUN_JSON_BYTES)
    try:
        ident = JudgeIdentity.from_json(summary.get("judge"))
    except ValueError:
        raise InputError(
            "the grading recorded no judge identity (no judged sample, or graded by an older evalkit): grade again",
            sp,
            json_path="$.judge",
        ) from None
    files = load_judge_files(suite_obj.path, ident.version)
    now = judge_identity(files, ident.model, ident.base_url)
    if not now.matches(ident):
        raise InputError(
            f"the judge files changed since this run was graded ({'; '.join(now.changes_from(ident))}): grade it again",
            Path(files.rubric_path).parent,
        )
    if labels is not None:
        label_list, where = load_human_labels(labels), str(labels)
    else:
        label_list, where = suite_human_labels(suite_obj.path) or [], HUMAN_LABELS_FILE
    cases = {c.id: c for c in suite_obj.cases}
    scored = [((g["case_id"], g["arm"], int(g["index"])), g.get("judge_score")) for g in iter_jsonl(run / GRADES)]
    return match_labels(label_list, judged_items(scored, read_samples(run), files, cases)), ident, where


def run_calibration(
    run_path: str | Path, suite: Suite | str | Path | None = None, *, labels: str | Path | None = None
) -> Calibration:
    """The calibration of the judge that graded `run_path`, on the labels that match its
    judged outputs (`run_label_match`): what `evalkit judge calibrate` records.
    `InputError` also when no label matches."""
    match, ident, where = run_label_match(run_path, suite, labels=labels)
    if not match.n_fresh:
        raise InputError(f"no label matches this run's judged outputs: {match.describe()}", where)
    return calibrate(match, ident, run=Path(run_path).name, labels_file=where)


def _agreement_block(trust: JudgeTrust | None, match: Any) -> dict[str, Any] | None:
    """`grades-summary.json`'s `human_agreement`: this run's fresh-label figures (exact,
    within one, kappa and its interval) and the label counts; None without labels."""
    if match is None:
        return None
    cal = trust.calibration if trust else None
    figures = {
        k: getattr(cal, k) if cal else None
        for k in ("exact", "within_one", "kappa", "kappa_se", "kappa_low", "kappa_high", "passed")
    }
    return {"n": match.n_fresh, **figures, "labels": match.counts()}


def judge_trust_findings(trust: JudgeTrust | None, match: Any, grades: Sequence[Grade]) -> list[Finding]:
    """The findings a judge's calibration and trust call for (see `judge.JudgeTrust`)."""
    if trust is None:
        return []
    out: list[Finding] = []
    held = [g for g in grades if g.judge_held]
    undecided = sum(1 for g in held if g.passed is None)
    if held:
        out.append(
            Finding(
                "HIGH",
                f"judged results held: {trust.reason}. {len(held)} judged sample(s) keep their score but count in no "
                f"rate, gate or verdict ({undecided} not passed for that alone); calibrate the judge "
                "(`evalkit judge sample RUN -n 20 --to FILE`, label, grade again, `evalkit judge calibrate RUN`) "
                "or opt out with allow_uncalibrated_judge",
            )
        )
    cal = trust.calibration
    if trust.opt_out:
        # seed 001: a human sample under 20 items is MEDIUM; counted by opt-out although
        # measured (20+ labels or an accepted record) and found short of the bars: HIGH
        measured = (cal is not None and cal.n >= HUMAN_SAMPLE_MIN) or trust.record is not None
        out.append(
            Finding(
                "HIGH" if measured else "MEDIUM",
                f"judged pass/fail counts although the judge is not calibrated: {trust.reason}",
            )
        )
    if cal is not None and cal.n:
        level: Level = "LOW" if cal.passed else ("HIGH" if cal.n >= HUMAN_SAMPLE_MIN else "MEDIUM")
        out.append(Finding(level, f"judge calibration on this run's labels: {cal.summary()}"))
    elif trust.record is not None and trust.basis == "calibration.json":
        out.append(Finding("LOW" if trust.record.passed else "HIGH", f"judge {trust.reason}"))
    if match is not None and (match.n_stale or match.n_unverifiable or match.n_unfilled or match.n_unmatched):
        out.append(Finding("MEDIUM", f"human labels: {match.describe()}"))
    for msg in trust.invalidated:
        out.append(Finding("MEDIUM", f"judge changed since calibration: {msg}"))
    return out


# ----------------------------------------------------------------------- metrics

Row = tuple[Case | None, Sample, Grade]  # a graded sample and its case (None: a run of another tool)


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def group_metrics(
    expected: Iterable[Key],
    rows: Sequence[Row],
    refused_by_key: dict[Key, bool] | None = None,
    run_errors: Iterable[Key] = (),
) -> GroupMetrics:
    """The metrics of one group of samples (all, an arm, a tag; `records.GroupMetrics`).
    `expected`: the keys the run planned for the group; `rows`: its graded samples with
    their cases; `refused_by_key`: each sample's `graders.is_refusal`, computed once for
    all the groups (None: no refusal rates, for a run of another tool). The checks that
    need the suite's cases are measured only on rows that have one. `run_errors`: the
    keys the run recorded an error for (`errors.jsonl`): with no result, errored, not
    missing (`metrics.missing_and_errored`)."""
    exp = set(expected)
    present = {(g.case_id, g.arm, g.index) for _, _, g in rows}
    decided = [r for r in rows if r[2].passed is not None]
    held = [r for r in rows if r[2].passed is None and r[2].judge_held]
    passed = sum(1 for r in decided if r[2].passed)
    correct = sum(1 for _, _, g in decided if all(c.passed for c in g.checks if c.name != "activation"))

    def check_rate(name: str, want: bool) -> tuple[float | None, int]:
        hits = [c.passed for _, _, g in rows for c in g.checks if c.name == name]
        return _rate(sum(1 for h in hits if h == want), len(hits)), len(hits)

    tool_rate, tool_n = check_rate("tool_calls", True)
    halluc_rate, ground_n = check_rate("grounding", False)
    with_case = [(c, s, g) for c, s, g in rows if c is not None]
    refused = [(c, refused_by_key[(g.case_id, g.arm, g.index)]) for c, _, g in with_case] if refused_by_key else []
    golden = [r for c, r in refused if GOLDEN_TAG in c.tags]
    should = [r for c, r in refused if _should_refuse(c)]
    act = [g.activated for c, _, g in with_case if g.activated is not None and c.intent != "non-activation"]
    silent = [g.activated for c, _, g in with_case if g.activated is not None and c.intent == "non-activation"]
    lat = [float(s.latency_ms) for _, s, _ in rows]
    cost = metrics.costs(
        [
            (s.case_id, float(s.cost_usd), float(s.cost_avoided_usd), float(g.judge_cost_usd), g.judge_cost_avoided_usd)
            for _, s, g in rows
        ]
    )
    judged = [g.judge_score for _, _, g in rows if g.judge_score is not None]
    n_missing, n_errored = metrics.missing_and_errored(exp, present, run_errors, len(rows) - len(decided) - len(held))
    return GroupMetrics(
        n_expected=len(exp),
        n_graded=len(decided) + len(held),
        n_missing=n_missing,
        n_errored=n_errored,
        n_held=len(held),
        n_samples=len(rows),
        n_cases=cost.n_cases,
        sample_pass_rate=metrics.sample_pass_rate(passed, len(exp)),
        correct_rate=metrics.sample_pass_rate(correct, len(exp)),
        tool_call_correctness=tool_rate,
        n_tool_call_checks=tool_n,
        hallucination_rate=halluc_rate,
        n_grounding_checks=ground_n,
        refusal_rate=_rate(sum(r for _, r in refused), len(refused)),
        refusal_rate_golden=_rate(sum(golden), len(golden)),
        n_golden=len(golden),
        refusal_rate_should_refuse=_rate(sum(should), len(should)),
        n_should_refuse=len(should),
        activation_rate=_rate(sum(act), len(act)),
        n_activation=len(act),
        false_activation_rate=_rate(sum(silent), len(silent)),
        n_non_activation=len(silent),
        latency_p50_ms=float(np.percentile(lat, 50)) if lat else None,
        latency_p95_ms=float(np.percentile(lat, 95)) if lat else None,
        n_latency_replays=sum(1 for _, s, _ in rows if s.cached),
        generator_cost_usd=cost.generator_usd,
        judge_cost_usd=cost.judge_usd,
        paid_usd=cost.paid_usd,
        cache_avoided_usd=cost.cache_avoided_usd,
        judge_cache_avoided_usd=cost.judge_cache_avoided_usd,
        cost_per_sample_usd=cost.cost_per_sample_usd,
        cost_per_case_usd=cost.cost_per_case_usd,
        judge_mean_score=float(np.mean(judged)) if judged else None,
        n_judged=len(judged),
        judge_errors=sum(1 for c, _, g in with_case if c.judged and g.judge_score is None),
        n_judged_samples=sum(1 for c, _, _ in with_case if c.judged),
    )


def arm_scores(
    expected: set[Key], grades: Sequence[Grade], table: CaseTable, k: int
) -> tuple[SetScore, dict[str, SetScore], dict[str, SetScore]]:
    """pass@k, pass^k and the gated case score of one arm, overall, per set and per tag
    (`metrics.set_score`), each case counted over the samples the run planned for it
    (a missing or ungraded sample is a failure), with its set and tags as the run saw
    them."""
    rows = table.by_id()
    n: dict[str, int] = {}
    c: dict[str, int] = {}
    for case, _, _ in expected:
        n[case] = n.get(case, 0) + 1
    for g in grades:
        if (g.case_id, g.arm, g.index) in expected and g.passed:
            c[g.case_id] = c.get(g.case_id, 0) + 1
    entry = {cid: (rows[cid].set if cid in rows else "capability", n[cid], c.get(cid, 0)) for cid in n}
    by_set: dict[str, list[tuple[str, int, int]]] = {}
    by_tag: dict[str, list[tuple[str, int, int]]] = {}
    for cid, e in entry.items():
        by_set.setdefault(e[0], []).append(e)
        for t in rows[cid].tags if cid in rows else ():
            by_tag.setdefault(t, []).append(e)
    return (
        metrics.set_score(list(entry.values()), k),
        {s: metrics.set_score(v, k) for s, v in sorted(by_set.items())},
        {t: metrics.set_score(v, k) for t, v in sorted(by_tag.items())},
    )


def summarize(
    meta: dict[str, Any],
    samples: dict[Key, Sample],
    grades: Sequence[Grade],
    expected: set[Key],
    table: CaseTable,
    *,
    cases: dict[str, Case] | None = None,
    findings: list[Finding],
    run: str = "",
    source: str = "grade",
    run_errors: Iterable[Key] = (),
    **extra: Any,
) -> GradesSummary:
    """The grades summary (`records.GradesSummary`): overall, per tag, per arm (and per
    arm per tag, set and tag scores), with the findings it derives appended to
    `findings` (sorted, most severe first). `cases`: the suite's cases (None for a run of
    another tool: the checks that need them are not measured); tags and sets come from
    the run's case table. `run_errors`: the keys the run recorded an error for."""
    cases = cases or {}
    errs = set(run_errors)
    rows: list[Row] = [
        (cases.get(g.case_id), samples[(g.case_id, g.arm, g.index)], g)
        for g in grades
        if (g.case_id, g.arm, g.index) in samples and (not cases or g.case_id in cases)
    ]
    tag_of = {c.id: set(c.tags) for c in table.cases}
    # once per sample: every sample is in 2 x (1 + its tags) groups, each regex is timed
    refused = {(g.case_id, g.arm, g.index): _refused(c, s.output) for c, s, g in rows} if cases else None

    def block(exp: set[Key], rs: list[Row]) -> tuple[GroupMetrics, dict[str, GroupMetrics]]:
        tags = sorted({t for key in exp for t in tag_of.get(key[0], ())})
        per_tag = {
            t: group_metrics(
                {key for key in exp if t in tag_of.get(key[0], ())},
                [r for r in rs if t in tag_of.get(r[2].case_id, ())],
                refused,
                errs,
            )
            for t in tags
        }
        return group_metrics(exp, rs, refused, errs), per_tag

    overall, per_tag = block(expected, rows)
    k = int(meta.get("k") or max((i + 1 for _, _, i in expected), default=0))
    arms = sorted({key[1] for key in expected} | {g.arm for g in grades})
    per_arm = {}
    for a in arms:
        exp_a = {key for key in expected if key[1] == a}
        m, pt = block(exp_a, [r for r in rows if r[2].arm == a])
        scores, per_set_scores, per_tag_scores = arm_scores(exp_a, [g for g in grades if g.arm == a], table, k)
        per_arm[a] = ArmSummary(m, pt, per_set_scores, per_tag_scores, scores)
    complete = (
        overall.n_missing == 0
        and overall.n_errored == 0
        and len(grades) == len(rows)
        and overall.n_graded == overall.n_expected
    )
    scripted = {a for a in arms if _all_scripted([s for key, s in samples.items() if key[1] == a])}
    failed = _failed_attempts(run, arms)
    for (_, a, _), s in samples.items():  # an agent's tool calls that timed out count as well
        failed[a] = failed.get(a, 0) + _tool_timeouts(s)
    _findings(overall, per_arm, meta, cases, findings, failed, scripted)
    findings[:] = by_severity(findings)
    return GradesSummary(
        complete=complete,
        k=k or None,
        overall=overall,
        per_tag=per_tag,
        per_arm=per_arm,
        run=run,
        findings=tuple(f.to_json() for f in findings),
        source=source,
        **extra,
    )


# The latency tail a run shows with no failed attempt in its ledger is a finding only past
# what CPU contention explains: on a shared 2-core machine a call was measured up to ~4x
# slower under load (the regex engine's CPU-time timeout, `graders.regex`, 1 s CPU = up
# to ~4 s wall at load 7), and a tail of 3x p50 was seen on an idle-then-busy local model
# with no retry. Past 10x p50 and 10 s above it, a retry loop or a hung tool is the
# likelier cause. A scripted server's tail is its script's injected delays: never a finding.
LATENCY_TAIL_RATIO = 3.0  # with failed attempts on the ledger (retries)
LATENCY_TAIL_RATIO_UNEXPLAINED = 10.0  # with none: past contention
LATENCY_TAIL_MIN_GAP_MS = 10_000.0  # ...and at least this far above p50
SCRIPTED_FINGERPRINT = "fp_evalkit_scripted"  # evalkit.calls.serve.ScriptedServer's default


def _failed_attempts(run: str, arms: Sequence[str]) -> dict[str, int]:
    """The generator's failed attempts per arm on the run's ledger (`release` events of a
    reservation: an attempt that errored, timed out or was dropped, after which the
    client retried or gave up): the evidence of a retry loop. Empty without a ledger."""
    path = Path(run) / LEDGER if run else None
    if path is None or not path.is_file():
        return {}
    key_of: dict[Any, str] = {}
    out: dict[str, int] = {}
    for e in iter_jsonl(path):
        if e.get("event") == "reserve" and e.get("role") == "generator":
            key_of[(e.get("run_epoch"), e.get("id"))] = str(e.get("key") or "")
        elif e.get("event") == "release" and (key := key_of.get((e.get("run_epoch"), e.get("id")))) is not None:
            arm = next((a for a in arms if f"/{a}/" in key), None)
            if arm is not None:
                out[arm] = out.get(arm, 0) + 1
    return out


def _tool_timeouts(sample: Sample) -> int:
    """The tool calls of an agent's sample that failed by timing out (its trajectory's
    `tool_errors`)."""
    errors = (sample.agent or {}).get("tool_errors") or []
    texts = [str(e.get("error")).lower() for e in errors if isinstance(e, dict)]
    return sum(1 for t in texts if "timed out" in t or "timeout" in t)


def _all_scripted(samples: Sequence[Sample]) -> bool:
    """Whether every sample was answered by evalkit's scripted server (its fingerprint)."""
    return bool(samples) and all(s.system_fingerprint == SCRIPTED_FINGERPRINT for s in samples)


def _latency_finding(arm: str, m: GroupMetrics, failed: int, scripted: bool) -> Finding | None:
    """The MEDIUM latency-tail finding of one arm, or None: with failed attempts on the
    ledger or timed-out tool calls (`failed`), past `LATENCY_TAIL_RATIO` x p50; with
    none, past the bound contention cannot explain (`LATENCY_TAIL_RATIO_UNEXPLAINED` x
    p50 and `LATENCY_TAIL_MIN_GAP_MS` above it); never on the scripted server."""
    p50, p95 = m.latency_p50_ms, m.latency_p95_ms
    if not p50 or p95 is None or scripted:
        return None
    if failed and p95 > LATENCY_TAIL_RATIO * p50:
        return Finding(
            "MEDIUM",
            f"arm {arm}: p95 latency {p95:.0f} ms is more than {LATENCY_TAIL_RATIO:g}x p50 {p50:.0f} ms, "
            f"with {failed} failed attempt(s) retried on the ledger or tool call(s) timed out (a retry loop?)",
        )
    if p95 > LATENCY_TAIL_RATIO_UNEXPLAINED * p50 and p95 - p50 >= LATENCY_TAIL_MIN_GAP_MS:
        return Finding(
            "MEDIUM",
            f"arm {arm}: p95 latency {p95:.0f} ms is more than {LATENCY_TAIL_RATIO_UNEXPLAINED:g}x p50 {p50:.0f} ms "
            "with no retry on the ledger, past what CPU contention explains (a tool timeout or a stalled server?)",
        )
    return None


def _findings(
    overall: GroupMetrics,
    per_arm: dict[str, ArmSummary],
    meta: dict[str, Any],
    cases: dict[str, Case],
    findings: list[Finding],
    failed_attempts: dict[str, int] | None = None,
    scripted: set[str] | frozenset[str] = frozenset(),
) -> None:
    """The findings a grades summary derives: missing samples, refusals where there
    should be none (or none where there should be), latency tails (`_latency_finding`),
    judge errors, an unseeded config (the judge's calibration and trust:
    `judge_trust_findings`)."""
    run_errored = overall.n_errored - (overall.n_samples - overall.n_graded)  # less the grading errors
    if overall.n_missing or run_errored > 0:
        findings.append(
            Finding(
                "HIGH",
                f"INCOMPLETE: {overall.n_expected - overall.n_missing - run_errored}/{overall.n_expected} expected "
                f"samples are in results.jsonl ({overall.n_missing} missing, {run_errored} errored); "
                "they count as failures",
            )
        )
    for a, b in per_arm.items():
        m = b.overall
        if m.refusal_rate_golden:
            findings.append(
                Finding(
                    "HIGH",
                    f"arm {a}: refusal rate {m.refusal_rate_golden:.0%} on golden cases (should be 0): "
                    "a correctness bug",
                )
            )
        if m.refusal_rate_should_refuse is not None and m.refusal_rate_should_refuse < 1:
            findings.append(
                Finding(
                    "HIGH",
                    f"arm {a}: refusal rate {m.refusal_rate_should_refuse:.0%} on should-refuse cases (should be 100%)",
                )
            )
        if (tail := _latency_finding(a, m, (failed_attempts or {}).get(a, 0), a in scripted)) is not None:
            findings.append(tail)
        if m.judge_errors:
            findings.append(
                Finding(
                    "MEDIUM",
                    f"arm {a}: {m.judge_errors} judged sample(s) have no score (judge error): not counted as passes",
                )
            )
    snap = meta.get("config") if isinstance(meta.get("config"), dict) else None
    if cases and snap is not None and (snap.get("seed") is None or snap.get("temperature") is None):
        missing = " and ".join(x for x in ("seed", "temperature") if snap.get(x) is None)
        findings.append(
            Finding("MEDIUM", f"the config has no {missing}: two runs of one prompt will differ and a gate will flap")
        )


def write_summary(run: str | Path, summary: GradesSummary) -> Path:
    """Write `grades-summary.json` (any text the judge sent, stored losslessly), and the
    metric table overall and per tag into the run's `summary.md` (`results`)."""
    path = Path(run) / GRADES_SUMMARY
    write_atomic(path, storable_json(summary.to_json(), indent=2) + "\n")
    write_summary_md(run, summary)
    return path


def summarize_run(run: str | Path) -> GradesSummary:
    """The grades summary of a run folder that carries its own grades (a run of another
    tool, `evalkit ingest`): the metrics that need no suite, over the keys it planned
    (or, without a plan, those it has a sample or an error for)."""
    folder = RunFolder(run)
    meta = folder.read_meta()
    samples = read_samples(Path(run))
    grades = [grade_from_dict(d) for d in iter_jsonl(Path(run) / GRADES)] if (Path(run) / GRADES).exists() else []
    errors = {(str(e["case_id"]), str(e["arm"]), int(e["index"])) for e in folder.errors()}
    expected = set(samples) | errors
    return summarize(
        meta, samples, grades, expected, case_table(run), findings=[], run=str(run), source="ingest", run_errors=errors
    )


def pairwise_summary(outcomes: Sequence[PairOutcome], arms: tuple[str, str], bias: Any = None) -> dict[str, Any]:
    """Wins (treatment better), losses, ties, errored trials, position consistency and
    (given `judge.pairwise_bias`'s result) the bias checks, per trial."""
    count = {k: sum(1 for o in outcomes if o.outcome == k) for k in ("treatment", "baseline", "tie", "error")}
    out = {
        "baseline": arms[0],
        "treatment": arms[1],
        "n_trials": len(outcomes),
        "wins": count["treatment"],
        "losses": count["baseline"],
        "ties": count["tie"],
        "errored": count["error"],
        "position_consistency": position_consistency(outcomes),
        "inconsistent": sum(1 for o in outcomes if o.consistent is False),
        "subjects": sorted({o.subject for o in outcomes if o.outcome != "error" or o.first or o.second}),
    }
    if bias is not None:
        out["bias"] = bias.to_json()
    return out


# ----------------------------------------------------------------------- judged rates, corrected by people


def judged_rates(
    grades: Sequence[Grade],
    cases: dict[str, Case],
    table: CaseTable,
    human: dict[str, int],
    estimate: str = "judge",
    expected: set[Key] | None = None,
    k: int | None = None,
    case_human: dict[str, int] | None = None,
) -> dict[str, Any] | None:
    """`grades-summary.json`'s `judged_rates`: for the judged samples (a judged case's
    samples the judge scored), overall and per arm, per set and per tag, the judge-only
    sample pass rate (`judge_only`, Wilson interval over the N judged samples) and,
    where people labelled at least `metrics.PPI_MIN_LABELS` of them, the prediction-powered rate
    (`corrected`: `stats.ppi_mean` with PPI++ power tuning, its 95% interval over the n
    labelled and N judged samples) and the judge's bias on the labelled ones (judge minus
    human, with its interval). A sample passes for the judge when its deterministic
    checks and the judge's score pass, for a person when the same checks and the
    person's score pass (several raters: the lower median of their scores). `human`: item id -> a
    person's score (`human_scores`). `estimate` ("judge" or "corrected", the config's
    `judged_estimate`) says which one verdicts and the gate rest on. None: no judged
    sample. `human_pass`: item id -> whether the sample passes for people (its checks
    and the person's score), for every labelled judged sample: what a verdict resting on
    the corrected estimate counts in place of the judge (`compare.direct_verdict`).
    Given the run's `expected` keys and `k`, each arm also carries
    `gated_case_score`: the gated case score with its judged part corrected
    (`judged_case_score`, `metrics.corrected_gated_case_score`), corrected only by
    `case_human`: the labels of a by-case draw (`judge sample --by-case`), whose
    labelled cases are a uniform random subset of the cases as PPI over cases needs; a
    sample draw corrects the sample rates only, and the block's `labels_note` says so.

    References: Angelopoulos et al. 2023 (Science); Angelopoulos, Duchi & Zrnic 2023 (PPI++).
    """
    rows_by_id = table.by_id()
    rows: list[metrics.JudgedRow] = []
    human_pass: dict[str, bool] = {}
    for g in grades:
        case = cases.get(g.case_id)
        if case is None or not case.judged or g.judge_passed is None or g.judge_score is None:
            continue
        det_ok = all(c.passed for c in g.checks if c.name != "judge")
        row = rows_by_id.get(g.case_id)
        hs = human.get(item_id(g.case_id, g.arm, g.index))
        if hs is not None:
            human_pass[item_id(g.case_id, g.arm, g.index)] = det_ok and hs >= case.judge_threshold
        rows.append(
            metrics.JudgedRow(
                g.arm,
                row.set if row else case.set,
                tuple(row.tags) if row else tuple(case.tags),
                det_ok and bool(g.judge_passed),
                None if hs is None else det_ok and hs >= case.judge_threshold,
            )
        )
    if not rows:
        return None
    per_arm: dict[str, Any] = {}
    for arm in sorted({r.arm for r in rows}):
        ra = [r for r in rows if r.arm == arm]
        per_arm[arm] = {
            "overall": metrics.judged_rate_block(ra, estimate),
            "per_set": {
                s: metrics.judged_rate_block([r for r in ra if r.set == s], estimate)
                for s in sorted({r.set for r in ra})
            },
            "per_tag": {
                t: metrics.judged_rate_block([r for r in ra if t in r.tags], estimate)
                for t in sorted({t for r in ra for t in r.tags})
            },
        }
        if expected is not None and k:
            block = judged_case_score(arm, grades, cases, table, case_human or {}, expected, k)
            if block is not None:
                by_sample = sum(1 for r in ra if r.human_pass is not None) - sum(
                    1 for g in grades if g.arm == arm and item_id(g.case_id, g.arm, g.index) in (case_human or {})
                )
                block["labels_note"] = (
                    f"{by_sample} label(s) of this arm come from a sample draw: they correct the judged sample "
                    "rates only; the case score is corrected by whole cases from a by-case draw "
                    "(`evalkit judge sample RUN --by-case -n 20`)"
                    if by_sample > 0
                    else None
                )
                per_arm[arm]["gated_case_score"] = block
    return {
        "estimate": estimate,
        "n_labelled": sum(1 for r in rows if r.human_pass is not None),
        "n_judged": len(rows),
        "min_labels": metrics.PPI_MIN_LABELS,
        "adjust": metrics.PPI_ADJUST,
        "overall": metrics.judged_rate_block(rows, estimate),
        "per_arm": per_arm,
        "human_pass": dict(sorted(human_pass.items())),
    }


def judged_case_score(
    arm: str,
    grades: Sequence[Grade],
    cases: dict[str, Case],
    table: CaseTable,
    human: dict[str, int],
    expected: set[Key],
    k: int,
) -> dict[str, Any] | None:
    """`metrics.corrected_gated_case_score` of one arm: each case over the samples the
    run planned for it (a missing or ungraded sample fails for the judge and for
    people, as `arm_scores` counts it), its set as the run saw it. A judge-scored
    sample passes for the judge when its checks and the judge's score pass (whether or
    not the judge is trusted), for people when the same checks and the person's score
    pass; a judged case is labelled when people scored every one of its judge-scored
    samples (and it has at least one). `human` holds the labels of a by-case draw only
    (see `judged_rates`)."""
    rows = table.by_id()
    by_key = {(g.case_id, g.arm, g.index): g for g in grades}
    n: dict[str, int] = {}
    c_judge: dict[str, int] = {}
    c_human: dict[str, int] = {}
    scored: dict[str, int] = {}
    unlabelled: set[str] = set()
    for key in sorted(e for e in expected if e[1] == arm):
        cid = key[0]
        n[cid] = n.get(cid, 0) + 1
        g = by_key.get(key)
        case = cases.get(cid)
        if g is None:
            continue
        if case is not None and case.judged and g.judge_passed is not None and g.judge_score is not None:
            det_ok = all(c.passed for c in g.checks if c.name != "judge")
            c_judge[cid] = c_judge.get(cid, 0) + int(det_ok and bool(g.judge_passed))
            scored[cid] = scored.get(cid, 0) + 1
            hs = human.get(item_id(*key))
            if hs is None:
                unlabelled.add(cid)
            else:
                c_human[cid] = c_human.get(cid, 0) + int(det_ok and hs >= case.judge_threshold)
        elif g.passed:
            c_judge[cid] = c_judge.get(cid, 0) + 1
            c_human[cid] = c_human.get(cid, 0) + 1
    entries = []
    for cid in sorted(n):
        case = cases.get(cid)
        judged = bool(case is not None and case.judged)
        labelled = judged and scored.get(cid, 0) > 0 and cid not in unlabelled
        entries.append(
            metrics.JudgedCase(
                rows[cid].set if cid in rows else (case.set if case is not None else "capability"),
                n[cid],
                c_judge.get(cid, 0),
                c_human.get(cid, 0) if labelled else None,
                judged,
                scored.get(cid, 0),
            )
        )
    return metrics.corrected_gated_case_score(entries, k)


def judged_rate_findings(rates: dict[str, Any] | None) -> list[Finding]:
    """A MEDIUM finding per arm whose judge is measurably off: the judge's bias interval
    (judge minus human, on the labelled samples) excludes 0, so the judge-only rate is
    not the rate people would give (the corrected one is)."""
    out: list[Finding] = []
    for arm, blocks in ((rates or {}).get("per_arm") or {}).items():
        b = blocks["overall"]
        bias, cor = b.get("bias"), b.get("corrected")
        if bias and cor and (bias["low"] > 0 or bias["high"] < 0):
            out.append(
                Finding(
                    "MEDIUM",
                    f"arm {arm}: the judge is {'more generous' if bias['value'] > 0 else 'harsher'} than people by "
                    f"{abs(bias['value']) * 100:.1f} points (95% interval {bias['low'] * 100:+.1f} to "
                    f"{bias['high'] * 100:+.1f}, {bias['n']} labels): its judged pass rate "
                    f"{b['judge_only']['rate']:.1%} corrected by the labels is {cor['rate']:.1%} "
                    f"({cor['low']:.1%} to {cor['high']:.1%})",
                )
            )
    return out


def human_scores(match: LabelMatch | None, draw: str | None = None) -> dict[str, int]:
    """Item id -> the score people gave a judged output, from the fresh labels of a
    `LabelMatch` (several raters: the median of their scores, rounded down). `draw`
    "case": only the labels of a by-case draw (`HumanLabel.draw`)."""
    if match is None:
        return {}
    by_item: dict[str, list[int]] = {}
    for lab, _ in match.fresh:
        if lab.score is not None and (draw is None or lab.draw == draw):
            by_item.setdefault(lab.item, []).append(int(lab.score))
    return {item: sorted(s)[(len(s) - 1) // 2] for item, s in by_item.items()}
