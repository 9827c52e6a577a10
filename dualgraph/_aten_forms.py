"""torch's top-level spellings of functions that live elsewhere, with torch's own arguments.

Real code calls ``torch.layer_norm(x, (d,), w, b, 1e-5, True)``, ``torch.embedding(weight,
ids)`` (the weight first), ``torch.batch_norm(x, w, b, mean, var, training, momentum, eps,
cudnn)`` (the weight before the running statistics) and the losses with ``reduction`` as
torch's enum (0 none, 1 mean, 2 sum): the signatures of torch's C++ functions, which differ
from ``nn.functional``'s. Each function here takes those arguments and calls the op or
composition dualgraph already has, so gradients, capture and export are theirs. The rest are
queries and small compositions with no op of their own: ``is_same_size``, ``is_nonzero``,
``rsub``, ``range`` (the end included), ``unravel_index``, ``vander``, ``gradient``
(NumPy's central differences), the ``*_scatter`` ops (a copy with a view of it written),
and, for dualgraph's real dtypes, ``real`` / ``conj`` /
``resolve_conj`` / ``resolve_neg`` (the tensor itself, as torch's are for real tensors) and
``is_complex`` (False).

>>> import dualgraph as dg
>>> dg.rsub(dg.tensor([1.0, 2.0]), 10.0)
tensor([9., 8.])
>>> dg.range(0, 1, 0.5)
tensor([0.0000, 0.5000, 1.0000])
"""
from __future__ import annotations

import builtins
import math
import warnings

import numpy as np

from . import dtypes
from .amp import get_autocast_dtype, is_autocast_enabled
from .autograd.tape import grad_mode, set_detect_anomaly
from .nn import functional as F
from .nn.functional import _REDUCTIONS as REDUCTION_ENUM   # torch's enum: 0, 1, 2
from . import shapes
from .ops import creation, elementwise as ew, linalg, reduce as red, shape as shape_ops
from .ops.index import nonzero
from .ops.inplace import inplace
from .tensor import Tensor

pdist = F.pdist

__all__ = ["layer_norm", "group_norm", "batch_norm", "instance_norm", "rms_norm", "embedding",
           "dropout", "feature_alpha_dropout", "binary_cross_entropy_with_logits", "kl_div",
           "cosine_embedding_loss", "hinge_embedding_loss", "margin_ranking_loss",
           "poisson_nll_loss", "triplet_margin_loss", "ctc_loss", "pdist", "constant_pad_nd",
           "max_pool1d_with_indices", "adaptive_max_pool1d", "rsub", "scalar_tensor", "fill",
           "range", "split_with_sizes", "argwhere", "unravel_index", "chain_matmul", "addbmm",
           "select_scatter", "slice_scatter", "diagonal_scatter",
           "vander", "gradient", "ldexp", "randint_like", "empty_strided", "is_same_size",
           "is_nonzero", "is_signed", "is_complex", "is_conj", "is_neg", "real", "conj",
           "resolve_conj", "resolve_neg", "is_anomaly_enabled", "set_anomaly_enabled",
           "get_default_device", "set_default_device", "adjoint", "asarray", "histogram",
           "typename", "get_num_interop_threads", "set_num_interop_threads",
           "set_flush_denormal", "set_warn_always", "is_warn_always_enabled",
           "is_autocast_cpu_enabled", "get_autocast_cpu_dtype"]



def _reduction(reduction) -> str:
    """torch's enum (or the name ``nn.functional`` takes) as the name."""
    if isinstance(reduction, str) and reduction in REDUCTION_ENUM:
        return reduction
    if isinstance(reduction, int) and 0 <= reduction < len(REDUCTION_ENUM):
        return REDUCTION_ENUM[reduction]
    raise ValueError(f"reduction={reduction!r}: expected 0 (none), 1 (mean) or 2 (sum)")


# --- norms, embedding, dropout: torch's argument orders -------------------------------------

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    """``torch.layer_norm``: ``F.layer_norm`` (``cudnn_enable`` has no effect)."""
    return F.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    """``torch.group_norm``: ``F.group_norm``."""
    return F.group_norm(input, num_groups, weight, bias, eps)


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
               cudnn_enabled):
    """``torch.batch_norm``: the weight and bias come before the running statistics."""
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum,
                        eps)


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
                  eps, cudnn_enabled):
    """``torch.instance_norm``: the weight and bias come before the running statistics."""
    return F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats,
                           momentum, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``torch.rms_norm``: ``F.rms_norm``."""
    return F.rms_norm(input, normalized_shape, weight, eps)


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """``torch.embedding``: the table first; a negative ``padding_idx`` is none (torch's
    ``F.embedding`` passes a negative index already counted from the end)."""
    return F.embedding(indices, weight, None if padding_idx < 0 else padding_idx,
                       scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def dropout(input, p, train):
    """``torch.dropout(input, p, train)``."""
    return F.dropout(input, p, training=train)


def feature_alpha_dropout(input, p, train):
    """``torch.feature_alpha_dropout(input, p, train)``."""
    return F.feature_alpha_dropout(input, p, training=train)


# --- losses: the reduction as torch's enum -------------------------------------------------

def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None,
                                     reduction=1):
    return F.binary_cross_entropy_with_logits(input, target, weight, pos_weight=pos_weight,
                                              reduction=_reduction(reduction))


def kl_div(input, target, reduction=1, *, log_target=False):
    """``torch.kl_div``: reduction 1 is the mean over every element (``F.kl_div``'s
    ``"mean"``, not ``"batchmean"``)."""
    return F.kl_div(input, target, reduction=_reduction(reduction), log_target=log_target)


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=1):
    return F.cosine_embedding_loss(input1, input2, target, margin,
                                   reduction=_reduction(reduction))


def hinge_embedding_loss(input, target, margin=1.0, reduction=1):
    return F.hinge_embedding_loss(input, target, margin, reduction=_reduction(reduction))


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=1):
    return F.margin_ranking_loss(input1, input2, target, margin,
                                 reduction=_reduction(reduction))


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    return F.poisson_nll_loss(input, target, log_input, full, eps=eps,
                              reduction=_reduction(reduction))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False,
                        reduction=1):
    return F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                 reduction=_reduction(reduction))


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
             zero_infinity=False):
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
                      _reduction(reduction), zero_infinity)


def constant_pad_nd(input, pad, value=0):
    """``torch.constant_pad_nd``: ``F.pad`` with a constant."""
    return F.pad(input, pad, "constant", value)


def max_pool1d_with_indices(input, kernel_size, stride=(), padding=0, dilation=1,
                            ceil_mode=False):
    """``torch.max_pool1d_with_indices``: the values and their indices."""
    return F.max_pool1d_with_indices(input, kernel_size, stride or None, padding, dilation,
                                     ceil_mode)


def adaptive_max_pool1d(input, output_size):
    """``torch.adaptive_max_pool1d``: the values and their indices (``F``'s form returns
    the values alone unless asked)."""
    return F.adaptive_max_pool1d(input, output_size, return_indices=True)


# --- arithmetic and creation ---------------------------------------------------------------

def rsub(input, other, alpha=1):
    """``other - alpha * input`` (``other`` a tensor or a number)."""
    if isinstance(other, Tensor):
        return ew.sub(other, input, alpha=alpha)
    return ew.add(ew.neg(input) if alpha == 1 else ew.mul(input, -alpha), other)


def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None):
    """A 0-d tensor of ``s``, of the default float dtype unless ``dtype`` says."""
    return creation.tensor(s, dtype=dtype or dtypes.get_default_dtype(), device=device)


def fill(input, value):
    """A new tensor of ``input``'s shape and dtype, every element ``value`` (a number or a
    0-d tensor, whose gradient is the sum of the result's)."""
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"fill: the value must be a 0-d tensor, got shape "
                               f"{tuple(value.shape)}")
        return shape_ops.expand(value.to(input.dtype), tuple(input.shape)).clone()
    return creation.full_like(input, value)


def range(start, end=None, step=1, *, dtype=None, layout=None, device=None,
          requires_grad=False):
    """Deprecated in torch (``arange``'s end is excluded): ``start, start + step, ...`` up
    to ``end`` included, of the default float dtype unless ``dtype`` says."""
    warnings.warn("torch.range is deprecated and will be removed in a future release "
                  "because its behavior is inconsistent with Python's range builtin. "
                  "Instead, use torch.arange, which produces values in [start, end).",
                  UserWarning, stacklevel=2)
    if end is None:
        start, end = 0, start
    if step == 0 or (end - start) * step < 0:
        raise RuntimeError(f"range: upper bound and larger bound inconsistent with step sign "
                           f"(start={start}, end={end}, step={step})")
    count = math.floor((end - start) / step) + 1
    out = ew.add(ew.mul(creation.arange(count, dtype=dtypes.float64), step), start)
    return out.to(dtype or dtypes.get_default_dtype()).requires_grad_(requires_grad)


def split_with_sizes(input, split_sizes, dim=0):
    """``split`` by a list of sizes that must add up to the dim's length."""
    sizes = [int(s) for s in split_sizes]
    if sum(sizes) != input.shape[dim]:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to "
                           f"{input.shape[dim]} (input tensor's size at dimension {dim}), "
                           f"but got split_sizes={sizes}")
    return shape_ops.split(input, sizes, dim)


def argwhere(input):
    """The indices of the non-zero elements, one row each: ``nonzero(input)``."""
    return nonzero(input)


def unravel_index(indices, shape):
    """The coordinates in an array of ``shape`` of flat ``indices``: a tuple of int64
    tensors of ``indices``' shape (negative indices count from the end, as torch's)."""
    indices = indices if isinstance(indices, Tensor) else creation.tensor(indices)
    if indices.dtype.is_floating_point or indices.dtype == dtypes.bool_:
        raise TypeError(f"unravel_index: expected integer indices, got {indices.dtype}")
    shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
    total = math.prod(shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"unravel_index: 'shape' cannot have negative values, got {shape}")
    flat = indices.to(dtypes.int64)
    if flat.numel() and (int(flat.max()) >= total or int(flat.min()) < -total):
        raise ValueError(f"unravel_index: an index is out of bounds for shape {shape} "
                         f"(size {total})")
    flat = ew.remainder(flat, max(total, 1))
    coords = []
    for size in reversed(shape):
        coords.append(ew.remainder(flat, size))
        flat = ew.floor_divide(flat, size)
    return tuple(reversed(coords))


def chain_matmul(*matrices, out=None):
    """Deprecated in torch: the product of the matrices, left to right."""
    if len(matrices) == 1 and isinstance(matrices[0], (list, tuple)):
        matrices = tuple(matrices[0])
    result = matrices[0]
    for m in matrices[1:]:
        result = linalg.matmul(result, m)
    return result if out is None else out.copy_(result)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * sum_b batch1[b] @ batch2[b]`` (``input`` not read where
    ``beta`` is 0, as in torch: its NaN do not reach the result)."""
    product = red.sum(linalg.matmul(batch1, batch2), 0)
    if alpha != 1:
        product = ew.mul(product, alpha)
    if beta == 0:
        return shape_ops.expand(product, shapes.broadcast_shapes(
            tuple(input.shape), tuple(product.shape))).clone()
    return ew.add(input if beta == 1 else ew.mul(input, beta), product)


def ldexp(input, other):
    """``input * 2 ** other``."""
    return ew.mul(input, ew.pow(2.0, other if isinstance(other, Tensor)
                                else creation.tensor(other)))


def randint_like(input, low=0, high=None, *, dtype=None, layout=None, device=None,
                 generator=None, requires_grad=False, memory_format=None):
    """Random integers in ``[low, high)`` of ``input``'s shape (``randint_like(x, high)`` or
    ``(x, low, high)``), of ``input``'s dtype unless ``dtype`` says."""
    if high is None:
        low, high = 0, low
    return creation.randint(int(low), int(high), tuple(input.shape), generator=generator,
                            dtype=dtype or input.dtype)


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=None):
    """An uninitialised tensor of ``size``. The strides are checked, not kept: dualgraph
    lays a new tensor out contiguously (``stride()`` says so), and an uninitialised
    tensor's values do not depend on its layout."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"empty_strided: mismatch in length of strides and shape "
                           f"({size} and {stride})")
    return creation.empty(size, dtype=dtype, requires_grad=requires_grad)


# --- scatters into a copy: the view of the copy written ------------------------------------

def select_scatter(input, src, dim, index):
    """A copy of ``input`` whose ``select(dim, index)`` is ``src``."""
    out = input.clone()
    out.select(dim, index).copy_(src)
    return out


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """A copy of ``input`` whose slice ``start:end:step`` along ``dim`` is ``src``."""
    out = input.clone()
    dim = dim % max(input.ndim, 1)
    out[(slice(None),) * dim + (slice(start, end, step),)] = src
    return out


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """A copy of ``input`` whose ``diagonal(offset, dim1, dim2)`` is ``src``."""
    out = input.clone()
    out.diagonal(offset, dim1, dim2).copy_(src)
    return out


# --- NumPy-like ---------------------------------------------------------------------------

def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of a 1-D ``x``: column ``j`` is ``x ** (N - 1 - j)`` (``x **
    j`` if ``increasing``), by running products (no ``pow``: gradients at ``x = 0`` are
    finite)."""
    if x.ndim != 1:
        raise ValueError(f"vander: x must be a one-dimensional tensor, got shape "
                         f"{tuple(x.shape)}")
    n = x.shape[0] if N is None else int(N)
    if n < 0:
        raise ValueError(f"vander: N must be non-negative, got {N}")
    dtype = x.dtype if x.dtype.is_floating_point else dtypes.int64
    x = x.to(dtype)
    if n == 0:
        return creation.empty(x.shape[0], 0, dtype=dtype)
    columns = [creation.ones(x.shape[0], 1, dtype=dtype)]
    if n > 1:
        columns.append(shape_ops.expand(x.unsqueeze(1), (x.shape[0], n - 1)))
    out = red.cumprod(shape_ops.cat(columns, 1), 1)
    return out if increasing else shape_ops.flip(out, (1,))


def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """``torch.gradient``: NumPy's ``gradient`` along each of ``dim`` (every dim by
    default): central differences inside, one-sided ones (first or second order) at the
    two ends. ``spacing``: one number for every dim, one number per dim, or per dim a 1-D
    tensor of coordinates (then ``edge_order`` 1)."""
    dims = tuple(builtins.range(input.ndim)) if dim is None else (
        (dim,) if isinstance(dim, int) else tuple(dim))
    dims = tuple(d % input.ndim for d in dims)
    if isinstance(spacing, (int, float)):
        spacing = [spacing] * len(dims)
    spacing = list(spacing)
    if len(spacing) == 1 and len(dims) > 1 and not isinstance(spacing[0], Tensor):
        spacing = spacing * len(dims)
    if len(spacing) != len(dims):
        raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar or "
                           f"it's spacing and dim arguments to have the same length, but got "
                           f"a spacing argument of length {len(spacing)} and a dim argument "
                           f"of length {len(dims)}.")
    if edge_order not in (1, 2):
        raise RuntimeError(f"torch.gradient only supports edge_order=1 and edge_order=2, "
                           f"got {edge_order}")
    x = input if input.dtype.is_floating_point else input.to(dtypes.get_default_dtype())
    return tuple(_gradient_along(x, d, h, edge_order) for d, h in zip(dims, spacing))


def _along(x, d, start, stop=None):
    return x[(slice(None),) * d + (slice(start, stop),)]


def _gradient_along(x, d, h, edge_order):
    """One dim of :func:`gradient`."""
    n = x.shape[d]
    if n < edge_order + 1:
        raise RuntimeError(f"torch.gradient expected each dimension size to be at least "
                           f"edge_order+1, got size {n} along dim {d}")
    if isinstance(h, Tensor):
        if edge_order != 1:
            raise NotImplementedError("gradient: coordinates as spacing with edge_order=2 "
                                      "are not supported; give edge_order=1 or a number")
        shape = [1] * x.ndim
        shape[d] = n - 1
        steps = ew.sub(h[1:], h[:-1]).to(x.dtype).reshape(shape)
        left, right = _along(steps, d, 0, -1), _along(steps, d, 1)
        inner = ew.div(ew.add(ew.sub(ew.mul(ew.mul(left, left), _along(x, d, 2)),
                                     ew.mul(ew.mul(right, right), _along(x, d, 0, -2))),
                              ew.mul(ew.sub(ew.mul(right, right), ew.mul(left, left)),
                                     _along(x, d, 1, -1))),
                       ew.mul(ew.mul(left, right), ew.add(left, right)))
        first = ew.div(ew.sub(_along(x, d, 1, 2), _along(x, d, 0, 1)), _along(steps, d, 0, 1))
        last = ew.div(ew.sub(_along(x, d, -1), _along(x, d, -2, -1)), _along(steps, d, -1))
        return shape_ops.cat([first, inner, last], d)
    inner = ew.div(ew.sub(_along(x, d, 2), _along(x, d, 0, -2)), 2 * h)
    if edge_order == 1:
        first = ew.div(ew.sub(_along(x, d, 1, 2), _along(x, d, 0, 1)), h)
        last = ew.div(ew.sub(_along(x, d, -1), _along(x, d, -2, -1)), h)
    else:
        first = ew.div(ew.add(ew.sub(ew.mul(_along(x, d, 1, 2), 2.0),
                                     ew.mul(_along(x, d, 0, 1), 1.5)),
                              ew.mul(_along(x, d, 2, 3), -0.5)), h)
        last = ew.div(ew.add(ew.sub(ew.mul(_along(x, d, -1), 1.5),
                                    ew.mul(_along(x, d, -2, -1), 2.0)),
                             ew.mul(_along(x, d, -3, -2), 0.5)), h)
    return shape_ops.cat([first, inner, last], d)


# --- queries -------------------------------------------------------------------------------

def is_same_size(input, other) -> bool:
    return tuple(input.shape) == tuple(other.shape)


def is_nonzero(input) -> bool:
    """Whether a one-element tensor is not zero (more or fewer elements: an error, as
    torch's)."""
    if input.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous"
                           if input.numel() == 0 else
                           "Boolean value of Tensor with more than one value is ambiguous")
    return bool(input.item() != 0)


def is_signed(input) -> bool:
    """Whether the dtype holds negative values (floats and signed integers)."""
    return input.dtype.is_floating_point or input.dtype in (
        dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)


def is_complex(input) -> bool:
    """False: dualgraph has no complex dtypes."""
    return False


def is_conj(input) -> bool:
    """False: a real tensor is never a lazily conjugated view."""
    return False


def is_neg(input) -> bool:
    """False: a real tensor is never a lazily negated view."""
    return False


def real(input):
    """The tensor itself (torch's ``real`` of a real tensor)."""
    return input


conj = resolve_conj = resolve_neg = real


def is_anomaly_enabled() -> bool:
    """Whether anomaly detection (``autograd.detect_anomaly``) is on in this thread."""
    return bool(grad_mode.anomaly)


def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
    """Turn anomaly detection on or off for this thread (``autograd.set_detect_anomaly``)."""
    set_detect_anomaly(enabled, check_nan)


def get_default_device():
    """The device new tensors are made on: the CPU (dualgraph's only device)."""
    from .devices import device
    return device("cpu")


def set_default_device(device) -> None:
    """Accepts the CPU (or None); any other device raises the error ``device=`` gives."""
    from .devices import device as make
    if device is not None and make(device).type != "cpu":
        raise RuntimeError(f"set_default_device({device!r}): dualgraph runs on the CPU only")


def adjoint(input):
    """The conjugate transpose of the last two dims: their transpose, for real dtypes."""
    if input.ndim < 2:
        raise RuntimeError(f"adjoint: tensor must have at least 2 dimensions, got "
                           f"{input.ndim}")
    return input.transpose(-2, -1)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """``obj`` (a tensor, an array, a nested sequence, a number) as a tensor: the tensor
    itself where no conversion is asked (``copy`` not True), else a new one."""
    if copy is False and isinstance(obj, Tensor) and dtype is not None and dtype != obj.dtype:
        raise ValueError(f"asarray: copy=False, but converting {obj.dtype} to {dtype} "
                         "needs a copy")
    out = creation.tensor(obj, dtype=dtype, device=device) if copy else creation.as_tensor(
        obj, dtype=dtype, device=device)
    if isinstance(obj, Tensor) and copy:
        out = out.detach()
    return out.requires_grad_() if requires_grad else out


def histogram(input, bins=100, *, range=None, weight=None, density=False):
    """The histogram of ``input``'s values, as ``(hist, bin_edges)`` (``bins`` a count or
    a 1-D tensor of edges; ``weight`` per value; ``density`` normalised to integrate to
    one), as NumPy's and torch's: no gradient, an eager computation (a data-dependent
    one: a graph break where captured)."""
    data = input._concrete("histogram()").reshape(-1)
    edges = bins._concrete("histogram()") if isinstance(bins, Tensor) else int(bins)
    weights = None if weight is None else weight._concrete("histogram()").reshape(-1)
    hist, edges = np.histogram(data, edges, range=range, weights=weights, density=density)
    return (creation.tensor(hist, dtype=input.dtype),
            creation.tensor(edges, dtype=input.dtype))


def typename(obj) -> str:
    """A tensor's type string (``"dualgraph.FloatTensor"``), else the object's qualified
    class name."""
    if isinstance(obj, Tensor):
        return obj.type()
    cls = obj if isinstance(obj, type) else type(obj)
    module = cls.__module__
    return cls.__qualname__ if module in ("builtins", None) else f"{module}.{cls.__qualname__}"


_INTEROP = [1]


def get_num_interop_threads() -> int:
    """The inter-op thread count: dualgraph runs one op at a time (its parallelism is
    within ops: ``set_num_threads``); what ``set_num_interop_threads`` set."""
    return _INTEROP[0]


def set_num_interop_threads(n: int) -> None:
    """Recorded (ops run one at a time); a count below one raises, as torch's."""
    if int(n) < 1:
        raise RuntimeError(f"set_num_interop_threads: expected a positive number of threads, "
                           f"got {n}")
    _INTEROP[0] = int(n)


def set_flush_denormal(mode: bool) -> bool:
    """False: dualgraph does not switch the CPU to flushing denormals (NumPy's and Numba's
    loops keep IEEE behaviour), which torch's return value says the same way."""
    return False


_WARN_ALWAYS = [False]


def set_warn_always(b: bool) -> None:
    """Whether warnings torch gives once per process should be given every time (kept for
    code that sets it; dualgraph's warnings follow Python's filters)."""
    _WARN_ALWAYS[0] = bool(b)


def is_warn_always_enabled() -> bool:
    return _WARN_ALWAYS[0]


def is_autocast_cpu_enabled() -> bool:
    """``is_autocast_enabled("cpu")`` (torch's older spelling)."""
    return is_autocast_enabled("cpu")


def get_autocast_cpu_dtype():
    """``get_autocast_dtype("cpu")`` (torch's older spelling)."""
    return get_autocast_dtype("cpu")


# --- Tensor methods --------------------------------------------------------------------------

def _imag(self):
    raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")


def _conjugate_transpose(self):
    """``x.H``: torch's for 0-d and 2-d tensors."""
    if self.ndim not in (0, 2):
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got "
                           f"{self.ndim}-D tensor.")
    return self if self.ndim == 0 else self.transpose(0, 1)


def _new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad=False,
                       layout=None, pin_memory=None):
    return empty_strided(size, stride, dtype=dtype or self.dtype,
                         requires_grad=requires_grad)


METHODS = {
    **{name + "_": inplace(getattr(ew, name))
       for name in ("eq", "ne", "lt", "le", "gt", "ge", "hypot")},
    "addmm_": inplace(linalg.addmm), "baddbmm_": inplace(linalg.baddbmm),
    "addbmm": addbmm, "addbmm_": inplace(addbmm), "ldexp": ldexp, "ldexp_": inplace(ldexp),
    "hardshrink": F.hardshrink, "prelu": F.prelu,
    "is_same_size": is_same_size, "is_nonzero": is_nonzero, "is_signed": is_signed,
    "is_complex": is_complex, "is_conj": is_conj, "is_neg": is_neg,
    "conj": conj, "resolve_conj": resolve_conj, "resolve_neg": resolve_neg,
    "real": property(real), "imag": property(_imag),
    "adjoint": adjoint, "mH": property(adjoint), "H": property(_conjugate_transpose),
    "argwhere": argwhere, "split_with_sizes": split_with_sizes,
    "new_empty_strided": _new_empty_strided,
    "select_scatter": select_scatter, "slice_scatter": slice_scatter,
    "diagonal_scatter": diagonal_scatter,
}


def install_methods() -> None:
    """Bind :data:`METHODS` on ``Tensor`` (torch's method spellings of the functions above
    and of ops dualgraph has under other names)."""
    for name, fn in METHODS.items():
        setattr(Tensor, name, fn)
