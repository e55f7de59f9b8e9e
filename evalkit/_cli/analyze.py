"""CLI subcommand `analyze` (registered by evalkit._cli.main): static findings on prompt
and skill files. Thin over `evalkit.suites.analyze`."""

from __future__ import annotations

import sys

import click

from evalkit._cli.options import echo_text


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "sarif"]),
    default="text",
    show_default=True,
    help="text: `file:line:col: severity: message [rule]` lines (a problem matcher reads them); json; SARIF 2.1.0.",
)
@click.option("--output", "output", type=click.Path(dir_okay=False), default=None, help="Write there, not stdout.")
def analyze_cmd(paths: tuple[str, ...], fmt: str, output: str | None) -> None:
    """Find contradictions and hazards in SKILL.md, *.agent.md, *.instructions.md,
    *.prompt.md files (a folder: those under it; a suite folder: its prompt and guidance
    files) before measuring behaviour: missing linked files, conditions nested too deep,
    MUST and MUST NOT on one subject, declared tools with no error path, conflicting
    persona lines; each with file:line:col, severity and a suggested rewrite. Exit 1 when
    there is an error-level finding, else 0."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.foundations._io import write_atomic
    from evalkit.suites import analyze
    from evalkit.suites.loader import analyze_paths

    files, found = analyze_paths(paths)
    if fmt == "json":
        text = analyze.render_json(files, found)
    elif fmt == "sarif":
        text = analyze.render_sarif(found)
    else:
        text = analyze.render_text(found)
    if output is not None:
        write_atomic(output, text)
    elif text:
        echo_text(text, nl=False)
    errors = sum(f.severity == "error" for f in found)
    echo_text(f"analyzed {len(files)} file(s): {errors} error(s), {len(found) - errors} warning(s)", err=True)
    sys.exit(1 if errors else 0)


COMMANDS: list[click.Command] = [analyze_cmd]
