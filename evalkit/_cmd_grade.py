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

from ._cliopts import ci_output_options, emit_ci
from ._text import printable
from .errors import InputError


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


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
    from .grading import GRADES_SUMMARY, grade_run

    result = grade_run(run, suite_path, judge_base_url=judge_base_url, judge_version=judge_version, pairwise=pair)
    s = result.summary
    m = s["overall"]
    click.echo(
        f"graded {s['n_graded']}/{s['n_expected']} samples ({s['n_missing']} missing, "
        f"{s['n_errored']} errored) -> {result.run_path / 'grades.jsonl'}"
    )
    if s.get("judge_version"):
        click.echo(
            f"judge: {s['judge_model']} {s['judge_version']}"
            f"{' (same model as generator: override)' if s['judge_same_model_override'] else ''}; "
            f"spend ${s.get('judge_spend_usd', 0.0):.6f}, {s.get('cache_hits', 0)} cached answers"
        )
    for name in (
        "success_rate",
        "correct_rate",
        "tool_call_correctness",
        "hallucination_rate",
        "refusal_rate",
        "refusal_rate_golden",
        "refusal_rate_should_refuse",
        "activation_rate",
        "latency_p50_ms",
        "latency_p95_ms",
        "cost_per_task_usd",
    ):
        click.echo(f"  {name:28s} {_fmt(m[name])}")
    if "pairwise" in s:
        p = s["pairwise"]
        click.echo(
            f"pairwise {p['treatment']} vs {p['baseline']}: {p['wins']}W/{p['ties']}T/{p['losses']}L, "
            f"{p['errored']} errored, position consistency {_fmt(p['position_consistency'])}"
        )
    for f in result.findings:
        click.echo(printable(f"[{f.level}] {f.message}"))
    click.echo(f"summary: {result.run_path / GRADES_SUMMARY}")
    if not result.complete:
        stopped = f" (grading stopped: {s['stop_reason']})" if s.get("stop_reason") else ""
        click.echo(f"INCOMPLETE: graded {s['n_graded']}/{s['n_expected']} expected samples{stopped}", err=True)
        if s.get("stop_detail"):
            click.echo(s["stop_detail"], err=True)
    sys.exit(result.exit_code)


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
