"""The suite format: what a suite is and how it is read, wherever it came from.

A suite validated (`suite` and its parts `suite_*`), found and loaded (`reader`), read from
other tools' files (`formats`: agent-evals, Vally/SKRAFT, Waza), what a sample runs
(`units`) and where its calls go (`endpoints`).

May import: `evalkit.foundations`, `evalkit.numbers`, `evalkit.checking`.
"""
