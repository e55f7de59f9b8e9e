"""Sentences, not tracebacks (issue 31): the CLI walked with hostile arguments, a bad
rater name, and `grade` on a really full disk (a tmpfs in a private mount namespace),
which says "disk full: <path>" and finishes once there is room again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit._cli.main import main
from evalkit.calls.serve import ScriptedServer

from test_grading import JUDGE_SCRIPT, write_run, write_suite

HOSTILE = ["\x00x", "../../../../tmp/evil", "/dev/zero", "a\ud800b", "a\udcffb", "", "-", "a\nb", "x" * 5000,
           "${{ x }}", "\x1b[31m"]
COMMANDS = [["lint"], ["run"], ["grade"], ["report"], ["compare"], ["gate"], ["verdict"], ["ingest"], ["replay"],
            ["privacy", "scan"], ["dataset", "validate"], ["judge", "sample"], ["judge", "label"],
            ["batch", "status"], ["noise"], ["import"], ["init"], ["microtest"], ["baseline", "accept"],
            ["judge", "calibrate"], ["dataset", "to-suite"], ["dataset", "sample"]]


def test_no_hostile_argument_gets_a_traceback(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    failures = []
    for cmd in COMMANDS:
        for arg in HOSTILE:
            args = [*cmd, arg] + (["--to", "out"] if cmd == ["ingest"] else [])
            res = CliRunner().invoke(main, args)
            crashed = res.exception is not None and not isinstance(res.exception, SystemExit)
            if crashed or "Traceback" in res.output:
                failures.append((cmd, arg[:20], repr(res.exception)[:120]))
            elif res.exit_code not in (0, 1, 2):
                failures.append((cmd, arg[:20], f"exit {res.exit_code}"))
    assert not failures, failures
    assert not (tmp_path.parent.parent / "tmp" / "evil").exists() or (Path("/tmp/evil").exists() is False)


def test_a_bad_rater_name_says_what_a_name_may_hold(tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text("")
    for rater in ("a/b", "../x", "a b", ".hidden", "x" * 65):
        res = CliRunner().invoke(main, ["judge", "label", str(labels), "--rater", rater])
        assert res.exit_code == 2, res.output
        assert "a rater name may hold letters, digits" in res.output and "Traceback" not in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.jsonl"]


def _private_tmpfs() -> list[str] | None:
    import shutil
    import tempfile

    if shutil.which("unshare") is None:
        return None
    prefixes = ([["unshare", "-m"]] if os.geteuid() == 0 else []) + [["unshare", "-rm"]]
    with tempfile.TemporaryDirectory() as d:
        for prefix in prefixes:
            probe = subprocess.run([*prefix, "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {d}"],
                                   capture_output=True, timeout=30)
            if probe.returncode == 0:
                return prefix
    return None


def test_grade_on_a_full_disk_says_disk_full_and_resumes(tmp_path: Path) -> None:
    prefix = _private_tmpfs()
    if prefix is None:
        pytest.skip("no private mount namespace here (not root, and no user namespaces): needs a real full disk")
    suite = write_suite(tmp_path / "suite", opt_out=True)
    run = write_run(tmp_path, suite)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with ScriptedServer(JUDGE_SCRIPT) as srv:
        grade = f"{sys.executable} -m evalkit._cli.main grade {mnt}/run --judge-base-url {srv.base_url}"
        script = (
            f"mount -t tmpfs -o size=512k tmpfs {mnt} && cp -r {run} {mnt}/run && "
            f"(dd if=/dev/zero of={mnt}/filler bs=4k 2>/dev/null || true)\n"
            f"{grade} 2>&1; echo \"RC1=$?\"; rm {mnt}/filler; {grade} >/dev/null 2>&1; echo \"RC2=$?\"; "
            f"wc -l < {mnt}/run/grades.jsonl"
        )
        p = subprocess.run([*prefix, "sh", "-c", script], capture_output=True, text=True, timeout=300)
    out = p.stdout
    assert "Traceback" not in out and "OperationalError" not in out, out
    assert f"disk full: {mnt}/run/" in out, out
    assert "RC1=1" in out and "RC2=0" in out, out
    assert int(out.strip().splitlines()[-1]) == 24  # every sample graded once there was room
