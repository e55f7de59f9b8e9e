"""Human-played conversations: a person plays a case's user from the terminal (a pipe into
`evalkit converse`, the unit on the scripted server over real HTTP, its calls on a ledger
under the cap) or the notebook's widgets; the saved file and its bad lines; the
simulator's agreement with people, checked against a hand computation, and the page."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_conversations import AGENT_SCRIPT, ANGRY, CHATTY, REFUND, USER_SCRIPT, run, write_suite

from evalkit.calls.serve import ScriptedServer
from evalkit.conversations.human import transcript_sha256
from evalkit.foundations._io import iter_jsonl
from evalkit.foundations.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def converse(suite: Path, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALKIT_TEST_KEY": "k"}
    return subprocess.run(
        [sys.executable, "-m", "evalkit._cli.main", "converse", str(suite), *args],
        input=stdin, capture_output=True, text=True, env=env, timeout=120,
    )


def plays(suite: Path) -> list[dict]:
    path = suite / "simulator" / "human-played.jsonl"
    return list(iter_jsonl(path)) if path.exists() else []


def test_a_person_plays_the_user_through_a_pipe_on_the_metered_path(tmp_path):
    with ScriptedServer(AGENT_SCRIPT) as agent:
        suite = write_suite(tmp_path / "suite", [REFUND], "http://127.0.0.1:9/v1")
        res = converse(suite, "I want a refund for order 1042.\n\nThanks, bye ###STOP### ignored\npassed\n",
                       "--case", "refund", "--arm", "other", "--player", "ana", "--base-url", agent.base_url)
        sent = [json.dumps(b) for b in agent.requests]
    assert res.returncode == 0, res.stderr
    assert "agent> Done: your refund is on its way." in res.stdout and "ended: user_stop" in res.stdout
    # the person's turn reached the unit with the arm's system prompt; one call (the empty line sent nothing)
    assert len(sent) == 1 and "I want a refund for order 1042." in sent[0] and "shop's other agent" in sent[0]
    [line] = plays(suite)
    assert (line["case_id"], line["arm"], line["player"]) == ("refund", "other", "ana")
    assert line["termination"] == "user_stop"
    assert line["conversation"][-1] == {"role": "user", "content": "Thanks, bye"}  # the text before the marker kept
    assert line["turns"] == 1 and line["transcript_sha256"] == transcript_sha256(line["conversation"])
    assert line["outcome"] == "passed" and line["checks_passed"] is True and line["agent_model"] == "scripted"
    # the call was reserved and settled on the play's ledger, as the agent's (role generator), under the cap
    ledger = list(iter_jsonl(suite / "simulator" / "human-played" / line["play"] / "ledger.jsonl"))
    assert {e.get("role") for e in ledger if e.get("event") == "reserve"} == {"generator"}
    assert line["cost_usd"] > 0
    assert (suite / "simulator" / "human-played" / line["play"] / "trajectories" / "refund" / "other").is_dir()


def test_a_play_cut_by_the_cap_or_left_without_an_ending_saves_nothing(tmp_path):
    with ScriptedServer(AGENT_SCRIPT) as agent:
        suite = write_suite(tmp_path / "suite", [REFUND], "http://127.0.0.1:9/v1")
        common = ("--case", "refund", "--arm", "baseline", "--player", "ana", "--base-url", agent.base_url)
        left = converse(suite, "I want a refund for order 1042.\n", *common)
        # one call at its worst case (4000 in x $1 + 40 out x $2 per million) does not fit under $0.001
        capped = converse(suite, "I want a refund for order 1042.\n", *common, "--cost-cap", "0.001")
        requests = agent.stats["requests"]
    assert left.returncode == 1 and "nothing saved" in left.stderr
    assert capped.returncode == 1 and "BudgetExhausted" in capped.stderr
    assert requests == 1  # the capped play's call never went out
    assert plays(suite) == []


def test_a_judged_cases_play_is_graded_by_the_persons_outcome_and_its_checks():
    from evalkit.conversations.human import HumanPlayed, graded_pass
    from evalkit.foundations.records import Case, Check

    turns = ({"role": "user", "content": "hi"}, {"role": "assistant", "content": "your refund is sent"})
    play = HumanPlayed("p", "c", "a", "ana", "user_stop", turns, "m", outcome=False)
    judged = Case("c", {}, None, (), rubric="The agent confirms.", checks=(Check("contains", {"value": "refund"}),))
    assert graded_pass(judged, play, None) is False  # the person, standing for the judge, saw a failure
    assert graded_pass(judged, dataclasses.replace(play, outcome=None), None) is None
    assert graded_pass(judged, dataclasses.replace(play, outcome=True), None) is True
    checked = Case("c", {}, None, (), checks=(Check("contains", {"value": "nothing like it"}),))
    assert graded_pass(checked, dataclasses.replace(play, outcome=True), None) is False  # the checks decide


def test_a_plays_tools_and_ending_reach_its_checks_as_a_runs_do():
    """The state and tool errors the agent's tools left are kept with the play (a state
    check read no state, a tool_errors check passed on none); an agent_error play fails."""
    from evalkit.conversations.human import HumanPlayed, play_checks
    from evalkit.foundations.records import Case, Check

    turns = ({"role": "user", "content": "cancel 4412"}, {"role": "assistant", "content": "cancelled"})
    facts = {"state": {"orders": {"4412": "cancelled"}}, "tool_errors": [{"name": "x", "error": "no fixture for tool 'x'"}]}
    play = HumanPlayed("p", "c", "a", "ana", "user_stop", turns, "m", facts=facts)
    state = Case("c", {}, None, (), checks=(Check("state", {"expected": {"orders": {"4412": "cancelled"}}}),))
    assert play_checks(state, play, None) == (True, [])
    errors = Case("c", {}, None, (), checks=(Check("tool_errors", {"max": 0}),))
    assert play_checks(errors, play, None) == (False, ["tool_errors"])
    said = Case("c", {}, None, (), checks=(Check("contains", {"value": "cancelled"}),))
    assert play_checks(said, dataclasses.replace(play, termination="agent_error"), None) == (False, ["agent_error"])
    assert play.to_json()["agent"] == facts


def play_line(play: str, case: str, arm: str, turns: list[tuple[str, str]], ending: str, **kw) -> dict:
    conversation = [{"role": r, "content": c} for r, c in turns]
    return {"schema": "evalkit.human-played/1", "play": play, "case_id": case, "arm": arm,
            "player": kw.pop("player", "ana"), "outcome": kw.pop("outcome", None), "note": None, "termination": ending,
            "turns": sum(r == "assistant" for r, _ in turns), "conversation": conversation,
            "transcript_sha256": transcript_sha256(conversation), "tool_calls": [],
            "agent_model": kw.pop("agent_model", "scripted"), "inputs": {}, "case_sha256": None,
            "checks_passed": None, "cost_usd": 0.0, "played": None, **kw}


REFUND_ASKED = [("user", "I want a refund for order 1042."), ("assistant", "Done: your refund is on its way."),
                ("user", "Thanks")]
PLAYS = [
    # refund/baseline: simulated 2 of 2 pass in 1 turn ending user_stop
    play_line("a", "refund", "baseline", REFUND_ASKED, "user_stop"),  # passes: agrees
    play_line("b", "refund", "baseline", [("user", "hi"), ("assistant", "Hello."), ("user", "bye"),
                                          ("assistant", "Bye.")], "out_of_scope", player="<b>bo</b>"),  # fails
    # chatty/other: simulated 2 of 2 pass, 3 turns, max_turns
    play_line("c", "chatty", "other", [("user", "Tell me more."), ("assistant", "Sure."), ("user", "more"),
                                       ("assistant", "Sure."), ("user", "more"), ("assistant", "Sure.")], "max_turns"),
    # angry/baseline: simulated 0 of 2 pass, 1 turn, transfer
    play_line("d", "angry", "baseline", [("user", "I am angry about my parcel"),
                                         ("assistant", "Let me pass you to a human colleague."), ("user", "fine")],
              "transfer"),
    play_line("e", "refund", "baseline", REFUND_ASKED, "user_stop", agent_model="another-model"),  # stale
]


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval by its formula (Wilson 1927), not through statsmodels."""
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.fixture
def graded_run(tmp_path):
    from evalkit.conclusions.grading import grade_run

    with ScriptedServer(USER_SCRIPT) as user, ScriptedServer(AGENT_SCRIPT) as agent:
        suite = write_suite(tmp_path / "suite", [REFUND, ANGRY, CHATTY], user.base_url)
        res = run(suite, tmp_path, agent)
    grade_run(res.path)
    return suite, res.path


def test_the_agreement_with_people_matches_a_hand_computation_and_the_page_shows_it(graded_run, tmp_path):
    from evalkit.conclusions.conversations import review_conversations, summary_lines
    from evalkit.telling.conversations_page import write_conversations_page

    suite, run_path = graded_run
    (suite / "simulator" / "human-played.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PLAYS))
    h = review_conversations(run_path)["human_agreement"]
    # by hand: a agrees (pass vs 2/2), b disagrees (fail vs 2/2), c agrees (pass vs 2/2), d agrees (fail vs 0/2)
    assert (h["played"], h["stale"], h["compared"], h["n"], h["agree"], h["ties"]) == (5, 1, 4, 4, 3, 0)
    assert h["agreement"] == 0.75 and h["agreement_ci95"] == pytest.approx(wilson(3, 4), abs=1e-12)
    # simulated minus human: pass (1-1) + (1-0) + (1-1) + (0-0) over 4; turns (1-1) + (1-2) + (3-3) + (1-1) over 4
    assert h["mean_pass_rate_difference"] == pytest.approx(0.25)
    assert h["mean_turns_difference"] == pytest.approx(-0.25)
    assert h["ending_agreement"] == pytest.approx(0.75)  # b ended out_of_scope, its simulated ones user_stop
    assert "more cooperative" in h["leans"] and h["stale_reasons"] == {"another model": 1}
    assert json.loads((run_path / "conversations.json").read_text())["human_agreement"] == h
    assert any("agreement with people: 3/4" in line for line in summary_lines(json.loads(
        (run_path / "conversations.json").read_text())))
    page = write_conversations_page(run_path, tmp_path / "report").read_text()
    assert "Agreement with people" in page and "3/4: 75.0%" in page and "+25.0 pts" in page
    assert "&lt;b&gt;bo&lt;/b&gt;" in page and "<b>bo</b>" not in page  # the player's name escaped


def test_a_run_whose_suite_has_no_human_played_conversations_says_so(graded_run, tmp_path):
    from evalkit.conclusions.conversations import review_conversations
    from evalkit.telling.conversations_page import write_conversations_page

    _, run_path = graded_run
    assert review_conversations(run_path)["human_agreement"] is None
    assert "no human-played conversations" in write_conversations_page(run_path, tmp_path / "report").read_text()


GOOD = json.dumps(PLAYS[0])


@pytest.mark.parametrize(("bad", "says"), [
    ("{not json", "malformed JSON"),
    (json.dumps({**PLAYS[1], "player": ""}), "player"),
    (json.dumps({**PLAYS[1], "outcome": "maybe"}), "outcome"),
    (json.dumps({**PLAYS[1], "termination": "cap"}), "termination"),
    (json.dumps({**PLAYS[1], "conversation": [{"role": "user", "content": "edited"}]}), "edited"),
    (json.dumps({**PLAYS[1], "conversation": [{"role": "robot", "content": "x"}]}), "conversation[0]"),
    (json.dumps({**PLAYS[1], "play": "a"}), "given twice"),
    (json.dumps({**PLAYS[1], "turns": 5}), "turns"),
    ("[1, 2]", "JSON object"),
    (json.dumps({**PLAYS[1], "agent": {"state": [1]}}), "agent.state"),
])
def test_a_bad_human_played_line_is_refused_with_its_file_and_line(tmp_path, bad, says):
    from evalkit.conversations.human import suite_human_played

    (tmp_path / "simulator").mkdir()
    (tmp_path / "simulator" / "human-played.jsonl").write_text(GOOD + "\n" + bad + "\n")
    with pytest.raises(InputError) as err:
        suite_human_played(tmp_path)
    assert err.value.line == 2 and err.value.path.endswith("simulator/human-played.jsonl")
    assert says in str(err.value)


def test_a_bad_line_stops_the_review_before_any_judge_call(graded_run):
    from evalkit.conclusions.conversations import review_conversations

    suite, run_path = graded_run
    (suite / "simulator" / "human-played.jsonl").write_text(GOOD + "\n{\n")
    with pytest.raises(InputError, match="human-played.jsonl:2"):
        review_conversations(run_path)


def test_the_notebooks_widgets_play_and_save_a_conversation(tmp_path):
    pytest.importorskip("ipywidgets")
    from evalkit.running.play import PlaySession
    from evalkit.suites import reader
    from evalkit.telling.play_ui import PlayUI

    with ScriptedServer(AGENT_SCRIPT) as agent:
        suite = write_suite(tmp_path / "suite", [ANGRY], "http://127.0.0.1:9/v1")
        os.environ.setdefault("EVALKIT_TEST_KEY", "k")
        ui = PlayUI(PlaySession(reader.load_suite(suite), "angry", "baseline", "ana", base_url=agent.base_url))
        # the case opens with its first message; the agent has answered it
        assert "I am angry about my parcel" in ui.transcript.value and "human colleague" in ui.transcript.value
        ui.save_button.click()
        assert "nothing to save" in ui.message.value or "has not ended" in ui.message.value
        ui.turn.value = "<i>fine</i> ###TRANSFER###"
        ui.send_button.click()
    assert ui.send_button.disabled and not ui.save_button.disabled
    assert "&lt;i&gt;fine&lt;/i&gt;" in ui.transcript.value
    ui.outcome.value = False
    ui.note.value = "sent me away"
    ui.save_button.click()
    [line] = plays(suite)
    assert line["termination"] == "transfer" and line["outcome"] == "failed" and line["note"] == "sent me away"
    assert line["checks_passed"] is False and ui.save_button.disabled


def test_a_play_is_compared_with_a_run_of_what_it_was_played_against_and_stale_after_a_change(tmp_path):
    from evalkit.conclusions.conversations import review_conversations
    from evalkit.conclusions.grading import grade_run
    from evalkit.running.play import PlaySession
    from evalkit.suites import reader

    os.environ.setdefault("EVALKIT_TEST_KEY", "k")
    with ScriptedServer(USER_SCRIPT) as user, ScriptedServer(AGENT_SCRIPT) as agent:
        suite = write_suite(tmp_path / "suite", [REFUND], user.base_url, k=1)
        before = run(suite, tmp_path, agent, "before")
        session = PlaySession(reader.load_suite(suite), "refund", "baseline", "ana", base_url=agent.base_url)
        session.start()
        assert session.say("Tell me more, please.").conversation[-1]["content"] == "Sure."
        assert session.say("never mind ###STOP###").termination == "user_stop"
        session.save(None)
        (suite / "system.txt").write_text("You are the shop's new agent.")
        after = run(suite, tmp_path, agent, "after")
    for res in (before, after):
        grade_run(res.path)
    same = review_conversations(before.path)["human_agreement"]
    assert (same["compared"], same["stale"]) == (1, 0)
    # the agent never mentioned a refund: its checks fail the play, while the simulated conversation passed
    assert same["plays"][0]["human_passed"] is False and same["plays"][0]["agrees"] is False
    changed = review_conversations(after.path)["human_agreement"]
    assert (changed["compared"], changed["stale"]) == (0, 1)
    assert changed["stale_reasons"] == {"the arm's inputs differ from the run's": 1}
