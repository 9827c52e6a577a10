"""PowerSGD: each gradient matrix ``M`` (n x m) travels as two thin factors, ``P = M Q``
(n x r) and ``Q = M^T P`` (m x r) after ``P`` is orthogonalised, each allreduced, with
error feedback and ``Q`` warm-started from the previous step (Vogels et al., "PowerSGD:
Practical low-rank gradient compression for distributed optimization", 2019; torch's
``powerSGD_hook``). Vectors, and matrices too small for the factors to be smaller, travel
uncompressed, as do all gradients for the first ``start_powerSGD_iter`` steps.

The compression is written once, with dualgraph ops (:func:`compress`): the eager hook runs
it, and under ``dg.compile`` it is the hook's graph form, which DDP traces around the
bucket's allreduces (the residuals and warm-start ``Q``s are tensors the graph reads and
writes back). A compiled step is traced in one phase: trace it after the first
``start_powerSGD_iter`` steps (run those eagerly), and with ``warm_start`` (a fresh random
``Q`` at every step can't be a graph's constant).

>>> state = PowerSGDState(None, matrix_approximation_rank=2, start_powerSGD_iter=10)
>>> ddp.register_comm_hook(state, powerSGD_hook)
"""
from __future__ import annotations

import math

import numpy as np

from .... import dtypes
from ....ops import collective
from ....ops.elementwise import where
from ....ops.shape import cat, stack
from ....tensor import Tensor
from ... import collectives as dist
from ...groups import resolve
from .default_hooks import allreduce_hook, group_of


class PowerSGDState:
    """The hook's settings and memory: per bucket the error-feedback residual and each
    matrix's ``Q`` (warm start), as tensors; ``iter`` counts the eager steps (one per last
    bucket)."""

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
        self.errors: dict[int, Tensor] = {}
        self.qs: dict[tuple, Tensor] = {}
        self.iter = 0

    def maybe_increase_iter(self, bucket) -> None:
        if bucket.is_last():
            self.iter += 1

    def error(self, bucket) -> Tensor:
        """The bucket's error-feedback residual, zeros the first time (made outside any
        trace: a tensor a compiled step reads and updates in place)."""
        if bucket.index() not in self.errors:
            b = bucket.buffer()
            self.errors[bucket.index()] = Tensor._make(
                np.zeros(tuple(b.shape), dtypes.to_np(b.dtype)))
        return self.errors[bucket.index()]

    def q(self, bucket, i: int, columns: int, dtype) -> Tensor:
        """Matrix ``i``'s ``Q``: last step's (warm start) or a new random one."""
        key = (bucket.index(), i)
        if not self.warm_start or key not in self.qs:
            r = self.matrix_approximation_rank
            self.qs[key] = Tensor._make(self.rng.standard_normal((columns, r)).astype(dtype))
        return self.qs[key]


def powerSGD_hook(state: PowerSGDState, bucket) -> dist.Future:
    """The bucket averaged over ranks, each large matrix through a rank-r approximation
    (:func:`compress`, run now); a plain allreduce for the first steps."""
    if state.iter < state.start_powerSGD_iter:
        state.maybe_increase_iter(bucket)
        return allreduce_hook(state.process_group, bucket)   # (None: the DDP's group)
    averaged = compress(state, bucket)
    state.maybe_increase_iter(bucket)
    return dist.Future(value=averaged)


def compress(state: PowerSGDState, bucket) -> Tensor:
    """The bucket averaged over the ranks, its large matrices as ``P Q^T`` (error feedback
    and warm start in ``state``). Dualgraph ops only: it runs eagerly and traces into a
    step's graph alike."""
    process_group = group_of(state.process_group, bucket)
    size, r = dist.get_world_size(process_group), state.matrix_approximation_rank
    group = resolve(process_group)
    flat = bucket.buffer()
    if state.use_error_feedback:
        error = state.error(bucket)
        flat = flat + error
    pieces, offset = [], 0
    for p in bucket.parameters():
        n = p.numel()
        pieces.append(flat[offset:offset + n].reshape(tuple(p.shape)))
        offset += n
    matrices = {i: g.reshape(g.shape[0], -1) for i, g in enumerate(pieces)
                if g.ndim > 1 and r * (g.shape[0] + g.numel() // g.shape[0]) < g.numel()}
    out = list(pieces)
    plain = [i for i in range(len(pieces)) if i not in matrices]
    if plain:
        summed = _all_reduce_each([pieces[i] for i in plain], group)
        for i, s in zip(plain, summed):
            out[i] = s / size
    np_dtype = dtypes.to_np(flat.dtype)
    qs = {i: state.q(bucket, i, m.shape[1], np_dtype) for i, m in matrices.items()}
    ps = _all_reduce_each([m @ qs[i] for i, m in matrices.items()], group)
    ps = [_orthogonalise(p, state.orthogonalization_epsilon) for p in ps]
    new_qs = _all_reduce_each([m.T @ p for m, p in zip(matrices.values(), ps)], group)
    for (i, m), p, q in zip(matrices.items(), ps, new_qs):
        out[i] = (p @ (q.T / size)).reshape(tuple(pieces[i].shape))
        if state.warm_start:
            qs[i].copy_(q)
    averaged = cat([o.reshape(-1) for o in out])
    if state.use_error_feedback:
        error.copy_(flat - averaged)   # what the average missed of ours
    return averaged


def _graph_form(state: PowerSGDState, bucket) -> Tensor:
    """Under dg.compile: :func:`compress`, for a step traced in the compressing phase."""
    if state.iter < state.start_powerSGD_iter or not state.warm_start:
        raise NotImplementedError(
            f"powerSGD_hook under dg.compile: traced at step {state.iter}, before "
            f"start_powerSGD_iter={state.start_powerSGD_iter}, or without warm_start "
            f"(warm_start={state.warm_start}); a compiled step keeps the phase it was traced "
            "in. Run the first start_powerSGD_iter steps eagerly, then the compiled step "
            "(with warm_start=True)")
    return compress(state, bucket)


powerSGD_hook.graph_form = _graph_form


def _all_reduce_each(tensors: list, group) -> list:
    """The sum over the ranks (of ``group``, the ops' name of it) of each tensor (one
    message for all)."""
    if not tensors:
        return []
    summed = collective.all_reduce(cat([t.reshape(-1) for t in tensors]), "SUM", group)
    out, offset = [], 0
    for t in tensors:
        n = math.prod(t.shape)
        out.append(summed[offset:offset + n].reshape(tuple(t.shape)))
        offset += n
    return out


def _orthogonalise(p: Tensor, epsilon: float) -> Tensor:
    """Gram-Schmidt on the columns of ``p`` (the same on every rank)."""
    cols = [p[:, j] for j in range(p.shape[1])]
    for j in range(len(cols)):
        norm = cols[j].norm()
        cols[j] = cols[j] / ((norm + epsilon) if epsilon else where(norm > 0, norm, 1.0))
        for i in range(j + 1, len(cols)):
            cols[i] = cols[i] - cols[j] * (cols[j] * cols[i]).sum()
    return stack(cols, dim=1)
