"""Shared by test_exercises.py and test_grading.py: the exercises built once per run, and submissions made from them.

The student notebooks are built into one folder per test run and shared by xdist workers through a file lock, like
the book build in conftest.py. :mod:`.cheats` holds the cheating and broken submissions of the grading batch;
:data:`WRONG_ANSWERS` plausible mistakes that the hidden tests must catch.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import nbformat
import pytest
from filelock import FileLock

from course_embed.tools.grading import ANSWER_TAG, Assigned, assign, find_exercises

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = find_exercises(ROOT / "exercises")
NAMES = [e.name for e in EXERCISES]

#: What a file whose exercise is unknown (it names none or cannot be read) scores on q1, q2, q3, q4: its gradebook
#: row leaves the question cells empty and totals 0.
NOT_READ = (None, None, None, None)


def _partial_rope(pairs="half", width="r", angles="float64", r="rotary_dim", check="not 2 <= rotary_dim <= d"):
    """A ``rope_partial_half`` (exercise 05, question 5) with one mistake: ``pairs`` "interleaved" (adjacent dims),
    ``width`` the divisor of the frequencies' exponent, ``angles`` their dtype, ``r`` the dims rotated, ``check`` the
    range test of ``rotary_dim``."""
    first = "torch.arange(r // 2)" if pairs == "half" else "torch.arange(0, r, 2)"
    second = "torch.arange(r // 2, r)" if pairs == "half" else "torch.arange(1, r, 2)"
    return (
        "def rope_partial_half(x, rotary_dim, offset=0, base=10000.0):\n"
        "    d = x.shape[-1]\n"
        f"    if x.dim() != 4 or rotary_dim % 2 or {check}:\n"
        "        raise ValueError('x must be 4-D and rotary_dim even, from 2 to head_dim')\n"
        f"    seq, r = x.shape[-2], {r}\n"
        f"    theta = base ** (-torch.arange(0, r, 2, dtype=torch.{angles}) / {width})\n"
        f"    angles = (torch.arange(offset, offset + seq, dtype=torch.{angles})[:, None] * theta).double()\n"
        "    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)\n"
        f"    i1, i2 = {first}, {second}\n"
        "    out = x.clone()\n"
        "    out[..., i1], out[..., i2] = x[..., i1] * cos - x[..., i2] * sin, x[..., i1] * sin + x[..., i2] * cos\n"
        "    return out"
    )


def _truncated(fill="nn.init.trunc_normal_(weight, 0.0, std, -cutoff * std, cutoff * std)", after="", pad_first=False):
    """An ``init_truncated_`` (exercise 01, question 4) with one mistake: ``fill`` how the values are drawn, ``after``
    a statement run on them next, ``pad_first`` whether the pad row is zeroed before the values are drawn."""
    pad = "        if padding_idx is not None:\n            weight[padding_idx].zero_()\n"
    return (
        "def init_truncated_(weight, std=0.02, cutoff=2.0, padding_idx=None):\n"
        "    with torch.no_grad():\n"
        + (pad if pad_first else "")
        + f"        {fill}\n"
        + (f"        {after}\n" if after else "")
        + ("" if pad_first else pad)
        + "    return weight"
    )


def _truncated_redrawn(dtype=""):
    """An ``init_truncated_`` (exercise 01, question 4) that draws the samples into a new tensor, re-draws those
    beyond the bounds, then assigns it with ``weight.data =`` (new storage, not in place); ``dtype`` the ``randn``
    arguments after the shape (``""``: the default dtype, float32 whatever the table's)."""
    return (
        "def init_truncated_(weight, std=0.02, cutoff=2.0, padding_idx=None):\n"
        f"    samples = torch.randn(weight.shape{dtype}) * std\n"
        "    out = samples.abs() > cutoff * std\n"
        "    while out.any():\n"
        f"        samples[out] = torch.randn(int(out.sum()){dtype}) * std\n"
        "        out = samples.abs() > cutoff * std\n"
        "    if padding_idx is not None:\n"
        "        samples[padding_idx] = 0\n"
        "    weight.data = samples\n"
        "    return weight"
    )


def _roberta(positions="(real.cumsum(dim=1) + offset) * real + padding_idx", check=True):
    """A ``roberta_positions`` (exercise 04, question 5) with one mistake: ``positions`` the expression of the
    position ids (``real`` is 1 at the real tokens), ``check`` whether ids that are not 2-D raise."""
    return (
        "def roberta_positions(ids, padding_idx, offset=0):\n"
        + ("    if ids.dim() != 2:\n        raise ValueError('ids must be (batch, seq)')\n" if check else "")
        + "    real = (ids != padding_idx).long()\n"
        f"    return {positions}"
    )


def _timing(
    layout="torch.cat((sin, cos), dim=1)", step="(n - 1)", angles="float64", first="start", check="or d_model < 4"
):
    """A ``timing_signal`` (exercise 03, question 4) with one mistake: ``layout`` how the sines and cosines are laid
    out, ``step`` the divisor of the frequencies' exponent (``"n"``: the paper's ``base ** (-2i / d)``), ``angles``
    their dtype, ``first`` the first position, ``check`` the test of small widths besides odd ones."""
    return (
        "def timing_signal(length, d_model, base=10000.0, start=0):\n"
        f"    if d_model % 2 {check}:\n"
        "        raise ValueError('d_model must be even and at least 4')\n"
        "    n = d_model // 2\n"
        f"    omega = base ** (-torch.arange(n, dtype=torch.{angles}) / {step})\n"
        f"    angles = torch.arange({first}, {first} + length, dtype=torch.{angles})[:, None] * omega\n"
        "    sin, cos = angles.sin(), angles.cos()\n"
        f"    return {layout}.float()"
    )


def _tied(
    std="sigma * math.sqrt(d_model) * output_scale", loss="math.log(vocab_size) + logit_std ** 2 / 2", numbers=True
):
    """``tied_logit_std`` and ``initial_loss`` (exercise 02, question 4) with one mistake: ``std`` the logits' std
    from ``sigma``, ``loss`` the loss from ``logit_std``, ``numbers`` whether a number is taken as a normal init's
    std."""
    number = "isinstance(init, (int, float)) and init > 0" if numbers else "False"
    return (
        "def tied_logit_std(init, vocab_size, d_model, output_scale=1.0):\n"
        "    stds = {'normal': 1.0, 'xavier_uniform': math.sqrt(2 / (vocab_size + d_model)),\n"
        "            'scaled_normal': d_model ** -0.5}\n"
        f"    if {number}:\n"
        "        sigma = init\n"
        "    elif init in stds:\n"
        "        sigma = stds[init]\n"
        "    else:\n"
        "        raise ValueError(f'init must be one of {sorted(stds)} or a positive std, got {init!r}')\n"
        f"    return {std}\n"
        "\n"
        "def initial_loss(logit_std, vocab_size):\n"
        f"    return {loss}"
    )


def _kept(kept="(weight.float() + update).to(weight.dtype) != weight", checks=True):
    """A ``kept_updates`` (exercise 06, question 6) with one mistake: ``kept`` the mask's expression, ``checks``
    whether a weight in another dtype and shapes that differ raise."""
    refuse = (
        "    if weight.dtype not in (torch.bfloat16, torch.float16):\n"
        "        raise TypeError(f'weight must be torch.bfloat16 or torch.float16, got {weight.dtype}')\n"
        "    if weight.shape != update.shape:\n"
        "        raise ValueError(f'shapes differ: {tuple(weight.shape)} and {tuple(update.shape)}')\n"
        if checks
        else ""
    )
    return f"def kept_updates(weight, update):\n{refuse}    return {kept}"


_SPACING = (
    "def kept_updates(weight, update):\n"
    "    if weight.dtype not in (torch.bfloat16, torch.float16):\n"
    "        raise TypeError(f'weight must be torch.bfloat16 or torch.float16, got {weight.dtype}')\n"
    "    if weight.shape != update.shape:\n"
    "        raise ValueError(f'shapes differ: {tuple(weight.shape)} and {tuple(update.shape)}')\n"
    "    digits = 8 if weight.dtype == torch.bfloat16 else 11\n"
    "    _, exponent = torch.frexp(weight.float())\n"
    "    return update.abs() > 2.0 ** (exponent - digits).float() / 2"
)


def _step_bytes(
    index="8",
    moments='{"sgd": 0, "adagrad": 1, "adam": 2, "sparseadam": 2}',
    state="table",
    dense="tied or not sparse",
    checks=True,
    adam_refuses="not dense",
):
    """A ``table_step_bytes`` (exercise 06, question 5) with one mistake: ``index`` the bytes per row's index,
    ``moments`` the state tensors per optimizer, ``state`` the size of one (``"grad"``: as large as the gradient),
    ``dense`` when the gradient is dense, ``checks`` whether refused setups raise, ``adam_refuses`` when Adam
    raises."""
    refuse = (
        f"    if optimizer == 'adam' and {adam_refuses} or optimizer == 'sparseadam' and dense:\n"
        "        raise ValueError('the optimizer refuses this gradient')\n"
        if checks
        else ""
    )
    return (
        "def table_step_bytes(vocab_size, d_model, distinct_ids, optimizer, sparse=False, tied=False, itemsize=4):\n"
        "    table = vocab_size * d_model * itemsize\n"
        f"    moments = {moments}\n"
        "    if optimizer not in moments:\n"
        "        raise ValueError(optimizer)\n"
        f"    dense = {dense}\n"
        f"{refuse}"
        f"    grad = table if dense else distinct_ids * (d_model * itemsize + {index})\n"
        f"    return grad + moments[optimizer] * {state}"
    )


#: For each exercise, answers that only reuse course_embed's implementation, by answer cell (0 = the first):
#: an import under the question's name, a subclass, a hand-written wrapper (the questions chosen so that no other
#: answer of the notebook depends on them; more shortcuts are in :mod:`.cheats`). None of them
#: may earn the points of its question: the sandbox's course_embed holds only ``setup``.
ALIASES = {
    "01_token_embedding": {
        1: "from course_embed import TokenEmbedding",
    },
    "02_scaling": {
        0: "from course_embed.lab.token_embedding import init_std\n"
        "\n"
        "def expected_norm_ratio(init, vocab_size, d_model, scale=True):\n"
        "    pe = ce.sinusoidal_table(1, d_model).norm().item()\n"
        "    return init_std(init, vocab_size, d_model) * d_model ** 0.5 * (d_model ** 0.5 if scale else 1) / pe",
        1: "tie = ce.tie_weights",
        3: "from course_embed.lab.token_embedding import init_std\n"
        "\n"
        "def tied_logit_std(init, vocab_size, d_model, output_scale=1.0):\n"
        "    std = init if isinstance(init, (int, float)) else init_std(init, vocab_size, d_model)\n"
        "    return std * d_model ** 0.5 * output_scale\n"
        "\n"
        "def initial_loss(logit_std, vocab_size):\n"
        "    return math.log(vocab_size) + logit_std ** 2 / 2",
    },
    "03_sinusoidal": {
        1: "def rotation(k, d_model, base=10000.0):\n    return ce.offset_rotation(k, d_model, base)",
        # Tensor2Tensor's spacing is the paper's with the base raised to d / (d - 2), laid out by the lab's reorder
        3: "from course_embed.lab.sinusoidal import halves_layout\n"
        "\n"
        "def timing_signal(length, d_model, base=10000.0, start=0):\n"
        "    paper_base = base ** (d_model / (d_model - 2))\n"
        "    table = ce.sinusoidal_table(start + length, d_model, paper_base, dtype=torch.float64)[start:]\n"
        "    return halves_layout(table).float()",
    },
    "04_fusion": {
        1: "class ConcatFusion(nn.Module):\n"
        "    def __init__(self, vocab_size, d_model, d_position=None, padding_idx=None):\n"
        "        super().__init__()\n"
        "        self.inner = ce.TransformerEmbedding(vocab_size, d_model, fusion='concat', dropout=0.0,\n"
        "                                             d_position=d_position, padding_idx=padding_idx)\n"
        "        self.token = self.inner.token\n"
        "\n"
        "    def forward(self, ids, offset=0):\n"
        "        return self.inner(ids, offset)",
    },
    "05_rope_alibi": {
        0: "def rope(x, offset=0, base=10000.0):\n    return ce.RotaryEmbedding(x.shape[-1], base).rotate(x, offset)",
        3: "def extended_frequencies(head_dim, base, factor, method):\n"
        "    return ce.rope_parameters(head_dim, base, {'rope_type': method, 'factor': factor})[0]\n"
        "\n"
        "def unchanged_pairs(head_dim, base, factor, method, tolerance=0.1):\n"
        "    ratio = extended_frequencies(head_dim, base, factor, method) / ce.rope_frequencies(head_dim, base)\n"
        "    return torch.nonzero((ratio - 1).abs() < tolerance).flatten().tolist()",
        4: "def rope_partial_half(x, rotary_dim, offset=0, base=10000.0):\n"
        "    scaling = {'rope_type': 'default', 'partial_rotary_factor': rotary_dim / x.shape[-1]}\n"
        "    return ce.RotaryEmbedding(x.shape[-1], base, layout='half', rope_scaling=scaling).rotate(x, offset)",
    },
    "06_optimization": {
        0: "from course_embed.fusion import lookup_add_reference as lookup_add",
        3: "from course_embed.lab.bench import embedding_bytes as min_bytes\n"
        "\n"
        "def time_bound(batch, seq, d_model, itemsize, staircase, peak_gflops):\n"
        "    nbytes = min_bytes(batch, seq, d_model, itemsize)\n"
        "    gbps = ([g for size, g in staircase if size <= nbytes] or [staircase[0][1]])[-1]\n"
        "    memory, compute = nbytes / (gbps * 1e9), 2 * batch * seq * d_model / (peak_gflops * 1e9)\n"
        "    return (compute, 'compute') if compute > memory else (memory, 'memory')",
        5: "from course_embed.lab.optimization import lost_update_fraction\n"
        "\n"
        "def kept_updates(weight, update):\n"
        "    flat = [lost_update_fraction(w.float().reshape(1), u.item(), weight.dtype) == 0.0\n"
        "            for w, u in zip(weight.flatten(), update.flatten())]\n"
        "    return torch.tensor(flat, dtype=torch.bool).reshape(weight.shape)",
    },
}


_FREQUENCIES = (
    "def extended_frequencies(head_dim, base, factor, method):\n"
    "    if method not in ('linear', 'ntk'):\n"
    "        raise ValueError(f'method must be linear or ntk, got {method!r}')\n"
    "    i = torch.arange(0, head_dim, 2, dtype=torch.float64)\n"
)


def _bound(
    step: str,
    memory: str = "nbytes / (gbps * 1e9)",
    compute: str = "2 * b * s * d / (peak * 1e9)",
    roof: str = "compute > memory",
) -> str:
    """A ``time_bound`` for 06 q4 that picks its step with ``step`` (the GB/s from ``staircase`` and ``nbytes``)
    and combines the roofs as given; the right answer is ``_bound(_AT_OR_BELOW)``."""
    return (
        "def time_bound(b, s, d, itemsize, staircase, peak):\n"
        "    nbytes = min_bytes(b, s, d, itemsize)\n"
        f"    gbps = {step}\n"
        f"    memory, compute = {memory}, {compute}\n"
        f"    return (max(memory, compute), 'compute' if {roof} else 'memory')"
    )


_AT_OR_BELOW = "([g for size, g in staircase if size <= nbytes] or [staircase[0][1]])[-1]"

#: Plausible wrong answers, by exercise and question: code run after the solution's answer cells (so it replaces one
#: function of a correct notebook). Each must fail at least one hidden test of its question, which
#: test_exercises.py checks in the test process (the sandbox round trip is test_grading.py's).
WRONG_ANSWERS = {
    "01_token_embedding": {
        "q4": {
            "nn.init.trunc_normal_'s default bounds, +-2 (absolute)": _truncated(
                fill="nn.init.trunc_normal_(weight, std=std)"
            ),
            "the tails clamped onto the bounds": _truncated(
                fill="weight.normal_(0.0, std).clamp_(-cutoff * std, cutoff * std)"
            ),
            "truncated, then rescaled to std": _truncated(after="weight.mul_(std / weight.std())"),
            "the pad row zeroed before the init": _truncated(pad_first=True),
            "float64 table re-drawn with default-dtype randn": _truncated_redrawn(),
            "weight.data = samples (new storage, not in place)": _truncated_redrawn(", dtype=weight.dtype"),
            "the std argument returned, not measured": "def truncated_std(std, cutoff, seed):\n    return float(std)",
        },
    },
    "02_scaling": {
        "q4": {
            "the logits' std as sigma (the norm of h left out)": _tied(std="sigma * output_scale"),
            "the input factor sqrt(d) put on the head too": _tied(std="sigma * d_model * output_scale"),
            "output_scale ignored": _tied(std="sigma * math.sqrt(d_model)"),
            "output_scale divided by": _tied(std="sigma * math.sqrt(d_model) / output_scale"),
            "Xavier's sigma taken as a": _tied(
                std="sigma * math.sqrt(d_model) * output_scale * (math.sqrt(3) if init == 'xavier_uniform' else 1)"
            ),
            "a number as init refused": _tied(numbers=False),
            "the loss as log V + s / 2": _tied(loss="math.log(vocab_size) + logit_std / 2"),
            "the loss as log V + s^2": _tied(loss="math.log(vocab_size) + logit_std ** 2"),
            "the loss as the uniform guess, log V": _tied(loss="math.log(vocab_size)"),
            "the loss in bits": _tied(loss="math.log2(vocab_size) + logit_std ** 2 / 2"),
        },
    },
    "03_sinusoidal": {
        "q1": {
            "the base hard-coded to 10000": "_solved = sinusoidal\n"
            "def sinusoidal(length, d_model, base=10000.0):\n"
            "    return _solved(length, d_model)",
        },
        "q2": {
            "the base hard-coded to 10000": "_solved = rotation\n"
            "def rotation(k, d_model, base=10000.0):\n"
            "    return _solved(k, d_model)",
            "float32 angles, a float64 matrix": "_solved = rotation\n"
            "def rotation(k, d_model, base=10000.0):\n"
            "    m = _solved(k, d_model, base)\n"
            "    angles = (k * base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)).double()\n"
            "    i = torch.arange(0, d_model, 2)\n"
            "    m[i, i], m[i, i + 1], m[i + 1, i], m[i + 1, i + 1] = angles.cos(), angles.sin(), -angles.sin(), "
            "angles.cos()\n"
            "    return m",
        },
        "q4": {
            "the paper's spacing base ** (-2i / d)": _timing(step="n"),
            "interleaved columns (the paper's layout)": _timing(layout="torch.stack((sin, cos), dim=-1).flatten(1)"),
            "float32 angles": _timing(angles="float32"),
            "start ignored": _timing(first="0"),
            "no error for d_model = 2": _timing(check=""),
        },
    },
    "04_fusion": {
        "q5": {
            "every column numbered, pads included": _roberta(
                "torch.where(ids == padding_idx, padding_idx, torch.arange(ids.shape[1]) + padding_idx + 1 + offset)"
            ),
            "the pads' running count left in place": _roberta("real.cumsum(dim=1) + offset + padding_idx"),
            "the first real token at padding_idx": _roberta("(real.cumsum(dim=1) - 1 + offset) * real + padding_idx"),
            "the offset added to the pads too": _roberta("real.cumsum(dim=1) * real + offset + padding_idx"),
            "int32 positions (Hugging Face's casts without the final .long())": _roberta(
                "(real.int().cumsum(dim=1).int() + offset) * real.int() + padding_idx"
            ),
            "no error for ids that are not 2-D": _roberta(check=False),
        },
    },
    "05_rope_alibi": {
        "q4": {
            "NTK with the exponent d / (d - 1)": _FREQUENCIES + "    if method == 'ntk':\n"
            "        return (base * factor ** (head_dim / (head_dim - 1))) ** (-i / head_dim)\n"
            "    return base ** (-i / head_dim) / factor",
            "NTK with the base times the factor, no exponent": _FREQUENCIES + "    if method == 'ntk':\n"
            "        return (base * factor) ** (-i / head_dim)\n"
            "    return base ** (-i / head_dim) / factor",
            "interpolation of all but the fastest pair": _FREQUENCIES + "    theta = base ** (-i / head_dim)\n"
            "    if method == 'ntk':\n"
            "        return (base * factor ** (head_dim / (head_dim - 2))) ** (-i / head_dim)\n"
            "    theta[1:] /= factor\n"
            "    return theta",
            "interpolation of the slow half only": _FREQUENCIES + "    theta = base ** (-i / head_dim)\n"
            "    if method == 'ntk':\n"
            "        return (base * factor ** (head_dim / (head_dim - 2))) ** (-i / head_dim)\n"
            "    theta[head_dim // 4:] /= factor\n"
            "    return theta",
            "frequencies computed in float32": _FREQUENCIES + "    if method == 'ntk':\n"
            "        base = base * factor ** (head_dim / (head_dim - 2))\n"
            "    theta = base ** (-i.float() / head_dim)\n"
            "    return (theta / (factor if method == 'linear' else 1.0)).double()",
            "no error for an unknown method": "def extended_frequencies(head_dim, base, factor, method):\n"
            "    i = torch.arange(0, head_dim, 2, dtype=torch.float64)\n"
            "    if method == 'ntk':\n"
            "        return (base * factor ** (head_dim / (head_dim - 2))) ** (-i / head_dim)\n"
            "    return base ** (-i / head_dim) / factor",
            "unchanged pairs by the absolute change": "def unchanged_pairs(head_dim, base, factor, method, "
            "tolerance=0.1):\n"
            "    old = extended_frequencies(head_dim, base, 1.0, method)\n"
            "    new = extended_frequencies(head_dim, base, factor, method)\n"
            "    return torch.nonzero((new - old).abs() < tolerance).flatten().tolist()",
            "the pairs that change, not those that stay": "def unchanged_pairs(head_dim, base, factor, method, "
            "tolerance=0.1):\n"
            "    old = extended_frequencies(head_dim, base, 1.0, method)\n"
            "    new = extended_frequencies(head_dim, base, factor, method)\n"
            "    return torch.nonzero((new / old - 1).abs() >= tolerance).flatten().tolist()",
            "the count of pairs instead of their indices": "def unchanged_pairs(head_dim, base, factor, method, "
            "tolerance=0.1):\n"
            "    old = extended_frequencies(head_dim, base, 1.0, method)\n"
            "    new = extended_frequencies(head_dim, base, factor, method)\n"
            "    return int(((new / old - 1).abs() < tolerance).sum())",
        },
        "q5": {
            "the interleaved layout on the rotated dims": _partial_rope(pairs="interleaved"),
            "frequencies over head_dim, not rotary_dim": _partial_rope(width="d"),
            "the whole head rotated": _partial_rope(r="d"),
            "float32 angles": _partial_rope(angles="float32"),
        },
    },
    "06_optimization": {
        "q6": {
            "bfloat16's rounding for every format (the page's code)": _kept(
                "(weight.float() + update).bfloat16() != weight"
            ),
            "a threshold relative to |w|": _kept(
                "update.abs() > weight.float().abs() * (2**-8 if weight.dtype == torch.bfloat16 else 2**-11)"
            ),
            "half the spacing above the weight, both ways": _SPACING,
            "the update rounded to the weight's format first": _kept("(weight + update.to(weight.dtype)) != weight"),
            "lost instead of kept": _kept("(weight.float() + update).to(weight.dtype) == weight"),
            "the fraction kept instead of the mask": _kept(
                "((weight.float() + update).to(weight.dtype) != weight).double().mean().item()"
            ),
            "a float mask": _kept("((weight.float() + update).to(weight.dtype) != weight).float()"),
            "the weight updated in place": "def kept_updates(weight, update):\n"
            "    if weight.dtype not in (torch.bfloat16, torch.float16):\n"
            "        raise TypeError(f'weight must be torch.bfloat16 or torch.float16, got {weight.dtype}')\n"
            "    if weight.shape != update.shape:\n"
            "        raise ValueError(f'shapes differ: {tuple(weight.shape)} and {tuple(update.shape)}')\n"
            "    old = weight.clone()\n"
            "    weight.copy_((weight.float() + update).to(weight.dtype))\n"
            "    return weight != old",
            "no errors for other dtypes and shapes": _kept(checks=False),
        },
        "q5": {
            "the sparse gradient's values without its indices": _step_bytes(index="0"),
            "SparseAdam's state as sparse as the gradient": _step_bytes(state="grad"),
            "a tied table's gradient taken as sparse": _step_bytes(dense="not sparse"),
            "Adam's state as one moment": _step_bytes(moments='{"sgd": 0, "adagrad": 1, "adam": 1, "sparseadam": 1}'),
            "no error for the setups the optimizers refuse": _step_bytes(checks=False),
            "Adam refused whenever sparse=True, tied or not": _step_bytes(adam_refuses="sparse"),
        },
        "q4": {
            "no position rows": "def min_bytes(b, s, d, itemsize):\n    return itemsize * 2 * b * s * d",
            "position rows read once per sequence": "def min_bytes(b, s, d, itemsize):\n"
            "    return itemsize * 3 * b * s * d",
            "elements, not bytes": "def min_bytes(b, s, d, itemsize):\n    return 2 * b * s * d + s * d",
            "GiB/s for GB/s": _bound(_AT_OR_BELOW, memory="nbytes / (gbps * 2**30)"),
            "the last (DRAM) step whatever the working set": _bound("staircase[-1][1]"),
            "the fastest step whatever the working set": _bound("max(g for _, g in staircase)"),
            "the first swept size at or above the working set": _bound(
                "([g for size, g in staircase if size >= nbytes] or [staircase[-1][1]])[0]"
            ),
            "the last swept size strictly below the working set": _bound(
                "([g for size, g in staircase if size < nbytes] or [staircase[0][1]])[-1]"
            ),
            "below the sweep, index -1 (the last step)": _bound(
                "staircase[sum(size <= nbytes for size, _ in staircase) - 1][1]"
            ),
            "the nearest swept size on a log scale": "import math\n\n"
            + _bound("min(staircase, key=lambda step: abs(math.log(step[0] / nbytes)))[1]"),
            "no compute roof": _bound(_AT_OR_BELOW, compute="0.0"),
            "one FLOP per output element": _bound(_AT_OR_BELOW, compute="b * s * d / (peak * 1e9)"),
            "the two roofs' times added": "def time_bound(b, s, d, itemsize, staircase, peak):\n"
            "    nbytes = min_bytes(b, s, d, itemsize)\n"
            f"    gbps = {_AT_OR_BELOW}\n"
            "    memory, compute = nbytes / (gbps * 1e9), 2 * b * s * d / (peak * 1e9)\n"
            "    return (memory + compute, 'compute' if compute > memory else 'memory')",
            "the roof judged at the DRAM ridge point": _bound(
                _AT_OR_BELOW, roof="2 * b * s * d / nbytes > peak / staircase[-1][1]"
            ),
        },
    },
}


def answer_cells(nb) -> list[int]:
    """Indices of the cells where the learner writes answers, in order."""
    return [i for i, c in enumerate(nb.cells) if ANSWER_TAG in c.metadata.get("tags", [])]


def with_answers(nb, answers: dict[int, str]):
    """A copy of ``nb`` whose answer cells number ``k`` (0 = first) hold ``answers[k]``."""
    nb = copy.deepcopy(nb)
    cells = answer_cells(nb)
    for k, source in answers.items():
        nb.cells[cells[k]].source = source
    return nb


def solution_answers(built: Assigned) -> list[str]:
    """The solution's source of every answer cell (the solution notebook has the same cells, in the same order)."""
    student = nbformat.read(built.student, as_version=4)
    solution = nbformat.read(built.solution, as_version=4)
    return [solution.cells[i].source for i in answer_cells(student)]


@pytest.fixture(scope="session")
def built_exercises(tmp_path_factory) -> dict[str, Assigned]:
    """Every exercise run through ``otter assign`` once per test run: student notebook and solution."""
    base = tmp_path_factory.getbasetemp()
    # xdist workers share the run's folder (the parent of theirs); without xdist that parent outlives the run
    out = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "exercises-build"
    built = {}
    with FileLock(str(out) + ".lock"):
        for exercise in EXERCISES:
            folder = out / exercise.name
            done = folder / "done"
            if not done.exists():
                assign(exercise.source, folder)
                done.touch()
            built[exercise.name] = Assigned(
                folder / f"{exercise.name}.ipynb", folder / f"{exercise.name}-solution.ipynb"
            )
    return built


def exercise_notebook(exercise: str | None, cells: int = 1) -> str:
    """A small notebook made for ``exercise`` (otter's ``assignment_name``), as the text of its file."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"x = {i}") for i in range(cells)])
    if exercise is not None:
        nb.metadata["otter"] = {"assignment_name": exercise}
    return nbformat.writes(nb)
