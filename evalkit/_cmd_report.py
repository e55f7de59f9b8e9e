"""CLI subcommands for reports (registered by evalkit.cli): `report` and `microtest`."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click

from .errors import InputError

MIN_REPS = 5  # fewer fresh-context repetitions than this is noise, not a micro-test
CONTROL = "control"


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
    "judge_calibration, power_planning, micro_test.",
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
def report_cmd(
    run: str, reports_dir: str, only: tuple[str, ...], serial: bool, pandalm_dir: str | None, redact: bool
) -> None:
    """Execute the notebooks that apply to RUN with papermill, render them to HTML in
    REPORTS_DIR/<run>/ and rebuild REPORTS_DIR/index.html; print the index's path.
    Exit 1 when a notebook failed (its page shows the error)."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from . import reports

    result = reports.report_run(
        run, reports_dir, notebooks=list(only) or None, parallel=not serial, redact=redact, pandalm_dir=pandalm_dir
    )
    for nb in result.notebooks:
        status = "ok" if nb.ok else f"FAILED: {nb.error}"
        click.echo(f"{nb.name}: {nb.html or nb.ipynb} ({nb.seconds:.1f} s) {status}", err=True)
    for name, why in result.skipped.items():
        if not only:
            click.echo(f"{name}: skipped ({why})", err=True)
    click.echo(str(result.index))
    if not result.ok:
        failed = [nb.name for nb in result.notebooks if not nb.ok]
        click.echo(f"error: {len(failed)} of {len(result.notebooks)} notebook(s) failed: {', '.join(failed)}", err=True)
        sys.exit(1)


def _variant_files(variants: Path) -> dict[Path, str]:
    """The guidance variants in a folder (`*.md`, `*.txt`) and their texts; each file's
    stem becomes an arm, so it must be a safe arm name like any in a config."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from ._io import MAX_TEXT_BYTES, read_text_file
    from .suite import case_id_problem

    if not variants.is_dir():
        raise InputError("--variants must be a folder of guidance files (*.md or *.txt)", variants)
    files = sorted(p for p in variants.iterdir() if p.is_file() and p.suffix in (".md", ".txt"))
    if not files:
        raise InputError("no guidance variants (*.md or *.txt) in the folder", variants)
    names = [p.stem for p in files]
    if CONTROL in names:
        raise InputError(f"a variant may not be called {CONTROL!r}: that is the no-guidance arm", variants)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"two variant files share the name {dupes[0]!r}", variants)
    texts = {}
    for p in files:
        problem = case_id_problem(p.stem)
        if problem:
            raise InputError(f"the variant's name {p.stem!r} cannot name an arm: {problem}", p)
        texts[p] = read_text_file(p, limit=MAX_TEXT_BYTES)  # UTF-8, size-limited, empty refused
    return texts


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
    allow_private_data: bool,
) -> None:
    """Settle the wording of one piece of guidance: run every variant in VARIANTS and a
    no-guidance control on UNIT's cases, REPS fresh-context repetitions each, grade,
    and render the micro_test notebook. Prints the report and its conclusion."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from . import reports
    from .grading import grade_run, judge_endpoint
    from .loader import load_suite
    from .records import Arm
    from .report_index import read_sidecar
    from .runner import run_suite

    if reps < MIN_REPS:
        raise InputError(f"--reps {reps}: a micro-test needs at least {MIN_REPS} repetitions per variant")
    if flag_pattern:
        # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
        import regex

        try:
            regex.compile(flag_pattern)
        except regex.error as exc:
            raise InputError(f"--flag-pattern does not compile: {exc}") from None
    files = _variant_files(Path(variants))
    suite = load_suite(unit)
    if "guidance" not in suite.config.template + (suite.config.system or ""):
        raise InputError(
            "no template of the suite uses ${guidance}: the variants would not reach the model",
            Path(unit) / "config.json",
            json_path="$.template",
        )
    arms = (Arm(name=CONTROL),) + tuple(
        Arm(name=p.stem, guidance_file=str(p.resolve()), guidance=text) for p, text in files.items()
    )
    raw = dict(suite.config.raw)
    raw["arms"] = [{"name": CONTROL}] + [{"name": p.stem, "guidance": str(p.resolve())} for p in files]
    config = dataclasses.replace(suite.config, arms=arms, raw=raw)
    suite = dataclasses.replace(suite, config=config)
    if any(c.judged for c in suite.cases):
        judge_endpoint(suite, judge_base_url)  # no judge URL: refused now, not after paying for the run
    result = run_suite(
        suite,
        arms=[a.name for a in arms],
        k=reps,
        runs_dir=runs_dir,
        base_url=base_url,
        progress=not no_progress,
        allow_private_data=allow_private_data,
    )
    grade_run(result.path, suite, judge_base_url=judge_base_url)
    marker = {
        "control": CONTROL,
        "variants": {p.stem: str(p.resolve()) for p in files},
        "reps": reps,
        "flag_pattern": flag_pattern,
    }
    (Path(result.path) / reports.MICROTEST_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    rep = reports.report_run(
        result.path,
        reports_dir,
        notebooks=["micro_test"],
        extra_parameters={"micro_test": {"control": CONTROL, "flag_pattern": flag_pattern}},
    )
    nb = rep.notebooks[0]
    click.echo(f"run folder: {result.path}")
    click.echo(f"report: {nb.html}")
    side = read_sidecar(rep.out_dir, "micro_test") or {}
    if side.get("conclusion"):
        click.echo(side["conclusion"])
    click.echo(str(rep.index))
    if not nb.ok:
        click.echo(f"error: the micro_test notebook failed: {nb.error}", err=True)
        sys.exit(1)
    sys.exit(result.exit_code)


COMMANDS: list[click.Command] = [report_cmd, microtest_cmd]
