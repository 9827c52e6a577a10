"""Convolution layers: Conv1d/2d/3d, ConvTranspose1d/2d, Unfold and Fold, as in ``torch.nn``.

One base class holds what they share (argument normalisation, parameters, torch's default
init and printed form); each subclass names its functional and its input layout.
"""
from __future__ import annotations

from .. import functional as F
from ..module import Module
from ._util import check_input, new_parameter, optional_parameter, reset_kaiming_uniform

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _ntuple(value, n: int, name: str) -> tuple:
    t = (value,) * n if isinstance(value, int) else tuple(value)
    if len(t) != n or not all(isinstance(v, int) for v in t):
        raise ValueError(f"{name} must be an int or a {n}-tuple of ints, got {value!r}")
    return t


class _ConvNd(Module):
    """Shared state of the convolutions; ``_spatial`` is the layout letters of one sample's
    spatial dims (``("L",)`` or ``("H", "W")``)."""

    _spatial: tuple
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 groups, bias, padding_mode, output_padding=0, device=None, dtype=None):
        super().__init__()
        n = len(self._spatial)
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"in_channels ({in_channels}) and out_channels ({out_channels}) "
                             f"must be divisible by groups ({groups})")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {_PADDING_MODES}, got "
                             f"{padding_mode!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _ntuple(kernel_size, n, "kernel_size")
        self.stride = _ntuple(stride, n, "stride")
        self.dilation = _ntuple(dilation, n, "dilation")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 "{'valid', 'same'}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _ntuple(padding, n, "padding")
        self.output_padding = _ntuple(output_padding, n, "output_padding")
        self.transposed = self._transposed
        self.groups = groups
        self.padding_mode = padding_mode
        self._reversed_padding_repeated_twice = self._pad_amounts()
        if self.transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = new_parameter(shape, device, dtype)
        optional_parameter(self, "bias", (out_channels,), bias, device, dtype)
        self.reset_parameters()

    def _pad_amounts(self) -> list:
        """What F.pad needs for a non-zeros ``padding_mode``: (left, right) from the last
        dim back; 'same' puts the odd pixel last, as torch does."""
        amounts = []
        for i in reversed(range(len(self.kernel_size))):
            if self.padding == "valid":
                lo = hi = 0
            elif self.padding == "same":
                total = self.dilation[i] * (self.kernel_size[i] - 1)
                lo, hi = total // 2, total - total // 2
            else:
                lo = hi = self.padding[i]
            amounts += [lo, hi]
        return amounts

    def reset_parameters(self) -> None:
        reset_kaiming_uniform(self.weight, self.bias)

    def _check(self, input):
        check_input(self, input, ("N", self.in_channels) + self._spatial,
                    (self.in_channels,) + self._spatial)

    def extra_repr(self) -> str:
        n = len(self.kernel_size)
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    _conv = None   # the functional, set by subclasses

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device=device, dtype=dtype)

    def forward(self, input):
        self._check(input)
        return self._conv_forward(input, self.weight, self.bias)

    def _conv_forward(self, input, weight, bias):
        conv = self._conv
        if self.padding_mode == "zeros":
            return conv(input, weight, bias, self.stride, self.padding, self.dilation,
                        self.groups)
        padded = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
        return conv(padded, weight, bias, self.stride, 0, self.dilation, self.groups)


class Conv1d(_Conv):
    """1-D convolution of (N, C_in, L) or (C_in, L) input; ``padding`` may be an int, a
    1-tuple, ``'valid'`` or ``'same'``; ``padding_mode`` 'zeros', 'reflect', 'replicate' or
    'circular'."""

    _spatial = ("L",)
    _conv = staticmethod(F.conv1d)


class Conv2d(_Conv):
    """2-D convolution of (N, C_in, H, W) or (C_in, H, W) input, as ``torch.nn.Conv2d``.

    >>> import dualgraph as dg
    >>> dg.nn.Conv2d(1, 6, 5, padding=2)(dg.randn(8, 1, 28, 28)).shape
    dualgraph.Size([8, 6, 28, 28])
    """

    _spatial = ("H", "W")
    _conv = staticmethod(F.conv2d)


class Conv3d(_Conv):
    """3-D convolution of (N, C_in, D, H, W) or (C_in, D, H, W) input, as ``torch.nn.Conv3d``
    (computed by one 2-D convolution, ops/windows.py)."""

    _spatial = ("D", "H", "W")
    _conv = staticmethod(F.conv3d)


class _ConvTranspose(_ConvNd):
    _transposed = True
    _conv = None

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for '
                             f"{type(self).__name__}")
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__} takes numeric padding, got {padding!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, output_padding, device, dtype)

    def _output_padding(self, input, output_size) -> tuple:
        """The output_padding that makes the output ``output_size`` (torch's rule)."""
        if output_size is None:
            return self.output_padding
        n = len(self.kernel_size)
        output_size = tuple(output_size)[-n:]
        spatial = tuple(input.shape)[-n:]
        padding = []
        for d in range(n):
            smallest = ((spatial[d] - 1) * self.stride[d] - 2 * self.padding[d]
                        + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            largest = smallest + self.stride[d] - 1
            if not smallest <= output_size[d] <= largest:
                raise ValueError(f"requested an output size of {output_size}, but valid "
                                 f"sizes for input of shape {tuple(input.shape)} range from "
                                 f"{smallest} to {largest} in dim {d}")
            padding.append(output_size[d] - smallest)
        return tuple(padding)

    def forward(self, input, output_size=None):
        self._check(input)
        return self._conv(input, self.weight, self.bias, self.stride, self.padding,
                          self._output_padding(input, output_size), self.groups,
                          self.dilation)


class ConvTranspose1d(_ConvTranspose):
    """Transposed 1-D convolution (the gradient of Conv1d with respect to its input)."""

    _spatial = ("L",)
    _conv = staticmethod(F.conv_transpose1d)


class ConvTranspose2d(_ConvTranspose):
    """Transposed 2-D convolution (the gradient of Conv2d with respect to its input), as
    ``torch.nn.ConvTranspose2d``; ``output_size=`` in forward picks among the sizes a
    strided convolution could have come from."""

    _spatial = ("H", "W")
    _conv = staticmethod(F.conv_transpose2d)


class ConvTranspose3d(_ConvTranspose):
    """Transposed 3-D convolution (the gradient of Conv3d with respect to its input), as
    ``torch.nn.ConvTranspose3d`` (computed by one transposed 2-D convolution,
    ops/windows.py)."""

    _spatial = ("D", "H", "W")
    _conv = staticmethod(F.conv_transpose3d)


class Unfold(Module):
    """The sliding windows of (N, C, H, W) input as columns (N, C * kH * kW, L), as
    ``torch.nn.Unfold`` (``F.unfold``)."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Fold(Unfold):
    """Columns (N, C * kH * kW, L) summed back into (N, C, *output_size), as
    ``torch.nn.Fold`` (``F.fold``)."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__(kernel_size, dilation, padding, stride)
        self.output_size = output_size

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                      self.stride)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}, " + super().extra_repr()
