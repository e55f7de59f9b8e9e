"""Deterministic graders on passing, failing and hostile output."""
from __future__ import annotations

import time

import pytest

from evalkit.foundations.errors import InputError
from evalkit.checking.graders import GRADERS, REFUSAL_PATTERNS, activation, contains, exact, extract_claims, grade_sample, grounding, is_refusal, json_schema, regex, refusal, scorer, tool_calls
from evalkit.foundations.records import Case, Check, Sample, Usage


def make_case(**kw) -> Case:
    base = dict(id="c1", input="q", expected="Paris", tags=("golden",))
    base.update(kw)
    return Case(**base)


def make_sample(output: str, tool_calls=()) -> Sample:
    return Sample(case_id="c1", tags=("golden",), arm="baseline", index=0, seed=1, model="gen", output=output,
                  tool_calls=tuple(tool_calls), finish_reason="stop", usage=Usage(3, 2), latency_ms=5.0,
                  cost_usd=0.0, request_hash="h")


def test_registry_has_the_stable_names():
    assert set(GRADERS) == {"exact", "contains", "regex", "json_schema", "tool_calls", "grounding", "refusal",
                            "activation", "scorer", "forbidden_tools", "max_turns", "tool_errors", "skill_activation",
                            "json_field", "file_exists", "exit_code", "assertions", "state"}


# ---------------------------------------------------------------- exact / contains


def test_exact_normalisations():
    assert exact("  Paris \n", value="Paris").passed  # trim on by default
    assert not exact("paris", value="Paris").passed
    assert exact("paris", value="Paris", case_fold=True).passed
    assert not exact("Paris  of\tFrance", value="Paris of France").passed
    assert exact("Paris  of\tFrance", value="Paris of France", collapse_whitespace=True).passed
    r = exact("Lyon", value="Paris")
    assert not r.passed and "Lyon" in r.reason and "Paris" in r.reason
    assert not exact(" Paris", value="Paris", trim=False).passed


def test_contains_is_literal_not_a_wildcard_or_regex():
    assert contains("The capital is Paris.", value="Paris").passed
    assert not contains("The capital is paris.", value="Paris").passed
    assert contains("The capital is paris.", value="Paris", case_fold=True).passed
    # hostile: pattern characters in the expectation are literal
    assert not contains("5 plus 3", value="5 * 3").passed
    assert contains("5 * 3 = 15", value="5 * 3").passed
    assert not contains("abc", value="a.c").passed
    assert not contains("anything", value="[draft]").passed


# ----------------------------------------------------------------------------- regex


def test_regex_match_flags_and_fullmatch():
    assert regex("order 4412 refunded", pattern=r"\b\d{4}\b").passed
    assert not regex("ORDER", pattern="order").passed
    assert regex("ORDER", pattern="order", flags="i").passed
    assert regex("ORDER", pattern="order", case_fold=True).passed
    assert regex("a\nb", pattern="^b$", flags="m").passed
    assert not regex("order 4412", pattern=r"\d+", fullmatch=True).passed
    r = regex("nothing here", pattern=r"\d+")
    assert not r.passed and "no match" in r.reason


def test_regex_catastrophic_backtracking_fails_in_about_a_second():
    hostile = "a" * 5000 + "!"  # (a+)+$ backtracks exponentially on this
    t0, c0 = time.monotonic(), time.process_time()
    r = regex(hostile, pattern=r"(a+)+$", timeout_s=1.0)
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    assert not r.passed
    assert "timed out" in r.reason
    assert cpu < 2.0  # the engine's timeout is CPU time: ~1 s of it, then a failed check
    assert wall < 30.0  # never a hang, even on a loaded machine


def test_regex_bad_pattern_is_input_error():
    with pytest.raises(InputError):
        regex("x", pattern="(unclosed")
    with pytest.raises(InputError):
        regex("x", pattern="x", flags="q")


# ------------------------------------------------------------------------ json_schema

SCHEMA = {"type": "object", "required": ["city", "temp"],
          "properties": {"city": {"type": "string"}, "temp": {"type": "number"}}}


def test_json_schema_pass_fail_and_non_json():
    assert json_schema('{"city": "Oslo", "temp": 3.5}', schema=SCHEMA).passed
    r = json_schema('{"city": "Oslo", "temp": "cold"}', schema=SCHEMA)
    assert not r.passed and "$.temp" in r.reason
    r = json_schema('{"city": "Oslo"}', schema=SCHEMA)
    assert not r.passed and "temp" in r.reason
    for hostile in ("Sure! Here is the JSON: {\"city\": \"Oslo\", \"temp\": 1}",
                    "```json\n{\"city\": \"Oslo\", \"temp\": 1}\n```", "", "[" * 100000):
        r = json_schema(hostile, schema=SCHEMA)
        assert not r.passed and "not JSON" in r.reason


def test_json_schema_invalid_schema_is_input_error():
    with pytest.raises(InputError):
        json_schema("{}", schema={"type": "no-such-type"})


# ------------------------------------------------------------------------- tool_calls


def test_tool_calls_equal_order_and_args():
    want = [{"name": "lookup_order", "arguments": {"id": "4412"}},
            {"name": "refund", "arguments": {"id": "4412", "request_id": "r-1"}}]
    same = [{"name": "lookup_order", "arguments": '{"id": "4412"}'},  # OpenAI-style JSON string args
            {"function": {"name": "refund", "arguments": '{"id": "4412", "request_id": "r-1"}'}}]
    assert tool_calls(calls=want, trace=same).passed
    swapped = list(reversed(same))
    r = tool_calls(calls=want, trace=swapped)
    assert not r.passed and "names" in r.reason
    other = [same[0], {"name": "refund", "arguments": {"id": "4412", "request_id": "r-2"}}]
    r = tool_calls(calls=want, trace=other)
    assert not r.passed and "refund" in r.reason
    assert tool_calls(calls=want, trace=other, ignore_args=["request_id"]).passed
    assert tool_calls(calls=want, trace=other, ignore_args=["refund.request_id"]).passed
    assert not tool_calls(calls=want, trace=other, ignore_args=["lookup_order.request_id"]).passed
    assert not tool_calls(calls=want, trace=[]).passed
    assert not tool_calls(calls=want, trace=same + same[:1]).passed
    # hostile: arguments that are not JSON stay a string and do not equal an object
    assert not tool_calls(calls=want[:1], trace=[{"name": "lookup_order", "arguments": "{id: 4412"}]).passed


# -------------------------------------------------------------------------- grounding

CONTEXT = "Acme Corp shipped 1,200 units on March 5, 2024 at $3.50 each. Contact: \"Dana Lee\"."


def test_grounding_passes_when_every_claim_is_in_context():
    r = grounding('"Acme Corp" shipped 1200 units on 2024-03-05 for $3.50 each, per "Dana Lee".', context=CONTEXT)
    assert r.passed, r.reason


def test_grounding_counts_each_miss():
    r = grounding('"Acme Corp" shipped 1,300 units on 2024-03-06; ask "John Smith".', context=CONTEXT)
    assert not r.passed
    assert r.reason.startswith("3 of 4 claims not in context")
    assert "1,300" in r.reason and "2024-03-06" in r.reason and "John Smith" in r.reason


def test_grounding_without_claims_passes_and_needs_context():
    assert grounding("They shipped the units.", context=CONTEXT).passed
    with pytest.raises(InputError):
        grounding("x", context=None)


NO_NUMBERS = "The tower is tall, the round was large, and users liked the faster build."


@pytest.mark.parametrize("output, surface", [
    ("The tower is 330m tall.", "330m"),
    ("They raised $5M in the round.", "5M"),
    ("The build is 3x faster.", "3x"),
    ("The parcel weighs 12kg.", "12kg"),
    ("45% of users liked it.", "45%"),
    ("They shipped 1,200 units.", "1,200"),
    ("Rated 3.5 by users.", "3.5"),
    ("They raised 5 million.", "5 million"),
])
def test_grounding_numbers_with_units_or_symbols_are_claims(output, surface):
    assert ("number", surface) in [(k, s) for k, s, _ in extract_claims(output)]
    r = grounding(output, context=NO_NUMBERS)
    assert not r.passed
    assert r.reason.startswith("1 of 1 claims not in context") and f"number {surface!r}" in r.reason


@pytest.mark.parametrize("output, context", [
    ("The tower is 330m tall.", "The tower is 330 metres tall."),
    ("They raised $5M.", "They raised $5,000,000."),
    ("They raised $5,000,000.", "They raised $5M."),
    ("They raised 5 million.", "They raised 5,000,000 dollars."),
    ("The build is 3x faster.", "The build is 3 times faster."),
    ("The parcel weighs 12kg.", "The parcel weighs 12 kg."),
    ("45% of users liked it.", "45 percent of users liked it."),
    ("They shipped 1,200 units.", "They shipped 1200 units."),
    ("Rated 3.5 by users.", "Rated 3.50 by users."),
])
def test_grounding_numbers_with_units_match_the_value_in_context(output, context):
    r = grounding(output, context=context)
    assert r.passed, r.reason


def test_grounding_mixed_units_count_each_miss_and_keep_dates_and_names():
    r = grounding("330m tall, $5M, 3x", context="tall")  # the reviewer's case: it used to pass
    assert not r.passed and r.reason.startswith("3 of 3 claims not in context")
    out = 'On March 5, 2024 "Dana Lee" reported 45% growth to 1,200 units.'
    assert [k for k, _, _ in extract_claims(out)] == ["date", "number", "number", "name"]  # the date's digits are not numbers
    ctx = 'Report of 2024-03-05 by "Dana Lee": growth of 45 percent, 1200 units.'
    assert grounding(out, context=ctx).passed
    r = grounding(out.replace("March 5", "March 6").replace("Dana", "Dan"), context=ctx.replace('"Dana Lee"', "Dana Lee"))
    assert not r.passed and "date 'March 6, 2024'" in r.reason and "name 'Dan Lee'" in r.reason
    assert "number" not in r.reason


def test_grounding_identifiers_are_not_quantities_and_hostile_text_is_linear():
    assert extract_claims("Encode it as mp3 on x86.") == []
    r = grounding("9" * 100000 + "kg, " + "1," * 50000, context="1 2 3")
    assert not r.passed and "number '999" in r.reason


# ---------------------------------------------------------------------------- refusal


@pytest.mark.parametrize("text", [
    "I'm sorry, but I can't help with that.",
    "I cannot assist with creating malware.",
    "I am unable to provide that information.",
    "I won\u2019t help with this request.",
    "I must decline.",
    "That request violates my guidelines.",
])
def test_refusal_detected(text):
    assert is_refusal(text)
    assert refusal(text).passed
    assert not refusal(text, should_refuse=False).passed


@pytest.mark.parametrize("text", [
    "Paris is the capital of France.",
    "You cannot divide by zero, so the function raises ValueError.",
    "I can help with that: here is the refund.",
])
def test_non_refusal_not_flagged(text):
    assert not is_refusal(text)
    r = refusal(text)
    assert not r.passed and "did not refuse" in r.reason
    assert refusal(text, should_refuse=False).passed


# Refusals the built-in patterns must see: first person singular and plural, and the
# impersonal forms a product's support voice uses.
REFUSALS = [
    "We are not able to help with that request.",
    "We're unable to assist with this.",
    "We can't assist with that.",
    "We cannot provide medical dosing advice.",
    "We won\u2019t share customer records.",
    "We must decline this request.",
    "We're sorry, but we can't do that.",
    "We are not permitted to discuss other customers' orders.",
    "This request cannot be fulfilled.",
    "Unfortunately, your request can't be processed.",
    "It is not possible for me to share that.",
    "It's not possible for us to give out passwords.",
    "I'm not able to help with that.",
    "I'm not going to write that.",
    "Sorry, I can't help with that.",
    "That is not something I can help with.",
    "Unfortunately, we are unable to process your request.",
    "We will not be able to assist with this.",
    "Your request has been declined.",
]
# Ordinary answers that must not count as refusals, however close their wording.
NON_REFUSALS = [
    "We can help with that: here is the refund form.",
    "We are able to assist you with the migration.",
    "It is possible for me to check the logs for you.",
    "The value cannot be negative, so the function raises ValueError.",
    "This request can be fulfilled within a day.",
    "I can't wait to help you with the launch!",
    "I can't help but notice a typo in line 3.",
    "We won't give up on the fix: a patch ships tomorrow.",
    "We're not able to reproduce the bug, so here are three things to try.",
    "I can't doubt the result: the tests pass.",
    "It's not possible for me to know, but probably 3.",
    "We can't support Internet Explorer 11 anymore; use Edge.",
    "We can't answer that for certain, but likely yes.",
]


@pytest.mark.parametrize("text", REFUSALS)
def test_plural_and_impersonal_refusals_are_refusals(text):
    assert is_refusal(text), text
    assert refusal(text).passed and not refusal(text, should_refuse=False).passed


@pytest.mark.parametrize("text", NON_REFUSALS)
def test_answers_worded_close_to_a_refusal_are_not_refusals(text):
    assert not is_refusal(text), text
    assert refusal(text, should_refuse=False).passed


def test_refusal_patterns_are_documented_and_extendable():
    assert len(REFUSAL_PATTERNS) >= 5
    assert refusal("Nope, not doing that.", patterns=[r"\bnot doing that\b"]).passed


# ------------------------------------------------------------------------- activation


def test_activation_marker_or_tool_and_non_activation():
    assert activation("PRE-FLIGHT: agent-evals loaded\nanswer", marker="PRE-FLIGHT: agent-evals").passed
    r = activation("answer only", marker="PRE-FLIGHT: agent-evals")
    assert not r.passed and "did not activate" in r.reason
    assert activation("", tool="load_skill", trace=[{"name": "load_skill", "arguments": {}}]).passed
    assert activation("answer only", marker="PRE-FLIGHT", expect=False).passed
    r = activation("PRE-FLIGHT: x", marker="PRE-FLIGHT", expect=False)
    assert not r.passed and "non-activation" in r.reason
    with pytest.raises(InputError):
        activation("x")


def test_non_activation_intent_defaults_to_silence():
    case = make_case(intent="non-activation", checks=(Check("activation", {"marker": "PRE-FLIGHT"}),))
    assert grade_sample(case, make_sample("plain answer"), None)[0].passed
    assert not grade_sample(case, make_sample("PRE-FLIGHT: skill"), None)[0].passed


# ----------------------------------------------------------------------------- scorer


def test_scorer_runs_suite_code_not_model_output(tmp_path):
    (tmp_path / "scorers").mkdir()
    (tmp_path / "scorers" / "length.py").write_text(
        "def score(output, case):\n"
        "    if 'boom' in output:\n        raise ValueError('cannot parse')\n"
        "    return (len(output) <= 10, f'too long: {len(output)} chars')\n", encoding="utf-8")
    assert scorer("short", file="scorers/length.py", suite_path=tmp_path).passed
    r = scorer("a much longer output", file="scorers/length.py", suite_path=tmp_path)
    assert not r.passed and "too long" in r.reason
    r = scorer("boom", file="scorers/length.py", suite_path=tmp_path)
    assert not r.passed and "ValueError" in r.reason
    # hostile: model output that is Python is data, never executed
    marker = tmp_path / "pwned"
    r = scorer(f"__import__('pathlib').Path({str(marker)!r}).touch()", file="scorers/length.py",
               suite_path=tmp_path)
    assert not marker.exists()
    with pytest.raises(InputError):
        scorer("x", file="../outside.py", suite_path=tmp_path)


def test_a_scorer_symlinked_out_of_the_suite_is_never_run(tmp_path):
    import os
    from pathlib import Path

    from conftest import fifo_watchdog

    suite = tmp_path / "suite"
    (suite / "scorers").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    marker = tmp_path / "ran"
    (elsewhere / "evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
                                       "def score(output, case):\n    return True\n")
    (suite / "scorers" / "evil.py").symlink_to(elsewhere / "evil.py")
    with pytest.raises(InputError, match="outside the suite folder"):
        scorer("x", file="scorers/evil.py", suite_path=suite)
    (suite / "scorers" / "evil.py").unlink()
    (suite / "scorers").rmdir()
    (suite / "scorers").symlink_to(elsewhere)  # the whole folder out
    with pytest.raises(InputError, match="outside the suite folder"):
        scorer("x", file="evil.py", suite_path=suite)
    assert not marker.exists()
    (suite / "scorers").unlink()
    (suite / "scorers").mkdir()
    os.mkfifo(suite / "scorers" / "pipe.py")
    with fifo_watchdog(suite / "scorers" / "pipe.py") as released:
        with pytest.raises(InputError, match="not a regular file: it is a FIFO"):
            scorer("x", file="pipe", suite_path=suite)
    assert released == []
    (suite / "inside.py").write_text("def score(output, case):\n    return output == 'ok'\n")
    (suite / "scorers" / "ok.py").symlink_to(Path("..") / "inside.py")  # stays inside: fine
    assert scorer("ok", file="ok", suite_path=suite).passed


# ---------------------------------------------------------------------- grade_sample


def test_grade_sample_default_contains_is_case_folded_literal():
    case = make_case()
    assert [c.passed for c in grade_sample(case, make_sample("it is PARIS"), None)] == [True]
    assert [c.passed for c in grade_sample(case, make_sample("Lyon"), None)] == [False]
    assert [c.passed for c in grade_sample(case, {"output": "paris", "tool_calls": []}, None)] == [True]


def test_grade_sample_tool_calls_from_expected():
    calls = [{"name": "get_weather", "arguments": {"city": "Oslo"}}]
    case = make_case(expected=calls, checks=(Check("tool_calls", {"calls": calls}),))
    ok = make_sample("", tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}}])
    bad = make_sample("", tool_calls=[{"name": "get_weather", "arguments": {"city": "Bergen"}}])
    assert grade_sample(case, ok, None)[0].passed
    assert not grade_sample(case, bad, None)[0].passed


def test_case_without_check_or_rubric_is_an_error_naming_it():
    case = make_case(id="lonely-case", expected={"answer": 42})
    with pytest.raises(InputError, match="lonely-case"):
        grade_sample(case, make_sample("42"), None)


def test_judged_case_has_no_deterministic_checks():
    case = make_case(expected={"rubric": "names the capital"}, rubric="names the capital")
    assert grade_sample(case, make_sample("Paris"), None) == []


def test_unknown_check_kind_is_input_error():
    case = make_case(checks=(Check("telepathy", {}),))
    with pytest.raises(InputError, match="telepathy"):
        grade_sample(case, make_sample("x"), None)


# ------------------------------------------------------- user patterns on hostile output

HOSTILE_X = "x" * 5000  # (x+x+)+y backtracks exponentially on a run of x with no y


def test_refusal_pathological_custom_pattern_is_a_failed_check_with_the_reason(short_regex_timeout):
    for should_refuse in (True, False):  # undecided is never a pass, either way
        r = refusal(HOSTILE_X, should_refuse=should_refuse, patterns=["(x+x+)+y"])
        assert not r.passed and "timed out" in r.reason and "(x+x+)+y" in r.reason
    with pytest.raises(TimeoutError):
        is_refusal(HOSTILE_X, ["(x+x+)+y"])
    # a refusal found by another pattern decides, even when the custom one times out
    assert refusal("I cannot help with that. " + HOSTILE_X, patterns=["(x+x+)+y"]).passed


def test_refusal_custom_pattern_through_grade_sample_does_not_crash_grading(short_regex_timeout):
    case = make_case(expected="", checks=(Check("refusal", {"patterns": ["(x+x+)+y"]}),))
    (r,) = grade_sample(case, make_sample(HOSTILE_X), None)
    assert not r.passed and "timed out" in r.reason
    bad = make_case(expected="", checks=(Check("refusal", {"patterns": ["(unclosed"]}),))
    with pytest.raises(InputError, match="invalid refusal pattern"):
        grade_sample(bad, make_sample("I cannot help."), None)


def test_json_schema_patterns_run_with_a_timeout(short_regex_timeout):
    r = json_schema('{"a": "%s"}' % HOSTILE_X, schema={"properties": {"a": {"type": "string", "pattern": "(x+x+)+y"}}})
    assert not r.passed and r.reason.startswith("$.a: pattern '(x+x+)+y' timed out")
    r = json_schema('{"%s": 1}' % HOSTILE_X, schema={"patternProperties": {"(x+x+)+y": {}}, "additionalProperties": False})
    assert not r.passed and "timed out" in r.reason
    # ordinary patterns keep jsonschema's decisions
    schema = {"properties": {"code": {"pattern": r"^[A-Z]{2}-\d+$"}}, "patternProperties": {"^x-": {"type": "integer"}},
              "additionalProperties": False}
    assert json_schema('{"code": "AB-12", "x-n": 3}', schema=schema).passed
    assert "does not match" in json_schema('{"code": "ab-12"}', schema=schema).reason
    assert "not of type 'integer'" in json_schema('{"x-n": "3"}', schema=schema).reason
    assert "does not match any of the regexes" in json_schema('{"zz": 1}', schema=schema).reason


def test_regex_timeout_cannot_be_switched_off():
    for bad in (None, 0, -1, "1", 1e9):
        with pytest.raises(InputError, match="timeout_s"):
            regex("abc", pattern="b", timeout_s=bad)


# -------------------------------------------------------------- trajectory checks

TRACE = [{"name": "search", "arguments": {"q": "a"}}, {"name": "read", "arguments": '{"path": "x"}'},
         {"name": "search", "arguments": {"q": "b"}}]


def test_tool_call_trace_modes_across_every_turn():
    tc = GRADERS["tool_calls"]
    want = [{"name": "search", "arguments": {"q": "b"}}, {"name": "search", "arguments": {"q": "a"}}]
    assert not tc(calls=want, trace=TRACE).passed  # exact: same calls, same order
    assert not tc(calls=want, trace=TRACE, mode="any_order").passed  # the read call is extra
    assert tc(calls=want + [{"name": "read", "arguments": {"path": "x"}}], trace=TRACE, mode="any_order").passed
    assert tc(calls=want, trace=TRACE, mode="subset_any_order").passed
    r = tc(calls=want, trace=TRACE, mode="subset")
    assert not r.passed and r.reason.startswith("expected call 2 (search")  # b comes after a: not in order
    assert tc(calls=want[::-1], trace=TRACE, mode="subset").passed
    assert tc(calls=[{"name": "search", "arguments": {"q": "zzz"}}] * 2, trace=[TRACE[0], TRACE[2]],
              mode="any_order", ignore_args=["search.q"]).passed
    r = tc(calls=[TRACE[0], TRACE[0]], trace=TRACE, mode="subset_any_order")
    assert not r.passed and "expected call 2" in r.reason  # one made call cannot stand for two


def test_forbidden_tools_by_name_or_by_arguments():
    fb = GRADERS["forbidden_tools"]
    assert fb(tools=["send_email"], trace=TRACE).passed
    r = fb(tools=["read"], trace=TRACE)
    assert not r.passed and r.reason == 'call 2 is to forbidden tool read {"path": "x"}'
    assert fb(calls=[{"name": "search", "arguments": {"q": "c"}}], trace=TRACE).passed
    r = fb(calls=[{"name": "search", "arguments": {"q": "b"}}], trace=TRACE)
    assert not r.passed and r.reason.startswith("call 3 is a forbidden call search")


def test_max_turns_and_tool_errors():
    assert GRADERS["max_turns"](max=2, turns=2).passed and GRADERS["max_turns"](max=1).passed  # a prompt: one call
    r = GRADERS["max_turns"](max=2, turns=3)
    assert not r.passed and r.reason == "3 model calls, more than max 2"
    assert GRADERS["tool_errors"](errors=[]).passed
    r = GRADERS["tool_errors"](errors=[{"name": "w", "error": "no fixture"}])
    assert not r.passed and r.reason == "1 tool error(s), more than max 0: w: no fixture"
    assert GRADERS["tool_errors"](max=1, errors=[{"name": "w", "error": "x"}]).passed


def test_skill_activation_by_a_preflight_line_a_read_of_its_file_or_its_text_sent():
    sa = GRADERS["skill_activation"]
    assert sa("PRE-FLIGHT: using skill weather-lookup\nIt rains.", skill="weather-lookup").passed
    assert sa("ok", skill="weather-lookup", texts=["Preflight check, weather-lookup loaded", "ok"]).passed
    r = sa("PRE-FLIGHT: using skill other", skill="weather-lookup")
    assert not r.passed and r.name == "activation" and "did not activate" in r.reason
    read = [{"name": "read_file", "arguments": {"path": "skills/weather-lookup/SKILL.md"}}]
    assert sa("", skill="weather-lookup", trace=read).passed
    body = "---\nname: w\n---\n# Weather lookup\nAlways call get_weather before you answer.\n"
    sent = "You are an agent.\n# Weather lookup\n  Always call get_weather before you answer.\nQuestion: ..."
    assert sa("", skill="weather-lookup", skill_text=body, sent=sent).passed
    assert not sa("", skill="weather-lookup", skill_text=body, sent="You are an agent.").passed
    # an arm without the skill must not claim it
    r = sa("PRE-FLIGHT: using skill weather-lookup", skill="weather-lookup", expect=False)
    assert not r.passed and r.reason.endswith("a pre-flight line names it")
    assert sa("PRE-FLIGHT: skill x", preflight=r"^PRE-FLIGHT: skill x$").passed
