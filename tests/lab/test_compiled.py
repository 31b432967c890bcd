"""Chapter 6, compiling a whole input block: eager operators, the generated kernels and loops, graph breaks,
recompilation."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_embed import TokenEmbedding, TransformerEmbedding, sinusoidal_table
from course_embed.lab import compiled

CPP = """
extern "C" void kernel(const float* in_ptr0, float* out_ptr0)
{
    {
        #pragma GCC ivdep
        for(int64_t x0=0; x0<4; x0+=1)
        {
            float acc = 0;
            for(int64_t x1=0; x1<16; x1+=1)
            {
                acc = acc + in_ptr0[x1 + 16*x0];
            }
            for(int64_t x1=0; x1<16; x1+=1) { out_ptr0[x1 + 16*x0] = acc; }
        }
    }
    {
        for(int64_t x0=0; x0<64; x0+=8)
        {
            out_ptr0[x0] = 0;
        }
    }
}
"""


def generated_module(kernels: str, call: str) -> str:
    return f"import torch\n{kernels}\nclass Runner:\n    def call(self, args):\n{call}\n        return (buf0, )\n"


def test_code_facts_counts_outermost_loops_and_reads_fused_operators():
    source = generated_module(
        f"cpp_fused_mean_sub_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''{CPP}''')\n",
        "        cpp_fused_mean_sub_0(arg0_1, buf0)\n        extern_kernels.mm(arg0_1, arg1_1, out=buf1)",
    )
    facts = compiled.code_facts(source)
    assert facts["kernels"] == [{"name": "cpp_fused_mean_sub_0", "fused": "mean_sub", "loop_nests": 2}]
    assert facts["library_calls"] == ["extern_kernels.mm"]


def test_code_facts_reads_triton_kernels_and_several_modules():
    gpu = generated_module(
        "triton_per_fused_add_embedding_native_layer_norm_0 = async_compile.triton('triton_', '''\n"
        "def triton_(in_ptr0, out_ptr0):\n    pass\n''')\n"
        "triton_poi_fused_mul_1 = async_compile.triton('triton_', '''\ndef triton_():\n    pass\n''')\n",
        "        buf0 = empty_strided_cuda((1, ), (1, ), torch.int64)\n"
        "        aten.randint.low_out(-9223372036854775808, 9223372036854775807, [1], out=buf0)",
    )
    facts = compiled.code_facts([gpu, gpu])
    names = [k["name"] for k in facts["kernels"]]
    assert names == 2 * ["triton_per_fused_add_embedding_native_layer_norm_0", "triton_poi_fused_mul_1"]
    assert [k["fused"] for k in facts["kernels"][:2]] == ["add_embedding_native_layer_norm", "mul"]
    assert all(k["loop_nests"] is None for k in facts["kernels"])
    assert facts["library_calls"] == 2 * ["aten.randint.low_out"]


def test_eager_ops_lists_each_pass_and_skips_views(gen):
    w, pe = torch.randn(30, 8, generator=gen), torch.randn(5, 8, generator=gen)
    ids = torch.randint(0, 30, (2, 5), generator=gen)

    def layer(ids):
        return (F.embedding(ids, w) * 2.0 + pe).transpose(0, 1)  # the transpose is a view

    assert compiled.eager_ops(layer, ids) == ["aten.embedding", "aten.mul", "aten.add"]


class GPTInput(nn.Module):
    """dropout(W[ids] sqrt(d) + pe), and the first block's LayerNorm of it: ids (b, s) -> two (b, s, d)."""

    def __init__(self, v, d, s, p):
        super().__init__()
        self.embed = TransformerEmbedding(v, d, dropout=p, max_len=s)
        self.pe = sinusoidal_table(s, d)
        self.ln_1 = nn.LayerNorm(d)
        self.p = p

    def forward(self, ids):
        w = self.embed.token.weight
        h = F.embedding(ids, w) * math.sqrt(w.shape[1]) + self.pe[: ids.shape[1]]
        h = F.dropout(h, self.p, self.training)
        return h, self.ln_1(h)


def test_compiled_add_then_mul_is_one_loop():
    x, y = torch.randn(4, 16), torch.randn(16)
    _, out, sources = compiled.compile_and_read(lambda a: (a + y) * 3.0, x)
    torch.testing.assert_close(out, (x + y) * 3.0)
    facts = compiled.code_facts(sources)
    assert [(k["fused"], k["loop_nests"]) for k in facts["kernels"]] == [("add_mul", 1)]


def test_compiled_block_is_one_kernel_equal_to_eager(gen):
    torch.manual_seed(0)
    block = GPTInput(100, 32, 12, 0.25).eval()
    ids = torch.randint(0, 100, (3, 12), generator=gen)
    with torch.no_grad():
        assert compiled.eager_ops(block, ids) == ["aten.embedding", "aten.mul", "aten.add", "aten.native_layer_norm"]
        fn, (h, normed), sources = compiled.compile_and_read(block, ids)
        eager_h, eager_normed = block(ids)
        torch.testing.assert_close(h, block.embed(ids), rtol=1e-6, atol=1e-6)  # the package's layer, eval mode
        torch.testing.assert_close(normed, eager_normed, rtol=1e-5, atol=1e-5)
        assert fn(ids)[1].equal(normed)  # the compiled callable reuses its code
    facts = compiled.code_facts(sources)
    assert [k["fused"] for k in facts["kernels"]] == ["add_embedding_mul_native_layer_norm"]
    assert facts["library_calls"] == []


def test_compiled_dropout_keeps_and_rescales_with_its_own_random_numbers(gen):
    torch.manual_seed(0)
    p = 0.25
    block = GPTInput(100, 64, 32, p)
    ids = torch.randint(0, 100, (8, 32), generator=gen)
    with torch.no_grad():
        _, (h, normed), sources = compiled.compile_and_read(block.train(), ids)
        clean, _ = block.eval()(ids)
    kept = h != 0
    assert abs(kept.double().mean().item() - (1 - p)) < 0.02  # 16384 draws: 5 standard deviations
    torch.testing.assert_close(h[kept], clean[kept] / (1 - p), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(normed, block.ln_1(h), rtol=1e-5, atol=1e-5)
    facts = compiled.code_facts(sources)
    assert [k["fused"] for k in facts["kernels"]] == ["add_embedding_mul_native_dropout_native_layer_norm"]
    assert facts["library_calls"] == ["aten.randint.low_out"]  # the seed, drawn from torch's generator


def lookup_norm(ids):
    w = torch.arange(40.0).view(10, 4)
    return F.layer_norm(F.embedding(ids, w) + torch.ones(12, 4)[: ids.shape[1]], (4,))


@pytest.mark.parametrize(
    ("dynamic", "mark_dim", "graphs", "last"),
    [(False, None, 8, (3, 9)), (None, None, 2, (3, "s")), (None, 1, 1, (3, "s"))],
)
def test_compiles_per_length(dynamic, mark_dim, graphs, last):
    inputs = [torch.arange(3 * s).view(3, s) % 10 for s in range(2, 12)]
    backend, warnings = compiled.compiles_per_length(lookup_norm, inputs, dynamic=dynamic, mark_dim=mark_dim)
    assert len(backend.graphs) == graphs
    assert backend.graphs[-1][0] == last
    limit_hit = [w for w in warnings if "recompile_limit (8)" in w]
    assert len(limit_hit) == (1 if dynamic is False else 0)


def test_counting_backend_runs_the_graph_uncompiled():
    backend = compiled.CountingBackend()
    ids = torch.tensor([[1, 2, 3]])
    torch.compiler.reset()
    out = torch.compile(lookup_norm, backend=backend)(ids)
    torch.compiler.reset()
    assert out.equal(lookup_norm(ids))
    assert backend.graphs == [[(1, 3)]]


def test_marking_a_dimension_leaves_the_callers_tensors_unmarked():
    inputs = [torch.arange(3 * s).view(3, s) % 10 for s in range(2, 6)]
    backend, _ = compiled.compiles_per_length(lookup_norm, inputs, dynamic=None, mark_dim=1)
    assert len(backend.graphs) == 1
    with torch._dynamo.config.patch(recompile_limit=3):
        backend, warnings = compiled.compiles_per_length(lookup_norm, inputs, dynamic=False)
    assert [g[0] for g in backend.graphs] == [(3, 2), (3, 3), (3, 4)]  # static: the first input was not marked
    assert any("recompile_limit (3)" in w for w in warnings)


def test_a_host_read_splits_the_graph_and_the_package_layers_do_not(gen, capfd):
    torch.manual_seed(0)
    layer = TransformerEmbedding(100, 16, max_len=12)
    ids = torch.randint(0, 100, (3, 12), generator=gen)

    def checked(ids):  # a model that checks its ids in Python: int() reads a value back to the host
        if int(ids.max()) >= 100:
            raise ValueError("id outside the vocabulary")
        return F.layer_norm(F.embedding(ids, layer.token.weight), (16,))

    graphs, reasons = compiled.graphs_and_breaks(checked, ids)
    assert graphs == 2 and len(reasons) == 1 and "Tensor.item()" in reasons[0]
    assert "Graph break" not in capfd.readouterr().err  # returned, not also logged to stderr
    assert compiled.graphs_and_breaks(lookup_norm, ids % 10) == (1, [])
    for model in (nn.Sequential(layer, nn.LayerNorm(16)), nn.Sequential(TokenEmbedding(100, 16), nn.LayerNorm(16))):
        for mode in ("train", "eval"):
            with torch.no_grad():
                assert compiled.graphs_and_breaks(getattr(model, mode)(), ids) == (1, [])


def test_package_layer_and_norm_compile_into_one_kernel_that_checks_the_ids(gen):
    torch.manual_seed(0)
    model = nn.Sequential(TransformerEmbedding(100, 16, max_len=12, padding_idx=0), nn.LayerNorm(16)).eval()
    ids = torch.randint(0, 100, (3, 12), generator=gen)
    with torch.no_grad():
        fn, out, sources = compiled.compile_and_read(model, ids)  # Inductor
        torch.testing.assert_close(out, model(ids), rtol=1e-5, atol=1e-5)
        with pytest.raises(RuntimeError, match=r"ids contains an id outside the vocabulary \[0, 100\)"):
            fn(ids.clone().fill_(100))
    facts = compiled.code_facts(sources)
    assert [k["fused"] for k in facts["kernels"]] == [
        "_assert_async_add_aminmax_bitwise_and_embedding_ge_lt_mul_native_layer_norm"
    ]
    assert facts["library_calls"] == []
