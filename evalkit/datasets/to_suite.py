"""An evaluation dataset (contract v1, `evalkit.datasets.dataset`) -> suite parts, for `evalkit
dataset to-suite`: one judged case per pair, in chat mode with the pair's query as the
user message and its guidance and context in the system message."""

from __future__ import annotations

import os
import re
from pathlib import Path

from evalkit.datasets.dataset import (
    LIMITS,
    _Diagnostics,
    _read_limited,
    _Truncated,
    decode_utf8,
    load_dataset,
    resolve_input,
)
from evalkit.foundations.errors import InputError, InputErrors
from evalkit.foundations.layout import JUDGE_DIR, PROMPT_FILE, SYSTEM_FILE
from evalkit.foundations.records import Json
from evalkit.suites.formats.base import ImportedSuite, default_config
from evalkit.suites.suite import JUDGE_PROMPT_TEMPLATE, case_id_problem

SUITE_PROMPT = "${input}"


_OPENAI_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


SUITE_SYSTEM = "${guidance}\n\n${context}"


SUITE_RUBRIC = """# Rubric v1 (from an evaluation dataset)

Each case states the observable behaviour expected of the system (its rubric). Score:
5: shows the expected behaviour completely.
4: shows it with a minor gap.
3: shows about half of it.
2: shows little of it.
1: shows none of it, is off-task, or is empty.
"""


def _tag(prefix: str, value: str) -> str:
    return f"{prefix}:{value}"


def pair_to_case(pair: dict[str, Json], context: str | None = None) -> dict[str, Json]:
    """One native case for one pair: the query as input, the expected behaviour as the
    judge's rubric, difficulty and populations as tags, a refusal check for safety pairs,
    one `activation` check per expected tool (the tool is called; the dataset records
    no arguments, which a `tool_calls` check would compare), and `context` plus a
    grounding check for a grounding pair whose source text is given."""
    tags = [_tag("difficulty", pair["difficulty"])] + [_tag("population", p) for p in pair["populations"]]
    if pair["difficulty"] == "safety":
        tags.append("adversarial")
    if pair["needs_sme_review"]:
        tags.append("needs-sme-review")
    case: dict[str, Json] = {
        "id": pair["id"],
        "input": pair["query"],
        "expected": {"rubric": pair["expected_response"]},
        "tags": tags,
    }
    checks: list[dict[str, Json]] = [{"kind": "activation", "tool": t} for t in pair["tools_expected"]]
    if pair["difficulty"] == "safety":
        checks.append({"kind": "refusal", "should_refuse": True})
    if context is not None:
        case["context"] = context
        checks.append({"kind": "grounding"})
    if checks:
        case["checks"] = checks
    return case


def _contexts(
    pairs: list[dict[str, Json]], context_dir: str | os.PathLike[str] | None, cwd: str | os.PathLike[str] | None
) -> dict[str, str]:
    """Source texts of grounding pairs: `context_dir/<source_reference>` when that file
    exists inside `context_dir` (a reference that is a URL or names no file is skipped)."""
    if context_dir is None:
        return {}
    base = resolve_input(context_dir, cwd=cwd)
    if not base.is_dir():
        raise InputError("--context-dir is not a folder", os.fspath(context_dir))
    out: dict[str, str] = {}
    for p in pairs:
        ref = p["source_reference"]
        if p["difficulty"] != "grounding" or not ref or "://" in ref or ".." in Path(ref).parts:
            continue
        target = (base / ref).resolve()
        if not target.is_relative_to(base) or not target.is_file():
            continue
        d = _Diagnostics(1)
        try:
            data = _read_limited(target, str(target), "context", LIMITS, d)
        except _Truncated:
            data = None
        if data is None or d.items:
            raise InputError("context file is over the 5 MiB limit", target)
        out[p["id"]] = decode_utf8(data, str(target))
    return out


def read_dataset(
    json_path: str | os.PathLike[str],
    csv_path: str | os.PathLike[str],
    name: str,
    *,
    context_dir: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> ImportedSuite:
    """A valid dataset as the parts of a native suite called `name`: the cases, the
    config (the local defaults, chat mode, the dataset's tools declared), prompt.txt,
    system.txt and the judge files. `InputError` for a dataset that is not valid or a
    pair id that cannot be a case id."""
    dataset = load_dataset(json_path, csv_path, cwd=cwd)
    pairs = dataset["evaluation_pairs"]
    problems = [
        InputError(
            f"id cannot be a suite case id: {why}", os.fspath(json_path), json_path=f"$.evaluation_pairs[{i}].id"
        )
        for i, p in enumerate(pairs)
        if (why := case_id_problem(p["id"]))
    ]
    if problems:
        raise InputErrors(problems)
    contexts = _contexts(pairs, context_dir, cwd)
    cases = [pair_to_case(p, contexts.get(p["id"])) for p in pairs]
    md = dataset["metadata"]
    config = default_config(
        name,
        f"evaluation dataset for {md['system_name']} (version {md['version']}, review_state {md['review_state']})",
        source=f"dataset {Path(os.fspath(json_path)).name}",
    )
    config["mode"] = "chat"
    config["system"] = SYSTEM_FILE
    names = sorted({t for p in pairs for t in p["tools_expected"]})
    declarable = [t for t in names if _OPENAI_TOOL_NAME.fullmatch(t)]
    if declarable:
        config["// tools"] = (
            "declared from the dataset's tools_expected so the model can call them; replace "
            "each with the system's real definition (names outside [A-Za-z0-9_-]{1,64} "
            "cannot be declared to an OpenAI-compatible API and are left out)"
        )
        config["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t,
                    "description": "a tool of the system under evaluation",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
            for t in declarable
        ]
    config["// mode"] = "chat: prompt.txt is the user message (the pair's query); system.txt adds guidance and context"
    files = {
        PROMPT_FILE: SUITE_PROMPT,
        SYSTEM_FILE: SUITE_SYSTEM,
        f"{JUDGE_DIR}/rubric-v1.md": SUITE_RUBRIC,
        f"{JUDGE_DIR}/prompt-v1.md": JUDGE_PROMPT_TEMPLATE,
    }
    return ImportedSuite(
        "dataset",
        os.fspath(json_path),
        name,
        config,
        tuple((None, f"$.evaluation_pairs[{i}]", c) for i, c in enumerate(cases)),
        files,
    )
