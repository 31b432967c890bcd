"""The trusted side's reading of what a test gathered in the sandbox: every value rebuilt and validated.

What comes back from the sandbox is the notebook's to choose (its cells run in the process that gathers), so
:func:`restore` rebuilds the plain data :func:`.probe._data` writes (outcomes, described tensors, tuples, dicts)
and refuses, with :class:`Forged`, anything else, before any check does arithmetic on it: tensors that are not
plain CPU tensors of a known dtype, not contiguous (stride-0 and overlapping views), larger than
:data:`MAX_ELEMENTS`, and sparse tensors whose indices are not int64 within their size (checked by torch's
invariants, so no forged index reaches memory).
"""

from __future__ import annotations

from typing import Any

import torch

from .probe import Outcome, Tensor

#: The most elements one gathered tensor may hold (far above any test's outputs), and the dtypes it may have.
MAX_ELEMENTS = 2**24
_DTYPES = {
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
}  # fmt: skip


class Forged(ValueError):
    """What came back from the sandbox is not what the gathering writes: the outcome cannot be used."""


def _dense(value: Any, label: str) -> torch.Tensor:
    """``value`` if it is a plain CPU tensor the gathering could have written: strided, contiguous (so no stride-0
    or overlapping views), of a known dtype, at most :data:`MAX_ELEMENTS` elements, its storage holding them all."""
    if type(value) is not torch.Tensor:
        raise Forged(f"{label}: not a tensor")
    if value.layout != torch.strided or value.device.type != "cpu" or value.dtype not in _DTYPES:
        raise Forged(f"{label}: a {value.layout} {value.dtype} tensor on {value.device}")
    if value.numel() > MAX_ELEMENTS or value.dim() > 8:
        raise Forged(f"{label}: {value.numel()} elements in {value.dim()} dimensions")
    needed = (value.storage_offset() + value.numel()) * value.element_size()
    if not value.is_contiguous() or value.untyped_storage().nbytes() < needed:
        raise Forged(f"{label}: strides {value.stride()} over a storage of {value.untyped_storage().nbytes()} bytes")
    return value


def _sparse(data: dict) -> torch.Tensor:
    """A sparse COO tensor rebuilt from validated parts: int64 indices ``(ndim, nnz)`` within ``size``, dense
    values ``(nnz, ...)``; the invariants are checked, so that no forged index reaches memory."""
    size = data.get("size")
    if not isinstance(size, list) or not 0 < len(size) <= 8 or not all(type(n) is int and n >= 0 for n in size):
        raise Forged("sparse tensor: its size is not a list of dimensions")
    numel = 1
    for n in size:
        numel *= n
    indices, values = _dense(data.get("indices"), "sparse indices"), _dense(data.get("values"), "sparse values")
    if numel > MAX_ELEMENTS or indices.dtype != torch.int64 or indices.dim() != 2 or indices.shape[0] > len(size):
        raise Forged(f"sparse tensor: indices {tuple(indices.shape)} {indices.dtype} for size {size}")
    if values.dim() < 1 or values.shape[0] != indices.shape[1] or indices.shape[0] + values.dim() - 1 != len(size):
        raise Forged(f"sparse tensor: values {tuple(values.shape)} for indices {tuple(indices.shape)}")
    try:
        return torch.sparse_coo_tensor(indices, values, size, check_invariants=True)
    except RuntimeError as err:  # an index outside the size
        raise Forged(f"sparse tensor: {str(err)[:200]}") from None


def _text(value: Any, limit: int = 2000) -> str:
    return value[:limit] if isinstance(value, str) else ""


def restore(data: Any, depth: int = 0) -> Any:
    """Rebuild what the gathering wrote (see :func:`_data`), validating every tensor; :class:`Forged` otherwise."""
    if depth > 8:
        raise Forged("nested too deeply")
    if isinstance(data, list):
        return [restore(v, depth + 1) for v in data]
    if isinstance(data, torch.Tensor):
        raise Forged("a bare tensor where the gathering writes a described one")
    if not isinstance(data, dict):
        return data
    if data.get("__outcome__"):
        raised = data.get("raised")
        raised = _text(raised, 100) if raised is not None else None
        return Outcome(restore(data.get("value"), depth + 1), _text(data.get("type"), 100), raised,
                       _text(data.get("message")))  # fmt: skip
    if data.get("__tensor__"):
        device = _text(data.get("device"), 20)
        flags = [bool(data.get(k) is True) for k in ("requires_grad", "is_param")]
        if data.get("sparse") is True:
            t, coalesced = _sparse(data), False
            if data.get("coalesced") is True:  # as claimed only if its indices are sorted and unique
                merged = t.coalesce()
                coalesced = merged._nnz() == t._nnz() and torch.equal(merged._indices(), t._indices())
                t = merged if coalesced else t
            return Tensor(t, device, *flags, coalesced, True)
        return Tensor(_dense(data.get("data"), "tensor"), device, *flags)
    if "__tuple__" in data:
        return tuple(restore(v, depth + 1) for v in data["__tuple__"]) if isinstance(data["__tuple__"], list) else ()
    if "__dict__" in data:
        pairs = data["__dict__"] if isinstance(data["__dict__"], list) else []
        restored = {}
        for pair in pairs:
            if not isinstance(pair, list) or len(pair) != 2:
                raise Forged("a dict entry that is not a pair")
            key = restore(pair[0], depth + 1)
            if not isinstance(key, (str, int, float, bool, type(None), tuple)):
                raise Forged("a dict key that is not a plain value")
            restored[key] = restore(pair[1], depth + 1)
        return restored
    return {k: v for k, v in data.items() if k == "__type__" and isinstance(v, str)} or {"__type__": "unknown"}
