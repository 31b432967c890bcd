"""course_embed: the tested companion package of the course *Transformer input layers*.

The top level is the library: the layers a model imports. What the chapters measure and draw is in
:mod:`course_embed.lab`; the course's machinery (execute, status, grade, site, CLI) in :mod:`course_embed.tools`.

Batch first throughout: ids ``(batch, seq)``, activations ``(batch, seq, d_model)``.
"""

from .alibi import alibi_bias, alibi_slopes
from .fusion import TransformerEmbedding
from .learned import LearnedPositionalEmbedding
from .multilingual import MultilingualEmbedding
from .parallel import VocabParallelEmbedding
from .relative import RelativePositionBias, relative_position_bucket
from .rope_config import rope_kwargs
from .rotary import (
    RotaryEmbedding,
    layout_permutation,
    rope_frequencies,
    rope_parameters,
    softmax_scale,
)
from .runtime import deterministic, pick_device, seed_everything, setup, single_thread
from .sinusoidal import (
    SinusoidalPositionalEncoding,
    inverse_frequencies,
    offset_rotation,
    sinusoidal_table,
)
from .token import TokenEmbedding, init_table_, tie_weights

__version__ = "0.1.0"
__all__ = [
    "LearnedPositionalEmbedding",
    "MultilingualEmbedding",
    "RelativePositionBias",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "TokenEmbedding",
    "TransformerEmbedding",
    "VocabParallelEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "deterministic",
    "init_table_",
    "inverse_frequencies",
    "layout_permutation",
    "offset_rotation",
    "pick_device",
    "relative_position_bucket",
    "rope_frequencies",
    "rope_kwargs",
    "rope_parameters",
    "seed_everything",
    "setup",
    "single_thread",
    "sinusoidal_table",
    "softmax_scale",
    "tie_weights",
]
