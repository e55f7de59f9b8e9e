"""`evalkit ci comment` (evalkit.telling.prcomment) against a GitHub API stub on loopback
(tests/github_stub.py): one comment per suite, created then updated, found by its hidden
marker across pages; redacted; the token sent only as GitHub expects and only where it
may go; nothing sent without a token or a pull request; GitHub's refusals exit 1."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from github_stub import BOT, GitHubStub

from evalkit._cli.main import main
from evalkit.foundations.errors import InputError, RedactionIncomplete
from evalkit.telling.prcomment import MAX_BODY, comment_body, marker, pull_request_from_env

SECRET = "sk-proj-Qw3rTy7UiOp9AsDfGh2JkLzXcVbNm4Qw8ErTy6Ui"
EMAIL = "jane.doe@acme-corp.com"
TOKEN = "ghs_stubtoken"


def _md(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def comment(env: dict[str, str], *args: object):
    return CliRunner().invoke(main, ["ci", "comment", *map(str, args)], env=env, catch_exceptions=False)


def test_the_first_run_creates_the_comment_and_the_next_updates_it(tmp_path):
    gate = _md(tmp_path, "gate.md", f"## evalkit gate: PASS\n\nthe model said {SECRET} to {EMAIL}\n")
    cmp_ = _md(tmp_path, "compare.md", "## evalkit compare: verdict regression\n")
    with GitHubStub(TOKEN) as gh:
        gh.add(7, "LGTM")  # someone's review comment: never touched
        env = gh.env(tmp_path)
        first = comment(env, "--suite", "evals/unit", gate, cmp_)
        assert first.exit_code == 0, first.output
        assert "created pull-request comment" in first.output
        get, post = gh.requests
        assert (get.method, get.path, get.query["per_page"]) == ("GET", "/repos/acme/widgets/issues/7/comments",
                                                                  ["100"])
        assert (post.method, post.path) == ("POST", "/repos/acme/widgets/issues/7/comments")
        for r in gh.requests:  # GitHub's documented headers, the token as a bearer token
            assert r.headers["authorization"] == f"Bearer {TOKEN}"
            assert r.headers["accept"] == "application/vnd.github+json"
            assert r.headers["x-github-api-version"] == "2022-11-28"
        body = post.body["body"]
        assert body.startswith("<!-- evalkit:evals/unit -->\n")
        assert "## evalkit gate: PASS" in body and "## evalkit compare: verdict regression" in body
        assert body.index("evalkit gate") < body.index("evalkit compare")  # the files' order
        # the planted secret and address never leave the machine: the placeholders do
        assert SECRET not in body and EMAIL not in body and "<API_KEY>" in body and "<EMAIL>" in body
        assert "[run 4242](https://github.com/acme/widgets/actions/runs/4242)" in body
        [ours] = [c for c in gh.comments[7] if c["user"] == BOT]

        # the next push: the same comment is edited, no second one appears
        _md(tmp_path, "compare.md", "## evalkit compare: verdict pass\n")
        again = comment(env, "--suite", "evals/unit", gate, cmp_)
        assert again.exit_code == 0, again.output
        assert "updated pull-request comment" in again.output
        patch = gh.requests[-1]
        assert (patch.method, patch.path) == ("PATCH", f"/repos/acme/widgets/issues/comments/{ours['id']}")
        assert [r.method for r in gh.requests] == ["GET", "POST", "GET", "PATCH"]
        assert [c["body"] for c in gh.comments[7]][0] == "LGTM" and len(gh.comments[7]) == 2
        assert "verdict pass" in ours["body"] and "verdict regression" not in ours["body"]

        # another suite of the same repository gets a comment of its own
        other = comment(env, "--suite", "evals/agent", cmp_)
        assert other.exit_code == 0 and gh.requests[-1].method == "POST"
        assert len(gh.comments[7]) == 3 and gh.comments[7][-1]["body"].startswith("<!-- evalkit:evals/agent -->")


def test_the_comment_is_found_on_a_later_page_and_one_someone_else_marked_is_left_alone(tmp_path):
    md = _md(tmp_path, "gate.md", "## evalkit gate: FAIL\n")
    with GitHubStub(TOKEN) as gh:
        for i in range(130):
            gh.add(7, f"comment {i}")
        mine = gh.add(7, marker("evals/unit") + "\nold", BOT)  # on page 2 of 100
        env = gh.env(tmp_path)
        res = comment(env, "--suite", "evals/unit", md)
        assert res.exit_code == 0, res.output
        pages = [r for r in gh.requests if r.method == "GET"]
        assert len(pages) == 2 and pages[1].query["page"] == ["2"]
        assert gh.requests[-1].path.endswith(f"/issues/comments/{mine['id']}") and "FAIL" in mine["body"]

    with GitHubStub(TOKEN) as gh:  # a user's comment that starts with the marker: GitHub answers 403
        forged = gh.add(7, marker("evals/unit") + "\nnot yours")
        env = gh.env(tmp_path)
        assert comment(env, "--suite", "evals/unit", md).exit_code == 0
        assert [r.method for r in gh.requests] == ["GET", "PATCH", "POST"] and forged["body"].endswith("not yours")
        assert comment(env, "--suite", "evals/unit", md).exit_code == 0  # the next run edits its own, the last
        assert [r.method for r in gh.requests][-2:] == ["GET", "PATCH"] and len(gh.comments[7]) == 2


def test_nothing_is_sent_without_a_token_or_a_pull_request(tmp_path):
    md = _md(tmp_path, "gate.md", "## evalkit gate: PASS\n")
    with GitHubStub(TOKEN) as gh:
        res = comment(gh.env(tmp_path, token=""), "--suite", "evals/unit", md)
        assert res.exit_code == 0 and "no pull-request comment: GITHUB_TOKEN is not set" in res.output
        res = comment(gh.env(tmp_path, number=None), "--suite", "evals/unit", md)
        assert res.exit_code == 0 and "the event is not a pull request's" in res.output
        assert gh.requests == []


def test_refusals_exit_1_and_bad_input_exits_2(tmp_path):
    md = _md(tmp_path, "gate.md", "## evalkit gate: PASS\n")
    with GitHubStub(TOKEN) as gh:
        gh.post_status = 403  # a fork's read-only token
        res = comment(gh.env(tmp_path), "--suite", "evals/unit", md)
        assert res.exit_code == 1
        assert "POST /repos/acme/widgets/issues/7/comments: GitHub answered 403" in res.output
        assert "Resource not accessible by integration" in res.output
        res = comment(gh.env(tmp_path, token="ghs_notthetoken"), "--suite", "evals/unit", md)
        assert res.exit_code == 1 and "401" in res.output and "Bad credentials" in res.output
        assert "ghs_notthetoken" not in res.output  # the token is never echoed
        env = gh.env(tmp_path)
    # the token never goes in clear over a network; a loopback stub is allowed
    for url in ("http://api.example.org", "ftp://127.0.0.1", "http://10.0.0.1"):
        res = comment({**env, "GITHUB_API_URL": url}, "--suite", "evals/unit", md)
        assert res.exit_code == 2 and "GITHUB_API_URL" in res.output, res.output
    res = comment({**env, "GITHUB_REPOSITORY": "no-slash"}, "--suite", "evals/unit", md)
    assert res.exit_code == 2 and "GITHUB_REPOSITORY" in res.output
    (tmp_path / "bad.json").write_text("{not json")
    res = comment({**env, "GITHUB_EVENT_PATH": str(tmp_path / "bad.json")}, "--suite", "evals/unit", md)
    assert res.exit_code == 2 and "bad.json" in res.output and "not JSON" in res.output
    res = comment(env, "--suite", "evals/unit", tmp_path / "none.md")
    assert res.exit_code == 2 and "none of the Markdown files exists" in res.output


@pytest.mark.parametrize(("status", "methods"), [(301, ("GET",)), (302, ("POST",)), (303, ("POST",)),
                                               (307, ("GET",)), (308, ("POST",))])
def test_a_redirect_is_not_followed_and_the_token_stays_home(tmp_path, status, methods):
    """GitHub's API answering a redirect (a renamed repository answers 301) to another
    host over plain http: urllib's default would resend the Authorization header there
    (and a redirected POST as a GET). Not followed: the other host hears nothing, the
    command exits 1 naming the redirect, and the token is not echoed."""
    md = _md(tmp_path, "gate.md", "## evalkit gate: PASS\n")
    with GitHubStub(TOKEN, host="127.0.0.2") as elsewhere, GitHubStub(TOKEN) as gh:
        gh.redirect, gh.redirect_methods = (status, elsewhere.api_url), methods
        res = comment(gh.env(tmp_path), "--suite", "evals/unit", md)
        assert res.exit_code == 1, res.output
        call = "GET" if "GET" in methods else "POST"
        assert f"{call} /repos/acme/widgets/issues/7/comments: GitHub answered {status}, a redirect to" \
               f" {elsewhere.api_url}/repos/acme/widgets/issues/7/comments" in res.output, res.output
        assert "not followed" in res.output and TOKEN not in res.output
        assert elsewhere.requests == [] and elsewhere.comments == {}
        assert [r.method for r in gh.requests] == (["GET"] if call == "GET" else ["GET", "POST"])


def test_the_body_names_a_missing_summary_keeps_the_marker_safe_and_fits_github(tmp_path):
    md = _md(tmp_path, "gate.md", "## evalkit gate: PASS\n" + "x" * (MAX_BODY + 10))
    body = comment_body("evals/unit", [md, tmp_path / "compare.md"])
    assert len(body) <= MAX_BODY and body.rstrip().endswith("the uploaded report)_")
    body = comment_body("evals/unit", [tmp_path / "compare.md", _md(tmp_path, "g.md", "ok")])
    assert "_compare.md was not written: that step did not finish._" in body
    # no suite name can close the hidden comment or start a new line in it
    m = marker("a-->b\n<script>")
    assert m.startswith("<!-- evalkit:") and m.count("-->") == 1 and "\n" not in m and "<script>" not in m
    with pytest.raises(InputError):
        marker("  ")
    with pytest.raises(RedactionIncomplete):  # the marker is kept as written, so it must hold no value
        comment_body(f"evals/{EMAIL}", [md])
    # the pull request's number comes from the event as Actions writes it, for each event kind
    ev = tmp_path / "ev.json"
    base = {"GITHUB_REPOSITORY": "o/r", "GITHUB_EVENT_PATH": str(ev)}
    ev.write_text('{"issue": {"number": 12, "pull_request": {"url": "x"}}}')  # issue_comment on a PR
    assert pull_request_from_env(base).number == 12
    ev.write_text('{"issue": {"number": 12}}')  # on an issue: no pull request
    assert pull_request_from_env(base) is None
    ev.write_text('{"pull_request": {"number": 3}}')
    assert pull_request_from_env(base).api_url == "https://api.github.com"
