"""The suite format's validators piece by piece (evalkit.suites.suite_config, suite_arms,
suite_cases, formats/vally, formats/agent_evals): each piece given a bad value reports the
exact message at its JSON path, and each rule table covers what it stands for. The whole
suites these pieces make up are tested in test_suite, test_arms and test_importers."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.foundations.checks import CHECK_KINDS
from evalkit.foundations.findings import Findings
from evalkit.foundations.records import Endpoint, Price, Unit
from evalkit.suites.formats.agent_evals import _expect_check, _import_set
from evalkit.suites.formats.vally import (
    VALLY_GRADER_KINDS,
    VALLY_GRADERS,
    _add_vally_tags,
    _unique_id,
    _vally_grader_check,
    _vally_run_settings,
)
from evalkit.suites.suite_arms import (
    _arm_prices,
    _arm_sampling,
    _arm_templates,
    _arm_unit,
    _SuiteSide,
)
from evalkit.suites.suite_cases import (
    _OPTION_RULES,
    _case_checks,
    _case_rubric,
    _case_tags,
    _check_options,
)
from evalkit.suites.suite_config import (
    _CONFIG_NUMBERS,
    _as_config_numbers,
    _choice,
    _config_ci_cap,
    _config_gate,
    _config_stop,
    _config_system,
    _config_templates,
    _config_tools,
)
from evalkit.suites.suite_source import SuiteSource, _ArmReader, _Reader

PATH = "/s/config.json"
GEN = Endpoint(model="gen-model", base_url=None, api_key_env="K")


def reader() -> tuple[_Reader, Findings]:
    fx = Findings(strict=False)
    return _Reader(fx, PATH, lambda jp: None), fx


def errors(fx: Findings) -> list[tuple[str | None, str]]:
    return [(f.json_path, f.message) for f in fx.errors]


def warnings(fx: Findings) -> list[tuple[str | None, str]]:
    return [(f.json_path, f.message) for f in fx.warnings]


def source(files: dict[str, str] | None = None) -> SuiteSource:
    return SuiteSource(Path("/s"), "s", {}, PATH, {}, [], files=dict(files or {}), is_native=False)


def side(mode: str = "chat", *, judge: Endpoint | None = None, ci: bool = False) -> _SuiteSide:
    return _SuiteSide(mode, GEN, judge, False, set(), ci)


# --- config.json -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "options", "default", "value", "message"),
    [
        ("mode", ("completion", "chat"), "chat", "agent", 'mode must be "completion" or "chat", got "agent"'),
        ("verdict_judge", ("direct", "pairwise"), "direct", 3, 'verdict_judge must be "direct" or "pairwise", got 3'),
        ("judged_estimate", ("judge", "corrected"), "judge", None,
         'judged_estimate must be "judge" or "corrected", got null'),
    ],
)
def test_a_two_word_setting_reports_any_other_value_and_falls_back_to_its_default(key, options, default, value,
                                                                                   message):
    r, fx = reader()
    assert _choice(r, {key: value}, key, options, default) == default
    assert errors(fx) == [(f"$.{key}", message)]
    r, fx = reader()
    assert _choice(r, {}, key, options, default) == default and _choice(r, {key: options[1]}, key, options,
                                                                        default) == options[1]
    assert errors(fx) == []


@pytest.mark.parametrize(("key", "bounds", "as_type"), _CONFIG_NUMBERS, ids=[k for k, _, _ in _CONFIG_NUMBERS])
def test_each_number_of_the_config_table_is_read_with_its_bounds(key, bounds, as_type):
    r, fx = reader()
    assert r.number({key: "x"}, key, "$", **bounds) == bounds.get("default")
    kind = "an integer" if bounds.get("integer") else "a number"
    assert errors(fx) == [(f"$.{key}", f'{key} must be {kind}, got "x"')]
    if "maximum" in bounds:
        r, fx = reader()
        r.number({key: bounds["maximum"] * 2 + 1}, key, "$", **bounds)
        assert errors(fx) == [(f"$.{key}", f"{key} must be at most {bounds['maximum']}, got "
                                            f"{bounds['maximum'] * 2 + 1}")]


def test_the_config_numbers_are_typed_as_the_config_holds_them_and_none_stays_none():
    numbers = {key: None for key, _, _ in _CONFIG_NUMBERS} | {"k": 3, "cost_cap_usd": 2, "timeout_s": 5}
    typed = _as_config_numbers(numbers)
    assert typed["k"] == 3 and type(typed["k"]) is int
    assert type(typed["cost_cap_usd"]) is float and type(typed["timeout_s"]) is float
    assert typed["temperature"] is None and typed["seed"] is None
    assert list(typed) == [key for key, _, _ in _CONFIG_NUMBERS]


def test_a_gate_that_is_not_an_object_is_reported_and_the_default_thresholds_kept():
    r, fx = reader()
    gate = _config_gate(r, {"gate": [1]})
    assert errors(fx) == [("$.gate", "gate must be an object")]
    assert gate == _config_gate(reader()[0], {})


def test_a_ci_cap_at_or_above_the_local_cap_is_refused():
    r, fx = reader()
    assert _config_ci_cap(r, {"ci": {"cost_cap_usd": 2}}, 2) is None
    assert errors(fx) == [("$.ci.cost_cap_usd", "the CI cost cap (2) must be lower than the local cost_cap_usd (2)")]
    r, fx = reader()
    assert _config_ci_cap(r, {"ci": 5}, 2) is None
    assert errors(fx) == [("$.ci", 'ci must be an object {"cost_cap_usd": ...}')]


@pytest.mark.parametrize(
    ("stop", "expected", "message"),
    [
        ("\n", ("\n",), None),
        (["a", "b"], ("a", "b"), None),
        (["a"] * 5, (), "stop takes at most 4 sequences (OpenAI API limit)"),
        ([""], (), "stop must be a non-empty string or a list of them"),
        (3, (), "stop must be a non-empty string or a list of them"),
    ],
)
def test_stop_is_a_sequence_or_up_to_four(stop, expected, message):
    r, fx = reader()
    assert _config_stop(r, {"stop": stop}) == expected
    assert errors(fx) == ([("$.stop", message)] if message else [])


def test_tools_need_chat_mode_unless_a_program_answers_them():
    tools = [{"type": "function"}]
    r, fx = reader()
    assert _config_tools(r, {"tools": tools}, "completion") == tuple(tools)  # kept, with the error
    assert errors(fx) == [("$.tools", "tools need chat mode (the completions endpoint has no tools)")]
    r, fx = reader()
    _config_tools(r, {"tools": tools, "unit": {"kind": "command"}}, "completion")
    assert errors(fx) == []
    assert _config_tools(r, {"tools": [1]}, "chat") == ()
    assert errors(fx) == [("$.tools", "tools must be a list of tool objects")]


def test_a_system_template_needs_chat_mode_and_a_system_txt_is_read_in_chat_mode_only():
    src = source({"system.txt": "S", "s2.txt": "T"})
    r, fx = reader()
    assert _config_system(src, r, {"system": "s2.txt"}, "completion") is None
    assert errors(fx) == [("$.system", "a system template needs chat mode")]
    assert _config_system(src, r, {}, "chat") == "S" and _config_system(src, r, {}, "completion") is None
    assert _config_system(src, r, {"system": None}, "chat") is None  # null: no system.txt either


def test_a_program_unit_renders_no_template_and_names_the_ignored_one():
    r, fx = reader()
    got = _config_templates(source(), r, {"template": "p.txt"}, "chat", Unit(kind="command", argv=("x",)))
    assert got == ("", None, set())
    assert warnings(fx) == [("$.template", "a command unit uses no template (ignored)")]
    r, fx = reader()
    got = _config_templates(source({"prompt.txt": "${input} ${guidance}"}), r, {}, "completion", Unit())
    assert got == ("${input} ${guidance}", None, {"input", "guidance"})
    r, fx = reader()
    _config_templates(source({"prompt.txt": "  "}), r, {}, "completion", Unit())
    assert errors(fx) == [("$.template", "template 'prompt.txt' is empty")]


# --- arms --------------------------------------------------------------------------------
def arm_reader(name: str = "new") -> tuple[_ArmReader, Findings]:
    r, fx = reader()
    return _ArmReader(r, name), fx


def test_an_arm_on_another_model_needs_its_own_price_and_loses_the_suites_batch_price():
    ar, fx = arm_reader()
    other = Endpoint(model="m-new", base_url=None, api_key_env="K")
    out, ok = _arm_prices(ar, {"price": {"in_per_mtok": 1, "out_per_mtok": 1}}, {}, "$.arms[1]", other, side())
    assert not ok and out == {"batch_price": None}
    assert errors(fx) == [
        ("$.arms[1].price",
         "arm 'new': missing key 'price' for model 'm-new': the suite's price is for 'gen-model'; an arm that runs "
         'another model sets its own price {"in_per_mtok": ..., "out_per_mtok": ...}')
    ]
    ar, fx = arm_reader()
    out, ok = _arm_prices(ar, {}, {"price": {"in_per_mtok": 1, "out_per_mtok": 2}}, "$.arms[1]", other, side())
    assert ok and out == {"price": Price(1, 2), "batch_price": None} and errors(fx) == []
    out, ok = _arm_prices(ar, {}, {}, "$.arms[1]", GEN, side())  # the suite's model: nothing of its own
    assert ok and out == {}


def test_an_arms_sampling_parameters_are_bounded_and_typed():
    ar, fx = arm_reader()
    out, ok = _arm_sampling(ar, {"temperature": 3, "seed": 4, "top_p": 1}, "$.arms[0]")
    assert not ok and out == {"temperature": None, "top_p": 1.0, "seed": 4}
    assert type(out["top_p"]) is float and type(out["seed"]) is int
    assert errors(fx) == [("$.arms[0].temperature", "arm 'new': temperature must be at most 2, got 3")]


def test_an_arms_templates_need_a_prompt_unit_and_chat_mode_for_the_system_one():
    src = source({"p.txt": "${input}", "s.txt": "sys"})
    ar, fx = arm_reader()
    out, ok = _arm_templates(src, ar, {"prompt": "p.txt", "system": "s.txt"}, "$.arms[0]", Unit(), side("completion"))
    assert not ok and out == {"template": "${input}", "template_file": "p.txt"}
    assert errors(fx) == [("$.arms[0].system", "arm 'new': a system template needs chat mode")]
    ar, fx = arm_reader()
    out, ok = _arm_templates(src, ar, {"prompt": "p.txt"}, "$.arms[0]", Unit(kind="python", callable="m:f"), side())
    assert not ok and out == {}
    assert errors(fx) == [("$.arms[0].prompt", "arm 'new': a python unit uses no template")]


def test_an_arm_cannot_change_its_units_kind():
    ar, fx = arm_reader()
    cfg = {"unit": {"kind": "command", "argv": ["a"]}}
    assert _arm_unit(ar, cfg, {"kind": "python"}, "$.arms[0]", side()) is None
    assert errors(fx) == [
        ("$.arms[0].unit.kind",
         "arm 'new': an arm cannot change the unit's kind ('command' in the suite): make it a suite of its own")
    ]
    unit = _arm_unit(ar, cfg, {"argv": ["b", "c"]}, "$.arms[0]", side())
    assert unit is not None and unit.kind == "command" and unit.argv == ("b", "c")


# --- cases and their checks ----------------------------------------------------------------
def test_every_check_kind_has_an_options_rule():
    assert set(_OPTION_RULES) == set(CHECK_KINDS)


SCORERS = {"scorers/s.py": "def score(x):\n    return 1\n", "scorers/broken.py": "def (:\n"}


@pytest.mark.parametrize(
    ("check", "case", "jp", "message"),
    [
        ({"kind": "exact"}, {}, "$", 'a exact check needs a "value" (or a string "expected")'),
        ({"kind": "contains", "value": ""}, {}, "$.value", "contains value must be a non-empty string"),
        ({"kind": "regex", "pattern": "a", "timeout_s": 0}, {}, "$.timeout_s",
         "timeout_s must be a positive number of seconds"),
        ({"kind": "regex", "pattern": "a", "flags": "q"}, {}, "$.flags",
         "flags must be letters from 'imsx', a flag name (ignorecase, multiline, dotall, verbose) or a list of "
         'them, got "q"'),
        ({"kind": "json_schema"}, {"expected": {"rubric": "r"}}, "$",
         'a json_schema check needs a "schema" object (or an object "expected")'),
        ({"kind": "json_field", "path": "$.a"}, {}, "$",
         'a json_field check needs a "value" (any JSON value; its type is kept)'),
        ({"kind": "file_exists", "path": "../a"}, {}, "$.path",
         'a file_exists check needs a "path" relative to the working directory, without ".."'),
        ({"kind": "exit_code", "value": 256}, {}, "$.value",
         "an exit_code value must be an exit status from 0 to 255, got 256"),
        ({"kind": "max_turns"}, {}, "$.max", 'a max_turns check needs "max": an integer of at least 1'),
        ({"kind": "tool_calls", "calls": [{"name": "a"}], "ignore_args": "x"}, {}, "$.ignore_args",
         "ignore_args must be a list of argument names"),
        ({"kind": "tool_calls"}, {"expected": "no list"}, "$",
         'a tool_calls check needs "calls" (or a list "expected"): [{"name", "arguments"}]'),
        ({"kind": "grounding"}, {"context": " "}, "$",
         'a grounding check needs the case\'s "context" (the text the output must stay within)'),
        ({"kind": "refusal", "patterns": ["ok", "("]}, {}, "$.patterns[1]",
         "regex does not compile: missing ) at position 1"),
        ({"kind": "activation", "marker": ""}, {}, "$", 'an activation check needs a "marker" string or a "tool" name'),
        ({"kind": "scorer", "file": "../x.py"}, {}, "$.file",
         'a scorer check needs "file": "scorers/<name>.py" inside the suite'),
        ({"kind": "scorer", "file": "none"}, {}, "$.file", "scorer file 'scorers/none.py' not found"),
        ({"kind": "scorer", "file": "broken"}, {}, "$.file",
         "scorer 'scorers/broken.py' does not parse: invalid syntax (line 1)"),
        ({"kind": "scorer", "file": "s.py", "function": "f"}, {}, "$.function",
         "scorer 'scorers/s.py' defines no function 'f'"),
    ],
)
def test_each_check_kinds_rule_reports_a_bad_option_at_its_path(check, case, jp, message):
    r, fx = reader()
    opts = {k: v for k, v in check.items() if k != "kind"}
    assert _check_options(check["kind"], opts, r, "$", case, source(SCORERS)) is False
    assert errors(fx) == [(jp, message)]


def test_a_check_takes_its_value_its_schema_and_its_calls_from_the_cases_expected():
    r, fx = reader()
    for kind, case, key, want in [
        ("contains", {"expected": "Paris"}, "value", "Paris"),
        ("json_schema", {"expected": {"type": "object"}}, "schema", {"type": "object"}),
        ("tool_calls", {"expected": [{"name": "a"}]}, "calls", [{"name": "a"}]),
    ]:
        opts: dict = {}
        assert _check_options(kind, opts, r, "$", case, source())
        assert opts[key] == want
    assert errors(fx) == []


def test_a_bad_true_or_false_option_makes_a_check_unusable_except_a_trajectory_or_tool_calls_one():
    # the behaviour of the code this was split from, kept as it was: those kinds' rule decides
    # alone, so a true/false option they do not take (an unknown option, reported as one by the
    # case's reader) leaves them usable
    r, fx = reader()
    assert _check_options("contains", {"value": "v", "trim": "yes"}, r, "$", {}, source()) is False
    assert _check_options("forbidden_tools", {"tools": ["x"], "trim": "yes"}, r, "$", {}, source()) is True
    assert _check_options("tool_calls", {"calls": [], "fullmatch": 1}, r, "$", {}, source()) is True
    assert errors(fx) == [("$.trim", "trim must be true or false"), ("$.trim", "trim must be true or false"),
                          ("$.fullmatch", "fullmatch must be true or false")]


def test_a_cases_tags_are_required_and_each_a_non_empty_string():
    r, fx = reader()
    assert _case_tags(r, {}, "$", "case 'a': ") == ([], False)
    assert _case_tags(r, {"tags": ["x", " "]}, "$", "case 'a': ") == ([], False)
    assert _case_tags(r, {"tags": ["x"]}, "$", "case 'a': ") == (["x"], True)
    assert errors(fx) == [("$.tags", "case 'a': missing required key 'tags' (at least one tag)"),
                          ("$.tags", "case 'a': tags must be a non-empty list of non-empty strings")]


def test_a_rubric_list_becomes_bullets_and_a_bad_one_is_reported():
    r, fx = reader()
    assert _case_rubric(r, {"rubric": [" a ", "b"]}, "$", "") == ("- a\n- b", True)
    assert _case_rubric(r, "text", "$", "") == (None, True)
    assert _case_rubric(r, {"rubric": []}, "$", "case 'a': ") == (None, False)
    assert errors(fx) == [("$.expected.rubric", "case 'a': rubric must be a non-empty string or list of criteria")]


def test_a_cases_checks_come_from_its_list_or_its_string_expected():
    r, fx = reader()
    checks, ok = _case_checks(r, {"expected": "Paris"}, "$", "", source())
    assert ok and [(c.kind, c.options) for c in checks] == [("contains", {"value": "Paris", "case_fold": True})]
    checks, ok = _case_checks(r, {"checks": [{"kind": "nope"}, "x", {"kind": "exit_code"}]}, "$", "case 'a': ",
                              source())
    assert not ok and [c.kind for c in checks] == ["exit_code"]
    assert errors(fx) == [
        ("$.checks[0].kind", f"case 'a': unknown check kind \"nope\"; known: {', '.join(CHECK_KINDS)}"),
        ("$.checks[1]", "case 'a': a check must be an object with a \"kind\""),
    ]
    r, fx = reader()
    assert _case_checks(r, {"expected": " "}, "$", "", source()) == ([], False)
    assert errors(fx)[0][0] == "$.expected"


# --- importers ---------------------------------------------------------------------------
def test_a_duplicate_stimulus_name_takes_the_first_free_number_not_used_by_another_stimulus():
    used: set[str] = set()
    natural = {"a", "a-2"}
    assert [_unique_id(s, used, natural) for s in ("a", "a", "a-2", "a")] == ["a", "a-3", "a-2", "a-4"]


def test_each_vally_grader_type_becomes_its_check_kind():
    assert VALLY_GRADERS == set(VALLY_GRADER_KINDS)
    r, fx = reader()
    got = {t: _vally_grader_check(r, "$.g", {"type": t, "value": "v", "pattern": "p+"}, "s", True)
           for t in VALLY_GRADER_KINDS}
    assert got == {"prompt": None, "exact": {"kind": "exact", "value": "v"},
                   "contains": {"kind": "contains", "value": "v"}, "text": {"kind": "contains", "value": "v"},
                   "regex": {"kind": "regex", "pattern": "p+"}}
    assert errors(fx) == []


@pytest.mark.parametrize(
    ("grader", "has_rubric", "message"),
    [
        ({"type": "prompt"}, False, "stimulus 's' has a prompt grader but no rubric to judge against"),
        ({"type": "text", "value": ""}, True, "a text grader needs a non-empty value"),
        ({"type": "regex", "value": "("}, True, "regex does not compile: missing ) at position 1"),
    ],
)
def test_a_bad_vally_grader_is_reported_at_its_path(grader, has_rubric, message):
    r, fx = reader()
    assert _vally_grader_check(r, "$.stimuli[0].graders[2]", grader, "s", has_rubric) is None
    assert errors(fx) == [("$.stimuli[0].graders[2]", message)]


def test_an_unsupported_vally_grader_is_skipped_with_a_warning():
    r, fx = reader()
    assert _vally_grader_check(r, "$.g", {"type": "code"}, "s", True) is None
    assert warnings(fx) == [("$.g", 'grader type "code" has no evalkit equivalent (skipped); '
                                     "supported: contains, exact, prompt, regex, text")]


def test_vally_tags_give_the_intent_and_tags_once_each():
    r, fx = reader()
    case = {"tags": ["capability"]}
    _add_vally_tags(r, "$.s", {"area": "x", "intent": "non-activation"}, case)
    assert case == {"tags": ["capability", "area:x", "non-activation"], "intent": "non-activation"}
    case = {"tags": ["capability"]}
    _add_vally_tags(r, "$.s", ["t", "t", "capability", "u"], case)
    assert case == {"tags": ["capability", "t", "u"]}
    _add_vally_tags(r, "$.s", {"intent": "maybe"}, case)
    assert errors(fx) == [("$.s.tags.intent", "intent must be activation or non-activation, got 'maybe'")]


def test_vally_run_settings_read_both_sections_and_report_bad_values():
    r, fx = reader()
    assert _vally_run_settings(r, {"defaults": {"runs": 3, "timeout": "2m"}, "config": {"runs": 0}}) == (3, 120.0)
    assert errors(fx) == [("$.config.runs", "runs must be a positive integer, got 0")]
    assert _vally_run_settings(r, {}) == (5, None)


@pytest.mark.parametrize(
    ("match", "expect", "check"),
    [
        ("exact", " Paris ", {"kind": "exact", "value": "Paris", "trim": True, "case_fold": True}),
        ("contains", "## ", {"kind": "contains", "value": "## ", "case_fold": True}),
        ("regex", "a+", {"kind": "regex", "pattern": "a+", "flags": "i"}),
    ],
)
def test_an_agent_evals_expectation_becomes_the_check_its_match_names(match, expect, check):
    r, fx = reader()
    assert _expect_check(r, "$.cases[0]", expect, match) == check
    assert errors(fx) == [] and warnings(fx) == []


def test_a_bad_agent_evals_expectation_is_reported_and_a_wildcard_warned():
    r, fx = reader()
    assert _expect_check(r, "$.cases[0]", " ", "exact") is None
    assert _expect_check(r, "$.cases[1]", "(", "regex") is None
    assert _expect_check(r, "$.cases[2]", "a*", "contains") == {"kind": "contains", "value": "a*", "case_fold": True}
    assert errors(fx) == [("$.cases[0].expect", "expect is empty: it would match any output"),
                          ("$.cases[1].expect", "regex does not compile: missing ) at position 1")]
    assert [jp for jp, _ in warnings(fx)] == ["$.cases[2].expect"]


def test_an_agent_evals_set_is_capability_when_absent_and_a_native_name_otherwise():
    r, fx = reader()
    assert _import_set(r, "$.c", None) == "capability"
    assert _import_set(r, "$.c", "My Set") == "my-set"
    assert _import_set(r, "$.c", "Regression") == "Regression"  # lowered by the caller
    assert _import_set(r, "$.c", " ") is None
    assert errors(fx) == [("$.c.set", 'set must be a nonempty string, got " "')]
    assert [jp for jp, _ in warnings(fx)] == ["$.c.set", "$.c.set"]
