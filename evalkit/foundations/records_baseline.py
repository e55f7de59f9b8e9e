"""The baseline a gate compares against: `Baseline`, its `SetScore`s and `CurvePoint`s. Split
out of `evalkit.foundations.records`, which re-exports every public name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from evalkit.foundations.errors import InputError
from evalkit.foundations.records_base import NO_GATE, _check_schema, _num_or_none, set_gate
from evalkit.foundations.records_gate import RunMetrics

# --- baselines ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CurvePoint:
    """pass@j and pass^j (means over cases of the unbiased per-case estimators, with
    their SE across cases) at one j <= k: a point of the curve that `SetScore.curve`
    holds for j = 1..k.

    References: Chen et al. 2021 (pass@k); Yao et al. 2024, tau-bench (pass^k)."""

    j: int
    pass_at_j: float | None
    pass_at_j_se: float | None
    pass_hat_j: float | None
    pass_hat_j_se: float | None

    def to_json(self) -> dict[str, Any]:
        return {f.name: (_num_or_none(v) if isinstance(v, float) else v) for f, v in _items(self)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CurvePoint:
        def num(key: str) -> float | None:
            v = d.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        return cls(int(d["j"]), num("pass_at_j"), num("pass_at_j_se"), num("pass_hat_j"), num("pass_hat_j_se"))


@dataclass(frozen=True)
class SetScore:
    """The gated case score of one set or tag of an arm at the run's k: pass@k and pass^k
    (means over its cases, with the SE across cases) and the score it is gated on
    (pass@k for capability, pass^k for regression, none for another set; for a tag, the
    mean over its gated cases of each case's own gated metric)."""

    n_cases: int
    k: int
    pass_at_k: float | None
    pass_at_k_se: float | None
    pass_hat_k: float | None
    pass_hat_k_se: float | None
    gate: str = NO_GATE
    gated_case_score: float | None = None
    gated_case_score_se: float | None = None
    n_gated: int = 0
    curve: tuple[CurvePoint, ...] = ()  # pass@j and pass^j for j = 1..k (files before it: empty)

    def to_json(self) -> dict[str, Any]:
        d = {f.name: (_num_or_none(v) if isinstance(v, float) else v) for f, v in _items(self) if f.name != "curve"}
        d["curve"] = [p.to_json() for p in self.curve]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SetScore:
        curve = tuple(CurvePoint.from_json(p) for p in d.get("curve") or () if isinstance(p, dict))
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d and f.name != "curve"}, curve=curve)


def _items(obj: Any) -> list[tuple[Any, Any]]:
    return [(f, getattr(obj, f.name)) for f in fields(obj)]


@dataclass(frozen=True)
class Baseline:
    """An accepted baseline (`evals/<unit>/baseline.json`): the gated case score of the
    accepted arm overall, per tag and per set, its cost per case (list price: what the
    samples would have cost without the cache), and the per-case counts the gate's noise
    guard needs (`metrics`). `metrics` is None for a baseline in the agent-evals shape
    (`success_rate`, `cost_per_task_usd`, `per_tag`), which the gate reads without the
    noise guard.

    Files of evalkit 0.1 (`"format": 1`) name the gated case score `success_rate` and
    the cost per case `cost_per_task_usd`; both are read. Written beside evalkit's names
    for seed 001's readers: `success_rate` (the accepted arm's sample pass rate, the
    RESULTS block's "Success rate") and `cost_per_task_usd` (the cost per case);
    `judge_version` is the one the file records (a seed-shaped file has no cases)."""

    SCHEMA = "evalkit.baseline/2"

    gated_case_score: float
    cost_per_case_usd: float | None
    metrics: RunMetrics | None = None
    gated_case_score_se: float | None = None
    per_tag: dict[str, float] = field(default_factory=dict)
    per_tag_cases: dict[str, int] = field(default_factory=dict)
    per_set: dict[str, SetScore] = field(default_factory=dict)
    run_stamp: str | None = None
    run: str | None = None
    summary: str | None = None
    accepted: str | None = None
    success_rate: float | None = None
    judge_version: str | None = None

    @property
    def arm(self) -> str | None:
        return self.metrics.arm if self.metrics else None

    @property
    def k(self) -> int | None:
        return self.metrics.k if self.metrics else None

    def to_json(self) -> dict[str, Any]:
        m = self.metrics
        return {
            "schema": self.SCHEMA,
            "run_stamp": self.run_stamp,
            "run": self.run,
            "summary": self.summary,
            "accepted": self.accepted,
            "judge_version": m.judge_version if m else self.judge_version,
            "config_hash": m.config_hash if m else None,
            "arm": self.arm,
            "k": self.k,
            "gated_case_score": _num_or_none(self.gated_case_score),
            "gated_case_score_se": _num_or_none(self.gated_case_score_se),
            "cost_per_case_usd": _num_or_none(self.cost_per_case_usd),
            "success_rate": _num_or_none(self.success_rate),
            "cost_per_task_usd": _num_or_none(self.cost_per_case_usd),
            "per_tag": dict(self.per_tag),
            "per_tag_cases": dict(self.per_tag_cases),
            "per_set": {s: v.to_json() for s, v in self.per_set.items()},
            "cases": [c.to_json() for c in m.cases] if m else None,
        }

    @classmethod
    def from_json(cls, d: Any) -> Baseline:
        """A baseline of this version, of evalkit 0.1 (`"format": 1`), or in the
        agent-evals shape; `InputError` (with the JSON path) when it is none of them."""
        d = _check_schema(d, cls.SCHEMA, "a baseline")
        score = d.get("gated_case_score", d.get("success_rate"))
        if d.get("cases") is None and score is None:
            raise InputError("baseline has neither per-case data nor a gated case score", json_path="$.success_rate")
        metrics = None
        if d.get("cases") is not None:
            try:
                metrics = RunMetrics.from_json({**d, "schema": None})
            except (KeyError, TypeError, ValueError) as exc:
                raise InputError(f"malformed per-case baseline data: {exc!r}", json_path="$.cases") from None
        per_set = {}
        for s, v in (d.get("per_set") or {}).items():
            if "value" in v:  # 0.1: {"metric", "value", "se", "n_cases"}
                metric = str(v.get("metric") or "")
                est = (v.get("value"), v.get("se"))
                per_set[s] = SetScore(
                    int(v.get("n_cases") or 0),
                    int(d.get("k") or 0),
                    est[0] if metric.startswith("pass@") else None,
                    est[1] if metric.startswith("pass@") else None,
                    est[0] if metric.startswith("pass^") else None,
                    est[1] if metric.startswith("pass^") else None,
                    set_gate(s),
                    est[0],
                    est[1],
                    int(v.get("n_cases") or 0),
                )
            else:
                per_set[s] = SetScore.from_json(v)
        try:
            return cls(
                gated_case_score=float(score) if score is not None else float("nan"),
                cost_per_case_usd=_num_or_none(d.get("cost_per_case_usd", d.get("cost_per_task_usd"))),
                metrics=metrics,
                gated_case_score_se=_num_or_none(d.get("gated_case_score_se", d.get("success_rate_se"))),
                per_tag={str(t): float(v) for t, v in (d.get("per_tag") or {}).items()},
                per_tag_cases={str(t): int(v) for t, v in (d.get("per_tag_cases") or {}).items()},
                per_set=per_set,
                run_stamp=d.get("run_stamp"),
                run=d.get("run"),
                summary=d.get("summary"),
                accepted=d.get("accepted"),
                success_rate=_num_or_none(d.get("success_rate")),
                judge_version=d["judge_version"] if isinstance(d.get("judge_version"), str) else None,
            )
        except (TypeError, ValueError) as exc:
            raise InputError(f"malformed baseline: {exc}", json_path="$") from None
