"""Typed, immutable records shared by every step: suite -> run -> grades -> stats.

Only data lives here; loading, validation and behaviour live in the module of their
concern (`suite`, `runner`, `graders`, ...). Every record is a frozen dataclass.

The records live beside this module, grouped by what they describe: `records_base` (`Json`,
the case sets, an artifact's schema check), `records_suite` (a suite), `records_sample` (a
sample, its grade, the case table), `records_plan` (plans), `records_gate` (verdicts, what
a gate reads, gate results), `records_baseline`, `records_grades` (grades summaries) and
`records_conclusions` (micro-tests, comparisons, run verdicts, prompt findings). This
module re-exports every one of their names: import records from here; a new record goes in
the module of its group.
"""

from __future__ import annotations

from evalkit.foundations.records_base import (
    CASE_SETS,
    NO_GATE,
    SET_GATES,
    SET_NAME,
    CaseSet,
    Json,
    records_frame,
    set_gate,
    ungated_set_warning,
)
from evalkit.foundations.records_baseline import Baseline, CurvePoint, SetScore
from evalkit.foundations.records_conclusions import (
    ArmComparisons,
    MicrotestArm,
    MicrotestResult,
    PromptFinding,
    RunVerdicts,
)
from evalkit.foundations.records_gate import (
    COST_RISE_PREFIXES,
    GATE_CAUSE_COST,
    GATE_CAUSE_INCOMPLETE,
    GATE_CAUSE_JUDGE,
    GATE_CAUSE_NOT_COMPARABLE,
    GATE_CAUSE_SCORE,
    GATE_CAUSE_UNDERPOWERED,
    GATE_POWER,
    NOT_CLEAN_PREFIXES,
    SCORE_DROP_PREFIXES,
    UNDERPOWERED_PREFIX,
    CaseResult,
    ConformanceKind,
    ConformanceVerdict,
    GateCheck,
    GatePower,
    GateResult,
    RunMetrics,
    Verdict,
    VerdictKind,
    gate_failure_causes,
    judge_line,
)
from evalkit.foundations.records_grades import ArmSummary, GradesSummary, GroupMetrics, JudgeTrust
from evalkit.foundations.records_plan import SEQUENTIAL_SIGN_TEST, SIGN_TEST, PairedDifference, Plan, PlanCheck
from evalkit.foundations.records_sample import CaseRow, CaseTable, CheckResult, Grade, Sample, Usage
from evalkit.foundations.records_suite import (
    Arm,
    Case,
    Check,
    Config,
    Endpoint,
    Executor,
    GateThresholds,
    Limits,
    Price,
    Resources,
    Simulator,
    Suite,
    Unit,
    UnitKind,
)

__all__ = [  # re-exported: the names this module held before it was split
    "Arm",
    "ArmComparisons",
    "ArmSummary",
    "Baseline",
    "CASE_SETS",
    "COST_RISE_PREFIXES",
    "Case",
    "CaseResult",
    "CaseRow",
    "CaseSet",
    "CaseTable",
    "Check",
    "CheckResult",
    "Config",
    "ConformanceKind",
    "ConformanceVerdict",
    "CurvePoint",
    "Endpoint",
    "Executor",
    "GATE_CAUSE_COST",
    "GATE_CAUSE_INCOMPLETE",
    "GATE_CAUSE_JUDGE",
    "GATE_CAUSE_NOT_COMPARABLE",
    "GATE_CAUSE_SCORE",
    "GATE_CAUSE_UNDERPOWERED",
    "GATE_POWER",
    "GateCheck",
    "GatePower",
    "GateResult",
    "GateThresholds",
    "Grade",
    "GradesSummary",
    "GroupMetrics",
    "Json",
    "JudgeTrust",
    "MicrotestArm",
    "MicrotestResult",
    "NOT_CLEAN_PREFIXES",
    "NO_GATE",
    "Limits",
    "PairedDifference",
    "Plan",
    "PlanCheck",
    "Price",
    "PromptFinding",
    "Resources",
    "RunMetrics",
    "RunVerdicts",
    "SCORE_DROP_PREFIXES",
    "SEQUENTIAL_SIGN_TEST",
    "SET_GATES",
    "SET_NAME",
    "SIGN_TEST",
    "Sample",
    "SetScore",
    "Suite",
    "UNDERPOWERED_PREFIX",
    "Simulator",
    "Unit",
    "UnitKind",
    "Usage",
    "records_frame",
    "Verdict",
    "VerdictKind",
    "gate_failure_causes",
    "judge_line",
    "set_gate",
    "ungated_set_warning",
]
