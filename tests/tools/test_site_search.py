"""The built site's search works offline: from a word of each chapter's own, the search page finds that chapter;
the Chinese edition's search finds, for each of its search words (the glossary's Chinese names and the edition's list
of common terms), every page whose prose uses it; each hit shows a sentence that holds the query, with no raw TeX.

The same Chinese search, and the Chinese edition's typography and wide tables, are also checked on a small site of
three pages, built in seconds with the book's theme and extensions (``small_zh_site``), so that they need no build of
the book."""

import re
import subprocess
import sys

import nbformat
import pytest

from course_embed.tools import browser, translations
from course_embed.tools.edition import write_config
from course_embed.tools.site_search import WORD_LIST, search_words

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
    """Each hit the search page at ``site_url`` lists for ``query``: its link, the link's text, and its context's text
    once MathJax has typeset the context. A name of the library reference's entries (``RotaryEmbedding``) is a hit of
    its own, which Sphinx lists by its name and kind ("Python class, in Library reference"): its context is None."""
    page = context.new_page()
    page.route("**/*", browser.offline(site_url, []))
    page.goto(f"{site_url}search.html?q={query}", wait_until="load", timeout=WAIT_MS)
    page.wait_for_function(
        "() => ((document.querySelector('#search-results .search-summary') || {}).textContent || '').trim() && "
        "[...document.querySelectorAll('#search-results ul.search li')].every(li => "
        "(li.querySelector('.context') || li.querySelector(':scope > span')) && "
        "!li.querySelector('.context .math:not(:has(mjx-container))'))",
        timeout=WAIT_MS,
    )
    hits = page.evaluate(
        "() => [...document.querySelectorAll('#search-results ul.search li')].map(li => "
        "({href: li.querySelector('a').getAttribute('href'), title: li.querySelector('a').innerText, "
        "kind: (li.querySelector(':scope > span') || {}).innerText || null, "
        "context: (li.querySelector('.context') || {}).innerText ?? null}))"
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
        assert any(hit["context"] is not None for hit in hits), (query, hits)
        for hit in hits:
            if hit["context"] is None:  # an entry of the library reference, listed by its name and kind
                assert "reference.html#course_embed." in hit["href"] and word.lower() in hit["title"].lower(), hit
                assert hit["kind"] and "Library reference" in hit["kind"], hit
                continue
            text = hit["context"]
            assert word.lower() in text.lower() or not word, hit
            assert not re.search(r"\\[a-zA-Z(\[]|\$|\.ipynb", text), hit  # no TeX, no menu text
            assert 0 < len(text) <= 320, hit
    context.close()


# A small Chinese site: the glossary's Chinese names (as the glossary writes them, 动态 NTK with its space) and the
# edition's common terms, each in a sentence of one of three pages, where jieba cuts the text around them as it likes;
# an emphasised Chinese phrase; a table too wide for a phone.
SMALL_CONF = """project = "small"
language = "zh_CN"
html_theme = "sphinx_book_theme"
extensions = ["course_embed.tools.site_editions", "course_embed.tools.site_search"]
html_search_options = {{"dict": {words!r}}}
"""
WIDE_TABLE = """
.. list-table::
   :header-rows: 1

   * - 方法
     - 作用于
     - 高频维度对
     - 低频维度对
     - 训练长度之外
   * - 位置插值
     - 所有维度对
     - 除以扩展倍数，相邻位置挤在一起
     - 除以扩展倍数
     - 角度都见过，间距变小
"""


def _small_site_words() -> list[str]:
    names = {name for chinese in translations.glossary_terms().values() for name in chinese}
    common = [line.split("#", 1)[0].strip() for line in WORD_LIST.read_text(encoding="utf-8").splitlines()]
    return sorted(names | {word for word in common if len(word) > 1})


@pytest.fixture(scope="module")
def small_zh_site(tmp_path_factory):
    """The small Chinese site, built (``html``), with each page's text (``pages``: name -> text without spaces)."""
    root = tmp_path_factory.mktemp("small_zh_site")
    source, words_folder = root / "source", root / "words"
    source.mkdir()
    write_config(ROOT, words_folder)  # the search word list exactly as the Chinese edition's build writes it
    (source / "conf.py").write_text(SMALL_CONF.format(words=str(words_folder / "search_words.txt")), encoding="utf-8")
    words = _small_site_words()
    pages = {f"page{k}": [f"第 {k} 页" + "\n" + "=" * 8, ""] for k in range(3)}
    for i, word in enumerate(words):
        pages[f"page{i % 3}"].append(f"我们接着讨论{word}在模型中的作用和代价。")
    pages["page0"] += ["", "旋转位置编码 *在注意力内部* 作用。", WIDE_TABLE]
    (source / "index.rst").write_text("首页\n====\n\n.. toctree::\n\n   page0\n   page1\n   page2\n", encoding="utf-8")
    for name, lines in pages.items():
        (source / f"{name}.rst").write_text("\n".join(lines) + "\n", encoding="utf-8")
    html = root / "html"
    built = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(source), str(html)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-3000:]
    texts = {name: "".join(lines[2:]).replace(" ", "") for name, lines in pages.items()}
    return {"html": html, "pages": texts, "words": words}


# The pages the search page's own code (searchtools.js, with the edition's query splitting) finds for each query.
SEARCH_ALL = """(queries) => Object.fromEntries(queries.map((query) => [query,
  [...new Set(Search._performSearch(...Search._parseQuery(query)).map((hit) => hit[0]))].sort()]))"""


def test_a_chinese_query_finds_every_page_that_uses_it_on_a_small_site(small_zh_site, chromium):
    """Each glossary name and common term, typed as the glossary writes it (动态 NTK) or without its spaces, finds
    exactly the pages whose text holds it; run together with another word of its page (a query the index does not
    hold as one word, split in the browser into the index's words), it finds every page that holds both."""
    pages, words = small_zh_site["pages"], small_zh_site["words"]
    for term in (
        "学习率",
        "困惑度",
        "因果掩码",
        "优化器",
        "随机种子",
        "反向传播",
        "注意力头",
        "位置编码",
        "内核",
        "维度对",
    ):
        assert term in words
    queries = {word: {word} for word in words} | {word.replace(" ", ""): {word} for word in words}
    pairs = {a + b: {a, b} for a, b in zip(words[0::3], words[3::3], strict=False)}  # two words of one page
    expected = {
        query: sorted(name for name, text in pages.items() if all(p.replace(" ", "") in text for p in parts))
        for query, parts in (queries | pairs).items()
    }
    with browser.serve(small_zh_site["html"]) as url:
        page = chromium.new_page()
        page.goto(f"{url}search.html", wait_until="load", timeout=WAIT_MS)
        page.wait_for_function("() => typeof Search !== 'undefined' && Search.hasIndex()", timeout=WAIT_MS)
        found = page.evaluate(SEARCH_ALL, list(queries | pairs))
        page.close()
    assert {query: (found[query], expected[query]) for query in queries if found[query] != expected[query]} == {}
    # run together, two words are looked up as two (Sphinx's search may add pages that hold only a two-character one)
    assert {query: found[query] for query in pairs if not set(expected[query]) <= set(found[query])} == {}
    assert found["学习率"] == ["page" + str(words.index("学习率") % 3)]


def test_chinese_emphasis_is_dotted_and_a_wide_table_scrolls_at_a_phone_width(small_zh_site, chromium):
    """Chinese emphasis is marked with dots under the characters (着重号), not slanted; at 390 px a wide Chinese table
    keeps at least five characters a cell and scrolls sideways instead of stacking one character a line."""
    with browser.serve(small_zh_site["html"]) as url:
        page = chromium.new_page(viewport={"width": 390, "height": 800})
        page.goto(f"{url}page0.html", wait_until="load", timeout=WAIT_MS)
        seen = page.evaluate(
            """() => {
          const em = getComputedStyle(document.querySelector('article em'));
          const table = document.querySelector('article table'), box = table.parentElement;
          const cells = [...table.querySelectorAll('td, th')].map((cell) => cell.getBoundingClientRect().width);
          return {slant: em.fontStyle, dots: em.textEmphasisStyle || em.webkitTextEmphasisStyle,
                  scrolls: getComputedStyle(box).overflowX, wider: box.scrollWidth > box.clientWidth + 1,
                  narrowest: Math.min(...cells) / parseFloat(getComputedStyle(table.querySelector('td')).fontSize),
                  sideways: document.documentElement.scrollWidth > document.documentElement.clientWidth + 1};
        }"""
        )
        page.close()
    assert seen["slant"] == "normal" and "dot" in seen["dots"], seen
    assert seen["scrolls"] == "auto" and seen["wider"] and seen["narrowest"] >= 4.9, seen
    assert not seen["sideways"], seen  # the table scrolls, not the page
