"""CLI subcommands for reports (registered by evalkit._cli.main): `report` and `microtest`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalkit._cli.options import echo_text

MIN_REPS = 5  # microtest.MIN_REPS, here so `--help` need not import the library


@click.command("report")
@click.argument("run", type=click.Path(file_okay=False))
@click.option(
    "--reports-dir",
    default="reports",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where reports/<run>/ and index.html go.",
)
@click.option(
    "--only",
    "only",
    multiple=True,
    metavar="NAME",
    help="Run only this notebook (repeatable): run_summary, pass_at_k, skill_comparison, "
    "judge_calibration, power_planning, micro_test, replay.",
)
@click.option("--serial", is_flag=True, help="Execute the notebooks one after another (default: in parallel).")
@click.option(
    "--pandalm-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Also calibrate against the PandaLM data in this folder (judge_calibration).",
)
@click.option(
    "--redact",
    is_flag=True,
    help="Replace every detected personal value and secret with a typed placeholder (<EMAIL_1>), "
    "so the report can be shared outside the team; the run's report folder is made anew.",
)
@click.option(
    "--plan",
    "plan_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="The pre-registered plan.json to hold the run to (default: the suite's, when it has one).",
)
@click.option(
    "--baseline",
    "baseline_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="The baseline.json to gate the run against (default: the suite's, when it has one).",
)
@click.option(
    "--arm",
    "gate_arm",
    default=None,
    help="The arm to gate against the baseline (default: the arm a recorded gate names, else the baseline's). "
    "A gate `evalkit gate` recorded is never replaced.",
)
@click.option(
    "--pair",
    default=None,
    metavar="BASELINE,TREATMENT",
    help="The pair of arms the skill-comparison page shows in full (a run of more arms: the matrix of every "
    "pair is shown too); default: the arm named baseline or control, else the first, and the next.",
)
@click.option(
    "--against",
    default=None,
    type=click.Path(file_okay=False),
    metavar="OTHER_RUN",
    help="Also write diff.html beside explorer.html: RUN against this run, per case and arm, regressions first.",
)
def report_cmd(
    run: str,
    reports_dir: str,
    only: tuple[str, ...],
    serial: bool,
    pandalm_dir: str | None,
    redact: bool,
    plan_path: str | None,
    baseline_path: str | None,
    gate_arm: str | None,
    pair: str | None,
    against: str | None,
) -> None:
    """Record what the run concludes in its verdicts.json (two-arm verdict and plan check,
    gate, judge trust), execute the notebooks that apply to RUN with papermill, render
    them to HTML in REPORTS_DIR/<run>/ beside the run's explorer.html (and diff.html, with
    --against) and rebuild REPORTS_DIR/index.html; print the
    index's path. Exit 1 when a notebook failed (its page shows the error), or when the
    run has nothing to report (no sample, or not graded)."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.telling import reports

    extra = None
    if pair is not None:
        names = [p.strip() for p in pair.split(",")]
        if len(names) != 2 or not all(names) or names[0] == names[1]:
            raise click.UsageError("--pair takes two different arm names: BASELINE,TREATMENT")
        extra = {"skill_comparison": {"baseline": names[0], "treatment": names[1]}}
    result = reports.report_run(
        run,
        reports_dir,
        notebooks=list(only) or None,
        parallel=not serial,
        redact=redact,
        pandalm_dir=pandalm_dir,
        plan=plan_path,
        baseline=baseline_path,
        arm=gate_arm,
        extra_parameters=extra,
        against=against,
    )
    for nb in result.notebooks:
        status = "ok" if nb.ok else f"FAILED: {nb.error}"
        echo_text(f"{nb.name}: {nb.html or nb.ipynb} ({nb.seconds:.1f} s) {status}", err=True)
    for name, why in result.skipped.items():
        if not only:
            echo_text(f"{name}: skipped ({why})", err=True)
    echo_text(str(result.index))
    if not result.ok:
        failed = [nb.name for nb in result.notebooks if not nb.ok]
        echo_text(f"error: {len(failed)} of {len(result.notebooks)} notebook(s) failed: {', '.join(failed)}", err=True)
        sys.exit(1)
    if result.nothing:
        echo_text(f"error: {result.nothing}", err=True)
        sys.exit(1)


@click.command("microtest")
@click.argument("unit", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--variants",
    "variants",
    required=True,
    type=click.Path(file_okay=False),
    help="A folder with one guidance file per variant (*.md or *.txt); each becomes an arm.",
)
@click.option(
    "--reps",
    default=MIN_REPS,
    show_default=True,
    type=int,
    help=f"Fresh-context repetitions per case and variant (at least {MIN_REPS}).",
)
@click.option(
    "--base-url",
    envvar="EVALKIT_BASE_URL",
    default=None,
    help="OpenAI-compatible base URL for the unit under test (env: EVALKIT_BASE_URL).",
)
@click.option(
    "--judge-base-url",
    envvar="EVALKIT_JUDGE_BASE_URL",
    default=None,
    help="Base URL for the judge, when the suite has judged cases.",
)
@click.option(
    "--flag-pattern",
    default="",
    help="A regex marking the failure in an output (default: a sample that fails its checks is flagged).",
)
@click.option("--runs-dir", default=None, type=click.Path(file_okay=False), help="Default: UNIT/runs.")
@click.option("--reports-dir", default="reports", show_default=True, type=click.Path(file_okay=False))
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option(
    "--no-cache",
    is_flag=True,
    help="Fresh samples: neither read nor write the response cache (a re-run otherwise replays its repetitions).",
)
@click.option(
    "--allow-private-data",
    is_flag=True,
    help="Run even though the privacy scan found personal data or secrets in the suite or a variant "
    "(recorded in the run's config.json).",
)
def microtest_cmd(
    unit: str,
    variants: str,
    reps: int,
    base_url: str | None,
    judge_base_url: str | None,
    flag_pattern: str,
    runs_dir: str | None,
    reports_dir: str,
    no_progress: bool,
    no_cache: bool,
    allow_private_data: bool,
) -> None:
    """Settle the wording of one piece of guidance: run every variant in VARIANTS and a
    no-guidance control on UNIT's cases, REPS fresh-context repetitions each, grade,
    and render the micro_test notebook. Prints the report and its conclusion.

    Exit 0 when a variant flags significantly less than the control (an exact test
    paired by case, Holm across the variants, alpha 0.05); 1 when none does (the guidance
    does not help, or the micro-test is too small to tell), when the control shows nothing
    to fix, or when the run is INCOMPLETE or the notebook failed; 2 on bad input."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.conclusions import microtest
    from evalkit.conclusions.grading import grade_run, judge_endpoint
    from evalkit.runfolder.runload import run_verdicts
    from evalkit.running.runner import run_suite
    from evalkit.suites.reader import load_suite
    from evalkit.telling import reports

    microtest.check_options(reps, flag_pattern)
    files = microtest.variant_files(Path(variants))
    suite = microtest.microtest_suite(load_suite(unit), files)
    if any(c.judged for c in suite.cases):
        judge_endpoint(suite, judge_base_url)  # no judge URL: refused now, not after paying for the run
    result = run_suite(
        suite,
        arms=[a.name for a in suite.config.arms],
        k=reps,
        runs_dir=runs_dir,
        base_url=base_url,
        progress=not no_progress,
        cache=not no_cache,
        allow_private_data=allow_private_data,
    )
    grade_run(result.path, suite, judge_base_url=judge_base_url)
    cached, total = microtest.cached_samples(result.path)
    if cached:
        click.echo(
            f"note: {cached} of {total} samples came from the response cache (an earlier identical run), "
            "not fresh repetitions; pass --no-cache for fresh samples",
            err=True,
        )
    microtest.write_marker(result.path, files, reps, flag_pattern)
    rep = reports.report_run(result.path, reports_dir, notebooks=["micro_test"])
    nb = rep.notebooks[0]
    echo_text(f"run folder: {result.path}")
    echo_text(f"report: {nb.html}")
    found = run_verdicts(result.path).microtest
    if found is not None:
        echo_text(found.conclusion)
    echo_text(str(rep.index))
    if not nb.ok:
        echo_text(f"error: the micro_test notebook failed: {nb.error}", err=True)
        sys.exit(1)
    if result.exit_code:
        sys.exit(result.exit_code)
    sys.exit(0 if found is not None and found.kind == "pass" else 1)  # for scripts: did a variant help?


COMMANDS: list[click.Command] = [report_cmd, microtest_cmd]
