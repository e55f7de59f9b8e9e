"""Seed 001 as written (issue 42, item 1): its config.json in the flat shape its reader
writes (`model`, `judge_model`, `base_url`, `judge_base_url`) beside the nested form; no
template for a chat-mode prompt unit, whose case input is then the user message; and
`expected` graded by its shape when a case gives no `checks`: the seed's own example
(`expected.tool_calls`), a tool-call list, a JSON object, a rubric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.checking.graders import grade_sample
from evalkit.foundations.errors import InputError
from evalkit.suites.reader import load_suite
from evalkit.suites.suite import render_prompt

# The seed's config.json, key for key (Step 5: models, temperature, seed, concurrency,
# cost cap, token ceilings, both price tables)
SEED_CONFIG = {
    "model": "gpt-4o-mini",
    "judge_model": "claude-3-5-haiku",
    "base_url": "http://127.0.0.1:9/v1",
    "judge_base_url": "http://127.0.0.1:8/v1",
    "temperature": 0,
    "seed": 7,
    "concurrency": 4,
    "cost_cap_usd": 0.05,
    "max_tokens_in": 2000,
    "max_tokens_out": 300,
    "price": {"in_per_mtok": 0.15, "out_per_mtok": 0.6},
    "judge_price": {"in_per_mtok": 0.8, "out_per_mtok": 4.0},
}
SEED_CASE = {
    "id": "gold-001",
    "input": {"message": "Refund order 4412"},
    "expected": {"tool_calls": [{"name": "lookup_order", "args": {"id": "4412"}}]},
    "tags": ["golden", "refund"],
}


def write_suite(root: Path, cases: list[dict], config: dict | None = None) -> Path:
    suite = root / "evals" / "orders"
    suite.mkdir(parents=True)
    (suite / "config.json").write_text(json.dumps(config or SEED_CONFIG, indent=2))
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (suite / ".gitignore").write_text("runs/\n")
    return suite


def test_the_seeds_flat_config_and_example_case_lint_clean(tmp_path):
    suite = write_suite(tmp_path, [SEED_CASE])
    r = CliRunner().invoke(main, ["lint", str(suite)])
    assert r.exit_code == 0, r.output
    assert " 0 error(s)" in r.output
    config = load_suite(suite).config
    assert (config.generator.model, config.generator.base_url) == ("gpt-4o-mini", "http://127.0.0.1:9/v1")
    assert config.judge is not None
    assert (config.judge.model, config.judge.base_url) == ("claude-3-5-haiku", "http://127.0.0.1:8/v1")
    assert (config.temperature, config.seed, config.concurrency, config.cost_cap_usd) == (0.0, 7, 4, 0.05)


def test_the_nested_form_still_reads_and_both_forms_at_once_are_refused(tmp_path):
    nested = {k: v for k, v in SEED_CONFIG.items() if k not in ("model", "judge_model", "base_url", "judge_base_url")}
    nested["generator"] = {"model": "gpt-4o-mini", "base_url": "http://127.0.0.1:9/v1"}
    suite = write_suite(tmp_path / "a", [SEED_CASE], nested)
    assert load_suite(suite).config.generator.model == "gpt-4o-mini"
    both = dict(nested, model="other-model")
    suite = write_suite(tmp_path / "b", [SEED_CASE], both)
    with pytest.raises(InputError, match="'model' and 'generator' both set the generator"):
        load_suite(suite)


def test_a_bad_flat_value_is_reported_at_its_own_line(tmp_path):
    suite = write_suite(tmp_path, [SEED_CASE], dict(SEED_CONFIG, base_url="ftp://x"))
    r = CliRunner().invoke(main, ["lint", str(suite)])
    assert r.exit_code == 2
    line = next(i for i, t in enumerate(json.dumps(SEED_CONFIG, indent=2).splitlines(), 1) if '"base_url"' in t)
    assert f"config.json:{line}:" in r.output and "base_url must start with http" in r.output


def test_without_a_template_the_case_input_is_the_user_message(tmp_path):
    cases = [dict(SEED_CASE), {"id": "s", "input": "Say hi", "expected": "hi", "tags": ["golden"]}]
    suite = load_suite(write_suite(tmp_path, cases))
    arm = suite.config.arms[0]
    by_id = {c.id: c for c in suite.cases}
    assert render_prompt(suite.config, by_id["s"], arm) == [{"role": "user", "content": "Say hi"}]
    assert render_prompt(suite.config, by_id["gold-001"], arm) == [
        {"role": "user", "content": '{"message": "Refund order 4412"}'}
    ]


def test_a_prompt_txt_is_still_the_template(tmp_path):
    suite_dir = write_suite(tmp_path, [{"id": "s", "input": "Say hi", "expected": "hi", "tags": ["golden"]}])
    (suite_dir / "prompt.txt").write_text("Answer briefly: ${input}")
    suite = load_suite(suite_dir)
    assert render_prompt(suite.config, suite.cases[0], suite.config.arms[0])[-1]["content"] == "Answer briefly: Say hi"


def grade(suite_dir: Path, case_id: str, output: str = "", calls: list | None = None) -> list[tuple[str, bool]]:
    case = next(c for c in load_suite(suite_dir).cases if c.id == case_id)
    return [(r.name, r.passed) for r in grade_sample(case, {"output": output, "tool_calls": calls or []}, suite_dir)]


def test_expected_is_graded_by_its_shape(tmp_path):
    cases = [
        SEED_CASE,
        {"id": "list", "input": "x", "tags": ["t"], "expected": [{"name": "a", "arguments": {}}, {"name": "b"}]},
        {"id": "ign", "input": "x", "tags": ["t"],
         "expected": {"tool_calls": [{"name": "search", "args": {"q": "tea", "ts": 1}}], "ignore_args": ["ts"]}},
        {"id": "obj", "input": "x", "tags": ["t"], "expected": {"status": "refunded", "amount": 12}},
        {"id": "str", "input": "x", "tags": ["t"], "expected": "Paris"},
        {"id": "judged", "input": "x", "tags": ["t"], "expected": {"rubric": "polite and correct"}},
    ]
    judged = dict(SEED_CONFIG)
    suite_dir = write_suite(tmp_path, cases, judged)
    (suite_dir / "judge").mkdir()
    (suite_dir / "judge" / "rubric-v1.md").write_text("Score 1-5.\nExample (score 5): good\nExample (score 1): bad\n")
    (suite_dir / "judge" / "prompt-v1.md").write_text("${rubric}\n${input}\n${output}\n")
    order = {"name": "lookup_order", "arguments": {"id": "4412"}}
    assert grade(suite_dir, "gold-001", calls=[order]) == [("tool_calls", True)]
    assert grade(suite_dir, "gold-001", calls=[{"name": "lookup_order", "arguments": {"id": "9"}}]) == [
        ("tool_calls", False)
    ]
    assert grade(suite_dir, "list", calls=[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]) == [
        ("tool_calls", True)
    ]
    assert grade(suite_dir, "list", calls=[{"name": "b", "arguments": {}}, {"name": "a", "arguments": {}}]) == [
        ("tool_calls", False)  # same names, another order
    ]
    assert grade(suite_dir, "ign", calls=[{"name": "search", "arguments": {"q": "tea", "ts": 99}}]) == [
        ("tool_calls", True)  # ts is the case's ignore_args
    ]
    assert grade(suite_dir, "obj", '{"amount": 12, "status": "refunded"}') == [("json_field", True)]
    assert grade(suite_dir, "obj", '{"amount": 12.5, "status": "refunded"}') == [("json_field", False)]
    assert grade(suite_dir, "obj", "refunded, 12") == [("json_field", False)]  # not JSON: a fail
    # a string, in a suite whose config is the seed's flat shape: exact after whitespace and
    # case normalisation, as the seed grades it (not evalkit's default `contains`)
    assert grade(suite_dir, "str", "  paris ") == [("exact", True)]
    assert grade(suite_dir, "str", "The capital is Paris") == [("exact", False)]
    case = next(c for c in load_suite(suite_dir).cases if c.id == "judged")
    assert case.judged and case.checks == ()


def test_a_string_expected_in_evalkits_own_config_is_still_contains(tmp_path):
    nested = {k: v for k, v in SEED_CONFIG.items() if k not in ("model", "judge_model", "base_url", "judge_base_url")}
    nested["generator"] = {"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "K"}
    suite_dir = write_suite(tmp_path, [{"id": "str", "input": "x", "tags": ["t"], "expected": "Paris"}], nested)
    assert grade(suite_dir, "str", "The capital is Paris") == [("contains", True)]
