"""The reports as a reader sees them: the index, every report page of a README-loop run,
the micro-test page and the replay page of an agent run (tests/browser_run.py, against
the scripted server), rendered in headless Chromium.

A page fails on an image the browser could not decode, or on text outside code and model
output (`pre`, `code`) that matches `nan%`, `None`, `True` or `False`: Python leaking onto
a page. Screenshots of every page are saved under the report folder (`screenshots/`) for
review. Chromium is Debian's `chromium` package (`make test` installs it where it can);
without it the test fails, saying how to install it.

Chromium runs in its own process group, killed whole when the test ends, fails, or is
interrupted (the fixture's `finally`, and `atexit` for an exit that skips it), and it dies
with the test process even when that one is killed outright (`PR_SET_PDEATHSIG`): a
headless browser left behind keeps burning a CPU.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import ctypes
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.websocket import websocket_connect

import browser_run

LEAK = re.compile(r"nan%|\bNone\b|\bTrue\b|\bFalse\b")
# Evaluated in each loaded page through the DevTools protocol (the page itself, with its
# Content-Security-Policy, is not changed): which images did not decode, the text outside
# code and model output, and the page's height for a full-page screenshot.
PROBE = """(() => {
  const imgs = Array.from(document.images);
  const broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => (i.getAttribute('src') || '').slice(0, 60));
  const body = document.body.cloneNode(true);
  body.querySelectorAll('pre, code, script, style, textarea').forEach(e => e.remove());
  return {images: imgs.length, broken: broken, text: body.textContent, height: document.documentElement.scrollHeight};
})()"""
WIDTH = 1200
HOW_TO_INSTALL = (
    "headless Chromium is needed for the browser test of the reports: install Debian's package "
    "(`sudo apt-get install chromium`; `make test` does it when run as root or with passwordless sudo)"
)


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the test process dies (Linux's
    PR_SET_PDEATHSIG), so not even a killed pytest leaves Chromium running."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Chromium and every process it started (its own process group): SIGTERM, then
    SIGKILL to whatever is left after 5 s. Safe to call twice."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = None
    if pgid is not None and pgid != os.getpgid(0):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    if pgid is not None and pgid != os.getpgid(0):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)  # the renderers and helpers too, even once the leader has gone
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


def chromium() -> str:
    """The Chromium binary, or a failure saying how to install it (never a skip)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(HOW_TO_INSTALL)


class Browser:
    """One headless Chromium driven over the DevTools protocol (tornado's websocket
    client, already installed with Jupyter): load a page, wait for its load event,
    evaluate the probe, take a full-page screenshot. Hand-written rather than
    Playwright/Selenium: those download their own browsers or drivers; this uses the
    system's Chromium and nothing else."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--disable-extensions", "--remote-debugging-port=0", f"--user-data-dir={profile}",
             f"--window-size={WIDTH},800", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,  # it says its DevTools address there
            start_new_session=True,  # its own process group: killed whole (`kill_group`)
            preexec_fn=_die_with_parent,
        )
        self._at_exit = functools.partial(kill_group, self.proc)
        atexit.register(self._at_exit)  # an interrupted or crashed session that skips `close`
        try:
            self._connect(binary, profile)
        except BaseException:
            self.close()
            raise

    def _connect(self, binary: str, profile: Path) -> None:
        # Chromium prints "DevTools listening on ws://127.0.0.1:PORT/..." on stderr once it
        # listens: a thread reads its stderr (draining it for the browser's whole life, so
        # the pipe never fills) and signals that line, or the end of stderr if it died.
        import threading

        listening = threading.Event()
        found: list[int] = []

        def read_stderr() -> None:
            assert self.proc.stderr is not None
            for line in iter(self.proc.stderr.readline, b""):
                m = re.search(rb"DevTools listening on ws://[^:/]+:(\d+)/", line)
                if m and not found:
                    found.append(int(m.group(1)))
                    listening.set()
            listening.set()  # stderr closed: Chromium exited

        threading.Thread(target=read_stderr, daemon=True).start()
        if not listening.wait(30) or not found:
            pytest.fail(f"headless Chromium did not start ({binary}, exit {self.proc.poll()})")
        port = found[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10))
        self.url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        self.loop = asyncio.new_event_loop()

        async def connect() -> Any:
            return await websocket_connect(self.url, max_message_size=1 << 28)

        self.ws = self.loop.run_until_complete(connect())
        self.n = 0
        self.events: list[dict[str, Any]] = []
        self.call("Page.enable")

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        await self.ws.write_message(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = await asyncio.wait_for(self.ws.read_message(), timeout=30)
            assert msg is not None, "Chromium closed the DevTools connection"
            d = json.loads(msg)
            if d.get("id") == self.n:
                assert "error" not in d, f"{method}: {d['error']}"
                return d.get("result", {})
            self.events.append(d)

    async def _event(self, name: str) -> None:
        while not any(e.get("method") == name for e in self.events):
            msg = await asyncio.wait_for(self.ws.read_message(), timeout=30)
            assert msg is not None, "Chromium closed the DevTools connection"
            self.events.append(json.loads(msg))

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self.loop.run_until_complete(self._call(method, params))

    def render(self, page: Path, screenshot: Path) -> dict[str, Any]:
        """What the browser made of `page` (images, broken ones, visible text, height),
        and a full-page screenshot of it at `screenshot`."""
        self.events.clear()
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=800, deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=page.resolve().as_uri())
        self.loop.run_until_complete(self._event("Page.loadEventFired"))
        seen = self.call("Runtime.evaluate", expression=PROBE, returnByValue=True)["result"]["value"]
        height = min(max(int(seen["height"]), 600), 16000)
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=height, deviceScaleFactor=1, mobile=False)
        shot = self.call("Page.captureScreenshot", format="png")
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        return seen

    def close(self) -> None:
        """Close the DevTools connection, then kill Chromium's whole process group, whatever
        state the connection was left in."""
        try:
            loop = getattr(self, "loop", None)
            if loop is not None and not loop.is_closed():

                async def shut() -> None:
                    if getattr(self, "ws", None) is not None:
                        self.ws.close()
                    await asyncio.sleep(0)

                try:
                    loop.run_until_complete(shut())
                finally:
                    loop.close()
        finally:
            kill_group(self.proc)
            atexit.unregister(self._at_exit)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(chromium(), tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return browser_run.make(tmp_path_factory.mktemp("browser"))


def test_every_page_renders_without_broken_images_or_python_values(made: dict[str, Any], browser: Browser) -> None:
    assert made["report"].exit_code == 0, made["report"].output
    assert made["micro"].exit_code == 1, made["micro"].output  # its only variant does not help
    assert made["agent"].exit_code == 0, made["agent"].output
    index = made["out"] / "index.html"
    pages = ([index] + sorted(made["pages"].glob("*.html")) + sorted(made["micro_pages"].glob("*.html"))
             + sorted(made["agent_pages"].glob("*.html")))
    names = {p.stem for p in pages}
    assert {"run_summary", "pass_at_k", "skill_comparison", "judge_calibration", "power_planning", "micro_test",
            "replay"} <= names
    # every report page the index links to is among those rendered
    linked = set(re.findall(r"href=['\"]([^'\"]+\.html)['\"]", index.read_text(encoding="utf-8")))
    assert linked and all((index.parent / h).resolve() in {p.resolve() for p in pages} for h in linked), linked
    shots = made["pages"] / "screenshots"  # the index's and the run's; the micro-test's beside its own pages
    others = (made["micro_pages"], made["agent_pages"])  # their screenshots beside their own pages
    for d in (shots, *(o / "screenshots" for o in others)):
        d.mkdir(exist_ok=True)
    problems = []
    for page in pages:
        where = page.parent / "screenshots" if page.parent in others else shots
        seen = browser.render(page, where / f"{page.stem}.png")
        # the replay page is tables of text, the explorer a list of samples: no figure
        if page != index and page.stem not in ("replay", "explorer", "diff"):
            assert seen["images"] > 0, f"{page.name}: no figure"
        if seen["broken"]:
            problems.append(f"{page.name}: {len(seen['broken'])} broken image(s): {seen['broken']}")
        for m in LEAK.finditer(seen["text"]):
            around = seen["text"][max(m.start() - 60, 0) : m.end() + 60].replace("\n", " ")
            problems.append(f"{page.name}: {m.group(0)!r} in {around!r}")
    assert not problems, "\n".join(problems)
    assert sorted(p.name for p in shots.glob("*.png")) == sorted(f"{p.stem}.png" for p in pages if p.parent not in others)
    assert (made["micro_pages"] / "screenshots" / "micro_test.png").exists()
    assert (made["agent_pages"] / "screenshots" / "replay.png").exists()
    replay = (made["agent_pages"] / "replay.html").read_text(encoding="utf-8")
    assert "<script>alert" not in replay and "tool lookup(" in replay  # the agent's hostile text, escaped


def test_the_probe_catches_a_broken_image_and_a_leaked_value(tmp_path: Path, browser: Browser) -> None:
    page = tmp_path / "bad.html"
    page.write_text(
        "<html><body><p>rate nan% and None</p><pre>True in model output is fine</pre>"
        "<img src='data:image/png;base64,AAAA'></body></html>",
        encoding="utf-8",
    )
    seen = browser.render(page, tmp_path / "bad.png")
    assert seen["images"] == 1 and len(seen["broken"]) == 1
    assert LEAK.findall(seen["text"]) == ["nan%", "None"]


def test_without_chromium_the_test_fails_saying_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no browser on this PATH
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        chromium()


def _group_members(pgid: int) -> list[int]:
    """The live processes of a process group (/proc/PID/stat's pgrp; a zombie has exited
    and is left out)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, pgrp
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def _group_gone(pgid: int, within_s: float) -> bool:
    """Whether every process of the group exits within `within_s`: waited on their pidfds
    (the kernel's exit events, no polling), the group listed again after each round in
    case a member started another."""
    import select

    deadline = time.monotonic() + within_s
    while True:
        fds = []
        for pid in _group_members(pgid):
            with contextlib.suppress(ProcessLookupError):
                fds.append(os.pidfd_open(pid))
        if not fds:
            return True
        try:
            left = fds
            while left and time.monotonic() < deadline:
                ready, _, _ = select.select(left, [], [], deadline - time.monotonic())
                left = [fd for fd in left if fd not in ready]
            if left:
                return False
        finally:
            for fd in fds:
                os.close(fd)


def test_closing_the_browser_leaves_no_chromium_process(tmp_path: Path) -> None:
    b = Browser(chromium(), tmp_path / "profile")
    pgid = os.getpgid(b.proc.pid)
    assert pgid != os.getpgid(0)  # its own group, so killing it cannot touch pytest
    b.close()
    assert _group_gone(pgid, 5), "Chromium processes left after close"
    b.close()  # twice is harmless


def test_a_killed_test_process_takes_chromium_with_it(tmp_path: Path) -> None:
    """The orphan case: pytest killed outright (no finally, no atexit) must not leave
    headless Chromium running."""
    code = (
        "import os, signal, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "import test_reports_browser as t; b = t.Browser(t.chromium(), Path(sys.argv[2]));"
        "print(os.getpgid(b.proc.pid), flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    child = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(tmp_path / "profile")],
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr
    pgid = int(child.stdout.split()[0])
    try:
        assert _group_gone(pgid, 10), "Chromium outlived the killed test process"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)  # never leave it behind, even when the check fails
