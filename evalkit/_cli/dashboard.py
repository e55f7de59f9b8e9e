"""CLI subcommand `dashboard` (registered by evalkit._cli.main): the skills dashboard of a
folder, written, or previewed on loopback. Thin over `evalkit.telling.dashboard`."""

from __future__ import annotations

import click

from evalkit._cli.options import echo_text


@click.command("dashboard")
@click.argument("root", required=False, default=".", type=click.Path(file_okay=False))
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the page there (default: ROOT/dashboard.html).",
)
@click.option("--serve", is_flag=True, help="Preview it on 127.0.0.1 (prints the URL) until Ctrl-C or SIGTERM.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="--serve's port (0: a free one)."
)
@click.option(
    "--model",
    default="gpt-4o",
    show_default=True,
    help="Whose tokenizer counts the context cost (as `evalkit tokens`).",
)
@click.option("--last", type=click.IntRange(1, 1000), default=10, show_default=True, help="Runs a trend shows.")
@click.option("--json", "as_json", is_flag=True, help="Also print the catalogue as JSON.")
def dashboard_cmd(root: str, out: str | None, serve: bool, port: int, model: str, last: int, as_json: bool) -> None:
    """The skills dashboard of ROOT (default: the current folder): every skill folder
    (SKILL.md) with its context cost in tokens, the suites that cover it (cases, sets,
    non-activation cases), the latest verdict of its arm against the baseline and the
    trend of the sample pass rate over the last runs, linking each run's report; a skill
    no suite covers is listed as uncovered. One self-contained HTML page; --serve
    previews it on loopback."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    import json

    from evalkit.telling.dashboard import DashboardOptions, ServeOptions, serve_dashboard, write_dashboard

    opts = DashboardOptions(model=model, last=last)
    path, d = write_dashboard(root, out, opts)
    if as_json:
        click.echo(json.dumps(d.to_json(), indent=2, ensure_ascii=False))
    uncovered = sum(1 for s in d.skills if not s.coverage)
    echo_text(
        f"dashboard: {path} ({len(d.skills)} skill(s), {uncovered} uncovered, {len(d.suites)} suite(s))", err=True
    )
    if serve:
        serve_dashboard(
            root, lambda url: click.echo(f"serving the dashboard at {url} (Ctrl-C stops)"), opts, ServeOptions(port)
        )


COMMANDS: list[click.Command] = [dashboard_cmd]
