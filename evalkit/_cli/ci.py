"""CLI subcommand group `ci` (registered by evalkit._cli.main): `ci comment`, the
pull-request comment of the workflow `evalkit init --ci github` writes (thin over
`evalkit.telling.prcomment`), and `ci compare`, its compare step over the arms the run
holds.

Exit statuses of `ci comment`: 0 when the comment was created or updated, or nothing
was to be sent (no `GITHUB_TOKEN`, or the event is no pull request's: it says which);
1 when GitHub refused a call or could not be reached, or the redacted body still showed
a secret (nothing sent); 2 on bad input (no Markdown file exists, a malformed
`GITHUB_REPOSITORY` or event file, a `GITHUB_API_URL` that is neither https nor loopback).
"""

from __future__ import annotations

from pathlib import Path

import click

from evalkit._cli.options import echo_text


@click.group("ci")
def ci_group() -> None:
    """What a CI job does besides run, grade, gate and compare."""


@ci_group.command("comment")
@click.argument("markdown", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--suite", required=True, help="The suite's name (its path): one comment per suite, found by a marker.")
def comment_cmd(markdown: tuple[Path, ...], suite: str) -> None:
    """Post the MARKDOWN files (the gate's and compare's --markdown), redacted, as the
    suite's comment on the pull request, or update the one posted before (found by the
    hidden marker <!-- evalkit:SUITE -->). Reads GITHUB_TOKEN, GITHUB_REPOSITORY,
    GITHUB_EVENT_PATH and GITHUB_API_URL as GitHub Actions sets them; without a token or
    a pull request, nothing is sent."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.telling.prcomment import comment_on_pull_request

    echo_text(comment_on_pull_request(suite, markdown).render())


@ci_group.command("compare")
@click.argument("run", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write JUnit XML here.")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write Markdown here.")
@click.pass_context
def ci_compare_cmd(ctx: click.Context, run: Path, junit: Path | None, markdown: Path | None) -> None:
    """The CI workflow's compare step, with the arms RUN holds (its config.json's, when it
    ran; never names fixed when the workflow was written): two or more arms, the one named
    baseline or control (else the first) against the next, held to the plan, exit 1 on a
    regression; one arm, its conformance verdict, published but advisory (exit 0)."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit._cli.stats import compare_cmd
    from evalkit.runfolder.runload import as_run
    from evalkit.suites.suite_arms import two_arms

    arms = as_run(run).arm_names()
    if len(arms) >= 2:
        baseline, treatment = two_arms(arms)
        click.echo(f"comparing arm {treatment} against arm {baseline} (the run's arms: {', '.join(arms)})", err=True)
        ctx.invoke(
            compare_cmd,
            run=run,
            baseline_arm=baseline,
            treatment_arm=treatment,
            fail_on=("regression",),
            junit=junit,
            markdown=markdown,
        )
    else:
        click.echo(f"one arm ({', '.join(arms) or 'none'}): its conformance verdict, advisory", err=True)
        ctx.invoke(compare_cmd, run=run, single_arm=arms[0] if arms else None, junit=junit, markdown=markdown)


COMMANDS: list[click.Command] = [ci_group]
