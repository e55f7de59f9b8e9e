"""The OpenAI Responses API's wire shapes (``POST /v1/responses``), built and read once.

The metering proxy (`evalkit.calls.proxy`) serves an agent's Responses call, the client
(`evalkit.calls.client`) sends it upstream and the scripted server (`evalkit.calls.serve`) answers
it; all three use these functions, so the shapes agree:

* `input_messages`: a request's `instructions` and `input` (a string, or a list of
  items: messages with text parts, ``function_call``, ``function_call_output``,
  ``reasoning``) as chat-style messages, to count its tokens and to match its text;
* `response_body`: an answer (text, tool calls with their call ids, finish reason,
  usage) as a ``response`` object, output items in the order the Responses API gives
  them (the message, then each ``function_call``);
* `stream_events`: that object as the server-sent events a streamed call gets
  (``response.created``, ``response.in_progress``, per item
  ``response.output_item.added`` ... ``response.output_item.done`` with the text or
  argument deltas between, and ``response.completed`` (``response.incomplete`` when cut)
  carrying the usage), each ``event: <type>`` / ``data: <json>``.

The shapes follow the openai python client 3.x types (`openai.types.responses`).
Written by hand: the client's types describe the objects but build none from parts.
"""

from __future__ import annotations

import json
from typing import Any

from evalkit.foundations._text import storable_json

# What an agent is told when the endpoint has no Responses API: each framework's switch
# to chat completions, which the proxy serves on every endpoint.
CHAT_COMPLETIONS_SWITCHES = (
    'openai-agents: set_default_openai_api("chat_completions") or OpenAIChatCompletionsModel; '
    "pydantic-ai: OpenAIChatModel instead of OpenAIResponsesModel; "
    "langchain: ChatOpenAI(use_responses_api=False); "
    "the openai client: client.chat.completions.create instead of client.responses.create"
)

# Finish reasons (chat's names, as evalkit records every answer) of a cut answer, and
# the Responses API's `incomplete_details.reason` for each.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def no_responses_api(url: str, status: int) -> str:
    """The message of a Responses call the endpoint does not serve (HTTP 404 or 405)."""
    return (
        f"the endpoint {url} has no Responses API (HTTP {status} on POST /responses); "
        f"switch the agent to chat completions: {CHAT_COMPLETIONS_SWITCHES}"
    )


def _part_text(part: Any) -> str:
    if isinstance(part, dict):
        for name in ("text", "refusal"):
            if isinstance(part.get(name), str):
                return str(part[name])
        return json.dumps(part, separators=(",", ":"), ensure_ascii=False)
    return str(part)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part_text(p) for p in content)
    return "" if content is None else json.dumps(content, separators=(",", ":"), ensure_ascii=False)


def input_messages(input_: Any, instructions: Any = None) -> list[dict[str, Any]]:
    """`instructions` and `input` as chat messages whose text holds every input token:
    a message item as its role and text; a ``function_call`` as an assistant tool call;
    a ``function_call_output`` as a tool message; any other item as its JSON."""
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": _content_text(instructions)})
    items = [{"role": "user", "content": input_}] if isinstance(input_, str) else list(input_ or ())
    for item in items:
        if not isinstance(item, dict):
            out.append({"role": "user", "content": _content_text(item)})
            continue
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": str(item.get("role", "user")), "content": _content_text(item.get("content"))})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function"}
            call["function"] = {"name": item.get("name"), "arguments": item.get("arguments")}
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "content": _content_text(item.get("output"))})
        else:
            out.append({"role": str(kind), "content": json.dumps(item, separators=(",", ":"), ensure_ascii=False)})
    return out


def input_text(body: dict[str, Any]) -> str:
    """A request's text (instructions, messages, tool outputs) joined by newlines: what
    the scripted server matches its rules against, as it does a chat request's."""
    return "\n".join(
        m["content"]
        for m in input_messages(body.get("input"), body.get("instructions"))
        if isinstance(m.get("content"), str)
    )


def _arguments(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def output_items(
    text: str, tool_calls: Any, rid: str, *, status: str = "completed", id_prefix: str = "call_evalkit_"
) -> list[dict[str, Any]]:
    """The output items of an answer: its text as one assistant message (when there is
    text, or nothing else), then one ``function_call`` per tool call (evalkit's
    ``{"name", "arguments", "id"}``, the id being the call id; one without gets
    `id_prefix` + its index)."""
    items: list[dict[str, Any]] = []
    calls = list(tool_calls or ())
    if text or not calls:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        items.append({"id": f"msg_{rid}", "type": "message", "status": status, "role": "assistant", "content": [part]})
    for i, tc in enumerate(calls):
        call_id = tc.get("id") or f"{id_prefix}{i}"
        items.append(
            {
                "id": f"fc_{call_id}",
                "type": "function_call",
                "status": "completed",
                "call_id": call_id,
                "name": tc.get("name"),
                "arguments": _arguments(tc.get("arguments")),
            }
        )
    return items


def usage_body(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """A Responses `usage` object."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def response_body(
    *,
    rid: str,
    created_at: int,
    model: str,
    text: str,
    tool_calls: Any,
    finish_reason: str | None,
    usage: dict[str, Any] | None,
    request: dict[str, Any],
    id_prefix: str = "call_evalkit_",
) -> dict[str, Any]:
    """The ``response`` object of a finished call; `request` (the request body) gives
    the fields a response echoes (instructions, tools, temperature, ...). A finish
    reason ``length`` (or ``content_filter``) makes it ``incomplete`` with that reason."""
    reason = _INCOMPLETE.get(finish_reason or "")
    status = "incomplete" if reason else "completed"
    body: dict[str, Any] = {
        "id": f"resp_{rid}",
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": reason} if reason else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": model,
        "output": output_items(text, tool_calls, rid, status=status, id_prefix=id_prefix),
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
        "store": request.get("store", False),
        "temperature": request.get("temperature"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p"),
        "truncation": request.get("truncation", "disabled"),
        "usage": usage,
        "user": request.get("user"),
        "metadata": request.get("metadata") or {},
    }
    return body


def stream_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of a streamed call that ends in `response` (see the module docstring),
    numbered by `sequence_number`."""
    events: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    head = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    emit("response.created", response=head)
    emit("response.in_progress", response=head)
    for index, item in enumerate(response.get("output") or ()):
        iid = item.get("id")
        if item.get("type") == "message":
            emit(
                "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []}
            )
            for ci, part in enumerate(item.get("content") or ()):
                empty = {**part, "text": ""}
                common = {"item_id": iid, "output_index": index, "content_index": ci}
                emit("response.content_part.added", **common, part=empty)
                if part.get("text"):
                    emit("response.output_text.delta", **common, delta=part["text"], logprobs=[])
                emit("response.output_text.done", **common, text=part.get("text", ""), logprobs=[])
                emit("response.content_part.done", **common, part=part)
        elif item.get("type") == "function_call":
            added = {**item, "arguments": "", "status": "in_progress"}
            emit("response.output_item.added", output_index=index, item=added)
            if item.get("arguments"):
                emit("response.function_call_arguments.delta", item_id=iid, output_index=index, delta=item["arguments"])
            emit(
                "response.function_call_arguments.done",
                item_id=iid,
                output_index=index,
                name=item.get("name"),
                arguments=item.get("arguments", ""),
            )
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.incomplete" if response.get("status") == "incomplete" else "response.completed", response=response)
    return events


def sse(events: list[dict[str, Any]]) -> bytes:
    """`events` as server-sent events (``event:`` and ``data:`` lines), as the Responses
    API streams them (no ``[DONE]`` line)."""
    text = "".join(f"event: {e['type']}\ndata: {storable_json(e)}\n\n" for e in events)
    return text.encode("utf-8", "surrogatepass")
