"""The book as one PDF, printed offline from the built site: a title page, the book's contents, page numbers,
a bookmark for every section, and every line of code whole.

The headless browser (``course_embed.tools.browser``) opens each page listed in ``_toc.yml``, in the book's order,
from a local server with every other host blocked, and takes its article once MathJax has typeset it and the images
have loaded (``pdf_book.CAPTURE``). The articles are put together into one document on the first page (a title page,
the contents, then each page of the site as a chapter that starts on a new page) and printed once by Chromium, which
numbers the pages in the footer and makes a bookmark of every heading. Code and output lines longer than the printed
line are wrapped with a continuation mark (``WRAP_MARK``) rather than cut. The contents' page numbers are read from
that print's bookmarks, and the book is printed again with them. The PDF lands in the HTML folder,
``_build/html/transformer-input-layers.pdf``, where ``book/pdf.md`` links to it.

    python3 -m course_embed.tools.pdf [HTML_FOLDER] [--config CONFIG]   # default: _build/html, _config.yml

The Chinese edition's PDF is printed the same way from ``_build/html/zh`` (``--config locales/zh_CN/_config.yml``
gives its title, author and the words of its front matter).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import html as html_text
import io
import logging
import sys
from pathlib import Path

import yaml

from course_embed.tools import browser
from course_embed.tools.pdf_book import ASSEMBLE, BOOK_CSS, CAPTURE, FOOTER, READY, WRAP, WRAP_MARK

ROOT = Path(__file__).resolve().parents[2]
PDF_NAME = "transformer-input-layers.pdf"
# Pages of the site that are not part of the printed book (the page that links to the PDF itself).
NOT_PRINTED = {"book/pdf"}
WAIT_MS = 30_000
PRINT_MS = 600_000  # printing the whole book at once takes a minute or two on a loaded machine
# A4 with room for the page number; the printed line is the page's width less the side margins, in CSS pixels.
MARGIN_MM = {"top": 15, "bottom": 18, "left": 16, "right": 16}
LINE_PX = round((210 - MARGIN_MM["left"] - MARGIN_MM["right"]) / 25.4 * 96)
# The front matter's own words, by the edition's language (Sphinx's ``language``).
WORDS = {"en": {"contents": "Contents"}, "zh_CN": {"contents": "目录"}}

__all__ = ["PDF_NAME", "WRAP_MARK", "build_pdf", "clone", "toc_pages"]


def toc_pages(toc: Path = ROOT / "_toc.yml") -> list[str]:
    """The pages of the book in reading order (``book/intro``, the chapters, ...), without ``NOT_PRINTED``."""
    data = yaml.safe_load(toc.read_text())
    entries = [data["root"]]

    def walk(items):
        for item in items or []:
            if "file" in item:
                entries.append(item["file"])
            walk(item.get("sections"))

    for part in data.get("parts", [{"chapters": data.get("chapters")}]):
        walk(part.get("chapters"))
    return [
        entry.removesuffix(".md").removesuffix(".ipynb")
        for entry in entries
        if entry.removesuffix(".md").removesuffix(".ipynb") not in NOT_PRINTED
    ]


def anchor(page: str) -> str:
    """The id of a site page's chapter in the book (``book/03_sinusoidal`` -> ``book-03_sinusoidal``)."""
    return page.replace("/", "-")


def front_matter(config: dict, chapters: list[dict], pages: dict[str, int] | None = None) -> str:
    """The title page and the book's contents (each page's title and its sections), as HTML.

    ``chapters`` are ``CAPTURE``'s results; ``pages`` maps an entry's id to its page number (blank before the first
    print). The numbers sit in a fixed-width column, so filling them in moves nothing. Every heading that gets a
    bookmark is also the target of an empty link on the title page, so that Chromium gives it a named destination.
    """
    words = WORDS.get(str(config.get("sphinx", {}).get("config", {}).get("language", "en")), WORDS["en"])
    pages = pages or {}

    def entry(level: int, target: str, title_html: str) -> str:
        return (
            f'<li class="toc-{level}"><a href="#{target}"><span class="toc-title">{title_html}</span>'
            f'<span class="toc-page">{pages.get(target, "")}</span></a>'
        )

    items = []
    for chapter in chapters:
        sections = "".join(entry(2, s["id"], s["html"]) + "</li>" for s in chapter["sections"])
        items.append(entry(1, chapter["id"], chapter["title_html"]) + (f"<ol>{sections}</ol>" if sections else ""))
    targets = "".join(f'<a href="#{h["id"]}"></a>' for chapter in chapters for h in chapter["outline"])
    title, author, year = (html_text.escape(str(config.get(key, ""))) for key in ("title", "author", "copyright"))
    return (
        f'<div class="book-title-page"><p class="book-title">{title}</p><p class="book-author">{author}</p>'
        f'<p class="book-year">{year}</p><div class="book-targets" aria-hidden="true">{targets}</div></div>'
        f'<nav class="book-contents"><h1 id="book-contents">{words["contents"]}</h1>'
        f"<ol>{'</li>'.join(items)}</li></ol></nav>"
    )


def destinations(reader) -> dict[str, tuple[int, float]]:
    """A printed book's named destinations (the ids that links point at) as id -> (page index, top in points)."""
    return {
        str(name).lstrip("/"): (reader.get_destination_page_number(dest), float(dest.get("/Top") or 0))
        for name, dest in reader.named_destinations.items()
    }


def with_outline(data: bytes, chapters: list[dict], title: str) -> bytes:
    """The printed book with a bookmark for every page of the site and every section in it (headings 1 to 3,
    nested), each pointing at its heading, and the book's title."""
    from pypdf import PdfReader
    from pypdf.generic import Fit

    reader = PdfReader(io.BytesIO(data))
    where = destinations(reader)
    writer = clone(reader)
    for chapter in chapters:
        parents: dict[int, object] = {}
        for heading in chapter["outline"]:
            if heading["id"] not in where:
                raise RuntimeError(f"the printed book has no destination #{heading['id']} ({heading['text']!r})")
            page, top = where[heading["id"]]
            parent = next((parents[level] for level in range(heading["level"] - 1, 0, -1) if level in parents), None)
            parents[heading["level"]] = writer.add_outline_item(
                title=heading["text"], page_number=page, parent=parent, fit=Fit.xyz(top=top)
            )
            parents = {level: item for level, item in parents.items() if level <= heading["level"]}
    writer.add_metadata({"/Title": title, "/Creator": "course_embed.tools.pdf"})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _stream_copies(pdf, last: int) -> int:
    """How many of the objects 1 to ``last`` of ``pdf`` (a reader or a writer) are streams that repeat an earlier
    one byte for byte (dictionary and data)."""
    from pypdf.generic import StreamObject

    seen: collections.Counter = collections.Counter()
    for number in range(1, last + 1):
        try:
            found = pdf.get_object(number)
        except Exception:  # a free or missing object number
            continue
        if isinstance(found, StreamObject):
            entries = sorted((str(key), repr(value)) for key, value in found.items() if key != "/Length")
            seen[hashlib.sha256(repr(entries).encode() + found._data).digest()] += 1
    return sum(count - 1 for count in seen.values())


def clone(reader):
    """A ``PdfWriter`` holding a copy of ``reader``'s document, without pypdf's warning about its own copies.

    Chromium's PDF shares one ICC colour profile among its images (each image's ``/ColorSpace`` is the array
    ``[/ICCBased ref]``), and pypdf's clone copies a stream that an array refers to once per array
    (``ArrayObject.clone`` clones it with ``force_duplicate=True``). The copy is a valid PDF with a few extra profile
    streams, and pypdf warns "Object count N exceeds defined trailer size M". That warning is held back when such
    copies are what takes the count past the reader's objects, and passed on otherwise.
    """
    from pypdf import PdfWriter

    held: list[logging.LogRecord] = []

    class Hold(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if str(record.msg).startswith("Object count"):
                held.append(record)
                return False
            return True

    log, hold = logging.getLogger("pypdf._writer"), Hold()
    log.addFilter(hold)
    try:
        writer = PdfWriter(clone_from=reader)
    finally:
        log.removeFilter(hold)
    for record in held:
        counts = record.args if isinstance(record.args, dict) else {}
        size, count = int(counts.get("trailer_size", 0)), int(counts.get("object_count", 0))
        # the reader holds objects 1 to size - 1; the copy, as many but for the extra copies of shared streams
        if not count or count - (_stream_copies(writer, count) - _stream_copies(reader, size - 1)) > size - 1:
            log.handle(record)
    return writer


def _print(page) -> bytes:
    return page.pdf(
        format="A4",
        print_background=True,
        display_header_footer=True,
        header_template="<span></span>",
        footer_template=FOOTER,
        margin={side: f"{mm}mm" for side, mm in MARGIN_MM.items()},
        tagged=True,
    )


def build_pdf(
    html: Path,
    pages: list[str] | None = None,
    out: Path | None = None,
    config: dict | None = None,
    progress=None,
) -> Path:
    """Print ``pages`` (default: ``toc_pages()``) of the site in ``html`` as one book in ``out``.

    ``config`` (default: ``_config.yml``'s) gives the title page and the PDF's title; ``progress`` (a callable taking
    one line) hears of each step. Returns the PDF's path (default ``html / PDF_NAME``). Raises ``RuntimeError``
    naming a page that is missing or that loads something from another host (the PDF is built offline), and
    ``browser.BrowserNotFound``.
    """
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader

    pages = toc_pages() if pages is None else pages
    out = html / PDF_NAME if out is None else out
    config = _config() if config is None else config
    progress = progress or (lambda line: None)
    missing = [page for page in pages if not (html / f"{page}.html").is_file()]
    if missing:
        raise RuntimeError(
            f"cannot print the book: no {', '.join(f'{p}.html' for p in missing)} in {html}; "
            "build the site first (python3 -m course_embed.tools.build)"
        )
    book = {f"/{page}.html": anchor(page) for page in pages}
    title = str(config.get("title", ""))
    executable = browser.find_browser()
    with browser.serve(html) as site, sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(executable), args=browser.ARGS)
        context = chromium.new_context(viewport={"width": LINE_PX, "height": 900})
        chapters, styles = [], {}
        for number, path in enumerate(pages, 1):
            progress(f"reading {path}.html ({number}/{len(pages)})")
            tab = _open(context, site, path)
            chapter = tab.evaluate(CAPTURE, {"id": anchor(path), "book": book})
            tab.close()
            styles.update(dict.fromkeys(chapter.pop("styles")))
            chapters.append(chapter)
        progress("laying out the book")
        page = _open(context, site, pages[0])
        page.emulate_media(media="print")
        body = "".join(f'<section class="book-page" id="{c["id"]}">{c["html"]}</section>' for c in chapters)
        css = BOOK_CSS + "\n".join(styles)
        page.evaluate(ASSEMBLE, {"front": front_matter(config, chapters), "body": body, "title": title, "css": css})
        progress(f"printing ({page.evaluate(WRAP, WRAP_MARK)} long lines wrapped)")
        numbers: dict[str, int] = {}
        for _ in range(3):  # the numbers take no room, so the second print is the last; the third is a safety net
            data = _print(page)
            found = {target: at[0] + 1 for target, at in destinations(PdfReader(io.BytesIO(data))).items()}
            if numbers and all(found.get(t) == n for t, n in numbers.items()):
                break
            numbers = {h["id"]: found.get(h["id"], "") for c in chapters for h in c["outline"] if h["level"] <= 2}
            contents = front_matter(config, chapters, numbers)
            page.evaluate(
                "html => { document.querySelector('nav.book-contents').outerHTML = html; }",
                contents[contents.index('<nav class="book-contents">') :],
            )
            progress("printing again with the contents' page numbers")
        chromium.close()
    out.write_bytes(with_outline(data, chapters, title))
    return out


def _open(context, site: str, path: str):
    """A page of the site, opened offline and typeset; raises ``RuntimeError`` if it reached for another host."""
    blocked: list[str] = []
    tab = context.new_page()
    tab.route("**/*", browser.offline(site, blocked))
    tab.goto(f"{site}{path}.html", wait_until="load", timeout=WAIT_MS)
    tab.set_default_timeout(PRINT_MS)
    tab.evaluate(READY % WAIT_MS)
    if blocked:
        raise RuntimeError(f"{path}.html loads {blocked[0]} from another host; the PDF is built offline")
    return tab


def _config(path: Path = ROOT / "_config.yml") -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def edition_config(path: Path) -> dict:
    """An edition's configuration: the book's ``_config.yml`` with the edition's file over it, one level deep."""
    base, own = _config(), _config(path)
    for key, value in own.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return base


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the built site's pages, in the book's order, as one book.")
    parser.add_argument("html", nargs="?", type=Path, default=ROOT / "_build" / "html", help="the built HTML folder")
    parser.add_argument(
        "--config",
        type=Path,
        default=ROOT / "_config.yml",
        help="the edition's configuration, whose title, author and language the book takes",
    )
    args = parser.parse_args(argv)
    try:
        out = build_pdf(args.html, config=edition_config(args.config), progress=lambda line: print(line, flush=True))
    except (RuntimeError, browser.BrowserNotFound) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
