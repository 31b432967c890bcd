"""Build the site and the book's PDF, with the Jupyter Book of the running interpreter (never from PATH).

    python3 -m course_embed.tools.build [--path-output FOLDER]

runs ``jupyter-book build ROOT -W -n --keep-going`` (HTML in ``FOLDER/_build/html``; FOLDER defaults to the
repository root) through ``jupyter_book.cli.main`` in a child process of this interpreter, then, if the build
succeeded, prints the book to ``_build/html/transformer-input-layers.pdf`` (``course_embed.tools.pdf``). The exit
status is the first failure's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from course_embed.tools import pdf

ROOT = Path(__file__).resolve().parents[2]
# jupyter_book has no ``__main__``: its console script ``jupyter-book`` calls this function.
JUPYTER_BOOK = [sys.executable, "-c", "import sys; from jupyter_book.cli.main import main; sys.exit(main())"]


def jupyter_book_command(root: Path, path_output: Path | None = None) -> list[str]:
    """The ``jupyter-book build`` command line, for this interpreter, of the strict (``-W -n``) site build."""
    command = [*JUPYTER_BOOK, "build", str(root), "-W", "-n", "--keep-going"]
    return command + (["--path-output", str(path_output)] if path_output else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the site (jupyter-book, strict) and the book's PDF.")
    parser.add_argument(
        "--path-output", type=Path, default=None, help="folder that receives _build/ (default: the repository root)"
    )
    parser.add_argument("--no-pdf", action="store_true", help="build the HTML only")
    args = parser.parse_args(argv)
    code = subprocess.run(jupyter_book_command(ROOT, args.path_output)).returncode
    if code != 0 or args.no_pdf:
        return code
    return pdf.main([str((args.path_output or ROOT) / "_build" / "html")])


if __name__ == "__main__":
    sys.exit(main())
