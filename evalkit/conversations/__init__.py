"""Conversations: a simulated user and the unit under test taking turns.

The simulated user (`simulator`: its prompt rendered from a case's `input.user`, its
stop markers) and one conversation run to its ending (`loop`), each call of either
side reserved on the run's one ledger.

May import: every folder above it: `foundations`, `numbers`, `checking`, `suites`, `runfolder`,
`pii`, `prompts`, `datasets`, `intake`, `calls`.
"""
