"""The check kinds a case may declare (`cases.jsonl` -> `checks[]`), the options each
understands, and the regex flags they take: what `suite` validates against and what
`graders` implements, defined once."""

from __future__ import annotations

from typing import Any

import regex

# Options of the trajectory checks (besides `kind`): graded over an agent's trajectory
# (evalkit.suites.units validates them, evalkit.checking.graders implements them).
TRAJECTORY_CHECK_OPTIONS: dict[str, set[str]] = {
    "forbidden_tools": {"tools", "calls"},
    "max_turns": {"max"},
    "tool_errors": {"max"},
    "skill_activation": {"skill", "preflight", "expect"},
}

CHECK_KINDS = (
    "exact",
    "contains",
    "regex",
    "json_schema",
    "tool_calls",
    "grounding",
    "refusal",
    "activation",
    "scorer",
    "json_field",
    "file_exists",
    "exit_code",
    "assertions",
    "state",
    *TRAJECTORY_CHECK_OPTIONS,  # forbidden_tools, max_turns, tool_errors, skill_activation
)


# Options each check kind understands (besides `kind`); anything else is an unknown key.
CHECK_OPTIONS: dict[str, set[str]] = {
    "exact": {"value", "trim", "case_fold", "collapse_whitespace", "scope"},
    "contains": {"value", "case_fold", "trim", "scope"},
    "regex": {"pattern", "flags", "case_fold", "fullmatch", "timeout_s", "scope"},
    "json_schema": {"schema", "scope"},
    "tool_calls": {"calls", "ignore_args", "mode"},
    "grounding": {"context", "scope"},
    "refusal": {"should_refuse", "patterns", "scope"},
    "activation": {"marker", "tool", "expect"},
    "scorer": {"file", "function", "scope"},
    "json_field": {"path", "value", "scope"},
    "file_exists": {"path", "expect"},
    "exit_code": {"value"},
    "assertions": {"assertions"},
    "state": {"expected"},  # the tools' final state (`input.state` + fixtures' `sets`), tau2-bench's DB check
    **TRAJECTORY_CHECK_OPTIONS,
}
# `scope` of a check that reads the output, in a conversation: the final assistant
# message (the default) or every assistant message of the conversation, in order.
CHECK_SCOPES = ("final", "conversation")


# Checks that read what a command or python unit's program left: its working directory
# (kept for grading when a case declares `file_exists`) and its exit status (a non-zero
# exit is graded, not an errored sample, when a case declares `exit_code`).
PROGRAM_CHECKS = ("file_exists", "exit_code")

# A JSON path of a `json_field` check: `$`, then `.name`, `[index]` or `["key"]` steps.
JSON_PATH_STEP = regex.compile(
    r"""\.([A-Za-z_][A-Za-z0-9_-]*)"""  # .name
    r"""|\[(-?[0-9]+)\]"""  # [index]
    r"""|\[\s*"((?:[^"\\]|\\.)*)"\s*\]"""  # ["key"], with \" and \\ escapes
    r"""|\[\s*'([^']*)'\s*\]"""  # ['key']
)


def json_path_steps(path: Any) -> list[str | int] | None:
    """The steps of a `json_field` path (`$.order.items[0]["unit price"]`): keys and list
    indexes, in order. None when `path` is not such a path.

    A JSONPath subset written here rather than taken from a library: one path names one
    value (no wildcards, filters or recursive descent, which would make "equal to a
    value" ambiguous), and none of evalkit's dependencies parses JSONPath."""
    if not isinstance(path, str) or not path.startswith("$"):
        return None
    steps: list[str | int] = []
    pos = 1
    while pos < len(path):
        m = JSON_PATH_STEP.match(path, pos)
        if m is None:
            return None
        name, index, dq, sq = m.groups()
        if index is not None:
            steps.append(int(index))
        elif dq is not None:
            steps.append(regex.sub(r"\\(.)", r"\1", dq))
        else:
            steps.append(name if name is not None else sq)
        pos = m.end()
    return steps


REGEX_FLAGS = {
    "i": regex.IGNORECASE,
    "m": regex.MULTILINE,
    "s": regex.DOTALL,
    "x": regex.VERBOSE,
    "ignorecase": regex.IGNORECASE,
    "multiline": regex.MULTILINE,
    "dotall": regex.DOTALL,
    "verbose": regex.VERBOSE,
}


def regex_flags(flags: Any) -> int | None:
    """Regex `flags` as the graders take them: letters (`"is"`), one name (`"dotall"`) or a
    list of names/letters. None when they are not valid."""
    if flags is None or flags == "":
        return 0
    if isinstance(flags, str):
        names = [flags] if flags.lower() in REGEX_FLAGS else list(flags)
    elif isinstance(flags, (list, tuple)) and all(isinstance(x, str) for x in flags):
        names = [str(x) for x in flags]
    else:
        return None
    value = 0
    for name in names:
        if name.lower() not in REGEX_FLAGS:
            return None
        value |= REGEX_FLAGS[name.lower()]
    return value
