"""The example agents of examples/agents/, one per framework, each unchanged in its
framework's default mode (openai-agents, pydantic-ai's and langchain's Responses API;
smolagents' chat completions), run as real processes through evalkit's metering proxy
against the scripted server their suite ships: every call metered (one ledger
reservation per request the server received), each graded on its whole trajectory."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.foundations._io import iter_jsonl
from evalkit.conclusions.grading import grade_run
from evalkit.running.runner import run_suite
from evalkit.calls.serve import ScriptedServer
from evalkit.runfolder.trajectories import read_trajectory
from evalkit.telling.replay import turn_lines

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "agents"
# framework folder -> the endpoint its default mode calls
FRAMEWORKS = {"openai_agents": "responses", "pydantic_ai": "responses", "langgraph": "responses",
              "smolagents": "chat", "anthropic_sdk": "chat", "langchain_anthropic": "chat",
              "pydantic_ai_anthropic": "chat", "google_genai": "chat"}
# the API the agent spoke when not OpenAI's: the proxy translates it to chat for the endpoint
WIRES = {"anthropic_sdk": "anthropic", "langchain_anthropic": "anthropic", "pydantic_ai_anthropic": "anthropic",
         "google_genai": "gemini"}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_an_unchanged_framework_agent_is_metered_call_for_call_and_graded_on_its_trajectory(framework, tmp_path):
    suite = EXAMPLES / framework
    with ScriptedServer(suite / "script.json") as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        bodies = list(srv.requests)
    assert res.complete, res.reason
    endpoint = FRAMEWORKS[framework]
    # the framework's own API reached the server, never streamed upstream, under the ceiling
    assert all(("input" in b) == (endpoint == "responses") for b in bodies)
    ceiling = json.loads((suite / "config.json").read_text())["max_tokens_out"]
    assert all(b.get("max_output_tokens", b.get("max_tokens")) == ceiling for b in bodies)
    ledger = list(iter_jsonl(res.path / "ledger.jsonl"))
    reserves = [e for e in ledger if e["event"] == "reserve"]
    settles = [e for e in ledger if e["event"] == "settle"]
    assert len(reserves) == len(settles) == len(bodies) == 4  # two cases, two calls each: metered call for call
    assert res.spend_usd > 0
    for case_id, n_tools in (("oslo", 1), ("two-cities", 2)):
        t = read_trajectory(res.path, case_id, "baseline", 0)
        calls = t.model_calls
        assert [c["endpoint"] for c in calls] == [endpoint, endpoint] and all(c["status"] == "ok" for c in calls)
        assert [c.get("wire") for c in calls] == [WIRES.get(framework)] * 2
        shown = turn_lines(t.turns()[0], None)  # the replay page and `evalkit replay` say which API
        assert any(("via the" in line) == (framework in WIRES) for line in shown if line.startswith("cost "))
        asked = calls[0]["answer"]["tool_calls"]
        assert [tc["name"] for tc in asked] == ["get_weather"] * n_tools
        assert all(tc["id"].startswith("call_") for tc in asked)  # with the model's call ids
        assert len([e for e in t.events if e["type"] == "tool"]) == n_tools  # answered from the fixtures
        assert t.end["status"] == "finished" and t.end["exit_status"] == 0
    grades = grade_run(res.path).grades
    assert len(grades) == 2 and all(g.passed for g in grades), [(g.case_id, g.checks) for g in grades]
    assert {c.name for g in grades for c in g.checks} == {"tool_calls", "contains"}


def test_known_framework_telemetry_is_off_in_the_agents_environment_whatever_evalkits_says(tmp_path, monkeypatch):
    from evalkit.calls.sandbox import TELEMETRY_OFF

    monkeypatch.setenv("LANGCHAIN_TRACING_V2", "true")  # the user's shell turned tracing on for their own work
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "0")
    monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v1_secret")
    names = sorted(TELEMETRY_OFF) + ["LOGFIRE_TOKEN"]
    script = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {names!r}}}))"
    suite = tmp_path / "suite"
    suite.mkdir()
    config = json.loads((EXAMPLES / "openai_agents" / "config.json").read_text())
    config["unit"] = {"kind": "command", "argv": ["{python}", "-c", script], "timeout_s": 30}
    (suite / "config.json").write_text(json.dumps(config))
    (suite / "cases.jsonl").write_text(json.dumps({"id": "env", "input": {"question": "?"}, "tags": ["golden"],
                                                   "checks": [{"kind": "contains", "value": "TRACING"}]}) + "\n")
    with ScriptedServer({"default": {"text": "unused"}}) as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
    assert res.complete, res.reason
    seen = json.loads(read_trajectory(res.path, "env", "baseline", 0).end["output"])
    assert seen == {**TELEMETRY_OFF, "LOGFIRE_TOKEN": None}
    assert seen["OPENAI_AGENTS_DISABLE_TRACING"] == "1" and seen["LANGCHAIN_TRACING_V2"] == "false"


@pytest.mark.parametrize("framework", ["openai_agents", "pydantic_ai", "langgraph"])
def test_the_responses_agents_chat_switch_reaches_the_chat_endpoint_through_the_proxy(framework, tmp_path, monkeypatch):
    """``WEATHER_AGENT_API=chat`` (passed by the suite's `unit.env`) switches each Responses
    agent to chat completions, for an endpoint without the Responses API (llama.cpp's
    server, `evalkit serve --tools-model`): every call arrives as chat, metered, graded."""
    monkeypatch.setenv("WEATHER_AGENT_API", "chat")
    suite = EXAMPLES / framework
    with ScriptedServer(suite / "script.json") as srv:
        res = run_suite(suite, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        bodies = list(srv.requests)
    assert res.complete, res.reason
    assert len(bodies) == 4 and all("messages" in b and "input" not in b for b in bodies)
    assert all(b["tools"][0]["function"]["name"] == "get_weather" for b in bodies)
    ledger = list(iter_jsonl(res.path / "ledger.jsonl"))
    assert len([e for e in ledger if e["event"] == "settle"]) == 4
    t = read_trajectory(res.path, "two-cities", "baseline", 0)
    assert [c["endpoint"] for c in t.model_calls] == ["chat", "chat"]
    assert len([e for e in t.events if e["type"] == "tool"]) == 2
    grades = grade_run(res.path).grades
    assert len(grades) == 2 and all(g.passed for g in grades), [(g.case_id, g.checks) for g in grades]
