"""The skills dashboard (evalkit.telling.dashboard, `evalkit dashboard`, issue 32): a real
catalogue made in tmp: an agent suite whose arm loads a skill (hostile name and
description), run twice against the scripted server and graded, one run reported; an
uncovered skill with an on-demand file; a prompt suite with no skill; a suite that does
not load. Its page is read as text, rendered in headless Chromium (the reports' browser
helpers), and previewed by `--serve` over HTTP, stopped by SIGTERM and by Ctrl-C."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import browser_run
from test_reports_browser import LEAK, Browser, chromium
from test_waza import spec as waza_spec

from evalkit._cli.main import main
from evalkit.telling import dashboard

HOSTILE_NAME = "<img src=x onerror=alert(1)>weather"
HOSTILE_DESC = "Looks it up </td><script>alert(2)</script> & never guesses"
ORPHAN_NAME = "orphan<b>bold</b>"
ORPHAN_DESC = "\"quoted' <svg onload=alert(3)> no suite covers me"
# the first run: no rule sends the skilled arm to the tool, so both arms guess (and fail)
GUESS_SCRIPT = {"rules": [{"match": "question", "text": "I guess 7."}]}


def _skill_md(name: str, desc: str, body: str) -> str:
    return f"---\nname: {json.dumps(name)}\ndescription: {json.dumps(desc)}\n---\n{body}"


def _make_tree(root: Path) -> dict[str, Any]:
    """The catalogue (see the module docstring); returns its paths."""
    from evalkit.calls.serve import ScriptedServer
    from evalkit.conclusions.grading import grade_run
    from evalkit.running.runner import run_suite

    suite = root / "agent"
    (suite / "skill").mkdir(parents=True)
    (suite / "skill" / "SKILL.md").write_text(_skill_md(HOSTILE_NAME, HOSTILE_DESC, "LOOK IT UP before you answer.\n"))
    (suite / "prompt.txt").write_text("${skill}The question: ${question}")
    (suite / "config.json").write_text(json.dumps(browser_run.AGENT_CONFIG))
    fixtures = {"lookup": {"result": "FOUND: 42"}}
    cases = [{"id": f"q{i}", "input": {"question": f"question {i}", "tool_results": fixtures}, "tags": ["golden"],
              "set": "regression" if i == 2 else "capability", "checks": [{"kind": "contains", "value": "42"}]}
             for i in range(3)]
    cases.append({"id": "n0", "input": {"question": "question 9, no lookup", "tool_results": fixtures},
                  "tags": ["silent"], "intent": "non-activation", "checks": [{"kind": "skill_activation"}]})
    (suite / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    runs = []
    for script in (GUESS_SCRIPT, browser_run.AGENT_SCRIPT):
        with ScriptedServer(script) as srv:
            res = run_suite(suite, runs_dir=suite / "runs", base_url=srv.base_url, progress=False)
        assert res.complete, res
        grade_run(res.path)
        runs.append(Path(res.path))
    orphan = root / "skills" / "orphan"
    (orphan / "references").mkdir(parents=True)
    (orphan / "SKILL.md").write_text(_skill_md(ORPHAN_NAME, ORPHAN_DESC, "Read references/guide.md first.\n"))
    (orphan / "references" / "guide.md").write_text("A guide the agent reads on demand.\n" * 20)
    pdf = root / "skills" / "pdf"
    pdf.mkdir(parents=True)
    (pdf / "SKILL.md").write_text(_skill_md("pdf", "Converts PDFs.", "Convert the PDF to Markdown.\n"))
    waza_spec(root / "waza")  # a Waza eval.yaml with `skill: pdf` and two task files
    browser_run.make_suite(root, "http://127.0.0.1:9/v1")  # root/evals/factual: a prompt suite, no skill
    broken = root / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    (broken / "cases.jsonl").write_text("not json\n")
    return {"root": root, "suite": suite, "runs": runs, "orphan": orphan, "skill": suite / "skill"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The catalogue, its dashboard before `compare` ran (the verdict computed), what
    `compare` printed, then the latest run reported and the dashboard again."""
    os.environ.setdefault("EVALKIT_TEST_KEY", "test-key")
    made = _make_tree(tmp_path_factory.mktemp("catalogue"))
    cli = CliRunner()
    before = cli.invoke(main, ["dashboard", str(made["root"]), "--json"])
    assert before.exit_code == 0, before.output
    latest = made["runs"][-1]
    compared = cli.invoke(main, ["compare", str(latest), "--baseline", "baseline", "--treatment", "skilled", "--json"])
    assert compared.exit_code == 0, compared.output
    reported = cli.invoke(main, ["report", str(latest), "--reports-dir", str(made["root"] / "reports"),
                                 "--only", "run_summary"])
    assert reported.exit_code == 0, reported.output
    after = cli.invoke(main, ["dashboard", str(made["root"]), "--json"])
    assert after.exit_code == 0, after.output
    return {**made, "before": _json_of(before.stdout), "compare": json.loads(compared.stdout),
            "after": _json_of(after.stdout), "page": (made["root"] / dashboard.DASHBOARD_HTML).read_text("utf-8")}


def _json_of(out: str) -> dict[str, Any]:
    return json.loads(out)


def _skill(d: dict[str, Any], path: str) -> dict[str, Any]:
    return next(s for s in d["skills"] if s["path"] == path)


VERDICT_KEYS = ("kind", "wins", "ties", "losses", "errored", "n_trials", "p_value", "p_one_sided", "reason",
                "baseline_arm", "treatment_arm", "judge", "unit", "alpha")


def test_each_skill_is_listed_with_its_coverage_and_an_uncovered_one_says_so(tree: dict[str, Any]) -> None:
    d = tree["after"]
    assert sorted(s["path"] for s in d["skills"]) == ["agent/skill", "skills/orphan", "skills/pdf"]
    orphan = _skill(d, "skills/orphan")
    assert orphan["name"] == ORPHAN_NAME and orphan["description"] == ORPHAN_DESC
    assert orphan["covered"] is False and orphan["coverage"] == []
    skill = _skill(d, "agent/skill")
    assert skill["name"] == HOSTILE_NAME and skill["covered"] is True
    (c,) = skill["coverage"]
    assert (c["suite"], c["suite_path"], c["arm"], c["baseline"]) == ("agent", "agent", "skilled", "baseline")
    assert c["cases"] == 4 and c["sets"] == {"capability": 3, "regression": 1} and c["non_activation_cases"] == 1
    suites = {s["path"]: s for s in d["suites"]}
    assert set(suites) == {"agent", "evals/factual", "broken", "waza"}
    assert suites["agent"]["skills"] == ["agent/skill"] and suites["agent"]["runs"] == 2
    assert suites["evals/factual"]["skills"] == [] and suites["evals/factual"]["error"] is None
    assert "cases.jsonl" in suites["broken"]["error"]
    # a Waza spec names the skill it evaluates (`skill: pdf`); no arm loads it, so no verdict
    (w,) = _skill(d, "skills/pdf")["coverage"]
    assert (w["suite_path"], w["arm"], w["how"], w["cases"]) == ("waza", None, "named by eval.yaml's skill field", 2)
    assert w["verdict"] is None and "no arm of the suite loads the skill's folder" in w["no_verdict"]
    assert suites["waza"]["skills"] == ["skills/pdf"]
    row = next(r for r in tree["page"].split("<tr class='skill'>") if "skills/orphan" in r)
    assert "<span class='uncovered'>uncovered</span>" in row


def test_the_context_cost_is_what_evalkit_tokens_counts(tree: dict[str, Any]) -> None:
    for path in ("agent/skill", "skills/orphan", "skills/pdf"):
        out = CliRunner().invoke(main, ["tokens", str(tree["root"] / path), "--json"])
        assert out.exit_code == 0, out.output
        (counted,) = json.loads(out.stdout)
        shown = _skill(tree["after"], path)["tokens"]
        assert {k: v for k, v in shown.items() if k != "path"} == {k: v for k, v in counted.items() if k != "path"}
        assert f"<b>total {counted['total']:,}</b>" in tree["page"]
    orphan = _skill(tree["after"], "skills/orphan")["tokens"]
    assert list(orphan["on_demand"]) == ["references/guide.md"] and orphan["on_demand"]["references/guide.md"] > 0


def test_the_latest_verdict_is_what_compare_prints(tree: dict[str, Any]) -> None:
    """Before `compare` ran, the dashboard computes the verdict as compare does (and
    writes nothing); after, it shows the one compare recorded: both equal compare's."""
    printed = tree["compare"]
    latest = tree["runs"][-1].name
    for which, recorded in (("before", False), ("after", True)):
        (c,) = _skill(tree[which], "agent/skill")["coverage"]
        v = c["verdict"]
        assert v["run"] == latest and v["recorded"] is recorded
        assert {k: v[k] for k in VERDICT_KEYS} == {k: printed[k] for k in VERDICT_KEYS}, which
    assert printed["wins"] == 3 and printed["treatment_arm"] == "skilled"  # the skill looks it up, the baseline guesses
    # the page labels it as reports/index.html labels it on the run's row
    index = (tree["root"] / "reports" / "index.html").read_text("utf-8")
    label = re.search(r"<span class='[a-z-]+'>[^<]*</span> skilled vs baseline", index)
    assert label is not None and label.group(0) in tree["page"]


def test_the_trend_is_the_sample_pass_rate_per_run_and_links_each_report(tree: dict[str, Any]) -> None:
    (c,) = _skill(tree["after"], "agent/skill")["coverage"]
    first, second = tree["runs"]
    assert [r["run"] for r in c["runs"]] == [first.name, second.name]  # oldest first
    # the first run: both arms guess; only the baseline stays silent on the non-activation case
    # (the skilled arm's prompt carries SKILL.md, so its skill counts as activated there)
    assert c["runs"][0]["sample_pass_rate"] == {"baseline": 0.25, "skilled": 0.0}
    # the rate the reports index shows for the reported run (its report.json headline)
    manifest = json.loads((tree["root"] / "reports" / second.name / "report.json").read_text())
    assert c["runs"][1]["sample_pass_rate"] == {a: manifest["headline"][a] for a in ("baseline", "skilled")}
    assert c["runs"][1]["sample_pass_rate"]["skilled"] > 0
    assert c["runs"][0]["report"] is None
    assert c["runs"][1]["report"] == f"reports/{second.name}/run_summary.html"
    page = tree["page"]
    assert page.count("<polyline") == 2  # one line per arm, two runs
    assert f"<a href='reports/{second.name}/run_summary.html'>{second.name}</a>" in page
    assert f"<td>{first.name}</td>" in page  # no report: no link


def test_every_text_from_a_file_is_escaped(tree: dict[str, Any]) -> None:
    body = tree["page"].split("<body>", 1)[1]
    for raw in ("<img", "<script", "<svg onload", "<b>bold", "</td><script>"):
        assert raw not in body, raw
    assert "&lt;img src=x onerror=alert(1)&gt;weather" in body
    assert "&lt;/td&gt;&lt;script&gt;alert(2)&lt;/script&gt; &amp; never guesses" in body
    assert "orphan&lt;b&gt;bold&lt;/b&gt;" in body and "&quot;quoted&#x27; &lt;svg onload=alert(3)&gt;" in body


def test_the_dashboard_writes_nothing_into_run_folders(tree: dict[str, Any]) -> None:
    """Building it before compare ran left the runs as they were: the first run (never
    compared or reported) has no verdicts.json."""
    assert not (tree["runs"][0] / "verdicts.json").exists()


def test_the_shipped_data_folder(tmp_path: Path) -> None:
    """The repository's own suites: data/agent's arm `skilled` loads skills/weather-lookup;
    data/factual covers no skill."""
    data = Path(__file__).resolve().parents[1] / "data"
    path, d = dashboard.write_dashboard(data, tmp_path / "d.html")
    (s,) = [s for s in d.skills if s.path == "agent/skills/weather-lookup"]
    assert [(c.suite, c.arm, c.baseline) for c in s.coverage] == [("agent", "skilled", "baseline")]
    assert {su.path: su.skills for su in d.suites} == {"agent": ("agent/skills/weather-lookup",), "factual": ()}
    assert "weather-lookup" in path.read_text(encoding="utf-8")


def test_a_root_that_is_not_a_folder_is_refused(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["dashboard", str(tmp_path / "nowhere")])
    assert out.exit_code == 2 and "not a folder" in out.output
    assert not (tmp_path / "nowhere").exists()


def test_the_page_in_headless_chromium(tree: dict[str, Any], tmp_path: Path) -> None:
    page = tree["root"] / dashboard.DASHBOARD_HTML
    b = Browser(chromium(), tmp_path / "profile")
    try:
        seen = b.render(page, tmp_path / "dashboard.png")
        dom = b.call("Runtime.evaluate", returnByValue=True, expression="""(() => ({
            scripts: document.scripts.length, imgs: document.images.length,
            svgs: document.querySelectorAll('svg polyline').length,
            links: Array.from(document.links).map(a => a.href),
            uncovered: Array.from(document.querySelectorAll('.uncovered')).length,
            names: Array.from(document.querySelectorAll('tr.skill td b')).map(e => e.textContent)}))()""")
        # the same page served by --serve, and the report link followed there
        with _serving(tree["root"], tmp_path / "served.html") as (_, url):
            b.events.clear()
            b.call("Page.navigate", url=url)
            b.loop.run_until_complete(b._event("Page.loadEventFired"))
            served = b.call("Runtime.evaluate", returnByValue=True, expression="""(() => ({
                title: document.title, links: Array.from(document.links).map(a => a.href),
                scripts: document.scripts.length}))()""")["result"]["value"]
            report_link = served["links"][0]
            b.events.clear()
            b.call("Page.navigate", url=report_link)
            b.loop.run_until_complete(b._event("Page.loadEventFired"))
            followed = b.call("Runtime.evaluate", returnByValue=True, expression="""(() => ({
                href: location.href, title: document.title, text: document.body.innerText}))()""")["result"]["value"]
    finally:
        b.close()
    assert served["title"] == "evalkit skills dashboard" and served["scripts"] == 0
    assert report_link.startswith(url) and followed["href"] == report_link
    report = tree["root"] / "reports" / tree["runs"][-1].name / "run_summary.html"
    title = re.search(r"<title>(.*?)</title>", report.read_text("utf-8"), re.S)
    assert title is not None and followed["title"] == html.unescape(title.group(1)).strip()  # the report itself
    d = dom["result"]["value"]
    assert seen["broken"] == [] and not LEAK.findall(seen["text"]), LEAK.findall(seen["text"])
    assert d["scripts"] == 0 and d["imgs"] == 0 and d["svgs"] == 2  # the hostile markup stayed text
    assert d["uncovered"] == 1 and HOSTILE_NAME in d["names"] and ORPHAN_NAME in d["names"]
    text = " ".join(seen["text"].split())
    assert "uncovered: no suite that loads has an arm with this folder as skill_dir, or names it" in text
    targets = [Path(urllib.parse.unquote(urllib.parse.urlparse(h).path)) for h in d["links"]]
    assert targets and all(t.is_file() for t in targets), d["links"]  # each report link resolves
    assert (tmp_path / "dashboard.png").stat().st_size > 0


# `python -m evalkit._cli.main` with Ctrl-C as a terminal delivers it: a test session started
# in the background (`make test &`, a CI runner's shell) hands its children SIGINT ignored,
# and Python then leaves it ignored, so the Ctrl-C case would test the shell, not evalkit
_AS_IN_A_TERMINAL = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('evalkit._cli.main', run_name='__main__', alter_sys=True)"
)


@contextlib.contextmanager
def _serving(root: Path, out: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`evalkit dashboard ROOT --serve` as a real process, and the URL it printed (read
    from its first line: no waiting on the clock); killed if a test leaves it running."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _AS_IN_A_TERMINAL, "dashboard", str(root), "--serve", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.match(r"serving the dashboard at (http://127\.0\.0\.1:\d+/) ", line)
        assert m, (line, proc.poll(), proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        yield proc, m.group(1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_serve_previews_the_page_over_http_and_stops_cleanly(tree: dict[str, Any], tmp_path: Path,
                                                             stop: signal.Signals) -> None:
    with _serving(tree["root"], tmp_path / "d.html") as (proc, url):
        with urllib.request.urlopen(url, timeout=30) as r:
            body = r.read().decode("utf-8")
            assert r.status == 200 and "default-src 'none'" in r.headers["Content-Security-Policy"]
        assert "evalkit skills dashboard" in body and "&lt;img src=x onerror=alert(1)&gt;weather" in body
        report = f"reports/{tree['runs'][-1].name}/run_summary.html"
        assert f"<a href='{report}'>" in body  # served at /, links relative to ROOT
        with urllib.request.urlopen(url + report, timeout=30) as r:
            assert r.status == 200 and r.read() == (tree["root"] / report).read_bytes()
        for other in ("agent/config.json", "agent/skill/SKILL.md", "../etc/passwd", "reports/index.html"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(url + other, timeout=30)
            assert err.value.code == 404, other  # only the page and the reports it links to
        forged = urllib.request.Request(url, headers={"Host": "attacker.example"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(forged, timeout=30)
        assert err.value.code == 403  # another host name for the loopback (DNS rebinding) is refused
        proc.send_signal(stop)
        rc = proc.wait(timeout=30)
        assert rc == 0, proc.stderr.read() if proc.stderr else rc
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(url, timeout=5)  # the socket is closed


def test_serve_on_a_port_in_use_is_refused(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = CliRunner().invoke(main, ["dashboard", str(tmp_path), "--serve", "--port", str(port)])
    assert out.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in out.output


def test_an_unreadable_grading_is_said_and_the_verdict_comes_from_the_last_readable_one(tmp_path: Path) -> None:
    """Three hand-made runs of a skill suite (no server): the newest one's
    grades-summary.json is corrupt; its row says so, the verdict is the previous run's
    (what compare prints for it), and `--last 2` keeps the two newest runs."""
    from conftest import make_run, two_arm

    from evalkit.conclusions.grading import summarize_run, write_summary

    suite = tmp_path / "s"
    (suite / "skill").mkdir(parents=True)
    (suite / "skill" / "SKILL.md").write_text("Look it up.\n")
    (suite / "prompt.txt").write_text("${skill}${question}")
    (suite / "config.json").write_text(json.dumps(browser_run.AGENT_CONFIG))
    cases = {f"c{i}": {} for i in range(6)}
    (suite / "cases.jsonl").write_text("".join(
        json.dumps({"id": c, "input": {"question": c}, "tags": ["t"], "checks": [{"kind": "contains", "value": "x"}]})
        + "\n"
        for c in cases))
    outcomes = [two_arm({c: ([False], [True]) for c in cases}),
                two_arm({c: ([i % 2 == 0], [i < 5]) for i, c in enumerate(cases)}),
                two_arm({c: ([True], [False]) for c in cases})]
    runs = [make_run(suite, f"r{i + 1}", o, k=1, suite=suite) for i, o in enumerate(outcomes)]
    for run in runs:
        write_summary(run, summarize_run(run))
    (runs[2] / "grades-summary.json").write_text("{not json")
    d = dashboard.build_dashboard(tmp_path)
    ((c,),) = [s.coverage for s in d.skills]
    assert [r.run for r in c.runs] == ["r1", "r2", "r3"]
    assert c.runs[2].graded is False and "grades-summary.json" in (c.runs[2].problem or "")
    assert c.runs[1].rates == {"baseline": 0.5, "skilled": 5 / 6}
    assert c.verdict is not None and c.verdict.run == "r2" and c.verdict.recorded is False
    printed = CliRunner().invoke(main, ["compare", str(runs[1]), "--baseline", "baseline", "--treatment", "skilled",
                                        "--json"])
    assert printed.exit_code == 0, printed.output
    out = json.loads(printed.stdout)
    assert {k: getattr(c.verdict.verdict, k) for k in VERDICT_KEYS} == {k: out[k] for k in VERDICT_KEYS}
    assert (out["wins"], out["ties"], out["losses"]) == (2, 4, 0)  # c1, c3 won; c5 failed in both arms
    page = dashboard.render_html(d)
    assert "grades not read:" in page and "r3" in page
    last2 = dashboard.build_dashboard(tmp_path, dashboard.DashboardOptions(last=2))
    assert [r.run for r in last2.skills[0].coverage[0].runs] == ["r2", "r3"]
    assert "the last 2 runs at most" in dashboard.render_html(last2)


def test_serve_never_answers_with_a_file_outside_root(tmp_path: Path) -> None:
    """A report.json whose page is `../../../secret.txt`, a report page that is a symlink
    out of ROOT and one that is a symlink out of its report folder are not linked; raw
    request paths with `..` (plain or %2e%2e) answer 404; a legitimate report page is
    linked and served byte for byte."""
    import http.client

    from conftest import make_run, two_arm

    from evalkit.conclusions.grading import summarize_run, write_summary

    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    root = tmp_path / "cat"
    suite = root / "s"
    (suite / "skill").mkdir(parents=True)
    (suite / "skill" / "SKILL.md").write_text("Look it up.\n")
    (suite / "prompt.txt").write_text("${skill}${question}")
    (suite / "config.json").write_text(json.dumps(browser_run.AGENT_CONFIG))
    cases = {f"c{i}": {} for i in range(3)}
    (suite / "cases.jsonl").write_text("".join(
        json.dumps({"id": c, "input": {"question": c}, "tags": ["t"], "checks": [{"kind": "contains", "value": "x"}]})
        + "\n"
        for c in cases))
    pages = {"r1": "../../../secret.txt", "r2": "skill_comparison.html", "r3": "skill_comparison.html",
             "r4": "run_summary.html"}
    for name, html_name in pages.items():
        run = make_run(suite, name, two_arm({c: ([False], [True]) for c in cases}), k=1, suite=suite)
        write_summary(run, summarize_run(run))
        rep = root / "reports" / name
        rep.mkdir(parents=True)
        (rep / "report.json").write_text(json.dumps({"run_dir": str(run), "notebooks": [
            {"name": "skill_comparison" if "skill" in html_name else "run_summary", "html": html_name}]}))
    (root / "reports" / "r2" / "skill_comparison.html").symlink_to(secret)  # out of ROOT
    (root / "reports" / "r3" / "skill_comparison.html").symlink_to(suite / "config.json")  # out of its folder
    legit = root / "reports" / "r4" / "run_summary.html"
    legit.write_text("<html>the run summary</html>")

    d = dashboard.build_dashboard(root)
    assert d.links == frozenset({"reports/r4/run_summary.html"}), d.links
    ((c,),) = [s.coverage for s in d.skills]
    assert {r.run: r.report for r in c.runs} == {"r1": None, "r2": None, "r3": None,
                                                 "r4": "reports/r4/run_summary.html"}
    assert "secret" not in dashboard.render_html(d, root)

    def get(url: str, path: str) -> tuple[int, bytes]:
        """GET `path` sent as is (http.client normalises nothing, as a hostile client would)."""
        host, port = urllib.parse.urlsplit(url).netloc.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    with _serving(root, tmp_path / "d.html") as (proc, url):
        assert get(url, "/reports/r4/run_summary.html") == (200, legit.read_bytes())
        for path in ("/reports/r1/../../../secret.txt", "/reports/r1/%2e%2e/%2e%2e/%2e%2e/secret.txt",
                     "/reports/r1/%2E%2E%2F%2E%2E%2F%2E%2E%2Fsecret.txt", "/../secret.txt", "/%2e%2e/secret.txt",
                     "/reports/r4/../../../secret.txt", "/reports/r4/run_summary.html/../../../../secret.txt",
                     "/reports/r2/skill_comparison.html", "/reports/r3/skill_comparison.html", "/s/config.json",
                     "/reports/r4/%00run_summary.html"):
            status, body = get(url, path)
            assert (status, body) == (404, b"not found\n"), (path, status, body)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
