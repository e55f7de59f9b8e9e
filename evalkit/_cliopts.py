"""Options and helpers shared by several subcommands (not a command module): `--junit`
and `--markdown`, the CI outputs of `gate`, `compare`, `grade --eval-file` and `run`;
`echo_text`, how a command prints text that may carry what an endpoint, a model or a
user's file said."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from ._text import printable


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
    from .ciout import write_junit, write_markdown

    report = make_report()
    if junit is not None:
        write_junit(report, junit)
    if markdown is not None:
        write_markdown(report, markdown)


def echo_text(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Print `text` that may carry endpoint, model or file text (an HTTP error message in a
    verdict's problems, a server's log tail, a reader's warning): each line made
    `printable` (control sequences shown as escapes, never run by the terminal), the
    lines kept as lines."""
    click.echo("\n".join(printable(line) for line in str(text).split("\n")), err=err, nl=nl)
