"""Build the Chinese edition: the same pages, with the catalogues' Chinese text, into ``_build/html/zh/``.

    python3 -m course_embed.tools.edition [--path-output FOLDER]

runs ``jupyter-book build ROOT -W -n --keep-going`` with ``_build/zh/_config.yml``: the book's ``_config.yml`` with
``locales/zh_CN/_config.yml`` merged over it (Sphinx's ``language``, the title, the footer) and, for the search,
jieba's word list (``site_search.search_words``: the glossary's Chinese terms and the edition's list of common
terms), so that a query such as 位置编码 or 学习率 finds the pages that use it.
Notebooks are not executed (``execute_notebooks: off``): both editions show the same stored outputs. The HTML is
moved to ``_build/html/zh/`` beside the English site, and the state of the translation is printed (the pages with
untranslated or fuzzy entries show their English text for those entries). The exit status is the build's.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from course_embed.tools import translations
from course_embed.tools.build import ROOT, jupyter_book_command
from course_embed.tools.site_editions import EDITION_FOLDER
from course_embed.tools.site_search import WORD_LIST, search_words

OVERRIDES = translations.LOCALES / translations.LANGUAGE / "_config.yml"


def merged(base: dict, over: dict) -> dict:
    """``base`` with ``over`` merged in: mappings key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def write_config(root: Path, folder: Path) -> Path:
    """Write the Chinese edition's ``_config.yml`` (and its search word list) into ``folder``; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    words = folder / "search_words.txt"
    found = search_words(root / "book" / "glossary.md", root / WORD_LIST.relative_to(ROOT))
    words.write_text("".join(f"{word} 10 n\n" for word in found), encoding="utf-8")
    config = merged(
        yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8")),
        yaml.safe_load(OVERRIDES.read_text(encoding="utf-8")),
    )
    config["sphinx"]["config"]["html_search_options"] = {"dict": str(words.resolve())}
    path = folder / "_config.yml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def build(root: Path = ROOT, path_output: Path | None = None) -> int:
    """Build the Chinese edition of the book in ``root`` into ``(path_output or root)/_build/html/zh``."""
    out = (path_output or root) / "_build"
    work = out / "zh"
    command = jupyter_book_command(root, work) + ["--config", str(write_config(root, work))]
    code = subprocess.run(command).returncode
    site = out / "html" / EDITION_FOLDER
    if site.exists():
        shutil.rmtree(site)
    if (work / "_build" / "html").is_dir():
        site.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(work / "_build" / "html", site)
    print(translations.report(translations.status(root / "locales" / translations.LANGUAGE / "LC_MESSAGES")))
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the Chinese edition into _build/html/zh (strict).")
    parser.add_argument(
        "--path-output", type=Path, default=None, help="folder that receives _build/ (default: the repository root)"
    )
    return build(ROOT, parser.parse_args(argv).path_output)


if __name__ == "__main__":
    sys.exit(main())
