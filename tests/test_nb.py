"""The notebook helpers (evalkit.nb): every way a page shows run data escapes it."""
from __future__ import annotations

import math

import numpy as np

from evalkit import microtest, nb, stats

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
