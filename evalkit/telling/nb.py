"""What the notebooks call: the only ways they put run data on a page (`show_text`,
`table`, `say`, `banner`: model outputs, case inputs and judge justifications are
untrusted text, and every one escapes it), one look for every figure, and the small
questions a page asks of a loaded run. The package computes; a notebook displays what
these return and what `grade`, `compare` and `gate` wrote.
"""

from __future__ import annotations

import html
import json
import math
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from evalkit.calls.sandbox import NOT_CONTAINED
from evalkit.checking.judge import PairOutcome
from evalkit.checking.judge import read_pairwise as _read_pairwise
from evalkit.conclusions.compare import compare_arms
from evalkit.foundations import fmt
from evalkit.foundations._io import jsonable, loads_bounded, write_atomic
from evalkit.foundations._text import visible
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import PAIRWISE, RUN_CONFIG, repository_root, shown_path
from evalkit.foundations.records import GradesSummary, RunVerdicts, Verdict, judge_line, records_frame
from evalkit.numbers import stats
from evalkit.numbers.plans import load_plan
from evalkit.runfolder.runload import Run, grades_summary, load_run, report_state, run_verdicts, sample_texts
from evalkit.runfolder.runs import side_run, stopping_line
from evalkit.telling import arms as arms_mod
from evalkit.telling import failures as failures_mod
from evalkit.telling.failures import Failures

# what a verdict rests on; the samples joined with their grades; a frame of records (the trials)
__all__ = ["judge_line", "records_frame", "sample_texts"]

REDACT_ENV = "EVALKIT_REDACT"  # set for the kernels of a redacted report: `text_html` and `table_html` redact


def show_text(text: Any, *, title: str | None = None, pre: bool = True, max_chars: int = 4000) -> None:
    """Display untrusted text (a model output, case input, judge justification), escaped.

    `pre` keeps line breaks and spacing (outputs); otherwise it is a paragraph (prose
    built from run data). Text over `max_chars` is cut, and says so."""
    from IPython.display import HTML, display  # lazy: IPython is there only in a notebook's kernel

    display(HTML(text_html(text, title=title, pre=pre, max_chars=max_chars)))


def _shown(text: str) -> str:
    """Text as a page shows it: with personal data and secrets replaced while a redacted
    report renders (`evalkit report --redact` sets `EVALKIT_REDACT` for its kernels), so
    text the notebooks read from outside the redacted run (PandaLM's items) is redacted too."""
    if not os.environ.get(REDACT_ENV):
        return text
    from evalkit.pii.privacy import redact_shown  # lazy: the privacy scanner loads only for a redacted report

    return redact_shown(text)


def text_html(text: Any, *, title: str | None = None, pre: bool = True, max_chars: int = 4000) -> str:
    """The escaped HTML `show_text` displays (for callers that build a page)."""
    s = visible(_shown("" if text is None else str(text)))  # control and bidi characters as escapes
    cut = ""
    if len(s) > max_chars:
        cut = f" [... {len(s) - max_chars} more characters not shown]"
        s = s[:max_chars]
    body = html.escape(s, quote=True) + html.escape(cut)
    head = f"<div class='ek-title'><b>{html.escape(str(title))}</b></div>" if title is not None else ""
    if pre:
        return f"<div class='ek-text'>{head}<pre style='white-space:pre-wrap;margin:0.2em 0 0.6em 0'>{body}</pre></div>"
    return f"<div class='ek-text'>{head}<p>{body}</p></div>"


def table(data: Any, *, caption: str | None = None, index: bool = False, max_rows: int = 200) -> None:
    """Display a table of run data with every cell escaped (`DataFrame.to_html(escape=True)`)
    and formatted by `fmt.cell` (`-` for no data, yes/no for booleans, no scientific notation).

    `data` is a DataFrame, a list of dicts, or a dict of columns. More than `max_rows`
    rows are cut, and the table says how many were left out."""
    from IPython.display import HTML, display  # lazy: IPython is there only in a notebook's kernel

    display(HTML(table_html(data, caption=caption, index=index, max_rows=max_rows)))


def table_html(data: Any, *, caption: str | None = None, index: bool = False, max_rows: int = 200) -> str:
    """The escaped HTML `table` displays."""
    df = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    if os.environ.get(REDACT_ENV):
        df = df.map(lambda v: _shown(v) if isinstance(v, str) else v)
    more = len(df) - max_rows
    if more > 0:
        df = df.head(max_rows)
    # every cell through `visible`: a NUL, an ESC or a lone surrogate in an output is shown
    # as an escape (and the page can be written as UTF-8), never as the raw character
    shown = df.astype(object).map(lambda v: visible(fmt.cell(v))) if len(df.columns) else df
    if index:
        shown.index = [visible(fmt.cell(i)) for i in shown.index]
    out = str(shown.to_html(escape=True, index=index, border=0, classes="ek-table", na_rep=fmt.NO_DATA))
    cap = f"<div class='ek-caption'><b>{html.escape(visible(caption))}</b></div>" if caption else ""
    tail = f"<div><i>{fmt.count(more, 'more row')} not shown</i></div>" if more > 0 else ""
    return cap + out + tail


def folded_table(data: Any, *, summary: str, max_rows: int = 200) -> None:
    """`table`, folded away under a one-line `summary` the reader clicks to open."""
    from IPython.display import HTML, display  # lazy: IPython is there only in a notebook's kernel

    body = table_html(data, max_rows=max_rows)
    display(HTML(f"<details class='ek-folded'><summary>{html.escape(summary)}</summary>{body}</details>"))


def say(text: str) -> None:
    """Display a sentence the notebook built from numbers (escaped, as a paragraph)."""
    show_text(text, pre=False)


def failures_html(f: Failures) -> str:
    """The escaped HTML of a failures view: one block per case-arm (passes of samples),
    each failing sample's reasons and output, and what was left out."""
    parts = [text_html(f.summary(), pre=False)]
    for c in f.cases:
        head = f"{c.case_id} on {c.arm}: {c.passed} of {fmt.count(c.n, 'sample')} passed" + (
            " (flaky)" if c.flaky else ""
        )
        body = []
        for s in c.samples:
            out = "(no answer)" if s.output is None else s.output
            body.append(text_html(clip(out, 600), title=f"sample {s.index}: {s.why()}"))
        if c.samples_left_out:
            body.append(text_html(f"{fmt.count(c.samples_left_out, 'more failing sample')} not shown", pre=False))
        parts.append(
            f"<details class='ek-failure' open><summary><b>{html.escape(_shown(head))}</b></summary>"
            f"<div style='margin-left:1.2em'>{''.join(body)}</div></details>"
        )
    return "".join(parts)


def show_failures(run: Run, *, arms: list[str] | None = None, max_cases: int = failures_mod.MAX_CASES) -> Failures:
    """Display why each case failed (`failures.failures`), grouped by case; returns what it showed."""
    from IPython.display import HTML, display  # lazy: IPython is there only in a notebook's kernel

    f = failures_mod.failures(run, arms=arms, max_cases=max_cases)
    display(HTML(failures_html(f)))
    return f


def power_command(win_rate: float, tie_rate: float, alpha: float, power: float, suite: str = "") -> str:
    """The `evalkit power` command that pre-registers what the power widgets show (with
    `--write SUITE`, or a placeholder for the suite folder), so a plan explored with the
    sliders can be written, not copied by hand."""
    where = shlex.quote(suite) if suite else "evals/<unit>"
    return (
        f"evalkit power --win-rate {win_rate:g} --tie-rate {tie_rate:g} --alpha {alpha:g} --power {power:g} "
        f"--write {where}"
    )


def write_sidecar(name: str, numbers: Mapping[str, Any], directory: str | Path | None = None) -> Path | None:
    """Write a notebook's key numbers to `<directory>/<name>.json` (atomically), so that
    tests and the index read them without parsing HTML. No directory (a notebook opened
    by hand): nothing is written, and None is returned."""
    if not directory:
        return None
    path = Path(directory) / f"{name}.json"
    write_atomic(path, json.dumps(jsonable(dict(numbers)), indent=2, sort_keys=True, allow_nan=False) + "\n")
    return path


RUN_GLOBS = ("runs/*", "*/runs/*", "evals/*/runs/*")  # where an empty run_dir looks, under each root


def _jupyter_roots(near: Path) -> list[Path]:
    """The root folders of the Jupyter servers running on this machine that hold `near`
    (where JupyterLab was started: the folder its file browser shows as the top)."""
    roots = []
    for info in _running_servers():
        root = Path(str(info.get("root_dir") or info.get("notebook_dir") or "")).expanduser()
        if str(root) and near.is_relative_to(root.absolute()):
            roots.append(root.absolute())
    return roots


def _running_servers() -> list[dict[str, Any]]:
    """The info files of the Jupyter servers running here (`jpserver-<pid>.json` in
    Jupyter's runtime folder, as jupyter_server writes them), read as its
    `list_running_servers` reads them but without importing `jupyter_server.serverapp`:
    that import compiles jsonschema's format grammars (lark), 5.9 s of a report kernel's
    time on a 2-core machine, for a glob and a few small files. Unlike it, a reader here
    deletes no file of a dead server."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir  # lazy: only in a notebook's kernel
    except ImportError:
        return []
    found = []
    try:
        for path in Path(jupyter_runtime_dir()).glob("jpserver-*.json"):
            try:
                info = loads_bounded(path.read_text(encoding="utf-8")[:1_000_000], path)
            except (OSError, ValueError, InputError):
                continue  # being written, or not one of jupyter_server's: as list_running_servers skips it
            if isinstance(info, dict) and isinstance(info.get("pid"), int) and _alive(info["pid"]):
                found.append(info)
    except OSError:
        return found
    return found


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (jupyter_server's `check_pid` on POSIX)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # it runs, as another user
    except (OSError, OverflowError):
        return False
    return True


def search_roots() -> list[Path]:
    """Where a notebook looks for a run: the current folder (JupyterLab starts a kernel in
    the notebook's folder), the JupyterLab root it was opened from, and the repository
    that holds it; each once, in that order."""
    cwd = Path.cwd().absolute()
    repo = repository_root(cwd)
    found = [cwd, *_jupyter_roots(cwd), *([repo] if repo else [])]
    return list(dict.fromkeys(found))


def newest_run(root: str | Path | None = None) -> Path | None:
    """The newest run folder under `root` (default: each of `search_roots`, the first that
    has one): in its suite's `runs/` (`root` is a suite), its suites' (`root` is `evals/`)
    or its project's (`evals/*/runs/`); newest by the run's recorded creation time, then
    its folder name; micro-test and replay runs left out (`runs.side_run`). None when there
    is none."""
    for base in [Path(root)] if root is not None else search_roots():
        found = {p.resolve() for g in RUN_GLOBS for p in base.glob(g) if (p / RUN_CONFIG).is_file()}
        metas = {p: _meta(p) for p in found}
        found = {p for p in found if side_run(p, metas[p]) is None}
        if found:
            return max(found, key=lambda p: (str(metas[p].get("created") or ""), p.name))
    return None


def _meta(path: Path) -> dict[str, Any]:
    try:
        meta = loads_bounded((path / RUN_CONFIG).read_text(encoding="utf-8"), path / RUN_CONFIG)
    except (OSError, ValueError, InputError):
        return {}
    return meta if isinstance(meta, dict) else {}


def resolve_run(run_dir: str | Path | None) -> Path:
    """The run folder a notebook analyses: its `run_dir` parameter (`evalkit report`
    always sets it), a relative one tried against each of `search_roots` (a notebook
    opened in JupyterLab runs in notebooks/, its run_dir written from the repository's
    root); left empty, the newest run under them (`newest_run`). The page says which
    folder it used; none found is an error that names every folder it looked in."""
    p = Path(run_dir).expanduser() if run_dir else None
    if p is not None and p.is_absolute():  # `evalkit report` always passes one: no root to search
        if (p / RUN_CONFIG).exists():
            return p.resolve()
        raise InputError("not a run folder (no config.json)", p)
    roots = search_roots()
    if p is None:
        found = newest_run()
        if found is None:
            raise InputError(
                "no run_dir given and no run found under the current directory or the folders above it "
                f"(looked in {', '.join(RUN_GLOBS)} under {', '.join(shown_path(r) for r in roots)}; micro-test and "
                "replay runs are not picked): set the notebook's run_dir parameter to a run folder",
                Path.cwd(),
            )
        say(f"run_dir was empty: showing the newest run, {shown_path(found)}")
        return found
    for root in roots:
        candidate = root / p
        if (candidate / RUN_CONFIG).exists():
            if root != roots[0]:
                say(f"run_dir {str(run_dir)!r} resolved against {shown_path(root)}")
            return candidate.resolve()
    raise InputError(
        f"not a run folder (no config.json); looked for it under {', '.join(shown_path(r) for r in roots)}", p
    )


def show_summary_box(run: Run, summary: GradesSummary | None, verdicts: RunVerdicts) -> None:
    """The box at the top of a run summary (`telling.arms.summary_box`)."""
    from IPython.display import HTML, display  # lazy: IPython is there only in a notebook's kernel

    display(HTML(arms_mod.summary_box(verdicts, summary, answered_by(run))))


def answered_by(run: Run) -> str:
    """What answered the run's calls, as its record says: `scripted` for evalkit's scripted
    server, else each arm's model and endpoint host."""
    summary = run.summary or {}
    if summary.get("answered_by"):
        return str(summary["answered_by"])
    settings = run.config.get("arm_settings") or {}
    seen = {
        f"{st.get('model')} at {st.get('host') or 'an unrecorded host'}"
        for st in settings.values()
        if isinstance(st, Mapping)
    }
    return ", ".join(sorted(seen))


def show_arms(run: Run) -> None:
    """Each arm's prompt, system and guidance text, with a diff against the baseline arm
    (`telling.arms`); a text edited since the run is said to be so."""
    from IPython.display import HTML, display  # lazy: IPython is there only in a notebook's kernel

    display(HTML(arms_mod.arms_html(arms_mod.arm_texts(run.config, repository_root(run.path)))))


def setup_plots() -> None:
    """One look for every notebook's figures (PNG, embedded in the HTML)."""
    import matplotlib as mpl  # lazy: only a notebook that draws loads matplotlib

    mpl.rcParams.update(
        {
            "figure.figsize": (7.5, 3.6),
            "figure.dpi": 96,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "font.size": 9,
            "text.usetex": False,
            "axes.formatter.use_mathtext": False,
        }
    )


ARM_PALETTE = fmt.ARM_PALETTE
NEUTRAL = fmt.NEUTRAL


def arm_colors(names: list[str], order: list[str] | None = None, neutral: str | None = None) -> list[str]:
    """One colour per arm, the same on every page of a run: the arm's place in `order`
    (the run's arms, `arms_of`; default `names`) picks it from `ARM_PALETTE`; `neutral`
    names a group that is no arm (grey)."""
    order = list(order) if order is not None else [n for n in names if n != neutral]
    out = []
    for n in names:
        if n == neutral:
            out.append(NEUTRAL)
        elif n in order:
            out.append(ARM_PALETTE[order.index(n) % len(ARM_PALETTE)])
        else:
            out.append(ARM_PALETTE[(len(order) + names.index(n)) % len(ARM_PALETTE)])
    return out


def percent_axis(axis: Any) -> None:
    """Tick labels of a rate axis in percent (0% to 100%), with no offset or exponent."""
    from matplotlib.ticker import FuncFormatter  # lazy: only a notebook that draws loads matplotlib

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt.pct(v, 0)))


def money_axis(axis: Any) -> None:
    """Tick labels of a money axis as `fmt.usd` writes them (no `1e-5` offset)."""
    from matplotlib.ticker import FuncFormatter  # lazy: only a notebook that draws loads matplotlib

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt.usd(v)))


def legend_outside(ax: Any, **kwargs: Any) -> None:
    """A legend to the right of the plot area, where it covers no data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False, **kwargs)


def run_state(run: Run, summary: GradesSummary | None) -> tuple[str, str] | None:
    """What a page must say before any number: (banner kind, text) for a run with no
    sample, an ungraded run or an INCOMPLETE one (`runload.report_state`); None for a
    complete graded run."""
    return report_state(run, summary)


def not_contained(run: Run) -> str | None:
    """The line every page of a run shows when its program under test ran unsandboxed
    (``"isolation": "none"``, recorded in the run's config.json and summary.json:
    `evalkit.calls.sandbox`), else None."""
    recorded = (run.summary or {}).get("isolation") or (run.config or {}).get("isolation")
    return NOT_CONTAINED if recorded == "none" else None


def show_state(run: Run, summary: GradesSummary | None) -> tuple[str, str] | None:
    """Display `run_state` as a banner (nothing for a complete graded run), and the
    `not_contained` line first when the program under test was not sandboxed, then the
    `runs.stopping_line` of a run that stopped early with what it saved."""
    uncontained = not_contained(run)
    if uncontained is not None:
        banner("regression", uncontained)
    stopped = stopping_line(run.summary)  # a run that stopped once its test decided (until_decided)
    if stopped is not None:
        banner("pass", stopped[0].upper() + stopped[1:])
    state = run_state(run, summary)
    if state is not None:
        banner(*state)
    show_stderr_tails(run)
    return state


def show_stderr_tails(run: Run) -> None:
    """The last lines of the first errored programs' stderr (summary.json's
    `stderr_tails`, as the run wrote them: redacted), under the run's state, so a
    failing agent's traceback is on the page; nothing when none failed."""
    tails = (run.summary or {}).get("stderr_tails") or ()
    if not tails:
        return
    from IPython.display import HTML, display  # lazy: IPython is there only in a notebook's kernel

    blocks = "".join(
        f"<p>stderr of {html.escape(str(t.get('sample')))} (last lines):</p>"
        f"<pre>{html.escape(str(t.get('tail')))}</pre>"
        for t in tails
        if isinstance(t, dict)
    )
    display(HTML(f"<div class='ek-stderr-tails'>{blocks}</div>"))


def plain(label: Any) -> str:
    """A label safe for matplotlib: `$` would start mathtext (and fail on odd input)."""
    return str(label).replace("$", r"\$")


def open_run(run_dir: str | Path | None) -> Run:
    """The run a notebook analyses (`resolve_run`), loaded with `runload.load_run(...,
    cache=True)`: parsed once per process while its files are unchanged, a fresh copy
    for every notebook."""
    return load_run(resolve_run(run_dir), cache=True)


def arms_of(run: Any) -> list[str]:
    """The run's arms in config order, then any others its samples name (`Run.arm_names`)."""
    names: list[str] = run.arm_names()
    return names


def pick_arms(run: Any, baseline: str = "", treatment: str = "") -> tuple[str, str]:
    """The baseline and treatment arms of a two-arm run: the names given, else the arm
    called baseline/control/no-guidance (or the first) and the other one."""
    arms = arms_of(run)
    if not baseline:
        baseline = next((a for a in arms if a in ("baseline", "control", "no-guidance")), arms[0] if arms else "")
    if not treatment:
        treatment = next((a for a in arms if a != baseline), "")
    return baseline, treatment


_BANNER_COLORS = {
    "pass": ("#e8f5e9", "#1b5e20"),
    "regression": ("#ffebee", "#b71c1c"),
    "no-improvement": ("#f5f5f5", "#424242"),
    "inconclusive": ("#fff8e1", "#8a6d00"),
}


def banner(kind: str, text: str) -> None:
    """Display a conclusion in a coloured box (`kind`: pass, regression,
    no-improvement, inconclusive); the text is escaped."""
    from IPython.display import HTML, display  # lazy: IPython is there only in a notebook's kernel

    bg, fg = _BANNER_COLORS.get(kind, _BANNER_COLORS["no-improvement"])
    display(
        HTML(
            f"<div class='ek-banner ek-{html.escape(kind)}' style='background:{bg};color:{fg};"
            f"border-left:6px solid {fg};padding:0.6em 1em;margin:0.6em 0;font-size:1.05em'>"
            f"<b>{html.escape(str(text))}</b></div>"
        )
    )


def clip(text: Any, n: int = 200) -> str:
    """`text` cut to `n` characters, with an ellipsis when cut."""
    s = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
    return s if len(s) <= n else s[: n - 1] + "\u2026"


# Under this many units (samples for a rate, cases for a score) a rate's interval is the
# exact Clopper-Pearson one: Wilson's and the normal interval's coverage is poorest there.
SMALL_GROUP = 10


def rate_interval(rate: float | None, n: int | None, method: str | None = None) -> Any:
    """The `stats.proportion_interval` of a rate over `n` (successes = rate * n, rounded):
    Wilson, or exact Clopper-Pearson for a group under `SMALL_GROUP` (`method` forces
    one); None when there is no rate.

    References: Brown, Cai & DasGupta 2001, Statistical Science 16(2)."""
    if rate is None or not n:
        return None
    how = method or ("clopper-pearson" if int(n) < SMALL_GROUP else "wilson")
    return stats.proportion_interval(int(round(float(rate) * int(n))), int(n), method=how)


def score_interval(value: float | None, se: float | None, n: int) -> tuple[float | None, float | None]:
    """The 95% interval of a suite-level score (a mean over `n` cases of per-case values
    in [0, 1], such as pass@k): the normal interval of its SE across cases, held to [0, 1];
    for a group under `SMALL_GROUP` cases, or one whose cases all scored alike (SE 0, where
    the normal interval is a point: "0% (0% to 0%)" on three failing cases), the exact
    Clopper-Pearson interval of the score as a share of its cases. (None, None) when
    there is no score.

    References: Clopper & Pearson 1934, Biometrika 26(4); Brown, Cai & DasGupta 2001."""
    if fmt.missing(value) or value is None or not n:
        return None, None
    if int(n) < SMALL_GROUP or fmt.missing(se) or se is None or float(se) == 0.0:
        ci = rate_interval(float(value), int(n), "clopper-pearson")
        return ci.low, ci.high
    low, high = stats.Estimate(float(value), float(se), int(n)).interval()
    return max(0.0, low), min(1.0, high)


def grades(run: Run) -> GradesSummary | None:
    """The run's grades summary (`grades-summary.json`, typed), None when it is not graded."""
    return grades_summary(run)


def grades_json(run: Run) -> dict[str, Any]:
    """The run's grades summary as `grades-summary.json` holds it (the typed record's
    JSON), {} when it is not graded: for pages that show its parts as recorded."""
    s = grades_summary(run)
    return s.to_json() if s is not None else {}


def verdicts(run: Run) -> RunVerdicts:
    """What compare, gate and report concluded about the run (`verdicts.json`)."""
    return run_verdicts(run)


def comparison(run: Run, baseline: str, treatment: str, plan: str = "", judge: str = "") -> Verdict:
    """The two-arm verdict `evalkit report` (or `compare`) recorded for these arms (and,
    when `judge` is named, resting on that judge), or, in a notebook opened by hand on a
    run with none, the same verdict computed now (`compare.compare_arms`, held to `plan`
    when one is named; `judge` empty: the suite's `verdict_judge`)."""
    recorded = run_verdicts(run).comparison(baseline, treatment)
    if recorded is not None and (not judge or recorded.judge == judge):
        return recorded
    p = load_plan(plan) if plan else None
    return compare_arms(run, baseline, treatment, judge=judge or None, alpha=p.alpha if p else 0.05, plan=p)


def arm_matrix(run: Run) -> dict[str, Any] | None:
    """A run of more than two arms: the comparisons `compare` (or `report`) recorded,
    every pair Holm-corrected (`records.ArmComparisons`), as a caption and one table row
    per pair; None for a run of two arms or none recorded."""
    m = run_verdicts(run).arm_comparisons
    if m is None:
        return None
    rows = [
        {
            "baseline": v.baseline_arm,
            "treatment": v.treatment_arm,
            "wins": v.wins,
            "ties": v.ties,
            "losses": v.losses,
            "errored": v.errored,
            "p (two-sided)": fmt.pvalue(v.p_value),
            "p (Holm)": fmt.pvalue(q),
            "verdict (corrected)": v.kind,
        }
        for v, q in zip(m.pairs, m.p_adjusted, strict=True)
    ]
    how = f"{m.control} against each other arm" if m.control else "every pair"
    caption = (
        f"{len(m.arms)} arms ({', '.join(m.arms)}): {how}, {len(m.pairs)} comparisons, exact sign test per pair, "
        f"Holm-corrected across the pairs at alpha {m.alpha:g}."
    )
    return {"caption": caption, "rows": rows}


def read_pairwise(run: Run) -> list[PairOutcome]:
    """The pairwise judge's outcomes of a run (`pairwise.jsonl`), none when it has none."""
    return _read_pairwise(Path(run.path) / PAIRWISE)


PANDALM_JUDGES = {
    "gpt-3.5-turbo": ("gpt-3.5-turbo-testset-v1.json", "gpt"),
    "pandalm-7b": ("pandalm-7b-testset-v1.json", "pandalm"),
}


def load_pandalm(directory: str | Path, judge: str = "gpt-3.5-turbo") -> Any:
    """PandaLM's pairwise test set with one judge's verdicts, one row per item:
    `idx`, `instruction`, `annotator1..3` and their majority `human`, the judge's
    `judge` label and `judge_reason`, `malformed` (the judge's answer was not 1, 2, 0 or
    Tie). Labels are "0" (tie), "1" (response 1 better), "2" (response 2 better); a
    judge's "Tie" or unparseable answer counts as "0", the source's convention."""
    d = Path(directory)
    if judge not in PANDALM_JUDGES:
        raise InputError(f"unknown PandaLM judge {judge!r}; known: {', '.join(PANDALM_JUDGES)}")
    fname, prefix = PANDALM_JUDGES[judge]
    try:
        items = json.loads((d / "testset-v1.json").read_text(encoding="utf-8"))
        answers = json.loads((d / fname).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read the PandaLM data: {exc.strerror}", exc.filename) from None
    by_idx = {int(a["idx"]): a for a in answers}
    rows = []
    for it in items:
        votes = [str(it[f"annotator{i}"]) for i in (1, 2, 3)]
        top = max(set(votes), key=votes.count)
        if votes.count(top) < 2:
            continue  # no majority among three: no human label (none in the published set)
        a = by_idx.get(int(it["idx"]))
        raw = None if a is None else str(a.get(f"{prefix}_result"))
        label = raw if raw in ("0", "1", "2") else "0"
        rows.append(
            {
                "idx": int(it["idx"]),
                "instruction": it.get("instruction"),
                "annotator1": votes[0],
                "annotator2": votes[1],
                "annotator3": votes[2],
                "human": top,
                "judge": label,
                "judge_raw": raw,
                "malformed": raw not in ("0", "1", "2", "Tie"),
                "judge_reason": None if a is None else a.get(f"{prefix}_reason"),
            }
        )
    return pd.DataFrame(rows)


def read_sidecar(directory: str | Path, name: str) -> dict[str, Any] | None:
    """A notebook's sidecar numbers, or None when it did not write one."""
    p = Path(directory) / f"{name}.json"
    if not p.exists():
        return None
    data: dict[str, Any] = json.loads(p.read_text(encoding="utf-8"))
    return data


def judged_rate_rows(judged: Mapping[str, Any] | None) -> list[dict[str, str]]:
    """The judged rates of `grades-summary.json`'s `judged_rates` as table rows, one per
    group (all samples, each arm, its sets and tags): the corrected rate first where
    people labelled enough of the group, then the judge-only rate, the human labels'
    own rate and the judge's bias, each with its 95% interval. [] without judged
    samples. The numbers are `grading.judged_rates`'; this only formats them."""
    if not judged:
        return []
    groups: list[tuple[str, str, Mapping[str, Any]]] = [("all arms (pooled)", "all judged samples", judged["overall"])]
    for arm, blocks in (judged.get("per_arm") or {}).items():
        groups.append((arm, "all judged samples", blocks["overall"]))
        groups += [(arm, f"set {s}", b) for s, b in (blocks.get("per_set") or {}).items()]
        groups += [(arm, f"tag {t}", b) for t, b in (blocks.get("per_tag") or {}).items()]
    rows = []
    for arm, group, b in groups:
        jo, cor, bias, human = b["judge_only"], b.get("corrected"), b.get("bias"), b.get("human") or {}
        rows.append(
            {
                "arm": arm,
                "group": group,
                "corrected (95% CI)": fmt.pct_ci(cor["rate"], cor["low"], cor["high"]) if cor else fmt.NO_DATA,
                "labelled n / judged N": f"{cor['n'] if cor else human.get('n', 0)} / {jo['N']}",
                "judge only (95% CI)": fmt.pct_ci(jo["rate"], jo["low"], jo["high"]),
                "human labels alone": fmt.pct(human.get("rate")),
                "judge bias (95% CI)": (
                    f"{fmt.points(bias['value'])} ({fmt.points(bias['low'])} to {fmt.points(bias['high'])})"
                    if bias
                    else fmt.NO_DATA
                ),
                "note": "; ".join(x.get("clipped") or "" for x in (cor or {}, bias or {}) if x.get("clipped")),
            }
        )
    return rows


def consistency_rows(consistency: Mapping[str, Any] | None) -> list[dict[str, str]]:
    """`grades-summary.json`'s `judge_consistency` (`grade --judge-repeats`) as table
    rows, one per rubric version: items re-asked, asks per item, flip rate and the share
    of items whose verdict straddles the threshold. [] when the judge was asked once."""
    if not consistency:
        return []
    return [
        {
            "rubric": version,
            "items re-asked": str(v["n_items"]),
            "asks per item": str(v["repeats"]),
            "flip rate": fmt.pct(v["flip_rate"]),
            "straddling the threshold": fmt.pct(v["straddle_share"]),
            "score changes": fmt.pct(v["score_change_share"]),
            "unstable items": ", ".join(v["unstable"][:10]) + (" ..." if len(v["unstable"]) > 10 else ""),
        }
        for version, v in (consistency.get("per_version") or {}).items()
    ]


def arms_differ(run: Run, baseline: str, treatment: str) -> str:
    """What the two compared arms differ by (`telling.arms.what_differs`)."""
    texts = arms_mod.arm_texts(run.config, repository_root(run.path))
    return arms_mod.what_differs(run.config, texts, baseline, treatment)
