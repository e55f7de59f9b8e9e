"""The embedded model that calls tools (SmolLM2-135M-Instruct, Q4_1, llama.cpp's
`chatml-function-calling`) behind `evalkit serve --tools-model`.

Two measures, each through the official `openai` client on real HTTP:

1. direct: one chat request per one-city weather question of examples/agents/*/cases.jsonl
   and data/agent/cases.jsonl, the suite's `get_weather` tool offered
   with `tool_choice: auto`; a success is a well-formed call of `get_weather` whose `city`
   argument names the case's city. Seconds per call.
2. frameworks: each example agent of examples/agents (openai-agents, pydantic-ai,
   langgraph, smolagents) run unchanged in chat mode (``WEATHER_AGENT_API=chat``, passed by
   the suite's `unit.env`: llama.cpp's server has no Responses API) as a command unit
   through evalkit's metering proxy against this server (`run_suite`, then `grade_run`),
   on its own two cases and the demo agent suite's (data/agent) 14 one-city questions and
   its arithmetic question (`framework_suite`): the samples whose `tool_calls` check
   passed, the model calls and the seconds per model call from the ledger, the errors.

    python benchmarks/bench_tool_model.py [--threads N] [--frameworks a,b] [--direct-only]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import _smoke  # --smoke (benchmarks/_smoke.py; this folder is on sys.path)
from openai import OpenAI

from evalkit.calls.serve import LocalModelServer

ROOT = Path(__file__).resolve().parent.parent
AGENTS = ROOT / "examples" / "agents"
FRAMEWORKS = ("openai_agents", "pydantic_ai", "langgraph", "smolagents")


def weather_cases() -> list[tuple[str, str, dict]]:
    """(question, city, tool spec) for each one-city case of the example agents and of the
    demo's agent suite (data/agent), one per question."""
    out = []
    for suite in [AGENTS / fw for fw in FRAMEWORKS] + [ROOT / "data" / "agent"]:
        fw = suite
        cfg = json.loads((fw / "config.json").read_text())
        tools = cfg["tools"]
        for line in (fw / "cases.jsonl").read_text().splitlines():
            case = json.loads(line)
            calls = next((c["calls"] for c in case.get("checks", []) if c.get("kind") == "tool_calls"), [])
            if len(calls) == 1 and "city" in calls[0].get("arguments", {}):
                out.append((case["input"]["question"], calls[0]["arguments"]["city"], tools))
    return list({q: (q, c, t) for q, c, t in out}.values())


def direct(srv: LocalModelServer, cases: list[tuple[str, str, dict]]) -> dict:
    client = OpenAI(base_url=srv.base_url, api_key="local", max_retries=0, timeout=600)
    ok, seconds, rows = 0, [], []
    for question, city, tools in cases:
        t = time.perf_counter()
        r = client.chat.completions.create(
            model=srv.model_name, tools=tools, tool_choice="auto", max_tokens=64, temperature=0.0, seed=7,
            messages=[{"role": "system", "content": "You answer weather questions. Use the tools."},
                      {"role": "user", "content": question}])
        seconds.append(time.perf_counter() - t)
        calls = r.choices[0].message.tool_calls or []
        good = False
        for c in calls:
            try:
                args = json.loads(c.function.arguments or "{}")
            except ValueError:
                continue
            good = good or (c.function.name == "get_weather" and city.lower() in str(args.get("city", "")).lower())
        ok += good
        rows.append({"question": question, "city": city, "success": good, "seconds": round(seconds[-1], 2),
                     "calls": [{"name": c.function.name, "arguments": c.function.arguments} for c in calls]})
    return {"requests": len(cases), "successes": ok, "success_rate": ok / len(cases) if cases else None,
            "seconds_per_call_mean": sum(seconds) / len(seconds) if seconds else None,
            "seconds_per_call_max": max(seconds) if seconds else None, "rows": rows}


def framework_suite(name: str, folder: Path, limit: int = 0, timeout_s: float = 600) -> Path:
    """The example agent `name` as a suite in `folder`: its agent and config (the unit's
    timeout `timeout_s`, one sample at a time: the model is slow on a shared machine; 512
    output tokens a call: llama-cpp-python's function-calling handler ignores `max_tokens`
    for a call's arguments, and an answer over the ceiling stops the run; a cap of $5 at
    the example's notional prices, as the local model bills nothing),
    its own cases, then data/agent's cases of other questions without their
    `skill_activation` check (the demo's agent reads skills; these agents have none); the
    first `limit` of them (0: all)."""
    suite = folder / name
    suite.mkdir(parents=True)
    shutil.copy(AGENTS / name / "agent.py", suite / "agent.py")
    cfg = json.loads((AGENTS / name / "config.json").read_text())
    cfg["unit"] = {**cfg["unit"], "timeout_s": timeout_s}
    cfg.update(concurrency=1, max_tokens_out=512, cost_cap_usd=5.0)
    (suite / "config.json").write_text(json.dumps(cfg, indent=2))
    cases = [json.loads(x) for x in (AGENTS / name / "cases.jsonl").read_text().splitlines() if x.strip()]
    asked = {c["input"]["question"] for c in cases}
    for line in (ROOT / "data" / "agent" / "cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        if case["input"]["question"] not in asked:
            case["id"] = f"demo-{case['id']}"
            case["checks"] = [c for c in case["checks"] if c["kind"] != "skill_activation"]
            cases.append(case)
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases[: limit or None]))
    return suite


def framework(srv: LocalModelServer, name: str, folder: Path, limit: int = 0, timeout_s: float = 600) -> dict:
    """One example agent in chat mode run against the server on `framework_suite`, graded:
    its tool_calls checks, its model calls, its errors, and per sample what the model asked
    for (`sample_rows`: an errored sample is not graded)."""
    from evalkit.conclusions.grading import grade_run
    from evalkit.running.runner import run_suite

    os.environ.setdefault("EVALKIT_API_KEY", "local")
    os.environ["WEATHER_AGENT_API"] = "chat"  # the agents' switch to chat completions (unit.env)
    suite = framework_suite(name, folder, limit, timeout_s)
    t = time.perf_counter()
    res = run_suite(suite, runs_dir=folder / "runs", base_url=srv.base_url, progress=False, cache=False)
    wall = time.perf_counter() - t
    grades = grade_run(res.path).grades
    checked = [g for g in grades if any(r.name.startswith("tool_calls") for r in g.checks)]
    passed = sum(all(r.passed for r in g.checks if r.name.startswith("tool_calls")) for g in checked)
    run = Path(res.path)
    ledger = [json.loads(x) for x in (run / "ledger.jsonl").read_text().splitlines() if x.strip()]
    calls = [e for e in ledger if e.get("event") == "settle" and e.get("role") == "generator"]
    errors = [json.loads(x) for x in (run / "errors.jsonl").read_text().splitlines() if x.strip()] \
        if (run / "errors.jsonl").exists() else []
    return {"samples": res.samples_total, "samples_ran": res.samples_ran, "graded": len(grades),
            "passed_all_checks": sum(g.passed for g in grades), "complete": res.complete,
            "tool_calls_checked": len(checked), "tool_calls_passed": passed,
            "model_calls": len(calls) or None, "wall_s": round(wall, 1),
            "seconds_per_model_call": round(wall / len(calls), 2) if calls else None,
            "errors": sorted({str(e.get("error", e))[:300] for e in errors})[:3],
            "error_reasons": list(res.error_reasons), "samples_seen": sample_rows(run, suite)}


def sample_rows(run: Path, suite: Path) -> list[dict]:
    """Per case: how the sample ended, its model calls, the tool calls the model asked for
    in order (at most 8), and whether its first call was the case's expected one."""
    from evalkit.runfolder.trajectories import read_trajectory

    rows = []
    for line in (suite / "cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        t = read_trajectory(run, case["id"], "baseline", 0)
        if t is None:
            continue
        expected = next((c["calls"] for c in case["checks"] if c["kind"] == "tool_calls"), None)
        asked = [[{"name": tc.get("name"), "arguments": tc.get("arguments")} for tc in (c.get("answer") or {}).get(
            "tool_calls", [])] for c in t.model_calls if c.get("status") == "ok"]
        end = t.end or {}
        rows.append({"case": case["id"], "status": end.get("status"), "model_calls": len(asked),
                     "first_call_as_expected": bool(asked) and asked[0] == expected,
                     "asked": [a for calls in asked for a in calls][:8],
                     "error": str(end.get("error") or "")[:200] or None})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--direct-only", action="store_true")
    ap.add_argument("--frameworks-only", action="store_true",
                    help="keep the direct figures already in the results file; measure the frameworks")
    ap.add_argument("--cases", type=int, default=0, help="at most this many direct cases (0: all)")
    ap.add_argument("--framework-cases", type=int, default=0, help="at most this many cases per framework (0: all)")
    ap.add_argument("--sample-timeout", type=float, default=600, help="a framework sample's time limit, seconds")
    ap.add_argument("--out", default=None, help="where the figures go (default: benchmarks/results/tool_model.json)")
    _smoke.add(ap)
    args = ap.parse_args()
    out = _smoke.apply(args, ROOT / "benchmarks" / "results" / "tool_model.json", cases=1, direct_only=True)
    cases = weather_cases()[: args.cases or None]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    # 4096: smolagents' system prompt alone is about 1,850 tokens
    with LocalModelServer(n_ctx=4096, n_threads=args.threads, tools=True, startup_timeout_s=600) as srv:
        started = time.perf_counter() - t0
        result: dict = {"model": srv.model_name, "model_file": str(srv.model_path.name if srv.model_path else ""),
                        "server_start_s": round(started, 2), "load_average_1m_at_start": round(load, 2),
                        "direct": kept_direct(out) if args.frameworks_only else direct(srv, cases),
                        "frameworks": {}}
        d = result["direct"]
        print(f"direct: {d['successes']}/{d['requests']} well-formed get_weather calls naming the city, "
              f"{d['seconds_per_call_mean']:.1f} s per call (max {d['seconds_per_call_max']:.1f})")
        if not args.direct_only:
            folder = Path(tempfile.mkdtemp(prefix="evalkit-bench-tools-"))
            for name in args.frameworks.split(","):
                try:
                    result["frameworks"][name] = framework(srv, name, folder, args.framework_cases, args.sample_timeout)
                except Exception as exc:  # noqa: BLE001 - a framework that cannot run is a measured outcome
                    result["frameworks"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
                print(name, json.dumps(result["frameworks"][name]))
                write(out, result)  # each framework's figures kept as soon as measured
    write(out, result)
    print(f"written: {out}")


def kept_direct(out: Path) -> dict:
    """The direct figures of the results file `out` (`--frameworks-only`), with the load
    average they were measured at."""
    old = json.loads(out.read_text())
    return {**old["direct"], "measured_at_load_average_1m": old["direct"].get(
        "measured_at_load_average_1m", old.get("load_average_1m_at_start"))}


def write(out: Path, result: dict) -> None:
    result["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
