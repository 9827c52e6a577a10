"""Pooling layers: MaxPool1d/2d/3d, AvgPool1d/2d/3d, AdaptiveAvgPool1d/2d/3d, LPPool1d/2d and
MaxUnpool1d/2d, as in ``torch.nn``.

Settings are stored as given (an int stays an int), so the printed forms match torch's.
"""
from __future__ import annotations

from .. import functional as F
from ..module import Module
from ._util import check_input

_LAYOUTS = {1: (("N", "C", "L"), ("C", "L")), 2: (("N", "C", "H", "W"), ("C", "H", "W")),
            3: (("N", "C", "D", "H", "W"), ("C", "D", "H", "W"))}
_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_ADAPTIVE = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}


class _Pool(Module):
    _ndim: int

    def _check(self, input):
        check_input(self, input, *_LAYOUTS[self._ndim])


class _MaxPoolNd(_Pool):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input):
        self._check(input)
        return _MAX[self._ndim](input, self.kernel_size, self.stride, self.padding, self.dilation,
                    ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, "
                f"ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """Max over sliding windows of (N, C, L) or (C, L) input."""

    _ndim = 1


class MaxPool2d(_MaxPoolNd):
    """Max over sliding windows of (N, C, H, W) or (C, H, W) input; the stride defaults to
    the kernel size."""

    _ndim = 2


class AvgPool1d(_Pool):
    """Average over sliding windows of (N, C, L) or (C, L) input (torch stores its sizes as
    1-tuples, and prints them so)."""

    _ndim = 1

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__()
        self.kernel_size = _single(kernel_size)
        self.stride = _single(stride if stride is not None else kernel_size)
        self.padding = _single(padding)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input):
        self._check(input)
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


def _single(v) -> tuple:
    return (v,) if isinstance(v, int) else tuple(v)


class AvgPool2d(_Pool):
    """Average over sliding windows of (N, C, H, W) or (C, H, W) input."""

    _ndim = 2
    _pool = staticmethod(F.avg_pool2d)

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        self._check(input)
        return self._pool(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool3d(_MaxPoolNd):
    """Max over sliding windows of (N, C, D, H, W) or (C, D, H, W) input."""

    _ndim = 3


class AvgPool3d(AvgPool2d):
    """Average over sliding windows of (N, C, D, H, W) or (C, D, H, W) input."""

    _ndim = 3
    _pool = staticmethod(F.avg_pool3d)


class _AdaptiveAvgPool(_Pool):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        self._check(input)
        return _ADAPTIVE[self._ndim](input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPool):
    """Average (N, C, L) or (C, L) input down to length ``output_size``."""

    _ndim = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPool):
    """Average (N, C, H, W) or (C, H, W) input down to ``output_size`` (an int, or a pair
    whose None entries keep the input's size)."""

    _ndim = 2


class AdaptiveAvgPool3d(_AdaptiveAvgPool):
    """Average (N, C, D, H, W) or (C, D, H, W) input down to ``output_size`` (an int, or a
    triple whose None entries keep the input's size)."""

    _ndim = 3


class _AdaptiveMaxPool(_AdaptiveAvgPool):
    def __init__(self, output_size, return_indices=False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input):
        self._check(input)
        pool = (F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d)
        return pool[self._ndim - 1](input, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    """Max over (N, C, L) or (C, L) input down to length ``output_size``."""

    _ndim = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    """Max over (N, C, H, W) or (C, H, W) input down to ``output_size``."""

    _ndim = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    """Max over (N, C, D, H, W) or (C, D, H, W) input down to ``output_size``."""

    _ndim = 3


class _LPPool(_Pool):
    _fn = None

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type, self.kernel_size = norm_type, kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode

    def forward(self, input):
        self._check(input)
        return self._fn(input, float(self.norm_type), self.kernel_size, self.stride,
                        self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPool):
    """The power average ``(sum of x ** p over each window) ** (1 / p)`` over (N, C, L)."""

    _ndim = 1
    _fn = staticmethod(F.lp_pool1d)


class LPPool2d(_LPPool):
    """The power average ``(sum of x ** p over each window) ** (1 / p)`` over (N, C, H, W)."""

    _ndim = 2
    _fn = staticmethod(F.lp_pool2d)


class LPPool3d(_LPPool):
    """The power average ``(sum of x ** p over each window) ** (1 / p)`` over (N, C, D, H,
    W)."""

    _ndim = 3
    _fn = staticmethod(F.lp_pool3d)


class _MaxUnpool(_Pool):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        as_tuple = (lambda v: (v,) * self._ndim if isinstance(v, int) else tuple(v))
        self.kernel_size = as_tuple(kernel_size)
        self.stride = as_tuple(stride if stride is not None else kernel_size)
        self.padding = as_tuple(padding)

    def forward(self, input, indices, output_size=None):
        return self._fn(input, indices, self.kernel_size, self.stride, self.padding,
                        output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpool):
    """Maxima of ``MaxPool1d(..., return_indices=True)`` put back in place, zeros elsewhere."""

    _ndim = 1
    _fn = staticmethod(F.max_unpool1d)


class MaxUnpool2d(_MaxUnpool):
    """Maxima of ``MaxPool2d(..., return_indices=True)`` put back in place, zeros elsewhere."""

    _ndim = 2
    _fn = staticmethod(F.max_unpool2d)


class MaxUnpool3d(_MaxUnpool):
    """Maxima of ``MaxPool3d(..., return_indices=True)`` put back in place, zeros elsewhere."""

    _ndim = 3
    _fn = staticmethod(F.max_unpool3d)
