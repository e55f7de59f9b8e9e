"""The reports as a reader sees them: the index and every report page of a README-loop run
(tests/browser_run.py, against the scripted server), rendered in headless Chromium.

A page fails on an image the browser could not decode, or on text outside code and model
output (`pre`, `code`) that matches `nan%`, `None`, `True` or `False`: Python leaking onto
a page. Screenshots of every page are saved under the report folder (`screenshots/`) for
review. Chromium is Debian's `chromium` package (`make test` installs it where it can);
without it the test fails, saying how to install it.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import browser_run

LEAK = re.compile(r"nan%|\bNone\b|\bTrue\b|\bFalse\b")
CHECK_ID = "ek-browser-check"
# Run on load, in the page itself: which images did not decode, the text outside code and
# model output, and the page's height (for a full-page screenshot).
PROBE = f"""<script>
window.addEventListener('load', function () {{
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (i) {{ return !(i.complete && i.naturalWidth > 0); }})
                   .map(function (i) {{ return (i.getAttribute('src') || '').slice(0, 60); }});
  var body = document.body.cloneNode(true);
  body.querySelectorAll('pre, code, script, style, textarea').forEach(function (e) {{ e.remove(); }});
  var height = document.documentElement.scrollHeight;  // before the probe's own output is added
  var out = document.createElement('textarea');
  out.id = '{CHECK_ID}';
  out.style.display = 'none';
  out.textContent = JSON.stringify({{images: imgs.length, broken: broken, text: body.textContent,
                              height: height}});
  document.body.appendChild(out);
}});
</script>"""
HOW_TO_INSTALL = (
    "headless Chromium is needed for the browser test of the reports: install Debian's package "
    "(`sudo apt-get install chromium`; `make test` does it when run as root or with passwordless sudo)"
)


def chromium() -> str:
    """The Chromium binary, or a failure saying how to install it (never a skip)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(HOW_TO_INSTALL)


def _chrome(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-extensions", "--allow-file-access-from-files", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )


def render(binary: str, page: Path, screenshot: Path) -> dict[str, Any]:
    """What the browser made of `page` (images, broken ones, visible text, height), and a
    full-page screenshot of it at `screenshot`."""
    probe = page.with_name(f".probe-{page.name}")
    # the pages forbid scripts (Content-Security-Policy); the probe's copy allows its own
    # inline one and keeps every other rule (images only from data: URIs)
    text = page.read_text(encoding="utf-8").replace("script-src 'none'", "script-src 'unsafe-inline'")
    probe.write_text(text.replace("</body>", PROBE + "</body>", 1) if "</body>" in text else text + PROBE,
                     encoding="utf-8")
    try:
        dom = _chrome(binary, "--window-size=1200,800", "--virtual-time-budget=5000", "--dump-dom", probe.as_uri())
        m = re.search(rf'<textarea id="{CHECK_ID}"[^>]*>(.*?)</textarea>', dom.stdout, re.S)
        assert m, f"{page.name}: the browser did not finish the page (exit {dom.returncode}): {dom.stderr[-800:]}"
        seen = json.loads(html.unescape(m.group(1)))
        height = min(max(int(seen["height"]), 600), 16000)
        shot = _chrome(binary, f"--window-size=1200,{height}", f"--screenshot={screenshot}", page.as_uri())
        assert screenshot.exists(), f"{page.name}: no screenshot: {shot.stderr[-800:]}"
    finally:
        probe.unlink(missing_ok=True)
    return seen


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return browser_run.make(tmp_path_factory.mktemp("browser"))


def test_every_page_renders_without_broken_images_or_python_values(made: dict[str, Any]) -> None:
    binary = chromium()
    assert made["report"].exit_code == 0, made["report"].output
    index = made["out"] / "index.html"
    pages = [index] + sorted(made["pages"].glob("*.html"))
    names = {p.stem for p in pages}
    assert {"run_summary", "pass_at_k", "skill_comparison", "judge_calibration", "power_planning"} <= names
    # every report page the index links to is among those rendered
    linked = set(re.findall(r"href=['\"]([^'\"]+\.html)['\"]", index.read_text(encoding="utf-8")))
    assert linked and all((index.parent / h).resolve() in {p.resolve() for p in pages} for h in linked), linked
    shots = made["pages"] / "screenshots"
    shots.mkdir(exist_ok=True)
    problems = []
    for page in pages:
        seen = render(binary, page, shots / f"{page.stem}.png")
        if page != index:
            assert seen["images"] > 0, f"{page.name}: no figure"
        if seen["broken"]:
            problems.append(f"{page.name}: {len(seen['broken'])} broken image(s): {seen['broken']}")
        for m in LEAK.finditer(seen["text"]):
            around = seen["text"][max(m.start() - 60, 0) : m.end() + 60].replace("\n", " ")
            problems.append(f"{page.name}: {m.group(0)!r} in {around!r}")
    assert not problems, "\n".join(problems)
    assert sorted(p.name for p in shots.glob("*.png")) == sorted(f"{p.stem}.png" for p in pages)


def test_the_probe_catches_a_broken_image_and_a_leaked_value(tmp_path: Path) -> None:
    binary = chromium()
    page = tmp_path / "bad.html"
    page.write_text(
        "<html><body><p>rate nan% and None</p><pre>True in model output is fine</pre>"
        "<img src='data:image/png;base64,AAAA'></body></html>",
        encoding="utf-8",
    )
    seen = render(binary, page, tmp_path / "bad.png")
    assert seen["images"] == 1 and len(seen["broken"]) == 1
    assert LEAK.findall(seen["text"]) == ["nan%", "None"]


def test_without_chromium_the_test_fails_saying_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no browser on this PATH
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        chromium()
