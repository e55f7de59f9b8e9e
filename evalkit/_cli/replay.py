"""CLI: `evalkit replay` (thin over `evalkit.telling.replay`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import click


@click.command("replay")
@click.argument("run", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--case",
    "cases",
    multiple=True,
    metavar="ID",
    help="The case to replay (repeatable; default: the cases where the arms differ most).",
)
@click.option("--arms", default=None, metavar="A,B", help="The arms side by side (default: the run's, baseline first).")
@click.option(
    "--index",
    type=click.IntRange(min=0),
    default=None,
    help="The sample index (from 0; default: the first where the arms' grades differ).",
)
@click.option("--width", type=click.IntRange(min=40), default=None, help="Columns (default: the terminal's).")
@click.option(
    "--max-cases",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Without --case: how many cases to replay.",
)
def replay_cmd(
    run: Path, cases: tuple[str, ...], arms: str | None, index: int | None, width: int | None, max_cases: int
) -> None:
    """Replay RUN's trajectories of a case, turn by turn, the arms side by side: what the
    agent sent, the answers, tool calls and results, cost, output and grade."""
    from evalkit.telling import (
        replay,  # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    )

    arm_list = [a for a in (arms or "").split(",") if a] or replay.default_arms(run)
    chosen = list(cases) or replay.pick_cases(run, arm_list, max_cases)
    cols = width or shutil.get_terminal_size((120, 24)).columns
    for i, cid in enumerate(chosen):
        if i:
            click.echo("")
        click.echo(replay.render_text(replay.replay_case(run, cid, arm_list, index), cols), nl=False)


COMMANDS = [replay_cmd]
