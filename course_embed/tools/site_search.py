"""The site's search, in both editions: a Chinese term finds the pages that use it, and every hit shows its sentence.

A Sphinx extension, listed in ``_config.yml`` under ``sphinx.extra_extensions``.

- **Chinese words.** Chinese has no spaces between words. Sphinx's Chinese search language splits the pages into
  words with jieba when it builds the index, but the browser looks a query up whole: a term that jieba split
  differently (学习率 as 学习 + 率, 旋转位置编码 as one word that hides 位置编码) was never found. So the index also
  records every word of the edition's word list (``search_words``: the glossary's Chinese names, their parts, and
  ``locales/zh_CN/search_words.txt``) that a text contains, and the browser splits a Chinese query that the index
  lacks into the index's longest words (``SEARCH_JS``).
- **Result sentences.** Sphinx shows, under each hit, 240 characters cut from the page's text around the first
  match: raw TeX (``\\(\\sqrt{d}\\)``), code, the page's menus ("....ipynb" when the match is not in the text).
  ``SEARCH_JS`` shows instead the sentence of the page's prose (or of the linked section or glossary definition)
  that holds the most query words, with its mathematics typeset by MathJax.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.search.zh import SearchChinese

from course_embed.tools import translations

WORD_LIST = translations.LOCALES / translations.LANGUAGE / "search_words.txt"
_CJK = re.compile(r"[\u3400-\u9fff]+")


def search_words(glossary: Path = translations.ROOT / "book" / "glossary.md", word_list: Path = WORD_LIST) -> list[str]:
    """The words the Chinese search keeps whole: each glossary Chinese name (without its spaces: 动态 NTK is
    动态NTK) and its Chinese parts (NTK 感知缩放 gives 感知缩放), and the words of ``word_list`` (``#`` starts a
    comment)."""
    words = set()
    for names in translations.glossary_terms(glossary).values():
        for name in names:
            words.add(name.replace(" ", ""))
            words.update(part for part in _CJK.findall(name) if len(part) > 1)
    for line in word_list.read_text(encoding="utf-8").splitlines():
        if (word := line.split("#", 1)[0].strip()) and len(word) > 1:
            words.add(word)
    return sorted(words)


class SearchChineseTerms(SearchChinese):
    """Sphinx's Chinese search language (jieba's words, loaded with the word list of ``html_search_options["dict"]``,
    one ``word frequency tag`` a line) that also indexes every word of that list a text contains, wherever jieba
    cut it."""

    def init(self, options: dict[str, str]) -> None:
        super().init(options)
        path = options.get("dict")
        lines = Path(path).read_text(encoding="utf-8").splitlines() if path and Path(path).is_file() else []
        self.whole_words = [line.split()[0] for line in lines if line.strip()]

    def split(self, input: str) -> list[str]:
        compact = input.replace(" ", "")
        return super().split(input) + [word for word in self.whole_words if word in compact]


# Runs on the search page before Sphinx's search starts (DOMContentLoaded, registered before searchtools.js's own).
SEARCH_JS = r"""document.addEventListener("DOMContentLoaded", () => {
  const CJK = /[\u3400-\u9fff]/;
  const known = (word) => {
    const term = word.toLowerCase();  // the index holds its terms in lower case (KV缓存 as kv缓存)
    return Object.hasOwn(Search._index.terms, term) || Object.hasOwn(Search._index.titleterms, term);
  };
  // A Chinese query that the index holds as one word once its spaces go (动态 NTK, √d 缩放, as the glossary writes
  // them) is that word; otherwise a Chinese query word that the index lacks is looked up as the longest index words it
  // is made of, left to right.
  const splitWords = splitQuery;
  splitQuery = (query) => {
    const whole = query.replace(/\s+/g, "");
    if (Search._index && CJK.test(whole) && known(whole)) return [whole];
    return splitWords(query).flatMap((word) => {
      if (!Search._index || !CJK.test(word) || known(word)) return [word];
      const parts = [];
      for (let start = 0, end; start < word.length; start = end) {
        for (end = word.length; end > start + 1 && !known(word.slice(start, end)); end--);
        if (end > start + 1) parts.push(word.slice(start, end));
      }
      return parts.length ? parts : [word];
    });
  };

  // A hit shows the sentence of the page's prose that holds the most query words, its mathematics typeset.
  // (Not the page's title: the hit's link shows it.)
  const BLOCKS = "p, li, dt, dd, td, th, h2, h3, h4, h5, h6, figcaption, caption";
  const SKIP = ".cell_input, .cell_output, pre, nav, .headerlink, .edition-switch, .translation-status";
  const BREAK = /(?<=[.!?])\s+(?=[A-Z(\[“"'0-9§])|(?<=[。！？])/;
  const sentences = (block) => {
    const found = [[]];
    const walk = (node) => {
      if (node.nodeType === Node.TEXT_NODE) {
        node.nodeValue.replace(/\s+/g, " ").split(BREAK).forEach((text, i) => {
          if (i > 0) found.push([]);
          found[found.length - 1].push({text});
        });
      } else if (node.nodeType === Node.ELEMENT_NODE && !node.matches(SKIP)) {
        if (node.classList.contains("math")) found[found.length - 1].push({math: node.textContent.trim()});
        else node.childNodes.forEach(walk);
      }
    };
    walk(block);
    return found.filter((pieces) => pieces.some((p) => (p.text || "").trim() || p.math));
  };
  const plain = (pieces) => pieces.map((p) => p.text || p.math).join("").toLowerCase();
  // at most about 300 characters: a window around the first match, cut at spaces, never inside mathematics
  const trim = (pieces, words) => {
    const text = plain(pieces);
    if (text.length <= 300) return pieces;
    const at = Math.max(0, ...words.map((w) => text.indexOf(w)).filter((i) => i >= 0).slice(0, 1));
    const from = Math.max(0, at - 100), to = from + 280;
    const kept = [];
    let offset = 0;
    for (const p of pieces) {
      const length = (p.text || p.math).length, start = offset;
      offset += length;
      if (p.math) { if (start >= from && offset <= to) kept.push(p); continue; }
      let text = p.text.slice(Math.max(0, from - start), Math.max(0, to - start));
      const cutWord = (i) => /\w/.test(p.text[i - 1] || "") && /\w/.test(p.text[i] || "");
      if (start < from && from < offset && cutWord(from - start)) text = text.replace(/^\S*\s?/, "");
      if (start < to && to < offset && cutWord(to - start)) text = text.replace(/\s?\S*$/, "");
      if (text) kept.push({text});
    }
    if (from > 0) kept.unshift({text: "… "});
    if (to < text.length) kept.push({text: " …"});
    return kept;
  };
  Search.makeSearchSummary = (htmlText, keywords, anchor) => {
    const page = new DOMParser().parseFromString(htmlText, "text/html");
    const main = page.querySelector('[role="main"]');
    if (!main) return null;
    let scope = (anchor && main.querySelector(anchor)) || main.querySelector("article") || main;  // not the menus
    if (scope.tagName === "DT" && scope.nextElementSibling) scope = scope.nextElementSibling;  // a term: its definition
    // Sphinx passes the query's stems ("rotari" for "rotary"), which the prose may not hold: a query word counts
    // where the text holds the word as typed or its stem.
    const stemmer = new Stemmer();
    const typed = splitQuery(new URLSearchParams(location.search).get("q") || "").filter((w) => w.trim());
    const terms = typed.length ? typed.map((w) => [w.toLowerCase(), stemmer.stemWord(w.toLowerCase())])
                               : [...keywords].map((k) => [k.toLowerCase()]);
    const words = terms.flat();
    let best = null;
    for (const block of [scope, ...scope.querySelectorAll(BLOCKS)]) {
      if (!block.matches(BLOCKS) || block.closest(SKIP) || block.querySelector(BLOCKS)) continue;
      for (const pieces of sentences(block)) {
        const text = plain(pieces), hits = terms.filter((t) => t.some((w) => text.includes(w))).length;
        if (!best || hits > best.hits) best = {hits, pieces};
      }
      if (best && best.hits === terms.length) break;
    }
    if (!best) return null;
    const summary = document.createElement("p");
    summary.classList.add("context");
    for (const p of trim(best.pieces, words)) {
      if (p.text) { summary.append(p.text); continue; }
      const math = summary.appendChild(document.createElement("span"));
      math.className = "math nohighlight";  // Sphinx's highlighting would split the TeX before MathJax reads it
      math.textContent = p.math;
    }
    summary.normalize();
    if (window.MathJax && MathJax.startup)
      setTimeout(() => MathJax.startup.promise.then(() => MathJax.typesetPromise([summary])));
    return summary;
  };
});"""


def _search_page(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """html-page-context: the search page gets ``SEARCH_JS``."""
    if pagename == "search":
        app.add_js_file(None, body=SEARCH_JS)


def setup(app: Sphinx) -> dict:
    app.add_search_language(SearchChineseTerms)
    app.connect("html-page-context", _search_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
