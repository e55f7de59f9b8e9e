"""tools/rewrite_tests.py: the assertion-rewritten bytecode it writes ahead is the code
pytest itself would write, pytest reads it where bytecode writing is off (and its assert
messages still explain a failure), a current file is skipped and a changed one redone."""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from pathlib import Path

from _pytest.assertion.rewrite import PYC_TAIL

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "rewrite_tests.py"

SOURCE = '''
def helper():
    return [1, 2]


def test_lists():
    assert helper() == [1, 3], "the lists differ"


def test_passes():
    x = {"a": 1}
    assert x["a"] == 1 and not x.get("b")
'''


def _pyc(path: Path) -> Path:
    return path.parent / "__pycache__" / (path.stem + PYC_TAIL)


def _code(pyc: Path):
    return marshal.loads(pyc.read_bytes()[16:])  # the header: magic, flags, source hash


def _env(write_bytecode: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _pytest(folder: Path, *args: str, write_bytecode: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:langsmith_plugin", "-p", "no:randomly", "--rootdir", str(folder),
                           "-c", os.devnull, *args, str(folder)],
                          cwd=folder, env=_env(write_bytecode), capture_output=True, text=True, timeout=120)


def _tool(*folders: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *map(str, folders)], capture_output=True, text=True,
                          env=_env(False), timeout=120)


def test_the_code_written_ahead_is_the_code_pytest_writes_itself(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for folder in (ours, theirs):
        folder.mkdir()
        (folder / "test_sample.py").write_text(SOURCE)
        (folder / "conftest.py").write_text("def pytest_configure(config):\n    assert config is not None\n")
        (folder / "helpers.py").write_text("assert True\n")  # not a test module: left to compileall
    assert _tool(ours).returncode == 0
    _pytest(theirs, "--collect-only", "-q", write_bytecode=True)
    for name in ("test_sample.py", "conftest.py"):
        assert _pyc(ours / name).is_file(), name
        assert _code(_pyc(ours / name)).co_consts == _code(_pyc(theirs / name)).co_consts
        # the whole code object but its file name (each folder's own path)
        mine = _code(_pyc(ours / name)).replace(co_filename="x")
        assert mine.co_code == _code(_pyc(theirs / name)).replace(co_filename="x").co_code
        assert _pyc(ours / name).read_bytes()[:16] == _pyc(theirs / name).read_bytes()[:16]
    assert not _pyc(ours / "helpers.py").exists()


def test_pytest_reads_what_was_written_ahead_and_still_explains_a_failed_assert(tmp_path):
    (tmp_path / "test_sample.py").write_text(SOURCE)
    assert _tool(tmp_path).returncode == 0
    log = tmp_path / "debug.log"
    res = _pytest(tmp_path, "-q", f"--debug={log}", write_bytecode=False)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "1 failed, 1 passed" in res.stdout
    assert "the lists differ" in res.stdout and "At index 1 diff: 2 != 3" in res.stdout, res.stdout
    trace = log.read_text()
    test = tmp_path / "test_sample.py"
    assert f"found cached rewritten pyc for {test}" in trace, trace
    assert f"rewriting {test!r}" not in trace


def test_a_current_file_is_skipped_and_a_changed_one_rewritten(tmp_path):
    test = tmp_path / "test_sample.py"
    test.write_text(SOURCE)
    assert _tool(tmp_path).returncode == 0
    first = _pyc(test).stat().st_mtime_ns
    before = _pyc(test).read_bytes()
    assert _tool(tmp_path).returncode == 0
    assert _pyc(test).stat().st_mtime_ns == first  # its hash matched: not written again
    test.write_text(SOURCE.replace("[1, 3]", "[1, 4]"))
    assert _tool(tmp_path).returncode == 0
    after = _pyc(test).read_bytes()
    assert after[8:16] != before[8:16]  # the new source's hash
    assert after[16:] != before[16:]


def test_a_folder_that_does_not_exist_is_exit_2_naming_it(tmp_path):
    res = _tool(tmp_path / "nowhere")
    assert res.returncode == 2
    assert f"{tmp_path / 'nowhere'}: not a folder" in res.stderr


def test_a_test_file_that_does_not_parse_is_left_to_pytest_and_the_others_are_written(tmp_path):
    (tmp_path / "test_bad.py").write_text("def test_x(:\n")
    (tmp_path / "test_sample.py").write_text(SOURCE)
    res = _tool(tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"{tmp_path / 'test_bad.py'}: left to pytest (SyntaxError" in res.stderr
    assert _pyc(tmp_path / "test_sample.py").is_file() and not _pyc(tmp_path / "test_bad.py").exists()
