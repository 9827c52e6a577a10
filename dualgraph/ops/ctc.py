"""Connectionist temporal classification (CTC): the negative log-likelihood of a label
sequence summed over every alignment of it to the frames of an input, as one op.

``ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)`` takes
log-probabilities (T, N, C), targets either padded (N, S) or concatenated (sum of the
target lengths,), and the lengths of each sample's input and target; it returns each
sample's loss (N,). ``F.ctc_loss`` reduces them as torch does.

The forward runs the alpha recursion of Graves et al. (2006) over the extended label
sequence (a blank before, between and after the labels: 2S + 1 positions) in log space,
every sample of the batch and every position at once, one time step a pass. When the
gradient is asked for (``gradient=True``: the log-probabilities require grad), the op also
runs the beta recursion the same way, which gives the posterior of each extended position
at each frame; summed per class, minus it is the gradient of the loss with respect to the
log-probabilities. The op keeps it, so its backward is a product with the losses'
gradient; a second derivative is refused, as torch refuses it. (torch's own backward adds
``exp(log_probs)``, the gradient through the log-softmax it assumes came before; the two agree on every normalised input, where the
log-softmax's or log's backward removes that term.) Frames past a sample's input length get
no gradient. A sample with no alignment (input shorter than its target needs) has an
infinite loss and NaN gradients, or zero for both with ``zero_infinity``, as in torch.
Sums run in float64 and the results are cast to the input's dtype.
"""
from __future__ import annotations

import numpy as np

from ..autograd.tape import grad_mode
from ..dispatch import apply
from ..shapes import ShapedType, ShapeError
from .opdef import defop

__all__: list = []


def _lengths(values, n: int, what: str) -> np.ndarray:
    lengths = np.asarray(values, dtype=np.int64).reshape(-1)
    if lengths.shape != (n,):
        raise ValueError(f"ctc_loss: {what} must have one entry per sample ({n}), got shape "
                         f"{tuple(np.shape(values))}")
    return lengths


def _extended(log_probs, targets, input_lengths, target_lengths, blank: int):
    """The extended labels (N, L) of every sample (blank at even positions, padding as
    blank), which positions are real (N, L), where a label may be skipped to from two back
    (N, L), and the lengths, checked as torch checks them."""
    frames, n, classes = log_probs.shape
    inputs = _lengths(input_lengths, n, "input_lengths")
    lengths = _lengths(target_lengths, n, "target_lengths")
    if not 0 <= blank < classes:
        raise ValueError(f"ctc_loss: blank must be in [0, {classes}), got {blank}")
    if (inputs < 0).any() or (inputs > frames).any():
        raise ValueError(f"ctc_loss: input_lengths must be in [0, {frames}] (the input has "
                         f"{frames} frames), got {inputs.tolist()}")
    if (lengths < 0).any():
        raise ValueError(f"ctc_loss: target_lengths must be >= 0, got {lengths.tolist()}")
    targets = np.asarray(targets, dtype=np.int64)
    longest = int(lengths.max(initial=0))
    labels = np.full((n, longest), blank, np.int64)
    if targets.ndim == 1:   # concatenated
        if targets.shape[0] < lengths.sum():
            raise ValueError(f"ctc_loss: the concatenated targets hold {targets.shape[0]} "
                             f"labels, target_lengths sum to {int(lengths.sum())}")
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        for i in range(n):
            labels[i, :lengths[i]] = targets[starts[i]:starts[i] + lengths[i]]
    else:
        if targets.ndim != 2 or targets.shape[0] != n or targets.shape[1] < longest:
            raise ValueError(f"ctc_loss: padded targets must be (N, S) with N = {n} and S >= "
                             f"the longest target length {longest}, got {targets.shape}")
        labels[:] = np.where(np.arange(longest) < lengths[:, None], targets[:, :longest],
                             blank)
    real = np.arange(longest) < lengths[:, None]
    if ((labels < 0) | (labels >= classes))[real].any():
        raise IndexError(f"ctc_loss: a target label is outside [0, {classes})")
    ext = np.full((n, 2 * longest + 1), blank, np.int64)
    ext[:, 1::2] = labels
    valid = np.arange(2 * longest + 1) < 2 * lengths[:, None] + 1
    skip = np.zeros(ext.shape, bool)
    skip[:, 3::2] = (labels[:, 1:] != labels[:, :-1]) & (labels[:, 1:] != blank)
    return ext, valid, skip, inputs, lengths


def _logsumexp3(a, b, c):
    top = np.maximum(np.maximum(a, b), c)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return safe + np.log(np.exp(a - safe) + np.exp(b - safe) + np.exp(c - safe))


def _shifted(a, by: int):
    """``a`` moved ``by`` positions along its last axis, -inf coming in."""
    out = np.full_like(a, -np.inf)
    if by > 0:
        out[..., by:] = a[..., :-by]
    else:
        out[..., :by] = a[..., -by:]
    return out


def _picked(log_probs, ext):
    """log_probs of each sample's extended labels, (T, N, L), in float64."""
    return np.take_along_axis(log_probs.astype(np.float64), ext[None], axis=2)


def _alphas(lp, skip, valid):
    """The forward variables (T, N, L) in log space."""
    frames = lp.shape[0]
    alpha = np.full(lp.shape, -np.inf)
    alpha[0, :, :2] = lp[0, :, :2]
    alpha[0][~valid] = -np.inf
    for t in range(1, frames):
        prev = alpha[t - 1]
        two_back = np.where(skip, _shifted(prev, 2), -np.inf)
        alpha[t] = _logsumexp3(prev, _shifted(prev, 1), two_back) + lp[t]
        alpha[t][~valid] = -np.inf
    return alpha


def _losses(alpha, inputs, lengths):
    """Each sample's negative log-likelihood from its forward variables at its last frame."""
    n = alpha.shape[1]
    last = alpha[np.maximum(inputs - 1, 0), np.arange(n)]   # (N, L)
    end = last[np.arange(n), 2 * lengths]
    before = np.where(lengths > 0, last[np.arange(n), np.maximum(2 * lengths - 1, 0)], -np.inf)
    loss = -np.logaddexp(end, before)
    return np.where(inputs > 0, loss, np.where(lengths == 0, 0.0, np.inf))


def _betas(lp, skip, valid, inputs, lengths):
    """The backward variables (T, N, L) in log space (each includes its own frame's
    log-probability); -inf from a sample's input length on."""
    frames, n, _ = lp.shape
    beta = np.full(lp.shape, -np.inf)
    skip_from = _shifted(skip, -2)   # position s may go to s + 2
    for t in range(frames - 1, -1, -1):
        if t + 1 < frames:
            nxt = beta[t + 1]
            two_on = np.where(skip_from, _shifted(nxt, -2), -np.inf)
            beta[t] = _logsumexp3(nxt, _shifted(nxt, -1), two_on) + lp[t]
        ends = np.flatnonzero(inputs - 1 == t)
        beta[t, ends] = -np.inf
        beta[t, ends, 2 * lengths[ends]] = lp[t, ends, 2 * lengths[ends]]
        has_label = ends[lengths[ends] > 0]
        beta[t, has_label, 2 * lengths[has_label] - 1] = lp[t, has_label,
                                                           2 * lengths[has_label] - 1]
        beta[t][~valid | (t >= inputs)[:, None]] = -np.inf
    return beta


def _ctc_kernel(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity,
                gradient):
    ext, valid, skip, inputs, lengths = _extended(log_probs, targets, input_lengths,
                                                  target_lengths, blank)
    lp = _picked(log_probs, ext)
    with np.errstate(invalid="ignore", over="ignore"):
        alpha = _alphas(lp, skip, valid)
        nll = _losses(alpha, inputs, lengths)
        grad = (_posterior_gradient(alpha, _betas(lp, skip, valid, inputs, lengths), lp, nll,
                                    ext, log_probs.shape[2], zero_infinity)
                if gradient else np.zeros(0))
    loss = np.where(np.isinf(nll), 0.0, nll) if zero_infinity else nll
    return loss.astype(log_probs.dtype), grad.astype(log_probs.dtype)


def _posterior_gradient(alpha, beta, lp, nll, ext, classes, zero_infinity):
    """Minus each class's posterior at each frame (T, N, C): the gradient of each sample's
    loss with respect to the log-probabilities."""
    n, width = ext.shape
    # each extended position's posterior at each frame (alpha and beta both hold the frame's
    # own probability once)
    reached = np.isfinite(alpha) & np.isfinite(beta)
    posterior = np.exp(np.where(reached, alpha + beta - lp + nll[:, None], -np.inf))
    onehot = np.zeros((n, width, classes))
    onehot[np.arange(n)[:, None], np.arange(width), ext] = 1.0
    grad = -np.einsum("tnl,nlc->tnc", posterior, onehot)
    grad[:, np.isinf(nll)] = 0.0 if zero_infinity else np.nan   # (no alignment)
    return grad


def _infer_ctc(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity,
               gradient):
    if log_probs.ndim != 3 or log_probs.dtype.kind != "f":
        raise ShapeError(f"ctc_loss: log_probs must be floating (T, N, C), got "
                         f"{tuple(log_probs.shape)} {log_probs.dtype}")
    grad_shape = tuple(log_probs.shape) if gradient else (0,)
    return (ShapedType((log_probs.shape[1],), log_probs.dtype),
            ShapedType(grad_shape, log_probs.dtype))


def _ctc_vjp(g, out, log_probs, *rest, blank, zero_infinity, gradient):
    if grad_mode.enabled:   # (create_graph: the kept gradient has no derivative of its own)
        raise RuntimeError("ctc_loss: a second derivative (create_graph=True through the CTC "
                           "loss) is not supported, as in torch")
    return (out[1] * g[0].reshape(1, -1, 1), None, None, None)


CTC_LOSS = defop("ctc_loss", _ctc_kernel, _infer_ctc, vjp=_ctc_vjp,
                 attrs=("blank", "zero_infinity", "gradient"), num_outputs=2, saves="o",
                 saved_outputs=(1,), differentiable_outputs=(0,), checks_values=True,
                 onnx=None,
                 doc="Each sample's CTC loss (N,) from log-probabilities (T, N, C), padded "
                     "(N, S) or concatenated targets, input and target lengths; with "
                     "``gradient``, also the losses' gradient with respect to the "
                     "log-probabilities (T, N, C), which the backward scales.")


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank: int = 0,
             zero_infinity: bool = False):
    """Each sample's CTC loss (N,), one op (see the module docstring); ``F.ctc_loss``
    reduces it."""
    gradient = bool(grad_mode.enabled and log_probs.requires_grad)
    return apply(CTC_LOSS, log_probs, targets, input_lengths, target_lengths,
                 blank=int(blank), zero_infinity=bool(zero_infinity), gradient=gradient)[0]
