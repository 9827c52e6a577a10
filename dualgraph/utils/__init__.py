"""Utilities: data loading and activation checkpointing (mirror torch.utils)."""
from . import checkpoint, data  # noqa: F401
