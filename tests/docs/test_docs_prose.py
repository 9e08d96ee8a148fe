"""The README and the docs read easily: no paragraph of prose over 120 words (a newcomer reads a page
in short steps; a 300-word paragraph with nested parentheses is where they give up). Prose only:
fenced code, tables, lists (a list item with its continuation lines), headings and HTML comments are
not paragraphs. The generated train.yaml reference is a table and is left out by that rule."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

LIMIT = 120
PAGES = sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line, text) of every paragraph of prose in a Markdown page."""
    out: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    in_fence = in_list = after_blank = False
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        plain = False
        if in_fence or stripped.startswith("```"):
            in_fence = in_fence != stripped.startswith("```")
        elif not stripped:
            if current:
                out.append((start, " ".join(current)))
                current = []
            after_blank = True
            continue
        elif LIST_ITEM.match(line):
            in_list = True
        elif line[0].isspace():
            pass  # a list item's continuation, or indented code
        elif stripped.startswith(("#", "|", "<!--")):
            in_list = False
        elif in_list and not after_blank:
            pass  # a list item's lazy continuation line
        else:
            in_list, plain = False, True
            if not current:
                start = n
            current.append(stripped)
        if not plain and current:
            out.append((start, " ".join(current)))
            current = []
        after_blank = False
    if current:
        out.append((start, " ".join(current)))
    return out


def long_paragraphs(page: Path) -> list[str]:
    return [f"{page.relative_to(ROOT)}:{line}: {len(p.split())} words: {p[:80]}..."
            for line, p in paragraphs(page.read_text(encoding="utf-8")) if len(p.split()) > LIMIT]


def test_the_paragraph_reader_counts_prose_only():
    page = "\n".join([
        "# Title", "", "One two three.", "Four five.", "", "- a list item", "  its continuation", "lazy line",
        "", "  - nested", "", "| a | table |", "|---|---|", "", "```", "code code code", "```", "",
        "<!-- a comment -->", "Six seven.", "", "Eight."])
    assert paragraphs(page) == [(3, "One two three. Four five."), (20, "Six seven."), (22, "Eight.")]


def test_no_paragraph_of_the_readme_or_the_docs_is_over_120_words():
    assert [p for page in PAGES for p in long_paragraphs(page)] == []
    assert len(PAGES) >= 20
