"""Past one machine's rate limit: the provider Batch API, under the run's ledger.

`evalkit run SUITE --batch` (`run_keys`) writes the request of every missing (case, arm,
index) key as one line of a Batch API input file: ``{"custom_id": "<case>/<arm>/<index>",
"method": "POST", "url": "/v1/chat/completions" | "/v1/completions", "body": ...}``, the
body exactly what `ModelClient.complete` would send online (`request_body`: the same
model, prompt or messages, parameters and derived seed, so the same request hash and
response cache). Lines are streamed to files of at most `max_requests` lines and
`max_bytes` bytes (the provider's limits: OpenAI takes up to 50,000 requests and 200 MB
a file), each uploaded with ``client.files.create(file=..., purpose="batch")`` and run
with ``client.batches.create(input_file_id=..., endpoint=..., completion_window="24h")``
through the official openai client. `evalkit grade RUN --batch` (`JudgeBatches`) does
the same for the judge's calls. Arms on other models, endpoints or prices get batches of
their own (`_Group`: one batch per endpoint), each reserved at its own `batch_price`.

**The ledger.** Before a file is uploaded, its worst case (every line at its token
ceilings, at `batch_price` / `judge_batch_price`) is reserved on the run's one ledger
as a single reservation (key ``batch/<name>``), or the batch is refused whole
(`BudgetExhausted`: nothing is uploaded, nothing after it is submitted). Each result
line settles against it (`Ledger.charge`) by the rules of an online call
(`evalkit.calls.client`): an answer at its reported usage (untrusted usage, none at all, or a
body that is no completion: the line's full worst case; over its ceilings: ceiling
breached, the run stops and the run's other batches are cancelled); a line the provider
answered with an HTTP error status: $0; a line that never ran (`batch_expired`,
`batch_cancelled`): $0; any other error, $0 only when the provider says the request did
not run, else the worst case. Once the batch has ended, what is left is closed: $0,
except for lines the provider counts as processed (`request_counts`) that are in
neither result file, charged at their worst case (they may have been billed). A batch
that failed validation ran nothing: $0.

**Durable.** `batches.json` in the run folder records every batch as soon as each id
exists (`BatchLog`, written atomically): the local input file (``batches/<name>.jsonl``),
then its file id, then its batch id, the provider's status and request counts. A killed
run resumes where it was: a file that may have been uploaded is looked up by its unique
file name before it is uploaded again; a batch that may have been created is looked up
by its input file id (``batches.list``, the 1,000 newest) before another is created, so
a kill never makes a second batch of one file; a batch that was created is polled
again, never resubmitted. Its
reservation is adopted by the resuming process (`Ledger.adopt`), and lines a killed
collection already charged are recorded without being charged again. Every `--resume`,
with `--batch` or without, first collects the batches still open; then keys still
missing (lines that failed or expired, batches refused by the cap) go online or, with
`--batch`, into new batches. `batch_status` and `batch_cancel` (`evalkit batch status |
cancel RUN`) ask the provider about, or cancel, the batches still open; a cancelled
batch's partial results are collected by the next resume.

Results are mapped back by `custom_id` into the files an online run writes (a sample's
`latency_ms` is its batch's turnaround); a custom id that is not one of the batch's
lines, a second result for a line and a line longer than `client.body_bound` are never
recorded (counted in the batch's `outcome`), a line with no result is an error. Memory
of a run does not grow with the number of requests: lines are written as they are made,
results are read as they stream back, and it keeps one 4-byte slot per planned key
(and the request key of each line of a twin arm, `runner.seed_names`; the judge keeps
its answers for the second pass, as a grading holds its samples).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import sys
import time
from array import array
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai

from evalkit.calls.client import (
    CallStopped,
    Completion,
    MalformedResponse,
    ModelClient,
    body_bound,
    check_endpoint,
    pause,
    request_hash,
)
from evalkit.calls.ledger import Ledger, Reservation
from evalkit.foundations._io import RUN_JSON_BYTES, read_json_object, write_atomic
from evalkit.foundations._text import printable
from evalkit.foundations.errors import (
    BudgetExhausted,
    CeilingBreached,
    DiskFull,
    InputError,
    InputTooLong,
    UnitCallError,
)
from evalkit.foundations.layout import BATCHES
from evalkit.foundations.records import Arm, Config, Endpoint, Price, Usage

BATCH_DIR = "batches"
FORMAT = "evalkit-batches/1"
MAX_REQUESTS = 50_000  # OpenAI: "The file can contain up to 50,000 requests"
MAX_BYTES = 200_000_000  # "and can be up to 200 MB in size" (decimal: the smaller reading)
COMPLETION_WINDOW = "24h"  # the only window OpenAI offers
POLL_S = 15.0
MAX_POLL_FAILURES = 8  # polls in a row that got no answer: the run stops, the batches stay open
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
OPEN_STATES = ("prepared", "uploaded", "submitted")  # collected and refused batches are closed
NOT_RUN_CODES = frozenset({"batch_expired", "batch_cancelled"})
ENDPOINTS = {True: "/v1/chat/completions", False: "/v1/completions"}
_HANDLED = 0xFFFFFFFF  # a slot whose line has its result (or will never get one this session)
_EARLIER = 0xFFFFFFFE  # a key with its result from an earlier session (results.jsonl)


@dataclass(frozen=True)
class BatchOptions:
    """How `--batch` forms and waits for batches. `max_requests` and `max_bytes` are the
    provider's limits per input file (OpenAI's by default; smaller batches also let more
    of a run fit under a tight cap, since each is refused or reserved whole); `poll_s`
    is the interval between status checks; `wait=False` submits and returns (a later
    `--resume` collects)."""

    max_requests: int = MAX_REQUESTS
    max_bytes: int = MAX_BYTES
    poll_s: float = POLL_S
    wait: bool = True
    completion_window: str = COMPLETION_WINDOW
    timeout_s: float = 600.0  # one upload, download or status request

    def __post_init__(self) -> None:
        if self.max_requests < 1 or self.max_bytes < 1:
            raise InputError(
                f"batch limits must be positive (max requests {self.max_requests}, bytes {self.max_bytes})"
            )
        if not self.poll_s > 0 or not self.timeout_s > 0:
            raise InputError(f"the batch poll interval must be positive, got {self.poll_s:g}")


# ------------------------------------------------------------------------- the record


class BatchLog:
    """`batches.json` of a run folder: every batch of the run, its ids and state,
    rewritten atomically on every change (docs/formats.md). Only the process holding
    the run folder's lock writes it."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / BATCHES
        self.entries: list[dict[str, Any]] = []
        if self.path.exists():
            data = read_json_object(self.path, "batches.json", limit=RUN_JSON_BYTES)
            entries = data.get("batches")
            if not isinstance(entries, list):
                raise InputError("batches.json has no list of batches", self.path, json_path="$.batches")
            for i, e in enumerate(entries):
                if not isinstance(e, dict) or not all(isinstance(e.get(k), str) for k in ("name", "role", "state")):
                    raise InputError("a batch needs a name, a role and a state", self.path, json_path=f"$.batches[{i}]")
            self.entries = entries

    def save(self) -> None:
        write_atomic(self.path, json.dumps({"format": FORMAT, "batches": self.entries}, indent=2) + "\n")

    def open(self, role: str | None = None) -> list[dict[str, Any]]:
        """The batches not yet collected (or refused), of `role` or of every role."""
        return [e for e in self.entries if e["state"] in OPEN_STATES and role in (None, e["role"])]

    def update(self, entry: dict[str, Any], **fields: Any) -> None:
        entry.update(fields, updated=_now())
        self.save()


def has_open(run_dir: str | Path, role: str = "generator") -> bool:
    """Whether the run folder has batches of `role` still to collect."""
    p = Path(run_dir) / BATCHES
    return p.exists() and bool(BatchLog(run_dir).open(role))


def check_ready(
    config: Config,
    role: str = "generator",
    config_path: str | Path | None = None,
    arm: tuple[int, Arm] | None = None,
) -> Price:
    """The batch price of `role`, or an `InputError` naming the config key when the
    suite has none: a batch is reserved and charged at the provider's batch price.
    `arm` (its index in `$.arms` and the arm, whose config `config` is) names the arm in
    the message, and its own key when the arm sets it (or runs another model, whose
    batch price the suite's is not)."""
    key = "batch_price" if role == "generator" else "judge_batch_price"
    price = config.batch_price if role == "generator" else config.judge_batch_price
    if price is None:
        online = "price" if role == "generator" else "judge_price"
        at, whose = f"$.{key}", "config.json"
        if arm is not None:
            i, a = arm
            if key in a.overrides:
                at, whose = f"$.arms[{i}].{key}", f"arm {a.name!r} (model {config.generator.model!r}) in config.json"
            else:
                whose = f"config.json for arm {a.name!r}"
        raise InputError(
            f"--batch needs {key} in {whose}: batch calls are reserved and charged at the provider's "
            f'batch price ({{"in_per_mtok", "out_per_mtok"}}, USD per million tokens; OpenAI charges half of '
            f"{online}); a run started without it cannot be resumed with --batch",
            config_path,
            json_path=at,
        )
    return price


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# ----------------------------------------------------------------------- the provider


class Provider:
    """The files and batches APIs of one endpoint, through the official openai client
    (its httpx transport, which streams a file upload from disk). Status requests are
    retried by the client; creating a batch never is (a retry could create a second
    batch: `_Batches` looks for the first one instead)."""

    def __init__(self, base_url: str, api_key: str, timeout_s: float = 600.0) -> None:
        self.base_url = base_url
        self._c = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=2,
            timeout=timeout_s,
            http_client=openai.DefaultAsyncHttpxClient(timeout=timeout_s),
        )

    async def upload(self, path: Path, filename: str) -> Any:
        with open(path, "rb") as fh:
            return await self._c.files.create(file=(filename, fh, "application/jsonl"), purpose="batch")

    async def find_file(self, filename: str, size: int, scan: int = 2_000) -> str | None:
        """The id of an uploaded batch file named `filename` of `size` bytes (among the
        `scan` newest), or None."""
        seen = 0
        async for f in self._c.files.list(purpose="batch"):
            if f.filename == filename and f.bytes == size:
                return str(f.id)
            seen += 1
            if seen >= scan:
                break
        return None

    async def create(self, file_id: str, endpoint: str, window: str, metadata: dict[str, str]) -> Any:
        return await self._c.with_options(max_retries=0).batches.create(
            input_file_id=file_id,
            endpoint=endpoint,  # type: ignore[arg-type]
            completion_window=window,  # type: ignore[arg-type]
            metadata=metadata,
        )

    async def find_batch(self, file_id: str, scan: int = 1_000) -> Any | None:
        """The batch made from input file `file_id` (among the `scan` newest), or None."""
        seen = 0
        async for b in self._c.batches.list(limit=100):
            if b.input_file_id == file_id:
                return b
            seen += 1
            if seen >= scan:
                break
        return None

    async def retrieve(self, batch_id: str) -> Any:
        return await self._c.batches.retrieve(batch_id)

    async def cancel(self, batch_id: str) -> Any:
        return await self._c.batches.cancel(batch_id)

    async def lines(self, file_id: str, limit: int) -> AsyncIterator[bytes | None]:
        """The lines of a result file as they stream in; a line longer than `limit`
        bytes is skipped and given as None (never held in memory)."""
        async with self._c.files.with_streaming_response.content(file_id) as resp:
            buf = bytearray()
            skipping = False
            async for chunk in resp.iter_bytes():
                start = 0
                while True:
                    nl = chunk.find(b"\n", start)
                    piece = chunk[start:] if nl < 0 else chunk[start:nl]
                    if not skipping:
                        buf += piece
                        if len(buf) > limit:
                            skipping, buf = True, bytearray()
                    if nl < 0:
                        break
                    if skipping:
                        yield None
                    elif buf.strip():
                        yield bytes(buf)
                    buf, skipping, start = bytearray(), False, nl + 1
            if skipping:
                yield None
            elif buf.strip():
                yield bytes(buf)

    async def aclose(self) -> None:
        await self._c.close()


def _provider_for(entry: dict[str, Any], timeout_s: float) -> Provider:
    url = entry["base_url"]
    key = check_endpoint(Endpoint(entry.get("model", ""), url, entry.get("api_key_env") or "OPENAI_API_KEY"), url)
    return Provider(url, key, timeout_s)


def _api_cause(exc: BaseException) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {_short(exc.message)}"
    return f"{type(exc).__name__}: {_short(str(exc.__cause__ or exc))}"


def _short(s: Any, n: int = 200) -> str:
    t = " ".join(str(s).split())
    return t if len(t) <= n else t[: n - 3] + "..."


# --------------------------------------------------------------------- where lines go


class _Sink:
    """Where the results of one role's lines go, and the slot of each line (which
    batch it is in: one 4-byte slot per position, 0 for none)."""

    chat: bool

    def position(self, custom_id: str) -> int | None:
        raise NotImplementedError

    def request(self, custom_id: str) -> tuple[str, int]:
        """(request hash, sample index) of a line."""
        raise NotImplementedError

    def answer(self, custom_id: str, c: Completion) -> None:
        raise NotImplementedError

    def fail(self, custom_id: str, message: str, attempts: int) -> None:
        raise NotImplementedError

    def stop(self, cause: str) -> None:
        raise NotImplementedError

    def halted(self) -> str | None:
        """Why nothing more can be done this session (a watch, a full disk, Ctrl-C), or None."""
        raise NotImplementedError

    def tick(self, n: int) -> None:
        """Move the progress bar by `n` lines the provider reports done."""

    def learn(self, custom_id: str, body: dict[str, Any]) -> None:
        """A line of a batch an earlier session submitted, read back from its file."""

    def slot(self, custom_id: str) -> int | None:
        pos = self.position(custom_id)
        return None if pos is None else self._slots[pos]

    def set_slot(self, custom_id: str, value: int) -> None:
        pos = self.position(custom_id)
        if pos is not None:
            self._slots[pos] = value

    _slots: Any


class _RunSink(_Sink):
    """The generator's lines: results go to the run's engine (`runner._Engine`)."""

    def __init__(self, engine: Any, k: int) -> None:
        self.engine = engine
        self.chat = engine.config.mode == "chat"
        self._cases = {c: i for i, c in enumerate(engine.cases)}
        self._arms = {a: i for i, a in enumerate(engine.arms)}
        self._k = k
        # Every key starts as recorded earlier; `run_keys` frees the pending ones (slot 0).
        self._slots = array("I", [_EARLIER]) * (len(self._cases) * len(self._arms) * k)
        self._soft = ("budget exhausted", "ceiling breached", "batch ")  # causes that leave polling possible

    def key(self, custom_id: str) -> tuple[str, str, int] | None:
        parts = custom_id.split("/")
        if len(parts) != 3 or not parts[2].isdigit():
            return None
        c, a, i = parts[0], parts[1], int(parts[2])
        return (c, a, i) if c in self._cases and a in self._arms and i < self._k else None

    def position(self, custom_id: str) -> int | None:
        key = self.key(custom_id)
        if key is None:
            return None
        return (self._cases[key[0]] * len(self._arms) + self._arms[key[1]]) * self._k + key[2]

    def free(self, keys: Iterable[tuple[str, str, int]]) -> None:
        """Mark `keys` as still to be made (one pass over them, nothing kept)."""
        for c, a, i in keys:
            self._slots[(self._cases[c] * len(self._arms) + self._arms[a]) * self._k + i] = 0

    def pending(self) -> Iterator[tuple[str, str, int]]:
        """The keys still to be made, in plan order, drawn from the slots as they go."""
        n_arms = len(self._arms)
        for c, ci in self._cases.items():
            for a, ai in self._arms.items():
                base = (ci * n_arms + ai) * self._k
                for i in range(self._k):
                    if self._slots[base + i] == 0:
                        yield c, a, i

    twin_line: Callable[[str, Any], None] | None = None  # `run_keys`: notes a twin arm's line

    def learn(self, custom_id: str, body: dict[str, Any]) -> None:
        if self.twin_line is not None:
            self.twin_line(custom_id, body)

    def request(self, custom_id: str) -> tuple[str, int]:
        key = self.key(custom_id)
        assert key is not None
        return request_hash(self.engine.client_of(key[1]).request_body(**self.engine.call_args(key))), key[2]

    def answer(self, custom_id: str, c: Completion) -> None:
        key = self.key(custom_id)
        assert key is not None
        self.engine.record(key, c)

    def fail(self, custom_id: str, message: str, attempts: int) -> None:
        key = self.key(custom_id)
        assert key is not None
        self.engine.error(key, message, attempts)

    def stop(self, cause: str) -> None:
        self.engine.stop(cause)

    def halted(self) -> str | None:
        self.engine.should_stop()
        hard = [c for c in self.engine.stop_causes if not c.startswith(self._soft)]
        return hard[0] if hard else None

    def tick(self, n: int) -> None:
        if n:
            self.engine.bar.n = max(0, self.engine.bar.n + n)
            self.engine.bar.refresh()


# --------------------------------------------------------------- batches of one role


class _Batches:
    """Submit, poll and collect the batches of one role (generator or judge) of a run
    folder, on its ledger; see the module docstring."""

    def __init__(
        self,
        run_dir: Path,
        role: str,
        client: ModelClient,
        price: Price,
        options: BatchOptions,
        sink: _Sink,
        base_url: str | None,
        group: _Group | None = None,
    ) -> None:
        # The batches of one (endpoint, model, price) group of arms share the run's one
        # `batches.json` and its slot numbers with the other groups' (`run_keys`).
        self.group = group
        self.log = group.log if group is not None else BatchLog(run_dir)
        self.run_dir = run_dir
        self.role = role
        # what the user does next, in a stop reason: a judge's batches are grading's, which has no --resume
        judge = role == "judge"
        self.to_collect = "grade again (with --batch) to collect them" if judge else "--resume collects them"
        self.to_submit = "grade again (with --batch) to submit them again" if judge else "--resume submits them again"
        self.client = client
        self.ledger: Ledger = client.ledger
        self.price = price
        self.options = options
        self.sink = sink
        self.base_url = base_url
        self.tin, self.tout = client.max_tokens_in, client.max_tokens_out
        self.line_limit = body_bound(self.tout) + 64 * 1024  # a result line: the body and its envelope
        self._providers: dict[str, Provider] = {}
        self._held: dict[str, tuple[Reservation, set[str]]] = {}  # batch name -> its reservation, lines charged
        self._shown: dict[str, int] = {}  # batch name -> lines the bar shows as done by the provider
        self._slot_of = group.slots if group is not None else {e["name"]: i + 1 for i, e in enumerate(self.log.entries)}

    # -- providers and slots -------------------------------------------------------------

    def _open(self) -> list[dict[str, Any]]:
        """The open batches of this role that are this job's: its group's (a batch
        records the arms of its lines), every one when it has no group."""
        return [e for e in self.log.open(self.role) if self.group is None or self.group.owns(e)]

    def _provider(self, entry: dict[str, Any]) -> Provider:
        url = entry["base_url"]
        if url not in self._providers:
            self._providers[url] = _provider_for(entry, self.options.timeout_s)
        return self._providers[url]

    async def aclose(self) -> None:
        for p in self._providers.values():
            await p.aclose()

    def _slot(self, entry: dict[str, Any]) -> int:
        return self._slot_of.setdefault(entry["name"], len(self._slot_of) + 1)

    def _input_ids(self, entry: dict[str, Any], bodies: bool = False) -> Iterator[Any]:
        """The custom ids of an open batch (with their bodies: (id, body) pairs), read
        back from its local input file."""
        path = self.run_dir / entry["input"]
        if not path.exists():
            return
        with open(path, "rb") as fh:
            for raw in fh:
                line = json.loads(raw)
                cid = line.get("custom_id")
                if isinstance(cid, str):
                    yield (cid, line.get("body")) if bodies else cid

    # -- resuming ------------------------------------------------------------------------

    async def resume(self) -> None:
        """Take over the batches an earlier session left open: mark their lines, adopt
        their reservations, and finish uploading or creating any that a kill cut short."""
        for entry in self._open():
            slot = self._slot(entry)
            for cid, body in self._input_ids(entry, bodies=True):
                self.sink.learn(cid, body)
                if self.sink.slot(cid) == 0:
                    self.sink.set_slot(cid, slot)
            price = Price(**entry["price"])
            held = self.ledger.adopt(
                f"batch/{entry['name']}",
                self.role,
                entry["model"],
                price,
                entry["lines"] * entry["max_tokens_in"],
                entry["lines"] * entry["max_tokens_out"],
            )
            if held is not None:
                self._held[entry["name"]] = held
            elif entry["state"] == "prepared":  # killed before it was reserved: reserve it now
                if not self._reserve(entry):
                    continue
            elif entry["state"] == "submitted":  # its reservation was closed: it was collected in full
                self._release_slots(entry)
                self.log.update(entry, state="collected")
                continue
            else:  # refused by the provider before a kill could record it
                self._drop(entry, "its reservation was closed before the batch was created")
                continue
            if self.sink.halted() or self._no_more:
                return
            await self._advance(entry)

    # -- submitting ----------------------------------------------------------------------

    async def submit(
        self, items: AsyncIterator[tuple[str, dict[str, Any]]] | Iterable[tuple[str, dict[str, Any]]]
    ) -> None:
        """Write `items` ((custom id, request body) of each call to make) into batch
        input files within the provider's limits, and submit each as soon as it is full."""
        part: _Part | None = None
        url = ENDPOINTS[self.sink.chat]
        try:
            async for cid, body in _aiter(items):
                if self.sink.halted() or self._no_more:
                    break
                line = (
                    json.dumps(
                        {"custom_id": cid, "method": "POST", "url": url, "body": body},
                        ensure_ascii=False,
                        separators=(",", ":"),
                    )
                    + "\n"
                ).encode("utf-8")
                if len(line) > self.options.max_bytes:
                    self.sink.fail(
                        cid,
                        f"the request is {len(line)} bytes as a batch line, over the batch file limit of "
                        f"{self.options.max_bytes} bytes: not submitted ($0)",
                        0,
                    )
                    continue
                if part is not None and (
                    part.lines >= self.options.max_requests or part.size + len(line) > self.options.max_bytes
                ):
                    await self._seal(part)
                    part = None
                    if self.sink.halted() or self._no_more:
                        break
                if part is None:
                    part = self._new_part()
                part.write(line)
                self.sink.set_slot(cid, part.slot)
            if part is not None:
                await self._seal(part)
                part = None
        finally:
            if part is not None:  # stopped before it was full: it was never submitted
                part.discard(self.sink)

    _no_more: str | None = None  # why no further batch is submitted this session

    def _new_part(self) -> _Part:
        taken = [n.rpartition("-")[2] for n in self._slot_of if n.startswith(f"{self.role}-")]
        name = f"{self.role}-{max((int(n) for n in taken if n.isdigit()), default=0) + 1}"
        (self.run_dir / BATCH_DIR).mkdir(exist_ok=True)
        rel = f"{BATCH_DIR}/{name}.jsonl"
        return _Part(name, self.run_dir / rel, rel, self._slot(dict(name=name)))

    async def _seal(self, part: _Part) -> None:
        """Record a full input file, reserve its worst case (or refuse it whole), then
        upload it and create its batch."""
        try:
            part.close()
        except OSError as exc:
            part.discard(self.sink)
            self.sink.stop(str(DiskFull(part.path, exc.strerror or str(exc))))
            return
        run = self.run_dir.name
        entry: dict[str, Any] = {
            "name": part.name,
            "role": self.role,
            "state": "prepared",
            "ledger_key": f"batch/{part.name}",
            "model": self.client.endpoint.model,
            "base_url": self.base_url,
            **({"arms": list(self.group.arms)} if self.group is not None else {}),
            "api_key_env": self.client.endpoint.api_key_env,
            "endpoint": ENDPOINTS[self.sink.chat],
            "completion_window": self.options.completion_window,
            "input": part.rel,
            "filename": f"evalkit-{run}-{part.name}-{part.sha[:12]}.jsonl",
            "lines": part.lines,
            "bytes": part.size,
            "sha256": part.sha,
            "max_tokens_in": self.tin,
            "max_tokens_out": self.tout,
            "price": dataclasses.asdict(self.price),
            "reserved_usd": self.price.cost(part.lines * self.tin, part.lines * self.tout),
            "file_id": None,
            "batch_id": None,
            "status": None,
            "request_counts": None,
            "created": _now(),
            "updated": _now(),
        }
        self.log.entries.append(entry)
        try:
            self.log.save()
        except DiskFull as exc:
            self.log.entries.remove(entry)
            part.discard(self.sink)
            self.sink.stop(str(exc))
            return
        if self._reserve(entry):
            await self._advance(entry)

    def _reserve(self, entry: dict[str, Any]) -> bool:
        """Reserve an entry's worst case on the ledger; refuse it whole when it does not fit."""
        n = entry["lines"]
        try:
            r = self.ledger.reserve(
                self.role,
                entry["model"],
                Price(**entry["price"]),
                n * entry["max_tokens_in"],
                n * entry["max_tokens_out"],
                key=entry["ledger_key"],
                extra={"lines": n},
            )
        except (BudgetExhausted, DiskFull) as exc:
            cause = (
                f"budget exhausted: batch {entry['name']} ({n} requests) was refused whole before upload, {exc}"
                if isinstance(exc, BudgetExhausted)
                else str(exc)
            )
            self._no_more = cause
            self._drop(entry, cause)
            self.sink.stop(cause)
            return False
        self._held[entry["name"]] = (r, set())
        return True

    def _drop(self, entry: dict[str, Any], why: str) -> None:
        """A batch that will never run: its lines are free for another try, its file goes."""
        self._release_slots(entry, to=0)
        (self.run_dir / entry["input"]).unlink(missing_ok=True)
        held = self._held.pop(entry["name"], None)
        if held is not None:
            self.ledger.settle_failed(held[0], None, "batch not run", why)
        self.log.update(entry, state="refused", refused=why)

    def _release_slots(self, entry: dict[str, Any], to: int = _HANDLED) -> None:
        slot = self._slot(entry)
        for cid in self._input_ids(entry):
            if self.sink.slot(cid) == slot:
                self.sink.set_slot(cid, to)

    async def _advance(self, entry: dict[str, Any]) -> None:
        """Upload the entry's file and create its batch, each only when it is not there
        yet (looked up first after a kill). A provider that refuses either (an HTTP
        error status) ran nothing: the reservation is released at $0."""
        provider = self._provider(entry)
        try:
            if entry["state"] == "prepared":
                file_id = (
                    await provider.find_file(entry["filename"], entry["bytes"]) if entry.get("upload_started") else None
                )
                if file_id is None:
                    self.log.update(entry, upload_started=True)
                    file_id = (await provider.upload(self.run_dir / entry["input"], entry["filename"])).id
                self.log.update(entry, state="uploaded", file_id=file_id)
            if entry["state"] == "uploaded":
                b = await provider.find_batch(entry["file_id"]) if entry.get("create_started") else None
                if b is None:
                    self.log.update(entry, create_started=True)
                    b = await provider.create(
                        entry["file_id"],
                        entry["endpoint"],
                        entry["completion_window"],
                        {"evalkit_run": self.run_dir.name[:512], "evalkit_batch": entry["name"]},
                    )
                self._note(entry, b, state="submitted", batch_id=b.id)
        except openai.APIStatusError as exc:
            if exc.status_code >= 500 or exc.status_code in (408, 409, 429):
                cause = f"batch {entry['name']}: {provider.base_url} did not take it ({_api_cause(exc)})"
            else:
                cause = f"batch {entry['name']} refused by {provider.base_url} ({_api_cause(exc)})"
                self._drop(entry, cause)
            self._no_more = cause
            self.sink.stop(cause)
        except openai.APIError as exc:  # no answer: it may have been taken; a resume looks it up first
            self._no_more = f"batch {entry['name']}: no answer from {provider.base_url} ({_api_cause(exc)})"
            self.sink.stop(self._no_more)

    def _note(self, entry: dict[str, Any], b: Any, **fields: Any) -> None:
        """Record what the provider says of a batch, when it says something new."""
        counts = b.request_counts.model_dump() if b.request_counts is not None else None
        errors = [e.model_dump() for e in (b.errors.data or [])] if b.errors is not None and b.errors.data else None
        seen = {
            "status": b.status,
            "request_counts": counts,
            "output_file_id": b.output_file_id,
            "error_file_id": b.error_file_id,
            **({"errors": errors[:20]} if errors else {}),
            **{k: getattr(b, k) for k in ("created_at", "completed_at", "expired_at", "cancelled_at", "failed_at")},
        }
        if fields or any(entry.get(k) != v for k, v in seen.items()):
            self.log.update(entry, **seen, **fields)

    # -- polling -------------------------------------------------------------------------

    async def wait(self) -> None:
        """Poll the open batches (each `poll_s`) and collect each as it ends, until none
        is open or nothing more can be done this session."""
        failures = 0
        while True:
            live = [e for e in self._open() if e["state"] == "submitted"]
            if not live or self.sink.halted():
                return
            for entry in live:
                provider = self._provider(entry)
                try:
                    b = await provider.retrieve(entry["batch_id"])
                except openai.APIStatusError as exc:
                    if exc.status_code < 500 and exc.status_code not in (408, 409, 429):
                        self.sink.stop(f"batch {entry['name']} ({entry['batch_id']}): {_api_cause(exc)}")
                        return
                    failures += 1
                    b = None
                except openai.APIError as exc:
                    failures += 1
                    b = None
                    if failures >= MAX_POLL_FAILURES:
                        self.sink.stop(
                            f"endpoint unreachable: {provider.base_url} (batch status: {_api_cause(exc)}); "
                            f"the batches stay open, {self.to_collect}"
                        )
                        return
                if b is None:
                    continue
                failures = 0
                self._note(entry, b)
                if b.status in TERMINAL:
                    await self._collect(entry, b)
                    if self.sink.halted():
                        return
                else:
                    self._progress(entry, b)
            if any(e["state"] == "submitted" for e in self._open()):
                await pause(self.options.poll_s, self.sink.halted)

    def _progress(self, entry: dict[str, Any], b: Any) -> None:
        rc = b.request_counts
        done = (rc.completed + rc.failed) if rc is not None else 0
        self.sink.tick(done - self._shown.get(entry["name"], 0))
        self._shown[entry["name"]] = done

    async def cancel_all(self, why: str) -> None:
        """Ask the provider to cancel every open batch of this role (best effort)."""
        for entry in self.log.open(self.role):
            if entry["state"] == "submitted" and entry.get("status") not in TERMINAL:
                try:
                    self._note(entry, await self._provider(entry).cancel(entry["batch_id"]), cancelled_because=why)
                except openai.APIError:
                    pass

    # -- collecting ----------------------------------------------------------------------

    async def _collect(self, entry: dict[str, Any], b: Any) -> None:
        """Map an ended batch's result lines back by custom id, settle each on the
        ledger, close the batch's reservation, and mark it collected."""
        name = entry["name"]
        r, charged = self._held[name]
        self.sink.tick(-self._shown.pop(name, 0))  # the lines now tick one by one as they are recorded
        slot = self._slot(entry)
        out: Counter[str] = Counter()
        end = next((v for v in (b.completed_at, b.expired_at, b.cancelled_at, b.failed_at) if v), None)
        latency_ms = max(0.0, float(end or time.time()) - float(b.created_at or time.time())) * 1000.0
        provider = self._provider(entry)
        ceiling: list[str] = []
        try:
            for file_id in (b.output_file_id, b.error_file_id):
                if not file_id:
                    continue
                async for raw in provider.lines(file_id, self.line_limit):
                    out["lines"] += 1
                    self._line(entry, r, charged, slot, raw, latency_ms, out, ceiling)
                    # A full disk, a dead server: stop; a resume collects again, charging nothing twice.
                    if out["lines"] % 256 == 0 and self.sink.halted():
                        return
            if self.sink.halted():
                return
        except openai.APIError as exc:
            self.sink.stop(f"batch {name}: its results could not be read ({_api_cause(exc)}); {self.to_collect}")
            return
        # Lines with no result: the provider lost them, or they never ran.
        missing = [cid for cid in self._input_ids(entry) if self.sink.slot(cid) == slot]
        rc = b.request_counts
        claimed = (rc.completed + rc.failed) if rc is not None else 0
        billable = 0 if b.status == "failed" else max(0, min(len(missing), claimed - out["ran"]))
        for cid in missing:
            self.sink.set_slot(cid, _HANDLED)
            if b.status == "failed":
                continue  # validation failed: not run, like a key never dispatched
            if billable and out["missing_billed"] < billable:
                out["missing_billed"] += 1
                why = "counted as processed by the provider but in neither result file: charged at its worst case"
            else:
                why = "not run ($0)"
            out["missing"] += 1
            self.sink.fail(cid, f"batch {name} ({b.status}) has no result for this request: {why}", 0)
        cost_left = Usage(billable * self.tin, billable * self.tout) if billable else None
        self.ledger.settle_failed(r, cost_left, f"batch {b.status}", f"{len(missing)} line(s) without a result")
        del self._held[name]
        if b.status == "failed":
            first = (entry.get("errors") or [{}])[0]
            self.sink.stop(
                f"batch {name} ({b.id}) failed validation: {_short(first.get('message') or 'no reason given')}"
                f"{' (line ' + str(first['line']) + ')' if first.get('line') else ''}; nothing ran ($0)"
            )
        elif b.status in ("expired", "cancelled"):
            self.sink.stop(
                f"batch {name} {b.status}: {out['not_run'] + out['missing']} of {entry['lines']} request(s) did "
                f"not run ($0); {self.to_submit}"
            )
        if ceiling:
            self.sink.stop("ceiling breached")
            await self.cancel_all(ceiling[0])
        self._release_slots(entry)
        (self.run_dir / entry["input"]).unlink(missing_ok=True)
        self.log.update(entry, state="collected", outcome=dict(out))

    def _line(
        self,
        entry: dict[str, Any],
        r: Reservation,
        charged: set[str],
        slot: int,
        raw: bytes | None,
        latency_ms: float,
        out: Counter[str],
        ceiling: list[str],
    ) -> None:
        """One result line: an answer, an error the provider returned, or a request
        that never ran; never a line of another batch or a second result for a line."""
        if raw is None:
            out["too_long"] += 1  # its line stays without a result (charged as such)
            return
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            out["unreadable"] += 1
            return
        raw_id = obj.get("custom_id") if isinstance(obj, dict) else None
        cid: str = raw_id if isinstance(raw_id, str) else ""
        got = self.sink.slot(cid) if cid else None
        if got == _EARLIER:
            out["recorded_before"] += 1  # collected by a session a kill cut short
            return
        if got != slot:
            out["unexpected"] += 1  # not this batch's, or its second result
            return
        self.sink.set_slot(cid, _HANDLED)
        again = cid in charged  # charged by a killed collection: record it, charge it no more

        def charge(usage: Usage, untrusted: str | None = None, reason: str | None = None) -> float:
            if again:
                return r.price.cost(usage.prompt_tokens, usage.completion_tokens)
            return self.ledger.charge(
                r, usage, tokens_in=self.tin, tokens_out=self.tout, line=cid, untrusted=untrusted, reason=reason
            )

        resp, err = obj.get("response"), obj.get("error")
        status = resp.get("status_code") if isinstance(resp, dict) else None
        where = f"batch {entry['name']} ({entry.get('batch_id')})"
        if status == 200:
            out["ran"] += 1
            try:
                parsed = self.client.parse_body(resp.get("body"), chat=self.sink.chat)
            except (MalformedResponse, ValueError, TypeError) as exc:
                charge(Usage(self.tin, self.tout), reason="malformed response")
                out["malformed"] += 1
                self.sink.fail(cid, f"malformed response: {_short(exc)} ({where})", 1)
                return
            rhash, index = self.sink.request(cid)
            line_r = dataclasses.replace(r, tokens_in=self.tin, tokens_out=self.tout, key=cid)
            try:
                c = self.client.settle_answer(line_r, rhash, index, cid, parsed, latency_ms, charge)
            except CeilingBreached as exc:
                out["ceiling_breached"] += 1
                ceiling.append(str(exc))
                self.sink.fail(cid, str(exc), 1)
                return
            except UnitCallError as exc:  # untrusted usage: charged at the worst case
                out["untrusted"] += 1
                self.sink.fail(cid, f"{type(exc).__name__}: {exc} ({where})", 1)
                return
            out["answered"] += 1
            self.sink.answer(cid, c)
            return
        if isinstance(status, int) and not isinstance(status, bool):  # an HTTP error for this request: $0
            out["ran"] += 1
            out["failed"] += 1
            body = resp.get("body") if isinstance(resp, dict) else None
            error = body.get("error") if isinstance(body, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            charge(Usage(0, 0), reason=f"HTTP {status}")
            self.sink.fail(cid, f"HTTP {status}: {_short(message or 'no message')} ({where}; not retried)", 1)
            return
        code = err.get("code") if isinstance(err, dict) else None
        message = err.get("message") if isinstance(err, dict) else None
        if code in NOT_RUN_CODES:
            out["not_run"] += 1
            charge(Usage(0, 0), reason=str(code))
            self.sink.fail(cid, f"{code}: {_short(message or 'not run')} ($0; {where})", 0)
            return
        # Anything else may have been processed: the worst case, as online.
        out["ran"] += 1
        out["malformed"] += 1
        charge(Usage(self.tin, self.tout), reason="malformed result line")
        self.sink.fail(cid, f"malformed result line ({_short(code or 'no response')}; {where})", 1)


@dataclass
class _Part:
    """A batch input file being written (`batches/<name>.jsonl`), hashed as it goes."""

    name: str
    path: Path
    rel: str
    slot: int
    lines: int = 0
    size: int = 0
    sha: str = ""

    def __post_init__(self) -> None:
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed by close() or discard()
        self._hash = hashlib.sha256()

    def write(self, line: bytes) -> None:
        self._fh.write(line)
        self._hash.update(line)
        self.lines += 1
        self.size += len(line)

    def close(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())  # batches.json names it next: it must be whole on disk first
        self._fh.close()
        self.sha = self._hash.hexdigest()

    def discard(self, sink: _Sink) -> None:
        """Forget a part that was never recorded: its lines go back to no batch."""
        if not self._fh.closed:
            self._fh.close()
        with open(self.path, "rb") as fh:
            for raw in fh:
                cid = json.loads(raw).get("custom_id")
                if isinstance(cid, str) and sink.slot(cid) == self.slot:
                    sink.set_slot(cid, 0)
        self.path.unlink(missing_ok=True)


async def _aiter(items: Any) -> AsyncIterator[Any]:
    if hasattr(items, "__aiter__"):
        async for x in items:
            yield x
    else:
        for x in items:
            yield x


# --------------------------------------------------------------------- the generator


@dataclass
class _Group:
    """The arms of a run whose calls go through one client (one model, endpoint, key,
    price, batch price and output ceiling: `runner._client_identity`): one batch per
    group, on the run's one ledger and `batches.json` (`log`, `slots`: shared by every
    group). A batch written before batches were grouped names no arms: it is the first
    group's (a run could then batch only one group)."""

    arms: tuple[str, ...]
    log: BatchLog
    slots: dict[str, int]
    first: bool = False

    def owns(self, entry: dict[str, Any]) -> bool:
        arms = entry.get("arms")
        return bool(set(arms) & set(self.arms)) if isinstance(arms, list) and arms else self.first


@dataclass
class _TwinLines:
    """The batch lines of twin arms (`engine.twins`: arms that send the same requests):
    each request goes out in one line; a twin's key whose request is already another
    key's line waits (`waiting`) and replays that line's answer from the response cache
    once its batch is collected (`_replay_waiting`). `sent` holds the (endpoint, model,
    request hash, index) of each twin's line, an earlier session's included (`note`)."""

    engine: Any
    sink: _RunSink
    twins: set[str]
    sent: set[tuple[Any, ...]] = dataclasses.field(default_factory=set)
    waiting: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)

    @staticmethod
    def ident(client: ModelClient, rhash: str, index: int) -> tuple[Any, ...]:
        """What makes two lines one request: the response cache's key."""
        return client.cache_endpoint, client.endpoint.model, rhash, index

    def note(self, cid: str, body: Any) -> None:
        """Note a line of a batch an earlier session left open (`_RunSink.twin_line`)."""
        key = self.sink.key(cid)
        if key is not None and key[1] in self.twins and isinstance(body, dict):
            self.sent.add(self.ident(self.engine.client_of(key[1]), request_hash(body), key[2]))

    def waits(self, client: ModelClient, rhash: str, key: tuple[str, str, int]) -> bool:
        """Whether `key` waits for its twin's line, which carries its very request;
        otherwise a twin's key notes its own line as sent."""
        if key[1] not in self.twins:
            return False
        same = self.ident(client, rhash, key[2])
        if same in self.sent:
            self.waiting.append(key)
            return True
        self.sent.add(same)
        return False


def _group_jobs(
    engine: Any, sink: _RunSink, log: BatchLog, options: BatchOptions | None, base_url: str | None
) -> tuple[list[tuple[_Batches, ModelClient, set[str]]], dict[int, Price]]:
    """One batch job per group of arms whose calls go through one client (`engine.clients`:
    model, endpoint, price, batch price), sent to its endpoint with its model at its batch
    price (checked with `options`), with the arms it holds; and each client's batch price
    (what its cache hits avoid), by the client's id."""
    slots = {e["name"]: i + 1 for i, e in enumerate(log.entries)}
    by_client: dict[int, list[str]] = {}
    for arm in engine.arms:
        by_client.setdefault(id(engine.client_of(arm)), []).append(arm)
    jobs: list[tuple[_Batches, ModelClient, set[str]]] = []
    prices: dict[int, Price] = {}
    for n, names in enumerate(by_client.values()):
        config = engine.arm_configs[names[0]]
        client = engine.client_of(names[0])
        price = check_ready(config) if options is not None else (config.batch_price or config.price)
        prices[id(client)] = price
        group = _Group(tuple(names), log, slots, first=n == 0)
        url = client.base_url or base_url
        job = _Batches(engine.folder.path, "generator", client, price, options or BatchOptions(), sink, url, group)
        jobs.append((job, client, set(names)))
    return jobs, prices


async def _batch_lines(
    engine: Any, sink: _RunSink, client: ModelClient, arms: set[str], price: Price, twins: _TwinLines
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The lines (custom id, request body) of one group's batch: each of its arms' keys
    still to be made (neither recorded, nor in an open batch, nor collected now), less
    those the response cache answers (recorded now, at `price`), those too long for the
    model (errored) and twins' keys whose request another line carries (`_TwinLines`)."""
    for key in sink.pending():
        if key[1] not in arms:
            continue
        cid = f"{key[0]}/{key[1]}/{key[2]}"
        body = client.request_body(**engine.call_args(key))
        rhash = request_hash(body)
        try:
            await client.check_input(body, cid)
            hit = client.replay(rhash, key[2], cid, price=price)
        except InputTooLong as exc:
            engine.error(key, f"{type(exc).__name__}: {exc}", 0)
            continue
        if hit is not None:
            engine.record(key, hit)
            continue
        if twins.waits(client, rhash, key):
            continue
        yield cid, body


def _replay_waiting(engine: Any, sink: _RunSink, twins: _TwinLines, prices: dict[int, Price]) -> None:
    """Record each waiting twin's key from the response cache, where the answer of its
    twin's line now is (when that line ran); one left unanswered stays pending."""
    for key in twins.waiting:
        cid = f"{key[0]}/{key[1]}/{key[2]}"
        if sink.slot(cid) != 0 or sink.halted():
            continue
        client = engine.client_of(key[1])
        body = client.request_body(**engine.call_args(key))
        hit = client.replay(request_hash(body), key[2], cid, price=prices[id(client)])
        if hit is not None:
            engine.record(key, hit)
            sink.set_slot(cid, _HANDLED)


def _stop_if_open(engine: Any, log: BatchLog, options: BatchOptions | None) -> None:
    """Stop the run (INCOMPLETE) while batches are still open at the provider, saying
    how to collect them."""
    still = len(log.open("generator"))
    if still and options is not None and not options.wait:
        engine.stop(f"{still} batch(es) submitted and not collected yet (--no-wait): --resume collects them")
    elif still:
        engine.stop(
            f"{still} batch(es) still open at the provider: `evalkit batch status` shows them, "
            "`evalkit run --resume` collects them"
        )


async def run_keys(
    engine: Any,
    pending: Iterator[tuple[str, str, int]],
    k: int,
    options: BatchOptions | None,
    base_url: str | None,
) -> Iterator[tuple[str, str, int]]:
    """The batch part of a run (`runner._run_pending`): collect the batches an earlier
    session left open, then, with `options` (`--batch`), submit every key of `pending`
    that the response cache cannot answer as batch lines and wait for them; returns the
    keys still to be made online (none with `options`).

    One batch per endpoint: the arms are grouped by the client their calls go through
    (`engine.clients`: model, endpoint, price, batch price), each group's lines go to
    batches of its own, sent to its endpoint with its model, reserved at its own worst
    case (`batch_price`) on the one ledger (`_group_jobs`). Arms that send the same
    requests (`engine.twins`) send each once: the twin's key replays the answer from the
    response cache once the batch holding it is collected (`_TwinLines`)."""
    sink = _RunSink(engine, k)
    sink.free(pending)
    log = BatchLog(engine.folder.path)
    jobs, prices = _group_jobs(engine, sink, log, options, base_url)
    twins = _TwinLines(engine, sink, set(getattr(engine, "twins", ())))
    sink.twin_line = twins.note
    try:
        for job, _, _ in jobs:
            await job.resume()
        for job, client, arms in jobs if options is not None else ():
            if sink.halted():
                break
            await job.submit(_batch_lines(engine, sink, client, arms, prices[id(client)], twins))
        if options is None or options.wait:
            for job, _, _ in jobs:
                await job.wait()
        _replay_waiting(engine, sink, twins, prices)
        _stop_if_open(engine, log, options)
    finally:
        for job, _, _ in jobs:
            await job.aclose()
    if options is not None:
        return iter(())
    return sink.pending()


# ------------------------------------------------------------------------- the judge


class _Deferred(CallStopped):
    """A judge call recorded for a batch: its answer comes later."""


class _JudgeSink(_Sink):
    chat = True

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.hashes: dict[str, str] = {}
        self.answers: dict[str, Completion | str] = {}  # key -> its answer, or why it has none
        self.causes: list[str] = []
        self.hard: list[str] = []
        self._slots = array("I")
        self.watch: Callable[[], str | None] | None = None
        self.bar: Any = None

    def add(self, custom_id: str, rhash: str | None = None) -> None:
        if custom_id not in self.index:
            self.index[custom_id] = len(self._slots)
            self._slots.append(0)
        if rhash is not None:
            self.hashes[custom_id] = rhash

    def learn(self, custom_id: str, body: dict[str, Any]) -> None:
        self.add(custom_id, request_hash(body) if isinstance(body, dict) else None)

    def position(self, custom_id: str) -> int | None:
        return self.index.get(custom_id)

    def request(self, custom_id: str) -> tuple[str, int]:
        return self.hashes.get(custom_id, ""), 0

    def tick(self, n: int) -> None:
        if self.bar is not None and n:
            self.bar.n = max(0, self.bar.n + n)
            self.bar.refresh()

    def answer(self, custom_id: str, c: Completion) -> None:
        self.answers[custom_id] = c

    def fail(self, custom_id: str, message: str, attempts: int) -> None:
        self.answers[custom_id] = message

    def stop(self, cause: str) -> None:
        if cause not in self.causes:
            self.causes.append(cause)
        if not cause.startswith(("batch ", "budget exhausted", "ceiling breached")) and cause not in self.hard:
            self.hard.append(cause)

    def halted(self) -> str | None:
        if not self.hard and self.watch is not None:
            reason = self.watch()
            if reason:
                self.hard.append(reason.strip().partition("\n")[0])
        return self.hard[0] if self.hard else None


class _JudgeCalls:
    """A stand-in for the judge's `ModelClient` in `evalkit.checking.judge`'s calls: `record`
    notes each request for a batch, `replay` answers from the collected results (and
    asks the real client for the rest: the cache, or online when the run is not in
    batch mode)."""

    def __init__(self, owner: JudgeBatches, mode: str) -> None:
        self._owner = owner
        self._mode = mode
        self.endpoint = owner.client.endpoint

    async def complete(
        self, *, messages: list[dict[str, Any]], key: str = "", sample_index: int = 0, **kw: Any
    ) -> Completion:
        o = self._owner
        got = o.sink.answers.get(key)
        if isinstance(got, Completion):
            return got
        if isinstance(got, str):
            raise UnitCallError(f"{key}: {got}")
        client = o.client
        body = client.request_body(messages=messages, **{k: v for k, v in kw.items() if k != "should_stop"})
        rhash = request_hash(body)
        cached = client.cache is not None and client.cache.has(
            client.endpoint.model, rhash, sample_index, endpoint=client.cache_endpoint
        )
        if self._mode == "record":
            try:
                await client.check_input(body, key)
            except InputTooLong as exc:  # never batched: the replay pass raises it again, the real reason
                o.unbatched[key] = exc
                raise
            if cached:
                raise _Deferred(f"{key}: answered by the cache")
            o.sink.add(key, rhash)
            if o.sink.slot(key) == 0 and key not in o.queued:
                o.queued.add(key)
                o.todo.append((key, body))
            raise _Deferred(f"{key}: recorded for a batch")
        if key in o.unbatched:
            raise o.unbatched[key]
        if o.batch_mode and not cached:
            reason = o.sink.causes[0] if o.sink.causes else "it was not in a batch"
            raise CallStopped(f"{key}: not judged in a batch ({reason})")
        return await client.complete(messages=messages, key=key, sample_index=sample_index, **kw)


class JudgeBatches:
    """The judge's calls of a grading pass through the Batch API (`grade_run(batch=...)`,
    `evalkit grade RUN --batch`), on the run's ledger at `judge_batch_price`.

    `run(ask)` takes a function that makes every judge call of the pass with the client
    it is given (`grading._judge_all`) and calls it twice: first with a recorder (each
    request becomes a batch line; the cache's answers are left to the second pass), then,
    once the batches are collected, with a replayer that answers from their results.
    Judge batches a killed grading left open are collected first, with or without
    `--batch`; without it, the calls they do not answer go online as usual."""

    def __init__(
        self,
        client: ModelClient,
        run_dir: str | Path,
        config: Config,
        options: BatchOptions | None,
        watch: Callable[[], str | None] | None = None,
    ) -> None:
        self.client = client
        self.run_dir = Path(run_dir)
        self.batch_mode = options is not None
        self.wait = options is None or options.wait
        price = (
            check_ready(config, "judge") if options is not None else (config.judge_batch_price or config.judge_price)
        )
        self.sink = _JudgeSink()
        self.sink.watch = watch
        self.todo: list[tuple[str, dict[str, Any]]] = []
        self.queued: set[str] = set()
        self.unbatched: dict[str, InputTooLong] = {}  # the keys refused before a batch, and why
        self._job = _Batches(
            self.run_dir, "judge", client, price, options or BatchOptions(), self.sink, client.base_url
        )

    @property
    def causes(self) -> list[str]:
        """Why some judge calls have no answer from a batch (each once, in order)."""
        return list(self.sink.causes)

    async def take_over(self) -> None:
        """Adopt the judge batches an earlier grading left open (their reservations move
        from spent to reserved in this session) and finish submitting any a kill cut
        short; `run` does it when it has not been done."""
        if not self._taken:
            self._taken = True
            await self._job.resume()

    _taken = False

    async def run(self, ask: Callable[[Any], Awaitable[Any]]) -> Any:
        from tqdm import tqdm  # lazy: a progress bar only while batches are polled

        job = self._job
        try:
            await self.take_over()
            # The first pass learns every request's hash (the cache stores answers by it)
            # and, in batch mode, which requests to submit.
            await ask(_JudgeCalls(self, "record"))
            if self.batch_mode and not self.sink.halted():
                open_lines = sum(e["lines"] for e in job.log.open("judge"))
                self.sink.bar = tqdm(
                    total=open_lines + len(self.todo), unit="call", desc="judge batches", file=sys.stderr, disable=None
                )
                await job.submit(self.todo)
            self.todo = []
            if self.wait:
                await job.wait()
            still = job.log.open("judge")
            if still:
                self.sink.stop(f"{len(still)} judge batch(es) still open at the provider: grade again to collect them")
        finally:
            await job.aclose()
            if self.sink.bar is not None:
                self.sink.bar.close()
        return await ask(_JudgeCalls(self, "replay"))


# -------------------------------------------------------------- status and cancelling


def batch_status(run_dir: str | Path, *, ask: bool = True) -> list[dict[str, Any]]:
    """Every batch of a run folder as `batches.json` records it, with what the provider
    says now of those still open (`ask=False`: the record only). Reads the run folder
    without its lock: it writes nothing."""
    log = BatchLog(_run_folder(run_dir))
    return asyncio.run(_ask_open(log, None)) if ask else [dict(e) for e in log.entries]


def batch_cancel(run_dir: str | Path) -> list[dict[str, Any]]:
    """Ask the provider to cancel every open batch of a run folder; returns each batch
    as the provider then describes it. Their partial results are collected (and their
    reservations closed) by the next `evalkit run --resume` (or `grade`, for the
    judge's). Writes nothing: the process collecting the batches, if any, sees them end."""
    log = BatchLog(_run_folder(run_dir))
    return asyncio.run(_ask_open(log, "cancel"))


def _run_folder(run_dir: str | Path) -> Path:
    p = Path(run_dir)
    if not (p / "config.json").is_file():
        raise InputError("not a run folder (no config.json)", p)
    return p


async def _ask_open(log: BatchLog, action: str | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    providers: dict[str, Provider] = {}
    try:
        for e in log.entries:
            row = {k: e.get(k) for k in ("name", "role", "state", "batch_id", "status", "request_counts", "lines")}
            row["reserved_usd"] = e.get("reserved_usd")
            if e["state"] == "submitted" and e.get("batch_id"):
                url = e["base_url"]
                try:
                    if url not in providers:
                        providers[url] = _provider_for(e, 60.0)
                    p = providers[url]
                    b = await (
                        p.cancel(e["batch_id"])
                        if action == "cancel" and e.get("status") not in TERMINAL
                        else p.retrieve(e["batch_id"])
                    )
                    rc = b.request_counts
                    row.update(
                        status=b.status,
                        request_counts=rc.model_dump() if rc is not None else None,
                        live=True,
                    )
                except (openai.APIError, InputError) as exc:
                    row["error"] = _api_cause(exc) if isinstance(exc, openai.APIError) else str(exc)
            rows.append(row)
    finally:
        for p in providers.values():
            await p.aclose()
    return rows


def describe(rows: list[dict[str, Any]]) -> str:
    """`batch_status` rows as a table for the terminal."""
    if not rows:
        return "no batches in this run folder\n"
    lines = [
        "| batch | role | state | provider status | done / total | reserved | batch id |",
        "|---|---|---|---|---:|---:|---|",
    ]
    for r in rows:
        rc = r.get("request_counts") or {}
        done = f"{rc.get('completed', 0) + rc.get('failed', 0)} / {rc.get('total') or r.get('lines') or 0}"
        status = r.get("status") or "-"
        if r.get("error"):
            status += f" (not asked: {r['error']})"
        reserved = f"${r['reserved_usd']:.6f}" if isinstance(r.get("reserved_usd"), (int, float)) else "-"
        bid = r.get("batch_id") or "-"
        lines.append(f"| {r['name']} | {r['role']} | {r['state']} | {status} | {done} | {reserved} | {bid} |")
    return "".join(printable(line) + "\n" for line in lines)


__all__ = [
    "BATCHES",
    "BatchLog",
    "BatchOptions",
    "JudgeBatches",
    "Provider",
    "batch_cancel",
    "batch_status",
    "check_ready",
    "describe",
    "has_open",
    "run_keys",
]
