"""The site's two editions, English at the root and Chinese in ``zh/`` (``course_embed.tools.edition``): what Sphinx's
translation of a page leaves to do.

A Sphinx extension, listed in ``_config.yml`` under ``sphinx.extra_extensions`` beside ``course_embed.tools.site``.

- every page links to itself in the other edition, and a translated page says how much of it is translated;
- links to a section (``page.ipynb#31-the-formula``) keep their anchors in a translation;
- the library reference's entries (``book/reference.md``: the package's docstrings, which Sphinx's autodoc turns into
  object descriptions) stay in English in both editions: they are neither extracted into the catalogues nor
  translated, so the page's own prose, which says so, is all its catalogue holds;
- the captions of the book's parts and the theme's own words that its catalogues lack (``LC_MESSAGES/theme.po``) are
  in the edition's language;
- pages read well in both scripts (``EDITION_CSS``): a wide table scrolls sideways instead of squeezing its Chinese
  to one character a line, Chinese emphasis is marked with dots under the characters (着重号), never slanted, and
  Chinese text has a font stack of its own.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.locale import init as init_locale
from sphinx.transforms import SphinxTransform
from sphinx.util.i18n import docname_to_domain


class KeepHeadingSlugs(SphinxTransform):
    """Links to a section (``page.ipynb#31-the-formula``) keep working in a translation: Sphinx parses each translated
    heading on its own, and myst-parser's parse of it replaces the page's record of heading anchors
    (``env.metadata[docname]["myst_slugs"]``) with the Chinese heading's. The record is kept before translation (20)
    and put back after it."""

    default_priority = 19

    def apply(self) -> None:
        slugs = self.env.metadata.get(self.env.docname, {}).get("myst_slugs")
        if slugs is not None:
            self.document["course_embed_slugs"] = dict(slugs)


class RestoreHeadingSlugs(SphinxTransform):
    default_priority = 21

    def apply(self) -> None:
        slugs = self.document.attributes.pop("course_embed_slugs", None)
        if slugs is not None:
            self.env.metadata[self.env.docname]["myst_slugs"] = slugs


class KeepDocstringsInEnglish(SphinxTransform):
    """Every text of an object description (``desc``: what autodoc makes of a docstring) that Sphinx would translate
    is marked untranslatable before it translates a page (20), which also keeps it out of what the gettext builder
    extracts: the docstrings are the package's own, written in English, and the Chinese edition shows them as they
    are rather than listing some two hundred entries in the catalogues that no one could keep in step with the code.

    That is every paragraph, list item and heading, and the argument descriptions, which Sphinx wraps in inline nodes
    marked translatable. Other inline nodes (a signature's parts) stay unmarked: Sphinx extracts no unmarked inline
    node, and it unwraps every marked one, moving its text to the end of its parent. The headings of napoleon's custom
    sections (``napoleon_custom_sections``: "Shapes") are translated: they are the site's words, like the
    "Parameters" and "Example" that Sphinx's own catalogue translates."""

    default_priority = 15

    def apply(self) -> None:
        sections = getattr(self.config, "napoleon_custom_sections", None) or []
        headings = {entry if isinstance(entry, str) else entry[0] for entry in sections}
        for description in self.document.findall(addnodes.desc):
            for node in description.findall(nodes.TextElement):
                if isinstance(node, nodes.rubric) and node.astext() in headings:
                    continue
                if not isinstance(node, nodes.Inline) or "translatable" in node:
                    node["translatable"] = False


_CJK = re.compile(r"[\u3400-\u9fff]")


class ChineseEmphasis(SphinxTransform):
    """Emphasis that holds Chinese gets the class ``cjk`` (after translation, 20): Chinese typography marks it with
    dots under the characters, not with slanted glyphs that no Chinese font has (``EDITION_CSS``)."""

    default_priority = 22

    def apply(self) -> None:
        for node in self.document.findall(nodes.emphasis):
            if _CJK.search(node.astext()):
                node["classes"].append("cjk")


class TranslateTocCaptions(SphinxTransform):
    """The captions of the book's parts ("Chapters", ...) in the edition's language: sphinx-external-toc inserts the
    toctrees (priority 100) after Sphinx has translated the page (20), so they are looked up here, in the root page's
    catalogue, where the gettext builder puts them."""

    default_priority = 101

    def apply(self) -> None:
        if (self.config.language or "en") == "en":
            return
        domain = docname_to_domain(self.env.docname, self.config.gettext_compact)
        dirs = [os.path.join(self.env.srcdir, folder) for folder in self.config.locale_dirs]
        catalog, found = init_locale(dirs, self.config.language, domain)
        if not found:
            return
        for toctree in self.document.findall(addnodes.toctree):
            if toctree.get("caption"):
                toctree["caption"] = catalog.gettext(toctree["caption"])


# The editions of the site: the English one at its root, the Chinese one in zh/ (course_embed.tools.edition). Each
# page links to itself in the other edition.
EDITIONS = {"en": ("zh_CN", "zh/", "中文版", "zh-CN"), "zh_CN": ("en", "", "English edition", "en")}
EDITION_FOLDER = "zh"


# In the page's <head>, both editions. Chinese can break a line after any character, so a table cell shrinks to one
# character a line where English words would make the table scroll: each cell keeps at least five characters.
EDITION_CSS = (
    ".pst-scrollable-table-container { overflow-x: auto; } "
    ":lang(zh) .bd-article td, :lang(zh) .bd-article th { min-width: 5em; } "
    "em.cjk { font-style: normal; font-synthesis: none; text-emphasis: filled dot; "
    "text-emphasis-position: under right; } "
    'html[lang="zh-CN"] { --pst-font-family-base: -apple-system, BlinkMacSystemFont, "Segoe UI", "Helvetica Neue", '
    'Arial, "PingFang SC", "Noto Sans CJK SC", "Source Han Sans SC", "Microsoft YaHei", "WenQuanYi Micro Hei", '
    "sans-serif; }"
)


def edition_switch(pagename: str, language: str) -> str:
    """The link from ``pagename`` in the ``language`` edition to the same page in the other edition."""
    other, folder, label, lang = EDITIONS[language]
    up = "../" * (pagename.count("/") + (language != "en"))
    return (
        f'<nav class="edition-switch" aria-label="{"语言" if language != "en" else "Language"}">'
        f'<a href="{up}{folder}{pagename}.html" hreflang="{lang}" lang="{lang}">{label}</a></nav>\n'
    )


def _catalogue(srcdir: Path, locale_dirs: list[str], language: str, domain: str) -> Path | None:
    """The ``.po`` file of ``domain`` (a page's name, or ``theme``) in the first of Sphinx's locale folders that has
    one, or None."""
    for folder in locale_dirs:
        po = srcdir / folder / language / "LC_MESSAGES" / f"{domain}.po"
        if po.is_file():
            return po
    return None


def translation_line(srcdir: Path, locale_dirs: list[str], language: str, docname: str) -> str:
    """The Chinese edition's line under a page: how much of it is translated (the rest shows the English text)."""
    from course_embed.tools.translations import page_status

    po = _catalogue(srcdir, locale_dirs, language, docname)
    if po is None:
        return ""
    state = page_status(po, docname)
    if state.done:
        return f'<p class="translation-status">本页译文：{state.entries} 条全部译完。</p>\n'
    return (
        f'<p class="translation-status">本页译文：已译 {state.translated} / {state.entries} 条'
        f"（{state.share:.0%}），未译的 {state.untranslated} 条与待更新的 {state.fuzzy} 条显示英文原文。</p>\n"
    )


def _edition_links(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """html-page-context: every page gets ``EDITION_CSS``; every page of the book links to itself in the other
    edition; a translated page says how much of it is translated."""
    language = app.config.language or "en"
    context["metatags"] = context.get("metatags", "") + f"\n<style>{EDITION_CSS}</style>"
    if doctree is None or "body" not in context or language not in EDITIONS:
        return
    context["body"] = edition_switch(pagename, language) + context["body"]
    if language != "en":
        context["body"] += translation_line(Path(app.srcdir), app.config.locale_dirs, language, pagename)


def theme_words(srcdir: Path, locale_dirs: list[str], language: str) -> dict[str, str]:
    """The theme's words in ``language``: ``LC_MESSAGES/theme.po`` of the first locale folder that has one."""
    from course_embed.tools.translations import read_catalogue

    po = _catalogue(srcdir, locale_dirs, language, "theme")
    return {m.id: m.string for m in read_catalogue(po) if m.id and m.string} if po else {}


def translate_theme(text: str, words: dict[str, str]) -> str:
    """``text`` (a page) with each attribute value and each element text that is exactly a key of ``words`` (around
    white space) replaced by its translation."""
    for english, translated in words.items():
        source, target = html.escape(english, quote=True), html.escape(translated, quote=True)
        attribute = rf'((?:aria-label|title|placeholder|data-tooltip)="){re.escape(source)}(")'
        keep_around = lambda m, target=target: m.group(1) + target + m.group(2)  # noqa: E731
        text = re.sub(attribute, keep_around, text)
        text = re.sub(rf"(>\s*){re.escape(source)}(\s*<)", keep_around, text)
    return text


def _translate_pages(app: Sphinx, exception: Exception | None) -> None:
    """build-finished: the theme's words in the edition's language, on every page of a translated edition."""
    language = app.config.language or "en"
    if exception is not None or app.builder.format != "html" or language == "en":
        return
    words = theme_words(Path(app.srcdir), app.config.locale_dirs, language)
    outdir = Path(app.outdir)
    for page in sorted(outdir.rglob("*.html")):
        if page.relative_to(outdir).parts[0] in {"_static", "_sources"}:
            continue
        text = page.read_text(encoding="utf-8")
        if (translated := translate_theme(text, words)) != text:
            page.write_text(translated, encoding="utf-8")


def setup(app: Sphinx) -> dict:
    app.add_transform(KeepHeadingSlugs)
    app.add_transform(KeepDocstringsInEnglish)
    app.add_transform(RestoreHeadingSlugs)
    app.add_transform(TranslateTocCaptions)
    app.add_transform(ChineseEmphasis)
    app.connect("html-page-context", _edition_links)
    app.connect("build-finished", _translate_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
