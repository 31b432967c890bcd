import math

import pytest
import torch
from torch import nn

from course_embed import MultilingualEmbedding

SIZES = {"en": 30, "zh": 50, "fr": 20}


def reference_tables(m: MultilingualEmbedding, padding_idx=None) -> dict[str, nn.Embedding]:
    """The independent design: one nn.Embedding per language, loaded with the same rows."""
    tables = {}
    for lang, size in SIZES.items():
        emb = nn.Embedding(size, m.d_model, padding_idx=padding_idx, device=m.weight.device)
        with torch.no_grad():
            emb.weight.copy_(m.table(lang))
        tables[lang] = emb
    return tables


def random_batch(gen, langs, seq=7):
    return torch.stack([torch.randint(0, SIZES[lang], (seq,), generator=gen) for lang in langs])


def test_mixed_batch_equals_separate_tables(device, gen):
    m = MultilingualEmbedding(SIZES, 16, scale=True).to(device)
    ref = reference_tables(m)
    langs = ["zh", "en", "fr", "zh"]
    ids = random_batch(gen, langs).to(device)
    expected = torch.stack([ref[lang](ids[i]) for i, lang in enumerate(langs)]) * math.sqrt(16)
    torch.testing.assert_close(m(ids, langs), expected, rtol=1e-6, atol=1e-6)
    index = torch.tensor([m.languages.index(lang) for lang in langs], device=device)
    torch.testing.assert_close(m(ids, index), expected, rtol=1e-6, atol=1e-6)


def test_gradients_equal_separate_tables_and_pads_get_none(device, gen):
    m = MultilingualEmbedding(SIZES, 8, padding_idx=0, scale=False).to(device)
    ref = reference_tables(m, padding_idx=0)
    langs = ["en", "fr", "zh"]
    ids = random_batch(gen, langs, seq=9)
    ids[:, -3:] = 0
    ids = ids.to(device)
    upstream = torch.randn(3, 9, 8, generator=gen).to(device)
    (m(ids, langs) * upstream).sum().backward()
    out = torch.stack([ref[lang](ids[i]) for i, lang in enumerate(langs)])
    (out * upstream).sum().backward()
    start = 0
    for lang, size in SIZES.items():  # the packed table holds the languages back to back, in order
        torch.testing.assert_close(m.weight.grad[start : start + size], ref[lang].weight.grad, rtol=1e-6, atol=1e-6)
        start += size
    assert torch.count_nonzero(m.weight.grad[m.pad_rows]) == 0


def test_per_token_languages_for_code_switching(gen):
    m = MultilingualEmbedding(SIZES, 6)
    ref = reference_tables(m)
    lang = torch.randint(0, 3, (2, 5), generator=gen)
    ids = torch.stack(
        [
            torch.stack([torch.randint(0, SIZES[m.languages[k]], (), generator=gen) for k in row])
            for row in lang.tolist()
        ]
    )
    expected = torch.stack(
        [
            torch.stack([ref[m.languages[k]](ids[i, j]) for j, k in enumerate(row)])
            for i, row in enumerate(lang.tolist())
        ]
    ) * math.sqrt(6)
    torch.testing.assert_close(m(ids, lang), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("init", ["normal", "xavier_uniform", "scaled_normal"])
def test_all_pad_rows_zero_after_any_init(init):
    m = MultilingualEmbedding(SIZES, 8, padding_idx=2, init=init)
    assert m.pad_rows == [2, 32, 82]
    assert torch.count_nonzero(m.weight[m.pad_rows]) == 0
    m.reset_parameters("xavier_uniform")
    assert torch.count_nonzero(m.weight[m.pad_rows]) == 0
    assert torch.count_nonzero(m.weight) == m.weight.numel() - 3 * 8
    out = m(torch.tensor([[2, 5], [2, 2]]), ["fr", "zh"])
    assert torch.count_nonzero(out[0, 0]) == 0 and torch.count_nonzero(out[1]) == 0


def test_parameters_are_the_sum_of_the_vocabularies():
    m = MultilingualEmbedding(SIZES, 12)
    separate = sum(nn.Embedding(v, 12).weight.numel() for v in SIZES.values())
    assert sum(p.numel() for p in m.parameters()) == separate == 100 * 12


def test_table_is_a_view_of_the_packed_rows():
    m = MultilingualEmbedding(SIZES, 4, scale=False)
    with torch.no_grad():
        m.table("zh")[3] = 7.0
    assert torch.equal(m(torch.tensor([[3]]), "zh"), torch.full((1, 1, 4), 7.0))
    assert m.table("fr").shape == (20, 4)


def test_id_of_another_language_is_rejected_not_read():
    # id 40 exists in the packed table (it is a zh row) but not in the en vocabulary
    m = MultilingualEmbedding(SIZES, 4)
    ids = torch.tensor([[1, 2], [3, 40]])
    with pytest.raises(ValueError, match=r"ids\[1, 1\] = 40 is outside the 'en' vocabulary \[0, 30\)"):
        m(ids, ["zh", "en"])
    assert m(ids, ["en", "zh"]).shape == (2, 2, 4)


@pytest.mark.parametrize("lang", ["zh", ["en", "zh"], torch.tensor([0, 1]), torch.tensor([[0, 1], [1, 2]])])
def test_forward_reads_no_value_back_while_compiled_and_still_checks(lang):
    # a value read back to Python (a host sync on a GPU) would split the compiled graph
    m = MultilingualEmbedding(SIZES, 4, padding_idx=0)
    ids = torch.tensor([[1, 2], [3, 19]])
    torch.compiler.reset()
    explained = torch._dynamo.explain(m)(ids, lang)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    compiled = torch.compile(m, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(ids, lang), m(ids, lang), rtol=0, atol=0)
    bad, named = ids.clone(), isinstance(lang, str)
    bad[0, 0] = 25 if named else 35  # below the largest vocabulary (50), outside fr (20) or en (30), token [0, 0]'s
    with pytest.raises(RuntimeError, match="outside its language's vocabulary: call the module on CPU ids"):
        compiled(bad, "fr" if named else lang)
    torch.compiler.reset()


@pytest.mark.parametrize(
    "ids, lang, error, match",
    [
        (torch.tensor([[1, 2]]), "de", ValueError, r"unknown language 'de'.*\['en', 'zh', 'fr'\]"),
        (torch.tensor([[1, 2]]), ["en", "zh"], ValueError, "expected 1 names, got 2"),
        (torch.tensor([[1, 2]]), torch.tensor([3]), ValueError, r"outside \[0, 3\)"),
        (torch.tensor([[1, 2]]), torch.tensor([0, 1, 2]), ValueError, r"shape \(batch,\)"),
        (torch.tensor([[1, 2]]), torch.tensor([0.0]), TypeError, "integer language indices"),
        (torch.tensor([[1, 2]]), 0, TypeError, "language name"),
        (torch.tensor([1, 2]), "en", ValueError, r"\(batch, seq\)"),
        (torch.tensor([[1.0, 2.0]]), "en", TypeError, "integer"),
        (torch.tensor([[1, -2]]), "en", ValueError, "negative"),
    ],
)
def test_bad_forward_inputs(ids, lang, error, match):
    with pytest.raises(error, match=match):
        MultilingualEmbedding(SIZES, 4)(ids, lang)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(vocab_sizes={}), ValueError, "non-empty mapping"),
        (dict(vocab_sizes=[30, 50]), ValueError, "non-empty mapping"),
        (dict(vocab_sizes={"en": 0}), ValueError, r"vocab_sizes\['en'\] must be a positive integer"),
        (dict(vocab_sizes={1: 10}), TypeError, "must be strings"),
        (dict(d_model=0), ValueError, "d_model"),
        (dict(padding_idx=20), ValueError, r"padding_idx=20.*\[0, 20\)"),
    ],
)
def test_bad_construction(kwargs, error, match):
    args = dict(vocab_sizes=SIZES, d_model=4) | kwargs
    with pytest.raises(error, match=match):
        MultilingualEmbedding(**args)
