"""Calls: every model call, under the one ledger.

The response cache (`cache`), the cost ledger that reserves before and settles after
(`ledger`), the one client (`client`), model servers on loopback (`serve`, with the
scripted server's files and batches API in `_batchserve`), one agent sample's calls
(`session`) and the metering proxy agent programs call through (`proxy`).

May import: `evalkit.foundations`, `evalkit.numbers`, `evalkit.checking`, `evalkit.suites`.
"""
