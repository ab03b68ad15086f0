"""Every relative link in README.md and docs/ leads somewhere a reader who cloned the repository has.

A moved section or a renamed file leaves links that 404 on GitHub and dead ends in a local
checkout; nothing else notices. So: every relative Markdown link (``[text](path)``,
``![alt](path)``) in README.md and docs/**/*.md must name an existing file, and a ``#fragment``
must name a heading of that file (GitHub's anchor for it). The README is the front door: it
stays short and points at no file a user does not have (the developers' notes outside the
repository).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# [text](target) and ![alt](target); the target ends at the first space (an optional "title")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """The text a reader sees as Markdown: fenced blocks and code spans hold examples, not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, code ticks and punctuation dropped (letters,
    digits, '_', '-' and spaces kept), each space a '-'."""
    text = heading.strip().lower().replace("`", "")
    text = "".join(ch for ch in text if ch.isalnum() or ch in "_- ")
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            base = _anchor(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def _relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(_prose(page.read_text())) if not re.match(r"^[a-zA-Z][a-zA-Z+.-]*:", t)]


def test_the_link_pattern_finds_what_a_reader_would_click():
    # known answer: two links and one image, none of the code
    text = 'see [a](a.md), ![pic](img/x.png "t") and [b](b.md#sec) but `[c](c.md)`\n```\n[d](d.md)\n```\n'
    assert LINK.findall(_prose(text)) == ["a.md", "img/x.png", "b.md#sec"]
    assert _anchor("Sweeps, `replay --vary` and `--split auto`") == "sweeps-replay---vary-and---split-auto"
    assert _anchor("The paper's numbers: read off or derived") == "the-papers-numbers-read-off-or-derived"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in _relative_links(page):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(ROOT):
            broken.append(f"{target} (outside the repository)")
        elif not dest.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            broken.append(f"{target} (no heading #{fragment} in {dest.relative_to(ROOT)})")
    assert broken == [], f"{page.relative_to(ROOT)}: {broken}"


def test_the_readme_and_docs_point_at_no_file_a_user_lacks():
    # DOMAIN.md, DESIGN.md and STYLE.md are the developers' notes beside the repository, not in it
    for page in PAGES:
        text = page.read_text()
        for name in ("DOMAIN.md", "DOMAIN §", "DESIGN.md", "STYLE.md"):
            assert name not in text, (
                f"{page.relative_to(ROOT)} mentions {name}, which is not in the repository"
            )


def test_the_readme_is_a_front_door():
    # what it is, the two commands, what you get, the commands, where to read more — the manual is in docs/
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 8000, (
        f"README.md is {len(readme.encode())} bytes (under 8 KB, read as 8,000)"
    )
    # one picture, the advice at a glance, and no project bookkeeping: goals, bars and measurement
    # history live in docs/performance.md and CHANGELOG.md
    assert re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme) == ["docs/img/advice.png"]
    for word in ("goal", "bar", "status", "best of", "measured on", "MB/s"):
        assert not re.search(rf"\b{word}s?\b", readme, re.IGNORECASE), f"README.md speaks of {word!r}"
    assert "\nbash .ci/run\n" in readme
    quick = re.search(r"```bash\n(python3 -m venv .venv && [^\n]+)\n```", readme)
    assert quick and "asaptrace ingest sample_traces/coupled/kineto" in quick.group(1)
    linked = set(_relative_links(ROOT / "README.md"))
    for doc in ("docs/performance.md", "docs/sweep.md", "docs/analyses/advise.md", "docs/cli-reference.md"):
        assert doc in linked, f"README.md does not link {doc}"
