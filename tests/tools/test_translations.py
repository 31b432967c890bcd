"""course_embed.tools.translations: the Chinese edition's catalogues are complete, current and consistent."""

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import write_po

from course_embed.tools import translations as tr

from .test_notebooks import ROOT, toc_files


def _write(po, messages, template=False):
    catalog = Catalog(locale=None if template else "zh_CN")
    for msgid, msgstr in messages:
        catalog.add(msgid, "" if template else msgstr)
    po.parent.mkdir(parents=True, exist_ok=True)
    with open(po, "wb") as f:
        write_po(f, catalog, width=0)


@pytest.fixture(scope="module")
def catalogues():
    pages = tr.CATALOGUES.rglob("*.po")
    return {po.relative_to(tr.CATALOGUES).with_suffix("").as_posix(): tr.read_catalogue(po) for po in pages}


def test_every_page_has_a_catalogue_and_every_entry_is_translated(catalogues):
    assert {f"{entry}" for entry in toc_files()} <= set(catalogues)
    pages = tr.status()
    assert [p for p in pages if not p.done] == [], tr.report(pages)
    assert sum(p.entries for p in pages) > 1000


def test_the_catalogues_hold_exactly_the_english_pages_entries(tmp_path, catalogues):
    """An English edit that nobody carried into the catalogues fails here (run the refresh: its entry comes back
    fuzzy or untranslated, and this test's neighbour says which)."""
    templates = tr.extract(ROOT, tmp_path)
    for pot in templates.rglob("*.pot"):
        page = pot.relative_to(templates).with_suffix("").as_posix()
        english = {m.id for m in tr.read_catalogue(pot) if m.id}
        assert {m.id for m in catalogues[page] if m.id} == english, (
            f"{page}: the catalogue is older than the page; run python3 -m course_embed.tools.translations"
        )


def test_every_translation_keeps_the_markup_and_the_glossarys_terms(catalogues):
    terms = tr.glossary_terms()
    problems = [
        f"{page}: {problem}: {m.id[:80]!r}"
        for page, catalogue in catalogues.items()
        for m in catalogue
        if m.id and m.string
        for problem in tr.markup_problems(m.id, m.string) + tr.term_problems(m.id, m.string, terms)
    ]
    assert problems == []


def test_every_key_term_has_its_chinese_name_in_the_glossary():
    terms = tr.glossary_terms()
    assert [term for term in tr.KEY_TERMS if term not in terms] == []
    # kept in English on purpose, and said so in the glossary's opening
    kept = {term for term in tr.KEY_TERMS if not terms[term]}
    assert kept == {"float16", "bfloat16", "LongRoPE", "YaRN"}
    opening = (ROOT / "book" / "glossary.md").read_text(encoding="utf-8").split(":::{glossary}", 1)[0]
    assert all(term in opening for term in kept - {"YaRN"}) and "keeps its English name" in opening
    assert terms["positional encoding"] == ["位置编码"]
    assert terms["key padding mask"] == ["填充掩码", "键填充掩码"]
    assert terms["RoPE"] == ["旋转位置编码"]  # a second English name of the same entry
    assert terms["kernel"] == ["内核"] and terms["fused kernel"] == ["融合内核"]
    assert terms["half precision"] == ["半精度"] and terms["float16"] == []


def test_one_chinese_name_names_one_idea():
    """No Chinese name is given to two glossary entries, and every other name the checker rejects points to an entry
    and to the name that entry gives (or holds it: 高频维度对 is a 维度对)."""
    entries = {}
    for chinese in tr.glossary_terms().values():
        for name in chinese:
            entries.setdefault(name, set()).add(tuple(chinese))
    assert {name: found for name, found in entries.items() if len(found) > 1} == {}
    terms = tr.glossary_terms()
    for other, (term, name) in tr.OTHER_NAMES.items():
        assert term in terms, other
        assert any(zh in name for zh in terms[term]) if terms[term] else name == term, (other, term, name)


def test_term_problems_finds_a_term_left_in_english_or_translated_otherwise():
    terms = tr.glossary_terms()
    assert tr.term_problems("Add positional encodings to the rows.", "把位置编码加到行上。", terms) == []
    assert tr.term_problems("Add positional encodings.", "加上位置向量。", terms) == [
        "'positional encoding' is 位置编码"
    ]
    assert tr.term_problems("Weight tying shares the table.", "权重共享让两层共用一张表。", terms) == []
    assert tr.term_problems("Call `attention(q, k)`.", "调用 `attention(q, k)`。", terms) == []  # code is not prose
    assert tr.term_problems("positional encoding", "positional encoding", terms) == []  # the glossary's own name


def test_term_problems_finds_a_second_name_for_one_idea():
    """logits, LayerNorm, dropout and nats have one Chinese name each (the glossary's); the English word stays only as
    a gloss right after it. An idea's other names (OTHER_NAMES) are found wherever they stand."""
    terms = tr.glossary_terms()
    assert tr.term_problems("The logits and LayerNorm.", "对数几率（logits）与层归一化（LayerNorm）。", terms) == []
    assert tr.term_problems("The logits.", "**对数几率**（logits）。", terms) == []
    assert tr.term_problems("The logits and dropout.", "对数几率与随机失活：logits 全部相等。", terms) == [
        "'logits' left in English: write 对数几率"
    ]
    assert tr.term_problems("A LayerNorm.", "一个 LayerNorm。", terms) == [
        "'LayerNorm' is 层归一化",
        "'LayerNorm' left in English: write 层归一化",
    ]
    assert tr.term_problems("Call `nn.LayerNorm`.", "调用 `nn.LayerNorm`。", terms) == []  # code keeps its name
    assert tr.term_problems("The table.", "这张嵌入表。", terms) == [
        "'嵌入表' is a second name of 'embedding table': write 嵌入矩阵"
    ]
    assert tr.term_problems("Wall-clock time.", "挂钟时间。", terms) == [
        "'wall-clock time' is 墙钟时间",
        "'挂钟时间' is a second name of 'wall-clock time': write 墙钟时间",
    ]
    assert tr.term_problems("It costs 0.3 nats.", "它的代价是 0.3 nats。", terms) == [
        "'nat' is 奈特",
        "'nat' left in English: write 奈特",
    ]
    assert tr.term_problems("In nats per byte.", "单位为每字节奈特（nats per byte）。", terms) == []


@pytest.mark.parametrize(
    "msgid, msgstr, problem",
    [
        ("A fused kernel.", "一个融合内核。", None),
        ("A fused kernel.", "一个融合算子。", "'融合算子' is a second name of 'fused kernel': write 融合内核"),
        ("One kernel per operator.", "每个算子一个内核。", None),  # op and kernel are two ideas, 算子 and 内核
        ("One kernel.", "一个核函数。", "'kernel' is 内核"),
        ("NTK is the neural tangent kernel.", "NTK 即神经正切核。", None),  # another idea, not a 内核
        ("The slow pairs.", "慢频率对。", "'慢频率对' is a second name of 'dimension pair': write 低频维度对"),
        ("The fast pairs.", "快对。", "'快对' is a second name of 'dimension pair': write 高频维度对"),
        ("The fast pairs.", "高频维度对。", None),
        ("It aligns quickly.", "它很快对齐了。", None),  # 快对 inside other words
        ("The pairs.", "各个频率对。", "'频率对' is a second name of 'dimension pair': write 维度对"),
        ("In half precision.", "用半精度。", None),
        ("In float16 or bfloat16.", "用半精度。", "'float16' keeps its English name"),
        ("LongRoPE searches.", "长上下文旋转位置编码搜索。", "'LongRoPE' keeps its English name"),
        ("LongRoPE searches.", "LongRoPE 搜索。", None),
    ],
)
def test_term_problems_finds_other_names_and_english_names_kept_on_purpose(msgid, msgstr, problem):
    found = tr.term_problems(msgid, msgstr, tr.glossary_terms())
    assert (found == []) if problem is None else problem in found, found


@pytest.mark.parametrize(
    "msgstr, problem",
    [
        ("见 `F.embedding` 与 $d$，[第 3 章](03.ipynb#a)。", None),
        ("见 `embedding` 与 $d$，[第 3 章](03.ipynb#a)。", "inline code differs"),
        ("见 `F.embedding` 与 $D$，[第 3 章](03.ipynb#a)。", "math differs"),
        ("见 `F.embedding` 与 $d$，[第 3 章](03.ipynb#b)。", "link target differs"),
        ("见 `F.embedding` 与 $d$，第 3 章。", "link target differs"),
    ],
)
def test_markup_problems_compare_code_math_and_link_targets(msgstr, problem):
    found = tr.markup_problems("See `F.embedding` and $d$ in [chapter 3](03.ipynb#a).", msgstr)
    assert (found == []) if problem is None else any(problem in p for p in found), found


def test_markup_problems_catch_emphasis_that_would_not_render_and_lost_heading_numbers():
    assert tr.markup_problems("**Learning goals.** You can", "**学习目标**：你能够") == []
    assert "punctuation" in tr.markup_problems("**Learning goals.** You can", "**学习目标。**你能够")[0]
    assert "bold" in tr.markup_problems("**Goals.** You", "学习目标：你")[0]
    assert tr.markup_problems("1.3 A layer", "1.3 一层") == []
    assert "number" in tr.markup_problems("1.3 A layer", "一层")[0]
    # a translation is parsed on its own: "5. 长序列" would be a numbered list, not the chapter's title
    assert tr.markup_problems("5. Long sequences", "5\\. 长序列") == []
    assert "numbered list" in tr.markup_problems("5. Long sequences", "5. 长序列")[0]


def test_verbatim_entries_are_those_without_words():
    assert tr.verbatim("`f8187c213dd3`") and tr.verbatim("4.9 s") and tr.verbatim("$\\sqrt{d}$")
    assert tr.verbatim("2026-12-01, Python 3.11.7, torch 2.13.0, 2 CPUs")
    assert tr.verbatim("线性偏置注意力")
    assert not tr.verbatim("yes") and not tr.verbatim("All 10 chapters") and not tr.verbatim("[nbval](https://x)")


def test_an_edited_paragraph_comes_back_fuzzy_and_the_report_names_its_page(tmp_path):
    """The maintenance loop on a small catalogue: sphinx-intl's update (what the refresh runs) keeps an edited
    entry's old translation as a fuzzy suggestion, adds a new one untranslated, and ``tidy`` fills the entries
    without words; the report names the page and counts them."""
    from sphinx_intl import basic

    locales, pots = tmp_path / "locales", tmp_path / "pot"
    po = locales / "zh_CN" / "LC_MESSAGES" / "book" / "01.po"
    _write(po, [("The lookup copies rows.", "查表复制行。"), ("Summary", "小结")])
    _write(pots / "book" / "01.pot", [("The lookup copies whole rows.", ""), ("Summary", ""), ("12.5 s", "")], True)
    basic.update(str(locales), str(pots), ("zh_CN",), line_width=0, ignore_obsolete=True, jobs=1)
    assert tr.tidy(po) == 1
    messages = {m.id: m for m in tr.read_catalogue(po) if m.id}
    assert messages["The lookup copies whole rows."].fuzzy
    assert messages["The lookup copies whole rows."].string == "查表复制行。"
    assert messages["12.5 s"].string == "12.5 s" and not messages["12.5 s"].fuzzy
    state = tr.page_status(po, "book/01")
    assert (state.entries, state.translated, state.fuzzy, state.untranslated) == (3, 2, 1, 0)
    assert tr.report([state]) == (
        "Chinese edition: 2 of 3 entries translated in 1 pages\n  book/01: 0 untranslated, 1 fuzzy (of 3)"
    )


def test_the_theme_catalogue_is_complete():
    words = {m.id: m.string for m in tr.read_catalogue(tr.CATALOGUES / "theme.po") if m.id}
    assert words and all(words.values())
    assert words["Search this book..."] == "搜索本书……"
