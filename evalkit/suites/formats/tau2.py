"""tau2-bench `tasks.json` -> a conversation suite's parts (each task a case with its simulated user).

A tau2-bench task file is a JSON list of tasks `{"id", "user_scenario": {"persona",
"instructions": {"domain", "reason_for_call", "known_info", "unknown_info",
"task_instructions"} | str}, "evaluation_criteria": {"actions", "communicate_info",
"nl_assertions", "env_assertions", "reward_basis"}}` (sierra-research/tau2-bench,
`src/tau2/data_model/tasks.py`). Each task becomes a case:

* `user_scenario` -> `input.user` (`persona` and the instructions' fields; a string
  instructions -> `task_instructions`; `domain` becomes a tag);
* `communicate_info` -> one `contains` check each over the whole conversation
  (`"scope": "conversation"`, case-insensitive: tau2 matches substrings of the agent's messages);
* `nl_assertions` -> `expected.nl_assertions` (judged, one call per conversation);
* `actions` (the agent's) -> a `tool_calls` check in mode `subset_any_order`, each action's
  `compare_args` kept: tau2's `ActionEvaluator` passes when every action is matched by some
  call of the conversation, in any order, on the arguments `compare_args` names (identical
  actions are listed once, as one call matches them all there).

What has no evalkit counterpart is reported by name, once per field with the tasks that
carry it, and the task imported without it: `initial_state`, `env_assertions`, the user's
own actions, `reward_basis` components evalkit does not check as tau2 does (`DB`: tau2
compares the database the actions leave; evalkit checks the calls), `ticket`, `issues`,
`required_documents`, `user_tools`, `description`, `annotations` and unknown keys.

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
    unmapped: dict[str, list[str]] = {}  # field -> the tasks that carry it
    for i, task in enumerate(doc):
        jp = f"$[{i}]"
        case = _task_case(r, task, jp, domains)
        if case is not None:
            cases.append((line_of(lines, jp), jp, case))
            for name in unmapped_fields(task):
                unmapped.setdefault(name, []).append(str(task["id"]))
    for name, ids in unmapped.items():
        shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        r.warn("$", f"{name}: {finding_text(name)} (task(s) {shown})")
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
    if domain:
        domains.add(domain)
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
    actions: list[dict[str, Any]] = []
    for a in criteria.get("actions") or ():
        if isinstance(a, dict) and a.get("requestor", "assistant") == "assistant" and isinstance(a.get("name"), str):
            call = {"name": a["name"], "arguments": a.get("arguments") or {}}
            if isinstance(a.get("compare_args"), list):
                call["compare_args"] = [str(k) for k in a["compare_args"]]
            if call not in actions:  # tau2 lets one call match identical actions
                actions.append(call)
    if actions:
        checks.append({"kind": "tool_calls", "calls": actions, "mode": "subset_any_order"})
    return checks


# tau2 fields evalkit does not import, with what the finding says of each.
UNMAPPED = {
    "initial_state": "the task's starting database, message history and setup calls are not imported "
    "(give the tools' answers in input.tool_results)",
    "evaluation_criteria.env_assertions": "assertions on the environment's final state are not checked",
    "evaluation_criteria.actions[requestor=user]": "the user's own tool calls are not checked",
    "ticket": "the solo-agent ticket is not imported (the simulated user plays the scenario)",
    "issues": "the task's issue notes are not imported",
    "required_documents": "the knowledge documents are not imported",
    "user_tools": "the simulated user has no tools in evalkit",
    "description": "the task's description (purpose, policies, notes) is documentation, not imported",
    "annotations": "the task's annotations are not imported",
}
TASK_KEYS = {"id", "user_scenario", "evaluation_criteria", *(k for k in UNMAPPED if "." not in k)}
CRITERIA_KEYS = {"actions", "communicate_info", "nl_assertions", "env_assertions", "reward_basis"}
# tau2's reward components evalkit checks, by the criterion each gates: the rest are reported.
CHECKED_BASIS = {"COMMUNICATE": "communicate_info", "NL_ASSERTION": "nl_assertions", "ACTION": "actions"}
BASIS = "evaluation_criteria.reward_basis"
DIAGNOSTIC = " (not in reward_basis)"


def finding_text(name: str) -> str:
    """What the finding about the unimported tau2 field `name` says."""
    if name == f"{BASIS} DB":
        return (
            "tau2 gates the reward on the database the actions leave, which evalkit does not compare; "
            "evalkit checks the calls, so another path to the same state fails here"
        )
    if name.startswith(BASIS):
        return "tau2 gates the reward on this component, which evalkit does not check"
    if name.endswith(DIAGNOSTIC):
        return "tau2 runs it as a diagnostic only; evalkit's check of it gates the case"
    return UNMAPPED.get(name, "unknown field, not imported")


def unmapped_fields(task: dict[str, Any]) -> list[str]:
    """The fields of a tau2 task that carry something evalkit does not import, by name."""
    names = [k for k in task if k in UNMAPPED and task[k] not in (None, [], {}, "")]
    names += [k for k in task if k not in TASK_KEYS]
    criteria = task.get("evaluation_criteria")
    if not isinstance(criteria, dict):
        return names
    prefix = "evaluation_criteria."
    if criteria.get("env_assertions"):
        names.append(prefix + "env_assertions")
    if any(isinstance(a, dict) and a.get("requestor") == "user" for a in criteria.get("actions") or ()):
        names.append(prefix + "actions[requestor=user]")
    basis = criteria.get("reward_basis", ["DB", "COMMUNICATE"])  # tau2's default
    basis = [str(b) for b in basis] if isinstance(basis, list) else []
    names += [f"{BASIS} {b}" for b in basis if b not in CHECKED_BASIS]
    names += [prefix + f + DIAGNOSTIC for b, f in CHECKED_BASIS.items() if criteria.get(f) and b not in basis]
    names += [prefix + k for k in criteria if k not in CRITERIA_KEYS]
    return names
