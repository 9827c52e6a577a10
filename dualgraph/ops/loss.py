"""Softmax cross-entropy on class indices as one op: ``cross_entropy`` and its backward.

As a composite, ``F.cross_entropy(logits, classes)`` is a log-softmax followed by a dozen
small ops (which targets are ignored, a gather of the target classes, a masked sum, a
count, a division) forward and as many backward: each is a dispatch and a temporary of
its own over the (N, C) logits or the N rows, so with the few classes of a small model's
loss the calls, not the arithmetic, are the cost. As one op it is one pass over each row
forward (max, sum of exponentials, the target's logit) and one backward
(``softmax - onehot``, scaled), from the logits alone: the backward recomputes the row's
softmax instead of reading a saved log-softmax, which reads less memory than writing and
reading one. The backward's own VJP is the autodiff of the composite form, so gradients
of gradients still work; the two compiler-only ops name that form as their decomposition.

The op covers the common case: logits (N, C), integer targets (N,), no class weights, no
label smoothing; ``F.cross_entropy`` composes the other cases from log-softmax and gathers.
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..dispatch import apply
from ..kernels.threads import run_rows, threads_for
from ..shapes import ShapedType, ShapeError
from . import elementwise as ew
from . import index as index_ops
from . import reduce as red
from . import shape as shape_ops
from .opdef import defop

__all__: list = []

REDUCTIONS = ("none", "mean", "sum")


def _classes(target) -> np.ndarray:
    """Targets as the loops read them: contiguous int64."""
    return np.ascontiguousarray(target, dtype=np.int64)


def _use_loop(x) -> bool:
    # One loop call replaces ~8 NumPy calls, so it pays at every size (not only above
    # ``kernels.MIN_ELEMENTS`` as for a single elementwise op).
    return x.dtype == np.float32 and x.shape[1] > 0 and kernels.numba_available()


def _row_losses(x, target, ignore_index):
    """Per-row losses (0 where ignored), the number of rows not ignored, and the first row
    whose target is not a class index (or -1)."""
    if _use_loop(x):
        losses, status = np.empty(len(x), np.float32), np.empty(2, np.int64)
        kernels.normalization.cross_entropy(kernels.rows(x, x.shape[1]), target, ignore_index,
                                            losses, status)
        return losses, int(status[0]), int(status[1])
    valid = target != ignore_index
    bad = np.flatnonzero(valid & ((target < 0) | (target >= x.shape[1])))
    if bad.size:
        return None, 0, int(bad[0])
    w = red._widen(x)
    m = w.max(axis=1, keepdims=True, initial=-np.inf)
    logsumexp = np.log(np.exp(w - m).sum(axis=1)) + m[:, 0]
    picked = np.take_along_axis(w, np.where(valid, target, 0)[:, None], axis=1)[:, 0]
    return np.where(valid, logsumexp - picked, 0).astype(w.dtype), int(valid.sum()), -1


def _cross_entropy_kernel(x, target, ignore_index, reduction):
    target = _classes(target)
    losses, counted, bad = _row_losses(x, target, ignore_index)
    _check_targets(target, bad, x.shape[1])
    return _reduced(losses, counted, reduction, x.dtype)


def _check_targets(target, bad: int, classes: int) -> None:
    """torch's error for row ``bad`` (if >= 0), whose target is not a class index."""
    if bad >= 0:
        raise IndexError(f"Target {target[bad]} is out of bounds for {classes} classes "
                         f"(row {bad} of the targets)")


def _reduced(losses, counted: int, reduction: str, dtype):
    """The per-row ``losses`` (``counted`` rows not ignored) as ``reduction`` asks."""
    if reduction == "none":
        return losses.astype(dtype, copy=False)
    total = losses.sum()
    if reduction == "mean":   # torch: NaN when every target is ignored
        total = total / counted if counted else np.float32(np.nan)
    return np.asarray(total, dtype=dtype)


def _row_scales(g, target, ignore_index, reduction, dtype, counted=None) -> np.ndarray:
    """What each row's loss was multiplied by on its way to the output whose gradient is
    ``g``: g itself per row ('none'), g ('sum'), g / rows not ignored ('mean'; ``counted``
    if the caller has counted them)."""
    if reduction == "none":
        return np.ascontiguousarray(g, dtype=dtype)
    scale = np.asarray(g, dtype=np.float64)
    if reduction == "mean":
        counted = np.count_nonzero(target != ignore_index) if counted is None else counted
        scale = scale / max(counted, 1)
    return np.full(len(target), scale, dtype)


def _cross_entropy_backward_kernel(g, x, target, ignore_index, reduction):
    target = _classes(target)
    if _use_loop(x):
        scale = _row_scales(g, target, ignore_index, reduction, np.float32)
        dx = np.empty(x.shape, x.dtype)
        run_rows(kernels.normalization.cross_entropy_backward, len(x),
                 kernels.rows(x, x.shape[1]), target, ignore_index, scale, dx,
                 threads=threads_for(x.size))
        return dx
    w = red._widen(x)
    valid = (target != ignore_index) & (target >= 0) & (target < x.shape[1])
    scale = np.where(valid, _row_scales(g, target, ignore_index, reduction, w.dtype), 0)
    dx = np.exp(w - w.max(axis=1, keepdims=True, initial=-np.inf))
    dx *= (scale / dx.sum(axis=1))[:, None]
    rows = np.flatnonzero(valid)
    dx[rows, target[rows]] -= scale[rows]
    return dx.astype(x.dtype, copy=False)


def _cross_entropy_with_grad_kernel(x, target, g, ignore_index, reduction):
    """``(cross_entropy(x, target), cross_entropy_backward(g, x, target))`` from one
    pass over each row: the same arithmetic as the two kernels, so the same bits."""
    if not _use_loop(x):
        return (_cross_entropy_kernel(x, target, ignore_index, reduction),
                _cross_entropy_backward_kernel(g, x, target, ignore_index, reduction))
    target = _classes(target)
    status = np.empty(2, np.int64)
    kernels.normalization.target_status(target, ignore_index, x.shape[1], status)
    _check_targets(target, int(status[1]), x.shape[1])
    scale = _row_scales(g, target, ignore_index, reduction, np.float32, int(status[0]))
    losses, dx = np.empty(len(x), np.float32), np.empty(x.shape, x.dtype)
    run_rows(kernels.normalization.cross_entropy_with_grad, len(x),
             kernels.rows(x, x.shape[1]), target, ignore_index, scale, losses, dx,
             threads=threads_for(x.size))
    return _reduced(losses, int(status[0]), reduction, x.dtype), dx


def _infer_cross_entropy(x, target, ignore_index, reduction):
    if x.ndim != 2 or tuple(target.shape) != tuple(x.shape)[:1]:
        raise ShapeError(f"cross_entropy: expected logits (N, C) and targets (N,), got "
                         f"{tuple(x.shape)} and {tuple(target.shape)}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {REDUCTIONS}, got "
                         f"{reduction!r}")
    return ShapedType(tuple(x.shape)[:1] if reduction == "none" else (), x.dtype)


def cross_entropy_backward_composite(g, x, target, ignore_index, reduction):
    """The backward from ops (softmax, one-hot, where): what the second derivative
    differentiates."""
    valid = ew.ne(target, ignore_index)
    weights = ew.where(valid, 1.0, 0.0).to(x.dtype)
    if reduction == "none":
        scale = g * weights
    else:
        scale = shape_ops.expand(g, tuple(target.shape)) * weights
        if reduction == "mean":
            scale = scale / red.sum(weights)
    onehot = index_ops.one_hot(ew.where(valid, target, 0), x.shape[1]).to(x.dtype)
    return (red.softmax(x, 1) - onehot) * shape_ops.unsqueeze(scale, 1)


def _vjp(g, out, x, target, ignore_index, reduction):
    return apply(CROSS_ENTROPY_BACKWARD, g, x, target, ignore_index=ignore_index,
                 reduction=reduction), None


def _backward_vjp(gg, dx, g, x, target, ignore_index, reduction):
    from ..autograd.engine import grad
    from ..autograd.tape import enable_grad
    with enable_grad():
        gl, xl = g.detach().requires_grad_(), x.detach().requires_grad_()
        first = cross_entropy_backward_composite(gl, xl, target, ignore_index, reduction)
        dg, dxx = grad(first, [gl, xl], gg, create_graph=True, allow_unused=True)
    return dg, dxx, None


def _cross_entropy_decomposition(x, target, ignore_index, reduction):
    """The losses from log_softmax and a gather of the target classes (0 where ignored)."""
    valid = ew.ne(target, ignore_index)
    picked = index_ops.gather(red.log_softmax(x, 1), 1,
                              shape_ops.unsqueeze(ew.where(valid, target, 0), 1))
    losses = ew.where(valid, -shape_ops.squeeze(picked, 1), 0)
    if reduction == "none":
        return losses
    total = red.sum(losses)
    return total / red.sum(valid.to(x.dtype)) if reduction == "mean" else total


def _onnx_cross_entropy(e, node):
    """cross_entropy -> SoftmaxCrossEntropyLoss, the same loss (a 'mean' divides by the
    targets not ignored); labels must be int32 or int64 there."""
    wide = node.inputs[1].dtype in (np.int32, np.int64)
    labels = e.input(1) if wide else e.input(1, np.int64)
    return [e.op("SoftmaxCrossEntropyLoss", [e.input(0), labels],
                 ignore_index=node.attrs["ignore_index"], reduction=node.attrs["reduction"])]


CROSS_ENTROPY = defop("cross_entropy", _cross_entropy_kernel, _infer_cross_entropy, vjp=_vjp,
                      decomposition=_cross_entropy_decomposition,
                      attrs=("ignore_index", "reduction"), saves="i",
                      onnx=_onnx_cross_entropy,
                      autocast="float32")
CROSS_ENTROPY_BACKWARD = defop(
    "cross_entropy_backward", _cross_entropy_backward_kernel,
    lambda g, x, target, ignore_index, reduction: ShapedType(tuple(x.shape), x.dtype),
    compiler_only=True,
    decomposition=cross_entropy_backward_composite,
    vjp=_backward_vjp, attrs=("ignore_index", "reduction"), saves="i", onnx=None)


def _with_grad_decomposition(x, target, g, ignore_index, reduction):
    return (apply(CROSS_ENTROPY, x, target, ignore_index=ignore_index, reduction=reduction),
            cross_entropy_backward_composite(g, x, target, ignore_index, reduction))


CROSS_ENTROPY_WITH_GRAD = defop(
    "cross_entropy_with_grad", _cross_entropy_with_grad_kernel,
    lambda x, target, g, ignore_index, reduction: (
        _infer_cross_entropy(x, target, ignore_index, reduction),
        ShapedType(tuple(x.shape), x.dtype)),
    compiler_only=True,
    decomposition=_with_grad_decomposition,
    num_outputs=2, attrs=("ignore_index", "reduction"), saves="", onnx=None,
    doc="A cross_entropy and its backward with seed gradient g, at once: (x, target, g) "
        "-> (loss, dx); made by the ``join_loss_gradient`` pass. Compiled steps run it "
        "after autodiff, so it has no VJP.")


def cross_entropy(logits, target, ignore_index: int = -100, reduction: str = "mean"):
    """Softmax cross-entropy of logits (N, C) at integer class targets (N,), one op (see
    the module docstring); ``F.cross_entropy`` calls it when no weights or smoothing
    apply."""
    return apply(CROSS_ENTROPY, logits, target, ignore_index=int(ignore_index),
                 reduction=reduction)
