"""The package's input layers inside a ``torch.compile``d model: one graph, no graph break, eager values.

Covers ``checks.check_ids`` under tracing, ``TokenEmbedding`` and ``TransformerEmbedding`` (fusion.py). The graph
counts come from ``torch._dynamo.explain``; the compiled runs use the ``aot_eager`` backend (Dynamo's tracing and
AOTAutograd, no code generation). tests/lab/test_compiled.py compiles the layer with Inductor.
"""

import pytest
import torch
from torch import nn

from course_embed import TokenEmbedding, TransformerEmbedding
from course_embed.checks import check_ids

V, D, S = 50, 16, 12


class TinyGPT(nn.Module):
    """A GPT-style model cut to its ends: input layer, a pre-norm residual MLP, LayerNorm and the LM head.

    ids ``(b, s)`` -> logits ``(b, s, V)``.
    """

    def __init__(self, embed: nn.Module):
        super().__init__()
        self.embed = embed
        self.ln_1, self.mlp = nn.LayerNorm(D), nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.ln_f, self.head = nn.LayerNorm(D), nn.Linear(D, V)

    def forward(self, ids, *args):
        h = self.embed(ids, *args)
        h = h + self.mlp(self.ln_1(h))
        return self.head(self.ln_f(h))


def model(position="sinusoidal", **kwargs):
    torch.manual_seed(0)
    if position == "token":
        return TinyGPT(TokenEmbedding(V, D))
    return TinyGPT(TransformerEmbedding(V, D, position=position, max_len=S, **kwargs))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch.compiler.reset()  # no compiled code or recompile counts carried between tests
    yield
    torch.compiler.reset()


@pytest.fixture
def ids(gen):
    return torch.randint(0, V, (3, 8), generator=gen)


@pytest.mark.parametrize(("mode", "grad"), [("eval", False), ("train", True)])
@pytest.mark.parametrize(
    ("position", "kwargs"),
    [("sinusoidal", {}), ("learned", {"padding_idx": 0}), (None, {}), ("sinusoidal", {"fusion": "concat"})]
    + [("sinusoidal", {"compile": True}), ("token", {})],
)
def test_model_with_the_package_layer_is_one_graph(ids, mode, grad, position, kwargs):
    # eval without grad: the inference lookup_add; train: its autograd.Function
    m = getattr(model(position, **kwargs), mode)()
    with torch.set_grad_enabled(grad):
        explained = torch._dynamo.explain(m)(ids)
    assert explained.graph_break_count == 0, [str(r.reason).splitlines()[0] for r in explained.break_reasons]
    assert explained.graph_count == 1


def test_check_ids_under_tracing_is_one_graph_and_keeps_the_type_checks(ids):
    explained = torch._dynamo.explain(check_ids)(ids, V)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    with pytest.raises(TypeError, match="must hold integer token ids"):
        torch.compile(check_ids, backend="eager")(ids.float(), V)  # raised while tracing, then eagerly


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
@pytest.mark.parametrize("offset", [0, 3])
def test_compiled_model_equals_eager_forward_and_backward(gen, position, offset):
    ids = torch.randint(0, V, (3, 8), generator=gen)
    ids[0, :2] = 0  # the pad id: a zero row and no gradient
    upstream = torch.randn(3, 8, V, generator=gen, dtype=torch.float64).float()
    eager = model(position, dropout=0.0, padding_idx=0).train()
    comp = model(position, dropout=0.0, padding_idx=0).train()
    compiled = torch.compile(comp, backend="aot_eager", fullgraph=True)
    with torch.no_grad():  # eager: the two-pass lookup_add; compiled: the traced textbook expression
        torch.testing.assert_close(compiled(ids, offset), eager(ids, offset), rtol=1e-6, atol=1e-6)
    (eager(ids, offset) * upstream).sum().backward()  # eager: the two-pass autograd.Function
    (compiled(ids, offset) * upstream).sum().backward()
    for (name, p), q in zip(eager.named_parameters(), comp.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)
    assert comp.embed.token.weight.grad[0].abs().max() == 0  # the pad row learns nothing, compiled too


@pytest.mark.parametrize("position", ["sinusoidal", "token"])
def test_bad_id_in_compiled_model_raises_naming_the_vocabulary(ids, position):
    compiled = torch.compile(model(position).eval(), backend="aot_eager", fullgraph=True)
    compiled(ids)  # compiles; good ids pass
    for bad in (V, -1):
        wrong = ids.clone()
        wrong[1, 4] = bad
        with pytest.raises(RuntimeError, match=r"ids contains an id outside the vocabulary \[0, 50\).*eagerly"):
            compiled(wrong)
    with pytest.raises(ValueError, match="contains the id 50, outside the vocabulary"):  # eager names the id
        model(position).eval()(ids.clone().fill_(V))
