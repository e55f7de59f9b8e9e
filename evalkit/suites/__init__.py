"""Suites and run folders: what evalkit reads and writes on disk.

A suite validated wherever it came from (`suite` and its parts `suite_*`, `loader`, and
`formats` for other tools' files), what a sample runs (`units`) and where its calls go
(`endpoints`), evaluation datasets (`dataset`), personal data and secrets (`privacy` and
its parts `privacy_*`), the CI workflow recipe (`workflow`); the run folder written
(`runs`, `_samplewriter`, `trajectories`) and loaded for analysis (`runload`).

May import: `evalkit.foundations`, `evalkit.numbers`, `evalkit.checking`.
"""
