"""The explorer's data and page without a browser (evalkit.telling.explorer): every sample
with its outcome and why, the verdict's case votes, the gate's dropped cases, the diff of
two runs (regressions first, the paired test from evalkit.numbers.stats), the embedded
data that no text can break out of, the CLI, the index's links and the notebook object.
The page in a browser: tests/test_explorer_browser.py."""
from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re

import pytest
from click.testing import CliRunner
from conftest import make_run, make_suite, two_arm

import evalkit
from evalkit._cli.main import main
from evalkit.conclusions import gates
from evalkit.foundations.errors import InputError
from evalkit.numbers import stats
from evalkit.telling import explorer, report_index, reports

HOSTILE = "</script><script>alert(1)</script><!-- \u2028 & <b>"


def _page_data(page: str) -> dict:
    m = re.search(r'<script id="evalkit-data" type="application/octet-stream">([^<]*)</script>', page)
    assert m is not None
    return json.loads(gzip.decompress(base64.b64decode(m.group(1))))


def _rows(data: dict) -> list[dict]:
    s = data["samples"]
    return [{k: s[k][r] for k in s} | {"case": data["cases"][s["c"][r]]["id"], "arm": data["arms"][s["a"][r]]}
            for r in range(len(s["o"]))]


def test_every_sample_with_its_outcome_and_why(tmp_path):
    """Passed, failed (with the failed check), errored (errors.jsonl: with why, and a
    grading error), ungraded (no grade line): each sample once, in the run's case order."""
    outs = {("c1", "baseline"): [True, False], ("c2", "baseline"): [None, "nograde"]}
    run = make_run(tmp_path, "r", outs, k=2, errors=[("c3", "baseline", 0)])
    rows = _rows(explorer.run_data(run))
    got = {(r["case"], r["i"]): (explorer_outcome(r["o"]), r["w"]) for r in rows}
    assert got == {
        ("c1", 0): ("passed", ""),
        ("c1", 1): ("failed", "contains"),
        ("c2", 0): ("errored", "grading error: judge failed"),
        ("c2", 1): ("ungraded", "not graded"),
        ("c3", 0): ("errored", "HTTP 500 (4 attempt(s))"),
    }
    assert [c["id"] for c in explorer.run_data(run)["cases"]][:2] == ["c1", "c2"]


def explorer_outcome(code: int) -> str:
    return ["passed", "failed", "errored", "ungraded"][code]


def test_the_verdict_and_its_case_votes_and_the_gate_with_its_dropped_cases(tmp_path):
    """What the top of the page rests on: the two-arm verdict of verdicts.json with each
    case's vote (the discordant cases are its wins and losses), and the recorded gate
    with the cases whose score fell against the baseline's per-case counts."""
    ids = [f"c{i}" for i in range(10)]
    suite = make_suite(tmp_path, {c: {} for c in ids}, gate={"max_success_drop_points": 5})
    base = make_run(tmp_path, "0-base", two_arm({c: ([True] * 3, [True] * 3) for c in ids}), k=3, suite=suite)
    gates.accept_baseline(base, suite, arm="skilled")
    cur = make_run(tmp_path, "1-cur", two_arm({c: ([True] * 3, [False] * 3 if c in ("c1", "c4") else [True] * 3)
                                               for c in ids}), k=3, suite=suite)
    reports.conclude(cur, reports.report_inputs(cur))
    data = explorer.run_data(cur)
    (v,) = data["comparisons"]
    assert (v["baseline"], v["treatment"]) == ("baseline", "skilled")
    assert {c for c, vote in v["votes"].items() if vote == "loss"} == {"c1", "c4"}
    assert data["gate"]["arm"] == "skilled" and data["gate"]["passed"] is False
    assert data["gate"]["dropped"] == ["c1", "c4"]
    assert any(f.get("label", "").startswith("gate failed") for f in data["findings"])


def _two_runs(tmp_path):
    ids = [f"c{i}" for i in range(8)]
    suite = make_suite(tmp_path, {c: {} for c in ids})
    old = make_run(tmp_path, "0-old", two_arm({c: ([True, True], [True, False]) for c in ids}), k=2, suite=suite)
    new_outs = two_arm({c: ([True, True], [True, False]) for c in ids})
    new_outs[("c2", "baseline")] = [False, False]  # a regression of two samples
    new_outs[("c5", "baseline")] = [True, False]  # of one
    new_outs[("c3", "skilled")] = [True, True]  # an improvement
    new = make_run(tmp_path, "1-new", new_outs, k=2, suite=suite)
    return old, new


def test_the_diff_lists_regressions_first_with_the_paired_test(tmp_path):
    """Per case and arm what changed, the largest drop first, then improvements, then
    the rest; per arm the exact sign test of the change over cases: stats.sign_test."""
    old, new = _two_runs(tmp_path)
    d = explorer.diff_data(new, old)
    rows = d["rows"]
    listed = [(d["cases"][c]["id"], d["arms"][a], d["changes"][ch]) for c, a, ch in zip(rows["c"], rows["a"], rows["ch"])]
    assert listed[:3] == [("c2", "baseline", "pass -> fail"), ("c5", "baseline", "pass -> fail"),
                          ("c3", "skilled", "fail -> pass")]
    assert {x[2] for x in listed[3:]} == {"same"} and len(listed) == 16
    paired = {p["arm"]: p for p in d["paired"]}
    assert (paired["baseline"]["regressed"], paired["baseline"]["improved"], paired["baseline"]["ties"]) == (2, 0, 6)
    assert paired["baseline"]["p_value"] == stats.sign_test(0, 2, 6).p_value
    assert paired["skilled"]["p_value"] == stats.sign_test(1, 0, 7).p_value
    # RUN gated against OTHER, arm by arm, with the cases whose case score fell (a
    # capability case scores pass@k: c5, one of two samples passing, still scores 1)
    by_arm = {g["arm"]: g for g in d["gate_against"]}
    assert by_arm["baseline"]["dropped"] == ["c2"] and by_arm["skilled"]["dropped"] == []
    assert by_arm["baseline"]["baseline"] == "0-old"


def test_no_text_of_the_run_can_break_out_of_the_page(tmp_path):
    """The data are gzip + base64: a hostile output (a closing script tag, a comment, a
    line separator) never reaches the HTML parser, and comes back whole; the page's one
    script is allowed by its hash, nothing else may load."""
    run = make_run(tmp_path, "r", {("c1", "a"): [True]}, k=1)
    res = run / "results.jsonl"
    res.write_text(res.read_text().replace('"output": "o"', '"output": ' + json.dumps(HOSTILE)))
    page = explorer.write_explorer(run, tmp_path / "out")
    text = page.path.read_text()
    assert "alert(1)" not in text and "<b>" not in text and "\u2028" not in text
    assert _page_data(text)["samples"]["out"] == [HOSTILE]
    script = re.search(r'<script id="evalkit-explorer">(.*?)</script>', text, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', text).group(1)
    assert f"script-src &#x27;sha256-{digest}&#x27;" in csp and "default-src &#x27;none&#x27;" in csp
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script


def test_the_banners_are_in_the_html_escaped_and_no_text_fills_a_slot(tmp_path):
    """INCOMPLETE and the judge's notice are in the page's HTML (shown before the script
    reads the data); a run's text that reads like a template slot stays that text."""
    run = make_run(tmp_path, "__DATA__<i>", {("c1", "a"): [True]}, k=1, complete=False)
    page = explorer.write_explorer(run, tmp_path / "out").path.read_text()
    assert '<div class="banner">INCOMPLETE: 1 of 1 cases ran (cost cap reached)</div>' in page
    assert "<title>__DATA__&lt;i&gt;: explorer</title>" in page
    assert _page_data(page)["run"] == "__DATA__<i>"


def test_explore_cli_writes_the_explorer_and_the_diff(tmp_path):
    old, new = _two_runs(tmp_path)
    out = tmp_path / "pages"
    res = CliRunner().invoke(main, ["explore", str(new), "--against", str(old), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "explorer.html").is_file() and (out / "diff.html").is_file()
    assert "32 samples" in res.output and "16 case x arm rows" in res.output
    bad = CliRunner().invoke(main, ["explore", str(tmp_path / "nowhere")])
    assert bad.exit_code == 2 and "not a run folder" in bad.output


def test_the_index_links_each_runs_explorer_and_diff(tmp_path):
    d = tmp_path / "r1"
    d.mkdir()
    (d / report_index.MANIFEST).write_text(json.dumps({
        "run": "r1", "suite": "s", "arms": ["a"], "headline": {}, "verdicts": [], "notebooks": [],
        "pages": {"explorer": "explorer.html", "diff": "diff.html", "against": "r0<i>"}}))
    index = report_index.build_index(tmp_path).read_text()
    assert "<a href='r1/explorer.html'>Explorer</a>" in index
    assert "<a href='r1/diff.html'>Diff against r0&lt;i&gt;</a>" in index


def test_report_refuses_against_with_redact_and_a_folder_that_is_no_run(tmp_path):
    old, new = _two_runs(tmp_path)
    with pytest.raises(InputError, match="not a run folder"):
        reports.report_run(new, tmp_path / "rep", against=tmp_path / "nowhere")
    with pytest.raises(InputError, match="--redact and --against"):
        reports.report_run(new, tmp_path / "rep", against=old, redact=True)


def test_evalkit_explore_shows_the_page_in_a_notebook_cell(tmp_path):
    """`evalkit.explore(run)`: an iframe whose srcdoc is the explorer page, escaped into
    the attribute (the notebook parses none of the run's text)."""
    run = make_run(tmp_path, "r", {("c1", "a"): [True, False]}, k=2)
    shown = evalkit.explore(run)
    assert shown.rows == 2
    frame = shown._repr_html_()
    assert frame.startswith('<iframe srcdoc="&lt;!DOCTYPE html&gt;') and 'sandbox="allow-scripts"' in frame
    assert "<script" not in frame
    old, new = _two_runs(tmp_path / "two")
    assert evalkit.explore(new, against=old).rows == 16


def test_previous_run_is_the_latest_older_run_of_the_same_folder(tmp_path):
    a = make_run(tmp_path, "20260101-000000", {("c1", "a"): [True]}, k=1)
    b = make_run(tmp_path, "20260102-000000", {("c1", "a"): [True]}, k=1)
    assert explorer.previous_run(b) == a and explorer.previous_run(a) is None


def test_a_lone_surrogate_in_an_output_is_kept_not_a_crash(tmp_path):
    """A model's output may hold a lone surrogate (results.jsonl keeps it as \\ud800):
    the page is still written (it was a UnicodeEncodeError), the text comes back whole."""
    run = make_run(tmp_path, "r", {("c1", "a"): [True]}, k=1)
    res = run / "results.jsonl"
    res.write_text(res.read_text().replace('"output": "o"', '"output": "x\\ud800y"'))
    page = explorer.write_explorer(run, tmp_path / "out").path.read_text()
    assert _page_data(page)["samples"]["out"] == ["x\ud800y"]


def test_a_missing_sample_is_skipped_by_the_drops_and_said_not_a_crash(tmp_path):
    """A case with fewer than k samples on a side (an errored key) has no case score: the
    dropped cases leave it out and say so, in the diff (either way round) and in the
    explorer of a run gated on a baseline, as `gates.gate_metrics` does."""
    old, _ = _two_runs(tmp_path)
    suite = tmp_path / "evals" / "unit"
    gates.accept_baseline(old, suite, arm="baseline")
    outs = two_arm({c: ([True, True], [True, False]) for c in [f"c{i}" for i in range(8)]})
    outs[("c6", "baseline")] = [True, "missing"]
    errored = make_run(tmp_path, "2-err", outs, k=2, suite=suite, errors=[("c6", "baseline", 1)])
    for d in (explorer.diff_data(errored, old), explorer.diff_data(old, errored)):
        by_arm = {g["arm"]: g for g in d["gate_against"]}
        assert by_arm["baseline"]["short"] == ["c6"] and "c6" not in by_arm["baseline"]["dropped"]
    reports.conclude(errored, reports.report_inputs(errored))
    gate = explorer.run_data(errored)["gate"]
    assert gate["short"] == ["c6"] and gate["passed"] is False


def test_a_page_that_fails_is_a_skipped_page_with_its_reason_not_a_failed_report(tmp_path, monkeypatch):
    """The report writes the explorer pages beside the notebooks: one that raises is
    listed as skipped with why, and the other page is still written."""
    old, new = _two_runs(tmp_path)
    out = tmp_path / "reports" / "1-new"

    def broken(*a, **k):
        raise stats.StatsInputError("k=2 is larger than the n=1 samples drawn")

    monkeypatch.setattr(explorer, "write_diff", broken)
    pages, failed = reports._explorer_pages(evalkit.load_run(new), out, reports.Inputs(), old)
    assert pages == {"explorer": "explorer.html"} and (out / "explorer.html").is_file()
    assert failed == {"diff": "page not written: StatsInputError: k=2 is larger than the n=1 samples drawn"}


def test_the_diffs_gate_is_evalkit_gates_own_decision_an_incomplete_run_fails(tmp_path):
    """The diff's gate of RUN against OTHER is `gates.gate_decision`: a run that stopped
    INCOMPLETE fails it unread, whatever its rates, as `evalkit gate` does."""
    old, _ = _two_runs(tmp_path)
    short = make_run(tmp_path, "2-short", two_arm({c: ([True, True], [True, False]) for c in [f"c{i}" for i in range(8)]}),
                     k=2, suite=tmp_path / "evals" / "unit", complete=False)
    for g in explorer.diff_data(short, old)["gate_against"]:
        assert g["passed"] is False and g["reasons"][0].startswith("INCOMPLETE")
        assert g["checks"] == [] and g["baseline"] == "0-old"


def test_the_recorded_gates_drops_use_the_baseline_it_read_and_no_machine_path_is_shown(tmp_path):
    """The gate recorded by `evalkit gate` against a baseline.json other than the suite's
    today: the page's dropped cases are against the one it read (its record names it),
    and the page says what it was gated against repository-relative, never the absolute
    path of this machine."""
    ids = [f"c{i}" for i in range(10)]
    suite = make_suite(tmp_path, {c: {} for c in ids}, gate={"max_success_drop_points": 5})
    (tmp_path / ".git").mkdir()
    base = make_run(tmp_path, "0-base", two_arm({c: ([True] * 3, [True] * 3) for c in ids}), k=3, suite=suite)
    kept = tmp_path / "kept"
    kept.mkdir()
    read, _ = gates.accept_baseline(base, kept, arm="skilled")
    cur = make_run(tmp_path, "1-cur", two_arm({c: ([True] * 3, [False] * 3 if c in ("c1", "c4") else [True] * 3)
                                               for c in ids}), k=3, suite=suite)
    gates.gate_run(cur, read, arm="skilled")
    gates.accept_baseline(cur, suite, arm="skilled")  # the suite's baseline today: no case dropped against it
    gate = explorer.run_data(cur)["gate"]
    assert gate["dropped"] == ["c1", "c4"]
    assert gate["baseline"] == "kept/baseline.json" and "kept/baseline.json" in gate["against"]
    assert str(tmp_path) not in json.dumps(gate)


def test_previous_run_skips_a_run_of_another_suite(tmp_path):
    a = make_run(tmp_path, "20260101-000000", {("c1", "a"): [True]}, k=1, suite=tmp_path / "s1")
    make_run(tmp_path, "20260102-000000", {("c1", "a"): [True]}, k=1, suite=tmp_path / "s2")
    c = make_run(tmp_path, "20260103-000000", {("c1", "a"): [True]}, k=1, suite=tmp_path / "s1")
    assert explorer.previous_run(c) == a


def test_the_demos_second_run_has_the_next_seed_no_cache_and_its_diff(tmp_path, monkeypatch):
    """`make demo` on a fresh clone ends with a diff: the factual suite's baseline and
    skilled arms run again with the next seed and the response cache off, and the
    first run's diff.html holds it against that second run."""
    from evalkit._cli import demo
    from evalkit.calls.serve import ScriptedServer
    from evalkit.conclusions.grading import grade_run
    from evalkit.intake.lint import load_suite
    from evalkit.running.runner import run_suite

    monkeypatch.setenv("EVALKIT_API_KEY", "test-key")
    suite = load_suite("data/factual")
    how = {"k": 1, "runs_dir": tmp_path / "runs", "progress": False}
    with ScriptedServer({"default": {"text": "Paris"}}) as srv:
        first = run_suite(suite, arms=["baseline", "skilled"], base_url=srv.base_url, **how)
        again = demo.second_run(suite, run_suite, base_url=srv.base_url, **how)
    meta = json.loads((again.path / "config.json").read_text())
    assert evalkit.load_run(again.path).arm_names() == ["baseline", "skilled"]
    assert meta["config"]["seed"] == suite.config.seed + 1, meta
    rows = [json.loads(x) for x in (again.path / "results.jsonl").read_text().splitlines()]
    assert rows and not any(r["cached"] for r in rows)
    seeds = {(r["case_id"], r["arm"]): r["seed"] for r in map(json.loads, (first.path / "results.jsonl").open())}
    assert all(seeds[(r["case_id"], r["arm"])] != r["seed"] for r in rows)
    grade_run(first.path, suite)
    grade_run(again.path, suite)
    page = explorer.write_diff(first.path, again.path, tmp_path / "reports")
    assert page.path.name == "diff.html" and _page_data(page.path.read_text())["other"] == again.path.name


def test_the_diff_counts_a_missing_sample_as_not_passed_and_puts_the_largest_improvement_first(tmp_path):
    """A side with fewer than k samples is compared over k (1 of 2, not 1 of 1: nothing
    counts a missing result as a pass); improvements come the largest change first."""
    old = make_run(tmp_path, "0-old", {("c1", "a"): [True, "missing"], ("c2", "a"): [True, False],
                                       ("c3", "a"): [False, False]}, k=2)
    new = make_run(tmp_path, "1-new", {("c1", "a"): [True, True], ("c2", "a"): [True, True],
                                       ("c3", "a"): [True, True]}, k=2)
    d = explorer.diff_data(new, old)
    rows = d["rows"]
    listed = [(d["cases"][c]["id"], d["changes"][ch], p0, n0) for c, ch, p0, n0
              in zip(rows["c"], rows["ch"], rows["p0"], rows["n0"])]
    assert listed == [("c3", "fail -> pass", 0, 2), ("c1", "fail -> pass", 1, 2), ("c2", "fail -> pass", 1, 2)]


# --- the sample columns held to a plain reading of the run's files ----------------------

NAN, INF = float("nan"), float("inf")
TRAJECTORY_FILES = [("c1", "a", 0), ("c2", "b", 2), ("c2", "a", 0), ("c1", "b", 0)]


def _odd_run(tmp_path, name: str, *, grades: str, surrogate: bool, typed: bool = False):
    """A run folder of odd cells: None/NaN/bool/str numbers, outputs that are no text
    (None, NaN, a number, a lone surrogate), checks that are not dicts, passed as
    null/NaN/0/"yes", a held and an unstable judge, an agent sample with a trajectory
    and two without one, a case outside config.json, and errored keys (errors.jsonl).
    `grades`: "aligned" (one grade line per sample, in the results' order), "shuffled"
    (another order, a key graded twice (the last line counts), a sample with no grade
    and a grade with no sample), "duplicated" (aligned, with a key's sample and grade
    twice: the last grade line is both samples') or "none" (no grades.jsonl). `typed`:
    cells that make typed columns (outputs all text, costs all floats with a NaN and an
    infinity, latencies all ints, cached all bools)."""
    from evalkit.runfolder.trajectories import TrajectoryWriter

    run = tmp_path / "runs" / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({
        "suite": "", "suite_name": "unit", "config": {"k": 3}, "arms": [{"name": "b"}, {"name": "a"}], "k": 3,
        "cases": ["c2", "c1"], "created": "2026-01-01T00:00:00Z", "source": "evalkit"}))
    (run / "summary.json").write_text(json.dumps({"complete": True, "ran": 9, "total": 9, "exit_code": 0}))
    out = "x\ud800y" if surrogate else HOSTILE
    cells = [  # (case, arm, index, output, cost_usd, latency_ms, cached, agent, turns)
        ("c1", "a", 1, out, "0.5", True, True, None, None),
        ("c1", "a", 0, None, NAN, 2, False, {"kind": "program"}, 3),
        ("c2", "b", 2, 7, 3, INF, "yes", None, "2"),
        ("c2", "b", 0, NAN, None, "x", 1, None, None),
        ("c9", "a", 0, "late case", 1e-7, -0.0, None, {"kind": "program"}, None),
        ("c2", "a", 0, "", True, 12.5, False, None, NAN),
        ("c1", "b", 0, "o", 0.25, None, True, None, None),
    ]
    if typed:
        cells = [(c, a, i, f"{o}", [0.5, NAN, 3.0, INF, 1e-7, -INF, 0.25][n], n * 7, n % 2 == 0, agent, turns)
                 for n, (c, a, i, o, _, _, _, agent, turns) in enumerate(cells)]
    if grades == "duplicated":
        cells.append(("c2", "a", 0, "again", 0.5, 1, False, None, None))
    with open(run / "results.jsonl", "w") as fh:
        for c, a, i, o, cost, lat, cached, agent, turns in cells:
            fh.write(json.dumps({"case_id": c, "tags": ["t"], "arm": a, "index": i, "seed": i, "model": "m",
                                 "output": o, "tool_calls": [], "finish_reason": "stop", "usage": {},
                                 "latency_ms": lat, "cost_usd": cost, "request_hash": f"{c}{a}{i}",
                                 "cached": cached, "agent": agent, "turns": turns}) + "\n")
    odd_checks = ["x", {"name": "n", "passed": 0, "reason": None}, 5, {"passed": "0", "reason": NAN}]
    graded = {  # key -> (passed, checks, judge_score, judge_reason, error, judge_held, judge_unstable)
        ("c1", "a", 1): (True, [{"name": "contains", "passed": True, "reason": ""}], "0.75", "fine", None, None, False),
        ("c1", "a", 0): (False, odd_checks, True, None, None, None, False),
        ("c2", "b", 2): (None, [], NAN, NAN, "judge failed", None, False),
        ("c2", "b", 0): (NAN, [], INF, 3, None, "uncalibrated", True),
        ("c9", "a", 0): ("yes", [{"name": "a"}], 7, "r", None, None, False),
        ("c2", "a", 0): (0, [{"name": "contains", "passed": False, "reason": "no"}, "y"], None, None, None, None, True),
        ("c1", "b", 0): (False, [{"name": "contains", "passed": True}], -1.5, "", None, "", False),
    }
    keys = [(c, a, i) for c, a, i, *_ in cells]
    if grades == "shuffled":
        keys = keys[::-1][1:] + [("c1", "a", 0), ("c7", "a", 0)]  # c1/b/0 ungraded, c1/a/0 twice
    lines = []
    for n, key in enumerate(keys):
        passed, checks, score, reason, error, held, unstable = graded.get(key, graded[("c1", "a", 1)])
        if grades == "shuffled" and key == ("c1", "a", 0) and n < len(keys) - 2:
            passed, checks = True, []  # the first of the two lines of this key: the second counts
        if grades == "duplicated" and n == len(keys) - 1:
            passed, checks = True, []  # the second sample of a key and its grade: both samples' grade
        lines.append({"case_id": key[0], "arm": key[1], "index": key[2], "passed": passed, "checks": checks,
                      "judge_score": score, "judge_reason": reason, "error": error, "judge_held": held,
                      "judge_unstable": unstable})
    if grades != "none":
        (run / "grades.jsonl").write_text("".join(json.dumps(g) + "\n" for g in lines))
    (run / "errors.jsonl").write_text(
        json.dumps({"case_id": "c1", "arm": "b", "index": 1, "error": "HTTP 500", "attempts": "3"}) + "\n"
        + json.dumps({"case_id": "c3", "arm": "a", "index": 0, "error": None, "attempts": None}) + "\n")
    for c, a, i in TRAJECTORY_FILES:  # only an agent sample's (an agent, or a number of turns) is read
        w = TrajectoryWriter(run, c, a, i)
        w.write("start", {"case_id": c, "arm": a, "index": i})
        w.write("model_call", {"call": 1, "status": "ok", "request": {"messages": [{"role": "user", "content": "hi"}]},
                               "answer": {"text": f"answer of {c}/{a}/{i}", "tool_calls": []}})
        w.write("end", {"status": "finished", "stop": "done"})
        w.close()
    return run, cells, [dict(zip(("case_id", "arm", "index"), k)) | v for k, v in
                        zip(keys, lines)] if grades != "none" else []


def _plain_number(v):
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except ValueError:
        return None
    return f if f == f and f not in (INF, -INF) else None


def _plain_text(v):
    return "" if v is None or v != v else str(v)


def _expected_rows(cells, grade_lines):
    """Each sample and errored key as the page should list it, read from the cells the
    run was written from, one plain rule at a time."""
    grades = {}
    for g in grade_lines:
        grades[(g["case_id"], g["arm"], g["index"])] = g  # the last line of a key counts
    rows = []
    for c, a, i, o, cost, lat, cached, agent, turns in cells:
        g = grades.get((c, a, i))
        checks = [c_ for c_ in (g["checks"] if g else []) if isinstance(c_, dict)]
        if g is None:
            outcome, why = "ungraded", "not graded"
        elif g["passed"] is None or g["passed"] != g["passed"]:
            if g["error"]:
                outcome, why = "errored", "grading error: " + g["error"]
            else:
                outcome, why = "ungraded", ("judge held: " + g["judge_held"]) if g["judge_held"] else "no verdict"
        elif g["passed"]:
            outcome, why = "passed", ""
        else:
            outcome, why = "failed", ", ".join(str(x.get("name")) for x in checks if not x.get("passed")) or "failed"
        rows.append({"case": c, "arm": a, "i": i, "o": outcome, "w": why, "out": _plain_text(o),
                     "ck": [[str(x.get("name")), 1 if x.get("passed") else 0, _plain_text(x.get("reason"))]
                            for x in checks],
                     "js": _plain_number(g["judge_score"]) if g else None,
                     "jr": _plain_text(g["judge_reason"]) if g else "",
                     "cost": _plain_number(cost), "lat": _plain_number(lat), "ca": 1 if cached is True else 0,
                     "agent": isinstance(agent, dict) or _plain_number(turns) is not None})
    for c, a, i, why in (("c1", "b", 1, "HTTP 500 (3 attempt(s))"), ("c3", "a", 0, "")):
        rows.append({"case": c, "arm": a, "i": i, "o": "errored", "w": why, "out": "", "ck": [], "js": None,
                     "jr": "", "cost": None, "lat": None, "ca": 0, "agent": False})
    cases, arms = ["c2", "c1", "c9", "c3"], ["b", "a"]  # config.json's, then the others as met
    return sorted(rows, key=lambda r: (cases.index(r["case"]), arms.index(r["arm"]), r["i"]))


@pytest.mark.parametrize("grades", ["aligned", "shuffled", "duplicated", "none"])
@pytest.mark.parametrize(("surrogate", "typed"), [(False, False), (True, False), (False, True)])
def test_every_odd_cell_reads_as_a_plain_reading_of_the_files_says(tmp_path, grades, surrogate, typed):
    """The sample columns (built column by column) against a plain per-sample reading of
    the cells the run was written from: outcome and why, output, checks, judge score and
    reason, cost, latency, cached, the agent sample's trajectory, the errored keys; in
    case, arm and index order. The page's embedded JSON is `jsonable(run_data)`'s."""
    from evalkit.foundations._io import jsonable

    run, cells, grade_lines = _odd_run(tmp_path, "r", grades=grades, surrogate=surrogate, typed=typed)
    data = explorer.run_data(run)
    assert [c["id"] for c in data["cases"]] == ["c2", "c1", "c9", "c3"] and data["arms"] == ["b", "a"]
    got = []
    for r in _rows(data):
        t = data["trajectories"][r["tr"]] if r["tr"] >= 0 else None
        assert t is None or t["turns"][0]["text"] == f"answer of {r['case']}/{r['arm']}/{r['i']}"
        got.append({"case": r["case"], "arm": r["arm"], "i": r["i"], "o": explorer_outcome(r["o"]), "w": r["w"],
                    "out": r["out"], "ck": r["ck"], "js": r["js"], "jr": r["jr"], "cost": r["cost"],
                    "lat": r["lat"], "ca": r["ca"], "agent": t is not None})
    want = _expected_rows(cells, grade_lines)
    for w in want:
        w["agent"] = w["agent"] and (w["case"], w["arm"], w["i"]) in TRAJECTORY_FILES
    assert got == want
    for col in ("cost", "lat", "js"):  # 3 is 3.0
        assert [type(v) for v in data["samples"][col]] == [type(w[col]) for w in want]
    assert len({id(x) for x in data["samples"]["ck"]}) == len(want)  # no two rows share a list
    page = explorer.write_explorer(run, tmp_path / "out").path.read_text()
    assert _page_data(page) == json.loads(json.dumps(jsonable(data)))
    other, _, _ = _odd_run(tmp_path, "r0", grades="aligned", surrogate=False)
    diff = explorer.diff_data(run, other)
    assert json.loads(gzip.decompress(base64.b64decode(explorer.embed(diff)))) == json.loads(json.dumps(jsonable(diff)))


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_a_non_finite_number_in_the_columns_is_refused_not_written_as_null(tmp_path, bad):
    """The columns are built finite or None: a NaN or infinity in one is a bug, refused
    (a run's page, and a diff's rows and its runs' columns); outside the columns a
    NaN is written null, as `jsonable` makes it."""
    run, _, _ = _odd_run(tmp_path, "r", grades="aligned", surrogate=False)
    data = explorer.run_data(run)
    for col in ("cost", "js", "lat"):
        broken = {**data, "samples": {**data["samples"], col: [*data["samples"][col][:-1], bad]}}
        with pytest.raises(ValueError):
            explorer.embed(broken)
    diff = explorer.diff_data(run, run)
    with pytest.raises(ValueError):
        explorer.embed({**diff, "rows": {**diff["rows"], "dcost": [bad] * len(diff["rows"]["dcost"])}})
    with pytest.raises(ValueError):
        explorer.embed({**diff, "old": {**data, "samples": {**data["samples"], "lat": [bad] * len(data["samples"]["lat"])}}})
    decoded = json.loads(gzip.decompress(base64.b64decode(explorer.embed({**data, "k": bad}))))
    assert decoded["k"] is None


def _grades_run(tmp_path, samples, grades, errors=()):
    """A one-arm run: a sample of each case in `samples`, the grades (case, passed) in
    their order, and errored keys."""
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"suite": None, "arms": ["a"], "k": 1, "cases": ["c1", "c2"]}))

    def lines(name, rows):
        (run / name).write_text("".join(json.dumps(r) + "\n" for r in rows))

    lines("results.jsonl", [{"case_id": c, "arm": "a", "index": 0, "output": "o"} for c in samples])
    lines("grades.jsonl", [{"case_id": c, "arm": "a", "index": 0, "passed": p, "checks": []} for c, p in grades])
    lines("errors.jsonl", [{"case_id": c, "arm": "a", "index": 0, "error": "boom", "attempts": 1} for c in errors])
    return run


def test_a_grade_of_a_key_with_no_sample_after_the_samples_grades_is_no_row(tmp_path):
    """The samples' grades in their order, then a grade of a key that has no sample: every
    column has a row per sample and errored key, and the errored key's row says its error,
    not the stray grade's (the columns were taken as they were: review of d53a32e)."""
    s = explorer.run_data(_grades_run(tmp_path, ["c1"], [("c1", True), ("c9", False)], errors=["c2"]))["samples"]
    assert {f: len(v) for f, v in s.items()} == {f: 2 for f in s}
    assert s["w"][0] == "" and s["w"][1].startswith("boom")


def test_no_sample_is_no_row_whatever_the_grades_hold(tmp_path):
    s = explorer.run_data(_grades_run(tmp_path, [], [("c1", True)]))["samples"]
    assert all(v == [] for v in s.values()), s
