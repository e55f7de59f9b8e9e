"""The embedded model that calls tools (SmolLM2-135M-Instruct, Q4_1, llama.cpp's
`chatml-function-calling`) behind `evalkit serve --tools-model`.

Two measures, each through the official `openai` client on real HTTP:

1. direct: one chat request per one-city weather question of examples/agents/*/cases.jsonl
   and data/agent/cases.jsonl, the suite's `get_weather` tool offered
   with `tool_choice: auto`; a success is a well-formed call of `get_weather` whose `city`
   argument names the case's city. Seconds per call.
2. frameworks: each example agent of examples/agents (openai-agents, pydantic-ai,
   langgraph, smolagents) run unchanged as a command unit through evalkit's metering proxy
   against this server (`run_suite`, then `grade_run`): the share of samples whose
   `tool_calls` check passed, and the seconds per model call from the ledger.

    python benchmarks/bench_tool_model.py [--threads N] [--frameworks a,b] [--direct-only]
"""

from __future__ import annotations

import argparse
import json
import os
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


def framework(srv: LocalModelServer, name: str) -> dict:
    """One example agent's suite run against the server, graded: its tool_calls checks."""
    from evalkit.conclusions.grading import grade_run
    from evalkit.running.runner import run_suite

    os.environ.setdefault("EVALKIT_API_KEY", "local")
    t = time.perf_counter()
    res = run_suite(AGENTS / name, base_url=srv.base_url, progress=False, cache=False)
    wall = time.perf_counter() - t
    grades = grade_run(res.path).grades
    checked = [g for g in grades if any(r.name.startswith("tool_calls") for r in g.checks)]
    passed = sum(all(r.passed for r in g.checks if r.name.startswith("tool_calls")) for g in checked)
    ledger = [json.loads(x) for x in (Path(res.path) / "ledger.jsonl").read_text().splitlines() if x.strip()]
    calls = [e for e in ledger if e.get("event") == "settle" and e.get("role") == "generator"]
    return {"samples": len(grades), "complete": res.complete, "tool_calls_checked": len(checked),
            "tool_calls_passed": passed, "model_calls": len(calls) or None, "wall_s": round(wall, 1),
            "seconds_per_model_call": round(wall / len(calls), 2) if calls else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--direct-only", action="store_true")
    ap.add_argument("--cases", type=int, default=0, help="at most this many direct cases (0: all)")
    ap.add_argument("--out", default=None, help="where the figures go (default: benchmarks/results/tool_model.json)")
    _smoke.add(ap)
    args = ap.parse_args()
    out = _smoke.apply(args, ROOT / "benchmarks" / "results" / "tool_model.json", cases=1, direct_only=True)
    cases = weather_cases()[: args.cases or None]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with LocalModelServer(n_threads=args.threads, tools=True, startup_timeout_s=600) as srv:
        started = time.perf_counter() - t0
        result: dict = {"model": srv.model_name, "model_file": str(srv.model_path.name if srv.model_path else ""),
                        "server_start_s": round(started, 2), "load_average_1m_at_start": round(load, 2),
                        "direct": direct(srv, cases), "frameworks": {}}
        d = result["direct"]
        print(f"direct: {d['successes']}/{d['requests']} well-formed get_weather calls naming the city, "
              f"{d['seconds_per_call_mean']:.1f} s per call (max {d['seconds_per_call_max']:.1f})")
        if not args.direct_only:
            for name in args.frameworks.split(","):
                try:
                    result["frameworks"][name] = framework(srv, name)
                except Exception as exc:  # noqa: BLE001 - a framework that cannot run is a measured outcome
                    result["frameworks"][name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
                print(name, json.dumps(result["frameworks"][name]))
    result["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
