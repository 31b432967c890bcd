"""The book as one PDF, printed offline from the built site.

The headless browser (``course_embed.tools.browser``) opens each page listed in ``_toc.yml``, in the book's order,
from a local server with every other host blocked; once MathJax has typeset and the images have loaded it prints the
page (the theme's print style drops the navigation), and ``pypdf`` merges the pages into one file with a bookmark
per page. The PDF lands in the HTML folder, ``_build/html/transformer-input-layers.pdf``, where ``book/pdf.md`` links
to it.

    python3 -m course_embed.tools.pdf [HTML_FOLDER] [--config CONFIG]   # default: _build/html, _config.yml

The Chinese edition's PDF is printed the same way from ``_build/html/zh`` (``--config locales/zh_CN/_config.yml``
gives its title).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import TextIO

import yaml

from course_embed.tools import browser
from course_embed.tools.progress import Steps

ROOT = Path(__file__).resolve().parents[2]
PDF_NAME = "transformer-input-layers.pdf"
# Pages of the site that are not part of the printed book (the page that links to the PDF itself).
NOT_PRINTED = {"book/pdf"}
WAIT_MS = 30_000

# Runs in the page before printing: waits until MathJax has typeset and every image has loaded.
READY = (
    """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const deadline = Date.now() + %d;
  while ([...document.images].some(i => !i.complete) && Date.now() < deadline) {
    await new Promise(r => setTimeout(r, 50));
  }
  const h1 = document.querySelector('main h1, article h1, h1');
  return h1 ? h1.textContent.replace(/[#¶\\s]+$/, '').trim() : document.title;
}"""  # noqa: UP031 (a JavaScript template: format() would need every brace doubled)
    % WAIT_MS
)


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


def build_pdf(
    html: Path,
    pages: list[str] | None = None,
    out: Path | None = None,
    book_title: str | None = None,
    log: TextIO | None = None,
) -> Path:
    """Print ``pages`` (default: ``toc_pages()``) of the site in ``html`` and merge them into ``out``.

    ``book_title`` (default: the book's, from ``_config.yml``) is the PDF's title; each page's progress line goes
    to ``log`` (default: stderr). Returns the PDF's path (default
    ``html / PDF_NAME``). Raises ``RuntimeError`` naming a page that is missing or
    that loads something from another host (the PDF is built offline), and ``browser.BrowserNotFound``.
    """
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter

    pages = toc_pages() if pages is None else pages
    out = html / PDF_NAME if out is None else out
    missing = [page for page in pages if not (html / f"{page}.html").is_file()]
    if missing:
        raise RuntimeError(
            f"cannot print the book: no {', '.join(f'{p}.html' for p in missing)} in {html}; "
            "build the site first (python3 -m course_embed.tools.build)"
        )
    executable = browser.find_browser()
    writer = PdfWriter()
    with browser.serve(html) as site, sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(executable), args=browser.ARGS)
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        progress = Steps(len(pages), out=log)
        for path in pages:
            with progress.step(path, f"printing {path}.html"):
                blocked: list[str] = []
                page = context.new_page()
                page.route("**/*", browser.offline(site, blocked))
                page.goto(f"{site}{path}.html", wait_until="load", timeout=WAIT_MS)
                title = page.evaluate(READY)
                data = page.pdf(
                    format="A4",
                    print_background=True,
                    margin={"top": "15mm", "bottom": "15mm", "left": "12mm", "right": "12mm"},
                )
                page.close()
                if blocked:
                    raise RuntimeError(f"{path}.html loads {blocked[0]} from another host; the PDF is built offline")
                writer.append(PdfReader(io.BytesIO(data)), outline_item=title)
        chromium.close()
    writer.add_metadata(
        {"/Title": book_title if book_title is not None else _book_title(), "/Creator": "course_embed.tools.pdf"}
    )
    with open(out, "wb") as f:
        writer.write(f)
    return out


def _book_title(config: Path = ROOT / "_config.yml") -> str:
    return str(yaml.safe_load(config.read_text(encoding="utf-8")).get("title", ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the built site's pages, in the book's order, to one PDF.")
    parser.add_argument("html", nargs="?", type=Path, default=ROOT / "_build" / "html", help="the built HTML folder")
    parser.add_argument(
        "--config",
        type=Path,
        default=ROOT / "_config.yml",
        help="the edition's configuration, whose title the PDF takes",
    )
    args = parser.parse_args(argv)
    try:
        out = build_pdf(args.html, book_title=_book_title(args.config))
    except (RuntimeError, browser.BrowserNotFound) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
