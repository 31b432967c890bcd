"""course_embed.tools.edition: the Chinese edition, built from the same pages and stored outputs into zh/."""

import json
import re
import subprocess
import sys

import yaml

from course_embed.tools import edition, translations

from .test_notebooks import ROOT, toc_files

CJK = re.compile(r"[\u4e00-\u9fff]")


def without_api_entries(html: str) -> str:
    """``html`` without the library reference's entries (``<dl class="py ...">``, each with its members): the
    package's docstrings, which both editions show in English."""
    kept, start, depth = [], 0, 0
    for tag in re.finditer(r"<dl\b[^>]*>|</dl>", html):
        if depth == 0 and tag.group().startswith('<dl class="py '):
            kept.append(html[start : tag.start()])
            depth = 1
        elif depth:
            depth += 1 if tag.group().startswith("<dl") else -1
            start = tag.end()
    return "".join(kept) + (html[start:] if depth == 0 else "")


def _visible_text(page: str) -> str:
    """The article's prose: without code cells, outputs, the library reference's entries, scripts and tags."""
    article = without_api_entries(page.split('<article class="bd-article">', 1)[-1].split("</article>", 1)[0])
    article = re.sub(r'<div class="cell_(?:input|output)[^"]*".*?</div>\s*</div>', " ", article, flags=re.S)
    return re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)\b.*?</\1>", " ", article, flags=re.S))


def _cells(page: str) -> list[str]:
    """The code cells and their outputs as the page shows them, alt text and image labels (which are translated) left
    out."""
    cells = re.findall(r'<div class="cell_(?:input|output)[^"]*".*?</div>\s*</div>', page, flags=re.S)
    return [re.sub(r' (?:data-alt|alt|aria-label)="[^"]*"', "", cell) for cell in cells]


def test_the_chinese_edition_builds_without_warnings(built_site):
    assert built_site.zh_returncode == 0, built_site.zh_log[-3000:]
    assert not re.search(r"WARNING|ERROR", built_site.zh_log), built_site.zh_log[-3000:]
    assert f"{sum(p.entries for p in translations.status())} entries translated" in built_site.zh_log


def test_every_page_is_in_chinese_with_the_english_code_and_outputs(built_site):
    for entry in toc_files():
        english = (built_site.html / f"{entry}.html").read_text(encoding="utf-8")
        chinese = (built_site.zh / f"{entry}.html").read_text(encoding="utf-8")
        assert '<html lang="zh-CN"' in chinese, entry
        prose = _visible_text(chinese)
        # Chinese prose: far more Chinese characters than English words (names and code terms stay in English);
        # the bibliography's entries stay as published, only its introduction is translated
        english_words = len(re.findall(r"\b[a-z]{4,}\b", prose)) if entry != "book/bibliography" else 10
        assert len(CJK.findall(prose)) > 2 * english_words, entry
        assert _cells(chinese) == _cells(english), f"{entry}: the code cells or outputs differ between editions"
        images = re.findall(r'<img[^>]+src="([^"]+\.png)"', chinese)
        assert len(images) == len(re.findall(r'<img[^>]+src="([^"]+\.png)"', english)), entry
        assert all((built_site.zh / entry).parent.joinpath(src).resolve().is_file() for src in images), entry


def test_figures_have_chinese_alt_text(built_site):
    page = (built_site.zh / "book" / "01_token_embedding.html").read_text(encoding="utf-8")
    alts = re.findall(r'<img[^>]+alt="([^"]*)"', page)
    assert alts and all(CJK.search(alt) for alt in alts), alts


def test_each_page_links_to_itself_in_the_other_edition(built_site):
    for entry in toc_files():
        english = (built_site.html / f"{entry}.html").read_text(encoding="utf-8")
        chinese = (built_site.zh / f"{entry}.html").read_text(encoding="utf-8")
        up = "../" * entry.count("/")
        assert f'href="{up}zh/{entry}.html" hreflang="zh-CN" lang="zh-CN">中文版</a>' in english, entry
        assert f'href="../{up}{entry}.html" hreflang="en" lang="en">English edition</a>' in chinese, entry


def test_each_chinese_page_says_how_much_of_it_is_translated(built_site):
    for entry in toc_files():
        state = translations.page_status(translations.CATALOGUES / f"{entry}.po", entry)
        chinese = (built_site.zh / f"{entry}.html").read_text(encoding="utf-8")
        assert f"本页译文：{state.entries} 条全部译完。" in chinese, entry


def test_the_theme_speaks_chinese(built_site):
    words = {
        "Search this book...": "搜索本书……",
        "Link to this heading": "链接到此标题",
        "Color mode": "颜色模式",
        "Show code cell source": "显示代码",
        "Click to show": "点击显示",
    }
    shown = 0
    for entry in toc_files():
        english = (built_site.html / f"{entry}.html").read_text(encoding="utf-8")
        chinese = (built_site.zh / f"{entry}.html").read_text(encoding="utf-8")
        for word, translated in words.items():
            if word in english:  # the theme's words that this page shows, each in Chinese in its Chinese edition
                assert word not in chinese and translated in chinese, (entry, word, translated)
                shown += 1
        assert ">章节<" in chinese and ">附录<" in chinese, entry
    assert shown >= 3 * len(toc_files()), shown


def test_the_search_index_has_the_glossarys_chinese_terms(built_site):
    text = (built_site.zh / "searchindex.js").read_text(encoding="utf-8")
    terms = json.loads(text[text.index("(") + 1 : text.rindex(")")])["terms"]
    for term in ("位置编码", "词元嵌入", "权重绑定", "旋转位置编码"):
        assert term in terms, term


def test_merged_overrides_key_by_key():
    base = {"title": "A", "sphinx": {"config": {"x": 1, "y": [1]}}, "html": {"a": 1}}
    over = {"title": "B", "sphinx": {"config": {"y": [2], "language": "zh_CN"}}}
    assert edition.merged(base, over) == {
        "title": "B",
        "sphinx": {"config": {"x": 1, "y": [2], "language": "zh_CN"}},
        "html": {"a": 1},
    }
    assert base["sphinx"]["config"] == {"x": 1, "y": [1]}  # not changed in place


def test_the_chinese_config_is_the_books_with_the_editions_overrides(tmp_path):
    path = edition.write_config(ROOT, tmp_path)
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    book = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert config["sphinx"]["config"]["language"] == "zh_CN"
    assert config["title"] == "Transformer 输入层"
    assert config["sphinx"]["config"]["locale_dirs"] == book["sphinx"]["config"]["locale_dirs"]
    assert config["execute"] == book["execute"] == {"execute_notebooks": "off"}  # outputs shown, not re-executed
    words = (tmp_path / "search_words.txt").read_text(encoding="utf-8").splitlines()
    assert config["sphinx"]["config"]["html_search_options"] == {"dict": str((tmp_path / "search_words.txt").resolve())}
    assert "位置编码 10 n" in words and "词元嵌入 10 n" in words


def test_the_search_keeps_the_glossarys_names_their_parts_and_the_common_terms_whole(tmp_path):
    from course_embed.tools.site_search import SearchChineseTerms, search_words

    words = search_words()
    assert {"位置编码", "旋转位置编码", "学习率", "注意力头", "动态NTK", "感知缩放"} <= set(words)
    edition.write_config(ROOT, tmp_path)
    language = SearchChineseTerms({"dict": str(tmp_path / "search_words.txt")})
    found = language.split("模型用旋转位置编码，学习率为 0.01，动态 NTK 的因子。")
    # jieba keeps 旋转位置编码 whole; the word list adds the terms inside it and those jieba would cut
    assert {"旋转位置编码", "位置编码", "学习率", "动态NTK"} <= set(found), found


def test_the_library_reference_is_in_english_in_both_editions_and_says_so(built_site):
    """The docstrings stay in English (course_embed.tools.site_editions.KeepDocstringsInEnglish): the Chinese page
    translates its own prose, which says so, and the headings of the docstrings' sections; its catalogue holds no
    docstring."""
    english = (built_site.html / "book" / "reference.html").read_text(encoding="utf-8")
    chinese = (built_site.zh / "book" / "reference.html").read_text(encoding="utf-8")
    assert "它们都保持英文" in chinese and "stay in English in both editions" in english
    for docstring in ("Token ids to vectors, optionally scaled by", "Rotates queries and keys by their positions"):
        assert docstring in english and docstring in chinese, docstring
    shapes = english.count('<p class="rubric">Shapes</p>')
    assert shapes >= 26 and chinese.count('<p class="rubric">形状</p>') == shapes
    catalogue = {m.id for m in translations.read_catalogue(translations.CATALOGUES / "book" / "reference.po") if m.id}
    assert "Shapes" in catalogue and len(catalogue) < 20, sorted(catalogue)


# A page with one docstring (autodoc, napoleon's sections), built in seconds with the book's edition extension.
SMALL_CONF = """project = "small"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "course_embed.tools.site_editions"]
napoleon_custom_sections = ["Shapes"]
locale_dirs = ["locales"]
gettext_compact = False
"""
SMALL_PO = """msgid ""
msgstr ""
"Content-Type: text/plain; charset=utf-8\\n"

msgid "The function below shares a table."
msgstr "下面的函数共用一张表。"

msgid "Shapes"
msgstr "形状"
"""


def test_docstrings_are_neither_extracted_nor_translated(tmp_path):
    """On a small site: the gettext builder extracts the page's own paragraph and the "Shapes" heading, nothing of
    the docstring; the Chinese build translates those two and shows the docstring, and its signature in order, as the
    English build does."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "conf.py").write_text(SMALL_CONF, encoding="utf-8")
    (source / "index.rst").write_text(
        "Small\n=====\n\nThe function below shares a table.\n\n.. autofunction:: course_embed.tie_weights\n",
        encoding="utf-8",
    )

    def build(builder: str, out: str, *options: str) -> None:
        command = [sys.executable, "-m", "sphinx", "-q", "-W", "-b", builder, *options, str(source)]
        built = subprocess.run([*command, str(tmp_path / out)], capture_output=True, text=True)
        assert built.returncode == 0, built.stderr[-3000:]

    build("gettext", "pot")
    extracted = {m.id for m in translations.read_catalogue(tmp_path / "pot" / "index.pot") if m.id}
    assert extracted == {"Small", "The function below shares a table.", "Shapes"}, extracted
    po = source / "locales" / "zh_CN" / "LC_MESSAGES" / "index.po"
    po.parent.mkdir(parents=True)
    po.write_text(SMALL_PO, encoding="utf-8")
    build("html", "en")
    build("html", "zh", "-D", "language=zh_CN")
    english = (tmp_path / "en" / "index.html").read_text(encoding="utf-8")
    chinese = (tmp_path / "zh" / "index.html").read_text(encoding="utf-8")
    assert "下面的函数共用一张表。" in chinese and '<p class="rubric">形状</p>' in chinese
    sentence = "After the call"
    assert sentence in english and sentence in chinese
    signature = re.search(r'<dt class="sig sig-object py".*?</dt>', chinese, re.S).group()
    text = re.sub(r"<[^>]+>", "", signature)
    assert "tie_weights(embedding: TokenEmbedding | Embedding, output: Linear)" in text, text
