"""A GitHub REST API stub on loopback for the pull-request comment tests: a real HTTP
server that records every request and answers the four issue-comment calls as
api.github.com does (https://docs.github.com/en/rest/issues/comments, API version
2022-11-28): the list paginated with a `Link: <...>; rel="next"` header, created
comments `201` with the comment object, updates `200`, a comment of another user `403`,
an unknown one `404`, a wrong token `401 Bad credentials`."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

BOT = {"login": "github-actions[bot]", "id": 41898282, "type": "Bot"}


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class GitHubStub:
    """`with GitHubStub(token="t") as gh:` serves on `gh.api_url`; `gh.requests` holds
    what was asked, `gh.comments[n]` the comments of issue `n`."""

    token: str
    owner: str = "acme"
    repo: str = "widgets"
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    next_id: int = 1000
    post_status: int | None = None  # answer POST with this error status instead
    host: str = "127.0.0.1"  # the loopback address it listens on
    redirect: tuple[int, str] | None = None  # answer with (status, Location: base + path) instead
    redirect_methods: tuple[str, ...] = ("GET", "POST", "PATCH")  # the calls `redirect` answers

    def add(self, number: int, body: str, user: dict[str, Any] | None = None) -> dict[str, Any]:
        """A comment already on issue `number` (by `user`, default someone else)."""
        self.next_id += 1
        c = {"id": self.next_id, "node_id": f"IC_{self.next_id}", "body": body,
             "user": user or {"login": "octocat", "id": 1, "type": "User"},
             "html_url": f"https://github.com/{self.owner}/{self.repo}/pull/{number}#issuecomment-{self.next_id}",
             "issue_url": f"{self.api_url}/repos/{self.owner}/{self.repo}/issues/{number}",
             "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z",
             "author_association": "MEMBER"}
        self.comments.setdefault(number, []).append(c)
        return c

    def __enter__(self) -> GitHubStub:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _answer(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                stub.requests.append(Recorded(self.command, parts.path, parse_qs(parts.query),
                                              {k.lower(): v for k, v in self.headers.items()}, body))
                if stub.redirect is not None and self.command in stub.redirect_methods:  # as GitHub answers for a renamed repository
                    status, base = stub.redirect
                    return self._answer(status, {"message": "Moved Permanently", "url": base + self.path},
                                        {"Location": base + self.path})
                if self.headers.get("Authorization") != f"Bearer {stub.token}":
                    return self._answer(401, {"message": "Bad credentials",
                                              "documentation_url": "https://docs.github.com/rest"})
                seg = parts.path.strip("/").split("/")
                if seg[:3] != ["repos", stub.owner, stub.repo] or len(seg) < 5 or seg[3] != "issues":
                    return self._answer(404, {"message": "Not Found"})
                if len(seg) == 6 and seg[5] == "comments" and seg[4].isdigit():
                    number = int(seg[4])
                    if self.command == "GET":
                        q = parse_qs(parts.query)
                        per_page = int(q.get("per_page", ["30"])[0])
                        page = int(q.get("page", ["1"])[0])
                        items = stub.comments.get(number, [])
                        chunk = items[(page - 1) * per_page: page * per_page]
                        headers = {}
                        if page * per_page < len(items):
                            nxt = f"{stub.api_url}{parts.path}?per_page={per_page}&page={page + 1}"
                            headers["Link"] = f'<{nxt}>; rel="next"'
                        return self._answer(200, chunk, headers)
                    if self.command == "POST":
                        if stub.post_status:
                            return self._answer(stub.post_status, {"message": "Resource not accessible by integration"})
                        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
                            return self._answer(422, {"message": "Validation Failed"})
                        return self._answer(201, stub.add(number, body["body"], BOT))
                if len(seg) == 6 and seg[4] == "comments" and seg[5].isdigit() and self.command == "PATCH":
                    cid = int(seg[5])
                    found = next((c for cs in stub.comments.values() for c in cs if c["id"] == cid), None)
                    if found is None:
                        return self._answer(404, {"message": "Not Found"})
                    if found["user"] != BOT:
                        return self._answer(403, {"message": "Resource not accessible by integration"})
                    found["body"] = body["body"]
                    found["updated_at"] = "2026-12-01T00:00:01Z"
                    return self._answer(200, found)
                return self._answer(404, {"message": "Not Found"})

            do_GET = do_POST = do_PATCH = _handle

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self.api_url = f"http://{self.host}:{self._server.server_address[1]}"
        # shutdown() is seen only when the loop's select() times out: at the default 0.5 s,
        # each `with GitHubStub()` waited up to half a second on leaving
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def env(self, tmp_path, number: int | None = 7, token: str | None = None) -> dict[str, str]:
        """The variables GitHub Actions sets for a job on pull request `number` (None: a
        manual run, whose event has no pull request)."""
        event = tmp_path / "event.json"
        payload = {"action": "synchronize", "number": number, "pull_request": {"number": number}} \
            if number is not None else {"inputs": {}, "ref": "refs/heads/main"}
        event.write_text(json.dumps(payload))
        return {"GITHUB_API_URL": self.api_url, "GITHUB_REPOSITORY": f"{self.owner}/{self.repo}",
                "GITHUB_EVENT_PATH": str(event), "GITHUB_EVENT_NAME": "pull_request" if number else "workflow_dispatch",
                "GITHUB_TOKEN": self.token if token is None else token,
                "GITHUB_SERVER_URL": "https://github.com", "GITHUB_RUN_ID": "4242"}
