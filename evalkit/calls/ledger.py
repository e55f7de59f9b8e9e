"""The cost ledger: one for generator and judge calls, reserve before, settle after.

Why by hand: no library offers a reservation ledger with a hard cap. The rule is
simple and must be exact: before a paid call, reserve its worst case (input and output
ceilings at the model's price) under one lock, and refuse when committed + reserved
would pass the cap; after the call, settle with the usage the response reports. A
response that reports more than its reservation means a ceiling did not reach the API,
and the run stops. Every change is appended to `ledger.jsonl` and flushed.

Reported usage is untrusted data: a count that is not a non-negative integer (negative,
fractional, NaN, a string) never lowers the spend. `settle_reported` settles such a call
at its full reservation (or more, when a fractional count rounded up passes it) and
says why, so the committed total only ever grows; `untrusted` counts such settles, in
every session of the file. So are counts below what the text could carry
(`implausible_usage`, `usage_floor`).

What a failed call costs (`settle_failed`): an attempt that provably never reached the
server (`release_unsent`: a refused connection, a failed DNS lookup, a connect timeout,
a request that could not be written) is released at $0 with reason `"not sent"` and
its cause; anything that may have been processed stays charged as the client decides.

A provider batch (`evalkit.running.batch`) is one reservation for all its lines (`reserve` with
`extra={"lines": n}`, key ``batch/<name>``), reserved before the batch is uploaded;
each result line is settled against it with `charge` (its cost committed, one line's
worst case freed), and whatever is left is closed with `settle_failed` once the batch
has ended. A batch outlives a process: `resume` keeps every reservation an earlier
session left open (`orphan`), and `adopt` moves one into this session (an `adopt`
event), so the process that collects a batch settles the reservation the one that
submitted it made, and the cap holds across both.

A full disk never loses money: a `reserve` whose line cannot be written is undone and
raises `DiskFull` (the call is not sent); a settle whose line cannot be written keeps
the reservation's line open on disk, which a resume counts as spent at its full
amount, and every later `reserve` raises `DiskFull` (`disk_full` says why).

A cap that waits for money in flight (`reserve_waiting`, which every caller of
`ModelClient.complete` inherits: the runner, the agents' proxy and the judge): a
reservation that does not fit while other reservations are open waits until one of
them settles, releases or is charged (each close wakes every waiter, event-based, no
polling) and is tried again; it is refused ("budget exhausted") only when nothing is
in flight and it still does not fit, since then nothing can ever free room. A cap of
a few worst-case calls is spent one call at a time instead of abandoned at the first
refusal. `waits` counts the reservations that waited.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.foundations._io import iter_jsonl
from evalkit.foundations.errors import BudgetExhausted, CeilingBreached, DiskFull, InputError
from evalkit.foundations.records import Price, Usage
from evalkit.runfolder.runs import AppendLog


@dataclass(frozen=True)
class Reservation:
    """A held worst-case amount for one call; settle or release it exactly once."""

    id: int
    role: str  # "generator" | "judge"
    model: str
    price: Price
    tokens_in: int
    tokens_out: int
    amount_usd: float
    key: str = ""  # e.g. "case/arm/index", for the ledger file


class Ledger:
    """Reserve/settle accounting under one lock, persisted to `path` as JSON lines.

    `committed_usd` is what settled calls cost; `reserved_usd` what calls in flight may
    still cost. The invariant: committed + reserved <= cap at every moment.
    """

    def __init__(self, cap_usd: float, path: str | Path | None = None, *, committed_usd: float = 0.0) -> None:
        if not cap_usd or cap_usd <= 0:
            raise InputError(f"cost_cap_usd must be positive, got {cap_usd!r}")
        self.cap_usd = float(cap_usd)
        self.committed_usd = float(committed_usd)
        self.reserved_usd = 0.0
        self.avoided_usd = 0.0
        self.breaches = 0  # settles that reported more than their reservation (this file, all runs)
        self.untrusted = 0  # settles whose reported usage was not a non-negative integer
        self.refusals = 0  # reservations this object refused (budget exhausted)
        self.waits = 0  # reservations that waited for money in flight before they fit
        # Waiters for a close (settle, release, charge): each an asyncio future and its
        # loop, woken thread-safely, so a settle in any thread or loop wakes them.
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._ids = itertools.count(1)
        self._open: dict[int, Reservation] = {}
        self._left: dict[int, float] = {}  # what a partly charged reservation still holds
        # Reservations earlier sessions left open, by key: ((run_epoch, id), amount left,
        # the keys charged against it), for `adopt`.
        self.orphans: dict[str, tuple[tuple[Any, Any], float, set[str]]] = {}
        self._lock = threading.Lock()  # a thread lock also serialises asyncio tasks
        # Reservation ids restart at 1 in every process: the epoch tells apart the ids
        # of two ledgers appending to one file (a resumed run, a grading pass).
        self._epoch = time.time_ns() // 1000
        self._path = Path(path) if path is not None else None
        self.disk_full: DiskFull | None = None  # set when a line could not be written
        self._log = None
        if self._path is not None:
            # AppendLog cuts a torn last line first: no event glues onto it
            self._log = AppendLog(self._path, fsync=bool(os.environ.get("EVALKIT_FSYNC")))

    @classmethod
    def resume(cls, cap_usd: float, path: str | Path) -> Ledger:
        """Open an existing ledger file and carry its committed spend forward.

        Reservations left open by a killed run are counted as spent: the call may have
        been billed even though its answer was lost.
        """
        committed = avoided = 0.0
        breaches = untrusted = 0
        open_amounts: dict[tuple[Any, Any], float] = {}  # (run_epoch, id) -> what it still holds
        keys: dict[tuple[Any, Any], str] = {}
        charged: dict[tuple[Any, Any], set[str]] = {}
        p = Path(path)
        if p.exists():
            # a torn last line is dropped with a warning; a bad line before it is an
            # InputError, never skipped
            for ev in iter_jsonl(p):
                kind = ev.get("event")
                rid = (ev.get("run_epoch", 0), ev.get("id"))
                if kind == "reserve":
                    open_amounts[rid] = ev["amount_usd"]
                    keys[rid] = ev.get("key", "")
                elif kind == "adopt":  # an open reservation moved into a later session
                    src = (ev.get("from_epoch", 0), ev.get("from_id"))
                    open_amounts[rid] = open_amounts.pop(src, 0.0)
                    keys[rid] = keys.pop(src, ev.get("key", ""))
                    charged[rid] = charged.pop(src, set())
                elif kind in ("settle", "release", "charge"):
                    if kind == "charge":  # one line of a batch: frees its worst case, commits its cost
                        if rid in open_amounts:
                            open_amounts[rid] = max(0.0, open_amounts[rid] - max(0.0, ev.get("released_usd", 0.0)))
                            charged.setdefault(rid, set()).add(ev.get("line", ""))
                    else:
                        open_amounts.pop(rid, None)
                        charged.pop(rid, None)
                    committed += max(0.0, ev.get("cost_usd", 0.0))  # a negative line never lowers spend
                    breaches += bool(ev.get("breach"))
                    untrusted += bool(ev.get("untrusted"))
                elif kind == "cache_hit":
                    avoided += ev.get("avoided_usd", 0.0)
            committed += sum(open_amounts.values())
        led = cls(cap_usd, p, committed_usd=committed)
        led.orphans = {keys.get(rid, ""): (rid, left, charged.get(rid, set())) for rid, left in open_amounts.items()}
        led.avoided_usd = avoided
        led.breaches = breaches
        led.untrusted = untrusted
        return led

    def reserve(
        self,
        role: str,
        model: str,
        price: Price,
        tokens_in: int,
        tokens_out: int,
        key: str = "",
        extra: dict[str, Any] | None = None,
    ) -> Reservation:
        """Hold the worst case of one call (or of a batch's lines: their summed
        ceilings, `extra` noting how many), or raise `BudgetExhausted`."""
        r = self._reserve(role, model, price, tokens_in, tokens_out, key, extra, None)
        assert r is not None
        return r

    async def reserve_waiting(
        self,
        role: str,
        model: str,
        price: Price,
        tokens_in: int,
        tokens_out: int,
        key: str = "",
        extra: dict[str, Any] | None = None,
    ) -> Reservation:
        """`reserve`, but a reservation that does not fit while calls are in flight
        waits until one of them closes and tries again; `BudgetExhausted` only when
        nothing is in flight and it still does not fit (see the module docstring)."""
        loop = asyncio.get_running_loop()
        waited = False
        while True:
            fut: asyncio.Future[None] = loop.create_future()
            r = self._reserve(role, model, price, tokens_in, tokens_out, key, extra, (loop, fut))
            if r is not None:
                return r
            if not waited:
                waited = True
                with self._lock:
                    self.waits += 1
            try:
                await fut
            except BaseException:
                with self._lock:
                    self._waiters = [w for w in self._waiters if w[1] is not fut]
                raise

    def _reserve(
        self,
        role: str,
        model: str,
        price: Price,
        tokens_in: int,
        tokens_out: int,
        key: str,
        extra: dict[str, Any] | None,
        waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None,
    ) -> Reservation | None:
        """Reserve, refuse, or (with `waiter`, when it does not fit but reservations are
        open) register the waiter, woken by the next close, and return None."""
        if price is None:
            raise InputError(f"no price for model {model!r}: refusing to run")
        amount = price.cost(tokens_in, tokens_out)
        with self._lock:
            if self.disk_full is not None:
                raise DiskFull(self.disk_full.path, self.disk_full.strerror)
            if self.committed_usd + self.reserved_usd + amount > self.cap_usd + 1e-12:
                if waiter is not None and self._open and self.committed_usd + amount <= self.cap_usd + 1e-12:
                    # money in flight may come back: wait for the next close
                    self._waiters.append(waiter)
                    return None
                self.refusals += 1
                self._write(
                    {
                        "event": "refuse",
                        "role": role,
                        "model": model,
                        "key": key,
                        "amount_usd": amount,
                        "committed_usd": self.committed_usd,
                        "reserved_usd": self.reserved_usd,
                        "cap_usd": self.cap_usd,
                    }
                )
                raise BudgetExhausted(
                    f"budget exhausted: committed ${self.committed_usd:.6f} + reserved "
                    f"${self.reserved_usd:.6f} + this call ${amount:.6f} > cap ${self.cap_usd:.6f}"
                )
            r = Reservation(next(self._ids), role, model, price, tokens_in, tokens_out, amount, key)
            # The line first: a call whose reservation is not on disk must not be sent.
            self._write(
                {
                    "event": "reserve",
                    "id": r.id,
                    "role": role,
                    "model": model,
                    "key": key,
                    "tokens_in": tokens_in,
                    "tokens_out": tokens_out,
                    "amount_usd": amount,
                    **(extra or {}),
                },
                strict=True,
            )
            self._open[r.id] = r
            self.reserved_usd += amount
            return r

    def settle(self, r: Reservation, usage: Usage, *, untrusted: str | None = None) -> float:
        """Commit the real cost of a finished call and free its reservation.

        Raises `CeilingBreached` (after committing the real cost) when the response
        reports more tokens than were reserved. `usage` must hold non-negative integers
        (`settle_reported` turns raw reported counts into one); `untrusted` says why the
        reported usage was replaced, for the ledger file.
        """
        for n in (usage.prompt_tokens, usage.completion_tokens):
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"settle needs non-negative integer token counts, got {usage!r}")
        cost = r.price.cost(usage.prompt_tokens, usage.completion_tokens)
        breached = usage.prompt_tokens > r.tokens_in or usage.completion_tokens > r.tokens_out
        with self._lock:
            self._close(r)
            self.committed_usd += cost
            self.breaches += breached
            event = {
                "event": "settle",
                "id": r.id,
                "role": r.role,
                "model": r.model,
                "key": r.key,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "cost_usd": cost,
                "committed_usd": self.committed_usd,
                "breach": breached,
            }
            if untrusted:
                self.untrusted += 1
                event["untrusted"] = untrusted
            self._write(event)
        if breached:
            raise CeilingBreached(
                f"ceiling breached: {r.model} reported {usage.prompt_tokens} in / {usage.completion_tokens} out "
                f"tokens, reserved {r.tokens_in} / {r.tokens_out}"
            )
        return cost

    def settle_reported(
        self, r: Reservation, prompt_tokens: object, completion_tokens: object
    ) -> tuple[float, Usage, str | None]:
        """Settle with the raw counts a response reported; returns (cost, settled usage,
        why the counts were untrusted or None). See `reported_usage`; raises
        `CeilingBreached` like `settle`."""
        usage, why = reported_usage(r, prompt_tokens, completion_tokens)
        return self.settle(r, usage, untrusted=why), usage, why

    def settle_failed(
        self, r: Reservation, usage: Usage | None = None, reason: str = "", cause: str | None = None
    ) -> float:
        """Close a reservation for a call that failed. A failed attempt is still a paid
        call when the server reported usage (or the client charges it at its worst case);
        with no usage it costs 0 (the endpoint returned an error before generating).
        `cause` is recorded with the reason."""
        cost = max(0.0, r.price.cost(usage.prompt_tokens, usage.completion_tokens)) if usage else 0.0
        with self._lock:
            self._close(r)
            self.committed_usd += cost
            event = {
                "event": "release",
                "id": r.id,
                "role": r.role,
                "model": r.model,
                "key": r.key,
                "cost_usd": cost,
                "reason": reason,
                "committed_usd": self.committed_usd,
            }
            if cause:
                event["cause"] = cause
            self._write(event)
        return cost

    def release_unsent(self, r: Reservation, cause: str) -> None:
        """Release, at $0, the reservation of a request that provably never reached the
        server (reason `"not sent"`, with its cause): nothing was processed, nothing can
        have been billed."""
        self.settle_failed(r, None, "not sent", cause)

    def charge(
        self,
        r: Reservation,
        usage: Usage,
        *,
        tokens_in: int,
        tokens_out: int,
        line: str,
        untrusted: str | None = None,
        reason: str | None = None,
    ) -> float:
        """Settle one line of a batch reservation `r`: commit what `usage` costs and free
        one line's worst case (`tokens_in` in, `tokens_out` out), leaving `r` open for
        the other lines. `line` is the line's key; `reason` says why a line that gave no
        answer costs what it does. Raises `CeilingBreached` (after committing) when the
        line reports more than its ceilings, like `settle`."""
        for n in (usage.prompt_tokens, usage.completion_tokens):
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"charge needs non-negative integer token counts, got {usage!r}")
        cost = r.price.cost(usage.prompt_tokens, usage.completion_tokens)
        freed = r.price.cost(tokens_in, tokens_out)
        breached = usage.prompt_tokens > tokens_in or usage.completion_tokens > tokens_out
        with self._lock:
            if r.id not in self._open:
                raise RuntimeError(f"reservation {r.id} is closed")
            left = self._left.get(r.id, r.amount_usd)
            freed = min(freed, left)
            self._left[r.id] = left - freed
            self.reserved_usd = max(0.0, self.reserved_usd - freed)
            self.committed_usd += cost
            self.breaches += breached
            self._wake()
            event: dict[str, Any] = {
                "event": "charge",
                "id": r.id,
                "role": r.role,
                "model": r.model,
                "key": r.key,
                "line": line,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "cost_usd": cost,
                "released_usd": freed,
                "committed_usd": self.committed_usd,
                "breach": breached,
            }
            if untrusted:
                self.untrusted += 1
                event["untrusted"] = untrusted
            if reason:
                event["reason"] = reason
            self._write(event)
        if breached:
            raise CeilingBreached(
                f"ceiling breached: {r.model} reported {usage.prompt_tokens} in / {usage.completion_tokens} out "
                f"tokens for {line}, reserved {tokens_in} / {tokens_out}"
            )
        return cost

    def left_usd(self, r: Reservation) -> float:
        """What the open reservation `r` still holds (less than its amount once lines
        were charged against it)."""
        with self._lock:
            return self._left.get(r.id, r.amount_usd)

    def adopt(
        self, key: str, role: str, model: str, price: Price, tokens_in: int, tokens_out: int
    ) -> tuple[Reservation, set[str]] | None:
        """Move the reservation an earlier session left open under `key` into this one
        (an `adopt` event), or None when there is none. Returns it, with what it still
        holds as its amount, and the line keys already charged against it. Its amount
        stops counting as spent and counts as reserved again, as it did for the session
        that made it."""
        with self._lock:
            found = self.orphans.get(key)
            if found is None:
                return None
            (epoch, old_id), left, charged = found
            r = Reservation(next(self._ids), role, model, price, tokens_in, tokens_out, left, key)
            self._write(
                {
                    "event": "adopt",
                    "id": r.id,
                    "role": role,
                    "model": model,
                    "key": key,
                    "from_epoch": epoch,
                    "from_id": old_id,
                    "amount_usd": left,
                },
                strict=True,
            )
            del self.orphans[key]
            self._open[r.id] = r
            self.committed_usd = max(0.0, self.committed_usd - left)
            self.reserved_usd += left
            return r, set(charged)

    def record_avoided(self, amount_usd: float, key: str = "") -> None:
        """A cache hit: $0 spent, `amount_usd` avoided."""
        with self._lock:
            self.avoided_usd += amount_usd
            self._write({"event": "cache_hit", "key": key, "cost_usd": 0.0, "avoided_usd": amount_usd})

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _close(self, r: Reservation) -> None:
        if self._open.pop(r.id, None) is None:
            raise RuntimeError(f"reservation {r.id} settled twice")
        self.reserved_usd = max(0.0, self.reserved_usd - self._left.pop(r.id, r.amount_usd))
        self._wake()

    def _wake(self) -> None:
        """Wake every waiting reservation (under the lock): room may have been freed,
        or nothing is left in flight and each must now be refused."""
        waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # that loop has closed: nobody waits on it any more
                pass

    def _write(self, event: dict[str, Any], *, strict: bool = False) -> None:
        """Append one event. No room: `strict` raises `DiskFull`; otherwise the event
        stays in memory only (the totals are right; a resume counts the reservation as
        spent) and `disk_full` refuses every later reservation."""
        if self._log is None:
            return
        try:
            self._log.append({"t": round(time.time(), 3), "run_epoch": self._epoch, **event})
        except DiskFull as exc:
            self.disk_full = exc
            if strict:
                raise


def role_spend(path: str | Path, role: str) -> float:
    """What calls of `role` ("generator" | "judge") cost over every session of the ledger
    file at `path`: their settled, released and charged costs, and each reservation left
    open at what it still holds (as `Ledger.resume` counts it). 0 without a file."""
    p = Path(path)
    if not p.exists():
        return 0.0
    spent = 0.0
    open_amounts: dict[tuple[Any, Any], float] = {}
    for ev in iter_jsonl(p):
        if ev.get("role", role) != role and ev.get("event") != "adopt":
            continue
        kind = ev.get("event")
        rid = (ev.get("run_epoch", 0), ev.get("id"))
        if kind == "reserve" and ev.get("role") == role:
            open_amounts[rid] = float(ev.get("amount_usd", 0.0))
        elif kind == "adopt" and ev.get("role") == role:
            open_amounts[rid] = open_amounts.pop((ev.get("from_epoch", 0), ev.get("from_id")), 0.0)
        elif kind in ("settle", "release", "charge"):
            if kind == "charge":
                if rid in open_amounts:
                    open_amounts[rid] = max(0.0, open_amounts[rid] - max(0.0, ev.get("released_usd", 0.0)))
            else:
                open_amounts.pop(rid, None)
            spent += max(0.0, ev.get("cost_usd", 0.0))
    return spent + sum(open_amounts.values())


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def reported_usage(r: Reservation, prompt_tokens: object, completion_tokens: object) -> tuple[Usage, str | None]:
    """The usage to settle `r` with, from the raw counts a response reported, and why
    they were untrusted (None when they are non-negative integers).

    When a count is not a non-negative integer the usage is untrusted: the call is
    settled at its full reservation, or above it where a count (a fractional one
    rounded up) passes it, so an over-report still breaches. Never below the
    reservation: a bad count must not lower the spend.
    """
    raws = (("prompt_tokens", prompt_tokens, r.tokens_in), ("completion_tokens", completion_tokens, r.tokens_out))
    counts = [_count(raw) for _, raw, _ in raws]
    problems = [f"{name}={_show(raw)}" for (name, raw, _), n in zip(raws, counts, strict=True) if n is None]
    if not problems:
        return Usage(int(counts[0]), int(counts[1])), None  # type: ignore[arg-type]
    settled = [max(reserved, _ceil_count(raw) or 0) for _, raw, reserved in raws]
    return Usage(settled[0], settled[1]), (
        "usage is not a non-negative integer (" + ", ".join(problems) + "): settled at the full reservation"
    )


# The most UTF-8 bytes a token is taken to carry on average over a text, and the bytes a
# text may hold before any count is asked of it. Not bytes/4 (English prose averages 4 to
# 5 bytes a token on o200k, code indentation far more): a floor honest counts never reach.
FLOOR_BYTES_PER_TOKEN = 32
FLOOR_SLACK_BYTES = 256


def usage_floor(text_bytes: int) -> int:
    """The fewest tokens `text_bytes` UTF-8 bytes of text can be (`FLOOR_BYTES_PER_TOKEN`
    a token after `FLOOR_SLACK_BYTES`): a count below it is no count of that text."""
    return max(0, text_bytes - FLOOR_SLACK_BYTES) // FLOOR_BYTES_PER_TOKEN


def implausible_usage(usage: Usage, prompt_bytes: int, text_bytes: int) -> str | None:
    """Why reported counts are below what the request's and the answer's text could
    carry (`usage_floor`), else None: 0 tokens for 2,000 bytes of text is not trusted,
    and the call is settled at its full reservation (the reservation stands)."""
    low = [
        f"{name}={n} for {size} bytes of text (at least {usage_floor(size)})"
        for name, n, size in (
            ("prompt_tokens", usage.prompt_tokens, prompt_bytes),
            ("completion_tokens", usage.completion_tokens, text_bytes),
        )
        if n < usage_floor(size)
    ]
    return (
        "usage below what the text carries (" + ", ".join(low) + "): settled at the full reservation" if low else None
    )


def unusable_usage(raw: object) -> str:
    """Why a reported `usage` that is not an object of token counts (a string, a number,
    a list) is untrusted: the call is settled at its full reservation."""
    return f"usage is {_show(raw)}, not an object of token counts: settled at the full reservation"


def _count(raw: object) -> int | None:
    """`raw` as a token count when it is a non-negative integer (an integral float such
    as 12.0 included), else None."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw >= 0 else None
    if isinstance(raw, float) and math.isfinite(raw) and raw >= 0 and raw.is_integer():
        return int(raw)
    return None


def _ceil_count(raw: object) -> int | None:
    """A finite non-negative number rounded up (fractional usage never rounds down)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    if not math.isfinite(raw) or raw < 0:
        return None
    return math.ceil(raw)


def _show(raw: object, n: int = 40) -> str:
    s = (
        json.dumps(raw)
        if isinstance(raw, (int, float, str, type(None))) and not (isinstance(raw, float) and not math.isfinite(raw))
        else repr(raw)
    )
    return s if len(s) <= n else s[: n - 3] + "..."


def spend_by_arm(path: str | Path, role: str = "generator") -> dict[str, dict[str, float]]:
    """What a run's `role` calls cost per arm, read from its `ledger.jsonl`: `paid_usd`
    (settled calls, failed attempts included, and reservations a killed session left
    open, counted at their full amount as `Ledger.resume` does) and `avoided_usd` (cache
    hits). The arm is the middle part of a call's key ``case/arm/index``; a batch's lines
    are charged by their line key. What no key names an arm of (a closed batch's
    remainder) is under ``""``."""
    # the amounts, summed at the end with math.fsum: the ledger's order is the order calls
    # settled in, which differs between two runs of the same samples (online and by batch,
    # or with other concurrency), and a float sum in another order can differ in its last
    # digit; fsum's correctly rounded sum is the same in any order
    amounts: dict[str, dict[str, list[float]]] = {}
    open_amounts: dict[tuple[Any, Any], tuple[str, float]] = {}
    roles: dict[tuple[Any, Any], str] = {}

    def arm_of(key: object) -> str:
        parts = str(key or "").split("/")
        return parts[1] if len(parts) >= 3 and parts[0] not in ("batch", "judge", "pair") else ""

    def add(arm: str, what: str, usd: float) -> None:
        row = amounts.setdefault(arm, {"paid_usd": [], "avoided_usd": []})
        row[what].append(max(0.0, float(usd)))

    p = Path(path)
    if not p.exists():
        return {}
    for ev in iter_jsonl(p):
        kind = ev.get("event")
        rid = (ev.get("run_epoch", 0), ev.get("id"))
        if kind == "reserve":
            roles[rid] = str(ev.get("role", ""))
            if roles[rid] == role:
                open_amounts[rid] = (arm_of(ev.get("key")), float(ev.get("amount_usd", 0.0)))
        elif kind == "adopt":
            src = (ev.get("from_epoch", 0), ev.get("from_id"))
            roles[rid] = roles.pop(src, str(ev.get("role", role)))
            if src in open_amounts:
                open_amounts[rid] = open_amounts.pop(src)
        elif kind in ("settle", "release", "charge"):
            if roles.get(rid, ev.get("role")) != role:
                continue
            arm = arm_of(ev.get("line")) if kind == "charge" else open_amounts.get(rid, (arm_of(ev.get("key")), 0))[0]
            add(arm, "paid_usd", ev.get("cost_usd", 0.0))
            if kind == "charge" and rid in open_amounts:
                a, left = open_amounts[rid]
                open_amounts[rid] = (a, max(0.0, left - max(0.0, ev.get("released_usd", 0.0))))
            elif kind != "charge":
                open_amounts.pop(rid, None)
        elif kind == "cache_hit" and role == "generator":
            key = str(ev.get("key", ""))
            if arm_of(key):
                add(arm_of(key), "avoided_usd", ev.get("avoided_usd", 0.0))
    for arm, left in open_amounts.values():
        add(arm, "paid_usd", left)
    return {arm: {what: math.fsum(usd) for what, usd in row.items()} for arm, row in amounts.items()}
