"""Matplotlib figures the chapters show. Each function returns the ``Figure`` and never calls ``plt.show()``.

The numbers a figure shows come from :mod:`course_embed.analysis`, where they are tested.
"""

from __future__ import annotations

import matplotlib.pyplot as plt  # noqa: F401  (used by the chapter sections below)

# --- chapter 2: the sqrt(d) scaling ----------------------------------------------------------------------------


# --- chapter 3: sinusoidal mathematics -------------------------------------------------------------------------


# --- chapter 4: fusion ------------------------------------------------------------------------------------------
