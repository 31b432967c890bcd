"""Token embedding for several languages with their own vocabularies, in one table so a batch can mix them.

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width, ``V_l`` vocabulary size of language ``l``.

Each language keeps its own tokenizer and its own ``(V_l, d)`` rows, but the rows are stored back to back in one
``(sum V_l, d)`` table: language ``l`` owns rows ``offset_l .. offset_l + V_l - 1``. A local id ``i`` of language
``l`` reads row ``offset_l + i``, so a batch holding English and Chinese sentences is one gather, not one call per
language. The offsets make one check essential: an English id that is too large would silently read a Chinese
row, so every id is checked against *its own* language's vocabulary.

Chapter 4 compares this with the other design, one vocabulary shared by all languages (XLM-R): that needs no new
class, it is a :class:`~course_embed.token.TokenEmbedding` with a larger vocabulary, and at 100 languages it is
more than ten times smaller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .checks import Fixed, check_batch_ids, check_device_dtype, check_ids, check_size, fix
from .token import Init, init_table_


class MultilingualEmbedding(nn.Module):
    """Per-language token tables packed into one ``(sum V_l, d)`` table, optionally scaled by ``sqrt(d)``.

    Args:
        vocab_sizes: language name -> vocabulary size ``V_l`` of that language's tokenizer, e.g.
            ``{"en": 32000, "zh": 50000}``. The order fixes the language indices and the row offsets.
        d_model: vector width ``d``.
        padding_idx: local id of the pad token, the same in every language (e.g. 0), or None. Every language's
            pad row is zero; all pad ids read one shared zero row, which receives no gradient.
        scale: multiply the looked-up vectors by ``sqrt(d_model)``, as :class:`~course_embed.token.TokenEmbedding`.
        init: ``"normal"``, ``"xavier_uniform"`` or ``"scaled_normal"`` (default: ``"scaled_normal"`` when
            ``scale`` is on, else ``"normal"``), see :func:`~course_embed.init_table_`.
        device, dtype: of the table.

    Shapes:
        ``forward(ids, lang)``: local ids ``(b, s)`` -> ``(b, s, d)``. ``lang`` is one language name (the whole
        batch), a sequence of ``b`` names (one per sequence), or an integer tensor of language indices of shape
        ``(b,)`` (one per sequence) or ``(b, s)`` (one per token, for code-switched text).

    Checks: every id against its own language's vocabulary, and tensor ``lang`` against the languages. On the CPU
    a bad value raises a ``ValueError`` naming it; on a GPU or under ``torch.compile`` the checks run on the device
    (``torch._assert_async``), so a forward never waits for the device, as ``course_embed.checks.check_ids`` does.

    Reference: one ``nn.Embedding(V_l, d)`` per language; the tests load the same rows into separate tables and
    compare outputs and gradients.

    Example:
        >>> import torch, course_embed as ce
        >>> emb = ce.MultilingualEmbedding({"en": 100, "zh": 300}, d_model=16)
        >>> ids = torch.tensor([[5, 7], [250, 3]])  # local ids: 250 exists only in "zh"
        >>> emb(ids, ["en", "zh"]).shape
        torch.Size([2, 2, 16])
        >>> bool(torch.equal(emb(ids[1:], "zh")[0, 0], emb.table("zh")[250] * 16**0.5))
        True
    """

    offsets: torch.Tensor
    sizes: torch.Tensor
    languages = Fixed()
    d_model = Fixed()
    padding_idx = Fixed()

    def __init__(
        self,
        vocab_sizes: Mapping[str, int],
        d_model: int,
        padding_idx: int | None = None,
        scale: bool = True,
        init: Init | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        check_device_dtype(device, dtype)
        if not isinstance(vocab_sizes, Mapping) or not vocab_sizes:
            raise ValueError(
                f"vocab_sizes must be a non-empty mapping from language name to vocabulary size, e.g. "
                f"{{'en': 32000, 'zh': 50000}}; got {vocab_sizes!r}"
            )
        for lang, size in vocab_sizes.items():
            if not isinstance(lang, str):
                raise TypeError(f"language names in vocab_sizes must be strings, got {lang!r}")
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"vocab_sizes[{lang!r}] must be a positive integer, got {size!r}")
        d_model = check_size(d_model, "d_model")
        smallest = min(vocab_sizes.values())
        if padding_idx is not None and not 0 <= padding_idx < smallest:
            raise ValueError(
                f"padding_idx={padding_idx} must be a local id present in every language, i.e. in "
                f"[0, {smallest}) for these vocabularies; use e.g. 0, or None for no pad token"
            )
        fix(self, languages=tuple(vocab_sizes), d_model=d_model, padding_idx=padding_idx)
        self.scale = scale
        self.init = init or ("scaled_normal" if scale else "normal")
        sizes = [vocab_sizes[lang] for lang in self.languages]
        starts = [sum(sizes[:k]) for k in range(len(sizes))]  # host copies: reading them never waits for a device
        self._sizes, self._starts = tuple(sizes), tuple(starts)
        self.register_buffer("sizes", torch.tensor(sizes, device=device), persistent=False)
        self.register_buffer("offsets", torch.tensor(starts, device=device), persistent=False)
        self.weight = nn.Parameter(torch.empty(sum(sizes), d_model, device=device, dtype=dtype))
        self.reset_parameters()

    @property
    def pad_rows(self) -> list[int]:
        """Global rows of the languages' pad tokens (empty without ``padding_idx``); the first is the shared one."""
        if self.padding_idx is None:
            return []
        return [start + self.padding_idx for start in self._starts]

    def reset_parameters(self, init: Init | None = None) -> None:
        """Re-initialise every table with ``init`` (default: the constructor's) and zero all pad rows."""
        init_table_(self.weight, init or self.init)
        with torch.no_grad():
            self.weight[self.pad_rows] = 0.0

    def table(self, lang: str) -> torch.Tensor:
        """The ``(V_l, d)`` rows of language ``lang``: a view of the packed table (writes go through)."""
        start = self._starts[self.language_index(lang)]
        return self.weight[start : start + self._sizes[self.language_index(lang)]]

    def language_index(self, lang: str) -> int:
        """Index of language ``lang`` in ``languages``; a clear error for an unknown name."""
        if lang not in self.languages:
            raise ValueError(
                f"unknown language {lang!r}; this embedding has {list(self.languages)}; add it to "
                f"vocab_sizes when building the module"
            )
        return self.languages.index(lang)

    def _language_tensor(self, lang, ids: torch.Tensor) -> torch.Tensor:
        """``lang`` as a long tensor broadcasting against ids ``(b, s)``: ``(1, 1)``, ``(b, 1)`` or ``(b, s)``."""
        b = ids.shape[0]
        if isinstance(lang, str):
            return torch.tensor([[self.language_index(lang)]], device=ids.device)
        if isinstance(lang, torch.Tensor):
            if lang.dtype not in (torch.int64, torch.int32):
                raise TypeError(
                    f"lang must hold integer language indices, got dtype {lang.dtype}; or pass language names"
                )
            if tuple(lang.shape) not in ((b,), tuple(ids.shape)):
                raise ValueError(
                    f"lang must have shape (batch,) = ({b},) or the shape of ids {tuple(ids.shape)}, "
                    f"got {tuple(lang.shape)}"
                )
            n = len(self.languages)
            if _on_host(lang):
                lo, hi = (int(v) for v in torch.aminmax(lang)) if lang.numel() else (0, 0)
                if not 0 <= lo <= hi < n:
                    raise ValueError(
                        f"lang holds indices outside [0, {n}), got {lo if lo < 0 else hi}; the languages are "
                        f"{list(self.languages)} in that order: use language_index(name) to look one up"
                    )
            elif lang.numel():
                torch._assert_async(((lang >= 0) & (lang < n)).all(), f"lang holds indices outside [0, {n})")
            lang = lang.to(device=ids.device, dtype=torch.long)
            return lang[:, None] if lang.dim() == 1 else lang
        if isinstance(lang, Sequence):
            if len(lang) != b:
                raise ValueError(
                    f"lang names one language per sequence: expected {b} names, got {len(lang)}; pass one name per "
                    f"sequence of ids, or a single name for the whole batch"
                )
            return torch.tensor([[self.language_index(name)] for name in lang], device=ids.device)
        raise TypeError(
            f"lang must be a language name, a sequence of names or a tensor of language indices, "
            f"got {type(lang).__name__}"
        )

    def global_ids(self, ids: torch.Tensor, lang) -> torch.Tensor:
        """Rows of the packed table read by local ``ids`` ``(b, s)`` of languages ``lang``: ``(b, s)``.

        Raises a ValueError naming the language when an id is outside that language's vocabulary.
        """
        check_batch_ids(ids)
        check_ids(ids, max(self._sizes))  # integer dtype, no negative ids
        index = self._language_tensor(lang, ids).expand_as(ids)  # (b, s)
        limit = self.sizes[index]
        bad = ids >= limit
        if not _on_host(ids):  # on a device, or being compiled: checked there, without waiting for the values
            torch._assert_async(
                ~bad.any(), "ids holds an id outside its language's vocabulary: call the module on CPU ids to see it"
            )
        elif bool(bad.any()):
            where = bad.nonzero()[0]
            lang_name = self.languages[int(index[tuple(where)])]
            raise ValueError(
                f"ids[{where[0]}, {where[1]}] = {int(ids[tuple(where)])} is outside the {lang_name!r} "
                f"vocabulary [0, {int(limit[tuple(where)])}); check that each sequence is tagged with "
                f"the language whose tokenizer produced it"
            )
        rows = ids + self.offsets[index]
        if self.padding_idx is not None:
            rows = torch.where(ids == self.padding_idx, self.pad_rows[0], rows)
        return rows

    def forward(self, ids: torch.Tensor, lang) -> torch.Tensor:
        """Look up local ``ids`` ``(b, s)`` of languages ``lang``; returns ``(b, s, d)`` in the table's dtype."""
        pad = self.pad_rows[0] if self.padding_idx is not None else None
        out = F.embedding(self.global_ids(ids, lang), self.weight, pad)
        return out * self.d_model**0.5 if self.scale else out

    def extra_repr(self) -> str:
        sizes = dict(zip(self.languages, self._sizes, strict=True))
        return f"{sizes}, {self.d_model}, padding_idx={self.padding_idx}, scale={self.scale}, init={self.init!r}"


def _on_host(t: torch.Tensor) -> bool:
    """Whether ``t``'s values can be read in Python without a device synchronisation or a graph break."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()
