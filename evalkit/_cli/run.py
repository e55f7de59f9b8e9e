"""CLI subcommands for run (registered by evalkit._cli.main)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalkit._cli.options import (
    batch_from,
    batch_options,
    ci_output_options,
    echo_text,
    emit_ci,
    skills_root_option,
)
from evalkit.foundations import fmt
from evalkit.foundations._text import printable
from evalkit.foundations.errors import InputError
from evalkit.runfolder.runs import stopping_line

if TYPE_CHECKING:  # for annotations only: ciout loads with the command
    from evalkit.foundations.records import Executor, Suite
    from evalkit.running.runner import RunResult
    from evalkit.telling.ciout import CiReport


def ray_executor(address: str | None) -> Executor | None:
    """`--ray [ADDRESS]` as an `Executor` (None without the flag: the config's)."""
    if address is None:
        return None
    from evalkit.foundations.records import Executor  # lazy, as the library is (`evalkit --help` stays fast)

    if not address.strip():
        raise InputError("--ray needs an address: auto, local, HOST:PORT or ray://HOST:PORT")
    return Executor(kind="ray", address=None if address == "local" else address)


@click.command("run")
@click.argument("suite", type=click.Path(file_okay=True, dir_okay=True))
@click.option("--arms", default=None, help="Comma-separated arm names (default: every arm in the config).")
@click.option("--k", "k", type=int, default=None, help="Samples per case and arm (default: the config's k).")
@click.option(
    "--runs-dir", type=click.Path(file_okay=False), default=None, help="Where run folders go (default: SUITE/runs)."
)
@click.option(
    "--base-url",
    envvar="EVALKIT_BASE_URL",
    default=None,
    help="OpenAI-compatible base URL; overrides the config (env: EVALKIT_BASE_URL).",
)
@click.option(
    "--simulator-base-url",
    default=None,
    help="A conversation suite's simulator endpoint; overrides the config (env: EVALKIT_SIMULATOR_BASE_URL).",
)
@click.option(
    "--resume",
    "resume",
    type=click.Path(file_okay=False),
    default=None,
    help="Run only the samples missing from this run folder.",
)
@click.option("--replay-only", is_flag=True, help="Answer only from the response cache; a miss is an error.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the response cache.")
@click.option(
    "--no-sample-files",
    is_flag=True,
    help="Skip samples/<case>/<arm>/sample-<n>.txt (results.jsonl holds the same text).",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option(
    "--ci", "ci", is_flag=True, help="Run under the config's ci.cost_cap_usd (lower than the local cap), as CI does."
)
@click.option(
    "--allow-private-data",
    is_flag=True,
    help="Run even though the privacy scan found personal data or secrets in the suite "
    "(recorded in the run's config.json); by default the run refuses before any call.",
)
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="auto",
    default=None,
    metavar="[ADDRESS]",
    help="Run each sample of a command or python unit as a Ray task: on the cluster `ray start` made here "
    "(no ADDRESS: auto), at HOST:PORT or ray://HOST:PORT, or on a new local one (local). evalkit.running.executors.",
)
@click.option("--lenient-keys", is_flag=True, help="Ignore unknown config keys (a warning) instead of refusing to run.")
@click.option(
    "--plan-only",
    is_flag=True,
    help="Print the AGENT EVAL PLAN block (unit, sets, cases, arms, k, worst-case cost against the cap) and stop: "
    "no call, no run folder.",
)
@click.option(
    "--until-decided/--no-until-decided",
    "until_decided",
    default=None,
    help="Draw cases in the plan's seeded order and stop once the pre-registered sequential test decides "
    "(pass, regression, no-improvement); needs a sequential plan.json. --no-until-decided runs (or, with --resume, "
    "completes) the fixed design. Default: the config's stopping.",
)
@skills_root_option
@batch_options
@ci_output_options
def run_cmd(
    suite: str,
    arms: str | None,
    k: int | None,
    runs_dir: str | None,
    base_url: str | None,
    simulator_base_url: str | None,
    resume: str | None,
    replay_only: bool,
    no_cache: bool,
    no_sample_files: bool,
    no_progress: bool,
    ci: bool,
    allow_private_data: bool,
    lenient_keys: bool,
    plan_only: bool,
    ray_address: str | None,
    until_decided: bool | None,
    skills_root: Path | None,
    junit: Path | None,
    markdown: Path | None,
    batch: bool,
    batch_max_requests: int | None,
    batch_max_bytes: int | None,
    batch_poll_s: float | None,
    no_wait: bool,
) -> None:
    """Sample every case x arm k times under the cost cap; exit 1 when INCOMPLETE.

    With --batch the samples go through the provider's Batch API (evalkit.running.batch); a
    --resume, with --batch or without, first collects the batches a run left open."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.running.runner import RunOptions, run_suite

    options = batch_from(batch, batch_max_requests, batch_max_bytes, batch_poll_s, no_wait)

    arm_list = [a.strip() for a in arms.split(",") if a.strip()] if arms is not None else None
    if arm_list is not None and not arm_list:
        raise InputError("--arms is empty")
    if replay_only and no_cache:
        raise InputError("--replay-only needs the response cache; drop --no-cache")
    target, unknown = _prepared(
        suite, ci=ci, lenient_keys=lenient_keys, arm_list=arm_list, k=k, skills_root=skills_root, base_url=base_url
    )
    if plan_only:
        if unknown:
            raise InputError(f"--arms: no arm named {', '.join(map(repr, unknown))} in the suite")
        return
    opts = RunOptions(
        arms=arm_list,
        k=k,
        runs_dir=runs_dir,
        base_url=base_url or None,
        resume=resume,
        replay_only=replay_only,
        progress=not no_progress,
        cache=not no_cache,
        sample_files=not no_sample_files,
        allow_private_data=allow_private_data,
        batch=options,
        executor=ray_executor(ray_address),
        until_decided=until_decided,
        simulator_base_url=simulator_base_url or None,
    )
    result = run_suite(target, opts)
    _echo_result(result)

    def report() -> CiReport:  # built only when asked for
        # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
        from evalkit.telling.ciout import run_report

        return run_report(result)

    emit_ci(report, junit, markdown)
    sys.exit(result.exit_code)


def _prepared(
    suite: str,
    *,
    ci: bool,
    lenient_keys: bool,
    arm_list: list[str] | None,
    k: int | None,
    skills_root: Path | None = None,
    base_url: str | None = None,
) -> tuple[Suite, list[str]]:
    """The suite as this run takes it (the CI variant under --ci), its lint warnings and
    `evalkit analyze`'s on its prompt files printed, and the seed's plan block shown before
    the first call; with the arms asked for that the suite lacks (the runner's error)."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.conclusions.results import plan_block
    from evalkit.prompts.analyze import analyze_files, suite_prompt_files
    from evalkit.suites.reader import load_suite
    from evalkit.suites.suite import ci_suite

    loaded = load_suite(suite, lenient_keys=lenient_keys, skills_root=skills_root)
    for w in loaded.warnings if lenient_keys else ():
        echo_text(f"warning: {w}", err=True)
    target: Suite = ci_suite(loaded) if ci else loaded
    for f in analyze_files(suite_prompt_files(target))[1]:  # `evalkit analyze` on its prompt files, as lint does
        echo_text(f"warning: {f.file}:{f.line}:{f.col}: analyze {f.severity}: {f.message} [{f.rule}]", err=True)
    unknown = sorted(set(arm_list or ()) - {a.name for a in target.config.arms})
    if not unknown:  # an unknown arm is the runner's error, with its wording
        # the seed's plan, before the first call (seed 001: "present the plan")
        echo_text(plan_block(target, tuple(arm_list) if arm_list else None, k, base_url))
    return target, unknown


def _echo_result(result: RunResult) -> None:
    """What a finished run says: its folder, spend against the cap, each arm's samples,
    model and money, and private data let through by --allow-private-data."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.runfolder.runs import answered_as

    echo_text(f"run folder: {result.path}")
    click.echo(
        f"spend: {fmt.usd(result.spend_usd)} of cap {fmt.usd(result.cap_usd)} "
        f"(avoided by the cache: {fmt.usd(result.avoided_usd)})"
    )
    for arm, c in result.per_arm.items():  # each arm's model and money (its own price, on the one ledger)
        echo_text(
            f"{arm}: {c['samples']} samples, {c['errors']} errors, {c.get('missing', 0)} missing"
            + (f"; model {printable(str(answered_as(c)))}" if c.get("model") else "")
            + (
                f"; paid {fmt.usd(c['paid_usd'])}, avoided {fmt.usd(c.get('avoided_usd', 0.0))}, "
                f"{fmt.usd(c.get('paid_per_case_usd', 0.0))} paid per case"
                if "paid_usd" in c
                else ""
            )
        )
    stopped = stopping_line({"stopping": result.stopping})
    if stopped:
        echo_text(stopped)
    if result.privacy.get("allowed"):
        kinds = ", ".join(f"{kind} {n}" for kind, n in result.privacy.get("by_kind", {}).items())
        click.echo(
            f"privacy: {result.privacy['findings']} finding(s) let through by --allow-private-data "
            f"({kinds}); recorded in config.json",
            err=True,
        )


COMMANDS: list[click.Command] = [run_cmd]
