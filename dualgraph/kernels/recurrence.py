"""An LSTM layer's direction in one compiled call each way: every step's hidden product on
the packed weight (``linear_packed``'s register block) and the cell's gate arithmetic
(``activations``' loops, the same code), with no Python between the steps. A step called
from Python paid a few microseconds of argument handling and views of its rows (about
4 us of a 50 us step at H128 B32); here a step is the two loops alone. The layer op
(``ops/recurrent_layer.py``) takes these where its product is packed and runs on one
thread; the results are those of its step-by-step calls, bit for bit.
"""
from __future__ import annotations

import numpy as np

from . import loop
from .activations import lstm_cell_backward_rows, lstm_cell_rows
from .linear_packed import COLUMNS, ROWS, panel_rows


@loop
def lstm_forward(xg, h0, c0, wp, zero, bias, band, hg, y, cs, acts, reverse):
    """The steps of ``lstm_layer``: step ``t``'s ``hg = h @ W_hhᵀ`` (``wp`` packed,
    ``zero`` its panels' zero bias, ``band`` its rows' band) from the previous step's
    ``y`` (``h0`` first), then the cell from ``xg[t]``, ``bias`` and the previous cell
    state (``c0`` first) into ``y[t]``, ``cs[t]``, ``acts[t]``; ``reverse``: from the
    last step to the first."""
    length = xg.shape[0]
    scratch = np.empty(ROWS * (COLUMNS + h0.shape[1]), np.float32)   # (scratch_floats)
    for s in range(length):
        t = length - 1 - s if reverse else s
        p = t + 1 if reverse else t - 1
        h = h0 if s == 0 else y[p]
        c = c0 if s == 0 else cs[p]
        panel_rows(0, wp.shape[0], h.reshape(-1), h.shape[1], wp.reshape(-1), zero,
                   hg.reshape(-1), hg.shape[1], band, scratch)
        lstm_cell_rows(hg, xg[t], bias, c, y[t], cs[t], acts[t])


@loop
def lstm_backward(gy, dh, dc, dc_next, g, c0, cs, acts, wp, zero, band, d_gates, reverse):
    """The steps of ``lstm_layer_backward``, walked back: ``g = gy[t] + dh``, the cell's
    backward into ``d_gates[t]`` and ``dc`` (through ``dc_next``), then ``dh = d_gates[t]
    @ W_hh`` (``wp`` packed). ``dh``, ``dc`` hold ``h_n``'s and ``c_n``'s gradients on
    entry, ``h0``'s and ``c0``'s on return."""
    length = gy.shape[0]
    rows, n = dh.shape
    scratch = np.empty(ROWS * (COLUMNS + d_gates.shape[2]), np.float32)
    for s in range(length):
        t = s if reverse else length - 1 - s
        p = t + 1 if reverse else t - 1
        c = c0 if s == length - 1 else cs[p]
        gt = gy[t]
        for b in range(rows):
            gb, hb, tb = g[b], dh[b], gt[b]
            for j in range(n):
                gb[j] = tb[j] + hb[j]
        lstm_cell_backward_rows(g, dc, c, acts[t], d_gates[t], dc_next)
        for b in range(rows):   # (row by row: Numba's 2-D slice assignment took 5 us a step)
            cb, nb = dc[b], dc_next[b]
            for j in range(n):
                cb[j] = nb[j]
        panel_rows(0, wp.shape[0], d_gates[t].reshape(-1), d_gates.shape[2], wp.reshape(-1),
                   zero, dh.reshape(-1), n, band, scratch)
