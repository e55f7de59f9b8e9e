"""The Anthropic Messages API's wire shapes (``POST /v1/messages``), translated to chat.

The metering proxy (`evalkit.calls.proxy`) serves an agent written on the anthropic SDK
(or LangChain's ChatAnthropic, pydantic-ai's Anthropic model) through the run's one
OpenAI-compatible client, so its calls are reserved, settled, cached and recorded as a
chat call is:

* `messages_arguments`: a Messages request as `SampleSession.model_call` keywords (chat
  messages and function tools); what a chat endpoint cannot serve exactly, or what bills
  beyond the reservation (an image or a document, a server tool, extended thinking, a
  service tier, a container), is refused (`ValueError` naming it);
* `message_body`: an answer as a ``message`` object (text and ``tool_use`` blocks, the
  stop reason, `usage` with `input_tokens`, `output_tokens` and the cache counts);
* `message_events`: that object as the server-sent events a streamed call gets
  (``message_start``, per block ``content_block_start`` / ``_delta`` / ``_stop``,
  ``message_delta`` with the stop reason and output tokens, ``message_stop``).

The shapes follow the anthropic python SDK 2.x types (`anthropic.types`: `Message`,
`Usage`, the ``Raw*Event`` stream events). Written by hand: the SDK builds none from parts.
"""

from __future__ import annotations

import json
from typing import Any

from evalkit.foundations._text import storable_json

ANTHROPIC_VERSION = "2023-06-01"  # the `anthropic-version` header of a call passed through to Anthropic
# Request fields that change nothing a call costs beyond its reservation, taken as they are.
_IGNORED = frozenset({"cache_control"})  # a prompt-cache hint: a chat endpoint has no such cache
# Request fields refused, and why (anything not read nor named here is refused too).
_REFUSED = {
    "thinking": "extended thinking is not served through a chat endpoint",
    "service_tier": "it may bill what the reservation does not cover",
    "container": "a container tool bills its own use",
    "mcp_servers": "an MCP server's tools bill their own use",
    "context_management": "it edits input the proxy counts",
}
# Chat's finish reasons and the Messages API's stop reasons for each.
_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
TEXT_FIELDS = frozenset({"type", "text", "cache_control", "citations"})


def _text_of(blocks: Any, where: str) -> str:
    """The text of a string or a list of text blocks; `ValueError` for anything else."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise ValueError(f"{where} must be a string or a list of text blocks")
    return "\n".join(_text_block(b, f"{where}[{j}]") for j, b in enumerate(blocks))


def _text_block(block: Any, where: str) -> str:
    """The text of one text block; `ValueError` for any other block (an image, a
    document: input a text bound does not see) or a text block carrying more."""
    kind = block.get("type") if isinstance(block, dict) else type(block).__name__
    if kind != "text" or not isinstance(block.get("text"), str) or not TEXT_FIELDS.issuperset(block):
        raise ValueError(f"{where} of type {kind!r} is not served (only text blocks are metered)")
    return str(block["text"])


def _tool_use(block: dict[str, Any], where: str) -> dict[str, Any]:
    """An assistant's ``tool_use`` block as a chat tool call."""
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise ValueError(f"{where} needs a string id and name")
    args = json.dumps(block.get("input") or {}, ensure_ascii=False)
    return {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": args}}


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    """A user's ``tool_result`` block as a chat tool message (an error result says so)."""
    if not isinstance(block.get("tool_use_id"), str):
        raise ValueError(f"{where} needs a string tool_use_id")
    text = _text_of(block.get("content", ""), f"{where}.content")
    if block.get("is_error"):
        text = f"error: {text}"
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}


def _turn(i: int, m: Any) -> list[dict[str, Any]]:
    """One Messages turn as chat messages: a user turn's tool results first (as tool
    messages), then its text; an assistant turn's text with its tool calls."""
    if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
        raise ValueError(f"messages[{i}] must be an object with role user or assistant")
    role, content = m["role"], m.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise ValueError(f"messages[{i}].content must be a string or a list of content blocks")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for j, b in enumerate(content):
        where = f"messages[{i}].content[{j}]"
        kind = b.get("type") if isinstance(b, dict) else type(b).__name__
        if kind == "tool_use" and role == "assistant":
            calls.append(_tool_use(b, where))
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(b, where))
        else:
            texts.append(_text_block(b, where))
    out = list(results)
    if role == "assistant":
        msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    elif texts or not results:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    """Custom tools as chat function tools; a server tool (web search, code execution,
    ...) is refused: it bills its own use."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ValueError("tools must be a list of tool objects")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type", "custom") not in ("custom", None) or "input_schema" not in t:
            kind = t.get("type") if isinstance(t, dict) else type(t).__name__
            raise ValueError(
                f"tools[{i}].type={kind!r} is not served (only custom tools with input_schema are metered)"
            )
        fn = {"name": t.get("name"), "parameters": t["input_schema"]}
        if t.get("description"):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out or None


def _tool_choice(choice: Any, extra: dict[str, Any]) -> None:
    """`tool_choice` in chat's terms, into `extra` (``any`` is ``required``)."""
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool" and isinstance(choice.get("name"), str):
        extra["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif kind in ("auto", "any", "none"):
        extra["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
    else:
        raise ValueError(f"tool_choice={choice!r} is not served")
    if choice.get("disable_parallel_tool_use"):
        extra["parallel_tool_calls"] = False


def _system(system: Any) -> list[dict[str, Any]]:
    return [] if system in (None, "", []) else [{"role": "system", "content": _text_of(system, "system")}]


def messages_arguments(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """`SampleSession.model_call` keywords (chat) from a Messages request body, and
    whether it streams; `ValueError` naming what cannot be metered exactly."""
    native = native_body(body)
    body = {k: v for k, v in body.items() if v is not None and k not in _IGNORED}
    stream = bool(body.pop("stream", False))
    for name, why in _REFUSED.items():
        if name in body and not (name == "thinking" and body[name] == {"type": "disabled"}):
            raise ValueError(f"{name}={body[name]!r} is not served ({why})")
        body.pop(name, None)
    wanted = body.pop("max_tokens", None)
    if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {wanted!r}")
    turns = body.pop("messages", None)
    if not isinstance(turns, list) or not turns:
        raise ValueError("messages must be a non-empty list of message objects")
    messages = _system(body.pop("system", None)) + [m for i, t in enumerate(turns) for m in _turn(i, t)]
    extra: dict[str, Any] = {}
    _tool_choice(body.pop("tool_choice", None), extra)
    metadata = body.pop("metadata", None)
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        extra["user"] = metadata["user_id"]
    for name in ("top_p", "top_k"):
        if name in body:
            extra[name] = body.pop(name)
    stop = body.pop("stop_sequences", None)
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise ValueError("stop_sequences must be a list of strings")
    model = body.pop("model", None)
    kw: dict[str, Any] = {
        "messages": messages,
        "tools": _tools(body.pop("tools", None)),
        "temperature": body.pop("temperature", None),
        "stop": stop or None,
        "max_tokens": wanted,
        "requested_model": model if isinstance(model, str) else None,
        "extra": extra or None,
        "wire": "anthropic",
        "native": {"anthropic": native},
    }
    if body:
        name = sorted(body)[0]
        raise ValueError(f"the field {name!r} is not served (it may bill what the reservation does not cover)")
    return kw, stream


def _input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as a ``tool_use`` input object (text that is no JSON
    object is kept under ``"arguments"``)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return {"arguments": arguments}
    return arguments if isinstance(arguments, dict) else {"arguments": arguments}


def usage_body(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """A Messages `usage` object (no prompt cache behind a chat endpoint: its counts are 0)."""
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    }


def message_body(
    *, rid: str, model: str, text: str, tool_calls: Any, finish_reason: str | None, usage: dict[str, Any]
) -> dict[str, Any]:
    """The ``message`` object of a finished call: its text block (when there is text, or
    nothing else), then one ``tool_use`` block per tool call (its id, or ``toolu_`` and
    the index)."""
    calls = list(tool_calls or ())
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text or not calls else []
    for i, tc in enumerate(calls):
        tid = tc.get("id") or f"toolu_evalkit_{i}"
        content.append({"type": "tool_use", "id": tid, "name": tc.get("name"), "input": _input(tc.get("arguments"))})
    finish = finish_reason or ("tool_calls" if calls else "stop")
    return {
        "id": f"msg_{rid}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP.get(finish, "end_turn"),
        "stop_sequence": None,
        "usage": usage,
    }


def message_events(message: dict[str, Any]) -> bytes:
    """`message` as the server-sent events of a streamed call (the module docstring)."""
    events: list[dict[str, Any]] = []
    usage = message["usage"]
    head = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
    events.append({"type": "message_start", "message": head})
    for index, block in enumerate(message["content"]):
        start: dict[str, Any]
        delta: dict[str, Any]
        if block["type"] == "text":
            start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append({"type": "message_delta", "delta": stop, "usage": usage})
    events.append({"type": "message_stop"})
    text = "".join(f"event: {e['type']}\ndata: {storable_json(e)}\n\n" for e in events)
    return text.encode("utf-8", "surrogatepass")


# The Messages API's stop reasons as chat's finish reasons (an answer read upstream).
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


def native_body(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as it passes through to an Anthropic endpoint (`api:
    anthropic`): without `stream` (one non-streamed call, as every upstream call is),
    `model` and `max_tokens` (the client sets both) and every `cache_control` (a cache
    write bills above the input price the reservation holds)."""

    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k != "cache_control"}
        return [strip(x) for x in v] if isinstance(v, list) else v

    dropped = ("stream", "model", "max_tokens")
    return {k: strip(v) for k, v in body.items() if v is not None and k not in dropped and k != "cache_control"}


def _block(i: int, b: Any) -> tuple[str | None, dict[str, Any] | None]:
    """One answer content block: its text, or its tool call; thinking blocks are
    neither (their tokens are in the output count); any other is no answer."""
    kind = b.get("type") if isinstance(b, dict) else None
    if kind == "text" and isinstance(b.get("text"), str):
        return b["text"], None
    if kind == "tool_use" and isinstance(b.get("name"), str) and isinstance(b.get("id"), str):
        return None, {"name": b["name"], "arguments": b.get("input"), "id": b["id"]}
    if kind in ("thinking", "redacted_thinking"):
        return None, None
    raise ValueError(f"content[{i}] is a block of type {kind!r}, which the proxy does not pass on")


_CACHE_COUNTS = ("cache_creation_input_tokens", "cache_read_input_tokens")


def _whole(x: Any) -> int | None:
    """`x` as a non-negative whole count (an integral float such as 12.0 included), else None."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x if x >= 0 else None
    return int(x) if isinstance(x, float) and x.is_integer() and x >= 0 else None


def _input_count(u: dict[str, Any]) -> Any:
    """The input count of a Messages `usage`: `input_tokens` plus the cache writes and
    reads it leaves out (absent or null: 0). A cache count that is not a whole number makes the count a
    text saying so, which `ledger.reported_usage` does not trust (the call is settled at
    its reservation), never `input_tokens` alone, a lower count than what was served."""
    n_in = u.get("input_tokens")
    total = _whole(n_in)
    if total is None:
        return n_in  # untrusted as it is
    for key in _CACHE_COUNTS:
        n = 0 if u.get(key) is None else _whole(u[key])  # absent or null: none
        if n is None:
            return f"{key}={str(u[key])[:20]}"
        total += n
    return total


def read_message(body: Any) -> tuple[str, tuple[dict[str, Any], ...], str, Any, str | None]:
    """(text, tool calls, finish reason, usage, model) of a Messages answer read from an
    Anthropic endpoint; usage is (input, output) with the cache reads and writes
    counted as input (`input_tokens` leaves them out), None when absent, else the raw
    value (not an object of counts); `ValueError` for any shape that is not a message."""
    if not isinstance(body, dict) or body.get("type") != "message" or not isinstance(body.get("content"), list):
        raise ValueError("the response body is not a message")
    texts, calls = [], []
    for i, b in enumerate(body["content"]):
        text, call = _block(i, b)
        texts += [text] if text is not None else []
        calls += [call] if call is not None else []
    u = body.get("usage")
    usage: Any = u
    if isinstance(u, dict):
        usage = (_input_count(u), u.get("output_tokens"))
    finish = _FINISH.get(
        str(body.get("stop_reason")), "content_filter" if body.get("stop_reason") == "refusal" else "stop"
    )
    model = body.get("model")
    return "".join(texts), tuple(calls), finish, usage, model if isinstance(model, str) and model else None
