"""DraftPair: speculative decoding of local language models on MLX."""

__version__ = "0.1.0"
