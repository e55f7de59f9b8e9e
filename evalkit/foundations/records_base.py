"""What every record module shares: `Json`, the case sets and what each is gated on, and the
schema check an artifact's `from_json` starts with. Split out of `evalkit.foundations.records`,
which re-exports every public name.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from evalkit.foundations.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

Json = Any
CaseSet = str  # "capability" (gated on pass@k), "regression" (pass^k), or any other name (not gated)

# --- case sets: what each is gated on ---------------------------------------------------

CASE_SETS = ("capability", "regression")  # the gated sets; any other set is measured, not gated
SET_GATES = {"capability": "pass@k", "regression": "pass^k"}
NO_GATE = "none"
SET_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def set_gate(case_set: str) -> str:
    """What a case's set is gated on: `pass@k` (capability), `pass^k` (regression), or
    `none` for any other set, whose cases are measured and shown but never gated (as the
    agent-evals harness treats a set it does not know)."""
    return SET_GATES.get(case_set, NO_GATE)


def ungated_set_warning(case_set: str) -> str:
    """The warning for a case in a set that is not gated, with the gated set it may be a
    typo of (so a misspelt `regresion` does not silently drop a case from the gate)."""
    close = difflib.get_close_matches(case_set, CASE_SETS, n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"set {case_set!r} is neither capability nor regression: its cases are measured and shown "
        f'with gate "none", never gated{hint}'
    )


# ==========================================================================================
# Artifacts: what each step writes for the next one to read (docs/formats.md). Each has a
# schema name with a version, `to_json()` and `from_json()`; `from_json` reads the files
# of earlier versions too (their old keys), so an old run folder still loads.
# ==========================================================================================


def _num_or_none(x: Any) -> float | None:
    """A number as JSON can hold it: NaN and infinities (and non-numbers) become None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return None if x != x or x in (float("inf"), float("-inf")) else float(x)


def _check_schema(d: Any, schema: str, what: str) -> dict[str, Any]:
    """`d` when it is a JSON object whose `schema` is `schema` (or absent: a file from
    before schemas); `InputError` otherwise."""
    if not isinstance(d, dict):
        raise InputError(f"{what} must be a JSON object, got {type(d).__name__}", json_path="$")
    found = d.get("schema")
    if found is not None and found != schema:
        name, _, version = str(found).rpartition("/")
        mine, _, my_version = schema.rpartition("/")
        if name != mine or not version.isdigit() or int(version) > int(my_version):
            raise InputError(f"{what} has schema {found!r}; this evalkit reads {schema!r}", json_path="$.schema")
    return d


def records_frame(records: Sequence[Any], record_type: type | None = None) -> pd.DataFrame:
    """A DataFrame of dataclass records (`verdicts.paired_trials`), one row each, their
    fields as columns in field order, the values as they are: the frame
    `pd.DataFrame([dataclasses.asdict(r) for r in records])` gives, without a deep copy
    of every record (50,000 trials: 0.28 s, now 0.04 s). No records: a frame with
    `record_type`'s fields as its columns, or none without it."""
    import pandas as pd  # lazy: pandas only where a frame is made (the CLI's light commands load none)

    kind = record_type if record_type is not None else type(records[0]) if records else None
    if kind is None:
        return pd.DataFrame()
    names = [f.name for f in dataclasses.fields(kind)]
    return pd.DataFrame.from_records([tuple(getattr(r, n) for n in names) for r in records], columns=names)
