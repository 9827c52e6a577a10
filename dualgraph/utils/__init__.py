"""Utilities: data loading (mirrors torch.utils)."""
