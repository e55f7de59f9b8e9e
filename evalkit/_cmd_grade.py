"""CLI subcommands for grade and judge (registered by evalkit.cli).

`evalkit grade RUN [--judge-base-url URL] [--judge-version vN] [--pairwise BASE,TREAT]`
grades a run folder; `evalkit grade --eval-file evals.json --outputs DIR -k 5
[--compat-wildcards]` grades an agent-evals outputs folder as its harness does;
`evalkit judge sample RUN -n 20 [--seed S]` draws judged items for human labelling.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import fmt
from ._cliopts import ci_output_options, emit_ci
from ._text import printable
from .errors import InputError
from .layout import GRADES, GRADES_SUMMARY
from .records import GradesSummary


@click.command("grade")
@click.argument("run", required=False, type=click.Path(file_okay=False))
@click.option(
    "--judge-base-url",
    default=None,
    envvar="EVALKIT_JUDGE_BASE_URL",
    help="OpenAI-compatible base URL of the judge; overrides the config (env: EVALKIT_JUDGE_BASE_URL).",
)
@click.option("--judge-version", default=None, help="Pin the judge files version (vN); default: the highest.")
@click.option(
    "--pairwise",
    default=None,
    metavar="BASELINE,TREATMENT",
    help="Also ask the position-swapped pairwise judge for these two arms.",
)
@click.option(
    "--suite",
    "suite_path",
    default=None,
    type=click.Path(exists=True),
    help="The suite to grade against (default: the one the run names).",
)
@click.option("--eval-file", type=click.Path(), default=None, help="agent-evals mode: the evals.json file.")
@click.option(
    "--outputs", type=click.Path(), default=None, help="agent-evals mode: folder of <case-id>/sample-<n>.txt files."
)
@click.option("-k", "k", type=int, default=5, show_default=True, help="agent-evals mode: samples expected per case.")
@click.option(
    "--compat-wildcards",
    is_flag=True,
    help="agent-evals mode: treat * ? [..] in a contains expectation as PowerShell -like wildcards, "
    "as run-evals.ps1 did (default: literal).",
)
@ci_output_options
def grade_cmd(
    run: str | None,
    judge_base_url: str | None,
    judge_version: str | None,
    pairwise: str | None,
    suite_path: str | None,
    eval_file: str | None,
    outputs: str | None,
    k: int,
    compat_wildcards: bool,
    junit: Path | None,
    markdown: Path | None,
) -> None:
    """Grade a run folder (writes grades.jsonl and grades-summary.json; exit 1 when
    samples are missing or unjudged), or an agent-evals outputs folder (exit 1 on a
    failed gate)."""
    if eval_file or outputs:
        if run:
            raise InputError("give either RUN or --eval-file/--outputs, not both")
        if not (eval_file and outputs):
            raise InputError("agent-evals mode needs both --eval-file and --outputs")
        # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
        from .agentevals import grade_outputs, render

        report = grade_outputs(eval_file, outputs, k, compat_wildcards=compat_wildcards)
        for w in report.warnings:
            click.echo(f"WARNING: {w}", err=True)
        click.echo(render(report), nl=False)

        def ci():  # noqa: ANN202 - a CiReport, built only when asked for
            # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
            from .ciout import eval_file_report

            return eval_file_report(report)

        emit_ci(ci, junit, markdown)
        sys.exit(report.exit_code)
    if not run:
        raise InputError("give a run folder (evalkit grade RUN) or --eval-file and --outputs")
    if junit or markdown:
        raise InputError("--junit and --markdown apply to grade --eval-file; gate or compare the graded run for CI")
    if compat_wildcards:
        raise InputError("--compat-wildcards only applies with --eval-file/--outputs")
    pair = None
    if pairwise:
        parts = [p.strip() for p in pairwise.split(",")]
        if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
            raise InputError("--pairwise takes two different arm names: BASELINE,TREATMENT")
        pair = (parts[0], parts[1])
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from .grading import grade_run

    result = grade_run(run, suite_path, judge_base_url=judge_base_url, judge_version=judge_version, pairwise=pair)
    for line in summary_lines(result.summary, result.run_path):
        click.echo(printable(line))
    for f in result.findings:
        click.echo(printable(str(f)))
    click.echo(f"summary: {result.run_path / GRADES_SUMMARY}")
    s = result.summary
    if not result.complete:
        stopped = f" (grading stopped: {s.stop_reason})" if s.stop_reason else ""
        click.echo(f"INCOMPLETE: graded {s.n_graded}/{s.n_expected} expected samples{stopped}", err=True)
        if s.stop_detail:
            click.echo(s.stop_detail, err=True)
    sys.exit(result.exit_code)


# What `evalkit grade` prints of each group, in order (the names are those of grades-summary.json).
PRINTED = (
    "sample_pass_rate",
    "correct_rate",
    "tool_call_correctness",
    "hallucination_rate",
    "refusal_rate",
    "refusal_rate_golden",
    "refusal_rate_should_refuse",
    "activation_rate",
    "latency_p50_ms",
    "latency_p95_ms",
    "cost_per_sample_usd",
    "cost_per_case_usd",
    "paid_usd",
    "cache_avoided_usd",
)


def _score(v: float | None, se: float | None) -> str:
    return fmt.pct(v) + ("" if v is None or fmt.missing(se) else f" (SE {fmt.points(se, signed=False)})")


def _metric(name: str, v: object) -> str:
    """One metric as people read it: dollars for `_usd`, milliseconds for `_ms`, a
    percentage for a rate, '-' for not measured."""
    if name.endswith("_usd"):
        return fmt.usd(v)
    if name.endswith("_ms"):
        return fmt.ms(v)
    if name.endswith(("_rate", "_correctness", "_golden", "_should_refuse")):
        return fmt.pct(v)
    return fmt.cell(v)


def summary_lines(s: GradesSummary, run_path: Path) -> list[str]:
    """What `evalkit grade` prints of a grades summary: the counts, the judge, each
    metric overall, and per arm pass@k / pass^k (with SE) and the gated case score per
    set and per tag."""
    m = s.overall
    lines = [
        f"graded {s.n_graded}/{s.n_expected} samples ({s.n_missing} missing, "
        f"{s.n_errored} errored) -> {run_path / GRADES}"
    ]
    if s.judge_version:
        lines.append(
            f"judge: {s.judge_model} {s.judge_version}"
            f"{' (same model as generator: override)' if s.judge_same_model_override else ''}; "
            f"spend {fmt.usd(s.judge_spend_usd)}, {s.cache_hits} cached answers"
        )
    if s.judge_trust is not None and s.judge_trust.n_labels:
        lines.append(f"judge against human labels: {s.judge_trust.reason}")
    # each metric for all arms pooled and for each arm apart (arms are compared, not pooled)
    columns = [("all arms", m)] + [(arm, a.overall) for arm, a in s.per_arm.items()]
    if len(columns) == 2:
        columns = columns[1:]  # one arm: its column is the pooled one
    width = max(12, *(len(name) + 2 for name, _ in columns))
    lines.append("  " + f"{'metric':28s}" + "".join(f"{name:>{width}s}" for name, _ in columns))
    for name in PRINTED:
        cells = [_metric(name, getattr(g, name)) for _, g in columns]
        if all(c == fmt.NO_DATA for c in cells):
            continue  # not measured on this run (no case of that kind): not printed
        lines.append(f"  {name:28s}" + "".join(f"{c:>{width}s}" for c in cells))
    for arm, a in s.per_arm.items():
        lines.append(f"arm {arm} (k={s.k}): set/tag, cases, pass@k, pass^k, gated case score")
        groups = [("all", a.scores)] if a.scores else []
        groups += [(f"set {n}", v) for n, v in a.per_set_scores.items()]
        groups += [(f"tag {n}", v) for n, v in a.per_tag_scores.items()]
        for name, v in groups:
            gated = f"{_score(v.gated_case_score, v.gated_case_score_se)} ({v.gate})" if v.n_gated else "- (gate none)"
            lines.append(
                f"  {name:26s} {v.n_cases:>4}  pass@k {_score(v.pass_at_k, v.pass_at_k_se)}  "
                f"pass^k {_score(v.pass_hat_k, v.pass_hat_k_se)}  gated {gated}"
            )
    if s.pairwise:
        p = s.pairwise
        lines.append(
            f"pairwise {p['treatment']} vs {p['baseline']}: {p['wins']}W/{p['ties']}T/{p['losses']}L, "
            f"{p['errored']} errored, position consistency {fmt.pct(p['position_consistency'])}"
        )
    return lines


@click.group("judge")
def judge_group() -> None:
    """The LLM judge: human-label sampling."""


@judge_group.command("sample")
@click.argument("run", type=click.Path(file_okay=False))
@click.option("-n", "n", type=int, default=20, show_default=True, help="How many judged items to draw.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draw (reproducible).")
def judge_sample_cmd(run: str, n: int, seed: int) -> None:
    """Print n judged items of a graded run as judge/human-sample.jsonl lines to fill in
    (score 1-5, rater); the judge's own score is not shown."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from .judge import sample_for_labelling

    for item in sample_for_labelling(run, n, seed):
        click.echo(json.dumps(item))  # ASCII: any output text, escaped, is safe on a terminal and reads back equal


COMMANDS: list[click.Command] = [grade_cmd, judge_group]
