"""Why each case failed: failing samples grouped by case, never-passing first, capped
with a count of what was left out; errored and ungraded samples are failures too."""
from __future__ import annotations

import json

from conftest import make_run

from evalkit import nb
from evalkit.failures import failures
from evalkit.runload import load_run


def _run(tmp_path):
    outcomes = {("always", "a"): [True, True, True], ("never", "a"): [False, False, False],
                ("flaky", "a"): [True, False, None], ("gone", "a"): [True, True, "missing"]}
    run = make_run(tmp_path, "r1", outcomes, k=3, errors=[("gone", "a", 2)])
    lines = [json.loads(x) for x in (run / "grades.jsonl").read_text().splitlines()]
    for g in lines:  # a real reason on one failing check, a judge verdict on another
        if (g["case_id"], g["index"]) == ("never", 0):
            g["checks"] = [{"name": "contains", "passed": False, "reason": "'Naypyidaw' not found in output"}]
        if (g["case_id"], g["index"]) == ("never", 1):
            g["checks"] = [{"name": "judge", "passed": False, "reason": ""}]
            g["judge_score"], g["judge_reason"] = 2, "vague <b>"
    (run / "grades.jsonl").write_text("".join(json.dumps(g) + "\n" for g in lines))
    return load_run(run)


def test_grouped_never_first_with_reasons(tmp_path):
    f = failures(_run(tmp_path))
    assert [(c.case_id, c.passed, c.n) for c in f.cases] == [("never", 0, 3), ("flaky", 1, 3), ("gone", 2, 3)]
    never = f.cases[0]
    assert [s.index for s in never.samples] == [0, 1, 2] and not never.flaky
    assert never.samples[0].why() == "contains: 'Naypyidaw' not found in output"
    assert never.samples[1].why() == "judge: score 2, vague <b>"
    flaky = f.cases[1]
    assert flaky.flaky and [s.index for s in flaky.samples] == [1, 2]
    assert "judge failed" in flaky.samples[1].why()  # ungraded: never a pass
    gone = f.cases[2]
    assert gone.samples[0].output is None and "HTTP 500" in gone.samples[0].why()
    assert f.n_failed_samples == 6 and f.cases_left_out == 0 and f.samples_left_out == 0


def test_capped_with_what_was_left_out(tmp_path):
    f = failures(_run(tmp_path), max_cases=1, max_samples=2)
    assert [c.case_id for c in f.cases] == ["never"] and f.cases[0].samples_left_out == 1
    assert f.cases_left_out == 2 and f.samples_left_out == 1 + 3
    assert "Left out: 2 case-arms and 4 more failing samples." in f.summary()
    page = nb.failures_html(f)
    assert "vague &lt;b&gt;" in page and "1 more failing sample not shown" in page
