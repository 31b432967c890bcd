"""Every example in the library's docstrings runs and prints what it shows (doctest), and every public name's docstring
has what the site's library reference (book/reference.md) shows of it: its shapes and an example."""

import doctest
import importlib
import inspect

import pytest

import course_embed as ce

# The modules that define the public names (``ce.__all__``), each tested whole: its other docstrings' examples too.
MODULES = sorted({getattr(ce, name).__module__ for name in ce.__all__})


def test_the_doctests_cover_every_module_with_a_public_name():
    layers = ["alibi", "fusion", "learned", "multilingual", "parallel", "relative", "rotary", "sinusoidal", "token"]
    helpers = ["rope_config", "rope_scaling", "runtime"]
    assert sorted(f"course_embed.{name}" for name in layers + helpers) == MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("name", ce.__all__)
def test_every_public_name_states_its_shapes_and_shows_an_example(name):
    """Google-style sections, as napoleon renders them on the site: ``Shapes:`` (a custom section) and ``Example:``
    with a doctest, which the test above runs."""
    lines = inspect.getdoc(getattr(ce, name)).splitlines()
    assert "Shapes:" in lines, f"{name}: no 'Shapes:' section"
    assert "Example:" in lines, f"{name}: no 'Example:' section"
    example = lines[lines.index("Example:") + 1 :]
    assert any(line.lstrip().startswith(">>> ") for line in example), f"{name}: its example has no doctest"
