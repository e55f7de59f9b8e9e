"""evalkit.calls.stopping.StopSignal: a run's stop causes, each once, ranked, with what the
ledger, the cache, the clients and the watch report; and evalkit.calls.cache.InFlight, one
call per identity at a time."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace as NS

from evalkit.calls.cache import InFlight
from evalkit.calls.stopping import StopSignal


def _signal(watch=None, **clients):
    ledger = NS(disk_full=None)
    rcache = NS(write_error=None)
    arms = {name: NS(unreachable=u, rate_limited_out=None) for name, u in clients.items()}
    return StopSignal(ledger, rcache, arms, watch), ledger, rcache, arms


def test_causes_are_kept_once_in_order_and_a_ceiling_breach_and_an_unreachable_endpoint_come_first():
    s, *_ = _signal()
    assert s.should_stop() is None and s.reason is None
    for cause in ("budget exhausted", "disk full: a", "disk full: b", "budget exhausted", "ceiling breached"):
        s.stop(cause)
    assert s.causes == ["budget exhausted", "disk full: a", "ceiling breached"]  # one full disk, the first
    assert s.reason == "ceiling breached; disk full: a; budget exhausted"


def test_should_stop_folds_in_the_ledger_the_cache_and_each_client_once():
    s, ledger, rcache, arms = _signal(a=None, b=None)
    arms["b"].unreachable = "endpoint unreachable: refused"
    arms["c"] = arms["b"]  # two arms on one client: its cause once
    rcache.write_error = "disk full: cache.sqlite"
    assert s.should_stop() == "disk full: cache.sqlite; endpoint unreachable: refused"  # as they occurred
    ledger.disk_full = "disk full: ledger.jsonl"  # a second full disk is not a second cause
    assert s.should_stop() == "disk full: cache.sqlite; endpoint unreachable: refused"  # as they occurred


def test_the_watch_is_asked_until_it_reports_and_its_detail_is_kept():
    said = iter([None, "model server exited (signal 11)\n  last log line\n"])
    calls = []

    def watch():
        calls.append(1)
        return next(said)

    s, *_ = _signal(watch)
    assert s.should_stop() is None
    assert s.should_stop() == "model server exited (signal 11)"
    assert s.detail == "  last log line"
    assert s.should_stop() == "model server exited (signal 11)" and len(calls) == 2  # not asked again


def test_in_flight_holds_one_call_per_identity_and_lets_others_through():
    async def main() -> list[str]:
        reg, order = InFlight(), []
        first_in, other_out = asyncio.Event(), asyncio.Event()

        async def call(name: str, ident: str, hold_first: bool = False) -> None:
            async with reg.hold(ident):
                order.append(f"{name} in")
                if hold_first:
                    first_in.set()
                    # held until c (another identity) has been in and out, b (started
                    # before c) waiting meanwhile; the bound is for a c held behind a,
                    # which never comes: the order below then says so
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(other_out.wait(), 10)
                order.append(f"{name} out")
            if name == "c":
                other_out.set()

        a = asyncio.create_task(call("a", "x", hold_first=True))
        await first_in.wait()
        await asyncio.gather(call("b", "x"), call("c", "y"), a)
        return order

    order = asyncio.run(main())
    assert order.index("c out") < order.index("a out")  # another identity is not held
    assert order.index("a out") < order.index("b in")  # the same identity waits for the first
