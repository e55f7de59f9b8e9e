"""CLI subcommands `analyze` and `tokens` (registered by evalkit._cli.main): static findings
on prompt and skill files, and a skill's context cost. Thin over `evalkit.suites.analyze`
and `evalkit.suites.skills`."""

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


@click.command("tokens")
@click.argument("skill_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option(
    "--model", default="gpt-4o", show_default=True, help="Whose tokenizer (exact when tiktoken has it cached)."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def tokens_cmd(skill_dirs: tuple[str, ...], model: str, as_json: bool) -> None:
    """A skill's context cost in tokens, counted offline: its catalogue entry (name and
    description, in every session), SKILL.md (on activation) and each other file (on
    demand); exact with the model's cached tiktoken encoding, else an upper bound."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    import json

    from evalkit.suites.skills import skill_tokens

    found = [skill_tokens(d, model) for d in skill_dirs]
    if as_json:
        click.echo(json.dumps([t.to_json() for t in found], indent=2, ensure_ascii=False))
    else:
        echo_text("\n\n".join(t.render() for t in found))


COMMANDS: list[click.Command] = [analyze_cmd, tokens_cmd]
