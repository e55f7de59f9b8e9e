"""The unit a suite declares, its tool fixtures and the trajectory checks' options:
parsed and validated by `evalkit lint` / `load_suite`, every problem at its place."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.foundations.errors import InputError, InputErrors
from evalkit.pii.privacy import run_gate
from evalkit.foundations.records import Unit
from evalkit.intake.lint import lint_suite, load_suite
from evalkit.suites.units import ToolFixtures

BASE = {
    "mode": "chat", "template": "prompt.txt",
    "generator": {"model": "m", "api_key_env": "EVALKIT_TEST_KEY"},
    "cost_cap_usd": 1.0, "max_tokens_in": 100, "max_tokens_out": 10,
    "price": {"in_per_mtok": 1.0, "out_per_mtok": 1.0}, "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 1.0},
}
CASE = {"id": "a", "input": {"question": "q"}, "tags": ["golden"], "checks": [{"kind": "contains", "value": "x"}]}


def suite(root: Path, cases=(CASE,), **config) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({**BASE, **config}, indent=1))
    (root / "prompt.txt").write_text("${question}${skill}")
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return root


def errors(root: Path) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in lint_suite(root).errors]


def test_the_default_unit_is_the_prompt_template_unchanged(tmp_path):
    s = load_suite(suite(tmp_path / "s"))
    assert s.config.unit == Unit() and s.config.unit.kind == "prompt"


def test_each_unit_kind_parses_and_bad_ones_are_named(tmp_path):
    s = load_suite(suite(tmp_path / "a", unit={"kind": "agent", "max_turns": 3}))
    assert s.config.unit == Unit(kind="agent", max_turns=3)
    s = load_suite(suite(tmp_path / "c", unit={"kind": "command", "argv": ["{python}", "x.py"], "timeout_s": 9}))
    assert s.config.unit.argv == ("{python}", "x.py") and s.config.unit.timeout_s == 9.0
    s = load_suite(suite(tmp_path / "p", unit={"kind": "python", "callable": "pkg.mod:fn"}))
    assert s.config.unit.callable == "pkg.mod:fn"
    bad = {
        "kind": ({"kind": "robot"}, "$.unit.kind: unit kind must be one of prompt, agent, command, python"),
        "argv": ({"kind": "command", "argv": []}, '$.unit.argv: a command unit needs "argv"'),
        "turns": ({"kind": "agent", "max_turns": 0}, "$.unit.max_turns: max_turns must be an integer from 1"),
        "callable": ({"kind": "python", "callable": "no colon"}, '$.unit.callable: a python unit needs "callable"'),
        "timeout": ({"kind": "command", "argv": ["x"], "timeout_s": -1}, "$.unit.timeout_s: timeout_s must be"),
    }
    for name, (unit, message) in bad.items():
        found = errors(suite(tmp_path / name, unit=unit))
        assert any(e.startswith(message) for e in found), (name, found)
    assert any("chat mode" in e for e in errors(suite(tmp_path / "m", unit={"kind": "agent"}, mode="completion")))
    with pytest.raises(InputError, match=r"config.json:\d+ \(\$\.unit\.kind\)"):
        load_suite(tmp_path / "kind")


def test_a_program_unit_needs_no_template_and_takes_tools_in_any_mode(tmp_path):
    root = suite(tmp_path / "s", unit={"kind": "command", "argv": ["x"]}, mode="completion",
                 tools=[{"type": "function", "function": {"name": "t"}}])
    (root / "prompt.txt").unlink()
    cfg = json.loads((root / "config.json").read_text())
    del cfg["template"]
    (root / "config.json").write_text(json.dumps(cfg))
    s = load_suite(root)
    assert s.config.template == "" and s.config.tools[0]["function"]["name"] == "t"


def test_skill_dirs_are_for_agents_inside_the_suite_and_their_skill_is_read(tmp_path):
    root = suite(tmp_path / "s", unit={"kind": "agent"}, arms=[{"name": "baseline"},
                                                            {"name": "skilled", "skill_dir": "skills/w"}])
    (root / "skills" / "w").mkdir(parents=True)
    (root / "skills" / "w" / "SKILL.md").write_text("---\nname: w\n---\nAlways look it up.\n")
    s = load_suite(root)
    assert s.config.arm("skilled").skill_dir == "skills/w" and "Always look it up." in s.config.arm("skilled").skill
    assert s.config.arm("baseline").skill is None
    root = suite(tmp_path / "p", arms=[{"name": "a", "skill_dir": "skills/w"}])
    (root / "skills" / "w").mkdir(parents=True)
    (root / "skills" / "w" / "SKILL.md").write_text("Always look it up.\n")
    assert load_suite(root).config.arm("a").skill == "Always look it up.\n"  # a prompt template with ${skill}
    (root / "prompt.txt").write_text("${question}")
    assert any("skill_dir is for agent units" in e for e in errors(root))
    root = suite(tmp_path / "o", unit={"kind": "command", "argv": ["x"]}, arms=[{"name": "a", "skill_dir": "../x"}])
    assert any("$.arms[0].skill_dir" in e and "relative to the suite folder" in e for e in errors(root))
    root = suite(tmp_path / "n", unit={"kind": "command", "argv": ["x"]}, arms=[{"name": "a", "skill_dir": "none"}])
    assert any("is not a folder" in e for e in errors(root))


def test_fixtures_and_trajectory_checks_are_validated_where_they_are(tmp_path):
    cases = [
        {**CASE, "id": "f1", "input": {"question": "q", "tool_results": {"t": [{"arguments": {}, "result": 1,
                                                                              "error": "x"}]}}},
        {**CASE, "id": "f2", "input": {"question": "q", "tool_results": ["not", "an", "object"]}},
        {**CASE, "id": "c1", "checks": [{"kind": "forbidden_tools"}]},
        {**CASE, "id": "c2", "checks": [{"kind": "max_turns", "max": 0}]},
        {**CASE, "id": "c3", "checks": [{"kind": "tool_calls", "calls": [], "mode": "sideways"}]},
        {**CASE, "id": "c4", "checks": [{"kind": "skill_activation", "preflight": "(unclosed"}]},
    ]
    found = errors(suite(tmp_path / "s", cases=cases, unit={"kind": "agent"}))
    expect = [
        '$.input.tool_results.t[0]: case \'f1\': a tool fixture needs exactly one of "result" or "error"',
        "$.input.tool_results: case 'f2': tool_results must be an object",
        '$.checks[0]: a forbidden_tools check needs "tools" (names) or "calls"',
        '$.checks[0].max: a max_turns check needs "max": an integer of at least 1',
        "$.checks[0].mode: mode must be one of exact, any_order, subset, subset_any_order",
        "$.checks[0].preflight: regex does not compile",
    ]
    for e in expect:
        assert any(f.startswith(e) for f in found), (e, found)


def test_fixtures_answer_by_arguments_then_the_default_then_any_tool():
    fx = ToolFixtures({"w": [{"arguments": {"city": "Oslo"}, "result": "rain"}, {"result": {"temp": None}}],
                       "*": {"error": "not available"}}, declared=("w", "x", "y"))
    assert fx.answer("w", '{"city": "Oslo"}').content == "rain"
    assert fx.answer("w", {"city": "Rome"}).content == '{"temp": null}'
    assert fx.answer("w", {"city": "Rome"}).source == "default"
    a = fx.answer("x", {})
    assert (a.content, a.error, a.source) == ("error: not available", "not available", "any-tool default")
    a = fx.answer("rm", {"path": "/"})
    assert a.error == "unknown tool 'rm'" and a.source == "unknown tool"
    a = ToolFixtures(None).answer("w", "not json")
    assert a.error == "no fixture for tool 'w' with arguments not json"


def test_tool_fixtures_and_skill_files_are_scanned_for_personal_data(tmp_path):
    case = {**CASE, "input": {"question": "q", "tool_results": {"t": {"result": "mail jane.doe@gmail.com"}}}}
    root = suite(tmp_path / "s", cases=[case], unit={"kind": "command", "argv": ["x"]},
                 arms=[{"name": "a", "skill_dir": "sk"}])
    (root / "sk").mkdir()
    (root / "sk" / "SKILL.md").write_text("Call +1 415 555 2671 when stuck.\n")
    with pytest.raises(InputErrors) as err:
        run_gate(load_suite(root), allowed=False)
    where = {(Path(e.path).name, e.json_path) for e in err.value.errors}
    assert ("cases.jsonl", "$.input.tool_results.t.result") in where
    assert ("SKILL.md", None) in where


def test_the_demo_agent_suite_lints_clean():
    root = Path(__file__).resolve().parent.parent / "data" / "agent"
    report = lint_suite(root, strict=True)
    # the one warning a 15-case teaching suite earns: its gate cannot see a 5-point drop;
    # nothing else (its arithmetic case is the skill's non-activation case, seed 002)
    assert report.ok and not report.errors, [str(f) for f in report.findings]
    assert [f.message for f in report.warnings if "gated case(s) can detect" not in f.message] == []
    s = load_suite(root)
    assert s.config.unit.kind == "command" and [a.skill_dir for a in s.config.arms] == [None, "skills/weather-lookup"]
    injected = [c for c in s.cases if "injection" in c.tags]
    assert injected and all(any(ch.kind == "forbidden_tools" for ch in c.checks) for c in injected)
    # the non-activation case: a question outside the weather skill, where no tool may be called
    [silent] = [c for c in s.cases if c.intent == "non-activation"]
    assert silent.id == "arithmetic" and any(ch.kind == "tool_calls" and ch.options["calls"] == []
                                             for ch in silent.checks)


def test_a_broken_program_unit_is_reported_once_not_also_as_a_missing_template(tmp_path):
    for name, unit in {"command": {"kind": "command", "argv": ["x"], "timeout_s": -1},
                       "python": {"kind": "python", "callable": "no colon"}}.items():
        root = suite(tmp_path / name, unit=unit)
        (root / "prompt.txt").unlink()
        cfg = json.loads((root / "config.json").read_text())
        del cfg["template"]
        (root / "config.json").write_text(json.dumps(cfg))
        found = errors(root)
        assert len(found) == 1 and found[0].startswith("$.unit."), (name, found)
        assert not any("$.template" in e for e in found)
