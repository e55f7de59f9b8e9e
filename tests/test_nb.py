"""The notebook helpers (evalkit.telling.nb): every way a page shows run data escapes it."""
from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit.conclusions import microtest
from evalkit.telling import nb
from evalkit.numbers import stats

SCRIPT_TAG = "<script>alert(1)</script>"
IMG_TAG = "<img src=x onerror=alert(1)>"


def test_text_helpers_escape():
    assert nb.text_html(SCRIPT_TAG).count("<script") == 0
    t = nb.table_html([{"out": IMG_TAG, "n": 1.5}])
    assert "<img" not in t and "&lt;img src=x onerror=alert(1)&gt;" in t
    assert microtest.answer_shape("Done.\n") == microtest.answer_shape("done!") != microtest.answer_shape("Done.\nMore")
    assert math.isclose(nb.rate_interval(0.5, 10).low, stats.proportion_interval(5, 10).low)
    # a missing or null grade is never a pass, whatever type pandas gives it
    assert [microtest.is_pass(v) for v in (True, np.True_, False, np.False_, None, float("nan"))] == \
        [True, True, False, False, False, False]


def test_an_empty_run_dir_picks_the_newest_run_under_the_current_directory(tmp_path, monkeypatch):
    import json as _json

    from evalkit.foundations.errors import InputError

    suite = tmp_path / "evals" / "unit"
    for name, created in (("20260101-000000", "2026-01-01T00:00:00+00:00"),
                          ("20260301-000000", "2026-03-01T00:00:00+00:00"),
                          ("20260201-000000", "2026-02-01T00:00:00+00:00")):
        (suite / "runs" / name).mkdir(parents=True)
        (suite / "runs" / name / "config.json").write_text(_json.dumps({"created": created}))
    newest = (suite / "runs" / "20260301-000000").resolve()
    for where in (tmp_path, tmp_path / "evals", suite):  # the project, its evals/, the suite itself
        monkeypatch.chdir(where)
        assert nb.newest_run() == newest and nb.resolve_run("") == newest
    monkeypatch.chdir(tmp_path / "evals" / "unit" / "runs")  # no suite here: none is guessed elsewhere
    with pytest.raises(InputError, match="no run found under the current directory"):
        nb.resolve_run("")


def test_records_frame_is_the_frame_of_the_records_dicts(tmp_path):
    """`records_frame` of the paired trials of a seeded odd run (errored trials with their
    problem, ungraded sides) is the frame of their `asdict` dicts: columns, dtypes, values
    and each value's type; no records, an empty frame as well."""
    import dataclasses

    import pandas as pd
    from test_runload import same, write_odd_run

    from evalkit.runfolder import runload
    from evalkit.conclusions import verdicts

    trials = verdicts.paired_trials(runload.load_run(write_odd_run(tmp_path, 8)), "baseline", "guided")
    assert {t.outcome for t in trials} >= {"errored", "tie"} and any(t.baseline_passed is None for t in trials)
    got, want = nb.records_frame(trials), pd.DataFrame([dataclasses.asdict(t) for t in trials])
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert list(got.dtypes) == list(want.dtypes)
    assert all(same(x, y) for c in want for x, y in zip(got[c].tolist(), want[c].tolist(), strict=True))
    pd.testing.assert_frame_equal(nb.records_frame([]), pd.DataFrame([]))
    # no records of a known type: its fields are still the columns (the comparison page's frame of no trials)
    empty = nb.records_frame([], verdicts.PairedTrial)
    assert list(empty.columns) == [f.name for f in dataclasses.fields(verdicts.PairedTrial)] and len(empty) == 0


def test_a_small_group_has_an_exact_interval_never_a_point():
    """Three cases that all failed: the normal interval across cases is "0% (0% to 0%)";
    the page shows the exact Clopper-Pearson interval of 0 of 3 cases instead (statsmodels'
    proportion_confint), and a rate over few samples gets the exact interval too."""
    low, high = nb.score_interval(0.0, 0.0, 3)
    cp = stats.proportion_interval(0, 3, method="clopper-pearson")
    assert (low, high) == (0.0, cp.high) and cp.high > 0.7
    assert nb.score_interval(1.0, 0.0, 40) == pytest.approx((stats.proportion_interval(40, 40, "clopper-pearson").low, 1.0))
    # a large group with spread keeps its normal interval, held to [0, 1]
    lo, hi = nb.score_interval(0.98, 0.02, 40)
    assert hi == 1.0 and lo == pytest.approx(0.98 - stats.normal_quantile(0.975) * 0.02)
    assert nb.score_interval(None, None, 3) == (None, None)
    assert nb.rate_interval(0.0, 6).method == "clopper-pearson" and nb.rate_interval(0.0, 6).high > 0.4
    assert nb.rate_interval(0.5, 10).method == "wilson"
