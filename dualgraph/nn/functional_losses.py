"""The less common losses of ``torch.nn.functional``, as composites of registry ops: margin
losses (soft margin, multi-class and multi-label margins, hinge embedding, a triplet loss
over any distance), the Gaussian and Poisson negative log-likelihoods and CTC. Each follows
torch's formula, reductions and shape rules, so a program that calls one gets torch's
values and gradients; ``dg.nn.functional`` exports them under torch's names."""
from __future__ import annotations

import math

from ..ops import creation, ctc, elementwise as ew, reduce as red, shape as shape_ops
from ..tensor import Tensor
from .functional_core import _REDUCTIONS, _concrete, _reduce, _reduction, _shape, pairwise_distance

__all__ = ["soft_margin_loss", "multilabel_soft_margin_loss", "multi_margin_loss",
           "multilabel_margin_loss", "hinge_embedding_loss", "triplet_margin_with_distance_loss",
           "gaussian_nll_loss", "poisson_nll_loss", "ctc_loss"]


def _one_hot_mask(classes, n: int):
    """Booleans (*classes.shape, n): True at each entry's class."""
    return ew.eq(shape_ops.unsqueeze(classes, -1), creation.arange(n))


def _check_same_shape(name, input, target):
    if _shape(input) != _shape(target):
        raise ValueError(f"{name}: input of shape {_shape(input)} and target of shape "
                         f"{_shape(target)} must have the same shape")


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``log(1 + exp(-target * input))`` (targets in {-1, 1}), a logistic loss."""
    _check_same_shape("soft_margin_loss", input, target)
    return _reduce(ew.softplus(-(target * input)), _reduction(size_average, reduce, reduction))


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    """Binary cross-entropy with logits per class of (N, C) input and 0/1 targets,
    (optionally weighted per class) averaged over the classes, then reduced over N."""
    _check_same_shape("multilabel_soft_margin_loss", input, target)
    loss = -(target * ew.logsigmoid(input) + (1 - target) * ew.logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = red.sum(loss, input.ndim - 1) / input.shape[-1]
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def _class_targets(name, input, target):
    if input.ndim not in (1, 2) or target.ndim != input.ndim - 1 or (
            input.ndim == 2 and target.shape[0] != input.shape[0]):
        raise ValueError(f"{name}: expected (N, C) input with (N,) targets or (C,) input with "
                         f"a 0-d target, got input {_shape(input)} and target {_shape(target)}")


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """The multi-class hinge loss: for each sample, ``sum over classes i != y of
    max(0, margin - x[y] + x[i]) ** p / C`` (times ``weight[y]``)."""
    if p not in (1, 2):
        raise ValueError(f"multi_margin_loss: only p == 1 and p == 2 are supported, got {p}")
    _class_targets("multi_margin_loss", input, target)
    is_target = _one_hot_mask(target, input.shape[-1])
    picked = red.sum(ew.where(is_target, input, 0.0), -1, keepdim=True)
    hinge = ew.relu(margin - picked + input)
    if p == 2:
        hinge = hinge * hinge
    if weight is not None:
        hinge = hinge * shape_ops.unsqueeze(weight[target], -1)
    loss = red.sum(ew.where(is_target, 0.0, hinge), -1) / input.shape[-1]
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """The multi-label hinge loss: ``target`` holds each sample's class indices, ended by
    the first -1; every (target class j, other class i) pair adds
    ``max(0, 1 - (x[j] - x[i])) / C``."""
    _check_same_shape("multilabel_margin_loss", input, target)
    c = input.shape[-1]
    listed = red.cumprod(ew.ne(target, -1).to(input.dtype), -1) > 0   # before the first -1
    # (the -1 ending the list, and what follows it, point at no class)
    classes = ew.where(listed, target, c)
    is_target = red.sum(_one_hot_mask(classes, c + 1).to(input.dtype), -2)[..., :c] > 0
    margins = ew.relu(1.0 - (shape_ops.unsqueeze(input, -1) - shape_ops.unsqueeze(input, -2)))
    pairs = shape_ops.unsqueeze(is_target, -1) & ~shape_ops.unsqueeze(is_target, -2)
    loss = red.sum(ew.where(pairs, margins, 0.0), (-2, -1)) / c
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """``x`` where the target is 1, ``max(0, margin - x)`` where it is -1."""
    hinge = ew.where(ew.ne(target, 1), ew.relu(margin - input), 0.0)
    loss = hinge + ew.where(ew.ne(target, -1), input, 0.0)
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    """``max(0, margin + d(anchor, positive) - d(anchor, negative))`` for any distance
    ``d`` (default: the pairwise Euclidean distance); ``swap`` takes the smaller of
    ``d(anchor, negative)`` and ``d(positive, negative)``."""
    if margin <= 0:
        raise ValueError(f"triplet_margin_with_distance_loss: margin must be greater than 0, "
                         f"got {margin}")
    distance = distance_function if distance_function is not None else pairwise_distance
    near, far = distance(anchor, positive), distance(anchor, negative)
    if swap:
        far = ew.minimum(far, distance(positive, negative))
    return _reduce(ew.relu(margin + near - far), _reduction(None, None, reduction))


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """The negative log-likelihood of ``target`` under N(input, var):
    ``0.5 * (log(var) + (input - target) ** 2 / var)`` (+ ``0.5 * log(2 pi)`` if ``full``).
    ``var`` has input's shape, or one dim fewer, or a last dim of 1 (one variance a sample);
    it is clamped at ``eps`` for the value only (the gradient passes as torch's does)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if _shape(var) != _shape(input):
        if _shape(input)[:-1] == _shape(var):
            var = shape_ops.unsqueeze(var, -1)
        elif not (_shape(input)[:-1] == _shape(var)[:-1] and var.shape[-1] == 1):
            raise ValueError(f"gaussian_nll_loss: var of shape {_shape(var)} fits neither "
                             f"input's shape {_shape(input)}, nor it without its last dim, "
                             "nor it with a last dim of 1")
    concrete = _concrete(var)
    if concrete is not None and (concrete < 0).any():
        raise ValueError("gaussian_nll_loss: var has negative entry/entries")
    var = var + (ew.maximum(var, eps) - var).detach()   # (clamped value, identity gradient)
    loss = 0.5 * (ew.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """The Poisson negative log-likelihood: ``exp(input) - target * input`` for a log rate
    (``log_input``), else ``input - target * log(input + eps)``; ``full`` adds Stirling's
    approximation of ``log(target!)`` where ``target > 1``."""
    if log_input:
        loss = ew.exp(input) - target * input
    else:
        loss = input - target * ew.log(input + eps)
    if full:
        safe = ew.where(target > 1, target, 1.0)
        stirling = safe * ew.log(safe) - safe + 0.5 * ew.log(2 * math.pi * safe)
        loss = loss + ew.where(target > 1, stirling, 0.0)
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """The connectionist temporal classification loss of log-probabilities (T, N, C) (or
    (T, C) for one sample) against targets padded (N, S) or concatenated, with each
    sample's input and target lengths (tensors or sequences of ints). ``mean`` divides each
    sample's loss by its target length (at least 1) before averaging, as torch does."""
    reduction = _reduction(None, None, reduction)
    unbatched = log_probs.ndim == 2
    if unbatched:
        log_probs, targets = log_probs.unsqueeze(1), targets.reshape(1, -1)
    lengths = [(v.long() if isinstance(v, Tensor) else creation.as_tensor(v, dtype="int64"))
               .reshape(-1) for v in (input_lengths, target_lengths)]
    losses = ctc.ctc_loss(log_probs, targets, *lengths, blank, zero_infinity)
    if reduction == "mean":
        return red.mean(losses / ew.clamp_min(lengths[1], 1).to(losses.dtype))
    if unbatched and reduction == "none":
        return losses.reshape(())
    return _reduce(losses, reduction)
