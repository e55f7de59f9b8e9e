"""CLI subcommands `batch status RUN` and `batch cancel RUN` (registered by evalkit._cli.main):
the provider batches of a run folder (`evalkit.running.batch`)."""

from __future__ import annotations

import json

import click


@click.group("batch")
def batch_group() -> None:
    """The provider batches of a run (`evalkit run --batch`, `evalkit grade --batch`)."""


@batch_group.command("status")
@click.argument("run", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per batch instead of a table.")
@click.option("--offline", is_flag=True, help="Show what batches.json records; ask the provider nothing.")
def status_cmd(run: str, as_json: bool, offline: bool) -> None:
    """Each batch of RUN: its state, the provider's status and request counts (asked now
    for the batches still open), and its reservation."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.running.batch import batch_status, describe

    rows = batch_status(run, ask=not offline)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))  # ASCII: safe on a terminal
    else:
        click.echo(describe(rows), nl=False)


@batch_group.command("cancel")
@click.argument("run", type=click.Path(file_okay=False))
def cancel_cmd(run: str) -> None:
    """Ask the provider to cancel RUN's open batches. Their partial results are collected,
    and their reservations closed, by the next `evalkit run --resume RUN` (or `evalkit
    grade RUN`, for the judge's), or by the run still polling them."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.running.batch import batch_cancel, describe

    rows = batch_cancel(run)
    click.echo(describe(rows), nl=False)
    if any(r["state"] == "submitted" for r in rows):
        click.echo("collect what they did with: evalkit run --resume RUN (judge batches: evalkit grade RUN)", err=True)


COMMANDS: list[click.Command] = [batch_group]
