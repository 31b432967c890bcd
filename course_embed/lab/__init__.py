"""The chapters' lab: what the chapters measure and draw, one module per chapter topic.

``token_embedding`` (chapter 1), ``scaling`` (2), ``sinusoidal`` (3), ``fusion`` (4), ``corpus``,
``extrapolation`` and ``diagnostics`` (5: the CPython text and probes, the length-generalisation study, reading its
results), ``optimization`` and ``bench`` (6, with the timing harness), ``widgets`` (the explorers readers drive).
Each function returns numbers or a ``Figure``; the chapters print and show them. The lab
imports the library (the layers at the top of :mod:`course_embed`), never the other way round.
"""
