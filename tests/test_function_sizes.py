"""Core functions a reader can hold: no function on the run, grade, call or validation
path is longer than 100 lines (counted by `ast`, its decorators aside, its docstring and
comments in), but for the few listed here, each with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "evalkit"
LIMIT = 100
# The folders and modules a run, a grading, a model call and a suite's validation pass
# through: the suite read and validated (and linted), the run folder, the privacy gate a
# run passes, the calls, the sampling engine, grading with its graders and judge, the two
# commands that start a run and a grading, and the leaves they stand on.
CORE_PATHS = (
    "foundations",
    "numbers",
    "checking",
    "suites",
    "runfolder",
    "pii",
    "intake",
    "calls",
    "running",
    "conclusions/grading.py",
    "_cli/run.py",
    "_cli/grade.py",
)
# "module:function" -> why it stays longer than LIMIT (at most four)
EXCEPTIONS: dict[str, str] = {}


def long_functions(pkg: Path = PKG, paths: tuple[str, ...] = CORE_PATHS) -> dict[str, int]:
    """'module path:qualified name' -> lines, for each function over LIMIT under `paths`."""
    out: dict[str, int] = {}
    for rel in paths:
        base = pkg / rel
        for path in [base] if base.is_file() else sorted(base.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node, qual in _functions(tree):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LIMIT:
                    out[f"{path.relative_to(pkg).as_posix()}:{qual}"] = length
    return out


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """Every function and method with its qualified name (Class.method, outer.inner)."""
    found: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]] = []
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((child, prefix + child.name))
            found += _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            found += _functions(child, f"{prefix}{child.name}.")
        else:
            found += _functions(child, prefix)
    return found


def test_no_core_function_is_over_100_lines_but_the_listed_exceptions():
    found = long_functions()
    unlisted = {k: v for k, v in found.items() if k not in EXCEPTIONS}
    assert not unlisted, f"functions over {LIMIT} lines on the core path (split them along their steps): {unlisted}"
    stale = sorted(set(EXCEPTIONS) - set(found))
    assert not stale, f"listed as exceptions but no longer over {LIMIT} lines: {stale}"
    assert len(EXCEPTIONS) <= 4


def test_the_count_sees_a_long_method_nested_in_a_class(tmp_path):
    """The check itself: a 101-line method inside a class is found, with its qualified name;
    a 100-line function is not."""
    body = "\n".join(f"        x{i} = {i}" for i in range(100))
    (tmp_path / "m.py").write_text(f"class C:\n    def long(self):\n{body}\n\n\ndef ok():\n" +
                                   "\n".join(f"    y{i} = {i}" for i in range(99)) + "\n")
    assert long_functions(tmp_path, ("m.py",)) == {"m.py:C.long": 101}


@pytest.mark.parametrize("rel", CORE_PATHS)
def test_each_core_path_exists(rel):
    assert (PKG / rel).exists(), rel
