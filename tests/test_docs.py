"""The README a newcomer reads first and the docs/ pages it points to: short where it must
be, and every link between them (and to the repository's files) resolves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs").glob("*/*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]+\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def outside_fences(text: str) -> list[str]:
    kept, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            kept.append(line)
    return kept


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in outside_fences(page.read_text(encoding="utf-8")):
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(page: Path) -> list[str]:
    bad = []
    prose = re.sub(r"`[^`\n]*`", "", "\n".join(outside_fences(page.read_text(encoding="utf-8"))))
    for url in LINK.findall(prose):
        if url.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = url.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            bad.append(f"{page.relative_to(ROOT)}: {url} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            bad.append(f"{page.relative_to(ROOT)}: {url} (no such heading)")
    return bad


def test_every_link_in_the_readme_and_docs_resolves():
    bad = [b for page in PAGES for b in broken_links(page)]
    assert not bad, "\n".join(bad)


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Real heading\n\n[ok](#real-heading) [gone](b.md) [bad](#nope)\n")
    page = tmp_path / "a.md"
    text = page.read_text()
    urls = LINK.findall(text)
    assert urls == ["#real-heading", "b.md", "#nope"]
    assert "real-heading" in anchors(page)
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert broken_links(page) == ["a.md: b.md (no such file)", "a.md: #nope (no such heading)"]
    finally:
        ROOT = saved


def test_the_readme_is_short_and_starts_with_a_quickstart_of_at_most_40_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, len(lines)
    headings = [i for i, line in enumerate(lines) if line.startswith("## ")]
    assert lines[headings[0]] == "## Quickstart", lines[headings[0]]
    quickstart = lines[headings[0] : headings[1]]
    assert len(quickstart) <= 40, len(quickstart)
    text = "\n".join(quickstart)
    assert "make demo" in text and "source .venv/bin/activate" in text and "reports/index.html" in text


def test_every_readme_section_of_0_1_has_a_home_in_docs():
    """What the README held before it was cut to a quickstart now lives in docs/: each
    reference section's heading is on some page."""
    headings = {
        slug(h) for page in PAGES[1:] for h in re.findall(r"^#{2,6} (.*)$", page.read_text(encoding="utf-8"), re.M)
    }
    for moved in [
        "A tour of the CLI",
        "In CI",
        "The notebooks",
        "The judge",
        "The suite format",
        "Agents",
        "The sandbox",
        "Personal data and secrets",
        "Pointing evalkit at a real endpoint",
        "Past one machine for agents: Ray",
        "The gate, the costs and the cap",
        "Benchmarks",
    ]:
        assert slug(moved) in headings, moved
