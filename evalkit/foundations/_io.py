"""Reading and writing files: a user's files read safely, JSON and JSON lines with the
line each value came from, and the one atomic writer.

Every file evalkit reads for a suite (and every file a user names on the command line)
goes through `read_file_bytes`: inside the suite folder after symlinks, a regular file
(never a FIFO, a device or a socket: those could hang a read or never end), and under a
size limit. docs/formats.md ("Reading a suite's files") states the rules.

Every file evalkit writes whole goes through `write_atomic` (or `write_atomic_all` for
several that must appear together): a temporary file beside the target with ordinary
permissions, then a rename, so a reader sees the old file or the new one, never half.

A leaf: it imports only `errors` and `layout` of evalkit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import re
import secrets
import stat
import warnings
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate, repeat
from pathlib import Path
from typing import Any

import orjson
import yaml

from evalkit.foundations.errors import DiskFull, FileTooLarge, InputError
from evalkit.foundations.layout import CASES_FILE, CONFIG_FILE

Json = Any

# --- limits on what is read ------------------------------------------------------------
MAX_CASES_BYTES = 20 * 1024 * 1024
MAX_CONFIG_BYTES = 1 * 1024 * 1024
MAX_TEXT_BYTES = 1 * 1024 * 1024  # templates, guidance, judge files, scorers
MAX_LABELS_BYTES = MAX_CASES_BYTES  # judge/human-sample.jsonl
RUN_JSON_BYTES = 64 * 1024 * 1024  # a run's config.json lists every case id and input hash
MAX_JSON_DEPTH = 64  # arrays and objects inside each other: no evalkit file needs a tenth of it
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def file_kind(mode: int) -> str:
    """What a `st_mode` is, in words, for messages ("a FIFO (named pipe)", "a folder")."""
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def outside_root(path: str | Path, root: str | Path) -> str | None:
    """Where `path` really leads (symlinks followed) when that is outside `root`, else
    None. A symlink that stays inside `root` is fine."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep):
        return None
    return real


def outside_message(real: str, root: str | Path) -> str:
    """What is wrong with a suite file that leads to `real`, outside `root`."""
    return (
        f"resolves to {real}, outside the suite folder {os.path.realpath(root)}: a suite may only read "
        "its own files (a symlink must stay inside the suite)"
    )


def _open_checked(path: str | Path, limit: int | None, root: str | Path | None) -> tuple[int, os.stat_result]:
    """Open a user's file for reading the way `read_file_bytes` describes; returns the
    descriptor (the caller closes it) and its `fstat`."""
    p = Path(path)
    target: str | Path = p
    flags = _OPEN_FLAGS
    if root is not None:
        real = outside_root(p, root)
        if real is not None:
            raise InputError(outside_message(real, root), p)
        # open the resolved path, refusing a symlink swapped in since the check
        target, flags = os.path.realpath(p), flags | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(target, flags)
    except FileNotFoundError:
        raise InputError("file not found", p) from None
    except OSError as exc:
        try:
            kind = file_kind(os.stat(target).st_mode)  # a socket cannot be opened (ENXIO)
        except OSError:
            kind = None
        if kind is not None and kind != "not a plain file":
            raise InputError(f"not a regular file: it is {kind}", p) from None
        raise InputError(f"cannot read: {exc.strerror or exc.__class__.__name__}", p) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"not a regular file: it is {file_kind(st.st_mode)}", p)
        if limit is not None and st.st_size > limit:
            raise FileTooLarge(
                f"file is {st.st_size} bytes, over the {limit}-byte limit", p, size=st.st_size, limit=limit
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_file_bytes(path: str | Path, *, limit: int | None, root: str | Path | None = None) -> bytes:
    """The bytes of a user's file, or an `InputError` naming it and saying what is wrong.

    With `root` (the suite folder), the file must resolve inside it after symlinks ("a
    symlink that leaves the suite is refused"). The file is opened non-blocking (a FIFO
    can never hang the open) and checked with `fstat` on the open descriptor (no race
    between the check and the read): anything but a regular file is refused before a
    byte is read, so `/dev/zero` is never read. More than `limit` bytes (checked before
    reading, and again while reading: at most limit+1 bytes are ever read) is a
    `FileTooLarge`; `limit=None` reads any size."""
    fd, _ = _open_checked(path, limit, root)
    try:
        chunks, got = [], 0
        while True:
            chunk = os.read(fd, 1 << 20 if limit is None else min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if limit is not None and got > limit:  # it grew while we read
                raise FileTooLarge(f"file is over the {limit}-byte limit", path, size=None, limit=limit)
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc.__class__.__name__}", path) from None
    finally:
        os.close(fd)


def check_regular_file(path: str | Path, *, limit: int | None, root: str | Path | None = None) -> int:
    """`read_file_bytes`'s checks without the read (for a file a library reads itself,
    such as a zip archive): its size, or an `InputError`."""
    fd, st = _open_checked(path, limit, root)
    os.close(fd)
    return st.st_size


def suite_folder_of(path: str | Path) -> Path | None:
    """The native suite folder that holds `path` directly (a `plan.json` or
    `baseline.json` beside its `config.json`/`cases.jsonl`), else None: a file in a
    suite folder is read inside it, a file named elsewhere is read where it is."""
    folder = Path(path).parent
    if any(os.path.lexists(folder / name) for name in (CONFIG_FILE, CASES_FILE)):
        return folder
    return None


def read_text_file(
    path: str | Path, *, limit: int = MAX_TEXT_BYTES, allow_empty: bool = False, root: str | Path | None = None
) -> str:
    """Read a user file as UTF-8 through `read_file_bytes` (inside `root` when given, a
    regular file, size-limited): a BOM accepted and dropped, invalid UTF-8 refused with
    the line and byte where it breaks, CRLF normalised to LF."""
    return decode_text(read_file_bytes(path, limit=limit, root=root), Path(path), allow_empty=allow_empty)


def decode_text(data: bytes, path: str | Path, *, allow_empty: bool = False) -> str:
    """Decode bytes of a user file (see `read_text_file`)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"invalid UTF-8 at byte {exc.start} (0x{data[exc.start]:02x}); save the file as UTF-8", path, line
        ) from None
    text = text.replace("\r\n", "\n")
    if not allow_empty and not text.strip():
        raise InputError("file is empty", path)
    return text


def json_line_index(text: str) -> dict[str, int]:
    """Map each JSON path (``$.a.b[2]``) in a JSON/YAML document to its 1-based line.

    The json module keeps no positions, so this walks PyYAML's node tree (JSON is YAML
    flow syntax) to point messages at lines; best effort: an empty map when it cannot.
    """
    if deep_offset(text) is not None:  # the parse refuses it; no walk that deep
        return {}
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError):
        return {}
    return yaml_node_lines(root)


def yaml_node_lines(root: yaml.Node | None) -> dict[str, int]:
    """The 1-based line of every JSON path under a composed PyYAML node."""
    out: dict[str, int] = {}

    def walk(node: yaml.Node, jp: str) -> None:
        out.setdefault(jp, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                kp = f"{jp}.{k.value}" if isinstance(k, yaml.ScalarNode) else jp
                out.setdefault(kp, k.start_mark.line + 1)
                walk(v, kp)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, f"{jp}[{i}]")

    if root is not None:
        walk(root, "$")
    return out


def line_of(index: dict[str, int], json_path: str) -> int | None:
    """The line of `json_path`, or of its nearest ancestor that has one."""
    jp = json_path
    while jp:
        if jp in index:
            return index[jp]
        cut = max(jp.rfind("."), jp.rfind("["))
        if cut <= 0:
            break
        jp = jp[:cut]
    return index.get("$")


# --- the depth guard: every JSON and YAML value a user's file holds ---------------------
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, brackets in it not counted
# a string, or a run of what is neither a bracket nor a quote: what the passes below never read
_NOT_BRACKETS = re.compile(_STRING.pattern + r'|[^"\[\]{}]+')
_INNERMOST = re.compile(r"[\[{][^\[\]{}]*[\]}]")  # an array or object with none inside it
_BRACKETS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')  # a string (skipped) or a bracket


def deep_offset(text: str, limit: int = MAX_JSON_DEPTH) -> int | None:
    """Where in `text` (JSON, or YAML's flow style) arrays and objects first nest more
    than `limit` deep, else None. Checked before the parse: the JSON module recurses
    once per level (a RecursionError at about 1,000), and so do the walks that read the
    value after it. Brackets inside strings do not count. Fast: a text with no more
    than `limit` brackets in all is never deep (one count: every line evalkit writes);
    else each pass of a regex removes the innermost level, `limit` passes at most; only
    a deep text is walked bracket by bracket, to say where. The passes read the brackets
    outside strings alone (and quotes no string closes), all the rest cut at once: each
    pass found the same levels when the text between brackets was left to it, but read
    all of it (the case table of a 10,000-case run: 0.06 s, now 0.04 s)."""
    if text.count("[") + text.count("{") <= limit:
        return None
    rest = _NOT_BRACKETS.sub("", text)
    for _ in range(limit):
        rest, n = _INNERMOST.subn("", rest)
        if not n:
            return None
    if _INNERMOST.search(rest) is None:
        return None
    depth = 0
    for m in _BRACKETS.finditer(text):
        c = m.group()
        depth += 1 if c in "[{" else -1 if c in "]}" else 0
        if depth > limit:
            return m.start()
    return 0  # pragma: no cover - the passes found a level the walk did not


DEEP_JSON = f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects: refused"


def too_deep(path: str | Path, text: str, offset: int, line: int | None = None) -> InputError:
    """The refusal of a value nested deeper than `MAX_JSON_DEPTH`, with its file and
    line (`line`: the line `text` starts on, for one line of a JSON-lines file)."""
    at = text.count("\n", 0, offset) + (line if line is not None else 1)
    return InputError(DEEP_JSON, path, at)


def loads_bounded(text: str, path: str | Path, *, line: int | None = None, **kwargs: Any) -> Json:
    """`json.loads(text, **kwargs)` behind the depth guard (`deep_offset`): a deep value
    is an `InputError` with the file and line, never a RecursionError. Malformed JSON
    still raises `json.JSONDecodeError` for the caller's message."""
    at = deep_offset(text)
    if at is not None:
        raise too_deep(path, text, at, line)
    try:
        return json.loads(text, **kwargs)
    except RecursionError:  # pragma: no cover - the guard comes first; a net below it
        raise too_deep(path, text, 0, line) from None


DEEP_YAML = f"nested deeper than {MAX_JSON_DEPTH} levels of lists and mappings: refused"


MAX_YAML_VALUES = 100_000  # values a YAML document may expand to, its aliases followed each time
BIG_YAML = (
    f"expands to more than {MAX_YAML_VALUES:,} values (aliases repeat what they name: a 'billion laughs'): refused"
)


def yaml_shape_problem(value: Any, limit: int = MAX_JSON_DEPTH, max_values: int = MAX_YAML_VALUES) -> str | None:
    """Why a parsed value (a YAML document) may not be used, else None: it nests deeper
    than `limit` (`DEEP_YAML`), or expands to more than `max_values` values, a value its
    aliases share counted at every place it appears (`BIG_YAML`: what a reader of it walks).
    Walked with a stack, not recursion, and stopped at the cap, so a document of nested
    aliases is refused in a bounded time."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen = 0
    while stack:
        v, d = stack.pop()
        seen += 1
        if seen > max_values:
            return BIG_YAML
        if isinstance(v, (dict, list)):
            if d >= limit:
                return DEEP_YAML
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return None


def load_yaml_bounded(text: str, path: str | Path, loader: Any = None) -> Json:
    """A YAML document read with `loader` (the C safe loader by default) behind the
    depth guard: a document nested deeper than `MAX_JSON_DEPTH`, or whose aliases expand
    it past `MAX_YAML_VALUES` values, is an `InputError` naming the file, never a
    RecursionError or a hang. YAML errors pass to the caller."""
    if loader is None:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    at = deep_offset(text)
    if at is not None:
        raise too_deep(path, text, at)
    try:
        doc = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader or a subclass of it
    except RecursionError:
        raise too_deep(path, text, 0) from None
    problem = yaml_shape_problem(doc)
    if problem is not None:
        raise InputError(problem, path)
    return doc


def parse_json_object(text: str, path: str | Path, what: str) -> dict[str, Json]:
    """Parse a JSON document that must be one object (`what` names it in the message)."""
    try:
        obj = loads_bounded(text, path)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg} (column {exc.colno})", path, exc.lineno) from None
    if not isinstance(obj, dict):
        raise InputError(f"{what} must be a JSON object, got {type(obj).__name__}", path, 1, "$")
    return obj


def read_json_object(
    path: str | Path, what: str, *, limit: int = MAX_CONFIG_BYTES, root: str | Path | None = None
) -> dict[str, Json]:
    """Read a JSON file that must hold one object (a plan, a baseline, a run's
    config.json): `read_text_file`'s checks (inside `root` when given, a regular file,
    size, BOM, UTF-8), then the parse; every failure an `InputError` naming the file and
    line."""
    return parse_json_object(read_text_file(path, limit=limit, root=root), path, what)


class TornLineWarning(UserWarning):
    """A JSON-lines file ended in a partial line (a killed writer); the line was dropped."""


@dataclasses.dataclass(frozen=True)
class JsonLine:
    """One non-blank line of a JSON-lines text: its 1-based number and its value, or
    `error` (why it is not JSON). `torn`: the text's last line, with no newline after
    it, did not parse: a write a killed process left half done."""

    line: int
    value: Any = None
    error: str | None = None
    torn: bool = False


def json_error(exc: json.JSONDecodeError) -> str:
    """The message for text that is not JSON (the line is the caller's to give)."""
    return f"malformed JSON: {exc.msg} (column {exc.colno})"


def json_lines(data: str | bytes) -> Iterator[JsonLine]:
    """Every non-blank line of a JSON-lines text (`str`, or `bytes` of UTF-8), parsed,
    with its line number: the one JSON-lines reader (`iter_jsonl` for run files,
    `cases.jsonl`, `judge/human-sample.jsonl`). Each caller decides what a bad line is.

    Bytes that are UTF-8 throughout are decoded once, and a line that is one JSON object
    is read by the JSON module's own scanner at once (`_scan_object`); every other line
    goes through `json.loads` of its bytes, as every line did: the values, errors and
    line numbers are the same, in a fifth less time (the results and grades of a
    100,000-sample run: 1.07 s to 0.83 s)."""
    for item in _json_items(data):
        yield item if isinstance(item, JsonLine) else JsonLine(*item)


def _json_items(data: str | bytes, *, at_once: bool = True) -> Iterator[JsonLine | tuple[int, dict[str, Any]]]:
    """`json_lines`' lines: (number, object) for a line `_scan_object` read, else the
    `JsonLine` (`iter_jsonl` yields the objects with no record made for each line).
    `at_once`: try `_bulk_objects` first (False: its caller already has)."""
    if isinstance(data, bytes):
        objects = _bulk_objects(data) if at_once else None
        if objects is not None:
            yield from enumerate(objects, 1)
            return
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:  # some line is not UTF-8: each line read on its own says which
            pass
        else:
            yield from _decoded_json_items(text, data)
            return
    lines: Sequence[str | bytes] = data.split(b"\n") if isinstance(data, bytes) else data.split("\n")
    last = len(lines) - 1  # lines[last] is empty when the text ends with a newline
    for i, raw in enumerate(lines):
        if raw.strip():
            yield _json_line(i + 1, raw, torn=i == last)


def _json_line(number: int, raw: str | bytes, *, torn: bool) -> JsonLine:
    """One non-blank line parsed by `json.loads` behind the depth guard; `torn`: it is
    the text's last line."""
    if deep_offset(raw if isinstance(raw, str) else raw.decode("utf-8", "surrogateescape")) is not None:
        return JsonLine(number, error=DEEP_JSON)
    try:
        return JsonLine(number, json.loads(raw))
    except json.JSONDecodeError as exc:
        return JsonLine(number, error=json_error(exc), torn=torn)
    except UnicodeDecodeError as exc:
        return JsonLine(number, error=f"invalid UTF-8 at byte {exc.start} of the line", torn=torn)


_DECODER = json.JSONDecoder()  # what `json.loads` decodes with (no hooks); `_scan_object` calls its scanner
_BYTES_SPACE = " \t\n\r\x0b\x0c"  # what `bytes.strip()` strips: a blank line is blank as bytes


# orjson reads an integer past 64 bits as a float where `json` keeps it exact: a line with
# a run of 19 digits anywhere (found as 19 zeros once every digit is made a zero) is left
# to `json` (a hash that holds such a run only loses the fast path).
_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19


def _bulk_objects(data: bytes) -> list[dict[str, Any]] | None:
    """Every line of `data` read as one JSON object by orjson, when each is one (no blank
    line, no long number, none deep), else None and the lines are read one by one
    (`_decoded_json_items`). The values are those `_decoded_json_items` gives.

    What a run's results and grades always are (evalkit writes them), read with no
    Python code run per line (`map` over C functions): 100,000 samples' results and
    grades in 1.9 s, not 3.8 (profiled), in the report process on the report's critical
    path."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    if not lines:
        return None
    # a line of fewer brackets than the limit is no deeper (each level opens one)
    depth = map(int.__add__, map(bytes.count, lines, repeat(b"{")), map(bytes.count, lines, repeat(b"[")))
    if max(depth) > MAX_JSON_DEPTH:
        return None
    # orjson refuses what `_decoded_json_items` gives to `json` (a blank line, NaN, a BOM,
    # invalid UTF-8): the whole text is then read the slow way, which says where
    firsts = set(map(bytes.__getitem__, lines, repeat(slice(0, 1))))
    if firsts != {b"{"} or set(map(bytes.__getitem__, lines, repeat(slice(-1, None)))) != {b"}"}:
        return None
    try:
        objects = list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        return None
    if set(map(type, objects)) != {dict}:
        return None
    for i in _long_number_lines(data, lines):  # read by `json`, which keeps a long integer exact
        found = _scan_object(lines[i].decode("utf-8"))
        if found is None:
            return None
        objects[i] = found
    return objects


def _long_number_lines(data: bytes, lines: list[bytes]) -> list[int]:
    """The indices of `lines` (`data` split at its newlines) that hold a run of 19
    digits (a 64-bit hash's hex digits hold one now and then)."""
    zeros = data.translate(_ZERO_DIGITS)
    at = zeros.find(_LONG_NUMBER)
    if at < 0:
        return []
    starts = list(accumulate(map(len, lines), lambda a, n: a + n + 1, initial=0))
    found: list[int] = []
    while at >= 0:
        i = bisect_right(starts, at) - 1
        found.append(i)
        at = zeros.find(_LONG_NUMBER, starts[i + 1]) if i + 1 < len(starts) else -1
    return found


def _decoded_json_items(text: str, data: bytes) -> Iterator[JsonLine | tuple[int, dict[str, Any]]]:
    """`_json_items` of bytes (`data`) that decoded as UTF-8 (`text`): a line that is not
    one JSON object alone is parsed from its bytes, so a byte-order mark or a NUL byte is
    read as `json.loads` reads bytes.

    A line that is one object (from its first byte to its last, no long number, not
    deep) is read by orjson first: 4.2 to 2.3 CPU-s for the results and grades of a
    100,000-sample run, which every report reads twice (the report and its kernel).
    What orjson refuses (NaN, Infinity, a number past a double's range, a lone surrogate)
    goes the way every line went before, so the values are `json.loads`'s exactly
    (tests/test_runs.py holds the two readings to each other)."""
    lines, raws = text.split("\n"), data.split(b"\n")  # "\n" is one byte in UTF-8: the same lines
    last = len(lines) - 1
    for i, (line, raw) in enumerate(zip(lines, raws, strict=True)):
        if raw[:1] == b"{" and raw[-1:] == b"}" and raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
            if _LONG_NUMBER not in raw.translate(_ZERO_DIGITS):
                try:
                    value = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    pass
                else:
                    if isinstance(value, dict):
                        yield i + 1, value
                        continue
        if not line.strip(_BYTES_SPACE):
            continue
        shallow = line.count("[") + line.count("{") <= MAX_JSON_DEPTH or deep_offset(line) is None  # inlined
        found = _scan_object(line) if shallow else None  # a deep line: `_json_line` refuses it
        yield (i + 1, found) if found is not None else _json_line(i + 1, raw, torn=i == last)


def _scan_object(line: str) -> dict[str, Any] | None:
    """The object a line holds, when it is one JSON object from its first character to
    its last: what `json.loads(line)` returns then (it skips no whitespace at either end
    and calls this same scanner at 0). None for any other line, which `json.loads` is
    left to read (or refuse, with its message)."""
    if line[:1] != "{" or line[-1:] != "}":
        return None
    try:
        value, end = _DECODER.scan_once(line, 0)  # type: ignore[attr-defined]  # typeshed omits it
    except (StopIteration, json.JSONDecodeError):
        return None
    return value if end == len(line) and isinstance(value, dict) else None


def iter_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSON-lines file, one per non-blank line.

    A last line that does not parse and has no newline after it is a torn write from a
    killed process: it is dropped with a `TornLineWarning`. Any other bad line is an
    `InputError` naming the file and line.
    """
    p = Path(path)
    with open(p, "rb") as fh:
        data = fh.read()
    objects = _bulk_objects(data)
    if objects is not None:  # every line one object, read at once
        yield from objects
        return
    for item in _json_items(data, at_once=False):
        if isinstance(item, tuple):  # a line that is one JSON object
            yield item[1]
            continue
        if item.torn:
            warnings.warn(f"{p}:{item.line}: dropped a torn last line", TornLineWarning, stacklevel=2)
            return
        if item.error is not None:
            raise InputError(item.error, p, item.line)
        if not isinstance(item.value, dict):
            raise InputError("each line must be a JSON object", p, item.line)
        yield item.value


def repair_torn_tail(path: str | Path) -> bool:
    """Cut a partial last line off a JSON-lines file before appending to it, so the next
    line does not glue onto the fragment. Returns True when something was cut."""
    p = Path(path)
    if not p.exists():
        return False
    with open(p, "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return False
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return False
        # Read back until the previous newline (lines are short; read in blocks).
        pos, block = size, 65536
        cut = 0
        while pos > 0:
            start = max(0, pos - block)
            fh.seek(start)
            chunk = fh.read(pos - start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                cut = start + nl + 1
                break
            pos = start
        fh.seek(cut)
        tail = fh.read()
        try:
            json.loads(tail)
            fh.seek(size)
            fh.write(b"\n")  # a whole line that only lacked its newline: keep it
            return False
        except (json.JSONDecodeError, UnicodeDecodeError):
            fh.truncate(cut)
    warnings.warn(f"{p}: cut a torn last line ({size - cut} bytes) left by a killed run", TornLineWarning, stacklevel=2)
    return True


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` says there is no room to write: ENOSPC, EDQUOT, or EFBIG (a file
    size limit, such as RLIMIT_FSIZE)."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def disk_full(exc: OSError, path: str | Path) -> DiskFull:
    return DiskFull(path, exc.strerror or str(exc))


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to the file descriptor `fd` (`os.write` may write part)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename: readers see the old
    file or the new one, never half of it. The file gets ordinary permissions (0666
    less the umask), so reports and summaries can be shared. No room to write raises
    `DiskFull` (the old file is left as it was)."""
    write_atomic_all([(path, text)])


def write_atomic_all(files: Sequence[tuple[str | Path, str]]) -> None:
    """Write every file to a temporary beside it (`new_temp_file`: ordinary permissions,
    where mkstemp's are 0600), then rename each into place: a failure before the
    renames leaves every target as it was, and no temporary behind. No room to write
    raises `DiskFull` naming the file."""
    temps: list[tuple[str, Path]] = []
    current: Path | None = None
    try:
        for target, text in files:
            current = Path(target)
            current.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = new_temp_file(current)
            temps.append((tmp, current))
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
        for tmp, current in temps:
            os.replace(tmp, current)
    except BaseException as exc:
        for tmp, _ in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if isinstance(exc, OSError) and is_disk_full(exc) and current is not None:
            raise disk_full(exc, current) from exc
        raise


_TRIES = 100  # random names collide with probability ~2**-48 each; a bound, not a loop forever


def new_temp_file(target: str | Path) -> tuple[int, str]:
    """Create `.<name>.<random>.tmp` beside `target` for writing (exclusively: never an
    existing file or a symlink), mode 0666 less the umask. Returns (fd, path); the
    caller writes, renames it onto `target`, and unlinks it on failure."""
    p = Path(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(_TRIES):
        tmp = str(p.parent / f".{p.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {p}")  # pragma: no cover - 100 collisions


def new_temp_dir(parent: str | Path, prefix: str) -> Path:
    """Create `<parent>/<prefix><random>` (exclusively), mode 0777 less the umask: a
    folder built there and renamed into place is an ordinary folder."""
    for _ in range(_TRIES):
        d = Path(parent) / f"{prefix}{secrets.token_hex(6)}"
        try:
            d.mkdir(0o777)
            return d
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {parent}")  # pragma: no cover - 100 collisions


def jsonable(obj: Any) -> Any:
    """`obj` as plain JSON: numpy scalars to Python, NaN/inf to None, tuples to lists,
    dataclasses to dicts."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if hasattr(obj, "item"):  # numpy scalar
        return jsonable(obj.item())
    if hasattr(obj, "tolist"):  # numpy array
        return jsonable(obj.tolist())
    return str(obj)
