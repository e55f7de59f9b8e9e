"""Python-unit functions: `fn(case, client) -> str`, the client bound to the proxy."""
import json
import urllib.request


def _tool(case, name, arguments):
    req = urllib.request.Request(case["tools_url"], data=json.dumps({"name": name, "arguments": arguments}).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))["content"]


def run(case, client):
    r = client.completions.create(model=case["model"], prompt=f"Question: {case['input']}\n", seed=case["seed"])
    line = r.choices[0].text.strip()
    if line.startswith("CALL "):
        result = _tool(case, line[5:].split("(")[0], {"arg": line.split("(", 1)[1].rstrip(")")})
        r = client.completions.create(model=case["model"], prompt=f"RESULT: {result}\n", seed=case["seed"])
        line = r.choices[0].text.strip()
    return line


async def run_async(case, client):
    r = await client.chat.completions.create(model=case["model"], messages=[{"role": "user", "content": case["input"]}])
    return r.choices[0].message.content


def loop_forever(case, client):
    import openai

    while True:
        try:
            client.completions.create(model=case["model"], prompt=f"Question: {case['input']}\n")
        except openai.AuthenticationError:  # its sample is over: the proxy no longer knows its key
            return "gave up"
        except Exception:  # noqa: BLE001 - keeps going whatever else it is told, as a runaway agent would
            pass


def not_a_string(case, client):
    return {"answer": 42}
