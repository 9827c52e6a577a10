"""``nn.init``: fill a tensor in place with values from a distribution, as ``torch.nn.init``.

Every function writes into the tensor's existing storage under ``no_grad`` (so parameters
keep their identity and optimizers keep working) and returns the tensor. Random ones take
``generator=`` (a ``dg.Generator``; the global generator when None). Samples are drawn in
float64 and rounded to the tensor's dtype. The streams are NumPy's, so for the same seed
the values differ from torch's; the distributions are the same.

>>> import dualgraph as dg
>>> w = dg.empty(3, 5)
>>> _ = dg.nn.init.xavier_uniform_(w, gain=dg.nn.init.calculate_gain("relu"))
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ..autograd import no_grad
from ..ops.inplace import commit_inplace
from ..ops.random import rng_of
from ..tensor import Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_",
           "zeros_", "eye_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_", "orthogonal_", "dirac_"]


def _write(tensor: Tensor, values) -> Tensor:
    """Copy ``values`` (broadcast, cast to the tensor's dtype) into ``tensor``'s storage."""
    values = np.broadcast_to(np.asarray(values), tuple(tensor.shape))
    with no_grad():
        return commit_inplace(tensor, Tensor._make(values))


def _shape(tensor: Tensor) -> tuple:
    return tuple(tensor.shape)


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for a nonlinearity (scales the std of the init so activations
    keep their variance): 1 for linear/conv/sigmoid, 5/3 for tanh, sqrt(2) for relu,
    sqrt(2 / (1 + slope**2)) for leaky_relu (slope ``param``, default 0.01), 3/4 for selu."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d")
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight shaped (out, in, *kernel): in/out times the kernel
    size."""
    shape = _shape(tensor)
    if len(shape) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than "
                         "2 dimensions")
    receptive_field = math.prod(shape[2:])
    return shape[1] * receptive_field, shape[0] * receptive_field


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    valid = ["fan_in", "fan_out"]
    if mode not in valid:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with samples from U(a, b)."""
    return _write(tensor, rng_of(generator).uniform(a, b, _shape(tensor)))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with samples from N(mean, std**2)."""
    return _write(tensor, rng_of(generator).normal(mean, std, _shape(tensor)))


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator=None) -> Tensor:
    """Fill with N(mean, std**2) samples conditioned on a <= x <= b (absolute bounds, as
    torch). Drawn by rejection, so bounds far out in a tail are refused."""
    def cdf(x):
        return 0.5 * (1 + math.erf((x - mean) / (std * math.sqrt(2))))
    accept = cdf(b) - cdf(a)
    if accept < 1e-4:
        raise ValueError(
            f"trunc_normal_: the interval [{a}, {b}] holds only {accept:.2e} of the mass of "
            f"N({mean}, {std}**2); choose bounds nearer the mean")
    rng = rng_of(generator)
    n = math.prod(_shape(tensor))
    kept = np.empty(0)
    while kept.size < n:  # each round expects to fill what is left, with some margin
        draw = rng.normal(mean, std, int((n - kept.size) / accept * 1.2) + 16)
        kept = np.concatenate([kept, draw[(draw >= a) & (draw <= b)]])
    return _write(tensor, kept[:n].reshape(_shape(tensor)))


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _write(tensor, val)


def ones_(tensor: Tensor) -> Tensor:
    return _write(tensor, 1)


def zeros_(tensor: Tensor) -> Tensor:
    return _write(tensor, 0)


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-D tensor with the identity (ones on the diagonal of a rectangle)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _write(tensor, np.eye(*_shape(tensor)))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3-, 4- or 5-D convolution weight with the Dirac delta, as ``nn.init.dirac_``:
    a one at the kernel's centre linking output channel ``d`` of each of the ``groups`` to
    input channel ``d`` (as many as both have), so the conv passes its input through (an
    identity branch's or a residual-free net's initialisation)."""
    shape = _shape(tensor)
    if len(shape) not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if shape[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    per_group = shape[0] // groups
    values = np.zeros(shape)
    centre = tuple(k // 2 for k in shape[2:])
    for g in range(groups):
        for d in range(min(per_group, shape[1])):
            values[(g * per_group + d, d) + centre] = 1.0
    return _write(tensor, values)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot & Bengio (2010): U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot & Bengio (2010): N(0, std**2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def _kaiming_std(tensor: Tensor, a, mode: str, nonlinearity: str) -> float | None:
    """He et al. (2015): std = gain / sqrt(fan); None for an empty tensor (nothing to do)."""
    if 0 in _shape(tensor):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return None
    fan = _calculate_correct_fan(tensor, mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    """U(-bound, bound) with bound = sqrt(3) * gain / sqrt(fan); ``a`` is the leaky_relu
    slope, ``mode`` picks fan_in (keeps forward variance) or fan_out (backward)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    if std is None:
        return tensor
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    """N(0, std**2) with std = gain / sqrt(fan) (see :func:`kaiming_uniform_`)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    if std is None:
        return tensor
    return normal_(tensor, 0.0, std, generator)


def orthogonal_(tensor: Tensor, gain: float = 1, generator=None) -> Tensor:
    """Saxe et al. (2013): a (semi-)orthogonal matrix from the QR decomposition of a
    Gaussian one, signs fixed so the result is uniformly distributed; dims after the first
    are flattened."""
    shape = _shape(tensor)
    if len(shape) < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if 0 in shape:
        return tensor
    rows = shape[0]
    cols = math.prod(shape[1:])
    flat = rng_of(generator).standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))  # QR's sign choice is arbitrary; this makes it uniform
    if rows < cols:
        q = q.T
    return _write(tensor, gain * q.reshape(shape))
