"""Options shared by several subcommands (not a command module): `--junit` and
`--markdown`, the CI outputs of `gate`, `compare`, `grade --eval-file` and `run`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def ci_output_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--junit PATH` and `--markdown PATH` (passed as `junit` and `markdown`)."""
    f = click.option(
        "--markdown",
        "markdown",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Also write a Markdown summary (verdict, gate table, plan check, spend, top failures) "
        "for a PR comment; appends when PATH is $GITHUB_STEP_SUMMARY.",
    )(f)
    f = click.option(
        "--junit",
        "junit",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Also write JUnit XML: one testcase per case or gate check, failures with their "
        "reason, INCOMPLETE as an error.",
    )(f)
    return f


def emit_ci(make_report: Callable[[], Any], junit: Path | None, markdown: Path | None) -> None:
    """Build the `evalkit.ciout.CiReport` (only when asked for) and write it."""
    if junit is None and markdown is None:
        return
    # lazy: CI outputs are built only when --junit or --markdown asks for them
    from .ciout import write_junit, write_markdown

    report = make_report()
    if junit is not None:
        write_junit(report, junit)
    if markdown is not None:
        write_markdown(report, markdown)
