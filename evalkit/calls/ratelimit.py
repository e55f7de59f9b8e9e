"""A provider's rate limit, learned and shared by every worker that calls it.

Providers count refused requests against the limit: a client whose workers each retry
into 429s on their own stays over the limit and the run collapses (issue 31: 0.01 of a
600 requests/min limit at concurrency 32). A `Pacer` is one object per endpoint and
model, shared by every `ModelClient` of that endpoint in the process (the generator,
the judge, the proxy's agents, the batch path's online fallback all call through one),
and it does three things:

* learns a steady limit: from the `x-ratelimit-limit-requests` / `-tokens` headers
  (per minute, as OpenAI and OpenAI-compatible servers send them) where the provider
  sends them, otherwise from the spacing of 429s (the success rate seen before a
  refusal, cut on each refusal and raised slowly while none comes);
* paces every request start to that limit (`PACE_FRACTION` of it), requests and
  estimated tokens alike, so the workers together stay just under it;
* on a 429 that says the limit is reached, holds all workers until Retry-After (or an
  exponential backoff when the server gives none), instead of letting each retry alone.

A 429 is not always a limit (issue 44): an overloaded provider refuses a share of
requests at random whatever their rate. Taking those for a limit cut the pace on each
and held every worker, so 10% of random refusals made a run 17 times slower. A refusal
is taken for a limit when its `x-ratelimit-remaining-*` headers say a count is spent,
or, without them, when refusals track the request rate: a bucket run dry refuses most
of what comes, so they pass `LIMIT_SHARE` of the last `OUTCOME_WINDOW` answers, where
random refusals keep their own small share. Any other refusal is random: the refused
request alone waits its Retry-After and is retried, the pace and the other workers
go on (`Refusal`).

Waiting is on deadlines computed from the shared state: a worker reserves the next
start slot and sleeps until it; a hold that comes while it sleeps moves every slot,
and the worker, on waking, sees the hold's epoch changed and reserves again. No
polling. Why by hand: no well-kept asyncio library paces to a limit it learns from
response headers and holds on Retry-After (aiolimiter and the like take a fixed rate).
Single event loop per pacer use at a time; `time.monotonic` is the clock.
"""

from __future__ import annotations

import asyncio
import collections
import math
import re
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PACE_FRACTION = 0.98  # of the learned limit: a little room for clock skew between client and server
WINDOW_S = 60.0  # x-ratelimit-limit-* count per minute (OpenAI's convention)
SPACING_WINDOW_S = 10.0  # successes counted over this long to estimate a limit from 429 spacing
SPACING_CUT = 0.9  # a 429 with no headers: the pace is cut to this fraction of what got through
SPACING_RAISE = 0.01  # each success with no limit refusal for SPACING_QUIET_S raises the pace by this fraction
SPACING_QUIET_S = 1.0
HOLD_BASE_S = 0.25  # a 429 without Retry-After: holds of 0.25 s, doubled per refusal in a row
HOLD_MAX_S = 30.0
MIN_RATE = 0.05  # requests per second: the pace never goes below one call in 20 s
OUTCOME_WINDOW = 40  # the last answers (admitted or refused) a refusal is judged against
# A limit once refusals are this share of them: a bucket run dry refuses most requests,
# while 10% random refusals reach 12 of 40 with probability 0.0004 (binomial tail).
LIMIT_SHARE = 0.3

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float | None:
    """Seconds of an `x-ratelimit-reset-*` value: OpenAI's ``6m0s``, ``1.5s``, ``20ms``,
    or a bare number of seconds; None when it is neither."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not parts or "".join(a + b for a, b in parts) != text:
            return None
        return sum(float(a) * _UNIT_S[b] for a, b in parts)
    return value if math.isfinite(value) and value >= 0 else None


def _number(headers: Mapping[str, str], name: str) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


@dataclass(frozen=True)
class Refusal:
    """What a 429 means for the refused request: the seconds it waits before its retry,
    and whether it was a limit (every worker held, the pace cut) or a random refusal
    (that request alone waits its Retry-After)."""

    wait_s: float
    limit: bool


def _spent(headers: Mapping[str, str] | None) -> bool | None:
    """What a refusal's `x-ratelimit-remaining-*` headers say: True when a count is spent
    (a limit), False when every count they give has room (an overload, not the
    limit), None when they give none."""
    if not headers:
        return None
    h = {str(k).lower(): str(v) for k, v in headers.items()}
    left = [_number(h, f"x-ratelimit-remaining-{kind}") for kind in ("requests", "tokens")]
    known = [v for v in left if v is not None]
    if not known:
        return None
    return any(v < 1 for v in known)


class Pacer:
    """The shared pace of one endpoint's calls; see the module docstring."""

    def __init__(self) -> None:
        self.request_rate: float | None = None  # requests per second allowed, once learned
        self.token_rate: float | None = None  # tokens per second allowed, once learned
        self.from_headers = False
        self.refusals = 0  # 429s seen
        self.holds = 0  # holds begun (a burst of 429s inside one hold is one)
        self.random_refusals = 0  # 429s taken for random refusals: retried alone, the pace kept
        self._next_request = 0.0  # monotonic time the next request may start
        self._next_tokens = 0.0
        self._hold_until = 0.0
        self._epoch = 0  # bumped by every hold: a slot reserved before it is void
        self._in_a_row = 0  # refusals with no success between
        self._last_refusal = -math.inf
        self._successes: collections.deque[float] = collections.deque()
        self._outcomes: collections.deque[bool] = collections.deque(maxlen=OUTCOME_WINDOW)  # True: refused

    # -- waiting ---------------------------------------------------------------------
    def _reserve(self, tokens: int, now: float) -> float:
        start = max(now, self._hold_until, self._next_request if self.request_rate else 0.0)
        if self.token_rate:
            start = max(start, self._next_tokens)
        if self.request_rate:
            self._next_request = start + 1.0 / (self.request_rate * PACE_FRACTION)
        if self.token_rate:
            self._next_tokens = max(start, self._next_tokens) + tokens / (self.token_rate * PACE_FRACTION)
        return start

    async def acquire(self, tokens: int = 0, max_wait_s: float = math.inf) -> float | None:
        """Wait for this request's start slot (`tokens`: its estimated token count). When
        the slot is more than `max_wait_s` away (what is left of the caller's rate-limit
        budget: a tiny token limit or a hostile header could park it for an hour), wait
        nothing and return how long it would have been; None once the slot is reached."""
        while True:
            now = time.monotonic()
            epoch = self._epoch
            start = self._reserve(tokens, now)
            if start <= now:
                return None
            if start - now > max_wait_s:
                return start - now
            await asyncio.sleep(start - now)
            if epoch == self._epoch:
                return None

    def held_for(self) -> float:
        """Seconds left of the current hold (0 when none)."""
        return max(0.0, self._hold_until - time.monotonic())

    # -- learning --------------------------------------------------------------------
    def observe(self, headers: Mapping[str, str] | None) -> None:
        """A response arrived (any status): learn the limit from its headers."""
        if headers is None:
            return
        h = {str(k).lower(): str(v) for k, v in headers.items()}
        requests = _number(h, "x-ratelimit-limit-requests")
        tokens = _number(h, "x-ratelimit-limit-tokens")
        if requests:
            self.request_rate = max(MIN_RATE, requests / WINDOW_S)
            self.from_headers = True
        if tokens:
            self.token_rate = tokens / WINDOW_S
            self.from_headers = True

    def answered(self) -> None:
        """A request succeeded."""
        now = time.monotonic()
        self._in_a_row = 0
        self._outcomes.append(False)
        self._successes.append(now)
        while self._successes and self._successes[0] < now - SPACING_WINDOW_S:
            self._successes.popleft()
        if not self.from_headers and self.request_rate and now - self._last_refusal > SPACING_QUIET_S:
            self.request_rate *= 1.0 + SPACING_RAISE

    def refused(self, retry_after: float | None, headers: Mapping[str, str] | None = None) -> Refusal:
        """A 429 (or an overload): a limit holds every worker until Retry-After and the
        pace learns from it (`_hold`); a random refusal (the module docstring) makes the
        refused request alone wait its Retry-After, and leaves the pace as it was."""
        self.refusals += 1
        self._in_a_row += 1
        self._outcomes.append(True)
        self.observe(headers)
        wait = retry_after if retry_after is not None else min(HOLD_MAX_S, HOLD_BASE_S * 2 ** (self._in_a_row - 1))
        if not self._is_limit(headers):
            self.random_refusals += 1
            return Refusal(wait, limit=False)
        return Refusal(self._hold(wait), limit=True)

    def _is_limit(self, headers: Mapping[str, str] | None) -> bool:
        """A refusal is a limit when its headers say a count is spent, or, when they say
        nothing, when refusals are `LIMIT_SHARE` of the last `OUTCOME_WINDOW` answers."""
        spent = _spent(headers)
        if spent is not None:
            return spent
        return sum(self._outcomes) >= LIMIT_SHARE * OUTCOME_WINDOW

    def _hold(self, wait: float) -> float:
        """Hold every worker `wait` seconds from now and, without headers, learn the
        limit from the refusals' spacing; returns the seconds the hold now has left."""
        now = time.monotonic()
        new_hold = self._hold_until <= now
        if new_hold and not self.from_headers:
            # The limit from 429 spacing: first, what got through over the last window;
            # then the pace cut a little on each hold (a burst's refusals are one
            # signal) and raised by each success while none comes (`answered`).
            span = min(SPACING_WINDOW_S, now - self._successes[0]) if len(self._successes) >= 2 else 0.0
            seen = (len(self._successes) - 1) / span if span > 0 else None
            if self.request_rate is not None:
                self.request_rate = max(MIN_RATE, self.request_rate * SPACING_CUT)
            elif seen is not None:
                self.request_rate = max(MIN_RATE, seen * SPACING_CUT)
        self._last_refusal = now
        until = now + wait
        if until > self._hold_until:
            if new_hold:
                self.holds += 1
            self._hold_until = until
            self._next_request = self._next_tokens = until
            self._epoch += 1
        return self.held_for()

    def describe(self) -> dict[str, Any]:
        """What the pacer learned (for a run's summary and the benches)."""
        return {
            "requests_per_min": None if self.request_rate is None else round(self.request_rate * WINDOW_S, 3),
            "tokens_per_min": None if self.token_rate is None else round(self.token_rate * WINDOW_S, 3),
            "from_headers": self.from_headers,
            "refusals": self.refusals,
            "holds": self.holds,
            "random_refusals": self.random_refusals,
        }


_PACERS: weakref.WeakValueDictionary[tuple[str, str], Pacer] = weakref.WeakValueDictionary()


def pacer_for(base_url: str | None, model: str) -> Pacer:
    """The one pacer of an endpoint and model in this process: every client of it shares
    it while any holds it (a provider limits per key and model)."""
    key = ((base_url or "").rstrip("/"), model)
    pacer = _PACERS.get(key)
    if pacer is None:
        pacer = Pacer()
        _PACERS[key] = pacer
    return pacer
