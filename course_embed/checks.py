"""Input checks shared by the modules: each error names the argument, the value and the fix.

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width. Every module is batch first.
"""

from __future__ import annotations

import math
import numbers
import operator

import torch


def check_ids(ids: torch.Tensor, num_embeddings: int, name: str = "ids") -> None:
    """Raise a clear error unless ``ids`` are integer ids in ``[0, num_embeddings)``.

    Args:
        ids: token ids of any shape, e.g. ``(b, s)``.
        num_embeddings: number of rows of the table being indexed.
        name: the argument name quoted in the error.

    Raises:
        TypeError: ``ids`` is not an integer tensor (float ids are a common bug: ``2.7`` is not a token).
        ValueError: an id is negative or ``>= num_embeddings`` (CPU ids: checked on the host, which is where the
            values are, so the error names the offending id).
        RuntimeError: under ``torch.compile``, raised when the compiled code runs (see below).

    On an accelerator (CUDA) the range is checked **on the device**, without a host synchronisation: one
    ``aminmax`` and a ``torch._assert_async``, so the host never waits for the device and CUDA-graph capture is
    not broken. The price: a bad id surfaces as a device-side assertion at a later synchronising call (and leaves
    the CUDA context unusable), with this message but without the id's value. To debug, move the ids to the CPU.

    Under ``torch.compile`` (while Dynamo traces, ``torch.compiler.is_compiling()``) the range is checked the same
    way on every device, CPU included: reading the minimum and maximum back to Python would split the compiled
    graph (a graph break), while ``aminmax`` and ``torch._assert_async`` are traced into it. The type and dtype
    checks still run while tracing (they depend on no values). The price: a bad id raises a ``RuntimeError`` (not a
    ``ValueError``) when the compiled code runs, naming the argument and the vocabulary range but not the offending
    id, and saying how to find it (on CUDA, as above, a device-side assertion): call the model eagerly on the
    same ids.
    """
    if not isinstance(ids, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of integer token ids, got {type(ids).__name__}; "
            f"wrap it with torch.tensor(..., dtype=torch.long)"
        )
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(
            f"{name} must hold integer token ids (torch.long or torch.int), got dtype {ids.dtype}; "
            f"convert with {name}.long() only if the values are whole numbers"
        )
    if ids.device.type == "meta" or ids.numel() == 0:
        return  # no values to check
    compiling = torch.compiler.is_compiling()
    if ids.device.type != "cpu" or compiling:
        lo, hi = torch.aminmax(ids)  # stays on the device, or in the compiled graph
        ok = (lo >= 0) & (hi < num_embeddings)
        message = f"{name} contains an id outside the vocabulary [0, {num_embeddings})"
        if compiling:
            message += "; a compiled check cannot name the id: call the model eagerly on these ids to see it"
        torch._assert_async(ok, message)
        return
    lo, hi = (int(v) for v in torch.aminmax(ids))  # one pass over the ids, not two
    if lo < 0:
        raise ValueError(
            f"{name} contains the negative id {lo}; token ids must lie in [0, {num_embeddings}), "
            f"negative indices do not wrap around in an embedding"
        )
    if hi >= num_embeddings:
        raise ValueError(
            f"{name} contains the id {hi}, outside the vocabulary [0, {num_embeddings}); "
            f"build the embedding with vocab_size > {hi} or fix the tokenizer"
        )


def check_features(x: torch.Tensor, d_model: int, name: str = "x") -> None:
    """Raise a clear error unless ``x`` is a floating ``(b, s, d_model)`` tensor (batch first)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        kind = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(
            f"{name} must be a floating-point tensor of shape (batch, seq, d_model), got {kind}; "
            f"pass embeddings, not token ids"
        )
    if x.dim() != 3:
        raise ValueError(
            f"{name} must have shape (batch, seq, d_model), got {tuple(x.shape)}; "
            f"for a single sequence use {name}.unsqueeze(0)"
        )
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{name} has {x.shape[-1]} features in its last dimension but this module has "
            f"d_model={d_model}; inputs are (batch, seq, d_model): pass x of width {d_model}, or build the layer "
            f"with d_model={x.shape[-1]}"
        )


def check_batch_ids(ids, name: str = "ids") -> None:
    """Raise a clear error unless ``ids`` is a ``(b, s)`` tensor, saying how to reshape the common mistakes."""
    if isinstance(ids, torch.Tensor) and ids.dim() == 2:
        return
    shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
    fix = "for one sequence use ids.unsqueeze(0)"
    if isinstance(ids, torch.Tensor) and ids.dim() == 3 and ids.shape[-1] == 1:
        fix = "drop the trailing dim with ids.squeeze(-1)"
    elif not isinstance(ids, torch.Tensor):
        fix = "wrap them with torch.tensor(..., dtype=torch.long)"
    elif ids.dim() != 1:
        fix = "reshape them to (batch, seq)"
    raise ValueError(f"{name} must have shape (batch, seq), got {shape}; {fix.replace('ids', name)}")


def check_positions(length: int, offset: int, max_len: int, batch: int | None = None, name: str = "x") -> None:
    """Raise unless positions ``offset .. offset + length - 1`` fit in a table of ``max_len`` rows.

    With ``batch`` (the size of dim 0), the error also says when the input looks sequence first: it would fit
    if its first two dimensions were swapped.
    """
    if offset < 0:
        raise ValueError(
            f"offset must be >= 0 (the position of the first token), got {offset}; pass the number of tokens "
            f"before this input (0 for a new sequence)"
        )
    if offset + length <= max_len:
        return
    message = (
        f"a sequence of length {length} at offset {offset} needs positions up to {offset + length - 1}, "
        f"but this learned table has max_len={max_len} rows; call resize(new_len) to interpolate it to more "
        f"positions, or use sinusoidal positions, which exist at any length"
    )
    if batch is not None and batch > 1 and offset + batch <= max_len:
        message += (
            f". Inputs are batch first; if {name} is sequence first (dim 0 holds the {batch} positions), "
            f"transpose it with {name}.transpose(0, 1)"
        )
    raise ValueError(message)


def check_offset(offset, name: str = "offset") -> int:
    """The first position as a Python int: accepts ints, numpy integers and 0-d integer tensors.

    Raises:
        TypeError: a float (``3.5``: positions are whole tokens), a bool, or a tensor of more than one value (a
            per-sequence offset, which only :class:`~course_embed.rotary.RotaryEmbedding` takes, as
            ``position_ids``).
        ValueError: a negative offset.
    """
    if torch.compiler.is_compiling() and not isinstance(offset, torch.Tensor | float):
        return offset  # an int traced as a symbol: not checked here (call eagerly to check a suspect offset)
    if isinstance(offset, torch.Tensor):
        if offset.dim() != 0:
            raise TypeError(
                f"{name} must be one integer (the position of the first token), got a tensor of shape "
                f"{tuple(offset.shape)}; pass per-sequence positions (a left-padded batch) to RotaryEmbedding as "
                f"position_ids of shape (batch, seq); additive position layers take one offset for the whole batch"
            )
        if offset.dtype.is_floating_point or offset.dtype.is_complex or offset.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer, got a 0-d tensor of dtype {offset.dtype}; use {name}.long()")
        offset = int(offset)
    elif isinstance(offset, bool) or not hasattr(offset, "__index__"):
        raise TypeError(
            f"{name} must be a whole number of tokens (int), got {offset!r} ({type(offset).__name__}); "
            f"positions are integers, pass int({name}) if the value is whole"
        )
    offset = operator.index(offset)
    if offset < 0:
        raise ValueError(
            f"{name} must be >= 0 (the position of the first token), got {offset}; pass the number of tokens "
            f"before this input (0 for a new sequence)"
        )
    return offset


def check_int(value, name: str) -> int:
    """``value`` as a Python int: ints, numpy integers, 0-d integer tensors; a float, a bool or a string raises a
    ``TypeError`` naming the argument, the value and the fix."""
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
        value = int(value)
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(
            f"{name} must be a whole number (int), got {value!r} ({type(value).__name__}); pass int({name}) if the "
            f"value is whole"
        )
    return operator.index(value)


def check_size(value, name: str, *, minimum: int = 1) -> int:
    """A count (a length, a number of heads) as a Python int >= ``minimum`` (see :func:`check_int`)."""
    value = check_int(value, name)
    if value < minimum:
        need = "a positive integer" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"{name} must be {need}, got {value}; check where this count comes from")
    return value


def check_number(
    value, name: str, *, minimum: float | None = None, above: float | None = None, fix: str | None = None
) -> float:
    """``value`` as a finite float, at least ``minimum`` or greater than ``above``; else a clear error ending with
    ``fix`` (default: check the config).

    ``nan`` and ``inf`` are rejected: a non-finite scale silently turns every output into NaN or switches the
    rotation off.
    """
    fix = fix or "check the config this value came from"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a real number, got {value!r} ({type(value).__name__}); give it as an int or a float"
        )
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}; {fix}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}; {fix}")
    if above is not None and not value > above:
        raise ValueError(f"{name} must be > {above}, got {value}; {fix}")
    return value


def check_device_dtype(device=None, dtype=None) -> None:
    """Raise a clear error for a ``dtype`` that is not a floating torch dtype or a ``device`` this build lacks."""
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(
            f"dtype must be a floating-point torch.dtype such as torch.float32 or torch.bfloat16, got {dtype!r}; "
            f"pass one of those (ids are integers, the table is not), or None for the default"
        )
    if device is None:
        return
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device={device!r} is not a device name; use 'cpu', 'cuda', 'cuda:0' or 'mps'") from error
    if device.type == "cuda" and not torch.cuda.is_available():
        build = "this PyTorch build has no CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise ValueError(
            f"device={str(device)!r} but {build}; use device='cpu', or course_embed.pick_device() to take the "
            f"best device present"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={str(device)!r} but MPS is not available here; use device='cpu'")


class Fixed:
    """A construction argument a module is built from (a table's shape, RoPE's frequencies): readable as an
    attribute, set once by :func:`fix`, and assigning it later raises an ``AttributeError`` saying to build a new
    module, instead of leaving the module built from the old value while ``repr`` shows the new one."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, module, owner=None):
        return self if module is None else module.__dict__["_fixed"][self.name]

    def __set__(self, module, value) -> None:
        kind = type(module).__name__
        raise AttributeError(
            f"{kind}.{self.name} is fixed at construction (the module is built from it), so assigning {value!r} "
            f"would not rebuild it; build a new {kind} with {self.name}={value!r}"
        )


def fix(module, **values) -> None:
    """Set the :class:`Fixed` attributes ``values`` of ``module`` (at construction, or by a method that rebuilds)."""
    module.__dict__.setdefault("_fixed", {}).update(values)
