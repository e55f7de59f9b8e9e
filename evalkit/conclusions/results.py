"""The seed's result shapes, from a grades summary: the metric table overall and per
tag (in the run's `summary.md` after grading) and the RESULTS block `evalkit grade`
ends with (metric, value, vs baseline when the suite has a `baseline.json`, judge
agreement when labels exist); and, before a run, the AGENT EVAL PLAN block `evalkit
run` prints ahead of its first call (`plan_block`).

Every number is one `grades-summary.json` holds (`records.GroupMetrics`, defined once
in `evalkit.numbers.metrics`); this module only lays them out. The "vs baseline" column
compares like with like: the gated case score and the cost per case (list price), the
two numbers a baseline records and a gate reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from evalkit.foundations import fmt
from evalkit.foundations._io import RUN_JSON_BYTES, read_json_object, write_atomic
from evalkit.foundations._text import storable_json
from evalkit.foundations.errors import EvalkitError
from evalkit.foundations.findings import Finding, LintReport
from evalkit.foundations.layout import BASELINE_FILE, GRADES_SUMMARY, SUMMARY_MD
from evalkit.foundations.records import Baseline, Grade, GradesSummary, GroupMetrics, Sample, Suite
from evalkit.suites.suite import render_prompt

# (label, field(s) of GroupMetrics, kind): the rows of the seed's table, in its order
ROWS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("Success rate", ("sample_pass_rate",), "rate"),
    ("Tool-call correctness", ("tool_call_correctness",), "rate"),
    ("Hallucination rate", ("hallucination_rate",), "rate"),
    ("Refusal rate", ("refusal_rate",), "rate"),
    ("Latency p50 / p95 ms", ("latency_p50_ms", "latency_p95_ms"), "ms"),
    ("Cost per case", ("cost_per_case_usd",), "usd"),
)
# summary.md's metric section sits between these lines, so a re-grade replaces it
BEGIN = "<!-- evalkit grade: metrics -->"
END = "<!-- /evalkit grade: metrics -->"


def _cell(m: GroupMetrics, names: tuple[str, ...], kind: str) -> str:
    vals = [getattr(m, n) for n in names]
    if kind == "ms":  # a replay keeps the latency first measured: the figure says how many were replays
        if all(fmt.missing(v) for v in vals):
            return fmt.NO_DATA
        replays = f" ({m.n_latency_replays} of {m.n_samples} replayed)" if m.n_latency_replays else ""
        return "/".join(f"{v:.0f}" for v in vals) + replays
    v = vals[0]
    return fmt.usd(v) if kind == "usd" else fmt.fraction(v, 2)


def metric_rows(s: GradesSummary) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the metric table: each metric overall and per tag (a
    metric no sample measured is left out)."""
    groups = [("Overall", s.overall)] + sorted(s.per_tag.items())
    header = ["Metric"] + [name for name, _ in groups]
    rows = []
    for label, names, kind in ROWS:
        cells = [_cell(m, names, kind) for _, m in groups]
        if all(c == fmt.NO_DATA for c in cells):
            continue
        rows.append([label, *cells])
    return header, rows


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(x: str) -> str:
        return x.replace("|", "\\|")

    out = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def summary_section(s: GradesSummary) -> str:
    """The metric section `summary.md` holds after grading (markdown)."""
    header, rows = metric_rows(s)
    return "\n".join(
        [BEGIN, "", "## Metrics (evalkit grade)", "", _md_table(header, rows), "", f"judge: {judge_line(s)}", "", END]
    )


def write_summary_md(run: str | Path, s: GradesSummary) -> Path:
    """Put the metric section into the run's `summary.md` (after what the runner wrote,
    its INCOMPLETE line first when it has one), replacing an earlier grading's."""
    path = Path(run) / SUMMARY_MD
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        text = ""
    if BEGIN in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head.rstrip("\n") + tail
    text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + summary_section(s) + "\n"
    write_atomic(path, text)
    return path


def judge_line(s: GradesSummary) -> str:
    """Judge agreement with people on this run's labels, or why there is none."""
    h = s.human_agreement
    if not h:
        return "no human labels on this run (agreement not measured)" if s.judge_version else "no judge"
    return (
        f"{fmt.fraction(h.get('exact'), 2)} exact / {fmt.fraction(h.get('within_one'), 2)} within-1 "
        f"({int(h.get('n') or 0)} items)"
    )


def suite_baseline(suite: str | Path | None) -> Baseline | None:
    """The suite's accepted `baseline.json`, or None when it has none (or it cannot be
    read: the RESULTS block then says there is no baseline; `gate` reports why)."""
    if not suite:
        return None
    path = Path(suite) / BASELINE_FILE
    if not path.is_file():
        return None
    try:
        return Baseline.from_json(read_json_object(path, BASELINE_FILE, limit=RUN_JSON_BYTES))
    except (EvalkitError, KeyError, TypeError, ValueError):
        return None


def _arm_of(s: GradesSummary, baseline: Baseline | None) -> str | None:
    if baseline is not None and baseline.arm in s.per_arm:
        return baseline.arm
    return next(iter(s.per_arm)) if len(s.per_arm) == 1 else None


def results_block(
    s: GradesSummary, run: str | Path, baseline: Baseline | None = None, gate_line: str | None = None
) -> list[str]:
    """The RESULTS block `evalkit grade` ends with (seed 001's): run state, spend
    (generator + judge, from the run's ledger), the metric table overall and per tag
    with the gated case score, "vs baseline" on every row when the suite has a
    baseline, judge agreement, then `gate_line` (`Gate: PASS | FAIL (reason)`)."""
    lines = [f"RESULTS — {run}", "=" * 20, ""]
    state = "complete" if s.complete else f"INCOMPLETE {s.n_graded}/{s.n_expected} samples graded"
    lines.append(f"Run:     {state}")
    if s.judge_trust is not None and s.judge_trust.uncalibrated:  # unmissable: before every number
        lines.append(f"Judge:   WARNING {s.judge_trust.uncalibrated}")
    lines.append(
        f"Spend:   {fmt.usd(s.run_spend_usd)} of {fmt.usd(s.cap_usd)} cap (generator + judge); "
        f"judge paid this grading {fmt.usd(s.judge_spend_usd)}, avoided {fmt.usd(s.overall.judge_cache_avoided_usd)}"
    )
    lines.append("")
    header, rows = metric_rows(s)
    arm = _arm_of(s, baseline)
    scores = s.per_arm[arm].scores if arm is not None and arm in s.per_arm else None
    if scores is not None and scores.gated_case_score is not None:
        rows.append([f"Gated case score ({arm})", fmt.fraction(scores.gated_case_score, 2)] + ["" for _ in header[2:]])
    if baseline is not None:
        header = header + ["vs baseline"]
        rows = [r + [v] for r, v in zip(rows, _vs_baseline(rows, s, arm, baseline), strict=True)]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.append(f"Judge agreement   {judge_line(s)}")
    if baseline is None:
        lines.append("vs baseline: no baseline.json in the suite (`evalkit baseline accept` writes one)")
    if gate_line:
        lines += ["", gate_line]
    return lines


def _baseline_metrics(baseline: Baseline) -> GroupMetrics | None:
    """The baseline run's own metrics (its `grades-summary.json`, the accepted arm's),
    when that run folder is still there; None otherwise."""
    if not baseline.run:
        return None
    try:
        d = read_json_object(Path(baseline.run) / GRADES_SUMMARY, GRADES_SUMMARY, limit=RUN_JSON_BYTES)
        base = GradesSummary.from_json(d)
    except (EvalkitError, OSError, KeyError, TypeError, ValueError):
        return None
    arm = baseline.arm
    return base.per_arm[arm].overall if arm is not None and arm in base.per_arm else base.overall


def _change_pct(now: Any, before: Any) -> str:
    if fmt.missing(now) or fmt.missing(before) or not before:
        return fmt.NO_DATA
    return f"{100 * (float(now) / float(before) - 1):+.0f}%"


def _vs_baseline(rows: list[list[str]], s: GradesSummary, arm: str | None, baseline: Baseline) -> list[str]:
    """The "vs baseline" cell of each row, like with like (the baseline's arm): a rate's
    change in points, latency and cost in percent, the gated case score in points.
    The baseline run's own metrics come from its grades summary; the success rate and
    the cost per case are also in `baseline.json`. `-` where the baseline has no value."""
    now = s.per_arm[arm].overall if arm is not None and arm in s.per_arm else s.overall
    before = _baseline_metrics(baseline)
    kinds = {label: (names, kind) for label, names, kind in ROWS}
    out: list[str] = []
    for row in rows:
        names, kind = kinds.get(row[0], ((), "score"))
        if kind == "score":
            scores = s.per_arm[arm].scores if arm is not None and arm in s.per_arm else None
            score = scores.gated_case_score if scores is not None else None
            out.append(fmt.NO_DATA if score is None else fmt.points(score - baseline.gated_case_score))
        elif kind == "usd":
            out.append(_change_pct(now.cost_per_case_usd, baseline.cost_per_case_usd))
        elif kind == "ms":
            changes = [_change_pct(getattr(now, n), getattr(before, n, None)) for n in names]
            out.append(" / ".join(changes))
        else:
            was = getattr(before, names[0], None) if before is not None else None
            if was is None and names[0] == "sample_pass_rate":
                was = baseline.success_rate
            value = getattr(now, names[0])
            out.append(fmt.NO_DATA if fmt.missing(value) or fmt.missing(was) else fmt.points(value - was))
    return out


# ------------------------------------------------------- the seed's per-case result file


def seed_result_path(run: str | Path) -> Path:
    """Where seed 001's per-case lines go: `runs/results-<stamp>.jsonl`, beside the run
    folder `runs/<stamp>/` (the seed's runner writes `runs/results-<timestamp>.jsonl`)."""
    run = Path(run)
    return run.parent / f"results-{run.name}.jsonl"


def seed_result_lines(samples: Mapping[tuple[str, str, int], Sample], grades: Sequence[Grade]) -> list[dict[str, Any]]:
    """Seed 001's result lines, one per case (and arm) that ran, in grading order, under
    the seed's names: id, tags, output, passed, checks, judge_score, judge_version,
    latency_ms, tokens_in/out, judge_tokens_in/out, cost_usd (generator + judge). With k
    samples a case passes only when every sample passed (`passed_samples` of `samples`
    says how many did); tokens and cost are summed over them; output, checks, judge
    score and latency are the first sample's. `arm` is added when the run has several."""
    by_case: dict[tuple[str, str], list[Grade]] = {}
    for g in grades:
        if (g.case_id, g.arm, g.index) in samples:
            by_case.setdefault((g.case_id, g.arm), []).append(g)
    arms = {arm for _, arm in by_case}
    return [_seed_line(samples, sorted(gs, key=lambda g: g.index), len(arms) > 1) for gs in by_case.values()]


def _seed_line(samples: Mapping[tuple[str, str, int], Sample], gs: list[Grade], with_arm: bool) -> dict[str, Any]:
    first = gs[0]
    ran = [samples[(g.case_id, g.arm, g.index)] for g in gs]
    line: dict[str, Any] = {
        "id": first.case_id,
        "tags": list(ran[0].tags),
        "output": ran[0].output,
        "passed": all(g.passed is True for g in gs),
        "checks": {c.name: c.passed for c in first.checks},
        "judge_score": first.judge_score,
        "judge_version": first.judge_version,
        "latency_ms": round(ran[0].latency_ms),
        "tokens_in": sum(x.usage.prompt_tokens for x in ran),
        "tokens_out": sum(x.usage.completion_tokens for x in ran),
        "judge_tokens_in": sum(g.judge_tokens_in or 0 for g in gs),
        "judge_tokens_out": sum(g.judge_tokens_out or 0 for g in gs),
        "cost_usd": round(sum(x.cost_usd for x in ran) + sum(g.judge_cost_usd for g in gs), 6),
        "samples": len(gs),
        "passed_samples": sum(g.passed is True for g in gs),
    }
    return {"arm": first.arm, **line} if with_arm else line


def write_seed_results(
    run: str | Path, samples: Mapping[tuple[str, str, int], Sample], grades: Sequence[Grade]
) -> Path:
    """Write `seed_result_lines` to `seed_result_path` (replacing an earlier grading's)."""
    path = seed_result_path(run)
    lines = seed_result_lines(samples, grades)
    write_atomic(path, "".join(storable_json(x) + "\n" for x in lines))  # any text a model sent
    return path


# --------------------------------------------------------------------- the PLAN block


def plan_worst_case(suite: Suite, arms: tuple[str, ...] | None = None, k: int | None = None) -> dict[str, Any]:
    """What a run of `suite` (its `arms`, `k` samples per case and arm) may spend at
    most before the cap: each arm's worst call at its own price (`max_tokens_in` in,
    the arm's `max_tokens_out` out: what the ledger reserves), times the calls a sample
    may make (1 for a prompt unit, `max_turns` for evalkit's tool loop; a command or
    python unit's program may make any number, so `calls_bounded` is False and only the
    cap bounds it)."""
    config = suite.config
    chosen = [a for a in config.arms if arms is None or a.name in arms]
    k = config.k if k is None else k
    kind = config.unit.kind
    per_sample_calls = 1 if kind == "prompt" else config.unit.max_turns if kind == "agent" else 1
    per_arm = {}
    for a in chosen:
        c = config.for_arm(a)
        per_arm[a.name] = c.price.cost(config.max_tokens_in, c.max_tokens_out) * per_sample_calls
    samples = len(suite.cases) * len(chosen) * k
    worst = sum(per_arm.values()) * len(suite.cases) * k
    return {
        "samples": samples,
        "calls_per_sample": per_sample_calls,
        "calls_bounded": kind in ("prompt", "agent"),
        "per_arm_sample_usd": per_arm,
        "worst_usd": worst,
        "cap_usd": config.cost_cap_usd,
        "ci_cap_usd": config.ci_cost_cap_usd,
        "fits": worst <= config.cost_cap_usd + 1e-12,
    }


@dataclass(frozen=True)
class PromptLength:
    """An arm's longest rendered prompt (by its byte bound) and its input tokens as the
    run will count them (`tokens_of`), against `max_tokens_in`."""

    arm: str
    case_id: str
    tokens: int
    method: str
    limit: int

    @property
    def over(self) -> bool:
        return self.tokens > self.limit

    def line(self) -> str:
        """One line of the plan block or a lint warning."""
        head = f"arm {self.arm}: case {self.case_id}, {self.tokens:,} tokens ({self.method})"
        if not self.over:
            return f"{head}, within max_tokens_in {self.limit:,}"
        return (
            f"{head}: OVER max_tokens_in {self.limit:,}, every such sample fails with InputTooLong: raise "
            "max_tokens_in in config.json (or the arm's), within the model's context, or shorten the prompt"
        )


def tokens_of(model: str, base_url: str | None) -> tuple[Callable[[str], int] | None, str]:
    """How the run will count a prompt, offline: the embedded model's own tokenizer under
    `evalkit serve` (`base_url` its server's) or for the embedded model by name when its
    file is in place, else a tiktoken encoding already cached for `model`; (None, "utf8
    bytes") when there is neither (the byte bound, never below the true count)."""
    # lazy: the client (openai) and the servers (aiohttp) load only for a plan, not for `grade`
    from evalkit.calls.client import served_tokenizer
    from evalkit.calls.serve import LOCAL_MODEL_ALIAS, default_model_path, gguf_token_count
    from evalkit.foundations.tokens import TEXT_MARGIN, local_tiktoken

    counter = served_tokenizer(base_url)
    if counter is None and model == LOCAL_MODEL_ALIAS:
        try:
            counter = partial(gguf_token_count, default_model_path())
        except EvalkitError:  # the `local` extra is not installed
            counter = None
    if counter is not None:
        return counter, "model tokenizer"
    enc = local_tiktoken(model)
    if enc is not None:
        return (lambda text: len(enc.encode(text, disallowed_special=())) + TEXT_MARGIN), f"tiktoken:{enc.name}"
    return None, "utf8 bytes"


def longest_prompts(
    suite: Suite, arms: tuple[str, ...] | None = None, base_url: str | None = None
) -> list[PromptLength]:
    """Each arm's longest rendered prompt (a prompt or agent unit's first call; a program
    unit renders none) counted as the run counts it, so lint and `run --plan-only` say
    before any call when samples would fail with InputTooLong."""
    config = suite.config
    if config.unit.kind not in ("prompt", "agent") or not suite.cases:
        return []
    out: list[PromptLength] = []
    for arm in (a for a in config.arms if arms is None or a.name in arms):
        c = config.for_arm(arm)
        rendered = [(case.id, render_prompt(c, case, arm)) for case in suite.cases]
        case_id, prompt = max(rendered, key=lambda r: _bound(r[1]))
        n, method = _bound(prompt), "at most: UTF-8 bytes"
        if n > config.max_tokens_in:  # as the run: a finer count only when the cheap bound does not fit
            count, source = tokens_of(c.generator.model, base_url or c.generator.base_url)
            if count is not None:
                n, method = min(n, _counted(prompt, count)), source
        out.append(PromptLength(arm.name, case_id, n, method, config.max_tokens_in))
    return out


def with_prompt_lengths(report: LintReport, suite: Suite | None, *, strict: bool = False) -> LintReport:
    """`report` with a warning (an error under `strict`) for each arm of `suite` whose
    longest prompt is over max_tokens_in (`longest_prompts`): what `evalkit lint` adds,
    so the samples that would fail with InputTooLong are named before any call."""
    if suite is None:
        return report
    where = str(Path(suite.path) / "config.json")
    over = [
        Finding("error" if strict else "warning", f"longest prompt: {p.line()}", where, json_path="$.max_tokens_in")
        for p in longest_prompts(suite)
        if p.over
    ]
    if strict:
        return replace(report, errors=report.errors + tuple(over))
    return replace(report, warnings=report.warnings + tuple(over))


def _bound(prompt: str | list[dict[str, str]]) -> int:
    from evalkit.foundations.tokens import byte_bound  # lazy: aiohttp, off `grade`'s path

    return byte_bound(prompt=prompt) if isinstance(prompt, str) else byte_bound(messages=list(prompt))


def _counted(prompt: str | list[dict[str, str]], count: Callable[[str], int]) -> int:
    """A rendered prompt's tokens by `count`, with the chat template's margins for messages
    (`foundations.tokens`, as the run's counter adds them)."""
    from evalkit.foundations.tokens import PER_CONVERSATION, PER_MESSAGE, message_text  # lazy: aiohttp, as above

    if isinstance(prompt, str):
        return count(prompt)
    return PER_CONVERSATION + sum(count(message_text(m)) + PER_MESSAGE for m in prompt)


def same_places(*amounts: float | None) -> Callable[[float], str]:
    """One money format for a block of amounts: each with the decimals the most precise
    of them needs as `fmt.usd` writes it (at least 2), so $0.013 stands beside $0.010
    and $0.005, never beside $0.01."""
    places = max([2] + [len(t.split(".")[1]) for t in (fmt.usd(a) for a in amounts if a) if "." in t])
    return lambda v: f"${v:,.{places}f}"


def _counts(items: list[str]) -> str:
    seen: dict[str, int] = {}
    for x in items:
        seen[x] = seen.get(x, 0) + 1
    return ", ".join(f"{name} {n}" for name, n in sorted(seen.items())) or "none"


def plan_block(
    suite: Suite, arms: tuple[str, ...] | None = None, k: int | None = None, base_url: str | None = None
) -> str:
    """The seed's AGENT EVAL PLAN block for a run of `suite` (seed 001, "Output"): the
    unit, generator and judge, the task set by set and tag, the arms and k, the scoring,
    the gate, the worst-case cost against the cap, and each arm's longest prompt against
    max_tokens_in (`longest_prompts`; `base_url`: where the run's calls go). Printed by
    `evalkit run` before its first call; `run --plan-only` stops after it."""
    config = suite.config
    unit = config.unit
    chosen = [a for a in config.arms if arms is None or a.name in arms]
    k = config.k if k is None else k
    worst = plan_worst_case(suite, arms, k)
    if unit.kind == "prompt":
        what, effects = f"prompt ({config.mode} mode): the rendered template in, the model's text out", "none"
    elif unit.kind == "agent":
        what = f"agent (evalkit's tool loop, up to {unit.max_turns} model calls): the case in, the final answer out"
        effects = "stubbed: every tool call answered from the case's fixtures"
    else:
        target = " ".join(unit.argv) if unit.kind == "command" else str(unit.callable)
        what = f"{unit.kind} {target}: the case as JSON in, its output out"
        effects = (
            "contained: bubblewrap sandbox, a fresh working directory per sample"
            if unit.isolation == "sandbox"
            else "NOT contained (isolation: none): the program runs on the host"
        )
    gen = config.generator
    params = ", ".join(
        x
        for x in (
            f"temperature {config.temperature:g}" if config.temperature is not None else "",
            f"seed {config.seed}" if config.seed is not None else "",
        )
        if x
    )
    judged = [c for c in suite.cases if c.judged]
    if judged and config.judge is not None:
        same = config.judge.model == gen.model
        rubric = suite.rubric_files[-1] if suite.rubric_files else "no rubric file"
        judge = f"{config.judge.model} ({'SAME as the generator' if same else 'differs from generator'}), {rubric}"
    else:
        judge = "none (no judged case)"
    kinds = sorted({ch.kind for c in suite.cases for ch in c.checks})
    sets = _counts([c.set for c in suite.cases])
    tags = _counts([t for c in suite.cases for t in c.tags])
    non_act = sum(c.intent == "non-activation" for c in suite.cases)
    arm_text = ", ".join(a.name + (f" (skill {a.skill_dir})" if a.skill_dir else "") for a in chosen)
    calls = worst["calls_per_sample"]
    how = (
        f"{worst['samples']} samples x up to {calls} call(s) at their token ceilings"
        if worst["calls_bounded"]
        else f"{worst['samples']} samples x one call at its token ceilings; the program may make more: the cap stops it"
    )
    usd = same_places(worst["worst_usd"], worst["cap_usd"], worst["ci_cap_usd"])
    verdict = (
        "fits under the cap"
        if worst["fits"]
        else "OVER the cap: the run stops INCOMPLETE unless calls cost well under their ceilings"
    )
    lines = [
        "AGENT EVAL PLAN",
        "===============",
        "",
        f"Unit:         {suite.name}: {what}",
        f"Side effects: {effects}",
        f"Generator:    {gen.model}" + (f", {params}" if params else ""),
        f"Judge:        {judge}",
        "",
        f"Task set:     {len(suite.cases)} cases: sets {sets}; non-activation {non_act}",
        f"Tags:         {tags}",
        f"Arms:         {len(chosen)}: {arm_text}",
        f"Samples:      {len(suite.cases)} cases x {len(chosen)} arms x k {k} = {worst['samples']}",
        "",
        f"Scoring:      deterministic: {', '.join(kinds) or 'none'}",
        f"              judged: {len(judged)} cases"
        + (f", threshold >= {judged[0].judge_threshold}/5" if judged else ""),
        f"Gate:         fail on success drop > {config.gate.max_success_drop_points:g} pts, "
        f"cost increase > {config.gate.max_cost_increase_pct:g} %",
        f"Worst case:   {usd(worst['worst_usd'])} ({how}): {verdict}",
        f"Cost cap:     {usd(worst['cap_usd'])} per local run",
    ]
    if worst["ci_cap_usd"] is not None:  # its own line: a second cap, not a footnote to the first
        lines.append(f"CI cost cap:  {usd(worst['ci_cap_usd'])} per CI run (evalkit run --ci)")
    lengths = longest_prompts(suite, arms, base_url)
    if lengths:  # one line per arm, aligned under the first
        lines.append("")
        lines += [("Longest prompt: " if i == 0 else " " * 16) + p.line() for i, p in enumerate(lengths)]
    return "\n".join(lines) + "\n"
