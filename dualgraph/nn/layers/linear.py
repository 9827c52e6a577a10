"""Identity, Linear, Bilinear, Flatten and Unflatten, as in ``torch.nn``."""
from __future__ import annotations

import math

from ...ops import shape as shape_ops
from .. import functional as F
from .. import init
from ..module import Module
from ._util import check_input, new_parameter, optional_parameter, reset_kaiming_uniform


class Identity(Module):
    """Returns its input; any constructor arguments are ignored (handy as a placeholder
    when a model's layer is switched off)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x @ weight.T + bias`` on the last dim of ``x`` (*, in_features).

    ``weight`` is (out_features, in_features); weight and bias start uniform in
    ±1/sqrt(in_features), as in torch.

    >>> import dualgraph as dg
    >>> dg.nn.Linear(20, 30)(dg.randn(128, 20)).shape
    dualgraph.Size([128, 30])
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = new_parameter((out_features, in_features), device, dtype)
        optional_parameter(self, "bias", (out_features,), bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_kaiming_uniform(self.weight, self.bias)

    def forward(self, input):
        check_input(self, input, ("*", self.in_features))
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Bilinear(Module):
    """``y[o] = x1 @ weight[o] @ x2 + bias[o]`` for x1 (*, in1_features) and x2 (*,
    in2_features); weight and bias start uniform in ±1/sqrt(in1_features)."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        self.weight = new_parameter((out_features, in1_features, in2_features), device, dtype)
        optional_parameter(self, "bias", (out_features,), bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        check_input(self, input1, ("*", self.in1_features))
        check_input(self, input2, ("*", self.in2_features))
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Flatten(Module):
    """Merge dims ``start_dim..end_dim`` into one (by default all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return shape_ops.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dim ``dim`` into ``unflattened_size`` (the inverse of :class:`Flatten`)."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim = dim
        self.unflattened_size = unflattened_size

    def forward(self, input):
        return shape_ops.unflatten(input, self.dim, tuple(self.unflattened_size))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
