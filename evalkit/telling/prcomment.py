"""The pull-request comment: a suite's CI Markdown (the gate's and `compare`'s summaries)
posted on the pull request, or the comment posted before updated, one per suite.

`evalkit ci comment --suite SUITE FILE...` (the `comment` job of the workflow
`evalkit init --ci github` writes) reads where it runs from what GitHub Actions sets:
`GITHUB_REPOSITORY` (`owner/repo`), `GITHUB_EVENT_PATH` (the event's JSON, which holds
the pull request's number), `GITHUB_API_URL` (the REST API's base; `https://api.github.com`
when unset) and the token in `GITHUB_TOKEN`. No token, or an event with no pull request
(a manual run): nothing is sent, and the command says why.

The comment starts with a hidden marker, `<!-- evalkit:SUITE -->`: the comments of the
pull request are listed (`GET /repos/{owner}/{repo}/issues/{n}/comments`, every page), and
the last one whose body starts with the suite's marker is updated (`PATCH
/repos/{owner}/{repo}/issues/comments/{id}`); with none, one is created (`POST
.../issues/{n}/comments`). A marked comment the token may not edit (someone else wrote
it: 403 or 404) gets a new comment beside it, which the next run then finds last.

What is posted is published: the Markdown files are already written redacted
(`evalkit.telling.ciout`), and the body is redacted again here
(`evalkit.pii.privacy.redact_shown`: each personal value or secret the scanner
detects becomes its kind's placeholder, `<API_KEY>`), then scanned; a body that still
shows a value is never sent (`RedactionIncomplete`). The token goes only to an `https`
API, or to one on loopback (a test's stub): never in clear over a network. A redirect is
never followed (it would carry the token to the host it names): a 3xx answer fails the
command (exit 1), saying where it pointed.

Written on the standard library's `urllib` (no GitHub client is a dependency of evalkit,
and four calls do not warrant one).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from evalkit.foundations._io import loads_bounded, read_text_file
from evalkit.foundations._text import printable
from evalkit.foundations.errors import EvalkitError, InputError, RedactionIncomplete
from evalkit.telling.ciout import md_escape

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"  # the REST API version the calls below are written against
MAX_BODY = 65536  # characters GitHub accepts in a comment's body
PER_PAGE = 100  # the most comments one page of the list holds
TIMEOUT_S = 30.0
MAX_FILE_BYTES = 1024 * 1024
# Bounds on what GitHub (or whatever answers at GITHUB_API_URL) can make this command do:
MAX_PAGES = 100  # pages of comments listed (10,000 comments)
MAX_ANSWER_BYTES = 32 * 1024 * 1024  # one answer (a page of 100 comments of 65,536 characters fits)
TOTAL_S = 300.0  # every call of one `ci comment` together

Action = Literal["created", "updated", "skipped"]


class GitHubError(EvalkitError):
    """The GitHub API refused a call or could not be reached (exit 1): the comment was
    not posted, and the message says which call and what GitHub answered."""


@dataclass(frozen=True)
class PullRequest:
    """Where a comment goes: the API's base URL, the repository and the pull request."""

    api_url: str
    owner: str
    repo: str
    number: int


@dataclass(frozen=True)
class CommentResult:
    """What `post_comment` did: `created` or `updated` comment `comment_id` (its page at
    `url`), or `skipped` and why (`reason`)."""

    action: Action
    comment_id: int | None = None
    url: str = ""
    reason: str = ""

    def render(self) -> str:
        if self.action == "skipped":
            return f"no pull-request comment: {self.reason}"
        return f"{self.action} pull-request comment {self.comment_id}" + (f": {self.url}" if self.url else "")


def marker(suite: str) -> str:
    """The hidden line a suite's comment starts with. The suite's name is percent-encoded
    past `[A-Za-z0-9/._~-]`, so no name can close the HTML comment (`-->`) or break the line."""
    name = quote(suite.strip(), safe="/")
    if not name:
        raise InputError("--suite is empty: the comment's marker needs the suite's name")
    return f"<!-- evalkit:{name} -->"


def _pr_number(event: Any) -> int | None:
    """The pull request's number in an Actions event payload: `pull_request.number`
    (pull_request, pull_request_target), `issue.number` of an issue that is a pull
    request (issue_comment); else None (a push, a manual run)."""
    if not isinstance(event, dict):
        return None
    pr = event.get("pull_request")
    if isinstance(pr, dict) and isinstance(pr.get("number"), int) and not isinstance(pr["number"], bool):
        return int(pr["number"])
    issue = event.get("issue")
    if isinstance(issue, dict) and isinstance(issue.get("pull_request"), dict):
        n = issue.get("number")
        if isinstance(n, int) and not isinstance(n, bool):
            return n
    return None


def _checked_api_url(url: str) -> str:
    """`url` without its trailing slash, when a token may go there: `https`, or `http` to
    a loopback host. Else InputError (exit 2)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "https" and host:
        return url.rstrip("/")
    if parts.scheme == "http" and host:
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if loopback:
            return url.rstrip("/")
    raise InputError(
        f"GITHUB_API_URL {url!r} is neither an https URL nor a loopback one: the token is never sent in clear"
    )


def pull_request_from_env(env: Mapping[str, str] | None = None) -> PullRequest | None:
    """The pull request this Actions job runs for, from `GITHUB_REPOSITORY`,
    `GITHUB_EVENT_PATH` and `GITHUB_API_URL`; None when the event is no pull request's.
    InputError (naming the variable or file) when they are malformed."""
    env = os.environ if env is None else env
    repo = env.get("GITHUB_REPOSITORY", "")
    owner, _, name = repo.partition("/")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", owner) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise InputError(f"GITHUB_REPOSITORY {repo!r} is not OWNER/REPO (GitHub Actions sets it)")
    event_path = env.get("GITHUB_EVENT_PATH", "")
    if not event_path:
        raise InputError("GITHUB_EVENT_PATH is not set: GitHub Actions sets it to the event's JSON")
    try:
        event = loads_bounded(read_text_file(Path(event_path), limit=64 * 1024 * 1024), event_path)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc.msg} (line {exc.lineno})", Path(event_path)) from None
    number = _pr_number(event)
    if number is None:
        return None
    return PullRequest(_checked_api_url(env.get("GITHUB_API_URL") or DEFAULT_API_URL), owner, name, number)


def _redacted(text: str) -> str:
    """`text` with every detected personal value or secret replaced by its kind's
    placeholder; RedactionIncomplete when the scanner still finds one (never sent)."""
    # lazy: the privacy scanners compile their patterns on import
    from evalkit.pii.privacy import redact_shown

    out = redact_shown(text)
    _refuse_shown(out)
    return out


def _refuse_shown(text: str) -> None:
    """RedactionIncomplete when the privacy scanner finds any value in `text`."""
    from evalkit.pii.privacy import scanner  # lazy: as `_redacted`

    if scanner().scan(text):
        raise RedactionIncomplete("redaction incomplete: the pull-request comment would show a secret; not sent")


def comment_body(suite: str, files: Sequence[Path], footer: str = "") -> str:
    """The comment for `suite`: its marker, a heading, each Markdown file in order (a
    missing one named as not written: no summary is never a pass), the `footer`, all
    redacted, cut to what GitHub accepts. InputError when none of the files exists."""
    if not files:
        raise InputError("give the Markdown file(s) to post (the gate's and compare's --markdown)")
    parts: list[str] = []
    found = 0
    for f in files:
        p = Path(f)
        if p.is_file():
            parts.append(read_text_file(p, limit=MAX_FILE_BYTES, allow_empty=True).strip())
            found += 1
        else:
            parts.append(f"_{p.name} was not written: that step did not finish._")
    if not found:
        raise InputError(f"none of the Markdown files exists ({', '.join(str(f) for f in files)}): nothing to post")
    head = f"### evalkit: {md_escape(suite, 200)}"
    # the marker stays as written (the next run finds the comment by it); the rest is redacted
    text = f"{marker(suite)}\n" + _redacted("\n\n".join([head, *parts, *([footer] if footer else [])]) + "\n")
    _refuse_shown(text)  # the marker too: a suite named by an address is refused, not posted
    if len(text) > MAX_BODY:
        note = "\n\n_(cut: the full summary is in the job's summary and the uploaded report)_\n"
        text = text[: MAX_BODY - len(note)] + note
    return text


def run_footer(env: Mapping[str, str] | None = None) -> str:
    """A line linking the Actions run (where the report artifact is), when Actions says
    which run this is (`GITHUB_SERVER_URL`, `GITHUB_REPOSITORY`, `GITHUB_RUN_ID`)."""
    env = os.environ if env is None else env
    server, repo, run_id = (env.get(k, "") for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    if not (re.fullmatch(r"https://[A-Za-z0-9.-]+(:[0-9]+)?", server) and re.fullmatch(r"[0-9]+", run_id)):
        return ""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        return ""
    link = f"{server}/{repo}/actions/runs/{run_id}"
    return f"The rendered report is the `evalkit-report` artifact of [run {run_id}]({link})."


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: urllib's own handler would resend the Authorization header
    to whatever host the `Location` names (plain http included) and turn a redirected
    POST into a GET. The 3xx answer is raised as it came (an HTTPError), and `_Api.call`
    says it was not followed."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class _Api:
    """The four REST calls, authenticated with the token, JSON both ways; a redirect is
    never followed (the token goes to the checked API URL and nowhere else)."""

    def __init__(self, pr: PullRequest, token: str) -> None:
        self.pr = pr
        self.token = token
        self.deadline = time.monotonic() + TOTAL_S

    def call(self, method: str, url: str, body: dict[str, Any] | None = None) -> tuple[Any, str]:
        """The decoded JSON answer and the `Link` header; GitHubError on any failure."""
        data = json.dumps(body).encode("utf-8") if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/vnd.github+json")
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("X-GitHub-Api-Version", API_VERSION)
        req.add_header("User-Agent", "evalkit")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        where = f"{method} {urlsplit(url).path}"
        try:
            with _OPENER.open(req, timeout=self._left(where)) as resp:
                raw = self._read(resp, where)
                link = resp.headers.get("Link", "") or ""
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                to = " ".join(str(exc.headers.get("Location", "") or "").split())[:300] or "nowhere said"
                raise _HttpStatus(
                    exc.code,
                    f"{where}: GitHub answered {exc.code}, a redirect to {to}: not followed (the token goes only"
                    f" to {self.pr.api_url}); a renamed repository: set GITHUB_REPOSITORY or GITHUB_API_URL to"
                    " where it is now",
                ) from None
            detail = exc.read(2000).decode("utf-8", "replace")
            try:
                detail = str(json.loads(detail).get("message", detail))
            except (ValueError, AttributeError):
                pass
            said = " ".join(detail.split())[:300]
            raise _HttpStatus(exc.code, f"{where}: GitHub answered {exc.code}: {said}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise GitHubError(f"{where}: GitHub could not be reached: {reason}") from None
        try:
            return (loads_bounded(raw.decode("utf-8"), where) if raw else None), link
        except (ValueError, InputError):
            raise GitHubError(f"{where}: GitHub answered with no JSON (or JSON nested too deep)") from None

    def _left(self, where: str) -> float:
        """The seconds the next read may wait: `TIMEOUT_S`, or what is left of `TOTAL_S`."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise GitHubError(f"{where}: the GitHub calls took over {TOTAL_S:g}s in all: stopped")
        return min(TIMEOUT_S, left)

    def _read(self, resp: Any, where: str) -> bytes:
        """An answer's body, read as it arrives (each read returns what one receive
        brought, its wait set to the time left): over `MAX_ANSWER_BYTES`, or past the
        deadline, a GitHubError (never a 300 MB page read whole, nor a server that drips
        a byte at a time kept past `TOTAL_S`)."""
        chunks: list[bytes] = []
        got = 0
        while True:
            _set_timeout(resp, self._left(where))
            try:
                chunk = resp.read1(1 << 16)
            except TimeoutError:
                self._left(where)  # past the deadline: says so
                raise
            if not chunk:
                return b"".join(chunks)
            got += len(chunk)
            if got > MAX_ANSWER_BYTES:
                raise GitHubError(f"{where}: GitHub's answer passed {MAX_ANSWER_BYTES} bytes: not read further")
            chunks.append(chunk)

    def comments(self) -> list[dict[str, Any]]:
        """Every comment of the pull request, following the `Link: rel="next"` pages."""
        pr = self.pr
        url: str | None = f"{pr.api_url}/repos/{pr.owner}/{pr.repo}/issues/{pr.number}/comments?per_page={PER_PAGE}"
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        while url and url not in seen:
            if len(seen) >= MAX_PAGES:
                raise GitHubError(
                    f"GET {urlsplit(url).path}: more than {MAX_PAGES} pages of comments: not listed further"
                )
            seen.add(url)
            page, link = self.call("GET", url)
            if not isinstance(page, list):
                raise GitHubError(f"GET {urlsplit(url).path}: GitHub answered something other than a list")
            out += [c for c in page if isinstance(c, dict)]
            url = _next_link(link, pr.api_url)
        return out


def _set_timeout(resp: Any, seconds: float) -> None:
    """The wait of the next receive on `resp`'s socket (an `http.client` response over a
    socket file; anything else is left as it is)."""
    sock = getattr(getattr(getattr(resp, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(max(seconds, 0.001))


class _HttpStatus(GitHubError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _next_link(link: str, api_url: str) -> str | None:
    """The `rel="next"` URL of a `Link` header (RFC 8288), when it is on the same API."""
    for part in link.split(","):
        m = re.fullmatch(r"\s*<([^>]*)>\s*;(.*)", part)
        if m and re.search(r'\brel="?next"?', m.group(2)):
            nxt = m.group(1)
            return nxt if nxt.startswith(api_url + "/") else None
    return None


def post_comment(pr: PullRequest, token: str, suite: str, body: str) -> CommentResult:
    """Update the suite's comment on `pr` (the last one starting with its marker) to
    `body`, or create it; a marked comment the token may not edit gets a new one beside
    it. GitHubError (exit 1) when GitHub refuses or cannot be reached."""
    if not body.startswith(marker(suite)):
        raise InputError("the comment's body must start with the suite's marker (comment_body builds it)")
    api = _Api(pr, token)
    mine = [c for c in api.comments() if str(c.get("body") or "").startswith(marker(suite)) and _comment_id(c)]
    if mine:
        cid = mine[-1]["id"]
        try:
            answer, _ = api.call(
                "PATCH", f"{pr.api_url}/repos/{pr.owner}/{pr.repo}/issues/comments/{int(cid)}", {"body": body}
            )
            return _result("updated", answer, cid)
        except _HttpStatus as exc:
            if exc.status not in (403, 404):
                raise
    answer, _ = api.call("POST", f"{pr.api_url}/repos/{pr.owner}/{pr.repo}/issues/{pr.number}/comments", {"body": body})
    return _result("created", answer, None)


def _comment_id(c: dict[str, Any]) -> int | None:
    """A listed comment's id when it is a positive integer, else None: a comment with
    another id (a string, a bool) is no match, never a traceback."""
    cid = c.get("id")
    return cid if isinstance(cid, int) and not isinstance(cid, bool) and cid > 0 else None


def _result(action: Action, answer: Any, cid: Any) -> CommentResult:
    """What was done; the answer's `html_url` made one printable line (a newline in it
    could print a workflow command such as `::error::`)."""
    a = answer if isinstance(answer, dict) else {}
    got = a.get("id", cid)
    ok = isinstance(got, int) and not isinstance(got, bool)
    return CommentResult(action, int(got) if ok else None, printable(str(a.get("html_url") or ""))[:2000])


def comment_on_pull_request(suite: str, files: Sequence[Path], env: Mapping[str, str] | None = None) -> CommentResult:
    """`evalkit ci comment`: the body built from `files` (redacted), posted or updated on
    the pull request the Actions environment `env` names, with its `GITHUB_TOKEN`;
    skipped, saying why, with no token or no pull request."""
    env = os.environ if env is None else env
    body = comment_body(suite, files, run_footer(env))  # built (and checked) even when nothing is sent
    token = env.get("GITHUB_TOKEN", "")
    if not token:
        return CommentResult("skipped", reason="GITHUB_TOKEN is not set")
    pr = pull_request_from_env(env)
    if pr is None:
        return CommentResult("skipped", reason="the event is not a pull request's (GITHUB_EVENT_PATH has no number)")
    return post_comment(pr, token, suite, body)
