import pytest

from course_embed.lab.series import as_series


def test_as_series_returns_floats():
    assert as_series("x", (1, 2.5)) == [1.0, 2.5]
    assert as_series("x", [3], length=1, positive=True) == [3.0]


@pytest.mark.parametrize(
    ("values", "length", "positive", "message"),
    [
        ([], None, False, "x must hold at least one value, got 0"),
        ([1, 2], 3, False, "x must hold 3 values, got 2"),
        ([1, 0], None, True, "x must be positive for a log axis, got 0.0"),
        ([1, -2], 2, True, "x must be positive for a log axis, got -2.0"),
    ],
)
def test_as_series_names_the_argument(values, length, positive, message):
    with pytest.raises(ValueError) as err:
        as_series("x", values, length, positive)
    assert str(err.value) == message
