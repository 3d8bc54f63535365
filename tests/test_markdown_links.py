"""Every Markdown link of the README and docs/ points at a file of the repository, and the
README stays a first page (under 300 lines; the rest lives in docs/)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The link targets of ``page`` that are no file under ``root`` (URLs, anchors within
    the page and code blocks are not checked)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() or root.resolve() not in path.parents:
            broken.append(target)
    return broken


def test_links_point_at_files_of_the_repository():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = {str(p.relative_to(ROOT)): broken_links(p) for p in pages if "_build" not in p.parts}
    assert {p: b for p, b in found.items() if b} == {}


def test_the_link_check_finds_a_broken_link(tmp_path):
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "p.md"
    page.write_text(
        "[ok](p.md#a) [up](../docs/p.md) [gone](missing.md) [out](../../x.md)\n"
        "[web](https://flower.ai) [here](#a)\n```\n[code](x.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == ["missing.md", "../../x.md"]


def test_readme_is_a_first_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 300
    for page in ("architecture", "performance", "tests", "overview", "flower"):
        assert f"(docs/{page}.md)" in text  # where the rest lives
