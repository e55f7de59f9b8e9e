"""One agent turn of a conversation on the standard library alone: the case's
`conversation` (the turns so far, the user's last) goes to the model behind the proxy,
each tool call it asks for is answered at EVALKIT_TOOLS_URL, and the reply is printed.
A user turn containing "crash" makes it fail on purpose (stderr, exit 3)."""
import json
import os
import sys
import urllib.request

case = json.load(sys.stdin)
if "user" in case["input"]:  # the simulated user's scenario is the simulator's alone
    sys.stderr.write("input.user reached the program\n")
    sys.exit(9)
turns = case["conversation"]
if "crash" in turns[-1]["content"]:
    sys.stderr.write("boom: this turn failed on purpose\n")
    sys.exit(3)


def post(url, body, key=None):
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json", **auth})
    return json.load(urllib.request.urlopen(req, timeout=60))


system = "You are the shop's agent." + (f" {case['guidance']}" if case.get("guidance") else "")
messages = [{"role": "system", "content": system}, *turns]
for _ in range(4):
    body = {"model": case["model"], "messages": messages, "seed": case["seed"], "max_tokens": case["max_tokens"]}
    if case.get("tools"):
        body["tools"] = case["tools"]
    answer = post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", body, os.environ["OPENAI_API_KEY"])
    message = answer["choices"][0]["message"]
    if not message.get("tool_calls"):
        print(message.get("content") or "")
        break
    messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": message["tool_calls"]})
    for call in message["tool_calls"]:
        got = post(os.environ["EVALKIT_TOOLS_URL"], {"name": call["function"]["name"],
                                                     "arguments": call["function"]["arguments"], "id": call["id"]})
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": got["content"]})
