"""Options and helpers shared by several subcommands (not a command module): `--junit`
and `--markdown`, the CI outputs of `gate`, `compare`, `grade --eval-file` and `run`;
`--batch` with its limits, for `run` and `grade`; `echo_text`, how a command prints text
that may carry what an endpoint, a model or a user's file said."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from evalkit.foundations._text import printable
from evalkit.foundations.errors import InputError


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


skills_root_option = click.option(
    "--skills-root",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="EVALKIT_SKILLS_ROOT",
    default=None,
    help="Where a Vally spec's skill folder is (a folder of <skill>/SKILL.md); default: plugins/*/skills/ of "
    "the repository holding tests/skills/<skill>/eval.yaml (env: EVALKIT_SKILLS_ROOT).",
)


def emit_ci(make_report: Callable[[], Any], junit: Path | None, markdown: Path | None) -> None:
    """Build the `evalkit.telling.ciout.CiReport` (only when asked for) and write it."""
    if junit is None and markdown is None:
        return
    # lazy: CI outputs are built only when --junit or --markdown asks for them
    from evalkit.telling.ciout import write_junit, write_markdown

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


def batch_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add `--batch`, `--batch-max-requests`, `--batch-max-bytes`, `--batch-poll-s` and
    `--no-wait` (passed as `batch`, `batch_max_requests`, ...): `batch_from` reads them.
    Their defaults live in `evalkit.running.batch`, imported only when a command runs."""
    f = click.option(
        "--no-wait",
        is_flag=True,
        help="With --batch: submit the batches and exit (INCOMPLETE, exit 1); --resume / grading again collects them.",
    )(f)
    f = click.option(
        "--batch-poll-s", type=float, default=None, help="With --batch: seconds between status checks (default 15)."
    )(f)
    f = click.option(
        "--batch-max-bytes",
        type=int,
        default=None,
        help="With --batch: the most bytes in one batch input file (default 200,000,000: OpenAI's limit).",
    )(f)
    f = click.option(
        "--batch-max-requests",
        type=int,
        default=None,
        help="With --batch: the most requests in one batch (default 50,000: OpenAI's limit). Each batch is "
        "reserved whole under the cap, so smaller batches let more of a run fit.",
    )(f)
    f = click.option(
        "--batch",
        "batch",
        is_flag=True,
        help="Send the calls through the provider's Batch API (files + batches; about half the price, "
        "results within 24 h) under the same cost cap, at the config's batch price.",
    )(f)
    return f


def batch_from(
    batch: bool, batch_max_requests: int | None, batch_max_bytes: int | None, batch_poll_s: float | None, no_wait: bool
) -> Any:
    """The `evalkit.running.batch.BatchOptions` the `batch_options` flags ask for, or None
    without `--batch` (a limit or `--no-wait` without it is an input error)."""
    given: dict[str, object] = {"--batch-max-requests": batch_max_requests, "--batch-max-bytes": batch_max_bytes}
    given.update({"--batch-poll-s": batch_poll_s, "--no-wait": no_wait or None})
    if not batch:
        changed = [name for name, v in given.items() if v is not None]
        if changed:
            raise InputError(f"{', '.join(changed)} only apply with --batch")
        return None
    from evalkit.running.batch import BatchOptions  # lazy: evalkit.running.batch loads openai

    limits: dict[str, Any] = {"max_requests": batch_max_requests, "max_bytes": batch_max_bytes, "poll_s": batch_poll_s}
    return BatchOptions(wait=not no_wait, **{k: v for k, v in limits.items() if v is not None})
