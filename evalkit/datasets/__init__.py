"""Evaluation datasets, as seed 004's contract has them.

The v1 contract, its validator, `new` and `sample` (`dataset`), the scoping interview and
its scope file (`scope`), the sample review (`review`), the evaluation guide (`guide`), and a
dataset turned into suite parts (`to_suite`).

May import: `evalkit.foundations`, `evalkit.numbers`, `evalkit.checking`, `evalkit.suites`,
`evalkit.runfolder`, `evalkit.pii`, `evalkit.prompts`.
"""
