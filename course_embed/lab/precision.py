"""Chapter 7, training in bfloat16: stochastic rounding, Kahan-compensated updates, and a small measured run.

An optimizer step adds a small update ``u`` to a weight ``w``. Stored in bfloat16 (8 significant bits) with
round-to-nearest, ``w + u`` is rounded back to ``w`` whenever ``|u|`` is below half the spacing around ``w``: the
update is lost. Three remedies are compared by :func:`train_table` (Zamirai et al. 2020, arXiv:2010.06192):

* stochastic rounding (:func:`stochastic_round`): round ``w + u`` up or down at random, with the probability of
  rounding up equal to the fraction of the spacing covered, so the *expected* stored weight is exactly ``w + u``;
* Kahan summation (:func:`kahan_add_`): a second bfloat16 tensor stores what the last rounding dropped and adds it
  back into the next update;
* a float32 master copy that receives the updates, rounded to bfloat16 only for the forward pass.

Shapes: ``v`` table rows, ``d`` width; elementwise functions take any shape ``(*)``.
"""

from __future__ import annotations

import torch

VARIANTS = ("float32", "bf16 round-to-nearest", "bf16 stochastic", "bf16 Kahan", "bf16 + fp32 master")


def stochastic_round(
    x: torch.Tensor, dtype: torch.dtype = torch.bfloat16, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Round float32 ``x`` ``(*)`` to bfloat16 ``(*)`` stochastically: unbiased, ``E[result] = x``.

    bfloat16 is float32 with the low 16 bits of the bit pattern cut off. Adding a uniform random integer in
    ``[0, 2**16)`` to those bits and then cutting them carries into the kept bits with probability (low bits) /
    2**16, the distance of ``|x|`` from the lower neighbour in units of the spacing. So the result is the neighbour
    below ``|x|`` or the one above it, and its expectation is ``x``. The sign bit is not touched, so negative values
    round symmetrically (in magnitude); values already representable in bfloat16 (low bits zero) never change.

    Non-finite values: NaN stays NaN, ``±inf`` stays ``±inf``. A finite value above bfloat16's largest finite
    value (about 3.39e38) rounds to that value or, with the probability given by the same rule, to ``±inf``.

    ``generator`` (a ``torch.Generator`` on ``x``'s device, or ``None`` for the global one) draws the random bits:
    the same seed gives the same result.
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"x must be a float32 tensor, got {got}; convert it first with x.float()")
    if dtype != torch.bfloat16:
        raise ValueError(
            f"dtype must be torch.bfloat16 (float32 cut to its high 16 bits), got {dtype}; "
            "float16 has a different exponent and needs another method"
        )
    bits = x.contiguous().view(torch.int32)  # (*), the float32 bit patterns
    noise = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32, device=x.device, generator=generator)
    cut = ((bits + noise) & -65536).view(torch.float32)  # -65536 == 0xFFFF0000: keep the high 16 bits
    return torch.where(x.isnan(), x, cut).to(dtype)  # exact: cut's low bits are zero


def kahan_add_(weight: torch.Tensor, compensation: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
    """Add ``update`` to ``weight`` in place, carrying the rounding error in ``compensation``.

    ``weight`` and ``compensation`` ``(*)`` are stored in bfloat16 (or any float dtype); ``update`` ``(*)`` may be
    float32. The arithmetic runs in float32 and only the storage is rounded, as on hardware that computes
    bfloat16 in float32 units::

        y = update - compensation      # the update plus what the last rounding dropped
        s = round(weight + y)          # the new stored weight
        compensation = (s - weight) - y  # what this rounding added too much (its negative dropped)

    Many updates below half a spacing each still accumulate: ``weight + (-compensation)`` tracks the exact sum, and
    once it crosses to a neighbour, ``weight`` moves. Returns ``weight``.
    """
    if weight.shape != compensation.shape or weight.shape != update.shape:
        raise ValueError(
            f"weight, compensation and update must have the same shape, got {tuple(weight.shape)}, "
            f"{tuple(compensation.shape)} and {tuple(update.shape)}; create the buffer with torch.zeros_like(weight)"
        )
    w = weight.float()
    y = update.float() - compensation.float()
    s = (w + y).to(weight.dtype)
    compensation.copy_((s.float() - w) - y)
    return weight.copy_(s)


def _adam_update(grad: torch.Tensor, state: dict, lr: float, betas=(0.9, 0.999), eps: float = 1e-8) -> torch.Tensor:
    """Adam's step ``-lr * m_hat / (sqrt(v_hat) + eps)`` ``(*)`` in float32; updates the moments in ``state``."""
    state["t"] = t = state.get("t", 0) + 1
    m = state.setdefault("m", torch.zeros_like(grad)).mul_(betas[0]).add_(grad, alpha=1 - betas[0])
    v = state.setdefault("v", torch.zeros_like(grad)).mul_(betas[1]).addcmul_(grad, grad, value=1 - betas[1])
    return -lr * (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + eps)


def train_table(variant: str, v: int = 512, d: int = 64, steps: int = 1000, lr: float = 1e-4, seed: int = 0) -> dict:
    """Fit a ``(v, d)`` table to a target table with Adam in one of :data:`VARIANTS`; return the run.

    The table starts at the scaled init (std ``d**-0.5``, as in section 7.2) and the target is the start plus a
    shift of std ``0.02``: the weights must move a little, by many steps of about ``lr`` each, the regime in which
    bfloat16 round-to-nearest loses updates. The loss is ``mean((W - T)**2)`` over the whole table (full batch, so
    the only randomness is stochastic rounding's, drawn from a generator seeded with ``seed + 1``). The gradient is
    computed in float32 from the stored weights and Adam's moments are float32 in every variant, so the variants
    differ only in how the update is stored.

    Returns ``losses`` (``steps + 1`` floats, the loss of the stored weights before each step and after the last),
    ``weight`` ``(v, d)`` float32 (the stored weights at the end), ``start`` and ``target`` ``(v, d)`` float32.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    gen = torch.Generator().manual_seed(seed)
    start = torch.randn(v, d, generator=gen) * d**-0.5  # (v, d)
    target = start + 0.02 * torch.randn(v, d, generator=gen)  # (v, d)
    sr_gen = torch.Generator().manual_seed(seed + 1)
    fp32 = variant == "float32"
    weight = start.clone() if fp32 else start.to(torch.bfloat16)  # (v, d), what the forward pass reads
    master = start.clone()  # (v, d), used by the master-weight variant only
    compensation = torch.zeros_like(weight)  # (v, d), used by the Kahan variant only
    state, losses = {}, []
    for _ in range(steps + 1):
        w = weight.float()
        losses.append((w - target).square().mean().item())
        if len(losses) > steps:
            break
        grad = 2 * (w - target) / w.numel()  # d loss / d W, (v, d)
        update = _adam_update(grad, state, lr)
        if fp32:
            weight += update
        elif variant == "bf16 round-to-nearest":
            weight = (w + update).to(torch.bfloat16)
        elif variant == "bf16 stochastic":
            weight = stochastic_round(w + update, generator=sr_gen)
        elif variant == "bf16 Kahan":
            kahan_add_(weight, compensation, update)
        else:
            master += update
            weight = master.to(torch.bfloat16)
    return {"losses": losses, "weight": weight.float(), "start": start, "target": target}


def compare_variants(**kwargs) -> dict[str, dict]:
    """Run :func:`train_table` for every variant with the same arguments; return ``{variant: summary}``.

    Each summary has ``loss`` (final), ``losses`` (the curve), ``unchanged`` (fraction of weights still at their
    stored start), and ``distance``: ``rms(W - W_float32) / rms(W_float32 - start)``, how far the variant's final
    weights are from the float32 run's, in units of how far the float32 run moved.
    """
    runs = {name: train_table(name, **kwargs) for name in VARIANTS}
    ref = runs["float32"]
    moved = (ref["weight"] - ref["start"]).square().mean().sqrt()
    out = {}
    for name, run in runs.items():
        start = run["start"] if name == "float32" else run["start"].bfloat16().float()
        out[name] = {
            "loss": run["losses"][-1],
            "losses": run["losses"],
            "unchanged": (run["weight"] == start).double().mean().item(),
            "distance": ((run["weight"] - ref["weight"]).square().mean().sqrt() / moved).item(),
        }
    return out
