"""course_embed.tools.pdf: the book as one PDF, printed offline from the built site: every chapter in order, a title
page and the book's contents with the right page numbers, a number on every page, a bookmark for every section, and
every code and output line of the chapters whole, in both editions."""

import io
import logging
import re
import unicodedata

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
    """Sphinx's smart quotes turn ' into a curly apostrophe on the page, and the PDF keeps ligatures (ﬁ, ﬀ): compare
    with straight quotes and single letters."""
    text = unicodedata.normalize("NFKC", text)
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


def _bookmarks(reader: PdfReader) -> list[tuple[int, str, int]]:
    """The PDF's bookmarks in reading order as (depth, title, page index)."""
    found = []

    def walk(items, depth):
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                found.append((depth, _straight(item.title), reader.get_destination_page_number(item)))

    walk(reader.outline, 0)
    return found


def test_the_pdf_has_a_bookmark_per_page(book_pdf):
    assert book_pdf.metadata.title == "Transformer input layers"
    titles = [title for depth, title, _ in _bookmarks(book_pdf) if depth == 0]
    assert len(titles) == len(pdf.toc_pages())
    for entry in toc_files():
        if (ROOT / f"{entry}.ipynb").exists():
            assert any(_plain_title(entry)[0] in title for title in titles), (entry, titles)


def _sections(entry: str) -> list[str]:
    """The titles of a chapter's sections (its ``## `` headings), math left out, as the runs of plain words."""
    found = []
    for cell in nbformat.read(ROOT / f"{entry}.ipynb", as_version=4).cells:
        if cell.cell_type == "markdown":
            text = re.sub(r"```.*?```", "", cell.source, flags=re.S)
            titles = re.findall(r"^## (.+)$", text, flags=re.M)
            found += [re.split(r"\$[^$]*\$", title.replace("`", ""))[0].strip() for title in titles]
    return found


def test_every_section_has_a_bookmark_on_its_page(book_pdf):
    """Each chapter's bookmark holds one bookmark per section, in order, each on the page where its heading is."""
    marks = _bookmarks(book_pdf)
    chapters = [entry for entry in toc_files() if (ROOT / f"{entry}.ipynb").exists()]
    for entry in chapters:
        start = next(i for i, (depth, title, _) in enumerate(marks) if depth == 0 and _plain_title(entry)[0] in title)
        end = next((i for i in range(start + 1, len(marks)) if marks[i][0] == 0), len(marks))
        children = [(title, page) for depth, title, page in marks[start + 1 : end] if depth == 1]
        expected = _sections(entry)
        titles = [title for title, _ in children]
        assert len(titles) == len(expected) and all(map(str.startswith, titles, expected)), (
            entry,
            expected,
            children,
        )
        for title, page in children:
            text = _straight(re.sub(r"\s+", " ", book_pdf.pages[page].extract_text()))
            assert title.split(" ")[0] in text and _straight(title)[:12] in text, (entry, title, page + 1)


def _footer(page) -> str:
    """The text drawn in a page's bottom margin (below the text block), where the page number is. A glyph the text
    extractor places below the page (a stretched mathematical delimiter, drawn with a scaling matrix that it does not
    compose) is not in the margin."""
    parts = []
    bottom = pdf.MARGIN_MM["bottom"] / 25.4 * 72

    def visit(text, cm, tm, font, size):
        y = (tm[5] * cm[3] + cm[5]) if tm and cm else None
        if y is not None and 0 <= y < bottom and text.strip():
            parts.append(text.strip())

    page.extract_text(visitor_text=visit)
    return " ".join(parts)


def _numbered(reader: PdfReader) -> None:
    unnumbered = [i + 1 for i, page in enumerate(reader.pages) if _footer(page) != str(i + 1)]
    assert not unnumbered, f"pages without their number in the footer: {unnumbered[:10]}"


def test_every_page_is_numbered(book_pdf):
    _numbered(book_pdf)


def test_the_book_opens_with_a_title_page_and_its_contents_with_page_numbers(book_pdf):
    assert "Transformer input layers" in book_pdf.pages[0].extract_text()
    assert "the course_embed authors" in book_pdf.pages[0].extract_text()
    first_chapter = min(page for depth, _, page in _bookmarks(book_pdf) if depth == 0)
    contents = _straight("\n".join(p.extract_text() for p in book_pdf.pages[1:first_chapter]))
    assert contents.lstrip().startswith("Contents")
    at = 0  # the entries in reading order: a title that several chapters share ("Summary") is found in its own
    for depth, title, page in _bookmarks(book_pdf):
        if depth <= 1 and re.fullmatch(r"[\w ,.:;?'()/+-]+", title):  # titles without mathematics
            pattern = re.escape(title).replace(r"\ ", r"\s+") + r"\s+(\d+)\s*$"
            found = re.compile(pattern, flags=re.M).search(contents, at)
            assert found, (
                f"{title!r} is not in the book's contents with a page number (after {contents[at : at + 80]!r})"
            )
            assert int(found.group(1)) == page + 1, (title, found.group(1), page + 1)
            at = found.end()


def _whole_lines(reader: PdfReader) -> None:
    """Every line of code and of printed output (stdout) that the chapters show is in the PDF's text whole: joined
    again where the PDF wrapped it (the continuation mark and the line break), spaces left out on both sides."""
    text = "".join(page.extract_text() for page in reader.pages)
    text = re.sub(r"\s+", "", re.sub(re.escape(pdf.WRAP_MARK) + r"\s*", "", text))
    hidden = {"remove-input", "remove-cell"}
    missing, checked = [], 0
    for entry in toc_files():
        if not (ROOT / f"{entry}.ipynb").exists():
            continue
        for cell in nbformat.read(ROOT / f"{entry}.ipynb", as_version=4).cells:
            tags = set(cell.metadata.get("tags", []))
            if cell.cell_type != "code" or "remove-cell" in tags:
                continue
            lines = [] if hidden & tags else cell.source.splitlines()
            if "remove-output" not in tags:
                lines += [line for out in cell.outputs if out.get("name") == "stdout" for line in out.text.splitlines()]
            for line in lines:
                squeezed = re.sub(r"\s+", "", line)
                checked += len(line) > 80
                if squeezed and squeezed not in text:
                    missing.append(f"{entry}: {line}")
    assert checked > 50  # the check saw the long lines
    assert not missing, f"{len(missing)} lines not whole in the PDF, e.g. {missing[:5]}"


def test_every_code_and_output_line_is_whole(book_pdf):
    _whole_lines(book_pdf)


def _no_near_empty_pages(reader: PdfReader, least: int) -> None:
    """After the title page, every page holds a figure or at least ``least`` characters of text (a few lines), except
    the last page of a chapter (or of the contents) that continues one before it: a chapter's last lines may end
    where they fall, but no page holds a short chapter alone, or a heading the next page continues."""
    starts = {page for depth, _, page in _bookmarks(reader) if depth == 0}
    continued_end = {i for i in range(2, len(reader.pages)) if (i + 1 in starts or i + 1 == len(reader.pages))}
    near_empty = [
        (i + 1, len(text))
        for i, page in enumerate(reader.pages[1:], start=1)
        if len(text := re.sub(r"\s+", "", page.extract_text())) < least
        and not page.images
        and not (i in continued_end and i not in starts)
    ]
    assert not near_empty, f"near-empty pages (page, characters): {near_empty}"


def test_no_page_is_near_empty(book_pdf):
    _no_near_empty_pages(book_pdf, least=150)


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
    titles = [title for depth, title, _ in _bookmarks(chinese_pdf) if depth == 0]
    assert len(titles) == len(pdf.toc_pages())
    text = re.sub(r"\s+", "", " ".join(page.extract_text() for page in chinese_pdf.pages))
    for term in ("位置编码", "词元嵌入", "权重绑定", "注意力"):
        assert term in text, term  # the PDF holds Chinese text, not boxes
    for entry in toc_files():
        if (ROOT / f"{entry}.ipynb").exists():
            title = _straight(_chinese_title(entry))
            assert title in titles, (entry, title, titles)


def test_the_chinese_pdf_is_a_book_too(chinese_pdf):
    """Numbered pages, the contents after the title page, and every code and output line whole."""
    _numbered(chinese_pdf)
    assert "Transformer 输入层" in chinese_pdf.pages[0].extract_text()
    assert re.sub(r"\s+", "", chinese_pdf.pages[1].extract_text()).startswith("目录")
    _whole_lines(chinese_pdf)
    _no_near_empty_pages(chinese_pdf, least=75)  # a Chinese character says about what two English letters do


def _images_sharing_a_profile() -> bytes:
    """A PDF of four pages, each with an image, the four sharing one ICC profile through the array ``[/ICCBased ref]``
    in each image's dictionary, as in Chromium's PDF."""
    from pypdf import PdfWriter
    from pypdf.generic import ArrayObject, DecodedStreamObject, DictionaryObject, NameObject, NumberObject

    writer = PdfWriter()
    profile = DecodedStreamObject()
    profile.set_data(b"an ICC profile")
    profile[NameObject("/N")] = NumberObject(3)
    shared = writer._add_object(profile)
    for number in range(4):
        page = writer.add_blank_page(100, 100)
        image = DecodedStreamObject()
        image.set_data(bytes([number]) * 3)
        image.update(
            {
                NameObject("/Type"): NameObject("/XObject"),
                NameObject("/Subtype"): NameObject("/Image"),
                NameObject("/Width"): NumberObject(1),
                NameObject("/Height"): NumberObject(1),
                NameObject("/BitsPerComponent"): NumberObject(8),
                NameObject("/ColorSpace"): ArrayObject([NameObject("/ICCBased"), shared]),
            }
        )
        images = DictionaryObject({NameObject("/Im"): writer._add_object(image)})
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/XObject"): images})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_the_copy_of_a_printed_book_warns_only_of_what_is_wrong(caplog):
    """pypdf copies a stream that several arrays share once per array and then warns that the copy holds more objects
    than the original: ``pdf.clone`` holds that warning back when those copies explain it, not otherwise."""
    from pypdf import PdfWriter

    data = _images_sharing_a_profile()
    with caplog.at_level(logging.WARNING, logger="pypdf"):
        PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    assert "exceeds defined trailer size" in caplog.text  # the cause, as pypdf has it
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pypdf"):
        writer = pdf.clone(PdfReader(io.BytesIO(data)))
    assert caplog.text == ""
    assert len(writer.pages) == 4
    size = int(re.search(rb"/Size (\d+)", data).group(1))
    short = data.replace(b"/Size %d" % size, b"/Size %d" % (size - 2))  # a trailer that is wrong for another reason
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pypdf"):
        pdf.clone(PdfReader(io.BytesIO(short)))
    assert "exceeds defined trailer size" in caplog.text
