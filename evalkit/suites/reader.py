"""Find a suite wherever it is and load it, validated: a native folder, or an agent-evals
`evals.json`, a Vally `eval.yaml` or a Waza spec read directly (`evalkit.suites.formats`),
validated by `evalkit.suites.suite`.

Every problem is reported with the place it came from (file, line, JSON path); `load_suite`
raises them all together as `InputErrors` (exit 2). What only lint adds (the privacy scan,
the prompt files' analysis, the side files) and the suites written after linting (import,
a dataset as a suite) are `evalkit.intake.lint`'s. Nothing here calls a model or executes
suite code.
"""

from __future__ import annotations

from pathlib import Path

from evalkit.foundations.findings import Findings
from evalkit.foundations.records import Suite
from evalkit.suites.formats import source_for
from evalkit.suites.suite import validate


def load_suite(
    path: str | Path, *, strict: bool = False, lenient_keys: bool = False, skills_root: Path | None = None
) -> Suite:
    """Load and validate a suite: a folder `evals/<unit>/`, or an agent-evals `evals.json`
    or Vally `eval.yaml` read directly. Raises `InputError`/`InputErrors` naming every bad
    place (an unknown key included, with a "did you mean"; `lenient_keys` makes it a
    warning, kept on `Suite.warnings` with the others, and an error again under `strict`);
    `skills_root`: where a SKRAFT spec's skill is (`--skills-root`)."""
    fx = Findings(strict, lenient_keys=lenient_keys)
    src = source_for(path, fx, skills_root)
    suite = validate(src, fx) if src is not None else None
    fx.raise_errors()
    assert suite is not None
    return suite
