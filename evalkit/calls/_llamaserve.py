"""llama-cpp-python's OpenAI-compatible server (`serve.LocalModelServer`), taking chat
requests in the shapes the OpenAI chat API takes and agent frameworks send.

``python -m evalkit.calls._llamaserve ARGS`` starts ``llama_cpp.server`` with ARGS (its
own options) and puts one step before its chat endpoint, `llama_body`. What
llama-cpp-python 0.3 does without it:

* a system, assistant or tool message whose content is a list of text parts: a 500
  ("Input should be a valid string"); a user message's list is written into the prompt
  as a Python list;
* an assistant message's null content: a 500; a missing one fails the function-calling
  template ("'dict object' has no attribute 'content'");
* ``"tool_choice": "required"``: an assertion fails in the function-calling handler (a
  500 with an empty message); no `tool_choice` beside `tools`: the model is offered no
  tool (OpenAI's default is ``"auto"``);
* a tool message: written by the function-calling template as an empty turn, so the
  model never sees a tool's result.

smolagents' ToolCallingAgent sends text parts and "required", so each of its calls
failed; openai-agents and langchain in chat mode send no `tool_choice`, so
the model never saw their tools. Any other body goes through unchanged.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def llama_body(body: Any) -> Any:
    """A chat request body as llama-cpp-python's handlers take it: each message's list of
    text parts joined by newlines into one string (as evalkit reads a Responses item's
    parts; a list holding anything else, an image, is left as it is), an assistant
    message's null or missing content as ``""``; where tools are offered, ``"tool_choice":
    "auto"`` for none (OpenAI's default) or ``"required"``, and each tool result as a user
    message (`_tool_results_as_user`). Any body without messages is returned as it is."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return body
    out = {**body, "messages": [_plain_message(m) for m in messages]}
    if out.get("tools") and out.get("tool_choice") in (None, "required"):
        out["tool_choice"] = "auto"
    if body.get("tools"):
        out["messages"] = _tool_results_as_user(out["messages"])
    return out


def _plain_message(m: Any) -> Any:
    if not isinstance(m, dict):
        return m
    content = m.get("content")
    if isinstance(content, list) and all(_is_text_part(p) for p in content):
        return {**m, "content": "\n".join(p["text"] for p in content)}
    if content is None and m.get("role") == "assistant":
        return {**m, "content": ""}
    return m


def _tool_results_as_user(messages: list[Any]) -> list[Any]:
    """Each tool message as a user message naming the function it answers
    (``functions.get_weather returned:`` and its text), the name from the assistant's
    call of that id: llama-cpp-python's function-calling template writes a tool message
    as an empty turn, so the model never saw a tool's result and called it again."""
    names: dict[Any, str] = {}
    out = []
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "assistant":
            for call in m.get("tool_calls") or ():
                if isinstance(call, dict) and isinstance(call.get("function"), dict):
                    names[call.get("id")] = str(call["function"].get("name"))
        if isinstance(m, dict) and m.get("role") == "tool" and isinstance(m.get("content"), str):
            name = names.get(m.get("tool_call_id"), "the function")
            m = {"role": "user", "content": f"functions.{name} returned:\n{m['content']}"}
        out.append(m)
    return out


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


class LlamaBody:
    """ASGI middleware: a ``POST .../chat/completions`` body read whole, put through
    `llama_body` and handed on with its new length; a body that is not JSON is
    handed on as it came (the server answers it)."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].endswith("/chat/completions"):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        try:
            raw = json.dumps(llama_body(json.loads(raw))).encode()
        except ValueError:
            pass
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(raw)).encode())]}
        await self.app(scope, _replay([{"type": "http.request", "body": raw, "more_body": False}], receive), send)


def _replay(messages: list[Message], then: Receive) -> Receive:
    """An ASGI `receive` giving `messages`, then what `then` gives (the connection's own:
    the server asks it whether the client went away before it starts the model)."""
    pending = list(messages)

    async def receive() -> Message:
        return pending.pop(0) if pending else await then()

    return receive


def main(argv: list[str] | None = None) -> None:
    """``python -m llama_cpp.server``'s start (its own options, no config file) with
    `LlamaBody` before its app."""
    # the `local` extra, in the server process only (`llama_body` is tested without it)
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(description="llama-cpp-python's server, taking text parts (evalkit)")
    add_args_from_model(parser, Settings)
    given = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}  # as its cli.py reads them
    server = ServerSettings(**{k: v for k, v in given.items() if k in ServerSettings.model_fields})
    model = ModelSettings(**{k: v for k, v in given.items() if k in ModelSettings.model_fields})
    app = create_app(server_settings=server, model_settings=[model])
    uvicorn.run(LlamaBody(app), host=server.host, port=server.port)


if __name__ == "__main__":
    main()
