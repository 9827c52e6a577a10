"""The common forms of ``dg.nn.functional`` (torch's F): layers, activations and losses.
``functional.py`` gathers them with the less common ones of ``functional_layers.py`` and
``functional_losses.py``, which build on the helpers here.

The op families define the activations, convolutions, pooling, ``linear``, ``softmax``,
``one_hot`` and ``pad``; this module gathers them under torch's names and adds the losses,
normalisations, dropout, embedding lookup and attention (``scaled_dot_product_attention``
and ``multi_head_attention_forward``, whose modules are in nn/attention.py). Everything here
is a composite of registry ops, so it gets autograd, tracing and export for free: a loss is
a few elementwise ops and a reduction, a norm is mean/variance arithmetic, dropout
multiplies by a random mask.

>>> import dualgraph as dg
>>> import dualgraph.nn.functional as F
>>> logits = dg.tensor([[2.0, 0.5, -1.0]])
>>> F.cross_entropy(logits, dg.tensor([0])).item() < 0.3
True
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import dtypes
from .._helpers import user_location
from ..autograd import no_grad
from ..ops import batch_norm as batch_norm_ops
from ..ops import conv as conv_ops, creation, index as index_ops, linalg, reduce as red
from ..ops import loss as loss_ops
from ..ops import elementwise as ew
from ..ops import norm as norm_ops
from ..ops import random as random_ops
from ..ops import shape as shape_ops
from ..ops.conv import *  # noqa: F401,F403
from ..ops.elementwise import *  # noqa: F401,F403
from ..ops.index import *  # noqa: F401,F403
from ..ops.inplace import commit_inplace
from ..ops.linalg import *  # noqa: F401,F403
from ..ops.reduce import *  # noqa: F401,F403
from ..ops.sampling import *  # noqa: F401,F403
from ..ops.shape import *  # noqa: F401,F403
from ..ops.windows import *  # noqa: F401,F403
from ..tensor import Tensor
from .resample import interpolate, pixel_shuffle, pixel_unshuffle, upsample  # noqa: F401

# The star imports above bring torch-style ``sum``, ``max``, ``abs``... into this module;
# the code below always names ops through their family (``red.sum``), never bare.

_REDUCTIONS = ("none", "mean", "sum")


# -- helpers -------------------------------------------------------------------------------------
def _concrete(t):
    """The array behind an eager tensor, or None while tracing (value checks are skipped)."""
    data = t._data
    return data if type(data) is np.ndarray else None


def _shape(t) -> tuple:
    return tuple(t.shape)


def _reduction(size_average, reduce, reduction: str, allowed=_REDUCTIONS) -> str:
    """torch's legacy ``size_average``/``reduce`` flags win over ``reduction`` when given."""
    if size_average is not None or reduce is not None:
        warnings.warn("size_average and reduce args will be deprecated, please use "
                      "reduction='mean', 'sum' or 'none' instead.", stacklevel=3)
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        return "mean" if size_average and reduce else "sum" if reduce else "none"
    if reduction not in allowed:
        raise ValueError(f"{reduction} is not a valid value for reduction; use one of "
                         f"{', '.join(repr(r) for r in allowed)}")
    return reduction


def _reduce(loss, reduction: str):
    if reduction == "mean":
        return red.mean(loss)
    if reduction == "sum":
        return red.sum(loss)
    return loss


def _warn_size(name, input, target):
    if _shape(input) != _shape(target):
        warnings.warn(f"{name}: using a target size ({_shape(target)}) that is different to "
                      f"the input size ({_shape(input)}). This will likely lead to incorrect "
                      "results due to broadcasting. Please ensure they have the same size.",
                      stacklevel=3)


def _weighted(loss, weight, input, reduction, mean_over_weight: bool):
    """Apply torch's elementwise ``weight=`` of the regression losses: the weighted mean is
    divided by the sum of the weights (mse, l1) or by the count (huber)."""
    if weight is None:
        return _reduce(loss, reduction)
    if _shape(weight) != _shape(input):
        raise ValueError(f"Weights and input must have the same size; got weight of shape "
                         f"{_shape(weight)} and input of shape {_shape(input)}")
    loss = loss * weight
    if reduction == "mean" and mean_over_weight:
        return red.sum(loss) / red.sum(weight)
    return _reduce(loss, reduction)


def _per_channel(t, ndim: int):
    """A (C,) tensor shaped to broadcast over dim 1 of an ``ndim``-dim (N, C, ...) input."""
    return None if t is None else shape_ops.reshape(t, (-1,) + (1,) * (ndim - 2))


def _in_dtype_of(y, input):
    """``y`` in ``input``'s dtype where that is half precision: batch norm's statistics run
    in float32 under autocast (and its running buffers are float32), and torch's batch
    norm returns its input's dtype."""
    dt = input._data.dtype
    return ew.cast_to(y, dt) if dt.itemsize == 2 and y._data.dtype != dt else y


def _affine(y, weight, bias):
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


# -- regression losses ---------------------------------------------------------------------------
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean squared error ``(input - target)**2``, reduced by ``reduction``."""
    reduction = _reduction(size_average, reduce, reduction)
    _warn_size("mse_loss", input, target)
    diff = input - target
    return _weighted(diff * diff, weight, input, reduction, mean_over_weight=True)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """Mean absolute error ``|input - target|``."""
    reduction = _reduction(size_average, reduce, reduction)
    _warn_size("l1_loss", input, target)
    return _weighted(ew.abs(input - target), weight, input, reduction, mean_over_weight=True)


def _one_float_dtype(input, target) -> bool:
    """Whether the two are float tensors of one dtype (what the one-op losses take)."""
    return (isinstance(input, Tensor) and isinstance(target, Tensor)
            and input.dtype == target.dtype and input.is_floating_point())


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """Huber loss divided by ``beta``: quadratic below ``beta``, L1 above (``beta=0`` is
    L1). One op (``ops/loss.py``) for float tensors of one dtype."""
    reduction = _reduction(size_average, reduce, reduction)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss does not support negative values for beta, got {beta}")
    _warn_size("smooth_l1_loss", input, target)
    if _one_float_dtype(input, target):
        return loss_ops.smooth_l1_loss(input, target, beta, reduction)
    return _reduce(loss_ops.smooth_l1_composite(input - target, beta), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """Huber loss: quadratic below ``delta``, linear with slope ``delta`` above (``delta``
    times the smooth L1 loss with ``beta=delta``)."""
    reduction = _reduction(None, None, reduction)
    if delta <= 0:
        raise ValueError(f"huber_loss does not support non-positive values for delta, "
                         f"got {delta}")
    _warn_size("huber_loss", input, target)
    if weight is None and _one_float_dtype(input, target):
        return loss_ops.smooth_l1_loss(input, target, delta, reduction) * delta
    return _weighted(loss_ops.smooth_l1_composite(input - target, delta) * delta, weight,
                     input, reduction, mean_over_weight=False)


# -- classification losses -----------------------------------------------------------------------
def _class_dim(name, input, target) -> int:
    """The class dim of ``input`` (1, or 0 for an unbatched (C,) input), after checking that
    class-index ``target`` has the input's shape without it."""
    if input.ndim == 0:
        raise ValueError(f"{name}: input must have a class dim, got a 0-d tensor")
    dim = 0 if input.ndim == 1 else 1
    want = _shape(input)[:dim] + _shape(input)[dim + 1:]
    if _shape(target) != want:
        raise ValueError(f"{name}: for input of shape {_shape(input)} (classes on dim {dim}) "
                         f"expected a target of class indices of shape {want}, got "
                         f"{_shape(target)}")
    if target.is_floating_point() or target.dtype.np.kind not in "iu":
        raise TypeError(f"{name}: class-index targets must be an integer tensor, got "
                        f"{target.dtype!r}")
    return dim


def _check_weight(name, weight, n_classes):
    if weight is not None and _shape(weight) != (n_classes,):
        raise ValueError(f"{name}: weight tensor should be defined either for all "
                         f"{n_classes} classes or no classes but got weight tensor of shape "
                         f"{_shape(weight)}")


def _check_targets(target, n_classes, ignore_index):
    data = _concrete(target)
    if data is None or not data.size:
        return
    bad = data[(data != ignore_index) & ((data < 0) | (data >= n_classes))]
    if bad.size:
        raise IndexError(f"Target {bad.flat[0]} is out of bounds for {n_classes} classes")


def _nll(logp, target, weight, ignore_index, reduction, smoothing=0.0, name="nll_loss"):
    """Negative log-likelihood of class ``target`` under log-probabilities ``logp``, with
    torch's class weights, ``ignore_index`` and label smoothing (a fraction ``smoothing``
    of the loss is the mean over all classes). The 'mean' divides by the total weight of
    the targets that are not ignored."""
    dim = _class_dim(name, logp, target)
    n_classes = logp.shape[dim]
    _check_weight(name, weight, n_classes)
    _check_targets(target, n_classes, ignore_index)
    ignored = ew.eq(target, ignore_index)
    safe = ew.where(ignored, 0, target)   # ignored entries may hold an invalid class
    picked = shape_ops.squeeze(
        index_ops.gather(logp, dim, shape_ops.unsqueeze(safe, dim)), dim)
    if weight is None:
        w = ew.logical_not(ignored).to(logp.dtype)
    else:
        w = ew.where(ignored, 0.0, index_ops.index_dims(weight, [safe], (0,)))
    loss = -picked * w
    if smoothing:
        all_classes = logp if weight is None else logp * shape_ops.reshape(
            weight, (-1,) + (1,) * (logp.ndim - dim - 1))
        smooth = ew.where(ignored, 0.0, -red.sum(all_classes, dim))
        loss = loss * (1 - smoothing) + smooth * (smoothing / n_classes)
    if reduction == "mean":
        return red.sum(loss) / red.sum(w)
    return _reduce(loss, reduction)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log-likelihood of class indices ``target`` given log-probabilities ``input``
    of shape (N, C), (C,) or (N, C, d1, ...); ``weight`` rescales each class."""
    reduction = _reduction(size_average, reduce, reduction)
    if (input.ndim == 2 and weight is None and input.is_floating_point()
            and not target.is_floating_point()):
        _class_dim("nll_loss", input, target)
        return loss_ops.nll_loss(input, target, ignore_index, reduction)
    return _nll(input, target, weight, ignore_index, reduction)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """Cross entropy between the logits ``input`` (N, C), (C,) or (N, C, d1, ...) and
    ``target``: class indices (shape without the class dim), or class probabilities (the
    input's shape, floating). ``label_smoothing`` mixes the target with the uniform
    distribution; ``ignore_index`` applies to class indices.

    >>> import dualgraph as dg
    >>> x = dg.tensor([[0.0, 0.0]])
    >>> f"{cross_entropy(x, dg.tensor([1])).item():.4f}"
    '0.6931'
    """
    reduction = _reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    if input.ndim == 0:
        raise ValueError("cross_entropy: input must have a class dim, got a 0-d tensor")
    dim = 0 if input.ndim == 1 else 1
    if (input.ndim == 2 and not target.is_floating_point() and weight is None
            and not label_smoothing and input.is_floating_point()):
        _class_dim("cross_entropy", input, target)
        return loss_ops.cross_entropy(input, target, ignore_index, reduction)
    logp = red.log_softmax(input, dim)
    if not target.is_floating_point():
        return _nll(logp, target, weight, ignore_index, reduction, label_smoothing,
                    "cross_entropy")
    if _shape(target) != _shape(input):
        raise ValueError(f"cross_entropy: class-probability targets must have the input's "
                         f"shape {_shape(input)}, got {_shape(target)}")
    n_classes = input.shape[dim]
    _check_weight("cross_entropy", weight, n_classes)
    if label_smoothing:
        target = target * (1 - label_smoothing) + label_smoothing / n_classes
    terms = logp * target
    if weight is not None:
        terms = terms * shape_ops.reshape(weight, (-1,) + (1,) * (input.ndim - dim - 1))
    if reduction == "none":
        return -red.sum(terms, dim)
    total = -red.sum(terms)
    return total / (input.numel() // n_classes) if reduction == "mean" else total


def _clamped_log(x, log_fn, valid):
    """``max(log_fn(x), -100)``, NaN-free where ``valid`` is False (log of 0): torch clamps
    the logs of binary cross entropy so a certain wrong prediction costs 100, not inf."""
    safe = ew.where(valid, x, 0.5)
    return ew.clamp_min(ew.where(valid, log_fn(safe), -100.0), -100.0)


def _bce_gradient_shape(p, t):
    """A function of ``p`` whose derivative is torch's gradient of binary cross entropy,
    ``(p - t) / max(p (1 - p), 1e-12)``: ``-(t log p + (1 - t) log(1 - p))`` where
    ``p (1 - p) >= 1e-12`` (its derivative is that quotient; its second derivative torch's
    double backward), ``(p^2 / 2 - t p) / 1e-12`` nearer 0 and 1, where torch caps the
    quotient's denominator (and the clamped logs of the value have no useful slope: a
    certain wrong prediction would get a gradient of 0, or 1/p = 1e30). Its value is never
    used; both branches stay finite, so that where's gradients carry no NaN."""
    near = ew.lt(p.detach() * (1 - p.detach()), _BCE_EPS)
    safe = ew.where(near, 0.5, p)
    inside = -(t * ew.log(safe) + (1 - t) * ew.log1p(-safe))
    return ew.where(near, (p * p * 0.5 - t * p) * (1 / _BCE_EPS), inside)


_BCE_EPS = 1e-12   # torch's cap of the BCE gradient's denominator (EPSILON in Loss.cpp)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """``-(t log(p) + (1 - t) log(1 - p))`` for probabilities ``input``; each log is
    clamped at -100 as in torch. ``weight`` rescales each element (broadcast)."""
    reduction = _reduction(size_average, reduce, reduction)
    if _shape(target) != _shape(input):
        raise ValueError(f"Using a target size ({_shape(target)}) that is different to the "
                         f"input size ({_shape(input)}) is deprecated. Please ensure they "
                         "have the same size.")
    data = _concrete(input)
    if data is not None and data.size and not ((data >= 0) & (data <= 1)).all():
        raise ValueError("binary_cross_entropy: all elements of input should be between 0 "
                         "and 1 (apply sigmoid, or use binary_cross_entropy_with_logits)")
    p = input.detach()
    log_p = _clamped_log(p, ew.log, p > 0)
    log_q = _clamped_log(p, lambda p: ew.log1p(-p), p < 1)
    loss = -(target * log_p + (1 - target) * log_q)   # (the value, and target's gradient)
    if input.requires_grad:   # (plus zero, whose gradient is torch's for the input)
        shaped = _bce_gradient_shape(input, target.detach() if hasattr(target, "detach")
                                     else target)
        loss = loss + (shaped - shaped.detach())
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """Binary cross entropy of ``sigmoid(input)``, computed from the logits without
    overflow: ``(1 + (pos_weight - 1) t) * softplus(x) - pos_weight t x`` (equal to ``(1 -
    t) x + (1 + (pos_weight - 1) t) * softplus(-x)``), whose gradient is torch's
    ``(1 + (pos_weight - 1) t) sigmoid(x) - pos_weight t``, rounded as torch rounds it (the
    ``softplus(-x)`` form's ``1 - t - sigmoid(-x)`` is 0 where torch's is 1e-13, which an
    Adam step turns into a step of lr's size). ``pos_weight`` (broadcast over the last
    dim) weighs the positive class."""
    reduction = _reduction(size_average, reduce, reduction)
    if _shape(target) != _shape(input):
        raise ValueError(f"Target size ({_shape(target)}) must be the same as input size "
                         f"({_shape(input)})")
    # (softplus is x itself past the threshold, its gradient 1: sigmoid(x) rounds to 1
    # past 37 in float64, so 40 keeps every gradient torch's and exp(40) finite)
    soft = ew.softplus(input, threshold=40.0)
    if pos_weight is None:
        loss = soft - target * input
    else:
        loss = soft * ((pos_weight - 1) * target + 1) - pos_weight * target * input
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def _xlogx(t):
    """``t * log(t)`` with 0 at t == 0 (and a finite gradient there)."""
    zero = ew.eq(t, 0)
    return ew.where(zero, 0.0, t * ew.log(ew.where(zero, 1.0, t)))


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Kullback-Leibler divergence ``sum t (log t - input)`` for log-probabilities ``input``
    and probabilities ``target`` (log-probabilities with ``log_target``). ``'batchmean'``
    divides the sum by the batch size (the true KL divergence); ``'mean'`` averages over
    every element, as torch does."""
    reduction = _reduction(size_average, reduce, reduction, _REDUCTIONS + ("batchmean",))
    if log_target:
        loss = ew.exp(target) * (target - input)
    else:
        loss = _xlogx(target) - target * input
    if reduction == "batchmean":
        total = red.sum(loss)
        return total / input.shape[0] if input.ndim else total
    return _reduce(loss, reduction)


# -- normalisation -------------------------------------------------------------------------------
def _standardize(x, dims, eps):
    """``(x - mean) / sqrt(var + eps)`` over ``dims`` with the biased variance; also the
    mean and variance (kept dims)."""
    mean = red.mean(x, dims, keepdim=True)
    centred = x - mean
    var = red.mean(centred * centred, dims, keepdim=True)
    return centred * ew.rsqrt(var + eps), mean, var


def _update_running(buffer, stat, momentum):
    """``buffer = (1 - momentum) * buffer + momentum * stat`` in place, outside autograd
    (``momentum`` may be a 0-d tensor: the cumulative average of BatchNorm(momentum=None))."""
    with no_grad():
        stat = shape_ops.reshape(stat.detach(), _shape(buffer))
        commit_inplace(buffer, buffer * (1 - momentum) + stat * momentum)


def _channel_dims(input, name):
    if input.ndim < 2:
        raise ValueError(f"{name}: expected an input of shape (N, C, ...), got "
                         f"{_shape(input)}")
    return (0,) + tuple(range(2, input.ndim))


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Batch normalisation of ``input`` (N, C, ...) per channel. Training uses the batch's
    statistics and, when running buffers are given, updates them in place with
    ``momentum`` (the variance unbiased, as torch); evaluation uses the running buffers."""
    _channel_dims(input, "batch_norm")
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var are needed when "
                             "training=False")
        # torch's inference form: per channel alpha = weight / sqrt(var + eps) and
        # beta = bias - mean * alpha, then one multiply and one add over the activations
        # (the four passes of (x - mean) * rsqrt(var + eps) * weight + bias were most of
        # an eval-mode CNN's eager time)
        alpha = ew.rsqrt(running_var + eps)
        alpha = alpha if weight is None else alpha * weight
        beta = -running_mean * alpha if bias is None else bias - running_mean * alpha
        y = input * _per_channel(alpha, input.ndim) + _per_channel(beta, input.ndim)
        return _in_dtype_of(y, input)
    count = input.numel() // input.shape[1]
    if count <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got "
                         f"input size {_shape(input)}")
    y, mean, var = batch_norm_ops.batch_norm_train(input, weight, bias, eps)
    if running_mean is not None:
        _update_running(running_mean, mean, momentum)
    if running_var is not None:
        _update_running(running_var, var * (count / (count - 1)), momentum)
    return _in_dtype_of(y, input)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalise each (sample, channel) plane of ``input`` (N, C, ...) by its own statistics;
    running buffers, when given, track their average over the batch."""
    _channel_dims(input, "instance_norm")
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    dims = tuple(range(2, input.ndim))
    count = math.prod(_shape(input)[2:])
    if count <= 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input "
                         f"size {_shape(input)}")
    y, mean, var = _standardize(input, dims, eps)
    if running_mean is not None:
        _update_running(running_mean, red.mean(mean, 0), momentum)
    if running_var is not None:
        _update_running(running_var, red.mean(var, 0) * (count / (count - 1)), momentum)
    y = _affine(y, _per_channel(weight, input.ndim), _per_channel(bias, input.ndim))
    return _in_dtype_of(y, input)


def _normalized_dims(name, input, normalized_shape) -> tuple:
    """The trailing dims that ``normalized_shape`` names, after checking the input ends with
    them."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(
        normalized_shape)
    k = len(shape)
    if input.ndim < k or _shape(input)[input.ndim - k:] != shape:
        raise ValueError(f"{name}: input of shape {_shape(input)} does not end with "
                         f"normalized_shape {shape}")
    return tuple(range(input.ndim - k, input.ndim))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the trailing ``normalized_shape`` dims, then scale and shift."""
    dims = _normalized_dims("layer_norm", input, normalized_shape)
    return norm_ops.layer_norm(input, len(dims), weight, bias, eps)


_MACHINE_EPS = {2: 2.0 ** -10, 4: 2.0 ** -23, 8: 2.0 ** -52}   # by itemsize
_BF16_EPS = 2.0 ** -7


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x**2) + eps)`` over the trailing ``normalized_shape`` dims; ``eps``
    defaults to the machine epsilon of the input's dtype, as torch."""
    dims = _normalized_dims("rms_norm", input, normalized_shape)
    if eps is None:
        dt = input.dtype
        eps = _BF16_EPS if dt.name == "bfloat16" else _MACHINE_EPS[input.element_size()]
    y = input * ew.rsqrt(red.mean(input * input, dims, keepdim=True) + eps)
    return _affine(y, weight, None)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise each sample over groups of ``C / num_groups`` channels (and all positions),
    then scale and shift per channel."""
    _channel_dims(input, "group_norm")
    channels = input.shape[1]
    if channels % num_groups:
        raise ValueError(f"group_norm: the {channels} channels of input of shape "
                         f"{_shape(input)} are not divisible by num_groups={num_groups}")
    # a group's entries are the last dim of (N, groups, -1): its normalisation is a layer
    # norm there (one op and its fused backward, not the seven ops of the composite)
    grouped = shape_ops.reshape(input, (input.shape[0], num_groups, -1))
    y = shape_ops.reshape(norm_ops.layer_norm(grouped, 1, eps=eps), _shape(input))
    return _affine(y, _per_channel(weight, input.ndim), _per_channel(bias, input.ndim))


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``input / max(||input||_p, eps)`` along ``dim``."""
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported; use the return value")
    return input / ew.clamp_min(red.norm(input, p, dim, keepdim=True), eps)


# -- dropout -------------------------------------------------------------------------------------
def _dropout(input, p, training, inplace, lead=None, combine=None):
    """Zero single elements of ``input`` (or whole blocks: one mask entry per position of
    its first ``lead`` dims, broadcast) with probability ``p`` and scale the rest by ``1 /
    (1 - p)`` (one ``dropout`` op each way), or ``combine(input, keep, p)`` them (``keep``
    the 0/1 mask in input's dtype: alpha dropout). The mask is drawn from the global
    generator, so ``dg.manual_seed`` makes it reproducible."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        out = input * 0.0
    elif combine is None:
        out = random_ops.dropout(input, p, lead)
    else:
        keep = (creation.rand(random_ops.mask_shape(_shape(input), lead))
                < (1 - p)).to(input.dtype)
        out = combine(input, keep, p)
    return commit_inplace(input, out) if inplace else out


def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` in training, scaling the rest by
    ``1 / (1 - p)``; the identity when ``training`` is False."""
    return _dropout(input, p, training, inplace)


def _feature_dropout(name, input, p, training, inplace, batched_ndim):
    """Dropout of whole channels of (N, C, *spatial) or unbatched (C, *spatial) input."""
    if input.ndim not in (batched_ndim, batched_ndim - 1):
        raise ValueError(f"{name}: expected a {batched_ndim - 1}-D (unbatched) or "
                         f"{batched_ndim}-D (batched) input, got shape {_shape(input)}")
    return _dropout(input, p, training, inplace, 2 if input.ndim == batched_ndim else 1)


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, L) or (C, L) input with probability ``p``."""
    return _feature_dropout("dropout1d", input, p, training, inplace, 3)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, H, W) or (C, H, W) input with probability ``p``.
    Other ranks warn, as torch's deprecation does, and drop along the first two dims as
    torch's do: a (N, C) input (a recurrent layer's last output) element by element."""
    if input.ndim not in (3, 4) and input.ndim >= 2:
        warnings.warn(f"dropout2d at {user_location()}: got a {input.ndim}-D input "
                      f"{_shape(input)}; dropout2d drops channels of 3-D or 4-D inputs; use "
                      "dropout for this one", stacklevel=2)
        return _dropout(input, p, training, inplace, 2)
    return _feature_dropout("dropout2d", input, p, training, inplace, 4)


# -- embedding -----------------------------------------------------------------------------------
def _check_indices(input):
    # (the range is checked by the lookup, ``index`` with ``nonnegative``: compiled too)
    if input.is_floating_point() or input.dtype.np.kind not in "iu":
        raise TypeError(f"embedding: indices must be an integer tensor, got {input.dtype!r}")


def _renorm_rows(weight, indices, max_norm, norm_type):
    """Scale the rows of ``weight`` that ``indices`` name down to norm ``max_norm``, in place
    and outside autograd (torch's ``embedding_renorm_``)."""
    with no_grad():
        flat = shape_ops.reshape(indices, (-1,))
        rows = index_ops.index_dims(weight, [flat], (0,), nonnegative=True)
        norms = red.norm(rows, norm_type, -1, keepdim=True)
        scale = ew.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        commit_inplace(weight, index_ops.index_put_dims(weight, rows * scale, [flat], (0,)))


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` (num_embeddings, dim) picked by the integer tensor ``input``; the
    row ``padding_idx`` gets no gradient. ``max_norm`` renormalises the rows used, in place.
    ``sparse`` is accepted but the gradient is always dense."""
    num = weight.shape[0]
    _check_indices(input)
    if scale_grad_by_freq:
        raise NotImplementedError("embedding: scale_grad_by_freq=True is not supported")
    if max_norm is not None:
        _renorm_rows(weight, input, max_norm, norm_type)
    out = index_ops.index_dims(weight, [input], (0,), nonnegative=True)
    if padding_idx is None:
        return out
    if padding_idx < 0:
        padding_idx += num
    keep = shape_ops.unsqueeze(ew.ne(input, padding_idx), -1)
    return ew.where(keep, out, out.detach())   # same values; no gradient at padding rows


# -- layers and activations without an op of their own ------------------------------------------
def bilinear(input1, input2, weight, bias=None):
    """``y[..., o] = sum_ij x1[..., i] weight[o, i, j] x2[..., j] + bias[o]``."""
    lead = _shape(input1)[:-1]
    x1 = shape_ops.reshape(input1, (-1, input1.shape[-1]))
    x2 = shape_ops.reshape(input2, (-1, input2.shape[-1]))
    y = linalg.einsum("bi,oij,bj->bo", x1, weight, x2)
    if bias is not None:
        y = y + bias
    return shape_ops.reshape(y, lead + (weight.shape[0],))


def prelu(input, weight):
    """``max(0, x) + weight * min(0, x)`` with one slope, or one per channel (dim 1)."""
    slope = weight if weight.numel() == 1 or input.ndim < 2 else _per_channel(weight,
                                                                              input.ndim)
    return ew.where(input > 0, input, input * slope)


def glu(input, dim=-1):
    """Gated linear unit: the first half of ``dim`` times the sigmoid of the second."""
    if input.shape[dim] % 2:
        raise ValueError(f"glu: halving dim {dim} needs an even size, got shape "
                         f"{_shape(input)}")
    a, b = shape_ops.chunk(input, 2, dim)
    return a * ew.sigmoid(b)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """``softmax(-input, dim)``."""
    return red.softmax(-input, dim, dtype)


def _window(i: int, n: int, out: int) -> slice:
    """Output position ``i``'s input window of adaptive pooling (torch's floor/ceil)."""
    return slice(i * n // out, -(-(i + 1) * n // out))


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max pooling of (N, C, H, W) or (C, H, W) input to a fixed ``output_size`` (an int,
    or a pair whose None entries keep the input's size), as torch's: max_pool2d when the
    sizes divide, else a max over each of torch's uneven windows. ``return_indices`` also
    gives each maximum's flat index into its H*W plane (the first of equal maxima)."""
    hw = tuple(input.shape[-2:])
    sizes = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    out = tuple(hw[a] if sizes[a] is None else int(sizes[a]) for a in range(2))
    if hw[0] % out[0] == 0 and hw[1] % out[1] == 0:
        k = (hw[0] // out[0], hw[1] // out[1])
        if k == (1, 1) and not return_indices:
            return input
        return conv_ops.max_pool2d(input, k, return_indices=return_indices)
    if return_indices:
        return _adaptive_max_with_indices(input, hw, out)
    rows = [red.amax(input[..., _window(i, hw[0], out[0]), :], -2, keepdim=True)
            for i in range(out[0])]
    x = shape_ops.cat(rows, -2)
    return shape_ops.cat([red.amax(x[..., _window(j, hw[1], out[1])], -1, keepdim=True)
                          for j in range(out[1])], -1)


def _adaptive_max_with_indices(input, hw: tuple, out: tuple):
    """Adaptive max pooling's values and flat H*W indices over uneven windows: each window
    flattened, its argmax (the first maximum, in row-major order) gathered."""
    lead = _shape(input)[:-2]
    values, indices = [], []
    for i in range(out[0]):
        rows = _window(i, hw[0], out[0])
        for j in range(out[1]):
            cols = _window(j, hw[1], out[1])
            window = shape_ops.reshape(input[..., rows, cols], lead + (-1,))
            at = red.argmax(window, -1, keepdim=True)
            values.append(index_ops.gather(window, -1, at))
            width = cols.stop - cols.start
            indices.append((at // width + rows.start) * hw[1] + at % width + cols.start)
    shape = lead + out
    return (shape_ops.reshape(shape_ops.cat(values, -1), shape),
            shape_ops.reshape(shape_ops.cat(indices, -1), shape))


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Max pooling of (N, C, L) or (C, L) input to length ``output_size`` (``return_indices``:
    also each maximum's index along L)."""
    size = output_size if isinstance(output_size, int) else output_size[0]
    pooled = adaptive_max_pool2d(shape_ops.unsqueeze(input, -2), (1, size), return_indices)
    if return_indices:
        return tuple(shape_ops.squeeze(t, -2) for t in pooled)
    return shape_ops.squeeze(pooled, -2)


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """A sample of the Gumbel-softmax (concrete) distribution over ``dim``: softmax of
    ``(logits + Gumbel noise) / tau``; ``hard`` gives the one-hot argmax forward with the
    soft sample's gradient (the straight-through estimator)."""
    uniform = creation.rand(*_shape(logits), dtype=logits.dtype)
    gumbels = -ew.log(-ew.log(ew.clamp_min(uniform, eps)) + eps)
    y_soft = red.softmax((logits + gumbels) / tau, dim)
    if not hard:
        return y_soft
    index = red.argmax(y_soft, dim, keepdim=True)
    y_hard = index_ops.scatter(creation.zeros_like(y_soft), dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


def softsign(input):
    """``x / (1 + |x|)``."""
    return input / (ew.abs(input) + 1)


def tanhshrink(input):
    """``x - tanh(x)``."""
    return input - ew.tanh(input)


def threshold(input, threshold, value, inplace=False):
    """``x`` where ``x > threshold``, else ``value``."""
    out = ew.where(input > threshold, input, value)
    return commit_inplace(input, out) if inplace else out


def hardshrink(input, lambd=0.5):
    """``x`` where ``|x| > lambd``, else 0."""
    return ew.where(ew.abs(input) > lambd, input, 0.0)


def softshrink(input, lambd=0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""
    return ew.where(input > lambd, input - lambd,
                    ew.where(input < -lambd, input + lambd, 0.0))


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (broadcast); each norm
    is clamped at ``eps``."""
    n1 = ew.clamp_min(red.norm(x1, 2, dim, keepdim=True), eps)
    n2 = ew.clamp_min(red.norm(x2, 2, dim, keepdim=True), eps)
    return red.sum((x1 / n1) * (x2 / n2), dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` along the last dim."""
    return red.norm(x1 - x2 + eps, p, -1, keepdim=keepdim)


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                          reduction="mean"):
    """``1 - cos`` where ``target`` is 1, ``max(0, cos - margin)`` where it is -1, the
    cosine taken along dim 1 (or the only dim), as torch's."""
    reduction = _reduction(size_average, reduce, reduction)
    cos = cosine_similarity(input1, input2, dim=input1.ndim - 1, eps=1e-8)
    loss = ew.where(target > 0, 1.0 - cos, ew.clamp_min(cos - margin, 0.0))
    return _reduce(loss, reduction)


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):
    """``max(0, -target * (input1 - input2) + margin)``: ``target`` 1 ranks ``input1``
    higher, -1 ranks ``input2`` higher."""
    reduction = _reduction(size_average, reduce, reduction)
    return _reduce(ew.clamp_min(-target * (input1 - input2) + margin, 0.0), reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """``max(0, d(anchor, positive) - d(anchor, negative) + margin)`` with ``d`` the
    ``p``-norm :func:`pairwise_distance`; ``swap`` uses the smaller of the two negative
    distances (the distance swap of Balntas et al.)."""
    reduction = _reduction(size_average, reduce, reduction)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = ew.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(ew.clamp_min(d_pos - d_neg + margin, 0.0), reduction)


# -- the attention core ------------------------------------------------------------------------
def _causal_mask(q_len: int, k_len: int):
    """Bool (q_len, k_len), True where key j may be seen by query i (j <= i, top-left
    aligned, as torch's)."""
    return index_ops.tril(creation.ones(q_len, k_len, dtype=dtypes.bool_))


def _attend(query, key, value, mask, dropout_p: float, scale: float, safe: bool):
    """``softmax(q k^T * scale + mask) v`` over the last two dims, and the weights.

    ``mask`` is None, a bool tensor (True = take part) or a float tensor added to the scores,
    broadcastable to (..., L, S). With ``safe`` a query whose keys are all masked out gets
    zero weights (torch's SDPA) instead of NaN (torch's MHA weights)."""
    scores = linalg.matmul(query, shape_ops.transpose(key, -2, -1)) * scale   # (as users
    # write it: the lowering rule fuse_attention makes one kernel of it)
    if mask is not None and mask.dtype == dtypes.bool_:
        scores = index_ops.masked_fill(scores, ew.logical_not(mask), -math.inf)
    elif mask is not None:
        scores = scores + mask
    if safe and mask is not None:
        # Rows with no visible key: softmax over zeros (no NaN, also in the backward), then
        # zero weights.
        dead = ew.eq(red.amax(scores, -1, keepdim=True), -math.inf)
        weights = ew.where(dead, 0.0, red.softmax(
            ew.where(dead, 0.0, scores), -1))
    else:
        weights = red.softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    return linalg.matmul(weights, value), weights


def _repeat_heads(x, groups: int):
    """(..., H, S, E) -> (..., H * groups, S, E), each head repeated ``groups`` times in place
    (torch's ``repeat_interleave`` on dim -3, for grouped-query attention)."""
    if groups == 1:
        return x
    shape = tuple(x.shape)
    x = shape_ops.expand(shape_ops.unsqueeze(x, -3), shape[:-2] + (groups,) + shape[-2:])
    return shape_ops.reshape(x, shape[:-3] + (shape[-3] * groups,) + shape[-2:])


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``softmax(query @ key^T * scale + mask) @ value``, as torch's
    ``F.scaled_dot_product_attention``: query (..., L, E), key (..., S, E), value (..., S, Ev)
    give (..., L, Ev). ``attn_mask``: bool (True = take part) or float (added to the scores),
    broadcastable to (..., L, S); ``is_causal`` masks key j > query i; ``scale`` defaults to
    1/sqrt(E); ``dropout_p`` drops attention weights (pass 0 in evaluation); with
    ``enable_gqa`` key/value may have fewer heads (dim -3) than query, each shared by a group.

    >>> import dualgraph as dg
    >>> q = dg.randn(2, 4, 6, 8)
    >>> tuple(scaled_dot_product_attention(q, q, q, is_causal=True).shape)
    (2, 4, 6, 8)
    """
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ValueError(f"scaled_dot_product_attention needs query, key and value of at least 2 "
                         f"dims, got {tuple(query.shape)}, {tuple(key.shape)}, "
                         f"{tuple(value.shape)}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: query {tuple(query.shape)}, key "
                         f"{tuple(key.shape)} and value {tuple(value.shape)} do not fit: "
                         "query and key need the same last dim, key and value the same "
                         "sequence length (dim -2)")
    if is_causal and attn_mask is not None:
        raise RuntimeError("scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True")
    if enable_gqa and key.ndim >= 3 and query.ndim >= 3:
        heads, kv_heads = query.shape[-3], key.shape[-3]
        if heads % kv_heads or value.shape[-3] != kv_heads:
            raise ValueError(f"enable_gqa: the {heads} query heads must be a multiple of the "
                             f"{kv_heads} key/value heads (key {tuple(key.shape)}, value "
                             f"{tuple(value.shape)})")
        key = _repeat_heads(key, heads // kv_heads)
        value = _repeat_heads(value, heads // kv_heads)
    if attn_mask is not None and not (attn_mask.dtype == dtypes.bool_
                                      or attn_mask.is_floating_point()):
        raise TypeError(f"attn_mask must be bool or float, got {attn_mask.dtype}")
    mask = _causal_mask(query.shape[-2], key.shape[-2]) if is_causal else attn_mask
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    # (a causal mask leaves every query its first key: no row needs the fully-masked guard)
    return _attend(query, key, value, mask, dropout_p, scale, safe=not is_causal)[0]


# -- multi-head attention ----------------------------------------------------------------------
def _float_mask(mask, name: str, dtype):
    """torch's ``_canonical_mask``: a bool mask (True = masked out) becomes 0 / -inf of
    ``dtype``; a float mask is returned as is."""
    if mask is None or mask.is_floating_point():
        return mask
    if mask.dtype != dtypes.bool_:
        raise TypeError(f"only bool and floating types of {name} are supported, got "
                        f"{mask.dtype}")
    return index_ops.masked_fill(creation.zeros(*mask.shape, dtype=dtype), mask, -math.inf)


def _pad_key(mask):
    """A float mask with one more key column (0 = visible), for bias_k / add_zero_attn."""
    return None if mask is None else index_ops.pad(mask, (0, 1))


def _split_heads(x, batch: int, heads: int):
    """(S, B, E) -> (B, heads, S, E / heads)."""
    x = shape_ops.reshape(x, (x.shape[0], batch, heads, x.shape[-1] // heads))
    return shape_ops.permute(x, (1, 2, 0, 3))


def _check_attn_mask(attn_mask, tgt_len: int, src_len: int, batch: int, heads: int):
    """The (L, S) or (B * heads, L, S) mask reshaped to broadcast over (B, heads, L, S)."""
    if attn_mask.ndim == 2:
        if tuple(attn_mask.shape) != (tgt_len, src_len):
            raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, "
                               f"but should be {(tgt_len, src_len)}.")
        return attn_mask
    if attn_mask.ndim == 3:
        if tuple(attn_mask.shape) != (batch * heads, tgt_len, src_len):
            raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, "
                               f"but should be {(batch * heads, tgt_len, src_len)}.")
        return shape_ops.reshape(attn_mask, (batch, heads, tgt_len, src_len))
    raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")


def _map_same(fn, *tensors):
    """``fn`` of each tensor, computed once per object: tensors that were the same object
    stay the same object (self-attention is recognised by identity, as in torch)."""
    done = {}
    for t in tensors:
        if id(t) not in done:
            done[id(t)] = fn(t)
    return tuple(done[id(t)] for t in tensors)


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """torch's ``F.multi_head_attention_forward`` for sequence-first input: query (L, B, E),
    key (S, B, kdim), value (S, B, vdim), or unbatched without the B dim. Returns
    ``(attn_output, attn_weights)``; weights are (B, L, S) averaged over heads, (B, heads,
    L, S) with ``average_attn_weights=False``, or None without ``need_weights``."""
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k / static_v are not "
                                  "supported")
    batched = query.ndim == 3
    if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
        raise AssertionError(f"query, key and value must all be 3-D (batched) or 2-D "
                             f"(unbatched), got {tuple(query.shape)}, {tuple(key.shape)}, "
                             f"{tuple(value.shape)}")
    if not batched:
        query, key, value = _map_same(lambda t: shape_ops.unsqueeze(t, 1), query, key, value)
        if key_padding_mask is not None:
            key_padding_mask = shape_ops.unsqueeze(key_padding_mask, 0)
    tgt_len, batch, embed_dim = query.shape
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but "
                             f"got {embed_dim}")
    if embed_dim % num_heads:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if tuple(key.shape[:2]) != tuple(value.shape[:2]):
        raise AssertionError(f"key's sequence and batch dims {tuple(key.shape[:2])} do not "
                             f"match value's {tuple(value.shape[:2])}")
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                           "Transformer module method `generate_square_subsequent_mask` to "
                           "create this mask.")
    key_padding_mask = _float_mask(key_padding_mask, "key_padding_mask", query.dtype)
    # torch: with only the causal hint and no weights wanted, attend causally (same result)
    causal = is_causal and key_padding_mask is None and not need_weights
    attn_mask = None if causal else _float_mask(attn_mask, "attn_mask", query.dtype)

    if not use_separate_proj_weight and query is key and key is value:
        # self-attention: one matmul with the packed weights
        q, k, v = shape_ops.chunk(linalg.linear(query, in_proj_weight, in_proj_bias), 3, -1)
    else:
        weights = ((q_proj_weight, k_proj_weight, v_proj_weight) if use_separate_proj_weight
                   else shape_ops.chunk(in_proj_weight, 3))
        biases = (None,) * 3 if in_proj_bias is None else shape_ops.chunk(in_proj_bias, 3)
        q, k, v = (linalg.linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))

    src_len = key.shape[0]
    if attn_mask is not None:
        attn_mask = _check_attn_mask(attn_mask, tgt_len, src_len, batch, num_heads)
    if bias_k is not None and bias_v is not None:
        k = shape_ops.cat([k, shape_ops.expand(bias_k, (1, batch, embed_dim))])
        v = shape_ops.cat([v, shape_ops.expand(bias_v, (1, batch, embed_dim))])
        attn_mask, key_padding_mask = _pad_key(attn_mask), _pad_key(key_padding_mask)
    elif bias_k is not None or bias_v is not None:
        raise AssertionError("bias_k and bias_v must be given together")
    q, k, v = (_split_heads(t, batch, num_heads) for t in (q, k, v))
    if add_zero_attn:
        zeros = creation.zeros(batch, num_heads, 1, k.shape[-1], dtype=k.dtype)
        k, v = shape_ops.cat([k, zeros], 2), shape_ops.cat([v, zeros], 2)
        attn_mask, key_padding_mask = _pad_key(attn_mask), _pad_key(key_padding_mask)
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (batch, k.shape[2]):
            raise AssertionError(f"Expected key_padding_mask of shape {(batch, k.shape[2])}, "
                                 f"got {tuple(key_padding_mask.shape)}")
        key_padding_mask = shape_ops.reshape(key_padding_mask, (batch, 1, 1, k.shape[2]))
        attn_mask = key_padding_mask if attn_mask is None else attn_mask + key_padding_mask
    if causal:
        attn_mask = _causal_mask(tgt_len, k.shape[2])
    out, weights = _attend(q, k, v, attn_mask, dropout_p if training else 0.0,
                           1.0 / math.sqrt(q.shape[-1]), safe=not need_weights)
    out = shape_ops.reshape(shape_ops.permute(out, (2, 0, 1, 3)), (tgt_len, batch, embed_dim))
    out = linalg.linear(out, out_proj_weight, out_proj_bias)
    if not need_weights:
        weights = None
    elif average_attn_weights:
        weights = red.mean(weights, 1)
    if not batched:
        out = shape_ops.squeeze(out, 1)
        weights = None if weights is None else shape_ops.squeeze(weights, 0)
    return out, weights
