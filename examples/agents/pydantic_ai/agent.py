"""A weather agent on pydantic-ai, unchanged: `OpenAIResponsesModel` (the Responses API),
one function tool that pydantic-ai runs itself. ``WEATHER_AGENT_API=chat`` switches it to
`OpenAIChatModel` (chat completions), for an endpoint without the Responses API
(llama.cpp's server: `evalkit serve --tools-model`); the suite passes the variable
(`unit.env`).

evalkit runs it once per sample with the case as JSON on stdin; OPENAI_BASE_URL and
OPENAI_API_KEY point at evalkit's metering proxy (the OpenAI provider reads them), so
every model call is reserved, settled and recorded. Logfire export and pydantic-ai's
banner are off in the agent's environment (set by evalkit). The tool answers from the
case's fixtures through EVALKIT_TOOLS_URL.
"""

import json
import os
import sys
import urllib.request

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider


def fixture(name: str, arguments: dict) -> str:
    req = urllib.request.Request(
        os.environ["EVALKIT_TOOLS_URL"],
        data=json.dumps({"name": name, "arguments": arguments}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)["content"]


def main() -> None:
    case = json.load(sys.stdin)
    chat = os.environ.get("WEATHER_AGENT_API") == "chat"
    model = (OpenAIChatModel if chat else OpenAIResponsesModel)(case["model"], provider=OpenAIProvider())
    agent = Agent(model, instructions="You answer questions about the weather. Look it up with get_weather.")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return fixture("get_weather", {"city": city})

    result = agent.run_sync(case["input"]["question"])
    print(result.output)


if __name__ == "__main__":
    main()
