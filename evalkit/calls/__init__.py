"""Calls: every model call, under the one ledger.

The response cache (`cache`), the cost ledger that reserves before and settles after
(`ledger`), the one client (`client`) with its shared rate-limit pacer (`ratelimit`) and
the Responses API's wire shapes (`responses_api`), why a run stops (`stopping`), model
servers on loopback (`serve`,
with the scripted server's files and batches API in `_batchserve` and the embedded
model's server process in `_llamaserve`), one agent sample's
calls (`session`), the metering proxy agent programs call through (`proxy`), and the
sandbox they run in (`sandbox`, with the forwarder inside it, `_forwarder.c` compiled
or else `_forwarder`, and the python unit's worker process, `_pyworker`).

May import: `evalkit.foundations`, `evalkit.numbers`, `evalkit.checking`, `evalkit.suites`,
`evalkit.runfolder`, `evalkit.pii`, `evalkit.prompts`, `evalkit.datasets`, `evalkit.intake`.
"""
