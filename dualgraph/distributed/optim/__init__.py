"""Distributed optimisers (``torch.distributed.optim``'s names)."""
from .zero_redundancy_optimizer import ZeroRedundancyOptimizer

__all__ = ["ZeroRedundancyOptimizer"]
