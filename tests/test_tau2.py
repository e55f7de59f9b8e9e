"""tau2-bench in and out (issue 45, item 7): `evalkit import` of a tau2-bench `tasks.json`
and `evalkit ingest` of tau2-bench simulation results.

Fixtures (tests/data/tau2/README.md): `airline-tasks.json` holds tasks 0, 3 and 13 copied
from sierra-research/tau2-bench `data/tau2/domains/airline/tasks.json`; `crafted-tasks.json`
and `results.json` are written from tau2-bench's documented models
(`src/tau2/data_model/tasks.py`, `simulation.py`, `message.py`).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.checking.graders import tool_calls
from evalkit.conclusions.ingest import TAU2_ENDINGS, detect_format, ingest
from evalkit.foundations._io import iter_jsonl
from evalkit.foundations.errors import InputError
from evalkit.suites.formats.tau2 import read_tau2_tasks

DATA = Path(__file__).parent / "data" / "tau2"
TAU = Path(__file__).parent.parent.parent / "shared" / "data" / "tau-bench" / "gpt-4o-airline.trials.jsonl"


def cli(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def tau2_pass_hat_k(rewards: dict[str, list[float]], k: int) -> float:
    """tau2-bench's pass^k, written independently of evalkit: per task C(c, k) / C(n, k)
    (`src/tau2/metrics/agent_metrics.py` `pass_hat_k`), averaged over tasks."""
    per_task = [math.comb(sum(abs(r - 1) <= 1e-6 for r in v), k) / math.comb(len(v), k) for v in rewards.values()]
    return sum(per_task) / len(per_task)


# ------------------------------------------------------------------------------ import


def test_airline_tasks_import_maps_each_field(tmp_path: Path) -> None:
    res = cli("import", DATA / "airline-tasks.json", "--to", tmp_path / "airline")
    assert res.exit_code == 0, res.output
    cases = {c["id"]: c for c in iter_jsonl(tmp_path / "airline" / "cases.jsonl")}
    assert list(cases) == ["task-0", "task-3", "task-13"]
    three = cases["task-3"]
    assert three["input"]["user"] == {
        "task_instructions": (
            "If this is not already the case, insist on getting the total number in numeric form, as you can "
            "see numbers better than words. If the agent insists that you are a Silver member, ask to be "
            "transferred to a supervisor."
        ),
        "reason_for_call": (
            "You want to figure out the total number of suitcases the reservation allows you to take on your "
            "upcoming flight.\n\nYou have a lot of things you need to bring with you on this trip. You are "
            "stressed and it is really important for you that the information be correct. \n\nYou're pretty "
            "sure that you're a Gold member."
        ),
        "known_info": (
            "You are Anya Garcia.\n\nYour user id is: anya_garcia_5901.\n\nYour confirmation number is JMO1MG."
        ),
        "unknown_info": "You do not know the cabin for the upcoming flight.",
    }
    assert three["tags"] == ["airline"]
    assert three["checks"] == [
        {"kind": "contains", "value": "4", "case_fold": True, "scope": "conversation"},
        {
            "kind": "tool_calls",
            "calls": [
                {"name": "get_reservation_details", "arguments": {"reservation_id": "JMO1MG"}},
                {"name": "get_user_details", "arguments": {"user_id": "anya_garcia_5901"}},
            ],
            "mode": "subset_any_order",
        },
    ]
    assert three["expected"]["nl_assertions"][0] == "Agent detects that user is actually a Silver member."
    # task 13's action compares no argument (`compare_args: []`): the name alone
    [call] = cases["task-13"]["checks"][0]["calls"]
    assert call["name"] == "transfer_to_human_agents" and call["compare_args"] == []
    # task 0 has only an nl_assertion: judged, no deterministic check
    assert cases["task-0"]["checks"] == [] and cases["task-0"]["expected"] == {
        "nl_assertions": ["Agent should refuse to proceed with the cancellation."]
    }
    config = json.loads((tmp_path / "airline" / "config.json").read_text())
    assert config["mode"] == "chat" and "simulator" in config and config["unit"]["kind"] == "agent"
    assert (tmp_path / "airline" / "simulator" / "prompt-v1.md").is_file()
    # the airline tasks gate on DB, not on nl_assertions or actions: said, by field and task
    assert "evaluation_criteria.reward_basis DB: tau2 gates the reward on the database" in res.output
    assert (
        "evaluation_criteria.nl_assertions (not in reward_basis)" in res.output and "(task(s) 0, 3, 13)" in res.output
    )
    assert "evaluation_criteria.actions (not in reward_basis)" in res.output and "(task(s) 3, 13)" in res.output
    assert "description: the task's description" in res.output


def test_unmappable_fields_are_findings_by_name_and_the_task_still_imports() -> None:
    imported = read_tau2_tasks(DATA / "crafted-tasks.json")
    said = [w.message for w in imported.warnings]
    named = {m.split(": ", 1)[0] for m in said}
    for field in (
        "initial_state",
        "ticket",
        "issues",
        "required_documents",
        "user_tools",
        "description",
        "extra_field",
        "evaluation_criteria.env_assertions",
        "evaluation_criteria.actions[requestor=user]",
        "evaluation_criteria.reward_basis ENV_ASSERTION",
        "evaluation_criteria.communicate_info (not in reward_basis)",
    ):
        assert field in named, (field, said)
    assert any("extra_field: unknown field, not imported (task(s) s1)" == m for m in said)
    assert any("'s2'" in m and "skipped (nothing to check)" in m for m in said)
    [(_, _, case)] = imported.cases
    assert case["input"]["user"] == {
        "persona": "A retired teacher, patient and precise.",
        "task_instructions": "Ask to reset your router; say the model is X100 only if asked.",
    }
    # two identical actions are one expected call (one call matches both in tau2); the user's is left out
    [calls] = [c["calls"] for c in case["checks"] if c["kind"] == "tool_calls"]
    assert calls == [
        {"name": "lookup_device", "arguments": {"model": "X100", "note": "free text"}, "compare_args": ["model"]}
    ]
    # the skipped task's telecom domain is not named for the suite
    assert not any("telecom" in m for m in said)


def test_tool_calls_compare_args_match_as_tau2_compares_an_action() -> None:
    """tau2's `Action.compare_with_tool_call`: the name, and only the `compare_args`
    arguments; `ActionEvaluator`: each action matched by some call, in any order."""
    want = [
        {"name": "lookup_device", "arguments": {"model": "X100", "note": "a"}, "compare_args": ["model"]},
        {"name": "transfer_to_human_agents", "arguments": {"summary": "x"}, "compare_args": []},
    ]
    made = [
        {"name": "transfer_to_human_agents", "arguments": {"summary": "something else"}},
        {"name": "get_user", "arguments": {}},
        {"name": "lookup_device", "arguments": {"model": "X100", "note": "b", "extra": 1}},
    ]
    assert tool_calls(calls=want, trace=made, mode="subset_any_order").passed
    wrong = [dict(made[0]), {"name": "lookup_device", "arguments": {"model": "X200", "note": "a"}}]
    res = tool_calls(calls=want, trace=wrong, mode="subset_any_order")
    assert not res.passed and "expected call 1 (lookup_device" in res.reason
    # without compare_args every argument is compared, as before
    plain = [{"name": "lookup_device", "arguments": {"model": "X100"}}]
    assert not tool_calls(calls=plain, trace=made, mode="subset_any_order").passed
    assert tool_calls(calls=want[:1], trace=made[2:], mode="exact").passed


def test_compare_args_is_refused_where_it_cannot_pair_calls(tmp_path: Path) -> None:
    from evalkit.intake.lint import write_native_suite
    from evalkit.suites.formats.base import default_config

    bad = {
        "id": "c1",
        "input": "hi",
        "tags": ["t"],
        "checks": [{"kind": "tool_calls", "mode": "any_order", "calls": [{"name": "f", "compare_args": ["a"]}]}],
    }
    with pytest.raises(InputError, match="compare_args must be a list of argument names"):
        write_native_suite(tmp_path / "s", default_config("s", ""), [bad])


# ------------------------------------------------------------------------------ ingest


def test_simulation_results_ingest_endings_turns_calls_and_grades(tmp_path: Path) -> None:
    src = DATA / "results.json"
    assert detect_format(src) == "tau2"
    run = ingest(src, tmp_path / "run", arm="gpt-4.1")
    rows = {(r["case_id"], r["index"]): r for r in iter_jsonl(run / "results.jsonl")}
    endings = {key: (r["termination"], r["agent"]["tau2_termination"]) for key, r in rows.items()}
    assert endings == {
        ("task-0", 0): ("user_stop", "user_stop"),
        ("task-0", 1): ("user_stop", "user_stop"),
        ("task-0", 2): ("max_turns", "timeout"),
        ("task-0", 3): ("user_stop", "agent_stop"),
        ("task-3", 0): ("simulator_error", "user_error"),
        ("task-3", 1): ("max_turns", "max_steps"),
        ("task-3", 2): ("user_stop", "user_stop"),
        ("task-3", 3): ("out_of_scope", "user_stop"),
        ("task-13", 0): ("transfer", "user_stop"),
        ("task-13", 1): ("transfer", "user_stop"),
        ("task-13", 2): ("agent_error", "too_many_errors"),
        ("task-13", 3): ("user_stop", "user_stop"),
    }
    first = rows[("task-13", 0)]
    # turns: the agent's text replies (the tool-calling step is not one); the marker is cut, its text kept
    assert first["turns"] == 2 and first["agent"]["conversation"][-1] == {
        "role": "user",
        "content": "Please transfer me.",
    }
    assert first["tool_calls"] == [
        {"id": "call_13_0", "name": "get_user_details", "arguments": {"user_id": "james_lee_6136"}}
    ]
    assert first["cost_usd"] == 0.02 and first["agent"]["simulator_cost_usd"] == 0.01
    assert rows[("task-0", 3)]["turns"] == 3 and rows[("task-0", 3)]["output"] == "Goodbye."
    grades = {(g["case_id"], g["index"]): g for g in iter_jsonl(run / "grades.jsonl")}
    assert grades[("task-3", 0)]["passed"] is None and "user_error" in grades[("task-3", 0)]["error"]
    assert [grades[("task-0", i)]["passed"] for i in range(4)] == [True, True, False, True]


def test_ingested_pass_hat_k_equals_tau2s_on_its_results(tmp_path: Path) -> None:
    src = DATA / "results.json"
    rewards: dict[str, list[float]] = defaultdict(list)
    for sim in json.loads(src.read_text())["simulations"]:
        rewards[sim["task_id"]].append(sim["reward_info"]["reward"])
    run = ingest(src, tmp_path / "run")
    [arm] = json.loads((run / "grades-summary.json").read_text())["per_arm"].values()
    curve = arm["scores"]["curve"]
    assert [p["j"] for p in curve] == [1, 2, 3, 4]
    for p in curve:
        assert p["pass_hat_j"] == pytest.approx(tau2_pass_hat_k(rewards, p["j"]), abs=1e-12)
    assert [round(p["pass_hat_j"], 4) for p in curve] == [0.5833, 0.3333, 0.1667, 0.0]


def test_tau_bench_trials_as_tau2_results_give_the_published_curve(tmp_path: Path) -> None:
    """The tau-bench gpt-4o airline trials (../shared/data/tau-bench), written as tau2-bench
    simulation results and ingested through the tau2 reader: pass^1..4 equal the paper's
    curve (Yao et al. 2024, gpt-4o airline: .420 .273 .220 .200) and tau2's estimator."""
    assert TAU.exists(), "../shared/data/tau-bench is missing"
    trials = [json.loads(line) for line in TAU.read_text().splitlines()]
    sims = [
        {
            "id": f"{t['task_id']}-{t['trial']}",
            "task_id": str(t["task_id"]),
            "trial": t["trial"],
            "termination_reason": "user_stop",
            "reward_info": {"reward": t["reward"]},
            "messages": [],
        }
        for t in trials
    ]
    src = tmp_path / "gpt-4o-airline.json"
    src.write_text(json.dumps({"info": {"num_trials": 4}, "tasks": [], "simulations": sims}))
    run = ingest(src, tmp_path / "run")
    rewards: dict[str, list[float]] = defaultdict(list)
    for t in trials:
        rewards[str(t["task_id"])].append(float(t["reward"]))
    [arm] = json.loads((run / "grades-summary.json").read_text())["per_arm"].values()
    curve = arm["scores"]["curve"]
    assert [round(p["pass_hat_j"], 3) for p in curve] == [0.42, 0.273, 0.22, 0.2]
    for p in curve:
        assert p["pass_hat_j"] == pytest.approx(tau2_pass_hat_k(rewards, p["j"]), abs=1e-12)


def test_an_infrastructure_error_is_an_errored_key_and_the_run_incomplete(tmp_path: Path) -> None:
    doc = json.loads((DATA / "results.json").read_text())
    doc["simulations"][0]["termination_reason"] = "infrastructure_error"
    src = tmp_path / "infra.json"
    src.write_text(json.dumps(doc))
    run = ingest(src, tmp_path / "run")
    assert ("task-0", 0) not in {(r["case_id"], r["index"]) for r in iter_jsonl(run / "results.jsonl")}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] is False and "infrastructure_error" in summary["reason"]


def test_an_unknown_termination_reason_is_refused_by_name(tmp_path: Path) -> None:
    doc = json.loads((DATA / "results.json").read_text())
    doc["simulations"][1]["termination_reason"] = "gave_up"
    src = tmp_path / "odd.json"
    src.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="termination_reason 'gave_up' is not one of tau2-bench's"):
        ingest(src, tmp_path / "run")


def test_every_tau2_termination_reason_maps_to_an_evalkit_ending() -> None:
    """tau2-bench's `TerminationReason` values (src/tau2/data_model/simulation.py), all but
    `infrastructure_error` (a simulation that never ran), map into evalkit's endings."""
    tau2 = {
        "user_stop",
        "agent_stop",
        "max_steps",
        "timeout",
        "too_many_errors",
        "agent_error",
        "user_error",
        "context_window_exceeded",
        "unexpected_error",
    }
    evalkit_endings = {"user_stop", "transfer", "out_of_scope", "max_turns", "agent_error", "simulator_error", "cap"}
    assert set(TAU2_ENDINGS) == tau2 and set(TAU2_ENDINGS.values()) <= evalkit_endings
