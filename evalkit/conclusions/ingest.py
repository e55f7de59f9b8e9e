"""Bring your own results: turn another harness's output into an evalkit run folder.

Supported sources, read directly from their files (no other tool needs to be
installed): inspect-ai logs (`.eval` zip archives and `.json`), promptfoo's JSON output
(`promptfoo eval -o results.json`), lm-evaluation-harness `--log_samples` files
(`samples_<task>_<date>.jsonl`), tau-bench-style trial files (one JSON record per task
and trial with a reward), and an agent-evals outputs folder with its `evals.json`.

The run folder written here is the one `evalkit run` + `evalkit grade` write
(docs/formats.md): `config.json` (marked with the source and the original file's
sha256), `results.jsonl`, `samples/...`, `grades.jsonl`, `summary.json`, `summary.md`.
So `report`, `compare`, `gate` and the notebooks read it like any run. Nothing is
written until the whole source has been read and checked: the folder is built under a
temporary name and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import string
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import regex as _regex

from evalkit.conclusions.agentevals import _sample_files, load_eval_file, match_sample, read_sample_file
from evalkit.foundations._io import (
    MAX_JSON_DEPTH,
    JsonLine,
    check_regular_file,
    deep_offset,
    iter_jsonl,
    json_lines,
    read_file_bytes,
    write_atomic,
)
from evalkit.foundations.errors import InputError
from evalkit.foundations.layout import GRADES, RESULTS
from evalkit.foundations.records import CaseRow, CaseTable, CheckResult, Grade, Sample, Usage
from evalkit.runfolder.runs import RunFolder, grade_from_dict, grade_to_dict, sample_from_dict
from evalkit.suites.suite import case_id_problem

FORMATS = ("inspect", "promptfoo", "tau-bench", "tau2", "agent-evals", "lm-eval", "waza")
INSPECT_LOG_VERSIONS = (1, 2)  # inspect-ai's EvalLog.version values this reader knows
PROMPTFOO_RESULT_VERSIONS = (2, 3)
REWARD_TOL = 1e-6
MAX_SOURCE_BYTES = 512 * 1024 * 1024
# Bounds like lint's (evalkit.datasets.dataset.LIMITS): a zip member and a whole archive are read
# no further than these, uncompressed (a 1 MB `.eval` can inflate to gigabytes), and
# JSON is refused deeper than MAX_JSON_DEPTH before the recursive parser sees it.
MAX_MEMBER_BYTES = 256 * 1024 * 1024
MAX_ARCHIVE_BYTES = 512 * 1024 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_T = TypeVar("_T")


@dataclass(frozen=True)
class Ingested:
    """Another tool's results, read and checked, ready to be written as a run folder."""

    source: str
    source_file: str
    source_sha256: str
    name: str
    samples: tuple[Sample, ...]
    grades: tuple[Grade, ...]
    complete: bool = True
    reason: str | None = None
    expected_keys: int = 0  # (case, arm, index) keys the source planned, when it says
    models: dict[str, str] = field(default_factory=dict)  # arm -> model
    notes: tuple[str, ...] = ()
    errors: tuple[dict[str, Any], ...] = ()  # keys the source tried and failed: never a pass
    case_sets: dict[str, str] = field(default_factory=dict)  # case -> set, when the source has sets

    @classmethod
    def of_file(
        cls, source: str, path: Path, name: str, samples: list[Sample], grades: list[Grade], **fields: Any
    ) -> Ingested:
        """What a reader of one source file found: the file named and hashed (`fields`:
        the rest, by name)."""
        return cls(source, str(path), _sha256(path), name, tuple(samples), tuple(grades), **fields)

    @property
    def arms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.arm for s in self.samples))

    @property
    def cases(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.case_id for s in self.samples))


# ----------------------------------------------------------------------------- helpers


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    if path.is_dir():
        for p in sorted(path.rglob("*")):
            if p.is_file():
                h.update(str(p.relative_to(path)).encode())
                h.update(p.read_bytes())
        return h.hexdigest()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _case_id(raw: Any, where: str, path: Path) -> str:
    """The source's sample id as an evalkit case id (ids become folder names)."""
    cid = str(raw)
    problem = case_id_problem(cid)
    if problem:
        # Keep the id readable but safe, and unique through a short hash of the original.
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", cid).strip("._")[:100] or "case"
        cid = f"{slug}-{hashlib.sha1(str(raw).encode()).hexdigest()[:8]}"
    return cid


def _check_depth(text: str | bytes, where: str | Path, line: int | None = None) -> None:
    """Refuse JSON nested deeper than `MAX_JSON_DEPTH` before it is parsed (the parser
    recurses: 200,000 levels is a `RecursionError`), through `_io.deep_offset`, the one
    depth guard. For JSON lines, the line over the bound is named."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    at = deep_offset(text, MAX_JSON_DEPTH)
    if at is None:
        return
    if line is None and "\n" in text.strip():
        line = text.count("\n", 0, at) + 1
    raise InputError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels: refused before parsing", where, line)


def check_field(
    value: Any, what: str, where: str | Path, *, json_path: str | None = None, line: int | None = None
) -> str:
    """A name-like field of a source (a model, a task, a scorer) as text, refused when it
    holds a NUL or another control character (it would reach file names and pages)."""
    text = str(value)
    m = _CONTROL.search(text)
    if m:
        raise InputError(
            f"{what} {text!r} holds a control character (U+{ord(m.group()):04X}): refused", where, line, json_path
        )
    return text


def check_arm(arm: str, where: str | Path | None, how: str) -> str:
    """An arm name as a path component (arms name folders and files): exit 2 otherwise."""
    problem = case_id_problem(arm)
    if problem:
        raise InputError(
            f"arm name {arm!r} ({how}) is not usable as a folder name: {problem.replace('id ', '', 1)}", where
        )
    return arm


def _read_json(path: Path, data: bytes | None = None, member: str | None = None) -> Any:
    where = f"{path}!{member}" if member else str(path)
    try:
        text = (data if data is not None else read_file_bytes(path, limit=MAX_SOURCE_BYTES)).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 at byte {exc.start}", where) from None
    _check_depth(text, where)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", where, exc.lineno) from None


def _get(obj: Mapping[str, Any], key: str, kind: type[_T]) -> _T:
    """`obj[key]` when it is a `kind` (a dict, a list), else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, kind) else kind()


def _add_result(
    samples: list[Sample],
    grades: list[Grade],
    check: CheckResult,
    *,
    case_id: str,
    arm: str,
    index: int,
    tags: tuple[str, ...],
    model: str,
    output: str = "",
    tool_calls: tuple[Any, ...] = (),
    finish_reason: str | None = None,
    usage: Usage | None = None,
    latency_ms: float = 0.0,
    cost_usd: float = 0.0,
    request_hash: str = "",
) -> None:
    """One result of another harness as evalkit's sample and its grade (one check, the
    harness's own verdict): seed 0 and no token counts unless the source records them."""
    samples.append(
        Sample(
            case_id=case_id,
            tags=tags,
            arm=arm,
            index=index,
            seed=0,
            model=model,
            output=output,
            tool_calls=tool_calls,
            finish_reason=finish_reason,
            usage=usage or Usage(0, 0),
            latency_ms=latency_ms,
            cost_usd=cost_usd,
            request_hash=request_hash,
        )
    )
    grades.append(Grade(case_id=case_id, arm=arm, index=index, passed=check.passed, checks=(check,)))


def _json_line(item: JsonLine, path: Path) -> Any:
    """The value of one line of a JSON-lines source, or an InputError naming the line."""
    if item.error is not None:
        raise InputError(f"not a JSON line: {item.error}", path, item.line)
    return item.value


def _int(value: Any, what: str, path: Path, *, line: int | None = None, json_path: str | None = None) -> int:
    """An integer field of the source (an epoch, a trial number), or a clear InputError."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InputError(f"{what} {value!r} is not an integer", path, line, json_path)
    try:
        return int(value)
    except ValueError:
        raise InputError(f"{what} {value!r} is not an integer", path, line, json_path) from None


def _usage(d: dict[str, Any] | None) -> Usage:
    d = d or {}
    return Usage(
        int(d.get("prompt_tokens", d.get("input_tokens", d.get("prompt", 0))) or 0),
        int(d.get("completion_tokens", d.get("output_tokens", d.get("completion", 0))) or 0),
    )


def _check_source(path: Path) -> None:
    """A folder, or a regular file of 1 byte to `MAX_SOURCE_BYTES`: a FIFO (which would
    hang the read) or a device such as /dev/zero (which never ends) is refused here,
    before anything opens it for reading."""
    if not os.path.lexists(path):
        raise InputError("file not found", path)
    if path.is_dir():
        return
    if check_regular_file(path, limit=MAX_SOURCE_BYTES) == 0:
        raise InputError("file is empty", path)


def detect_format(path: str | Path) -> str:
    """Guess the source format from the file: a zip is an inspect `.eval`, JSON with
    `eval` + `samples` is an inspect `.json` log, JSON with `results.results` is
    promptfoo, `samples_<task>_<date>.jsonl` (or JSON lines with `doc_id`/`resps`) is
    lm-eval's `--log_samples` output, other JSON lines are tau-bench trials, and a
    folder is an agent-evals outputs folder."""
    p = Path(path)
    _check_source(p)
    if p.is_dir():
        return "agent-evals"
    with open(p, "rb") as fh:
        head = fh.read(4)
    if head.startswith(b"PK"):
        return "inspect"
    if p.suffix == ".eval":
        return "inspect"
    if p.suffix == ".jsonl":
        if LM_EVAL_SAMPLES.fullmatch(p.name):
            return "lm-eval"
        with open(p, "rb") as fh:
            first = fh.readline(1 << 20)
        try:
            head_rec = json.loads(first)
        except (json.JSONDecodeError, UnicodeDecodeError):
            head_rec = None
        if isinstance(head_rec, dict) and "doc_id" in head_rec and "resps" in head_rec:
            return "lm-eval"
        return "tau-bench"
    data = _read_json(p)
    if isinstance(data, dict) and "eval" in data and ("samples" in data or "version" in data):
        return "inspect"
    if isinstance(data, dict) and isinstance(data.get("results"), dict) and "results" in data["results"]:
        return "promptfoo"
    if isinstance(data, list) and data and isinstance(data[0], dict) and "reward" in data[0]:
        return "tau-bench"
    if isinstance(data, dict) and "eval_id" in data and isinstance(data.get("tasks"), list):
        return "waza"
    if isinstance(data, dict) and isinstance(data.get("simulations"), list):
        return "tau2"
    raise InputError(f"unrecognised results format: pass --format ({', '.join(FORMATS)})", p)


# ----------------------------------------------------------------------------- inspect


def _inspect_pass(value: Any, threshold: float | None, where: str, path: Path) -> tuple[bool, str]:
    """Map an inspect score value to pass/fail.

    Letter grades follow inspect's own `value_to_float`: C (correct) passes, I
    (incorrect), N (no answer) fail; P (partial, 0.5) passes only under a threshold
    <= 0.5. Numbers and booleans: 1/0 (or True/False) directly, anything else needs a
    threshold from the user (pass when value >= threshold).
    """
    letters = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
    if isinstance(value, bool):
        num = 1.0 if value else 0.0
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        num = float(value)
    elif isinstance(value, str) and value.strip().upper() in letters:
        num = letters[value.strip().upper()]
    elif isinstance(value, str):
        try:
            num = float(value)
        except ValueError:
            raise InputError(f"score value {value!r} is neither C/I/P/N nor a number", path, json_path=where) from None
    else:
        raise InputError(
            f"score value of type {type(value).__name__} cannot be mapped to pass/fail "
            "(a dict of several values needs one scorer value: not supported)",
            path,
            json_path=where,
        )
    if threshold is not None:
        return num >= threshold, f"value={value!r} threshold={threshold:g}"
    if num in (0.0, 1.0):
        return num == 1.0, f"value={value!r}"
    raise InputError(
        f"score value {value!r} is not 0/1 or C/I: give --threshold to map it to pass/fail", path, json_path=where
    )


ZIP_ZSTD = 93  # the zip method id for Zstandard, which inspect-ai writes since 0.3.1xx


def _capped(chunks: Any, p: Path, name: str, limit: int) -> bytes:
    """The chunks of a member joined, stopping at `limit` bytes (exit 2 naming it)."""
    out = bytearray()
    for chunk in chunks:
        out += chunk
        if len(out) > limit:
            raise InputError(f"archive member {name} inflates past {limit:,} bytes: refused (read no further)", p)
    return bytes(out)


def _zip_member(p: Path, zf: zipfile.ZipFile, name: str, limit: int = MAX_MEMBER_BYTES) -> bytes:
    """One member's bytes, CRC-checked, read in chunks no further than `limit`
    uncompressed (the size the archive declares is not trusted). Why by hand: Python's
    zipfile (before 3.14) has no Zstandard method, and inspect-ai writes `.eval` archives
    with it, so those members are read raw from the archive and decompressed with the
    `zstandard` package."""
    info = zf.getinfo(name)
    shown = name
    if limit < MAX_MEMBER_BYTES:  # what is left of the archive's total
        shown = f"{name} (the members together, over MAX_ARCHIVE_BYTES {MAX_ARCHIVE_BYTES:,})"
    limit = min(limit, MAX_MEMBER_BYTES)
    if info.file_size > limit:
        raise InputError(f"archive member {shown} declares {info.file_size:,} bytes, over {limit:,}: refused", p)
    try:
        if info.compress_type != ZIP_ZSTD:
            with zf.open(name) as fh:
                return _capped(iter(lambda: fh.read(1 << 20), b""), p, shown, limit)
        import zstandard  # lazy: only a zstd-compressed inspect-ai archive needs it

        with open(p, "rb") as fh:
            fh.seek(info.header_offset)
            local = fh.read(30)
            if len(local) < 30 or local[:4] != b"PK\x03\x04":
                raise InputError(f"corrupt local header for {name}", p)
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            fh.seek(info.header_offset + 30 + name_len + extra_len)
            raw = fh.read(info.compress_size)
        if len(raw) != info.compress_size:
            raise InputError(f"truncated .eval archive: member {name} is cut short", p)
        reader = zstandard.ZstdDecompressor().stream_reader(raw)
        data = _capped(iter(lambda: reader.read(1 << 20), b""), p, shown, limit)
    except (zipfile.BadZipFile, EOFError, zlib.error, ValueError, RuntimeError) as exc:
        raise InputError(f"truncated or corrupt .eval archive (member {name}): {exc}", p) from None
    except Exception as exc:  # zstandard.ZstdError and similar decoder failures
        if exc.__class__.__name__ == "ZstdError":
            raise InputError(f"corrupt .eval archive (member {name}): {exc}", p) from None
        raise
    if zlib.crc32(data) & 0xFFFFFFFF != info.CRC:
        raise InputError(f"corrupt .eval archive: CRC mismatch in {name}", p)
    return data


def _inspect_parts(p: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, samples) from an inspect log, `.eval` (zip) or `.json`."""
    with open(p, "rb") as fh:
        is_zip = fh.read(2) == b"PK"
    if not is_zip:
        data = _read_json(p)
        if not isinstance(data, dict):
            raise InputError("an inspect log must be a JSON object", p, json_path="$")
        return data, list(data.get("samples") or [])
    try:
        with zipfile.ZipFile(p) as zf:
            names = zf.namelist()
            if "header.json" in names:
                header = _read_json(p, _zip_member(p, zf, "header.json"), "header.json")
            elif "_journal/start.json" in names:
                header = _read_json(p, _zip_member(p, zf, "_journal/start.json"), "_journal/start.json")
                header.setdefault("status", "started")
            else:
                raise InputError("not an inspect .eval archive (no header.json)", p)
            members: list[tuple[str, bytes]] = []
            left = MAX_ARCHIVE_BYTES  # all members together, uncompressed: read (capped) before any is parsed
            for n in sorted(names):
                if n.startswith("samples/") and n.endswith(".json"):
                    data = _zip_member(p, zf, n, left)
                    left -= len(data)
                    members.append((n, data))
            samples = [_read_json(p, data, n) for n, data in members]
    except zipfile.BadZipFile as exc:
        raise InputError(f"truncated or corrupt .eval archive: {exc}", p) from None
    return header, samples


def _inspect_spec(p: Path, header: dict[str, Any], arm: str | None) -> tuple[str, str, str, int]:
    """(model, arm, task, expected sample count) from an inspect log's header; refuses an
    unknown log format version."""
    version = header.get("version")
    if version not in INSPECT_LOG_VERSIONS:
        raise InputError(
            f"unknown inspect log format version {version!r} (known: {', '.join(map(str, INSPECT_LOG_VERSIONS))})",
            p,
            json_path="$.version",
        )
    spec = header.get("eval") or {}
    model = check_field(spec.get("model") or "unknown-model", "model name", p, json_path="$.eval.model")
    arm_name = arm or check_arm(model.replace("/", "_"), p, "the log's model at $.eval.model; pass --arm")
    task = check_field(spec.get("task") or p.stem, "task name", p, json_path="$.eval.task")
    epochs = int((spec.get("config") or {}).get("epochs") or 1)
    n_dataset = int((spec.get("dataset") or {}).get("samples") or 0)
    return model, arm_name, task, n_dataset * epochs


def _inspect_key(s: dict[str, Any], where: str, p: Path, seen: set[tuple[str, int]]) -> tuple[str, int]:
    """(case id, 0-based index) of one inspect sample, checked and added to `seen`
    (inspect counts epochs from 1; a (sample, epoch) may appear once)."""
    if "id" not in s or "epoch" not in s:
        raise InputError("sample without id or epoch", p, json_path=where)
    cid = _case_id(s["id"], where, p)
    epoch = _int(s["epoch"], "epoch", p, json_path=f"{where}.epoch")
    if epoch < 1:
        raise InputError(f"epoch {epoch} is below 1 (inspect counts epochs from 1)", p, json_path=f"{where}.epoch")
    index = epoch - 1
    if (cid, index) in seen:
        raise InputError(f"sample {s['id']!r} epoch {s['epoch']} appears twice", p, json_path=where)
    seen.add((cid, index))
    return cid, index


def _inspect_error(s: dict[str, Any], err: Any, cid: str, arm: str, index: int) -> dict[str, Any]:
    """The errors.jsonl row of an inspect sample that raised: inspect (fail_on_error=False
    or a fraction) finishes `success` around it; it is an errored key, never a pass,
    never a failed answer."""
    msg = err.get("message") if isinstance(err, dict) else err
    return {
        "case_id": cid,
        "arm": arm,
        "index": index,
        "error": f"sample {s['id']!r} epoch {s['epoch']} errored: {' '.join(str(msg or 'no message').split())[:400]}",
    }


def _inspect_score(
    s: dict[str, Any], where: str, scorer: str | None, threshold: float | None, p: Path
) -> tuple[str, bool, str]:
    """(scorer name, passed, reason) of one inspect sample: the chosen scorer's value
    (the first scorer when `scorer` is None)."""
    scores = s.get("scores") or {}
    if not scores:
        raise InputError(
            f"sample {s['id']!r} epoch {s['epoch']} has no scores (and no error)", p, json_path=f"{where}.scores"
        )
    name = scorer or next(iter(scores))
    if name not in scores:
        raise InputError(
            f"sample {s['id']!r} has no scorer {name!r} (it has {', '.join(scores)})",
            p,
            json_path=f"{where}.scores",
        )
    sc = scores[name] or {}
    passed, reason = _inspect_pass(sc.get("value"), threshold, f"{where}.scores.{name}.value", p)
    return name, passed, reason


def _inspect_answer(s: dict[str, Any]) -> dict[str, Any]:
    """An inspect sample's answer as `_add_result` keywords: output text, tool calls,
    stop reason, token usage (summed over models), latency and tags."""
    output = s.get("output") or {}
    text = output.get("completion")
    if text is None:
        choices = output.get("choices") or [{}]
        content = (choices[0].get("message") or {}).get("content", "")
        text = content if isinstance(content, str) else json.dumps(content)
    usage_total = Usage(0, 0)
    for u in (s.get("model_usage") or {}).values():
        uu = _usage(u)
        usage_total = Usage(
            usage_total.prompt_tokens + uu.prompt_tokens, usage_total.completion_tokens + uu.completion_tokens
        )
    tags = _get(s.get("metadata") or {}, "tags", list)
    tool_calls = tuple(
        {"name": tc.get("function"), "arguments": tc.get("arguments")}
        for m in (s.get("messages") or [])
        if m.get("role") == "assistant"
        for tc in (m.get("tool_calls") or [])
    )
    return {
        "tags": tuple(str(t) for t in tags) or ("inspect",),
        "output": str(text),
        "tool_calls": tool_calls,
        "finish_reason": ((output.get("choices") or [{}])[0].get("stop_reason")),
        "usage": usage_total,
        "latency_ms": float(s.get("total_time") or 0.0) * 1000.0,
    }


def _inspect_completeness(status: Any, scored: int, errored: int, expected: int) -> tuple[bool, str | None]:
    """(complete, reason) of an inspect log: complete when it finished `success`, no
    sample errored and every planned (sample, epoch) was tried."""
    tried = scored + errored
    complete = status == "success" and not errored and (not expected or tried == expected)
    reasons = []
    if errored:
        reasons.append(f"{errored} inspect sample(s) errored")
    if status != "success" or (expected and tried != expected):
        reasons.append(f"inspect log status {status!r}, {scored}/{expected or '?'} samples scored")
    return complete, "; ".join(reasons) or None


def read_inspect_log(
    path: str | Path, *, threshold: float | None = None, scorer: str | None = None, arm: str | None = None
) -> Ingested:
    """Read an inspect-ai log: one evalkit sample per (sample, epoch).

    The arm is the log's model unless `arm` is given; the pass/fail of each sample is
    the chosen scorer's value (the first scorer when `scorer` is None).
    """
    p = Path(path)
    _check_source(p)
    header, raw_samples = _inspect_parts(p)
    model, arm_name, task, expected = _inspect_spec(p, header, arm)
    status = header.get("status")
    samples: list[Sample] = []
    grades: list[Grade] = []
    errors: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    for i, s in enumerate(raw_samples):
        where = f"$.samples[{i}]"
        cid, index = _inspect_key(s, where, p, seen)
        err = s.get("error")
        if err:
            errors.append(_inspect_error(s, err, cid, arm_name, index))
            continue
        name, passed, reason = _inspect_score(s, where, scorer, threshold, p)
        _add_result(
            samples,
            grades,
            CheckResult(f"inspect:{name}", passed, "" if passed else reason),
            case_id=cid,
            arm=arm_name,
            index=index,
            model=model,
            **_inspect_answer(s),
        )
    if not samples and not errors:
        raise InputError(f"the log has no samples (status {status!r}): nothing to analyse", p)
    complete, why = _inspect_completeness(status, len(samples), len(errors), expected)
    return Ingested.of_file(
        "inspect-ai",
        p,
        task,
        samples,
        grades,
        complete=complete,
        reason=why,
        expected_keys=expected,
        models={arm_name: model},
        errors=tuple(errors),
    )


# ---------------------------------------------------------------------------- promptfoo


def _promptfoo_identity(test_case: dict[str, Any], row_vars: Any) -> str:
    """The test's identity: its whole `testCase` (vars after expansion, asserts, options,
    description, metadata), canonical JSON. promptfoo gives every repeat its own
    `testIdx` and writes no repeat index, so repeats are the rows of one identity."""
    tc = dict(test_case)
    if "vars" not in tc and isinstance(row_vars, dict):
        tc["vars"] = row_vars
    return json.dumps(tc, sort_keys=True, ensure_ascii=False, default=str)


def _vars_label(v: Any) -> str:
    """`country=France, year=2024`: the vars of an expanded test, short and readable."""
    if not isinstance(v, dict) or not v:
        return ""
    parts = []
    for k, x in v.items():
        s = x if isinstance(x, str) else json.dumps(x, ensure_ascii=False, sort_keys=True)
        parts.append(f"{k}={' '.join(str(s).split())[:40]}")
    return ", ".join(parts)[:90]


def _asserts_label(asserts: Any) -> str:
    """`icontains paris; contains Lyon`: a test's asserts, short and readable."""
    if not isinstance(asserts, list):
        return ""
    parts = []
    for a in asserts:
        if isinstance(a, dict):
            v = a.get("value")
            v = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) if v is not None else ""
            parts.append(f"{a.get('type', '?')} {' '.join(v.split())[:30]}".strip())
    return "; ".join(parts)[:80]


def _promptfoo_case_ids(tests: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Identity -> a readable case id: the test's `metadata.id`, else its description
    (the display name), else its vars; when one name covers several identities (one
    description over a var expansion, two tests of the same vars with different
    asserts), the vars, then the asserts, then a short hash of the identity tell them
    apart. Ids
    depend only on the tests themselves, so two outputs of one config pair up."""

    def base(tc: dict[str, Any]) -> str:
        meta = _get(tc, "metadata", dict)
        name = meta.get("id") or tc.get("description")
        if name is not None and str(name).strip():
            return " ".join(str(name).split())
        return _vars_label(tc.get("vars")) or "test"

    def group(names: dict[str, str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for ident, name in names.items():
            out.setdefault(name, []).append(ident)
        return out

    names = {ident: base(tc) for ident, tc in tests.items()}
    for name, idents in group(names).items():
        if len(idents) > 1 and base(tests[idents[0]]) != _vars_label(tests[idents[0]].get("vars")):
            for ident in idents:
                label = _vars_label(tests[ident].get("vars"))
                if label:
                    names[ident] = f"{name} [{label}]"
    for name, idents in group(names).items():
        labels = {ident: _asserts_label(tests[ident].get("assert")) for ident in idents}
        if len(idents) > 1 and len(set(labels.values())) == len(idents):
            for ident in idents:
                names[ident] = f"{name} [{labels[ident]}]"
    for name, idents in group(names).items():
        if len(idents) > 1:
            for ident in idents:
                names[ident] = f"{name} #{hashlib.sha1(ident.encode()).hexdigest()[:8]}"
    return {ident: _case_id(name, "", Path()) for ident, name in names.items()}


def _promptfoo_rows(p: Path, data: Any) -> list[dict[str, Any]]:
    """The result rows of a promptfoo output, checked: a known results version, and
    each row an object with `success` and an object `testCase`."""
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise InputError("not a promptfoo output (no results object)", p, json_path="$.results")
    res = data["results"]
    version = res.get("version")
    if version not in PROMPTFOO_RESULT_VERSIONS:
        raise InputError(
            f"unknown promptfoo results version {version!r} (known: {', '.join(map(str, PROMPTFOO_RESULT_VERSIONS))})",
            p,
            json_path="$.results.version",
        )
    rows = res.get("results")
    if not isinstance(rows, list):
        raise InputError("results.results must be a list", p, json_path="$.results.results")
    for i, r in enumerate(rows):
        where = f"$.results.results[{i}]"
        if not isinstance(r, dict):
            raise InputError("a result row must be an object", p, json_path=where)
        if "success" not in r:
            raise InputError("result row without `success` (not graded)", p, json_path=f"{where}.success")
        if not isinstance(r.get("testCase") or {}, dict):
            raise InputError("testCase must be an object", p, json_path=f"{where}.testCase")
    return rows


def _promptfoo_provider(r: dict[str, Any]) -> str:
    """A row's provider: its label, else its id."""
    prov = r.get("provider") or {}
    return str((prov.get("label") or prov.get("id")) if isinstance(prov, dict) else prov)


def _promptfoo_prompt(r: dict[str, Any]) -> str:
    """A row's prompt: its label, else `p<promptIdx>`."""
    pr = _get(r, "prompt", dict)
    return str(pr.get("label") or f"p{r.get('promptIdx', 0)}")


def _promptfoo_keys(
    rows: list[dict[str, Any]], arm: str | None
) -> tuple[list[tuple[str, str, int]], dict[str, str], int]:
    """Per row (case id, arm, testIdx), the arms' models and the number of distinct tests.
    An arm is a provider; when one provider label runs several prompts, a (provider,
    prompt) pair, so that no two arms are merged."""
    combos = {(_promptfoo_provider(r), r.get("promptIdx")) for r in rows}
    split_prompts = len(combos) > len({c[0] for c in combos})
    idents = [_promptfoo_identity(r.get("testCase") or {}, r.get("vars")) for r in rows]
    tests = {ident: json.loads(ident) for ident in dict.fromkeys(idents)}
    case_ids = _promptfoo_case_ids(tests)
    keyed: list[tuple[str, str, int]] = []
    models: dict[str, str] = {}
    for i, r in enumerate(rows):
        prov_id = _promptfoo_provider(r)
        arm_name = arm or re.sub(r"[^A-Za-z0-9_.-]+", "_", prov_id or "provider")
        if split_prompts and not arm:
            arm_name += "-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", _promptfoo_prompt(r))
        models[arm_name] = str(prov_id)
        test_idx = r.get("testIdx")
        keyed.append((case_ids[idents[i]], arm_name, test_idx if isinstance(test_idx, int) else i))
    return keyed, models, len(tests)


def _promptfoo_order(keyed: list[tuple[str, str, int]]) -> tuple[list[int], dict[int, int], dict[tuple[str, str], int]]:
    """(rows in testIdx order, each row's sample index within its (case, arm), the rows
    per (case, arm))."""
    order = sorted(range(len(keyed)), key=lambda i: (keyed[i][2], i))
    index_of: dict[int, int] = {}
    counters: dict[tuple[str, str], int] = {}
    for i in order:
        ck = keyed[i][:2]
        index_of[i] = counters.get(ck, 0)
        counters[ck] = index_of[i] + 1
    return order, index_of, counters


def _promptfoo_errored(r: dict[str, Any]) -> str | None:
    """The error of a row that gave no answer, else None. promptfoo's ResultFailureReason:
    0 none, 1 assertion failed, 2 error (the provider or the test errored): an error is
    not a failed answer, it is no answer."""
    resp = r.get("response") or {}
    if r.get("failureReason") == 2 or (not r["success"] and resp.get("error") and not resp.get("output")):
        return str(r.get("error") or resp.get("error") or "promptfoo error")[:500]
    return None


def _promptfoo_answer(r: dict[str, Any]) -> tuple[CheckResult, dict[str, Any]]:
    """A graded row's verdict (promptfoo's own `success`) and its answer as `_add_result`
    keywords."""
    resp = r.get("response") or {}
    out = resp.get("output", "")
    passed = bool(r["success"])
    reason = "" if passed else str((r.get("gradingResult") or {}).get("reason") or r.get("error") or "failed")
    test_case = r.get("testCase") or {}
    return CheckResult("promptfoo:assertions", passed, reason), {
        "tags": tuple(str(v) for v in ((test_case.get("metadata") or {}).get("tags") or ())) or ("promptfoo",),
        "output": out if isinstance(out, str) else json.dumps(out),
        "finish_reason": resp.get("finishReason"),
        "usage": _usage(resp.get("tokenUsage") or r.get("tokenUsage") or {}),
        "latency_ms": float(r.get("latencyMs") or 0.0),
        "cost_usd": float(r.get("cost") or 0.0),
    }


def _promptfoo_notes(data: dict[str, Any], n_tests: int, counters: dict[tuple[str, str], int]) -> tuple[str, ...]:
    """Notes on a promptfoo output: its distinct tests and `--repeat`, and the cases
    whose rows per arm are not the repeat count (identical tests merge)."""
    notes = [f"{n_tests} distinct tests"]
    repeat = _get(data, "runtimeOptions", dict).get("repeat")
    if isinstance(repeat, int) and repeat > 0:
        notes.append(f"--repeat {repeat}")
        uneven = sorted(c for (c, _), n in counters.items() if n != repeat)
        if uneven:
            notes.append(
                f"{len(uneven)} case(s) do not have {repeat} rows per arm (identical tests merge): "
                + ", ".join(uneven[:5])
            )
    return tuple(notes)


def read_promptfoo(path: str | Path, *, arm: str | None = None) -> Ingested:
    """Read promptfoo's `-o results.json`: each provider (and prompt, when one provider
    runs several) is an arm; a case is one test, keyed by its identity (the whole
    `testCase`: vars after expansion, asserts, options), so `--repeat N` rows group into
    one case of N samples and each value of an expanded var is a case of its own. The
    description, when there is one, names the case. Samples are indexed by promptfoo's
    `testIdx` order. Pass/fail is promptfoo's own `success` for the row (its
    assertions); a row that errored is kept in errors.jsonl, never a pass."""
    p = Path(path)
    _check_source(p)
    data = _read_json(p)
    rows = _promptfoo_rows(p, data)
    keyed, models, n_tests = _promptfoo_keys(rows, arm)
    order, index_of, counters = _promptfoo_order(keyed)
    samples: list[Sample] = []
    grades: list[Grade] = []
    errors: list[dict[str, Any]] = []
    for i in order:
        cid, arm_name, _ = keyed[i]
        error = _promptfoo_errored(rows[i])
        if error is not None:
            errors.append({"case_id": cid, "arm": arm_name, "index": index_of[i], "error": error})
            continue
        check, answer = _promptfoo_answer(rows[i])
        _add_result(
            samples, grades, check, case_id=cid, arm=arm_name, index=index_of[i], model=models[arm_name], **answer
        )
    return Ingested.of_file(
        "promptfoo",
        p,
        str(data.get("evalId") or p.stem),
        samples,
        grades,
        complete=not errors,
        reason=f"{len(errors)} promptfoo result(s) errored" if errors else None,
        expected_keys=len(samples) + len(errors),
        models=models,
        notes=_promptfoo_notes(data, n_tests, counters),
        errors=tuple(errors),
    )


# ---------------------------------------------------------------------------- tau-bench


def read_tau_bench(path: str | Path, *, arm: str | None = None) -> Ingested:
    """Read tau-bench-style trials: JSON lines (or a JSON list) of `{"task_id", "trial",
    "reward"}`; a trial succeeds when its reward is 1 within 1e-6."""
    p = Path(path)
    _check_source(p)
    text = read_file_bytes(p, limit=MAX_SOURCE_BYTES)
    _check_depth(text, p)
    try:
        records = json.loads(text)
        if not isinstance(records, list):
            records = [records]
        lines = [(i + 1, r) for i, r in enumerate(records)]
    except (json.JSONDecodeError, UnicodeDecodeError):
        lines = [(item.line, _json_line(item, p)) for item in json_lines(text)]
    arm_name = arm or check_arm(p.name.split(".")[0], p, "the file's name; pass --arm")
    trials: dict[str, dict[int, tuple[int, float]]] = {}  # case -> trial number -> (line, reward)
    for n, r in lines:
        if not isinstance(r, dict) or "task_id" not in r or "reward" not in r:
            raise InputError("a trial needs task_id and reward", p, n)
        raw_reward = r["reward"]
        # A number, not a string or a boolean that float() would take ("1", true).
        if isinstance(raw_reward, bool) or not isinstance(raw_reward, (int, float)):
            raise InputError(f"reward {raw_reward!r} is not a number (a JSON number in [0, 1])", p, n)
        reward = float(raw_reward)
        if math.isnan(reward) or not 0.0 <= reward <= 1.0:
            raise InputError(f"reward {raw_reward!r} is not in [0, 1]", p, n)
        task_id = r["task_id"]
        if isinstance(task_id, bool) or not isinstance(task_id, (str, int)) or task_id == "":
            raise InputError(f"task_id {task_id!r} is not a string or an integer", p, n)
        check_field(task_id, "task_id", p, line=n)
        cid = _case_id(f"task-{task_id}", f"line {n}", p)
        trial = _int(r.get("trial", 0), "trial", p, line=n)
        if trial in trials.setdefault(cid, {}):
            raise InputError(f"task {r['task_id']} trial {trial} appears twice", p, n)
        trials[cid][trial] = (n, reward)
    # Sample indices count from 0 in the order of the file's trial numbers, whatever they
    # start from (0 or 1), so two sources pair trial by trial on (case, index).
    samples: list[Sample] = []
    grades: list[Grade] = []
    for cid, by_trial in trials.items():
        for index, trial in enumerate(sorted(by_trial)):
            reward = by_trial[trial][1]
            passed = abs(reward - 1.0) <= REWARD_TOL
            _add_result(
                samples,
                grades,
                CheckResult("reward", passed, "" if passed else f"trial {trial}: reward={reward:g}"),
                case_id=cid,
                arm=arm_name,
                index=index,
                tags=("tau-bench",),
                model=arm_name,
            )
    if not samples:
        raise InputError("no trials in the file", p)
    return Ingested.of_file(
        "tau-bench",
        p,
        p.name.split(".")[0],
        samples,
        grades,
        expected_keys=len(samples),
        models={arm_name: arm_name},
    )


# ---------------------------------------------------------------------------------- waza

WAZA_PASSED = "passed"
WAZA_ERRORED = ("error", "errored", "timeout", "skipped")


def _waza_number(run: dict[str, Any], key: str, p: Path, rw: str, *, integer: bool = False) -> float:
    """A run's `key` (0 when absent): a finite non-negative number (an integer when
    `integer`), else an `InputError` naming its JSON path. A string such as "nan", a
    bool or an object is refused, so no NaN reaches results.jsonl."""
    v = run.get(key)
    if v is None:
        return 0
    ok = isinstance(v, int) if integer else isinstance(v, (int, float)) and math.isfinite(v)
    if isinstance(v, bool) or not ok or v < 0:
        want = "a non-negative integer" if integer else "a finite non-negative number"
        raise InputError(f"{key} is {_shown_value(v)}, not {want}", p, json_path=f"{rw}.{key}")
    return v  # type: ignore[no-any-return]


def _waza_usage(digest: dict[str, Any], p: Path, rw: str) -> Usage:
    """A run's `session_digest.usage`, each count checked (`_waza_number`)."""
    u = digest.get("usage")
    if u is None:
        return Usage(0, 0)
    where = f"{rw}.session_digest.usage"
    if not isinstance(u, dict):
        raise InputError(f"usage is {_shown_value(u)}, not an object of token counts", p, json_path=where)
    counts = [
        int(_waza_number(u, next((k for k in keys if k in u), keys[0]), p, where, integer=True))
        for keys in (("prompt_tokens", "input_tokens", "prompt"), ("completion_tokens", "output_tokens", "completion"))
    ]
    return Usage(counts[0], counts[1])


def _shown_value(v: Any) -> str:
    """A refused value as JSON, cut to 60 characters (for the message)."""
    text = json.dumps(v, default=str, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def read_waza_results(path: str | Path, *, arm: str | None = None) -> Ingested:
    """Read Waza's result JSON (`waza run -o results.json`, microsoft/waza schema 1.x):
    `eval_name`, `config.runs_per_test` and `model_id`, and `tasks[]` with their `runs[]`
    (`run_number`, `status`, `validations`, `final_output`, `tool_events`,
    `session_digest.usage`). A run `passed` is a pass, `failed` a failure with its failed
    validations as the reason; an errored, timed-out or skipped run is an errored key,
    never a pass; a task with fewer runs than `runs_per_test` leaves the run INCOMPLETE."""
    p = Path(path)
    _check_source(p)
    doc = _read_json(p)
    if not isinstance(doc, dict) or not isinstance(doc.get("tasks"), list):
        raise InputError("a Waza results file is an object with tasks", p, json_path="$.tasks")
    cfg: dict[str, Any] = doc["config"] if isinstance(doc.get("config"), dict) else {}
    per_test = cfg.get("runs_per_test", 1)
    if isinstance(per_test, bool) or not isinstance(per_test, int) or per_test < 1:
        raise InputError(f"runs_per_test {per_test!r} is not a positive integer", p, json_path="$.config.runs_per_test")
    model = str(cfg.get("model_id") or "waza")
    name = str(doc.get("eval_name") or doc.get("eval_id") or p.stem)
    arm_name = arm or check_arm(slug_arm(name), p, "the eval's name; pass --arm")
    samples: list[Sample] = []
    grades: list[Grade] = []
    errors: list[dict[str, Any]] = []
    short = []
    for t_i, task in enumerate(doc["tasks"]):
        where = f"$.tasks[{t_i}]"
        if not isinstance(task, dict) or not isinstance(task.get("runs"), list):
            raise InputError("a task needs test_id and runs", p, json_path=where)
        cid = _case_id(task.get("test_id"), where, p)
        numbers = [
            _waza_number(r, "run_number", p, f"{where}.runs[{i}]", integer=True) if isinstance(r, dict) else 0
            for i, r in enumerate(task["runs"])
        ]
        runs = [r for _, r in sorted(zip(numbers, task["runs"], strict=True), key=lambda nr: nr[0])]
        if len(runs) < per_test:
            short.append(f"{cid}: {len(runs)} of {per_test} runs")
        for index, run in enumerate(runs):
            rw = f"{where}.runs[{index}]"
            if not isinstance(run, dict) or not isinstance(run.get("status"), str):
                raise InputError("a run needs a status", p, json_path=rw)
            status = run["status"]
            if status in WAZA_ERRORED or status not in (WAZA_PASSED, "failed"):
                errors.append(
                    {"case_id": cid, "arm": arm_name, "index": index, "error": f"waza run status {status[:100]!r}"}
                )
                continue
            vals: dict[str, Any] = run["validations"] if isinstance(run.get("validations"), dict) else {}
            failed = [str(k) for k, v in vals.items() if isinstance(v, dict) and v.get("passed") is False]
            passed = status == WAZA_PASSED
            reason = "" if passed else "failed validations: " + (", ".join(failed[:10]) or "none named")
            calls = tuple(
                {"name": str(e.get("tool_name", "")), "arguments": e.get("args") or {}}
                for e in run.get("tool_events") or ()
                if isinstance(e, dict)
            )
            digest: dict[str, Any] = run["session_digest"] if isinstance(run.get("session_digest"), dict) else {}
            _add_result(
                samples,
                grades,
                CheckResult("waza", passed, reason),
                case_id=cid,
                arm=arm_name,
                index=index,
                tags=("waza",),
                model=model,
                output=str(run.get("final_output") or ""),
                tool_calls=calls,
                usage=_waza_usage(digest, p, rw),
                latency_ms=float(_waza_number(run, "duration_ms", p, rw)),
            )
    if not samples and not errors:
        raise InputError("no runs in the file", p, json_path="$.tasks")
    reasons = []
    if errors:
        reasons.append(f"{len(errors)} waza run(s) errored")
    if short:
        reasons.append("fewer runs than runs_per_test: " + "; ".join(short[:5]))
    return Ingested.of_file(
        "waza",
        p,
        name,
        samples,
        grades,
        complete=not reasons,
        reason="; ".join(reasons) or None,
        expected_keys=len(doc["tasks"]) * per_test,
        models={arm_name: model},
        errors=tuple(errors),
    )


def slug_arm(name: str) -> str:
    """An arm name from a source's name: letters, digits, '.', '_' and '-'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "waza"


# ------------------------------------------------------------------- lm-evaluation-harness

LM_EVAL_SAMPLES = re.compile(r"samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl")
# Filter steps lm-eval applies to each response on its own, so evalkit can apply them to
# every repeat; a chain of these that ends in `take_first` is graded repeat by repeat.
_LM_PER_RESPONSE_FILTERS = ("regex", "lowercase", "uppercase", "remove_whitespace")
LM_EVAL_REGEX_TIMEOUT_S = 1.0


def _lm_filter_one(step: dict[str, Any], text: str) -> str:
    """One per-response lm-eval filter step on one response. Why by hand: lm-eval is not a
    dependency; these few steps are lm-eval 0.4's `RegexFilter` (findall, group_select,
    the first non-empty group of a tuple, strip, fallback `[invalid]`), `LowercaseFilter`,
    `UppercaseFilter` and `WhitespaceFilter`, and every re-grade is checked against
    lm-eval's own score of the first repeat (see `read_lm_eval`)."""
    fn = step.get("function")
    if fn == "lowercase":
        return text.lower()
    if fn == "uppercase":
        return text.upper()
    if fn == "remove_whitespace":
        return text.strip()
    pattern = step.get("regex_pattern", r"#### (\-?[0-9\.\,]+)")
    fallback = str(step.get("fallback", "[invalid]"))
    found = _regex.findall(pattern, text, timeout=LM_EVAL_REGEX_TIMEOUT_S)
    if not found:
        return fallback
    m = found[int(step.get("group_select", 0))]
    if isinstance(m, tuple):
        m = next((x for x in m if x), None)
        if m is None:
            return fallback
    return str(m).strip()


def lm_exact_match(prediction: str, reference: str, options: dict[str, Any]) -> bool:
    """lm-eval's `exact_match` (its `exact_match_hf_evaluate`) for one prediction:
    `regexes_to_ignore` removed from both, then `ignore_case`, `ignore_punctuation`,
    `ignore_numbers`, then string equality."""
    p, r = prediction, reference
    for pat in options.get("regexes_to_ignore") or ():
        p, r = re.sub(pat, "", p), re.sub(pat, "", r)
    if options.get("ignore_case"):
        p, r = p.lower(), r.lower()
    if options.get("ignore_punctuation"):
        table = str.maketrans("", "", string.punctuation)
        p, r = p.translate(table), r.translate(table)
    if options.get("ignore_numbers"):
        table = str.maketrans("", "", string.digits)
        p, r = p.translate(table), r.translate(table)
    return p == r


def _lm_results_config(p: Path, task: str, date: str | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(results_<date>.json beside the samples file, its config of `task`), when there."""
    if date is None:
        return None, None
    rp = p.parent / f"results_{date}.json"
    if not rp.is_file():
        return None, None
    doc = _read_json(rp)
    if not isinstance(doc, dict):
        raise InputError("an lm-eval results file must be a JSON object", rp, json_path="$")
    cfg = (doc.get("configs") or {}).get(task)
    return doc, cfg if isinstance(cfg, dict) else None


@dataclass(frozen=True)
class _LmPlan:
    """How one lm-eval samples file is read: its task, the filter read, that filter's
    chain and the exact_match options (from the results file's task config), whether
    repeats are re-graded one by one, and the caller's metric and threshold."""

    task: str
    chosen: str
    chain: list[dict[str, Any]] | None
    metric_opts: dict[str, Any]
    per_repeat: bool
    metric: str | None
    threshold: float | None


def _lm_records(p: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of each line of an lm-eval samples file, checked: each has
    doc_id and resps, and there is at least one."""
    records: list[tuple[int, dict[str, Any]]] = []
    raw_lines = read_file_bytes(p, limit=MAX_SOURCE_BYTES)
    _check_depth(raw_lines, p)
    for item in json_lines(raw_lines):
        n, rec = item.line, _json_line(item, p)
        if not isinstance(rec, dict) or "doc_id" not in rec or "resps" not in rec:
            raise InputError("an lm-eval sample line needs doc_id and resps (written by --log_samples)", p, n)
        records.append((n, rec))
    if not records:
        raise InputError("no samples in the file", p)
    return records


def _lm_chain(cfg: dict[str, Any] | None, chosen: str) -> tuple[list[dict[str, Any]] | None, dict[str, Any], bool]:
    """(filter chain, exact_match options, per repeat) of the chosen filter: per repeat
    when the chain (`none` is `take_first`) is per-response steps then `take_first`,
    so lm-eval scored the first repeat only."""
    chain: list[dict[str, Any]] | None = [{"function": "take_first"}] if chosen == "none" else None
    metric_opts: dict[str, Any] = {}
    if cfg is not None:
        for f in cfg.get("filter_list") or ():
            if isinstance(f, dict) and f.get("name") == chosen and isinstance(f.get("filter"), list):
                chain = [s for s in f["filter"] if isinstance(s, dict)]
        for mm in cfg.get("metric_list") or ():
            if isinstance(mm, dict) and mm.get("metric") == "exact_match":
                metric_opts = mm
    per_repeat = (
        chain is not None
        and chain[-1:] == [{"function": "take_first"}]
        and all(s.get("function") in _LM_PER_RESPONSE_FILTERS for s in chain[:-1])
    )
    return chain, metric_opts, per_repeat


def _lm_verdict(rec: dict[str, Any], n: int, p: Path, plan: _LmPlan) -> tuple[str, bool, str]:
    """(metric name, passed, reason): lm-eval's own score of one doc, the chosen metric
    (the line's first when none is chosen) against the threshold."""
    names = _get(rec, "metrics", list)
    name = plan.metric or (names[0] if names else None)
    if name is None or name not in rec:
        raise InputError(
            f"no metric {name!r} on the line (it has {', '.join(map(str, names)) or 'none'}): pass --scorer", p, n
        )
    passed, reason = _inspect_pass(rec[name], plan.threshold, f"line {n}: {name}", p)
    return name, passed, reason


def _lm_regrade(
    rec: dict[str, Any], texts: list[str], doc_id: int, n: int, p: Path, plan: _LmPlan, verdict: tuple[str, bool]
) -> list[tuple[str, bool, str]]:
    """(text, passed, reason) of each repeat, filtered and matched as lm-eval does; the
    first repeat's re-grade must equal lm-eval's own score, else the file is refused."""
    chain = plan.chain or []
    target = str(rec.get("target", ""))
    graded = []
    for j, t in enumerate(texts):
        try:
            answer = t
            for step in chain[:-1]:
                answer = _lm_filter_one(step, answer)
        except TimeoutError:
            raise InputError(f"doc {doc_id}: the filter's regex timed out on repeat {j + 1}", p, n) from None
        ok = lm_exact_match(answer, target, plan.metric_opts)
        graded.append((t, ok, "" if ok else f"exact_match: {answer!r} != {target!r} (repeat {j + 1})"))
    name, passed = verdict
    if graded[0][1] != passed:
        raise InputError(
            f"doc {doc_id}: evalkit's re-grade of repeat 1 ({graded[0][1]}) disagrees with "
            f"lm-eval's {name} ({rec[name]!r}); the filter or metric options are not the ones "
            "lm-eval used (is results_<date>.json beside the file?)",
            p,
            n,
        )
    return graded


def _lm_answers(
    rec: dict[str, Any], doc_id: int, n: int, p: Path, plan: _LmPlan, verdict: tuple[str, bool, str]
) -> tuple[list[tuple[str, bool, str]], list[str], bool]:
    """(graded answers, the first request's response texts, re-graded per repeat) of one
    doc: each repeat re-graded when the plan allows it, else one answer, the filtered
    response, with lm-eval's score."""
    name, passed, reason = verdict
    resps = rec["resps"]
    first = resps[0] if isinstance(resps, list) and resps and isinstance(resps[0], list) else None
    texts = [x for x in first if isinstance(x, str)] if first is not None else []
    if (
        plan.per_repeat
        and plan.chain
        and first
        and name == "exact_match"
        and len(texts) > 1
        and len(texts) == len(first)
    ):
        return _lm_regrade(rec, texts, doc_id, n, p, plan, (name, passed)), texts, True
    out = rec.get("filtered_resps")
    shown = out[0] if isinstance(out, list) and out else out
    text = shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False)
    return [(text, passed, "" if passed else f"{name}: {reason}")], texts, False


def _lm_notes(plan: _LmPlan, repeats_seen: set[int], reduced: bool, all_identical: bool) -> list[str]:
    """Notes on repeats: reduced to one answer by the filter, or all alike (one seed)."""
    notes = []
    if reduced:
        notes.append(
            f"filter {plan.chosen!r} (or metric) reduces the {max(repeats_seen)} repeats to one answer: one "
            "sample per doc, lm-eval's own score (evalkit re-grades repeats for exact_match behind "
            "take_first only)"
        )
    if all_identical:
        notes.append(
            "every doc's repeats are the same text: lm-eval sends one seed with every repeat, so a seeded "
            "endpoint answers them alike and pass@k equals pass@1"
        )
    return notes


def _lm_plan(
    p: Path,
    records: list[tuple[int, dict[str, Any]]],
    cfg: dict[str, Any] | None,
    task: str,
    options: tuple[str | None, str | None, float | None],
) -> tuple[_LmPlan, list[str]]:
    """The plan for reading the file and the filters it has; `options` are the caller's
    (filter_name, metric, threshold); the filter read is `filter_name`, default the
    file's first."""
    filter_name, metric, threshold = options
    filters = list(dict.fromkeys(str(r.get("filter", "none")) for _, r in records))
    chosen = filter_name or filters[0]
    if chosen not in filters:
        raise InputError(f"no filter {chosen!r} in the file (it has {', '.join(filters)})", p)
    chain, metric_opts, per_repeat = _lm_chain(cfg, chosen)
    return _LmPlan(task, chosen, chain, metric_opts, per_repeat, metric, threshold), filters


def _lm_docs(
    p: Path, records: list[tuple[int, dict[str, Any]]], plan: _LmPlan, arm_name: str, model: str
) -> tuple[list[Sample], list[Grade], int, list[str]]:
    """(samples, grades, docs read, notes on repeats) of the chosen filter's lines: each
    doc once, its repeats re-graded or reduced to lm-eval's one score."""
    samples: list[Sample] = []
    grades: list[Grade] = []
    seen: set[int] = set()
    repeats_seen: set[int] = set()
    identical = 0
    reduced = False
    for n, rec in records:
        if str(rec.get("filter", "none")) != plan.chosen:
            continue
        doc_id = _int(rec["doc_id"], "doc_id", p, line=n)
        if doc_id in seen:
            raise InputError(f"doc {doc_id} appears twice for filter {plan.chosen!r}", p, n)
        seen.add(doc_id)
        verdict = _lm_verdict(rec, n, p, plan)
        cid = _case_id(f"{plan.task}-{doc_id}", f"line {n}", p)
        graded, texts, regraded = _lm_answers(rec, doc_id, n, p, plan, verdict)
        if len(texts) > 1:
            repeats_seen.add(len(texts))
            identical += regraded and len(set(texts)) == 1
            reduced = reduced or not regraded
        for j, (text, ok, why) in enumerate(graded):
            _add_result(
                samples,
                grades,
                CheckResult(f"lm-eval:{verdict[0]}", ok, why),
                case_id=cid,
                arm=arm_name,
                index=j,
                tags=(plan.task,),
                model=model,
                output=text,
                request_hash=str(rec.get("prompt_hash") or ""),
            )
    notes = _lm_notes(plan, repeats_seen, reduced, bool(identical) and identical == len(seen))
    return samples, grades, len(seen), notes


def read_lm_eval(
    path: str | Path,
    *,
    arm: str | None = None,
    metric: str | None = None,
    filter_name: str | None = None,
    threshold: float | None = None,
) -> Ingested:
    """Read lm-evaluation-harness `--log_samples` output, `samples_<task>_<date>.jsonl`:
    one line per (doc, filter) with `doc_id`, `doc`, `target`, `arguments`, `resps` (per
    request, the task's `repeats` responses), `filtered_resps`, `filter`, `metrics` and
    each metric's value.

    A case is a doc (`<task>-<doc_id>`); the arm is the model (`model_name` of the
    `results_<date>.json` beside the file, else the folder lm-eval named after it). One
    filter is read (`filter_name`, default the file's first). With `repeats: N` each
    repeat is a sample when lm-eval's metric can be re-applied per repeat: the metric is
    `exact_match` and the filter chain (from the results file's task config; `none` is
    `take_first`) is per-response steps then `take_first`, so lm-eval scored the first
    repeat only. Each repeat is then filtered and matched as lm-eval does, and the first
    repeat's re-grade must equal lm-eval's own score (else the file is refused). Any
    other filter (`majority_vote`, `take_first_k`, custom) reduces the repeats to one
    answer: one sample per doc with lm-eval's score, and a note says so.
    """
    p = Path(path)
    _check_source(p)
    m = LM_EVAL_SAMPLES.fullmatch(p.name)
    task = m.group("task") if m else p.stem.removeprefix("samples_")
    results, cfg = _lm_results_config(p, task, m.group("date") if m else None)
    records = _lm_records(p)
    plan, filters = _lm_plan(p, records, cfg, task, (filter_name, metric, threshold))
    model = check_field((results or {}).get("model_name") or p.parent.name or "lm-eval", "model_name", p)
    arm_name = arm or re.sub(r"[^A-Za-z0-9_.-]+", "_", model)
    samples, grades, n_docs, repeat_notes = _lm_docs(p, records, plan, arm_name, model)
    filters_note = f" (of {', '.join(filters)})" if len(filters) > 1 else ""
    notes = [f"task {task}, filter {plan.chosen}{filters_note}"]
    notes += repeat_notes
    effective = ((results or {}).get("n-samples") or {}).get(task, {})
    expected_docs = effective.get("effective") if isinstance(effective, dict) else None
    complete = not isinstance(expected_docs, int) or expected_docs == n_docs
    return Ingested.of_file(
        "lm-eval",
        p,
        task,
        samples,
        grades,
        complete=complete,
        reason=None if complete else f"lm-eval planned {expected_docs} docs, the file has {n_docs}",
        expected_keys=len(samples),
        models={arm_name: model},
        notes=tuple(notes),
    )


# -------------------------------------------------------------------------- agent-evals


def read_agent_evals(
    outputs_dir: str | Path, eval_file: str | Path, *, arm: str = "agent", compat_wildcards: bool = False
) -> Ingested:
    """Read an agent-evals outputs folder (`<case-id>/sample-<n>.txt`) with its
    `evals.json`, graded as that harness grades (trimmed, case-insensitive)."""
    out = Path(outputs_dir)
    if not out.is_dir():
        raise InputError("outputs folder not found", out)
    cases = load_eval_file(eval_file)
    samples: list[Sample] = []
    grades: list[Grade] = []
    for case in cases:
        case_dir = out / case.id
        files = _sample_files(case_dir) if case_dir.is_dir() else []
        for f in files:
            m = re.fullmatch(r"sample-(\d+)\.txt", f.name)
            if not m:
                continue
            index = int(m.group(1)) - 1
            text = read_sample_file(f)
            try:
                ok = match_sample(text, case, compat_wildcards=compat_wildcards)
                reason = "" if ok else f"{case.match} {case.expect!r} not found"
            except TimeoutError:
                ok, reason = False, "regex timed out"
            _add_result(
                samples,
                grades,
                CheckResult(f"agent-evals:{case.match}", ok, reason),
                case_id=case.id,
                arm=arm,
                index=index,
                tags=(case.set,),
                model=arm,
                output=text,
            )
    digest = hashlib.sha256((_sha256(out) + _sha256(Path(eval_file))).encode()).hexdigest()
    missing = [c.id for c in cases if not (out / c.id).is_dir()]
    return Ingested(
        "agent-evals",
        str(out),
        digest,
        Path(eval_file).parent.name or "agent-evals",
        tuple(samples),
        tuple(grades),
        not missing,
        f"no outputs for {len(missing)} case(s): {', '.join(missing)}" if missing else None,
        0,
        {arm: arm},
        case_sets={c.id: c.set for c in cases},
    )


# ------------------------------------------------------------------------------ writing


# ---------------------------------------------------------------------------- tau2-bench

# tau2-bench's `termination_reason` (`TerminationReason`, src/tau2/data_model/simulation.py)
# -> evalkit's ending (docs/formats.md, "tau2-bench"). `user_stop` is split by the stop
# marker of the user's last message; `infrastructure_error` is no ending: the
# simulation never ran (an errored key, no sample; see `read_tau2`).
TAU2_ENDINGS = {
    "user_stop": "user_stop",
    "agent_stop": "user_stop",  # the agent's ###STOP###: a finished conversation, graded as one
    "max_steps": "max_turns",
    "timeout": "max_turns",  # a limit ended it before either side stopped
    "agent_error": "agent_error",
    "too_many_errors": "agent_error",
    "context_window_exceeded": "agent_error",
    "unexpected_error": "agent_error",  # tau2 scores it 0, as the agent's failure
    "user_error": "simulator_error",
}
TAU2_INFRA = "infrastructure_error"


def read_tau2(path: str | Path, *, arm: str | None = None) -> Ingested:
    """Read tau2-bench simulation results (`{"info", "tasks", "simulations": [{"task_id",
    "trial", "termination_reason", "reward_info": {"reward"}, "messages", "agent_cost",
    "user_cost", "duration"}]}`) as conversations: a simulation passes when its reward is
    1 within 1e-6; its messages become the transcript (`agent.conversation`) and its
    tool calls the sample's, its ending `termination` (`TAU2_ENDINGS`); one that ended
    `user_error` (the simulated user's failure) is graded as errored, never as the
    agent's failure; an `infrastructure_error` one (never ran) is an errored key and
    marks the run INCOMPLETE: tau2-bench leaves it out and lowers k, evalkit's pass^k
    counts the missing trial as a failure at the run's k."""
    p = Path(path)
    _check_source(p)
    by_case = _tau2_simulations(p)
    arm_name = arm or check_arm(p.name.split(".")[0], p, "the file's name; pass --arm")
    samples: list[Sample] = []
    grades: list[Grade] = []
    errors: list[dict[str, Any]] = []
    for cid, trials in by_case.items():
        for index, trial in enumerate(sorted(trials)):
            sim = trials[trial]
            if sim.get("termination_reason") == TAU2_INFRA:
                errors.append({"case_id": cid, "arm": arm_name, "index": index, "error": f"tau2 {TAU2_INFRA}"})
                continue
            sample, grade = _tau2_result(sim, cid, arm_name, index, p)
            samples.append(sample)
            grades.append(grade)
    reason = f"{len(errors)} tau2 {TAU2_INFRA} simulation(s): not run, never a pass" if errors else None
    return Ingested.of_file(
        "tau2",
        p,
        p.name.split(".")[0],
        samples,
        grades,
        complete=not errors,
        reason=reason,
        expected_keys=len(samples) + len(errors),
        models={arm_name: arm_name},
        errors=tuple(errors),
    )


def _tau2_simulations(p: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """The simulations of a tau2-bench results file by case and trial number, each with a
    known `termination_reason` (an unknown one is refused, not guessed)."""
    data = _read_json(p)
    sims = data.get("simulations") if isinstance(data, dict) else None
    if isinstance(data, dict) and data.get("simulation_index") and not sims:
        raise InputError('a tau2-bench "dir" results file keeps its simulations in other files: not supported', p)
    if not isinstance(sims, list) or not sims:
        raise InputError('tau2-bench results need a non-empty "simulations" list', p)
    by_case: dict[str, dict[int, dict[str, Any]]] = {}
    for i, sim in enumerate(sims):
        where = f"$.simulations[{i}]"
        if not isinstance(sim, dict) or "task_id" not in sim:
            raise InputError("a simulation needs a task_id", p, json_path=where)
        end = sim.get("termination_reason")
        if end not in TAU2_ENDINGS and end != TAU2_INFRA:
            raise InputError(
                f"termination_reason {end!r} is not one of tau2-bench's ({', '.join([*TAU2_ENDINGS, TAU2_INFRA])})",
                p,
                json_path=where + ".termination_reason",
            )
        check_field(sim["task_id"], "task_id", p, json_path=where)
        cid = _case_id(f"task-{sim['task_id']}", where, p)
        trial = _int(sim.get("trial", 0), "trial", p, json_path=where)
        if trial in by_case.setdefault(cid, {}):
            raise InputError(f"task {sim['task_id']} trial {trial} appears twice", p, json_path=where)
        by_case[cid][trial] = sim
    return by_case


def _tau2_turns(messages: list[Any], raw_end: str) -> tuple[list[dict[str, str]], str]:
    """The user and assistant turns of a tau2 transcript, each without its stop marker
    (the text before it kept, as evalkit's simulator keeps it), and evalkit's ending:
    `TAU2_ENDINGS`, a `user_stop` named by the marker of the user's last message
    (`###TRANSFER###` -> transfer, `###OUT-OF-SCOPE###` -> out_of_scope)."""
    from evalkit.conversations.simulator import split_marker  # lazy: the simulator's client stays unloaded

    turns: list[dict[str, str]] = []
    ending = TAU2_ENDINGS[raw_end]
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant") or not m.get("content"):
            continue
        text, marker = split_marker(str(m["content"]))
        if m["role"] == "user" and marker is not None and raw_end == "user_stop":
            ending = marker
        if text:
            turns.append({"role": m["role"], "content": text})
    return turns, ending


def _tau2_calls(messages: list[Any]) -> tuple[dict[str, Any], ...]:
    """The agent's tool calls of a tau2 transcript, in order (`{"id", "name", "arguments"}`)."""
    return tuple(
        {"id": str(c.get("id") or ""), "name": str(c.get("name") or ""), "arguments": c.get("arguments") or {}}
        for m in messages
        if isinstance(m, dict) and m.get("role") == "assistant"
        for c in m.get("tool_calls") or ()
        if isinstance(c, dict) and c.get("requestor", "assistant") == "assistant"
    )


def _tau2_result(sim: dict[str, Any], cid: str, arm: str, index: int, p: Path) -> tuple[Sample, Grade]:
    """One tau2-bench simulation as a conversation sample and its grade."""
    reward_info = sim.get("reward_info") if isinstance(sim.get("reward_info"), dict) else {}
    reward = reward_info.get("reward") if reward_info else sim.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or math.isnan(float(reward)):
        raise InputError(f"task {sim['task_id']}: reward {reward!r} is not a number", p)
    raw_end = str(sim["termination_reason"])
    messages: list[Any] = sim["messages"] if isinstance(sim.get("messages"), list) else []
    turns, ending = _tau2_turns(messages, raw_end)
    replies = [t["content"] for t in turns if t["role"] == "assistant"]
    passed = abs(float(reward) - 1.0) <= REWARD_TOL
    sample = Sample(
        case_id=cid,
        tags=("tau2",),
        arm=arm,
        index=index,
        seed=0,
        model=arm,
        output=replies[-1] if replies else "",
        tool_calls=_tau2_calls(messages),
        finish_reason=None,
        usage=Usage(0, 0),
        latency_ms=float(sim.get("duration") or 0.0) * 1000,
        cost_usd=float(sim.get("agent_cost") or 0.0),
        request_hash="",
        turns=len(replies),
        termination=ending,
        agent={
            "unit": "tau2",
            "stop": "final",
            "conversation": turns,
            "tau2_termination": raw_end,
            "simulator_cost_usd": float(sim.get("user_cost") or 0.0),
        },
    )
    check = CheckResult("reward", passed, "" if passed else f"reward={float(reward):g} ({raw_end})")
    if ending == "simulator_error":  # the simulated user failed: errored, not the agent's failure
        return sample, Grade(cid, arm, index, None, (check,), error=f"simulator_error: tau2 {raw_end}")
    return sample, Grade(cid, arm, index, passed, (check,))


def read_source(path: str | Path, fmt: str | None = None, **options: Any) -> Ingested:
    """Read `path` in format `fmt` (detected when None)."""
    fmt = fmt or detect_format(path)
    if fmt == "inspect":
        return read_inspect_log(
            path, threshold=options.get("threshold"), scorer=options.get("scorer"), arm=options.get("arm")
        )
    if fmt == "promptfoo":
        return read_promptfoo(path, arm=options.get("arm"))
    if fmt == "tau-bench":
        return read_tau_bench(path, arm=options.get("arm"))
    if fmt == "tau2":
        return read_tau2(path, arm=options.get("arm"))
    if fmt == "lm-eval":
        return read_lm_eval(
            path,
            arm=options.get("arm"),
            metric=options.get("scorer"),
            filter_name=options.get("filter_name"),
            threshold=options.get("threshold"),
        )
    if fmt == "waza":
        return read_waza_results(path, arm=options.get("arm"))
    if fmt == "agent-evals":
        if not options.get("eval_file"):
            raise InputError("an agent-evals outputs folder needs --eval-file evals.json", path)
        return read_agent_evals(
            path,
            options["eval_file"],
            arm=options.get("arm") or "agent",
            compat_wildcards=bool(options.get("compat_wildcards")),
        )
    raise InputError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")


def _summary(parts: list[Ingested], samples: list[Sample], grades: list[Grade]) -> tuple[dict[str, Any], str]:
    complete = all(p.complete for p in parts)
    reasons = [p.reason for p in parts if p.reason]
    cases = list(dict.fromkeys(s.case_id for s in samples))
    arms = list(dict.fromkeys(s.arm for s in samples))
    per_arm = {}
    for a in arms:
        g = [x for x in grades if x.arm == a]
        per_arm[a] = {
            "samples": sum(1 for s in samples if s.arm == a),
            "errors": sum(1 for p in parts for e in p.errors if e["arm"] == a),
            "passed": sum(1 for x in g if x.passed),
            "graded": len(g),
        }
    # a case ran when none of its keys errored (as `evalkit run` counts)
    errored_cases = {e["case_id"] for p in parts for e in p.errors}
    all_cases = {s.case_id for s in samples} | errored_cases
    ran = len(all_cases - errored_cases)
    summary = {
        "complete": complete,
        "ran": ran,
        "total": len(all_cases),
        "reason": "; ".join(reasons) or None,
        "spend_usd": round(sum(s.cost_usd for s in samples), 6),
        "avoided_usd": 0.0,
        "cap_usd": None,
        "per_arm": per_arm,
        "exit_code": 0 if complete else 1,
        "source": [p.source for p in parts],
    }
    lines = []
    if not complete:
        lines.append(f"INCOMPLETE: {ran}/{len(all_cases)} cases ({summary['reason']})")
    lines.append(f"# Ingested run: {', '.join(dict.fromkeys(p.name for p in parts))}")
    lines.append("")
    for p in parts:
        lines.append(f"- source: {p.source} `{Path(p.source_file).name}` (sha256 {p.source_sha256[:12]}...)")
    lines += [f"- {p.source}: {n}" for p in parts for n in p.notes if n]
    lines.append(f"- cases: {len(cases)}, arms: {', '.join(arms)}, samples: {len(samples)}")
    for a, f in per_arm.items():
        rate = f["passed"] / f["graded"] if f["graded"] else float("nan")
        lines.append(
            f"- {a}: {f['passed']}/{f['graded']} samples passed ({rate:.1%})"
            + (f", {f['errors']} errored (never a pass)" if f["errors"] else "")
        )
    return summary, "\n".join(lines) + "\n"


def write_ingested(parts: list[Ingested], dest: str | Path) -> Path:
    """Write one or more ingested sources (each one or more arms) as the run folder
    `dest`, atomically: built under a temporary name, then renamed into place."""
    dest = Path(dest)
    samples = [s for p in parts for s in p.samples]
    grades = [g for p in parts for g in p.grades]
    keys = [(s.case_id, s.arm, s.index) for s in samples]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise InputError(
            f"arm {dup[1]!r} already has case {dup[0]!r} sample {dup[2]}: ingest the second source under another --arm"
        )
    errors = [e for p in parts for e in p.errors]
    keyed = [(s.case_id, s.arm, s.index) for s in samples] + [(e["case_id"], e["arm"], e["index"]) for e in errors]
    cases = list(dict.fromkeys(c for c, _, _ in keyed))
    arms = list(dict.fromkeys(a for _, a, _ in keyed))
    per_arm_cases = {a: sorted({c for c, aa, _ in keyed if aa == a}) for a in arms}
    k = max((i + 1 for _, _, i in keyed), default=0)
    meta = {
        "suite": None,
        "suite_name": parts[0].name,
        "source": parts[0].source if len(parts) == 1 else "mixed",
        "sources": [
            {
                "source": p.source,
                "file": p.source_file,
                "sha256": p.source_sha256,
                "arms": list(p.models),
                "models": p.models,
            }
            for p in parts
        ],
        "arms": arms,
        "k": k,
        "cases": cases,
        "cases_per_arm": per_arm_cases,
        "case_sets": {c: st for p in parts for c, st in p.case_sets.items()},
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {"generator": {"model": next(iter(parts[0].models.values()), None)}},
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp_root = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        folder = RunFolder.create(tmp_root, meta, stamp="run")
        with folder:
            for s in samples:
                folder.append_result(s)
            for e in errors:
                folder.append_error(e["case_id"], e["arm"], e["index"], e["error"], 1)
        write_atomic(
            folder.path / GRADES, "".join(json.dumps(grade_to_dict(g), ensure_ascii=False) + "\n" for g in grades)
        )
        tags = {s.case_id: tuple(s.tags) for s in samples}
        sets = {c: st for p in parts for c, st in p.case_sets.items()}
        folder.write_case_table(
            CaseTable(tuple(CaseRow(c, sets.get(c, "capability"), tags.get(c, ()), False) for c in cases), "ingest")
        )
        summary, md = _summary(parts, samples, grades)
        folder.write_summary(summary, md)
        # lazy: the metrics load scipy, which `evalkit ingest --help` and the readers do without
        from evalkit.conclusions.grading import summarize_run, write_summary

        write_summary(folder.path, summarize_run(folder.path))  # the same metrics as `evalkit grade` writes
        if dest.exists():
            shutil.rmtree(dest)
        folder.path.rename(dest)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    return dest


def _existing_parts(run: Path) -> list[Ingested]:
    """Read back a run folder written by `write_ingested`, to add an arm to it."""
    meta = RunFolder(run).read_meta()
    if not meta.get("sources"):
        raise InputError("--into needs a run folder made by `evalkit ingest`", run)
    samples = [sample_from_dict(d) for d in iter_jsonl(run / RESULTS)]
    grades = [grade_from_dict(d) for d in iter_jsonl(run / GRADES)]
    errors = [{k: e[k] for k in ("case_id", "arm", "index", "error")} for e in RunFolder(run).errors()]
    parts = []
    for src in meta["sources"]:
        arms = set(src["arms"])
        errs = tuple(e for e in errors if e["arm"] in arms)
        kept = tuple(s for s in samples if s.arm in arms)
        sets = {c: st for c, st in (meta.get("case_sets") or {}).items() if any(s.case_id == c for s in kept)}
        parts.append(
            Ingested(
                src["source"],
                src["file"],
                src["sha256"],
                meta.get("suite_name") or run.name,
                kept,
                tuple(g for g in grades if g.arm in arms),
                not errs,
                f"{len(errs)} result(s) errored" if errs else None,
                0,
                src.get("models") or {},
                (),
                errs,
                sets,
            )
        )
    return parts


def ingest(path: str | Path, to: str | Path, *, fmt: str | None = None, into: bool = False, **options: Any) -> Path:
    """Read another tool's results and write them as the run folder `to`.

    With `into=True`, `to` is an existing ingested run and the source is added to it as
    further arm(s), so two sources of the same cases can be compared with
    `evalkit compare`. Refuses to overwrite a non-empty folder otherwise.
    """
    to = Path(to)
    if options.get("arm") is not None:
        check_arm(str(options["arm"]), None, "--arm")
    part = read_source(path, fmt, **options)
    for s in part.samples:  # every name that becomes a path, whatever the reader made of it
        check_arm(s.arm, path, "from the source")
        problem = case_id_problem(s.case_id)
        if problem:
            raise InputError(f"case {s.case_id!r}: {problem}", path)
    if into:
        if not to.is_dir():
            raise InputError("--into: run folder not found", to)
        parts = _existing_parts(to) + [part]
        clash = set(part.arms) & {a for p in parts[:-1] for a in p.arms}
        if clash:
            raise InputError(f"arm {sorted(clash)[0]!r} is already in the run: pass another --arm", to)
    else:
        if to.exists() and any(to.iterdir()):
            raise InputError("destination exists and is not empty (use --into to add an arm)", to)
        parts = [part]
    return write_ingested(parts, to)
