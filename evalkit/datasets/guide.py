"""The evaluation guide `evalkit dataset guide` writes: one Markdown document with the
confirmed scope, the curation notes, the metrics with their rationale, the tooling and
the review, as the evaluation-design seed (`004_9410cc142da68093.txt`) asks ("one
sectioned evaluation guide containing curation notes, metric selection with rationale,
and tooling recommendations"; "metric selection is justified from the system's actual
grounding, tool use, and risk profile rather than applied uniformly"; "the guide states
who reviewed the content and when it should be revisited").

Every statement is derived from the inputs: the scope (refused unless confirmed), the
suite's cases and config (its checks, judge, k, gate), and optionally the dataset and its
review sheet. Where the scope names something the suite does not measure (a tool with no
tool check, grounding sources with no grounding check, refusal requirements with no
refusal check), the guide says so as a gap rather than leaving it out. Review checkboxes
are written unchecked: reviewers tick them themselves.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from evalkit.datasets.scope import UNKNOWN_CONSEQUENCE, Scope, require_confirmed
from evalkit.foundations._io import write_atomic
from evalkit.foundations.errors import InputError
from evalkit.foundations.records import Suite

TOOL_CHECKS = ("tool_calls", "activation", "forbidden_tools", "tool_errors", "skill_activation")
FORMAT_CHECKS = ("exact", "contains", "regex", "json_schema", "json_field")
PROGRAM_CHECKS = ("file_exists", "exit_code", "max_turns", "scorer")


@dataclass(frozen=True)
class GuideInputs:
    """What the guide is derived from: the scope file, the suite folder, and optionally
    the dataset (JSON, CSV) and its review sheet."""

    scope: str | os.PathLike[str]
    suite: str | os.PathLike[str]
    dataset: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None
    review: str | os.PathLike[str] | None = None


def _md(text: str) -> str:
    """A user's text in a Markdown table cell or line: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _clause(text: object) -> str:
    """A user's sentence set inside one of the guide's: one line, no closing full stop."""
    return _md(str(text)).rstrip(". ")


def _list(items: tuple[str, ...] | list[str]) -> str:
    return ", ".join(_md(i) for i in items)


def _check_counts(suite: Suite) -> Counter[str]:
    return Counter(ch.kind for c in suite.cases for ch in c.checks)


def _on_cases(counts: dict[str, int]) -> str:
    """`contains on 3 case(s), regex on 1 case(s)`: checks and how many cases carry each."""
    return ", ".join(f"{k} on {v} case(s)" for k, v in sorted(counts.items()))


def _score_lines(suite: Suite) -> list[str]:
    """The case score: pass@k for capability cases, pass^k for regression cases."""
    k = suite.config.k
    sets = Counter(c.set for c in suite.cases)
    return [
        f"- **Case score** over {len(suite.cases)} case(s) ({', '.join(f'{s} {v}' for s, v in sorted(sets.items()))}), "
        f"k = {k} samples per case: pass@{k} for a capability case (can the system do it at all), "
        f"pass^{k} for a regression case (does it do it every time). Repeats measure consistency, which one "
        "sample per case hides."
    ]


def _tool_lines(scope: Scope, checks: Counter[str]) -> list[str]:
    """Tool use, or the gap when the scope names tools no case checks."""
    tools = scope.items("tools")
    tool_checks = {k: v for k, v in checks.items() if k in TOOL_CHECKS}
    if tool_checks:
        why = f"the scope names the tools {_list(tools)}" if tools else "the suite checks tool use"
        return [
            f"- **Tool use** ({_on_cases(tool_checks)}): {why}; "
            "a right answer reached without the expected call is not the behaviour the system is built for."
        ]
    if tools:
        return [f"- **Gap, tool use**: the scope names the tools {_list(tools)} but no case checks a tool call."]
    return []


def _grounding_lines(scope: Scope, checks: Counter[str]) -> list[str]:
    """Groundedness, or the gap when the scope names sources no case checks."""
    sources = scope.items("grounding_sources")
    grounded = checks.get("grounding", 0)
    if grounded:
        why = f"answers must rest on {_list(sources)}" if sources else "cases carry a context to answer from"
        return [f"- **Groundedness** (grounding on {grounded} case(s)): {why}; an answer not in its source fails."]
    if sources:
        return [
            f"- **Gap, groundedness**: the scope names the grounding sources {_list(sources)} but no case has a "
            "grounding check."
        ]
    return []


def _refusal_lines(scope: Scope, checks: Counter[str]) -> list[str]:
    """Refusal, or the gap when the scope states refusal requirements no case checks."""
    refusal = scope.value("refusal_requirements")
    prohibited = scope.items("prohibited_content")
    refusals = checks.get("refusal", 0)
    if refusals:
        reasons = []
        if refusal:
            reasons.append(f"the system must refuse: {_clause(refusal)}")
        if prohibited:
            reasons.append(f"prohibited content: {_list(prohibited)}")
        return [
            f"- **Refusal** (refusal on {refusals} case(s)): {'; '.join(reasons) or 'the suite has safety cases'}. "
            "The judge's rubric asserts the action expected with the refusal, not merely that it declines."
        ]
    if refusal or prohibited:
        return [
            "- **Gap, refusal**: the scope states refusal requirements or prohibited content but no case "
            "has a refusal check."
        ]
    return []


def _format_lines(scope: Scope, checks: Counter[str]) -> list[str]:
    """The output's form: deterministic format checks, else the judge's rubric; then
    the program checks."""
    out: list[str] = []
    fmt = {k: v for k, v in checks.items() if k in FORMAT_CHECKS}
    response_format = scope.value("response_format")
    if fmt:
        why = (
            f"the scope requires: {_clause(response_format)}"
            if response_format
            else "the suite fixes the output's form"
        )
        out.append(f"- **Format** ({_on_cases(fmt)}): {why}.")
    elif response_format:
        out.append(
            f"- **Format**: the scope requires {_clause(response_format)}; no deterministic check measures it, "
            "so it rests on the judge's rubric."
        )
    prog = {k: v for k, v in checks.items() if k in PROGRAM_CHECKS}
    if prog:
        out.append(
            f"- **Program checks** ({_on_cases(prog)}): what "
            "the unit's program leaves behind, checked deterministically."
        )
    return out


def _judge_lines(suite: Suite) -> list[str]:
    """The judged sample pass rate: judge, rubric, pass marks, and when judged results
    count (calibration)."""
    judged = [c for c in suite.cases if c.judged]
    if not judged:
        return []
    cfg = suite.config
    thresholds = Counter(c.judge_threshold for c in judged)
    judge = cfg.judge.model if cfg.judge is not None else "(none configured)"
    rubrics = ", ".join(suite.rubric_files) or "(none)"
    calibrate = "(`evalkit judge sample`, the label_judge notebook, `evalkit judge calibrate`)"
    trust = {
        True: "judged results count even uncalibrated (allow_uncalibrated_judge)",
        None: 'judged results count before the judge is calibrated, flagged "judge not calibrated (n of 20 '
        f'labels)" until it agrees with human labels {calibrate}',
        False: f"judged results count only once the judge agrees with human labels {calibrate}",
    }[cfg.allow_uncalibrated_judge]
    return [
        f"- **Judged sample pass rate** on {len(judged)} case(s), judge {_md(judge)}, rubric {rubrics}, pass mark "
        f"{', '.join(f'{t} ({v} case(s))' for t, v in sorted(thresholds.items()))} on the 1-5 scale: the expected "
        f"behaviour is observable but not a fixed string. Estimate: {cfg.judged_estimate}; {trust}."
    ]


def _gate_lines(scope: Scope, suite: Suite) -> list[str]:
    """The gate against the accepted baseline, and the evaluation's cadence."""
    g = suite.config.gate
    cadence = scope.value("evaluation_cadence")
    when = f" The evaluation runs {_clause(cadence)}" if cadence else " The cadence is unknown"
    return [
        f"- **Gate** against the accepted baseline: fails on a drop of the gated case score above "
        f"{g.max_success_drop_points:g} points (overall, or on a tag with at least {g.min_tag_cases} cases) or a cost "
        f"per case up more than {g.max_cost_increase_pct:g}%, "
        + (
            f"when beyond run-to-run noise at alpha {g.alpha:g}; "
            if g.require_significance
            else "as observed (the seed's gate; gate.require_significance asks for the noise guard); "
        )
        + f"an underpowered gate is a {g.on_underpowered}.{when}: each run is held against the last accepted one."
    ]


def _risk_lines(scope: Scope) -> list[str]:
    """The risks the scope names, measured or recorded as unmeasured."""
    risks = scope.items("risks")
    if not risks:
        return []
    return [
        f"- **Risks the scope names**: {_list(risks)}. Each is measured where a check or the rubric above "
        "covers it; a risk no check covers is an unmeasured dimension, recorded here, not assessed."
    ]


def metric_rationale(scope: Scope, suite: Suite) -> list[str]:
    """The metrics section: one paragraph per measurement, each with the reason the
    scope gives for it, and the gaps where the scope names what the suite does not
    measure."""
    checks = _check_counts(suite)
    return [
        *_score_lines(suite),
        *_tool_lines(scope, checks),
        *_grounding_lines(scope, checks),
        *_refusal_lines(scope, checks),
        *_format_lines(scope, checks),
        *_judge_lines(suite),
        *_gate_lines(scope, suite),
        *_risk_lines(scope),
    ]


def guide_text(inputs: GuideInputs, *, today: str | None = None) -> str:
    """The guide's Markdown (see the module docstring). `InputError` for an unconfirmed
    scope, a suite that does not load, or a dataset that is not valid."""
    from evalkit.suites.reader import load_suite  # lazy: the loader brings the privacy scanner

    scope = require_confirmed(inputs.scope)
    suite = load_suite(os.fspath(inputs.suite))
    name = scope.value("system_name")
    title = _md(str(name)) if name else suite.name
    lines = [
        f"# Evaluation guide: {title}",
        "",
        f"Written by `evalkit dataset guide` on {today or datetime.now(UTC).date().isoformat()} from the scope "
        f"confirmed at {scope.confirmed_at} and the suite `{_md(suite.name)}`.",
        "",
        "## Scope",
        "",
        "| area | answer |",
        "| --- | --- |",
    ]
    for key, _question, answer in scope.summary():
        lines.append(f"| {key} | {_md(answer)} |")
    unknowns = scope.unknowns()
    lines += ["", "### Recorded as unknown", ""]
    if unknowns:
        for key in unknowns:
            lines.append(f"- **{key}**: {UNKNOWN_CONSEQUENCE.get(key, 'to be established before the next revision')}.")
    else:
        lines.append("Every area was answered.")
    lines += ["", "## Curation notes", ""]
    lines += _curation(inputs)
    lines += ["", "## Metrics and their rationale", ""]
    lines += metric_rationale(scope, suite)
    lines += ["", "## Tooling", ""]
    lines += _tooling(scope, suite)
    lines += ["", "## Review", ""]
    reviewers = scope.items("reviewers")
    if reviewers:
        lines += [f"- [ ] Content reviewed by {_md(r)}" for r in reviewers]
    else:
        lines.append("- [ ] Content reviewed by: (reviewers unknown)")
    revisit = scope.value("revisit")
    lines += ["", f"Revisit: {_md(str(revisit)) if revisit else 'unknown'}.", ""]
    return "\n".join(lines)


def _curation(inputs: GuideInputs) -> list[str]:
    if inputs.dataset is None:
        return ["No dataset was given (`--json`, `--csv`): the suite's cases are the evaluation set."]
    from evalkit.datasets.dataset import load_dataset  # lazy: the contract loads jsonschema

    ds = load_dataset(*inputs.dataset)
    md = ds["metadata"]
    pairs = ds["evaluation_pairs"]
    dist = ", ".join(f"{k} {v}" for k, v in md["distribution"].items())
    cov = ", ".join(f"{_md(k)} {v}" for k, v in md["population_coverage"].items()) or "(no populations)"
    sme = sum(1 for p in pairs if p["needs_sme_review"])
    out = [
        f"- {md['total_pairs']} pairs, version {md['version']}, created {md['created_date']}; difficulty: {dist}.",
        f"- Population coverage (pairs that exercise each; they overlap): {cov}.",
        f"- Review state {md['review_state']}, validation {md['validation_status']}"
        + (f", generated by {_md(str(md['generation_method']))}" if md.get("generation_method") else "")
        + ".",
        f"- {sme} pair(s) need subject-matter review (an expected answer that could not be grounded).",
    ]
    if inputs.review is not None:
        from evalkit.datasets.review import ReviewSheet  # a sheet read here: the outcome the protocol computes

        out.append(f"- Sample review: {ReviewSheet(inputs.review).outcome().explain()}")
    return out


def _tooling(scope: Scope, suite: Suite) -> list[str]:
    approach = scope.value("approach")
    cadence = scope.value("evaluation_cadence")
    out = [
        f"- Development approach: {_md(str(approach)) if approach else 'unknown'}.",
        f"- `evalkit lint {_md(suite.path)}` then `evalkit run` (k = {suite.config.k}, under the cost cap of "
        f"${suite.config.cost_cap_usd:g}), `evalkit grade`, `evalkit report`.",
        "- `evalkit compare` for two arms, `evalkit gate` against the accepted baseline (`evalkit baseline accept`).",
        "- `evalkit init --ci github` writes the CI workflow"
        + (f", for a cadence of {_clause(cadence)}." if cadence else "; the cadence is unknown."),
    ]
    if suite.config.judge is not None:
        out.append(
            "- `evalkit judge sample` and the label_judge notebook for the human labels the judge is checked on."
        )
    return out


def write_guide(inputs: GuideInputs, out: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write the guide to `out` (atomically); an existing file is refused unless `force`."""
    p = Path(out)
    if p.exists() and not force:
        raise InputError("refusing to overwrite an existing file (use --force)", p)
    text = guide_text(inputs)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, text)
    return p
