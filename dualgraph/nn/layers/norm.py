"""Normalisation layers: BatchNorm1d/2d/3d, InstanceNorm1d/2d, LayerNorm, GroupNorm and
RMSNorm, as in ``torch.nn`` (same parameters, buffers, state-dict keys and printed form).

BatchNorm keeps running statistics in buffers that ``F.batch_norm`` updates in place, with
tensor ops under ``no_grad``, so a captured training step carries the update as graph
outputs. ``momentum=None`` averages cumulatively: the factor is ``1 / num_batches_tracked``,
computed as a tensor for the same reason.
"""
from __future__ import annotations

from ...autograd import no_grad
from ...ops import creation
from ...ops import shape as shape_ops
from .. import functional as F
from .. import init
from ..module import Module
from ._util import check_device, check_input, optional_parameter


def _affine_parameters(module, shape, affine, bias, device, dtype):
    """Register ``weight`` and ``bias`` of ``shape`` (None when not ``affine``/``bias``)."""
    optional_parameter(module, "weight", shape, affine, device, dtype)
    optional_parameter(module, "bias", shape, affine and bias, device, dtype)


def _as_shape(normalized_shape) -> tuple:
    """LayerNorm's and RMSNorm's ``normalized_shape``: an int or a sequence of ints."""
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(normalized_shape)


def _reset_affine(module):
    """torch's init of a norm's scale and shift: ones and zeros."""
    if module.weight is not None:
        init.ones_(module.weight)
    if module.bias is not None:
        init.zeros_(module.bias)


class _NormBase(Module):
    """Parameters (``affine``) and running statistics (``track_running_stats``) per
    channel, shared by batch and instance norm."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device=None,
                 dtype=None, *, bias: bool = True):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        _affine_parameters(self, (num_features,), affine, bias, device, dtype)
        if track_running_stats:
            check_device(device)
            self.register_buffer("running_mean", creation.zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", creation.ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", creation.tensor(0))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        _reset_affine(self)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    _spatial: tuple   # layouts of one sample's dims after the channel, e.g. (("H", "W"),)

    def forward(self, input):
        check_input(self, input, *(("N", self.num_features) + s for s in self._spatial))
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / self.num_batches_tracked
        # in eval mode, a layer without running statistics normalises by the batch's
        use_batch_stats = self.training or (self.running_mean is None
                                            and self.running_var is None)
        use_buffers = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if use_buffers else None,
                            self.running_var if use_buffers else None, self.weight,
                            self.bias, use_batch_stats, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of (N, C) or (N, C, L) input over the batch (and length)."""

    _spatial = ((), ("L",))


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of (N, C, H, W) input per channel, as ``torch.nn.BatchNorm2d``.

    >>> import dualgraph as dg
    >>> bn = dg.nn.BatchNorm2d(3)
    >>> y = bn(dg.randn(4, 3, 5, 5))
    >>> int(bn.num_batches_tracked)
    1
    """

    _spatial = (("H", "W"),)


class BatchNorm3d(_BatchNorm):
    """Batch normalisation of (N, C, D, H, W) input per channel."""

    _spatial = (("D", "H", "W"),)


class _InstanceNorm(_NormBase):
    _spatial: tuple

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device=None,
                 dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)

    def forward(self, input):
        c = self.num_features
        check_input(self, input, ("N", c) + self._spatial, (c,) + self._spatial)
        if input.ndim == len(self._spatial) + 1:   # unbatched: a batch of one
            return shape_ops.squeeze(self.forward(shape_ops.unsqueeze(input, 0)), 0)
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight,
                               self.bias, self.training or not self.track_running_stats,
                               0.0 if self.momentum is None else self.momentum, self.eps)


class InstanceNorm1d(_InstanceNorm):
    """Normalise each channel of each sample of (N, C, L) or (C, L) input on its own."""

    _spatial = ("L",)


class InstanceNorm2d(_InstanceNorm):
    """Normalise each channel of each sample of (N, C, H, W) or (C, H, W) input on its own."""

    _spatial = ("H", "W")


class InstanceNorm3d(_InstanceNorm):
    """Normalise each channel of each sample of (N, C, D, H, W) or (C, D, H, W) input on its
    own."""

    _spatial = ("D", "H", "W")


class LocalResponseNorm(Module):
    """AlexNet's normalisation across ``size`` neighbouring channels (``F.local_response_norm``)."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` dims of each sample, then scale by
    ``weight`` and shift by ``bias`` (elementwise, of that shape), as torch's LayerNorm."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _affine_parameters(self, self.normalized_shape, elementwise_affine, bias, device,
                           dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input):
        check_input(self, input, ("*",) + self.normalized_shape)
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class GroupNorm(Module):
    """Normalise each sample of (N, C, *) input over groups of ``C / num_groups`` channels,
    then scale and shift per channel."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        _affine_parameters(self, (num_channels,), affine, bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input):
        check_input(self, input, ("N", self.num_channels, "*"))
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.affine}, bias={self.bias is not None}")


class RMSNorm(Module):
    """Divide by the root mean square over the trailing ``normalized_shape`` dims, then
    scale by ``weight``; ``eps=None`` is the machine epsilon of the input's dtype."""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        optional_parameter(self, "weight", self.normalized_shape, elementwise_affine, device,
                           dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, input):
        check_input(self, input, ("*",) + self.normalized_shape)
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
