"""CLI subcommands for grade and judge (registered by evalkit._cli.main).

`evalkit grade RUN [--judge-base-url URL] [--judge-version vN] [--pairwise BASE,TREAT]
[--labels FILE] [--allow-uncalibrated-judge]` grades a run folder; `evalkit grade
--eval-file evals.json --outputs DIR -k 5 [--compat-wildcards]` grades an agent-evals
outputs folder as its harness does. `evalkit judge sample RUN -n 20 --to FILE` draws
judged items into a label file, `evalkit judge label FILE` writes the labelling notebook
for it, `evalkit judge calibrate RUN` records the judge's agreement with the labels in
the suite's `judge/calibration.json`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalkit._cli.options import batch_from, batch_options, ci_output_options, echo_text, emit_ci
from evalkit.foundations import fmt
from evalkit.foundations._text import printable
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import GRADES, GRADES_SUMMARY
from evalkit.foundations.records import CurvePoint, GradesSummary

if TYPE_CHECKING:  # for annotations only: ciout loads with the command
    from evalkit.conclusions.grading import GradeResult
    from evalkit.telling.ciout import CiReport


@click.command("grade")
@click.argument("run", required=False, type=click.Path(file_okay=False))
@click.option(
    "--judge-base-url",
    default=None,
    envvar="EVALKIT_JUDGE_BASE_URL",
    help="OpenAI-compatible base URL of the judge; overrides the config (env: EVALKIT_JUDGE_BASE_URL).",
)
@click.option("--judge-version", default=None, help="Pin the judge files version (vN); default: the highest.")
@click.option(
    "--pairwise",
    default=None,
    metavar="BASELINE,TREATMENT",
    help="Also ask the position-swapped pairwise judge for these two arms.",
)
@click.option(
    "--suite",
    "suite_path",
    default=None,
    type=click.Path(exists=True),
    help="The suite to grade against (default: the one the run names).",
)
@click.option(
    "--labels",
    "labels_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Human label file to calibrate the judge against (default: the suite's judge/human-sample.jsonl).",
)
@click.option(
    "--allow-uncalibrated-judge",
    "allow_uncalibrated",
    is_flag=True,
    default=None,
    help="Let judged pass/fail count even from a judge whose calibration missed the bars (recorded on every "
    "judged line and shown on every report page; config: allow_uncalibrated_judge). A judge that is not "
    "calibrated at all counts without it, flagged.",
)
@click.option(
    "--require-calibrated-judge",
    "require_calibrated",
    is_flag=True,
    default=False,
    help="Hold judged samples (count them in no rate, gate or verdict; exit 1) unless the judge is calibrated "
    "against people (config: judge.require_calibration), for a CI gate that wants it.",
)
@click.option(
    "--judge-repeats",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Ask the judge R times (R - 1 more, at temperature 1 with other seeds) on up to 50 of the items it "
    "scored: its flip rate per rubric version, and flipping samples marked unstable.",
)
@click.option("--eval-file", type=click.Path(), default=None, help="agent-evals mode: the evals.json file.")
@click.option(
    "--outputs", type=click.Path(), default=None, help="agent-evals mode: folder of <case-id>/sample-<n>.txt files."
)
@click.option("-k", "k", type=int, default=5, show_default=True, help="agent-evals mode: samples expected per case.")
@click.option(
    "--compat-wildcards",
    is_flag=True,
    help="agent-evals mode: treat * ? [..] in a contains expectation as PowerShell -like wildcards, "
    "as run-evals.ps1 did (default: literal).",
)
@batch_options
@ci_output_options
def grade_cmd(
    run: str | None,
    judge_base_url: str | None,
    judge_version: str | None,
    pairwise: str | None,
    suite_path: str | None,
    labels_path: str | None,
    allow_uncalibrated: bool | None,
    require_calibrated: bool,
    judge_repeats: int,
    eval_file: str | None,
    outputs: str | None,
    k: int,
    compat_wildcards: bool,
    junit: Path | None,
    markdown: Path | None,
    batch: bool,
    batch_max_requests: int | None,
    batch_max_bytes: int | None,
    batch_poll_s: float | None,
    no_wait: bool,
) -> None:
    """Grade a run folder (writes grades.jsonl and grades-summary.json; exit 1 when
    samples are missing or unjudged), or an agent-evals outputs folder (exit 1 on a
    failed gate)."""
    options = batch_from(batch, batch_max_requests, batch_max_bytes, batch_poll_s, no_wait)
    if eval_file or outputs:
        if options is not None:
            raise InputError("--batch applies to grading a run folder (its judge calls)")
        if run:
            raise InputError("give either RUN or --eval-file/--outputs, not both")
        if not (eval_file and outputs):
            raise InputError("agent-evals mode needs both --eval-file and --outputs")
        # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
        from evalkit.conclusions.agentevals import grade_outputs, render

        report = grade_outputs(eval_file, outputs, k, compat_wildcards=compat_wildcards)
        for w in report.warnings:
            echo_text(f"WARNING: {w}", err=True)
        echo_text(render(report), nl=False)  # case ids and reasons from the outputs folder

        def ci() -> CiReport:  # built only when asked for
            # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
            from evalkit.telling.ciout import eval_file_report

            return eval_file_report(report)

        emit_ci(ci, junit, markdown)
        sys.exit(report.exit_code)
    if not run:
        raise InputError("give a run folder (evalkit grade RUN) or --eval-file and --outputs")
    if junit or markdown:
        raise InputError("--junit and --markdown apply to grade --eval-file; gate or compare the graded run for CI")
    if compat_wildcards:
        raise InputError("--compat-wildcards only applies with --eval-file/--outputs")
    if allow_uncalibrated and require_calibrated:
        raise InputError("--allow-uncalibrated-judge and --require-calibrated-judge contradict each other: give one")
    pair = None
    if pairwise:
        parts = [p.strip() for p in pairwise.split(",")]
        if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
            raise InputError("--pairwise takes two different arm names: BASELINE,TREATMENT")
        pair = (parts[0], parts[1])
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.conclusions.grading import GradeOptions, grade_run

    opts = GradeOptions(
        judge_base_url=judge_base_url,
        judge_version=judge_version,
        pairwise=pair,
        labels=labels_path,
        allow_uncalibrated_judge=False if require_calibrated else allow_uncalibrated or None,
        batch=options,
        judge_repeats=judge_repeats,
    )
    result = grade_run(run, suite_path, opts)
    _echo_grading(result)
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.conclusions import conversations

    if conversations.is_conversation_run(run):  # the simulated user checked: its failed conversations reviewed
        for line in conversations.summary_lines(conversations.review_conversations(run, suite_path, judge_base_url)):
            echo_text(line)
    sys.exit(result.exit_code)


def _echo_grading(result: GradeResult) -> None:
    """What a grading says: the summary lines and findings, INCOMPLETE with why (a dead
    server's log tail line by line), judged samples held, pairwise trials that errored,
    then the RESULTS block."""
    for line in summary_lines(result.summary, result.run_path):
        echo_text(line)
    echo_text(f"summary: {result.run_path / GRADES_SUMMARY}")
    s = result.summary
    if not result.complete:
        stopped = f" (grading stopped: {s.stop_reason})" if s.stop_reason else ""
        echo_text(f"INCOMPLETE: graded {s.n_graded}/{s.n_expected} expected samples{stopped}", err=True)
        for line in (s.stop_detail or "").splitlines():  # a dead server's log tail, line by line
            echo_text(line, err=True)
    if result.held:
        click.echo(
            f"JUDGE NOT TRUSTED: {result.held} judged sample(s) held (not counted as passes); see the findings",
            err=True,
        )
    pw_errored = (s.pairwise or {}).get("errored")
    if pw_errored:
        echo_text(f"PAIRWISE INCOMPLETE: {pw_errored} pairwise trial(s) errored or unmatched", err=True)
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.conclusions.results import results_block, suite_baseline

    echo_text("")
    baseline = suite_baseline(s.suite)
    gate_line = _gate_line(result.run_path, s.suite) if baseline is not None else None
    for line in results_block(s, result.run_path, baseline, gate_line):
        echo_text(line)
    if result.findings:  # the seed's order: the RESULTS block, then the findings
        echo_text("")
        echo_text("Findings")
    for f in result.findings:
        echo_text(f"  {f}")


def _gate_line(run_path: Path, suite: str | None) -> str:
    """`Gate: PASS` or `Gate: FAIL (reasons)`: the very decision `evalkit gate` makes
    against the suite's baseline.json, its notes (a judge version change) after it."""
    from evalkit.conclusions.gates import gate  # lazy: as the rest of this command's library
    from evalkit.foundations.errors import EvalkitError
    from evalkit.foundations.layout import BASELINE_FILE

    try:
        res = gate(run_path, Path(suite or "") / BASELINE_FILE)
    except EvalkitError as exc:
        return f"Gate: not decided ({exc})"
    line = "Gate: PASS" if res.passed else f"Gate: FAIL ({'; '.join(res.reasons)})"
    return "\n".join([line, *(f"note: {n}" for n in res.notes)])


# What `evalkit grade` prints of each group, in order (the names are those of grades-summary.json).
PRINTED = (
    "sample_pass_rate",
    "correct_rate",
    "tool_call_correctness",
    "hallucination_rate",
    "refusal_rate",
    "refusal_rate_golden",
    "refusal_rate_should_refuse",
    "activation_rate",
    "latency_p50_ms",
    "latency_p95_ms",
    "cost_per_sample_usd",
    "cost_per_case_usd",
    "paid_usd",
    "cache_avoided_usd",
)


def _score(v: float | None, se: float | None) -> str:
    return fmt.pct(v) + ("" if v is None or fmt.missing(se) else f" (SE {fmt.points(se, signed=False)})")


def _metric(name: str, v: object) -> str:
    """One metric as people read it: dollars for `_usd`, milliseconds for `_ms`, a
    percentage for a rate, '-' for not measured."""
    if name.endswith("_usd"):
        return fmt.usd(v)
    if name.endswith("_ms"):
        return fmt.ms(v)
    if name.endswith(("_rate", "_correctness", "_golden", "_should_refuse")):
        return fmt.pct(v)
    return fmt.cell(v)


def curve_lines(curve: Sequence[CurvePoint]) -> list[str]:
    """The pass@j and pass^j curve j = 1..k of one group, compact: two lines."""
    js = f"j=1..{len(curve)}"
    out = []
    for label, val, se in (("pass@j", "pass_at_j", "pass_at_j_se"), ("pass^j", "pass_hat_j", "pass_hat_j_se")):
        vals = fmt.curve([getattr(p, val) for p in curve])
        ses = fmt.curve([getattr(p, se) for p in curve])
        out.append(f"  curve {label} {js}: {vals} (SE {ses})")
    return out


def summary_lines(s: GradesSummary, run_path: Path) -> list[str]:
    """What `evalkit grade` prints of a grades summary: the counts, the judge, each
    metric overall, and per arm pass@k / pass^k (with SE) and the gated case score per
    set and per tag."""
    m = s.overall
    lines = [
        f"graded {s.n_graded}/{s.n_expected} samples ({s.n_missing} missing, "
        f"{s.n_errored} errored) -> {run_path / GRADES}"
    ]
    if s.judge_version:
        lines.append(
            f"judge: {s.judge_model} {s.judge_version}"
            f"{' (same model as generator: override)' if s.judge_same_model_override else ''}; "
            f"spend {fmt.usd(s.judge_spend_usd)}, {s.cache_hits} cached answers"
        )
    trust = s.judge_trust
    if trust is not None:
        state = "trusted" if trust.trusted and not trust.opt_out else "UNCALIBRATED" if trust.opt_out else "HELD"
        if trust.uncalibrated:
            lines.append(f"WARNING: {trust.uncalibrated}")
        lines.append(f"judge trust: {state}: {trust.reason}")
    # each metric for all arms pooled and for each arm apart (arms are compared, not pooled)
    columns = [("all arms (pooled)", m)] + [(arm, a.overall) for arm, a in s.per_arm.items()]
    if len(columns) == 2:
        columns = columns[1:]  # one arm: its column is the pooled one
    width = max(12, *(len(name) + 2 for name, _ in columns))
    lines.append("  " + f"{'metric':28s}" + "".join(f"{name:>{width}s}" for name, _ in columns))
    for name in PRINTED:
        cells = [_metric(name, getattr(g, name)) for _, g in columns]
        if all(c == fmt.NO_DATA for c in cells):
            continue  # not measured on this run (no case of that kind): not printed
        lines.append(f"  {name:28s}" + "".join(f"{c:>{width}s}" for c in cells))
    for arm, a in s.per_arm.items():
        lines.append(f"arm {arm} (k={s.k}): set/tag, cases, pass@k, pass^k, gated case score")
        groups = [("all", a.scores)] if a.scores else []
        groups += [(f"set {n}", v) for n, v in a.per_set_scores.items()]
        groups += [(f"tag {n}", v) for n, v in a.per_tag_scores.items()]
        for name, v in groups:
            gated = f"{_score(v.gated_case_score, v.gated_case_score_se)} ({v.gate})" if v.n_gated else "- (gate none)"
            lines.append(
                f"  {name:26s} {v.n_cases:>4}  pass@k {_score(v.pass_at_k, v.pass_at_k_se)}  "
                f"pass^k {_score(v.pass_hat_k, v.pass_hat_k_se)}  gated {gated}"
            )
        if a.scores and len(a.scores.curve) > 1:  # the curve j = 1..k (each set's and tag's: in the JSON)
            lines += curve_lines(a.scores.curve)
    if s.pairwise:
        p = s.pairwise
        lines.append(
            f"pairwise {p['treatment']} vs {p['baseline']}: {p['wins']}W/{p['ties']}T/{p['losses']}L, "
            f"{p['errored']} errored, position consistency {fmt.pct(p['position_consistency'])}"
        )
    jr = (s.judged_rates or {}).get("overall")
    if jr:
        jo, cor = jr["judge_only"], jr.get("corrected")
        judge_only = f"judge only {fmt.pct_ci(jo['rate'], jo['low'], jo['high'])} of N={jo['N']}"
        if cor:
            lines.append(
                f"judged sample pass rate: corrected {fmt.pct_ci(cor['rate'], cor['low'], cor['high'])} "
                f"(n={cor['n']} labels, N={cor['N']}); {judge_only}; judge bias {fmt.points(jr['bias']['value'])}"
                f"; verdicts rest on the {s.judged_rates and s.judged_rates['estimate']} estimate"
                + "".join(f" ({x['clipped']})" for x in (cor, jr.get("bias") or {}) if x.get("clipped"))
            )
        else:
            lines.append(f"judged sample pass rate: {judge_only} (no corrected rate: fewer than 2 labels)")
    for arm, blocks in ((s.judged_rates or {}).get("per_arm") or {}).items():
        cs = blocks.get("gated_case_score") or {}
        cc = cs.get("corrected")
        if cc:
            lines.append(
                f"gated case score ({arm}): corrected {fmt.pct_ci(cc['score'], cc['low'], cc['high'])} "
                f"(judged part PPI++ from n={cc['n']} labelled of N={cc['N']} judged cases); "
                f"judge only {fmt.pct(cs['judge_only']['score'])}"
            )
        if cs.get("labels_note"):
            lines.append(f"gated case score ({arm}): not corrected by sample-drawn labels: {cs['labels_note']}")
        if cs.get("n_unscored_cases"):
            lines.append(
                f"gated case score ({arm}): {cs['n_unscored_cases']} judged case(s) with no judge-scored sample "
                "count as failures (exact, never labelled)"
            )
    for version, c in ((s.judge_consistency or {}).get("per_version") or {}).items():
        lines.append(
            f"judge {version} consistency: {c['n_items']} item(s) asked {c['repeats']} times, flip rate "
            f"{fmt.pct(c['flip_rate'])}, straddling the threshold {fmt.pct(c['straddle_share'])}"
        )
    return lines


@click.group("judge")
def judge_group() -> None:
    """The LLM judge: human labels and calibration."""


@judge_group.command("sample")
@click.argument("run", type=click.Path(file_okay=False))
@click.option("-n", "n", type=int, default=20, show_default=True, help="How many judged items to draw.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draw (reproducible).")
@click.option(
    "--to",
    "to",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the label file here (e.g. the suite's judge/human-sample.jsonl); default: print the lines.",
)
@click.option("--force", is_flag=True, help="Replace an existing label file (its labels are lost).")
@click.option(
    "--by-case",
    "by_case",
    is_flag=True,
    help="Draw n whole cases (every judge-scored sample of each): what the corrected gated case score needs.",
)
def judge_sample_cmd(run: str, n: int, seed: int, to: str | None, force: bool, by_case: bool) -> None:
    """Draw n judged items of a graded run for people to label: each line holds the case
    input, the rubric, the output and an empty score (and the hashes that bind a label
    to what was read); the judge's own score is not shown. Label them in JupyterLab with
    `evalkit judge label FILE`. With --by-case, n counts cases and every judge-scored
    sample of each is drawn."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.telling.labelling import draw_items, label_lines_text, write_label_file

    items = draw_items(run, n, seed, by_case=by_case)
    if to is None:
        click.echo(label_lines_text(items), nl=False)  # any output text stored losslessly, one line per item
        return
    path = write_label_file(items, to, force=force)
    echo_text(f"wrote {len(items)} item(s) to label: {path}")
    echo_text(f"label them in JupyterLab: evalkit judge label {path}")


@judge_group.command("label")
@click.argument("labels_file", type=click.Path(dir_okay=False))
@click.option("--rater", default="", help="Your name, recorded on each label (several people may label one file).")
@click.option(
    "--notebook", "notebook", type=click.Path(dir_okay=False), default=None, help="Where to write the notebook."
)
def judge_label_cmd(labels_file: str, rater: str, notebook: str | None) -> None:
    """Write the labelling notebook for LABELS_FILE (parameters set) and say how to open it."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.telling.labelling import label_notebook

    path = label_notebook(labels_file, notebook, rater=rater)
    echo_text(f"wrote {path}")
    echo_text(f"open it in JupyterLab and run all cells: jupyter lab {path}")


@judge_group.command("calibrate")
@click.argument("run", type=click.Path(file_okay=False))
@click.option(
    "--labels",
    "labels_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="The label file (default: the suite's judge/human-sample.jsonl).",
)
@click.option(
    "--suite",
    "suite_path",
    default=None,
    type=click.Path(exists=True),
    help="The suite (default: the one the run names).",
)
def judge_calibrate_cmd(run: str, labels_path: str | None, suite_path: str | None) -> None:
    """Record the judge's agreement with the labels of RUN in the suite's
    judge/calibration.json (exit 1 when it does not clear the bars). Later gradings by
    this same judge (model, endpoint, prompt and rubric) trust it; any other judge does not."""
    # lazy: the library loads only when this command runs (`evalkit --help` stays fast)
    from evalkit.checking.judge import write_calibration
    from evalkit.conclusions.grading import resolve_suite, run_calibration
    from evalkit.runfolder.runs import RunFolder

    cal = run_calibration(run, suite_path, labels=labels_path)
    suite = resolve_suite(Path(run), RunFolder(run).read_meta(), suite_path)
    path = write_calibration(suite.path, cal)
    click.echo(printable(f"judge {cal.judge.model} at {cal.judge.base_url} ({cal.judge.version}): {cal.summary()}"))
    echo_text(f"recorded in {path}: commit it beside the judge files")
    if not cal.passed:
        echo_text(f"NOT CALIBRATED: {cal.reason}", err=True)
        sys.exit(1)


COMMANDS: list[click.Command] = [grade_cmd, judge_group]
