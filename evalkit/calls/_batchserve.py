"""The scripted server's Batch API: `/v1/files` and `/v1/batches` (`serve.ScriptedServer`).

Files are kept on disk in a private temporary folder (removed when the server stops),
uploaded as multipart and streamed back by `GET /v1/files/{id}/content`; their objects
are OpenAI's `FileObject`. A batch is OpenAI's `Batch`: ``validating`` (the input file
is checked line by line: JSON objects with a unique `custom_id`, `"method": "POST"`, the
batch's `url`, a `body` object with a `model`; at most `max_requests` lines and
`max_bytes` bytes), then ``in_progress`` (each line answered by the script's rules and
faults exactly as an online call, `ScriptedServer.batch_answer`), ``finalizing``, and
``completed``; or ``failed`` (validation), ``expired``, ``cancelling``/``cancelled``.
Result lines are OpenAI's: ``{"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error": null}``, a 200 in the output file, any other status in
the error file; a request that never ran is ``{"id", "custom_id", "response": null,
"error": {"code": "batch_expired" | "batch_cancelled", "message"}}`` in the error file.
`request_counts` counts completed (200) and failed (other statuses) requests.
A line that meets a `slow` fault with `"hold": true` waits (the batch with it) until
`ScriptedServer.release()`, setting `ScriptedServer.held`. A batch that ends (completed,
failed, expired, cancelled) wakes
`ScriptedServer.wait_until`, so a test can wait for it instead of polling.

Script (``"batch"``, all optional)::

    {"max_requests": 50000, "max_bytes": 200000000,   # the provider's limits
     "lines_per_s": 0,          # the pace (0: as fast as it can): slow progress
     "validating_s": 0, "finalizing_s": 0,
     "faults": [{"kind": "fail_validation", "message": "...", "times": 1},
                {"kind": "expire", "after_lines": 5, "times": 1},
                {"kind": "rogue", "times": 1}]}

A fault applies to the batches created while its `times` lasts (every batch without
it), the first that fits: `fail_validation` fails the batch in validation with
`message`; `expire` expires it once `after_lines` lines have run (the rest: not run);
`rogue` writes every result line twice (the second with the text ``ROGUE``) and adds
one for a custom id the batch does not have, as a faulty provider might.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
FILE_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
TERMINAL = ("completed", "failed", "expired", "cancelled")
NOT_RUN = {
    "expired": ("batch_expired", "This request could not be executed before the completion window expired."),
    "cancelled": ("batch_cancelled", "This request was not executed because the batch was cancelled."),
}

BATCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "max_requests": {"type": "integer", "minimum": 1},
        "max_bytes": {"type": "integer", "minimum": 1},
        "lines_per_s": {"type": "number", "minimum": 0},
        "validating_s": {"type": "number", "minimum": 0},
        "finalizing_s": {"type": "number", "minimum": 0},
        "faults": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["kind"],
                "additionalProperties": False,
                "properties": {
                    "kind": {"enum": ["fail_validation", "expire", "rogue"]},
                    "times": {"type": "integer", "minimum": 0},
                    "after_lines": {"type": "integer", "minimum": 0},
                    "message": {"type": "string", "minLength": 1},
                },
            },
        },
    },
}


def _rogue(line: dict[str, Any]) -> dict[str, Any]:
    """A second result for the same line, its text replaced."""
    dup: dict[str, Any] = json.loads(json.dumps(line))
    body = (dup.get("response") or {}).get("body")
    for choice in body.get("choices", []) if isinstance(body, dict) else []:
        if "text" in choice:
            choice["text"] = "ROGUE"
        elif isinstance(choice.get("message"), dict):
            choice["message"]["content"] = "ROGUE"
    dup["id"] = _id("batch_req_")
    return dup


def _id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


class BatchStore:
    """The files and batches of one `ScriptedServer`, served on its event loop."""

    def __init__(self, server: Any, spec: dict[str, Any]) -> None:
        self.server = server
        self.max_requests = int(spec.get("max_requests", 50_000))
        self.max_bytes = int(spec.get("max_bytes", 200_000_000))
        self.lines_per_s = float(spec.get("lines_per_s", 0.0))
        self.validating_s = float(spec.get("validating_s", 0.0))
        self.finalizing_s = float(spec.get("finalizing_s", 0.0))
        self.faults: list[dict[str, Any]] = list(spec.get("faults", []))
        self._fault_left: list[int | None] = [f.get("times") for f in self.faults]
        self.files: dict[str, dict[str, Any]] = {}  # id -> FileObject
        self.batches: dict[str, dict[str, Any]] = {}  # id -> Batch (in creation order)
        self.stats = {"uploads": 0, "batches": 0, "lines": 0, "cancels": 0}
        self._paths: dict[str, Path] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._cancel: set[str] = set()
        self._dir: Path | None = None

    # -- plumbing ------------------------------------------------------------------------

    def add_routes(self, app: Any) -> None:
        r = app.router
        r.add_post("/v1/files", self._upload)
        r.add_get("/v1/files", self._list_files)
        r.add_get("/v1/files/{file_id}", self._file)
        r.add_delete("/v1/files/{file_id}", self._delete_file)
        r.add_get("/v1/files/{file_id}/content", self._content)
        r.add_post("/v1/batches", self._create)
        r.add_get("/v1/batches", self._list_batches)
        r.add_get("/v1/batches/{batch_id}", self._batch)
        r.add_post("/v1/batches/{batch_id}/cancel", self._cancel_batch)

    def _folder(self) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="evalkit-scripted-files-"))
        return self._dir

    async def aclose(self) -> None:
        """Stop the batches in progress and delete the files."""
        for t in self._tasks.values():
            t.cancel()
        for t in self._tasks.values():
            try:
                await t
            except BaseException:  # noqa: BLE001, S110 - a cancelled task's end says nothing
                pass
        self._tasks.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _error(self, status: int, message: str, code: str | None = None, param: str | None = None) -> Any:
        from aiohttp import web  # lazy: aiohttp loads only when a scripted server serves

        body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
        return web.json_response(body, status=status)

    def _add_file(self, path: Path, filename: str, purpose: str) -> dict[str, Any]:
        fid = _id("file-")
        dest = self._folder() / fid
        if path != dest:
            path.rename(dest)
        obj = {
            "id": fid,
            "object": "file",
            "bytes": dest.stat().st_size,
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }
        self.files[fid] = obj
        self._paths[fid] = dest
        return obj

    # -- files ---------------------------------------------------------------------------

    async def _upload(self, request: Any) -> Any:
        from aiohttp import web  # lazy: aiohttp loads only when a scripted server serves

        if not request.content_type.startswith("multipart/"):
            return self._error(400, "uploads are multipart/form-data with 'file' and 'purpose'")
        reader = await request.multipart()
        purpose: str | None = None
        got: tuple[Path, str] | None = None
        tmp = self._folder() / _id("upload-")
        try:
            while True:
                part = await reader.next()
                if part is None:
                    break
                if part.name == "purpose":
                    purpose = await part.text()
                elif part.name == "file":
                    with open(tmp, "wb") as fh:  # streamed: a 200 MB file never sits in memory
                        while True:
                            chunk = await part.read_chunk()
                            if not chunk:
                                break
                            fh.write(chunk)
                    got = (tmp, part.filename or "upload")
                else:
                    await part.read()
            if got is None:
                return self._error(400, "'file' is required", param="file")
            if purpose not in FILE_PURPOSES:
                return self._error(400, f"'purpose' must be one of {', '.join(FILE_PURPOSES)}", param="purpose")
            obj = self._add_file(got[0], got[1], purpose)
        finally:
            tmp.unlink(missing_ok=True)
        self.stats["uploads"] += 1
        return web.json_response(obj)

    async def _list_files(self, request: Any) -> Any:
        from aiohttp import web  # lazy: aiohttp loads only when a scripted server serves

        q = request.query
        rows = [f for f in self.files.values() if q.get("purpose") in (None, f["purpose"])]
        rows.sort(key=lambda f: f["created_at"], reverse=q.get("order", "desc") != "asc")
        return web.json_response(self._page(rows, q, default_limit=10_000))

    @staticmethod
    def _page(rows: list[dict[str, Any]], q: Any, default_limit: int) -> dict[str, Any]:
        if q.get("after"):
            ids = [r["id"] for r in rows]
            rows = rows[ids.index(q["after"]) + 1 :] if q["after"] in ids else []
        limit = int(q.get("limit") or default_limit)
        page = rows[:limit]
        return {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(rows) > limit,
        }

    async def _file(self, request: Any) -> Any:
        from aiohttp import web  # lazy: aiohttp loads only when a scripted server serves

        obj = self.files.get(request.match_info["file_id"])
        if obj is None:
            return self._error(404, f"No such File object: {request.match_info['file_id']}", param="id")
        return web.json_response(obj)

    async def _delete_file(self, request: Any) -> Any:
        from aiohttp import web  # lazy: aiohttp loads only when a scripted server serves

        fid = request.match_info["file_id"]
        if self.files.pop(fid, None) is None:
            return self._error(404, f"No such File object: {fid}", param="id")
        self._paths.pop(fid).unlink(missing_ok=True)
        return web.json_response({"id": fid, "object": "file", "deleted": True})

    async def _content(self, request: Any) -> Any:
        from aiohttp import web  # lazy: aiohttp loads only when a scripted server serves

        fid = request.match_info["file_id"]
        if fid not in self.files:
            return self._error(404, f"No such File object: {fid}", param="id")
        return web.FileResponse(self._paths[fid], headers={"Content-Type": "application/octet-stream"})

    # -- batches -------------------------------------------------------------------------

    async def _create(self, request: Any) -> Any:
        from aiohttp import web  # lazy: aiohttp loads only when a scripted server serves

        try:
            body = json.loads(await request.read())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._error(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return self._error(400, "request body must be a JSON object")
        fid, endpoint, window = body.get("input_file_id"), body.get("endpoint"), body.get("completion_window")
        meta = body.get("metadata")
        f = self.files.get(fid) if isinstance(fid, str) else None
        if f is None:
            return self._error(400, f"No such File object: {fid}", "invalid_file", "input_file_id")
        if f["purpose"] != "batch":
            return self._error(400, f"file {fid} was not uploaded for purpose 'batch'", "invalid_file", "input_file_id")
        if endpoint not in BATCH_ENDPOINTS:
            return self._error(
                400, f"endpoint must be one of {', '.join(BATCH_ENDPOINTS)}", "invalid_value", "endpoint"
            )
        if window != "24h":
            return self._error(400, "completion_window must be '24h'", "invalid_value", "completion_window")
        if meta is not None and not (
            isinstance(meta, dict) and len(meta) <= 16 and all(isinstance(v, str) for v in meta.values())
        ):
            return self._error(400, "metadata is at most 16 string values", "invalid_value", "metadata")
        now = int(time.time())
        b: dict[str, Any] = {
            "id": _id("batch_"),
            "object": "batch",
            "endpoint": endpoint,
            "errors": None,
            "input_file_id": fid,
            "completion_window": window,
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            "in_progress_at": None,
            "expires_at": now + 24 * 3600,
            "finalizing_at": None,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "metadata": meta,
        }
        self.batches[b["id"]] = b
        self.stats["batches"] += 1
        self._tasks[b["id"]] = asyncio.ensure_future(self._run(b, self._pick_fault()))
        return web.json_response(b)

    def _pick_fault(self) -> dict[str, Any] | None:
        for i, fault in enumerate(self.faults):
            left = self._fault_left[i]
            if left is not None and left <= 0:
                continue
            if left is not None:
                self._fault_left[i] = left - 1
            return fault
        return None

    async def _list_batches(self, request: Any) -> Any:
        from aiohttp import web  # lazy: aiohttp loads only when a scripted server serves

        rows = list(reversed(self.batches.values()))  # newest first, as OpenAI lists them
        return web.json_response(self._page(rows, request.query, default_limit=20))

    async def _batch(self, request: Any) -> Any:
        from aiohttp import web  # lazy: aiohttp loads only when a scripted server serves

        b = self.batches.get(request.match_info["batch_id"])
        if b is None:
            return self._error(404, f"No batch found with id '{request.match_info['batch_id']}'", param="batch_id")
        return web.json_response(b)

    async def _cancel_batch(self, request: Any) -> Any:
        from aiohttp import web  # lazy: aiohttp loads only when a scripted server serves

        b = self.batches.get(request.match_info["batch_id"])
        if b is None:
            return self._error(404, f"No batch found with id '{request.match_info['batch_id']}'", param="batch_id")
        if b["status"] in TERMINAL:
            return self._error(409, f"Cannot cancel a batch with status '{b['status']}'.", "invalid_state")
        if b["status"] != "cancelling":
            self.stats["cancels"] += 1
            self._cancel.add(b["id"])
            b.update(status="cancelling", cancelling_at=int(time.time()))
        return web.json_response(b)

    # -- running a batch -----------------------------------------------------------------

    def _validate(self, b: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
        """The input file's problems (OpenAI's `errors.data` objects, at most 20) and
        its number of requests."""
        path = self._paths[b["input_file_id"]]
        problems: list[dict[str, Any]] = []
        size = path.stat().st_size
        if size > self.max_bytes:
            message = f"The input file is {size} bytes; at most {self.max_bytes} bytes are allowed."
            return [{"code": "file_too_large", "message": message, "param": None, "line": None}], 0
        ids: set[str] = set()
        n = 0

        def bad(line: int, code: str, message: str, param: str | None = None) -> None:
            if len(problems) < 20:
                problems.append({"code": code, "message": message, "param": param, "line": line})

        with open(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                n += 1
                try:
                    obj = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    bad(lineno, "invalid_json_line", f"Line {lineno} is not valid JSON.")
                    continue
                if not isinstance(obj, dict):
                    bad(lineno, "invalid_request", f"Line {lineno} is not a JSON object.")
                    continue
                cid = obj.get("custom_id")
                if not isinstance(cid, str) or not cid:
                    bad(lineno, "missing_required_parameter", "Each request needs a custom_id.", "custom_id")
                elif cid in ids:
                    bad(
                        lineno,
                        "duplicate_custom_id",
                        "The custom_id for this request is a duplicate of another request. The custom_id "
                        "parameter must be unique for each request in a batch.",
                        "custom_id",
                    )
                else:
                    ids.add(cid)
                if obj.get("method") != "POST":
                    bad(lineno, "invalid_value", "Only POST requests are supported.", "method")
                if obj.get("url") != b["endpoint"]:
                    bad(
                        lineno,
                        "mismatched_url",
                        f"The url {obj.get('url')!r} does not match the batch's endpoint {b['endpoint']}.",
                        "url",
                    )
                body = obj.get("body")
                if not isinstance(body, dict) or not isinstance(body.get("model"), str):
                    bad(lineno, "invalid_request", "Each request needs a body object with a model.", "body")
        if n == 0:
            bad(1, "empty_file", "The input file has no requests.")
        elif n > self.max_requests:
            bad(n, "too_many_requests", f"The input file has {n} requests; at most {self.max_requests} are allowed.")
        return problems, n

    async def _run(self, b: dict[str, Any], fault: dict[str, Any] | None) -> None:
        await asyncio.sleep(self.validating_s)
        problems, total = await asyncio.get_running_loop().run_in_executor(None, self._validate, b)
        if fault is not None and fault["kind"] == "fail_validation":
            problems = [
                {
                    "code": "invalid_request",
                    "message": fault.get("message", "The batch failed validation (scripted fault)."),
                    "param": None,
                    "line": None,
                }
            ] + problems
        if problems:
            b.update(status="failed", failed_at=int(time.time()), errors={"object": "list", "data": problems})
            self.server._counted()  # it ended: wakes `ScriptedServer.wait_until`, as every end does
            return
        if b["id"] in self._cancel:
            return await self._finish(b, None, 0)
        b.update(status="in_progress", in_progress_at=int(time.time()))
        expire_after = fault.get("after_lines", 0) if fault is not None and fault["kind"] == "expire" else None
        rogue = fault is not None and fault["kind"] == "rogue"
        folder = self._folder()
        out_path, err_path = folder / _id("out-"), folder / _id("err-")
        counts = b["request_counts"]
        ran = 0
        started = time.monotonic()
        counts["total"] = total
        ended: str | None = None
        with (
            open(self._paths[b["input_file_id"]], "rb") as fh,
            open(out_path, "w", encoding="utf-8") as out,
            open(err_path, "w", encoding="utf-8") as err,
        ):
            lines = (raw for raw in fh if raw.strip())
            for raw in lines:
                if b["id"] in self._cancel:
                    ended = "cancelled"
                    break
                if expire_after is not None and ran >= expire_after:
                    ended = "expired"
                    break
                obj = json.loads(raw)
                status, payload, delay = self.server.batch_answer(obj["body"], b["endpoint"])
                if delay == math.inf:  # a `slow` fault with "hold": wait for ScriptedServer.release()
                    self.server.held.set()
                    await asyncio.get_running_loop().run_in_executor(None, self.server._released.wait)
                elif delay:
                    await asyncio.sleep(delay)
                ran += 1
                self.stats["lines"] += 1
                if status is not None:  # None: the `drop` fault lost the line
                    line = {
                        "id": _id("batch_req_"),
                        "custom_id": obj["custom_id"],
                        "response": {"status_code": status, "request_id": _id("req_"), "body": payload},
                        "error": None,
                    }
                    (out if status == 200 else err).write(json.dumps(line, ensure_ascii=False) + "\n")
                    counts["completed" if status == 200 else "failed"] += 1
                    if rogue:
                        out.write(json.dumps(_rogue(line), ensure_ascii=False) + "\n")
                if self.lines_per_s > 0:
                    wait = started + ran / self.lines_per_s - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                elif ran % 100 == 0:
                    await asyncio.sleep(0)  # let status requests in
            if rogue:
                foreign: dict[str, Any] = {"id": _id("batch_req_"), "custom_id": "no-such-case/no-such-arm/0"}
                foreign["response"] = {"status_code": 200, "request_id": _id("req_"), "body": {"choices": []}}
                foreign["error"] = None
                out.write(json.dumps(foreign) + "\n")
            if ended is not None:
                code, message = NOT_RUN[ended]
                for rest in itertools.chain([raw], lines):  # the line it stopped at, and every one after it
                    cid = json.loads(rest)["custom_id"]
                    line = {"id": _id("batch_req_"), "custom_id": cid, "response": None}
                    line["error"] = {"code": code, "message": message}
                    err.write(json.dumps(line, ensure_ascii=False) + "\n")
        await self._finish(b, (out_path, err_path), ran, ended)

    async def _finish(
        self, b: dict[str, Any], paths: tuple[Path, Path] | None, ran: int, ended: str | None = None
    ) -> None:
        if paths is None:  # cancelled while validating: nothing ran, nothing written
            b.update(status="cancelled", cancelled_at=int(time.time()))
            self.server._counted()
            return
        if ended is None:
            b.update(status="finalizing", finalizing_at=int(time.time()))
            await asyncio.sleep(self.finalizing_s)
        out_path, err_path = paths
        for path, field, suffix in ((out_path, "output_file_id", "output"), (err_path, "error_file_id", "error")):
            if path.stat().st_size:
                b[field] = self._add_file(path, f"{b['id']}_{suffix}.jsonl", "batch_output")["id"]
            else:
                path.unlink()
        now = int(time.time())
        if ended == "cancelled":
            b.update(status="cancelled", cancelled_at=now)
        elif ended == "expired":
            b.update(status="expired", expired_at=now)
        else:
            b.update(status="completed", completed_at=now)
        self.server._counted()  # a batch that ends wakes `ScriptedServer.wait_until` (tests wait on it)
