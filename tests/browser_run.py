"""A README-loop run for looking at the reports: 15 cases, k=5, two arms, a judged case,
a plan that asked for more cases than the suite has, made against the scripted server
(no model needed); a micro-test whose only variant is worse than the control; and a
two-arm agent run (tool calls answered from fixtures, hostile model text) for the replay
page. Used by tests/test_reports_browser.py (and the agent suite by tests/test_replay.py,
the micro-test suite by tests/test_microtest.py), and by hand:

    .venv/bin/python tests/browser_run.py OUT_DIR   # prints the index path
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

CAPITALS = {
    "France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Egypt": "Cairo", "Peru": "Lima",
    "Chile": "Santiago", "Kenya": "Nairobi", "Norway": "Oslo", "Myanmar": "Naypyidaw", "Greece": "Athens",
}
SYMBOLS = {"Gold": "Au", "Iron": "Fe", "Silver": "Ag", "Lead": "Pb"}
K = 5
PANDALM = Path(__file__).resolve().parents[2] / "shared" / "data" / "pandalm"  # the reference data, when present


def make_suite(root: Path, base_url: str) -> Path:
    suite = root / "evals" / "factual"
    for sub in ("guidance", "judge"):
        (suite / sub).mkdir(parents=True, exist_ok=True)
    cases = [{"id": f"capital-{c.lower()}", "input": f"What is the capital of {c}?", "expected": cap,
              "tags": ["capital"] + (["golden"] if i < 3 else []), "set": "regression" if i < 3 else "capability",
              "checks": [{"kind": "contains", "value": cap, "case_fold": True}]}
             for i, (c, cap) in enumerate(CAPITALS.items())]
    cases += [{"id": f"symbol-{e.lower()}", "input": f"What is the chemical symbol for {e}?", "expected": s,
               "tags": ["symbol"], "checks": [{"kind": "regex", "pattern": f"(?<![A-Za-z]){s}(?![a-z])"}]}
              for e, s in SYMBOLS.items()]
    cases.append({"id": "judged-canberra", "input": "Why is Canberra the capital of Australia?",
                  "expected": {"rubric": "Says it was a compromise between Sydney and Melbourne."},
                  "tags": ["judged"]})
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (suite / "prompt.txt").write_text("${guidance}Q: ${input}\nA:")
    (suite / "guidance" / "skilled.md").write_text("GUIDED: answer with the name only.\n")
    (suite / "judge" / "rubric-v1.md").write_text("5: correct and concise. 1: wrong.\n")
    (suite / "judge" / "prompt-v1.md").write_text(
        "Rubric: ${rubric}\nQuestion: ${input}\nCriteria: ${expected}\nAnswer: ${output}\nGive a score.\n")
    cfg = {"mode": "completion", "template": "prompt.txt",
           "generator": {"model": "gen-model", "base_url": base_url, "api_key_env": "EVALKIT_TEST_KEY"},
           "judge": {"model": "judge-model", "base_url": base_url, "api_key_env": "EVALKIT_TEST_KEY"},
           "k": K, "cost_cap_usd": 1.0, "max_tokens_in": 256, "max_tokens_out": 24,
           "price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4}, "judge_price": {"in_per_mtok": 0.15, "out_per_mtok": 0.6},
           "gate": {"max_success_drop_points": 5, "max_cost_increase_pct": 20, "on_underpowered": "warn"}, "temperature": 0.8, "seed": 7,
           "concurrency": 4, "arms": [{"name": "baseline"}, {"name": "skilled", "guidance": "guidance/skilled.md"}]}
    (suite / "config.json").write_text(json.dumps(cfg, indent=1))
    return suite


def script() -> dict:
    rules: list[dict] = [
        {"match": ["Give a score", "compromise"], "text": "SCORE: 5 REASON: names the compromise"},
        {"match": "Give a score", "text": "SCORE: 2 REASON: does not name the compromise"},
        {"match": "Myanmar", "texts": ["Yangon", "Rangoon"]},
    ]
    for country, cap in list(CAPITALS.items()) + list(SYMBOLS.items()):
        rules.append({"match": ["GUIDED", country], "texts": [cap, "unknown"], "weights": [0.85, 0.15]})
        rules.append({"match": country, "texts": [cap, "I think it is Springfield"], "weights": [0.5, 0.5]})
    rules.append({"match": "Canberra", "texts": ["A compromise between Sydney and Melbourne.", "Because."]})
    return {"rules": rules, "default": {"text": "unknown"}}


def make_microtest_suite(root: Path) -> tuple[Path, Path]:
    """A chat unit whose task tempts a disclaimer, and one wording of the guidance against it."""
    suite = root / "evals" / "notes"
    suite.mkdir(parents=True)
    cases = [{"id": f"task-{i}", "input": f"Write the note for version {i}.", "expected": "no disclaimer",
              "tags": ["tempting"], "checks": [{"kind": "regex", "pattern": "^(?!.*as an ai)", "flags": "is"}]}
             for i in range(2)]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (suite / "system.txt").write_text("You write release notes.\n${guidance}")
    (suite / "prompt.txt").write_text("${input}")
    cfg = {"mode": "chat", "template": "prompt.txt", "system": "system.txt",
           "generator": {"model": "gen-model", "base_url": None, "api_key_env": "EVALKIT_TEST_KEY"},
           "judge": {"model": "judge-model", "base_url": None, "api_key_env": "EVALKIT_TEST_KEY"},
           "k": 5, "cost_cap_usd": 1.0, "max_tokens_in": 256, "max_tokens_out": 32, "seed": 3, "temperature": 0.7,
           "price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4}, "judge_price": {"in_per_mtok": 0.1, "out_per_mtok": 0.4},
           "arms": [{"name": "default"}]}
    (suite / "config.json").write_text(json.dumps(cfg))
    variants = root / "variants"
    variants.mkdir()
    (variants / "quote.md").write_text('Never say "As an AI".\n')
    return suite, variants


MICRO_SCRIPT = {"rules": [
    {"match": "Never say", "text": "As an AI, here are the notes."},  # the variant makes it worse
    {"match": "release notes", "texts": ["As an AI, I cannot.", "Notes: faster reports."], "weights": [0.4, 0.6]},
], "default": {"text": "unknown"}}


# An agent unit: the skilled arm's prompt carries the skill text, so it looks the answer up
# (a tool call answered from the case's fixture); the baseline guesses. The answer and the
# tool result carry hostile text: markup, a terminal escape, a bidi override.
HOSTILE = "<script>alert(1)</script>\x1b[31mRED\u202e"
AGENT_CONFIG = {
    "mode": "chat", "template": "prompt.txt",
    "generator": {"model": "scripted", "api_key_env": "EVALKIT_TEST_KEY"},
    "temperature": 0.0, "seed": 3, "k": 2, "concurrency": 2, "cost_cap_usd": 1.0,
    "max_tokens_in": 4000, "max_tokens_out": 40,
    "price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0}, "judge_price": {"in_per_mtok": 1.0, "out_per_mtok": 2.0},
    "unit": {"kind": "agent", "max_turns": 3},
    "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
    "arms": [{"name": "baseline"}, {"name": "skilled", "skill_dir": "skill"}],
}
AGENT_SCRIPT = {"rules": [
    {"match": "FOUND", "text": "The answer is 42 " + HOSTILE},
    {"match": "LOOK IT UP", "tool_calls": [{"name": "lookup", "arguments": {"q": "answer"}}]},
    {"match": "question", "text": "I guess 7."},
]}


def make_agent_suite(root: Path) -> Path:
    suite = root / "suite"
    (suite / "skill").mkdir(parents=True)
    (suite / "skill" / "SKILL.md").write_text("LOOK IT UP before you answer.\n")
    (suite / "prompt.txt").write_text("${skill}The question: ${question}")
    (suite / "config.json").write_text(json.dumps(AGENT_CONFIG))
    fixtures = {"lookup": {"result": "FOUND: 42 " + HOSTILE}}
    cases = [{"id": f"q{i}", "input": {"question": f"question {i}", "tool_results": fixtures}, "tags": ["golden"],
              "checks": [{"kind": "contains", "value": "42"}, {"kind": "skill_activation"}]} for i in range(2)]
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return suite


def make_agent_run(root: Path) -> Path:
    """The agent suite run against the scripted server and graded; its run folder."""
    from evalkit.conclusions.grading import grade_run
    from evalkit.running.runner import run_suite
    from evalkit.calls.serve import ScriptedServer

    suite = make_agent_suite(root)
    with ScriptedServer(AGENT_SCRIPT) as srv:
        res = run_suite(suite, runs_dir=root / "runs", base_url=srv.base_url, progress=False)
    assert res.complete, res
    grade_run(res.path)
    return Path(res.path)


def make(root: Path) -> dict:
    """Run, grade, plan (48 cases asked), compare, report; returns the paths."""
    from click.testing import CliRunner

    from evalkit._cli.main import main
    from evalkit.conclusions.grading import grade_run
    from evalkit.running.runner import run_suite
    from evalkit.calls.serve import ScriptedServer

    os.environ.setdefault("EVALKIT_TEST_KEY", "test-key")
    out = root / "reports"
    with ScriptedServer(script()) as srv:
        suite = make_suite(root, srv.base_url)
        res = run_suite(suite, progress=False)
        grade_run(res.path)
    cli = CliRunner()
    power = cli.invoke(main, ["power", "--win-rate", "0.75", "--tie-rate", "0.3", "--alpha", "0.05",
                              "--power", "0.8", "--write", str(suite)])
    comp = cli.invoke(main, ["compare", str(res.path), "--baseline", "baseline", "--treatment", "skilled"])
    extra = ["--pandalm-dir", str(PANDALM)] if (PANDALM / "testset-v1.json").exists() else []
    # --serial: one kernel for the five pages (what is looked at is the pages; the parallel
    # lanes are tests/test_reports.py's `made`)
    rep = cli.invoke(main, ["report", str(res.path), "--reports-dir", str(out), "--serial", *extra])
    msuite, variants = make_microtest_suite(root)
    with ScriptedServer(MICRO_SCRIPT) as srv:
        micro = cli.invoke(main, ["microtest", str(msuite), "--variants", str(variants), "--reps", "5",
                                  "--base-url", srv.base_url, "--reports-dir", str(out), "--no-progress"])
    micro_run = next(line.split(": ", 1)[1] for line in micro.output.splitlines() if line.startswith("run folder: "))
    agent_run = make_agent_run(root / "agent")
    agent = cli.invoke(main, ["report", str(agent_run), "--reports-dir", str(out), "--only", "replay"])
    return {"suite": suite, "run": Path(res.path), "out": out, "pages": out / Path(res.path).name,
            "power": power, "compare": comp, "report": rep, "micro": micro,
            "micro_pages": out / Path(micro_run).name, "agent": agent, "agent_pages": out / agent_run.name}


if __name__ == "__main__":
    made = make(Path(sys.argv[1]))
    for k in ("power", "compare", "report", "micro", "agent"):
        print(f"== {k} (exit {made[k].exit_code})\n{made[k].output}")
