"""The chapters' lab: what the chapters measure and draw, one module per chapter topic.

``diagram`` (the introduction's map of the input layer), ``token_embedding`` and ``skipgram`` (chapter 1: the table and
its toy skip-gram training), ``scaling`` and ``tiny_lm`` (2: the small seeded Transformer runs), ``probe`` (the linear
readers of chapters 2 and 4), ``sinusoidal`` and ``pair_animation`` (3), ``fusion`` and ``fusion_figures`` (4),
``training`` (the tiny attention models chapters 3 and 4 train), ``corpus``, ``decoder``, ``extrapolation``, ``heads``
and ``diagnostics`` (5: the CPython text and probes, the study's model, the length-generalisation study, what its
attention heads do, reading its results), ``optimization``, ``precision`` (training in bfloat16), ``bench`` (the timing
harness), ``roofline``, ``profile_step``, ``compiled`` (what torch.compile makes of the input block),
``summation_order`` (the embedding backward's order of additions) and ``sharding`` (FSDP row sharding against vocabulary
parallelism) (6), ``widgets`` (the explorers readers drive), ``table`` (the chapters' text tables). Each function
returns numbers or a ``Figure``; the chapters print and show them.
The lab imports the library (the layers at the top of :mod:`course_embed`), never the other way round.
"""
