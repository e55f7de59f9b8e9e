"""Ingest bounded like lint (issue 31): zip members that inflate past a cap, JSON nested
past a depth, arm and case names that are not path components, control characters in
names, and rewards that are not numbers in [0, 1]; each through the CLI on real files,
each an exit 2 naming what was refused, with nothing written."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import pytest
import zstandard
from click.testing import CliRunner

from evalkit.conclusions import ingest
from evalkit._cli.main import main

FIXTURES = Path(__file__).parent / "data" / "ingest"
LM_EVAL = FIXTURES / "lm-eval" / "scripted"


def cli(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def _refused(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and res.exception is None or isinstance(res.exception, SystemExit)
    for w in words:
        assert w in res.output, (w, res.output)


def _nothing_written(dest: Path) -> None:
    assert not dest.exists()
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(f".{dest.name}.")]


def _rezip(tmp_path: Path, extra: dict[str, bytes], name: str = "log.eval", mutate_start=None) -> Path:
    """The committed capitals.eval re-written with deflate, plus `extra` members."""
    src = FIXTURES / "capitals.eval"
    out = tmp_path / name
    with zipfile.ZipFile(src) as zf, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zo:
        for n in zf.namelist():
            data = ingest._zip_member(src, zf, n)
            if n in ("_journal/start.json", "header.json") and mutate_start is not None:
                doc = json.loads(data)
                mutate_start(doc)
                data = json.dumps(doc).encode()
            zo.writestr(n, data)
        for n, data in extra.items():
            zo.writestr(n, data, zipfile.ZIP_STORED if n.endswith("zbomb.json") else zipfile.ZIP_DEFLATED)
    return out


def test_a_member_that_inflates_past_the_cap_is_refused_naming_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ingest, "MAX_MEMBER_BYTES", 1 << 20)
    bomb = _rezip(tmp_path, {"samples/bomb.json": b" " * (32 << 20)})  # 32 MiB of spaces, ~32 KB deflated
    assert bomb.stat().st_size < 1 << 20
    res = cli("ingest", bomb, "--to", tmp_path / "run")
    _refused(res, "samples/bomb.json", "1,048,576")
    _nothing_written(tmp_path / "run")


def test_a_zstd_member_whose_header_lies_about_its_size_stops_at_the_cap(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ingest, "MAX_MEMBER_BYTES", 1 << 20)
    frame = zstandard.ZstdCompressor().compress(b" " * (64 << 20))
    plain = _rezip(tmp_path, {"samples/zbomb.json": frame})
    data = bytearray(plain.read_bytes())
    # Mark the stored member as Zstandard (method 93) in its local and central headers:
    # the archive then declares the frame's few KB as the member's size.
    with zipfile.ZipFile(plain) as zf:
        info = zf.getinfo("samples/zbomb.json")
        struct.pack_into("<H", data, info.header_offset + 8, ingest.ZIP_ZSTD)
    start = 0
    while True:
        start = data.find(b"PK\x01\x02", start)
        if start < 0:
            break
        name_len = struct.unpack_from("<H", data, start + 28)[0]
        if bytes(data[start + 46 : start + 46 + name_len]) == b"samples/zbomb.json":
            struct.pack_into("<H", data, start + 10, ingest.ZIP_ZSTD)
        start += 4
    plain.write_bytes(bytes(data))
    res = cli("ingest", plain, "--to", tmp_path / "run")
    _refused(res, "samples/zbomb.json", "inflates past")
    _nothing_written(tmp_path / "run")


def test_the_archive_total_is_capped_across_members(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ingest, "MAX_ARCHIVE_BYTES", 3 << 20)
    members = {f"samples/pad{i}.json": b" " * (2 << 20) for i in range(3)}  # each under the member cap
    res = cli("ingest", _rezip(tmp_path, members), "--to", tmp_path / "run")
    _refused(res, "samples/pad1.json")
    _nothing_written(tmp_path / "run")


@pytest.mark.parametrize("arm", ["../../../../tmp/x", "..", "a/b", ".hidden", "a\x00b", "tab\tarm", ""])
def test_an_arm_that_is_not_a_path_component_is_refused(tmp_path: Path, arm: str) -> None:
    res = cli("ingest", FIXTURES / "capitals.json", "--to", tmp_path / "run", "--arm", arm)
    # a NUL is refused for any argument before the command runs, naming the option it was given to
    _refused(res, "--arm", "NUL character" if "\x00" in arm else "not usable as a folder name")
    _nothing_written(tmp_path / "run")
    assert not (tmp_path.parent / "x").exists()


def test_an_inspect_model_named_dotdot_is_refused(tmp_path: Path) -> None:
    log = _rezip(tmp_path, {}, mutate_start=lambda d: d["eval"].update(model=".."))
    res = cli("ingest", log, "--to", tmp_path / "run")
    _refused(res, "$.eval.model", "pass --arm")
    _nothing_written(tmp_path / "run")
    # with an arm given, the model is only a label and the log is read
    ok = cli("ingest", log, "--to", tmp_path / "run", "--arm", "dots")
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "run" / "samples").is_dir()
    assert not (tmp_path / "run" / "samples" / "sample-1.txt").exists()


@pytest.mark.parametrize("bad", ["gpt\x00x", "gpt\x1bx", "gpt\u2028x"])
def test_a_control_character_in_the_model_name_is_refused_naming_the_field(tmp_path: Path, bad: str) -> None:
    log = json.loads((FIXTURES / "capitals.json").read_text())
    log["eval"]["model"] = bad
    src = tmp_path / "log.json"
    src.write_text(json.dumps(log))
    res = cli("ingest", src, "--to", tmp_path / "run")
    _refused(res, "model name", "$.eval.model", "control character")
    _nothing_written(tmp_path / "run")


def test_an_lm_eval_line_nested_200k_deep_is_refused_with_its_line(tmp_path: Path) -> None:
    dest = tmp_path / "lm" / "scripted"
    dest.mkdir(parents=True)
    for f in LM_EVAL.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    samples = next(dest.glob("samples_capitals_*.jsonl"))
    lines = samples.read_text().splitlines()
    lines.insert(1, '{"doc_id": 99, "resps": ' + "[" * 200_000 + "]" * 200_000 + "}")
    samples.write_text("\n".join(lines) + "\n")
    res = cli("ingest", samples, "--to", tmp_path / "run")
    _refused(res, f"{samples.name}:2", "nested deeper than")
    _nothing_written(tmp_path / "run")


def test_an_inspect_json_log_nested_deep_is_refused_before_parsing(tmp_path: Path) -> None:
    src = tmp_path / "deep.json"
    src.write_text('{"eval": {}, "samples": ' + "[" * 100_000 + "]" * 100_000 + "}")
    res = cli("ingest", src, "--to", tmp_path / "run", "--format", "inspect")
    _refused(res, "deep.json", "nested deeper than")


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"task_id": 2, "trial": 0, "reward": "1"}', ["'1'", "not a number"]),
        ('{"task_id": 2, "trial": 0, "reward": true}', ["True", "not a number"]),
        ('{"task_id": 2, "trial": 0, "reward": 1.5}', ["1.5", "not in [0, 1]"]),
        ('{"task_id": 2, "trial": 0, "reward": -0.5}', ["-0.5", "not in [0, 1]"]),
        ('{"task_id": null, "trial": 0, "reward": 1.0}', ["task_id None"]),
        ('{"task_id": "a\\u0000b", "trial": 0, "reward": 1.0}', ["task_id", "control character"]),
    ],
)
def test_tau_bench_types_are_checked_with_the_line(tmp_path: Path, line: str, words: list[str]) -> None:
    src = tmp_path / "trials.jsonl"
    src.write_text('{"task_id": 1, "trial": 0, "reward": 1.0}\n' + line + "\n")
    res = cli("ingest", src, "--to", tmp_path / "run")
    _refused(res, "trials.jsonl:2", *words)
    _nothing_written(tmp_path / "run")


def test_a_tau_bench_file_named_as_no_folder_can_be_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "..jsonl"  # the default arm is the name before the first dot: empty
    src.write_text('{"task_id": 1, "trial": 0, "reward": 1.0}\n')
    res = cli("ingest", src, "--to", tmp_path / "run", "--format", "tau-bench")
    _refused(res, "pass --arm")
