"""The built site's search works offline: from a word of each chapter's own, the search page finds that chapter;
the Chinese edition's search finds, for each of its search words (the glossary's Chinese names and the edition's list
of common terms), every page whose prose uses it; each hit shows a sentence that holds the query, with no raw TeX."""

import re

import nbformat

from course_embed.tools import browser
from course_embed.tools.site_search import search_words

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


def _prose(page: str) -> str:
    """A built page's article text, without code cells, outputs, scripts and tags."""
    article = page.split('<article class="bd-article">', 1)[-1].split("</article>", 1)[0]
    article = re.sub(r'<div class="cell_(?:input|output)[^"]*".*?</div>\s*</div>', " ", article, flags=re.S)
    return re.sub(r"<[^>]+>", "", re.sub(r"<(script|style)\b.*?</\1>", " ", article, flags=re.S))


def _hits(context, site_url, query) -> list[dict]:
    """Each hit the search page at ``site_url`` lists for ``query``: its link and its context's text, once MathJax
    has typeset the context."""
    page = context.new_page()
    page.route("**/*", browser.offline(site_url, []))
    page.goto(f"{site_url}search.html?q={query}", wait_until="load", timeout=WAIT_MS)
    page.wait_for_function(
        "() => ((document.querySelector('#search-results .search-summary') || {}).textContent || '').trim() && "
        "[...document.querySelectorAll('#search-results ul.search li')].every(li => li.querySelector('.context') && "
        "!li.querySelector('.context .math:not(:has(mjx-container))'))",
        timeout=WAIT_MS,
    )
    hits = page.evaluate(
        "() => [...document.querySelectorAll('#search-results ul.search li')].map(li => "
        "({href: li.querySelector('a').getAttribute('href'), context: li.querySelector('.context').innerText}))"
    )
    page.close()
    return hits


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


def test_the_chinese_search_finds_every_page_that_uses_each_search_word(built_site, site_url, chromium):
    prose = {
        f"/zh/{entry}.html": _prose((built_site.zh / f"{entry}.html").read_text(encoding="utf-8")).replace(" ", "")
        for entry in toc_files()
    }
    words = search_words()
    for term in ("学习率", "困惑度", "因果掩码", "优化器", "随机种子", "反向传播", "注意力头", "位置编码"):
        assert term in words
    context = chromium.new_context()
    missed = {}
    for word in words:
        expected = {path for path, text in prose.items() if word in text}
        found, blocked = _search(context, f"{site_url}zh/", word)
        if expected - set(found) or blocked:
            missed[word] = sorted(expected - set(found)) + blocked
    context.close()
    assert missed == {}


def test_each_hit_shows_a_sentence_with_the_query_and_no_raw_tex(built_site, site_url, chromium):
    context = chromium.new_context()
    # "rotary" is indexed by its stem, "rotari", which no sentence holds
    for edition, query, word in (
        ("", "rotation", "rotat"),
        ("", "rotary", "rotary"),
        ("zh/", "旋转", "旋转"),
        ("", "sqrt", ""),
    ):
        hits = _hits(context, f"{site_url}{edition}", query)
        assert hits, query
        for hit in hits:
            text = hit["context"]
            assert word.lower() in text.lower() or not word, hit
            assert not re.search(r"\\[a-zA-Z(\[]|\$|\.ipynb", text), hit  # no TeX, no menu text
            assert 0 < len(text) <= 320, hit
    context.close()
