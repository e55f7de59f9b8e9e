"""Shareable reports: papermill notebooks rendered to self-contained HTML, and the index.

`report_run` decides which notebooks in `evalkit/notebooks/` (package data, so a wheel
has them; `EVALKIT_NOTEBOOKS` names a folder of your own instead) apply to a run
folder, executes them with papermill (kernel `python3`) in parallel, renders each to one
HTML file with nbconvert (images embedded as data URIs, code hidden, the parameters as a
table at the top) into `reports/<run>/` beside the executed `.ipynb`, and rebuilds
`reports/index.html` from every run's `report.json` manifest. A notebook that cannot
run (not found, a kernel that does not start, an error in a cell) is a failed notebook
in the result, never an exception in a worker thread; `ReportResult.ok` is then False
and `evalkit report` exits 1.

The notebooks call the helpers here for everything they share: `show_text` and `table`
are the only ways they put run data (model outputs, case inputs, judge justifications:
untrusted text) on the page, and both escape it; `write_sidecar` records a notebook's key
numbers as JSON so tests and the index can read them without parsing HTML.

Why hand-written: papermill executes and nbconvert renders, but neither decides which
notebooks apply to a run, collects numbers across runs, or builds an index; the index's
trend lines are a few lines of inline SVG (no plotting library is worth starting in the
parent process for a sparkline).
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ._text import visible
from .errors import EvalkitError, InputError

KERNEL = "python3"
# Kernels log a warning per start about plain-text TCP on loopback; reports are batch
# jobs, so only errors from the kernel process itself reach the user's terminal.
KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
NOTEBOOKS: tuple[str, ...] = (
    "run_summary",
    "pass_at_k",
    "skill_comparison",
    "judge_calibration",
    "power_planning",
    "micro_test",
    "replay",
)
TITLES = {
    "run_summary": "Run summary",
    "pass_at_k": "pass@k and pass^k",
    "skill_comparison": "Skill comparison",
    "judge_calibration": "Judge calibration",
    "power_planning": "Power planning",
    "micro_test": "Micro-test",
    "replay": "Replay",
}
MANIFEST = "report.json"
REDACT_ENV = "EVALKIT_REDACT"  # set for the kernels of a redacted report: `text_html` and `table_html` redact
MICROTEST_MARKER = "microtest.json"  # written into a run folder by `evalkit microtest`
# The page may load nothing from anywhere: no script at all, images and fonts only as
# data URIs, styles inline. Escaping is the defence; this policy is the second line.
CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:; "
    "script-src 'none'; base-uri 'none'; form-action 'none'"
)


class ReportError(EvalkitError):
    """A notebook failed to execute or render; its HTML still shows the error."""


# ------------------------------------------------------------------------------ notebook helpers


def show_text(text: Any, *, title: str | None = None, pre: bool = True, max_chars: int = 4000) -> None:
    """Display untrusted text (a model output, case input, judge justification), escaped.

    `pre` keeps line breaks and spacing (outputs); otherwise it is a paragraph (prose
    built from run data). Text over `max_chars` is cut, and says so."""
    from IPython.display import HTML, display

    display(HTML(text_html(text, title=title, pre=pre, max_chars=max_chars)))


def _shown(text: str) -> str:
    """Text as a page shows it: with personal data and secrets replaced while a redacted
    report renders (`evalkit report --redact` sets `EVALKIT_REDACT` for its kernels), so
    text the notebooks read from outside the redacted run (PandaLM's items) is redacted too."""
    if not os.environ.get(REDACT_ENV):
        return text
    from .privacy import redact_shown

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


def table(
    data: Any, *, caption: str | None = None, index: bool = False, max_rows: int = 200, float_format: str = "{:.4g}"
) -> None:
    """Display a table of run data with every cell escaped (`DataFrame.to_html(escape=True)`).

    `data` is a DataFrame, a list of dicts, or a dict of columns. More than `max_rows`
    rows are cut, and the table says how many were left out."""
    from IPython.display import HTML, display

    display(HTML(table_html(data, caption=caption, index=index, max_rows=max_rows, float_format=float_format)))


def table_html(
    data: Any, *, caption: str | None = None, index: bool = False, max_rows: int = 200, float_format: str = "{:.4g}"
) -> str:
    """The escaped HTML `table` displays."""
    import pandas as pd

    df = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    if os.environ.get(REDACT_ENV):
        df = df.map(lambda v: _shown(v) if isinstance(v, str) else v)
    more = len(df) - max_rows
    if more > 0:
        df = df.head(max_rows)

    def fmt(v: Any) -> str:
        return (
            float_format.format(v)
            if isinstance(v, float) and not math.isnan(v)
            else ("" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
        )

    out = df.to_html(
        escape=True, index=index, border=0, classes="ek-table", na_rep="", float_format=lambda v: fmt(float(v))
    )
    cap = f"<div class='ek-caption'><b>{html.escape(caption)}</b></div>" if caption else ""
    tail = f"<div><i>{more} more row(s) not shown</i></div>" if more > 0 else ""
    return cap + out + tail


def say(text: str) -> None:
    """Display a sentence the notebook built from numbers (escaped, as a paragraph)."""
    show_text(text, pre=False)


def jsonable(obj: Any) -> Any:
    """`obj` as plain JSON: numpy scalars to Python, NaN/inf to None, tuples to lists,
    dataclasses to dicts."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if hasattr(obj, "item"):  # numpy scalar
        return jsonable(obj.item())
    if hasattr(obj, "tolist"):  # numpy array
        return jsonable(obj.tolist())
    return str(obj)


def write_sidecar(name: str, numbers: Mapping[str, Any], directory: str | Path | None = None) -> Path | None:
    """Write a notebook's key numbers to `<directory>/<name>.json` (atomically), so that
    tests and the index read them without parsing HTML. No directory (a notebook opened
    by hand): nothing is written, and None is returned."""
    if not directory:
        return None
    from .runs import write_atomic

    path = Path(directory) / f"{name}.json"
    write_atomic(path, json.dumps(jsonable(dict(numbers)), indent=2, sort_keys=True, allow_nan=False) + "\n")
    return path


def read_sidecar(directory: str | Path, name: str) -> dict[str, Any] | None:
    """A notebook's sidecar numbers, or None when it did not write one."""
    p = Path(directory) / f"{name}.json"
    if not p.exists():
        return None
    return json.loads(p.read_text(encoding="utf-8"))


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


NOTEBOOKS_ENV = "EVALKIT_NOTEBOOKS"


def notebooks_dir() -> Path:
    """Where the notebooks are: `EVALKIT_NOTEBOOKS` (a folder of your own versions),
    else `evalkit/notebooks/`, package data of the checkout and of an installed wheel."""
    env = os.environ.get(NOTEBOOKS_ENV)
    return Path(env) if env else Path(__file__).resolve().parent / "notebooks"


def default_pandalm_dir() -> Path | None:
    """The PandaLM data a report calibrates the judge on as well: `EVALKIT_PANDALM`, else
    `../shared/data/pandalm` beside the checkout, when it is there."""
    env = os.environ.get("EVALKIT_PANDALM")
    cand = Path(env) if env else repo_root().parent / "shared" / "data" / "pandalm"
    return cand.resolve() if (cand / "testset-v1.json").exists() else None


def resolve_run(run_dir: str | Path | None) -> Path:
    """The run folder a notebook analyses: `run_dir`, or when it is empty (a notebook
    opened by hand) the newest run folder in this checkout (`*/*/runs/*`)."""
    if run_dir:
        p = Path(run_dir).expanduser()
        if not (p / "config.json").exists():
            raise InputError("not a run folder (no config.json)", p)
        return p.resolve()
    root = repo_root()
    runs = [p for pat in ("data/*/runs/*", "evals/*/runs/*") for p in root.glob(pat) if (p / "config.json").exists()]
    if not runs:
        raise InputError(
            "no run_dir given and no run folder found under data/*/runs or evals/*/runs: set the run_dir parameter"
        )
    return max(runs, key=lambda p: p.stat().st_mtime).resolve()


def setup_plots() -> None:
    """One look for every notebook's figures (PNG, embedded in the HTML)."""
    import matplotlib as mpl

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


def plain(label: Any) -> str:
    """A label safe for matplotlib: `$` would start mathtext (and fail on odd input)."""
    return str(label).replace("$", r"\$")


# ------------------------------------------------------------------------------ run analysis helpers


# A reused kernel (see `run_notebooks`) runs several notebooks on the same run; parsing
# results.jsonl and grades.jsonl is the largest per-notebook cost after the imports, so
# the parsed run is kept in this module (which `%reset -f` leaves alone), keyed by the
# folder and the size and mtime of every file in it: a run that changed is read again.
_RUN_CACHE: dict[Path, tuple[tuple[Any, ...], Any]] = {}
_RUN_CACHE_LOCK = threading.Lock()


def _run_signature(path: Path) -> tuple[Any, ...]:
    return tuple(
        sorted((e.name, st.st_size, st.st_mtime_ns) for e in os.scandir(path) if e.is_file() and (st := e.stat()))
    )


def load_run(run_dir: str | Path | None) -> Any:
    """`runs.load_run` of `resolve_run(run_dir)`, parsed once per process while the
    folder's files are unchanged. Each call gets its own copy of the config, summary and
    DataFrames, so one notebook's edits never reach the next."""
    import copy
    import dataclasses

    from .runs import load_run as _load

    path = resolve_run(run_dir)
    sig = _run_signature(path)
    with _RUN_CACHE_LOCK:
        hit = _RUN_CACHE.get(path)
    if hit is None or hit[0] != sig:
        run = _load(path)
        if _run_signature(path) == sig:  # not written to while it was read
            with _RUN_CACHE_LOCK:
                _RUN_CACHE.clear()  # one run per report: keep memory flat across runs
                _RUN_CACHE[path] = (sig, run)
    else:
        run = hit[1]
    return dataclasses.replace(
        run,
        config=copy.deepcopy(run.config),
        summary=copy.deepcopy(run.summary),
        samples=run.samples.copy(),
        grades=run.grades.copy(),
        ledger=run.ledger.copy(),
        errors=run.errors.copy(),
    )


def arms_of(run: Any) -> list[str]:
    """The run's arms in config order, then any others its samples name (`Run.arm_names`)."""
    return run.arm_names()


def pick_arms(run: Any, baseline: str = "", treatment: str = "") -> tuple[str, str]:
    """The baseline and treatment arms of a two-arm run: the names given, else the arm
    called baseline/control/no-guidance (or the first) and the other one."""
    arms = arms_of(run)
    if not baseline:
        baseline = next((a for a in arms if a in ("baseline", "control", "no-guidance")), arms[0] if arms else "")
    if not treatment:
        treatment = next((a for a in arms if a != baseline), "")
    return baseline, treatment


def suite_path(run: Any) -> Path | None:
    """The run's suite folder, when it still exists, wherever the report runs from."""
    from .runs import find_suite_dir

    return find_suite_dir(run.path, run.config.get("suite"))


_BANNER_COLORS = {
    "pass": ("#e8f5e9", "#1b5e20"),
    "regression": ("#ffebee", "#b71c1c"),
    "no-improvement": ("#f5f5f5", "#424242"),
    "inconclusive": ("#fff8e1", "#8a6d00"),
}


def banner(kind: str, text: str) -> None:
    """Display a conclusion in a coloured box (`kind`: pass, regression,
    no-improvement, inconclusive); the text is escaped."""
    from IPython.display import HTML, display

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


def rate_interval(rate: float | None, n: int | None, method: str = "wilson") -> Any:
    """The `stats.proportion_interval` of a rate over `n` (successes = rate * n, rounded),
    or None when there is no rate."""
    from . import stats

    if rate is None or not n:
        return None
    return stats.proportion_interval(int(round(float(rate) * int(n))), int(n), method=method)


def load_grades_summary(run: Any) -> dict[str, Any] | None:
    """The run's `grades-summary.json` (written by `evalkit grade`), or None."""
    from .runs import RUN_JSON_BYTES
    from .suite import read_json_object

    p = Path(run.path) / "grades-summary.json"
    return read_json_object(p, "grades-summary.json", limit=RUN_JSON_BYTES) if p.exists() else None


def summary_from_grades(run: Any) -> dict[str, Any] | None:
    """The part of a grades summary that needs no suite, from `grades.jsonl` and the
    samples: success rate, latency p50/p95 and cost per task, overall, per arm and per
    arm and tag. For runs ingested from other tools, which carry grades but no
    `grades-summary.json`. A sample without a passing grade is never a pass; the
    denominator is every sample plus every errored key. None when there are no grades."""
    import numpy as np

    s, g = run.samples, run.grades
    if not len(g):
        return None
    ok = {(str(r.case_id), str(r.arm), int(r.index)): is_pass(r.passed) for r in g.itertuples()}
    graded = {
        (str(r.case_id), str(r.arm), int(r.index))
        for r in g.itertuples()
        if r.passed is not None and not (isinstance(r.passed, float) and math.isnan(r.passed))
    }
    err_arms = [str(a) for a in run.errors["arm"]] if len(run.errors) else []

    def block(rows: Any, n_errors: int) -> dict[str, Any]:
        keys = [(str(r.case_id), str(r.arm), int(r.index)) for r in rows.itertuples()]
        lat = [float(x) for x in rows["latency_ms"] if x is not None and not math.isnan(float(x))]
        expected = len(keys) + n_errors
        cost = float(np.nansum([float(x) for x in rows["cost_usd"] if x is not None])) if len(rows) else 0.0
        return {
            "n_expected": expected,
            "n_graded": sum(k in graded for k in keys),
            "n_missing": 0,
            "n_errored": n_errors + sum(k not in graded for k in keys),
            "success_rate": (sum(ok.get(k, False) for k in keys) / expected) if expected else None,
            "latency_p50_ms": float(np.percentile(lat, 50)) if lat else None,
            "latency_p95_ms": float(np.percentile(lat, 95)) if lat else None,
            "cost_per_task_usd": cost / len(keys) if keys else None,
        }

    per_arm = {}
    for arm in arms_of(run):
        rows = s[s["arm"] == arm]
        tags = sorted({t for ts in rows["tags"] for t in (ts or ())})
        per_arm[arm] = {
            "overall": block(rows, err_arms.count(arm)),
            "per_tag": {t: block(rows[rows["tags"].map(lambda ts, t=t: t in (ts or ()))], 0) for t in tags},
        }
    return {
        "overall": block(s, len(err_arms)),
        "per_arm": per_arm,
        "findings": [],
        "derived_from": "grades.jsonl (no grades-summary.json)",
    }


def read_pairwise(run: Any) -> list[Any]:
    """The pairwise judge's outcomes (`pairwise.jsonl`) as `judge.PairOutcome`s."""
    from .judge import read_pairwise as read

    return read(Path(run.path) / "pairwise.jsonl")


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
    import pandas as pd

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


def flag_outputs(samples: Any, pattern: str = "") -> Any:
    """Which outputs show the failure: those matching `pattern` (a regex, searched with
    a timeout since outputs are untrusted), or with no pattern those whose grade did not
    pass (a missing or null grade is flagged: it was not shown to be free of the failure)."""
    import pandas as pd

    if pattern:
        import regex

        rx = regex.compile(pattern)

        def hit(text: Any) -> bool:
            try:
                return rx.search("" if text is None else str(text), timeout=1.0) is not None
            except TimeoutError:
                return True  # could not be cleared: show it to the reader

        return samples["output"].map(hit).astype(bool)
    return samples["passed"].map(lambda v: not is_pass(v)).astype(bool) if len(samples) else pd.Series(dtype=bool)


def is_pass(value: Any) -> bool:
    """A grade's `passed` as a strict pass: True (Python or numpy) only; None, NaN (no
    grade) and False are not passes."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    try:
        return bool(value) is True and str(value) in ("True", "1", "1.0")
    except (TypeError, ValueError):
        return False


_SHAPE_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SHAPE_DIGITS = re.compile(r"\d+")
_SHAPE_SPACE = re.compile(r"\s+")


def answer_shape(text: Any, words: int = 8) -> str:
    """The shape of an answer, to count how many different answers repetitions give:
    the first non-empty line's first `words` words, case-folded, digits and punctuation
    folded, plus its number of non-empty lines. Why hand-written: no library defines
    an answer's shape; this is the seed practice's "same shape" made countable."""
    s = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
    lines = [ln for ln in s.splitlines() if ln.strip()]
    if not lines:
        return "(empty)"
    first = _SHAPE_DIGITS.sub("#", lines[0].casefold())
    first = _SHAPE_SPACE.sub(" ", _SHAPE_PUNCT.sub(" ", first)).strip()
    head = " ".join(first.split(" ")[:words]) or "(punctuation)"
    return f"{head} [{len(lines)} line{'s' if len(lines) != 1 else ''}]"


def sample_texts(run: Any) -> Any:
    """Samples joined with their grades: case_id, arm, index, output, passed, reasons
    (the failed checks' reasons), judge_score, judge_reason."""
    import pandas as pd

    s = run.samples
    cols = ["case_id", "arm", "index", "output"]
    base = s[cols].copy() if len(s) else pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    g = run.grades
    if len(g):
        gg = g[["case_id", "arm", "index", "passed", "checks", "judge_score", "judge_reason"]].copy()
        gg["reasons"] = gg["checks"].map(
            lambda cs: "; ".join(
                f"{c.get('name')}: {c.get('reason')}" for c in (cs or []) if not c.get("passed") and c.get("reason")
            )
        )
        gg = gg.drop(columns=["checks"])
        base = base.merge(gg, on=["case_id", "arm", "index"], how="left")
    else:
        for c in ("passed", "reasons", "judge_score", "judge_reason"):
            base[c] = None
    return base


# ------------------------------------------------------------------------------ planning


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

    @property
    def ok(self) -> bool:
        return all(n.ok for n in self.notebooks)


def plan_notebooks(run_dir: str | Path, out_dir: str | Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Which notebooks apply to a run, with their papermill parameters, and why the
    others do not. Reads only the run folder's small files (no samples)."""
    from .runs import RunFolder, config_arm_names, find_suite_dir

    run = Path(run_dir).resolve()
    meta = RunFolder(run).read_meta()
    arms = config_arm_names(meta)
    graded = (run / "grades.jsonl").exists()
    base = {"run_dir": str(run), "report_dir": str(Path(out_dir).resolve())}
    plans: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    plans["run_summary"] = dict(base)
    if graded:
        plans["pass_at_k"] = dict(base)
    else:
        skipped["pass_at_k"] = "the run is not graded (run `evalkit grade` first)"
    if len(arms) == 2 and graded:
        bl, tr = arms if arms[0] in ("baseline", "control") or arms[1] not in ("baseline", "control") else arms[::-1]
        plans["skill_comparison"] = {**base, "baseline": bl, "treatment": tr}
    else:
        skipped["skill_comparison"] = (
            "needs exactly two arms" if len(arms) != 2 else "the run is not graded (run `evalkit grade` first)"
        )
    suite = find_suite_dir(run, meta.get("suite"))
    from .judge import HUMAN_LABELS_FILE

    human = suite / HUMAN_LABELS_FILE if suite is not None else None
    has_judge_scores = graded and _grades_have_judge(run / "grades.jsonl")
    has_judge = bool((meta.get("config") or {}).get("judge")) if isinstance(meta.get("config"), dict) else False
    if has_judge_scores or has_judge or (human is not None and human.exists()):
        plans["judge_calibration"] = dict(base)
        pandalm = default_pandalm_dir()
        if pandalm is not None:
            plans["judge_calibration"]["pandalm_dir"] = str(pandalm)
    else:
        skipped["judge_calibration"] = "no judge, no judge scores and no human labels"
    if len(arms) >= 2 or (suite is not None and (suite / "plan.json").exists()):
        plans["power_planning"] = {**base, "interactive": False}
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
    from .trajectories import TRAJECTORIES

    if (run / TRAJECTORIES).is_dir():  # an agent unit's run (evalkit.agents): its trajectories side by side
        plans["replay"] = dict(base)
    else:
        skipped["replay"] = "no trajectories (not an agent unit's run)"
    return plans, skipped


def _grades_have_judge(path: Path) -> bool:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if '"judge_score": null' in line or '"judge_score"' not in line:
                continue
            try:
                if json.loads(line).get("judge_score") is not None:
                    return True
            except json.JSONDecodeError:
                continue
    return False


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
    import papermill as pm

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
    page = None
    if dst.exists():
        try:
            page = render_html(dst, parameters, title=title or TITLES.get(name, name))
        except Exception as exc:  # a render failure must not hide the execution result
            error = error or f"render failed: {type(exc).__name__}: {exc}"
    side = out / f"{name}.json"
    return NotebookReport(
        name=name,
        ipynb=dst,
        html=page,
        sidecar=side if side.exists() else None,
        seconds=time.perf_counter() - t0,
        error=error,
    )


# An exporter registers filters on itself on every call, so two threads must not share
# one at the same time; building one (traitlets, the Jinja environment, the template) is
# the largest fixed cost of a render, so finished exporters wait here for the next page,
# across lanes and across runs.
_EXPORTERS: list[Any] = []
_EXPORTERS_LOCK = threading.Lock()


def _new_exporter() -> Any:
    import logging

    from nbconvert import HTMLExporter

    log = logging.getLogger("evalkit.reports.nbconvert")
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
    body, _ = exp.from_notebook_node(nb, resources=resources)
    with _EXPORTERS_LOCK:
        _EXPORTERS.append(exp)
    return body


def params_table_html(parameters: Mapping[str, Any], title: str) -> str:
    """The header of a report page: its title and the parameters it ran with (escaped)."""
    rows = "".join(
        f"<tr><td><code>{html.escape(str(k))}</code></td><td>{html.escape(json.dumps(v))}</td></tr>"
        for k, v in parameters.items()
    )
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return (
        f"<h1>{html.escape(title)}</h1><p>Rendered {html.escape(stamp)} by <code>evalkit report</code>. "
        f"Parameters:</p><table class='ek-params'><thead><tr><th>parameter</th><th>value</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


_NOTICE_STYLE = "background:#fff8e1;color:#8a6d00;border-left:6px solid #8a6d00;padding:0.5em 1em"


def render_html(ipynb: str | Path, parameters: Mapping[str, Any], *, title: str) -> Path:
    """Render an executed notebook to a self-contained HTML page beside it: no code,
    images as data URIs, the parameters as a table first, and a content security
    policy that allows no script and no outside resource."""
    import nbformat

    src = Path(ipynb)
    nb = nbformat.read(src, as_version=4)
    from .grading import judge_trust_notice

    header = nbformat.v4.new_code_cell(source="")
    head = params_table_html(parameters, title)
    notice = judge_trust_notice(parameters.get("run_dir"))
    if notice:  # on every page of the run: the judge's pass/fail is held, or counts by opt-out
        head += f"<p class='ek-judge-notice' style='{_NOTICE_STYLE}'><b>{html.escape(notice)}</b></p>"
    header.outputs = [nbformat.v4.new_output("display_data", data={"text/html": head})]
    # the injected-parameters cell has no output; drop it so the page starts with the table
    nb.cells = [header] + [c for c in nb.cells if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    body = _export(nb, {"metadata": {"name": title}})
    body = _harden(body)
    from .runs import write_atomic

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
) -> ReportResult:
    """Execute and render every notebook that applies to `run_dir` (or those named in
    `notebooks`) into `reports_dir/<run>/`, write the run's manifest and rebuild
    `reports_dir/index.html`. Notebooks run in lanes sized to the cores when `parallel`;
    see `run_notebooks` for `reuse_kernels`. `redact`: the notebooks read a copy of the
    run with every detected personal value and secret replaced by a typed placeholder
    (`evalkit.privacy.redact_run`, made in a temporary folder outside the report folder
    and removed once the pages are rendered: the report folder is what gets shared), the
    run's report folder is made anew, and every file written, the index included, is
    checked to hold none of the replaced values and nothing the scanner detects."""
    t0 = time.perf_counter()
    run = Path(run_dir)
    if not (run / "config.json").exists():
        raise InputError("not a run folder (no config.json)", run)
    run = run.resolve()
    out_dir = Path(reports_dir) / run.name
    source, redacted = run, None  # the folder the notebooks read
    if redact:
        import shutil
        import tempfile

        from . import privacy

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
        return _render_run(
            run,
            source,
            redacted,
            out_dir,
            reports_dir,
            notebooks,
            parallel,
            source_dir,
            extra_parameters,
            workers,
            reuse_kernels,
            t0,
        )
    finally:
        if redacted is not None:
            shutil.rmtree(Path(redacted.path).parent, ignore_errors=True)  # the copy is no part of the report


def _render_run(
    run: Path,
    source: Path,
    redacted: Any,
    out_dir: Path,
    reports_dir: str | Path,
    notebooks: Sequence[str] | None,
    parallel: bool,
    source_dir: str | Path | None,
    extra_parameters: Mapping[str, Mapping[str, Any]] | None,
    workers: int | None,
    reuse_kernels: bool,
    t0: float,
) -> ReportResult:
    """`report_run` once the folder the notebooks read (`source`: the run, or its
    redacted copy) is known."""
    plans, skipped = plan_notebooks(source, out_dir)
    if notebooks:
        unknown = [n for n in notebooks if n not in NOTEBOOKS]
        if unknown:
            raise InputError(f"unknown notebook(s) {', '.join(unknown)}; known: {', '.join(NOTEBOOKS)}")
        for n in notebooks:
            if n not in plans:
                raise InputError(f"notebook {n} does not apply to this run: {skipped.get(n, 'unknown')}", run)
        plans = {n: p for n, p in plans.items() if n in notebooks}
    for name, extra in (extra_parameters or {}).items():
        if name in plans:
            plans[name].update(extra)
    out_dir.mkdir(parents=True, exist_ok=True)
    before = os.environ.get(REDACT_ENV)
    if redacted is not None:
        os.environ[REDACT_ENV] = "1"  # the kernels started for these notebooks inherit it
    try:
        results = run_notebooks(
            plans, out_dir, parallel=parallel, source_dir=source_dir, workers=workers, reuse_kernels=reuse_kernels
        )
    finally:
        if redacted is not None and before is None:
            os.environ.pop(REDACT_ENV, None)
    write_manifest(source, out_dir, results, skipped, run_dir=run)
    index = build_index(reports_dir)
    if redacted is not None:
        from . import privacy

        privacy.verify_redacted(redacted, [out_dir, index])
    return ReportResult(
        run_dir=run,
        out_dir=out_dir.resolve(),
        index=index,
        notebooks=tuple(results),
        skipped=skipped,
        seconds=time.perf_counter() - t0,
    )


# Slowest first, so the pool is not left waiting on one long notebook at the end.
_COST_ORDER = (
    "judge_calibration",
    "pass_at_k",
    "run_summary",
    "power_planning",
    "skill_comparison",
    "replay",
    "micro_test",
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
    cores when `parallel`; each lane takes the next notebook from a shared queue.

    With `reuse_kernels` each lane starts one kernel and runs its notebooks in it one
    after another, clearing the namespace (`%reset -f`, figures closed, matplotlib
    defaults restored) between them: a notebook then pays for kernel start-up and the
    imports of pandas, scipy and matplotlib once per lane instead of once per notebook.
    A kernel that died or cannot be reset is replaced. Without it every notebook gets a
    fresh kernel, as papermill does by default. (papermill is thread-safe when no `cwd`
    is set.)"""
    import queue

    names = sorted(plans, key=lambda n: _COST_ORDER.index(n) if n in _COST_ORDER else -1)
    if not names:
        return []
    n_lanes = 1 if not parallel else max(1, min(len(names), workers or os.cpu_count() or 1))
    todo: "queue.Queue[str]" = queue.Queue()
    for n in names:
        todo.put(n)
    done: list[NotebookReport] = []
    lock = threading.Lock()

    def lane() -> None:
        kernel = None
        try:
            while True:
                try:
                    name = todo.get_nowait()
                except queue.Empty:
                    return
                t0 = time.perf_counter()
                try:
                    if reuse_kernels:
                        kernel = _ready_kernel(kernel)
                    rep = execute(name, plans[name], out_dir, source_dir=source_dir, km=kernel)
                except Exception as exc:  # a kernel that does not start: this notebook failed, said so
                    kernel = None
                    rep = NotebookReport(
                        name=name,
                        ipynb=Path(out_dir) / f"{name}.ipynb",
                        html=None,
                        sidecar=None,
                        seconds=time.perf_counter() - t0,
                        error=f"{type(exc).__name__}: {exc}",
                    )
                with lock:
                    done.append(rep)
        finally:
            if kernel is not None:
                _stop_kernel(kernel)

    if n_lanes == 1:
        lane()
    else:
        threads = [threading.Thread(target=lane, name=f"evalkit-report-{i}", daemon=True) for i in range(n_lanes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for name in sorted(set(names) - {r.name for r in done}):  # a lane that died: never a silent success
        done.append(
            NotebookReport(
                name=name,
                ipynb=Path(out_dir) / f"{name}.ipynb",
                html=None,
                sidecar=None,
                seconds=0.0,
                error="not executed: its report lane ended early",
            )
        )
    order = {n: i for i, n in enumerate(NOTEBOOKS)}
    return sorted(done, key=lambda r: order.get(r.name, len(order)))


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
    import inspect

    if inspect.isawaitable(value):
        from jupyter_core.utils import ensure_event_loop

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
    from jupyter_client.manager import AsyncKernelManager

    km = AsyncKernelManager(kernel_name=KERNEL)
    _await(km.start_kernel(extra_arguments=KERNEL_ARGS))
    return km


def _reset_namespace(kc: Any, *, timeout_s: float) -> bool:
    """Run `_RESET` in the kernel and wait for its reply on the shell channel (a reply
    comes only once it has run); True when it ran without error."""
    msg_id = kc.execute(_RESET, silent=True, store_history=False, allow_stdin=False)
    deadline = time.monotonic() + timeout_s
    while True:
        reply = _await(kc.get_shell_msg(timeout=max(0.0, deadline - time.monotonic())))
        if reply.get("parent_header", {}).get("msg_id") == msg_id:
            return reply["content"]["status"] == "ok"


def _stop_kernel(km: Any) -> None:
    try:
        _await(km.shutdown_kernel(now=True))
    except Exception:  # already gone
        pass


# ------------------------------------------------------------------------------ manifest and index


def write_manifest(
    run: Path,
    out_dir: Path,
    results: Iterable[NotebookReport],
    skipped: Mapping[str, str],
    *,
    run_dir: Path | None = None,
) -> Path:
    """`reports/<run>/report.json`: what the index shows for the run (date, suite, arms,
    spend, verdicts, headline rates) and where each notebook's page is. `run`: the folder
    the notebooks read; `run_dir`: the run folder it stands for (a redacted copy's
    original), `run` unless given."""
    from .grading import judge_trust_notice
    from .runs import RunFolder, config_arm_names

    meta = RunFolder(run).read_meta()
    summary_p = run / "summary.json"
    summary = json.loads(summary_p.read_text(encoding="utf-8")) if summary_p.exists() else {}
    results = list(results)
    rs = read_sidecar(out_dir, "run_summary") or {}
    sc = read_sidecar(out_dir, "skill_comparison") or {}
    verdicts = []
    if sc.get("kind"):
        verdicts.append(
            {
                "kind": sc["kind"],
                "baseline": sc.get("baseline"),
                "treatment": sc.get("treatment"),
                "p_value": sc.get("p_value"),
                "judge": sc.get("judge"),
            }
        )
    cf = rs.get("conformance") or {}
    if cf.get("kind"):  # a single-arm run: its conformance tally (verdicts.conformance_verdict)
        verdicts.append(
            {"kind": cf["kind"], "label": f"conformance {cf['kind']}", "text": f"{cf.get('arm')}: {cf.get('reason')}"}
        )
    gate = rs.get("gate") or {}
    if gate:
        verdicts.append(gate_verdict(gate))
    mt = read_sidecar(out_dir, "micro_test") or {}
    if mt.get("conclusion"):
        verdicts.append({"kind": "micro-test", "text": mt["conclusion"]})
    headline = {arm: v.get("success_rate") for arm, v in (rs.get("arms") or {}).items()}
    spend = rs.get("spend_usd", summary.get("spend_usd"))
    manifest = {
        "run": run.name,
        "run_dir": str(run_dir if run_dir is not None else run),
        "created": meta.get("created"),
        "suite": meta.get("suite_name") or Path(str(meta.get("suite") or "")).name or None,
        "source": meta.get("source"),
        "arms": config_arm_names(meta),
        "k": meta.get("k"),
        "complete": summary.get("complete"),
        "judge_notice": judge_trust_notice(run),
        "spend_usd": spend,
        "headline": headline,
        "verdicts": verdicts,
        "notebooks": [
            {
                "name": r.name,
                "html": r.html.name if r.html else None,
                "ipynb": r.ipynb.name,
                "ok": r.ok,
                "error": r.error,
                "seconds": round(r.seconds, 3),
            }
            for r in results
        ],
        "skipped": dict(skipped),
    }
    from .runs import write_atomic

    path = out_dir / MANIFEST
    write_atomic(path, json.dumps(jsonable(manifest), indent=2) + "\n")
    return path


def gate_verdict(gate: Mapping[str, Any], *, complete: bool | None = None) -> dict[str, Any]:
    """The index entry for a run's gate (the run_summary sidecar's `gate`: arm, passed,
    reasons), labelled by cause: a gate that failed because the run was incomplete (no
    rate was read) is `gate failed: incomplete run`, shown as inconclusive and never
    as a regression; only a success drop or a cost increase is a regression."""
    from .verdicts import GATE_CAUSE_INCOMPLETE, GATE_CAUSE_JUDGE, GATE_CAUSE_NOT_COMPARABLE, gate_failure_causes

    arm = gate.get("arm")
    if gate.get("passed"):
        return {"kind": "pass", "label": "gate passed", "text": f"{arm} vs baseline"}
    causes = list(gate.get("causes") or gate_failure_causes(gate.get("reasons") or (), gate.get("read_rates")))
    if complete is False and not gate.get("reasons") and not gate.get("causes"):
        causes = [GATE_CAUSE_INCOMPLETE]  # an older manifest without reasons, for a run known INCOMPLETE
    regression = bool(causes) and not (
        {GATE_CAUSE_INCOMPLETE, GATE_CAUSE_NOT_COMPARABLE, GATE_CAUSE_JUDGE} & set(causes)
    )
    why = "; ".join(str(r) for r in gate.get("reasons") or ())
    return {
        "kind": "regression" if regression else "inconclusive",
        "label": "gate failed: " + (" / ".join(causes) or "reason not recorded"),
        "causes": causes,
        "text": f"{arm} vs baseline" + (f": {why}" if why else ""),
    }


def load_manifests(reports_dir: str | Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(Path(reports_dir).glob(f"*/{MANIFEST}")):
        try:
            m = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            continue
        m["_dir"] = p.parent.name
        out.append(m)
    return out


_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def trend_svg(
    series: Mapping[str, Sequence[float | None]], labels: Sequence[str], *, width: int = 320, height: int = 90
) -> str:
    """An inline SVG line chart of rates in [0, 1] per series across runs (oldest
    first), with a legend; every text escaped."""
    n = len(labels)
    pad_l, pad_r, pad_t, pad_b = 28, 8, 8, 16
    w, h = width - pad_l - pad_r, height - pad_t - pad_b

    def xy(i: int, v: float) -> tuple[float, float]:
        x = pad_l + (w * i / (n - 1) if n > 1 else w / 2)
        return x, pad_t + h * (1 - v)

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height + 14 * len(series)}' "
        f"role='img' aria-label='headline rates across runs'>",
        f"<rect x='{pad_l}' y='{pad_t}' width='{w}' height='{h}' fill='none' stroke='#ccc'/>",
        f"<text x='2' y='{pad_t + 8}' font-size='9'>100%</text>",
        f"<text x='8' y='{pad_t + h}' font-size='9'>0%</text>",
    ]
    for j, (name, vals) in enumerate(series.items()):
        color = _PALETTE[j % len(_PALETTE)]
        pts = [xy(i, float(v)) for i, v in enumerate(vals) if v is not None]
        if len(pts) > 1:
            parts.append(
                f"<polyline fill='none' stroke='{color}' stroke-width='1.5' points='"
                + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                + "'/>"
            )
        for (x, y), (i, v) in zip(pts, [(i, v) for i, v in enumerate(vals) if v is not None]):
            parts.append(
                f"<circle cx='{x:.1f}' cy='{y:.1f}' r='2.5' fill='{color}'>"
                f"<title>{html.escape(str(labels[i]))}: {float(v):.1%}</title></circle>"
            )
        parts.append(
            f"<text x='{pad_l}' y='{height + 10 + 14 * j}' font-size='10' fill='{color}'>"
            f"{html.escape(str(name))} (latest {_pct(vals[-1] if vals else None)})</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _pct(v: Any) -> str:
    return "n/a" if v is None else f"{float(v):.1%}"


_INDEX_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:0.5em 0 1.5em 0}th,td{border:1px solid #ddd;padding:4px 8px;vertical-align:top;
font-size:13px}th{background:#f4f4f4;text-align:left}.pass{color:#1a7f37;font-weight:bold}
.regression{color:#c62828;font-weight:bold}.inconclusive{color:#8a6d00}.no-improvement{color:#555}
.warn{color:#c62828}code{font-size:12px}
"""


def build_index(reports_dir: str | Path) -> Path:
    """Rebuild `reports_dir/index.html` from every run's manifest: one row per run
    (date, suite, arms, verdicts, spend, links to each notebook page) and, per suite, a
    trend of each arm's headline success rate across its runs."""
    root = Path(reports_dir)
    root.mkdir(parents=True, exist_ok=True)
    runs = load_manifests(root)
    runs.sort(key=lambda m: (m.get("created") or "", m["_dir"]))
    e = html.escape
    rows = []
    for m in reversed(runs):
        for i, v in enumerate(m.get("verdicts") or []):
            # a manifest written before gate entries carried their cause: "gate FAIL (...)"
            # was labelled regression even for an incomplete run; label it by cause now.
            if v.get("kind") == "regression" and "label" not in v and str(v.get("text", "")).startswith("gate FAIL"):
                m["verdicts"][i] = {**gate_verdict({"passed": False}, complete=m.get("complete")), "text": v["text"]}
        verdicts = (
            "<br>".join(
                (
                    f"<span class='{e(v['kind'])}'>{e(str(v.get('label') or v['kind']))}</span>"
                    + (f" {e(str(v.get('treatment')))} vs {e(str(v.get('baseline')))}" if v.get("baseline") else "")
                    + (f" (p = {float(v['p_value']):.3g})" if v.get("p_value") is not None else "")
                    + (f", {e(str(v['judge']))} judge" if v.get("judge") else "")
                    + (f": {e(str(v.get('text')))}" if v.get("text") else "")
                )
                for v in m.get("verdicts") or []
            )
            or "&mdash;"
        )
        links = " ".join(
            f"<a href='{e(m['_dir'])}/{e(nb['html'])}'>{e(TITLES.get(nb['name'], nb['name']))}</a>"
            + ("" if nb.get("ok") else " <span class='warn'>(failed)</span>")
            for nb in m.get("notebooks") or []
            if nb.get("html")
        )
        rates = ", ".join(f"{e(str(a))} {_pct(v)}" for a, v in (m.get("headline") or {}).items()) or "&mdash;"
        spend = m.get("spend_usd")
        complete = "" if m.get("complete") in (True, None) else " <span class='warn'>INCOMPLETE</span>"
        if m.get("judge_notice"):
            complete += f"<br><span class='warn'>{e(str(m['judge_notice']))}</span>"
        rows.append(
            f"<tr><td>{e(str(m.get('created') or ''))}</td><td><code>{e(m['_dir'])}</code>{complete}</td>"
            f"<td>{e(str(m.get('suite') or ''))}</td><td>{e(', '.join(str(a) for a in m.get('arms') or []))}</td>"
            f"<td>{rates}</td><td>{verdicts}</td>"
            f"<td>{'&mdash;' if spend is None else f'${float(spend):.6f}'}</td><td>{links}</td></tr>"
        )
    trends = []
    by_suite: dict[str, list[dict[str, Any]]] = {}
    for m in runs:
        by_suite.setdefault(str(m.get("suite") or "(no suite)"), []).append(m)
    for suite, ms in sorted(by_suite.items()):
        arms = list(dict.fromkeys(a for m in ms for a in (m.get("headline") or {})))
        series = {a: [(m.get("headline") or {}).get(a) for m in ms] for a in arms}
        labels = [m["_dir"] for m in ms]
        chart = trend_svg(series, labels) if arms else "<i>no graded runs</i>"
        trends.append(f"<tr><td>{e(suite)}</td><td>{len(ms)}</td><td>{chart}</td></tr>")
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        f"<title>evalkit reports</title><style>{_INDEX_CSS}</style></head><body>"
        "<h1>evalkit reports</h1>"
        f"<p>{len(runs)} run(s). Each run links to its notebooks, rendered as self-contained pages; the executed "
        "notebooks sit beside them and reopen in JupyterLab. Success rates are the share of graded samples that "
        "passed; an ungraded or errored sample never counts as a pass.</p>"
        "<h2>Runs</h2><table><thead><tr><th>date</th><th>run</th><th>suite</th><th>arms</th>"
        "<th>success rate</th><th>verdicts</th><th>spend</th><th>reports</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        "<h2>Trend of the headline success rate, per suite</h2>"
        "<table><thead><tr><th>suite</th><th>runs</th><th>success rate per arm, oldest run first</th></tr></thead>"
        "<tbody>" + "".join(trends) + "</tbody></table></body></html>\n"
    )
    from .runs import write_atomic

    path = root / "index.html"
    write_atomic(path, page)
    return path
