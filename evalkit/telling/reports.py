"""Shareable reports: papermill notebooks executed and rendered to self-contained HTML.

`report_run` decides which notebooks in `notebooks/` (at the top of the checkout; a wheel
has them as package data; `EVALKIT_NOTEBOOKS` names a folder of your own instead) apply to a run
folder, executes them with papermill (kernel `python3`) in parallel, renders each to one
HTML file with nbconvert (images embedded as data URIs, code hidden, the parameters as a
table at the top) into `reports/<run>/` beside the executed `.ipynb`, and rebuilds
`reports/index.html` (`evalkit.telling.report_index`). A notebook that cannot run (not found, a
kernel that does not start, an error in a cell) is a failed notebook in the result,
never an exception in a worker thread; `ReportResult.ok` is then False and `evalkit
report` exits 1. The notebooks call `evalkit.telling.nb` for everything they share.

Why hand-written: papermill executes and nbconvert renders, but neither decides which
notebooks apply to a run.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import html
import inspect
import json
import logging
import math
import os
import pickle
import queue
import re
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from evalkit.checking.judge import load_human_labels
from evalkit.conclusions.compare import compare_arms, compare_many
from evalkit.conclusions.conversations import is_conversation_run
from evalkit.conclusions.gates import gate, load_baseline
from evalkit.conclusions.grading import summarize_run, write_summary
from evalkit.conclusions.microtest import analyse
from evalkit.conclusions.verdicts import conformance_verdict, record_verdicts
from evalkit.foundations._io import iter_jsonl, read_json_object, write_all, write_atomic
from evalkit.foundations._jsonschema import jsonschema, papermill
from evalkit.foundations.errors import EvalkitError, InputError
from evalkit.foundations.layout import (
    BASELINE_FILE,
    GRADES,
    HUMAN_LABELS_FILE,
    MICROTEST_MARKER,
    PAIRWISE,
    RESULTS,
    RUN_CONFIG,
    TRAJECTORIES,
    VERDICTS,
    without_machine_paths,
)
from evalkit.foundations.records import RunVerdicts
from evalkit.foundations.records_gate import GATE_RECORDED_BY_GATE, GATE_RECORDED_BY_REPORT
from evalkit.numbers.plans import find_plan, load_plan
from evalkit.pii import privacy
from evalkit.runfolder.runload import (
    NOTHING_TO_REPORT,
    Run,
    as_run,
    grades_summary,
    judge_trust_notice,
    load_run_signed,
    report_state,
    run_verdicts,
    shared_cells,
)
from evalkit.runfolder.runs import RunFolder, answered_as, config_arm_names, config_arm_settings, find_suite_dir
from evalkit.suites.suite_arms import two_arms
from evalkit.telling import explorer
from evalkit.telling.conversations_page import write_conversations_page
from evalkit.telling.nb import REDACT_ENV
from evalkit.telling.report_index import CSP, NOTEBOOKS, TITLES, build_index, write_manifest

__all__ = ["MICROTEST_MARKER", "NOTEBOOKS", "TITLES"]

KERNEL = "python3"
# Kernels log a warning per start about plain-text TCP on loopback; reports are batch
# jobs, so only errors from the kernel process itself reach the user's terminal.
KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
NOTEBOOKS_ENV = "EVALKIT_NOTEBOOKS"


def notebooks_dir() -> Path:
    """Where the notebooks are: `EVALKIT_NOTEBOOKS` (a folder of your own versions), else
    `notebooks/` at the top of the checkout, which an installed wheel carries as
    `evalkit/notebooks/` (pyproject.toml maps the folder in)."""
    env = os.environ.get(NOTEBOOKS_ENV)
    if env:
        return Path(env)
    package = Path(__file__).resolve().parents[1]
    wheel = package / "notebooks"
    return wheel if wheel.is_dir() else package.parent / "notebooks"


@dataclass(frozen=True)
class NotebookReport:
    """One executed notebook: where its files are, how long it took, and its error."""

    name: str
    ipynb: Path
    html: Path | None
    sidecar: Path | None
    seconds: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ReportResult:
    """What `report_run` made: the run's report folder, the index, each notebook's
    outcome, and the notebooks that did not apply (with the reason)."""

    run_dir: Path
    out_dir: Path
    index: Path
    notebooks: tuple[NotebookReport, ...]
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    nothing: str | None = None  # why the run has nothing to report (no sample, not graded), else None

    @property
    def ok(self) -> bool:
        return all(n.ok for n in self.notebooks)


@dataclass(frozen=True)
class Inputs:
    """The files a report reads besides the run folder, found once (`report_inputs`) and
    passed to the notebooks as parameters: the pre-registered plan, the accepted
    baseline, the human labels; None where there is none. `arm`: the arm to gate
    (`report --arm`; default the one a recorded gate names, else the baseline's)."""

    plan: Path | None = None
    baseline: Path | None = None
    human_labels: Path | None = None
    arm: str | None = None


def report_inputs(
    run_dir: str | Path, *, plan: str | Path | None = None, baseline: str | Path | None = None, arm: str | None = None
) -> Inputs:
    """The report's inputs: `plan` and `baseline` as given, else the run's suite's
    `plan.json` and `baseline.json` when there are; its human labels when there are;
    the arm to gate as given."""
    run = Path(run_dir)
    meta = RunFolder(run).read_meta()
    suite = find_suite_dir(run, meta.get("suite"))
    if baseline is None and suite is not None and (suite / BASELINE_FILE).is_file():
        baseline = suite / BASELINE_FILE
    labels = suite / HUMAN_LABELS_FILE if suite is not None and os.path.lexists(suite / HUMAN_LABELS_FILE) else None
    return Inputs(
        plan=Path(plan) if plan is not None else find_plan(suite),
        baseline=Path(baseline) if baseline is not None else None,
        human_labels=labels,
        arm=arm,
    )


def conclude(run_dir: Run | str | Path, inputs: Inputs) -> RunVerdicts:
    """What the report concludes, written to the run's `verdicts.json` before any
    notebook runs (the notebooks and the index display it): the two-arm verdict held to
    the plan (a two-arm graded run), the gate against the baseline (a graded run whose
    arms include the baseline's), whether the judge may be trusted (as
    what grading decided), the conformance verdict (a single-arm graded run) and a micro-test's
    result. A run ingested from another tool without a grades summary gets one first.
    `run_dir`: the run folder, or the run loaded from it (`runload.load_run`)."""
    run = as_run(run_dir)
    path = Path(run.path)
    graded = len(run.grades) > 0
    if graded and grades_summary(path) is None:
        write_summary(path, summarize_run(path))  # a run ingested by evalkit 0.1
    arms = run.arm_names()
    parts: dict[str, Any] = {}
    comparison = None
    if graded and len(arms) == 2 and not (path / MICROTEST_MARKER).exists():
        bl, tr = two_arms(arms)
        p = load_plan(inputs.plan) if inputs.plan is not None else None
        comparison = compare_arms(run, bl, tr, alpha=p.alpha if p else 0.05, plan=p)
    elif graded and len(arms) > 2 and not (path / MICROTEST_MARKER).exists():
        # every pair, Holm-corrected across the pairs, each recorded in verdicts.json
        compare_many(run, arms, plan=inputs.plan)
    if graded and inputs.baseline is not None:
        parts.update(_gate_part(run, inputs, arms))
    if graded and len(arms) == 1:
        parts["conformance"] = conformance_verdict(run, arm=arms[0])
    if graded and inputs.human_labels is not None:
        # a label file the notebooks cannot read is bad input: said now (exit 2), before any notebook runs
        load_human_labels(inputs.human_labels, root=inputs.human_labels.parent.parent)
    summary = grades_summary(path) if graded else None
    if summary is not None and summary.judge_trust is not None:
        parts["judge_trust"] = summary.judge_trust  # what grading decided (`judge.decide_trust`)
    marker = path / MICROTEST_MARKER
    if marker.exists():
        m = read_json_object(marker, MICROTEST_MARKER)
        parts["microtest"] = analyse(run, str(m.get("control") or "control"), str(m.get("flag_pattern") or ""))
    return record_verdicts(path, comparison=comparison, **parts)


def _gate_part(run: Run, inputs: Inputs, arms: list[str]) -> dict[str, Any]:
    """The gate `conclude` records: none when `evalkit gate` recorded one (the report never
    replaces the gate the user ran; `InputError` when `--arm` names another arm), else the
    gate of `inputs.arm`, or of the arm a gate recorded by an earlier report names, or of
    the baseline's arm when the run has it."""
    assert inputs.baseline is not None
    recorded = run_verdicts(run.path).gate
    if recorded is not None and recorded.recorded_by == GATE_RECORDED_BY_GATE:
        if inputs.arm is not None and inputs.arm != recorded.arm:
            raise InputError(
                f"--arm {inputs.arm}: verdicts.json holds the gate `evalkit gate` recorded for arm {recorded.arm}, "
                f"which a report never replaces; run `evalkit gate RUN --arm {inputs.arm}` to gate that arm",
                Path(run.path) / VERDICTS,
                json_path="$.gate.arm",
            )
        return {}
    b = load_baseline(inputs.baseline)
    arm = inputs.arm or (recorded.arm if recorded is not None and recorded.arm in arms else None)
    if arm is None and b.arm in arms:
        arm = b.arm
    if arm is None and not (b.arm is None and len(arms) == 1):
        return {}
    if arm is not None and arm not in arms:
        raise InputError(f"--arm {arm} is not an arm of the run ({', '.join(arms)})", json_path="arm")
    return {"gate": replace(gate(run, inputs.baseline, arm=arm), recorded_by=GATE_RECORDED_BY_REPORT)}


def plan_notebooks(
    run_dir: str | Path,
    out_dir: str | Path,
    *,
    pandalm_dir: str | Path | None = None,
    inputs: Inputs | None = None,
    loaded: Run | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Which notebooks apply to a run, with their papermill parameters (the plan, the
    baseline and the human labels among them, as `report_inputs` found them), and why
    the others do not. Reads only the run folder's small files (no samples), and its
    grades for judge scores unless `loaded` (the run, loaded) has them at hand.
    `pandalm_dir`: PandaLM's data, on which `judge_calibration` calibrates a judge as
    well."""
    run = Path(run_dir).resolve()
    inputs = inputs or report_inputs(run)
    meta = RunFolder(run).read_meta()
    arms = config_arm_names(meta)
    graded = (run / GRADES).exists()
    base = {"run_dir": str(run), "report_dir": str(Path(out_dir).resolve())}
    plan = str(inputs.plan.resolve()) if inputs.plan is not None else ""
    plans: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    plans["run_summary"] = {**base, "baseline": str(inputs.baseline.resolve()) if inputs.baseline else ""}
    if graded:
        plans["pass_at_k"] = dict(base)
    else:
        skipped["pass_at_k"] = "the run is not graded (run `evalkit grade` first)"
    if len(arms) >= 2 and graded:
        # more arms: the page shows every pair's corrected verdict, and this pair in full
        bl, tr = two_arms(arms)
        plans["skill_comparison"] = {**base, "baseline": bl, "treatment": tr, "plan": plan}
    else:
        skipped["skill_comparison"] = (
            "needs two arms or more" if len(arms) < 2 else "the run is not graded (run `evalkit grade` first)"
        )
    has_judge_scores = graded and _grades_have_judge(run / GRADES, loaded)
    has_pairwise = (run / PAIRWISE).is_file() and (run / PAIRWISE).stat().st_size > 0
    has_judge = bool((meta.get("config") or {}).get("judge")) if isinstance(meta.get("config"), dict) else False
    # A page only where it has something to show: a judge configured for a suite with no
    # judged case has nothing of this run's to calibrate (PandaLM's reference, when asked
    # for, is shown for a run that has a judge).
    reference = pandalm_dir is not None and has_judge
    if has_judge_scores or has_pairwise or inputs.human_labels is not None or reference:
        plans["judge_calibration"] = {
            **base,
            "human_labels": str(inputs.human_labels.resolve()) if inputs.human_labels else "",
        }
        if pandalm_dir is not None:
            plans["judge_calibration"]["pandalm_dir"] = str(Path(pandalm_dir).resolve())
    else:
        skipped["judge_calibration"] = "nothing to calibrate: no judge score, no pairwise trial and no human label"
    if len(arms) >= 2 or inputs.plan is not None:
        plans["power_planning"] = {**base, "interactive": False, "plan": plan}
    else:
        skipped["power_planning"] = "a single-arm run with no pre-registered plan"
    if (run / MICROTEST_MARKER).exists():
        plans["micro_test"] = dict(base)
        # a micro-test's report is the micro-test: the two-arm and power notebooks do not fit
        for name in ("skill_comparison", "power_planning"):
            if name in plans:
                plans.pop(name)
                skipped[name] = "a micro-test run"
    else:
        skipped["micro_test"] = "not a micro-test run (see `evalkit microtest`)"
    if (run / TRAJECTORIES).is_dir():  # an agent unit's run (evalkit.running.agents): its trajectories side by side
        plans["replay"] = dict(base)
    else:
        skipped["replay"] = "no trajectories (not an agent unit's run)"
    return plans, skipped


def _grades_have_judge(path: Path, loaded: Run | None = None) -> bool:
    """Whether any grade of `grades.jsonl` carries a judge score (read by the run files'
    one reader: a bad line is an InputError naming it, as every later step would say).
    From `loaded`'s grades when they settle it: every score null (the usual ungraded-by-
    a-judge run: no line parsed twice), or one a number; NaN there (a missing key, or a
    NaN in the file) is read from the file, whose lines tell the two apart."""
    if loaded is not None and len(loaded.grades):
        scores = loaded.grades["judge_score"].tolist()
        if all(v is None for v in scores):
            return False
        if any(v is not None and not (isinstance(v, float) and math.isnan(v)) for v in scores):
            return True
    return any(g.get("judge_score") is not None for g in iter_jsonl(path))


# ------------------------------------------------------------------------------ execution and rendering


def execute(
    name: str,
    parameters: Mapping[str, Any],
    out_dir: str | Path,
    *,
    source_dir: str | Path | None = None,
    title: str | None = None,
    timeout_s: float = 600,
    km: Any = None,
) -> NotebookReport:
    """Execute one notebook with papermill into `out_dir/<name>.ipynb` and render
    `out_dir/<name>.html`. A failing notebook is still rendered (showing the error);
    its `error` says what failed. `km`: a started kernel to run in (see `run_notebooks`);
    None starts a fresh one, as papermill does by default."""
    ran = _execute(name, parameters, out_dir, source_dir=source_dir, title=title, timeout_s=timeout_s, km=km)
    return ran if isinstance(ran, NotebookReport) else _render(ran)


@dataclass(frozen=True)
class _Executed:
    """A notebook papermill ran (or failed to run): what `_render` needs to finish its
    report. `seconds`: the execution's."""

    name: str
    parameters: Mapping[str, Any]
    ipynb: Path
    title: str
    seconds: float
    error: str | None


def _execute(
    name: str,
    parameters: Mapping[str, Any],
    out_dir: str | Path,
    *,
    source_dir: str | Path | None = None,
    title: str | None = None,
    timeout_s: float = 600,
    km: Any = None,
) -> NotebookReport | _Executed:
    """`execute` up to the render: the executed notebook, or the final report of one
    that is not there."""
    pm = papermill()

    src = Path(source_dir or notebooks_dir()) / f"{name}.ipynb"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dst = out / f"{name}.ipynb"
    (out / f"{name}.json").unlink(missing_ok=True)  # a stale sidecar must not outlive a failed run
    t0 = time.perf_counter()
    if not src.is_file():
        if source_dir is not None:
            where = "the source folder given"
        elif os.environ.get(NOTEBOOKS_ENV):
            where = f"the folder {NOTEBOOKS_ENV} names"
        else:
            where = "the evalkit package's own notebooks: this install is not whole"
        dst.unlink(missing_ok=True)  # no stale page or notebook from an earlier report
        (out / f"{name}.html").unlink(missing_ok=True)
        return NotebookReport(
            name=name, ipynb=dst, html=None, sidecar=None, seconds=0.0, error=f"notebook not found: {src} ({where})"
        )
    error = None
    try:
        extra = {"km": km} if km is not None else {"extra_arguments": KERNEL_ARGS}
        pm.execute_notebook(
            str(src),
            str(dst),
            parameters=dict(parameters),
            kernel_name=KERNEL,
            progress_bar=False,
            log_output=False,
            request_save_on_cell_execute=False,
            execution_timeout=timeout_s,
            **extra,
        )
    except pm.PapermillExecutionError as exc:
        error = f"{exc.ename}: {exc.evalue}"
    except Exception as exc:  # kernel died, timeout: still report what happened
        error = f"{type(exc).__name__}: {exc}"
    return _Executed(name, parameters, dst, title or TITLES.get(name, name), time.perf_counter() - t0, error)


def _render(ran: _Executed) -> NotebookReport:
    """The rest of `execute`: the executed notebook rendered (when papermill wrote it),
    its report; `seconds` counts the execution and the render."""
    t0 = time.perf_counter()
    error, page = ran.error, None
    if ran.ipynb.exists():
        try:
            page = render_html(ran.ipynb, ran.parameters, title=ran.title)
        except Exception as exc:  # a render failure must not hide the execution result
            error = error or f"render failed: {type(exc).__name__}: {exc}"
    side = ran.ipynb.with_suffix(".json")
    return NotebookReport(
        name=ran.name,
        ipynb=ran.ipynb,
        html=page,
        sidecar=side if side.exists() else None,
        seconds=ran.seconds + time.perf_counter() - t0,
        error=error,
    )


# An exporter registers filters on itself on every call, so two threads must not share
# one at the same time; building one (traitlets, the Jinja environment, the template) is
# the largest fixed cost of a render, so finished exporters wait here for the next page,
# across lanes and across runs.
_EXPORTERS: list[Any] = []
_EXPORTERS_LOCK = threading.Lock()


def _new_exporter() -> Any:
    from nbconvert import HTMLExporter  # lazy: nbconvert (Jinja, traitlets) loads only to render

    log = logging.getLogger("evalkit.telling.reports.nbconvert")
    log.setLevel(logging.ERROR)  # "alternative text is missing" on every matplotlib figure
    return HTMLExporter(
        template_name="lab",
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        embed_images=True,
        log=log,
    )


def _export(nb: Any, resources: dict[str, Any]) -> str:
    """`HTMLExporter.from_notebook_node` on an exporter no other thread is using."""
    with _EXPORTERS_LOCK:
        exp = _EXPORTERS.pop() if _EXPORTERS else None
    if exp is None:
        exp = _new_exporter()
    body: str
    body, _ = exp.from_notebook_node(nb, resources=resources)
    with _EXPORTERS_LOCK:
        _EXPORTERS.append(exp)
    return body


def params_table_html(parameters: Mapping[str, Any], title: str) -> str:
    """The header of a report page: when it was rendered and the parameters it ran with
    (escaped), folded; the notebook's own first heading is the page's title (`title` names
    the page in the line, never as a second heading)."""
    rows = "".join(
        f"<tr><td><code>{html.escape(str(k))}</code></td><td>{html.escape(json.dumps(v))}</td></tr>"
        for k, v in parameters.items()
    )
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    return (
        f"<details class='ek-header'><summary>{html.escape(title)}: rendered {html.escape(stamp)} by "
        f"<code>evalkit report</code> (click for the parameters)</summary>"
        f"<table class='ek-params'><thead><tr><th>parameter</th><th>value</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></details>"
    )


def arms_table_html(run_dir: Any) -> str:
    """The arms of a report page's run, each with its model, the host its calls went to
    and its sampling parameters (`runs.config_arm_settings`), escaped; "" when the page
    has no run."""
    if not run_dir:
        return ""
    try:
        meta = RunFolder(Path(str(run_dir))).read_meta()
        settings = config_arm_settings(meta)
    except (OSError, EvalkitError):
        return ""
    given = _arm_files(meta)
    if not settings:
        return ""

    def cell(v: Any) -> str:
        return html.escape("not set" if v is None else str(v))

    rows = "".join(
        f"<tr><td>{html.escape(arm)}</td><td><code>{cell(answered_as(st))}</code></td>"
        f"<td>{cell(st.get('host'))}</td><td>{cell(st.get('temperature'))}</td><td>{cell(st.get('top_p'))}</td>"
        f"<td>{cell(st.get('seed'))}</td><td>{cell(st.get('max_tokens_out'))}</td>"
        f"<td>{html.escape(', '.join([*given.get(arm, []), *map(str, st.get('overrides') or [])]) or 'none')}</td></tr>"
        for arm, st in settings.items()
    )
    return (
        "<table class='ek-arms'><thead><tr><th>arm</th><th>model</th><th>endpoint host</th><th>temperature</th>"
        "<th>top_p</th><th>seed</th><th>max_tokens_out</th><th>set over the suite</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _arm_files(meta: Mapping[str, Any]) -> dict[str, list[str]]:
    """Each arm's guidance file and skill folder as the run's config snapshot names them
    (`guidance: guidance/skilled.md`): what an arm adds to the suite besides its settings."""
    cfg = meta.get("config") if isinstance(meta.get("config"), Mapping) else {}
    out: dict[str, list[str]] = {}
    for a in (cfg or {}).get("arms") or []:
        if isinstance(a, Mapping) and isinstance(a.get("name"), str):
            out[a["name"]] = [
                f"{key}: {a[field]}"
                for key, field in (("guidance", "guidance"), ("guidance", "guidance_file"), ("skill", "skill_dir"))
                if isinstance(a.get(field), str) and a[field] and "\n" not in a[field] and len(a[field]) <= 200
            ]
    return out


_NOTICE_STYLE = "background:#fff8e1;color:#8a6d00;border-left:6px solid #8a6d00;padding:0.5em 1em"


def render_html(ipynb: str | Path, parameters: Mapping[str, Any], *, title: str) -> Path:
    """Render an executed notebook to a self-contained HTML page beside it: no code,
    images as data URIs, the parameters as a table first, and a content security
    policy that allows no script and no outside resource."""
    jsonschema()  # before nbformat, which validates with it: see `_jsonschema.papermill`
    import nbformat  # lazy: the Jupyter stack loads only when a report runs

    src = Path(ipynb)
    nb = nbformat.read(src, as_version=4)
    header = nbformat.v4.new_code_cell(source="")
    head = params_table_html(parameters, title) + arms_table_html(parameters.get("run_dir"))
    notice = judge_trust_notice(parameters.get("run_dir"))
    if notice:  # on every page of the run: the judge's pass/fail is held, or counts by opt-out
        head += f"<p class='ek-judge-notice' style='{_NOTICE_STYLE}'><b>{html.escape(notice)}</b></p>"
    header.outputs = [nbformat.v4.new_output("display_data", data={"text/html": head})]
    # the injected-parameters cell has no output; drop it so the page starts with the table
    nb.cells = [header] + [c for c in nb.cells if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    body = _export(nb, {"metadata": {"name": title}})
    body = without_machine_paths(_harden(body), parameters.get("run_dir") or None)
    dst = src.with_suffix(".html")
    write_atomic(dst, body)
    return dst


_SCRIPT_RE = re.compile(r"<script\b[^>]*>.*?</script\s*>", re.S | re.I)


def _harden(page: str) -> str:
    """Drop the template's own scripts (MathJax and widget loaders from a CDN: a report
    is read offline and runs nothing) and add the content security policy."""
    page = _SCRIPT_RE.sub("", page)
    meta = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
    return page.replace("<head>", "<head>\n" + meta, 1) if "<head>" in page else meta + page


def _fewest_notebooks(run: Path, inputs: Inputs, notebooks: Sequence[str] | None) -> int:
    """How many notebooks at least will run (`plan_notebooks` says exactly, later): the
    lanes started ahead of them (`report_run`) are no more than that; more are added
    once the plan is known."""
    if notebooks:
        return len(set(notebooks))
    arms = config_arm_names(RunFolder(run).read_meta())
    return 1 + (run / GRADES).exists() + (len(arms) >= 2 or inputs.plan is not None)


@dataclass(frozen=True)
class ReportOptions:
    """How `report_run` reports a run, built once from its arguments and handed down
    whole (see `report_run` for each): adding an option is a field here and its keyword
    there."""

    notebooks: Sequence[str] | None = None
    parallel: bool = True
    source_dir: str | Path | None = None
    extra_parameters: Mapping[str, Mapping[str, Any]] | None = None
    workers: int | None = None
    reuse_kernels: bool = True
    redact: bool = False
    pandalm_dir: str | Path | None = None
    plan: str | Path | None = None
    baseline: str | Path | None = None
    arm: str | None = None
    against: str | Path | None = None


def report_run(
    run_dir: str | Path,
    reports_dir: str | Path = "reports",
    notebooks: Sequence[str] | None = None,
    parallel: bool = True,
    *,
    source_dir: str | Path | None = None,
    extra_parameters: Mapping[str, Mapping[str, Any]] | None = None,
    workers: int | None = None,
    reuse_kernels: bool = True,
    redact: bool = False,
    pandalm_dir: str | Path | None = None,
    plan: str | Path | None = None,
    baseline: str | Path | None = None,
    arm: str | None = None,
    against: str | Path | None = None,
) -> ReportResult:
    """Execute and render every notebook that applies to `run_dir` (or those named in
    `notebooks`) into `reports_dir/<run>/`, write the run's manifest and rebuild
    `reports_dir/index.html`. Notebooks run in lanes sized to the cores when `parallel`
    (`workers` lanes when given); see `run_notebooks` for `reuse_kernels`. The run is read once here,
    and the kernels take that reading (`_Handoff`). `pandalm_dir`: PandaLM's data, for the judge
    calibration notebook to calibrate on as well. `plan` and `baseline`: the plan and
    baseline to hold the run to (default: the suite's). Before any notebook runs, what
    the report concludes is written to the run's `verdicts.json` (`conclude`). `redact`:
    the notebooks read a copy of the run with every detected personal value and secret
    replaced by a typed placeholder (`evalkit.pii.privacy.redact_run`, made in a temporary
    folder outside the report folder and removed once the pages are rendered: the report
    folder is what gets shared), the run's report folder is made anew, and every file
    written, the index included, is checked to hold none of the replaced values and
    nothing the scanner detects. Beside the notebooks, `explorer.html` (every sample,
    `evalkit.telling.explorer`) and, with `against` (another run folder), `diff.html`:
    the run against that one."""
    t0 = time.perf_counter()
    opts = ReportOptions(
        notebooks=notebooks,
        parallel=parallel,
        source_dir=source_dir,
        extra_parameters=extra_parameters,
        workers=workers,
        reuse_kernels=reuse_kernels,
        redact=redact,
        pandalm_dir=pandalm_dir,
        plan=plan,
        baseline=baseline,
        arm=arm,
        against=against,
    )
    run = Path(run_dir)
    if not (run / RUN_CONFIG).exists():
        raise InputError("not a run folder (no config.json)", run)
    run = run.resolve()
    out_dir = Path(reports_dir) / run.name
    source, redacted = run, None  # the folder the notebooks read
    _check_against(against, redact)
    if redact:
        if out_dir.exists():
            shutil.rmtree(out_dir)  # no page of an earlier, unredacted report may stay beside it
        copy_root = Path(tempfile.mkdtemp(prefix=f"evalkit-{privacy.REDACTED_RUN}-"))
        try:
            redacted = privacy.redact_run(run, copy_root / run.name, log=out_dir / privacy.REDACTION_LOG)
        except BaseException:
            shutil.rmtree(copy_root, ignore_errors=True)
            raise
        source = Path(redacted.path)
    try:
        return _render_run(run, source, redacted, out_dir, reports_dir, opts, t0)
    finally:
        if redacted is not None:
            shutil.rmtree(Path(redacted.path).parent, ignore_errors=True)  # the copy is no part of the report


def _check_against(against: str | Path | None, redact: bool) -> None:
    """`against` is a run folder, and not asked for with `redact` (the other run's texts
    would reach diff.html unredacted)."""
    if against is not None and not (Path(against) / RUN_CONFIG).exists():
        raise InputError("--against: not a run folder (no config.json)", Path(against))
    if redact and against is not None:
        raise InputError("--redact and --against together: redact each run's report on its own")


def _render_run(
    run: Path, source: Path, redacted: Any, out_dir: Path, reports_dir: str | Path, opts: ReportOptions, t0: float
) -> ReportResult:
    """`report_run` once the folder the notebooks read (`source`: the run, or its
    redacted copy) is known."""
    notebooks, parallel, workers, pandalm_dir = opts.notebooks, opts.parallel, opts.workers, opts.pandalm_dir
    inputs = report_inputs(run, plan=opts.plan, baseline=opts.baseline, arm=opts.arm)
    if notebooks:
        unknown = [n for n in notebooks if n not in NOTEBOOKS]
        if unknown:
            raise InputError(f"unknown notebook(s) {', '.join(unknown)}; known: {', '.join(NOTEBOOKS)}")
    for name, extra in (opts.extra_parameters or {}).items():
        if name == "skill_comparison":  # the pair shown in full must be two of the run's arms
            # checked before any kernel starts: a refused --pair costs no kernel's start-up
            arms = config_arm_names(RunFolder(source).read_meta())
            bad = [a for a in (extra.get("baseline"), extra.get("treatment")) if a and a not in arms]
            if bad:
                raise InputError(
                    f"--pair: {', '.join(map(str, bad))} is not an arm of the run ({', '.join(arms)})", run
                )
    before = os.environ.get(REDACT_ENV)
    if redacted is not None:
        os.environ[REDACT_ENV] = "1"  # the kernels started for these notebooks inherit it
    # The lanes' kernels start, import and load the run while this process decides what
    # the report concludes (the notebooks display it, so they wait for it).
    handoff = _Handoff() if opts.reuse_kernels else None  # a fresh kernel per notebook takes no hand-off
    run_bytes = _run_bytes(source)
    ahead = _lane_count(_fewest_notebooks(source, inputs, notebooks), parallel, workers, run_bytes)
    lanes = _Lanes(
        # one kernel warms up while this process reads the run, the others once it has: on 2
        # cores a second kernel's imports took the reading's core (a 200,000-sample run read
        # in 8.5 s beside two kernels' start, 6 s beside one; issue 44)
        1 if handoff is not None else ahead,
        reuse_kernels=opts.reuse_kernels,
        warm_up=_warm_up(source, notebooks, load=False),
        handoff=handoff,
    )
    explorer_pages: _Forked | None = None
    try:
        lanes.wait_launched()
        loaded, signature = load_run_signed(source)
        # The run (a million objects for 100,000 samples) lives through the report: kept
        # out of the collector's scans while this process concludes, writes the explorer
        # and renders (each full collection walked it: 1.5 of their 4.9 CPU-s, issue 44).
        gc.freeze()
        if handoff is not None:
            handoff.offer(loaded, signature)  # the kernels take this reading instead of parsing the run again
            lanes.grow(ahead, ahead=True)
        conclude(loaded, inputs)
        state = report_state(loaded, grades_summary(loaded))  # an empty or ungraded run: said, and exit 1
        plans, skipped = plan_notebooks(source, out_dir, pandalm_dir=pandalm_dir, inputs=inputs, loaded=loaded)
        if notebooks:
            for n in notebooks:
                if n not in plans:
                    raise InputError(f"notebook {n} does not apply to this run: {skipped.get(n, 'unknown')}", run)
            plans = {n: p for n, p in plans.items() if n in notebooks}
        for name, extra in (opts.extra_parameters or {}).items():
            if name in plans:
                plans[name].update(extra)
        out_dir.mkdir(parents=True, exist_ok=True)
        # Written by a child process beside the notebooks, not on a thread: this process
        # drives each kernel (every cell's messages go through a lane's thread), and a
        # thread building the page held the interpreter's lock from the lanes, so 3 s
        # of the page's work cost the notebooks 7.6 s (issue 44); before the notebooks,
        # it held them back by its 2 s.
        explorer_pages = _Forked(
            functools.partial(_explorer_pages, loaded, out_dir, inputs, opts.against), nice=EXPLORER_NICE
        )
        del loaded  # the kernels have their own copy
        lanes.grow(_lane_count(len(plans), parallel, workers, run_bytes))
        results = lanes.run(plans, out_dir, source_dir=opts.source_dir)
        try:
            written, failed = explorer_pages.result()
        except Exception as exc:  # the child that wrote the pages failed: a skipped page, as a page failing is
            written, failed = {}, {"explorer": f"page not written: {exc}"}
    finally:
        if explorer_pages is not None:
            with contextlib.suppress(Exception):  # never a child left behind (its error, if any, was said above)
                explorer_pages.result()
        lanes.close()
        if handoff is not None:
            handoff.close()
        gc.unfreeze()
        if redacted is not None and before is None:
            os.environ.pop(REDACT_ENV, None)
    skipped = {**skipped, **failed}
    write_manifest(source, out_dir, results, skipped, run_dir=run, pages=written)
    index = build_index(reports_dir)
    if redacted is not None:
        privacy.verify_redacted(redacted, [out_dir, index])
    return ReportResult(
        run_dir=run,
        out_dir=out_dir.resolve(),
        index=index,
        notebooks=tuple(results),
        skipped=skipped,
        seconds=time.perf_counter() - t0,
        nothing=state[1] if state is not None and state[0] == NOTHING_TO_REPORT else None,
    )


def _explorer_pages(
    loaded: Run, out_dir: Path, inputs: Inputs, against: str | Path | None
) -> tuple[dict[str, str], dict[str, str]]:
    """The run's explorer (and its diff against `against`), written while the kernels
    warm up: page kind -> file name (and `against`: the other run's name),
    and each page that could not be written -> why (listed as skipped: a page that
    fails must not fail the report after its notebooks rendered)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pages: dict[str, str] = {}
    failed: dict[str, str] = {}
    writers: list[tuple[str, Callable[[], Path]]] = [
        ("explorer", lambda: explorer.write_explorer(loaded, out_dir, baseline=inputs.baseline).path)
    ]
    if against is not None:
        writers.append(("diff", lambda: explorer.write_diff(loaded, against, out_dir).path))
    if is_conversation_run(loaded.path):  # a conversation run: its page (evalkit.telling.conversations_page)
        writers.append(("conversations", lambda: write_conversations_page(loaded.path, out_dir)))
    for kind, write in writers:
        try:
            pages[kind] = write().name
        except Exception as exc:  # said on the index as a skipped page, never a failed report
            failed[kind] = f"page not written: {type(exc).__name__}: {exc}"
    if "diff" in pages and against is not None:
        pages["against"] = Path(against).resolve().name
    return pages, failed


# Slowest first, so the pool is not left waiting on one long notebook at the end, and
# the one whose page renders fastest last.
_COST_ORDER = (
    "judge_calibration",
    "pass_at_k",
    "run_summary",
    "skill_comparison",
    "replay",
    "micro_test",
    # last: its page renders in a tenth of a second (skill_comparison's, with its tables,
    # took 1 s after the last notebook had run; issue 44)
    "power_planning",
)


def run_notebooks(
    plans: Mapping[str, Mapping[str, Any]],
    out_dir: str | Path,
    *,
    parallel: bool = True,
    source_dir: str | Path | None = None,
    workers: int | None = None,
    reuse_kernels: bool = True,
) -> list[NotebookReport]:
    """Execute and render the planned notebooks, in as many lanes (threads) as there are
    cores when `parallel` (no more than kernels holding the run fit in half the memory
    available: `_lane_count`); each lane takes the next notebook from a shared queue.

    With `reuse_kernels` each lane starts one kernel and runs its notebooks in it one
    after another, clearing the namespace (`%reset -f`, figures closed, matplotlib
    defaults restored) between them: a notebook then pays for kernel start-up and the
    imports of pandas, scipy and matplotlib once per lane instead of once per notebook.
    A kernel that died or cannot be reset is replaced. Without it every notebook gets a
    fresh kernel, as papermill does by default. (papermill is thread-safe when no `cwd`
    is set.)"""
    run_bytes = max((_run_bytes(Path(str(p["run_dir"]))) for p in plans.values() if p.get("run_dir")), default=0)
    lanes = _Lanes(_lane_count(len(plans), parallel, workers, run_bytes), reuse_kernels=reuse_kernels)
    try:
        return lanes.run(plans, out_dir, source_dir=source_dir)
    finally:
        lanes.close()


# Every lane's kernel starts, imports and takes the run (the report's reading, `_Handoff`,
# or its own `nb.open_run`) while this process reads the run: each lane uses a core.
# Measured on a 200,000-sample run on 2 cores (benchmarks/bench_report_scale.py, issue 44):
# two lanes 17.7 and 19.2 s against one lane's 21.5 and 20.6 s, one after the other; on a
# 100,000-sample run 14.9 and 14.0 s against 14.7 and 15.4 s. (Before the hand-off shared
# its strings and the verdict and the pages read the run by column, a second kernel cost
# more than it saved past 32 MB of results and grades, and such a run had one lane.)


# What a kernel holds at its peak: its imports (about 200 MB) and the run, about twice the
# bytes of the run's results and grades files once taken from the report (`_Handoff`: 390 MB
# in each kernel of a 200,000-sample run's report, whose two files are 194 MB; issue 44) and
# about four times while it parses them itself (800 to 880 MB: `run_notebooks`, no reused
# kernels, a hand-off that failed), so four times is counted. On a many-core machine a lane
# per notebook would hold the run up to seven times over: the lanes are no more than half
# the memory available holds (the report process and the explorer's child hold the run too).
KERNEL_IMPORTS_BYTES = 200 << 20
KERNEL_BYTES_PER_RUN_BYTE = 4


def _lane_count(
    n_notebooks: int, parallel: bool, workers: int | None, run_bytes: int = 0, available: int | None = None
) -> int:
    """The lanes for `n_notebooks`: 1 unless `parallel`; else `workers`, or the cores,
    never more than the notebooks, nor (without `workers`) than kernels holding a run of
    `run_bytes` (its results and grades files) fit in half of `available` memory (default:
    what the machine, or the container's memory limit, leaves; no limit where neither says)."""
    if not parallel:
        return 1
    lanes = max(1, min(n_notebooks, workers or os.cpu_count() or 1))
    if not workers and run_bytes > 0:
        free = _available_memory() if available is None else available
        if free is not None:
            per_kernel = KERNEL_IMPORTS_BYTES + KERNEL_BYTES_PER_RUN_BYTE * run_bytes
            lanes = max(1, min(lanes, free // 2 // per_kernel))
    return lanes


def _available_memory() -> int | None:
    """The memory available to new processes, in bytes: the least of Linux's MemAvailable
    (free memory and the caches it can drop) and what this process's memory cgroup (a
    container's limit, which /proc/meminfo does not show) leaves; else the free pages where
    the system says; None when nothing is known."""
    known = [m for m in (_meminfo_available(), _cgroup_memory_left()) if m is not None]
    if known:
        return min(known)
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


# A cgroup's memory limit where it has none: "max" (v2), or a number past any machine (v1).
_NO_LIMIT = 1 << 60


def _cgroup_memory_left(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """The memory this process's cgroups leave (limit less usage, the least of v2's
    `memory.max`/`memory.current` and v1's `memory.limit_in_bytes`/`memory.usage_in_bytes`,
    in the process's own cgroup folder, else at the mount's top as a container sees it);
    None without a limit.

    Why hand-written: no core dependency reads a container's memory limit (psutil reports
    the host's memory)."""
    try:
        lines = Path(proc_cgroup).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    left: list[int] = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # the unified hierarchy (v2)
            top, files = Path(root), ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):  # v1's memory controller
            top, files = Path(root) / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        for folder in dict.fromkeys((top / path.lstrip("/"), top)):
            try:
                limit, used = ((folder / f).read_text(encoding="ascii").strip() for f in files)
                if limit != "max" and int(limit) < _NO_LIMIT:
                    left.append(max(0, int(limit) - int(used)))
                    break
            except (OSError, ValueError):
                continue
    return min(left) if left else None


def _run_bytes(run: Path) -> int:
    """The bytes of a run's results and grades files (0 where there are none)."""
    total = 0
    for name in (RESULTS, GRADES):
        with contextlib.suppress(OSError):
            total += (run / name).stat().st_size
    return total


# What a lane's kernel runs while it waits for its first notebook (`_Lanes` with
# `warm_up`): the imports every notebook makes, and (`load`) the run loaded into
# `runload`'s cache (`nb.open_run`; `report_run` hands its own reading over instead,
# `_ADOPT`), so the notebooks start with both done. Then what is in memory (the
# modules, the cached run: a million objects for 100,000 samples) is frozen out of the
# garbage collector's scans (`gc.freeze`): it lives as long as the kernel, and every full
# collection walked it, the two of each reset between notebooks (`%reset` and `_RESET`)
# 0.8 s of them. And the youngest generation is collected after 50,000 new objects, not
# 700: the notebooks make dicts and tuples by the hundred thousand for a large run, none of
# them garbage until the notebook ends (`_RESET` collects then), and the collections they
# set off cost the notebooks of a 100,000-sample run 7.7 CPU-s against 7.25 (two runs each).
# Any failure is left for the notebook to meet and report.
_WARM_UP = """def _evalkit_warm_up():
    try:
        import gc
        gc.set_threshold(50_000, 20, 20)
        import {imports}
        from evalkit import nb
        {load}
        gc.freeze()
    except Exception:
        pass
_evalkit_warm_up()
del _evalkit_warm_up
"""
# The notebooks that draw no figure: a report of these alone warms its kernels up without
# matplotlib (about a second of a kernel's CPU that no page of theirs would use).
_NO_FIGURES = frozenset({"replay"})
# What the figure notebooks import besides: matplotlib, and the statistics their intervals
# and tests import on first use (`evalkit.numbers.stats`: 1.4 s that the first notebook
# paid, on the report's critical path, where the warm-up has seconds to spare while this
# process loads and concludes).
_FIGURE_IMPORTS = "matplotlib.pyplot, scipy.stats, statsmodels.stats.proportion"


def _warm_up(run_dir: Path, notebooks: Sequence[str] | None, *, load: bool = True) -> str:
    """`_WARM_UP` for `run_dir`, importing what the notebooks asked for import (all of
    them when none are named); without `load`, the imports only (the run comes by
    `_Handoff`)."""
    plots = not notebooks or not set(notebooks) <= _NO_FIGURES
    return _WARM_UP.format(
        imports=f"{_FIGURE_IMPORTS}, numpy, pandas" if plots else "numpy, pandas",
        load=f"nb.open_run({str(run_dir)!r})" if load else "pass",
    )


# What a lane's kernel runs once the report process has read the run (`_Handoff`): its
# reading, unpickled with the collector paused (0.4 s for a 100,000-sample run, where
# parsing the run's files again took the kernel 3 to 4.5 s on the report's critical path)
# and put in `runload`'s cache while the folder is unchanged (`runload.adopt_run`);
# anything that fails leaves the notebooks to load the run themselves.
_ADOPT = """def _evalkit_adopt(path):
    try:
        import gc, pickle
        from evalkit.runfolder import runload
        gc.disable()
        try:
            with open(path, "rb") as fh:
                signature, run = pickle.load(fh)
        finally:
            gc.enable()
        runload.adopt_run(run, signature)
        gc.freeze()
    except Exception:
        pass
_evalkit_adopt({path!r})
del _evalkit_adopt
"""


class _Handoff:
    """The run as the report process read it, for its kernels: pickled into a private
    temporary folder by a child process (`offer`: 1 s for a 100,000-sample run, while
    this process concludes) that `close` removes. The pickle is this process's own
    writing, read only by the kernels it started (never a file from the run folder).
    `taken()` waits until there is a reading to take, or none will come (None)."""

    def __init__(self) -> None:
        self._offered = threading.Event()
        self._lock = threading.Lock()
        self._writer: _Forked | None = None
        self._path: Path | None = None
        self._dir: Path | None = None
        self._closed = False

    def offer(self, run: Run, signature: tuple[Any, ...] | None) -> None:
        """Pickle `run` for the kernels when its files did not change while it was read
        (`signature`); in every case, the kernels stop waiting."""
        try:
            if signature is not None:
                self._dir = Path(tempfile.mkdtemp(prefix="evalkit-report-"))
                path = self._dir / "run.pickle"
                self._writer = _Forked(lambda: _pickle_to(path, (signature, shared_cells(run))))
                self._path = path
        except OSError:  # no temporary folder: the kernels read the run themselves
            self._path = None
        finally:
            self._offered.set()

    def taken(self) -> Path | None:
        """The pickle's path once it is written, else None (none offered, or it failed:
        the notebooks then read the run themselves)."""
        self._offered.wait()
        with self._lock:
            if self._closed or self._path is None or self._writer is None:
                return None
            try:
                self._writer.result()
            except Exception:
                self._path = None
            return self._path

    def close(self) -> None:
        self._offered.set()
        with self._lock:
            self._closed = True
            if self._writer is not None:
                with contextlib.suppress(Exception):
                    self._writer.result()  # never a child left behind
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


def _pickle_to(path: Path, value: Any) -> None:
    with open(path, "wb") as fh:
        pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)


class _Forked:
    """`work()` (returning JSON-able data) run in a child process forked from this one,
    beside this process's threads: the child shares what this process has loaded (no
    copy, no reading again) and holds none of its interpreter's lock. `result()` waits
    for it: what `work` returned, or what it raised, raised here (an `EvalkitError`).
    On Linux only (elsewhere a fork beside threads is unsafe, or there is none), and
    where the fork fails, `work` runs here at `result()`. A child that has said nothing
    within `deadline_s` (one hung on a lock another thread held at the fork) is killed
    and its work is an error. The child blocks SIGINT and SIGTERM, so no interrupt can
    send it back into this process's code; it always leaves by `os._exit`.

    Why hand-written: `multiprocessing`'s fork context would pickle the work's result
    through a queue and start a resource tracker; this is one pipe and one wait."""

    def __init__(self, work: Callable[[], Any], *, deadline_s: float = 600.0, nice: int = 0) -> None:
        self._work: Callable[[], Any] | None = work
        self._nice = nice
        self._done: tuple[Any, BaseException | None] | None = None
        self._pid = 0
        self._fd = -1
        self._deadline = time.monotonic() + deadline_s
        if sys.platform.startswith("linux"):
            self._start(work)

    def _start(self, work: Callable[[], Any]) -> None:
        read, write = os.pipe()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _CHILD_BLOCKS)
        try:
            pid = os.fork()
        except OSError:  # no fork (no memory, too many processes): the work runs here
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            os.close(read)
            os.close(write)
            return
        if pid == 0:
            _child(work, read, write, self._nice)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        os.close(write)
        self._pid, self._fd = pid, read
        self._work = None  # the child has it; nothing here keeps what it holds alive

    def result(self) -> Any:
        if self._done is None:
            try:
                self._done = self._wait()
            except BaseException as exc:  # interrupted while waiting: never waited for or run again
                self._done = (None, EvalkitError(f"interrupted: {type(exc).__name__}"))
                raise
        value, error = self._done
        if error is not None:
            raise error
        return value

    def _wait(self) -> tuple[Any, BaseException | None]:
        if not self._pid:
            work, self._work = self._work, None
            try:
                return (work() if work is not None else None), None
            except Exception as exc:
                return None, exc
        pid, fd = self._pid, self._fd
        self._pid, self._fd = 0, -1
        chunks: list[bytes] = []
        killed = False
        try:
            while True:
                left = self._deadline - time.monotonic()
                # what the child already said is read even past the deadline (`result()` may
                # be asked late: the explorer's, after notebooks that took longer than it)
                if not select.select([fd], [], [], max(0.0, left))[0]:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                    break
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(fd)
            _, status = os.waitpid(pid, 0)
        if killed:
            return None, EvalkitError("the child process said nothing in time: killed")
        try:
            said = json.loads(b"".join(chunks))
        except ValueError:
            return None, EvalkitError(f"the child process ended without a result ({_ended(status)})")
        if "error" in said:
            return None, EvalkitError(str(said["error"]))
        return said["value"], None


_CHILD_BLOCKS = {signal.SIGINT, signal.SIGTERM}
# The explorer's child runs beside the hand-off and the notebooks on a 2-core machine:
# at this niceness the scheduler gives the kernel and its hand-off the cores first (the
# report waits for them), the page the rest; it is written before the last notebook is.
EXPLORER_NICE = 10


def _child(work: Callable[[], Any], read: int, write: int, nice: int = 0) -> NoReturn:
    """A `_Forked` child: run `work` (at `nice` more niceness: work off the report's
    critical path yields the cores to what is on it), write how it went to `write`, and
    leave by `os._exit` whatever happens (it must never return into the parent's code)."""
    code = 1
    payload = b'{"error": "the child process failed before it could say why"}'
    try:
        os.close(read)
        if nice:
            with contextlib.suppress(OSError):
                os.nice(nice)
        try:
            payload = json.dumps({"value": work()}).encode()
            code = 0
        except BaseException as exc:  # said to the parent, raised there
            payload = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
    except BaseException:  # even the error could not be said: the fallback payload
        pass
    finally:
        try:
            write_all(write, payload)
        finally:
            os._exit(code)


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _pageless(out_dir: Path, name: str, error: str, seconds: float = 0.0) -> NotebookReport:
    """The report of a notebook that failed before it had a page, saying why."""
    return NotebookReport(
        name=name, ipynb=out_dir / f"{name}.ipynb", html=None, sidecar=None, seconds=seconds, error=error
    )


class _Lanes:
    """The report's lanes (threads), started before the notebooks are known: with
    `reuse_kernels`, each lane starts its kernel at once and runs `warm_up` in it
    (`_WARM_UP` for a run folder), so kernel start-up, the imports and the run's loading
    happen while the caller still works (`report_run` decides what the report
    concludes meanwhile). `run` hands the lanes their notebooks and waits for them;
    `close` ends lanes that got none and stops their kernels. Each executed notebook is
    rendered to HTML on one more thread (`_render`) while its lane runs the next one in
    its kernel (another process), so a render costs a lane no time."""

    def __init__(
        self, n: int, *, reuse_kernels: bool = True, warm_up: str | None = None, handoff: _Handoff | None = None
    ) -> None:
        self.n = max(1, n)
        self.reuse_kernels = reuse_kernels
        self.warm_up = warm_up
        self.handoff = handoff
        self.todo: queue.Queue[str] = queue.Queue()
        self.go = threading.Event()
        self.cancelled = False
        self.plans: Mapping[str, Mapping[str, Any]] = {}
        self.out_dir = Path(".")
        self.source_dir: str | Path | None = None
        self.done: list[NotebookReport] = []
        self.renderer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalkit-render")
        self.rendering: list[tuple[str, Future[NotebookReport]]] = []
        self.lock = threading.Lock()
        self.launched = threading.Semaphore(0)  # one release per lane that started (or failed to start) its kernel
        self.threads = [
            threading.Thread(target=self._lane, name=f"evalkit-report-{i}", daemon=True) for i in range(self.n)
        ]
        # one lane with nothing to start ahead runs in the caller's thread, as it always did
        self.inline = self.n == 1 and not (reuse_kernels and warm_up)
        if not self.inline:
            for t in self.threads:
                t.start()

    def wait_launched(self, timeout_s: float = 30.0) -> None:
        """Wait (at most `timeout_s`) until each lane that starts a kernel ahead has its
        kernel's process launched: launching takes a lane a few tenths of a second of this
        process's interpreter, seconds when its other threads keep that busy (loading a
        large run), and the kernel's own start-up, imports and load wait for it."""
        if self.inline or not (self.reuse_kernels and self.warm_up):
            return
        deadline = time.monotonic() + timeout_s
        for _ in self.threads:
            if not self.launched.acquire(timeout=max(0.0, deadline - time.monotonic())):
                return

    def grow(self, n: int, *, ahead: bool = False) -> None:
        """At least `n` lanes; the ones added start their kernel ahead (warmed up, taking
        the hand-off) when `ahead`, else when their first notebook is known."""
        if n <= len(self.threads):
            return
        added = [
            threading.Thread(target=self._lane, args=(ahead,), name=f"evalkit-report-{i}", daemon=True)
            for i in range(len(self.threads), n)
        ]
        if self.inline:  # the one lane was to run in the caller's thread: it gets a thread too
            self.inline = False
            added = self.threads + added
        self.threads = list(dict.fromkeys(self.threads + added))
        for t in added:
            t.start()

    def run(
        self, plans: Mapping[str, Mapping[str, Any]], out_dir: str | Path, *, source_dir: str | Path | None = None
    ) -> list[NotebookReport]:
        names = sorted(plans, key=lambda n: _COST_ORDER.index(n) if n in _COST_ORDER else -1)
        self.plans, self.out_dir, self.source_dir = plans, Path(out_dir), source_dir
        for n in names:
            self.todo.put(n)
        self.go.set()
        if self.inline:
            self._lane()
        else:
            for t in self.threads:
                t.join()
        done = list(self.done)
        for name, page in self.rendering:
            try:
                done.append(page.result())
            except Exception as exc:  # never a silent success
                done.append(_pageless(self.out_dir, name, f"render failed: {type(exc).__name__}: {exc}"))
        for name in sorted(set(names) - {r.name for r in done}):  # a lane that died: never a silent success
            done.append(_pageless(self.out_dir, name, "not executed: its report lane ended early"))
        order = {n: i for i, n in enumerate(NOTEBOOKS)}
        return sorted(done, key=lambda r: order.get(r.name, len(order)))

    def _adopt(self, kc: Any) -> None:
        """The report process's reading of the run, put in the warmed-up kernel's cache
        once there is one (`_Handoff`, `_ADOPT`)."""
        if self.handoff is None:
            return
        path = self.handoff.taken()
        if path is None:
            papermill()  # imported now, not when the first notebook is due
        elif not self.cancelled:
            _run_code(
                kc,
                _ADOPT.format(path=str(path)),
                timeout_s=600,
                meanwhile=papermill,
                cancelled=lambda: self.cancelled,
            )

    def close(self) -> None:
        self.cancelled = True
        self.go.set()
        if self.handoff is not None:
            self.handoff.close()  # a lane waiting for a reading that will not come
        if not self.inline:
            for t in self.threads:
                t.join()
        self.renderer.shutdown(wait=True)

    def _lane(self, ahead: bool = True) -> None:
        kernel = None
        try:
            if ahead and self.reuse_kernels and self.warm_up:
                try:
                    try:
                        kernel = _ready_kernel(None)
                    finally:
                        self.launched.release()
                    kc = kernel.client()
                    kc.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
                    try:
                        # papermill is imported while the kernel takes the run, not while this process
                        # reads it (its entry points cost 0.6 s of the interpreter the reading holds)
                        # nor when the first notebook is due
                        _run_code(kc, self.warm_up, timeout_s=600, cancelled=lambda: self.cancelled)
                        self._adopt(kc)
                    finally:
                        kc.stop_channels()
                except Exception:  # a kernel that does not start here is started (or reported) below
                    if kernel is not None:
                        _stop_kernel(kernel)
                    kernel = None
            self.go.wait()
            while not self.cancelled:
                try:
                    name = self.todo.get_nowait()
                except queue.Empty:
                    return
                t0 = time.perf_counter()
                try:
                    if self.reuse_kernels:
                        kernel = _ready_kernel(kernel)
                    ran = _execute(name, self.plans[name], self.out_dir, source_dir=self.source_dir, km=kernel)
                except Exception as exc:  # a kernel that does not start: this notebook failed, said so
                    kernel = None
                    ran = _pageless(self.out_dir, name, f"{type(exc).__name__}: {exc}", time.perf_counter() - t0)
                if isinstance(ran, _Executed):  # rendered while this lane runs its next notebook
                    with self.lock:
                        self.rendering.append((name, self.renderer.submit(_render, ran)))
                    continue
                with self.lock:
                    self.done.append(ran)
        finally:
            if kernel is not None:
                _stop_kernel(kernel)


# Between two notebooks in one kernel: forget the first one's variables, figures and
# matplotlib settings; imported modules stay (that is the saving).
_RESET = """%reset -f
def _evalkit_reset():
    import gc, sys
    if "matplotlib.pyplot" in sys.modules:
        import matplotlib.pyplot as plt
        plt.close("all")
        plt.rcdefaults()
    gc.collect()
_evalkit_reset()
del _evalkit_reset
"""


def _await(value: Any) -> Any:
    if inspect.isawaitable(value):
        from jupyter_core.utils import ensure_event_loop  # lazy: the Jupyter stack loads only when a report runs

        return ensure_event_loop().run_until_complete(value)
    return value


def _ready_kernel(km: Any) -> Any:
    """A started kernel with a clean namespace, on this thread's event loop (the one
    nbclient uses here): `km` reset, or a new kernel when there is none or it is unusable.

    The reset goes over the shell channel alone and waits for its reply: no IOPub
    subscription, so no `wait_for_ready` (which ends by waiting for 0.2 s of silence on
    IOPub) before each reused notebook."""
    if km is not None:
        kc = None
        try:
            if _await(km.is_alive()):
                kc = km.client()
                kc.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
                if _reset_namespace(kc, timeout_s=60):
                    return km
        except Exception:  # a kernel that cannot be reset is replaced, never reused
            pass
        finally:
            if kc is not None:
                kc.stop_channels()
        _stop_kernel(km)
    from jupyter_client.manager import AsyncKernelManager  # lazy: the Jupyter stack loads only when a report runs

    km = AsyncKernelManager(kernel_name=KERNEL)
    _await(km.start_kernel(extra_arguments=KERNEL_ARGS))
    return km


def _reset_namespace(kc: Any, *, timeout_s: float) -> bool:
    """Run `_RESET` in the kernel (`_run_code`); True when it ran without error."""
    return _run_code(kc, _RESET, timeout_s=timeout_s)


# How often a lane warming its kernel up looks whether the report was given up meanwhile
# (`_run_code`'s `cancelled`): bad input found while the kernel imports, its lane stops the
# kernel within this long instead of letting it finish the imports and load for nothing.
# (A wait that times out costs the lane a wake-up: four a second are nothing to a report.)
_CANCEL_POLL_S = 0.25


def _run_code(
    kc: Any,
    code: str,
    *,
    timeout_s: float,
    meanwhile: Callable[[], object] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> bool:
    """Run `code` in the kernel and wait for its reply on the shell channel (a reply
    comes only once it has run); True when it ran without error. `meanwhile`: what this
    process does while the kernel runs it, once it is sent. `cancelled`: asked every
    `_CANCEL_POLL_S` while waiting; False at once when it says so (the kernel is then
    still busy: its caller stops it)."""
    msg_id = kc.execute(code, silent=True, store_history=False, allow_stdin=False)
    if meanwhile is not None:
        meanwhile()
    deadline = time.monotonic() + timeout_s
    while True:
        left = max(0.0, deadline - time.monotonic())
        if cancelled is not None:
            if cancelled():
                return False
            try:
                reply = _await(kc.get_shell_msg(timeout=min(left, _CANCEL_POLL_S)))
            except queue.Empty:
                if left <= _CANCEL_POLL_S:
                    raise
                continue
        else:
            reply = _await(kc.get_shell_msg(timeout=left))
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            return bool(reply["content"]["status"] == "ok")


def _stop_kernel(km: Any) -> None:
    try:
        _await(km.shutdown_kernel(now=True))
    except Exception:  # already gone
        pass


# ------------------------------------------------------------------------------ manifest and index
