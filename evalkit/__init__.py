"""evalkit: measure LLM prompts, skills and agents with numbers you can defend.

The public surface is small: the record types, `load_suite`, `run_suite`, `grade_run`,
`load_run`, the statistics in `evalkit.stats`, the verdicts in `evalkit.verdicts`, the
power plans in `evalkit.plans`, the gates and baselines in `evalkit.gates`, and
`report_run`. Everything else may change freely.
Heavy modules are imported on first use, so `import evalkit` stays fast.

The package's folders are its layers, each importing only from the ones before it
(docs/architecture.md, checked by tests/test_imports.py):

    foundations  errors, file names, safe files, text, formatting, records, findings
    numbers      pure statistics, one definition per metric, power plans
    checking     deterministic graders and the LLM judge
    suites       the suite format: validated, read from other tools' files, units, endpoints
    runfolder    the run folder, written while a run goes and loaded for analysis
    pii          personal data and secrets: found, redacted, never repeated
    prompts      static analysis of prompt and skill files, their context cost
    datasets     evaluation datasets: the contract, the scoping interview, review, guide
    intake       a suite linted, and written only after it lints (import, dataset to suite)
    calls        the ledger, caches, the one client, servers, the metering proxy
    running      the sampling engine, agents, the Batch API
    conclusions  grading a run, verdicts, gates and baselines, ingest, micro-tests
    telling      notebook helpers, reports and the index, failures, replay, CI outputs
    _cli         the `evalkit` command, one module per command group
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

from evalkit.foundations.errors import (
    BudgetExhausted,
    CeilingBreached,
    EvalkitError,
    InputError,
    JudgeError,
    ReplayMiss,
    UnitCallError,
)
from evalkit.foundations.records import (
    Arm,
    Case,
    Check,
    CheckResult,
    Config,
    Endpoint,
    Grade,
    Price,
    Sample,
    Suite,
    Usage,
)

__version__ = "0.1.0"

# Where each module of the flat layout (evalkit <= 0.1) lives now. `import evalkit.stats`,
# `from evalkit.serve import LocalModelServer`, `python -m evalkit.demo` and every other
# use of the flat names keep working: they are the same module objects as the new paths
# (_FlatNames below). Modules new since 0.1 have only their folder's name.
MOVED = {
    "errors": "foundations.errors",
    "layout": "foundations.layout",
    "checks": "foundations.checks",
    "_text": "foundations._text",
    "fmt": "foundations.fmt",
    "_jsonschema": "foundations._jsonschema",
    "tokens": "foundations.tokens",
    "_io": "foundations._io",
    "records": "foundations.records",
    "findings": "foundations.findings",
    "stats": "numbers.stats",
    "metrics": "numbers.metrics",
    "plans": "numbers.plans",
    "graders": "checking.graders",
    "judge": "checking.judge",
    "endpoints": "suites.endpoints",
    "units": "suites.units",
    "suite": "suites.suite",
    "formats": "suites.formats",
    "dataset": "datasets.dataset",
    "privacy": "pii.privacy",
    "loader": "intake.lint",
    "workflow": "telling.workflow",
    "runs": "runfolder.runs",
    "_samplewriter": "runfolder._samplewriter",
    "trajectories": "runfolder.trajectories",
    "runload": "runfolder.runload",
    "cache": "calls.cache",
    "ledger": "calls.ledger",
    "client": "calls.client",
    "_batchserve": "calls._batchserve",
    "serve": "calls.serve",
    "session": "calls.session",
    "proxy": "calls.proxy",
    "agents": "running.agents",
    "batch": "running.batch",
    "runner": "running.runner",
    "grading": "conclusions.grading",
    "agentevals": "conclusions.agentevals",
    "ingest": "conclusions.ingest",
    "verdicts": "conclusions.verdicts",
    "compare": "conclusions.compare",
    "gates": "conclusions.gates",
    "microtest": "conclusions.microtest",
    "failures": "telling.failures",
    "nb": "telling.nb",
    "report_index": "telling.report_index",
    "reports": "telling.reports",
    "labelling": "telling.labelling",
    "replay": "telling.replay",
    "ciout": "telling.ciout",
    "cli": "_cli.main",
    "_cliopts": "_cli.options",
    "_cmd_suite": "_cli.suite",
    "_cmd_run": "_cli.run",
    "_cmd_grade": "_cli.grade",
    "_cmd_stats": "_cli.stats",
    "_cmd_report": "_cli.report",
    "_cmd_replay": "_cli.replay",
    "_cmd_batch": "_cli.batch",
    "_cmd_ingest": "_cli.ingest",
    "_cmd_dataset": "_cli.dataset",
    "_cmd_privacy": "_cli.privacy",
    "_cmd_serve": "_cli.serve",
    "demo": "_cli.demo",
    # modules of evalkit/suites/ that moved to folders of their own (issue 40): their old
    # dotted paths answer with the module at its new home, the same object
    "suites.runs": "runfolder.runs",
    "suites.runload": "runfolder.runload",
    "suites.trajectories": "runfolder.trajectories",
    "suites._samplewriter": "runfolder._samplewriter",
    "suites.privacy": "pii.privacy",
    "suites.privacy_detect": "pii.privacy_detect",
    "suites.privacy_gate": "pii.privacy_gate",
    "suites.privacy_policy": "pii.privacy_policy",
    "suites.privacy_redact": "pii.privacy_redact",
    "suites.analyze": "prompts.analyze",
    "suites.skills": "prompts.skills",
    "suites.dataset": "datasets.dataset",
    "suites.scope": "datasets.scope",
    "suites.review": "datasets.review",
    "suites.guide": "datasets.guide",
    "suites.formats.dataset": "datasets.to_suite",
    "suites.workflow": "telling.workflow",
    # suites/loader.py of 0.1 held load_suite and what lint adds; load_suite is now
    # suites/reader.py's, the rest intake/lint.py's, which re-exports load_suite: the old
    # path answers with intake.lint, so every name it had still imports from it
    "suites.loader": "intake.lint",
}


def moved_name(name: str) -> str | None:
    """`evalkit.<old>[.rest]` -> the module's name in the layer folders, else None (`old` a
    flat name of 0.1 or an old dotted path such as `suites.runs`, the longest that fits)."""
    head, _, rest = name.partition(".")
    if head != __name__ or not rest:
        return None
    for old in _MOVED_LONGEST_FIRST:
        if rest == old or rest.startswith(old + "."):
            return f"{__name__}.{MOVED[old]}{rest[len(old) :]}"
    return None


_MOVED_LONGEST_FIRST = sorted(MOVED, key=len, reverse=True)


class _FlatNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of a flat name answer with the module at its new path, the same object.

    Written by hand because no library aliases module paths: a re-export module per old
    name would be a second module object (two `__name__`s, isinstance and monkeypatching
    that see different things) and would put the flat names back in `ls evalkit/`.
    """

    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None) -> Any:
        new = moved_name(fullname)
        if new is None:
            return None
        found = importlib.util.find_spec(new)  # finds, does not execute
        if found is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, self, origin=found.origin, is_package=found.submodule_search_locations is not None
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = moved_name(spec.name)
        assert new is not None
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module was executed under its own name already."""

    def _target_loader(self, fullname: str) -> tuple[str, Any]:
        new = moved_name(fullname)
        spec = importlib.util.find_spec(new) if new else None
        if new is None or spec is None or spec.loader is None:
            raise ImportError(f"no module named {fullname!r}", name=fullname)
        return new, spec.loader

    def get_code(self, fullname: str) -> Any:
        """`python -m evalkit.demo` (runpy asks the loader for the code): the new module's."""
        new, loader = self._target_loader(fullname)
        return loader.get_code(new)

    def is_package(self, fullname: str) -> bool:
        new, loader = self._target_loader(fullname)
        return bool(loader.is_package(new))


if not any(isinstance(f, _FlatNames) for f in sys.meta_path):
    sys.meta_path.insert(0, _FlatNames())

_LAZY = {
    "load_suite": ("suites.reader", "load_suite"),
    "lint_suite": ("intake.lint", "lint_suite"),
    "run_suite": ("running.runner", "run_suite"),
    "RunOptions": ("running.runner", "RunOptions"),
    "grade_run": ("conclusions.grading", "grade_run"),
    "load_run": ("runfolder.runload", "load_run"),
    "Run": ("runfolder.runload", "Run"),
    "Ledger": ("calls.ledger", "Ledger"),
    "two_arm_verdict": ("conclusions.verdicts", "two_arm_verdict"),
    "verdict_from_tally": ("conclusions.verdicts", "verdict_from_tally"),
    "gate": ("conclusions.gates", "gate"),
    "report_run": ("telling.reports", "report_run"),
    "explore": ("telling.explorer", "explore"),
}
# The public modules, by the names the documentation uses (`evalkit.stats.sign_test`).
_SUBMODULES = {
    "stats",
    "verdicts",
    "plans",
    "gates",
    "graders",
    "judge",
    "reports",
    "nb",
    "serve",
    "dataset",
    "ingest",
    "runs",
    "runload",
}

__all__ = [
    "Arm",
    "BudgetExhausted",
    "Case",
    "CeilingBreached",
    "Check",
    "CheckResult",
    "Config",
    "Endpoint",
    "EvalkitError",
    "Grade",
    "InputError",
    "JudgeError",
    "Price",
    "ReplayMiss",
    "Sample",
    "Suite",
    "UnitCallError",
    "Usage",
    *sorted(_LAZY),
    *sorted(_SUBMODULES),
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    if name in _SUBMODULES:
        return importlib.import_module(f".{MOVED[name]}", __name__)
    raise AttributeError(f"module 'evalkit' has no attribute {name!r}")
