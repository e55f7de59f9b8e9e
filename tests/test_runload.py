"""A run folder loaded for analysis (evalkit.runfolder.runload).

The loader was made fast for 100,000-sample runs (rows rebuilt in place, the ledger read
on first use, lookups by column); these tests hold it to the straightforward reading it
replaced (`reference_load` below: every line parsed by `json.loads`, one new dict per
row, `DataFrame.from_records`), value for value and type for type, on the committed
v0.1 run and on a seeded random run folder with odd values.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from evalkit.conclusions import gates
from evalkit.runfolder import runload
from evalkit.conclusions import verdicts

DATA_RUN = Path(__file__).parent / "data" / "runs" / "v0.1" / "runs" / "20261201-094733"


# -- the reference: the loader as it was before it was made fast -------------------------


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(raw) for raw in path.read_bytes().split(b"\n") if raw.strip()]


def _frame(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    df = pd.DataFrame.from_records(rows)
    for c in columns:
        if c not in df.columns:
            df[c] = None
    return df[list(columns) + [c for c in df.columns if c not in columns]]


def _sample_row(d: dict[str, Any]) -> dict[str, Any]:
    row = {k: v for k, v in d.items() if k != "usage"}
    u = d.get("usage") or {}
    row["prompt_tokens"] = u.get("prompt_tokens")
    row["completion_tokens"] = u.get("completion_tokens")
    row["tags"] = list(d.get("tags") or [])
    row["tool_calls"] = list(d.get("tool_calls") or [])
    return row


def reference_load(p: Path) -> dict[str, pd.DataFrame]:
    grades = []
    for d in _lines(p / "grades.jsonl"):
        d = dict(d)
        d["checks"] = list(d.get("checks") or [])
        grades.append(d)
    return {
        "samples": _frame([_sample_row(d) for d in _lines(p / "results.jsonl")], runload.SAMPLE_COLUMNS),
        "grades": _frame(grades, runload.GRADE_COLUMNS),
        "ledger": _frame(_lines(p / "ledger.jsonl"), runload.LEDGER_COLUMNS),
        "errors": _frame(_lines(p / "errors.jsonl"), runload.ERROR_COLUMNS),
    }


def same(a: Any, b: Any) -> bool:
    """Equal and of the same type, all the way down (NaN equals NaN; None is not NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def assert_same_frame(got: pd.DataFrame, want: pd.DataFrame, name: str) -> None:
    assert list(got.columns) == list(want.columns), name
    assert [str(t) for t in got.dtypes] == [str(t) for t in want.dtypes], name
    assert got.index.equals(want.index), name
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    for c in want.columns:
        for i, (x, y) in enumerate(zip(got[c].tolist(), want[c].tolist(), strict=True)):
            assert same(x, y), f"{name}.{c}[{i}]: {x!r} != {y!r}"


def assert_loads_like_reference(path: Path) -> runload.Run:
    want = reference_load(path)
    for cache in (False, True, True):  # the cached copy too, first and second time
        run = runload.load_run(path, cache=cache)
        for name, df in want.items():
            assert_same_frame(getattr(run, name), df, name)
    return run


# -- a seeded random run folder with odd values -------------------------------------------


ODD_TEXT = ["Paris", "", "naïve café ☕", "日本語", "emoji 😀 and \u2028 line sep", "tab\tand\nnewline", '"quoted"', "\\"]


def _odd_value(rnd: random.Random) -> Any:
    return rnd.choice([None, 0, -1, 2**40, 1.5, -0.0, 1e-300, True, False, rnd.choice(ODD_TEXT), [], {"x": None}])


def write_odd_run(root: Path, seed: int, n: int = 400) -> Path:
    rnd = random.Random(seed)
    run = root / "runs" / "20260101-000000"
    run.mkdir(parents=True)
    cases = [f"case-{i}" if i % 5 else f"cas é {i}" for i in range(n // 8)]
    (run / "config.json").write_text(
        json.dumps({"suite": None, "arms": ["baseline", "guided"], "k": 4, "cases": cases})
    )
    results, grades, ledger, errors = [], [], [], []
    for i in range(n):
        case, arm, index = rnd.choice(cases), rnd.choice(["baseline", "guided", "other ✓"]), rnd.randrange(6)
        r: dict[str, Any] = {"case_id": case, "arm": arm, "index": index}
        for key, choices in (
            ("tags", [["a"], [], None, ["ü", "b"]]),
            ("output", ODD_TEXT + [None]),
            ("tool_calls", [[], None, [{"name": "f", "arguments": "{}"}]]),
            ("usage", [None, {}, {"prompt_tokens": 3}, {"prompt_tokens": 10, "completion_tokens": 2}]),
            ("latency_ms", [12.5, 0, None]),
            ("cost_usd", [1e-6, 0.0, None, 3]),
            ("cost_avoided_usd", [0.0, 2e-7]),
            ("cached", [True, False, None]),
            ("seed", [7, 2**31 - 1, None]),
        ):
            if rnd.random() < 0.85:  # sometimes the key is missing altogether
                r[key] = rnd.choice(choices)
        if rnd.random() < 0.1:
            r[f"extra_{rnd.randrange(3)}"] = _odd_value(rnd)
        results.append(r)
        if rnd.random() < 0.9:
            g: dict[str, Any] = {"case_id": case, "arm": arm, "index": index}
            for key, choices in (
                ("passed", [True, False, None]),
                ("checks", [[], None, [{"name": "contains", "passed": False, "reason": "no «Paris»"}]]),
                ("judge_score", [None, 3, 4.5]),
                ("judge_cost_usd", [0.0, 1e-5, None]),
                ("judge_version", [None, "rubric-v1"]),
                ("error", [None, "grader crashed ☠"]),
            ):
                if rnd.random() < 0.85:
                    g[key] = rnd.choice(choices)
            grades.append(g)
        ledger.append({"t": i * 0.5, "event": rnd.choice(["reserve", "settle", "release"]), "amount_usd": 1e-6})
        if rnd.random() < 0.05:
            errors.append({"case_id": case, "arm": arm, "index": index, "error": "HTTP 500 ✗", "attempts": 3})
    for name, rows in (("results", results), ("grades", grades), ("ledger", ledger), ("errors", errors)):
        with open(run / f"{name}.jsonl", "w", encoding="utf-8") as fh:
            for row in rows:  # both spellings a writer may use: escaped and raw UTF-8
                fh.write(json.dumps(row, ensure_ascii=rnd.random() < 0.5) + "\n")
                if rnd.random() < 0.02:
                    fh.write("\n")  # a blank line is skipped
    return run


def test_committed_v01_run_loads_like_the_reference():
    assert_loads_like_reference(DATA_RUN)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_odd_run_loads_like_the_reference(tmp_path, seed):
    run = assert_loads_like_reference(write_odd_run(tmp_path, seed))
    assert len(run.samples) == 400 and len(run.grades) > 300


def test_ungraded_run_has_empty_frames_with_their_columns(tmp_path):
    run_dir = write_odd_run(tmp_path, 4)
    for name in ("grades", "ledger", "errors"):
        (run_dir / f"{name}.jsonl").unlink()
    run = assert_loads_like_reference(run_dir)
    assert list(run.grades.columns) == list(runload.GRADE_COLUMNS) and not len(run.grades)
    assert list(run.ledger.columns) == list(runload.LEDGER_COLUMNS) and not len(run.ledger)


def test_grade_values_are_the_grade_rows_columns(tmp_path):
    """`grade_values` (by column) names the same value as `grade_map` (a dict per row) for
    every key, duplicates included (the last row of a key wins in both)."""
    run = runload.load_run(write_odd_run(tmp_path, 5))
    rows = runload.grade_map(run)
    cols = ("passed", "error", "checks", "judge_cost_usd", "judge_version")
    values = runload.grade_values(run, cols)
    assert list(values) == list(rows)
    for key, row in rows.items():
        assert all(same(v, row[c]) for c, v in zip(cols, values[key], strict=True)), key
        assert runload.passed_value(values[key][0]) == runload.grade_passed(row)


@pytest.mark.parametrize("seed, odd_keys, grade_lines", [(7, False, "odd"), (8, True, "odd"), (9, False, "aligned"),
                                                         (10, True, "aligned"), (11, False, "reordered")])
def test_sample_keys_name_each_sample_s_key_and_grade_row(tmp_path, seed, odd_keys, grade_lines):
    """`sample_keys` (the key columns factorized) names, for each sample row, the case id
    and arm `key_tuples` gives it and the grade row a dict of the grades' keys finds (the
    last row of a key), -1 when none; typed key columns and converted ones (case ids
    written as numbers, indices as 2.0 or "2") alike, grades in the samples' order (a
    duplicated sample's key graded twice: both read the last), one for each sample in
    another order, or not one for each, and a run with no grade or no sample."""
    from test_gates import write_odd_graded_run

    run = runload.load_run(write_odd_graded_run(tmp_path, seed, odd_keys=odd_keys, grade_lines=grade_lines))
    assert (runload.keys_typed(run.samples) and runload.keys_typed(run.grades)) is not odd_keys
    for r in (run, dataclasses.replace(run, grades=run.grades.iloc[:0]), dataclasses.replace(run, samples=run.samples.iloc[:0])):
        rows = dict(zip(runload.key_tuples(r.grades), range(len(r.grades)))) if len(r.grades) else {}
        keys = runload.key_tuples(r.samples) if len(r.samples) else []
        got = runload.sample_keys(r)
        assert [got.case_ids[c] for c in got.case.tolist()] == [k[0] for k in keys]
        assert [got.arms[a] for a in got.arm.tolist()] == [k[1] for k in keys]
        assert got.grade_row.tolist() == [rows.get(k, -1) for k in keys]
    assert len(set(runload.key_tuples(run.grades))) < len(run.grades)  # duplicated keys: the last row wins


def test_verdicts_and_metrics_read_the_odd_run(tmp_path):
    """The analyses that read grades by column give what a row-by-row reading gives."""
    run = runload.load_run(write_odd_run(tmp_path, 6))
    rows = runload.grade_map(run)
    trials = verdicts.paired_trials(run, "baseline", "guided")
    for t in trials:
        for arm, got in (("baseline", t.baseline_passed), ("guided", t.treatment_passed)):
            row = rows.get((t.case_id, arm, t.index))
            present = ((run.samples["case_id"] == t.case_id) & (run.samples["arm"] == arm)
                       & (run.samples["index"] == t.index)).any()
            assert got == (runload.grade_passed(row) if present else None)
    m = gates.run_metrics(run, arm="guided")
    s = run.samples[run.samples["arm"] == "guided"]
    for case in m.cases:
        mine = s[s["case_id"] == case.case_id]
        passed = [runload.grade_passed(rows.get((case.case_id, "guided", int(i)))) for i in mine["index"]]
        assert (case.n, case.c, case.ungraded) == (len(mine), passed.count(True), passed.count(None))
    assert m.by_id() is m.by_id() and list(m.by_id()) == [c.case_id for c in m.cases]


def test_the_ledger_is_read_when_first_asked_for(tmp_path):
    run_dir = write_odd_run(tmp_path, 7)
    run = runload.load_run(run_dir)
    assert "ledger" not in vars(run)  # not read by the load
    assert len(run.ledger) == 400 and run.ledger is run.ledger  # read once, then kept


def test_keyed_values_look_up_what_the_key_indexed_frame_holds(tmp_path):
    """`keyed_values` of `sample_texts` (what the comparison page looks each trial's texts
    up in) holds, for every key of the frame, the values a DataFrame indexed by the key
    gives for a unique key, and the last row's for a duplicated one; no other key."""
    run = runload.load_run(write_odd_run(tmp_path, 7))
    texts = runload.sample_texts(run)
    got = runload.keyed_values(texts, ("output", "reasons"))
    indexed = texts.set_index(["case_id", "arm", "index"])
    dup = indexed.index.duplicated(keep=False)
    assert dup.any() and (~dup).any()
    assert set(got) == {(str(c), str(a), int(i)) for c, a, i in indexed.index}
    for (key, row), is_dup in zip(indexed.iterrows(), dup, strict=True):
        if not is_dup:
            assert same(got[key][0], indexed["output"].get(key)) and same(got[key][1], indexed["reasons"].get(key))
    last = texts.drop_duplicates(["case_id", "arm", "index"], keep="last")
    for r in last.itertuples(index=False):
        assert same(got[(r.case_id, r.arm, r.index)], (r.output, r.reasons))


def test_sample_texts_of_some_cases_are_those_rows_of_every_sample_s(tmp_path):
    """`sample_texts(run, cases=...)` (a page showing a few hundred trials of a large run)
    gives exactly the rows `sample_texts(run)` gives for those cases."""
    from conftest import make_run, two_arm

    from evalkit.runfolder.runload import load_run, sample_texts

    run = load_run(make_run(tmp_path, "1-r", two_arm({f"c{i}": ([True, False, None], [False, True, "nograde"])
                                                      for i in range(6)}), k=3))
    every = sample_texts(run)
    some = sample_texts(run, cases=["c4", "c1", "c1"])
    want = every[every["case_id"].isin(["c1", "c4"])].reset_index(drop=True)
    assert len(some) == 12 and some.reset_index(drop=True).equals(want)
    assert len(sample_texts(run, cases=[])) == 0


def test_keyed_values_are_the_same_from_typed_and_untyped_key_columns():
    """`keyed_values` reads typed key columns (strings with no gap, integer indices) with no
    conversion per row, and any other with one: the same keys and values either way, the
    last row of a key winning, a missing case id never a key of the fast path."""
    import pandas as pd

    from evalkit.runfolder.runload import keys_typed, keyed_values

    rows = {"case_id": ["c1", "c2", "c1"], "arm": ["a", "a", "a"], "index": [0, 0, 0], "v": [1, 2, 3]}
    typed = pd.DataFrame(rows).astype({"case_id": "string", "arm": "string"})
    untyped = pd.DataFrame(rows).astype({"index": "float64"})
    assert keys_typed(typed) and not keys_typed(untyped)
    want = {("c1", "a", 0): (3,), ("c2", "a", 0): (2,)}
    assert keyed_values(typed, ("v",)) == want == keyed_values(untyped, ("v",))
    gap = typed.copy()
    gap.loc[1, "case_id"] = pd.NA
    assert not keys_typed(gap)


def test_a_loaded_run_shares_one_string_per_case_id_and_arm(tmp_path):
    """The parser makes a string per line; the loader interns the key columns, so every
    row of a case holds the one string (hashed once for every dict keyed by it, pickled
    once for the report's kernels), and the values are the same."""
    from conftest import make_run, two_arm

    from evalkit.runfolder.runload import load_run

    run = load_run(make_run(tmp_path, "1-r", two_arm({f"c{i}": ([True, False, True], [False, True, True])
                                                      for i in range(4)}), k=3))
    for frame in (run.samples, run.grades):
        assert len({id(v) for v in frame["case_id"].tolist()}) == 4 == frame["case_id"].nunique()
        assert len({id(v) for v in frame["arm"].tolist()}) == 2
    assert sorted(set(run.samples["case_id"].tolist())) == ["c0", "c1", "c2", "c3"]


def test_sample_texts_of_some_cases_match_numeric_case_ids_as_strings(tmp_path):
    """A run whose lines hold numeric case ids (hand-written, imported) is looked up as
    `keyed_values` keys it: by the id's string."""
    import pandas as pd

    from evalkit.runfolder.runload import Run, sample_texts

    samples = pd.DataFrame({"case_id": [5, 6], "arm": ["a", "a"], "index": [0, 0], "output": ["five", "six"]})
    grades = pd.DataFrame({"case_id": [5, 6], "arm": ["a", "a"], "index": [0, 0], "passed": [True, False],
                           "checks": [[], [{"name": "n", "passed": False, "reason": "r"}]], "judge_score": [None, None],
                           "judge_reason": [None, None]})
    run = Run(path=tmp_path, config={}, summary={}, samples=samples, grades=grades, errors=pd.DataFrame())
    some = sample_texts(run, cases=["6"])
    assert some["output"].tolist() == ["six"] and some["reasons"].tolist() == ["n: r"]


def test_case_order_is_the_planned_cases_then_the_others_as_first_met(tmp_path):
    """`case_order`: the config's cases in order, then each other case id the samples name,
    once, where it first appears (read by pandas' hash table for a string column), the
    same order a plain walk over the rows gives."""
    run = runload.load_run(write_odd_run(tmp_path, 9))
    planned = [str(c) for c in run.config["cases"]]
    run.config["cases"] = planned[5:] + planned[:2]  # some planned cases left out of the plan, out of order
    walk: list[str] = list(run.config["cases"])
    for c in run.samples["case_id"].tolist():
        if str(c) not in walk:
            walk.append(str(c))
    assert isinstance(run.samples["case_id"].dtype, pd.StringDtype)
    assert runload.case_order(run) == walk and walk[len(run.config["cases"]):]


def test_shared_cells_are_the_same_values_each_distinct_one_once(tmp_path):
    """`shared_cells` (what the report pickles for its kernels) holds the same frames,
    value for value and dtype for dtype; equal strings and equal lists are one object
    each, a list is never merged with a list that only looks the same (NaN and None, 1
    and True), and the run's own frames are left as they were."""
    run = runload.load_run(write_odd_run(tmp_path, 10))
    odd = [[float("nan")], [None], [1], [True], [1.0], [float("nan")]]
    for i, v in enumerate(odd):
        run.grades.at[i, "checks"] = v
    before = [id(x) for x in run.samples["tags"].tolist()]
    shared = runload.shared_cells(run)
    for name in ("samples", "grades"):
        mine, theirs = getattr(shared, name), getattr(run, name)
        pd.testing.assert_frame_equal(mine, theirs)
    assert [id(x) for x in run.samples["tags"].tolist()] == before
    tags = shared.samples["tags"].tolist()
    by_value: dict[str, int] = {}
    for t in tags:
        assert by_value.setdefault(json.dumps(t), id(t)) == id(t)  # equal lists: one object
    checks = shared.grades["checks"].tolist()[: len(odd)]
    assert [type(x[0]) for x in checks] == [float, type(None), int, bool, float, float]
    assert len({id(x) for x in checks[:5]}) == 5  # none merged: [1], [True] and [1.0] differ in type
    assert math.isnan(checks[5][0]) and checks[1] == [None]
    outputs = [o for o in shared.samples["output"].tolist() if isinstance(o, str)]
    assert len({id(o) for o in outputs}) == len(set(outputs))
