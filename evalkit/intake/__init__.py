"""A suite checked before it runs, and written only after it lints.

`lint`: validation with everything only lint adds (the privacy scan, the prompt files'
analysis, the side files `grade` and `report` read), and the suites written after linting:
another tool's suite imported, an evaluation dataset as a suite.

May import: `evalkit.foundations`, `evalkit.numbers`, `evalkit.checking`, `evalkit.suites`,
`evalkit.runfolder`, `evalkit.pii`, `evalkit.prompts`, `evalkit.datasets`.
"""
