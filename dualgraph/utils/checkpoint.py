"""Activation checkpointing, as ``torch.utils.checkpoint`` (autograd/checkpoint.py)."""
from ..autograd.checkpoint import checkpoint, checkpoint_sequential  # noqa: F401

__all__ = ["checkpoint", "checkpoint_sequential"]
