"""Findings: what a check found worth a reader's attention, with the place it points at.

One record for both kinds evalkit reports: a lint finding (`error`: the suite cannot
run; `warning`: it can, but look) names a file, line and JSON path; a grading finding
(`HIGH`, `MEDIUM`, `LOW`: how much it undermines the numbers) names what it is about in
its message. A leaf: it imports only `errors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from evalkit.foundations.errors import InputError, InputErrors

Level = Literal["error", "warning", "HIGH", "MEDIUM", "LOW"]
Weight = Literal["HIGH", "MEDIUM", "LOW"]  # a lint finding's weight, as grade's levels say it
SEVERITY: dict[str, int] = {"error": 0, "HIGH": 0, "warning": 1, "MEDIUM": 1, "LOW": 2}


@dataclass(frozen=True)
class Finding:
    """One finding: `level`, `message`, and where it points (`path`, 1-based `line`, JSON
    path), when it points at a file."""

    level: Level
    message: str
    path: str = ""
    line: int | None = None
    json_path: str | None = None
    # a lint finding's weight on the numbers, as grade's levels say it (HIGH / MEDIUM /
    # LOW); None: its level's default (`severity`)
    weight: Weight | None = None

    @property
    def severity(self) -> str:
        """HIGH, MEDIUM or LOW: a grading finding's level; for a lint finding, the weight
        it was given, else HIGH for an error (the suite cannot run) and MEDIUM for a warning."""
        if self.level in ("HIGH", "MEDIUM", "LOW"):
            return self.level
        return self.weight or ("HIGH" if self.level == "error" else "MEDIUM")

    def __str__(self) -> str:
        if not self.path:
            return f"[{self.level}] {self.message}"
        where = self.path + (f":{self.line}" if self.line is not None else "")
        where_json = f"{self.json_path}: " if self.json_path else ""
        weight = f" [{self.weight}]" if self.weight else ""  # an error is HIGH, a warning MEDIUM unless it says
        return f"{where}: {self.level}: {where_json}{self.message}{weight}"

    def as_error(self) -> InputError:
        return InputError(self.message, self.path or None, self.line, self.json_path)

    def to_json(self) -> dict[str, Any]:
        """`{"level", "message"}`, with `path`, `line` and `json_path` when it has them
        (the shape of `grades-summary.json` -> `findings`)."""
        d: dict[str, Any] = {"level": self.level, "message": self.message}
        for key in ("path", "line", "json_path"):
            if getattr(self, key):
                d[key] = getattr(self, key)
        if self.level in ("error", "warning"):
            d["severity"] = self.severity
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Finding:
        weight = d.get("severity") if d.get("level") in ("error", "warning") else None
        return cls(d["level"], d["message"], d.get("path") or "", d.get("line"), d.get("json_path"), weight)


def by_severity(findings: list[Finding]) -> list[Finding]:
    """Most severe first (stable within a level)."""
    return sorted(findings, key=lambda f: SEVERITY[f.level])


@dataclass(frozen=True)
class LintReport:
    """Every finding of one lint pass. `ok` when there is no error."""

    suite: str
    errors: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.errors + self.warnings


class Findings:
    """Collects lint findings during one validation pass; `strict` turns format warnings
    into errors."""

    def __init__(self, strict: bool, *, lenient_keys: bool = False) -> None:
        self.strict = strict
        self.lenient_keys = lenient_keys  # an unknown key is a warning ("ignored"), not an error
        self.errors: list[Finding] = []
        self.warnings: list[Finding] = []

    def error(self, message: str, path: str, line: int | None = None, json_path: str | None = None) -> None:
        self.errors.append(Finding("error", message, path, line, json_path))

    def warn(
        self,
        message: str,
        path: str,
        line: int | None = None,
        json_path: str | None = None,
        *,
        strict_error: bool = False,
        weight: Weight | None = None,
    ) -> None:
        """A warning; `strict_error` ones (format problems such as unknown keys) fail under
        --strict; `weight` is its HIGH / MEDIUM / LOW (default MEDIUM)."""
        if strict_error and self.strict:
            self.errors.append(Finding("error", message, path, line, json_path))
        else:
            self.warnings.append(Finding("warning", message, path, line, json_path, weight))

    def unknown_key(self, message: str, path: str, line: int | None = None, json_path: str | None = None) -> None:
        """An unknown key: an error (a typo such as `temprature` would silently change the
        run), or with `lenient_keys` a warning that it is ignored (an error again under strict)."""
        if self.lenient_keys:
            self.warn(message + " (ignored: --lenient-keys)", path, line, json_path, strict_error=True)
        else:
            self.error(
                message + " (fix it, start it with // to make it a comment, or pass --lenient-keys to ignore it)",
                path,
                line,
                json_path,
            )

    def add(self, exc: InputError) -> None:
        for e in exc.errors if isinstance(exc, InputErrors) else [exc]:
            self.error(e.message, e.path or "", e.line, e.json_path)

    def replay_warnings(self, warnings: tuple[Finding, ...] | list[Finding]) -> None:
        """Warnings found by another pass (an importer's, which is not strict), as this
        pass's format warnings (errors under --strict)."""
        for w in warnings:
            self.warn(w.message, w.path, w.line, w.json_path, strict_error=True)

    def raise_errors(self) -> None:
        if self.errors:
            errs = [f.as_error() for f in self.errors]
            raise errs[0] if len(errs) == 1 else InputErrors(errs)

    def report(self, suite: str) -> LintReport:
        return LintReport(suite=suite, errors=tuple(self.errors), warnings=tuple(self.warnings))
