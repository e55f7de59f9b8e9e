"""`evalkit init`, `evalkit lint`, `evalkit import` through click's CliRunner: one test per
bad input of issue 2 item 5, each asserting exit 2 and a message that names the place."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.suites.suite import MAX_CASES_BYTES, MAX_CONFIG_BYTES

REPO = Path(__file__).resolve().parents[1]


def _load_sibling(name: str):
    """The fixture builders of test_suite.py, loaded by path (tests/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_evalkit_{name}", Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_ts = _load_sibling("test_suite")
BASE_CONFIG, CASES, write_suite = _ts.BASE_CONFIG, _ts.CASES, _ts.write_suite


def lint(*args: str | Path):
    return CliRunner().invoke(main, ["lint", *map(str, args)])


def assert_bad(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    for f in fragments:
        assert f in result.output, f"{f!r} not in:\n{result.output}"


def cases_text(cases: list) -> str:
    return "".join(json.dumps(c) + "\n" for c in cases)


def test_help_for_every_command():
    for cmd in ("init", "lint", "import"):
        r = CliRunner().invoke(main, [cmd, "--help"])
        assert r.exit_code == 0 and "Usage:" in r.output


def test_clean_suite_exits_0(tmp_path):
    r = lint(write_suite(tmp_path / "u"))
    assert r.exit_code == 0 and "0 error(s)" in r.output


def test_malformed_json_line(tmp_path):
    root = write_suite(tmp_path / "u")
    text = (root / "cases.jsonl").read_text().splitlines()
    text[1] = text[1][:-1]  # drop the closing brace of line 2
    (root / "cases.jsonl").write_text("\n".join(text) + "\n")
    assert_bad(lint(root), f"{root / 'cases.jsonl'}:2: error: malformed JSON")


def test_empty_cases_file(tmp_path):
    root = write_suite(tmp_path / "u")
    (root / "cases.jsonl").write_text("\n  \n")
    assert_bad(lint(root), f"{root / 'cases.jsonl'}: error: file is empty")


def test_empty_config_file(tmp_path):
    root = write_suite(tmp_path / "u")
    (root / "config.json").write_bytes(b"")
    assert_bad(lint(root), f"{root / 'config.json'}: error: file is empty")


def test_utf8_bom_is_accepted(tmp_path):
    root = write_suite(tmp_path / "u")
    for name in ("cases.jsonl", "config.json"):
        p = root / name
        p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    r = lint(root)
    assert r.exit_code == 0, r.output


def test_invalid_utf8_is_refused(tmp_path):
    root = write_suite(tmp_path / "u")
    lines = (root / "cases.jsonl").read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"Italy", b"It\xe4ly")  # latin-1, not UTF-8
    (root / "cases.jsonl").write_bytes(b"\n".join(lines))
    assert_bad(lint(root), f"{root / 'cases.jsonl'}:3: error: invalid UTF-8")


def test_duplicate_ids_report_every_line(tmp_path):
    cases = [CASES[0], CASES[1], dict(CASES[2], id="cap-fr"), dict(CASES[4], id="cap-fr")]
    root = write_suite(tmp_path / "u", cases=cases)
    r = lint(root)
    p = root / "cases.jsonl"
    assert_bad(r, f"{p}:1: error: $.id: duplicate case id 'cap-fr'", f"{p}:3: error: $.id: duplicate",
               f"{p}:4: error: $.id: duplicate", "line 1, line 3, line 4")


@pytest.mark.parametrize("bad_id", ["..", "../escape", "a/b", "a\\b", "a\x00b", "tab\there", ".hidden", "",
                                    "x" * 129])
def test_unsafe_ids(tmp_path, bad_id):
    root = write_suite(tmp_path / "u", cases=[dict(CASES[0], id=bad_id)] + CASES[1:])
    assert_bad(lint(root), f"{root / 'cases.jsonl'}:1: error: $.id: unsafe case id")


def test_case_with_neither_check_nor_rubric(tmp_path):
    # no `expected` and no `checks` (an object `expected` is graded by its shape now: seed 001)
    cases = CASES + [{"id": "no-check", "input": "x", "tags": ["golden"]}]
    root = write_suite(tmp_path / "u", cases=cases)
    assert_bad(lint(root), f"{root / 'cases.jsonl'}:6: error:", "case 'no-check'", "neither a check nor a rubric")


def test_unknown_check_kind_in_native_case(tmp_path):
    cases = [dict(CASES[0], checks=[{"kind": "fuzzy", "value": "Paris"}])] + CASES[1:]
    root = write_suite(tmp_path / "u", cases=cases)
    assert_bad(lint(root), f"{root / 'cases.jsonl'}:1: error: $.checks[0].kind: case 'cap-fr': unknown check kind")


def test_unknown_match_type_in_agent_evals_file(tmp_path):
    f = tmp_path / "skill" / "evals.json"
    f.parent.mkdir()
    f.write_text('{\n  "cases": [\n    {"id": "a", "prompt": "p", "expect": "x"},\n'
                 '    {"id": "b", "prompt": "p", "expect": "x", "match": "fuzzy"}\n  ]\n}\n')
    assert_bad(lint(f), f"{f}:4: error: $.cases[1].match: unknown match type \"fuzzy\"")


def test_regex_that_does_not_compile(tmp_path):
    cases = [dict(CASES[0], checks=[{"kind": "regex", "pattern": "Par(is"}])] + CASES[1:]
    root = write_suite(tmp_path / "u", cases=cases)
    assert_bad(lint(root), f"{root / 'cases.jsonl'}:1: error: $.checks[0].pattern: regex does not compile")


def test_regex_that_does_not_compile_in_agent_evals_file(tmp_path):
    f = tmp_path / "evals.json"
    f.write_text(json.dumps({"cases": [{"id": "a", "prompt": "p", "expect": "[a-", "match": "regex"}]}, indent=1))
    assert_bad(lint(f), f"{f}:", "$.cases[0].expect: regex does not compile")


@pytest.mark.parametrize("key", ["cost_cap_usd", "max_tokens_in", "max_tokens_out", "price", "judge_price",
                                 "generator"])
def test_missing_required_config_key(tmp_path, key):
    cfg = {k: v for k, v in BASE_CONFIG.items() if k != key}
    root = write_suite(tmp_path / "u", cfg)
    assert_bad(lint(root), f"{root / 'config.json'}", f"$.{key}: missing required key '{key}'")


@pytest.mark.parametrize("key,value", [("cost_cap_usd", 0), ("cost_cap_usd", -1.5), ("max_tokens_in", 0),
                                       ("max_tokens_out", -5)])
def test_zero_or_negative_caps_and_ceilings(tmp_path, key, value):
    root = write_suite(tmp_path / "u", dict(BASE_CONFIG, **{key: value}))
    line = next(i for i, ln in enumerate((root / "config.json").read_text().splitlines(), 1) if f'"{key}"' in ln)
    assert_bad(lint(root), f"{root / 'config.json'}:{line}: error: $.{key}: {key} must be greater than 0")


def test_negative_price_refused(tmp_path):
    root = write_suite(tmp_path / "u", dict(BASE_CONFIG, price={"in_per_mtok": -1, "out_per_mtok": 0.4}))
    assert_bad(lint(root), "$.price.in_per_mtok: in_per_mtok must be at least 0")


def test_judge_model_identical_to_generator(tmp_path):
    cfg = dict(BASE_CONFIG, judge=dict(BASE_CONFIG["generator"]))
    root = write_suite(tmp_path / "u", cfg)
    assert_bad(lint(root), f"{root / 'config.json'}:", "$.judge.model", "same as the generator")
    root2 = write_suite(tmp_path / "v", dict(cfg, allow_same_judge_model=True))
    r = lint(root2)
    assert r.exit_code == 0 and "warning: $.allow_same_judge_model" in r.output


def test_unknown_keys_fail_with_did_you_mean_and_warn_under_lenient_keys(tmp_path):
    root = write_suite(tmp_path / "u", dict(BASE_CONFIG, cost_cap=1.0))
    assert_bad(lint(root), "error: $.cost_cap: unknown key 'cost_cap' in config; did you mean 'cost_cap_usd'?")
    r = lint(root, "--lenient-keys")
    assert r.exit_code == 0
    assert f"{root / 'config.json'}:" in r.output and "warning: $.cost_cap: unknown key 'cost_cap'" in r.output
    assert_bad(lint(root, "--lenient-keys", "--strict"), "error: $.cost_cap: unknown key 'cost_cap'")


def test_cases_file_over_size_limit(tmp_path):
    root = write_suite(tmp_path / "u")
    with open(root / "cases.jsonl", "r+b") as f:
        f.truncate(MAX_CASES_BYTES + 1)  # sparse: the size check must refuse it before reading
    assert_bad(lint(root), f"{root / 'cases.jsonl'}: error: file is {MAX_CASES_BYTES + 1} bytes, over")


def test_config_file_over_size_limit(tmp_path):
    root = write_suite(tmp_path / "u")
    with open(root / "config.json", "r+b") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)
    assert_bad(lint(root), f"{root / 'config.json'}: error: file is", "over")


def test_not_a_suite(tmp_path):
    assert_bad(lint(tmp_path), "not a suite")
    assert_bad(lint(tmp_path / "missing"), "no such file or folder")


def test_init_then_lint(tmp_path):
    dest = tmp_path / "evals" / "unit"
    r = CliRunner().invoke(main, ["init", str(dest)])
    assert r.exit_code == 0, r.output
    r = lint(dest)
    assert r.exit_code == 0 and "0 error(s)" in r.output and "golden" in r.output
    r = CliRunner().invoke(main, ["init", str(dest)])
    assert r.exit_code == 2 and "refusing to overwrite" in r.output


def test_example_suite_lints_with_no_errors():
    r = lint(REPO / "data" / "factual")
    assert r.exit_code == 0 and "0 error(s)" in r.output, r.output


def test_import_cli_and_bad_import_writes_nothing(tmp_path):
    f = tmp_path / "evals.json"
    f.write_text(json.dumps({"cases": [{"id": "a", "prompt": "2+2?", "expect": "4"}]}))
    dest = tmp_path / "evals" / "imported"
    r = CliRunner().invoke(main, ["import", str(f), "--to", str(dest)])
    assert r.exit_code == 0 and "1 cases" in r.output, r.output
    # the importer's own warnings reach the user, with the place in the foreign file
    assert f"{f}:1: warning: $.cases[0].set: no set: imported as capability" in r.output
    assert lint(dest).exit_code == 0
    bad = tmp_path / "bad" / "evals.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"cases": [{"id": "../x", "prompt": "p", "expect": "4"}]}))
    dest2 = tmp_path / "evals" / "bad"
    r = CliRunner().invoke(main, ["import", str(bad), "--to", str(dest2)])
    assert r.exit_code == 2 and "$.cases[0].id" in r.output
    assert not dest2.exists()
    assert not [p for p in dest2.parent.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_lint_exits_2_on_a_fifo_human_sample_and_a_config_no_call_fits(tmp_path):
    import os

    from conftest import fifo_watchdog

    cfg = dict(BASE_CONFIG, max_tokens_out=10**9, k=10**6)
    root = write_suite(tmp_path / "u", cfg)
    fifo = root / "judge" / "human-sample.jsonl"
    os.mkfifo(fifo)
    with fifo_watchdog(fifo) as released:
        r = lint(root)
    assert released == []
    assert_bad(r, f"{fifo}: error: not a regular file: it is a FIFO (named pipe)",
               "error: $.k: k must be at most 1000, got 1000000",
               "error: $.max_tokens_out: max_tokens_out must be at most 10000000, got 1000000000",
               "error: $.max_tokens_out: one generator call costs up to $400",
               "0 calls fit under the cap")
    assert f"{root / 'config.json'}:" in r.output


def test_run_refuses_a_config_typo_before_any_call(tmp_path):
    root = write_suite(tmp_path / "u", dict(BASE_CONFIG, temprature=0.2))
    r = CliRunner().invoke(main, ["run", str(root), "--base-url", "http://127.0.0.1:9/v1", "--no-progress"])
    assert r.exit_code == 2 and "unknown key 'temprature' in config; did you mean 'temperature'?" in r.output
    assert not (root / "runs").exists()
