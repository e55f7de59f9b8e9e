"""Waza `eval.yaml` (microsoft/waza) read by `evalkit import` and `lint` (issue 32, item 3):
told from a Vally spec by its fields, task files found by their globs, trials as k, the
graders with a check kind mapped, the others refused by name. Fixtures in Waza's own
shapes (its examples/preflight and examples/grader-showcase)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.checking.graders import GRADERS
from evalkit.intake.lint import lint_suite, load_suite

SPEC = """\
name: pdf-skill
description: |
  Converts PDFs.
skill: pdf
schemaVersion: "1.0"
config:
  trials_per_task: 3
  timeout_seconds: 120
  executor: mock
graders:
  - type: text
    name: no_critical_errors
    config:
      regex_not_match:
        - "(?i)fatal error"
tasks:
  - "tasks/*.yaml"
"""
PRESERVE = """\
id: preserve-record
name: Preserve an existing local record
inputs:
  prompt: Inspect record.json without modifying it or creating unrelated.json.
  files:
    - path: record.json
graders:
  - name: record-present
    type: file
    config:
      must_exist: [record.json]
  - name: unrelated-absent
    type: file
    config:
      must_not_exist: [unrelated.json]
"""
EXPLAIN = """\
id: explain
inputs:
  prompt: Explain what the converter does.
graders:
  - name: mentions
    type: text
    config: {contains: [Markdown], regex_match: ["\\\\bheadings?\\\\b"]}
"""


def spec(root: Path, text: str = SPEC) -> Path:
    (root / "tasks").mkdir(parents=True)
    (root / "eval.yaml").write_text(text)
    (root / "tasks" / "preserve.yaml").write_text(PRESERVE)
    (root / "tasks" / "explain.yaml").write_text(EXPLAIN)
    return root / "eval.yaml"


def test_a_waza_spec_imports_as_a_suite_with_its_tasks_trials_and_graders(tmp_path):
    f = spec(tmp_path / "pdf")
    out = CliRunner().invoke(main, ["import", str(f), "--to", str(tmp_path / "evals" / "pdf")])
    assert out.exit_code == 0, out.output
    suite = load_suite(tmp_path / "evals" / "pdf")
    assert suite.config.k == 3
    by_id = {c.id: [(k.kind, dict(k.options)) for k in c.checks] for c in suite.cases}
    no_fatal = ("regex", {"pattern": "\\A(?!.*(?:(?i)fatal error))", "flags": "s"})
    assert by_id == {
        "explain": [no_fatal, ("contains", {"value": "Markdown"}), ("regex", {"pattern": "\\bheadings?\\b"})],
        "preserve-record": [no_fatal, ("file_exists", {"path": "record.json", "expect": True}),
                            ("file_exists", {"path": "unrelated.json", "expect": False})],
    }
    report = lint_suite(f)  # the spec read directly: the same suite, with its warnings
    assert report.ok, [str(e) for e in report.errors]
    assert any("input files are not copied" in w.message and w.path.endswith("preserve.yaml")
               for w in report.warnings)


def test_regex_not_match_fails_exactly_when_the_pattern_occurs():
    check = {"pattern": "\\A(?!.*(?:(?i)fatal error))", "flags": "s"}
    assert GRADERS["regex"]("all good\nno problem", **check).passed
    assert not GRADERS["regex"]("line one\nFATAL ERROR: disk", **check).passed


def test_graders_with_no_check_kind_are_refused_by_name(tmp_path):
    text = SPEC.replace("graders:\n  - type: text", "graders:\n  - type: script\n    name: quality\n"
                                                     "    config:\n      script: graders/quality.py\n"
                                                     "  - type: text", 1)
    f = spec(tmp_path / "pdf", text)
    out = CliRunner().invoke(main, ["import", str(f), "--to", str(tmp_path / "dest")])
    assert out.exit_code == 2
    assert 'grader "quality" of type "script" has no evalkit check kind' in out.output
    assert f"{f}:" in out.output and not (tmp_path / "dest").exists()


def test_a_vally_spec_is_still_read_as_vally(tmp_path):
    f = tmp_path / "v" / "eval.yaml"
    f.parent.mkdir()
    f.write_text("name: v\nstimuli:\n  - name: a\n    prompt: p\n    graders:\n      - type: contains\n"
                 "        value: x\n")
    assert [c.id for c in load_suite(f).cases] == ["a"]


def waza_run(number: int, status: str, output: str = "ready", validations: dict | None = None) -> dict:
    return {"run_number": number, "attempts": 1, "status": status, "duration_ms": 10,
            "validations": validations or {"answer": {"identifier": "answer", "type": "text",
                                                      "passed": status == "passed", "score": 1, "weight": 1}},
            "session_digest": {"session_id": "s", "usage": {"input_tokens": 100, "output_tokens": 20}},
            "tool_events": [{"turn": 1, "sequence": 1, "tool_name": "read_file", "args": {"path": "note.txt"},
                             "result": "ready", "success": True}],
            "final_output": output}


# Waza's result JSON (microsoft/waza internal/testdata/compatibility/v1/results-1.4.json's shape)
RESULTS = {
    "schemaVersion": "1.4", "eval_id": "pdf-run", "skill": "pdf", "eval_name": "pdf-skill",
    "timestamp": "2026-01-01T00:00:00Z",
    "config": {"runs_per_test": 3, "model_id": "gpt-4o", "engine_type": "copilot-sdk", "timeout_sec": 30},
    "summary": {"total_tests": 2, "succeeded": 1, "failed": 1, "errors": 0},
    "tasks": [
        {"test_id": "explain", "display_name": "Explain", "status": "failed",
         "runs": [waza_run(1, "passed"), waza_run(2, "failed", "no"), waza_run(3, "passed")]},
        {"test_id": "preserve-record", "status": "passed",
         "runs": [waza_run(2, "passed"), waza_run(1, "passed"), waza_run(3, "error")]},
    ],
}


def test_ingest_reads_waza_results_and_an_errored_run_is_never_a_pass(tmp_path):
    import json

    from evalkit.runfolder.runload import load_run

    f = tmp_path / "results.json"
    f.write_text(json.dumps(RESULTS))
    out = CliRunner().invoke(main, ["ingest", str(f), "--to", str(tmp_path / "run")])
    assert out.exit_code == 0, out.output  # ingest wrote the run; the run says INCOMPLETE, and a gate fails it
    assert (tmp_path / "run" / "summary.md").read_text().startswith("INCOMPLETE: 1/2 cases (1 waza run(s) errored)")
    run = load_run(tmp_path / "run")
    assert run.config["source"] == "waza"
    got = {(r.case_id, int(r.index)): bool(r.passed) for r in run.grades.itertuples()}
    assert got == {("explain", 0): True, ("explain", 1): False, ("explain", 2): True,
                   ("preserve-record", 0): True, ("preserve-record", 1): True}
    [err] = run.errors.to_dict("records")
    assert (err["case_id"], err["index"]) == ("preserve-record", 2) and "status 'error'" in err["error"]
    sample = run.samples[(run.samples.case_id == "explain") & (run.samples["index"] == 1)].iloc[0]
    assert sample.output == "no" and sample.model == "gpt-4o"
    reasons = [c["reason"] for g in run.grades.itertuples() for c in g.checks if not c["passed"]]
    assert reasons == ["failed validations: answer"]
