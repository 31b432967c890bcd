"""Misuse of every layer, one probe each: a clear error of the right type whose message names the argument (or
the key), shows the value, and says what to do instead. Probes are numbered as in the library's misuse catalogue;
the numbers not listed are valid edge cases (empty batches, zero-length sequences, ...) tested with their layers."""

import math
import re

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch import nn

import course_embed as ce
from course_embed import parallel

V, D = 1000, 64
#: words a message uses to say what to do instead
FIX = re.compile(
    r"\b(use|pass|call|build|give|unset|clamp|convert|wrap|transpose|cast|add|leave|remove|resize|rotate|fix|check|"
    r"count|drop|reshape|one of)\b|e\.g\."
)


def token(**kwargs):
    return ce.TokenEmbedding(V, D, **kwargs)


def rope_probe(q_shape=(2, 4, 8, D), k_shape=None, **kwargs):
    q = torch.zeros(q_shape)
    return lambda: ce.RotaryEmbedding(D)(q, torch.zeros(k_shape or q_shape), **kwargs)


def scaling(**extra):
    return lambda: ce.RotaryEmbedding(D, rope_scaling=extra)


def assign(name, value):
    rope = ce.RotaryEmbedding(D)
    return lambda: setattr(rope, name, value)


ids = torch.zeros(2, 5, dtype=torch.long)
multi = ce.MultilingualEmbedding({"en": 10, "zh": 20}, 8)
LLAMA = {"rope_theta": 1e4, "hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 128}

PROBES = [  # (number, what, call, error type, pattern naming the argument)
    (0, "token: float ids", lambda: token()(ids.float()), TypeError, "ids"),
    (1, "token: id == vocab_size", lambda: token()(ids + V), ValueError, "ids .*1000"),
    (2, "token: negative id", lambda: token()(ids - 1), ValueError, "ids .*-1"),
    (3, "token: uint8 ids", lambda: token()(ids.byte()), TypeError, "ids .*uint8"),
    (4, "token: list ids", lambda: token()([[1, 2]]), TypeError, "ids .*list"),
    (5, "token: vocab_size=1000.5", lambda: ce.TokenEmbedding(1000.5, D), TypeError, "vocab_size .*1000.5"),
    (6, "token: vocab_size=-5", lambda: ce.TokenEmbedding(-5, D), ValueError, "vocab_size .*-5"),
    (7, "token: d_model=0", lambda: ce.TokenEmbedding(V, 0), ValueError, "d_model .*0"),
    (8, "token: d_model='64'", lambda: ce.TokenEmbedding(V, "64"), TypeError, "d_model .*'64'"),
    (9, "token: padding_idx=-1", lambda: token(padding_idx=-1), ValueError, "padding_idx=-1"),
    (10, "token: padding_idx=V", lambda: token(padding_idx=V), ValueError, "padding_idx=1000"),
    (11, "token: padding_idx=2.0", lambda: token(padding_idx=2.0), TypeError, "padding_idx .*2.0"),
    (12, "token: integer dtype", lambda: token(dtype=torch.int64), TypeError, "dtype .*int64"),
    pytest.param(
        13, "token: device='cuda' without CUDA", lambda: token(device="cuda"), ValueError, "device='cuda'",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present"),
    ),  # fmt: skip
    (14, "token: device='gpu'", lambda: token(device="gpu"), ValueError, "device='gpu'"),
    (15, "token: init='xavier'", lambda: token(init="xavier"), ValueError, "init .*'xavier'"),
    (16, "lookup_add: float64 addend", lambda: token().lookup_add(ids, torch.zeros(5, D).double()), TypeError,
     "addend .*float64"),
    (17, "lookup_add: addend (6, d)", lambda: token().lookup_add(ids, torch.zeros(6, D)), ValueError,
     r"addend .*\(6, 64\)"),
    (18, "lookup_add: addend (b, s, d, 1)", lambda: token().lookup_add(ids, torch.zeros(2, 5, D, 1)), ValueError,
     "addend .*1"),
    (21, "tie_weights: transposed Linear", lambda: ce.tie_weights(token(), nn.Linear(V, D)), ValueError,
     r"output .*\(64, 1000\)"),
    (22, "token: padding_idx=True", lambda: token(padding_idx=True), TypeError, "padding_idx .*True"),
    (23, "sinusoidal: odd d_model", lambda: ce.SinusoidalPositionalEncoding(63), ValueError, "d_model .*63"),
    (24, "sinusoidal: x (s, d)", lambda: ce.SinusoidalPositionalEncoding(D)(torch.zeros(5, D)), ValueError,
     r"x .*\(5, 64\)"),
    (25, "sinusoidal: integer x", lambda: ce.SinusoidalPositionalEncoding(D)(ids[..., None].expand(2, 5, D)),
     TypeError, "x .*int64"),
    (26, "sinusoidal: offset=2.5", lambda: ce.SinusoidalPositionalEncoding(D)(torch.zeros(1, 2, D), 2.5), TypeError,
     "offset .*2.5"),
    (27, "sinusoidal: offset=-1", lambda: ce.SinusoidalPositionalEncoding(D)(torch.zeros(1, 2, D), -1), ValueError,
     "offset .*-1"),
    (28, "sinusoidal: per-sequence offset", lambda: ce.SinusoidalPositionalEncoding(D)(torch.zeros(2, 2, D),
     torch.tensor([0, 3])), TypeError, r"offset .*\(2,\)"),
    (29, "sinusoidal: max_len=-1", lambda: ce.SinusoidalPositionalEncoding(D, max_len=-1), ValueError,
     "max_len .*-1"),
    (30, "sinusoidal: base=nan", lambda: ce.SinusoidalPositionalEncoding(D, base=math.nan), ValueError, "base .*nan"),
    (31, "sinusoidal_table(10.5)", lambda: ce.sinusoidal_table(10.5, D), TypeError, "length .*10.5"),
    (32, "sinusoidal: encoding(-3)", lambda: ce.SinusoidalPositionalEncoding(8, max_len=16).encoding(-3), ValueError,
     "length .*-3"),
    (33, "learned: s > max_len", lambda: ce.LearnedPositionalEmbedding(16, D)(torch.zeros(2, 17, D)), ValueError,
     "max_len=16"),
    (35, "learned: resize(1)", lambda: ce.LearnedPositionalEmbedding(16, D).resize(1), ValueError, "new_len=1"),
    (36, "learned: max_len=10.0", lambda: ce.LearnedPositionalEmbedding(10.0, D), TypeError, "max_len .*10.0"),
    (37, "learned: x of another width", lambda: ce.LearnedPositionalEmbedding(16, D)(torch.zeros(1, 4, 32)),
     ValueError, "x .*32.*d_model=64"),
    (38, "fusion: ids (s,)", lambda: ce.TransformerEmbedding(V, D)(ids[0]), ValueError, r"ids .*\(5,\)"),
    (39, "fusion: ids (b, s, 1)", lambda: ce.TransformerEmbedding(V, D)(ids[..., None]), ValueError,
     r"ids .*\(2, 5, 1\).*squeeze\(-1\)"),
    (40, "fusion: position='rope'", lambda: ce.TransformerEmbedding(V, D, position="rope"), ValueError,
     "position .*'rope'"),
    (41, "fusion: concat d_position=d_model", lambda: ce.TransformerEmbedding(V, D, fusion="concat", d_position=D),
     ValueError, "d_position .*64"),
    (42, "fusion: concat odd d_position", lambda: ce.TransformerEmbedding(V, D, fusion="concat", d_position=33),
     ValueError, "d_position .*33"),
    (43, "fusion: dropout=1.0", lambda: ce.TransformerEmbedding(V, D, dropout=1.0), ValueError, "dropout .*1.0"),
    (44, "fusion: 0-d float offset", lambda: ce.TransformerEmbedding(V, D)(ids, offset=torch.tensor(1.0)), TypeError,
     "offset .*float32"),
    (45, "fusion: learned, s > max_len", lambda: ce.TransformerEmbedding(V, D, position="learned", max_len=4)(ids),
     ValueError, "max_len=4"),
    (46, "fusion: compile with sparse", lambda: ce.TransformerEmbedding(V, D, compile=True, sparse=True), ValueError,
     "compile=True .*sparse=True"),
    (51, "rope: head_dim=63", lambda: ce.RotaryEmbedding(63), ValueError, "head_dim .*63"),
    (52, "rope: head_dim=64.0", lambda: ce.RotaryEmbedding(64.0), TypeError, "head_dim .*64.0"),
    (53, "rope: layout='neox'", lambda: ce.RotaryEmbedding(D, layout="neox"), ValueError, "layout .*'neox'"),
    (54, "rope: dynamic_rule='hf'", lambda: ce.RotaryEmbedding(D, dynamic_rule="hf"), ValueError,
     "dynamic_rule .*'hf'"),
    (56, "rope: base=1.0", lambda: ce.RotaryEmbedding(D, base=1.0), ValueError, "base .*1.0"),
    (58, "rope: q and k at different lengths", rope_probe(k_shape=(2, 4, 5, D)), ValueError, "q and k .*8 and 5"),
    (59, "rope: integer q", lambda: ce.RotaryEmbedding(D)(ids[:, None, :, None].expand(2, 1, 5, D), torch.zeros(2, 1,
     5, D)), TypeError, "q.*int64"),
    (60, "rope: 3-d q", rope_probe(q_shape=(4, 8, D)), ValueError, r"q .*\(4, 8, 64\)"),
    (61, "rope: float position_ids", rope_probe(position_ids=torch.zeros(2, 8)), TypeError,
     "position_ids .*float32"),
    (62, "rope: position_ids (2, 9) for s = 8", rope_probe(position_ids=torch.zeros(2, 9, dtype=torch.long)),
     ValueError, r"position_ids .*\(2, 9\)"),
    (63, "rope: position_ids -1 at pads", rope_probe(position_ids=torch.full((2, 8), -1)), ValueError,
     "position_ids .*-1"),
    (64, "rope: position_ids and offset", rope_probe(offset=3, position_ids=torch.zeros(2, 8, dtype=torch.long)),
     ValueError, "offset .*position_ids"),
    (65, "rope: 1-d offset of the wrong length", rope_probe(offset=torch.zeros(3, dtype=torch.long)), ValueError,
     r"offset .*\(3,\)"),
    (66, "rope: 2-d offset", rope_probe(offset=torch.zeros(2, 1, dtype=torch.long)), TypeError, r"offset .*\(2, 1\)"),
    (67, "rope: offset=3.0", rope_probe(offset=3.0), TypeError, "offset .*3.0"),
    (68, "rope: position_ids as a list", rope_probe(position_ids=[[0] * 8] * 2), TypeError, "position_ids .*list"),
    (69, "rope: factor nan", scaling(rope_type="linear", factor=math.nan), ValueError, "'factor'.*nan"),
    (70, "rope: factor inf", scaling(rope_type="linear", factor=math.inf), ValueError, "'factor'.*inf"),
    (71, "rope: factor 0.5", scaling(rope_type="linear", factor=0.5), ValueError, "'factor'.*0.5"),
    (72, "rope: factor '4'", scaling(rope_type="linear", factor="4"), TypeError, "'factor'.*'4'"),
    (73, "rope: yarn without its original length", scaling(rope_type="yarn", factor=4.0), ValueError,
     "original_max_position_embeddings"),
    (75, "rope: longrope list too short", scaling(rope_type="longrope", factor=4.0,
     original_max_position_embeddings=64, short_factor=[1.0] * 31, long_factor=[1.0] * 32), ValueError,
     "'short_factor'.*31"),
    (76, "rope: yarn attention_factor 0", scaling(rope_type="yarn", factor=4.0, original_max_position_embeddings=64,
     attention_factor=0.0), ValueError, "'attention_factor'.*0.0"),
    (77, "rope: yarn beta_fast <= beta_slow", scaling(rope_type="yarn", factor=4.0,
     original_max_position_embeddings=64, beta_fast=1.0, beta_slow=2.0), ValueError, "beta_fast.*1.0"),
    (78, "rope: rope_scaling a str", lambda: ce.RotaryEmbedding(D, rope_scaling="linear"), TypeError,
     "rope_scaling .*str"),
    (79, "rope: partial_rotary_factor 0.3", scaling(partial_rotary_factor=0.3), ValueError,
     "partial_rotary_factor=0.3"),
    (80, "rope: dynamic original length 0", scaling(rope_type="dynamic", factor=2.0,
     original_max_position_embeddings=0), ValueError, "'original_max_position_embeddings'.*0"),
    (81, "rope: base and rope_theta disagree", lambda: ce.RotaryEmbedding(D, base=5e5,
     rope_scaling={"rope_theta": 1e4}), ValueError, "base=500000.0 .*'rope_theta'"),
    (82, "rope: base=10000 and rope_theta 500000", lambda: ce.RotaryEmbedding(D, base=1e4,
     rope_scaling={"rope_theta": 5e5}), ValueError, "base=10000.0 .*'rope_theta'"),
    (83, "from_config: no rope_theta", lambda: ce.RotaryEmbedding.from_config({"hidden_size": 256,
     "num_attention_heads": 4}), ValueError, "rope_theta"),
    (84, "from_config: no hidden_size", lambda: ce.RotaryEmbedding.from_config({"rope_theta": 1e4,
     "num_attention_heads": 4}), ValueError, "hidden_size"),
    (86, "from_config: per-layer-type rope_parameters", lambda: ce.RotaryEmbedding.from_config(LLAMA | {
     "rope_parameters": {"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}}}),
     ValueError, "rope_parameters"),
    (89, "from_config: a str", lambda: ce.RotaryEmbedding.from_config("llama"), TypeError, "config .*str"),
    (90, "from_config: dynamic without max_position_embeddings", lambda: ce.RotaryEmbedding.from_config({
     "rope_theta": 1e4, "hidden_size": 256, "num_attention_heads": 4, "rope_scaling": {"rope_type": "dynamic",
     "factor": 2.0}}), ValueError, "max_position_embeddings"),
    (95, "rope: base assigned later", assign("base", 5e5), AttributeError, "base .*500000.0"),
    (96, "rope: rope_scaling assigned later", assign("rope_scaling", {"rope_type": "linear", "factor": 4.0}),
     AttributeError, "rope_scaling .*'linear'"),
    (97, "alibi_slopes(0)", lambda: ce.alibi_slopes(0), ValueError, "num_heads .*0"),
    (100, "alibi_bias key_len=0", lambda: ce.alibi_bias(ce.alibi_slopes(8), 0), ValueError, "key_len .*0"),
    (101, "alibi_bias query_len > key_len", lambda: ce.alibi_bias(ce.alibi_slopes(8), 10, query_len=11), ValueError,
     "query_len .*11"),
    (102, "alibi_bias slopes (h, 1)", lambda: ce.alibi_bias(ce.alibi_slopes(8)[:, None], 10), ValueError,
     r"slopes .*\(8, 1\)"),
    (103, "alibi_bias key_len=10.5", lambda: ce.alibi_bias(ce.alibi_slopes(8), 10.5), TypeError, "key_len .*10.5"),
    (105, "relative_position_bucket: float offsets", lambda: ce.relative_position_bucket(torch.zeros(3)), TypeError,
     "relative_position .*float32"),
    (106, "relative_position_bucket: 3 buckets", lambda: ce.relative_position_bucket(torch.zeros(3, dtype=torch.long),
     num_buckets=3), ValueError, "num_buckets .*3"),
    (107, "relative_position_bucket: max_distance 4", lambda: ce.relative_position_bucket(torch.zeros(3,
     dtype=torch.long), num_buckets=32, max_distance=4), ValueError, "max_distance .*4"),
    (108, "RelativePositionBias: q > k", lambda: ce.RelativePositionBias(4)(5, 3), ValueError, "query_len=5"),
    (109, "RelativePositionBias(num_heads=8.0)", lambda: ce.RelativePositionBias(8.0), TypeError, "num_heads .*8.0"),
    (111, "multilingual: id outside its language", lambda: multi(torch.tensor([[1, 15]]), "en"), ValueError,
     "ids.*15.*'en'"),
    (112, "multilingual: unknown language", lambda: multi(ids, "fr"), ValueError, "'fr'"),
    (113, "multilingual: 3 names for a batch of 2", lambda: multi(ids, ["en", "zh", "en"]), ValueError,
     "lang .*3"),
    (114, "multilingual: float lang", lambda: multi(ids, torch.zeros(2)), TypeError, "lang .*float32"),
    (115, "multilingual: lang index 2", lambda: multi(ids, torch.tensor([0, 2])), ValueError, "lang .*2"),
    (116, "multilingual: padding_idx=12", lambda: ce.MultilingualEmbedding({"en": 10, "zh": 20}, 8, padding_idx=12),
     ValueError, "padding_idx=12"),
    (117, "multilingual: vocab_sizes a list", lambda: ce.MultilingualEmbedding([10, 20], 8), ValueError,
     r"vocab_sizes .*\[10, 20\]"),
    (119, "multilingual: 3-d ids", lambda: multi(torch.zeros(1, 2, 2, dtype=torch.long), "en"), ValueError,
     r"ids .*\(1, 2, 2\)"),
    (121, "shard_range: rank 3 of 2", lambda: parallel.shard_range(10, 3, 2), ValueError, "rank=3"),
    (122, "shard_range: vocabulary 1 over 2 ranks", lambda: parallel.shard_range(1, 0, 2), ValueError,
     "vocab_size=1"),
    (123, "memory_per_rank: optimizer='adamw'", lambda: parallel.memory_per_rank(10, 4, 2, optimizer="adamw"),
     ValueError, "optimizer .*'adamw'"),
    (125, "partial_lookup: padding_idx outside the shard", lambda: parallel.partial_lookup(ids, torch.zeros(5, 4), 0,
     padding_idx=7), ValueError, "padding_idx=7"),
    (133, "partial_lookup: float ids", lambda: parallel.partial_lookup(ids.float(), torch.zeros(5, 4), 0), TypeError,
     "ids .*float32"),
    pytest.param(
        134, "pick_device('cuda') without CUDA", lambda: ce.pick_device("cuda"), ValueError, "preferred='cuda'",
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present"),
    ),  # fmt: skip
    (135, "pick_device('tpu')", lambda: ce.pick_device("tpu"), ValueError, "'tpu'"),
    (136, "seed_everything('0')", lambda: ce.seed_everything("0"), TypeError, "seed .*'0'"),
]  # fmt: skip

WITHOUT_GROUP = [  # need no process group running
    (120, "VocabParallelEmbedding", lambda: parallel.VocabParallelEmbedding(V, D), RuntimeError,
     "init_process_group"),
    (124, "vocab_parallel_cross_entropy", lambda: parallel.vocab_parallel_cross_entropy(torch.zeros(2, V),
     torch.zeros(2, dtype=torch.long), V), RuntimeError, "init_process_group"),
]  # fmt: skip

IN_A_GROUP = [  # in a process group of one rank
    (126, "id == vocab_size", lambda: parallel.VocabParallelEmbedding(V, D)(ids + V), ValueError, "ids .*1000"),
    (127, "load_full_ of the wrong shape", lambda: parallel.VocabParallelEmbedding(V, D).load_full_(torch.zeros(V + 1,
     D)), ValueError, r"full_weight .*\(1001, 64\)"),
    (128, "padding_idx = vocab_size", lambda: parallel.VocabParallelEmbedding(V, D, padding_idx=V), ValueError,
     "padding_idx=1000"),
    (129, "cross-entropy logits of the wrong width", lambda: parallel.vocab_parallel_cross_entropy(torch.zeros(2,
     V + 1), torch.zeros(2, dtype=torch.long), V), ValueError, "logits .*1001"),
    (130, "cross-entropy reduction='avg'", lambda: parallel.vocab_parallel_cross_entropy(torch.zeros(2, V),
     torch.zeros(2, dtype=torch.long), V, reduction="avg"), ValueError, "reduction .*'avg'"),
    (133, "float ids", lambda: parallel.VocabParallelEmbedding(V, D)(ids.float()), TypeError, "ids .*float32"),
    (131, "cross-entropy target = vocab_size", lambda: parallel.vocab_parallel_cross_entropy(torch.zeros(2, V),
     torch.tensor([0, V]), V), ValueError, "targets .*1000"),
]  # fmt: skip


def check(call, error, pattern):
    with pytest.raises(error) as raised:
        call()
    message = str(raised.value)
    assert re.search(pattern, message), f"{pattern!r} not in: {message}"
    assert FIX.search(message), f"no fix in: {message}"


@pytest.mark.parametrize("number, what, call, error, pattern", PROBES)
def test_misuse_is_named_with_its_value_and_fix(number, what, call, error, pattern):
    check(call, error, pattern)


@pytest.mark.parametrize("number, what, call, error, pattern", WITHOUT_GROUP)
def test_distributed_calls_without_a_process_group(number, what, call, error, pattern):
    if dist.is_initialized():
        pytest.skip("a process group is already running in this process")
    check(call, error, pattern)


@pytest.fixture(scope="module")
def group_of_one():
    if dist.is_initialized():
        pytest.skip("a process group is already running in this process")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{parallel.free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("number, what, call, error, pattern", IN_A_GROUP)
def test_distributed_misuse_in_a_group_of_one(group_of_one, number, what, call, error, pattern):
    check(call, error, pattern)


def test_the_catalogue_has_124_misuse_probes():
    """With 57 and 94 (q and k given as (b, s, h, d): see the next test) and the configs that load since."""
    numbers = {p.values[0] if hasattr(p, "values") else p[0] for p in PROBES + WITHOUT_GROUP + IN_A_GROUP}
    assert len(numbers | {55, 57, 94, 104} | set(ACCEPTED)) == 124


def test_bfloat16_alibi_biases_of_2000_keys_are_distinct():
    """104: key indices in the slopes' bfloat16 collided above 256; now float32 work, cast once (as BLOOM)."""
    bias = ce.alibi_bias(ce.alibi_slopes(8, dtype=torch.bfloat16), 2000)
    exact = ce.alibi_bias(ce.alibi_slopes(8, dtype=torch.float64), 2000)
    assert bias.dtype == torch.bfloat16 and torch.equal(bias, exact.to(torch.bfloat16))


def test_rope_has_no_max_len():
    """55: RoPE keeps no tables (every call computes its own cos and sin), so it takes no max_len at all."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_len'"):
        ce.RotaryEmbedding(D, max_len=0)


def test_a_transposed_q_with_as_many_heads_as_tokens_is_documented_as_undetectable():
    """57, 94: (b, s, h, d) given for both q and k is a valid (b, h, s, d) shape; the docstring says to transpose."""
    doc = " ".join(ce.RotaryEmbedding.__doc__.replace("``", "").split())
    assert "Nothing in the shapes tells (b, h, s, h_d) from (b, s, h, h_d)" in doc and "transpose(1, 2)" in doc


ACCEPTED = {  # configs transformers accepts, and counts given as numpy or tensor integers: they work
    74: lambda: ce.RotaryEmbedding(D, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                    "original_max_position_embeddings": 64, "finetuned": True}),
    85: lambda: ce.RotaryEmbedding.from_config({"hidden_size": 256, "num_attention_heads": 4, "rotary_pct": 0.25,
                                                "rotary_emb_base": 1e4, "max_position_embeddings": 128}),
    87: lambda: ce.RotaryEmbedding.from_config(LLAMA | {"rope_scaling": {"rope_type": "yarn", "factor": None,
                                                                          "original_max_position_embeddings": 32}}),
    88: lambda: ce.RotaryEmbedding.from_config(LLAMA | {"rope_parameters": {"rope_type": "proportional",
                                                                             "rope_theta": 1e4}}),
    98: lambda: ce.alibi_slopes(np.int64(8)),
    99: lambda: ce.alibi_slopes(torch.tensor(8)),
}  # fmt: skip


@pytest.mark.parametrize("number", sorted(ACCEPTED))
def test_what_transformers_accepts_now_works(number):
    assert ACCEPTED[number]() is not None
