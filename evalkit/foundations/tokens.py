"""Count a request's input tokens offline, never below the true count.

The count guards `max_tokens_in` before a paid call, so it must never be an
underestimate. Sources, best first:

1. the model's own tokenizer in this process, when the caller has one (`tokenize`:
   the embedded model's GGUF vocabulary under `evalkit serve`, which counts as its
   server does without waiting for the server, whose tokenizer queues behind every
   generation); else the endpoint's own tokenizer, when it offers one
   (llama-cpp-python's server, and evalkit's scripted server: ``POST
   /extras/tokenize/count`` with ``{"input": text}`` returns ``{"count": n}``, BOS
   included);
2. a tiktoken encoding for an OpenAI model, only when its file is already in tiktoken's
   local cache (tiktoken downloads encodings at first use and fails offline; it is an
   optional dependency and never triggers a download here);
3. otherwise the UTF-8 byte count plus a small margin: a byte-level BPE token covers at
   least one byte, so bytes bound the tokens (the margin covers BOS and a SentencePiece
   dummy prefix).

Chat messages add a per-message bound for the chat template's role markers. The
cheap byte bound is tried first: when it is already within the limit, no request is
made (the count only decides whether the input fits; the ledger reserves the ceiling).

Why by hand: no library counts tokens for an arbitrary OpenAI-compatible endpoint
offline; this module only chooses between the sources above.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import aiohttp

# Byte-bound margin for one text: BOS plus a SentencePiece dummy-prefix token.
TEXT_MARGIN = 2
# Chat template tokens per message (role markers, separators, name) and once per
# conversation (BOS, the assistant generation prompt), bounds for ChatML, Llama 3,
# Gemma and OpenAI's format.
PER_MESSAGE = 10
PER_CONVERSATION = 16
# Tool definitions are rendered by the template around their JSON.
PER_TOOL = 24

# tiktoken's registered encodings: the file each loads and its sha256
# (tiktoken_ext.openai_public). A cached file with another hash would make tiktoken
# delete it and download again, so it is checked here first.
_B = "https://openaipublic.blob.core.windows.net/encodings/"
_TIKTOKEN_BLOBS = {
    "r50k_base": (_B + "r50k_base.tiktoken", "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"),
    "p50k_base": (_B + "p50k_base.tiktoken", "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"),
    "p50k_edit": (_B + "p50k_base.tiktoken", "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"),
    "cl100k_base": (_B + "cl100k_base.tiktoken", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
    "o200k_base": (_B + "o200k_base.tiktoken", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
    "o200k_harmony": (_B + "o200k_base.tiktoken", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
}


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def message_text(message: dict[str, Any]) -> str:
    """The text a chat message contributes: its content (string or text parts), its
    role and name, and any tool calls as JSON."""
    content = message.get("content")
    parts: list[str] = [str(message.get("role", "")), str(message.get("name", "") or "")]
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for p in content:
            if isinstance(p, dict):
                parts.append(str(p.get("text", "")) if p.get("type", "text") == "text" else json.dumps(p))
            else:
                parts.append(str(p))
    elif content is not None:
        parts.append(json.dumps(content))
    if message.get("tool_calls"):
        parts.append(json.dumps(message["tool_calls"], separators=(",", ":")))
    return "\n".join(parts)


def byte_bound(
    *,
    prompt: str | None = None,
    messages: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> int:
    """An upper bound of the input tokens for any byte-level tokenizer: UTF-8 bytes plus
    the template margins."""
    if prompt is not None:
        return utf8_len(prompt) + TEXT_MARGIN
    n = PER_CONVERSATION
    for m in messages or ():
        n += utf8_len(message_text(m)) + PER_MESSAGE
    for t in tools or ():
        n += utf8_len(json.dumps(t, separators=(",", ":"))) + PER_TOOL
    return n


def _tiktoken_cache_dir() -> str | None:
    # Mirrors tiktoken.load.read_file_cached: an empty TIKTOKEN_CACHE_DIR disables the
    # cache (every use would download), so it means "not available".
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        d = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        d = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        d = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return d or None


def local_tiktoken(model: str) -> Any:
    """The tiktoken encoding for `model` when tiktoken is installed, knows the model,
    and has the encoding file in its cache; else None. Never downloads."""
    try:
        import tiktoken  # optional dependency
        from tiktoken.model import encoding_name_for_model
    except Exception:
        return None
    try:
        name = encoding_name_for_model(model)
    except Exception:
        return None
    blob = _TIKTOKEN_BLOBS.get(name)
    cache_dir = _tiktoken_cache_dir()
    if not blob or not cache_dir:
        return None
    url, sha256 = blob
    try:
        with open(os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest()), "rb") as fh:
            if hashlib.sha256(fh.read()).hexdigest() != sha256:
                return None
    except OSError:
        return None
    try:
        return tiktoken.get_encoding(name)
    except Exception:
        return None


def _server_root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


_COUNT_CACHE_SIZE = 4096  # texts whose endpoint count is remembered per counter


class TokenCounter:
    """Counts a request's input for one model on one endpoint; see the module docstring.

    `method` names the source of the last count (`utf8-bytes`, `endpoint`,
    `tiktoken:<encoding>`).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        http: aiohttp.ClientSession | None = None,
        timeout_s: float = 10.0,
        tokenize: Callable[[str], int] | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self._tokenize = tokenize  # the model's own count of a text, BOS included (source 1)
        self._api_key = api_key
        self._http = http
        self._own_http = http is None
        self._timeout_s = timeout_s
        self._endpoint_ok: bool | None = None if base_url else False
        self._tiktoken: Any = None
        self._tiktoken_checked = False
        self.method = "utf8-bytes"
        self._counted: dict[str, int] = {}

    async def count(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        limit: int | None = None,
    ) -> int:
        """An upper bound of the input tokens (`measure`); `method` then names its source."""
        n, self.method = await self.measure(prompt=prompt, messages=messages, tools=tools, limit=limit)
        return n

    async def measure(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
        limit: int | None = None,
    ) -> tuple[int, str]:
        """An upper bound of the input tokens and the source it came from. With `limit`,
        the cheap byte bound is returned when it already fits; a finer source is asked
        only when it does not. Shares no state between calls (concurrent calls each get
        their own source)."""
        bound = byte_bound(prompt=prompt, messages=messages, tools=tools)
        if limit is not None and bound <= limit:
            return bound, "utf8-bytes"
        finer = await self.count_endpoint(prompt=prompt, messages=messages, tools=tools)
        method = "model tokenizer" if self._tokenize is not None else "endpoint"
        if finer is None:
            finer = self.count_tiktoken(prompt=prompt, messages=messages, tools=tools)
            method = f"tiktoken:{self._tiktoken.name}" if finer is not None else method
        if finer is None or bound < finer:
            return bound, "utf8-bytes"
        return finer, method

    async def count_endpoint(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> int | None:
        """The endpoint tokenizer's count (plus chat margins), or None when the endpoint
        offers no tokenizer. Asked once per counter whether it has one; the model's own
        tokenizer (`tokenize`) instead when the counter has one."""
        if self._tokenize is None and (self._endpoint_ok is False or not self.base_url):
            return None
        if prompt is not None:
            n = await self._tokenize_count(prompt)
            return n
        texts = [message_text(m) for m in messages or ()]
        texts += [json.dumps(t, separators=(",", ":")) for t in tools or ()]
        total = PER_CONVERSATION
        for t in texts:  # one request per text: a concatenation could merge across boundaries
            n = await self._tokenize_count(t)
            if n is None:
                return None
            total += n + PER_MESSAGE
        total += PER_TOOL * len(tools or ())
        return total

    def count_tiktoken(
        self,
        *,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> int | None:
        if not self._tiktoken_checked:
            self._tiktoken = local_tiktoken(self.model)
            self._tiktoken_checked = True
        enc = self._tiktoken
        if enc is None:
            return None
        try:
            if prompt is not None:
                n = len(enc.encode(prompt, disallowed_special=())) + TEXT_MARGIN
            else:
                n = PER_CONVERSATION
                for m in messages or ():
                    n += len(enc.encode(message_text(m), disallowed_special=())) + PER_MESSAGE
                for t in tools or ():
                    n += len(enc.encode(json.dumps(t, separators=(",", ":")), disallowed_special=())) + PER_TOOL
        except Exception:
            return None
        return n

    async def _tokenize_count(self, text: str) -> int | None:
        """The endpoint tokenizer's count of `text` (None when it has none); remembered,
        since the k samples of a (case, arm) send the same text."""
        if text in self._counted:
            return self._counted[text]
        if self._tokenize is not None:  # off the event loop: the first count loads the vocabulary
            n: int | None = await asyncio.to_thread(self._tokenize, text)
        else:
            n = await self._ask_tokenizer(text)
        if n is not None:
            if len(self._counted) >= _COUNT_CACHE_SIZE:
                self._counted.pop(next(iter(self._counted)))  # the oldest entry
            self._counted[text] = n
        return n

    async def _ask_tokenizer(self, text: str) -> int | None:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        try:
            async with self._http.post(
                _server_root(self.base_url or "") + "/extras/tokenize/count",
                json={"input": text, "model": self.model},
                headers=headers,
            ) as resp:
                if resp.status != 200:
                    self._endpoint_ok = False
                    return None
                n = int((await resp.json(content_type=None))["count"])
        except Exception:
            self._endpoint_ok = False
            return None
        self._endpoint_ok = True
        return n

    async def aclose(self) -> None:
        if self._http is not None and self._own_http:
            await self._http.close()
        self._http = None
