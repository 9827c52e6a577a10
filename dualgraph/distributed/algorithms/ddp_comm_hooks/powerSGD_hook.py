"""PowerSGD: each gradient matrix ``M`` (n x m) travels as two thin factors, ``P = M Q``
(n x r) and ``Q = M^T P`` (m x r) after ``P`` is orthogonalised, each allreduced, with
error feedback and ``Q`` warm-started from the previous step (Vogels et al., "PowerSGD:
Practical low-rank gradient compression for distributed optimization", 2019; torch's
``powerSGD_hook``). Vectors, and matrices too small for the factors to be smaller, travel
uncompressed, as do all gradients for the first ``start_powerSGD_iter`` steps.

>>> state = PowerSGDState(None, matrix_approximation_rank=2, start_powerSGD_iter=10)
>>> ddp.register_comm_hook(state, powerSGD_hook)
"""
from __future__ import annotations

import numpy as np

from ... import collectives as dist
from ....tensor import Tensor
from .default_hooks import allreduce_hook


class PowerSGDState:
    """The hook's settings and memory: per bucket the error-feedback residual and each
    matrix's ``Q`` (warm start); ``iter`` counts the steps (one per last bucket)."""

    def __init__(self, process_group=None, matrix_approximation_rank: int = 1,
                 start_powerSGD_iter: int = 1_000, use_error_feedback: bool = True,
                 warm_start: bool = True, orthogonalization_epsilon: float = 0.0,
                 random_seed: int = 0):
        self.process_group = process_group
        self.matrix_approximation_rank = matrix_approximation_rank
        self.start_powerSGD_iter = start_powerSGD_iter
        self.use_error_feedback = use_error_feedback
        self.warm_start = warm_start
        self.orthogonalization_epsilon = orthogonalization_epsilon
        self.rng = np.random.default_rng(random_seed)   # same seed on every rank: same Q
        self.errors: dict[int, np.ndarray] = {}
        self.qs: dict[tuple, np.ndarray] = {}
        self.iter = 0

    def maybe_increase_iter(self, bucket) -> None:
        if bucket.is_last():
            self.iter += 1


def powerSGD_hook(state: PowerSGDState, bucket) -> dist.Future:
    """The bucket averaged over ranks, each large matrix through a rank-r approximation."""
    if state.iter < state.start_powerSGD_iter:
        state.maybe_increase_iter(bucket)
        return allreduce_hook(None, bucket)
    buffer, size, r = bucket.buffer(), dist.get_world_size(), state.matrix_approximation_rank
    flat = buffer.numpy()
    if state.use_error_feedback:
        flat += state.errors.get(bucket.index(), 0)
        sent = flat.copy()
    grads = [g.numpy() for g in bucket.gradients()]
    matrices = [(i, g.reshape(g.shape[0], -1)) for i, g in enumerate(grads)
                if g.ndim > 1 and r * sum(g.reshape(g.shape[0], -1).shape) < g.size]
    compressed = {i for i, _ in matrices}
    plain = [g for i, g in enumerate(grads) if i not in compressed]
    rest = Tensor._make(np.concatenate([g.ravel() for g in plain]) if plain
                        else np.zeros(0, flat.dtype))
    rest_work = dist.all_reduce(rest, async_op=True)
    qs = [_q(state, bucket.index(), i, m.shape[1], r, flat.dtype) for i, m in matrices]
    ps = [m @ q for (_, m), q in zip(matrices, qs)]
    _all_reduce_each(ps)
    for p in ps:
        _orthogonalise(p, state.orthogonalization_epsilon)
    for (_, m), p, q in zip(matrices, ps, qs):
        np.matmul(m.T, p, out=q)
    _all_reduce_each(qs)
    for (_, m), p, q in zip(matrices, ps, qs):
        np.matmul(p, q.T / size, out=m)   # (m is a view of the bucket)

    def finish():
        rest_work.wait()
        offset = 0
        for g in plain:
            g.ravel()[...] = rest.numpy()[offset:offset + g.size] / size
            offset += g.size
        if state.use_error_feedback:
            state.errors[bucket.index()] = sent - flat   # what the average missed of ours
        state.maybe_increase_iter(bucket)
        return buffer
    return dist.Future(finish)


def _q(state, bucket: int, i: int, columns: int, r: int, dtype) -> np.ndarray:
    key = (bucket, i)
    if not state.warm_start or key not in state.qs:
        state.qs[key] = state.rng.standard_normal((columns, r)).astype(dtype)
    return state.qs[key]


def _all_reduce_each(arrays) -> None:
    """Sum each array over the ranks, in place (one message for all)."""
    if not arrays:
        return
    flat = Tensor._make(np.concatenate([a.ravel() for a in arrays]))
    dist.all_reduce(flat)
    offset = 0
    for a in arrays:
        a[...] = flat.numpy()[offset:offset + a.size].reshape(a.shape)
        offset += a.size


def _orthogonalise(p: np.ndarray, epsilon: float) -> None:
    """Gram-Schmidt on the columns of ``p``, in place (the same on every rank)."""
    for j in range(p.shape[1]):
        col = p[:, j]
        norm = np.linalg.norm(col)
        col /= (norm + epsilon) if epsilon else (norm or 1.0)
        if j + 1 < p.shape[1]:
            rest = p[:, j + 1:]
            rest -= np.outer(col, col @ rest)
