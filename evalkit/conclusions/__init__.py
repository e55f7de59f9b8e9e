"""Conclusions: what a run's samples mean.

Grading a run folder (`grading`, and `agentevals` for agent-evals sample folders) and
the RESULTS block `evalkit grade` ends with (`results`),
another harness's results made a run folder (`ingest`), two-arm and conformance verdicts
(`verdicts`, `compare`), gates against a baseline (`gates`), micro-tests (`microtest`) and the judge's
findings on prompt files (`analyze_judge`, `evalkit analyze --judge`).

May import: every folder above it, up to `running`.
"""
