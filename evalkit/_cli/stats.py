"""CLI: `compare`, `verdict`, `power`, `gate`, `baseline accept`, `noise` (thin over
`evalkit.conclusions.verdicts`, `evalkit.numbers.plans` and `evalkit.conclusions.gates`; each imported when its command
runs, so `evalkit --help` does not load scipy).

Exit statuses: `compare` and `verdict` exit 0 whenever they produced a verdict (the
verdict is the output, not an error); `--fail-on KIND` (repeatable: regression,
inconclusive, no-improvement) makes them exit 1 when the verdict is one of those, for
CI. `gate` exits 1 when the gate fails. `power`, `baseline accept` and `noise` exit 0
(`noise --strict` exits 1 when a threshold sits inside the noise). Bad input exits 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from evalkit._cli.options import ci_output_options, echo_text, emit_ci
from evalkit.foundations.errors import EvalkitError

if TYPE_CHECKING:  # for annotations only: ciout loads with the command
    from evalkit.telling.ciout import CiReport

FAIL_KINDS = ("regression", "inconclusive", "no-improvement")


def _emit(obj: dict[str, Any], as_json: bool, text: str) -> None:
    from evalkit.foundations._io import jsonable  # NaN and infinities become null, numpy scalars plain numbers

    if as_json:
        click.echo(json.dumps(jsonable(obj), indent=2))  # ASCII: control characters escaped
    else:
        echo_text(text)  # a verdict's problems quote endpoint error messages


def _fail_on(kind: str, fail_on: tuple[str, ...]) -> None:
    if kind in fail_on:
        raise SystemExit(1)


@click.command("compare")
@click.argument("run", type=click.Path(file_okay=False, path_type=Path))
@click.option("--baseline", "baseline_arm", default=None, help="Name of the baseline arm.")
@click.option("--treatment", "treatment_arm", default=None, help="Name of the treatment arm.")
@click.option(
    "--arm",
    "single_arm",
    default=None,
    help="One arm's single-arm conformance verdict (the default for a run with one arm).",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, 1),
    default=None,
    help="Conformance: a trial meets it when this share of its checks passed (default: its grade passed).",
)
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Pre-registered plan.json (default: the suite's plan.json when there is one).",
)
@click.option("--alpha", type=float, default=None, help="Significance level (default: the plan's, else 0.05).")
@click.option(
    "--judge",
    "judge",
    type=click.Choice(["direct", "pairwise"]),
    default=None,
    help="What the verdict rests on: each sample's pass/fail (direct) or the pairwise judge's tally "
    "(pairwise.jsonl); default: the suite's verdict_judge, else direct.",
)
@click.option(
    "--control",
    default=None,
    help="More than two arms: compare this arm against each other arm (default: every pair); Holm-corrected.",
)
@click.option("--fail-on", multiple=True, type=click.Choice(FAIL_KINDS), help="Exit 1 on this verdict (repeatable).")
@click.option(
    "--require-plan",
    is_flag=True,
    help="Exit 1 unless the run followed a pre-registered plan (for CI: no exploratory or cut-short verdict passes).",
)
@click.option(
    "--unit",
    "unit",
    type=click.Choice(["case", "trial"]),
    default="case",
    show_default=True,
    help="trial: also show the SKRAFT count (every trial, stimuli x runs, a unit; floor 5) beside the "
    "case-level verdict, labelled as such; the verdict and verdicts.json stay case-level unless the suite "
    'sets "verdict_unit": "trial" (then the SKRAFT count decides and the case-level verdict is beside it).',
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@ci_output_options
def compare_cmd(
    run: Path,
    baseline_arm: str | None,
    treatment_arm: str | None,
    single_arm: str | None,
    threshold: float | None,
    plan_path: Path | None,
    alpha: float | None,
    judge: str | None,
    control: str | None,
    fail_on: tuple[str, ...],
    require_plan: bool,
    unit: str,
    as_json: bool,
    junit: Path | None,
    markdown: Path | None,
) -> None:
    """Verdict of a graded RUN: two arms, the exact sign test, one vote per case, on each
    sample's pass/fail or on the pairwise judge (--judge); more than two arms, every
    pair's verdict (or --control against each other arm), Holm-corrected across the
    pairs, in one table (with --baseline and --treatment, that pair in full too); one arm
    (a suite with no baseline, or --arm), the conformance tally: pass, regression or
    inconclusive. Recorded in the run's verdicts.json."""
    # lazy: the statistics (scipy) load only when the command runs
    from evalkit.conclusions.compare import compare
    from evalkit.conclusions.gates import run_metrics
    from evalkit.conclusions.verdicts import conformance_verdict, record_verdicts
    from evalkit.runfolder.runload import as_run

    loaded = as_run(run)
    if single_arm is None and (len(loaded.arm_names()) > 2 or control is not None):
        _compare_many(
            loaded, baseline_arm, treatment_arm, control, plan_path, alpha, judge, fail_on, as_json, junit, markdown
        )
        return
    if single_arm is not None or (baseline_arm is None and treatment_arm is None):
        if baseline_arm or treatment_arm:
            raise click.UsageError("--arm is a single-arm verdict: give it without --baseline and --treatment")
        arms = loaded.arm_names()
        if single_arm is None and len(arms) != 1:
            raise click.UsageError(
                f"the run has arms {', '.join(arms)}: name --baseline and --treatment, or --arm for one arm's "
                "conformance verdict"
            )
        cv = conformance_verdict(loaded, threshold, arm=single_arm)
        record_verdicts(loaded.path, conformance=cv)
        _emit(cv.to_json(), as_json, cv.render())

        def conformance() -> CiReport:  # built only when asked for
            # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
            from evalkit.telling.ciout import conformance_report

            return conformance_report(cv, loaded, fail_on)

        emit_ci(conformance, junit, markdown)
        _fail_on(cv.kind, fail_on)
        return
    if baseline_arm is None or treatment_arm is None:
        raise click.UsageError("a two-arm verdict needs both --baseline and --treatment")

    v = compare(loaded, baseline_arm, treatment_arm, plan=plan_path, alpha=alpha, judge=judge)
    note = f"plan: {v.plan_check.plan}" if v.plan_check is not None and plan_path is None else None
    text = v.render() + (f"\n{note}" if note else "")
    out = v.to_json()
    if unit == "trial" and v.beside is None:  # beside the case-level verdict, never instead of it
        from evalkit.conclusions.verdicts import skraft_trial_verdict  # lazy: scipy, only for this option

        sv = skraft_trial_verdict(loaded, baseline_arm, treatment_arm, alpha=v.alpha)
        text += (
            "\n\nSKRAFT count (each trial a unit: trials = stimuli x runs, floor 5; on each sample's pass/fail; "
            "for comparison with a SKRAFT verdict, NOT evalkit's verdict):\n" + sv.render()
        )
        out = {**out, "skraft_trial_count": sv.to_json()}
    _emit(out, as_json, text)

    def report() -> CiReport:  # built only when asked for
        # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
        from evalkit.telling.ciout import compare_report

        return compare_report(
            v, loaded, run_metrics(loaded, arm=baseline_arm), run_metrics(loaded, arm=treatment_arm), fail_on
        )

    emit_ci(report, junit, markdown)
    if require_plan and (v.plan_check is None or not v.plan_check.ok):
        click.echo(
            "error: --require-plan: "
            + ("no pre-registered plan" if v.plan_check is None else "the run did not follow its plan"),
            err=True,
        )
        raise SystemExit(1)
    _fail_on(v.kind, fail_on)


def _compare_many(
    loaded: Any,
    baseline_arm: str | None,
    treatment_arm: str | None,
    control: str | None,
    plan_path: Path | None,
    alpha: float | None,
    judge: str | None,
    fail_on: tuple[str, ...],
    as_json: bool,
    junit: Path | None = None,
    markdown: Path | None = None,
) -> None:
    """`compare` on more than two arms (`compare.compare_many`): the table, and the pair
    asked for (--baseline, --treatment) in full (its corrected verdict is what --junit
    and --markdown report); --fail-on reads that pair's corrected verdict, or every
    pair's when none is asked for."""
    from evalkit.conclusions.compare import compare_many  # lazy: the statistics (scipy) load only when the command runs

    if (baseline_arm is None) != (treatment_arm is None):
        raise click.UsageError("name both --baseline and --treatment for the pair to show in full, or neither")
    if baseline_arm is None and (junit is not None or markdown is not None):
        raise click.UsageError("--junit and --markdown report one pair: name it with --baseline and --treatment")
    matrix = compare_many(loaded, control=control, plan=plan_path, alpha=alpha, judge=judge)
    text = matrix.render()
    out: dict[str, Any] = matrix.to_json()
    kinds = [v.kind for v in matrix.pairs]
    if baseline_arm is not None and treatment_arm is not None:
        asked = matrix.pair(baseline_arm, treatment_arm)
        if asked is None:
            raise click.UsageError(
                f"{baseline_arm} vs {treatment_arm} is not one of the pairs compared "
                f"({', '.join(f'{v.baseline_arm} vs {v.treatment_arm}' for v in matrix.pairs)})"
            )
        text += f"\n\n{baseline_arm} vs {treatment_arm} (Holm-corrected verdict):\n" + asked[0].render()
        out["asked"] = {"baseline": baseline_arm, "treatment": treatment_arm}
        kinds = [asked[0].kind]
        pair_verdict = asked[0]

        def report() -> CiReport:  # built only when asked for
            # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
            from evalkit.conclusions.gates import run_metrics
            from evalkit.telling.ciout import compare_report

            return compare_report(
                pair_verdict,
                loaded,
                run_metrics(loaded, arm=baseline_arm),
                run_metrics(loaded, arm=treatment_arm),
                fail_on,
            )

        emit_ci(report, junit, markdown)
    _emit(out, as_json, text)
    for kind in kinds:
        _fail_on(kind, fail_on)


@click.command("verdict")
@click.option("--wins", type=click.IntRange(min=0), required=True)
@click.option("--ties", type=click.IntRange(min=0), required=True)
@click.option("--losses", type=click.IntRange(min=0), required=True)
@click.option("--errored", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--trials",
    type=click.IntRange(min=0),
    default=None,
    help="Trials run (default: the tally's sum); more than the tally means unmatched trials.",
)
@click.option("--alpha", type=float, default=0.05, show_default=True)
@click.option("--fail-on", multiple=True, type=click.Choice(FAIL_KINDS), help="Exit 1 on this verdict (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def verdict_cmd(
    wins: int,
    ties: int,
    losses: int,
    errored: int,
    trials: int | None,
    alpha: float,
    fail_on: tuple[str, ...],
    as_json: bool,
) -> None:
    """Verdict for a win/tie/loss tally from elsewhere (exact sign test, ties dropped)."""
    # lazy: the statistics (scipy) load only when the command runs
    from evalkit.conclusions.verdicts import verdict_from_tally

    v = verdict_from_tally(wins, ties, losses, errored, trials, alpha=alpha)
    _emit(v.to_json(), as_json, v.render())
    _fail_on(v.kind, fail_on)


@click.command("power")
@click.option("--win-rate", type=float, required=True, help="Expected share of non-tied units the treatment wins.")
@click.option("--tie-rate", type=float, default=0.0, show_default=True, help="Expected share of tied units.")
@click.option("--alpha", type=float, required=True)
@click.option("--power", "power_", type=float, required=True)
@click.option(
    "--write",
    "write_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Record the plan in this suite folder (evals/<unit>/plan.json).",
)
@click.option("--sequential", is_flag=True, help="Plan a sequential sign test (stops once settled).")
@click.option(
    "--arms",
    "n_arms",
    type=click.IntRange(min=2),
    default=2,
    show_default=True,
    help="Arms compared: every pair (or --control against each other), Holm-corrected.",
)
@click.option("--control", "with_control", is_flag=True, help="With --arms: one control arm against each other arm.")
@click.option("--force", is_flag=True, help="With --write: replace an existing plan.json (a new pre-registration).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def power_cmd(
    win_rate: float,
    tie_rate: float,
    alpha: float,
    power_: float,
    write_dir: Path | None,
    sequential: bool,
    n_arms: int,
    with_control: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Discordant pairs and cases the exact sign test needs (exact and approximate); with
    --arms N, for every pair of N arms (or --control against each other) under Holm's
    correction.

    With --write, the plan is pre-registered in the suite; an existing plan.json is never
    replaced without --force, and a suite with fewer cases than the plan needs is warned of."""
    # lazy: the statistics (scipy) load only when the command runs
    from evalkit.numbers.plans import load_plan, plan_power, suite_shortfall, write_plan

    n_cases = _suite_cases(write_dir) if write_dir is not None else None
    plan = plan_power(
        win_rate,
        tie_rate,
        alpha,
        power_,
        sequential=sequential,
        arms=n_arms,
        control=with_control,
        suite_cases=n_cases if sequential else None,  # a sequential design chosen to fit the suite it is for
    )
    text = plan.render()
    if write_dir is not None:
        path = write_plan(plan, write_dir, force=force)
        plan = load_plan(path)
        text += f"\nplan written: {path}"
        short = suite_shortfall(plan, n_cases) if n_cases is not None else None
        if short:
            echo_text(f"warning: {short}", err=True)
    _emit(plan.to_json(), as_json, text)


def _suite_cases(suite_dir: Path) -> int | None:
    """The number of cases in the suite a plan is written to; None when it cannot be read
    (`evalkit lint` says why)."""
    from evalkit.suites.reader import load_suite  # lazy: the suite loader loads only when a plan is written

    try:
        return len(load_suite(suite_dir, lenient_keys=True).cases)
    except EvalkitError:
        return None


@click.command("gate")
@click.argument("run", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--baseline",
    "baseline_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="evals/<unit>/baseline.json",
)
@click.option("--arm", default=None, help="Arm to gate (default: the baseline's, or the run's only arm).")
@click.option("--runner-exit", type=int, default=None, help="The runner's exit status, when CI has it.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@ci_output_options
def gate_cmd(
    run: Path,
    baseline_path: Path,
    arm: str | None,
    runner_exit: int | None,
    as_json: bool,
    junit: Path | None,
    markdown: Path | None,
) -> None:
    """Gate RUN against an accepted baseline; exit 1 on failure. Never writes a baseline;
    the result goes to the run's verdicts.json."""
    # lazy: the statistics (scipy) load only when the command runs
    from evalkit.conclusions.gates import gate_run, gate_run_metrics
    from evalkit.runfolder.runload import as_run

    res = gate_run(run, baseline_path, arm=arm, runner_exit=runner_exit)
    _emit(res.to_json(), as_json, res.render())

    def report() -> CiReport:  # built only when asked for
        # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
        from evalkit.telling.ciout import gate_report

        if not res.read_rates:
            return gate_report(res)
        loaded = as_run(run)
        return gate_report(res, loaded, gate_run_metrics(loaded, baseline_path, arm=arm))

    emit_ci(report, junit, markdown)
    if not res.passed:
        raise SystemExit(1)


@click.group("baseline")
def baseline_group() -> None:
    """Accepted baselines (a deliberate act, separate from any gate)."""


@baseline_group.command("accept")
@click.argument("run", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--to",
    "suite_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Suite folder (default: the run's suite).",
)
@click.option("--arm", default=None, help="Arm to accept (default: the run's only arm).")
def baseline_accept_cmd(run: Path, suite_dir: Path | None, arm: str | None) -> None:
    """Write baseline.json and baseline-summary.md from a complete, graded RUN."""
    # lazy: the statistics (scipy) load only when the command runs
    from evalkit.conclusions.gates import accept_baseline

    bj, bs = accept_baseline(run, suite_dir, arm=arm)
    echo_text(f"wrote {bj}\nwrote {bs}\ncommit both in a change of their own, reviewed by someone else")


@click.command("noise")
@click.argument("run_a", type=click.Path(file_okay=False, path_type=Path))
@click.argument("run_b", type=click.Path(file_okay=False, path_type=Path))
@click.option("--arm", default=None, help="Arm to compare (default: the runs' only arm).")
@click.option("--strict", is_flag=True, help="Exit 1 when a threshold sits inside the noise.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def noise_cmd(run_a: Path, run_b: Path, arm: str | None, strict: bool, as_json: bool) -> None:
    """Do the gate thresholds sit above the noise between two runs of one config?"""
    # lazy: the statistics (scipy) load only when the command runs
    from evalkit.conclusions.gates import noise

    rep = noise(run_a, run_b, arm=arm)
    _emit(rep.to_json(), as_json, rep.render())
    if strict and not rep.ok:
        raise SystemExit(1)


COMMANDS: list[click.Command] = [compare_cmd, verdict_cmd, power_cmd, gate_cmd, baseline_group, noise_cmd]
