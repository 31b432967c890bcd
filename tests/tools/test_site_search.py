"""The built site's search works offline: from a word of each chapter's own, the search page finds that chapter."""

import re

import nbformat

from course_embed.tools import browser

from .test_notebooks import ROOT, toc_files

WAIT_MS = 30_000


def _chapter_words() -> dict[str, str]:
    """Per chapter page: a word (7+ letters) of its prose that no other chapter's prose uses, its most frequent."""
    words = {}
    for entry in toc_files():
        notebook = ROOT / f"{entry}.ipynb"
        if notebook.exists():
            prose = " ".join(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "markdown")
            prose = re.sub(r"\$[^$]*\$|`[^`]*`|\([^)]*\)|\{[^}]*\}", " ", prose)  # math, code, link targets, roles
            words[f"{entry}.html"] = re.findall(r"\b[a-z]{7,}\b", prose.lower())
    chosen = {}
    for page, mine in words.items():
        others = {w for other, theirs in words.items() if other != page for w in theirs}
        counts = {w: mine.count(w) for w in set(mine) - others}
        chosen[page] = min(counts, key=lambda w: (-counts[w], w))
    return chosen


def test_search_finds_each_chapter_offline(built_site, site_url, chromium):
    words = _chapter_words()
    assert len(words) == sum((ROOT / f"{entry}.ipynb").exists() for entry in toc_files()) > 0
    context = chromium.new_context()
    missed = {}
    for page_path, word in words.items():
        blocked = []
        page = context.new_page()
        page.route("**/*", browser.offline(site_url, blocked))
        page.goto(f"{site_url}search.html?q={word}", wait_until="load", timeout=WAIT_MS)
        page.wait_for_function(
            "() => /found|did not match/i.test("
            "(document.querySelector('#search-results .search-summary') || {}).textContent || '')",
            timeout=WAIT_MS,
        )
        found = page.evaluate(
            "() => [...document.querySelectorAll('#search-results ul.search li a')].map(a => new URL(a.href).pathname)"
        )
        page.close()
        if f"/{page_path}" not in found or blocked:
            missed[page_path] = {"word": word, "found": found, "blocked": blocked}
    context.close()
    print("search words:", words)
    assert not missed
