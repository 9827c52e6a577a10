"""``dg.nn.utils``: gradient clipping, flattening parameters, weight normalisation,
parametrizations (``parametrize``, ``parametrizations``), pruning masks (``prune``) and
batch-norm folding (``fusion``), as ``torch.nn.utils``.

Everything here is Tensor ops under ``no_grad`` (no ``.item()`` unless asked for with
``error_if_nonfinite``), so clipping inside a captured training step becomes graph nodes.
"""
from __future__ import annotations

import math

import numpy as np

from ...autograd import no_grad
from ...dispatch import modes
from ...ops import creation, elementwise, inplace, reduce, shape
from ...ops.inplace import commit_flat, commit_inplace, flat_of
from ...tensor import Tensor
from . import (fusion, parametrizations, parametrize, prune,  # noqa: F401  (torch.nn.utils.*)
               rnn, stateless)
from .fusion import (fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval,  # noqa: F401
                     fuse_linear_bn_weights)
from .spectral_norm import remove_spectral_norm, spectral_norm  # (the hook-based one)
from .weight_norm import remove_weight_norm, weight_norm  # (the function, as torch's)

__all__ = ["clip_grad_norm_", "get_total_norm", "clip_grads_with_norm_", "clip_grad_value_",
           "parameters_to_vector", "vector_to_parameters", "weight_norm", "remove_weight_norm", "spectral_norm",
           "remove_spectral_norm", "fuse_conv_bn_eval", "fuse_conv_bn_weights",
           "fuse_linear_bn_eval", "fuse_linear_bn_weights"]


def _as_list(parameters) -> list:
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def _grads(parameters) -> list:
    return [p.grad for p in _as_list(parameters) if p.grad is not None]


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type``-norm of all entries of ``tensors`` (gradients, usually) as one
    vector, a 0-d tensor (0 for none), as ``torch.nn.utils.get_total_norm``: the first half
    of :func:`clip_grad_norm_`, for loops that log or all-reduce the norm before clipping."""
    tensors = _as_list(tensors)
    if not tensors:
        return creation.tensor(0.0)
    norm_type = float(norm_type)
    with no_grad():
        total = reduce.norm(reduce.norms(tensors, p=norm_type), p=norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(
            f"the total norm of order {norm_type} of the gradients is non-finite, so it "
            "cannot be clipped; pass error_if_nonfinite=False to clip anyway")
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None) -> None:
    """Scale the gradients of ``parameters`` in place by ``max_norm / (total_norm + 1e-6)``
    where that is below 1, as ``torch.nn.utils.clip_grads_with_norm_``: the second half of
    :func:`clip_grad_norm_`, given the norm (:func:`get_total_norm`'s)."""
    grads = _grads(parameters)
    if not grads:
        return
    with no_grad():
        coef = elementwise.clamp(float(max_norm) / (total_norm + 1e-6), max=1.0)
        small = _flat_scalable(grads)
        if len(small) > 1:   # (one multiply for all of them, as torch's _foreach_mul_)
            commit_flat(small, elementwise.mul(flat_of(small), coef))
        done = {id(g) for g in small} if len(small) > 1 else ()
        for g in grads:
            if id(g) not in done:
                g.mul_(coef)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scale the gradients of ``parameters`` in place so that their total ``norm_type``-norm
    (the norm of the vector of all gradient entries) is at most ``max_norm``; return that
    total norm (before clipping) as a 0-d tensor. ``foreach`` is accepted as torch's: the
    small gradients are scaled together whatever it says.

    >>> import dualgraph as dg
    >>> w = dg.tensor([3.0, 4.0], requires_grad=True)
    >>> (w * w).sum().backward()        # w.grad = [6, 8], norm 10
    >>> dg.nn.utils.clip_grad_norm_([w], max_norm=1.0)
    tensor(10.)
    >>> w.grad
    tensor([0.6, 0.8])
    """
    parameters = _as_list(parameters)
    total = get_total_norm(_grads(parameters), norm_type, error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total)
    return total


def _flat_scalable(grads) -> list:
    """The gradients to scale as one flat tensor (ops/inplace.py): the small eager ones of
    the first one's dtype."""
    if modes.tracer is not None:
        return []
    dtype = grads[0]._data.dtype
    return [g for g in grads if type(g._data) is np.ndarray and g._data.dtype == dtype
            and g._data.size <= inplace.FLAT_MAX_NUMEL]


def clip_grad_value_(parameters, clip_value, foreach=None) -> None:
    """Clamp the gradients of ``parameters`` in place to ``[-clip_value, clip_value]``
    (``foreach`` accepted as by ``clip_grad_norm_``)."""
    clip_value = float(clip_value)
    grads = _grads(parameters)
    with no_grad():
        small = _flat_scalable(grads) if grads else []
        if len(small) > 1:   # (one clamp for all of them, as torch's foreach clamps)
            commit_flat(small, elementwise.clamp(flat_of(small), -clip_value, clip_value))
        done = {id(g) for g in small} if len(small) > 1 else ()
        for g in grads:
            if id(g) not in done:
                g.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters) -> Tensor:
    """All parameters flattened and concatenated into one 1-d tensor."""
    return shape.cat([p.reshape(-1) for p in _as_list(parameters)])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Copy consecutive slices of ``vec`` into ``parameters`` (the inverse of
    :func:`parameters_to_vector`). Unlike torch, the parameters keep their own storage."""
    if not isinstance(vec, Tensor) or vec.ndim != 1:
        raise TypeError("vector_to_parameters expects a 1-d tensor")
    params = _as_list(parameters)
    total = sum(p.numel() for p in params)
    if vec.shape[0] != total:
        raise ValueError(f"the vector has {vec.shape[0]} elements, the parameters {total}")
    offset = 0
    with no_grad():
        for p in params:
            n = p.numel()
            commit_inplace(p, shape.narrow(vec, 0, offset, n).reshape(tuple(p.shape)))
            offset += n
