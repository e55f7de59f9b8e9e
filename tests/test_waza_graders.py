"""Waza as documented (issue 42, item 2): a spec written from Waza's GRADERS.md and
EVAL-SPEC.md imports and grades: `regex` with `config.must_match` / `must_not_match`,
`code` with `assertions` (evaluated by a Python process in evalkit's sandbox over the
output and the tool-call trace, never in evalkit's process), `llm` with its rubric (a
judged case), `tool_calls` (required / forbidden patterns, max_calls), and task files
as `- include: tasks/*.yaml`; a grader evalkit cannot honour is still refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.calls import sandbox
from evalkit.checking.graders import AgentFacts, grade_sample
from evalkit.conclusions.grading import sandboxed_assertions
from evalkit.intake.lint import lint_suite, load_suite

SPEC = """\
name: deploy-skill
description: Deploys an app.
config:
  trials_per_task: 2
graders:
  - type: regex
    name: format_checker
    config:
      must_match:
        - "deployed to https?://.+"
      must_not_match:
        - "error|failed|exception"
tasks:
  - include: tasks/*.yaml
"""
DEPLOY = """\
id: deploy
inputs:
  prompt: Deploy the app.
graders:
  - type: code
    name: basic_check
    config:
      assertions:
        - "len(output) > 10"
        - "'deployed' in output.lower()"
  - type: tool_calls
    name: tool_validator
    config:
      required:
        - pattern: "azd up"
      forbidden:
        - pattern: "rm -rf"
      max_calls: 3
  - type: llm
    name: quality_judge
    model: gpt-4o-mini
    rubric: |
      Score the deployment from 1-5: correct, complete, appropriate.
"""


def write_spec(root: Path, task: str = DEPLOY) -> Path:
    """The spec and its one task file, as Waza's docs lay them out."""
    for rel, text in (("eval.yaml", SPEC), ("tasks/deploy.yaml", task)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "eval.yaml"


def test_a_spec_in_wazas_documented_shapes_imports_and_lints(tmp_path):
    dest = tmp_path / "evals" / "w"
    f = write_spec(tmp_path / "w")
    imported = CliRunner().invoke(main, ["import", str(f), "--to", str(dest)])
    assert imported.exit_code == 0, imported.output
    (case,) = load_suite(dest).cases
    kinds = [(c.kind, dict(c.options)) for c in case.checks]
    assert kinds[:2] == [("regex", {"pattern": "deployed to https?://.+"}),
                         ("regex", {"pattern": "\\A(?!.*(?:error|failed|exception))", "flags": "s"})]
    assert kinds[2] == ("assertions", {"assertions": ["len(output) > 10", "'deployed' in output.lower()"]})
    assert kinds[3] == ("assertions", {"assertions": [
        "re.search('azd up', json.dumps(tool_calls)) is not None",
        "re.search('rm -rf', json.dumps(tool_calls)) is None", "len(tool_calls) <= 3"]})
    assert case.judged and "Score the deployment" in (case.rubric or "") and case.judge_threshold == 4
    assert (dest / "judge" / "rubric-v1.md").is_file()
    assert lint_suite(f).ok


def grade(suite_dir: Path, output: str, calls: list, facts: AgentFacts) -> dict[str, bool]:
    (case,) = load_suite(suite_dir).cases
    results = grade_sample(case, {"output": output, "tool_calls": calls}, suite_dir, facts)
    return {f"{r.name}{i}": r.passed for i, r in enumerate(results)}


@pytest.mark.skipif(sandbox.probe() is not None, reason="bubblewrap cannot run on this machine")
def test_assertions_are_evaluated_in_the_sandbox_over_output_and_trace(tmp_path):
    f = write_spec(tmp_path / "w")
    run = tmp_path / "run"
    run.mkdir()
    facts = AgentFacts(evaluate=lambda exprs, ctx: sandboxed_assertions(run, f.parent, exprs, ctx))
    good = "App deployed to https://app.example.net"
    up = [{"name": "shell", "arguments": {"cmd": "azd up"}}]
    assert grade(f, good, up, facts) == {"regex0": True, "regex1": True, "assertions2": True, "assertions3": True}
    bad = grade(f, "deployed", [{"name": "shell", "arguments": {"cmd": "rm -rf /"}}], facts)
    assert bad == {"regex0": False, "regex1": True, "assertions2": False, "assertions3": False}


def test_an_assertion_cannot_reach_the_host(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("KEY")
    exprs = [f"open({str(secret)!r}).read() == 'KEY'", "__import__('os').getcwd() != ''", "len(output) == 2"]
    answers = sandboxed_assertions(tmp_path, tmp_path, exprs, {"output": "ok", "tool_calls": [], "errors": []})
    assert answers[2] is None  # evaluated
    assert answers[0] and answers[1]  # no open(), no import: fails, never True


def test_without_the_sandbox_an_assertion_is_never_a_pass(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: "no bubblewrap")
    assert sandboxed_assertions(tmp_path, tmp_path, ["True"], {"output": ""}) == [
        "the sandbox cannot run here (no bubblewrap)"]
    f = write_spec(tmp_path / "w")
    (case,) = load_suite(f).cases
    results = grade_sample(case, {"output": "deployed to http://x", "tool_calls": []}, f.parent, AgentFacts())
    assert [r.passed for r in results if r.name == "assertions"] == [False, False]


def test_a_bad_assertion_or_an_unmapped_option_is_refused_by_name(tmp_path):
    f = write_spec(tmp_path / "a", DEPLOY.replace("len(output) > 10", "len(output) >"))
    out = CliRunner().invoke(main, ["lint", str(f)])
    assert out.exit_code == 2 and "not a Python expression" in out.output
    f = write_spec(tmp_path / "b", DEPLOY.replace("max_calls: 3", "max_calls: 3\n      ordered: true"))
    out = CliRunner().invoke(main, ["lint", str(f)])
    assert out.exit_code == 2 and "tool_calls option 'ordered' has no evalkit equivalent" in out.output
