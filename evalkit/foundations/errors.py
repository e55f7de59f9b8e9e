"""Exceptions evalkit raises, and the exit status each one maps to.

Every error that comes from a user's file carries the place it came from (file, line,
JSON path) so the message can point there. The CLI turns `InputError` into exit 2.
"""

from __future__ import annotations

from pathlib import Path


class EvalkitError(Exception):
    """Base class for evalkit errors. `exit_code` is what the CLI exits with."""

    exit_code = 1


class InputError(EvalkitError):
    """Bad input from a user's file or flag: exit 2, nothing written.

    `path`, `line` (1-based) and `json_path` (like ``$.cases[3].id``) say where.
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        path: str | Path | None = None,
        line: int | None = None,
        json_path: str | None = None,
    ) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.json_path = json_path
        super().__init__(self.__str__())

    def location(self) -> str:
        where = self.path or ""
        if self.line is not None:
            where += f":{self.line}"
        if self.json_path:
            where += f" ({self.json_path})" if where else self.json_path
        return where

    def __str__(self) -> str:
        where = self.location()
        return f"{where}: {self.message}" if where else self.message


class InputErrors(InputError):
    """Several input errors found in one pass (e.g. every duplicate id), reported together."""

    def __init__(self, errors: list[InputError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.message, first.path, first.line, first.json_path)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


class FileTooLarge(InputError):
    """A user's file is over the size limit of what reads it: `size` bytes (None when it
    grew past `limit` while being read)."""

    def __init__(self, message: str, path: str | Path | None = None, *, size: int | None, limit: int) -> None:
        self.size, self.limit = size, limit
        super().__init__(message, path)


class BudgetExhausted(EvalkitError):
    """The ledger refused a reservation: committed + reserved would pass the cost cap."""


class CeilingBreached(EvalkitError):
    """A response reported more usage than its reservation: a token ceiling did not reach
    the API. The run stops."""


class InputTooLong(EvalkitError):
    """The counted input is over `max_tokens_in`: the case fails before any call."""


class ReplayMiss(EvalkitError):
    """`--replay-only` and the response cache has no entry for the request."""


class JudgeError(EvalkitError):
    """The judge's answer could not be parsed, or the judge call failed."""


class UnitCallError(EvalkitError):
    """A model call failed after its last retry; the cause is recorded, no output invented."""


class RedactionIncomplete(EvalkitError):
    """A redacted report still held a value the redaction replaced; the files that did
    were removed."""


class PrivateDataFound(EvalkitError):
    """The scan gate found personal data or a secret in what was about to be written
    (seed 004: "stop the durable write"): exit 1, nothing written."""


class DiskFull(EvalkitError):
    """A write to a run's files found no room (ENOSPC, EDQUOT, or EFBIG: a file size
    limit). The run stops INCOMPLETE; what was written stays parseable, and a resume
    goes on once there is room again. `path` is the file that could not be written."""

    def __init__(self, path: str | Path, strerror: str = "No space left on device") -> None:
        self.path = str(path)
        self.strerror = strerror
        super().__init__(f"disk full: {self.path} ({strerror})")
