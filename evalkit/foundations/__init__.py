"""Foundations: the leaves every other layer stands on.

Exceptions and their exit statuses (`errors`), every file name of a suite, run and report
folder (`layout`), the check kinds a case may declare (`checks`), text made storable and
printable (`_text`), numbers as people read them (`fmt`), jsonschema without its optional
IRI grammar (`_jsonschema`), a request's tokens counted offline (`tokens`), user files read
safely and the one atomic writer (`_io`), the typed frozen records steps hand each other
(`records`, which re-exports its parts `records_*`), and the one `Finding` (`findings`).

May import: the standard library and third-party libraries only, and other modules of
this folder. Nothing here imports another evalkit folder.
"""
