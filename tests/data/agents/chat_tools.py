"""A chat agent on the official openai client: tools from the case, answered at
EVALKIT_TOOLS_URL; its second model call streams with usage."""
import json
import os
import sys
import urllib.request

import openai

case = json.load(sys.stdin)
client = openai.OpenAI()
messages = [{"role": "user", "content": case["input"]["question"]}]
for turn in range(6):
    stream = turn == 1
    r = client.chat.completions.create(
        model=case["model"], messages=messages, tools=case.get("tools"), seed=case["seed"],
        max_tokens=case["max_tokens"], stream=stream, **({"stream_options": {"include_usage": True}} if stream else {}))
    if stream:
        text, calls = "", {}
        for chunk in r:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            text += delta.content or ""
            for tc in delta.tool_calls or ():
                calls[tc.index] = {"id": tc.id, "type": "function",
                                   "function": {"name": tc.function.name, "arguments": tc.function.arguments}}
        tool_calls = [calls[i] for i in sorted(calls)]
    else:
        m = r.choices[0].message
        text = m.content or ""
        tool_calls = [{"id": tc.id, "type": "function",
                       "function": {"name": tc.function.name, "arguments": tc.function.arguments}}
                      for tc in m.tool_calls or ()]
    if not tool_calls:
        print(text)
        break
    messages.append({"role": "assistant", "content": text or None, "tool_calls": tool_calls})
    for tc in tool_calls:
        req = urllib.request.Request(
            os.environ["EVALKIT_TOOLS_URL"],
            data=json.dumps({"name": tc["function"]["name"], "arguments": tc["function"]["arguments"],
                             "id": tc["id"]}).encode(),
            headers={"Content-Type": "application/json"})
        answer = json.load(urllib.request.urlopen(req))
        messages.append({"role": "tool", "tool_call_id": tc["id"], "content": answer["content"]})
