"""CLI: `evalkit explore` (thin over `evalkit.telling.explorer`)."""

from __future__ import annotations

from pathlib import Path

import click

from evalkit._cli.options import echo_text


@click.command("explore")
@click.argument("run", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--against",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    metavar="OTHER_RUN",
    help="Also write diff.html: RUN against this run, per case and arm, regressions first.",
)
@click.option(
    "--out",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="The folder the pages go to (default: reports/<run>/, beside the run's report).",
)
@click.option(
    "--baseline",
    "baseline_path",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The baseline.json the run's recorded gate read (default: the suite's): its dropped cases are listed.",
)
def explore_cmd(run: Path, against: Path | None, out: Path | None, baseline_path: Path | None) -> None:
    """Write RUN's explorer: one self-contained page (explorer.html) listing every
    sample, with filters kept in the URL fragment (#case=ID&arm=A&outcome=failed), the
    case view and the verdict on top; with --against, diff.html too. Prints each path."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.telling import explorer

    folder = out if out is not None else Path("reports") / run.resolve().name
    page = explorer.write_explorer(run, folder, baseline=baseline_path)
    echo_text(f"{page.path} ({page.rows} samples, {page.bytes / 2**20:.1f} MiB)")
    if against is not None:
        diff = explorer.write_diff(run, against, folder)
        echo_text(f"{diff.path} ({diff.rows} case x arm rows, {diff.bytes / 2**20:.1f} MiB)")


COMMANDS: list[click.Command] = [explore_cmd]
