"""The reports index (evalkit.telling.report_index): one row per run, trends per suite, gate
entries labelled by their cause."""
from __future__ import annotations

import json

from conftest import make_run, make_suite

from evalkit.conclusions import gates
from evalkit.telling import report_index
from evalkit.conclusions import verdicts

def test_index_trend_across_runs_of_a_suite(tmp_path):
    """The index draws one line per arm across runs of the same suite (no kernels)."""
    for i, (stamp, rate) in enumerate((("r1", 0.2), ("r2", 0.5), ("r3", 0.6))):
        d = tmp_path / stamp
        d.mkdir()
        (d / report_index.MANIFEST).write_text(json.dumps({
            "run": stamp, "created": f"2026-01-0{i + 1}T00:00:00+00:00", "suite": "s<b>", "arms": ["a"],
            "headline": {"a": rate}, "verdicts": [], "notebooks": [], "spend_usd": 0.01}))
    index = report_index.build_index(tmp_path).read_text()
    assert index.count("<polyline") == 1 and "s&lt;b&gt;" in index and "<b>" not in index.split("<body>")[1]
    assert "latest 60.0%" in index


def _index_row(index: str, run_name: str) -> str:
    return next(r for r in index.split("<tr>") if f"<code>{run_name}</code>" in r)


def test_index_labels_a_failed_gate_by_its_cause(tmp_path):
    """Review finding: any failed gate was labelled "regression", even one that failed
    only because the run was INCOMPLETE (no rate read). Real gates on hand-made runs,
    recorded in each run's verdicts.json as `evalkit gate` records them, then the index
    (no kernels)."""
    outs = {(f"c{i}", "x"): [True] * 3 for i in range(10)}
    drop = {(f"c{i}", "x"): ([False] * 3 if i < 4 else [True] * 3) for i in range(10)}
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(10)}, gate={"max_success_drop_points": 5})
    gates.accept_baseline(make_run(tmp_path, "0-base", outs, k=3, suite=suite), suite)
    runs = {"1-incomplete": make_run(tmp_path, "1-incomplete", outs, k=3, suite=suite, complete=False,
                                     exit_code=1),
            "2-drop": make_run(tmp_path, "2-drop", drop, k=3, suite=suite),
            "3-cost": make_run(tmp_path, "3-cost", outs, k=3, suite=suite, costs={c: 0.01 for c in outs}),
            "4-same": make_run(tmp_path, "4-same", outs, k=3, suite=suite)}
    out = tmp_path / "reports"
    for name, run in runs.items():
        verdicts.record_verdicts(run, gate=gates.gate(run, suite / "baseline.json", alpha=1.0))
        pages = out / name
        pages.mkdir(parents=True)
        report_index.write_manifest(run, pages, [], {})
    index = report_index.build_index(out).read_text(encoding="utf-8")
    inc = _index_row(index, "1-incomplete")
    assert "<span class='inconclusive'>gate failed: incomplete run</span>" in inc and "INCOMPLETE" in inc
    assert "regression" not in inc
    assert "<span class='regression'>gate failed: case score drop</span>" in _index_row(index, "2-drop")
    assert "<span class='regression'>gate failed: cost increase</span>" in _index_row(index, "3-cost")
    same = _index_row(index, "4-same")
    assert "<span class='pass'>gate passed</span>" in same and "gate failed" not in same
    assert index.count("class='regression'") == 2
    # a manifest written before the cause was recorded: an INCOMPLETE run is relabelled
    old = out / "5-old"
    old.mkdir()
    (old / report_index.MANIFEST).write_text(json.dumps({
        "run": "5-old", "created": "2026-01-05T00:00:00+00:00", "suite": "unit", "arms": ["x"], "complete": False,
        "verdicts": [{"kind": "regression", "text": "gate FAIL (x vs baseline)"}], "notebooks": []}))
    row = _index_row(report_index.build_index(out).read_text(encoding="utf-8"), "5-old")
    assert "gate failed: incomplete run" in row and "regression" not in row


def test_report_conclusions_of_a_single_arm_run(tmp_path):
    """`evalkit report` writes what it concludes to verdicts.json before any notebook: a
    single-arm run gets the conformance verdict (every trial ran and passed, or which did
    not), gated against the baseline it finds; the index shows both from that file."""
    from evalkit.telling import reports

    outs = {(f"c{i}", "x"): [True] * 3 for i in range(6)}
    suite = make_suite(tmp_path, {f"c{i}": {} for i in range(6)})
    gates.accept_baseline(make_run(tmp_path, "base", outs, k=3, suite=suite), suite)
    worse = {**outs, ("c0", "x"): [True, False, True]}
    run = make_run(tmp_path, "cur", worse, k=3, suite=suite)
    v = reports.conclude(run, reports.report_inputs(run))
    assert v.conformance is not None and v.conformance.kind == "regression" and v.conformance.below_trials == ("c0#1",)
    assert v.gate is not None and v.gate.arm == "x" and v.gate.baseline == str(suite / "baseline.json")
    assert v.comparisons == () and json.loads((run / "verdicts.json").read_text())["conformance"]["kind"] == "regression"
    pages = tmp_path / "reports" / "cur"
    pages.mkdir(parents=True)
    report_index.write_manifest(run, pages, [], {})
    row = _index_row(report_index.build_index(tmp_path / "reports").read_text(encoding="utf-8"), "cur")
    assert "conformance regression" in row and "gate passed" in row


def test_a_run_whose_program_was_not_contained_says_so_on_the_index(tmp_path):
    """"isolation": "none" (issue 25): every page and the index say the program under test
    was not contained; a sandboxed run's row says nothing of it."""
    outs = {("c0", "x"): [True, True]}
    pages = tmp_path / "reports"
    for name, isolation in (("open", "none"), ("boxed", "bwrap")):
        run = make_run(tmp_path, name, outs, k=2)
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "isolation": isolation}))
        (pages / name).mkdir(parents=True)
        report_index.write_manifest(run, pages / name, [], {})
    assert json.loads((pages / "open" / report_index.MANIFEST).read_text())["not_contained"].startswith(
        "the program under test was NOT contained")
    index = report_index.build_index(pages).read_text()
    assert "NOT contained" in _index_row(index, "open") and "NOT contained" not in _index_row(index, "boxed")


def test_report_never_replaces_the_gate_the_user_ran_and_every_page_says_what_was_gated(tmp_path):
    """Issue 41: baseline accepted from arm `baseline`, `gate RUN --arm improved` (cost
    +130%, FAIL), then `report RUN`: verdicts.json, the index and the run summary showed a
    gate of arm `baseline` against itself, and the real failure was gone."""
    from click.testing import CliRunner

    from evalkit._cli.main import main
    from evalkit.runfolder.runload import run_verdicts

    cases = {f"c{i}": {} for i in range(12)}
    suite = make_suite(tmp_path, cases)
    outs = {(c, arm): [True] * 2 for c in cases for arm in ("baseline", "improved")}
    costs = {(c, arm): 0.001 if arm == "baseline" else 0.0023 for c, arm in outs}  # improved costs +130%
    run = make_run(tmp_path, "20260301-000000", outs, k=2, suite=suite, costs=costs)
    cli = CliRunner()
    assert cli.invoke(main, ["baseline", "accept", str(run), "--arm", "baseline"]).exit_code == 0
    g = cli.invoke(main, ["gate", str(run), "--baseline", str(suite / "baseline.json"), "--arm", "improved"])
    assert g.exit_code == 1 and g.output.startswith("Gate: FAIL: cost increase"), g.output
    assert "gated: arm improved of 20260301-000000 against run 20260301-000000, arm baseline" in g.output
    recorded = run_verdicts(run).gate
    assert recorded.arm == "improved" and recorded.recorded_by == "gate"
    out = tmp_path / "reports"
    r = cli.invoke(main, ["report", str(run), "--reports-dir", str(out), "--only", "run_summary"])
    assert r.exit_code == 0, r.output
    assert run_verdicts(run).gate == recorded  # the gate the user ran, not a gate of `baseline` against itself
    index = (out / "index.html").read_text(encoding="utf-8")
    assert "gate failed: cost increase" in index and "arm improved of 20260301-000000 against run" in index
    page = (out / run.name / "run_summary.html").read_text(encoding="utf-8")
    assert "Gate FAIL: arm improved of 20260301-000000 against run 20260301-000000, arm baseline" in page
    # report --arm: another arm than the recorded gate's is refused, never silently replaced
    r = cli.invoke(main, ["report", str(run), "--reports-dir", str(out), "--only", "run_summary",
                          "--arm", "baseline"])
    assert r.exit_code == 2 and "never replaces" in r.output and run_verdicts(run).gate == recorded
    # without a gate recorded by `evalkit gate`, report gates the arm asked for and says so
    verdicts.record_verdicts(run, gate=None)
    r = cli.invoke(main, ["report", str(run), "--reports-dir", str(out), "--only", "run_summary",
                          "--arm", "improved"])
    mine = run_verdicts(run).gate
    assert r.exit_code == 0 and mine.arm == "improved" and mine.recorded_by == "report" and not mine.passed
    assert mine.against().endswith("; by `evalkit report`")
    # and a later report reads the gated arm from verdicts.json
    cli.invoke(main, ["report", str(run), "--reports-dir", str(out), "--only", "run_summary"])
    assert run_verdicts(run).gate.arm == "improved"
