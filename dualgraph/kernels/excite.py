"""Squeeze-and-excitation in one loop per image (``ops/excite.py``'s ``squeeze_excite``;
the compiler's ``squeeze_excite`` rule makes it).

Unfused, the block is a mean over each plane, two 1x1 convolutions on a 1x1 plane (a GEMM
call each for a few hundred multiply-adds), their activations and a broadcast product:
five calls, four of them on arrays of a few hundred elements where the call is the cost.
Here, per image, the planes' means, both small products with their activations (the
epilogue's ``_activate``, so the formulas are the conv epilogue's) and the scaled planes
are one loop; each plane is read twice (its mean, its product) and written once, as the
unfused mean and product do.
"""
from __future__ import annotations

import numpy as np

from . import conv_blocked, flat, helper, loop, rows
from .epilogue import _activate
from .simd import LANES, add, broadcast, load, multiply, store
from .threads import run_kept, threads_for
from .tuning import cores

F = np.float32


@helper(inline="always")
def _product(out, w, b, v):
    """``out = w @ v + b`` for a small ``w (len(out), len(v))``."""
    for k in range(out.size):
        total = b[k]
        for c in range(v.size):
            total += w[k, c] * v[c]
        out[k] = total


@helper(inline="always")
def _gate(pooled, w1, b1, w2, b2, act1, lo1, hi1, act2, lo2, hi2, hidden, gate):
    """``gate = act2(w2 @ act1(w1 @ pooled + b1) + b2)`` (``hidden`` the scratch)."""
    _product(hidden, w1, b1, pooled)
    _activate(hidden, act1, lo1, hi1)
    _product(gate, w2, b2, hidden)
    _activate(gate, act2, lo2, hi2)


@loop(fastmath={"reassoc", "nsz"})
def squeeze_excite(start, stop, x, w1, b1, w2, b2, act1, lo1, hi1, act2, lo2, hi2, out):
    """Images ``start:stop`` of ``x (N, C, H*W)``: ``out[n] = x[n] * gate[:, None]``,
    ``gate = act2(w2 @ act1(w1 @ mean(x[n], -1) + b1) + b2)`` for ``w1 (S, C)``,
    ``w2 (C, S)`` (activation codes and bounds as ``kernels/epilogue.py``'s)."""
    channels, width, squeezed = x.shape[1], x.shape[2], w1.shape[0]
    pooled, hidden, gate = np.empty(channels, F), np.empty(squeezed, F), np.empty(channels, F)
    for n in range(start, stop):
        for c in range(channels):
            total = F(0)
            for i in range(width):
                total += x[n, c, i]
            pooled[c] = total / F(width)
        _gate(pooled, w1, b1, w2, b2, act1, lo1, hi1, act2, lo2, hi2, hidden, gate)
        for c in range(channels):
            g = gate[c]
            for i in range(width):
                out[n, c, i] = x[n, c, i] * g


@helper(inline="always")
def _blocked_means(flat, at, blocks, plane, pooled):
    """``pooled[c]``: the mean of channel ``c`` of the blocked image at ``flat[at:]``
    (``blocks`` blocks of ``plane`` floats). Each block's positions are summed in eight-lane
    vectors, four of them taking every fourth position so that the adds' latency is hidden
    (indexing the 4-D arrays lane by lane, with a store to the sums each element, ran at a
    third of this rate)."""
    for b in range(blocks):
        a0 = a1 = a2 = a3 = broadcast(F(0))
        i, start = 0, at + b * plane
        while i + 4 * LANES <= plane:
            a0 = add(a0, load(flat, start + i))
            a1 = add(a1, load(flat, start + i + LANES))
            a2 = add(a2, load(flat, start + i + 2 * LANES))
            a3 = add(a3, load(flat, start + i + 3 * LANES))
            i += 4 * LANES
        while i < plane:
            a0 = add(a0, load(flat, start + i))
            i += LANES
        store(pooled, b * LANES, add(add(a0, a1), add(a2, a3)))
    for c in range(blocks * LANES):
        pooled[c] = pooled[c] / F(plane // LANES)


@loop(fastmath={"reassoc", "nsz"})
def squeeze_excite_blocked(start, stop, x, w1, b1, w2, b2, act1, lo1, hi1, act2, lo2, hi2,
                           out):
    """:func:`squeeze_excite` on channel-blocked images ``x (N, C/8, H*W, 8)`` (channel
    ``c`` is lane ``c % 8`` of block ``c // 8``) into ``out`` of that shape: a blocked
    region's squeeze-and-excitation without converting its input and output. Each block's
    positions are scaled by its gate vector."""
    blocks, width = x.shape[1], x.shape[2]
    channels, squeezed, plane = blocks * LANES, w1.shape[0], width * LANES
    flat, dst = x.reshape(-1), out.reshape(-1)
    pooled, hidden, gate = np.empty(channels, F), np.empty(squeezed, F), np.empty(channels, F)
    for n in range(start, stop):
        _blocked_means(flat, n * blocks * plane, blocks, plane, pooled)
        _gate(pooled, w1, b1, w2, b2, act1, lo1, hi1, act2, lo2, hi2, hidden, gate)
        for b in range(blocks):
            at, g = (n * blocks + b) * plane, load(gate, b * LANES)
            for i in range(at, at + plane, LANES):
                store(dst, i, multiply(load(flat, i), g))


@loop(fastmath={"reassoc", "nsz"})
def gated_weights_blocked(start, stop, x, w1, b1, w2, b2, act1, lo1, hi1, act2, lo2, hi2,
                          packed, out):
    """Images ``start:stop`` of the blocked ``x (N, C/8, H*W, 8)``: the first ``groups`` of
    the packed 1x1 weight ``packed`` (``conv_blocked.pack``'s) with each input channel ``c``
    scaled by the image's gate ``gate[c]`` (:func:`squeeze_excite_blocked`'s), into
    ``out (N, groups, C, width)``. The 1x1 conv of the gated image is the conv of the image
    itself with these weights: ``C * 24 * groups`` multiplies an image instead of a pass
    that reads and writes it."""
    blocks, width = x.shape[1], x.shape[2]
    channels, squeezed, plane = blocks * LANES, w1.shape[0], width * LANES
    groups, wide = out.shape[1], out.shape[3]   # (packed may have more groups, unread)
    flat, src, dst = x.reshape(-1), packed.reshape(-1), out.reshape(-1)
    pooled, hidden, gate = np.empty(channels, F), np.empty(squeezed, F), np.empty(channels, F)
    for n in range(start, stop):
        _blocked_means(flat, n * blocks * plane, blocks, plane, pooled)
        _gate(pooled, w1, b1, w2, b2, act1, lo1, hi1, act2, lo2, hi2, hidden, gate)
        at = n * groups * channels * wide
        for g in range(groups):
            for c in range(channels):
                g8, q = broadcast(gate[c]), (g * channels + c) * wide
                for j in range(0, wide, LANES):
                    store(dst, at + q + j, multiply(load(src, q + j), g8))


def gated_pointwise(x_shape, cout: int, codes: tuple, **epilogue):
    """``run(x, w1, b1, w2, b2, packed, bias, *residual, out=None)``: the 1x1 conv
    (``conv_blocked.pointwise``'s, with its ``epilogue`` codes) of the blocked ``x``
    (``x_shape (N, C/8, H, W, 8)``) scaled by its squeeze-and-excitation gate (``w1 (S,
    C)``, ``b1``, ``w2 (C, S)``, ``b2``; ``codes``: each activation's code and bounds), run
    on :func:`gated_weights_blocked`'s weights of each image. On one thread the weights'
    loop is called through its compiled entry, kept (working out the types of its fifteen
    arguments at each call took longer than a small image's loop)."""
    n, cb, h, w, _ = x_shape
    conv = conv_blocked.pointwise(x_shape, cout, per_image=True, **epilogue)
    workers = max(1, min(n, threads_for(n * cb * LANES * h * w) or cores()))
    entry, scaled = [], np.empty(0, F)

    def run(x, w1, b1, w2, b2, packed, bias, *residual, out=None):
        nonlocal scaled
        x = np.ascontiguousarray(x, F)
        width = packed.shape[-1]   # (the groups' width of ``conv_blocked.pack``)
        if scaled.shape[-1:] != (width,):
            scaled = np.empty((n, -(-cout // width), cb * LANES, width), F)
        args = (x.reshape(n, cb, h * w, LANES), rows(w1, w1.shape[1]), flat(b1),
                rows(w2, w2.shape[1]), flat(b2), *codes, np.ascontiguousarray(packed), scaled)
        run_kept(gated_weights_blocked, workers, entry, *args, rows=n)
        return conv(x, scaled, bias, *residual, out=out)
    return run
