"""evalkit: measure LLM prompts, skills and agents with numbers you can defend.

The public surface is small: the record types, `load_suite`, `run_suite`, `grade_run`,
`load_run`, the statistics in `evalkit.stats`, the verdicts in `evalkit.verdicts`, the
power plans in `evalkit.plans`, the gates and baselines in `evalkit.gates`, and
`report_run`. Everything else may change freely.
Heavy modules are imported on first use, so `import evalkit` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import BudgetExhausted, CeilingBreached, EvalkitError, InputError, JudgeError, ReplayMiss, UnitCallError
from .records import Arm, Case, Check, CheckResult, Config, Endpoint, Grade, Price, Sample, Suite, Usage

__version__ = "0.1.0"

_LAZY = {
    "load_suite": ("loader", "load_suite"),
    "lint_suite": ("loader", "lint_suite"),
    "run_suite": ("runner", "run_suite"),
    "RunOptions": ("runner", "RunOptions"),
    "grade_run": ("grading", "grade_run"),
    "load_run": ("runload", "load_run"),
    "Run": ("runload", "Run"),
    "Ledger": ("ledger", "Ledger"),
    "two_arm_verdict": ("verdicts", "two_arm_verdict"),
    "verdict_from_tally": ("verdicts", "verdict_from_tally"),
    "gate": ("gates", "gate"),
    "report_run": ("reports", "report_run"),
}
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
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'evalkit' has no attribute {name!r}")
