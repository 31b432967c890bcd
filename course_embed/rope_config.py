"""RoPE settings as model configs write them: a checked ``rope_scaling`` dict, and a Hugging Face config read as is.

Shapes: ``h_d`` head dim, ``r`` rotated dims (``h_d``, or ``int(h_d * partial_rotary_factor)``), ``p = r / 2`` pairs.

:func:`check_rope_scaling` validates a ``rope_scaling`` dict once, when a layer is built, so that a wrong value fails
at construction with the argument, the value and the fix, never in the middle of generation: ``nan``/``inf``
factors, a YaRN ``attention_factor`` of 0 (q and k zeroed), ``beta_fast <= beta_slow``, LongRoPE factor lists of the
wrong length. :func:`rope_kwargs` turns a transformers 4 or 5 config (the object or its dict) into the arguments of
:class:`~course_embed.rotary.RotaryEmbedding`; ``RotaryEmbedding.from_config`` is the documented call.
"""

from __future__ import annotations

import math
import numbers
import operator

from .checks import check_number

#: rope_type -> (required keys, optional keys) of a ``rope_scaling`` dict. ``"ntk"`` (a fixed NTK-aware base) is
#: this package's name; transformers has no such type (there, NTK-aware scaling is a larger ``rope_theta``). YaRN's
#: ``finetuned`` (NousResearch configs) is accepted and, as in transformers, changes nothing.
ROPE_SCALINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "ntk": (("factor",), ()),
    "dynamic": (("factor", "original_max_position_embeddings"), ()),
    "yarn": (
        ("factor", "original_max_position_embeddings"),
        ("beta_fast", "beta_slow", "attention_factor", "truncate", "mscale", "mscale_all_dim", "finetuned"),
    ),
    "llama3": (("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"), ()),
    "longrope": (("factor", "original_max_position_embeddings", "long_factor", "short_factor"), ("attention_factor",)),
    "proportional": ((), ("factor",)),
}
#: old names still found in shipped configs
ALIASES = {"su": "longrope"}
#: keys any type may carry: the type itself, and transformers 5's ``rope_parameters`` extras
META_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")


def rope_type(rope_scaling: dict | None) -> str:
    """The type of a ``rope_scaling`` dict (``"rope_type"``, or the older ``"type"``; ``"su"`` is LongRoPE)."""
    scaling = rope_scaling or {}
    name = scaling.get("rope_type", scaling.get("type", "default"))
    return ALIASES.get(name, name)


def rotary_dims(head_dim: int, rope_scaling: dict | None) -> int:
    """Dims that rotate, ``int(h_d * partial_rotary_factor)`` (even); the rest of each head passes through.

    ``"proportional"`` RoPE (transformers 5, Gemma) rotates the whole head: its ``partial_rotary_factor`` gives the
    share of pairs with a non-zero frequency instead (:func:`~course_embed.rope_scaling.rope_parameters`).
    """
    factor = check_number((rope_scaling or {}).get("partial_rotary_factor", 1.0), "partial_rotary_factor")
    if not 0 < factor <= 1:
        raise ValueError(f"partial_rotary_factor must be in (0, 1] (the share of head dims that rotate), got {factor}")
    if rope_type(rope_scaling) == "proportional":
        return head_dim
    dims = int(head_dim * factor)
    if dims < 2 or dims % 2:
        even = max(2, dims - dims % 2)
        raise ValueError(
            f"partial_rotary_factor={factor} of head_dim={head_dim} rotates {dims} dims; RoPE rotates pairs, so "
            f"it needs an even number >= 2: use e.g. partial_rotary_factor={even / head_dim} ({even} dims)"
        )
    return dims


def check_rope_scaling(rope_scaling: dict | None) -> dict:
    """A validated copy of ``rope_scaling``: ``rope_type`` set, numbers as floats, factor lists as tuples.

    Raises:
        ValueError / TypeError: naming the key, its value and the fix (see the module docstring).
    """
    if rope_scaling is None:
        return {"rope_type": "default"}
    if not isinstance(rope_scaling, dict):
        raise TypeError(
            f"rope_scaling must be a dict such as {{'rope_type': 'linear', 'factor': 4.0}} or None, got "
            f"{type(rope_scaling).__name__}; for a whole model config use RotaryEmbedding.from_config(config)"
        )
    kind = rope_type(rope_scaling)
    if kind not in ROPE_SCALINGS:
        raise ValueError(
            f"rope_scaling['rope_type'] must be one of {tuple(ROPE_SCALINGS)} (or 'su' for 'longrope'), got {kind!r}"
        )
    required, optional = ROPE_SCALINGS[kind]
    scaling = {key: value for key, value in rope_scaling.items() if key not in ("rope_type", "type")}
    missing = [key for key in required if scaling.get(key) is None]
    unknown = [key for key in scaling if key not in required + optional + META_KEYS]
    if missing or unknown:
        hint = ""
        if kind in ("longrope", "yarn") and "factor" in missing:
            hint = (
                "; without a factor, transformers takes factor = max_position_embeddings / "
                "original_max_position_embeddings (Phi-3: 131072 / 4096 = 32), which "
                "RotaryEmbedding.from_config(config) reads for you, or give the factor here"
            )
        elif unknown:
            hint = f"; remove {unknown}, or check the spelling against {required + optional}"
        elif kind == "dynamic":
            hint = "; from a model config, RotaryEmbedding.from_config(config) takes L0 from max_position_embeddings"
        else:
            hint = f"; add {missing} (the model's config.json has them)"
        raise ValueError(
            f"rope_scaling of type {kind!r} needs the keys {required} and accepts {optional}; "
            f"missing {missing}, unknown {unknown}{hint}"
        )
    out: dict = {"rope_type": kind}
    for key, value in scaling.items():
        if value is None:
            continue  # transformers writes absent options as None
        name = f"rope_scaling[{key!r}]"
        if key in ("short_factor", "long_factor"):
            out[key] = _factor_list(value, name)
        elif key == "original_max_position_embeddings":
            out[key] = _positive_int(value, name)
        elif key in ("truncate", "finetuned"):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {value!r}")
            out[key] = value
        elif key == "factor":
            fix = "use a factor >= 1 (the context's growth; 1 is no scaling, as rope_scaling=None)"
            out[key] = check_number(value, name, minimum=1.0, fix=fix)
        elif key == "rope_theta":
            out[key] = check_number(value, name, above=1.0)
        else:  # attention_factor, beta_*, mscale*, *_freq_factor, partial_rotary_factor: positive
            out[key] = check_number(value, name, above=0.0)
    if kind == "yarn" and out.get("beta_fast", 32.0) <= out.get("beta_slow", 1.0):
        raise ValueError(
            f"YaRN needs beta_fast > beta_slow (rotations over the original length: pairs above beta_fast keep "
            f"their frequency, pairs below beta_slow are interpolated), got beta_fast={out.get('beta_fast', 32.0)} "
            f"and beta_slow={out.get('beta_slow', 1.0)}; use the paper's values, 32 and 1"
        )
    if kind == "llama3" and not out["low_freq_factor"] < out["high_freq_factor"]:
        raise ValueError(
            f"llama3 needs low_freq_factor < high_freq_factor, got {out['low_freq_factor']} and "
            f"{out['high_freq_factor']}; Llama 3.1 uses 1 and 4"
        )
    return out


def check_factor_lists(scaling: dict, pairs: int) -> None:
    """LongRoPE's ``short_factor`` and ``long_factor`` must hold one divisor per rotated pair."""
    for key in ("short_factor", "long_factor"):
        if key in scaling and len(scaling[key]) != pairs:
            raise ValueError(
                f"rope_scaling[{key!r}] needs one value per rotated pair, {pairs} (rotated dims / 2), got "
                f"{len(scaling[key])}; check head_dim and partial_rotary_factor against the config the lists "
                f"came from"
            )


def rope_kwargs(config) -> dict:
    """The :class:`~course_embed.rotary.RotaryEmbedding` arguments of a model config, read as transformers reads it.

    Args:
        config: a transformers config object (``LlamaConfig``, ``Phi3Config``, ...) or its dict
            (``config.to_dict()``, or a ``config.json`` loaded with ``json.load``).

    Returns:
        The dict ``{"head_dim": h_d, "base": rope_theta, "rope_scaling": dict or None}``, where

        * the scaling comes from ``rope_parameters`` (transformers 5, ``rope_theta`` inside) or ``rope_scaling``
          (transformers 4) with ``rope_theta`` beside it; ``type`` or ``rope_type``; ``"su"`` is LongRoPE;
        * ``partial_rotary_factor`` (top level or inside) is kept in the scaling: only ``int(h_d * f)`` dims rotate;
        * a missing ``original_max_position_embeddings`` of llama3/YaRN/LongRoPE is the config's own (Phi-3 keeps
          it at the top level) or ``max_position_embeddings``; a missing ``factor`` of LongRoPE or YaRN is
          ``max_position_embeddings / original_max_position_embeddings`` (Phi-3's implicit factor, transformers'
          rule for YaRN);
        * GPT-NeoX's ``config.json`` keys: ``rotary_emb_base`` is the base, ``rotary_pct`` the partial factor;
        * dynamic NTK's original length is ``max_position_embeddings``, as in transformers;
        * ``head_dim`` is ``config.head_dim`` (DeepSeek-V3: its ``qk_rope_head_dim``) or ``hidden_size //
          num_attention_heads``.

    Shapes:
        no tensors: a config in, the constructor's keyword arguments out.

    Example:
        >>> import course_embed as ce
        >>> llama3 = {"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072,
        ...           "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
        ...           "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
        >>> kwargs = ce.rope_kwargs(llama3)  # a LLaMA 3.1 config.json, loaded
        >>> kwargs["head_dim"], kwargs["base"], kwargs["rope_scaling"]["rope_type"]
        (128, 500000.0, 'llama3')
        >>> rope = ce.RotaryEmbedding(**kwargs, layout="half")  # what RotaryEmbedding.from_config builds
    """
    values = config if isinstance(config, dict) else _config_dict(config)
    params = dict(values.get("rope_parameters") or values.get("rope_scaling") or {})
    if any(isinstance(value, dict) for value in params.values()):
        raise ValueError(
            f"this config has one RoPE setting per layer type ({sorted(params)}); build one RotaryEmbedding per "
            f"type from rope_kwargs({{**config, 'rope_parameters': config['rope_parameters'][layer_type]}})"
        )
    base = params.pop("rope_theta", None) or values.get("rope_theta") or values.get("rotary_emb_base")  # GPT-NeoX
    if base is None:
        raise ValueError(
            "the config has no rope_theta (neither at the top level nor in rope_parameters, nor GPT-NeoX's "
            "rotary_emb_base); add the model's base, e.g. config['rope_theta'] = 10000.0"
        )
    partial = params.get("partial_rotary_factor", values.get("partial_rotary_factor", values.get("rotary_pct")))
    if partial is not None and partial != 1.0:
        params["partial_rotary_factor"] = partial
    head_dim = values.get("qk_rope_head_dim") or values.get("head_dim")
    if not head_dim:
        if not values.get("hidden_size") or not values.get("num_attention_heads"):
            raise ValueError(
                "the config gives no head dim: it needs head_dim, or hidden_size and num_attention_heads (head_dim = "
                "hidden_size // num_attention_heads); add them, e.g. config['head_dim'] = 128"
            )
        head_dim = values["hidden_size"] // values["num_attention_heads"]
    kind = rope_type(params)
    max_positions = values.get("max_position_embeddings")
    if kind in ("llama3", "yarn", "longrope"):
        original = values.get("original_max_position_embeddings") or params.get("original_max_position_embeddings")
        params["original_max_position_embeddings"] = original or max_positions
        if kind in ("longrope", "yarn") and params.get("factor") is None:
            params["factor"] = max_positions / params["original_max_position_embeddings"]
    if kind == "dynamic":
        if max_positions is None:
            raise ValueError(
                "a dynamic NTK config needs max_position_embeddings (transformers' original length L0 for dynamic "
                "scaling); add it to the config, e.g. config['max_position_embeddings'] = 2048"
            )
        params["original_max_position_embeddings"] = max_positions
    if kind != "default":
        params["rope_type"] = kind
        params.pop("type", None)
    elif set(params) <= {"rope_type", "type"}:
        params = {}
    return {"head_dim": int(head_dim), "base": float(base), "rope_scaling": params or None}


def _config_dict(config) -> dict:
    """A transformers config object as a plain dict (``to_dict`` drops nothing RoPE needs)."""
    if not hasattr(config, "to_dict"):
        raise TypeError(
            f"config must be a transformers config object or its dict, got {type(config).__name__}; "
            f"for a rope_scaling dict alone use RotaryEmbedding(head_dim, base, rope_scaling=...)"
        )
    values = config.to_dict()
    for key in ("head_dim", "qk_rope_head_dim", "rope_theta", "partial_rotary_factor"):  # attributes set in __init__
        if key not in values and getattr(config, key, None) is not None:
            values[key] = getattr(config, key)
    return values


def _factor_list(value, name: str) -> tuple[float, ...]:
    if isinstance(value, str | bytes) or not hasattr(value, "__len__"):
        raise TypeError(f"{name} must be a list of numbers (one divisor per rotated pair), got {value!r}")
    return tuple(check_number(v, f"{name}[{i}]", above=0.0) for i, v in enumerate(value))


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral | float):
        raise TypeError(f"{name} must be a positive integer (the training length), got {value!r}")
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            raise ValueError(f"{name} must be a whole number of positions (the training length), got {value}")
        value = int(value)
    value = operator.index(value)
    if value < 1:
        raise ValueError(
            f"{name} must be a positive integer (the training length), got {value}; use the length the model was "
            f"trained with (its config's original_max_position_embeddings or max_position_embeddings)"
        )
    return value
