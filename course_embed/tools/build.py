"""Build the site, in English and in Chinese, and each edition's PDF, with the Jupyter Book of the running
interpreter (never from PATH).

    python3 -m course_embed.tools.build [--path-output FOLDER] [--no-pdf]

runs, each step only if the ones before it succeeded (FOLDER defaults to the repository root):

1. ``jupyter-book build ROOT -W -n --keep-going`` through ``jupyter_book.cli.main`` in a child process of this
   interpreter: the English site in ``FOLDER/_build/html``;
2. ``course_embed.tools.edition``: the Chinese edition, from the same pages and stored outputs with the translations
   in ``locales/zh_CN/``, in ``FOLDER/_build/html/zh``; it lists the pages with untranslated or fuzzy entries;
3. ``course_embed.tools.pdf``: ``_build/html/transformer-input-layers.pdf`` and
   ``_build/html/zh/transformer-input-layers.pdf``.

Each step says on stderr when it starts and how long it took (``course_embed.tools.progress``). The exit status
is the first failure's. ``steps`` gives the same commands to the tests.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from .progress import Steps

ROOT = Path(__file__).resolve().parents[2]
# jupyter_book has no ``__main__``: its console script ``jupyter-book`` calls this function.
JUPYTER_BOOK = [sys.executable, "-c", "import sys; from jupyter_book.cli.main import main; sys.exit(main())"]
ZH_CONFIG = ROOT / "locales" / "zh_CN" / "_config.yml"
#: What each step does, as its progress line says it.
DOING = {
    "html": "building the English site (jupyter-book build -W -n --keep-going)",
    "html-zh": "building the Chinese edition",
    "pdf": "printing the English edition to PDF",
    "pdf-zh": "printing the Chinese edition to PDF",
}


def jupyter_book_command(root: Path, path_output: Path | None = None) -> list[str]:
    """The ``jupyter-book build`` command line, for this interpreter, of the strict (``-W -n``) site build."""
    command = [*JUPYTER_BOOK, "build", str(root), "-W", "-n", "--keep-going"]
    return command + (["--path-output", str(path_output)] if path_output else [])


def steps(root: Path, path_output: Path | None = None, pdf: bool = True) -> list[tuple[str, list[str]]]:
    """The build's steps, in order, as (name, command line) pairs."""
    out = path_output or root
    html = out / "_build" / "html"
    module = [sys.executable, "-m"]
    found = [
        ("html", jupyter_book_command(root, path_output)),
        ("html-zh", [*module, "course_embed.tools.edition", "--path-output", str(out)]),
    ]
    if pdf:
        found += [
            ("pdf", [*module, "course_embed.tools.pdf", str(html)]),
            ("pdf-zh", [*module, "course_embed.tools.pdf", str(html / "zh"), "--config", str(ZH_CONFIG)]),
        ]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build both editions of the site (strict) and their PDFs.")
    parser.add_argument(
        "--path-output", type=Path, default=None, help="folder that receives _build/ (default: the repository root)"
    )
    parser.add_argument("--no-pdf", action="store_true", help="build the HTML only")
    args = parser.parse_args(argv)
    plan = steps(ROOT, args.path_output, pdf=not args.no_pdf)
    progress = Steps(len(plan))
    try:
        for name, command in plan:
            with progress.step(name, DOING[name]):
                subprocess.run(command, check=True)
    except subprocess.CalledProcessError as failed:
        return failed.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
