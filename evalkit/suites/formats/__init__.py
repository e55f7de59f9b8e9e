"""Suites of other tools, read into the parts a native suite has (`suite.SuiteSource`):
agent-evals `evals.json` (`agent_evals`), Vally/SKRAFT `eval.yaml` (`vally`), a tau2-bench
`tasks.json` (`tau2`), and an
evaluation dataset (`dataset`, for `evalkit dataset to-suite`). Each importer points
every place at the foreign file, so `evalkit.suites.suite` validates them with messages that
point into it.

`source_for` finds what a path names: a native suite folder (`suite.native_source`), or
a foreign file read through the importers.
"""

from __future__ import annotations

import os
from pathlib import Path

from evalkit.foundations._io import outside_message, outside_root
from evalkit.foundations.errors import InputError
from evalkit.foundations.findings import Findings
from evalkit.foundations.layout import AGENT_EVALS_NAMES, CASES_FILE, CONFIG_FILE, FOREIGN_SUITE_NAMES
from evalkit.suites.formats.agent_evals import read_agent_evals
from evalkit.suites.formats.base import ImportedSuite
from evalkit.suites.formats.tau2 import is_tau2_tasks, read_tau2_tasks
from evalkit.suites.formats.vally import load_yaml, read_vally
from evalkit.suites.formats.waza import is_waza, read_waza
from evalkit.suites.suite import SuiteSource, native_source


def read_foreign(path: str | Path, skills_root: Path | None = None) -> ImportedSuite:
    """Read an agent-evals `evals.json` or a Vally `eval.yaml` (chosen by name, then by
    extension; `skills_root`: where a Vally spec's skill is, `vally.skraft_skill`)."""
    p = Path(path)
    name = p.name.lower()
    if name.endswith(".json") and name != CONFIG_FILE and is_tau2_tasks(p):  # a tau2-bench tasks.json
        return read_tau2_tasks(p)
    if name in AGENT_EVALS_NAMES or (name.endswith(".json") and name not in (CONFIG_FILE,)):
        return read_agent_evals(p)
    if name.endswith((".yaml", ".yml")):
        doc, lines = load_yaml(p)
        if is_waza(doc):  # told from a Vally spec by its fields
            return read_waza(p, doc, lines)
        return read_vally(p, skills_root)
    raise InputError("unknown suite file: expected a suite folder, an agent-evals evals.json or a Vally eval.yaml", p)


def source_for(path: str | Path, fx: Findings, skills_root: Path | None = None) -> SuiteSource | None:
    """Find what `path` names: a suite folder, a `cases.jsonl` or `config.json` inside one,
    or a foreign file (`evals.json`, `eval.yaml`) read through the importers. Problems
    go to `fx` (None when there is no source to validate)."""
    p = Path(path)
    if not p.exists():
        fx.error("no such file or folder", str(p))
        return None
    if not p.is_dir() and p.name in (CASES_FILE, CONFIG_FILE):
        p = p.parent
    if p.is_dir():
        if os.path.lexists(p / CASES_FILE) or os.path.lexists(p / CONFIG_FILE):
            return native_source(p, fx)
        for foreign in FOREIGN_SUITE_NAMES:
            if os.path.lexists(p / foreign):
                real = outside_root(p / foreign, p)
                if real is not None:
                    fx.error(outside_message(real, p), str(p / foreign))
                    return None
                p = p / foreign
                break
        else:
            fx.error(
                f"not a suite: no {CASES_FILE} and {CONFIG_FILE}, and no {' or '.join(FOREIGN_SUITE_NAMES)}", str(p)
            )
            return None
    try:
        imported = read_foreign(p, skills_root)
    except InputError as exc:
        fx.add(exc)
        fx.replay_warnings(getattr(exc, "warnings", ()))
        return None
    fx.replay_warnings(imported.warnings)
    return imported.source()


def suite_source(path: str | Path) -> SuiteSource:
    """What a validation pass reads from `path` (a suite folder, or a foreign file through
    the importers), for passes of other modules (the privacy scan); `InputError` when
    there is no suite there."""
    fx = Findings(strict=False)
    src = source_for(path, fx)
    fx.raise_errors()
    if src is None:
        raise InputError("not a suite", path)
    return src
