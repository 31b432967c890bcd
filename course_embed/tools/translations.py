"""The Chinese edition's translation catalogues: refresh them from the English pages, and say what is left to do.

The English pages are the source. Sphinx's gettext builder extracts every paragraph, heading, list item, table cell,
term and figure alt text of a page into a template (``.pot``); ``sphinx-intl`` merges the templates into one catalogue
per page, ``locales/zh_CN/LC_MESSAGES/book/<page>.po``, where each English entry (``msgid``) gets its Chinese text
(``msgstr``). Code cells and their outputs are not in the catalogues: both editions show the same ones. Nor are the
library reference's entries (``book/reference.md``), the package's docstrings, which both editions show in English
(``course_embed.tools.site_editions``); its catalogue holds the page's own prose, which says so.

When an English paragraph changes, its entry comes back *fuzzy* (the old translation kept as a suggestion, not used by
the build) or, if it is new, untranslated; the build of the Chinese edition then shows that paragraph in English and
``python3 -m course_embed.tools.build`` lists the pages with work left.

    course-embed translations          # refresh the catalogues, then list what is left
    course-embed translations --check  # list what is left; exit 1 unless all is translated

(or ``python3 -m course_embed.tools.translations``). ``course-embed status`` refreshes them too, after it rewrites the
status page.

An entry with no words to translate (a number, a hash, inline code or math, a date and version line) is filled with
its English text by the refresh, so that re-measuring the status page needs no translator.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

from course_embed.tools.build import JUPYTER_BOOK

ROOT = Path(__file__).resolve().parents[2]
LANGUAGE = "zh_CN"
LOCALES = ROOT / "locales"
CATALOGUES = LOCALES / LANGUAGE / "LC_MESSAGES"

# Inline code, math, link targets and MyST roles' targets: kept as they are in a translation.
_NOT_WORDS = re.compile(r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$|\]\([^)]*\)|\{[a-z:]+\}", re.S)
# Names that read the same in both editions (the status page's environment column).
_NAMES = {"Python", "torch", "CPU", "CPUs"}


def verbatim(msgid: str) -> bool:
    """True if ``msgid`` has no word to translate: its Chinese text is the English one."""
    words = re.findall(r"[A-Za-z]{2,}", _NOT_WORDS.sub(" ", msgid))
    return all(word in _NAMES for word in words)


# The glossary's terms that every translated entry must render with the glossary's Chinese name (one of them, where the
# glossary gives two): an entry whose English names one of these, outside code and math, names it in Chinese too.
KEY_TERMS = (
    "token",
    "token embedding",
    "token id",
    "vocabulary",
    "embedding table",
    "one-hot vector",
    "lookup",
    "positional encoding",
    "sinusoidal positional encoding",
    "learned position embedding",
    "rotary position embedding",
    "relative position bias",
    "relative-position bucket",
    "position interpolation",
    "NTK-aware scaling",
    "dynamic NTK",
    "extrapolation",
    "length generalisation",
    "attention",
    "attention mask",
    "key padding mask",
    "attention temperature",
    "padding",
    "weight tying",
    "cross-entropy",
    "concatenation",
    "fusion",
    "kernel fusion",
    "fused kernel",
    "mixed precision",
    "stochastic rounding",
    "sparse gradient",
    "gradient checkpointing",
    "memory bandwidth",
    "arithmetic intensity",
    "roofline model",
    "ridge point",
    "page fault",
    "noise floor",
    "confidence interval of a median",
    "wavelength",
    "critical dimension",
    "linear probe",
    "induction head",
    "previous-token head",
    "copy task",
    "passkey retrieval",
    "early-token curse",
    "KV cache",
    "recompilation",
    "graph break",
    "dynamic shapes",
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "atomic add",
    "deterministic algorithm",
    "lazy Adam",
    "Amdahl's law",
    "Xavier initialisation",
    "logits",
    "LayerNorm",
    "dropout",
    "kernel",
    "half precision",
    "nat",
    "wall-clock time",
    # kept in English on purpose (the glossary gives them no Chinese name): the translation keeps the name
    "float16",
    "bfloat16",
    "LongRoPE",
    "YaRN",
)


# Key terms that the Chinese text never leaves in English (outside code and math), except as a gloss.
_ONE_NAME = {"logits", "LayerNorm", "dropout", "nat"}
# English phrases in which a key term's word names another idea: "neural tangent kernel" is 神经正切核, not a 内核.
_OTHER_IDEAS = re.compile(r"neural tangent kernel", re.I)
# Other names that translations gave an idea the glossary names: each (a pattern) with the glossary's English term
# and the name to write, which is the glossary's Chinese name of the term, or holds it (fast pairs are 高频维度对), or,
# where the glossary keeps the English name, that name.
OTHER_NAMES = {
    "嵌入表": ("embedding table", "嵌入矩阵"),
    "词元表": ("embedding table", "嵌入矩阵"),
    "融合算子": ("fused kernel", "融合内核"),
    "挂钟时间": ("wall-clock time", "墙钟时间"),
    "长上下文旋转位置编码": ("LongRoPE", "LongRoPE"),
    "快频率对": ("dimension pair", "高频维度对"),
    "慢频率对": ("dimension pair", "低频维度对"),
    "频率对": ("dimension pair", "维度对"),
    "(?<![很加变缓赶尽])快(?:速)?对(?![齐话应待比照])": ("dimension pair", "高频维度对"),
    "(?<![很加变缓赶尽])慢(?:速)?对(?![齐话应待比照])": ("dimension pair", "低频维度对"),
    "快速维度对": ("dimension pair", "高频维度对"),
    "慢速维度对": ("dimension pair", "低频维度对"),
}


def glossary_terms(glossary: Path = ROOT / "book" / "glossary.md") -> dict[str, list[str]]:
    """Each glossary entry's English names, mapped to its Chinese names (the term lines of a ``{glossary}``)."""
    body = glossary.read_text(encoding="utf-8").split(":::{glossary}", 1)[1].split("\n:::", 1)[0]
    terms: dict[str, list[str]] = {}
    for entry in re.split(r"\n\s*\n(?=\S)", body.strip()):
        names = [line.strip() for line in entry.splitlines() if line.strip() and not line[0].isspace()]
        names = [name for name in names if not name.startswith(":")]
        chinese = [name for name in names if re.search(r"[\u4e00-\u9fff]", name)]
        for name in names:
            if name not in chinese:
                terms[name] = chinese
    return terms


def _term_pattern(term: str) -> re.Pattern:
    words = [re.escape(word) for word in re.split(r"[-\s]+", term)]
    return re.compile(r"(?<![\w-])" + r"[-\s]+".join(words) + r"(?:s|es)?(?![\w-])", re.I)


def term_problems(msgid: str, msgstr: str, terms: dict[str, list[str]]) -> list[str]:
    """The key terms that ``msgid`` names (outside code, math and link targets) and ``msgstr`` does not render with
    the glossary's Chinese name (or keep in English, where the glossary gives none), and the other names of an idea
    (``OTHER_NAMES``) that ``msgstr`` uses."""
    if msgid.strip() in terms:
        return []  # a glossary entry's own name, kept as it is: chapters reference the entry by it
    prose, translated = _OTHER_IDEAS.sub(" ", _NOT_WORDS.sub(" ", msgid)), _NOT_WORDS.sub(" ", msgstr)
    named = [term for term in KEY_TERMS if term in terms and _term_pattern(term).search(prose)]
    # a term with a Chinese name is written with it; a term the glossary keeps in English keeps its English name
    missing = [
        f"{term!r} is {' or '.join(terms[term])}" for term in named if terms[term] and not _named(msgstr, terms[term])
    ]
    missing += [
        f"{term!r} keeps its English name"
        for term in named
        if not terms[term] and not _term_pattern(term).search(msgstr)
    ]
    # one name per idea: the English term is left only as a gloss right after its Chinese name, 层归一化（LayerNorm）
    left = [
        f"{term!r} left in English: write {terms[term][0]}"
        for term in KEY_TERMS
        if terms.get(term) and term in _ONE_NAME
        for found in _term_pattern(term).finditer(translated)
        if not translated[: found.start()].endswith(tuple(f"{zh}{bold}（" for zh in terms[term] for bold in ("", "**")))
    ]
    for other, (term, name) in OTHER_NAMES.items():
        if (seen := re.search(other, translated)) and seen.group(0) not in terms.get(term, []):
            left.append(f"{seen.group(0)!r} is a second name of {term!r}: write {name}")
    return missing + left


def _named(msgstr: str, names: list[str]) -> bool:
    """True if ``msgstr`` holds one of ``names``."""
    return any(name in msgstr for name in names)


_CODE = re.compile(r"`+[^`]+?`+")
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\s][^$]*?\$", re.S)
_TARGET = re.compile(r"\]\(([^)\s]*)\)")
_ROLE = re.compile(r"\{[a-z:]+\}")
# Emphasis that starts or ends with punctuation does not close before a Chinese character (CommonMark's flanking
# rules): **学习目标。**本章 stays literal asterisks. The punctuation goes outside the span.
_EMPHASIS = re.compile(r"(?<!\*)(\*\*?)(?!\s)(.+?)(?<!\s)\1(?!\*)")
_PUNCTUATION = "，。：；？！、（）“”‘’「」《》,.:;?!()\"'"


def markup_problems(msgid: str, msgstr: str) -> list[str]:
    """How ``msgstr`` breaks what a translation keeps: inline code, math, link targets and roles, the same in both."""
    problems = []
    for name, pattern in (("inline code", _CODE), ("math", _MATH), ("link target", _TARGET), ("role", _ROLE)):
        source, translated = sorted(pattern.findall(msgid)), sorted(pattern.findall(msgstr))
        if source != translated:
            missing = [x for x in source if x not in translated] or source
            extra = [x for x in translated if x not in source] or translated
            problems.append(f"{name} differs: English has {missing[:3]}, Chinese has {extra[:3]}")
    if msgid.count("**") != msgstr.count("**"):
        problems.append(f"bold: English has {msgid.count('**')} '**', Chinese has {msgstr.count('**')}")
    for span in _EMPHASIS.finditer(_CODE.sub("``", msgstr)):
        if re.search(r"[\u4e00-\u9fff]", span.group(2)) and (
            span.group(2)[0] in _PUNCTUATION or span.group(2)[-1] in _PUNCTUATION
        ):
            problems.append(f"emphasis {span.group(0)!r} starts or ends with punctuation: move it outside")
    number = re.match(r"(\d+[a-z]?\.(?:\d+(?:\.\d+)*)?) ", msgid)
    if number and not msgstr.replace("\\.", ".", 1).startswith(number.group(1)):
        problems.append(f"the heading's number {number.group(1)!r} must start the translation")
    if re.match(r"\d+\. ", msgstr):
        # A translation is parsed again on its own: "5. 长序列" would be a list, not a title. "5\. " renders "5. ".
        problems.append(f"write {msgstr[: msgstr.index('.')]}\\. at the start, or Markdown reads a numbered list")
    return problems


@dataclass
class PageStatus:
    """The state of one page's catalogue: entries in all, and how many are translated, fuzzy or untranslated."""

    page: str
    entries: int
    translated: int
    fuzzy: int
    untranslated: int

    @property
    def done(self) -> bool:
        return self.translated == self.entries

    @property
    def share(self) -> float:
        return self.translated / self.entries if self.entries else 1.0


def read_catalogue(po: Path) -> Catalog:
    """The catalogue in the file ``po``."""
    with open(po, "rb") as f:
        return read_po(f)


def page_status(po: Path, page: str) -> PageStatus:
    """Count the entries of the catalogue ``po`` of ``page`` (the header does not count)."""
    messages = [m for m in read_catalogue(po) if m.id]
    fuzzy = sum(m.fuzzy for m in messages)
    untranslated = sum(not m.fuzzy and not m.string for m in messages)
    return PageStatus(page, len(messages), len(messages) - fuzzy - untranslated, fuzzy, untranslated)


def status(catalogues: Path = CATALOGUES) -> list[PageStatus]:
    """Every page's catalogue under ``catalogues``, in name order."""
    return [
        page_status(po, po.relative_to(catalogues).with_suffix("").as_posix())
        for po in sorted(catalogues.rglob("*.po"))
    ]


def report(pages: list[PageStatus]) -> str:
    """One line for the whole edition, then one per page with work left."""
    total = sum(p.entries for p in pages)
    done = sum(p.translated for p in pages)
    lines = [f"Chinese edition: {done} of {total} entries translated in {len(pages)} pages"]
    for p in pages:
        if not p.done:
            lines.append(f"  {p.page}: {p.untranslated} untranslated, {p.fuzzy} fuzzy (of {p.entries})")
    return "\n".join(lines)


def extract(root: Path, out: Path) -> Path:
    """Run Sphinx's gettext builder on the book in ``root``; returns the folder of the ``.pot`` templates."""
    command = [*JUPYTER_BOOK, "build", str(root), "--builder", "custom", "--custom-builder", "gettext"]
    subprocess.run([*command, "--path-output", str(out)], check=True, stdout=subprocess.DEVNULL)
    return out / "_build" / "gettext"


# babel marks an entry "python-format" when its English has "%" or "{}"; these are prose, never format strings.
_FORMAT_FLAGS = {"python-format", "python-brace-format"}


def tidy(po: Path) -> int:
    """Give every untranslated or fuzzy entry of ``po`` without words its English text, and drop babel's format
    flags; returns how many entries were filled."""
    catalog = read_catalogue(po)
    filled, changed = 0, False
    for message in catalog:
        if not message.id:
            continue
        if _FORMAT_FLAGS & message.flags:
            message.flags -= _FORMAT_FLAGS
            changed = True
        if (message.fuzzy or not message.string) and verbatim(message.id):
            message.string = message.id
            message.flags.discard("fuzzy")
            message.previous_id = []
            filled += 1
    if filled or changed:
        with open(po, "wb") as f:
            write_po(f, catalog, width=0)
    return filled


def refresh(root: Path = ROOT) -> None:
    """Extract the English pages and merge them into the catalogues (``sphinx-intl update``), then fill the
    entries without words. Entries that left the English pages are dropped."""
    from sphinx_intl import basic

    with tempfile.TemporaryDirectory() as tmp:
        templates = extract(root, Path(tmp))
        basic.update(str(root / "locales"), str(templates), (LANGUAGE,), line_width=0, ignore_obsolete=True, jobs=1)
    for po in sorted((root / "locales" / LANGUAGE / "LC_MESSAGES" / "book").rglob("*.po")):
        tidy(po)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Refresh the Chinese edition's catalogues and list what is left.")
    parser.add_argument("--check", action="store_true", help="only list what is left; exit 1 unless all is done")
    args = parser.parse_args(argv)
    if not args.check:
        refresh()
    pages = status()
    print(report(pages))
    if not args.check:
        print(
            f"Translate in {CATALOGUES.relative_to(ROOT)}/<page>.po: fill each empty msgstr, and for a fuzzy "
            "entry fix the msgstr, then delete its '#, fuzzy' line and its '#| msgid' lines."
        )
    return 0 if all(p.done for p in pages) else 1


if __name__ == "__main__":
    sys.exit(main())
