"""The check kinds `json_field`, `file_exists` and `exit_code` (issue 32): graded on real
programs run by `evalkit run` (a command unit in its bubblewrap sandbox, per-sample
working directories) and `evalkit grade` through the CLI, and usable from an agent-evals
`evals.json`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.checking.graders import exit_code, file_exists, json_field, same_json
from evalkit.foundations._io import iter_jsonl
from evalkit.calls.serve import ScriptedServer
from evalkit.intake.lint import lint_suite, load_suite

# The program under test: answers with JSON, writes the files its case names into its
# working directory, and exits with the case's status.
PROGRAM = """\
import json, pathlib, sys
case = json.load(sys.stdin)
spec = case["input"]
for name in spec.get("write", []):
    p = pathlib.Path(name)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("made by the program")
print(json.dumps(spec.get("answer", {})))
sys.exit(spec.get("code", 0))
"""

CONFIG = {
    "mode": "chat",
    "generator": {"model": "scripted", "api_key_env": "EVALKIT_TEST_KEY"},
    "k": 1, "concurrency": 2, "cost_cap_usd": 1.0, "max_tokens_in": 1000, "max_tokens_out": 40,
    "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}, "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
    "arms": [{"name": "baseline"}],
    "unit": {"kind": "command", "argv": ["{python}", "agent.py"], "timeout_s": 30},
}


def case(cid: str, spec: dict, checks: list[dict]) -> dict:
    return {"id": cid, "input": spec, "tags": ["golden"], "checks": checks}


CASES = [
    case("ok", {"answer": {"status": "ok", "count": 3}, "write": ["out/report.md"]},
         [{"kind": "json_field", "path": "$.status", "value": "ok"},
          {"kind": "json_field", "path": "$.count", "value": 3},
          {"kind": "file_exists", "path": "out/report.md"},
          {"kind": "file_exists", "path": "scratch.txt", "expect": False},
          {"kind": "exit_code", "value": 0}]),
    case("wrong-type", {"answer": {"count": "3"}}, [{"kind": "json_field", "path": "$.count", "value": 3}]),
    case("no-file", {"answer": {}}, [{"kind": "file_exists", "path": "out/report.md"}]),
    case("exits-3", {"answer": {"error": "bad input"}, "code": 3},
         [{"kind": "exit_code", "value": 3}, {"kind": "json_field", "path": "$.error", "value": "bad input"}]),
    case("exits-4", {"answer": {}, "code": 4}, [{"kind": "exit_code", "value": 3}]),
]


def write_suite(root: Path, cases: list[dict], **unit: object) -> Path:
    root.mkdir(parents=True)
    config = {**CONFIG, "unit": {**CONFIG["unit"], **unit}}
    (root / "config.json").write_text(json.dumps(config))
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (root / "agent.py").write_text(PROGRAM)
    return root


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_command_units_json_its_files_and_its_exit_status_are_graded_through_the_cli(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_TEST_KEY", "sk-test")
    suite = write_suite(tmp_path / "suite", CASES)
    runner = CliRunner()
    lint = runner.invoke(main, ["lint", str(suite)])
    assert lint.exit_code == 0, lint.output
    with ScriptedServer({"default": {"text": "unused"}}) as srv:
        ran = runner.invoke(main, ["run", str(suite), "--runs-dir", str(tmp_path / "runs"),
                                   "--base-url", srv.base_url, "--no-progress"])
    assert ran.exit_code == 0, ran.output  # exits 3 and 4 are graded, not errored samples
    [run] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    results = {r["case_id"]: r for r in iter_jsonl(run / "results.jsonl")}
    assert results["exits-3"]["agent"]["exit_status"] == 3 and results["ok"]["agent"]["exit_status"] == 0
    # the file_exists cases keep their working directories for grading; the others do not
    kept = sorted(p.name for p in (run / "workdirs").iterdir())
    assert kept == ["no-file", "ok"]
    assert (run / results["ok"]["agent"]["workdir"] / "out" / "report.md").read_text() == "made by the program"

    graded = runner.invoke(main, ["grade", str(run)])
    assert graded.exit_code in (0, 1), graded.output
    grades = {g["case_id"]: g for g in iter_jsonl(run / "grades.jsonl")}
    assert grades["ok"]["passed"] and grades["exits-3"]["passed"]
    reasons = {cid: [c["reason"] for c in g["checks"] if not c["passed"]] for cid, g in grades.items()}
    assert reasons["wrong-type"] == ['$.count is "3" (string), expected 3 (number)']
    assert reasons["no-file"] == ["out/report.md not found in the working directory"]
    assert reasons["exits-4"] == ["exit status 4, expected 3"]


def test_a_non_zero_exit_without_an_exit_code_check_still_errors_the_sample(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_TEST_KEY", "sk-test")
    suite = write_suite(tmp_path / "suite", [case("a", {"code": 2}, [{"kind": "json_field", "path": "$", "value": {}}])],
                        isolation="none")
    with ScriptedServer({"default": {"text": "unused"}}) as srv:
        ran = CliRunner().invoke(main, ["run", str(suite), "--runs-dir", str(tmp_path / "runs"),
                                        "--base-url", srv.base_url, "--no-progress"])
    assert ran.exit_code == 1 and "INCOMPLETE" in ran.output
    [run] = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    [err] = list(iter_jsonl(run / "errors.jsonl"))
    assert "exited with status 2" in err["error"]


def test_json_field_keeps_the_type_and_names_the_path():
    doc = json.dumps({"a": {"b": [1, True, None, 2.5]}, "k y": "v", "n": 1})
    assert json_field(doc, path="$.a.b[0]", value=1).passed
    assert json_field(doc, path="$.a.b[-1]", value=2.5).passed
    assert json_field(doc, path="$.n", value=1.0).passed  # one JSON number type
    assert json_field(doc, path='$["k y"]', value="v").passed
    assert json_field(doc, path="$.a.b[2]", value=None).passed
    assert not json_field(doc, path="$.a.b[1]", value=1).passed  # true is not 1
    assert not json_field(doc, path="$.a.b[0]", value=True).passed  # 1 is not true
    assert json_field(doc, path="$.a.b[9]", value=1).reason == "$.a.b[9]: no item [9] in $.a.b (4 items)"
    assert json_field(doc, path="$.zz", value=1).reason == "$.zz: no such field"
    assert json_field("not json", path="$.a", value=1).reason.startswith("output is not JSON")
    assert same_json({"x": [1, {"y": "z"}]}, {"x": [1.0, {"y": "z"}]}) and not same_json([1], [1, 2])


def test_file_exists_and_exit_code_refuse_what_has_no_program(tmp_path):
    (tmp_path / "w").mkdir()
    (tmp_path / "outside.txt").write_text("x")
    (tmp_path / "w" / "link").symlink_to(tmp_path / "outside.txt")
    assert file_exists(path="link", workdir=tmp_path / "w").reason == "link resolves outside the working directory"
    assert "no working directory recorded" in file_exists(path="a", workdir=None).reason
    assert "no exit status recorded" in exit_code(value=0, status=None).reason


def test_lint_names_bad_options_and_warns_on_a_unit_with_no_program(tmp_path):
    suite = tmp_path / "s"
    suite.mkdir()
    (suite / "prompt.txt").write_text("${input}")
    cfg = {k: v for k, v in CONFIG.items() if k != "unit"} | {"template": "prompt.txt"}
    (suite / "config.json").write_text(json.dumps(cfg))
    bad = [case("a", "x", [{"kind": "json_field", "path": "status", "value": 1},
                           {"kind": "file_exists", "path": "../up"},
                           {"kind": "exit_code", "value": "0"}])]
    (suite / "cases.jsonl").write_text(json.dumps(bad[0]) + "\n")
    errors = {e.json_path for e in lint_suite(suite).errors}
    assert {"$.checks[0].path", "$.checks[1].path", "$.checks[2].value"} <= errors, errors
    good = case("a", "x", [{"kind": "exit_code"}])
    (suite / "cases.jsonl").write_text(json.dumps(good) + "\n")
    report = lint_suite(suite)
    assert not report.errors and any("exit_code check on a prompt unit always fails" in w.message
                                     for w in report.warnings)


def test_agent_evals_cases_carry_the_program_checks(tmp_path):
    f = tmp_path / "conv" / "evals.json"
    f.parent.mkdir()
    f.write_text(json.dumps({"cases": [
        {"id": "to-json", "set": "capability", "prompt": "convert", "expect": "{", "match": "contains",
         "checks": [{"kind": "json_field", "path": "$.pages", "value": 2},
                    {"kind": "file_exists", "path": "out.md"}, {"kind": "exit_code", "value": 0}]},
        {"id": "only-checks", "set": "regression", "prompt": "convert",
         "checks": [{"kind": "exit_code", "value": 1}]},
    ]}))
    suite = load_suite(f)
    kinds = {c.id: [k.kind for k in c.checks] for c in suite.cases}
    assert kinds == {"to-json": ["contains", "json_field", "file_exists", "exit_code"], "only-checks": ["exit_code"]}
    f.write_text(json.dumps({"cases": [{"id": "x", "set": "capability", "prompt": "p",
                                        "checks": [{"kind": "json_field", "path": "nope", "value": 1}]}]}))
    report = lint_suite(f)
    assert any(e.json_path == "$.cases[0].checks[0].path" for e in report.errors), [str(e) for e in report.errors]
