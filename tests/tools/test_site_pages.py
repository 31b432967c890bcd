"""The back matter: the bibliography holds the core papers, chapters cite, the glossary is bilingual, the appendix
gives every claim a verdict and a link to the chapter that measures it, and the library reference shows every public
name of the package with its signature, shapes and example."""

import re

import nbformat

import course_embed as ce

from .test_notebooks import ROOT, toc_files

# The papers the course builds on; each must be cited somewhere, so that the bibliography lists it.
CORE = [
    "vaswani2017attention",
    "shaw2018self",
    "devlin2019bert",
    "raffel2020exploring",
    "press2017using",
    "su2021roformer",
    "press2022train",
    "chen2023extending",
    "peng2023yarn",
    "bloc97ntk2023",
]
# Terms that Chinese texts use untranslated.
# names of formats, APIs and methods, used as they are in Chinese texts too
UNTRANSLATED = {
    "bfloat16",
    "float16",
    "EmbeddingBag",
    "LongRoPE",
    "padding_idx",
    "rope_scaling",
    "YaRN",
    "torch.compile",
    "pre-LN",
    "post-LN",
}
CJK = re.compile(r"[\u4e00-\u9fff]")


def _bib_titles() -> dict[str, str]:
    text = (ROOT / "book" / "references.bib").read_text()
    entries = re.findall(r"@\w+\{([^,]+),(.*?)\n\}", text, flags=re.S)
    return {key: re.search(r"title\s*=\s*\{(.*?)\},?\n", body).group(1) for key, body in entries}


def _plain(title: str) -> str:
    return re.sub(r"[{}]", "", title)


def test_bibliography_lists_the_papers_the_course_builds_on(built_site):
    assert built_site.returncode == 0, built_site.log[-3000:]
    page = (built_site.html / "book" / "bibliography.html").read_text(encoding="utf-8")
    titles = _bib_titles()
    missing = [key for key in CORE if _plain(titles[key]).split(":")[0].lower() not in page.lower()]
    assert not missing, f"not in the bibliography (cite them): {missing}"


def test_every_chapter_cites_what_it_builds_on():
    for entry in toc_files():
        notebook = ROOT / f"{entry}.ipynb"
        if notebook.exists():
            cells = nbformat.read(notebook, as_version=4).cells
            assert any("{cite" in c.source for c in cells if c.cell_type == "markdown"), f"{entry} cites nothing"


def _glossary_entries() -> list[list[str]]:
    text = (ROOT / "book" / "glossary.md").read_text()
    block = text.split(":::{glossary}", 1)[1].split("\n:::", 1)[0]
    entries, terms = [], []
    for line in block.splitlines():
        if line.startswith(":") or not line.strip():
            terms = []
        elif not line.startswith(" "):
            terms.append(line.strip())
        elif terms:
            entries.append(terms)
            terms = []
    return entries


def test_glossary_names_every_term_in_english_and_chinese():
    entries = _glossary_entries()
    assert len(entries) >= 25
    for terms in entries:
        english = [t for t in terms if not CJK.search(t)]
        chinese = [t for t in terms if CJK.search(t)]
        assert english, terms
        assert chinese or set(english) <= UNTRANSLATED, f"{terms}: no Chinese term"


def test_glossary_terms_are_in_the_built_site(built_site):
    page = (built_site.html / "book" / "glossary.html").read_text(encoding="utf-8")
    for terms in _glossary_entries():
        for term in terms:
            shown = page.replace("&#8730;", "√").replace("’", "'").replace("&#8217;", "'")  # Sphinx's smart quotes
            assert f">{term}<" in shown, term


def test_every_misconception_has_a_verdict_and_links_to_a_published_chapter():
    published = {int(m.group(1)) for entry in toc_files() if (m := re.match(r"book/(\d+)_", entry))}
    rows = [
        line
        for line in (ROOT / "book" / "misconceptions.md").read_text().splitlines()
        if line.startswith("| ") and not line.startswith(("| Claim", "|:--"))
    ]
    assert len(rows) >= 20
    for row in rows:
        claim, verdict, where = (cell.strip() for cell in row.strip("|").split(" | "))
        assert verdict.startswith("**"), row
        links = re.findall(r"\]\((\d\d)[a-z]?_\w+\.ipynb#[\w-]+\)", where)  # 05b_study is chapter 5's study
        if links:
            assert {int(n) for n in links} <= published, row
        else:
            chapter = int(re.fullmatch(r"chapter (\d+)", where).group(1))
            assert chapter not in published, f"chapter {chapter} is published: link the section that measures {claim!r}"


def test_the_library_reference_documents_every_public_name_once():
    page = (ROOT / "book" / "reference.md").read_text(encoding="utf-8")
    assert "book/reference" in toc_files()
    documented = [name.split(".")[-1] for name in re.findall(r"^\.\. auto(?:class|function):: (\S+)$", page, re.M)]
    assert sorted(set(ce.__all__) - set(documented)) == []
    assert len(documented) == len(set(documented)), documented


def _entry(page: str, name: str) -> tuple[str, str]:
    """The signature (``dt``) and the description (``dd``, without its members' entries) of ``name`` on a built page
    of the library reference."""
    dt = page.index(f'<dt class="sig sig-object py" id="{name}">')
    start = page.rindex('<dl class="py ', 0, dt)
    depth, end = 0, start
    for tag in re.finditer(r"<dl\b|</dl>", page[start:]):
        depth += 1 if tag.group() == "<dl" else -1
        if depth == 0:
            end = start + tag.end()
            break
    signature, description = page[dt:end].split("</dt>", 1)
    members = description.find('<dl class="py ')
    return signature, description if members < 0 else description[:members]


def test_the_library_reference_shows_each_name_with_its_signature_shapes_and_example(built_site):
    """Napoleon renders each docstring's sections: "Shapes" (a custom section) and "Example" as headings, the example
    as a doctest block; a Returns section that it misread as "type: description" would show a "Return type"."""
    page = (built_site.html / "book" / "reference.html").read_text(encoding="utf-8")
    for name in ce.__all__:
        signature, description = _entry(page, f"course_embed.{name}")
        assert '<span class="sig-paren">(</span>' in signature, name
        assert '<p class="rubric">Shapes</p>' in description, name
        assert '<p class="rubric">Example</p>' in description.split('<p class="rubric">Shapes</p>', 1)[1], name
        assert '<div class="doctest highlight-default notranslate">' in description, name
    assert "Return type" not in page
    assert "extra_repr" not in page  # nn.Module's, not the package's
