"""tau2-bench `tasks.json` -> a conversation suite's parts (each task a case with its simulated user).

A tau2-bench task file is a JSON list of tasks `{"id", "user_scenario": {"persona",
"instructions": {"domain", "reason_for_call", "known_info", "unknown_info",
"task_instructions"} | str}, "evaluation_criteria": {"actions", "communicate_info",
"nl_assertions", ...}}` (`src/tau2/data_model/tasks.py`). Each task becomes a case:

* `user_scenario` -> `input.user` (`persona` and the instructions' fields; a string
  instructions -> `task_instructions`; `domain` becomes a tag);
* `communicate_info` -> one `contains` check each over the whole conversation
  (`"scope": "conversation"`, case-insensitive: tau2 matches substrings of the agent's messages);
* `nl_assertions` -> `expected.nl_assertions` (judged, one call per conversation);
* `actions` (the agent's) -> a `tool_calls` check (`subset`: the calls in order among
  others; tau2 replays them for its DB hash, evalkit's fixtures hold no state).

The config is the imported default (the embedded model) with a `simulator`, an agent
unit and the simulator prompt `simulator/prompt-v1.md`; the domain's policy and tools
are not in `tasks.json`: a warning says to put the policy in `system.txt` and the tools
in `config.json`'s `tools` (their answers in each case's `input.tool_results`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.foundations._io import line_of
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import JUDGE_DIR
from evalkit.suites.formats.base import (
    IMPORT_RUBRIC,
    ImportedSuite,
    default_config,
    raise_with_warnings,
    read_json_file,
    slugify,
)
from evalkit.suites.suite import JUDGE_PROMPT_TEMPLATE, _Reader
from evalkit.suites.suite_conversation import USER_KEYS
from evalkit.suites.suite_scaffold import SIMULATOR_CONFIG, SIMULATOR_PROMPT_V1

SYSTEM_NOTE = "You are the customer service agent of the {domain} domain. Follow the domain's policy.\n"


def is_tau2_tasks(path: Path) -> bool:
    """Whether a `.json` file is a tau2-bench task list (its first task has a `user_scenario`)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16).decode("utf-8", "replace")
    except OSError:
        return False
    return head.lstrip().startswith("[") and '"user_scenario"' in head


def read_tau2_tasks(path: str | Path) -> ImportedSuite:
    """A tau2-bench `tasks.json` as a conversation suite (see the module docstring)."""
    p = Path(path)
    doc, lines, fx, r = read_json_file(p)
    if not isinstance(doc, list) or not doc:
        raise InputError("a tau2-bench tasks file is a non-empty JSON list of tasks", p, 1, "$")
    cases: list[tuple[int | None, str, dict[str, Any]]] = []
    domains: set[str] = set()
    for i, task in enumerate(doc):
        jp = f"$[{i}]"
        case = _task_case(r, task, jp, domains)
        if case is not None:
            cases.append((line_of(lines, jp), jp, case))
    raise_with_warnings(fx)
    domain = ", ".join(sorted(domains)) or "tau2"
    r.warn(
        "$",
        f"the {domain} domain's policy and tools are not in tasks.json: put the policy in system.txt, "
        "the tools in config.json `tools` and their answers in each case's input.tool_results",
    )
    config = default_config(slugify(p.stem), f"tau2-bench tasks ({domain})", k=4, source=p.name)
    config.update(
        mode="chat", simulator={**SIMULATOR_CONFIG, "max_tokens_out": 128}, unit={"kind": "agent", "max_turns": 8}
    )
    config.pop("template", None)
    files = {"system.txt": SYSTEM_NOTE.format(domain=domain), "simulator/prompt-v1.md": SIMULATOR_PROMPT_V1}
    if any("expected" in c for _, _, c in cases):  # nl_assertions are judged
        files.update({f"{JUDGE_DIR}/rubric-v1.md": IMPORT_RUBRIC, f"{JUDGE_DIR}/prompt-v1.md": JUDGE_PROMPT_TEMPLATE})
    return ImportedSuite("tau2", str(p), slugify(p.stem), config, tuple(cases), files, tuple(fx.warnings))


def _task_case(r: _Reader, task: Any, jp: str, domains: set[str]) -> dict[str, Any] | None:
    """One task as a case, or None after reporting why it cannot be one."""
    if not isinstance(task, dict) or "id" not in task or not isinstance(task.get("user_scenario"), dict):
        r.err(jp, "a tau2 task needs an id and a user_scenario object")
        return None
    user, domain = _user(task["user_scenario"])
    if domain:
        domains.add(domain)
    criteria = task.get("evaluation_criteria") or {}
    checks = _checks(criteria if isinstance(criteria, dict) else {})
    case: dict[str, Any] = {
        "id": f"task-{slugify(str(task['id']))}",
        "input": {"user": user},
        "tags": [slugify(domain) if domain else "tau2"],
        "checks": checks,
    }
    assertions = criteria.get("nl_assertions") if isinstance(criteria, dict) else None
    if isinstance(assertions, list) and assertions:
        case["expected"] = {"nl_assertions": [str(a) for a in assertions]}
    if not checks and "expected" not in case:
        r.warn(jp, f"task {task['id']!r} has no actions, communicate_info or nl_assertions: skipped (nothing to check)")
        return None
    return case


def _user(scenario: dict[str, Any]) -> tuple[dict[str, str], str]:
    """`input.user` and the domain of a tau2 `user_scenario`."""
    user: dict[str, str] = {}
    if isinstance(scenario.get("persona"), str):
        user["persona"] = scenario["persona"]
    instructions = scenario.get("instructions")
    if isinstance(instructions, str):
        user["task_instructions"] = instructions
        return user, ""
    instructions = instructions if isinstance(instructions, dict) else {}
    user.update({k: str(v) for k, v in instructions.items() if k in USER_KEYS and v is not None})
    return user, str(instructions.get("domain") or "")


def _checks(criteria: dict[str, Any]) -> list[dict[str, Any]]:
    """The checks of a task's `evaluation_criteria`: its `communicate_info` and its agent's `actions`."""
    checks: list[dict[str, Any]] = [
        {"kind": "contains", "value": str(info), "case_fold": True, "scope": "conversation"}
        for info in criteria.get("communicate_info") or ()
        if str(info)
    ]
    actions = [
        {"name": a["name"], "arguments": a.get("arguments") or {}}
        for a in criteria.get("actions") or ()
        if isinstance(a, dict) and a.get("requestor", "assistant") == "assistant" and isinstance(a.get("name"), str)
    ]
    if actions:
        checks.append({"kind": "tool_calls", "calls": actions, "mode": "subset"})
    return checks
