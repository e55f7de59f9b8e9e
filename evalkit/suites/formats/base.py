"""What every importer builds: a foreign suite turned into native suite parts in memory
(`ImportedSuite`), with the local defaults an imported suite gets (it carries no model
settings of its own)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.foundations._io import MAX_CASES_BYTES, json_error, json_line_index, line_of, loads_bounded, read_text_file
from evalkit.foundations.errors import InputError
from evalkit.foundations.findings import Finding, Findings
from evalkit.foundations.layout import JUDGE_DIR, PROMPT_FILE
from evalkit.suites.suite import JUDGE_PROMPT_TEMPLATE, SuiteSource, _Reader, local_model_note
from evalkit.suites.suite import default_config as suite_default_config

# Local defaults for an imported suite, which carries no model settings of its own: the
# embedded model (`evalkit serve`), its address given by `evalkit run --base-url`.
IMPORT_PROMPT = "${guidance}${input}\n"


IMPORT_RUBRIC = """# Rubric v1 (imported suite)

Each judged case lists its own criteria (the rubric of the case). Score on this scale:
5: meets every criterion of the case.
4: meets the criteria with a minor gap.
3: meets about half of the criteria.
2: meets one criterion at most.
1: meets none, is off-task, or is empty.
"""


def import_files(judged: bool) -> dict[str, str]:
    """The text files an imported suite gets: the prompt, and for a suite with judged
    cases the judge's rubric and prompt files."""
    files = {PROMPT_FILE: IMPORT_PROMPT}
    if judged:
        files[f"{JUDGE_DIR}/rubric-v1.md"] = IMPORT_RUBRIC
        files[f"{JUDGE_DIR}/prompt-v1.md"] = JUDGE_PROMPT_TEMPLATE
    return files


def default_config(
    name: str, description: str, *, k: int = 5, timeout_s: float | None = None, source: str = ""
) -> dict[str, Any]:
    """The config written for an imported suite: `suite.default_config` (the one default,
    local and lint-clean), with caps sized for the embedded model's 2048-token context."""
    extra: dict[str, Any] = {} if timeout_s is None else {"timeout_s": timeout_s}
    return suite_default_config(
        {
            "// imported": f"imported from {source}; edit the model settings below before a paid run",
            "name": name,
            "description": description,
        },
        {
            "generator": local_model_note("the embedded local model"),
            "cost_cap_usd": (
                "caps",
                "local defaults: a small cap and token ceilings sized for the embedded model's 2048-token context",
            ),
        },
        k=k,
        cost_cap_usd=0.5,
        max_tokens_in=1536,
        max_tokens_out=256,
        **extra,
    )


@dataclass(frozen=True)
class ImportedSuite:
    """A foreign suite turned into native parts, still in memory."""

    format: str  # "agent-evals" | "vally"
    path: str  # the foreign file
    name: str
    config: dict[str, Any]
    cases: tuple[tuple[int | None, str, dict[str, Any]], ...]  # (line, JSON path in the file, case)
    files: dict[str, str] = field(default_factory=dict)  # prompt.txt, judge files
    warnings: tuple[Finding, ...] = ()
    skill_folders: tuple[Path, ...] = ()  # a skill resolved outside the spec's folder (SKRAFT layout)

    def source(self) -> SuiteSource:
        """A `SuiteSource` whose every place points into the foreign file."""
        p = Path(self.path)
        return SuiteSource(
            root=p.parent,
            name=self.name,
            config=self.config,
            config_path=str(p),
            config_lines={},
            cases=[(str(p), line, jp, dict(c)) for line, jp, c in self.cases],
            files=dict(self.files),
            is_native=False,
            skill_folders=self.skill_folders,
        )


def read_json_file(p: Path) -> tuple[Any, dict[str, int], Findings, _Reader]:
    """A foreign JSON suite file read for an importer: its document, its line index, and
    the findings (not strict: lint replays its warnings as strict ones) with a reader
    whose places point into the file."""
    text = read_text_file(p, limit=MAX_CASES_BYTES)
    try:
        doc = loads_bounded(text, p)  # a nesting too deep for the reader: refused with the file and line
    except json.JSONDecodeError as exc:
        raise InputError(json_error(exc), p, exc.lineno) from None
    lines = json_line_index(text)
    fx = Findings(strict=False)
    return doc, lines, fx, _Reader(fx, str(p), lambda jp: line_of(lines, jp))


def raise_with_warnings(fx: Findings) -> None:
    """Raise the errors found, carrying the warnings along so lint can print both."""
    try:
        fx.raise_errors()
    except InputError as exc:
        exc.warnings = tuple(fx.warnings)  # type: ignore[attr-defined]
        raise


def slugify(name: str) -> str:
    """A stable, file-name-safe case id from a stimulus name."""
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return s[:100].rstrip("-") or "stimulus"
