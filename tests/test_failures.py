"""Why each case failed: failing samples grouped by case, never-passing first, capped
with a count of what was left out; errored and ungraded samples are failures too."""
from __future__ import annotations

import json

import pytest

from conftest import make_run

from evalkit.telling import nb
from evalkit.telling.failures import failures
from evalkit.runfolder.runload import load_run


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


def _reference_failures(run, arms=None, max_cases=15, max_samples=3):
    """The failures view as first written (a dict per sample and per grade row): the fast
    one (columns, a record only for a failing sample) must give exactly what it gave."""
    from evalkit.telling.failures import CaseFailures, FailedSample, Failures, _checks, _opt

    by_key = {}
    for g in run.grades.to_dict("records") if len(run.grades) else ():
        by_key[(str(g["case_id"]), str(g["arm"]), int(g["index"]))] = g
    groups = {}
    for s in run.samples.to_dict("records") if len(run.samples) else ():
        key = (str(s["case_id"]), str(s["arm"]), int(s["index"]))
        if arms is not None and key[1] not in arms:
            continue
        g = by_key.get(key, {})
        fs = FailedSample(key[2], _opt(s.get("output")), _checks(g.get("checks")), _opt(g.get("judge_score")),
                          _opt(g.get("judge_reason")), _opt(g.get("error")) or (None if g else "not graded"),
                          bool(_opt(g.get("judge_unstable"))))
        groups.setdefault(key[:2], []).append((g.get("passed") is True, fs))
    for e in run.errors.to_dict("records") if len(run.errors) else ():
        if arms is None or str(e["arm"]) in arms:
            fs = FailedSample(int(e["index"]), None, (), None, None, str(e.get("error") or "errored"))
            groups.setdefault((str(e["case_id"]), str(e["arm"])), []).append((False, fs))
    failing = []
    for (case, arm), items in groups.items():
        bad = sorted((fs for ok, fs in items if not ok), key=lambda fs: fs.index)
        if bad:
            failing.append((case, arm, len(items), len(items) - len(bad), bad))
    failing.sort(key=lambda t: (t[3] > 0, t[3] / t[2], t[0], t[1]))
    cases = tuple(CaseFailures(c, a, n, p, tuple(b[:max_samples]), max(len(b) - max_samples, 0))
                  for c, a, n, p, b in failing[:max_cases])
    return Failures(cases, len(failing) - len(cases),
                    sum(c.samples_left_out for c in cases) + sum(len(t[4]) for t in failing[max_cases:]),
                    sum(len(t[4]) for t in failing))


@pytest.mark.parametrize("seed", [11, 12])
def test_the_failures_view_is_the_row_by_row_reading(tmp_path, seed):
    """On a seeded run with odd values (missing keys, null and odd verdicts, duplicate keys,
    samples without a grade, errors, a third arm), every case-arm, sample and count is the
    one a dict-per-row reading gives, with and without an arm filter and a cap."""
    from test_runload import write_odd_run

    path = write_odd_run(tmp_path, seed)
    lines = [json.loads(x) for x in (path / "grades.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    for g in lines[::7]:  # empty strings, which a page shows as nothing, as it shows None
        g.update(error="", judge_reason="", passed=False)
    (path / "grades.jsonl").write_text("".join(json.dumps(g) + "\n" for g in lines), encoding="utf-8")
    run = load_run(path)
    assert len(run.errors) and len(run.samples) > len(run.grades)
    for kw in ({"max_cases": 10**6, "max_samples": 10**6}, {}, {"arms": ["guided"], "max_cases": 10**6},
               {"arms": ["other ✓", "baseline"], "max_cases": 4, "max_samples": 1}):
        want = _reference_failures(run, **kw)
        assert failures(run, **kw) == want, kw
    assert want.n_failed_samples > 0


@pytest.mark.parametrize("seed, odd_keys, grade_lines", [(21, False, "odd"), (22, True, "odd"), (23, False, "aligned"),
                                                         (24, True, "reordered")])
def test_the_failures_view_of_odd_verdicts_and_keys(tmp_path, seed, odd_keys, grade_lines):
    """A verdict that is not True itself ("true", 1, NaN, null) is a failing sample, a
    duplicated grade key's last line is the one read, a sample with no grade fails, case
    ids written as numbers and indices as 2.0 or "2" name one key, grades in the samples'
    order or not, an unstable judge is said:
    as the row-by-row reading says, with and without an arm filter and caps."""
    from test_gates import write_odd_graded_run

    run = load_run(write_odd_graded_run(tmp_path, seed, odd_keys=odd_keys, grade_lines=grade_lines))
    assert "judge_unstable" in run.grades.columns and len(run.errors)
    for kw in ({"max_cases": 10**6, "max_samples": 10**6}, {}, {"arms": ["third"], "max_cases": 10**6},
               {"arms": ["guided", "nope"], "max_cases": 5, "max_samples": 2}, {"arms": []}):
        want = _reference_failures(run, **kw)
        assert failures(run, **kw) == want, kw
    every = failures(run, max_cases=10**6, max_samples=10**6)
    assert any(s.judge_unstable for c in every.cases for s in c.samples)
    assert every.n_failed_samples and (grade_lines != "odd" or any(s.error == "not graded" for c in every.cases for s in c.samples))
