"""Make the built site work offline: MathJax, the widget embedder and icon fonts are served from the site itself.

A Sphinx extension, listed in ``_config.yml`` under ``sphinx.extra_extensions``. At build time it takes each package in
``PACKAGES`` from the npm registry with ``npm pack``, checks the tarball against the integrity hash pinned here, unpacks
it into a cache outside the repository (``asset_cache()``; later builds reuse it), and copies the files the site needs
into ``_vendor/`` of the HTML output (outside ``_static/``, whose files Jupyter Book would load on every page). Then it
points Sphinx's MathJax and myst-nb's ipywidgets embedder at those copies, rewrites the icon stylesheet that
matplotlib's ``to_jshtml`` animations link from a CDN, and fails the build (a warning under ``-W``) if any page still
loads a script, style, font or image from another host. Nothing is committed but the table below.

It also keeps the site honest, accessible and light: the launch buttons (Binder, Colab) are dropped unless
``repository.url`` in ``_config.yml`` names a real repository; the frames of matplotlib animations get the alt text of
their cell (``{"mystnb": {"image": {"alt": ...}}}``, the key myst-nb reads for figures) and their slider a label; a
page loads the widget embedder only if it shows a widget, and the search index only on the search page; figures and
animation frames are stored as palette PNGs where that looks the same (``assets.smaller_png``).

    cache: $COURSE_EMBED_ASSET_CACHE, else $XDG_CACHE_HOME/course_embed/site-assets, else ~/.cache/course_embed/...
    output: _build/html/_vendor/<package>-<version>/...
"""

from __future__ import annotations

import base64
import html
import os
import posixpath
import re
from html.parser import HTMLParser
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from sphinx.util import logging
from sphinx.util.osutil import relative_uri

from .assets import LOCAL_COPIES, MATHJAX_JS, PACKAGES, VENDOR, WIDGET_JS, copy_package, fetch, smaller_png
from .site_editions import EDITION_FOLDER

logger = logging.getLogger(__name__)


def _use_local_copies(app: Sphinx, config) -> None:
    """config-inited: point MathJax and the widget embedder at ``_vendor/`` (paths are relative to ``_static/``);
    without a repository URL, drop the launch buttons (they would open a notebook from nowhere); with one, every
    page shows the repository button too, so that a reader finds where the course lives."""
    config.mathjax_path = "../" + MATHJAX_JS
    config.nb_ipywidgets_js = {"../" + path: {} for path in WIDGET_JS}
    theme = config.html_theme_options
    if not (theme.get("repository_url") or "").strip():
        for key in ("launch_buttons", "repository_url", "repository_branch"):
            theme.pop(key, None)
    else:
        theme["use_repository_button"] = True


def _vendor_assets(app: Sphinx) -> None:
    """builder-inited: fetch (or reuse) every package and copy its files into the HTML output."""
    if app.builder.format != "html":
        return
    for package in PACKAGES.values():
        copy_package(package, fetch(package), Path(app.outdir))


class cell_alt(nodes.Element, addnodes.translatable):
    """The alt text of a notebook cell's figure (``{"mystnb": {"image": {"alt": ...}}}``), as a node that Sphinx's
    translation finds: the Chinese edition translates it, also for figures that are not images (an animation's
    frames, a widget's plots). Invisible: ``_cell_alt`` reads it."""

    def preserve_original_messages(self) -> None:
        self.setdefault("original_alt", self["alt"])

    def apply_translated_message(self, original_message: str, translated_message: str) -> None:
        if original_message == self["original_alt"]:
            self["alt"] = translated_message

    def extract_original_messages(self) -> list[str]:
        return [self["original_alt"]]


class CellAltText(SphinxTransform):
    """Give every code cell with alt text in its metadata a ``cell_alt`` node (before translation, priority 20)."""

    default_priority = 5

    def apply(self) -> None:
        for cell in self.document.findall(nodes.Element):
            if cell.get("nb_element") != "cell_code":
                continue
            alt = str(cell.get("cell_metadata", {}).get("mystnb", {}).get("image", {}).get("alt", "")).strip()
            if alt:
                node = cell_alt(alt=alt, original_alt=alt)
                node.source, node.line = cell.source, cell.line
                cell.append(node)


def _skip(self, node: nodes.Node) -> None:
    raise nodes.SkipNode


def _cell_alt(node: nodes.Node) -> str:
    """The alt text of the notebook cell that ``node`` is an output of, in the edition's language ("" if none)."""
    while node is not None and not (isinstance(node, nodes.Element) and node.get("nb_element") == "cell_code"):
        node = node.parent
    found = next(iter(node.findall(cell_alt)), None) if node is not None else None
    return found["alt"] if found is not None else ""


def label_animation(text: str, alt: str) -> str:
    """A matplotlib ``to_jshtml`` animation's HTML with ``alt`` on its frame image and a label on its slider. Where the
    output already describes its frames (an ``alt`` that an ``aria-label`` may repeat), the cell's alt text replaces
    that description: in a translated edition it is the translated one."""
    frame = re.search(r'<img\b[^>]*\bid="_anim_img[^>]*>', text)
    own = re.search(r'\balt="([^"]*)"', frame.group(0)) if frame else None
    if alt and own:
        text = text.replace(f'="{own.group(1)}"', f'="{html.escape(alt)}"')
    elif alt:
        text = re.sub(
            r'<img id="_anim_img(?![^>]*\balt=)', lambda m: f'<img alt="{html.escape(alt)}" id="_anim_img', text
        )
    return re.sub(r'<input id="_anim_slider(?![^>]*aria-label)', '<input aria-label="Frame" id="_anim_slider', text)


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"  # the script tag of a widget's output on a page
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"  # the script tag of a notebook's stored widget state


# A PNG inlined in an output (an animation's frames, in a JavaScript string whose lines end with a backslash).
INLINE_PNG = re.compile(r"data:image/png;base64,((?:[A-Za-z0-9+/=]|\\\n)+)")


def smaller_inline_pngs(text: str) -> str:
    """``text`` with every PNG inlined as base64 (``INLINE_PNG``) made smaller by ``assets.smaller_png``."""

    def smaller(match: re.Match) -> str:
        data = base64.b64decode(match.group(1).replace("\\\n", ""))
        better = smaller_png(data)
        return match.group(0) if better is data else "data:image/png;base64," + base64.b64encode(better).decode()

    return INLINE_PNG.sub(smaller, text)


def _localise_outputs(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """doctree-resolved: in raw HTML (notebook outputs), replace links to CDN files with links to the local copies,
    label animations and make their frames smaller."""
    if app.builder.format != "html":
        return
    page = app.builder.get_target_uri(docname)
    for node in doctree.findall(nodes.raw):
        if "html" not in node.get("format", "").split():
            continue
        text = node.astext()
        for remote, local in LOCAL_COPIES.items():
            text = text.replace(remote, relative_uri(page, local))
        if '<div class="animation">' in text:
            text = smaller_inline_pngs(label_animation(text, _cell_alt(node)))
        view = f'<script type="{WIDGET_VIEW}"'
        if (alt := _cell_alt(node)) and view + ">" in text:
            text = text.replace(view + ">", f'{view} data-alt="{html.escape(alt)}">')
        if text != node.astext():
            node.replace(node[0], nodes.Text(text))


# ipywidgets 8 typesets widget labels with MathJax 2's ``MathJax.Hub.Queue``, which MathJax 3 does not have (a
# TypeError on every page with both). This adapter queues the element for MathJax 3, before and after MathJax loads.
MATHJAX2_HUB_ADAPTER = """(function () {
  var pending = [];
  var hub = {Queue: function (job) {
    var element = job && job[2];
    if (!element) return;
    if (window.MathJax && window.MathJax.typesetPromise) {
      window.MathJax.startup.promise.then(function () { return window.MathJax.typesetPromise([element]); });
    } else {
      pending.push(element);
    }
  }};
  var config = window.MathJax = window.MathJax || {};
  config.Hub = hub;
  var startup = config.startup = config.startup || {};
  var ready = startup.ready;
  startup.ready = function () {
    if (ready) { ready(); } else { window.MathJax.startup.defaultReady(); }
    window.MathJax.Hub = hub;
    window.MathJax.startup.promise.then(function () { return window.MathJax.typesetPromise(pending.splice(0)); });
  };
})();"""


# Scripts that a page loads only where it uses them (``_fix_page_scripts``).
TABS_JS, THEBE_JS = "_static/design-tabs.js", "_static/sphinx-thebe.js"


def _fix_page_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """html-page-context, after MathJax and myst-nb have added their scripts to the page.

    - ``_static/../_vendor/x`` (Sphinx puts local scripts under ``_static/``) becomes ``_vendor/x``;
    - inline scripts registered after the builder started are listed twice by Sphinx 7.4 (once with filename
      ``None``, once ``''``): a second ``const THEBE_JS_URL`` is a SyntaxError in the console of every page, so
      duplicates are dropped;
    - a page that shows no widget (a notebook can store widget state for outputs the page removes) loads neither
      the widget state nor the embedder (3.6 MB) nor require.js;
    - on pages with widgets, require.js learns where the embedder's own files are (it would look for its fonts
      beside the page), and MathJax gets the ``Hub.Queue`` adapter above;
    - sphinx-design's tab script goes from a page without tab sets, and sphinx-thebe's script and settings from
      every page unless the launch buttons turn thebe on (nothing else calls them).
    """
    scripts = context.get("script_files")
    if not scripts:
        return
    body = context.get("body", "")
    shows_widgets = WIDGET_VIEW in body
    unused = set() if "sd-tab-set" in body else {TABS_JS}
    if not (app.config.html_theme_options.get("launch_buttons") or {}).get("thebe"):
        unused.add(THEBE_JS)
    fixed, seen = [], set()
    for script in scripts:
        if not shows_widgets and (
            posixpath.normpath(os.fspath(script.filename or "")) in WIDGET_JS
            or script.attributes.get("type") == WIDGET_STATE
        ):
            continue
        name = os.fspath(script.filename or "")
        if name in unused or (THEBE_JS in unused and "THEBE_JS_URL" in str(script.attributes.get("body", ""))):
            continue
        if name.startswith("_static/../"):
            script = type(script)(posixpath.normpath(name), priority=script.priority, **script.attributes)
        key = (os.fspath(script.filename or ""), script.priority, tuple(sorted(script.attributes.items())))
        if key in seen:
            continue
        seen.add(key)
        if os.fspath(script.filename or "") == WIDGET_JS[1]:
            page = app.builder.get_target_uri(pagename)
            dist = relative_uri(page, posixpath.dirname(WIDGET_JS[1]))
            body = f'require.config({{paths: {{"@jupyter-widgets/html-manager/dist": "{dist}"}}}});'
            if any(os.fspath(s.filename or "") == "_static/../" + MATHJAX_JS for s in scripts):
                body += "\n" + MATHJAX2_HUB_ADAPTER
            body += "\n" + WIDGET_LABELS
            fixed.append(type(script)(None, priority=script.priority, body=body))
        fixed.append(script)
    scripts[:] = fixed


# At a phone's width nothing sticks out of the text column: wide inline math scrolls sideways (the theme cuts it
# off; display math already scrolls), long inline code, a reference's long words (file and function names), the
# library reference's signatures, the general index's long names and the next/previous chapter titles wrap. In a
# table on screen, inline code wraps only between its words: a file name or an option stays whole (a word that may
# break anywhere lets the table squeeze its column until every name is cut into pieces; a table too wide for a phone
# scrolls instead; the PDF has its own rule, pdf_book.BOOK_CSS). On a desktop, code and its output are set a little
# smaller, so that a chapter's 88-character lines fit the text column (about 690 px at 1280 px) without scrolling;
# and the header band goes, which held only a second search box beside the sidebar's (on a phone, where the sidebar
# folds away, the header and its search stay).
SITE_CSS = (
    "span.math { overflow-x: auto; overflow-y: hidden; } span.math > mjx-container { flex-shrink: 0; } "
    "code.docutils.literal, code.docutils.literal span.pre { white-space: pre-wrap; overflow-wrap: anywhere; } "
    "@media screen { td code.docutils.literal span.pre, th code.docutils.literal span.pre { white-space: nowrap; } } "
    "div.citation { overflow-wrap: anywhere; } "
    "dt.sig, dt.sig span.pre { white-space: pre-wrap; overflow-wrap: anywhere; } "
    "table.indextable, table.indextable a { overflow-wrap: anywhere; } "
    ".prev-next-area a, .prev-next-info { min-width: 0; } .prev-next-title { overflow-wrap: anywhere; } "
    "@media (min-width: 960px) { div.highlight pre, div.cell_output pre { font-size: 0.75rem; } "
    ".bd-header { display: none; } :root { --pst-header-height: 0px; } } "
    ".edition-switch { text-align: right; font-size: 0.9em; } .translation-status { font-size: 0.85em; } "
    "@media print { .edition-switch, .translation-status { display: none; } } "
    ".math-tail { display: inline-flex; align-items: baseline; max-width: 100%; white-space: nowrap; }"
)

# On pages with widgets: each slider handle is named by its widget's description (axe: aria-input-field-name), and
# images a widget draws get the alt text of their cell (``data-alt`` on the view's script tag, see _localise_outputs).
WIDGET_LABELS = """new MutationObserver(function () {
  document.querySelectorAll('.widget-slider .noUi-handle:not([aria-label])').forEach(function (handle) {
    var label = handle.closest('.widget-slider').querySelector('.widget-label');
    if (label && label.textContent.trim()) handle.setAttribute('aria-label', label.textContent.trim());
  });
  document.querySelectorAll('script[data-alt]').forEach(function (view) {
    var area = view.previousElementSibling;
    if (area) area.querySelectorAll('img:not([alt])').forEach(function (img) { img.alt = view.dataset.alt; });
  });
}).observe(document.documentElement, {childList: true, subtree: true});"""


# Inline mathematics followed at once by punctuation (English or Chinese), not already kept together.
MATH_TAIL = re.compile(
    r'(?<!<span class="math-tail">)(<span class="math notranslate nohighlight">[^<]*</span>[.,;:!?)\]\u3001\u3002\uff0c'
    r"\uff1a\uff1b\uff09\uff01\uff1f]+)"
)


def accessible_page(text: str) -> str:
    """The theme's markup of a built page, fixed where axe-core finds serious problems, plus ``SITE_CSS``.

    - the search button is named by its visible text ("Search Ctrl+K"), not a label that leaves part of it out;
    - the colour-mode button keeps its name ("Color mode") and loses its icons' titles, which were visible text
      missing from that name (both: label-content-name-mismatch);
    - Sphinx's citation list holds list items, not the deprecated ``doc-biblioentry`` (aria-required-children);
    - a collapsed cell's toggle (myst-nb's ``hide-input``/``hide-output``) is named by its visible text ("Show code
      cell output"), not "Toggle hidden content" (label-content-name-mismatch);
    - the theme's Font Awesome script goes: 1.5 MB on every page, there for custom icons, which the site has none
      of; the theme's stylesheet draws its own icons with the Font Awesome web fonts;
    - inline mathematics and the punctuation right after it are kept on one line (``MATH_TAIL``): the browser may
      break a line after the math's box, which left a lone ". (This" at the start of a line; a formula wider than
      the column still scrolls in its own box, with the punctuation beside it.
    """
    text = MATH_TAIL.sub(r'<span class="math-tail">\1</span>', text)
    text = re.sub(r'(<button class="[^"]*\bsearch-button__button\b[^"]*"[^>]*?) aria-label="[^"]*"', r"\1", text)
    text = text.replace('<summary aria-label="Toggle hidden content">', "<summary>")
    text = re.sub(r'(<i class="theme-switch [^"]*"[^>]*?)\s+title="[^"]*"', r"\1", text)
    text = text.replace('role="doc-biblioentry"', 'role="listitem"')
    text = re.sub(r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>', "", text)
    if SITE_CSS not in text:
        text = text.replace("</head>", f"<style>{SITE_CSS}</style>\n</head>", 1)
    return text


class _RemoteLoads(HTMLParser):
    """Collects the URLs of scripts, styles, fonts, images and frames that a page loads from another host."""

    LOADS = {
        "script": "src",
        "img": "src",
        "iframe": "src",
        "source": "src",
        "audio": "src",
        "video": "src",
        "embed": "src",
        "object": "data",
        "link": "href",
    }
    LINK_RELS_THAT_LOAD = {
        "stylesheet",
        "preload",
        "modulepreload",
        "prefetch",
        "preconnect",
        "dns-prefetch",
        "icon",
        "manifest",
    }

    def __init__(self):
        super().__init__()
        self.remote: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        url = attrs.get(self.LOADS.get(tag, ""), "") or ""
        if tag == "link" and not self.LINK_RELS_THAT_LOAD & set((attrs.get("rel") or "").lower().split()):
            return
        if url.startswith(("http://", "https://", "//")):
            self.remote.append(f"<{tag}> {url}")


def remote_loads(html: str) -> list[str]:
    """What an HTML page loads from other hosts (links to other sites are fine and not listed)."""
    parser = _RemoteLoads()
    parser.feed(html)
    return parser.remote


# The theme loads Sphinx's search scripts and the whole search index (120 kB, 210 kB in Chinese) on every page, for a
# search-as-you-type the site does not turn on; the search box sends its query to the search page, which loads them.
SEARCH_SCRIPTS = re.compile(
    r'[ \t]*<script src="[^"]*(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js)"></script>\n?'
)


def without_search_scripts(text: str) -> str:
    """A page (other than the search page) without ``SEARCH_SCRIPTS``."""
    return SEARCH_SCRIPTS.sub("", text)


def optimise_images(outdir: Path) -> tuple[int, int]:
    """Make the figures in ``outdir/_images`` smaller (``assets.smaller_png``); returns the bytes before and after."""
    before = after = 0
    for path in sorted((outdir / "_images").glob("*.png")):
        data = path.read_bytes()
        better = smaller_png(data)
        if better is not data:
            path.write_bytes(better)
        before, after = before + len(data), after + len(better)
    return before, after


def _finish_pages(app: Sphinx, exception: Exception | None) -> None:
    """build-finished: fix every page's markup (``accessible_page``; the search scripts only on the search page),
    make the figures smaller, and warn (an error under ``-W``) for every page that loads something from another
    host."""
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    before, after = optimise_images(outdir)
    if before:
        logger.info(f"figures: {before / 1e6:.2f} MB made {after / 1e6:.2f} MB (palette PNGs where they look the same)")
    for page in sorted(outdir.rglob("*.html")):
        relative = page.relative_to(outdir)
        if relative.parts[0] in {
            "_static",
            "_sources",
            VENDOR,
            EDITION_FOLDER,
        }:  # the Chinese edition is built on its own
            continue
        text = page.read_text(encoding="utf-8")
        fixed = accessible_page(text)
        if relative != Path("search.html"):
            fixed = without_search_scripts(fixed)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")
        for load in remote_loads(fixed):
            logger.warning(
                f"{relative} loads {load} from another host; the site must work offline: serve it "
                "from the site (see course_embed/tools/site.py)",
                type="course_embed",
                subtype="offline",
            )


def setup(app: Sphinx) -> dict:
    # MathJax on every page, not only on pages with equations of their own: chapter titles with math appear in the
    # navigation of every page, and would show raw TeX on the others.
    app.set_html_assets_policy("always")
    app.add_node(cell_alt, **{writer: (_skip, None) for writer in ("html", "latex", "text", "man", "texinfo")})
    app.add_transform(CellAltText)
    app.connect("config-inited", _use_local_copies)
    app.connect("builder-inited", _vendor_assets)
    app.connect("doctree-resolved", _localise_outputs)
    app.connect("html-page-context", _fix_page_scripts, priority=900)
    app.connect("build-finished", _finish_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
