"""Every citation leads somewhere a clone of the project can follow: a public source (a URL, a
pull request or issue of a named repository) or a document inside the repository. Nothing points
at the guides envkit was written against, at the project's own issue numbers, or at a folder
outside the repository; each `docs/...` page named exists, and each link in the docs and the
README reaches its file and, where it names one, its section."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

SCANNED = ("envkit", "profiles", "templates", "benchmarks", "tests", "docs")
SUFFIXES = {".py", ".toml", ".md", ".yaml", ".yml", ".sh", ".txt"}
# a guide by its number ("seed" and three digits), one of the project's own issue numbers, the
# shared folder beside the repository, and a bare knowledge folder (docs/knowledge/ is fine). The
# patterns are spelled so that a plain grep for the old forms does not find this file.
DEAD = re.compile(r"\bseeds? 0\d\d\b|\bissues? \d|\bissue-\d|\.\.[/]shared\b|\bshared[/]knowledge\b|(?<![\w/.])knowledge[/]", re.I)
# Files being rewritten elsewhere may carry an old citation for a while: name them here with the
# line's text (none now).
PENDING: dict[str, str] = {}


def texts() -> dict[str, str]:
    """Path -> text of every file scanned; this file is left out, as it spells the old forms to find them."""
    out = {"README.md": (ROOT / "README.md").read_text()}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts and path != Path(__file__):
                out[path.relative_to(ROOT).as_posix()] = path.read_text(errors="replace")
    return out


def dead_citations(name: str, text: str) -> list[str]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if DEAD.search(line) and not (name in PENDING and PENDING[name] in line):
            found.append(f"{name}:{n}: {line.strip()}")
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_no_citation_leads_outside_the_repository():
    found = [hit for name, text in texts().items() for hit in dead_citations(name, text)]
    assert found == [], "\n".join(found)


def test_the_dead_citation_pattern_catches_each_old_form():
    planted = ("as seed " "004 trains", "seed " "003's 'if NaN' setting", "(issue " "21, 2026-11-23)",
               "## Issues " "11-14 on the H100", "see .." "/shared" "/knowledge" "/mps.md", 'source = "knowledge' '/mps.md problem 7"',
               "seeds " "000, 002 and 004")
    assert [p for p in planted if not dead_citations("x.py", p)] == []
    kept = ("docs/knowledge/mps.md problem 7", "pytorch/pytorch#109457", "[--seed 0]", "experiment.seed", "seed 42",
            "https://github.com/exelban/stats/issues/1094")
    assert [k for k in kept if dead_citations("x.py", k)] == []


def test_every_docs_page_named_exists():
    named = {m for text in texts().values() for m in re.findall(r"\bdocs/knowledge/[\w./-]+\.md", text)}
    assert len(named) >= 5  # the knowledge pages are cited from code, data tables and profiles
    assert sorted(n for n in named if not (ROOT / n).is_file()) == []


def test_links_in_the_docs_and_readme_reach_their_file_and_section():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken, checked = [], 0
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a URL: public, not checked offline
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            checked += 1
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md":
                headings = {slug(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), re.M)}
                broken += [f"{page.relative_to(ROOT)}: {target} (no such section)"] * (anchor not in headings)
    assert checked >= 20
    assert broken == [], "\n".join(broken)
