"""Bad input gets a clear error naming the argument, the value and the fix, at construction where the value is known
then (course_embed/checks.py, rope_config.py and the layers that use them): the misuse probes of the library."""

import copy
import math

import numpy as np
import pytest
import torch

import course_embed as ce
from course_embed.checks import check_device_dtype, check_number, check_offset

L0 = 64
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": L0}
LONG = {"rope_type": "longrope", "factor": 8.0, "original_max_position_embeddings": L0}


def longrope(pairs_short=4, pairs_long=4, **extra):
    return LONG | {"short_factor": [1.0] * pairs_short, "long_factor": [2.0] * pairs_long} | extra


@pytest.mark.parametrize(
    "scaling, error, match",
    [
        ({"rope_type": "linear", "factor": math.nan}, ValueError, r"rope_scaling\['factor'\] must be a finite number"),
        ({"rope_type": "linear", "factor": math.inf}, ValueError, r"rope_scaling\['factor'\] must be a finite number"),
        ({"rope_type": "linear", "factor": "4"}, TypeError, r"rope_scaling\['factor'\] must be a real number"),
        (YARN | {"attention_factor": 0.0}, ValueError, r"rope_scaling\['attention_factor'\] must be > 0.0, got 0.0"),
        (YARN | {"attention_factor": math.nan}, ValueError, r"'attention_factor'\] must be a finite number"),
        (YARN | {"beta_fast": 0}, ValueError, r"rope_scaling\['beta_fast'\] must be > 0.0, got 0.0"),
        (YARN | {"beta_slow": -1}, ValueError, r"rope_scaling\['beta_slow'\] must be > 0.0"),
        (YARN | {"beta_fast": 1.0, "beta_slow": 2.0}, ValueError, "beta_fast > beta_slow.*32 and 1"),
        (YARN | {"mscale": math.inf, "mscale_all_dim": 1.0}, ValueError, "'mscale'.*finite"),
        (longrope(pairs_long=3), ValueError, r"'long_factor'\] needs one value per rotated pair, 4 .* got 3"),
        (longrope(pairs_short=5), ValueError, r"'short_factor'\] needs one value per rotated pair, 4 .* got 5"),
        (longrope(long_factor=[1.0, math.nan, 1.0, 1.0]), ValueError, r"long_factor'\]\[1\] must be a finite"),
        (longrope(short_factor=[1.0, 0.0, 1.0, 1.0]), ValueError, r"short_factor'\]\[1\] must be > 0"),
        (longrope(long_factor="1 2 3 4"), TypeError, "must be a list of numbers"),
        (
            {"type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4},  # Phi-3's dict as shipped
            ValueError,
            r"missing \['factor', 'original_max_position_embeddings'\].*131072 / 4096.*from_config",
        ),
        (
            {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
            | {"low_freq_factor": 4.0, "high_freq_factor": 4.0},
            ValueError,
            "low_freq_factor < high_freq_factor",
        ),
        ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 1.5}, ValueError, "whole number"),
        ({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.4}, ValueError, "rotates 3 dims.*even"),
        ({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 1.5}, ValueError, r"in \(0, 1\]"),
        ({"rope_type": "linear", "factor": 2.0, "rope_theta": math.inf}, ValueError, "rope_theta'.*finite"),
        ("linear", TypeError, "rope_scaling must be a dict"),
    ],
)
def test_rope_scaling_is_checked_at_construction(scaling, error, match):
    with pytest.raises(error, match=match):
        ce.RotaryEmbedding(8, rope_scaling=scaling)


def test_values_that_used_to_pass_silently_now_fail_and_good_ones_still_work():
    """Before: factor=nan gave NaN everywhere, factor=inf no rotation, attention_factor=0 zeroed q and k."""
    x = torch.randn(1, 1, 5, 8, generator=torch.Generator().manual_seed(0))
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="finite"):
            ce.rope_parameters(8, 10000.0, {"rope_type": "linear", "factor": bad})
    out = ce.RotaryEmbedding(8, rope_scaling={"rope_type": "linear", "factor": 2.0}).rotate(x)
    assert torch.isfinite(out).all() and not torch.equal(out, x)
    assert ce.RotaryEmbedding(8, rope_scaling=longrope()).rotate(x, offset=L0).isfinite().all()  # long factors


@pytest.mark.parametrize("base", [math.inf, math.nan, 1.0, 0.5])
def test_non_finite_or_small_bases_are_rejected(base):
    with pytest.raises(ValueError, match="base"):
        ce.RotaryEmbedding(8, base=base)
    with pytest.raises(ValueError, match="base"):
        ce.SinusoidalPositionalEncoding(8, base=base)
    with pytest.raises(ValueError, match="base"):
        ce.TransformerEmbedding(10, 8, base=base)


@pytest.mark.parametrize("offset", [3, np.int64(3), np.int32(3), torch.tensor(3), torch.tensor(3, dtype=torch.int32)])
def test_offsets_accept_ints_numpy_ints_and_0d_tensors(offset):
    assert check_offset(offset) == 3 and type(check_offset(offset)) is int
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 4, 8, generator=gen)
    assert torch.equal(ce.RotaryEmbedding(8).rotate(x, offset=offset), ce.RotaryEmbedding(8).rotate(x, offset=3))
    ids = torch.randint(0, 10, (2, 4), generator=gen)
    for position in ("sinusoidal", "learned"):
        model = ce.TransformerEmbedding(10, 8, position=position, dropout=0.0, max_len=16).eval()
        assert torch.equal(model(ids, offset=offset), model(ids, offset=3))
    h, learned = torch.randn(2, 4, 8, generator=gen), ce.LearnedPositionalEmbedding(16, 8)
    assert torch.equal(learned(h, offset), learned(h, 3))


@pytest.mark.parametrize(
    "offset, error, match",
    [
        (3.5, TypeError, r"offset must be a whole number of tokens \(int\), got 3.5 \(float\)"),
        (3.0, TypeError, "whole number of tokens"),
        (True, TypeError, "whole number of tokens"),
        (torch.tensor(3.0), TypeError, "0-d tensor of dtype torch.float32"),
        (-1, ValueError, "offset must be >= 0"),
        (torch.tensor([0, 5]), TypeError, "per-sequence positions .* position_ids of shape \\(batch, seq\\)"),
    ],
)
def test_bad_offsets_are_named(offset, error, match):
    with pytest.raises(error, match=match):
        ce.TransformerEmbedding(10, 8, dropout=0.0)(torch.zeros(2, 4, dtype=torch.long), offset=offset)
    with pytest.raises(error, match=match):
        ce.SinusoidalPositionalEncoding(8)(torch.zeros(2, 4, 8), offset)
    if not (isinstance(offset, torch.Tensor) and offset.dim() == 1):  # RoPE takes per-sequence offsets
        with pytest.raises(error, match=match):
            ce.RotaryEmbedding(8).rotate(torch.zeros(2, 1, 4, 8), offset=offset)


def test_per_sequence_offsets_rotate_each_sequence_at_its_own_positions():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 8, generator=gen, dtype=torch.float64)
    rope = ce.RotaryEmbedding(8, layout="half")
    out = rope.rotate(x, offset=torch.tensor([0, 5]))
    torch.testing.assert_close(out[0], rope.rotate(x[:1], offset=0)[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(out[1], rope.rotate(x[1:], offset=5)[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"dtype": torch.long}, TypeError, "dtype must be a floating-point torch.dtype.*got torch.int64"),
        ({"dtype": "float32"}, TypeError, "dtype must be a floating-point torch.dtype"),
        ({"device": "gpu"}, ValueError, "device='gpu' is not a device name"),
    ],
)
def test_bad_dtype_and_device_fail_at_construction(kwargs, error, match):
    for build in (
        lambda: ce.TransformerEmbedding(10, 8, **kwargs),
        lambda: ce.TokenEmbedding(10, 8, **kwargs),
        lambda: ce.LearnedPositionalEmbedding(10, 8, **kwargs),
        lambda: ce.MultilingualEmbedding({"en": 10}, 8, **kwargs),
        lambda: ce.RelativePositionBias(2, **kwargs),
    ):
        with pytest.raises(error, match=match):
            build()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_cuda_device_without_cuda_names_the_fix():
    with pytest.raises(ValueError, match="device='cuda' but (this PyTorch build has no CUDA|no CUDA GPU).*'cpu'"):
        check_device_dtype("cuda")
    with pytest.raises(ValueError, match="device='cuda:0' but"):
        ce.TransformerEmbedding(10, 8, device="cuda:0")
    with pytest.raises(ValueError, match="device='cuda' but"):
        ce.SinusoidalPositionalEncoding(8, device="cuda")


def test_check_number():
    assert check_number(np.float32(2.5), "x") == 2.5
    with pytest.raises(ValueError, match="x must be >= 1"):
        check_number(0.5, "x", minimum=1)


def test_batch_first_errors_name_the_convention():
    rope = ce.RotaryEmbedding(8)
    q, k = torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 3, 8)  # or (b, s, h, h_d) with 2 tokens, 4 and 3 heads
    with pytest.raises(ValueError, match=r"\(batch, heads, seq, head_dim\).*transpose\(1, 2\)"):
        rope(q, k)
    with pytest.raises(ValueError, match=r"looks \(batch, seq, heads, head_dim\).*x.transpose\(1, 2\)"):
        rope.rotate(torch.zeros(2, 5, 3, 8), position_ids=torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"Inputs are batch first.*x.transpose\(0, 1\)"):
        ce.LearnedPositionalEmbedding(16, 8)(torch.zeros(4, 100, 8))
    with pytest.raises(ValueError, match=r"position_ids must be >= 0.*clamp"):
        rope.rotate(torch.zeros(1, 1, 2, 8), position_ids=torch.tensor([[-1, 0]]))


def test_su_is_phi3s_old_name_for_longrope():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 3, 8, generator=gen, dtype=torch.float64)
    su = longrope() | {"type": "su"}
    del su["rope_type"]
    for offset in (0, L0):  # the short and the long factors
        expected = ce.RotaryEmbedding(8, rope_scaling=longrope()).rotate(x, offset=offset)
        assert torch.equal(ce.RotaryEmbedding(8, rope_scaling=su).rotate(x, offset=offset), expected)
    assert ce.RotaryEmbedding(8, rope_scaling=su).rope_type == "longrope"


@pytest.mark.parametrize(
    "build, name, value",
    [
        (lambda: ce.RotaryEmbedding(8), "base", 5e5),
        (lambda: ce.RotaryEmbedding(8), "rope_scaling", {"rope_type": "linear", "factor": 4.0}),
        (lambda: ce.RotaryEmbedding(8), "layout", "half"),
        (lambda: ce.SinusoidalPositionalEncoding(8), "base", 500.0),
        (lambda: ce.SinusoidalPositionalEncoding(8), "d_model", 16),
        (lambda: ce.LearnedPositionalEmbedding(16, 8), "max_len", 32),
        (lambda: ce.TokenEmbedding(10, 8), "vocab_size", 20),
        (lambda: ce.TokenEmbedding(10, 8), "d_model", 16),
        (lambda: ce.TransformerEmbedding(10, 8), "position", "learned"),
        (lambda: ce.MultilingualEmbedding({"en": 10}, 8), "padding_idx", 0),
        (lambda: ce.RelativePositionBias(4), "num_buckets", 16),
    ],
)
def test_arguments_a_module_is_built_from_are_read_only(build, name, value):
    """Assigning one would leave the tables built from the old value while repr shows the new one."""
    module = build()
    before = getattr(module, name)
    kind = type(module).__name__
    with pytest.raises(AttributeError, match=rf"{kind}.{name} is fixed at construction.*build a new {kind}"):
        setattr(module, name, value)
    assert getattr(module, name) == before and getattr(copy.deepcopy(module), name) == before


def test_resize_updates_max_len():
    learned = ce.LearnedPositionalEmbedding(16, 8).resize(32)
    assert learned.max_len == 32 == learned.weight.shape[0] and "max_len=32" in repr(learned)
