"""Write pytest's assertion-rewritten bytecode of the test files ahead of the run, the
cache pytest reads before rewriting a test module itself.

    python tools/rewrite_tests.py [FOLDER ...]      (default: tests)

Why: pytest rewrites the asserts of every test module (test_*.py, *_test.py and
conftest.py) it imports and caches the result in `__pycache__` beside it, but only
where bytecode may be written. Where the environment sets PYTHONDONTWRITEBYTECODE (this
project's machines and CI do), it writes nothing, and each of `make test`'s three
workers, which all collect every file, rewrites all of them anew: about 5 CPU-s a
worker, half of a worker's collection. pytest reads a cached pyc whatever that setting
says, so `make test-pyc` writes them here, as compileall does evalkit's own. pytest offers
no command that rewrites without importing the modules (a `--collect-only` costs the
imports as well), so this calls its rewriter, `_rewrite_test` and `_write_pyc`, the
functions its import hook calls; the pinned pytest (requirements/lock.txt) is the one
tested (tests/test_rewrite_tests.py checks the result is the code pytest itself writes).
A file whose cached pyc is current (pytest's own hash check) is skipped. Where pytest's
internals have moved, this says so and exits 0: pytest then rewrites as before.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class _Trace:
    """The `state.trace` pytest's pyc functions report to; nothing here reads it."""

    def trace(self, message: str) -> None:
        pass


def test_modules(folders: list[Path]) -> list[Path]:
    """The files pytest rewrites under `folders`: its default `python_files`
    (test_*.py, *_test.py) and every conftest.py."""
    found = set()
    for folder in folders:
        for path in folder.rglob("*.py"):
            name = path.name
            if name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py"):
                found.add(path.resolve())
    return sorted(found)


def rewrite(path: Path) -> bool:
    """Write the rewritten pyc of `path` where pytest looks for it; False when the cached
    one was already current (or could not be written: pytest then rewrites it itself)."""
    try:
        return _rewrite(path)
    except Exception as err:  # a test file that does not parse, or a pytest whose internals moved
        print(f"rewrite_tests: {path}: left to pytest ({type(err).__name__}: {err})", file=sys.stderr)
        return False


def _rewrite(path: Path) -> bool:
    from _pytest.assertion import rewrite as R

    cache_dir = R.get_cache_dir(path)
    pyc = cache_dir / (path.name[:-3] + R.PYC_TAIL)
    if R._read_pyc(path, pyc, _Trace().trace) is not None:
        return False
    if not R.try_makedirs(cache_dir):
        return False
    # config None: the rewrite of a pytest configured without `enable_assertion_pass_hook`,
    # as this project's is (pyproject.toml sets no such option)
    source_hash, code = R._rewrite_test(path, None)  # type: ignore[arg-type]
    return R._write_pyc(_Trace(), code, source_hash, pyc)  # type: ignore[arg-type]


def main(argv: list[str]) -> int:
    """Rewrite the test modules under the folders in `argv` (default tests/); exit 0 unless
    a folder does not exist (exit 2)."""
    folders = [Path(a) for a in argv] or [ROOT / "tests"]
    for folder in folders:
        if not folder.is_dir():
            print(f"rewrite_tests: {folder}: not a folder", file=sys.stderr)
            return 2
    try:
        from _pytest.assertion import rewrite as R

        for name in ("_rewrite_test", "_write_pyc", "_read_pyc", "get_cache_dir", "try_makedirs", "PYC_TAIL"):
            getattr(R, name)
    except (ImportError, AttributeError) as err:
        print(f"rewrite_tests: this pytest's rewriter has moved ({err}); pytest will rewrite at collection",
              file=sys.stderr)
        return 0
    paths = test_modules(folders)
    # the files are independent: one process per core (rewriting is pure CPU)
    with ProcessPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1) or 1) as pool:
        list(pool.map(rewrite, paths, chunksize=8))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
