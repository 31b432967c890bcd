"""The chapters' text tables: alignment, formats, and errors that name what to fix."""

import pytest

from course_embed.lab import table


def test_columns_are_right_aligned_to_the_widest_cell():
    text = table.format_table([("normal", 22.6226), ("xavier_uniform", 0.3121)], ["init", "norm"], ["", ".4f"])
    assert text.splitlines() == [
        "          init     norm",
        "        normal  22.6226",
        "xavier_uniform   0.3121",
    ]


def test_format_specs_apply_per_column():
    text = table.format_table([(109482240, 0.214, -0.5)], ["total", "share", "cos"], [",", ".1%", "+.2f"])
    assert text.splitlines()[1] == "109,482,240  21.4%  -0.50"


def test_without_formats_values_print_with_str():
    assert table.format_table([(1, "a")], ["x", "y"]) == "x  y\n1  a"


def test_show_prints_the_table(capsys):
    table.show([(1,)], ["n"])
    assert capsys.readouterr().out == "n\n1\n"


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="row 1 must hold 2 values"):
        table.format_table([(1, 2), (3,)], ["a", "b"])
    with pytest.raises(ValueError, match="formats must hold one spec per column"):
        table.format_table([(1, 2)], ["a", "b"], [".2f"])
    with pytest.raises(ValueError, match="column 'a': cannot format 'x'"):
        table.format_table([("x",)], ["a"], [".2f"])
