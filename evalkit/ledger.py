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
says why, so the committed total only ever grows.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import BudgetExhausted, CeilingBreached, InputError
from .records import Price, Usage


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
        self._ids = itertools.count(1)
        self._open: dict[int, Reservation] = {}
        self._lock = threading.Lock()  # a thread lock also serialises asyncio tasks
        # Reservation ids restart at 1 in every process: the epoch tells apart the ids
        # of two ledgers appending to one file (a resumed run, a grading pass).
        self._epoch = time.time_ns() // 1000
        self._path = Path(path) if path is not None else None
        if self._path is not None:
            from .runs import repair_torn_tail
            repair_torn_tail(self._path)  # a later event must not glue onto a torn line
        self._fh = open(self._path, "a", encoding="utf-8") if self._path else None
        self._fsync = bool(os.environ.get("EVALKIT_FSYNC"))

    @classmethod
    def resume(cls, cap_usd: float, path: str | Path) -> "Ledger":
        """Open an existing ledger file and carry its committed spend forward.

        Reservations left open by a killed run are counted as spent: the call may have
        been billed even though its answer was lost.
        """
        committed = avoided = 0.0
        breaches = 0
        open_amounts: dict[int, float] = {}
        p = Path(path)
        if p.exists():
            from .runs import iter_jsonl  # a torn last line is dropped with a warning; a bad
                                          # line before it is an InputError, never skipped
            for ev in iter_jsonl(p):
                kind = ev.get("event")
                if kind == "reserve":
                    open_amounts[(ev.get("run_epoch", 0), ev["id"])] = ev["amount_usd"]
                elif kind in ("settle", "release"):
                    open_amounts.pop((ev.get("run_epoch", 0), ev["id"]), None)
                    committed += max(0.0, ev.get("cost_usd", 0.0))  # a negative line never lowers spend
                    breaches += bool(ev.get("breach"))
                elif kind == "cache_hit":
                    avoided += ev.get("avoided_usd", 0.0)
            committed += sum(open_amounts.values())
        led = cls(cap_usd, p, committed_usd=committed)
        led.avoided_usd = avoided
        led.breaches = breaches
        return led

    def reserve(self, role: str, model: str, price: Price, tokens_in: int, tokens_out: int, key: str = "") -> Reservation:
        """Hold the worst case of one call, or raise `BudgetExhausted`."""
        if price is None:
            raise InputError(f"no price for model {model!r}: refusing to run")
        amount = price.cost(tokens_in, tokens_out)
        with self._lock:
            if self.committed_usd + self.reserved_usd + amount > self.cap_usd + 1e-12:
                self._write({"event": "refuse", "role": role, "model": model, "key": key,
                             "amount_usd": amount, "committed_usd": self.committed_usd,
                             "reserved_usd": self.reserved_usd, "cap_usd": self.cap_usd})
                raise BudgetExhausted(
                    f"budget exhausted: committed ${self.committed_usd:.6f} + reserved "
                    f"${self.reserved_usd:.6f} + this call ${amount:.6f} > cap ${self.cap_usd:.6f}")
            r = Reservation(next(self._ids), role, model, price, tokens_in, tokens_out, amount, key)
            self._open[r.id] = r
            self.reserved_usd += amount
            self._write({"event": "reserve", "id": r.id, "role": role, "model": model, "key": key,
                         "tokens_in": tokens_in, "tokens_out": tokens_out, "amount_usd": amount})
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
            event = {"event": "settle", "id": r.id, "role": r.role, "model": r.model, "key": r.key,
                     "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                     "cost_usd": cost, "committed_usd": self.committed_usd, "breach": breached}
            if untrusted:
                self.untrusted += 1
                event["untrusted"] = untrusted
            self._write(event)
        if breached:
            raise CeilingBreached(
                f"ceiling breached: {r.model} reported {usage.prompt_tokens} in / {usage.completion_tokens} out "
                f"tokens, reserved {r.tokens_in} / {r.tokens_out}")
        return cost

    def settle_reported(self, r: Reservation, prompt_tokens: object, completion_tokens: object) -> tuple[float, Usage, str | None]:
        """Settle with the raw counts a response reported; returns (cost, settled usage,
        why the counts were untrusted or None).

        When a count is not a non-negative integer the usage is untrusted: the call is
        settled at its full reservation, or above it where a count (a fractional one
        rounded up) passes it, so an over-report still breaches. Never below the
        reservation: a bad count must not lower the spend. Raises `CeilingBreached` like
        `settle`.
        """
        raws = (("prompt_tokens", prompt_tokens, r.tokens_in), ("completion_tokens", completion_tokens, r.tokens_out))
        counts = [_count(raw) for _, raw, _ in raws]
        problems = [f"{name}={_show(raw)}" for (name, raw, _), n in zip(raws, counts) if n is None]
        why = None
        if not problems:
            settled = [int(n) for n in counts]  # type: ignore[arg-type]
        else:
            # The whole usage is untrusted: the full reservation, or a count (rounded up)
            # that passes it, so an over-report still breaches.
            settled = [max(reserved, _ceil_count(raw) or 0) for _, raw, reserved in raws]
            why = ("usage is not a non-negative integer (" + ", ".join(problems)
                   + "): settled at the full reservation")
        usage = Usage(settled[0], settled[1])
        return self.settle(r, usage, untrusted=why), usage, why

    def settle_failed(self, r: Reservation, usage: Usage | None = None, reason: str = "") -> float:
        """Close a reservation for a call that failed. A failed attempt is still a paid
        call when the server reported usage; with no usage it costs 0 (the endpoint
        returned an error before generating)."""
        cost = max(0.0, r.price.cost(usage.prompt_tokens, usage.completion_tokens)) if usage else 0.0
        with self._lock:
            self._close(r)
            self.committed_usd += cost
            self._write({"event": "release", "id": r.id, "role": r.role, "model": r.model, "key": r.key,
                         "cost_usd": cost, "reason": reason, "committed_usd": self.committed_usd})
        return cost

    def record_avoided(self, amount_usd: float, key: str = "") -> None:
        """A cache hit: $0 spent, `amount_usd` avoided."""
        with self._lock:
            self.avoided_usd += amount_usd
            self._write({"event": "cache_hit", "key": key, "cost_usd": 0.0, "avoided_usd": amount_usd})

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None

    def _close(self, r: Reservation) -> None:
        if self._open.pop(r.id, None) is None:
            raise RuntimeError(f"reservation {r.id} settled twice")
        self.reserved_usd = max(0.0, self.reserved_usd - r.amount_usd)

    def _write(self, event: dict) -> None:
        if self._fh is None:
            return
        event = {"t": round(time.time(), 3), "run_epoch": self._epoch, **event}
        self._fh.write(json.dumps(event) + "\n")
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())


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
    s = json.dumps(raw) if isinstance(raw, (int, float, str, type(None))) and not (
        isinstance(raw, float) and not math.isfinite(raw)) else repr(raw)
    return s if len(s) <= n else s[: n - 3] + "..."
