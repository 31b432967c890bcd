"""course_embed: the tested companion package of the course *Transformer input layers*.

Batch first throughout: ids ``(batch, seq)``, activations ``(batch, seq, d_model)``.
"""

from .fusion import TransformerEmbedding
from .learned import LearnedPositionalEmbedding
from .multilingual import MultilingualEmbedding
from .runtime import deterministic, pick_device, seed_everything, setup
from .sinusoidal import SinusoidalPositionalEncoding, inverse_frequencies, offset_rotation, sinusoidal_table
from .token import TokenEmbedding, init_table_, tie_weights

__version__ = "0.1.0"
__all__ = [
    "LearnedPositionalEmbedding",
    "MultilingualEmbedding",
    "SinusoidalPositionalEncoding",
    "TokenEmbedding",
    "TransformerEmbedding",
    "deterministic",
    "init_table_",
    "inverse_frequencies",
    "offset_rotation",
    "pick_device",
    "seed_everything",
    "setup",
    "sinusoidal_table",
    "tie_weights",
]
