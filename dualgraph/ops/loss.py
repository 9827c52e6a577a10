"""Losses as one op each: softmax cross-entropy on class indices (``cross_entropy``) and
the smooth L1 / Huber loss (``smooth_l1_loss``), with their backward ops.

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

``F.smooth_l1_loss`` (and ``F.huber_loss``, ``delta`` times it with ``beta=delta``) was ten
recorded ops forward (sub, abs, lt, two muls, sub, mul, where, div, mean) and as many
backward, on the one-element losses of a value head; as one op it is a NumPy pass each
way, its backward the slope ``d / beta`` inside ``|d| < beta``, ``sign(d)`` outside.
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..dispatch import apply
from ..kernels.threads import run_rows, threads_for
from ..shapes import ShapedType, ShapeError, broadcast_shapes, numel
from . import elementwise as ew
from . import index as index_ops
from . import reduce as red
from . import shape as shape_ops
from ._util import empty_into, needs_grad, out_part, sum_to
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


def _cross_entropy_with_grad_kernel(x, target, g, ignore_index, reduction, out=None):
    """``(cross_entropy(x, target), cross_entropy_backward(g, x, target))`` from one
    pass over each row: the same arithmetic as the two kernels, so the same bits. The
    loop writes the gradient into its array of ``out`` where given (``fills_out``)."""
    if not _use_loop(x):
        return (_cross_entropy_kernel(x, target, ignore_index, reduction),
                _cross_entropy_backward_kernel(g, x, target, ignore_index, reduction))
    target = _classes(target)
    status = np.empty(2, np.int64)
    kernels.normalization.target_status(target, ignore_index, x.shape[1], status)
    _check_targets(target, int(status[1]), x.shape[1])
    scale = _row_scales(g, target, ignore_index, reduction, np.float32, int(status[0]))
    losses, dx = np.empty(len(x), np.float32), empty_into(out_part(out, 1), x.shape, x.dtype)
    run_rows(kernels.normalization.cross_entropy_with_grad, len(x),
             kernels.rows(x, x.shape[1]), target, ignore_index, scale, losses, dx,
             threads=threads_for(x.size))
    return _reduced(losses, int(status[0]), reduction, x.dtype), dx


def _class_loss_rule(name: str):
    """The shape and type rule of a loss of rows (N, C) at class indices (N,)."""
    def infer(x, target, ignore_index, reduction):
        if x.ndim != 2 or tuple(target.shape) != tuple(x.shape)[:1]:
            raise ShapeError(f"{name}: expected rows (N, C) and targets (N,), got "
                             f"{tuple(x.shape)} and {tuple(target.shape)}")
        if reduction not in REDUCTIONS:
            raise ValueError(f"{name}: reduction must be one of {REDUCTIONS}, got "
                             f"{reduction!r}")
        return ShapedType(tuple(x.shape)[:1] if reduction == "none" else (), x.dtype)
    return infer


_infer_cross_entropy = _class_loss_rule("cross_entropy")


def _composite_targets(g, x, target, ignore_index, reduction):
    """From ops: each row's one-hot target (zeros where ignored) and what its loss was
    multiplied by on its way to the output whose gradient is ``g``, as an (N, 1) column."""
    valid = ew.ne(target, ignore_index)
    weights = ew.where(valid, 1.0, 0.0).to(x.dtype)
    if reduction == "none":
        scale = g * weights
    else:
        scale = shape_ops.expand(g, tuple(target.shape)) * weights
        if reduction == "mean":
            scale = scale / red.sum(weights)
    onehot = index_ops.one_hot(ew.where(valid, target, 0), x.shape[1]).to(x.dtype)
    return onehot, shape_ops.unsqueeze(scale, 1)


def cross_entropy_backward_composite(g, x, target, ignore_index, reduction):
    """The backward from ops (softmax, one-hot, where): what the second derivative
    differentiates."""
    onehot, scale = _composite_targets(g, x, target, ignore_index, reduction)
    return (red.softmax(x, 1) - onehot) * scale


def _vjp(g, out, x, target, ignore_index, reduction):
    return apply(CROSS_ENTROPY_BACKWARD, g, x, target, ignore_index=ignore_index,
                 reduction=reduction), None


def composite_vjp(composite):
    """The VJP of a backward op whose own form is ``composite`` (written with ops): the
    autodiff of that form, so gradients of gradients work; integer inputs get None."""
    def vjp(gg, out, *inputs, **attrs):
        from ..autograd.engine import grad
        from ..autograd.tape import enable_grad
        with enable_grad():
            leaves = [t.detach().requires_grad_() if t.is_floating_point() else t
                      for t in inputs]
            wrt = [t for t in leaves if t.requires_grad]
            got = iter(grad(composite(*leaves, **attrs), wrt, gg, create_graph=True,
                            allow_unused=True))
        return tuple(next(got) if t.requires_grad else None for t in leaves)
    return vjp


def _cross_entropy_decomposition(x, target, ignore_index, reduction):
    """The losses from log_softmax and nll's decomposition."""
    return _nll_decomposition(red.log_softmax(x, 1), target, ignore_index, reduction)


def _nll_decomposition(logp, target, ignore_index, reduction):
    """The losses from a gather of the target classes (0 where ignored)."""
    valid = ew.ne(target, ignore_index)
    picked = index_ops.gather(logp, 1, shape_ops.unsqueeze(ew.where(valid, target, 0), 1))
    losses = ew.where(valid, -shape_ops.squeeze(picked, 1), 0)
    if reduction == "none":
        return losses
    total = red.sum(losses)
    return total / red.sum(valid.to(logp.dtype)) if reduction == "mean" else total


def _onnx_class_loss(op_type: str):
    """cross_entropy -> SoftmaxCrossEntropyLoss, nll_loss -> NegativeLogLikelihoodLoss: the
    same losses (a 'mean' divides by the targets not ignored); labels must be int32 or
    int64 there."""
    def export(e, node):
        wide = node.inputs[1].dtype in (np.int32, np.int64)
        labels = e.input(1) if wide else e.input(1, np.int64)
        return [e.op(op_type, [e.input(0), labels], ignore_index=node.attrs["ignore_index"],
                     reduction=node.attrs["reduction"])]
    return export


CROSS_ENTROPY = defop("cross_entropy", _cross_entropy_kernel, _infer_cross_entropy, vjp=_vjp,
                      decomposition=_cross_entropy_decomposition,
                      attrs=("ignore_index", "reduction"), saves="i", checks_values=True,
                      onnx=_onnx_class_loss("SoftmaxCrossEntropyLoss"),
                      autocast="float32")
CROSS_ENTROPY_BACKWARD = defop(
    "cross_entropy_backward", _cross_entropy_backward_kernel,
    lambda g, x, target, ignore_index, reduction: ShapedType(tuple(x.shape), x.dtype),
    compiler_only=True,
    decomposition=cross_entropy_backward_composite,
    vjp=composite_vjp(cross_entropy_backward_composite),
    attrs=("ignore_index", "reduction"), saves="i", onnx=None)


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
    num_outputs=2, attrs=("ignore_index", "reduction"), saves="", onnx=None, fills_out=True,
    doc="A cross_entropy and its backward with seed gradient g, at once: (x, target, g) "
        "-> (loss, dx); made by the ``join_loss_gradient`` pass. Compiled steps run it "
        "after autodiff, so it has no VJP.")


def cross_entropy(logits, target, ignore_index: int = -100, reduction: str = "mean"):
    """Softmax cross-entropy of logits (N, C) at integer class targets (N,), one op (see
    the module docstring); ``F.cross_entropy`` calls it when no weights or smoothing
    apply."""
    return apply(CROSS_ENTROPY, logits, target, ignore_index=int(ignore_index),
                 reduction=reduction)


# -- negative log-likelihood of class indices ------------------------------------------------
def _nll_kernel(logp, target, ignore_index, reduction):
    target = _classes(target)
    if _use_loop(logp):   # (one call for the ~10 of NumPy's form below)
        losses, status = np.empty(len(logp), np.float32), np.empty(2, np.int64)
        kernels.normalization.nll(kernels.rows(logp, logp.shape[1]), target, ignore_index,
                                  losses, status)
        _check_targets(target, int(status[1]), logp.shape[1])
        return _reduced(losses, int(status[0]), reduction, logp.dtype)
    valid = target != ignore_index
    bad = np.flatnonzero(valid & ((target < 0) | (target >= logp.shape[1])))
    _check_targets(target, int(bad[0]) if bad.size else -1, logp.shape[1])
    picked = logp[np.arange(len(target)), np.where(valid, target, 0)]
    losses = np.where(valid, -picked, logp.dtype.type(0)).astype(logp.dtype, copy=False)
    return _reduced(red._widen(losses), int(valid.sum()), reduction, logp.dtype)


def _nll_backward_kernel(g, logp, target, ignore_index, reduction):
    target = _classes(target)
    if _use_loop(logp):
        dx = np.empty(logp.shape, logp.dtype)
        kernels.normalization.nll_backward(
            target, ignore_index, _row_scales(g, target, ignore_index, reduction, logp.dtype),
            dx)
        return dx
    rows = np.flatnonzero((target != ignore_index) & (target >= 0)
                          & (target < logp.shape[1]))
    scale = _row_scales(g, target, ignore_index, reduction, logp.dtype)
    dx = np.zeros(logp.shape, logp.dtype)
    dx[rows, target[rows]] = -scale[rows]
    return dx


def nll_backward_composite(g, logp, target, ignore_index, reduction):
    """The backward from ops (minus the one-hot targets, scaled): what the second
    derivative differentiates (zero: the loss is linear in ``logp``)."""
    onehot, scale = _composite_targets(g, logp, target, ignore_index, reduction)
    return -onehot * scale


NLL_LOSS = defop("nll_loss", _nll_kernel, _class_loss_rule("nll_loss"),
                 vjp=lambda g, out, logp, target, ignore_index, reduction: (apply(
                     NLL_BACKWARD, g, logp, target, ignore_index=ignore_index,
                     reduction=reduction), None),
                 decomposition=_nll_decomposition, attrs=("ignore_index", "reduction"),
                 saves="i", checks_values=True,
                 onnx=_onnx_class_loss("NegativeLogLikelihoodLoss"),
                 autocast="float32",
                 doc="The negative log-likelihood of log-probabilities (N, C) at class "
                     "indices (N,), ``ignore_index`` rows left out, reduced.")
NLL_BACKWARD = defop(
    "nll_backward", _nll_backward_kernel,
    lambda g, logp, target, ignore_index, reduction: ShapedType(tuple(logp.shape),
                                                                logp.dtype),
    compiler_only=True, decomposition=nll_backward_composite,
    vjp=composite_vjp(nll_backward_composite), attrs=("ignore_index", "reduction"),
    saves="i", onnx=None,
    doc="The gradient of nll_loss with respect to the log-probabilities, for the loss's "
        "gradient g.")


def nll_loss(logp, target, ignore_index: int = -100, reduction: str = "mean"):
    """nll_loss of log-probabilities (N, C) at integer class targets (N,), one op;
    ``F.nll_loss`` calls it when no class weights apply."""
    return apply(NLL_LOSS, logp, target, ignore_index=int(ignore_index),
                 reduction=reduction)


# -- smooth L1 (Huber) ---------------------------------------------------------------------------
def smooth_l1_composite(d, beta: float):
    """The elementwise smooth L1 loss of differences ``d`` from ops: ``0.5 d**2 / beta``
    inside ``|d| < beta``, ``|d| - beta / 2`` outside; ``|d|`` for ``beta=0``."""
    size = ew.abs(d)
    if beta == 0:
        return size
    return ew.where(size < beta, 0.5 * d * d, beta * (size - 0.5 * beta)) / beta


def _reduce_losses(losses, reduction: str):
    """Per-element ``losses`` as ``reduction`` asks, in their dtype (half precision
    accumulated in float32; the mean of none is NaN, as torch's)."""
    if reduction == "none":
        return losses
    total = np.add.reduce(red._widen(losses), axis=None, dtype=None)
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            total = total / losses.size
    return np.asarray(total).astype(losses.dtype)


def _smooth_l1_kernel(x, y, beta, reduction):
    d = x - y
    size = np.abs(d)
    if beta == 0:
        return _reduce_losses(size, reduction)
    half = d.dtype.type(0.5)
    losses = np.where(size < beta, half * d * d / d.dtype.type(beta),
                      size - d.dtype.type(0.5 * beta))
    return _reduce_losses(losses.astype(d.dtype, copy=False), reduction)


def _infer_smooth_l1(x, y, beta, reduction):
    if x.dtype != y.dtype or np.dtype(x.dtype).kind not in "fV":
        raise TypeError(f"smooth_l1_loss: input and target must be floats of one dtype, got "
                        f"{x.dtype} and {y.dtype}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"smooth_l1_loss: reduction must be one of {REDUCTIONS}, got "
                         f"{reduction!r}")
    shape = broadcast_shapes(tuple(x.shape), tuple(y.shape))
    return ShapedType(shape if reduction == "none" else (), x.dtype)


def _smooth_l1_backward_kernel(g, x, y, beta, reduction):
    d = x - y
    slope = np.sign(d) if beta == 0 else np.where(np.abs(d) < beta, d / d.dtype.type(beta),
                                                  np.sign(d))
    if reduction == "mean":
        g = g / d.dtype.type(max(d.size, 1))
    return (slope * g).astype(d.dtype, copy=False)


def smooth_l1_backward_composite(g, x, y, beta, reduction):
    """The gradient of the losses' ``reduction`` with respect to ``d = x - y`` from ops
    (what the second derivative differentiates)."""
    d = x - y
    slope = ew.sign(d)
    if beta != 0:
        slope = ew.where(ew.abs(d) < beta, d / beta, slope)
    if reduction == "mean":
        g = g / max(numel(tuple(d.shape)), 1)
    return slope * g


def _smooth_l1_vjp(g, out, x, y, beta, reduction):
    gd = apply(SMOOTH_L1_BACKWARD, g, x, y, beta=beta, reduction=reduction)
    return (sum_to(gd, tuple(x.shape)) if needs_grad(x) else None,
            -sum_to(gd, tuple(y.shape)) if needs_grad(y) else None)


def _smooth_l1_decomposition(x, y, beta, reduction):
    losses = smooth_l1_composite(x - y, beta)
    if reduction == "none":
        return losses
    return red.mean(losses) if reduction == "mean" else red.sum(losses)


def _onnx_smooth_l1(e, node):
    """Sub, Abs, and (for beta > 0) the two branches and a Where, then the reduction."""
    x, beta = node.inputs[0], node.attrs["beta"]
    d = e.op("Sub", [e.input(0), e.input(1)])
    loss = e.op("Abs", [d])
    if beta != 0:
        quadratic = e.op("Div", [e.op("Mul", [e.op("Mul", [d, d]), e.scalar(0.5, x.dtype)]),
                                 e.scalar(beta, x.dtype)])
        linear = e.op("Sub", [loss, e.scalar(0.5 * beta, x.dtype)])
        loss = e.op("Where", [e.op("Less", [loss, e.scalar(beta, x.dtype)]), quadratic,
                              linear])
    reduction = node.attrs["reduction"]
    if reduction == "none":
        return [loss]
    axes = list(range(len(broadcast_shapes(tuple(x.shape), tuple(node.inputs[1].shape)))))
    return [e.reduce("ReduceMean" if reduction == "mean" else "ReduceSum", loss, axes, False)]


SMOOTH_L1_LOSS = defop("smooth_l1_loss", _smooth_l1_kernel, _infer_smooth_l1,
                       vjp=_smooth_l1_vjp, decomposition=_smooth_l1_decomposition,
                       attrs=("beta", "reduction"), saves="i", onnx=_onnx_smooth_l1,
                       autocast="float32",
                       doc="The smooth L1 loss of input x against target y (same float "
                           "dtype, broadcast), reduced by ``reduction``.")
SMOOTH_L1_BACKWARD = defop(
    "smooth_l1_backward", _smooth_l1_backward_kernel,
    lambda g, x, y, beta, reduction: ShapedType(
        broadcast_shapes(tuple(x.shape), tuple(y.shape)), x.dtype),
    compiler_only=True, decomposition=smooth_l1_backward_composite,
    vjp=composite_vjp(smooth_l1_backward_composite), attrs=("beta", "reduction"),
    saves="i", onnx=None,
    doc="The gradient of smooth_l1_loss(x, y) with respect to x - y, for the loss's "
        "gradient g.")


def smooth_l1_loss(input, target, beta: float = 1.0, reduction: str = "mean"):
    """The smooth L1 loss as one op (see the module docstring); ``F.smooth_l1_loss`` and
    ``F.huber_loss`` call it for float tensors of one dtype."""
    return apply(SMOOTH_L1_LOSS, input, target, beta=float(beta), reduction=reduction)
