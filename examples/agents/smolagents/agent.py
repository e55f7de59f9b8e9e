"""A weather agent on smolagents, unchanged: a `ToolCallingAgent` over
`OpenAIServerModel` (chat completions with function calling), one tool smolagents runs
itself, and its built-in `final_answer` tool for the answer.

evalkit runs it once per sample with the case as JSON on stdin; OPENAI_BASE_URL and
OPENAI_API_KEY point at evalkit's metering proxy, so every model call is reserved,
settled and recorded. smolagents prints its run log (panels, steps) to stdout through
rich: `verbosity_level=LogLevel.OFF` keeps stdout for the answer alone. Hugging Face
telemetry is off in the agent's environment (set by evalkit). The tool answers from the
case's fixtures through EVALKIT_TOOLS_URL.

A `CodeAgent` would run its tools inside the Python it generates: the model's answers
then carry code, not tool calls, and only the calls its tools report to
EVALKIT_TOOLS_URL (as this one's does) reach the trajectory.
"""

import json
import os
import sys
import urllib.request

from smolagents import LogLevel, OpenAIServerModel, ToolCallingAgent, tool


def fixture(name: str, arguments: dict) -> str:
    req = urllib.request.Request(
        os.environ["EVALKIT_TOOLS_URL"],
        data=json.dumps({"name": name, "arguments": arguments}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)["content"]


@tool
def get_weather(city: str) -> str:
    """The current weather in a city.

    Args:
        city: The city's name.
    """
    return fixture("get_weather", {"city": city})


def main() -> None:
    case = json.load(sys.stdin)
    model = OpenAIServerModel(
        case["model"], api_base=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]
    )
    agent = ToolCallingAgent(tools=[get_weather], model=model, max_steps=4, verbosity_level=LogLevel.OFF)
    print(agent.run(case["input"]["question"]))


if __name__ == "__main__":
    main()
