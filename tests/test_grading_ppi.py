"""Corrected judged rates end to end: a 500-sample run judged by a generous judge on
the scripted server, 40 of its samples labelled by "people" (the label file `judge
sample` draws, filled in), graded; `grades-summary.json` gives the judge-only and the
prediction-powered rate, the latter equal to ppi-python to 1e-9 and covering the human
rate the test knows."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import ppi_py
import pytest

from evalkit.telling import labelling
from evalkit.conclusions.grading import GRADES_SUMMARY, grade_run, judged_rates
from evalkit.foundations.records import Case, CaseTable, Check, CheckResult, Grade, GradesSummary, Sample, Usage
from evalkit.runfolder.runs import RunFolder, iter_jsonl
from evalkit.calls.serve import ScriptedServer
from test_grading import write_suite

N_CASES, K = 100, 5
# the judge is generous: it passes the SLY outputs people fail (+8 points of 500)
JUDGE = {
    "model": "judge-model",
    "rules": [
        {"match": "ANSWER-GOOD", "text": "SCORE: 5 REASON: meets the rubric"},
        # asked again at other seeds it sometimes says 2: seed 7 (the grading's) picks the 4, seed 8 the 2
        {"match": "ANSWER-SLY", "texts": ["SCORE: 2 REASON: not quite", "SCORE: 4 REASON: looks fine"]},
        {"match": "ANSWER-STERN", "text": "SCORE: 2 REASON: too short"},
        {"match": "ANSWER-BAD", "text": "SCORE: 1 REASON: misses the rubric"},
    ],
    "default": {"text": "SCORE: 1 REASON: ?"},
}
HUMAN = {"GOOD": 5, "SLY": 2, "STERN": 5, "BAD": 1}


def kind_of(i: int) -> str:
    """Sample i's kind: 280 GOOD, 45 SLY, 5 STERN, 170 BAD (human rate 57%, judge 65%)."""
    r = (i * 37) % 500
    return "GOOD" if r < 280 else "SLY" if r < 325 else "STERN" if r < 330 else "BAD"


def _new_run(root: Path, suite: Path, k: int = K) -> tuple[RunFolder, list[dict]]:
    """A run folder of `suite`'s cases under `root/runs` (one arm, baseline, `k` samples a
    case), and the cases."""
    cases = [json.loads(ln) for ln in (suite / "cases.jsonl").read_text().splitlines()]
    meta = {"suite": str(suite), "suite_name": "suite", "config": json.loads((suite / "config.json").read_text()),
            "arms": ["baseline"], "k": k, "cases": [c["id"] for c in cases], "source": "evalkit"}
    return RunFolder.create(root / "runs", meta), cases


def _sample(case: dict, i: int, output: str, request_hash: str) -> Sample:
    """Sample `i` of `case` on the baseline arm, answering `output`."""
    return Sample(case_id=case["id"], tags=tuple(case["tags"]), arm="baseline", index=i, seed=7, model="gen-model",
                  output=output, tool_calls=(), finish_reason="stop", usage=Usage(10, 5), latency_ms=100.0,
                  cost_usd=0.00002, request_hash=request_hash)


def _answers_run(
    root: Path, suite: Path, kind_at: Callable[[int], str], tail: str = "", hash_prefix: str = "h"
) -> RunFolder:
    """K samples a case, sample n answering `ANSWER-<kind_at(n)> number n<tail>`."""
    folder, cases = _new_run(root, suite)
    for ci, c in enumerate(cases):
        for i in range(K):
            n = ci * K + i
            folder.append_result(_sample(c, i, f"ANSWER-{kind_at(n)} number {n}{tail}", f"{hash_prefix}{n}"))
    folder.close()
    return folder


def _run(root: Path, suite: Path) -> Path:
    """The 100-case run: sample n answers as `kind_of(n)` says."""
    return _answers_run(root, suite, kind_of).path


def test_forty_labels_correct_a_generous_judge_as_ppi_python_does(tmp_path):
    cases = [{"id": f"open-{c:03d}", "input": f"Describe {c}", "expected": {"rubric": "Accurate"},
              "tags": ["open", "even" if c % 2 == 0 else "odd"], **({"set": "regression"} if c < 50 else {})}
             for c in range(N_CASES)]
    suite = write_suite(tmp_path, cases=cases, extra={"k": K, "cost_cap_usd": 5.0, "judged_estimate": "corrected"})
    run = _run(tmp_path, suite)
    with ScriptedServer(JUDGE) as srv:
        grade_run(run, judge_base_url=srv.base_url)
        items = labelling.draw_items(run, 40, seed=3)
        for it in items:  # a person scores each drawn output
            it["score"], it["rater"] = HUMAN[it["output"].split()[0].removeprefix("ANSWER-")], "ana"
        labelling.write_label_file(items, suite / "judge" / "human-sample.jsonl")
        res = grade_run(run, judge_base_url=srv.base_url, judge_repeats=3)  # the judge replays at $0; 100 asks more
    summary = json.loads((run / GRADES_SUMMARY).read_text())
    jr = summary["judged_rates"]
    assert GradesSummary.from_json(summary).judged_rates == jr == res.summary.judged_rates
    assert jr["estimate"] == "corrected" and jr["n_labelled"] == 40 and jr["n_judged"] == 500
    kinds = [kind_of(n) for n in range(500)]
    human_rate = sum(HUMAN[k] >= 4 for k in kinds) / 500
    judge_rate = sum(k in ("GOOD", "SLY") for k in kinds) / 500
    block = jr["overall"]
    assert block["judge_only"]["rate"] == pytest.approx(judge_rate) and block["judge_only"]["N"] == 500
    assert not block["judge_only"]["low"] <= human_rate <= block["judge_only"]["high"]  # 8 points off, "sure"
    cor = block["corrected"]
    assert (cor["n"], cor["N"]) == (40, 500)
    assert cor["low"] <= human_rate <= cor["high"]
    # ppi-python on the same vectors: the labelled items' human and judge pass, the judge on all 500
    by_item = {f"{g['case_id']}/{g['arm']}/{g['index']}": g for g in iter_jsonl(run / "grades.jsonl")}
    Y = np.array([float(it["score"] >= 4) for it in items])
    Yh = np.array([float(by_item[it["item"]]["judge_passed"]) for it in items])
    Yu = np.array([float(g["judge_passed"]) for g in by_item.values()])
    assert cor["rate"] == pytest.approx(float(np.squeeze(ppi_py.ppi_mean_pointestimate(Y, Yh, Yu))), abs=1e-9)
    low, high = ppi_py.ppi_mean_ci(Y, Yh, Yu, alpha=0.05)
    assert (cor["clt_low"], cor["clt_high"]) == pytest.approx((float(low[0]), float(high[0])), abs=1e-9)
    assert jr["overall"]["bias"]["value"] == pytest.approx(float((Yh - Y).mean()), abs=1e-12)
    # per arm, per set and per tag, each over its own samples
    arm = jr["per_arm"]["baseline"]
    assert set(arm["per_set"]) == {"regression", "capability"} and set(arm["per_tag"]) == {"open", "even", "odd"}
    assert arm["per_set"]["regression"]["judge_only"]["N"] == 250
    assert arm["per_tag"]["open"] == arm["overall"]
    # the judge asked 3 times on 50 items: the SLY ones flip once in two repeats
    cons = summary["judge_consistency"]["per_version"]["v1"]
    assert cons["n_items"] == 50 and cons["n_asks"] == 100 and cons["unstable"]
    assert all(by_item[i]["judge_score"] == 4 for i in cons["unstable"])
    assert cons["flip_rate"] == pytest.approx(len(cons["unstable"]) / 100)
    # the calibration page shows the corrected rate first, the judge-only one, the bias and the flip rate
    from evalkit.telling.reports import report_run

    rep = report_run(run, tmp_path / "reports", notebooks=["judge_calibration", "run_summary"], parallel=False)
    page = (tmp_path / "reports" / run.name / "judge_calibration.html").read_text()
    side = json.loads((tmp_path / "reports" / run.name / "judge_calibration.json").read_text())
    assert rep is not None and side["run"]["judged_rates"]["overall"] == jr["overall"]
    assert side["run"]["judge_consistency"] == summary["judge_consistency"]
    from evalkit.foundations import fmt

    assert f"Corrected judged sample pass rate {fmt.pct_ci(cor['rate'], cor['low'], cor['high'])}" in page
    assert page.index("corrected (95% CI)") < page.index("judge only (95% CI)")
    assert fmt.pct(cons["flip_rate"]) in page and "flip rate" in page
    assert "Verdicts and the gate rest on the corrected estimate" in page
    summary_page = (tmp_path / "reports" / run.name / "run_summary.html").read_text()
    assert fmt.pct_ci(cor["rate"], cor["low"], cor["high"]) in summary_page
    assert summary_page.index("corrected (95% CI)") < summary_page.index("judge only (95% CI)")
    from evalkit._cli.grade import summary_lines

    printed = "\n".join(summary_lines(res.summary, run))
    assert f"judged sample pass rate: corrected {fmt.pct_ci(cor['rate'], cor['low'], cor['high'])}" in printed
    assert "judge v1 consistency: 50 item(s) asked 3 times" in printed


def test_a_failed_check_fails_both_a_lone_label_corrects_nothing_and_unjudged_samples_are_left_out():
    case = Case("j", "q", {"rubric": "r"}, ("t",), rubric="r", checks=(Check("contains", {"value": "x"}),))
    plain = Case("p", "q", "x", ("t",))
    det_fail = (CheckResult("contains", False, "no x"), CheckResult("judge", True))
    grades = [
        Grade("j", "a", 0, False, det_fail, judge_score=5, judge_passed=True),  # the check fails: no pass for anyone
        Grade("j", "a", 1, True, (CheckResult("contains", True),), judge_score=5, judge_passed=True),
        Grade("j", "a", 2, None, (), error="judge error: x"),  # no score: not a judged sample
        Grade("p", "a", 0, True, (CheckResult("contains", True),)),  # not a judged case
    ]
    cases, table = {"j": case, "p": plain}, CaseTable.from_cases([case, plain])
    assert judged_rates(grades[3:], cases, table, {}) is None
    one = judged_rates(grades, cases, table, {"j/a/0": 5})
    assert one is not None and one["n_judged"] == 2 and one["n_labelled"] == 1
    assert one["overall"]["judge_only"]["rate"] == 0.5
    assert one["overall"]["human"] == {"rate": 0.0, "n": 1}  # the person's 5 does not undo the failed check
    assert one["overall"]["corrected"] is None and one["estimate"] == "judge"
    two = judged_rates(grades, cases, table, {"j/a/0": 5, "j/a/1": 2})
    assert two is not None and two["overall"]["corrected"]["n"] == 2
    assert two["overall"]["bias"]["value"] == pytest.approx(0.5)  # the judge passed one the person failed


FLIP_JUDGE = {
    "model": "judge-model",
    "rules": [
        {"match": "ANSWER-FLAKY", "texts": ["SCORE: 5 REASON: fine", "SCORE: 2 REASON: not fine"]},  # by seed
        {"match": "ANSWER-GOOD", "text": "SCORE: 5 REASON: meets the rubric"},
    ],
    "default": {"text": "SCORE: 1 REASON: misses it"},
}


def test_judge_repeats_measure_flips_mark_unstable_samples_and_replay_at_zero(tmp_path):
    cases = [{"id": f"open-{c}", "input": f"Describe {c}", "expected": {"rubric": "Accurate"}, "tags": ["open"]}
             for c in range(4)]
    suite = write_suite(tmp_path, cases=cases, extra={"k": 2})
    cases_out = {0: "ANSWER-FLAKY a", 1: "ANSWER-GOOD b", 2: "ANSWER-BAD c", 3: "ANSWER-FLAKY d"}
    folder, written = _new_run(tmp_path, suite, k=2)
    for c in range(4):
        for i in range(2):
            folder.append_result(_sample(written[c], i, cases_out[c], f"h{c}{i}"))
    folder.close()
    run = folder.path
    with ScriptedServer(FLIP_JUDGE) as srv:
        res = grade_run(run, judge_base_url=srv.base_url, judge_repeats=6)
        asked = srv.stats["requests"]
        from click.testing import CliRunner

        from evalkit._cli.main import main

        cli = CliRunner().invoke(main, ["grade", str(run), "--judge-base-url", srv.base_url, "--judge-repeats", "6"])
        assert srv.stats["requests"] == asked  # the repeats replay from the judge cache
    assert cli.exit_code == 0, cli.output
    assert "judge v1 consistency: 4 item(s) asked 6 times, flip rate" in cli.output
    again = GradesSummary.from_json(json.loads((run / GRADES_SUMMARY).read_text()))
    # 4 distinct (case, output) items, each asked 6 times: 4 + 4 * 5 requests
    assert asked == 24
    c = res.summary.judge_consistency["per_version"]["v1"]
    assert c["n_items"] == 4 and c["repeats"] == 6 and c["n_asks"] == 20
    assert set(c["unstable"]) <= {"open-0/baseline/0", "open-3/baseline/0"} and c["unstable"]
    assert 0 < c["flip_rate"] <= 10 / 20 and c["straddle_share"] == len(c["unstable"]) / 4
    assert again.judge_consistency == res.summary.judge_consistency
    assert again.judge_spend_usd == 0
    lines = {(g["case_id"], g["index"]): g for g in iter_jsonl(run / "grades.jsonl")}
    for (cid, i), g in lines.items():
        flaky = f"{cid}/baseline/0" in c["unstable"]
        assert g["judge_unstable"] is flaky  # both samples of a flipping output are marked
    assert not lines[("open-1", 0)]["judge_unstable"] and not lines[("open-2", 1)]["judge_unstable"]
    assert any("flips" in f["message"] and f["level"] == "MEDIUM" for f in res.summary.findings)
    # the failures view marks the unstable samples
    from evalkit.telling.failures import failures
    from evalkit.runfolder.runload import load_run

    view = failures(load_run(run))
    whys = {(fc.case_id, s.index): s.why() for fc in view.cases for s in fc.samples}
    flagged = {k for k, w in whys.items() if "UNSTABLE" in w}
    assert flagged and all(f"{cid}/baseline/0" in c["unstable"] for cid, _ in flagged)
    # ledger: the repeats are judge calls on the run's ledger
    settles = [e for e in iter_jsonl(run / "ledger.jsonl") if e["event"] == "settle" and e["role"] == "judge"]
    assert len(settles) == 24


def test_judge_repeats_must_be_positive(tmp_path):
    from evalkit.foundations.errors import InputError

    with pytest.raises(InputError, match="judge-repeats"):
        grade_run(tmp_path, judge_repeats=0)


def _kinds_run(root: Path, suite: Path, kinds: list[str]) -> Path:
    folder = _answers_run(root, suite, kinds.__getitem__, f" of {root.name}", root.name)
    folder.write_summary({"complete": True, "ran": len(kinds), "total": len(kinds), "reason": None, "spend_usd": 0.002,
                          "avoided_usd": 0.0, "cap_usd": 5.0, "per_arm": {}, "exit_code": 0}, "# Summary\n")
    return folder.path


def _label(run: Path, suite: Path, n: int) -> None:
    items = labelling.draw_items(run, n, seed=5)
    for it in items:
        it["score"], it["rater"] = HUMAN[it["output"].split()[0].removeprefix("ANSWER-")], "ana"
    labelling.write_label_file(items, suite / "judge" / "human-sample.jsonl", force=True)


def test_the_gate_rests_on_the_corrected_rate_when_the_config_says_so(tmp_path):
    """Two runs the judge cannot tell apart (the same samples pass for it), but people
    fail a quarter of the current run's: the judge-based case score does not move, the
    corrected judged rate drops 25 points, and with "judged_estimate": "corrected" the
    gate fails on it and says so; without labels it reads no rate."""
    from evalkit.conclusions.gates import accept_baseline, gate

    cases = [{"id": f"open-{c:02d}", "input": f"Describe {c}", "expected": {"rubric": "Accurate"}, "tags": ["open"]}
             for c in range(20)]
    suite = write_suite(tmp_path, cases=cases, extra={"k": K, "cost_cap_usd": 5.0, "judged_estimate": "corrected",
                                                      "gate": {"on_underpowered": "warn"}})  # 20 cases: underpowered
    before = ["GOOD" if n % 20 < 12 else "SLY" if n % 20 < 13 else "BAD" for n in range(100)]
    after = ["SLY" if k == "GOOD" and n % 20 < 5 else k for n, k in enumerate(before)]  # judge-pass: the same
    with ScriptedServer(JUDGE) as srv:
        base_run = _kinds_run(tmp_path / "a", suite, before)
        grade_run(base_run, judge_base_url=srv.base_url)
        _label(base_run, suite, 40)
        grade_run(base_run, judge_base_url=srv.base_url)
        accept_baseline(base_run, suite)
        cur_run = _kinds_run(tmp_path / "b", suite, after)
        grade_run(cur_run, judge_base_url=srv.base_url)
        (suite / "judge" / "human-sample.jsonl").unlink()
        grade_run(cur_run, judge_base_url=srv.base_url)
        unlabelled = gate(cur_run, suite / "baseline.json")
        _label(cur_run, suite, 40)
        grade_run(cur_run, judge_base_url=srv.base_url)
        res = gate(cur_run, suite / "baseline.json")
    assert not unlabelled.passed and not unlabelled.read_rates
    assert unlabelled.causes == ["judge not trusted"] and "0 fresh human label" in unlabelled.reasons[0]
    score = next(c for c in res.checks if c.kind == "score" and c.group == "overall")
    assert score.change == 0 and not score.failed  # the judge alone sees no change
    judged = next(c for c in res.checks if c.kind == "judged")
    assert judged.change < -15 and judged.failed and judged.p_value < 0.05
    assert not res.passed and res.causes == ["case score drop"]
    assert any("judged:corrected" in r for r in res.reasons)
    assert any("rest on the corrected estimate" in n for n in res.notes)
    assert "judged sample pass rate (corrected)" in res.render()


def test_a_judge_measurably_off_is_a_medium_finding_and_one_within_noise_is_not():
    from evalkit.conclusions.grading import judged_rate_findings

    def rates(low: float, high: float) -> dict:
        block = {"judge_only": {"rate": 0.65}, "corrected": {"rate": 0.57, "low": 0.5, "high": 0.64},
                 "bias": {"value": (low + high) / 2, "low": low, "high": high, "n": 40}}
        return {"per_arm": {"baseline": {"overall": block}}}

    (f,) = judged_rate_findings(rates(0.02, 0.14))
    assert f.level == "MEDIUM" and "more generous than people by 8.0 points" in f.message and "57.0%" in f.message
    assert judged_rate_findings(rates(-0.02, 0.18)) == [] and judged_rate_findings(None) == []
    assert "harsher" in judged_rate_findings(rates(-0.2, -0.01))[0].message


# --- the gated case score's judged part, corrected (issue 27) ---------------------------------

def _case_score_suite(tmp_path: Path, extra: dict | None = None) -> Path:
    """20 judged cases and 4 deterministic ones (a `contains` check), k = 3, capability."""
    judged = [{"id": f"open-{c:02d}", "input": f"Describe {c}", "expected": {"rubric": "Accurate"}, "tags": ["open"]}
              for c in range(20)]
    det = [{"id": f"det-{c}", "input": f"Do {c}", "expected": "done", "tags": ["det"],
            "checks": [{"kind": "contains", "value": "done"}]} for c in range(4)]
    return write_suite(tmp_path, cases=judged + det, extra={"k": 3, "cost_cap_usd": 5.0, **(extra or {})})


def _case_kind(c: int) -> str:
    """Judged case c's kind, the same for its 3 samples: c % 5 in 0..2 GOOD (judge and
    people pass), 3 SLY (the judge passes, people fail), 4 BAD (both fail)."""
    return ("GOOD", "GOOD", "GOOD", "SLY", "BAD")[c % 5]


def _case_score_run(root: Path, suite: Path, kind=_case_kind) -> Path:
    folder, cases = _new_run(root, suite, k=3)
    for c in cases:
        for i in range(3):
            if c["id"].startswith("det-"):
                out = "nope" if c["id"] == "det-3" else "done"  # det-3 fails its check, the others pass
            elif kind(int(c["id"][5:])) is None:
                continue  # this case's samples are missing (never reached the judge)
            else:
                out = f"ANSWER-{kind(int(c['id'][5:]))} case {c['id']} take {i} of {root.name}"
            folder.append_result(_sample(c, i, out, f"{root.name}{c['id']}{i}"))
    folder.close()
    folder.write_summary({"complete": True, "ran": len(cases), "total": len(cases), "reason": None,
                          "spend_usd": 0.0, "avoided_usd": 0.0, "cap_usd": 5.0, "per_arm": {}, "exit_code": 0},
                         "# Summary\n")
    return folder.path


def _label_cases(run: Path, suite: Path, case_ids: set[str]) -> None:
    """People score every judged sample of `case_ids` (the whole cases), nothing else."""
    items = [it for it in labelling.draw_items(run, 10_000, seed=1, by_case=True)
             if it["item"].split("/")[0] in case_ids]
    for it in items:
        it["score"], it["rater"] = HUMAN[it["output"].split()[0].removeprefix("ANSWER-")], "ana"
    labelling.write_label_file(items, suite / "judge" / "human-sample.jsonl", force=True)


def test_the_gated_case_scores_judged_part_is_corrected_by_whole_labelled_cases_as_ppi_python_does(tmp_path):
    suite = _case_score_suite(tmp_path, {"judged_estimate": "corrected"})
    run = _case_score_run(tmp_path, suite)
    with ScriptedServer(JUDGE) as srv:
        grade_run(run, judge_base_url=srv.base_url)
        # cases 0..9 labelled whole (30 samples), and one sample of case 10: case 10 is not labelled
        _label_cases(run, suite, {f"open-{c:02d}" for c in range(10)})
        lab = suite / "judge" / "human-sample.jsonl"
        extra = next(it for it in labelling.draw_items(run, 10_000, seed=1) if it["item"].startswith("open-10/"))
        extra["score"], extra["rater"] = 5, "ana"
        labelling.write_label_file([*[json.loads(x) for x in lab.read_text().splitlines()], extra], lab, force=True)
        res = grade_run(run, judge_base_url=srv.base_url)
    summary = json.loads((run / GRADES_SUMMARY).read_text())
    block = summary["judged_rates"]["per_arm"]["baseline"]["gated_case_score"]
    assert res.summary.judged_rates["per_arm"]["baseline"]["gated_case_score"] == block
    # By hand. Capability, n = k = 3: a case scores 1 when any sample passes. Judged
    # stratum (N_j = 20): GOOD and SLY cases pass for the judge, 16 of 20 = 0.8; people
    # pass the 12 GOOD ones, 0.6. Labelled: cases 0..9 (6 GOOD, 2 SLY, 2 BAD): people
    # 6/10, the judge 8/10. PPI++: lam * 0.8 + (0.6 - lam * 0.8) = 0.6 whatever lam.
    # Deterministic stratum (N_d = 4): det-0..2 pass, det-3 fails: 0.75. Judge only:
    # (3 + 16) / 24 = 0.791667; corrected: (3 + 20 * 0.6) / 24 = 0.625.
    assert (block["n_cases"], block["n_judged_cases"], block["n_labelled_cases"]) == (24, 20, 10)
    assert block["judge_only"]["score"] == pytest.approx(19 / 24, abs=1e-12)
    assert block["judge_only"]["score"] == pytest.approx(summary["per_arm"]["baseline"]["scores"]["gated_case_score"])
    part = block["judged_part"]
    assert part["judge_only"]["score"] == pytest.approx(0.8) and part["human"] == {"score": 0.6, "n": 10}
    cor = part["corrected"]
    assert cor["score"] == pytest.approx(0.6, abs=1e-12) and (cor["n"], cor["N"]) == (10, 20)
    # ppi-python on the same case scores: the labelled cases' human and judge scores, the judge's on all 20
    y = np.array([1.0] * 3 + [0.0, 0.0] + [1.0] * 3 + [0.0, 0.0])  # cases 0..9 for people
    yh = np.array([1.0] * 4 + [0.0] + [1.0] * 4 + [0.0])  # ... and for the judge
    yu = np.array([0.0 if c % 5 == 4 else 1.0 for c in range(20)])
    assert cor["score"] == pytest.approx(float(np.squeeze(ppi_py.ppi_mean_pointestimate(y, yh, yu))), abs=1e-9)
    low, high = ppi_py.ppi_mean_ci(y, yh, yu, alpha=0.05)
    assert (cor["clt_low"], cor["clt_high"]) == pytest.approx((float(low[0]), float(high[0])), abs=1e-9)
    assert cor["adjust"] == 1.0  # 0/1 case scores: the interval takes the add-one cells, as the sample rates do
    whole = block["corrected"]
    assert whole["score"] == pytest.approx(0.625, abs=1e-12) and whole["n_deterministic"] == 4
    # stratified SE: (4/24)^2 x se_d^2 + (20/24)^2 x se_ppi^2, se_d = sd([1,1,1,0]) / 2 = 0.25
    se = float(np.hypot(4 / 24 * np.std([1, 1, 1, 0], ddof=1) / 2, 20 / 24 * cor["se"]))
    assert whole["se"] == pytest.approx(se, rel=1e-12)
    assert (whole["low"], whole["high"]) == pytest.approx((0.625 - 1.959963984540054 * se,
                                                          0.625 + 1.959963984540054 * se), rel=1e-12)
    assert whole["low"] < 0.625 < whole["high"]  # ten labelled cases: a wide interval (0.40 to 0.85)
    from evalkit._cli.grade import summary_lines
    from evalkit.foundations import fmt

    printed = "\n".join(summary_lines(res.summary, run))
    assert (f"gated case score (baseline): corrected {fmt.pct_ci(0.625, whole['low'], whole['high'])} "
            "(judged part PPI++ from n=10 labelled of N=20 judged cases)") in printed


def test_the_gate_rests_on_the_corrected_gated_case_score_and_says_so(tmp_path):
    """Two runs the judge cannot tell apart (the same cases pass for it: 19 of 24), but
    people pass 4 judged cases of 20 in the current run against 12 in the baseline:
    with "judged_estimate": "corrected" the gate fails on the corrected gated case
    score and says what it rested on."""
    from evalkit.conclusions.gates import accept_baseline, gate

    suite = _case_score_suite(tmp_path, {"judged_estimate": "corrected", "gate": {"on_underpowered": "warn"}})
    labelled = {f"open-{c:02d}" for c in range(10)}
    # the current run: GOOD cases with c % 5 in (0, 1) turn SLY (still a pass for the judge)
    worse = lambda c: "SLY" if c % 5 in (0, 1) else _case_kind(c)  # noqa: E731
    with ScriptedServer(JUDGE) as srv:
        base_run = _case_score_run(tmp_path / "a", suite)
        grade_run(base_run, judge_base_url=srv.base_url)
        _label_cases(base_run, suite, labelled)
        grade_run(base_run, judge_base_url=srv.base_url)
        accept_baseline(base_run, suite)
        cur_run = _case_score_run(tmp_path / "b", suite, worse)
        grade_run(cur_run, judge_base_url=srv.base_url)
        _label_cases(cur_run, suite, labelled)
        grade_run(cur_run, judge_base_url=srv.base_url)
        res = gate(cur_run, suite / "baseline.json")
    cs = json.loads((cur_run / GRADES_SUMMARY).read_text())["judged_rates"]["per_arm"]["baseline"]["gated_case_score"]
    # by hand: the labelled cases 0..9 pass for people when c % 5 == 2 (2 of 10), for the
    # judge 8 of 10, all 20: 16; PPI++: lam * 0.8 + (0.2 - lam * 0.8) = 0.2; the whole
    # score (3 + 20 * 0.2) / 24 = 0.291667 against the baseline's 0.625: -33.3 points
    assert cs["judged_part"]["corrected"]["score"] == pytest.approx(0.2, abs=1e-12)
    assert cs["corrected"]["score"] == pytest.approx(7 / 24, abs=1e-12)
    score = next(c for c in res.checks if c.kind == "score" and c.group == "overall")
    assert score.change == 0 and not score.failed  # the judge alone sees no change
    check = next(c for c in res.checks if c.group == "judged:case-score")
    assert check.baseline == pytest.approx(0.625, abs=1e-12) and check.current == pytest.approx(7 / 24, abs=1e-12)
    assert check.change == pytest.approx(100 * (7 / 24 - 0.625)) and check.failed and check.p_value < 0.05
    assert not res.passed and "case score drop" in res.causes
    assert any(r.startswith("case-score drop judged:case-score") for r in res.reasons)
    assert any("the gated case score rests on the corrected estimate" in n and "10 labelled of 20 judged cases" in n
               for n in res.notes)
    assert "gated case score (corrected)" in res.render()


# --- a two-arm verdict resting on the corrected estimate (issue 27) ---------------------------

def _two_arm_kind(arm: str, c: int) -> str:
    """Each sample's kind, the same for a case's 3 samples. baseline: c % 5 in 0..2 GOOD,
    3 SLY, 4 BAD; treatment: c % 5 in 0..1 GOOD, 2..4 SLY. The judge passes GOOD and SLY,
    people GOOD only: for the judge the treatment wins the c % 5 == 4 cases (BAD -> SLY);
    for people it loses the c % 5 == 2 ones (GOOD -> SLY)."""
    if arm == "baseline":
        return ("GOOD", "GOOD", "GOOD", "SLY", "BAD")[c % 5]
    return ("GOOD", "GOOD", "SLY", "SLY", "SLY")[c % 5]


def test_a_verdict_resting_on_the_corrected_estimate_counts_people_where_they_labelled_and_says_so(tmp_path):
    from evalkit.conclusions.compare import compare_arms

    n_cases = 40
    cases = [{"id": f"open-{c:02d}", "input": f"Describe {c}", "expected": {"rubric": "Accurate"}, "tags": ["open"]}
             for c in range(n_cases)]
    arms = [{"name": "baseline"}, {"name": "treatment"}]
    suite = write_suite(tmp_path, cases=cases,
                        extra={"k": 3, "cost_cap_usd": 5.0, "judged_estimate": "corrected", "arms": arms})
    meta = {"suite": str(suite), "suite_name": "suite", "config": json.loads((suite / "config.json").read_text()),
            "arms": ["baseline", "treatment"], "k": 3, "cases": [c["id"] for c in cases], "source": "evalkit"}
    folder = RunFolder.create(tmp_path / "runs", meta)
    for c in range(n_cases):
        for arm in ("baseline", "treatment"):
            for i in range(3):
                folder.append_result(Sample(
                    case_id=f"open-{c:02d}", tags=("open",), arm=arm, index=i, seed=7, model="gen-model",
                    output=f"ANSWER-{_two_arm_kind(arm, c)} case {c} {arm} take {i}", tool_calls=(),
                    finish_reason="stop", usage=Usage(10, 5), latency_ms=100.0, cost_usd=0.00002,
                    request_hash=f"{c}{arm}{i}"))
    folder.close()
    run = folder.path
    with ScriptedServer(JUDGE) as srv:
        grade_run(run, judge_base_url=srv.base_url)
        judge_only = compare_arms(run, "baseline", "treatment")  # no label yet: nothing to correct with
        # people label every sample of cases 0..19 in both arms (120 of the 240)
        items = [it for it in labelling.draw_items(run, 10_000, seed=1) if int(it["item"][5:7]) < 20]
        for it in items:
            it["score"], it["rater"] = HUMAN[it["output"].split()[0].removeprefix("ANSWER-")], "ana"
        labelling.write_label_file(items, suite / "judge" / "human-sample.jsonl")
        grade_run(run, judge_base_url=srv.base_url)
    v = compare_arms(run, "baseline", "treatment")
    # without labels an arm has no corrected rate: inconclusive, naming it (the tally: 8 wins)
    assert judge_only.kind == "inconclusive" and "arm baseline has 0 fresh human label(s)" in judge_only.reason
    assert (judge_only.wins, judge_only.losses) == (8, 0)
    # by hand: cases 0..19 vote by people (c % 5 == 2: a loss, 4 cases), 20..39 by the
    # judge (c % 5 == 4: a win, 4 cases): 4 wins, 4 losses, 32 ties; sign test p = 1
    assert (v.wins, v.losses, v.ties) == (4, 4, 32) and v.kind == "no-improvement"
    assert v.p_value == pytest.approx(1.0)
    cor = v.judge_checks["corrected"]
    assert cor["estimate"] == "corrected" and cor["human_votes"] == 120
    # ppi-python on each arm: the labelled samples' human and judge pass, the judge on all 120
    lines = {(g["case_id"], g["arm"], g["index"]): g for g in iter_jsonl(run / "grades.jsonl")}
    z = 1.959963984540054
    est, se_clt = {}, {}
    for arm in ("baseline", "treatment"):
        keys = sorted(k for k in lines if k[1] == arm)
        lab = [k for k in keys if int(k[0][5:]) < 20]
        y = np.array([float(_two_arm_kind(arm, int(k[0][5:])) == "GOOD") for k in lab])
        yh = np.array([float(lines[k]["judge_passed"]) for k in lab])
        yu = np.array([float(lines[k]["judge_passed"]) for k in keys])
        est[arm] = float(np.squeeze(ppi_py.ppi_mean_pointestimate(y, yh, yu)))
        low, high = ppi_py.ppi_mean_ci(y, yh, yu, alpha=0.05)
        se_clt[arm] = (float(high[0]) - float(low[0])) / (2 * z)
        assert cor[arm]["corrected"]["rate"] == pytest.approx(est[arm], abs=1e-9)
    # by hand: baseline, people pass 36 of 60 labelled (0.6), the judge 48 of 60 there and
    # 96 of 120 in all (0.8 both): 0.6 whatever lam; treatment: people 24 of 60 (0.4), the
    # judge 120 of 120: 0.4; the difference -0.2
    assert est["baseline"] == pytest.approx(0.6, abs=1e-12) and est["treatment"] == pytest.approx(0.4, abs=1e-12)
    d = cor["difference"]
    assert d["value"] == pytest.approx(est["treatment"] - est["baseline"], abs=1e-9)
    half = z * float(np.hypot(se_clt["baseline"], se_clt["treatment"]))
    assert (d["clt_low"], d["clt_high"]) == pytest.approx((d["value"] - half, d["value"] + half), abs=1e-9)
    assert d["high"] < 0  # people: the treatment is worse, beyond its interval
    assert "people's labels in place of the judge on 120 labelled sample(s)" in v.reason
    assert "difference -20.0 points" in v.reason
    assert "corrected judged pass rate difference -20.0 points" in v.render()


# --- review fixes: unscored judged cases, by-case labels, like-with-like gates ----------------

def _unscored_simulation(reps: int, n_cases: int, n_labelled: int, *, old: bool, seed: int = 1):
    """`reps` arms of `n_cases` regression cases (k = 1): 20% have no judge-scored sample
    (the sample errored: it fails for the judge and for people), the rest pass for people
    with p = 0.5 and for a generous judge also 30% of the people-fails; `n_labelled` of
    the judge-scored cases are labelled, drawn uniformly (a by-case draw). `old`: the
    unscored cases passed as judge-scored ones (what the code did before the fix).
    Returns the coverage of the arm's human case score (the finite truth), of its
    expectation 0.8 x 0.5 = 0.4, and the mean error."""
    import random

    from evalkit.numbers.metrics import JudgedCase, corrected_gated_case_score

    rng = random.Random(seed)
    cover = cover_mean = 0
    err = 0.0
    for _ in range(reps):
        rows, truth = [], []
        for _ in range(n_cases):
            if rng.random() < 0.2:
                rows.append((0, 0, 0))
            else:
                h = rng.random() < 0.5
                rows.append((int(h or rng.random() < 0.3), int(h), 1))
            truth.append(rows[-1][1])
        labelled = set(rng.sample([i for i, r in enumerate(rows) if r[2]], n_labelled))
        cases = [JudgedCase("regression", 1, cj, ch if i in labelled else None, True, 1 if old else s)
                 for i, (cj, ch, s) in enumerate(rows)]
        c = corrected_gated_case_score(cases, 1)["corrected"]
        t = sum(truth) / n_cases
        cover += c["low"] <= t <= c["high"]
        cover_mean += c["low"] <= 0.4 <= c["high"]
        err += c["score"] - t
    return cover / reps, cover_mean / reps, err / reps


def test_judged_cases_with_no_judge_scored_sample_are_an_exact_stratum_and_coverage_holds():
    """A judged case the judge scored no sample of can never be labelled: left among the
    judged cases, the correction measured on scored cases was applied to it too (the
    reviewer's reproduction: +3.2 points, 30% coverage at N = 2,000). In the exact
    stratum the corrected case score covers the human one in at least 88% of 300
    seeded replications (nominal 95%) and is unbiased; the old treatment is not."""
    from evalkit.numbers.metrics import JudgedCase, corrected_gated_case_score

    new = _unscored_simulation(300, 600, 240, old=False)
    old = _unscored_simulation(300, 600, 240, old=True)
    assert new[0] >= 0.88 and new[1] >= 0.88 and abs(new[2]) < 0.01, new
    assert old[0] < 0.88 and old[2] > 0.02, old  # the bias the fix removes
    # by hand: 2 scored judged cases (judge 1, 1; people 1, 0, both labelled), 2 unscored
    # (fail), 1 deterministic pass: exact stratum [0, 0, 1]; judged part 0.5 (PPI++ with
    # every judge score 1: lam * 1 + (0.5 - lam * 1) = 0.5); (1 + 2 x 0.5) / 5 = 0.4
    cases = [JudgedCase("regression", 1, 1, 1, True, 1), JudgedCase("regression", 1, 1, 0, True, 1),
             JudgedCase("regression", 1, 0, None, True, 0), JudgedCase("regression", 1, 0, None, True, 0),
             JudgedCase("regression", 1, 1, None, False, 0)]
    b = corrected_gated_case_score(cases, 1)
    assert (b["n_judged_cases"], b["n_unscored_cases"], b["n_labelled_cases"]) == (4, 2, 2)
    assert b["judge_only"]["score"] == pytest.approx(3 / 5) and b["judged_part"]["judge_only"]["N"] == 2
    c = b["corrected"]
    assert c["score"] == pytest.approx(0.4, abs=1e-12) and (c["n_deterministic"], c["n_unscored"], c["N"]) == (1, 2, 2)
    se_e = np.std([0, 0, 1], ddof=1) / np.sqrt(3)
    assert c["se"] == pytest.approx(float(np.hypot(3 / 5 * se_e, 2 / 5 * b["judged_part"]["corrected"]["se"])))


def test_a_sample_draw_corrects_the_sample_rates_only_and_says_so(tmp_path):
    """Labels of every judged sample, but drawn by sample: the judged sample rates are
    corrected, the gated case score is not (a sample draw does not label cases at random)
    and its `labels_note` says why; drawn by case, the same labels correct it."""
    suite = _case_score_suite(tmp_path, {"judged_estimate": "corrected"})
    run = _case_score_run(tmp_path, suite)
    lab = suite / "judge" / "human-sample.jsonl"
    with ScriptedServer(JUDGE) as srv:
        grade_run(run, judge_base_url=srv.base_url)
        items = labelling.draw_items(run, 10_000, seed=1)
        for it in items:
            it["score"], it["rater"] = HUMAN[it["output"].split()[0].removeprefix("ANSWER-")], "ana"
        labelling.write_label_file(items, lab, force=True)
        grade_run(run, judge_base_url=srv.base_url)
        by_sample = json.loads((run / GRADES_SUMMARY).read_text())["judged_rates"]["per_arm"]["baseline"]
        _label_cases(run, suite, {f"open-{c:02d}" for c in range(20)})
        grade_run(run, judge_base_url=srv.base_url)
        by_case = json.loads((run / GRADES_SUMMARY).read_text())["judged_rates"]["per_arm"]["baseline"]
    assert {it["draw"] for it in items} == {"sample"}
    assert by_sample["overall"]["corrected"]["rate"] == pytest.approx(0.6)  # 36 of 60 samples pass for people
    cs = by_sample["gated_case_score"]
    assert cs["corrected"] is None and cs["n_labelled_cases"] == 0
    assert cs["labels_note"].startswith("60 label(s) of this arm come from a sample draw") and "--by-case" in cs["labels_note"]
    assert by_case["gated_case_score"]["labels_note"] is None
    assert by_case["gated_case_score"]["corrected"]["score"] == pytest.approx(0.625, abs=1e-12)  # (3 + 20 x 0.6) / 24


def test_a_baseline_without_labels_is_compared_like_with_like(tmp_path):
    """A baseline graded without labels and an identical run with every case labelled by
    case, a generous judge (judge 0.8, people 0.6 on the judged cases): the corrected
    figures are not set against the baseline's judge-only ones (that read the judge's
    bias as a 17-20 point drop and failed an unchanged suite): the judge-only rates are
    compared, the gate passes, and the notes give the corrected figures and say why."""
    from evalkit.conclusions.gates import accept_baseline, gate

    suite = _case_score_suite(tmp_path, {"judged_estimate": "corrected", "gate": {"on_underpowered": "warn"}})
    with ScriptedServer(JUDGE) as srv:
        base_run = _case_score_run(tmp_path / "a", suite)
        grade_run(base_run, judge_base_url=srv.base_url)
        accept_baseline(base_run, suite)
        cur_run = _case_score_run(tmp_path / "b", suite)
        grade_run(cur_run, judge_base_url=srv.base_url)
        _label_cases(cur_run, suite, {f"open-{c:02d}" for c in range(20)})
        grade_run(cur_run, judge_base_url=srv.base_url)
        res = gate(cur_run, suite / "baseline.json")
    cs = json.loads((cur_run / GRADES_SUMMARY).read_text())["judged_rates"]["per_arm"]["baseline"]["gated_case_score"]
    assert cs["corrected"]["score"] == pytest.approx(0.625, abs=1e-12)  # the judge alone: 19/24 = 0.79
    assert res.passed, res.reasons
    assert not any(c.group == "judged:case-score" for c in res.checks)
    (rate,) = [c for c in res.checks if c.kind == "judged"]
    assert rate.group == "judged:judge-only" and rate.change == 0 and not rate.failed
    assert rate.label == "judged sample pass rate (judge only)"
    assert any("no corrected judged rate" in n and "the corrected 60.0% is not gated" in n for n in res.notes)
    assert any("no corrected gated case score" in n and "the corrected 62.5% is not gated" in n for n in res.notes)


def test_a_judged_case_whose_samples_are_all_missing_fails_in_the_exact_stratum_end_to_end(tmp_path):
    """open-03 (SLY: the judge passes it, people fail it) has no sample at all: it fails
    in the plain gated case score and in the corrected one, as an exact case, while the
    19 others are labelled by case: corrected (3 + 0 + 19 x 12/19) / 24 = 0.625 exactly
    (PPI++ with every judge-scored case labelled is the human mean whatever lam)."""
    suite = _case_score_suite(tmp_path, {"judged_estimate": "corrected"})
    run = _case_score_run(tmp_path, suite, lambda c: None if c == 3 else _case_kind(c))
    with ScriptedServer(JUDGE) as srv:
        grade_run(run, judge_base_url=srv.base_url)
        _label_cases(run, suite, {f"open-{c:02d}" for c in range(20)})
        grade_run(run, judge_base_url=srv.base_url)
    summary = json.loads((run / GRADES_SUMMARY).read_text())
    cs = summary["judged_rates"]["per_arm"]["baseline"]["gated_case_score"]
    assert (cs["n_judged_cases"], cs["n_unscored_cases"], cs["n_labelled_cases"]) == (20, 1, 19)
    assert cs["judge_only"]["score"] == pytest.approx(18 / 24, abs=1e-12)  # open-03 fails: 3 + 15 of 24
    assert cs["judge_only"]["score"] == pytest.approx(summary["per_arm"]["baseline"]["scores"]["gated_case_score"])
    assert cs["judged_part"]["corrected"]["N"] == 19
    assert cs["corrected"]["score"] == pytest.approx(0.625, abs=1e-12) and cs["corrected"]["n_unscored"] == 1
