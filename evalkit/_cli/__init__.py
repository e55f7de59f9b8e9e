"""The `evalkit` command line: one module per command group.

`main` is the click group and loads a command's module only when it runs; `options` holds
options several commands share; `suite` (init, lint, import), `run`, `grade` (and judge),
`stats` (compare, verdict, power, gate, baseline, noise), `report` (and microtest),
`replay`, `batch`, `ingest`, `dataset`, `privacy`, `ci` (ci comment) and `serve` only collect arguments and
call the library; `demo` is `make demo`.

May import: every folder.
"""
