"""Hostile input files (issue 44, item 5): every JSON and YAML reader behind one
depth guard, `$ref` never retrieved, Waza globs and results bounded and type-checked,
the dashboard preview and `ci comment` bounded in bytes, pages and time. Each test here
fails on the code before the fix (a RecursionError traceback, a hang, a file read whole)."""

from __future__ import annotations

import json

import pytest
from conftest import make_run, make_suite, two_arm

from evalkit.foundations.errors import InputError

DEEP = "[" * 5000 + "]" * 5000  # a RecursionError in the JSON module (about 1,000 levels)


def _deep_object(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


# --- the guard itself --------------------------------------------------------------------
def test_depth_guard_counts_levels_not_brackets_and_skips_strings():
    from evalkit.foundations._io import MAX_JSON_DEPTH, deep_offset

    assert deep_offset("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is None
    assert deep_offset("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)) == MAX_JSON_DEPTH
    assert deep_offset(json.dumps([[1]] * 500)) is None  # many brackets, two levels
    assert deep_offset(json.dumps({"s": "[{" * 500})) is None  # brackets in a string
    # closing brackets in strings do not hide the levels
    assert deep_offset("[" + '"]",[' * 100 + "]" * 101) is not None


def _deep_offset_before(text, limit):
    """`deep_offset` as first written: the strings cut, then each pass of the innermost
    level over all that is left (the reference its faster reading must equal)."""
    import re

    if text.count("[") + text.count("{") <= limit:
        return None
    rest = re.sub(r'"[^"\\]*(?:\\.[^"\\]*)*"', "", text)
    for _ in range(limit):
        rest, n = re.subn(r"[\[{][^\[\]{}]*[\]}]", "", rest)
        if not n:
            return None
    if re.search(r"[\[{][^\[\]{}]*[\]}]", rest) is None:
        return None
    depth = 0
    for m in re.finditer(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', text):
        depth += 1 if m.group() in "[{" else -1 if m.group() in "]}" else 0
        if depth > limit:
            return m.start()
    return 0


@pytest.mark.parametrize("seed", range(4))
def test_depth_guard_says_what_it_said_before(seed):
    """The guard's passes read only the brackets outside strings: on random texts of
    brackets, strings, escapes, quotes no string closes, line breaks and other text, at
    small limits (deep, just deep enough, not deep), it says what the guard that read
    all the text said, offset for offset."""
    import random

    from evalkit.foundations._io import deep_offset

    rnd = random.Random(seed)
    parts = ["[", "]", "{", "}", '"', '"a]"', '"[{"', '"x\\"', '"\\""', "\\", "\n", "a", " ", ",", ":", "1", "é"]
    deep = 0
    for _ in range(3000):
        text = "".join(rnd.choice(parts) for _ in range(rnd.randrange(1, 120)))
        if rnd.random() < 0.3:  # nested, with strings between the levels
            levels = rnd.randrange(2, 8)
            opened = "".join(rnd.choice(["[", "{", '["]",[']) + rnd.choice(["", '"s"', "1,"]) for _ in range(levels))
            text = opened + text + "]" * levels
        limit = rnd.randrange(1, 6)
        want = _deep_offset_before(text, limit)
        assert deep_offset(text, limit) == want, (text, limit)
        deep += want is not None
    assert 300 < deep < 2700  # deep and shallow texts alike


def test_loads_bounded_names_file_and_line():
    from evalkit.foundations._io import loads_bounded

    with pytest.raises(InputError) as ei:
        loads_bounded("\n\n" + _deep_object(3000), "x.json")
    assert ei.value.path == "x.json" and ei.value.line == 3 and "deeper than" in ei.value.message


def test_json_lines_names_the_deep_line_and_reads_the_others():
    from evalkit.foundations._io import json_lines

    got = list(json_lines(b'{"a": 1}\n' + DEEP.encode() + b'\n{"b": 2}\n'))
    assert [(j.line, j.value) for j in got if j.error is None] == [(1, {"a": 1}), (3, {"b": 2})]
    assert got[1].line == 2 and "deeper than" in (got[1].error or "")


# --- every reader ------------------------------------------------------------------------
def test_deep_config_json_is_refused_with_its_file(tmp_path):
    from evalkit.suites.reader import load_suite

    suite = make_suite(tmp_path, {"c1": {}})
    (suite / "config.json").write_text('{"seed": 1, "x": ' + DEEP + "}")
    with pytest.raises(InputError) as ei:
        load_suite(suite)
    assert ei.value.path and ei.value.path.endswith("config.json") and "deeper than" in str(ei.value)


def test_deep_case_line_is_refused_with_its_line(tmp_path):
    from evalkit.suites.reader import load_suite

    suite = make_suite(tmp_path, {"c1": {}, "c2": {}})
    with open(suite / "cases.jsonl", "a") as fh:
        fh.write('{"id": "c3", "input": ' + DEEP + "}\n")
    with pytest.raises(InputError) as ei:
        load_suite(suite)
    assert "cases.jsonl:3" in str(ei.value) and "deeper than" in str(ei.value)


@pytest.mark.parametrize("module, reader, name, text", [
    ("evalkit.suites.formats.agent_evals", "read_agent_evals", "evals.json", '{"cases": ' + DEEP + "}"),
    ("evalkit.numbers.plans", "load_plan", "plan.json", _deep_object(2000)),
    ("evalkit.pii.privacy_policy", "load_policy_file", "privacy.json", '{"allow": ' + DEEP + "}"),
])
def test_deep_json_files_are_refused(tmp_path, module, reader, name, text):
    """evals.json, plan.json and privacy.json, each nested too deep: an InputError
    naming the file, not a RecursionError."""
    import importlib

    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(InputError, match="deeper than") as ei:
        getattr(importlib.import_module(module), reader)(p)
    assert ei.value.path and ei.value.path.endswith(name)


def test_deep_label_file_is_refused(tmp_path):
    from evalkit.checking.judge import parse_human_labels

    with pytest.raises(InputError) as ei:
        parse_human_labels('{"item": "a", "x": ' + DEEP + "}\n", tmp_path / "human-sample.jsonl")
    assert ei.value.line == 1 and "deeper than" in str(ei.value)


def test_deep_yaml_is_refused_with_its_line(tmp_path):
    from evalkit.suites.formats.vally import load_yaml

    p = tmp_path / "eval.yaml"
    p.write_text("name: x\ntasks:\n" + "".join("  " * i + "- \n" for i in range(1, 200)))
    with pytest.raises(InputError) as ei:
        load_yaml(p)
    assert "deeper than" in str(ei.value) and ei.value.line is not None


def test_deep_run_config_under_dashboard_root_does_not_stop_it(tmp_path):
    from evalkit.telling.dashboard import build_dashboard

    suite = make_suite(tmp_path, {"c1": {}})
    run = make_run(tmp_path, "r1", two_arm({"c1": ([True], [True])}), k=1, suite=suite)
    (run / "config.json").write_text('{"suite": ' + DEEP + "}")
    d = build_dashboard(tmp_path)  # the run is a problem named on the page, not a traceback
    assert any("r1" in p and "deeper than" in p for p in d.problems)


# --- files that hang or explode (item 5) ---------------------------------------------------
def _in_thread(fn, limit_s: float = 10.0):
    """`fn()` in a thread, its result or exception; a call still running after `limit_s`
    fails the test (a hang on the old code) instead of hanging it."""
    import threading

    box: list = []

    def go():
        try:
            box.append(fn())
        except BaseException as exc:  # noqa: BLE001 - returned for the assertions
            box.append(exc)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(limit_s)
    assert box, f"still running after {limit_s}s"
    return box[0]


def _laughs(levels: int) -> str:
    """A YAML "billion laughs": each level an alias list of ten of the one before."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_yaml_aliases_that_expand_past_the_cap_are_refused_at_once(tmp_path):
    """Nested aliases (a 10**30 document in 30 lines) are refused in bounded time, by the
    front matter reader (`analyze`, `tokens`, the dashboard) and the scripted server's
    script; a few aliases still read."""
    import time

    from evalkit.calls.serve import ScriptedServer
    from evalkit.foundations._io import BIG_YAML, load_yaml_bounded
    from evalkit.prompts.analyze import front_matter_block

    t0 = time.monotonic()
    got = _in_thread(lambda: front_matter_block("---\n" + _laughs(30) + "---\nbody\n"), limit_s=5.0)
    assert got == ({}, 32) and time.monotonic() - t0 < 5.0  # the block read, refused: no front matter
    with pytest.raises(InputError, match="billion laughs"):
        _raise(_in_thread(lambda: load_yaml_bounded(_laughs(30), "f.yaml"), limit_s=5.0))
    (tmp_path / "script.yaml").write_text(_laughs(30))
    with pytest.raises(InputError, match="billion laughs"):
        _raise(_in_thread(lambda: ScriptedServer(tmp_path / "script.yaml"), limit_s=5.0))
    assert load_yaml_bounded(_laughs(3), "f.yaml")["a2"][9][9] == ["x"] * 10 and "100,000" in BIG_YAML


@pytest.mark.parametrize("ref", ["http://127.0.0.1:{port}/schema.json", "file:///dev/zero"])
def test_a_json_schema_check_retrieves_no_ref(ref):
    """A `$ref` out of the schema (a host that never answers, `/dev/zero`) is refused at
    once, never fetched."""
    import socket

    from evalkit.checking.graders import json_schema

    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        schema = {"properties": {"a": {"$ref": ref.format(port=silent.getsockname()[1])}}}
        got = _in_thread(lambda: json_schema('{"a": 1}', schema=schema))
    assert isinstance(got, InputError) and "not retrieved" in str(got), got


def test_json_schema_refs_inside_the_schema_still_resolve():
    from evalkit.checking.graders import json_schema

    schema = {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}
    assert json_schema('{"a": 1}', schema=schema).passed
    assert not json_schema('{"a": "x"}', schema=schema).passed


def test_lint_refuses_a_remote_ref(tmp_path):
    from evalkit.suites.reader import load_suite

    suite = make_suite(tmp_path, {"c1": {}})
    case = {"id": "c1", "input": "x", "checks": [{"kind": "json_schema", "schema": {"$ref": "https://x.test/s.json"}}]}
    (suite / "cases.jsonl").write_text(json.dumps(case) + "\n")
    with pytest.raises(InputError, match="points outside the schema"):
        load_suite(suite)


WAZA_SPEC = """\
name: loop
tasks:
  - "{glob}"
"""
WAZA_TASK = "id: t1\ninputs:\n  prompt: hi\ngraders:\n  - name: g\n    type: text\n    config:\n      contains: [hi]\n"


def test_waza_task_glob_over_a_symlink_loop_is_bounded(tmp_path):
    """Two symlinks back to their own folder: `Path.glob` over twenty `*` levels walks
    2**20 paths before any cap; the walk here never enters a symlinked folder."""
    import os
    import time

    from evalkit.suites.formats.waza import read_waza

    (tmp_path / "x").mkdir()
    os.symlink("..", tmp_path / "x" / "a")
    os.symlink("..", tmp_path / "x" / "b")
    (tmp_path / "x" / "t1.yaml").write_text(WAZA_TASK)
    (tmp_path / "eval.yaml").write_text(WAZA_SPEC.format(glob="/".join(["*"] * 20) + "/*.yaml"))
    t0 = time.monotonic()
    got = _in_thread(lambda: read_waza(tmp_path / "eval.yaml"), limit_s=5.0)
    assert time.monotonic() - t0 < 5.0 and isinstance(got, InputError) and "no task file matches" in str(got)


def test_waza_task_glob_finds_what_path_glob_finds(tmp_path):
    from evalkit.suites.formats.waza import task_files

    (tmp_path / "tasks" / "sub").mkdir(parents=True)
    for name in ("tasks/a.yaml", "tasks/b.yaml", "tasks/c.txt", "tasks/sub/d.yaml"):
        (tmp_path / name).write_text("x")
    for pattern in ("tasks/*.yaml", "tasks/**/*.yaml", "**/*.yaml", "tasks/sub/d.yaml", "*/*.yaml", "tasks/?.*"):
        want = sorted(p for p in tmp_path.glob(pattern) if p.is_file())
        assert task_files(tmp_path, pattern) == want, pattern
    assert len(task_files(tmp_path, "**/*.yaml", cap=1)) == 2  # cap + 1: stopped there


def test_waza_task_glob_with_many_double_stars_is_matched_in_bounded_time(tmp_path):
    """Twelve `**` over a folder twenty deep: each file's match is parts x pattern steps,
    not a recursion over every `**`'s choices (about 10**9 on the old code); the answers
    stay those of the recursive reading."""
    import time

    from evalkit.suites.formats.waza import _glob_match, task_files

    deep = tmp_path.joinpath(*["a"] * 20)
    deep.mkdir(parents=True)
    (deep / "t.yaml").write_text("x: 1\n")
    t0 = time.monotonic()
    got = _in_thread(lambda: task_files(tmp_path, "/".join(["**"] * 12 + ["*.nomatch"])), limit_s=5.0)
    assert got == [] and time.monotonic() - t0 < 5.0
    assert task_files(tmp_path, "**/a/**/**/t.yaml") == [deep / "t.yaml"]
    for parts, pattern, want in ((("a", "b", "c.y"), ("**", "**", "*.y"), True), (("c.y",), ("**", "**", "*.y"), True),
                                 (("a", "c.y"), ("a", "**", "b", "*.y"), False), ((), ("**",), True),
                                 (("a",), (), False), (("a", "b"), ("**", "b", "**"), True)):
        assert _glob_match(parts, pattern) is want, (parts, pattern)


WAZA_RUN = {"run_number": 1, "status": "passed", "duration_ms": 10, "final_output": "ok",
            "session_digest": {"usage": {"input_tokens": 3, "output_tokens": 1}}}


@pytest.mark.parametrize("field, value", [
    ("duration_ms", "nan"), ("duration_ms", float("nan")), ("duration_ms", {"a": 1}), ("run_number", "2"),
    ("session_digest", {"usage": {"input_tokens": "many"}}), ("session_digest", {"usage": [1]}),
])
def test_waza_results_fields_are_type_checked_and_no_nan_is_written(tmp_path, field, value):
    from evalkit.conclusions.ingest import read_waza_results

    run = {**WAZA_RUN, field: value}
    p = tmp_path / "results.json"
    p.write_text(json.dumps({"eval_name": "e", "config": {"runs_per_test": 2},
                             "tasks": [{"test_id": "t", "runs": [run, {**WAZA_RUN, "run_number": 2}]}]}))
    with pytest.raises(InputError) as ei:
        read_waza_results(p)
    assert ei.value.json_path and ei.value.json_path.startswith("$.tasks[0].runs[0]"), ei.value


def test_dashboard_preview_refuses_a_page_over_its_limit(tmp_path, monkeypatch):
    """A report page linked from the dashboard is read under a size limit: over it, a
    413, not the file read whole."""
    import threading
    import urllib.error
    import urllib.request
    from http.server import ThreadingHTTPServer

    from evalkit.telling import dashboard as D

    (tmp_path / "page.html").write_bytes(b"x" * 4096)
    monkeypatch.setattr(D, "MAX_PAGE_BYTES", 1024)
    links = ("page.html",)
    monkeypatch.setattr(D, "build_dashboard", lambda root, options=None: type("Dash", (), {"links": links})())
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), D._handler(tmp_path, D.DashboardOptions()))
    port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/page.html", headers={"Host": f"127.0.0.1:{port}"})
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(req, timeout=10)
        assert ei.value.code == 413
    finally:
        httpd.shutdown()
        httpd.server_close()


# --- `ci comment` bounded (item 5) ---------------------------------------------------------
class _GitHub:
    """A loopback API answering `handle(method, path_and_query)` -> (status, headers, body bytes)."""

    def __init__(self, handle) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.calls: list[tuple[str, str]] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _any(self):
                n = int(self.headers.get("content-length") or 0)
                self.rfile.read(n)
                outer.calls.append((self.command, self.path))
                status, headers, body = handle(self.command, self.path)
                self.send_response(status)
                for k, v in {**headers, "content-length": str(len(body))}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = _any

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.api_url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _post(gh: _GitHub, comments: list | None = None):
    from evalkit.telling.prcomment import PullRequest, marker, post_comment

    pr = PullRequest(gh.api_url, "acme", "widgets", 7)
    return post_comment(pr, "t", "evals/a", f"{marker('evals/a')}\nbody\n")


def test_ci_comment_lists_a_bounded_number_of_pages():
    from evalkit.telling import prcomment

    def handle(method, path):
        page = int(path.rsplit("page=", 1)[1]) if "page=" in path else 1
        link = f'<{gh.api_url}/repos/acme/widgets/issues/7/comments?per_page=100&page={page + 1}>; rel="next"'
        return 200, {"Link": link, "content-type": "application/json"}, b"[]"

    gh = _GitHub(handle)
    try:
        with pytest.raises(prcomment.GitHubError, match="pages of comments"):
            _raise(_in_thread(lambda: _post(gh), limit_s=60))
    finally:
        gh.close()
    assert len(gh.calls) == prcomment.MAX_PAGES


def _raise(x):
    if isinstance(x, BaseException):
        raise x
    return x


def test_ci_comment_reads_an_answer_under_a_byte_limit(monkeypatch):
    from evalkit.telling import prcomment

    monkeypatch.setattr(prcomment, "MAX_ANSWER_BYTES", 10_000)
    gh = _GitHub(lambda m, p: (200, {"content-type": "application/json"}, b"[" + b'"x",' * 10_000 + b'"x"]'))
    try:
        with pytest.raises(prcomment.GitHubError, match="passed 10000 bytes"):
            _post(gh)
    finally:
        gh.close()


def test_ci_comment_a_non_numeric_id_is_no_match_and_the_url_stays_on_its_line():
    from evalkit.telling.prcomment import marker

    listed = [{"id": "abc", "body": f"{marker('evals/a')}\nold"}]
    created = {"id": 5, "html_url": "https://github.com/acme/widgets/pull/7\n::error::pwned"}

    def handle(method, path):
        body = listed if method == "GET" else created
        return (200 if method == "GET" else 201), {"content-type": "application/json"}, json.dumps(body).encode()

    gh = _GitHub(handle)
    try:
        got = _post(gh)
    finally:
        gh.close()
    assert got.action == "created" and [m for m, _ in gh.calls] == ["GET", "POST"]
    assert "\n" not in got.render() and "\\x0a::error::" in got.render()


def test_deep_tool_call_arguments_are_scanned_as_text_not_a_traceback():
    """A model's tool-call arguments nested 5,000 deep (the privacy gate parses them to
    scan each string): scanned as text, the address in them still found."""
    from evalkit.pii.privacy import scanner
    from evalkit.pii.privacy_gate import output_detections

    args = "[" * 5000 + '"jane.doe@acme-corp.com"' + "]" * 5000
    found = output_detections("", [{"function": {"name": "f", "arguments": args}}], scanner())
    assert [jp for jp, _ in found] == ["tool_calls[0].function.arguments"]


def test_a_deep_report_manifest_is_skipped_by_the_index(tmp_path):
    from evalkit.telling.report_index import load_manifests

    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "report.json").write_text('{"a": ' + DEEP + "}")
    assert load_manifests(tmp_path) == []


def test_deep_tool_call_arguments_from_a_model_are_kept_as_written(tmp_path, monkeypatch):
    """A model's tool-call arguments nested 2,000 deep: the call succeeds with the
    arguments kept as the string the model wrote (as for arguments that are not JSON),
    and a grader reads them as that string; no RecursionError, no paid retry."""
    from test_ledger_served import RawUpstream, _http, _one_call

    from evalkit.checking.graders import normalize_tool_call

    monkeypatch.setenv("EVALKIT_TEST_KEY", "k")
    args = "[" * 2000 + "]" * 2000  # past the JSON module's recursion, within what 8 tokens may carry
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}
    up = RawUpstream(lambda path, body: _http({
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 8}}))
    try:
        out, events, _ = _one_call(tmp_path, up.base_url, messages=[{"role": "user", "content": "hi"}])
    finally:
        up.close()
    assert not isinstance(out, Exception), out
    assert out.tool_calls[0]["arguments"] == args and up.requests == 1
    assert normalize_tool_call(call) == ("f", args)


def test_a_deep_trajectory_line_is_a_judge_error(tmp_path):
    from evalkit.checking.judge import trajectory_text
    from evalkit.foundations.errors import JudgeError

    p = tmp_path / "sample-0.jsonl"
    p.write_text('{"kind": "tool"}\n{"args": ' + DEEP + "}\n")
    with pytest.raises(JudgeError, match="line 2: nested deeper than"):
        trajectory_text(p)


# --- files read whole (review) -------------------------------------------------------------
def test_a_label_file_over_its_limit_or_a_fifo_is_refused_not_read_whole(tmp_path, monkeypatch):
    import os

    from evalkit.telling import labelling

    monkeypatch.setattr(labelling, "MAX_LABELS_BYTES", 1000)
    big = tmp_path / "labels.jsonl"
    big.write_text(json.dumps({"item": "x", "note": "n" * 2000}) + "\n")
    with pytest.raises(InputError, match="1000-byte limit"):
        labelling.LabelSession(big)
    os.mkfifo(tmp_path / "fifo.jsonl")  # a writer that never comes: the old read hung
    got = _in_thread(lambda: labelling.LabelSession(tmp_path / "fifo.jsonl"), limit_s=5.0)
    assert isinstance(got, InputError), got


def test_a_scripted_servers_script_over_its_limit_or_a_fifo_is_refused(tmp_path, monkeypatch):
    import os

    from evalkit.calls import serve

    monkeypatch.setattr(serve, "MAX_SCRIPT_BYTES", 1000)
    (tmp_path / "big.json").write_text(json.dumps({"rules": [{"text": "x" * 2000}]}))
    with pytest.raises(InputError, match="1000-byte limit"):
        serve.load_script(tmp_path / "big.json")
    os.mkfifo(tmp_path / "fifo.json")
    got = _in_thread(lambda: serve.load_script(tmp_path / "fifo.json"), limit_s=5.0)
    assert isinstance(got, InputError), got
    with pytest.raises(InputError, match="cannot read|no such|not found"):
        serve.load_script(tmp_path / "missing.json")


@pytest.mark.parametrize("levels", [300, 900])
def test_a_json_schema_check_on_a_deep_output_fails_with_a_reason_and_grading_goes_on(levels):
    """A model output nested 300 or 900 deep against a recursive schema: the check fails
    with its reason (a RecursionError on the old code aborted grading)."""
    from test_graders import make_case, make_sample

    from evalkit.checking.graders import grade_sample, json_schema
    from evalkit.foundations.records import Check

    schema = {"type": "array", "items": {"$ref": "#"}}
    deep = "[" * levels + "]" * levels
    got = json_schema(deep, schema=schema)
    assert not got.passed and "too deep" in got.reason
    case = make_case(expected="", checks=(Check("json_schema", {"schema": schema}), Check("contains", {"value": "["})))
    first, second = grade_sample(case, make_sample(deep), None)
    assert not first.passed and "too deep" in first.reason and second.passed
    assert json_schema("[" * 50 + "]" * 50, schema=schema).passed


def test_ci_comment_stops_at_its_total_time_against_a_server_that_drips(monkeypatch):
    """A server that sends the headers, then one byte every 0.2 s of a body it says is
    100,000 bytes: `ci comment` stops at TOTAL_S (each read waits only the time left),
    not after 100,000 reads that each arrive within the per-read timeout."""
    import socket
    import threading
    import time

    from evalkit.telling import prcomment

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def drip():
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n[")
        try:
            while True:
                conn.sendall(b" ")
                time.sleep(0.2)  # the drip under test: a slow server, each byte within the per-read timeout
        except OSError:
            pass

    threading.Thread(target=drip, daemon=True).start()
    monkeypatch.setattr(prcomment, "TOTAL_S", 1.5)
    monkeypatch.setattr(prcomment, "TIMEOUT_S", 1.0)
    api_url = f"http://127.0.0.1:{srv.getsockname()[1]}"
    api = prcomment._Api(prcomment.PullRequest(api_url, "o", "r", 1), "t")
    t0 = time.monotonic()
    got = _in_thread(lambda: api.call("GET", f"{api_url}/repos/o/r/issues/1/comments"), limit_s=10.0)
    srv.close()
    assert isinstance(got, prcomment.GitHubError) and "took over 1.5s" in str(got), got
    assert time.monotonic() - t0 < 3.0
