"""CLI subcommand `ingest` (registered by evalkit._cli.main)."""

from __future__ import annotations

from pathlib import Path

import click

from evalkit._cli.options import echo_text
from evalkit.conclusions import ingest as _ingest
from evalkit.foundations.layout import SUMMARY_MD


@click.command("ingest")
@click.argument("source", type=click.Path(path_type=Path))
@click.option(
    "--to",
    "to",
    required=True,
    type=click.Path(path_type=Path),
    help="The run folder to write (e.g. runs/inspect-before).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(_ingest.FORMATS),
    default=None,
    help="Source format; detected from the file when omitted.",
)
@click.option("--arm", default=None, help="Arm name for these results (default: the model or file name).")
@click.option("--into", is_flag=True, help="Add the source as another arm of the existing ingested run --to.")
@click.option(
    "--threshold",
    type=float,
    default=None,
    help="inspect-ai: pass when a numeric score value is >= this (needed for values other than 0/1, C/I).",
)
@click.option(
    "--scorer",
    default=None,
    help="inspect-ai: which scorer decides pass/fail; lm-eval: which metric (default: the first).",
)
@click.option(
    "--filter",
    "filter_name",
    default=None,
    help="lm-eval: the filter whose answers are read (default: the file's first).",
)
@click.option(
    "--eval-file",
    type=click.Path(path_type=Path),
    default=None,
    help="agent-evals: the evals.json that goes with an outputs folder.",
)
@click.option(
    "--compat-wildcards",
    is_flag=True,
    help="agent-evals: treat * and ? in contains as wildcards, as that harness does.",
)
def ingest_cmd(
    source: Path,
    to: Path,
    fmt: str | None,
    arm: str | None,
    into: bool,
    threshold: float | None,
    scorer: str | None,
    filter_name: str | None,
    eval_file: Path | None,
    compat_wildcards: bool,
) -> None:
    """Turn another tool's results (inspect-ai log, promptfoo JSON, lm-eval samples,
    tau-bench trials, agent-evals outputs) into an evalkit run folder that report,
    compare and gate read."""
    dest = _ingest.ingest(
        source,
        to,
        fmt=fmt,
        into=into,
        arm=arm,
        threshold=threshold,
        scorer=scorer,
        filter_name=filter_name,
        eval_file=eval_file,
        compat_wildcards=compat_wildcards,
    )
    echo_text(str(dest))
    with open(dest / SUMMARY_MD, encoding="utf-8") as fh:
        first = fh.readline().strip()
    if first.startswith("INCOMPLETE"):
        echo_text(first, err=True)  # the run folder is written; gate and compare will refuse it as incomplete


COMMANDS: list[click.Command] = [ingest_cmd]
