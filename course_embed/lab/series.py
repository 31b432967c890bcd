"""The check every figure function makes on the numbers it plots: a list of floats, of the right length, and
positive where the axis is logarithmic. Errors name the argument, so a learner knows which input to fix."""

from __future__ import annotations


def as_series(name: str, values, length: int | None = None, positive: bool = False) -> list[float]:
    """``values`` as a list of floats; raises ``ValueError`` naming ``name`` unless it holds ``length`` values
    (at least one when ``length`` is None), all ``> 0`` when ``positive`` (a log axis)."""
    values = [float(v) for v in values]
    if not values or (length is not None and len(values) != length):
        wanted = f"{length} values" if length is not None else "at least one value"
        raise ValueError(f"{name} must hold {wanted}, got {len(values)}")
    if positive and min(values) <= 0:
        raise ValueError(f"{name} must be positive for a log axis, got {min(values)}")
    return values
