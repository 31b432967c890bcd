"""The course's machinery: execute chapters (``notebooks``), the execution status page (``status``), the graded
exercises (``grading``), the offline site (``site``, a Sphinx extension) and the ``course-embed`` command (``cli``).

Nothing a model needs lives here; the tools import the library and the lab.
"""
