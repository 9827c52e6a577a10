"""The Adam / AdamW and SGD-with-momentum updates in one pass (float32), with the
arithmetic of the NumPy kernels in ``optim/_ops.py`` step for step, so both give the same
bits. :func:`adam_many_in_place` and :func:`sgd_many_in_place` update every parameter of
a step in one call, or, for a big model, in element ranges at once on OpenBLAS's threads
(:func:`run_group`)."""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .memory import float32_vector
from .threads import run_rows, threads_for


@helper(inline="always")
def _adam_step(p, g, m, v, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt,
               eps, neg_step_size, decay):
    """One element: ``m' = m + (1 - b1)(g - m)``, ``v' = b2 v + (1 - b2) g^2``,
    ``p' = decay p + neg_step_size * m' / (sqrt(v') / bc2_sqrt + eps)``."""
    new_m = (g - m) * one_minus_beta1 + m
    new_v = v * beta2 + g * g * one_minus_beta2
    update = new_m / (np.sqrt(new_v) / bias_correction2_sqrt + eps) * neg_step_size
    return (update + p if decay == 1 else p * decay + update), new_m, new_v


@loop
def adam(p, grad, m, v, p_out, m_out, v_out, one_minus_beta1, beta2, one_minus_beta2,
         bias_correction2_sqrt, eps, neg_step_size, decay):
    """:func:`_adam_step` over flat arrays, into other arrays."""
    for i in range(p.size):
        p_out[i], m_out[i], v_out[i] = _adam_step(
            p[i], grad[i], m[i], v[i], one_minus_beta1, beta2, one_minus_beta2,
            bias_correction2_sqrt, eps, neg_step_size, decay)


@loop
def adam_in_place(p, grad, m, v, one_minus_beta1, beta2, one_minus_beta2,
                  bias_correction2_sqrt, eps, neg_step_size, decay):
    """:func:`adam` writing ``p``, ``m`` and ``v`` themselves (a compiled step's donated
    state). Passing the same arrays as outputs to :func:`adam` would be correct but about 5x
    slower: LLVM then finds an output overlapping an input at run time and takes its scalar
    loop; here each array comes once, so the vectorised loop runs."""
    for i in range(p.size):
        p[i], m[i], v[i] = _adam_step(
            p[i], grad[i], m[i], v[i], one_minus_beta1, beta2, one_minus_beta2,
            bias_correction2_sqrt, eps, neg_step_size, decay)


@loop
def adam_many_in_place(start, stop, table, one_minus_beta1, beta2, one_minus_beta2,
                       bias_correction2_sqrt, eps, neg_step_size, decay):
    """:func:`adam_in_place` for many parameters in one call: the elements ``start:stop``
    of all of them taken as one sequence (one step's whole update, or a share of it:
    :func:`run_group`). ``table`` holds, flat, the ``id()`` of each parameter's p, grad, m
    and v, 1-D C-contiguous float32 arrays of one length that the caller checks and keeps
    alive."""
    base = 0
    for k in range(table.size // 4):
        lo, hi, base = _range_in_parameter(table[4 * k], start, stop, base)
        if lo < hi:
            p, grad = _part(table[4 * k], lo, hi), _part(table[4 * k + 1], lo, hi)
            m, v = _part(table[4 * k + 2], lo, hi), _part(table[4 * k + 3], lo, hi)
            for i in range(p.size):
                p[i], m[i], v[i] = _adam_step(
                    p[i], grad[i], m[i], v[i], one_minus_beta1, beta2, one_minus_beta2,
                    bias_correction2_sqrt, eps, neg_step_size, decay)


@helper(inline="always")
def _sgd_step(p, g, buf, momentum, one_minus_dampening, neg_lr, nesterov):
    """One element: ``b' = momentum b + (1 - dampening) g``, ``p' = p - lr * b'``
    (Nesterov: ``p - lr * (g + momentum b')``)."""
    new_buf = buf * momentum + (g if one_minus_dampening == 1 else g * one_minus_dampening)
    step = g + new_buf * momentum if nesterov else new_buf
    return p + step * neg_lr, new_buf


@loop
def sgd_momentum(p, grad, buf, p_out, buf_out, momentum, one_minus_dampening, neg_lr,
                 nesterov):
    """:func:`_sgd_step` over flat arrays, into other arrays."""
    for i in range(p.size):
        p_out[i], buf_out[i] = _sgd_step(p[i], grad[i], buf[i], momentum,
                                         one_minus_dampening, neg_lr, nesterov)


@loop
def sgd_momentum_in_place(p, grad, buf, momentum, one_minus_dampening, neg_lr, nesterov):
    """:func:`sgd_momentum` writing ``p`` and ``buf`` themselves (see
    :func:`adam_in_place` for why this is a loop of its own)."""
    for i in range(p.size):
        p[i], buf[i] = _sgd_step(p[i], grad[i], buf[i], momentum, one_minus_dampening,
                                 neg_lr, nesterov)


@loop
def sgd_many_in_place(start, stop, table, momentum, one_minus_dampening, neg_lr, nesterov):
    """:func:`sgd_momentum_in_place` for many parameters in one call, as
    :func:`adam_many_in_place`: ``table`` holds, flat, the ``id()`` of each parameter's p,
    grad and buf."""
    base = 0
    for k in range(table.size // 3):
        lo, hi, base = _range_in_parameter(table[3 * k], start, stop, base)
        if lo < hi:
            p, grad = _part(table[3 * k], lo, hi), _part(table[3 * k + 1], lo, hi)
            buf = _part(table[3 * k + 2], lo, hi)
            for i in range(p.size):
                p[i], buf[i] = _sgd_step(p[i], grad[i], buf[i], momentum,
                                         one_minus_dampening, neg_lr, nesterov)


@helper(inline="always")
def _range_in_parameter(address, start, stop, base):
    """``lo, hi``: the elements of the parameter whose 1-D array is ``address`` that the
    range ``start:stop`` of a group covers (none if lo >= hi), when the parameters before
    it hold ``base`` elements; and ``base`` for the next parameter."""
    size = float32_vector(address).size
    return max(start - base, 0), min(stop - base, size), base + size


@helper(inline="always")
def _part(address, lo, hi):
    """Elements ``lo:hi`` of the 1-D float32 array ``address``, as a slice indexed from 0:
    an index the loop cannot prove >= 0 gets a negative-index check, which keeps the loop
    from vectorising."""
    return float32_vector(address)[lo:hi]


def run_group(loop, table: np.ndarray, size: int, *constants) -> None:
    """Run the group update ``loop`` (:func:`adam_many_in_place`, :func:`sgd_many_in_place`)
    over all ``size`` elements of the parameters in ``table`` (a row of ``id()`` s per
    parameter), with the update's ``constants``: as one call, or, for a big model, in
    element ranges on OpenBLAS's threads (``threads.run_rows``). Every element is updated
    by the same arithmetic either way, so the bits do not depend on how it was shared."""
    run_rows(loop, size, table.reshape(-1), *constants, threads=threads_for(size))
