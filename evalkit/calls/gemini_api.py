"""The Gemini API's wire shapes (``generateContent`` and ``streamGenerateContent``), translated to chat.

The metering proxy (`evalkit.calls.proxy`) serves an agent written on google-genai (or
pydantic-ai's Google model) through the run's one OpenAI-compatible client, so its
calls are reserved, settled, cached and recorded as a chat call is:

* `generate_arguments`: a ``generateContent`` request (``contents`` of ``user`` and
  ``model`` turns with ``text``, ``functionCall`` and ``functionResponse`` parts,
  ``systemInstruction``, ``tools`` of ``functionDeclarations``, ``toolConfig``,
  ``generationConfig``) as `SampleSession.model_call` keywords; what a chat endpoint
  cannot serve exactly or what bills beyond the reservation (inline or file data, a
  built-in tool, cached content, more than one candidate, thinking) is refused
  (`ValueError` naming it);
* `generate_body`: an answer as a ``GenerateContentResponse`` (one candidate, its
  ``finishReason``, ``usageMetadata`` with ``promptTokenCount`` and
  ``candidatesTokenCount``);
* `generate_events`: that response as the server-sent events of
  ``streamGenerateContent?alt=sse`` (one ``data:`` line a chunk).

The shapes follow the REST API in camelCase as google-genai 3.x sends and reads it
(`google.genai.models`' ``_to_mldev`` / ``_from_mldev`` converters); a request in
snake_case (which the REST API accepts too) is read the same.
"""

from __future__ import annotations

import json
import re
from typing import Any

from evalkit.foundations._text import storable_json

# generationConfig fields sent on as chat's, by chat's name.
_CONFIG = {
    "temperature": "temperature",
    "topP": "top_p",
    "topK": "top_k",
    "seed": "seed",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
}
_IGNORED_CONFIG = frozenset({"responseMimeType"})  # text/plain or JSON: the same tokens
_STOP = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP", "content_filter": "SAFETY"}
_TOP = frozenset({"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings"})


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def _camel_keys(d: Any) -> Any:
    """A dict's keys in camelCase, one level (the REST API takes either spelling)."""
    return {_camel(k): v for k, v in d.items()} if isinstance(d, dict) else d


def _json_schema(schema: Any) -> Any:
    """A Gemini ``Schema`` (types in capitals: ``OBJECT``, ``STRING``) as JSON Schema."""
    if isinstance(schema, list):
        return [_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _json_schema(v) for k, v in schema.items() if k != "nullable"}
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].lower()
    return out


class _Calls:
    """The ids of the model's function calls awaiting their responses: a call without
    an id gets one by its place, and a response without one takes its call's."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, str]] = []
        self.n = 0

    def call(self, fc: dict[str, Any]) -> str:
        self.n += 1
        cid = fc.get("id") if isinstance(fc.get("id"), str) and fc.get("id") else f"call_gemini_{self.n}"
        self.pending.append((str(fc.get("name")), str(cid)))
        return str(cid)

    def response(self, fr: dict[str, Any]) -> str:
        if isinstance(fr.get("id"), str) and fr.get("id"):
            self.pending = [p for p in self.pending if p[1] != fr["id"]]
            return str(fr["id"])
        for k, (name, cid) in enumerate(self.pending):
            if name == fr.get("name"):
                del self.pending[k]
                return cid
        self.n += 1
        return f"call_gemini_{self.n}"


def _part(part: Any, where: str, calls: _Calls, out: dict[str, list[Any]]) -> None:
    """One part into `out`'s texts, tool calls or tool messages."""
    p = _camel_keys(part)
    if not isinstance(p, dict):
        raise ValueError(f"{where} must be an object")
    p = {k: v for k, v in p.items() if v is not None and k not in ("thoughtSignature", "partMetadata")}
    if p.get("thought"):
        raise ValueError(f"{where} is a thought, which is not served (thinking is not metered through chat)")
    p.pop("thought", None)
    if set(p) == {"text"} and isinstance(p["text"], str):
        out["texts"].append(p["text"])
    elif set(p) == {"functionCall"} and isinstance(p["functionCall"], dict):
        fc = p["functionCall"]
        args = json.dumps(fc.get("args") or {}, ensure_ascii=False)
        tc = {"id": calls.call(fc), "type": "function", "function": {"name": fc.get("name"), "arguments": args}}
        out["calls"].append(tc)
    elif set(p) == {"functionResponse"} and isinstance(p["functionResponse"], dict):
        fr = p["functionResponse"]
        if "parts" in fr:
            raise ValueError(f"{where}.functionResponse.parts is not served (only a JSON response is metered)")
        text = json.dumps(fr.get("response"), ensure_ascii=False)
        out["results"].append({"role": "tool", "tool_call_id": calls.response(fr), "content": text})
    else:
        raise ValueError(f"{where} holding {sorted(p)} is not served (only text and function parts are metered)")


def _content(i: int, content: Any, calls: _Calls) -> list[dict[str, Any]]:
    """One ``contents`` turn as chat messages: the function responses as tool messages,
    a user's text, a model's text with its function calls."""
    if not isinstance(content, dict) or content.get("role", "user") not in ("user", "model", "function"):
        raise ValueError(f"contents[{i}] must be an object with role user or model")
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise ValueError(f"contents[{i}].parts must be a list of parts")
    out: dict[str, list[Any]] = {"texts": [], "calls": [], "results": []}
    for j, part in enumerate(parts):
        _part(part, f"contents[{i}].parts[{j}]", calls, out)
    messages = list(out["results"])
    if content.get("role") == "model":
        msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(out["texts"]) if out["texts"] else None}
        if out["calls"]:
            msg["tool_calls"] = out["calls"]
        messages.append(msg)
    elif out["texts"] or not out["results"]:
        messages.append({"role": "user", "content": "\n".join(out["texts"])})
    return messages


def _system(instruction: Any) -> list[dict[str, Any]]:
    if instruction is None:
        return []
    if isinstance(instruction, str):
        return [{"role": "system", "content": instruction}]
    parts = instruction.get("parts") if isinstance(instruction, dict) else None
    texts = (
        [p.get("text") for p in parts] if isinstance(parts, list) and all(isinstance(p, dict) for p in parts) else None
    )
    if texts is None or not all(isinstance(t, str) for t in texts):
        raise ValueError("systemInstruction must be text parts (only text is metered)")
    return [{"role": "system", "content": "\n".join(str(t) for t in texts)}]


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    """``functionDeclarations`` as chat function tools; any other tool (Google Search,
    code execution, URL context, ...) is refused: it bills its own use."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ValueError("tools must be a list of tool objects")
    out = []
    for i, tool in enumerate(tools):
        t = {k: v for k, v in _camel_keys(tool).items() if v is not None} if isinstance(tool, dict) else None
        if t is None or set(t) != {"functionDeclarations"} or not isinstance(t["functionDeclarations"], list):
            raise ValueError(f"tools[{i}] holding {sorted(t or {})} is not served (only functionDeclarations)")
        for decl in t["functionDeclarations"]:
            d = _camel_keys(decl)
            fn = {
                "name": d.get("name"),
                "parameters": d.get("parametersJsonSchema") or _json_schema(d.get("parameters")),
            }
            if fn["parameters"] is None:
                fn["parameters"] = {"type": "object", "properties": {}}
            if d.get("description"):
                fn["description"] = d["description"]
            out.append({"type": "function", "function": fn})
    return out or None


def _tool_choice(config: Any, extra: dict[str, Any]) -> None:
    """``toolConfig.functionCallingConfig`` in chat's terms, into `extra`."""
    fcc = _camel_keys(_camel_keys(config).get("functionCallingConfig")) if isinstance(config, dict) else None
    if not isinstance(fcc, dict):
        return
    mode, names = str(fcc.get("mode") or "AUTO").upper(), fcc.get("allowedFunctionNames")
    if mode == "ANY" and isinstance(names, list) and len(names) == 1:
        extra["tool_choice"] = {"type": "function", "function": {"name": names[0]}}
    elif mode in ("AUTO", "ANY", "NONE", "MODE_UNSPECIFIED", "VALIDATED"):
        extra["tool_choice"] = {"ANY": "required", "NONE": "none"}.get(mode, "auto")
    else:
        raise ValueError(f"toolConfig.functionCallingConfig.mode={mode!r} is not served")


def _generation(config: Any, kw: dict[str, Any], extra: dict[str, Any]) -> None:
    """``generationConfig`` into `kw` (output ceiling, stop) and `extra`; a field that
    may bill beyond one answer of `maxOutputTokens` (more candidates, thinking,
    logprobs, another modality) is refused."""
    cfg = {k: v for k, v in _camel_keys(config or {}).items() if v is not None}
    wanted = cfg.pop("maxOutputTokens", None)
    if wanted is not None and (isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1):
        raise ValueError(f"maxOutputTokens must be a positive integer, got {wanted!r}")
    kw["max_tokens"] = wanted
    if cfg.pop("candidateCount", 1) != 1:
        raise ValueError("candidateCount other than 1 is not served (the reservation covers one answer)")
    stop = cfg.pop("stopSequences", None)
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise ValueError("stopSequences must be a list of strings")
    kw["stop"] = stop or None
    kw["temperature"] = cfg.pop("temperature", None)
    for name, chat in _CONFIG.items():
        if name in cfg:
            extra[chat] = cfg.pop(name)
    schema = cfg.pop("responseJsonSchema", None) or _json_schema(cfg.pop("responseSchema", None))
    if schema:
        extra["response_format"] = {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    for name in _IGNORED_CONFIG:
        cfg.pop(name, None)
    if cfg:
        raise ValueError(
            f"generationConfig.{sorted(cfg)[0]} is not served (it may bill what the reservation does not cover)"
        )


def generate_arguments(body: dict[str, Any], model: str | None) -> dict[str, Any]:
    """`SampleSession.model_call` keywords (chat) from a ``generateContent`` request body
    for `model` (from its URL); `ValueError` naming what cannot be metered exactly."""
    body = {k: v for k, v in _camel_keys(body).items() if v is not None}
    unknown = sorted(set(body) - _TOP)
    if unknown:
        raise ValueError(f"the field {unknown[0]!r} is not served (it may bill what the reservation does not cover)")
    contents = body.get("contents")
    if isinstance(contents, dict):
        contents = [contents]
    if not isinstance(contents, list) or not contents:
        raise ValueError("contents must be a non-empty list of contents")
    calls = _Calls()
    messages = _system(body.get("systemInstruction"))
    for i, c in enumerate(contents):
        messages.extend(_content(i, c, calls))
    extra: dict[str, Any] = {}
    kw: dict[str, Any] = {"messages": messages, "tools": _tools(body.get("tools")), "requested_model": model}
    _tool_choice(body.get("toolConfig"), extra)
    _generation(body.get("generationConfig"), kw, extra)
    kw["seed"] = extra.pop("seed", None)
    kw["extra"] = extra or None
    kw["wire"] = "gemini"
    kw["native"] = {"gemini": native_body(body)}
    return kw


def native_body(body: dict[str, Any]) -> dict[str, Any]:
    """A request (already read: `body` in camelCase, nulls dropped) as it passes through
    to a Gemini endpoint (`api: gemini`): as sent, the client setting
    ``generationConfig.maxOutputTokens`` to the output ceiling."""
    return {k: _camel_keys(v) if k == "generationConfig" else v for k, v in body.items()}


# Gemini's finish reasons as chat's (an answer read upstream); any other is "stop".
_FINISH = {"MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter"}


def _answer_part(i: int, p: Any) -> tuple[str | None, dict[str, Any] | None]:
    """One answer part: its text, or its function call; a thought is neither (its
    tokens are counted as output); any other part is no answer."""
    p = _camel_keys(p)
    if not isinstance(p, dict):
        raise ValueError(f"parts[{i}] is not an object")
    if p.get("thought"):
        return None, None
    if isinstance(p.get("text"), str):
        return p["text"], None
    fc = _camel_keys(p.get("functionCall"))
    if isinstance(fc, dict) and isinstance(fc.get("name"), str):
        call = {"name": fc["name"], "arguments": fc.get("args") or {}}
        return None, {**call, "id": fc["id"]} if isinstance(fc.get("id"), str) and fc["id"] else call
    raise ValueError(f"parts[{i}] holding {sorted(p)} is no answer the proxy passes on")


def read_response(body: Any) -> tuple[str, tuple[dict[str, Any], ...], str, Any, str | None]:
    """(text, tool calls, finish reason, usage, model) of a ``GenerateContentResponse``
    read from a Gemini endpoint; usage is (``promptTokenCount``, ``candidatesTokenCount``
    + ``thoughtsTokenCount``: thinking is billed as output), None when absent, else the
    raw value; `ValueError` for any shape that is not one candidate's answer."""
    body = _camel_keys(body)
    cands = body.get("candidates") if isinstance(body, dict) else None
    if not isinstance(cands, list) or not cands or not isinstance(cands[0], dict):
        raise ValueError("the response body has no candidate")
    cand = _camel_keys(cands[0])
    parts = (cand.get("content") or {}).get("parts") or []
    if not isinstance(parts, list):
        raise ValueError("the candidate's parts are not a list")
    texts, calls = [], []
    for i, part in enumerate(parts):
        text, call = _answer_part(i, part)
        texts += [text] if text is not None else []
        calls += [call] if call is not None else []
    u = _camel_keys(body.get("usageMetadata"))
    usage: Any = u
    if isinstance(u, dict):
        out: Any = u.get("candidatesTokenCount") or 0
        if isinstance(out, int) and isinstance(u.get("thoughtsTokenCount") or 0, int):
            out += u.get("thoughtsTokenCount") or 0
        usage = (u.get("promptTokenCount"), out)
    finish = "tool_calls" if calls else _FINISH.get(str(cand.get("finishReason")), "stop")
    model = body.get("modelVersion")
    return "".join(texts), tuple(calls), finish, usage, model if isinstance(model, str) and model else None


def generate_body(
    *, rid: str, model: str, text: str, tool_calls: Any, finish_reason: str | None, usage: tuple[int, int]
) -> dict[str, Any]:
    """The ``GenerateContentResponse`` of a finished call: one candidate whose parts are
    its text (when there is text, or nothing else) and a ``functionCall`` per tool call
    (with the call's id), and the usage as ``usageMetadata``."""
    calls = list(tool_calls or ())
    parts: list[dict[str, Any]] = [{"text": text}] if text or not calls else []
    for tc in calls:
        args = tc.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                args = {"arguments": args}
        fc = {"name": tc.get("name"), "args": args if isinstance(args, dict) else {"arguments": args}}
        if tc.get("id"):
            fc["id"] = tc["id"]
        parts.append({"functionCall": fc})
    finish = finish_reason or ("tool_calls" if calls else "stop")
    n_in, n_out = usage
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": _STOP.get(finish, "STOP"), "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": n_in, "candidatesTokenCount": n_out, "totalTokenCount": n_in + n_out},
        "modelVersion": model,
        "responseId": rid,
    }


def generate_events(response: dict[str, Any]) -> bytes:
    """`response` as ``streamGenerateContent?alt=sse`` sends it: the content in one
    chunk, then the finish reason and usage in the last."""
    cand = response["candidates"][0]
    first = {**response, "candidates": [{"content": cand["content"], "index": 0}]}
    first.pop("usageMetadata")
    last = {**response, "candidates": [{**cand, "content": {"role": "model", "parts": [{"text": ""}]}}]}
    chunks = (first, last)
    return "".join(f"data: {storable_json(c)}\r\n\r\n" for c in chunks).encode("utf-8", "surrogatepass")
