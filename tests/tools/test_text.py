"""Text from a submission, made safe (course_embed/tools/grading/text.py): one set of characters removed everywhere."""

import pytest

from course_embed.tools.grading import text

HOSTILE = [
    "\x1b[2J\x1b]0;pwned\x07",  # terminal escapes: clear the screen, set the window title
    "\u202egnp.exe",  # a right-to-left override
    "zero\u200bwidth\u200fmark",
    "line\u2028separator\u2029",
    "\x9bC1 CSI",
]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_every_shown_form_drops_control_and_invisible_characters(hostile):
    for shown in (text.plain(hostile), text.bounded(hostile), text.quote(hostile), text.cell(hostile)):
        assert not text.CONTROL.search(shown), repr(shown)
        assert not any(ch in shown for ch in "\x1b\x07\x9b\u202e\u200b\u200f\u2028\u2029"), repr(shown)


def test_plain_keeps_tabs_and_newlines_and_bounded_folds_them():
    assert text.plain("a\tb\nc") == "a\tb\nc"
    assert text.bounded("a\tb\n  c", 10) == "a b c"
    assert text.bounded("x" * 50, 10) == "x" * 7 + "..."


def test_quote_keeps_the_first_line_and_cuts_at_a_word():
    assert text.quote("first line\nsecond") == "first line"
    long = "word " * 100
    quoted = text.quote(long)
    assert quoted.endswith("word [...]") and len(quoted) <= text.QUOTE_CHARS + 6
    assert text.quote(12) == "" and text.quote(None) == ""


def test_name_shows_identifiers_only():
    assert text.name("ValueError") == "ValueError"
    assert text.name("x; rm -rf /") == "an object"
    assert text.name("a" * 61, "an exception") == "an exception"
    assert text.name(None) == "an object"


@pytest.mark.parametrize("formula", ['=HYPERLINK("x")', "+1", "-2+3", "@SUM(A1)", "\tx", "\r=1"])
def test_cell_quotes_what_a_spreadsheet_would_read_as_a_formula(formula):
    assert text.cell(formula) == "'" + text.plain(formula)  # a carriage return is removed first
    assert text.cell("alice") == "alice"
