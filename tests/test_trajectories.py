"""Trajectory files: whole lines as they happen, attempts after a resume, turns."""
from __future__ import annotations

import warnings

from evalkit.runfolder.runs import TornLineWarning
from evalkit.runfolder.trajectories import TrajectoryWriter, read_trajectory, sample_indices, trajectory_relpath


def test_attempts_turns_and_a_torn_tail(tmp_path):
    assert trajectory_relpath("c", "a", 0) == "trajectories/c/a/sample-1.jsonl"
    w = TrajectoryWriter(tmp_path, "c", "a", 0)
    w.write("start", {"case_id": "c"})
    w.write("model_call", {"call": 1, "answer": {"text": "CALL x"}})
    w.close()
    with open(tmp_path / w.relpath, "ab") as fh:  # a kill in the middle of a line
        fh.write(b'{"type": "too')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornLineWarning)
        w2 = TrajectoryWriter(tmp_path, "c", "a", 0)  # the resume: attempt 2, the torn tail cut off
        assert w2.attempt == 2
        w2.write("start", {"case_id": "c"})
        w2.write("tool", {"name": "early"})
        w2.write("model_call", {"call": 1, "answer": {"text": "CALL x"}, "request": {"prompt": "Q"}})
        w2.write("tool", {"name": "x", "result": "r"})
        w2.write("tool", {"name": "y", "result": "s"})
        w2.write("model_call", {"call": 2, "answer": {"text": "done"},
                                "request": {"messages": [{"role": "user", "content": "Q2"}]}})
        w2.write("end", {"status": "finished", "output": "done"})
        w2.close()
        t = read_trajectory(tmp_path, "c", "a", 0)
    assert (t.attempt, t.attempts, t.finished) == (2, 2, True)
    assert [(x.number, x.call.get("call"), [e["name"] for e in x.tools]) for x in t.turns()] == [
        (0, None, ["early"]), (1, 1, ["x", "y"]), (2, 2, [])]
    assert t.texts() == ["CALL x", "done", "done"] and t.requests_text() == "Q\nQ2"
    assert sample_indices(tmp_path, "c", "a") == [0] and read_trajectory(tmp_path, "c", "a", 1) is None
