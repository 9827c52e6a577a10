"""The Adam / AdamW and SGD-with-momentum updates in one pass (float32), with the
arithmetic of the NumPy kernels in ``optim/_ops.py`` step for step, so both give the same
bits."""
from __future__ import annotations

import numpy as np

from . import loop


@loop
def adam(p, grad, m, v, p_out, m_out, v_out, one_minus_beta1, beta2, one_minus_beta2,
         bias_correction2_sqrt, eps, neg_step_size, decay):
    """``m' = m + (1 - b1)(g - m)``, ``v' = b2 v + (1 - b2) g^2``,
    ``p' = decay p + neg_step_size * m' / (sqrt(v') / bc2_sqrt + eps)``."""
    for i in range(p.size):
        g = grad[i]
        new_m = (g - m[i]) * one_minus_beta1 + m[i]
        new_v = v[i] * beta2 + g * g * one_minus_beta2
        update = new_m / (np.sqrt(new_v) / bias_correction2_sqrt + eps) * neg_step_size
        p_out[i] = update + p[i] if decay == 1 else p[i] * decay + update
        m_out[i], v_out[i] = new_m, new_v


@loop
def sgd_momentum(p, grad, buf, p_out, buf_out, momentum, one_minus_dampening, neg_lr,
                 nesterov):
    """``b' = momentum b + (1 - dampening) g``, ``p' = p - lr * b'`` (Nesterov: ``p - lr *
    (g + momentum b')``)."""
    for i in range(p.size):
        g = grad[i]
        new_buf = buf[i] * momentum + (g if one_minus_dampening == 1 else
                                       g * one_minus_dampening)
        step = g + new_buf * momentum if nesterov else new_buf
        p_out[i] = p[i] + step * neg_lr
        buf_out[i] = new_buf

