"""An unchanged agent on the OpenAI Node SDK in its own Node project
(examples/agents/node-openai: package.json, package-lock.json, node_modules from
`npm ci`), run sandboxed through evalkit's metering proxy against the scripted server
its suite ships: every call metered (requests upstream = trajectory model calls =
ledger settles), each case graded on its whole trajectory. node_modules is installed
by tools/install-node-example.sh where missing (`make test` runs it first; this test
runs it too, and fails with its instruction when Node or npm cannot be had)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from evalkit.calls.serve import ScriptedServer
from evalkit.conclusions.grading import grade_run
from evalkit.foundations._io import iter_jsonl
from evalkit.running.runner import run_suite
from evalkit.runfolder.trajectories import read_trajectory

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "examples" / "agents" / "node-openai"


def _node_modules() -> None:
    if not (PROJECT / "node_modules" / "openai").is_dir():
        done = subprocess.run([str(ROOT / "tools" / "install-node-example.sh")], capture_output=True, text=True,
                              timeout=600)
        assert (PROJECT / "node_modules" / "openai").is_dir(), f"npm ci failed: {done.stderr}"
    assert shutil.which("node"), "Node is not installed: sudo apt-get install nodejs npm"


def test_an_unchanged_node_agent_in_its_own_project_is_metered_call_for_call_in_the_sandbox(tmp_path):
    _node_modules()
    config = json.loads((PROJECT / "config.json").read_text())
    assert config["unit"].get("isolation", "sandbox") == "sandbox" and config["unit"]["argv"][0] == "node"
    with ScriptedServer(PROJECT / "script.json") as srv:
        res = run_suite(PROJECT, runs_dir=tmp_path / "runs", base_url=srv.base_url, progress=False)
        bodies = list(srv.requests)
    assert res.complete, res.reason
    assert all("messages" in b and b["max_tokens"] == config["max_tokens_out"] for b in bodies)
    ledger = list(iter_jsonl(res.path / "ledger.jsonl"))
    settles = [e for e in ledger if e["event"] == "settle"]
    calls = {c: read_trajectory(res.path, c, "baseline", 0) for c in ("oslo", "two-cities")}
    n_calls = sum(len(t.model_calls) for t in calls.values())
    assert len(bodies) == n_calls == len(settles) == 4  # two cases, two calls each: metered call for call
    for case_id, n_tools in (("oslo", 1), ("two-cities", 2)):
        t = calls[case_id]
        assert [c["endpoint"] for c in t.model_calls] == ["chat", "chat"]
        asked = t.model_calls[0]["answer"]["tool_calls"]
        assert [tc["name"] for tc in asked] == ["get_weather"] * n_tools
        tools = [e for e in t.events if e["type"] == "tool"]
        assert [e["id"] for e in tools] == [tc["id"] for tc in asked]  # reported with the model's call ids
        assert t.end["status"] == "finished" and t.end["exit_status"] == 0
    rows = list(iter_jsonl(res.path / "results.jsonl"))
    assert len(rows) == 2 and all(r["agent"]["isolation"] == "sandbox" for r in rows)  # run in bubblewrap
    grades = grade_run(res.path).grades
    assert len(grades) == 2 and all(g.passed for g in grades), [(g.case_id, g.checks) for g in grades]
