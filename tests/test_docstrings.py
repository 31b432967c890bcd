"""Every example in the library's docstrings runs and prints what it shows (doctest)."""

import doctest
import importlib

import pytest

MODULES = ["alibi", "fusion", "learned", "multilingual", "relative", "rotary", "sinusoidal", "token"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(f"course_embed.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
