"""A weather agent on openai-agents (the OpenAI Agents SDK), unchanged: its default model
is the Responses API (`OpenAIResponsesModel`), and its one tool is a function tool the
SDK runs itself. ``WEATHER_AGENT_API=chat`` switches it to chat completions
(`set_default_openai_api("chat_completions")`), for an endpoint without the Responses API
(llama.cpp's server: `evalkit serve --tools-model`); the suite passes the variable
(`unit.env`).

evalkit runs it once per sample with the case as JSON on stdin; OPENAI_BASE_URL and
OPENAI_API_KEY point at evalkit's metering proxy, which serves `/v1/responses`, so every
model call the SDK makes is reserved, settled and recorded. The SDK's tracing (which
would post each run to the provider) is off in the agent's environment
(OPENAI_AGENTS_DISABLE_TRACING=1, set by evalkit). The tool's answer comes from the
case's fixtures through EVALKIT_TOOLS_URL, so no weather service is ever called.
"""

import json
import os
import sys
import urllib.request

from agents import Agent, Runner, function_tool, set_default_openai_api


def fixture(name: str, arguments: dict) -> str:
    req = urllib.request.Request(
        os.environ["EVALKIT_TOOLS_URL"],
        data=json.dumps({"name": name, "arguments": arguments}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)["content"]


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return fixture("get_weather", {"city": city})


def main() -> None:
    case = json.load(sys.stdin)
    if os.environ.get("WEATHER_AGENT_API") == "chat":
        set_default_openai_api("chat_completions")
    agent = Agent(
        name="weather",
        instructions="You answer questions about the weather. Look it up with get_weather.",
        model=case["model"],
        tools=[get_weather],
    )
    result = Runner.run_sync(agent, case["input"]["question"])
    print(result.final_output)


if __name__ == "__main__":
    main()
