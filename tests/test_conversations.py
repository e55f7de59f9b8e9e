"""Conversations end to end, over real HTTP: a scripted simulated user and a scripted agent
(two scripted servers, the real openai client), two arms meeting the same user, the
endings, the trajectories, the simulator on the one ledger under the cap, replays at $0,
and faults on the simulator's calls; the suite format and `init --conversation`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.calls.serve import ScriptedServer
from evalkit.conversations.simulator import split_marker
from evalkit.foundations._io import iter_jsonl
from evalkit.foundations.errors import InputError
from evalkit.foundations.findings import Findings
from evalkit.running.runner import run_suite
from evalkit.suites import reader
from evalkit.suites.suite import scaffold_suite
from evalkit.suites.suite_scaffold import SIMULATOR_PROMPT_V1

PRICE = {"in_per_mtok": 1.0, "out_per_mtok": 2.0}
BASE = {
    "mode": "chat",
    "generator": {"model": "scripted", "api_key_env": "EVALKIT_TEST_KEY"},
    "temperature": 0.0, "seed": 7, "k": 2, "concurrency": 4, "cost_cap_usd": 1.0,
    "max_tokens_in": 4000, "max_tokens_out": 40, "price": PRICE, "judge_price": PRICE,
    "max_attempts": 3, "arms": [{"name": "baseline"}, {"name": "other", "system": "system-other.txt"}],
}
# The simulated user: later states of the conversation first (the rule sees all of it).
USER_SCRIPT = {"model": "sim", "rules": [
    {"match": "refund is on its way", "text": "Great, thanks for the help. ###STOP###"},
    {"match": "a human colleague", "text": "###TRANSFER###"},
    {"match": "order 1042", "text": "I want a refund for order 1042."},
    {"match": "chatty", "text": "Tell me more."},
]}
AGENT_SCRIPT = {"model": "scripted", "rules": [
    {"match": "refund for order 1042", "text": "Done: your refund is on its way."},
    {"match": "angry", "text": "Let me pass you to a human colleague."},
    {"match": "Tell me more", "text": "Sure."},
]}
REFUND = {"id": "refund", "input": {"user": {"persona": "Sam", "reason_for_call": "refund of order 1042",
                                            "known_info": "order 1042"}},
          "tags": ["golden"], "checks": [{"kind": "contains", "value": "refund", "case_fold": True}]}
ANGRY = {"id": "angry", "input": {"user": {"persona": "angry"}, "first_message": "I am angry about my parcel"},
         "tags": ["golden"], "checks": [{"kind": "contains", "value": "refund"}]}
CHATTY = {"id": "chatty", "input": {"user": {"persona": "chatty"}, "max_turns": 3},
          "tags": ["golden"], "checks": [{"kind": "contains", "value": "Sure"}]}


def write_suite(root: Path, cases: list[dict], sim_url: str, **config) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    sim = {"model": "sim", "base_url": sim_url, "api_key_env": "EVALKIT_TEST_KEY", "price": PRICE,
           "temperature": 0.0, "max_tokens_out": 30}
    (root / "config.json").write_text(json.dumps({**BASE, "simulator": sim, **config}))
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (root / "system.txt").write_text("You are the shop's agent.")
    (root / "system-other.txt").write_text("You are the shop's other agent.")
    (root / "simulator").mkdir()
    (root / "simulator" / "prompt-v1.md").write_text(SIMULATOR_PROMPT_V1)
    return root


def results(run: Path) -> list[dict]:
    path = run / "results.jsonl"
    return list(iter_jsonl(path)) if path.exists() else []


def ledger(run: Path) -> list[dict]:
    return list(iter_jsonl(run / "ledger.jsonl"))


@pytest.fixture
def servers():
    with ScriptedServer(USER_SCRIPT) as user, ScriptedServer(AGENT_SCRIPT) as agent:
        yield user, agent


def run(suite: Path, tmp_path: Path, agent: ScriptedServer, name: str = "runs", **kw):
    return run_suite(suite, runs_dir=tmp_path / name, base_url=agent.base_url, progress=False, **kw)


def test_two_arms_meet_the_same_user_and_every_ending_is_named(tmp_path, servers):
    user, agent = servers
    suite = write_suite(tmp_path / "suite", [REFUND, ANGRY, CHATTY], user.base_url)
    res = run(suite, tmp_path, agent)
    assert res.complete, res.reason
    rows = {(r["case_id"], r["arm"], r["index"]): r for r in results(res.path)}
    assert len(rows) == 3 * 2 * 2
    refund = rows[("refund", "other", 1)]
    assert refund["termination"] == "user_stop" and refund["turns"] == 1
    # the text before the stop marker is the user's last turn, kept
    assert [t["role"] for t in refund["agent"]["conversation"]] == ["user", "assistant", "user"]
    assert refund["agent"]["conversation"][-1]["content"] == "Great, thanks for the help."
    assert refund["output"] == "Done: your refund is on its way."
    angry = rows[("angry", "baseline", 0)]
    assert angry["termination"] == "transfer" and angry["agent"]["conversation"][0]["content"].startswith("I am angry")
    assert len(angry["agent"]["conversation"]) == 2  # the marker alone adds no user turn
    chatty = rows[("chatty", "baseline", 1)]
    assert chatty["termination"] == "max_turns" and chatty["turns"] == 3
    # the simulator is paid once per conversation state: the second arm's identical
    # conversations replay its answers from the cache at $0
    sim_calls = [e for e in ledger(res.path) if e.get("role") == "simulator" and e.get("event") == "reserve"]
    sim_sent = user.stats["requests"]
    # per index: refund 2 turns, chatty 3, angry 1 (it opens with its first_message)
    assert sim_sent == len(sim_calls) == 2 * (2 + 3 + 1)
    assert sum(r["agent"]["simulator_cached_calls"] for r in rows.values()) == sim_sent
    summary = json.loads((res.path / "summary.json").read_text())
    assert summary["simulator_spend_usd"] > 0
    assert summary["spend_usd"] == pytest.approx(
        summary["simulator_spend_usd"] + sum(a["paid_usd"] for a in summary["per_arm"].values()), abs=1e-9)
    meta = json.loads((res.path / "config.json").read_text())
    assert meta["simulator"]["prompt_file"] == "simulator/prompt-v1.md"


def test_the_trajectory_holds_every_turn_and_the_ending(tmp_path, servers):
    user, agent = servers
    suite = write_suite(tmp_path / "suite", [REFUND], user.base_url, k=1)
    res = run(suite, tmp_path, agent)
    traj = list(iter_jsonl(res.path / "trajectories" / "refund" / "baseline" / "sample-1.jsonl"))
    kinds = [t["type"] for t in traj if t.get("status") != "sent"]  # a call's "sent" line precedes its outcome
    assert kinds == ["start", "user", "model_call", "assistant", "user", "end"]
    assert traj[-1]["termination"] == "user_stop" and traj[-1]["status"] == "finished"
    assert traj[-2]["ending"] == "user_stop" and traj[-2]["content"] == "Great, thanks for the help."


def test_the_same_conversations_replay_at_zero_dollars(tmp_path, servers):
    user, agent = servers
    suite = write_suite(tmp_path / "suite", [REFUND, CHATTY], user.base_url)
    first = run(suite, tmp_path, agent)
    sent = (user.stats["requests"], agent.stats["requests"])
    again = run(suite, tmp_path, agent)
    assert again.complete and again.spend_usd == 0.0
    assert (user.stats["requests"], agent.stats["requests"]) == sent
    strip = [(r["case_id"], r["arm"], r["index"], r["agent"]["conversation"], r["termination"])
             for r in results(first.path)]
    assert sorted(strip) == sorted((r["case_id"], r["arm"], r["index"], r["agent"]["conversation"], r["termination"])
                                   for r in results(again.path))


SIM_USAGE = {"prompt_tokens": 3000, "completion_tokens": 20}  # $0.00304 a simulator call
AGENT_USAGE = {"prompt_tokens": 100, "completion_tokens": 5}  # $0.00011 an agent call


def test_the_cap_covers_the_simulator_and_cut_conversations_get_no_result_line(tmp_path):
    user_script = {"model": "sim", "default": {"text": "Tell me more.", "usage": SIM_USAGE}, "latency_s": 0.01}
    agent_script = {"model": "scripted", "default": {"text": "Sure.", "usage": AGENT_USAGE}}
    cases = [{**CHATTY, "id": f"chatty-{i}", "input": {**CHATTY["input"], "max_turns": 8}} for i in range(4)]
    with ScriptedServer(user_script) as user, ScriptedServer(agent_script) as agent:
        # a call at worst: 4000 x 1 + 40 x 2 per million, $0.00408: a dozen in flight fit
        suite = write_suite(tmp_path / "suite", cases, user.base_url, cost_cap_usd=0.08, concurrency=2)
        res = run(suite, tmp_path, agent)
        # what the servers were really owed, at the usage they reported, is under the cap
        owed = user.stats["requests"] * 0.00304 + agent.stats["requests"] * 0.00011
    assert owed <= 0.08 + 1e-9 and res.spend_usd <= 0.08 + 1e-12
    assert owed == pytest.approx(res.spend_usd)
    assert not res.complete and "budget" in (res.reason or "")
    events = ledger(res.path)
    assert {e.get("role") for e in events if e.get("event") == "reserve"} == {"generator", "simulator"}
    rows = results(res.path)
    assert rows, "some conversations finished before the cap"
    for r in rows:  # only whole conversations have a line
        assert r["termination"] == "max_turns" and r["turns"] == 8
    cut = [t for t in (res.path / "trajectories").rglob("sample-*.jsonl")
           if list(iter_jsonl(t))[-1].get("termination") == "cap"]
    assert cut, "the cap cut some conversation"
    assert len(results(res.path)) + len(cut) <= 4 * 2 * 2


@pytest.mark.parametrize("fault", [
    {"kind": "429", "retry_after": 0.01, "times": 2},
    {"kind": "drop", "times": 2},
    {"kind": "malformed", "times": 2},
])
def test_passing_faults_on_the_simulators_calls_are_retried(tmp_path, fault):
    with ScriptedServer({**USER_SCRIPT, "faults": [fault]}) as user, ScriptedServer(AGENT_SCRIPT) as agent:
        suite = write_suite(tmp_path / "suite", [REFUND], user.base_url, k=1)
        res = run(suite, tmp_path, agent)
    assert res.complete, res.reason
    assert {r["termination"] for r in results(res.path)} == {"user_stop"}


def test_a_simulator_that_keeps_failing_ends_its_conversation_as_simulator_error(tmp_path):
    with ScriptedServer({**USER_SCRIPT, "faults": [{"kind": "malformed"}]}) as user, \
            ScriptedServer(AGENT_SCRIPT) as agent:
        suite = write_suite(tmp_path / "suite", [ANGRY, REFUND], user.base_url, k=1, max_attempts=2)
        res = run(suite, tmp_path, agent)
    rows = {r["case_id"]: r for r in results(res.path) if r["arm"] == "baseline"}
    assert rows["refund"]["termination"] == "simulator_error" and rows["refund"]["turns"] == 0
    assert rows["angry"]["termination"] == "transfer" or rows["angry"]["termination"] == "simulator_error"


def test_an_agent_that_keeps_failing_ends_its_conversation_as_agent_error(tmp_path):
    with ScriptedServer(USER_SCRIPT) as user, ScriptedServer({**AGENT_SCRIPT, "faults": [{"kind": "500"}]}) as agent:
        suite = write_suite(tmp_path / "suite", [REFUND], user.base_url, k=1, max_attempts=2)
        res = run(suite, tmp_path, agent)
    assert {r["termination"] for r in results(res.path)} == {"agent_error"}


def test_stop_markers_keep_the_text_before_them():
    assert split_marker("Thanks, bye ###STOP### ignored") == ("Thanks, bye", "user_stop")
    assert split_marker("###OUT-OF-SCOPE###") == ("", "out_of_scope")
    assert split_marker("go on") == ("go on", None)
    assert split_marker("a ###TRANSFER### b ###STOP###") == ("a", "transfer")


def lint_errors(suite: Path) -> list[str]:
    with pytest.raises(InputError) as err:
        reader.load_suite(suite)
    return [str(err.value)]


@pytest.mark.parametrize(("change", "says"), [
    (lambda cfg, root: cfg["simulator"].pop("price"), "price"),
    (lambda cfg, root: cfg["simulator"].update(base_url="ftp://x"), "base_url"),
    (lambda cfg, root: (root / "simulator" / "prompt-v1.md").unlink(), "simulator/prompt-v1.md"),
    (lambda cfg, root: cfg["simulator"].update(max_tokens_out=10**6), "max_tokens_out"),
    (lambda cfg, root: cfg.update(unit={"kind": "python", "callable": "m:f"}), "conversation"),
])
def test_the_simulator_is_checked_as_the_generator_and_judge_are(tmp_path, change, says):
    root = write_suite(tmp_path / "suite", [REFUND], "http://127.0.0.1:9/v1")
    cfg = json.loads((root / "config.json").read_text())
    change(cfg, root)
    (root / "config.json").write_text(json.dumps(cfg))
    assert says in lint_errors(root)[0]


@pytest.mark.parametrize(("case", "says"), [
    ({**REFUND, "input": {"first_message": "hi"}}, "input.user"),
    ({**REFUND, "input": {"user": {"persona": 3}}}, "input.user.persona"),
    ({**REFUND, "input": {"user": {"persona": "x"}, "max_turns": 101}}, "max_turns"),
    ({**REFUND, "input": {"user": {"persona": "x", "mood": "y"}}}, "mood"),
    ({**REFUND, "input": "a string"}, "conversation"),
])
def test_a_cases_simulated_user_is_checked(tmp_path, case, says):
    root = write_suite(tmp_path / "suite", [case], "http://127.0.0.1:9/v1")
    assert says in lint_errors(root)[0]


def test_init_conversation_writes_a_two_arm_suite_that_lints(tmp_path):
    dest = scaffold_suite(tmp_path / "shop", conversation=True)
    suite = reader.load_suite(dest)
    assert suite.config.simulator is not None and suite.config.simulator.prompt_file == "simulator/prompt-v1.md"
    assert [a.name for a in suite.config.arms] == ["baseline", "careful"]
    assert all(isinstance(c.input, dict) and "user" in c.input for c in suite.cases)
    assert Findings  # the findings type the lint reports with


def test_the_simulator_has_no_silent_default_endpoint(tmp_path):
    with ScriptedServer(AGENT_SCRIPT) as agent:
        suite = write_suite(tmp_path / "suite", [REFUND], "http://127.0.0.1:9/v1")
        cfg = json.loads((suite / "config.json").read_text())
        cfg["simulator"]["base_url"] = None
        (suite / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(InputError, match="EVALKIT_SIMULATOR_BASE_URL"):
            run(suite, tmp_path, agent)


JUDGE = {"model": "judge-model", "rules": [
    {"match": ["User: I want a refund for order 1042.", "Agent: Done: your refund is on its way."],
     "text": "SCORE: 5 REASON: the refund is confirmed"},
], "default": {"text": "SCORE: 1 REASON: no"}}


def judged_suite(tmp_path: Path, sim_url: str, judge_url: str) -> Path:
    cases = [
        {**REFUND, "expected": {"nl_assertions": ["The agent confirms the refund."]}, "checks": []},
        {**CHATTY, "checks": [
            {"kind": "regex", "pattern": "^Sure\\.$"},  # the final assistant message
            {"kind": "contains", "value": "Sure.\n\nSure.\n\nSure.", "scope": "conversation"},
        ]},
        {**CHATTY, "id": "chatty-final", "checks": [{"kind": "contains", "value": "Sure.\n\nSure."}]},
    ]
    root = write_suite(tmp_path / "suite", cases, sim_url, judge={"model": "judge-model", "base_url": judge_url},
                       allow_uncalibrated_judge=True)
    (root / "judge").mkdir()
    (root / "judge" / "rubric-v1.md").write_text("5: every statement holds. 1: one does not.\n")
    from evalkit.suites.suite_scaffold import JUDGE_PROMPT_TEMPLATE
    (root / "judge" / "prompt-v1.md").write_text(JUDGE_PROMPT_TEMPLATE)
    return root


def test_checks_read_the_final_message_or_the_whole_conversation_and_nl_assertions_are_judged(tmp_path, servers):
    from evalkit.conclusions.grading import grade_run

    user, agent = servers
    with ScriptedServer(JUDGE) as judge:
        suite = judged_suite(tmp_path, user.base_url, judge.base_url)
        res = run(suite, tmp_path, agent)
        grade_run(res.path, judge_base_url=judge.base_url)
        judge_texts = [json.dumps(b) for b in judge.requests]
    grades = {(g["case_id"], g["arm"], g["index"]): g for g in iter_jsonl(res.path / "grades.jsonl")}
    assert all(grades[("chatty", a, i)]["passed"] for a in ("baseline", "other") for i in (0, 1))
    assert not any(grades[("chatty-final", a, i)]["passed"] for a in ("baseline", "other") for i in (0, 1))
    refund = [g for k, g in grades.items() if k[0] == "refund"]
    assert all(g["passed"] and g["judge_score"] == 5 for g in refund)
    # the judge read the whole transcript, once per distinct conversation (both arms' are one)
    assert 1 <= len(judge_texts) <= 4 and all("Agent: Done: your refund is on its way." in t for t in judge_texts)


def test_a_simulator_error_is_not_graded_as_the_agents_failure(tmp_path):
    from evalkit.conclusions.grading import grade_run

    with ScriptedServer({**USER_SCRIPT, "faults": [{"kind": "500"}]}) as user, ScriptedServer(AGENT_SCRIPT) as agent:
        suite = write_suite(tmp_path / "suite", [REFUND], user.base_url, k=1, max_attempts=1)
        res = run(suite, tmp_path, agent)
    grade_run(res.path)
    for g in iter_jsonl(res.path / "grades.jsonl"):
        assert g["passed"] is None and g["error"].startswith("simulator_error")


@pytest.mark.parametrize(("case", "says"), [
    ({**REFUND, "expected": {"nl_assertions": []}}, "nl_assertions"),
    ({**REFUND, "expected": {"nl_assertions": ["x"], "rubric": "y"}}, "both"),
    ({**REFUND, "checks": [{"kind": "contains", "value": "x", "scope": "everything"}]}, "scope"),
])
def test_conversation_checks_are_checked(tmp_path, case, says):
    root = write_suite(tmp_path / "suite", [case], "http://127.0.0.1:9/v1",
                       judge={"model": "judge-model", "base_url": "http://127.0.0.1:9/v1"})
    assert says in lint_errors(root)[0]


REVIEWER = {"model": "judge-model", "rules": [
    {"match": ["BLAME: user|agent", "persona: angry"], "text": "BLAME: user REASON: it asked for a human at once"},
    {"match": "BLAME: user|agent", "text": "BLAME: agent REASON: the agent never helped"},
], "default": {"text": "SCORE: 1 REASON: no"}}


def test_failed_conversations_are_reviewed_and_the_simulator_blamed_ones_counted_apart(tmp_path, servers):
    from evalkit.conclusions.conversations import review_conversations
    from evalkit.conclusions.grading import grade_run

    user, agent = servers
    chatty_fails = {**CHATTY, "checks": [{"kind": "contains", "value": "refund"}]}
    with ScriptedServer(REVIEWER) as judge:
        suite = write_suite(tmp_path / "suite", [REFUND, ANGRY, chatty_fails], user.base_url,
                            judge={"model": "judge-model", "base_url": judge.base_url})
        res = run(suite, tmp_path, agent)
        grade_run(res.path)
        summary = review_conversations(res.path)
        reviews = judge.stats["requests"]
    # a review per failed conversation (angry and chatty, 2 arms x k=2); identical
    # transcripts make identical requests: one paid call each, the rest from the judge cache
    blames = {(r["case_id"], r["arm"], r["index"]): r for r in iter_jsonl(res.path / "conversation-review.jsonl")}
    assert len(blames) == 8 and reviews == 2
    assert {b["blame"] for k, b in blames.items() if k[0] == "angry"} == {"user"}
    assert {b["blame"] for k, b in blames.items() if k[0] == "chatty"} == {"agent"}
    arm = summary["per_arm"]["baseline"]
    assert arm["conversations"] == 6 and arm["passed"] == 2 and arm["simulator_blamed"] == 2
    assert arm["pass_rate"] == pytest.approx(2 / 6)
    assert arm["pass_rate_without_simulator_blamed"] == pytest.approx(2 / 4)
    assert arm["simulator_blamed_share_of_failures"] == pytest.approx(2 / 4)
    assert arm["pass_hat_k"]["2"] == pytest.approx(1 / 3) and arm["pass_hat_k_without_simulator_blamed"]["2"] == 0.5
    assert arm["endings"] == {"user_stop": 2, "transfer": 2, "max_turns": 2}
    assert summary["simulator_spend_usd"] > 0 and summary["reviews"]["blame"] == {"user": 4, "agent": 4}
    assert json.loads((res.path / "conversations.json").read_text()) == summary


def test_two_different_arms_meet_the_same_user_and_are_compared_per_case(tmp_path):
    from evalkit.conclusions.compare import compare
    from evalkit.conclusions.grading import grade_run

    user_script = {**USER_SCRIPT, "rules": [{"match": "help with that", "text": "Too bad. ###OUT-OF-SCOPE###"},
                                            *USER_SCRIPT["rules"]]}
    agent_script = {**AGENT_SCRIPT, "rules": [{"match": ["other agent", "refund for order 1042"],
                                               "text": "I cannot help with that."}, *AGENT_SCRIPT["rules"]]}
    cases = [{**REFUND, "id": f"refund-{i}"} for i in range(6)]
    with ScriptedServer(user_script) as user, ScriptedServer(agent_script) as agent:
        suite = write_suite(tmp_path / "suite", cases, user.base_url, k=3)
        res = run(suite, tmp_path, agent)
    rows = results(res.path)
    # the simulator's opening depends on (case, index), never the arm: both arms met the same user
    first = {(r["case_id"], r["index"], r["arm"]): r["agent"]["conversation"][0]["content"] for r in rows}
    assert all(first[(c, i, "baseline")] == first[(c, i, "other")] for c, i, _ in first)
    assert {r["termination"] for r in rows if r["arm"] == "other"} == {"out_of_scope"}
    grade_run(res.path)
    v = compare(res.path, "baseline", "other")
    assert (v.wins, v.losses, v.ties) == (6, 0, 0) or (v.wins, v.losses) == (0, 6)
    assert v.p_value is not None and v.p_value < 0.05


TAU2_TASKS = [
    {"id": "0", "user_scenario": {"persona": "Calm", "instructions": {
        "domain": "airline", "reason_for_call": "cancel reservation EHGLP3", "known_info": "user id emma_kim_9957",
        "unknown_info": "the booking date", "task_instructions": "insist on a refund"}},
     "evaluation_criteria": {
         "actions": [{"action_id": "a1", "name": "get_reservation_details", "arguments": {"reservation_id": "EHGLP3"}},
                     {"action_id": "u1", "requestor": "user", "name": "toggle_airplane_mode", "arguments": {}}],
         "communicate_info": ["EHGLP3"],
         "nl_assertions": ["The agent refuses the refund politely."]}},
    {"id": "1", "user_scenario": {"instructions": "Ask about baggage."},
     "evaluation_criteria": {"communicate_info": ["two bags"]}},
    {"id": "2", "user_scenario": {"instructions": "Say hello."}, "evaluation_criteria": {}},
]


def test_a_tau2_tasks_file_is_imported_as_a_conversation_suite(tmp_path):
    from evalkit.intake.lint import import_suite

    src = tmp_path / "tasks.json"
    src.write_text(json.dumps(TAU2_TASKS, indent=1))
    warnings: list = []
    dest = import_suite(src, tmp_path / "airline", on_warning=warnings.append)
    suite = reader.load_suite(dest)
    assert suite.config.simulator is not None and suite.config.unit.kind == "agent"
    cases = {c.id: c for c in suite.cases}
    assert sorted(cases) == ["task-0", "task-1"]  # task 2 has nothing to check: skipped, with a warning
    t0 = cases["task-0"]
    assert t0.input["user"] == {"persona": "Calm", "reason_for_call": "cancel reservation EHGLP3",
                                "known_info": "user id emma_kim_9957", "unknown_info": "the booking date",
                                "task_instructions": "insist on a refund"}
    assert t0.tags == ("airline",) and t0.judged and "refuses the refund" in (t0.rubric or "")
    kinds = {c.kind: c.options for c in t0.checks}
    assert kinds["contains"] == {"value": "EHGLP3", "case_fold": True, "scope": "conversation"}
    assert kinds["tool_calls"]["calls"] == [{"name": "get_reservation_details",
                                             "arguments": {"reservation_id": "EHGLP3"}}]  # the user's action left out
    assert cases["task-1"].input["user"] == {"task_instructions": "Ask about baggage."}
    said = " ".join(str(w) for w in warnings)
    assert "policy" in said and "nothing to check" in said


def tau2_sim(task: str, trial: int, reward: float, end: str = "user_stop") -> dict:
    return {"id": f"{task}-{trial}", "task_id": task, "trial": trial, "termination_reason": end,
            "reward_info": {"reward": reward}, "agent_cost": 0.01, "user_cost": 0.02, "duration": 1.5,
            "messages": [{"role": "assistant", "content": "Hi! How can I help?"},
                         {"role": "user", "content": "Cancel my trip."},
                         {"role": "assistant", "content": None, "tool_calls": [{"name": "cancel"}]},
                         {"role": "tool", "content": "ok"},
                         {"role": "assistant", "content": "Done."}]}


def test_tau2_simulation_results_are_ingested_as_conversations(tmp_path):
    from evalkit.conclusions.conversations import conversation_summary
    from evalkit.conclusions.grading import read_samples
    from evalkit.conclusions.ingest import detect_format, ingest

    src = tmp_path / "gpt-4.1.json"
    sims = [tau2_sim("0", 0, 1.0), tau2_sim("0", 1, 0.0, "max_steps"), tau2_sim("1", 0, 1.0),
            tau2_sim("1", 1, 0.0, "user_error")]
    src.write_text(json.dumps({"info": {"num_trials": 2}, "tasks": [], "simulations": sims}))
    assert detect_format(src) == "tau2"
    run_dir = ingest(src, tmp_path / "run")
    rows = {(r["case_id"], r["index"]): r for r in results(run_dir)}
    assert rows[("task-0", 1)]["termination"] == "max_turns" and rows[("task-1", 1)]["termination"] == "simulator_error"
    assert rows[("task-0", 0)]["agent"]["conversation"] == [
        {"role": "assistant", "content": "Hi! How can I help?"}, {"role": "user", "content": "Cancel my trip."},
        {"role": "assistant", "content": "Done."}]
    assert rows[("task-0", 0)]["output"] == "Done." and rows[("task-0", 0)]["turns"] == 2
    grades = list(iter_jsonl(run_dir / "grades.jsonl"))
    by = {(g["case_id"], g["index"]): g for g in grades}
    assert by[("task-1", 1)]["passed"] is None and by[("task-0", 1)]["passed"] is False
    arm = conversation_summary(run_dir, read_samples(run_dir), grades, {}, 2)["per_arm"]["gpt-4"]
    # pass^1: (1/2 + 1/2) / 2 with every conversation; without the simulator's failure task-1 is 1/1
    assert arm["pass_hat_k"]["1"] == pytest.approx(0.5)
    assert arm["pass_hat_k_without_simulator_blamed"]["1"] == pytest.approx(0.75)
    assert arm["endings"] == {"user_stop": 2, "max_turns": 1, "simulator_error": 1}


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "conversation"


def test_the_example_suite_runs_grades_compares_and_reviews_on_the_scripted_server(tmp_path):
    import shutil

    from evalkit.conclusions.compare import compare
    from evalkit.conclusions.conversations import review_conversations
    from evalkit.conclusions.grading import grade_run

    suite = tmp_path / "conversation"
    shutil.copytree(EXAMPLE, suite)
    with ScriptedServer(json.loads((EXAMPLE / "scripted.json").read_text())) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, simulator_base_url=srv.base_url,
                        progress=False)
        assert res.complete, res.reason
        grade_run(res.path, judge_base_url=srv.base_url)
        summary = review_conversations(res.path, judge_base_url=srv.base_url)
        again = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, simulator_base_url=srv.base_url,
                          progress=False)
    assert again.spend_usd == 0.0  # the same conversations replay at $0
    base, careful = summary["per_arm"]["baseline"], summary["per_arm"]["careful"]
    assert careful["passed"] == 6 and base["passed"] == 3  # baseline never confirms the address
    assert base["endings"] == {"user_stop": 3, "max_turns": 3, "transfer": 3}
    assert careful["simulator_blamed"] == 3 and careful["pass_rate_without_simulator_blamed"] == 1.0
    assert 0 < summary["simulator_spend_usd"] < summary["simulator_spend_usd"] + summary["agent_spend_usd"]
    v = compare(res.path, "baseline", "careful")
    assert (v.wins, v.losses) == (1, 0)  # careful wins the address case (one vote per case over its k)


def test_a_review_that_copies_the_prompts_choice_blames_no_one():
    """SmolLM2-135M answered reviews with the prompt's own line, `BLAME: user|agent REASON:
    <one sentence>`, which was read as blaming the user (8 of 10 reviews of the local example)."""
    from evalkit.conclusions.conversations import parse_blame

    for copied in ("BLAME: user|agent REASON: <one sentence>", "BLAME: user | agent", "blame: Agent|user"):
        with pytest.raises(ValueError, match="no BLAME"):
            parse_blame(copied)
    assert parse_blame("BLAME: agent REASON: it never confirmed") == ("agent", "it never confirmed")


LOCAL_EXAMPLE = EXAMPLE.parent / "conversation-local"


def test_the_local_example_lints_clean_and_every_role_is_played_by_the_served_tools_model(monkeypatch):
    """examples/conversation-local (its measured run: its README, benchmarks/bench_conversations.py)
    stays valid: no lint error, a conversation suite whose simulator, agents and judge all
    resolve to `evalkit serve --tools-model`'s server, with no key and no endpoint of their own."""
    from evalkit.calls.serve import TOOLS_MODEL_ALIAS
    from evalkit.intake.lint import lint_suite, load_suite
    from evalkit.suites.endpoints import GENERATOR_URL_ENV, SERVED_ENV, resolve_base_url

    report = lint_suite(LOCAL_EXAMPLE)
    assert report.ok, [str(f) for f in report.findings if f.level == "error"]
    config = load_suite(LOCAL_EXAMPLE).config
    assert config.simulator is not None and config.simulator.prompt == SIMULATOR_PROMPT_V1
    url = "http://127.0.0.1:8011/v1"
    monkeypatch.setenv(GENERATOR_URL_ENV, url)  # as `evalkit serve --tools-model -- COMMAND` sets them
    monkeypatch.setenv(SERVED_ENV, json.dumps({"base_url": url, "model": TOOLS_MODEL_ALIAS}))
    for role, endpoint in (("generator", config.generator), ("judge", config.judge),
                           ("simulator", config.simulator.endpoint)):
        assert endpoint is not None and endpoint.model == TOOLS_MODEL_ALIAS and endpoint.base_url is None
        assert resolve_base_url(role, endpoint) == url


def test_under_evalkit_serve_the_served_model_plays_the_user_unless_it_answers_as_another(monkeypatch):
    from evalkit.foundations.records import Endpoint
    from evalkit.suites.endpoints import SERVED_ENV, resolve_base_url

    sim = Endpoint("simulator-model")
    monkeypatch.setenv(SERVED_ENV, json.dumps({"base_url": "http://127.0.0.1:8011/v1", "model": None}))
    assert resolve_base_url("simulator", sim) == "http://127.0.0.1:8011/v1"
    monkeypatch.setenv(SERVED_ENV, json.dumps({"base_url": "http://127.0.0.1:8011/v1", "model": "gemma-3-270m"}))
    with pytest.raises(InputError, match="no base URL for the simulator"):
        resolve_base_url("simulator", sim)


def test_the_replay_shows_two_arms_conversations_side_by_side_turn_by_turn(tmp_path):
    from evalkit.conclusions.grading import grade_run
    from evalkit.telling.replay import render_html, render_text, replay_case

    user_script = {**USER_SCRIPT, "rules": [{"match": "help with that", "text": "Too bad. ###OUT-OF-SCOPE###"},
                                            *USER_SCRIPT["rules"]]}
    agent_script = {**AGENT_SCRIPT, "rules": [{"match": ["other agent", "refund for order 1042"],
                                               "text": "I cannot help with that. <b>Sorry</b>"}, *AGENT_SCRIPT["rules"]]}
    with ScriptedServer(user_script) as user, ScriptedServer(agent_script) as agent:
        suite = write_suite(tmp_path / "suite", [REFUND], user.base_url, k=1)
        res = run(suite, tmp_path, agent)
    grade_run(res.path)
    rep = replay_case(res.path, "refund", ["baseline", "other"])
    text = render_text(rep, width=160)
    assert "--- user 1 " in text and "--- agent 1 " in text and "--- user 2 " in text
    assert "I want a refund for order 1042." in text and "Done: your refund is on its way." in text
    assert "ending: user_stop" in text and "ending: out_of_scope" in text
    page = render_html(rep)
    assert "&lt;b&gt;Sorry&lt;/b&gt;" in page and "<b>Sorry</b>" not in page  # the agent's text escaped


def test_the_conversations_page_shows_spend_blame_and_every_conversation_escaped(tmp_path, servers):
    from evalkit.conclusions.conversations import review_conversations
    from evalkit.conclusions.grading import grade_run
    from evalkit.telling.conversations_page import write_conversations_page

    user, agent = servers
    hostile = {**ANGRY, "id": "angry", "checks": [{"kind": "contains", "value": "refund"}]}
    with ScriptedServer({**REVIEWER, "rules": [{"match": "BLAME", "text": "BLAME: user REASON: <script>x</script>"}]}) \
            as judge:
        suite = write_suite(tmp_path / "suite", [REFUND, hostile], user.base_url,
                            judge={"model": "judge-model", "base_url": judge.base_url})
        res = run(suite, tmp_path, agent)
        grade_run(res.path)
        review_conversations(res.path)
    page = write_conversations_page(res.path, tmp_path / "report").read_text()
    assert "simulator share" in page and "without simulator-blamed" in page and "pass^k" in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "<script>" not in page
    assert page.count("<tr>") >= 1 + 2 + 8  # spend, the two arms, the eight conversations
    assert "transfer" in page and "user_stop" in page


def test_a_conversation_suite_refuses_the_batch_api_and_ray(tmp_path):
    from evalkit.foundations.records import Executor
    from evalkit.running.batch import BatchOptions

    suite = write_suite(tmp_path / "suite", [REFUND], "http://127.0.0.1:9/v1",
                        batch_price={"in_per_mtok": 0.5, "out_per_mtok": 1.0})
    with pytest.raises(InputError, match="conversation's calls each depend"):
        run_suite(suite, runs_dir=tmp_path / "runs", base_url="http://127.0.0.1:9/v1", progress=False,
                  batch=BatchOptions())
    with pytest.raises(InputError, match="no Ray executor"):
        run_suite(suite, runs_dir=tmp_path / "runs", base_url="http://127.0.0.1:9/v1", progress=False,
                  executor=Executor(kind="ray"))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_report_writes_the_conversations_page_beside_the_explorer_and_the_index_links_it(tmp_path, servers):
    from evalkit.conclusions.grading import grade_run
    from evalkit.runfolder.runload import load_run
    from evalkit.telling import reports
    from evalkit.telling.report_index import write_manifest

    user, agent = servers
    suite = write_suite(tmp_path / "suite", [REFUND], user.base_url, k=1)
    res = run(suite, tmp_path, agent)
    grade_run(res.path)
    out = tmp_path / "reports" / res.path.name
    pages, failed = reports._explorer_pages(load_run(res.path), out, reports.report_inputs(res.path), None)
    assert failed == {} and pages["conversations"] == "conversations.html" and (out / "conversations.html").is_file()
    write_manifest(res.path, out, [], {}, run_dir=res.path, pages=pages)
    from evalkit.telling.report_index import build_index

    index = build_index(tmp_path / "reports").read_text()
    assert "conversations.html'>Conversations</a>" in index


# --- the user's program as the agent (a command unit), and the state check --------------

PROGRAM = Path(__file__).parent / "data" / "agents" / "conversation_turn.py"
COMMAND = {"kind": "command", "argv": ["{python}", str(PROGRAM)], "timeout_s": 60}
CANCEL_TOOL = [{"type": "function", "function": {"name": "cancel_order", "parameters": {"type": "object"}}}]
ORDERS = {"orders": {"4412": {"status": "pending"}, "4413": {"status": "pending"}}}
CANCEL_FIXTURE = {"cancel_order": [{"arguments": {"id": "4412"}, "result": "Order 4412 status: cancelled",
                                    "sets": {"orders.4412.status": "cancelled"}}]}
CANCEL_CALLS = [{"name": "cancel_order", "arguments": {"id": "4412"}}]
CANCEL = {"id": "cancel", "tags": ["golden"],
          "input": {"user": {"persona": "Kim"}, "first_message": "Please cancel order 4412.",
                    "state": ORDERS, "tool_results": CANCEL_FIXTURE},
          "checks": [{"kind": "tool_calls", "calls": CANCEL_CALLS},
                     {"kind": "state"},  # replayed: the state the expected calls produce
                     {"kind": "state", "expected": {"orders": {"4412": {"status": "cancelled"},
                                                               "4413": {"status": "pending"}}}}]}
# the same conversation held to a state it does not leave: fails, naming the path
CANCEL_WRONG = {**CANCEL, "id": "cancel-wrong", "checks": [
    {"kind": "state", "expected": {"orders": {"4412": {"status": "pending"}, "4413": {"status": "pending"}}}}]}
# a check the empty output of a crashed conversation would meet: agent_error still fails it
CRASH = {"id": "crash", "tags": ["golden"], "input": {"user": {"persona": "Lee"}, "first_message": "crash now"},
         "checks": [{"kind": "regex", "pattern": "^(?!.*password)", "flags": "is"}]}
PROGRAM_USER = {"model": "sim", "rules": [
    {"match": "is cancelled", "text": "Thank you. ###STOP###"}, *USER_SCRIPT["rules"]]}
PROGRAM_AGENT = {"model": "scripted", "rules": [
    {"match": "Order 4412 status: cancelled", "text": "Order 4412 is cancelled."},
    {"match": "cancel order 4412", "tool_calls": [{"name": "cancel_order", "arguments": {"id": "4412"}}]},
    *AGENT_SCRIPT["rules"]]}


def program_suite(root: Path, cases: list[dict], sim_url: str, **config) -> Path:
    arms = [{"name": "baseline"}, {"name": "careful", "guidance": "careful.md"}]
    root = write_suite(root, cases, sim_url, unit=COMMAND, tools=CANCEL_TOOL, arms=arms, **config)
    (root / "careful.md").write_text("Be careful.")
    return root


def test_the_users_program_converses_on_two_arms_is_graded_and_replays_at_zero_dollars(tmp_path):
    from evalkit.conclusions.grading import grade_run

    with ScriptedServer(PROGRAM_USER) as user, ScriptedServer(PROGRAM_AGENT) as agent:
        suite = program_suite(tmp_path / "suite", [REFUND, CANCEL, CANCEL_WRONG], user.base_url)
        res = run(suite, tmp_path, agent)
        assert res.complete, res.reason
        sent = (user.stats["requests"], agent.stats["requests"])
        bodies = agent.requests
        again = run(suite, tmp_path, agent)
        assert again.complete and again.spend_usd == 0.0
        assert (user.stats["requests"], agent.stats["requests"]) == sent
    rows = {(r["case_id"], r["arm"], r["index"]): r for r in results(res.path)}
    assert len(rows) == 3 * 2 * 2
    refund = rows[("refund", "careful", 0)]
    assert refund["termination"] == "user_stop" and refund["output"] == "Done: your refund is on its way."
    assert refund["agent"]["unit"] == "command" and refund["agent"]["isolation"] == "sandbox"
    # each turn's program got the conversation so far, its user's turn last; the arm's guidance too
    first = next(b for b in bodies if "refund for order 1042" in json.dumps(b) and "careful" in json.dumps(b))
    assert first["messages"][-1] == {"role": "user", "content": "I want a refund for order 1042."}
    cancel = rows[("cancel", "baseline", 1)]
    assert cancel["termination"] == "user_stop" and cancel["output"] == "Order 4412 is cancelled."
    assert [(c["name"], c["arguments"]) for c in cancel["tool_calls"]] == [("cancel_order", {"id": "4412"})]
    assert cancel["agent"]["state"]["orders"]["4412"] == {"status": "cancelled"}
    # the trajectory: the program's model and tool calls between the turns, the final state at the end
    traj = list(iter_jsonl(res.path / "trajectories" / "cancel" / "baseline" / "sample-1.jsonl"))
    kinds = [t["type"] for t in traj if t.get("status") != "sent"]
    assert kinds == ["start", "user", "model_call", "tool", "model_call", "assistant", "user", "end"]
    assert traj[kinds.index("tool") + 1]["sets"] == {"orders.4412.status": "cancelled"}
    assert traj[-1]["state"] == cancel["agent"]["state"]
    grade_run(res.path)
    grades = {(g["case_id"], g["arm"], g["index"]): g for g in iter_jsonl(res.path / "grades.jsonl")}
    assert all(g["passed"] for k, g in grades.items() if k[0] != "cancel-wrong")
    wrong = grades[("cancel-wrong", "careful", 1)]
    assert wrong["passed"] is False
    reason = wrong["checks"][0]["reason"]
    assert "orders.4412.status" in reason and "4413" not in reason, reason


def test_a_turn_whose_program_fails_ends_the_conversation_as_agent_error_with_its_stderr_tail(tmp_path):
    with ScriptedServer(PROGRAM_USER) as user, ScriptedServer(PROGRAM_AGENT) as agent:
        suite = program_suite(tmp_path / "suite", [CRASH, REFUND], user.base_url, k=1)
        res = run(suite, tmp_path, agent)
    assert res.complete, res.reason
    rows = {(r["case_id"], r["arm"]): r for r in results(res.path)}
    crash = rows[("crash", "baseline")]
    assert crash["termination"] == "agent_error" and crash["turns"] == 0
    assert crash["agent"]["exit_status"] == 3 and "boom" in crash["agent"]["stderr_tail"]
    assert "exited with status 3" in crash["agent"]["turn_error"]
    end = list(iter_jsonl(res.path / "trajectories" / "crash" / "baseline" / "sample-1.jsonl"))[-1]
    assert end["termination"] == "agent_error" and "boom" in end["stderr_tail"]
    assert rows[("refund", "careful")]["termination"] == "user_stop"  # other conversations go on
    from evalkit.conclusions.grading import grade_run

    grade_run(res.path)
    grades = {(g["case_id"], g["arm"]): g for g in iter_jsonl(res.path / "grades.jsonl")}
    failed = grades[("crash", "baseline")]
    assert failed["passed"] is False  # its one check held on the empty output: never a pass
    assert [c["name"] for c in failed["checks"] if not c["passed"]] == ["agent_error"]


@pytest.mark.parametrize(("case", "says"), [
    ({**CANCEL, "input": {**CANCEL["input"], "state": None}}, "$.input.state"),
    ({**CANCEL, "input": {k: v for k, v in CANCEL["input"].items() if k != "state"}}, "input.state"),
    ({**CANCEL, "checks": [{"kind": "state"}]}, "tool_calls check"),
    ({**CANCEL, "checks": [{"kind": "state", "expected": [1]}]}, "$.checks[0].expected"),
    ({**CANCEL, "input": {**CANCEL["input"], "tool_results": {"cancel_order": {
        "error": "no", "sets": {"a": 1}}}}}, "sets needs a result"),
    ({**CANCEL, "input": {**CANCEL["input"], "tool_results": {"cancel_order": {
        "result": "ok", "sets": {"orders..status": 1}}}}}, "a name between every two dots"),
    ({**CANCEL, "input": {**CANCEL["input"], "state": {"orders": "none"}}}, "'orders' is not an object"),
    # a gold call no fixture answers would make "nothing changed" the expected state
    ({**CANCEL, "checks": [{"kind": "tool_calls", "calls": [{"name": "cancel_order", "arguments": {"id": 4412}}]},
                           {"kind": "state"}]}, "do not replay"),
    # one process's exit status and folder: a conversation runs one a turn
    ({**CANCEL, "checks": [{"kind": "exit_code"}]}, "$.checks[0].kind"),
    ({**CANCEL, "checks": [{"kind": "file_exists", "path": "out.txt"}]}, "once a turn"),
])
def test_a_state_check_and_its_fixtures_are_checked(tmp_path, case, says):
    root = program_suite(tmp_path / "suite", [case], "http://127.0.0.1:9/v1")
    assert says in lint_errors(root)[0]


def test_a_command_unit_lints_in_a_conversation_suite_and_its_state_check_is_replayed(tmp_path):
    suite = reader.load_suite(program_suite(tmp_path / "suite", [CANCEL], "http://127.0.0.1:9/v1"))
    assert suite.config.unit.kind == "command"
    replayed = suite.cases[0].checks[1]
    assert replayed.kind == "state" and replayed.options["replayed"] is True
    assert replayed.options["expected"]["orders"] == {"4412": {"status": "cancelled"}, "4413": {"status": "pending"}}
