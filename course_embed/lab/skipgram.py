"""Chapter 1's skip-gram: a table trained on a toy corpus, where tokens used in the same contexts get similar rows.

A toy language (:data:`WORD_CLASSES`, :data:`TEMPLATES`, :func:`toy_corpus`), each token with its neighbours
(:func:`context_windows`), a table trained to predict them (:func:`train_context_table`, seeded, on one CPU thread,
bit-for-bit repeatable), and how alike its rows are within and between classes (:func:`cosine_matrix`,
:func:`class_similarity`, :func:`pair_similarity`). The controls edit a corpus: :func:`shuffled` keeps every count and
destroys every context, :func:`insert_word` gives chosen words a new neighbour.

Shapes: ``v`` vocabulary, ``d`` width, ``n`` tokens in a corpus.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..runtime import single_thread

#: The toy language of chapter 1: words of one class are used in the same contexts.
WORD_CLASSES = {
    "animal": ("cat", "dog", "horse", "cow", "sheep", "goat"),
    "food": ("apple", "bread", "rice", "fish", "cheese", "soup"),
    "place": ("field", "barn", "house", "river", "garden", "forest"),
}
#: Sentence templates; ``{animal}`` etc. are filled with a word of that class.
TEMPLATES = (
    "the {animal} eats the {food} .",
    "a {animal} eats some {food} .",
    "the {animal} sleeps in the {place} .",
    "a {animal} runs to the {place} .",
)


def toy_corpus(sentences: int, generator: torch.Generator) -> tuple[torch.Tensor, list[str]]:
    """A corpus of ``sentences`` random sentences from :data:`TEMPLATES`, as one stream of ids.

    Within a class, word ``k`` (0-based) is drawn with probability proportional to ``1 / (k + 1)`` (Zipf), so
    frequent and rare words share their contexts.

    Returns:
        ``(ids, vocab)``: ids ``(n,)`` of the concatenated sentences and the vocabulary (id -> word); the class
        words come first, in :data:`WORD_CLASSES` order, then the other words.
    """
    if sentences < 1:
        raise ValueError(f"sentences must be a positive integer, got {sentences}")
    class_words = [w for words in WORD_CLASSES.values() for w in words]
    others = sorted({w for t in TEMPLATES for w in t.split() if not w.startswith("{")})
    vocab = class_words + others
    index = {w: i for i, w in enumerate(vocab)}
    templates = torch.randint(0, len(TEMPLATES), (sentences,), generator=generator).tolist()
    ids = []
    for t in templates:
        for word in TEMPLATES[t].split():
            if word.startswith("{"):
                words = WORD_CLASSES[word[1:-1]]
                weights = torch.tensor([1 / (k + 1) for k in range(len(words))])
                word = words[torch.multinomial(weights, 1, generator=generator).item()]
            ids.append(index[word])
    return torch.tensor(ids), vocab


def context_windows(ids: torch.Tensor, window: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Every token of ``ids`` ``(n,)`` with its ``window`` neighbours on each side.

    Returns:
        ``(centre, context)``: ``(m,)`` and ``(m, 2 * window)`` with ``m = n - 2 * window``; context column
        ``j`` holds the token at offset ``[-window, ..., -1, 1, ..., window][j]``.
    """
    if ids.dim() != 1 or len(ids) <= 2 * window:
        raise ValueError(f"ids must be (n,) with n > 2 * window = {2 * window}, got {tuple(ids.shape)}")
    n = len(ids)
    offsets = [o for o in range(-window, window + 1) if o != 0]
    centre = ids[window : n - window]
    context = torch.stack([ids[window + o : n - window + o] for o in offsets], dim=1)
    return centre, context


def train_context_table(
    ids: torch.Tensor,
    vocab_size: int,
    d_model: int,
    steps: int,
    seed: int,
    window: int = 2,
    batch: int = 256,
    lr: float = 0.05,
    init_std: float = 1.0,
) -> torch.Tensor:
    """Train a ``(v, d)`` table to predict each token's neighbours from its row; return the trained table.

    The model is a skip-gram with one output matrix per offset: ``logits_j = W[centre] @ U_j.T``. Adam,
    batches of ``batch`` random windows, everything seeded with ``seed`` and run on one thread.

    Args:
        ids: a token stream ``(n,)``, e.g. from :func:`toy_corpus`.
        vocab_size, d_model: the table's shape ``(v, d)``.
        steps: optimizer steps.
        seed: seeds the table, the output matrices and the batches.
        init_std: the table starts from ``N(0, init_std**2)`` (rows of norm about ``init_std * sqrt(d)``).
    """
    centre, context = context_windows(ids, window)
    with single_thread():
        gen = torch.Generator().manual_seed(seed)
        table = nn.Parameter(torch.randn(vocab_size, d_model, generator=gen) * init_std)
        heads = nn.Parameter(torch.randn(2 * window, vocab_size, d_model, generator=gen) * d_model**-0.5)
        opt = torch.optim.Adam([table, heads], lr=lr)
        for _ in range(steps):
            rows = torch.randint(0, len(centre), (batch,), generator=gen)
            logits = (table[centre[rows]] @ heads.flatten(0, 1).T).view(batch, 2 * window, -1)
            loss = F.cross_entropy(logits.flatten(0, 1), context[rows].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
    return table.detach()


def cosine_matrix(table: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every pair of rows of ``table`` ``(k, d)``: ``(k, k)`` float64."""
    rows = F.normalize(table.detach().double(), dim=-1)
    return rows @ rows.T


def class_similarity(cosines: torch.Tensor, labels: list[int]) -> tuple[float, float]:
    """Mean cosine of pairs in the same class and of pairs in different classes (diagonal excluded)."""
    lab = torch.tensor(labels)
    if cosines.shape != (len(lab), len(lab)):
        raise ValueError(f"cosines must be ({len(lab)}, {len(lab)}) for {len(lab)} labels, got {tuple(cosines.shape)}")
    same = lab[:, None] == lab[None, :]
    off = ~torch.eye(len(lab), dtype=torch.bool)
    return cosines[same & off].mean().item(), cosines[~same].mean().item()


def pair_similarity(cosines: torch.Tensor, labels: list[int], first: int, second: int) -> float:
    """Mean cosine between the rows of class ``first`` and the rows of class ``second`` (``cosines`` ``(k, k)``)."""
    lab = torch.tensor(labels)
    if cosines.shape != (len(lab), len(lab)):
        raise ValueError(f"cosines must be ({len(lab)}, {len(lab)}) for {len(lab)} labels, got {tuple(cosines.shape)}")
    if first == second or not {first, second} <= set(labels):
        raise ValueError(f"first and second must be two different classes among the labels, got {first}, {second}")
    return cosines[lab == first][:, lab == second].mean().item()


def shuffled(ids: torch.Tensor, seed: int) -> torch.Tensor:
    """The tokens of ``ids`` ``(n,)`` in a random order (seeded): every word's count kept, every context destroyed."""
    return ids[torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed))]


def insert_word(ids: torch.Tensor, new_id: int, after=(), before=()) -> torch.Tensor:
    """``ids`` ``(n,)`` with ``new_id`` inserted after every id in ``after`` and before every id in ``before``.

    The result is ``(n + inserted,)``; a word in both sets gets the new token on both sides.
    """
    if new_id in set(ids.tolist()):
        raise ValueError(
            f"new_id={new_id} already occurs in ids; pick an id outside the corpus (e.g. its vocabulary size)"
        )
    after, before = set(after), set(before)
    tokens = []
    for token in ids.tolist():
        if token in before:
            tokens.append(new_id)
        tokens.append(token)
        if token in after:
            tokens.append(new_id)
    return torch.tensor(tokens, dtype=ids.dtype)
