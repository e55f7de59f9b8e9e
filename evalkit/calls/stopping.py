"""Why a run stops: the causes its calls, ledger, cache and watch report, in one record.

The sampling engine (`evalkit.running.runner`) records the causes it sees itself (budget
exhausted, ceiling breached, interrupted), and the clients ask `should_stop` before every
attempt. It lives beside the client because everything it reads is a call's (the ledger,
the response cache, the clients, the server watch), so a client asking it calls sideways,
not back up into the engine that made it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# causes shown before others in a stop reason (after a ceiling breach, which comes first)
FIRST_CAUSES = ("endpoint unreachable", "disk full", "rate limited")


class StopSignal:
    """A run's stop causes, each once, in the order they occurred; `reason` joins them,
    a ceiling breach first, then an unreachable endpoint, a full disk or a rate limit.
    `should_stop` folds in what the ledger, the cache and the clients found (a full disk,
    an unreachable or endlessly rate-limiting endpoint) and asks the watch (a server that
    died), before every key and every attempt."""

    def __init__(
        self,
        ledger: Any,
        rcache: Any,
        clients: Mapping[str, Any],
        watch: Callable[[], str | None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.rcache = rcache
        self.clients = clients  # the engine's arm -> client map, read each time (never copied)
        self.watch = watch
        self.causes: list[str] = []
        self.detail: str | None = None  # the watch's detail lines (a dead server's log tail)

    def stop(self, cause: str) -> None:
        """Record a stop cause once; a full disk once, the first file that had no room."""
        kind = cause.split(":", 1)[0]
        if cause not in self.causes and not (
            kind == "disk full" and any(c.startswith("disk full:") for c in self.causes)
        ):
            self.causes.append(cause)

    @property
    def reason(self) -> str | None:
        """Every stop cause that occurred, ranked ("ceiling breached; budget exhausted");
        None while the run goes on. Asks the watch first."""
        if self.watch is not None:
            self._ask_watch()
        if not self.causes:
            return None

        def rank(c: str) -> tuple[int, int]:
            first = 0 if c.startswith("ceiling breached") else 1 if c.startswith(FIRST_CAUSES) else 2
            return first, self.causes.index(c)

        return "; ".join(sorted(self.causes, key=rank))

    def _ask_watch(self) -> None:
        assert self.watch is not None
        said = self.watch()
        if said:
            self.watch = None  # it said why; the run has stopped
            cause, _, detail = said.strip().partition("\n")
            self.stop(cause.strip())
            self.detail = detail.strip("\n") or None

    def should_stop(self) -> str | None:
        """The stop reason, after folding in what the ledger, the cache and the clients
        found; asked before every key and every attempt."""
        if self.ledger.disk_full is not None:
            self.stop(str(self.ledger.disk_full))
        if self.rcache is not None and self.rcache.write_error is not None:
            self.stop(str(self.rcache.write_error))
        for client in {id(c): c for c in self.clients.values()}.values():
            for halted in (client.unreachable, client.rate_limited_out):
                if halted is not None:
                    self.stop(halted)
        return self.reason
