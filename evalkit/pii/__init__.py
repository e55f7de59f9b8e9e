"""Personal data and secrets: found in suites, datasets and outputs, redacted, never repeated.

What is found and by what (`privacy_detect`), the allow-list and JSON walked string by string
(`privacy_policy`), the scans and the gate a run passes before it sends a suite's text
(`privacy_gate`), redaction and the leak check (`privacy_redact`), and the names the rest of
evalkit uses (`privacy`).

May import: `evalkit.foundations`, `evalkit.numbers`, `evalkit.checking`, `evalkit.suites`,
`evalkit.runfolder`.
"""
