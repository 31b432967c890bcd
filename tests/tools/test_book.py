"""The site: `jupyter-book build . -W -n --keep-going` succeeds with no warning and shows every chapter's figures."""

import re

import nbformat

from .test_notebooks import ROOT, toc_files


def test_book_builds_without_warnings(built_site):
    assert built_site.returncode == 0, built_site.log[-3000:]
    assert not re.search(r"WARNING|ERROR", built_site.log), built_site.log[-3000:]


def test_every_toc_page_is_built_with_its_figures(built_site):
    for entry in toc_files():
        page = built_site.html / f"{entry}.html"
        assert page.is_file(), f"{page} missing"
        notebook = ROOT / f"{entry}.ipynb"
        if not notebook.exists():
            continue
        nb = nbformat.read(notebook, as_version=4)
        figures = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
        images = re.findall(r'<img[^>]+src="([^"]+\.png)"', page.read_text())
        assert len(images) >= figures, f"{entry}: {figures} figures stored, {len(images)} shown"
        for src in images:
            assert (page.parent / src).resolve().is_file(), f"{entry}: image {src} not in the built site"
