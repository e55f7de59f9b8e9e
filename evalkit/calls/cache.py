"""Response cache: an identical request with the same sample index replays at $0.

`InFlight` holds a twin arm's call while its first arm's identical call is in flight, so
the request goes out once and the twin replays its answer from here.

Keyed by (model, request body hash, sample index), and by the endpoint that answered
when the caller names one (`endpoint=`, a normalized base URL, `endpoints.endpoint_key`):
repeats of one request stay independent samples, while re-running the same suite
against the same server replays them, and another server serving a model of the same
name never gets its answers. The generator's cache is keyed by endpoint (the runner
passes it through `ModelClient(cache_endpoint=...)`); a lookup without one (the judge's
cache, for now) reads and writes the entries stored without an endpoint, which is what
every entry written before evalkit keyed by endpoint is. So an older cache file stays
readable for those, while the generator treats its old entries as misses: nothing says
which server gave them. A cache opened with a `scope` (the judge's: its endpoint and judge
files, `judge.cache_scope`) keys its entries by (model and scope, ...) too, so an answer
is replayed only to a caller with the same scope. SQLite (standard
library) in WAL mode with a busy timeout, so several processes can read and write one
cache file at once; the first answer stored for a key wins. Any text an endpoint sends
is stored losslessly (`evalkit.foundations._text.storable_json`).

A cache that cannot write (a full disk: SQLite's SQLITE_FULL, or any other SQLite error,
a lock held past the busy timeout included) raises nothing: the answers it held are in
`results.jsonl` or were never finished, so it sets `write_error` (a `DiskFull` for a
full disk), drops its buffer and stores nothing more; the runner stops the run on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from evalkit.foundations._text import storable_json
from evalkit.foundations.errors import DiskFull, EvalkitError

_COLUMNS = """
    model TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    sample_index INTEGER NOT NULL,
    response TEXT NOT NULL,
    cost_usd REAL NOT NULL,
    created REAL NOT NULL,"""
_SCHEMA = f"CREATE TABLE IF NOT EXISTS responses ({_COLUMNS} PRIMARY KEY (model, request_hash, sample_index))"
# Answers keyed by the endpoint that gave them as well (a table of its own: a primary key
# cannot be changed in place, and the table above stays as older versions wrote it).
_ENDPOINT_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS endpoint_responses (endpoint TEXT NOT NULL,{_COLUMNS} "
    "PRIMARY KEY (endpoint, model, request_hash, sample_index))"
)
_Key = tuple[str | None, str, str, int]  # (endpoint or None, model, request hash, sample index)


class ResponseCache:
    """A response cache file. `get` returns the stored response dict or None; `put`
    stores one (ignored when the key is already there).

    Puts are buffered and written in one transaction per `batch` entries (and on
    `flush`/`close`): a commit per response would cost more than the rest of a sample's
    bookkeeping. A killed process loses at most the unflushed entries, whose samples are
    in `results.jsonl` already or were never finished. Where the cache is the only
    record of a paid answer (the judge's), `batch=1` commits each one in `put`, before
    the answer is used.
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0, batch: int = 64, scope: str = "") -> None:
        self.path = Path(path)
        self.scope = scope
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by this process's threads, guarded by a lock; other
        # processes are serialised by SQLite's own file locks (busy timeout).
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(
                str(self.path), timeout=busy_timeout_s, check_same_thread=False, isolation_level=None
            )
            with self._lock:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
                self._conn.execute(_SCHEMA)
                self._conn.execute(_ENDPOINT_SCHEMA)
        except sqlite3.Error as exc:  # a full disk is "disk full: <path>", resumable once there is room
            raise self._sqlite_error(exc) from None
        self.hits = 0
        self.misses = 0
        self._batch = max(1, int(batch))
        self._pending: dict[_Key, tuple[str, float]] = {}
        self.write_error: EvalkitError | None = None

    def _sqlite_error(self, exc: sqlite3.Error) -> EvalkitError:
        """The sentence for a SQLite failure on this cache: `DiskFull` when it had no room."""
        full = getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(exc)
        if full:
            return DiskFull(self.path, str(exc))
        return EvalkitError(f"response cache not usable: {self.path} ({exc})")

    def _model_key(self, model: str) -> str:
        return f"{model} @{self.scope}" if self.scope else model

    def get(
        self, model: str, request_hash: str, sample_index: int, *, endpoint: str | None = None
    ) -> dict[str, Any] | None:
        """The response stored for this key (of `endpoint`, or of no endpoint), or None."""
        model = self._model_key(model)
        try:
            row = self._get_row(model, request_hash, sample_index, endpoint)
        except sqlite3.Error as exc:
            raise self._sqlite_error(exc) from None
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        resp: dict[str, Any] = json.loads(row[0])
        resp["cost_usd"] = row[1]
        return resp

    def _get_row(self, model: str, request_hash: str, sample_index: int, endpoint: str | None) -> Any:
        with self._lock:
            row = self._pending.get((endpoint, model, request_hash, int(sample_index)))
            if row is None and endpoint is None:
                row = self._conn.execute(
                    "SELECT response, cost_usd FROM responses WHERE model=? AND request_hash=? AND sample_index=?",
                    (model, request_hash, int(sample_index)),
                ).fetchone()
            elif row is None:
                row = self._conn.execute(
                    "SELECT response, cost_usd FROM endpoint_responses "
                    "WHERE endpoint=? AND model=? AND request_hash=? AND sample_index=?",
                    (endpoint, model, request_hash, int(sample_index)),
                ).fetchone()
        return row

    def has(self, model: str, request_hash: str, sample_index: int, *, endpoint: str | None = None) -> bool:
        """Whether a response is stored for the key (of `endpoint`, or of no endpoint);
        counts neither a hit nor a miss."""
        model = self._model_key(model)
        with self._lock:
            if (endpoint, model, request_hash, int(sample_index)) in self._pending:
                return True
            if endpoint is None:
                row = self._conn.execute(
                    "SELECT 1 FROM responses WHERE model=? AND request_hash=? AND sample_index=?",
                    (model, request_hash, int(sample_index)),
                ).fetchone()
            else:
                row = self._conn.execute(
                    "SELECT 1 FROM endpoint_responses"
                    " WHERE endpoint=? AND model=? AND request_hash=? AND sample_index=?",
                    (endpoint, model, request_hash, int(sample_index)),
                ).fetchone()
        return row is not None

    def put(
        self,
        model: str,
        request_hash: str,
        sample_index: int,
        response: dict[str, Any],
        cost_usd: float,
        *,
        endpoint: str | None = None,
    ) -> None:
        """Store a response for this key (of `endpoint`, or of no endpoint); the first
        stored wins."""
        text = storable_json(response, sort_keys=True)
        model = self._model_key(model)
        with self._lock:
            if self.write_error is not None:
                return
            self._pending.setdefault((endpoint, model, request_hash, int(sample_index)), (text, float(cost_usd)))
            if len(self._pending) >= self._batch:
                self._flush_locked()

    def flush(self) -> None:
        """Write buffered puts now (one transaction)."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._pending:
            return
        now = time.time()
        items = self._pending.items()
        rows = [(m, h, i, text, cost, now) for (e, m, h, i), (text, cost) in items if e is None]
        keyed = [(e, m, h, i, text, cost, now) for (e, m, h, i), (text, cost) in items if e is not None]
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(
                    "INSERT OR IGNORE INTO responses (model, request_hash, sample_index, response, cost_usd, created) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    rows,
                )
                self._conn.executemany(
                    "INSERT OR IGNORE INTO endpoint_responses "
                    "(endpoint, model, request_hash, sample_index, response, cost_usd, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    keyed,
                )
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:  # SQLite rolls back by itself on SQLITE_FULL
                    self._conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:  # also a lock held past the busy timeout: never lose the answer in hand
            full = getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL"
            self.write_error = (
                DiskFull(self.path, str(exc))
                if full
                else EvalkitError(f"response cache not writable: {self.path} ({exc})")
            )
        self._pending.clear()

    def __len__(self) -> int:
        with self._lock:
            self._flush_locked()
            return sum(
                int(self._conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
                for table in ("responses", "endpoint_responses")
            )

    def close(self) -> None:
        with self._lock:
            try:
                self._flush_locked()
            finally:
                self._conn.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InFlight:
    """One call per identity at a time: a twin arm's call waits while its first arm's
    identical call (endpoint, model, request, ordinal, sample, index) is in flight, then
    replays its answer from the cache. The registry every sample of a run shares."""

    def __init__(self) -> None:
        self._busy: dict[tuple[Any, ...], asyncio.Event] = {}

    @contextlib.asynccontextmanager
    async def hold(self, ident: tuple[Any, ...]) -> AsyncIterator[None]:
        """Wait while a call with identity `ident` is in flight, then hold it."""
        while (busy := self._busy.get(ident)) is not None:
            await busy.wait()
        done = self._busy[ident] = asyncio.Event()
        try:
            yield
        finally:
            del self._busy[ident]
            done.set()
