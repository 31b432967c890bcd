"""course_embed.tools.pdf: the book as one PDF, printed offline from the built site, holds every chapter."""

import re

import nbformat
import pytest
from pypdf import PdfReader

from course_embed.tools import pdf

from .test_notebooks import ROOT, toc_files


def _plain_title(entry: str) -> list[str]:
    """The chapter's title (its first heading) as the runs of plain words between any math, with straight quotes."""
    first = nbformat.read(ROOT / f"{entry}.ipynb", as_version=4).cells[0].source.splitlines()[0]
    return [run.strip() for run in re.split(r"\$[^$]*\$", first.lstrip("# ")) if len(run.strip()) > 3]


def _straight(text: str) -> str:
    """Sphinx's smart quotes turn ' into a curly apostrophe on the page; compare with straight ones."""
    return text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')


def test_toc_pages_follow_the_book_order():
    pages = pdf.toc_pages()
    assert pages[0] == "book/intro"
    assert [p for p in pages if re.match(r"book/\d\d_", p)] == [e for e in toc_files() if re.match(r"book/\d\d_", e)]
    assert pages == [entry for entry in toc_files() if entry not in pdf.NOT_PRINTED]


def _printed(returncode: int, log: str, path) -> PdfReader:
    assert returncode == 0, log[-3000:]
    assert path.is_file() and path.read_bytes()[:5] == b"%PDF-"
    return PdfReader(path)


@pytest.fixture(scope="module")
def book_pdf(built_site):
    return _printed(built_site.pdf_returncode, built_site.pdf_log, built_site.html / pdf.PDF_NAME)


def test_the_pdf_holds_every_chapter_in_order(book_pdf):
    pages = [_straight(re.sub(r"\s+", " ", page.extract_text())).strip() for page in book_pdf.pages]
    text = " ".join(pages)
    chapters = [entry for entry in toc_files() if (ROOT / f"{entry}.ipynb").exists()]
    assert chapters
    start = 0
    for entry in chapters:
        runs = _plain_title(entry)
        assert runs and all(run in text for run in runs), f"{entry}: {runs} not in the PDF's text"
        # Each chapter begins a page with its title, after the page where the previous one began: the titles
        # quoted in running text (the introduction's roadmap) begin no page.
        begins = [i for i in range(start, len(pages)) if pages[i].startswith(runs[0])]
        assert begins, f"{entry}: no page from {start} on begins with its title {runs[0]!r}: missing or out of order"
        start = begins[0] + 1
    assert len(book_pdf.pages) >= 2 * len(chapters)


def test_the_pdf_has_a_bookmark_per_page(book_pdf):
    assert book_pdf.metadata.title == "Transformer input layers"
    titles = [_straight(item.title) for item in book_pdf.outline]
    assert len(titles) == len(pdf.toc_pages())
    for entry in toc_files():
        if (ROOT / f"{entry}.ipynb").exists():
            assert any(_plain_title(entry)[0] in title for title in titles), (entry, titles)


def test_build_pdf_refuses_a_site_that_was_not_built(tmp_path):
    with pytest.raises(
        RuntimeError, match=r"no book/intro\.html, .*book/bibliography\.html.* in .*build the site first"
    ):
        pdf.build_pdf(tmp_path)


@pytest.fixture(scope="module")
def chinese_pdf(built_site):
    return _printed(built_site.zh_pdf_returncode, built_site.zh_pdf_log, built_site.zh / pdf.PDF_NAME)


def _chinese_title(entry: str) -> str:
    """The page's title in the Chinese edition: its first entry's translation."""
    from course_embed.tools import translations

    catalogue = translations.read_catalogue(translations.CATALOGUES / f"{entry}.po")
    first = next(m for m in catalogue if m.id.startswith(_plain_title(entry)[0]))
    return first.string.replace("\\.", ".")


def test_the_chinese_pdf_is_in_chinese_with_a_chinese_bookmark_per_page(chinese_pdf):
    assert chinese_pdf.metadata.title == "Transformer 输入层"
    titles = [item.title for item in chinese_pdf.outline]
    assert len(titles) == len(pdf.toc_pages())
    text = re.sub(r"\s+", "", " ".join(page.extract_text() for page in chinese_pdf.pages))
    for term in ("位置编码", "词元嵌入", "权重绑定", "注意力"):
        assert term in text, term  # the PDF holds Chinese text, not boxes
    for entry in toc_files():
        if (ROOT / f"{entry}.ipynb").exists():
            title = _chinese_title(entry)
            assert title in titles, (entry, title, titles)
