"""Run folders: where a run's samples, errors, ledger and summary live (docs/formats.md).

A run folder must survive a SIGKILL at any moment: JSON lines are appended one whole
line per `write` call, sample text files are written to a temporary name and renamed,
and a torn last line (a kill in the middle of a write) is dropped with a warning when
read, and cut off before anything is appended after it.

A full disk is survived the same way: an append that fails (ENOSPC, EDQUOT, or EFBIG from
a file size limit) cuts off whatever part of its line reached the file and raises
`DiskFull` naming the file, so every file stays parseable and a resume goes on once
there is room. Any text an endpoint sends is stored losslessly (`evalkit.foundations._text`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from evalkit.foundations import fmt
from evalkit.foundations._io import (
    RUN_JSON_BYTES,
    TornLineWarning,
    disk_full,
    is_disk_full,
    iter_jsonl,
    read_json_object,
    repair_torn_tail,
    write_atomic,
)
from evalkit.foundations._text import storable_json, wtf8
from evalkit.foundations.errors import DiskFull, InputError
from evalkit.foundations.layout import (
    CASE_TABLE,
    CASES_FILE,
    CONFIG_FILE,
    ERRORS,
    FOREIGN_SUITE_NAMES,
    GRADES,
    LEDGER,
    LOCK,
    MICROTEST_MARKER,
    RESULTS,
    RUN_CONFIG,
    RUNS_LOCK,
    SPACE_RESERVE,
    SUMMARY_JSON,
    SUMMARY_MD,
    VERDICTS,
    sample_relpath,
)
from evalkit.foundations.records import CaseTable, CheckResult, Grade, RunVerdicts, Sample, Usage
from evalkit.runfolder._samplewriter import SampleWriter, write_text_atomic

__all__ = [  # the run folder's file names and readers, importable from here as before
    "ERRORS",
    "GRADES",
    "LEDGER",
    "RESULTS",
    "RUN_JSON_BYTES",
    "SUMMARY_JSON",
    "SUMMARY_MD",
    "TornLineWarning",
    "iter_jsonl",
    "write_atomic",
]

CONFIG = RUN_CONFIG
SPACE_RESERVE_BYTES = 32 * 1024

_F = TypeVar("_F", bound=Callable[..., Any])


class AppendLog:
    """A JSON-lines file open for appending whole lines, one `os.write` per line.

    When a write fails (no room, see `is_disk_full`), the part of the line that reached
    the file is cut off again before the error is raised, so the file never holds a
    torn line and the next append (after space came back) starts a line of its own; no
    room is raised as `DiskFull`. A torn last line left by a killed writer is cut off on
    opening (`repair_torn_tail`). One writer per file (the run folder's lock).
    """

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        repair_torn_tail(self.path)
        try:
            self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full(exc, self.path) from exc
            raise
        self._size = os.lseek(self._fd, 0, os.SEEK_END)
        self._fsync = fsync

    def append(self, obj: Any) -> None:
        """Append `obj` as one JSON line (`storable_json`: any text, losslessly)."""
        self.write((storable_json(obj) + "\n").encode("utf-8"))

    def write(self, data: bytes) -> None:
        """Append `data` (whole lines) or nothing of it."""
        if self._fd is None:
            raise ValueError(f"{self.path}: append log is closed")
        view = memoryview(data)
        try:
            while view:  # a regular file writes it all at once unless it runs out of room
                view = view[os.write(self._fd, view) :]
            if self._fsync:
                os.fsync(self._fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)  # cut the partial line: freeing space always works
            if is_disk_full(exc):
                raise disk_full(exc, self.path) from exc
            raise
        self._size += len(data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@contextlib.contextmanager
def exclusive_lock(lock_path: Path, refusal: str, where: Path) -> Iterator[None]:
    """Hold an exclusive, non-blocking `flock` on `lock_path` for the block, or raise
    `InputError(refusal + holder, where)` when another process holds it. The kernel
    drops the lock when the process ends, however it ends (SIGKILL too), so a stale lock
    file never blocks anyone."""
    import fcntl  # POSIX; imported here so reading runs still works without it

    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = ""
        try:
            pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            holder = f" (process {pid})" if pid.isdigit() else ""
        except OSError:
            pass
        os.close(fd)
        raise InputError(refusal.format(holder=holder), where) from None
    try:
        with contextlib.suppress(OSError):  # the pid is only for the message above
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def runs_dir_lock(runs_dir: str | Path) -> Iterator[None]:
    """Hold the runs folder's lock (`runs.lock`) for the block: one `evalkit run` (or
    resume) at a time per runs folder, so two processes never pay for the same keys
    (they would share the folder's response cache, and each pay for what the other has
    in flight). A second one gets an `InputError` before it calls anything."""
    root = Path(runs_dir)
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(
        root / RUNS_LOCK,
        "another evalkit run{holder} is using this runs folder and its response "
        f"cache; wait for it to finish, or give another --runs-dir (it holds {RUNS_LOCK})",
        root,
    ):
        yield


_SAMPLE_FIELDS = tuple(f.name for f in dataclasses.fields(Sample))


def sample_to_dict(sample: Sample) -> dict[str, Any]:
    """A `Sample` as its `results.jsonl` line (usage as a nested object). Built field by
    field: `dataclasses.asdict` deep-copies and costs more than the rest of a sample's
    bookkeeping."""
    d = {name: getattr(sample, name) for name in _SAMPLE_FIELDS}
    d["tags"] = list(sample.tags)
    d["tool_calls"] = list(sample.tool_calls)
    d["usage"] = {"prompt_tokens": sample.usage.prompt_tokens, "completion_tokens": sample.usage.completion_tokens}
    for name in _AGENT_FIELDS:  # a prompt unit's line stays as it was
        if d[name] is None:
            del d[name]
    return d


_AGENT_FIELDS = ("turns", "agent", "termination")


def sample_from_dict(d: dict[str, Any]) -> Sample:
    """Rebuild a `Sample` from a `results.jsonl` line."""
    u = d.get("usage") or {}
    names = {f.name for f in dataclasses.fields(Sample)}
    kw = {k: v for k, v in d.items() if k in names and k != "usage"}
    kw["tags"] = tuple(kw.get("tags") or ())
    kw["tool_calls"] = tuple(kw.get("tool_calls") or ())
    return Sample(usage=Usage(int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0))), **kw)


def grade_to_dict(g: Grade) -> dict[str, Any]:
    """A `Grade` as its `grades.jsonl` line (docs/formats.md)."""
    d = dataclasses.asdict(g)
    d["checks"] = [dataclasses.asdict(c) for c in g.checks]
    return d


def grade_from_dict(d: dict[str, Any]) -> Grade:
    """A `grades.jsonl` line back as a `Grade` (keys a line lacks take their defaults)."""
    names = {f.name for f in dataclasses.fields(Grade)} - {"checks"}
    kw = {k: v for k, v in d.items() if k in names}
    kw["index"] = int(d["index"])
    checks = tuple(CheckResult(c["name"], c["passed"], c.get("reason", "")) for c in d.get("checks") or ())
    return Grade(checks=checks, **kw)


def find_suite_dir(run_path: str | Path, ref: str | None) -> Path | None:
    """The folder of the suite a run was made from, when it still exists: `ref` (the
    `suite` its config.json records, relative to where the run was started) as given,
    then below the folder that holds the run's `runs/`, then that folder itself (the
    default layout `<suite>/runs/<stamp>`), so the answer does not depend on the
    current directory."""
    if not ref:
        return None
    p = Path(ref)
    root = Path(run_path).resolve().parent.parent
    markers = (CASES_FILE, CONFIG_FILE, *FOREIGN_SUITE_NAMES)  # a native suite, or an evals.json / eval.yaml one
    for cand in (p, root / p, root / p.name, root):
        if any((cand / m).is_file() for m in markers):
            return cand
    return None


def sample_path(run_path: str | Path, case_id: str, arm: str, index: int) -> Path:
    """The sample's text file in a run folder (`sample_relpath`)."""
    return Path(run_path) / sample_relpath(case_id, arm, index)


class RunFolder:
    """One run folder `runs/<stamp>/`: appends results and errors as samples finish.

    Lines are flushed after each write (not fsynced: an OS crash may lose the last
    lines, a process kill loses none that were written). Set `EVALKIT_FSYNC=1` to
    fsync each line.

    `sample_files=False` skips the `samples/<case>/<arm>/sample-<n>.txt` copies of the
    outputs (the agent-evals layout); `results.jsonl` holds the same text. Creating one
    small file per sample can be the largest per-sample cost of a run (up to 0.7 ms of
    kernel time on some disks), so after the first `offload_after` files a helper
    process writes the rest (`evalkit.runfolder._samplewriter`) while the run goes on; `close`
    waits for it, and writes itself whatever the helper could not. A sample's file may
    therefore appear just after its `results.jsonl` line, never later than `close`.
    """

    # Small runs (and most tests) never start the helper; EVALKIT_SAMPLE_WRITER_AFTER=0
    # starts it at the first sample.
    offload_after = int(os.environ.get("EVALKIT_SAMPLE_WRITER_AFTER", "64"))

    def __init__(self, path: str | Path, *, sample_files: bool = True) -> None:
        self.path = Path(path)
        self.sample_files = sample_files
        self._logs: dict[str, AppendLog] = {}
        self._fsync = bool(os.environ.get("EVALKIT_FSYNC"))
        self._dirs: set[Path] = set()
        self._inline_files = 0
        self._writer: SampleWriter | None = None
        self._can_offload = True

    @classmethod
    def create(cls, runs_dir: str | Path, meta: dict[str, Any], stamp: str | None = None) -> RunFolder:
        """Make a new `runs_dir/<UTC stamp>/` (a suffix when the stamp is taken) and
        write its `config.json`."""
        root = Path(runs_dir)
        root.mkdir(parents=True, exist_ok=True)
        base = stamp or datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        for n in range(1, 10_000):
            p = root / (base if n == 1 else f"{base}-{n}")
            try:
                p.mkdir()
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - ten thousand runs in one second
            raise RuntimeError(f"no free run folder name under {root}")
        run = cls(p)
        try:
            write_atomic(p / CONFIG, json.dumps(meta, indent=2, sort_keys=False) + "\n")
        except DiskFull:
            p.rmdir()  # no run folder without its config.json
            raise
        return run

    # -- one process at a time -----------------------------------------------------------

    @contextlib.contextmanager
    def lock(self) -> Iterator[RunFolder]:
        """Hold an exclusive lock on this run folder (`flock` on `run.lock`) for the block.

        Two processes on one run folder (two resumes, a run while grading writes) would
        pay twice for the same keys and interleave their files: the second one gets an
        `InputError` naming the folder, before it reads or calls anything. Non-blocking;
        a stale `run.lock` file never blocks anyone (`exclusive_lock`).
        """
        if not self.path.is_dir():
            raise InputError("run folder not found", self.path)
        with exclusive_lock(
            self.path / LOCK,
            f"another evalkit process{{holder}} is using this run folder; wait for it to finish (it holds {LOCK})",
            self.path,
        ):
            yield self

    @staticmethod
    def holding_lock(fn: _F) -> _F:
        """Decorator: hold the lock of the run folder named by `fn`'s first argument for
        the whole call (a path that is no run folder is passed through untouched, for
        `fn` to report)."""

        @functools.wraps(fn)
        def wrapper(run_path: str | Path, *args: Any, **kwargs: Any) -> Any:
            folder = RunFolder(run_path)
            if not (folder.path / CONFIG).is_file():
                return fn(run_path, *args, **kwargs)
            with folder.lock():
                return fn(run_path, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    # -- reading -----------------------------------------------------------------------

    @property
    def ledger_path(self) -> Path:
        return self.path / LEDGER

    def read_meta(self) -> dict[str, Any]:
        p = self.path / CONFIG
        if not p.exists():
            raise InputError("not a run folder (no config.json)", self.path)
        return read_json_object(p, "a run's config.json", limit=RUN_JSON_BYTES)

    def results(self) -> list[dict[str, Any]]:
        p = self.path / RESULTS
        return list(iter_jsonl(p)) if p.exists() else []

    def errors(self) -> list[dict[str, Any]]:
        p = self.path / ERRORS
        return list(iter_jsonl(p)) if p.exists() else []

    def finished_keys(self) -> set[tuple[str, str, int]]:
        """The (case id, arm, index) keys that have a line in `results.jsonl`."""
        return {(r["case_id"], r["arm"], int(r["index"])) for r in self.results()}

    # -- writing -----------------------------------------------------------------------

    def _append(self, name: str, obj: dict[str, Any]) -> None:
        log = self._logs.get(name)
        if log is None:
            log = self._logs[name] = AppendLog(self.path / name, fsync=self._fsync)
        log.append(obj)

    def _write_sample_text(self, sample: Sample) -> None:
        rel = sample_relpath(sample.case_id, sample.arm, sample.index)
        if self._writer is None and self._can_offload and self._inline_files >= self.offload_after:
            try:
                self._writer = SampleWriter(self.path)
            except OSError:  # no process to spare: write inline, as small runs do
                self._can_offload = False
        if self._writer is not None and self._writer.send(rel, sample.output):
            return
        self._write_inline(rel, sample.output)
        self._inline_files += 1

    def _write_inline(self, rel: str, text: str) -> None:
        try:
            write_text_atomic(self.path, rel, wtf8(text), self._dirs)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full(exc, self.path / rel) from exc
            raise

    def repair_sample_files(self, rows: list[dict[str, Any]] | None = None) -> int:
        """Write the sample text file of every `results.jsonl` line (`rows`, read when not
        given) that lacks one (a helper that died, a run killed before its helper caught
        up, a disk that filled); returns how many. No room raises `DiskFull`."""
        written = 0
        for d in self.results() if rows is None else rows:
            rel = sample_relpath(d["case_id"], d["arm"], int(d["index"]))
            if not (self.path / rel).is_file():
                self._write_inline(rel, str(d.get("output") or ""))
                written += 1
        return written

    def append_result(self, sample: Sample) -> None:
        """Write (or hand to the helper) the sample's text file, then its `results.jsonl`
        line (the line is the commit point: a sample without a line did not finish).
        Raises `DiskFull` when there is no room (the sample then has no line)."""
        if self.sample_files:
            self._write_sample_text(sample)
        self._append(RESULTS, sample_to_dict(sample))

    def append_error(
        self, case_id: str, arm: str, index: int, error: str, attempts: int, cost_usd: float | None = None
    ) -> None:
        line: dict[str, Any] = {"case_id": case_id, "arm": arm, "index": index, "error": error, "attempts": attempts}
        if cost_usd is not None:  # an agent sample: what its calls were charged
            line["cost_usd"] = cost_usd
        line["t"] = round(time.time(), 3)
        self._append(ERRORS, line)

    def write_case_table(self, table: CaseTable) -> None:
        """Write `case-table.json`: the cases as this run sees them (sets, tags, judged),
        so a later edit of the suite never changes how the run is gated."""
        write_atomic(self.path / CASE_TABLE, json.dumps(table.to_json(), indent=2) + "\n")

    def write_verdicts(self, verdicts: RunVerdicts) -> None:
        """Write `verdicts.json` (what compare, gate and report concluded) atomically."""
        write_atomic(self.path / VERDICTS, json.dumps(verdicts.to_json(), indent=2, allow_nan=False) + "\n")

    def read_summary(self) -> dict[str, Any]:
        """`summary.json`, or {} for a run that has not written one."""
        p = self.path / SUMMARY_JSON
        return read_json_object(p, SUMMARY_JSON, limit=RUN_JSON_BYTES) if p.exists() else {}

    def write_summary(self, summary: dict[str, Any], markdown: str) -> None:
        write_atomic(self.path / SUMMARY_JSON, json.dumps(summary, indent=2) + "\n")
        write_atomic(self.path / SUMMARY_MD, markdown if markdown.endswith("\n") else markdown + "\n")

    def reserve_space(self, nbytes: int = SPACE_RESERVE_BYTES) -> None:
        """Hold `nbytes` of disk in `.space-reserve` while the run goes on; `release_space`
        frees them when the disk fills, so the INCOMPLETE summary can still be written.
        Raises `DiskFull` when there is not even that much room (nothing is sent then)."""
        p = self.path / SPACE_RESERVE
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size < nbytes:
                    try:
                        os.posix_fallocate(fd, 0, nbytes)
                    except (AttributeError, OSError) as exc:  # no fallocate here (macOS, some filesystems)
                        if is_disk_full(exc):
                            raise
                        os.pwrite(fd, bytes(nbytes), 0)
            finally:
                os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(p)
            if is_disk_full(exc):
                raise disk_full(exc, p) from exc
            raise

    def release_space(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path / SPACE_RESERVE)

    def close(self) -> None:
        """Close the line files, wait for the sample-file helper, and write any sample
        file it did not (with a warning naming its error; with no room left, the warning
        says so and a resume writes them)."""
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        if self._writer is not None:
            writer, self._writer = self._writer, None
            ok, err = writer.finish()
            if not ok:
                try:
                    n = self.repair_sample_files()
                    note = f"wrote {n} sample file(s) from results.jsonl instead"
                except DiskFull as exc:
                    note = f"{exc}; a resume writes the missing sample files from results.jsonl"
                warnings.warn(
                    f"{self.path}: the sample-file helper failed ({err or 'it stopped'}); {note}",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_cap_usd(meta: dict[str, Any], fallback: float) -> float:
    """The cost cap a run folder spends under, generator and judge together: the one its
    `config.json` records (`cost_cap_usd`, the CI cap for a CI run), else (a run from
    before evalkit recorded it, or from another tool) the config snapshot's, else
    `fallback`."""
    for value in (meta.get("cost_cap_usd"), (meta.get("config") or {}).get("cost_cap_usd")):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return float(fallback)


def side_run(path: Path, meta: dict[str, Any] | None = None) -> str | None:
    """Why a run folder is no run of the suite's own measure ("a micro-test", "a replay
    of cached answers"), or None: such runs stay out of the index's trends and of a
    notebook's default run."""
    if (path / MICROTEST_MARKER).is_file():
        return "a micro-test"
    if meta is None:
        try:
            loaded = json.loads((path / RUN_CONFIG).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            loaded = {}
        meta = loaded if isinstance(loaded, dict) else {}
    return "a replay of cached answers (--replay-only)" if meta.get("replay_only") else None


def config_arm_names(meta: dict[str, Any]) -> list[str]:
    """The arm names a run's `config.json` lists (names or `{"name": ...}` objects)."""
    names = [a.get("name") if isinstance(a, dict) else str(a) for a in (meta.get("arms") or [])]
    return [n for n in names if n]


def answered_as(settings: dict[str, Any]) -> str | None:
    """The model an arm's answers came from, as pages, the index and the terminal name
    it: `scripted (script <sha256 prefix>)` for evalkit's scripted server, never the
    config's model it stood in for; else the recorded model."""
    if settings.get("answered_by") == "scripted":
        return f"scripted (script {str(settings.get('script_sha256') or '')[:12]})"
    model = settings.get("model")
    return None if model is None else str(model)


def answered_line(meta: dict[str, Any]) -> str:
    """What answered a run's calls, per arm (`runs.answered_as`: `scripted (script ...)`
    for evalkit's scripted server, else the recorded model), as the page header says it."""
    per = {arm: answered_as(st) for arm, st in config_arm_settings(meta).items()}
    said = sorted({v for v in per.values() if v})
    if not said:
        return ""
    if len(said) == 1:
        return f"answered by {said[0]}"
    return "answered by " + "; ".join(f"{arm}: {v}" for arm, v in per.items() if v)


def config_arm_settings(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each arm's model, endpoint host and parameters as a run's `config.json` records
    them (`arm_settings`, written by `evalkit run`); for a run of an older evalkit or
    another tool, what its config snapshot says (the suite's generator model and
    temperature for every arm, no host)."""
    recorded = meta.get("arm_settings")
    names = config_arm_names(meta)
    if isinstance(recorded, dict) and recorded:
        return {n: dict(recorded.get(n) or {}) for n in names}
    raw_cfg, raw_gen = meta.get("config"), None
    cfg: dict[str, Any] = raw_cfg if isinstance(raw_cfg, dict) else {}
    raw_gen = cfg.get("generator")
    gen: dict[str, Any] = raw_gen if isinstance(raw_gen, dict) else {}
    model = gen.get("model") if isinstance(gen.get("model"), str) else None
    base = {"model": model, "host": None, "temperature": cfg.get("temperature"), "seed": cfg.get("seed")}
    return {n: dict(base) for n in names}


def stopping_record(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """A run's `stopping` block (`summary.json`, written by a run that may stop before the
    fixed design's end: `evalkit.running.until_decided`), or None for a fixed-design run."""
    block = (summary or {}).get("stopping")
    return block if isinstance(block, dict) else None


def not_run_keys(summary: dict[str, Any] | None) -> set[tuple[str, str, int]]:
    """The (case, arm, index) keys a stopping run's design no longer expects: grading does
    not count them missing."""
    block = stopping_record(summary) or {}
    return {(str(c), str(a), int(i)) for c, a, i in block.get("not_run") or ()}


def decided_keys(summary: dict[str, Any] | None) -> set[tuple[str, str, int]]:
    """The (case, arm, index) keys a per-case stopping run skipped because their case's gate
    was already decided (a pass^k case by a failing sample, a pass@k case by a passing
    one): each counts as a failed sample, which leaves the gated pass^k / pass@k exactly
    what the full k samples give (docs/stopping.md)."""
    block = stopping_record(summary) or {}
    return not_run_keys(summary) if block.get("mode") == "per_case" else set()


def stopping_line(summary: dict[str, Any] | None) -> str | None:
    """What the pages, the index and summary.md say of a run that stopped before the fixed
    design's end: "stopped early at 14 of 60 cases (pass), saved $0.012 (184 of 240 calls)";
    None for a run that did not."""
    s = stopping_record(summary)
    if not s or not s.get("stopped_early"):
        return None
    saved = f"saved {fmt.usd(s.get('saved_usd'))} ({s.get('calls_saved')} of {s.get('fixed_calls')} calls)"
    if s.get("mode") == "per_case":
        return f"stopped early per case ({s.get('reason')}), {saved}"
    return f"stopped early at {s.get('at_case')} of {s.get('of_cases')} cases ({s.get('decision')}), {saved}"
