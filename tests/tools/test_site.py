"""The built site in a real browser: headless Chromium or Chrome, driven by Playwright, with the network cut off.

Every HTML page of the site, both editions (the Chinese one in ``zh/``), is served from localhost and opened once. Any
request to another host is blocked and recorded (the site must work offline); console errors and warnings, uncaught
exceptions and failed requests are recorded, and the bytes of everything the page loads (every page under 3 MB, the
search index only on the search page); then each page is checked: images loaded and described by alt text, math
typeset by MathJax without TeX errors, ipywidgets rendered from their stored state, matplotlib animations step when
their controls are used and every control's symbol is drawn by an installed font, and every internal link resolves
(the file exists and so does the #anchor on it). axe-core (fetched from npm and cached like MathJax) checks each page
for accessibility problems; then the page is laid out at a phone's width (390 px), where nothing may stick out of the
content column except inside a block that scrolls (code, outputs, tables, wide equations). A full-page screenshot of
every page at both widths is kept for a person to look at, in ``_build/screenshots/`` (``phone/`` for 390 px; or
``$COURSE_EMBED_SCREENSHOTS``). Each page declares its language (``lang="zh-CN"`` in the Chinese edition, which axe
checks too), and Chinese text is drawn with real glyphs. The search is tested in ``test_site_search.py``.

Browser: ``course_embed.tools.browser.find_browser()``: ``$COURSE_EMBED_BROWSER``, else Chromium or Chrome under its
usual name (pytest's header says which).
"""

from __future__ import annotations

import functools
import html.parser
import io
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest
from PIL import Image

from course_embed.tools import assets, browser, pdf

from .test_notebooks import ROOT, toc_files

SCREENSHOTS = Path(os.environ.get("COURSE_EMBED_SCREENSHOTS", ROOT / "_build" / "screenshots"))
WAIT_MS = 30_000
SHOT_MS = 180_000  # a full-page screenshot of a long page at 390 px can take a minute on a loaded machine
PHONE = {"width": 390, "height": 844}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
EDITIONS = ("", "zh/")  # the English site at the root, the Chinese edition in zh/ (course_embed.tools.edition)

# Runs in the page once it has loaded: waits for MathJax and the widget embedder, then reports what it sees.
INSPECT = (
    """async () => {
  const deadline = Date.now() + %d;
  const until = async (ok) => { while (!ok() && Date.now() < deadline) await new Promise(r => setTimeout(r, 50)); };
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const views = [...document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')];
  // the embedder inserts each view's widget-subarea right before the view's script tag
  const rendered = () => views.filter(v => v.previousElementSibling &&
      v.previousElementSibling.classList.contains('widget-subarea') &&
      v.previousElementSibling.querySelector('.jupyter-widgets'));
  await until(() => rendered().length === views.length);
  const images = () => [...document.images];
  await until(() => images().every(i => i.complete));
  const state = document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]');
  // Chinese text is drawn with real glyphs in the font the page's prose uses: four different characters give four
  // different images (a font without them draws the same empty box for each), none of them blank.
  const cjkGlyphs = () => {
    const prose = document.querySelector('main p') || document.body;
    const canvas = document.createElement('canvas'); canvas.width = canvas.height = 48;
    const g = canvas.getContext('2d', {willReadFrequently: true});
    g.font = '40px ' + getComputedStyle(prose).fontFamily;
    const draw = ch => { g.clearRect(0, 0, 48, 48); g.fillText(ch, 2, 40);
                         const d = g.getImageData(0, 0, 48, 48).data; return d.some(v => v) ? d.join() : ''; };
    const images = ['位', '置', '编', '码'].map(draw);
    return images.every(i => i) && new Set(images).size === 4;
  };
  const models = state ? Object.values(JSON.parse(state.textContent).state) : [];
  return {
    broken_images: images().filter(i => !(i.complete && i.naturalWidth > 0))
                           .map(i => (i.getAttribute('src') || '').slice(0, 80)),
    images: images().length,
    // alt text that says nothing: missing, empty (no English or Chinese word), or the file's name (what Sphinx
    // writes when a cell sets none)
    images_without_alt: images().filter(i => !/[a-z]{3}|[\u4e00-\u9fff]{2}/i.test(i.getAttribute('alt') || '') ||
                                             /\\.(png|jpe?g|gif|svg|webp)$/i.test(i.getAttribute('alt')))
                                .map(i => (i.getAttribute('src') || '').slice(0, 80)),
    math: document.querySelectorAll('.math').length,
    untypeset_math: [...document.querySelectorAll('.math')].filter(m => !m.querySelector('mjx-container'))
                                                           .map(m => m.textContent.slice(0, 60)),
    math_errors: [...document.querySelectorAll('mjx-merror')].map(m => m.textContent.slice(0, 60)),
    widget_views: views.length,
    rendered_widgets: rendered().length,
    stored_int_sliders: models.filter(m => m.model_name === 'IntSliderModel').map(m => String(m.state.value)),
    readouts: [...document.querySelectorAll('.widget-readout')].map(r => (r.value || r.textContent).trim()),
    animations: document.querySelectorAll('div.animation').length,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    lang: document.documentElement.lang,
    cjk_characters: ((document.querySelector('main') || document.body).innerText
                     .match(/[\u4e00-\u9fff]/g) || []).length,
    cjk_glyphs: cjkGlyphs(),
  };
}"""  # noqa: UP031 (a JavaScript template: format() would need every brace doubled)
    % WAIT_MS
)

# Steps every matplotlib to_jshtml animation on the page: a click on "Next frame", the slider to its last frame,
# then "First frame" and "Play": after 1.5 s it must have moved on. And lists the controls whose symbol no font draws.
STEP_ANIMATIONS = """async () => {
  const frame = () => new Promise(r => setTimeout(r, 100));
  await document.fonts.ready;
  // A control's symbol (its text, or an icon font's ::before) is drawn by a font that has it: its image differs from
  // what the same font draws for a code point no font has (an empty box).
  const canvas = document.createElement('canvas'); canvas.width = canvas.height = 48;
  const g = canvas.getContext('2d', {willReadFrequently: true});
  const draw = (text, font) => { g.clearRect(0, 0, 48, 48); g.font = '32px ' + font; g.fillText(text, 4, 38);
                                 const d = g.getImageData(0, 0, 48, 48).data; return d.some(v => v) ? d.join() : ''; };
  const drawn = button => {
    const icon = button.querySelector('i'), style = getComputedStyle(icon || button, icon ? '::before' : null);
    const text = icon ? style.content.replace(/^"|"$/g, '') : button.textContent.trim();
    const image = draw(text, style.fontFamily);
    return Boolean(image) && image !== draw('\\u{10FFFD}', style.fontFamily);
  };
  const results = [];
  for (const anim of document.querySelectorAll('div.animation')) {
    const img = anim.querySelector('img'), slider = anim.querySelector('input.anim-slider');
    const next = anim.querySelector('button[title="Next frame"]');
    const first = img.src;
    const result = {id: img.id, frames: slider ? Number(slider.max) + 1 : 0, first_ok: img.naturalWidth > 0};
    if (slider && next) {
      next.click(); await frame();
      const second = img.src;
      result.after_next = {value: Number(slider.value), changed: second !== first};
      slider.value = slider.max; slider.dispatchEvent(new Event('input')); slider.dispatchEvent(new Event('change'));
      await frame();
      result.after_slide = {value: Number(slider.value), changed: img.src !== second, ok: img.naturalWidth > 0};
      anim.querySelector('button[title="First frame"]').click();
      anim.querySelector('button[title="Play"]').click();
      await new Promise(r => setTimeout(r, 1500));
      anim.querySelector('button[title="Pause"]').click();
      result.plays = Number(slider.value) > 0;
    }
    result.missing_glyphs = [...anim.querySelectorAll('button')].filter(b => !drawn(b)).map(b => b.title);
    results.push(result);
  }
  return results;
}"""


# Runs axe-core (injected into the page) and returns its violations, one line per rule with the first elements.
AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                      nodes: v.nodes.length, first: v.nodes.slice(0, 3).map(n => n.target.join(' '))}));
}"""

# At the phone's width: the elements that stick out of the content column (or the window) without being inside a
# block that scrolls sideways, outermost only; and whether the page itself scrolls sideways.
OVERFLOW = """() => {
  const column = document.querySelector('.bd-article-container') || document.querySelector('main') || document.body;
  const width = document.documentElement.clientWidth;
  const right = Math.min(column.getBoundingClientRect().right, width) + 1;
  const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const inScroller = el => { for (let a = el.parentElement; a && a !== column; a = a.parentElement) {
                               if (scrolls(a)) return true; } return false; };
  const out = [...column.querySelectorAll('*')].filter(el => {
    const box = el.getBoundingClientRect();
    return box.width > 0 && box.right > right && !inScroller(el) && getComputedStyle(el).visibility !== 'hidden';
  });
  const outermost = out.filter(el => !out.includes(el.parentElement));
  const describe = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
                         [...el.classList].slice(0, 2).map(c => '.' + c).join('') + ' ' +
                         Math.round(el.getBoundingClientRect().right) + 'px';
  return {column_right: Math.round(column.getBoundingClientRect().right), window: width,
          page_scrolls_sideways: document.documentElement.scrollWidth > width + 1,
          sticking_out: outermost.slice(0, 8).map(describe)};
}"""


# At a desktop's width: the code cells and outputs whose longest line fits the chapters' limit (88 characters) but
# whose block scrolls sideways anyway; how many search boxes show; and the words of inline code in a table (a file
# name, an option) drawn on more than one line.
CODE_WIDTH = 88
DESKTOP = """(limit) => {
  const blocks = [...document.querySelectorAll('article div.highlight pre, article div.cell_output pre')];
  const longest = pre => Math.max(...pre.textContent.split('\\n').map(line => line.length));
  const fitting = blocks.filter(pre => longest(pre) <= limit);
  const shown = el => el.getBoundingClientRect().width > 0 && getComputedStyle(el).visibility !== 'hidden';
  const lines = el => new Set([...el.getClientRects()].map(r => Math.round(r.top))).size;
  const words = [...document.querySelectorAll('article table td code span.pre, article table th code span.pre')];
  return {blocks: blocks.length, fitting: fitting.length, table_code_words: words.length,
          broken_table_code: words.filter(w => lines(w) > 1).slice(0, 5).map(w => w.textContent),
          search_boxes: [...document.querySelectorAll('.search-button__button')].filter(shown).length,
          scrolling: fitting.filter(pre => pre.scrollWidth > pre.clientWidth + 1).slice(0, 5)
                            .map(pre => `${longest(pre)} characters: ${pre.scrollWidth}/${pre.clientWidth} px`)};
}"""


@dataclass
class PageReport:
    """What one page did in the browser."""

    path: str
    opened: float = field(default_factory=time.time)
    console_errors: list[str] = field(default_factory=list)
    console_warnings: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    remote_requests: list[str] = field(default_factory=list)
    seen: dict = field(default_factory=dict)
    animations: list[dict] = field(default_factory=list)
    axe: list[dict] = field(default_factory=list)
    phone: dict = field(default_factory=dict)
    desktop: dict = field(default_factory=dict)
    loaded: dict[str, int] = field(default_factory=dict)  # URL -> bytes, of everything the page loaded


class _Ids(html.parser.HTMLParser):
    """Collects the ids (and old-style ``<a name>``) of an HTML file, the targets of ``#anchor`` links."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name" if tag == "a" else None):
            if key and attrs.get(key):
                self.ids.add(attrs[key])


@functools.cache
def anchors(page: Path) -> frozenset[str]:
    parser = _Ids()
    parser.feed(page.read_text(encoding="utf-8"))
    return frozenset(parser.ids)


def broken_links(html_root: Path, base: str, links: list[str]) -> list[str]:
    """The links among ``links`` that point into the site (``base``) but at a missing file or anchor."""
    broken = []
    for link in links:
        if not link.startswith(base):
            continue  # another site, mailto:, javascript:
        parts = urlsplit(link)
        target = html_root / unquote(parts.path.lstrip("/"))
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            broken.append(f"{link} (no such file)")
        elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in anchors(target):
            broken.append(f"{link} (no #{unquote(parts.fragment)} on that page)")
    return broken


def _edition_path(path: Path) -> Path:
    """A page's path inside its edition (``zh/book/x.html`` -> ``book/x.html``)."""
    return Path(*path.parts[1:]) if path.parts[0] == EDITIONS[1].rstrip("/") else path


@pytest.fixture(scope="module")
def reports(built_site, site_url, chromium, axe_js) -> dict[str, PageReport]:
    """Open every HTML page of the site once, offline; check and screenshot it at desktop and phone widths."""
    pages = sorted(
        p.relative_to(built_site.html).as_posix()
        for p in built_site.html.rglob("*.html")
        if _edition_path(p.relative_to(built_site.html)).parts[0] not in {"_static", "_sources", "_vendor"}
    )
    (SCREENSHOTS / "phone").mkdir(parents=True, exist_ok=True)  # overwritten page by page: runs share the folder
    results = {}
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    for path in pages:
        report = results[path] = PageReport(path)
        shot = path.replace("/", "__")[:-5] + ".png"

        page = context.new_page()
        page.route("**/*", browser.offline(site_url, report.remote_requests))
        page.on(
            "console",
            lambda m, r=report: m.type in {"error", "warning"}
            and (r.console_errors if m.type == "error" else r.console_warnings).append(
                f"{m.text} ({m.location.get('url', '')}:{m.location.get('lineNumber', '')})"
            ),
        )
        page.on("pageerror", lambda e, r=report: r.console_errors.append(f"uncaught: {e}"))
        page.on("requestfailed", lambda q, r=report: r.failed_requests.append(f"{q.url}: {q.failure}"))
        page.on("response", lambda s, r=report: _record_response(r, s))
        page.goto(site_url + path, wait_until="load", timeout=WAIT_MS)
        if 'http-equiv="refresh"' in (built_site.html / path).read_text(encoding="utf-8").lower():  # index
            page.wait_for_url(lambda url, path=path: url != site_url + path, timeout=WAIT_MS)
            page.wait_for_load_state("load")
        report.seen = page.evaluate(INSPECT)
        report.desktop = page.evaluate(DESKTOP, CODE_WIDTH)
        page.screenshot(path=str(SCREENSHOTS / shot), full_page=True, timeout=SHOT_MS)
        report.animations = page.evaluate(STEP_ANIMATIONS)
        page.add_script_tag(path=str(axe_js))
        report.axe = page.evaluate(AXE_RUN)
        page.set_viewport_size(PHONE)
        page.wait_for_timeout(300)  # the theme re-lays out (and MathJax re-measures) on resize
        report.phone = page.evaluate(OVERFLOW)
        page.screenshot(path=str(SCREENSHOTS / "phone" / shot), full_page=True, timeout=SHOT_MS)
        page.close()
    context.close()
    print(f"\nscreenshots of {len(results)} pages in {SCREENSHOTS} (and {SCREENSHOTS / 'phone'})")
    print(
        "page weights (MB, everything a page loads): "
        + ", ".join(f"{path} {sum(report.loaded.values()) / 1e6:.2f}" for path, report in results.items())
    )
    for path, report in results.items():
        print(f"axe {path}: " + (", ".join(f"{v['id']} ({v['impact']}, {v['nodes']})" for v in report.axe) or "none"))
    return results


def _record_response(report: PageReport, response) -> None:
    if response.status >= 400:
        report.failed_requests.append(f"{response.url}: HTTP {response.status}")
    else:  # the local server sends each file's length; a data: URL or a cached file sends none
        report.loaded[response.url] = int(response.headers.get("content-length", 0))


def _problems(reports, check) -> dict[str, list]:
    return {path: found for path, report in reports.items() if (found := check(report))}


def _stored(kind: str) -> dict[str, int]:
    """Per chapter page, in both editions: how many widget views or to_jshtml animations its notebook stores and the
    site shows (a cell tagged ``remove-output`` or ``remove-cell`` keeps its outputs in the notebook, off the page)."""
    hidden = {"remove-output", "remove-cell"}
    counts = {}
    for entry in toc_files():
        notebook = ROOT / f"{entry}.ipynb"
        if notebook.exists():
            cells = nbformat.read(notebook, as_version=4).cells
            shown = [c for c in cells if c.cell_type == "code" and not hidden & set(c.metadata.get("tags", []))]
            outputs = [o for c in shown for o in c.outputs]
            if kind == "widgets":
                count = sum(WIDGET_VIEW in o.get("data", {}) for o in outputs)
            else:
                count = sum('<div class="animation">' in o.get("data", {}).get("text/html", "") for o in outputs)
            counts.update({f"{edition}{entry}.html": count for edition in EDITIONS})
    return counts


def test_every_toc_page_was_opened(reports):
    assert {f"{edition}{entry}.html" for edition in EDITIONS for entry in toc_files()} <= set(reports)
    assert len(reports) >= 2 * (len(toc_files()) + 2)  # and each edition's index, search and general index pages


def test_every_page_declares_its_language_and_the_chinese_pages_show_chinese_glyphs(reports):
    assert not _problems(reports, lambda r: r.seen["lang"] != ("zh-CN" if r.path.startswith("zh/") else "en"))
    chinese = {path: r for path, r in reports.items() if path.startswith("zh/")}
    assert chinese and all(r.seen["cjk_glyphs"] for r in chinese.values()), [
        path for path, r in chinese.items() if not r.seen["cjk_glyphs"]
    ]
    assert all(reports[f"zh/{entry}.html"].seen["cjk_characters"] > 50 for entry in toc_files())


def test_no_page_loads_anything_from_another_host(reports):
    assert not _problems(reports, lambda r: r.remote_requests)


def test_no_console_errors(reports):
    assert not _problems(reports, lambda r: r.console_errors)


def test_no_console_warnings(reports):
    assert not _problems(reports, lambda r: r.console_warnings)


def test_no_failed_requests(reports):
    assert not _problems(reports, lambda r: r.failed_requests)


def test_every_image_has_loaded(reports):
    assert not _problems(reports, lambda r: r.seen["broken_images"])
    with_figures = [
        reports[f"{edition}{entry}.html"]
        for edition in EDITIONS
        for entry in toc_files()
        if (ROOT / f"{entry}.ipynb").exists() and '"image/png"' in (ROOT / f"{entry}.ipynb").read_text()
    ]
    assert with_figures and all(r.seen["images"] > 0 for r in with_figures)  # the check saw the figures


def test_math_is_typeset_without_errors(reports):
    assert not _problems(reports, lambda r: r.seen["untypeset_math"] + r.seen["math_errors"])
    assert any(r.seen["math"] for r in reports.values())  # the check saw math


def test_widgets_render_their_stored_state(reports):
    def problems(report):
        seen = report.seen
        found = []
        if seen["rendered_widgets"] != seen["widget_views"]:
            found.append(f"{seen['rendered_widgets']} of {seen['widget_views']} widget views rendered")
        missing = [value for value in seen["stored_int_sliders"] if value not in seen["readouts"]]
        if seen["widget_views"] and missing:
            found.append(f"slider values {missing} stored but not shown (shown: {seen['readouts']})")
        return found

    assert not _problems(reports, problems)
    assert {page: reports[page].seen["widget_views"] for page in _stored("widgets")} == _stored("widgets")


def test_animations_step_with_their_controls(reports):
    def problems(report):
        found = []
        for anim in report.animations:
            expected_next = {"value": 1, "changed": True}
            expected_slide = {"value": anim["frames"] - 1, "changed": True, "ok": True}
            if anim["missing_glyphs"]:
                found.append(f"controls drawn as empty boxes: {anim['missing_glyphs']}")
            if not (
                anim["first_ok"]
                and anim["frames"] > 1
                and anim.get("after_next") == expected_next
                and anim.get("after_slide") == expected_slide
                and anim.get("plays")
            ):
                found.append(anim)
        return found

    assert not _problems(reports, problems)
    assert all(len(r.animations) == r.seen["animations"] for r in reports.values())
    assert {page: reports[page].seen["animations"] for page in _stored("animations")} == _stored("animations")


def test_every_internal_link_resolves(reports, built_site, site_url):
    assert not _problems(reports, lambda r: broken_links(built_site.html, site_url, r.seen["links"]))


def test_screenshots_kept_for_every_page(reports):
    for path, report in reports.items():
        shot = SCREENSHOTS / (path.replace("/", "__")[:-5] + ".png")
        assert shot.is_file() and shot.stat().st_size > 1000 and shot.stat().st_mtime >= report.opened - 1, shot


def test_every_image_has_alt_text_that_says_what_it_shows(reports):
    """Figures, animation frames and widget images alike (checked after the widgets have rendered)."""
    assert not _problems(reports, lambda r: r.seen["images_without_alt"])


def test_axe_finds_no_serious_or_critical_accessibility_violation(reports):
    assert not _problems(reports, lambda r: [v for v in r.axe if v["impact"] in {"serious", "critical"}])


def test_axe_runs_and_would_report_a_violation(site_url, chromium, axe_js):
    """The check can fail: on a page with an unlabelled image axe reports image-alt, a critical violation."""
    page = chromium.new_page()
    page.route("**/*", browser.offline(site_url, []))
    page.goto(site_url + "book/intro.html", wait_until="load", timeout=WAIT_MS)
    page.evaluate(
        "() => { const i = document.createElement('img'); i.src = 'x.png'; "
        "document.querySelector('main').appendChild(i); }"
    )
    page.add_script_tag(path=str(axe_js))
    violations = page.evaluate(AXE_RUN)
    page.close()
    assert {"id": "image-alt", "impact": "critical"}.items() <= next(
        v for v in violations if v["id"] == "image-alt"
    ).items()


def test_nothing_overflows_the_content_column_at_a_phone_width(reports):
    def problems(report):
        phone = report.phone
        found = list(phone["sticking_out"])
        if phone["page_scrolls_sideways"]:
            found.append(f"the page scrolls sideways at {phone['window']} px")
        if phone["column_right"] > phone["window"] + 1:
            found.append(f"the content column ends at {phone['column_right']} px, past the window")
        return found

    assert not _problems(reports, problems)
    for path, report in reports.items():
        shot = SCREENSHOTS / "phone" / (path.replace("/", "__")[:-5] + ".png")
        assert shot.is_file() and shot.stat().st_mtime >= report.opened - 1, shot


def test_code_fits_the_text_column_at_a_desktop_width(reports):
    chapters = {
        f"{edition}{entry}.html" for edition in EDITIONS for entry in toc_files() if (ROOT / f"{entry}.ipynb").exists()
    }
    assert not _problems({path: reports[path] for path in chapters}, lambda r: r.desktop["scrolling"])
    assert all(reports[path].desktop["fitting"] >= 5 for path in chapters)  # the check saw the code


def test_one_search_box_at_a_desktop_width(reports):
    assert not _problems(reports, lambda r: r.desktop["search_boxes"] != 1 and f"{r.desktop['search_boxes']} boxes")


def test_a_tables_file_names_and_options_stay_whole_at_a_desktop_width(reports):
    assert not _problems(reports, lambda r: r.desktop["broken_table_code"])
    assert reports["book/exercises.html"].desktop["table_code_words"] >= 6  # the check saw the exercises' files


def test_a_page_loads_the_widget_embedder_only_when_it_shows_a_widget(reports):
    def problems(report):
        embedder = [url for url in report.loaded if url.split("?")[0].endswith(("embed-amd.js", "require.js"))]
        return embedder if not report.seen["widget_views"] else []

    assert not _problems(reports, problems)


def test_only_the_search_page_loads_the_search_index(reports):
    def problems(report):
        search = [url for url in report.loaded if url.split("?")[0].endswith(("searchindex.js", "searchtools.js"))]
        return [] if report.path.endswith("search.html") else search

    assert not _problems(reports, problems)
    assert all(
        any(url.split("?")[0].endswith("searchindex.js") for url in reports[f"{edition}search.html"].loaded)
        for edition in EDITIONS
    )


# Everything a page loads, uncompressed: the theme, MathJax (1.2 MB, on every page: titles with mathematics are in
# every page's navigation), the page and its figures.
MOST_MB = 3.0


def test_every_page_weighs_under_3_mb(reports):
    weights = {path: round(sum(r.loaded.values()) / 1e6, 2) for path, r in reports.items()}
    assert all(weight > 0.1 for weight in weights.values()), weights  # the weights were recorded
    assert not {path: weight for path, weight in weights.items() if weight >= MOST_MB}


def test_the_pdf_is_linked_from_the_site(built_site, reports, site_url):
    assert built_site.pdf_returncode == 0, built_site.pdf_log[-3000:]
    assert built_site.zh_pdf_returncode == 0, built_site.zh_pdf_log[-3000:]
    for edition in EDITIONS:
        linked = [path for path, r in reports.items() if f"{site_url}{edition}{pdf.PDF_NAME}" in r.seen["links"]]
        assert f"{edition}book/pdf.html" in linked


def test_the_figures_are_served_as_small_as_they_look(built_site):
    """Every figure of both editions is a palette PNG or one that ``assets.smaller_png`` cannot make smaller."""
    figures = sorted(built_site.html.glob("_images/*.png")) + sorted(built_site.zh.glob("_images/*.png"))
    assert len(figures) > 20
    left = []
    for figure in figures:
        data = figure.read_bytes()
        if Image.open(io.BytesIO(data)).mode != "P" and assets.smaller_png(data) is not data:
            left.append(figure.name)
    assert not left
