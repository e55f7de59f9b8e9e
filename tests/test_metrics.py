"""One meaning per number (evalkit.numbers.metrics): each metric computed here from the raw files
of one run (results.jsonl, grades.jsonl, ledger.jsonl), by hand, and checked in every
place that shows it: grades-summary.json, baseline.json, the gate's output, verdicts.json,
the index page and each run's report.json, the notebooks' pages and the CLI's lines
(`run`, `grade`, `gate`)."""
from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.foundations import fmt
from evalkit.numbers import metrics
from evalkit._cli.main import main
from evalkit.foundations.records import Baseline
from evalkit.calls.serve import ScriptedServer

K = 3
CASES = [
    {"id": "fr", "input": "What is the capital of France?", "expected": "Paris", "tags": ["golden", "geo"]},
    {"id": "it", "input": "What is the capital of Italy?", "expected": "Rome", "tags": ["golden", "geo"]},
    {"id": "km", "input": "Metres in a kilometre?", "expected": "1000", "tags": ["golden", "units"],
     "set": "regression"},
    {"id": "hr", "input": "Minutes in an hour?", "expected": "60", "tags": ["units"], "set": "regression"},
    {"id": "moon", "input": "What is the Moon made of?", "expected": "rock", "tags": ["geo"], "set": "exploratory"},
    {"id": "paris", "input": "Describe Paris.", "expected": {"rubric": "Mentions the Seine"}, "tags": ["open"]},
]
GEN = {"rules": [
    {"match": "France", "texts": ["Paris", "Lyon"]},
    {"match": "Italy", "text": "Rome"},
    {"match": "kilometre", "texts": ["1000", "one thousand"], "weights": [0.7, 0.3]},
    {"match": "hour", "text": "60"},
    {"match": "Moon", "texts": ["rock", "cheese"]},
    {"match": "Describe Paris", "texts": ["SEINE the river city", "BLAND a city"]},
], "default": {"text": "unknown"}}
JUDGE = {"model": "judge-m", "rules": [{"match": "SEINE", "text": "SCORE: 5 REASON: names the river"},
                                       {"match": "BLAND", "text": "SCORE: 2 REASON: no river"}]}


def _jsonl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]


def invoke(*args: object) -> str:
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.output


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A run whose first two repeats came from the response cache (an earlier run at k=2)
    and whose third was paid, graded with a judge, accepted as the baseline, gated
    against it and reported."""
    root = tmp_path_factory.mktemp("metrics")
    suite = root / "unit"
    (suite / "judge").mkdir(parents=True)
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES))
    (suite / "prompt.txt").write_text("Q: ${input}\nA:")
    (suite / "judge" / "rubric-v1.md").write_text("5: meets the case rubric\n1: misses it\n")
    (suite / "judge" / "prompt-v1.md").write_text("${rubric}\n${expected}\n${output}\nSCORE: <1-5> REASON: <why>\n")
    (suite / "config.json").write_text(json.dumps({
        "mode": "completion", "template": "prompt.txt",
        "generator": {"model": "gen-m", "api_key_env": "EVALKIT_TEST_KEY"},
        "judge": {"model": "judge-m", "api_key_env": "EVALKIT_TEST_KEY"},
        "temperature": 0.8, "seed": 11, "k": K, "concurrency": 2, "cost_cap_usd": 1.0,
        "max_tokens_in": 2000, "max_tokens_out": 8,
        "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}, "judge_price": {"in_per_mtok": 3.0, "out_per_mtok": 6.0},
        "gate": {"min_tag_cases": 2, "on_underpowered": "warn"}, "arms": [{"name": "base"}],  # 5 gated cases
        # the judge's pass/fail must count for these numbers: no calibration here, so opt out (recorded)
        "allow_uncalibrated_judge": True}))
    import os

    os.environ.setdefault("EVALKIT_TEST_KEY", "test")
    with ScriptedServer(GEN) as gen, ScriptedServer(JUDGE) as judge:
        invoke("run", suite, "--base-url", gen.base_url, "--k", 2, "--no-progress")  # warms the response cache
        run_out = invoke("run", suite, "--base-url", gen.base_url, "--no-progress")
        run = Path(next(x.split(": ", 1)[1] for x in run_out.splitlines() if x.startswith("run folder: ")))
        grade_out = invoke("grade", run, "--judge-base-url", judge.base_url)
    invoke("baseline", "accept", run)
    gate_json = json.loads(invoke("gate", run, "--baseline", suite / "baseline.json", "--json"))
    gate_text = invoke("gate", run, "--baseline", suite / "baseline.json")
    reports = root / "reports"
    # --serial: one lane, one kernel for the pages (the parallel lanes are test_reports' `made`)
    invoke("report", run, "--reports-dir", reports, "--only", "run_summary", "--only", "pass_at_k", "--serial")
    return {"suite": suite, "run": run, "run_out": run_out, "grade": grade_out, "gate_json": gate_json, "gate_text": gate_text,
            "pages": reports / run.name, "index": (reports / "index.html").read_text(encoding="utf-8")}


@pytest.fixture(scope="module")
def raw(made):
    """Every metric, from the run's raw files alone (no evalkit code)."""
    run = made["run"]
    results = _jsonl(run / "results.jsonl")
    grades = {(g["case_id"], g["arm"], g["index"]): g for g in _jsonl(run / "grades.jsonl")}
    sets = {c["id"]: c.get("set", "capability") for c in CASES}
    expected = len(CASES) * K
    passed = sum(1 for g in grades.values() if g["passed"] is True)
    per_case: dict[str, list[int]] = {}
    list_price: dict[str, float] = {}
    for r in results:
        g = grades[(r["case_id"], r["arm"], r["index"])]
        per_case.setdefault(r["case_id"], []).append(g["passed"] is True)
        list_price[r["case_id"]] = list_price.get(r["case_id"], 0.0) + r["cost_usd"] + r["cost_avoided_usd"] + \
            g["judge_cost_usd"]

    def score(case: str) -> float:  # at n = k = 3: pass@3 is "any passed", pass^3 "all passed"
        c = per_case[case]
        return float(all(c)) if sets[case] == "regression" else float(any(c))

    gated = [c for c in per_case if sets[c] != "exploratory"]
    tags = {c["id"]: c["tags"] for c in CASES}
    per_tag = {t: [score(c) for c in gated if t in tags[c]] for t in sorted({t for c in gated for t in tags[c]})}
    ledger = _jsonl(run / "ledger.jsonl")
    settled = {role: math.fsum(e["cost_usd"] for e in ledger if e["event"] == "settle" and e["role"] == role)
               for role in ("generator", "judge")}
    return {
        "sample_pass_rate": passed / expected,
        "gated_case_score": math.fsum(score(c) for c in gated) / len(gated),
        "set_scores": {s: [score(c) for c in gated if sets[c] == s] for s in ("capability", "regression")},
        "tag_scores": per_tag,
        "cost_per_sample_usd": math.fsum(list_price.values()) / len(results),
        "cost_per_case_usd": math.fsum(list_price.values()) / len(list_price),
        "paid_usd": math.fsum(r["cost_usd"] for r in results) + math.fsum(g["judge_cost_usd"] for g in grades.values()),
        "cache_avoided_usd": math.fsum(r["cost_avoided_usd"] for r in results),
        "ledger": settled,
        "paid_generator_usd": math.fsum(r["cost_usd"] for r in results),
        "judge_usd": math.fsum(g["judge_cost_usd"] for g in grades.values()),
        "n_results": len(results),
        "cached": sum(1 for r in results if r["cached"]),
    }


def test_the_run_has_something_to_tell_apart(raw):
    # paid and cache-avoided both present: list price and what was paid differ
    assert raw["n_results"] == len(CASES) * K and raw["cached"] == len(CASES) * 2
    assert raw["cache_avoided_usd"] > 0 and raw["paid_generator_usd"] > 0 and raw["judge_usd"] > 0
    assert 0 < raw["sample_pass_rate"] < 1 and raw["gated_case_score"] != raw["sample_pass_rate"]
    # what the run paid is what its ledger settled
    assert raw["ledger"]["generator"] == pytest.approx(raw["paid_generator_usd"])
    assert raw["ledger"]["judge"] == pytest.approx(raw["judge_usd"])


def test_grades_summary(made, raw):
    s = json.loads((made["run"] / "grades-summary.json").read_text())
    arm = s["per_arm"]["base"]
    for key in ("sample_pass_rate", "cost_per_sample_usd", "cost_per_case_usd", "paid_usd", "cache_avoided_usd"):
        assert arm["overall"][key] == pytest.approx(raw[key]), key
        assert s["overall"][key] == pytest.approx(raw[key]), key  # one arm: the run is the arm
    assert arm["scores"]["gated_case_score"] == pytest.approx(raw["gated_case_score"])
    for name, scores in raw["set_scores"].items():
        assert arm["per_set_scores"][name]["gated_case_score"] == pytest.approx(sum(scores) / len(scores))
    assert arm["per_set_scores"]["exploratory"]["gated_case_score"] is None  # gate none: never scored


def test_baseline(made, raw):
    b = json.loads((made["suite"] / "baseline.json").read_text())
    assert b["gated_case_score"] == pytest.approx(raw["gated_case_score"])
    assert b["cost_per_case_usd"] == pytest.approx(raw["cost_per_case_usd"])
    for name, scores in raw["set_scores"].items():
        assert b["per_set"][name]["gated_case_score"] == pytest.approx(sum(scores) / len(scores))
    assert b["per_tag"] == pytest.approx({t: sum(v) / len(v) for t, v in raw["tag_scores"].items()})
    assert b["per_tag_cases"] == {t: len(v) for t, v in raw["tag_scores"].items()}
    m = Baseline.from_json(b).metrics
    assert metrics.gated_case_score(m) == pytest.approx(raw["gated_case_score"])


def test_gate_and_verdicts(made, raw):
    checks = {(c["kind"], c["group"]): c for c in made["gate_json"]["checks"]}
    score, cost = checks[("score", "overall")], checks[("cost", "per case")]
    assert score["current"] == pytest.approx(raw["gated_case_score"]) == score["baseline"]
    assert cost["current"] == pytest.approx(raw["cost_per_case_usd"]) == cost["baseline"]
    min_tag_cases = 2  # the suite's gate.min_tag_cases
    tag_checks = {g.removeprefix("tag:"): c for (kind, g), c in checks.items() if kind == "score" and g != "overall"}
    gated_tags = {t: v for t, v in raw["tag_scores"].items() if len(v) >= min_tag_cases}
    assert set(tag_checks) == set(gated_tags)
    for tag, scores in gated_tags.items():
        assert tag_checks[tag]["current"] == pytest.approx(sum(scores) / len(scores)), tag
        assert tag_checks[tag]["n_cases"] == len(scores), tag
    recorded = json.loads((made["run"] / "verdicts.json").read_text())["gate"]
    assert {(c["kind"], c["group"]): c["current"] for c in recorded["checks"]} == {
        k: c["current"] for k, c in checks.items()}
    row = next(x for x in made["gate_text"].splitlines() if x.startswith("case score overall"))
    assert f"{raw['gated_case_score']:.3f}" in row
    row = next(x for x in made["gate_text"].splitlines() if x.startswith("cost per case"))
    assert f"${raw['cost_per_case_usd']:.4g}" in row


def test_cli_lines(made, raw):
    spend = next(x for x in made["run_out"].splitlines() if x.startswith("spend: "))
    assert f"{fmt.usd(raw['paid_generator_usd'])} of cap" in spend  # `run` has paid the generator only
    assert f"(avoided by the cache: {fmt.usd(raw['cache_avoided_usd'])})" in spend
    lines = made["grade"].splitlines()

    def value(name: str) -> str:
        return next(x.split()[-1] for x in lines if x.strip().startswith(name + " "))

    # one arm: its column is the only one; the CLI formats through evalkit.foundations.fmt (percent, dollars)
    assert value("sample_pass_rate") == fmt.pct(raw["sample_pass_rate"])
    for key in ("cost_per_sample_usd", "cost_per_case_usd", "paid_usd", "cache_avoided_usd"):
        assert value(key) == fmt.usd(raw[key]), key
    all_row = next(x for x in lines if x.strip().startswith("all "))
    assert f"gated {fmt.pct(raw['gated_case_score'])}" in all_row


def test_report_manifest(made, raw):
    """reports/<run>/report.json, which the index is built from."""
    m = json.loads((made["pages"] / "report.json").read_text())
    assert m["headline_metric"] == "sample_pass_rate"
    assert m["headline"]["base"] == pytest.approx(raw["sample_pass_rate"])
    assert m["cost_per_case_usd"]["base"] == pytest.approx(raw["cost_per_case_usd"])
    assert m["cache_avoided_usd"] == pytest.approx(raw["cache_avoided_usd"])
    assert m["spend_usd"] == pytest.approx(raw["paid_generator_usd"])  # the run's spend: before grading


def test_index_and_notebook_pages(made, raw):
    row = re.search(r"<tr><td>[^<]*</td><td><code>" + re.escape(made["run"].name) + r".*?</tr>", made["index"])
    assert row and f"base {raw['sample_pass_rate']:.1%}" in html.unescape(row.group(0))
    # the run's spend, then the judge's beside it when grading paid one (each named)
    judge = f"<br>+ judge {fmt.usd(raw['judge_usd'])}" if raw['judge_usd'] else ""
    assert f"<td>{fmt.usd(raw['paid_generator_usd'])}{judge}</td>" in row.group(0)
    # the trend, whose last (and only) run this is
    assert f"one run so far (a trend needs two): base {fmt.pct(raw['sample_pass_rate'])}" in made["index"]
    assert "sample pass rate" in made["index"] and "success rate" not in made["index"]
    page = (made["pages"] / "run_summary.html").read_text(encoding="utf-8")
    assert f"<td>{fmt.pct(raw['sample_pass_rate'])} (" in page  # with its interval, in percent
    for key in ("cost_per_case_usd", "cost_per_sample_usd", "cache_avoided_usd"):
        assert f"<td>{fmt.usd(raw[key])}</td>" in page, key
    side = json.loads((made["pages"] / "run_summary.json").read_text())
    assert side["arms"]["base"]["sample_pass_rate"] == pytest.approx(raw["sample_pass_rate"])
    assert side["gate"]["checks"][0]["current"] == pytest.approx(raw["gated_case_score"])
    pk = (made["pages"] / "pass_at_k.html").read_text(encoding="utf-8")
    for scores in raw["set_scores"].values():
        assert f"<td>{fmt.pct(sum(scores) / len(scores))}</td>" in pk


def test_missing_and_errored_one_meaning_an_error_with_no_result_is_errored_a_sample_never_run_is_missing():
    from evalkit.numbers.metrics import missing_and_errored

    expected = {("a", "x", 0), ("a", "x", 1), ("b", "x", 0), ("b", "x", 1)}
    results = {("a", "x", 0), ("b", "x", 1)}
    # ("a", "x", 1) errored; ("b", "x", 0) never ran; ("b", "x", 1) errored once, then a resume gave it a result
    errors = {("a", "x", 1), ("b", "x", 1)}
    assert missing_and_errored(expected, results, errors) == (1, 1)
    assert missing_and_errored(expected, results, errors, grading_errors=2) == (1, 3)  # a judge error is errored too
    assert missing_and_errored(expected, expected, errors) == (0, 0)
    assert missing_and_errored(expected, set(), set()) == (4, 0)


def test_a_corrected_rate_and_a_judge_bias_stay_in_their_possible_range():
    """A judge that passes all 10 judged samples where people failed the 3 they labelled:
    the PPI++ estimate is 0% with an interval reaching below 0, and the bias +100 points
    with an interval past +100. Each is held to its range (a rate to [0, 1], a bias to
    [-1, 1]) with a note; the SE the gate reads is the unclipped one."""
    from evalkit.conclusions import gates
    from evalkit.numbers import stats

    rows = [metrics.JudgedRow("a", "regression", ("t",), True, False if i < 3 else None) for i in range(10)]
    block = metrics.judged_rate_block(rows, "judge_only")
    cor, bias = block["corrected"], block["bias"]
    raw = stats.ppi_mean([0.0] * 3, [1.0] * 3, [1.0] * 10, adjust=metrics.PPI_ADJUST)
    assert raw.low < 0 and raw.bias_high > 1  # what the shared pages showed: "-30.9% to 30.9%", "+69.1 to +130.9"
    assert 0.0 <= cor["low"] <= cor["rate"] <= cor["high"] <= 1.0 and cor["low"] == 0.0
    assert -1.0 <= bias["low"] <= bias["value"] <= bias["high"] <= 1.0 and bias["high"] == 1.0
    assert "clipped" in cor["clipped"] and "clipped" in bias["clipped"]
    assert cor["se"] == pytest.approx(raw.se)
    assert gates._rate_and_se(block)[1] == pytest.approx(raw.se)  # the gate's SE is not narrowed by the clip
    inside = metrics.judged_rate_block([metrics.JudgedRow("a", "r", (), i % 2 == 0, i % 2 == 0) for i in range(20)], "x")
    assert inside["corrected"]["clipped"] is None and inside["bias"]["clipped"] is None
    shown = fmt.pct_ci(cor["rate"], cor["low"], cor["high"])
    assert "-" not in shown.replace(" to ", " ")


def test_a_corrected_rate_outside_its_range_is_clipped_when_shown_and_raw_when_computed_on():
    """Labelled judge [1, 0, 1] against people [1, 0, 0], 20 more judged samples all
    failed by the judge: the PPI++ estimate is about -8.8%. The page shows 0% with the
    `clipped` note; the gate's observed change and the difference of two arms use the
    estimator's own value (clipping moved the gate's change by ~9 points)."""
    from evalkit.conclusions import gates
    from evalkit.foundations.records_suite import GateThresholds
    from evalkit.numbers import stats

    human, judge, rest = [True, False, False], [True, False, True], [False] * 20
    rows = [metrics.JudgedRow(f"c{i}", "r", (), j, h) for i, (j, h) in enumerate(zip(judge, human))]
    rows += [metrics.JudgedRow(f"u{i}", "r", (), j, None) for i, j in enumerate(rest)]
    low_arm = metrics.judged_rate_block(rows, "corrected")
    raw = stats.ppi_mean([1.0, 0.0, 0.0], [1.0, 0.0, 1.0], [1.0, 0.0, 1.0] + [0.0] * 20, adjust=metrics.PPI_ADJUST)
    assert raw.value < -0.05  # the estimator's own value lies below 0
    cor = low_arm["corrected"]
    assert cor["rate"] == 0.0 and cor["low"] == 0.0 and "clipped" in cor["clipped"]
    assert cor["raw"] == pytest.approx(raw.value)
    # the gate's observed change: the raw rate against a baseline's
    base_rows = [metrics.JudgedRow(f"b{i}", "r", (), i % 2 == 0, i % 2 == 0 if i < 6 else None) for i in range(20)]
    base = metrics.judged_rate_block(base_rows, "corrected")
    base_raw = stats.ppi_mean(
        [float(i % 2 == 0) for i in range(6)], [float(i % 2 == 0) for i in range(6)],
        [float(i % 2 == 0) for i in range(20)], adjust=metrics.PPI_ADJUST,
    )
    rc, sc, kind = gates._rate_and_se(low_arm)
    rb, sb, _ = gates._rate_and_se(base)
    assert kind == "corrected" and rc == pytest.approx(raw.value) and rb == pytest.approx(base_raw.value)
    check, _ = gates._z_check("judged:corrected", 23, (rb, sb), (rc, sc), GateThresholds())
    assert check.change == pytest.approx(100 * (raw.value - base_raw.value))
    # the difference of two arms: raw minus raw, its interval held to [-1, 1]
    d = metrics.corrected_rate_difference(base["corrected"], cor)
    assert d["value"] == pytest.approx(raw.value - base_raw.value)
    # a file written before `raw` was kept still loads: its shown rate is read
    old = {k: v for k, v in cor.items() if k != "raw"}
    assert metrics.raw_value(old) == 0.0 and gates._rate_and_se({**low_arm, "corrected": old})[0] == 0.0
