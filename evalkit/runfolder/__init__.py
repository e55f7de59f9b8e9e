"""The run folder: written while a run goes, and loaded for analysis.

Samples, errors, summary, case table and verdicts written atomically (`runs`), sample text
files written off the event loop (`_samplewriter`), an agent sample's trajectory line by line
(`trajectories`), and the whole folder read back as typed DataFrames (`runload`).

May import: `evalkit.foundations`, `evalkit.numbers`, `evalkit.checking`, `evalkit.suites`.
"""
