"""Text tables for the chapters' printed results: a header, one line per row, every column right-aligned.

A chapter collects its measurements in rows and prints them with one call, so its code shows what is measured, not
how the columns line up::

    show([("normal", 22.6226), ("xavier_uniform", 0.3121)], ["init", "RMS row norm"], ["", ".4f"])

prints::

              init  RMS row norm
            normal       22.6226
    xavier_uniform        0.3121
"""

from __future__ import annotations

from collections.abc import Sequence


def format_table(rows: Sequence[Sequence], columns: Sequence[str], formats: Sequence[str] | None = None) -> str:
    """``rows`` (each a sequence of ``len(columns)`` values) as text, one line per row under a header line.

    ``formats`` holds one format spec per column (``".4f"``, ``".1%"``, ``","``, ``"+.4f"``; ``""`` prints the value
    with ``str``). Each column is as wide as its widest cell, header included; cells are right-aligned, two spaces
    apart.
    """
    columns = [str(c) for c in columns]
    formats = [""] * len(columns) if formats is None else list(formats)
    if len(formats) != len(columns):
        raise ValueError(f"formats must hold one spec per column ({len(columns)}), got {len(formats)}")
    cells = [columns]
    for i, row in enumerate(rows):
        row = list(row)
        if len(row) != len(columns):
            raise ValueError(f"row {i} must hold {len(columns)} values (one per column), got {len(row)}: {row}")
        line = []
        for value, spec, name in zip(row, formats, columns, strict=True):
            try:
                line.append(format(value, spec))
            except (ValueError, TypeError) as err:
                raise ValueError(f"column {name!r}: cannot format {value!r} with spec {spec!r} ({err})") from None
        cells.append(line)
    widths = [max(len(line[j]) for line in cells) for j in range(len(columns))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)) for line in cells)


def show(rows: Sequence[Sequence], columns: Sequence[str], formats: Sequence[str] | None = None) -> None:
    """Print :func:`format_table` of the same arguments."""
    print(format_table(rows, columns, formats))
