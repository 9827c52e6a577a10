"""Window functions for spectral analysis (``torch.hann_window`` & co): constant tensors,
computed in float64 and cast to the requested dtype (the default float unless given).

``periodic=True`` (torch's default) gives the first ``N`` points of the symmetric window of
``N + 1``, the form an FFT of length ``N`` wants.

>>> import dualgraph as dg
>>> dg.hann_window(4)
tensor([0.0000, 0.5000, 1.0000, 0.5000])
"""
from __future__ import annotations

import numpy as np

from . import creation

__all__ = ["hann_window", "hamming_window", "blackman_window", "bartlett_window",
           "kaiser_window"]


def _window(name, shape, window_length, periodic, dtype, device, requires_grad):
    """``shape(x)`` over x = n / (M - 1) in [0, 1] for n < M (M = N + 1 when periodic);
    a window of one point is [1], of none empty."""
    if window_length < 0:
        raise ValueError(f"{name} requires non-negative window_length, got "
                         f"window_length={window_length}")
    dt = creation._float_dtype(dtype)
    if dt.kind != "f":
        raise TypeError(f"{name} expects a floating point dtype, got {dtype}")
    if window_length <= 1:
        values = np.ones(window_length)
    else:
        m = window_length + 1 if periodic else window_length
        values = shape(np.arange(window_length) / (m - 1))
    return creation.tensor(values.astype(dt), device=device, requires_grad=requires_grad)


def hann_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                requires_grad=False):
    """The Hann window ``0.5 - 0.5 cos(2 pi x)``, as ``torch.hann_window``."""
    return _window("hann_window", lambda x: 0.5 - 0.5 * np.cos(2 * np.pi * x),
                   window_length, periodic, dtype, device, requires_grad)


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None,
                   layout=None, device=None, requires_grad=False):
    """The Hamming window ``alpha - beta cos(2 pi x)``, as ``torch.hamming_window``."""
    return _window("hamming_window", lambda x: alpha - beta * np.cos(2 * np.pi * x),
                   window_length, periodic, dtype, device, requires_grad)


def blackman_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    requires_grad=False):
    """The Blackman window ``0.42 - 0.5 cos(2 pi x) + 0.08 cos(4 pi x)``."""
    return _window("blackman_window",
                   lambda x: 0.42 - 0.5 * np.cos(2 * np.pi * x) + 0.08 * np.cos(4 * np.pi * x),
                   window_length, periodic, dtype, device, requires_grad)


def bartlett_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    requires_grad=False):
    """The triangular Bartlett window ``1 - |2x - 1|``."""
    return _window("bartlett_window", lambda x: 1 - np.abs(2 * x - 1), window_length,
                   periodic, dtype, device, requires_grad)


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, layout=None,
                  device=None, requires_grad=False):
    """The Kaiser window ``I0(beta sqrt(1 - (2x - 1)^2)) / I0(beta)``."""
    return _window("kaiser_window",
                   lambda x: np.i0(beta * np.sqrt(np.maximum(1 - (2 * x - 1) ** 2, 0)))
                   / np.i0(beta), window_length, periodic, dtype, device, requires_grad)
