"""Run folders: torn lines, atomic writes, stable DataFrame columns."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evalkit.foundations.errors import InputError
from evalkit.foundations.records import Sample, Usage
from evalkit.runfolder.runload import GRADE_COLUMNS, SAMPLE_COLUMNS, load_run
from evalkit.runfolder.runs import RunFolder, TornLineWarning, iter_jsonl, repair_torn_tail, sample_from_dict, sample_path, sample_to_dict, write_atomic


def _sample(case="c1", arm="base", index=0, output="Paris") -> Sample:
    return Sample(case_id=case, tags=("capital", "golden"), arm=arm, index=index, seed=11 + index, model="m",
                  output=output, tool_calls=({"name": "f", "arguments": {"x": 1}},), finish_reason="stop",
                  usage=Usage(12, 3), latency_ms=5.5, cost_usd=1e-6, request_hash="ab" * 32,
                  system_fingerprint="fp", cached=False, cost_avoided_usd=0.0)


def test_iter_jsonl_drops_a_torn_last_line_with_a_warning(tmp_path):
    p = tmp_path / "results.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": 3, "b": "unfini')
    with pytest.warns(TornLineWarning, match="torn last line"):
        rows = list(iter_jsonl(p))
    assert rows == [{"a": 1}, {"a": 2}]


def test_iter_jsonl_keeps_a_whole_last_line_without_newline(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1}\n{"a": 2}')
    assert list(iter_jsonl(p)) == [{"a": 1}, {"a": 2}]


def test_iter_jsonl_names_file_and_line_of_a_bad_middle_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1}\nnot json\n{"a": 3}\n')
    with pytest.raises(InputError) as ei:
        list(iter_jsonl(p))
    assert ei.value.line == 2 and str(p) in str(ei.value)


def _reference_json_lines(data: bytes | str) -> list[tuple]:
    """The JSON-lines reading the fast one replaced: each non-blank line (its bytes, for
    bytes) through `json.loads`, with its number, its value or its error, and whether it
    is the last."""
    lines = data.split(b"\n" if isinstance(data, bytes) else "\n")
    out = []
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            out.append((i + 1, json.loads(raw), None, False))
        except json.JSONDecodeError as exc:
            out.append((i + 1, None, f"malformed JSON: {exc.msg} (column {exc.colno})", i == len(lines) - 1))
        except UnicodeDecodeError as exc:
            out.append((i + 1, None, f"invalid UTF-8 at byte {exc.start} of the line", i == len(lines) - 1))
    return out


ODD_LINES = [
    b'{"a": 1}', b'  {"a": 1}  ', b'{"a": 1}\r', b'\xef\xbb\xbf{"bom": 1}', b'{"a": 1} {"b": 2}', b'{"a": 1},{"b": 2}',
    b'[1, 2]', b'3', b'"x"', b'null', b'{"x": NaN, "y": -Infinity}', b'{"big": 123456789012345678901234567890}', b'{"i": 9223372036854775807, "j": -9223372036854775809}',
    b'{"u": 18446744073709551616, "w": 1e400, "v": -1e999, "x": 0.1234567890123456789}', b'{"h": "1234567890123456789"}',
    b'{"f": 1e-320, "g": -0.0, "h": 0.1}', b'{"s": "\\ud800 lone", "t": "\\u2028", "u": "\xe2\x80\xa8 raw"}',
    b'{"dup": 1, "dup": 2}', b'{"nested": {"a": [{"b": null}]}}', b'{"a": 1', b'{"a": }', b'{}', b'{ }',
    b'\xc2\xa0', b'\x00{"a": 1}', b'{"a": "\x01 control"}', b'\t', b'\x0b\x0c', b'{"a": 1}\x0c',
    b'{"k\xc3\xa9": "caf\xc3\xa9 \xf0\x9f\x98\x80"}', b'}{', b'{"a": "}"}', b'{"a": 1}}',
    b'{"in": "\xef\xbb\xbf"}', b'\xef\xbb\xbf  {"a": 1}', b'\xef\xbb\xbf',
]


@pytest.mark.parametrize("seed", range(6))
def test_json_lines_reads_every_line_as_json_loads_of_its_bytes(seed):
    """The fast reader (decode once, one scan per object line) gives, line for line, the
    value, error, line number and torn flag of `json.loads` on each line's bytes: odd
    lines (a BOM, NUL, CR, two objects, arrays, NaN, huge ints, lone surrogates, Unicode
    spaces, controls) in seeded orders, with and without a bad UTF-8 byte somewhere (the
    file then read line by line) and a last line with no newline after it."""
    import random

    from evalkit.foundations._io import json_lines

    rnd = random.Random(seed)
    lines = [rnd.choice(ODD_LINES) for _ in range(60)] + [b"", b"   "]
    rnd.shuffle(lines)
    if seed % 2:
        lines.insert(rnd.randrange(len(lines)), b'{"bad": "\xff"}')
    for tail in (b"\n", b""):
        data = b"\n".join(lines) + tail
        got = [(x.line, x.value, x.error, x.torn) for x in json_lines(data)]
        want = _reference_json_lines(data)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g[0] == w[0] and g[2:] == w[2:], (g, w)
            assert json.dumps(g[1]) == json.dumps(w[1]) and type(g[1]) is type(w[1]), (g, w)  # NaN too
    text = "\n".join(x.decode("utf-8", "replace") for x in lines)  # a str is read as before too
    assert [(x.line, x.error, x.torn) for x in json_lines(text)] == [w[:1] + w[2:] for w in _reference_json_lines(text)]


@pytest.mark.parametrize("seed", range(6))
def test_a_file_of_object_lines_is_read_at_once_as_json_loads_reads_each(seed, tmp_path):
    """Where every line is one object (a run's results and grades), the lines are read at
    once (`_bulk_objects`, orjson over every line) with the values `json.loads` gives each
    line's bytes: a line holding a 19-digit run (an integer past 64 bits, a hash's digits)
    is read by `json`, exactly; a line orjson refuses (NaN, two objects, a lone surrogate,
    a BOM) or a blank line sends the whole file the line-by-line way, which says where."""
    import random

    from evalkit.foundations._io import _bulk_objects, json_lines

    objects = [line for line in ODD_LINES if [isinstance(w[1], dict) for w in _reference_json_lines(line)] == [True]]
    plain = [line for line in objects if line[:1] == b"{" and line[-1:] == b"}" and b"NaN" not in line]
    plain = [line for line in plain if b"\\ud800" not in line and b"1e400" not in line]
    rnd = random.Random(seed)
    lines = [rnd.choice(plain) for _ in range(200)]
    lines[rnd.randrange(200)] = b'{"seed": 12345678901234567890123, "hash": "a1234567890123456789b"}'
    data = b"\n".join(lines) + b"\n"
    want = [w[1] for w in _reference_json_lines(data)]
    bulk = _bulk_objects(data)
    assert bulk is not None and json.dumps(bulk) == json.dumps(want)
    assert 12345678901234567890123 in [o.get("seed") for o in bulk]  # exact, not a float
    path = tmp_path / "r.jsonl"
    path.write_bytes(data)
    assert json.dumps(list(iter_jsonl(path))) == json.dumps(want)
    for odd in (b'{"x": NaN}', b'{"a": 1},{"b": 2}', b'{"s": "\\ud800"}', b"", b'\xef\xbb\xbf{"bom": 1}', b'{"a": 1}}'):
        mixed = lines[:]
        mixed.insert(rnd.randrange(200), odd)
        data = b"\n".join(mixed) + b"\n"
        assert _bulk_objects(data) is None, odd
        got = [(x.line, x.value, x.error) for x in json_lines(data)]
        assert json.dumps(got) == json.dumps([w[:3] for w in _reference_json_lines(data)])


def test_a_deep_line_among_object_lines_is_still_refused(tmp_path):
    """The depth guard holds on the at-once path: a line nested past the limit is not read
    by orjson (which would take it), and `iter_jsonl` names its line."""
    from evalkit.foundations._io import MAX_JSON_DEPTH, _bulk_objects

    deep = b'{"a": ' + b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH + b"}"
    data = b'{"ok": 1}\n' * 5 + deep + b"\n" + b'{"ok": 2}\n'
    assert _bulk_objects(data) is None
    p = tmp_path / "deep.jsonl"
    p.write_bytes(data)
    with pytest.raises(InputError) as ei:
        list(iter_jsonl(p))
    assert ei.value.line == 6


def test_repair_cuts_the_fragment_so_the_next_append_is_a_whole_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2, "b"')
    with pytest.warns(TornLineWarning):
        assert repair_torn_tail(p) is True
    assert p.read_bytes() == b'{"a": 1}\n'
    p.write_bytes(b'{"a": 1}\n{"a": 2}')  # whole line missing only its newline: kept
    assert repair_torn_tail(p) is False
    assert p.read_bytes() == b'{"a": 1}\n{"a": 2}\n'


def test_append_after_a_kill_leaves_a_loadable_file(tmp_path):
    run = RunFolder.create(tmp_path, {"suite": "s", "arms": ["base"], "k": 2, "cases": ["c1"]})
    run.append_result(_sample(index=0))
    run.close()
    with open(run.path / "results.jsonl", "ab") as fh:
        fh.write(b'{"case_id": "c1", "arm": "ba')  # a SIGKILL mid-write
    with pytest.warns(TornLineWarning):
        run2 = RunFolder(run.path)
        run2.append_result(_sample(index=1))
        run2.close()
    rows = list(iter_jsonl(run.path / "results.jsonl"))
    assert [(r["case_id"], r["index"]) for r in rows] == [("c1", 0), ("c1", 1)]
    assert RunFolder(run.path).finished_keys() == {("c1", "base", 0), ("c1", "base", 1)}


def test_sample_round_trip_and_agent_evals_layout(tmp_path):
    run = RunFolder.create(tmp_path, {"suite": "s"})
    s = _sample(index=2, output="Paris\nline two")
    run.append_result(s)
    run.close()
    assert sample_from_dict(json.loads((run.path / "results.jsonl").read_text())) == s
    assert sample_path(run.path, "c1", "base", 2) == run.path / "samples" / "c1" / "base" / "sample-3.txt"
    assert sample_path(run.path, "c1", "base", 2).read_text() == "Paris\nline two"
    assert sample_to_dict(s)["usage"] == {"prompt_tokens": 12, "completion_tokens": 3}


def test_create_never_reuses_a_folder(tmp_path):
    paths = {RunFolder.create(tmp_path, {"n": i}, stamp="20260101-000000").path for i in range(3)}
    assert len(paths) == 3
    assert sorted(p.name for p in paths) == ["20260101-000000", "20260101-000000-2", "20260101-000000-3"]


def test_write_atomic_replaces_whole_and_leaves_no_temp_files(tmp_path):
    p = tmp_path / "d" / "summary.md"
    write_atomic(p, "one")
    write_atomic(p, "two")
    assert p.read_text() == "two"
    assert os.listdir(p.parent) == ["summary.md"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_write_atomic_gives_ordinary_permissions_under_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "report.html", "<p>shared</p>")
        folder = RunFolder.create(tmp_path / "runs", {"n": 1})
        folder.write_summary({"complete": True}, "done")
    finally:
        os.umask(old)
    for f in (tmp_path / "report.html", folder.path / "config.json", folder.path / "summary.json",
              folder.path / "summary.md"):
        assert oct(f.stat().st_mode & 0o777) == oct(mode), f  # mkstemp alone would make it 0600


def test_load_run_columns_are_stable(tmp_path):
    run = RunFolder.create(tmp_path, {"suite": "s", "arms": ["base"], "k": 1})
    empty = load_run(run.path)
    assert list(empty.samples.columns) == list(SAMPLE_COLUMNS)
    assert list(empty.grades.columns) == list(GRADE_COLUMNS)
    assert len(empty.samples) == 0 and len(empty.grades) == 0 and empty.summary == {}

    run.append_result(_sample(index=0))
    run.append_result(_sample(case="c2", index=0, output="Rome"))
    run.append_error("c3", "base", 0, "UnitCallError: HTTP 500", 4)
    run.write_summary({"complete": False, "ran": 2, "total": 3}, "INCOMPLETE: 2/3 cases (1 sample(s) errored)")
    run.close()
    (run.path / "grades.jsonl").write_text(json.dumps(
        {"case_id": "c1", "arm": "base", "index": 0, "passed": True,
         "checks": [{"name": "contains", "passed": True, "reason": ""}]}) + "\n")
    loaded = load_run(run.path)
    assert list(loaded.samples.columns) == list(SAMPLE_COLUMNS)
    assert "usage" not in loaded.samples.columns
    row = loaded.samples.iloc[0]
    assert (row.prompt_tokens, row.completion_tokens, row.tags) == (12, 3, ["capital", "golden"])
    assert list(loaded.samples.output) == ["Paris", "Rome"]
    assert list(loaded.grades.columns)[: len(GRADE_COLUMNS)] == list(GRADE_COLUMNS)
    assert loaded.grades.iloc[0].checks == [{"name": "contains", "passed": True, "reason": ""}]
    assert loaded.errors.iloc[0].case_id == "c3" and loaded.errors.iloc[0].attempts == 4
    assert loaded.summary["ran"] == 2 and loaded.config["suite"] == "s"
    assert (run.path / "summary.md").read_text().splitlines()[0].startswith("INCOMPLETE: 2/3 cases")


def test_load_run_of_a_missing_folder_is_an_input_error(tmp_path):
    with pytest.raises(InputError):
        load_run(tmp_path / "nope")


def test_sample_files_can_be_skipped(tmp_path):
    run = RunFolder.create(tmp_path, {"suite": "s"})
    run.sample_files = False
    run.append_result(_sample())
    run.close()
    assert not (run.path / "samples").exists()
    assert [r["output"] for r in iter_jsonl(run.path / "results.jsonl")] == ["Paris"]


def test_one_process_at_a_time_holds_a_run_folder(tmp_path):
    import signal
    import subprocess
    import sys

    run = RunFolder.create(tmp_path, {"arms": ["base"], "k": 1})
    with run.lock():
        with pytest.raises(InputError, match="another evalkit process") as info:
            with RunFolder(run.path).lock():  # a second open file: refused, even in one process
                pass
        assert str(run.path) in str(info.value)
    with run.lock():  # released at the end of the block
        pass
    # A process killed while holding the lock leaves the file but not the lock.
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from evalkit.runfolder.runs import RunFolder\n"
        "with RunFolder(sys.argv[1]).lock():\n    print('held', flush=True); time.sleep(60)"), str(run.path)],  # holds it until killed
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match=rf"another evalkit process \(process {holder.pid}\)"):
            with RunFolder(run.path).lock():
                pass
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    assert (run.path / "run.lock").exists()
    with RunFolder(run.path).lock():
        pass


def test_grading_takes_the_run_folder_lock(tmp_path):
    from evalkit.conclusions.grading import grade_run

    run = RunFolder.create(tmp_path, {"arms": ["base"], "k": 1})
    with run.lock():
        with pytest.raises(InputError, match="another evalkit process"):
            grade_run(run.path)
    assert not (run.path / "grades.jsonl").exists()


def _sample_files(run) -> dict[str, str]:
    root = run.path / "samples"
    return {str(p.relative_to(root)): p.read_text(encoding="utf-8") for p in root.rglob("*") if p.is_file()}


def test_the_helper_process_writes_every_sample_file_before_close_returns(tmp_path):
    run = RunFolder.create(tmp_path, {"suite": "s"})
    run.offload_after = 2  # the first two inline, the rest through the helper
    samples = [_sample(case=f"c{i % 5}", arm=("base", "guided")[i % 2], index=i, output=f"out {i} \u00e9\n")
               for i in range(40)]
    for s in samples:
        run.append_result(s)
    assert run._writer is not None and run._inline_files == 2
    run.close()
    expected = {f"{s.case_id}/{s.arm}/sample-{s.index + 1}.txt": s.output for s in samples}
    assert _sample_files(run) == expected  # no temporary names left behind either
    assert [r["output"] for r in iter_jsonl(run.path / "results.jsonl")] == [s.output for s in samples]


def test_a_helper_that_dies_mid_run_is_replaced_by_writing_from_results(tmp_path):
    run = RunFolder.create(tmp_path, {"suite": "s"})
    run.offload_after = 0
    for i in range(10):
        run.append_result(_sample(index=i, output=f"a{i}"))
    run._writer.kill()
    for i in range(10, 20):
        run.append_result(_sample(index=i, output=f"a{i}"))
    with pytest.warns(RuntimeWarning, match="sample-file helper failed"):
        run.close()
    assert _sample_files(run) == {f"c1/base/sample-{i + 1}.txt": f"a{i}" for i in range(20)}


def test_repair_writes_only_the_missing_sample_files(tmp_path):
    run = RunFolder.create(tmp_path, {"suite": "s"})
    for i in range(3):
        run.append_result(_sample(index=i, output=f"t{i}"))
    run.close()
    sample_path(run.path, "c1", "base", 1).unlink()
    sample_path(run.path, "c1", "base", 2).write_text("edited by hand")
    assert RunFolder(run.path).repair_sample_files() == 1
    assert _sample_files(run) == {"c1/base/sample-1.txt": "t0", "c1/base/sample-2.txt": "t1",
                                  "c1/base/sample-3.txt": "edited by hand"}


def test_find_suite_dir_does_not_depend_on_the_current_directory(tmp_path, monkeypatch):
    from evalkit.runfolder.runs import find_suite_dir

    suite = tmp_path / "data" / "factual"
    run = suite / "runs" / "20261130-000000"
    run.mkdir(parents=True)
    (suite / "cases.jsonl").write_text('{"id": "a", "input": "x", "expected": "y"}\n')
    monkeypatch.chdir(tmp_path)
    assert find_suite_dir(run, "data/factual") == Path("data/factual")  # as recorded, from where it ran
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the recorded relative path no longer resolves: the layout does
    assert find_suite_dir(run, "data/factual").resolve() == suite
    assert find_suite_dir(run, None) is None
    (suite / "cases.jsonl").unlink()
    assert find_suite_dir(run, "data/factual") is None


def test_a_grade_line_round_trips_with_every_field():
    from evalkit.foundations.records import CheckResult, Grade
    from evalkit.runfolder.runs import grade_from_dict, grade_to_dict

    g = Grade("c1", "base", 2, None, (CheckResult("contains", True, ""), CheckResult("judge", False, "low")),
              judge_version="v2", judge_score=2, judge_reason="wrong", judge_cost_usd=1e-6, activated=True,
              error="judge timeout", judge_model="judge-m", judge_same_model_override=True)
    line = json.loads(json.dumps(grade_to_dict(g)))
    assert line["checks"] == [{"name": "contains", "passed": True, "reason": ""},
                              {"name": "judge", "passed": False, "reason": "low"}]
    assert grade_from_dict(line) == g
    assert grade_from_dict({"case_id": "c1", "arm": "a", "index": "0", "passed": True}) == Grade("c1", "a", 0, True, ())


def test_an_append_that_finds_no_room_leaves_no_torn_line(tmp_path):
    import subprocess
    import sys
    import textwrap

    # A real ENOSPC from the kernel (/dev/full), and a real short write then EFBIG from a
    # file size limit: either way the error is DiskFull naming the file, and the file
    # keeps only whole lines.
    code = textwrap.dedent(f"""
        import resource, json
        from evalkit.foundations.errors import DiskFull
        from evalkit.runfolder.runs import AppendLog, iter_jsonl
        log = AppendLog("/dev/full")
        try:
            log.append({{"a": 1}})
        except DiskFull as exc:
            print(json.dumps(str(exc)))
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
        log = AppendLog({str(tmp_path / "x.jsonl")!r})
        n = 0
        try:
            for n in range(10):
                log.append({{"n": n, "pad": "x" * 3000}})
        except DiskFull as exc:
            print(json.dumps(str(exc)))
        print(json.dumps([r["n"] for r in iter_jsonl({str(tmp_path / "x.jsonl")!r})]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    full, efbig, kept = [json.loads(x) for x in out.stdout.splitlines()]
    assert full == "disk full: /dev/full (No space left on device)"
    assert efbig == f"disk full: {tmp_path / 'x.jsonl'} (File too large)"
    assert kept == [0, 1]  # the third line went out in part, and was cut off again
    assert (tmp_path / "x.jsonl").read_bytes().endswith(b"\n")
