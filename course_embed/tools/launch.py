"""Chapters that work when opened from the site's launch buttons: a first cell that installs the course's package.

The repository URL lives in one place, ``repository.url`` in ``_config.yml``. While it is empty the site has no
launch buttons (``course_embed.tools.site`` drops them) and no chapter needs the cell. Once it is set,

    python3 -m course_embed.tools.launch

gives every chapter in ``_toc.yml`` a first code cell (hidden on the site by its ``remove-cell`` tag) that installs
the package from that repository when it is not importable, as on Colab; elsewhere (here, Binder, which installs
``requirements.txt``) the cell does nothing. Run again after changing the URL; with the URL emptied it removes the
cell. Then refresh the status page (``course-embed status``), since the chapters changed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[2]
MARK = "course_embed_install"  # cell metadata key of the install cell


def repository(config: Path = ROOT / "_config.yml") -> tuple[str, str]:
    """``(url, branch)`` of the course's repository from ``_config.yml``; ``url`` is ``""`` when unset."""
    repo = yaml.safe_load(config.read_text()).get("repository") or {}
    return str(repo.get("url") or "").strip().rstrip("/"), str(repo.get("branch") or "main")


def install_source(url: str, branch: str) -> str:
    """The install cell's code: pip-installs ``git+URL@BRANCH`` unless ``course_embed`` is importable."""
    if not url.startswith("https://"):
        raise ValueError(
            f"repository url={url!r} is not an https:// URL; set repository.url in _config.yml to the "
            "course's public repository, e.g. https://github.com/OWNER/course_embed"
        )
    return (
        "# Opened from the site's Colab button? This installs the course's package (elsewhere it is a no-op).\n"
        "import importlib.util\n"
        "import subprocess\n"
        "import sys\n\n"
        'if importlib.util.find_spec("course_embed") is None:\n'
        f'    package = "course_embed @ git+{url}@{branch}"\n'
        '    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", package])'
    )


def stamp(nb: nbformat.NotebookNode, url: str, branch: str = "main") -> bool:
    """Make ``nb``'s install cell match ``url`` (none when ``url`` is empty); True if ``nb`` changed."""
    kept = [cell for cell in nb.cells if not cell.metadata.get(MARK)]
    if url:
        cell = nbformat.v4.new_code_cell(install_source(url, branch), metadata={MARK: True, "tags": ["remove-cell"]})
        if nb.nbformat_minor >= 5:
            cell["id"] = "course-embed-install"  # fixed, so that re-stamping leaves git diff empty
        else:
            cell.pop("id", None)
        if nb.cells and nb.cells[0].metadata.get(MARK) and nb.cells[0].source == cell.source:
            cell = nb.cells[0]
        kept.insert(0, cell)
    changed = kept != nb.cells
    nb.cells = kept
    return changed


def install_cells(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """``(index, source)`` of each install cell in ``nb``."""
    return [(i, cell.source) for i, cell in enumerate(nb.cells) if cell.metadata.get(MARK)]


def chapters(toc: Path = ROOT / "_toc.yml") -> list[Path]:
    """The notebooks listed in ``_toc.yml``."""
    from course_embed.tools.pdf import toc_pages

    return [ROOT / f"{page}.ipynb" for page in toc_pages(toc) if (ROOT / f"{page}.ipynb").is_file()]


def main(argv: list[str] | None = None) -> int:
    url, branch = repository()
    for path in chapters():
        nb = nbformat.read(path, as_version=4)
        if stamp(nb, url, branch):
            nbformat.write(nb, path)
            print(f"{path.relative_to(ROOT)}: {'install cell for ' + url if url else 'install cell removed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
