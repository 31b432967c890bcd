"""Chapter 1's skip-gram: the toy corpus, the context windows against a loop, trained rows that group by class."""

import pytest
import torch

from course_embed.lab import skipgram


def test_toy_corpus_follows_the_templates(gen):
    ids, vocab = skipgram.toy_corpus(200, gen)
    words = [vocab[i] for i in ids.tolist()]
    assert words.count(".") == 200
    sentences = " ".join(words).split(" . ")
    classes = {w: c for c, ws in skipgram.WORD_CLASSES.items() for w in ws}
    shapes = {
        " ".join("{" + classes[w] + "}" if w in classes else w for w in s.split()).rstrip(" .") + " ."
        for s in sentences
    }
    assert shapes <= set(skipgram.TEMPLATES)
    cats = words.count("cat")
    assert cats > words.count("goat")  # Zipf within a class: the first word is the most frequent


def test_context_windows_against_a_loop():
    ids = torch.arange(10) * 3
    centre, context = skipgram.context_windows(ids, window=2)
    assert centre.tolist() == ids[2:8].tolist()
    for row, i in enumerate(range(2, 8)):
        assert context[row].tolist() == [ids[i - 2], ids[i - 1], ids[i + 1], ids[i + 2]]
    with pytest.raises(ValueError, match="window"):
        skipgram.context_windows(torch.arange(4), window=2)


def test_training_makes_same_class_rows_similar():
    ids, vocab = skipgram.toy_corpus(1000, torch.Generator().manual_seed(0))
    table = skipgram.train_context_table(ids, len(vocab), 16, steps=150, seed=0)
    labels = [0] * 6 + [1] * 6 + [2] * 6
    same, other = skipgram.class_similarity(skipgram.cosine_matrix(table[:18]), labels)
    assert same > 0.5 and same > other + 0.3
    again = skipgram.train_context_table(ids, len(vocab), 16, steps=150, seed=0)
    assert torch.equal(table, again)


def test_cosine_matrix_and_class_similarity():
    table = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    cos = skipgram.cosine_matrix(table)
    torch.testing.assert_close(cos, torch.tensor([[1.0, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.float64))
    assert skipgram.class_similarity(cos, [0, 0, 1]) == (1.0, 0.0)
    with pytest.raises(ValueError, match="labels"):
        skipgram.class_similarity(cos, [0, 1])


def test_init_std_scales_the_starting_table():
    ids, vocab = skipgram.toy_corpus(50, torch.Generator().manual_seed(0))
    start = skipgram.train_context_table(ids, len(vocab), 8, steps=0, seed=3)
    scaled = skipgram.train_context_table(ids, len(vocab), 8, steps=0, seed=3, init_std=0.5)
    torch.testing.assert_close(scaled, start * 0.5)


def test_pair_similarity_is_the_mean_of_the_cross_block():
    table = torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [1.0, 1.0]])
    cos = skipgram.cosine_matrix(table)
    expected = (cos[0, 2] + cos[0, 3] + cos[1, 2] + cos[1, 3]) / 4
    assert skipgram.pair_similarity(cos, [0, 0, 1, 1], 0, 1) == pytest.approx(expected.item())
    with pytest.raises(ValueError, match="two different classes"):
        skipgram.pair_similarity(cos, [0, 0, 1, 1], 1, 1)


def test_shuffled_keeps_the_counts_and_breaks_the_order():
    ids, _ = skipgram.toy_corpus(300, torch.Generator().manual_seed(0))
    mixed = skipgram.shuffled(ids, seed=4)
    assert torch.equal(torch.bincount(mixed), torch.bincount(ids))
    assert not torch.equal(mixed, ids)
    assert torch.equal(mixed, skipgram.shuffled(ids, seed=4))


def test_insert_word_before_and_after():
    ids = torch.tensor([5, 1, 2, 1, 3])
    assert skipgram.insert_word(ids, 9, after={1}).tolist() == [5, 1, 9, 2, 1, 9, 3]
    assert skipgram.insert_word(ids, 9, before={1, 3}).tolist() == [5, 9, 1, 2, 9, 1, 9, 3]
    assert skipgram.insert_word(ids, 9, after={2}, before={2}).tolist() == [5, 1, 9, 2, 9, 1, 3]
    with pytest.raises(ValueError, match="new_id=3"):
        skipgram.insert_word(ids, 3, after={1})


def test_removing_the_shared_contexts_removes_the_food_place_similarity():
    """The chapter's food-place control in small: new neighbours on both sides of every place separate the two."""
    ids, vocab = skipgram.toy_corpus(1000, torch.Generator().manual_seed(0))
    labels = [0] * 6 + [1] * 6 + [2] * 6
    places = range(12, 18)
    cross = {}
    for name, corpus in {"plain": ids, "edited": skipgram.insert_word(ids, len(vocab), places, places)}.items():
        table = skipgram.train_context_table(corpus, int(corpus.max()) + 1, 16, steps=150, seed=0)
        cross[name] = skipgram.pair_similarity(skipgram.cosine_matrix(table[:18]), labels, 1, 2)
    assert cross["plain"] > 0.3 and cross["edited"] < cross["plain"] - 0.2
