"""Utilities: data loading (mirrors torch.utils)."""
from . import data  # noqa: F401
