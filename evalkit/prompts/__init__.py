"""Static analysis of prompt and skill files: no model is called.

Missing links, nested conditions, MUST against MUST NOT, tools with no error path (`analyze`),
and a skill folder's context cost in tokens (`skills`).

May import: `evalkit.foundations`, `evalkit.numbers`, `evalkit.checking`, `evalkit.suites`,
`evalkit.runfolder`, `evalkit.pii`.
"""
