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
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import regex

from . import stats
from ._io import RUN_JSON_BYTES, jsonable, read_json_object, write_atomic
from .errors import InputError
from .layout import GRADES_SUMMARY, RUN_CONFIG
from .runload import Run, load_run
from .runs import find_suite_dir

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
    from .privacy import redact_shown  # lazy: the privacy scanner loads only for a redacted report

    return redact_shown(text)


def text_html(text: Any, *, title: str | None = None, pre: bool = True, max_chars: int = 4000) -> str:
    """The escaped HTML `show_text` displays (for callers that build a page)."""
    s = _shown("" if text is None else str(text))
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
    from IPython.display import HTML, display  # lazy: IPython is there only in a notebook's kernel

    display(HTML(table_html(data, caption=caption, index=index, max_rows=max_rows, float_format=float_format)))


def table_html(
    data: Any, *, caption: str | None = None, index: bool = False, max_rows: int = 200, float_format: str = "{:.4g}"
) -> str:
    """The escaped HTML `table` displays."""
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


def write_sidecar(name: str, numbers: Mapping[str, Any], directory: str | Path | None = None) -> Path | None:
    """Write a notebook's key numbers to `<directory>/<name>.json` (atomically), so that
    tests and the index read them without parsing HTML. No directory (a notebook opened
    by hand): nothing is written, and None is returned."""
    if not directory:
        return None
    path = Path(directory) / f"{name}.json"
    write_atomic(path, json.dumps(jsonable(dict(numbers)), indent=2, sort_keys=True, allow_nan=False) + "\n")
    return path


def resolve_run(run_dir: str | Path | None) -> Path:
    """The run folder a notebook analyses: its `run_dir` parameter, which must name a run
    folder (a notebook opened by hand sets it; `evalkit report` always does)."""
    if not run_dir:
        raise InputError("no run_dir given: set the notebook's run_dir parameter to a run folder")
    p = Path(run_dir).expanduser()
    if not (p / RUN_CONFIG).exists():
        raise InputError("not a run folder (no config.json)", p)
    return p.resolve()


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


def rate_interval(rate: float | None, n: int | None, method: str = "wilson") -> Any:
    """The `stats.proportion_interval` of a rate over `n` (successes = rate * n, rounded),
    or None when there is no rate."""
    if rate is None or not n:
        return None
    return stats.proportion_interval(int(round(float(rate) * int(n))), int(n), method=method)


def load_grades_summary(run: Any) -> dict[str, Any] | None:
    """The run's `grades-summary.json` (written by `evalkit grade`), or None."""
    p = Path(run.path) / GRADES_SUMMARY
    return read_json_object(p, GRADES_SUMMARY, limit=RUN_JSON_BYTES) if p.exists() else None


def summary_from_grades(run: Any) -> dict[str, Any] | None:
    """The part of a grades summary that needs no suite, from `grades.jsonl` and the
    samples: success rate, latency p50/p95 and cost per task, overall, per arm and per
    arm and tag. For runs ingested from other tools, which carry grades but no
    `grades-summary.json`. A sample without a passing grade is never a pass; the
    denominator is every sample plus every errored key. None when there are no grades."""
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


def flag_outputs(samples: Any, pattern: str = "") -> Any:
    """Which outputs show the failure: those matching `pattern` (a regex, searched with
    a timeout since outputs are untrusted), or with no pattern those whose grade did not
    pass (a missing or null grade is flagged: it was not shown to be free of the failure)."""
    if pattern:
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
