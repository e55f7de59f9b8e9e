"""The explorer as a reader sees it: Playwright driving Debian's Chromium (never a browser
Playwright downloads) over the pages of runs made against the scripted server
(tests/browser_run.py's suite, run twice; its agent run, whose outputs and tool results
carry hostile text), written by `evalkit report --against` and `evalkit explore`.

Checked: the fragment filters (a link with #case=...&arm=... shows that case's samples
only), the case view with each arm's samples side by side and the case's vote, the
virtualised list (only the rows in view are in the DOM), the diff's regressions first,
a hostile output's `<script>` staying text, and that no request leaves the page.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import browser_run

HOW_TO_INSTALL = (
    "Debian's Chromium is needed for the explorer's browser test (`sudo apt-get install chromium`, "
    "or tools/install-chromium.sh); Playwright drives it, it never downloads a browser"
)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(HOW_TO_INSTALL)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two graded runs of the factual suite (different seeds), the second reported with
    --against the first (explorer.html, diff.html, the index), and the agent run's explorer."""
    from evalkit._cli.main import main
    from evalkit.calls.serve import ScriptedServer
    from evalkit.conclusions.grading import grade_run
    from evalkit.running.runner import run_suite

    root = tmp_path_factory.mktemp("explorer")
    os.environ.setdefault("EVALKIT_TEST_KEY", "test-key")
    runs = []
    with ScriptedServer(browser_run.script()) as srv:
        suite = browser_run.make_suite(root, srv.base_url)
        for seed in (7, 8):
            cfg = json.loads((suite / "config.json").read_text())
            (suite / "config.json").write_text(json.dumps({**cfg, "seed": seed}))
            res = run_suite(suite, progress=False, cache=False)
            grade_run(res.path)
            runs.append(Path(res.path))
    out = root / "reports"
    cli = CliRunner()
    rep = cli.invoke(main, ["report", str(runs[1]), "--reports-dir", str(out), "--only", "run_summary",
                            "--against", str(runs[0])])
    assert rep.exit_code == 0, rep.output
    agent = browser_run.make_agent_run(root / "agent")
    exp = cli.invoke(main, ["explore", str(agent), "--out", str(root / "agent-pages")])
    assert exp.exit_code == 0, exp.output
    return {"run": out / runs[1].name, "new": runs[1], "old": runs[0], "index": out / "index.html",
            "agent": root / "agent-pages"}


class Reader:
    """One Chromium page: every request it makes is recorded, any that is not a file of
    the page's own is refused, and a dialog (a script the page should never run) fails."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())

    def open(self, path: Path, fragment: str = "") -> Any:
        self.page.goto(path.resolve().as_uri() + fragment)
        self.page.wait_for_selector("body[data-ready='1']", timeout=15000)
        return self.page

    def rows(self) -> list[dict[str, str | None]]:
        return self.page.eval_on_selector_all(
            "#rows .row", "rs => rs.map(r => ({case: r.dataset.case, arm: r.dataset.arm, "
            "outcome: r.dataset.outcome || null, change: r.dataset.change || null}))")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    binary = _chromium()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=binary, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def reader(browser: Any) -> Iterator[Reader]:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    r = Reader(page)
    try:
        yield r
    finally:
        page.close()
        assert not r.dialogs, f"the page ran a script from the data: {r.dialogs}"
        own = [u for u in r.requests if not u.startswith("file:")]
        assert not own, f"requests left the page: {own}"
        assert all(u.split("#")[0].endswith((".html",)) for u in r.requests), r.requests


def test_a_link_with_case_and_arm_shows_that_cases_samples_only(pages, reader):
    page = reader.open(pages["run"] / "explorer.html", "#case=capital-peru&arm=skilled")
    rows = reader.rows()
    assert len(rows) == 5 and {(r["case"], r["arm"]) for r in rows} == {("capital-peru", "skilled")}
    assert page.text_content("#count") == "5 of 150 samples"
    assert page.locator(".runrow.head span").nth(1).text_content() == "tags"
    # the case view: the arm's k samples side by side, and the case's vote in the verdict
    assert page.locator("#caseview .col").count() == 1
    assert page.locator("#caseview .col[data-arm='skilled'] .card").count() == 5
    assert "Vote in the verdict skilled vs baseline" in page.text_content("#caseview")
    assert [u.split("#")[0] for u in reader.requests] == [(pages["run"] / "explorer.html").resolve().as_uri()]


def test_filters_write_the_fragment_and_the_case_view_shows_every_arm(pages, reader):
    page = reader.open(pages["run"] / "explorer.html")
    assert page.text_content("#count") == "150 of 150 samples"
    page.select_option("select[name=outcome]", "failed")
    assert "outcome=failed" in page.evaluate("location.hash")
    rows = reader.rows()
    assert rows and {r["outcome"] for r in rows} == {"failed"}
    page.fill("input[name=q]", "springfield")
    page.press("input[name=q]", "Enter")
    assert "q=springfield" in page.evaluate("location.hash")
    texts = page.eval_on_selector_all("#rows .row", "rs => rs.map(r => r.textContent)")
    assert texts and all("Springfield" in t for t in texts)
    # a discordant case of the verdict, linked from the top: both arms side by side
    page.locator("button", has_text="clear").click()
    assert page.text_content("#count") == "150 of 150 samples"
    page.locator("#findings a[href^='#case=']").first.click()
    page.wait_for_selector("#caseview:not([hidden])")
    assert page.locator("#caseview .col").count() == 2
    case = page.evaluate("new URLSearchParams(location.hash.slice(1)).get('case')")
    assert {r["case"] for r in reader.rows()} == {case}


def until(page, expression: str, timeout_ms: int = 15000) -> None:
    """Wait until `expression` holds in the page. Not `page.wait_for_function`: when its first
    look fails it polls through a `new Function`, which the page's content security policy
    (no 'unsafe-eval') refuses; `page.evaluate` is the browser's own evaluation, allowed."""
    waited = 0
    while not page.evaluate(expression):
        assert waited < timeout_ms, f"not true after {timeout_ms} ms: {expression}"
        page.wait_for_timeout(50)
        waited += 50


def test_the_list_renders_only_the_rows_in_view(pages, reader):
    page = reader.open(pages["run"] / "explorer.html")
    shown = page.locator("#rows .row").count()
    assert 0 < shown < 60
    page.evaluate("document.getElementById('list').scrollTop = 1e9")
    until(page, "document.querySelector('#rows .row:last-child') && "
                "document.querySelector('#rows').style.transform !== 'translateY(0px)'")
    assert page.locator("#rows .row").count() < 60
    last = reader.rows()[-1]
    assert last["case"] == "judged-canberra"


def test_the_diff_lists_regressions_first_and_filters_by_change(pages, reader):
    page = reader.open(pages["run"] / "diff.html")
    changes = [r["change"] for r in reader.rows()]
    assert "regressed" in changes or "improved" in changes
    firsts = changes[: changes.count("regressed")]
    assert set(firsts) <= {"regressed"} and "regressed" not in changes[len(firsts):]
    assert "exact sign test" in page.text_content("#findings")
    assert "Gate of this run against " + pages["old"].name in page.text_content("#findings")
    assert page.locator(".diffrow.head span[title]").all_text_contents() == ["other run", "this run"]
    assert page.locator(".diffrow.head span[title]").first.get_attribute("title") == pages["old"].name
    page.goto((pages["run"] / "diff.html").resolve().as_uri() + "#outcome=improved&arm=skilled")
    until(page, "document.getElementById('count').textContent.includes('of 30')")
    rows = reader.rows()
    assert all(r["change"] == "improved" and r["arm"] == "skilled" for r in rows)
    if rows:  # a row opens both runs' samples side by side
        page.locator("#rows .row").first.click()
        assert page.locator("#detail .col").count() == 2


def test_the_index_links_the_explorer_and_the_diff(pages, reader):
    page = reader.page
    page.goto(pages["index"].resolve().as_uri())
    name = pages["run"].name
    assert page.locator(f"a[href='{name}/explorer.html']").count() == 1
    assert page.locator(f"a[href='{name}/diff.html']").text_content() == "Diff against " + pages["old"].name


def test_a_hostile_output_stays_text(pages, reader):
    """The agent run's answer and tool result carry `<script>alert(1)</script>`, a terminal
    escape and a bidi override: shown as text in the case view, the detail and the
    trajectory, no element made of them, no dialog."""
    page = reader.open(pages["agent"] / "explorer.html", "#case=q0&arm=skilled")
    page.locator("#caseview .card").first.click()
    detail = page.locator("#detail")
    output = detail.locator("pre.output").text_content()
    assert "<script>alert(1)</script>" in output and output.endswith("\\x1b[31mRED\\u202e")
    assert "turn 1" in detail.text_content() and "lookup" in detail.text_content()
    assert page.evaluate("document.scripts.length") == 3  # the page's own, its head and its data
    assert page.locator("#detail script, #caseview script, #rows script").count() == 0


def test_evalkit_explore_shows_the_explorer_inside_a_notebook_cell(pages, reader):
    """What a JupyterLab cell shows of `evalkit.explore(run)` (its `_repr_html_`, set as
    the output's HTML): the sandboxed frame runs the page, whose links still filter."""
    import evalkit

    cell = evalkit.explore(pages["new"])._repr_html_()
    reader.page.set_content(f"<!DOCTYPE html><html><body><div class='output'>{cell}</div></body></html>")
    frame = reader.page.frame_locator("iframe")
    frame.locator("body[data-ready='1']").wait_for(timeout=15000)
    assert frame.locator("#count").text_content() == "150 of 150 samples"
    frame.locator("#findings a[href^='#case=']").first.click()
    frame.locator("#caseview:not([hidden])").wait_for(timeout=5000)
    assert frame.locator("#caseview .col").count() == 2


def test_a_large_run_shows_its_first_rows_before_reading_the_rest(tmp_path, reader):
    """Past HEAD_ROWS samples the page carries a head (its first rows): drawn first, the
    filters off until the whole data are read, then every row, the filters on."""
    from conftest import make_run

    from evalkit.telling import explorer

    outs = {(f"c{i:02d}", "a"): [True, False] * 5 for i in range(30)}
    run = make_run(tmp_path, "big", outs, k=10)
    page_path = explorer.write_explorer(run, tmp_path / "pages").path
    assert explorer.head_of(explorer.run_data(run))["total"] == 300
    page = reader.open(page_path)
    assert page.get_attribute("body", "data-first-rows-ms") is not None
    assert page.text_content("#count") == "300 of 300 samples"
    assert not page.locator("select[name=arm]").is_disabled()
    assert reader.rows()[0]["case"] == "c00"
