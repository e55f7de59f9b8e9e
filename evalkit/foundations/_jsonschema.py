"""Import jsonschema without its optional IRI grammar (and papermill after it).

Why: when the optional package `rfc3987_syntax` is installed (the Jupyter stack brings
it), `import jsonschema` compiles its IRI grammar with lark at import time, about a
second on a 2-core machine, on every CLI call that validates anything. evalkit's schemas
use no `iri` or `iri-reference` format, so that grammar is skipped while jsonschema is
first imported in this process; the package itself stays importable for anyone else.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import Any

# The first import is made by one thread at a time (a report's lanes import papermill at
# once): two that both blocked the grammar's package would both unblock it (a KeyError),
# and one could be handed the module another is still executing (`sys.modules` holds it
# from the start), without its names yet.
_LOCK = threading.Lock()
_IMPORTED: list[ModuleType] = []


def jsonschema() -> ModuleType:
    """The `jsonschema` module, imported without compiling the IRI grammar."""
    if _IMPORTED:
        return _IMPORTED[0]
    with _LOCK:
        if not _IMPORTED:
            _IMPORTED.append(_import_jsonschema())
    return _IMPORTED[0]


def _import_jsonschema() -> ModuleType:
    blocked = "jsonschema" not in sys.modules and "rfc3987_syntax" not in sys.modules
    if blocked:
        sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # makes its import fail fast
    try:
        import jsonschema as module  # the point of this module: imported on first use, never at start
    finally:
        if blocked:
            del sys.modules["rfc3987_syntax"]
    return module  # type: ignore[no-any-return]  # jsonschema ships no stubs


def papermill() -> ModuleType:
    """The `papermill` module, imported after `jsonschema` (above): nbformat validates
    notebooks with jsonschema, and no notebook schema uses an `iri` format, yet that
    grammar was a second of papermill's 1.4 s import."""
    jsonschema()
    import papermill as module  # lazy: papermill and the Jupyter stack load only when a notebook is run or written

    return module  # type: ignore[no-any-return]  # papermill ships no stubs


def offline_registry() -> Any:
    """A `referencing` registry that retrieves nothing: a JSON Schema's `$ref` resolves
    inside the schema itself (``#/$defs/x``) or not at all, so no check fetches a URL
    (a host that never answers would hang grading) or reads a file (`file:///dev/zero`).
    jsonschema's default retrieves remote references."""
    jsonschema()  # referencing is imported after it, as jsonschema imports it
    import referencing  # lazy: with jsonschema, only where a schema is checked
    import referencing.exceptions

    def retrieve(uri: str) -> Any:
        raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs fields

    return referencing.Registry(retrieve=retrieve)  # type: ignore[call-arg]


def remote_refs(schema: Any) -> list[tuple[str, str]]:
    """Every `$ref` and `$dynamicRef` of `schema` that points outside it (anything but a
    ``#...`` fragment), as (JSON path, reference): what lint refuses. Walked with a
    stack, so any depth is read."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[Any, str]] = [(schema, "$")]
    while stack:
        node, jp = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("$ref", "$dynamicRef") and isinstance(v, str) and not v.startswith("#"):
                    out.append((f"{jp}.{k}", v))
                stack.append((v, f"{jp}.{k}"))
        elif isinstance(node, list):
            stack.extend((v, f"{jp}[{i}]") for i, v in enumerate(node))
    return sorted(out)
