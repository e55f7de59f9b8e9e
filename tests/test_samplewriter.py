"""The sample-file helper process: its frame protocol, path checks and end of input."""
from __future__ import annotations

import struct
import subprocess
import sys

from evalkit.runfolder._samplewriter import SampleWriter


def _frame(rel: str, data: bytes) -> bytes:
    path = rel.encode()
    return struct.pack("!II", len(path), len(data)) + path + data


def _child(root, stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evalkit.runfolder._samplewriter", str(root)], input=stdin,
                          capture_output=True, timeout=60)


def test_frames_become_files_and_a_torn_last_frame_is_dropped(tmp_path):
    stream = _frame("samples/a/b/sample-1.txt", "Paris \u00e9".encode()) + _frame("samples/a/b/sample-2.txt", b"")
    torn = _frame("samples/a/b/sample-3.txt", b"never finished")[:-4]  # the parent died mid-frame
    proc = _child(tmp_path, stream + torn)
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["samples/a/b/sample-1.txt", "samples/a/b/sample-2.txt"]
    assert (tmp_path / "samples/a/b/sample-1.txt").read_text(encoding="utf-8") == "Paris \u00e9"


def test_a_path_leaving_the_run_folder_is_refused_and_named(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    proc = _child(root, _frame("../escape.txt", b"x") + _frame("/tmp/abs.txt", b"x") + _frame("samples/ok.txt", b"ok"))
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "2 file(s) not written" in err and "'../escape.txt'" in err and "'/tmp/abs.txt'" in err
    assert not (tmp_path / "escape.txt").exists()
    assert (root / "samples/ok.txt").read_text() == "ok"


def test_a_file_it_cannot_write_makes_finish_report_failure(tmp_path):
    (tmp_path / "samples").write_text("a file where a folder should be")
    w = SampleWriter(tmp_path)
    assert w.send("samples/c/base/sample-1.txt", "Paris")
    ok, err = w.finish(timeout_s=60)
    assert not ok and "samples/c/base/sample-1.txt" in err


def test_send_after_the_child_died_says_so(tmp_path):
    w = SampleWriter(tmp_path)
    w.kill()
    assert not w.send("samples/c/base/sample-1.txt", "x" * 200_000)
    assert w.finish(timeout_s=60)[0] is False


def test_a_child_that_does_not_read_never_blocks_send_and_finish_delivers_every_file(tmp_path):
    """A full pipe (the child stopped: a slow disk, or no core for it on a loaded
    machine) leaves `send` returning at once, the frames waiting in the parent; once the
    child goes on, `finish` hands over every one, in order, and each file is whole."""
    import os
    import signal

    w = SampleWriter(tmp_path)
    os.kill(w._proc.pid, signal.SIGSTOP)  # it reads nothing until continued
    try:
        texts = {f"samples/c/a/sample-{i}.txt": f"{i}:" + "x" * 50_000 for i in range(60)}  # 3 MB: past any pipe
        for rel, text in texts.items():
            assert w.send(rel, text)  # returns while the child is stopped: it would hang if it blocked
        assert w._pending  # what the pipe could not take waits in the parent
    finally:
        os.kill(w._proc.pid, signal.SIGCONT)
    ok, err = w.finish(timeout_s=60)
    assert ok and not err
    assert {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*.txt")} == texts


def test_two_processes_writing_the_same_files_at_once_never_take_each_others_temporary(tmp_path):
    """A run killed with SIGKILL leaves its helper draining what it was sent while the
    resumed run repairs the same files inline: the two write one file at the same time."""
    rels = [f"samples/case-{i:03d}/a/sample-0.txt" for i in range(400)]
    script = (
        "import sys\nfrom pathlib import Path\nfrom evalkit.runfolder._samplewriter import write_text_atomic\n"
        "made = set()\nsys.stdin.readline()\n"
        f"for _ in range(5):\n    for rel in {rels!r}:\n        write_text_atomic(Path({str(tmp_path)!r}), rel, b'same', made)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:  # both are started before either writes
        p.stdin.write(b"go\n")
        p.stdin.flush()
    for p in procs:
        p.stdin.close()
    errs = [p.stderr.read().decode() for p in procs]
    assert [p.wait() for p in procs] == [0, 0], errs
    assert all((tmp_path / rel).read_bytes() == b"same" for rel in rels)
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary left behind
