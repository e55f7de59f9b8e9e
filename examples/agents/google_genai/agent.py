"""A weather agent on google-genai, unchanged: `generate_content` with a Python
function as its tool, which the SDK's automatic function calling runs itself.

evalkit runs it once per sample with the case as JSON on stdin; GOOGLE_GEMINI_BASE_URL
and GEMINI_API_KEY (GOOGLE_API_KEY too) point at evalkit's metering proxy (the client
reads them), which serves generateContent: every call is reserved, settled and
recorded, translated to chat for an OpenAI-compatible endpoint. The tool answers from
the case's fixtures through EVALKIT_TOOLS_URL.
"""

import json
import os
import sys
import urllib.request

from google import genai
from google.genai import types


def fixture(name: str, arguments: dict) -> str:
    req = urllib.request.Request(
        os.environ["EVALKIT_TOOLS_URL"],
        data=json.dumps({"name": name, "arguments": arguments}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)["content"]


def get_weather(city: str) -> str:
    """The current weather in a city."""
    return fixture("get_weather", {"city": city})


def main() -> None:
    case = json.load(sys.stdin)
    client = genai.Client()
    config = types.GenerateContentConfig(
        system_instruction="You answer questions about the weather. Look it up with get_weather.",
        tools=[get_weather],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(maximum_remote_calls=4),
    )
    reply = client.models.generate_content(model=case["model"], contents=case["input"]["question"], config=config)
    print(reply.text)


if __name__ == "__main__":
    main()
