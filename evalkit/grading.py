"""Grade a run folder: deterministic checks, then the judge for judged cases, then
metrics and findings. Writes `grades.jsonl` and `grades-summary.json` (docs/formats.md).

Re-grading replaces both files and never calls the generator: it reads `results.jsonl`.
Judge answers are kept in the run folder's response cache (`judge-cache.sqlite`), so a
re-grade with unchanged judge files replays them at $0; judge calls that are made
reserve and settle on the run's own `ledger.jsonl` under the run's cost cap.

A sample missing from `results.jsonl` is not a pass: every rate divides by the samples
the run was expected to produce (cases x arms x k), and each group states how many were
expected, graded, missing and errored. A judge error leaves `passed` null on its line.

Metrics of a group (`grades-summary.json` -> `overall`, `per_tag`, `per_arm`):

* `sample_pass_rate`: samples whose every check (judge included) passed / expected
  samples (`evalkit.metrics`; evalkit 0.1 called it `success_rate`);
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
  beside them (`evalkit.metrics` defines each once);

and per arm, pass@k and pass^k with their SE and the gated case score, overall
(`scores`), per set (`per_set_scores`) and per tag (`per_tag_scores`).

Identical (case, output) pairs are judged once per grading pass and share the answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import metrics
from ._io import iter_jsonl, write_atomic
from ._text import storable_json
from .cache import ResponseCache
from .endpoints import Watch, combine, resolve_base_url, served_watch
from .errors import InputError
from .findings import Finding, by_severity
from .graders import activation_observed, grade_sample, is_refusal, require_scored
from .judge import (
    HUMAN_SAMPLE_MIN,
    JudgeFiles,
    JudgeScore,
    PairOutcome,
    check_judge_model,
    judge_direct,
    judge_pair,
    judge_trust,
    judge_versions,
    load_judge_files,
    position_consistency,
    run_judge_scores,
    suite_human_labels,
)
from .layout import CONFIG_FILE, GRADES, GRADES_SUMMARY, JUDGE_CACHE, LEDGER, PAIRWISE, RESULTS, RUN_CONFIG
from .ledger import Ledger
from .loader import load_suite
from .privacy import scan_outputs
from .records import (
    ArmSummary,
    Case,
    CaseTable,
    CheckResult,
    Endpoint,
    Grade,
    GradesSummary,
    GroupMetrics,
    JudgeTrust,
    Sample,
    SetScore,
    Suite,
)
from .runload import case_table
from .runs import RunFolder, find_suite_dir, grade_from_dict, grade_to_dict, sample_from_dict

__all__ = ["GRADES_SUMMARY", "JUDGE_CACHE", "PAIRWISE"]  # the file names, importable from here as before

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
    def exit_code(self) -> int:
        """0 when every expected sample was graded, 1 otherwise (missing or judge error)."""
        return 0 if self.complete else 1


# ------------------------------------------------------------------------- loading


def _resolve_suite(run: Path, meta: dict[str, Any], suite: Suite | str | Path | None) -> Suite:
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


def _read_samples(run: Path) -> dict[Key, Sample]:
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


def _activation(case: Case, sample: Sample) -> bool | None:
    checks = [c for c in case.checks if c.kind == "activation"]
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
) -> Grade:
    checks = list(checks)
    error = judge_error
    score = reason = version = model = None
    cost = 0.0
    if js is not None:
        version, model, cost = js.version, js.model, js.cost_usd
        if js.error:
            error = f"judge error: {js.error}"
        else:
            score, reason = js.score, js.reason
            ok = score >= case.judge_threshold
            checks.append(
                CheckResult(
                    "judge", ok, "" if ok else f"judge score {score} < threshold {case.judge_threshold}: {reason}"
                )
            )
    passed: bool | None = None if error else all(c.passed for c in checks)
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
        activated=_activation(case, sample),
        error=error,
        judge_model=model,
        judge_same_model_override=bool(override and case.judged),
    )


def judge_endpoint(suite: Suite, judge_base_url: str | None = None) -> Endpoint:
    """The judge's model and the base URL its calls go to (`endpoints.resolve_base_url`:
    the override, `EVALKIT_JUDGE_BASE_URL`, `$.judge.base_url`, the server `evalkit
    serve` runs). `InputError` when there is no judge or no URL, before any request."""
    judge = suite.config.judge
    config_file = Path(suite.path) / CONFIG_FILE if Path(suite.path).is_dir() else Path(suite.path)
    if judge is None:
        raise InputError("the suite has judged cases but config.json has no judge", config_file, json_path="$.judge")
    url = resolve_base_url("judge", judge, judge_base_url, config_path=config_file)
    return Endpoint(judge.model, url, judge.api_key_env)


async def _judge_all(
    suite: Suite,
    files: JudgeFiles,
    todo: list[tuple[Case, Sample]],
    endpoint: Endpoint,
    run: Path,
    cap: float,
    pairs_todo: list[tuple[Case, int, Sample, Sample]],
    watch: Any,
) -> tuple[dict[Key, JudgeScore], list[PairOutcome], dict[str, Any]]:
    from .client import ModelClient  # lazy: openai's client is the heaviest import of a grade

    config = suite.config
    ledger = Ledger.resume(cap, run / LEDGER)
    # batch=1: each judge answer is committed before it is used, so a grade killed
    # mid-way never pays twice for a judge key (the cache is its only record).
    cache = ResponseCache(run / JUDGE_CACHE, batch=1)
    spent_before = ledger.committed_usd
    client = ModelClient(
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
    )
    sem = asyncio.Semaphore(max(1, config.concurrency))
    scores: dict[Key, JudgeScore] = {}
    stopped: list[str] = []  # the watch's reason once it reported: no judge call after it

    def should_stop() -> str | None:
        if not stopped and watch is not None:
            reason = watch()
            if reason:
                stopped.append(reason.strip())
        return stopped[0].partition("\n")[0] if stopped else None

    # Identical (case, output) pairs make identical judge requests: ask once, in a fixed
    # order, and share the answer (the first line carries the cost, the rest $0, as a
    # cache hit would), so the number of paid calls does not depend on timing.
    groups: dict[tuple[str, str], list[tuple[Case, Sample]]] = {}
    for case, s in todo:
        groups.setdefault((case.id, s.output), []).append((case, s))

    async def one(members: list[tuple[Case, Sample]]) -> None:
        case, s = members[0]
        async with sem:
            js = await judge_direct(
                client,
                files,
                case,
                s.output,
                key=f"judge/{case.id}/{s.arm}/{s.index}",
                seed=config.seed,
                should_stop=should_stop,
            )
        for i, (_, m) in enumerate(members):
            scores[(case.id, m.arm, int(m.index))] = js if i == 0 else dataclasses.replace(js, cost_usd=0.0)

    async def pair(case: Case, index: int, base: Sample, treat: Sample) -> PairOutcome:
        async with sem:
            return await judge_pair(
                client,
                files,
                case,
                base.output,
                treat.output,
                index=index,
                key=f"pair/{case.id}/{index}",
                seed=config.seed,
                should_stop=should_stop,
            )

    try:
        await asyncio.gather(*(one(members) for members in groups.values()))
        outcomes = list(await asyncio.gather(*(pair(*p) for p in pairs_todo)))
    finally:
        await client.aclose()
        stats = {
            "judge_spend_usd": ledger.committed_usd - spent_before,
            "cache_hits": cache.hits,
            "run_spend_usd": ledger.committed_usd,
            "cap_usd": cap,
        }
        if stopped:
            cause, _, detail = stopped[0].partition("\n")
            stats["stop_reason"] = cause.strip()
            if detail.strip("\n"):
                stats["stop_detail"] = detail.strip("\n")
        ledger.close()
        cache.close()
    return scores, outcomes, stats


def _run_sync(coro: Any) -> Any:
    """`asyncio.run`, or the same in a worker thread when an event loop is already
    running in this thread (a notebook kernel)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


@RunFolder.holding_lock  # one process per run folder (runs.RunFolder.lock)
def grade_run(
    run_path: str | Path,
    suite: Suite | str | Path | None = None,
    *,
    judge_base_url: str | None = None,
    judge_version: str | None = None,
    pairwise: tuple[str, str] | None = None,
    watch: Watch | None = None,
) -> GradeResult:
    """Grade every sample of a run folder and write `grades.jsonl` and
    `grades-summary.json` (replacing earlier ones, atomically).

    `suite` defaults to the suite the run names; `judge_base_url` overrides the judge
    endpoint; `judge_version` pins `vN` (default: the highest); `pairwise=(baseline,
    treatment)` also asks the pairwise judge on every judged case/index both arms ran
    and writes `pairwise.jsonl`. `watch` (e.g. `LocalModelServer.exit_reason` of the
    judge's server) is asked before every judge attempt: once it reports, no judge call
    goes out, the rest are judge errors and the summary says why (`stop_reason`,
    `stop_detail`, a HIGH finding). Raises `InputError` (nothing written) for a case
    with neither a check nor a rubric, a bad check, a judge that is the generator's model
    without the override, or a judge with no base URL (`judge_endpoint`).
    """
    run = Path(run_path)
    meta = RunFolder(run).read_meta()
    suite_obj = _resolve_suite(run, meta, suite)
    config = suite_obj.config
    cases = {c.id: c for c in suite_obj.cases}
    samples = _read_samples(run)
    expected = _expected_keys(meta, samples)
    planned_cases = sorted({k[0] for k in expected} | {k[0] for k in samples})
    for cid in planned_cases:
        if cid in cases:
            require_scored(cases[cid])
    findings: list[Finding] = []

    # Deterministic checks first; they raise InputError on a bad check (nothing written).
    det: dict[Key, list[CheckResult]] = {}
    unknown: dict[Key, str] = {}
    for key in sorted(samples):
        case = cases.get(key[0])
        if case is None:
            unknown[key] = f"case {key[0]!r} is not in the suite any more: not graded"
            continue
        det[key] = grade_sample(case, samples[key], suite_obj.path)

    judged_keys = [k for k in sorted(det) if cases[k[0]].judged]
    files: JudgeFiles | None = None
    override = False
    no_judge_files = None
    if judged_keys or pairwise:
        override = check_judge_model(config, {samples[k].model for k in judged_keys})
        if not judge_versions(suite_obj.path) and judge_version is None:
            no_judge_files = "no judge/rubric-vN.md and judge/prompt-vN.md: judged cases cannot be scored"
            for cid in sorted({k[0] for k in judged_keys}):
                findings.append(Finding("HIGH", f"judged case {cid!r} has no rubric file (judge/rubric-vN.md)"))
        else:
            files = load_judge_files(suite_obj.path, judge_version)
        if override:
            findings.append(
                Finding(
                    "HIGH",
                    f"the judge is the generator's model ({config.judge.model}), "
                    "allowed by allow_same_judge_model: judge scores are not independent",
                )
            )

    # The human labels are read (and refused when bad) before any judge call is paid for.
    labels = suite_human_labels(suite_obj.path) if files is not None else None

    pairs_todo: list[tuple[Case, int, Sample, Sample]] = []
    if pairwise:
        base_arm, treat_arm = pairwise
        run_arms = {k[1] for k in expected} | {k[1] for k in samples}
        for arm in pairwise:
            if arm not in run_arms:
                raise InputError(
                    f"pairwise arm {arm!r} is not in the run (arms: {', '.join(sorted(run_arms))})",
                    run / RUN_CONFIG,
                    json_path="$.arms",
                )
        for cid, arm, idx in judged_keys:
            if arm == base_arm and (cid, treat_arm, idx) in samples:
                pairs_todo.append((cases[cid], idx, samples[(cid, base_arm, idx)], samples[(cid, treat_arm, idx)]))

    scores: dict[Key, JudgeScore] = {}
    outcomes: list[PairOutcome] = []
    judge_stats: dict[str, Any] = {"judge_spend_usd": 0.0, "cache_hits": 0}
    if files is not None and (judged_keys or pairs_todo):
        endpoint = judge_endpoint(suite_obj, judge_base_url)
        cap = float((meta.get("config") or {}).get("cost_cap_usd") or config.cost_cap_usd)
        scores, outcomes, judge_stats = _run_sync(
            _judge_all(
                suite_obj,
                files,
                [(cases[k[0]], samples[k]) for k in judged_keys],
                endpoint,
                run,
                cap,
                pairs_todo,
                combine(watch, served_watch(endpoint.base_url)),
            )
        )
        if judge_stats.get("stop_reason"):
            findings.append(
                Finding(
                    "HIGH",
                    f"grading stopped: {judge_stats['stop_reason']}; the judged samples "
                    "left have no score (not counted as passes)",
                )
            )

    grades: list[Grade] = []
    for key in sorted(samples):
        s = samples[key]
        if key in unknown:
            grades.append(Grade(key[0], key[1], key[2], None, (), error=unknown[key]))
            continue
        case = cases[key[0]]
        js = scores.get(key) if case.judged else None
        jerr = no_judge_files if case.judged and files is None else None
        grades.append(_grade_line(case, s, det[key], js, jerr, override))

    leaks = scan_outputs(suite_obj, samples)  # personal data and secrets in the outputs (no value is kept)
    findings += [Finding(level, message) for level, message in leaks.findings]
    table = case_table(run)
    trust = (
        judge_trust(labels, run_judge_scores(grade_to_dict(g) for g in grades), outcomes)
        if labels is not None and files is not None
        else None
    )
    summary = summarize(
        meta,
        samples,
        grades,
        expected,
        table,
        cases=cases,
        findings=findings,
        run=str(run),
        suite=suite_obj.path,
        judge_trust=trust,
        judge_model=config.judge.model if config.judge else None,
        judge_files=(files.rubric_path, files.prompt_path) if files else (),
        judge_version=files.version if files else None,
        judge_same_model_override=override,
        privacy=leaks.summary,
        pairwise=pairwise_summary(outcomes, pairwise) if pairwise else None,
        **judge_stats,
    )
    lines = "".join(storable_json(grade_to_dict(g)) + "\n" for g in grades)  # any text the judge sent
    write_atomic(run / GRADES, lines)
    if pairwise:
        write_atomic(run / PAIRWISE, "".join(json.dumps(dataclasses.asdict(o)) + "\n" for o in outcomes))
    write_summary(run, summary)
    return GradeResult(run, tuple(grades), summary, tuple(findings), tuple(outcomes))


# ----------------------------------------------------------------------- metrics

Row = tuple[Case | None, Sample, Grade]  # a graded sample and its case (None: a run of another tool)


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def group_metrics(
    expected: Iterable[Key], rows: Sequence[Row], refused_by_key: dict[Key, bool] | None = None
) -> GroupMetrics:
    """The metrics of one group of samples (all, an arm, a tag; `records.GroupMetrics`).
    `expected`: the keys the run planned for the group; `rows`: its graded samples with
    their cases; `refused_by_key`: each sample's `graders.is_refusal`, computed once for
    all the groups (None: no refusal rates, for a run of another tool). The checks that
    need the suite's cases are measured only on rows that have one."""
    exp = set(expected)
    present = {(g.case_id, g.arm, g.index) for _, _, g in rows}
    graded = [r for r in rows if r[2].passed is not None]
    passed = sum(1 for r in graded if r[2].passed)
    correct = sum(1 for _, _, g in graded if all(c.passed for c in g.checks if c.name != "activation"))

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
        [(s.case_id, float(s.cost_usd), float(s.cost_avoided_usd), float(g.judge_cost_usd)) for _, s, g in rows]
    )
    judged = [g.judge_score for _, _, g in rows if g.judge_score is not None]
    return GroupMetrics(
        n_expected=len(exp),
        n_graded=len(graded),
        n_missing=len(exp - present),
        n_errored=len(rows) - len(graded),
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
        generator_cost_usd=cost.generator_usd,
        judge_cost_usd=cost.judge_usd,
        paid_usd=cost.paid_usd,
        cache_avoided_usd=cost.cache_avoided_usd,
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
    **extra: Any,
) -> GradesSummary:
    """The grades summary (`records.GradesSummary`): overall, per tag, per arm (and per
    arm per tag, set and tag scores), with the findings it derives appended to
    `findings` (sorted, most severe first). `cases`: the suite's cases (None for a run of
    another tool: the checks that need them are not measured); tags and sets come from
    the run's case table."""
    cases = cases or {}
    rows: list[Row] = [
        (cases.get(g.case_id), samples[(g.case_id, g.arm, g.index)], g)
        for g in grades
        if (g.case_id, g.arm, g.index) in samples and (not cases or g.case_id in cases)
    ]
    tag_of = {c.id: set(c.tags) for c in table.cases}
    # once per sample: every sample is in 2 x (1 + its tags) groups, each regex is timed
    refused = {(g.case_id, g.arm, g.index): is_refusal(s.output) for _, s, g in rows} if cases else None

    def block(exp: set[Key], rs: list[Row]) -> tuple[GroupMetrics, dict[str, GroupMetrics]]:
        tags = sorted({t for key in exp for t in tag_of.get(key[0], ())})
        per_tag = {
            t: group_metrics(
                {key for key in exp if t in tag_of.get(key[0], ())},
                [r for r in rs if t in tag_of.get(r[2].case_id, ())],
                refused,
            )
            for t in tags
        }
        return group_metrics(exp, rs, refused), per_tag

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
    _findings(overall, per_arm, meta, cases, extra.get("judge_trust"), findings)
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


def _findings(
    overall: GroupMetrics,
    per_arm: dict[str, ArmSummary],
    meta: dict[str, Any],
    cases: dict[str, Case],
    trust: JudgeTrust | None,
    findings: list[Finding],
) -> None:
    """The findings a grades summary derives: missing samples, refusals where there
    should be none (or none where there should be), latency tails, judge errors, an
    unseeded config, a judge that disagrees with people."""
    if overall.n_missing:
        findings.append(
            Finding(
                "HIGH",
                f"INCOMPLETE: {overall.n_expected - overall.n_missing}/{overall.n_expected} expected samples "
                "are in results.jsonl; the missing ones count as failures",
            )
        )
    for a, b in per_arm.items():
        m = b.overall
        if m.refusal_rate_golden:
            findings.append(
                Finding(
                    "HIGH",
                    f"arm {a}: refusal rate {m.refusal_rate_golden:.0%} on golden cases (should be 0): a correctness bug",
                )
            )
        if m.refusal_rate_should_refuse is not None and m.refusal_rate_should_refuse < 1:
            findings.append(
                Finding(
                    "HIGH",
                    f"arm {a}: refusal rate {m.refusal_rate_should_refuse:.0%} on should-refuse cases (should be 100%)",
                )
            )
        if m.latency_p50_ms and m.latency_p95_ms is not None and m.latency_p95_ms > 3 * m.latency_p50_ms:
            findings.append(
                Finding(
                    "MEDIUM",
                    f"arm {a}: p95 latency {m.latency_p95_ms:.0f} ms is more than 3x "
                    f"p50 {m.latency_p50_ms:.0f} ms (a retry loop or a tool timeout?)",
                )
            )
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
    if trust is not None and trust.n_labels:
        if trust.n_labels < HUMAN_SAMPLE_MIN:
            findings.append(
                Finding(
                    "MEDIUM",
                    f"human sample has {trust.n_labels} item(s), under {HUMAN_SAMPLE_MIN}: "
                    "judge agreement is too noisy to act on",
                )
            )
        if trust.trusted is False:
            findings.append(Finding("HIGH", f"judge agrees with humans {trust.reason}"))


def write_summary(run: str | Path, summary: GradesSummary) -> Path:
    """Write `grades-summary.json` (any text the judge sent, stored losslessly)."""
    path = Path(run) / GRADES_SUMMARY
    write_atomic(path, storable_json(summary.to_json(), indent=2) + "\n")
    return path


def summarize_run(run: str | Path) -> GradesSummary:
    """The grades summary of a run folder that carries its own grades (a run of another
    tool, `evalkit ingest`): the metrics that need no suite, over the keys it planned
    (or, without a plan, those it has a sample or an error for)."""
    folder = RunFolder(run)
    meta = folder.read_meta()
    samples = _read_samples(Path(run))
    grades = [grade_from_dict(d) for d in iter_jsonl(Path(run) / GRADES)] if (Path(run) / GRADES).exists() else []
    errors = {(str(e["case_id"]), str(e["arm"]), int(e["index"])) for e in folder.errors()}
    expected = set(samples) | errors
    return summarize(meta, samples, grades, expected, case_table(run), findings=[], run=str(run), source="ingest")


def pairwise_summary(outcomes: Sequence[PairOutcome], arms: tuple[str, str]) -> dict[str, Any]:
    """Wins (treatment better), losses, ties, errored trials and position consistency."""
    count = {k: sum(1 for o in outcomes if o.outcome == k) for k in ("treatment", "baseline", "tie", "error")}
    return {
        "baseline": arms[0],
        "treatment": arms[1],
        "n_trials": len(outcomes),
        "wins": count["treatment"],
        "losses": count["baseline"],
        "ties": count["tie"],
        "errored": count["error"],
        "position_consistency": position_consistency(outcomes),
        "inconsistent": sum(1 for o in outcomes if o.consistent is False),
    }
