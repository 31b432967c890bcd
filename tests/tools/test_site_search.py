"""The built site's search works offline: from a word of each chapter's own, the search page finds that chapter;
the Chinese edition's search finds a chapter from a Chinese term (Chinese has no spaces: jieba splits the words, with
the glossary's terms as its word list)."""

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


def _search(context, site_url, query) -> tuple[list[str], list[str]]:
    """The pages the search page at ``site_url`` lists for ``query``, and what it tried to load from elsewhere."""
    blocked = []
    page = context.new_page()
    page.route("**/*", browser.offline(site_url, blocked))
    page.goto(f"{site_url}search.html?q={query}", wait_until="load", timeout=WAIT_MS)
    page.wait_for_function(
        "() => ((document.querySelector('#search-results .search-summary') || {}).textContent || '').trim()",
        timeout=WAIT_MS,
    )
    found = page.evaluate(
        "() => [...document.querySelectorAll('#search-results ul.search li a')].map(a => new URL(a.href).pathname)"
    )
    page.close()
    return found, blocked


def test_the_chinese_search_finds_chapters_from_chinese_terms(built_site, site_url, chromium):
    context = chromium.new_context()
    results = {term: _search(context, f"{site_url}zh/", term) for term in ("位置编码", "词元嵌入", "权重绑定")}
    context.close()
    assert "/zh/book/03_sinusoidal.html" in results["位置编码"][0], results
    assert "/zh/book/01_token_embedding.html" in results["词元嵌入"][0], results
    assert "/zh/book/01_token_embedding.html" in results["权重绑定"][0], results
    assert not any(blocked for _, blocked in results.values())
    assert all(path.startswith("/zh/") for found, _ in results.values() for path in found)


def test_search_finds_each_chapter_offline(built_site, site_url, chromium):
    words = _chapter_words()
    assert len(words) == sum((ROOT / f"{entry}.ipynb").exists() for entry in toc_files()) > 0
    context = chromium.new_context()
    missed = {}
    for page_path, word in words.items():
        found, blocked = _search(context, site_url, word)
        if f"/{page_path}" not in found or blocked:
            missed[page_path] = {"word": word, "found": found, "blocked": blocked}
    context.close()
    print("search words:", words)
    assert not missed
