"""course_embed.tools.launch: the install cell that chapters opened from a launch button start with."""

import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from course_embed.tools import launch

URL = "https://github.com/someone/course_embed"


def _notebook():
    return new_notebook(cells=[new_markdown_cell("# 1. Title"), new_code_cell("x = 1")])


def test_stamp_adds_one_first_cell_hidden_on_the_site_and_is_idempotent():
    nb = _notebook()
    assert launch.stamp(nb, URL, "main")
    assert [c.cell_type for c in nb.cells] == ["code", "markdown", "code"]
    assert nb.cells[0].metadata["tags"] == ["remove-cell"] and nb.cells[0].id == "course-embed-install"
    assert f"course_embed @ git+{URL}@main" in nb.cells[0].source
    nbformat.validate(nb)
    assert not launch.stamp(nb, URL, "main")
    assert launch.stamp(nb, URL + "2", "dev") and len(launch.install_cells(nb)) == 1
    assert "git+https://github.com/someone/course_embed2@dev" in nb.cells[0].source
    assert launch.stamp(nb, "") and launch.install_cells(nb) == [] and len(nb.cells) == 2


def test_install_cell_is_a_no_op_where_the_package_is_importable():
    code = launch.install_source(URL, "main").replace('"-m", "pip"', '"-c", "raise SystemExit(3)"')
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    missing = code.replace('find_spec("course_embed")', 'find_spec("no_such_module_here")')
    assert subprocess.run([sys.executable, "-c", missing], capture_output=True).returncode == 1  # pip was called


def test_a_url_that_is_not_https_is_refused():
    with pytest.raises(ValueError, match=r"repository url='git@github.com:o/r' is not an https:// URL"):
        launch.install_source("git@github.com:o/r", "main")


def test_repository_reads_the_one_url_in_config(tmp_path):
    config = tmp_path / "_config.yml"
    config.write_text('repository:\n  url: ""\n  branch: main\n')
    assert launch.repository(config) == ("", "main")
    config.write_text(f"repository:\n  url: {URL}/\n  branch: dev\n")
    assert launch.repository(config) == (URL, "dev")


def test_a_configured_repository_gets_its_button_and_launch_buttons_on_every_page():
    """The theme options Jupyter Book hands Sphinx (``html.use_repository_button: false``, as ``_config.yml`` has):
    with ``repository.url`` set the repository button and the launch buttons stay, without it both go."""
    from types import SimpleNamespace

    from course_embed.tools.site import _use_local_copies

    def theme(url):
        options = {"repository_url": url, "use_repository_button": False, "launch_buttons": {"colab_url": "x"}}
        _use_local_copies(None, SimpleNamespace(html_theme_options=options))
        return options

    configured = theme("https://github.com/owner/course_embed")
    assert configured["use_repository_button"] is True and configured["launch_buttons"] == {"colab_url": "x"}
    assert configured["repository_url"] == "https://github.com/owner/course_embed"
    unset = theme("")
    assert "launch_buttons" not in unset and "repository_url" not in unset and not unset["use_repository_button"]


def test_with_a_repository_url_every_page_shows_the_repository_and_every_chapter_its_launch_buttons(tmp_path):
    """An adopter sets ``repository.url``: the English site, built once with it, links the repository from every
    page and gives every chapter (a notebook) its Binder and Colab buttons for that chapter."""
    import yaml

    from course_embed.tools.build import ROOT, jupyter_book_command

    from .test_notebooks import toc_files

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["repository"]["url"] = URL
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    command = jupyter_book_command(ROOT, tmp_path) + ["--config", str(tmp_path / "_config.yml")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    repo = URL.removeprefix("https://github.com/")  # owner/name, as the launch buttons spell it
    chapters = [entry for entry in toc_files() if (ROOT / f"{entry}.ipynb").exists()]
    assert len(chapters) >= 8, chapters
    for entry in toc_files():
        page = (tmp_path / "_build" / "html" / f"{entry}.html").read_text(encoding="utf-8")
        assert f'href="{URL}"' in page, f"{entry}: no link to the repository"
        if entry in chapters:
            for launch_url in (
                f"https://mybinder.org/v2/gh/{repo}/main?urlpath=lab/tree/{entry}.ipynb",
                f"https://colab.research.google.com/github/{repo}/blob/main/{entry}.ipynb",
            ):
                assert f'href="{launch_url}"' in page, f"{entry}: no launch button {launch_url}"
