"""A run folder loaded for analysis: its files as pandas DataFrames with stable columns
(`load_run`), and the questions every analysis asks of one (which arms, which cases in
which order, which samples passed). Notebooks, verdicts and gates read runs through here;
nothing here writes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import math
import os
import pickle
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evalkit.foundations._io import RUN_JSON_BYTES, iter_jsonl, read_json_object
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import (
    CASE_TABLE,
    CASES_FILE,
    ERRORS,
    GRADES,
    GRADES_SUMMARY,
    LEDGER,
    RESULTS,
    RUN_CONFIG,
    SUMMARY_JSON,
    VERDICTS,
)
from evalkit.foundations.records import CaseRow, CaseTable, Grade, GradesSummary, RunVerdicts, Sample
from evalkit.runfolder.runs import RunFolder, config_arm_names, find_suite_dir
from evalkit.suites.formats import suite_source

# Stable column orders: notebooks, stats, ingest and gate code rely on them.
SAMPLE_COLUMNS: tuple[str, ...] = tuple(
    c
    for f in dataclasses.fields(Sample)
    for c in (("prompt_tokens", "completion_tokens") if f.name == "usage" else (f.name,))
)
GRADE_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Grade))
LEDGER_COLUMNS: tuple[str, ...] = (
    "t",
    "run_epoch",
    "event",
    "id",
    "role",
    "model",
    "key",
    "amount_usd",
    "cost_usd",
    "prompt_tokens",
    "completion_tokens",
)
ERROR_COLUMNS: tuple[str, ...] = ("case_id", "arm", "index", "error", "attempts")


@dataclass(frozen=True)
class Run:
    """A run folder loaded for analysis. DataFrames have stable columns even when empty:
    `samples` (Sample fields, usage flattened to `prompt_tokens`/`completion_tokens`),
    `grades` (Grade fields, `checks` a list of dicts), `errors` (one row per failed key),
    and `ledger` (one row per event), read from `ledger.jsonl` the first time it is
    asked for: no verdict, gate or report page reads it, and it is as large as the
    results (several events per sample)."""

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    samples: pd.DataFrame
    grades: pd.DataFrame
    errors: pd.DataFrame

    @functools.cached_property
    def ledger(self) -> pd.DataFrame:
        """The run's `ledger.jsonl`, one row per event (read once, on first use)."""
        lp = Path(self.path) / LEDGER
        return _frame(list(iter_jsonl(lp)) if lp.exists() else [], LEDGER_COLUMNS)

    def arm_names(self) -> list[str]:
        """The run's arms in config order, then any others its samples name."""
        out = config_arm_names(self.config)
        for a in self.samples["arm"].dropna().unique().tolist() if len(self.samples) else ():
            if a not in out:
                out.append(str(a))
        return out


def _frame(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    df = pd.DataFrame.from_records(rows)
    for c in columns:
        if c not in df.columns:
            df[c] = None
    extra = [c for c in df.columns if c not in columns]
    return df[list(columns) + extra]


def _sample_row(d: dict[str, Any]) -> dict[str, Any]:
    """A `results.jsonl` object as a samples row, changed in place (the objects are the
    loader's own, fresh from the parser): `usage` flattened, `tags` and `tool_calls`
    lists. The keys keep their order (the extra columns' order follows it)."""
    u = d.pop("usage", None) or {}
    d["prompt_tokens"] = u.get("prompt_tokens")
    d["completion_tokens"] = u.get("completion_tokens")
    d["tags"] = list(d.get("tags") or [])
    d["tool_calls"] = list(d.get("tool_calls") or [])
    return d


def _grade_row(d: dict[str, Any]) -> dict[str, Any]:
    """A `grades.jsonl` object as a grades row, changed in place: `checks` a list."""
    d["checks"] = list(d.get("checks") or [])
    return d


def _intern_keys(frame: pd.DataFrame) -> None:
    """The frame's case ids and arms, interned (in place) where they are strings with no
    gap: the parser makes a new string for each of a run's 100,000 lines, where a few
    thousand distinct ones are shared by every row of a case. Shared, each string's hash
    is computed once for all the dicts keyed by it (`keyed_values`, the verdicts, the
    failures), and the run's pickle for the report's kernels
    (`evalkit.telling.reports._Handoff`) holds each once (1.0 to 0.75 s to write)."""
    for key in ("case_id", "arm"):
        if key in frame.columns and isinstance(frame[key].dtype, pd.StringDtype) and not frame[key].hasnans:
            # each distinct string interned once, then taken for every row (C code): 0.36 to 0.1 s
            # for a 200,000-sample run's two frames, where interning every row's went through Python
            codes, uniques = pd.factorize(frame[key])
            frame[key] = pd.array(list(map(sys.intern, uniques.tolist())), dtype=frame[key].dtype).take(codes)


def shared_cells(run: Run) -> Run:
    """A copy of `run` whose equal cells are one object each: the strings of each string
    column, and the lists of each object column (a sample's tags, a grade's checks) equal
    as JSON and as Python values. The parser makes a new object for every cell, where a
    200,000-sample run holds a few distinct tags, checks, outputs and models: pickled for
    the report's kernels (`evalkit.telling.reports._Handoff`), each distinct value is then
    written once and read once (2.0 s to 1.0 s, the report's critical path once its
    verdict took 0.4 s). Its frames are new; the run's own are left as they are."""
    return dataclasses.replace(run, samples=_shared_frame(run.samples), grades=_shared_frame(run.grades))


_LIST_COLUMNS = ("tags", "tool_calls", "checks")  # the list fields of a sample and a grade


def _shared_frame(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy(deep=False)
    for c in frame.columns:
        col = frame[c]
        if isinstance(col.dtype, pd.StringDtype) and _repetitive(col.iloc[:1000].tolist()):
            codes, uniques = pd.factorize(col)  # each distinct string once; a missing cell is -1
            out[c] = uniques.take(codes, allow_fill=True)
        elif c in _LIST_COLUMNS and col.dtype == object:
            out[c] = pd.Series(_shared_lists(col.tolist()), index=frame.index, dtype=object)
    return out


def _repetitive(head: list[Any]) -> bool:
    """Whether a column's first cells (`head`) hold fewer than half as many distinct
    values: a hash or a seed per row is left alone (sharing it saves nothing)."""
    return len(set(head)) * 2 < len(head)


def _shared_lists(values: list[Any]) -> Any:
    """`values` (an object array) with each list replaced by the first list of the same
    pickle (the same types and values, NaN and -0.0 included). Keyed and looked up by C
    code (pickle, pandas' hash table, numpy's take): 0.3 s for 200,000 cells."""
    own = _objects(values)
    try:
        keys = list(map(pickle.dumps, values))
    except Exception:  # a value that does not pickle (never one a run file holds): left alone
        return own
    codes, _ = pd.factorize(_objects(keys))
    firsts = pd.Series(codes).drop_duplicates().index.to_numpy()  # first row of each code, codes in order
    return own[firsts][codes]


# A reused kernel (see `run_notebooks`) runs several notebooks on the same run; parsing
# results.jsonl and grades.jsonl is the largest per-notebook cost after the imports, so
# the parsed run is kept in this module (which `%reset -f` leaves alone), keyed by the
# folder and the size and mtime of each file the load reads: a run that changed is read
# again. Files it does not read (verdicts.json, which `evalkit report` writes while its
# kernels load the run ahead of the notebooks; the ledger, read on first use) do not count.
_RUN_CACHE: dict[Path, tuple[tuple[Any, ...], Any]] = {}
_RUN_CACHE_LOCK = threading.Lock()
_LOADED_FILES = frozenset({RUN_CONFIG, SUMMARY_JSON, RESULTS, GRADES, ERRORS})


def _run_signature(path: Path) -> tuple[Any, ...]:
    return tuple(
        sorted(
            (e.name, st.st_size, st.st_mtime_ns)
            for e in os.scandir(path)
            if e.name in _LOADED_FILES and e.is_file() and (st := e.stat())
        )
    )


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection while objects that all live on are made (a run's rows as
    its lines are parsed; an explorer page's columns), yet the collector's oldest
    generation walks the whole growing heap every so often: 40% of the time of loading a
    100,000-sample run (3.1 s, now 1.9 s). Resumed after (by the caller that paused it,
    when several threads load)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read_run(path: str | Path) -> Run:
    p = Path(path)
    if not p.is_dir():
        raise InputError("run folder not found", p)
    folder = RunFolder(p)
    config = folder.read_meta()
    summary = folder.read_summary()
    gp = p / GRADES
    with collector_paused():
        samples = _frame([_sample_row(d) for d in folder.results()], SAMPLE_COLUMNS)
        grades = _frame([_grade_row(d) for d in iter_jsonl(gp)] if gp.exists() else [], GRADE_COLUMNS)
        _intern_keys(samples)
        _intern_keys(grades)
        errors = _frame(folder.errors(), ERROR_COLUMNS)
    return Run(path=p, config=config, summary=summary, samples=samples, grades=grades, errors=errors)


def load_run(path: str | Path, *, cache: bool = False) -> Run:
    """Load a run folder (ours, or one ingested from another tool) into DataFrames.

    `cache`: keep the parsed run in this process while the folder's files are unchanged
    (size and mtime of each), for the notebooks a reused kernel runs one after another;
    every call still gets its own copy of the config, summary and DataFrames, so one
    caller's edits never reach the next."""
    p = Path(path)
    if not cache:
        return _read_run(p)
    if not p.is_dir():
        raise InputError("run folder not found", p)
    key = p.resolve()
    sig = _run_signature(key)
    with _RUN_CACHE_LOCK:
        hit = _RUN_CACHE.get(key)
    if hit is None or hit[0] != sig:
        run, signed = load_run_signed(p)
        if signed is not None:  # not written to while it was read
            adopt_run(run, signed)
    else:
        run = hit[1]
    return dataclasses.replace(
        run,
        config=copy.deepcopy(run.config),
        summary=copy.deepcopy(run.summary),
        samples=run.samples.copy(),
        grades=run.grades.copy(),
        errors=run.errors.copy(),
    )


def load_run_signed(path: str | Path) -> tuple[Run, tuple[Any, ...] | None]:
    """`load_run(path)`, and the signature of the files it read (`_run_signature`) when
    none changed while they were read (else None): what `adopt_run` needs to put this
    reading in another process's cache (`evalkit report` hands its reading to its
    kernels)."""
    p = Path(path)
    if not p.is_dir():
        raise InputError("run folder not found", p)
    key = p.resolve()
    sig = _run_signature(key)
    run = _read_run(p)
    return run, sig if _run_signature(key) == sig else None


def adopt_run(run: Run, signature: tuple[Any, ...]) -> bool:
    """Put a run read elsewhere (`load_run_signed`) in this process's cache, so
    `load_run(..., cache=True)` of its folder returns copies of it: only while the folder
    still has `signature` (a run changed since is read again). Returns whether it was
    adopted."""
    key = Path(run.path).resolve()
    if not key.is_dir() or _run_signature(key) != signature:
        return False
    with _RUN_CACHE_LOCK:
        _RUN_CACHE.clear()  # one run per report: keep memory flat across runs
        _RUN_CACHE[key] = (signature, run)
    return True


def as_run(run: Run | str | Path) -> Run:
    """A loaded `Run` (loading it when given a path)."""
    return run if isinstance(run, Run) else load_run(run)


def pick_arm(run: Run, arm: str | None, hint: str) -> str:
    """`arm` checked against the run's arms, or the run's only arm when None; then the
    run must be graded. `hint` finishes the message when the run has several arms."""
    arms = run.arm_names()
    if arm is None:
        if len(arms) != 1:
            raise InputError(f"the run has arms {arms}: {hint}", json_path="arm")
        arm = arms[0]
    elif arm not in arms:
        raise InputError(f"arm {arm!r} is not in the run (arms: {', '.join(arms) or 'none'})", json_path="arm")
    require_graded(run)
    return arm


def require_graded(run: Run) -> None:
    if len(run.samples) and not len(run.grades):
        raise InputError("run is not graded (no grades.jsonl): run `evalkit grade` first", Path(run.path) / GRADES)


GradeKey = tuple[str, str, int]  # (case id, arm, index)


def grade_map(run: Run) -> dict[GradeKey, dict[str, Any]]:
    """Each grade row, as a dict, by its key (the last row of a key wins). For a few
    columns of every grade, `grade_values` is much cheaper."""
    return {(str(r["case_id"]), str(r["arm"]), int(r["index"])): r for r in run.grades.to_dict("records")}


def grade_values(run: Run, columns: Sequence[str]) -> dict[GradeKey, tuple[Any, ...]]:
    """The named columns of each grade, as a tuple, by its key (the last row of a key
    wins, as in `grade_map`): read column by column, with no dict per row, which counts
    at 100,000 grades."""
    return keyed_values(run.grades, columns)


def keyed_values(frame: pd.DataFrame, columns: Sequence[str]) -> dict[GradeKey, tuple[Any, ...]]:
    """The named columns of each row of `frame` (one with `case_id`, `arm` and `index`
    columns: the samples, the grades, `sample_texts`), as a tuple, by its key; the last
    row of a key wins. Looking a key up here is a dict look-up; on a DataFrame indexed by
    the key, each `.get` rebuilds the index's uniqueness check (milliseconds a key: minutes
    for the trials of a 100,000-sample run)."""
    values = zip(*(frame[c].tolist() for c in columns), strict=True)
    return dict(zip(key_tuples(frame), values, strict=True))


def key_tuples(frame: pd.DataFrame) -> list[GradeKey]:
    """Each row's (case id, arm, index) of `frame`, as `keyed_values` keys it: the tuples
    zip makes of typed key columns (`keys_typed`: no Python code per row, 0.27 to 0.06 s
    for 100,000 rows), else each value converted."""
    keys = zip(frame["case_id"].tolist(), frame["arm"].tolist(), frame["index"].tolist(), strict=True)
    if keys_typed(frame):
        return list(keys)
    return [(str(c), str(a), int(i)) for c, a, i in keys]


def keys_typed(frame: pd.DataFrame) -> bool:
    """Whether `frame`'s key columns already hold what `keyed_values` makes of them:
    case ids and arms as strings (a string dtype with no missing value) and indices as
    integers (an integer dtype)."""
    for c in ("case_id", "arm"):
        col = frame[c]
        if not isinstance(col.dtype, pd.StringDtype) or col.hasnans:
            return False
    return bool(pd.api.types.is_integer_dtype(frame["index"].dtype))


@dataclass(frozen=True)
class SampleKeys:
    """Each sample row's key as codes, and the grade row it reads (`sample_keys`): what a
    count per case over a 100,000-sample run needs, with no tuple or dict per row."""

    case_ids: list[str]  # by case code: the case id, a string, as `keyed_values` keys it
    arms: list[str]  # by arm code: the arm, a string
    case: np.ndarray  # per sample row: its case code
    arm: np.ndarray  # per sample row: its arm code
    grade_row: np.ndarray  # per sample row: the grade row of its key (the last of the key), -1 for none


def sample_keys(run: Run) -> SampleKeys:
    """Each sample row's case and arm, and the grade row `keyed_values` would find for its
    (case id, arm, index) key: the last grade row of the key, -1 when it has none.

    Column-wise: the key columns are factorized (pandas' hash tables, no Python code per
    row), the samples' and the grades' together, so one code names one key on both sides;
    `key_tuples` and a dict took 0.3 s for a 100,000-sample run's two frames. Grades in
    the samples' order, key for key (as `evalkit grade` writes them), share the samples'
    codes: only the samples' keys are factorized."""
    ns = len(run.samples)
    sample_parts, grade_parts = _key_arrays(run.samples), _key_arrays(run.grades)
    aligned = len(run.grades) == ns and all(map(np.array_equal, sample_parts, grade_parts))
    parts = sample_parts if aligned else [np.concatenate(c) for c in zip(sample_parts, grade_parts, strict=True)]
    (case, arm, index), (case_ids, arms, _) = zip(*(pd.factorize(p) for p in parts), strict=True)
    key = _pairs(case, arm, index)  # one code per (case id, arm, index), the same on both sides
    sample_key, grade_key = (key, key) if aligned else (key[:ns], key[ns:])
    last = np.full(int(key.max(initial=-1)) + 1, -1, dtype=np.int64)
    # the greatest grade row of each key is its last (`keyed_values`: the last row of a key wins)
    np.maximum.at(last, grade_key, np.arange(len(grade_key), dtype=np.int64))
    return SampleKeys(list(case_ids), list(arms), case[:ns], arm[:ns], last[sample_key])


def _pairs(*codes: np.ndarray) -> np.ndarray:
    """One code per distinct combination of `codes` (equal-length arrays of codes, each
    below the rows' count), numbered two at a time: no product passes that count squared."""
    out = codes[0]
    for c in codes[1:]:
        out, _ = pd.factorize(out * (int(c.max(initial=0)) + 1) + c)
    return out


def _key_arrays(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`frame`'s case ids, arms and indices as `key_tuples` makes them: the columns
    themselves when typed (`keys_typed`, with an int64 index: the samples' and grades'
    then concatenate exactly), else each value converted (`str`, `int`), held as objects
    (an index may be any Python int)."""
    if not len(frame):
        return _objects([]), _objects([]), np.zeros(0, dtype=np.int64)
    if keys_typed(frame) and frame["index"].dtype == np.int64:
        return (
            frame["case_id"].to_numpy(dtype=object),
            frame["arm"].to_numpy(dtype=object),
            frame["index"].to_numpy(),
        )
    return (
        _objects([str(c) for c in frame["case_id"].tolist()]),
        _objects([str(a) for a in frame["arm"].tolist()]),
        _objects([int(i) for i in frame["index"].tolist()]),
    )


def _objects(values: list[Any]) -> np.ndarray:
    """`values` as a one-dimensional array of objects (never a wider array)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def grade_passed(row: dict[str, Any] | None) -> bool | None:
    """Whether a grade row passed; None when there is no row or it has no verdict."""
    return None if row is None else passed_value(row.get("passed"))


def passed_value(v: Any) -> bool | None:
    """A grade's `passed` value as a verdict: None when it is null or NaN."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return bool(v)


def case_order(run: Run) -> list[str]:
    """The run's planned cases in order, then any case that has samples but was not
    planned (an ingested run)."""
    order = dict.fromkeys(str(c) for c in (run.config.get("cases") or []))
    ids = run.samples["case_id"]
    if isinstance(ids.dtype, pd.StringDtype):  # each distinct id once, in order (pandas' hash table: 10,000
        ids = pd.Series(pd.unique(ids))  # ids of a 200,000-sample run, not 200,000 str() calls)
    order.update(dict.fromkeys(str(c) for c in ids.tolist()))
    return list(order)


def suite_dir_of(run: Run) -> Path | None:
    """The run's suite folder, when it still exists (`runs.find_suite_dir`)."""
    return find_suite_dir(run.path, run.config.get("suite"))


def _path_of(run: Run | str | Path) -> Path:
    return Path(run.path) if isinstance(run, Run) else Path(run)


def case_table(run: Run | str | Path) -> CaseTable:
    """The cases as the run saw them (`case-table.json`, written when it started), so an
    old run is read as it was, whatever its suite says today. A run folder without one
    (evalkit 0.1) has it rebuilt, and `source` says from what: the sets an ingested run
    recorded (`case_sets` in its config.json), else the suite's `cases.jsonl` as it is
    now (the only record 0.1 kept), else every case `capability`; tags from the samples."""
    run = as_run(run)
    p = Path(run.path) / CASE_TABLE
    if p.exists():
        try:
            return CaseTable.from_json(read_json_object(p, CASE_TABLE, limit=RUN_JSON_BYTES))
        except InputError as exc:
            raise InputError(exc.message, p, json_path=exc.json_path) from None
    tags: dict[str, tuple[str, ...]] = {}
    for r in run.samples[["case_id", "tags"]].itertuples(index=False) if len(run.samples) else ():
        tags.setdefault(str(r.case_id), tuple(r.tags or ()))
    ids = case_order(run)
    sets = {str(k): str(v) for k, v in (run.config.get("case_sets") or {}).items()}
    source = "rebuilt from the case_sets of the run's config.json"
    if not sets:
        sets, source = _suite_case_sets(run)
    return CaseTable(
        tuple(CaseRow(c, sets.get(c, "capability"), tags.get(c, ()), False) for c in ids),
        source,
    )


def _suite_case_sets(run: Run) -> tuple[dict[str, str], str]:
    """Case id -> set from the run's suite as it is now (its `cases.jsonl`, or the
    evals.json / eval.yaml it was read from), for a run of evalkit 0.1, which recorded no
    case table; and the note that says so."""
    suite = suite_dir_of(run)
    if suite is None:
        return {}, "rebuilt without a suite: every case capability (the run predates case-table.json)"
    try:
        src = suite_source(suite)
    except InputError:
        return {}, f"rebuilt without a readable suite at {suite}: every case capability"
    out = {}
    for _, _, _, obj in src.cases:
        if isinstance(obj, dict) and "id" in obj:
            out[str(obj["id"])] = str(obj.get("set") or "capability")
    where = CASES_FILE if src.is_native else Path(src.config_path).name
    return out, f"rebuilt from the suite's {where} as it is now (the run predates case-table.json)"


def grades_summary(run: Run | str | Path) -> GradesSummary | None:
    """The run's `grades-summary.json` (written by `evalkit grade`, or `evalkit ingest`),
    typed; None when the run is not graded."""
    p = _path_of(run) / GRADES_SUMMARY
    if not p.exists():
        return None
    try:
        return GradesSummary.from_json(read_json_object(p, GRADES_SUMMARY, limit=RUN_JSON_BYTES))
    except InputError as exc:
        raise InputError(exc.message, p, json_path=exc.json_path) from None


NOTHING_TO_REPORT = "regression"  # the banner kind of a run with nothing to report


def report_state(run: Run, summary: GradesSummary | None) -> tuple[str, str] | None:
    """What a report must say before any number: (banner kind, sentence) for a run with
    no sample or no grades (kind `NOTHING_TO_REPORT`: `evalkit report` exits 1) and for an
    INCOMPLETE one; None for a complete graded run."""
    meta = run.summary or {}
    if not len(run.samples):
        return NOTHING_TO_REPORT, "Nothing to report: this run has no sample (no model call succeeded)."
    if summary is None:
        return NOTHING_TO_REPORT, (
            "Nothing to report yet: this run is not graded, so no rate, verdict or finding below is a result. "
            "Run `evalkit grade` on it first."
        )
    if meta and not meta.get("complete", True):
        return "inconclusive", (
            f"INCOMPLETE: {meta.get('ran')} of {meta.get('total')} cases ran ({meta.get('reason')}). "
            "Missing samples count as failures below."
        )
    return None


def run_verdicts(run: Run | str | Path) -> RunVerdicts:
    """The run's `verdicts.json` (what compare, gate and report concluded), typed; empty
    verdicts when there is none yet."""
    path = _path_of(run)
    p = path / VERDICTS
    if not p.exists():
        return RunVerdicts(run=path.name)
    try:
        return RunVerdicts.from_json(read_json_object(p, VERDICTS, limit=RUN_JSON_BYTES))
    except InputError as exc:
        raise InputError(exc.message, p, json_path=exc.json_path) from None


def sample_texts(run: Any, *, cases: Any = None) -> Any:
    """Samples joined with their grades: case_id, arm, index, output, passed, reasons
    (the failed checks' reasons), judge_score, judge_reason. `cases`: only the samples of
    these case ids (a page that shows a few hundred of a 100,000-sample run's)."""
    s = run.samples
    g = run.grades
    if cases is not None:
        wanted = {str(c) for c in cases}
        # compared as strings, as `keyed_values` keys them (a run may hold numeric case ids)
        s = s[s["case_id"].astype(str).isin(wanted)]
        g = g[g["case_id"].astype(str).isin(wanted)] if len(g) else g
    cols = ["case_id", "arm", "index", "output"]
    base = s[cols].copy() if len(s) else pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
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


def judge_trust_notice(run_path: str | Path | None) -> str | None:
    """The line every report page of a run shows about its judge, or None when there is
    nothing to warn about: judged results held (the judge is not trusted), or counted
    although the judge is not calibrated ("Judge not calibrated (n of 20 labels)", by
    default or by the suite's opt-out). Read from `grades-summary.json`;
    a summary that cannot be read says nothing here (the run's pages say why)."""
    if not run_path or not (Path(run_path) / GRADES_SUMMARY).is_file():
        return None
    try:
        summary = grades_summary(run_path)
    except InputError:
        return None
    trust = summary.judge_trust if summary is not None else None
    if summary is None or trust is None or trust.trusted is None:
        return None
    if trust.uncalibrated:
        note = trust.uncalibrated
        return (
            f"{note[0].upper()}{note[1:]}. {trust.reason}"
            if trust.basis == "opt-out"
            else (
                f"{note[0].upper()}{note[1:]}. Calibrate it: `evalkit judge sample RUN -n 20 --to FILE`, label the "
                "items, grade again."
            )
        )
    if not trust.trusted:
        return (
            f"Judge not trusted: {summary.overall.n_held} judged sample(s) held, counted as not passed in every "
            f"rate, gate and verdict. {trust.reason}"
        )
    return None
