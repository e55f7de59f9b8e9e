"""CLI subcommands `analyze` and `tokens` (registered by evalkit._cli.main): static findings
on prompt and skill files, and a skill's context cost. Thin over `evalkit.prompts.analyze`
and `evalkit.prompts.skills`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from evalkit._cli.options import echo_text
from evalkit.foundations.errors import InputError

if TYPE_CHECKING:  # for annotations only: the judge pass loads with the command
    from evalkit.conclusions.analyze_judge import AnalyzeJudgeOptions


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
@click.option(
    "--judge",
    "use_judge",
    is_flag=True,
    help="After the rules, ask the suite's judge about each file (seed 000's categories), on a ledger under "
    "--max-cost-usd; answers cached, so a re-run costs $0.",
)
@click.option(
    "--suite",
    "suite_path",
    default=None,
    type=click.Path(exists=True),
    help="With --judge: the suite whose judge, judge_price and cost_cap_usd are used (default: the suite "
    "folder among PATHS, when there is one).",
)
@click.option(
    "--judge-base-url",
    default=None,
    envvar="EVALKIT_JUDGE_BASE_URL",
    help="OpenAI-compatible base URL of the judge; overrides the config (env: EVALKIT_JUDGE_BASE_URL).",
)
@click.option("--judge-model", default=None, help="With --judge and no suite: the judge's model.")
@click.option(
    "--judge-price",
    default=None,
    metavar="IN,OUT",
    help="With --judge-model: its price, USD per million input and output tokens.",
)
@click.option(
    "--judge-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="With --judge-model: the environment variable holding its API key.",
)
@click.option(
    "--max-cost-usd",
    type=float,
    default=None,
    help="With --judge: the most this invocation may spend (default: the suite's cost_cap_usd).",
)
@click.option(
    "--judge-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="With --judge: where the judge cache and ledger go (default: SUITE/runs/analyze, else ./runs/analyze).",
)
@click.option(
    "--allow-private-data",
    is_flag=True,
    help="With --judge: send files in which the privacy scan found personal data or secrets.",
)
def analyze_cmd(
    paths: tuple[str, ...],
    fmt: str,
    output: str | None,
    use_judge: bool,
    suite_path: str | None,
    judge_base_url: str | None,
    judge_model: str | None,
    judge_price: str | None,
    judge_key_env: str,
    max_cost_usd: float | None,
    judge_dir: str | None,
    allow_private_data: bool,
) -> None:
    """Find contradictions and hazards in SKILL.md, *.agent.md, *.instructions.md,
    *.prompt.md files (a folder: those under it; a suite folder: its prompt and guidance
    files) before measuring behaviour: missing linked files, conditions nested too deep,
    MUST and MUST NOT on one subject, declared tools with no error path, conflicting
    persona lines; each with file:line:col, severity and a suggested rewrite. With
    --judge, the judge's findings follow, marked `(judge)` and `judge/<category>`. Exit
    1 when there is an error-level finding or the judge pass is INCOMPLETE, else 0; 2 on
    bad input."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.foundations._io import write_atomic
    from evalkit.intake.lint import analyze_paths
    from evalkit.prompts import analyze

    options = _judge_options(
        paths, use_judge, suite_path, judge_base_url, judge_model, judge_price, judge_key_env, max_cost_usd, judge_dir
    )
    if options is not None and allow_private_data:
        import dataclasses  # lazy: only with --judge

        options = dataclasses.replace(options, allow_private_data=True)
    files, found = analyze_paths(paths)
    judged = None
    if options is not None:
        from evalkit.conclusions.analyze_judge import judge_files  # lazy: the judge pass loads the openai client

        judged = judge_files(files, options)
        found = [*found, *judged.findings]
    summary = judged.to_json() if judged is not None else None
    if fmt == "json":
        text = analyze.render_json(files, found, summary)
    elif fmt == "sarif":
        text = analyze.render_sarif(found, summary)
    else:
        text = analyze.render_text(found)
    if output is not None:
        write_atomic(output, text)
    elif text:
        echo_text(text, nl=False)
    errors = sum(f.severity == "error" for f in found)
    echo_text(f"analyzed {len(files)} file(s): {errors} error(s), {len(found) - errors} warning(s)", err=True)
    if judged is not None:
        for note in judged.notes:
            echo_text(f"judge note: {note}", err=True)
        echo_text(judged.render(), err=True)
        if judged.error:
            echo_text(f"error: judge INCOMPLETE: {judged.error}", err=True)
            sys.exit(1)
    sys.exit(1 if errors else 0)


def _judge_options(
    paths: tuple[str, ...],
    use_judge: bool,
    suite_path: str | None,
    judge_base_url: str | None,
    judge_model: str | None,
    judge_price: str | None,
    judge_key_env: str,
    max_cost_usd: float | None,
    judge_dir: str | None,
) -> AnalyzeJudgeOptions | None:
    """The judge `--judge` asks (None without it): the suite's, or the one the flags
    name; every refusal (no judge, no URL, no key, no cap) before any file is read."""
    if not use_judge:
        given = [
            n
            for n, v in (
                ("--suite", suite_path),
                ("--judge-model", judge_model),
                ("--judge-price", judge_price),
                ("--max-cost-usd", max_cost_usd),
                ("--judge-dir", judge_dir),
            )
            if v is not None
        ]
        if given:
            raise InputError(f"{', '.join(given)} only apply with --judge")
        return None
    # lazy: the judge's library loads only with --judge (`evalkit analyze` alone stays fast)
    from pathlib import Path

    from evalkit.conclusions import analyze_judge
    from evalkit.foundations.layout import CONFIG_FILE
    from evalkit.foundations.records import Price
    from evalkit.suites.reader import load_suite

    if judge_model is not None:
        if suite_path is not None:
            raise InputError("give either --suite or --judge-model, not both")
        if judge_price is None:
            raise InputError(
                "--judge-model needs --judge-price IN,OUT (USD per million tokens): no call without a price"
            )
        try:
            p_in, p_out = (float(x) for x in judge_price.split(","))
        except ValueError:
            raise InputError(f"--judge-price must be IN,OUT (two numbers), got {judge_price!r}") from None
        if not (p_in >= 0 and p_out >= 0):
            raise InputError(f"--judge-price must be two non-negative numbers, got {judge_price!r}")
        return analyze_judge.options_from_flags(
            judge_model,
            judge_base_url,
            Price(p_in, p_out),
            max_cost_usd=max_cost_usd,
            api_key_env=judge_key_env,
            state_dir=judge_dir,
        )
    if suite_path is None:
        suites = [p for p in paths if Path(p).is_dir() and (Path(p) / CONFIG_FILE).is_file()]
        if len(suites) != 1:
            raise InputError(
                "--judge needs a judge: --suite SUITE (its judge, judge_price and cost_cap_usd), one suite folder "
                "among PATHS, or --judge-model with --judge-base-url and --judge-price"
            )
        suite_path = suites[0]
    return analyze_judge.options_from_suite(
        load_suite(suite_path, lenient_keys=True),
        judge_base_url=judge_base_url,
        max_cost_usd=max_cost_usd,
        state_dir=judge_dir,
    )


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

    from evalkit.prompts.skills import skill_tokens

    found = [skill_tokens(d, model) for d in skill_dirs]
    if as_json:
        click.echo(json.dumps([t.to_json() for t in found], indent=2, ensure_ascii=False))
    else:
        echo_text("\n\n".join(t.render() for t in found))


COMMANDS: list[click.Command] = [analyze_cmd, tokens_cmd]
