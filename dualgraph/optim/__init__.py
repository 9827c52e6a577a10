"""Optimisers and learning-rate schedulers (mirrors torch.optim)."""
