"""BatchNorm in training mode (statistics of the batch, per channel), forward and backward,
two passes over each channel's values each (the composite of reductions and elementwise
ops is ~7 passes forward and ~15 backward, each with a temporary).

A channel's values are ``x[:, c]`` of ``x (N, C, L)``. Sums are float64 (a channel holds
N*L values: 65k for a batch of 64 32x32 planes), the two-pass variance (the sum of squared
deviations from the mean, as torch, never ``E[x^2] - E[x]^2``); ``reassoc`` lets each
sum vectorise. Channels are shared among threads and each is summed by one thread in one
order, so the bits do not depend on the number of threads.
"""
from __future__ import annotations

import math

import numpy as np

from . import loop
from .threads import run_rows, threads_for


@loop(fastmath={"reassoc", "nsz"})
def _forward(start, stop, x, weight, bias, eps, y, mean, var):
    """Channels ``start:stop``: ``mean``, biased ``var`` and ``y = x * a + b`` with ``a =
    weight / sqrt(var + eps)``, ``b = bias - mean * a`` (torch's form)."""
    images, count = x.shape[0], x.shape[0] * x.shape[2]
    for c in range(start, stop):
        total = 0.0
        for n in range(images):
            row = x[n, c]
            for k in range(row.size):
                total += row[k]
        m = total / count
        squares = 0.0
        for n in range(images):
            row = x[n, c]
            for k in range(row.size):
                d = row[k] - m
                squares += d * d
        v = squares / count
        a = weight[c] / math.sqrt(v + eps)
        a32, b32 = np.float32(a), np.float32(bias[c] - m * a)
        for n in range(images):
            row, out = x[n, c], y[n, c]
            for k in range(row.size):
                out[k] = row[k] * a32 + b32
        mean[c], var[c] = m, v


@loop(fastmath={"reassoc", "nsz"})
def _backward(start, stop, g, x, weight, mean, var, eps, dx, dw, db):
    """Channels ``start:stop``: with ``xhat = (x - mean) * rstd``, ``db = sum(g)``, ``dw =
    sum(g * xhat)`` and ``dx = weight * rstd * (g - db / M - xhat * dw / M)`` (M values a
    channel)."""
    images, count = x.shape[0], x.shape[0] * x.shape[2]
    for c in range(start, stop):
        m = mean[c]
        total, dot = 0.0, 0.0
        for n in range(images):
            row, grow = x[n, c], g[n, c]
            for k in range(row.size):
                total += grow[k]
                dot += grow[k] * (row[k] - m)
        rstd = 1.0 / math.sqrt(var[c] + eps)
        db[c], dw[c] = total, dot * rstd
        scale = np.float32(weight[c] * rstd)
        shift = np.float32(total / count)
        slope = np.float32(dot * rstd * rstd / count)
        for n in range(images):
            row, grow, out = x[n, c], g[n, c], dx[n, c]
            for k in range(row.size):
                out[k] = scale * (grow[k] - shift - (row[k] - m) * slope)


def _channels(a):
    return np.ascontiguousarray(a).reshape(a.shape[0], a.shape[1], -1)


def forward(x, weight, bias, eps, y=None):
    """``(y, mean, var)`` of ``x (N, C, ...)`` float32 (``weight``, ``bias`` (C,) float32),
    the statistics float32 ``(C,)``; ``y`` written into the given C-contiguous array of
    ``x``'s shape, if any."""
    xc = _channels(x)
    y = np.empty(xc.shape, x.dtype) if y is None else y.reshape(xc.shape)
    mean, var = np.empty(x.shape[1], x.dtype), np.empty(x.shape[1], x.dtype)
    run_rows(_forward, xc.shape[1], xc, weight, bias, float(eps), y, mean, var,
             threads=threads_for(x.size))
    return y.reshape(x.shape), mean, var


def backward(g, x, weight, mean, var, eps, dx=None):
    """``(dx, dweight, dbias)`` of :func:`forward` for the output gradient ``g`` (``dx``
    written into the given array, as ``y`` in :func:`forward`)."""
    xc, gc = _channels(x), _channels(g)
    dx = np.empty(xc.shape, x.dtype) if dx is None else dx.reshape(xc.shape)
    dw, db = np.empty(x.shape[1], x.dtype), np.empty(x.shape[1], x.dtype)
    run_rows(_backward, xc.shape[1], gc, xc, weight, mean, var, float(eps), dx, dw, db,
             threads=threads_for(x.size))
    return dx.reshape(x.shape), dw, db
