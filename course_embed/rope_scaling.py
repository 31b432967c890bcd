"""RoPE context extension: the frequencies and attention factors of each ``rope_scaling`` type.

Shapes: ``h_d`` head dim (even), ``p = h_d / 2`` rotation pairs; frequencies are ``(p,)`` float64 tensors.

The types, with the key names model configs use: ``"linear"`` position interpolation (Chen et al., 2023), ``"ntk"``
NTK-aware base scaling (bloc97, 2023), ``"dynamic"`` NTK (emozilla, 2023), ``"yarn"`` (Peng et al., 2024, with
DeepSeek's ``mscale`` options), ``"llama3"``, ``"longrope"`` (Ding et al., 2024) and ``"proportional"``
(transformers 5, Gemma: partial rotation as zero frequencies of the whole head). Each is a pure function from the
config to ``(frequencies, attention factor)``: :func:`rope_parameters`. The formulas follow Hugging Face
``transformers.modeling_rope_utils``, against which ``tests/test_oracles.py`` checks them.
:class:`course_embed.rotary.RotaryEmbedding` applies them.
"""

from __future__ import annotations

import math

import torch

from .checks import check_int, check_number
from .rope_config import check_factor_lists, check_rope_scaling, rotary_dims


def _check_head_dim(head_dim: int) -> int:
    head_dim = check_int(head_dim, "head_dim")
    if head_dim < 2 or head_dim % 2:
        raise ValueError(
            f"head_dim must be a positive even integer (RoPE rotates pairs of dims), got {head_dim}; use "
            f"{max(2, head_dim + head_dim % 2)}, or rotate part of each head with partial_rotary_factor"
        )
    return head_dim


def _check_base(base: float) -> float:
    fix = "use the model config's rope_theta, e.g. 10000 (RoFormer, LLaMA 2) or 500000 (Llama 3)"
    return check_number(base, "base (rope_theta)", above=1.0, fix=fix)


def rope_frequencies(head_dim: int, base: float = 10000.0, *, dtype=torch.float64, device=None) -> torch.Tensor:
    """Angular frequencies ``theta_i = base**(-2i/h_d)`` of the ``p`` pairs, fastest first.

    Shapes:
        ``(p,)`` with ``p = h_d / 2`` pairs, in ``dtype`` (float64 by default).

    Example:
        >>> import course_embed as ce
        >>> ce.rope_frequencies(8)  # theta_i for i = 0 .. 3
        tensor([1.0000, 0.1000, 0.0100, 0.0010], dtype=torch.float64)
        >>> ce.rope_frequencies(128, base=500000.0).shape  # LLaMA 3's head and base
        torch.Size([64])
    """
    _check_head_dim(head_dim)
    _check_base(base)
    return base ** -(torch.arange(0, head_dim, 2, dtype=dtype, device=device) / head_dim)


def ntk_base(base: float, head_dim: int, factor: float) -> float:
    """NTK-aware scaling: the base ``base * factor**(h_d / (h_d - 2))``.

    The fastest pair keeps its frequency (``i = 0``) and the slowest is slowed down by exactly ``factor``, so
    high frequencies extrapolate and low frequencies interpolate, with a geometric blend in between.
    """
    if head_dim <= 2:
        raise ValueError(f"NTK scaling needs head_dim > 2 (the exponent is h_d / (h_d - 2)), got {head_dim}")
    return base * factor ** (head_dim / (head_dim - 2))


def dynamic_ntk_base(
    base: float, head_dim: int, factor: float, seq_len: int, original_max_position_embeddings: int
) -> float:
    """Dynamic NTK: the base for a sequence of ``seq_len`` tokens (as ``_compute_dynamic_ntk_parameters``).

    ``base * (factor * L / L0 - (factor - 1))**(h_d / (h_d - 2))`` with ``L = max(seq_len, L0)``: plain RoPE up to
    the original length ``L0``, then a base that grows with the current length.
    """
    if head_dim <= 2:
        raise ValueError(f"NTK scaling needs head_dim > 2 (the exponent is h_d / (h_d - 2)), got {head_dim}")
    original = original_max_position_embeddings
    length = max(seq_len, original)
    return base * (factor * length / original - (factor - 1)) ** (head_dim / (head_dim - 2))


def yarn_attention_factor(factor: float, mscale: float = 1.0) -> float:
    """YaRN's default attention factor ``0.1 mscale ln(factor) + 1`` (1 for ``factor <= 1``).

    It multiplies cos and sin, so the attention logits grow by its square, the paper's ``1/t``. DeepSeek's
    configs set ``mscale`` and ``mscale_all_dim``; the factor is then the ratio of the two (see
    :func:`rope_parameters`).
    """
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_ramp(
    head_dim: int,
    base: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> torch.Tensor:
    """YaRN's interpolation ramp ``gamma_i`` in ``[0, 1]`` per pair, ``(p,)`` float64, fastest pair first.

    Pair ``i`` turns ``r_i = L0 theta_i / (2 pi)`` times over the original length ``L0``. Pairs that turn more than
    ``beta_fast`` times keep their frequency (``gamma = 0``), pairs that turn less than ``beta_slow`` times are
    interpolated by ``factor`` (``gamma = 1``), and the pair index is ramped linearly in between. The bounds are
    the pair indices where ``r = beta``, floored and ceiled when ``truncate`` (the reference code).
    """
    _check_head_dim(head_dim)
    beta_fast = check_number(beta_fast, "beta_fast", above=0.0)
    beta_slow = check_number(beta_slow, "beta_slow", above=0.0)

    def pair_index(rotations: float) -> float:  # solve L0 * base**(-2i/h_d) / (2 pi) = rotations for i
        return head_dim * math.log(original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_index(beta_fast), pair_index(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # avoid 0/0, as the reference code does
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return ((i - low) / (high - low)).clamp(0, 1)


def yarn_frequencies(
    head_dim: int,
    base: float,
    factor: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> torch.Tensor:
    """YaRN ("NTK-by-parts") frequencies ``(p,)`` float64: ``theta_i ((1 - gamma_i) + gamma_i / factor)``."""
    gamma = yarn_ramp(head_dim, base, original_max_position_embeddings, beta_fast, beta_slow, truncate)
    theta = rope_frequencies(head_dim, base)
    return theta * (1 - gamma) + theta / factor * gamma


def llama3_frequencies(
    head_dim: int,
    base: float,
    factor: float,
    original_max_position_embeddings: int,
    low_freq_factor: float,
    high_freq_factor: float,
) -> torch.Tensor:
    """Llama 3.1's frequencies ``(p,)`` float64: keep short wavelengths, interpolate long ones, blend between.

    With wavelength ``lambda_i = 2 pi / theta_i`` and ``L0`` the original length: ``lambda < L0 / high_freq_factor``
    keeps ``theta_i``; ``lambda > L0 / low_freq_factor`` gives ``theta_i / factor``; in between, with
    ``a = (L0 / lambda - low_freq_factor) / (high_freq_factor - low_freq_factor)``, ``(1 - a) theta_i / factor +
    a theta_i``: the same blend as YaRN, but ramped in ``L0 / lambda`` (turns) instead of the pair index.
    """
    if not 0 < low_freq_factor < high_freq_factor:
        raise ValueError(
            f"llama3 needs 0 < low_freq_factor < high_freq_factor, got {low_freq_factor} and {high_freq_factor}; "
            f"Llama 3.1 uses 1 and 4"
        )
    theta = rope_frequencies(head_dim, base)
    turns = original_max_position_embeddings / (2 * math.pi / theta)  # L0 / wavelength
    blend = ((turns - low_freq_factor) / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    return theta / factor * (1 - blend) + theta * blend


def rope_parameters(
    head_dim: int, base: float = 10000.0, rope_scaling: dict | None = None, seq_len: int | None = None
) -> tuple[torch.Tensor, float]:
    """Frequencies ``(p,)`` (float64) and attention factor for a model config's ``rope_scaling``.

    Args:
        head_dim: ``h_d`` (even).
        base: ``rope_theta``; a ``rope_theta`` key in the dict (transformers 5's ``rope_parameters``) takes its
            place.
        rope_scaling: ``None`` for plain RoPE, or a dict with ``"rope_type"`` (or the older ``"type"``; ``"su"``
            is LongRoPE) in ``course_embed.rope_config.ROPE_SCALINGS`` and its keys: ``factor`` (>= 1);
            ``original_max_position_embeddings`` (the training length ``L0``); for YaRN optionally ``beta_fast``
            (32), ``beta_slow`` (1), ``truncate`` (True) and ``attention_factor`` (default
            ``yarn_attention_factor(factor)``, or with ``mscale`` and ``mscale_all_dim`` the ratio
            ``yarn_attention_factor(factor, mscale) / yarn_attention_factor(factor, mscale_all_dim)``); for llama3
            ``low_freq_factor`` and ``high_freq_factor`` (``llama3_frequencies``); for LongRoPE
            ``short_factor`` and ``long_factor`` (``p`` divisors of the frequencies, the long ones used past
            ``L0``) and ``attention_factor`` (default ``sqrt(1 + ln(factor) / ln(L0))``). Any type may carry
            ``partial_rotary_factor`` ``f``: the frequencies are those of the ``int(h_d f)`` rotated dims, as
            transformers computes them (for ``"proportional"``: the ``h_d / 2`` frequencies of the whole head, those
            past the first ``int(f h_d / 2)`` set to 0, all divided by the optional ``factor``).
        seq_len: current sequence length, used by ``"dynamic"`` and ``"longrope"`` only.

    Every value is checked (``course_embed.rope_config.check_rope_scaling``): ``nan``/``inf``, a zero
    attention factor, ``beta_fast <= beta_slow`` or factor lists of the wrong length raise a ``ValueError``.
    Linear interpolation divides the frequencies by ``factor``, which is the same as dividing positions by it.

    Shapes:
        frequencies ``(p,)`` float64, with ``p = h_d / 2`` pairs, or ``int(h_d f) / 2`` with a
        ``partial_rotary_factor`` ``f`` (except ``"proportional"``, above); the attention factor is a Python float.

    Example:
        >>> import torch, course_embed as ce
        >>> freqs, factor = ce.rope_parameters(64, rope_scaling={"rope_type": "linear", "factor": 4.0})
        >>> freqs.shape, factor
        (torch.Size([32]), 1.0)
        >>> bool(torch.equal(freqs, ce.rope_frequencies(64) / 4))  # linear: every frequency divided by 4
        True
    """
    _check_head_dim(head_dim)
    scaling = check_rope_scaling(rope_scaling)
    kind = scaling["rope_type"]
    base = _check_base(scaling.get("rope_theta", base))
    dim = rotary_dims(head_dim, scaling)
    check_factor_lists(scaling, dim // 2)
    factor = scaling.get("factor", 1.0)
    original = scaling.get("original_max_position_embeddings", 1)
    if kind == "default":
        return rope_frequencies(dim, base), 1.0
    if kind == "proportional":  # the whole head's frequencies, the pairs past the partial share at 0 (no turn)
        theta = rope_frequencies(head_dim, base)
        theta[int(scaling.get("partial_rotary_factor", 1.0) * head_dim // 2) :] = 0.0
        return theta / factor, 1.0
    if kind == "linear":
        return rope_frequencies(dim, base) / factor, 1.0
    if kind == "ntk":
        return rope_frequencies(dim, ntk_base(base, dim, factor)), 1.0
    if kind == "dynamic":
        return rope_frequencies(dim, dynamic_ntk_base(base, dim, factor, seq_len or 0, original)), 1.0
    if kind == "llama3":
        return llama3_frequencies(
            dim, base, factor, original, scaling["low_freq_factor"], scaling["high_freq_factor"]
        ), 1.0
    attention = scaling.get("attention_factor")
    if kind == "longrope":
        divisors = scaling["long_factor"] if (seq_len or 0) > original else scaling["short_factor"]
        if attention is None:
            attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
        return rope_frequencies(dim, base) / torch.tensor(divisors, dtype=torch.float64), float(attention)
    if attention is None:
        mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
        attention = (
            yarn_attention_factor(factor, mscale) / yarn_attention_factor(factor, mscale_all_dim)
            if mscale and mscale_all_dim
            else yarn_attention_factor(factor)
        )
    theta = yarn_frequencies(
        dim,
        base,
        factor,
        original,
        scaling.get("beta_fast", 32.0),
        scaling.get("beta_slow", 1.0),
        scaling.get("truncate", True),
    )
    return theta, float(attention)


def softmax_scale(qk_head_dim: int, rope_scaling: dict | None = None) -> float:
    """The attention logits' scale: ``qk_head_dim**-0.5``, times ``m**2`` for a DeepSeek YaRN config.

    DeepSeek-V2/V3 set ``mscale_all_dim`` and scale the **softmax** as well as cos/sin:
    ``scale = qk_head_dim**-0.5 * m**2`` with ``m = 0.1 * mscale_all_dim * ln(factor) + 1`` (1 when ``factor <=
    1``), where ``qk_head_dim`` is the whole query/key head (DeepSeek-V3: 128 + 64 = 192), not the rotated part.
    Combined with cos/sin multiplied by ``yarn_attention_factor(factor, mscale) / m`` (:func:`rope_parameters`),
    the logits grow by ``yarn_attention_factor(factor, mscale)**2`` overall. Without ``mscale_all_dim`` (other
    YaRN configs) the scale is the plain ``qk_head_dim**-0.5``. Reference: transformers' ``yarn_apply_mscale``.

    Shapes:
        no tensors: an int and a config dict in, a Python float out.

    Example:
        >>> import course_embed as ce
        >>> ce.softmax_scale(128)  # 128**-0.5
        0.08838834764831845
        >>> yarn = {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
        ...         "original_max_position_embeddings": 4096}  # a DeepSeek-V3-style scaling
        >>> round(ce.softmax_scale(192, yarn), 4)  # 192**-0.5 * m**2 with m = 0.1 ln(40) + 1
        0.1352
    """
    scaling = check_rope_scaling(rope_scaling)
    scale = qk_head_dim**-0.5
    mscale_all_dim = scaling.get("mscale_all_dim")
    if scaling["rope_type"] != "default" and mscale_all_dim:
        scale *= yarn_attention_factor(scaling["factor"], mscale_all_dim) ** 2
    return scale
