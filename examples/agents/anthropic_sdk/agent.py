"""A weather agent on the anthropic SDK, unchanged: `messages.create` with one tool,
its own loop (a `tool_use` answer is run and its `tool_result` sent back until the
model answers in text).

evalkit runs it once per sample with the case as JSON on stdin; ANTHROPIC_BASE_URL and
ANTHROPIC_API_KEY point at evalkit's metering proxy (the client reads them), which
serves the Messages API: every call is reserved, settled and recorded, translated to
chat for an OpenAI-compatible endpoint. The tool answers from the case's fixtures
through EVALKIT_TOOLS_URL, with the model's id of the call.
"""

import json
import os
import sys
import urllib.request

import anthropic

TOOLS = [
    {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


def fixture(name: str, arguments: dict, call_id: str) -> str:
    req = urllib.request.Request(
        os.environ["EVALKIT_TOOLS_URL"],
        data=json.dumps({"name": name, "arguments": arguments, "id": call_id}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)["content"]


def main() -> None:
    case = json.load(sys.stdin)
    client = anthropic.Anthropic(max_retries=0)
    messages = [{"role": "user", "content": case["input"]["question"]}]
    for _ in range(4):
        reply = client.messages.create(
            model=case["model"],
            max_tokens=1024,
            system="You answer questions about the weather. Look it up with get_weather.",
            tools=TOOLS,
            messages=messages,
        )
        if reply.stop_reason != "tool_use":
            print("".join(b.text for b in reply.content if b.type == "text"))
            return
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        results = [
            {"type": "tool_result", "tool_use_id": b.id, "content": fixture(b.name, b.input, b.id)}
            for b in reply.content
            if b.type == "tool_use"
        ]
        messages.append({"role": "user", "content": results})
    sys.exit("no answer after 4 turns")


if __name__ == "__main__":
    main()
