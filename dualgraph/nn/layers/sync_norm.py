"""``nn.SyncBatchNorm``: batch normalisation whose training statistics are those of the
whole batch across the data-parallel ranks, as torch's.

Each rank sums its inputs and their squares per channel and counts its elements; one
all-reduce (``distributed.functional.all_reduce``, which differentiates: its gradient is an
all-reduce of the gradients) gives the global mean and biased variance, which normalise the
rank's part; the running statistics move with the unbiased variance, as BatchNorm's do. The
gradient is the true gradient of the global batch's statistics, so DDP over ranks with
SyncBatchNorm trains as one process on the concatenated batch. Outside a process group of
several ranks (no ``init_process_group``, one rank) and in eval mode it is ``BatchNorm``
exactly. ``convert_sync_batchnorm`` swaps a model's BatchNorm layers for it.
"""
from __future__ import annotations

__all__ = ["SyncBatchNorm"]

from ... import distributed as dist
from ...distributed import functional as dist_functional
from ...autograd.tape import no_grad
from ...ops import creation, elementwise as ew, reduce as red, shape as shape_ops
from .norm import _BatchNorm


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation of ``(N, C, *)`` input over the batch of every rank of
    ``process_group`` (the world by default), as ``torch.nn.SyncBatchNorm``."""

    _spatial = ((), ("L",), ("H", "W"), ("D", "H", "W"))

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, process_group=None,
                 device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype)
        self.process_group = process_group

    def forward(self, input):
        if input.ndim < 2:
            raise ValueError(f"SyncBatchNorm: expected at least 2D input (got {input.ndim}D "
                             "input)")
        if not (self.training and dist.is_initialized()
                and dist.get_world_size(self.process_group) > 1):
            return super().forward(input)
        if self.num_batches_tracked is not None and self.track_running_stats:
            self.num_batches_tracked.add_(1)
        factor = 1.0 / self.num_batches_tracked if self.momentum is None else self.momentum
        dims = (0,) + tuple(range(2, input.ndim))
        count = input.numel() // input.shape[1]
        counts = creation.full((input.shape[1],), float(count), dtype=input.dtype)
        local = shape_ops.stack([red.sum(input, dims), red.sum(ew.mul(input, input), dims),
                                 counts])
        total = dist_functional.all_reduce(local, "SUM", self.process_group)
        n = total[2]
        mean = ew.div(total[0], n)
        var = ew.sub(ew.div(total[1], n), ew.mul(mean, mean))
        if self.track_running_stats and self.running_mean is not None:
            with no_grad():
                unbiased = ew.mul(var, ew.div(n, ew.clamp(ew.sub(n, 1.0), min=1.0)))
                self.running_mean.mul_(1 - factor).add_(ew.mul(mean, factor))
                self.running_var.mul_(1 - factor).add_(ew.mul(unbiased, factor))
        shape = (1, -1) + (1,) * (input.ndim - 2)
        y = ew.mul(ew.sub(input, mean.reshape(shape)),
                   ew.rsqrt(ew.add(var, self.eps)).reshape(shape))
        if self.weight is not None:
            y = ew.add(ew.mul(y, self.weight.reshape(shape)), self.bias.reshape(shape))
        return y

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with every BatchNorm layer (at any depth) replaced by a SyncBatchNorm
        holding its parameters, running statistics and mode; ``module`` itself if it is
        none."""
        converted = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
            if module.affine:
                with no_grad():
                    converted.weight = module.weight
                    converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.training = module.training
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted

